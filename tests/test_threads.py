"""Transforms in several threads at once give the single-threaded results.

The nesting level of a transform must be per thread: with a module-level counter, a trace closed
by another thread let a nested transform here reuse its outer trace's level, and the inner
gradient came back as 0 (issue 14). Each thread has its own interpreter stack (core/trace.py).
"""
from __future__ import annotations

import sys
import threading

import numpy as np
import wengert as wg
import wengert.numpy as wnp

def test_a_nested_gradient_is_right_when_another_thread_closes_its_trace_in_between():
    b_open, a_open, b_done = (threading.Event() for _ in range(3))
    results = {}

    def f_b(x):
        b_open.set()
        a_open.wait(5)
        return x * x

    def f_a(a):
        a_open.set()
        b_done.wait(5)     # thread B's trace closes while this one is open
        return a * wg.grad(lambda b: a * b * b)(1.5)

    def run_b():
        results["b"] = wg.grad(f_b)(3.0)
        b_done.set()

    thread = threading.Thread(target=run_b)
    thread.start()
    b_open.wait(5)
    results["a"] = wg.grad(f_a)(2.0)
    thread.join(5)
    assert results["b"] == 6.0
    assert results["a"] == 12.0   # d/da (a * 3a) at a = 2 (single-threaded value)


def _workloads():
    x = np.linspace(0.1, 1.0, 5)

    def loss(w):
        return wnp.sum(wnp.tanh(w * x) ** 2)

    return {
        "grad": lambda: wg.grad(loss)(0.7),
        "nested grad": lambda: wg.grad(lambda a: a * wg.grad(lambda b: wnp.sum(a * b * b * x))(1.5))(2.0),
        "grad of grad": lambda: wg.grad(wg.grad(loss))(0.3),
        "vmap of grad": lambda: wg.vmap(wg.grad(loss))(np.array([0.1, 0.5, 0.9])),
        "jvp": lambda: wg.jvp(lambda v: wnp.sin(v) * v, (x,), (np.ones(5),))[1],
        "hessian": lambda: wg.hessian(lambda v: wnp.sum(wnp.sin(v) * v ** 2))(x[:3]),
    }


def _interleaved(wait):
    """Four transforms whose traces interleave as ``wait(k, stage)`` orders them: threads 0 and 1
    open their (plain) transforms first and close them while threads 2 and 3, opened after them,
    are between their outer and inner transforms. ``wait`` does nothing single-threaded."""
    x = np.linspace(0.1, 1.0, 5)

    def plain_grad(w):
        wait(0, "opened")
        return wnp.sum(wnp.tanh(w * x) ** 2)

    def plain_jvp(v):
        wait(1, "opened")
        return wnp.sin(v) * v

    def nested_grad(a):
        wait(2, "opened")
        return a * wg.grad(lambda b: wnp.sum(a * b * b * x))(1.5)

    def vmap_inside_grad(a):
        wait(3, "opened")
        return wnp.sum(wg.vmap(lambda v: wg.grad(lambda b: a * b * b * v)(1.5))(x))

    return [lambda: wg.grad(plain_grad)(0.7),
            lambda: wg.jvp(plain_jvp, (x,), (np.ones(5),))[1],
            lambda: wg.grad(nested_grad)(2.0),
            lambda: wg.grad(vmap_inside_grad)(2.0)]


def test_transforms_in_several_threads_match_single_threaded_results():
    expected = [run() for run in _interleaved(lambda k, stage: None)]
    assert all(np.all(e != 0) for e in expected)

    # 1. a fixed interleaving: open 0, 1, 2, 3 in turn; close 0 and 1; then 2 and 3 open their inner transforms
    opened = [threading.Event() for _ in range(4)]
    closed = [threading.Event() for _ in range(2)]

    def wait(k, stage):
        if k > 0:
            opened[k - 1].wait(5)
        opened[k].set()
        opened[3].wait(5)
        if k >= 2:
            closed[0].wait(5)
            closed[1].wait(5)

    runs = _interleaved(wait)
    got, errors = [None] * 4, []

    def worker(k):
        try:
            got[k] = runs[k]()
        except Exception as e:   # reported below: a thread's failure must fail the test
            errors.append((k, repr(e)))
        finally:
            if k < 2:
                closed[k].set()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    for k in range(4):
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-12, err_msg=f"thread {k}")

    # 2. a random mix, threads switching often
    workloads = _workloads()
    expected = {name: run() for name, run in workloads.items()}
    names = sorted(workloads)
    wrong = []
    start = threading.Barrier(4)

    def mixed(k):
        start.wait(5)
        for i in range(60):
            name = names[(i + k) % len(names)]
            try:
                value = workloads[name]()
            except Exception as e:
                errors.append((name, repr(e)))
                continue
            if not np.allclose(value, expected[name], rtol=1e-12, atol=0):
                wrong.append(name)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=mixed, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[:3]
    assert not wrong, f"{len(wrong)} of 240 results differ from single-threaded ones: {sorted(set(wrong))}"

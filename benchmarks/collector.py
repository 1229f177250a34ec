"""The cyclic garbage collector during transforms: a long tape's speed, and cyclic garbage's memory.

A transform records many small tuples and tracers; Python's collector, left at its defaults,
rescans them as the tape grows. wengert used to switch the collector off while a transform ran
(fast, but cyclic garbage made inside the function then piled up until the transform returned);
it now keeps the young collections, which collect cyclic garbage the function makes and drops, and
makes full collections (which rescan the tape) a hundred times rarer (core/trace.py
``collector_paused``). This script compares, side by side in one run (CPU-time medians of
interleaved repeats):

* ``off``: the collector disabled during the transform (the old policy);
* ``default``: the collector at Python's default thresholds throughout;
* ``full/100``: full collections ten times rarer (wengert's policy until 1000 replaced it);
* ``wengert``: wengert's policy as it is now (``FULL_COLLECTION_EVERY``).

Workloads: the gradient of a 100,000-entry tape (scalar operations in a Python loop), and a
function that makes a reference cycle holding a 1 MB array in each iteration, garbage in the next
one, with ``inner`` recorded operations while each cycle is alive (peak memory by tracemalloc):
300 iterations of 300 (cycles that die young), and 100 of 3,000 and 60 of 10,000 (cycles that
outlive middle collections and wait for a full one).

    python benchmarks/collector.py [--quick]
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
import tracemalloc

import numpy as np

import wengert as wg
from wengert.core import trace as _trace
from wengert.transforms import reverse as _reverse


@contextlib.contextmanager
def _off():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def _default():
    yield


def _full_every(every):
    """wengert's policy with full collections one per ``every`` middle ones."""
    @contextlib.contextmanager
    def policy():
        kept = _trace.FULL_COLLECTION_EVERY
        _trace.FULL_COLLECTION_EVERY = every
        try:
            with _trace.collector_paused():
                yield
        finally:
            _trace.FULL_COLLECTION_EVERY = kept
    return policy


POLICIES = {"off": _off, "default": _default, "full/100": _full_every(100), "wengert": _trace.collector_paused}


def long_tape(n):
    x = np.linspace(0.1, 1.0, 8)

    def f(x):
        y = x[0]
        for i in range(n):
            y = y * 0.999 + x[i % 8]
        return y

    return lambda: wg.grad(f)(x)


def cyclic_garbage(iterations, inner, megabytes=1.0):
    size = int(megabytes * 2 ** 20 / 8)

    def f(x):
        total = x * 0.0
        for _ in range(iterations):
            node = {"data": np.ones(size)}
            node["self"] = node            # a reference cycle holding 1 MB, garbage next iteration
            for _ in range(inner):
                total = total * 1.0
            total = total + x
        return total

    return f


def _with_policy(name, run):
    _reverse.collector_paused = POLICIES[name]
    try:
        return run()
    finally:
        _reverse.collector_paused = _trace.collector_paused


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, repeats = (5_000, 3) if args.quick else (100_000, 7)
    garbage = ((30, 30),) if args.quick else ((300, 300), (100, 3_000), (60, 10_000))
    print(f"gc thresholds (Python's defaults): {gc.get_threshold()}")

    # 1. speed of a long tape's gradient
    run = long_tape(n)
    times = {name: [] for name in POLICIES}
    for _ in range(repeats):
        for name in POLICIES:
            gc.collect()
            start = time.process_time()
            _with_policy(name, run)
            times[name].append(time.process_time() - start)
    print(f"\ngrad of a {n:,}-entry tape (CPU time, median of {repeats}, interleaved)")
    base = statistics.median(times["off"])
    for name in POLICIES:
        t = statistics.median(times[name])
        print(f"  {name:8s} {t * 1e3:9.1f} ms   {t / base:5.2f}x the collector off")

    # 2. peak memory with cyclic garbage made inside f
    for iterations, inner in garbage:
        f = cyclic_garbage(iterations, inner)
        peaks = {}
        for name in POLICIES:
            gc.collect()
            tracemalloc.start()
            _with_policy(name, lambda: wg.grad(f)(1.0))
            peaks[name] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        print(f"\ngrad's peak memory, {iterations} iterations each leaving a 1 MB cycle alive for {inner} "
              "operations (tracemalloc)")
        for name, peak in peaks.items():
            print(f"  {name:8s} {peak / 2 ** 20:9.1f} MB")


if __name__ == "__main__":
    main()

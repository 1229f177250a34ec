"""Transforms under vmap against a Python loop over the examples, measured side by side (interleaved).

    python benchmarks/vmap_transforms.py [--repeat 15] [--batch 64]

Rows (medians in microseconds; "loop" calls the transform once per example):
  * per-example gradients, ``vmap(grad(loss), in_axes=(None, 0, 0))``: rewritten as one gradient of
    the vmapped loss;
  * a gradient taken inside the vmapped function, ``vmap(lambda x: grad(f)(x) * 2)``: a tape that
    records batched values;
  * ``vmap(jacobian(f))``, ``vmap(hessian(f))``: per-example Jacobians and Hessians;
  * ``vmap(hvp)`` with batched points and vectors.
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from timing import interleaved_medians

import wengert as wg
import wengert.numpy as wnp


def loss(params, x, y):
    hidden = wnp.tanh(x @ params["w1"] + params["b1"])
    return wnp.sum((hidden @ params["w2"] - y) ** 2)


def curved(v):
    return wnp.sum(wnp.tanh(v) ** 2 * wnp.sin(v[::-1])) + wnp.dot(v, v) * wnp.exp(v[0] * 0.1)


def _measure(cases, repeat):
    """Median time of each case (microseconds), cases interleaved so load skews them alike."""
    return interleaved_medians(cases, repeat, time.perf_counter, scale=1e6)


def rows(repeat, batch):
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((8, 16)) * 0.3, "b1": np.zeros(16), "w2": rng.standard_normal((16, 1)) * 0.3}
    xs, ys = rng.standard_normal((batch, 8)), rng.standard_normal((batch, 1))
    points, vectors = rng.standard_normal((batch, 6)), rng.standard_normal((batch, 6))

    def inside(v):
        return wg.grad(curved)(v) * 2.0

    def hvp_at(v, u):
        return wg.hvp(curved, (v,), (u,))

    cases = [
        ("per-example gradients (MLP)", wg.vmap(wg.grad(loss), in_axes=(None, 0, 0)), (params, xs, ys),
         lambda: [wg.grad(loss)(params, x, y) for x, y in zip(xs, ys)]),
        ("grad inside vmap", wg.vmap(inside), (points,), lambda: [inside(p) for p in points]),
        ("jacobian of grad", wg.vmap(wg.jacobian(wg.grad(curved))), (points,),
         lambda: [wg.jacobian(wg.grad(curved))(p) for p in points]),
        ("hessian", wg.vmap(wg.hessian(curved)), (points,), lambda: [wg.hessian(curved)(p) for p in points]),
        ("hvp", wg.vmap(hvp_at), (points, vectors), lambda: [hvp_at(p, u) for p, u in zip(points, vectors)]),
    ]
    out = []
    for label, batched, args, loop in cases:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = batched(*args)
        fell_back = bool(caught)
        _check_against_loop(label, result, loop())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = _measure({"vmap": lambda: batched(*args), "loop": loop}, repeat)
        out.append((label, t["vmap"], t["loop"], fell_back))
    return out


def _check_against_loop(label, batched, looped):
    """The vmap result, example by example, equals the loop's (a benchmark of a wrong answer is void)."""
    leaves, treedef = wg.tree.flatten(batched)
    per_example = [wg.tree.flatten(r)[0] for r in looped]
    assert treedef == wg.tree.flatten(looped[0])[1], label
    for k, leaf in enumerate(leaves):
        expected = np.stack([np.asarray(r[k]) for r in per_example])
        assert np.allclose(leaf, expected, rtol=1e-9, atol=1e-12), f"{label}: vmap disagrees with the loop"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    print(f"batch of {args.batch}, medians of {args.repeat} interleaved runs, wall clock, microseconds\n")
    print("| transform | vmap | loop | loop / vmap | vmap fell back to a loop |")
    print("|---|---|---|---|---|")
    for label, vm, lp, fell_back in rows(args.repeat, args.batch):
        print(f"| {label} | {vm:.0f} | {lp:.0f} | {lp / vm:.1f}x | {'yes' if fell_back else 'no'} |")


if __name__ == "__main__":
    main()

"""Seed 002's MLP (784-300-100-10, sigmoid hidden layers, softmax cross-entropy), float32, batch 1
and 128: what the fused loss, the engine's rewrites and manual ("hybrid") gradients cost.

    python benchmarks/mlp_fused.py                 # prints a table; --repeat N, --json PATH

Contestants, each timed as ``value_and_grad`` with respect to the six parameter arrays:

* ``fused``: the loss is ``wengert.nn.softmax_cross_entropy(logits, targets)``;
* ``unfused``: the loss written out as the seed writes it, ``-sum(y * log(exp(z) / sum(exp(z))))``,
  which the engine rewrites to ``log_softmax`` as it records it (the default);
* ``unfused, rewrites off``: the same code with ``wg.config.update("rewrites", False)``;
* ``hybrid``: each layer a function with a hand-written gradient (``wg.custom_vjp`` for the input
  layer, ``wg.op`` for the others), chained by the engine, and the fused loss;
* ``hand``: value and gradient by hand in NumPy (the reference the others are checked against).

Timings are medians of repeated calls taken round-robin (so machine load hits all alike), on one
thread. The claim checked: the unfused loss's gradient costs within 10% of the fused one's.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import wengert as wg  # noqa: E402
import wengert.nn as wnn  # noqa: E402
import wengert.numpy as wnp  # noqa: E402

F32 = np.float32


# --- the model, as a user writes it ------------------------------------------------------------------
def sigmoid(x):
    return 1 / (1 + wnp.exp(-x))


def forward(params, x):
    W1, b1, W2, b2, W3, b3 = params
    h1 = sigmoid(x @ W1 + b1)
    h2 = sigmoid(h1 @ W2 + b2)
    return h2 @ W3 + b3


def softmax(z):                                   # seed 002: exp y / sumElements (exp y), no shift
    e = wnp.exp(z)
    return e / wnp.sum(e, axis=1, keepdims=True)


def loss_unfused(params, x, y):                   # crossEntropy y . softMax
    return -wnp.sum(y * wnp.log(softmax(forward(params, x)))) / x.shape[0]


def loss_fused(params, x, y):
    return wnn.softmax_cross_entropy(forward(params, x), y)


# --- the hybrid: layers with hand-written gradients, chained by the engine ----------------------
def _input_layer(x, W, b):                        # x is data: nondiff, so no gradient is computed for it
    return 1 / (1 + np.exp(-(np.dot(x, W) + b)))


def _input_layer_fwd(x, W, b):
    h = _input_layer(x, W, b)
    return h, h


def _input_layer_bwd(x, h, g):
    d = g * h * (1 - h)
    return np.dot(x.T, d), d.sum(axis=0)


input_layer = wg.custom_vjp(_input_layer, nondiff_argnums=(0,))
input_layer.defvjp(_input_layer_fwd, _input_layer_bwd)


@wg.op
def hidden_layer(x, W, b):
    h = 1 / (1 + np.exp(-(np.dot(x, W) + b)))

    def pullback(g):
        d = g * h * (1 - h)
        return np.dot(d, W.T), np.dot(x.T, d), d.sum(axis=0)

    return h, pullback


@wg.op
def output_layer(x, W, b):
    def pullback(g):
        return np.dot(g, W.T), np.dot(x.T, g), g.sum(axis=0)

    return np.dot(x, W) + b, pullback


def loss_hybrid(params, x, y):
    W1, b1, W2, b2, W3, b3 = params
    h1 = input_layer(x, W1, b1)
    h2 = hidden_layer(h1, W2, b2)
    return wnn.softmax_cross_entropy(output_layer(h2, W3, b3), y)


# --- by hand ------------------------------------------------------------------------------------------
def hand(params, x, y):
    W1, b1, W2, b2, W3, b3 = params
    n = x.shape[0]
    h1 = 1 / (1 + np.exp(-(np.dot(x, W1) + b1)))
    h2 = 1 / (1 + np.exp(-(np.dot(h1, W2) + b2)))
    z = np.dot(h2, W3) + b3
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    value = -np.sum(y * (z - np.log(s))) / n
    d3 = (e / s * y.sum(axis=1, keepdims=True) - y) / n
    d2 = np.dot(d3, W3.T) * h2 * (1 - h2)
    d1 = np.dot(d2, W2.T) * h1 * (1 - h1)
    return value, (np.dot(x.T, d1), d1.sum(axis=0), np.dot(h1.T, d2), d2.sum(axis=0),
                   np.dot(h2.T, d3), d3.sum(axis=0))


# --- running ------------------------------------------------------------------------------------------
def make(batch, seed=0):
    rng = np.random.default_rng(seed)
    sizes = [784, 300, 100, 10]
    params = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        params += [(rng.standard_normal((m, n)) * np.sqrt(2.0 / (m + n))).astype(F32), np.zeros(n, F32)]
    x = rng.random((batch, 784), dtype=F32)
    y = np.eye(10, dtype=F32)[rng.integers(0, 10, batch)]
    return tuple(params), x, y


def _with_rewrites(fn, enabled):
    def run(*args):
        with wg.config.override(rewrites=enabled):
            return fn(*args)
    return run


def contestants():
    vg = lambda f: wg.value_and_grad(f)            # noqa: E731
    return {
        "fused": vg(loss_fused),
        "unfused": vg(loss_unfused),
        "unfused, rewrites off": _with_rewrites(vg(loss_unfused), False),
        "hybrid": vg(loss_hybrid),
        "hand": hand,
    }


def check(fns, args):
    ref_value, ref_grads = hand(*args)
    for name, fn in fns.items():
        value, grads = fn(*args)
        scale = max(float(np.max(np.abs(g))) for g in ref_grads)
        for g, r in zip(grads, ref_grads):
            if g.dtype != F32 or not np.allclose(g, r, rtol=1e-3, atol=1e-4 * scale):
                raise AssertionError(f"{name}: gradient disagrees with the hand-written one")
        if not np.isclose(value, ref_value, rtol=1e-4):
            raise AssertionError(f"{name}: value {value} != {ref_value}")


def measure(fns, args, repeat, inner):
    samples = {name: [] for name in fns}
    for fn in fns.values():                        # warm-up
        for _ in range(3):
            fn(*args)
    gc.collect()
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn(*args)
            samples[name].append((time.perf_counter() - t0) / inner)
    return samples


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=41, help="timed rounds per contestant (median taken)")
    parser.add_argument("--batches", default="1,128")
    parser.add_argument("--json", help="write every sample here")
    args = parser.parse_args(argv)
    fns = contestants()
    results = {}
    for batch in [int(b) for b in args.batches.split(",")]:
        data = make(batch)
        check(fns, data)
        inner = 20 if batch == 1 else 3
        samples = measure(fns, data, args.repeat, inner)
        medians = {name: statistics.median(s) for name, s in samples.items()}
        results[batch] = {"median_s": medians, "samples_s": samples}
        fused = medians["fused"]
        print(f"\nbatch {batch} (float32, value_and_grad w.r.t. the 6 parameter arrays, "
              f"median of {args.repeat} rounds x {inner} calls)")
        print(f"  {'contestant':<24}{'median':>12}{'/ fused':>10}{'/ hand':>10}")
        for name, m in medians.items():
            print(f"  {name:<24}{m * 1e6:>10.1f}us{m / fused:>10.3f}{m / medians['hand']:>10.3f}")
        ratio = medians["unfused"] / fused
        print(f"  unfused / fused = {ratio:.3f} ({'within' if ratio <= 1.10 else 'NOT within'} 10%); "
              f"hybrid / fused (automatic) = {medians['hybrid'] / fused:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(k): v for k, v in results.items()}, f, indent=1)
    return results


if __name__ == "__main__":
    main()

"""Seed 000 (W1, pairwise cosine similarity + softmax) written with vmap, against the
hand-vectorized form, both under wengert: forward and value_and_grad, at both W1 sizes.

    python benchmarks/vmap_seed000.py [--repeat 30]

The user writes the kernel for two vectors and maps it over the columns of b, the columns of a and
the batch axis:

    cosinesim(u, v) = dot(u, v) / (norm(u) * norm(v))
    S = vmap(vmap(vmap(cosinesim, (1, None)), (None, 1), out_axes=1), (2, 2), out_axes=2)(b, a)
    P = softmax(S, axis=0)

Shapes (as in benchmarks/workloads.py): a (W, R, B), b (W, N, B), S[i, j, k] = cos(b[:, i, k], a[:, j, k]);
float32; the loss is sum(P * wts) with fixed random weights.

The inner vmaps are fused into the outer level (one batching rule call per operation, see
wengert/transforms/batching.py); the "unfused" columns time the same code with fusion switched off
(``batching.FUSE = False``: every vmap its own level, as before fusion existed), in the same run.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import wengert as wg
import wengert.numpy as wnp
from wengert.transforms import batching

SIZES = [("seed", (16, 64, 4, 16)), ("16x", (16, 64, 4, 256))]   # N, W, R, B


def softmax(x, axis):
    e = wnp.exp(x - wnp.max(x, axis=axis, keepdims=True))
    return e / wnp.sum(e, axis=axis, keepdims=True)


def mynorm(x):
    return wnp.sqrt(wnp.sum(x ** 2))


def cosinesim(u, v):
    return wnp.dot(u, v) / (mynorm(u) * mynorm(v))


pairwise_vmapped = wg.vmap(wg.vmap(wg.vmap(cosinesim, in_axes=(1, None)), in_axes=(None, 1), out_axes=1),
                           in_axes=(2, 2), out_axes=2)


def vmapped(a, b, wts):
    return wnp.sum(softmax(pairwise_vmapped(b, a), axis=0) * wts)


def vectorized(a, b, wts):
    dots = wnp.einsum("wik,wjk->ijk", b, a)
    na = wnp.sqrt(wnp.sum(a ** 2, axis=0))            # (R, B)
    nb = wnp.sqrt(wnp.sum(b ** 2, axis=0))            # (N, B)
    S = dots / (nb[:, None, :] * na[None, :, :])
    return wnp.sum(softmax(S, axis=0) * wts)


def _best(fn, repeat):
    """Fastest of ``repeat`` timings (after one warm-up call), in microseconds: the least disturbed
    by other load on the machine."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.min(times)) * 1e6


def run(repeat=30):
    rows = []
    for label, (N, W, R, B) in SIZES:
        rng = np.random.default_rng(0)
        a = rng.random((W, R, B), dtype=np.float32)
        b = rng.random((W, N, B), dtype=np.float32)
        wts = rng.standard_normal((N, R, B)).astype(np.float32)
        vg_vec = wg.value_and_grad(vectorized, argnums=(0, 1))
        vg_vmap = wg.value_and_grad(vmapped, argnums=(0, 1))
        v1, (ga1, gb1) = vg_vec(a, b, wts)
        v2, (ga2, gb2) = vg_vmap(a, b, wts)
        assert np.allclose(v1, v2, rtol=1e-4) and np.allclose(ga1, ga2, rtol=1e-3, atol=1e-5) \
            and np.allclose(gb1, gb2, rtol=1e-3, atol=1e-5)
        times = {}
        # interleaved, so that machine load skews all forms alike
        for _ in range(3):
            for name, fn, fuse in (("fwd vectorized", lambda: vectorized(a, b, wts), True),
                                   ("fwd vmap", lambda: vmapped(a, b, wts), True),
                                   ("fwd unfused", lambda: vmapped(a, b, wts), False),
                                   ("vg vectorized", lambda: vg_vec(a, b, wts), True),
                                   ("vg vmap", lambda: vg_vmap(a, b, wts), True),
                                   ("vg unfused", lambda: vg_vmap(a, b, wts), False)):
                batching.FUSE = fuse
                try:
                    times.setdefault(name, []).append(_best(fn, repeat))
                finally:
                    batching.FUSE = True
        t = {k: min(v) for k, v in times.items()}
        rows.append((label, (N, W, R, B), t))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    print("| size | N,W,R,B | forward: vectorized / vmap / unfused (us) | ratio (unfused) "
          "| value_and_grad: vectorized / vmap / unfused (us) | ratio (unfused) |")
    print("|---|---|---|---|---|---|")
    for label, dims, t in run(args.repeat):
        print(f"| {label} | {','.join(map(str, dims))} | "
              f"{t['fwd vectorized']:.0f} / {t['fwd vmap']:.0f} / {t['fwd unfused']:.0f} | "
              f"{t['fwd vmap'] / t['fwd vectorized']:.2f}x ({t['fwd unfused'] / t['fwd vectorized']:.2f}x) | "
              f"{t['vg vectorized']:.0f} / {t['vg vmap']:.0f} / {t['vg unfused']:.0f} | "
              f"{t['vg vmap'] / t['vg vectorized']:.2f}x ({t['vg unfused'] / t['vg vectorized']:.2f}x) |")


if __name__ == "__main__":
    main()

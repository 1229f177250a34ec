"""The einsum primitive's batched contractions (one small matrix product per batch item) over the
operands' layouts and item counts: NumPy's einsum loop, np.matmul, the rule of before (matmul for at
most 64 items, einsum's loop past them) and the primitive's choice now (past 64 items, matmul where
BLAS takes each item's matrices as they lie, else einsum's loop), in one process, round-robin.

    python benchmarks/einsum_layouts.py                 # 'nri,nic->nrc' for the sizes below
    python benchmarks/einsum_layouts.py --quick         # tiny sizes, 3 samples (the smoke test)

Layouts of both operands (items n, each a (rows, inner) @ (inner, cols) product):
first: C order, batch first; transposed: batch first, each item's matrix transposed (F order);
last: the batch on the unit-stride axis; broadcast: the first operand one matrix broadcast along n.
"""
from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import pathlib  # noqa: E402

import numpy as np  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from timing import interleaved_medians  # noqa: E402

from wengert.primitives.contractions import _MATMUL_MAX_ITEMS, _contraction  # noqa: E402

SUBSCRIPTS = "nri,nic->nrc"


def layouts(a, b):
    """Each layout's operands, holding the values of ``a`` (n, rows, inner) and ``b`` (n, inner, cols)."""
    def batch_last(x):
        return np.ascontiguousarray(np.moveaxis(x, 0, -1)).transpose(2, 0, 1)

    def transposed(x):
        return np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
    return {"first": (a, b), "transposed": (transposed(a), transposed(b)), "last": (batch_last(a), batch_last(b)),
            "broadcast": (np.broadcast_to(a[0], a.shape), b)}


def before(a, b):
    """The rule of before: matmul for at most _MATMUL_MAX_ITEMS items, einsum's loop past them."""
    if a.shape[0] <= _MATMUL_MAX_ITEMS:
        return np.matmul(a, b)
    return np.einsum(SUBSCRIPTS, a, b)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=15, help="samples per contestant")
    p.add_argument("--quick", action="store_true", help="tiny sizes and 3 samples (the smoke test)")
    args = p.parse_args(argv)
    matrices = [(2, 3, 4)] if args.quick else [(16, 64, 4), (16, 16, 16), (4, 64, 16)]
    counts = [3, 70] if args.quick else [16, 64, 256, 1024]
    repeat = 3 if args.quick else args.repeat
    rng = np.random.default_rng(0)
    print(f"{SUBSCRIPTS}, float64, one BLAS thread; medians of {repeat}, us; "
          f"'before' and 'now' are the primitive's rule of before and now\n")
    print(f"{'rows, inner, cols':>18} {'items':>6} {'layout':>11} {'einsum':>8} {'matmul':>8} "
          f"{'before':>8} {'now':>8} {'before/now':>11}")
    for rows, inner, cols in matrices:
        for n in counts:
            a0 = rng.standard_normal((n, rows, inner))
            b0 = rng.standard_normal((n, inner, cols))
            expected = np.einsum(SUBSCRIPTS, a0, b0)
            plan = _contraction(SUBSCRIPTS, (a0.shape, b0.shape))
            for name, (a, b) in layouts(a0, b0).items():
                got = plan(a, b)
                want = np.einsum(SUBSCRIPTS, a, b)
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
                if name != "broadcast":
                    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
                cases = {"einsum": lambda: np.einsum(SUBSCRIPTS, a, b), "matmul": lambda: np.matmul(a, b),
                         "before": lambda: before(a, b), "now": lambda: plan(a, b)}
                t = interleaved_medians(cases, repeat, scale=1e6)
                print(f"{f'{rows}, {inner}, {cols}':>18} {n:>6} {name:>11} {t['einsum']:8.0f} {t['matmul']:8.0f} "
                      f"{t['before']:8.0f} {t['now']:8.0f} {t['before'] / t['now']:10.2f}x", flush=True)


if __name__ == "__main__":
    main()

"""wg.profile on the seed workloads: the reports quoted in docs/performance.md.

    python examples/profile_seeds.py                     # all three, at the seeds' own sizes
    python examples/profile_seeds.py colwise --plot out  # one of them, and a bar chart per report

* colwise: seed 001's attention over time written with per-column views in Python loops
  (T=256 steps, batch 128);
* loop:    seed 000's pairwise cosine similarity, a per-element loop writing into a wg.Buffer
  (N, W, R, B = 16, 64, 4, 16);
* record:  seed 002's record of 10 parameter arrays (512 x 512) of which the loss reads 3.

The workloads are the benchmark suite's (benchmarks/workloads.py), run single-threaded.
"""
import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))

import wengert as wg  # noqa: E402
import wengert.numpy as wnp  # noqa: E402

try:
    import workloads  # noqa: E402
except ImportError:  # pragma: no cover
    sys.exit("examples/profile_seeds.py needs benchmarks/workloads.py (the seed workloads)")

SEEDS = {
    "colwise": ("W2", "colwise"),
    "loop": ("W1", "seed", "loop"),
    "record": ("W4", "n=10", "record"),
}


def find(key):
    wanted = SEEDS[key]
    for row in workloads.rows(quick=False, only=[wanted[0]]):
        if row.formulation == wanted[-1] and all(part in row.size for part in wanted[1:-1]):
            return row
    raise LookupError(key)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", help=f"which workloads: {', '.join(SEEDS)} (default: all)")
    parser.add_argument("--plot", metavar="PREFIX", help="write PREFIX-<name>.png for each report")
    parser.add_argument("--repeat", type=int, default=5)
    opts = parser.parse_args()
    for key in opts.which:
        if key not in SEEDS:
            parser.error(f"unknown workload {key!r}; choose from {', '.join(SEEDS)}")
    for key in opts.which or list(SEEDS):
        row = find(key)
        f = row.code(wnp, wg.Buffer)[row.formulation]
        report = wg.profile(f, *row.args, argnums=row.argnums if len(row.argnums) > 1 else row.argnums[0],
                            repeat=opts.repeat, max_seconds=30)
        print(f"### {key}: {row.name}\n")
        print(report)
        print()
        if opts.plot:
            report.plot(f"{opts.plot}-{key}.png")


if __name__ == "__main__":
    main()

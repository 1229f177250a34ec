"""NumPy's path before and after a change, in one process: the seed workloads' value_and_grad with
two copies of wengert loaded side by side (the current sources and those of a git revision).

    python benchmarks/numpy_path.py                       # against c524861, the last commit before
                                                          # array namespaces (docs/backends.md)
    python benchmarks/numpy_path.py --before-rev main --only W1:loop,W3 --repeat 31

The older sources are exported with ``git archive`` into a temporary folder and imported under
another package name, so both copies run in this process on the same arrays; each row's two
contestants are timed round-robin (``timing.interleaved_medians``), single-threaded, so load on the
machine hits them alike. Rows that call ``wengert`` by its name (W1 vmap) are left out: they would
run the current copy twice.
"""
from __future__ import annotations

import os
import sys

# malloc's thresholds pinned as benchmarks/run.py pins them (see there): otherwise a row's time
# moves with the page faults left by the row before it (W4 measured 2 ms or 10 ms by turns)
_PINNED = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}
if __name__ == "__main__" and sys.platform.startswith("linux") and any(
        os.environ.get(k) != v for k, v in _PINNED.items()):
    os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **_PINNED})

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib  # noqa: E402
import importlib.util  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import tarfile  # noqa: E402
import tempfile  # noqa: E402
import io  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import wengert  # noqa: E402
import workloads  # noqa: E402
from timing import interleaved_medians  # noqa: E402

DEFAULT_ONLY = "W1:vectorized,W1:loop,W2:diagmatmul,W2:glued,W3,W4"


def _selected(row, only):
    """``W1`` selects the workload; ``W1:loop`` the formulation named exactly ``loop``."""
    for token in only:
        workload, _, formulation = token.partition(":")
        if workload == row.workload and (not formulation or formulation == row.formulation):
            return True
    return False


def load_revision(rev, folder):
    """wengert as it was at ``rev``, imported as the package ``wengert_<rev>``."""
    archive = subprocess.run(["git", "archive", rev, "src/wengert"], cwd=HERE.parent,
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    name = "wengert_" + "".join(c if c.isalnum() else "_" for c in rev)
    package = pathlib.Path(folder) / "src" / "wengert"
    spec = importlib.util.spec_from_file_location(name, package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, importlib.import_module(name + ".numpy")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before-rev", default="c524861", help="git revision of the 'before' sources")
    p.add_argument("--only", default=DEFAULT_ONLY, help="workload rows, as in run.py --only")
    p.add_argument("--repeat", type=int, default=21, help="samples per contestant")
    p.add_argument("--max-call", type=float, default=1.0,
                   help="leave out rows whose first call takes longer than this (seconds)")
    p.add_argument("--quick", action="store_true", help="tiny sizes and 3 samples (the smoke test)")
    args = p.parse_args(argv)
    repeat = 3 if args.quick else args.repeat
    with tempfile.TemporaryDirectory() as folder:
        old, old_np = load_revision(args.before_rev, folder)
        import wengert.numpy as new_np
        trees = {"before": (old, old_np), "after": (wengert, new_np)}
        print(f"wengert at {args.before_rev} ('before') against the working tree ('after'): "
              f"value_and_grad medians of {repeat} interleaved calls, ms")
        print(f"{'row':52s} {'before':>9s} {'after':>9s} {'after/before':>13s}")
        ratios = []
        only = args.only.split(",")
        for row in workloads.rows(quick=args.quick, only=only):
            if row.wengert_only or not _selected(row, only):
                continue
            cases = {}
            for label, (wg, wnp) in trees.items():
                loss = row.code(wnp, wg.Buffer)[row.formulation]
                vg = wg.value_and_grad(loss, argnums=row.argnums)
                cases[label] = (lambda vg=vg: vg(*row.args))
            t0 = time.perf_counter()
            v0, g0 = cases["before"]()
            if time.perf_counter() - t0 > args.max_call:
                print(f"{row.name:52s} left out: its first call took over --max-call={args.max_call} s")
                continue
            v1, g1 = cases["after"]()
            np.testing.assert_allclose(v1, v0, rtol=1e-5)
            medians = interleaved_medians(cases, repeat, scale=1e3)
            ratio = medians["after"] / medians["before"]
            ratios.append(ratio)
            print(f"{row.name:52s} {medians['before']:9.3f} {medians['after']:9.3f} {ratio:13.3f}")
        # a transform's fixed cost per call, where anything added per call shows most: a tiny function
        x = np.linspace(0.1, 1.0, 16)
        tiny = {label: (lambda g=wg.grad(lambda x, wnp=wnp: wnp.sum(wnp.sin(x) * x)): g(x))
                for label, (wg, wnp) in trees.items()}
        medians = interleaved_medians(tiny, max(repeat, 3) * 20, scale=1e3)
        ratio = medians["after"] / medians["before"]
        print(f"{'tiny: grad(sum(sin(x) * x)), 16 elements':52s} {medians['before']:9.4f} "
              f"{medians['after']:9.4f} {ratio:13.3f}")
        if ratios:
            geo = float(np.exp(np.mean(np.log(ratios))))
            print(f"geometric mean of after/before over the {len(ratios)} workload rows: {geo:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The benchmark suite at tiny sizes, as a correctness check only: every formulation of every
workload runs, and wengert's gradient agrees with the hand-written NumPy one. No timing assertions;
the other AD libraries are not needed (and not used) here."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_benchmark_suite_quick(tmp_path):
    out = tmp_path / "quick.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--libs", "none", "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())
    rows = results["rows"]
    seen = {(r["workload"], r["formulation"]) for r in rows}
    spellings = {f"loop[{c}, {d}]" for c in ("Buffer", "in-place", "lists+stack")
                 for d in ("@", "np.dot", "np.sum(u*v)", "np.inner")}
    assert seen == {("W1", "vectorized"), ("W1", "loop"), ("W1", "vmap"), ("W2", "diagmatmul"), ("W2", "colwise"),
                    ("W2", "glued"), ("W3", "log(softmax)"), ("W3", "logsumexp"), ("W4", "record")} | {
                        (w, s) for w in ("W1", "W2") for s in spellings} | {
                        ("W5", f"loop[{s}]") for s in ("@", "np.dot", "lists+stack")}
    assert len(rows) == 15 + 24 + 3
    bad = {r["name"]: r["checks"]["wengert"] for r in rows if r["checks"]["wengert"] != "ok"}
    assert not bad, bad
    assert all(r["notes"]["wengert_max_rel_error"] < 1e-3 for r in rows)
    bad_jit = {r["name"]: r["checks"]["wengert.jit"] for r in rows
               if r["checks"]["wengert.jit"] != "ok" and not r["checks"]["wengert.jit"].startswith("skipped")}
    assert not bad_jit, bad_jit   # wg.jit(value_and_grad) agrees with the hand-written gradient too


def test_vectorize_benchmark_runs_every_spelling_and_agrees_with_the_hand_written_gradient():
    """benchmarks/vectorize.py checks each jit(value_and_grad) against the hand-written gradient
    before timing it (an AssertionError otherwise): seed 000's loop in every spelling, the more
    spellings of its dot product and norm included, and with --sixteen all the spellings and the
    loop forms at 16x too."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "vectorize.py"), "--quick", "--only", "W1", "--sixteen", "all",
         "--more-spellings", "--more-loops", "--repeat", "1", "--clock", "cpu"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {line.split("  ")[0] for line in proc.stdout.splitlines() if line.startswith("W1 ")}
    seed = {n for n in names if n.startswith("W1 seed")}
    big = {n for n in names if n.startswith("W1 16x")}
    assert len(seed) == 1 + 12 + 6 + 5 + 14 and len(big) == 1 + 12 + 14, sorted(names)
    assert any("np.linalg.norm(u)" in n for n in seed) and any("np.einsum" in n for n in seed)
    assert any("form[inline reads]" in n for n in seed) and any("form[x.at[].set]" in n for n in seed)
    assert any("form[rows of a.T]" in n for n in seed) and any("form[np.split, enumerate]" in n for n in seed)
    assert any("form[matrix-vector per (j,k)]" in n for n in big)


def test_vectorize_benchmark_runs_seed_001_in_every_spelling_and_loop_form():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "vectorize.py"), "--quick", "--only", "W2", "--more-loops",
         "--repeat", "1", "--clock", "cpu"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr   # each row checked against the hand gradient
    names = {line.split("  ")[0] for line in proc.stdout.splitlines() if line.startswith("W2 ")}
    assert len(names) == 1 + 12 + 9, sorted(names)
    assert any("form[inline, b outer]" in n for n in names) and any("form[rows per step]" in n for n in names)
    assert any("form[rows of y.T]" in n for n in names) and any("form[steps stacked" in n for n in names)


def test_vectorize_benchmark_times_cold_on_request():
    """--cold times one call at a time with no untimed call before it, and says so in the header."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "vectorize.py"), "--quick", "--only", "W1", "--sixteen", "none",
         "--repeat", "1", "--cold"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "one call each, cold" in proc.stdout.splitlines()[0]
    assert sum(line.startswith("W1 ") for line in proc.stdout.splitlines()) == 1 + 12


def test_transforms_under_vmap_benchmark_is_batched_and_right():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "vmap_transforms.py"), "--repeat", "1", "--batch", "3"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr   # the script checks vmap against the loop
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "transform" not in line]
    assert len(rows) == 5
    assert all(line.rstrip(" |").endswith("no") for line in rows), proc.stdout   # none fell back to a loop


def test_odeint_benchmark_runs_and_its_gradients_agree():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "odeint.py"), "--repeat", "1", "--sizes", "3",
         "--rk4-steps", "50", "--reference-steps", "400"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split("|") for line in proc.stdout.splitlines() if line.startswith("| odeint") or line.startswith("| RK4")]
    assert len(rows) == 3
    errors = [float(row[6]) for row in rows]
    assert max(errors) < 1e-5, proc.stdout   # adjoint, sensitivities and RK4 agree with the reference


def test_op_overhead_covers_every_primitive_and_runs(tmp_path):
    """benchmarks/op_overhead.py in its tiny mode: every case runs on every size, each registered
    primitive is measured by some case or named in NOT_MEASURED with a reason, and the JSON has
    the columns the tables are made from (no timing assertions)."""
    out = tmp_path / "ops.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "op_overhead.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())
    rows = results["rows"]
    measured = {name for r in rows for name in r["covers"]}
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import op_overhead
    finally:
        sys.path.pop(0)
    from wengert.primitives._table import PRIMITIVES
    missing = sorted(set(PRIMITIVES) - measured - set(results["not_measured"]))
    assert not missing, missing
    assert {"1-D @ 1-D", "matrix @ vector", "einsum 'i,i->'", "max (full)", "mean (full)", "concatenate of 2",
            "x.at[i].set(v)", "Buffer: 16 writes + freeze", "in-place y[i] = v (16 writes)", "getitem x[:, j]",
            "stack of 16 0-d", "wnn.softmax"} <= {r["case"] for r in rows}
    for r in rows:
        for key in ("numpy_us", "record_us", "backward_us", "overhead_us"):
            assert isinstance(r[key], float), (r["case"], key)
    assert results["rows"] == sorted(rows, key=lambda r: -r["overhead_us"])
    assert op_overhead.uncovered() == []


def test_dask_fit_quick(tmp_path):
    """benchmarks/dask_fit.py at tiny sizes: both fits (wengert's gradient on Dask arrays and the
    hand-written Dask gradient) run, each size in its own process, end at the same weights (the
    script asserts it) and lower the loss. No timing assertions."""
    pytest.importorskip("dask.array", reason="dask[array] is not installed (pip install 'wengert[dask]')")
    out = tmp_path / "dask_fit.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dask_fit.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())
    assert [r["rows"] for r in rows] == [20000, 80000]
    for r in rows:
        for who in ("wengert", "hand"):
            losses = r[who]["losses"]
            assert len(losses) == 2 and losses[-1] < losses[0]
            assert r[who]["peak_mb"] > r[who]["base_mb"] > 0


def test_einsum_layouts_benchmark_runs_and_checks_its_values():
    """benchmarks/einsum_layouts.py checks the primitive's value against np.einsum for every layout
    before timing it (an AssertionError otherwise)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "einsum_layouts.py"), "--quick"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip().startswith("2, 3, 4")]
    assert {r[4] for r in rows} == {"first", "transposed", "last", "broadcast"} and len(rows) == 8, proc.stdout

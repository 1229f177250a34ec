"""wengert's benchmark suite: the seed workloads W1-W4, wengert against hand-written NumPy gradients
and (when installed) autograd, PyTorch, JAX and mygrad, side by side in one run, single-threaded.

    python benchmarks/run.py                      # everything, real sizes; prints tables
    python benchmarks/run.py --quick              # tiny sizes, gradient checks only (no timing)
    python benchmarks/run.py --only W1,W2:colwise --repeat 21 --json out.json
    python benchmarks/run.py --libs torch,jax     # which other libraries (default: all installed)

Every library's gradient is checked against the hand-written one before it is timed; a library
whose gradient disagrees is reported, not timed. Timings are medians of repeated calls after warm-up,
taken round-robin across all contestants of a row so that load on the machine hits them alike.
Results (every sample, the checks, versions) are written as JSON, by default to
benchmarks/results/latest.json.
"""
from __future__ import annotations

import os
import sys

# glibc's malloc hands large blocks back to the OS when they are freed and faults fresh pages in
# when they are allocated again, depending on thresholds that move with the history of the
# process. Here a page fault costs ~2.5 us, so the same hand-written W4 gradient measured 1.8 ms
# or 4.3 ms depending on which contestant ran before it. Timed runs therefore pin the thresholds
# (every array here is under 32 MB), re-executing this script once with them set; --malloc system
# keeps the defaults. The page-fault column of the table shows what remains.
_PINNED = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}


def _malloc_choice(argv):
    for i, a in enumerate(argv):
        if a.startswith("--malloc="):
            return a.split("=", 1)[1]
        if a == "--malloc" and i + 1 < len(argv):
            return argv[i + 1]
    return "pinned"


def pin_malloc():
    """Re-execute the running script once with the thresholds pinned, unless it was given --quick or
    --malloc system: every timed benchmark here calls it first, so their tables agree."""
    if (sys.platform.startswith("linux") and "--quick" not in sys.argv and _malloc_choice(sys.argv[1:]) == "pinned"
            and any(os.environ.get(k) != v for k, v in _PINNED.items())):
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **_PINNED})


def malloc_argument(parser):
    parser.add_argument("--malloc", choices=("pinned", "system"), default="pinned",
                        help="pinned (default for timed runs): glibc keeps freed memory instead of returning "
                             "it to the OS, so timings do not depend on page faults that the order of calls "
                             "decides; system: the process's defaults")


def malloc_state():
    return "pinned" if all(os.environ.get(k) == v for k, v in _PINNED.items()) else "system"


if __name__ == "__main__":
    pin_malloc()

# Single-threaded, before NumPy (and any other array library) is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
             "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peers  # noqa: E402
import workloads  # noqa: E402

import wengert as wg  # noqa: E402
import wengert.numpy as wnp  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4          # float32 gradients: |g - ref| <= ATOL * max|ref| + RTOL * |ref|


# --- checking ----------------------------------------------------------------------------------
def compare(value, grads, ref_value, ref_grads):
    """None if ``(value, grads)`` agrees with the reference, else a short description."""
    if len(grads) != len(ref_grads):
        return f"{len(grads)} gradient arrays, expected {len(ref_grads)}"
    if not np.isclose(value, ref_value, rtol=1e-4, atol=1e-6 * max(1.0, abs(ref_value))):
        return f"value {value!r} != {ref_value!r}"
    for k, (g, r) in enumerate(zip(grads, ref_grads)):
        g, r = np.asarray(g, dtype=np.float64), np.asarray(r, dtype=np.float64)
        if g.shape != r.shape:
            return f"gradient {k}: shape {g.shape} != {r.shape}"
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        if not np.allclose(g, r, rtol=RTOL, atol=ATOL * scale + 1e-12):
            err = float(np.max(np.abs(g - r))) / (scale or 1.0)
            return f"gradient {k}: max |error| / max |ref| = {err:.2e}"
    return None


def max_rel_error(grads, ref_grads):
    worst = 0.0
    for g, r in zip(grads, ref_grads):
        g, r = np.asarray(g, dtype=np.float64), np.asarray(r, dtype=np.float64)
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        if r.size:
            worst = max(worst, float(np.max(np.abs(g - r))) / (scale or 1.0))
    return worst


# --- timing ------------------------------------------------------------------------------------
def _faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def measure(contestants, repeat, budget, first_call):
    """Median seconds per call of each no-argument callable, measured round-robin.

    Each contestant gets warm-up calls (two, one or none, by how long its first call took: the
    check call already warmed it), then samples until it has ``repeat`` of them or has used
    ``budget`` seconds (at least 3 samples). Fast calls are grouped so one sample lasts ~5 ms, and
    a contestant under 50 ms makes one untimed call before each sample, so that what is timed is
    the function called again and again (as in a training loop), not the caches that the previous
    contestant left behind.
    Wall-clock time (``perf_counter``) is what the tables show; the process's CPU time
    (``process_time``) is kept beside it, as a check on how much load from other processes on
    the machine inflated the wall-clock figures.
    Returns {name: {"median", "cpu_median", "samples", "calls_per_sample", "faults_per_call"}}.
    """
    est, inner = {}, {}
    for name, fn in contestants.items():
        first = first_call.get(name, 0.0)
        est[name] = first
        for _ in range(2 if first < 0.2 else 1 if first < 2 else 0):
            t0 = time.perf_counter()
            fn()
            est[name] = time.perf_counter() - t0
        inner[name] = max(1, min(200, int(5e-3 / max(est[name], 1e-7))))
    samples = {name: [] for name in contestants}
    cpu = {name: [] for name in contestants}
    faults = {name: 0 for name in contestants}
    spent = {name: 0.0 for name in contestants}
    active = list(contestants)
    gc.collect()
    while active:
        for name in list(active):
            fn, n = contestants[name], inner[name]
            if est[name] < 0.05:
                fn()
            f0 = _faults()
            c0 = time.process_time()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            dt = time.perf_counter() - t0
            cpu[name].append((time.process_time() - c0) / n)
            faults[name] += _faults() - f0
            samples[name].append(dt / n)
            spent[name] += dt
            k = len(samples[name])
            if k >= repeat or (k >= 3 and spent[name] >= budget):
                active.remove(name)
    return {name: {"median": statistics.median(s), "cpu_median": statistics.median(cpu[name]),
                   "samples": s, "calls_per_sample": inner[name],
                   "faults_per_call": faults[name] / (len(s) * inner[name])}
            for name, s in samples.items()}


class Overtime(Exception):
    pass


def call_with_limit(fn, limit):
    """``fn()``, interrupted with :class:`Overtime` after ``limit`` seconds (main thread only)."""
    if not limit or not hasattr(signal, "setitimer"):
        return fn()

    def on_alarm(signum, frame):
        raise Overtime()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --- one row -----------------------------------------------------------------------------------
JIT_LOOP_LIMIT = 5000  # wg.jit rows: loops with more trips are left to benchmarks/jit.py


def run_row(row, libs, quick, repeat, budget, max_call, first_limit):
    """Check every contestant of ``row`` against the hand-written gradient, then time them."""
    result = {"name": row.name, "workload": row.workload, "size": row.size,
              "formulation": row.formulation, "loop_iterations": row.loop_iterations,
              "spelling": list(row.spelling) if row.spelling else None,
              "checks": {}, "times": {}, "notes": {}, "first_call_s": {}}
    hand_args = row.hand_args or row.args
    ref_value, ref_grads = row.hand(*hand_args)
    ref_value, ref_grads = float(ref_value), peers.leaves(ref_grads)

    fn = row.code(wnp, wg.Buffer)[row.formulation]
    vg_fn = wg.value_and_grad(fn, argnums=row.argnums)
    contestants = {
        "fwd": lambda: fn(*row.args),
        "wengert": lambda: vg_fn(*row.args),
        "hand": lambda: row.hand(*hand_args),
    }
    # the plain forward must be the same function on plain arrays, giving the same value
    fwd_value = float(np.asarray(fn(*row.args)))
    problem = None if np.isclose(fwd_value, ref_value, rtol=1e-4) else f"forward value {fwd_value} != {ref_value}"
    try:
        t0 = time.perf_counter()
        value, grads = vg_fn(*row.args)
        result["first_call_s"]["wengert"] = time.perf_counter() - t0
        grads = peers.leaves(grads)
        problem = problem or compare(float(value), grads, ref_value, ref_grads)
        result["notes"]["wengert_max_rel_error"] = max_rel_error(grads, ref_grads)
    except Exception as e:  # noqa: BLE001 - report, keep benchmarking the rest
        problem = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    result["checks"]["wengert"] = problem or "ok"
    if problem:
        del contestants["wengert"]

    # wg.jit(value_and_grad): staged once (its first call is reported), then the compiled program
    if row.loop_iterations <= JIT_LOOP_LIMIT:
        jit_fn = wg.jit(vg_fn)
        t0 = time.perf_counter()
        try:
            value, grads = jit_fn(*row.args)
        except (wg.InPlaceWriteError, wg.ConcretizationError) as e:  # a documented refusal (docs/jit.md)
            result["checks"]["wengert.jit"] = f"skipped: jit refuses this spelling: {str(e).splitlines()[0][:120]}"
        else:
            result["first_call_s"]["wengert.jit"] = time.perf_counter() - t0
            problem = compare(float(value), peers.leaves(grads), ref_value, ref_grads)
            result["checks"]["wengert.jit"] = problem or "ok"
            if not problem:
                contestants["wengert.jit"] = lambda: jit_fn(*row.args)
    else:
        result["checks"]["wengert.jit"] = (f"skipped: {row.loop_iterations} loop trips stage ~35 equations each; "
                                           "see benchmarks/jit.py for first-call times by size")

    for lib in (() if row.wengert_only else libs):
        try:
            prep = peers.prepare(lib, row)
            t0 = time.perf_counter()
            value, grads = call_with_limit(prep.vg, first_limit)
            first = time.perf_counter() - t0
            result["first_call_s"][lib] = first
            problem = compare(value, grads, ref_value, ref_grads)
            if problem:
                result["checks"][lib] = f"gradient disagrees: {problem}"
                continue
            result["checks"][lib] = "ok"
            if prep.note:
                result["notes"][lib] = prep.note
            if quick:
                continue
            t0 = time.perf_counter()
            fwd_value = float(peers.to_numpy(call_with_limit(prep.fwd, first_limit)))
            result["first_call_s"][lib + ".fwd"] = time.perf_counter() - t0
            if not np.isclose(fwd_value, ref_value, rtol=1e-4, atol=1e-6):
                result["checks"][lib] = f"forward value {fwd_value} != {ref_value}"
                continue
            if first > max_call:
                # too slow to repeat: one more call of each, reported as single samples
                for name, call in ((lib, prep.vg), (lib + ".fwd", prep.fwd)):
                    t0 = time.perf_counter()
                    call()
                    result["times"][name] = {"median": time.perf_counter() - t0, "samples": [], "single": True}
                result["notes"][lib] = (result["notes"].get(lib, "") + " (one timed call)").strip()
                continue
            contestants[lib] = lambda prep=prep: prep.vg()
            contestants[lib + ".fwd"] = lambda prep=prep: prep.fwd()
        except Overtime:
            result["checks"][lib] = (f"stopped: its first call was still running after {first_limit:g} s "
                                     "(shown as a lower bound)")
            result["times"].pop(lib, None)
            result["over_limit"] = result.get("over_limit", []) + [lib]
        except peers.Skip as e:
            result["checks"][lib] = f"skipped: {e}"
        except Exception as e:  # noqa: BLE001
            result["checks"][lib] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    if not quick:
        result["times"].update(measure(contestants, repeat, budget, result["first_call_s"]))
    return result


# --- tables ------------------------------------------------------------------------------------
def fmt_time(s):
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f}us"
    if s < 1:
        return f"{s * 1e3:.3g}ms" if s < 0.1 else f"{s * 1e3:.0f}ms"
    return f"{s:.2f}s"


def fmt_ratio(r):
    if r is None:
        return "-"
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x" if r >= 100 else f"{r:.1f}x"


LIMIT = {"s": 120.0}          # --first-call-limit
CLOCK = {"key": "median"}      # "median" (wall clock, perf_counter) or "cpu_median" (process_time)


def med(result, name):
    t = result["times"].get(name)
    if not t:
        return None
    return t.get(CLOCK["key"], t["median"])


def ratio(a, b):
    return a / b if a is not None and b else None


def table(headers, lines):
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *lines)]
    out = ["  ".join(str(h).ljust(w) if i == 0 else str(h).rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))]
    out.append("  ".join("-" * w for w in widths))
    for line in lines:
        out.append("  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(line, widths))))
    return "\n".join(out)


def report(results, libs, quick):
    parts = []
    if quick:
        lines = [[r["name"]] + [r["checks"].get(k, "-") for k in ["wengert"] + libs] for r in results]
        parts.append(table(["row (quick sizes: gradient checks only)"] + ["wengert"] + libs, lines))
        return "\n\n".join(parts)
    lines = []
    for r in results:
        fwd, w, h = med(r, "fwd"), med(r, "wengert"), med(r, "hand")
        pf = [r["times"].get(k, {}).get("faults_per_call") for k in ("wengert", "hand")]
        pf = "/".join("-" if x is None else f"{x:.0f}" for x in pf)
        j = med(r, "wengert.jit")
        first = r["first_call_s"].get("wengert.jit")
        lines.append([r["name"], fmt_time(fwd), fmt_time(w), fmt_ratio(ratio(w, fwd)), fmt_time(h),
                      fmt_ratio(ratio(w, h)), fmt_time(j), fmt_ratio(ratio(j, h)),
                      fmt_time(first) if j is not None else "-", pf, r["checks"]["wengert"]])
    parts.append("wengert: plain forward, value_and_grad, and the hand-written NumPy value-and-gradient\n"
                 "(medians; w/fwd = value_and_grad / forward, w/hand = value_and_grad / hand-written;\n"
                 " jit = wg.jit(value_and_grad), jit 1st = its first call: trace, optimize, compile;\n"
                 " faults = minor page faults per call, wengert/hand: fresh large arrays cost page faults)\n\n" +
                 table(["row", "forward", "wengert", "w/fwd", "hand", "w/hand", "jit", "jit/hand", "jit 1st",
                        "faults", "check"], lines))
    if libs:
        lines = []
        for r in results:
            w = med(r, "wengert")
            cells = [r["name"], fmt_time(w)]
            for lib in libs:
                t = med(r, lib)
                if t is None:
                    check = r["checks"].get(lib, "-")
                    cells.append(f"> {LIMIT['s']:g}s" if check.startswith("stopped") else
                                 "skip" if check.startswith("skipped") else
                                 "not installed" if "not installed" in check else
                                 "WRONG" if "disagrees" in check else "FAIL" if check.startswith("failed") else "-")
                else:
                    cells.append(f"{fmt_time(t)} {fmt_ratio(ratio(t, w))}")
            lines.append(cells)
        parts.append("value_and_grad of the other libraries: time and (time / wengert's); above 1x, "
                     "wengert is faster\n\n" + table(["row", "wengert"] + libs, lines))
        lines = []
        for r in results:
            cells = [r["name"], fmt_ratio(ratio(med(r, "wengert"), med(r, "fwd")))]
            for lib in libs:
                cells.append(fmt_ratio(ratio(med(r, lib), med(r, lib + ".fwd"))))
            lines.append(cells)
        parts.append("each library's value_and_grad / its own forward (the cliff in each formulation)\n\n" +
                     table(["row", "wengert"] + libs, lines))
    spelled = [r for r in results if r.get("spelling")]
    if spelled:
        parts.append(spelling_table(spelled, "torch" if "torch" in libs else None))
    notes = []
    for r in results:
        for lib, check in r["checks"].items():
            if check != "ok":
                notes.append(f"  {r['name']} / {lib}: {check}")
        for lib, note in r["notes"].items():
            if lib in libs and note:
                notes.append(f"  {r['name']} / {lib}: {note}")
        for lib in libs:
            if lib == "jax.jit" and lib in r["first_call_s"] and lib in r["times"]:
                notes.append(f"  {r['name']} / jax.jit: first call (trace + compile) "
                             f"{fmt_time(r['first_call_s'][lib])}")
    if notes:
        parts.append("notes\n" + "\n".join(notes))
    parts.append(targets_report(results, libs))
    return "\n\n".join(parts)


def spelling_table(results, peer):
    """The seed loops in every spelling, side by side with PyTorch eager on the same spelling."""
    head = ["workload", "results in", "dot as", "forward", "value_and_grad", "w/fwd"]
    if peer:
        head += [f"{peer} fwd", f"{peer} v&g", f"{peer} v&g/fwd", f"{peer} v&g / wengert's"]
    lines = []
    for r in results:
        fwd, w = med(r, "fwd"), med(r, "wengert")
        cells = [f"{r['workload']} {r['size'].split()[0]}", r["spelling"][0], r["spelling"][1], fmt_time(fwd),
                 fmt_time(w), fmt_ratio(ratio(w, fwd))]
        if peer:
            pf, pv = med(r, peer + ".fwd"), med(r, peer)
            cells += [fmt_time(pf), fmt_time(pv), fmt_ratio(ratio(pv, pf)), fmt_ratio(ratio(pv, w))]
        lines.append(cells)
    return ("the seed loops in every spelling (issue 13: value_and_grad <= 5x its own forward, and faster than "
            "PyTorch eager on the same spelling)\n\n" + table(head, lines))


def targets(results, libs):
    """Issue 3's targets, each as (target, figure, met?)."""
    out = []
    by = {(r["workload"], r["size"].split()[0], r["formulation"]): r for r in results}
    for r in results:
        w, h, f = med(r, "wengert"), med(r, "hand"), med(r, "fwd")
        if w is None:
            continue
        wid, size, form = r["workload"], r["size"].split()[0], r["formulation"]
        limit = None
        if (wid, form) == ("W1", "vectorized"):
            limit = 1.2 if size == "16x" else 2.0
        elif (wid, form) == ("W2", "glued") or wid == "W4":
            limit = 1.2
        elif wid == "W3":
            limit = 1.2 if size == "batch=128" else 2.0 if size == "batch=1" else None
        if limit and h:
            out.append((f"{r['name']}: value_and_grad <= {limit}x hand-written", w / h, w / h <= limit))
        if form in ("loop", "colwise") and f:
            out.append((f"{r['name']}: value_and_grad <= 3x own forward", w / f, w / f <= 3))
        if r.get("spelling") and f:
            out.append((f"{r['name']}: value_and_grad <= 5x own forward (issue 13)", w / f, w / f <= 5))
        vec = by.get((wid, size, "vectorized"))
        if form == "vmap" and "interleaved" in r:
            for what, q in r["interleaved"].items():
                out.append((f"{r['name']}: {what} <= 1.5x the vectorized form's (issue 6; interleaved)",
                            q, q <= 1.5))
        elif form == "vmap" and vec and med(vec, "fwd") and med(vec, "wengert") and f:
            for what, mine, theirs in (("forward", f, med(vec, "fwd")), ("value_and_grad", w, med(vec, "wengert"))):
                out.append((f"{r['name']}: {what} <= 1.5x the vectorized form's (issue 6)",
                            mine / theirs, mine / theirs <= 1.5))
        for lib in libs:
            if lib == "jax.jit":
                continue
            t = med(r, lib)
            if t is not None:
                out.append((f"{r['name']}: faster than {lib}", t / w, t > w))
            elif lib in r.get("over_limit", ()) and LIMIT["s"] > w:   # a lower bound: conclusive
                out.append((f"{r['name']}: faster than {lib}", LIMIT["s"] / w, True))
    n10 = next((r for k, r in by.items() if k[0] == "W4" and k[1] == "n=10"), None)
    n3 = next((r for k, r in by.items() if k[0] == "W4" and k[1] == "n=3"), None)
    if n10 and n3 and med(n10, "wengert") and med(n3, "wengert"):
        q = med(n10, "wengert") / med(n3, "wengert")
        out.append(("W4: value_and_grad n=10 <= 1.1x n=3", q, q <= 1.1))
    return out


def attach_interleaved_vmap(results):
    """Issue 6 bounds the vmap form against the vectorized one: two rows of this table, timed one
    after the other, so their ratio swings with the machine's load. benchmarks/vmap_seed000.py
    times the two forms interleaved; its ratios (fastest of 30, per size) are the targets' figures."""
    rows = {r["size"].split()[0]: r for r in results if r["workload"] == "W1" and r["formulation"] == "vmap"}
    if not rows:
        return
    import vmap_seed000
    for label, _, t in vmap_seed000.run():
        if label in rows:
            rows[label]["interleaved"] = {"forward": t["fwd vmap"] / t["fwd vectorized"],
                                          "value_and_grad": t["vg vmap"] / t["vg vectorized"]}


def targets_report(results, libs):
    rows = targets(results, libs)
    if not rows:
        return ""
    missed = [t for t in rows if not t[2]]
    lines = [[name, fmt_ratio(fig), "met" if ok else "MISSED"] for name, fig, ok in rows
             if not ok or "faster than" not in name]
    beaten = sum(1 for name, _, ok in rows if "faster than" in name and ok)
    total = sum(1 for name, *_ in rows if "faster than" in name)
    text = ("targets of issues 3 and 6 (figure: the ratio the target bounds; 'faster than' rows show only "
            "the missed ones)\n\n" + table(["target", "figure", ""], lines))
    if total:
        text += f"\n\nfaster than autograd/torch/jax eager/mygrad: {beaten} of {total} row-library pairs"
    text += f"\n{len(rows) - len(missed)} of {len(rows)} targets met"
    return text


# --- main --------------------------------------------------------------------------------------
def environment(libs_available):
    info = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(), "numpy": np.__version__,
            "wengert": getattr(wg, "__version__", "?"), "machine": platform.machine(),
            "cpu": _cpu_name(), "cpus": os.cpu_count(), "threads": 1,
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "libraries": libs_available, "wengert_commit": _git_commit(),
            "malloc": {k: os.environ.get(k) for k in _PINNED}}
    return info


def _git_commit():
    """The repository's commit, with "+dirty" when src/ has uncommitted changes (None outside git)."""
    import subprocess
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=HERE.parent,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("+dirty" if dirty else "")) or None


def _cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes, gradient checks only (no timing)")
    p.add_argument("--only", default="", help="comma-separated workloads or workload:formulation, "
                                             "e.g. W1,W2:colwise")
    p.add_argument("--repeat", type=int, default=21, help="samples per contestant (at most; default 21)")
    p.add_argument("--budget", type=float, default=3.0,
                   help="seconds of samples per contestant and row before stopping early (min 3 samples)")
    p.add_argument("--max-call", type=float, default=30.0,
                   help="a library whose first call takes longer than this is timed once more, not repeated")
    p.add_argument("--first-call-limit", type=float, default=120.0,
                   help="stop another library's first call after this many seconds and report it as "
                        "'> limit' (default 120)")
    p.add_argument("--libs", default="all",
                   help=f"other libraries: 'all' (those installed), 'none', or a list from {','.join(peers.LIBS)}")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="what the tables show: wall-clock medians (perf_counter, the default) or the "
                        "process's CPU time (process_time; steadier on a machine loaded by other work). "
                        "The JSON has both.")
    malloc_argument(p)
    p.add_argument("--json", default=str(HERE / "results" / "latest.json"), help="where to write the results")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    CLOCK["key"] = "median" if args.clock == "wall" else "cpu_median"
    LIMIT["s"] = args.first_call_limit
    only = [t.strip() for t in args.only.split(",") if t.strip()]
    wanted = (list(peers.LIBS) if args.libs == "all" else [] if args.libs in ("none", "") else
              [x.strip() for x in args.libs.split(",") if x.strip()])
    unknown = [x for x in wanted if x not in peers.LIBS]
    if unknown:
        raise SystemExit(f"unknown libraries {unknown}; choose from {', '.join(peers.LIBS)}")
    available, libs = {}, []
    for lib in wanted:
        version, reason = peers.availability(lib)
        available[lib] = version or reason
        if version:
            libs.append(lib)
        elif args.libs != "all":
            print(f"{lib}: {reason}", file=sys.stderr)
    if "torch" in libs:
        import torch
        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
    rows = workloads.rows(quick=args.quick, only=only)
    if not rows:
        raise SystemExit(f"no rows match --only {args.only}")
    env = environment(available)
    print(f"wengert {env['wengert']} ({env['wengert_commit']}), numpy {env['numpy']}, python {env['python']}, {env['cpu']} "
          f"({env['cpus']} cpus, load average {env['load_average'][0]:.1f}), 1 thread; "
          + ", ".join(f"{k} {v}" for k, v in available.items()), flush=True)
    if not args.quick:
        print(f"times: medians of {'wall-clock (perf_counter)' if args.clock == 'wall' else 'CPU (process_time)'}"
              f" time per call, at most {args.repeat} samples or {args.budget:g} s per contestant and row; "
              f"malloc {malloc_state()}",
              flush=True)
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for row in rows:
            t0 = time.perf_counter()
            print(f"  {row.name} ...", end="", flush=True, file=sys.stderr)
            results.append(run_row(row, libs, args.quick, args.repeat, args.budget, args.max_call,
                                   args.first_call_limit))
            print(f" {time.perf_counter() - t0:.1f}s", flush=True, file=sys.stderr)
    if not args.quick:
        attach_interleaved_vmap(results)
    text = report(results, libs, args.quick)
    print()
    print(text)
    failed = [f"{r['name']}: {r['checks']['wengert']}" for r in results if r["checks"]["wengert"] != "ok"]
    env["load_average_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    out = {"environment": env, "quick": args.quick, "clock": args.clock, "libs": libs, "repeat": args.repeat,
           "budget_s": args.budget, "rows": results, "table": text,
           "targets": [{"target": n, "figure": f, "met": ok} for n, f, ok in targets(results, libs)],
           "wengert_failures": failed}
    if args.json:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1, default=float))
        print(f"\nresults written to {path}")
    if failed:
        print("\nwengert's gradient disagrees with the hand-written one:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""wg.jit against eager wengert, the hand-written NumPy gradient and the plain NumPy forward.

Usage:  PYTHONPATH=src python benchmarks/jit.py [--quick] [--only W1 W3:logsumexp] [--no-scaling]

Table 1, every seed row (benchmarks/workloads.py): medians of one run, measured round-robin
(run.measure): ``jit`` = ``wg.jit(wg.value_and_grad(f))``, ``eager`` = ``wg.value_and_grad(f)``,
``hand`` = the hand-written NumPy value and gradient, ``fwd`` = the user's code on plain arrays
(NumPy alone, no gradient), ``jax.jit`` when JAX is installed (loop rows skipped as in run.py).
``first`` is the jitted function's first call: trace, optimize, generate and compile.

Table 2, first-call time against the size of the program: W1's per-column loop with the batch
grown so that the staged program has about 1k, 10k and 100k equations, then the seed's size (and,
with --sixteen, W1 16x's); the time per equation shows whether staging is linear. Each size runs
in a fresh process, whose peak resident memory is shown.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# run first: importing it makes the BLAS single-threaded, as in every benchmark here, before NumPy
# loads it (a 2-thread BLAS on a loaded machine inflated W3 batch 128's matmuls about 50x)
from run import compare, fmt_time, malloc_argument, malloc_state, measure, pin_malloc, table  # noqa: E402,I001

if __name__ == "__main__":
    pin_malloc()   # as run.py: timings that do not depend on page faults left by the row before

import numpy as np  # noqa: E402

import peers  # noqa: E402
import workloads  # noqa: E402

import wengert as wg  # noqa: E402
import wengert.numpy as wnp  # noqa: E402


def _ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def bench_row(row, repeat, budget, use_jax, clock="wall"):
    fn = row.code(wnp, wg.Buffer)[row.formulation]
    eager = wg.value_and_grad(fn, argnums=row.argnums)
    jitted = wg.jit(eager)
    hand_args = row.hand_args or row.args
    ref_value, ref_grads = row.hand(*hand_args)
    t0 = time.perf_counter()
    value, grads = jitted(*row.args)
    first = time.perf_counter() - t0
    problem = compare(float(value), peers.leaves(grads), float(ref_value), peers.leaves(ref_grads))
    if problem:
        raise AssertionError(f"{row.name}: jit disagrees with the hand-written gradient: {problem}")
    lowered = jitted.lower(*row.args)
    contestants = {
        "jit": lambda: jitted(*row.args),
        "eager": lambda: eager(*row.args),
        "hand": lambda: row.hand(*hand_args),
        "fwd": lambda: fn(*row.args),
    }
    firsts = {"jit": first}
    note = ""
    if use_jax and not row.wengert_only:
        try:
            prep = peers.prepare("jax.jit", row)
            t0 = time.perf_counter()
            prep.vg()
            firsts["jax.jit"] = time.perf_counter() - t0
            contestants["jax.jit"] = prep.vg
        except peers.Skip as e:
            note = f"jax.jit skipped: {str(e)[:60]}"
    times = measure(contestants, repeat, budget, firsts)
    return {"row": row, "first": first, "eqns": lowered.eqns, "traced": lowered.eqns_traced,
            "times": {k: v["median" if clock == "wall" else "cpu_median"] for k, v in times.items()}, "note": note,
            "timings": lowered.timings}


def report(results):
    headers = ["row", "eqns (traced)", "jit", "eager", "hand", "fwd", "jax.jit",
               "jit/hand", "jit/eager", "jit/fwd", "jit/jax.jit", "first call"]
    lines = []
    for r in results:
        t = r["times"]
        lines.append([r["row"].name, f"{r['eqns']} ({r['traced']})", fmt_time(t["jit"]), fmt_time(t["eager"]),
                      fmt_time(t["hand"]), fmt_time(t["fwd"]), fmt_time(t["jax.jit"]) if "jax.jit" in t else "-",
                      _ratio(t["jit"], t["hand"]), _ratio(t["jit"], t["eager"]), _ratio(t["jit"], t["fwd"]),
                      _ratio(t["jit"], t.get("jax.jit")), fmt_time(r["first"])])
    print(table(headers, lines))
    for r in results:
        if r["note"]:
            print(f"  {r['row'].name}: {r['note']}")


def _w1_loop_first_call(N, W, R, B):
    """First call of jit(value_and_grad) of W1's loop at these sizes, in this (fresh) process: seconds
    by phase, equation counts and the process's peak resident memory."""
    code = workloads.w1_code(wnp, wg.Buffer)["loop"]
    rng = np.random.default_rng(0)
    a = rng.random((W, R, B), dtype=np.float32)
    b = rng.random((W, N, B), dtype=np.float32)
    wts = rng.standard_normal((N, R, B)).astype(np.float32)
    before = _peak_rss_mb()
    jitted = wg.jit(wg.value_and_grad(code, argnums=(0, 1)))
    t0 = time.perf_counter()
    jitted(a, b, wts)
    first = time.perf_counter() - t0
    lowered = jitted.lower(a, b, wts)
    return {"first": first, "traced": lowered.eqns_traced, "kept": lowered.eqns, "timings": lowered.timings,
            "peak_mb": _peak_rss_mb(), "start_mb": before}


def _peak_rss_mb():
    """This process's peak resident memory. Linux's VmHWM belongs to the process's own memory map;
    ru_maxrss would carry the parent's peak over into a child started after a large row."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _in_fresh_process(N, W, R, B):
    """``_w1_loop_first_call`` in a child process, so each size's peak memory is its own."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(N), str(W), str(R), str(B)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def scaling(sizes):
    """First call of jit(value_and_grad) of W1's loop, by the number of staged equations, each size in
    a fresh process (peak memory: the whole process, NumPy and wengert imported included)."""
    lines = []
    for label, (N, W, R, B) in sizes:
        r = _in_fresh_process(N, W, R, B)
        tm = r["timings"]
        lines.append([label, f"{N * R * B}", str(r["traced"]), str(r["kept"]), fmt_time(r["first"]),
                      fmt_time(tm["trace"]), fmt_time(tm["optimize"]), fmt_time(tm["generate"]),
                      fmt_time(tm["compile"]), f"{r['first'] / r['traced'] * 1e6:.1f} us",
                      f"{r['peak_mb']:.0f} MB ({r['start_mb']:.0f})"])
    print(table(["W1 loop (N,W,R,B)", "trips", "eqns traced", "eqns kept", "first call", "trace", "optimize",
                 "generate", "compile", "per traced eqn", "peak RSS (at start)"], lines))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, few samples (a smoke test)")
    p.add_argument("--only", nargs="*", help="workload tokens, e.g. W1 W3:logsumexp")
    p.add_argument("--no-scaling", action="store_true")
    p.add_argument("--no-jax", action="store_true")
    p.add_argument("--sixteen", action="store_true",
                   help="table 2 also stages W1 16x's loop (16,384 trips, about 630k equations, minutes)")
    p.add_argument("--child", nargs=4, type=int, help=argparse.SUPPRESS)
    p.add_argument("--max-trips", type=int, default=5000,
                   help="skip loop rows with more trips (W1 16x: 16,384 trips, ~570k equations, several GB "
                        "of trace-time samples); table 2 shows how first calls grow")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--budget", type=float, default=3.0)
    malloc_argument(p)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="medians of wall-clock time, or of this process's CPU time (less moved by other "
                        "processes on a loaded machine)")
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_w1_loop_first_call(*args.child)))
        return
    use_jax = not args.no_jax and peers.availability("jax.jit")[1] is None
    print(f"numpy {np.__version__}; jax.jit {'on' if use_jax else 'off'}; medians of {args.clock} time, "
          f"measured round-robin; malloc {malloc_state()}")
    results = []
    for row in workloads.rows(quick=args.quick, only=args.only):
        if row.loop_iterations > args.max_trips:
            print(f"  skipped: {row.name} ({row.loop_iterations} loop trips > --max-trips {args.max_trips})")
            continue
        results.append(bench_row(row, 3 if args.quick else args.repeat, 0.2 if args.quick else args.budget, use_jax,
                                 args.clock))
        print(f"  done: {row.name}", file=sys.stderr)
    report(results)
    if not args.no_scaling:
        print()
        sizes = [(f"{4},{16},{2},{B}", (4, 16, 2, B)) for B in ((4, 40) if args.quick else (4, 40, 400))]
        if not args.quick:
            sizes.append(("seed 16,64,4,16", (16, 64, 4, 16)))
        if args.sixteen:
            sizes.append(("16x 16,64,4,256", (16, 64, 4, 256)))
        scaling(sizes)


if __name__ == "__main__":
    main()

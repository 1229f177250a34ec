"""wg.jit's vectorizing pass on the seeds' per-column loops, in every spelling users write.

Usage:  PYTHONPATH=src python benchmarks/vectorize.py [--quick] [--only W1 W2] [--sixteen all|loop|none]
                                                       [--unvectorized] [--more-spellings] [--more-loops]
                                                       [--clock cpu]

One row per loop spelling (benchmarks/workloads.py: W1 = seed 000's pairwise cosine loop, W2 = seed
001's colwise attention, each with its results in a Buffer, written in place into a traced array,
or built as lists and stacked, and each dot product as ``@``, ``np.dot``, ``np.sum(u*v)`` or
``np.inner``; with ``--more-spellings`` also seed 000's Buffer loop with six more dot spellings and five
more norm spellings; with ``--more-loops`` the loops themselves written fourteen (W1) and nine (W2)
further ways: workloads.W1_LOOP_FORMS, W2_LOOP_FORMS; W1's also at 16x with ``--sixteen all``). Medians of one run, measured round-robin as in run.py and jit.py
(run.measure: fast calls grouped into ~5 ms samples, each after one untimed call):

* ``jit`` = ``wg.jit(wg.value_and_grad(f))`` with the pass (the default), checked against ``hand``;
* ``hand`` = the hand-vectorized NumPy value and gradient (workloads.py), the target: within 1.5x;
* ``fwd`` = the loop itself on plain NumPy arrays, forward only: the pass should beat it;
* ``novec`` (``--unvectorized``, seed-size ``loop`` rows) = the same jit with ``vectorize=False``;
* ``first`` = the first call (trace, passes, code generation, compile): the target is under 10 s;
* ``traced -> pass -> kept`` = equations staged, entering the vectorizing pass, in the program run.

Why the untimed call: timed cold, straight after the 11-37 ms plain-NumPy loop of ``fwd`` has
evicted its arrays from the caches, W1's sub-millisecond jit program reads 1.4-1.8x ``hand``
instead of 1.3-1.6x (measured side by side in one process). A training loop calls its step again
and again, so the warm figure is the one users get; ``--cold`` shows the cold one.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# first: importing it makes the BLAS single-threaded before NumPy loads it, as in every benchmark here
from run import compare, fmt_time, malloc_argument, malloc_state, measure, pin_malloc, table  # noqa: E402,I001

if __name__ == "__main__":
    pin_malloc()   # as run.py: timings that do not depend on page faults left by the row before

import numpy as np  # noqa: E402

import peers  # noqa: E402
import workloads  # noqa: E402
from timing import interleaved_medians  # noqa: E402

import wengert as wg  # noqa: E402
import wengert.numpy as wnp  # noqa: E402


def _ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def loop_rows(quick, only, sixteen, more=False, forms=False):
    rows = []
    for row in workloads.w1_rows(quick) + workloads.w2_rows(quick):
        if only and row.workload not in only:
            continue
        if row.formulation in ("vectorized", "vmap", "glued", "diagmatmul"):
            continue  # not loops
        if row.workload == "W1" and row.size.startswith("16x"):
            if sixteen == "none" or (sixteen == "loop" and row.formulation != "loop"):
                continue
        rows.append(row)
    # the spellings at 16x (workloads.py lists them at the seed size only)
    if sixteen == "all" and (not only or "W1" in only):
        big = [r for r in rows if r.workload == "W1" and r.size.startswith("16x")][:1]
        for r in big:
            for c in workloads.CONTAINERS:
                for d in workloads.DOT_SPELLINGS:
                    rows.append(workloads.Row("W1", r.size, workloads.spelling_name(c, d), workloads.w1_spellings_code,
                                              r.hand, r.args, r.argnums, loop_iterations=r.loop_iterations,
                                              spelling=(c, d)))
    if more and (not only or "W1" in only):   # seed 000's kernel spelled further ways, Buffer loop, seed size
        seed = [r for r in rows if r.workload == "W1" and r.size.startswith("seed")][:1]
        for r in seed:
            for c, d, n in ([("Buffer", d, workloads.NORM_SPELLINGS[0]) for d in workloads.MORE_DOT_SPELLINGS]
                            + [("Buffer", "np.dot", n) for n in workloads.NORM_SPELLINGS[1:]]):
                rows.append(workloads.Row("W1", r.size, workloads.spelling_name(c, d, n), workloads.w1_spellings_code,
                                          r.hand, r.args, r.argnums, loop_iterations=r.loop_iterations,
                                          spelling=(c, d, n)))
    if forms:   # the loops themselves written further ways (workloads.W1_LOOP_FORMS, W2_LOOP_FORMS), seed size;
        # with --sixteen all, W1's also at 16x the seed batch
        for name, code, kinds in (("W1", workloads.w1_loop_forms_code, workloads.W1_LOOP_FORMS),
                                  ("W2", workloads.w2_loop_forms_code, workloads.W2_LOOP_FORMS)):
            if only and name not in only:
                continue
            sizes = [[r for r in rows if r.workload == name and r.size.startswith("16x") == big][:1]
                     for big in ((False, True) if sixteen == "all" else (False,))]
            for r in (found[0] for found in sizes if found):
                for kind in kinds:
                    rows.append(workloads.Row(name, r.size, f"form[{kind}]", _with_at(code, kind), r.hand, r.args,
                                              r.argnums, hand_args=r.hand_args, loop_iterations=r.loop_iterations))
    return rows


def _with_at(code, kind):
    """A Row's code for one loop form, with wengert's functional update of any array (``wg.at``)."""
    return lambda np, Buffer=None: {f"form[{kind}]": code(np, Buffer, at=wg.at)[kind]}


def bench(row, repeat, unvectorized, clock="wall", cold=False, budget=2.0):
    fn = row.code(wnp, wg.Buffer)[row.formulation]
    step = wg.jit(wg.value_and_grad(fn, argnums=row.argnums))
    hand_args = row.hand_args or row.args
    t0 = time.perf_counter()
    try:
        value, grads = step(*row.args)
    except wg.InPlaceWriteError as e:
        return {"row": row, "skipped": f"jit(value_and_grad) refuses it: {str(e)[:90]}"}
    first = time.perf_counter() - t0
    ref_value, ref_grads = row.hand(*hand_args)
    problem = compare(float(value), peers.leaves(grads), float(ref_value), peers.leaves(ref_grads))
    if problem:
        raise AssertionError(f"{row.name}: the vectorized program disagrees with the hand-written gradient: {problem}")
    lowered = step.lower(*row.args)
    cases = {"jit": lambda: step(*row.args), "hand": lambda: row.hand(*hand_args), "fwd": lambda: fn(*row.args)}
    result = {"row": row, "first": first, "traced": lowered.eqns_traced, "kept": lowered.eqns,
              "pass": lowered.vectorized.get("before"), "timings": lowered.timings}
    if unvectorized:
        plain = wg.jit(wg.value_and_grad(fn, argnums=row.argnums), vectorize=False)
        t0 = time.perf_counter()
        plain(*row.args)
        result["novec_first"] = time.perf_counter() - t0
        result["novec_kept"] = plain.lower(*row.args).eqns
        cases["novec"] = lambda: plain(*row.args)
    if cold:
        result["times"] = interleaved_medians(cases, repeat,
                                              clock=time.process_time if clock == "cpu" else time.perf_counter)
    else:
        times = measure(cases, repeat, budget, first_call={"jit": first})
        result["times"] = {k: v["median" if clock == "wall" else "cpu_median"] for k, v in times.items()}
    return result


def report(results):
    headers = ["row", "traced -> pass -> kept", "jit", "hand", "fwd", "novec", "jit/hand", "jit/fwd", "novec/jit",
               "first (trace+passes)"]
    lines, notes = [], []
    for r in results:
        if "skipped" in r:
            notes.append(f"  {r['row'].name}: skipped, {r['skipped']}")
            continue
        t = r["times"]
        tm = r["timings"]
        lines.append([r["row"].name, f"{r['traced']} -> {r['pass']} -> {r['kept']}", fmt_time(t["jit"]),
                      fmt_time(t["hand"]), fmt_time(t["fwd"]), fmt_time(t.get("novec")), _ratio(t["jit"], t["hand"]),
                      _ratio(t["jit"], t["fwd"]), _ratio(t.get("novec"), t["jit"]),
                      f"{fmt_time(r['first'])} ({fmt_time(tm['trace'])}+{fmt_time(tm['optimize'])})"])
        if "novec_first" in r:
            notes.append(f"  {r['row'].name}: vectorize=False keeps {r['novec_kept']} equations, "
                         f"first call {fmt_time(r['novec_first'])}")
    print(table(headers, lines))
    for n in notes:
        print(n)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, few samples (a smoke test)")
    p.add_argument("--only", nargs="*", help="workloads: W1, W2")
    p.add_argument("--sixteen", choices=("all", "loop", "none"), default="loop",
                   help="W1 at 16x the seed batch: every spelling (and with --more-loops every loop form), "
                        "the seed's own loop, or none")
    p.add_argument("--unvectorized", action="store_true",
                   help="also time vectorize=False on the seed-size 'loop' rows (tens of seconds to stage)")
    p.add_argument("--more-spellings", action="store_true",
                   help="also seed 000's Buffer loop with the dot product as np.vdot, np.einsum, np.tensordot, "
                        "u.dot(v), np.matmul, u.T @ v, and the norm as np.linalg.norm and four more (seed size)")
    p.add_argument("--more-loops", action="store_true",
                   help="also the loops themselves written further ways, seed size: W1 with every column read "
                        "where used, columns normalized first, lists + np.array, x.at[].set, the batch innermost, "
                        "a matrix-vector product per (j, k), columns of a[..., k], np.split and enumerate, "
                        "np.moveaxis and iterate, rows of a.T, columns kept 2-D (a[:, j:j+1, k].T @ ...), np.take "
                        "then the column, x[:, [i], k].ravel(), np.dot(u / |u|, v / |v|) per pair; W2 with b "
                        "outer, lists + np.array, an einsum per column, x.at[].set, one row per step, rows of y.T, "
                        "the steps stacked and read Y[t, :, b], columns kept 2-D, the steps glued and read "
                        "Y[:, t*B + b]")
    malloc_argument(p)
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="medians of wall-clock time, or of this process's CPU time (less moved by other "
                        "processes on a loaded machine; the first call is always wall-clock)")
    p.add_argument("--cold", action="store_true",
                   help="time each call once, round-robin, with no untimed call before it (caches as the "
                        "previous case left them: timing.interleaved_medians)")
    p.add_argument("--repeat", type=int, default=31)
    args = p.parse_args(argv)
    how = "one call each, cold" if args.cold else "each sample after an untimed call"
    print(f"numpy {np.__version__}; medians of {args.repeat} ({args.clock} time), measured round-robin, {how}; "
          f"malloc {malloc_state()}")
    results = []
    for row in loop_rows(args.quick, args.only, args.sixteen, args.more_spellings, args.more_loops):
        unvec = args.unvectorized and row.formulation == "loop" and not row.size.startswith("16x")
        results.append(bench(row, 3 if args.quick else args.repeat, unvec, args.clock, args.cold,
                             0.2 if args.quick else 2.0))
        print(f"  done: {row.name}", file=sys.stderr, flush=True)
    report(results)


if __name__ == "__main__":
    main()

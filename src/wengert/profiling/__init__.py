"""``wg.profile``: where a gradient's time and memory go, and why, in plain language.

    report = wg.profile(loss, params, x, y, argnums=0)
    print(report)                 # totals, tables by source line and primitive, ranked findings
    report.to_dict()              # the same as plain data (report.to_json() for a string)
    report.plot("profile.png")    # forward and backward time by source line (needs matplotlib)

From the command line, for a script that computes gradients somewhere inside it:

    python -m wengert profile train.py --epochs 1

Profiling is off unless one of these runs: the engine carries no flag, timer or frame inspection
for it. While it runs, the engine's functions are swapped for instrumented ones (see _session.py).
"""
from __future__ import annotations

from time import perf_counter

import numpy as np

from ..core import tree
from ..transforms.reverse import argnames as _positional_names
from ..transforms.jit import ConcretizationError, jit as _jit
from ..transforms.reverse import value_and_grad
from ._report import Finding, Report, fmt_time
from ._session import Session, STATE

__all__ = ["profile", "Report", "Finding"]


def profile(f, *args, argnums=0, has_aux=False, repeat=5, detail_runs=2, max_seconds=10.0, try_jit=None,
            **kwargs):
    """Profile ``value_and_grad(f, argnums, has_aux)(*args, **kwargs)``; return a :class:`Report`.

    Runs ``f`` once untraced and ``value_and_grad`` once to warm up; then up to ``repeat`` times
    (or until ``max_seconds`` have passed) the plain forward pass and a clean ``value_and_grad``,
    timed at the boundaries only; then ``detail_runs`` instrumented ``value_and_grad`` calls that
    time and name every recorded operation (merged entry by entry, keeping each entry's fastest
    time). Totals are the best of the clean runs; the tables and findings come from the
    instrumented runs. ``kwargs`` are passed to ``f``.

    When a loop's many small operations are a finding, the profile also measures the fix that keeps
    the loop: ``wg.jit(value_and_grad(f))`` (staged once, its loop vectorized), timing its first call
    and its best call, and quotes the gain in the loop finding (``report.jit``). ``try_jit=None``
    does so when staging is estimated to fit in ``max_seconds``; ``True`` always; ``False`` never.
    """

    if STATE.session is not None:
        raise RuntimeError("wg.profile is already running; profiles do not nest")
    vg = value_and_grad(f, argnums=argnums, has_aux=has_aux)
    plain = []
    mode = {"detail": False}
    session = Session(lambda site: mode["detail"])
    with session:
        session.paused = True
        f(*args, **kwargs)
        session.paused = False
        vg(*args, **kwargs)
        warm = len(session.calls)
        start = perf_counter()
        for k in range(max(1, repeat)):
            session.paused = True
            t0 = perf_counter()
            f(*args, **kwargs)
            plain.append(perf_counter() - t0)
            session.paused = False
            vg(*args, **kwargs)
            if perf_counter() - start > max_seconds:
                break
        mode["detail"] = True
        before = len(session.calls)
        start = perf_counter()
        for k in range(max(1, detail_runs)):
            vg(*args, **kwargs)
            if perf_counter() - start > max_seconds / 2:
                break
    calls = session.calls
    details = calls[before:]
    clean = calls[warm:before]
    nums = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    nums = tuple(a % len(args) for a in nums) if args else ()
    title = f"{_name(f)}({_describe_args(f, args, nums)})"
    report = Report(title, details, clean, plain, input_names(f, args, nums), calibration=session.calibration)
    if try_jit is not False and any(finding.kind == "loop" for finding in report.findings):
        report.advise_jit(_measure_jit(vg, args, kwargs, report, repeat, max_seconds, force=try_jit is True))
    return report


# Staging costs about this much per recorded operation, with a margin: each operation stages its
# forward equation and its backward ones (W1's seed loop: 33k equations from 10k operations), and
# benchmarks/jit.py's first-call table measures 12-23 us per staged equation on a quiet machine;
# the whole first call measured 94-112 us per operation on the seed loops with other work running.
STAGING_PER_OPERATION_S = 150e-6


def _measure_jit(vg, args, kwargs, report, repeat, max_seconds, force):
    """Time ``wg.jit(vg)`` on the profiled arguments: its first call (staging, passes, compile) and
    the best of ``repeat`` later calls, against the eager gradient's best clean call."""
    estimate = report.nodes * STAGING_PER_OPERATION_S
    if not force and estimate > max_seconds:
        return dict(measured=False, reason=(
            f"staging {report.nodes:,} operations would take about {fmt_time(estimate)}, over max_seconds="
            f"{max_seconds:g}; pass try_jit=True to measure it"))
    jitted = _jit(vg)
    start = perf_counter()
    try:
        jitted(*args, **kwargs)
    except ConcretizationError as err:   # Python control flow on values: the program cannot be staged
        return dict(measured=False, reason=f"wg.jit cannot stage this function: {err}")
    first = perf_counter() - start
    best = float("inf")
    for _ in range(max(1, repeat)):
        t0 = perf_counter()
        jitted(*args, **kwargs)
        best = min(best, perf_counter() - t0)
    lowered = jitted.lower(*args, **kwargs)
    return dict(measured=True, first_call_s=first, value_and_grad_s=best, eager_value_and_grad_s=report.gradient,
                speedup=report.gradient / best if best > 0 else None,
                equations_traced=lowered.eqns_traced, equations=lowered.eqns)


def _name(f):
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or type(f).__name__
    return name.replace("<locals>.", "")


def _argnames(f, count):
    """Parameter names for the first ``count`` positional arguments (``argN`` where unnamed)."""
    return [name or f"arg{i}" for i, name in enumerate(_positional_names(f, count))]


def input_names(f, args, argnums):
    """``["p.w0", "p.w1", ...]``: one name per differentiated leaf, in tape order."""
    names = _argnames(f, len(args))
    out = []
    for a in argnums:
        for path, _ in tree.flatten_with_paths(args[a])[0]:
            out.append(names[a] + tree.path_str(path))
    return out


def _summary(x):
    if isinstance(x, np.ndarray):
        return f"{x.dtype.name}{list(x.shape)}".replace(" ", "")
    if isinstance(x, (list, tuple)):
        if x and all(isinstance(v, np.ndarray) and v.shape == x[0].shape and v.dtype == x[0].dtype for v in x):
            return f"{type(x).__name__} of {len(x)} x {_summary(x[0])}"
        return f"{type(x).__name__} of {len(x)}"
    if isinstance(x, (int, float, np.generic)):
        return repr(x)
    leaves = tree.leaves(x) if hasattr(tree, "leaves") else []
    return f"{type(x).__name__} of {len(leaves)} arrays" if leaves else type(x).__name__


def _describe_args(f, args, argnums):
    names = _argnames(f, len(args))
    parts = [f"{names[k]}: {_summary(a)}" for k, a in enumerate(args)]
    text = ", ".join(parts)
    if len(text) > 120:
        text = ", ".join(names[: len(args)])
    return text + f"; argnums={argnums if len(argnums) != 1 else argnums[0]}"

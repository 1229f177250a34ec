"""``python -m wengert profile script.py [args]``: profile every gradient call a script makes.

The script runs unchanged (as ``__main__``, with ``sys.argv`` set to the script and its
arguments). Each distinct call site of a gradient (``wg.grad(f)(x)``, ``vg(params, x)``,
``wg.vjp(...)``) gets one report: its first two calls are instrumented (the second, warm one is
reported), later calls are timed at the forward/backward boundaries only and give the totals.
The plain forward pass is timed by calling the function twice more, untraced, before its first
gradient call, with NumPy's and Python's global random states saved and restored (``--no-forward``
turns this off, for functions with side effects).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import runpy
import sys
import traceback
from time import perf_counter

import numpy as np

from ._report import Report, short_path
from ._session import Session
from . import _name, input_names

USAGE = "python -m wengert profile [--json PATH] [--plot PATH] [--no-forward] script.py [args ...]"


class _Site:
    def __init__(self, site):
        self.site = site
        self.calls = []
        self.count = 0
        self.plain = []
        self.function = None


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m wengert profile",
        description="Run a Python script unchanged and explain the cost of every gradient it computes.")
    parser.add_argument("--json", metavar="PATH", help="also write the reports as JSON ('-' for stdout)")
    parser.add_argument("--plot", metavar="PATH",
                        help="draw time by source line (PATH, or PATH-2.png, ... for several call sites)")
    parser.add_argument("--no-forward", action="store_true",
                        help="do not call the differentiated functions untraced to time the plain forward pass")
    parser.add_argument("--detail-calls", type=int, default=2, metavar="N",
                        help="instrument the first N calls of each call site (default 2)")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    opts = parser.parse_args(argv)

    sites = {}
    session = None

    def policy(site):
        rec = sites.get(site)
        if rec is None:
            rec = sites[site] = _Site(site)
        rec.count += 1
        return rec.count <= max(1, opts.detail_calls)

    def on_call(call):
        rec = sites[call.site]
        rec.calls.append(call)
        if call.function is not None and rec.function is None:
            rec.function = call.function
            if not opts.no_forward:
                rec.plain.extend(_time_plain(session, *call.function))

    script = opts.script
    if not os.path.exists(script):
        parser.error(f"no such script: {script}")
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [script] + list(opts.args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    status = 0
    session = Session(policy, on_call)
    try:
        with session:
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:       # report what was measured, then fail like the script did
                traceback.print_exc()
                status = 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path and sys.path[0] == os.path.dirname(os.path.abspath(script)):
            sys.path.pop(0)

    reports = _reports(sites, session.calibration, opts.detail_calls)
    _print(reports, script)
    if opts.json:
        data = [dict(call_site=_site_text(site), calls=count, report=rep.to_dict()) for site, count, rep in reports]
        text = json.dumps(data, indent=1)
        if opts.json == "-":
            print(text)
        else:
            with open(opts.json, "w") as fh:
                fh.write(text)
    if opts.plot:
        for k, (site, count, rep) in enumerate(reports, 1):
            path = opts.plot
            if len(reports) > 1:
                stem, ext = os.path.splitext(path)
                path = f"{stem}-{k}{ext or '.png'}"
            rep.plot(path)
            print(f"wengert profile: wrote {path}", file=sys.stderr)
    return status


def _time_plain(session, f, args, argnums, kwargs):
    """Two untraced calls of ``f`` (the faster is kept), leaving the global random states as they were."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    session.paused = True
    times = []
    try:
        for _ in range(2):
            t0 = perf_counter()
            f(*args, **kwargs)
            times.append(perf_counter() - t0)
    except Exception:
        times = []
    finally:
        session.paused = False
        np.random.set_state(np_state)
        random.setstate(py_state)
    return [min(times)] if times else []


def _site_text(site):
    if site is None:
        return "(unknown)"
    filename, line, func = site
    return f"{short_path(filename)}:{line} in {func}"


def _reports(sites, calibration, detail_calls):
    out = []
    for site, rec in sites.items():
        details = [c for c in rec.calls[: max(1, detail_calls)] if c.detail and c.log is not None and c.log.backward_done]
        if not details:
            continue
        warm = details[1:] or details          # the first call pays one-time costs
        clean = [c for c in rec.calls if not c.detail]
        notes = []
        if rec.function is not None:
            f, args, argnums, kwargs = rec.function
            title = f"{_name(f)}, differentiated at {_site_text(site)}"
            names = input_names(f, args, argnums)
        else:
            title = f"gradient at {_site_text(site)}"
            names = []
        if not rec.plain:
            notes.append("the plain forward pass was not timed (--no-forward, or the function could not be "
                         "called again untraced), so there is no gradient/forward ratio")
        pulls = max((c.pulls for c in rec.calls), default=0)
        if pulls > 1:
            notes.append(f"calls at this site ran the backward pass up to {pulls} times (vjp, jacobian); "
                         "the backward figures are for the first")
        rep = Report(title, warm, clean, rec.plain, names, notes=notes, calibration=calibration)
        out.append((site, rec.count, rep))
    out.sort(key=lambda item: -(item[2].gradient * item[1]))
    return out


def _print(reports, script):
    if not reports:
        print(f"wengert profile: {script} computed no gradients (wg.grad, wg.value_and_grad, wg.vjp, ...)")
        return
    for site, count, rep in reports:
        print("=" * 100)
        print(f"gradient call site {_site_text(site)}: {count:,} call(s)")
        print(rep)

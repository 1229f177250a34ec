"""The cost of odeint's gradient: the adjoint method against differentiating through a
fixed-step RK4 solver written with wengert.numpy, measured side by side (interleaved) in one run.

    python benchmarks/odeint.py [--repeat 7] [--sizes 4 16] [--clock wall|cpu]

The system is a small neural ODE, ``y' = tanh(W y + b)`` on ``t`` in [0, 2] with 6 output times,
loss ``sum(ys ** 2)``, differentiated in ``y0``, ``W`` and ``b``. Rows (medians):

  * odeint (adjoint): ``wg.value_and_grad`` through ``wengert.scipy.integrate.odeint`` (SciPy's
    LSODA, rtol = atol = 1e-8), against its own forward solve;
  * odeint (jvp, one direction): one forward-mode derivative by the sensitivity equations;
  * RK4, N steps: the same loss through ``N`` fixed RK4 steps written with ``wnp``, recorded
    on the tape and differentiated by reverse mode, against its own forward pass.

The error column is the largest relative error of the gradient (for the jvp row, of the
directional derivative) against a reference (RK4 with 4096 steps, whose own error is far below
the others'), so each method's cost is read next to the accuracy it buys; the tape column counts
the entries reverse mode keeps until the backward pass (the adjoint method keeps one, whatever
the number of solver steps; forward mode keeps none).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from timing import interleaved_medians

import wengert as wg
import wengert.numpy as wnp
from wengert.scipy.integrate import odeint
from wengert.transforms.reverse import _Recording

T = np.linspace(0.0, 2.0, 6)
TOL = dict(rtol=1e-8, atol=1e-8)


def rhs(y, t, w, b):
    return wnp.tanh(w @ y + b)


def odeint_loss(y0, w, b):
    return wnp.sum(odeint(rhs, y0, T, (w, b), **TOL) ** 2)


def rk4_solve(y0, w, b, steps):
    """Fixed-step RK4 over T, ``steps`` steps in all, the outputs read at T's points."""
    per = steps // (len(T) - 1)
    ys, y = [y0], y0
    for i in range(len(T) - 1):
        h = (T[i + 1] - T[i]) / per
        t = T[i]
        for _ in range(per):
            k1 = rhs(y, t, w, b)
            k2 = rhs(y + 0.5 * h * k1, t + 0.5 * h, w, b)
            k3 = rhs(y + 0.5 * h * k2, t + 0.5 * h, w, b)
            k4 = rhs(y + h * k3, t + h, w, b)
            y = y + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
            t = t + h
        ys.append(y)
    return wnp.stack(ys)


def rk4_loss(steps):
    def loss(y0, w, b):
        return wnp.sum(rk4_solve(y0, w, b, steps) ** 2)
    return loss


def _measure(cases, repeat, clock):
    """Median time of each case (milliseconds), cases interleaved so load skews them alike."""
    return interleaved_medians(cases, repeat, clock, scale=1e3)


def _tape_entries(loss, args):
    """How many entries the forward pass leaves on the tape (what reverse mode keeps alive)."""
    return len(_Recording(loss, args, tuple(range(len(args))), False).trace.tape)


def _rel_error(grads, reference):
    return max(float(np.max(np.abs(g - r)) / np.max(np.abs(r))) for g, r in zip(grads, reference))


def run(n, repeat, clock, rk4_steps, reference_steps=4096):
    rng = np.random.default_rng(n)
    y0 = rng.standard_normal(n)
    w = rng.standard_normal((n, n)) / np.sqrt(n)
    b = 0.1 * rng.standard_normal(n)
    args = (y0, w, b)
    argnums = (0, 1, 2)
    reference = wg.grad(rk4_loss(reference_steps), argnums=argnums)(*args)
    direction = tuple(rng.standard_normal(np.shape(a)) for a in args)
    exact_jvp = sum(float(np.sum(r * d)) for r, d in zip(reference, direction))

    cases = {
        "odeint forward": lambda: odeint_loss(*args),
        "odeint grad": lambda: wg.value_and_grad(odeint_loss, argnums=argnums)(*args),
        "odeint jvp": lambda: wg.jvp(odeint_loss, args, direction),
    }
    for steps in rk4_steps:
        cases[f"rk4 {steps} forward"] = (lambda s: lambda: rk4_loss(s)(*args))(steps)
        cases[f"rk4 {steps} grad"] = (lambda s: lambda: wg.value_and_grad(rk4_loss(s), argnums=argnums)(*args))(steps)
    times = _measure(cases, repeat, clock)

    rows = []
    g = wg.grad(odeint_loss, argnums=argnums)(*args)
    rows.append(("odeint (adjoint)", times["odeint forward"], times["odeint grad"], _rel_error(g, reference),
                 _tape_entries(odeint_loss, args)))
    d = float(wg.jvp(odeint_loss, args, direction)[1])
    rows.append(("odeint (jvp, one direction)", times["odeint forward"], times["odeint jvp"],
                 abs(d - exact_jvp) / abs(exact_jvp), 0))
    for steps in rk4_steps:
        g = wg.grad(rk4_loss(steps), argnums=argnums)(*args)
        rows.append((f"RK4, {steps} steps", times[f"rk4 {steps} forward"], times[f"rk4 {steps} grad"],
                     _rel_error(g, reference), _tape_entries(rk4_loss(steps), args)))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--rk4-steps", type=int, nargs="+", default=[20, 50, 200])
    parser.add_argument("--reference-steps", type=int, default=4096)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args(argv)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    odeint_grad_ms = {}
    for n in args.sizes:
        rows = run(n, args.repeat, clock, args.rk4_steps, args.reference_steps)
        odeint_grad_ms[n] = rows[0][2]
        print(f"\nneural ODE y' = tanh(W y + b), n = {n} ({n * n + 2 * n} inputs), {len(T)} output times, "
              f"medians of {args.repeat} ({args.clock} clock)\n")
        print("| method | forward (ms) | derivative (ms) | derivative / forward | derivative / odeint grad "
              "| derivative rel. error | tape entries |")
        print("|---|---|---|---|---|---|---|")
        for name, fwd, der, err, entries in rows:
            print(f"| {name} | {fwd:.2f} | {der:.2f} | {der / fwd:.1f}x | {der / odeint_grad_ms[n]:.2f}x "
                  f"| {err:.1e} | {entries} |")


if __name__ == "__main__":
    main()

"""Forward mode's cost: jvp against the forward pass, hvp against grad, and the two ways to a
Jacobian or a Hessian, measured side by side (interleaved) in one run.

    python benchmarks/forward_mode.py [--repeat 15] [--clock wall|cpu]

Rows (medians in microseconds):
  * jvp / f: one JVP (a rule per operation) against the plain forward pass, and against
    ``linearize``'s JVP (the transposition forward mode used before it was a trace level);
  * hvp / grad: forward over reverse against one gradient, and against reverse over reverse
    (the gradient of <grad f, v>);
  * hessian: ``jacfwd(jacrev f)`` against ``jacobian(jacobian f)``;
  * jacfwd / jacrev on a function with few inputs and many outputs (where forward mode wins).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from timing import interleaved_medians

import wengert as wg
import wengert.numpy as wnp


def mlp(w1, w2, x):
    return wnp.sum(wnp.tanh(wnp.tanh(x @ w1) @ w2) ** 2)


def column_loop(a, b):
    total = 0.0
    for j in range(a.shape[1]):
        total = total + wnp.sum(wnp.sin(a[:, j]) * b[:, j])
    return total


def rosenbrock(x):
    return wnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def wide_output(x, basis):
    return wnp.tanh(basis @ x) * wnp.sum(x ** 2)


def _clock(kind):
    return time.process_time if kind == "cpu" else time.perf_counter


def _measure(cases, repeat, clock):
    """Median time of each case (microseconds), cases interleaved so load skews them alike."""
    return interleaved_medians(cases, repeat, clock, scale=1e6)


def rows(repeat, clock):
    rng = np.random.default_rng(0)
    out = []

    w1, w2, x = rng.standard_normal((64, 128)) * 0.1, rng.standard_normal((128, 32)) * 0.1, \
        rng.standard_normal((256, 64))
    t1, t2 = rng.standard_normal(w1.shape), rng.standard_normal(w2.shape)
    _, f_jvp = wg.linearize(lambda a, b: mlp(a, b, x), w1, w2)
    j = wg.jvp(lambda a, b: mlp(a, b, x), (w1, w2), (t1, t2))[1]
    assert np.allclose(j, f_jvp(t1, t2))
    t = _measure({"f": lambda: mlp(w1, w2, x),
                  "jvp": lambda: wg.jvp(lambda a, b: mlp(a, b, x), (w1, w2), (t1, t2)),
                  "linearize jvp": lambda: f_jvp(t1, t2)}, repeat, clock)
    out.append(("jvp / f", "MLP 256x64x128x32", t["f"], t["jvp"], t["linearize jvp"]))

    a, b = rng.standard_normal((16, 64)), rng.standard_normal((16, 64))
    ta = rng.standard_normal(a.shape)
    _, f_jvp = wg.linearize(lambda a: column_loop(a, b), a)
    t = _measure({"f": lambda: column_loop(a, b),
                  "jvp": lambda: wg.jvp(lambda a: column_loop(a, b), (a,), (ta,)),
                  "linearize jvp": lambda: f_jvp(ta)}, repeat, clock)
    out.append(("jvp / f", "64-column loop", t["f"], t["jvp"], t["linearize jvp"]))

    z, v = rng.standard_normal(1000), rng.standard_normal(1000)

    def rev_rev():
        return wg.grad(lambda z: wnp.sum(wg.grad(rosenbrock)(z) * v))(z)

    assert np.allclose(rev_rev(), wg.hvp(rosenbrock, (z,), (v,)))
    t = _measure({"grad": lambda: wg.grad(rosenbrock)(z),
                  "hvp": lambda: wg.hvp(rosenbrock, (z,), (v,)),
                  "rev over rev": rev_rev}, repeat, clock)
    out.append(("hvp / grad", "Rosenbrock n=1000", t["grad"], t["hvp"], t["rev over rev"]))

    z = rng.standard_normal(30)
    jj = wg.jacobian(wg.jacobian(rosenbrock))
    assert np.allclose(wg.hessian(rosenbrock)(z), jj(z))
    t = _measure({"grad": lambda: wg.grad(rosenbrock)(z),
                  "hessian": lambda: wg.hessian(rosenbrock)(z),
                  "jacobian(jacobian)": lambda: jj(z)}, max(3, repeat // 3), clock)
    out.append(("hessian / grad", "Rosenbrock n=30", t["grad"], t["hessian"], t["jacobian(jacobian)"]))

    x, basis = rng.standard_normal(8), rng.standard_normal((400, 8))
    assert np.allclose(wg.jacfwd(wide_output)(x, basis), wg.jacobian(wide_output)(x, basis))
    t = _measure({"f": lambda: wide_output(x, basis),
                  "jacfwd": lambda: wg.jacfwd(wide_output)(x, basis),
                  "jacrev": lambda: wg.jacobian(wide_output)(x, basis)}, max(3, repeat // 3), clock)
    out.append(("jacfwd / f", "R^8 -> R^400", t["f"], t["jacfwd"], t["jacrev"]))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="wall")
    args = parser.parse_args()
    print(f"medians of {args.repeat} interleaved runs, {args.clock} clock, microseconds\n")
    print("| ratio | workload | baseline | forward mode | ratio | the other way | forward mode / other way |")
    print("|---|---|---|---|---|---|---|")
    for what, label, base, fwd, other in rows(args.repeat, _clock(args.clock)):
        print(f"| {what} | {label} | {base:.0f} | {fwd:.0f} | {fwd / base:.2f}x | {other:.0f} | "
              f"{fwd / other:.2f}x |")


if __name__ == "__main__":
    main()

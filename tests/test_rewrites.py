"""Rewrites: log of a known composition records the fused, stable operation (docs/rewrites.md).

For each pattern: the fused primitive is what the tape holds, the value and gradient equal those of
the composition at ordinary inputs, and stay finite at logits of 1e4 where the composition's do
not; rewrites can be turned off; near-misses are left alone."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.special

import wengert as wg
import wengert.nn as wnn
import wengert.numpy as wnp

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4))
LABELS = np.array([0, 3, 1])
ONEHOT = np.eye(4)[LABELS]


# the rewrite records log_softmax as one of two primitives: ``nn.log_softmax_known`` where the forward
# pass already holds the value, ``nn.log_softmax`` otherwise; both are "log_softmax" here
LOG_SOFTMAX = ("nn.log_softmax", "nn.log_softmax_known")


def _fused_name(name):
    return "nn.log_softmax" if name in LOG_SOFTMAX else name


def recorded(f, *args):
    """The names of the primitives on the tape when ``f`` is differentiated at ``args``."""
    names = []

    def traced(*a):
        out = f(*a)
        names.extend(_fused_name(e[0].name) for e in out._trace.tape if e[0] is not None)
        return out

    wg.grad(traced)(*args)
    return names


def softmax_written_out(x, axis=1):
    e = wnp.exp(x)
    return e / wnp.sum(e, axis=axis, keepdims=True)


def softmax_shifted(x, axis=1):
    e = wnp.exp(x - wnp.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid_written_out(x):
    return 1 / (1 + wnp.exp(-x))


PATTERNS = {
    # name: (function of x, the fused primitive it must record)
    "log(softmax) with targets": (lambda x: -wnp.sum(ONEHOT * wnp.log(softmax_written_out(x))), "nn.log_softmax"),
    "log(softmax) indexed": (lambda x: -wnp.mean(wnp.log(softmax_written_out(x))[np.arange(3), LABELS]),
                             "nn.log_softmax"),
    "log(softmax[index])": (lambda x: -wnp.mean(wnp.log(softmax_written_out(x)[np.arange(3), LABELS])),
                            "nn.log_softmax"),
    "log(shifted softmax)": (lambda x: -wnp.sum(ONEHOT * wnp.log(softmax_shifted(x))), "nn.log_softmax"),
    "exp(x) / sum(exp(x)), axis 0": (
        lambda x: wnp.sum(wnp.log(wnp.exp(x) / wnp.sum(wnp.exp(x), axis=0, keepdims=True)) * X), "nn.log_softmax"),
    "softmax over all elements": (lambda x: wnp.sum(wnp.log(wnp.exp(x) / wnp.sum(wnp.exp(x))) * X),
                                  "nn.log_softmax"),
    "sum without keepdims, then [:, None]": (
        lambda x: wnp.sum(wnp.log(wnp.exp(x) / wnp.sum(wnp.exp(x), axis=1)[:, None]) * X), "nn.log_softmax"),
    "(1 / sum) * e (seed 002)": (
        lambda x: wnp.sum(wnp.log((1 / wnp.sum(wnp.exp(x), axis=1, keepdims=True)) * wnp.exp(x)) * X),
        "nn.log_softmax"),
    "log(nn.softmax)": (lambda x: wnp.sum(wnp.log(wnn.softmax(x)) * X), "nn.log_softmax"),
    "np.log(softmax) through __array_ufunc__": (lambda x: wnp.sum(np.log(softmax_written_out(x)) * X),
                                                "nn.log_softmax"),
    "log(sum(exp))": (lambda x: wnp.sum(wnp.log(wnp.sum(wnp.exp(x), axis=1))), "nn.logsumexp"),
    "log(sum(exp)) keepdims": (lambda x: wnp.sum(wnp.log(wnp.sum(wnp.exp(x), axis=0, keepdims=True)) * X[0]),
                               "nn.logsumexp"),
    "log(sum(b * exp))": (lambda x: wnp.sum(wnp.log(wnp.sum(np.abs(X) * wnp.exp(x), axis=1))), "nn.logsumexp_b"),
    "log(sigmoid) written out": (lambda x: wnp.sum(wnp.log(sigmoid_written_out(x)) * X), "nn.log_sigmoid"),
    "log(1 - sigmoid) written out": (lambda x: wnp.sum(wnp.log(1 - sigmoid_written_out(x)) * X), "nn.softplus"),
    "log(nn.sigmoid)": (lambda x: wnp.sum(wnp.log(wnn.sigmoid(x)) * X), "nn.log_sigmoid"),
    "log(1 - nn.sigmoid)": (lambda x: wnp.sum(wnp.log(1 - wnn.sigmoid(x)) * X), "nn.softplus"),
    "binary cross-entropy written out": (
        lambda x: -wnp.mean((X > 0) * wnp.log(sigmoid_written_out(x))
                            + (1 - (X > 0)) * wnp.log(1 - sigmoid_written_out(x))), "nn.softplus"),
}


@pytest.mark.parametrize("name", list(PATTERNS))
def test_the_fused_operation_is_recorded_instead_of_log(name):
    f, fused = PATTERNS[name]
    names = recorded(f, X)
    assert fused in names, names
    assert "log" not in names, names


@pytest.mark.parametrize("name", list(PATTERNS))
def test_value_and_gradient_equal_the_compositions(name):
    f, _ = PATTERNS[name]
    value, g = wg.value_and_grad(f)(X)
    with wg.config.override(rewrites=False):
        assert "log" in recorded(f, X)
        ref_value, ref_g = wg.value_and_grad(f)(X)
    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    np.testing.assert_allclose(g, ref_g, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_second_order_through_the_rewritten_function(name):
    f, _ = PATTERNS[name]
    wg.check_grads(f, (X,), order=2)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_finite_at_logits_of_1e4(name):
    f, _ = PATTERNS[name]
    big = X * 1e4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # the user's own exp(1e4) overflows before log is reached
        value, g = wg.value_and_grad(f)(big)
        with wg.config.override(rewrites=False):
            ref_value, ref_g = wg.value_and_grad(f)(big)
    assert np.isfinite(value) and np.all(np.isfinite(g))
    assert not (np.isfinite(ref_value) and np.all(np.isfinite(ref_g)))   # what the rewrite saves


def test_the_unfused_mlp_forward_no_longer_overflows_at_logits_of_1e4():
    """Seed 002's loss as a user writes it: crossEntropy y . softMax, softmax with no shift."""
    rng = np.random.default_rng(1)
    W = rng.standard_normal((5, 4)).astype(np.float32)
    x = (rng.standard_normal((3, 5)) * 6e3).astype(np.float32)       # logits of order 1e4
    y = ONEHOT.astype(np.float32)

    def loss(W):
        z = x @ W
        return -wnp.sum(y * wnp.log(softmax_written_out(z))) / x.shape[0]

    z = x @ W
    assert np.abs(z).max() > 1e4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value, g = wg.value_and_grad(loss)(W)
        with wg.config.override(rewrites=False):
            bad_value, bad_g = wg.value_and_grad(loss)(W)
    assert not np.isfinite(bad_value) and not np.all(np.isfinite(bad_g))
    ref = -np.mean(np.sum(y * scipy.special.log_softmax(z.astype(np.float64), axis=1), axis=1))
    np.testing.assert_allclose(value, ref, rtol=1e-6)
    fused_value, fused_g = wg.value_and_grad(lambda W: wnn.softmax_cross_entropy(x @ W, y))(W)
    np.testing.assert_allclose(value, fused_value, rtol=1e-6)
    np.testing.assert_allclose(g, fused_g, rtol=1e-5, atol=1e-5)
    assert g.dtype == np.float32


def test_the_shift_by_the_max_is_dropped_from_the_gradient():
    names = recorded(lambda x: -wnp.sum(ONEHOT * wnp.log(softmax_shifted(x))), X)
    # the fused op sits on x itself, so max's and subtract's rules never run; check by tape position
    seen = {}

    def traced(x):
        out = -wnp.sum(ONEHOT * wnp.log(softmax_shifted(x)))
        tape = out._trace.tape
        seen["parents"] = [e[4] for e in tape if e[0] is not None and e[0].name in LOG_SOFTMAX]
        return out

    wg.grad(traced)(X)
    assert seen["parents"] == [((0, 0),)], (seen, names)


# --- near misses are left alone -------------------------------------------------------------------------
NEAR_MISSES = {
    "the sum of another array": lambda x: wnp.sum(wnp.log(wnp.exp(x) / wnp.sum(wnp.exp(x * 2), axis=1,
                                                                                keepdims=True))),
    "a sum along another axis": lambda x: wnp.sum(wnp.log(wnp.exp(x) / wnp.sum(wnp.exp(x), axis=0)[None, :][:, :1])),
    "2 / (1 + exp(-x))": lambda x: wnp.sum(wnp.log(2 / (1 + wnp.exp(-x)))),
    "1 / (2 + exp(-x))": lambda x: wnp.sum(wnp.log(1 / (2 + wnp.exp(-x)))),
    "log(sum(x))": lambda x: wnp.sum(wnp.log(wnp.sum(wnp.abs(x), axis=1))),
    "log(exp(x) + 1)": lambda x: wnp.sum(wnp.log(wnp.exp(x) + 1)),
    "a shift not constant along the axis": lambda x: wnp.sum(wnp.log(softmax_written_out(x - X)) * X),
}


@pytest.mark.parametrize("name", list(NEAR_MISSES))
def test_near_misses_record_plain_log_with_the_right_gradient(name):
    f = NEAR_MISSES[name]
    names = recorded(f, X)
    if name != "a shift not constant along the axis":
        assert "log" in names, names
    else:
        assert "nn.log_softmax" in names      # rewritten, but on x - X: the shift is kept
    wg.check_grads(f, (X,))


def test_an_in_place_write_after_exp_stops_the_rewrite():
    def f(x):
        z = x * 1.0
        e = wnp.exp(z)
        s = wnp.sum(e, axis=1, keepdims=True)
        z[0, 0] = 100.0                        # z changes after exp read it: exp's kept input is stale
        return wnp.sum(wnp.log(e / s) * X) + wnp.sum(z)

    names = recorded(f, X)
    assert "log" in names and "nn.log_softmax" not in names
    e = np.exp(X)
    np.testing.assert_allclose(f(X.copy()), np.sum(np.log(e / e.sum(1, keepdims=True)) * X) + X.sum() - X[0, 0] + 100)


def test_rewrites_can_be_turned_off():
    f, fused = PATTERNS["log(softmax) with targets"]
    wg.config.update("rewrites", False)
    try:
        names = recorded(f, X)
        assert fused not in names and "log" in names
    finally:
        wg.config.update("rewrites", True)
    assert fused in recorded(f, X)


def test_the_environment_variable_turns_rewrites_off():
    code = ("import wengert as wg, wengert.numpy as wnp, numpy as np\n"
            "assert not wg.config.rewrites\n"
            "def f(x):\n    y = wnp.log(wnp.exp(x) / wnp.sum(wnp.exp(x)))\n"
            "    print(sorted({e[0].name for e in y._trace.tape if e[0] is not None}))\n    return wnp.sum(y)\n"
            "wg.grad(f)(np.ones(3))\n")
    env = dict(os.environ, WENGERT_REWRITES="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "'log'" in out.stdout and "nn.log_softmax" not in out.stdout


def test_log_of_plain_arrays_is_untouched():
    assert type(wnp.log(np.ones(3))) is np.ndarray
    np.testing.assert_array_equal(wnp.log(np.exp(X)), np.log(np.exp(X)))


def test_the_mlp_benchmark_runs_and_checks_its_gradients():
    """benchmarks/mlp_fused.py checks every contestant's gradient against the hand-written one
    before timing; one round is enough to run those checks."""
    from pathlib import Path
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "mlp_fused.py"
    out = subprocess.run([sys.executable, str(script), "--repeat", "1"], capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "unfused / fused" in out.stdout and "hybrid / fused" in out.stdout


# --- divide: exp(z) / sum(exp(z)) is recorded as one softmax ----------------------------------------
SOFTMAX_DIVISIONS = {
    "shifted, axis 1": lambda x: softmax_shifted(x),
    "unshifted, axis 1": lambda x: softmax_written_out(x),
    "axis 0": lambda x: softmax_written_out(x, axis=0),
    "over all elements": lambda x: wnp.exp(x) / wnp.sum(wnp.exp(x)),
    "sum without keepdims, then [:, None]": lambda x: wnp.exp(x) / wnp.sum(wnp.exp(x), axis=1)[:, None],
}


@pytest.mark.parametrize("name", list(SOFTMAX_DIVISIONS))
def test_a_written_out_softmax_is_recorded_as_one_softmax(name):
    p = SOFTMAX_DIVISIONS[name]

    def f(x):
        return wnp.sum(p(x) * X)
    names = recorded(f, X)
    assert "nn.softmax_known" in names and "divide" not in names, names
    value, g = wg.value_and_grad(f)(X)
    with wg.config.override(rewrites=False):
        assert "divide" in recorded(f, X)
        ref_value, ref_g = wg.value_and_grad(f)(X)
    assert value == ref_value                  # the division's own value, not a recomputed one
    np.testing.assert_allclose(g, ref_g, rtol=1e-9, atol=1e-12)
    wg.check_grads(f, (X,), order=2)


@pytest.mark.parametrize("shape", [(3, 4), (12, 10)])
def test_the_softmax_rewrite_sits_on_the_unshifted_logits(shape):
    """max's and subtract's rules never run: the one softmax entry's parent is x itself (also past 64
    elements, where subtract's entry keeps only x's shape)."""
    x0 = RNG.standard_normal(shape)
    w = RNG.standard_normal(shape)
    seen = {}

    def f(x):
        out = wnp.sum(softmax_shifted(x) * w)
        seen["parents"] = [e[4] for e in out._trace.tape if e[0] is not None and e[0].name == "nn.softmax_known"]
        return out
    g = wg.grad(f)(x0)
    assert seen["parents"] == [((0, 0),)], seen
    with wg.config.override(rewrites=False):
        np.testing.assert_allclose(g, wg.grad(f)(x0), rtol=1e-9, atol=1e-12)


SIGMOID_DIVISIONS = {
    "1 / (1 + exp(-x))": lambda x: 1 / (1 + wnp.exp(-x)),
    "1 / (exp(-x) + 1)": lambda x: 1 / (wnp.exp(-x) + 1),
    "1.0 / (1.0 + np.exp(-x))": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "np.divide(1, 1 + exp(-x))": lambda x: wnp.divide(1, 1 + wnp.exp(-x)),
}


@pytest.mark.parametrize("name", list(SIGMOID_DIVISIONS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_written_out_sigmoid_is_recorded_as_one_sigmoid(name, dtype):
    """Its one rule (g s (1 - s)) runs instead of divide's, add's, exp's and negative's; the value is
    the division's own and the gradient the composition's."""
    s = SIGMOID_DIVISIONS[name]
    x = X.astype(dtype)
    seen = {}

    def f(x):
        out = wnp.sum(s(x) * X)
        if hasattr(out._trace, "tape"):
            seen["entries"] = [(e[0].name, e[4]) for e in out._trace.tape if e[0] is not None]
        return out
    value, g = wg.value_and_grad(f)(x)
    names = [n for n, _ in seen["entries"]]
    assert "nn.sigmoid_known" in names and "divide" not in names, names
    assert dict(seen["entries"])["nn.sigmoid_known"] == ((0, 0),)   # on x itself
    with wg.config.override(rewrites=False):
        ref_value, ref_g = wg.value_and_grad(f)(x)
        assert "divide" in [n for n, _ in seen["entries"]]
    assert value == ref_value                  # the division's own value, not a recomputed one
    assert g.dtype == dtype
    np.testing.assert_allclose(g, ref_g, rtol=1e-6 if dtype == np.float32 else 1e-12)
    if dtype == np.float64:
        wg.check_grads(f, (x,), order=2, modes=("rev", "fwd"))


def test_log_of_a_rewritten_sigmoid_is_still_log_sigmoid():
    names = recorded(lambda x: wnp.sum(wnp.log(sigmoid_written_out(x)) * X), X)
    assert "nn.log_sigmoid" in names and "log" not in names, names


def test_the_sigmoid_rewrite_under_other_transforms():
    f = lambda x: wnp.sum(sigmoid_written_out(x) * X)
    g = wg.grad(f)
    expected = np.stack([g(x) for x in X[:, None, :] + np.arange(3)[:, None]])
    np.testing.assert_allclose(wg.vmap(g)(X[:, None, :] + np.arange(3)[:, None]), expected, rtol=1e-12)
    np.testing.assert_allclose(wg.jit(g)(X), g(X), rtol=1e-12)
    hvp = wg.jvp(g, (X,), (X,))[1]
    np.testing.assert_allclose(hvp, wg.jvp(wg.grad(lambda x: wnp.sum(wnn.sigmoid(x) * X)), (X,), (X,))[1], rtol=1e-9)


@pytest.mark.parametrize("near", [
    lambda x: 2 / (1 + wnp.exp(-x)),           # not 1 over it
    lambda x: 1 / (2 + wnp.exp(-x)),           # not 1 plus
    lambda x: 1 / (1 + wnp.exp(x)),            # sigmoid(-x) without a negation: left as it is
    lambda x: 1 / (1 + wnp.sin(-x)),           # not exp
])
def test_a_division_that_is_not_a_sigmoid_stays_a_division(near):
    f = lambda x: wnp.sum(near(x) * X)
    names = recorded(f, X)
    assert "divide" in names and "nn.sigmoid_known" not in names, names
    wg.check_grads(f, (X,))


def test_a_sigmoid_denominator_written_in_place_through_a_view_is_not_rewritten():
    """The write through the view goes into ``a`` (NumPy's meaning): ``1 / a`` is no sigmoid."""
    def f(x):
        a = 1 + wnp.exp(-x)
        view = a[0]
        view[0] = 5.0
        return wnp.sum(1 / a)
    assert "nn.sigmoid_known" not in recorded(f, X)
    expected = np.sum(1 / (1 + np.exp(-X))) - 1 / (1 + np.exp(-X[0, 0])) + 1 / 5.0
    np.testing.assert_allclose(wg.value_and_grad(f)(X)[0], expected, rtol=1e-12)
    wg.check_grads(f, (X,))


def test_a_division_that_is_not_a_softmax_stays_a_division():
    def f(x):
        e = wnp.exp(x)
        return wnp.sum(e / wnp.sum(wnp.exp(2 * x), axis=1, keepdims=True) * X)
    assert "divide" in recorded(f, X) and "nn.softmax_known" not in recorded(f, X)
    wg.check_grads(f, (X,))


def test_an_overflowing_sum_leaves_the_division_alone():
    """exp(1e4) overflows: the user's own value (nan) comes back, as NumPy computes it."""
    big = X * 1e4

    def f(x):
        return wnp.sum(softmax_written_out(x) * X)
    assert "divide" in recorded(f, big)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = wg.value_and_grad(f)(big)[0]
        e = np.exp(big)
        np.testing.assert_array_equal(value, np.sum(e / e.sum(1, keepdims=True) * X))


# --- np.diag of a matrix product -----------------------------------------------------------------
A = RNG.standard_normal((4, 3))
B = RNG.standard_normal((3, 4))
W = RNG.standard_normal(4)


def weighted_diag_of_product(a, b):
    return wnp.sum(wnp.sin(wnp.diag(a @ b)) * W)


@pytest.mark.parametrize("argnums", [(0,), (1,), (0, 1)])
def test_diag_of_a_product_is_recorded_without_the_products_rules(argnums):
    names = []

    def f(a, b):
        out = weighted_diag_of_product(a, b)
        names.extend(e[0].name for e in out._trace.tape if e[0] is not None)
        return out
    value, grads = wg.value_and_grad(f, argnums=argnums)(A, B)
    assert "diagonal_of_product" in names and "diagonal" not in names, names
    with wg.config.override(rewrites=False):
        ref_value, ref_grads = wg.value_and_grad(weighted_diag_of_product, argnums=argnums)(A, B)
    assert value == ref_value                  # the product's own diagonal, not a recomputed one
    for g, ref in zip(grads, ref_grads):
        np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-12)
    wg.check_grads(weighted_diag_of_product, (A, B), order=2)
    wg.check_grads(weighted_diag_of_product, (A, B), modes=("fwd",), order=1)


def test_diag_of_a_product_under_vmap_and_jit_equals_the_composition():
    As = RNG.standard_normal((2, 4, 3))
    expected = [np.diag(a @ B) for a in As]
    np.testing.assert_allclose(wg.vmap(lambda a: wnp.diag(a @ B))(As), expected, rtol=1e-12)
    per_example = wg.vmap(wg.grad(weighted_diag_of_product))(As, np.stack([B, B]))
    for a, g in zip(As, per_example):
        np.testing.assert_allclose(g, wg.grad(weighted_diag_of_product)(a, B), rtol=1e-12)
    np.testing.assert_allclose(wg.jit(wg.grad(weighted_diag_of_product))(A, B),
                               wg.grad(weighted_diag_of_product)(A, B), rtol=1e-12)


@pytest.mark.parametrize("case", ["non-square product", "offset diagonal", "product written in place"])
def test_near_misses_of_diag_of_a_product_stay_a_diagonal(case):
    def f(a, b):
        if case == "non-square product":
            d = wnp.diag(a[:3] @ b)
        elif case == "offset diagonal":
            d = wnp.diag(a @ b, k=1)
        else:
            p = a @ b
            p[0, 0] = 2.0
            d = wnp.diag(p)
        out = wnp.sum(wnp.sin(d))
        names.extend(e[0].name for e in out._trace.tape if e[0] is not None)
        return out
    names = []
    wg.grad(f)(A, B)
    assert "diagonal" in names and "diagonal_of_product" not in names, names
    wg.check_grads(f, (A, B))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log_of_nn_softmax_reuses_its_value_unless_an_element_underflowed(dtype):
    """log(wnn.softmax(x)) takes log(p) from the softmax's own value when no element of p is below the
    smallest normal number (one log, no second pass over x), else computes log_softmax afresh."""
    def names_of(x):
        names = []

        def f(x):
            out = wnp.sum(wnp.log(wnn.softmax(x)) * X)
            names.extend(e[0].name for e in out._trace.tape if e[0] is not None)
            return out
        return wg.value_and_grad(f)(x), names

    for x, fused in ((X.astype(dtype), "nn.log_softmax_known"), ((X * 1e4).astype(dtype), "nn.log_softmax")):
        (value, g), names = names_of(x)
        assert fused in names and "log" not in names, names
        ref = np.log(np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True))
        logp = x.astype(np.float64) - x.max(axis=1, keepdims=True) - ref
        np.testing.assert_allclose(value, np.sum(logp * X), rtol=1e-5 if dtype == np.float32 else 1e-12)
        p = np.exp(logp)
        np.testing.assert_allclose(g, X - p * X.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)

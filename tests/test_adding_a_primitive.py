"""The worked example of docs/architecture.md, "Adding a primitive": a new primitive declared exactly as
the page shows (one ``defprim`` with every rule), exposed by one line, and checked by one table row:
reverse and forward mode, vmap, and second order, against finite differences."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import wengert as wg
from wengert.primitives._batching import elementwise_rule
from wengert.primitives._table import PRIMITIVES, defprim, unbroadcast

from transform_checks import no_warnings


# --- the declaration (the doc's listing) ------------------------------------------------------------
def _soft_clip(x, a):
    """``a * tanh(x / a)``: x near 0, saturating at +-a."""
    return a * np.tanh(x / a)


def _slope(ans, a):                      # d/dx, from the output: 1 - tanh^2
    return 1 - (ans / a) ** 2


def _declare():
    return defprim(
        _soft_clip, name="example.soft_clip",
        vjp=(lambda g, ans, x, a: unbroadcast(g * _slope(ans, a), x.shape),
             lambda g, ans, x, a: unbroadcast(g * (ans - x * _slope(ans, a)) / a, a.shape)),
        jvp=(lambda t, ans, x, a: t * _slope(ans, a),
             lambda t, ans, x, a: t * (ans - x * _slope(ans, a)) / a),
        batch=elementwise_rule,              # elementwise: the shared rule aligns ranks
        batched_vjp=True)                    # its rules are wengert operations: right on batched values


# The declaration goes into the table while this module's tests run, and out after them (so the rest
# of the suite, e.g. benchmarks/op_overhead.py's coverage check, sees the library's table only).
@pytest.fixture(scope="module", autouse=True)
def declared():
    global wnp_soft_clip
    soft_clip = _declare()
    # --- the wnp line (in wengert/numpy/_functions.py it would read ``soft_clip = E.soft_clip``) --------
    wnp_soft_clip = soft_clip
    yield soft_clip
    del PRIMITIVES[soft_clip.name]


wnp_soft_clip = None
# --- the test row (in tests/test_numpy_grads.py: case("soft_clip", wnp.soft_clip, Arg("real", 3, 4), ...)) --
SHAPES = ((3, 4), (4,))


def _args(seed=0):
    rng = np.random.default_rng(seed)
    xs, as_ = SHAPES
    return rng.standard_normal(xs), rng.uniform(0.5, 2.0, as_)


def test_soft_clip_on_plain_arrays_is_numpy():
    x, a = _args()
    out = wnp_soft_clip(x, a)
    assert type(out) is np.ndarray
    np.testing.assert_allclose(out, a * np.tanh(x / a))


def test_soft_clip_gradients_both_modes_to_second_order():
    x, a = _args(1)
    wg.check_grads(wnp_soft_clip, (x, a), order=2, modes=("fwd", "rev"))


def test_soft_clip_under_vmap_equals_a_loop_and_records_inside_vmap():
    x, a = _args(2)
    xs = np.stack([x, 2 * x, -x])
    with no_warnings():
        out = wg.vmap(wnp_soft_clip, in_axes=(0, None))(xs, a)
        grads = wg.vmap(lambda v: wg.grad(lambda u: (wnp_soft_clip(u, a) ** 2).sum())(v) * 1.0)(xs)
        nested = wg.vmap(wg.vmap(wnp_soft_clip, in_axes=(0, None)), in_axes=(0, None))(xs, a)
    np.testing.assert_allclose(out, np.stack([_soft_clip(v, a) for v in xs]))
    np.testing.assert_allclose(nested, out)
    ans = np.stack([_soft_clip(v, a) for v in xs])
    np.testing.assert_allclose(grads, 2 * ans * (1 - (ans / a) ** 2), rtol=1e-12)


def test_soft_clip_hessian_against_finite_differences():
    x, a = _args(3)
    x = x[0]

    def f(v):
        return (wnp_soft_clip(v, a) * np.arange(1.0, 5.0)).sum()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h = wg.hessian(f)(x)
    eps = 1e-5
    fd = np.stack([(wg.grad(f)(x + eps * e) - wg.grad(f)(x - eps * e)) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(h, fd, rtol=1e-6, atol=1e-8)

"""Forward mode: jvp, linearize, jacfwd, hvp and check_grads(modes=('fwd',)).

Every row of the systematic gradient table (tests/test_numpy_grads.py) is checked in forward mode
against finite differences along random directions.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp

from test_numpy_grads import CASE_IDS, CASES, SECOND_ORDER, draw


@pytest.mark.parametrize("name", CASE_IDS)
def test_jvp_every_table_row_matches_finite_differences(name):
    fn, specs = CASES[name]
    wg.check_grads(fn, draw(name, specs), modes=("fwd",))


@pytest.mark.parametrize("name", SECOND_ORDER[:12])
def test_forward_over_reverse_second_order(name):
    fn, specs = CASES[name]
    wg.check_grads(fn, draw(name, specs), order=2, modes=("fwd",))


def test_jvp_matches_jacobian_times_tangent():
    rng = np.random.default_rng(0)
    x, y, tx, ty = (rng.standard_normal(4) for _ in range(4))
    f = lambda x, y: wnp.tanh(x) * y + wnp.sum(x ** 2) * wnp.cos(y)
    out, t = wg.jvp(f, (x, y), (tx, ty))
    np.testing.assert_allclose(out, f(x, y))
    jx, jy = wg.jacobian(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(t, jx @ tx + jy @ ty, rtol=1e-12, atol=1e-12)


def test_jvp_pytrees_in_and_out():
    Point = collections.namedtuple("Point", "a b")
    p = {"w": np.array([1.0, 2.0]), "s": Point(np.float64(0.5), np.array([[1.0, -1.0]]))}
    t = {"w": np.array([1.0, 0.0]), "s": Point(np.float64(2.0), np.array([[0.0, 3.0]]))}

    def f(p):
        return {"u": p["w"] * p["s"].a, "v": (wnp.sum(p["s"].b ** 2), 7)}

    out, tout = wg.jvp(f, (p,), (t,))
    np.testing.assert_allclose(tout["u"], t["w"] * 0.5 + p["w"] * 2.0)
    np.testing.assert_allclose(tout["v"][0], np.sum(2 * p["s"].b * t["s"].b))
    assert out["v"][1] == 7 and np.all(tout["v"][1] == 0)


def test_jvp_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="shape"):
        wg.jvp(wnp.sin, (np.ones(3),), (np.ones(2),))


def test_linearize_reuses_one_forward_pass():
    calls = []

    def f(x):
        calls.append(1)
        return wnp.exp(x) * x

    x = np.array([0.1, 0.2, 0.3])
    out, f_jvp = wg.linearize(f, x)
    for t in np.eye(3):
        np.testing.assert_allclose(f_jvp(t), (np.exp(x) * (1 + x)) * t)
    assert len(calls) == 1


def test_jacfwd_equals_jacrev():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((3, 2)), rng.standard_normal(2)
    f = lambda x, y: {"a": wnp.sin(x @ y), "b": wnp.sum(x * x)}
    fwd = wg.jacfwd(f, argnums=(0, 1))(x, y)
    rev = wg.jacrev(f, argnums=(0, 1))(x, y)
    for k in ("a", "b"):
        for i in range(2):
            assert np.shape(fwd[k][i]) == np.shape(rev[k][i])
            np.testing.assert_allclose(fwd[k][i], rev[k][i], rtol=1e-12, atol=1e-12)


def test_hvp_equals_hessian_times_vector():
    rng = np.random.default_rng(2)
    x, v = rng.standard_normal(5), rng.standard_normal(5)
    f = lambda x: wnp.sum(wnp.tanh(x) ** 3) + wnp.sum(x) ** 2
    np.testing.assert_allclose(wg.hvp(f, (x,), (v,)), wg.hessian(f)(x) @ v, rtol=1e-10)
    g = lambda a, b: wnp.sum(a * a * b) + wnp.sum(wnp.sin(b))
    a, b, va, vb = (rng.standard_normal(3) for _ in range(4))
    ha, hb = wg.hvp(g, (a, b), (va, vb))
    np.testing.assert_allclose(ha, 2 * b * va + 2 * a * vb)
    np.testing.assert_allclose(hb, 2 * a * va - np.sin(b) * vb)


def test_jvp_nests_inside_grad():
    d = wg.grad(lambda x: wg.jvp(wnp.sin, (x,), (1.0,))[1])(0.3)
    np.testing.assert_allclose(d, -np.sin(0.3))


def test_jvp_of_constant_function_is_zero():
    out, t = wg.jvp(lambda x: np.ones(2), (np.array([1.0]),), (np.array([1.0]),))
    np.testing.assert_array_equal(t, np.zeros(2))


def test_check_grads_fwd_catches_a_wrong_rule():
    bad = wg.custom_vjp(lambda x: wnp.sin(x))
    bad.defvjp(lambda x: (wnp.sin(x), x), lambda x, g: (g * 2 * wnp.cos(x),))
    with pytest.raises(AssertionError, match="forward mode"):
        wg.check_grads(bad, (np.array([0.3, 0.4]),), modes=("fwd",))

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


# --- the forward trace: one pass, no tape ----------------------------------------------------------
def test_jvp_runs_the_function_once():
    calls = []

    def f(x):
        calls.append(1)
        return wnp.exp(x) * x

    x, t = np.array([0.1, 0.2]), np.array([1.0, -1.0])
    _, tout = wg.jvp(f, (x,), (t,))
    np.testing.assert_allclose(tout, np.exp(x) * (1 + x) * t)
    assert len(calls) == 1


def test_jvp_keeps_the_primal_dtype():
    x = np.linspace(0.1, 1.0, 4, dtype=np.float32)
    out, t = wg.jvp(lambda x: wnp.sin(x) * 2.0, (x,), (np.ones(4, np.float32),))
    assert out.dtype == np.float32 and t.dtype == np.float32


def test_jvp_refuses_integer_primals_naming_the_argument():
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 1 \(n\)"):
        wg.jvp(lambda x, n: x * n, (np.ones(2), np.arange(2)), (np.ones(2), np.ones(2)))


def test_leaked_forward_tracer_is_refused():
    kept = []
    wg.jvp(lambda x: kept.append(x) or wnp.sin(x), (np.ones(2),), (np.ones(2),))
    with pytest.raises(wg.LeakedTracerError):
        wnp.cos(kept[0])


def test_jvp_of_vmap_and_vmap_of_jvp_agree_with_a_loop():
    rng = np.random.default_rng(3)
    xs, ts = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    f = lambda x: wnp.sum(wnp.tanh(x) * x[::-1]) * x
    expected = np.stack([wg.jvp(f, (x,), (t,))[1] for x, t in zip(xs, ts)])
    inner = wg.jvp(wg.vmap(f), (xs,), (ts,))[1]
    outer = wg.vmap(lambda x, t: wg.jvp(f, (x,), (t,))[1])(xs, ts)
    np.testing.assert_allclose(inner, expected, rtol=1e-12)
    np.testing.assert_allclose(outer, expected, rtol=1e-12)


def test_jacfwd_is_one_batched_jvp_without_warnings():
    import warnings
    f = lambda x: wnp.cumsum(wnp.exp(x) * x[0])
    x = np.array([0.3, -0.2, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(wg.jacfwd(f)(x), wg.jacobian(f)(x), rtol=1e-12)


def test_hessian_is_forward_over_reverse_and_matches_reverse_over_reverse():
    import warnings
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(3), rng.standard_normal((2, 2))
    f = lambda a, b: wnp.sum(wnp.sin(a) ** 2) * wnp.sum(b ** 3) + wnp.sum(a[:2] @ b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fwd = wg.hessian(f, argnums=(0, 1))(a, b)
    rev = wg.jacobian(wg.jacobian(f, argnums=(0, 1)), argnums=(0, 1))(a, b)
    for i in range(2):
        for j in range(2):
            assert np.shape(fwd[i][j]) == np.shape(rev[i][j])
            np.testing.assert_allclose(fwd[i][j], rev[i][j], rtol=1e-10, atol=1e-12)


def test_in_place_writes_under_jvp_match_finite_differences():
    def f(x):
        y = x * 1.0
        y[1:] = wnp.sin(x[:-1])
        y[0] *= 3.0
        return y * x

    wg.check_grads(f, (np.array([0.3, -0.7, 1.1, 0.2]),), modes=("fwd", "rev"))


def test_in_place_write_into_a_jvp_input_is_refused():
    def f(x):
        x[0] = 0.0
        return x

    with pytest.raises(wg.InPlaceWriteError, match="input"):
        wg.jvp(f, (np.ones(3),), (np.ones(3),))


def test_view_used_after_a_write_is_refused_under_jvp():
    def f(x):
        y = x * 2.0
        view = y[:2]
        y[0] = 5.0
        return view * 1.0

    with pytest.raises(wg.InPlaceWriteError, match="view"):
        wg.jvp(f, (np.ones(3),), (np.ones(3),))


def test_buffer_under_jvp():
    def f(x):
        buf = wg.Buffer.zeros((3, 2))
        for i in range(3):
            buf[i] = x[i] * x[:2]
        buf[1, 0] = 7.0
        return wnp.sum(wnp.sin(buf.freeze()), axis=1)

    wg.check_grads(f, (np.array([0.3, -0.5, 0.8]),), modes=("fwd", "rev"))


def test_custom_vjp_forward_mode_transposes_bwd():
    @wg.custom_vjp
    def f(x, y):
        return wnp.sin(x) * y

    f.defvjp(lambda x, y: (wnp.sin(x) * y, (x, y)),
             lambda res, g: (g * wnp.cos(res[0]) * res[1], g * wnp.sin(res[0])))
    wg.check_grads(f, (np.array([0.2, 0.9]), np.array([1.5, -0.4])), modes=("fwd", "rev"))
    wg.check_grads(lambda x: wg.grad(lambda x: wnp.sum(f(x, x)))(x), (np.array([0.2, 0.9]),),
                   modes=("fwd",))


def test_custom_vjp_with_a_numpy_bwd_has_no_silent_forward_mode():
    @wg.custom_vjp
    def scaled(x):
        return x * 2.0

    def numpy_bwd(res, g):  # reads the plain values: fine for grad, not transposable
        return (np.asarray(g.value if isinstance(g, wg.Tracer) else g) * 2.0,)

    scaled.defvjp(lambda x: (x * 2.0, None), numpy_bwd)
    np.testing.assert_allclose(wg.grad(lambda x: wnp.sum(scaled(x)))(np.ones(2)), [2.0, 2.0])
    with pytest.raises(wg.CustomGradientError, match="scaled.*wengert.numpy"):
        wg.jvp(scaled, (np.ones(2),), (np.ones(2),))


def test_op_says_it_has_no_forward_mode():
    @wg.op
    def double(x):
        return x * 2, lambda g: 2 * g

    with pytest.raises(wg.CustomGradientError, match="double.*forward mode"):
        wg.jvp(lambda x: double(x), (np.ones(2),), (np.ones(2),))

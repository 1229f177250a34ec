"""wengert.scipy.integrate.odeint: SciPy's values and signature; derivatives in y0, t and args by
the adjoint method (reverse) and the sensitivity equations (forward), against closed forms and
finite differences."""
import warnings

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp

si = pytest.importorskip("scipy.integrate")
sl = pytest.importorskip("scipy.linalg")
from wengert.scipy.integrate import odeint  # noqa: E402

TIGHT = dict(rtol=1e-10, atol=1e-10)
T = np.array([0.0, 0.3, 1.0, 1.7])


def decay(y, t, k):
    return -k * y


def test_plain_values_are_scipys_own_call():
    def rhs(y, t, a, b):
        return [y[1], -a * y[0] - b * y[1]]

    y0 = [1.0, 0.0]
    np.testing.assert_array_equal(odeint(rhs, y0, T, args=(2.0, 0.1)),
                                  si.odeint(rhs, y0, T, args=(2.0, 0.1)))
    ours, info = odeint(rhs, y0, T, (2.0, 0.1), full_output=True)
    assert "nfe" in info and ours.shape == (4, 2)


def test_exponential_decay_against_its_closed_form():
    """y' = -k y: y(t_i) = y0 exp(-k (t_i - t_0)); each derivative written out by hand."""
    y0, k, t = np.array([1.5, 0.5]), 0.7, T + 0.2

    def loss(y0, k, t):
        return wnp.sum(odeint(decay, y0, t, (k,), **TIGHT) ** 2)

    e = np.exp(-2 * k * (t - t[0]))
    g_y0, g_k, g_t = wg.grad(loss, argnums=(0, 1, 2))(y0, k, t)
    np.testing.assert_allclose(g_y0, 2 * y0 * e.sum(), rtol=1e-8)
    np.testing.assert_allclose(g_k, np.sum(y0 ** 2) * np.sum(-2 * (t - t[0]) * e), rtol=1e-7)
    d_t = -2 * k * np.sum(y0 ** 2) * e
    d_t[0] = -d_t[1:].sum()   # moving t0 moves every later output the opposite way
    np.testing.assert_allclose(g_t, d_t, rtol=1e-7, atol=1e-12)
    # forward mode: d y(t)/dk = -(t - t0) y(t)
    ys, dys = wg.jvp(lambda k: odeint(decay, y0, t, (k,), **TIGHT), (k,), (1.0,))
    np.testing.assert_allclose(dys, -(t - t[0])[:, None] * ys, rtol=1e-7, atol=1e-12)


def test_linear_system_against_the_matrix_exponential():
    """y' = A y: y(t) = expm(A t) y0; the gradient in y0 is sum_i expm(A t_i)^T w_i and in A the
    Frechet derivative of expm, both from SciPy."""
    rng = np.random.default_rng(0)
    a, y0 = 0.5 * rng.standard_normal((3, 3)), rng.standard_normal(3)
    w = rng.standard_normal((len(T), 3))

    def rhs(y, t, params):
        return params["A"] @ y

    ys = odeint(rhs, y0, T, ({"A": a},), **TIGHT)
    np.testing.assert_allclose(ys, np.stack([sl.expm(a * ti) @ y0 for ti in T]), rtol=1e-8, atol=1e-10)

    def loss(y0, params):
        return wnp.sum(w * odeint(rhs, y0, T, (params,), **TIGHT))

    g_y0, g_params = wg.grad(loss, argnums=(0, 1))(y0, {"A": a})
    np.testing.assert_allclose(g_y0, sum(sl.expm(a * ti).T @ wi for ti, wi in zip(T, w)), rtol=1e-8)
    g_a = np.zeros((3, 3))
    for ti, wi in zip(T, w):
        for i in range(3):
            for j in range(3):
                e = np.zeros((3, 3))
                e[i, j] = ti
                g_a[i, j] += wi @ sl.expm_frechet(a * ti, e, compute_expm=False) @ y0
    np.testing.assert_allclose(g_params["A"], g_a, rtol=1e-7, atol=1e-10)


def pendulum(y, t, params, damping):
    theta, omega = y[0], y[1]
    return wnp.stack([omega, -params["g"] * wnp.sin(theta) - damping[0] * omega + params["drive"] * wnp.cos(t)])


def test_finite_differences_first_and_second_order_both_modes_with_pytree_args():
    y0 = np.array([0.8, -0.2])
    params = {"g": 9.0, "drive": np.array(0.3)}
    t = np.array([0.0, 0.4, 0.9])

    def solve(y0, t, params, damping):
        return odeint(pendulum, y0, t, (params, damping), **TIGHT)

    wg.check_grads(solve, (y0, t, params, [0.2]), order=2, modes=("fwd", "rev"), rtol=1e-4, atol=1e-6)


def test_tfirst_decreasing_times_and_a_func_returning_a_list():
    def oscillator(t, y, w):
        return [y[1], -w ** 2 * y[0]]

    t = np.array([2.0, 1.2, 0.5])   # backwards in time, as SciPy allows

    def position(w):
        return odeint(oscillator, np.array([1.0, 0.0]), t, args=(w,), tfirst=True, **TIGHT)[:, 0]

    # x(t) = cos(w (t - t0)): dx/dw = -(t - t0) sin(w (t - t0))
    expected = -(t - t[0]) * np.sin(1.3 * (t - t[0]))
    np.testing.assert_allclose(wg.jacobian(position)(1.3), expected, rtol=1e-7, atol=1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # jacfwd batches the sensitivities: no per-example loop
        np.testing.assert_allclose(wg.jacfwd(position)(1.3), expected, rtol=1e-7, atol=1e-10)


def test_vjp_value_and_grad_and_second_derivatives_by_hand():
    t, y0 = T, np.ones(2)

    def total(k):
        return wnp.sum(odeint(decay, y0, t, (k,), **TIGHT))

    k = 0.5
    value, g = wg.value_and_grad(total)(k)
    assert value == pytest.approx(2 * np.sum(np.exp(-k * t)), rel=1e-9)
    assert g == pytest.approx(np.sum(-2 * t * np.exp(-k * t)), rel=1e-7)
    out, pull = wg.vjp(lambda k: odeint(decay, y0, t, (k,), **TIGHT), k)
    ct = np.ones_like(out)
    assert pull(ct)[0] == pytest.approx(g, rel=1e-7)
    assert pull(2 * ct)[0] == pytest.approx(2 * g, rel=1e-7)   # the tape is kept for another call
    second = np.sum(2 * t ** 2 * np.exp(-k * t))
    assert wg.grad(wg.grad(total))(k) == pytest.approx(second, rel=1e-6)
    assert wg.hvp(total, (k,), (1.0,)) == pytest.approx(second, rel=1e-6)


def test_vmap_solves_the_batch_as_one_system():
    rng = np.random.default_rng(1)
    ks, y0s = np.array([0.3, 0.5, 0.9]), rng.standard_normal((3, 2))

    def solve(y0, k):
        return odeint(lambda y, t, k: -k * y + wnp.sin(y), y0, T, (k,), **TIGHT)

    def loss(y0, k):
        return wnp.sum(solve(y0, k) ** 2)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = wg.vmap(solve)(y0s, ks)
        grads = wg.vmap(wg.grad(loss, argnums=(0, 1)))(y0s, ks)
    for i in range(3):
        np.testing.assert_allclose(batched[i], solve(y0s[i], ks[i]), rtol=1e-7, atol=1e-9)
        g_y0, g_k = wg.grad(loss, argnums=(0, 1))(y0s[i], ks[i])
        np.testing.assert_allclose(grads[0][i], g_y0, rtol=1e-6)
        np.testing.assert_allclose(grads[1][i], g_k, rtol=1e-6)


def test_dfun_serves_the_forward_solve_and_forward_mode_handles_a_stiff_system():
    """A stiff system (k = 200 over [0, 2]): LSODA switches to BDF, which reads Dfun. Forward mode
    (the sensitivities run forward in time, as the solution does) stays accurate; the adjoint
    method would recompute y backwards, through exp(+k t) growth (the module's docstring)."""
    calls = []

    def jac(y, t, k):
        calls.append(t)
        return -k * np.eye(2)

    def total(k):
        return wnp.sum(odeint(decay, np.ones(2), [0.0, 0.01, 2.0], (k,), Dfun=jac, **TIGHT))

    with warnings.catch_warnings():
        warnings.simplefilter("error")   # SciPy's "excess work done" would fail the test
        _, d = wg.jvp(total, (200.0,), (1.0,))
    assert calls
    assert d == pytest.approx(-2 * (0.01 * np.exp(-2.0) + 2.0 * np.exp(-400.0)), rel=1e-6)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="args="):
        wg.grad(lambda k: wnp.sum(odeint(lambda y, t: -k * y, np.ones(2), T)))(0.5)
    with pytest.raises(ValueError, match="args="):   # the same through the traced path
        wg.grad(lambda y0, k: wnp.sum(odeint(lambda y, t: -k * y, y0, T)), argnums=(0, 1))(np.ones(2), 0.5)
    with pytest.raises(NotImplementedError, match="full_output"):
        wg.grad(lambda k: wnp.sum(odeint(decay, np.ones(2), T, (k,), full_output=True)[0]))(0.5)
    with pytest.raises(ValueError, match="one-dimensional"):
        wg.grad(lambda y0: wnp.sum(odeint(decay, y0, T, (0.5,))))(np.ones((2, 2)))

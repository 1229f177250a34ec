"""wengert.scipy: values equal SciPy's; first and second derivatives match finite differences."""
import functools
import subprocess
import sys
import warnings

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp

from transform_checks import grad_inside, inside_vmap_equals_loop, refuse_transposed_jvp

sc = pytest.importorskip("scipy.special")
st = pytest.importorskip("scipy.stats")
from wengert.scipy import special as ws  # noqa: E402
from wengert.scipy import stats as wst  # noqa: E402

SHAPES = [(), (4,), (2, 3)]
FWD_REV = ("fwd", "rev")


@pytest.fixture
def own_jvp_rules(monkeypatch):
    """Forward mode must run scipy.special's own JVP rules: the transposed-VJP fallback fails the test."""
    refuse_transposed_jvp(monkeypatch, lambda name: name.startswith("scipy.special."))


def _pos(rng, shape, lo=0.5, hi=3.0):
    return rng.uniform(lo, hi, shape)


# name -> (wengert function, SciPy function, argument makers (rng, shape) -> array)
def _n(rng, s):
    return rng.normal(size=s)


def _u(lo, hi):
    return lambda rng, s: rng.uniform(lo, hi, s)


P = _u(0.5, 3.0)
UNARY = {
    "gammaln": P, "digamma": P, "psi": P, "gamma": P, "rgamma": P, "erf": _n, "erfc": _n,
    "erfinv": _u(-0.8, 0.8), "erfcinv": _u(0.2, 1.8), "ndtr": _n, "ndtri": _u(0.1, 0.9),
    "log_ndtr": lambda rng, s: 3 * rng.normal(size=s), "expit": _n, "logit": _u(0.1, 0.9),
    "log_expit": _n, "entr": P, "i0": _n, "i1": _n, "i0e": P, "i1e": P, "erfcx": _n, "dawsn": _n,
    "softmax": _n, "log_softmax": _n,
}
BINARY = {"beta": (P, P), "betaln": (P, P), "xlogy": (_n, P), "xlog1py": (_n, P)}
ORDERED = {  # f(constant, x)
    "polygamma": (2, P), "iv": (1.5, P), "ive": (2.0, _n), "jv": (1.5, P), "yv": (0.5, P),
    "gammainc": (2.5, P), "gammaincc": (2.5, P), "kv": (1.5, P), "kve": (0.5, P),
}
SHAPE_DIFFERENTIABLE = {"gammainc", "gammaincc"}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_special(name, shape, own_jvp_rules):
    rng = np.random.default_rng(0)
    x = UNARY[name](rng, shape)
    f = getattr(ws, name)
    np.testing.assert_allclose(f(x), getattr(sc, name)(x))
    np.testing.assert_allclose(wg.vjp(f, x)[0], getattr(sc, name)(x))
    wg.check_grads(f, (x,), order=2, modes=FWD_REV)


@pytest.mark.parametrize("shapes", [((), ()), ((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3))])
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_special(name, shapes, own_jvp_rules):
    rng = np.random.default_rng(1)
    a, b = (make(rng, s) for make, s in zip(BINARY[name], shapes))
    f = getattr(ws, name)
    np.testing.assert_allclose(wg.vjp(f, a, b)[0], getattr(sc, name)(a, b))
    wg.check_grads(f, (a, b), order=2, modes=FWD_REV)
    # one traced argument at a time: each argument's own rule, the other a constant
    wg.check_grads(lambda a: f(a, b), (a,), modes=FWD_REV)
    wg.check_grads(lambda b: f(a, b), (b,), modes=FWD_REV)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(ORDERED))
def test_special_with_a_constant_order(name, shape, own_jvp_rules):
    rng = np.random.default_rng(2)
    v, make = ORDERED[name]
    x = make(rng, shape)
    f = getattr(ws, name)
    np.testing.assert_allclose(wg.vjp(lambda x: f(v, x), x)[0], getattr(sc, name)(v, x), rtol=1e-12)
    wg.check_grads(lambda x: f(v, x), (x,), order=2, modes=FWD_REV)
    if name in SHAPE_DIFFERENTIABLE:   # the shape parameter too: its own primitives, to second order
        wg.check_grads(lambda v, x: f(v, x), (np.full(shape, float(v)), x), order=2, modes=FWD_REV)
        return
    with pytest.raises(wg.NoDerivativeError):
        wg.grad(lambda v: np.sum(f(v, x)))(float(v))
    with pytest.raises(wg.NoDerivativeError):  # forward mode refuses the order the same way
        wg.jvp(lambda v: f(v, x), (float(v),), (1.0,))


def test_betainc_multigammaln_polygamma_arrays(own_jvp_rules):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.1, 0.9, (2, 3))
    wg.check_grads(lambda x: ws.betainc(2.5, 1.5, x), (x,), order=2, modes=FWD_REV)
    a, b = rng.uniform(0.5, 3.0, (2, 3)), rng.uniform(0.5, 3.0, (3,))
    for f in (ws.betainc, ws.betaincc):   # the shape parameters: to second order, mixed partials too
        wg.check_grads(f, (a, b, x), order=2, modes=FWD_REV)
    with pytest.raises(wg.NoDerivativeError, match="third order"):
        wg.check_grads(lambda a: ws.betainc(a, 1.5, 0.3), (2.5,), order=3)
    a = rng.uniform(2.0, 4.0, (3,))
    np.testing.assert_allclose(wg.vjp(lambda a: ws.multigammaln(a, 3), a)[0], sc.multigammaln(a, 3))
    wg.check_grads(lambda a: ws.multigammaln(a, 3), (a,), order=2, modes=FWD_REV)
    with pytest.raises(ValueError):
        wg.grad(lambda a: ws.multigammaln(a, 3).sum())(np.array([0.5, 3.0]))
    n = np.array([0, 1, 2])
    np.testing.assert_allclose(wg.vjp(lambda x: ws.polygamma(n, x), a)[0], sc.polygamma(n, a))
    wg.check_grads(lambda x: ws.polygamma(n, x), (a,), order=2, modes=FWD_REV)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_logsumexp(axis):
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(2, 3)), rng.uniform(0.5, 2.0, (2, 3))
    for kw in ({}, {"keepdims": True}):
        np.testing.assert_allclose(wg.vjp(lambda a: ws.logsumexp(a, axis=axis, **kw), a)[0],
                                   sc.logsumexp(a, axis=axis, **kw))
        wg.check_grads(lambda a, b: ws.logsumexp(a, axis=axis, b=b, **kw), (a, b), order=2, modes=FWD_REV)
    s = rng.normal(size=(2, 3))
    out, sign = ws.logsumexp(a, axis=axis, b=s, return_sign=True)
    ref, ref_sign = sc.logsumexp(a, axis=axis, b=s, return_sign=True)
    np.testing.assert_allclose(out, ref)
    traced_out = wg.vjp(lambda a: ws.logsumexp(a, axis=axis, b=s, return_sign=True)[0], a)[0]
    np.testing.assert_allclose(traced_out, ref)
    wg.check_grads(lambda a, s: ws.logsumexp(a, axis=axis, b=s, return_sign=True)[0], (a, s), order=2,
                   modes=FWD_REV)


def test_every_special_primitive_has_a_jvp_rule():
    from wengert.primitives._table import PRIMITIVES
    names = [n for n in PRIMITIVES if n.startswith("scipy.special.")]
    assert len(names) >= 30
    missing = [n for n in names if PRIMITIVES[n].jvp is None and PRIMITIVES[n].fused_jvp is None
               and not PRIMITIVES[n].linear]
    assert not missing


@pytest.mark.parametrize("name", ["gammaln", "erfinv", "i1e", "log_ndtr", "jv", "betaln", "xlogy", "betainc"])
def test_special_jacfwd_equals_jacobian(name, own_jvp_rules):
    """jacfwd runs one JVP with a batch of tangents (under vmap): the rules on batched tangents."""
    rng = np.random.default_rng(11)
    x = rng.uniform(0.2, 0.8, (2, 3))
    y = rng.uniform(0.5, 2.0, (3,))
    f = {"jv": lambda x: ws.jv(1.5, x), "betaln": lambda x: ws.betaln(x, y), "xlogy": lambda x: ws.xlogy(y, x),
         "betainc": lambda x: ws.betainc(2.0, 1.5, x)}.get(name, getattr(ws, name))
    fwd, rev = wg.jacfwd(f)(x), wg.jacobian(f)(x)
    assert fwd.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(fwd, rev, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(wg.hessian(lambda x: np.sum(f(x)))(x),
                               wg.jacobian(wg.grad(lambda x: np.sum(f(x))))(x), rtol=1e-10, atol=1e-12)


# --- stats ---------------------------------------------------------------------------------------
def _stats_cases():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3))
    u = rng.uniform(0.1, 0.9, (2, 3))
    p = rng.uniform(0.5, 3.0, (2, 3))
    par = lambda *s: rng.uniform(0.5, 3.0, s)  # noqa: E731
    return [
        ("norm", "logpdf", (x, par(3), par(2, 1))), ("norm", "pdf", (x, 0.3, par(3))),
        ("norm", "cdf", (x, par(3), 1.5)), ("norm", "logcdf", (3 * x, 0.3, 1.5)),
        ("norm", "sf", (x, 0.1, par(3))), ("norm", "logsf", (x, 0.1, 0.7)), ("norm", "ppf", (u, 0.1, par(3))),
        ("t", "logpdf", (x, par(3), 0.2, par(2, 1))), ("t", "pdf", (x, par(3), par(3), 1.3)),
        ("t", "cdf", (x, 2.5, par(3), par(3))), ("t", "logcdf", (x, 2.5, 0.2, 1.3)),
        ("t", "sf", (x, 2.5, par(3), par(3))), ("t", "logsf", (x, 2.5, 0.2, 1.3)),
        ("norm", "isf", (u, 0.1, par(3))),
        ("beta", "sf", (u, 2.0, 3.0)), ("beta", "logsf", (u, 2.0, 3.0)),
        ("gamma", "sf", (p, 2.5)), ("gamma", "logsf", (p, 2.5, 0.0, par(3))),
        ("chi2", "sf", (p, 3.0)), ("chi2", "logsf", (p, 3.0)),
        ("beta", "logpdf", (u, par(3), par(2, 1))), ("beta", "pdf", (u, par(3), 2.0)),
        ("beta", "cdf", (u, 2.0, 3.0)), ("beta", "logcdf", (u, 2.0, 3.0)),
        ("gamma", "logpdf", (p, par(3))), ("gamma", "pdf", (p, par(3), 0.1, par(3))),
        ("gamma", "cdf", (p, 2.5)), ("gamma", "logcdf", (p, 2.5, 0.0, par(3))),
        ("chi2", "logpdf", (p, par(3))), ("chi2", "pdf", (p, par(2, 1))),
        ("chi2", "cdf", (p, 3.0)), ("chi2", "logcdf", (p, 3.0)),
        ("dirichlet", "logpdf", (np.array([0.2, 0.3]), par(3))),
        ("dirichlet", "pdf", (np.array([[0.2, 0.1], [0.3, 0.6]]), par(3))),
        ("multivariate_normal", "logpdf", (rng.normal(size=(4, 3)), rng.normal(size=3),
                                           np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.0]]))),
        ("multivariate_normal", "pdf", (rng.normal(size=3), rng.normal(size=3), par(3))),
        ("multivariate_normal", "logpdf", (rng.normal(size=5), 0.3, 2.0)),
        # the shape parameters of the cdfs (incomplete gamma and beta in their parameters)
        ("t", "cdf", (x, par(3), 0.2, 1.3)), ("t", "logsf", (x, par(2, 1), par(3), 1.3)),
        ("beta", "cdf", (u, par(3), par(2, 1))), ("beta", "logcdf", (u, par(3), 2.0)),
        ("beta", "sf", (u, 2.0, par(3))), ("gamma", "cdf", (p, par(3))), ("gamma", "logsf", (p, par(3), 0.1, par(3))),
        ("chi2", "cdf", (p, par(2, 1))), ("chi2", "logcdf", (p, par(3))), ("chi2", "sf", (p, par(3), 0.0, par(3))),
    ]


@pytest.mark.parametrize("case", _stats_cases(), ids=lambda c: f"{c[0]}.{c[1]}")
def test_stats(case, own_jvp_rules):
    dist, method, args = case
    f, ref_f = getattr(getattr(wst, dist), method), getattr(getattr(st, dist), method)
    ref = ref_f(*args)
    np.testing.assert_allclose(f(*args), ref)  # plain values: SciPy's own
    diff = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]

    def of_arrays(*xs):
        full = list(args)
        for i, v in zip(diff, xs):
            full[i] = v
        return f(*full)

    arrays = [args[i] for i in diff]
    got = wg.vjp(of_arrays, *arrays)[0]
    assert np.shape(got) == np.shape(ref)
    np.testing.assert_allclose(got, ref, rtol=1e-10)
    wg.check_grads(of_arrays, arrays, order=2, modes=FWD_REV)


def test_poisson():
    k = np.array([0, 1, 3, -1, 1.5])
    mu = np.array([0.7, 2.0, 3.5, 1.0, 1.0])
    for method in ("logpmf", "pmf", "cdf", "logcdf", "sf", "logsf"):
        f, ref = getattr(wst.poisson, method), getattr(st.poisson, method)
        np.testing.assert_allclose(wg.vjp(lambda mu: f(k, mu), mu)[0], ref(k, mu))
        wg.check_grads(lambda mu: f(k[:3], mu), (mu[:3],), order=2, modes=FWD_REV)


def test_sf_outside_the_support_as_scipy():
    for dist, args in (("beta", (np.array([-0.5, 0.5, 1.5]), 2.0, 3.0)),
                       ("gamma", (np.array([-1.0, 0.5, 2.0]), 2.5)),
                       ("chi2", (np.array([-1.0, 0.5, 2.0]), 3.0))):
        for method in ("sf", "logsf"):
            with np.errstate(divide="ignore"):   # logsf is -inf where sf is 0, as SciPy gives
                ours = wg.vjp(lambda x: getattr(getattr(wst, dist), method)(x, *args[1:]), args[0])[0]
                np.testing.assert_allclose(ours, getattr(getattr(st, dist), method)(*args), rtol=1e-12)


def test_methods_without_a_derivative_pass_through_to_scipy():
    """Sample with SciPy's rvs, differentiate logpdf: the autograd-style script runs unchanged."""
    alpha = np.array([1.5, 2.0, 3.0])
    x = wst.dirichlet.rvs(alpha, size=5, random_state=0)
    np.testing.assert_array_equal(x, st.dirichlet.rvs(alpha, size=5, random_state=0))
    g = wg.grad(lambda a: wnp.sum(wst.dirichlet.logpdf(x.T, a)))(alpha)
    expected = np.sum(np.log(x), axis=0) + 5 * (sc.digamma(alpha.sum()) - sc.digamma(alpha))
    np.testing.assert_allclose(g, expected, rtol=1e-10)
    data = st.gamma.rvs(2.0, size=40, random_state=1)
    for dist, method, args, kwargs in (("norm", "mean", (1.0, 2.0), {}), ("norm", "var", (1.0, 2.0), {}),
                                       ("t", "std", (4.0,), {}), ("gamma", "median", (2.0,), {}),
                                       ("norm", "interval", (0.9,), {}), ("gamma", "fit", (data,), {}),
                                       ("beta", "entropy", (2.0, 3.0), {}), ("chi2", "moment", (2, 3.0), {}),
                                       ("t", "stats", (5.0,), {"moments": "mvsk"}),
                                       ("beta", "support", (2.0, 3.0), {}),
                                       ("poisson", "rvs", (3.0,), {"size": 4, "random_state": 2}),
                                       ("multivariate_normal", "rvs", (np.zeros(2), np.eye(2)),
                                        {"random_state": 3})):
        np.testing.assert_array_equal(getattr(getattr(wst, dist), method)(*args, **kwargs),
                                      getattr(getattr(st, dist), method)(*args, **kwargs))
    with pytest.raises(AttributeError):
        wst.norm.no_such_method


def test_passed_through_methods_refuse_traced_values():
    with pytest.raises(wg.NoDerivativeError, match="norm.rvs.*loc . scale . norm.rvs"):
        wg.grad(lambda m: wnp.sum(wst.norm.rvs(m, size=3)))(0.5)
    with pytest.raises(wg.NoDerivativeError, match="gamma.mean"):
        wg.grad(lambda a: wst.gamma.mean(a))(2.0)
    with pytest.raises(wg.NoDerivativeError, match=r"norm\(\.\.\.\)\.var"):
        wg.grad(lambda m: wst.norm(m, 1.0).var())(0.5)


def test_frozen_distributions():
    frozen = wst.norm(0.5, 2.0)
    assert frozen.mean() == 0.5 and frozen.std() == 2.0
    np.testing.assert_array_equal(frozen.rvs(size=3, random_state=0), st.norm(0.5, 2.0).rvs(size=3, random_state=0))
    assert frozen.logpdf(1.0) == pytest.approx(st.norm(0.5, 2.0).logpdf(1.0), rel=1e-14)
    # traced parameters: d/dm log N(x; m, s) = (x - m) / s^2, d/ds = ((x - m)^2 / s^2 - 1) / s
    g_m, g_s = wg.grad(lambda m, s: wst.norm(m, scale=s).logpdf(1.0), argnums=(0, 1))(0.5, 2.0)
    assert g_m == pytest.approx(0.5 / 4) and g_s == pytest.approx((0.25 / 4 - 1) / 2)
    wg.check_grads(lambda a, x: wst.gamma(2.5, scale=a).cdf(x) + wst.gamma(a).logpdf(x), (2.5, 1.2),
                   order=2, modes=FWD_REV)
    wg.check_grads(lambda m: wst.multivariate_normal(m, np.eye(2) * 2).logpdf(np.array([0.3, -0.2])),
                   (np.array([0.1, 0.4]),), order=2)


def test_invalid_parameters_as_scipy():
    # scale, df, a <= 0 give nan, as in SciPy; out of support gives -inf / 0
    with np.errstate(all="ignore"):
        for dist, args in (("norm", (1.0, 0.0, np.array([1.0, -1.0]))),
                           ("t", (1.0, np.array([2.0, -1.0]))),
                           ("gamma", (np.array([-1.0, 1.0]), np.array([2.0, 0.0]))),
                           ("beta", (np.array([-0.5, 0.5, 1.5]), 2.0, np.array([2.0, -1.0, 2.0])))):
            arr = [a for a in args if isinstance(a, np.ndarray)][-1]
            pos = [i for i, a in enumerate(args) if a is arr][0]

            def f(v, args=args, pos=pos, dist=dist):
                full = list(args)
                full[pos] = v
                return getattr(wst, dist).logpdf(*full)

            np.testing.assert_array_equal(wg.vjp(f, arr)[0], getattr(st, dist).logpdf(*args))
    # the multivariate distributions raise SciPy's own errors
    with pytest.raises(ValueError):
        wg.grad(lambda a: wst.dirichlet.logpdf(np.array([0.2, 0.8]), a))(np.array([1.0, -1.0]))
    with pytest.raises(ValueError):
        wg.grad(lambda m: wst.multivariate_normal.logpdf(np.zeros(2), m, -np.eye(2)))(np.zeros(2))
    with pytest.raises(wg.NoDerivativeError, match="multivariate_normal.cdf"):
        wg.grad(lambda m: wst.multivariate_normal.cdf(np.zeros(2), m, np.eye(2)))(np.zeros(2))


def test_import_without_scipy_says_how_to_install():
    code = ("import sys; sys.modules['scipy'] = None\n"
            "try:\n    import wengert.scipy\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install" in out.stdout and "scipy" in out.stdout, out.stdout + out.stderr


# --- signal and linalg ---------------------------------------------------------------------------
import scipy.linalg as sl  # noqa: E402
import scipy.signal as sig  # noqa: E402

from wengert.scipy import linalg as wsl  # noqa: E402
from wengert.scipy import signal as wsig  # noqa: E402


@pytest.fixture
def own_convolve_jvp(monkeypatch):
    """Forward mode must run the convolution's own (bilinear) JVP rule, not the transposed-VJP fallback."""
    refuse_transposed_jvp(monkeypatch, lambda name: name == "scipy.signal.convolve")


def test_signal_jvp_is_the_product_rule_and_jacfwd_equals_jacobian(own_convolve_jvp):
    rng = np.random.default_rng(11)
    a, b, ta, tb = rng.normal(size=(4, 3)), rng.normal(size=(2, 2)), rng.normal(size=(4, 3)), rng.normal(size=(2, 2))
    _, t = wg.jvp(lambda a, b: wsig.convolve(a, b, "same"), (a, b), (ta, tb))
    np.testing.assert_allclose(t, sig.convolve(ta, b, "same") + sig.convolve(a, tb, "same"), atol=1e-12)
    f = lambda a: wsig.correlate(a, b, "valid") ** 2  # noqa: E731
    np.testing.assert_allclose(wg.jacfwd(f)(a), wg.jacobian(f)(a), atol=1e-12)
    np.testing.assert_allclose(wg.hessian(lambda a: f(a).sum())(a), wg.jacobian(wg.grad(lambda a: f(a).sum()))(a),
                               atol=1e-12)


@pytest.mark.parametrize("shapes", [((7,), (3,)), ((3,), (7,)), ((5, 4), (2, 3)), ((3, 4, 2), (2, 2, 2)),
                                    ((4, 2), (2, 3))])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("name", ["convolve", "correlate"])
def test_signal_convolve_and_correlate(name, mode, shapes, own_convolve_jvp):
    rng = np.random.default_rng(6)
    a, b = rng.normal(size=shapes[0]), rng.normal(size=shapes[1])
    f = getattr(wsig, name)
    try:
        ref = getattr(sig, name)(a, b, mode)
    except ValueError:
        with pytest.raises(ValueError):
            wg.grad(lambda a: f(a, b, mode).sum())(a)
        return
    np.testing.assert_allclose(wg.vjp(lambda a, b: f(a, b, mode), a, b)[0], ref, atol=1e-12)
    wg.check_grads(lambda a, b: f(a, b, mode), (a, b), order=2, modes=FWD_REV)


@pytest.mark.parametrize("lower, trans, unit_diagonal", [(True, 0, False), (False, 1, False), (True, "T", True),
                                                          (False, 0, True)])
@pytest.mark.parametrize("rhs_shape", [(3,), (3, 2)])
def test_solve_triangular(lower, trans, unit_diagonal, rhs_shape, own_linalg_jvp_rules):
    rng = np.random.default_rng(7)
    a = np.tril(rng.normal(size=(3, 3))) + 4 * np.eye(3)
    a = a if lower else a.T
    b = rng.normal(size=rhs_shape)

    def f(a, b):
        return wsl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)

    ref = sl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)
    np.testing.assert_allclose(wg.vjp(f, a, b)[0], ref)
    wg.check_grads(f, (a, b), order=2, modes=FWD_REV)


@pytest.mark.parametrize("lower", [True, False])
def test_cho_solve(lower, own_linalg_jvp_rules):
    rng = np.random.default_rng(8)
    s = rng.normal(size=(3, 3))
    s = s @ s.T + 3 * np.eye(3)
    b = rng.normal(size=(3, 2))

    def f(s, b):
        return wsl.cho_solve(wsl.cho_factor((s + s.T) / 2, lower=lower), b)

    np.testing.assert_allclose(wg.vjp(f, s, b)[0], sl.cho_solve(sl.cho_factor(s, lower=lower), b))
    wg.check_grads(f, (s, b), order=2, modes=FWD_REV)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("name", ["convolve", "correlate"])
def test_signal_complex(name, mode, own_convolve_jvp):
    rng = np.random.default_rng(10)
    a = rng.normal(size=(3, 4)) + 1j * rng.normal(size=(3, 4))
    b = rng.normal(size=(2, 2)) + 1j * rng.normal(size=(2, 2))
    f = getattr(wsig, name)
    for x, y in ((a, b), (b, a)):
        np.testing.assert_allclose(wg.vjp(lambda x, y: f(x, y, mode), x, y)[0], getattr(sig, name)(x, y, mode))
        wg.check_grads(lambda x, y: f(x, y, mode), (x, y), order=2, modes=FWD_REV)


def test_expm_sqrtm_sylvester(own_linalg_jvp_rules):
    rng = np.random.default_rng(9)
    x = 0.5 * rng.normal(size=(3, 3))
    np.testing.assert_allclose(wg.vjp(wsl.expm, x)[0], sl.expm(x))
    wg.check_grads(wsl.expm, (x,), order=2, modes=FWD_REV)
    wg.check_grads(wsl.expm, (0.5 * rng.normal(size=(2, 3, 3)),), order=1, modes=FWD_REV)  # a stack
    s = rng.normal(size=(3, 3))
    s = s @ s.T + 3 * np.eye(3)
    np.testing.assert_allclose(wg.vjp(wsl.sqrtm, s)[0], sl.sqrtm(s))
    wg.check_grads(wsl.sqrtm, (s,), order=2, modes=FWD_REV)
    p, q, r = rng.normal(size=(3, 3)) + 3 * np.eye(3), rng.normal(size=(2, 2)) + 3 * np.eye(2), rng.normal(size=(3, 2))
    np.testing.assert_allclose(wg.vjp(wsl.solve_sylvester, p, q, r)[0], sl.solve_sylvester(p, q, r))
    wg.check_grads(wsl.solve_sylvester, (p, q, r), order=2, modes=FWD_REV)


@pytest.fixture
def own_linalg_jvp_rules(monkeypatch):
    """Forward mode must run scipy.linalg's own JVP rules: the transposed-VJP fallback fails the test."""
    refuse_transposed_jvp(monkeypatch, lambda name: name.startswith("scipy.linalg."))


def test_every_scipy_linalg_primitive_has_a_jvp_rule():
    from wengert.primitives._table import PRIMITIVES
    names = [n for n in PRIMITIVES if n.startswith("scipy.linalg.")]
    assert len(names) == 4
    assert all(PRIMITIVES[n].jvp is not None or PRIMITIVES[n].fused_jvp is not None for n in names)


@pytest.mark.parametrize("name", ["expm", "sqrtm", "solve_triangular", "solve_sylvester"])
def test_linalg_jacfwd_equals_jacobian_and_hessian(name, own_linalg_jvp_rules):
    import warnings
    rng = np.random.default_rng(11)
    a = 0.3 * rng.normal(size=(3, 3)) + 2 * np.eye(3)
    b = rng.normal(size=(3, 2))
    f = {"expm": wsl.expm, "sqrtm": lambda a: wsl.sqrtm(a @ a.T),
         "solve_triangular": lambda a: wsl.solve_triangular(a, b, lower=True),
         "solve_sylvester": lambda a: wsl.solve_sylvester(a, a.T, b @ b.T)}[name]
    with warnings.catch_warnings():
        if name in ("expm", "solve_triangular"):  # batch rules: no per-example loop
            warnings.simplefilter("error")
        else:  # solve_sylvester has none (its right-hand side's columns are coupled)
            warnings.simplefilter("ignore")
        forward = wg.jacfwd(f)(a)
        scalar = lambda a: wg.numpy.sum(f(a) ** 2)  # noqa: E731
        hessian = wg.hessian(scalar)(a)
    np.testing.assert_allclose(forward, wg.jacobian(f)(a), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(hessian, wg.jacobian(wg.grad(scalar))(a), rtol=1e-7, atol=1e-9)


def test_scipy_ufuncs_on_traced_values_are_wengerts():
    x = np.array([0.5, 1.5, 2.5])
    g = wg.grad(lambda x: np.sum(sc.gammaln(x) + sc.xlogy(x, x) + sc.jv(1.0, x)))(x)
    np.testing.assert_allclose(g, sc.digamma(x) + np.log(x) + 1 + 0.5 * (sc.jv(0, x) - sc.jv(2, x)))
    wg.check_grads(lambda x: sc.betainc(2.0, 3.0, x / 3) * sc.expit(x), (x,), order=2)


# --- vmap: special functions and stats batched without a per-example loop ----------------------------
_R = np.random.default_rng(21)
_VB = 3
_POS = _R.uniform(0.5, 3.0, (_VB, 4))
_POS2 = _R.uniform(0.5, 3.0, (_VB, 4))
_UNIT = _R.uniform(0.1, 0.9, (_VB, 4))
_NORMAL = _R.normal(size=(_VB, 4))
_XS = np.where(np.arange(4) == 0, 0.0, _R.normal(size=(_VB, 4)))   # xlogy's x, with zeros
_ORDERS = np.array([0.5, 1.0, 2.5])

# name: (function, arguments, in_axes, positions differentiated); in_axes None: the first row (or
# the whole argument when it has no batch axis) is passed to every example
SPECIAL_VMAP = {
    "beta": (ws.beta, (_POS, _POS2), (0, None), (0, 1)),
    "betaln": (ws.betaln, (_POS, _POS2), (0, 0), (0, 1)),
    "betaln scalar b": (ws.betaln, (_POS, np.float64(1.5)), (0, None), (0,)),
    "xlogy": (ws.xlogy, (_XS, _POS), (None, 0), (0, 1)),
    "xlog1py": (ws.xlog1py, (_XS, _UNIT), (0, 0), (0, 1)),
    "gammainc": (ws.gammainc, (_POS, _POS2), (0, 0), (1,)),
    "gammaincc": (ws.gammaincc, (_POS[:, 0], _POS2), (0, 0), (1,)),
    "betainc": (ws.betainc, (_POS, _POS2[:, 0], _UNIT), (0, 0, None), (2,)),
    "iv": (ws.iv, (_ORDERS, _POS), (0, 0), (1,)),
    "ive": (ws.ive, (_ORDERS, _POS), (0, None), (1,)),
    "jv": (ws.jv, (np.array([0.5, 1.0, 2.5, 1.5]), _POS), (None, 0), (1,)),
    "kv": (ws.kv, (_ORDERS, _POS), (0, 0), (1,)),
    "kve": (ws.kve, (_ORDERS, _POS), (0, 0), (1,)),
    "yv": (ws.yv, (_ORDERS, _POS), (0, 0), (1,)),
    "polygamma batched orders": (ws.polygamma, (np.array([0, 1, 2]), _POS), (0, 0), (1,)),
    "polygamma array of orders": (ws.polygamma, (np.array([[0, 1, 2, 1]] * _VB), _POS), (None, 0), (1,)),
    "logsumexp return_sign": (lambda a, b: ws.logsumexp(a, b=b, return_sign=True)[0], (_NORMAL, _NORMAL),
                              (0, 0), (0, 1)),
    "logsumexp return_sign axis keepdims": (
        lambda a, b: ws.logsumexp(a.reshape(2, 2), axis=1, b=b.reshape(2, 2), keepdims=True, return_sign=True)[0],
        (_NORMAL, _NORMAL), (0, None), (0, 1)),
    "norm.cdf scale batched": (lambda x, s: wst.norm.cdf(x, 0.2, s), (_NORMAL, _POS[:, 0]), (0, 0), (0, 1)),
    "t.cdf": (lambda x, df: wst.t.cdf(x, df, 0.1, 1.3), (_NORMAL, _POS[:, 0]), (0, 0), (0,)),
    "beta.logpdf out of support": (lambda x, a: wst.beta.logpdf(x, a, 2.0), (2 * _UNIT - 0.4, _POS[:, 0]),
                                   (0, 0), ()),
    "beta.cdf": (lambda x, a: wst.beta.cdf(x, a, 2.0), (_UNIT, _POS[:, 0]), (0, 0), (0,)),
    "gamma.cdf out of support": (lambda x, a: wst.gamma.cdf(x, a), (_NORMAL, _POS[:, 0]), (0, 0), ()),
    "chi2.logpdf": (lambda x, df: wst.chi2.logpdf(x, df), (_POS, _POS2[:, 0]), (0, 0), (0, 1)),
}


def _special_example(args, in_axes, i):
    return [a if ax is None else a[i] for a, ax in zip(args, in_axes)]


def _special_vmap_args(args, in_axes):
    return [a[0] if ax is None and np.ndim(a) > 1 else a for a, ax in zip(args, in_axes)]


def _quiet(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    assert not [w for w in caught if "vmap" in str(w.message)], [str(w.message) for w in caught]
    return out


@pytest.mark.parametrize("name", list(SPECIAL_VMAP))
def test_special_vmap_equals_a_loop_without_warning(name):
    f, args, in_axes, _ = SPECIAL_VMAP[name]
    vargs = _special_vmap_args(args, in_axes)
    out = _quiet(wg.vmap(f, in_axes=in_axes), *vargs)
    ref = np.stack([f(*_special_example(vargs, in_axes, i)) for i in range(_VB)])
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)


def _differentiated(name):
    f, args, in_axes, diff = SPECIAL_VMAP[name]
    vargs = _special_vmap_args(args, in_axes)
    batched = wg.vmap(f, in_axes=in_axes)
    shape = np.shape(batched(*vargs))
    w = np.linspace(0.5, 1.5, int(np.prod(shape))).reshape(shape)

    def scalar(*d):
        full = list(vargs)
        for i, v in zip(diff, d):
            full[i] = v
        return wg.numpy.sum(batched(*full) * w)
    return scalar, [vargs[i] for i in diff]


@pytest.mark.parametrize("name", [n for n in SPECIAL_VMAP if SPECIAL_VMAP[n][3]])
def test_special_vmap_gradients_match_finite_differences(name, own_jvp_rules):
    scalar, dargs = _differentiated(name)
    _quiet(wg.check_grads, scalar, dargs, 1, FWD_REV)


@pytest.mark.parametrize("name", [n for n in SPECIAL_VMAP if SPECIAL_VMAP[n][3]])
def test_special_vmap_jacfwd_equals_jacobian(name, own_jvp_rules):
    f, args, in_axes, diff = SPECIAL_VMAP[name]
    vargs = _special_vmap_args(args, in_axes)
    batched = wg.vmap(f, in_axes=in_axes)
    fwd = _quiet(wg.jacfwd(batched, argnums=diff), *vargs)
    rev = _quiet(wg.jacobian(batched, argnums=diff), *vargs)
    for a, b in zip(fwd, rev):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_special_per_example_gradients_equal_a_loop():
    def loss(scale, x, v):
        return wg.numpy.sum(ws.xlogy(x, scale * x * x + 1) + ws.betaln(scale, x * x + 1) + ws.iv(v, scale * x * x))
    xs, vs = _NORMAL, _ORDERS
    out = _quiet(wg.vmap(wg.grad(loss), in_axes=(None, 0, 0)), 1.3, xs, vs)
    ref = np.stack([wg.grad(loss)(1.3, xs[i], vs[i]) for i in range(_VB)])
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["betainc", "kv", "xlogy", "polygamma"])
def test_special_nested_vmap_equals_a_double_loop(name):
    x = _R.uniform(0.2, 0.8, (2, 3, 4))
    f = {"betainc": lambda a, x: ws.betainc(a, 2.0, x), "kv": ws.kv, "xlogy": ws.xlogy,
         "polygamma": ws.polygamma}[name]
    first = _R.uniform(0.5, 2.0, (2, 3)) if name != "polygamma" else _R.integers(0, 3, (2, 3))
    out = _quiet(wg.vmap(wg.vmap(f)), first, x)
    ref = np.stack([np.stack([f(first[i, j], x[i, j]) for j in range(3)]) for i in range(2)])
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)
    g = wg.grad(lambda x: wg.numpy.sum(wg.vmap(wg.vmap(f))(first, x)))(x)
    g_ref = np.stack([np.stack([wg.grad(lambda x: wg.numpy.sum(f(first[i, j], x)))(x[i, j]) for j in range(3)])
                      for i in range(2)])
    np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-14)


# --- a grad inside vmap: the tape records batched values (prim.batched_vjp) -------------------------
_inside_vmap_equals_loop = functools.partial(inside_vmap_equals_loop, rtol=1e-9, atol=1e-12)


def _sum_sin(f):
    return lambda *a: wnp.sum(wnp.sin(f(*a)))


_RV = np.random.default_rng(33)
_POS, _W = _RV.random((3, 4)) + 0.5, _RV.random(4) + 0.5
_UNIT = _RV.random((3, 4)) * 0.8 + 0.1
_UNARY_DOMAINS = {"gammaln": _POS, "digamma": _POS, "gamma": _POS, "rgamma": _POS, "erf": _POS - 1,
                  "erfc": _POS - 1, "erfinv": 2 * _UNIT - 1, "erfcinv": 1.5 * _UNIT, "ndtr": _POS - 1,
                  "ndtri": _UNIT, "log_ndtr": _POS - 1, "erfcx": _POS - 1, "dawsn": _POS - 1, "expit": _POS - 1,
                  "logit": _UNIT, "log_expit": _POS - 1, "entr": _POS, "i0": _POS, "i1": _POS, "i0e": _POS - 1,
                  "i1e": _POS - 1}


@pytest.mark.parametrize("name", list(_UNARY_DOMAINS))
def test_grad_and_hessian_inside_vmap_of_special_functions_are_batched(name):
    f = getattr(ws, name)
    x = _UNARY_DOMAINS[name]
    _inside_vmap_equals_loop(grad_inside(_sum_sin(lambda a, c: f(a * c)), (0, 1)), (x, _W), (0, None))
    _inside_vmap_equals_loop(wg.hessian(_sum_sin(f)), (x,), (0,))


@pytest.mark.parametrize("name", ["beta", "betaln", "xlogy", "xlog1py"])
def test_grad_inside_vmap_of_binary_special_functions_is_batched(name):
    f = getattr(ws, name)
    _inside_vmap_equals_loop(grad_inside(_sum_sin(f), (0, 1)), (_POS, _W), (0, None))
    _inside_vmap_equals_loop(grad_inside(_sum_sin(f), (0, 1)), (_W, _POS), (None, 0))


@pytest.mark.parametrize("loss", [
    lambda x: ws.polygamma(1, x), lambda x: ws.multigammaln(x + 3, 2), lambda x: ws.gammainc(_W, x),
    lambda x: ws.gammaincc(_W, x), lambda x: ws.betainc(_W, 2.0, x * 0.5), lambda x: ws.iv(1.5, x),
    lambda x: ws.ive(1.5, x), lambda x: ws.jv(1.5, x), lambda x: ws.kv(1.5, x), lambda x: ws.kve(1.5, x),
    lambda x: ws.yv(1.5, x), lambda x: ws.xlogy(x * np.array([0, 1, 1, 0]), _W),
    lambda x: ws.softmax(x), lambda x: ws.log_softmax(x), lambda x: ws.logsumexp(x),
])
def test_grad_inside_vmap_of_more_special_functions_is_batched(loss):
    _inside_vmap_equals_loop(grad_inside(_sum_sin(loss)), (_POS,), (0,))


@pytest.mark.parametrize("loss", [
    lambda x, m, s: wst.norm.logpdf(x, m, s) + wst.norm.cdf(x, m, s), lambda x, m, s: wst.gamma.logpdf(x, 2.0, m, s),
    lambda x, m, s: wst.beta.logpdf(x * 0.3, 2.0, 3.0) * m * s, lambda x, m, s: wst.t.logpdf(x, 3.0, m, s),
    lambda x, m, s: wst.poisson.logpmf(np.arange(4.0), x) * m * s,
    lambda x, m, s: wst.multivariate_normal.logpdf(x[:3], m[:3], np.eye(3) + 0.3) * s[0],
    lambda x, m, s: wst.t.sf(x, 3.0, m, s) + wst.gamma.logsf(x, 2.0, 0.0, s) + wst.beta.sf(x * 0.2, 2.0, 3.0) * m,
    lambda x, m, s: wst.poisson.logsf(np.arange(4.0), x) * m * s,
])
def test_grad_inside_vmap_of_stats_is_batched(loss):
    args = (_POS, _W, _POS[::-1])
    _inside_vmap_equals_loop(grad_inside(lambda *a: wnp.sum(loss(*a)), (0, 1, 2)), args, (0, None, 0))


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_grad_inside_vmap_of_convolve_is_batched(mode):
    a, b = _RV.standard_normal((3, 7)), _RV.standard_normal((3, 3))
    loss = grad_inside(_sum_sin(lambda x, y: wsig.convolve(x, y, mode=mode)), (0, 1))
    _inside_vmap_equals_loop(loss, (a, b), (0, 0))
    _inside_vmap_equals_loop(loss, (a, b[0]), (0, None))
    _inside_vmap_equals_loop(loss, (a[0], b), (None, 0))
    corr = grad_inside(_sum_sin(lambda x, y: wsig.correlate(x, y, mode=mode)), (0, 1))
    _inside_vmap_equals_loop(corr, (_RV.standard_normal((3, 5, 4)), _RV.standard_normal((3, 2, 3))), (0, 0))


def test_jacobian_and_hessian_inside_vmap_of_convolve_are_batched():
    a, b = _RV.standard_normal((3, 5)), _RV.standard_normal((3, 3))
    _inside_vmap_equals_loop(wg.jacobian(lambda x, y: wsig.convolve(x, y)), (a, b[0]), (0, None))
    _inside_vmap_equals_loop(wg.hessian(_sum_sin(wsig.convolve), (0, 1)), (a, b), (0, 0))

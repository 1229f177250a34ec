"""The rest of scipy.special: each name is differentiable (checked here against SciPy's values and
finite differences, first and second order, both modes) or listed in NOT_DIFFERENTIABLE with the
reason; a sweep of SciPy's namespace fails on a name that is neither."""
import warnings

import numpy as np
import pytest

import wengert as wg

sc = pytest.importorskip("scipy.special")
from wengert.scipy import special as ws  # noqa: E402

FWD_REV = ("fwd", "rev")
RNG = np.random.default_rng(7)


def u(lo, hi, n=3):
    return RNG.uniform(lo, hi, n)


X = u(0.5, 3.0)          # a positive variable
P = u(0.1, 0.9)          # a probability
# name: (arguments, positions differentiated); the other arguments are constants (orders, counts)
CASES = {
    "j0": ((X,), (0,)), "j1": ((X,), (0,)), "y0": ((X,), (0,)), "y1": ((X,), (0,)),
    "k0": ((X,), (0,)), "k1": ((X,), (0,)), "k0e": ((X,), (0,)), "k1e": ((X,), (0,)),
    "jn": ((2, X), (1,)), "yn": ((1, X), (1,)), "kn": ((2, X), (1,)),
    "hankel1": ((1.5, X), (1,)), "hankel2": ((0.5, X), (1,)),
    "struve": ((1.5, X), (1,)), "modstruve": ((1.5, X), (1,)),
    "ivp": ((1.5, X), (1,)), "jvp": ((1.5, X, 2), (1,)), "kvp": ((1.5, X), (1,)), "yvp": ((0.5, X), (1,)),
    "h1vp": ((1.5, X), (1,)), "h2vp": ((1.5, X), (1,)),
    "spherical_jn": ((np.array([0, 1, 2]), X), (1,)), "spherical_yn": ((2, X), (1,)),
    "spherical_in": ((np.array([0, 1, 2]), X, True), (1,)), "spherical_kn": ((1, X), (1,)),
    "exp2": ((u(-1, 1),), (0,)), "exp10": ((u(-1, 1),), (0,)), "expm1": ((u(-1, 1),), (0,)),
    "log1p": ((u(-0.4, 2),), (0,)), "cbrt": ((X,), (0,)), "cosm1": ((u(-2, 2),), (0,)),
    "sindg": ((u(10, 80),), (0,)), "cosdg": ((u(10, 80),), (0,)), "tandg": ((u(10, 80),), (0,)),
    "cotdg": ((u(10, 80),), (0,)), "powm1": ((X, u(0.5, 2)), (0, 1)), "radian": ((X, X, X), (0, 1, 2)),
    "erfi": ((u(-1, 1),), (0,)), "exp1": ((X,), (0,)), "expi": ((X,), (0,)),
    "expn": ((np.array([0, 1, 2]), X), (1,)), "spence": ((X,), (0,)), "wrightomega": ((u(-1, 2),), (0,)),
    "wofz": ((u(-1, 1),), (0,)), "ndtri_exp": ((u(-3, -0.1),), (0,)), "loggamma": ((X,), (0,)),
    "lambertw": ((X,), (0,)), "zeta": ((3.0, X), (1,)),
    "hyp0f1": ((1.5, X), (1,)), "hyp1f1": ((0.7, 1.3, X), (2,)), "hyperu": ((1.2, 0.7, X), (2,)),
    "hyp2f1": ((0.5, 0.7, 1.3, u(-0.5, 0.5)), (3,)),
    "ellipk": ((P,), (0,)), "ellipe": ((P,), (0,)), "ellipkm1": ((P,), (0,)),
    "ellipkinc": ((u(0.1, 1.2), 0.3), (0,)), "ellipeinc": ((u(0.1, 1.2), 0.3), (0,)),
    "poch": ((X, u(0.5, 2)), (0, 1)), "binom": ((u(3, 6), u(0.5, 2.5)), (0, 1)),
    "rel_entr": ((X, u(0.5, 3)), (0, 1)), "kl_div": ((X, u(0.5, 3)), (0, 1)),
    "owens_t": ((u(-1, 1), u(0.2, 2)), (0, 1)),
    "huber": ((u(0.5, 1.5), np.array([0.2, -0.3, 2.5])), (0, 1)),
    "pseudo_huber": ((u(0.5, 2), u(-2, 2)), (0, 1)),
    "boxcox": ((X, 0.4), (0,)), "boxcox1p": ((u(0, 2), 0.4), (0,)),
    "inv_boxcox": ((u(0.5, 2), 0.4), (0,)), "inv_boxcox1p": ((u(0.5, 2), 0.4), (0,)),
    "sici": ((X,), (0,)), "fresnel": ((u(0.2, 2),), (0,)), "airy": ((u(-2, 2),), (0,)),
    "itairy": ((u(0.2, 2),), (0,)), "iti0k0": ((u(0.5, 2),), (0,)), "it2i0k0": ((u(0.5, 2),), (0,)),
    "itj0y0": ((u(0.5, 2),), (0,)), "it2j0y0": ((u(0.5, 2),), (0,)), "itstruve0": ((u(0.5, 2),), (0,)),
    "it2struve0": ((u(0.5, 2),), (0,)), "itmodstruve0": ((u(0.5, 2),), (0,)),
    "chdtr": ((3.0, X), (1,)), "chdtrc": ((3.0, X), (1,)), "chdtri": ((3.0, P), (1,)),
    "stdtr": ((3.0, u(-2, 2)), (1,)), "stdtrit": ((3.0, P), (1,)),
    "fdtr": ((3.0, 5.0, X), (2,)), "fdtrc": ((3.0, 5.0, X), (2,)), "fdtri": ((3.0, 5.0, P), (2,)),
    "gdtr": ((1.3, 2.5, X), (2,)), "gdtrc": ((1.3, 2.5, X), (2,)),
    "pdtr": ((3, X), (1,)), "pdtrc": ((3, X), (1,)), "pdtri": ((3, P), (1,)),
    "bdtr": ((3, 10, u(0.1, 0.6)), (2,)), "bdtrc": ((3, 10, u(0.1, 0.6)), (2,)), "bdtri": ((3, 10, P), (2,)),
    "nbdtr": ((3, 5, u(0.2, 0.8)), (2,)), "nbdtrc": ((3, 5, u(0.2, 0.8)), (2,)), "nbdtri": ((3, 5, P), (2,)),
    "gammaincinv": ((2.5, P), (1,)), "gammainccinv": ((2.5, P), (1,)),
    "betaincc": ((u(0.5, 3), u(0.5, 3), P), (0, 1, 2)), "betaincinv": ((2.0, 3.0, P), (2,)), "betainccinv": ((2.0, 3.0, P), (2,)),
    "softplus": ((u(-2, 2),), (0,)),
    "eval_gegenbauer": ((np.array([0, 2, 3]), 1.5, u(-1, 1)), (2,)),
    "eval_legendre": ((np.array([0, 1, 4]), u(-1, 1)), (1,)), "eval_chebyu": ((3, u(-1, 1)), (1,)),
    "eval_chebyt": ((np.array([0, 2, 5]), u(-1, 1)), (1,)), "eval_chebys": ((3, u(-2, 2)), (1,)),
    "eval_chebyc": ((3, u(-2, 2)), (1,)), "eval_sh_legendre": ((3, P), (1,)), "eval_sh_chebyt": ((3, P), (1,)),
    "eval_sh_chebyu": ((np.array([0, 1, 3]), P), (1,)), "eval_hermite": ((np.array([0, 1, 3]), u(-2, 2)), (1,)),
    "eval_hermitenorm": ((3, u(-2, 2)), (1,)), "eval_genlaguerre": ((np.array([0, 2, 3]), 0.5, X), (2,)),
    "eval_laguerre": ((3, X), (1,)), "gdtrix": ((1.3, 2.5, P), (2,)),
    "ber": ((X,), (0,)), "bei": ((X,), (0,)), "ker": ((X,), (0,)), "kei": ((X,), (0,)), "berp": ((X,), (0,)),
    "beip": ((X,), (0,)), "kerp": ((X,), (0,)), "keip": ((X,), (0,)), "kelvin": ((X,), (0,)),
    "shichi": ((X,), (0,)), "ellipj": ((u(-2, 2), 0.3), (0,)), "nrdtrimn": ((P, u(0.5, 2), X), (0, 1, 2)),
    "nrdtrisd": ((u(-1, 0), u(0.6, 0.9), X), (0, 1, 2)),
    "hankel1e": ((1.5, X), (1,)), "hankel2e": ((0.5, X), (1,)), "jve": ((1.5, X), (1,)), "yve": ((0.5, X), (1,)),
    "exprel": ((np.array([-1.5, 2e-4, 0.0, 0.7]),), (0,)), "eval_jacobi": ((np.array([0, 1, 3]), 0.5, 1.5, u(-1, 1)), (3,)),
    # Carlson's integrals in every argument (distinct arguments: their formulas are 0/0 at ties)
    "elliprf": ((u(0.2, 0.6), u(0.8, 1.2), u(1.5, 2.0)), (0, 1, 2)),
    "elliprd": ((u(0.2, 0.6), u(0.8, 1.2), u(1.5, 2.0)), (0, 1, 2)),
    "elliprg": ((u(0.2, 0.6), u(0.8, 1.2), u(1.5, 2.0)), (0, 1, 2)),
    "elliprj": ((u(0.2, 0.6), u(0.8, 1.2), u(1.5, 2.0), u(2.5, 3.0)), (0, 1, 2, 3)),
    "elliprc": ((u(0.2, 0.6), u(0.8, 1.2)), (0, 1)),
    "agm": ((u(0.3, 1.0), u(1.5, 3.0)), (0, 1)), "besselpoly": ((X, 2.0, 1.5), (0,)),
    "lpmv": ((1.0, 2.5, u(-0.8, 0.8)), (2,)), "eval_sh_jacobi": ((np.array([0, 2, 3]), 2.5, 1.5, P), (3,)),
    "assoc_laguerre": ((X, 3, 0.5), (0,)),
    "chndtr": ((X, 3.0, u(0.3, 2.0)), (0, 2)), "chndtrix": ((P, 3.0, u(0.5, 2.0)), (0, 2)),
    "ncfdtr": ((3.0, 7.0, u(0.5, 4.0), X), (2, 3)), "ncfdtri": ((3.0, 7.0, u(0.5, 4.0), P), (2, 3)),
    "tklmbda": ((np.array([-0.4, 0.3, 4.0]), np.array([0.3, -0.2, 0.5])), (0, 1)),
    "voigt_profile": ((u(-2, 2), u(0.5, 1.5), u(0.0, 1.0)), (0, 1, 2)),
    "diric": ((np.array([0.7, 2 * np.pi, -1.9, 0.0, -4 * np.pi]), 3), (0,)),
    # the incomplete gamma and beta functions in their shape parameters too (central differences)
    "gammainc": ((u(0.3, 4), X), (0, 1)), "gammaincc": ((u(0.3, 4), X), (0, 1)),
    "betainc": ((u(0.3, 4), u(0.3, 4), P), (0, 1, 2)),
    # SciPy 1.15's Legendre functions and spherical harmonics (derivatives from SciPy's diff_n)
    "legendre_p": ((3, u(-0.9, 0.9)), (1,)), "assoc_legendre_p": ((3, 1, u(-0.9, 0.9)), (2,)),
    "sph_legendre_p": ((3, 2, u(0.2, 2.9)), (2,)), "sph_harm_y": ((3, 1, u(0.2, 2.9), u(-3, 3)), (2, 3)),
    "airye": ((u(0.2, 2.0),), (0,)), "modfresnelp": ((u(0.2, 2.0),), (0,)), "modfresnelm": ((u(0.2, 2.0),), (0,)),
}


def _total(out):
    outs = out if isinstance(out, tuple) else (out,)
    return sum(np.sum(np.real(o)) for o in outs)


@pytest.mark.parametrize("name", sorted(n for n in CASES if hasattr(sc, n)))
def test_surveyed_function(name):
    args, diff = CASES[name]
    f, ref = getattr(ws, name), getattr(sc, name)
    expected = ref(*args)
    np.testing.assert_allclose(f(*args), expected, rtol=1e-14)   # plain values: SciPy's own call

    def of_diff(*xs):
        full = list(args)
        for k, x in zip(diff, xs):
            full[k] = x
        return f(*full)

    traced = wg.vjp(of_diff, *[args[k] for k in diff])[0]
    for got, want in zip(*(((traced,), (expected,)) if not isinstance(expected, tuple) else (traced, expected))):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    wg.check_grads(of_diff, [args[k] for k in diff], order=2, modes=FWD_REV, rtol=1e-4, atol=1e-6)
    for k, a in enumerate(args):   # an argument not differentiated is refused, never a silent zero
        if k in diff or not isinstance(a, float):
            continue
        full = list(args)
        with pytest.raises(wg.NoDerivativeError):
            wg.grad(lambda p: _total(f(*full[:k], p, *full[k + 1:])))(a)


@pytest.mark.parametrize("name", sorted(n for n in CASES if hasattr(sc, n)))
def test_surveyed_function_under_vmap(name):
    """vmap over the examples (the arrays of the case) gives SciPy's values, and vmap of the
    gradient equals a loop of gradients, without a per-example warning."""
    args, diff = CASES[name]
    f = getattr(ws, name)
    size = max(np.size(a) for a in args)
    axes = tuple(0 if np.ndim(a) == 1 and np.size(a) == size else None for a in args)

    def loss(*full):
        return _total(f(*full))

    def example(i):
        return [a[i] if ax == 0 else a for a, ax in zip(args, axes)]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batched = wg.vmap(f, in_axes=axes)(*args)
        grads = wg.vmap(wg.grad(loss, argnums=diff), in_axes=axes)(*args)
    for got, want in zip(*(((batched,), (f(*args),)) if not isinstance(batched, tuple) else (batched, f(*args)))):
        if np.shape(got) != np.shape(want):   # SciPy's Legendre functions put their derivatives first
            want = np.moveaxis(want, -1, 0)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    for i in range(size):
        looped = wg.grad(loss, argnums=diff)(*example(i))
        for got, want in zip(grads, looped):
            np.testing.assert_allclose(got[i] if np.ndim(got) else got, want, rtol=1e-10, atol=1e-14)


def test_every_public_name_of_scipy_special_is_differentiable_or_listed_with_a_reason():
    import types
    names = {n for n in dir(sc) if not n.startswith("_") and not isinstance(getattr(sc, n), types.ModuleType)}
    unexplained = sorted(n for n in names if n not in ws.__all__ and n not in ws.NOT_DIFFERENTIABLE)
    assert not unexplained, f"scipy.special names neither differentiable nor listed: {unexplained}"
    assert not set(ws.__all__) & set(ws.NOT_DIFFERENTIABLE)
    assert all(len(reason) > 20 for reason in ws.NOT_DIFFERENTIABLE.values())
    # the differentiable ones added by the survey are checked above (CASES); the older ones in test_scipy.py
    surveyed = set(ws.__all__[ws.__all__.index("j0"):])
    assert not {n for n in surveyed if hasattr(sc, n)} - set(CASES)


# points across the parameters' range and the cdf's (from 1e-6 to 1 - 1e-6): a, x for gamma
_GAMMA_POINTS = [(0.05, 1e-6), (0.3, 0.5), (2.5, 0.999), (40.0, 0.02), (400.0, 1 - 1e-6)]
_BETA_POINTS = [(0.1, 25.0, 1e-5), (0.7, 0.2, 0.5), (3.0, 1.5, 0.9), (40.0, 25.0, 1 - 1e-5)]


def test_shape_parameter_derivatives_against_mpmath():
    """The central differences on SciPy's function against mpmath's derivatives of the same functions
    (40 digits): first derivatives to 1e-9 relative, second (mixed included) to 1e-7."""
    import mpmath as mp   # in the test extra: this check must run, never skip
    mp.mp.dps = 30
    for a, q in _GAMMA_POINTS:
        x = sc.gammaincinv(a, q)
        A, X = mp.mpf(a), mp.mpf(x)
        p = lambda t: mp.gammainc(t, 0, X, regularized=True)  # noqa: E731
        np.testing.assert_allclose(ws._gamma_partial(a, x, 1), float(mp.diff(p, A)), rtol=1e-9)
        np.testing.assert_allclose(ws._gamma_partial(a, x, 2), float(mp.diff(p, A, 2)), rtol=1e-7)
    for a, b, q in _BETA_POINTS:
        x = sc.betaincinv(a, b, q)
        A, B, X = mp.mpf(a), mp.mpf(b), mp.mpf(x)
        i = lambda s, t: mp.betainc(s, t, 0, X, regularized=True)  # noqa: E731
        for which, orders in (("a", (1, 0)), ("b", (0, 1)), ("aa", (2, 0)), ("ab", (1, 1)), ("bb", (0, 2))):
            np.testing.assert_allclose(ws._beta_partial(a, b, x, which), float(mp.diff(i, (A, B), orders)),
                                       rtol=1e-9 if len(which) == 1 else 1e-7, err_msg=f"{which} at {a, b, q}")


@pytest.mark.skipif(not hasattr(sc, "sph_harm_y"), reason="SciPy 1.15's Legendre functions")
def test_legendre_and_harmonics_with_their_derivatives_and_refusals():
    """diff_n outputs on traced values are SciPy's layout, each entry differentiable once more; a
    third derivative is refused (SciPy's diff_n stops at 2)."""
    z, theta, phi = np.array([0.3, -0.5]), np.array([0.4, 1.1]), np.array([0.2, -1.0])
    out = wg.vjp(lambda z: ws.assoc_legendre_p(3, 1, z, norm=True, diff_n=2), z)[0]
    np.testing.assert_allclose(out, sc.assoc_legendre_p(3, 1, z, norm=True, diff_n=2), rtol=1e-12)
    wg.check_grads(lambda z: ws.legendre_p(4, z, diff_n=1)[1], (z,), order=1, modes=FWD_REV)
    value, grad, hess = wg.vjp(lambda t, p: ws.sph_harm_y(2, 1, t, p, diff_n=2), theta, phi)[0]
    for got, want in zip((value, grad, hess), sc.sph_harm_y(2, 1, theta, phi, diff_n=2)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    wg.check_grads(lambda t, p: ws.sph_harm_y(2, 1, t, p, diff_n=1)[1], (theta, phi), order=1, modes=FWD_REV)
    with pytest.raises(wg.NoDerivativeError, match="diff_n <= 2"):
        wg.check_grads(lambda z: ws.legendre_p(4, z), (z,), order=3)


def test_noncentral_f_density_matches_scipy_stats():
    """ncfdtr's derivative in f (a Poisson mixture of beta densities, truncated where the weights
    fall below rounding) against scipy.stats.ncf.pdf, from nc = 0 to nc = 200."""
    stats = pytest.importorskip("scipy.stats")
    f = np.array([0.05, 0.8, 2.5, 9.0, 60.0])
    for nc in (0.0, 1.5, 30.0, 200.0):
        got = wg.jacobian(lambda f: ws.ncfdtr(3.0, 7.0, nc, f))(f).diagonal()
        np.testing.assert_allclose(got, stats.ncf.pdf(f, 3.0, 7.0, nc), rtol=1e-9, atol=1e-300, err_msg=f"nc={nc}")


def test_diric_near_its_poles_is_exact():
    """Within 1e-3 / n of x = 2 pi k the quotient cancels (SciPy's own value loses about 1e-16 / d);
    wengert's Taylor series there matches diric(x, 3) = 1 - (4/3) sin^2(x/2), which does not cancel,
    and so does its derivative -(2/3) sin(x)."""
    d = np.array([1e-4, -3e-4, 2e-6, 0.0])
    x = 2 * np.pi + d
    out, pull = wg.vjp(lambda x: ws.diric(x, 3), x)
    np.testing.assert_allclose(out, 1 - (4 / 3) * np.sin(d / 2) ** 2, rtol=1e-15)
    np.testing.assert_allclose(pull(np.ones(4))[0], -(2 / 3) * np.sin(d), rtol=1e-9, atol=1e-300)
    second = wg.jacobian(wg.elementwise_grad(lambda x: ws.diric(x, 3)))(x).diagonal()
    np.testing.assert_allclose(second, -(2 / 3) * np.cos(d), rtol=1e-9)


def test_tukey_lambda_at_lambda_zero_is_the_limit_of_the_formula():
    """At lambda = 0 (the logistic) SciPy's cdf is flat in lambda on a small band, so finite
    differences say 0 there; the derivative is the lambda -> 0 limit of the general one."""
    x = np.array([-0.7, 0.3, 1.5])
    at_zero = wg.jacobian(lambda lm: ws.tklmbda(x, lm))(np.zeros(3)).diagonal()
    near_zero = wg.jacobian(lambda lm: ws.tklmbda(x, lm))(np.full(3, 1e-5)).diagonal()
    np.testing.assert_allclose(at_zero, near_zero, rtol=1e-3)
    assert np.all(np.abs(at_zero) > 1e-3)
    wg.check_grads(lambda x: ws.tklmbda(x, 0.0), (x,), order=2, modes=FWD_REV)


def test_noncentral_chi2_at_zero_noncentrality_is_the_central_density():
    x = np.array([0.5, 1.7, 3.0])
    jx = wg.jacobian(lambda x: ws.chndtr(x, 3.0, 0.0))(x).diagonal()
    np.testing.assert_allclose(jx, wg.jacobian(lambda x: ws.chdtr(3.0, x))(x).diagonal(), rtol=1e-12)
    wg.check_grads(lambda x: ws.chndtr(x, 3.0, 0.0), (x,), order=2, modes=FWD_REV)


def test_jve_and_yve_refuse_a_complex_argument():
    with pytest.raises(wg.NoDerivativeError, match="holomorphic"):
        wg.vjp(lambda z: ws.jve(1.5, z), np.array([1.0 + 0.5j]))

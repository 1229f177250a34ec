"""The rest of scipy.special: each name is differentiable (checked here against SciPy's values and
finite differences, first and second order, both modes) or listed in NOT_DIFFERENTIABLE with the
reason; a sweep of SciPy's namespace fails on a name that is neither."""
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
    "betaincc": ((2.0, 3.0, P), (2,)), "betaincinv": ((2.0, 3.0, P), (2,)), "betainccinv": ((2.0, 3.0, P), (2,)),
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


def test_jve_and_yve_refuse_a_complex_argument():
    with pytest.raises(wg.NoDerivativeError, match="holomorphic"):
        wg.vjp(lambda z: ws.jve(1.5, z), np.array([1.0 + 0.5j]))

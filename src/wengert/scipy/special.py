"""scipy.special with gradients: each function a primitive whose implementation is SciPy's and
whose VJP rule is written with wengert operations (so second and higher derivatives work).

Orders (``n`` of ``polygamma``, ``v`` of the Bessel functions) have no derivative here: passing a
traced value for them raises ``NoDerivativeError`` rather than giving a silent zero. The shape
parameters of the incomplete gamma and beta functions have first and second derivatives computed
numerically (central differences of SciPy's function, below), which the cdfs of scipy.stats' t,
beta, gamma and chi2 inherit.
"""
from __future__ import annotations

import numpy as np
import scipy.special as sc

from ..core.errors import NoDerivativeError
from ..core.trace import Tracer, levels_of, unbox
from ..numpy import _functions as F
from ..primitives import elementwise as E
from ..primitives._table import batch_elementwise, defprim, defunary, elementwise_constant, nondiff, staged, unbroadcast
from .. import nn as wnn
from ..numpy._methods import UFUNCS

__all__ = ["gammaln", "digamma", "psi", "polygamma", "gamma", "rgamma", "beta", "betaln",
           "erf", "erfc", "erfinv", "erfcinv", "ndtr", "ndtri", "log_ndtr", "expit", "logit",
           "log_expit", "logsumexp", "xlogy", "xlog1py", "i0", "i1", "i0e", "i1e", "iv", "ive", "jv",
           "yv", "kv", "kve", "multigammaln", "gammainc", "gammaincc", "betainc", "entr", "softmax",
           "log_softmax", "erfcx", "dawsn",
           # the survey of the rest of scipy.special (docs/scipy.md)
           "j0", "j1", "y0", "y1", "k0", "k1", "k0e", "k1e", "jn", "yn", "kn", "hankel1", "hankel2",
           "struve", "modstruve", "ivp", "jvp", "kvp", "yvp", "h1vp", "h2vp", "spherical_jn",
           "spherical_yn", "spherical_in", "spherical_kn", "exp2", "exp10", "expm1", "log1p", "cbrt",
           "cosm1", "sindg", "cosdg", "tandg", "cotdg", "powm1", "radian", "erfi", "exp1", "expi", "expn",
           "spence", "wrightomega", "wofz", "ndtri_exp", "loggamma", "lambertw", "zeta", "hyp0f1",
           "hyp1f1", "hyperu", "hyp2f1", "ellipk", "ellipe", "ellipkm1", "ellipkinc", "ellipeinc",
           "poch", "binom", "rel_entr", "kl_div", "owens_t", "huber", "pseudo_huber", "boxcox",
           "boxcox1p", "inv_boxcox", "inv_boxcox1p", "sici", "fresnel", "airy", "itairy", "iti0k0",
           "it2i0k0", "itj0y0", "it2j0y0", "itstruve0", "it2struve0", "itmodstruve0", "chdtr",
           "chdtrc", "chdtri", "stdtr", "stdtrit", "fdtr", "fdtrc", "fdtri", "gdtr", "gdtrc", "pdtr",
           "pdtrc", "pdtri", "bdtr", "bdtrc", "bdtri", "nbdtr", "nbdtrc", "nbdtri", "gammaincinv",
           "gammainccinv", "betaincc", "betaincinv", "betainccinv", "eval_gegenbauer", "eval_legendre",
           "eval_chebyu", "eval_chebyt", "eval_chebys", "eval_chebyc", "eval_sh_legendre", "eval_sh_chebyt",
           "eval_sh_chebyu", "eval_hermite", "eval_hermitenorm", "eval_genlaguerre", "eval_laguerre",
           "eval_jacobi", "gdtrix", "ber", "bei", "ker", "kei", "berp", "beip", "kerp", "keip", "kelvin",
           "shichi", "ellipj", "nrdtrimn", "nrdtrisd", "hankel1e", "hankel2e", "jve", "yve", "exprel"] + (["softplus"] if hasattr(sc, "softplus") else [])

_SQRT_PI = np.sqrt(np.pi)
_SQRT_2PI = np.sqrt(2 * np.pi)


def _no_derivative(name, message=None):
    def rule(g, ans, *args, **params):
        raise NoDerivativeError(f"the derivative of scipy.special.{name} with respect to this argument", message)
    return rule


def _partials(impl, name, *derivatives, refuse=None, batched_vjp=False):
    """``f(a_1, ..., a_k)`` (k = 2, 3 or 4) with ``derivatives[i](ans, *args)`` its partial in
    ``a_i``, or None where it has none here (that argument is refused in both modes, by ``refuse``)."""
    refuse = refuse or _no_derivative(name)
    arity = len(derivatives)

    def vjp(i, d):
        if d is None:
            return refuse
        if arity == 2:
            return lambda g, ans, a, b: unbroadcast(g * d(ans, a, b), (a, b)[i].shape)
        if arity == 3:
            return lambda g, ans, a, b, c: unbroadcast(g * d(ans, a, b, c), (a, b, c)[i].shape)
        return lambda g, ans, a, b, c, e: unbroadcast(g * d(ans, a, b, c, e), (a, b, c, e)[i].shape)

    def jvp(d):
        if d is None:
            return refuse
        if arity == 2:
            return lambda t, ans, a, b: t * d(ans, a, b)
        if arity == 3:
            return lambda t, ans, a, b, c: t * d(ans, a, b, c)
        return lambda t, ans, a, b, c, e: t * d(ans, a, b, c, e)

    return defprim(impl, tuple(vjp(i, d) for i, d in enumerate(derivatives)),
                   jvp=tuple(jvp(d) for d in derivatives), name=f"scipy.special.{name}", batch=batch_elementwise,
                   batched_vjp=batched_vjp)


@elementwise_constant
def _nonzero(x):
    """Constant mask: ``x != 0`` (per example under vmap)."""
    return np.not_equal(x, 0)


# Every rule here is an elementwise product written with wengert operations: right on values batched
# by vmap (``batched_vjp``, ``defunary``'s default; tests/test_scipy.py checks each under vmap).

# --- gamma family --------------------------------------------------------------------------------
gammaln = defunary(sc.gammaln, lambda g, ans, x: g * digamma(x), name="scipy.special.gammaln")


def _digamma_vjp(g, ans, x):
    """g * polygamma(1, x). On plain real values trigamma is the Hurwitz zeta(2, x) (polygamma(1, x)
    is (-1)^2 1! zeta(2, x)): SciPy's one call, where polygamma is several and promotes float32."""
    if type(g) is not Tracer and (type(x) is np.ndarray or isinstance(x, np.floating)) and x.dtype.kind == "f":
        return g * sc.zeta(2.0, x)
    return g * _polygamma(x, n=1)


digamma = defunary(sc.digamma, _digamma_vjp, name="scipy.special.digamma")
psi = digamma


def _polygamma_impl(x, n):
    return sc.polygamma(n, x)


_polygamma = defunary(_polygamma_impl, lambda g, ans, x, n: g * _polygamma(x, n=n + 1),
                     name="scipy.special.polygamma")


def polygamma(n, x):
    """``scipy.special.polygamma(n, x)``: differentiable in ``x`` (``n`` is an integer order)."""
    if type(x) is not Tracer and type(n) is not Tracer:
        return sc.polygamma(n, x)
    if type(n) is Tracer and not _only_batched(n):
        raise NoDerivativeError("the derivative of scipy.special.polygamma with respect to n")
    n_arr = n if type(n) is Tracer else np.asarray(n)
    if type(n) is not Tracer and n_arr.ndim == 0:
        return _polygamma(x, n=int(n_arr))
    # an array of orders (or orders that vary over a vmap batch): one call per distinct order,
    # selected elementwise
    if staged(n_arr):
        raise TypeError("scipy.special.polygamma: under wg.jit the orders n must be known when the program "
                        "is traced (one SciPy call per distinct order): mark n static (static_argnums)")
    out = 0.0
    for k in np.unique(unbox(n_arr)):
        out = F.where(n_arr == k, _polygamma(x, n=int(k)), out)
    return out


def _only_batched(x):
    """Is ``x`` traced by vmap levels only (integer orders batched by vmap, not differentiated)?"""
    return all(t.hidden_axes for t in levels_of(x))


gamma = defunary(sc.gamma, lambda g, ans, x: g * ans * digamma(x), name="scipy.special.gamma")
rgamma = defunary(sc.rgamma, lambda g, ans, x: -g * ans * digamma(x), name="scipy.special.rgamma")
beta = defprim(sc.beta, (lambda g, ans, a, b: unbroadcast(g * ans * (digamma(a) - digamma(a + b)), a.shape),
                         lambda g, ans, a, b: unbroadcast(g * ans * (digamma(b) - digamma(a + b)), b.shape)),
               name="scipy.special.beta",
               jvp=(lambda t, ans, a, b: t * ans * (digamma(a) - digamma(a + b)),
                    lambda t, ans, a, b: t * ans * (digamma(b) - digamma(a + b))), batch=batch_elementwise, batched_vjp=True)
betaln = defprim(sc.betaln, (lambda g, ans, a, b: unbroadcast(g * (digamma(a) - digamma(a + b)), a.shape),
                             lambda g, ans, a, b: unbroadcast(g * (digamma(b) - digamma(a + b)), b.shape)),
                 name="scipy.special.betaln",
                 jvp=(lambda t, ans, a, b: t * (digamma(a) - digamma(a + b)),
                      lambda t, ans, a, b: t * (digamma(b) - digamma(a + b))), batch=batch_elementwise, batched_vjp=True)


def multigammaln(a, d):
    """``scipy.special.multigammaln(a, d)``: the log of the multivariate gamma function."""
    if type(a) is not Tracer:
        return sc.multigammaln(a, d)
    sc.multigammaln(np.asarray(unbox(a)), d)  # SciPy's checks and errors
    d = int(np.asarray(d)[()])
    total = d * (d - 1) / 4.0 * np.log(np.pi)
    for j in range(1, d + 1):
        total = total + gammaln(a - (j - 1) / 2.0)
    return total


# incomplete gamma and beta. In x: their densities. In the shape parameters there is no closed form
# (the derivatives are integrals with a log in them), so they are primitives of their own computed
# from SciPy's function by central differences of fourth order (five points), on the smaller of
# the function and its complement (so a cdf near 1 loses nothing to cancellation), with the step a
# small fraction of the scale over which the function varies in that parameter:
# 1 / (|d log density / d a| + 1/sqrt(a) + 1/a), which keeps every point inside a > 0. Measured
# against mpmath's quadrature (tests/test_special_survey.py): first derivatives to about 1e-9
# relative, second to about 1e-7. Their derivatives in x are closed forms (the density's derivatives
# in the parameters); third derivatives in the parameters are refused.
def _gamma_density(a, x):
    return E.exp((a - 1) * E.log(x) - x - gammaln(a))


def _beta_density(a, b, x):
    return E.exp(xlogy(a - 1, x) + xlog1py(b - 1, -x) - betaln(a, b))


_FIRST_STEP, _SECOND_STEP = 2e-3, 1e-2


def _shape_scale(p, log_slope):
    """How far the parameter ``p`` can move before the function changes much (for its step)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1 / (np.abs(log_slope) + 1 / np.sqrt(p) + 1 / p)


def _central(f, p, h, order):
    """Five-point central differences: error O(h^4) for the first and the second derivative."""
    if order == 1:
        return (f(p - 2 * h) - f(p + 2 * h) + 8 * (f(p + h) - f(p - h))) / (12 * h)
    return (16 * (f(p + h) + f(p - h)) - f(p + 2 * h) - f(p - 2 * h) - 30 * f(p)) / (12 * h * h)


def _smaller_tail(lower, upper, value):
    """``lower`` where ``value <= 1/2``, else ``-upper`` (the complement, which has the same
    derivatives in the parameters up to sign and keeps its relative precision near 1)."""
    use_upper = value > 0.5
    return lambda *args: np.where(use_upper, -upper(*args), lower(*args))


def _gamma_partial(a, x, order):
    a, x = (np.asarray(v, dtype=np.result_type(v, 1.0)) for v in np.broadcast_arrays(a, x))
    f = _smaller_tail(sc.gammainc, sc.gammaincc, sc.gammainc(a, x))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = _shape_scale(a, np.log(x) - sc.digamma(a))
        h = (_FIRST_STEP if order == 1 else _SECOND_STEP) * scale
        out = _central(lambda p: f(p, x), a, h, order)
    flat = (x == 0) | np.isinf(x)   # P is 0 or 1 for every a
    return np.where(flat & (a > 0), 0.0, out)[()]


def _beta_partial(a, b, x, which):
    """``which``: "a", "b" (first derivatives), "aa", "bb", "ab" (second)."""
    a, b, x = (np.asarray(v, dtype=np.result_type(v, 1.0)) for v in np.broadcast_arrays(a, b, x))
    f = _smaller_tail(sc.betainc, sc.betaincc, sc.betainc(a, b, x))
    with np.errstate(divide="ignore", invalid="ignore"):
        both = sc.digamma(a + b)
        scale_a = _shape_scale(a, np.log(x) - sc.digamma(a) + both)
        scale_b = _shape_scale(b, np.log1p(-x) - sc.digamma(b) + both)
        if which == "ab":   # the cross stencil, O(h^2), and one Richardson step
            def cross(ha, hb):
                return (f(a + ha, b + hb, x) - f(a + ha, b - hb, x) - f(a - ha, b + hb, x)
                        + f(a - ha, b - hb, x)) / (4 * ha * hb)
            ha, hb = _SECOND_STEP * scale_a, _SECOND_STEP * scale_b
            out = (4 * cross(ha / 2, hb / 2) - cross(ha, hb)) / 3
        elif which[0] == "a":
            h = (_FIRST_STEP if len(which) == 1 else _SECOND_STEP) * scale_a
            out = _central(lambda p: f(p, b, x), a, h, len(which))
        else:
            h = (_FIRST_STEP if len(which) == 1 else _SECOND_STEP) * scale_b
            out = _central(lambda p: f(a, p, x), b, h, len(which))
    flat = (x == 0) | (x == 1)
    return np.where(flat & (a > 0) & (b > 0), 0.0, out)[()]


def _third_order(name):
    return _no_derivative(name, (
        f"scipy.special.{name}: derivatives of third order in the shape parameters are not computed (the "
        "first and second are, by central differences of SciPy's function; docs/scipy.md). Differentiate "
        "at most twice in them, or in x, which has closed forms to any order."))


def _trigamma(x):
    return _polygamma(x, n=1)


def _gamma_log_slope(a, x):   # d log(density) / da
    return E.log(x) - digamma(a)


# d^2 P / da^2 and d P / da; their partials in x are the density's in a
def _gamma_density_a(a, x):
    return _gamma_density(a, x) * _gamma_log_slope(a, x)


_gammainc_aa = _partials(lambda a, x: _gamma_partial(a, x, 2), "gammainc_aa", None,
                         lambda ans, a, x: _gamma_density(a, x) * (_gamma_log_slope(a, x) ** 2 - _trigamma(a)),
                         refuse=_third_order("gammainc"), batched_vjp=True)
_gammainc_a = _partials(lambda a, x: _gamma_partial(a, x, 1), "gammainc_a", lambda ans, a, x: _gammainc_aa(a, x),
                        lambda ans, a, x: _gamma_density_a(a, x), batched_vjp=True)
gammainc = _partials(sc.gammainc, "gammainc", lambda ans, a, x: _gammainc_a(a, x),
                     lambda ans, a, x: _gamma_density(a, x), batched_vjp=True)
gammaincc = _partials(sc.gammaincc, "gammaincc", lambda ans, a, x: -_gammainc_a(a, x),
                      lambda ans, a, x: -_gamma_density(a, x), batched_vjp=True)


def _beta_log_slopes(a, b, x):   # d log(density) / da and / db
    both = digamma(a + b)
    return E.log(x) - digamma(a) + both, E.log1p(-x) - digamma(b) + both


def _beta_density_aa(a, b, x):
    la, _ = _beta_log_slopes(a, b, x)
    return _beta_density(a, b, x) * (la * la + _trigamma(a + b) - _trigamma(a))


def _beta_density_bb(a, b, x):
    _, lb = _beta_log_slopes(a, b, x)
    return _beta_density(a, b, x) * (lb * lb + _trigamma(a + b) - _trigamma(b))


def _beta_density_ab(a, b, x):
    la, lb = _beta_log_slopes(a, b, x)
    return _beta_density(a, b, x) * (la * lb + _trigamma(a + b))


def _beta_second(which, density_x):
    return _partials(lambda a, b, x: _beta_partial(a, b, x, which), f"betainc_{which}", None, None,
                     lambda ans, a, b, x: density_x(a, b, x), refuse=_third_order("betainc"), batched_vjp=True)


_betainc_aa = _beta_second("aa", _beta_density_aa)
_betainc_bb = _beta_second("bb", _beta_density_bb)
_betainc_ab = _beta_second("ab", _beta_density_ab)
_betainc_a = _partials(lambda a, b, x: _beta_partial(a, b, x, "a"), "betainc_a",
                       lambda ans, a, b, x: _betainc_aa(a, b, x), lambda ans, a, b, x: _betainc_ab(a, b, x),
                       lambda ans, a, b, x: _beta_density(a, b, x) * _beta_log_slopes(a, b, x)[0], batched_vjp=True)
_betainc_b = _partials(lambda a, b, x: _beta_partial(a, b, x, "b"), "betainc_b",
                       lambda ans, a, b, x: _betainc_ab(a, b, x), lambda ans, a, b, x: _betainc_bb(a, b, x),
                       lambda ans, a, b, x: _beta_density(a, b, x) * _beta_log_slopes(a, b, x)[1], batched_vjp=True)
betainc = _partials(sc.betainc, "betainc", lambda ans, a, b, x: _betainc_a(a, b, x),
                    lambda ans, a, b, x: _betainc_b(a, b, x), lambda ans, a, b, x: _beta_density(a, b, x),
                    batched_vjp=True)

# --- error function and the normal distribution ----------------------------------------------------
erf = defunary(sc.erf, lambda g, ans, x: g * (2 / _SQRT_PI) * E.exp(-x * x), name="scipy.special.erf")
erfc = defunary(sc.erfc, lambda g, ans, x: g * (-2 / _SQRT_PI) * E.exp(-x * x), name="scipy.special.erfc")
erfinv = defunary(sc.erfinv, lambda g, ans, x: g * (_SQRT_PI / 2) * E.exp(ans * ans),
                 name="scipy.special.erfinv")
erfcinv = defunary(sc.erfcinv, lambda g, ans, x: g * (-_SQRT_PI / 2) * E.exp(ans * ans),
                  name="scipy.special.erfcinv")
ndtr = defunary(sc.ndtr, lambda g, ans, x: g * E.exp(-0.5 * x * x) / _SQRT_2PI, name="scipy.special.ndtr")
ndtri = defunary(sc.ndtri, lambda g, ans, x: g * _SQRT_2PI * E.exp(0.5 * ans * ans), name="scipy.special.ndtri")
log_ndtr = defunary(sc.log_ndtr, lambda g, ans, x: g * E.exp(-0.5 * x * x - ans) / _SQRT_2PI,
                   name="scipy.special.log_ndtr")

# --- logistic ----------------------------------------------------------------------------------
expit = defunary(sc.expit, lambda g, ans, x: g * ans * (1 - ans), name="scipy.special.expit")
logit = defunary(sc.logit, lambda g, ans, x: g / (x * (1 - x)), name="scipy.special.logit")
log_expit = defunary(sc.log_expit, lambda g, ans, x: g * expit(-x), name="scipy.special.log_expit")


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``scipy.special.logsumexp``, stable; differentiable in ``a`` and ``b``."""
    if type(a) is not Tracer and type(b) is not Tracer:
        return sc.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    if not return_sign:
        return wnn.logsumexp(a, axis=axis, b=b, keepdims=keepdims)
    # with signs: log|sum(b exp(a))| and the sign, shifted by the (constant) maximum
    a = F.as_traced_operand(a)
    m = _finite_max(a, axis)
    terms = F.exp(a - m) if b is None else b * F.exp(a - m)
    s = F.sum(terms, axis=axis, keepdims=True)
    sign = _sign(s)
    out = F.log(F.abs(s)) + m
    if not keepdims:
        axes = tuple(range(len(a.shape))) if axis is None else axis
        out, sign = F.squeeze(out, axis=axes), F.squeeze(sign, axis=axes)
    return out, sign


@nondiff
def _finite_max(a, axis):
    """logsumexp's shift: the maximum along ``axis`` (kept), 0 where it is not finite. A constant
    (no derivative), per example under vmap."""
    a = np.asarray(a)
    if not a.size:
        return np.zeros((1,) * a.ndim)
    m = np.max(a, axis=axis, keepdims=True)
    return np.where(np.isfinite(m), m, 0)


_sign = nondiff(np.sign)


def softmax(x, axis=None):
    """``scipy.special.softmax`` (over all elements when ``axis`` is None)."""
    if type(x) is not Tracer:
        return sc.softmax(x, axis=axis)
    return F.exp(log_softmax(x, axis=axis))


def log_softmax(x, axis=None):
    """``scipy.special.log_softmax``: ``x - logsumexp(x, axis, keepdims=True)``."""
    if type(x) is not Tracer:
        return sc.log_softmax(x, axis=axis)
    return x - logsumexp(x, axis=axis, keepdims=True)


erfcx = defunary(sc.erfcx, lambda g, ans, x: g * (2 * x * ans - 2 / _SQRT_PI), name="scipy.special.erfcx")
dawsn = defunary(sc.dawsn, lambda g, ans, x: g * (1 - 2 * x * ans), name="scipy.special.dawsn")


# --- x log y -----------------------------------------------------------------------------------
xlogy = defprim(sc.xlogy, (lambda g, ans, x, y: unbroadcast(g * E.log(y), x.shape),
                           lambda g, ans, x, y: unbroadcast(g * F.where(_nonzero(x), x / y, 0), y.shape)),
                jvp=(lambda t, ans, x, y: t * E.log(y),
                     lambda t, ans, x, y: t * F.where(_nonzero(x), x / y, 0)),
                name="scipy.special.xlogy", batch=batch_elementwise, batched_vjp=True)
xlog1py = defprim(sc.xlog1py, (lambda g, ans, x, y: unbroadcast(g * E.log1p(y), x.shape),
                               lambda g, ans, x, y: unbroadcast(g * F.where(_nonzero(x), x / (1 + y), 0),
                                                                y.shape)),
                  jvp=(lambda t, ans, x, y: t * E.log1p(y),
                       lambda t, ans, x, y: t * F.where(_nonzero(x), x / (1 + y), 0)),
                  name="scipy.special.xlog1py", batch=batch_elementwise, batched_vjp=True)
entr = defunary(sc.entr, lambda g, ans, x: g * (-1 - E.log(x)), name="scipy.special.entr")

# --- Bessel functions (derivatives in x; the order v is a constant) ------------------------------
i0 = defunary(sc.i0, lambda g, ans, x: g * i1(x), name="scipy.special.i0")
i1 = defunary(sc.i1, lambda g, ans, x: g * 0.5 * (i0(x) + iv(2, x)), name="scipy.special.i1")
i0e = defunary(sc.i0e, lambda g, ans, x: g * (i1e(x) - F.sign(x) * ans), name="scipy.special.i0e")
i1e = defunary(sc.i1e, lambda g, ans, x: g * (0.5 * (i0e(x) + ive(2, x)) - F.sign(x) * ans),
              name="scipy.special.i1e")


# d/dx of f(v, x), shared by the VJP rule (unbroadcast to x's shape) and the JVP rule (times t)
def _d_iv(ans, v, x):
    return 0.5 * (iv(v - 1, x) + iv(v + 1, x))


def _d_ive(ans, v, x):
    return 0.5 * (ive(v - 1, x) + ive(v + 1, x)) - F.sign(x) * ans


def _d_jv(ans, v, x):
    return 0.5 * (jv(v - 1, x) - jv(v + 1, x))


def _d_kv(ans, v, x):
    return -0.5 * (kv(v - 1, x) + kv(v + 1, x))


def _d_kve(ans, v, x):
    return -0.5 * (kve(v - 1, x) + kve(v + 1, x)) + ans


def _d_yv(ans, v, x):
    return 0.5 * (yv(v - 1, x) - yv(v + 1, x))


def _bessel(impl, name, d):
    """``f(v, x)`` with derivatives in ``x`` only: ``v`` (the order) is refused in both modes."""
    refuse = _no_derivative(name)
    return defprim(impl, (refuse, lambda g, ans, v, x: unbroadcast(g * d(ans, v, x), x.shape)),
                   jvp=(refuse, lambda t, ans, v, x: t * d(ans, v, x)), name=f"scipy.special.{name}",
                   batch=batch_elementwise, batched_vjp=True)


iv = _bessel(sc.iv, "iv", _d_iv)
ive = _bessel(sc.ive, "ive", _d_ive)
jv = _bessel(sc.jv, "jv", _d_jv)
kv = _bessel(sc.kv, "kv", _d_kv)
kve = _bessel(sc.kve, "kve", _d_kve)
yv = _bessel(sc.yv, "yv", _d_yv)


# --- the rest of scipy.special with closed-form derivatives (docs/scipy.md) ----------------------
def _in_last(impl, name, d, arity):
    """``f(p_1, ..., x)`` differentiable in its last argument only, ``d(ans, p_1, ..., x)`` its
    derivative there; the other arguments (orders, integer counts, shape parameters) are refused in
    both modes rather than given a silent zero."""
    refuse = _no_derivative(name)
    if arity == 2:
        vjp = (refuse, lambda g, ans, a, x: unbroadcast(g * d(ans, a, x), x.shape))
        jvp = (refuse, lambda t, ans, a, x: t * d(ans, a, x))
    elif arity == 3:
        vjp = (refuse, refuse, lambda g, ans, a, b, x: unbroadcast(g * d(ans, a, b, x), x.shape))
        jvp = (refuse, refuse, lambda t, ans, a, b, x: t * d(ans, a, b, x))
    else:
        vjp = (refuse, refuse, refuse, lambda g, ans, a, b, c, x: unbroadcast(g * d(ans, a, b, c, x), x.shape))
        jvp = (refuse, refuse, refuse, lambda t, ans, a, b, c, x: t * d(ans, a, b, c, x))
    return defprim(impl, vjp, jvp=jvp, name=f"scipy.special.{name}", batch=batch_elementwise)


def _both(impl, name, da, db):
    """``f(a, b)`` differentiable in both arguments; ``da(ans, a, b)`` and ``db(ans, a, b)``."""
    return defprim(impl, (lambda g, ans, a, b: unbroadcast(g * da(ans, a, b), a.shape),
                          lambda g, ans, a, b: unbroadcast(g * db(ans, a, b), b.shape)),
                   jvp=(lambda t, ans, a, b: t * da(ans, a, b), lambda t, ans, a, b: t * db(ans, a, b)),
                   name=f"scipy.special.{name}", batch=batch_elementwise)


_LN10, _LN2, _DEG = np.log(10.0), np.log(2.0), np.pi / 180

# Bessel functions of integer order and their scaled forms
j0 = defunary(sc.j0, lambda g, ans, x: -g * j1(x), name="scipy.special.j0")
j1 = defunary(sc.j1, lambda g, ans, x: g * 0.5 * (j0(x) - jv(2, x)), name="scipy.special.j1")
y0 = defunary(sc.y0, lambda g, ans, x: -g * y1(x), name="scipy.special.y0")
y1 = defunary(sc.y1, lambda g, ans, x: g * 0.5 * (y0(x) - yv(2, x)), name="scipy.special.y1")
k0 = defunary(sc.k0, lambda g, ans, x: -g * k1(x), name="scipy.special.k0")
k1 = defunary(sc.k1, lambda g, ans, x: -g * 0.5 * (k0(x) + kv(2, x)), name="scipy.special.k1")
k0e = defunary(sc.k0e, lambda g, ans, x: g * (ans - k1e(x)), name="scipy.special.k0e")
k1e = defunary(sc.k1e, lambda g, ans, x: g * (ans - 0.5 * (k0e(x) + kve(2, x))), name="scipy.special.k1e")
jn, yn = jv, yv   # SciPy's aliases for integer orders
kn = _in_last(sc.kn, "kn", lambda ans, n, x: -0.5 * (kn(n - 1, x) + kn(n + 1, x)), 2)
hankel1 = _in_last(sc.hankel1, "hankel1", lambda ans, v, x: 0.5 * (hankel1(v - 1, x) - hankel1(v + 1, x)), 2)
hankel2 = _in_last(sc.hankel2, "hankel2", lambda ans, v, x: 0.5 * (hankel2(v - 1, x) - hankel2(v + 1, x)), 2)


def _struve_term(v, x):
    return (x / 2) ** v / (_SQRT_PI * gamma(v + 1.5))


struve = _in_last(sc.struve, "struve",
                  lambda ans, v, x: 0.5 * (struve(v - 1, x) - struve(v + 1, x) + _struve_term(v, x)), 2)
modstruve = _in_last(sc.modstruve, "modstruve",
                     lambda ans, v, x: 0.5 * (modstruve(v - 1, x) + modstruve(v + 1, x) + _struve_term(v, x)), 2)


# derivatives of Bessel functions: d/dz of the n-th derivative is the (n+1)-th
def _derivative_of(fn, name):
    def impl(v, z, n):
        return fn(v, z, n)

    prim = defprim(impl, (_no_derivative(name), lambda g, ans, v, z, n: unbroadcast(g * prim(v, z, n=n + 1), z.shape)),
                   jvp=(_no_derivative(name), lambda t, ans, v, z, n: t * prim(v, z, n=n + 1)),
                   name=f"scipy.special.{name}", batch=batch_elementwise)

    def public(v, z, n=1):
        if type(v) is not Tracer and type(z) is not Tracer:
            return fn(v, z, n)
        return prim(v, z, n=int(n))

    public.__name__ = name
    public.__doc__ = f"``scipy.special.{name}(v, z, n=1)``: differentiable in ``z``."
    return public


ivp, jvp, kvp, yvp = (_derivative_of(getattr(sc, n), n) for n in ("ivp", "jvp", "kvp", "yvp"))
h1vp, h2vp = _derivative_of(sc.h1vp, "h1vp"), _derivative_of(sc.h2vp, "h2vp")


# spherical Bessel functions: d/dz f_n = (n f_{n-1} -+ (n + 1) f_{n+1}) / (2n + 1), for f and f'
_SPHERICAL = {"jn": (1, -1), "yn": (1, -1), "in": (1, 1), "kn": (-1, -1)}


def _spherical_impl(n, z, kind, derivative):
    return getattr(sc, "spherical_" + kind)(n, z, derivative)


def _d_spherical(n, z, kind, derivative):
    lower, upper = _SPHERICAL[kind]
    below = _spherical(F.maximum(n - 1, 0), z, kind=kind, derivative=derivative)
    above = _spherical(n + 1, z, kind=kind, derivative=derivative)
    return (lower * n * below + upper * (n + 1) * above) / (2 * n + 1)


_spherical = defprim(_spherical_impl,
                     (_no_derivative("spherical_*n"),
                      lambda g, ans, n, z, kind, derivative: unbroadcast(g * _d_spherical(n, z, kind, derivative), z.shape)),
                     jvp=(_no_derivative("spherical_*n"),
                          lambda t, ans, n, z, kind, derivative: t * _d_spherical(n, z, kind, derivative)),
                     name="scipy.special.spherical_bessel", batch=batch_elementwise)


def _spherical_function(kind):
    def public(n, z, derivative=False):
        if type(n) is not Tracer and type(z) is not Tracer:
            return getattr(sc, "spherical_" + kind)(n, z, derivative)
        return _spherical(n if type(n) is Tracer else np.asarray(n), z, kind=kind, derivative=bool(derivative))

    public.__name__ = "spherical_" + kind
    public.__doc__ = f"``scipy.special.spherical_{kind}(n, z, derivative=False)``: differentiable in ``z``."
    return public


spherical_jn, spherical_yn, spherical_in, spherical_kn = (_spherical_function(k) for k in ("jn", "yn", "in", "kn"))

# exponential and trigonometric variants
exp2 = defunary(sc.exp2, lambda g, ans, x: g * ans * _LN2, name="scipy.special.exp2")
exp10 = defunary(sc.exp10, lambda g, ans, x: g * ans * _LN10, name="scipy.special.exp10")
expm1 = defunary(sc.expm1, lambda g, ans, x: g * (ans + 1), name="scipy.special.expm1")
log1p = defunary(sc.log1p, lambda g, ans, x: g / (1 + x), name="scipy.special.log1p")
cbrt = defunary(sc.cbrt, lambda g, ans, x: g / (3 * ans * ans), name="scipy.special.cbrt")
cosm1 = defunary(sc.cosm1, lambda g, ans, x: -g * E.sin(x), name="scipy.special.cosm1")
sindg = defunary(sc.sindg, lambda g, ans, x: g * _DEG * cosdg(x), name="scipy.special.sindg")
cosdg = defunary(sc.cosdg, lambda g, ans, x: -g * _DEG * sindg(x), name="scipy.special.cosdg")
tandg = defunary(sc.tandg, lambda g, ans, x: g * _DEG * (1 + ans * ans), name="scipy.special.tandg")
cotdg = defunary(sc.cotdg, lambda g, ans, x: -g * _DEG * (1 + ans * ans), name="scipy.special.cotdg")
powm1 = _both(sc.powm1, "powm1", lambda ans, x, y: y * (ans + 1) / x, lambda ans, x, y: (ans + 1) * E.log(x))
radian = defprim(sc.radian, (lambda g, ans, d, m, s: unbroadcast(g * _DEG, d.shape),
                             lambda g, ans, d, m, s: unbroadcast(g * (_DEG / 60), m.shape),
                             lambda g, ans, d, m, s: unbroadcast(g * (_DEG / 3600), s.shape)),
                 jvp=(lambda t, ans, d, m, s: t * _DEG, lambda t, ans, d, m, s: t * (_DEG / 60),
                      lambda t, ans, d, m, s: t * (_DEG / 3600)),
                 name="scipy.special.radian", batch=batch_elementwise)

# exponential integrals, error functions, Lambert W, Wright omega, Faddeeva
erfi = defunary(sc.erfi, lambda g, ans, x: g * (2 / _SQRT_PI) * E.exp(x * x), name="scipy.special.erfi")
exp1 = defunary(sc.exp1, lambda g, ans, x: -g * E.exp(-x) / x, name="scipy.special.exp1")
expi = defunary(sc.expi, lambda g, ans, x: g * E.exp(x) / x, name="scipy.special.expi")
expn = _in_last(sc.expn, "expn", lambda ans, n, x: F.where(
    _nonzero(n), -expn(F.maximum(n - 1, 0), x), -E.exp(-x) * (x + 1) / (x * x)), 2)
spence = defunary(sc.spence, lambda g, ans, x: g * E.log(x) / (1 - x), name="scipy.special.spence")
wrightomega = defunary(sc.wrightomega, lambda g, ans, x: g * ans / (1 + ans), name="scipy.special.wrightomega")
wofz = defunary(sc.wofz, lambda g, ans, x: g * (2j / _SQRT_PI - 2 * x * ans), name="scipy.special.wofz")
ndtri_exp = defunary(sc.ndtri_exp, lambda g, ans, x: g * _SQRT_2PI * E.exp(x + 0.5 * ans * ans),
                     name="scipy.special.ndtri_exp")
loggamma = defunary(sc.loggamma, lambda g, ans, x: g * digamma(x), name="scipy.special.loggamma")
_lambertw = defunary(lambda z, k, tol: sc.lambertw(z, k, tol),
                     lambda g, ans, z, k, tol: g / ((1 + ans) * E.exp(ans)), name="scipy.special.lambertw")


def lambertw(z, k=0, tol=1e-8):
    """``scipy.special.lambertw``: ``W'(z) = 1 / ((1 + W) exp(W))`` on every branch ``k``."""
    if type(z) is not Tracer:
        return sc.lambertw(z, k, tol)
    return _lambertw(z, k=int(k), tol=tol)


_zeta_q = _in_last(lambda x, q: sc.zeta(x, q), "zeta", lambda ans, x, q: -x * _zeta_q(x + 1, q), 2)


def zeta(x, q=None, out=None):
    """``scipy.special.zeta``: the Hurwitz zeta function is differentiable in ``q``
    (``-x zeta(x + 1, q)``); its derivative in ``x`` has no closed form and is refused."""
    if type(x) is not Tracer and type(q) is not Tracer:
        return sc.zeta(x, q, out=out)
    if type(x) is Tracer:
        raise NoDerivativeError("the derivative of scipy.special.zeta with respect to x (no closed form)")
    return _zeta_q(np.asarray(x), q)


# hypergeometric functions: derivatives in the variable (the parameters are refused)
hyp0f1 = _in_last(sc.hyp0f1, "hyp0f1", lambda ans, v, x: hyp0f1(v + 1, x) / v, 2)
hyp1f1 = _in_last(sc.hyp1f1, "hyp1f1", lambda ans, a, b, x: a / b * hyp1f1(a + 1, b + 1, x), 3)
hyperu = _in_last(sc.hyperu, "hyperu", lambda ans, a, b, x: -a * hyperu(a + 1, b + 1, x), 3)
hyp2f1 = _in_last(sc.hyp2f1, "hyp2f1", lambda ans, a, b, c, x: a * b / c * hyp2f1(a + 1, b + 1, c + 1, x), 4)

# complete and incomplete elliptic integrals (in the parameter m, or in the amplitude phi)
ellipk = defunary(sc.ellipk, lambda g, ans, m: g * (ellipe(m) - (1 - m) * ans) / (2 * m * (1 - m)),
                  name="scipy.special.ellipk")
ellipe = defunary(sc.ellipe, lambda g, ans, m: g * (ans - ellipk(m)) / (2 * m), name="scipy.special.ellipe")
ellipkm1 = defunary(sc.ellipkm1, lambda g, ans, p: -g * (ellipe(1 - p) - p * ans) / (2 * (1 - p) * p),
                    name="scipy.special.ellipkm1")


def _amplitude_only(impl, name, d, label=None):
    refuse = _no_derivative(name)
    return defprim(impl, (lambda g, ans, phi, m: unbroadcast(g * d(phi, m), phi.shape), refuse),
                   jvp=(lambda t, ans, phi, m: t * d(phi, m), refuse), name=f"scipy.special.{label or name}",
                   batch=batch_elementwise)


ellipkinc = _amplitude_only(sc.ellipkinc, "ellipkinc", lambda phi, m: 1 / E.sqrt(1 - m * E.sin(phi) ** 2))
ellipeinc = _amplitude_only(sc.ellipeinc, "ellipeinc", lambda phi, m: E.sqrt(1 - m * E.sin(phi) ** 2))

# functions of two arguments, both differentiable
poch = _both(sc.poch, "poch", lambda ans, z, m: ans * (digamma(z + m) - digamma(z)),
             lambda ans, z, m: ans * digamma(z + m))
binom = _both(sc.binom, "binom", lambda ans, n, k: ans * (digamma(n + 1) - digamma(n - k + 1)),
              lambda ans, n, k: ans * (digamma(n - k + 1) - digamma(k + 1)))
rel_entr = _both(sc.rel_entr, "rel_entr", lambda ans, x, y: E.log(x / y) + 1, lambda ans, x, y: -x / y)
kl_div = _both(sc.kl_div, "kl_div", lambda ans, x, y: E.log(x / y), lambda ans, x, y: 1 - x / y)
owens_t = _both(sc.owens_t, "owens_t",
                lambda ans, h, a: -E.exp(-0.5 * h * h) / (2 * _SQRT_2PI) * erf(a * h / np.sqrt(2)),
                lambda ans, h, a: E.exp(-0.5 * h * h * (1 + a * a)) / (2 * np.pi * (1 + a * a)))


@elementwise_constant
def _inside_delta(delta, r):
    """Where Huber's loss is quadratic: ``|r| <= delta``."""
    return np.abs(r) <= delta


huber = _both(sc.huber, "huber", lambda ans, delta, r: F.where(_inside_delta(delta, r), 0.0, F.abs(r) - delta),
              lambda ans, delta, r: F.where(_inside_delta(delta, r), r, delta * F.sign(r)))
pseudo_huber = _both(sc.pseudo_huber, "pseudo_huber",
                     lambda ans, delta, r: 2 * ans / delta - r * r / (delta * E.sqrt(1 + (r / delta) ** 2)),
                     lambda ans, delta, r: r / E.sqrt(1 + (r / delta) ** 2))

# Box-Cox transforms: derivatives in the data (lambda is refused)
boxcox = _in_last(lambda lmbda, x: sc.boxcox(x, lmbda), "boxcox", lambda ans, lmbda, x: x ** (lmbda - 1), 2)
boxcox1p = _in_last(lambda lmbda, x: sc.boxcox1p(x, lmbda), "boxcox1p",
                    lambda ans, lmbda, x: (1 + x) ** (lmbda - 1), 2)
inv_boxcox = _in_last(lambda lmbda, y: sc.inv_boxcox(y, lmbda), "inv_boxcox",
                      lambda ans, lmbda, y: ans ** (1 - lmbda), 2)
inv_boxcox1p = _in_last(lambda lmbda, y: sc.inv_boxcox1p(y, lmbda), "inv_boxcox1p",
                        lambda ans, lmbda, y: (ans + 1) ** (1 - lmbda), 2)
# SciPy's order is (x, lmbda); the primitives take lmbda first so the data is the last argument
_boxcox_prims = {"boxcox": boxcox, "boxcox1p": boxcox1p, "inv_boxcox": inv_boxcox, "inv_boxcox1p": inv_boxcox1p}


def _data_first(name):
    prim = _boxcox_prims[name]

    def public(x, lmbda):
        if type(x) is not Tracer and type(lmbda) is not Tracer:
            return getattr(sc, name)(x, lmbda)
        return prim(lmbda, x)

    public.__name__ = name
    public.__doc__ = f"``scipy.special.{name}(x, lmbda)``: differentiable in ``x``."
    return public


boxcox, boxcox1p, inv_boxcox, inv_boxcox1p = (_data_first(n) for n in ("boxcox", "boxcox1p", "inv_boxcox",
                                                                        "inv_boxcox1p"))


# functions with several outputs: one primitive per output
def _output(fn, k, name, rule):
    return defunary(lambda x: fn(x)[k], rule, name=f"scipy.special.{name}[{k}]")


_si = _output(sc.sici, 0, "sici", lambda g, ans, x: g * E.sin(x) / x)
_ci = _output(sc.sici, 1, "sici", lambda g, ans, x: g * E.cos(x) / x)
_fresnel_s = _output(sc.fresnel, 0, "fresnel", lambda g, ans, x: g * E.sin(0.5 * np.pi * x * x))
_fresnel_c = _output(sc.fresnel, 1, "fresnel", lambda g, ans, x: g * E.cos(0.5 * np.pi * x * x))
_ai = _output(sc.airy, 0, "airy", lambda g, ans, x: g * _aip(x))
_aip = _output(sc.airy, 1, "airy", lambda g, ans, x: g * x * _ai(x))
_bi = _output(sc.airy, 2, "airy", lambda g, ans, x: g * _bip(x))
_bip = _output(sc.airy, 3, "airy", lambda g, ans, x: g * x * _bi(x))
_itairy = [_output(sc.itairy, 0, "itairy", lambda g, ans, x: g * _ai(x)),
           _output(sc.itairy, 1, "itairy", lambda g, ans, x: g * _bi(x)),
           _output(sc.itairy, 2, "itairy", lambda g, ans, x: g * _ai(-x)),
           _output(sc.itairy, 3, "itairy", lambda g, ans, x: g * _bi(-x))]
_iti0k0 = [_output(sc.iti0k0, 0, "iti0k0", lambda g, ans, x: g * i0(x)),
           _output(sc.iti0k0, 1, "iti0k0", lambda g, ans, x: g * k0(x))]
_it2i0k0 = [_output(sc.it2i0k0, 0, "it2i0k0", lambda g, ans, x: g * (i0(x) - 1) / x),
            _output(sc.it2i0k0, 1, "it2i0k0", lambda g, ans, x: -g * k0(x) / x)]
_itj0y0 = [_output(sc.itj0y0, 0, "itj0y0", lambda g, ans, x: g * j0(x)),
           _output(sc.itj0y0, 1, "itj0y0", lambda g, ans, x: g * y0(x))]
_it2j0y0 = [_output(sc.it2j0y0, 0, "it2j0y0", lambda g, ans, x: g * (1 - j0(x)) / x),
            _output(sc.it2j0y0, 1, "it2j0y0", lambda g, ans, x: -g * y0(x) / x)]
itstruve0 = defunary(sc.itstruve0, lambda g, ans, x: g * struve(0, x), name="scipy.special.itstruve0")
it2struve0 = defunary(sc.it2struve0, lambda g, ans, x: -g * struve(0, x) / x, name="scipy.special.it2struve0")
itmodstruve0 = defunary(sc.itmodstruve0, lambda g, ans, x: g * modstruve(0, x), name="scipy.special.itmodstruve0")


def _several(name, prims):
    def public(x):
        if type(x) is not Tracer:
            return getattr(sc, name)(x)
        return tuple(p(x) for p in prims)

    public.__name__ = name
    public.__doc__ = f"``scipy.special.{name}``: each output differentiable (one primitive per output)."
    return public


sici = _several("sici", [_si, _ci])
fresnel = _several("fresnel", [_fresnel_s, _fresnel_c])
airy = _several("airy", [_ai, _aip, _bi, _bip])
itairy = _several("itairy", _itairy)
iti0k0 = _several("iti0k0", _iti0k0)
it2i0k0 = _several("it2i0k0", _it2i0k0)
itj0y0 = _several("itj0y0", _itj0y0)
it2j0y0 = _several("it2j0y0", _it2j0y0)


# distribution functions of scipy.special (cdfs in the variable, inverses in the probability)
def _chi2_density(v, x):
    return E.exp((v / 2 - 1) * E.log(x) - x / 2 - (v / 2) * _LN2 - gammaln(v / 2))


def _t_density(df, t):
    return E.exp(gammaln((df + 1) / 2) - gammaln(df / 2) - 0.5 * E.log(df * np.pi)
                 - (df + 1) / 2 * E.log1p(t * t / df))


def _f_density(dfn, dfd, x):
    return E.exp(0.5 * dfn * E.log(dfn / dfd) + (dfn / 2 - 1) * E.log(x)
                 - (dfn + dfd) / 2 * E.log1p(dfn * x / dfd) - betaln(dfn / 2, dfd / 2))


def _poisson_mass(k, m):
    return E.exp(xlogy(F.floor(k), m) - m - gammaln(F.floor(k) + 1))


def _binomial_density(k, n, p):   # d/dp bdtr(k, n, p) = -n C(n-1, k) p^k (1-p)^(n-1-k)
    k = F.floor(k)
    return n * E.exp(gammaln(n) - gammaln(k + 1) - gammaln(n - k) + xlogy(k, p) + xlog1py(n - 1 - k, -p))


def _negbin_density(k, n, p):     # d/dp nbdtr(k, n, p) = p^(n-1) (1-p)^k / B(n, k+1)
    k = F.floor(k)
    return E.exp(xlogy(n - 1, p) + xlog1py(k, -p) - betaln(n, k + 1))


chdtr = _in_last(sc.chdtr, "chdtr", lambda ans, v, x: _chi2_density(v, x), 2)
chdtrc = _in_last(sc.chdtrc, "chdtrc", lambda ans, v, x: -_chi2_density(v, x), 2)
chdtri = _in_last(sc.chdtri, "chdtri", lambda ans, v, p: -1 / _chi2_density(v, ans), 2)
stdtr = _in_last(sc.stdtr, "stdtr", lambda ans, df, t: _t_density(df, t), 2)
stdtrit = _in_last(sc.stdtrit, "stdtrit", lambda ans, df, p: 1 / _t_density(df, ans), 2)
fdtr = _in_last(sc.fdtr, "fdtr", lambda ans, dfn, dfd, x: _f_density(dfn, dfd, x), 3)
fdtrc = _in_last(sc.fdtrc, "fdtrc", lambda ans, dfn, dfd, x: -_f_density(dfn, dfd, x), 3)
fdtri = _in_last(sc.fdtri, "fdtri", lambda ans, dfn, dfd, p: 1 / _f_density(dfn, dfd, ans), 3)
gdtr = _in_last(sc.gdtr, "gdtr", lambda ans, a, b, x: a * _gamma_density(b, a * x), 3)
gdtrc = _in_last(sc.gdtrc, "gdtrc", lambda ans, a, b, x: -a * _gamma_density(b, a * x), 3)
pdtr = _in_last(sc.pdtr, "pdtr", lambda ans, k, m: -_poisson_mass(k, m), 2)
pdtrc = _in_last(sc.pdtrc, "pdtrc", lambda ans, k, m: _poisson_mass(k, m), 2)
pdtri = _in_last(sc.pdtri, "pdtri", lambda ans, k, y: -1 / _poisson_mass(k, ans), 2)
bdtr = _in_last(sc.bdtr, "bdtr", lambda ans, k, n, p: -_binomial_density(k, n, p), 3)
bdtrc = _in_last(sc.bdtrc, "bdtrc", lambda ans, k, n, p: _binomial_density(k, n, p), 3)
bdtri = _in_last(sc.bdtri, "bdtri", lambda ans, k, n, y: -1 / _binomial_density(k, n, ans), 3)
nbdtr = _in_last(sc.nbdtr, "nbdtr", lambda ans, k, n, p: _negbin_density(k, n, p), 3)
nbdtrc = _in_last(sc.nbdtrc, "nbdtrc", lambda ans, k, n, p: -_negbin_density(k, n, p), 3)
nbdtri = _in_last(sc.nbdtri, "nbdtri", lambda ans, k, n, y: 1 / _negbin_density(k, n, ans), 3)
gammaincinv = _in_last(sc.gammaincinv, "gammaincinv", lambda ans, a, y: 1 / _gamma_density(a, ans), 2)
gammainccinv = _in_last(sc.gammainccinv, "gammainccinv", lambda ans, a, y: -1 / _gamma_density(a, ans), 2)
betaincc = _partials(sc.betaincc, "betaincc", lambda ans, a, b, x: -_betainc_a(a, b, x),
                     lambda ans, a, b, x: -_betainc_b(a, b, x), lambda ans, a, b, x: -_beta_density(a, b, x),
                     batched_vjp=True)
betaincinv = _in_last(sc.betaincinv, "betaincinv", lambda ans, a, b, y: 1 / _beta_density(a, b, ans), 3)
betainccinv = _in_last(sc.betainccinv, "betainccinv", lambda ans, a, b, y: -1 / _beta_density(a, b, ans), 3)


# orthogonal polynomials: derivatives in x (degree and parameters are constants), each one degree
# lower in a related family; the degree n - 1 is clamped at 0 where the factor vanishes for n = 0
@elementwise_constant
def _positive(n):
    return (np.asarray(n) > 0).astype(float)


def _below(n):
    return F.maximum(n - 1, 0)


eval_gegenbauer = _in_last(sc.eval_gegenbauer, "eval_gegenbauer", lambda ans, n, alpha, x: _positive(n) * 2 * alpha
                           * eval_gegenbauer(_below(n), alpha + 1, x), 3)
eval_legendre = _in_last(sc.eval_legendre, "eval_legendre",
                         lambda ans, n, x: _positive(n) * eval_gegenbauer(_below(n), 1.5, x), 2)
eval_chebyu = _in_last(sc.eval_chebyu, "eval_chebyu",
                       lambda ans, n, x: _positive(n) * 2 * eval_gegenbauer(_below(n), 2.0, x), 2)
eval_chebyt = _in_last(sc.eval_chebyt, "eval_chebyt", lambda ans, n, x: n * eval_chebyu(_below(n), x), 2)
eval_chebys = _in_last(sc.eval_chebys, "eval_chebys",
                       lambda ans, n, x: _positive(n) * eval_gegenbauer(_below(n), 2.0, x / 2), 2)
eval_chebyc = _in_last(sc.eval_chebyc, "eval_chebyc", lambda ans, n, x: n * eval_chebys(_below(n), x), 2)
eval_sh_legendre = _in_last(sc.eval_sh_legendre, "eval_sh_legendre",
                            lambda ans, n, x: _positive(n) * 2 * eval_gegenbauer(_below(n), 1.5, 2 * x - 1), 2)
eval_sh_chebyt = _in_last(sc.eval_sh_chebyt, "eval_sh_chebyt",
                          lambda ans, n, x: 2 * n * eval_chebyu(_below(n), 2 * x - 1), 2)
eval_sh_chebyu = _in_last(sc.eval_sh_chebyu, "eval_sh_chebyu",
                          lambda ans, n, x: _positive(n) * 4 * eval_gegenbauer(_below(n), 2.0, 2 * x - 1), 2)
eval_hermite = _in_last(sc.eval_hermite, "eval_hermite", lambda ans, n, x: 2 * n * eval_hermite(_below(n), x), 2)
eval_hermitenorm = _in_last(sc.eval_hermitenorm, "eval_hermitenorm",
                            lambda ans, n, x: n * eval_hermitenorm(_below(n), x), 2)
eval_genlaguerre = _in_last(sc.eval_genlaguerre, "eval_genlaguerre", lambda ans, n, alpha, x: -_positive(n)
                            * eval_genlaguerre(_below(n), alpha + 1, x), 3)
eval_laguerre = _in_last(sc.eval_laguerre, "eval_laguerre",
                         lambda ans, n, x: -_positive(n) * eval_genlaguerre(_below(n), 1.0, x), 2)
eval_jacobi = _in_last(sc.eval_jacobi, "eval_jacobi", lambda ans, n, a, b, x: _positive(n) * (n + a + b + 1) / 2
                       * eval_jacobi(_below(n), a + 1, b + 1, x), 4)

gdtrix = _in_last(sc.gdtrix, "gdtrix", lambda ans, a, b, p: 1 / (a * _gamma_density(b, a * ans)), 3)


# Kelvin functions: ber + i bei = J0(x e^{3 pi i / 4}) and ker + i kei = K0(x e^{pi i / 4}), so the
# derivatives of berp, beip, kerp, keip follow from Bessel's equation, f'' = -f' / x + i f
ber = defunary(sc.ber, lambda g, ans, x: g * berp(x), name="scipy.special.ber")
bei = defunary(sc.bei, lambda g, ans, x: g * beip(x), name="scipy.special.bei")
ker = defunary(sc.ker, lambda g, ans, x: g * kerp(x), name="scipy.special.ker")
kei = defunary(sc.kei, lambda g, ans, x: g * keip(x), name="scipy.special.kei")
berp = defunary(sc.berp, lambda g, ans, x: g * (-ans / x - bei(x)), name="scipy.special.berp")
beip = defunary(sc.beip, lambda g, ans, x: g * (-ans / x + ber(x)), name="scipy.special.beip")
kerp = defunary(sc.kerp, lambda g, ans, x: g * (-ans / x - kei(x)), name="scipy.special.kerp")
keip = defunary(sc.keip, lambda g, ans, x: g * (-ans / x + ker(x)), name="scipy.special.keip")


def kelvin(x):
    """``scipy.special.kelvin``: ``(Be, Ke, Bep, Kep)``, each ``real + 1j * imag`` of the above."""
    if type(x) is not Tracer:
        return sc.kelvin(x)
    return (ber(x) + 1j * bei(x), ker(x) + 1j * kei(x), berp(x) + 1j * beip(x), kerp(x) + 1j * keip(x))


_shi = _output(sc.shichi, 0, "shichi", lambda g, ans, x: g * E.sinh(x) / x)
_chi = _output(sc.shichi, 1, "shichi", lambda g, ans, x: g * E.cosh(x) / x)
shichi = _several("shichi", [_shi, _chi])


# Jacobi elliptic functions, in the argument u (the parameter m is refused)
def _jacobi_output(k, d):
    return _amplitude_only(lambda u, m: sc.ellipj(u, m)[k], "ellipj", d, label=f"ellipj[{k}]")


_sn = _jacobi_output(0, lambda u, m: _cn(u, m) * _dn(u, m))
_cn = _jacobi_output(1, lambda u, m: -_sn(u, m) * _dn(u, m))
_dn = _jacobi_output(2, lambda u, m: -m * _sn(u, m) * _cn(u, m))
_ph = _jacobi_output(3, lambda u, m: _dn(u, m))


def ellipj(u, m):
    """``scipy.special.ellipj``: ``(sn, cn, dn, ph)``, differentiable in ``u``."""
    if type(u) is not Tracer and type(m) is not Tracer:
        return sc.ellipj(u, m)
    return tuple(f(u, m) for f in (_sn, _cn, _dn, _ph))


def nrdtrimn(p, std, x):
    """``scipy.special.nrdtrimn``: the mean, ``x - std * ndtri(p)``; differentiable in all three."""
    if type(p) is not Tracer and type(std) is not Tracer and type(x) is not Tracer:
        return sc.nrdtrimn(p, std, x)
    return x - std * ndtri(p)


def nrdtrisd(mn, p, x):
    """``scipy.special.nrdtrisd``: the standard deviation, ``(x - mn) / ndtri(p)``."""
    if type(mn) is not Tracer and type(p) is not Tracer and type(x) is not Tracer:
        return sc.nrdtrisd(mn, p, x)
    return (x - mn) / ndtri(p)


# exponentially scaled Bessel and Hankel functions: hankel1e = H1 exp(-iz) and hankel2e = H2 exp(iz)
# are holomorphic; jve and yve scale by exp(-|Im z|), which is not, so they take real z only
hankel1e = _in_last(sc.hankel1e, "hankel1e", lambda ans, v, x: 0.5 * (hankel1e(v - 1, x) - hankel1e(v + 1, x))
                    - 1j * ans, 2)
hankel2e = _in_last(sc.hankel2e, "hankel2e", lambda ans, v, x: 0.5 * (hankel2e(v - 1, x) - hankel2e(v + 1, x))
                    + 1j * ans, 2)
_jve = _in_last(sc.jve, "jve", lambda ans, v, x: 0.5 * (_jve(v - 1, x) - _jve(v + 1, x)), 2)
_yve = _in_last(sc.yve, "yve", lambda ans, v, x: 0.5 * (_yve(v - 1, x) - _yve(v + 1, x)), 2)


def _real_argument(name, prim):
    def public(v, z):
        if type(v) is not Tracer and type(z) is not Tracer:
            return getattr(sc, name)(v, z)
        if np.iscomplexobj(unbox(z)):
            raise NoDerivativeError(f"scipy.special.{name} of a complex z (its scaling exp(-|Im z|) is not "
                                    "holomorphic); it is differentiable for real z")
        return prim(v, z)

    public.__name__ = name
    public.__doc__ = f"``scipy.special.{name}(v, z)``: differentiable in real ``z``."
    return public


jve, yve = _real_argument("jve", _jve), _real_argument("yve", _yve)


@elementwise_constant
def _near_zero(x):
    return np.abs(x) < 1e-3


def _d_exprel(g, ans, x):
    """``(exp(x) - exprel(x)) / x``, and its Taylor series ``1/2 + x/3 + x^2/8`` near 0, where the
    quotient cancels (the quotient is evaluated at a safe point there, so no nan reaches a gradient)."""
    small = _near_zero(x)
    safe = F.where(small, 1.0, x)
    return g * F.where(small, 0.5 + x / 3 + x * x / 8, (E.exp(safe) - exprel(safe)) / safe)


exprel = defunary(sc.exprel, _d_exprel, name="scipy.special.exprel")


# --- more closed forms: Carlson's integrals, agm, Lame-free Legendre and Jacobi, noncentral chi2 ----
# Carlson's symmetric elliptic integrals (DLMF 19.18): dRF/dz = -RD(x, y, z) / 6, and RF, RG
# symmetric; dRD/dx = (RD(x, y, z) - RD(y, z, x)) / (2 (z - x)) and dRJ/dx = (RJ - RD(y, z, x)) /
# (2 (p - x)), with the last argument's partial from homogeneity (RD, RJ are of degree -3/2,
# RC of degree -1/2). Those quotients are 0/0 where the two arguments are equal (nan there).
def _rd_first(ans, x, y, z):
    return (ans - elliprd(y, z, x)) / (2 * (z - x))


def _rd_last(ans, x, y, z):
    return (-1.5 * ans - x * _rd_first(ans, x, y, z) - y * _rd_first(ans, y, x, z)) / z


def _rj_first(ans, x, y, z, p):
    return (ans - elliprd(y, z, x)) / (2 * (p - x))


def _rc_second(ans, x, y):
    return (E.sqrt(x) / y - ans) / (2 * (y - x))


elliprf = _partials(sc.elliprf, "elliprf", lambda ans, x, y, z: -elliprd(y, z, x) / 6,
                    lambda ans, x, y, z: -elliprd(z, x, y) / 6, lambda ans, x, y, z: -elliprd(x, y, z) / 6)
elliprd = _partials(sc.elliprd, "elliprd", _rd_first, lambda ans, x, y, z: _rd_first(ans, y, x, z), _rd_last)
elliprg = _partials(sc.elliprg, "elliprg",
                    lambda ans, x, y, z: (3 * elliprf(x, y, z) - x * elliprd(y, z, x)) / 12,
                    lambda ans, x, y, z: (3 * elliprf(x, y, z) - y * elliprd(z, x, y)) / 12,
                    lambda ans, x, y, z: (3 * elliprf(x, y, z) - z * elliprd(x, y, z)) / 12)
elliprj = _partials(sc.elliprj, "elliprj", _rj_first,
                    lambda ans, x, y, z, p: _rj_first(ans, y, z, x, p),
                    lambda ans, x, y, z, p: _rj_first(ans, z, x, y, p),
                    lambda ans, x, y, z, p: (-1.5 * ans - x * _rj_first(ans, x, y, z, p)
                                             - y * _rj_first(ans, y, z, x, p) - z * _rj_first(ans, z, x, y, p)) / p)
elliprc = _partials(sc.elliprc, "elliprc", lambda ans, x, y: (-0.5 * ans - y * _rc_second(ans, x, y)) / x,
                    _rc_second)


def _agm_slope(a, b):
    """d agm(1, t) / dt at t = b / a: agm(1, t) = pi / (2 K(1 - t^2)), and K's derivative."""
    t = b / a
    m = 1 - t * t
    k = ellipk(m)
    dk = (ellipe(m) - (1 - m) * k) / (2 * m * (1 - m))
    return np.pi * t * dk / (k * k)


# agm is homogeneous of degree 1: agm(a, b) = a agm(1, b / a)
agm = _partials(sc.agm, "agm", lambda ans, a, b: ans / a - (b / a) * _agm_slope(a, b),
                lambda ans, a, b: _agm_slope(a, b))

# besselpoly(a, lmb, nu) = int_0^1 x^lmb J_nu(2 a x) dx, and 2 J_nu' = J_(nu-1) - J_(nu+1)
besselpoly = _partials(sc.besselpoly, "besselpoly",
                       lambda ans, a, lmb, nu: besselpoly(a, lmb + 1, nu - 1) - besselpoly(a, lmb + 1, nu + 1),
                       None, None)

# associated Legendre of degree v and order m, in x: (x^2 - 1) P' = v x P_v - (v + m) P_(v-1)
lpmv = _partials(sc.lpmv, "lpmv", None, None,
                 lambda ans, m, v, x: (v * x * ans - (v + m) * lpmv(m, v - 1, x)) / (x * x - 1))

# shifted Jacobi G_n^(p,q)(x) = P_n^(p-q, q-1)(2x - 1) / binom(2n + p - 1, n), and Jacobi's derivative
eval_sh_jacobi = _partials(sc.eval_sh_jacobi, "eval_sh_jacobi", None, None, None,
                           lambda ans, n, p, q, x: _positive(n) * (n + p) / binom(2 * n + p - 1, n)
                           * eval_jacobi(_below(n), p - q + 1, q, 2 * x - 1))


def assoc_laguerre(x, n, k=0.0):
    """``scipy.special.assoc_laguerre``: ``eval_genlaguerre(n, k, x)``, differentiable in ``x``."""
    return eval_genlaguerre(n, k, x)


# the noncentral chi-square cdf: d/dx is the density, 1/2 e^(-(x+nc)/2) (x/nc)^((df-2)/4)
# I_((df-2)/2)(sqrt(nc x)) (scaled Bessel for range); d/dnc = (chndtr(x, df + 2, nc) - chndtr) / 2, the
# Poisson mixture's shift; the derivative in df has no closed form
def _ncx2_density(x, df, nc):
    central = _nonzero(nc)
    safe = F.where(central, nc, 1.0)
    noncentral = (0.5 * E.exp(-0.5 * (E.sqrt(x) - E.sqrt(safe)) ** 2) * (x / safe) ** ((df - 2) / 4)
                  * ive((df - 2) / 2, E.sqrt(safe * x)))
    return F.where(central, noncentral, _chi2_density(df, x))


chndtr = _partials(sc.chndtr, "chndtr", lambda ans, x, df, nc: _ncx2_density(x, df, nc), None,
                   lambda ans, x, df, nc: 0.5 * (chndtr(x, df + 2, nc) - ans))
chndtrix = _partials(sc.chndtrix, "chndtrix", lambda ans, p, df, nc: 1 / _ncx2_density(ans, df, nc), None,
                     lambda ans, p, df, nc: -0.5 * (chndtr(ans, df + 2, nc) - p) / _ncx2_density(ans, df, nc))


# the noncentral F cdf, a Poisson(nc / 2) mixture of incomplete betas I_x(dfn/2 + j, dfd/2) at
# x = dfn f / (dfn f + dfd): d/df is the mixture of the beta densities (summed to where the Poisson
# weights are below rounding), d/dnc the mixture's shift, (ncfdtr(dfn + 2, ..., f dfn / (dfn + 2)) -
# ncfdtr) / 2; the degrees of freedom have no closed form
def _ncf_terms(nc):
    """How many Poisson terms: the mean nc/2 plus 12 standard deviations plus 40 (500 under jit, whose
    program must serve any nc up to about 300)."""
    if staged(nc):
        return 500
    lam = float(np.max(np.asarray(unbox(nc), dtype=float) / 2, initial=0.0))
    return int(lam + 12 * np.sqrt(lam) + 40)


def _ncf_density(dfn, dfd, nc, f):
    j = np.arange(_ncf_terms(nc), dtype=float)
    lam, a, b = F.expand_dims(nc / 2, -1), F.expand_dims(dfn / 2, -1), dfd / 2
    x = dfn * f / (dfn * f + dfd)
    slope = dfn * dfd / (dfn * f + dfd) ** 2
    weights = E.exp(xlogy(j, lam) - lam - sc.gammaln(j + 1))
    xj, bj = F.expand_dims(x, -1), F.expand_dims(b, -1)
    densities = E.exp(xlogy(a + j - 1, xj) + xlog1py(bj - 1, -xj) - betaln(a + j, bj))
    return F.sum(weights * densities, axis=-1) * slope


def _ncf_shift(dfn, dfd, nc, f, cdf):
    return 0.5 * (ncfdtr(dfn + 2, dfd, nc, f * dfn / (dfn + 2)) - cdf)


ncfdtr = _partials(sc.ncfdtr, "ncfdtr", None, None, lambda ans, dfn, dfd, nc, f: _ncf_shift(dfn, dfd, nc, f, ans),
                   lambda ans, dfn, dfd, nc, f: _ncf_density(dfn, dfd, nc, f))
ncfdtri = _partials(sc.ncfdtri, "ncfdtri", None, None,
                    lambda ans, dfn, dfd, nc, p: -_ncf_shift(dfn, dfd, nc, ans, p) / _ncf_density(dfn, dfd, nc, ans),
                    lambda ans, dfn, dfd, nc, p: 1 / _ncf_density(dfn, dfd, nc, ans))


# Tukey's lambda cdf p = F(x): its quantile Q(p) = (p^l - (1-p)^l) / l (log(p / (1 - p)) at l = 0)
# inverts it, so dF/dx = 1 / Q_p and dF/dl = -Q_l / Q_p; outside the support (|x| > 1/l) F is flat
@elementwise_constant
def _inside_unit(p):
    return (p > 0) & (p < 1)


def _tukey_slope(p, lmbda):
    return p ** (lmbda - 1) + (1 - p) ** (lmbda - 1)


def _tukey_dx(ans, x, lmbda):
    inside = _inside_unit(ans)
    p = F.where(inside, ans, 0.5)
    return F.where(inside, 1 / _tukey_slope(p, lmbda), 0.0)


def _tukey_dlambda(ans, x, lmbda):
    inside = _inside_unit(ans)
    p = F.where(inside, ans, 0.5)
    zero = _is_zero(lmbda)
    l = F.where(zero, 1.0, lmbda)
    lp, lq = E.log(p), E.log1p(-p)
    dq = (l * (p ** l * lp - (1 - p) ** l * lq) - (p ** l - (1 - p) ** l)) / (l * l)
    dq = F.where(zero, 0.5 * (lp * lp - lq * lq), dq)
    return F.where(inside, -dq / _tukey_slope(p, lmbda), 0.0)


@elementwise_constant
def _is_zero(x):
    return np.equal(x, 0)


tklmbda = _partials(sc.tklmbda, "tklmbda", _tukey_dx, _tukey_dlambda)


def voigt_profile(x, sigma, gamma):
    """``scipy.special.voigt_profile``: ``Re w((x + i gamma) / (sigma sqrt 2)) / (sigma sqrt(2 pi))``
    with Faddeeva's ``wofz``, differentiable in all three (``sigma > 0``: at ``sigma = 0`` it is the
    Lorentzian, whose formula is another)."""
    if type(x) is not Tracer and type(sigma) is not Tracer and type(gamma) is not Tracer:
        return sc.voigt_profile(x, sigma, gamma)
    if not staged(sigma) and np.any(np.asarray(unbox(sigma)) <= 0):
        raise NotImplementedError("wengert.scipy.special.voigt_profile: derivatives need sigma > 0 (at sigma = 0 "
                                  "it is the Lorentzian gamma / (pi (x^2 + gamma^2)); write that)")
    scale = sigma * np.sqrt(2.0)
    return F.real(wofz((x + 1j * gamma) / scale)) / (scale * _SQRT_PI)


def diric(x, n):
    """``scipy.special.diric``: ``sin(n x / 2) / (n sin(x / 2))``, and near its removable poles
    ``x = 2 pi k`` (``|n (x - 2 pi k)| < 1e-3``, which holds SciPy's own mask) the Taylor series
    ``+-(1 - (n^2 - 1) d^2 / 24 + (n^2 - 1) (3 n^2 - 7) d^4 / 5760)``, exact to rounding there, so
    each derivative is finite and accurate where the quotient would cancel; differentiable in ``x``
    (``n`` is a positive integer)."""
    if type(x) is not Tracer and type(n) is not Tracer:
        return sc.diric(x, n)
    if type(n) is Tracer:
        raise NoDerivativeError("the derivative of scipy.special.diric in n (a positive integer)")
    n = np.asarray(n)
    if np.any((n <= 0) | (n != np.floor(n))):
        raise ValueError("scipy.special.diric: n must be a positive integer")
    turns = _nearest_turn(x)
    offset = x - 2 * np.pi * turns
    at_pole = _near_pole(x, n)
    safe = F.where(at_pole, 1.0, x)
    square = offset * offset
    near = (-1.0) ** (turns * (n - 1)) * (1 - (n * n - 1) * square / 24
                                          + (n * n - 1) * (3 * n * n - 7) * square * square / 5760)
    return F.where(at_pole, near, E.sin(n * safe / 2) / (n * E.sin(safe / 2)))


@elementwise_constant
def _near_pole(x, n):
    x = np.asarray(x)
    return (np.abs(n * (x - 2 * np.pi * np.round(x / (2 * np.pi)))) < 1e-3) | (np.abs(np.sin(x / 2)) < 1e-7)


@elementwise_constant
def _nearest_turn(x):
    return np.round(np.asarray(x) / (2 * np.pi))


# the scaled Airy functions: eAi = Ai exp(2/3 x^(3/2)) (x > 0), eBi = Bi exp(-|Re 2/3 x^(3/2)|), so
# d eAi = eAi' + sqrt(x) eAi, d eAi' = x eAi + sqrt(x) eAi', and eBi's scale is 1 where x < 0
def _root_positive(x):
    return E.sqrt(F.maximum(x, 0.0))


_eai = _output(sc.airye, 0, "airye", lambda g, ans, x: g * (_eaip(x) + E.sqrt(x) * ans))
_eaip = _output(sc.airye, 1, "airye", lambda g, ans, x: g * (x * _eai(x) + E.sqrt(x) * ans))
_ebi = _output(sc.airye, 2, "airye", lambda g, ans, x: g * (_ebip(x) - _root_positive(x) * ans))
_ebip = _output(sc.airye, 3, "airye", lambda g, ans, x: g * (x * _ebi(x) - _root_positive(x) * ans))
airye = _several("airye", [_eai, _eaip, _ebi, _ebip])

# the modified Fresnel integrals F+-(x) = int_x^inf exp(+-i t^2) dt and K+-(x) = exp(-+i (x^2 + pi/4))
# F+-(x) / sqrt(pi): dF+- = -exp(+-i x^2), dK+- = -+2 i x K+- - exp(-+i pi/4) / sqrt(pi)
_fresnel_plus = _output(sc.modfresnelp, 0, "modfresnelp", lambda g, ans, x: -g * E.exp(1j * x * x))
_k_plus = _output(sc.modfresnelp, 1, "modfresnelp",
                  lambda g, ans, x: g * (-2j * x * ans - np.exp(-0.25j * np.pi) / _SQRT_PI))
_fresnel_minus = _output(sc.modfresnelm, 0, "modfresnelm", lambda g, ans, x: -g * E.exp(-1j * x * x))
_k_minus = _output(sc.modfresnelm, 1, "modfresnelm",
                   lambda g, ans, x: g * (2j * x * ans - np.exp(0.25j * np.pi) / _SQRT_PI))
modfresnelp = _several("modfresnelp", [_fresnel_plus, _k_plus])
modfresnelm = _several("modfresnelm", [_fresnel_minus, _k_minus])

__all__ += ["ncfdtr", "ncfdtri", "elliprf", "elliprd", "elliprg", "elliprj", "elliprc", "agm", "besselpoly", "lpmv", "eval_sh_jacobi",
            "assoc_laguerre", "chndtr", "chndtrix", "tklmbda", "voigt_profile", "diric", "airye", "modfresnelp",
            "modfresnelm"]


# SciPy 1.15's Legendre functions and spherical harmonics compute their own derivatives in the
# variable (``diff_n`` up to 2): the value's rule is the next derivative, so they differentiate to
# second order; a third derivative raises. Degrees and orders are integers (refused).
def _variable_derivative(fn, name, arity):
    """One primitive ``prim(*integers, variable, order=k, **options)``: SciPy's ``k``-th derivative."""
    def impl(*args, order, **options):
        return fn(*args, diff_n=order, **options)[order]

    def next_derivative(i, args, order, options):
        if i < arity - 1:
            raise NoDerivativeError(f"the derivative of scipy.special.{name} in an integer degree or order")
        if order >= 2:
            raise NoDerivativeError(f"scipy.special.{name}", f"scipy.special.{name}: SciPy computes derivatives "
                                    "up to the second (diff_n <= 2), so a third is not available")
        return prim(*args, order=order + 1, **options)

    def vjp(i):
        return lambda g, ans, *args, order, **options: unbroadcast(
            g * next_derivative(i, args, order, options), args[-1].shape)

    def jvp(i):
        return lambda t, ans, *args, order, **options: t * next_derivative(i, args, order, options)

    prim = defprim(impl, tuple(vjp(i) for i in range(arity)), jvp=tuple(jvp(i) for i in range(arity)),
                   name=f"scipy.special.{name}", batch=batch_elementwise, batched_vjp=True)
    return prim


def _with_derivatives(prim, args, diff_n, **options):
    """SciPy's layout: the value and its ``diff_n`` derivatives stacked on a leading axis."""
    return F.stack([prim(*args, order=k, **options) for k in range(diff_n + 1)])


_legendre_p = _variable_derivative(sc.legendre_p, "legendre_p", 2)
_assoc_legendre_p = _variable_derivative(sc.assoc_legendre_p, "assoc_legendre_p", 3)
_sph_legendre_p = _variable_derivative(sc.sph_legendre_p, "sph_legendre_p", 3)


def legendre_p(n, z, *, diff_n=0):
    """``scipy.special.legendre_p``: differentiable in ``z`` (to second order)."""
    if type(n) is not Tracer and type(z) is not Tracer:
        return sc.legendre_p(n, z, diff_n=diff_n)
    return _with_derivatives(_legendre_p, (n, z), diff_n)


def assoc_legendre_p(n, m, z, *, branch_cut=2, norm=False, diff_n=0):
    """``scipy.special.assoc_legendre_p``: differentiable in ``z`` (to second order)."""
    if not any(type(a) is Tracer for a in (n, m, z)):
        return sc.assoc_legendre_p(n, m, z, branch_cut=branch_cut, norm=norm, diff_n=diff_n)
    return _with_derivatives(_assoc_legendre_p, (n, m, z), diff_n, branch_cut=branch_cut, norm=norm)


def sph_legendre_p(n, m, theta, *, diff_n=0):
    """``scipy.special.sph_legendre_p``: differentiable in ``theta`` (to second order)."""
    if not any(type(a) is Tracer for a in (n, m, theta)):
        return sc.sph_legendre_p(n, m, theta, diff_n=diff_n)
    return _with_derivatives(_sph_legendre_p, (n, m, theta), diff_n)


# sph_harm_y(n, m, theta, phi): SciPy's derivatives come as a gradient (theta, phi) and a Hessian on
# trailing axes; ``index`` names the entry: () the value, (i,) a first derivative, (i, j) a second
def _harmonic_impl(n, m, theta, phi, index):
    out = sc.sph_harm_y(n, m, theta, phi, diff_n=len(index))
    if not index:
        return out if not isinstance(out, tuple) else out[0]
    return out[len(index)][(Ellipsis,) + index]


def _harmonic_rule(variable):
    def step(index):
        if len(index) >= 2:
            raise NoDerivativeError("scipy.special.sph_harm_y", "scipy.special.sph_harm_y: SciPy computes "
                                    "derivatives up to the second (diff_n <= 2), so a third is not available")
        return tuple(sorted(index + (variable,)))

    def vjp(g, ans, n, m, theta, phi, index):
        return unbroadcast(g * _harmonic(n, m, theta, phi, index=step(index)), (theta, phi)[variable].shape)

    def jvp(t, ans, n, m, theta, phi, index):
        return t * _harmonic(n, m, theta, phi, index=step(index))
    return vjp, jvp


_integer_refusal = _no_derivative("sph_harm_y", "the derivative of scipy.special.sph_harm_y in an integer degree "
                                  "or order has no meaning")
_harmonic = defprim(_harmonic_impl, (_integer_refusal, _integer_refusal, _harmonic_rule(0)[0], _harmonic_rule(1)[0]),
                    jvp=(_integer_refusal, _integer_refusal, _harmonic_rule(0)[1], _harmonic_rule(1)[1]),
                    name="scipy.special.sph_harm_y", batch=batch_elementwise, batched_vjp=True)


def sph_harm_y(n, m, theta, phi, *, diff_n=0):
    """``scipy.special.sph_harm_y``: differentiable in ``theta`` and ``phi`` (to second order); with
    ``diff_n`` the gradient and Hessian come as SciPy lays them out."""
    if not any(type(a) is Tracer for a in (n, m, theta, phi)):
        return sc.sph_harm_y(n, m, theta, phi, diff_n=diff_n)
    value = _harmonic(n, m, theta, phi, index=())
    if diff_n == 0:
        return value
    grad = F.stack([_harmonic(n, m, theta, phi, index=(i,)) for i in (0, 1)], axis=-1)
    if diff_n == 1:
        return value, grad
    hess = F.stack([F.stack([_harmonic(n, m, theta, phi, index=tuple(sorted((i, j)))) for j in (0, 1)], axis=-1)
                    for i in (0, 1)], axis=-2)
    return value, grad, hess


__all__ += ["legendre_p", "assoc_legendre_p", "sph_legendre_p", "sph_harm_y"]


# --- the names of scipy.special that are not differentiable here, and why -----------------------
NOT_DIFFERENTIABLE = {}


def _explain(reason, names):
    for name in names.split():
        NOT_DIFFERENTIABLE[name] = reason


_explain("not a function of arrays: an error class, error-state control, or SciPy's test runner",
         "SpecialFunctionError SpecialFunctionWarning errstate geterr seterr test")
_explain("integer-valued or piecewise constant (combinatorics, rounding, signs): its derivative is zero "
         "or undefined", "comb perm factorial factorial2 factorialk stirling2 bernoulli euler round gammasgn")
_explain("zeros of a function, or quadrature nodes and weights, for an integer count: numbers indexed by "
         "integers, with no real input to differentiate",
         "ai_zeros bi_zeros bei_zeros beip_zeros ber_zeros berp_zeros erf_zeros fresnel_zeros fresnelc_zeros "
         "fresnels_zeros jn_zeros jnjnp_zeros jnp_zeros jnyn_zeros kei_zeros keip_zeros kelvin_zeros "
         "ker_zeros kerp_zeros y0_zeros y1_zeros y1p_zeros yn_zeros ynp_zeros c_roots cg_roots h_roots "
         "he_roots j_roots js_roots l_roots la_roots p_roots ps_roots s_roots t_roots ts_roots u_roots "
         "us_roots roots_chebyc roots_chebys roots_chebyt roots_chebyu roots_gegenbauer roots_genlaguerre "
         "roots_hermite roots_hermitenorm roots_jacobi roots_laguerre roots_legendre roots_sh_chebyt "
         "roots_sh_chebyu roots_sh_jacobi roots_sh_legendre")
_explain("returns a polynomial object (orthopoly1d) for an integer degree, not values: evaluate it with "
         "the differentiable eval_* functions",
         "chebyc chebys chebyt chebyu gegenbauer genlaguerre hermite hermitenorm jacobi laguerre legendre "
         "sh_chebyt sh_chebyu sh_jacobi sh_legendre")
_explain("solves for a shape parameter or a count (df, n, k, a, b) from a probability: its derivative "
         "needs the distribution's derivative in that parameter, which has no closed form",
         "bdtrik bdtrin btdtria btdtrib chdtriv chndtridf chndtrinc fdtridfd gdtria gdtrib nbdtrik nbdtrin "
         "ncfdtridfd ncfdtridfn ncfdtrinc nctdtridf nctdtrinc pdtrik stdtridf")
_explain("a series with no closed-form derivative (in x for zetac; Kolmogorov-Smirnov and Wright's "
         "generalized Bessel function in every argument)",
         "zetac kolmogorov kolmogi smirnov smirnovi wright_bessel log_wright_bessel")
_explain("Mathieu, spheroidal and parabolic cylinder functions: derivatives in the characteristic "
         "parameters have no closed form; the derivative in the variable (SciPy's second output) is "
         "not yet wired",
         "mathieu_a mathieu_b mathieu_cem mathieu_sem mathieu_modcem1 mathieu_modcem2 mathieu_modsem1 "
         "mathieu_modsem2 mathieu_even_coef mathieu_odd_coef obl_ang1 obl_ang1_cv obl_cv obl_cv_seq "
         "obl_rad1 obl_rad1_cv obl_rad2 obl_rad2_cv pro_ang1 pro_ang1_cv pro_cv pro_cv_seq pro_rad1 "
         "pro_rad1_cv pro_rad2 pro_rad2_cv pbdv pbvv pbwa pbdn_seq pbdv_seq pbvv_seq")
_explain("returns the values for all orders up to n at once: not yet differentiable",
         "lqn lqmn riccati_jn riccati_yn assoc_legendre_p_all legendre_p_all sph_harm_y_all "
         "sph_legendre_p_all lmbda")
_explain("not yet: a closed-form derivative exists but is not written (Lame's ellipsoidal harmonics "
         "in s; the noncentral t distribution, whose density is a series and whose identity through "
         "nctdtr itself cancels near t = 0)",
         "ellip_harm ellip_harm_2 ellip_normal nctdtr nctdtrit")
_explain("NumPy's sinc, which SciPy re-exports: use wengert.numpy.sinc", "sinc")

# the integer-valued and piecewise constant ones pass values through (no gradient), as NumPy's
# floor and sign do in wengert.numpy, so code written for autograd's gammasgn keeps running
for _name in ("comb", "perm", "factorial", "factorial2", "factorialk", "stirling2", "round", "gammasgn"):
    if hasattr(sc, _name):
        globals()[_name] = nondiff(getattr(sc, _name))

if hasattr(sc, "softplus"):   # SciPy 1.15 and later
    softplus = defunary(lambda x: sc.softplus(x), lambda g, ans, x: g * expit(x), name="scipy.special.softplus")


# SciPy's own ufuncs on traced values (``scipy.special.gammaln(x)`` in user code) come here too
def _register_scipy_ufuncs():
    for name in __all__:
        original = getattr(sc, name, None)
        if isinstance(original, np.ufunc):
            UFUNCS[original] = globals()[name]


_register_scipy_ufuncs()

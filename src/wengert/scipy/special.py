"""scipy.special with gradients: each function a primitive whose implementation is SciPy's and
whose VJP rule is written with wengert operations (so second and higher derivatives work).

Orders (``n`` of ``polygamma``, ``v`` of the Bessel functions) and the shape parameters of the
incomplete gamma and beta functions have no derivative here: passing a traced value for them
raises ``NoDerivativeError`` rather than giving a silent zero.
"""
from __future__ import annotations

import numpy as np
import scipy.special as sc

from ..core.errors import NoDerivativeError
from ..core.trace import Tracer, unbox
from ..numpy import _functions as F
from ..primitives import elementwise as E
from ..primitives._table import defprim, unbroadcast

__all__ = ["gammaln", "digamma", "psi", "polygamma", "gamma", "rgamma", "beta", "betaln",
           "erf", "erfc", "erfinv", "erfcinv", "ndtr", "ndtri", "log_ndtr", "expit", "logit",
           "log_expit", "logsumexp", "xlogy", "xlog1py", "i0", "i1", "i0e", "i1e", "iv", "ive", "jv",
           "yv", "kv", "kve", "multigammaln", "gammainc", "gammaincc", "betainc", "entr", "softmax",
           "log_softmax", "erfcx", "dawsn"]

_SQRT_PI = np.sqrt(np.pi)
_SQRT_2PI = np.sqrt(2 * np.pi)


def _no_derivative(name):
    def rule(g, ans, *args, **params):
        raise NoDerivativeError(f"the derivative of scipy.special.{name} with respect to this argument")
    return rule


def _nonzero(x):
    """Constant mask: ``x != 0`` on the plain values."""
    return unbox(x) != 0


# --- gamma family --------------------------------------------------------------------------------
gammaln = defprim(sc.gammaln, lambda g, ans, x: g * digamma(x), name="scipy.special.gammaln")
digamma = defprim(sc.digamma, lambda g, ans, x: g * _polygamma(x, n=1), name="scipy.special.digamma")
psi = digamma


def _polygamma_impl(x, n):
    return sc.polygamma(n, x)


_polygamma = defprim(_polygamma_impl, lambda g, ans, x, n: g * _polygamma(x, n=n + 1),
                     name="scipy.special.polygamma")


def polygamma(n, x):
    """``scipy.special.polygamma(n, x)``: differentiable in ``x`` (``n`` is an integer order)."""
    if type(x) is not Tracer and type(n) is not Tracer:
        return sc.polygamma(n, x)
    if type(n) is Tracer:
        raise NoDerivativeError("the derivative of scipy.special.polygamma with respect to n")
    n_arr = np.asarray(n)
    if n_arr.ndim == 0:
        return _polygamma(x, n=int(n_arr))
    # an array of orders: one call per distinct order, selected elementwise
    out = 0.0
    for k in np.unique(n_arr):
        out = F.where(n_arr == k, _polygamma(x, n=int(k)), out)
    return out


gamma = defprim(sc.gamma, lambda g, ans, x: g * ans * digamma(x), name="scipy.special.gamma")
rgamma = defprim(sc.rgamma, lambda g, ans, x: -g * ans * digamma(x), name="scipy.special.rgamma")
beta = defprim(sc.beta, (lambda g, ans, a, b: unbroadcast(g * ans * (digamma(a) - digamma(a + b)), a.shape),
                         lambda g, ans, a, b: unbroadcast(g * ans * (digamma(b) - digamma(a + b)), b.shape)),
               name="scipy.special.beta")
betaln = defprim(sc.betaln, (lambda g, ans, a, b: unbroadcast(g * (digamma(a) - digamma(a + b)), a.shape),
                             lambda g, ans, a, b: unbroadcast(g * (digamma(b) - digamma(a + b)), b.shape)),
                 name="scipy.special.betaln")


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


# incomplete gamma and beta: derivatives in x only
gammainc = defprim(sc.gammainc, (_no_derivative("gammainc"),
                                 lambda g, ans, a, x: unbroadcast(
                                     g * E.exp((a - 1) * E.log(x) - x - gammaln(a)), x.shape)),
                   name="scipy.special.gammainc")
gammaincc = defprim(sc.gammaincc, (_no_derivative("gammaincc"),
                                   lambda g, ans, a, x: unbroadcast(
                                       -g * E.exp((a - 1) * E.log(x) - x - gammaln(a)), x.shape)),
                    name="scipy.special.gammaincc")
betainc = defprim(sc.betainc, (_no_derivative("betainc"), _no_derivative("betainc"),
                               lambda g, ans, a, b, x: unbroadcast(
                                   g * E.exp(xlogy(a - 1, x) + xlog1py(b - 1, -x) - betaln(a, b)),
                                   x.shape)),
                  name="scipy.special.betainc")

# --- error function and the normal distribution ----------------------------------------------------
erf = defprim(sc.erf, lambda g, ans, x: g * (2 / _SQRT_PI) * E.exp(-x * x), name="scipy.special.erf")
erfc = defprim(sc.erfc, lambda g, ans, x: g * (-2 / _SQRT_PI) * E.exp(-x * x), name="scipy.special.erfc")
erfinv = defprim(sc.erfinv, lambda g, ans, x: g * (_SQRT_PI / 2) * E.exp(ans * ans),
                 name="scipy.special.erfinv")
erfcinv = defprim(sc.erfcinv, lambda g, ans, x: g * (-_SQRT_PI / 2) * E.exp(ans * ans),
                  name="scipy.special.erfcinv")
ndtr = defprim(sc.ndtr, lambda g, ans, x: g * E.exp(-0.5 * x * x) / _SQRT_2PI, name="scipy.special.ndtr")
ndtri = defprim(sc.ndtri, lambda g, ans, x: g * _SQRT_2PI * E.exp(0.5 * ans * ans), name="scipy.special.ndtri")
log_ndtr = defprim(sc.log_ndtr, lambda g, ans, x: g * E.exp(-0.5 * x * x - ans) / _SQRT_2PI,
                   name="scipy.special.log_ndtr")

# --- logistic ----------------------------------------------------------------------------------
expit = defprim(sc.expit, lambda g, ans, x: g * ans * (1 - ans), name="scipy.special.expit")
logit = defprim(sc.logit, lambda g, ans, x: g / (x * (1 - x)), name="scipy.special.logit")
log_expit = defprim(sc.log_expit, lambda g, ans, x: g * expit(-x), name="scipy.special.log_expit")


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """``scipy.special.logsumexp``, stable; differentiable in ``a`` and ``b``."""
    if type(a) is not Tracer and type(b) is not Tracer:
        return sc.logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    from .. import nn as wnn
    if not return_sign:
        return wnn.logsumexp(a, axis=axis, b=b, keepdims=keepdims)
    # with signs: log|sum(b exp(a))| and the sign, shifted by the (constant) maximum
    plain = np.asarray(unbox(a))
    m = np.max(plain, axis=axis, keepdims=True) if plain.size else np.zeros((1,) * plain.ndim)
    m = np.where(np.isfinite(m), m, 0)
    terms = F.exp(a - m) if b is None else b * F.exp(a - m)
    s = F.sum(terms, axis=axis, keepdims=True)
    sign = np.sign(unbox(s))
    out = F.log(F.abs(s)) + m
    if not keepdims:
        axes = tuple(range(plain.ndim)) if axis is None else axis
        out, sign = F.squeeze(out, axis=axes), np.squeeze(sign, axis=axes)
    return out, sign


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


erfcx = defprim(sc.erfcx, lambda g, ans, x: g * (2 * x * ans - 2 / _SQRT_PI), name="scipy.special.erfcx")
dawsn = defprim(sc.dawsn, lambda g, ans, x: g * (1 - 2 * x * ans), name="scipy.special.dawsn")


# --- x log y -----------------------------------------------------------------------------------
xlogy = defprim(sc.xlogy, (lambda g, ans, x, y: unbroadcast(g * E.log(y), x.shape),
                           lambda g, ans, x, y: unbroadcast(g * F.where(_nonzero(x), x / y, 0), y.shape)),
                name="scipy.special.xlogy")
xlog1py = defprim(sc.xlog1py, (lambda g, ans, x, y: unbroadcast(g * E.log1p(y), x.shape),
                               lambda g, ans, x, y: unbroadcast(g * F.where(_nonzero(x), x / (1 + y), 0),
                                                                y.shape)),
                  name="scipy.special.xlog1py")
entr = defprim(sc.entr, lambda g, ans, x: g * (-1 - E.log(x)), name="scipy.special.entr")

# --- Bessel functions (derivatives in x; the order v is a constant) ------------------------------
i0 = defprim(sc.i0, lambda g, ans, x: g * i1(x), name="scipy.special.i0")
i1 = defprim(sc.i1, lambda g, ans, x: g * 0.5 * (i0(x) + iv(2, x)), name="scipy.special.i1")
i0e = defprim(sc.i0e, lambda g, ans, x: g * (i1e(x) - F.sign(x) * ans), name="scipy.special.i0e")
i1e = defprim(sc.i1e, lambda g, ans, x: g * (0.5 * (i0e(x) + ive(2, x)) - F.sign(x) * ans),
              name="scipy.special.i1e")
iv = defprim(sc.iv, (_no_derivative("iv"), lambda g, ans, v, x: unbroadcast(
    g * 0.5 * (iv(v - 1, x) + iv(v + 1, x)), x.shape)), name="scipy.special.iv")
ive = defprim(sc.ive, (_no_derivative("ive"), lambda g, ans, v, x: unbroadcast(
    g * (0.5 * (ive(v - 1, x) + ive(v + 1, x)) - F.sign(x) * ans), x.shape)), name="scipy.special.ive")
jv = defprim(sc.jv, (_no_derivative("jv"), lambda g, ans, v, x: unbroadcast(
    g * 0.5 * (jv(v - 1, x) - jv(v + 1, x)), x.shape)), name="scipy.special.jv")
kv = defprim(sc.kv, (_no_derivative("kv"), lambda g, ans, v, x: unbroadcast(
    g * -0.5 * (kv(v - 1, x) + kv(v + 1, x)), x.shape)), name="scipy.special.kv")
kve = defprim(sc.kve, (_no_derivative("kve"), lambda g, ans, v, x: unbroadcast(
    g * (-0.5 * (kve(v - 1, x) + kve(v + 1, x)) + ans), x.shape)), name="scipy.special.kve")
yv = defprim(sc.yv, (_no_derivative("yv"), lambda g, ans, v, x: unbroadcast(
    g * 0.5 * (yv(v - 1, x) - yv(v + 1, x)), x.shape)), name="scipy.special.yv")


# SciPy's own ufuncs on traced values (``scipy.special.gammaln(x)`` in user code) come here too
def _register_scipy_ufuncs():
    from ..numpy._methods import UFUNCS
    for name in __all__:
        original = getattr(sc, name, None)
        if isinstance(original, np.ufunc):
            UFUNCS[original] = globals()[name]


_register_scipy_ufuncs()

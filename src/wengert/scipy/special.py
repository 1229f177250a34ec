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
from ..primitives._table import batch_elementwise, defprim, defunary, elementwise_constant, nondiff, unbroadcast

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


@elementwise_constant
def _nonzero(x):
    """Constant mask: ``x != 0`` (per example under vmap)."""
    return np.not_equal(x, 0)


# Every rule here is an elementwise product written with wengert operations: right on values batched
# by vmap (``batched_vjp``, ``defunary``'s default; tests/test_scipy.py checks each under vmap).

# --- gamma family --------------------------------------------------------------------------------
gammaln = defunary(sc.gammaln, lambda g, ans, x: g * digamma(x), name="scipy.special.gammaln")
digamma = defunary(sc.digamma, lambda g, ans, x: g * _polygamma(x, n=1), name="scipy.special.digamma")
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
    out = 0.0
    for k in np.unique(unbox(n_arr)):
        out = F.where(n_arr == k, _polygamma(x, n=int(k)), out)
    return out


def _only_batched(x):
    """Is ``x`` traced by vmap levels only (integer orders batched by vmap, not differentiated)?"""
    while type(x) is Tracer:
        if not x._trace.hidden_axes:
            return False
        x = x.value
    return True


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


# incomplete gamma and beta: derivatives in x only (forward mode refuses the shape parameters too)
def _gamma_density(a, x):
    return E.exp((a - 1) * E.log(x) - x - gammaln(a))


def _beta_density(a, b, x):
    return E.exp(xlogy(a - 1, x) + xlog1py(b - 1, -x) - betaln(a, b))


gammainc = defprim(sc.gammainc, (_no_derivative("gammainc"),
                                 lambda g, ans, a, x: unbroadcast(g * _gamma_density(a, x), x.shape)),
                   jvp=(_no_derivative("gammainc"), lambda t, ans, a, x: t * _gamma_density(a, x)),
                   name="scipy.special.gammainc", batch=batch_elementwise, batched_vjp=True)
gammaincc = defprim(sc.gammaincc, (_no_derivative("gammaincc"),
                                   lambda g, ans, a, x: unbroadcast(-g * _gamma_density(a, x), x.shape)),
                    jvp=(_no_derivative("gammaincc"), lambda t, ans, a, x: -t * _gamma_density(a, x)),
                    name="scipy.special.gammaincc", batch=batch_elementwise, batched_vjp=True)
betainc = defprim(sc.betainc, (_no_derivative("betainc"), _no_derivative("betainc"),
                               lambda g, ans, a, b, x: unbroadcast(g * _beta_density(a, b, x), x.shape)),
                  jvp=(_no_derivative("betainc"), _no_derivative("betainc"),
                       lambda t, ans, a, b, x: t * _beta_density(a, b, x)),
                  name="scipy.special.betainc", batch=batch_elementwise, batched_vjp=True)

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
    from .. import nn as wnn
    if not return_sign:
        return wnn.logsumexp(a, axis=axis, b=b, keepdims=keepdims)
    # with signs: log|sum(b exp(a))| and the sign, shifted by the (constant) maximum
    a = F._as_traced_operand(a)
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


# SciPy's own ufuncs on traced values (``scipy.special.gammaln(x)`` in user code) come here too
def _register_scipy_ufuncs():
    from ..numpy._methods import UFUNCS
    for name in __all__:
        original = getattr(sc, name, None)
        if isinstance(original, np.ufunc):
            UFUNCS[original] = globals()[name]


_register_scipy_ufuncs()

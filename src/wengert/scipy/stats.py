"""scipy.stats distributions with gradients: ``norm``, ``t``, ``beta``, ``gamma``, ``chi2``,
``poisson``, ``dirichlet``, ``multivariate_normal``.

Every other method (``rvs``, ``mean``, ``var``, ``std``, ``median``, ``interval``, ``fit``,
``entropy``, ``moment``, ``stats``, ``support``, ...) is SciPy's own, passed through, so code that
samples with ``dirichlet.rvs`` and differentiates ``dirichlet.logpdf`` runs unchanged; given a
traced value such a method raises ``NoDerivativeError`` instead of reading it as a constant.
``norm(loc, scale)`` freezes the parameters as in SciPy (traced parameters too, for the
differentiable methods).

Each is an object with SciPy's method names and signatures (``norm.logpdf(x, loc=0, scale=1)``).
Called on plain values, a method is SciPy's own, so plain code gets SciPy's exact answer; on traced
values it is a composition of ``wengert.scipy.special`` functions and ``wengert.numpy`` operations,
so it is differentiable (to any order) in the values and the parameters, with these exceptions,
which raise ``NoDerivativeError``: the cdf's derivative with respect to the shape parameters of
``t``, ``beta``, ``gamma`` and ``chi2`` (it needs the derivative of the incomplete beta/gamma function
in its parameters) and ``multivariate_normal.cdf``.

Validation follows SciPy: an invalid parameter (``scale <= 0``, ``df <= 0``, ...) gives ``nan`` as
SciPy does; the multivariate distributions raise SciPy's own errors, as their arguments are checked
by SciPy on the plain values.
"""
from __future__ import annotations

import numpy as np
import scipy.stats as _st

from ..core.errors import NoDerivativeError
from ..core.trace import Tracer, unbox
from ..primitives._table import unbox_all
from ..numpy import _functions as F
from ..numpy import linalg as _la
from . import special as S

__all__ = ["norm", "t", "beta", "gamma", "chi2", "poisson", "dirichlet", "multivariate_normal"]

_LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)


def _traced(*args):
    for a in args:
        if type(a) is Tracer:
            return True
        if isinstance(a, (list, tuple)) and F.contains_tracer(a):
            return True
    return False


def _plain(x):
    """``x`` without the tracers that differentiate it, for masks and conditions. Inside vmap a
    value batched there stays a batch tracer (its comparisons are per example); the batched
    array as a plain constant would mix the examples' masks and shapes."""
    x = unbox_all(x)
    return x if type(x) is Tracer else np.asarray(x)


def _values(x):
    """``x``'s plain values, for SciPy's argument checks."""
    return np.asarray(unbox(x))


def _everywhere(mask):
    """Does the (plain) ``mask`` hold everywhere? Never assumed for one batched by vmap."""
    return type(mask) is not Tracer and bool(np.all(mask))


def _arr(x):
    """A traced value as it is; lists (possibly holding tracers) and scalars as arrays."""
    return F.as_traced_operand(x)


def _nonpositive(*params):
    """Where any of the parameters is <= 0 (invalid for SciPy: nan there)."""
    out = _plain(params[0]) <= 0
    for p in params[1:]:
        out = F.logical_or(out, _plain(p) <= 0)
    return out


def _nan_where(result, invalid):
    """``result`` with ``nan`` where the (plain, boolean) ``invalid`` holds, as SciPy gives."""
    if type(invalid) is Tracer or np.any(invalid):
        return F.where(invalid, np.nan, result)
    return result


def _safe(x, inside, fill):
    """``x`` where ``inside``, ``fill`` elsewhere, so out-of-support values give no nan gradients."""
    return x if _everywhere(inside) else F.where(inside, x, fill)


def _select(inside, value, outside):
    return value if _everywhere(inside) else F.where(inside, value, outside)


# the methods a distribution here may differentiate; every other name passes through to SciPy
_DIFFERENTIABLE = frozenset(("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf", "logpmf", "pmf"))


def _passthrough(qualname, fn):
    """SciPy's ``fn`` as it is; a traced argument is refused rather than read as a constant."""

    def call(*args, **kwargs):
        if _traced(*args, *kwargs.values()):
            hint = ("; to differentiate a sample in its parameters, transform a standard draw with "
                    "wengert.numpy: loc + scale * norm.rvs(size=...)" if qualname.endswith(".rvs") else "")
            raise NoDerivativeError(f"{qualname} on a traced value (it is SciPy's own method{hint})")
        return fn(*args, **kwargs)

    call.__name__ = call.__qualname__ = qualname.rsplit(".", 1)[-1]
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


class _Dist:
    """A distribution: the differentiable methods below, SciPy's own for every other name (``rvs``,
    ``mean``, ``var``, ``std``, ``median``, ``interval``, ``fit``, ``entropy``, ``moment``, ``stats``,
    ``support``, ...), and SciPy's frozen distributions (``norm(loc, scale)``)."""
    name = ""

    def _scipy(self, method, *args, **kwargs):
        return getattr(getattr(_st, self.name), method)(*args, **kwargs)

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        original = getattr(getattr(_st, self.name), attr)   # SciPy's AttributeError for unknown names
        if not callable(original):
            return original
        return _passthrough(f"scipy.stats.{self.name}.{attr}", original)

    def __call__(self, *args, **kwargs):
        return _Frozen(self, args, kwargs)

    def __repr__(self):
        return f"<wengert.scipy.stats.{self.name}>"


class _Frozen:
    """``dist(*params)``: the differentiable methods take the parameters (traced or not); the other
    methods are those of SciPy's frozen distribution."""

    def __init__(self, dist, args, kwds):
        self.dist, self.args, self.kwds = dist, args, kwds

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        if attr in _DIFFERENTIABLE and hasattr(type(self.dist), attr):
            method = getattr(self.dist, attr)

            def frozen_method(x, *args, **kwargs):
                return method(x, *self.args, *args, **{**self.kwds, **kwargs})

            frozen_method.__name__ = attr
            return frozen_method
        qualname = f"scipy.stats.{self.dist.name}(...).{attr}"
        if _traced(*self.args, *self.kwds.values()):
            getattr(getattr(_st, self.dist.name), attr)   # SciPy's AttributeError for unknown names
            raise NoDerivativeError(f"{qualname} with traced parameters (it is SciPy's own method)")
        original = getattr(getattr(_st, self.dist.name)(*self.args, **self.kwds), attr)
        return _passthrough(qualname, original) if callable(original) else original

    def __repr__(self):
        return f"<wengert.scipy.stats.{self.dist.name} frozen>"


def _method(name, traced):
    """A public method: SciPy's on plain values, ``traced`` (the composition) otherwise."""

    def method(self, *args, **kwargs):
        if _traced(*args, *kwargs.values()):
            return traced(self, *args, **kwargs)
        return self._scipy(name, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"SciPy's ``{name}``, differentiable (see the module's docstring)."
    return method


def _exp_of(logname):
    def traced(self, *args, **kwargs):
        return F.exp(getattr(self, "_" + logname)(*args, **kwargs))
    return traced


def _log_of(name):
    def traced(self, *args, **kwargs):
        return F.log(getattr(self, "_" + name)(*args, **kwargs))
    return traced


# --- norm --------------------------------------------------------------------------------------
class _Norm(_Dist):
    name = "norm"

    def _z(self, x, loc, scale):
        return (_arr(x) - loc) / scale

    def _logpdf(self, x, loc=0, scale=1):
        z = self._z(x, loc, scale)
        return _nan_where(-0.5 * z * z - _LOG_SQRT_2PI - F.log(scale), _plain(scale) <= 0)

    def _cdf(self, x, loc=0, scale=1):
        return _nan_where(S.ndtr(self._z(x, loc, scale)), _plain(scale) <= 0)

    def _logcdf(self, x, loc=0, scale=1):
        return _nan_where(S.log_ndtr(self._z(x, loc, scale)), _plain(scale) <= 0)

    def _sf(self, x, loc=0, scale=1):
        return _nan_where(S.ndtr(-self._z(x, loc, scale)), _plain(scale) <= 0)

    def _logsf(self, x, loc=0, scale=1):
        return _nan_where(S.log_ndtr(-self._z(x, loc, scale)), _plain(scale) <= 0)

    def _ppf(self, q, loc=0, scale=1):
        return _nan_where(loc + scale * S.ndtri(q), _plain(scale) <= 0)

    def _isf(self, q, loc=0, scale=1):
        return _nan_where(loc - scale * S.ndtri(q), _plain(scale) <= 0)

    logpdf = _method("logpdf", _logpdf)
    pdf = _method("pdf", _exp_of("logpdf"))
    cdf = _method("cdf", _cdf)
    logcdf = _method("logcdf", _logcdf)
    sf = _method("sf", _sf)
    logsf = _method("logsf", _logsf)
    ppf = _method("ppf", _ppf)
    isf = _method("isf", _isf)


norm = _Norm()


# --- Student's t -------------------------------------------------------------------------------
class _T(_Dist):
    name = "t"

    def _logpdf(self, x, df, loc=0, scale=1):
        z = (_arr(x) - loc) / scale
        half = (df + 1) / 2
        out = (S.gammaln(half) - S.gammaln(df / 2) - 0.5 * F.log(df * np.pi)
               - half * F.log1p(z * z / df) - F.log(scale))
        return _nan_where(out, _nonpositive(df, scale))

    def _tails(self, x, df, loc, scale, upper):
        """cdf (``upper=False``) or sf: the tail beyond ``|z|`` is half an incomplete beta."""
        z = (_arr(x) - loc) / scale
        tail = 0.5 * S.betainc(df / 2, 0.5, df / (df + z * z))
        below = _plain(z) < 0
        out = F.where(below, 1 - tail, tail) if upper else F.where(below, tail, 1 - tail)
        return _nan_where(out, _nonpositive(df, scale))

    def _cdf(self, x, df, loc=0, scale=1):
        return self._tails(x, df, loc, scale, upper=False)

    def _sf(self, x, df, loc=0, scale=1):
        return self._tails(x, df, loc, scale, upper=True)

    logpdf = _method("logpdf", _logpdf)
    pdf = _method("pdf", _exp_of("logpdf"))
    cdf = _method("cdf", _cdf)
    logcdf = _method("logcdf", _log_of("cdf"))
    sf = _method("sf", _sf)
    logsf = _method("logsf", _log_of("sf"))


t = _T()


# --- beta ----------------------------------------------------------------------------------------
class _Beta(_Dist):
    name = "beta"

    def _logpdf(self, x, a, b, loc=0, scale=1):
        z = (_arr(x) - loc) / scale
        pz = _plain(z)
        inside = F.logical_and(pz >= 0, pz <= 1)
        zs = _safe(z, inside, 0.5)
        out = S.xlogy(a - 1, zs) + S.xlog1py(b - 1, -zs) - S.betaln(a, b) - F.log(scale)
        out = _select(inside, out, -np.inf)
        return _nan_where(out, _nonpositive(a, b, scale))

    def _cdf(self, x, a, b, loc=0, scale=1):
        z = (_arr(x) - loc) / scale
        pz = _plain(z)
        inside = F.logical_and(pz > 0, pz < 1)
        out = S.betainc(a, b, _safe(z, inside, 0.5))
        out = _select(inside, out, (pz >= 1).astype(float))
        return _nan_where(out, _nonpositive(a, b, scale))

    def _sf(self, x, a, b, loc=0, scale=1):
        """``I_{1-z}(b, a)``: the upper tail without the cancellation of ``1 - cdf``."""
        z = (_arr(x) - loc) / scale
        pz = _plain(z)
        inside = F.logical_and(pz > 0, pz < 1)
        out = S.betainc(b, a, 1 - _safe(z, inside, 0.5))
        out = _select(inside, out, (pz <= 0).astype(float))
        return _nan_where(out, _nonpositive(a, b, scale))

    logpdf = _method("logpdf", _logpdf)
    pdf = _method("pdf", _exp_of("logpdf"))
    cdf = _method("cdf", _cdf)
    logcdf = _method("logcdf", _log_of("cdf"))
    sf = _method("sf", _sf)
    logsf = _method("logsf", _log_of("sf"))


beta = _Beta()


# --- gamma and chi2 ------------------------------------------------------------------------------
def _gamma_logpdf(x, a, loc, scale):
    z = (_arr(x) - loc) / scale
    pz = _plain(z)
    inside = pz >= 0
    zs = _safe(z, inside, 1.0)
    out = S.xlogy(a - 1, zs) - zs - S.gammaln(a) - F.log(scale)
    return _select(inside, out, -np.inf)


def _gamma_cdf(x, a, loc, scale):
    z = (_arr(x) - loc) / scale
    pz = _plain(z)
    inside = pz > 0
    out = S.gammainc(a, _safe(z, inside, 1.0))
    return _select(inside, out, 0.0)


def _gamma_sf(x, a, loc, scale):
    z = (_arr(x) - loc) / scale
    pz = _plain(z)
    inside = pz > 0
    out = S.gammaincc(a, _safe(z, inside, 1.0))
    return _select(inside, out, 1.0)


class _Gamma(_Dist):
    name = "gamma"

    def _logpdf(self, x, a, loc=0, scale=1):
        return _nan_where(_gamma_logpdf(x, a, loc, scale), _nonpositive(a, scale))

    def _cdf(self, x, a, loc=0, scale=1):
        return _nan_where(_gamma_cdf(x, a, loc, scale), _nonpositive(a, scale))

    def _sf(self, x, a, loc=0, scale=1):
        return _nan_where(_gamma_sf(x, a, loc, scale), _nonpositive(a, scale))

    logpdf = _method("logpdf", _logpdf)
    pdf = _method("pdf", _exp_of("logpdf"))
    cdf = _method("cdf", _cdf)
    logcdf = _method("logcdf", _log_of("cdf"))
    sf = _method("sf", _sf)
    logsf = _method("logsf", _log_of("sf"))


gamma = _Gamma()


class _Chi2(_Dist):
    name = "chi2"

    def _logpdf(self, x, df, loc=0, scale=1):
        return _nan_where(_gamma_logpdf(x, df / 2, loc, 2 * scale), _nonpositive(df, scale))

    def _cdf(self, x, df, loc=0, scale=1):
        return _nan_where(_gamma_cdf(x, df / 2, loc, 2 * scale), _nonpositive(df, scale))

    def _sf(self, x, df, loc=0, scale=1):
        return _nan_where(_gamma_sf(x, df / 2, loc, 2 * scale), _nonpositive(df, scale))

    logpdf = _method("logpdf", _logpdf)
    pdf = _method("pdf", _exp_of("logpdf"))
    cdf = _method("cdf", _cdf)
    logcdf = _method("logcdf", _log_of("cdf"))
    sf = _method("sf", _sf)
    logsf = _method("logsf", _log_of("sf"))


chi2 = _Chi2()


# --- poisson -------------------------------------------------------------------------------------
class _Poisson(_Dist):
    name = "poisson"

    @staticmethod
    def _count(k, loc):
        """``k - loc`` as a plain array: counts are integers and take no derivative."""
        if type(k) is Tracer or type(loc) is Tracer:
            raise NoDerivativeError("the derivative of scipy.stats.poisson with respect to k or loc "
                                    "(they are integers)")
        return np.asarray(k) - np.asarray(loc)

    def _logpmf(self, k, mu, loc=0):
        k = self._count(k, loc)
        ok = (k >= 0) & (k == np.floor(k))
        ks = np.where(ok, k, 0)
        out = S.xlogy(ks, mu) - S.gammaln(ks + 1) - mu
        out = _select(ok, out, -np.inf)
        return _nan_where(out, _plain(mu) < 0)

    def _cdf(self, k, mu, loc=0):
        k = np.floor(self._count(k, loc))
        ok = k >= 0
        out = S.gammaincc(np.where(ok, k, 0) + 1, mu)
        out = _select(ok, out, 0.0)
        return _nan_where(out, _plain(mu) < 0)

    def _sf(self, k, mu, loc=0):
        """P(K > k) = P(k + 1, mu), the regularized lower incomplete gamma function."""
        k = np.floor(self._count(k, loc))
        ok = k >= 0
        out = S.gammainc(np.where(ok, k, 0) + 1, mu)
        out = _select(ok, out, 1.0)
        return _nan_where(out, _plain(mu) < 0)

    logpmf = _method("logpmf", _logpmf)
    pmf = _method("pmf", _exp_of("logpmf"))
    cdf = _method("cdf", _cdf)
    logcdf = _method("logcdf", _log_of("cdf"))
    sf = _method("sf", _sf)
    logsf = _method("logsf", _log_of("sf"))


poisson = _Poisson()


# --- dirichlet -----------------------------------------------------------------------------------
class _Dirichlet(_Dist):
    name = "dirichlet"

    def _logpdf(self, x, alpha):
        self._scipy("logpdf", _values(x), _values(alpha))  # SciPy's checks and errors
        x, alpha = _arr(x), _arr(alpha)
        k = alpha.shape[0]
        if x.shape[0] == k - 1:  # SciPy completes x with 1 - sum(x)
            x = F.concatenate([x, 1 - F.sum(x, axis=0, keepdims=True)], axis=0)
        alpha_b = F.reshape(alpha, (k,) + (1,) * (x.ndim - 1))
        lnb = F.sum(S.gammaln(alpha)) - S.gammaln(F.sum(alpha))
        return F.sum(S.xlogy(alpha_b - 1, x), axis=0) - lnb

    logpdf = _method("logpdf", _logpdf)
    pdf = _method("pdf", _exp_of("logpdf"))


dirichlet = _Dirichlet()


# --- multivariate_normal -------------------------------------------------------------------------
class _MultivariateNormal(_Dist):
    name = "multivariate_normal"

    def _logpdf(self, x, mean=None, cov=1, allow_singular=False):
        plain_mean = None if mean is None else _values(mean)
        self._scipy("logpdf", _values(x), plain_mean, _values(cov), allow_singular)  # SciPy's checks
        cov = _arr(cov)
        if mean is None:
            dim = 1 if cov.ndim == 0 else cov.shape[0]
            mean = np.zeros(dim)
        mean = _arr(mean)
        dim = mean.size if mean.ndim else (1 if cov.ndim < 2 else cov.shape[0])
        mean = F.reshape(mean, (dim,)) if mean.ndim == 0 else F.broadcast_to(mean, (dim,))
        if cov.ndim == 0:
            cov = cov * np.eye(dim)
        elif cov.ndim == 1:
            cov = F.diag(cov)
        x = _arr(x)
        if x.ndim == 0:
            x = F.reshape(x, (1,))
        if x.ndim == 1:
            x = F.reshape(x, (-1, 1) if dim == 1 else (1, dim))
        lead = x.shape[:-1]
        dev = F.reshape(x - mean, (-1, dim))
        try:
            chol = _la.cholesky(cov)
        except np.linalg.LinAlgError:
            raise NotImplementedError(
                "wengert.scipy.stats.multivariate_normal: a singular covariance (allow_singular=True) "
                "is not supported on traced values") from None
        z = _la.solve(chol, F.transpose(dev))
        maha = F.sum(z * z, axis=0)
        logdet = 2 * F.sum(F.log(F.diagonal(chol)))
        out = F.reshape(-0.5 * (dim * np.log(2 * np.pi) + logdet + maha), lead)
        return F.squeeze(out) if out.ndim else out

    def _cdf(self, *args, **kwargs):
        raise _mvn_cdf_refusal("cdf")

    def _logcdf(self, *args, **kwargs):
        raise _mvn_cdf_refusal("logcdf")

    logpdf = _method("logpdf", _logpdf)
    pdf = _method("pdf", _exp_of("logpdf"))
    cdf = _method("cdf", _cdf)
    logcdf = _method("logcdf", _logcdf)


def _mvn_cdf_refusal(method):
    name = f"scipy.stats.multivariate_normal.{method}"
    return NoDerivativeError(name, (
        f"{name} has no derivative in wengert: SciPy integrates it by randomized quasi-Monte Carlo, whose "
        "value carries noise of about abseps (1e-5), and its closed-form gradient (a density times a "
        "(d-1)-dimensional cdf) is not written. Compute it outside the differentiated function, or for "
        "d = 1 use norm.cdf."))


multivariate_normal = _MultivariateNormal()

"""NumPy's order statistics, nan-ignoring reductions, covariance and correlation, differentiable.

Compositions of the table (``sort`` is ``take_along_axis`` of ``argsort``), so every transform
applies. Order statistics send the gradient to the elements they read; where values tie, to the
one ``argsort`` puts first (as JAX does: a tie has no derivative). The nan-ignoring reductions
replace nan by the reduction's identity before reducing, so nan elements get a zero gradient, and
lanes of nan only give nan as NumPy does.
"""
from __future__ import annotations

import numpy as np

from ..core.trace import Tracer, dtype_of, unbox
from ..primitives._table import elementwise_constant, nondiff
from . import _functions as F
from ._functions import traceable

_NO_VALUE = np._NoValue
_ndim, _shape = F._ndim, F._shape
_operand = F.as_traced_operand


# --- quantiles ---------------------------------------------------------------------------------------
# the continuous methods of Hyndman and Fan, by their (alpha, beta): NumPy's virtual index is
# n q + alpha + q (1 - alpha - beta) - 1
_CONTINUOUS = {"linear": (1.0, 1.0), "weibull": (0.0, 0.0), "hazen": (0.5, 0.5),
               "median_unbiased": (1 / 3, 1 / 3), "normal_unbiased": (3 / 8, 3 / 8),
               "interpolated_inverted_cdf": (0.0, 1.0)}
_DISCRETE = ("lower", "higher", "nearest", "midpoint")


def _virtual_index(q, count, alpha, beta):
    position = count * q + (alpha + q * (1 - alpha - beta)) - 1
    return np.clip(position, 0, np.maximum(count - 1, 0))


def _lower(q, count, alpha, beta):
    return np.floor(_virtual_index(q, count, alpha, beta)).astype(np.intp)


def _upper(q, count, alpha, beta):
    return np.minimum(np.ceil(_virtual_index(q, count, alpha, beta)), np.maximum(count - 1, 0)).astype(np.intp)


def _nearest(q, count, alpha, beta):
    return np.around((count - 1) * q).astype(np.intp)


_lower_index = elementwise_constant(_lower)
_upper_index = elementwise_constant(_upper)
_nearest_index = elementwise_constant(_nearest)


def _lanes(a, axis):
    """``a`` with the reduced axes moved last and merged into one, and the kept shape (keepdims)."""
    nd = _ndim(a)
    if axis is None:
        return F.reshape(a, (-1,)), (1,) * nd
    axes = F._norm_axis(axis, nd)
    kept = [d for d in range(nd) if d not in axes]
    moved = F.transpose(a, kept + list(axes))
    lanes = tuple(_shape(a)[d] for d in kept)
    keep_shape = tuple(1 if d in axes else _shape(a)[d] for d in range(nd))
    return F.reshape(moved, lanes + (-1,)), keep_shape


def _quantile(name, a, q, axis, method, keepdims, ignore_nan, interpolation=None, weights=None, **unsupported):
    F._unsupported(name, weights=weights, **unsupported)
    method = interpolation if interpolation is not None else method
    a, q_in = _operand(a), q
    q = _operand(q)
    dtype = np.quantile(np.zeros(1, dtype_of(a)), q_in if type(q_in) is not Tracer and not F.contains_tracer(q_in)
                        else np.zeros(_shape(q), dtype_of(q)), method=method).dtype
    if method not in _CONTINUOUS and method not in _DISCRETE:
        raise NotImplementedError(f"wengert.numpy.{name}: method={method!r} is not supported on traced values "
                                  f"(one of {sorted(_CONTINUOUS) + list(_DISCRETE)})")
    if not np.issubdtype(dtype_of(a), np.inexact):
        a = F.astype(a, np.float64)
    data, keep_shape = _lanes(a, axis)
    n = _shape(data)[-1]
    lanes = _shape(data)[:-1]
    ordered = F.sort(data, axis=-1)  # nan last
    if ignore_nan:
        count = F.sum(F.logical_not(F.isnan(data)), axis=-1)
    else:
        count = n
    q_shape = _shape(q)
    qb = F.reshape(q, q_shape + (1,) * len(lanes))
    alpha, beta = _CONTINUOUS.get(method, (1.0, 1.0))
    full = q_shape + lanes + (n,)
    ordered = F.broadcast_to(F.reshape(ordered, (1,) * len(q_shape) + lanes + (n,)), full)

    def read(index):
        index = F.broadcast_to(index, q_shape + lanes) if type(index) is not Tracer else index
        return F.take_along_axis(ordered, F.expand_dims(index, -1), axis=-1)[..., 0]

    if method == "nearest":
        out = read(_nearest_index(qb, count, alpha, beta))
    else:
        lo = _lower_index(qb, count, alpha, beta)
        below = read(lo)
        if method == "lower":
            out = below
        else:
            above = read(_upper_index(qb, count, alpha, beta))
            if method == "higher":
                out = above
            elif method == "midpoint":
                out = F.where(lo == _upper_index(qb, count, alpha, beta), below, (below + above) / 2)
            else:
                position = count * qb + (alpha + qb * (1 - alpha - beta)) - 1
                position = F.clip(position, 0, F.maximum(count - 1, 0))
                fraction = position - lo
                out = below + fraction * (above - below)
    if ignore_nan:
        out = F.where(count == 0, np.nan, out)
    else:
        out = F.where(F.isnan(ordered[..., -1]), np.nan, out)
    if keepdims:
        out = F.reshape(out, q_shape + keep_shape)
    if dtype_of(out) != dtype:
        out = F.astype(out, dtype)
    return out


@traceable(np.quantile)
def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
             weights=None, interpolation=None):
    return _quantile("quantile", a, q, axis, method, keepdims, False, interpolation, weights, out=out)


def _percent(q):
    """q / 100; a Python number stays one, so it does not promote float32 data (NumPy's rule)."""
    return q / 100 if type(q) in (int, float) else _operand(q) / 100


@traceable(np.percentile)
def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
               weights=None, interpolation=None):
    return _quantile("percentile", a, _percent(q), axis, method, keepdims, False, interpolation, weights,
                     out=out)


@traceable(np.median)
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return _quantile("median", a, 0.5, axis, "linear", keepdims, False, out=out)


@traceable(np.nanquantile)
def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=_NO_VALUE, *,
                weights=None, interpolation=None):
    return _quantile("nanquantile", a, q, axis, method, keepdims is True, True, interpolation, weights, out=out)


@traceable(np.nanpercentile)
def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=_NO_VALUE, *,
                  weights=None, interpolation=None):
    return _quantile("nanpercentile", a, _percent(q), axis, method, keepdims is True, True, interpolation,
                     weights, out=out)


@traceable(np.nanmedian)
def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=_NO_VALUE):
    return _quantile("nanmedian", a, 0.5, axis, "linear", keepdims is True, True, out=out)


argpartition = nondiff(np.argpartition)


@traceable(np.partition)
def partition(a, kth, axis=-1, kind="introselect", order=None):
    """NumPy's own arrangement (``argpartition`` of the values), read with ``take_along_axis``."""
    F._unsupported("partition", order=order)
    if axis is None:
        a, axis = F.ravel(a), -1
    return F.take_along_axis(a, argpartition(a, kth, axis=axis, kind=kind), axis=axis)


# --- nan-ignoring reductions -----------------------------------------------------------------------------
def _keep(keepdims):
    return keepdims is True


def _without_nan(a, fill):
    a = _operand(a)
    return F.where(F.isnan(a), fill, a) if np.issubdtype(dtype_of(a), np.inexact) else a


@traceable(np.nansum)
def nansum(a, axis=None, dtype=None, out=None, keepdims=_NO_VALUE, initial=_NO_VALUE, where=_NO_VALUE):
    F._unsupported("nansum", out=out, initial=initial, where=where)
    return F.sum(_without_nan(a, 0.0), axis=axis, dtype=dtype, keepdims=_keep(keepdims))


@traceable(np.nanprod)
def nanprod(a, axis=None, dtype=None, out=None, keepdims=_NO_VALUE, initial=_NO_VALUE, where=_NO_VALUE):
    F._unsupported("nanprod", out=out, initial=initial, where=where)
    return F.prod(_without_nan(a, 1.0), axis=axis, dtype=dtype, keepdims=_keep(keepdims))


@traceable(np.nancumsum)
def nancumsum(a, axis=None, dtype=None, out=None):
    return F.cumsum(_without_nan(a, 0.0), axis=axis, dtype=dtype, out=out)


@traceable(np.nancumprod)
def nancumprod(a, axis=None, dtype=None, out=None):
    return F.cumprod(_without_nan(a, 1.0), axis=axis, dtype=dtype, out=out)


def _nan_extremum(reduce, fill, name):
    @traceable(getattr(np, name))
    def extremum(a, axis=None, out=None, keepdims=_NO_VALUE, initial=_NO_VALUE, where=_NO_VALUE):
        F._unsupported(name, out=out, initial=initial, where=where)
        a = _operand(a)
        result = reduce(_without_nan(a, fill), axis=axis, keepdims=_keep(keepdims))
        all_nan = F.all(F.isnan(a), axis=axis, keepdims=_keep(keepdims))
        return F.where(all_nan, np.nan, result)  # NumPy: nan, with a RuntimeWarning
    extremum.traced_body.__name__ = name
    return extremum


nanmax = _nan_extremum(F.max, -np.inf, "nanmax")
nanmin = _nan_extremum(F.min, np.inf, "nanmin")


def _count_valid(a, axis, keepdims):
    return F.sum(F.logical_not(F.isnan(a)), axis=axis, keepdims=keepdims)


@traceable(np.nanmean)
def nanmean(a, axis=None, dtype=None, out=None, keepdims=_NO_VALUE, *, where=_NO_VALUE):
    F._unsupported("nanmean", out=out, where=where)
    a = _operand(a)
    if dtype is not None:
        a = F.astype(a, dtype)
    total = F.sum(_without_nan(a, 0.0), axis=axis, keepdims=_keep(keepdims))
    return total / F.astype(_count_valid(a, axis, _keep(keepdims)), dtype_of(total))  # NumPy keeps float32


@traceable(np.nanvar)
def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO_VALUE, *, where=_NO_VALUE, mean=_NO_VALUE,
           correction=_NO_VALUE):
    F._unsupported("nanvar", out=out, where=where, mean=mean)
    if correction is not _NO_VALUE:
        ddof = correction
    a = _operand(a)
    if dtype is not None:
        a = F.astype(a, dtype)
    real_dtype = np.finfo(dtype_of(a)).dtype
    count = F.astype(_count_valid(a, axis, True), real_dtype)
    centered = _without_nan(a, 0.0)
    centered = F.where(F.isnan(a), 0.0, centered - F.sum(centered, axis=axis, keepdims=True) / count)
    squares = F.real(centered * F.conj(centered)) if np.iscomplexobj(unbox(a)) else centered * centered
    dof = F.astype(F.maximum(_count_valid(a, axis, _keep(keepdims)) - ddof, 0), real_dtype)
    return F.sum(squares, axis=axis, keepdims=_keep(keepdims)) / dof


@traceable(np.nanstd)
def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=_NO_VALUE, *, where=_NO_VALUE, mean=_NO_VALUE,
           correction=_NO_VALUE):
    return F._sqrt_of_variance(nanvar(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims,
                                         where=where, mean=mean, correction=correction))


# --- spread, covariance, correlation ---------------------------------------------------------------------
@traceable(np.ptp)
def ptp(a, axis=None, out=None, keepdims=_NO_VALUE):
    F._unsupported("ptp", out=out)
    return F.max(a, axis=axis, keepdims=_keep(keepdims)) - F.min(a, axis=axis, keepdims=_keep(keepdims))


def _at_least_2d_rows(m):
    m = _operand(m)
    return F.reshape(m, (1,) + _shape(m)) if _ndim(m) < 2 else m


@traceable(np.cov)
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    m = _operand(m)
    if _ndim(m) > 2:
        raise ValueError("m has more than 2 dimensions")
    if dtype is None:
        dtype = np.result_type(dtype_of(m), np.float64) if y is None else \
            np.result_type(dtype_of(m), dtype_of(y), np.float64)
    x = F.astype(_at_least_2d_rows(m), dtype)
    if not rowvar and _shape(x)[0] != 1:
        x = F.transpose(x)
    if y is not None:
        y = F.astype(_at_least_2d_rows(y), dtype)
        if not rowvar and _shape(y)[0] != 1:
            y = F.transpose(y)
        x = F.concatenate([x, y], axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    weights = None
    for given in (fweights, aweights):
        if given is not None:
            given = F.astype(_operand(given), np.float64)
            weights = given if weights is None else weights * given
    average, total = F.average(x, axis=1, weights=weights, returned=True)
    total = total[0]
    if weights is None:
        factor = total - ddof
    elif ddof == 0:
        factor = total
    elif aweights is None:
        factor = total - ddof
    else:
        factor = total - ddof * F.sum(weights * F.astype(_operand(aweights), np.float64)) / total
    centered = x - F.reshape(average, (-1, 1))
    right = F.transpose(centered if weights is None else centered * weights)
    c = F.dot(centered, F.conj(right)) / factor
    return F.squeeze(c)


@traceable(np.corrcoef)
def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = cov(x, y, rowvar, dtype=dtype)
    if _ndim(c) == 0:
        return c / c
    scale = F.sqrt(F.real(F.diagonal(c)))
    c = c / F.reshape(scale, (-1, 1)) / F.reshape(scale, (1, -1))
    if np.iscomplexobj(unbox(c)):
        return F.clip(F.real(c), -1, 1) + 1j * F.clip(F.imag(c), -1, 1)
    return F.clip(c, -1, 1)



_NOT_EXPORTED = {"annotations", "np", "Tracer", "dtype_of", "unbox", "elementwise_constant", "nondiff", "F", "traceable"}
__all__ = [n for n in list(globals()) if not n.startswith("_") and n not in _NOT_EXPORTED]

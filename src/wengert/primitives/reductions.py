"""Reductions and scans: sum, max/min, mean, var, prod, cumsum, cumprod.

std and average are compositions of these (see ``wengert.numpy``); var is one primitive for real
values and a composition for complex ones. The gradient of max/min is shared equally among tied elements, so it is the average of the one-sided derivatives.
"""
from __future__ import annotations

import numpy as np

from ..core.namespace import is_foreign, namespace
from ..core.trace import Tracer, unbox
from ._batching import reduction_rule, scan_rule
from ._table import defprim, elementwise_constant, nondiff, staged
from . import shape as sh
from .elementwise import where
from .shape import astype, broadcast_to, concatenate, flip, getitem, reshape


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        return tuple(sorted(a % ndim for a in axis))
    return (axis % ndim,)


def _expand_to(g, shape, axis, keepdims):
    """Put back the reduced axes of ``g`` (as size 1) and broadcast it to ``shape``."""
    if type(g) is not Tracer and not (len(shape) <= 2 and _small(shape)):
        view = _broadcast_view(g, shape, axis, keepdims)
        if view is not None:
            return view
    if type(g) is not Tracer and (axis is None or keepdims) and len(shape) <= 2 and _small(shape) \
            and not is_foreign(g):
        # a plain cotangent that broadcasts as it is (a full reduction's 0-d one, or kept axes)
        out = np.empty(shape, g.dtype)
        out[...] = g
        return out
    if axis is None and not keepdims and type(g) is Tracer:
        # a full reduction's 0-d cotangent broadcasts to any shape as it is: no reshape to all-ones
        # (one staged equation fewer per np.sum in a jitted loop)
        return broadcast_to(g, shape=tuple(shape))
    if not keepdims:
        kept = list(shape)
        for a in _axes(axis, len(shape)):
            kept[a] = 1
        g = reshape(g, shape=tuple(kept))
    if type(g) is not Tracer and len(shape) <= 2 and _small(shape) and not is_foreign(g):
        out = np.empty(shape, g.dtype)  # cheaper than np.broadcast_to's Python-level checks
        out[...] = g
        return out
    return broadcast_to(g, shape=shape)


def _broadcast_view(g, shape, axis, keepdims):
    """``_expand_to`` of a plain contiguous cotangent: a read-only view with zero strides along the
    reduced axes (what ``np.broadcast_to`` makes, without its Python-level checks: 5 us a call), or
    None for any other ``g``."""
    kind = type(g)
    if kind is not np.ndarray:
        if not isinstance(g, np.generic):
            return None
        g = np.asarray(g)
    if not g.flags.c_contiguous or not g.size:
        return None
    n = len(shape)
    if axis is None:
        if g.ndim and not (keepdims and g.ndim == n):
            return None
        strides = (0,) * n
    elif keepdims:
        if g.ndim != n or any(m != k and m != 1 for m, k in zip(g.shape, shape)):
            return None
        strides = tuple([s if m == k else 0 for s, m, k in zip(g.strides, g.shape, shape)])
    else:
        axes = _axes(axis, n)
        if g.shape != tuple([k for i, k in enumerate(shape) if i not in axes]):
            return None
        kept = iter(g.strides)
        strides = tuple([0 if k in axes else next(kept) for k in range(n)])
    view = np.ndarray(shape, g.dtype, buffer=g, strides=strides)
    view.flags.writeable = False
    return view


def _small(shape):
    size = 1
    for n in shape:
        size *= n
    return size <= 4096


# The array methods are NumPy's functions without their dispatch layer: the same results in half
# the time on small arrays, where every operation's fixed cost counts.
_add_reduce = np.add.reduce


def _sum(x, axis=None, keepdims=False):
    if type(x) is np.ndarray:   # ndarray.sum's own body, without its Python-level layer
        return _add_reduce(x, axis=axis, keepdims=keepdims)
    if is_foreign(x):   # unbroadcast's sum, in the operand's namespace (core/namespace.py)
        return namespace(x).sum(x, axis=axis, keepdims=keepdims)
    return np.sum(x, axis=axis, keepdims=keepdims)


_maximum_reduce, _minimum_reduce = np.maximum.reduce, np.minimum.reduce


def _max(x, axis=None, keepdims=False):
    if type(x) is np.ndarray and x.size:   # ndarray.max's own body (an empty x: its error)
        return _maximum_reduce(x, axis=axis, keepdims=keepdims)
    return np.max(x, axis=axis, keepdims=keepdims)


def _min(x, axis=None, keepdims=False):
    if type(x) is np.ndarray and x.size:
        return _minimum_reduce(x, axis=axis, keepdims=keepdims)
    return np.min(x, axis=axis, keepdims=keepdims)


def _tie_shares(ans, x, axis, keepdims):
    """1/count at the elements equal to their lane's extremum, 0 elsewhere (a constant)."""
    dtype = np.result_type(unbox(x), np.float16)
    if type(x) is Tracer or type(ans) is Tracer:
        # traced (inside vmap, the values carry batch axes that ``axis`` does not count): the same
        # steps as primitives, which shift the axes; the comparison makes the shares constants
        selected = _equal(x, _expand_to(ans, x.shape, axis, keepdims))
        count = sum_(selected, axis=axis, keepdims=True)
        return astype(selected / count, dtype=dtype)
    selected = x == _expand_to(ans, x.shape, axis, keepdims)
    count = np.sum(selected, axis=axis, keepdims=True)
    return (selected / count).astype(dtype, copy=False)


_equal = nondiff(np.equal)


def _kept_shape(shape, axis):
    """``shape`` with the axes a reduction over ``axis`` (not None) removed put back as size 1."""
    axes = _axes(axis, len(shape))
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _kept(v, shape, axis, keepdims):
    """A plain reduction result ``v`` over x of ``shape`` with its reduced axes put back as size 1
    (broadcasts against x). A reshape: np.expand_dims's checks cost more than the work here."""
    if keepdims or axis is None:
        return v   # a full reduction's 0-d result broadcasts as it is
    return np.reshape(v, _kept_shape(shape, axis))


def _extremum_vjp(g, ans, x, axis=None, keepdims=False):
    if type(g) is not Tracer and type(x) is np.ndarray and type(ans) is not Tracer:
        # plain values: the comparison, one count and one product, in x's dtype (no float64
        # temporaries, no broadcast copy of g: the product broadcasts it)
        if axis is not None and not keepdims:   # the reduced axes back as size 1 (_kept, the shape found once)
            kept = _kept_shape(x.shape, axis)
            ans, g = np.reshape(ans, kept), np.reshape(g, kept)
        selected = x == ans
        dtype = x.dtype if x.dtype.kind == "f" else np.result_type(x, np.float16)
        count = np.add.reduce(selected, axis=axis, keepdims=True, dtype=dtype)
        if type(g) is not np.ndarray:
            g = np.asarray(g)
        if g.dtype != dtype:
            g = g.astype(dtype)
        return selected * np.divide(g, count, dtype=dtype)
    return _expand_to(g, _shape(x), axis, keepdims) * _tie_shares(ans, x, axis, keepdims)


def _extremum_jvp(t, ans, x, axis=None, keepdims=False):
    """The selected elements' tangents, averaged over ties (the VJP's shares, transposed)."""
    return sum_(t * _tie_shares(ans, x, axis, keepdims), axis=axis, keepdims=keepdims)


sum_ = defprim(_sum, lambda g, ans, x, axis=None, keepdims=False: _expand_to(g, x.shape, axis, keepdims),
               name="sum", linear=True, batch=reduction_rule, batched_vjp=True)
max_ = defprim(_max, _extremum_vjp, name="max", jvp=_extremum_jvp, batch=reduction_rule, batched_vjp=True)


# float32/float64 arrays reduce with np.add.reduce and divide in place: the same calls (so the same
# bits) as NumPy's own mean and var, without their Python layer, which costs several times the
# arithmetic on the small arrays of per-column loops. Other dtypes (float16 accumulates in float32)
# and empty reductions (a warning and nan) take NumPy's functions.
_REAL_FAST = frozenset(np.dtype(t) for t in (np.float32, np.float64))


def _mean_of_array(x, axis, keepdims, count):
    total = np.add.reduce(x, axis=axis, keepdims=keepdims)
    if type(total) is np.ndarray:
        total /= count
        return total
    return total.dtype.type(total / count)


def _mean(x, axis=None, keepdims=False):
    if type(x) is np.ndarray:
        if x.dtype in _REAL_FAST and x.size:
            return _mean_of_array(x, axis, keepdims, _reduced_size(x.shape, axis))
        return x.mean(axis=axis, keepdims=keepdims)
    return np.mean(x, axis=axis, keepdims=keepdims)


def _reduced_size(shape, axis):
    """How many elements each result of reducing ``shape`` over ``axis`` averages (Python ints)."""
    n = 1
    for a in (range(len(shape)) if axis is None else axis):
        n *= shape[a]
    return n


def _mean_vjp(g, ans, x, axis=None, keepdims=False):
    shape = _shape(x)  # one example's under vmap
    return _expand_to(g / _reduced_size(shape, axis), shape, axis, keepdims)


# one tape entry (not a sum and a division); ``axis`` is a sorted tuple or None, as for sum
mean = defprim(_mean, _mean_vjp, name="mean", linear=True, batch=reduction_rule, batched_vjp=True)
min_ = defprim(_min, _extremum_vjp, name="min", jvp=_extremum_jvp, batch=reduction_rule, batched_vjp=True)


def _var(x, axis=None, ddof=0, keepdims=False):
    if type(x) is np.ndarray:
        if x.dtype in _REAL_FAST and x.size:
            count = _reduced_size(x.shape, axis)
            if count > ddof:
                squares = _centered(x, axis, count)
                squares *= squares
                return _mean_of_array(squares, axis, keepdims, count - ddof)
        return x.var(axis=axis, ddof=ddof, keepdims=keepdims)
    return np.var(x, axis=axis, ddof=ddof, keepdims=keepdims)


def _centered(x, axis, count):
    """``x - mean(x, axis, keepdims=True)`` of a float32/float64 array, as NumPy's var computes it."""
    return x - _mean_of_array(x, axis, True, count)


def _var_scale(shape, axis, ddof):
    """``2 / (n - ddof)``, the derivative's factor (inf where NumPy's variance divides by 0)."""
    count = _reduced_size(shape, axis) - ddof
    return 2.0 / count if count else np.inf


def _var_vjp(g, ans, x, axis=None, ddof=0, keepdims=False):
    """``g * 2 (x - mean(x)) / (n - ddof)``, the composition's rules in one (real x)."""
    if type(g) is not Tracer and type(x) is np.ndarray:
        centered = _centered(x, axis, _reduced_size(x.shape, axis)) if x.dtype in _REAL_FAST and x.size \
            else x - x.mean(axis=axis, keepdims=True)
        centered *= _kept(np.asarray(g), x.shape, axis, keepdims) * _var_scale(x.shape, axis, ddof)
        return centered
    shape = _shape(x)  # one example's under vmap
    centered = x - mean(x, axis=axis, keepdims=True)
    return _expand_to(g, shape, axis, keepdims) * centered * _var_scale(shape, axis, ddof)


def _var_jvp(t, ans, x, axis=None, ddof=0, keepdims=False):
    centered = x - mean(x, axis=axis, keepdims=True)
    return sum_(centered * t, axis=axis, keepdims=keepdims) * _var_scale(_shape(x), axis, ddof)


# the variance of real values, one tape entry (not a mean, a difference, a product, a sum and a
# division); ``axis`` is a sorted tuple or None, as for mean. Complex values take the composition
# in ``wengert.numpy.var``.
var = defprim(_var, _var_vjp, name="var", jvp=_var_jvp, batch=reduction_rule, batched_vjp=True)


def _prod(x, axis=None, keepdims=False):
    return np.prod(x, axis=axis, keepdims=keepdims)


def _others(x, axis):
    """The product of all *other* elements of each lane: exclusive cumulative products, safe at zeros."""
    shape = _shape(x)  # one example's under vmap
    axes = _axes(axis, len(shape))
    rest = tuple(a for a in range(len(shape)) if a not in axes)
    moved = sh.transpose(x, axes=rest + axes)
    flat = sh.reshape(moved, shape=tuple(shape[a] for a in rest) + (-1,))
    others = _exclusive_cumprod(flat) * sh.flip(_exclusive_cumprod(sh.flip(flat, axis=-1)), axis=-1)
    others = sh.reshape(others, shape=moved.shape)
    return sh.transpose(others, axes=tuple(np.argsort(rest + axes)))


def _exclusive_cumprod(x):
    """[1, x0, x0 x1, ...] along the last axis."""
    ones = np.ones(_shape(x)[:-1] + (1,), unbox(x).dtype)
    return cumprod(concatenate(ones, getitem(x, index=(Ellipsis, slice(None, -1))), axis=-1), axis=-1)


def _shape(x):
    return tuple(x.shape) if type(x) is Tracer else np.shape(x)


@elementwise_constant
def _is_zero(x):
    return x == 0


@elementwise_constant
def _subnormal(x):
    """Zero or too small for 1/x to be finite."""
    return np.abs(x) < np.finfo(x.dtype).tiny


@elementwise_constant
def _first(small, seen):
    return small & (seen == 1)


@elementwise_constant
def _lane_rank(seen, zero):
    """m at a lane's m-th zero, 0 elsewhere."""
    return seen * zero


def _prod_vjp(g, ans, x, axis=None, keepdims=False):
    if type(g) is not Tracer and type(x) is np.ndarray and type(ans) is not Tracer and x.size:
        # plain values whose every 1/x and the products are normal numbers: g * ans / x, in one
        # pass (the exclusive products below are for zeros, underflow and higher orders)
        tiny = np.finfo(x.dtype).tiny
        ans = np.asarray(ans)
        if np.abs(x).min() >= tiny and np.abs(ans).min() >= tiny:
            return _kept(np.asarray(g), x.shape, axis, keepdims) * _kept(ans, x.shape, axis, keepdims) / x
    return _expand_to(g, _shape(x), axis, keepdims) * _others(x, axis)


def _prod_jvp(t, ans, x, axis=None, keepdims=False):
    """sum(t * product of the others): ans * sum(t / x) when every 1/x is finite (no zero or
    subnormal element), else the VJP's zero-safe products."""
    plain = unbox(x)  # the whole batch under vmap: the zero-safe products are right for all examples
    if not plain.size:
        return None
    if not staged(x) and np.abs(plain).min() >= np.finfo(plain.dtype).tiny:  # jit: the general one
        return ans * sum_(t / x, axis=axis, keepdims=keepdims)
    return sum_(t * _others(x, axis), axis=axis, keepdims=keepdims)


prod = defprim(_prod, _prod_vjp, jvp=_prod_jvp, batch=reduction_rule, batched_vjp=True)


def _cumsum(x, axis):
    return np.cumsum(x, axis=axis)


def _reverse_cumsum(g, axis):
    if type(g) is np.ndarray:
        backwards = (slice(None),) * (axis % g.ndim) + (slice(None, None, -1),)
        return g[backwards].cumsum(axis=axis)[backwards]
    return flip(cumsum(flip(g, axis=axis), axis=axis), axis=axis)


cumsum = defprim(_cumsum, lambda g, ans, x, axis: _reverse_cumsum(g, axis), linear=True,
                 batch=scan_rule, batched_vjp=True)


def _cumprod(x, axis):
    return np.cumprod(x, axis=axis)


def _cumprod_vjp(g, ans, x, axis):
    """sum_{k>=j} g_k ans_k / x_j where x_j != 0. At a zero x_j that division is 0/0, so the
    product without x_j is recomputed: one O(n) cumprod per zero rank along the axis (the m-th
    zeros of all lanes together). Written with wengert ops, so it can be differentiated again."""
    if not staged(x) and not np.any(unbox(x) == 0):  # the whole batch under vmap
        return _reverse_cumsum(g * ans, axis) / x
    zero = _is_zero(x)
    out = where(zero, 0, _reverse_cumsum(g * ans, axis) / where(zero, 1, x))
    rank = _lane_rank(cumsum(zero, axis=axis), zero)
    # the batch's most zeros in a lane; under jit, any number up to the lane's length
    most = _shape(x)[axis] if staged(x) else int(np.max(unbox(rank)))
    for m in range(1, most + 1):
        at = _equal(rank, m)
        out = out + where(at, _reverse_cumsum(g * cumprod(where(at, 1, x), axis=axis), axis), 0)
    return out


def _cumprod_jvp(t, ans, x, axis):
    """ans_k sum_{j<=k} t_j / x_j. From a lane's first zero z on, ans is 0 and the one surviving
    term is t_z times the other factors: the cumprod with x_z replaced by t_z (0 after a second
    zero). A subnormal x_z (1/x_z overflows) is taken as a zero: the terms dropped are O(x_z)."""
    plain = unbox(x)  # the whole batch under vmap: the masked formula is right for all examples
    if not staged(x) and not (np.abs(plain) < np.finfo(plain.dtype).tiny).any():
        return ans * cumsum(t / x, axis=axis)
    small = _subnormal(x)
    seen = cumsum(small, axis=axis)
    before = ans * cumsum(t / where(small, 1, x), axis=axis)
    return where(_is_zero(seen), before, cumprod(where(_first(small, seen), t, x), axis=axis))


cumprod = defprim(_cumprod, _cumprod_vjp, jvp=_cumprod_jvp, batch=scan_rule, batched_vjp=True)

"""The rest of NumPy's surface, written with NumPy's signatures as compositions of the table.

Each function here hands plain arguments to NumPy itself (``@traceable``) and, given traced ones,
composes primitives that already carry every rule (VJP, JVP, batching), so each one is
differentiable in both modes, to any order and under vmap without rules of its own. Values and
dtypes are NumPy's; indices and masks are read from the values (no derivative flows through a
comparison), as NumPy computes them.
"""
from __future__ import annotations

import builtins
import functools
import importlib
import operator

import numpy as np

from ..core.namespace import refuse_data_dependent as _refuse_data_dependent
from ..core.trace import Tracer, dtype_of, unbox
from ..primitives import elementwise as E
from ..primitives import scatter as _scatter
from ..primitives._batching import NeedsLoop as _NeedsLoop
from ..primitives._table import constant, elementwise_constant, nondiff, unbox_all
from . import _functions as F
from ._functions import traceable

# the sibling module wengert.numpy.linalg (``from . import linalg`` would find numpy.linalg, which
# the package namespace binds first)
_linalg = importlib.import_module(f"{__package__}.linalg")

_NO_VALUE = np._NoValue
_ndim, _shape = F._ndim, F._shape
_operand = F.as_traced_operand


def _traceable_lists(np_fn):
    """Like ``traceable``, for functions whose list arguments are lists of separate arrays (of
    different shapes), which must not be stacked into one."""
    def decorate(fn):
        @functools.wraps(np_fn)
        def call(*args, **kwargs):
            if F._has_tracer(args, kwargs):
                return fn(*args, **kwargs)
            return np_fn(*args, **kwargs)

        call.traced_body = fn
        return call

    return decorate


def _axis_slice(ndim, axis, index):
    """``index`` on ``axis`` of an array of ``ndim`` dimensions, everything on the others."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


# --- differences, integrals, series -------------------------------------------------------------
@traceable(np.diff)
def diff(a, n=1, axis=-1, prepend=_NO_VALUE, append=_NO_VALUE):
    a = _operand(a)
    nd = _ndim(a)
    if nd == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = axis % nd
    parts = []
    for extra in (prepend, a, append):
        if extra is a:
            parts.append(a)
        elif extra is not _NO_VALUE:
            extra = _operand(extra)
            if _ndim(extra) == 0:
                shape = list(_shape(a))
                shape[axis] = 1
                extra = F.broadcast_to(extra, tuple(shape))
            parts.append(extra)
    if len(parts) > 1:
        a = F.concatenate(parts, axis=axis)
    for _ in range(n):
        a = a[_axis_slice(nd, axis, slice(1, None))] - a[_axis_slice(nd, axis, slice(None, -1))]
    return a


@traceable(np.ediff1d)
def ediff1d(ary, to_end=None, to_begin=None):
    parts = [F.ravel(_operand(to_begin))] if to_begin is not None else []
    parts.append(diff(F.ravel(_operand(ary))))
    if to_end is not None:
        parts.append(F.ravel(_operand(to_end)))
    return F.concatenate(parts) if len(parts) > 1 else parts[0]


@traceable(np.gradient)
def gradient(f, *varargs, axis=None, edge_order=1):
    f = _operand(f)
    nd = _ndim(f)
    axes = tuple(range(nd)) if axis is None else F._norm_axis(axis, nd)
    if axis is not None and not isinstance(axis, (tuple, list)):
        axes = (axis % nd,)
    if len(varargs) == 0:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1 and _ndim(varargs[0]) == 0:
        spacings = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise TypeError("gradient: invalid number of arguments (one spacing, or one per axis)")
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    if not np.issubdtype(f.dtype, np.inexact):
        f = F.astype(f, np.float64)
    results = []
    for ax, h in zip(axes, spacings):
        n = _shape(f)[ax]
        if n < edge_order + 1:
            raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                             "(edge_order + 1) elements are required.")
        if _ndim(h) == 1:
            if _shape(h)[0] != n:
                raise ValueError("when 1d, distances must match the length of the corresponding dimension")
            h = diff(_operand(h))
            if np.issubdtype(dtype_of(h), np.integer):
                h = F.astype(h, np.float64)
        results.append(_gradient_along(f, h, ax, edge_order))
    return results[0] if len(results) == 1 else tuple(results)


def _gradient_along(f, h, axis, edge_order):
    nd = _ndim(f)

    def at(index):
        return f[_axis_slice(nd, axis, index)]

    def along(v):  # a 1-D vector of coefficients, laid along ``axis``
        shape = [1] * nd
        shape[axis] = -1
        return F.reshape(v, tuple(shape))

    uniform = _ndim(h) == 0
    if uniform:
        inner = (at(slice(2, None)) - at(slice(None, -2))) / (2.0 * h)
    else:
        dx1, dx2 = h[:-1], h[1:]
        a = -dx2 / (dx1 * (dx1 + dx2))
        b = (dx2 - dx1) / (dx1 * dx2)
        c = dx1 / (dx2 * (dx1 + dx2))
        inner = along(a) * at(slice(None, -2)) + along(b) * at(slice(1, -1)) + along(c) * at(slice(2, None))
    if edge_order == 1:
        first = (at(slice(1, 2)) - at(slice(0, 1))) / (h if uniform else h[0])
        last = (at(slice(-1, None)) - at(slice(-2, -1))) / (h if uniform else h[-1])
    else:
        if uniform:
            a, b, c = -1.5 / h, 2.0 / h, -0.5 / h
        else:
            dx1, dx2 = h[0], h[1]
            a = -(2.0 * dx1 + dx2) / (dx1 * (dx1 + dx2))
            b = (dx1 + dx2) / (dx1 * dx2)
            c = -dx1 / (dx2 * (dx1 + dx2))
        first = a * at(slice(0, 1)) + b * at(slice(1, 2)) + c * at(slice(2, 3))
        if uniform:
            a, b, c = 0.5 / h, -2.0 / h, 1.5 / h
        else:
            dx1, dx2 = h[-2], h[-1]
            a = dx2 / (dx1 * (dx1 + dx2))
            b = -(dx2 + dx1) / (dx1 * dx2)
            c = (2.0 * dx2 + dx1) / (dx2 * (dx1 + dx2))
        last = a * at(slice(-3, -2)) + b * at(slice(-2, -1)) + c * at(slice(-1, None))
    return F.concatenate([first, inner, last], axis=axis)


@traceable(np.trapezoid)
def trapezoid(y, x=None, dx=1.0, axis=-1):
    y = _operand(y)
    nd = _ndim(y)
    axis = axis % nd
    if x is None:
        d = dx
    else:
        x = _operand(x)
        d = diff(x, axis=-1 if _ndim(x) == 1 else axis)
        if _ndim(x) == 1:
            shape = [1] * nd
            shape[axis] = _shape(d)[0]
            d = F.reshape(d, tuple(shape))
    pairs = y[_axis_slice(nd, axis, slice(1, None))] + y[_axis_slice(nd, axis, slice(None, -1))]
    return F.sum(d * pairs / 2.0, axis=axis)


@traceable(np.polyval)
def polyval(p, x):
    p, x = _operand(p), _operand(x)
    y = F.zeros_like(x)
    for i in range(_shape(p)[0]):
        y = y * x + p[i]
    return y


@traceable(np.vander)
def vander(x, N=None, increasing=False):  # noqa: N803 - NumPy's name
    x = _operand(x)
    if _ndim(x) != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    n = _shape(x)[0] if N is None else N
    powers = np.arange(n) if increasing else np.arange(n - 1, -1, -1)
    return E.power(F.reshape(x, (-1, 1)), powers)


@traceable(np.polyfit)
def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    F._unsupported("polyfit", full=full, cov=cov)
    x, y = _operand(x), _operand(y)
    order = int(deg) + 1
    if _ndim(x) != 1 or _ndim(y) not in (1, 2) or _shape(x)[0] != _shape(y)[0]:
        raise TypeError("polyfit: x must be 1-D and y 1-D or 2-D with as many rows as x")
    if rcond is None:
        rcond = _shape(x)[0] * np.finfo(x.dtype if np.issubdtype(x.dtype, np.inexact) else float).eps
    lhs, rhs = vander(x, order), y
    if w is not None:
        w = _operand(w)
        lhs = lhs * F.reshape(w, (-1, 1))
        rhs = rhs * (w if _ndim(rhs) == 1 else F.reshape(w, (-1, 1)))
    scale = F.sqrt(F.sum(lhs * lhs, axis=0))
    coefficients = _linalg.lstsq(lhs / scale, rhs, rcond)[0]
    return coefficients / (scale if _ndim(coefficients) == 1 else F.reshape(scale, (-1, 1)))


@traceable(np.convolve)
def convolve(a, v, mode="full"):
    a, v = _operand(a), _operand(v)
    if _ndim(a) != 1 or _ndim(v) != 1:
        raise ValueError("object too deep for desired array")
    n, m = _shape(a)[0], _shape(v)[0]
    if n == 0 or m == 0:
        raise ValueError("convolve: inputs cannot be empty")
    if m > n:  # convolution commutes: slide the shorter one, as NumPy does
        a, v, n, m = v, a, m, n
    # full[k] = sum_j a[k - j] v[j]: one gather of the shifted copies of a (zero outside)
    padded = F.pad(a, (m - 1, m - 1))
    index = np.arange(n + m - 1)[:, None] + (m - 1 - np.arange(m))[None, :]
    full = F.dot(padded[index], v)
    if mode == "full":
        return full
    if mode == "same":
        start = (m - 1) // 2
        return full[start:start + n]
    if mode == "valid":
        return full[m - 1:n]
    raise ValueError(f"mode must be one of 'full', 'same', or 'valid', not {mode!r}")


@traceable(np.correlate)
def correlate(a, v, mode="valid"):
    a, v = _operand(a), _operand(v)
    if _ndim(a) != 1 or _ndim(v) != 1:
        raise ValueError("object too deep for desired array")
    n, m = _shape(a)[0], _shape(v)[0]
    if m > n:  # NumPy swaps the two and reverses the result
        return F.flip(correlate(v, a, mode)) if not np.iscomplexobj(unbox(a)) else \
            F.flip(F.conj(correlate(v, a, mode)))
    return convolve(a, F.flip(F.conj(v)), mode)


def _gather(values, index):
    return values[index]


_gather_constant = nondiff(_gather)


def _read(values, index):
    """``values[index]``; a constant array read at indices vmap batches goes through ``nondiff``."""
    return values[index] if type(values) is Tracer or type(index) is not Tracer else _gather_constant(values, index)


@traceable(np.interp)
def interp(x, xp, fp, left=None, right=None, period=None):
    x, xp, fp = _operand(x), _operand(xp), _operand(fp)
    if _ndim(xp) != 1 or _ndim(fp) != 1:
        raise ValueError("Data points must be 1-D sequences")
    if _shape(xp)[0] != _shape(fp)[0]:
        raise ValueError("fp and xp are not of the same length")
    if period is not None:
        if period == 0:
            raise ValueError("period must be a non-zero value")
        period = builtins.abs(period)
        left = right = None
        x = x % period
        xp = xp % period
        order = F.argsort(xp)
        xp, fp = xp[order], fp[order]
        xp = F.concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = F.concatenate([fp[-1:], fp, fp[:1]])
    n = _shape(xp)[0]
    if n == 1:
        inside = F.broadcast_to(fp[0], _shape(x))
    else:
        j = F.clip(F.searchsorted(xp, x, side="right") - 1, 0, n - 2)
        x0, x1, f0, f1 = _read(xp, j), _read(xp, j + 1), _read(fp, j), _read(fp, j + 1)
        inside = f0 + (f1 - f0) / (x1 - x0) * (x - x0)
        inside = F.where(x == x1, f1, inside)  # NumPy's exact value at a knot
    low = fp[0] if left is None else left
    high = fp[-1] if right is None else right
    out = F.where(x < xp[0], low, F.where(x > xp[-1], high, inside))
    if not np.iscomplexobj(unbox(fp)) and dtype_of(out) != np.float64:
        out = F.astype(out, np.float64)
    return out


@traceable(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = F.moveaxis(_operand(a), axisa, -1), F.moveaxis(_operand(b), axisb, -1)
    da, db = _shape(a)[-1], _shape(b)[-1]
    if da not in (2, 3) or db not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n(dimension must be 2 or 3)")
    a0, a1, b0, b1 = a[..., 0], a[..., 1], b[..., 0], b[..., 1]
    cz = a0 * b1 - a1 * b0
    if da == 2 and db == 2:
        return cz
    if da == 3 and db == 3:
        a2, b2 = a[..., 2], b[..., 2]
        cx, cy = a1 * b2 - a2 * b1, a2 * b0 - a0 * b2
    elif da == 2:  # a's third component is 0
        b2 = b[..., 2]
        cx, cy = a1 * b2, -a0 * b2
    else:
        a2 = a[..., 2]
        cx, cy = -a2 * b1, a2 * b0
    out = F.stack(list(F.broadcast_arrays(cx, cy, cz)), axis=-1)
    return F.moveaxis(out, -1, axisc)


def _unwrap_correction(p, discont, axis, period):
    return np.unwrap(p, discont=discont, axis=axis, period=period) - p


_unwrap_steps = nondiff(_unwrap_correction)


@traceable(np.unwrap)
def unwrap(p, discont=None, axis=-1, *, period=2 * np.pi):
    """``p`` plus the multiples of ``period`` NumPy adds: constant steps, so the derivative is 1."""
    p = _operand(p)
    return p + _unwrap_steps(p, discont=discont, axis=axis, period=period)


# --- assembly and shape -------------------------------------------------------------------------
@traceable(np.append)
def append(arr, values, axis=None):
    arr, values = _operand(arr), _operand(values)
    if axis is None:
        return F.concatenate([F.ravel(arr), F.ravel(values)])
    return F.concatenate([arr, values], axis=axis)


@traceable(np.rot90)
def rot90(m, k=1, axes=(0, 1)):
    m = _operand(m)
    nd = _ndim(m)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    a0, a1 = axes[0] % nd, axes[1] % nd
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k %= 4
    if k == 0:
        return m
    if k == 2:
        return F.flip(F.flip(m, a0), a1)
    order = list(range(nd))
    order[a0], order[a1] = order[a1], order[a0]
    if k == 1:
        return F.transpose(F.flip(m, a1), order)
    return F.flip(F.transpose(m, order), a1)


@traceable(np.rollaxis)
def rollaxis(a, axis, start=0):
    nd = _ndim(a)
    axis = axis % nd
    if not -nd <= start <= nd:
        raise np.exceptions.AxisError(f"rollaxis: start {start} out of range for {nd} dimensions")
    start = start % (nd + 1) if start < 0 else start
    if axis < start:
        start -= 1
    if axis == start:
        return a
    order = list(range(nd))
    order.remove(axis)
    order.insert(start, axis)
    return F.transpose(a, order)


@traceable(np.dsplit)
def dsplit(ary, indices_or_sections):
    if _ndim(ary) < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return F.split(ary, indices_or_sections, axis=2)


@traceable(np.meshgrid)
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    nd = len(xi)
    out = []
    for i, x in enumerate(xi):
        shape = [1] * nd
        shape[i] = -1
        out.append(F.reshape(_operand(x), tuple(shape)))
    if indexing == "xy" and nd > 1:
        out = [F.swapaxes(x, 0, 1) for x in out]
    if not sparse:
        out = list(F.broadcast_arrays(*out))
    return tuple(out)


def _block_depth(x):
    return 1 + _block_depth(x[0]) if type(x) is list else 0


def _block_contains_tracer(x):
    return builtins.any(_block_contains_tracer(v) for v in x) if type(x) is list else type(x) is Tracer


def _block_ndim(x):
    return builtins.max(_block_ndim(v) for v in x) if type(x) is list else _ndim(x)


def _block(x, depth, ndim):
    if type(x) is not list:
        x = _operand(x)
        return F.reshape(x, (1,) * (ndim - _ndim(x)) + _shape(x))
    return F.concatenate([_block(v, depth - 1, ndim) for v in x], axis=-depth)


def block(arrays):
    """``np.block``: nested lists join along the last axes, innermost list along the last."""
    if not _block_contains_tracer(arrays):
        return np.block(arrays)
    depth = _block_depth(arrays)
    return _block(arrays, depth, builtins.max(depth, _block_ndim(arrays)))


class _Concatenator:
    """``r_`` and ``c_``: NumPy's index tricks, with traced pieces joined by ``concatenate``."""

    def __init__(self, numpy_object, axis, ndmin, trans1d):
        self._numpy, self.axis, self.ndmin, self.trans1d = numpy_object, axis, ndmin, trans1d

    def __len__(self):
        return 0

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if not builtins.any(_contains(k) for k in key):
            return self._numpy[key]
        axis, ndmin, trans1d = self.axis, self.ndmin, self.trans1d
        pieces, kinds = [], []
        for k, item in enumerate(key):
            if isinstance(item, str):
                if k != 0:
                    raise ValueError("special directives must be the first entry.")
                if item in ("r", "c"):
                    raise NotImplementedError("wengert.numpy.r_: the matrix directives 'r' and 'c' build "
                                              "np.matrix, which has no traced version; use arrays")
                numbers = [int(v) for v in item.split(",")]
                axis, ndmin, trans1d = (numbers + [ndmin, trans1d][len(numbers) - 1:])[:3]
                continue
            if isinstance(item, slice):
                item = self._numpy[item]  # a range: constant, built by NumPy
            kinds.append(item if type(item) in np.ScalarType else dtype_of(item))
            piece = _operand(item)
            item_ndim = _ndim(piece)
            if item_ndim < ndmin:
                piece = F.reshape(piece, (1,) * (ndmin - item_ndim) + _shape(piece))
                if trans1d != -1:
                    k2, k1 = ndmin - item_ndim, trans1d
                    if k1 < 0:
                        k1 += k2 + 1
                    axes = list(range(ndmin))
                    piece = F.transpose(piece, axes[:k1] + axes[k2:] + axes[k1:k2])
            pieces.append(piece)
        dtype = np.result_type(*kinds)
        pieces = [F.astype(p, dtype) if dtype_of(p) != dtype else p for p in pieces]
        return F.concatenate([F.atleast_1d(p) for p in pieces], axis=axis)


def _contains(item):
    return F.contains_tracer(item)


r_ = _Concatenator(np.r_, axis=0, ndmin=1, trans1d=-1)
c_ = _Concatenator(np.c_, axis=-1, ndmin=2, trans1d=0)


@traceable(np.apply_along_axis)
def apply_along_axis(func1d, axis, arr, *args, **kwargs):
    arr = _operand(arr)
    nd = _ndim(arr)
    axis = axis % nd
    moved = F.moveaxis(arr, axis, -1)
    outer = _shape(moved)[:-1]
    results = [_operand(func1d(moved[index], *args, **kwargs)) for index in np.ndindex(*outer)]
    if not results:
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    inner = _shape(results[0])
    out = F.reshape(F.stack(results), outer + inner)
    # the function's result axes take the place of ``axis``
    order = list(range(axis)) + list(range(len(outer), len(outer) + len(inner))) + list(range(axis, len(outer)))
    return F.transpose(out, order)


@traceable(np.apply_over_axes)
def apply_over_axes(func, a, axes):
    a = _operand(a)
    for axis in (axes,) if np.ndim(axes) == 0 else axes:
        axis = axis % _ndim(a)
        result = func(a, axis)
        if _ndim(result) == _ndim(a):
            a = result
        elif _ndim(result) == _ndim(a) - 1:
            a = F.expand_dims(result, axis)
        else:
            raise ValueError("function is not returning an array of the correct shape")
    return a


@_traceable_lists(np.select)
def select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(choicelist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    dtype = np.result_type(*[dtype_of(c) for c in choicelist], dtype_of(default))
    out = default
    for condition, choice in zip(reversed(list(condlist)), reversed(list(choicelist))):
        out = F.where(condition, choice, out)  # the first true condition wins
    shape = np.broadcast_shapes(*[_shape(c) for c in condlist], *[_shape(c) for c in choicelist])
    out = F.broadcast_to(out, shape)
    return F.astype(out, dtype) if dtype_of(out) != dtype else out


@traceable(np.piecewise)
def piecewise(x, condlist, funclist, *args, **kw):
    """Each function sees only the elements its condition selects, as in NumPy (so a function
    undefined elsewhere gives no nan there); the pieces are written in with ``scatter_set``."""
    x = _operand(x)
    if np.isscalar(condlist) or (not isinstance(condlist[0], (list, np.ndarray, Tracer)) and _ndim(x) != 0):
        condlist = [condlist]
    conditions = [unbox_all(c) for c in condlist]
    if builtins.any(type(c) is Tracer for c in conditions):  # batched by vmap
        raise _NeedsLoop("piecewise: conditions that differ per example select different elements in each "
                        "example, so each example is computed on its own")
    conditions = [np.broadcast_to(np.asarray(c, dtype=bool), _shape(x)) for c in conditions]
    if len(funclist) == len(conditions) + 1:  # the last function covers where no condition holds
        conditions.append(~np.any(conditions, axis=0))
    elif len(funclist) != len(conditions):
        raise ValueError(f"with {len(conditions)} condition(s), either {len(conditions)} or "
                         f"{len(conditions) + 1} functions are expected")
    dtype = dtype_of(x)
    out = np.zeros(_shape(x), dtype)
    for condition, fn in zip(conditions, funclist):
        if not condition.any():
            continue
        value = fn(x[condition], *args, **kw) if callable(fn) else fn
        value = F.broadcast_to(_operand(value), (int(condition.sum()),))
        if type(out) is Tracer or type(value) is Tracer:
            if dtype_of(value) != dtype:
                value = F.astype(value, dtype)
            out = _scatter.scatter_set(out, value, index=condition)
        else:
            out = out.copy()
            out[condition] = value
    return out


# --- elementwise ------------------------------------------------------------------------------------
def _sinc_small(x):
    y = np.pi * x
    return np.abs(y) < 1e-3


_sinc_is_small = elementwise_constant(_sinc_small)


@traceable(np.sinc)
def sinc(x):
    x = _operand(x)
    small = _sinc_is_small(x)
    y = np.pi * F.where(small, 1.0, x)  # away from 0 in the branch that is not taken
    y2 = (np.pi * x) * (np.pi * x)
    taylor = 1.0 - y2 / 6.0 + y2 * y2 / 120.0  # every derivative right at and near 0
    return F.where(small, taylor, E.sin(y) / y)


def _nan_to_num_limits(dtype, nan, posinf, neginf):
    info = np.finfo(dtype)
    return nan, info.max if posinf is None else posinf, info.min if neginf is None else neginf


@traceable(np.nan_to_num)
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = _operand(x)
    if not np.issubdtype(x.dtype, np.inexact):
        return x
    if np.iscomplexobj(unbox(x)):
        parts = [nan_to_num(F.real(x), nan=nan, posinf=posinf, neginf=neginf),
                 nan_to_num(F.imag(x), nan=nan, posinf=posinf, neginf=neginf)]
        return parts[0] + 1j * parts[1]
    nan, posinf, neginf = _nan_to_num_limits(x.dtype, nan, posinf, neginf)
    out = F.where(F.isnan(x), nan, x)
    out = F.where(isposinf(x), posinf, out)
    out = F.where(isneginf(x), neginf, out)
    return F.astype(out, x.dtype) if dtype_of(out) != x.dtype else out


@traceable(np.real_if_close)
def real_if_close(a, tol=100):
    a = _operand(a)
    if not np.iscomplexobj(unbox(a)):
        return a
    eps = np.finfo(unbox(a).real.dtype).eps
    tol = tol * eps if tol > 1 else tol
    if np.all(np.abs(np.imag(unbox(a))) < tol):  # the whole value (every example under vmap)
        return F.real(a)
    return a


@traceable(np.copysign)
def copysign(x1, x2, /):
    x1 = _operand(x1)
    magnitude = E.absolute(x1)
    return F.where(F.signbit(x2), -magnitude, magnitude)


def _elementwise_nondiff(np_fn):
    """``np_fn`` without a derivative, batched by vmap as the elementwise function it is."""
    def fn(*args):
        return np_fn(*args)
    fn.elementwise = True
    fn.__name__ = fn.__qualname__ = np_fn.__name__
    return nondiff(fn)


isposinf = _elementwise_nondiff(np.isposinf)
isneginf = _elementwise_nondiff(np.isneginf)
isreal = _elementwise_nondiff(np.isreal)
iscomplex = _elementwise_nondiff(np.iscomplex)


def _power_of_two(x, exponent):
    return np.ldexp(np.ones_like(x), exponent)


def _frexp_exponent(x):
    return np.frexp(x)[1]


_scale_by_power_of_two = elementwise_constant(_power_of_two)
_exponent = elementwise_constant(_frexp_exponent)


@traceable(np.ldexp)
def ldexp(x1, x2, /):
    """``x1 * 2**x2``, exactly (a power of two scales without rounding)."""
    if not np.issubdtype(dtype_of(x2), np.integer):
        raise TypeError("ldexp: the exponent x2 must be an integer array")
    x1 = _operand(x1)
    return x1 * _scale_by_power_of_two(x1, x2)


@traceable(np.frexp)
def frexp(x, /):
    x = _operand(x)
    exponent = _exponent(x)
    return ldexp(x, -exponent), exponent


@traceable(np.modf)
def modf(x, /):
    x = _operand(x)
    whole = F.trunc(x)
    return x - whole, whole


# --- NumPy 2's array-API names --------------------------------------------------------------------
@traceable(np.matrix_transpose)
def matrix_transpose(x, /):
    if _ndim(x) < 2:
        raise ValueError("Input array must be at least 2-dimensional")
    return F.swapaxes(x, -1, -2)


@traceable(np.permute_dims)
def permute_dims(a, axes=None):
    return F.transpose(a, axes)


concat = F.concatenate


@traceable(np.unstack)
def unstack(x, /, *, axis=0):
    x = _operand(x)
    nd = _ndim(x)
    if nd == 0:
        raise ValueError("Input array must be at least 1-d.")
    axis = axis % nd
    return tuple(x[_axis_slice(nd, axis, i)] for i in range(_shape(x)[axis]))


@traceable(np.vecdot)
def vecdot(x1, x2, /, *, axis=-1, **kwargs):
    F._unsupported("vecdot", **kwargs)
    x1, x2 = _operand(x1), _operand(x2)
    return F.sum(F.conj(x1) * x2, axis=axis)


@traceable(np.matvec)
def matvec(x1, x2, /, **kwargs):
    F._unsupported("matvec", **kwargs)
    return F.matmul(x1, F.expand_dims(_operand(x2), -1))[..., 0]


@traceable(np.vecmat)
def vecmat(x1, x2, /, **kwargs):
    F._unsupported("vecmat", **kwargs)
    return F.matmul(F.expand_dims(F.conj(_operand(x1)), -2), x2)[..., 0, :]


def _cumulative(scan, name):
    @traceable(getattr(np, name))
    def cumulative(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        F._unsupported(name, out=out)
        x = _operand(x)
        if axis is None:
            if _ndim(x) > 1:
                raise ValueError(f"{name}: axis must be given for arrays of more than one dimension")
            axis = 0
        result = scan(x, axis=axis, dtype=dtype)
        if include_initial:
            shape = list(_shape(result))
            shape[axis % len(shape)] = 1
            start = F.zeros_like(result[_axis_slice(len(shape), axis % len(shape), slice(0, 1))])
            start = start + (0.0 if name == "cumulative_sum" else 1.0)
            result = F.concatenate([F.astype(start, dtype_of(result)), result], axis=axis)
        return result
    return cumulative


cumulative_sum = _cumulative(F.cumsum, "cumulative_sum")
cumulative_prod = _cumulative(F.cumprod, "cumulative_prod")



# --- ranges and special functions ---------------------------------------------------------------------
@traceable(np.linspace)
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    """Differentiable in ``start`` and ``stop``; NumPy's arithmetic (``start + k * step``, the last
    point exactly ``stop``)."""
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = (num - 1) if endpoint else num
    kind = np.result_type(*[dtype_of(v) if type(v) is Tracer or isinstance(v, np.ndarray) else v
                            for v in (start, stop)], float(num))
    start, stop = _operand(start), _operand(stop)
    delta = stop - start
    extra = np.broadcast_shapes(_shape(start), _shape(stop))
    steps = np.arange(num, dtype=kind).reshape((-1,) + (1,) * len(extra))
    if div > 0:
        step = delta / div
        y = steps * step if not np.any(unbox(step) == 0) else steps / div * delta
    else:
        step = np.nan
        y = steps * delta
    y = y + start
    if endpoint and num > 1:
        y = F.concatenate([y[:-1], F.expand_dims(F.broadcast_to(stop, extra), 0)])
    if axis != 0:
        y = F.moveaxis(y, 0, axis)
    if dtype is not None:
        if np.issubdtype(dtype, np.integer):
            y = F.floor(y)
        y = F.astype(y, dtype)
    return (y, step) if retstep else y


@traceable(np.logspace)
def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    y = linspace(start, stop, num=num, endpoint=endpoint, axis=axis)
    base = _operand(base)
    if _ndim(base) > 0:
        base = F.expand_dims(base, axis)
    out = E.power(base, y)
    return F.astype(out, dtype) if dtype is not None else out


@traceable(np.geomspace)
def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    start, stop = _operand(start), _operand(stop)
    if np.any(unbox(start) == 0) or np.any(unbox(stop) == 0):
        raise ValueError("Geometric sequence cannot include zero")
    if np.iscomplexobj(unbox(start)) or np.iscomplexobj(unbox(stop)):
        raise NotImplementedError("wengert.numpy.geomspace: complex end points are not supported on traced values")
    sign = np.sign(unbox_all(start))
    y = sign * E.exp(linspace(E.log(start * sign), E.log(stop * sign), num=num, endpoint=endpoint))
    if num > 0:  # NumPy's end points are exact
        y = F.concatenate([F.expand_dims(F.broadcast_to(start, _shape(y)[1:]), 0), y[1:]])
        if endpoint and num > 1:
            y = F.concatenate([y[:-1], F.expand_dims(F.broadcast_to(stop, _shape(y)[1:]), 0)])
    if axis != 0:
        y = F.moveaxis(y, 0, axis)
    return F.astype(y, dtype) if dtype is not None else y


@traceable(np.i0)
def i0(x):
    """The modified Bessel function I0 as the mean of ``exp(x cos t)`` over ``n`` equally spaced
    angles (the trapezoid rule, exact to rounding for a periodic integrand once ``n`` exceeds about
    ``9 sqrt|x|``): every derivative follows from exp's."""
    x = _operand(x)
    if np.iscomplexobj(unbox(x)):
        raise TypeError("i0 not supported for complex values")
    if not np.issubdtype(dtype_of(x), np.inexact):
        x = F.astype(x, np.float64)
    value = np.abs(unbox(x))
    n = 24 + int(9 * np.sqrt(float(np.max(value)) if value.size else 0.0))
    cosines = np.cos(2 * np.pi * np.arange(n) / n).astype(dtype_of(x))  # float32 stays float32, as in NumPy
    return F.mean(E.exp(F.expand_dims(x, -1) * cosines), axis=-1)


@traceable(np.kaiser)
def kaiser(M, beta):  # noqa: N803 - NumPy's name
    if M == 1:
        return np.ones(1, dtype=np.result_type(0.0, dtype_of(beta)))
    n = np.arange(0, M)
    alpha = (M - 1) / 2.0
    return i0(beta * np.sqrt(1 - ((n - alpha) / alpha) ** 2.0)) / i0(beta)


# --- conversions, selections, rearrangements ------------------------------------------------------
@traceable(np.asanyarray)
def asanyarray(a, dtype=None, order=None, *, like=None, **kwargs):
    return F.asarray(a, dtype=dtype)


@traceable(np.ascontiguousarray)
def ascontiguousarray(a, dtype=None, *, like=None):
    return F.asarray(a, dtype=dtype)


@traceable(np.asfortranarray)
def asfortranarray(a, dtype=None, *, like=None):
    return F.asarray(a, dtype=dtype)  # memory order is NumPy's business; the values are the same


@traceable(np.require)
def require(a, dtype=None, requirements=None, *, like=None):
    return F.asarray(a, dtype=dtype)


@traceable(np.asarray_chkfinite)
def asarray_chkfinite(a, dtype=None, order=None):
    a = F.asarray(a, dtype=dtype)
    if not np.all(np.isfinite(unbox(a))):
        raise ValueError("array must not contain infs or NaNs")
    return a


@traceable(np.full)
def full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    """Differentiable in ``fill_value``."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    out = F.broadcast_to(_operand(fill_value), shape) + 0  # a copy, as NumPy's
    return F.astype(out, dtype) if dtype is not None else out


@traceable(np.diagflat)
def diagflat(v, k=0):
    return F.diag(F.ravel(v), k)


@traceable(np.extract)
def extract(condition, arr):
    return F.ravel(arr)[np.ravel(np.asarray(unbox_all(condition))).astype(bool)]


@traceable(np.compress)
def compress(condition, a, axis=None, out=None):
    F._unsupported("compress", out=out)
    keep = np.flatnonzero(np.asarray(unbox_all(condition)))
    return F.take(a, keep, axis=axis)


@traceable(np.delete)
def delete(arr, obj, axis=None):
    arr = _operand(arr)
    if axis is None:
        arr, axis = F.ravel(arr), 0
    axis = axis % _ndim(arr)
    keep = np.delete(np.arange(_shape(arr)[axis]), unbox_all(obj))
    return F.take(arr, keep, axis=axis)


@traceable(np.insert)
def insert(arr, obj, values, axis=None):
    """NumPy's own insert applied to labels of the elements, then read: the same placement and
    broadcasting of ``values`` for every form of ``obj``."""
    arr, values = _operand(arr), _operand(values)
    size = int(np.prod(_shape(arr), dtype=np.int64))
    labels = np.arange(size).reshape(_shape(arr))
    value_labels = size + np.arange(int(np.prod(_shape(values), dtype=np.int64))).reshape(_shape(values))
    order = np.insert(labels, unbox_all(obj), value_labels, axis=axis)
    source = F.concatenate([F.ravel(arr), F.ravel(F.astype(values, dtype_of(arr)))])
    return source[order]


@traceable(np.resize)
def resize(a, new_shape):
    new_shape = (new_shape,) if isinstance(new_shape, (int, np.integer)) else tuple(new_shape)
    flat = F.ravel(a)
    total = int(np.prod(new_shape, dtype=np.int64))
    if total == 0 or _shape(flat)[0] == 0:
        return F.reshape(flat[:0], (0,)) if total == 0 else np.zeros(new_shape, dtype_of(a))
    copies = -(-total // _shape(flat)[0])
    return F.reshape(F.concatenate([flat] * copies)[:total], new_shape)


@_traceable_lists(np.choose)
def choose(a, choices, out=None, mode="raise"):
    F._unsupported("choose", out=out)
    if mode != "raise":
        raise NotImplementedError("wengert.numpy.choose: only mode='raise' is supported on traced values")
    index = np.asarray(unbox_all(a))
    pieces = F.broadcast_arrays(*[_operand(c) for c in choices], np.zeros(index.shape))[:-1]
    stacked = F.stack(pieces)
    index = np.broadcast_to(index, _shape(stacked)[1:])[None]
    return F.take_along_axis(stacked, index, axis=0)[0]


@traceable(np.sort_complex)
def sort_complex(a):
    a = _operand(a)
    out = F.take_along_axis(a, F.argsort(a, axis=-1), axis=-1)
    if np.iscomplexobj(unbox(a)):
        return out
    return F.astype(out, np.result_type(dtype_of(a), np.complex64))


@traceable(np.trim_zeros)
def trim_zeros(filt, trim="fb", axis=None):
    filt = _operand(filt)
    if _ndim(filt) != 1:
        raise NotImplementedError("wengert.numpy.trim_zeros: only 1-D arrays on traced values")
    if type(unbox_all(filt)) is Tracer:  # batched by vmap
        raise _NeedsLoop("trim_zeros: the trimmed length depends on each example's values, so each example "
                        "is computed on its own")
    nonzero = np.flatnonzero(unbox(filt))
    if nonzero.size == 0:
        return filt[:0]
    first = nonzero[0] if "f" in trim.lower() else 0
    last = nonzero[-1] + 1 if "b" in trim.lower() else _shape(filt)[0]
    return filt[first:last]


@traceable(np.divmod)
def divmod(x1, x2, /):  # noqa: A001 - NumPy's name
    return F.floor_divide(x1, x2), E.remainder(x1, x2)


# --- polynomials (coefficients, highest power first) ------------------------------------------------
def _poly_pad(p, n):
    p = F.atleast_1d(_operand(p))
    return F.concatenate([np.zeros(n - _shape(p)[0], dtype_of(p)), p]) if _shape(p)[0] < n else p


@traceable(np.polyadd)
def polyadd(a1, a2):
    n = builtins.max(_shape(F.atleast_1d(_operand(a1)))[0], _shape(F.atleast_1d(_operand(a2)))[0])
    return _poly_pad(a1, n) + _poly_pad(a2, n)


@traceable(np.polysub)
def polysub(a1, a2):
    n = builtins.max(_shape(F.atleast_1d(_operand(a1)))[0], _shape(F.atleast_1d(_operand(a2)))[0])
    return _poly_pad(a1, n) - _poly_pad(a2, n)


@traceable(np.polymul)
def polymul(a1, a2):
    return convolve(F.atleast_1d(_operand(a1)), F.atleast_1d(_operand(a2)))


@traceable(np.polyder)
def polyder(p, m=1):
    p = _operand(p)
    for _ in range(m):
        n = _shape(p)[0] - 1
        p = p[:-1] * np.arange(n, 0, -1) if n > 0 else p[:0] * 0
    return p if _shape(p)[0] else F.reshape(F.sum(p) * 0, (1,))


@traceable(np.polyint)
def polyint(p, m=1, k=None):
    p = _operand(p)
    constants = np.zeros(m) if k is None else k
    constants = F.atleast_1d(_operand(constants))
    if _shape(constants)[0] == 1 and m > 1:
        constants = F.broadcast_to(constants, (m,))
    for i in range(m):
        n = _shape(p)[0]
        p = F.concatenate([p / np.arange(n, 0, -1), F.reshape(constants[i], (1,))])
    return p


@traceable(np.poly)
def poly(seq_of_zeros):
    zeros = _operand(seq_of_zeros)
    if _ndim(zeros) == 2 and _shape(zeros)[0] == _shape(zeros)[1] and _shape(zeros)[0] != 0:
        zeros = _linalg.eigvals(zeros)  # the characteristic polynomial
    elif _ndim(zeros) != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    a = np.ones(1, dtype_of(zeros))
    for i in range(_shape(zeros)[0]):
        a = convolve(F.atleast_1d(_operand(a)), F.stack([np.ones((), dtype_of(zeros)), -zeros[i]]))
    if np.iscomplexobj(unbox(zeros)):  # roots in conjugate pairs give real coefficients, as in NumPy
        values = np.asarray(unbox(zeros))
        if np.all(np.sort(values) == np.sort(values.conjugate())):
            a = F.real(a)
    return a


@traceable(np.polydiv)
def polydiv(u, v):
    """NumPy's long division, step by step on traced values; the remainder's leading near-zeros are
    trimmed as NumPy trims them (read from the values)."""
    u, v = F.atleast_1d(_operand(u)) + 0.0, F.atleast_1d(_operand(v)) + 0.0
    if type(unbox_all(u)) is Tracer or type(unbox_all(v)) is Tracer:  # batched by vmap
        raise _NeedsLoop("polydiv: the remainder's length depends on each example's values, so each example "
                        "is computed on its own")
    m, n = _shape(u)[0] - 1, _shape(v)[0] - 1
    scale = 1.0 / v[0]
    quotient, r = [], u
    for k in range(0, m - n + 1):
        d = scale * r[k]
        quotient.append(d)
        r = F.concatenate([r[:k], r[k:k + n + 1] - d * v, r[k + n + 1:]])
    q = F.stack(quotient) if quotient else np.zeros(1, np.result_type(dtype_of(u), dtype_of(v)))
    while np.allclose(unbox(r)[0], 0, rtol=1e-14) and _shape(r)[-1] > 1:
        r = r[1:]
    return q, r


@traceable(np.roots)
def roots(p):
    """The eigenvalues of the companion matrix, as NumPy computes them (leading and trailing zeros
    of ``p`` are read from its values)."""
    p = F.atleast_1d(_operand(p))
    if _ndim(p) != 1:
        raise ValueError("Input must be a rank-1 array.")
    if type(unbox_all(p)) is Tracer:  # batched by vmap
        raise _NeedsLoop("roots: how many roots there are depends on each example's zero coefficients, so "
                        "each example is computed on its own")
    nonzero = np.flatnonzero(unbox(p))
    if len(nonzero) == 0:
        return np.array([])
    trailing = _shape(p)[0] - nonzero[-1] - 1
    p = p[int(nonzero[0]):int(nonzero[-1]) + 1]
    n = _shape(p)[0]
    if n > 1:
        first_row = F.reshape(-p[1:] / p[0], (1, n - 1))
        companion = F.concatenate([first_row, np.eye(n - 2, n - 1, dtype=dtype_of(first_row))], axis=0)
        found = _linalg.eigvals(companion)
    else:
        found = np.array([])
    if trailing:
        found = F.concatenate([found, np.zeros(trailing, dtype_of(found))])
    return found


# --- ufunc methods: np.add.accumulate(x), np.logaddexp.reduce(x), np.multiply.outer(a, b), ... ------
def _fold(binary, x, axis, initial):
    """``reduce`` of any binary function: a left fold along ``axis`` (one entry per element)."""
    items = [x[_axis_slice(_ndim(x), axis, i)] for i in range(_shape(x)[axis])]
    if initial is not _NO_VALUE:
        items.insert(0, initial)
    if not items:
        raise ValueError("zero-size array to reduction operation which has no identity")
    out = items[0]
    for item in items[1:]:
        out = binary(out, item)
    return out


def _logsumexp(x, axis, keepdims, exp, log):
    shift = F.max(constant(x), axis=axis, keepdims=True)
    shift = F.where(F.isfinite(shift), shift, 0.0)
    out = log(F.sum(exp(x - shift), axis=axis, keepdims=True)) + shift
    return out if keepdims else F.squeeze(out, axis)


def ufunc_reduce(binary, name, x, axis=0, dtype=None, out=None, keepdims=False, initial=_NO_VALUE,
                 where=True):
    """``ufunc.reduce`` on traced values: the reductions wengert has for add, multiply, maximum,
    minimum, logaddexp and logaddexp2, a fold along the axis for any other differentiable ufunc."""
    F._unsupported(f"{name}.reduce", out=out, where=None if where is True else where)
    x = _operand(x)
    if dtype is not None:
        x = F.astype(x, dtype)
    fast = {"add": F.sum, "multiply": F.prod, "maximum": F.max, "minimum": F.min}.get(name)
    if fast is not None and initial is _NO_VALUE:
        return fast(x, axis=axis, keepdims=keepdims)
    if name in ("logaddexp", "logaddexp2") and initial is _NO_VALUE and axis is not None:
        exp, log = (E.exp, E.log) if name == "logaddexp" else (E.exp2, E.log2)
        return _logsumexp(x, axis % _ndim(x) if isinstance(axis, (int, np.integer)) else axis, keepdims, exp, log)
    if axis is None:
        x, axis, shape = F.ravel(x), 0, (1,) * _ndim(x)
    elif isinstance(axis, (tuple, list)):
        raise NotImplementedError(f"wengert.numpy: {name}.reduce over several axes is supported for add, "
                                  "multiply, maximum and minimum only; reduce one axis at a time")
    else:
        axis = axis % _ndim(x)
        shape = tuple(1 if d == axis else n for d, n in enumerate(_shape(x)))
    result = _fold(binary, x, axis, initial)
    return F.reshape(result, shape) if keepdims else result


def ufunc_accumulate(binary, name, x, axis=0, dtype=None, out=None):
    F._unsupported(f"{name}.accumulate", out=out)
    x = _operand(x)
    if dtype is not None:
        x = F.astype(x, dtype)
    axis = axis % _ndim(x)
    if name == "add":
        return F.cumsum(x, axis=axis)
    if name == "multiply":
        return F.cumprod(x, axis=axis)
    items = [x[_axis_slice(_ndim(x), axis, i)] for i in range(_shape(x)[axis])]
    partial = [items[0]]
    for item in items[1:]:
        partial.append(binary(partial[-1], item))
    return F.stack(partial, axis=axis)


def ufunc_reduceat(binary, name, x, indices, axis=0, dtype=None, out=None):
    """``ufunc.reduceat``: NumPy's segments (``x[i:j]`` reduced for each ``i < j`` of consecutive
    indices, ``x[i]`` alone where ``i >= j``, the last from ``i`` to the end), each segment one
    ``reduce`` of the table, stacked along ``axis``."""
    F._unsupported(f"{name}.reduceat", out=out)
    x = _operand(x)
    if dtype is not None:
        x = F.astype(x, dtype)
    starts = np.asarray(unbox_all(indices))
    if starts.ndim != 1 or not np.issubdtype(starts.dtype, np.integer):
        raise TypeError(f"{name}.reduceat: indices must be a 1-d array of integers, got {starts!r}")
    ndim = _ndim(x)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim)
    axis %= ndim
    size = _shape(x)[axis]
    if np.any((starts < 0) | (starts >= size)):
        raise IndexError(f"{name}.reduceat: index out of bounds for axis {axis} of size {size}: {starts}")
    if not starts.size:   # no segments: an empty axis, as NumPy returns
        return x[_axis_slice(ndim, axis, slice(0, 0))]
    ends = np.append(starts[1:], size)
    segments = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        if start < end:
            segments.append(ufunc_reduce(binary, name, x[_axis_slice(ndim, axis, slice(start, end))], axis=axis))
        else:
            segments.append(x[_axis_slice(ndim, axis, start)])
    return F.stack(segments, axis=axis)


def ufunc_outer(binary, name, a, b, **kwargs):
    F._unsupported(f"{name}.outer", **kwargs)
    a, b = _operand(a), _operand(b)
    return binary(F.reshape(a, _shape(a) + (1,) * _ndim(b)), b)



# --- functions without a derivative, beyond _functions' list: integer and bit operations, index
# builders, memory and printing questions and set membership
_NONDIFF_MORE = """
bitwise_count bitwise_invert bitwise_left_shift bitwise_not bitwise_right_shift packbits unpackbits
isnat isfortran isin may_share_memory shares_memory common_type einsum_path ix_ ravel_multi_index
unravel_index diag_indices_from tril_indices_from triu_indices_from array2string array_repr array_str format_float_positional format_float_scientific
""".split()
for _name in _NONDIFF_MORE:
    if hasattr(np, _name):
        globals()[_name] = nondiff(getattr(np, _name))
del _name


# --- set operations: unique's convention (a gather of each value's first occurrence) ---------------
def _first_occurrences(arrays, values):
    """Positions, in the inputs raveled one after the other, of each value's first occurrence."""
    pool = np.concatenate([np.ravel(a) for a in arrays])
    order = np.argsort(pool, kind="stable")
    return order[np.searchsorted(pool[order], np.ravel(values), side="left")]


def _set_operation(np_fn, name, arrays, *args, **kwargs):
    """NumPy's answer, its values read from the traced inputs at their first occurrences."""
    arrays = [_operand(a) for a in arrays]
    _refuse_data_dependent(name, arrays)
    if builtins.any(type(unbox_all(a)) is Tracer for a in arrays):  # batched by vmap
        raise _NeedsLoop(f"{name}: the result's size depends on each example's values, so each example is "
                        "computed on its own")
    plain = [unbox(a) for a in arrays]
    result = np_fn(*plain, *args, **kwargs)
    values = result[0] if isinstance(result, tuple) else result
    pool = F.concatenate([F.ravel(a) for a in arrays])
    gathered = F.reshape(pool[_first_occurrences(plain, values)], np.shape(values))
    if dtype_of(gathered) != values.dtype:
        gathered = F.astype(gathered, values.dtype)
    if not isinstance(result, tuple):
        return gathered
    return result._replace(values=gathered) if hasattr(result, "_replace") else (gathered, *result[1:])


@traceable(np.unique_values)
def unique_values(x):
    return _set_operation(np.unique_values, "unique_values", [x])


@traceable(np.unique_counts)
def unique_counts(x):
    return _set_operation(np.unique_counts, "unique_counts", [x])


@traceable(np.unique_inverse)
def unique_inverse(x):
    return _set_operation(np.unique_inverse, "unique_inverse", [x])


@traceable(np.unique_all)
def unique_all(x):
    return _set_operation(np.unique_all, "unique_all", [x])


@traceable(np.union1d)
def union1d(ar1, ar2):
    return _set_operation(np.union1d, "union1d", [ar1, ar2])


@traceable(np.intersect1d)
def intersect1d(ar1, ar2, assume_unique=False, return_indices=False):
    return _set_operation(np.intersect1d, "intersect1d", [ar1, ar2], assume_unique=assume_unique,
                          return_indices=return_indices)


@traceable(np.setdiff1d)
def setdiff1d(ar1, ar2, assume_unique=False):
    return _set_operation(np.setdiff1d, "setdiff1d", [ar1, ar2], assume_unique=assume_unique)


@traceable(np.setxor1d)
def setxor1d(ar1, ar2, assume_unique=False):
    return _set_operation(np.setxor1d, "setxor1d", [ar1, ar2], assume_unique=assume_unique)


@traceable(np.histogram_bin_edges)
def histogram_bin_edges(a, bins=10, range=None, weights=None):  # noqa: A002 - NumPy's name
    """The edges histogram computes: they move with the data's min and max (histogram's rule)."""
    return F.histogram(a, bins=bins, range=range, weights=weights)[1]



_histogramdd_plain = nondiff(np.histogramdd)


@_traceable_lists(np.histogramdd)
def histogramdd(sample, bins=10, range=None, density=None, weights=None):  # noqa: A002 - NumPy's name
    """Counts are piecewise constant; each dimension's edges are the ones histogram computes for that
    column, so edges computed from the data move with its min and max (histogram's rule)."""
    if type(weights) is Tracer:
        raise F.NoDerivativeError("numpy.histogramdd with traced weights", (
            "numpy.histogramdd with traced weights has no derivative rule in wengert (its sums are linear "
            "in the weights); pass wg.stop_gradient(weights) to drop the gradient on purpose."))
    if isinstance(sample, (list, tuple)):
        columns = [_operand(column) for column in sample]
    else:
        sample = _operand(sample)
        sample = F.reshape(sample, (-1, 1)) if _ndim(sample) == 1 else sample
        columns = [sample[:, i] for i in builtins.range(_shape(sample)[1])]
    if builtins.any(type(unbox_all(column)) is Tracer for column in columns):  # batched by vmap
        raise _NeedsLoop("histogramdd returns a tuple of counts and edges: each example is computed on its own")
    hist, _ = _histogramdd_plain(sample, bins, range, density, weights)
    dims = len(columns)
    try:
        if len(bins) != dims:
            raise ValueError("The dimension of bins must be equal to the dimension of the sample x.")
    except TypeError:
        bins = dims * [bins]
    ranges = dims * [None] if range is None else range
    edges = [F.histogram(columns[i], bins[i], ranges[i])[1] for i in builtins.range(dims)]
    if density and builtins.any(type(e) is Tracer for e in edges):
        raise F.NoDerivativeError("numpy.histogramdd(density=True) with edges that move with traced values", (
            "numpy.histogramdd(density=True) divides by bin volumes that move with the traced data, which "
            "wengert does not differentiate: pass plain bins/range, or wg.stop_gradient the data."))
    return hist, edges


@_traceable_lists(np.histogram2d)
def histogram2d(x, y, bins=10, range=None, density=None, weights=None):  # noqa: A002 - NumPy's name
    try:
        n = len(bins)
    except TypeError:
        n = 1
    if n != 1 and n != 2:
        bins = [bins, bins]
    hist, edges = histogramdd([x, y], bins, range, density, weights)
    return hist, edges[0], edges[1]


_NOT_EXPORTED = {"annotations", "builtins", "functools", "importlib", "operator", "constant", "ufunc_reduce", "ufunc_accumulate", "ufunc_reduceat",
                 "ufunc_outer", "np", "Tracer", "dtype_of", "unbox", "E", "elementwise_constant", "nondiff", "unbox_all", "F", "traceable"}
__all__ = [n for n in list(globals()) if not n.startswith("_") and n not in _NOT_EXPORTED]

"""Moving elements around: reshape, transpose, broadcast, concatenate, indexing, flips, diagonals.

Most of NumPy's shape functions (stack, tile, repeat, split, moveaxis, ...) are compositions of
these few, written in ``wengert.numpy``; only operations with a cheaper rule than their
composition are primitives. Indexing reads send back an ``indexed_cotangent`` so every read of one
array lands in one buffer (see ``core/backward.py``).
"""
from __future__ import annotations

import numpy as np

from ..core.backward import is_basic, indexed_cotangent
from ..core.namespace import copy as _copy_of, is_foreign, namespace, result_type, scatter_add
from ..core.namespace import broadcast_to as _broadcast_in_namespace, zeros as _zeros_like_in
from ..core.trace import Tracer, dtype_of, index_level, unbox
from ._batching import (axis_rule, broadcast_to_rule, diagonal_embed_rule, diagonal_rule, getitem_rule, index_add_rule,
                        join_rule, pad_rule, reshape_rule, roll_rule, transpose_rule, unary_rule)
from ._table import defprim, unbroadcast
from . import complex as _complex


# The implementations below that wengert's engine calls itself (unbroadcast, accumulation) take a
# non-NumPy operand's namespace (array-API arrays have no NumPy dispatch); NumPy's arrays pay one
# type check (core/namespace.py).
def _reshape(x, shape):
    if type(x) is not np.ndarray and is_foreign(x):
        return namespace(x).reshape(x, shape)
    return np.reshape(x, shape)


def _transpose(x, axes=None):
    if type(x) is not np.ndarray and is_foreign(x):
        return namespace(x).permute_dims(x, tuple(range(x.ndim))[::-1] if axes is None else tuple(axes))
    return np.transpose(x, axes)


def _inverse_axes(axes, ndim):
    if axes is None:
        return None
    return tuple(np.argsort([a % ndim for a in axes]))


def _broadcast_to(x, shape):
    if type(x) is not np.ndarray and is_foreign(x):
        return _broadcast_in_namespace(x, shape)
    return np.broadcast_to(x, shape)


reshape = defprim(_reshape, lambda g, ans, x, shape: reshape(g, shape=x.shape), name="reshape", linear=True,
                  batch=reshape_rule, batched_vjp=True)
transpose = defprim(_transpose, lambda g, ans, x, axes=None: transpose(g, axes=_inverse_axes(axes, g.ndim)),
                    name="transpose", linear=True, batch=transpose_rule, batched_vjp=True)
broadcast_to = defprim(_broadcast_to, lambda g, ans, x, shape: unbroadcast(g, x.shape), name="broadcast_to",
                       linear=True, batch=broadcast_to_rule, batched_vjp=True)


def _astype(x, dtype):
    if x.dtype.kind == "c" and np.dtype(dtype).kind != "c":
        return x.real.astype(dtype)  # NumPy's value, without its ComplexWarning
    return x.astype(dtype)


def _astype_vjp(g, x_dtype, dtype):
    if x_dtype.kind == "c" and np.dtype(dtype).kind != "c":  # complex to real: the real part's rule
        g = _complex.real_part(g)
    return astype(g, dtype=x_dtype)


def _astype_jvp(t, ans, x, dtype):
    """The cast of the tangent (complex to real keeps the real part); none for integer or bool results."""
    return astype(t, dtype=dtype) if np.dtype(dtype).kind in "fc" else None


astype = defprim(_astype, lambda g, ans, x, dtype: _astype_vjp(g, unbox(x).dtype, dtype), name="astype",
                 jvp=_astype_jvp, batch=unary_rule, batched_vjp=True)


def _concatenate(*arrays, axis=0):
    return np.concatenate(arrays, axis=axis)


def _concatenate_vjp(g, ans, arrays, params, parents):
    """Each operand's cotangent is its slice of ``g``: offsets summed once, in Python."""
    axis = params["axis"]
    if axis < 0:
        axis += len(g.shape)
    lead = (slice(None),) * axis
    starts, end = [], 0
    for a in arrays:
        starts.append(end)
        end += a.shape[axis]
    take = _slice_of(g)
    return [take(g, lead + (slice(starts[p], starts[p] + arrays[p].shape[axis]),)) for p, _ in parents]


def _plain_index(g, index):
    return g[index]


def _traced_index(g, index):
    return getitem(g, index=index)


def _slice_of(g):
    """How a rule reads part of the cotangent: NumPy's indexing on a plain one (the primitive's
    call would only find no tracer and do the same), ``getitem`` on a traced one."""
    return _plain_index if type(g) is np.ndarray else _traced_index


def _stack(*arrays, axis=0):
    if axis == 0 and arrays and type(arrays[0]) is np.ndarray:
        # pieces of one shape (the inner stacks of nested-list loops, often of 0-d values): np.array
        # builds the same array in C, where np.stack's Python-level checks cost tens of times more
        shape = arrays[0].shape
        for a in arrays:
            if type(a) is not np.ndarray or a.shape != shape:
                break
        else:
            return np.array(arrays)
    return np.stack(arrays, axis=axis)


def _stack_vjp(g, ans, arrays, params, parents):
    axis = params["axis"]
    if axis == 0 and type(g) is np.ndarray:   # the pieces are g's rows: one C-level split
        rows = list(g)
        return [rows[p] for p, _ in parents]
    lead = (slice(None),) * axis
    take = _slice_of(g)
    return [take(g, lead + (p,)) for p, _ in parents]


# linear: the JVP is the concatenation (stack) of the tangents, zeros standing for constant operands
concatenate = defprim(_concatenate, (), name="concatenate", linear=True,
                      fused_vjp=_concatenate_vjp, batch=join_rule, batched_vjp=True)
stack = defprim(_stack, (), name="stack", linear=True, fused_vjp=_stack_vjp, batch=join_rule, batched_vjp=True)


# --- indexing ------------------------------------------------------------------------------------
def _getitem(x, index):
    return x[index]


def _zeros_view(shape, dtype):
    """Zeros of ``shape`` that take no memory (one element, broadcast): the base of a scatter, which
    copies it. A loop of column reads under jit or a higher-order grad keeps one such base per read
    in its program or tape; dense zeros there cost the whole array per read (gigabytes)."""
    dtype = np.dtype(dtype)
    return np.ndarray(shape, dtype, buffer=bytes(dtype.itemsize), strides=(0,) * len(shape))  # read-only


def _scatter_base(shape, dtype, g):
    """The zeros an indexed cotangent ``g`` is scattered into, of both kinds' dtype: a ``_zeros_view``
    for NumPy, zeros in ``g``'s namespace for another library's array."""
    if is_foreign(g):
        return _zeros_like_in(shape, result_type(dtype, g), g)
    return _zeros_view(shape, np.result_type(dtype, dtype_of(g)))


def _getitem_vjp(g, ans, x, index):
    if type(g) is Tracer:   # a real x may receive a complex cotangent (docs/complex.md): zeros of both kinds
        return index_add(_scatter_base(x.shape, x.dtype, unbox(g)), g, index=index)
    level = index_level(index)
    if level is not None:   # indices that differ per example (vmap) or per call (jit): that level scatters
        zeros = _scatter_base(x.shape, x.dtype, g)
        return level.process(index_add, (zeros, g), [zeros, g], (), {"index": index})
    if type(g) is np.ndarray and g.dtype == x.dtype and _new_axes_only(index):
        return g.reshape(x.shape)   # x[:, None] reads every element once: g without the new axes (a view)
    return indexed_cotangent(index, g, x.shape, x.dtype)


def _new_axes_only(index):
    """Does ``x[index]`` only add size-1 axes to ``x`` (None, full slices and Ellipsis, one None at least)?"""
    if type(index) is not tuple:
        return index is None
    new = False
    for i in index:
        if i is None:
            new = True
        elif not (i is Ellipsis or (type(i) is slice and i.start is None and i.stop is None and i.step is None)):
            return False
    return new


getitem = defprim(_getitem, _getitem_vjp, name="getitem", linear=True, batch=getitem_rule, batched_vjp=True)
# On a plain cotangent and an index of ints and slices the backward pass adds g at x[index] itself,
# which is what _getitem_vjp's indexed cotangent asks for, without calling the rule (loops of reads)
getitem.indexed_read = _getitem_vjp


def _index_add(base, values, index):
    if (type(base) is not np.ndarray and is_foreign(base)) or (type(values) is not np.ndarray and is_foreign(values)):
        if not is_foreign(base):   # NumPy zeros from a rule, Dask or CuPy values: values' namespace
            base = _zeros_like_in(np.shape(base), base.dtype, values)
        out = _copy_of(base)
        if is_basic(index):
            out[index] = out[index] + values
        else:
            scatter_add(out, index, values, "an indexed read x[index] (second order)")
        return out
    out = np.array(base, copy=True)
    if is_basic(index):
        out[index] += values
    else:
        np.add.at(out, index, values)
    return out


def _index_add_jvp(tangents, ans, args, params):
    """Linear in both: the base's tangent alone passes through; a values tangent is added in."""
    t_base, t_values = tangents
    if t_values is None:
        return t_base
    if t_base is None:
        shape = ans.shape if type(ans) is Tracer else np.shape(ans)
        t_base = _scatter_base(shape, unbox(ans).dtype, unbox(t_values))
    return index_add(t_base, t_values, index=params["index"])


index_add = defprim(_index_add, (lambda g, ans, base, values, index: g,
                                 lambda g, ans, base, values, index: unbroadcast(getitem(g, index=index), values.shape)),
                    name="index_add", fused_jvp=_index_add_jvp, batch=index_add_rule, batched_vjp=True)


# --- flips, rolls, diagonals, padding ------------------------------------------------------------
def _flip(x, axis=None):
    return np.flip(x, axis)


flip = defprim(_flip, lambda g, ans, x, axis=None: flip(g, axis=axis), name="flip", linear=True,
               batch=axis_rule, batched_vjp=True)


def _roll(x, shift, axis=None):
    """``np.roll``; one integer shift along one axis (or the flattened array) as two slice copies
    (np.roll builds its index tuples in Python: 4x the cost on a 16-vector)."""
    if (type(x) is not np.ndarray or type(shift) is not int or x.ndim == 0
            or not (axis is None or type(axis) is int and -x.ndim <= axis < x.ndim)):
        return np.roll(x, shift, axis)   # the general case, and NumPy's own errors
    flat = axis is None
    a = x.ravel() if flat else x
    axis = 0 if flat else axis % a.ndim
    n = a.shape[axis]
    if n == 0:
        return x.copy()
    s = shift % n
    out = np.empty_like(a)
    head = (slice(None),) * axis
    out[head + (slice(s, None),)] = a[head + (slice(None, n - s),)]
    out[head + (slice(None, s),)] = a[head + (slice(n - s, None),)]
    return out.reshape(x.shape) if flat else out


roll = defprim(_roll, lambda g, ans, x, shift, axis=None: roll(g, shift=_negate(shift), axis=axis), name="roll",
               linear=True, batch=roll_rule, batched_vjp=True)


def _negate(shift):
    return tuple(-s for s in shift) if isinstance(shift, (tuple, list)) else -shift


def _diagonal(x, offset=0, axis1=0, axis2=1):
    return np.diagonal(x, offset, axis1, axis2)


def _diagonal_vjp(g, ans, x, offset=0, axis1=0, axis2=1):
    return diagonal_embed(g, shape=x.shape, offset=offset, axis1=axis1, axis2=axis2)  # one example's under vmap


def _diagonal_embed(g, shape, offset=0, axis1=0, axis2=1):
    """Zeros of ``shape`` with ``g`` written on the diagonal that ``np.diagonal`` would read."""
    out = np.zeros(shape, g.dtype)
    view = np.diagonal(out, offset, axis1, axis2)
    view.setflags(write=True)
    view[...] = g
    return out


diagonal = defprim(_diagonal, _diagonal_vjp, name="diagonal", linear=True, batch=diagonal_rule, batched_vjp=True)
diagonal_embed = defprim(
    _diagonal_embed,
    lambda g, ans, d, shape, offset=0, axis1=0, axis2=1: diagonal(g, offset=offset, axis1=axis1, axis2=axis2),
    name="diagonal_embed", linear=True, batch=diagonal_embed_rule, batched_vjp=True)


def _pad_constant(x, pad_width, constant_values=0):
    """``np.pad(mode="constant")``; for an array and a real constant, one fill and one slice copy
    (np.pad's own bookkeeping is most of its cost on small arrays)."""
    if type(x) is not np.ndarray or type(constant_values) not in (int, float) or x.dtype.kind not in "fc":
        return np.pad(x, pad_width, mode="constant", constant_values=constant_values)
    shape = tuple(n + before + after for n, (before, after) in zip(x.shape, pad_width))
    out = np.full(shape, constant_values, dtype=x.dtype)
    out[tuple(slice(before, before + n) for n, (before, _) in zip(x.shape, pad_width))] = x
    return out


def _unpad(g, ans, x, pad_width, constant_values=0):
    index = tuple(slice(before, before + n) for (before, _), n in zip(pad_width, x.shape))
    return getitem(g, index=index)


pad_constant = defprim(_pad_constant, _unpad, name="pad_constant",  # affine: the tangent is padded with 0
                       jvp=lambda t, ans, x, pad_width, constant_values=0: pad_constant(t, pad_width=pad_width),
                       batch=pad_rule, batched_vjp=True)

"""Writes: functional scatters (``x.at[idx].set(v)``), in-place writes and Buffer snapshots.

Every rule here costs what was written plus at most one pass over the result: the written
value's cotangent is ``g[idx]``, and the old array's cotangent is ``g`` with the written
positions zeroed (an overwritten element passes no gradient to what it overwrote).
Under vmap a write is the same primitive on the stack, its index led by a full slice.
"""
from __future__ import annotations

import numpy as np

from ..core.namespace import copy as _copy
from ..core.trace import Tracer, index_level, is_batched, unbox
from ._batching import NeedsLoop, batched_index, broadcast_batch, one_batch_axis, pad_rank, shape as _shape
from ._table import defprim, unbroadcast
from .shape import is_basic, getitem, index_add, reshape


def _zero_at(g, index):
    """``g`` with the positions ``index`` set to zero (a new array; differentiable)."""
    if type(g) is Tracer or index_level(index) is not None:   # traced, or indices jit/vmap holds
        return scatter_set(g, np.zeros((), unbox(g).dtype), index=index)
    out = _copy(g)   # in g's namespace: a Dask or CuPy cotangent stays one
    out[index] = 0
    return out


def _scatter_set(x, v, index):
    out = _copy(x)
    out[index] = v
    return out


def _scatter_set_jvp(tangents, ans, args, params):
    """Linear in (x, v): the same write on the tangents, zero standing for a constant one."""
    t_x, t_v = tangents
    dtype = unbox(ans).dtype
    if t_x is None:
        t_x = np.zeros(ans.shape if type(ans) is Tracer else np.shape(ans), dtype)
    return scatter_set(t_x, np.zeros((), dtype) if t_v is None else t_v, index=params["index"])


def _batch_write(prim, vals, batched, params, size):
    """vmap of ``scatter_set``/``scatter_multiply`` (x, v, index): one write into the stack at
    ``(:, *index)``. An unbatched ``x`` is broadcast along the batch (the write copies it); a batched
    ``v`` gets ones after its batch axis up to the rank of ``x[index]``, so it lines up with the
    written block; an unbatched ``v`` broadcasts as it did per example. Indices that vary along
    the batch, or that NumPy would move in front of the batch axis, are left to the per-example loop."""
    x, v = vals
    index = params["index"]
    stacked_index = batched_index(index)
    if stacked_index is None:
        return NotImplemented
    if not batched[0]:
        x = broadcast_batch(x, size)
    if batched[1]:
        rank = np.zeros(tuple(_shape(x))[1:], bool)[index].ndim
        v_shape = tuple(_shape(v))
        extra = len(v_shape) - 1 - rank
        if extra > 0:  # leading ones, which NumPy drops per example (other sizes raise there)
            if any(n != 1 for n in v_shape[1:1 + extra]):
                return NotImplemented
            v = reshape(v, shape=v_shape[:1] + v_shape[1 + extra:])
        else:
            v = pad_rank(v, rank)
    return prim(x, v, index=stacked_index)


def _scatter_set_vjp_owned(g, ans, args, params, parents):
    """Both rules at once where the backward pass holds ``g``'s sample alone, under jit only
    (core/backward.py): a Buffer's loop of writes, as ``_write_vjp_staged``."""
    value_shape = _shape(args[1]) if any(position == 1 for position, _ in parents) else None
    return _write_vjp_staged(g, params["index"], value_shape, parents)


scatter_set = defprim(_scatter_set, (lambda g, ans, x, v, index: _zero_at(g, index),
                                     lambda g, ans, x, v, index: unbroadcast(getitem(g, index=index), v.shape)),
                      name="scatter_set", batch=one_batch_axis(_batch_write),
                      fused_jvp=_scatter_set_jvp, owned_vjp=_scatter_set_vjp_owned, batched_vjp=True)


def _write_vjp(g, ans, args, params, parents):
    """``x_new = x_old with v written at index``: x_old gets g zeroed at index, v gets g[index]."""
    index = params["index"]
    return [_zero_at(g, index) if position == 0 else
            unbroadcast(getitem(g, index=index), params["value_shape"]) for position, _ in parents]


def _write_vjp_owned(g, ans, args, params, parents):
    """The same, zeroing ``g`` in place when the backward pass owns it: a loop of writes costs
    what it wrote, not (writes x array size)."""
    index = params["index"]
    if type(g) is Tracer:   # under jit (core/backward.py): g's sample is the pass's alone
        return _write_vjp_staged(g, index, params["value_shape"], parents)
    piece = g[index]
    if type(piece) is np.ndarray:   # a view: copied before the zeroing (one element comes out as a
        piece = piece.copy()        # NumPy scalar, a copy already, as operations on 0-d arrays give)
    value_shape = params["value_shape"]
    if piece.shape != value_shape:
        piece = unbroadcast(piece, value_shape)
    g[index] = 0
    if len(parents) == 2:   # core/mutation.py records the parents as (0, x), then (1, v) when v is traced
        return (g, piece)
    return [g if position == 0 else piece for position, _ in parents]


def _write_vjp_staged(g, index, value_shape, parents):
    """``_write_vjp`` under jit when the backward pass holds ``g``'s sample alone: the written
    value's cotangent is staged first, then the zeroing, whose sample is ``g``'s own zeroed in place
    (``StagingTrace.zero_at``) unless that cotangent's sample is a view of it."""
    piece = None
    if any(position == 1 for position, _ in parents):
        piece = unbroadcast(getitem(g, index=index), value_shape)
    sample = piece.value if type(piece) is Tracer else piece
    if type(sample) is np.ndarray and np.may_share_memory(sample, g.value):
        zeroed = _zero_at(g, index)
    else:
        zeroed = g._trace.zero_at(g, index)
    return [zeroed if position == 0 else piece for position, _ in parents]


def _tape_only(tangents, ans, args, params):
    raise AssertionError("setitem and buffer_snapshot are tape entries of reverse mode only: forward mode "
                         "never binds them (JVPTrace.write and a functional Buffer take their place)")


# The tape entry of ``x[index] = v`` on a tracer (recorded by core/mutation.py, never called).
# fused_jvp: a forward level writes by JVPTrace.write, which never records this entry
write = defprim(None, (), name="setitem", fused_vjp=_write_vjp, owned_vjp=_write_vjp_owned, fused_jvp=_tape_only)
write.element_write = _write_vjp_owned   # the backward pass does its work inline for one element


def _scatter_multiply(x, v, index):
    out = np.array(x, copy=True)
    if is_basic(index):
        out[index] *= v
    else:
        np.multiply.at(out, index, v)
    return out


def _scatter_multiply_jvp_v(t, ans, x, v, index):
    """x[index] * t at the written positions (indices are unique: Buffer.multiply refuses repeats)."""
    dtype = np.result_type(unbox(ans).dtype, unbox(t).dtype)
    return index_add(np.zeros(x.shape, dtype), getitem(x, index=index) * t, index=index)  # vmap has its rule


# x's rules are the same scaling of g or t (a diagonal map); through v (a traced value, not a
# constant) a second derivative reaches v as well
scatter_multiply = defprim(_scatter_multiply, (
    lambda g, ans, x, v, index: scatter_multiply(g, v, index=index),
    lambda g, ans, x, v, index: unbroadcast(getitem(g * x, index=index), v.shape)),
    name="scatter_multiply",
    jvp=(lambda t, ans, x, v, index: scatter_multiply(t, v, index=index), _scatter_multiply_jvp_v),
    batch=one_batch_axis(_batch_write), batched_vjp=True)


def has_duplicates(index, shape):
    """True when an advanced ``index`` selects some element more than once."""
    if is_basic(index):
        return False
    parts = index if type(index) is tuple else (index,)
    if any(is_batched(i) for i in parts):
        raise NeedsLoop("indices that differ per example (checked for duplicates one example at a time)")
    if any(type(i) is Tracer and i._trace.staged for i in parts):
        raise NotImplementedError(
            "x.at[idx].multiply/min/max(v) differentiated under wg.jit with indices the program "
            "computes or takes as an argument: whether they repeat (repeats are not differentiable) "
            "is known only when the program runs. Pass the indices as a static argument (a tuple of "
            "ints, wg.jit(f, static_argnums=...)) or build the result with x.at[idx].set(...)")
    flat = np.arange(int(np.prod(shape))).reshape(shape)[index].ravel()
    return len(np.unique(flat)) != len(flat)


def _element_writes_vjp(g, writes, shape, base_traced):
    """``_freeze_vjp`` when every write set one element (``buf[t, b] = v``, ``v`` 0-d; the loop
    spelling): one gather of ``g`` at all written positions, zero where a later write overwrote
    the position, instead of a few NumPy calls per write. None when some write is of another kind."""
    ndim = len(shape)
    for index, position, value_shape in writes:
        if type(index) is tuple:
            if len(index) != ndim:
                return None
            for i in index:
                if type(i) is not int:
                    return None
        elif type(index) is not int or ndim != 1:
            return None
        if position is not None and value_shape != ():
            return None
    n = len(writes)
    if ndim == 1:   # buf[i] or buf[i,]
        coords = np.array([i if type(i) is int else i[0] for i, _, _ in writes], dtype=np.intp).reshape(n, 1)
    else:
        coords = np.array([w[0] for w in writes], dtype=np.intp).reshape(n, ndim)
    flat = np.ravel_multi_index(tuple(coords.T), shape, mode="wrap")   # negative indices wrap as in NumPy
    latest = np.zeros(n, bool)   # the newest write of each position (the others were overwritten)
    latest[n - 1 - np.unique(flat[::-1], return_index=True)[1]] = True
    pieces = np.ascontiguousarray(g).reshape(-1)[flat]
    pieces[~latest] = 0
    traced = [k for k, w in enumerate(writes) if w[1] is not None]
    out = list(pieces if len(traced) == n else pieces[traced])
    if base_traced:
        base = np.array(g, copy=True)
        base.reshape(-1)[flat] = 0
        out.insert(0, base)
    return out


def _freeze_vjp(g, ans, args, params, parents):
    """Cotangents of a Buffer snapshot: base, then each traced write; overwritten parts get none.

    The writes are replayed newest first against a mask of positions already claimed, so the
    cost is the number of elements written plus one pass over ``g`` for the base.
    """
    writes = params["writes"]
    if writes and type(g) is np.ndarray:
        out = _element_writes_vjp(g, writes, params["shape"], params["base_traced"])
        if out is not None:
            return out
    claimed = np.zeros(params["shape"], bool)
    out = []
    for index, position, value_shape in reversed(writes):
        if position is None:
            claimed[index] = True
            continue
        hidden = claimed[index]
        piece = g[index]
        if hidden.any():
            piece = np.where(hidden, 0, piece)
        claimed[index] = True
        if np.shape(piece) != value_shape:
            piece = unbroadcast(np.asarray(piece), value_shape)
        out.append(piece)
    out.reverse()
    if params["base_traced"]:
        base = np.array(g, copy=True)
        base[claimed] = 0
        out.insert(0, base)
    return out


# fused_jvp: a Buffer is functional on a forward level (scatter_set), which never records this entry
buffer_snapshot = defprim(None, (), name="buffer_snapshot", fused_vjp=_freeze_vjp, fused_jvp=_tape_only)

__all__ = ["scatter_set", "scatter_multiply", "index_add", "write", "buffer_snapshot", "has_duplicates"]

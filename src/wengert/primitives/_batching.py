"""vmap's batching rules, below the primitive families that declare them (``defprim(batch=...)``).

A batching rule is ``rule(prim, vals, batched, params, trace)``. The values flagged in ``batched``
carry ``trace.nb`` leading batch axes, each of full size or 1 (1: the value does not vary along
that level); the others carry none and broadcast as they did for one example. A plain vmap level
is the case ``nb == 1`` with every batch axis of full size ``trace.size``; nested vmaps fused into
one level (transforms/batching.py) give ``nb > 1``. The rule calls primitives (not NumPy) on the
values, so an outer transform records them. It returns ``NotImplemented`` where it cannot batch
this case: a plain level then runs the primitive once per example (with a warning), a fused level
runs that nested vmap as its own level. It raises ``NeedsLoop`` where the whole function must run
once per example. Any other exception is a bug and surfaces as it is.

Rules written for one batch axis only (``rule(prim, vals, batched, params, size)``) are declared
through ``one_batch_axis``. Rules reach the primitives they call (reshape, einsum, ...) through the
table, so this module sits below the families that use it.
"""
from __future__ import annotations

import string

import numpy as np

from ..core.errors import NeedsLoop
from ..core.trace import Tracer, dtype_of
from ._registry import PRIMITIVES

__all__ = ["NeedsLoop"]   # the signal a rule gives (defined in core/errors.py, which core raises too)


# --- helpers -------------------------------------------------------------------------------------
def shape(x):
    t = type(x)
    return x.shape if t is Tracer or t is np.ndarray else np.shape(x)


def ndim(x):
    return len(shape(x))


def batch_axis(axis, nd, nb=1):
    """A per-example axis (int, tuple or None = all ``nd`` of them) shifted past ``nb`` batch axes."""
    if axis is None:
        return tuple(range(nb, nb + nd))
    if isinstance(axis, (tuple, list)):
        return tuple(a % nd + nb for a in axis)
    return axis % nd + nb


def reshape(x, shape):
    """The reshape primitive; a plain array directly (the same NumPy call, without the dispatch)."""
    return x.reshape(shape) if type(x) is np.ndarray else PRIMITIVES["reshape"](x, shape=shape)


def transpose(x, axes):
    return x.transpose(axes) if type(x) is np.ndarray else PRIMITIVES["transpose"](x, axes=axes)


def broadcast_to(x, shape):
    return np.broadcast_to(x, shape) if type(x) is np.ndarray else PRIMITIVES["broadcast_to"](x, shape=shape)


def matmul(x, y):
    """The matmul primitive; plain arrays straight to its impl."""
    prim = PRIMITIVES["matmul"]
    if type(x) is np.ndarray and type(y) is np.ndarray:
        return prim.impl(x, y)
    return prim(x, y)


def pad_batched(x, nb, missing):
    """``x`` with ``missing`` ones inserted after its ``nb`` batch axes (aligns example ranks)."""
    if missing <= 0:
        return x
    sh = tuple(shape(x))
    return reshape(x, sh[:nb] + (1,) * missing + sh[nb:])


def pad_rank(x, rank):
    """A batched ``x`` (batch on axis 0) with ones after the batch up to ``rank`` example dims."""
    return pad_batched(x, 1, rank - (ndim(x) - 1))


def broadcast_batch(x, size):
    """An unbatched ``x`` as a batched value (a broadcast view; copies happen only where written)."""
    return PRIMITIVES["broadcast_to"](x, shape=(size,) + tuple(shape(x)))


def one_batch_axis(rule):
    """A rule written for one leading batch axis, ``rule(prim, vals, batched, params, size)``, as a
    batching rule: at a fused level (several batch axes) it declines, so that nested vmap runs as
    its own level."""

    def batch(prim, vals, batched, params, trace):
        if trace.nb != 1:
            return NotImplemented
        return rule(prim, vals, batched, params, trace.size)

    batch.__name__ = batch.__qualname__ = getattr(rule, "__name__", "batch")
    batch.__doc__ = rule.__doc__
    batch.one_axis = rule
    return batch


def concrete(x):
    """``x``'s plain value for Python (bool, float, int, item); refused when it is batched."""
    while type(x) is Tracer:
        if x._trace.hidden_axes:
            raise NeedsLoop("a batched value is used as a Python value (if/while, float(), int(), .item())")
        if x._trace.staged:
            x._trace.refuse_concrete()  # under jit: raises, naming the user's line (transforms/jit.py)
        x = x.value
    return x


def _advanced(i):
    return isinstance(i, (np.ndarray, list)) or (type(i) is Tracer)


def index_tracers(index):
    return [i for i in (index if type(index) is tuple else (index,)) if type(i) is Tracer]


def batched_index(index):
    """``(slice(None),) + index``, or None where NumPy would move the advanced-index axes to the
    front (advanced indices separated by a slice: then the batch axis would not stay first) and
    where the index differs per example (a batched tracer in it: gathered or looped instead)."""
    if type(index) is not tuple:
        index = (index,)
    if index_tracers(index):
        return None
    positions = [k for k, i in enumerate(index) if _advanced(i) or isinstance(i, (int, np.integer))]
    if any(_advanced(index[k]) for k in positions) and positions and \
            positions[-1] - positions[0] + 1 != len(positions):
        return None
    return (slice(None),) + index


def tensordot_axes(axes, a_ndim, b_ndim):
    """tensordot's ``axes`` argument as two lists of non-negative axes."""
    if isinstance(axes, (int, np.integer)):
        return list(range(a_ndim - axes, a_ndim)), list(range(axes))
    axes_a, axes_b = axes
    axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else list(axes_a)
    axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else list(axes_b)
    return [x % a_ndim for x in axes_a], [x % b_ndim for x in axes_b]


# --- elementwise, reductions, one-axis operations ------------------------------------------------
_SCALARS = (int, float)


def elementwise_rule(prim, vals, batched, params, trace):
    """Elementwise functions: the batch axes lead, so example ranks are aligned (a batched operand of
    lower rank gets ones after its batch axes) and NumPy broadcasting does the rest."""
    # plain arrays go to ``prim.impl`` directly: what ``prim(...)`` does for them, one call less
    if len(vals) == 1:
        x = vals[0]
        return prim.impl(x, **params) if type(x) is np.ndarray else prim(x, **params)
    if len(vals) == 2:
        x, y = vals
        tx, ty = type(x), type(y)
        if ty in _SCALARS or tx in _SCALARS or (batched[0] and batched[1] and len(shape(x)) == len(shape(y))):
            # x ** 2, 1 / x, or equal ranks: nothing to align
            if tx is not Tracer and ty is not Tracer:
                return prim.impl(x, y, **params)
            return prim(x, y, **params)
    nb = trace.nb
    ranks = [len(shape(v)) - (nb if b else 0) for v, b in zip(vals, batched)]
    rank = max(ranks)
    new = [pad_batched(v, nb, rank - r) if b and r < rank else v for v, b, r in zip(vals, batched, ranks)]
    return prim(*new, **params)


batch_elementwise = elementwise_rule


def reduction_rule(prim, vals, batched, params, trace):
    """sum, max, min, prod: the reduced axes shifted past the batch (None: the example's axes)."""
    (x,) = vals
    nb = trace.nb
    p = dict(params)
    p["axis"] = batch_axis(p.get("axis"), ndim(x) - nb, nb)
    return prim.impl(x, **p) if type(x) is np.ndarray else prim(x, **p)


def scan_rule(prim, vals, batched, params, trace):
    """cumsum, cumprod along an axis (None: the flattened example, left to the loop)."""
    (x,) = vals
    if params.get("axis") is None:
        return NotImplemented
    nb = trace.nb
    return prim(x, axis=params["axis"] % (ndim(x) - nb) + nb)


def axis_rule(prim, vals, batched, params, trace):
    """Operations along one axis (softmax, log_softmax, flip): shift it; None -> all. Extra
    operands (unbatched ones broadcast along the batch) only at a plain level."""
    if prim.name.startswith("nn.") and params.get("axis") is None:
        return NotImplemented
    x = vals[0]
    nb = trace.nb
    if len(vals) > 1 and any(v is not None for v in vals[1:]):
        if nb != 1:
            return NotImplemented
        size = trace.size
        vals = [x] + [broadcast_batch(v, size) if (v is not None and not b) else v
                      for v, b in zip(vals[1:], batched[1:])]
    p = dict(params)
    p["axis"] = batch_axis(params.get("axis"), ndim(x) - nb, nb)
    return prim(*vals, **p)


def unary_rule(prim, vals, batched, params, trace):
    """Operations that act on each element alone whatever the shape (astype)."""
    return prim(*vals, **params)


# --- shape operations ------------------------------------------------------------------------------
def reshape_rule(prim, vals, batched, params, trace):
    new = params["shape"]
    new = (new,) if isinstance(new, (int, np.integer)) else tuple(new)
    return prim(vals[0], shape=tuple(shape(vals[0]))[:trace.nb] + new)


def transpose_rule(prim, vals, batched, params, trace):
    x = vals[0]
    nb = trace.nb
    nd = ndim(x) - nb
    axes = params.get("axes")
    axes = tuple(range(nd - 1 + nb, nb - 1, -1)) if axes is None else tuple(a % nd + nb for a in axes)
    return prim(x, axes=tuple(range(nb)) + axes)


def broadcast_to_rule(prim, vals, batched, params, trace):
    new = tuple(params["shape"]) if not isinstance(params["shape"], (int, np.integer)) else (params["shape"],)
    nb = trace.nb
    x = vals[0]
    x = pad_batched(x, nb, len(new) - (ndim(x) - nb))
    return prim(x, shape=tuple(shape(x))[:nb] + new)


def join_rule(prim, vals, batched, params, trace):
    """concatenate / stack: unbatched operands are broadcast along the batch first (plain level)."""
    if trace.nb != 1:
        return NotImplemented
    size = trace.size
    new = [v if b else broadcast_batch(v, size) for v, b in zip(vals, batched)]
    nd = ndim(new[0]) - 1
    axis = params.get("axis", 0)
    axis = axis % (nd + 1) + 1 if prim.name == "stack" else axis % nd + 1
    return prim(*new, axis=axis)


def _gather_index(index, trace):
    """``x[idx, ...]`` with ``idx`` batched like ``x`` (one row of indices per example): the index
    into the batched ``x`` that picks example b's indices from example b (take_along_axis-like)."""
    parts = index if type(index) is tuple else (index,)
    for p in parts:
        if type(p) is Tracer and (p._trace is not trace or dtype_of(p.value) == bool):
            raise NeedsLoop("indexing with a batched boolean mask (its size differs per example)"
                            if type(p) is Tracer and p._trace is trace else "indexing with indices batched elsewhere")
    every_advanced = all(type(p) is Tracer or isinstance(p, (np.ndarray, list, int, np.integer)) for p in parts)
    leading = type(parts[0]) is Tracer and all(p is Ellipsis or type(p) is slice for p in parts[1:])
    if not (every_advanced or leading):
        raise NeedsLoop("indexing with batched indices mixed with slices (other than x[idx, :, ...])")
    rank = max(np.ndim(p.value) - 1 if type(p) is Tracer else np.ndim(p)
               for p in parts if p is not Ellipsis and type(p) is not slice)
    new = tuple(pad_rank(p.value, rank) if type(p) is Tracer else p for p in parts)
    size = trace.size
    rows = np.arange(size).reshape((size,) + (1,) * rank)
    return (rows,) + new


def getitem_rule(prim, vals, batched, params, trace):
    """Indexing: a leading full slice per batch axis; per-example indices (plain level) gather."""
    index = params["index"]
    if trace.nb == 1 and index_tracers(index):
        index = _gather_index(index, trace)
        x = vals[0] if batched[0] else broadcast_batch(vals[0], trace.size)
        return prim(x, index=index)
    index = batched_index(index)
    if index is None:
        return NotImplemented
    return prim(vals[0], index=(slice(None),) * (trace.nb - 1) + index)


def index_add_rule(prim, vals, batched, params, trace):
    if trace.nb != 1:
        return NotImplemented
    size = trace.size
    base, values = vals
    if index_tracers(params["index"]):   # per-example indices (getitem's VJP under a gather)
        index = _gather_index(params["index"], trace)
        base = base if batched[0] else broadcast_batch(base, size)
        if not batched[1]:
            values = broadcast_batch(values, size)
        return prim(base, values, index=index)
    index = batched_index(params["index"])
    if index is None:
        return NotImplemented
    if not batched[0]:
        base = broadcast_batch(base, size)
    if batched[1]:
        target = np.zeros(tuple(shape(base))[1:], bool)[params["index"]].shape
        values = pad_rank(values, len(target))
    return prim(base, values, index=index)


def roll_rule(prim, vals, batched, params, trace):
    if trace.nb != 1:
        return NotImplemented
    x = vals[0]
    if params.get("axis") is None:   # NumPy rolls the flattened example: flatten each, roll, restore
        sh = tuple(shape(x))
        flat = reshape(x, (sh[0], -1))
        return reshape(prim(flat, shift=params["shift"], axis=1), sh)
    return prim(x, shift=params["shift"], axis=batch_axis(params["axis"], ndim(x) - 1))


def diagonal_rule(prim, vals, batched, params, trace):
    if trace.nb != 1:
        return NotImplemented
    nd = ndim(vals[0]) - 1
    return prim(vals[0], offset=params.get("offset", 0), axis1=params.get("axis1", 0) % nd + 1,
                axis2=params.get("axis2", 1) % nd + 1)


def diagonal_embed_rule(prim, vals, batched, params, trace):
    if trace.nb != 1:
        return NotImplemented
    new = tuple(params["shape"])
    nd = len(new)
    return prim(vals[0], shape=(trace.size,) + new, offset=params.get("offset", 0),
                axis1=params.get("axis1", 0) % nd + 1, axis2=params.get("axis2", 1) % nd + 1)


def pad_rule(prim, vals, batched, params, trace):
    if trace.nb != 1:
        return NotImplemented
    p = dict(params)
    p["pad_width"] = ((0, 0),) + tuple(tuple(w) for w in params["pad_width"])
    return prim(vals[0], **p)


# --- contractions: one einsum (or matmul) with a letter per batch axis -----------------------------
def _einsum_batched(operands, batched, inputs, output, nb):
    """One einsum with a letter per batch axis; an operand of size 1 along a batch axis drops that
    letter (einsum does not broadcast), and the output gets a 1 there when no operand has it."""
    used = set("".join(inputs) + output)
    letters = []
    for c in string.ascii_letters:
        if c not in used:
            letters.append(c)
            if len(letters) == nb:
                break
    else:
        raise NeedsLoop("einsum with every letter in use")
    present = [False] * nb
    subs, new = [], []
    for op, b, s in zip(operands, batched, inputs):
        if b:
            sh = tuple(shape(op))
            keep = [i for i in range(nb) if sh[i] != 1]
            if len(keep) < nb:
                op = reshape(op, tuple(sh[i] for i in keep) + sh[nb:])
            for i in keep:
                present[i] = True
            s = "".join(letters[i] for i in keep) + s
        subs.append(s)
        new.append(op)
    lead = "".join(c for c, p in zip(letters, present) if p)
    if len(new) == 2 and batched[0] and batched[1] and output == "" and len(inputs[0]) == 1 \
            and inputs[0] == inputs[1]:
        out = _dot_as_matmul(new, subs, lead)
        if out is not None:
            return out if len(lead) == nb else _unsqueeze(out, lead, present, nb)
    out = PRIMITIVES["einsum"](*new, subscripts=",".join(subs) + "->" + lead + output)
    return out if len(lead) == nb else _unsqueeze(out, lead, present, nb)


def _unsqueeze(out, lead, present, nb):
    sh = tuple(shape(out))
    it = iter(sh[:len(lead)])
    return reshape(out, tuple(next(it) if p else 1 for p in present) + sh[len(lead):])


# NumPy's matmul runs one small product per batch item: faster than einsum's loop for a few
# items (seed 000: 16 items of (4, 64) @ (64, 16), 20 us against 80 us), slower for many (256
# items: 700 us against 350 us).
_MATMUL_MAX_BATCH = 64


def _dot_as_matmul(ops, subs, lead):
    """``einsum("XAk,XBk->XAB")`` (X: batch letters of both, A, B: at most one of either alone) as a
    matmul, which uses BLAS where einsum loops: the pairwise dot products of nested vmaps. None
    when the letters are not in that order."""
    s0, s1 = subs[0][:-1], subs[1][:-1]
    common = "".join(c for c in s0 if c in s1)
    a0, a1 = s0[len(common):], s1[len(common):]
    if s0[:len(common)] != common or s1[:len(common)] != common or len(a0) > 1 or len(a1) > 1:
        return None
    x, y = ops
    if lead == common + a0 + a1:
        first, second, ex_first, ex_second = x, y, a0, a1
    elif lead == common + a1 + a0:
        first, second, ex_first, ex_second = y, x, a1, a0
    else:
        return None
    k = len(common)
    items = 1
    for n in shape(first)[:k]:
        items *= n
    if items > _MATMUL_MAX_BATCH:
        return None
    if not ex_first:   # (X, k) -> (X, 1, k)
        sh = tuple(shape(first))
        first = reshape(first, sh[:k] + (1,) + sh[k:])
    if ex_second:      # (X, B, k) -> (X, k, B)
        second = transpose(second, tuple(range(k)) + (k + 1, k))
    else:              # (X, k) -> (X, k, 1)
        sh = tuple(shape(second))
        second = reshape(second, sh + (1,))
    out = PRIMITIVES["matmul"](first, second)
    sh = tuple(shape(out))
    drop = sh[:k] + ((sh[k],) if ex_first else ()) + ((sh[k + 1],) if ex_second else ())
    return out if drop == sh else reshape(out, drop)


def einsum_rule(prim, vals, batched, params, trace):
    subscripts = params["subscripts"].replace(" ", "")
    if "..." in subscripts or "->" not in subscripts:
        return NotImplemented
    inputs, output = subscripts.split("->")
    return _einsum_batched(vals, batched, inputs.split(","), output, trace.nb)


def _vdot(x, y, nb):
    """dot of two batched vectors as one matmul: the batch axes both have lead, then (at most) one
    of each alone, e.g. (B, 1, N, W) . (B, R, 1, W) -> (B, R, N) = (B, R, W) @ (B, W, N). None for
    other patterns (and for many batch items, see _MATMUL_MAX_BATCH)."""
    sx, sy = shape(x), shape(y)
    common = 0
    while common < nb and sx[common] != 1 and sy[common] != 1:
        common += 1
    rest = nb - common
    if rest > 2 or rest == 0:
        return None
    items = 1
    for n in sx[:common]:
        items *= n
    if items > _MATMUL_MAX_BATCH:
        return None
    w = sx[-1]
    if rest == 1:   # one exclusive axis: (C, M, W) @ (C, W, 1), or the other way round
        if sx[common] != 1 and sy[common] == 1:
            first, second = x, y
        elif sy[common] != 1 and sx[common] == 1:
            first, second = y, x
        else:
            return None
        lead = shape(first)[:nb]
        first = reshape(first, lead + (w,))
        second = reshape(second, shape(second)[:common] + (w, 1))
        return reshape(matmul(first, second), lead)
    # two: the first is one operand's only, the second the other's
    if sx[common] != 1 and sx[common + 1] == 1 and sy[common] == 1 and sy[common + 1] != 1:
        first, second = x, y
    elif sy[common] != 1 and sy[common + 1] == 1 and sx[common] == 1 and sx[common + 1] != 1:
        first, second = y, x
    else:
        return None
    sf, ss = shape(first), shape(second)
    first = reshape(first, sf[:common + 1] + (w,))
    second = reshape(second, ss[:common] + ss[common + 1:])
    second = transpose(second, tuple(range(common)) + (common + 1, common))
    return matmul(first, second)


def _vectors_times_matrix(a, b, batched, na, nb_):
    """A shared matrix times a batched vector, ``W @ x`` (or ``x @ W``), as ``x @ W.T`` (``x @ W``):
    one matrix product for the whole batch (BLAS gemm), where matmul of ``W`` with a ``(B, k, 1)``
    stack runs one small product per example, and its backward pass a batch of outer products
    summed. None for other cases."""
    if na == 2 and nb_ == 1 and not batched[0] and batched[1]:
        return matmul(b, transpose(a, (1, 0)))
    if na == 1 and nb_ == 2 and batched[0] and not batched[1]:
        return matmul(a, b)
    return None


def dot_rule(prim, vals, batched, params, trace):
    nb = trace.nb
    a, b = vals
    na, nb_ = ndim(a) - nb * batched[0], ndim(b) - nb * batched[1]
    out = _vectors_times_matrix(a, b, batched, na, nb_)
    if out is not None:
        return out
    if na == 1 and nb_ == 1 and batched[0] and batched[1]:
        out = _vdot(a, b, nb)
        if out is not None:
            return out
    if na == 0 or nb_ == 0:
        return elementwise_rule(PRIMITIVES["multiply"], vals, batched, {}, trace)
    if na == 2 and nb_ == 2 and nb == 1:
        # matrix products along one batch axis: matmul broadcasts it and calls the BLAS per item
        # (einsum 'dab,dbc->dac' does not: 63 ms against 8.5 ms for 255 (32,128)@(128,64) products)
        return matmul(a, b)
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    sa = [next(letters) for _ in range(na)]
    k = sa[-1]
    sb = [k] if nb_ == 1 else [next(letters) for _ in range(nb_ - 2)] + [k, next(letters)]
    out = sa[:-1] + [c for c in sb if c != k]
    return _einsum_batched(vals, batched, ["".join(sa), "".join(sb)], "".join(out), nb)


def tensordot_rule(prim, vals, batched, params, trace):
    nb = trace.nb
    a, b = vals
    na, nb_ = ndim(a) - nb * batched[0], ndim(b) - nb * batched[1]
    axes_a, axes_b = tensordot_axes(params.get("axes", 2), na, nb_)
    letters = iter(string.ascii_letters)
    sa = [next(letters) for _ in range(na)]
    sb = [None] * nb_
    for i, j in zip(axes_a, axes_b):
        sb[j] = sa[i]
    sb = [c if c is not None else next(letters) for c in sb]
    out = [c for i, c in enumerate(sa) if i not in axes_a] + [c for j, c in enumerate(sb) if j not in axes_b]
    return _einsum_batched(vals, batched, ["".join(sa), "".join(sb)], "".join(out), nb)


def outer_rule(prim, vals, batched, params, trace):
    if trace.nb != 1:
        return NotImplemented
    size = trace.size
    flat = [reshape(v, (size, -1)) if b else reshape(v, (-1,)) for v, b in zip(vals, batched)]
    return _einsum_batched(flat, batched, ["i", "j"], "ij", 1)


def matmul_rule(prim, vals, batched, params, trace):
    nb = trace.nb
    a, b = vals
    ba, bb = batched
    na, nb_ = ndim(a) - nb * ba, ndim(b) - nb * bb
    if na == 1 and nb_ == 1:
        return _einsum_batched(vals, batched, ["i", "i"], "", nb)
    out = _vectors_times_matrix(a, b, batched, na, nb_)
    if out is not None:
        return out
    squeeze_a = squeeze_b = False
    if na == 1:
        sh = tuple(shape(a))
        a = reshape(a, sh[:-1] + (1, sh[-1]))
        na, squeeze_a = 2, True
    if nb_ == 1:
        sh = tuple(shape(b))
        b = reshape(b, sh + (1,))
        nb_, squeeze_b = 2, True
    rank = max(na, nb_)
    if ba:
        a = pad_batched(a, nb, rank - na)
    if bb:
        b = pad_batched(b, nb, rank - nb_)
    if shape(a)[-1] == 1:
        # a contraction over one element is a broadcast product: NumPy's matmul of many (m, 1) @ (1, p)
        # pairs loops over tiny products (~1.7 ms for 1,024 of them against ~10 us)
        out = PRIMITIVES["multiply"](a, b)
    else:
        out = prim(a, b)
    if not (squeeze_a or squeeze_b):
        return out
    # the axes the 1-d operands did not have are dropped
    sh = tuple(shape(out))
    if squeeze_b:
        sh = sh[:-1]
    if squeeze_a:
        sh = sh[:-2] + sh[-1:] if not squeeze_b else sh[:-1]
    return reshape(out, sh)

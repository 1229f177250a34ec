"""Fused neural-network operations: a stable implementation beside a hand-derived VJP.

Each operation here is one tape entry whose rule is the simplified derivative a person would
write (``softmax - onehot`` for cross-entropy of a softmax), not the chain of the composition's
rules. The public functions, with NumPy-style signatures, are in ``wengert.nn``.

Conventions:

* Implementations subtract the maximum before ``exp`` and use ``log1p(exp(-|x|))`` forms, so
  values and gradients stay finite at logits of +-1e4. float16 inputs are computed in float32
  and cast back.
* Rules are written with wengert operations (operators on ``g``/``ans``/args, and the primitives
  below), so they can be differentiated again. On plain arrays these are NumPy calls.
* A loss that needs the softmax in its rule computes it in the forward pass anyway; it keeps it
  in ``stash`` (a one-slot list in the call's parameters). At first order the rule reads it from
  there; when the logits are themselves traced (second order) the rule recomputes it with
  wengert operations so the outer transform sees how it depends on them.
* ``batched_vjp=True`` in a declaration: its rules hold on values batched by vmap (a
  grad inside vmap records it instead of looping over the examples; tests/test_nn.py checks each).
"""
from __future__ import annotations

import math

import numpy as np

from ..core.namespace import is_foreign
from ..core.trace import Tracer, unbox
from . import contractions as C
from . import elementwise as E
from . import reductions as R
from . import shape as S
from . import _batching as B
from ._batching import axis_rule, one_batch_axis
from ._table import constant, defprim, defunary, elementwise_constant, staged, unbroadcast

try:  # SciPy's erf is vectorized; without SciPy, math.erf element by element (slower)
    from scipy.special import erf as _np_erf
except ImportError:  # pragma: no cover - depends on the environment
    _np_erf = np.vectorize(math.erf, otypes=[np.float64])

SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
GELU_A = 0.044715


# --- helpers -----------------------------------------------------------------------------------
def _up(x):
    """``(x as a floating array to compute with, dtype to return)``: float16 computes in float32."""
    if type(x) is not np.ndarray and not is_foreign(x):
        x = np.asarray(x)
    dt = x.dtype
    if dt.kind == "c" or dt.kind == "f" and dt.itemsize > 2:   # float32/64, complex: as they are
        return x, dt
    if dt == np.float16:
        return x.astype(np.float32), dt
    if not np.issubdtype(dt, np.inexact):
        x = x.astype(np.float64)
        return x, x.dtype
    return x, dt


def _dtype(x):
    return unbox(x).dtype if hasattr(unbox(x), "dtype") else np.asarray(unbox(x)).dtype


def _rule_up(*xs):
    """Rules of operations whose intermediates overflow float16 (norms, x**3) compute in float32."""
    return [S.astype(x, dtype=np.float32) if _dtype(x) == np.float16 else x for x in xs]


def _rule_down(c, dtype):
    return S.astype(c, dtype=dtype) if _dtype(c) != dtype else c


def _shift(x, axis):
    """``x - max(x)`` along ``axis`` (the max taken as 0 where it is not finite: all -inf rows)."""
    m = np.max(x, axis=axis, keepdims=True)
    if type(m) is not np.ndarray or not np.isfinite(m).all():   # a lazy array: no branch on values
        m = np.where(np.isfinite(m), m, 0)
    return x - m, m


def _keepdims_shape(shape, axis):
    if axis is None:
        return (1,) * len(shape)
    return tuple(1 if i in axis else n for i, n in enumerate(shape))


def _as_kept(a, shape, axis, keepdims):
    """A reduction's output (or cotangent) with the reduced axes put back as size 1."""
    if keepdims:
        return a
    return S.reshape(a, shape=_keepdims_shape(shape, axis))


def _sum_kept(x, axis):
    return R.sum_(x, axis=axis, keepdims=True)


def _plain_floats(*xs):
    """Plain float32/float64 NumPy arrays or scalars: a rule may compute in NumPy directly, the
    same operations its primitives would run, without a call through each."""
    for x in xs:
        t = type(x)
        if not (t is np.ndarray or t is np.float32 or t is np.float64) or x.dtype not in _FAST_FLOATS:
            return False
    return True


def _plain(*xs):
    """All plain arrays of one or more dimensions (first order): a rule may then work in place on the
    arrays it creates (operations on 0-d arrays give NumPy scalars)."""
    for x in xs:
        if type(x) is not np.ndarray or not x.ndim:
            return False
    return True


# --- vmap rules (``defprim(batch=...)``): the batch is on axis 0 of the values flagged batched ------
def _batch_axis(axis, x):
    """A per-example ``axis`` (int, tuple, or None for all) of batched ``x``, shifted past the batch."""
    return B.batch_axis(axis, len(B.shape(x)) - 1)


def _batch_along_axis(prim, vals, batched, params, size):
    """logsumexp, normalize: one operand, its axis shifted past the batch (None: the example's axes)."""
    p = dict(params)
    p["axis"] = _batch_axis(params.get("axis"), vals[0])
    return prim(vals[0], **p)


def _batch_leading(vals, batched, size=None):
    """Operands of a broadcasting primitive with the batch axis first and one rank: a batched
    operand gets ones after its batch axis, an unbatched one a leading 1 (broadcast to ``size``
    where the primitive's rules need every operand at the output's shape). Returns the operands and
    the example rank."""
    ranks = [len(B.shape(v)) - b for v, b in zip(vals, batched)]
    rank = max(ranks)
    out = []
    for v, b, r in zip(vals, batched, ranks):
        if b:
            out.append(B.pad_rank(v, rank))
            continue
        v = S.reshape(v, shape=(1,) * (rank - r + 1) + tuple(B.shape(v)))
        if size is not None:
            shape = tuple(B.shape(v))
            v = S.broadcast_to(v, shape=(size,) + shape[1:])
        out.append(v)
    return out, rank


def _reduce_each_example(loss, reduction):
    """A loss computed with ``reduction="none"`` (batch first) reduced over each example's elements,
    float16 summed in float32 as the primitives' own reductions are."""
    if reduction == "none":
        return loss
    shape = tuple(B.shape(loss))
    if len(shape) == 1:
        return loss
    dtype = _dtype(loss)
    total = R.sum_(_rule_up(loss)[0], axis=tuple(range(1, len(shape))), keepdims=False)
    if reduction == "mean":
        total = total / int(np.prod(shape[1:], dtype=np.int64))
    return _rule_down(total, dtype)


# --- softmax, log_softmax, logsumexp -------------------------------------------------------------
_FAST_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _all_finite(m):
    """Are the maxima ``m`` all finite? One reduction, and no warning for rows of +-inf or NaN."""
    return math.isfinite(np.maximum.reduce(np.abs(m), axis=None))


def _shifted_of_array(x, axis):
    """``_shift`` for a plain float array, as every plain-array fast path below starts: ``(x - m, m)``
    with ``m`` the maxima along ``axis`` (kept as size 1); None when a maximum is not finite (the
    general implementations, through ``_shift``, handle those rows)."""
    m = np.maximum.reduce(x, axis=axis, keepdims=True)
    if not _all_finite(m):
        return None
    return x - m, m


def _softmax(x, axis=None):
    if type(x) is np.ndarray and x.ndim and x.dtype in _FAST_FLOATS:    # NumPy's own few calls (what jit programs run)
        out = softmax_of_array(x, axis)
        if out is not None:
            return out
    x, dt = _up(x)
    z, _ = _shift(x, axis)
    np.exp(z, out=z)
    z /= np.sum(z, axis=axis, keepdims=True)
    return z.astype(dt, copy=False)


def softmax_of_array(x, axis):
    """softmax of a plain float32/float64 array of one or more dimensions along one int axis: NumPy's
    own few operations, so that ``wnn.softmax`` on plain arrays costs what NumPy code costs. None
    when a maximum is not finite (the implementation above handles those rows)."""
    shifted = _shifted_of_array(x, axis)
    if shifted is None:
        return None
    e = shifted[0]
    np.exp(e, out=e)
    e /= np.add.reduce(e, axis=axis, keepdims=True)
    return e


def log_softmax_of_array(x, axis):
    """log_softmax of a plain float array along one axis (as ``softmax_of_array``)."""
    shifted = _shifted_of_array(x, axis)
    if shifted is None:
        return None
    z = shifted[0]
    z -= np.log(np.add.reduce(np.exp(z), axis=axis, keepdims=True))
    return z


def _softmax_vjp(g, ans, x, axis=None):
    if _plain(g, ans):   # the lines below in NumPy, the product's array reused
        ga = g * ans
        ga -= ans * np.add.reduce(ga, axis=axis, keepdims=True)
        return ga
    ga = g * ans
    return ga - ans * _sum_kept(ga, axis)


def _softmax_jvp(t, ans, x, axis=None):
    """``p * (t - sum(p * t))``: the VJP's formula, as the Jacobian ``diag(p) - p p^T`` is symmetric."""
    if not _plain(t, ans):
        return _softmax_vjp(t, ans, x, axis)
    out = ans * t                                        # one new array, then in place
    s = np.sum(out, axis=axis, keepdims=True)
    np.subtract(t, s, out=out)
    out *= ans
    return out


softmax = defprim(_softmax, _softmax_vjp, name="nn.softmax", jvp=_softmax_jvp, batched_vjp=True, batch=axis_rule)


def _softmax_known(x, axis=None, known=None):
    return known[0]


# softmax whose value the forward pass already computed (``known = (value, z, s)``: the user's
# ``exp(z) / s``, plain arrays), recorded by the rewrite of a written-out ``exp(z) / sum(exp(z))`` at
# first order: one entry on the unshifted logits, whose rule replaces those of max, subtract, exp,
# sum and divide; ``z`` and ``s`` serve a later ``log`` of it (rewrites.py)
def _softmax_known_batch(prim, vals, batched, params, size):
    """The known value is one example's: the batched softmax is computed afresh."""
    return softmax(vals[0], axis=_batch_axis(params.get("axis"), vals[0]))


softmax_known = defprim(_softmax_known,
                        lambda g, ans, x, axis=None, known=None: _softmax_vjp(g, ans, x, axis),
                        name="nn.softmax_known",
                        jvp=lambda t, ans, x, axis=None, known=None: _softmax_jvp(t, ans, x, axis),
                        batch=one_batch_axis(_softmax_known_batch))


def _log_softmax(x, axis=None):
    if type(x) is np.ndarray and x.ndim and x.dtype in _FAST_FLOATS:    # NumPy's own few calls (what jit programs run)
        out = log_softmax_of_array(x, axis)
        if out is not None:
            return out
    x, dt = _up(x)
    z, _ = _shift(x, axis)
    z -= np.log(np.sum(np.exp(z), axis=axis, keepdims=True))
    return z.astype(dt, copy=False)


def _log_softmax_jvp(t, ans, x, axis=None):
    """``t - sum(softmax(x) * t)``, the softmax as ``exp(ans)``."""
    if not _plain(t, ans):
        return t - _sum_kept(E.exp(ans) * t, axis)
    p = np.exp(ans)
    p *= t
    return t - np.sum(p, axis=axis, keepdims=True)


def _log_softmax_vjp(g, ans, x, axis=None):
    """``g - softmax(x) * sum(g)``, the softmax as ``exp(ans)``."""
    if _plain(g, ans):
        return g - np.exp(ans) * np.add.reduce(g, axis=axis, keepdims=True)
    return g - E.exp(ans) * _sum_kept(g, axis)


log_softmax = defprim(_log_softmax, _log_softmax_vjp,
                      name="nn.log_softmax", jvp=_log_softmax_jvp, batched_vjp=True, batch=axis_rule)


def _log_softmax_known(x, axis=None, known=None):
    return known[0]


# log_softmax whose value the forward pass already computed (``known = (value, softmax)``, plain
# arrays): recorded by the rewrite of a written-out ``log(exp(z) / sum(exp(z)))`` at first order
def _log_softmax_known_batch(prim, vals, batched, params, size):
    """The known value is one example's: the batched log_softmax is computed afresh."""
    return log_softmax(vals[0], axis=_batch_axis(params.get("axis"), vals[0]))


log_softmax_known = defprim(_log_softmax_known,
                            lambda g, ans, x, axis=None, known=None: g - known[1] * (
                                np.add.reduce(g, axis=axis, keepdims=True) if _plain(g) else _sum_kept(g, axis)),
                            name="nn.log_softmax_known",
                            jvp=lambda t, ans, x, axis=None, known=None: t - _sum_kept(known[1] * t, axis),
                            batch=one_batch_axis(_log_softmax_known_batch))


def _logsumexp_of_array(x, axis, keepdims):
    """logsumexp of a float32/float64 array (as ``log_softmax_of_array``); None for a maximum that is not finite."""
    shifted = _shifted_of_array(x, axis)
    if shifted is None:
        return None
    e, m = shifted
    np.exp(e, out=e)
    out = np.add.reduce(e, axis=axis, keepdims=True)
    np.log(out, out=out)
    out += m
    if not keepdims:
        out = np.squeeze(out, axis=axis) if axis is not None else out.reshape(())
    return out


def _logsumexp(x, axis=None, keepdims=False):
    if type(x) is np.ndarray and x.ndim and x.dtype in _FAST_FLOATS:
        out = _logsumexp_of_array(x, axis, keepdims)
        if out is not None:
            return out
    x, dt = _up(x)
    z, m = _shift(x, axis)
    out = np.log(np.sum(np.exp(z), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = np.squeeze(out, axis=axis) if axis is not None else out.reshape(())
    return out.astype(dt, copy=False)


def _logsumexp_vjp(g, ans, x, axis=None, keepdims=False):
    if _plain_floats(g, ans, x) and x.ndim and g.dtype == x.dtype and ans.dtype == x.dtype:
        # plain, one dtype: the lines below in NumPy, one new array (no primitive calls)
        if not (keepdims or axis is None):
            kept = _keepdims_shape(x.shape, axis)
            g, ans = np.reshape(g, kept), np.reshape(ans, kept)
        p = np.subtract(x, ans)
        np.exp(p, out=p)
        p *= g
        return p
    shape = x.shape
    return _as_kept(g, shape, axis, keepdims) * E.exp(x - _as_kept(ans, shape, axis, keepdims))


def _logsumexp_jvp(t, ans, x, axis=None, keepdims=False):
    """``sum(softmax(x) * t)``, the softmax as ``exp(x - ans)`` (as the VJP rule)."""
    kept = _as_kept(ans, x.shape, axis, keepdims)
    if not _plain(t, x) or type(kept) is Tracer:
        return R.sum_(E.exp(x - kept) * t, axis=axis, keepdims=keepdims)
    p = np.subtract(x, kept)                             # one new array, then in place
    np.exp(p, out=p)
    p *= t
    return np.sum(p, axis=axis, keepdims=keepdims)


logsumexp = defprim(_logsumexp, _logsumexp_vjp, name="nn.logsumexp", jvp=_logsumexp_jvp,
                    batch=one_batch_axis(_batch_along_axis), batched_vjp=True)


def _logsumexp_b(x, b, axis=None, keepdims=False):
    x, dt = _up(x)
    b = np.asarray(b)
    z, m = _shift(np.broadcast_to(x, np.broadcast_shapes(x.shape, b.shape)), axis)
    out = np.log(np.sum(b * np.exp(z), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = np.squeeze(out, axis=axis) if axis is not None else out.reshape(())
    return out.astype(dt, copy=False)


def _lse_b_weight(g, ans, x, b, axis, keepdims):
    """``g * exp(x - lse)`` in the broadcast shape of ``x`` and ``b``."""
    shape = np.broadcast_shapes(x.shape, b.shape)
    return _as_kept(g, shape, axis, keepdims) * E.exp(x - _as_kept(ans, shape, axis, keepdims))


def _lse_b_tangent(t, w, ans, x, b, axis, keepdims):
    """``sum(exp(x - lse) * w * t)``: a tangent's share (``w`` is ``b`` for ``x``'s, 1 for ``b``'s)."""
    e = E.exp(x - _as_kept(ans, np.broadcast_shapes(x.shape, b.shape), axis, keepdims))
    return R.sum_(e * t if w is None else e * w * t, axis=axis, keepdims=keepdims)


def _logsumexp_b_batch(prim, vals, batched, params, size):
    """``axis`` counts the axes of the broadcast example shape of ``x`` and ``b``."""
    (x, b), rank = _batch_leading(vals, batched)
    return prim(x, b, axis=B.batch_axis(params.get("axis"), rank), keepdims=params.get("keepdims", False))


logsumexp_b = defprim(_logsumexp_b, (
    lambda g, ans, x, b, axis=None, keepdims=False: unbroadcast(_lse_b_weight(g, ans, x, b, axis, keepdims) * b,
                                                                x.shape),
    lambda g, ans, x, b, axis=None, keepdims=False: unbroadcast(_lse_b_weight(g, ans, x, b, axis, keepdims),
                                                                b.shape)),
    name="nn.logsumexp_b", jvp=(
    lambda t, ans, x, b, axis=None, keepdims=False: _lse_b_tangent(t, b, ans, x, b, axis, keepdims),
    lambda t, ans, x, b, axis=None, keepdims=False: _lse_b_tangent(t, None, ans, x, b, axis, keepdims)),
    batch=one_batch_axis(_logsumexp_b_batch), batched_vjp=True)


# --- cross-entropy of a softmax ----------------------------------------------------------------
def _examples(shape, axis):
    n = 1
    for i, size in enumerate(shape):
        if i != axis:
            n *= size
    return n


def _reduce_loss(per_example, reduction):
    if reduction == "mean":
        return np.mean(per_example)
    if reduction == "sum":
        return np.sum(per_example)
    return per_example


def _loss_ct(g, shape, axis, reduction):
    """The per-example cotangent of a reduced loss, with the class axis put back as size 1."""
    if reduction == "none":
        if type(g) is np.ndarray:
            return g.reshape(_keepdims_shape(shape, (axis,)))
        return S.reshape(g, shape=_keepdims_shape(shape, (axis,)))
    if reduction == "mean":
        return g / _examples(shape, axis)
    return g


def _probabilities(x, axis, stash):
    if type(x) is Tracer or stash is None or stash[0] is None:
        return softmax(x, axis=(axis,))
    return stash[0]


def _rows(labels):
    """Row indices and labels for reading ``z[row, label]`` of ``z`` viewed as (examples, classes)."""
    flat = np.asarray(labels).reshape(-1)
    return np.arange(flat.size), flat


def _pick(z, labels, axis):
    """``z`` at the labels along ``axis``: one value per example (shape of ``labels``)."""
    labels = np.asarray(labels)
    if axis == z.ndim - 1:
        rows, flat = _rows(labels)
        return z.reshape(-1, z.shape[-1])[rows, flat].reshape(labels.shape)
    return np.squeeze(np.take_along_axis(z, np.expand_dims(labels, axis), axis=axis), axis=axis)


def _sce_sparse_of_array(x, labels, reduction, stash):
    """Cross-entropy of a plain float32/float64 matrix-like ``x`` against integer labels along its
    last axis: NumPy's few calls (no dtype or shape to normalize). None for a maximum that is not
    finite (the general implementation handles those rows)."""
    shifted = _shifted_of_array(x, -1)
    if shifted is None:
        return None
    z = shifted[0]
    e = np.exp(z)
    s = np.add.reduce(e, axis=-1, keepdims=True)
    rows, flat = _rows(labels)
    per_example = np.log(s.reshape(-1))
    per_example -= z.reshape(-1, z.shape[-1])[rows, flat]   # _pick's read, kept flat
    if stash is not None:
        e /= s
        stash[0] = e
    if reduction == "none":
        return per_example.reshape(labels.shape)
    total = np.add.reduce(per_example, axis=None)
    return total / flat.size if reduction == "mean" else total


def _sce_sparse(x, labels, axis, reduction, stash=None):
    if type(x) is np.ndarray and x.dtype in _FAST_FLOATS and axis == x.ndim - 1 \
            and type(labels) is np.ndarray and x.size:
        out = _sce_sparse_of_array(x, labels, reduction, stash)
        if out is not None:
            return out
    x, dt = _up(x)
    z, _ = _shift(x, axis)
    e = np.exp(z)
    s = np.sum(e, axis=axis, keepdims=True)
    per_example = np.log(np.squeeze(s, axis=axis)) - _pick(z, labels, axis)
    if stash is not None:
        e /= s
        stash[0] = e.astype(dt, copy=False)
    return np.asarray(_reduce_loss(per_example, reduction)).astype(dt, copy=False)[()]


def _one_hot_at(labels, shape, axis, dtype):
    labels = constant(labels)
    if type(labels) is Tracer:  # batched by vmap (a grad inside it): each example's own labels
        kept = S.reshape(labels, shape=_keepdims_shape(shape, (axis,)))
        classes = np.arange(shape[axis]).reshape([-1 if i == axis else 1 for i in range(len(shape))])
        return S.astype(_equal(kept, classes), dtype=dtype)
    out = np.zeros(shape, dtype)
    np.put_along_axis(out, np.expand_dims(np.asarray(labels), axis), 1, axis=axis)
    return out


@elementwise_constant
def _equal(a, b):
    return a == b


def _sce_sparse_vjp(g, ans, x, labels, axis, reduction, stash=None):
    p = _probabilities(x, axis, stash)
    ct = _loss_ct(g, x.shape, axis, reduction)
    if type(p) is not Tracer and type(ct) is not Tracer and axis == p.ndim - 1:
        d = p * ct                                     # softmax - onehot, scaled, in one new array
        rows, flat = _rows(labels)
        # a reduced loss's cotangent is one number; "none"'s is one per example
        scale = ct if reduction != "none" else np.broadcast_to(ct, p.shape[:-1] + (1,)).reshape(-1)
        d.reshape(-1, p.shape[-1])[rows, flat] -= scale
        return d
    d = p - _one_hot_at(labels, x.shape, axis, _dtype(p))
    return d * ct


def _reduce_tangent(d, t, axis, reduction, examples):
    """The tangent of a reduced per-example loss whose per-example derivative is ``d`` (along ``axis``)."""
    if reduction == "none":
        return R.sum_(d * t, axis=(axis,), keepdims=False)
    total = R.sum_(d * t, axis=None, keepdims=False)
    return total / examples if reduction == "mean" else total


def _sce_sparse_jvp(t, ans, x, labels, axis, reduction, stash=None):
    """``sum((softmax - onehot) * t)`` per example; the labels are integers (no tangent)."""
    p = _probabilities(x, axis, stash)
    if _plain(p, t) and axis == p.ndim - 1:
        d = p * t                                       # (softmax - onehot) * t in one new array
        rows, flat = _rows(labels)
        d.reshape(-1, p.shape[-1])[rows, flat] -= t.reshape(-1, p.shape[-1])[rows, flat]
        per_example = np.sum(d, axis=axis)
        if reduction == "none":
            return per_example
        total = np.sum(per_example)
        return total / per_example.size if reduction == "mean" else total
    d = p - _one_hot_at(labels, x.shape, axis, _dtype(p))
    return _reduce_tangent(d, t, axis, reduction, _examples(x.shape, axis))


def _cross_entropy_batch(prim, vals, batched, params, size):
    """Both operands batched (the rules read logits and labels or targets at one shape), the class
    axis shifted, one loss per row (reduction "none"), then reduced within each example."""
    x, labels = [v if b else B.broadcast_batch(v, size) for v, b in zip(vals, batched)]
    axis = params["axis"] % (len(B.shape(x)) - 1) + 1
    stash = None if params.get("stash") is None else [None]
    loss = prim(x, labels, axis=axis, reduction="none", stash=stash)
    return _reduce_each_example(loss, params["reduction"])


softmax_cross_entropy_sparse = defprim(_sce_sparse, (_sce_sparse_vjp, None), name="nn.softmax_cross_entropy",
                                       jvp=(_sce_sparse_jvp, None), batch=one_batch_axis(_cross_entropy_batch),
                                       batched_vjp=True)


def _sce_dense_of_array(x, t, reduction, stash):
    """Cross-entropy of plain float32/float64 ``x`` against targets ``t`` of its shape and dtype
    along the last axis: NumPy's few calls. None for a maximum that is not finite."""
    shifted = _shifted_of_array(x, -1)
    if shifted is None:
        return None
    logp = shifted[0]
    e = np.exp(logp)
    s = np.add.reduce(e, axis=-1, keepdims=True)
    logp -= np.log(s)
    per_example = np.add.reduce(t * logp, axis=-1)
    np.negative(per_example, out=per_example)
    if stash is not None:
        e /= s
        stash[0] = e
        stash.append(logp)
    if reduction == "none":
        return per_example
    total = np.add.reduce(per_example, axis=None)
    return total / per_example.size if reduction == "mean" else total


def _sce_dense(x, t, axis, reduction, stash=None):
    if type(x) is np.ndarray and type(t) is np.ndarray and x.ndim > 1 and axis == x.ndim - 1 \
            and x.dtype in _FAST_FLOATS and t.dtype == x.dtype and t.shape == x.shape and x.size:
        out = _sce_dense_of_array(x, t, reduction, stash)
        if out is not None:
            return out
    x, dt = _up(x)
    z, _ = _shift(x, axis)
    e = np.exp(z)
    s = np.sum(e, axis=axis, keepdims=True)
    logp = z - np.log(s)
    per_example = -np.sum(np.asarray(t) * logp, axis=axis)
    if stash is not None:
        e /= s
        stash[0] = e.astype(dt, copy=False)
        stash.append(logp.astype(dt, copy=False))
    return np.asarray(_reduce_loss(per_example, reduction)).astype(dt, copy=False)[()]


def _sce_dense_dx(x, t, axis, stash):
    """The per-example derivative in the logits: ``softmax(x) * sum(t) - t``."""
    p = _probabilities(x, axis, stash)
    if _plain(p, t):
        d = p * np.add.reduce(t, axis=axis, keepdims=True)
        d -= t
        return d
    return p * _sum_kept(t, (axis,)) - t


def _sce_dense_logp(x, axis, stash):
    """``log_softmax(x)``, minus the per-example derivative in the targets."""
    if type(x) is Tracer or stash is None or len(stash) < 2:
        return log_softmax(x, axis=(axis,))
    return stash[1]


def _sce_dense_vjp_x(g, ans, x, t, axis, reduction, stash=None):
    return _sce_dense_dx(x, t, axis, stash) * _loss_ct(g, x.shape, axis, reduction)


def _sce_dense_vjp_t(g, ans, x, t, axis, reduction, stash=None):
    return -_sce_dense_logp(x, axis, stash) * _loss_ct(g, x.shape, axis, reduction)


softmax_cross_entropy_dense = defprim(_sce_dense, (_sce_dense_vjp_x, _sce_dense_vjp_t),
                                      name="nn.softmax_cross_entropy_dense", jvp=(
    lambda tx, ans, x, t, axis, reduction, stash=None: _reduce_tangent(
        _sce_dense_dx(x, t, axis, stash), tx, axis, reduction, _examples(x.shape, axis)),
    lambda tt, ans, x, t, axis, reduction, stash=None: -_reduce_tangent(
        _sce_dense_logp(x, axis, stash), tt, axis, reduction, _examples(x.shape, axis))),
    batch=one_batch_axis(_cross_entropy_batch), batched_vjp=True)


# --- sigmoid family ----------------------------------------------------------------------------
def _sigmoid(x):
    if type(x) is np.ndarray and x.ndim and x.dtype in _FAST_FLOATS:   # the lines below, in place
        e = np.abs(x)
        np.negative(e, out=e)
        np.exp(e, out=e)
        out = np.where(x >= 0, 1, e)
        e += 1
        out /= e
        return out
    x, dt = _up(x)
    e = np.exp(-np.abs(x))
    return (np.where(x >= 0, 1, e) / (1 + e)).astype(dt, copy=False)


sigmoid = defunary(_sigmoid, lambda g, ans, x: g * ans * (1 - ans), name="nn.sigmoid")


def _sigmoid_known(x, known=None):
    return known


def _sigmoid_known_vjp(g, ans, x, known=None):
    """``g s (1 - s)``: one rule where the written-out composition ran four (divide, add, exp, negative)."""
    if _plain(g, ans) and g.shape == ans.shape and g.dtype == ans.dtype:
        out = 1 - ans
        out *= ans
        out *= g
        return out
    return g * ans * (1 - ans)


def _sigmoid_known_batch(prim, vals, batched, params, size):
    """The known value is one example's: the batched sigmoid is computed afresh."""
    return sigmoid(vals[0])


# sigmoid whose value the forward pass already computed (``known``: the user's ``1 / (1 + exp(-x))``,
# a plain array), recorded by the rewrite of that division at first order (rewrites.py)
sigmoid_known = defprim(_sigmoid_known, _sigmoid_known_vjp, name="nn.sigmoid_known",
                        jvp=lambda t, ans, x, known=None: t * ans * (1 - ans),
                        batch=one_batch_axis(_sigmoid_known_batch))


def _log_sigmoid(x):
    x, dt = _up(x)
    return (np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))).astype(dt, copy=False)


# d/dx log sigmoid(x) = sigmoid(-x) = 1 - exp(ans) = -expm1(ans): exact for large x too
log_sigmoid = defunary(_log_sigmoid, lambda g, ans, x: -g * E.expm1(ans), name="nn.log_sigmoid")


def _softplus(x):
    x, dt = _up(x)
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(dt, copy=False)


# d/dx softplus(x) = sigmoid(x) = 1 - exp(-ans) = -expm1(-ans)
softplus = defunary(_softplus, lambda g, ans, x: -g * E.expm1(-ans), name="nn.softplus")


def _silu(x):
    x, dt = _up(x)
    return (x * _sigmoid(x)).astype(dt, copy=False)


def _python_sigmoid(x):
    """sigmoid of a Python float, stable for either sign."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _silu_vjp(g, ans, x):
    if _plain_floats(g, x) and not x.ndim:   # one number: Python's floats, then x's dtype
        xf = float(x)
        s = _python_sigmoid(xf)
        return g * x.dtype.type(s * (1.0 + xf * (1.0 - s)))
    s = _sigmoid(x) if _plain_floats(g, x) else sigmoid(x)
    return g * s * (1 + x * (1 - s))


silu = defunary(_silu, _silu_vjp, name="nn.silu")


def _bce_logits(x, t, reduction):
    x, dt = _up(x)
    loss = np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))
    return np.asarray(_reduce_loss(loss, reduction)).astype(dt, copy=False)[()]


def _elementwise_ct(g, size, reduction):
    return g / size if reduction == "mean" else g


def _reduce_elementwise(t, reduction, size):
    """An elementwise loss's tangent, reduced as the loss is (``size`` elements)."""
    if reduction == "none":
        return t
    total = R.sum_(t, axis=None, keepdims=False)
    return total / size if reduction == "mean" else total


def _elementwise_loss_batch(prim, vals, batched, params, size, broadcast=True):
    """An elementwise loss (BCE, MSE): computed unreduced, then reduced within each example.
    BCE's rules want both operands at the output's shape (``broadcast``); MSE's unbroadcast."""
    (x, t), _ = _batch_leading(vals, batched, size if broadcast else None)
    return _reduce_each_example(prim(x, t, reduction="none"), params["reduction"])


bce_with_logits = defprim(_bce_logits, (
    lambda g, ans, x, t, reduction: (sigmoid(x) - t) * _elementwise_ct(g, x.size, reduction),
    lambda g, ans, x, t, reduction: -x * _elementwise_ct(g, x.size, reduction)),
    name="nn.binary_cross_entropy_with_logits", jvp=(
    lambda tx, ans, x, t, reduction: _reduce_elementwise((sigmoid(x) - t) * tx, reduction, x.size),
    lambda tt, ans, x, t, reduction: _reduce_elementwise(-x * tt, reduction, x.size)),
    batch=one_batch_axis(_elementwise_loss_batch), batched_vjp=True)


# --- activations -------------------------------------------------------------------------------
def _relu(x):
    return np.maximum(x, 0)


relu = defunary(_relu, lambda g, ans, x: g * E._positive(ans), name="nn.relu")


def _erf(x):
    x, dt = _up(x)
    return np.asarray(_np_erf(x)).astype(dt, copy=False)


erf = defunary(_erf, lambda g, ans, x: g * TWO_OVER_SQRT_PI * E.exp(-(x * x)), name="nn.erf")


def _gelu(x):
    x, dt = _up(x)
    return (0.5 * x * (1 + _np_erf(x / SQRT2))).astype(dt, copy=False)


def _gelu_vjp(g, ans, x):
    """Phi(x) + x phi(x)."""
    if _plain_floats(g, x) and not x.ndim:   # one number: Python's floats, then x's dtype
        xf = float(x)
        return g * x.dtype.type(0.5 * (1.0 + math.erf(xf / SQRT2)) + xf * INV_SQRT_2PI * math.exp(-0.5 * xf * xf))
    if _plain_floats(g, x):   # the operations below, in NumPy
        cdf = 0.5 * (1 + _np_erf(x * (1 / SQRT2)))
        return g * (cdf + x * INV_SQRT_2PI * np.exp(-0.5 * (x * x)))
    dtype = _dtype(x)
    g, x = _rule_up(g, x)
    cdf = 0.5 * (1 + erf(x * (1 / SQRT2)))
    return _rule_down(g * (cdf + x * INV_SQRT_2PI * E.exp(-0.5 * (x * x))), dtype)


gelu = defunary(_gelu, _gelu_vjp, name="nn.gelu")


def _gelu_tanh(x):
    x, dt = _up(x)
    t = np.tanh(SQRT_2_OVER_PI * (x + GELU_A * x * x * x))
    return (0.5 * x * (1 + t)).astype(dt, copy=False)


def _gelu_tanh_vjp(g, ans, x):
    dtype = _dtype(x)
    g, x = _rule_up(g, x)
    x2 = x * x
    t = E.tanh(SQRT_2_OVER_PI * (x + GELU_A * x2 * x))
    slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * GELU_A * x2)
    return _rule_down(g * slope, dtype)


gelu_tanh = defunary(_gelu_tanh, _gelu_tanh_vjp, name="nn.gelu_tanh")


# --- regression ---------------------------------------------------------------------------------
def _mse(p, t, reduction):
    if type(p) is np.ndarray and type(t) is np.ndarray and p.shape == t.shape and p.dtype in _FAST_FLOATS \
            and t.dtype == p.dtype and reduction != "none" and p.size:
        d = p - t      # NumPy's few calls: the mean (sum) of the squares
        d *= d
        total = np.add.reduce(d, axis=None)
        return total / d.size if reduction == "mean" else total
    p, dt = _up(p)
    d = p - t
    return np.asarray(_reduce_loss(d * d, reduction)).astype(dt, copy=False)[()]


def _size(p, t):
    return int(np.prod(np.broadcast_shapes(p.shape, t.shape), dtype=np.int64))


def _mse_ct(g, p, t, reduction):
    d = p - t
    return 2 * d * _elementwise_ct(g, d.size, reduction)


def _mse_vjp(g, p, t, reduction, sign):
    """``sign * 2 (p - t) g`` (divided by the size for a mean), unbroadcast to the operand's shape."""
    if type(p) is np.ndarray and type(t) is np.ndarray and p.shape == t.shape and reduction != "none" \
            and _plain_floats(g, p, t):
        d = p - t if sign > 0 else t - p
        d *= g * ((2.0 / d.size) if reduction == "mean" else 2.0)
        return d
    ct = _mse_ct(g, p, t, reduction)
    return unbroadcast(ct if sign > 0 else -ct, p.shape if sign > 0 else t.shape)


def _mse_batch(prim, vals, batched, params, size):
    return _elementwise_loss_batch(prim, vals, batched, params, size, broadcast=False)


mse = defprim(_mse, (lambda g, ans, p, t, reduction: _mse_vjp(g, p, t, reduction, 1),
                     lambda g, ans, p, t, reduction: _mse_vjp(g, p, t, reduction, -1)),
              name="nn.mse", jvp=(
    lambda tp, ans, p, t, reduction: _reduce_elementwise(2 * (p - t) * tp, reduction, _size(p, t)),
    lambda tt, ans, p, t, reduction: _reduce_elementwise(-2 * (p - t) * tt, reduction, _size(p, t))),
    batch=one_batch_axis(_mse_batch), batched_vjp=True)


# --- norms and cosines ---------------------------------------------------------------------------
def _norm_kept(x, axis):
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=True))


def _normalize(x, axis, eps):
    x, dt = _up(x)
    return (x / np.maximum(_norm_kept(x, axis), eps)).astype(dt, copy=False)


def _clamped_norm(x, axis, eps):
    """``(max(||x||, eps), ||x|| > eps)`` along ``axis``, with wengert operations."""
    n = E.sqrt(_sum_kept(x * x, axis))
    inside = _exceeds(n, eps)
    if _all(inside):
        return n, inside
    return E.where(inside, n, eps), inside


@elementwise_constant
def _exceeds(n, eps):
    return n > eps


def _all(mask):
    """Does ``mask`` hold everywhere? (Under vmap, in every example: the check only skips a no-op.)"""
    return not staged(mask) and bool(np.all(unbox(mask)))  # under jit: never skipped


def _unit_vjp(g, y, n, inside, axis):
    """The VJP of ``y = x / n``, ``n = max(||x||, eps)``: ``(g - y <g, y>) / n``, or ``g / eps``
    where the norm was clamped (there ``y`` is linear in ``x``)."""
    radial = y * _sum_kept(g * y, axis)
    if not _all(inside):
        radial = E.where(inside, radial, 0)
    return (g - radial) / n


def _normalize_vjp(g, ans, x, axis, eps):
    dtype = _dtype(x)
    g, ans, x = _rule_up(g, ans, x)
    n, inside = _clamped_norm(x, axis, eps)
    return _rule_down(_unit_vjp(g, ans, n, inside, axis), dtype)


# (I - y y^T) / n, or I / eps where the norm is clamped: a symmetric Jacobian, so the VJP rule is the JVP
normalize = defprim(_normalize, _normalize_vjp, name="nn.normalize", jvp=_normalize_vjp,
                    batch=one_batch_axis(_batch_along_axis), batched_vjp=True)


def _cosine(x1, x2, axis, eps):
    x1, dt = _up(x1)
    x2, dt2 = _up(x2)
    u1 = x1 / np.maximum(_norm_kept(x1, axis), eps)
    u2 = x2 / np.maximum(_norm_kept(x2, axis), eps)
    return np.sum(u1 * u2, axis=axis).astype(np.result_type(dt, dt2), copy=False)


def _cosine_vjp(g, ans, args, params, parents):
    """d cos / d x1 = (u2 - cos * u1) / ||x1|| (the radial part dropped where ||x1|| <= eps)."""
    axis, eps = params["axis"], params["eps"]
    x1, x2 = args
    d1, d2 = _dtype(x1), _dtype(x2)
    g, ans, x1, x2 = _rule_up(g, ans, x1, x2)
    kept = _keepdims_shape(np.broadcast_shapes(x1.shape, x2.shape), axis)
    g = S.reshape(g, shape=kept)
    c = S.reshape(ans, shape=kept)
    n1, in1 = _clamped_norm(x1, axis, eps)
    n2, in2 = _clamped_norm(x2, axis, eps)
    u1, u2 = x1 / n1, x2 / n2
    out = []
    for position, _ in parents:
        if position == 0:
            u, v, n, inside, shape, dtype = u1, u2, n1, in1, x1.shape, d1
        else:
            u, v, n, inside, shape, dtype = u2, u1, n2, in2, x2.shape, d2
        radial = c * u
        if not _all(inside):
            radial = E.where(inside, radial, 0)
        out.append(_rule_down(unbroadcast(g * (v - radial) / n, shape), dtype))
    return out


def _cosine_jvp(tangents, ans, args, params):
    """``sum(t1 * (u2 - cos * u1) / ||x1||) + (the same with 1 and 2 swapped)`` along ``axis``:
    the VJP's vectors paired with the tangents."""
    axis, eps = params["axis"], params["eps"]
    x1, x2 = args
    t1, t2 = tangents
    dtype = _dtype(ans)
    ans, x1, x2 = _rule_up(ans, x1, x2)
    c = S.reshape(ans, shape=_keepdims_shape(np.broadcast_shapes(x1.shape, x2.shape), axis))
    n1, in1 = _clamped_norm(x1, axis, eps)
    n2, in2 = _clamped_norm(x2, axis, eps)
    u1, u2 = x1 / n1, x2 / n2
    total = None
    for t, u, v, n, inside in ((t1, u1, u2, n1, in1), (t2, u2, u1, n2, in2)):
        if t is None:
            continue
        radial = c * u
        if not _all(inside):
            radial = E.where(inside, radial, 0)
        share = R.sum_(_rule_up(t)[0] * ((v - radial) / n), axis=axis, keepdims=False)
        total = share if total is None else total + share
    return _rule_down(total, dtype)


def _cosine_batch(prim, vals, batched, params, size):
    """An unbatched operand gets a leading 1 (its norms are taken along the same shifted axis)."""
    (x1, x2), rank = _batch_leading(vals, batched)
    return prim(x1, x2, axis=B.batch_axis(params["axis"], rank), eps=params["eps"])


cosine_similarity = defprim(_cosine, (), name="nn.cosine_similarity", batch=one_batch_axis(_cosine_batch),
                            batched_vjp=True, fused_vjp=_cosine_vjp, fused_jvp=_cosine_jvp, keep_ans=True)


def _pcs_operands(a, b, eps, stash):
    """The operands in the rules' precision and their pieces: those the forward pass stashed for
    plain arrays, else computed again (with traced operations when the operands are traced)."""
    if type(a) is Tracer or type(b) is Tracer or stash is None or stash[0] is None:
        a, b = _rule_up(a, b)
        return a, b, _pcs_parts(a, b, eps)
    return _up(a)[0], _up(b)[0], stash[0]


def _pcs_parts(a, b, eps):
    """The pieces of the seed-000 operation, batch first, with wengert operations (NumPy on plain
    arrays): dot products of raw columns (one batched matmul) scaled by the clamped norms."""
    at = S.transpose(a, axes=(2, 0, 1))                              # (B, W, R)
    bt = S.transpose(b, axes=(2, 1, 0))                              # (B, N, W)
    na, in_a = _clamped_norm(a, (0,), eps)                           # (1, R, B)
    nb, in_b = _clamped_norm(b, (0,), eps)                           # (1, N, B)
    inv = 1 / (S.transpose(nb, axes=(2, 1, 0)) * S.transpose(na, axes=(2, 0, 1)))   # (B, N, R)
    s = C.matmul(bt, at) * inv                                       # cosines, (B, N, R)
    return at, bt, s, inv, na, nb, in_a, in_b


def _pairwise_cosine_softmax(a, b, eps, stash=None):
    """a: (W, R, B), b: (W, N, B) -> P: (N, R, B), P[:, j, k] = softmax_i cos(b[:, i, k], a[:, j, k])."""
    a, dt = _up(a)
    b, _ = _up(b)
    parts = _pcs_parts(a, b, eps)
    if stash is not None:
        stash[0] = parts
    return _softmax(parts[2], axis=(1,)).transpose(1, 2, 0).astype(dt, copy=False)


def _norm_part(t_sum, x, n, inside, layout):
    """The gradient through ``max(||x||, eps)``: ``x * dL/dn / ||x||`` (zero where clamped)."""
    factor = S.reshape(S.transpose(t_sum, axes=(1, 0)), shape=(1,) + layout) / (n * n)
    if not _all(inside):
        factor = E.where(inside, factor, 0)
    return x * -factor


def _pairwise_cosine_softmax_vjp(g, ans, args, params, parents):
    eps, stash = params["eps"], params.get("stash")
    a, b = args
    da_t, db_t = _dtype(a), _dtype(b)
    a, b, parts = _pcs_operands(a, b, eps, stash)
    at, bt, s, inv, na, nb, in_a, in_b = parts
    g, p = _rule_up(g, ans)
    gt, pt = S.transpose(g, axes=(2, 0, 1)), S.transpose(p, axes=(2, 0, 1))   # (B, N, R)
    gs = _softmax_vjp(gt, pt, None, axis=(1,))
    gd = gs * inv
    t = gs * s
    out = []
    for position, _ in parents:
        if position == 0:
            ga = S.transpose(C.matmul(_swap_last(bt), gd), axes=(1, 2, 0))          # (W, R, B)
            ga = ga + _norm_part(R.sum_(t, axis=(1,), keepdims=False), a, na, in_a, a.shape[1:])
            out.append(_rule_down(ga, da_t))
        else:
            gb = S.transpose(C.matmul(at, _swap_last(gd)), axes=(1, 2, 0))          # (W, N, B)
            gb = gb + _norm_part(R.sum_(t, axis=(2,), keepdims=False), b, nb, in_b, b.shape[1:])
            out.append(_rule_down(gb, db_t))
    return out


def _swap_last(x):
    return S.transpose(x, axes=(0, 2, 1))


def _radial(x, t, n, inside, axes):
    """``<x, t> / n**2`` along axis 0 (zero where the norm is clamped), batch first by ``axes``."""
    r = R.sum_(x * t, axis=(0,), keepdims=True) / (n * n)
    if not _all(inside):
        r = E.where(inside, r, 0)
    return S.transpose(r, axes=axes)


def _pairwise_cosine_softmax_jvp(tangents, ans, args, params):
    """``ds = (b^T ta + tb^T a) / (|b| |a|) - s (<a, ta>/|a|^2 + <b, tb>/|b|^2)``, then the softmax's
    ``P * (ds - sum_i P ds)``, all batch first (B, N, R)."""
    eps, stash = params["eps"], params.get("stash")
    a, b = args
    ta, tb = tangents
    dtype = _dtype(ans)
    a, b, parts = _pcs_operands(a, b, eps, stash)
    at, bt, s, inv, na, nb, in_a, in_b = parts
    dots, radial = None, None
    if ta is not None:
        ta = _rule_up(ta)[0]
        dots = C.matmul(bt, S.transpose(ta, axes=(2, 0, 1)))                        # (B, N, R)
        radial = _radial(a, ta, na, in_a, (2, 0, 1))                   # (B, 1, R)
    if tb is not None:
        tb = _rule_up(tb)[0]
        d = C.matmul(S.transpose(tb, axes=(2, 1, 0)), at)
        r = _radial(b, tb, nb, in_b, (2, 1, 0))                        # (B, N, 1)
        dots = d if dots is None else dots + d
        radial = r if radial is None else radial + r
    ds = dots * inv - s * radial
    pt = S.transpose(_rule_up(ans)[0], axes=(2, 0, 1))
    dp = pt * (ds - _sum_kept(pt * ds, (1,)))
    return _rule_down(S.transpose(dp, axes=(1, 2, 0)), dtype)


def _pairwise_cosine_softmax_batch(prim, vals, batched, params, size):
    """The operation's own batch axis (the last) takes the vmap batch too: (V, W, R, B) becomes
    (W, R, V * B), and the result (N, R, V * B) is split back to (V, N, R, B)."""
    a, b = [v if flag else B.broadcast_batch(v, size) for v, flag in zip(vals, batched)]
    (_, width, n_a, k), n_b = B.shape(a), B.shape(b)[2]
    a = S.reshape(S.transpose(a, axes=(1, 2, 0, 3)), shape=(width, n_a, size * k))
    b = S.reshape(S.transpose(b, axes=(1, 2, 0, 3)), shape=(width, n_b, size * k))
    stash = None if params.get("stash") is None else [None]
    out = prim(a, b, eps=params["eps"], stash=stash)
    return S.transpose(S.reshape(out, shape=(n_b, n_a, size, k)), axes=(2, 0, 1, 3))


pairwise_cosine_softmax = defprim(_pairwise_cosine_softmax, (), name="nn.pairwise_cosine_softmax",
                                  batch=one_batch_axis(_pairwise_cosine_softmax_batch),
                                  fused_vjp=_pairwise_cosine_softmax_vjp, fused_jvp=_pairwise_cosine_softmax_jvp,
                                  keep_ans=True, batched_vjp=True)

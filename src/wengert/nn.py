"""wengert.nn: fused, numerically stable neural-network operations with hand-derived gradients.

    import wengert.nn as wnn
    loss = wnn.softmax_cross_entropy(logits, labels)          # integer labels or probabilities

Every function here is one primitive (see ``primitives/nn.py``): a stable implementation and a
VJP rule derived by hand, cheaper than differentiating the composition it replaces, and itself
differentiable (second derivatives work). On plain arrays each function is plain NumPy, so the
same code runs at NumPy speed when nothing is being differentiated. Values and gradients stay
finite at logits of +-1e4, all-equal logits, and in float16 and float32 (float16 is computed in
float32 and cast back).

Writing the composition out instead (``wnp.log(wnp.exp(x) / wnp.sum(wnp.exp(x), axis, keepdims=True))``)
also gets the fused operation: the engine recognizes a few such patterns as it records them
(docs/rewrites.md).
"""
from __future__ import annotations

import numpy as np

from .core.namespace import is_foreign
from .core.trace import Tracer, unbox
from .primitives import nn as P
from .primitives._table import unbox_all
from . import numpy as wnp

__all__ = [
    "softmax", "log_softmax", "logsumexp", "softmax_cross_entropy", "sigmoid", "log_sigmoid",
    "softplus", "relu", "gelu", "silu", "binary_cross_entropy_with_logits", "one_hot", "normalize",
    "cosine_similarity", "pairwise_cosine_softmax", "mse",
]

_REDUCTIONS = ("mean", "sum", "none")


def _ndim(x):
    return x.ndim if type(x) is Tracer else np.ndim(x)


def _shape(x):
    return x.shape if type(x) is Tracer else np.shape(x)


def _operand(x):
    return x if type(x) is Tracer or is_foreign(x) else np.asarray(x)


def _axes(axis, ndim, name):
    """``axis`` as a sorted tuple of non-negative ints (None: all axes)."""
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1):
            raise np.exceptions.AxisError(
                f"wengert.nn.{name}: axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(int(a) % max(ndim, 1))
    return tuple(sorted(set(out)))


def _every_axis(axes, x):
    """``axes``, with None spelled out as every axis of ``x``: vmap's rule for softmax and
    log_softmax (primitives/_batching.axis_rule, for any number of batch axes) shifts a tuple past
    the batch axis but runs ``axis=None`` once per example."""
    return tuple(range(_ndim(x))) if axes is None else axes


def _one_axis(axis, ndim, name):
    if not isinstance(axis, (int, np.integer)):
        raise TypeError(f"wengert.nn.{name}: axis must be one int, got {axis!r}")
    return _axes(axis, ndim, name)[0]


def _reduction(reduction, name):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"wengert.nn.{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    return reduction


def _traced(*xs):
    for x in xs:
        if type(x) is Tracer:
            return True
    return False


def _plain_float(x, axis):
    """A plain float32/float64 array of one or more dimensions and one int axis within it: the
    case that NumPy's own few operations compute (no tracer, no dtype or axis to normalize)."""
    if type(x) is not np.ndarray or type(axis) is not int or x.dtype.char not in "fd":
        return False
    return -x.ndim <= axis < x.ndim


# --- softmax family ----------------------------------------------------------------------------
def softmax(x, axis=-1):
    """``exp(x) / sum(exp(x))`` along ``axis`` (an int, a tuple, or None for all), computed stably."""
    if _plain_float(x, axis):
        out = P.softmax_of_array(x, axis)
        if out is not None:
            return out
    x = _operand(x)
    return P.softmax(x, axis=_every_axis(_axes(axis, _ndim(x), "softmax"), x))


def log_softmax(x, axis=-1):
    """``x - logsumexp(x, axis, keepdims=True)``; its gradient is ``g - softmax(x) * sum(g)``."""
    if _plain_float(x, axis):
        out = P.log_softmax_of_array(x, axis)
        if out is not None:
            return out
    x = _operand(x)
    return P.log_softmax(x, axis=_every_axis(_axes(axis, _ndim(x), "log_softmax"), x))


def logsumexp(a, axis=None, b=None, keepdims=False):
    """``log(sum(b * exp(a), axis))``, stable for large ``a`` (SciPy's signature; ``b`` optional weights).

    The gradient with respect to ``a`` is ``b * softmax(a)``; with respect to ``b`` it is
    ``exp(a - logsumexp)``.
    """
    a = _operand(a)
    if b is None:
        return P.logsumexp(a, axis=_axes(axis, _ndim(a), "logsumexp"), keepdims=bool(keepdims))
    b = _operand(b)
    ndim = len(np.broadcast_shapes(_shape(a), _shape(b)))
    return P.logsumexp_b(a, b, axis=_axes(axis, ndim, "logsumexp"), keepdims=bool(keepdims))


def softmax_cross_entropy(logits, labels, axis=-1, reduction="mean"):
    """Cross-entropy of ``softmax(logits)`` against ``labels``, in one stable step.

    ``labels`` are integer class indices (the shape of ``logits`` without ``axis``) or target
    probabilities (the shape of ``logits``; rows need not sum to 1). ``reduction`` is ``"mean"``
    over examples (the default), ``"sum"`` or ``"none"`` (one loss per example). The gradient with
    respect to the logits is ``softmax(logits) * sum(labels) - labels`` (``softmax - onehot`` for
    class indices), per example.
    """
    logits = _operand(logits)
    reduction = _reduction(reduction, "softmax_cross_entropy")
    shape = _shape(logits)
    if type(labels) is np.ndarray and type(axis) is int and -len(shape) <= axis < len(shape):
        # the commonest calls (traced or plain logits, a label array, one int axis): no unboxing or
        # dtype and axis normalization to go through
        kind = labels.dtype.kind
        ax = axis % len(shape)
        stash = [None] if type(logits) is Tracer else None
        if kind in "iu":
            if labels.shape != shape[:ax] + shape[ax + 1:]:
                _wrong_labels(labels, shape, ax)
            return P.softmax_cross_entropy_sparse(logits, labels, axis=ax, reduction=reduction, stash=stash)
        if kind == "f" and labels.shape == shape:   # dense targets of the logits' shape
            return P.softmax_cross_entropy_dense(logits, labels, axis=ax, reduction=reduction, stash=stash)
    ax = _one_axis(axis, _ndim(logits), "softmax_cross_entropy")
    labels_plain = unbox(labels)
    dtype = np.asarray(labels_plain).dtype if not hasattr(labels_plain, "dtype") else labels_plain.dtype
    if np.issubdtype(dtype, np.integer):
        labels = unbox_all(labels)   # inside vmap, labels batched there stay a batch tracer
        if type(labels) is not Tracer:
            labels = np.asarray(labels)
        if tuple(_shape(labels)) != shape[:ax] + shape[ax + 1:]:
            _wrong_labels(labels, shape, ax)
        stash = [None] if _traced(logits) else None
        return P.softmax_cross_entropy_sparse(logits, labels, axis=ax, reduction=reduction, stash=stash)
    labels = _operand(labels)
    if _shape(labels) != shape:
        labels = wnp.broadcast_to(labels, shape)
    stash = [None] if _traced(logits, labels) else None
    return P.softmax_cross_entropy_dense(logits, labels, axis=ax, reduction=reduction, stash=stash)


def _wrong_labels(labels, shape, ax):
    expected = shape[:ax] + shape[ax + 1:]
    raise ValueError(f"wengert.nn.softmax_cross_entropy: integer labels of shape {_shape(labels)} for logits "
                     f"of shape {shape}; expected shape {expected} (the logits' shape without axis {ax})")


# --- sigmoid family and activations ----------------------------------------------------------
def sigmoid(x):
    """``1 / (1 + exp(-x))``, stable for either sign; gradient ``sigmoid * (1 - sigmoid)``."""
    return P.sigmoid(_operand(x))


def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``, exact for large ``|x|``."""
    return P.log_sigmoid(_operand(x))


def softplus(x):
    """``log(1 + exp(x))``, exact for large ``|x|``; gradient ``sigmoid(x)``."""
    return P.softplus(_operand(x))


def relu(x):
    """``max(x, 0)``; the gradient at 0 is 0."""
    return P.relu(_operand(x))


def gelu(x, approximate=False):
    """``x * Phi(x)`` (exact, with erf), or its tanh approximation with ``approximate=True``."""
    x = _operand(x)
    return P.gelu_tanh(x) if approximate else P.gelu(x)


def silu(x):
    """``x * sigmoid(x)`` (also called swish)."""
    return P.silu(_operand(x))


def binary_cross_entropy_with_logits(logits, targets, reduction="mean"):
    """``-[t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))]`` elementwise, computed as
    ``max(x, 0) - x t + log(1 + exp(-|x|))``; gradient ``sigmoid(x) - t``."""
    logits = _operand(logits)
    reduction = _reduction(reduction, "binary_cross_entropy_with_logits")
    targets = _operand(targets)
    if _shape(targets) != _shape(logits):
        targets = wnp.broadcast_to(targets, _shape(logits))
    return P.bce_with_logits(logits, targets, reduction=reduction)


def one_hot(labels, num_classes, dtype=np.float64, axis=-1):
    """One-hot encoding of integer ``labels`` along a new axis ``axis`` (no gradient).

    Labels outside ``[0, num_classes)`` give a row of zeros.
    """
    labels = np.asarray(unbox_all(labels))
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"wengert.nn.one_hot: labels must be integers, got dtype {labels.dtype}")
    out = labels[..., None] == np.arange(num_classes)
    out = out.astype(dtype)
    if axis != -1 and axis != out.ndim - 1:
        out = np.moveaxis(out, -1, axis)
    return out


# --- losses, norms, similarities -----------------------------------------------------------------
def mse(predictions, targets, reduction="mean"):
    """Mean (or summed, or elementwise) squared error ``(predictions - targets) ** 2``; broadcasts."""
    return P.mse(_operand(predictions), _operand(targets), reduction=_reduction(reduction, "mse"))


def normalize(x, axis=-1, eps=1e-12):
    """``x / max(||x||_2, eps)`` along ``axis`` (PyTorch's ``F.normalize``)."""
    x = _operand(x)
    return P.normalize(x, axis=_axes(axis, _ndim(x), "normalize"), eps=float(eps))


def cosine_similarity(x1, x2, axis=-1, eps=1e-8):
    """``<x1, x2> / (max(||x1||, eps) * max(||x2||, eps))`` along ``axis``; ``x1`` and ``x2`` broadcast."""
    x1, x2 = _operand(x1), _operand(x2)
    ndim = len(np.broadcast_shapes(_shape(x1), _shape(x2)))
    ax = _axes(axis, ndim, "cosine_similarity")
    if _ndim(x1) != ndim or _ndim(x2) != ndim:
        x1 = wnp.reshape(x1, (1,) * (ndim - _ndim(x1)) + tuple(_shape(x1)))
        x2 = wnp.reshape(x2, (1,) * (ndim - _ndim(x2)) + tuple(_shape(x2)))
    return P.cosine_similarity(x1, x2, axis=ax, eps=float(eps))


def pairwise_cosine_softmax(a, b, eps=1e-8):
    """The seed-000 operation in one call: ``a`` (W, R, B) and ``b`` (W, N, B) give ``P`` (N, R, B),

    ``P[i, j, k] = softmax_i cos(b[:, i, k], a[:, j, k])``: the cosine similarity of every column
    of ``b`` with every column of ``a`` (per batch element ``k``), softmaxed over ``b``'s columns.
    Norms are clamped at ``eps``.
    """
    a, b = _operand(a), _operand(b)
    sa, sb = _shape(a), _shape(b)
    if len(sa) != 3 or len(sb) != 3 or sa[0] != sb[0] or sa[2] != sb[2]:
        raise ValueError(f"wengert.nn.pairwise_cosine_softmax: expected a of shape (W, R, B) and b of shape "
                         f"(W, N, B), got {sa} and {sb}")
    stash = [None] if _traced(a, b) else None
    return P.pairwise_cosine_softmax(a, b, eps=float(eps), stash=stash)

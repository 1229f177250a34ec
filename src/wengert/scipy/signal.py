"""scipy.signal.convolve with gradients (n-d; modes ``full``, ``valid``, ``same``).

One primitive, the full convolution; ``valid`` and ``same`` are slices of it, as in SciPy. The
rules are full convolutions too (with the other operand flipped, then sliced), so derivatives of
any order work. For complex inputs the rules are transposes, without conjugates (docs/complex.md).

Under vmap, a batched operand against an unbatched one is one (n+1)-d SciPy convolution: the
unbatched operand gets a leading axis of length 1, so the batch axis passes through unmixed.
Two batched operands are one gather of the windows of one operand and one ``einsum`` with the
other (exact sums of products, as the direct method); past ``_GATHER_LIMIT`` window elements
that tensor would cost more memory than the per-example loop saves, and vmap loops (with its
warning).
"""
from __future__ import annotations

import string

import numpy as np
import scipy.signal as _sig

from ..core.trace import Tracer, unbox
from ..numpy import _functions as F
from ..primitives._batching import one_batch_axis
from ..primitives._table import defprim
from ..primitives.contractions import einsum
from ..primitives.shape import getitem, pad_constant, reshape

_GATHER_LIMIT = 1 << 22  # elements of the window tensor of two batched operands (32 MiB in float64)

__all__ = ["convolve", "correlate"]


def _full_impl(a, b):
    return _sig.convolve(a, b, mode="full")


def _flip(x):
    return F.flip(x)


def _reverse_conj(x):
    x = F.flip(x)
    return F.conj(x) if np.iscomplexobj(unbox(x)) else x


def _window(full, start, shape):
    return full[tuple(slice(s, s + n) for s, n in zip(start, shape))]


def _conv_vjp_a(g, ans, a, b):
    return _window(_full(g, _flip(b)), [n - 1 for n in b.shape], a.shape)


def _conv_vjp_b(g, ans, a, b):
    return _window(_full(g, _flip(a)), [n - 1 for n in a.shape], b.shape)


def _shape(x):
    return x.shape if type(x) is Tracer or type(x) is np.ndarray else np.shape(x)


def _both_batched(a, b, size):
    """Per-example full convolutions of two stacks: ``out[z, k] = sum_j a_pad[z, k + n_b - 1 - j] b[z, j]``
    with ``a`` zero-padded by ``n_b - 1`` on both sides of every axis (``b`` the smaller operand)."""
    if np.prod(_shape(b)[1:]) > np.prod(_shape(a)[1:]):
        a, b = b, a  # convolution commutes: gather the windows of the larger one
    sa, sb = tuple(_shape(a)[1:]), tuple(_shape(b)[1:])
    nd = len(sa)
    out_shape = tuple(n1 + n2 - 1 for n1, n2 in zip(sa, sb))
    if size * np.prod(out_shape) * np.prod(sb) > _GATHER_LIMIT or 2 * nd + 1 > len(string.ascii_letters):
        return NotImplemented
    padded = pad_constant(a, pad_width=((0, 0),) + tuple((n2 - 1, n2 - 1) for n2 in sb))
    index = []
    for d, (k, j) in enumerate(zip(out_shape, sb)):
        rows = np.arange(k).reshape((1,) * d + (k,) + (1,) * (2 * nd - d - 1))
        cols = np.arange(j).reshape((1,) * (nd + d) + (j,) + (1,) * (nd - d - 1))
        index.append(rows + (j - 1) - cols)
    windows = getitem(padded, index=(slice(None),) + tuple(index))
    k_letters, j_letters = string.ascii_letters[:nd], string.ascii_letters[nd:2 * nd]
    z = string.ascii_letters[2 * nd]
    return einsum(windows, b, subscripts=f"{z}{k_letters}{j_letters},{z}{j_letters}->{z}{k_letters}")


def _batch_full(prim, vals, batched, params, size):
    """vmap of the full convolution (the strategies are in the module docstring)."""
    a, b = vals
    if batched[0] and batched[1]:
        return _both_batched(a, b, size)
    if batched[0]:
        return prim(a, reshape(b, shape=(1,) + tuple(_shape(b))))
    return prim(reshape(a, shape=(1,) + tuple(_shape(a))), b)


_full = defprim(_full_impl, (_conv_vjp_a, _conv_vjp_b), name="scipy.signal.convolve",  # bilinear: product rule
                jvp=(lambda t, ans, a, b: _full(t, b), lambda t, ans, a, b: _full(a, t)), batch=one_batch_axis(_batch_full),
                batched_vjp=True)


def convolve(in1, in2, mode="full", method="auto"):
    """``scipy.signal.convolve(in1, in2, mode, method)``; differentiable in both inputs."""
    if type(in1) is not Tracer and type(in2) is not Tracer:
        return _sig.convolve(in1, in2, mode=mode, method=method)
    a, b = F.as_traced_operand(in1), F.as_traced_operand(in2)
    if a.ndim != b.ndim:
        raise ValueError("in1 and in2 should have the same dimensionality")
    if mode not in ("full", "valid", "same"):
        raise ValueError("Acceptable mode flags are 'valid', 'same', or 'full'.")
    if a.ndim == 0:
        return a * b
    if a.size == 0 or b.size == 0:
        return _sig.convolve(unbox(a), unbox(b), mode=mode)
    full = _full(a, b)
    s1, s2 = a.shape, b.shape
    if mode == "full":
        return full
    if mode == "same":
        return _window(full, [(n1 + n2 - 1 - n1) // 2 for n1, n2 in zip(s1, s2)], s1)
    if not (all(n1 >= n2 for n1, n2 in zip(s1, s2)) or all(n2 >= n1 for n1, n2 in zip(s1, s2))):
        raise ValueError("For 'valid' mode, one must be at least as large as the other in every dimension")
    return _window(full, [min(n1, n2) - 1 for n1, n2 in zip(s1, s2)],
                   [abs(n1 - n2) + 1 for n1, n2 in zip(s1, s2)])


def correlate(in1, in2, mode="full", method="auto"):
    """``scipy.signal.correlate``: ``convolve(in1, conj(flip(in2)))``, SciPy's window for each mode."""
    if type(in1) is not Tracer and type(in2) is not Tracer:
        return _sig.correlate(in1, in2, mode=mode, method=method)
    return convolve(in1, _reverse_conj(F.as_traced_operand(in2)), mode=mode)

"""scipy.signal.convolve with gradients (n-d; modes ``full``, ``valid``, ``same``).

One primitive, the full convolution; ``valid`` and ``same`` are slices of it, as in SciPy. The
rules are full convolutions too (with the other operand flipped, then sliced), so derivatives of
any order work. For complex inputs the rules are transposes, without conjugates (docs/complex.md).
"""
from __future__ import annotations

import numpy as np
import scipy.signal as _sig

from ..core.trace import Tracer, unbox
from ..numpy import _functions as F
from ..primitives._table import defprim

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


_full = defprim(_full_impl, (_conv_vjp_a, _conv_vjp_b), name="scipy.signal.convolve",  # bilinear: product rule
                jvp=(lambda t, ans, a, b: _full(t, b), lambda t, ans, a, b: _full(a, t)))


def convolve(in1, in2, mode="full", method="auto"):
    """``scipy.signal.convolve(in1, in2, mode, method)``; differentiable in both inputs."""
    if type(in1) is not Tracer and type(in2) is not Tracer:
        return _sig.convolve(in1, in2, mode=mode, method=method)
    a, b = F._as_traced_operand(in1), F._as_traced_operand(in2)
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
    return convolve(in1, _reverse_conj(F._as_traced_operand(in2)), mode=mode)

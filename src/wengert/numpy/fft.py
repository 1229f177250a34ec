"""wengert.numpy.fft: NumPy's FFTs with gradients (``n``/``s``, ``axis``/``axes`` and ``norm``).

Three primitives carry everything: ``c2c`` (``fftn``/``ifftn`` over some axes), ``rfft`` and
``irfft`` (one axis); the 1-d, 2-d and n-d functions are compositions of them, as in NumPy.
Cotangents follow JAX's convention (docs/complex.md): a complex-to-complex FFT is a symmetric
linear map, so its rule is the same transform (with zero padding and truncation transposed);
``rfft``'s is the full FFT of the zero-extended cotangent, real part; ``irfft``'s weighs the
conjugate of an ``rfft`` by 1 (the zero and Nyquist frequencies) or 2 (the others). Under vmap
each primitive is itself on the stack, with its axes shifted past the batch axis.
"""
from numpy.fft import *  # noqa: F401,F403 - fftfreq, rfftfreq and anything without a rule here

import numpy as _np

from ..core.trace import Tracer as _Tracer
from ..core.trace import unbox as _unbox
from ..primitives import complex as _X
from ..primitives._batching import batch_axis, ndim, one_batch_axis
from ..primitives._table import defprim as _defprim
from . import _functions as _F

__all__ = ["fft", "ifft", "hfft", "ihfft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn",
           "irfftn", "fftshift", "ifftshift", "fftfreq", "rfftfreq"]

_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _norm(norm):
    norm = "backward" if norm is None else norm
    if norm not in _SWAP:
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".')
    return norm


def _resize(x, axis, n):
    """``x`` cut or zero-padded at the end of ``axis`` to length ``n`` (what NumPy's ``n`` does)."""
    cur = x.shape[axis]
    if cur == n:
        return x
    if cur > n:
        index = [slice(None)] * x.ndim
        index[axis] = slice(0, n)
        return x[tuple(index)]
    shape = list(x.shape)
    shape[axis] = n - cur
    zeros = _np.zeros(shape, _unbox(x).dtype)
    return _F.concatenate([x, zeros], axis=axis)


def _resize_like(g, axes, shape):
    for ax in axes:
        g = _resize(g, ax, shape[ax])
    return g


# --- the primitives ------------------------------------------------------------------------------
def _c2c_impl(x, s, axes, norm, inverse):
    return (_np.fft.ifftn if inverse else _np.fft.fftn)(x, s=s, axes=axes, norm=norm)


def _c2c_vjp(g, ans, x, s, axes, norm, inverse):
    return _resize_like(_c2c(g, s=s, axes=axes, norm=norm, inverse=inverse), axes, x.shape)


def _batch_axes(prim, vals, batched, params, size):
    """vmap: NumPy's FFTs take stacks, so the batched call is the same transform on the axes
    shifted past the batch axis (a primitive call, which an outer grad or jvp records)."""
    (x,) = vals
    p = dict(params)
    key = "axes" if "axes" in p else "axis"
    p[key] = batch_axis(p[key], ndim(x) - 1)
    return prim(x, **p)


_c2c = _defprim(_c2c_impl, _c2c_vjp, name="fft.c2c", linear=True,  # linear: the JVP is the FFT of the tangent
                batch=one_batch_axis(_batch_axes), batched_vjp=True)


def _rfft_impl(x, n, axis, norm):
    return _np.fft.rfft(x, n=n, axis=axis, norm=norm)


def _rfft_vjp(g, ans, x, n, axis, norm):
    full = _c2c(_resize(g, axis, n), s=(n,), axes=(axis,), norm=norm, inverse=False)
    return _resize(_X.real(full), axis, x.shape[axis])


_rfft = _defprim(_rfft_impl, _rfft_vjp, name="fft.rfft", linear=True, batch=one_batch_axis(_batch_axes),
                 batched_vjp=True)


def _irfft_impl(x, n, axis, norm):
    return _np.fft.irfft(x, n=n, axis=axis, norm=norm)


def _irfft_vjp(g, ans, x, n, axis, norm):
    m = n // 2 + 1
    weights = _np.full(m, 2.0)
    weights[0] = 1.0
    if n % 2 == 0:
        weights[-1] = 1.0
    shape = [1] * len(x.shape)
    shape[axis] = m
    c = _X.conj(_rfft(_X.real_part(g), n=n, axis=axis, norm=_SWAP[norm])) * weights.reshape(shape)
    return _resize(c, axis, x.shape[axis])


_irfft = _defprim(_irfft_impl, _irfft_vjp, name="fft.irfft", linear=True,  # real-linear in complex input
                  batch=one_batch_axis(_batch_axes), batched_vjp=True)


# --- NumPy's functions ---------------------------------------------------------------------------
def _traced(a):
    return type(a) is _Tracer


def _cook(shape, s, axes, invreal=False):
    """NumPy's rules for ``s`` and ``axes``: ``(s, axes)`` as tuples, axes non-negative."""
    ndim = len(shape)
    if s is None:
        axes = list(range(ndim)) if axes is None else list(axes)
        axes = [ax % ndim for ax in axes]
        s = [shape[ax] for ax in axes]
        if invreal and axes:
            s[-1] = (shape[axes[-1]] - 1) * 2
    else:
        s = list(s)
        axes = list(range(-len(s), 0)) if axes is None else list(axes)
        if len(s) != len(axes):
            raise ValueError("Shape and axes have different lengths.")
        axes = [ax % ndim for ax in axes]
        s = [shape[ax] if n == -1 else n for n, ax in zip(s, axes)]
    for n in s:
        if n < 1:
            raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    return tuple(int(n) for n in s), tuple(axes)


def _one(shape, n, axis, invreal=False):
    s, axes = _cook(shape, None if n is None else (n,), (axis,), invreal)
    return s[0], axes[0]


def _as_operand(a):
    return _F.as_traced_operand(a)


def fft(a, n=None, axis=-1, norm=None, out=None):
    if not _traced(a):
        return _np.fft.fft(a, n=n, axis=axis, norm=norm, out=out)
    _F._unsupported("fft.fft", out=out)
    n, axis = _one(a.shape, n, axis)
    return _c2c(a, s=(n,), axes=(axis,), norm=_norm(norm), inverse=False)


def ifft(a, n=None, axis=-1, norm=None, out=None):
    if not _traced(a):
        return _np.fft.ifft(a, n=n, axis=axis, norm=norm, out=out)
    _F._unsupported("fft.ifft", out=out)
    n, axis = _one(a.shape, n, axis)
    return _c2c(a, s=(n,), axes=(axis,), norm=_norm(norm), inverse=True)


def rfft(a, n=None, axis=-1, norm=None, out=None):
    if not _traced(a):
        return _np.fft.rfft(a, n=n, axis=axis, norm=norm, out=out)
    _F._unsupported("fft.rfft", out=out)
    if _np.iscomplexobj(_unbox(a)):
        a = _X.real(a)  # NumPy discards the imaginary part (with a warning)
    n, axis = _one(a.shape, n, axis)
    return _rfft(a, n=n, axis=axis, norm=_norm(norm))


def irfft(a, n=None, axis=-1, norm=None, out=None):
    if not _traced(a):
        return _np.fft.irfft(a, n=n, axis=axis, norm=norm, out=out)
    _F._unsupported("fft.irfft", out=out)
    n, axis = _one(a.shape, n, axis, invreal=True)
    return _irfft(a, n=n, axis=axis, norm=_norm(norm))


def fftn(a, s=None, axes=None, norm=None, out=None):
    if not _traced(a):
        return _np.fft.fftn(a, s=s, axes=axes, norm=norm, out=out)
    _F._unsupported("fft.fftn", out=out)
    s, axes = _cook(a.shape, s, axes)
    return _c2c(a, s=s, axes=axes, norm=_norm(norm), inverse=False) if axes else a + 0j


def ifftn(a, s=None, axes=None, norm=None, out=None):
    if not _traced(a):
        return _np.fft.ifftn(a, s=s, axes=axes, norm=norm, out=out)
    _F._unsupported("fft.ifftn", out=out)
    s, axes = _cook(a.shape, s, axes)
    return _c2c(a, s=s, axes=axes, norm=_norm(norm), inverse=True) if axes else a + 0j


def fft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    if not _traced(a):
        return _np.fft.fft2(a, s=s, axes=axes, norm=norm, out=out)
    return fftn(a, s=s, axes=axes, norm=norm, out=out)


def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    if not _traced(a):
        return _np.fft.ifft2(a, s=s, axes=axes, norm=norm, out=out)
    return ifftn(a, s=s, axes=axes, norm=norm, out=out)


def rfftn(a, s=None, axes=None, norm=None, out=None):
    if not _traced(a):
        return _np.fft.rfftn(a, s=s, axes=axes, norm=norm, out=out)
    _F._unsupported("fft.rfftn", out=out)
    if _np.iscomplexobj(_unbox(a)):
        a = _X.real(a)
    s, axes = _cook(a.shape, s, axes)
    norm = _norm(norm)
    out = _rfft(a, n=s[-1], axis=axes[-1], norm=norm)
    if len(axes) > 1:
        out = _c2c(out, s=s[:-1], axes=axes[:-1], norm=norm, inverse=False)
    return out


def irfftn(a, s=None, axes=None, norm=None, out=None):
    if not _traced(a):
        return _np.fft.irfftn(a, s=s, axes=axes, norm=norm, out=out)
    _F._unsupported("fft.irfftn", out=out)
    s, axes = _cook(a.shape, s, axes, invreal=True)
    norm = _norm(norm)
    if len(axes) > 1:
        a = _c2c(a, s=s[:-1], axes=axes[:-1], norm=norm, inverse=True)
    return _irfft(a, n=s[-1], axis=axes[-1], norm=norm)


def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    if not _traced(a):
        return _np.fft.rfft2(a, s=s, axes=axes, norm=norm, out=out)
    return rfftn(a, s=s, axes=axes, norm=norm, out=out)


def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    if not _traced(a):
        return _np.fft.irfft2(a, s=s, axes=axes, norm=norm, out=out)
    return irfftn(a, s=s, axes=axes, norm=norm, out=out)


def _shift(x, axes, sign):
    if axes is None:
        axes = tuple(range(x.ndim))
    elif _np.ndim(axes) == 0:
        axes = (axes,)
    shifts = tuple(sign * (x.shape[ax] // 2) for ax in axes)
    return _F.roll(x, shifts, axis=tuple(axes))


def fftshift(x, axes=None):
    if not _traced(x):
        return _np.fft.fftshift(x, axes=axes)
    return _shift(x, axes, 1)


def ifftshift(x, axes=None):
    if not _traced(x):
        return _np.fft.ifftshift(x, axes=axes)
    return _shift(x, axes, -1)



def hfft(a, n=None, axis=-1, norm=None, out=None):
    """The FFT of a signal with Hermitian symmetry: NumPy's definition, irfft of the conjugate."""
    if not _traced(a):
        return _np.fft.hfft(a, n=n, axis=axis, norm=norm, out=out)
    _F._unsupported("fft.hfft", out=out)
    return irfft(_F.conj(_as_operand(a)), n, axis, norm=_SWAP[norm or "backward"])


def ihfft(a, n=None, axis=-1, norm=None, out=None):
    if not _traced(a):
        return _np.fft.ihfft(a, n=n, axis=axis, norm=norm, out=out)
    _F._unsupported("fft.ihfft", out=out)
    return _F.conj(rfft(_as_operand(a), n, axis, norm=_SWAP[norm or "backward"]))

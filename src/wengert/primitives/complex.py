"""Complex numbers: real, imag, conj, angle, and the conventions for cotangents.

wengert follows JAX's convention (docs/complex.md). A cotangent ``c`` of a complex value ``z``
pairs with a perturbation ``dz`` as ``Re(c * dz)`` (bilinear, no conjugate), so a holomorphic
function's rule is the same as for reals (``g * f'(z)``) and needs no conjugates; only the
non-holomorphic functions below (and ``absolute``) have complex-specific rules. The gradient of a
real loss ``L`` with respect to ``z = x + iy`` is then ``dL/dx - i dL/dy``.

Forward mode needs no convention: the JVP is the real-linear map ``dz -> J dz``. ``real``, ``imag``
and ``conj`` are real-linear, so their JVP is the function itself applied to the tangent.

A real value that received a complex cotangent (``x * 1j`` with ``x`` real) keeps its real part:
``Re(c * dx) = Re(c) dx`` for real ``dx``.
"""
from __future__ import annotations

import numpy as np

from ..core.trace import Tracer, unbox
from ._batching import elementwise_rule, unary_rule
from ._table import defprim, elementwise_constant, staged
from . import elementwise as _elementwise


def _is_complex(x):
    return np.iscomplexobj(unbox(x))


# A real output's cotangent may carry a meaningless imaginary part (see real_part): dropped here,
# before it could reach a complex value.
# Under vmap they act on each element alone, so the batch axes pass through (jacfwd applies them
# to a batch of tangents).
real = defprim(np.real, lambda g, ans, x: real_part(g) + 0j, name="real", linear=True, batch=unary_rule,
               batched_vjp=True)
# real_part(g) first: a 0-d cotangent may be an np.float64, a float subclass, which Python's complex
# would multiply into a Python complex (no dtype) if it came second
imag = defprim(np.imag, lambda g, ans, x: real_part(g) * -1j, name="imag", linear=True, batch=unary_rule,
               batched_vjp=True)
conj = defprim(np.conjugate, lambda g, ans, x: conj(g), name="conjugate", linear=True,
               batch=elementwise_rule, batched_vjp=True)
conjugate = conj


def _angle_impl(z):
    return np.angle(z)


def _angle_jvp(t, ans, z):
    """Im(conj(z) dz) / |z|^2; the angle of a real array (0 or pi) is piecewise constant."""
    if not _is_complex(z):
        return None
    c = conj(z)
    return imag(c * t) / real(c * z)


# d angle = Im(conj(z) dz) / |z|^2 = Re(-i conj(z) dz) / |z|^2
angle_ = defprim(_angle_impl, lambda g, ans, z: real_part(g) * -1j * conj(z) / real(z * conj(z)), name="angle",
                 jvp=_angle_jvp, batch=unary_rule, batched_vjp=True)


def real_part(g):
    """``g`` as a real cotangent: its real part if it is complex.

    A real value's cotangent can be complex (``x * 1j`` with ``x`` real gives ``x`` the cotangent
    ``1j g``); only its real part means anything, and rules whose output is real and input complex
    take it before the cotangent reaches the complex input.
    """
    if type(g) is Tracer:
        return real(g) if _is_complex(g) else g
    return np.real(g) if np.iscomplexobj(g) else g


def _nonzero(a):
    """``a`` with its zeros replaced by ones (a constant selection): at ``z == 0`` the derivative
    ``conj(z) / |z|`` of ``|z|`` is taken as 0, as ``sign(0) = 0`` makes it for reals (and as JAX)."""
    if staged(a) or np.any(unbox(a) == 0):  # the whole batch under vmap: the mask below is per example
        return _elementwise.where(_is_zero(a), 1, a)
    return a


@elementwise_constant
def _is_zero(a):
    return a == 0


@elementwise_constant
def _sign(x):
    return np.sign(x)


def abs_vjp(g, x):
    """``absolute``'s rule: ``g sign(x)`` for reals, ``g conj(x) / |x|`` for complex ``x``."""
    if _is_complex(x):
        return real_part(g) * conj(x) / _nonzero(_elementwise.absolute(x))
    return g * _sign(x)


def abs_jvp(t, ans, x):
    """``absolute``'s JVP: ``t sign(x)`` for reals, ``Re(conj(x) t) / |x|`` for complex ``x``."""
    if _is_complex(x):
        return real(conj(x) * t) / _nonzero(ans)
    return t * _sign(x)

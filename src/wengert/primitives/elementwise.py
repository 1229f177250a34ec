"""Elementwise operations (NumPy's ufuncs and where/clip): implementation, VJP and JVP rules.

Rules reuse the forward output ``ans`` where the derivative is a function of it (exp' = exp,
tanh' = 1 - tanh^2, sqrt' = 1 / (2 sqrt)): that avoids recomputing a transcendental function in
the backward pass, which is where naive AD loses most against hand-written gradients.
Ties in maximum/minimum split the gradient equally between the two arguments, in both modes.

One-argument functions are declared with ``defunary``: their Jacobian is diagonal, so the VJP rule
``g * f'(x)`` is the JVP rule too. Binary functions give a JVP rule per argument (the same product
as the VJP without ``unbroadcast``: forward mode broadcasts the tangent to the output); ``divide``,
``arctan2`` and ``where`` compute the whole tangent at once (``fused_jvp``) to share work between
the two arguments' shares.
"""
from __future__ import annotations

import numpy as np

from ..core.namespace import dtype_in, is_foreign, namespace
from ..core.trace import unbox
from ._batching import elementwise_rule
from ._table import defprim, defunary, elementwise_constant, staged, unbroadcast
from . import complex as _complex

LN2 = np.log(2.0)
LN10 = np.log(10.0)


# Rules' constants. Each reads its arguments' values through ``elementwise_constant``: plain
# arrays directly, batched primals (vmap of jvp) per example.
@elementwise_constant
def _tie_share(x, ans, y):
    """1 where ``x`` is the selected value, 1/2 where ``x`` and ``y`` tie, 0 elsewhere (a constant)."""
    dtype = np.result_type(x, y, np.float16)
    return ((x == ans) / (1 + (x == y))).astype(dtype, copy=False)


@elementwise_constant
def _positive(x):
    return np.greater(x, 0)


@elementwise_constant
def _sign(x):
    return np.sign(x)


@elementwise_constant
def _both_zero(x, y):
    return (x == 0) & (y == 0)


@elementwise_constant
def _floor_quotient(x, y):
    """-floor(x / y): d(x mod y)/dy (the quotient is piecewise constant)."""
    return -np.floor_divide(x, y)


@elementwise_constant
def _trunc_quotient(x, y):
    """-trunc(x / y): d fmod(x, y)/dy."""
    return -np.trunc(x / y)


@elementwise_constant
def _below(x, bound):
    return x < bound


@elementwise_constant
def _above(x, bound):
    return x > bound


def _ones_like(x, dtype):
    if type(x) is not np.ndarray and is_foreign(x):
        xp = namespace(x)
        return xp.ones_like(x, dtype=dtype_in(xp, np.dtype(dtype)))
    return np.ones(np.shape(x), dtype)


@elementwise_constant
def _inside(x, lo, hi):
    """Where ``x`` is within its bounds (the output's shape: bounds may broadcast ``x``)."""
    inside = _ones_like(x, bool)   # a Dask array's mask stays lazy and chunked like x
    if lo is not None:
        inside = inside & (x >= lo)
    if hi is not None:
        inside = inside & (x <= hi)
    return inside


def _safe_log(x):
    """log(x) where x > 0 and 0 elsewhere: d(x**y)/dy is taken as 0 where log(x) is undefined."""
    positive = _positive(x)
    return where(positive, log(where(positive, x, 1)), 0)


def _power_slope(pow_, x, y):
    """y * x**(y-1). Where x == y == 0 that is 0 * inf = nan, but x**0 is constant: there the
    exponent is taken as 0 instead (then every higher derivative of x**0 and x**1 at 0 is 0 too)."""
    if type(y) is int or type(y) is float:  # the usual constant exponent: no masks needed
        if y == 2:
            return 2 * x
        if y == 0:
            return 0 * x
        return y * pow_(x, y - 1)
    # the checks read the whole batch under vmap: the masked formula is right for every example
    # (under jit a staged value is only a sample: the masked formula, right for every input)
    if staged(y) or np.any(unbox(y) == 0):  # cheap for the usual scalar exponent
        both_zero = _both_zero(x, y)
        if staged(both_zero) or np.any(unbox(both_zero)):
            return y * pow_(x, where(both_zero, 1, y) - 1)
    return y * pow_(x, y - 1)


def _divide_jvp(tangents, ans, args, params):
    """d(x/y) = (dx - ans dy) / y: one division for both shares."""
    (tx, ty), y = tangents, args[1]
    if ty is None:
        return tx / y
    num = ty * ans
    return (tx - num if tx is not None else negative(num)) / y


def _times(g, y):
    """``g * y`` in a VJP rule. A plain ``g`` that is one value broadcast to ``y``'s shape (a full
    reduction's cotangent: ``sum``'s rule hands on a read-only broadcast view) is taken as that
    scalar: ``s * y`` is NumPy's contiguous scalar loop, and where ``s == 1`` (the seed reaching
    ``np.sum(w * f(x))``) the product is ``y`` itself, handed on as a read-only view: one pass over
    memory and one array fewer. Read-only keeps that safe: the backward pass adds in place only
    into cotangents it made (``owned``), and a read-only gradient is copied before the caller gets
    it (transforms/reverse.py's ``_give_away``)."""
    if type(g) is _ndarray and type(y) is _ndarray and not g.flags.c_contiguous and g.shape == y.shape \
            and g.size and not any(g.strides):
        s = g[(0,) * g.ndim]
        dtype = np.result_type(g.dtype, y.dtype)   # the array product's dtype, not a scalar's
        if s == 1 and dtype == y.dtype:
            view = y.view()
            view.flags.writeable = False
            return view
        return np.multiply(s, y, dtype=dtype)
    return g * y


_ndarray = np.ndarray


# --- arithmetic --------------------------------------------------------------------------------
def _subtract_vjp_y(g, ans, x, y):
    """``-g`` summed to ``y``'s shape; a plain ``g`` is summed first, so the negation runs on the
    smaller array (``z - m`` with ``m`` a row's maximum). Traced cotangents keep the order the
    staged programs of wg.jit were written in."""
    if type(g) is _ndarray:
        return negative(unbroadcast(g, y.shape))
    return unbroadcast(negative(g), y.shape)


def _divide_vjp_y(g, ans, x, y):
    """``-g * ans / y`` summed to ``y``'s shape; on plain arrays of the answer's shape and dtype, one
    new array and the rest in place (W1's ``dots / (nb * na)``). Traced cotangents keep the
    operations the staged programs of wg.jit were written with."""
    if type(g) is _ndarray and type(ans) is _ndarray and ans.ndim and g.shape == ans.shape and g.dtype == ans.dtype:
        out = g * ans
        out /= y
        np.negative(out, out=out)
        return unbroadcast(out, y.shape)
    return unbroadcast(-g * ans / y, y.shape)


add = defprim(np.add, (lambda g, ans, x, y: unbroadcast(g, x.shape),
                       lambda g, ans, x, y: unbroadcast(g, y.shape)),
              jvp=(lambda t, ans, x, y: t, lambda t, ans, x, y: t), batch=elementwise_rule, batched_vjp=True)
subtract = defprim(np.subtract, (lambda g, ans, x, y: unbroadcast(g, x.shape),
                                 _subtract_vjp_y),
                   jvp=(lambda t, ans, x, y: t, lambda t, ans, x, y: negative(t)),
                   batch=elementwise_rule, batched_vjp=True)
multiply = defprim(np.multiply, (lambda g, ans, x, y: unbroadcast(_times(g, y), x.shape),
                                 lambda g, ans, x, y: unbroadcast(_times(g, x), y.shape)),
                   jvp=(lambda t, ans, x, y: t * y, lambda t, ans, x, y: t * x),
                   batch=elementwise_rule, batched_vjp=True)
divide = defprim(np.divide, (lambda g, ans, x, y: unbroadcast(g / y, x.shape), _divide_vjp_y),
                 fused_jvp=_divide_jvp, batch=elementwise_rule, batched_vjp=True)
true_divide = divide
negative = defprim(np.negative, lambda g, ans, x: negative(g), linear=True, batch=elementwise_rule, batched_vjp=True)
positive = defprim(np.positive, lambda g, ans, x: g, jvp=lambda t, ans, x: t,
                   batch=elementwise_rule, batched_vjp=True)


def _power(x, y):
    """``np.power``; ``x ** 2`` goes through ``np.square`` as NumPy's own operator does (5x faster)."""
    if (type(y) is int or type(y) is float) and y == 2:
        return np.square(x)
    return np.power(x, y)


def _compact(g):
    """A plain ``g`` that is a broadcast view (a reduction's cotangent, zero strides) as the small
    array it repeats, size 1 along the broadcast axes: ``c * _compact(g) * x`` then costs one pass
    over ``x``'s size where ``g * (c * x)`` costs two. Any other ``g`` as it is."""
    if type(g) is _ndarray and not g.flags.c_contiguous and g.ndim and 0 in g.strides:
        return g[tuple([slice(0, 1) if s == 0 else slice(None) for s in g.strides])]
    return g


def _power_vjp_x(g, ans, x, y):
    if (type(y) is int or type(y) is float) and y == 2 and type(x) is _ndarray:   # x ** 2, plain x
        return unbroadcast((2 * _compact(g)) * x, x.shape)
    return unbroadcast(g * _power_slope(power, x, y), x.shape)


power = defprim(_power, name="power", vjp=(_power_vjp_x,
                           lambda g, ans, x, y: unbroadcast(g * ans * _safe_log(x), y.shape)),
                jvp=(lambda t, ans, x, y: t * _power_slope(power, x, y), lambda t, ans, x, y: t * ans * _safe_log(x)),
                batch=elementwise_rule, batched_vjp=True)
float_power = defprim(np.float_power, (
    lambda g, ans, x, y: unbroadcast(g * _power_slope(float_power, x, y), x.shape),
    lambda g, ans, x, y: unbroadcast(g * ans * _safe_log(x), y.shape)),
    jvp=(lambda t, ans, x, y: t * _power_slope(float_power, x, y), lambda t, ans, x, y: t * ans * _safe_log(x)),
    batch=elementwise_rule, batched_vjp=True)
square = defunary(np.square, lambda g, ans, x: g * 2 * x)
sqrt = defunary(np.sqrt, lambda g, ans, x: g * 0.5 / ans)
cbrt = defunary(np.cbrt, lambda g, ans, x: g / (3 * ans * ans))
reciprocal = defunary(np.reciprocal, lambda g, ans, x: -g * ans * ans)
# d(x mod y) = dx - floor(x / y) dy (the quotient is piecewise constant); fmod truncates instead
remainder = defprim(np.remainder, (lambda g, ans, x, y: unbroadcast(g, x.shape),
                                   lambda g, ans, x, y: unbroadcast(g * _floor_quotient(x, y), y)),
                    jvp=(lambda t, ans, x, y: t, lambda t, ans, x, y: t * _floor_quotient(x, y)),
                    batch=elementwise_rule, batched_vjp=True)
mod = remainder
fmod = defprim(np.fmod, (lambda g, ans, x, y: unbroadcast(g, x.shape),
                         lambda g, ans, x, y: unbroadcast(g * _trunc_quotient(x, y), y)),
               jvp=(lambda t, ans, x, y: t, lambda t, ans, x, y: t * _trunc_quotient(x, y)),
               batch=elementwise_rule, batched_vjp=True)

# --- exponentials and logarithms ------------------------------------------------------------
exp = defunary(np.exp, lambda g, ans, x: g * ans)
exp2 = defunary(np.exp2, lambda g, ans, x: g * ans * LN2)
expm1 = defunary(np.expm1, lambda g, ans, x: g * (ans + 1))
log = defunary(np.log, lambda g, ans, x: g / x)
log2 = defunary(np.log2, lambda g, ans, x: g / (x * LN2))
log10 = defunary(np.log10, lambda g, ans, x: g / (x * LN10))
log1p = defunary(np.log1p, lambda g, ans, x: g / (x + 1))
logaddexp = defprim(np.logaddexp, (lambda g, ans, x, y: unbroadcast(g * exp(x - ans), x.shape),
                                   lambda g, ans, x, y: unbroadcast(g * exp(y - ans), y.shape)),
                    jvp=(lambda t, ans, x, y: t * exp(x - ans), lambda t, ans, x, y: t * exp(y - ans)),
                    batch=elementwise_rule, batched_vjp=True)
logaddexp2 = defprim(np.logaddexp2, (lambda g, ans, x, y: unbroadcast(g * exp2(x - ans), x.shape),
                                     lambda g, ans, x, y: unbroadcast(g * exp2(y - ans), y.shape)),
                     jvp=(lambda t, ans, x, y: t * exp2(x - ans), lambda t, ans, x, y: t * exp2(y - ans)),
                     batch=elementwise_rule, batched_vjp=True)

# --- trigonometric and hyperbolic -------------------------------------------------------------
sin = defunary(np.sin, lambda g, ans, x: g * cos(x))
cos = defunary(np.cos, lambda g, ans, x: -g * sin(x))
tan = defunary(np.tan, lambda g, ans, x: g * (1 + ans * ans))
arcsin = defunary(np.arcsin, lambda g, ans, x: g / sqrt(1 - x * x))
arccos = defunary(np.arccos, lambda g, ans, x: -g / sqrt(1 - x * x))
arctan = defunary(np.arctan, lambda g, ans, x: g / (1 + x * x))
sinh = defunary(np.sinh, lambda g, ans, x: g * cosh(x))
cosh = defunary(np.cosh, lambda g, ans, x: g * sinh(x))


def _tanh_rule(g, ans, x):
    """``g * (1 - ans * ans)``; on plain arrays of one shape and dtype, one new array and the rest in
    place: NumPy elides the temporary of ``g * t`` but not of ``1 - t`` (W4's 512x512 gradient)."""
    if type(g) is _ndarray and type(ans) is _ndarray and ans.ndim and g.shape == ans.shape and g.dtype == ans.dtype:
        out = ans * ans
        np.subtract(1, out, out=out)
        out *= g
        return out
    return g * (1 - ans * ans)


tanh = defunary(np.tanh, _tanh_rule)
arcsinh = defunary(np.arcsinh, lambda g, ans, x: g / sqrt(x * x + 1))
arccosh = defunary(np.arccosh, lambda g, ans, x: g / sqrt(x * x - 1))
arctanh = defunary(np.arctanh, lambda g, ans, x: g / (1 - x * x))
hypot = defprim(np.hypot, (lambda g, ans, x, y: unbroadcast(g * x / ans, x.shape),
                           lambda g, ans, x, y: unbroadcast(g * y / ans, y.shape)),
                jvp=(lambda t, ans, x, y: t * x / ans, lambda t, ans, x, y: t * y / ans),
                batch=elementwise_rule, batched_vjp=True)


def _arctan2_jvp(tangents, ans, args, params):
    """d arctan2(y, x) = (x dy - y dx) / (x^2 + y^2): the denominator once for both shares."""
    (ty, tx), (y, x) = tangents, args
    if tx is None:
        num = ty * x
    elif ty is None:
        num = negative(tx * y)
    else:
        num = ty * x - tx * y
    return num / (x * x + y * y)


arctan2 = defprim(np.arctan2, (lambda g, ans, y, x: unbroadcast(g * x / (x * x + y * y), y.shape),
                               lambda g, ans, y, x: unbroadcast(-g * y / (x * x + y * y), x.shape)),
                  fused_jvp=_arctan2_jvp, batch=elementwise_rule, batched_vjp=True)
deg2rad = defunary(np.deg2rad, lambda g, ans, x: g * (np.pi / 180))
rad2deg = defunary(np.rad2deg, lambda g, ans, x: g * (180 / np.pi))
radians, degrees = deg2rad, rad2deg

# --- absolute value, extrema, selection ---------------------------------------------------------
absolute = defprim(np.absolute, lambda g, ans, x: _complex.abs_vjp(g, x),  # complex: g conj(x)/|x|
                   jvp=lambda t, ans, x: _complex.abs_jvp(t, ans, x),
                   batch=elementwise_rule, batched_vjp=True)  # complex: Re(conj(x) t)/|x|
abs = absolute  # noqa: A001 - NumPy's name
fabs = defunary(np.fabs, lambda g, ans, x: g * _sign(x))
_EXTREMUM_JVP = (lambda t, ans, x, y: t * _tie_share(x, ans, y), lambda t, ans, x, y: t * _tie_share(y, ans, x))
maximum = defprim(np.maximum, (lambda g, ans, x, y: unbroadcast(g * _tie_share(x, ans, y), x.shape),
                               lambda g, ans, x, y: unbroadcast(g * _tie_share(y, ans, x), y.shape)), jvp=_EXTREMUM_JVP,
                  batch=elementwise_rule, batched_vjp=True)
minimum = defprim(np.minimum, (lambda g, ans, x, y: unbroadcast(g * _tie_share(x, ans, y), x.shape),
                               lambda g, ans, x, y: unbroadcast(g * _tie_share(y, ans, x), y.shape)), jvp=_EXTREMUM_JVP,
                  batch=elementwise_rule, batched_vjp=True)
fmax = defprim(np.fmax, (lambda g, ans, x, y: unbroadcast(g * _tie_share(x, ans, y), x.shape),
                         lambda g, ans, x, y: unbroadcast(g * _tie_share(y, ans, x), y.shape)), jvp=_EXTREMUM_JVP,
               batch=elementwise_rule, batched_vjp=True)
fmin = defprim(np.fmin, (lambda g, ans, x, y: unbroadcast(g * _tie_share(x, ans, y), x.shape),
                         lambda g, ans, x, y: unbroadcast(g * _tie_share(y, ans, x), y.shape)), jvp=_EXTREMUM_JVP,
               batch=elementwise_rule, batched_vjp=True)


def _where_jvp(ts, ans, args, params):
    """The selected argument's tangent, one ``where`` for both (the condition has none)."""
    if ts[1] is None and ts[2] is None:
        return None
    return where(args[0], ts[1] if ts[1] is not None else 0, ts[2] if ts[2] is not None else 0)


where = defprim(np.where, (None,
                           lambda g, ans, c, x, y: unbroadcast(where(c, g, 0), x.shape),
                           lambda g, ans, c, x, y: unbroadcast(where(c, 0, g), y.shape)), name="where",
                fused_jvp=_where_jvp, batch=elementwise_rule, batched_vjp=True)


def _clip(x, lo, hi):
    return np.clip(x, lo, hi)


clip = defprim(_clip, (lambda g, ans, x, lo, hi: unbroadcast(where(_inside(x, lo, hi), g, 0), x.shape),
                       lambda g, ans, x, lo, hi: unbroadcast(where(_below(x, lo), g, 0), lo),
                       lambda g, ans, x, lo, hi: unbroadcast(where(_above(x, hi), g, 0), hi)),
               jvp=(lambda t, ans, x, lo, hi: where(_inside(x, lo, hi), t, 0),
                    lambda t, ans, x, lo, hi: where(_below(x, lo), t, 0),
                    lambda t, ans, x, lo, hi: where(_above(x, hi), t, 0)),
               name="clip", batch=elementwise_rule, batched_vjp=True)


def _identity(x):
    return x


# ``stop_gradient(x)``: x's value with a zero derivative in every interpreter. It has no VJP rule,
# so a tape records nothing and returns the value stripped of that level (bind); its JVP is zero, so
# a forward level returns the plain value too; under vmap it is elementwise (the batch stays).
stop_gradient = defprim(_identity, jvp=lambda t, ans, x: None, batch=elementwise_rule,
                        batched_vjp=True, name="stop_gradient")

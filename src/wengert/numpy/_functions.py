"""NumPy's functions with NumPy's signatures, over the primitive table.

Elementwise primitives are exported as they are. Everything else is a thin function that, when no
argument is traced, hands the call to NumPy itself (``@traceable``), so plain code gets exactly
NumPy's answer; when an argument is traced it maps the call onto primitives.
"""
from __future__ import annotations

import builtins
import functools

import numpy as np
import opt_einsum

from ..core.errors import NoDerivativeError
from ..core.mutation import check_not_stale as _check_not_stale
from ..core.mutation import root as _root
from ..core.mutation import stale_guard as _stale_guard
from ..core.namespace import is_foreign as _is_foreign
from ..core.namespace import refuse_data_dependent as _refuse_data_dependent
from ..core.trace import Tracer, unbox
from ..core.trace import bind as _bind
from ..primitives import contractions as C
from ..primitives import elementwise as E
from ..primitives import reductions as R
from ..primitives import shape as S
from ..primitives import complex as _X
from ..primitives._table import elementwise_constant as _elementwise_constant
from ..primitives._table import nondiff, unbox_all

_NO_VALUE = np._NoValue


def _has_tracer(args, kwargs):
    for a in args:
        t = type(a)
        if t is Tracer:
            return True
        if (t is list or t is tuple) and contains_tracer(a):
            return True
    for a in kwargs.values():
        if type(a) is Tracer:
            return True
    return False


def traceable(np_fn):
    """Use the decorated body for traced arguments and ``np_fn`` itself otherwise.

    A list or tuple holding traced values where NumPy takes an array (``wnp.sum([a, b])``) is
    stacked into one traced array first, as NumPy would convert it; bodies see arrays only.
    """

    def decorate(fn):
        @functools.wraps(np_fn)
        def call(*args, **kwargs):
            n = len(args)
            if n and type(args[0]) is Tracer and (n == 1 or n == 2 and type(args[1]) is Tracer):
                return fn(*args, **kwargs)   # the commonest calls, np.sum(x, ...), np.inner(u, v): no lists
            if _has_tracer(args, kwargs):
                return fn(*[asarray(a) if type(a) in (list, tuple) and contains_tracer(a) else a
                            for a in args], **kwargs)
            return np_fn(*args, **kwargs)

        call.traced_body = fn
        return call

    return decorate


def _unsupported(name, **given):
    for key, value in given.items():
        if value is not None and value is not _NO_VALUE and value is not False:
            raise NotImplementedError(
                f"wengert.numpy.{name}: the argument {key}={value!r} is not supported on traced "
                "values; compute without it (for out=, use the returned array instead)"
            )


def _ndim(x):
    return x.ndim if type(x) is Tracer else np.ndim(x)


def _shape(x):
    return x.shape if type(x) is Tracer else np.shape(x)


def _norm_axis(axis, ndim):
    if axis is None:
        return None
    if isinstance(axis, (tuple, list)):
        return tuple(builtins.sorted(a % ndim if ndim else a for a in axis))
    return (axis % ndim,) if ndim else (axis,)


def as_traced_operand(x):
    """Leave tracers alone; turn lists and scalars into arrays so shapes are known (a list that
    holds traced values becomes one traced array)."""
    if type(x) is Tracer or type(x) is np.ndarray:
        return x
    if contains_tracer(x):
        return asarray(x)
    return x if _is_foreign(x) else np.asarray(x)   # a Dask or CuPy array stays one


# --- elementwise -------------------------------------------------------------------------------
add, subtract, multiply, divide, true_divide = E.add, E.subtract, E.multiply, E.divide, E.divide
negative, positive, power, float_power, square = E.negative, E.positive, E.power, E.float_power, E.square
sqrt, cbrt, reciprocal, remainder, mod, fmod = E.sqrt, E.cbrt, E.reciprocal, E.remainder, E.remainder, E.fmod
exp, exp2, expm1, log, log2, log10, log1p = E.exp, E.exp2, E.expm1, E.log, E.log2, E.log10, E.log1p
logaddexp, logaddexp2 = E.logaddexp, E.logaddexp2
sin, cos, tan, arcsin, arccos, arctan, arctan2 = E.sin, E.cos, E.tan, E.arcsin, E.arccos, E.arctan, E.arctan2
sinh, cosh, tanh, arcsinh, arccosh, arctanh = E.sinh, E.cosh, E.tanh, E.arcsinh, E.arccosh, E.arctanh
hypot, deg2rad, rad2deg, radians, degrees = E.hypot, E.deg2rad, E.rad2deg, E.deg2rad, E.rad2deg
absolute, abs, fabs = E.absolute, E.absolute, E.fabs  # noqa: A001
maximum, minimum, fmax, fmin = E.maximum, E.minimum, E.fmax, E.fmin
asin, acos, atan, atan2 = arcsin, arccos, arctan, arctan2
asinh, acosh, atanh, pow = arcsinh, arccosh, arctanh, power  # noqa: A001


def where(condition, x=_NO_VALUE, y=_NO_VALUE):
    """``np.where``; the arguments may also be given by name (NumPy's own takes them by position)."""
    if x is _NO_VALUE and y is _NO_VALUE:
        return np.where(unbox_all(condition))
    if type(x) is not Tracer and type(y) is not Tracer:
        condition = unbox_all(condition)
        if type(condition) is Tracer:  # batched by vmap
            return E.where(condition, x, y)
        return np.where(condition, x, y)
    return E.where(unbox_all(condition), x, y)


def clip(a, a_min=_NO_VALUE, a_max=_NO_VALUE, out=None, *, min=_NO_VALUE, max=_NO_VALUE, **kwargs):  # noqa: A002
    lo = a_min if a_min is not _NO_VALUE else (min if min is not _NO_VALUE else None)
    hi = a_max if a_max is not _NO_VALUE else (max if max is not _NO_VALUE else None)
    if not _has_tracer((a, lo, hi), {}):
        return np.clip(a, lo, hi, out=out, **kwargs)
    _unsupported("clip", out=out, **kwargs)
    return E.clip(a, lo, hi)


# --- reductions ----------------------------------------------------------------------------------
@traceable(np.sum)
def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NO_VALUE, where=_NO_VALUE):  # noqa: A001
    if axis is None and dtype is None and keepdims is False and type(a) is Tracer and out is None \
            and initial is _NO_VALUE and where is _NO_VALUE and R.sum_.rewrite is None:
        return _bind(R.sum_, (a,), {"axis": None, "keepdims": False})   # np.sum(u * v): the hot case
    if out is not None or initial is not _NO_VALUE or where is not _NO_VALUE:
        _unsupported("sum", out=out, initial=initial, where=where)
    if dtype is not None:
        a = astype(a, dtype)
    return R.sum_(a, axis=None if axis is None else _norm_axis(axis, _ndim(a)), keepdims=keepdims)


def _count(a, axis):
    shape = _shape(a)
    if axis is None:
        return int(np.prod(shape, dtype=np.int64))
    return int(np.prod([shape[i] for i in _norm_axis(axis, len(shape))], dtype=np.int64))


@traceable(np.mean)
def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=_NO_VALUE):
    _unsupported("mean", out=out, where=where)
    if dtype is not None:
        a = astype(a, dtype)
    elif a.dtype.kind not in "fc":
        a = astype(a, np.float64)
    return R.mean(a, axis=_norm_axis(axis, _ndim(a)), keepdims=keepdims)


def _extremum(prim, name):
    @traceable(getattr(np, name))
    def reduce(a, axis=None, out=None, keepdims=False, initial=_NO_VALUE, where=_NO_VALUE):
        _unsupported(name, out=out, initial=initial, where=where)
        return prim(a, axis=_norm_axis(axis, _ndim(a)), keepdims=keepdims)
    reduce.traced_body.__name__ = name
    return reduce


max = amax = _extremum(R.max_, "max")  # noqa: A001
min = amin = _extremum(R.min_, "min")  # noqa: A001


@traceable(np.prod)
def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NO_VALUE, where=_NO_VALUE):
    _unsupported("prod", out=out, initial=initial, where=where)
    if dtype is not None:
        a = astype(a, dtype)
    return R.prod(a, axis=_norm_axis(axis, _ndim(a)), keepdims=keepdims)


@traceable(np.var)
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=_NO_VALUE, mean=_NO_VALUE,
        correction=_NO_VALUE):
    _unsupported("var", out=out, where=where, mean=mean)
    if correction is not _NO_VALUE:
        ddof = correction
    if dtype is not None:
        a = astype(a, dtype)
    if type(a) is Tracer and a.dtype.kind == "f":   # one primitive with the composition's rules fused
        return R.var(a, axis=_norm_axis(axis, _ndim(a)), ddof=ddof, keepdims=keepdims)
    centered = a - globals()["mean"](a, axis=axis, keepdims=True)
    # NumPy's rule: the variance of complex values is real, the mean of |x - mean|^2
    squares = _X.real(centered * _X.conj(centered)) if np.iscomplexobj(unbox(a)) else centered * centered
    return sum(squares, axis=axis, keepdims=keepdims) / (_count(a, axis) - ddof)


def _sqrt_of_variance(v):
    """``sqrt(v)`` for std: where the variance is exactly 0 (all values equal) the derivative is 0.

    std is not differentiable there (along any direction it grows like |t|, a cone like abs at 0);
    0 is the subgradient of least norm, the value wengert's abs and norm give at 0 too. JAX gives
    nan there (sqrt's derivative at 0 times 0). The value itself is sqrt's.
    """
    flat = _flat_variance(v)
    return E.where(flat, 0.0, sqrt(E.where(flat, 1.0, v))) if type(v) is Tracer else sqrt(v)


def _is_zero(v):
    return v == 0


_flat_variance = _elementwise_constant(_is_zero)


@traceable(np.std)
def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=_NO_VALUE, mean=_NO_VALUE,
        correction=_NO_VALUE):
    v = var(a, axis=axis, dtype=dtype, out=out, ddof=ddof, keepdims=keepdims, where=where, mean=mean,
            correction=correction)
    return _sqrt_of_variance(v)


def _scan(prim, name):
    @traceable(getattr(np, name))
    def scan(a, axis=None, dtype=None, out=None):
        _unsupported(name, out=out)
        if dtype is not None:
            a = astype(a, dtype)
        if axis is None:
            return prim(ravel(a) if _ndim(a) != 1 else a, axis=0)
        return prim(a, axis=axis % _ndim(a))
    return scan


cumsum = _scan(R.cumsum, "cumsum")
cumprod = _scan(R.cumprod, "cumprod")


@traceable(np.average)
def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    if weights is None:
        avg = mean(a, axis=axis, keepdims=keepdims)
        total = np.asarray(_count(a, axis), dtype=unbox(avg).dtype)
    else:
        w = weights
        if _ndim(w) != _ndim(a):
            if axis is None or _ndim(w) != 1:
                raise TypeError("average: weights of a different shape than a need an axis and must be 1-D")
            shape = [1] * _ndim(a)
            shape[axis % _ndim(a)] = _shape(w)[0]
            w = reshape(w, shape)
        total = sum(broadcast_to(w, _shape(a)), axis=axis, keepdims=keepdims)
        avg = sum(a * w, axis=axis, keepdims=keepdims) / total
    if returned:
        return avg, broadcast_to(total, _shape(avg))
    return avg


# --- products and contractions -------------------------------------------------------------------
def _record_plain_product(prim, a, b, va, vb):
    """``a @ b`` or ``np.dot(a, b)`` (``prim``) on two tracers of one tape whose values ``va``, ``vb``
    are NumPy arrays (for ``@``, of one or two dimensions, where it is ``np.dot``): the product of
    per-column loops, computed and recorded without bind's generic steps. None where bind's are
    needed (another level, a guard other than the stale-view check, a rewrite hook, or an entry
    that keeps less than both operands)."""
    trace = a._trace
    if b._trace is not trace or prim.rewrite is not None:
        return None
    guard = trace.guard
    if guard is not None:
        if guard is not _stale_guard or trace.observe is not None:
            return None
        last = trace.last_write   # _stale_guard, inlined: a tape with in-place writes; an operand made
        if a.index < last:        # after the latest write cannot be a view it overtook, so only the
            _check_not_stale(trace, (a,), prim)   # older ones are looked up (a loop's fixed column)
        if b.index < last:
            _check_not_stale(trace, (b,), prim)
    plans = prim.plans
    if plans is None or prim.arity != 2:
        return None
    plan = plans.get(3) or prim.plan(3)
    if plan[1] is not None:
        return None
    ans = np.dot(va, vb)
    tape = trace.tape
    out = object.__new__(Tracer)   # make_tracer, written out
    out.value = ans
    out._trace = trace
    out.index = len(tape)
    tape.append((prim, [va, vb], ans if plan[0] else None, _NO_PARAMS, ((0, a.index), (1, b.index))))
    return out


_NO_PARAMS = {}   # the params of every product _record_plain_product records (entries' params are never changed)


def dot(a, b, out=None):
    """``np.dot``; on two traced arrays it goes straight to the primitive (a hot path in loops)."""
    if type(a) is Tracer:
        if type(b) is Tracer and out is None:
            va, vb = a.value, b.value
            if type(va) is np.ndarray and type(vb) is np.ndarray and not a._trace.hidden_axes:
                product = _record_plain_product(C.dot, a, b, va, vb)
                if product is not None:
                    return product
            return _bind(C.dot, (a, b), {}) if C.dot.rewrite is None else C.dot(a, b)
    elif type(b) is not Tracer:
        return np.dot(a, b, out)
    _unsupported("dot", out=out)
    return C.dot(as_traced_operand(a), as_traced_operand(b))


@traceable(np.matmul)
def matmul(a, b, /, out=None, **kwargs):
    _unsupported("matmul", out=out, **kwargs)
    a, b = as_traced_operand(a), as_traced_operand(b)
    if _ndim(a) == 0 or _ndim(b) == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions (use * for scalars)")
    return C.matmul(a, b)


@traceable(np.tensordot)
def tensordot(a, b, axes=2):
    a, b = as_traced_operand(a), as_traced_operand(b)
    na, nb = _ndim(a), _ndim(b)
    axes_a, axes_b = C.tensordot_axes(axes, na, nb)
    if na and 0 < nb <= 2 and list(axes_a) == [na - 1] and list(axes_b) == [0]:
        return C.dot(a, b)   # np.dot's meaning: dot's rules, which cost less (and loops vectorize as dots)
    return C.tensordot(a, b, axes=(tuple(axes_a), tuple(axes_b)))


@traceable(np.vdot)
def vdot(a, b, /):
    a, b = as_traced_operand(a), as_traced_operand(b)
    if np.iscomplexobj(unbox(a)):  # np.vdot conjugates its first argument
        return sum(ravel(conj(a)) * ravel(b))
    return C.vdot(a, b)


@traceable(np.inner)
def inner(a, b, /):
    if type(a) is Tracer and type(b) is Tracer and C.dot.rewrite is None:
        va, vb = a.value, b.value   # two traced vectors (the hot case of per-column loops): np.dot's
        if type(va) is np.ndarray and type(vb) is np.ndarray and va.ndim == 1 and vb.ndim == 1 \
                and not a._trace.hidden_axes and not b._trace.hidden_axes:
            product = _record_plain_product(C.dot, a, b, va, vb)
            return _bind(C.dot, (a, b), {}) if product is None else product
    a, b = as_traced_operand(a), as_traced_operand(b)
    na, nb = _ndim(a), _ndim(b)
    if na == 0 or nb == 0:
        return a * b
    if nb == 1:              # contracting a's last axis with a vector is np.dot's meaning
        return C.dot(a, b)
    if na == 1:
        return C.dot(b, a)
    return tensordot(a, b, axes=([-1], [-1]))


@traceable(np.outer)
def outer(a, b, out=None):
    _unsupported("outer", out=out)
    return C.outer(as_traced_operand(a), as_traced_operand(b))


@traceable(np.einsum)
def einsum(*operands, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    _unsupported("einsum", out=out, dtype=dtype)
    if not isinstance(operands[0], str):  # the sublist form: einsum(a, [0, 1], b, [1, 2], [0, 2])
        operands = _sublists_to_subscripts(operands)
    arrays = [as_traced_operand(op) for op in operands[1:]]
    # a traced value's own shape: one example's under vmap
    shapes = tuple([a.shape if type(a) is Tracer else np.shape(a) for a in arrays])
    subscripts = _explicit_subscripts(operands[0], shapes)
    if len(arrays) == 2 and _is_dot(subscripts) and shapes[0][-1] == shapes[1][0]:   # (einsum broadcasts 1s)
        return C.dot(*arrays)   # 'i,i->', 'ij,j->i', 'i,ij->j', 'ij,jk->ik': dot's cheaper rules
    return C.einsum(*arrays, subscripts=subscripts)


@functools.lru_cache(maxsize=256)
def _is_dot(subscripts):
    """Do two operands' explicit subscripts say ``np.dot(a, b)`` of vectors and matrices: one index
    shared, a's last and b's first, summed; every other index kept, in order, once?"""
    inputs, output = subscripts.split("->")
    a, b = inputs.split(",")
    if not (1 <= len(a) <= 2 and 1 <= len(b) <= 2) or a[-1] != b[0] or len(set(a + b)) != len(a) + len(b) - 1:
        return False
    return output == a[:-1] + b[1:]


@functools.lru_cache(maxsize=1024)
def _explicit_subscripts(subscripts, shapes):
    """``subscripts`` with ellipses expanded and the output spelled out, parsed once per shapes."""
    shaped = [np.broadcast_to(np.zeros((), np.float64), shape) for shape in shapes]
    inputs, output, _ = opt_einsum.parser.parse_einsum_input([subscripts] + shaped)
    return f"{inputs}->{output}"


def _sublists_to_subscripts(operands):
    """``(a, [0, 1], b, [1, 2], [0, 2])`` as ``('ab,bc->ac', a, b)``: NumPy's other spelling."""
    def word(sublist):
        out = []
        for s in sublist:
            if s is Ellipsis:
                out.append("...")
            elif 0 <= int(s) < len(_LETTERS):
                out.append(_LETTERS[int(s)])
            else:
                raise ValueError(f"einsum: subscript {s} in a sublist is out of range (0 to {len(_LETTERS) - 1})")
        return "".join(out)

    operands = list(operands)
    output = operands.pop() if len(operands) % 2 else None
    subscripts = ",".join(word(s) for s in operands[1::2]) + ("->" + word(output) if output is not None else "")
    return (subscripts, *operands[0::2])


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@traceable(np.trace)
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _unsupported("trace", out=out)
    d = diagonal(a, offset, axis1, axis2)
    if dtype is not None:
        d = astype(d, dtype)
    return sum(d, axis=-1)


@traceable(np.kron)
def kron(a, b):
    a, b = as_traced_operand(a), as_traced_operand(b)
    nd = builtins.max(_ndim(a), _ndim(b))
    a = reshape(a, (1,) * (nd - _ndim(a)) + _shape(a))
    b = reshape(b, (1,) * (nd - _ndim(b)) + _shape(b))
    a_shape, b_shape = _shape(a), _shape(b)
    interleaved_a = reshape(a, tuple(x for n in a_shape for x in (n, 1)))
    interleaved_b = reshape(b, tuple(x for n in b_shape for x in (1, n)))
    return reshape(interleaved_a * interleaved_b, tuple(m * n for m, n in zip(a_shape, b_shape)))


# --- shape ----------------------------------------------------------------------------------------
@traceable(np.reshape)
def reshape(a, /, shape=None, order="C", *, newshape=None, copy=None):
    shape = newshape if shape is None else shape
    if order != "C":
        raise NotImplementedError("wengert.numpy.reshape: only order='C' is supported on traced values")
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    return _view_of(a, S.reshape(a, shape=tuple(shape)))


@traceable(np.ravel)
def ravel(a, order="C"):
    return reshape(a, (-1,), order=order)


@traceable(np.transpose)
def transpose(a, axes=None):
    if axes is not None:
        axes = tuple(ax % _ndim(a) for ax in axes)
    return _view_of(a, S.transpose(a, axes=axes))


def _view_of(a, out):
    """``out``, remembering ``a`` as where a write through it goes when it is a view of ``a``'s
    memory (NumPy's transpose and flip always, its reshape where the strides allow; core/mutation.py)."""
    if type(out) is Tracer and type(a) is Tracer and out._trace is a._trace:
        sample, operand = out.value, a.value
        while type(sample) is Tracer:
            sample, operand = sample.value, operand.value
        if type(sample) is np.ndarray and sample.base is not None and _root(sample) is _root(operand):
            out.src = a
    return out


@traceable(np.moveaxis)
def moveaxis(a, source, destination):
    nd = _ndim(a)
    src = [source % nd] if isinstance(source, (int, np.integer)) else [s % nd for s in source]
    dst = [destination % nd] if isinstance(destination, (int, np.integer)) else [d % nd for d in destination]
    order = [n for n in range(nd) if n not in src]
    for d, s in builtins.sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


@traceable(np.swapaxes)
def swapaxes(a, axis1, axis2):
    order = list(range(_ndim(a)))
    i, j = axis1 % len(order), axis2 % len(order)
    order[i], order[j] = order[j], order[i]
    return transpose(a, order)


@traceable(np.expand_dims)
def expand_dims(a, axis):
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    shape = list(_shape(a))
    nd = len(shape) + len(axes)
    for ax in builtins.sorted(x % nd for x in axes):
        shape.insert(ax, 1)
    return reshape(a, tuple(shape))


@traceable(np.squeeze)
def squeeze(a, axis=None):
    shape = _shape(a)
    if axis is None:
        drop = {i for i, n in enumerate(shape) if n == 1}
    else:
        drop = set(_norm_axis(axis, len(shape)))
        for i in drop:
            if shape[i] != 1:
                raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return reshape(a, tuple(n for i, n in enumerate(shape) if i not in drop))


@traceable(np.broadcast_to)
def broadcast_to(array, shape, subok=False):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return S.broadcast_to(array, shape=shape)


@traceable(np.broadcast_arrays)
def broadcast_arrays(*args, subok=False):
    shape = np.broadcast_shapes(*[_shape(a) for a in args])
    return tuple(broadcast_to(a, shape) for a in args)


def _sequence_traceable(np_fn):
    """Like ``traceable`` for functions whose first argument is a sequence of arrays."""

    def decorate(fn):
        @functools.wraps(np_fn)
        def call(arrays, *args, **kwargs):
            for a in arrays:
                if type(a) is Tracer or contains_tracer(a):
                    return fn([as_traced_operand(a) for a in arrays], *args, **kwargs)
            return np_fn(arrays, *args, **kwargs)

        return call

    return decorate


@_sequence_traceable(np.concatenate)
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _unsupported("concatenate", out=out, dtype=dtype)
    arrays = [as_traced_operand(a) for a in arrays]
    if axis is None:
        arrays, axis = [ravel(a) for a in arrays], 0
    return S.concatenate(*arrays, axis=axis % _ndim(arrays[0]))


@_sequence_traceable(np.stack)
def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    if out is not None or dtype is not None:
        _unsupported("stack", out=out, dtype=dtype)
    arrays = [a if type(a) is Tracer else as_traced_operand(a) for a in arrays]
    shape = _shape(arrays[0])
    for a in arrays:
        if _shape(a) != shape:
            raise ValueError("all input arrays must have the same shape")
    return S.stack(*arrays, axis=axis % (len(shape) + 1))


@_sequence_traceable(np.hstack)
def hstack(tup, *, dtype=None, casting="same_kind"):
    arrays = [atleast_1d(a) for a in tup]
    return concatenate(arrays, axis=0 if _ndim(arrays[0]) == 1 else 1)


@_sequence_traceable(np.vstack)
def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate([atleast_2d(a) for a in tup], axis=0)


row_stack = vstack


@_sequence_traceable(np.dstack)
def dstack(tup):
    return concatenate([atleast_3d(a) for a in tup], axis=2)


@_sequence_traceable(np.column_stack)
def column_stack(tup):
    return concatenate([reshape(a, (-1, 1)) if _ndim(a) < 2 else a for a in tup], axis=1)


@traceable(np.atleast_1d)
def atleast_1d(*arys):
    out = [reshape(a, (1,)) if _ndim(a) == 0 else as_traced_operand(a) for a in arys]
    return out[0] if len(out) == 1 else tuple(out)


@traceable(np.atleast_2d)
def atleast_2d(*arys):
    out = []
    for a in arys:
        a = as_traced_operand(a)
        out.append(reshape(a, (1,) * (2 - _ndim(a)) + _shape(a)) if _ndim(a) < 2 else a)
    return out[0] if len(out) == 1 else tuple(out)


@traceable(np.atleast_3d)
def atleast_3d(*arys):
    out = []
    for a in arys:
        a = as_traced_operand(a)
        nd = _ndim(a)
        shape = {0: (1, 1, 1), 1: (1,) + _shape(a) + (1,), 2: _shape(a) + (1,)}.get(nd, _shape(a))
        out.append(reshape(a, shape))
    return out[0] if len(out) == 1 else tuple(out)


def _split_points(n, indices_or_sections, strict):
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if strict and n % sections:
            raise ValueError("array split does not result in an equal division")
        base, extra = divmod(n, sections)
        sizes = [base + 1] * extra + [base] * (sections - extra)
        return list(np.cumsum([0] + sizes))
    return [0] + [builtins.min(builtins.max(int(i) if i >= 0 else n + int(i), 0), n)
                  for i in indices_or_sections] + [n]


def _split(a, indices_or_sections, axis, strict):
    axis = axis % _ndim(a)
    points = _split_points(_shape(a)[axis], indices_or_sections, strict)
    lead = (slice(None),) * axis
    return [a[lead + (slice(lo, builtins.max(lo, hi)),)] for lo, hi in zip(points[:-1], points[1:])]


@traceable(np.split)
def split(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, strict=True)


@traceable(np.array_split)
def array_split(ary, indices_or_sections, axis=0):
    return _split(ary, indices_or_sections, axis, strict=False)


@traceable(np.hsplit)
def hsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, axis=1 if _ndim(ary) > 1 else 0)


@traceable(np.vsplit)
def vsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, axis=0)


@traceable(np.tile)
def tile(A, reps):
    reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    nd = builtins.max(_ndim(A), len(reps))
    shape = (1,) * (nd - _ndim(A)) + _shape(A)
    reps = (1,) * (nd - len(reps)) + reps
    spread = reshape(A, tuple(x for n in shape for x in (1, n)))
    spread = broadcast_to(spread, tuple(x for r, n in zip(reps, shape) for x in (r, n)))
    return reshape(spread, tuple(r * n for r, n in zip(reps, shape)))


@traceable(np.repeat)
def repeat(a, repeats, axis=None):
    if axis is None:
        a, axis = ravel(a), 0
    axis = axis % _ndim(a)
    n = _shape(a)[axis]
    if np.ndim(repeats) == 0 or np.size(repeats) == 1:
        r = int(np.reshape(repeats, -1)[0]) if np.ndim(repeats) else int(repeats)
        shape = _shape(a)
        spread = expand_dims(a, axis + 1)
        spread = broadcast_to(spread, shape[:axis + 1] + (r,) + shape[axis + 1:])
        return reshape(spread, shape[:axis] + (n * r,) + shape[axis + 1:])
    return take(a, np.repeat(np.arange(n), repeats), axis=axis)


@traceable(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    nd = _ndim(array)
    if type(pad_width) is int:   # the common spelling, without NumPy's broadcasting of the widths
        widths = ((pad_width, pad_width),) * nd
    else:
        widths = np.broadcast_to(np.asarray(pad_width, dtype=int).reshape(-1, 2) if np.ndim(pad_width) else
                                 np.asarray([[pad_width, pad_width]]), (nd, 2))
        widths = tuple((int(b), int(e)) for b, e in widths)
    if mode == "constant":
        value = kwargs.pop("constant_values", 0)
        if np.ndim(value) != 0:
            raise NotImplementedError("wengert.numpy.pad: per-axis constant_values are not supported on traced values")
        return S.pad_constant(array, pad_width=widths, constant_values=value)
    if kwargs:
        raise NotImplementedError(f"wengert.numpy.pad: options {sorted(kwargs)} are not supported on traced values")
    if mode in _PAD_STATISTICS:
        return _pad_statistic(array, widths, _PAD_STATISTICS[mode])
    if mode not in ("edge", "reflect", "symmetric", "wrap"):
        raise NotImplementedError(f"wengert.numpy.pad: mode={mode!r} is not supported on traced values")
    out = array
    for axis, width in enumerate(widths):
        if width == (0, 0):
            continue
        # these modes copy elements: pad the indices with NumPy itself and read them
        index = np.pad(np.arange(_shape(array)[axis]), width, mode=mode)
        out = take(out, index, axis=axis)
    return out


_PAD_STATISTICS = {"maximum": "max", "minimum": "min", "mean": "mean"}


def _pad_statistic(array, widths, stat):
    """Pad axis by axis with a statistic of the whole axis, as NumPy does (corners from earlier axes)."""
    out = array
    for axis, (before, after) in enumerate(widths):
        if before == after == 0:
            continue
        value = globals()[stat](out, axis=axis, keepdims=True)
        shape = list(_shape(out))
        parts = []
        for width, part in ((before, None), (0, out), (after, None)):
            if part is not None:
                parts.append(part)
            elif width:
                shape[axis] = width
                parts.append(broadcast_to(value, tuple(shape)))
        out = concatenate(parts, axis=axis)
    return out


@traceable(np.flip)
def flip(m, axis=None):
    if axis is not None:
        axis = _norm_axis(axis, _ndim(m))
    return _view_of(m, S.flip(m, axis=axis))


@traceable(np.fliplr)
def fliplr(m):
    return flip(m, 1)


@traceable(np.flipud)
def flipud(m):
    return flip(m, 0)


@traceable(np.roll)
def roll(a, shift, axis=None):
    return S.roll(a, shift=shift if np.ndim(shift) == 0 else tuple(shift),
                  axis=axis if axis is None or np.ndim(axis) == 0 else tuple(axis))


@traceable(np.diagonal)
def diagonal(a, offset=0, axis1=0, axis2=1):
    nd = _ndim(a)
    return S.diagonal(a, offset=offset, axis1=axis1 % nd, axis2=axis2 % nd)


@traceable(np.diag)
def diag(v, k=0):
    if _ndim(v) == 2:
        return diagonal(v, k)
    if _ndim(v) != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = _shape(v)[0] + builtins.abs(k)
    return S.diagonal_embed(v, shape=(n, n), offset=k, axis1=0, axis2=1)


def _triangle(np_fn, name):
    @traceable(np_fn)
    def triangle(m, k=0):
        shape = _shape(m)
        mask = np_fn(np.ones(shape[-2:], dtype=bool), k)
        return E.where(mask, m, 0)
    triangle.traced_body.__name__ = name
    return triangle


triu = _triangle(np.triu, "triu")
tril = _triangle(np.tril, "tril")


@traceable(np.take)
def take(a, indices, axis=None, out=None, mode=None):
    _unsupported("take", out=out, mode=mode)
    indices = unbox_all(indices)
    if axis is None:
        return ravel(a)[np.asarray(indices)]
    axis = axis % _ndim(a)
    return a[(slice(None),) * axis + (np.asarray(indices),)]


@traceable(np.take_along_axis)
def take_along_axis(arr, indices, axis=-1):
    indices = unbox_all(indices)
    if type(indices) is not Tracer:  # a Tracer here: indices batched by vmap
        indices = np.asarray(indices)
    if axis is None:
        return ravel(arr)[indices]
    nd = _ndim(arr)
    axis = axis % nd
    shape = list(np.broadcast_shapes(tuple(n if d != axis else 1 for d, n in enumerate(_shape(arr))),
                                     tuple(n if d != axis else 1 for d, n in enumerate(indices.shape))))
    shape[axis] = indices.shape[axis]
    indices = np.broadcast_to(indices, shape)
    grids = np.ogrid[tuple(slice(n) for n in indices.shape)]
    index = tuple(indices if d == axis else grids[d] for d in range(nd))
    return arr[index]


@traceable(np.sort)
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    if axis is None:
        a, axis = ravel(a), -1
    return take_along_axis(a, np.argsort(unbox_all(a), axis=axis, kind=kind, stable=stable), axis=axis)


@traceable(np.copy)
def copy(a, order="K", subok=False):
    return a + 0 if type(a) is Tracer else np.copy(a)


def astype(x, dtype, /, *, copy=True, device=None):
    """``x.astype(dtype)``; casting to a non-float dtype ends differentiation (zero gradient)."""
    if type(x) is not Tracer:
        return np.asarray(x).astype(dtype, copy=copy)
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.inexact):
        return _cast_without_gradient(x, dtype=dtype)
    if dtype == x.dtype:
        return x
    return S.astype(x, dtype=dtype)


def _cast(x, dtype):
    return np.asarray(x).astype(dtype)


_cast.elementwise = True   # vmap casts the whole batch at once (transforms/batching.py)
_cast_without_gradient = nondiff(_cast)


def array(object, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):  # noqa: A002
    """``np.array`` that also accepts (nested lists of) traced values, stacking them."""
    if not contains_tracer(object):
        return np.array(object, dtype=dtype, copy=copy, order=order, subok=subok, ndmin=ndmin)
    out = _stack_nested(object)
    if dtype is not None:
        out = astype(out, dtype)
    if ndmin > out.ndim:
        out = reshape(out, (1,) * (ndmin - out.ndim) + out.shape)
    return out


def asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):
    """``np.asarray``; traced values (and Buffers) are returned as traced values."""
    if hasattr(a, "__wengert_array__"):
        a = a.__wengert_array__()
    if not contains_tracer(a):
        return np.asarray(a, dtype=dtype, order=order)
    out = a if type(a) is Tracer else _stack_nested(a)
    return astype(out, dtype) if dtype is not None else out


def contains_tracer(x):
    if type(x) is Tracer:
        return True
    if type(x) in (list, tuple):
        return builtins.any(contains_tracer(v) for v in x)
    return False


def _stack_nested(x):
    if type(x) in (list, tuple):
        return stack([_stack_nested(v) for v in x])
    return x if type(x) is Tracer else np.asarray(x)


# --- complex numbers (JAX's convention for cotangents: docs/complex.md) -------------------------
def real(val):
    if type(val) is not Tracer:
        return np.real(val)
    return _X.real(val) if np.iscomplexobj(unbox(val)) else val


def imag(val):
    if type(val) is not Tracer:
        return np.imag(val)
    return _X.imag(val) if np.iscomplexobj(unbox(val)) else val * 0  # a zero that vmap can batch


def conj(x, /, **kwargs):
    if type(x) is not Tracer:
        return np.conjugate(x, **kwargs)
    return _X.conj(x) if np.iscomplexobj(unbox(x)) else x


conjugate = conj


def angle(z, deg=False):
    if type(z) is not Tracer:
        return np.angle(z, deg=deg)
    if not np.iscomplexobj(unbox(z)):
        return (z < 0) * (180.0 if deg else np.pi)  # constant: 0 or pi
    out = _X.angle_(z)
    return out * (180 / np.pi) if deg else out


# --- once on the list below, now differentiated: their values move smoothly with an argument ------
# (unique's values are a gather; heaviside is x2 where x1 == 0; full_like is its fill value;
# bincount's and histogram's sums are linear in the weights; histogram's computed edges move with
# the data's min and max; nextafter(x1, x2) is x1 plus a piecewise-constant step)
_unique_plain = nondiff(np.unique)
_heaviside_plain = nondiff(np.heaviside)
_full_like_plain = nondiff(np.full_like)
_bincount_plain = nondiff(np.bincount)
_histogram_plain = nondiff(np.histogram)
_nextafter_plain = nondiff(np.nextafter)
_isfinite = nondiff(np.isfinite)
_is_zero = nondiff(lambda x: np.equal(x, 0))


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True):
    """``np.unique``. The values are a gather of ``ar`` (each value's first occurrence), so they
    carry its gradient there; indices, inverse and counts are integers."""
    if type(ar) is not Tracer:
        return np.unique(ar, return_index=return_index, return_inverse=return_inverse,
                         return_counts=return_counts, axis=axis, equal_nan=equal_nan)
    _refuse_data_dependent("unique", [ar])
    found = _unique_plain(ar, return_index=True, return_inverse=return_inverse, return_counts=return_counts,
                          axis=axis, equal_nan=equal_nan)
    values = take(ar, found[1], axis=axis)
    extra = ((found[1],) if return_index else ()) + tuple(found[2:])
    return (values,) + extra if extra else values


def heaviside(x1, x2, /):
    """``np.heaviside``: piecewise constant in ``x1``, and ``x2`` itself where ``x1 == 0``."""
    if type(x2) is not Tracer:
        return _heaviside_plain(x1, x2)
    return where(_is_zero(x1), x2, _heaviside_plain(x1, 0.0))


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """``np.full_like``: the values of ``a`` do not matter (no gradient); a traced fill value is
    broadcast, with its gradient."""
    if type(fill_value) is not Tracer:
        return _full_like_plain(a, fill_value, dtype=dtype, order=order, subok=subok, shape=shape)
    dtype = np.dtype(dtype) if dtype is not None else np.asarray(unbox(a)).dtype
    if not np.issubdtype(dtype, np.inexact):
        return _full_like_plain(a, fill_value, dtype=dtype, order=order, subok=subok, shape=shape)
    shape = np.shape(unbox(a)) if shape is None else ((shape,) if np.ndim(shape) == 0 else tuple(shape))
    return copy(broadcast_to(astype(fill_value, dtype), shape))


def bincount(x, /, weights=None, minlength=0):
    """``np.bincount``: counts are integers; the sums of traced weights are linear in them."""
    if type(weights) is not Tracer:
        return _bincount_plain(x, weights, minlength)
    index = np.asarray(unbox_all(x))
    n = builtins.max(int(minlength), int(index.max()) + 1 if index.size else 0)
    return S.index_add(np.zeros(n), astype(weights, np.float64), index=index)


def histogram(a, bins=10, range=None, density=None, weights=None):  # noqa: A002
    """``np.histogram``. The counts are piecewise constant in ``a``. Edges computed from the data
    (``bins`` a count or a rule, ``range`` None) move with ``a``'s min and max, and from a traced
    ``range`` with it: they carry that gradient, with NumPy's values. Traced weights, and
    ``density=True`` over edges that move, are refused rather than given a zero gradient."""
    traced_range = range is not None and builtins.any(type(r) is Tracer for r in range)
    if not (type(a) is Tracer or type(bins) is Tracer or traced_range or type(weights) is Tracer):
        return np.histogram(a, bins, range, density, weights)
    if type(weights) is Tracer:
        raise NoDerivativeError("numpy.histogram with traced weights", (
            "numpy.histogram with traced weights has no derivative rule in wengert: its sums are "
            "linear in the weights, which wengert does not differentiate here; use "
            "wnp.bincount(np.digitize(a, edges) - 1, weights) with plain edges, or pass "
            "wg.stop_gradient(weights) to drop the gradient on purpose."))
    hist, edges = _histogram_plain(a, bins, range, density, weights)
    if type(bins) is Tracer:
        moving, edges = True, bins
    elif np.ndim(unbox_all(bins)) == 0 or isinstance(bins, str):
        size = np.size(unbox(a))
        lo, hi = (min(a), max(a)) if range is None and size else (range if range is not None else (0.0, 1.0))
        moving = type(lo) is Tracer or type(hi) is Tracer
        if moving:   # edges = lo + (hi - lo) * t: NumPy's values, and that derivative in lo and hi
            t = np.linspace(0.0, 1.0, np.size(edges))
            edges = edges + (lo - E.stop_gradient(lo)) * (1 - t) + (hi - E.stop_gradient(hi)) * t
    else:
        moving = False
    if density and moving:
        raise NoDerivativeError("numpy.histogram(density=True) with edges that move with traced values", (
            "numpy.histogram(density=True) divides by bin widths that move with the traced data (or "
            "range, or bins), which wengert does not differentiate: pass plain bins/range, or "
            "wg.stop_gradient the data."))
    return hist, edges


def nextafter(x1, x2, /):
    """``np.nextafter(x1, x2)``: ``x1`` moved by one floating-point step, a piecewise-constant
    amount: derivative 1 in ``x1``, none in ``x2``."""
    if type(x1) is not Tracer:
        return _nextafter_plain(x1, x2)
    moved = _nextafter_plain(x1, x2)
    finite = _isfinite(x1)
    step = where(finite, moved - E.stop_gradient(x1), 0.0)   # exact: adjacent floats
    return where(finite, x1 + step, moved)


# --- functions without a gradient: they read traced values and return plain arrays --------------
_NONDIFF = """
argmax argmin argsort argwhere nonzero flatnonzero sign floor ceil round around rint trunc fix
isnan isinf isfinite isclose allclose array_equal array_equiv equal not_equal less less_equal
greater greater_equal logical_and logical_or logical_not logical_xor floor_divide any all
count_nonzero searchsorted shape ndim size zeros_like ones_like empty_like
signbit digitize result_type iscomplexobj isrealobj isscalar
nanargmax nanargmin lexsort bitwise_and bitwise_or bitwise_xor invert left_shift right_shift
gcd lcm spacing sometrue alltrue
""".split()

for _name in _NONDIFF:
    if hasattr(np, _name):
        globals()[_name] = nondiff(getattr(np, _name))
del _name



_NOT_EXPORTED = {"annotations", "builtins", "functools", "np", "opt_einsum", "Tracer", "unbox", "C", "E", "NoDerivativeError",
                 "R", "S", "nondiff", "unbox_all", "traceable",
                 "as_traced_operand", "contains_tracer"}
__all__ = [n for n in list(globals()) if not n.startswith("_") and n not in _NOT_EXPORTED]

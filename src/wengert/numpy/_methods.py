"""Make a Tracer behave like an ndarray: operators, methods, properties and NumPy's protocols.

``np.sin(tracer)`` reaches ``__array_ufunc__`` and ``np.mean(tracer)`` reaches
``__array_function__``; both look the NumPy function up in the tables built here from the names
``wengert.numpy`` defines, so existing NumPy code is traced unchanged where a rule exists, and
gets a clear error where none does.
"""
from __future__ import annotations

import math
import operator
import sys

import numpy as np

from ..core.backward import is_basic
from ..core.errors import NoDerivativeError
from ..core.mutation import check_not_stale, setitem_method, stale_guard
from ..core.trace import SMALL, Metadata, Tracer, bind, reusable_operand, unbox
from ..primitives import contractions as C
from ..primitives import elementwise as E
from ..primitives import shape as S
from ..primitives.scatter import write
from ..primitives._batching import concrete
from ..primitives._table import nondiff, unbox_all
from . import _compositions
from ._functions import _record_plain_product
from ._conversions import array_refusal, check_number, check_write

UFUNCS = {}
FUNCTIONS = {}


def build_dispatch_tables(namespace, numpy_module, prefix=""):
    """Map each NumPy function or ufunc to the ``wengert.numpy`` function of the same name."""
    for name, fn in vars(namespace).items():
        if name.startswith("_") or not callable(fn):
            continue
        original = getattr(numpy_module, name, None)
        if original is None or original is fn:
            continue
        if isinstance(original, np.ufunc):
            UFUNCS[original] = fn
        elif callable(original) and not isinstance(original, type):
            FUNCTIONS[original] = fn


_new = object.__new__   # a tracer without __init__ (as core's make_tracer builds one)
_ndarray = np.ndarray


def clean_index(index):
    """Indices are never differentiated: read traced values (and lists) as plain arrays."""
    if type(index) is tuple:
        return tuple(clean_index(i) for i in index)
    if type(index) is Tracer:
        return unbox_all(index)  # a plain array, or the index batched by vmap
    if type(index) is list:
        return np.asarray(unbox_all(index))
    return index


def _getitem(self, index):
    """``x[index]``: the hot path of per-column loops, recorded here without the generic ``bind``."""
    kind = type(index)   # is_plain_basic, written out: ints and slices need no cleaning
    src = self   # the tracer a view was taken from (a write through it goes there: core/mutation.py)
    if kind is tuple:
        for i in index:
            if type(i) is not int and type(i) is not slice:
                index = clean_index(index)
                if not is_basic(index):
                    src = None   # a copy
                break
    elif kind is not int and kind is not slice:
        index = clean_index(index)
        if not is_basic(index):
            src = None
    trace = self._trace
    value = self.value
    guard = trace.guard
    if guard is not None or type(value) is Tracer:
        if guard is not stale_guard or trace.observe is not None or type(value) is Tracer:
            out = bind(S.getitem, (self,), {"index": index})
            if type(out) is Tracer and out._trace is trace:
                out.src = src
            return out
        if self.index < trace.last_write:   # stale_guard, inlined: a tape with in-place writes
            check_not_stale(trace, (self,), S.getitem)
    tape = trace.tape
    # the rule reads only the parent's shape and dtype: a large parent is not kept alive for it, and
    # its Metadata is made once per parent tracer (``aux``, unused on a tape's tracers), not per read
    if type(value) is _ndarray and value.size > SMALL:
        kept = getattr(self, "aux", None)
        if kept is None:
            kept = self.aux = Metadata(value)
    else:
        kept = value
    out = _new(Tracer)   # make_tracer, written out
    out.value = value[index]   # indexed first: an IndexError records nothing
    out._trace = trace
    out.index = len(tape)
    out.src = src
    tape.append((S.getitem, [kept], None, {"index": index}, ((0, self.index),)))
    return out


def _len(self):
    shape = self.shape
    if not shape:
        raise TypeError("len() of unsized object")
    return shape[0]


def _iter(self):
    for i in range(_len(self)):
        out = S.getitem(self, index=i)
        if type(out) is Tracer and out._trace is self._trace:
            out.src = self   # a view: writes through it go to self (core/mutation.py)
        yield out


def _repr(self):
    value = unbox(self)
    return f"Tracer(level={self._trace.level}, shape={np.shape(value)}, dtype={np.asarray(value).dtype}, value={value!r})"


def _array(self, dtype=None, copy=None):
    raise array_refusal(1)


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    if kwargs.get("out") is not None:
        raise TypeError(
            f"numpy.{ufunc.__name__}(..., out=...) writes into a plain array, which would drop the "
            "gradient of a traced value; use the returned value instead"
        )
    if method == "__call__":
        fn = UFUNCS.get(ufunc)
        if fn is None:
            raise _no_rule_for(ufunc)
        kwargs.pop("out", None)
        if kwargs:
            raise TypeError(f"numpy.{ufunc.__name__}: the options {sorted(kwargs)} are not supported on traced values")
        return fn(*inputs)
    if method == "at":
        raise _at_refusal(ufunc)
    method_of = _UFUNC_METHODS.get(method)
    fn = UFUNCS.get(ufunc)
    if method_of is None or fn is None or getattr(fn, "nondiff", False) or ufunc.nin != 2:
        raise NoDerivativeError(f"{_ufunc_name(ufunc)}.{method}")
    kwargs.pop("out", None)
    return method_of(fn, ufunc.__name__, *inputs, **kwargs)


# reduce, accumulate, reduceat and outer of a differentiable binary ufunc (``at``: _at_refusal)
_UFUNC_METHODS = {"reduce": _compositions.ufunc_reduce, "accumulate": _compositions.ufunc_accumulate,
                  "reduceat": _compositions.ufunc_reduceat, "outer": _compositions.ufunc_outer}

# ``ufunc.at`` writes into its first argument in place, like np.put and np.copyto, which wengert
# refuses for the reason tests/test_numpy_surface.py gives (x[idx] = v works under one transform
# only); JAX's functional spelling is the one that works under every transform
_AT_SPELLING = {"add": "x = x.at[idx].add(v)", "subtract": "x = x.at[idx].add(-v)",
                "multiply": "x = x.at[idx].multiply(v)", "maximum": "x = x.at[idx].max(v)",
                "minimum": "x = x.at[idx].min(v)"}


def _at_refusal(ufunc):
    name = ufunc.__name__
    if ufunc.nin == 1:
        spelling = f"x = x.at[idx].set({name}(x[idx]))"
    else:
        spelling = _AT_SPELLING.get(name, f"x = x.at[idx].set({name}(x[idx], v))")
    return NoDerivativeError(f"{_ufunc_name(ufunc)}.at", (
        f"{_ufunc_name(ufunc)}.at(x, idx, ...) writes into x in place, which wengert does not differentiate "
        f"(as np.put and np.copyto). Write the update as a new array: {spelling}, which works under every "
        "transform (x.at[idx].add accumulates repeated indices, as np.add.at does; for a plain x, "
        "wg.at(x)[idx] spells x.at[idx])."))


def _ufunc_name(ufunc):
    """``numpy.sin``, ``scipy.special.expit``: where the user's ufunc comes from."""
    name = ufunc.__name__
    if getattr(np, name, None) is ufunc:
        return f"numpy.{name}"
    special = sys.modules.get("scipy.special")
    if special is not None and getattr(special, name, None) is ufunc:
        return f"scipy.special.{name}"
    return f"the ufunc {name}"


def _no_rule_for(ufunc):
    name = _ufunc_name(ufunc)
    if name.startswith("scipy.special.") and "wengert.scipy.special" not in sys.modules:
        return NoDerivativeError(name, (
            f"{name} was called on a traced value, and wengert.scipy.special is not imported: its "
            f"functions carry derivative rules. Call wengert.scipy.special.{ufunc.__name__} (docs/scipy.md "
            "lists what it covers; once it is imported, scipy.special's own functions on traced values "
            "go to it too)."))
    return NoDerivativeError(name)


def _array_function(self, func, types, args, kwargs):
    fn = FUNCTIONS.get(func)
    if fn is None:
        raise NoDerivativeError(f"numpy.{getattr(func, '__module__', 'numpy')}.{func.__name__}".replace("numpy.numpy", "numpy"))
    return fn(*args, **kwargs)


def _operator(prim, reflected):
    """``self <op> other`` on a tracer (``other <op> self`` when ``reflected``: ``__radd__`` and the
    like): straight to bind (``self`` is traced, so Primitive's own test for tracers is already
    answered), after the primitive's rewrite hook if it has one. On a temporary ``self`` (nothing
    else references it: ``x * y + z``) of the four arithmetic ufuncs, the result may be written into
    its array, as NumPy's own operators do with temporaries (``reusable_operand``)."""
    position = 1 if reflected else 0
    elide = _TEMPORARY_REFS is not None and prim in (E.add, E.subtract, E.multiply, E.divide)

    def op(self, other):
        temporary = elide and _getrefcount(self) == _TEMPORARY_REFS
        args = (other, self) if reflected else (self, other)
        rewrite = prim.rewrite
        if rewrite is not None:
            out = rewrite(*args)
            if out is not None:
                return out
        if temporary:
            into = reusable_operand(prim, self, other, position)
            if into is not None:
                return bind(prim, args, {}, into)
        return bind(prim, args, {})
    return op


_getrefcount = sys.getrefcount


def _temporary_refs():
    """References to an operator method's ``self`` counted first thing in the method when the
    operand is a temporary (``f() + 1``: the caller's stack, the parameter, getrefcount's argument),
    or None when a named operand (``x + 1``) counts no more on this interpreter (then nothing tells
    them apart, and no result is written into an operand)."""
    class Probe:
        def __add__(self, other):
            return _getrefcount(self)

    named = Probe()
    temporary, held = Probe() + 1, named + 1
    return temporary if temporary < held else None


_TEMPORARY_REFS = _temporary_refs()


def _compare(op):
    fn = nondiff(op)  # nondiff: batched values (vmap) keep their batch axis
    return lambda self, other: fn(self, other)


def _shape(self):
    value = self.value
    t = type(value)
    shape = value.shape if t is Tracer or t is np.ndarray or isinstance(value, np.generic) else np.shape(value)
    hidden = self._trace.hidden_axes
    return shape[hidden:] if hidden else shape  # at a vmap level: one example's shape


# Python numbers from traced values (the rule: numpy/_conversions.py). Each is called by Python or
# NumPy directly, so the code that asked for the number is two frames up from check_number.
def _float(self):
    check_write(self, 1)
    value = concrete(self)
    check_number(self, "float", 1)
    return float(value)


def _complex(self):
    check_write(self, 1)
    value = concrete(self)
    check_number(self, "complex", 1)
    return complex(value)


def _int(self):
    value = concrete(self)
    check_number(self, "int", 1)
    return int(value)


def _item(self, *args):
    value = concrete(self)
    check_number(self, "item", 1)
    return value.item(*args) if hasattr(value, "item") else value


def _tolist(self):
    value = concrete(self)
    check_number(self, "tolist", 1)
    return value.tolist() if hasattr(value, "tolist") else value


def _scalar(self):
    value = concrete(self)
    return value[()] if type(value) is np.ndarray else value


def _round(self, ndigits=None):
    return round(_scalar(self), ndigits)


def _floor(self):
    return math.floor(_scalar(self))


def _ceil(self):
    return math.ceil(_scalar(self))


def _trunc(self):
    return math.trunc(_scalar(self))


def install(wnp):
    """Attach ndarray behaviour to Tracer, calling the functions of namespace ``wnp``."""
    T = Tracer
    T.shape = property(_shape)
    T.ndim = property(lambda self: len(self.shape))
    T.size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    T.dtype = property(lambda self: unbox(self).dtype if hasattr(unbox(self), "dtype") else np.asarray(unbox(self)).dtype)
    T.T = property(lambda self: wnp.transpose(self))
    T.mT = property(lambda self: wnp.swapaxes(self, -1, -2))
    T.real = property(lambda self: wnp.real(self))
    T.imag = property(lambda self: wnp.imag(self))

    for name, prim in (("add", E.add), ("sub", E.subtract), ("mul", E.multiply), ("truediv", E.divide),
                       ("pow", E.power), ("mod", E.remainder)):
        setattr(T, f"__{name}__", _operator(prim, False))
        setattr(T, f"__r{name}__", _operator(prim, True))
    T.__floordiv__ = _compare(operator.floordiv)
    T.__rfloordiv__ = lambda self, other: _compare(operator.floordiv)(other, self)
    def matmul_op(self, other):
        """``a @ b``: two traced operands of one or more dimensions go straight to the primitive
        (the hot operation of per-column loops); everything else through ``wnp.matmul``'s checks."""
        if type(other) is Tracer:
            va, vb = self.value, other.value
            if type(va) is np.ndarray and type(vb) is np.ndarray and not self._trace.hidden_axes \
                    and not other._trace.hidden_axes:
                na, nb = va.ndim, vb.ndim   # arrays of a tape: their ndim is the operands' own
                if na and nb and na <= 2 and nb <= 2:
                    out = _record_plain_product(C.matmul, self, other, va, vb)
                    if out is not None:
                        return out
                operands = na and nb
            else:
                operands = len(self.shape) and len(other.shape)
            if operands:
                return bind(C.matmul, (self, other), {}) if C.matmul.rewrite is None else C.matmul(self, other)
        return wnp.matmul(self, other)

    T.__matmul__ = matmul_op
    T.__rmatmul__ = lambda self, other: wnp.matmul(other, self)
    T.__neg__ = lambda self: E.negative(self)
    T.__pos__ = lambda self: self
    T.__abs__ = lambda self: E.absolute(self)
    for name in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(T, f"__{name}__", _compare(getattr(operator, name)))
    T.__hash__ = None

    T.__getitem__ = _getitem
    T.__setitem__ = setitem_method(clean_index, write)
    T.__len__ = _len
    T.__iter__ = _iter
    T.__float__ = _float
    T.__int__ = _int
    T.__complex__ = _complex
    T.__round__ = _round
    T.__floor__ = _floor
    T.__ceil__ = _ceil
    T.__trunc__ = _trunc
    # copy.copy / copy.deepcopy (a params dict holding tracers): a copy on the tape, the identity
    # for the gradient (copying the tracer's fields would copy its trace and cut the gradient off)
    T.__copy__ = lambda self: wnp.copy(self)
    T.__deepcopy__ = lambda self, memo: wnp.copy(self)
    T.__bool__ = lambda self: bool(concrete(self))
    T.__repr__ = _repr
    T.__array__ = _array
    T.__array_ufunc__ = _array_ufunc
    T.__array_function__ = _array_function

    T.sum = lambda self, axis=None, dtype=None, out=None, keepdims=False: wnp.sum(self, axis, dtype, out, keepdims)
    T.mean = lambda self, axis=None, dtype=None, out=None, keepdims=False: wnp.mean(self, axis, dtype, out, keepdims)
    T.prod = lambda self, axis=None, dtype=None, out=None, keepdims=False: wnp.prod(self, axis, dtype, out, keepdims)
    T.max = lambda self, axis=None, out=None, keepdims=False: wnp.max(self, axis, out, keepdims)
    T.min = lambda self, axis=None, out=None, keepdims=False: wnp.min(self, axis, out, keepdims)
    T.var = lambda self, axis=None, dtype=None, out=None, ddof=0, keepdims=False: wnp.var(self, axis, dtype, out, ddof, keepdims)
    T.std = lambda self, axis=None, dtype=None, out=None, ddof=0, keepdims=False: wnp.std(self, axis, dtype, out, ddof, keepdims)
    T.cumsum = lambda self, axis=None, dtype=None, out=None: wnp.cumsum(self, axis, dtype, out)
    T.cumprod = lambda self, axis=None, dtype=None, out=None: wnp.cumprod(self, axis, dtype, out)
    T.reshape = lambda self, *shape, order="C": wnp.reshape(
        self, shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape, order=order)
    T.transpose = lambda self, *axes: wnp.transpose(
        self, None if not axes else (axes[0] if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)) else axes))
    T.swapaxes = lambda self, axis1, axis2: wnp.swapaxes(self, axis1, axis2)
    T.dot = lambda self, b, out=None: wnp.dot(self, b, out)
    T.astype = lambda self, dtype, order="K", casting="unsafe", subok=True, copy=True: wnp.astype(self, dtype)
    T.clip = lambda self, min=None, max=None, out=None, **kw: wnp.clip(self, min, max, out, **kw)
    T.flatten = lambda self, order="C": wnp.ravel(self, order)
    T.ravel = lambda self, order="C": wnp.ravel(self, order)
    T.squeeze = lambda self, axis=None: wnp.squeeze(self, axis)
    T.repeat = lambda self, repeats, axis=None: wnp.repeat(self, repeats, axis)
    T.take = lambda self, indices, axis=None, out=None, mode=None: wnp.take(self, indices, axis, out, mode)
    T.diagonal = lambda self, offset=0, axis1=0, axis2=1: wnp.diagonal(self, offset, axis1, axis2)
    T.trace = lambda self, offset=0, axis1=0, axis2=1, dtype=None, out=None: wnp.trace(self, offset, axis1, axis2, dtype, out)
    T.copy = lambda self, order="C": wnp.copy(self)
    T.conj = T.conjugate = lambda self: wnp.conj(self)
    T.item = _item
    T.tolist = _tolist
    for name in ("any", "all", "argmax", "argmin", "argsort", "nonzero", "round"):
        setattr(T, name, _plain_method(name))


def _plain_method(name):
    def method(self, *args, **kwargs):
        return getattr(unbox(self), name)(*unbox_all(args), **{k: unbox_all(v) for k, v in kwargs.items()})
    method.__name__ = name
    return nondiff(method)

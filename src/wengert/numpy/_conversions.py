"""A traced value turned into a Python number or a plain array: what wengert says, and where.

The rule (docs/sharp-edges.md), for a value that an open ``grad``/``vjp``/``jvp`` differentiates:

* ``int()``, ``bool()``, ``round()``, ``math.floor/ceil/trunc``: piecewise constant, so the zero
  derivative the number carries is the right one. Silent.
* ``float()``, ``complex()``, ``.item()``, ``.tolist()``, ``math.*``: the number keeps the value
  and drops the gradient. Legitimate for logging and control flow, silently wrong when the number
  flows into the result, so a :class:`GradientDroppedWarning` names the line (shown once per line)
  and the explicit spelling, ``float(wg.stop_gradient(x))``, which does not warn.
* Writing a traced value into a plain NumPy array (``out[i] = v``; NumPy converts it with
  ``float()``), ``np.asarray``/``np.array`` of it, or a list holding it passed to a wengert function
  that NumPy would convert: never what the user meant, so :class:`TracerConversionError`, naming
  ``wg.Buffer`` (or ``wnp.array``).

A value of a closed trace (leaked) or of vmap alone converts silently: nothing is differentiated.
The line named is the first frame outside wengert, so a conversion inside a wengert function
called by the user names the user's call.
"""
from __future__ import annotations

import dis
import linecache
import sys
import warnings

import numpy as np

from ..core.errors import GradientDroppedWarning, TracerConversionError
from ..core.trace import Primitive, Tracer

_STORE_SUBSCR = dis.opmap["STORE_SUBSCR"]
_PRIMITIVE_CALL = Primitive.__call__.__code__

_DROPS = {"float": "float() (or a math.* function)", "complex": "complex()", "item": ".item()",
          "tolist": ".tolist()"}

BUFFER_ADVICE = ("Build the result with wg.Buffer (buf = wg.Buffer.zeros(shape); buf[i] = v; "
                 "out = buf.freeze()), x.at[i].set(v) or wnp.stack; write wg.stop_gradient(v) to store "
                 "the value alone on purpose.")


def differentiated(x):
    """Is ``x`` traced by an open transform that differentiates it (a tape or a forward level; not
    vmap's, and not jit's staging, which refuses Python numbers itself)?"""
    while type(x) is Tracer:
        trace = x._trace
        if trace.alive and not trace.hidden_axes and not trace.staged:
            return True
        x = x.value
    return False


def _ours(frame):
    name = frame.f_globals.get("__name__") or ""
    return name == "wengert" or name.startswith("wengert.")


def user_frame(frame):
    """The first frame, from ``frame`` outward, that is not wengert's own code."""
    while frame is not None and _ours(frame):
        frame = frame.f_back
    return frame


def where(frame):
    """``file:line: source`` of ``frame``, for messages."""
    if frame is None:
        return "an unknown line"
    source = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" + (f" ({source})" if source else "")


def _writes_an_element(frame):
    """Is ``frame`` executing ``a[i] = v`` (NumPy converting ``v`` for a plain array)?"""
    lasti = frame.f_lasti
    return 0 <= lasti < len(frame.f_code.co_code) and frame.f_code.co_code[lasti] == _STORE_SUBSCR


def check_write(x, depth):
    """Before NumPy turns ``x`` (a tracer) into a float or complex number, of any shape: raise if
    it does so to write ``x`` into a plain array (``a[i] = x``) and an open transform differentiates
    ``x``. Checked before anything else reads the value, so the error is the same for every shape
    and under jit. NumPy reports the error as its ``ValueError: setting an array element with a
    sequence``; the transform running the function raises it in its place (``core.errors.run_user``).
    ``depth``: frames between this call and the code that asked for the number."""
    caller = sys._getframe(depth + 1)
    if _writes_an_element(caller) and differentiated(x):
        shape = f"a traced value of shape {x.shape}" if x.shape else "a traced value"
        raise TracerConversionError(
            f"{shape} is written into a plain NumPy array at {where(user_frame(caller))}: the array "
            "keeps the number, not its gradient, so the gradient through it would be silently zero. "
            + BUFFER_ADVICE)


def check_number(x, how, depth):
    """Before ``x`` (a tracer) becomes a Python number ``how`` ("float", "int", ...): warn where the
    gradient is dropped. ``depth``: frames between this call and the code that asked for the number."""
    if how not in _DROPS or not differentiated(x):
        return   # int(), bool(), round(): piecewise constant, so the zero derivative is right
    caller = sys._getframe(depth + 1)
    frame = user_frame(caller)
    message = (
        f"{_DROPS[how]} of a traced value gives a Python number without its gradient: "
        "if the number flows into the result, the gradient through it is silently lost. Keep the "
        "computation in wengert.numpy (wnp.sin, not math.sin; x, not float(x)) to keep the gradient, "
        f"or write {'float' if how == 'float' else how}(wg.stop_gradient(x)) for a number you want on "
        "purpose (logging, control flow), which does not warn.")
    if frame is None:
        warnings.warn(message, GradientDroppedWarning, stacklevel=depth + 2)
        return
    registry = frame.f_globals.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, GradientDroppedWarning, frame.f_code.co_filename, frame.f_lineno,
                           module=frame.f_globals.get("__name__"), registry=registry,
                           module_globals=frame.f_globals)


# np.r_[...] and np.c_[...] turn each piece into a plain array with np.array, which no protocol
# routes to wengert (it must return an ndarray); wnp.r_ and wnp.c_ are the same objects for traced pieces
_CONCATENATOR_ITEM = type(np.r_).__getitem__.__code__


def array_refusal(depth):
    """The error for NumPy converting a traced value into a plain array (``__array__``)."""
    caller = sys._getframe(depth + 1)
    if caller.f_code is _CONCATENATOR_ITEM:
        name = "c_" if isinstance(caller.f_locals.get("self"), type(np.c_)) else "r_"
        return TracerConversionError(
            f"np.{name}[...] was given a traced value at {where(user_frame(caller.f_back))}: NumPy turns each "
            f"piece into a plain array (np.array), which drops its gradient. Write wnp.{name}[...] "
            f"(wengert.numpy's {name}, the same syntax), which keeps it.")
    if caller.f_code is _PRIMITIVE_CALL:
        name = caller.f_locals["self"].name
        return TracerConversionError(
            f"wengert.numpy.{name} was given a list or tuple holding traced values at "
            f"{where(user_frame(caller))}: NumPy would turn it into a plain array and drop their gradient. "
            f"Make it one traced array first: wnp.{name}(wnp.array([...])) (or wnp.stack).")
    frame = user_frame(caller)
    if frame is caller and _writes_an_element(caller):
        return TracerConversionError(
            f"a traced value is written into a plain NumPy array at {where(frame)}: the array keeps the "
            "values, not their gradient. " + BUFFER_ADVICE)
    return TracerConversionError(
        f"a traced value is converted into a plain NumPy array at {where(frame)} (np.asarray, np.array, "
        "or a NumPy function wengert.numpy does not wrap), which would silently drop its gradient. Use "
        "wengert.numpy to build arrays from traced values (wnp.asarray, wnp.array, wnp.stack, "
        "wnp.concatenate) or wg.Buffer to fill one element by element; wg.stop_gradient(x) gives the "
        "value alone on purpose.")

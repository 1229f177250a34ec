"""Array namespaces: the library whose functions make the arrays wengert itself creates.

Implementations compute with NumPy's functions, and NumPy's dispatch protocols
(``__array_ufunc__``, ``__array_function__``) hand a Dask or CuPy operand to that library. Where
wengert *creates* an array (zeros for cotangent accumulation and unused inputs, the ones of a seed,
a scatter-add, a copy) the operands' namespace makes it, through array-api-compat's
``array_namespace``, so a Dask array's gradient stays a lazy Dask array and a CuPy array's stays on
its device (docs/backends.md).

NumPy is the fast path: every helper tests ``type(x) is np.ndarray`` (or a scalar) first and asks
for a namespace only for other arrays. array-api-compat is needed only then; without it the error
names the extra to install.
"""
from __future__ import annotations

import numpy as np

from .errors import BackendError

try:   # optional: only non-NumPy arrays need it (pip install 'wengert[dask]' or 'wengert[cupy]')
    import array_api_compat
except ImportError:   # pragma: no cover - exercised where the extra is not installed
    array_api_compat = None

_ndarray = np.ndarray
_PLAIN = (np.generic, int, float, complex, bool)
_LIBRARIES = ("dask", "cupy")   # arrays NumPy's dispatch routes, which may lack __array_namespace__


def is_foreign(x):
    """Is ``x`` an array of another library (Dask, CuPy, an array-API namespace), not NumPy's?"""
    t = type(x)
    if t is _ndarray or x is None or isinstance(x, _PLAIN):
        return False
    return hasattr(t, "__array_namespace__") or t.__module__.partition(".")[0] in _LIBRARIES


def namespace(*xs):
    """The array namespace of the non-NumPy arrays among ``xs``; NumPy when there are none."""
    others = [x for x in xs if is_foreign(x)]
    if not others:
        return np
    if array_api_compat is None:
        raise BackendError(
            f"wengert needs array-api-compat to differentiate {type(others[0]).__module__}."
            f"{type(others[0]).__name__} arrays: install it with pip install 'wengert[dask]' "
            "(or 'wengert[cupy]')")
    return array_api_compat.array_namespace(*others)


def library(x):
    """A readable name for ``x``'s array library (for error messages): 'dask', 'cupy', ..."""
    return type(x).__module__.partition(".")[0]


def device(x):
    return array_api_compat.device(x)


def dtype_in(xp, dtype):
    """``dtype`` (a NumPy dtype or one of ``xp``'s) as ``xp`` names it."""
    if xp is np or isinstance(dtype, np.dtype) and _numpy_dtypes(xp):
        return dtype
    if isinstance(dtype, (np.dtype, type)):
        return getattr(xp, np.dtype(dtype).name)
    return dtype


def _numpy_dtypes(xp):
    """Does ``xp`` use NumPy's dtype objects (Dask, CuPy) rather than its own (array-api-strict)?"""
    return isinstance(xp.float64, (np.dtype, type)) and np.dtype(xp.float64) == np.float64


def result_type(*xs):
    """NumPy's ``result_type`` for NumPy values, the operands' namespace's for others."""
    xp = namespace(*xs)
    if xp is np:
        return np.result_type(*xs)
    return xp.result_type(*[x if is_foreign(x) or not isinstance(x, np.dtype) else dtype_in(xp, x)
                            for x in xs])


def zeros(shape, dtype, like):
    """Zeros of ``shape`` in ``like``'s namespace and on its device (NumPy's when ``like`` is)."""
    if not is_foreign(like):
        return np.zeros(shape, dtype)
    xp = namespace(like)
    return xp.zeros(shape, dtype=dtype_in(xp, dtype), device=device(like))


def ones(shape, dtype, like):
    """Ones of ``shape`` in ``like``'s namespace (a gradient's seed)."""
    if not is_foreign(like):
        return np.ones(shape, dtype)
    xp = namespace(like)
    return xp.ones(shape, dtype=dtype_in(xp, dtype), device=device(like))


def zeros_like(x):
    if not is_foreign(x):
        return np.zeros_like(x)
    return namespace(x).zeros_like(x)


def copy(x, dtype=None):
    """A copy of ``x`` that the caller owns (in ``dtype`` when given), in ``x``'s namespace."""
    if not is_foreign(x):
        return np.array(x, dtype=dtype, copy=True)
    xp = namespace(x)
    out = xp.asarray(x, copy=True)
    return out if dtype is None or out.dtype == dtype_in(xp, dtype) else xp.astype(out, dtype_in(xp, dtype))


def is_inexact(dtype):
    """Floating point or complex, for NumPy's dtypes and an array-API namespace's."""
    if isinstance(dtype, (np.dtype, type)):
        return np.issubdtype(dtype, np.inexact)
    return array_api_compat is not None and any(
        _isdtype(dtype, kind) for kind in ("real floating", "complex floating"))


def is_real_floating(dtype):
    if isinstance(dtype, (np.dtype, type)):
        return np.issubdtype(dtype, np.floating)
    return array_api_compat is not None and _isdtype(dtype, "real floating")


def _isdtype(dtype, kind):
    # array-api-strict's dtypes know their namespace only through an array; compare by name
    name = str(dtype).rpartition(".")[2]
    return (kind == "real floating" and name in ("float16", "float32", "float64")) or \
           (kind == "complex floating" and name in ("complex64", "complex128"))


def scatter_add(buffer, index, values, what="an indexed read"):
    """``buffer[index] += values`` adding repeated positions (``np.add.at``), in place.

    NumPy and CuPy have it (CuPy through ``__array_ufunc__``'s ``at``); a lazy library (Dask) or a
    strict array-API namespace has no scatter-add, so the gradient of an integer-array index is
    refused there with what to do instead (never computed eagerly or turned into NumPy).
    """
    if type(buffer) is _ndarray or library(buffer) == "cupy":
        np.add.at(buffer, index, values)
        return
    raise BackendError(
        f"the gradient of {what} with an integer-array or boolean index needs a scatter-add "
        f"(np.add.at), which {library(buffer)} arrays do not provide lazily; index with slices and "
        "integers instead (or use wnp.take_along_axis / a one-hot matmul), or compute the array "
        "to NumPy first if it fits in memory")


def like(value, reference):
    """NumPy ``value`` (a random direction, a perturbed copy) as an array of ``reference``'s library,
    on its device; ``value`` itself when ``reference`` is NumPy's."""
    if not is_foreign(reference):
        return value
    return namespace(reference).asarray(value, device=device(reference))


def to_numpy(x):
    """``x``'s values as a NumPy array, computed (Dask) or copied from the device (CuPy): for
    checks that compare numbers, never inside a transform."""
    if not is_foreign(x):
        return np.asarray(x)
    if library(x) == "cupy":
        return x.get()
    if library(x) == "dask":
        return np.asarray(x.compute())
    return np.asarray(x)   # an array-API array on the CPU


def is_complex(dtype):
    return is_inexact(dtype) and not is_real_floating(dtype)

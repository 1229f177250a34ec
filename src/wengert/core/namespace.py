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

import contextlib
import re
import sys
import threading
import warnings

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
    if isinstance(dtype, np.dtype):
        return dtype.kind in "fc"   # np.issubdtype costs a microsecond: this is every grad call
    if isinstance(dtype, type):
        return np.issubdtype(dtype, np.inexact)
    return array_api_compat is not None and any(
        _isdtype(dtype, kind) for kind in ("real floating", "complex floating"))


def is_real_floating(dtype):
    if isinstance(dtype, np.dtype):
        return dtype.kind == "f"
    if isinstance(dtype, type):
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


# Dask answers a NumPy function it does not implement by computing its operands into NumPy and
# calling NumPy (with this FutureWarning): a silent, eager conversion, the one thing a lazy
# gradient must not do. Under a transform of Dask arrays the warning is an error, reported as a
# BackendError that names the function.
_DASK_FALLBACK = re.compile(r"The `(.*)` function is not implemented by Dask array")


def dask_module(x, name="dask.array"):
    """An already-imported Dask module, for the few functions whose NumPy dispatch Dask gets wrong
    (its cholesky returns the upper factor): ``x`` is a Dask array, so Dask is loaded."""
    return sys.modules[name]


def involves_dask(values):
    for v in values:
        if type(v) is not _ndarray and is_foreign(v) and library(v) == "dask":
            return True
    return False


_NO_GUARD = contextlib.nullcontext()


def dask_guard(values):
    """``refusing_eager_fallbacks(values)`` where ``values`` hold a Dask array; else a shared
    do-nothing context (NumPy's path: one scan of the arguments, no generator)."""
    return refusing_eager_fallbacks(values) if involves_dask(values) else _NO_GUARD


_HINTS = threading.local()   # .chunks: {axis length: the Dask inputs' chunks along such an axis}


@contextlib.contextmanager
def refusing_eager_fallbacks(values):
    """Inside: NumPy functions Dask lacks raise a BackendError instead of computing into NumPy, and
    broadcasts are chunked like the Dask inputs among ``values`` (``broadcast_to``).

    Only when ``values`` hold a Dask array (NumPy's path pays one scan of them); warnings filters
    are process-wide, so this is not thread-safe among concurrent transforms of Dask arrays.
    """
    if not involves_dask(values):
        yield
        return
    saved = getattr(_HINTS, "chunks", None)
    hints = dict(saved or {})
    for v in values:
        if is_foreign(v) and library(v) == "dask":
            for n, c in zip(v.shape, v.chunks):
                hints.setdefault(n, c)
    _HINTS.chunks = hints
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=_DASK_FALLBACK.pattern, category=FutureWarning)
            try:
                yield
            except FutureWarning as w:
                found = _DASK_FALLBACK.search(str(w))
                if found is None:
                    raise
                raise BackendError(
                    f"{found.group(1)} has no lazy implementation in Dask: on a Dask array it would "
                    "compute the whole array into NumPy. Compute the array first (x.compute()) if it "
                    "fits in memory, or apply the function per block (dask.array.map_blocks) outside "
                    "the differentiated code") from None
    finally:
        _HINTS.chunks = saved


def refuse_data_dependent(name, values):
    """A function whose result's shape depends on the values (unique, set operations), refused on
    a lazy Dask array, whose shapes must be known before anything is computed."""
    for v in values:
        while hasattr(v, "_trace"):   # a tracer: its plain value
            v = v.value
        if is_foreign(v) and library(v) == "dask":
            raise BackendError(
                f"{name} of a Dask array: its result's shape depends on the values, which a lazy "
                "Dask graph cannot know, and its gradient would need a scatter-add Dask lacks. "
                "Compute the array first (x.compute()) and call it on NumPy values")


BROADCAST_CHUNK_BYTES = 8 << 20


def broadcast_to(x, shape):
    """``x`` broadcast to ``shape`` in its namespace. A Dask array is chunked, along the axes the
    broadcast adds or stretches, like the transform's Dask inputs along axes of that length (a
    mean's seed broadcast over the rows gets the rows' chunks), else in chunks of at most
    ``BROADCAST_CHUNK_BYTES``. Not one chunk of the whole shape: the next elementwise rule would
    materialize it whole (80 MB for a mean over twenty million float32 rows), and chunks that do
    not line up with the data's make Dask rechunk both (docs/backends.md)."""
    if library(x) != "dask":
        return namespace(x).broadcast_to(x, shape)
    if any(n != n for n in tuple(shape) + tuple(x.shape)):   # nan: Dask's unknown length
        raise BackendError(
            "a Dask array whose shape depends on its values (x[mask] with a boolean mask, nonzero, "
            "...) reached a gradient rule: its length is unknown until computed, and its gradient "
            "would need a scatter-add Dask lacks. Use wnp.where(mask, x, 0) instead of x[mask], or "
            "compute the array first")
    da = dask_module(x)
    hints = getattr(_HINTS, "chunks", None) or {}
    lead = len(shape) - x.ndim
    spec = tuple(hints.get(n, "auto") if i < lead or (x.shape[i - lead] == 1 and n != 1) else x.chunks[i - lead]
                 for i, n in enumerate(shape))
    chunks = da.core.normalize_chunks(spec, shape, limit=BROADCAST_CHUNK_BYTES, dtype=x.dtype)
    return da.broadcast_to(x, shape, chunks=chunks)

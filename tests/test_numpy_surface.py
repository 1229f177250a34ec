"""The sweep: every public function of NumPy (numpy, numpy.linalg, numpy.fft) is accounted for.

A function is differentiable in ``wengert.numpy`` (with a row in tests/test_numpy_grads.py), or
declared without a derivative (it reads traced values and passes plain values through), or takes no
array values at all (shapes, dtypes, files, settings), or is on the short list of refusals below,
each with its reason. A NumPy release that adds a function fails this test until it is placed.
"""
from __future__ import annotations

import types

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.numpy._methods import FUNCTIONS, UFUNCS

# Functions whose arguments are not array values: nothing in them can be differentiated, and
# wengert.numpy re-exports NumPy's own (a traced value given to one raises np.asarray's TypeError,
# or is read for its shape).
NO_ARRAY_VALUES = {
    # arrays from shapes, counts and ranges
    "arange", "empty", "eye", "identity", "ones", "zeros", "tri", "indices", "diag_indices",
    "tril_indices", "triu_indices", "mask_indices", "fromfunction", "bartlett", "blackman", "hamming",
    "hanning", "fft.fftfreq", "fft.rfftfreq",
    # files, buffers, iterators, strings
    "load", "loadtxt", "genfromtxt", "fromfile", "frombuffer", "fromstring", "fromregex", "fromiter",
    "save", "savetxt", "savez", "savez_compressed", "from_dlpack", "base_repr", "binary_repr",
    # dtypes, settings, introspection
    "can_cast", "promote_types", "min_scalar_type", "mintypecode", "issubdtype", "isdtype", "typename",
    "get_include", "show_config", "show_runtime", "test", "info", "getbufsize", "setbufsize", "geterr",
    "seterr", "geterrcall", "seterrcall", "get_printoptions", "set_printoptions", "printoptions",
    "iterable", "nested_iters", "broadcast_shapes", "frompyfunc", "linalg.test", "fft.test",
    # dates
    "busday_count", "busday_offset", "is_busday", "datetime_as_string", "datetime_data",
}

# Refused: they take array values and have no derivative rule; on traced values they raise
# NoDerivativeError naming the function.
REFUSED = {
    # np.matrix is a subclass with its own operator meanings; wengert traces ndarrays only
    "asmatrix": "np.matrix is not traced; use 2-D arrays",
    "bmat": "np.matrix is not traced; use wnp.block",
    # they write into their first argument in place. wengert's in-place writes (x[idx] = v) work under
    # one transform only (refused under grad of grad, a loop under vmap), so these would be partial
    # versions of themselves: the refusal names them, and x.at[idx].set(v) (a new array, every
    # transform) or x[idx] = v (docs/architecture.md, "Mutation") spell the same write
    "copyto": "in-place write", "place": "in-place write", "put": "in-place write",
    "putmask": "in-place write", "fill_diagonal": "in-place write", "put_along_axis": "in-place write",
}


def _public_functions(module, prefix):
    for name in dir(module):
        obj = getattr(module, name)
        if name.startswith("_") or isinstance(obj, (type, types.ModuleType)) or not callable(obj):
            continue
        yield prefix + name, obj


def _all_numpy_functions():
    yield from _public_functions(np, "")
    yield from _public_functions(np.linalg, "linalg.")
    yield from _public_functions(np.fft, "fft.")


def _wengert_version(qualified):
    module = wnp
    *parents, name = qualified.split(".")
    for p in parents:
        module = getattr(module, p)
    return getattr(module, name, None)


def _placement(qualified, np_fn):
    mine = _wengert_version(qualified)
    if mine is not None and mine is not np_fn:
        return "nondiff" if getattr(mine, "nondiff", False) else "differentiable"
    if qualified in NO_ARRAY_VALUES:
        return "no array values"
    if qualified in REFUSED:
        return "refused"
    return None


def test_every_numpy_function_is_placed():
    unplaced = sorted(q for q, fn in _all_numpy_functions() if _placement(q, fn) is None)
    assert not unplaced, (f"NumPy functions neither differentiable in wengert.numpy, nor declared without a "
                          f"derivative, nor listed in this file with a reason: {unplaced}")


def test_the_lists_are_current():
    """An entry names a NumPy function that exists and that wengert.numpy does not implement."""
    functions = dict(_all_numpy_functions())
    for qualified in sorted(NO_ARRAY_VALUES | set(REFUSED)):
        if qualified not in functions:
            continue  # a NumPy without it (older or newer); the sweep only places what exists
        mine = _wengert_version(qualified)
        assert mine is None or mine is functions[qualified], f"{qualified} is implemented: remove it from the list"
    assert len(REFUSED) <= 25, "the refusals should stay few, each argued"


def test_numpy_reaches_each_differentiable_function_through_its_protocols():
    """``np.name(tracer)`` dispatches to wengert's version (``__array_function__`` / ``__array_ufunc__``)."""
    missing = []
    for qualified, np_fn in _all_numpy_functions():
        if _placement(qualified, np_fn) != "differentiable":
            continue
        table = UFUNCS if isinstance(np_fn, np.ufunc) else FUNCTIONS
        reached = table.get(np_fn)
        if reached is None or getattr(reached, "nondiff", False):
            missing.append(qualified)
    assert not missing, f"NumPy's own call does not reach wengert's version: {missing}"


@pytest.mark.parametrize("qualified, call", [
    ("fill_diagonal", lambda x: np.fill_diagonal(x.reshape(2, 2), 1.0) or x),
    ("put", lambda x: np.put(x, [0], x[1:2]) or x),
])
def test_a_refused_function_names_itself(qualified, call):
    with pytest.raises(wg.NoDerivativeError, match=qualified):
        wg.grad(lambda x: wnp.sum(call(x)))(np.array([1.0, -3.0, 2.0, 0.5]))


# The methods of a differentiable binary ufunc (np.add.reduceat(x, idx), np.hypot.accumulate(x), ...):
# each works on traced values, except these, refused with the reason
REFUSED_UFUNC_METHODS = {
    # it writes into its first argument in place, as np.put does (refused above for the same reason);
    # the refusal names x.at[idx].add(v), JAX's functional spelling, which works under every transform
    "at": "in-place write",
}
_UFUNC_METHOD_CALLS = {
    "reduce": lambda u, x: u.reduce(x, axis=1), "accumulate": lambda u, x: u.accumulate(x, axis=0),
    "reduceat": lambda u, x: u.reduceat(x, [0, 2, 2], axis=1), "outer": lambda u, x: u.outer(x[0], x[1]),
    "at": lambda u, x: u.at(x, [0, 0], x[1]),
}


def _fold(u, items):
    out = items[0]
    for item in items[1:]:
        out = u(out, item)
    return out


# the documented meaning of each call above, spelled with the ufunc's plain calls: NumPy 2.4's own
# reduce of a contiguous axis gives x[0] op x[-1] for power and arctan2, not the left fold its
# documentation describes, so the fold is the reference
_UFUNC_METHOD_MEANINGS = {
    "reduce": lambda u, x: _fold(u, list(x.T)),
    "accumulate": lambda u, x: np.stack([_fold(u, list(x[:k + 1])) for k in range(len(x))]),
    "reduceat": lambda u, x: np.stack([_fold(u, list(x[:, :2].T)), x[:, 2], _fold(u, list(x[:, 2:].T))], axis=1),
    "outer": lambda u, x: u(x[0][:, None], x[1]),
}


def _differentiable_binary_ufuncs():
    for qualified, fn in _all_numpy_functions():
        if (isinstance(fn, np.ufunc) and fn.nin == 2 and fn.nout == 1 and fn.signature is None
                and _placement(qualified, fn) == "differentiable"):
            yield qualified, fn


@pytest.mark.parametrize("method", sorted(_UFUNC_METHOD_CALLS))
def test_every_method_of_a_differentiable_ufunc_is_placed(method):
    x = np.random.default_rng(3).uniform(0.5, 2.0, (3, 4))
    call = _UFUNC_METHOD_CALLS[method]
    checked = []
    for qualified, u in _differentiable_binary_ufuncs():
        try:
            call(u, x.copy())
        except TypeError:
            continue   # NumPy has no such loop for floats (ldexp's integer exponent, ...)
        if method in REFUSED_UFUNC_METHODS:
            with pytest.raises(wg.NoDerivativeError, match=rf"numpy\.{u.__name__}\.{method}"):
                wg.vjp(lambda v: call(u, v), x)
            continue
        out, _ = wg.vjp(lambda v: call(u, v), x)
        np.testing.assert_allclose(out, _UFUNC_METHOD_MEANINGS[method](u, x), rtol=1e-12,
                                   err_msg=f"{qualified}.{method}")
        checked.append(qualified)
    assert method in REFUSED_UFUNC_METHODS or len(checked) >= 15

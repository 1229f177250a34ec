"""The engine on array-api-strict arrays: any NumPy call that leaks into it fails.

The arrays live on array-api-strict's second device ("device1"), which refuses every conversion to
NumPy (``__array__``, the buffer protocol), so a ``np.zeros`` mixed in, an ``np.asarray`` or a
NumPy function applied to them raises instead of quietly computing on NumPy.

What runs through the namespace here: the tape, cotangent accumulation (a second contribution is
added with the array's own ``+``), zeros of unused inputs and of indexed reads, the ones of the
seed, ``unbroadcast`` (the table's ``sum`` and ``reshape``), ``broadcast_to``, ``transpose``,
``getitem`` and its indexed cotangent, and the gradient's final cast and broadcast. Elementwise
arithmetic and most other implementations are NumPy's own functions, which reach Dask and CuPy
arrays through NumPy's dispatch protocols but not array-API arrays (docs/backends.md), so this
test declares its few elementwise primitives with implementations written for the namespace,
as a user would add one (docs/architecture.md, "Adding a primitive").
"""
from __future__ import annotations

import numpy as np
import pytest

import wengert as wg
from wengert.core.namespace import namespace
from wengert.primitives._batching import elementwise_rule
from wengert.primitives._table import PRIMITIVES, defprim, defunary, unbroadcast
from wengert.primitives.reductions import sum_
from wengert.primitives.shape import broadcast_to, getitem, reshape, transpose

xs = pytest.importorskip("array_api_strict", reason="array-api-strict is not installed (the test extra has it)")
pytest.importorskip("array_api_compat", reason="array-api-compat is not installed (the test extra has it)")

DEVICE = xs.Device("device1")   # no conversion to NumPy from here


def _mul(x, y):
    return x * y


def _add(x, y):
    return x + y


def _xp_sin(x):
    return namespace(x).sin(x)


def _xp_cos(x):
    return namespace(x).cos(x)


def _declare():
    """The test's elementwise primitives, declared as in docs/architecture.md's "Adding a primitive"."""
    global strict_mul, strict_add, strict_sin, strict_cos
    strict_mul = defprim(
        _mul, (lambda g, ans, x, y: unbroadcast(strict_mul(g, y), x.shape),
               lambda g, ans, x, y: unbroadcast(strict_mul(g, x), y.shape)),
        name="strict_test.multiply",
        jvp=(lambda t, ans, x, y: strict_mul(t, y), lambda t, ans, x, y: strict_mul(x, t)),
        batch=elementwise_rule, batched_vjp=True)
    strict_add = defprim(
        _add, (lambda g, ans, x, y: unbroadcast(g, x.shape), lambda g, ans, x, y: unbroadcast(g, y.shape)),
        name="strict_test.add", jvp=(lambda t, ans, x, y: t, lambda t, ans, x, y: t),
        batch=elementwise_rule, batched_vjp=True)
    strict_cos = defunary(_xp_cos, lambda g, ans, x: strict_mul(g, strict_mul(strict_sin(x), -1.0)),
                          name="strict_test.cos")
    strict_sin = defunary(_xp_sin, lambda g, ans, x: strict_mul(g, strict_cos(x)), name="strict_test.sin")
    return strict_mul, strict_add, strict_sin, strict_cos


strict_mul = strict_add = strict_sin = strict_cos = None


# In the table while this module's tests run, out after them (the rest of the suite, e.g.
# benchmarks/op_overhead.py's coverage check, sees the library's table only).
@pytest.fixture(scope="module", autouse=True)
def declared():
    prims = _declare()
    yield prims
    for prim in prims:
        del PRIMITIVES[prim.name]


def _strict(a):
    return xs.asarray(np.asarray(a, dtype=np.float64), device=DEVICE)


def _numpy(a):
    return np.asarray(a.to_device(xs.Device("CPU_DEVICE")))


X = np.linspace(0.1, 1.2, 12).reshape(3, 4)
ROW = np.linspace(-1.0, 1.0, 4)


def test_a_numpy_call_on_these_arrays_fails():
    """The premise: NumPy cannot read a device1 array, so a leak into NumPy would raise."""
    with pytest.raises((RuntimeError, TypeError)):
        np.sin(_strict(X))
    with pytest.raises((RuntimeError, TypeError)):
        np.zeros(3) + _strict(np.ones(3))


def _loss(x, row, unused):
    """Broadcasting (unbroadcast), two contributions to x (accumulation), indexed reads (zeros in
    the namespace plus a slice write), a transpose and a reshape."""
    y = strict_mul(strict_sin(x), row)                      # row broadcast along x's rows
    y = strict_mul(y, x)                                    # x read twice: two contributions
    head = getitem(x, index=(slice(1, None), 2))            # an indexed read of x
    t = reshape(transpose(y), shape=(12,))
    return strict_add(strict_add(sum_(t), sum_(strict_mul(head, head))), sum_(broadcast_to(row, shape=(2, 4))))


def test_gradient_through_the_engine_stays_in_the_namespace():
    x, row, unused = _strict(X), _strict(ROW), _strict(np.ones((2, 2)))
    gx, grow, gunused = wg.grad(_loss, argnums=(0, 1, 2))(x, row, unused)
    for g in (gx, grow, gunused):
        assert type(g) is type(x) and g.device == DEVICE
    # the same derivative written out with NumPy
    want_x = (np.cos(X) * X + np.sin(X)) * ROW
    want_x[1:, 2] += 2 * X[1:, 2]
    want_row = (np.sin(X) * X).sum(axis=0) + 2
    np.testing.assert_allclose(_numpy(gx), want_x, rtol=1e-12)
    np.testing.assert_allclose(_numpy(grow), want_row, rtol=1e-12)
    np.testing.assert_array_equal(_numpy(gunused), np.zeros((2, 2)))


def test_value_vjp_and_second_order_stay_in_the_namespace():
    x, row = _strict(X), _strict(ROW)
    value, g = wg.value_and_grad(lambda x: sum_(strict_mul(strict_sin(x), row)))(x)
    assert type(value) is type(x) and type(g) is type(x)
    np.testing.assert_allclose(_numpy(value), (np.sin(X) * ROW).sum(), rtol=1e-12)
    out, vjp_fn = wg.vjp(lambda x: strict_mul(strict_sin(x), row), x)
    (gx,) = vjp_fn(_strict(np.ones((3, 4))))
    np.testing.assert_allclose(_numpy(gx), np.cos(X) * ROW, rtol=1e-12)
    # the gradient of a gradient: the inner backward pass recorded by the outer trace
    gg = wg.grad(lambda x: sum_(wg.grad(lambda x: sum_(strict_sin(x)))(x)))(x)
    assert type(gg) is type(x)
    np.testing.assert_allclose(_numpy(gg), -np.sin(X), rtol=1e-12)


def test_check_grads_on_strict_arrays():
    """Finite differences in float64, the random weights made in the namespace. First order, reverse
    mode: forward mode and order 2 add tangents and traced cotangents with the ``add`` primitive,
    which is NumPy's ufunc (NumPy dispatch, which array-API arrays lack: docs/backends.md)."""
    x = xs.asarray(X)    # the CPU device: check_grads reads the values back to compare numbers
    wg.check_grads(lambda x: sum_(strict_mul(strict_sin(x), x)), (x,), modes=("rev",))

"""The same gradients on other array libraries: Dask (lazy, chunked) and CuPy (GPU).

Every test here is parametrized over the backends. Each runs where its library imports (and, for
CuPy, where a GPU is present); elsewhere it is skipped with the reason, which pytest's summary
prints (``-rs``). Values are compared with the same function's gradient on NumPy arrays, which
tests/test_numpy_grads.py checks against finite differences; ``check_grads`` runs on the backend's
own arrays too (its random directions are made in their namespace).
"""
from __future__ import annotations

import contextlib
import importlib

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.core import namespace


def _cupy_or_reason():
    try:
        cupy = importlib.import_module("cupy")
    except ImportError as e:
        return None, f"CuPy is not installed ({e}); the CuPy backend tests need cupy and a GPU"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:   # CUDA runtime errors vary by driver: any of them means no usable GPU
        return None, f"CuPy imports but no GPU is usable ({type(e).__name__}: {e})"
    if count == 0:
        return None, "CuPy imports but no GPU is present"
    return cupy, None


class Dask:
    name = "dask"

    def __init__(self):
        self.da = pytest.importorskip("dask.array", reason="dask[array] is not installed (pip install 'wengert[dask]')")
        import dask
        self.dask = dask
        self.array_type = self.da.Array

    def put(self, x):
        x = np.asarray(x)
        return self.da.from_array(x, chunks=tuple(max(1, (n + 1) // 2) for n in x.shape))

    def get(self, x):
        return np.asarray(x.compute())

    def lazily(self):
        """Inside: any computation raises (a gradient must stay a graph until asked for)."""
        def forbid(*args, **kwargs):
            raise AssertionError("a Dask graph was computed during the transform")
        return self.dask.config.set(scheduler=forbid)


class CuPy:
    name = "cupy"

    def __init__(self):
        cupy, reason = _cupy_or_reason()
        if cupy is None:
            pytest.skip(reason)
        self.cp = cupy
        self.array_type = cupy.ndarray

    def put(self, x):
        return self.cp.asarray(x)

    def get(self, x):
        return self.cp.asnumpy(x)

    def lazily(self):
        return contextlib.nullcontext()


@pytest.fixture(params=[Dask, CuPy], ids=lambda b: b.name)
def backend(request):
    return request.param()


RNG = np.random.default_rng(0)
X = RNG.uniform(0.2, 1.0, (6, 4))
A = RNG.standard_normal((4, 3)) / 2
Y = (X @ np.ones(4) > 2.4).astype(np.float64)
W = np.full(4, 0.1)

# name -> (function of x and the constant a, which is a backend array too)
CASES = {
    "elementwise": lambda x, a: wnp.sum(wnp.sin(x) * wnp.exp(-x) + wnp.sqrt(x) / (1 + x ** 2)),
    "broadcast": lambda x, a: wnp.sum(x * x[0] - x[:, :1]),
    "reductions": lambda x, a: wnp.sum(wnp.max(x, axis=0)) + wnp.mean(x) + wnp.var(x, axis=1).sum()
    + wnp.prod(x[:2], axis=1).sum(),
    "matmul": lambda x, a: wnp.sum(wnp.tanh(x @ a)),
    "dot": lambda x, a: wnp.sum(wnp.dot(x, a) ** 2),
    "einsum": lambda x, a: wnp.einsum("ij,jk,ik->", x, a, x[:, :3]),
    "transpose": lambda x, a: wnp.sum((x.T @ x) ** 2),
    "indexing": lambda x, a: wnp.sum(x[1:, ::2] ** 2) + wnp.sum(x[:, 1] * x[0, 1]) + x[2, 3],
    "concatenate_stack": lambda x, a: wnp.sum(wnp.concatenate([x, 2 * x], axis=1) ** 2)
    + wnp.sum(wnp.stack([x, x ** 2])[1]),
    "where_clip": lambda x, a: wnp.sum(wnp.where(x > 0.5, x ** 2, wnp.log(x))) + wnp.sum(wnp.clip(x, 0.3, 0.8) ** 2),
    "softmax_logsumexp": lambda x, a: wnp.sum(wg.nn.softmax(x, axis=1)[:, 0])
    + wnp.sum(wg.nn.logsumexp(x @ a, axis=0)),
    "linalg": lambda x, a: wnp.sum(wnp.linalg.cholesky(x.T @ x + 4 * np.eye(4))[:, :2])
    + wnp.sum(wnp.linalg.inv(x.T @ x + np.eye(4))) + wnp.sum(wnp.linalg.solve(x.T @ x + np.eye(4), a)),
    "reshape": lambda x, a: wnp.sum(wnp.reshape(x, (3, 2, 4)).sum(axis=1) ** 2) + wnp.reshape(x, (24,))[5],
}


def _least_squares(w, x, y):
    return wnp.mean((x @ w - y) ** 2)


def _logistic(w, x, y):
    z = x @ w
    return wnp.mean(wnp.logaddexp(0.0, z) - y * z)


def _close(backend, got, want):
    assert type(got) is backend.array_type, f"got a {type(got).__name__}, not a {backend.name} array"
    np.testing.assert_allclose(backend.get(got), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", sorted(CASES))
def test_grad_matches_numpy(backend, case):
    f = CASES[case]
    x, a = backend.put(X), backend.put(A)
    with backend.lazily():
        g = wg.grad(f)(x, a)
    _close(backend, g, wg.grad(f)(X, A))


@pytest.mark.parametrize("loss", [_least_squares, _logistic], ids=["least_squares", "logistic"])
def test_value_and_grad_of_a_loss(backend, loss):
    x, y, w = backend.put(X), backend.put(Y), backend.put(W)
    with backend.lazily():
        value, (gw, gx) = wg.value_and_grad(loss, argnums=(0, 1))(w, x, y)
    v0, (gw0, gx0) = wg.value_and_grad(loss, argnums=(0, 1))(W, X, Y)
    _close(backend, value, v0)
    _close(backend, gw, gw0)
    _close(backend, gx, gx0)


def test_vjp_jvp_and_vmap(backend):
    x, t = backend.put(X), backend.put(X[::-1].copy())
    f = lambda x: wnp.exp(x).sum(axis=0) * wnp.sin(x[0])
    ct = backend.put(np.arange(4.0))
    with backend.lazily():
        out, vjp_fn = wg.vjp(f, x)
        (gx,) = vjp_fn(ct)
        y, ty = wg.jvp(f, (x,), (t,))
        rows = wg.vmap(lambda r: wnp.sum(wnp.exp(r)) * r)(x)
        row_grads = wg.vmap(wg.grad(lambda r: wnp.sum(wnp.sin(r) * r)))(x)
    out0, vjp0 = wg.vjp(f, X)
    _close(backend, out, out0)
    _close(backend, gx, vjp0(np.arange(4.0))[0])
    y0, ty0 = wg.jvp(f, (X,), (X[::-1].copy(),))
    _close(backend, y, y0)
    _close(backend, ty, ty0)
    _close(backend, rows, wg.vmap(lambda r: wnp.sum(wnp.exp(r)) * r)(X))
    _close(backend, row_grads, wg.vmap(wg.grad(lambda r: wnp.sum(wnp.sin(r) * r)))(X))


def test_jacobians_hessian_and_in_place_writes(backend):
    """Jacobians (a backward pass per output element, stacked), forward over reverse, a Buffer made
    like the input and x.at[...].set: the results stay the backend's arrays."""
    x = backend.put(X[0])
    f = lambda x: wnp.sin(x) * x.sum()
    s = lambda x: wnp.sum(wnp.sin(x) * x)

    def buffered(x):
        b = wg.Buffer(like=x)
        b[0] = x[1] * 2
        b[1:3] = wnp.sin(x[:2])
        return wnp.sum(b.freeze() ** 2) + wnp.sum(wg.at(x)[1:3].set(x[:2] * 3) ** 2)

    with backend.lazily():
        got = [wg.jacobian(f)(x), wg.jacfwd(f)(x), wg.hessian(s)(x), wg.grad(buffered)(x)]
    for g, h in zip(got, [wg.jacobian(f), wg.jacfwd(f), wg.hessian(s), wg.grad(buffered)]):
        _close(backend, g, h(X[0]))


def test_jit_refuses_backend_arguments(backend):
    """jit stages NumPy arrays only; another library's array is refused by name, also under grad."""
    f = lambda x: wnp.sum(wnp.sin(x) * x[0])
    x = backend.put(X)
    with pytest.raises(TypeError, match="jit: an argument is a"):
        wg.jit(f)(x)
    with pytest.raises(TypeError, match="jit: an argument is a"):
        wg.grad(wg.jit(f))(x)


def test_unused_input_and_second_order(backend):
    """Zeros for an input the output does not read, in the backend's namespace; a gradient of a
    gradient (the backward pass recorded by an outer one)."""
    x, a = backend.put(X), backend.put(A)
    with backend.lazily():
        gx, ga = wg.grad(lambda x, a: wnp.sum(x ** 3), argnums=(0, 1))(x, a)
        gg = wg.grad(lambda x: wnp.sum(wg.grad(lambda x: wnp.sum(wnp.sin(x) * x))(x) ** 2))(x)
        gi = wg.grad(lambda x: wnp.sum(wg.grad(lambda x: wnp.sum(x[1:, :2] ** 3) + x[0, 1])(x) ** 2))(x)
    _close(backend, gi, wg.grad(lambda x: wnp.sum(wg.grad(lambda x: wnp.sum(x[1:, :2] ** 3) + x[0, 1])(x) ** 2))(X))
    _close(backend, gx, 3 * X ** 2)
    _close(backend, ga, np.zeros_like(A))
    _close(backend, gg, wg.grad(lambda x: wnp.sum(wg.grad(lambda x: wnp.sum(wnp.sin(x) * x))(x) ** 2))(X))


def test_check_grads_on_backend_arrays(backend):
    """Finite differences in float64 against both modes, with directions made in the namespace."""
    x, a = backend.put(X[:2]), backend.put(A[:, :2])   # small: every finite difference is a compute
    wg.check_grads(lambda x, a: wnp.sum(wnp.tanh(x @ a) ** 2) + wnp.sum(wg.nn.logsumexp(x, axis=1)),
                   (x, a), modes=("fwd", "rev"), max_elements=3)


def test_check_grads_still_catches_a_wrong_gradient(backend):
    wrong = wg.custom_vjp(lambda x: wnp.sin(x))
    wrong.defvjp(lambda x: (wnp.sin(x), x), lambda x, g: (g * wnp.sin(x),))   # should be cos
    with pytest.raises(AssertionError, match="disagrees with finite differences"):
        wg.check_grads(lambda x: wnp.sum(wrong(x)), (backend.put(X[:2]),))


def test_integer_array_index_gradient(backend):
    """x[int array] needs a scatter-add: CuPy has one; Dask has none, and says so by name."""
    x = backend.put(X)
    f = lambda x: wnp.sum(x[np.array([0, 0, 2])] ** 2) + wnp.sum(wnp.take(x, np.array([1, 1]), axis=1))
    masked = lambda x: wnp.sum(x[x > 0.5] ** 2)
    if backend.name == "dask":
        with pytest.raises(wg.BackendError, match=r"scatter-add \(np.add.at\), which dask arrays"):
            wg.grad(f)(x)
        with pytest.raises(wg.BackendError, match=r"shape depends on its values \(x\[mask\]"):
            wg.grad(masked)(x)
    else:
        _close(backend, wg.grad(f)(x), wg.grad(f)(X))
        _close(backend, wg.grad(masked)(x), wg.grad(masked)(X))


@pytest.mark.parametrize("name, f, message", [
    ("det", lambda x: wnp.linalg.det(x[:4]), r"numpy.linalg.det has no lazy implementation in Dask"),
    ("sort", lambda x: wnp.sum(wnp.sort(x, axis=1)[:, 0]), r"numpy.argsort has no lazy implementation in Dask"),
    ("unique", lambda x: wnp.sum(wnp.unique(x)), r"unique of a Dask array: its result's shape depends on the values"),
    ("qr complete", lambda x: wnp.sum(wnp.linalg.qr(x, mode="complete")[1]), r"qr\(mode='complete'\) of a Dask array"),
])
def test_what_dask_cannot_do_lazily_is_refused_by_name(name, f, message):
    """Never an eager conversion to NumPy (Dask's fallback for functions it lacks computes), never
    a crash inside Dask: a BackendError naming the function and what to do."""
    da = pytest.importorskip("dask.array")
    x = da.from_array(X, chunks=(3, 2))
    with pytest.raises(wg.BackendError, match=message):
        wg.grad(f)(x)
    with pytest.raises(wg.BackendError, match=message):   # forward mode and vmap say the same
        wg.jvp(f, (x,), (x,))
    if name == "det":
        with pytest.raises(wg.BackendError, match=message):
            wg.vmap(lambda m: wnp.linalg.det(m[:2, :2]))(da.from_array(np.stack([X[:4]] * 2), chunks=2))


def test_without_array_api_compat_the_error_names_the_extra(monkeypatch):
    """array-api-compat is optional (NumPy and opt_einsum are the only hard dependencies): a
    non-NumPy array without it is a clear error naming the extra, never a NumPy conversion."""
    da = pytest.importorskip("dask.array")
    monkeypatch.setattr(namespace, "array_api_compat", None)
    with pytest.raises(wg.BackendError, match=r"install it with pip install 'wengert\[dask\]'"):
        wg.grad(lambda x: wnp.sum(wnp.sin(x)))(da.from_array(X, chunks=3))
    assert wg.grad(lambda x: wnp.sum(wnp.sin(x)))(X).shape == X.shape   # NumPy does not need it


def test_namespace_helpers_keep_numpy_numpy():
    """The fast path: NumPy arrays and scalars are never sent to array-api-compat."""
    assert namespace.namespace(np.ones(2), 1.0, np.float32(2)) is np
    assert not namespace.is_foreign(np.ones(2)) and not namespace.is_foreign(3.0)
    z = namespace.zeros((2, 3), np.float32, np.ones(1))
    assert type(z) is np.ndarray and z.dtype == np.float32 and not z.any()


def test_gradient_computed_on_a_distributed_cluster():
    """A lazy gradient is an ordinary Dask graph: a LocalCluster of two worker processes computes
    it. The cluster is the test's own, closed whatever happens; every wait has a timeout."""
    distributed = pytest.importorskip("distributed", reason="distributed is not installed (pip install 'wengert[dask]')")
    da = pytest.importorskip("dask.array")
    import logging
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((400, 5))
    y_np = (x_np @ np.arange(5.0) > 0).astype(np.float64)
    x, y = da.from_array(x_np, chunks=(100, 5)), da.from_array(y_np, chunks=100)
    w = np.full(5, 0.1)
    cluster = client = None
    try:
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=":0", silence_logs=logging.ERROR)
        client = distributed.Client(cluster, timeout="60s")
        client.wait_for_workers(2, timeout=120)   # a loaded machine starts worker processes slowly
        value, grad = wg.value_and_grad(_logistic)(w, x, y)
        assert type(grad) is da.Array
        value, grad = client.compute([value, grad], sync=False)
        value, grad = value.result(timeout=60), grad.result(timeout=60)
        assert len(client.scheduler_info()["workers"]) == 2
    finally:
        if client is not None:
            client.close(timeout=10)
        if cluster is not None:
            cluster.close(timeout=10)
    v0, g0 = wg.value_and_grad(_logistic)(w, x_np, y_np)
    np.testing.assert_allclose(value, v0, rtol=1e-12)
    np.testing.assert_allclose(grad, g0, rtol=1e-10)

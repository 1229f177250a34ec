"""autograd-parity conveniences: elementwise_grad, flatten_util.ravel_pytree, checkpoint."""
import tracemalloc

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.flatten_util import ravel_pytree


def test_elementwise_grad_matches_derivative():
    x = np.linspace(-2, 2, 7)
    np.testing.assert_allclose(wg.elementwise_grad(wnp.tanh)(x), 1 - np.tanh(x) ** 2)
    gx, gy = wg.elementwise_grad(lambda x, y: x * y + wnp.sin(x), (0, 1))(x, 2 * x)
    np.testing.assert_allclose(gx, 2 * x + np.cos(x))
    np.testing.assert_allclose(gy, x)
    # second derivative through elementwise_grad
    np.testing.assert_allclose(wg.elementwise_grad(wg.elementwise_grad(wnp.sin))(x), -np.sin(x))


def test_ravel_pytree_round_trip_and_gradients():
    t = {"w": np.arange(6.0).reshape(2, 3), "b": (np.ones(2), np.float32(3.0)), "n": None}
    flat, unravel = ravel_pytree(t)
    assert flat.shape == (9,) and flat.dtype == np.float64
    back = unravel(flat)
    np.testing.assert_array_equal(back["w"], t["w"])
    assert back["b"][1].dtype == np.float32 and back["n"] is None
    g = wg.grad(lambda t: wnp.sum(ravel_pytree(t)[0] ** 2))(t)
    np.testing.assert_allclose(g["w"], 2 * t["w"])
    gv = wg.grad(lambda v: wnp.sum(unravel(v)["w"] ** 3))(flat)
    np.testing.assert_allclose(gv, np.r_[np.zeros(3), 3 * t["w"].ravel() ** 2])  # leaves: b, n, w
    with pytest.raises(ValueError):
        unravel(np.zeros(4))
    wg.check_grads(lambda v: wnp.sum(wnp.sin(unravel(v)["w"])) * unravel(v)["b"][0][0], (flat,), order=2)


def _chain(x):
    for _ in range(10):
        x = wnp.sin(x) * 1.01 + 0.1
    return x


def test_checkpoint_gradients_first_and_second_order():
    x = np.linspace(0.1, 1.0, 5)
    plain = lambda x: wnp.sum(_chain(_chain(x)) ** 2)  # noqa: E731
    ck = wg.checkpoint(_chain)
    checked = lambda x: wnp.sum(ck(ck(x)) ** 2)  # noqa: E731
    np.testing.assert_allclose(wg.grad(checked)(x), wg.grad(plain)(x), rtol=1e-12)
    np.testing.assert_allclose(wg.hessian(checked)(x), wg.hessian(plain)(x), rtol=1e-10, atol=1e-12)
    wg.check_grads(checked, (x,), order=2)
    # keyword arguments are held fixed, several positional arguments all get cotangents
    f = wg.checkpoint(lambda a, b, scale=1.0: wnp.sin(a) * b * scale)
    ga, gb = wg.grad(lambda a, b: wnp.sum(f(a, b, scale=3.0)), (0, 1))(x, x + 1)
    np.testing.assert_allclose(ga, 3 * np.cos(x) * (x + 1))
    np.testing.assert_allclose(gb, 3 * np.sin(x))


def _peak(f, x):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        g = wg.grad(f)(x)
        return tracemalloc.get_traced_memory()[1], g
    finally:
        tracemalloc.stop()


def test_checkpoint_lowers_peak_memory_of_a_deep_chain():
    x = np.linspace(0.0, 1.0, 50_000)  # 400 kB per intermediate

    def deep(segment):
        def f(x):
            for _ in range(8):
                x = segment(x)
            return wnp.sum(x)
        return f

    plain, checked = deep(_chain), deep(wg.checkpoint(_chain))
    peak_plain, g_plain = _peak(plain, x)
    peak_ck, g_ck = _peak(checked, x)
    np.testing.assert_allclose(g_ck, g_plain, rtol=1e-12)
    # 80 layers keep ~2 arrays each without checkpointing; with it, 8 segment inputs plus one
    # segment's 10 layers at a time
    assert peak_ck < 0.5 * peak_plain, (peak_ck, peak_plain)

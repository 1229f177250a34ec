"""vmap of scipy.signal.convolve/correlate: one batched operand is one (n+1)-d SciPy convolution,
two batched operands one gather and einsum; each equals a loop over the examples, with no
per-example loop warning, and differentiates in both modes."""

import numpy as np
import pytest
import scipy.signal as sig

import wengert as wg
import wengert.numpy as wnp
from wengert.scipy import signal as wsig

from transform_checks import no_warnings


def _operands(rng, shape, batch, complex_):
    x = rng.normal(size=shape + (batch,))
    return x + 1j * rng.normal(size=x.shape) if complex_ else x


_SHAPES = {"1d": ((6,), (3,)), "1d-longer-kernel": ((3,), (5,)), "2d": ((4, 3), (2, 2)),
           "3d-mixed": ((2, 3, 2), (2, 2, 3))}  # valid mode refuses the last: neither operand is larger


@pytest.mark.parametrize("batched", ["in1", "in2", "both"])
@pytest.mark.parametrize("mode, shapes", [(m, s) for m in ("full", "same", "valid") for s in _SHAPES
                                          if not (m == "valid" and s == "3d-mixed")])
@pytest.mark.parametrize("name", ["convolve", "correlate"])
def test_vmap_equals_a_loop_without_warnings(name, mode, shapes, batched):
    rng = np.random.default_rng(0)
    s1, s2 = _SHAPES[shapes]
    in1 = _operands(rng, s1, 4, complex_=False)                    # examples in1[..., b]
    in2 = np.moveaxis(_operands(rng, s2, 4, complex_=name == "correlate"), -1, 0)  # examples in2[b]
    ones1, ones2 = in1[..., 0], in2[0]
    f = lambda a, b: getattr(wsig, name)(a, b, mode=mode)  # noqa: E731
    ref = lambda a, b: getattr(sig, name)(a, b, mode=mode)  # noqa: E731
    with no_warnings():
        if batched == "in1":
            got, expected = wg.vmap(f, in_axes=(-1, None))(in1, ones2), [ref(in1[..., i], ones2) for i in range(4)]
        elif batched == "in2":
            got, expected = wg.vmap(f, in_axes=(None, 0))(ones1, in2), [ref(ones1, in2[i]) for i in range(4)]
        else:
            got, expected = wg.vmap(f, in_axes=(-1, 0))(in1, in2), [ref(in1[..., i], in2[i]) for i in range(4)]
    np.testing.assert_allclose(got, np.stack(expected), atol=1e-12)


@pytest.mark.parametrize("batched", [(1, None), (None, 0), (1, 0)], ids=["in1", "in2", "both"])
@pytest.mark.parametrize("mode", ["full", "same"])
def test_gradients_through_vmap_match_finite_differences(mode, batched):
    rng = np.random.default_rng(1)
    in1 = rng.normal(size=(5, 3) if batched[0] is not None else (5,))
    in2 = rng.normal(size=(3, 3) if batched[1] is not None else (3,))

    def loss(in1, in2):
        out = wg.vmap(lambda a, b: wsig.convolve(wnp.sin(a), b, mode=mode), in_axes=batched)(in1, in2)
        return wnp.sum(out ** 2)
    with no_warnings():
        wg.check_grads(loss, (in1, in2), modes=("fwd", "rev"))


@pytest.mark.parametrize("f", [lambda a: wsig.convolve(a, np.array([1.0, -2.0, 0.5]), mode="valid"),
                               lambda a: wsig.correlate(a, a ** 2, mode="same"),
                               lambda a: wsig.convolve(a.reshape(2, 3), wnp.cos(a.reshape(2, 3)[:, :2]))],
                         ids=["constant-kernel", "product-rule", "2d"])
def test_jacfwd_equals_jacobian_without_warnings(f):
    """jacfwd batches the tangent against the unbatched primal (one operand batched)."""
    a = np.random.default_rng(2).normal(size=6)
    with no_warnings():
        forward = wg.jacfwd(f)(a)
    np.testing.assert_allclose(forward, wg.jacobian(f)(a), atol=1e-12)


def test_nested_vmap_equals_a_double_loop():
    rng = np.random.default_rng(3)
    signals, kernels = rng.normal(size=(2, 3, 7)), rng.normal(size=(3, 2))
    with no_warnings():
        shared = wg.vmap(wg.vmap(lambda a, k: wsig.convolve(a, k, mode="same"), in_axes=(0, 0)),
                         in_axes=(0, None))(signals, kernels)
        pairwise = wg.vmap(wg.vmap(wsig.correlate, in_axes=(None, 0)), in_axes=(0, None))(signals[0], kernels)
    np.testing.assert_allclose(shared, [[sig.convolve(signals[i, j], kernels[j], mode="same") for j in range(3)]
                                        for i in range(2)], atol=1e-12)
    np.testing.assert_allclose(pairwise, [[sig.correlate(signals[0, i], kernels[j]) for j in range(3)]
                                          for i in range(3)], atol=1e-12)


def test_two_batched_operands_sum_exactly_and_large_ones_loop(monkeypatch):
    """The gathered windows give SciPy's direct sums (integers stay exact); past the size limit of
    that window tensor vmap loops over the examples, with its warning."""
    rng = np.random.default_rng(4)
    a, b = rng.integers(-5, 5, size=(3, 6)), rng.integers(-5, 5, size=(3, 4))
    with no_warnings():
        got = wg.vmap(wsig.convolve)(a, b)
    expected = np.stack([sig.convolve(x, y) for x, y in zip(a, b)])
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    monkeypatch.setattr(wsig, "_GATHER_LIMIT", 0)
    x, y = rng.normal(size=(3, 6)), rng.normal(size=(3, 4))
    with pytest.warns(UserWarning, match="no batching rule for scipy.signal.convolve"):
        got = wg.vmap(wsig.convolve)(x, y)
    np.testing.assert_allclose(got, [sig.convolve(p, q) for p, q in zip(x, y)], atol=1e-12)

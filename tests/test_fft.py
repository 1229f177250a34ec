"""wengert.numpy.fft: values equal NumPy's; first and second derivatives match finite differences
for real and complex inputs, with n/s, axis/axes and every norm."""
import functools

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp

from transform_checks import grad_inside, inside_vmap_equals_loop, no_warnings, refuse_transposed_jvp

@pytest.fixture(autouse=True)
def own_jvp_rules(monkeypatch):
    """Forward mode must run the FFT primitives' own (linear) JVP rules, not the transposed-VJP fallback."""
    refuse_transposed_jvp(monkeypatch, lambda name: name.startswith("fft."))


def _real(rng, shape):
    return rng.normal(size=shape)


def _complex(rng, shape):
    return rng.normal(size=shape) + 1j * rng.normal(size=shape)


def _check(name, x, **kw):
    f = lambda x: getattr(wnp.fft, name)(x, **kw)  # noqa: E731
    np.testing.assert_allclose(wg.vjp(f, x)[0], getattr(np.fft, name)(x, **kw), atol=1e-12)
    np.testing.assert_allclose(f(x), getattr(np.fft, name)(x, **kw))
    wg.check_grads(f, (x,), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("n, norm", [(None, None), (4, "ortho"), (9, "forward")])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft"])
@pytest.mark.parametrize("kind", ["real", "complex"])
def test_one_dimensional(name, n, norm, kind):
    if name == "rfft" and kind == "complex":
        return  # rfft takes real input
    rng = np.random.default_rng(0)
    make = _real if kind == "real" else _complex
    _check(name, make(rng, (3, 6)), n=n, axis=-1, norm=norm)
    _check(name, make(rng, (6, 2)), n=n, axis=0, norm=norm)


@pytest.mark.parametrize("length, n, norm", [(4, None, None), (4, 6, "ortho"), (5, 7, "forward"), (5, 3, None),
                                             (5, None, "ortho")])
def test_irfft(length, n, norm):
    rng = np.random.default_rng(1)
    _check("irfft", _complex(rng, (2, length)), n=n, norm=norm)
    _check("irfft", _complex(rng, (length, 3)), n=n, axis=0, norm=norm)


@pytest.mark.parametrize("s_axes, norm", [((None, None), None), (((4, 3), (1, 2)), "ortho"),
                                          ((None, (0, 2)), "forward"), (((5, 2), (2, 0)), None),
                                          (((3,), (1,)), "ortho")])
@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
def test_n_dimensional(name, s_axes, norm):
    rng = np.random.default_rng(2)
    s, axes = s_axes
    x = (_real if name == "rfftn" else _complex)(rng, (3, 4, 5))
    _check(name, x, s=s, axes=axes, norm=norm)


@pytest.mark.parametrize("name", ["fft2", "ifft2", "rfft2", "irfft2"])
@pytest.mark.parametrize("s", [None, (3, 6)])
def test_two_dimensional(name, s):
    rng = np.random.default_rng(3)
    x = (_real if name == "rfft2" else _complex)(rng, (2, 4, 5))
    _check(name, x, s=s)
    _check(name, x, s=s, axes=(0, 2), norm="ortho")


@pytest.mark.parametrize("axes", [None, 0, (1,), (0, 1)])
@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
def test_shifts(name, axes):
    rng = np.random.default_rng(4)
    _check(name, _real(rng, (5, 4)), axes=axes)
    _check(name, _complex(rng, (3, 4)), axes=axes)


def test_numpy_dispatch_real_losses_and_errors():
    rng = np.random.default_rng(5)
    x = rng.normal(size=8)
    # np.fft on a traced value is wengert's; a real loss of a spectrum, e.g. a power spectrum
    power = lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2)  # noqa: E731
    # Parseval: sum |rfft|^2 weighs each frequency once, so d/dx is 2 * irfft-like weights; check by FD
    wg.check_grads(power, (x,), order=2, modes=("fwd", "rev"))
    g = wg.grad(lambda x: wnp.sum(wnp.abs(wnp.fft.fft(x)) ** 2))(x)
    np.testing.assert_allclose(g, 2 * len(x) * x)  # Parseval: |fft x|^2 = n |x|^2
    assert g.dtype == np.float64
    with pytest.raises(ValueError):
        wg.grad(lambda x: wnp.sum(wnp.abs(wnp.fft.fft(x, norm="bogus"))))(x)
    # a round trip is the identity, so its gradient is the cotangent
    w = rng.normal(size=8)
    np.testing.assert_allclose(wg.grad(lambda x: wnp.sum(w * wnp.fft.irfft(wnp.fft.rfft(x), n=8)))(x), w)


def test_jvp_is_the_transform_of_the_tangent():
    rng = np.random.default_rng(6)
    x, t = rng.normal(size=(3, 8)), rng.normal(size=(3, 8))
    z, tz = _complex(rng, (3, 5)), _complex(rng, (3, 5))
    np.testing.assert_allclose(wg.jvp(wnp.fft.fft, (x,), (t,))[1], np.fft.fft(t), atol=1e-12)
    np.testing.assert_allclose(wg.jvp(lambda x: wnp.fft.rfft(x, n=6, norm="ortho"), (x,), (t,))[1],
                               np.fft.rfft(t, n=6, norm="ortho"), atol=1e-12)
    np.testing.assert_allclose(wg.jvp(lambda z: wnp.fft.irfft(z, n=8), (z,), (tz,))[1], np.fft.irfft(tz, n=8),
                               atol=1e-12)
    f = lambda x: wnp.fft.irfft2(wnp.fft.rfft2(x) * 2.0, s=x.shape)  # noqa: E731
    np.testing.assert_allclose(wg.jacfwd(f)(x), wg.jacobian(f)(x), atol=1e-12)


# --- vmap ------------------------------------------------------------------------------------------
_VMAP_CASES = [("fft", {}), ("ifft", {"n": 7, "axis": 0, "norm": "ortho"}), ("rfft", {"n": 6, "norm": "forward"}),
               ("irfft", {"n": 8, "axis": 0}), ("fftn", {"s": (4, 3), "axes": (1, 0)}), ("ifft2", {}),
               ("rfftn", {"axes": (0, 1)}), ("irfftn", {"s": (3, 6), "axes": (0, 1), "norm": "ortho"}), ("fftshift", {"axes": 1})]


def _example_input(rng, name, shape):
    return _real(rng, shape) if name.startswith("rfft") else _complex(rng, shape)


@pytest.mark.parametrize("name, kw", _VMAP_CASES)
def test_vmap_equals_a_loop_without_warnings(name, kw):
    """The batch on axis 1 of x, a weight shared by all examples: one batched transform, no loop."""
    rng = np.random.default_rng(7)
    xs = _example_input(rng, name, (3, 4, 5))  # examples xs[:, i] of shape (3, 5)
    w = rng.normal(size=5)
    f = lambda x, w: getattr(wnp.fft, name)(x * w, **kw)  # noqa: E731
    expected = np.stack([getattr(np.fft, name)(xs[:, i] * w, **kw) for i in range(4)])
    with no_warnings():
        got = wg.vmap(f, in_axes=(1, None))(xs, w)
    np.testing.assert_allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("name, kw", _VMAP_CASES)
def test_vmap_gradients_match_finite_differences(name, kw):
    rng = np.random.default_rng(8)
    xs = _example_input(rng, name, (3, 2, 4))
    w = rng.normal(size=4)

    def loss(xs, w):
        spectra = wg.vmap(lambda x: getattr(wnp.fft, name)(x * w, **kw), in_axes=1)(xs)
        return wnp.sum(wnp.abs(spectra) ** 2)
    with no_warnings():
        wg.check_grads(loss, (xs, w), modes=("fwd", "rev"))


@pytest.mark.parametrize("f", [lambda x: wnp.abs(wnp.fft.fft(x, n=6)) ** 2,
                               lambda x: wnp.fft.irfft(wnp.fft.rfft(x, axis=0) * (1 + 2j), n=5, axis=0),
                               lambda x: wnp.real(wnp.fft.ifft2(wnp.fft.fftn(x, s=(4, 4)) ** 2))],
                         ids=["fft-power", "rfft-irfft", "fftn-ifft2"])
def test_jacfwd_batches_the_tangents_without_warnings(f):
    x = np.random.default_rng(9).normal(size=(3, 4))
    with no_warnings():
        forward = wg.jacfwd(f)(x)
    np.testing.assert_allclose(forward, wg.jacobian(f)(x), atol=1e-10)


def test_nested_vmap_equals_a_double_loop():
    rng = np.random.default_rng(10)
    zs = _complex(rng, (2, 3, 6))
    xs = _real(rng, (5, 2, 4))
    with no_warnings():
        got_c2c = wg.vmap(wg.vmap(lambda z: wnp.fft.ifft(z, n=4, norm="ortho")))(zs)
        got_r2c = wg.vmap(wg.vmap(lambda x: wnp.fft.rfft(x, n=6)), in_axes=2)(xs)
    np.testing.assert_allclose(got_c2c, np.stack([np.stack([np.fft.ifft(z, n=4, norm="ortho") for z in row])
                                                  for row in zs]), atol=1e-12)
    np.testing.assert_allclose(got_r2c, np.stack([np.stack([np.fft.rfft(xs[j, :, i], n=6) for j in range(5)])
                                                  for i in range(4)]), atol=1e-12)


# --- a grad inside vmap: the tape records batched values (prim.batched_vjp) -------------------------
_inside_vmap_equals_loop = functools.partial(inside_vmap_equals_loop, rtol=1e-9, atol=1e-10)


def _weighted_power(f):
    """A real loss that weighs each output differently (a plain sum would hide index mix-ups)."""
    def loss(*a):
        y = f(*a)
        return wnp.sum(wnp.abs(y) ** 2 * wnp.reshape(wnp.arange(y.size), y.shape))
    return loss


_RF = np.random.default_rng(34)
_REAL, _REAL2 = _RF.standard_normal((3, 6)), _RF.standard_normal((3, 4, 6))
_CPLX = _RF.standard_normal((3, 6)) + 1j * _RF.standard_normal((3, 6))


@pytest.mark.parametrize("f, x", [
    (wnp.fft.fft, _CPLX), (lambda a: wnp.fft.fft(a, n=8), _REAL), (lambda a: wnp.fft.ifft(a, n=4, norm="ortho"), _CPLX),
    (wnp.fft.fft2, _REAL2), (lambda a: wnp.fft.ifftn(a, s=(3, 8)), _REAL2), (wnp.fft.rfft, _REAL),
    (lambda a: wnp.fft.rfft(a, n=9, norm="forward"), _REAL), (wnp.fft.irfft, _CPLX),
    (lambda a: wnp.fft.irfft(a, n=7), _CPLX), (lambda a: wnp.fft.irfft(a, n=12, norm="ortho"), _CPLX),
    (wnp.fft.rfftn, _REAL2), (wnp.fft.irfft2, _REAL2 + 0j),
])
def test_grad_inside_vmap_is_batched_and_equals_a_loop(f, x):
    _inside_vmap_equals_loop(grad_inside(_weighted_power(f)), (x,), (0,))


def test_grad_inside_vmap_with_an_unbatched_signal_is_batched():
    loss = grad_inside(_weighted_power(lambda a, c: wnp.fft.fft(a * c)), (0, 1))
    _inside_vmap_equals_loop(loss, (_REAL[0], _CPLX), (None, 0))


def test_jacobian_and_hessian_inside_vmap_are_batched():
    _inside_vmap_equals_loop(wg.jacobian(lambda a: wnp.real(wnp.fft.fft(a))), (_REAL,), (0,))
    _inside_vmap_equals_loop(wg.hessian(_weighted_power(wnp.fft.rfft)), (_REAL,), (0,))
    _inside_vmap_equals_loop(wg.hessian(lambda a: wnp.sum(wnp.fft.irfft(a) ** 3)), (_REAL + 0j,), (0,))

"""Complex numbers: JAX's convention (the gradient of a real loss in z = x + iy is dL/dx - i dL/dy),
holomorphic and non-holomorphic functions, first and second order (docs/complex.md)."""
import warnings

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp

from transform_checks import refuse_transposed_jvp


def _z(rng, shape):
    return rng.normal(size=shape) + 1j * rng.normal(size=shape)


def test_convention_matches_jax():
    z = np.array(3 + 4j)
    assert wg.grad(lambda z: wnp.abs(z) ** 2)(z) == 6 - 8j
    assert wg.grad(lambda z: z.real)(z) == 1
    assert wg.grad(lambda z: z.imag)(z) == -1j
    np.testing.assert_allclose(wg.grad(lambda z: wnp.angle(z))(z), -0.16 - 0.12j)
    np.testing.assert_allclose(wg.grad(lambda z: wnp.abs(z))(z), (3 - 4j) / 5)
    # holomorphic f: grad of Re f(z) is conj-free f'(z)
    np.testing.assert_allclose(wg.grad(lambda z: wnp.real(wnp.sin(z)))(z), np.cos(z))
    g = wg.grad(lambda z: wnp.sum(wnp.real(z) * 2))(np.ones(3, np.complex64))
    assert g.dtype == np.complex64


def test_grad_equals_parts_derivatives():
    rng = np.random.default_rng(0)
    z = _z(rng, (4,))
    f = lambda z: wnp.sum(wnp.abs(wnp.exp(z) * wnp.conj(z) + z ** 2))  # noqa: E731
    g = wg.grad(f)(z)
    gx, gy = wg.grad(lambda x, y: f(x + 1j * y), (0, 1))(z.real, z.imag)
    np.testing.assert_allclose(g, gx - 1j * gy)


FUNCS = {
    "abs2": lambda z: wnp.sum(wnp.abs(z) ** 2),
    "abs3": lambda z: wnp.sum(wnp.abs(z) ** 3),
    "holomorphic": lambda z: wnp.sin(z) * wnp.exp(z) / (z + 3),
    "log_sqrt_power": lambda z: wnp.log(z) ** 2 + wnp.sqrt(z) + z ** 3,
    "tanh_cosh": lambda z: wnp.tanh(z) + wnp.cosh(z) - wnp.square(z),
    "real_imag": lambda z: wnp.real(z) ** 3 * wnp.imag(z),
    "methods": lambda z: z.real * z.imag + z.conj().imag,
    "angle": lambda z: wnp.angle(z) ** 2,
    "conj": lambda z: wnp.conj(z) ** 3,
    "astype": lambda z: z.astype(np.float64) ** 3,
    "reductions": lambda z: wnp.sum(z ** 2) * wnp.mean(z) + wnp.prod(z),
    "reshape_index": lambda z: wnp.reshape(z, (-1, 1))[1:] * wnp.ravel(z)[0],
    "real_to_complex": lambda z: wnp.abs(wnp.exp(1j * wnp.real(z)) * wnp.imag(z) ** 2),
}


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_first_and_second_order(name, shape):
    rng = np.random.default_rng(1)
    z = _z(rng, shape) + (2.0 if name == "log_sqrt_power" else 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)  # NumPy's own astype
        wg.check_grads(FUNCS[name], (z,), order=2)


@pytest.mark.parametrize("name", ["dot", "matmul", "einsum", "vdot", "outer", "tensordot"])
def test_contractions(name):
    rng = np.random.default_rng(2)
    a, b = _z(rng, (3, 4)), _z(rng, (4, 2))
    fs = {
        "dot": lambda a, b: wnp.dot(a, b),
        "matmul": lambda a, b: wnp.abs(a @ b),
        "einsum": lambda a, b: wnp.einsum("ij,jk->ik", a, wnp.conj(b)),
        "vdot": lambda a, b: wnp.vdot(a[0], b[:, 0]),
        "outer": lambda a, b: wnp.outer(a[0], b[0]),
        "tensordot": lambda a, b: wnp.tensordot(a, b, axes=1),
    }
    wg.check_grads(fs[name], (a, b), order=2)


def test_mixed_real_and_complex_arguments():
    rng = np.random.default_rng(3)
    x, z = rng.normal(size=3), _z(rng, (3,))
    f = lambda x, z: wnp.abs(x * z + wnp.exp(1j * x)) ** 2  # noqa: E731
    wg.check_grads(f, (x, z), order=2)
    gx = wg.grad(lambda x: wnp.sum(f(x, z)))(x)
    assert gx.dtype == np.float64  # a real input gets a real gradient


def test_vjp_of_a_complex_output():
    rng = np.random.default_rng(4)
    z = _z(rng, (3,))
    out, pull = wg.vjp(lambda z: z * z, z)
    np.testing.assert_allclose(out, z * z)
    ct = _z(rng, (3,))
    np.testing.assert_allclose(pull(ct)[0], ct * 2 * z)  # transpose, no conjugate (JAX's vjp)
    with pytest.raises(wg.NonScalarOutputError):
        wg.grad(lambda z: wnp.sum(z))(z)


@pytest.mark.parametrize("kw", [{}, {"ord": "fro"}, {"ord": 1}, {"ord": np.inf}, {"axis": 1}, {"axis": 0, "ord": 3},
                                {"axis": 1, "keepdims": True}])
def test_linalg_norm_of_complex(kw):
    rng = np.random.default_rng(5)
    a = _z(rng, (3, 3))
    f = lambda a: wnp.linalg.norm(a, **kw)  # noqa: E731
    np.testing.assert_allclose(wg.vjp(f, a)[0], np.linalg.norm(a, **kw))
    wg.check_grads(f, (a,), order=2)


def test_linalg_holomorphic_functions_and_refusals():
    rng = np.random.default_rng(6)
    a, b = _z(rng, (3, 3)) + 3 * np.eye(3), _z(rng, (3,))
    wg.check_grads(lambda a: wnp.linalg.inv(a) @ b, (a,), order=2)
    wg.check_grads(lambda a: wnp.linalg.det(a) + wnp.linalg.solve(a, b)[0], (a,), order=2)
    # singular values: to second order, through the complex SVD's rule (the nuclear norm's Hessian too)
    for f in (lambda a: wnp.linalg.norm(a, 2), lambda a: wnp.linalg.norm(a, "nuc"), lambda a: wnp.linalg.norm(a, -2),
              lambda a: wnp.linalg.svd(a, compute_uv=False)):
        np.testing.assert_allclose(wg.vjp(f, a)[0], f(a))
        wg.check_grads(f, (a,), order=2, modes=("fwd", "rev"))
    # the nuclear norm is positively homogeneous of degree 1: its Hessian maps a to 0
    np.testing.assert_allclose(wg.hvp(lambda a: wnp.linalg.norm(a, "nuc"), (a,), (a,)), 0, atol=1e-12)


def test_imag_of_a_0d_value_under_grad():
    """The 0-d seed is an np.float64, a float subclass: imag's rule keeps it a NumPy complex."""
    z = np.array([1 + 2j, 3 - 1j])
    np.testing.assert_allclose(wg.grad(lambda z: wnp.imag(wnp.sum(z)))(z), [-1j, -1j])
    wg.check_grads(lambda z: wnp.imag(wnp.sum(z * z)), (z,), order=2, modes=("fwd", "rev"))


def _hermitian(rng, n):
    z = _z(rng, (n, n))
    return z @ z.conj().T + n * np.eye(n)


@pytest.mark.parametrize("name, f", [
    ("cholesky", lambda h: wnp.linalg.cholesky(h)),
    ("cholesky upper", lambda h: wnp.linalg.cholesky(h, upper=True)),
    ("eigvalsh", lambda h: wnp.linalg.eigvalsh(h)),
    ("eigvalsh UPLO=U", lambda h: wnp.linalg.eigvalsh(h, UPLO="U")),
    ("eigh values", lambda h: wnp.linalg.eigh(h)[0]),
    # eigenvectors have an arbitrary phase: |v|^2 and v v^H do not depend on it
    ("eigh |v|^2", lambda h: wnp.abs(wnp.linalg.eigh(h)[1]) ** 2),
    ("eigh projector", lambda h: (lambda v: v[:, :1] @ wnp.conj(v[:, :1]).T)(wnp.linalg.eigh(h)[1])),
])
def test_hermitian_factorizations_of_complex_matrices(name, f):
    """The matrix NumPy reads is the Hermitian one of a triangle: perturbing the other triangle or the
    diagonal's imaginary part changes nothing, which finite differences see too."""
    h = _hermitian(np.random.default_rng(7), 3)
    np.testing.assert_allclose(wg.vjp(f, h)[0], f(h), rtol=1e-12, atol=1e-12)
    wg.check_grads(f, (h,), order=2, modes=("fwd", "rev"))


# --- forward mode: the JVP is the real-linear map dz -> J dz ------------------------------------
@pytest.fixture
def own_jvp_rules(monkeypatch):
    """Every primitive must run its own JVP rule: the transposed-VJP fallback fails the test."""
    refuse_transposed_jvp(monkeypatch)


@pytest.mark.parametrize("shape", [(), (3,)])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_forward_mode_first_and_second_order(name, shape, own_jvp_rules):
    rng = np.random.default_rng(1)
    z = _z(rng, shape) + (2.0 if name == "log_sqrt_power" else 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        wg.check_grads(FUNCS[name], (z,), order=2, modes=("fwd",))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_jvp_of_non_holomorphic_functions(dtype, own_jvp_rules):
    rng = np.random.default_rng(7)
    z, t = _z(rng, (5,)).astype(dtype), _z(rng, (5,)).astype(dtype)
    real_dtype = np.finfo(dtype).dtype
    expected = {
        wnp.abs: (np.conj(z) * t).real / np.abs(z),
        wnp.angle: (np.conj(z) * t).imag / np.abs(z) ** 2,
        wnp.real: t.real, wnp.imag: t.imag, wnp.conj: np.conj(t),
        lambda z: z.real * z.imag: t.real * z.imag + z.real * t.imag,
    }
    for f, want in expected.items():
        out, dt = wg.jvp(f, (z,), (t,))
        assert dt.dtype == out.dtype == want.dtype
        np.testing.assert_allclose(dt, want, rtol=1e-5 if dtype == np.complex64 else 1e-12)
    assert wg.jvp(wnp.abs, (z,), (t,))[1].dtype == real_dtype
    # a real input through complex values: the tangent stays real
    x, tx = z.real.copy(), t.real.copy()
    out, dt = wg.jvp(lambda x: wnp.abs(wnp.exp(1j * x) * (x + 2)), (x,), (tx,))
    assert dt.dtype == real_dtype
    np.testing.assert_allclose(dt, tx, rtol=1e-5 if dtype == np.complex64 else 1e-12)  # |e^{ix}| (x + 2)


def test_abs_of_complex_zero_has_derivative_zero_in_both_modes(own_jvp_rules):
    z = np.array([0j, 3 + 4j])
    t = np.array([1 + 2j, 1j])
    np.testing.assert_allclose(wg.jvp(wnp.abs, (z,), (t,))[1], [0.0, 0.8])
    np.testing.assert_allclose(wg.grad(lambda z: wnp.sum(wnp.abs(z)))(z), [0.0, 0.6 - 0.8j])
    assert np.all(np.isfinite(wg.jacobian(lambda z: wnp.abs(z) * 2)(z)))


def test_jacfwd_equals_jacobian_through_complex_values(own_jvp_rules):
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal(3), rng.standard_normal(3)

    def f(x, y):
        z = x + 1j * y
        return wnp.abs(wnp.sin(z) * wnp.conj(z)) + wnp.angle(z) * wnp.real(z ** 2) - wnp.imag(wnp.exp(z) / (z + 3))

    for a, b in zip(wg.jacfwd(f, argnums=(0, 1))(x, y), wg.jacobian(f, argnums=(0, 1))(x, y)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    s = lambda x: wnp.sum(f(x, y))  # noqa: E731
    np.testing.assert_allclose(wg.hessian(s)(x), wg.jacobian(wg.grad(s))(x), rtol=1e-10, atol=1e-12)

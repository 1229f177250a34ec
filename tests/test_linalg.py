"""wengert.numpy.linalg: gradients against finite differences, NumPy's values, NumPy's dispatch.

Eigen- and singular vectors are defined up to sign, so the functions of them checked here are
sign-invariant (even powers, reconstructions). Inputs are well conditioned: symmetric positive
definite matrices ``B B^T + n I`` and random matrices with ``3 I`` added.
"""
import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp

la = wnp.linalg
rng = np.random.default_rng(0)
NUMPY2 = hasattr(np.linalg, "svdvals")


def spd(*shape):
    b = rng.standard_normal(shape)
    return b @ np.swapaxes(b, -1, -2) + shape[-1] * np.eye(shape[-1])


def general(*shape):
    return rng.standard_normal(shape) + 3 * np.eye(shape[-2], shape[-1])


def randn(*shape):
    return rng.standard_normal(shape)


def lower_read(*shape):
    """SPD in its lower triangle, noise above it (NumPy's cholesky/eigh read the lower one only)."""
    return spd(*shape) + np.triu(randn(*shape), 1)


def reconstruct(usv):
    u, s, vt = usv
    return (u * s[..., None, :]) @ vt


def eig_mix(wv):
    w, v = wv
    return wnp.sum(v ** 4 * w[..., None, :]) + wnp.sum(w ** 2)


def svd_mix(usv):
    u, s, vt = usv
    return wnp.sum((u * u) @ (vt * vt)) + wnp.sum(u[..., 0] ** 4) + wnp.sum(s ** 3)


def lstsq_mix(result):
    x, residuals, rank, s = result
    return wnp.sum(x ** 3) + wnp.sum(residuals * 1.5) + wnp.sum(s ** 2)


# (name, function, arguments): every differentiable function, at several shapes, one batched.
FIRST_ORDER = [
    ("inv", la.inv, (general(3, 3),)),
    ("inv_batched", la.inv, (general(2, 3, 3),)),
    ("solve_vector", la.solve, (general(3, 3), randn(3))),
    ("solve_matrix", la.solve, (general(4, 4), randn(4, 2))),
    ("solve_batched_broadcast", la.solve, (general(2, 3, 3), randn(3, 2))),
    ("det", la.det, (general(3, 3),)),
    ("det_batched", la.det, (general(2, 4, 4),)),
    ("slogdet", lambda a: la.slogdet(a)[1], (general(2, 3, 3),)),
    ("slogdet_negative", lambda a: la.slogdet(a)[1], (-spd(3, 3),)),
    ("cholesky", la.cholesky, (spd(4, 4),)),
    ("cholesky_lower_read", la.cholesky, (lower_read(3, 3),)),
    ("cholesky_batched", la.cholesky, (spd(2, 3, 3),)),
    ("eigh_values", lambda a: la.eigh(a)[0], (spd(4, 4),)),
    ("eigh_upper", lambda a: la.eigh(a, UPLO="U")[0], (spd(3, 3) + np.tril(randn(3, 3), -1),)),
    ("eigh_vectors", lambda a: eig_mix(la.eigh(a)), (lower_read(4, 4),)),
    ("eigh_batched", lambda a: eig_mix(la.eigh(a)), (spd(2, 3, 3),)),
    ("eigvalsh", la.eigvalsh, (lower_read(4, 4),)),
    ("eigvalsh_batched_upper", lambda a: la.eigvalsh(a, "U"), (spd(2, 3, 3),)),
    ("svd_values", lambda a: la.svd(a, compute_uv=False), (randn(4, 3),)),
    ("svd_values_batched", lambda a: la.svd(a, compute_uv=False), (randn(2, 3, 5),)),
    ("svd_square", lambda a: svd_mix(la.svd(a)), (randn(3, 3),)),
    ("svd_tall", lambda a: svd_mix(la.svd(a, full_matrices=False)), (randn(5, 3),)),
    ("svd_wide_batched", lambda a: svd_mix(la.svd(a, full_matrices=False)), (randn(2, 3, 4),)),
    ("svd_reconstruct", lambda a: reconstruct(la.svd(a, full_matrices=False)), (randn(2, 4, 3),)),
    ("svd_full_leading_columns", lambda a: wnp.sum(la.svd(a)[0][:, :3] ** 4), (randn(5, 3),)),
    ("svd_hermitian", lambda a: reconstruct(la.svd(a, hermitian=True)), (spd(3, 3),)),
    ("svd_hermitian_values", lambda a: la.svd(a, compute_uv=False, hermitian=True), (spd(3, 3),)),
    ("qr_square", la.qr, (randn(3, 3),)),
    ("qr_tall_batched", la.qr, (randn(2, 5, 3),)),
    ("qr_wide", la.qr, (randn(3, 5),)),
    ("qr_r", lambda a: la.qr(a, mode="r"), (randn(4, 3),)),
    ("qr_complete", lambda a: (lambda q, r: wnp.sum(q[:, :2] ** 3) + wnp.sum(r ** 3))(*la.qr(a, "complete")),
     (randn(4, 2),)),
    ("pinv_tall", la.pinv, (randn(5, 3),)),
    ("pinv_wide_batched", la.pinv, (randn(2, 3, 4),)),
    ("pinv_hermitian", lambda a: la.pinv(a, hermitian=True), (lower_read(3, 3),)),
    ("matrix_power", lambda a: la.matrix_power(a, 5), (general(3, 3) / 3,)),
    ("matrix_power_negative_batched", lambda a: la.matrix_power(a, -2), (general(2, 3, 3),)),
    ("multi_dot_vectors", lambda a, b, c: la.multi_dot([a, b, c]), (randn(4), randn(4, 6), randn(6))),
    ("multi_dot_chain", lambda a, b, c, d: la.multi_dot([a, b, c, d]),
     (randn(3, 4), randn(4, 6), randn(6, 2), randn(2, 5))),
    ("lstsq_vector", lambda a, b: la.lstsq(a, b)[0], (randn(5, 3), randn(5))),
    ("lstsq_all_outputs", lambda a, b: lstsq_mix(la.lstsq(a, b)), (randn(5, 3), randn(5, 2))),
    ("lstsq_wide", lambda a, b: lstsq_mix(la.lstsq(a, b)), (randn(3, 5), randn(3))),
    ("cond", la.cond, (general(3, 3),)),
    ("cond_1", lambda a: la.cond(a, 1), (general(2, 3, 3),)),
    ("tensorinv", lambda a: la.tensorinv(a, ind=1), (general(4, 4).reshape(4, 2, 2),)),
    ("tensorsolve", la.tensorsolve, (general(4, 4).reshape(2, 2, 4), randn(2, 2))),
    ("norm_all", la.norm, (randn(2, 3, 4),)),
    ("norm_keepdims", lambda a: la.norm(a, keepdims=True), (randn(3, 4),)),
]
for _ord in (None, 1, 2, np.inf, -np.inf, 3, 0.5, -1):
    FIRST_ORDER.append((f"vector_norm_{_ord}", lambda a, o=_ord: la.norm(a, o), (randn(5),)))
    FIRST_ORDER.append((f"vector_norm_{_ord}_axis", lambda a, o=_ord: la.norm(a, o, axis=-1, keepdims=True),
                        (randn(3, 4),)))
for _ord in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
    FIRST_ORDER.append((f"matrix_norm_{_ord}", lambda a, o=_ord: la.norm(a, o), (randn(4, 3),)))
    FIRST_ORDER.append((f"matrix_norm_{_ord}_axes", lambda a, o=_ord: la.norm(a, o, axis=(2, 0), keepdims=True),
                        (randn(4, 2, 3),)))
if NUMPY2:
    FIRST_ORDER += [
        ("svdvals", la.svdvals, (randn(2, 3, 4),)),
        ("vector_norm_axes", lambda a: la.vector_norm(a, axis=(0, 2), keepdims=True), (randn(2, 3, 4),)),
        ("vector_norm_3", lambda a: la.vector_norm(a, ord=3), (randn(2, 3, 4),)),
        ("matrix_norm_function", lambda a: la.matrix_norm(a, ord="nuc", keepdims=True), (randn(2, 3, 4),)),
        ("linalg_trace", lambda a: la.trace(a, offset=1), (randn(2, 3, 3),)),
        ("linalg_vecdot", la.vecdot, (randn(2, 3), randn(3))),
        ("linalg_matmul", la.matmul, (randn(2, 3, 4), randn(4, 2))),
    ]

SECOND_ORDER = {
    "inv_batched", "solve_vector", "solve_batched_broadcast", "det", "det_batched", "slogdet",
    "cholesky_lower_read", "cholesky_batched", "eigh_vectors", "eigh_batched", "eigvalsh",
    "vector_norm_2", "vector_norm_3_axis", "matrix_norm_nuc", "matrix_norm_fro_axes",
    "svd_tall", "qr_wide", "pinv_tall", "lstsq_all_outputs",
}


@pytest.mark.parametrize("name, f, args", FIRST_ORDER, ids=[c[0] for c in FIRST_ORDER])
def test_first_order(name, f, args):
    wg.check_grads(f, args, order=1)


@pytest.mark.parametrize("name, f, args", [c for c in FIRST_ORDER if c[0] in SECOND_ORDER],
                         ids=[c[0] for c in FIRST_ORDER if c[0] in SECOND_ORDER])
def test_second_order(name, f, args):
    wg.check_grads(f, args, order=2)


def test_second_order_list_is_current():
    assert SECOND_ORDER <= {c[0] for c in FIRST_ORDER}


@pytest.mark.parametrize("name, f, args", FIRST_ORDER, ids=[c[0] for c in FIRST_ORDER])
def test_traced_values_are_numpys(name, f, args):
    plain = wg.tree.flatten(f(*args))[0]
    traced = wg.tree.flatten(wg.vjp(f, *args)[0])[0]
    assert len(plain) == len(traced)
    for p, t in zip(plain, traced):
        assert np.shape(p) == np.shape(t) and np.result_type(p) == np.result_type(t)
        np.testing.assert_allclose(t, p, rtol=1e-12, atol=1e-12)


# --- plain arrays: NumPy's own answer ---------------------------------------------------------------
PLAIN = [
    ("inv", (general(2, 3, 3),), {}),
    ("solve", (general(3, 3), randn(3)), {}),
    ("det", (general(3, 3),), {}),
    ("slogdet", (general(3, 3),), {}),
    ("cholesky", (spd(3, 3),), {}),
    ("eigh", (spd(3, 3),), {"UPLO": "U"}),
    ("eigvalsh", (spd(3, 3),), {}),
    ("svd", (randn(4, 3),), {}),
    ("svd", (randn(4, 3),), {"compute_uv": False}),
    ("qr", (randn(4, 3),), {"mode": "complete"}),
    ("pinv", (randn(4, 3),), {}),
    ("norm", (randn(3, 4),), {"ord": "nuc"}),
    ("norm", (randn(3, 4),), {"axis": 1, "ord": 3, "keepdims": True}),
    ("matrix_power", (general(3, 3), 3), {}),
    ("cond", (general(3, 3),), {}),
    ("lstsq", (randn(5, 3), randn(5)), {"rcond": None}),
]


@pytest.mark.parametrize("name, args, kwargs", PLAIN, ids=[c[0] for c in PLAIN])
def test_plain_arrays_get_numpys_result(name, args, kwargs):
    ours = getattr(la, name)(*args, **kwargs)
    theirs = getattr(np.linalg, name)(*args, **kwargs)
    assert type(ours) is type(theirs)
    for o, t in zip(wg.tree.flatten(ours)[0], wg.tree.flatten(theirs)[0]):
        assert type(o) is type(t) and np.array_equal(o, t)


def test_multi_dot_plain():
    arrays = [randn(3, 4), randn(4, 5), randn(5, 2)]
    assert np.array_equal(la.multi_dot(arrays), np.linalg.multi_dot(arrays))


def test_named_tuples_on_traced_values():
    a = spd(3, 3)

    def f(a):
        e, s, q, d = la.eigh(a), la.svd(a), la.qr(a), la.slogdet(a)
        for ours, theirs in ((e, np.linalg.eigh(a)), (s, np.linalg.svd(a)), (q, np.linalg.qr(a)),
                             (d, np.linalg.slogdet(a))):
            assert type(ours) is type(theirs)
        return wnp.sum(e[0]) + wnp.sum(s[1]) + wnp.sum(q[1] ** 2) + d[1]

    wg.grad(f)(a)


# --- NumPy's own functions on traced values dispatch here ----------------------------------------------
DISPATCH = [
    (lambda a: np.linalg.inv(a), general(3, 3)),
    (lambda a: np.linalg.solve(a, np.ones(3)), general(3, 3)),
    (lambda a: np.linalg.det(a), general(3, 3)),
    (lambda a: np.linalg.slogdet(a)[1], general(3, 3)),
    (lambda a: np.linalg.cholesky(a), spd(3, 3)),
    (lambda a: np.linalg.eigh(a)[0], spd(3, 3)),
    (lambda a: np.linalg.eigvalsh(a), spd(3, 3)),
    (lambda a: np.linalg.svd(a, compute_uv=False), randn(3, 2)),
    (lambda a: np.linalg.qr(a)[1], randn(3, 2)),
    (lambda a: np.linalg.pinv(a), randn(3, 2)),
    (lambda a: np.linalg.norm(a, 2), randn(3, 2)),
    (lambda a: np.linalg.matrix_power(a, 3), general(3, 3)),
    (lambda a: np.linalg.multi_dot([a, a.T, a]), randn(3, 2)),
]


@pytest.mark.parametrize("f, a", DISPATCH)
def test_numpy_linalg_dispatches_on_tracers(f, a):
    wg.check_grads(f, (a,), order=1)


def test_wnp_linalg_is_wengerts():
    assert la.__name__ == "wengert.numpy.linalg"
    assert la.LinAlgError is np.linalg.LinAlgError


# --- degenerate points ---------------------------------------------------------------------------------
def test_eigenvalue_gradients_at_repeated_eigenvalues():
    eye = np.eye(3)
    assert np.allclose(wg.grad(lambda a: wnp.sum(la.eigh(a)[0] ** 2))(eye), 2 * eye)
    assert np.allclose(wg.grad(lambda a: la.norm(a, "nuc"))(eye), eye)


def test_projector_gradient_at_repeated_eigenvalue():
    """The projector onto a repeated eigenvalue's eigenspace does not depend on the chosen basis."""
    weights = randn(3, 3)

    def projector(a):
        v = la.eigh(a)[1][:, 1:]
        return wnp.sum((v @ v.T) * weights)

    wg.check_grads(projector, (np.diag([1.0, 2.0, 2.0]),), order=1)


def test_det_gradient_at_singular_matrices():
    singular = np.diag([1.0, 2.0, 0.0])
    assert np.allclose(wg.grad(la.det)(singular), np.diag([0.0, 0.0, 2.0]))
    nearly = randn(3, 2) @ randn(2, 3)
    wg.check_grads(la.det, (np.stack([nearly, general(3, 3)]),), order=2)


def test_norm_gradient_at_zero_is_zero():
    assert np.array_equal(wg.grad(la.norm)(np.zeros(3)), np.zeros(3))
    assert np.array_equal(wg.grad(lambda x: la.norm(x, 3))(np.zeros(3)), np.zeros(3))


@pytest.mark.parametrize("f", [
    lambda a: wnp.sum(la.svd(a)[0]),
    lambda a: wnp.sum(la.qr(a, mode="complete")[0]),
])
def test_arbitrary_basis_completions_raise(f):
    with pytest.raises(NotImplementedError, match="arbitrary orthonormal basis"):
        wg.grad(f)(randn(4, 2))


def test_qr_raw_is_not_differentiable():
    with pytest.raises(NotImplementedError, match="raw"):
        wg.grad(lambda a: wnp.sum(la.qr(a, mode="raw")[0]))(randn(3, 3))


def test_float32_stays_float32():
    a = spd(3, 3).astype(np.float32)
    g = wg.grad(lambda a: wnp.sum(la.inv(a)) + la.det(a) + wnp.sum(la.eigh(a)[0]) + la.norm(a)
                + wnp.sum(la.svd(a)[1]) + wnp.sum(la.cholesky(a)))(a)
    assert g.dtype == np.float32


def test_matrix_rank_reads_traced_values():
    g = wg.grad(lambda a: np.linalg.matrix_rank(a) * wnp.sum(a))(np.eye(3))
    assert np.array_equal(g, np.full((3, 3), 3.0))

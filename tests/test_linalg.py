"""wengert.numpy.linalg: gradients against finite differences, NumPy's values, NumPy's dispatch.

Eigen- and singular vectors are defined up to sign, so the functions of them checked here are
sign-invariant (even powers, reconstructions). Inputs are well conditioned: symmetric positive
definite matrices ``B B^T + n I`` and random matrices with ``3 I`` added.
"""
import functools
import warnings

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
import wengert.scipy.linalg as wsl

from transform_checks import grad_inside, inside_vmap_equals_loop, refuse_transposed_jvp

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


def _counting(monkeypatch, name):
    calls = []
    original = getattr(np.linalg, name)

    def counted(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(np.linalg, name, counted)
    return calls


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigvalsh_gradient_factors_once(monkeypatch, uplo):
    """The eigenvectors eigvalsh's rules need come from the forward pass's one factorization (as
    PyTorch keeps them), not from a second eigh in the backward pass; the values and gradient stay
    NumPy's and the finite differences'."""
    a = lower_read(4, 4)
    weights = randn(4)
    loss = lambda a: wnp.sum(la.eigvalsh(a, UPLO=uplo) * weights)
    expected = np.sum(np.linalg.eigvalsh(a, UPLO=uplo) * weights)
    eigh_calls, eigvalsh_calls = _counting(monkeypatch, "eigh"), _counting(monkeypatch, "eigvalsh")
    value, g = wg.value_and_grad(loss)(a)
    assert (len(eigh_calls), len(eigvalsh_calls)) == (1, 0)
    assert np.allclose(value, expected, rtol=1e-12)
    v = np.linalg.eigh(a, UPLO=uplo)[1]
    full = (v * weights) @ v.T      # d/dA of sum(w * eigenvalues) for a symmetric A
    folded = np.tril(full + full.T - np.diag(np.diag(full))) if uplo == "L" else \
        np.triu(full + full.T - np.diag(np.diag(full)))
    assert np.allclose(g, folded)
    eigh_calls.clear()
    assert np.allclose(la.eigvalsh(a, UPLO=uplo), np.linalg.eigvalsh(a, UPLO=uplo))   # plain: eigvalsh alone
    assert (len(eigh_calls), len(eigvalsh_calls)) == (0, 1)
    wg.check_grads(loss, (a,), order=2)


@pytest.mark.parametrize("spelling", ["svd", "norm", "cond"])
def test_singular_value_gradient_factors_once(monkeypatch, spelling):
    """svdvals (svd without vectors, the 2- and nuclear norms, cond) keeps the singular vectors of
    its forward factorization for the rules: one svd per gradient, not a second one backward."""
    a = general(4, 3)
    weights = randn(3)
    loss = {"svd": lambda a: wnp.sum(la.svd(a, compute_uv=False) * weights),
            "norm": lambda a: la.norm(a, "nuc") + la.norm(a, 2),
            "cond": lambda a: la.cond(a)}[spelling]
    calls = []
    original = np.linalg.svd
    monkeypatch.setattr(np.linalg, "svd", lambda *args, **kw: calls.append(kw.get("compute_uv", True)) or
                        original(*args, **kw))
    value, g = wg.value_and_grad(loss)(a)
    assert calls == [True] * (2 if spelling == "norm" else 1)
    assert np.allclose(loss(a), value)
    wg.check_grads(loss, (a,), order=2)


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


# --- forward mode: the JVP rules (not the transposed-VJP fallback) --------------------------------------
LINALG_PRIMITIVES = {"inv", "solve", "det", "slogdet", "cholesky", "eigh", "eigvalsh", "svd", "svdvals", "qr",
                     "pinv", "lstsq", "pnorm"}


@pytest.fixture
def own_jvp_rules(monkeypatch):
    """Forward mode must run the linalg primitives' own JVP rules: falling back to their VJP fails."""
    refuse_transposed_jvp(monkeypatch, lambda name: name in LINALG_PRIMITIVES)


def test_every_linalg_primitive_has_a_jvp_rule():
    from wengert.primitives._table import PRIMITIVES
    for name in LINALG_PRIMITIVES:
        p = PRIMITIVES[name]
        assert p.jvp is not None or p.fused_jvp is not None, name


@pytest.mark.parametrize("name, f, args", FIRST_ORDER, ids=[c[0] for c in FIRST_ORDER])
def test_forward_mode(name, f, args, own_jvp_rules):
    """JVPs against finite differences; on the order-2 rows also forward over reverse (hvp)."""
    wg.check_grads(f, args, order=2 if name in SECOND_ORDER else 1, modes=("fwd",))


def _projector(v):
    return v @ wnp.swapaxes(v, -1, -2)


WEIGHTS = randn(5, 5)


@pytest.mark.parametrize("f", [
    lambda a: wnp.sum(WEIGHTS * _projector(la.svd(a)[0][:, 3:])),
    lambda a: wnp.sum(WEIGHTS * _projector(wnp.swapaxes(la.svd(a.T)[2][3:], 0, 1))),
    lambda a: wnp.sum(WEIGHTS * _projector(la.qr(a, mode="complete")[0][:, 3:])),
    lambda a: wnp.sum(la.qr(a, mode="complete")[1] ** 3),
], ids=["svd_u", "svd_vh", "qr_q", "qr_r"])
def test_forward_mode_basis_completions(f, own_jvp_rules):
    """The completing columns get a tangent that is exact for their projector (reverse mode refuses them)."""
    wg.check_grads(f, (randn(5, 3),), modes=("fwd",))


def test_forward_mode_det_at_singular_matrices(own_jvp_rules):
    t = randn(3, 3)
    _, dt = wg.jvp(la.det, (np.diag([1.0, 2.0, 0.0]),), (t,))
    np.testing.assert_allclose(dt, 2 * t[2, 2])
    nearly = randn(3, 2) @ randn(2, 3)
    wg.check_grads(la.det, (np.stack([nearly, general(3, 3)]),), order=2, modes=("fwd",))


@pytest.mark.parametrize("name, f, x", [
    ("inv", la.inv, general(3, 3)),
    ("solve", lambda a: la.solve(a, np.arange(3.0)), general(3, 3)),
    ("solve_b", lambda b, a=general(2, 3, 3): la.solve(a, b), randn(3, 2)),
    ("det", la.det, general(2, 3, 3)),
    ("slogdet", lambda a: la.slogdet(a)[1], general(3, 3)),
    ("cholesky", la.cholesky, spd(3, 3)),
    ("eigh", lambda a: la.eigh(a)[1] ** 2, lower_read(3, 3)),
    ("svd", lambda a: reconstruct(la.svd(a, full_matrices=False)) + la.svd(a)[0][:, :2] ** 2, randn(4, 2)),
    ("qr_wide", lambda a: la.qr(a)[1], randn(2, 3)),
    ("pinv", la.pinv, randn(4, 3)),
    ("lstsq", lambda a: la.lstsq(a, np.arange(4.0))[1], randn(4, 2)),
    ("norm_3", lambda a: la.norm(a, 3, axis=0), randn(3, 2)),
    ("slogdet_batched", lambda a: la.slogdet(a)[1], general(2, 3, 3)),
    ("cholesky_upper", lambda a: la.cholesky(a, upper=True), spd(3, 3)),
    ("eigvalsh", la.eigvalsh, lower_read(3, 3)),
    ("svdvals", lambda a: la.svd(a, compute_uv=False), randn(3, 4)),
    ("qr_tall", lambda a: la.qr(a)[0] ** 2 + la.qr(a)[1][0, 0], randn(4, 3)),
    ("pinv_hermitian", lambda a: la.pinv(a, hermitian=True), lower_read(3, 3)),
    ("lstsq_b", lambda b, a=randn(5, 3): lstsq_mix(la.lstsq(a, b)), randn(5, 2)),
    ("norm_all", lambda a: la.norm(a, keepdims=True), randn(2, 2, 3)),
    ("sqrtm", wsl.sqrtm, spd(3, 3)),
    ("sylvester_a", lambda a, b=general(2, 2), q=randn(3, 2): wsl.solve_sylvester(a, b, q), general(3, 3)),
    ("sylvester_q", lambda q, a=general(3, 3): wsl.solve_sylvester(a, a.T, q), randn(3, 3)),
])
def test_jacfwd_equals_jacobian(name, f, x, own_jvp_rules):
    """One JVP with a batch of tangents (vmap over the JVP rules, solve's and solve_sylvester's batch
    rules) = reverse mode."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no per-example loop: every rule's operation has a batch rule
        forward = wg.jacfwd(f)(x)
    np.testing.assert_allclose(forward, wg.jacobian(f)(x), rtol=1e-9, atol=1e-10)


def test_hessians_by_forward_over_reverse(own_jvp_rules):
    a = spd(4, 4)
    inv = np.linalg.inv(a)
    h = wg.hessian(lambda a: la.slogdet(a)[1])(a)
    np.testing.assert_allclose(h, -np.einsum("jk,li->ijkl", inv, inv), atol=1e-12)
    b = randn(4)

    def quadratic(a):
        return b @ la.solve(a, b)

    np.testing.assert_allclose(wg.hessian(quadratic)(a), wg.jacobian(wg.grad(quadratic))(a), atol=1e-12)
    h = wg.hessian(lambda b: b @ la.solve(a, b))(b)
    np.testing.assert_allclose(h, inv + inv.T, atol=1e-12)


@pytest.mark.parametrize("a_axis, b_axis, a_shape, b_shape", [
    (None, 0, (3, 3), (5, 3, 2)), (None, 0, (2, 3, 3), (5, 3, 2)), (None, 0, (3, 3), (5, 2, 3, 1)),
    (0, None, (5, 3, 3), (3, 2)), (0, None, (5, 3, 3), (2, 3, 2)), (0, 0, (5, 2, 3, 3), (5, 3, 2)),
])
def test_vmap_of_solve(a_axis, b_axis, a_shape, b_shape):
    from wengert.primitives.linalg import solve
    a, b = randn(*a_shape) + 3 * np.eye(3), randn(*b_shape)
    out = wg.vmap(solve, in_axes=(a_axis, b_axis))(a, b)
    expected = np.stack([np.linalg.solve(a if a_axis is None else a[i], b if b_axis is None else b[i])
                         for i in range(5)])
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


# --- complex matrices -----------------------------------------------------------------------------------
def _complex(*shape):
    return randn(*shape) + 1j * randn(*shape)


def _hermitian_read(n):
    """Hermitian positive definite in the lower triangle; noise above it and on the diagonal's imaginary
    part, which NumPy's hermitian=True routes (eigh) do not read."""
    b = _complex(n, n)
    return b @ b.conj().T + n * np.eye(n) + np.triu(_complex(n, n))


COMPLEX = [
    ("inv", la.inv, (_complex(3, 3) + 3 * np.eye(3),)),
    ("det", la.det, (_complex(2, 3, 3) + 3 * np.eye(3),)),
    ("solve", la.solve, (_complex(3, 3) + 3 * np.eye(3), _complex(3, 2))),
    ("solve_real_b", la.solve, (_complex(3, 3) + 3 * np.eye(3), randn(3))),
    ("slogdet", lambda a: tuple(la.slogdet(a)), (_complex(2, 3, 3) + 3 * np.eye(3),)),
    ("pinv_tall", la.pinv, (_complex(4, 3),)),
    ("pinv_wide_batched", la.pinv, (_complex(2, 3, 4),)),
    ("pinv_hermitian", lambda a: la.pinv(a, hermitian=True), (_hermitian_read(3),)),
    ("lstsq", lambda a, b: la.lstsq(a, b)[:2], (_complex(5, 3), _complex(5, 2))),
    ("lstsq_values", lambda a, b: la.lstsq(a, b)[3], (_complex(5, 3), randn(5))),
]


@pytest.mark.parametrize("name, f, args", COMPLEX, ids=[c[0] for c in COMPLEX])
def test_complex_jvp_against_finite_differences(name, f, args, own_jvp_rules):
    """J t along a complex direction (the real-linear map of docs/complex.md), sign of slogdet included."""
    rng_c = np.random.default_rng(3)
    tangents = tuple(rng_c.standard_normal(np.shape(a)) + (1j * rng_c.standard_normal(np.shape(a))
                     if np.iscomplexobj(a) else 0) for a in args)
    _, jvp_out = wg.jvp(f, args, tangents)
    eps = 1e-6
    plus = f(*[a + eps * t for a, t in zip(args, tangents)])
    minus = f(*[a - eps * t for a, t in zip(args, tangents)])
    for j, p, m in zip(wg.tree.flatten(jvp_out)[0], wg.tree.flatten(plus)[0], wg.tree.flatten(minus)[0]):
        np.testing.assert_allclose(j, (np.asarray(p) - np.asarray(m)) / (2 * eps), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name, f, args", [
    ("slogdet_sign", lambda a: wnp.real(la.slogdet(a)[0] * (1 - 3j)), (_complex(2, 3, 3) + 3 * np.eye(3),)),
    ("pinv_tall", lambda a: wnp.abs(la.pinv(a)), (_complex(4, 3),)),
    ("pinv_wide_batched", lambda a: wnp.real(la.pinv(a)), (_complex(2, 3, 4),)),
    ("pinv_hermitian", lambda a: wnp.real(la.pinv(a, hermitian=True) * (1 + 2j)), (_hermitian_read(3),)),
    ("lstsq", lambda a, b: wnp.sum(wnp.abs(la.lstsq(a, b)[0]) ** 2) + wnp.sum(la.lstsq(a, b)[1]),
     (_complex(5, 3), _complex(5, 2))),
    ("lstsq_values", lambda a, b: la.lstsq(a, b)[3], (_complex(5, 3), randn(5))),
])
def test_complex_reverse_mode(name, f, args):
    """Reverse mode is the transpose of those JVPs: pinv's dA^H terms (and the Hermitian triangle read),
    |r|^2 and the complex sign."""
    wg.check_grads(f, args, order=1)


@pytest.mark.parametrize("name, f, args", [
    ("slogdet_log_squared", lambda a: la.slogdet(a)[1] ** 2, (_complex(3, 3) + 3 * np.eye(3),)),
    ("slogdet_sign_times_log", lambda a: (lambda s: wnp.real(s[0] * (2 - 1j)) * s[1])(la.slogdet(a)),
     (_complex(3, 3) + 3 * np.eye(3),)),
    ("lstsq_residuals", lambda a, b: wnp.sum(la.lstsq(a, b)[1] ** 2), (_complex(5, 3), _complex(5, 2))),
])
def test_complex_second_order(name, f, args):
    """Real outputs of complex matrices (log|det|, residuals) pass on the real part of their cotangent."""
    wg.check_grads(f, args, order=2, modes=("fwd", "rev"))


def test_complex_lstsq_singular_values_to_second_order():
    a, b = _complex(5, 3), _complex(5)
    wg.check_grads(lambda a: wnp.sum(la.lstsq(a, b)[3] ** 2), (a,), order=2, modes=("fwd", "rev"))


# --- vmap: batching rules (no per-example loop) ----------------------------------------------------------

B = 3  # batch size


def _no_loop_vmap(f, *args, in_axes=0):
    """vmap(f)(*args), failing on any warning (a primitive without a batching rule loops with one)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = wg.vmap(f, in_axes=in_axes)(*args)
    assert not caught, [str(w.message) for w in caught]
    return out


def _assert_trees_close(ours, theirs, rtol=1e-10, atol=1e-12):
    ours, theirs = wg.tree.flatten(ours)[0], wg.tree.flatten(theirs)[0]
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        assert np.shape(o) == np.shape(t)
        np.testing.assert_allclose(o, t, rtol=rtol, atol=atol)


def _loop(f, *args, in_axes=0):
    """np.stack([f(example) for each example]): vmap's meaning, one call at a time."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    size = next(np.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None)
    outs = [f(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, axes)]) for i in range(size)]
    return wg.tree.unflatten(wg.tree.flatten(outs[0])[1],
                             [np.stack(leaves) for leaves in zip(*[wg.tree.flatten(o)[0] for o in outs])])


def _square(x):
    """Sign-invariant stand-in for eigen/singular vectors and Q (each column is defined up to sign)."""
    return x * x


# (name, per-example function, batched arguments): the batch on axis 0 of every argument.
VMAP = [
    ("inv", la.inv, (general(B, 3, 3),)),
    ("inv_stacked_examples", la.inv, (general(B, 2, 3, 3),)),
    ("det", la.det, (general(B, 3, 3),)),
    ("slogdet", lambda a: tuple(la.slogdet(a)), (general(B, 3, 3) - 4 * np.eye(3),)),
    ("cholesky", la.cholesky, (lower_read(B, 3, 3),)),
    ("cholesky_upper", lambda a: la.cholesky(a, upper=True), (spd(B, 3, 3) + np.tril(randn(B, 3, 3), -1),)),
    ("eigh", lambda a: (lambda w, v: (w, _square(v)))(*la.eigh(a)), (lower_read(B, 3, 3),)),
    ("eigh_upper", lambda a: la.eigh(a, UPLO="U")[0], (spd(B, 3, 3) + np.tril(randn(B, 3, 3), -1),)),
    ("eigvalsh", la.eigvalsh, (lower_read(B, 4, 4),)),
    ("svd", lambda a: (lambda u, s, vt: (_square(u), s, _square(vt)))(*la.svd(a)), (randn(B, 3, 3),)),
    ("svd_reduced_tall", lambda a: reconstruct(la.svd(a, full_matrices=False)) + la.svd(a)[1][0],
     (randn(B, 4, 2),)),
    ("svd_full_wide", lambda a: (lambda u, s, vt: (_square(u), s, _square(vt[:2])))(*la.svd(a)), (randn(B, 2, 4),)),
    ("svd_hermitian", lambda a: reconstruct(la.svd(a, hermitian=True)), (spd(B, 3, 3),)),
    ("svdvals", lambda a: la.svd(a, compute_uv=False), (randn(B, 3, 4),)),
    ("qr", lambda a: (lambda q, r: (_square(q), _square(r)))(*la.qr(a)), (randn(B, 4, 3),)),
    ("qr_wide", lambda a: (lambda q, r: q @ r + _square(r)[0, 0])(*la.qr(a)), (randn(B, 2, 3),)),
    ("qr_complete", lambda a: _square(la.qr(a, mode="complete")[1]), (randn(B, 4, 2),)),
    ("pinv", la.pinv, (randn(B, 4, 3),)),
    ("pinv_hermitian", lambda a: la.pinv(a, hermitian=True), (lower_read(B, 3, 3),)),
    ("pinv_rcond", lambda a: la.pinv(a, rcond=1e-3), (randn(B, 3, 4),)),
    ("lstsq_vector", lambda a, b: tuple(la.lstsq(a, b)), (randn(B, 5, 3), randn(B, 5))),
    ("lstsq_matrix", lambda a, b: tuple(la.lstsq(a, b)), (randn(B, 5, 3), randn(B, 5, 2))),
    ("lstsq_wide", lambda a, b: la.lstsq(a, b)[:2], (randn(B, 3, 5), randn(B, 3))),
    ("lstsq_rank_deficient", lambda a, b: la.lstsq(a, b, rcond=1e-10)[:3],
     (np.repeat(randn(B, 5, 1), 2, axis=-1), randn(B, 5))),
    ("norm", la.norm, (randn(B, 3, 4),)),
    ("norm_3d_keepdims", lambda a: la.norm(a, keepdims=True), (randn(B, 2, 3, 4),)),
    ("norm_vector_2", lambda a: la.norm(a, 2), (randn(B, 4),)),
    ("norm_fro", lambda a: la.norm(a, "fro", keepdims=True), (randn(B, 3, 4),)),
    ("norm_3_axis", lambda a: la.norm(a, 3, axis=-1), (randn(B, 3, 4),)),
    ("norm_matrix_axes", lambda a: la.norm(a, axis=(2, 0), keepdims=True), (randn(B, 4, 2, 3),)),
    ("sqrtm", wsl.sqrtm, (spd(B, 3, 3),)),
    ("solve_sylvester", wsl.solve_sylvester, (general(B, 3, 3), general(B, 2, 2), randn(B, 3, 2))),
]
if NUMPY2:
    VMAP.append(("linalg_svdvals", la.svdvals, (randn(B, 4, 3),)))


@pytest.mark.parametrize("name, f, args", VMAP, ids=[c[0] for c in VMAP])
def test_vmap_equals_loop_without_warning(name, f, args):
    _assert_trees_close(_no_loop_vmap(f, *args), _loop(f, *args))


def test_vmap_covers_every_linalg_primitive():
    """Every linalg primitive has a batching rule of its own (none is looped over examples)."""
    from wengert.primitives._table import PRIMITIVES
    for name in LINALG_PRIMITIVES | {"scipy.linalg.sqrtm", "scipy.linalg.solve_sylvester"}:
        assert PRIMITIVES[name].batch is not None, name


@pytest.mark.parametrize("name, f, args, in_axes", [
    ("inv_last_axis", la.inv, (np.moveaxis(general(B, 3, 3), 0, -1),), 2),
    ("norm_middle_axis", lambda a: la.norm(a, 3, axis=0), (np.moveaxis(randn(B, 4, 2), 0, 1),), 1),
    ("eigvalsh_middle", la.eigvalsh, (np.moveaxis(spd(B, 3, 3), 0, 1),), 1),
    ("lstsq_b_only", lambda a, b: tuple(la.lstsq(a, b)), (randn(5, 3), np.moveaxis(randn(B, 5, 2), 0, -1)), (None, 2)),
    ("lstsq_b_vector_only", lambda a, b: tuple(la.lstsq(a, b)), (randn(5, 3), randn(B, 5)), (None, 0)),
    ("lstsq_a_only", lambda a, b: tuple(la.lstsq(a, b)), (randn(B, 5, 3), randn(5)), (0, None)),
    ("lstsq_wide_b_only", lambda a, b: la.lstsq(a, b)[:2], (randn(3, 5), randn(B, 3)), (None, 0)),
    ("sylvester_q_only", wsl.solve_sylvester, (general(3, 3), general(2, 2), np.moveaxis(randn(B, 3, 2), 0, 1)),
     (None, None, 1)),
    ("sylvester_b_q", wsl.solve_sylvester, (general(3, 3), general(B, 2, 2), randn(3, 2)), (None, 0, None)),
    ("sylvester_stacked_example", wsl.solve_sylvester, (general(2, 3, 3), general(B, 2, 2), randn(3, 2)),
     (None, 0, None)),
])
def test_vmap_in_axes(name, f, args, in_axes):
    _assert_trees_close(_no_loop_vmap(f, *args, in_axes=in_axes), _loop(f, *args, in_axes=in_axes))


def test_vmap_of_lstsq_with_and_without_residuals_loops():
    """Examples that disagree on having residuals (full column rank or not) cannot share one output shape:
    that batch runs once per example, with the warning."""
    a = randn(2, 5, 2)
    a[1, :, 1] = a[1, :, 0]
    b = randn(2, 5)
    with pytest.warns(UserWarning, match="once per example") as caught:
        out = wg.vmap(lambda a, b: la.lstsq(a, b)[0])(a, b)
    assert any("no batching rule for lstsq" in str(w.message) for w in caught)
    _assert_trees_close(out, _loop(lambda a, b: la.lstsq(a, b)[0], a, b))


def _float_leaves(out):
    """The differentiable outputs (lstsq's integer rank left out)."""
    return [leaf for leaf in wg.tree.flatten(out)[0] if np.issubdtype(leaf.dtype, np.inexact)]


SMOOTH = [c for c in VMAP if c[0] != "lstsq_rank_deficient"]  # rank-deficient: no derivative there
VMAP_SECOND_ORDER = {"inv", "slogdet", "cholesky", "eigh", "svd_reduced_tall", "qr", "pinv", "lstsq_matrix",
                     "norm_3_axis", "sqrtm", "solve_sylvester"}


@pytest.mark.parametrize("name, f, args", SMOOTH, ids=[c[0] for c in SMOOTH])
def test_gradients_through_vmap(name, f, args):
    """Reverse and forward mode through the batched call (an outer grad/jvp records it) against
    finite differences, with no per-example loop."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        wg.check_grads(lambda *a: _float_leaves(wg.vmap(f)(*a)), args, modes=("fwd", "rev"),
                       order=2 if name in VMAP_SECOND_ORDER else 1)


def test_vmap_second_order_list_is_current():
    assert VMAP_SECOND_ORDER <= {c[0] for c in SMOOTH}


WEIGHTS_3 = randn(3, 3)

# (name, loss(w, x), w, batch of x): per-example gradients in w, vmap(grad(loss), in_axes=(None, 0)).
PER_EXAMPLE = [
    ("inv", lambda w, x: wnp.sum(la.inv(w + x) * WEIGHTS_3), general(3, 3), 0.3 * randn(B, 3, 3)),
    ("det", lambda w, x: la.det(w * x), general(3, 3), 1 + 0.3 * randn(B, 3, 3)),
    ("slogdet", lambda w, x: la.slogdet(w + x)[1], general(3, 3), 0.3 * randn(B, 3, 3)),
    ("cholesky", lambda w, x: wnp.sum(la.cholesky(w + x @ x.T) * WEIGHTS_3), spd(3, 3), randn(B, 3, 3)),
    ("eigh", lambda w, x: eig_mix(la.eigh(w + x @ x.T)), spd(3, 3), randn(B, 3, 3)),
    ("eigvalsh", lambda w, x: wnp.sum(la.eigvalsh(w @ x + x.T @ w.T) ** 3), randn(3, 3), randn(B, 3, 3)),
    ("svd", lambda w, x: svd_mix(la.svd(w @ x, full_matrices=False)), randn(4, 3), randn(B, 3, 2)),
    ("svdvals", lambda w, x: wnp.sum(la.svd(w @ x, compute_uv=False) ** 3), randn(4, 3), randn(B, 3, 3)),
    ("qr", lambda w, x: wnp.sum(la.qr(w @ x)[1] ** 2) + wnp.sum(la.qr(w @ x)[0] ** 4), randn(4, 3), randn(B, 3, 3)),
    ("pinv", lambda w, x: wnp.sum(la.pinv(w * x) * WEIGHTS_3[:2]), randn(3, 2), randn(B, 3, 2)),
    ("lstsq_b", lambda w, x: lstsq_mix(la.lstsq(w, x)), randn(5, 3), randn(B, 5, 2)),
    ("lstsq_a", lambda w, x: lstsq_mix(la.lstsq(w + x, w[:, 0])), randn(5, 3), 0.3 * randn(B, 5, 3)),
    ("norm", lambda w, x: wnp.sum(la.norm(w @ x, 3, axis=0)) + la.norm(w @ x), randn(3, 3), randn(B, 3, 2)),
    ("sqrtm", lambda w, x: wnp.sum(wsl.sqrtm(w + x @ x.T) * WEIGHTS_3), spd(3, 3), randn(B, 3, 3)),
    ("solve_sylvester", lambda w, x: wnp.sum(wsl.solve_sylvester(w, w.T, x) ** 2), general(3, 3),
     randn(B, 3, 3)),
]


@pytest.mark.parametrize("name, loss, w, xs", PER_EXAMPLE, ids=[c[0] for c in PER_EXAMPLE])
def test_per_example_gradients(name, loss, w, xs):
    batched = _no_loop_vmap(wg.grad(loss), w, xs, in_axes=(None, 0))
    expected = np.stack([wg.grad(loss)(w, x) for x in xs])
    np.testing.assert_allclose(batched, expected, rtol=1e-9, atol=1e-11)


# complex matrices under vmap: the functions that take them
COMPLEX_VMAP = [
    ("inv", la.inv, (_complex(B, 3, 3) + 3 * np.eye(3),)),
    ("det", la.det, (_complex(B, 3, 3) + 3 * np.eye(3),)),
    ("slogdet", lambda a: tuple(la.slogdet(a)), (_complex(B, 3, 3) + 3 * np.eye(3),)),
    ("pinv", la.pinv, (_complex(B, 4, 3),)),
    ("pinv_hermitian", lambda a: la.pinv(a, hermitian=True), (np.stack([_hermitian_read(3) for _ in range(B)]),)),
    ("lstsq", lambda a, b: la.lstsq(a, b)[:2], (_complex(B, 5, 3), _complex(B, 5, 2))),
    ("lstsq_b_only", lambda b, a=_complex(5, 3): la.lstsq(a, b)[:2], (_complex(B, 5),)),
    ("lstsq_values", lambda a, b: la.lstsq(a, b)[3], (_complex(B, 5, 3), randn(B, 5))),
]


def _real_view(out):
    """A real function of complex outputs: both parts of every leaf."""
    return [part for leaf in _float_leaves(out) for part in (wnp.real(leaf), wnp.imag(leaf))]


@pytest.mark.parametrize("name, f, args", COMPLEX_VMAP, ids=[c[0] for c in COMPLEX_VMAP])
def test_complex_vmap(name, f, args):
    """Values equal a loop without warning; forward and reverse mode through vmap match finite
    differences along complex directions."""
    _assert_trees_close(_no_loop_vmap(f, *args), _loop(f, *args))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        wg.check_grads(lambda *a: _real_view(wg.vmap(f)(*a)), args, modes=("fwd", "rev"))


# --- a grad inside vmap: the tape records batched values (prim.batched_vjp) -------------------------
_inside_vmap_equals_loop = functools.partial(inside_vmap_equals_loop, rtol=1e-8, atol=1e-10)


def _sum_sin(f):
    return lambda *a: wnp.sum(wnp.sin(f(*a)))


_R = np.random.default_rng(32)
_A = _R.standard_normal((3, 3, 3)) + 3 * np.eye(3)
_B = _R.standard_normal((3, 3, 2))
_SPD = _A @ np.swapaxes(_A, -1, -2) + np.eye(3)
_TALL = _R.standard_normal((3, 4, 3))
_L = wnp.linalg
_GRAD_INSIDE_CASES = {
    "inv": (_sum_sin(_L.inv), (_A,), (0,), 0),
    "solve": (_sum_sin(_L.solve), (_A, _B), (0, 0), (0, 1)),
    "solve, one matrix": (_sum_sin(_L.solve), (_A[0], _B), (None, 0), (0, 1)),
    "solve, one right-hand side": (_sum_sin(_L.solve), (_A, _B[0, :, 0]), (0, None), (0, 1)),
    "det": (lambda a, c: _L.det(a * c), (_A, _B[0, :, :1]), (0, None), (0, 1)),
    "slogdet": (lambda a: _L.slogdet(a)[1] * _L.slogdet(a)[0], (_A,), (0,), 0),
    "cholesky": (_sum_sin(_L.cholesky), (_SPD,), (0,), 0),
    "cholesky of an unbatched matrix plus a batched diagonal": (
        lambda a, d: wnp.sum(_L.cholesky(a + d * np.eye(3))), (_SPD[0], _B[:, :, 0] ** 2), (None, 0), (0, 1)),
    "eigh values": (lambda a: wnp.sum(wnp.sin(_L.eigh(a)[0])), (_SPD,), (0,), 0),
    "eigh vectors": (lambda a: wnp.sum(_L.eigh(a)[1] ** 2 * wnp.arange(3.0)), (_SPD,), (0,), 0),
    "eigvalsh": (_sum_sin(_L.eigvalsh), (_SPD,), (0,), 0),
    "svd": (lambda a: wnp.sum(wnp.abs(_L.svd(a, full_matrices=False)[0][:, 0]))
            + wnp.sum(wnp.sin(_L.svd(a, full_matrices=False)[1])), (_TALL,), (0,), 0),
    "svdvals": (_sum_sin(lambda a: _L.svd(a, compute_uv=False)), (_TALL,), (0,), 0),
    "qr": (lambda a: wnp.sum(wnp.sin(_L.qr(a)[0])) + wnp.sum(wnp.sin(_L.qr(a)[1])), (_TALL,), (0,), 0),
    "pinv": (_sum_sin(_L.pinv), (_TALL,), (0,), 0),
    "lstsq": (lambda a, b: wnp.sum(wnp.sin(_L.lstsq(a, b, rcond=None)[0])) + wnp.sum(_L.lstsq(a, b, rcond=None)[1]),
              (_TALL, _R.standard_normal((3, 4, 2))), (0, 0), (0, 1)),
    "lstsq, one matrix": (_sum_sin(lambda a, b: _L.lstsq(a, b, rcond=None)[0]),
                          (_TALL[0], _R.standard_normal((3, 4, 2))), (None, 0), (0, 1)),
    "norm": (lambda a: _L.norm(a) + wnp.sum(_L.norm(a, ord=3, axis=-1)), (_TALL,), (0,), 0),
    "norm of a zero row": (lambda a: wnp.sum(_L.norm(a, axis=-1)), (_TALL * np.array([1, 0, 1])[:, None, None],),
                           (0,), 0),
    "solve_triangular, one matrix": (_sum_sin(wsl.solve_triangular), (np.triu(_A[0]), _B), (None, 0), (0, 1)),
    "expm": (_sum_sin(wsl.expm), (0.3 * _A,), (0,), 0),
    "sqrtm": (_sum_sin(wsl.sqrtm), (_SPD,), (0,), 0),
    "solve_sylvester": (_sum_sin(wsl.solve_sylvester), (_A[0], _A[::-1] + 1, _B[:, :, :1].repeat(3, 2)),
                        (None, 0, 0), (0, 1, 2)),
}


@pytest.mark.parametrize("name", list(_GRAD_INSIDE_CASES))
def test_grad_inside_vmap_is_batched_and_equals_a_loop(name):
    loss, args, in_axes, argnums = _GRAD_INSIDE_CASES[name]
    _inside_vmap_equals_loop(grad_inside(loss, argnums), args, in_axes)


def test_grad_inside_vmap_of_solve_triangular_with_batched_matrices_equals_a_loop():
    """Its forward pass has no rule for a batch of matrices (one call per example, with vmap's
    warning); the rules then run on batched values too."""
    loss = _sum_sin(lambda a, b: wsl.solve_triangular(a, b, lower=True, trans=1))
    _inside_vmap_equals_loop(grad_inside(loss, (0, 1)), (np.tril(_A), _B), (0, 0), allow_fallback=True)


def test_grad_inside_vmap_of_det_at_singular_matrices_equals_a_loop():
    """The cofactor formula (prod over singular values) for the singular example only."""
    a = _A.copy()
    a[1, 0] = a[1, 1]
    _inside_vmap_equals_loop(grad_inside(_L.det), (a,), (0,), allow_fallback=True)


@pytest.mark.parametrize("f", [_L.inv, _L.cholesky, lambda a: _L.eigh(a)[0], lambda a: _L.solve(a, a[0])])
def test_jacobian_inside_vmap_is_batched(f):
    _inside_vmap_equals_loop(wg.jacobian(f), (_SPD,), (0,))


@pytest.mark.parametrize("loss", [_L.det, lambda a: _L.slogdet(a)[1], _sum_sin(_L.inv), _sum_sin(_L.eigvalsh),
                                  _sum_sin(_L.cholesky), lambda a: _L.norm(a)])
def test_hessian_inside_vmap_is_batched(loss):
    _inside_vmap_equals_loop(wg.hessian(loss), (_SPD[:, :2, :2],), (0,))


# --- general (non-symmetric) eigenproblem: eig and eigvals ------------------------------------------------
def _nonsymmetric(seed, complex_values=False, shape=(3, 3)):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    return a + 1j * rng.standard_normal(shape) if complex_values else a


EIG_CASES = {  # functions that do not depend on the eigenvectors' phase (LAPACK's, arbitrary)
    "eigvals": lambda a: la.eigvals(a),
    "eig values": lambda a: la.eig(a).eigenvalues,
    "eig |v|^2": lambda a: wnp.abs(la.eig(a)[1]) ** 2,
    "eig v_j v_j^H / |v_j|^2": lambda a: (lambda v: v[:, 1:2] @ wnp.conj(v[:, 1:2]).T)(la.eig(a)[1]),
    "eig reconstruction": lambda a: (lambda w, v: v @ (w[:, None] * la.inv(v)))(*la.eig(a)),
}


@pytest.mark.parametrize("complex_values", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("name", list(EIG_CASES))
def test_eig_and_eigvals_of_nonsymmetric_matrices(name, complex_values):
    """A real matrix has complex eigenvalues in conjugate pairs (seed 4: one pair); both modes, second order."""
    f = EIG_CASES[name]
    a = _nonsymmetric(4, complex_values)
    out = wg.vjp(f, a)[0]
    np.testing.assert_allclose(out, f(a), rtol=1e-10, atol=1e-10)
    assert np.iscomplexobj(la.eigvals(a))
    wg.check_grads(f, (a,), order=2, modes=("fwd", "rev"))


def test_eig_with_real_eigenvalues_is_real_and_reconstructs_its_matrix():
    a = np.array([[2.0, 1.0, 0.0], [0.5, 3.0, 0.2], [0.0, 0.1, -1.0]])
    assert la.eigvals(a).dtype == np.float64
    wg.check_grads(lambda a: la.eigvals(a), (a,), order=2, modes=("fwd", "rev"))
    # the reconstruction V diag(w) V^-1 is the identity map: its Jacobian is the identity
    recon = lambda a: (lambda w, v: v @ (w[:, None] * la.inv(v)))(*la.eig(a))  # noqa: E731
    np.testing.assert_allclose(wg.jacobian(recon)(a).reshape(9, 9), np.eye(9), atol=1e-10)


def test_eig_under_vmap_and_on_a_stack():
    stack = np.stack([_nonsymmetric(s) for s in (3, 4, 5)])
    f = lambda a: wnp.sum(wnp.abs(la.eigvals(a)) ** 2)  # noqa: E731
    per_example = np.stack([wg.grad(f)(m) for m in stack])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(wg.vmap(wg.grad(f))(stack), per_example, rtol=1e-10)
    np.testing.assert_allclose(wg.grad(f)(stack), per_example, rtol=1e-10)
    wg.check_grads(lambda a: wnp.abs(la.eig(a)[1]) ** 2, (stack,), modes=("fwd", "rev"))

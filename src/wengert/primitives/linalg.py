"""Linear algebra: inverse, solve, determinants, Cholesky, eigh, SVD, QR, pinv and smooth norms.

Every primitive works on stacks of matrices (``...xMxN``): rules use ``matmul`` and swap only the
last two axes. The rules are the standard ones (matrix cookbook; Giles 2008 for inv/solve/det;
Murray 2016 for Cholesky; Townsend 2016 for the SVD; Liao et al. 2019 for QR; Golub & Pereyra 1973
for pinv), written with wengert operations so they can be differentiated again.

Three conventions, each chosen to give the derivative of exactly the function NumPy computes:

* NumPy's cholesky, eigh and eigvalsh (and pinv/svd with ``hermitian=True``) read one triangle of
  their input. Their gradient is zero on the other triangle, and each read off-diagonal entry gets
  the contribution of both mirror entries (``_fold``). For a symmetric input built from parameters
  this is the usual symmetric gradient.
* Eigen- and singular vectors of a repeated eigen/singular value are an arbitrary basis of their
  subspace, so their derivative does not exist. Pairs that tie (within ``n * eps * max``) are left
  out of the vector terms (``_inverse_gaps``): the result is exact for functions that do not depend
  on that choice of basis (eigenvalues, projectors, reconstructions), the only ones with a
  derivative there. Near-ties make vector gradients grow as 1/gap, as the true derivative does.
* inv, solve and slogdet have no derivative at a singular matrix: their rules need an inverse, and
  NumPy raises ``LinAlgError`` in the backward pass. det is a polynomial, differentiable everywhere:
  near and at singular matrices its rule uses the cofactor matrix instead of det(x) x^-T. pinv and
  lstsq are differentiable where the rank is locally constant.
"""
from __future__ import annotations

import numpy as np

from ..core.trace import Tracer, unbox
from ._table import defprim, unbroadcast
from .contractions import matmul
from .elementwise import absolute, power, where
from .reductions import _expand_to, prod
from .shape import concatenate, getitem, reshape, transpose


# --- helpers --------------------------------------------------------------------------------------
def _shape(x):
    return x.shape if type(x) is Tracer else np.shape(x)


def _mT(x):
    """Swap the last two axes (the matrix transpose of every matrix in a stack)."""
    axes = list(range(len(_shape(x))))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes=tuple(axes))


def _col(v):
    """``v[..., :, None]``: scales rows when multiplied with a matrix."""
    return reshape(v, shape=_shape(v) + (1,))


def _row(v):
    """``v[..., None, :]``: scales columns when multiplied with a matrix."""
    shape = _shape(v)
    return reshape(v, shape=shape[:-1] + (1, shape[-1]))


def _diag(v):
    return _col(v) * np.eye(_shape(v)[-1], dtype=unbox(v).dtype)


def _strict_lower(n, lower=True):
    mask = np.tri(n, k=-1, dtype=bool)
    return mask if lower else mask.T


def _fold(a_bar, lower=True):
    """The cotangent of a matrix of which only one triangle is read (see the module docstring)."""
    n = _shape(a_bar)[-1]
    return where(_strict_lower(n, lower), a_bar + _mT(a_bar), where(np.eye(n, dtype=bool), a_bar, 0.0))


def _symmetric_from(x, lower=True):
    """The symmetric matrix NumPy sees when it reads only the lower (upper) triangle of ``x``."""
    return where(_strict_lower(_shape(x)[-1], not lower), _mT(x), x)


def _inverse_gaps(w):
    """``F[..., i, j] = 1 / (w_j - w_i)``, and 0 where ``w_i`` and ``w_j`` tie (the diagonal included)."""
    gaps = _row(w) - _col(w)
    plain = unbox(w)
    tol = plain.shape[-1] * np.finfo(plain.dtype).eps * np.max(np.abs(plain), axis=-1, initial=0)
    tied = np.abs(unbox(gaps)) <= tol[..., None, None]
    return where(tied, 0.0, 1.0 / where(tied, 1.0, gaps))


def _columns(start, stop=None):
    return (Ellipsis, slice(None), slice(start, stop))


def _rows(start, stop=None):
    return (Ellipsis, slice(start, stop), slice(None))


def _check_unused(g, index, what):
    """Raise unless the cotangent of an arbitrary completion of a basis (``g[index]``) is zero."""
    if np.any(unbox(g)[index]):
        raise NotImplementedError(
            f"wengert.numpy.linalg.{what} have no derivative: they are an arbitrary orthonormal basis "
            "of the complement. Use only the first min(M, N), or the reduced factorization.")


# --- inverse, solve, determinants ------------------------------------------------------------------
def _inv_vjp(g, ans, x):
    ans_t = _mT(ans)
    return -matmul(ans_t, matmul(g, ans_t))


inv = defprim(np.linalg.inv, _inv_vjp, name="inv")


def _solve(a, b):
    """``inv(a) @ b`` for a stack of right-hand sides ``b`` of shape (..., M, K)."""
    return np.linalg.solve(a, b)


solve = defprim(_solve, (
    lambda g, ans, a, b: unbroadcast(-matmul(solve(_mT(a), g), _mT(ans)), a),
    lambda g, ans, a, b: unbroadcast(solve(_mT(a), g), b)), name="solve")


def _cofactors(x):
    """adj(x)^T = det(U V^T) U diag(product of the other singular values) V^T, singular x included."""
    u, s, vt = svd(x, full_matrices=False)
    n = _shape(s)[-1]
    others = prod(where(np.eye(n, dtype=bool), 1.0, _row(s)), axis=(len(_shape(s)),), keepdims=False)
    sign = np.sign(np.linalg.det(unbox(u)) * np.linalg.det(unbox(vt)))
    return _col(_col(sign)) * matmul(u * _row(others), vt)


def _det_vjp(g, ans, x):
    """g det(x) x^-T. Where x is singular, or so ill-conditioned (cond_1 above 1/sqrt(eps)) that
    det(x) x^-T is a tiny number times a huge one, the cofactor matrix it equals comes from the SVD."""
    try:
        x_inv = inv(x)
    except np.linalg.LinAlgError:
        return _col(_col(g)) * _cofactors(x)
    plain, plain_inv = unbox(x), unbox(x_inv)
    cond = np.abs(plain).sum(axis=-2).max(axis=-1) * np.abs(plain_inv).sum(axis=-2).max(axis=-1)
    if np.all(cond < 1 / np.sqrt(np.finfo(plain.dtype).eps)):
        return _col(_col(g * ans)) * _mT(x_inv)
    return _col(_col(g)) * _cofactors(x)


det = defprim(np.linalg.det, _det_vjp, name="det")


def _slogdet_vjp(g, ans, x):
    """Only log|det| carries a gradient: the sign is piecewise constant."""
    return _col(_col(g[1])) * _mT(inv(x))


slogdet = defprim(np.linalg.slogdet, _slogdet_vjp, name="slogdet", multiple_results=True)


# --- Cholesky --------------------------------------------------------------------------------------
def _cholesky(x, upper=False):
    return np.linalg.cholesky(x, upper=True) if upper else np.linalg.cholesky(x)


def _cholesky_vjp(g, ans, x, upper=False):
    """Murray 2016: L^-T Phi(L^T g) L^-1, Phi taking the lower triangle with half the diagonal."""
    low, g = (_mT(ans), _mT(g)) if upper else (ans, g)
    n = _shape(low)[-1]
    product = matmul(_mT(low), g)
    phi = where(_strict_lower(n), product, where(np.eye(n, dtype=bool), 0.5 * product, 0.0))
    low_inv = inv(low)
    return _fold(matmul(_mT(low_inv), matmul(phi, low_inv)), lower=not upper)


cholesky = defprim(_cholesky, _cholesky_vjp, name="cholesky")


# --- symmetric eigenproblem ------------------------------------------------------------------------
def _eigh(x, UPLO="L"):  # noqa: N803 - NumPy's name
    return np.linalg.eigh(x, UPLO=UPLO)


def _eigh_vjp(g, ans, x, UPLO="L"):  # noqa: N803
    """V (diag(gw) + F o V^T gV) V^T, F the inverse eigenvalue gaps."""
    w, v = ans
    gw, gv = g
    inner = _diag(gw) + _inverse_gaps(w) * matmul(_mT(v), gv)
    return _fold(matmul(v, matmul(inner, _mT(v))), lower=UPLO.upper() == "L")


eigh = defprim(_eigh, _eigh_vjp, name="eigh", multiple_results=True)


def _eigvalsh(x, UPLO="L"):  # noqa: N803
    return np.linalg.eigvalsh(x, UPLO=UPLO)


def _eigvalsh_vjp(g, ans, x, UPLO="L"):  # noqa: N803
    """V diag(g) V^T; the eigenvectors are recomputed (eigvalsh does not return them)."""
    _, v = eigh(x, UPLO=UPLO)
    return _fold(matmul(v * _row(g), _mT(v)), lower=UPLO.upper() == "L")


eigvalsh = defprim(_eigvalsh, _eigvalsh_vjp, name="eigvalsh")


# --- singular value decomposition ------------------------------------------------------------------
def _svd(x, full_matrices=True):
    return np.linalg.svd(x, full_matrices=full_matrices)


def _svd_vjp(g, ans, x, full_matrices=True):
    """Townsend 2016, for U (M, K), s (K,), Vt (K, N), K = min(M, N)."""
    u, s, vt = ans
    gu, gs, gvt = g
    m, k, n = _shape(u)[-2], _shape(s)[-1], _shape(vt)[-1]
    if full_matrices and m != n:
        _check_unused(gu, _columns(k), "svd: with full_matrices=True, the columns of U beyond min(M, N)")
        _check_unused(gvt, _rows(k), "svd: with full_matrices=True, the rows of Vh beyond min(M, N)")
        u, gu = getitem(u, index=_columns(0, k)), getitem(gu, index=_columns(0, k))
        vt, gvt = getitem(vt, index=_rows(0, k)), getitem(gvt, index=_rows(0, k))
    f = _inverse_gaps(s * s)
    ut_gu = matmul(_mT(u), gu)
    vt_gv = matmul(vt, _mT(gvt))
    inner = (f * (ut_gu - _mT(ut_gu))) * _row(s) + _diag(gs) + _col(s) * (f * (vt_gv - _mT(vt_gv)))
    a_bar = matmul(u, matmul(inner, vt))
    if m > k:
        a_bar = a_bar + matmul(gu - matmul(u, ut_gu), _col(1 / s) * vt)
    if n > k:
        a_bar = a_bar + matmul(u * _row(1 / s), gvt - matmul(_mT(vt_gv), vt))
    return a_bar


svd = defprim(_svd, _svd_vjp, name="svd", multiple_results=True)


def _svdvals(x):
    return np.linalg.svd(x, compute_uv=False)


def _svdvals_vjp(g, ans, x):
    """U diag(g) V^T; the singular vectors are recomputed (they were not needed forward)."""
    u, _, vt = svd(x, full_matrices=False)
    return matmul(u * _row(g), vt)


svdvals = defprim(_svdvals, _svdvals_vjp, name="svdvals")


# --- QR --------------------------------------------------------------------------------------------
def _qr(x, mode="reduced"):
    return np.linalg.qr(x, mode=mode)


def _qr_tall_vjp(q, r, gq, gr):
    """Liao et al. 2019, M >= N: (gQ + Q copyltu(M)) R^-T with M = R gR^T - gQ^T Q."""
    m_ = matmul(r, _mT(gr)) - matmul(_mT(gq), q)
    copyltu = where(_strict_lower(_shape(r)[-1], lower=False), _mT(m_), m_)
    return _mT(solve(r, _mT(gq + matmul(q, copyltu))))


def _qr_vjp(g, ans, x, mode="reduced"):
    """Wide inputs [X | Y] = Q [R_X | R_Y]: X is square, and R_Y = Q^T Y adds Y R_Y^T to gQ."""
    q, r = ans
    gq, gr = g
    m, n = _shape(q)[-2], _shape(r)[-1]
    if m > n and _shape(q)[-1] == m:
        _check_unused(gq, _columns(n), "qr: with mode='complete', the columns of Q beyond N")
        q, gq = getitem(q, index=_columns(0, n)), getitem(gq, index=_columns(0, n))
        r, gr = getitem(r, index=_rows(0, n)), getitem(gr, index=_rows(0, n))
    if m >= n:
        return _qr_tall_vjp(q, r, gq, gr)
    r_y, gr_y = getitem(r, index=_columns(m)), getitem(gr, index=_columns(m))
    y = matmul(q, r_y)
    g_x = _qr_tall_vjp(q, getitem(r, index=_columns(0, m)), gq + matmul(y, _mT(gr_y)),
                       getitem(gr, index=_columns(0, m)))
    return concatenate(g_x, matmul(q, gr_y), axis=len(_shape(x)) - 1)


qr = defprim(_qr, _qr_vjp, name="qr", multiple_results=True)


# --- pseudo-inverse --------------------------------------------------------------------------------
def _pinv(x, hermitian=False, **options):
    return np.linalg.pinv(x, hermitian=hermitian, **options)


def _pinv_vjp(g, ans, x, hermitian=False, **options):
    """Golub & Pereyra: valid where the rank is locally constant (e.g. full rank)."""
    a = _symmetric_from(x) if hermitian else x
    p, pt, gt = ans, _mT(ans), _mT(g)
    a_bar = (-matmul(pt, matmul(g, pt))
             + matmul(gt - matmul(a, matmul(p, gt)), matmul(p, pt))
             + matmul(matmul(pt, p), gt - matmul(matmul(gt, p), a)))
    return _fold(a_bar) if hermitian else a_bar


pinv = defprim(_pinv, _pinv_vjp, name="pinv")


def _lstsq(a, b, rcond=None):
    return np.linalg.lstsq(a, b, rcond=rcond)


def _lstsq_pinv(a, rcond):
    """pinv(a) with lstsq's cut-off: singular values up to rcond * max(s) count as zero."""
    eps = np.finfo(unbox(a).dtype).eps
    return pinv(a, rcond=max(_shape(a)) * eps if rcond is None else (rcond if rcond >= 0 else eps))


def _lstsq_vjp_a(g, ans, a, b, rcond=None):
    """x = pinv(a) b; residuals |b - a x|^2 move with a only through a (x is optimal); s = svd(a)."""
    gx, gres, _, gs = g
    x, res, _, s = ans
    if len(_shape(b)) == 1:
        gx, x, b = _col(gx), _col(x), _col(b)
    a_bar = _pinv_vjp(matmul(gx, _mT(b)), _lstsq_pinv(a, rcond), a)
    if _shape(res)[0]:
        a_bar = a_bar - 2 * matmul((b - matmul(a, x)) * gres, _mT(x))
    if type(gs) is Tracer or np.any(gs):
        a_bar = a_bar + _svdvals_vjp(gs, s, a)
    return a_bar


def _lstsq_vjp_b(g, ans, a, b, rcond=None):
    gx, gres, _, _ = g
    x, res, _, _ = ans
    b_bar = matmul(_mT(_lstsq_pinv(a, rcond)), gx)
    if _shape(res)[0]:
        b_bar = b_bar + 2 * (b - matmul(a, x)) * gres
    return b_bar


lstsq = defprim(_lstsq, (_lstsq_vjp_a, _lstsq_vjp_b), name="lstsq", multiple_results=True)


# --- smooth norms ----------------------------------------------------------------------------------
def _pnorm(x, ord=None, axis=None, keepdims=False):  # noqa: A002 - NumPy's name
    return np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)


def _pnorm_vjp(g, ans, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    """x / |x| for 2-norms, sign(x) (|x| / |x|_p)^(p-1) otherwise; 0 (a subgradient) at x = 0."""
    shape = _shape(x)
    g = _expand_to(g, shape, axis, keepdims)
    ans = _expand_to(ans, shape, axis, keepdims)
    safe = where(unbox(ans) == 0, 1.0, ans)
    if ord in (None, 2, "fro", "f"):
        return g * x / safe
    return g * np.sign(unbox(x)) * power(absolute(x) / safe, ord - 1)


pnorm = defprim(_pnorm, _pnorm_vjp, name="pnorm")

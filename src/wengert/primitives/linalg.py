"""Linear algebra: inverse, solve, determinants, Cholesky, eigh, SVD, QR, pinv and smooth norms.

Every primitive works on stacks of matrices (``...xMxN``): rules use ``matmul`` and swap only the
last two axes. The rules are the standard ones (matrix cookbook; Giles 2008 for inv/solve/det;
Murray 2016 for Cholesky; Townsend 2016 for the SVD; Liao et al. 2019 for QR; Golub & Pereyra 1973
for pinv), written with wengert operations so they can be differentiated again. Each VJP rule has a
JVP rule beside it (the forward maps JAX defines and derives its VJPs from). They factor or invert
the primal only and pass the tangent through products, elementwise operations and ``solve``, so a
batch of tangents (``jacfwd``) costs about one factorization.

Under vmap, the batch axis is one more stack axis (``stacked_batch``): one NumPy call factors every
example. lstsq, which NumPy does not stack, batches right-hand sides as more columns and a batch of
matrices as ``pinv(a) b``; pnorm shifts its axes past the batch.

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
  Likewise the completing columns of ``svd(full_matrices=True)``'s U (rows of Vh) and of
  ``qr(mode='complete')``'s Q: reverse mode refuses a cotangent on them; forward mode gives them the
  tangent that keeps the basis orthonormal without turning it within the complement, exact for
  functions of the complement that do not depend on its basis (its projector).
* inv, solve and slogdet have no derivative at a singular matrix: their rules need an inverse, and
  NumPy raises ``LinAlgError`` in the backward pass. det is a polynomial, differentiable everywhere:
  near and at singular matrices its rule uses the cofactor matrix instead of det(x) x^-T. pinv and
  lstsq are differentiable where the rank is locally constant.
"""
from __future__ import annotations

import functools

import numpy as np

from ..core.errors import BackendError
from ..core.namespace import dask_module, library
from ..core.trace import Tracer, unbox
from ._batching import one_batch_axis
from ._table import constant, defprim, elementwise_constant, staged, unbroadcast
from .contractions import matmul
from .complex import conj, imag, real
from .elementwise import absolute, power, where
from .reductions import _expand_to, max_, prod, sum_
from .shape import broadcast_to, concatenate, getitem, reshape, transpose


# --- helpers --------------------------------------------------------------------------------------
def _shape(x):
    return x.shape if type(x) is Tracer else np.shape(x)


def _mT(x):
    """Swap the last two axes (the matrix transpose of every matrix in a stack)."""
    if type(x) is np.ndarray:
        return x.swapaxes(-1, -2)   # what the transpose primitive would find to do
    axes = list(range(len(_shape(x))))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes=tuple(axes))


def _plain(*values):
    """No tracer among ``values``: a rule may then compute with NumPy directly, as the primitives it
    is written with would after finding no tracer, without a call through each (on 4x4 matrices
    those calls cost more than the arithmetic). A traced value (higher order, vmap, jit) takes the
    rule as written."""
    for v in values:
        if type(v) is Tracer:
            return False
    return True


def _is_complex(x):
    if type(x) is np.ndarray:
        return x.dtype.kind == "c"
    return np.iscomplexobj(unbox(x))


@functools.lru_cache(maxsize=None)
def _eye(n, dtype=bool):
    """``np.eye(n, dtype=dtype)``, made once per size and dtype (read-only): the rules' masks and
    identities, which on small matrices cost more to build than the arithmetic they take part in."""
    eye = np.eye(n, dtype=dtype)
    eye.setflags(write=False)
    return eye


@functools.lru_cache(maxsize=None)
def _eps(dtype):
    return np.finfo(dtype).eps


def _mH(x):
    """The conjugate transpose of every matrix in a stack (the transpose for real ones)."""
    return conj(_mT(x)) if _is_complex(x) else _mT(x)


def _col(v):
    """``v[..., :, None]``: scales rows when multiplied with a matrix."""
    return reshape(v, shape=_shape(v) + (1,))


def _row(v):
    """``v[..., None, :]``: scales columns when multiplied with a matrix."""
    shape = _shape(v)
    return reshape(v, shape=shape[:-1] + (1, shape[-1]))


def _diag(v):
    return _col(v) * _eye(_shape(v)[-1], unbox(v).dtype)


def _diag_part(m):
    """``diagonal(m)`` of every matrix in a stack, as a masked sum (any stack, batched or not)."""
    return sum_(m * _eye(_shape(m)[-1]), axis=-1)


@functools.lru_cache(maxsize=None)
def _strict_lower(n, lower=True):
    mask = np.tri(n, k=-1, dtype=bool)
    mask = mask if lower else mask.T.copy()
    mask.setflags(write=False)
    return mask


def _fold(a_bar, lower=True):
    """The cotangent of a matrix of which only one triangle is read (see the module docstring);
    complex (Hermitian) ones: the mirror entry conjugated, the real part of the diagonal."""
    n = _shape(a_bar)[-1]
    if _is_complex(a_bar):
        return where(_strict_lower(n, lower), a_bar + conj(_mT(a_bar)), where(_eye(n), real(a_bar), 0.0))
    return where(_strict_lower(n, lower), a_bar + _mT(a_bar), where(_eye(n), a_bar, 0.0))


@functools.lru_cache(maxsize=None)
def _fold_weights(n, dtype, lower):
    """1 below (above) the diagonal, 1/2 on it, 0 on the other side: ``(a + a^T) * weights`` is
    ``_fold(a)`` for a real ``a``."""
    weights = np.tri(n, k=-1, dtype=dtype)
    if not lower:
        weights = weights.T.copy()
    weights += 0.5 * np.eye(n, dtype=dtype)
    weights.setflags(write=False)
    return weights


def _fold_real(a_bar, lower=True):
    """``_fold`` of a plain real cotangent: one sum with the transpose and one product."""
    out = a_bar + a_bar.swapaxes(-1, -2)
    out *= _fold_weights(a_bar.shape[-1], out.dtype, lower)
    return out


def _plain_real(*values):
    """Plain (no tracer) real NumPy arrays: the rules' NumPy fast paths."""
    for v in values:
        if type(v) is not np.ndarray or v.dtype.kind != "f":
            return False
    return True


def _symmetric_from(x, lower=True):
    """The symmetric matrix NumPy sees when it reads only the lower (upper) triangle of ``x``; for
    complex ``x`` the Hermitian one (the mirror conjugated, the diagonal's imaginary part ignored)."""
    n = _shape(x)[-1]
    if _is_complex(x):
        return where(_strict_lower(n, not lower), conj(_mT(x)), where(_eye(n), real(x), x))
    return where(_strict_lower(n, not lower), _mT(x), x)


def _inverse_gaps(w):
    """``F[..., i, j] = 1 / (w_j - w_i)``, and 0 where ``w_i`` and ``w_j`` tie (the diagonal included)."""
    if type(w) is np.ndarray:   # plain: NumPy's broadcasting, as the primitives would find to do
        if w.ndim == 1:   # one matrix's: the tolerance is one number
            gaps = w[None, :] - w[:, None]
            tol = w.shape[0] * _eps(w.dtype) * np.maximum.reduce(np.abs(w), initial=0)
        else:
            gaps = w[..., None, :] - w[..., :, None]
            tol = w.shape[-1] * _eps(w.dtype) * np.maximum.reduce(np.abs(w), axis=-1, initial=0)[..., None, None]
        gaps[np.abs(gaps) <= tol] = np.inf   # tied: 1/inf = 0
        return np.reciprocal(gaps, out=gaps)
    gaps = _row(w) - _col(w)
    c = constant(w)
    if type(c) is Tracer and _shape(c)[-1]:  # batched by vmap: each example's own tolerance
        scale = _shape(c)[-1] * _eps(unbox(c).dtype)
        tol = _col(scale * max_(absolute(c), axis=-1, keepdims=True))
        tied = _within(constant(gaps), tol)
    else:
        plain = unbox(w)
        tol = plain.shape[-1] * _eps(plain.dtype) * np.abs(plain).max(axis=-1, initial=0)
        tied = np.abs(unbox(gaps)) <= tol[..., None, None]
        if type(gaps) is np.ndarray:   # plain: NumPy's where, as the primitive would find to do
            return np.where(tied, 0.0, 1.0 / np.where(tied, 1.0, gaps))
    return where(tied, 0.0, 1.0 / where(tied, 1.0, gaps))


@elementwise_constant
def _within(gaps, tol):
    return np.abs(gaps) <= tol


def _columns(start, stop=None):
    return (Ellipsis, slice(None), slice(start, stop))


def _rows(start, stop=None):
    return (Ellipsis, slice(start, stop), slice(None))


def _complement_tangent(basis, d_basis, rest, axis):
    """The tangent of the columns (axis -1; rows: axis -2) ``rest`` completing an orthonormal
    ``basis`` that moves by ``d_basis``: ``-basis d_basis^H rest``, the least motion that keeps them
    orthonormal (see the module docstring)."""
    d_h = _mH(d_basis) if _is_complex(basis) else _mT(d_basis)
    if axis == -1:
        return -matmul(basis, matmul(d_h, rest))
    return -matmul(matmul(rest, d_h), basis)


def _check_unused(g, index, what):
    """Raise unless the cotangent of an arbitrary completion of a basis (``g[index]``) is zero."""
    if np.any(unbox(g)[index]):
        raise NotImplementedError(
            f"wengert.numpy.linalg.{what} have no derivative: they are an arbitrary orthonormal basis "
            "of the complement. Use only the first min(M, N), or the reduced factorization.")


def stacked_batch(prim, vals, batched, params, size):
    """vmap rule (a batch on axis 0) of a one-matrix primitive whose impl and rules take stacks
    (``...xMxN``): the batch axis is one more stack axis, so the primitive runs once on all of it."""
    return prim(*vals, **params)


# --- inverse, solve, determinants ------------------------------------------------------------------
def _inv_vjp(g, ans, x):
    if _plain(g, ans):
        ans_t = _mT(ans)
        return -(ans_t @ (g @ ans_t))
    ans_t = _mT(ans)
    return -matmul(ans_t, matmul(g, ans_t))


inv = defprim(np.linalg.inv, _inv_vjp, name="inv", jvp=lambda t, ans, x: -matmul(ans, matmul(t, ans)),
              batch=one_batch_axis(stacked_batch), batched_vjp=True)


def _solve(a, b):
    """``inv(a) @ b`` for a stack of right-hand sides ``b`` of shape (..., M, K)."""
    return np.linalg.solve(a, b)




def _solve_jvp(tangents, ans, args, params):
    """dx = a^-1 (db - da x): one solve for both tangents."""
    ta, tb = tangents
    rhs = tb if ta is None else (-matmul(ta, ans) if tb is None else tb - matmul(ta, ans))
    return solve(args[0], rhs)


def _solve_batch(prim, vals, batched, params, size):
    """vmap of solve (a batch on axis 0): right-hand sides batched against one matrix (jacfwd's
    tangents) are solved as more columns, with one factorization; otherwise NumPy's stacks."""
    a, b = vals
    a_batched, b_batched = batched
    if not a_batched:
        shape = tuple(_shape(b))  # (batch, ..., M, K)
        nd = len(shape)
        columns = reshape(transpose(b, axes=tuple(range(1, nd)) + (0,)), shape=shape[1:-1] + (shape[-1] * size,))
        x = solve(a, columns)
        nx = len(_shape(x))
        x = reshape(x, shape=tuple(_shape(x))[:-1] + (shape[-1], size))
        return transpose(x, axes=(nx,) + tuple(range(nx)))
    rank = max(len(_shape(a)) - 1, len(_shape(b)) - b_batched)
    a = _pad_batched(a, rank)
    b = _pad_batched(b, rank) if b_batched else b
    return solve(a, b)


def _pad_batched(x, rank):
    """A batched ``x`` (batch on axis 0) with ones after the batch axis up to ``rank`` example axes."""
    shape = tuple(_shape(x))
    missing = rank - (len(shape) - 1)
    return x if missing <= 0 else reshape(x, shape=shape[:1] + (1,) * missing + shape[1:])


def _solve_transposed(a, g):
    """``solve(a^T, g)``: the cotangent of the right-hand side."""
    if _plain(a, g):
        return _solve(_mT(a), g)
    return solve(_mT(a), g)


def _solve_vjp_a(g, ans, a, b):
    rhs = _solve_transposed(a, g)
    if _plain(rhs, ans):
        return unbroadcast(-(rhs @ _mT(ans)), a)
    return unbroadcast(-matmul(rhs, _mT(ans)), a)


solve = defprim(_solve, (
    _solve_vjp_a,
    lambda g, ans, a, b: unbroadcast(_solve_transposed(a, g), b)), name="solve",
    fused_jvp=_solve_jvp, batch=one_batch_axis(_solve_batch), batched_vjp=True)


def _cofactors(x):
    """adj(x)^T = det(U V^T) U diag(product of the other singular values) V^T, singular x included."""
    u, s, vt = svd(x, full_matrices=False)
    n = _shape(s)[-1]
    others = prod(where(_eye(n), 1.0, _row(s)), axis=(len(_shape(s)),), keepdims=False)
    sign = _sign(det(constant(u)) * det(constant(vt)))  # per example under vmap
    return _col(_col(sign)) * matmul(u * _row(others), vt)


def _det_inverse(x):
    """inv(x), or None where x is singular or so ill-conditioned (cond_1 above 1/sqrt(eps)) that
    det(x) x^-1 would be a tiny number times a huge one: the cofactors then come from the SVD."""
    if staged(x):  # under jit the program meets every x: the cofactors, right for all of them
        return None
    try:
        x_inv = np.linalg.inv(x) if _plain(x) else inv(x)
    except np.linalg.LinAlgError:
        return None
    plain, plain_inv = unbox(x), unbox(x_inv)
    cond = np.abs(plain).sum(axis=-2).max(axis=-1) * np.abs(plain_inv).sum(axis=-2).max(axis=-1)
    return x_inv if (cond < 1 / np.sqrt(_eps(plain.dtype))).all() else None


def _det_vjp(g, ans, x):
    """g det(x) x^-T, or g times the cofactor matrix (which it equals) near singular x."""
    x_inv = _det_inverse(x)
    if x_inv is None:
        return _col(_col(g)) * _cofactors(x)
    if _plain(g, ans, x_inv):
        return np.asarray(g * ans)[..., None, None] * _mT(x_inv)
    return _col(_col(g * ans)) * _mT(x_inv)


def _det_jvp(t, ans, x):
    """det(x) tr(x^-1 t) = <x^-T det(x), t>; the cofactors near singular x, as in reverse mode. The
    inverse that decides this serves as well: each tangent then costs one elementwise product."""
    x_inv = _det_inverse(x)
    if x_inv is None:
        return sum_(_cofactors(x) * t, axis=(-2, -1))
    return ans * sum_(_mT(x_inv) * t, axis=(-2, -1))


det = defprim(np.linalg.det, _det_vjp, name="det", jvp=_det_jvp, batch=one_batch_axis(stacked_batch),
              batched_vjp=True)


def _slogdet_vjp(g, ans, x):
    """The sign of a real matrix is piecewise constant; a complex one turns by i Im tr(x^-1 dx)."""
    g_sign, g_log = g
    if not _is_complex(x):
        if _plain(g_log, x):
            return np.asarray(g_log)[..., None, None] * _mT(np.linalg.inv(x))
        return _col(_col(g_log)) * _mT(inv(x))
    weight = real(g_log) if _is_complex(g_log) else g_log  # log|det| is real: Re of its cotangent
    if type(g_sign) is Tracer or np.any(unbox(g_sign)):
        weight = weight + 1j * imag(ans[0] * g_sign)
    return _col(_col(weight)) * _mT(inv(x))


def _slogdet_jvp(tangents, ans, args, params):
    """d log|det| = Re tr(x^-1 t); d sign = sign i Im tr(x^-1 t) (zero for real x). The trace as
    <x^-T, t>, as the VJP: each tangent then costs an elementwise product, not a solve."""
    change = sum_(_mT(inv(args[0])) * tangents[0], axis=(-2, -1))
    if not np.iscomplexobj(unbox(args[0])):
        return None, change
    log_change = real(change)
    return ans[0] * (change - log_change), log_change


slogdet = defprim(np.linalg.slogdet, _slogdet_vjp, name="slogdet", multiple_results=True,
                  batched_vjp=True, fused_jvp=_slogdet_jvp, batch=one_batch_axis(stacked_batch))


# --- Cholesky --------------------------------------------------------------------------------------
def _cholesky(x, upper=False):
    if type(x) is not np.ndarray and library(x) == "dask":
        # NumPy's dispatch reaches dask.array.linalg.cholesky, whose default is the upper factor
        return dask_module(x, "dask.array.linalg").cholesky(x, lower=not upper)
    return np.linalg.cholesky(x, upper=True) if upper else np.linalg.cholesky(x)


def _cholesky_vjp(g, ans, x, upper=False):
    """Murray 2016: L^-T Phi(L^T g) L^-1, Phi taking the lower triangle with half the diagonal.
    Complex (A = L L^H): L^-T Phi(L^T g) conj(L^-1), the transpose of the JVP below under the
    bilinear pairing (docs/complex.md); upper=True returns U = L^H."""
    if _plain_real(g, ans):
        low, g = (ans.swapaxes(-1, -2), g.swapaxes(-1, -2)) if upper else (ans, g)
        n = low.shape[-1]
        phi = low.swapaxes(-1, -2) @ g
        phi *= _fold_weights(n, phi.dtype, True)
        low_inv = np.linalg.inv(low)
        return _fold_real(low_inv.swapaxes(-1, -2) @ (phi @ low_inv), lower=not upper)
    low, g = (_mH(ans), _mH(g)) if upper else (ans, g)
    n = _shape(low)[-1]
    product = matmul(_mT(low), g)
    phi = where(_strict_lower(n), product, where(_eye(n), 0.5 * product, 0.0))
    low_inv = inv(low)
    right = conj(low_inv) if _is_complex(low_inv) else low_inv
    return _fold(matmul(_mT(low_inv), matmul(phi, right)), lower=not upper)


def _cholesky_jvp(t, ans, x, upper=False):
    """L Phi(L^-1 dA L^-H), dA the symmetric (Hermitian) matrix of the triangle read (Murray 2016)."""
    low = _mH(ans) if upper else ans
    n = _shape(low)[-1]
    low_inv = inv(low)
    inner = matmul(low_inv, matmul(_symmetric_from(t, lower=not upper), _mH(low_inv)))
    phi = np.tri(n, k=-1, dtype=unbox(ans).dtype) + 0.5 * _eye(n, unbox(ans).dtype)
    d_low = matmul(low, inner * phi)
    return _mH(d_low) if upper else d_low


cholesky = defprim(_cholesky, _cholesky_vjp, name="cholesky", jvp=_cholesky_jvp, batch=one_batch_axis(stacked_batch),
                   batched_vjp=True)


# --- symmetric eigenproblem ------------------------------------------------------------------------
def _eigh(x, UPLO="L"):  # noqa: N803 - NumPy's name
    return np.linalg.eigh(x, UPLO=UPLO)


def _eigh_vjp(g, ans, x, UPLO="L"):  # noqa: N803
    """V (diag(gw) + F o V^T gV) V^T, F the inverse eigenvalue gaps."""
    w, v = ans
    gw, gv = g
    if _plain_real(w, v, gw, gv):
        vt = v.swapaxes(-1, -2)
        inner = _inverse_gaps(w) * (vt @ gv)   # zero on the diagonal (a value ties with itself)
        if inner.ndim == 2:
            inner.flat[::inner.shape[0] + 1] = gw   # the diagonal, in place
        else:
            inner += gw[..., None] * _eye(w.shape[-1], w.dtype)
        return _fold_real(v @ (inner @ vt), lower=UPLO.upper() == "L")
    inner = _diag(_real_if(gw)) + _inverse_gaps(w) * matmul(_mT(v), gv)
    # complex (Hermitian) x: conj(V) (...) V^T, the transpose of the JVP below under the bilinear pairing
    return _fold(matmul(conj(v) if _is_complex(v) else v, matmul(inner, _mT(v))), lower=UPLO.upper() == "L")


def _eigh_jvp(tangents, ans, args, params):
    """dw = diag(V^T dA V), dV = V (F o V^T dA V), dA the symmetric matrix of the triangle read."""
    w, v = ans
    lower = params.get("UPLO", "L").upper() == "L"
    inner = matmul(_mH(v), matmul(_symmetric_from(tangents[0], lower=lower), v))
    return _real_if(_diag_part(inner)), matmul(v, _inverse_gaps(w) * inner)


eigh = defprim(_eigh, _eigh_vjp, name="eigh", multiple_results=True,
               batched_vjp=True, fused_jvp=_eigh_jvp, batch=one_batch_axis(stacked_batch))


def _eigvalsh(x, UPLO="L", stash=None):  # noqa: N803
    if stash is not None and type(x) is np.ndarray:
        # traced: one factorization that also gives the eigenvectors the rules need, kept in
        # ``stash`` (a one-slot list in the call's parameters) instead of computed again backward
        w, v = np.linalg.eigh(x, UPLO=UPLO)
        stash[0] = v
        return w
    return np.linalg.eigvalsh(x, UPLO=UPLO)


def _eigenvectors(x, UPLO, stash):  # noqa: N803
    """The eigenvectors the rules of ``eigvalsh`` need: kept by the forward pass for a plain ``x``
    (first order), else ``eigh`` again (with wengert operations on a traced ``x``: second order)."""
    if stash is not None and stash[0] is not None and type(x) is np.ndarray:
        return stash[0]
    return eigh(x, UPLO=UPLO)[1]


def _eigvalsh_vjp(g, ans, x, UPLO="L", stash=None):  # noqa: N803
    """V diag(g) V^T, V the eigenvectors (kept from the forward pass at first order)."""
    v = _eigenvectors(x, UPLO, stash)
    if _plain_real(g, v):
        return _fold_real((v * g[..., None, :]) @ v.swapaxes(-1, -2), lower=UPLO.upper() == "L")
    return _fold(matmul((conj(v) if _is_complex(v) else v) * _row(_real_if(g)), _mT(v)), lower=UPLO.upper() == "L")


def _eigvalsh_jvp(t, ans, x, UPLO="L", stash=None):  # noqa: N803
    """diag(V^T dA V), V as in the VJP."""
    v = _eigenvectors(x, UPLO, stash)
    return _real_if(sum_((conj(v) if _is_complex(v) else v) * matmul(_symmetric_from(t, lower=UPLO.upper() == "L"), v),
                         axis=-2))


eigvalsh = defprim(_eigvalsh, _eigvalsh_vjp, name="eigvalsh", jvp=_eigvalsh_jvp, batch=one_batch_axis(stacked_batch),
                   batched_vjp=True)


# --- general (non-symmetric) eigenproblem -----------------------------------------------------------
# A = V diag(w) V^-1 with NumPy's normalization: each eigenvector has unit 2-norm (its phase is
# LAPACK's). The rules are JAX's: dw = diag(V^-1 dA V), dV = V (F o V^-1 dA V) with F the inverse
# eigenvalue gaps (0 where eigenvalues tie), then each column's change along itself removed so it
# keeps unit length. The phase of an eigenvector is arbitrary, so only functions that do not depend
# on it (eigenvalues, |v|, v v^H / v^H v, ...) have a meaningful derivative, as with JAX. The VJP is
# the transpose of this JVP under the bilinear pairing of docs/complex.md.
def _eig(x):
    w, v = np.linalg.eig(x)
    return w, v


def _along_columns(v, dv):
    """Re(sum_i conj(v_ij) dv_ij) per column j, as a row: each unit column's change in length."""
    axis = len(_shape(v)) - 2
    return _real_if(sum_(conj(v) * dv if _is_complex(v) else v * dv, axis=(axis,), keepdims=True))


def _eig_jvp(tangents, ans, args, params):
    w, v = ans
    inner = matmul(inv(v), matmul(tangents[0], v))
    dv = matmul(v, _inverse_gaps(w) * inner)
    return _diag_part(inner), dv - v * _along_columns(v, dv)


def _eig_cotangent(x, w, v, gw, gv):
    """V^-T (diag(gw) + F o V^T gv') V^T, gv' the cotangent before the columns' normalization."""
    axis = len(_shape(v)) - 2
    inner = _diag(gw)
    if gv is not None:
        along = _real_if(sum_(gv * v, axis=(axis,), keepdims=True))
        gv = gv - (conj(v) if _is_complex(v) else v) * along
        inner = inner + _inverse_gaps(w) * matmul(_mT(v), gv)
    a_bar = matmul(_mT(inv(v)), matmul(inner, _mT(v)))
    return a_bar if _is_complex(x) else _real_if(a_bar)


def _eig_vjp(g, ans, x):
    w, v = ans
    return _eig_cotangent(x, w, v, g[0], g[1])


eig = defprim(_eig, _eig_vjp, name="eig", multiple_results=True,
              batched_vjp=True, fused_jvp=_eig_jvp, batch=one_batch_axis(stacked_batch))


def _eigenvectors_of(x, w):
    """The eigenvectors eig returns with the eigenvalues ``w`` eigvals gave (recomputed: eigvals
    does not return them). Both are LAPACK's geev, which orders them the same; a difference is
    an error, never a gradient paired with the wrong eigenvalue."""
    w2, v = eig(x)
    if not np.array_equal(unbox(w2), unbox(w)):
        raise np.linalg.LinAlgError("eigvals: the eigenvalues recomputed with their eigenvectors differ from "
                                    "eigvals' own, so their derivative cannot be paired with them")
    return v


def _eigvals_vjp(g, ans, x):
    v = _eigenvectors_of(x, ans)
    return _eig_cotangent(x, ans, v, g, None)


def _eigvals_jvp(t, ans, x):
    v = _eigenvectors_of(x, ans)
    return _diag_part(matmul(inv(v), matmul(t, v)))


eigvals = defprim(np.linalg.eigvals, _eigvals_vjp, name="eigvals", jvp=_eigvals_jvp,
                  batch=one_batch_axis(stacked_batch), batched_vjp=True)


# --- singular value decomposition ------------------------------------------------------------------
def _svd(x, full_matrices=True):
    return np.linalg.svd(x, full_matrices=full_matrices)


def _standard_cotangents(x, *cotangents):
    """The rules of svd and qr are written in the conjugating convention (a cotangent G pairs with
    a perturbation as Re tr(G^H dY), the one the literature uses). wengert pairs without the
    conjugate (docs/complex.md), so for a complex matrix the cotangents come in conjugated and the
    result goes out conjugated; for a real one the two conventions are the same."""
    if not _is_complex(x):
        return cotangents
    return tuple(None if c is None else conj(c) for c in cotangents)


def _svd_vjp(g, ans, x, full_matrices=True):
    """Townsend 2016, for U (M, K), s (K,), Vh (K, N), K = min(M, N); complex matrices: the
    transpose of the JVP below, whose gauge term ``i Im diag(U^H gU) / s`` keeps the result exact
    for losses that do not depend on the singular vectors' phases."""
    u, s, vt = ans
    gu, gs, gvt = _standard_cotangents(x, *g)
    cx = _is_complex(x)
    h = _mH if cx else _mT
    if cx:
        gs = real(gs) if _is_complex(gs) else gs
    m, k, n = _shape(u)[-2], _shape(s)[-1], _shape(vt)[-1]
    if full_matrices and m != n:
        _check_unused(gu, _columns(k), "svd: with full_matrices=True, the columns of U beyond min(M, N)")
        _check_unused(gvt, _rows(k), "svd: with full_matrices=True, the rows of Vh beyond min(M, N)")
        u, gu = getitem(u, index=_columns(0, k)), getitem(gu, index=_columns(0, k))
        vt, gvt = getitem(vt, index=_rows(0, k)), getitem(gvt, index=_rows(0, k))
    f = _inverse_gaps(s * s)
    ut_gu = matmul(h(u), gu)
    vt_gv = matmul(vt, h(gvt))
    inner = (f * (ut_gu - h(ut_gu))) * _row(s) + _diag(gs) + _col(s) * (f * (vt_gv - h(vt_gv)))
    if cx:
        inner = inner + (ut_gu - h(ut_gu)) * np.eye(k) / (2 * _row(s))
    a_bar = matmul(u, matmul(inner, vt))
    if m > k:
        a_bar = a_bar + matmul(gu - matmul(u, ut_gu), _col(1 / s) * vt)
    if n > k:
        a_bar = a_bar + matmul(u * _row(1 / s), gvt - matmul(h(vt_gv), vt))
    return conj(a_bar) if cx else a_bar


def _svd_jvp(tangents, ans, args, params):
    """With dS = U^H dA V, F the inverse gaps of s^2: ds = Re diag(dS), dU = U (F o (dS S + S dS^H)
    + i Im diag(dS) / s), dV = V (F o (S dS + dS^H S)), plus the parts outside the spans of U and V
    when M != N (JAX's rule; the imaginary diagonal of dU is a choice of gauge, zero for real
    matrices). Completing columns of a full U (rows of Vh) get _complement_tangent."""
    t = tangents[0]
    cx = _is_complex(args[0])
    h = _mH if cx else _mT
    u, s, vt = ans
    m, k, n = _shape(u)[-2], _shape(s)[-1], _shape(vt)[-1]
    full = params.get("full_matrices", True) and m != n
    if full:
        u_rest, vt_rest = getitem(u, index=_columns(k)), getitem(vt, index=_rows(k))
        u, vt = getitem(u, index=_columns(0, k)), getitem(vt, index=_rows(0, k))
    if m >= n:
        da_v = matmul(t, h(vt))
        inner = matmul(h(u), da_v)
    else:
        ut_da = matmul(h(u), t)
        inner = matmul(ut_da, h(vt))
    f = _inverse_gaps(s * s)
    right, left = inner * _row(s), _col(s) * inner
    gauge = (inner - h(inner)) * np.eye(k) / (2 * _row(s)) if cx else 0.0
    du = matmul(u, f * (right + h(right)) + gauge)
    dvt = -matmul(f * (left + h(left)), vt)
    if m > k:
        du = du + (da_v - matmul(u, inner)) / _row(s)
    if n > k:
        dvt = dvt + (ut_da - matmul(inner, vt)) / _col(s)
    if full and m > k:
        du = concatenate(du, _complement_tangent(u, du, u_rest, -1), axis=-1)
    if full and n > k:
        dvt = concatenate(dvt, _complement_tangent(vt, dvt, vt_rest, -2), axis=-2)
    ds = _diag_part(inner)
    return du, real(ds) if cx else ds, dvt


svd = defprim(_svd, _svd_vjp, name="svd", multiple_results=True,
              batched_vjp=True, fused_jvp=_svd_jvp, batch=one_batch_axis(stacked_batch))


def _svdvals(x, stash=None):
    if stash is not None and type(x) is np.ndarray:
        # traced: one factorization that also gives the singular vectors the rules need, kept in
        # ``stash`` (as eigvalsh's eigenvectors) instead of computed again backward
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        stash[0] = (u, vt)
        return s
    return np.linalg.svd(x, compute_uv=False)


def _singular_vectors(x, stash):
    """``(U, V^H)`` for svdvals' rules: kept by the forward pass for a plain ``x`` (first order), else
    ``svd`` again (with wengert operations on a traced ``x``: second order)."""
    if stash is not None and stash[0] is not None and type(x) is np.ndarray:
        return stash[0]
    u, _, vt = svd(x, full_matrices=False)
    return u, vt


def _svdvals_vjp(g, ans, x, stash=None):
    """U diag(g) V^T, U and V kept from the forward pass at first order. Complex x (reached from
    lstsq only): conj(U diag(g) V^H)."""
    u, vt = _singular_vectors(x, stash)
    if _plain_real(g, u, vt):
        return (u * g[..., None, :]) @ vt
    if not _is_complex(x):
        return matmul(u * _row(g), vt)
    return conj(matmul(u * _row(real(g) if _is_complex(g) else g), vt))


def _svdvals_jvp(t, ans, x, stash=None):
    """Re diag(U^H dA V), U and V as in the VJP."""
    u, vt = _singular_vectors(x, stash)
    if _is_complex(x):
        return real(sum_(conj(u) * matmul(t, _mH(vt)), axis=-2))
    return sum_(u * matmul(t, _mT(vt)), axis=-2)


svdvals = defprim(_svdvals, _svdvals_vjp, name="svdvals", jvp=_svdvals_jvp, batch=one_batch_axis(stacked_batch),
                  batched_vjp=True)


# --- QR --------------------------------------------------------------------------------------------
def _qr(x, mode="reduced"):
    if type(x) is not np.ndarray and library(x) == "dask":
        if mode != "reduced":
            raise BackendError(f"qr(mode={mode!r}) of a Dask array: Dask's qr gives the reduced "
                               "factors only; use mode='reduced'")
        return np.linalg.qr(x)   # Dask's qr (its signature has no mode)
    return np.linalg.qr(x, mode=mode)


def _qr_tall_vjp(q, r, gq, gr, h):
    """Liao et al. 2019, M >= N: (gQ + Q copyltu(M)) R^-H with M = R gR^H - gQ^H Q (``h``: the
    conjugate transpose, or the transpose for real matrices); for complex matrices the diagonal of
    copyltu(M) is real, because R's diagonal is (LAPACK's Householder QR), which fixes the phases."""
    m_ = matmul(r, h(gr)) - matmul(h(gq), q)
    k = _shape(r)[-1]
    if h is _mH:
        m_ = where(_eye(k), real(m_), m_)
    copyltu = where(_strict_lower(k, lower=False), h(m_), m_)
    return h(solve(r, h(gq + matmul(q, copyltu))))


def _qr_vjp(g, ans, x, mode="reduced"):
    """Wide inputs [X | Y] = Q [R_X | R_Y]: X is square, and R_Y = Q^H Y adds Y R_Y^H to gQ. Complex
    matrices: the conjugating convention inside (_standard_cotangents)."""
    q, r = ans
    gq, gr = g
    if _plain_real(q, r, gq, gr) and q.shape[-1] == r.shape[-1] <= q.shape[-2]:
        # reduced, M >= N, real: _qr_tall_vjp in NumPy
        m_ = r @ gr.swapaxes(-1, -2) - gq.swapaxes(-1, -2) @ q
        copyltu = np.where(_strict_lower(r.shape[-1], lower=False), m_.swapaxes(-1, -2), m_)
        return np.linalg.solve(r, (gq + q @ copyltu).swapaxes(-1, -2)).swapaxes(-1, -2)
    gq, gr = _standard_cotangents(x, *g)
    cx = _is_complex(x)
    h = _mH if cx else _mT
    m, n = _shape(q)[-2], _shape(r)[-1]
    if m > n and _shape(q)[-1] == m:
        _check_unused(gq, _columns(n), "qr: with mode='complete', the columns of Q beyond N")
        q, gq = getitem(q, index=_columns(0, n)), getitem(gq, index=_columns(0, n))
        r, gr = getitem(r, index=_rows(0, n)), getitem(gr, index=_rows(0, n))
    if m >= n:
        a_bar = _qr_tall_vjp(q, r, gq, gr, h)
    else:
        r_y, gr_y = getitem(r, index=_columns(m)), getitem(gr, index=_columns(m))
        y = matmul(q, r_y)
        g_x = _qr_tall_vjp(q, getitem(r, index=_columns(0, m)), gq + matmul(y, h(gr_y)),
                           getitem(gr, index=_columns(0, m)), h)
        a_bar = concatenate(g_x, matmul(q, gr_y), axis=len(_shape(x)) - 1)
    return conj(a_bar) if cx else a_bar


def _qr_tall_jvp(q, r, t, h):
    """M >= N (JAX's rule): C = Q^H dA R^-1, dO = tril(C, -1) - tril(C, -1)^H (plus i Im diag(C)
    for complex matrices, whose R keeps a real diagonal), dQ = Q (dO - C) + dA R^-1, dR = (C - dO) R."""
    t_rinv = matmul(t, inv(r))
    c = matmul(h(q), t_rinv)
    k = _shape(r)[-1]
    low = c * np.tri(k, k=-1, dtype=bool)
    rotation = low - h(low)
    if h is _mH:
        rotation = rotation + (c - h(c)) * np.eye(k) / 2
    return matmul(q, rotation - c) + t_rinv, matmul(c - rotation, r)


def _qr_jvp(tangents, ans, args, params):
    """Wide inputs [X | Y] = Q [R_X | R_Y]: X's square rule, and dR_Y = dQ^H Y + Q^H dY."""
    t = tangents[0]
    h = _mH if _is_complex(args[0]) else _mT
    q, r = ans
    m, n = _shape(q)[-2], _shape(r)[-1]
    if m > n and _shape(q)[-1] == m:  # mode='complete'
        q1, r1 = getitem(q, index=_columns(0, n)), getitem(r, index=_rows(0, n))
        dq, dr = _qr_tall_jvp(q1, r1, t, h)
        dq = concatenate(dq, _complement_tangent(q1, dq, getitem(q, index=_columns(n)), -1), axis=-1)
        return dq, concatenate(dr, np.zeros(tuple(_shape(dr))[:-2] + (m - n, n), unbox(r).dtype), axis=-2)
    if m >= n:
        return _qr_tall_jvp(q, r, t, h)
    dq, dr_x = _qr_tall_jvp(q, getitem(r, index=_columns(0, m)), getitem(t, index=_columns(0, m)), h)
    y = getitem(args[0], index=_columns(m))
    dr_y = matmul(h(dq), y) + matmul(h(q), getitem(t, index=_columns(m)))
    return dq, concatenate(dr_x, dr_y, axis=-1)


qr = defprim(_qr, _qr_vjp, name="qr", multiple_results=True,
             batched_vjp=True, fused_jvp=_qr_jvp, batch=one_batch_axis(stacked_batch))


# --- pseudo-inverse --------------------------------------------------------------------------------
def _pinv(x, hermitian=False, **options):
    return np.linalg.pinv(x, hermitian=hermitian, **options)


def _pinv_vjp(g, ans, x, hermitian=False, **options):
    """Golub & Pereyra: valid where the rank is locally constant (e.g. full rank). The transpose of
    the JVP below; its dA^H terms give conjugated cotangents for complex x."""
    a = _symmetric_from(x) if hermitian else x
    p, pt, ph, gt = ans, _mT(ans), _mH(ans), _mT(g)
    rest = (matmul(gt - matmul(a, matmul(p, gt)), matmul(p, ph))
            + matmul(matmul(ph, p), gt - matmul(matmul(gt, p), a)))
    a_bar = -matmul(pt, matmul(g, pt)) + (conj(rest) if _is_complex(rest) else rest)
    return _fold(a_bar) if hermitian else a_bar


def _pinv_jvp(t, ans, x, hermitian=False, **options):
    """Golub & Pereyra: -P dA P + P P^H dA^H (I - A P) + (I - P A) dA^H P^H P."""
    a = _symmetric_from(x) if hermitian else x
    if hermitian:
        t = _symmetric_from(t)
    p, ph, th = ans, _mH(ans), _mH(t)
    return (-matmul(p, matmul(t, p))
            + matmul(matmul(p, ph), th - matmul(th, matmul(a, p)))
            + matmul(th - matmul(matmul(p, a), th), matmul(ph, p)))


pinv = defprim(_pinv, _pinv_vjp, name="pinv", jvp=_pinv_jvp, batch=one_batch_axis(stacked_batch), batched_vjp=True)


def _lstsq(a, b, rcond=None):
    return np.linalg.lstsq(a, b, rcond=rcond)


def _lstsq_pinv(a, rcond):
    """pinv(a) with lstsq's cut-off: singular values up to rcond * max(s) count as zero."""
    return pinv(a, rcond=_lstsq_cutoff(a, rcond))


def _conj_if(r):
    """conj(r) for complex residuals: |r|^2 moves by 2 Re(conj(r) dr)."""
    return conj(r) if _is_complex(r) else r


def _real_if(g):
    """The real part of a real output's cotangent (docs/complex.md: its imaginary part means nothing)."""
    return real(g) if _is_complex(g) else g


def _lstsq_vjp_a(g, ans, a, b, rcond=None):
    """x = pinv(a) b; residuals |b - a x|^2 move with a only through a (x is optimal); s = svd(a)."""
    gx, gres, _, gs = g
    x, res, _, s = ans
    if len(_shape(b)) == 1:
        gx, x, b = _col(gx), _col(x), _col(b)
    a_bar = _pinv_vjp(matmul(gx, _mT(b)), _lstsq_pinv(a, rcond), a)
    if _shape(res)[0]:
        a_bar = a_bar - 2 * matmul(_conj_if(b - matmul(a, x)) * _real_if(gres), _mT(x))
    # A zero cotangent (s unused) adds nothing, unless traced (differentiated again)
    if np.any(unbox(gs)) or type(gs) is Tracer:
        a_bar = a_bar + _svdvals_vjp(gs, s, a)
    return a_bar


def _lstsq_vjp_b(g, ans, a, b, rcond=None):
    gx, gres, _, _ = g
    x, res, _, _ = ans
    b_bar = matmul(_mT(_lstsq_pinv(a, rcond)), gx)
    if _shape(res)[0]:
        b_bar = b_bar + 2 * _conj_if(b - matmul(a, x)) * _real_if(gres)
    return b_bar


def _lstsq_jvp(tangents, ans, args, params):
    """dx = dpinv(a) b + pinv(a) db; the residuals move by 2 sum(r (db - da x)) (a^T r = 0)."""
    ta, tb = tangents
    a, b = args
    x, res, _, s = ans
    rcond = params.get("rcond")
    vector = len(_shape(b)) == 1
    if vector:
        x, b = _col(x), _col(b)
        tb = None if tb is None else _col(tb)
    p = _lstsq_pinv(a, rcond)
    dx = d_fit = ds = None
    if ta is not None:
        dx = matmul(_pinv_jvp(ta, p, a), b)
        d_fit = -matmul(ta, x)
        ds = _svdvals_jvp(ta, s, a)
    if tb is not None:
        dx = matmul(p, tb) if dx is None else dx + matmul(p, tb)
        d_fit = tb if d_fit is None else d_fit + tb
    d_res = None
    if _shape(res)[0]:
        d_res = 2 * sum_(_conj_if(b - matmul(a, x)) * d_fit, axis=-2)
        d_res = real(d_res) if _is_complex(d_res) else d_res
    if vector:
        dx = reshape(dx, shape=_shape(dx)[:-1])
    return dx, d_res, None, ds


def _lstsq_columns(a, b, rcond, size):
    """vmap of lstsq over right-hand sides against one matrix (jacfwd's tangents): the batch becomes
    more columns of one lstsq call, whose x, residuals and rank are per column; a's rank and s are shared."""
    shape = tuple(_shape(b))  # (batch, M) or (batch, M, K)
    columns = shape[2] if len(shape) == 3 else 1
    if len(shape) == 2:
        x, res, rank, s = lstsq(a, transpose(b, axes=(1, 0)), rcond=rcond)
        x = transpose(x, axes=(1, 0))
    else:
        flat = reshape(transpose(b, axes=(1, 0, 2)), shape=(shape[1], size * columns))
        x, res, rank, s = lstsq(a, flat, rcond=rcond)
        x = transpose(reshape(x, shape=(_shape(x)[0], size, columns)), axes=(1, 0, 2))
    res = reshape(res, shape=(size, columns if _shape(res)[0] else 0))
    s = broadcast_to(s, shape=(size,) + tuple(_shape(s)))
    return x, res, np.full(size, unbox(rank)), s


def _lstsq_cutoff(a, rcond):
    """lstsq's rcond: singular values up to it times the largest count as zero (LAPACK's gelsd)."""
    eps = _eps(unbox(a).dtype)
    return max(_shape(a)[-2:]) * eps if rcond is None else (rcond if rcond >= 0 else eps)


def _lstsq_stacked(a, b, b_batched, rcond, size):
    """vmap of lstsq over matrices (NumPy's lstsq takes no stacks): x = pinv(a) b with lstsq's
    cut-off, whose rules are the ones lstsq's own rules use; residuals |b - a x|^2 where every
    example has full column rank and M > N. None where the examples disagree on that (the residuals'
    shapes would differ)."""
    m, n = _shape(a)[-2:]
    s = svdvals(a)
    plain_s = unbox(s)
    rank = np.sum(plain_s > _lstsq_cutoff(a, rcond) * np.max(plain_s, axis=-1, keepdims=True), axis=-1)
    full = (rank == n) & (m > n)
    if np.any(full) and not np.all(full):
        return None
    vector = len(_shape(b)) - b_batched == 1
    if vector:
        b = _col(b)
    x = matmul(_lstsq_pinv(a, rcond), b)
    if np.all(full):
        fit = b - matmul(a, x)
        res = sum_(real(fit * conj(fit)) if _is_complex(fit) else fit * fit, axis=-2)
    else:
        res = np.zeros((size, 0), np.real(np.empty(0, unbox(x).dtype)).dtype)
    if vector:
        x = reshape(x, shape=_shape(x)[:-1])
    return x, res, rank.astype(np.int32), s


def _lstsq_batch(prim, vals, batched, params, size):
    """vmap of lstsq (a batch on axis 0); see _lstsq_columns and _lstsq_stacked."""
    a, b = vals
    rcond = params.get("rcond")
    if not batched[0]:
        return _lstsq_columns(a, b, rcond, size)
    out = _lstsq_stacked(a, b, batched[1], rcond, size)
    return NotImplemented if out is None else out


lstsq = defprim(_lstsq, (_lstsq_vjp_a, _lstsq_vjp_b), name="lstsq", multiple_results=True,
                batched_vjp=True, fused_jvp=_lstsq_jvp, batch=one_batch_axis(_lstsq_batch))


# --- smooth norms ----------------------------------------------------------------------------------
def _pnorm(x, ord=None, axis=None, keepdims=False):  # noqa: A002 - NumPy's name
    return np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)


def _pnorm_weights(norms, x, ord):  # noqa: A002
    """d|x|_p / dx, ``norms`` broadcast to ``x``'s shape."""
    safe = where(_is_zero(norms), 1.0, norms)
    if ord in (None, 2, "fro", "f"):
        return x / safe
    return _sign(x) * power(absolute(x) / safe, ord - 1)


@elementwise_constant
def _is_zero(x):
    return x == 0


@elementwise_constant
def _sign(x):
    return np.sign(x)


def _pnorm_vjp(g, ans, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    """x / |x| for 2-norms, sign(x) (|x| / |x|_p)^(p-1) otherwise; 0 (a subgradient) at x = 0."""
    shape = _shape(x)
    return _expand_to(g, shape, axis, keepdims) * _pnorm_weights(_expand_to(ans, shape, axis, keepdims), x, ord)


def _pnorm_jvp(t, ans, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    """<the VJP's weights, t> over the reduced axes."""
    weights = _pnorm_weights(_expand_to(ans, _shape(x), axis, keepdims), x, ord)
    return sum_(weights * t, axis=axis, keepdims=keepdims)


def _pnorm_batch(prim, vals, batched, params, size):
    """vmap of pnorm (a batch on axis 0): its axes shifted past the batch. axis=None reads a 1-D or
    2-D example as its vector or matrix norm and flattens a larger one (ord None), as NumPy does."""
    (x,) = vals
    shape = tuple(_shape(x))
    nd = len(shape) - 1
    axis, keepdims = params.get("axis"), params.get("keepdims", False)
    if axis is None and nd > 2:
        out = prim(reshape(x, shape=(size, -1)), ord=params.get("ord"), axis=1, keepdims=keepdims)
        return reshape(out, shape=(size,) + (1,) * nd) if keepdims else out
    if axis is None:
        axis = tuple(range(nd))
    axis = tuple(a % nd + 1 for a in axis) if isinstance(axis, (tuple, list)) else axis % nd + 1
    return prim(x, ord=params.get("ord"), axis=axis, keepdims=keepdims)


pnorm = defprim(_pnorm, _pnorm_vjp, name="pnorm", jvp=_pnorm_jvp, batch=one_batch_axis(_pnorm_batch),
                batched_vjp=True)

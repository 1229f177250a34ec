"""wengert.numpy.linalg: NumPy's linalg, differentiable.

Each function has NumPy's signature and, on plain arrays, is NumPy's own call. On traced values it
maps onto the primitives of ``wengert.primitives.linalg``; stacks of matrices (``...xMxN``) work
wherever NumPy accepts them. Results that NumPy returns as named tuples (``EighResult``,
``SVDResult``, ``QRResult``, ``SlogdetResult``) come back as the same named tuples.

``matrix_rank`` reads traced values and returns NumPy's integer. ``eig`` and ``eigvals`` of
non-symmetric matrices are complex in general (real when every eigenvalue is, as NumPy returns them).
See the primitives module for the conventions at degenerate points (repeated eigenvalues, one
triangle read by cholesky/eigh, singular matrices).
"""
from numpy.linalg import *  # noqa: F401,F403 - LinAlgError and the functions without a derivative here

import operator as _operator

import numpy as _np
import numpy.linalg as _npl

from ..core.trace import Tracer as _Tracer
from ..core.trace import unbox as _unbox
from ..primitives import linalg as _L
from . import _functions as _F
from ..primitives._table import nondiff as _nondiff
from ..primitives._table import unbox_all as _unbox_all
from ._functions import traceable as _traceable

_NO_VALUE = _np._NoValue
_operand = _F.as_traced_operand

matrix_rank = _nondiff(_npl.matrix_rank)


def _result_type(fn, *args, **kwargs):
    """The (named) tuple type NumPy returns from ``fn``; plain ``tuple`` on older NumPy."""
    return type(fn(*args, **kwargs))


_EIGH = _result_type(_npl.eigh, _np.eye(1))
_EIG = _result_type(_npl.eig, _np.eye(1))
_SVD = _result_type(_npl.svd, _np.eye(1))
_QR = _result_type(_npl.qr, _np.eye(1))
_SLOGDET = _result_type(_npl.slogdet, _np.eye(1))


def _wrap(kind, values):
    return kind(*values) if kind is not tuple else tuple(values)


def _stacked_square(a, name):
    shape = a.shape
    if len(shape) < 2:
        raise _npl.LinAlgError(f"{len(shape)}-dimensional array given. Array must be at least two-dimensional")
    if shape[-1] != shape[-2]:
        raise _npl.LinAlgError(f"{name}: last 2 dimensions of the array must be square")


@_traceable(_npl.cross)
def cross(x1, x2, /, *, axis=-1):
    """The array API's cross product: 3-vectors along ``axis``."""
    x1, x2 = _operand(x1), _operand(x2)
    if x1.shape[axis] != 3 or x2.shape[axis] != 3:
        raise ValueError(f"Both input arrays must be (arrays of) 3-dimensional vectors, but they are "
                         f"{x1.shape[axis]} and {x2.shape[axis]} dimensional instead.")
    return _cross3(x1, x2, axis)


def _cross3(x1, x2, axis):
    a, b = _F.moveaxis(x1, axis, -1), _F.moveaxis(x2, axis, -1)
    a0, a1, a2, b0, b1, b2 = a[..., 0], a[..., 1], a[..., 2], b[..., 0], b[..., 1], b[..., 2]
    out = _F.stack(list(_F.broadcast_arrays(a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0)), axis=-1)
    return _F.moveaxis(out, -1, axis)


# --- inverse, solve, determinants ------------------------------------------------------------------
@_traceable(_npl.inv)
def inv(a):
    return _L.inv(_operand(a))


_NUMPY2 = _np.lib.NumpyVersion(_np.__version__) >= "2.0.0"


def _vector_rhs(a, b):
    """NumPy 2 reads a 1-D ``b`` as one vector; NumPy 1 reads any ``b`` of one dimension less than ``a``."""
    return b.ndim == 1 if _NUMPY2 else b.ndim == a.ndim - 1


@_traceable(_npl.solve)
def solve(a, b):
    a, b = _operand(a), _operand(b)
    if _vector_rhs(a, b):
        return _F.squeeze(_L.solve(a, _F.expand_dims(b, -1)), -1)
    return _L.solve(a, b)


@_traceable(_npl.det)
def det(a):
    return _L.det(_operand(a))


@_traceable(_npl.slogdet)
def slogdet(a):
    return _wrap(_SLOGDET, _L.slogdet(_operand(a)))


@_traceable(_npl.matrix_power)
def matrix_power(a, n):
    """NumPy's binary decomposition of ``n``, so the products are the same."""
    a = _operand(a)
    _stacked_square(a, "matrix_power")
    n = _operator.index(n)
    if n == 0:
        return _np.broadcast_to(_np.eye(a.shape[-1], dtype=a.dtype), a.shape).copy()
    if n < 0:
        a, n = inv(a), -n
    z = result = None
    while n > 0:
        z = a if z is None else _F.matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else _F.matmul(result, z)
    return result


def _chain_order(dims):
    """Where the product of arrays i..j splits, by NumPy's dynamic programme (ties: leftmost)."""
    n = len(dims) - 1
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = _np.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k
    return split


def _chain(arrays, split, i, j):
    if i == j:
        return arrays[i]
    k = split[i][j]
    return _F.dot(_chain(arrays, split, i, k), _chain(arrays, split, k + 1, j))


@_F._sequence_traceable(_npl.multi_dot)
def multi_dot(arrays, *, out=None):
    _F._unsupported("linalg.multi_dot", out=out)
    arrays = [_operand(a) for a in arrays]
    if len(arrays) < 2:
        raise ValueError("Expecting at least two arrays.")
    if len(arrays) == 2:
        return _F.dot(arrays[0], arrays[1])
    first, last = arrays[0].ndim, arrays[-1].ndim
    if first == 1:
        arrays[0] = _F.reshape(arrays[0], (1, -1))
    if last == 1:
        arrays[-1] = _F.reshape(arrays[-1], (-1, 1))
    dims = [a.shape[0] for a in arrays] + [arrays[-1].shape[1]]
    result = _chain(arrays, _chain_order(dims), 0, len(arrays) - 1)
    if first == 1 and last == 1:
        return result[0, 0]
    return _F.ravel(result) if first == 1 or last == 1 else result


# --- factorizations ---------------------------------------------------------------------------------
@_traceable(_npl.cholesky)
def cholesky(a, /, *, upper=False):
    """Differentiates NumPy's function, which reads only the lower (``upper=True``: upper) triangle."""
    return _L.cholesky(_operand(a), upper=bool(upper))


@_traceable(_npl.eigh)
def eigh(a, UPLO="L"):  # noqa: N803 - NumPy's name
    """Eigenvector gradients exist only where eigenvalues are distinct; tied pairs contribute 0."""
    return _wrap(_EIGH, _L.eigh(_operand(a), UPLO=UPLO))


@_traceable(_npl.eigvalsh)
def eigvalsh(a, UPLO="L"):  # noqa: N803
    a = _operand(a)
    # traced: the forward pass keeps the eigenvectors for the rules (primitives/linalg.py)
    return _L.eigvalsh(a, UPLO=UPLO, stash=[None] if type(a) is _Tracer else None)


@_traceable(_npl.eig)
def eig(a):
    """Eigenvectors have unit norm and LAPACK's phase: differentiate functions that do not depend on
    the phase (see primitives/linalg.py); tied eigenvalues contribute 0, as in eigh."""
    a = _operand(a)
    _stacked_square(a, "eig")
    return _wrap(_EIG, _L.eig(a))


@_traceable(_npl.eigvals)
def eigvals(a):
    a = _operand(a)
    _stacked_square(a, "eigvals")
    return _L.eigvals(a)


def _hermitian_svd(a, compute_uv):
    """NumPy's own route for hermitian=True: eigh, then signs moved into Vh and values sorted."""
    if not compute_uv:
        s = _F.sort(_F.abs(eigvalsh(a)), axis=-1)
        return s[..., ::-1]
    w, v = eigh(a)
    order = _np.argsort(_F.abs(w), axis=-1)[..., ::-1]  # traced: batched under vmap
    sign = _F.take_along_axis(_F.where(_np.signbit(w), -1.0, 1.0), order, axis=-1)
    s = _F.take_along_axis(_F.abs(w), order, axis=-1)
    u = _F.take_along_axis(v, order[..., None, :], axis=-1)
    return _wrap(_SVD, (u, s, _F.swapaxes(u * sign[..., None, :], -1, -2)))


def _singular_values(a):
    """svdvals; traced, the forward pass keeps the singular vectors for the rules (primitives/linalg.py)."""
    return _L.svdvals(a, stash=[None] if type(a) is _Tracer else None)


@_traceable(_npl.svd)
def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """Singular-vector gradients exist only for distinct, nonzero singular values (tied pairs
    contribute 0). With full_matrices=True and M != N, the extra columns of U (rows of Vh) are an
    arbitrary basis: gradients flowing into them raise NotImplementedError."""
    a = _operand(a)
    if hermitian:
        return _hermitian_svd(a, compute_uv)
    if not compute_uv:  # complex too: Re diag(U^H dA V) does not depend on the vectors' phases
        return _singular_values(a)
    return _wrap(_SVD, _L.svd(a, full_matrices=bool(full_matrices)))


@_traceable(_npl.qr)
def qr(a, mode="reduced"):
    """Modes 'reduced', 'complete' and 'r', for any shape with full rank min(M, N). With 'complete'
    and M > N, the extra columns of Q are an arbitrary basis: gradients into them raise
    NotImplementedError. 'raw' (Householder reflectors) has no derivative here."""
    if mode not in ("reduced", "complete", "r"):
        if mode in ("raw", "economic", "e"):
            raise NotImplementedError(
                f"wengert.numpy.linalg.qr: mode={mode!r} (Householder reflectors) is not differentiable "
                "here; use mode='reduced'")
        raise ValueError(f"Unrecognized mode '{mode}'")
    q, r = _L.qr(_operand(a), mode="reduced" if mode == "r" else mode)
    return r if mode == "r" else _wrap(_QR, (q, r))


@_traceable(_npl.pinv)
def pinv(a, rcond=None, hermitian=False, *, rtol=_NO_VALUE):
    """The derivative exists where the rank is locally constant (e.g. full rank)."""
    options = {} if rcond is None else {"rcond": rcond}
    if rtol is not _NO_VALUE:
        options["rtol"] = rtol
    return _L.pinv(_operand(a), hermitian=bool(hermitian), **options)


@_traceable(_npl.lstsq)
def lstsq(a, b, rcond=None):
    """The derivative exists where the rank of ``a`` is locally constant (e.g. full rank)."""
    x, residuals, rank, s = _L.lstsq(_operand(a), _operand(b), rcond=rcond)
    return x, residuals, _unbox_all(rank), s  # under vmap, the rank keeps its batch axis


# --- norms and condition numbers ------------------------------------------------------------------
def _vector_norm(x, ord, axis, keepdims):  # noqa: A002 - NumPy's name
    if ord == _np.inf:
        return _F.max(_F.abs(x), axis=axis, keepdims=keepdims)
    if ord == -_np.inf:
        return _F.min(_F.abs(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        # the count of non-zeros, as NumPy computes it (traced values keep vmap's batch; no gradient)
        return _F.sum(_F.astype(x != 0, _np.zeros((), _np.result_type(_unbox(x))).real.dtype), axis=axis,
                      keepdims=keepdims)
    if ord == 1:
        return _F.sum(_F.abs(x), axis=axis, keepdims=keepdims)
    return _L.pnorm(x, ord=ord, axis=axis, keepdims=keepdims)


def _matrix_norm(x, ord, axis, keepdims):  # noqa: A002
    row, col = axis
    if row == col:
        raise ValueError("Duplicate axes given.")
    if ord in (None, "fro", "f"):
        return _L.pnorm(x, ord=ord, axis=axis, keepdims=keepdims)
    if ord in (2, -2, "nuc"):
        s = _singular_values(_F.moveaxis(x, (row, col), (-2, -1)))
        result = {2: _F.max, -2: _F.min, "nuc": _F.sum}[ord](s, axis=-1)
    elif ord in (1, -1):
        reduce = _F.max if ord == 1 else _F.min
        result = reduce(_F.sum(_F.abs(x), axis=row), axis=col - 1 if col > row else col)
    elif ord in (_np.inf, -_np.inf):
        reduce = _F.max if ord == _np.inf else _F.min
        result = reduce(_F.sum(_F.abs(x), axis=col), axis=row - 1 if row > col else row)
    else:
        raise ValueError("Invalid norm order for matrices.")
    if keepdims:
        shape = list(x.shape)
        shape[row] = shape[col] = 1
        result = _F.reshape(result, tuple(shape))
    return result


@_traceable(_npl.norm)
def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002
    """The 2-norm has gradient 0 (a subgradient) at x = 0, as ``abs`` has; ties in the inf-norms
    share the gradient equally."""
    x = _operand(x)
    if _np.iscomplexobj(_unbox(x)):
        return _complex_norm(x, ord, axis, keepdims)
    nd = x.ndim
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            return _L.pnorm(x, ord=ord, axis=None, keepdims=keepdims)
        if nd not in (1, 2):
            raise ValueError("Improper number of dimensions to norm.")
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        axis = (_operator.index(axis),)
    for a in axis:
        if not -nd <= a < nd:
            raise _np.exceptions.AxisError(a, nd)
    axis = tuple(a % nd for a in axis)
    if len(axis) == 1:
        return _vector_norm(x, ord, axis, keepdims)
    if len(axis) == 2:
        return _matrix_norm(x, ord, axis, keepdims)
    raise ValueError("Improper number of dimensions to norm.")


def _complex_norm(x, ord, axis, keepdims):  # noqa: A002
    """Norms of complex values depend on |x| only: the 2-norms as sqrt(sum(Re(x conj x))), which has
    a gradient wherever the norm is nonzero, the others as the norm of abs(x)."""
    matrix = (axis is None and x.ndim == 2 and ord is not None) or (isinstance(axis, tuple) and len(axis) == 2)
    if matrix and ord in (2, -2, "nuc"):  # singular values: first derivatives (svdvals' rule)
        return _matrix_norm(x, ord, axis if isinstance(axis, tuple) else (0, 1), keepdims)
    if ord is None or ord in ("fro", "f") or (ord == 2 and not matrix):
        squares = _F.real(x * _F.conj(x))
        return _F.sqrt(_F.sum(squares, axis=axis, keepdims=keepdims))
    return norm(_F.abs(x), ord, axis, keepdims)


@_traceable(_npl.cond)
def cond(x, p=None):
    """Singular matrices (infinite condition number) have no derivative."""
    x = _operand(x)
    if p is None or p in (2, -2):
        s = _singular_values(x)
        first, last = s[..., 0], s[..., -1]
        return last / first if p == -2 else first / last
    return norm(x, p, axis=(-2, -1)) * norm(inv(x), p, axis=(-2, -1))


@_traceable(_npl.tensorinv)
def tensorinv(a, ind=2):
    a = _operand(a)
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    size = int(_np.prod(a.shape[ind:]))
    return _F.reshape(inv(_F.reshape(a, (size, -1))), a.shape[ind:] + a.shape[:ind])


@_traceable(_npl.tensorsolve)
def tensorsolve(a, b, axes=None):
    a, b = _operand(a), _operand(b)
    if axes is not None:
        order = [k for k in range(a.ndim) if k not in [ax % a.ndim for ax in axes]]
        a = _F.transpose(a, order + [ax % a.ndim for ax in axes])
    shape = a.shape[-(a.ndim - b.ndim):]
    size = int(_np.prod(shape))
    if int(_np.prod(a.shape)) != size ** 2:
        raise _npl.LinAlgError("Input arrays must satisfy the requirement "
                               "prod(a.shape[b.ndim:]) == prod(a.shape[:b.ndim])")
    return _F.reshape(solve(_F.reshape(a, (size, size)), _F.ravel(b)), shape)


# --- NumPy 2's array-API names ------------------------------------------------------------------------
if hasattr(_npl, "svdvals"):
    @_traceable(_npl.svdvals)
    def svdvals(x, /):
        return _singular_values(_operand(x))

    @_traceable(_npl.matrix_norm)
    def matrix_norm(x, /, *, keepdims=False, ord="fro"):  # noqa: A002
        return norm(x, axis=(-2, -1), keepdims=keepdims, ord=ord)

    @_traceable(_npl.vector_norm)
    def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):  # noqa: A002
        """NumPy's route: the reduced axes are moved to the front and flattened into one."""
        x = _operand(x)
        shape = x.shape
        if axis is None:
            flat, along = _F.ravel(x), 0
        elif isinstance(axis, tuple):
            axes = tuple(a % x.ndim for a in axis)
            rest = tuple(i for i in range(x.ndim) if i not in axes)
            flat = _F.reshape(_F.transpose(x, axes + rest), (-1,) + tuple(shape[i] for i in rest))
            along = 0
        else:
            flat, along = x, axis
        result = norm(flat, axis=along, ord=ord)
        if keepdims:
            reduced = range(len(shape)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
            kept = list(shape)
            for i in reduced:
                kept[i % len(shape)] = 1
            result = _F.reshape(result, tuple(kept))
        return result

    @_traceable(_npl.matmul)
    def matmul(x1, x2, /):
        return _F.matmul(x1, x2)

    @_traceable(_npl.outer)
    def outer(x1, x2, /):
        if _F._ndim(x1) != 1 or _F._ndim(x2) != 1:
            raise ValueError("Input arrays must be one-dimensional")
        return _F.outer(x1, x2)

    @_traceable(_npl.tensordot)
    def tensordot(x1, x2, /, *, axes=2):
        return _F.tensordot(x1, x2, axes=axes)

    @_traceable(_npl.trace)
    def trace(x, /, *, offset=0, dtype=None):
        return _F.trace(x, offset=offset, axis1=-2, axis2=-1, dtype=dtype)

    @_traceable(_npl.diagonal)
    def diagonal(x, /, *, offset=0):
        return _F.diagonal(x, offset=offset, axis1=-2, axis2=-1)

    @_traceable(_npl.matrix_transpose)
    def matrix_transpose(x, /):
        return _F.swapaxes(x, -1, -2)

    @_traceable(_npl.vecdot)
    def vecdot(x1, x2, /, *, axis=-1):
        return _F.sum(_operand(x1) * _operand(x2), axis=axis)

"""scipy.linalg with gradients: ``solve_triangular``, ``cho_solve``, ``cho_factor``, ``expm``,
``sqrtm``, ``solve_sylvester`` (real matrices).

``expm``'s rule is the block-matrix form of its Fréchet derivative, ``sqrtm``'s a Sylvester
equation; both rules are written with these same primitives, so second derivatives work. Each
primitive has a JVP rule beside its VJP rule: the same equations, solved for the tangent.

``sqrtm`` and ``solve_sylvester`` take stacks (``...xMxN``, looping over SciPy's one-matrix calls
where SciPy does not), so vmap runs them once on the batch; a stack of Sylvester right-hand sides
against one pair of matrices (jacfwd's tangents) shares their Schur decompositions.
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as _sl

from ..core.trace import Tracer
from ..numpy import _functions as F
from ..numpy import linalg as _la
from ..primitives import linalg as _la_prims
from ..primitives._batching import one_batch_axis
from ..primitives._table import defprim, unbroadcast

__all__ = ["solve_triangular", "cho_solve", "cho_factor", "cholesky", "expm", "sqrtm", "solve_sylvester"]


def _t(x):
    return F.swapaxes(x, -1, -2)


def _mat(v):
    return F.reshape(v, v.shape + (1,)) if v.ndim == 1 else v


def _trans_flag(trans):
    flags = {0: 0, 1: 1, "N": 0, "T": 1, 2: 1, "C": 1}
    if trans not in flags:
        raise ValueError(f"Incorrect trans argument {trans!r}")
    return flags[trans]


def _st_impl(a, b, trans=0, lower=False, unit_diagonal=False):
    return _sl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)


def _st_vjp_b(g, ans, a, b, trans=0, lower=False, unit_diagonal=False):
    return _st(a, g, trans=1 - trans, lower=lower, unit_diagonal=unit_diagonal)


def _st_vjp_a(g, ans, a, b, trans=0, lower=False, unit_diagonal=False):
    gb = _mat(_st(a, g, trans=1 - trans, lower=lower, unit_diagonal=unit_diagonal))
    x = _mat(ans)
    ga = -(gb @ _t(x)) if trans == 0 else -(x @ _t(gb))
    ga = F.tril(ga) if lower else F.triu(ga)
    if unit_diagonal:
        ga = ga * (1 - np.eye(a.shape[-1]))
    return ga


def _st_jvp(tangents, ans, args, params):
    """dx = op(a)^-1 (db - op(da) x), da the triangle read (its diagonal too unless unit): one solve."""
    ta, tb = tangents
    rhs = tb
    if ta is not None:
        da = F.tril(ta) if params["lower"] else F.triu(ta)
        if params["unit_diagonal"]:
            da = da * (1 - np.eye(args[0].shape[-1]))
        moved = (_t(da) if params["trans"] else da) @ ans
        rhs = -moved if rhs is None else rhs - moved
    return _st(args[0], rhs, **params)


def _st_batch(prim, vals, batched, params, size):
    """vmap (a batch on axis 0) of right-hand sides against one matrix (jacfwd's tangents): one solve
    with the batch as more columns. A batch of matrices runs once per example."""
    a, b = vals
    if batched[0]:
        return NotImplemented
    shape = tuple(b.shape)
    x = prim(a, F.reshape(F.moveaxis(b, 0, -1), (shape[1], -1)), **params)
    return F.moveaxis(F.reshape(x, shape[1:] + (size,)), -1, 0)


_st = defprim(_st_impl, (_st_vjp_a, _st_vjp_b), name="scipy.linalg.solve_triangular",
              batched_vjp=True, fused_jvp=_st_jvp, batch=one_batch_axis(_st_batch))


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    """``scipy.linalg.solve_triangular``; differentiable in ``a`` (its triangle) and ``b``."""
    if type(a) is not Tracer and type(b) is not Tracer:
        return _sl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal,
                                    overwrite_b=overwrite_b, check_finite=check_finite)
    return _st(F.as_traced_operand(a), F.as_traced_operand(b), trans=_trans_flag(trans),
               lower=bool(lower), unit_diagonal=bool(unit_diagonal))


def cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    """``scipy.linalg.cholesky`` (upper by default, as SciPy)."""
    if type(a) is not Tracer:
        return _sl.cholesky(a, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite)
    low = _la.cholesky(a)
    return low if lower else _t(low)


def cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)`` as SciPy's; on traced values the other triangle of ``c`` is zero."""
    if type(a) is not Tracer:
        return _sl.cho_factor(a, lower=lower, overwrite_a=overwrite_a, check_finite=check_finite)
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    """``scipy.linalg.cho_solve((c, lower), b)``: two triangular solves, differentiable in both."""
    c, lower = c_and_lower
    if type(c) is not Tracer and type(b) is not Tracer:
        return _sl.cho_solve((c, lower), b, overwrite_b=overwrite_b, check_finite=check_finite)
    if lower:
        return solve_triangular(c, solve_triangular(c, b, lower=True), trans=1, lower=True)
    return solve_triangular(c, solve_triangular(c, b, trans=1, lower=False), lower=False)


def _frechet(a, e):
    """The Fréchet derivative of expm at ``a`` along ``e``: the top right block of expm([[a, e], [0, a]])."""
    n = a.shape[-1]
    zero = np.zeros(a.shape)
    block = F.concatenate([F.concatenate([a, e], axis=-1), F.concatenate([zero, a], axis=-1)], axis=-2)
    return expm(block)[..., :n, n:]


def _expm_batch(prim, vals, batched, params, size):
    return prim(*vals)   # SciPy's expm takes stacks


expm = defprim(_sl.expm, lambda g, ans, a: _frechet(_t(a), g), name="scipy.linalg.expm",
               jvp=lambda t, ans, a: _frechet(a, t),
               batch=one_batch_axis(_expm_batch), batched_vjp=True)


def _over_stack(fn, *mats):
    """``fn`` of 2-D matrices applied across broadcast stacks (``...xMxN``), for SciPy versions whose
    functions take one matrix only."""
    lead = np.broadcast_shapes(*(np.shape(m)[:-2] for m in mats))
    if not lead:
        return fn(*mats)
    mats = [np.broadcast_to(m, lead + np.shape(m)[-2:]) for m in mats]
    outs = [fn(*(m[i] for m in mats)) for i in np.ndindex(lead)]
    return np.stack(outs).reshape(lead + outs[0].shape)


def _sylvester_shared(a, b, q):
    """Bartels-Stewart for a stack of right-hand sides against one (a, b), as SciPy's
    solve_sylvester but with the two Schur decompositions done once (jacfwd's tangents)."""
    r, u = _sl.schur(a, output="real")
    s, v = _sl.schur(b.conj().T, output="real")
    f = u.conj().T @ q @ v
    trsyl, = _sl.get_lapack_funcs(("trsyl",), (r, s, f))
    ys = []
    for rhs in f.reshape((-1,) + f.shape[-2:]):
        y, scale, info = trsyl(r, s, rhs, tranb="C")
        if info < 0:
            raise np.linalg.LinAlgError(f"Illegal value encountered in the {-info} term")
        ys.append(scale * y)
    return u @ np.stack(ys).reshape(f.shape) @ v.conj().T


def _sylvester_impl(a, b, q):
    if np.ndim(a) == 2 and np.ndim(b) == 2 and np.ndim(q) > 2 and np.size(q):
        return _sylvester_shared(np.asarray(a), np.asarray(b), np.asarray(q))
    return _over_stack(_sl.solve_sylvester, a, b, q)


def _syl_adjoint(g, a, b):
    return _sylvester(_t(a), _t(b), g)




def _sylvester_jvp(tangents, ans, args, params):
    """a dX + dX b = dq - da X - X db: one Sylvester solve for all three tangents."""
    ta, tb, tq = tangents
    terms = ([] if tq is None else [tq]) + ([] if ta is None else [-(ta @ ans)]) \
        + ([] if tb is None else [-(ans @ tb)])
    rhs = terms[0]
    for term in terms[1:]:
        rhs = rhs + term
    return _sylvester(args[0], args[1], rhs)


def _sylvester_batch(prim, vals, batched, params, size):
    """vmap of solve_sylvester (a batch on axis 0): the impl takes broadcast stacks, so batched
    operands get ones after the batch axis up to a common rank; right-hand sides batched against one
    (a, b) share its Schur decompositions."""
    rank = max(len(_la_prims._shape(v)) - b for v, b in zip(vals, batched))
    return prim(*(_la_prims._pad_batched(v, rank) if b else v for v, b in zip(vals, batched)))


_sylvester = defprim(_sylvester_impl, (
    lambda g, ans, a, b, q: unbroadcast(-(_syl_adjoint(g, a, b) @ _t(ans)), a),
    lambda g, ans, a, b, q: unbroadcast(-(_t(ans) @ _syl_adjoint(g, a, b)), b),
    lambda g, ans, a, b, q: unbroadcast(_syl_adjoint(g, a, b), q)), name="scipy.linalg.solve_sylvester",
                     batched_vjp=True, fused_jvp=_sylvester_jvp, batch=one_batch_axis(_sylvester_batch))


def solve_sylvester(a, b, q):
    """``scipy.linalg.solve_sylvester``: ``X`` with ``a X + X b = q``; differentiable in all three."""
    if not any(type(x) is Tracer for x in (a, b, q)):
        return _sl.solve_sylvester(a, b, q)
    return _sylvester(*(F.as_traced_operand(x) for x in (a, b, q)))


def _sqrtm_impl(a):
    return _over_stack(_sqrtm_matrix, a)


def _sqrtm_matrix(a):
    out = _sl.sqrtm(a)
    out = out[0] if isinstance(out, tuple) else out
    if np.isrealobj(a) and np.iscomplexobj(out) and not np.any(np.imag(out)):
        out = np.real(out)
    return out


sqrtm = defprim(_sqrtm_impl, lambda g, ans, a: _sylvester(_t(ans), _t(ans), g), name="scipy.linalg.sqrtm",
               jvp=lambda t, ans, a: _sylvester(ans, ans, t),  # X dX + dX X = dA
               batch=one_batch_axis(_la_prims.stacked_batch), batched_vjp=True)

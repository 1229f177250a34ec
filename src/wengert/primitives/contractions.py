"""Products and contractions: matmul, dot, tensordot, outer, vdot, einsum.

Two facts measured on these machines shape the rules. ``np.matmul`` with an inner dimension of 1
(a batch-1 outer product such as ``x.T @ delta``) skips BLAS and is several times slower than
``np.dot``, so 2-D products go through ``np.dot``. And ``einsum``'s best contraction order depends
on the shapes, so it is chosen by opt_einsum and cached per (subscripts, shapes).
"""
from __future__ import annotations

import functools
import string

import numpy as np
import opt_einsum

from ..core.trace import unbox
from ._table import defprim, unbroadcast


def _matmul(a, b):
    if a.ndim == 2 and b.ndim == 2:
        return np.dot(a, b)
    return np.matmul(a, b)


def _swap(x):
    from .shape import transpose
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes=tuple(axes))


def _as_matrices(g, a, b):
    """``g``, ``a``, ``b`` with 1-d operands promoted as matmul does: a to (1, n), b to (n, 1)."""
    from .shape import reshape
    if b.ndim == 1:
        g = reshape(g, shape=g.shape + (1,))
        b = reshape(b, shape=(b.shape[0], 1))
    if a.ndim == 1:
        g = reshape(g, shape=g.shape[:-1] + (1, g.shape[-1]))
        a = reshape(a, shape=(1, a.shape[0]))
    return g, a, b


def _matmul_vjp_a(g, ans, a, b):
    """Promote 1-d operands first (the column before the row), so 1-d @ 1-d works too."""
    from .shape import reshape
    g, a2, b = _as_matrices(g, a, b)
    return reshape(unbroadcast(matmul(g, _swap(b)), a2), shape=a.shape)


def _matmul_vjp_b(g, ans, a, b):
    from .shape import reshape
    g, a, b2 = _as_matrices(g, a, b)
    return reshape(unbroadcast(matmul(_swap(a), g), b2), shape=b.shape)


# bilinear: the product rule, one contraction per traced operand
matmul = defprim(_matmul, (_matmul_vjp_a, _matmul_vjp_b), name="matmul",
                 jvp=(lambda t, ans, a, b: matmul(t, b), lambda t, ans, a, b: matmul(a, t)))


def _tensordot_axes(axes, a_ndim, b_ndim):
    if isinstance(axes, (int, np.integer)):
        return list(range(a_ndim - axes, a_ndim)), list(range(axes))
    axes_a, axes_b = axes
    axes_a = [axes_a] if isinstance(axes_a, (int, np.integer)) else list(axes_a)
    axes_b = [axes_b] if isinstance(axes_b, (int, np.integer)) else list(axes_b)
    return [x % a_ndim for x in axes_a], [x % b_ndim for x in axes_b]


def _tensordot(a, b, axes=2):
    return np.tensordot(a, b, axes)


def _tensordot_vjp_a(g, ans, a, b, axes=2):
    from .shape import transpose
    axes_a, axes_b = _tensordot_axes(axes, a.ndim, b.ndim)
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    da = tensordot(g, b, axes=(list(range(len(free_a), g.ndim)), free_b))
    # da's trailing axes follow b's contracted axes in b's order, not the order axes were given in
    order = free_a + [axes_a[axes_b.index(i)] for i in sorted(axes_b)]
    return transpose(da, axes=tuple(np.argsort(order)))


def _tensordot_vjp_b(g, ans, a, b, axes=2):
    from .shape import transpose
    axes_a, axes_b = _tensordot_axes(axes, a.ndim, b.ndim)
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    db = tensordot(a, g, axes=(free_a, list(range(len(free_a)))))
    order = [axes_b[axes_a.index(i)] for i in sorted(axes_a)] + free_b
    return transpose(db, axes=tuple(np.argsort(order)))


tensordot = defprim(_tensordot, (_tensordot_vjp_a, _tensordot_vjp_b), name="tensordot",
                    jvp=(lambda t, ans, a, b, axes=2: tensordot(t, b, axes=axes),
                         lambda t, ans, a, b, axes=2: tensordot(a, t, axes=axes)))


def _dot(a, b):
    return np.dot(a, b)


def _dot_as_tensordot(a, b):
    """The ``axes`` argument with which tensordot computes ``np.dot(a, b)``."""
    if a.ndim == 0 or b.ndim == 0:
        return 0
    return ([a.ndim - 1], [0 if b.ndim == 1 else b.ndim - 2])


def _dot_vjp_a(g, ans, a, b):
    if b.ndim == 1:
        return g * b if a.ndim == 1 else outer(g, b) if a.ndim == 2 else _tensordot_vjp_a(
            g, ans, a, b, axes=_dot_as_tensordot(a, b))
    if a.ndim == 1 and b.ndim == 2:
        return dot(b, g)
    if a.ndim == 2 and b.ndim == 2:
        return dot(g, _swap(b))
    if a.ndim == 0 or b.ndim == 0:
        return unbroadcast(g * b, a.shape)
    return _tensordot_vjp_a(g, ans, a, b, axes=_dot_as_tensordot(a, b))


def _dot_vjp_b(g, ans, a, b):
    if b.ndim == 1 and a.ndim in (1, 2):
        return g * a if a.ndim == 1 else dot(g, a)
    if a.ndim == 1 and b.ndim == 2:
        return outer(a, g)
    if a.ndim == 2 and b.ndim == 2:
        return dot(_swap(a), g)
    if a.ndim == 0 or b.ndim == 0:
        return unbroadcast(g * a, b.shape)
    return _tensordot_vjp_b(g, ans, a, b, axes=_dot_as_tensordot(a, b))


dot = defprim(_dot, (_dot_vjp_a, _dot_vjp_b), name="dot",
              jvp=(lambda t, ans, a, b: dot(t, b), lambda t, ans, a, b: dot(a, t)))


def _outer(a, b):
    return np.outer(a, b)


def _outer_vjp_a(g, ans, a, b):
    from .shape import reshape
    return reshape(dot(g, reshape(b, shape=(-1,))), shape=a.shape)


def _outer_vjp_b(g, ans, a, b):
    from .shape import reshape
    return reshape(dot(reshape(a, shape=(-1,)), g), shape=b.shape)


outer = defprim(_outer, (_outer_vjp_a, _outer_vjp_b), name="outer",
                jvp=(lambda t, ans, a, b: outer(t, b), lambda t, ans, a, b: outer(a, t)))


# --- einsum --------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1024)
def _contraction(subscripts, shapes):
    """An opt_einsum expression for these subscripts and shapes, planned once and reused."""
    return opt_einsum.contract_expression(subscripts, *shapes, optimize="auto")


def _einsum(*operands, subscripts):
    if len(operands) == 1:
        return np.einsum(subscripts, operands[0])
    return _contraction(subscripts, tuple(op.shape for op in operands))(*operands)


def _einsum_vjp(position):
    def rule(g, ans, *operands, subscripts):
        inputs, output = subscripts.split("->")
        subs = inputs.split(",")
        target = subs[position]
        others = [s for i, s in enumerate(subs) if i != position]
        other_ops = [op for i, op in enumerate(operands) if i != position]
        seen = set(output).union(*others) if others else set(output)
        unique = "".join(dict.fromkeys(target))
        reachable = "".join(c for c in unique if c in seen)
        grad = einsum(g, *other_ops, subscripts=",".join([output] + others) + "->" + reachable)
        shape = operands[position].shape  # one example's under vmap
        sizes = {c: shape[target.index(c)] for c in unique}
        # einsum broadcasts size-1 dimensions: sum back where this operand had size 1 (below,
        # broadcast_to widens the opposite case, and the indices no one else reads)
        widened = tuple(i for i, c in enumerate(reachable) if sizes[c] == 1 and grad.shape[i] != 1)
        if widened:
            from .reductions import sum_
            grad = sum_(grad, axis=widened, keepdims=True)
        if reachable != unique or grad.shape != tuple(sizes[c] for c in reachable):
            from .shape import broadcast_to, reshape
            kept = dict(zip(reachable, grad.shape))
            grad = reshape(grad, shape=tuple(kept.get(c, 1) for c in unique))
            grad = broadcast_to(grad, shape=tuple(sizes[c] for c in unique))
        if unique != target:
            grad = _place_on_diagonals(grad, unique, target, sizes)
        return grad
    return rule


def _place_on_diagonals(grad, unique, target, sizes):
    """Spread ``grad`` (indexed by ``unique``) onto the repeated-index diagonals of ``target``."""
    fresh = iter(c for c in string.ascii_letters if c not in target)
    renamed, deltas, delta_ops = [], [], []
    seen = set()
    for c in target:
        if c in seen:
            new = next(fresh)
            renamed.append(new)
            deltas.append(c + new)
            delta_ops.append(np.eye(sizes[c], dtype=unbox(grad).dtype))
        else:
            seen.add(c)
            renamed.append(c)
    return einsum(grad, *delta_ops, subscripts=",".join([unique] + deltas) + "->" + "".join(renamed))


def _einsum_fused_vjp(g, ans, operands, params, parents):
    """One cotangent per traced operand, for any number of operands."""
    return [_einsum_vjp(position)(g, ans, *operands, **params) for position, _ in parents]


def _einsum_fused_jvp(tangents, ans, operands, params):
    """The product rule: one einsum per traced operand, that operand replaced by its tangent (same
    shapes, so the same planned contraction)."""
    total = None
    for position, t in enumerate(tangents):
        if t is not None:
            ops = list(operands)
            ops[position] = t
            term = einsum(*ops, **params)
            total = term if total is None else total + term
    return total


einsum = defprim(_einsum, (), name="einsum")
einsum.fused_vjp = _einsum_fused_vjp
einsum.fused_jvp = _einsum_fused_jvp


def vdot(a, b):
    """``np.vdot`` for real arrays: the sum of the elementwise product of the flattened arrays."""
    from .shape import reshape
    return dot(reshape(a, shape=(-1,)), reshape(b, shape=(-1,)))

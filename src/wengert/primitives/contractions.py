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
from ._batching import dot_rule, einsum_rule, matmul_rule, one_batch_axis, outer_rule, tensordot_axes, tensordot_rule
from ._table import defprim, unbroadcast
from .reductions import sum_
from .shape import broadcast_to, reshape, transpose


def _matmul(a, b):
    if a.ndim <= 2 and b.ndim <= 2:
        return np.dot(a, b)   # matmul's meaning for vectors and matrices, and BLAS for inner size 1
    return np.matmul(a, b)


def _swap(x):
    if x.ndim == 2:
        return transpose(x, axes=(1, 0))
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes=tuple(axes))


def _as_matrices(g, a, b):
    """``g``, ``a``, ``b`` with 1-d operands promoted as matmul does: a to (1, n), b to (n, 1)."""
    if b.ndim == 1:
        g = reshape(g, shape=g.shape + (1,))
        b = reshape(b, shape=(b.shape[0], 1))
    if a.ndim == 1:
        g = reshape(g, shape=g.shape[:-1] + (1, g.shape[-1]))
        a = reshape(a, shape=(1, a.shape[0]))
    return g, a, b


# Vectors and matrices (the shapes of per-column loops) take the direct products; the general rule
# promotes 1-d operands to matrices, multiplies stacks and sums broadcast batch axes, which costs
# ten times as much on small operands for the same numbers.
def _matmul_vjp_a(g, ans, a, b):
    an, bn = a.ndim, b.ndim
    if an == 1:
        if bn == 1:
            return g * b                        # (n,) @ (n,): g is 0-d
        if bn == 2:
            return dot(b, g)                    # (k,) @ (k, n): b @ g
    elif an == 2:
        if bn == 1:
            return outer(g, b)                  # (m, k) @ (k,)
        if bn == 2:
            if type(g) is np.ndarray and type(b) is np.ndarray:
                return np.dot(g, b.T)           # plain: dot's implementation, without two primitive calls
            return dot(g, transpose(b, axes=(1, 0)))
    g, a2, b = _as_matrices(g, a, b)
    return reshape(unbroadcast(matmul(g, _swap(b)), a2), shape=a.shape)


def _matmul_vjp_b(g, ans, a, b):
    an, bn = a.ndim, b.ndim
    if bn == 1:
        if an == 1:
            return g * a
        if an == 2:
            return dot(g, a)                    # g @ a
    elif bn == 2:
        if an == 1:
            return outer(a, g)
        if an == 2:
            if type(g) is np.ndarray and type(a) is np.ndarray:
                return np.dot(a.T, g)
            return dot(transpose(a, axes=(1, 0)), g)
    g, a, b2 = _as_matrices(g, a, b)
    return reshape(unbroadcast(matmul(_swap(a), g), b2), shape=b.shape)


# bilinear: the product rule, one contraction per traced operand
matmul = defprim(_matmul, (_matmul_vjp_a, _matmul_vjp_b), name="matmul",
                 jvp=(lambda t, ans, a, b: matmul(t, b), lambda t, ans, a, b: matmul(a, t)),
                 batch=matmul_rule, batched_vjp=True)


def _int_axes_split(a, b, axes):
    """``(rows, inner, cols)`` of the matrix product that ``tensordot(a, b, axes)`` is, for plain
    arrays contracted over a's last k axes against b's first k, in order (an int ``axes``, or the
    pair of tuples wengert.numpy's tensordot passes); else None."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray:
        return None
    if type(axes) is tuple:
        axes_a, axes_b = axes
        k = len(axes_b)
        if type(axes_a) is not tuple or type(axes_b) is not tuple or len(axes_a) != k \
                or axes_a != tuple(range(a.ndim - k, a.ndim)) or axes_b != tuple(range(k)):
            return None
        axes = k
    if type(axes) is not int or not 0 <= axes <= min(a.ndim, b.ndim) or a.shape[a.ndim - axes:] != b.shape[:axes]:
        return None
    rows = inner = cols = 1
    for n in a.shape[:a.ndim - axes]:
        rows *= n
    for n in b.shape[:axes]:
        inner *= n
    for n in b.shape[axes:]:
        cols *= n
    return rows, inner, cols


def _tensordot(a, b, axes=2):
    split = _int_axes_split(a, b, axes)
    if split is not None:   # np.tensordot's own steps for these axes, without its Python checks
        rows, inner, cols = split
        k = axes if type(axes) is int else len(axes[1])
        return np.dot(a.reshape(rows, inner), b.reshape(inner, cols)).reshape(a.shape[:a.ndim - k] + b.shape[k:])
    return np.tensordot(a, b, axes)


def _tensordot_vjp_a(g, ans, a, b, axes=2):
    split = _int_axes_split(a, b, axes) if type(g) is np.ndarray else None
    if split is not None:   # plain: g (rows, cols) times b (inner, cols) transposed
        rows, inner, cols = split
        return np.dot(g.reshape(rows, cols), b.reshape(inner, cols).T).reshape(a.shape)
    axes_a, axes_b = tensordot_axes(axes, a.ndim, b.ndim)
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    da = tensordot(g, b, axes=(list(range(len(free_a), g.ndim)), free_b))
    # da's trailing axes follow b's contracted axes in b's order, not the order axes were given in
    order = free_a + [axes_a[axes_b.index(i)] for i in sorted(axes_b)]
    return transpose(da, axes=tuple(np.argsort(order)))


def _tensordot_vjp_b(g, ans, a, b, axes=2):
    split = _int_axes_split(a, b, axes) if type(g) is np.ndarray else None
    if split is not None:   # plain: a (rows, inner) transposed times g (rows, cols)
        rows, inner, cols = split
        return np.dot(a.reshape(rows, inner).T, g.reshape(rows, cols)).reshape(b.shape)
    axes_a, axes_b = tensordot_axes(axes, a.ndim, b.ndim)
    free_a = [i for i in range(a.ndim) if i not in axes_a]
    free_b = [i for i in range(b.ndim) if i not in axes_b]
    db = tensordot(a, g, axes=(free_a, list(range(len(free_a)))))
    order = [axes_b[axes_a.index(i)] for i in sorted(axes_a)] + free_b
    return transpose(db, axes=tuple(np.argsort(order)))


tensordot = defprim(_tensordot, (_tensordot_vjp_a, _tensordot_vjp_b), name="tensordot",
                    jvp=(lambda t, ans, a, b, axes=2: tensordot(t, b, axes=axes),
                         lambda t, ans, a, b, axes=2: tensordot(a, t, axes=axes)),
                    batch=tensordot_rule, batched_vjp=True)


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
              jvp=(lambda t, ans, a, b: dot(t, b), lambda t, ans, a, b: dot(a, t)), batch=dot_rule, batched_vjp=True)


def _outer(a, b):
    return np.outer(a, b)


def _outer_vjp_a(g, ans, a, b):
    return reshape(dot(g, reshape(b, shape=(-1,))), shape=a.shape)


def _outer_vjp_b(g, ans, a, b):
    return reshape(dot(reshape(a, shape=(-1,)), g), shape=b.shape)


outer = defprim(_outer, (_outer_vjp_a, _outer_vjp_b), name="outer",
                jvp=(lambda t, ans, a, b: outer(t, b), lambda t, ans, a, b: outer(a, t)),
                batch=outer_rule, batched_vjp=True)


# --- einsum --------------------------------------------------------------------------------------
# Below this many multiply-adds (the product of all index sizes), NumPy's own einsum loop beats
# planning and calling a BLAS-backed contraction: the plan's fixed cost is ~10 us per call.
_SMALL_CONTRACTION = 1 << 13


@functools.lru_cache(maxsize=1024)
def _contraction(subscripts, shapes):
    """The function computing this contraction for these shapes, chosen once and reused: NumPy's
    einsum loop for small ones, else an opt_einsum expression (BLAS where the contraction is one)."""
    sizes = {}
    for term, shape in zip(subscripts.split("->")[0].split(","), shapes):
        sizes.update(zip(term, shape))
    work = 1
    for n in sizes.values():
        work *= n
    if len(shapes) == 1 or work <= _SMALL_CONTRACTION:
        return functools.partial(np.einsum, subscripts)
    batched = _as_batched_matmul(subscripts, shapes, sizes)
    if batched is not None:
        return batched
    return opt_einsum.contract_expression(subscripts, *shapes, optimize="auto")


# A batched contraction (an index in both operands and the output) is one small matrix product per
# batch item. opt_einsum hands such contractions to NumPy's einsum loop, which is 3-50x slower than
# np.matmul whenever matmul can hand each item's matrices to BLAS: a unit stride along one of each
# matrix's two axes (batch-first contiguous operands, their transposes, a broadcast batch). Where it
# cannot (the batch on the unit-stride axis, as in seed 000's "wik,wjk->ijk"), matmul runs its own
# loop per item: still faster than einsum's for a few items (16 items of (16, 64) @ (64, 4): 60 us
# against 195 us), slower for many (256 items of (16, 64) @ (64, 4): 1.45 ms against 0.69 ms). So
# the choice is made per call on the operands' strides past this many items (benchmarks/
# einsum_layouts.py measures both sides). A vector per item (W2's "ob,otb->tb") stays with einsum.
_MATMUL_MAX_ITEMS = 64


def _merged_stride(shape, strides):
    """The stride of these axes read as one (a reshape's view), or None where no view reads them so
    (a reshape would copy) or all of them have size 1 (no stride to judge)."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if not dims or any(s0 != s1 * n1 for (_, s0), (n1, s1) in zip(dims, dims[1:])):
        return None
    return dims[-1][1]


def _blas_items(x, batch, rows, n_rows, n_inner):
    """Can np.matmul hand each item of ``x`` to BLAS as a view? Its axes are ordered batch (the first
    ``batch``), rows (the next ``rows``, ``n_rows`` elements) and inner (the rest, ``n_inner``): the
    batch axes must read as one stride and each item be a matrix with a unit stride along one axis
    and the other at least a row long (NumPy's is_blasable2d, either order)."""
    shape, strides, size = x.shape, x.strides, x.itemsize
    if batch == rows == 1 and len(shape) == 3:
        s_rows, s_inner = strides[1], strides[2]          # one axis each, the common case: no merging
    else:
        if batch > 1 and _merged_stride(shape[:batch], strides[:batch]) is None \
                and any(n != 1 for n in shape[:batch]):
            return False
        cut = batch + rows
        s_rows = _merged_stride(shape[batch:cut], strides[batch:cut])
        s_inner = _merged_stride(shape[cut:], strides[cut:])
    if s_rows is None or s_inner is None or s_rows % size or s_inner % size:
        return False
    return (s_inner == size and s_rows >= n_inner * size) or (s_rows == size and s_inner >= n_rows * size)


def _as_batched_matmul(subscripts, shapes, sizes):
    """``f(a, b)`` computing a two-operand einsum as transpose, reshape, ``np.matmul``, reshape and
    transpose (all views but the product) when that pays, else None."""
    if len(shapes) != 2:
        return None
    inputs, output = subscripts.split("->")
    first, second = inputs.split(",")
    if len(set(first)) != len(first) or len(set(second)) != len(second):
        return None                                     # a diagonal: einsum's own job
    for term, shape in zip((first, second), shapes):
        if any(sizes[c] != n for c, n in zip(term, shape)):
            return None                                 # a size-1 index broadcast against a longer one
    batch = [c for c in output if c in first and c in second]
    contracted = [c for c in first if c in second and c not in output]
    free_first = [c for c in first if c not in second]
    free_second = [c for c in second if c not in first]
    if not batch or any(c not in output for c in free_first + free_second):
        return None                                     # no batch (tensordot's), or an index summed alone
    items, rows, inner, cols = (int(np.prod([sizes[c] for c in group], dtype=np.int64))
                                for group in (batch, free_first, contracted, free_second))
    if rows == 1 or cols == 1:
        return None
    perm_first = tuple(first.index(c) for c in batch + free_first + contracted)
    perm_second = tuple(second.index(c) for c in batch + contracted + free_second)
    product = batch + free_first + free_second
    product_shape = tuple(sizes[c] for c in product)
    perm_out = tuple(product.index(c) for c in output)
    groups_first = (len(batch), len(free_first), rows, inner)
    groups_second = (len(batch), len(contracted), inner, cols)
    few = items <= _MATMUL_MAX_ITEMS

    def contract(a, b):
        x = a.transpose(perm_first)
        y = b.transpose(perm_second)
        if not (few or _blas_items(x, *groups_first) and _blas_items(y, *groups_second)):
            return np.einsum(subscripts, a, b)   # many items BLAS cannot take as they lie: einsum's loop
        x = x.reshape(items, rows, inner)
        y = y.reshape(items, inner, cols)
        return np.matmul(x, y).reshape(product_shape).transpose(perm_out)
    return contract


def _einsum(*operands, subscripts):
    return _contraction(subscripts, tuple([op.shape for op in operands]))(*operands)


@functools.lru_cache(maxsize=1024)
def _vjp_plan(subscripts, position):
    """The string work of one operand's rule, done once per (subscripts, position): its subscripts,
    their distinct letters, those the cotangent's einsum can produce, that einsum's subscripts and
    where each letter first occurs."""
    inputs, output = subscripts.split("->")
    subs = inputs.split(",")
    target = subs[position]
    others = [s for i, s in enumerate(subs) if i != position]
    seen = set(output).union(*others) if others else set(output)
    unique = "".join(dict.fromkeys(target))
    reachable = "".join(c for c in unique if c in seen)
    first = tuple(target.index(c) for c in unique)
    identity = not others and output == reachable   # the cotangent is already in place ('ij->j')
    return target, unique, reachable, ",".join([output] + others) + "->" + reachable, first, identity


def _einsum_vjp_at(position, g, operands, subscripts):
    target, unique, reachable, grad_subscripts, first, identity = _vjp_plan(subscripts, position)
    plain = type(g) is np.ndarray and all(type(o) is np.ndarray for o in operands)
    if identity:
        grad = g
    elif plain:   # the primitives below, in NumPy (what they would find to do)
        grad = _einsum(g, *operands[:position], *operands[position + 1:], subscripts=grad_subscripts)
    else:
        grad = einsum(g, *operands[:position], *operands[position + 1:], subscripts=grad_subscripts)
    shape = operands[position].shape  # one example's under vmap
    sizes = {c: shape[i] for c, i in zip(unique, first)}
    # einsum broadcasts size-1 dimensions: sum back where this operand had size 1 (below,
    # broadcast_to widens the opposite case, and the indices no one else reads)
    gshape = grad.shape
    widened = tuple(i for i, c in enumerate(reachable) if sizes[c] == 1 and gshape[i] != 1)
    if widened:
        grad = np.add.reduce(grad, axis=widened, keepdims=True) if plain else sum_(grad, axis=widened, keepdims=True)
    if reachable != unique or grad.shape != tuple(sizes[c] for c in reachable):
        kept = dict(zip(reachable, grad.shape))
        if plain:
            grad = grad.reshape(tuple(kept.get(c, 1) for c in unique))
            wide = np.empty(tuple(sizes[c] for c in unique), grad.dtype)   # cheaper than broadcast_to's checks
            wide[...] = grad
            grad = wide
        else:
            grad = reshape(grad, shape=tuple(kept.get(c, 1) for c in unique))
            grad = broadcast_to(grad, shape=tuple(sizes[c] for c in unique))
    if unique != target:
        grad = _place_on_diagonals(grad, unique, target, sizes)
    return grad


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
    subscripts = params["subscripts"]
    return [_einsum_vjp_at(position, g, operands, subscripts) for position, _ in parents]


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


einsum = defprim(_einsum, (), name="einsum",
                 fused_vjp=_einsum_fused_vjp, fused_jvp=_einsum_fused_jvp, batch=einsum_rule, batched_vjp=True)


def _diagonal_of_product(a, b, known=None):
    return np.einsum("ij,ji->i", a, b) if known is None else known


def _diagonal_of_product_batch(prim, vals, batched, params, size):
    """The known value is one example's: the batched diagonals are computed afresh."""
    a, b = vals
    return einsum(a, b, subscripts=("zij" if batched[0] else "ij") + "," + ("zji" if batched[1] else "ji") + "->zi")


# ``diag(a @ b)`` for matrices a (n, k) and b (k, n), as the rewrite of ``np.diag`` of a product
# records it (rewrites.py), holding the diagonal the forward pass computed (``known``): row i of a
# against column i of b, so the rules cost O(n k) where the product's cost O(n k n) (and a dense
# (n, n) cotangent)
diagonal_of_product = defprim(
    _diagonal_of_product,
    (lambda g, ans, a, b, known=None: reshape(g, shape=(g.shape[0], 1)) * transpose(b, axes=(1, 0)),
     lambda g, ans, a, b, known=None: transpose(a, axes=(1, 0)) * reshape(g, shape=(1, g.shape[0]))),
    name="diagonal_of_product",
    jvp=(lambda t, ans, a, b, known=None: sum_(t * transpose(b, axes=(1, 0)), axis=(1,)),
         lambda t, ans, a, b, known=None: sum_(a * transpose(t, axes=(1, 0)), axis=(1,))),
    batch=one_batch_axis(_diagonal_of_product_batch))


def vdot(a, b):
    """``np.vdot`` for real arrays: the sum of the elementwise product of the flattened arrays."""
    return dot(a if a.ndim == 1 else reshape(a, shape=(-1,)), b if b.ndim == 1 else reshape(b, shape=(-1,)))

"""Rewrites that make a staged program the NumPy a person would write by hand.

The backward pass is a chain of rules, each correct alone, whose composition does work a
hand-written gradient skips: a diagonal embedded into a dense matrix only to be multiplied, a
gradient negated twice through a chain of products, a broadcast materialised as its own call
before an elementwise operation that would broadcast anyway, a scatter into zeros that only adds
axes. :func:`simplify` rewrites those (each rewrite gives the same values: exact identities, or
the same products in another order only where noted); :func:`spell` then writes the calls whose
NumPy wrapper costs more than the arithmetic at small sizes (``np.sum``, ``np.transpose``,
``np.reshape``) as the ufunc methods and array methods they wrap. Both run in
``_ir.optimize``: ``simplify`` after CSE and vectorizing, ``spell`` last.
"""
from __future__ import annotations

import operator

import numpy as np

from ..primitives import contractions as C
from ..primitives import elementwise as E
from ..primitives import linalg as L
from ..primitives import nn as NN
from ..primitives import reductions as R
from ..primitives import shape as S
from . import _ir
from ._ir import Eqn, Program, Var, renamed, substitute
from ._vectorize import GRID_ADD, _affine, _grid_add, columns_in_place


class _Fresh:
    """New variables, numbered after every variable of the program."""

    def __init__(self, program):
        top = max((v.id for v in program.inputs), default=-1)
        for eqn in program.eqns:
            for o in eqn.outs:
                top = max(top, o.id)
        self.next = top + 1

    def __call__(self, shape, dtype):
        var = Var(self.next, tuple(shape), np.dtype(dtype))
        self.next += 1
        return var


def _vars(*xs):
    return tuple(x for x in xs if type(x) is Var)


def _shape(x):
    return x.shape if type(x) is Var else np.shape(x)


# --- diagonals -------------------------------------------------------------------------------------
def _last_two(eqn, ndim):
    """Does ``eqn`` (diagonal or diagonal_embed) work on the main diagonal of the last two axes?"""
    p = eqn.params
    a1, a2 = p.get("axis1", 0) % ndim, p.get("axis2", 1) % ndim
    return p.get("offset", 0) == 0 and a1 == ndim - 2 and a2 == ndim - 1


def _embedded(v, defs):
    """``d`` when ``v = diagonal_embed(d)`` puts ``d`` on the diagonal of square last two axes."""
    if type(v) is not Var:
        return None
    eqn = defs.get(v.id)
    if eqn is not None and eqn.prim is S.transpose and type(eqn.args[0]) is Var:   # a diagonal matrix is symmetric
        n = len(v.shape)
        axes = eqn.params.get("axes")
        swapped = tuple(range(n - 2)) + (n - 1, n - 2)
        if n >= 2 and (tuple(axes) if axes is not None else tuple(range(n))[::-1]) == swapped:
            return _embedded(eqn.args[0], defs)
    if eqn is None or eqn.prim is not S.diagonal_embed or len(v.shape) < 2 or v.shape[-1] != v.shape[-2]:
        return None
    d = eqn.args[0]
    if type(d) is not Var or not _last_two(eqn, len(v.shape)) or d.shape != v.shape[:-1]:
        return None
    return d


def _diagonal_product(eqn, defs, fresh):
    """``diag(d) @ b`` is ``d[..., :, None] * b`` and ``a @ diag(d)`` is ``a * d[..., None, :]``: the
    backward pass of ``np.diag(a @ b)`` embeds its cotangent into a dense square matrix, then
    multiplies by it (n times the work, and an n x n array per matrix)."""
    if eqn.prim is not C.matmul and not (eqn.prim is C.dot and all(len(_shape(a)) <= 2 for a in eqn.args)):
        return None
    a, b = eqn.args
    out = eqn.outs[0]
    for left, (e, other) in ((True, (a, b)), (False, (b, a))):
        d = _embedded(e, defs)
        if d is None or not (type(other) is Var or type(other) is np.ndarray) or len(other.shape) < 1:
            continue
        new = []
        if len(other.shape) == 1:
            scale = d
        else:
            index = (Ellipsis, slice(None), None) if left else (Ellipsis, None, slice(None))
            scale = fresh(d.shape[:-1] + ((d.shape[-1], 1) if left else (1, d.shape[-1])), d.dtype)
            new.append(Eqn(S.getitem, (d,), {"index": index}, (scale,), (d,), eqn.source))
        pair = (scale, other) if left else (other, scale)
        if np.broadcast_shapes(scale.shape, other.shape) != out.shape or \
                np.result_type(d.dtype, other.dtype) != out.dtype:
            continue
        new.append(Eqn(E.multiply, pair, {}, eqn.outs, _vars(*pair), eqn.source))
        return new
    return None


_LETTERS = "abcdefghklmnopqrstuvwxyz"


def _diagonal_of_product(eqn, defs, counts):
    """``diagonal(a @ b)`` over the last two axes is ``einsum('...ij,...ji->...i')``: the products
    the diagonal keeps, not the whole matrix. Only when the product is read by this diagonal alone and
    the operands' batch axes match without broadcasting."""
    if eqn.prim is not S.diagonal or type(eqn.args[0]) is not Var:
        return None
    m = eqn.args[0]
    src = defs.get(m.id)
    if src is None or src.prim is not C.matmul or counts.get(m.id) != 1 or len(m.shape) < 2 \
            or m.shape[-1] != m.shape[-2] or not _last_two(eqn, len(m.shape)):
        return None
    a, b = src.args
    if type(a) is not Var or type(b) is not Var or len(a.shape) < 2 or len(b.shape) < 2:
        return None
    batch = m.shape[:-2]
    if a.shape[:-2] != batch[len(batch) - len(a.shape) + 2:] or b.shape[:-2] != batch[len(batch) - len(b.shape) + 2:]:
        return None
    letters = _LETTERS[:len(batch)]
    sa, sb = letters[len(letters) - len(a.shape) + 2:], letters[len(letters) - len(b.shape) + 2:]
    subscripts = f"{sa}ij,{sb}ji->{letters}i"
    return [Eqn(C.einsum, (a, b), {"subscripts": subscripts}, eqn.outs, (a, b), eqn.source)]


# --- products summed: contractions ------------------------------------------------------------------
# Below this many elements in the product, a multiply and a sum (two ufunc calls) cost less than
# planning and calling an einsum.
_CONTRACT_MIN = 1 << 12


def _expanded(x, defs):
    """``(y, axes)``: ``x`` is ``y`` with size-1 axes inserted (``y[None, :, :]``, or a reshape that
    only adds ones, as the backward pass of a sum makes), ``y``'s axis ``k`` being ``x``'s axis
    ``axes[k]``; ``(x, all its axes)`` otherwise."""
    eqn = defs.get(x.id)
    if eqn is not None and type(eqn.args[0]) is Var:
        y = eqn.args[0]
        if eqn.prim is S.getitem:
            index = eqn.params["index"]
            parts = index if type(index) is tuple else (index,)
            if all(i is None or (type(i) is slice and i == slice(None)) for i in parts) \
                    and sum(i is not None for i in parts) <= len(y.shape):
                axes, at = [], 0
                for i in parts:
                    if i is not None:
                        axes.append(at)
                    at += 1
                axes.extend(range(at, at + len(y.shape) - len(axes)))
                return y, axes
        if eqn.prim is S.reshape and 1 not in y.shape and \
                tuple(n for n in x.shape if n != 1) == y.shape:
            return y, [k for k, n in enumerate(x.shape) if n != 1]
    return x, list(range(len(x.shape)))


def _axes(axis, ndim):
    """The axes a reduction's ``axis`` parameter names, as a set of non-negative ints."""
    return set(range(ndim)) if axis is None else {a % ndim for a in (axis if type(axis) is tuple else (axis,))}


def _reversal(index, shape):
    """The axes a getitem index reverses whole (``x[255::-1]``), or None when the index does more than
    reverse or keep whole axes."""
    parts = index if type(index) is tuple else (index,)
    if len(parts) > len(shape):
        return None
    reversed_axes = set()
    for k, part in enumerate(parts):
        if type(part) is not slice:
            return None
        if part == slice(None):
            continue
        if range(shape[k])[part] == range(shape[k] - 1, -1, -1):
            reversed_axes.add(k)
        elif range(shape[k])[part] != range(shape[k]):
            return None
    return reversed_axes


def _regrouped(axes, shape, sizes, split):
    """The atoms of each axis of ``shape``, an array whose axes hold the atoms ``axes`` (one list per
    axis, in C order, of sizes ``sizes``) reshaped: each new axis takes whole atoms from the front,
    splitting one in two (``split(atom, size)``) where the new axis ends inside it. None when a
    reshape mixes atoms (an atom of 6 read as axes of 4)."""
    flat = [a for ax in axes for a in ax]
    out, i = [], 0
    for n in shape:
        group = []
        while n > 1 or (i < len(flat) and sizes[flat[i]] == 1):
            if i == len(flat):
                return None
            s = sizes[flat[i]]
            if n % s == 0:
                group.append(flat[i])
                n //= s
                i += 1
            elif s % n == 0:
                first, flat[i] = split(flat[i], n)
                group.append(first)
                n = 1
            else:
                return None
        out.append(group)
    return out if all(sizes[a] == 1 for a in flat[i:]) else None


def _through_views(v, defs, counts, summed):
    """``(p, atoms, where, sizes)``: ``v`` is ``p`` seen through views each read once (the
    vectorizing pass's batched views): transposes, whole reversals of summed axes, and reshapes
    that split or merge axes. Each axis of ``p`` is cut into atoms (``atoms[a]``, in C order; one
    atom per axis unless a reshape splits it), ``where[k]`` lists the atoms of ``v``'s axis ``k``
    and ``sizes`` their lengths. A sum over ``v``'s axes ``summed`` is then a sum over their atoms.
    None when a kept axis is reversed or a reshape mixes atoms."""
    chain = []
    while len(chain) < 8:
        eqn = defs.get(v.id)
        if eqn is None or counts.get(v.id) != 1 or len(eqn.args) != 1 or type(eqn.args[0]) is not Var:
            break
        u = eqn.args[0]
        if not (eqn.prim is S.transpose or eqn.prim is S.reshape
                or (eqn.prim is S.getitem and u.shape == v.shape and _reversal(eqn.params["index"], u.shape) is not None)):
            break
        chain.append(eqn)
        v = u
    sizes = dict(enumerate(v.shape))
    atoms = [[a] for a in range(len(v.shape))]
    where = [[a] for a in range(len(v.shape))]
    flipped = set()

    def split(a, n):
        first, rest = len(sizes), len(sizes) + 1
        sizes[first], sizes[rest] = n, sizes[a] // n
        for parts in atoms:
            if a in parts:
                k = parts.index(a)
                parts[k:k + 1] = [first, rest]
        if a in flipped:
            flipped.update((first, rest))
        return first, rest

    for eqn in reversed(chain):
        u = eqn.args[0]
        if eqn.prim is S.transpose:
            axes = eqn.params.get("axes")
            axes = tuple(range(len(u.shape)))[::-1] if axes is None else tuple(a % len(u.shape) for a in axes)
            where = [where[a] for a in axes]
        elif eqn.prim is S.reshape:
            where = _regrouped(where, eqn.outs[0].shape, sizes, split)
            if where is None:
                return None
        else:
            for k in _reversal(eqn.params["index"], u.shape):
                flipped.update(where[k])
    if flipped - {a for k in summed for a in where[k]}:
        return None   # a kept axis reversed
    return v, atoms, where, sizes


def _contraction_terms(p, atoms, sizes, defs, counts, fresh, source):
    """The operands of ``p``, a broadcasting product ``a * b`` or an einsum read only by the sum
    being rewritten, and their terms as lists of ``p``'s atoms (one for each operand axis, after
    reshapes splitting its axes into atoms and dropping the size-1 axes a product broadcast):
    ``(operands, terms, new equations)``, or None."""
    src = defs.get(p.id)
    if src is None or counts.get(p.id) != 1 or not all(type(a) is Var and a.dtype == p.dtype for a in src.args):
        return None
    n = len(p.shape)
    parts = []   # (operand, its axes kept, the atoms of each)
    if src.prim is E.multiply and not src.params and len(src.args) == 2:
        size = _size(p)
        if size < _CONTRACT_MIN or not any(_size(x) < size for x in src.args):
            return None   # small, or no broadcast: the product is no larger than its operands
        for x in src.args:
            y, axes = _expanded(x, defs)
            offset = n - len(x.shape)
            kept = [k for k, a in enumerate(axes) if y.shape[k] == p.shape[offset + a]]
            if any(y.shape[k] != 1 for k in range(len(axes)) if k not in kept):
                return None
            parts.append((y, kept, [atom for k in kept for atom in atoms[offset + axes[k]]]))
    elif src.prim is C.einsum and set(src.params) == {"subscripts"}:
        found = _terms(src)
        if found is None or len(found[1]) != n:
            return None
        terms, output = found
        of = {c: atoms[k] for k, c in enumerate(output)}
        for term, x in zip(terms, src.args):
            for c, m in zip(term, x.shape):
                if c not in of:   # a contracted index: an atom of its own
                    of[c] = [len(sizes)]
                    sizes[len(sizes)] = m
                elif m != int(np.prod([sizes[a] for a in of[c]])):
                    return None   # a size-1 index broadcast by einsum
            parts.append((x, list(range(len(x.shape))), [atom for c in term for atom in of[c]]))
    else:
        return None
    operands, terms, new = [], [], []
    for y, kept, term in parts:
        shape = tuple(sizes[a] for a in term)
        if shape != y.shape:   # axes split into atoms, size-1 axes dropped: a reshape (a view)
            z = fresh(shape, y.dtype)
            new.append(Eqn(S.reshape, (y,), {"shape": shape}, (z,), (y,), source))
            y = z
        operands.append(y)
        terms.append(term)
    return operands, terms, new


def _product_sum(eqn, defs, counts, fresh):
    """A sum over axes of a contraction's result read only there is the contraction with those
    indices summed: ``sum(a * b, axis)``, where the product broadcasts an operand to a larger array,
    is one einsum (``alpha[None, :, :] * Hs`` summed over time, and its backward pass
    ``wts[:, None, :] * Hs`` summed over features): NumPy's sum-of-products loop reads the operands
    once, where the product writes and the sum reads again an array of the broadcast size (W2's
    (100, 256, 128) block: 2 ms against 6 ms); and an einsum summed is the einsum without those
    output indices. Transposes, reversals of the summed axes and reshapes that split or merge axes
    between them are seen through: a reshape that splits an axis splits its index in the operands
    (seed 000 written as one matrix-vector product per (j, k): b's cotangent, the lanes' outer
    products (64, 16, 64) reshaped to (16, 4, ...) and summed over j, is the batched contraction
    'kjn,kjw->kwn', 16 matrix products)."""
    if eqn.prim is not R.sum_ or len(eqn.args) != 1 or type(eqn.args[0]) is not Var \
            or not set(eqn.params) <= {"axis", "keepdims"}:
        return None
    x = eqn.args[0]
    summed = _axes(eqn.params.get("axis"), len(x.shape))
    found = _through_views(x, defs, counts, summed)
    if found is None:
        return None
    p, atoms, where, sizes = found
    out = eqn.outs[0]
    if not p.shape or p.dtype.kind not in "fc" or out.dtype != p.dtype:
        return None
    found = _contraction_terms(p, atoms, sizes, defs, counts, fresh, eqn.source)
    if found is None:
        return None
    operands, terms, new = found
    letters = {}   # p's atoms in order, then the contracted indices
    for a in [a for parts in atoms for a in parts] + [a for term in terms for a in term]:
        letters.setdefault(a, _LETTERS[len(letters)] if len(letters) < len(_LETTERS) else None)
    if None in letters.values():
        return None
    present = {a for term in terms for a in term}
    order = [a for k in range(len(x.shape)) if k not in summed for a in where[k] if a in present]
    subscripts = ",".join("".join(letters[a] for a in term) for term in terms) + "->" \
        + "".join(letters[a] for a in order)
    shape = tuple(sizes[a] for a in order)
    if shape == out.shape:
        return new + [Eqn(C.einsum, tuple(operands), {"subscripts": subscripts}, eqn.outs, tuple(operands),
                          eqn.source)]
    if int(np.prod(shape)) != int(np.prod(out.shape)):
        return None
    tmp = fresh(shape, out.dtype)   # kept axes merged, of size 1 (keepdims, or in no operand): a reshape
    return new + [Eqn(C.einsum, tuple(operands), {"subscripts": subscripts}, (tmp,), tuple(operands), eqn.source),
                  Eqn(S.reshape, (tmp,), {"shape": out.shape}, eqn.outs, (tmp,), eqn.source)]


def _terms(eqn):
    """The einsum's input terms and output, or None where one repeats a letter or uses ``...``."""
    subscripts = eqn.params.get("subscripts")
    if type(subscripts) is not str or "..." in subscripts or "->" not in subscripts:
        return None
    inputs, output = subscripts.replace(" ", "").split("->")
    terms = inputs.split(",")
    if len(terms) != len(eqn.args) or any(len(set(t)) != len(t) for t in terms + [output]):
        return None
    return terms, output


def _repeated_rows(v, defs):
    """``(x, base, k, j, inner)`` when ``v = x[idx]`` gathers rows of ``x`` by a constant index array
    that repeats each of ``base``'s k rows j times: ``idx`` is ``base`` with each row j times in a
    row (``inner``: a loop's outer counter; j the first value's run) or the whole ``base`` j times
    (k the period of the first value). None otherwise."""
    eqn = defs.get(v.id) if type(v) is Var else None
    if eqn is None or eqn.prim is not S.getitem or type(eqn.args[0]) is not Var:
        return None
    index = eqn.params["index"]
    idx = index[0] if type(index) is tuple and len(index) == 1 else index
    x = eqn.args[0]
    if type(idx) is not np.ndarray or idx.ndim != 1 or idx.dtype.kind not in "iu" or len(idx) < 2 \
            or x.shape[1:] != v.shape[1:]:
        return None
    n = len(idx)
    run = int(np.argmax(idx != idx[0])) or n   # the first value's run: each row j times in a row
    if run > 1 and n % run == 0:
        grid = idx.reshape(n // run, run)
        if (grid == grid[:, :1]).all():
            return x, grid[:, 0] % x.shape[0], n // run, run, True
    again = np.flatnonzero(idx[1:] == idx[0])   # the first value again: the whole base repeated
    period = int(again[0]) + 1 if len(again) else n
    if period < n and n % period == 0:
        grid = idx.reshape(n // period, period)
        if (grid == grid[:1]).all():
            return x, grid[0] % x.shape[0], period, n // period, False
    return None


def _contraction_of_repeated_rows(eqn, defs, fresh):
    """A contraction (an einsum, or a batched matmul) one of whose operands gathers rows of ``x``
    repeated along a grid of lanes (the vectorizing pass's lanes (k, j) reading ``x[k]`` in every
    j: seed 000 written as one matrix-vector product per (j, k) reads batch k's matrix ``b[:, :, k].T``
    for each of the 4 columns j) is the contraction of ``x`` itself with the lane index split into
    (k, j): the other operands' lane axes reshaped (views), the result's merged back; no copy of
    ``x`` j times (64 x (16, 64) floats: 42 us), and one matrix product per k, not a matrix-vector
    product per lane. Only where the split contraction is a BLAS call: einsum's loop over the split
    indices can cost more than the gather saves (at 16x the seed's batch, 256 items, the backward's
    'dea,dab->deb' loop took 1.14 ms against 0.38 ms for the per-lane loop). The same products."""
    out = eqn.outs[0]
    if eqn.prim is C.einsum and set(eqn.params) == {"subscripts"}:
        found = _terms(eqn)
        if found is None:
            return None
        terms, output = found
    elif eqn.prim is C.matmul and not eqn.params and len(eqn.args) == 2 \
            and all(type(a) is Var and len(a.shape) >= 3 for a in eqn.args) \
            and eqn.args[0].shape[:-2] == eqn.args[1].shape[:-2] == out.shape[:-2]:
        batch = _LETTERS[3:3 + len(out.shape) - 2]
        terms, output = [batch + "ab", batch + "bc"], batch + "ac"
    else:
        return None
    args = eqn.args
    if any(type(a) is not Var or a.dtype != out.dtype for a in args) or out.dtype.kind not in "fc":
        return None
    for position, g in enumerate(args):
        found = _repeated_rows(g, defs)
        if found is None:
            continue
        x, base, k, j, inner = found
        lane = terms[position][0]
        if not any(lane in term for p, term in enumerate(terms) if p != position):
            continue   # the lanes summed over the gathered operand alone: each row counts j times
        if any(n != k * j for a, term in zip(args, terms) for c, n in zip(term, a.shape) if c == lane):
            continue
        free = [c for c in _LETTERS if c not in "".join(terms) + output]
        kl, jl = free[0], free[1]
        split = kl + jl if inner else jl + kl
        sizes = {kl: k, jl: j}
        new, operands, new_terms = [], [], []
        for p, (a, term) in enumerate(zip(args, terms)):
            if p == position:
                if not (base.shape[0] == x.shape[0] and (base == np.arange(x.shape[0])).all()):
                    y = fresh((k,) + x.shape[1:], x.dtype)
                    new.append(Eqn(S.getitem, (x,), {"index": (base,)}, (y,), (x,), eqn.source))
                    x = y
                operands.append(x)
                new_terms.append(kl + term[1:])
                continue
            if lane in term:
                at = term.index(lane)
                shape = a.shape[:at] + tuple(sizes[c] for c in split) + a.shape[at + 1:]
                y = fresh(shape, a.dtype)
                new.append(Eqn(S.reshape, (a,), {"shape": shape}, (y,), (a,), eqn.source))
                a = y
                term = term.replace(lane, split)
            operands.append(a)
            new_terms.append(term)
        subscripts = ",".join(new_terms) + "->" + output.replace(lane, split)
        shape = out.shape if lane not in output else \
            out.shape[:output.index(lane)] + tuple(sizes[c] for c in split) + out.shape[output.index(lane) + 1:]
        if _einsum_loops(subscripts, tuple(o.shape for o in operands)):
            return None   # no BLAS call for it (many items, a small product): the gather and its loop stay
        if shape == out.shape:
            return new + [Eqn(C.einsum, tuple(operands), {"subscripts": subscripts}, eqn.outs, tuple(operands),
                              eqn.source)]
        tmp = fresh(shape, out.dtype)
        return new + [Eqn(C.einsum, tuple(operands), {"subscripts": subscripts}, (tmp,), tuple(operands), eqn.source),
                      Eqn(S.reshape, (tmp,), {"shape": out.shape}, eqn.outs, (tmp,), eqn.source)]
    return None


def reuse_contractions(program):
    """``sum(einsum(a, H) * w)``, a loss that weights a contraction ``C`` (W2's
    ``np.sum(C * wts)`` with ``C = einsum('tb,dtb->db', alpha, Hs)``), is ``sum(a * G)`` where the
    program also computes ``G = einsum(w, H)`` with the letters ``a`` has (the backward pass's
    cotangent of ``a``, ``einsum('db,dtb->tb', wts, Hs)``): the large ``H`` is then read once, as
    the hand-written gradient reads it. The sum moves to just after ``G`` when no reader of it comes
    between; the same products are summed in another order."""
    eqns = program.eqns
    defs, at = {}, {}
    by_operands = {}
    for k, eqn in enumerate(eqns):
        for o in eqn.outs:
            defs[o.id] = eqn
            at[o.id] = k
        if eqn.prim is C.einsum and len(eqn.args) == 2 and all(type(a) is Var for a in eqn.args):
            by_operands.setdefault(frozenset(a.id for a in eqn.args), []).append(eqn)
    if not by_operands:
        return program
    counts = _ir.use_counts(program.eqns, program.outputs)
    readers = {}
    for k, eqn in enumerate(eqns):
        for v in eqn.uses:
            readers.setdefault(v.id, []).append(k)
    moved = {}   # position -> equation placed after it
    dropped = set()
    for k, eqn in enumerate(eqns):
        if eqn.prim is not R.sum_ or len(eqn.args) != 1 or type(eqn.args[0]) is not Var or eqn.outs[0].shape != ():
            continue
        p = eqn.args[0]
        prod = defs.get(p.id)
        if prod is None or prod.prim is not E.multiply or prod.params or counts.get(p.id) != 1 \
                or not all(type(a) is Var and a.shape == p.shape for a in prod.args):
            continue
        found = None
        for c, w in (prod.args, prod.args[::-1]):
            src = defs.get(c.id)
            if src is None or src.prim is not C.einsum or counts.get(c.id) != 1 or len(src.args) != 2:
                continue
            parsed = _terms(src)
            if parsed is None:
                continue
            (t0, t1), tc = parsed
            for (a, ta), (h, th) in (((src.args[0], t0), (src.args[1], t1)), ((src.args[1], t1), (src.args[0], t0))):
                if type(h) is not Var or type(a) is not Var:
                    continue
                for g in by_operands.get(frozenset((w.id, h.id)), ()):
                    if w is h or g.outs[0].dtype != eqn.outs[0].dtype or a.dtype != eqn.outs[0].dtype:
                        continue
                    gparsed = _terms(g)
                    if gparsed is None:
                        continue
                    (g0, g1), gout = gparsed
                    tw, th2 = (g0, g1) if g.args[0] is w else (g1, g0)
                    rename = {}
                    if any(rename.setdefault(x, y) != y for x, y in zip(th2 + tw, th + tc)):
                        continue
                    if len(set(rename.values())) != len(rename) or any(x not in rename for x in gout):
                        continue
                    mapped = "".join(rename[x] for x in gout)
                    if sorted(mapped) != sorted(ta):
                        continue
                    found = (a, ta, g.outs[0], mapped)
                    break
                if found:
                    break
            if found:
                break
        if found is None:
            continue
        a, ta, G, mapped = found
        place = max(k, at.get(a.id, -1), at[G.id])
        if any(k < r <= place for r in readers.get(eqn.outs[0].id, ())):
            continue
        new = Eqn(C.einsum, (a, G), {"subscripts": f"{ta},{mapped}->"}, eqn.outs, (a, G), eqn.source)
        dropped.add(k)
        moved.setdefault(place, []).append(new)
        counts[p.id] = 0
    if not dropped:
        return program
    out = []
    for k, eqn in enumerate(eqns):
        if k not in dropped:
            out.append(eqn)
        out.extend(moved.get(k, ()))
    return _ir.dce(Program(program.inputs, out, program.outputs))


# --- products read in parts, sums of sums, batched products summed ----------------------------------
def _basic_parts(index, ndim):
    """``index`` as a tuple of ints and int slices covering at most ``ndim`` axes, else None."""
    parts = index if type(index) is tuple else (index,)
    if len(parts) > ndim:
        return None
    for part in parts:
        if type(part) is slice:
            if not all(type(b) is int or b is None for b in (part.start, part.stop, part.step)):
                return None
        elif type(part) is not int:
            return None
    return parts


def _part_key(parts):
    return tuple((p.start, p.stop, p.step) if type(p) is slice else p for p in parts)


def _indexed_shape(shape, parts):
    return np.broadcast_to(np.zeros((), np.int8), shape)[parts].shape


# A product read in more parts than this stays whole: each part is a NumPy call of its own (a batched
# class read back member by member is one multiply, not one per member). Two covers the vectorizing
# pass's split of a class into its first member and the rest.
_MOST_PARTS = 2


def _products_read_in_parts(program):
    """Arrays (products ``a * b`` among them) that only basic reads ``x[i]`` use, whose distinct reads hold
    no more elements than the product: id -> True. Each read is then the product of the operands'
    parts (:func:`_part_of_product`), and the whole product is never made (W2's backward pass makes
    ``gz[t] * y1`` for every ``t`` as one (256, 32, 128) array, then reads steps ``1:`` and ``0``)."""
    products = {}
    for eqn in program.eqns:   # any result: a product may be written as one by a rewrite (diag(d) @ b)
        if not eqn.prim.multiple_results and len(eqn.outs[0].shape) >= 2:
            products[eqn.outs[0].id] = eqn.outs[0]
    reads = {}
    for eqn in program.eqns:
        for v in eqn.uses:
            if v.id not in products:
                continue
            parts = _basic_parts(eqn.params.get("index"), len(v.shape)) \
                if eqn.prim is S.getitem and eqn.args[0] is v and len(eqn.uses) == 1 else None
            if parts is None:
                products.pop(v.id)
                reads.pop(v.id, None)
            else:
                reads.setdefault(v.id, {})[_part_key(parts)] = int(np.prod(eqn.outs[0].shape))
    for v in program.outputs:
        if type(v) is Var:
            products.pop(v.id, None)
    return {i for i, x in products.items() if i in reads and len(reads[i]) <= _MOST_PARTS
            and sum(reads[i].values()) <= int(np.prod(x.shape))}


def _part_of_product(eqn, defs, parted, fresh):
    """``(a * b)[i]`` is ``a[i_a] * b[i_b]``, each operand indexed on the axes it has at full size (a
    broadcast axis of size 1 keeps its one element): the same products, fewer of them."""
    if eqn.prim is not S.getitem or type(eqn.args[0]) is not Var or eqn.args[0].id not in parted:
        return None
    x = eqn.args[0]
    src = defs.get(x.id)
    parts = _basic_parts(eqn.params["index"], len(x.shape))
    if src is None or src.prim is not E.multiply or parts is None:
        return None
    out = eqn.outs[0]
    new, args = [], []
    for a in src.args:
        shape = _shape(a)
        offset = len(x.shape) - len(shape)
        own = []
        for k, part in enumerate(parts):
            if k < offset:
                continue
            if shape[k - offset] == x.shape[k]:
                own.append(part)
            elif shape[k - offset] == 1:
                own.append(0 if type(part) is int else slice(None))
            else:
                return None
        own = tuple(own)
        if all(type(p) is slice and p == slice(None) for p in own):
            args.append(a)
        elif type(a) is Var:
            part_var = fresh(_indexed_shape(shape, own), a.dtype)
            new.append(Eqn(S.getitem, (a,), {"index": own}, (part_var,), (a,), eqn.source))
            args.append(part_var)
        elif type(a) is np.ndarray:
            args.append(a[own])
        else:
            return None
    if np.broadcast_shapes(*(_shape(a) for a in args)) != out.shape:
        return None
    new.append(Eqn(E.multiply, tuple(args), {}, eqn.outs, _vars(*args), eqn.source))
    return new


def _sum_of_sum(eqn, defs, counts, fresh):
    """``sum(sum(x, a), b)`` is one sum of ``x`` over both axis sets (the backward pass's unbroadcast
    sums a bias cotangent over one axis, then the vectorized batch over another)."""
    if eqn.prim is not R.sum_ or len(eqn.args) != 1 or type(eqn.args[0]) is not Var \
            or not set(eqn.params) <= {"axis", "keepdims"}:
        return None
    mid = eqn.args[0]
    src = defs.get(mid.id)
    if src is None or src.prim is not R.sum_ or len(src.args) != 1 or type(src.args[0]) is not Var \
            or not set(src.params) <= {"axis", "keepdims"} or counts.get(mid.id) != 1:
        return None
    x = src.args[0]
    out = eqn.outs[0]
    if x.dtype != out.dtype or mid.dtype != out.dtype or not x.shape:
        return None
    inner = _axes(src.params.get("axis"), len(x.shape))
    kept = list(range(len(x.shape))) if src.params.get("keepdims", False) else \
        [k for k in range(len(x.shape)) if k not in inner]
    if not mid.shape:
        return None
    outer = {kept[k] for k in _axes(eqn.params.get("axis"), len(mid.shape))}
    axis = tuple(sorted(inner | outer))
    counts[x.id] -= 1   # the inner sum is read by this one only: it goes
    for keepdims in (True, False):
        shape = (_kept_shape if keepdims else _squeezed_shape)(x.shape, axis)
        if shape == out.shape:
            return [Eqn(R.sum_, (x,), {"axis": axis, "keepdims": keepdims}, eqn.outs, (x,), eqn.source)]
    total = fresh(_squeezed_shape(x.shape, axis), out.dtype)
    return [Eqn(R.sum_, (x,), {"axis": axis, "keepdims": False}, (total,), (x,), eqn.source),
            Eqn(S.reshape, (total,), {"shape": out.shape}, eqn.outs, (total,), eqn.source)]


def _product_terms(x, letters, defs, counts, fresh, source):
    """``x``'s einsum operands and terms, ``x`` having the index letters ``letters``: the operands of
    ``x = a * b`` (each read through added axes, size-1 axes dropped by a reshape) when only this
    contraction reads the product, else ``x`` itself. ``(operands, terms, new equations, folded)``."""
    src = defs.get(x.id)
    if src is None or src.prim is not E.multiply or src.params or len(src.args) != 2 or counts.get(x.id) != 1 \
            or not all(type(a) is Var and a.dtype == x.dtype for a in src.args):
        return [x], [letters], [], False
    operands, terms, new = [], [], []
    n = len(x.shape)
    for a in src.args:
        y, axes = _expanded(a, defs)
        offset = n - len(a.shape)
        keep = [k for k, ax in enumerate(axes) if y.shape[k] == x.shape[offset + ax]]
        if len(keep) < len(axes):
            if any(y.shape[k] != 1 for k in range(len(axes)) if k not in keep):
                return [x], [letters], [], False
            z = fresh(tuple(y.shape[k] for k in keep), y.dtype)
            new.append(Eqn(S.reshape, (y,), {"shape": z.shape}, (z,), (y,), source))
            y = z
        operands.append(y)
        terms.append("".join(letters[offset + axes[k]] for k in keep))
    return operands, terms, new, True


def _batched_product_summed(eqn, defs, counts, fresh):
    """``sum(a @ b, axis=0)`` over the batch of two stacks of matrices, where an operand is a
    broadcast product ``u * v`` read only here, is one einsum of the product's operands and the other
    stack: opt_einsum then contracts the small factors first (W2's weight cotangent
    ``sum_t (y1 * gz[t]) @ x[t].T`` is ``y1 @ (sum_t gz[t] * x[t]).T``: the stacks read once, no
    (255, 32, 128) product and no 255 matrix products)."""
    if eqn.prim is not R.sum_ or len(eqn.args) != 1 or type(eqn.args[0]) is not Var \
            or eqn.params.get("keepdims", False) or eqn.params.get("axis") not in (0, (0,)):
        return None
    m = eqn.args[0]
    src = defs.get(m.id)
    if src is None or src.prim is not C.matmul or counts.get(m.id) != 1 or len(m.shape) != 3:
        return None
    a, b = src.args
    out = eqn.outs[0]
    if type(a) is not Var or type(b) is not Var or len(a.shape) != 3 or len(b.shape) != 3 \
            or a.shape[0] != b.shape[0] or a.dtype != out.dtype or b.dtype != out.dtype or out.dtype.kind not in "fc" \
            or max(int(np.prod(a.shape)), int(np.prod(b.shape))) < _CONTRACT_MIN:
        return None
    ops_a, terms_a, new_a, folded_a = _product_terms(a, "abc", defs, counts, fresh, eqn.source)
    ops_b, terms_b, new_b, folded_b = _product_terms(b, "acd", defs, counts, fresh, eqn.source)
    if not (folded_a or folded_b):
        return None   # two stacks alone: matmul and a sum are the faster spelling
    operands = ops_a + ops_b
    subscripts = ",".join(terms_a + terms_b) + "->bd"
    return new_a + new_b + [Eqn(C.einsum, tuple(operands), {"subscripts": subscripts}, eqn.outs,
                                tuple(operands), eqn.source)]


# --- tie shares of an extremum's cotangent ----------------------------------------------------------
def _tie_shares(eqn, defs, counts, fresh):
    """``g * astype(t / sum(t, axis, keepdims=True))`` with ``t = (x == max(x))`` (the VJP of max and
    min under a trace: ``g`` shared among the tied maxima) is ``t * (g / count)``: the division on
    the reduced shape, in ``g``'s dtype, where the shares divided every element in float64 and cast
    the result back (the count as the float it divides by; one rounding fewer)."""
    if eqn.prim is not E.multiply or eqn.params or len(eqn.args) != 2 or not all(type(a) is Var for a in eqn.args):
        return None
    out = eqn.outs[0]
    for k in (0, 1):
        shares, g = eqn.args[k], eqn.args[1 - k]
        cast = defs.get(shares.id)
        if cast is None or counts.get(shares.id) != 1:
            continue
        ratio = shares
        if cast.prim is S.astype:
            ratio = cast.args[0]
            cast = defs.get(ratio.id) if type(ratio) is Var and counts.get(ratio.id) == 1 else None
        if cast is None or cast.prim is not E.divide or cast.params or not all(type(a) is Var for a in cast.args):
            continue
        t, c = cast.args
        total = defs.get(c.id)
        if t.dtype != np.dtype(bool) or total is None or total.prim is not R.sum_ or counts.get(c.id) != 1 \
                or type(total.args[0]) is not Var or total.args[0].id != t.id or not total.params.get("keepdims") \
                or out.dtype.kind != "f" or g.dtype != out.dtype or t.shape != out.shape \
                or np.broadcast_shapes(g.shape, c.shape) != c.shape:
            continue
        count, quotient = fresh(c.shape, out.dtype), fresh(c.shape, out.dtype)
        return [Eqn(S.astype, (c,), {"dtype": out.dtype}, (count,), (c,), eqn.source),
                Eqn(E.divide, (g, count), {}, (quotient,), (g, count), eqn.source),
                Eqn(E.multiply, (t, quotient), {}, eqn.outs, (t, quotient), eqn.source)]
    return None


# --- the cotangent of a log-softmax's shift ---------------------------------------------------------
def _is(v, defs, prim):
    """The equation defining ``v`` when it is ``prim`` without parameters, else None."""
    eqn = defs.get(v.id) if type(v) is Var else None
    return eqn if eqn is not None and eqn.prim is prim and not eqn.params else None


def _shift_cotangent_is_zero(eqn, defs):
    """Is ``eqn`` ``sum(-(gl * exp(y - log(sum(exp(y), A)))), A) + gl``, ``gl`` constant along ``A``?
    That is the cotangent a shift ``m`` of ``y = x - m`` receives through ``y - log(sum(exp(y)))``
    (a log-softmax written out, or the logsumexp rewrite's): ``-gl`` times the softmax's sum along
    ``A``, which is 1, plus ``gl``. Zero in exact arithmetic, whatever ``gl`` is: the log-softmax does
    not change when ``y`` shifts along ``A``; every piece is matched on the program's own equations."""
    if eqn.prim is not E.add or eqn.params or len(eqn.args) != 2:
        return False
    for u, gl in (eqn.args, eqn.args[::-1]):
        total = defs.get(u.id) if type(u) is Var else None
        if total is None or total.prim is not R.sum_ or not total.params.get("keepdims") or type(gl) is not Var:
            continue
        neg = _is(total.args[0], defs, E.negative)
        prod = _is(neg.args[0], defs, E.multiply) if neg is not None else None
        if prod is None or len(prod.args) != 2:
            continue
        if type(prod.args[0]) is Var and prod.args[0].id == gl.id:
            e2 = prod.args[1]
        elif type(prod.args[1]) is Var and prod.args[1].id == gl.id:
            e2 = prod.args[0]
        else:
            continue
        ex = _is(e2, defs, E.exp)
        lp = _is(ex.args[0], defs, E.subtract) if ex is not None else None
        if lp is None or not all(type(a) is Var for a in lp.args):
            continue
        y, l = lp.args
        log = _is(l, defs, E.log)
        sums = defs.get(log.args[0].id) if log is not None and type(log.args[0]) is Var else None
        if sums is None or sums.prim is not R.sum_ or not sums.params.get("keepdims"):
            continue
        inner = _is(sums.args[0], defs, E.exp)
        if inner is None or type(inner.args[0]) is not Var or inner.args[0].id != y.id:
            continue
        n = len(y.shape)
        axis = _axes(sums.params.get("axis"), n)
        if _axes(total.params.get("axis"), len(total.args[0].shape)) != axis or total.args[0].shape != y.shape \
                or gl.shape != sums.outs[0].shape or eqn.outs[0].shape != gl.shape:
            continue
        return True
    return False


def _summed_along(eqn, axis):
    """The operand of ``eqn`` when it is a sum along ``axis`` keeping its dimensions, else None."""
    if eqn is None or eqn.prim is not R.sum_ or set(eqn.params) - {"axis", "keepdims"} \
            or not eqn.params.get("keepdims") or type(eqn.args[0]) is not Var:
        return None
    return eqn.args[0] if _axes(eqn.params.get("axis"), len(eqn.args[0].shape)) == axis else None


def _softmax_shift_cotangent_is_zero(eqn, defs):
    """Is ``eqn`` ``sum(±(h * e), A)`` with ``h = g / s + sum(-g * p / s, A)``, ``p = e / s`` and
    ``s = sum(e, A)`` (the inner sums keeping dimensions)? ``h`` is then the whole cotangent of ``e``
    through the normalization ``p = e / sum(e)`` (divide's and sum's VJPs), and ``sum(h * e, A)`` is
    ``sum(g e)/s - s sum(g e)/s**2``: zero in exact arithmetic, whatever ``g`` is, because ``p`` does
    not change when ``e`` is scaled along ``A``. With ``e = exp(x - m)`` that sum is the cotangent of
    the shift ``m`` (a softmax written out), which then needs neither computing nor sharing among
    max's ties. Every piece is matched on the program's own equations."""
    if eqn.prim is not R.sum_ or set(eqn.params) - {"axis", "keepdims"} or type(eqn.args[0]) is not Var:
        return False
    x = eqn.args[0]
    axis = _axes(eqn.params.get("axis"), len(x.shape))
    neg = _is(x, defs, E.negative)
    if neg is not None:
        x = neg.args[0]
    prod = _is(x, defs, E.multiply)
    if prod is None or len(prod.args) != 2 or not all(type(a) is Var for a in prod.args):
        return False
    for h, e in (prod.args, prod.args[::-1]):
        total = _is(h, defs, E.add)
        if total is None or h.shape != e.shape or len(total.args) != 2:
            continue
        for share, spread in (total.args, total.args[::-1]):
            share = _is(share, defs, E.divide)
            spread = _summed_along(defs.get(spread.id) if type(spread) is Var else None, axis)
            part = _is(spread, defs, E.divide) if spread is not None else None
            if share is None or part is None or not all(type(a) is Var for a in (*share.args, *part.args)):
                continue
            g, s = share.args
            if part.args[1].id != s.id or getattr(_summed_along(defs.get(s.id), axis), "id", None) != e.id:
                continue
            minus_g_p = _is(part.args[0], defs, E.multiply)
            if minus_g_p is None or len(minus_g_p.args) != 2:
                continue
            for minus_g, p in (minus_g_p.args, minus_g_p.args[::-1]):
                neg_g, ratio = _is(minus_g, defs, E.negative), _is(p, defs, E.divide)
                if neg_g is not None and ratio is not None and _ids(neg_g.args) == (g.id,) \
                        and _ids(ratio.args) == (e.id, s.id):
                    return True
    return False


def _ids(xs):
    return tuple(getattr(x, "id", None) for x in xs)


def _stays_zero(eqn, zeros):
    """``eqn`` gives zeros from zeros: a count's share of zero (``z / count``), or a comparison's
    elements times zero (booleans are finite)."""
    if eqn.params or not eqn.args or type(eqn.args[0]) is not Var:
        return False
    if eqn.prim is E.divide:
        return eqn.args[0].id in zeros
    if eqn.prim is E.multiply and len(eqn.args) == 2 and all(type(a) is Var for a in eqn.args):
        a, b = eqn.args
        return (a.id in zeros and b.dtype == np.dtype(bool)) or (b.id in zeros and a.dtype == np.dtype(bool))
    return False


def _plus_zero(eqn, zeros, fresh_results, returned):
    """``a + z`` with ``z`` zero in exact arithmetic is ``a`` (where ``a`` has the sum's shape and dtype)."""
    if eqn.prim is not E.add or eqn.params or len(eqn.args) != 2 or not zeros:
        return None
    out = eqn.outs[0]
    for a, z in (eqn.args, eqn.args[::-1]):
        if type(z) is Var and z.id in zeros and type(a) is Var and a.shape == out.shape and a.dtype == out.dtype:
            if out.id in returned and (a.id not in fresh_results or a.id in returned):
                return None
            return a
    return None


# --- logsumexp of an array shifted by its maxima ---------------------------------------------------
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _logsumexp_of_shifted(eqn, defs, fresh):
    """``logsumexp(x - max(x, axis, keepdims=True), axis)`` (the stable log-softmax a careful user
    writes; the eager rewrite records its ``log(sum(exp(.)))`` as logsumexp) is
    ``log(sum(exp(x - m), axis))``: the operand's maxima are already 0, so logsumexp's own shift (a
    max, a finiteness test, a subtraction and an addition of zeros) changes no value. Where a
    maximum of ``x`` is not finite, the row is NaN either way."""
    if eqn.prim is not NN.logsumexp or type(eqn.args[0]) is not Var or not set(eqn.params) <= {"axis", "keepdims"}:
        return None
    y = eqn.args[0]
    src = defs.get(y.id)
    if src is None or src.prim is not E.subtract or src.params or y.dtype not in _FLOATS or not y.shape \
            or not all(type(a) is Var for a in src.args):
        return None
    x, m = src.args
    top = defs.get(m.id)
    if top is None or top.prim is not R.max_ or type(top.args[0]) is not Var or top.args[0].id != x.id \
            or not top.params.get("keepdims", False) or x.shape != y.shape or x.dtype != y.dtype:
        return None
    axis = _axes(eqn.params.get("axis"), len(y.shape))
    if _axes(top.params.get("axis"), len(x.shape)) != axis:
        return None
    out = eqn.outs[0]
    axis = tuple(sorted(axis))
    kept = _kept_shape(y.shape, axis)
    e, total = fresh(y.shape, y.dtype), fresh(kept, y.dtype)
    new = [Eqn(E.exp, (y,), {}, (e,), (y,), eqn.source),
           Eqn(R.sum_, (e,), {"axis": axis, "keepdims": True}, (total,), (e,), eqn.source)]
    if out.shape == kept:
        return new + [Eqn(E.log, (total,), {}, eqn.outs, (total,), eqn.source)]
    lse = fresh(kept, y.dtype)
    return new + [Eqn(E.log, (total,), {}, (lse,), (total,), eqn.source),
                  Eqn(S.reshape, (lse,), {"shape": out.shape}, eqn.outs, (lse,), eqn.source)]


# --- transposes of transposes ---------------------------------------------------------------------
def _permutation(eqn, ndim):
    axes = eqn.params.get("axes")
    return tuple(range(ndim))[::-1] if axes is None else tuple(int(a) % ndim for a in axes)


def _transpose_of_transpose(eqn, defs, counts):
    """``transpose(transpose(x, a), b)`` is ``transpose(x, a[b])``: one call (vmap's rules and their
    backward passes move the batch axis in and out, one transpose each way)."""
    if eqn.prim is not S.transpose or len(eqn.args) != 1 or type(eqn.args[0]) is not Var:
        return None
    y = eqn.args[0]
    src = defs.get(y.id)
    if src is None or src.prim is not S.transpose or len(src.args) != 1 or type(src.args[0]) is not Var \
            or counts.get(y.id) != 1:
        return None
    x = src.args[0]
    n = len(x.shape)
    inner, outer = _permutation(src, n), _permutation(eqn, n)
    axes = tuple(inner[b] for b in outer)
    return [Eqn(S.transpose, (x,), {"axes": axes}, eqn.outs, (x,), eqn.source)]


def _reversed_twice(eqn, defs, counts):
    """``f(x[::-1])[::-1]`` for an elementwise ``f`` of one operand is ``f(x)`` (the vectorizing pass
    reads a class against its order and puts the result back: lists+stack's ``-g`` in W1)."""
    if eqn.prim is not S.getitem or type(eqn.args[0]) is not Var:
        return None
    u = eqn.args[0]
    flips = _reversal(eqn.params["index"], u.shape)
    made = defs.get(u.id)
    if not flips or made is None or counts.get(u.id) != 1 or not _elementwise(made) or len(made.args) != 1 \
            or type(made.args[0]) is not Var or made.outs[0].shape != u.shape:
        return None
    w = made.args[0]
    read = defs.get(w.id)
    if read is None or read.prim is not S.getitem or type(read.args[0]) is not Var or counts.get(w.id) != 1 \
            or read.args[0].shape != w.shape or _reversal(read.params["index"], w.shape) != flips:
        return None
    x = read.args[0]
    return [Eqn(made.prim, (x,), made.params, eqn.outs, (x,), made.source)]


# --- products over one element ------------------------------------------------------------------------
def _product_over_one(eqn):
    """``matmul(a, b)`` of stacks, ``a`` of shape ``(..., m, 1)`` and ``b`` of ``(..., 1, p)``, is ``a * b``:
    every element is one product, and NumPy's matmul of a stack runs one tiny matrix product per
    item (the VJP of a batched matrix-vector product is a stack of outer products: ~1.7 ms for
    1,024 of them against ~10 us broadcast). A single outer product stays with the BLAS, which
    writes it about twice as fast as the broadcast product (W3 batch 1's weight cotangents)."""
    if eqn.prim is not C.matmul or eqn.params or len(eqn.args) != 2:
        return None
    a, b = eqn.args
    out = eqn.outs[0]
    if not all(type(x) in (Var, np.ndarray) and len(x.shape) >= 2 and x.dtype == out.dtype for x in (a, b)) \
            or len(out.shape) < 3 or a.shape[-1] != 1 or b.shape[-2] != 1 \
            or np.broadcast_shapes(a.shape, b.shape) != out.shape:
        return None
    return [Eqn(E.multiply, (a, b), {}, eqn.outs, _vars(a, b), eqn.source)]


def _einsum_without_sum(eqn, fresh):
    """A two-operand einsum that sums no index (``"tb,ob->otb"``, the cotangent of a batched dot
    product for one operand) is a broadcast product: each operand put in the output's axis order and
    given size-1 axes for the letters it lacks. NumPy's einsum loop writes W2's (32, 256, 128) block
    in 580 us, the ufunc in 410; and a ufunc's result is a fresh array the in-place updates may
    write (the ``index_add`` of the other operand's cotangent into it, 400 us as a copy). The same
    products."""
    if eqn.prim is not C.einsum or len(eqn.args) != 2 or set(eqn.params) != {"subscripts"}:
        return None
    found = _terms(eqn)
    out = eqn.outs[0]
    if found is None or any(type(a) is not Var or a.dtype != out.dtype for a in eqn.args) or out.dtype.kind not in "fc":
        return None
    terms, output = found
    if set("".join(terms)) != set(output) or len(output) != len(out.shape):
        return None
    sizes = dict(zip(output, out.shape))
    if any(sizes[c] != n for term, a in zip(terms, eqn.args) for c, n in zip(term, a.shape)):
        return None   # a size-1 index broadcast by einsum: left to einsum
    new, factors = [], []
    for term, a in zip(terms, eqn.args):
        order = sorted(term, key=output.index)
        if order != list(term):
            axes = tuple(term.index(c) for c in order)
            t = fresh(tuple(a.shape[k] for k in axes), a.dtype)
            new.append(Eqn(S.transpose, (a,), {"axes": axes}, (t,), (a,), eqn.source))
            a = t
        if len(term) < len(output):
            index = tuple(slice(None) if c in term else None for c in output)
            t = fresh(tuple(sizes[c] if c in term else 1 for c in output), a.dtype)
            new.append(Eqn(S.getitem, (a,), {"index": index}, (t,), (a,), eqn.source))
            a = t
        factors.append(a)
    return new + [Eqn(E.multiply, tuple(factors), {}, eqn.outs, tuple(factors), eqn.source)]


def _size(v):
    return int(np.prod(v.shape, dtype=np.int64))


def _scale_onto_smaller(eqn, defs, counts, fresh):
    """``y * (c * x)``, ``c`` a Python number, ``y`` broadcast to ``x``'s shape and ``c * x`` read only
    here, is ``(y * c) * x``: the scaling done on the small operand, not on the whole array (the
    backward pass of a square, ``g * (2 * x)`` with ``g`` a column norm's cotangent: W1 16x's
    (64, 16, 256) ``2 * b`` costs 100 us, ``2 * g`` 2 us). The same factors in another order:
    bit for bit the same where ``c`` is a power of two, as the squares' 2 is."""
    if eqn.prim is not E.multiply or eqn.params or len(eqn.args) != 2:
        return None
    out = eqn.outs[0]
    for k in (0, 1):
        p, y = eqn.args[k], eqn.args[1 - k]
        if type(p) is not Var or type(y) is not Var or counts.get(p.id) != 1 or p.shape != out.shape \
                or y.dtype != out.dtype or out.dtype.kind not in "fc" or _size(y) >= _size(out):
            continue
        made = defs.get(p.id)
        if made is None or made.prim is not E.multiply or made.params or len(made.args) != 2:
            continue
        for c, x in (made.args, made.args[::-1]):
            if type(c) in (int, float) and type(x) is Var and x.shape == out.shape and x.dtype == out.dtype:
                t = fresh(y.shape, y.dtype)
                pair = (t, x) if k == 1 else (x, t)
                return [Eqn(E.multiply, (y, c), {}, (t,), (y,), eqn.source),
                        Eqn(E.multiply, pair, {}, eqn.outs, pair, eqn.source)]
    return None


# --- a shared matrix times a stack of vectors -----------------------------------------------------------
def _shared_matrix_times_vectors(eqn, defs, fresh):
    """``matmul(broadcast_to(M, (B, m, k)), v)`` with ``v`` of shape ``(B, k, 1)`` (or the broadcast
    transposed, ``M.T`` per item) is ``(v[:, :, 0] @ M.T)[:, :, None]``: one matrix product for the
    stack instead of one small product per item. ``vmap(grad(f))`` broadcasts the parameters to the
    batch (each example has its own gradient), so a per-example ``W @ x`` multiplies copies of W."""
    if eqn.prim is not C.matmul or eqn.params or len(eqn.args) != 2 or not all(type(x) is Var for x in eqn.args):
        return None
    a, v = eqn.args
    out = eqn.outs[0]
    if len(a.shape) != 3 or len(v.shape) != 3 or v.shape[2] != 1 or v.shape[0] != a.shape[0] \
            or out.shape != (a.shape[0], a.shape[1], 1) or not (a.dtype == v.dtype == out.dtype):
        return None
    src, flipped = defs.get(a.id), False
    if src is not None and src.prim is S.transpose and type(src.args[0]) is Var \
            and _permutation(src, 3) == (0, 2, 1):
        src, flipped = defs.get(src.args[0].id), True
    if src is None or src.prim is not S.broadcast_to or type(src.args[0]) not in (Var, np.ndarray):
        return None
    m = src.args[0]
    if len(m.shape) != 2 or m.dtype != out.dtype or (m.shape[::-1] if flipped else m.shape) != a.shape[1:]:
        return None
    new = []
    if flipped:
        mt = m
    else:
        mt = fresh(m.shape[::-1], m.dtype)
        new.append(Eqn(S.transpose, (m,), {"axes": (1, 0)}, (mt,), _vars(m), eqn.source))
    y = fresh(out.shape[:2], out.dtype)
    made = defs.get(v.id)
    if made is not None and made.prim is S.reshape and type(made.args[0]) is Var and made.args[0].shape == v.shape[:2]:
        x = made.args[0]   # the vectors before they were made (B, k, 1)
    else:
        x = fresh(v.shape[:2], v.dtype)
        new.append(Eqn(S.reshape, (v,), {"shape": x.shape}, (x,), (v,), eqn.source))
    return new + [Eqn(C.dot, (x, mt), {}, (y,), _vars(x, mt), eqn.source),
                  Eqn(S.reshape, (y,), {"shape": out.shape}, eqn.outs, (y,), eqn.source)]


# --- transposes of matrix products -----------------------------------------------------------------
def _transpose_of_product(eqn, defs, counts, fresh):
    """``(p @ q).T`` is ``q.T @ p.T``, and when ``p`` is ``a.T``, ``q.T @ a``: two calls instead of
    three (a weight's cotangent ``(x.T @ g).T`` in a vmapped ``W @ x``)."""
    if eqn.prim is not S.transpose or type(eqn.args[0]) is not Var or len(eqn.args[0].shape) != 2 \
            or _permutation(eqn, 2) != (1, 0) or counts.get(eqn.args[0].id) != 1:
        return None
    prod = defs.get(eqn.args[0].id)
    if prod is None or prod.prim not in (C.dot, C.matmul) or prod.params or len(prod.args) != 2 \
            or not all(type(x) is Var and len(x.shape) == 2 for x in prod.args):
        return None
    p, q = prod.args
    inner = defs.get(p.id)
    if inner is None or inner.prim is not S.transpose or type(inner.args[0]) is not Var \
            or _permutation(inner, 2) != (1, 0):
        return None
    a = inner.args[0]
    qt = fresh(q.shape[::-1], q.dtype)
    return [Eqn(S.transpose, (q,), {"axes": (1, 0)}, (qt,), (q,), eqn.source),
            Eqn(prod.prim, (qt, a), {}, eqn.outs, (qt, a), eqn.source)]


# --- chains of views ---------------------------------------------------------------------------------
def _view_axes(eqn, views):
    """For a transpose, or a reshape that only adds or drops axes of length 1, of ``y``: ``(x, axes)``
    with ``x`` the array the chain of such views starts from and ``axes[i]`` the axis of ``x`` that
    the result's axis ``i`` is (None for an axis of length 1). Else None."""
    if eqn.prim not in (S.transpose, S.reshape) or len(eqn.args) != 1 or type(eqn.args[0]) is not Var:
        return None
    y = eqn.args[0]
    x, axes = views.get(y.id) or (y, [i if n != 1 else None for i, n in enumerate(y.shape)])
    out = eqn.outs[0].shape
    if eqn.prim is S.transpose:
        return x, [axes[a] for a in _permutation(eqn, len(y.shape))]
    kept = [a for a, n in zip(axes, y.shape) if n != 1]
    if [n for n in y.shape if n != 1] != [n for n in out if n != 1]:
        return None
    kept = iter(kept)
    return x, [None if n == 1 else next(kept) for n in out]


def _view_of_view(eqn, counts, fresh, views, transposes):
    """A chain of transposes and reshapes that add or drop axes of length 1 (vmap's rules move batch
    axes to the front and back, and add an axis where an operand is not batched; their backward
    passes undo each step) is at most one transpose of where the chain starts and one reshape: the
    chain is written so when that costs no more calls than it had, sharing a transpose already made."""
    if eqn.prim not in (S.transpose, S.reshape) or type(eqn.args[0]) is not Var or eqn.args[0].id not in views:
        return None
    found = _view_axes(eqn, views)
    if found is None:
        return None
    x, axes = found
    out = eqn.outs[0]
    order = tuple(a for a in axes if a is not None)
    if order == tuple(sorted(order)):   # the axes in their order: a reshape of x (if any call)
        perm = tuple(range(len(x.shape)))
    else:
        perm = order + tuple(i for i, n in enumerate(x.shape) if n == 1)
    t = x if perm == tuple(range(len(x.shape))) else transposes.get((x.id, perm))
    moved = tuple(x.shape[i] for i in perm)
    if (t is None) + (moved != out.shape) > 1 and counts.get(eqn.args[0].id) != 1:
        return None
    if t is None and moved == out.shape:
        return [Eqn(S.transpose, (x,), {"axes": perm}, eqn.outs, (x,), eqn.source)]
    new = []
    if t is None:
        t = fresh(moved, out.dtype)
        new.append(Eqn(S.transpose, (x,), {"axes": perm}, (t,), (x,), eqn.source))
    return new + [Eqn(S.reshape, (t,), {"shape": out.shape}, eqn.outs, (t,), eqn.source)]


# --- sums of stacked reads ---------------------------------------------------------------------------
def _read_at(v, defs):
    """``(x, k)`` when ``v = x[k]`` reads one position of ``x``'s first axis, else None."""
    eqn = defs.get(v.id) if type(v) is Var else None
    if eqn is None or eqn.prim is not S.getitem or type(eqn.args[0]) is not Var:
        return None
    index = eqn.params["index"]
    k = index[0] if type(index) is tuple and len(index) == 1 else index
    if type(k) is not int or not eqn.args[0].shape:
        return None
    return eqn.args[0], k % eqn.args[0].shape[0]


def _sum_of_stacked_reads(eqn, defs, counts, fresh):
    """``sum(stack([x[0], ..., x[n-1], r]), axis=0)`` is ``sum(x, axis=0) + r``: a batched class's
    members summed with other terms (the per-step bias cotangents of W2's loop) read back one by
    one and stacked again (n + 1 calls) are the batched array summed (one)."""
    if eqn.prim is not R.sum_ or len(eqn.args) != 1 or type(eqn.args[0]) is not Var \
            or eqn.params.get("keepdims", False) or eqn.params.get("axis") not in (0, (0,)):
        return None
    s = eqn.args[0]
    src = defs.get(s.id)
    if src is None or src.prim is not S.stack or src.params.get("axis", 0) != 0 or counts.get(s.id) != 1 \
            or len(src.args) < 8:
        return None
    out = eqn.outs[0]
    reads = {}
    for part in src.args:
        r = _read_at(part, defs)
        if r is not None:
            reads.setdefault(r[0].id, (r[0], []))[1].append(r[1])
    whole = {i for i, (x, ks) in reads.items() if len(ks) == x.shape[0] and sorted(ks) == list(range(x.shape[0]))
             and x.shape[1:] == out.shape and x.dtype == out.dtype}
    if not whole:
        return None
    new, terms = [], []
    for i in sorted(whole):
        x = reads[i][0]
        total = fresh(out.shape, out.dtype)
        new.append(Eqn(R.sum_, (x,), {"axis": (0,), "keepdims": False}, (total,), (x,), eqn.source))
        terms.append(total)
    rest = [part for part in src.args if (lambda r: r is None or r[0].id not in whole)(_read_at(part, defs))]
    if any(type(v) is not Var or v.shape != out.shape or v.dtype != out.dtype for v in rest):
        return None
    terms.extend(rest)
    while len(terms) > 1:
        a, b = terms[0], terms[1]
        total = eqn.outs[0] if len(terms) == 2 else fresh(out.shape, out.dtype)
        new.append(Eqn(E.add, (a, b), {}, (total,), (a, b), eqn.source))
        terms = [total] + terms[2:]
    if new[-1].outs[0] is not eqn.outs[0]:
        return None   # one term, the sum itself: its result var is another (kept as it was)
    return new


# --- sums of products of vectors ----------------------------------------------------------------------
_VECTOR_PRODUCTS_MIN = 4   # fewer terms: their adds cost about what the stacks and the matmul do


def _full_reads(vs, defs):
    """``(x, ks)`` when every ``vs[i]`` is ``x[ks[i]]``, one row of the same 2-D ``x``, and the
    ``ks`` are ``x``'s rows, each once; else None."""
    reads = [_read_at(v, defs) for v in vs]
    if any(r is None for r in reads):
        return None
    x = reads[0][0]
    ks = [k for _, k in reads]
    if len(x.shape) != 2 or any(r[0] is not x for r in reads) or sorted(ks) != list(range(x.shape[0])):
        return None
    return x, ks


def _product_pair(eqn, out, defs, counts):
    """``(kind, a, b)`` when ``eqn`` is a product of two vectors: ``"outer"`` for ``outer(a, b)``,
    ``"inner"`` for ``dot(a, b)`` or ``sum(a * b)`` (the product read only there); else None."""
    if eqn.prim is C.outer and len(out.shape) == 2:
        kind, args = "outer", eqn.args
    elif eqn.prim is C.dot and out.shape == ():
        kind, args = "inner", eqn.args
    elif eqn.prim is R.sum_ and out.shape == () and eqn.params.get("axis") is None \
            and not eqn.params.get("keepdims", False) and type(eqn.args[0]) is Var and counts[eqn.args[0].id] == 1:
        src = defs.get(eqn.args[0].id)
        if src is None or src.prim is not E.multiply or src.params:
            return None
        kind, args = "inner", src.args
        if len(args) != 2 or any(type(a) not in (Var, np.ndarray) or a.shape != args[0].shape for a in args):
            return None
    else:
        return None
    if eqn.params and kind == "outer" or eqn.prim is C.dot and eqn.params or len(args) != 2 \
            or any(type(a) not in (Var, np.ndarray) or len(a.shape) != 1 or a.dtype != out.dtype for a in args):
        return None
    return kind, args[0], args[1]


def _sums_of_vector_products(eqns, outputs, fresh):
    """Sums over a loop of products of vectors, as two stacks and one call:

    * ``outer(a1, b1) + ... + outer(an, bn)`` is ``stack(a).T @ stack(b)``: one matrix product
      instead of n outer products and n - 1 adds of full matrices. A loop's backward pass builds it
      for a weight matrix read by a matrix-vector product at every step (an RNN's ``W @ h``: the
      cotangent of ``W`` gathers ``outer(g_t, h_t)`` over the steps, each step waiting on the next);
    * ``dot(a1, b1) + ... + dot(an, bn)`` (or ``sum(a * b)`` terms) is the dot product of the two
      stacks flattened: a loss accumulated step by step (``loss = loss + np.sum(h * c[t])``).

    Where the ``b``'s are the rows of one array, read once each, that array is the stack; sums over
    the same ``a``'s share one stack; constant zero terms are dropped. The same products, summed in
    another order."""
    counts = _ir.use_counts(eqns, outputs)
    defs = {o.id: eqn for eqn in eqns for o in eqn.outs}
    terms = {}       # var id -> (kind, its number of products)
    leaves = {}      # var id -> (a, b) of a product
    absorbed = set()
    for eqn in eqns:
        out = eqn.outs[0] if len(eqn.outs) == 1 else None
        if out is None or len(out.shape) > 2 or out.dtype.kind not in "fc":
            continue
        if eqn.prim is E.add:
            if not eqn.params and len(eqn.args) == 2 and all(
                    type(a) is Var and a.id in terms and a.shape == out.shape and counts[a.id] == 1 for a in eqn.args) \
                    and terms[eqn.args[0].id][0] == terms[eqn.args[1].id][0]:
                terms[out.id] = (terms[eqn.args[0].id][0], terms[eqn.args[0].id][1] + terms[eqn.args[1].id][1])
                absorbed.update(a.id for a in eqn.args)
            continue
        pair = _product_pair(eqn, out, defs, counts)
        if pair is not None:
            terms[out.id] = (pair[0], 1)
            leaves[out.id] = pair[1:]
    roots = {i for i, (_, n) in terms.items() if n >= _VECTOR_PRODUCTS_MIN and i not in absorbed}
    if not roots:
        return eqns
    plans = {}   # root id -> (kind, pairs in the order to stack, the b's array or None)
    for eqn in eqns:
        if eqn.outs and eqn.outs[0].id in roots:
            pairs, todo = [], [eqn]
            while todo:   # the tree's leaves, without recursion (a loop's sum is a chain of n adds)
                e = todo.pop()
                if e.outs[0].id in leaves:
                    pairs.append(leaves[e.outs[0].id])
                else:
                    todo.extend(defs[a.id] for a in reversed(e.args))
            pairs = [(a, b) for a, b in pairs if not any(type(x) is np.ndarray and not x.any() for x in (a, b))]
            if not pairs or any(a.shape != pairs[0][0].shape or b.shape != pairs[0][1].shape for a, b in pairs):
                continue
            rows = _full_reads([b for _, b in pairs], defs)
            if rows is not None:   # sorted by row, the b's are that array itself
                pairs = [p for _, p in sorted(zip(rows[1], pairs), key=lambda kp: kp[0])]
            plans[eqn.outs[0].id] = (terms[eqn.outs[0].id][0], pairs, rows[0] if rows is not None else None)
    # sums over the same a's (W's and U's cotangents in an RNN share the g's) share one stack, in the
    # order an array of b's fixes if one does
    order = {}
    for _, pairs, b_rows in sorted(plans.values(), key=lambda plan: plan[2] is None):
        order.setdefault(frozenset(id(a) for a, _ in pairs), [a for a, _ in pairs])
    stacked = {}
    result = []
    for eqn in eqns:
        plan = plans.get(eqn.outs[0].id) if eqn.outs else None
        if plan is None:
            result.append(eqn)
            continue
        kind, pairs, b_rows = plan
        out, src = eqn.outs[0], eqn.source
        a_s = order[frozenset(id(a) for a, _ in pairs)]
        if b_rows is None:
            position = {id(a): n for n, a in enumerate(a_s)}
            if len(position) == len(pairs):
                pairs = sorted(pairs, key=lambda p: position[id(p[0])])
            bs = tuple(b for _, b in pairs)
            b_rows = fresh((len(bs),) + bs[0].shape, out.dtype)
            result.append(Eqn(S.stack, bs, {"axis": 0}, (b_rows,), _vars(*bs), src))
        a_s = [a for a, _ in pairs]
        key = tuple(id(a) for a in a_s)
        if key not in stacked:
            a_stack = fresh((len(a_s),) + a_s[0].shape, out.dtype)
            result.append(Eqn(S.stack, tuple(a_s), {"axis": 0}, (a_stack,), _vars(*a_s), src))
            stacked[key] = a_stack
        a_stack = stacked[key]
        if kind == "outer":
            a_cols = fresh(a_stack.shape[::-1], out.dtype)
            result.append(Eqn(S.transpose, (a_stack,), {"axes": (1, 0)}, (a_cols,), (a_stack,), src))
            result.append(Eqn(C.matmul, (a_cols, b_rows), {}, eqn.outs, (a_cols, b_rows), src))
        else:
            flat = []
            for x in (a_stack, b_rows):
                f = fresh((x.shape[0] * x.shape[1],), out.dtype)
                result.append(Eqn(S.reshape, (x,), {"shape": f.shape}, (f,), (x,), src))
                flat.append(f)
            result.append(Eqn(C.dot, tuple(flat), {}, eqn.outs, tuple(flat), src))
    return result


# --- scatters into zeros that only add axes ---------------------------------------------------------
def _scatter_is_reshape(eqn):
    """``index_add(zeros, g, index)`` with an index of full slices and new axes (the backward pass
    of ``x[None, :, :]``) writes every element once: it is ``g`` reshaped."""
    if eqn.prim is not S.index_add:
        return None
    base, g = eqn.args
    if type(base) is not np.ndarray or type(g) is not Var or g.shape == ():
        return None
    index = eqn.params["index"]
    parts = index if type(index) is tuple else (index,)
    if not all(i is None or (type(i) is slice and i == slice(None)) for i in parts):
        return None
    out = eqn.outs[0]
    if g.dtype != out.dtype or base.shape != out.shape or \
            np.broadcast_to(np.zeros((), np.int8), base.shape)[index].shape != g.shape or not _ir._all_zero(base):
        return None
    return [Eqn(S.reshape, (g,), {"shape": out.shape}, eqn.outs, (g,), eqn.source)]


# --- gathers and scatters that only move elements ----------------------------------------------------
# The vectorizing pass reads a loop's columns with index arrays (``x[:, c0, c1]``) and writes its
# results with a scatter into zeros (``grid_add``); the backward pass of a Buffer write reads the
# lanes back with index arrays again. Where those indices visit every element once in an order a
# reshape, reversals and a transpose give, the gather or scatter is that view (and at most one copy,
# the final reshape's): W1's lane results scattered into the (N, R, B) Buffer and transposed for the
# softmax cost 3 calls and a 1024-element fancy-indexed copy each way, the view none.
_PERMUTATION_LIMIT = 1 << 22   # elements probed at compile time (an index map of this many ints)


def _as_view(flat, n):
    """``(split, flips, perm)`` when ``flat`` (ints, C order) reads all ``n`` elements of an array once
    as ``reshape(split)``, the axes ``flips`` reversed, transposed by ``perm``, read in C order; else None."""
    if len(flat) != n or n < 2:
        return None
    got = _affine(flat)
    if got is None:
        return None
    start, axes = got
    by_stride = sorted(range(len(axes)), key=lambda g: -abs(axes[g][1]))
    stride = 1
    for g in reversed(by_stride):
        size, step = axes[g]
        if abs(step) != stride and size > 1:
            return None
        stride *= size
    if stride != n or start != sum((size - 1) * -step for size, step in axes if step < 0):
        return None
    split = tuple(axes[g][0] for g in by_stride)
    place = {g: a for a, g in enumerate(by_stride)}
    perm = tuple(place[g] for g in range(len(axes)))
    flips = frozenset(place[g] for g, (size, step) in enumerate(axes) if step < 0 and size > 1)
    probe = np.arange(n).reshape(split)[tuple(slice(None, None, -1) if a in flips else slice(None)
                                              for a in range(len(split)))].transpose(perm)
    return (split, flips, perm) if np.array_equal(probe.ravel(), flat) else None


def _viewed(x, view, shape, out, source, fresh, then=()):
    """The equations that make ``out`` from ``x`` through ``view`` (see :func:`_as_view`) read in C
    order as ``shape``, then the steps ``then`` ((primitive, params, shape) each)."""
    split, flips, perm = view
    steps = []
    if split != x.shape:
        steps.append((S.reshape, {"shape": split}, split))
    if flips:
        steps.append((S.getitem, {"index": tuple(slice(None, None, -1) if a in flips else slice(None)
                                                 for a in range(len(split)))}, split))
    if perm != tuple(range(len(split))):
        steps.append((S.transpose, {"axes": perm}, tuple(split[a] for a in perm)))
    if not steps or steps[-1][2] != shape:
        steps.append((S.reshape, {"shape": shape}, shape))
    steps.extend(then)
    eqns, cur = [], x
    for k, (prim, params, shape) in enumerate(steps):
        made = out if k == len(steps) - 1 else fresh(shape, x.dtype)
        eqns.append(Eqn(prim, (cur,), params, (made,), (cur,), source))
        cur = made
    return eqns


def _in_bounds(parts, shape):
    for part, n in zip(parts, shape):
        if type(part) is slice:
            continue
        if type(part) is int:
            if not -n <= part < n:
                return False
        elif type(part) is np.ndarray and part.dtype.kind in "iu" and part.size:
            if part.min() < -n or part.max() >= n:
                return False
        else:
            return False
    return True


def _gather_is_view(eqn, returned, fresh):
    """``x[index]`` with index arrays that read every element of ``x`` once, in an order a reshape,
    reversals and a transpose give: that view (copied by its last reshape where it must be)."""
    if eqn.prim is not S.getitem or type(eqn.args[0]) is not Var:
        return None
    x, out = eqn.args[0], eqn.outs[0]
    index = eqn.params["index"]
    parts = index if type(index) is tuple else (index,)
    n = int(np.prod(x.shape, dtype=np.int64))
    if out.id in returned or not any(type(p) is np.ndarray for p in parts) or len(parts) > len(x.shape) \
            or out.dtype != x.dtype or int(np.prod(out.shape, dtype=np.int64)) != n or n > _PERMUTATION_LIMIT \
            or not _in_bounds(parts, x.shape):
        return None
    flat = np.arange(n).reshape(x.shape)[index]
    if flat.shape != out.shape:
        return None
    # NumPy lays a gather's indexed axes out first in memory (x[:, rows] is rows of x, transposed):
    # the copy is made in that order, so that what reads it meets the layout it met before
    arrays = [k for k, p in enumerate(parts) if type(p) is np.ndarray]
    first = arrays[0]
    lanes = len(np.broadcast_shapes(*(parts[k].shape for k in arrays)))
    if any(type(p) is int for p in parts) or arrays != list(range(first, first + len(arrays))):
        first = 0   # (ints among the arrays, or arrays apart: the result's order, lanes first or not, is kept)
    order = tuple(range(first, first + lanes)) + tuple(range(first)) + tuple(range(first + lanes, len(out.shape)))
    flat = flat.transpose(order)
    view = _as_view(flat.ravel(), n)
    if view is None:
        return None
    back = ()
    if first:
        axes = tuple(int(a) for a in np.argsort(order))
        back = ((S.transpose, {"axes": axes}, out.shape),)
    return _viewed(x, view, flat.shape, out, eqn.source, fresh, back)


def _scatter_is_view(eqn, returned, fresh):
    """``grid_add(zeros, values)`` that writes every element once (the vectorizing pass's scatter of
    a loop's lane results into the array it filled) is ``values`` seen through a view."""
    if eqn.prim is not GRID_ADD or len(eqn.args) != 2:
        return None
    base, values = eqn.args
    out = eqn.outs[0]
    if type(base) is not np.ndarray or type(values) is not Var or out.id in returned or values.dtype != out.dtype \
            or base.shape != out.shape or base.size != int(np.prod(values.shape, dtype=np.int64)) \
            or not 2 <= base.size <= _PERMUTATION_LIMIT or not _ir._all_zero(base):
        return None
    n = base.size
    # which value lands where: values numbered from 1, a position no value reaches stays 0
    landed = _grid_add(np.zeros(base.shape, np.float64), np.arange(1, n + 1, dtype=np.float64).reshape(values.shape),
                       eqn.params["plan"]).ravel()
    if not np.array_equal(np.sort(landed), np.arange(1, n + 1)):
        return None
    view = _as_view(landed.astype(np.int64) - 1, n)
    if view is None:
        return None
    # made in the scatter's own C order, as grid_add made it: the softmax and the cotangents that
    # follow read it beside arrays of that layout (a strided view read beside them cost W1 more in
    # its elementwise calls than the copy)
    return _viewed(values, view, out.shape, out, eqn.source, fresh, ((_CONTIGUOUS, {}, out.shape),))


class _Copy:
    """A primitive-like record (name and impl, as spell's ``_Call``): a C-order copy of a view."""

    multiple_results = False
    name = "ascontiguousarray"
    impl = staticmethod(np.ascontiguousarray)


_CONTIGUOUS = _Copy()


def _whole_slice(eqn, fresh_results, returned):
    """``x[:, :, 0:16:1]``, an index of slices that keep every axis whole, is ``x``."""
    if eqn.prim is not S.getitem or type(eqn.args[0]) is not Var:
        return None
    x, out = eqn.args[0], eqn.outs[0]
    index = eqn.params["index"]
    parts = index if type(index) is tuple else (index,)
    if len(parts) > len(x.shape) or out.shape != x.shape or any(
            type(p) is not slice or range(n)[p] != range(n) for p, n in zip(parts, x.shape)):
        return None
    if out.id in returned and (x.id not in fresh_results or x.id in returned):
        return None
    return x


# --- reshapes ---------------------------------------------------------------------------------------
def _kept_shape(shape, axis):
    if axis is None:
        return (1,) * len(shape)
    axes = {a % len(shape) for a in (axis if type(axis) is tuple else (axis,))}
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _reshape_of(eqn, defs, counts):
    """A reshape of a reshape is one reshape (the backward passes of ``x[None]`` and of a sum
    follow each other), and a reshape of ``sum(x, keepdims=False)`` back to the kept shape is
    ``sum(x, keepdims=True)`` (unbroadcast's sum, then the sum rule's reshape)."""
    if eqn.prim is not S.reshape or type(eqn.args[0]) is not Var:
        return None
    src = defs.get(eqn.args[0].id)
    if src is None:
        return None
    shape = eqn.outs[0].shape
    if src.prim is S.reshape and type(src.args[0]) is Var:
        return [Eqn(S.reshape, (src.args[0],), {"shape": shape}, eqn.outs, (src.args[0],), eqn.source)]
    if src.prim is R.sum_ and counts.get(eqn.args[0].id) == 1 and len(src.args) == 1 and type(src.args[0]) is Var \
            and set(src.params) <= {"axis", "keepdims"} and src.args[0].shape != () and shape != ():
        x = src.args[0]
        kept = _kept_shape(x.shape, src.params.get("axis"))
        if shape == kept:
            keepdims = True
        elif shape == _squeezed_shape(x.shape, src.params.get("axis")):
            keepdims = False
        else:
            return None
        return [Eqn(R.sum_, (x,), dict(src.params, keepdims=keepdims), eqn.outs, (x,), eqn.source)]
    return None


def _squeezed_shape(shape, axis):
    if axis is None:
        return ()
    axes = {a % len(shape) for a in (axis if type(axis) is tuple else (axis,))}
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _same_reshape(eqn, fresh_results, returned):
    """A reshape to the operand's own shape is the operand (as ``x / 1``)."""
    if eqn.prim is not S.reshape or type(eqn.args[0]) is not Var:
        return None
    x = eqn.args[0]
    out = eqn.outs[0]
    if x.shape != out.shape or x.dtype != out.dtype:
        return None
    if out.id in returned and (x.id not in fresh_results or x.id in returned):
        return None
    return x


def _identity_transpose(eqn, fresh_results, returned):
    """A transpose that keeps every axis in place is its operand (as a reshape to its own shape)."""
    if eqn.prim is not S.transpose or len(eqn.args) != 1 or type(eqn.args[0]) is not Var:
        return None
    x = eqn.args[0]
    out = eqn.outs[0]
    if _permutation(eqn, len(x.shape)) != tuple(range(len(x.shape))) or x.dtype != out.dtype:
        return None
    if out.id in returned and (x.id not in fresh_results or x.id in returned):
        return None
    return x


# --- broadcasts into elementwise operations ---------------------------------------------------------
def _elementwise(eqn):
    impl = eqn.prim.impl
    return isinstance(impl, np.ufunc) and impl.nout == 1 and not eqn.params and len(eqn.args) == impl.nin


def _implicit_broadcasts(eqn, defs):
    """An elementwise operation reads ``broadcast_to(x)``'s source ``x`` where its own broadcasting
    gives the same result shape (the broadcast was one NumPy call and a wrapper)."""
    if not _elementwise(eqn):
        return None
    args = list(eqn.args)
    out = eqn.outs[0]
    changed = False
    for k, a in enumerate(args):
        src = defs.get(a.id) if type(a) is Var else None
        if src is None or src.prim is not S.broadcast_to or type(src.args[0]) is not Var:
            continue
        trial = args[:k] + [src.args[0]] + args[k + 1:]
        if np.broadcast_shapes(*(_shape(t) for t in trial)) == out.shape:
            args = trial
            changed = True
    if not changed:
        return None
    return [Eqn(eqn.prim, tuple(args), {}, eqn.outs, _vars(*args), eqn.source)]


# --- the pass ----------------------------------------------------------------------------------------
def _cancel_negations(eqns, counts, defs, rename):
    """``-(... (-a) * b / c ...)`` is ``(... a * b / c ...)``: the backward pass of ``1 / (1 + exp(-x))``
    negates the cotangent in divide's rule and again in negative's. Both go where the chain between
    them is products and quotients each read once; a chain with a float constant instead takes the
    constant negated (exact: negation only flips the sign bit)."""
    drop = set()
    replace = {}   # eqn position -> new eqn (the inner product reading ``a``)
    position = {id(e): k for k, e in enumerate(eqns)}
    for eqn in eqns:
        if eqn.prim is not E.negative or type(eqn.args[0]) is not Var or eqn.params:
            continue
        y = eqn.args[0]
        for _ in range(8):
            link = defs.get(y.id)
            if link is None or counts.get(y.id) != 1 or link.prim not in (E.multiply, E.divide) or link.params \
                    or id(link) in drop or position[id(link)] in replace:
                break
            inner = None
            for k, a in enumerate(link.args):
                src = defs.get(a.id) if type(a) is Var else None
                if src is not None and src.prim is E.negative and counts.get(a.id) == 1 and not src.params \
                        and type(src.args[0]) is Var and id(src) not in drop:
                    inner = (k, a, src)
                    break
            if inner is None:
                for k, a in enumerate(link.args):   # or a float constant, negated once here
                    if type(a) is float or (type(a) is np.ndarray and a.dtype.kind in "fc") or \
                            (isinstance(a, np.generic) and a.dtype.kind in "fc"):
                        inner = (k, a, None)
                        break
            if inner is not None:
                k, a, src = inner
                args = list(link.args)
                args[k] = -a if src is None else src.args[0]
                replace[position[id(link)]] = Eqn(link.prim, tuple(args), {}, link.outs, _vars(*args), link.source)
                if src is not None:
                    drop.add(id(src))
                drop.add(id(eqn))
                rename[eqn.outs[0].id] = eqn.args[0]
                break
            nxt = [a for a in link.args if type(a) is Var and defs.get(a.id) is not None
                   and defs[a.id].prim in (E.multiply, E.divide) and counts.get(a.id) == 1]
            if len(nxt) != 1:
                break
            y = nxt[0]
    if not drop:
        return eqns
    return [replace.get(k, e) for k, e in enumerate(eqns) if id(e) not in drop]


def _unit_divisor(eqn, fresh_results, returned):
    """``x / 1`` is ``x`` (``np.sum(...) / x.shape[0]`` at batch 1): dropped where ``x`` has the
    product's shape and dtype; a returned quotient only when ``x`` is a fresh array read nowhere else."""
    if eqn.prim is not E.divide or eqn.params:
        return None
    x, c = eqn.args
    out = eqn.outs[0]
    if type(x) is not Var or type(c) is Var or not _ir._is_one(c) or x.shape != out.shape or x.dtype != out.dtype:
        return None
    if out.id in returned and (x.id not in fresh_results or x.id in returned):
        return None
    return x


def simplify(program):
    """The rewrites above, in one walk (plus one for negations), then dead code dropped and
    contractions shared (:func:`reuse_contractions`)."""
    counts = _ir.use_counts(program.eqns, program.outputs)
    defs = {}
    fresh = _Fresh(program)
    contract = _ir.PASSES["contract"]
    returned = {v.id for v in program.outputs if type(v) is Var}
    fresh_results = set()
    rename = {}
    parted = _products_read_in_parts(program)
    zeros = set()   # variables zero in exact arithmetic (a (log-)softmax's shift's cotangent, its shares)
    part_reads = {}   # (product id, index) -> the variable already holding that part
    views = {}   # var id -> (x, axes): the var is a chain of views of x (see _view_axes)
    transposes = {}   # (x id, axes) -> the variable holding that transpose of x
    out = []
    for eqn in program.eqns:
        if rename:
            eqn = renamed(eqn, rename)
        if parted and eqn.prim is S.getitem and type(eqn.args[0]) is Var and eqn.args[0].id in parted:
            parts = _basic_parts(eqn.params["index"], len(eqn.args[0].shape))
            key = (eqn.args[0].id, _part_key(parts)) if parts is not None else None
            if key in part_reads:   # the same part read again (the vectorizing pass's copies)
                rename[eqn.outs[0].id] = part_reads[key]
                counts[part_reads[key].id] += counts.get(eqn.outs[0].id, 0)
                counts[eqn.args[0].id] -= 1
                continue
            if key is not None:
                part_reads[key] = eqn.outs[0]
        new = []
        for _ in range(4):   # a rewrite's result may be rewritten again (a scatter become a reshape, of a sum)
            step = (_diagonal_product(eqn, defs, fresh) or _diagonal_of_product(eqn, defs, counts)
                    or _scatter_is_reshape(eqn) or _implicit_broadcasts(eqn, defs) or _reshape_of(eqn, defs, counts)
                    or _part_of_product(eqn, defs, parted, fresh) or _sum_of_sum(eqn, defs, counts, fresh)
                    or _logsumexp_of_shifted(eqn, defs, fresh) or _tie_shares(eqn, defs, counts, fresh)
                    or (_product_sum(eqn, defs, counts, fresh) if contract else None)
                    or (_batched_product_summed(eqn, defs, counts, fresh) if contract else None)
                    or (_contraction_of_repeated_rows(eqn, defs, fresh) if contract else None)
                    or _sum_of_stacked_reads(eqn, defs, counts, fresh) or _product_over_one(eqn) or _einsum_without_sum(eqn, fresh)
                    or _scale_onto_smaller(eqn, defs, counts, fresh)
                    or _transpose_of_product(eqn, defs, counts, fresh) or _shared_matrix_times_vectors(eqn, defs, fresh)
                    or _view_of_view(eqn, counts, fresh, views, transposes) or _transpose_of_transpose(eqn, defs, counts)
                    or _gather_is_view(eqn, returned, fresh) or _scatter_is_view(eqn, returned, fresh)
                    or _reversed_twice(eqn, defs, counts))
            if step is None:
                break
            for v in eqn.uses:
                counts[v.id] -= 1
            for e in step:
                for v in e.uses:
                    counts[v.id] = counts.get(v.id, 0) + 1
            for e in step[:-1]:
                for o in e.outs:
                    defs[o.id] = e
            new.extend(step[:-1])
            eqn = step[-1]
        new.append(eqn)
        for e in new:
            if _shift_cotangent_is_zero(e, defs) or _softmax_shift_cotangent_is_zero(e, defs) \
                    or _stays_zero(e, zeros):
                zeros.add(e.outs[0].id)
        x = (_unit_divisor(eqn, fresh_results, returned) or _same_reshape(eqn, fresh_results, returned)
             or _identity_transpose(eqn, fresh_results, returned) or _plus_zero(eqn, zeros, fresh_results, returned)
             or _whole_slice(eqn, fresh_results, returned))
        if x is not None:
            rename[eqn.outs[0].id] = x
            counts[x.id] += counts.get(eqn.outs[0].id, 0) - 1
            new = new[:-1]
        for e in new:
            for o in e.outs:
                defs[o.id] = e
            view = _view_axes(e, views)
            if view is not None:
                views[e.outs[0].id] = view
                if e.prim is S.transpose:
                    transposes.setdefault((e.args[0].id, _permutation(e, len(e.args[0].shape))), e.outs[0])
            if _elementwise(e):
                fresh_results.add(e.outs[0].id)
        out.extend(new)
    outputs = [substitute(v, rename) for v in program.outputs] if rename else program.outputs
    rename = {}
    eqns = _cancel_negations(out, _ir.use_counts(out, outputs), defs, rename)
    if rename:
        eqns = [renamed(e, rename) for e in eqns]
        outputs = [substitute(v, rename) for v in outputs]
    if contract:
        eqns = _sums_of_vector_products(eqns, outputs, fresh)
    eqns = _reduction_layouts(eqns, {v.id for v in outputs if type(v) is Var}, fresh)
    if contract:
        eqns = _contraction_layouts(eqns, program.inputs, fresh)
    eqns, outputs = _shared_views(eqns, outputs)
    eqns = _row_sums_in_place(eqns, outputs, fresh)
    program = columns_in_place(_ir.dce(Program(program.inputs, eqns, outputs)), fresh)
    return reuse_contractions(program) if contract else program


# --- layouts for reductions --------------------------------------------------------------------------
# NumPy reduces an axis with its innermost loop along the axis last in memory: an array (B, m, c),
# C order, with c small, reduced over m runs B * m loops of c elements (W1's lists+stack loop: its
# lanes reshaped to (16, 16, 4) and softmaxed over the 16: max 9 us, against 1.8 us with B last in
# memory; 126 us against 3.3 at B = 256). Such an array is made with B last in memory instead (one
# transposing copy, 1 us there); the elementwise work after it follows that layout.
def _reduced_axes(eqns):
    """var id -> the axes single-axis sums and maxima of it reduce."""
    found = {}
    for eqn in eqns:
        if (eqn.prim is R.sum_ or eqn.prim is R.max_) and len(eqn.args) == 1 and type(eqn.args[0]) is Var \
                and set(eqn.params) <= {"axis", "keepdims"}:
            axis = eqn.params.get("axis")
            x = eqn.args[0]
            axes = (axis,) if type(axis) is int else axis
            if type(axes) is tuple and len(axes) == 1 and type(axes[0]) is int and x.shape:
                found.setdefault(x.id, set()).add(axes[0] % len(x.shape))
    return found


def _reduction_layouts(eqns, returned, fresh):
    """Reshapes of a vector into (..., B, ..., m, c...) read by reductions over m with c < 8 and
    B >= 8: made with B last in memory (see above)."""
    reduced = _reduced_axes(eqns)
    out = []
    for eqn in eqns:
        x = eqn.outs[0] if eqn.outs else None
        axes = reduced.get(x.id) if x is not None and eqn.prim is S.reshape else None
        if axes and len(axes) == 1 and x.id not in returned and type(eqn.args[0]) is Var \
                and len(eqn.args[0].shape) == 1:
            (a,) = axes
            inner = int(np.prod(x.shape[a + 1:], dtype=np.int64))
            batch = [b for b in range(a) if x.shape[b] >= 8]
            if 1 < inner < 8 and x.shape[a] >= 8 and batch:
                b = batch[-1]
                mem = tuple(k for k in range(len(x.shape)) if k != b) + (b,)
                back = tuple(int(k) for k in np.argsort(mem))
                moved = tuple(x.shape[k] for k in mem)
                t, u, w = fresh(x.shape, x.dtype), fresh(moved, x.dtype), fresh(moved, x.dtype)
                out += [Eqn(S.reshape, eqn.args, eqn.params, (t,), (eqn.args[0],), eqn.source),
                        Eqn(S.transpose, (t,), {"axes": mem}, (u,), (t,), eqn.source),
                        Eqn(_CONTIGUOUS, (u,), {}, (w,), (u,), eqn.source),
                        Eqn(S.transpose, (w,), {"axes": back}, (x,), (w,), eqn.source)]
                continue
        out.append(eqn)
    return out


def _matmul_operands(eqn):
    """``[(operand, term, batch letters)]`` of an einsum the primitive computes as one ``np.matmul``
    over a batch index (C._contraction's batched matrix product), else []."""
    if eqn.prim is not C.einsum or set(eqn.params) != {"subscripts"} or len(eqn.args) != 2 \
            or any(type(a) is not Var for a in eqn.args):
        return []
    found = _terms(eqn)
    if found is None:
        return []
    (first, second), output = found
    shapes = tuple(a.shape for a in eqn.args)
    sizes = dict(zip(first, shapes[0]))
    sizes.update(zip(second, shapes[1]))
    if _einsum_loops(eqn.params["subscripts"], shapes) \
            or C._as_batched_matmul(eqn.params["subscripts"], shapes, sizes) is None:
        return []
    batch = set(first) & set(second) & set(output)
    return [(a, term, batch) for a, term in zip(eqn.args, (first, second))]


def _contraction_layouts(eqns, inputs, fresh):
    """A transpose of an array in C order (an input, an elementwise result) whose unit-stride axis is
    the batch index of two or more batched matrix products reading it is copied once in its own C
    order before the first: each item's matrix then has a unit stride, which BLAS needs; without it
    NumPy's matmul runs its own loop per item. Seed 000 written as one matrix-vector product per
    (j, k) reads ``b.T`` (16, 16, 64), batch k, in its forward and backward products: 19 + 31 us
    strided, 16 us copy + 5 + 4 us (one process, loaded machine)."""
    ordered = {v.id for v in inputs if type(v) is Var}
    transposes = {}
    readers = {}
    for k, eqn in enumerate(eqns):
        if _elementwise(eqn):
            ordered.add(eqn.outs[0].id)
        elif eqn.prim is S.transpose and len(eqn.args) == 1 and type(eqn.args[0]) is Var \
                and eqn.args[0].id in ordered and len(eqn.args[0].shape) >= 3:
            n = len(eqn.args[0].shape)
            axes = eqn.params.get("axes")
            axes = tuple(range(n))[::-1] if axes is None else tuple(a % n for a in axes)
            transposes[eqn.outs[0].id] = (eqn.outs[0], axes.index(n - 1))
        operands = _matmul_operands(eqn)
        for i, (v, term, batch) in enumerate(operands):
            if v.id in transposes:
                other = operands[1 - i][0]
                items = int(np.prod([n for c, n in zip(term, v.shape) if c in batch], dtype=np.int64))
                readers.setdefault(v.id, []).append((k, term, batch, other, items))
    copies = {}   # the first reader's position -> (view, its copy)
    for vid, found in readers.items():
        v, unit = transposes[vid]
        if len(found) >= 2 and all(term[unit] in batch and term[-1] not in batch
                                   and (items <= C._MATMUL_MAX_ITEMS or not _is_transposed_read(other, transposes))
                                   for _, term, batch, other, items in found):
            copies[found[0][0]] = (v, fresh(v.shape, v.dtype), {k for k, *_ in found})
    if not copies:
        return eqns
    rename_at = {}
    for v, c, at in copies.values():
        for k in at:
            rename_at.setdefault(k, {})[v.id] = c
    out = []
    for k, eqn in enumerate(eqns):
        if k in copies:
            v, c, _ = copies[k]
            out.append(Eqn(_CONTIGUOUS, (v,), {}, (c,), (v,), eqn.source))
        out.append(renamed(eqn, rename_at[k]) if k in rename_at else eqn)
    return out


def _is_transposed_read(other, transposes):
    """Is ``other`` (a product's other operand) itself a transpose of an array in C order, which BLAS
    may not take as it lies? Past C._MATMUL_MAX_ITEMS items the einsum primitive hands a product to
    ``np.matmul`` only when both operands lie as BLAS takes them; copying one of the two then gains
    nothing and makes einsum's loop run on mixed layouts (W1 16x under vmap: 1.0 -> 4.2 ms)."""
    return type(other) is Var and other.id in transposes


def _shared_views(eqns, outputs):
    """One reshape or transpose per operand and shape: the vectorizing pass's reads of one class in
    several places (lists+stack's cotangent read twice as lanes) made the same view twice, and a
    view of a strided array is a copy each time. (eqns, outputs) renamed."""
    seen, rename, out = {}, {}, []
    for eqn in eqns:
        if rename:
            eqn = renamed(eqn, rename)
        if (eqn.prim is S.reshape or eqn.prim is S.transpose) and len(eqn.args) == 1 and type(eqn.args[0]) is Var:
            key = (eqn.prim, eqn.args[0].id, eqn.outs[0].shape, repr(sorted(eqn.params.items())))
            if key in seen:
                rename[eqn.outs[0].id] = seen[key]
                continue
            seen[key] = eqn.outs[0]
        out.append(eqn)
    return out, ([substitute(v, rename) for v in outputs] if rename else outputs)


# --- sums along the rows of a gather's view -----------------------------------------------------------
def _rows_of(s, defs):
    """``(x, perm)`` when ``s`` (rows, w) is ``reshape(transpose(x, perm), (rows, w))`` (the view a
    gather of x's columns became, see :func:`_gather_is_view`), w being x's axis ``perm[-1]``."""
    eqn = defs.get(s.id)
    if eqn is None or eqn.prim is not S.reshape or type(eqn.args[0]) is not Var or len(s.shape) != 2:
        return None
    t = eqn.args[0]
    made = defs.get(t.id)
    if made is not None and made.prim is S.transpose and len(made.args) == 1 and type(made.args[0]) is Var:
        x, perm = made.args[0], _permutation(made, len(t.shape))
    else:
        x, perm = t, tuple(range(len(t.shape)))
    if not t.shape or t.shape[-1] != s.shape[1] or int(np.prod(t.shape[:-1], dtype=np.int64)) != s.shape[0]:
        return None
    return x, perm


def _row_norms(eqn, defs, fresh):
    """``norm(s, axis=1)`` (a 2-norm) of the rows ``s`` of a gather's view of ``x`` (W1's loop written
    with ``np.linalg.norm(b[:, i, k])``) as x's norms over its own axis, put in the rows' order, as
    :func:`_row_sums_in_place` does for sums: then only grid products read the rows, and they read
    x where it lies (:func:`columns_in_place`; W1 at 16x "inline reads": b's rows copied, 0.83 ms,
    and its cotangent scattered back, 0.96 ms)."""
    if eqn.prim is not L.pnorm or len(eqn.args) != 1 or type(eqn.args[0]) is not Var or eqn.params.get("keepdims") \
            or eqn.params.get("ord") not in (None, 2) or eqn.params.get("axis") not in (1, (1,), -1, (-1,)) \
            or len(eqn.args[0].shape) != 2:
        return None
    found = _rows_of(eqn.args[0], defs)
    if found is None:
        return None
    x, perm = found
    w = perm[-1]
    kept = [a for a in range(len(x.shape)) if a != w]
    order = tuple(kept.index(a) for a in perm[:-1])
    normed = fresh(tuple(x.shape[a] for a in kept), eqn.outs[0].dtype)
    new = [Eqn(L.pnorm, (x,), {**eqn.params, "axis": (w,)}, (normed,), (x,), eqn.source)]
    if order != tuple(range(len(order))):
        moved = fresh(tuple(x.shape[a] for a in perm[:-1]), eqn.outs[0].dtype)
        new.append(Eqn(S.transpose, (normed,), {"axes": order}, (moved,), (normed,), eqn.source))
        normed = moved
    new.append(Eqn(S.reshape, (normed,), {"shape": eqn.outs[0].shape}, eqn.outs, (normed,), eqn.source))
    return new


def _row_sums_in_place(eqns, outputs, fresh):
    """``sum(f(s), axis=1)`` of an elementwise ``f`` of the rows ``s`` of a gather's view of ``x`` (the
    columns' norms ``sum(u ** 2)`` in W1's loop) is ``f(x)`` summed over x's own axis, put in the rows'
    order: NumPy sums (4096, 64) rows copied out of W1's b (16x) in 196 us, b's axis 0 in place in a
    fraction of that, and f reads x as it lies. The same sums of the same terms. Likewise the rows'
    2-norms (:func:`_row_norms`)."""
    defs, counts = {}, _ir.use_counts(eqns, outputs)
    for eqn in eqns:
        for o in eqn.outs:
            defs[o.id] = eqn
    replace, dead = {}, set()
    for eqn in eqns:
        normed = _row_norms(eqn, defs, fresh)
        if normed is not None:
            replace[id(eqn)] = normed
            continue
        if eqn.prim is not R.sum_ or len(eqn.args) != 1 or type(eqn.args[0]) is not Var \
                or set(eqn.params) - {"axis", "keepdims"} or eqn.params.get("keepdims") \
                or eqn.params.get("axis") not in (1, (1,), -1, (-1,)) or len(eqn.args[0].shape) != 2:
            continue
        y = eqn.args[0]
        made = defs.get(y.id)
        if made is None or counts.get(y.id) != 1 or made.outs[0].shape != y.shape \
                or not (_elementwise(made) or (made.prim is E.power and not made.params and len(made.args) == 2)):
            continue
        operands = [a for a in made.args if type(a) is Var]
        if not operands or any(a is not operands[0] for a in operands) \
                or any(type(a) not in (int, float) for a in made.args if type(a) is not Var):
            continue
        rows = operands[0]
        found = _rows_of(rows, defs)
        if found is None:
            continue
        x, perm = found
        w = perm[-1]
        kept = [a for a in range(len(x.shape)) if a != w]
        order = tuple(kept.index(a) for a in perm[:-1])
        u = fresh(x.shape, y.dtype)
        summed = fresh(tuple(x.shape[a] for a in kept), eqn.outs[0].dtype)
        moved = fresh(tuple(x.shape[a] for a in perm[:-1]), eqn.outs[0].dtype)
        args = tuple(x if a is rows else a for a in made.args)
        new = [Eqn(made.prim, args, made.params, (u,), (x,), made.source),
               Eqn(R.sum_, (u,), {"axis": (w,), "keepdims": False}, (summed,), (u,), eqn.source)]
        if order != tuple(range(len(order))):
            new.append(Eqn(S.transpose, (summed,), {"axes": order}, (moved,), (summed,), eqn.source))
            summed = moved
        new.append(Eqn(S.reshape, (summed,), {"shape": eqn.outs[0].shape}, eqn.outs, (summed,), eqn.source))
        replace[id(eqn)] = new
        dead.add(id(made))
    if not replace:
        return eqns
    return [e for eqn in eqns if id(eqn) not in dead for e in replace.get(id(eqn), (eqn,))]


# --- spelling ----------------------------------------------------------------------------------------
class _Call:
    """A primitive-like record for the generated code (a name and the callable written)."""

    multiple_results = False

    def __init__(self, name, impl):
        self.name = name
        self.impl = impl


_SUM = _Call("add_reduce", np.add.reduce)
_MAX = _Call("maximum_reduce", np.maximum.reduce)
_MIN = _Call("minimum_reduce", np.minimum.reduce)
_T = _Call("T", operator.attrgetter("T"))
_TRANSPOSE = _Call("ndarray_transpose", np.ndarray.transpose)
_RESHAPE = _Call("ndarray_reshape", np.ndarray.reshape)
_DOT = _Call("np_dot", np.dot)
_MATMUL = _Call("np_matmul", np.matmul)
_SQUARE = _Call("square", np.square)
_EINSUM = _Call("np_einsum", np.einsum)


def _einsum_loop(eqn):
    """``np.einsum(subscripts, *operands)`` where the primitive would run NumPy's einsum loop once
    anyway (a small contraction, or one opt_einsum plans as a single einsum step, no BLAS call): the
    same loop without the primitive's wrapper and opt_einsum's plan walk. W1 16x's batched dot
    products ("bda,bca->bcd", 256 items) 620 us through the primitive, 560 us called alone; W2's
    "ob,otb->tb" 350 us against 300."""
    subscripts = eqn.params.get("subscripts")
    if len(eqn.params) != 1 or type(subscripts) is not str or not eqn.args \
            or any(type(a) is not Var for a in eqn.args):
        return None
    if _einsum_loops(subscripts, tuple(a.shape for a in eqn.args)):
        return Eqn(_EINSUM, (subscripts,) + tuple(eqn.args), {}, eqn.outs, eqn.uses, eqn.source)
    return None


def _einsum_loops(subscripts, shapes):
    """Does the einsum primitive compute this contraction with NumPy's einsum loop, once (a small
    contraction, or one opt_einsum plans as a single step with no BLAS call)?"""
    chosen = C._contraction(subscripts, shapes)
    steps = getattr(chosen, "contraction_list", None)
    return getattr(chosen, "func", None) is np.einsum or (steps is not None and len(steps) == 1 and not steps[0][-1])


def _spelled(eqn):
    prim = eqn.prim
    args = eqn.args
    if not args or type(args[0]) is not Var or args[0].shape == ():
        return None   # a NumPy scalar has no ufunc reduction or array method: kept as the primitive
    x = args[0]
    out = eqn.outs[0]
    if prim is R.sum_ and len(args) == 1 and x.dtype.kind in "biu" and out.dtype.kind in "iu":
        # a count (the tie shares' sum of a comparison): its dtype said, as np.sum chooses it
        return Eqn(_SUM, args, dict(eqn.params, dtype=out.dtype), eqn.outs, eqn.uses, eqn.source)
    if prim is R.sum_ or prim is R.max_ or prim is R.min_:
        kinds = "fc" if prim is R.sum_ else "fiu"
        if len(args) != 1 or x.dtype.kind not in kinds or out.dtype != x.dtype:
            return None
        call = _SUM if prim is R.sum_ else _MAX if prim is R.max_ else _MIN
        return Eqn(call, args, eqn.params, eqn.outs, eqn.uses, eqn.source)
    if prim is S.transpose and len(args) == 1:
        axes = eqn.params.get("axes")
        n = len(x.shape)
        if axes is None or tuple(axes) == tuple(range(n))[::-1]:
            return Eqn(_T, args, {}, eqn.outs, eqn.uses, eqn.source)
        return Eqn(_TRANSPOSE, (x, tuple(axes)), {}, eqn.outs, eqn.uses, eqn.source)
    if prim is E.power and len(args) == 2 and type(args[1]) in (int, float, np.float64) and args[1] == 2 \
            and x.dtype.kind in "fc" and out.dtype == x.dtype and set(eqn.params) <= {"out"}:
        # x ** 2 as NumPy's operator runs it (the square loop; np.power with 2 takes the general
        # pow loop, ~10x slower on W1's (64, 16, 256) norms): the same products x * x
        return Eqn(_SQUARE, (x,), eqn.params, eqn.outs, eqn.uses, eqn.source)
    if prim is S.reshape and len(args) == 1:
        return Eqn(_RESHAPE, (x, eqn.params["shape"]), {}, eqn.outs, eqn.uses, eqn.source)
    if prim is C.einsum:
        return _einsum_loop(eqn)
    if (prim is C.dot or prim is C.matmul) and len(args) == 2 and type(args[1]) is Var and args[1].shape != ():
        if len(x.shape) <= 2 and len(args[1].shape) <= 2:
            return Eqn(_DOT, args, {}, eqn.outs, eqn.uses, eqn.source)   # what both rules run on matrices
        if prim is C.matmul:
            return Eqn(_MATMUL, args, {}, eqn.outs, eqn.uses, eqn.source)
    return None


def spell(program):
    """Each reduction, transpose, reshape, product, einsum loop and square written as the NumPy call it runs, without the
    primitive's wrapper (the program's operands are arrays of known shape and dtype)."""
    eqns = [_spelled(eqn) or eqn for eqn in program.eqns]
    return Program(program.inputs, eqns, program.outputs)

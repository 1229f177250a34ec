"""The vectorizing pass of ``wg.jit``: a loop's isomorphic per-column equations become one batched
equation each.

A per-column loop staged by jit is thousands of small equations that repeat the same computation
on different columns. This pass finds them and replaces each set by one equation on a batch axis in
front, through the primitive's own batching rule (the rules vmap uses, primitives/_batching.py),
so a loop over 1,024 columns runs as a few dozen NumPy calls on (1024, ...) arrays.

Three steps, each linear in the number of equations (dictionaries keyed by signatures, never a
comparison of all pairs):

1. Write chains. A run of ``scatter_set`` (Buffer writes, ``x.at[].set``, ``x[i] = v``) or
   ``index_add`` (the backward pass of column reads) into one array at constant indices of one
   pattern becomes one scatter of the stacked values at index arrays (for ``scatter_set`` an
   overwritten element keeps only its last write; ``index_add`` adds repeated indices). A read of
   an intermediate state at elements no earlier write of the chain touched reads the chain's start
   instead (the Buffer's ``out[:, :, k] = softmax(out[:, :, k])``); a read of written elements ends
   the chain there.
2. Signatures. Every equation gets a signature: its primitive, its parameters (the integers of an
   index left out) and the signatures of its operands' producers (inputs by shape and dtype). Equal
   signatures are the same expression tree on different columns, so no member of a class depends on
   another (a dependency would make one signature a strict part of the other): each class is a set
   of independent equations. A running recurrence (``h = f(h, x[i])``) gives a new signature per
   step and stays sequential. Sums of many terms (cotangent accumulation, ``s = s + x[i]``) are
   flattened and summed per signature class of their terms, ``sum(stack(terms))``.
3. Batching. Classes of at least ``MIN_GROUP`` equations (``MIN_GROUP_SMALL`` for small results)
   become one equation each, emitted in order of depth (longest path from the inputs: equal for a
   class, larger for anything depending on it, so the new program is in dependency order). An
   operand that is the same for every member stays as it is; members' operands that are results of
   one batched class are that class's batched array (gathered by position where the order differs: a
   strided slice when regular); reads ``x[:, i, k]`` at varying integers become one read with index
   arrays (a slice when regular); a ``stack`` of one class's results is a gather and a transpose. A
   result still needed on its own (a consumer that was not batched, an output) is read from its
   batched array.

Everything else keeps its equations: the pass changes which NumPy calls compute the values, never
the values (up to the order of floating-point additions in the flattened sums).
"""
from __future__ import annotations

import itertools
import operator

import numpy as np

from ..core.errors import NeedsLoop
from ..core.trace import Tracer, close_level, open_level
from ..primitives._batching import elementwise_rule
from ..primitives.contractions import dot, matmul
from ..primitives.elementwise import add, multiply, subtract
from ..primitives.reductions import sum_
from ..primitives.scatter import scatter_set
from ..primitives.shape import broadcast_to, getitem, index_add, reshape, stack, transpose
from ._ir import (Eqn, Program, Var, _InPlace, cse, dce, fold_indexed_adds, producers_of, renamed, substitute,
                  use_counts)

# Smaller classes stay as they are: a batched call and its gathers cost about what a few small calls
# do. Classes of small results (a loop of few, short columns) are batched from two members up: their
# steps chain (each class feeds the next, so the gathers are paid once per chain), and each call
# saved is ~1 us against sub-microsecond arithmetic. W1 at N,W,R,B = 3,5,2,2: 132 -> 62 equations
# kept, jit 1.9-2.4x faster. Large results (W4's two 512x512 products) are never stacked for it.
MIN_GROUP = 8
MIN_GROUP_SMALL = 2
SMALL_RESULT = 1024   # elements


_ID = operator.attrgetter("id")
_USES = operator.attrgetter("uses")
_ARGS = operator.attrgetter("args")
_OUTS = operator.attrgetter("outs")


class _Unkeyed(Exception):
    """An operand the signature cannot describe: the equation is never grouped."""


class _Fresh:
    """New variables, numbered after every variable of the program."""

    def __init__(self, program):
        top = max(map(_ID, itertools.chain(program.inputs, itertools.chain.from_iterable(map(_OUTS, program.eqns)))),
                  default=-1)
        self.next = top + 1

    def __call__(self, shape, dtype):
        var = Var(self.next, tuple(shape), np.dtype(dtype))
        self.next += 1
        return var


class _Level:
    """What a batching rule asks of its level: one batch axis of ``size``."""

    nb = 1
    hidden_axes = 1
    staged = False

    def __init__(self, size):
        self.size = size


def _vars_in(x, out):
    t = type(x)
    if t is Var:
        out.append(x)
    elif t is tuple or t is list:
        for v in x:
            _vars_in(v, out)
    elif t is slice:
        _vars_in(x.start, out)
        _vars_in(x.stop, out)
        _vars_in(x.step, out)
    return out


def _eqn(prim, args, params, outs, source):
    uses = []
    for a in args:
        _vars_in(a, uses)
    for v in params.values():
        _vars_in(v, uses)
    return Eqn(prim, tuple(args), params, tuple(outs), tuple(uses), source)


def _is_int(i):
    t = type(i)
    if t is int:
        return True
    return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


def _const_index(index, shape, new_axes=False):
    """``index`` as a tuple of ints (made non-negative) and constant slices (and None where
    ``new_axes``), or None."""
    idx = index if type(index) is tuple else (index,)
    out = []
    axis = 0
    ndim = len(shape)
    for i in idx:
        t = type(i)
        if t is int and axis < ndim:   # the common case, inline
            n = shape[axis]
            if not -n <= i < n:
                return None
            out.append(i % n)
            axis += 1
            continue
        if i is None and new_axes:
            out.append(i)
            continue
        if axis >= ndim:
            return None
        if t is slice:
            if type(i.start) is Var or type(i.stop) is Var or type(i.step) is Var:
                return None
            out.append(i)
        elif _is_int(i):
            n = shape[axis]
            if not -n <= i < n:
                return None
            out.append(int(i) % n)
        else:
            return None
        axis += 1
    return tuple(out)


def _same_index(a, b):
    a = a if type(a) is tuple else (a,)
    b = b if type(b) is tuple else (b,)
    return len(a) == len(b) and all(x is y or (type(x) is type(y) and (type(x) is slice or _is_int(x)) and x == y)
                                    for x, y in zip(a, b))


def _pattern(idx):
    return tuple([(i.start, i.stop, i.step) if type(i) is slice else "new" if i is None else "int" for i in idx])


def _lane_axis(idx):
    """Where NumPy puts the axis of index arrays at the int positions of ``idx`` (ints and slices)."""
    ints = [a for a, i in enumerate(idx) if type(i) is not slice]
    return ints[0] if ints[-1] - ints[0] + 1 == len(ints) else 0


def _progression(values):
    """A slice equal to indexing with ``values`` (non-negative ints), or None."""
    if len(values) < 2:
        return None
    step = int(values[1]) - int(values[0])
    if step == 0 or np.any(np.diff(values) != step):
        return None
    start = int(values[0])
    stop = start + step * len(values)
    return slice(start, stop if stop >= 0 else None, step)


def _read_indexes(members):
    """For a class of reads at varying indices: each member's ``_const_index`` (None where it is not
    constant). None for any other class."""
    e0 = members[0]
    if e0.prim is not getitem or all(_same_index(e.params["index"], e0.params["index"]) for e in members):
        return None
    return [_const_index(e.params["index"], e.args[0].shape) for e in members]


def _read_columns(idxs):
    """For a class of reads at varying constant indices (``x[:, i, k]``), given their
    ``_read_indexes`` ``idxs``: the ints of their indices, one column (a value per member) per int
    position; [] where an index is not constant ints and slices of one pattern. None for any other
    class (``idxs`` None)."""
    if idxs is None:
        return None
    if any(i is None for i in idxs):
        return []
    pattern = _pattern(idxs[0])
    if any(_pattern(i) != pattern for i in idxs):
        return []
    return [[idx[a] for idx in idxs] for a, i in enumerate(idxs[0]) if type(i) is not slice]


def _lexsorted(keys):
    """The order that sorts lanes by ``keys`` (equal-length int columns, the first the most
    significant), or None when two lanes have equal keys."""
    keys = [np.asarray(k, np.int64) for k in keys]
    order = np.lexsort(keys[::-1])
    ranked = np.stack([k[order] for k in keys])
    if len(order) > 1 and not np.all(np.any(ranked[:, 1:] != ranked[:, :-1], axis=0)):
        return None
    return order


def _monotone(order):
    """Whether a permutation is the identity or its reverse."""
    steps = np.diff(order)
    return bool(np.all(steps == 1) or np.all(steps == -1))


def _descending(columns):
    """Whether integer ``columns`` (one per index position, a value per lane) count down through a
    grid of lanes: every varying one affine in the lanes with no positive step, one negative."""
    down = False
    for col in columns:
        col = np.asarray(col, np.int64)
        if np.all(col == col[0]):
            continue
        found = _affine(col)
        if found is None or any(step > 0 for _, step in found[1]):
            return False
        down = down or any(step < 0 for _, step in found[1])
    return down


# --- 1. write chains -------------------------------------------------------------------------------
def _is_zero(x):
    t = type(x)
    if t is int or t is float:   # the backward's zeroing writes: no NumPy call
        return x == 0
    if t is np.ndarray:
        return x.ndim == 0 and x.item() == 0
    return t is not Var and np.ndim(x) == 0 and np.asarray(x) == 0


def _uses_of(eqns, outputs, wanted):
    """How often each variable in ``wanted`` (ids) is used (an output counts twice), and its last user."""
    count, user = {}, {}
    for k, eqn in enumerate(eqns):
        for v in eqn.uses:
            i = v.id
            if i in wanted:
                count[i] = count.get(i, 0) + 1
                user[i] = k
    for v in outputs:
        if type(v) is Var and v.id in wanted:
            count[v.id] = count.get(v.id, 0) + 2
    return count, user


def _set_after_zero(eqns, outputs, writes):
    """``index_add(scatter_set(s, 0, i), v, i)`` is ``scatter_set(s, v, i)``: the backward pass of a
    Buffer read after a write (zero the written block, add the read's cotangent) as one write.
    ``writes``: the positions of the scatter_set and index_add equations. Returns the equations
    and those positions, both as they were when nothing changed."""
    made = {}
    for k in writes:
        eqn = eqns[k]
        if eqn.prim is scatter_set and type(eqn.args[1]) is not Var and _is_zero(eqn.args[1]):
            made[eqn.outs[0].id] = k
    if not made:
        return eqns, writes
    if not any(eqns[k].prim is index_add and type(eqns[k].args[0]) is Var and eqns[k].args[0].id in made for k in writes):
        return eqns, writes   # no add into a zeroed block (an in-place loop's backward zeroes, a Buffer's adds)
    count, _ = _uses_of(eqns, outputs, made)
    out, dropped = list(eqns), set()
    for k in writes:
        eqn = eqns[k]
        if eqn.prim is not index_add or type(eqn.args[0]) is not Var or count.get(eqn.args[0].id) != 1:
            continue
        z = made.get(eqn.args[0].id)
        if z is None or eqns[z].prim is not scatter_set or not _is_zero(eqns[z].args[1]):
            continue
        base = eqns[z].args[0]
        idx = _const_index(eqn.params["index"], eqn.args[0].shape)
        if idx is None or idx != _const_index(eqns[z].params["index"], eqn.args[0].shape):
            continue
        out[k] = _eqn(scatter_set, (base, eqn.args[1]), eqn.params, eqn.outs, eqn.source)
        dropped.add(z)
    if not dropped:
        return eqns, writes
    out = [eqn for k, eqn in enumerate(out) if k not in dropped]
    return out, _writes(out)


def _writes(eqns):
    """The positions of the scatter_set and index_add equations."""
    return [k for k, eqn in enumerate(eqns) if eqn.prim is scatter_set or eqn.prim is index_add]


def _users(eqns, wanted):
    """For each variable in ``wanted`` (a set of Vars), the positions of the equations that read it,
    by the variable's id, in program order, once per read. The equations that read none are passed
    over without a Python-level step (most of a loop's equations read no write's result)."""
    users = {}
    reading = itertools.compress(itertools.count(), map(operator.not_, map(wanted.isdisjoint, map(_USES, eqns))))
    for k in reading:
        for v in eqns[k].uses:
            if v in wanted:
                users.setdefault(v.id, []).append(k)
    return users


def _link(index, shape, adding):
    """``(_const_index(index, shape, adding), its _pattern)`` for a write of a chain (ints, one
    element or block per write, or, ``adding``, the same block each time: one of ints and Nones),
    else None. Its commonest case (ints and slices of ints) in one step over the index."""
    idx = index if type(index) is tuple else (index,)
    out, pattern = [], []
    axis, ndim = 0, len(shape)
    for i in idx:
        t = type(i)
        if axis >= ndim:
            break
        if t is int:
            n = shape[axis]
            if not -n <= i < n:
                return None
            out.append(i % n)
            pattern.append("int")
        elif t is slice and (i.start is None or type(i.start) is int) and (i.stop is None or type(i.stop) is int) \
                and (i.step is None or type(i.step) is int):
            out.append(i)
            pattern.append((i.start, i.stop, i.step))
        else:
            break
        axis += 1
    else:
        return (tuple(out), tuple(pattern)) if "int" in pattern else None
    idx = _const_index(index, shape, new_axes=adding)
    if idx is not None and (None in idx) + (int in map(type, idx)) == 1:
        return idx, _pattern(idx)
    return None


def _collapse_writes(eqns, outputs, fresh):
    writes = _writes(eqns)
    if not writes:
        return eqns
    eqns, writes = _set_after_zero(eqns, outputs, writes)
    out_ids = {v.id for v in outputs if type(v) is Var}
    links, patterns = {}, {}
    states = set()
    for k in writes:
        eqn = eqns[k]
        base = eqn.args[0]
        if type(base) is Var or type(base) is np.ndarray:
            found = _link(eqn.params["index"], base.shape, eqn.prim is index_add)
            if found is not None:
                links[k], patterns[k] = found
                states.add(eqn.outs[0])
    if not states:
        return eqns
    users = _users(eqns, states)
    taken = set()
    replaced = {}
    removed = []
    made_by = _made_by(eqns)
    for start in links:
        if start in taken:
            continue
        first = eqns[start]
        prim, base, pattern = first.prim, first.args[0], patterns[start]
        written, applied = None, 0   # the elements the first ``applied`` writes of the chain touch, made when read
        chain, reads = [start], []
        k = start
        while True:
            state = eqns[k].outs[0]
            if state.id in out_ids:
                break
            nxt, here = None, []
            for j in users.get(state.id, ()):
                eqn = eqns[j]
                if eqn.prim is prim and eqn.args[0] is state and j in links and nxt in (None, j) \
                        and patterns[j] == pattern and state not in eqn.uses[1:]:
                    nxt = j
                    continue
                if eqn.prim is getitem and eqn.args[0] is state:
                    idx = _const_index(eqn.params["index"], state.shape)
                    if idx is not None:
                        if written is None:
                            written = np.zeros(base.shape, bool)
                        while applied < len(chain):
                            written[links[chain[applied]]] = True
                            applied += 1
                        if not written[idx].any():
                            here.append(j)
                            continue
                nxt = None
                break
            reads.extend(here)  # reads of elements no write of the chain touched so far: of its start
            if nxt is None:
                break
            chain.append(nxt)
            k = nxt
        taken.update(chain)
        if len(chain) < 2:
            continue
        new = _one_scatter(*_in_rounds(eqns, chain, links), links, fresh, made_by)
        if new is None:
            continue
        removed.extend(chain[:-1])
        replaced[chain[-1]] = new
        uses = (base,) if type(base) is Var else ()
        for j in reads:   # a getitem at a constant index: its only Var is the array read
            eqn = eqns[j]
            replaced[j] = (Eqn(getitem, (base,), eqn.params, eqn.outs, uses, eqn.source),)
    if not replaced:
        return eqns
    keep = bytearray(b"\x01") * len(eqns)   # the equations kept as they are, copied between the replaced ones
    for k in removed:
        keep[k] = 0
    out, start = [], 0
    for k in sorted(replaced):
        out += itertools.compress(eqns[start:k], keep[start:k])
        out += replaced[k]
        start = k + 1
    out += itertools.compress(eqns[start:], keep[start:])
    return out


def _made_by(eqns):
    """A function giving ``eqns``' producers by variable id, computed on first use."""
    found = []

    def producers():
        if not found:
            found.append(producers_of(Program([], eqns, [])))
        return found[0]
    return producers


def _form(v, producers, depth=3):
    """The primitives that made ``v``, ``depth`` levels up: equal for the same computation in two
    trips of a loop, different for two computations (a dot's cotangent and a norm's)."""
    eqn = producers.get(v.id) if type(v) is Var else None
    if eqn is None or not depth:
        return None
    return eqn.prim.name, tuple(_form(a, producers, depth - 1) for a in eqn.args)


def _chain_keys(links, chain):
    """The element each write of a chain lands on: its index's ints (``links``: the constant indices,
    of one pattern along a chain, so the ints' places are read off its first)."""
    at = [a for a, i in enumerate(links[chain[0]]) if type(i) is not slice]
    if len(at) == 1:
        a = at[0]
        return [(links[k][a],) for k in chain]
    if not at:
        return [()] * len(chain)
    get = operator.itemgetter(*at)
    return [get(links[k]) for k in chain]


def _computations(links, chain, values, producers):
    """p > 1 when each trip of a loop adds p different computations into one position of the chain
    (the backward of reading a column p times: a dot's cotangent and a norm's): its positions come
    in runs of equal ones whose values' forms repeat with period p. Else 1 (one read per trip, of
    a column the next trips read again: the scatter's grid sums those)."""
    keys = _chain_keys(links, chain)
    n = 1
    while n < len(keys) and keys[n] == keys[0]:
        n += 1
    if n == 1 or len(keys) % n or any(keys[s + r] != keys[s] for s in range(0, len(keys), n) for r in range(1, n)):
        return 1
    forms = [_form(v, producers) for v in values[:n]]
    for p in range(2, n + 1):
        if n % p == 0 and None not in forms[:p] and len(set(forms[:p])) == p \
                and all(forms[q] == forms[q % p] for q in range(n)):
            break
    else:
        return 1
    return p if all(_form(v, producers) == forms[q % p] for q, v in enumerate(values)) else 1


def _in_rounds(eqns, chain, links):
    """``(eqns, chain)`` for ``_one_scatter``: an ``index_add`` chain that adds each position's terms
    in one run (``for b: for t: z[t, b] = np.dot(ys[0][:, b], ys[t][:, b])``: ys[0]'s column b
    gets the terms of every step, then column b + 1) and adds one term twice in a row (the column
    read twice in a trip, ``np.dot(u, u)`` at t = 0) is taken round by round: the r-th term of every
    run, then the next, a doubled term kept doubled. That is the order the loop with t outside adds
    them in (sums do not depend on it but for rounding), which ``_adjacent_adds_split`` and the
    grids then read as they read that loop's. Any other chain is returned as it is."""
    if eqns[chain[0]].prim is not index_add:
        return eqns, chain
    keys = _chain_keys(links, chain)
    runs, seen, doubled = [], set(), False   # runs: per position, its terms (each a list of writes)
    for i, k in enumerate(chain):
        if i and keys[i] == keys[i - 1]:
            if eqns[k].args[1] is eqns[chain[i - 1]].args[1]:
                runs[-1][-1].append(k)
                doubled = True
            else:
                runs[-1].append([k])
            continue
        if keys[i] in seen:
            return eqns, chain
        seen.add(keys[i])
        runs.append([[k]])
    if not doubled or len(runs) < 2 or len(runs[0]) < 2 or any(len(r) != len(runs[0]) for r in runs):
        return eqns, chain
    ordered = [k for u in range(len(runs[0])) for r in runs for k in r[u]]
    head, tail, last = eqns[ordered[0]], eqns[ordered[-1]], eqns[chain[-1]]
    base = eqns[chain[0]].args[0]
    return _Replaced(eqns, {ordered[0]: _eqn(index_add, (base, head.args[1]), head.params, head.outs, head.source),
                            ordered[-1]: _eqn(index_add, tail.args, tail.params, last.outs, tail.source)}), ordered


def _one_scatter(eqns, chain, links, fresh, made_by, split=True):
    """The chain's writes as one scatter (the last write of an element wins for scatter_set); an
    ``index_add`` chain on no grid perhaps as two or more on grids (``split``)."""
    first, last = eqns[chain[0]], eqns[chain[-1]]
    prim, base = first.prim, first.args[0]
    if prim is scatter_set:
        seen, kept = set(), []
        for k, key in zip(reversed(chain), reversed(_chain_keys(links, chain))):
            if key not in seen:
                seen.add(key)
                kept.append(k)
        kept.reverse()
    else:
        kept = chain
    idx0 = links[chain[0]]
    # A loop body that reads the same column p times adds p cotangents per trip at one position
    # (a dot's and a norm's). Each computation's values form a round (one class's members, in
    # order), stacked apiece and added, so the rounds batch as whole classes, not one element
    # read per member interleaved into one stack.
    runs = _computations(links, kept, [eqns[k].args[1] for k in kept], made_by()) \
        if prim is index_add and None not in idx0 and len(kept) > 1 and links[kept[0]] == links[kept[1]] else 1
    rounds = [kept[r::runs] for r in range(runs)]
    kept = rounds[0]
    if None not in idx0:
        # Each kept write lands on its own elements (adds: their order is that of a sum's terms),
        # so a chain written in reverse order of position (a backward pass's) is taken forward:
        # its values are then stacked as the forward classes hold them, its index a forward slice.
        if len(kept) > 1 and _descending([[links[k][a] for k in kept] for a, i in enumerate(idx0) if type(i) is not slice]):
            rounds = [r[::-1] for r in rounds]
            kept = rounds[0]
    target = np.broadcast_to(np.zeros((), bool), base.shape)[idx0].shape
    values = [eqns[k].args[1] for k in kept]
    source = last.source
    if None in idx0:  # adds into one block: add the values first
        if not all(type(v) is Var and v.shape == values[0].shape and v.dtype == values[0].dtype for v in values):
            return None
        stacked = fresh((len(values),) + values[0].shape, values[0].dtype)
        total = fresh(values[0].shape, values[0].dtype)
        return [_eqn(stack, values, {"axis": 0}, (stacked,), source),
                _eqn(sum_, (stacked,), {"axis": (0,), "keepdims": False}, (total,), source),
                _eqn(prim, (base, total), {"index": idx0}, last.outs, source)]
    positions = [a for a, i in enumerate(idx0) if type(i) is not slice]
    columns = [np.array([links[k][a] for k in kept], np.intp) for a in positions]
    index = list(idx0)
    regular = _progression(columns[0]) if len(positions) == 1 else None
    for a, col in zip(positions, columns):
        index[a] = regular if regular is not None else col
    index = tuple(index)
    lane = sum(1 for i in idx0[:positions[0]]) if regular is not None else _lane_axis(idx0)
    # scatter_set's kept writes land on distinct elements: as many as the base has, they overwrite it
    whole = prim is scatter_set and len(kept) * int(np.prod(target, dtype=np.int64)) == int(np.prod(base.shape, dtype=np.int64))
    if all(type(v) is not Var for v in values):
        arrays = [np.asarray(v) for v in values]
        if prim is not scatter_set or any(a.ndim or a.dtype != arrays[0].dtype or a != arrays[0] for a in arrays):
            return None
        if whole:   # the backward's "zero the written elements", written everywhere: zeros
            return [_eqn(broadcast_to, (np.asarray(arrays[0], base.dtype),), {"shape": base.shape}, last.outs, source)]
        return [_eqn(prim, (base, values[0]), {"index": index}, last.outs, source)]
    every = [eqns[k].args[1] for r in rounds for k in r]
    if not all(type(v) is Var and v.shape == target and v.dtype == values[0].dtype for v in every):
        return None
    shape = target[:lane] + (len(values),) + target[lane:]
    stacked = fresh(shape, values[0].dtype)
    if runs > 1:
        # the rounds stacked lanes first (each one class's batched result), added, the lanes then
        # moved to their axis: the scatter below stacks nothing more
        first = (len(values),) + target
        made, total = [], None
        for r in rounds:
            out = fresh(first, values[0].dtype)
            made.append(_eqn(stack, [eqns[k].args[1] for k in r], {"axis": 0}, (out,), source))
            if total is not None:
                out, term = fresh(first, values[0].dtype), out
                made.append(_eqn(add, (total, term), {}, (out,), source))
            total = out
        axes = tuple(range(1, lane + 1)) + (0,) + tuple(range(lane + 1, len(shape)))
        made.append(_eqn(transpose, (total,), {"axes": axes}, (stacked,), source))
    else:
        made = [_eqn(stack, values, {"axis": lane}, (stacked,), source)]
    if whole and regular is None:   # every element written once, at positions affine in the lanes
        plan = _grid_add_plan(index, positions, columns, base.shape, lane)
        if plan is not None and not plan.summed:   # the values copied through one strided view of zeros
            zeros = np.broadcast_to(np.zeros((), base.dtype), base.shape)
            return [*made, _eqn(GRID_ADD, (zeros, stacked), {"plan": plan}, last.outs, source)]
    if prim is index_add and regular is None:
        plan = _grid_add_plan(index, positions, columns, base.shape, lane)
        if plan is not None:
            return [*made, _eqn(GRID_ADD, (base, stacked), {"plan": plan}, last.outs, source)]
        merged = _adjacent_adds_split(eqns, chain, links, fresh, made_by) if runs == 1 and split else None
        if merged is None and runs == 1 and split:
            merged = _interleaved_split(eqns, chain, links, fresh, made_by)
        if merged is not None:
            return merged
        return [*made, _eqn(SCATTER_ADD, (base, stacked), _segments(index, positions, columns, base.shape, lane),
                     last.outs, source)]
    return [*made, _eqn(prim, (base, stacked), {"index": index}, last.outs, source)]


def _adjacent_adds_split(eqns, chain, links, fresh, made_by):
    """An ``index_add`` chain whose positions do not make a grid only because a few trips add twice
    at one position in a row (``np.dot(u, u)`` where a loop's two reads are one column: seed 001's
    step t = 0), as two scatters: the first add of each run, then the others. Each is one class's
    members (or a run of them) on a grid, scattered with ``grid_add`` (or through a slice). None
    where that does not give grids either."""
    keys = _chain_keys(links, chain)
    if all(a != b for a, b in zip(keys, keys[1:])):
        return None
    rounds, start = [], 0
    for end in range(1, len(chain) + 1):
        if end < len(chain) and keys[end] == keys[start]:
            continue
        for r, k in enumerate(chain[start:end]):
            if r == len(rounds):
                rounds.append([])
            rounds[r].append(k)
        start = end
    first, last = eqns[chain[0]], eqns[chain[-1]]
    base, made = first.args[0], []
    for r, sub in enumerate(rounds):
        head, tail = eqns[sub[0]], eqns[sub[-1]]
        out = last.outs if r == len(rounds) - 1 else (fresh(base.shape, base.dtype),)
        if len(sub) < 2:
            return None
        replaced = {sub[0]: _eqn(index_add, (base, head.args[1]), head.params, head.outs, head.source),
                    sub[-1]: _eqn(index_add, tail.args, tail.params, out, tail.source)}
        got = _one_scatter(_Replaced(eqns, replaced), sub, links, fresh, made_by)
        if got is None or got[-1].prim is SCATTER_ADD:   # a grid, or a slice of positions in order
            return None
        made += got
        base = out[0]
    return made


def _interleaved_split(eqns, chain, links, fresh, made_by):
    """An ``index_add`` chain on no grid whose writes, taken every p-th, are p chains on grids: a
    trip that reads one array at two columns (seed 001 glued first, ``np.dot(Y[:, b], Y[:, t*B +
    b])``) adds two cotangents per trip into one array, at b (repeated by every step: summed by the
    grid) and at t*B + b (every column once), in one class. As one chain its positions overlap on
    no grid (one sorted scatter-add of every lane's product, 4x the hand-written gradient); each
    stream is a grid. None where some stream is not."""
    for p in (2, 3, 4):
        if len(chain) % p or len(chain) < 2 * p:
            continue
        first, last = eqns[chain[0]], eqns[chain[-1]]
        base, made = first.args[0], []
        for r in range(p):
            sub = chain[r::p]
            head, tail = eqns[sub[0]], eqns[sub[-1]]
            out = last.outs if r == p - 1 else (fresh(base.shape, base.dtype),)
            replaced = {sub[0]: _eqn(index_add, (base, head.args[1]), head.params, head.outs, head.source),
                        sub[-1]: _eqn(index_add, tail.args, tail.params, out, tail.source)}
            got = _one_scatter(_Replaced(eqns, replaced), sub, links, fresh, made_by, split=False)
            if got is None or got[-1].prim is SCATTER_ADD:
                break
            made += got
            base = out[0]
        else:
            return made
    return None


class _Replaced:
    """``eqns`` with a few equations replaced, by position (what ``_one_scatter`` reads of a chain)."""

    __slots__ = ("eqns", "replaced")

    def __init__(self, eqns, replaced):
        self.eqns, self.replaced = eqns, replaced

    def __getitem__(self, k):
        return self.replaced.get(k) or self.eqns[k]


def _scatter_add(base, values, index, lane, order, starts):
    out = np.array(base, copy=True)
    if order is not None:
        rows = np.moveaxis(values, lane, 0)[order]  # the lanes in front, sorted by position
        if type(starts) is int:  # each position repeated ``starts`` times
            rows = rows.reshape((-1, starts) + rows.shape[1:]).sum(axis=1)
        else:
            rows = np.add.reduceat(rows, starts, axis=0)
        values = np.moveaxis(rows, 0, lane)
    out[index] += values
    return out


# ``base`` with ``values`` added at index arrays: the values of a repeated position are summed first
# (sorted by position, one reduceat), then one fancy-index add. np.add.at, which index_add uses for
# index arrays, takes milliseconds for the few thousand columns of a loop's cotangents.
SCATTER_ADD = _InPlace("scatter_add", _scatter_add)


def _segments(index, positions, columns, shape, lane):
    """The parameters of SCATTER_ADD: the index with each position once, and how to sum the rest."""
    dims = [shape[a] for a in positions]
    flat = np.ravel_multi_index(columns, dims)
    unique, inverse = np.unique(flat, return_inverse=True)

    def index_of(cols):
        out = list(index)
        for a, col in zip(positions, cols):
            out[a] = np.asarray(col, np.intp)
        return tuple(out)

    if len(unique) == len(flat):
        return {"index": index_of(columns), "lane": lane, "order": None, "starts": None}
    order = np.argsort(inverse, kind="stable")
    starts = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0])
    if len(flat) % len(unique) == 0 and np.array_equal(starts, np.arange(0, len(flat), len(flat) // len(unique))):
        starts = len(flat) // len(unique)  # equal repeats: a reshape and a sum (reduceat is slow)
    return {"index": index_of(np.unravel_index(unique, dims)), "lane": lane, "order": order, "starts": starts}


# --- 2. signatures, and flattened sums ------------------------------------------------------------
def _scalar_key(x):
    t = type(x)
    if t is float and x != x:
        return ("nan",)
    return (t, x)


class _Signatures:
    """Signatures and depths of equations, in program order; sums of many terms are flattened."""

    def __init__(self, inputs, fresh, cut=None):
        self.fresh = fresh
        cut = len(inputs) if cut is None else cut   # inputs on either side of the cut are never alike
        self.key = {v.id: ("in", v.shape, v.dtype.str, k < cut) for k, v in enumerate(inputs)}
        self.depth = {v.id: 0 for v in inputs}
        self.ids = {}
        self.slices = {}   # (start, stop, step) of ints and Nones -> the slice's key
        self.eqns, self.sigs, self.depths = [], [], []
        self.out_ids = []   # each equation's (first) result's id

    def operand(self, x, param=False):
        """The key of an operand; arrays by shape and dtype (members' differing values are stacked),
        except in parameters (``param``), which a batched equation shares: there by their values."""
        t = type(x)
        if t is Var:
            return self.key[x.id]
        if (t is int or t is float) and not param:
            return ("number",)  # x * (i + 1): members' differing numbers become an array
        if t is int or t is float or t is bool or t is complex or t is str or x is None or x is Ellipsis:
            return _scalar_key(x)
        if t is tuple or t is list:
            return (t, tuple(self.operand(v, param) for v in x))
        if t is slice:
            return ("slice", self.operand(x.start), self.operand(x.stop), self.operand(x.step))
        if t is np.ndarray:
            if param:
                return ("array", x.shape, x.dtype.str, x.tobytes()) if x.size <= 4096 else ("id", id(x))
            return ("array", x.shape, x.dtype.str)
        if isinstance(x, np.generic):   # a folded constant (a cotangent of a linear step): stacked like arrays
            return ("scalar", x.dtype.str, x.item()) if param else ("scalar", x.dtype.str)
        if isinstance(x, (np.dtype, type)) or callable(x):
            return ("id", id(x))
        raise _Unkeyed

    def index(self, index):
        """A getitem index with its integers left out (they vary along a loop)."""
        idx = index if type(index) is tuple else (index,)
        out = []
        for i in idx:
            t = type(i)
            if t is int:
                out.append("int")
            elif t is slice:   # a slice of Nones and ints (most): its key made once per run
                a, b, c = i.start, i.stop, i.step
                if (a is None or type(a) is int) and (b is None or type(b) is int) and (c is None or type(c) is int):
                    known = self.slices.get((a, b, c))
                    if known is None:
                        known = self.slices[a, b, c] = self.operand(i, True)
                    out.append(known)
                else:
                    out.append(self.operand(i, True))
            else:
                out.append("int" if _is_int(i) else self.operand(i, True))
        return tuple(out)

    def record(self, eqn):
        k = len(self.eqns)
        self.eqns.append(eqn)
        keys, depths = self.key, self.depth
        try:
            params = eqn.params
            if eqn.prim is getitem:
                pkey = self.index(params["index"])
            elif params:   # operand(v, True), with its commonest cases (ints, bools, strings, None) inline
                pkey = tuple([(name, (t, v) if (t := type(v)) is int or t is bool or t is str or v is None
                               else self.operand(v, True)) for name, v in params.items()])
            else:
                pkey = ()
            args = eqn.args
            if len(args) == 2 and type(args[0]) is Var and type(args[1]) is Var:   # the commonest: no list made
                key = (eqn.prim, pkey, (keys[args[0].id], keys[args[1].id]))
            elif len(args) == 1 and type(args[0]) is Var:
                key = (eqn.prim, pkey, (keys[args[0].id],))
            else:
                key = (eqn.prim, pkey, tuple([keys[a.id] if type(a) is Var else self.operand(a) for a in args]))
        except _Unkeyed:
            key = ("eqn", k)
        sig = self.ids.setdefault(key, len(self.ids))
        depth = 0
        for v in eqn.uses:
            d = depths[v.id]
            if d > depth:
                depth = d
        depth += 1
        outs = eqn.outs
        if len(outs) == 1:
            i = outs[0].id
            keys[i] = ("sig", sig, 0)
            depths[i] = depth
        else:
            for i, o in enumerate(outs):
                keys[o.id] = ("sig", sig, i)
                depths[o.id] = depth
            i = outs[0].id
        self.out_ids.append(i)
        self.sigs.append(sig)
        self.depths.append(depth)


def _sums(eqns, outputs):
    """The ``add`` equations that are inner nodes of a larger sum: used once, by an add of the same
    shape and dtype (floating point). One walk: an add's uses all come after it."""
    count, user = {}, {}   # for each add's result: how often it is used (an output counts twice), its last user
    adds = []
    for k, eqn in enumerate(eqns):
        for v in eqn.uses:
            i = v.id
            if i in count:
                count[i] += 1
                user[i] = k
        if eqn.prim is add:
            count[eqn.outs[0].id] = 0
            if not eqn.params and eqn.outs[0].dtype.kind in "fc":
                adds.append(k)
    for v in outputs:
        if type(v) is Var and v.id in count:
            count[v.id] += 2
    inner = {}
    for k in adds:
        o = eqns[k].outs[0]
        if count[o.id] == 1:
            parent = eqns[user[o.id]]
            p = parent.outs[0]
            if parent.prim is add and not parent.params and p.shape == o.shape and p.dtype == o.dtype:
                inner[o.id] = k
    return inner


def _signatures(eqns, inputs, outputs, fresh, cut=None):
    sigs = _Signatures(inputs, fresh, cut)
    inner = _sums(eqns, outputs)
    inner_eqns = set(inner.values())
    for k, eqn in enumerate(eqns):
        if k in inner_eqns:
            continue
        if eqn.prim is add and not eqn.params and any(type(a) is Var and a.id in inner for a in eqn.args):
            _flatten_sum(eqn, eqns, inner, sigs)
            continue
        sigs.record(eqn)
    return sigs


def _flatten_sum(root, eqns, inner, sigs):
    """A sum of many terms: the terms of one signature are summed as ``sum(stack(terms))``."""
    terms, nodes, todo = [], [], [root]
    while todo:
        eqn = todo.pop()
        nodes.append(eqn)
        for a in reversed(eqn.args):
            if type(a) is Var and a.id in inner:
                todo.append(eqns[inner[a.id]])
            else:
                terms.append(a)
    out = root.outs[0]
    parts = {}
    for t in terms:
        if type(t) is Var and t.shape == out.shape and t.dtype == out.dtype:
            parts.setdefault(sigs.key[t.id][:2], []).append(t)
        else:
            parts[("term", len(parts))] = [t]
    if all(len(p) < 2 for p in parts.values()):  # nothing to batch: the sum as it was
        for eqn in sorted(nodes[1:], key=lambda e: e.outs[0].id):
            sigs.record(eqn)
        sigs.record(root)
        return
    fresh, source = sigs.fresh, root.source
    partials = []
    for part in parts.values():
        if len(part) == 1:
            partials.append(part[0])
            continue
        stacked = fresh((len(part),) + out.shape, out.dtype)
        sigs.record(_eqn(stack, part, {"axis": 0}, (stacked,), source))
        total = out if len(parts) == 1 else fresh(out.shape, out.dtype)
        sigs.record(_eqn(sum_, (stacked,), {"axis": (0,), "keepdims": False}, (total,), source))
        partials.append(total)
    acc = partials[0]
    for k, p in enumerate(partials[1:]):
        result = out if k == len(partials) - 2 else fresh(out.shape, out.dtype)
        sigs.record(_eqn(add, (acc, p), {}, (result,), source))
        acc = result


# --- 3. batching ----------------------------------------------------------------------------------
def _rule(prim):
    if prim.batch is not None:
        return prim.batch
    impl = prim.impl   # a ufunc, or a rule's elementwise constant (abs's sign, norm's zero mask)
    return elementwise_rule if isinstance(impl, np.ufunc) or getattr(impl, "elementwise", False) else None


def _groupable(eqn):
    prim = eqn.prim
    if getattr(prim, "multiple_results", True) or not hasattr(prim, "batch") or _rule(prim) is None:
        return False
    for v in eqn.params.values():
        if _vars_in(v, []):
            return False
    return True


def _source(source, n):
    note = f"vectorized x{n}"
    if source is None:
        return None, 0, note
    filename, line, inner = source
    return filename, line, f"{note}, {inner}" if inner else note


class _Emitter:
    """Writes the new program: batched classes, the equations left as they were, element reads."""

    def __init__(self, fresh, trace_type):
        self.fresh = fresh
        self.trace_type = trace_type
        self.out = []
        self.batched = {}   # class -> its batched result
        self.member = {}    # var id of a batched member's result -> (class, position)
        # the same, by var id as arrays (-1: no class), for whole operand columns at once: every
        # member's result is a variable made before this pass batches anything
        self.class_of = np.full(fresh.next, -1, np.intp)
        self.position_of = np.zeros(fresh.next, np.intp)
        self.read = set()   # those already read back on their own
        self.stacks = {}    # ids of the variables an emitted stack of distinct operands holds -> it
        self.decided = set()  # classes whose members' order their operands decided (see _oriented)
        self.by_memory = False  # a loop ran a grid of columns out of memory order (see _memory_order)

    def need(self, v):
        """Make the result of a batched member available on its own (read its element)."""
        info = self.member.get(v.id)
        if info is not None and v.id not in self.read:
            self.read.add(v.id)
            batched = self.batched[info[0]]
            self.out.append(Eqn(getitem, (batched,), {"index": info[1]}, (v,), (batched,), None))

    def single(self, eqn):
        if eqn.prim is stack and self._stack_of_one_class(eqn):
            return
        for v in eqn.uses:
            self.need(v)
        self.out.append(eqn)

    def group(self, gid, members, ids):
        """Batch the class ``gid`` of ``members``, whose results' ids are the array ``ids``."""
        made = []
        columns = list(zip(*map(_ARGS, members)))   # the members' q-th operands, for each q
        found = {}   # q -> _positions of columns[q], computed once for _oriented and _batch
        idxs = _read_indexes(members) if len(members) >= 2 else None   # once for the three
        read = _read_columns(idxs)
        order = self._memory_order(gid, members, columns, found, read)
        if order is None and self._oriented(gid, members, columns, found, read):
            order = np.arange(len(members) - 1, -1, -1)
        if order is not None and not np.array_equal(order, np.arange(len(order))):
            members = [members[k] for k in order.tolist()]
            columns = [[c[k] for k in order.tolist()] for c in columns]
            found = {q: (f if f is None else (f[0], f[1][order])) for q, f in found.items()}
            ids = ids[order]
            if idxs is not None:
                idxs = [idxs[k] for k in order.tolist()]
        result = self._batch(members, columns, found, made, idxs)
        if result is None:
            for eqn in members:
                self.single(eqn)
            return
        self.out.extend(made)
        for eqn in made:
            if eqn.prim is stack and eqn.params.get("axis") == 0 and all(type(a) is Var for a in eqn.args):
                self.stacks.setdefault(tuple(a.id for a in eqn.args), eqn.outs[0])
        self.batched[gid] = result
        n = len(ids)
        self.member.update(zip(ids.tolist(), zip(itertools.repeat(gid, n), range(n))))
        self.class_of[ids] = gid
        self.position_of[ids] = np.arange(n)

    def _oriented(self, gid, members, columns, found, read):
        """The members in the order that reads their operands forward. A class's members are in
        program order, and the backward pass runs backward: its classes would read the forward
        classes' arrays, and the cotangents' elements, in reverse (reversed views, and strides a
        matmul cannot hand to BLAS). The members are independent, so any order computes the same:
        reversed when every operand that tells an order (a read's integers along the grid of lanes,
        the positions in a class whose order was so decided, distinct variables by age) goes down
        and none goes up. A class with no such operand keeps its order, and does not count.
        True when the members are to be taken reversed; ``found`` receives the ``_positions`` of the
        operand columns it looked at; ``read``: ``_read_columns`` of the members."""
        if len(members) < 2:
            return False
        down = up = False
        if read is not None:
            if not read:
                return False
            columns = read
            down = _descending(columns)
            up = not down and _descending([col[::-1] for col in columns])
        for q, xs in enumerate(columns):
            x0 = xs[0]
            if type(x0) is not Var or all(x is x0 for x in xs):
                continue
            first = self.member.get(x0.id)
            if first is not None and first[0] not in self.decided:
                continue   # what follows would skip it too: its positions tell no order
            ids = self._ids(xs)
            got = found[q] = self._positions(xs, ids)
            if got is not None:
                if got[0] not in self.decided:
                    continue
                steps = np.diff(got[1])
            else:
                if ids is None or np.any(self.class_of[ids[ids < len(self.class_of)]] >= 0):
                    continue
                steps = np.diff(ids.astype(np.int64))
            up = up or bool(np.all(steps >= 0) and np.any(steps > 0))   # repeats (a value read twice) allowed
            down = down or bool(np.all(steps <= 0) and np.any(steps < 0))
        if up != down:
            self.decided.add(gid)
        return down and not up

    def _memory_order(self, gid, members, columns, found, read):
        """The members sorted by where they read, when a loop ran a grid of columns in an order other
        than memory's: ``for b: for t: np.dot(ys[0][:, b], ys[t][:, b])`` reads the lanes (b, t) of
        the steps' (t, b) columns, so its batched reads would be transposing copies and gathers,
        and its scatter into ``z[t, b]`` a transpose. A class of reads of one batched class's
        members that is neither in memory order nor reversed is taken in memory order (the base's
        position, then the index) and sets ``by_memory``; from then on every class is ordered so,
        or by its operands' positions (``_by_operands``), and the program is the one a loop in
        memory order gives. None: ``_oriented`` decides. ``read``: ``_read_columns`` of the members."""
        if len(members) < 2:
            return None
        if read is not None:
            if not read:
                return None
            keys = list(read)   # a copy: _oriented reads ``read`` too
            bases = [e.args[0] for e in members]
            at = self._positions(bases)
            if at is not None:
                keys.insert(0, at[1])
            elif not self.by_memory or not all(b is bases[0] for b in bases):
                return None
            order = _lexsorted(keys)
            if order is None or (not self.by_memory and (at is None or _monotone(order))):
                return None
            self.by_memory = True
        elif self.by_memory:
            order = self._by_operands(columns, found)
            if order is None:
                return None
        else:
            return None
        self.decided.add(gid)
        return order

    def _by_operands(self, columns, found):
        """The members sorted by their operands' positions in their classes (all distinct keys),
        the operand with the most distinct positions first (the dot's column of step t over the
        column of step 0 it is paired with). None where no operand is a batched class's."""
        keys = []
        for q, xs in enumerate(columns):
            if type(xs[0]) is not Var or all(x is xs[0] for x in xs):
                continue
            got = found[q] = self._positions(xs)
            if got is not None:
                keys.append((-len(np.unique(got[1])), q, got[1]))
        if not keys:
            return None
        keys.sort(key=lambda k: k[:2])
        return _lexsorted([k[2] for k in keys])

    # -- operands --
    @staticmethod
    def _ids(xs):
        """The ids of ``xs`` as an array, or None when one of them is not a Var."""
        types = set(map(type, xs))
        if len(types) != 1 or Var not in types:
            return None
        return np.fromiter(map(_ID, xs), np.intp, len(xs))

    def _positions(self, xs, ids=None):
        """(class, positions) when every ``xs`` is the result of one batched class, else None.
        ``ids``: ``_ids(xs)`` when known."""
        if type(xs[0]) is not Var:
            return None
        first = self.member.get(xs[0].id)
        if first is None:
            return None
        if ids is None:
            ids = self._ids(xs)
        if ids is None or ids.max() >= len(self.class_of):
            return None
        gid = first[0]
        if np.any(self.class_of[ids] != gid):
            return None
        return gid, self.position_of[ids]

    def _take(self, batched, positions, made, source):
        n = len(positions)
        if n == batched.shape[0] and np.array_equal(positions, np.arange(n)):
            return batched
        regular = _progression(positions)
        index = (regular if regular is not None else positions,)
        out = self.fresh((n,) + batched.shape[1:], batched.dtype)
        made.append(_eqn(getitem, (batched,), {"index": index}, (out,), source))
        return out

    def _operand(self, xs, made, source, dtype=None, found=False):
        """(operand, batched) for the members' operands ``xs``; None where they cannot be batched.
        ``dtype``: the members' result dtype, which differing Python numbers are cast to (they are
        weakly typed: ``x * 2`` keeps the dtype of ``x``); ``found``: ``_positions(xs)`` when known."""
        x0 = xs[0]
        t0 = type(x0)
        if all(x is x0 or (type(x) is t0 and t0 in (int, float, bool, complex) and x == x0) for x in xs):
            if t0 is Var:
                self.need(x0)
            return x0, False
        if found is False:
            found = self._positions(xs)
        if found is not None:
            return self._take(self.batched[found[0]], found[1], made, source), True
        if all(type(x) is int or type(x) is float for x in xs):
            if dtype is None or dtype.kind not in "fc":
                return None
            return np.array(xs, dtype), True
        if all(type(x) is not Var for x in xs):
            arrays = [np.asarray(x) for x in xs]
            if any(a.shape != arrays[0].shape or a.dtype != arrays[0].dtype for a in arrays):
                return None
            if all(np.array_equal(a, arrays[0]) for a in arrays):
                return x0, False
            return np.stack(arrays), True
        got = self._stack_distinct(xs, made, source)
        if got is None:
            return None
        return self._take(got[0], got[1], made, source), True

    def _stack_distinct(self, xs, made, source):
        """Members' operands that are different variables: each distinct one stacked once, and the
        members' positions in that stack (a read of ``a[:, i]`` and ``b[:, i]`` stacks ``a`` and ``b``)."""
        x0 = xs[0]
        if not all(type(x) is Var and x.shape == x0.shape and x.dtype == x0.dtype for x in xs):
            return None
        distinct, positions = {}, []
        for x in xs:
            positions.append(distinct.setdefault(x.id, len(distinct)))
        first = {}
        for x in xs:
            first.setdefault(x.id, x)
        unique = list(first.values())
        ids = tuple(x.id for x in unique)
        known = self.stacks.get(ids)
        if known is not None:   # the same operands stacked by an earlier class (the forward's, for its backward)
            return known, np.array(positions, np.intp)
        known = self.stacks.get(ids[::-1])
        if known is not None:   # ... in the opposite order: a reversed view, not a second copy
            out = self.fresh(known.shape, known.dtype)
            made.append(_eqn(getitem, (known,), {"index": (slice(None, None, -1),)}, (out,), source))
            return out, np.array(positions, np.intp)
        for x in unique:
            self.need(x)
        out = self.fresh((len(unique),) + x0.shape, x0.dtype)
        made.append(_eqn(stack, unique, {"axis": 0}, (out,), source))
        return out, np.array(positions, np.intp)

    # -- a class --
    def _batch(self, members, columns, found, made, idxs):
        """``idxs``: the members' ``_read_indexes``."""
        e0 = members[0]
        n = len(members)
        source = _source(e0.source, n)
        if idxs is not None:
            if any(i is None for i in idxs):
                return None  # integers among other index kinds (Ellipsis, arrays): left as they are
            return self._gather(members, idxs, made, source)
        if e0.prim is stack:
            out = self._stack_gather(members, made, source)
            if out is not None:
                return out
        ops, flags = [], []
        for q, xs in enumerate(columns):
            got = self._operand(xs, made, source, e0.outs[0].dtype, found.get(q, False))
            if got is None:
                return None
            ops.append(got[0])
            flags.append(got[1])
        if not any(flags):
            return None
        return self._apply_rule(e0, ops, flags, n, made, source)

    def _gather(self, members, idxs, made, source):
        """Reads ``x[:, i, k]`` at varying integers: one read at index arrays (a slice if regular)."""
        n = len(members)
        e0 = members[0]
        pattern = _pattern(idxs[0])
        if any(_pattern(i) != pattern for i in idxs):
            return None
        ints = [a for a, p in enumerate(pattern) if p == "int"]
        columns = {a: np.array([i[a] for i in idxs], np.intp) for a in ints}
        bases = [e.args[0] for e in members]
        want = (n,) + e0.outs[0].shape
        found = self._positions(bases)
        if found is None and not all(b is bases[0] for b in bases):
            got = self._stack_distinct(bases, made, source)
            if got is None:
                return None
            base, found = got[0], (None, got[1])
        elif found is not None:
            base = self.batched[found[0]]
        else:
            base = bases[0]
            self.need(base)
        index = list(idxs[0])
        if found is None:  # one array read at n places
            varying = [a for a in ints if not np.all(columns[a] == columns[a][0])]
            regular = _progression(columns[varying[0]]) if len(varying) == 1 else None
            if regular is not None:
                index[varying[0]] = regular
                lane = sum(1 for a in range(varying[0]) if type(index[a]) is slice)
            else:
                for a in varying:
                    index[a] = columns[a]
                lane = _lane_axis(idxs[0])
            index = tuple(index)
        else:  # the base varies too: its position is one more index array, in front
            for a in ints:
                index[a] = columns[a]
            index = (found[1],) + tuple(index)
            lane = 0
        shape = np.broadcast_to(np.zeros((), bool), base.shape)[index].shape
        out = self.fresh(shape, base.dtype)
        made.append(_eqn(getitem, (base,), {"index": index}, (out,), source))
        if lane:
            axes = (lane,) + tuple(a for a in range(len(shape)) if a != lane)
            moved = self.fresh(tuple(shape[a] for a in axes), base.dtype)
            made.append(_eqn(transpose, (out,), {"axes": axes}, (moved,), source))
            out = moved
        return out if out.shape == want else None

    def _stack_gather(self, members, made, source, single=False):
        """Stacks of one batched class's results: one gather, a reshape and a transpose."""
        n, m = len(members), len(members[0].args)
        found = self._positions([a for e in members for a in e.args])
        if found is None or any(len(e.args) != m for e in members):
            return None
        gid, positions = found
        batched = self.batched[gid]
        item = batched.shape[1:]
        flat = self._take(batched, positions, made, source)
        lead = (m,) if single else (n, m)
        out = self.fresh(lead + item, batched.dtype)
        made.append(_eqn(reshape, (flat,), {"shape": lead + item}, (out,), source))
        axis = members[0].params.get("axis", 0)
        axis = axis % (len(item) + 1) + len(lead) - 1
        if axis != len(lead) - 1:
            order = list(range(len(lead) + len(item)))
            order.insert(axis, order.pop(len(lead) - 1))
            moved = self.fresh(tuple((lead + item)[a] for a in order), batched.dtype)
            made.append(_eqn(transpose, (out,), {"axes": tuple(order)}, (moved,), source))
            out = moved
        return out

    def _stack_of_one_class(self, eqn):
        """A single ``stack`` of one batched class's results (a list built in a loop, a sum's terms)."""
        made = []
        out = self._stack_gather([eqn], made, _source(eqn.source, len(eqn.args)), single=True)
        if out is None or out.shape != eqn.outs[0].shape or out.dtype != eqn.outs[0].dtype:
            return False
        last = made[-1]
        made[-1] = Eqn(last.prim, last.args, last.params, eqn.outs, last.uses, last.source)
        self.out.extend(made)
        return True

    def _apply_rule(self, e0, ops, flags, n, made, source):
        """The primitive's batching rule, staged on a fresh level; its equations join the program."""
        prim = e0.prim
        trace = self.trace_type()
        open_level(trace)
        inputs = []
        try:
            vals = []
            for op in ops:
                if type(op) is Var:
                    vals.append(trace.new_input(np.zeros(op.shape, op.dtype)))
                    inputs.append(op)
                else:
                    vals.append(op)
            with np.errstate(all="ignore"):
                try:
                    result = _rule(prim)(prim, vals, flags, dict(e0.params), _Level(n))
                except NeedsLoop:
                    result = NotImplemented
        finally:
            close_level(trace)
        if type(result) is not Tracer or result._trace is not trace:
            return None
        rename = {v.id: op for v, op in zip(trace.program_inputs, inputs)}
        staged = []
        for eqn in trace.eqns:
            for o in eqn.outs:
                rename[o.id] = self.fresh(o.shape, o.dtype)
            staged.append(Eqn(eqn.prim, substitute(eqn.args, rename),
                              {k: substitute(v, rename) for k, v in eqn.params.items()},
                              tuple(rename[o.id] for o in eqn.outs), tuple(rename[v.id] for v in eqn.uses), source))
        out = rename[trace.vars[result.index].id]
        want = e0.outs[0]
        if out.shape != (n,) + want.shape or out.dtype != want.dtype:
            return None
        made.extend(staged)
        return out


def vectorize(program, trace_type, stats=None, cut=None):
    """``program`` with its isomorphic, independent equations batched (see the module docstring).

    ``trace_type`` is the staging level the batching rules run on (transforms/jit.StagingTrace);
    ``stats`` (a dict), when given, receives the equation counts before and after and the classes;
    ``cut``, when given, splits the inputs into the first ``cut`` and the rest, whose equations
    are never batched together: a program that _ir.split will cut there (a VJP's primals, then
    its cotangents) must keep its forward part free of the cotangents (``x * 2`` in the forward
    pass and ``g * 2`` in the backward pass have one signature otherwise).
    """
    fresh = _Fresh(program)
    # column reads' cotangents: chains of index_add; reads of reads (and their cotangents) composed
    eqns = fold_indexed_adds(through_transposes(scalar_arrays_as_ints(program)), index_add, add)
    eqns = unit_slices_as_ints(compose_basic_indexing(split_read_chains(eqns, fresh), fresh), fresh).eqns
    eqns = _collapse_writes(eqns, program.outputs, fresh)
    sigs = _signatures(eqns, program.inputs, program.outputs, fresh, cut)
    eqns = sigs.eqns
    # The classes, as array work: the equations sorted by signature (signatures are numbered in
    # order of first appearance, so the classes come in that order, each in program order).
    n = len(eqns)
    sig_of = np.array(sigs.sigs, np.intp)
    by_sig = np.argsort(sig_of, kind="stable")
    starts = np.flatnonzero(np.r_[True, sig_of[by_sig[1:]] != sig_of[by_sig[:-1]]]) if n else np.zeros(0, np.intp)
    sizes = np.diff(np.r_[starts, n])
    group_of = np.full(n, -1, np.intp)
    groups = []
    out_ids = np.array(sigs.out_ids, np.intp)
    results = []   # each class's members' result ids
    for start, size in zip(starts[sizes >= MIN_GROUP_SMALL].tolist(), sizes[sizes >= MIN_GROUP_SMALL].tolist()):
        first = eqns[by_sig[start]]
        small = all(int(np.prod(o.shape)) <= SMALL_RESULT for o in first.outs)
        if size >= (MIN_GROUP_SMALL if small else MIN_GROUP) and _groupable(first):
            members = by_sig[start:start + size]
            group_of[members] = len(groups)
            groups.append(members.tolist())
            results.append(out_ids[members])
    result = program
    if groups:
        # each equation not batched, and the first member of each class, by depth then position
        keep = group_of < 0
        keep[[members[0] for members in groups]] = True
        kept = np.flatnonzero(keep)
        order = kept[np.lexsort((kept, np.array(sigs.depths, np.intp)[kept]))].tolist()
        group_of = group_of.tolist()
        emit = _Emitter(fresh, trace_type)
        for k in order:
            gid = group_of[k]
            if gid < 0:
                emit.single(eqns[k])
            else:
                emit.group(gid, [eqns[j] for j in groups[gid]], results[gid])
        for v in program.outputs:
            if type(v) is Var:
                emit.need(v)
        result = dce(Program(program.inputs, emit.out, program.outputs))
        if emit.by_memory:
            result = _scatters_in_lane_order(result)
        result = contract_lanes(softmax_backward(result, fresh))
        result = contract_cotangents(elementwise_before_broadcasts(result, fresh), fresh)
        result = _shared_indices(scatters_into_zeros_as_views(repeated_rows_as_views(narrow_lanes(result, fresh), fresh)))
        result = fold_constants(compose_reads(result))
    if stats is not None:
        stats.update(before=len(program.eqns), after=len(result.eqns), classes=len(groups),
                     batched=sum(len(m) for m in groups))
    return result


# --- 4. grids: index arrays that count through a grid of lanes --------------------------------------
# The batched classes of a nested loop hold their lanes in loop order, so the index arrays that read
# lanes (a class's rows for another class, a scatter's positions) are mostly affine in the digits of
# the loop counters: ``rows[b] = start + 16 * k(b) + i(b)`` for lanes ``b = (k, j, i)``. Such an array
# is a strided view, never a copy: a dot product of two gathered row sets becomes one matmul over
# the grid's batch axes, and a scatter-add with repeated positions a sum over the repeating axes.
def _affine(col):
    """``col`` (ints) as ``start + sum(step * digit)`` over a C-order grid of lanes: (start, [(size,
    step), ...] outermost first), or None. Each run of a constant difference is taken whole (a run
    that spans two grid axes is one merged axis) and the decomposition is checked on every lane."""
    cur = np.asarray(col, np.int64)
    start = int(cur[0])
    cur = cur - start
    axes = []
    while len(cur) > 1:
        step = int(cur[1] - cur[0])
        off = np.flatnonzero(np.diff(cur) != step)
        size = int(off[0]) + 1 if len(off) else len(cur)
        if len(cur) % size:
            return None
        rows = cur.reshape(-1, size)
        if not np.array_equal(rows - rows[:, :1], np.broadcast_to(step * np.arange(size), rows.shape)):
            return None
        axes.append((size, step))
        cur = rows[:, 0]
    return start, axes[::-1]


def _joint_grid(cols):
    """One grid of lanes for several index arrays of equal length: (sizes outermost first, starts,
    steps per array and grid axis), or None where one of them is not affine in such a grid."""
    n = len(cols[0])
    found = [_affine(c) for c in cols]
    if n < 2 or any(f is None for f in found):
        return None
    bounds = {1, n}
    for _, axes in found:
        p = 1
        for size, _ in reversed(axes):
            p *= size
            bounds.add(p)
    bounds = sorted(bounds)
    if any(b % a for a, b in zip(bounds, bounds[1:])):
        return None
    sizes = tuple(b // a for a, b in zip(bounds, bounds[1:]))[::-1]
    starts, steps = [], []
    for start, axes in found:
        spans, p = [], 1   # (lane stride, size, step) of the array's own axes, innermost first
        for size, step in reversed(axes):
            spans.append((p, size, step))
            p *= size
        mine = []
        for q in bounds[:-1]:
            mine.append(next(step * (q // p) for p, size, step in spans if p <= q < p * size))
        starts.append(start)
        steps.append(tuple(mine[::-1]))
    return sizes, starts, steps


class _Plan:
    """Compile-time constants of a grid equation (one constant in the generated code)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return "plan(" + ", ".join(f"{k}={getattr(v, '__name__', v)!r}" for k, v in self.__dict__.items()
                                   if k != "columns") + ")"


def _strided_rows(x, start, shape, steps):
    """Rows ``start + sum(step * digit)`` of ``x`` over grid axes of sizes ``shape``: a strided view,
    those axes in front of x's other axes. Over x's memory when it is one block, C or Fortran order
    (a lanes-first transpose of a gather is Fortran): an ndarray on that block (0.6 us); as_strided
    (5 us) otherwise."""
    strides = tuple(k * x.strides[0] for k in steps) + x.strides[1:]
    shape = tuple(shape) + x.shape[1:]
    flags = x.flags
    if flags.c_contiguous:
        return np.ndarray(shape, x.dtype, x, start * x.strides[0], strides)
    if flags.f_contiguous:   # x.T is the same block in C order, starting at the same element
        return np.ndarray(shape, x.dtype, x.T, start * x.strides[0], strides)
    return np.lib.stride_tricks.as_strided(x[start:], shape, strides, writeable=False)


def _rows_view(x, start, axes_steps):
    """``_strided_rows`` for (size, step) pairs."""
    return _strided_rows(x, start, tuple(size for size, _ in axes_steps), tuple(step for _, step in axes_steps))


def _blas_ready(a):
    """Does NumPy's matmul hand ``a`` (..., m, k) to BLAS as it lies: unit stride along one of its last
    two axes and a positive one along the other?"""
    size = a.itemsize
    (m, k), (sm, sk) = a.shape[-2:], a.strides[-2:]
    return (sk == size and sm >= k * size and sm % size == 0) or (sm == size and sk >= m * size and sk % size == 0)


def _blas(a):
    """``a`` (..., m, k) as NumPy's matmul hands it to BLAS: as it lies where it can (_blas_ready);
    otherwise a contiguous copy (a reversed or broadcast view would send the whole product down
    NumPy's own loops, 6x slower on W2's 128 (1, 256) @ (256, 32))."""
    return a if _blas_ready(a) else np.ascontiguousarray(a)


# Lanes whose batch axis (the grid axis both operands read) is the operands' unit-stride axis, as in
# seed 000's loop written batch innermost (for i: for j: for k), read each item's matrix across
# memory: BLAS needs a transposing copy first, which for many batches of a large operand costs more
# than einsum's loop run along the batch itself, and einsum's result keeps the batch-last layout the
# rest of the backward pass has. W1 16x (256 batches), line-timed: grid_dot (256, 16, 64) x (256,
# 4, 64) 1983 us copied and matmul against 493 us einsum; grid_rowsum into b's rows from a (256,
# 16, 64) operand 779 against 241; into b's rows from a's (256, 4, 64) 310 against 493, but its
# C-order result then cost 800 us more to add to the other, batch-last, part of b's cotangent. Where
# the large operand is one BLAS takes (W2's rowsum: a (128, 1, 256) strided cotangent against
# (128, 256, 32) rows in C order), copying the small one wins: 177 against 552 us.
_EINSUM_MIN_BATCH = 64


def _batch_loop_pays(operands):
    """Is einsum's loop on ``operands`` (batch, m, k) the better product: many batches, the largest
    operand one BLAS cannot take as it lies, and each such operand with the batch on its
    unit-stride axis?"""
    if operands[0].shape[0] <= _EINSUM_MIN_BATCH:
        return False
    strided = [a for a in operands if not _blas_ready(a)]
    return bool(strided) and max(a.size for a in strided) == max(a.size for a in operands) \
        and all(a.strides[0] == a.itemsize for a in strided)


def _grid_dot(x, y, plan):
    """``einsum('bw,bw->b', x[rx], y[ry])`` for lane rows affine in a grid: one matmul over the grid
    axes both read (batch), x alone reads, y alone reads; the lanes read from its result."""
    if plan.cols is not None:
        return _grid_dot_columns(x, y, plan)
    xv = _rows_view(x, plan.xstart, plan.xaxes)
    yv = _rows_view(y, plan.ystart, plan.yaxes)
    w = x.shape[1]
    xm, ym = xv.reshape(plan.nb, plan.fx, w), yv.reshape(plan.nb, plan.fy, w)
    if _batch_loop_pays((xm, ym)):
        m = np.einsum("bxw,byw->bxy", xm, ym, order="F")   # the batch stays the unit-stride axis
    else:
        m = np.matmul(_blas(xm), _blas(ym.transpose(0, 2, 1)))
    m = m.reshape(plan.split).transpose(plan.perm).reshape(plan.expand)
    if plan.broadcast:
        m = np.broadcast_to(m, plan.grid)
    return m.reshape(-1)


GRID_DOT = _InPlace("grid_dot", _grid_dot)


def _dot_plan(rx, ry, w):
    """The plan of ``_grid_dot`` for lane rows ``rx``, ``ry``, or None where they are not a grid."""
    got = _joint_grid([rx, ry])
    if got is None:
        return None
    grid, (xs, ys), (xsteps, ysteps) = got
    batch = [a for a in range(len(grid)) if xsteps[a] and ysteps[a]]
    xfree = [a for a in range(len(grid)) if xsteps[a] and not ysteps[a]]
    yfree = [a for a in range(len(grid)) if ysteps[a] and not xsteps[a]]
    order = batch + xfree + yfree
    size = lambda axes: int(np.prod([grid[a] for a in axes], dtype=np.int64))  # noqa: E731
    present = sorted(order)
    return _Plan(xstart=xs, ystart=ys, xaxes=tuple((grid[a], xsteps[a]) for a in batch + xfree),
                 yaxes=tuple((grid[a], ysteps[a]) for a in batch + yfree), nb=size(batch), fx=size(xfree),
                 fy=size(yfree), split=tuple(grid[a] for a in order) or (1,),
                 perm=tuple(order.index(a) for a in present) if order else (0,),
                 expand=tuple(grid[a] if a in order else 1 for a in range(len(grid))),
                 broadcast=len(present) < len(grid), grid=tuple(grid), nbatch=len(batch), cols=None)


def _lane_rows(v, producers, n, ndim=2):
    """(source, rows) when ``v`` (n, ...) is rows of an array of ``ndim`` axes: ``source[rows]``, or
    ``v`` itself and every row."""
    eqn = producers.get(v.id)
    if eqn is not None and eqn.prim is getitem and type(eqn.args[0]) is Var and len(eqn.args[0].shape) == ndim:
        index = eqn.params["index"]
        index = index if type(index) is tuple else (index,)
        if len(index) == 1:
            i = index[0]
            source = eqn.args[0]
            if type(i) is np.ndarray and i.ndim == 1 and i.dtype.kind in "iu" and len(i) == n \
                    and n and 0 <= i.min() and i.max() < source.shape[0]:   # a negative index counts from the end
                return source, i
            if type(i) is slice and all(type(p) is not Var for p in (i.start, i.stop, i.step)):
                rows = np.arange(source.shape[0])[i]
                if len(rows) == n:
                    return source, rows
    return v, np.arange(n)


def _lane_dot_operands(eqn, producers, count):
    """(a, b) when ``eqn`` is the lanes' dot products ``sum(a * b, axis=1)`` of two (n, w) arrays."""
    if eqn.prim.name == "einsum" and len(eqn.args) == 2:
        spec = eqn.params.get("subscripts", "")
        ins, _, out = spec.replace(" ", "").partition("->")
        parts = ins.split(",")
        if len(parts) == 2 and parts[0] == parts[1] and len(parts[0]) == 2 and out == parts[0][0] \
                and parts[0][0] != parts[0][1] and len(eqn.params) == 1:
            return eqn.args
        return None
    if eqn.prim is sum_ and eqn.params.get("axis") in ((1,), 1, (-1,), -1) and not eqn.params.get("keepdims") \
            and type(eqn.args[0]) is Var and len(eqn.args[0].shape) == 2 and count.get(eqn.args[0].id) == 1:
        made = producers.get(eqn.args[0].id)
        if made is not None and made.prim.name == "multiply" and len(made.args) == 2 and not made.params:
            return made.args
    return None


def contract_lanes(program):
    """The lanes' dot products of gathered rows (``einsum('bw,bw->b', x[rx], y[ry])``, or a multiply
    and a sum) whose row indices count through a grid: one ``_grid_dot`` (a matmul) each."""
    producers, count = {}, {}
    for eqn in program.eqns:
        for o in eqn.outs:
            producers[o.id] = eqn
        for v in eqn.uses:
            count[v.id] = count.get(v.id, 0) + 1
    out, changed = [], False
    for eqn in program.eqns:
        ops = _lane_dot_operands(eqn, producers, count)
        res = eqn.outs[0]
        if ops is not None and all(type(a) is Var and len(a.shape) == 2 for a in ops) \
                and ops[0].shape == ops[1].shape and ops[0].dtype == ops[1].dtype == res.dtype \
                and res.dtype.kind in "fc" and res.shape == ops[0].shape[:1]:
            n, w = ops[0].shape
            (sx, rx), (sy, ry) = (_lane_rows(a, producers, n) for a in ops)
            plan = _dot_plan(rx, ry, w)
            if plan is not None:
                out.append(_eqn(GRID_DOT, (sx, sy), {"plan": plan}, eqn.outs, eqn.source))
                changed = True
                continue
        out.append(eqn)
    return dce(Program(program.inputs, out, program.outputs)) if changed else program


def _grid_add(base, values, plan):
    """``base`` with ``values`` (lanes on axis ``plan.lane``) added at positions affine in a grid of
    the lanes: the lane axis is split into the grid in place, the grid axes no position depends on
    are summed, the rest written or added through one strided view of distinct elements (checked
    when planned)."""
    zeros = not any(base.strides) and base.size and not base.flat[0]  # the zeros of a cotangent
    out = np.empty(base.shape, base.dtype) if zeros else np.array(base, copy=True)
    lane = plan.lane
    v = values.reshape(values.shape[:lane] + plan.grid + values.shape[lane + 1:])
    for a in reversed(plan.summed):
        v = _sum_axis(v, lane + a)
    at = out[plan.offset + (Ellipsis,)]   # the elements of the first lane (out is fresh: contiguous)
    start = sum((i.indices(n)[0] if type(i) is slice else i) * st for i, n, st in zip(plan.offset, out.shape, out.strides))
    strides = tuple(sum(s * st for s, st in zip(steps, out.strides)) for steps in plan.steps)
    view = np.ndarray(at.shape[:lane] + plan.kept + at.shape[lane:], out.dtype, out, start,
                      at.strides[:lane] + strides + at.strides[lane:])
    if zeros:
        if view.size != out.size:   # the positions are distinct (checked when planned): equal sizes cover all
            out.fill(0)
        view[...] = v
    else:
        view += v
    return out


GRID_ADD = _InPlace("grid_add", _grid_add)


def _sum_axis(x, axis):
    """``x.sum(axis)``; a short axis as a few whole-array adds: NumPy's reduction runs one inner loop
    per element of the other axes when it cannot merge them (the 4 of a (64, 16, 4, 16) array:
    200 us, against 3 adds of 16k elements)."""
    n = x.shape[axis]
    if n > 8:
        return x.sum(axis=axis)
    lead = (slice(None),) * axis
    out = x[lead + (0,)] + x[lead + (1,)] if n > 1 else x[lead + (0,)].copy()
    for k in range(2, n):
        out += x[lead + (k,)]
    return out


def _grid_add_plan(index, positions, columns, shape, lane):
    """The plan of ``_grid_add`` for the index arrays ``columns`` at ``positions``, or None."""
    got = _joint_grid(columns)
    if got is None:
        return None
    grid, starts, steps = got
    summed = tuple(a for a in range(len(grid)) if not any(s[a] for s in steps))
    kept = [a for a in range(len(grid)) if a not in summed]
    size = int(np.prod([grid[a] for a in kept], dtype=np.int64))
    flat = np.ravel_multi_index(columns, [shape[a] for a in positions])
    if len(np.unique(flat)) != size:
        return None
    offset = list(index)
    for a, s in zip(positions, starts):
        offset[a] = s
    per_axis = []   # the element step along every axis of the base, per kept grid axis
    for g in kept:
        row = [0] * len(shape)
        for a, s in zip(positions, steps):
            row[a] = s[g]
        per_axis.append(tuple(row))
    return _Plan(lane=lane, grid=tuple(grid), summed=summed, offset=tuple(offset),
                 kept=tuple(grid[a] for a in kept), steps=tuple(per_axis), columns=tuple(columns),
                 positions=tuple(positions), ndim=len(shape))


def _permutation_read(v, producers, counts):
    """``(x, perm)`` when ``v`` is only ``x[perm]`` along its first axis (through a reshape that
    keeps its shape), ``perm`` a permutation of x's rows, read nowhere else; else None."""
    eqn = producers.get(v.id)
    if eqn is not None and eqn.prim is reshape and type(eqn.args[0]) is Var and eqn.args[0].shape == v.shape \
            and counts.get(v.id) == 1:
        v = eqn.args[0]
        eqn = producers.get(v.id)
    if eqn is None or eqn.prim is not getitem or type(eqn.args[0]) is not Var or counts.get(v.id) != 1:
        return None
    index = eqn.params["index"]
    perm = index[0] if type(index) is tuple and len(index) == 1 else index
    x = eqn.args[0]
    if type(perm) is not np.ndarray or perm.ndim != 1 or x.shape != v.shape \
            or not np.array_equal(np.sort(perm), np.arange(len(perm))):
        return None
    return x, perm


def _scatters_in_lane_order(program):
    """A scatter of one class's results taken in another order (``grid_add(zeros, r[perm])``: a
    loop ran ``z[t, b]`` b outer, the class was ordered by memory, see ``_Emitter._memory_order``)
    scatters ``r`` itself at the positions permuted back: no gather, and a scatter that is then
    in order (a reshape, see _rewrite's ``_scatter_is_view``)."""
    producers, counts = producers_of(program), use_counts(program.eqns, program.outputs)
    out, changed = [], False
    for eqn in program.eqns:
        if eqn.prim is GRID_ADD and type(eqn.args[1]) is Var and eqn.params["plan"].lane == 0:
            found = _permutation_read(eqn.args[1], producers, counts)
            plan = eqn.params["plan"]
            if found is not None:
                x, perm = found
                back = np.argsort(perm)
                new = _grid_add_plan(plan.offset, plan.positions, [c[back] for c in plan.columns],
                                     eqn.args[0].shape, 0)
                if new is not None:
                    eqn = _eqn(GRID_ADD, (eqn.args[0], x), {"plan": new}, eqn.outs, eqn.source)
                    changed = True
        out.append(eqn)
    return dce(Program(program.inputs, out, program.outputs)) if changed else program


# --- 5. cotangents of gathered rows: sums of products over the grid, as matmuls --------------------
# The backward pass of a lane's ``dot(u, v)`` gives u the rows ``g * v`` (n, w): one product per
# lane, gathered again and summed per column of u (a stack of one class's terms, or a scatter-add
# into the cotangent). Over a grid those sums are one matmul of the lanes' cotangents g and the
# rows v, never the (n, w) products. A lane's product may have more factors (the backward of
# ``np.abs(u) ** 2``: g times rows of 2|u| times rows of sign(u)): the factors read at the same rows
# are multiplied once per column, constants and one-value-per-row factors go on the lanes' scalars
# where those are fewer, and the sum is still one matmul.
def _grid_rowsum(g, s, plan):
    """``out[q] = sum over the lanes l of group q of g[gi(l)] * s[si(l)]`` (rows of ``s``), for
    ``gi``, ``si`` and the groups affine in a grid of the lanes: a matmul of strided views, the grid
    axes s does not depend on summed out of g first. Rows of the result in the groups' order."""
    if plan.cols is not None:
        return _grid_rowsum_columns(g, s, plan)
    gv = _strided_rows(g, plan.gstart, plan.gshape, plan.gsteps)
    for a in range(plan.presum):   # the axes s does not read, last, each summed by a few whole-array adds
        gv = _sum_axis(gv, gv.ndim - 1)
    gm = gv.reshape(plan.nb, plan.nf, plan.nc)
    sv = _strided_rows(s, plan.sstart, plan.sshape, plan.ssteps)
    sm = sv.reshape(plan.nb, plan.nc, -1)
    if plan.nc == 1:
        out = gm * sm   # an outer product per batch
    elif _batch_loop_pays((gm, sm)):
        out = np.einsum("bfc,bck->bfk", gm, sm, order="F")   # the batch stays the unit-stride axis
    else:
        out = np.matmul(_blas(gm), _blas(sm))
    return out.reshape(plan.split + s.shape[1:]).transpose(plan.perm).reshape((plan.rows,) + s.shape[1:])


GRID_ROWSUM = _InPlace("grid_rowsum", _grid_rowsum)


def _rowsum_plan(gidx, ridx, groups):
    """The plan of ``_grid_rowsum`` for the lanes' indices into g (``gidx``), into the rows
    (``ridx``) and the arrays that tell the groups apart (``groups``, their steps decide which grid
    axes are kept), or None where they are not affine in one grid."""
    got = _joint_grid([gidx, ridx] + list(groups))
    if got is None:
        return None
    grid, starts, steps = got
    gsteps, ssteps = steps[0], steps[1]
    axes = range(len(grid))
    kept = [a for a in axes if any(st[a] for st in steps[2:])]
    batch = [a for a in kept if ssteps[a]]
    free = [a for a in kept if not ssteps[a]]
    contracted = [a for a in axes if a not in kept and ssteps[a]]
    presum = [a for a in axes if a not in kept and not ssteps[a]]
    size = lambda sel: int(np.prod([grid[a] for a in sel], dtype=np.int64))  # noqa: E731
    order = batch + free + contracted + presum
    split = batch + free
    return _Plan(gstart=starts[0], gshape=tuple(grid[a] for a in order), gsteps=tuple(gsteps[a] for a in order),
                 sstart=starts[1], sshape=tuple(grid[a] for a in batch + contracted),
                 ssteps=tuple(ssteps[a] for a in batch + contracted), nb=size(batch), nf=size(free),
                 nc=size(contracted), presum=len(presum), split=tuple(grid[a] for a in split),
                 perm=tuple(split.index(a) for a in sorted(split)) + (len(split),), rows=size(kept), kept=tuple(kept),
                 grid=tuple(grid), steps=steps, cols=None)


def _keeps_dtype(c, dtype):
    """Whether the constant ``c`` times an array of ``dtype`` keeps that dtype: a Python number, or a
    NumPy scalar of that dtype."""
    t = type(c)
    return t is int or t is float or (isinstance(c, np.generic) and c.dtype == dtype)


def _lane_column(v, producers, n):
    """(g, gidx) when ``v`` is lane scalars as a column: ``reshape(g[gidx], (n, 1))``, perhaps broadcast,
    perhaps its rows read again (``np.sum(u * v)``'s backward broadcasts the lanes' cotangents first)."""
    eqn = producers.get(v.id)
    if eqn is not None and eqn.prim is getitem and len(v.shape) == 2:
        source, rows = _lane_rows(v, producers, n)
        if source is v:
            return None
        inner = _lane_column(source, producers, source.shape[0])
        return None if inner is None else (inner[0], inner[1][rows])
    if eqn is not None and eqn.prim is broadcast_to:
        v = eqn.args[0]
        if type(v) is not Var:
            return None
        eqn = producers.get(v.id)
    if eqn is None or eqn.prim is not reshape or v.shape != (n, 1) or type(eqn.args[0]) is not Var \
            or eqn.args[0].shape != (n,):
        return None
    g = eqn.args[0]
    made = producers.get(g.id)
    if made is not None and made.prim is getitem and type(made.args[0]) is Var and len(made.args[0].shape) == 1:
        return _lane_rows(g, producers, n, ndim=1)
    return g, np.arange(n)


def _entries(lanes, per):
    """The products of the rows ``lanes`` of a sum of lane products with ``per`` products a row, in order."""
    return (np.asarray(lanes)[:, None] * per + np.arange(per)).reshape(-1)


class _Products:
    """What ``_lane_terms`` may add to the program: the products of a term's row factors (computed
    once per column, not per lane) and its constants (on the lanes' scalars or on those products,
    whichever has fewer elements). ``made``: the new equations, to go before the equation they serve.
    ``quotients``: whether a term's lanes' scalars may be quotients and negations (``_factors``), which
    pays where the terms are summed per group, not where each lane is its own group (a column's
    own scalars are as cheap on its row)."""

    def __init__(self, producers, count, fresh, source, quotients=False):
        self.producers, self.count, self.fresh, self.source = producers, count, fresh, source
        self.made, self._known, self.quotients = [], {}, quotients

    def multiply(self, x, y):
        return self.binary(multiply, x, y)

    def add(self, x, y):
        return self.binary(add, x, y)

    def binary(self, prim, x, y):
        """``prim(x, y)`` of two operands of one shape, or of an array and a constant."""
        key = (prim.name, id(x) if type(x) is not Var else x.id, id(y) if type(y) is not Var else y.id)
        return self._made(key, prim, (x, y), {}, (x.shape, x.dtype) if type(x) is Var else (y.shape, y.dtype))

    def reshape(self, x, shape):
        return self._made(("reshape", x.id, shape), reshape, (x,), {"shape": shape}, (shape, x.dtype))

    def take(self, x, rows):
        """``x[rows]`` along the first axis."""
        rows = np.asarray(rows, np.intp)
        return self._made(("take", x.id, rows.tobytes()), getitem, (x,), {"index": (_rows_literal(rows),)},
                          ((len(rows),) + x.shape[1:], x.dtype))

    def _made(self, key, prim, args, params, out):
        known = self._known.get(key)
        if known is None:
            known = self.fresh(*out)
            self.made.append(_eqn(prim, args, params, (known,), self.source))
            self._known[key] = known
        return known


def _merged_terms(terms, products):
    """``terms`` with those that differ only in the lanes' scalars as one, the scalars added: the
    backward of ``(2 * u) * (u * 0.5)`` gives u two cotangents, g * 2 * (u * 0.5) and g * (2 * u) * 0.5,
    both the lanes' g * 1.0 times the rows of u."""
    merged = []
    for g, gidx, s, ridx, per in terms:
        for k, (g2, gidx2, s2, ridx2, per2) in enumerate(merged):
            if s2 is s and per2 == per and g2.shape == g.shape and g2.dtype == g.dtype \
                    and np.array_equal(gidx2, gidx) and np.array_equal(ridx2, ridx):
                merged[k] = (products.add(g2, g), gidx, s, ridx, per)
                break
        else:
            merged.append((g, gidx, s, ridx, per))
    return merged


def _factors(v, producers, n, quotients=False):
    """``v`` (lanes first) as a product of elementwise factors: (columns, constants, rows), columns the
    lanes' scalars (``_lane_column``: (g, gidx), or (g, gidx, divide) for a divisor), constants that
    keep v's dtype, rows (source, ridx) the rows ``source[ridx]`` of arrays; the leaves of a tree of
    multiplies (with ``quotients``, also of negations and divisions by lane scalars: ``u / |u|``'s
    backward divides each pair's cotangent by the column's norm), or None."""
    col = _lane_column(v, producers, n) if len(v.shape) == 2 else None
    if col is not None:
        return [col], [], []
    eqn = producers.get(v.id)
    name = eqn.prim.name if eqn is not None and not eqn.params else None
    if quotients and name in ("negative", "divide") and type(eqn.args[0]) is Var and eqn.args[0].shape == v.shape \
            and eqn.args[0].dtype == v.dtype:
        den = eqn.args[1] if name == "divide" and len(eqn.args) == 2 else None
        den = _lane_column(den, producers, n) if type(den) is Var and den.shape == (n, 1) \
            and den.dtype == v.dtype else None
        if name == "negative" or den is not None:
            cols, consts, rows = _factors(eqn.args[0], producers, n, quotients)
            return (cols + [den + (eqn.prim,)], consts, rows) if den is not None else (cols, consts + [-1], rows)
    if name == "multiply" and len(eqn.args) == 2:
        cols, consts, rows = [], [], []
        for a in eqn.args:
            got = _factors(a, producers, n, quotients) if type(a) is Var and a.dtype == v.dtype and a.shape[:1] == (n,) \
                else ([], [a], []) if _keeps_dtype(a, v.dtype) else None
            if got is None:
                break
            cols += got[0]
            consts += got[1]
            rows += got[2]
        else:
            return cols, consts, rows
    return [], [], [_lane_rows(v, producers, n)]


def _lane_scalars(cols, products, n):
    """(g, gidx): the lanes' scalars of ``_factors``'s columns, one (n,) array of their product and
    quotients where there are several (the cotangent over the column's norm, per lane)."""
    if len(cols) == 1 and len(cols[0]) == 2:
        return cols[0]
    g = None
    for col in cols:
        c, cidx = col[0], col[1]
        if c.shape != (n,) or not np.array_equal(cidx, np.arange(n)):
            c = products.take(c, cidx)
        if len(col) == 2:
            g = c if g is None else products.multiply(g, c)
        else:
            g = products.binary(col[2], 1.0 if g is None else g, c)
    return g, np.arange(n)


def _column_factors(s, products):
    """The factors of the rows' array ``s`` (m, w) through the multiplies and divisions that made it and
    that nothing else reads: (constants, arrays of s's shape, row scalars), the row scalars
    (c, multiply or divide) of (m, 1) arrays c, one value per row (the norm's backward x / |x|)."""
    eqn = products.producers.get(s.id)
    name = eqn.prim.name if eqn is not None else None
    if name not in ("multiply", "divide") or len(eqn.args) != 2 or eqn.params or products.count.get(s.id) != 1:
        return [], [s], []
    consts, parts, scalars = [], [], []
    for k, a in enumerate(eqn.args):
        if type(a) is Var and a.shape == s.shape and a.dtype == s.dtype and (name == "multiply" or k == 0):
            c, p, r = _column_factors(a, products)
            consts += c
            parts += p
            scalars += r
        elif type(a) is Var and len(s.shape) == 2 and a.shape == (s.shape[0], 1) and a.dtype == s.dtype \
                and (name == "multiply" or k == 1):
            scalars.append((a, eqn.prim))
        elif name == "multiply" and _keeps_dtype(a, s.dtype):
            consts.append(a)
        else:
            return [], [s], []
    return consts, parts, scalars


_SIGN_RULES = {"wengert.primitives.elementwise", "wengert.primitives.complex", "wengert.primitives.linalg"}


def _is_sign_of_real(eqn):
    """Whether ``eqn`` is ``np.sign(x)`` of a real x: the ufunc, or the ``_sign`` constant of the rules of
    abs and the norms (a staged elementwise function of those modules)."""
    impl = eqn.prim.impl
    return (impl is np.sign or (getattr(impl, "elementwise", False) and getattr(impl, "__name__", "") == "_sign"
                                and getattr(impl, "__module__", "") in _SIGN_RULES)) \
        and len(eqn.args) == 1 and not eqn.params and type(eqn.args[0]) is Var and eqn.args[0].dtype.kind == "f"


def _abs_times_sign(parts, producers):
    """The factors ``parts`` with each pair ``|x|``, ``sign(x)`` of a real x as x, which it is exactly
    (0 at 0, nan at nan): the backward of ``np.abs(u) ** 2`` is 2 |u| sign(u), that is 2 u."""
    made = [producers.get(p.id) for p in parts]
    for k, e in enumerate(made):
        if e is None or e.prim.name != "absolute" or len(e.args) != 1 or type(e.args[0]) is not Var \
                or e.args[0].dtype.kind != "f" or e.args[0].dtype != parts[k].dtype:
            continue
        x = e.args[0]
        for j, f in enumerate(made):
            if f is not None and j != k and _is_sign_of_real(f) and f.args[0] is x and parts[j].dtype == x.dtype:
                rest = [p for i, p in enumerate(parts) if i not in (j, k)]
                return _abs_times_sign(rest + [x], producers)
    return parts


def _lane_product(v, products, n):
    """``v`` (n, w), a product of one lane scalar per row, constants and rows of arrays read at the same
    rows (the backward of ``np.abs(u) ** 2``: lanes x rows of 2|u| x rows of sign(u)), as one lane
    product (g, gidx, s, ridx): the row factors multiplied once per column into s, the constants on
    g or on s, whichever is smaller. None for any other v."""
    found = _factors(v, products.producers, n, products.quotients)
    if found is None:
        return None
    cols, consts, rows = found
    if not cols or not rows or (len(cols) != 1 and not products.quotients):
        return None
    ridx = rows[0][1]
    read = [r for r, _ in rows]
    if any(r.shape[1:] != v.shape[1:] or r.dtype != v.dtype or r.shape != read[0].shape for r in read) \
            or any(not np.array_equal(i, ridx) for _, i in rows[1:]) or any(c[0].dtype != v.dtype for c in cols):
        return None
    made = products.producers[v.id]
    if made.source is not None:   # the new equations are the backward this product was part of
        products.source = made.source
    g, gidx = _lane_scalars(cols, products, n)
    parts, scalars = [], []
    for r in read:
        c, p, k = _column_factors(r, products) if r is not v else ([], [r], [])
        consts += c
        parts += p
        scalars += k
    parts = _abs_times_sign(parts, products.producers)
    s = parts[0]
    for p in parts[1:]:
        s = products.multiply(s, p)
    if scalars and len(ridx) < int(np.prod(s.shape, dtype=np.int64)):   # one value per lane, not per element
        lanes = len(ridx)
        if g.shape != (lanes,) or not np.array_equal(gidx, np.arange(lanes)):
            g = products.take(g, gidx)
        for c, prim in scalars:
            g = products.binary(prim, g, products.take(products.reshape(c, c.shape[:1]), ridx))
        gidx = np.arange(lanes)
    else:
        for c, prim in scalars:
            s = products.binary(prim, s, c)
    if consts:
        c = consts[0]
        for k in consts[1:]:
            c = c * k
        if int(np.prod(g.shape, dtype=np.int64)) < int(np.prod(s.shape, dtype=np.int64)):
            g = products.multiply(c, g)
        else:
            s = products.multiply(c, s)
    return g, gidx, s, ridx


def _lane_terms(v, products, n):
    """``v`` (n, w) as a sum of lane products: [(g, gidx, s, ridx, per)], row q of v summing the
    ``per`` products ``g[gidx[e]] * s[ridx[e]]`` for e in q*per .. q*per+per-1 (per is 1 but where
    v sums a class's rows per group, as the backward of ``np.dot(u, u)`` sums u's two cotangents)."""
    producers = products.producers
    eqn = producers.get(v.id)
    if eqn is None:
        return None
    if eqn.prim is reshape and type(eqn.args[0]) is Var and eqn.args[0].shape == v.shape:   # a no-op
        return _lane_terms(eqn.args[0], products, n)
    if eqn.prim is add and len(eqn.args) == 2 and all(type(a) is Var and a.shape == v.shape for a in eqn.args):
        left, right = (_lane_terms(a, products, n) for a in eqn.args)
        return None if left is None or right is None else left + right
    if eqn.prim is sum_:   # sum(reshape(V[lanes], (n, r, w)), axis=1): each term of V, r rows per row
        found = _grouped_rows(eqn, producers)
        if found is None or found[3] != v.shape:
            return None
        inner, lanes = found[0], found[1]
        terms = _lane_terms(inner, products, inner.shape[0]) if len(inner.shape) == 2 else None
        if terms is None:
            return None
        r = len(lanes) // n
        return [(g, gidx[_entries(lanes, per)], s, ridx[_entries(lanes, per)], per * r)
                for g, gidx, s, ridx, per in terms]
    if eqn.prim.name != "multiply" and not (products.quotients and eqn.prim.name in ("divide", "negative")):
        return None
    found = _lane_product(v, products, n)
    return None if found is None else [found + (1,)]


def _rowsum_eqns(eqn, terms, lanes, groups, shape, fresh):
    """``eqn`` (a per-group sum of ``terms``, see ``_grouped_rows``) as one ``_grid_rowsum`` per term
    and their sum (then, for a scatter, one GRID_ADD of the groups' rows), or None."""
    plans = [_rowsum_plan(gidx[_entries(lanes, per)], ridx[_entries(lanes, per)],
                          [np.repeat(gr, per) for gr in groups]) for _, gidx, _, ridx, per in terms]
    if any(p is None for p in plans):
        return None
    w = terms[0][2].shape[1:]
    rows = (plans[0].rows,) + w
    dtype = eqn.outs[0].dtype
    if (shape is not None and rows != shape) or any(p.rows != plans[0].rows for p in plans) \
            or any(s.shape[1:] != w or s.dtype != dtype or g.dtype != dtype for g, _, s, _, _ in terms):
        return None
    total = eqn.outs[0] if shape is not None else fresh(rows, dtype)
    made, acc = [], None
    for k, ((g, _, s, _, _), plan) in enumerate(zip(terms, plans)):
        last = k == len(terms) - 1
        part = total if last and acc is None else fresh(rows, dtype)
        made.append(_eqn(GRID_ROWSUM, (g, s), {"plan": plan}, (part,), eqn.source))
        if acc is not None:
            summed = total if last else fresh(rows, dtype)
            made.append(_eqn(add, (acc, part), {}, (summed,), eqn.source))
            part = summed
        acc = part
    if shape is None:   # the groups' rows written at their positions
        old, first = eqn.params["plan"], plans[0]
        steps = []
        for a in first.kept:
            row = [0] * old.ndim
            for p, st in zip(old.positions, first.steps[2:]):
                row[p] = st[a]
            steps.append(tuple(row))
        plan = _Plan(lane=0, grid=tuple(first.grid[a] for a in first.kept), summed=(), offset=old.offset,
                     kept=tuple(first.grid[a] for a in first.kept), steps=tuple(steps), columns=None,
                     positions=old.positions, ndim=old.ndim)
        made.append(_eqn(GRID_ADD, (eqn.args[0], total), {"plan": plan}, eqn.outs, eqn.source))
    return made


def _grouped_rows(eqn, producers):
    """(V, lanes, groups, shape) when ``eqn`` sums lane rows per group: ``sum(reshape(V[lanes], (m, r,
    w)), axis=1)`` (a stack of one class's terms summed), or the scatter-add of V's rows into a
    cotangent (GRID_ADD; the groups are its positions)."""
    if eqn.prim is sum_ and eqn.params.get("axis") in ((1,), 1) and not eqn.params.get("keepdims") \
            and type(eqn.args[0]) is Var and len(eqn.args[0].shape) == 3:
        r3 = producers.get(eqn.args[0].id)
        if r3 is None or r3.prim is not reshape or type(r3.args[0]) is not Var or len(r3.args[0].shape) != 2:
            return None
        m, r, w = eqn.args[0].shape
        if r3.args[0].shape != (m * r, w):
            return None
        v, lanes = _lane_rows(r3.args[0], producers, m * r)
        return v, lanes, [np.arange(m * r) // r], (m, w)
    if eqn.prim is GRID_ADD and type(eqn.args[1]) is Var and len(eqn.args[1].shape) == 2:
        plan, values = eqn.params["plan"], eqn.args[1]
        if plan.lane == 1:
            moved = producers.get(values.id)
            if moved is None or moved.prim is not transpose or tuple(moved.params["axes"]) != (1, 0) \
                    or type(moved.args[0]) is not Var:
                return None
            values = moved.args[0]
            same = producers.get(values.id)
            if same is not None and same.prim is reshape and type(same.args[0]) is Var \
                    and same.args[0].shape == values.shape:
                values = same.args[0]
        source, lanes = _lane_rows(values, producers, values.shape[0])   # the lanes read in another order
        return source, lanes, list(plan.columns), None
    return None


def _view_of_lanes(v, producers):
    """(base, ops) when ``v`` is ``base`` (n, w) seen through reads at constant indices, reshapes and
    transposes (``ops``: (name, parameter), first to last), else None. A scatter into zeros that writes every
    element once is the read it becomes (``scatters_into_zeros_as_views``)."""
    ops = []
    while type(v) is Var:
        eqn = producers.get(v.id)
        if eqn is None:
            break
        name, x = eqn.prim.name, eqn.args[-1] if eqn.prim is index_add else eqn.args[0]
        if type(x) is not Var:
            break
        if eqn.prim is getitem or eqn.prim is index_add:
            index = eqn.params["index"]
            if _vars_in(index, []) or not all(type(i) in (slice, int, np.ndarray) or i is None
                                              for i in (index if type(index) is tuple else (index,))):
                break
            if eqn.prim is index_add and not (len(eqn.args) == 2 and _is_zeros_view(eqn.args[0])
                                              and x.shape == v.shape and _whole(index, v.shape)):
                break
            ops.append(("getitem", index))
        elif name == "reshape":
            ops.append(("reshape", eqn.params["shape"]))
        elif name == "transpose":
            ops.append(("transpose", eqn.params.get("axes")))
        else:
            break
        v = x
    return (v, ops[::-1]) if ops and len(v.shape) == 2 else None


def _summed_view_rows(eqn, producers):
    """``sum(view(V), axis)`` (see ``_view_of_lanes``) that sums rows of V per group, each column of
    V on its own along one axis the sum keeps (the bias's cotangent of W2's per-step products:
    ``sum(transpose(reshape(V[128:])), axis=2)``): (V, lanes, group, groups, column axis), else None."""
    x = eqn.args[0]
    found = _view_of_lanes(x, producers) if type(x) is Var else None
    if found is None:
        return None
    base, ops = found
    n, w = base.shape
    cells = np.arange(n * w).reshape(n, w)
    for name, param in ops:
        cells = cells[param] if name == "getitem" else cells.reshape(param) if name == "reshape" else cells.transpose(param)
    ndim = cells.ndim
    axis = eqn.params.get("axis")
    summed = tuple(range(ndim)) if axis is None else tuple(sorted(a % ndim for a in np.atleast_1d(axis)))
    if cells.shape != x.shape or not summed:
        return None
    columns = cells % w
    for c in range(ndim):
        if c in summed or cells.shape[c] != w:
            continue
        if np.array_equal(columns, np.broadcast_to(np.arange(w).reshape([w if a == c else 1 for a in range(ndim)]), cells.shape)):
            break
    else:
        return None
    lanes = np.take(cells // w, 0, axis=c)           # the lane of each cell, the column axis dropped
    kept = [a for a in range(ndim) if a not in summed and a != c]
    kept_r, summed_r = [a - (a > c) for a in kept], [a - (a > c) for a in summed]   # axes of lanes
    order = lanes.transpose(kept_r + summed_r)
    groups = int(np.prod([lanes.shape[a] for a in kept_r], dtype=np.int64))
    per = order.size // groups if groups else 0
    if not groups or not per:
        return None
    return base, order.reshape(-1), np.repeat(np.arange(groups), per), [lanes.shape[a] for a in kept_r], \
        sum(1 for a in range(c) if a not in summed)


def _summed_view_eqns(eqn, found, products):
    """``eqn`` (see ``_summed_view_rows``) as ``_grid_rowsum`` of V's lane products, put in its shape."""
    base, lanes, group, kept, at = found
    fresh = products.fresh
    terms = _lane_terms(base, products, base.shape[0])
    if terms is None:
        return None
    terms = _merged_terms(terms, products)
    out = eqn.outs[0]
    rows = fresh((len(kept) and int(np.prod(kept)) or 1, base.shape[1]), out.dtype)
    made = _rowsum_eqns(Eqn(eqn.prim, eqn.args, eqn.params, (rows,), eqn.uses, eqn.source), terms, lanes, [group],
                        rows.shape, fresh)
    if made is None:
        return None
    made = products.made + made
    grid = fresh(tuple(kept) + base.shape[1:], out.dtype)
    made.append(_eqn(reshape, (rows,), {"shape": grid.shape}, (grid,), eqn.source))
    axes = list(range(len(kept)))
    axes.insert(at, len(kept))
    moved = fresh(tuple(grid.shape[a] for a in axes), out.dtype)
    made.append(_eqn(transpose, (grid,), {"axes": tuple(axes)}, (moved,), eqn.source))
    made.append(_eqn(reshape, (moved,), {"shape": out.shape}, eqn.outs, eqn.source))
    return made


def _scaled_lane_dot_eqns(eqn, products, known):
    """``eqn`` = ``sum(X, axis=1)`` of lane products X (n, w) with exactly two row factors and some
    lane scalars or constants (``u / |u|``'s backward: each pair's ``-g / |u| * sum(v * u)``) as the
    lanes' scalars times one ``_grid_dot`` of the rows, not an (n, w) product per factor (the one the
    forward pass made where ``known``, {(x, y): [(plan, dots)]}, has it); or None."""
    x, out = eqn.args[0], eqn.outs[0]
    if type(x) is not Var or len(x.shape) != 2 or eqn.params.get("axis") not in ((1,), 1, (-1,), -1) \
            or products.count.get(x.id) != 1 or out.dtype != x.dtype:
        return None
    made = products.producers.get(x.id)
    if made is None or made.prim.name not in ("multiply", "divide", "negative"):
        return None
    n, w = x.shape
    cols, consts, rows = _factors(x, products.producers, n, quotients=True)
    if len(rows) != 2 or not (cols or consts) or any(len(r.shape) != 2 or r.shape[1] != w or r.dtype != x.dtype
                                                     for r, _ in rows) \
            or any(c[0].dtype != x.dtype for c in cols) or not all(_keeps_dtype(c, x.dtype) for c in consts):
        return None
    (sx, rx), (sy, ry) = rows
    if sx.shape[0] >= n and sy.shape[0] >= n:
        return None   # a row per lane: the (n, w) product reads no row twice
    plan = _dot_plan(rx, ry, w)
    if plan is None:
        return None
    fresh, source = products.fresh, eqn.source
    for a, b, p in ((sx, sy, plan), (sy, sx, _dot_plan(ry, rx, w))):   # the forward's dot products, made already
        dots = next((v for q, v in known.get((a.id, b.id), ()) if p is not None and q.__dict__ == p.__dict__), None)
        if dots is not None:
            new = []
            break
    else:
        dots = fresh((n,), x.dtype)
        new = [_eqn(GRID_DOT, (sx, sy), {"plan": plan}, (dots,), source)]
        known.setdefault((sx.id, sy.id), []).append((plan, dots))
    if cols:
        g, _ = _lane_scalars(cols, products, n)
        new = products.made + new
        scaled = fresh((n,), x.dtype)
        new.append(_eqn(multiply, (dots, g), {}, (scaled,), source))
        dots = scaled
    for c in consts:
        scaled = fresh((n,), x.dtype)
        new.append(_eqn(multiply, (dots, c), {}, (scaled,), source))
        dots = scaled
    new.append(_eqn(reshape, (dots,), {"shape": out.shape}, eqn.outs, source))
    return new


def contract_cotangents(program, fresh):
    """Sums of lane products per group (see ``_grid_rowsum``) as matmuls over the grid."""
    producers = producers_of(program)
    count = use_counts(program.eqns, program.outputs)
    out, changed, dots = [], False, {}
    for eqn in program.eqns:
        if eqn.prim is GRID_DOT:
            dots.setdefault((eqn.args[0].id, eqn.args[1].id), []).append((eqn.params["plan"], eqn.outs[0]))
        if eqn.prim is sum_ and eqn.outs[0].dtype.kind in "fc":
            found = _summed_view_rows(eqn, producers)
            new = _summed_view_eqns(eqn, found, _Products(producers, count, fresh, eqn.source)) \
                if found is not None else None
            if new is None:
                new = _scaled_lane_dot_eqns(eqn, _Products(producers, count, fresh, eqn.source), dots)
            if new is not None:
                out.extend(new)
                changed = True
                continue
        found = _grouped_rows(eqn, producers)
        if found is not None:
            v, lanes, groups, shape = found
            summed = bool(groups) and all(len(gr) == len(lanes) for gr in groups) \
                and len(np.unique(np.stack(groups), axis=1)[0]) < len(lanes)   # not a group per lane
            products = _Products(producers, count, fresh, eqn.source, summed)
            terms = _lane_terms(v, products, v.shape[0]) if len(v.shape) == 2 else None
            if terms is not None:
                new = _rowsum_eqns(eqn, _merged_terms(terms, products), lanes, groups, shape, fresh)
                if new is not None:
                    out.extend(products.made + new)
                    changed = True
                    continue
        out.append(eqn)
    return dce(Program(program.inputs, out, program.outputs)) if changed else program


# --- 5b. columns of an array, read and written where they lie ---------------------------------------
# A loop over the columns of a batch-last array (seed 000's ``a[:, j, k]`` and ``b[:, i, k]``, k the
# unit-stride axis) reads them through one gather transposed to (lanes, w) rows: a transposing copy of
# the whole array, cache-hostile (W1 at 16x: 0.8 ms for b, against 0.3 ms for the whole forward
# product), and the cotangent of those rows comes back scattered into zeros in the array's layout
# (``grid_add``: the same transpose backwards, 1 ms). Where the lanes' batch axis is the array's
# unit-stride axis and there are many batches, the grid products read the columns as a strided view
# of the array itself and run einsum's loop along the batch, as the hand-written
# ``einsum("wik,wjk->ijk", b, a)`` does; and a cotangent made of such products that covers its array
# exactly once is written by them in the array's layout: no copy of the array, no scatter.
class _Columns:
    """Where a grid's rows lie in an array: row ``start + sum(step * digit)`` of the grid is the array
    at ``first + sum(steps[axis] * digit)`` on the axes ``others``, along the whole of its other axes."""

    def __init__(self, others, first, steps, shape):
        self.others, self.first, self.steps, self.shape = others, first, steps, shape
        self.rest = tuple(d for d in range(len(shape)) if d not in others)

    def __repr__(self):
        return f"columns(others={self.others}, first={self.first}, steps={self.steps})"

    def view(self, x, sizes):
        """The rows of ``x`` over grid axes of ``sizes``: a strided view, those axes in front of the rest."""
        st = x.strides
        strides = tuple(sum(k * st[d] for k, d in zip(step, self.others)) for step in self.steps) \
            + tuple(st[d] for d in self.rest)
        shape = tuple(sizes) + tuple(x.shape[d] for d in self.rest)
        if x.flags.c_contiguous:
            return np.ndarray(shape, x.dtype, x, sum(i * st[d] for i, d in zip(self.first, self.others)), strides)
        at = dict(zip(self.others, self.first))
        first = x[tuple(at.get(d, slice(None)) for d in range(x.ndim))]   # a view from the first row's element
        return np.lib.stride_tricks.as_strided(first, shape, strides, writeable=False)

    def unit_strides(self, axes):
        """Which of the grid ``axes`` step by one element of the array in C order."""
        c = np.cumprod((1,) + self.shape[:0:-1])[::-1]
        return [sum(k * int(c[d]) for k, d in zip(self.steps[a], self.others)) == 1 for a in axes]


def _columns_of(arrays, start, axes_steps):
    """(first, steps) when the rows ``start + sum(step * digit)`` over grid axes of (size, step) read
    ``arrays[d][row]`` affinely in the grid: the first row's entries and each grid axis's step in every
    array; None otherwise."""
    n = len(axes_steps)
    digits = [np.arange(size).reshape((1,) * a + (size,) + (1,) * (n - a - 1)) for a, (size, _) in enumerate(axes_steps)]
    rows = np.full((1,) * n, start, np.int64)
    for d, (_, step) in zip(digits, axes_steps):
        rows = rows + step * d
    first = tuple(int(a[start]) for a in arrays)
    steps = tuple(tuple(int(a[start + step]) - f for a, f in zip(arrays, first)) if size > 1 else (0,) * len(arrays)
                  for size, step in axes_steps)
    for k, (a, f) in enumerate(zip(arrays, first)):
        expect = f
        for d, step in zip(digits, steps):
            expect = expect + step[k] * d
        if not np.array_equal(a[rows], np.broadcast_to(expect, rows.shape)):
            return None
    return first, steps


def _column_source(v, producers):
    """(x, axis, arrays) when ``v`` (n, w) holds columns of the array ``x`` along ``axis``: row r is ``x``
    at ``arrays[d][r]`` on its other axes, in order. The batched read of ``x[:, i, k]`` is ``x[:, I, J].T``
    (``x[I, :, J]`` for another axis), which the rewrites make ``reshape(transpose(x), (n, w))`` where it
    reads every column once; else None."""
    eqn = producers.get(v.id)
    if eqn is None or len(v.shape) != 2:
        return None
    n, w = v.shape
    if eqn.prim is reshape and type(eqn.args[0]) is Var:
        moved = producers.get(eqn.args[0].id)
        if moved is None or moved.prim is not transpose or type(moved.args[0]) is not Var:
            return None
        x = moved.args[0]
        perm = tuple(moved.params["axes"]) if moved.params.get("axes") is not None else tuple(range(len(x.shape)))[::-1]
        dims = [x.shape[d] for d in perm[:-1]]
        if x.shape[perm[-1]] != w or int(np.prod(dims, dtype=np.int64)) != n:
            return None
        found = dict(zip(perm[:-1], np.unravel_index(np.arange(n), dims)))
        return x, perm[-1], [found[d] for d in range(len(x.shape)) if d != perm[-1]]
    transposed = eqn.prim is transpose and tuple(eqn.params["axes"]) == (1, 0) and type(eqn.args[0]) is Var
    if transposed:
        eqn = producers.get(eqn.args[0].id)
    if eqn is None or eqn.prim is not getitem or type(eqn.args[0]) is not Var:
        return None
    x = eqn.args[0]
    index = eqn.params["index"]
    index = index if type(index) is tuple else (index,)
    whole = [d for d, i in enumerate(index) if type(i) is slice]
    if len(index) != len(x.shape) or len(whole) != 1 or range(x.shape[whole[0]])[index[whole[0]]] != range(x.shape[whole[0]]):
        return None
    axis = whole[0]
    arrays = [i for d, i in enumerate(index) if d != axis]
    if w != x.shape[axis] or transposed != (axis == 0) or not all(
            type(i) is np.ndarray and i.ndim == 1 and i.dtype.kind in "iu" and len(i) == n and 0 <= i.min()
            and i.max() < x.shape[d] for i, d in zip(arrays, (d for d in range(len(x.shape)) if d != axis))):
        return None
    return x, axis, arrays


def _columns_pay(cols, batch, nb):
    """Does reading through ``cols`` pay over the gathered copy: many batches, and a batch axis on the
    array's unit-stride axis (einsum's loop then runs along it), the columns themselves strided?"""
    return nb > _EINSUM_MIN_BATCH and any(cols.unit_strides(batch)) and cols.rest != (len(cols.shape) - 1,)


# einsum's loop over two operands that each have an axis of their own (an outer product in every
# batch, summed: ``'kiw,kjw->kij'``) runs slower than the same loop once per element of the shorter
# such axis, where that operand has none left (``'kiw,kw->ki'`` for each j): W1 at 16x, the forward
# products (256, 16, 64) x (256, 4, 64), 327 us against 235 us for four calls (the hand-written
# ``einsum('wik,wjk->ijk')``: 273 us). Not in ``_grid_rowsum_columns``: there its cotangents read
# 20-40% slower split (W1 16x: a's, four calls, 207 against 173 us; b's, sixteen, 309 against 221).
_EINSUM_SPLIT_MAX = 16


def _einsum_split(x, xs, y, ys, outs, out):
    """``np.einsum(x, xs, y, ys, outs, out=out)``, one call per index of the operand's own axes (in
    one operand and the result only) where both operands have such axes and the shorter set spans
    at most _EINSUM_SPLIT_MAX elements."""
    own = [[(d, k) for d, k in enumerate(s) if k in outs and k not in t] for s, t in ((xs, ys), (ys, xs))]
    size = [int(np.prod([v.shape[d] for d, _ in o], dtype=np.int64)) for v, o in zip((x, y), own)]
    if not (own[0] and own[1]) or min(size) > _EINSUM_SPLIT_MAX:
        return np.einsum(x, xs, y, ys, outs, out=out)
    side = 0 if size[0] <= size[1] else 1
    v, vs = (x, xs) if side == 0 else (y, ys)
    dims = [d for d, _ in own[side]]
    odims = [outs.index(k) for _, k in own[side]]
    keep = [k for k in vs if k not in dict(own[side]).values()]
    okeep = [k for k in outs if k not in dict(own[side]).values()]
    for at in np.ndindex(*(v.shape[d] for d in dims)):
        vi = v[tuple(at[dims.index(d)] if d in dims else slice(None) for d in range(v.ndim))]
        oi = out[tuple(at[odims.index(d)] if d in odims else slice(None) for d in range(out.ndim))]
        if side == 0:
            np.einsum(vi, keep, y, ys, okeep, out=oi)
        else:
            np.einsum(x, xs, vi, keep, okeep, out=oi)
    return out


def _grid_dot_columns(x, y, plan):
    """``_grid_dot`` whose operands are columns of arrays (``plan.cols``, None for rows): einsum's loop
    on strided views of the arrays, the batch the unit-stride axis of the result."""
    xc, yc = plan.cols
    xv = xc.view(x, tuple(s for s, _ in plan.xaxes)) if xc else _rows_view(x, plan.xstart, plan.xaxes)
    yv = yc.view(y, tuple(s for s, _ in plan.yaxes)) if yc else _rows_view(y, plan.ystart, plan.yaxes)
    sizes = dict(zip(plan.subs[0], xv.shape)) | dict(zip(plan.subs[1], yv.shape))
    m = _einsum_split(xv, plan.subs[0], yv, plan.subs[1], plan.subs[2],
                      np.empty([sizes[k] for k in plan.subs[2]], np.result_type(xv, yv), order="F"))
    m = m.reshape(plan.split).transpose(plan.perm).reshape(plan.expand)
    if plan.broadcast:
        m = np.broadcast_to(m, plan.grid)
    return m.reshape(-1)


def _grid_rowsum_columns(g, s, plan):
    """``_grid_rowsum`` whose rows are columns of an array (``plan.cols[0]``, None for rows), written
    where ``plan.cols[1]`` places them in a new array of ``plan.into`` (the rows in order, or the
    layout of the array a scatter into zeros would have filled): einsum's loop along the batch, the
    lanes' scalars copied with the batch innermost (a small copy that keeps the loop on unit strides);
    a product by one scalar per row is a broadcast multiply."""
    gv = _strided_rows(g, plan.gstart, plan.gshape, plan.gsteps)
    for _ in range(plan.presum):
        gv = _sum_axis(gv, gv.ndim - 1)
    sc, dc = plan.cols
    sv = sc.view(s, plan.sshape) if sc else _strided_rows(s, plan.sstart, plan.sshape, plan.ssteps)
    out = np.empty(plan.into, plan.dtype)
    at = dc.view(out, plan.split)
    nb, nf, nc = plan.naxes
    if not nc:   # the scalars laid out as the result is, so that one loop order suits all three
        w = sv.ndim - nb
        ge = np.empty_like(at[(Ellipsis,) + (0,) * w], order="K")
        ge[...] = gv
        np.multiply(ge.reshape(ge.shape + (1,) * w), sv[(slice(None),) * nb + (None,) * nf], out=at)
    else:
        np.einsum(np.ascontiguousarray(gv.transpose(plan.gmove)), plan.subs[0], sv, plan.subs[1], plan.subs[2], out=at)
    return out


def _dot_columns(eqn, cols):
    """``eqn`` (a grid_dot) reading ``cols`` (an operand id -> (x, axis, arrays)): its plan for the columns, or None."""
    plan = eqn.params["plan"]
    found = []
    for v, start, axes in ((eqn.args[0], plan.xstart, plan.xaxes), (eqn.args[1], plan.ystart, plan.yaxes)):
        src = cols.get(v.id) if type(v) is Var else None
        got = _columns_of(src[2], start, axes) if src is not None else None
        if src is not None and got is None:
            return None
        found.append(None if got is None else
                     _Columns(tuple(d for d in range(len(src[0].shape)) if d != src[1]), got[0], got[1], src[0].shape))
    return found


def _rowsum_axes(plan):
    """(batch, free, contracted) grid axes of a ``_grid_rowsum`` plan, as its s reads them."""
    ssteps = plan.steps[1]
    kept = list(plan.kept)
    batch = [a for a in kept if ssteps[a]]
    free = [a for a in kept if not ssteps[a]]
    contracted = [a for a in range(len(plan.grid)) if a not in kept and ssteps[a]]
    return batch, free, contracted


def _rows_placed(plan, shape, others, arrays):
    """Where the rows of a ``_grid_rowsum`` (C order over its kept axes) lie in an array of ``shape``,
    row r at ``arrays[d][r]`` on the axes ``others``: a _Columns over its batch and free axes, or None."""
    batch, free, _ = _rowsum_axes(plan)
    kept = list(plan.kept)
    step = {a: int(np.prod([plan.grid[b] for b in kept if b > a], dtype=np.int64)) for a in kept}
    got = _columns_of(arrays, 0, [(plan.grid[a], step[a]) for a in batch + free])
    return None if got is None else _Columns(others, got[0], got[1], shape)


def _rowsum_columns(eqn, cols, into=None):
    """``eqn`` (a grid_rowsum) with its rows read through ``cols`` (as _dot_columns) and its result in a
    new array (``into``: (shape, others, arrays) of a scatter's target, else its rows in order): the
    new plan, or None."""
    plan = eqn.params["plan"]
    g, s = eqn.args
    src = cols.get(s.id) if type(s) is Var else None
    batch, free, contracted = _rowsum_axes(plan)
    sc = None
    if src is not None:
        got = _columns_of(src[2], plan.sstart, list(zip(plan.sshape, plan.ssteps)))
        if got is None:
            return None
        sc = _Columns(tuple(d for d in range(len(src[0].shape)) if d != src[1]), got[0], got[1], src[0].shape)
    rows, w = eqn.outs[0].shape[0], eqn.outs[0].shape[1:]
    shape, others, arrays = into if into is not None else ((rows,) + w, (0,), [np.arange(rows)])
    dc = _rows_placed(plan, shape, others, arrays)
    if dc is None or tuple(shape[d] for d in dc.rest) != w:
        return None
    nb, nf, nc = len(batch), len(free), len(contracted)
    letters = {a: k for k, a in enumerate(batch + free + contracted)}
    wl = list(range(len(letters), len(letters) + len(w)))
    order = batch + free + contracted   # gv's axes (after the presum); moved so that the batch is innermost
    gmove = tuple(range(nb, nb + nf + nc)) + tuple(range(nb))
    return _Plan(**{**plan.__dict__, "cols": (sc, dc), "into": shape, "dtype": eqn.outs[0].dtype,
                    "naxes": (nb, nf, nc), "gmove": gmove,
                    "subs": ([letters[order[k]] for k in gmove], [letters[a] for a in batch + contracted] + wl,
                             [letters[a] for a in batch + free] + wl)})


def _zeros_cover(eqn):
    """((shape, positions, arrays), values) when ``eqn`` (a grid_add) writes the rows of ``values`` (rows,
    w) into zeros of ``shape`` at every element once, row r at ``arrays[d][r]`` on the axes ``positions``;
    else None."""
    base, values = eqn.args
    plan = eqn.params["plan"]
    if not _is_zeros_view(base) or type(values) is not Var or plan.lane != 0 or plan.summed or len(values.shape) != 2 \
            or values.dtype != base.dtype or eqn.outs[0].shape != base.shape:
        return None
    positions = tuple(plan.positions)
    rows = int(np.prod(plan.kept, dtype=np.int64))
    if rows != values.shape[0] or rows != int(np.prod([base.shape[p] for p in positions], dtype=np.int64)) \
            or any(type(plan.offset[d]) is not slice or range(base.shape[d])[plan.offset[d]] != range(base.shape[d])
                   for d in range(base.ndim) if d not in positions):
        return None
    digits = np.indices(plan.kept).reshape(len(plan.kept), -1)
    arrays = [plan.offset[p] + sum(int(st[p]) * dg for st, dg in zip(plan.steps, digits)) for p in positions]
    arrays = [np.broadcast_to(np.asarray(a, np.int64), (rows,)) for a in arrays]
    if any(a.min() < 0 or a.max() >= base.shape[p] for a, p in zip(arrays, positions)) \
            or len(np.unique(np.ravel_multi_index(arrays, [base.shape[p] for p in positions]))) != rows:
        return None
    return (base.shape, positions, arrays), values


def _copy_cover(eqn, producers, counts):
    """(into, values) when ``eqn`` is a C-order copy (``ascontiguousarray``, the rewrites' form of a
    scatter into zeros that writes every element once) of ``values`` (rows, w) seen through reshapes,
    transposes and slices, each read once, the w axis kept whole: ``into`` as _zeros_cover's; else None."""
    chain, v = [], eqn.args[0] if eqn.args else None
    while type(v) is Var:
        made = producers.get(v.id)
        if made is None or counts.get(v.id) != 1 or not (made.prim is reshape or made.prim is transpose or (
                made.prim is getitem and all(type(i) is slice for i in (made.params["index"] if type(made.params["index"])
                                                                        is tuple else (made.params["index"],))))):
            break
        chain.append(made)
        v = made.args[0]
    if not chain or type(v) is not Var or len(v.shape) != 2 or v.dtype != eqn.outs[0].dtype \
            or int(np.prod(eqn.outs[0].shape, dtype=np.int64)) != int(np.prod(v.shape, dtype=np.int64)):
        return None
    rows, w = v.shape
    probe = np.arange(rows * w).reshape(v.shape)
    for made in reversed(chain):
        probe = made.prim.impl(probe, **made.params)
    probe = np.ascontiguousarray(probe)
    if probe.shape != eqn.outs[0].shape:
        return None
    whole = [d for d in range(probe.ndim) if probe.shape[d] == w and np.array_equal(
        probe % w, np.broadcast_to(np.arange(w).reshape((1,) * d + (w,) + (1,) * (probe.ndim - d - 1)), probe.shape))]
    if len(whole) != 1:
        return None
    positions = tuple(d for d in range(probe.ndim) if d != whole[0])
    at = np.unravel_index(np.argsort(probe, axis=None)[::w], probe.shape)
    return (probe.shape, positions, [at[d] for d in positions]), v


def _summed_terms(v, producers, counts, adds):
    """The equations whose results ``v`` sums (through ``add`` of two, each read once: appended to
    ``adds``), or None for a sum of anything else."""
    eqn = producers.get(v.id)
    if eqn is None or counts.get(v.id) != 1:
        return None
    if eqn.prim is add and not eqn.params and len(eqn.args) == 2 and all(
            type(a) is Var and a.shape == v.shape and a.dtype == v.dtype for a in eqn.args):
        left = _summed_terms(eqn.args[0], producers, counts, adds)
        right = _summed_terms(eqn.args[1], producers, counts, adds) if left is not None else None
        if right is None:
            return None
        adds.append(eqn)
        return left + right
    return [eqn]


def columns_in_place(program, fresh):
    """Grid products whose rows are columns of an array, gathered into (lanes, w) rows, read the array
    itself where that pays for every product reading those rows; the rows of a scatter into zeros that
    covers its array once, summed from such products, are written by them in the array's layout."""
    eqns = program.eqns
    readers = {}
    for k, eqn in enumerate(eqns):
        if eqn.prim is GRID_DOT or eqn.prim is GRID_ROWSUM:
            for p in ((0, 1) if eqn.prim is GRID_DOT else (1,)):
                v = eqn.args[p]
                if type(v) is Var:
                    readers.setdefault(v.id, (v, []))[1].append((k, p))
    if not readers:
        return program
    producers, counts = producers_of(program), use_counts(eqns, program.outputs)
    cols = {}
    inputs = {v.id for v in program.inputs}   # arrays whose layout is known: C order (an intermediate may be a view)
    for vid, (v, found) in readers.items():
        src = _column_source(v, producers) if counts.get(vid) == len(found) else None
        if src is not None and src[0].id in inputs and all(_columns_read(eqns[k], p, src) for k, p in found):
            cols[vid] = src
    if not cols:
        return program
    new = {}   # equation index -> its replacements
    for k, eqn in enumerate(eqns):
        if eqn.prim is GRID_DOT and any(type(v) is Var and v.id in cols for v in eqn.args):
            plan = eqn.params["plan"]
            found = _dot_columns(eqn, cols)
            nb = plan.nbatch
            x = list(range(nb)) + list(range(nb, len(plan.xaxes)))
            y = list(range(nb)) + list(range(len(plan.xaxes), len(plan.xaxes) + len(plan.yaxes) - nb))
            w = len(plan.split)
            plan = _Plan(**{**plan.__dict__, "cols": tuple(found), "subs": (x + [w], y + [w], x + y[nb:])})
            args = tuple(cols[v.id][0] if type(v) is Var and v.id in cols else v for v in eqn.args)
            new[k] = [_eqn(GRID_DOT, args, {"plan": plan}, eqn.outs, eqn.source)]
        elif eqn.prim is GRID_ROWSUM and type(eqn.args[1]) is Var and eqn.args[1].id in cols:
            plan = _rowsum_columns(eqn, cols)
            if plan is not None:
                new[k] = [_eqn(GRID_ROWSUM, (eqn.args[0], cols[eqn.args[1].id][0]), {"plan": plan}, eqn.outs, eqn.source)]
    index = {id(eqn): k for k, eqn in enumerate(eqns)}
    placed = set()
    for k, eqn in enumerate(eqns):
        found = _zeros_cover(eqn) if eqn.prim is GRID_ADD else \
            _copy_cover(eqn, producers, counts) if eqn.prim.name == "ascontiguousarray" else None
        if found is None:
            continue
        into, values = found
        adds = []
        terms = _summed_terms(values, producers, counts, adds)
        if terms is None or any(t.prim is not GRID_ROWSUM or index[id(t)] not in new for t in terms):
            continue
        plans = [_rowsum_columns(t, cols, into) for t in terms]
        if any(p is None or not any(p.cols[1].unit_strides(range(p.naxes[0]))) for p in plans):
            continue   # written with the batch off the unit-stride axis: einsum's loop crosses memory
        made = {}
        for t, plan in zip(terms, plans):
            out = eqn.outs[0] if not adds else fresh(into[0], t.outs[0].dtype)
            made[t.outs[0].id] = out
            new[index[id(t)]] = [_eqn(GRID_ROWSUM, (t.args[0], cols[t.args[1].id][0]), {"plan": plan}, (out,), t.source)]
        for a in adds:   # in program order: each add's operands are made before it
            out = eqn.outs[0] if a is adds[-1] else fresh(into[0], a.outs[0].dtype)
            made[a.outs[0].id] = out
            new[index[id(a)]] = [_eqn(add, tuple(made[v.id] for v in a.args), {}, (out,), a.source)]
        new[k] = []
        placed.update(index[id(t)] for t in terms)
    if any(eqns[k].prim is GRID_ROWSUM and k not in placed for k in new):
        return program   # a product writing (lanes, w) rows from a batch-last view: slower than the copy (W1's
        # "rows of a.T" at 16x, its cotangents transposed at the end: 1.5x -> 4.5x of hand)
    out = []
    for k, eqn in enumerate(eqns):
        out.extend(new.get(k, (eqn,)))
    return dce(Program(program.inputs, out, program.outputs))


def _columns_read(eqn, p, src):
    """Does ``eqn`` (a grid_dot or grid_rowsum) read its operand ``p``, columns ``src`` of an array
    (see _column_source), in a grid whose columns view pays (_columns_pay)?"""
    plan = eqn.params["plan"]
    if eqn.prim is GRID_DOT:
        start, axes = (plan.xstart, plan.xaxes) if p == 0 else (plan.ystart, plan.yaxes)
        nbatch = plan.nbatch
    else:
        start, axes = plan.sstart, list(zip(plan.sshape, plan.ssteps))
        nbatch = len(_rowsum_axes(plan)[0])
    x, axis, arrays = src
    got = _columns_of(arrays, start, axes)
    if got is None:
        return False
    cols = _Columns(tuple(d for d in range(len(x.shape)) if d != axis), got[0], got[1], x.shape)
    return _columns_pay(cols, range(nbatch), plan.nb)


# --- 6. a cotangent scattered into zeros over every element: a view ----------------------------------
def _whole(index, shape):
    """Whether the basic ``index`` (slices only) selects every element of ``shape``, in order or
    reversed along each axis: then ``zeros[index] = v`` is ``v[index]``."""
    index = index if type(index) is tuple else (index,)
    if len(index) > len(shape) or any(type(i) is not slice for i in index):
        return False
    for i, n in zip(index, shape):
        if any(type(p) is Var for p in (i.start, i.stop, i.step)):
            return False
        start, stop, step = i.indices(n)
        if step not in (1, -1) or len(range(start, stop, step)) != n:
            return False
    return True


def _is_zeros_view(x):
    return type(x) is np.ndarray and x.size and not any(x.strides) and not x.flat[0]


def scatters_into_zeros_as_views(program):
    """``index_add(zeros, v, index)`` that writes every element once (slices in order or reversed,
    the shape of v) is ``v[index]``, a view: the batched backward of a class read in reverse order.
    So is ``scatter_set(x, v, index)`` that overwrites every element of x (the backward of the
    Buffer's ``out[:, :, k] = softmax(out[:, :, k])`` over every k)."""
    out, changed = [], False
    for eqn in program.eqns:
        base = eqn.args[0]
        if ((eqn.prim is index_add and _is_zeros_view(base)) or (eqn.prim is scatter_set and type(base) in (Var, np.ndarray))) \
                and type(eqn.args[1]) is Var and eqn.args[1].shape == base.shape and eqn.args[1].dtype == base.dtype \
                and _whole(eqn.params["index"], base.shape):
            out.append(_eqn(getitem, (eqn.args[1],), {"index": eqn.params["index"]}, eqn.outs, eqn.source))
            changed = True
            continue
        out.append(eqn)
    return Program(program.inputs, out, program.outputs) if changed else program


# --- 7. lane products of which only some rows are read: only those rows ----------------------------
# A class's batched result holds every member; when the backward's contractions (``_grid_rowsum``)
# took over the sums that read most of its rows, the rest is read by a few row reads, e.g. W2's
# (65408, 32) lane product of which 32768 rows are read. An elementwise equation whose every reader
# reads rows along its first axis computes only the rows read: its lane operands read at those rows
# (the reads composed with the reads that made them: often every row of a smaller array, no copy).
# One class can also hold two computations of one signature (W2 one row per step: the backward's
# ``g[t] * ys[0]`` and ``g[t] * ys[t]``, 511 lanes whose operands are gathered), each read by its
# own readers: where every such part reads the operands through views, the parts are computed apart.
NARROW_MIN = 64          # lanes: below this the index bookkeeping costs more than the rows saved
NARROW_FRACTION = 0.75   # narrowed when at most this share of the rows is read
MAX_PARTS = 4            # a product read in more parts than this stays one product


def _row_index(eqn):
    """The rows (1-D ints) a ``getitem`` reading along the first axis only selects, and whether its
    result keeps that axis; None for any other index."""
    index = eqn.params["index"]
    if type(index) is tuple:
        if len(index) != 1:
            return None
        index = index[0]
    n = eqn.args[0].shape[0]
    if _is_int(index):
        return (np.array([int(index) % n], np.intp), False) if -n <= index < n else None
    if type(index) is slice:
        if any(type(p) is Var for p in (index.start, index.stop, index.step)):
            return None
        return np.arange(n)[index], True
    if type(index) is np.ndarray and index.ndim == 1 and index.dtype.kind in "iu" and len(index) \
            and 0 <= index.min() and index.max() < n:
        return index.astype(np.intp), True
    return None


def _rows_literal(rows):
    regular = _progression(rows)
    return regular if regular is not None else np.asarray(rows, np.intp)


def _rows_of(v, rows, producers, made, fresh, source):
    """``v[rows]``, reading through the row reads and column reshapes that made ``v`` (appended to
    ``made``): a read of every row of an array in order is that array."""
    if len(rows) == v.shape[0] and np.array_equal(rows, np.arange(len(rows))):
        return v
    eqn = producers.get(v.id)
    if eqn is not None and eqn.prim is reshape and type(eqn.args[0]) is Var and len(v.shape) == 2 \
            and v.shape[1] == 1 and eqn.args[0].shape == v.shape[:1]:   # lanes as a column
        inner = _rows_of(eqn.args[0], rows, producers, made, fresh, source)
        out = fresh((len(rows), 1), v.dtype)
        made.append(_eqn(reshape, (inner,), {"shape": out.shape}, (out,), source))
        return out
    x = _lane_broadcast(eqn)
    if x is not None:   # rows of a broadcast: the broadcast of the rows (of the one row) of its operand
        inner = x if x.shape[0] == 1 else _rows_of(x, rows, producers, made, fresh, source)
        out = fresh((len(rows),) + v.shape[1:], v.dtype)
        made.append(_eqn(broadcast_to, (inner,), {"shape": out.shape}, (out,), source))
        return out
    base, through = _lane_rows(v, producers, v.shape[0], ndim=len(v.shape))
    if base is not v:
        return _rows_of(base, through[rows], producers, made, fresh, source)
    out = fresh((len(rows),) + v.shape[1:], v.dtype)
    if len(rows) > 1 and np.all(rows == rows[0]):   # one row, read by every lane: a broadcast view
        row = fresh((1,) + v.shape[1:], v.dtype)
        made.append(_eqn(getitem, (v,), {"index": (slice(int(rows[0]), int(rows[0]) + 1),)}, (row,), source))
        made.append(_eqn(broadcast_to, (row,), {"shape": out.shape}, (out,), source))
        return out
    made.append(_eqn(getitem, (v,), {"index": (_rows_literal(rows),)}, (out,), source))
    return out


def _source_rows(v, rows, producers):
    """The array, and its rows, that ``v[rows]`` reads through the row reads and column reshapes
    that made ``v``."""
    while True:
        eqn = producers.get(v.id)
        if eqn is not None and eqn.prim is reshape and type(eqn.args[0]) is Var and len(v.shape) == 2 \
                and v.shape[1] == 1 and eqn.args[0].shape == v.shape[:1]:
            v = eqn.args[0]
            continue
        x = _lane_broadcast(eqn)
        if x is not None:
            v, rows = x, (rows if x.shape[0] > 1 else np.zeros_like(rows))
            continue
        base, through = _lane_rows(v, producers, v.shape[0], ndim=len(v.shape))
        if base is v:
            break
        v, rows = base, through[rows]
    return v, rows


def _lane_broadcast(eqn):
    """The operand of ``eqn`` when it is a ``broadcast_to`` that keeps the operand's axes and its
    lanes (or broadcasts one lane to all), else None."""
    if eqn is None or eqn.prim is not broadcast_to or len(eqn.args) != 1 or type(eqn.args[0]) is not Var:
        return None
    x, shape = eqn.args[0], eqn.outs[0].shape
    return x if len(x.shape) == len(shape) and x.shape[0] in (1, shape[0]) else None


def _viewed_rows(eqn, rows, producers):
    """Whether every lane operand of ``eqn`` is read at ``rows`` through a view: rows in a
    progression, or one row for every lane, of the array they come from."""
    n = eqn.outs[0].shape[0]
    for a in eqn.args:
        if type(a) is Var and len(a.shape) == len(eqn.outs[0].shape) and a.shape[0] == n:
            got = _source_rows(a, rows, producers)[1]
            if len(got) > 1 and _progression(got) is None and not np.all(got == got[0]):
                return False
    return True


def _narrowed(eqn, used, producers, fresh):
    """``eqn`` computed at the rows ``used`` only: (the equations, its result)."""
    out, n = eqn.outs[0], eqn.outs[0].shape[0]
    made, args = [], []
    for a in eqn.args:
        if type(a) is Var and len(a.shape) == len(out.shape) and a.shape[0] == n and n > 1:
            args.append(_rows_of(a, used, producers, made, fresh, eqn.source))
        elif type(a) is np.ndarray and a.ndim == len(out.shape) and a.shape[0] == n and n > 1:
            args.append(a[used])
        else:
            args.append(a)
    narrow = fresh((len(used),) + out.shape[1:], out.dtype)
    made.append(_eqn(eqn.prim, tuple(args), {}, (narrow,), eqn.source))
    return made, narrow


def _parts_by_reader(reads):
    """The rows of a lane product as its readers read them, in parts (the distinct rows of the
    readers that read the same rows), or None: two parts share a row, there is one part, or more
    than ``MAX_PARTS``, or a part of fewer than ``MIN_GROUP`` rows (single rows read one by one
    stay reads of one product)."""
    parts = {}
    for j, (rows, keeps) in reads:
        parts.setdefault(rows.tobytes(), (np.unique(rows), []))[1].append((j, (rows, keeps)))
    parts = list(parts.values())
    if not 2 <= len(parts) <= MAX_PARTS or min(len(u) for u, _ in parts) < MIN_GROUP \
            or sum(len(u) for u, _ in parts) != len(np.unique(np.concatenate([u for u, _ in parts]))):
        return None
    return parts


def narrow_lanes(program, fresh):
    """Elementwise equations of which only some rows are read compute only those rows."""
    producers, readers = {}, {}
    for k, eqn in enumerate(program.eqns):
        for o in eqn.outs:
            producers[o.id] = eqn
        for v in eqn.uses:
            readers.setdefault(v.id, []).append(k)
    outputs = {v.id for v in program.outputs if type(v) is Var}
    replace = {}   # equation position -> equations that replace it
    for k, eqn in enumerate(program.eqns):
        prim = eqn.prim
        if not isinstance(getattr(prim, "impl", None), np.ufunc) or prim.multiple_results or eqn.params \
                or len(eqn.outs) != 1:
            continue
        out = eqn.outs[0]
        n = out.shape[0] if out.shape else 0
        if n < NARROW_MIN or out.id in outputs:
            continue
        reads = []
        for j in readers.get(out.id, ()):
            r = program.eqns[j]
            found = _row_index(r) if r.prim is getitem and r.args[0] is out and out not in r.uses[1:] else None
            if found is None:
                break
            reads.append((j, found))
        else:
            if not reads:
                continue
            used = np.unique(np.concatenate([rows for _, (rows, _) in reads]))
            if len(used) <= NARROW_FRACTION * n:
                parts = [(used, reads)]
            else:
                # read in parts that each read their operands through views, where the whole
                # product gathers them (W2 one row per step: its backward's 511 lane products
                # gt * y0 and gt * yt, read as two sums): each part computed on its own
                parts = _parts_by_reader(reads)
                if parts is None or _viewed_rows(eqn, np.arange(n), producers) \
                        or not all(_viewed_rows(eqn, part, producers) for part, _ in parts):
                    continue
            replace[k] = []
            for part, part_reads in parts:
                made, narrow = _narrowed(eqn, part, producers, fresh)
                replace[k].extend(made)
                position = np.full(n, -1, np.intp)
                position[part] = np.arange(len(part))
                for j, (rows, keeps) in part_reads:
                    r = program.eqns[j]
                    index = (_rows_literal(position[rows]),) if keeps else int(position[rows[0]])
                    replace[j] = [_eqn(getitem, (narrow,), {"index": index}, r.outs, r.source)]
    if not replace:
        return program
    eqns = []
    for k, eqn in enumerate(program.eqns):
        eqns.extend(replace.get(k, (eqn,)))
    return dce(Program(program.inputs, eqns, program.outputs))


# --- 8. a softmax's backward as softmax's rule --------------------------------------------------
# The written-out stable softmax ``e = exp(x - max(x)); p = e / sum(e)`` differentiates through the
# rules of divide, sum, exp, subtract and max: 16 equations per batch in W1's program, 8 of them
# the max's tie split, which carries the shift's cotangent ``-sum(g_z)``, zero: p does not change
# when x is shifted along the axis. Eager records such a softmax as one (rewrites.py, on values it
# can check); a staged program holds the composition. Matched on the backward's own equations, it
# is rewritten to softmax's rule ``p * (G - sum(G * p))``: the composition is exactly that (by
# algebra, up to rounding) whatever the program does elsewhere, since every piece is checked.
def _producer(v, defs, name):
    eqn = defs.get(v.id) if type(v) is Var else None
    return eqn if eqn is not None and eqn.prim.name == name else None


def _operands_of(eqn, name_or_var, defs):
    """The two operands of a binary ``eqn`` as (match, other), where ``match`` is ``name_or_var``
    itself (a Var) or made by a primitive of that name; None when neither is."""
    a, b = eqn.args
    for x, y in ((a, b), (b, a)):
        if (type(name_or_var) is Var and x is name_or_var) or \
                (type(name_or_var) is str and _producer(x, defs, name_or_var) is not None):
            return x, y
    return None


def _summed_along(v, defs, axis, of=None):
    """The operand ``x`` when ``sum(x, axis)`` made ``v``, its reduced axes kept or put back by a
    reshape, perhaps broadcast back (a batched unbroadcast); ``axis`` None: any axis, returned as
    ``(x, axis)``. ``of``: that operand must be ``of``."""
    for wrapper in ("broadcast_to", "reshape"):
        eqn = _producer(v, defs, wrapper)
        if eqn is not None:
            v = eqn.args[0]
    eqn = _producer(v, defs, "sum")
    if eqn is None or (axis is not None and eqn.params.get("axis") != axis) or (of is not None and eqn.args[0] is not of):
        return None
    return eqn.args[0] if axis is not None else (eqn.args[0], eqn.params.get("axis"))


def _same_operand(x, y):
    """Are operands ``x`` and ``y`` the same: one Var, or equal constants (two arrays of zeros the
    backward made for two rules are two objects)."""
    if x is y:
        return True
    t = type(x)
    if t is not type(y) or t is Var:
        return False
    if t is np.ndarray:
        return x.shape == y.shape and x.dtype == y.dtype and x.size <= 1 << 20 and np.array_equal(x, y)
    if t is tuple or t is list:
        return len(x) == len(y) and all(_same_operand(a, b) for a, b in zip(x, y))
    return t in (int, float, bool, str, slice, type(None)) and x == y


def _same_value(a, b, defs):
    """Do Vars ``a`` and ``b`` hold the same value: one Var, or made by equal equations of one
    primitive from the same operands (CSE keeps such pairs when a constant operand is two objects)."""
    if a is b:
        return True
    ea, eb = defs.get(a.id), defs.get(b.id)
    return ea is not None and eb is not None and ea.prim is eb.prim and len(ea.outs) == len(eb.outs) == 1 \
        and ea.params.keys() == eb.params.keys() and _same_operand(ea.args, eb.args) \
        and all(_same_operand(ea.params[k], eb.params[k]) for k in ea.params)


def _tie_shares(w, defs):
    """Is ``w`` max's tie shares ``equal(x, m) / sum(equal(x, m))`` (perhaps cast)? Finite where x is."""
    cast = _producer(w, defs, "astype")
    if cast is not None:
        w = cast.args[0]
    share = _producer(w, defs, "divide")
    return share is not None and _producer(share.args[0], defs, "equal") is not None \
        and _producer(share.args[1], defs, "sum") is not None


def _softmax_cotangent(gx, defs):
    """(G, p, axis) when ``gx = A + (-sum(A)) * shares``, ``A = (G / s + sum(-G * p / s)) * e`` with
    ``e = exp(z)``, ``s = sum(e, axis, keepdims=True)``, ``p = e / s``: the composition's cotangent of
    the softmax's input, G being p's."""
    if gx.prim.name != "add" or len(gx.args) != 2 or gx.params:
        return None
    for a, t in (gx.args, gx.args[::-1]):
        tie = _producer(t, defs, "multiply")
        if tie is None or type(a) is not Var:
            continue
        for shift, shares in (tie.args, tie.args[::-1]):
            summed = _summed_along(shift, defs, None)
            neg = _producer(summed[0], defs, "negative") if summed is not None else None
            if neg is None or neg.args[0] is not a or not _tie_shares(shares, defs):
                continue
            axis = summed[1]
            a_eqn = _producer(a, defs, "multiply")
            found = _operands_of(a_eqn, "exp", defs) if a_eqn is not None else None
            if found is None:
                continue
            e, ge = found
            ge_eqn = _producer(ge, defs, "add")
            if ge_eqn is None or len(ge_eqn.args) != 2:
                continue
            for q, r in (ge_eqn.args, ge_eqn.args[::-1]):
                q_eqn, u = _producer(q, defs, "divide"), _summed_along(r, defs, axis)
                if q_eqn is None or u is None:
                    continue
                g, s = q_eqn.args
                u_eqn = _producer(u, defs, "divide")
                if type(g) is not Var or _summed_along(s, defs, axis, of=e) is None or u_eqn is None \
                        or u_eqn.args[1] is not s or g.shape != e.shape or g.dtype != e.dtype:
                    continue
                v_eqn = _producer(u_eqn.args[0], defs, "multiply")
                found = _operands_of(v_eqn, "negative", defs) if v_eqn is not None else None
                if found is None or not _same_value(defs[found[0].id].args[0], g, defs):
                    continue
                p_eqn = _producer(found[1], defs, "divide")
                if p_eqn is None or p_eqn.args[0] is not e or p_eqn.args[1] is not s:
                    continue
                return g, found[1], axis
    return None


def softmax_backward(program, fresh):
    """Each matched softmax composition's cotangent (see ``_softmax_cotangent``) as softmax's rule."""
    defs = producers_of(program)
    out, changed = [], False
    for eqn in program.eqns:
        found = _softmax_cotangent(eqn, defs) if eqn.prim is add else None
        if found is None:
            out.append(eqn)
            continue
        g, p, axis = found
        axes = range(len(g.shape)) if axis is None else [a % len(g.shape) for a in np.atleast_1d(axis)]
        gp, centred = fresh(g.shape, g.dtype), fresh(g.shape, g.dtype)
        total = fresh(tuple(1 if a in axes else n for a, n in enumerate(g.shape)), g.dtype)
        out += [_eqn(multiply, (g, p), {}, (gp,), eqn.source),
                _eqn(sum_, (gp,), {"axis": axis, "keepdims": True}, (total,), eqn.source),
                _eqn(subtract, (g, total), {}, (centred,), eqn.source),
                _eqn(multiply, (p, centred), {}, eqn.outs, eqn.source)]
        changed = True
    return dce(Program(program.inputs, out, program.outputs)) if changed else program


# --- 9. equal reads computed once -----------------------------------------------------------------
# The backward's classes read the forward classes' results at the same lanes (a lane's norms, W1's
# ``nb[i]`` and ``na[j]``, gathered in the forward and twice in the backward), each with its own
# index array: equal arrays made the same object, the reads are equal equations, computed once.
def _shared_indices(program):
    """``program`` with the index arrays of its reads that hold equal values made one object."""
    canonical, out, changed = {}, [], False
    for eqn in program.eqns:
        index = eqn.params.get("index") if eqn.prim is getitem else None
        if type(index) is tuple and any(type(i) is np.ndarray for i in index):
            shared = tuple(canonical.setdefault((i.shape, i.dtype.str, i.tobytes()), i) if type(i) is np.ndarray else i
                           for i in index)
            if any(a is not b for a, b in zip(shared, index)):
                eqn = Eqn(eqn.prim, eqn.args, {**eqn.params, "index": shared}, eqn.outs, eqn.uses, eqn.source)
                changed = True
        out.append(eqn)
    return cse(Program(program.inputs, out, program.outputs)) if changed else program


# --- 10. an elementwise operation on rows read repeatedly: on strided views --------------------------
# The backward's lane product ``g[l] * y1[b(l)]`` of W2 reads each of y1's 128 rows for every one of
# the 256 steps: a gather of 32768 rows, then the product. Over a grid of lanes both operands are
# strided views, the repeated rows a zero stride, and the product is computed in the grid's shape.
def _grid_rows(x, plan):
    return _strided_rows(x, plan.start, plan.shape, plan.steps)


GRID_ROWS = _InPlace("grid_rows", _grid_rows)


def repeated_rows_as_views(program, fresh):
    """Binary elementwise equations whose lane operands are reads of rows affine in one grid, one of
    them reading a row more than once: on strided views of the arrays read, then reshaped."""
    producers = producers_of(program)
    out, changed = [], False
    for eqn in program.eqns:
        made = _on_row_views(eqn, producers, fresh)
        if made is None:
            out.append(eqn)
            continue
        out.extend(made)
        changed = True
    return dce(Program(program.inputs, out, program.outputs)) if changed else program


def _on_row_views(eqn, producers, fresh):
    prim = eqn.prim
    if not isinstance(getattr(prim, "impl", None), np.ufunc) or prim.multiple_results or eqn.params \
            or len(eqn.args) != 2 or len(eqn.outs) != 1:
        return None
    res = eqn.outs[0]
    if len(res.shape) != 2 or res.shape[0] < NARROW_MIN:
        return None
    n = res.shape[0]
    reads = []
    for a in eqn.args:
        if type(a) is not Var or len(a.shape) != 2 or a.shape[0] != n:
            return None
        reads.append(_lane_rows(a, producers, n))
    if not any(len(np.unique(rows)) < n for _, rows in reads):   # no row read twice: nothing to save
        return None
    got = _joint_grid([rows for _, rows in reads])
    if got is None:
        return None
    grid, starts, steps = got
    views = []
    made = []
    for (source, _), start, step in zip(reads, starts, steps):
        view = fresh(tuple(grid) + source.shape[1:], source.dtype)
        made.append(_eqn(GRID_ROWS, (source,), {"plan": _Plan(start=start, shape=tuple(grid), steps=tuple(step))},
                         (view,), eqn.source))
        views.append(view)
    shape = tuple(grid) + (max(views[0].shape[-1], views[1].shape[-1]),)
    if shape[-1] != res.shape[1]:
        return None
    product = fresh(shape, res.dtype)
    made.append(_eqn(prim, tuple(views), {}, (product,), eqn.source))
    made.append(_eqn(reshape, (product,), {"shape": res.shape}, eqn.outs, eqn.source))
    return made


# --- 11. equations of constants computed once, when the program is built --------------------------
# A traced zeros array overwritten everywhere (``np.zeros(...) + 0 * x.ravel()[0]``, then written
# in place) has a cotangent that is zeros by construction: its backward steps (a broadcast of the
# constant zero, its sum, a product by 0, a scatter into zeros) read constants only. They are
# evaluated here, once; their results are constants of the program.
FOLD_MAX = 1 << 16   # elements: a larger constant result stays an equation (memory held by the program)


def fold_constants(program):
    """Equations without a variable operand, evaluated (small results only)."""
    known, out, changed = {}, [], False
    for eqn in program.eqns:
        if known and any(v.id in known for v in eqn.uses):
            eqn = Eqn(eqn.prim, substitute(eqn.args, known), {k: substitute(v, known) for k, v in eqn.params.items()},
                      eqn.outs, tuple(v for v in eqn.uses if v.id not in known), eqn.source)
            changed = True
        if eqn.uses or eqn.prim.multiple_results or len(eqn.outs) != 1:
            out.append(eqn)
            continue
        with np.errstate(all="ignore"):
            value = eqn.prim.impl(*eqn.args, **eqn.params)
        value = np.asarray(value) if not isinstance(value, np.ndarray) else value
        o = eqn.outs[0]
        if value.shape != o.shape or value.dtype != o.dtype or (value.size > FOLD_MAX and any(value.strides)):
            out.append(eqn)
            continue
        known[o.id] = value
        changed = True
    if not changed:
        return program
    outputs = [known.get(v.id, v) if type(v) is Var else v for v in program.outputs]
    return dce(Program(program.inputs, out, outputs))


# --- 12. a read of a read: one read ---------------------------------------------------------------
# The lists spelling's backward reads the softmax's cotangent at the lanes through two gathers (the
# stacks' positions, then the lanes' order), and those through two more: each element is one element
# of the first array, so one gather reads it there.
COMPOSE_MAX = 1 << 16   # elements of a composed read: its index arrays are built when the program is


def _constant_index(eqn):
    index = eqn.params.get("index") if eqn.prim is getitem else None
    if index is None or _vars_in(index, []):
        return None
    return index


def compose_reads(program):
    """``x[i][j]`` at constant indices, the first a gather, as one gather ``x[k]``."""
    producers, out, changed = {}, [], False
    for eqn in program.eqns:
        index = _constant_index(eqn)
        inner = producers.get(eqn.args[0].id) if index is not None and type(eqn.args[0]) is Var else None
        first = _constant_index(inner) if inner is not None else None
        if first is not None and type(inner.args[0]) is Var and int(np.prod(eqn.outs[0].shape, dtype=np.int64)) <= COMPOSE_MAX \
                and any(type(i) is np.ndarray for i in (first if type(first) is tuple else (first,))):
            base = inner.args[0]
            cells = np.arange(int(np.prod(base.shape, dtype=np.int64))).reshape(base.shape)[first][index]
            if cells.shape == eqn.outs[0].shape and base.shape:
                composed = tuple(np.asarray(c, np.intp) for c in np.unravel_index(cells, base.shape))
                eqn = _eqn(getitem, (base,), {"index": composed}, eqn.outs, eqn.source)
                changed = True
        out.append(eqn)
        for o in eqn.outs:
            producers[o.id] = eqn
    return dce(Program(program.inputs, out, program.outputs)) if changed else program


# --- 13. elementwise work on broadcasts: on the arrays broadcast -----------------------------------
# A rule that expands a reduction's result back to its operand's shape before combining it (the
# backward of ``np.linalg.norm``: ``x / where(norm == 0, 1, norm)``, the norms broadcast to x's shape)
# compares, selects and divides per element what is one value per column. Elementwise operations
# commute with broadcasting: each reads the arrays broadcast and lets NumPy broadcast them, and one
# whose operands are all broadcasts runs on the small arrays, its result broadcast after it.
def _broadcast_of(x, producers):
    eqn = producers.get(x.id) if type(x) is Var else None
    if eqn is not None and eqn.prim is broadcast_to and type(eqn.args[0]) is Var and len(eqn.args) == 1:
        return eqn.args[0]
    return None


def elementwise_before_broadcasts(program, fresh):
    """Elementwise equations read the arrays that their broadcast operands broadcast."""
    producers, out, changed = {}, [], False
    for eqn in program.eqns:
        res = eqn.outs[0]
        if len(eqn.outs) == 1 and not eqn.params and not eqn.prim.multiple_results and hasattr(eqn.prim, "batch") \
                and _rule(eqn.prim) is elementwise_rule:   # the pass's own records (grid_dot ...) have no rule
            args = [_broadcast_of(a, producers) or a for a in eqn.args]
            if any(a is not b for a, b in zip(args, eqn.args)):
                shapes = [a.shape for a in args if type(a) in (Var, np.ndarray)]
                shape = np.broadcast_shapes(*shapes)
                small = shape != res.shape and len(shape) <= len(res.shape) \
                    and np.broadcast_shapes(shape, res.shape) == res.shape
                if shape == res.shape or small:
                    made = fresh(shape, res.dtype) if small else res
                    eqn = _eqn(eqn.prim, args, {}, (made,), eqn.source)
                    if small:
                        out.append(eqn)
                        producers[made.id] = eqn
                        eqn = _eqn(broadcast_to, (made,), {"shape": res.shape}, (res,), eqn.source)
                    changed = True
        out.append(eqn)
        for o in eqn.outs:
            producers[o.id] = eqn
    return dce(Program(program.inputs, out, program.outputs)) if changed else program


# --- 14. a basic read of a basic read: one read, and its cotangent one write -----------------------
# A column read in two steps, ``a[..., k][:, j]``, ``a.T[k][j]``, ``np.moveaxis(a, -1, 0)[k][:, j]``,
# ``np.split(a, B, axis=2)[k][:, j, 0]``, is two reads at constant ints and slices: the first a
# class of its own (one lane per k), the second one lane per (k, j) of operands the first class
# made, and the backward pass a chain of ``index_add`` into zeros per k (the cotangent of ``a[..., k]``)
# added into ``a``'s at k: a scatter per k, unbatched. Both compose before the classes are formed:
# ``x[i1][i2]`` is ``x[i]``, and ``index_add(base, v, i1)`` of a ``v`` that is a chain of ``index_add``
# into zeros (each link read once) is that chain's links added into ``base`` at the composed indices,
# so the loop reads and writes ``a[:, j, k]`` as the seed's own spelling does.
def _basic_axes(index, shape):
    """``index`` (ints, slices, one Ellipsis; no new axes, arrays or variables) on ``shape``: per
    axis an int, or ``(start, step, length)`` for a slice. None for any other index."""
    idx = index if type(index) is tuple else (index,)
    ellipses = [k for k, i in enumerate(idx) if i is Ellipsis]
    if len(ellipses) > 1:
        return None
    if ellipses:
        at = ellipses[0]
        idx = idx[:at] + (slice(None),) * (len(shape) - len(idx) + 1) + idx[at + 1:]
    if len(idx) > len(shape):
        return None
    out = []
    for i, n in zip(idx + (slice(None),) * (len(shape) - len(idx)), shape):
        if type(i) is slice:
            if not all(p is None or _is_int(p) for p in (i.start, i.stop, i.step)):
                return None
            start, stop, step = slice(*(None if p is None else int(p) for p in (i.start, i.stop, i.step))).indices(n)
            out.append((start, step, len(range(start, stop, step))))
        elif _is_int(i) and -n <= i < n:
            out.append(int(i) % n)
        else:
            return None
    return out


def _index_of(axes, shape):
    """The basic index of per-axis entries (ints, ``(start, step, length)``) on ``shape``, full
    slices written ``:`` and trailing ones left out; None for an empty slice or no index at all."""
    out = []
    for axis, n in zip(axes, shape):
        if type(axis) is not tuple:
            out.append(axis)
            continue
        start, step, length = axis
        if length == 0:
            return None
        if start == 0 and step == 1 and length == n:
            out.append(slice(None))
        else:
            stop = start + step * length
            out.append(slice(start, stop if stop >= 0 else None, step if step != 1 else None))
    while out and type(out[-1]) is slice and out[-1] == slice(None):
        out.pop()
    return tuple(out) if out else None


def _composed_index(shape, first, second):
    """The basic index ``i`` with ``x[i]`` equal to ``x[first][second]`` (x of ``shape``), or None."""
    outer = _basic_axes(first, shape)
    if outer is None:
        return None
    inner = _basic_axes(second, tuple(a[2] for a in outer if type(a) is tuple))
    if inner is None:
        return None
    inner = iter(inner)
    out = []
    for axis in outer:
        if type(axis) is not tuple:
            out.append(axis)
            continue
        start, step, _ = axis
        sub = next(inner)
        out.append(start + step * sub if type(sub) is not tuple else (start + step * sub[0], step * sub[1], sub[2]))
    return _index_of(out, shape)


def _permuted_index(index, shape, perm):
    """For ``y = transpose(x, perm)`` (``y`` of ``shape``): the basic index ``i`` with ``x[i]`` equal
    to ``y[index]``, when the axes ``index`` keeps stay in order (no transpose left); else None."""
    axes = _basic_axes(index, shape)
    if axes is None:
        return None
    kept = [perm[r] for r, a in enumerate(axes) if type(a) is tuple]
    if kept != sorted(kept):
        return None
    on_x = [None] * len(perm)
    for r, a in enumerate(axes):
        on_x[perm[r]] = a
    return _index_of(on_x, tuple(shape[perm.index(q)] for q in range(len(perm))))


def through_transposes(program):
    """A basic read of a transpose, ``x.T[b]``, as a read of ``x`` (``x[:, b]``); and the transpose of
    its cotangent, ``index_add(zeros, g, b).T`` read once, as ``index_add(zeros, g, (:, b))``: each
    column's backward otherwise adds a transposed dense array into the cotangent, which no chain of
    writes folds."""
    producers, out, changed = {}, [], False
    counts = None
    for eqn in program.eqns:
        if eqn.prim is getitem and type(eqn.args[0]) is Var:
            inner = producers.get(eqn.args[0].id)
            if inner is not None and inner.prim is transpose and type(inner.args[0]) is Var \
                    and not _vars_in(eqn.params["index"], []):
                x = inner.args[0]
                axes = inner.params.get("axes")
                perm = list(range(len(x.shape)))[::-1] if axes is None else [a % len(x.shape) for a in axes]
                index = _permuted_index(eqn.params["index"], inner.outs[0].shape, perm)
                if index is not None:
                    eqn = _eqn(getitem, (x,), {**eqn.params, "index": index}, eqn.outs, eqn.source)
                    changed = True
        elif eqn.prim is transpose and type(eqn.args[0]) is Var:
            inner = producers.get(eqn.args[0].id)
            if inner is not None and inner.prim is index_add and len(inner.args) == 2 \
                    and _is_zeros_view(inner.args[0]) and not _vars_in(inner.params["index"], []):
                if counts is None:
                    counts = use_counts(program.eqns, program.outputs)
                axes = eqn.params.get("axes")
                res = eqn.outs[0]
                perm = list(range(len(res.shape)))[::-1] if axes is None else [a % len(res.shape) for a in axes]
                # res = transpose(z), z of inner's shape: z's axis perm[r] is res's axis r
                index = _permuted_index(inner.params["index"], inner.outs[0].shape, _inverse(perm)) \
                    if counts.get(inner.outs[0].id) == 1 else None
                if index is not None:
                    zeros = np.broadcast_to(np.zeros((), inner.args[0].dtype), res.shape)
                    eqn = _eqn(index_add, (zeros, inner.args[1]), {**inner.params, "index": index}, eqn.outs,
                               eqn.source)
                    changed = True
        out.append(eqn)
        if eqn.prim is transpose or eqn.prim is index_add:   # the only producers looked up
            producers[eqn.outs[0].id] = eqn
    return dce(Program(program.inputs, out, program.outputs)) if changed else program


def _inverse(perm):
    inv = [0] * len(perm)
    for r, q in enumerate(perm):
        inv[q] = r
    return inv


def _zero_chain(v, producers, counts, reads=1):
    """The links (``index_add`` equations) of the chain into an all-zero constant that made ``v``, each
    link's result read once (by the next link; ``v`` itself ``reads`` times), and the zeros; or None."""
    links = []
    while True:
        eqn = producers.get(v.id) if type(v) is Var else None
        if eqn is None or eqn.prim is not index_add or counts.get(v.id) != (reads if not links else 1) \
                or len(eqn.args) != 2 or _vars_in(eqn.params["index"], []):
            return None
        links.append(eqn)
        base = eqn.args[0]
        if type(base) is np.ndarray:
            return (links[::-1], base) if base.size and not base.any() else None
        v = base


def _one_int(index, shape):
    """``(axis, i)`` for an index that picks ``i`` on one axis and keeps every other whole, or None."""
    axes = _basic_axes(index, shape)
    if axes is None:
        return None
    ints = [(a, i) for a, i in enumerate(axes) if type(i) is not tuple]
    if len(ints) != 1 or any(i != (0, 1, n) for i, n in zip(axes, shape) if type(i) is tuple):
        return None
    return ints[0]


def split_read_chains(program, fresh):
    """An ``index_add`` chain into zeros read only at ints of one axis (the backward of ``np.stack``,
    each input's cotangent ``ct[t]``), each link writing at an int on that axis: each read is the
    chain of the links that write there, into zeros without that axis."""
    producers, readers = {}, {}   # the producers of index_add results: the only ones looked up
    for k, eqn in enumerate(program.eqns):
        if eqn.prim is getitem and type(eqn.args[0]) is Var and eqn.args[0].id in producers \
                and not _vars_in(eqn.params["index"], []):
            readers.setdefault(eqn.args[0].id, []).append(k)
        elif eqn.prim is index_add:
            producers[eqn.outs[0].id] = eqn
    if not readers:
        return program
    counts = use_counts(program.eqns, program.outputs)
    replaced, dropped = {}, set()
    for cid, ks in readers.items():
        chain = _zero_chain(producers[cid].outs[0], producers, counts, reads=len(ks))
        if chain is None:
            continue
        links, zeros = chain
        picks = [_one_int(program.eqns[k].params["index"], zeros.shape) for k in ks]
        if None in picks or len({a for a, _ in picks}) != 1 or len({i for _, i in picks}) != len(picks):
            continue
        axis = picks[0][0]
        shape = zeros.shape[:axis] + zeros.shape[axis + 1:]
        by_int = {}
        for link in links:
            axes = _basic_axes(link.params["index"], zeros.shape)
            index = None if axes is None or type(axes[axis]) is tuple else _index_of(axes[:axis] + axes[axis + 1:], shape)
            if index is None:
                break
            by_int.setdefault(axes[axis], []).append((link, index))
        else:
            if all(i in by_int for _, i in picks):
                base = np.broadcast_to(np.zeros((), zeros.dtype), shape)
                for k, (_, i) in zip(ks, picks):
                    out = program.eqns[k].outs[0]
                    acc, made = base, []
                    for n, (link, index) in enumerate(by_int[i]):
                        res = out if n == len(by_int[i]) - 1 else fresh(shape, out.dtype)
                        made.append(_eqn(index_add, (acc, link.args[1]), {**link.params, "index": index}, (res,),
                                         link.source))
                        acc = res
                    replaced[k] = made
                dropped.update(link.outs[0].id for link in links)
    if not replaced:
        return program
    out = []
    for k, eqn in enumerate(program.eqns):
        if k in replaced:
            out.extend(replaced[k])
        elif eqn.outs[0].id not in dropped:
            out.append(eqn)
    return dce(Program(program.inputs, out, program.outputs))


def _read_shape(index, shape):
    """The shape ``x[index]`` has, for a basic ``index`` on ``shape`` (None for any other)."""
    axes = _basic_axes(index, shape)
    return None if axes is None else tuple(a[2] for a in axes if type(a) is tuple)


def _bounded_slice(index):
    """Has ``index`` a slice with a start, a stop or a step (only such a slice can keep one element of a
    longer axis)? The test before ``_unit_slices_as_ints``, which most reads (``x[:, j, k]``) fail."""
    for i in (index if type(index) is tuple else (index,)):
        if type(i) is slice and (i.start is not None or i.stop is not None or i.step is not None):
            return True
    return False


def _unit_slices_as_ints(index, shape):
    """``index`` with each slice that keeps one element of a longer axis (``j:j + 1``) as the int
    ``j``; None when it has no such slice or is not basic."""
    axes = _basic_axes(index, shape)
    if axes is None:
        return None
    ints = [a[0] if type(a) is tuple and a[2] == 1 and n > 1 else a for a, n in zip(axes, shape)]
    return _index_of(ints, shape) if ints != axes else None


def _basic_form(index, shape):
    """``index`` without its new axes (where it also has ints), and with a one-element integer array
    (``x[:, [i], k]``) that is the only array, its int neighbours adjacent, as the slice ``i:i + 1``:
    the same elements, in the same order, in a result that differs only by axes of length 1. None
    when ``index`` has neither, or anything else it cannot so write."""
    idx = index if type(index) is tuple else (index,)
    for i in idx:   # most reads (x[:, j, k]) have neither an array nor a new axis: one loop says so
        if i is None or type(i) is np.ndarray:
            break
    else:
        return None
    arrays = [k for k, i in enumerate(idx) if type(i) is np.ndarray]
    if not arrays and not (any(i is None for i in idx) and any(_is_int(i) for i in idx)):
        return None   # new axes matter only on a read at ints (a column, x[:, i, k, None]), not x[:, None]
    if arrays:
        at = arrays[0]
        a = idx[at]
        if len(arrays) != 1 or a.shape != (1,) or a.dtype.kind not in "iu" or any(i is None for i in idx):
            return None
        advanced = [k for k, i in enumerate(idx) if k == at or _is_int(i)]
        if advanced[-1] - advanced[0] + 1 != len(advanced):
            return None   # NumPy puts the array's axis first then
        consumes = [i is not Ellipsis for i in idx]
        axis = sum(consumes[:at]) if Ellipsis not in idx[:at] else len(shape) - sum(consumes[at:])
        if not 0 <= axis < len(shape) or not -shape[axis] <= int(a[0]) < shape[axis]:
            return None
        i = int(a[0]) % shape[axis]
        idx = idx[:at] + (slice(i, i + 1),) + idx[at + 1:]
    idx = tuple(i for i in idx if i is not None)
    return idx if _basic_axes(idx, shape) is not None else None


def _scalar_arrays_as_ints(index):
    """``index`` with its 0-d integer arrays as ints (``np.take(x, i, axis=1)`` reads ``x[:, array(i)]``:
    the elements of ``x[:, i]``, copied), or None when it has none."""
    idx = index if type(index) is tuple else (index,)
    for i in idx:
        if type(i) is np.ndarray and i.ndim == 0 and i.dtype.kind in "iu":
            break
    else:
        return None
    out = tuple(int(i) if type(i) is np.ndarray and i.ndim == 0 and i.dtype.kind in "iu" else i for i in idx)
    return out if type(index) is tuple else out[0]


def scalar_arrays_as_ints(program):
    """Reads and writes at 0-d integer arrays (``np.take`` at an int) as at those ints: the same
    elements in a staged program, where nothing is a view; the classes batch reads at varying ints,
    not at arrays (seed 000 read ``np.take(b, i, axis=1)[:, k]``: 6302 equations, 134x the
    hand-written gradient)."""
    replaced = {}
    for n, eqn in enumerate(program.eqns):
        prim = eqn.prim
        if prim is getitem or prim is index_add or prim is scatter_set:
            index = eqn.params["index"]
            for i in (index if type(index) is tuple else (index,)):
                if type(i) is np.ndarray:   # most indexes hold none: one loop, no call
                    break
            else:
                continue
            index = _scalar_arrays_as_ints(index)
            if index is not None:
                replaced[n] = _eqn(prim, eqn.args, {**eqn.params, "index": index}, eqn.outs, eqn.source)
    if not replaced:
        return program
    return Program(program.inputs, [replaced.get(n, eqn) for n, eqn in enumerate(program.eqns)], program.outputs)


def _covers(index, shape):
    """Does the basic ``index`` pick every element of an array of ``shape`` (ints on axes of length
    1 only, whole slices in order)?"""
    axes = _basic_axes(index, shape)
    return axes is not None and all(a == (0, 1, n) if type(a) is tuple else n == 1 for a, n in zip(axes, shape))


def _sinks(eqn, reshapes):
    """Is ``eqn`` an elementwise ufunc whose array operands are all reshapes (``reshapes``) of arrays
    of one shape, of its result's size, and whose other operands are numbers or 0-d arrays?"""
    for a in eqn.args:
        if type(a) is Var and a.id in reshapes:
            break
    else:
        return False
    impl = eqn.prim.impl
    if not isinstance(impl, np.ufunc) or impl.nout != 1 or eqn.params or len(eqn.args) != impl.nin:
        return False
    shape = None
    for a in eqn.args:
        if type(a) is Var and a.shape != ():
            made = reshapes.get(a.id)
            if made is None or a.shape != eqn.outs[0].shape or shape not in (None, made.args[0].shape):
                return False
            shape = made.args[0].shape
        elif np.ndim(a) != 0:
            return False
    return shape is not None


def _reshaped_product(eqn, reshapes, fresh):
    """``eqn`` on reshaped vectors (``reshapes``: the reshapes met, by result) as the same work on the
    vectors, reshaped after: a transpose that keeps the order of the axes longer than 1 (``u.T`` of a
    column kept (W, 1)) is a reshape; ``(1, W) @ (W, 1)`` of two vectors is their dot product; a matrix
    product over one element with a 0-d factor (its backward, ``g @ v.T``) is a product by that number.
    The equations, the last one making ``eqn``'s result; None for anything else."""
    res = eqn.outs[0]
    if eqn.prim is transpose:
        x = eqn.args[0]
        axes = eqn.params.get("axes")
        axes = tuple(range(len(x.shape)))[::-1] if axes is None else tuple(axes)
        long = [a for a in axes if x.shape[a] > 1]
        if x.id not in reshapes or long != sorted(long):
            return None
        return [_eqn(reshape, reshapes[x.id].args, {"shape": res.shape}, (res,), eqn.source)]
    a, b = eqn.args if len(eqn.args) == 2 and not eqn.params else (None, None)
    if type(a) is not Var or type(b) is not Var or a.id not in reshapes or b.id not in reshapes \
            or len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0] or not a.dtype == b.dtype == res.dtype:
        return None
    u, v = reshapes[a.id].args[0], reshapes[b.id].args[0]
    if a.shape[0] == 1 and b.shape[1] == 1 and u.shape == v.shape == (a.shape[1],):
        prim, shape = dot, ()
    elif a.shape[1] == 1 and ((u.shape == () and v.shape == (b.shape[1],) and a.shape[0] == 1)
                              or (v.shape == () and u.shape == (a.shape[0],) and b.shape[1] == 1)):
        prim, shape = multiply, max(u.shape, v.shape)
        u, v = (v, u) if v.shape == () else (u, v)   # the number first, as dot's own rule writes g * v
    else:
        return None
    flat = fresh(shape, res.dtype)
    return [_eqn(prim, (u, v), {}, (flat,), eqn.source), _eqn(reshape, (flat,), {"shape": res.shape}, (res,), eqn.source)]


def unit_slices_as_ints(program, fresh):
    """A read at a one-element slice, ``x[:, j:j + 1, k]`` (a column kept 2-D, for ``u.T @ v``), as
    the read at the int, ``x[:, j, k]``, reshaped to the slice's shape; and its cotangent,
    ``index_add(acc, g, (:, j:j + 1, k))``, as ``g`` reshaped and added at the int. Reads and chains
    at varying ints are what the classes batch (one gather, one scatter); slice bounds are not, and
    each column was read, and its cotangent added, on its own (18x the hand-written gradient on
    seed 000 written ``(b[:, i:i+1, k].T @ a[:, j:j+1, k])[0, 0]``)."""
    out, changed = [], False
    reshapes, rename = {}, {}   # the reshapes made or met; the reshapes of reshapes back to a shape
    reshaped = set()   # their results (Vars): whether an equation reads one is one C-level test
    returned = {v.id for v in program.outputs if type(v) is Var}
    for eqn in program.eqns:
        if rename:
            eqn = renamed(eqn, rename)
        prim = eqn.prim
        if prim is reshape and type(eqn.args[0]) is Var:
            inner = reshapes.get(eqn.args[0].id)
            if inner is not None:   # a reshape of a reshape (the column's (W, 1) made flat again)
                res = eqn.outs[0]
                if inner.args[0].shape == res.shape and res.id not in returned:
                    rename[res.id] = inner.args[0]
                    changed = True
                    continue
                eqn = _eqn(reshape, inner.args, eqn.params, eqn.outs, eqn.source)
                changed = True
            if type(eqn.args[0]) is Var:
                reshapes[eqn.outs[0].id] = eqn
                reshaped.add(eqn.outs[0])
        elif reshaped and not reshaped.isdisjoint(eqn.uses) and _sinks(eqn, reshapes):
            # an elementwise operation on reshaped columns ((W, 1) from W): on the columns, then reshaped
            src = next(reshapes[a.id].args[0] for a in eqn.args if type(a) is Var and a.shape != ())
            res = eqn.outs[0]
            args = tuple(reshapes[a.id].args[0] if type(a) is Var and a.shape != () else a for a in eqn.args)
            flat = fresh(src.shape, res.dtype)
            out.append(_eqn(prim, args, eqn.params, (flat,), eqn.source))
            out.append(_eqn(reshape, (flat,), {"shape": res.shape}, (res,), eqn.source))
            reshapes[res.id] = out[-1]
            reshaped.add(res)
            changed = True
            continue
        elif prim is sum_ and type(eqn.args[0]) is Var and eqn.args[0].id in reshapes \
                and eqn.params.get("axis") is None and not eqn.params.get("keepdims"):
            eqn = _eqn(sum_, reshapes[eqn.args[0].id].args, eqn.params, eqn.outs, eqn.source)   # every element
            changed = True
        elif prim is transpose and type(eqn.args[0]) is Var and eqn.outs[0].id not in returned \
                and tuple(eqn.params.get("axes") or range(len(eqn.args[0].shape))[::-1]) \
                == tuple(range(len(eqn.args[0].shape))):
            rename[eqn.outs[0].id] = eqn.args[0]   # a transpose that moves nothing (``u.T`` of a vector)
            changed = True
            continue
        elif reshapes and (prim is transpose or prim is matmul or prim is dot):
            made = _reshaped_product(eqn, reshapes, fresh)
            if made is not None:
                out.extend(made)
                reshapes[eqn.outs[0].id] = made[-1]
                changed = True
                continue
        if prim is getitem or prim is index_add:   # (an index with staged values is left alone: _vars_in,
            x = eqn.args[0]                         # asked last, as most reads are no candidate)
            shape = getattr(x, "shape", None)
            if prim is index_add and type(x) is np.ndarray and (_is_zeros_view(x) or 0 < x.size <= 1024 and not x.any()) \
                    and type(eqn.args[1]) is Var \
                    and eqn.args[1].dtype == eqn.outs[0].dtype and _covers(eqn.params["index"], shape) \
                    and eqn.args[1].shape == _read_shape(eqn.params["index"], shape) \
                    and not _vars_in(eqn.params["index"], []):
                # zeros written everywhere (the cotangent of ``(u.T @ v)[0, 0]``): the values reshaped
                out.append(_eqn(reshape, (eqn.args[1],), {"shape": shape}, eqn.outs, eqn.source))
                reshapes[eqn.outs[0].id] = out[-1]
                changed = True
                continue
            if prim is getitem and type(x) is Var and x.id in reshapes and eqn.outs[0].id not in returned \
                    and reshapes[x.id].args[0].shape == eqn.outs[0].shape and _covers(eqn.params["index"], shape):
                rename[eqn.outs[0].id] = reshapes[x.id].args[0]   # ``(u.T @ v)[0, 0]``: the dot product itself
                changed = True
                continue
            for i in (eqn.params["index"] if type(eqn.params["index"]) is tuple else (eqn.params["index"],)):
                if i is None or type(i) is np.ndarray or type(i) is slice and (
                        i.start is not None or i.stop is not None or i.step is not None):
                    break
            else:   # (most reads, x[:, j, k]) neither _basic_form nor a bounded slice: nothing to write as ints
                out.append(eqn)
                continue
            basic = None if shape is None else _basic_form(eqn.params["index"], shape)
            given = eqn.params["index"] if basic is None else basic
            index = None if shape is None or not _bounded_slice(given) else _unit_slices_as_ints(given, shape)
            index = basic if index is None else index
            if index is not None and not _vars_in(eqn.params["index"], []):
                res = eqn.outs[0]
                kept = _read_shape(index, shape)
                if prim is getitem:
                    picked = fresh(kept, res.dtype)
                    out.append(_eqn(getitem, (x,), {**eqn.params, "index": index}, (picked,), eqn.source))
                    out.append(_eqn(reshape, (picked,), {"shape": res.shape}, (res,), eqn.source))
                    reshapes[res.id] = out[-1]
                    reshaped.add(res)
                    changed = True
                    continue
                g = eqn.args[1]
                read = _read_shape(eqn.params["index"], shape) if basic is None else \
                    np.broadcast_to(np.zeros((), np.int8), shape)[eqn.params["index"]].shape
                if np.shape(g) == read:   # not a broadcast value
                    if type(g) is Var and g.id in reshapes and reshapes[g.id].args[0].shape == kept:
                        flat = reshapes[g.id].args[0]   # g made from a value of the int's read shape
                    elif type(g) is Var:
                        flat = fresh(kept, g.dtype)
                        out.append(_eqn(reshape, (g,), {"shape": kept}, (flat,), eqn.source))
                    else:
                        flat = np.reshape(g, kept)
                    out.append(_eqn(index_add, (x, flat), {**eqn.params, "index": index}, eqn.outs, eqn.source))
                    changed = True
                    continue
        out.append(eqn)
    if not changed:
        return program
    outputs = [substitute(v, rename) for v in program.outputs] if rename else program.outputs
    return dce(Program(program.inputs, out, outputs))


def compose_basic_indexing(program, fresh):
    """``x[i1][i2]`` at constant ints and slices as ``x[i]`` for an input ``x`` (the reads of reads of
    the backward, ``ct[:, :, k][:, j]`` of nested stacks, are batched level by level as they are: taken
    as one read, the lane order that the backward's classes choose reverses); ``index_add(base, v, i1)``
    with ``v`` a chain of ``index_add`` into zeros as that chain added into ``base`` at the composed
    indices; a read of a stack at an int on its axis as a read of that input."""
    producers, out, dropped, changed = {}, [], set(), False
    counts = None   # read counts, taken when a chain first needs them
    inputs = {v.id for v in program.inputs if type(v) is Var}
    for eqn in program.eqns:
        if eqn.prim is getitem and type(eqn.args[0]) is Var:
            inner = producers.get(eqn.args[0].id)
            if inner is not None and inner.prim is getitem and type(inner.args[0]) is Var and inner.args[0].id in inputs \
                    and not _vars_in(inner.params["index"], []) and not _vars_in(eqn.params["index"], []):
                index = _composed_index(inner.args[0].shape, inner.params["index"], eqn.params["index"])
                if index is not None:
                    eqn = _eqn(getitem, (inner.args[0],), {**eqn.params, "index": index}, eqn.outs, eqn.source)
                    changed = True
            elif inner is not None and inner.prim is stack and not _vars_in(eqn.params["index"], []):
                shape = inner.outs[0].shape
                axes = _basic_axes(eqn.params["index"], shape)
                axis = inner.params.get("axis", 0) % len(shape)
                if axes is not None and type(axes[axis]) is not tuple and type(inner.args[axes[axis]]) is Var:
                    x = inner.args[axes[axis]]
                    index = _index_of(axes[:axis] + axes[axis + 1:], x.shape)
                    if index is not None:
                        eqn = _eqn(getitem, (x,), {**eqn.params, "index": index}, eqn.outs, eqn.source)
                        changed = True
        elif eqn.prim is index_add and len(eqn.args) == 2 and type(eqn.args[1]) is Var \
                and eqn.args[1].id in producers and not _vars_in(eqn.params["index"], []):
            base, v = eqn.args
            if counts is None:
                counts = use_counts(program.eqns, program.outputs)
            chain = _zero_chain(v, producers, counts)
            outer = _basic_axes(eqn.params["index"], base.shape) if chain is not None else None
            if outer is not None and chain[1].shape == tuple(a[2] for a in outer if type(a) is tuple) \
                    and chain[1].dtype == eqn.outs[0].dtype:
                links = chain[0]
                indices = [_composed_index(base.shape, eqn.params["index"], link.params["index"]) for link in links]
                if all(i is not None for i in indices):
                    acc = base
                    for k, (link, index) in enumerate(zip(links, indices)):
                        res = eqn.outs[0] if k == len(links) - 1 else fresh(eqn.outs[0].shape, eqn.outs[0].dtype)
                        made = _eqn(index_add, (acc, link.args[1]), {**link.params, "index": index}, (res,),
                                    link.source)
                        out.append(made)
                        producers[res.id] = made
                        dropped.add(link.outs[0].id)
                        acc = res
                    changed = True
                    continue
        out.append(eqn)
        if eqn.prim is getitem or eqn.prim is stack or eqn.prim is index_add:   # the only producers looked up
            producers[eqn.outs[0].id] = eqn
    if not changed:
        return program
    return dce(Program(program.inputs, [e for e in out if e.outs[0].id not in dropped], program.outputs))

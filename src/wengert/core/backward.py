"""The backward half of the engine: one reverse loop over the tape, and cotangent accumulation.

Three rules keep the backward pass a small multiple of the forward pass:

* Absent means zero. A node that received no cotangent is skipped; no zero array is made for it.
* The first contribution to a node is stored as it is. A second one makes a buffer the accumulator
  owns; every later one is added into that buffer in place. A first contribution that only the
  pass holds (``_sole``: a rule's fresh array) is added into in place without the copy.
* Reads through indexing (``x[:, j]``, ``x[mask]``) send back an ``indexed_cotangent``, not a
  dense array of zeros. All of them land in one buffer for the parent, with a slice add.

When the cotangents are themselves traced (the backward pass of an inner transform recorded by an
outer one), accumulation is out of place, through wengert operations, so it can be differentiated.
"""
from __future__ import annotations

import sys

import numpy as np

from . import namespace
from .errors import NeedsLoop
from .trace import OBSERVER, Tracer, _Select, is_batched


def indexed_cotangent(index, g, shape, dtype):
    """The cotangent that a read ``x[index]`` sends back to ``x``: ``g`` at ``index``, zero elsewhere.

    A plain tuple (no other cotangent is one), because it is made once per read in loops over
    views, where a few hundred nanoseconds per read are the whole budget.
    """
    return (index, g, shape, dtype)


def is_basic(index):
    """True when ``index`` selects a view (ints, slices, None, Ellipsis): no element repeats."""
    if type(index) is not tuple:
        index = (index,)
    for i in index:
        if not (i is None or i is Ellipsis or type(i) is slice or isinstance(i, (int, np.integer))):
            return False
    return True


def is_plain_basic(index):
    """An index of ints and slices only (a view, and no tracer in it)."""
    kind = type(index)
    if kind is tuple:
        for i in index:
            if type(i) is not int and type(i) is not slice:
                return False
        return True
    return kind is int or kind is slice


def _add_at(buffer, index, g):
    """``buffer[index] += g``, adding repeated indices (advanced indexing) as many times as they occur."""
    if is_basic(index):
        view = buffer[index]
        if type(view) is np.ndarray:
            view += g
        else:
            buffer[index] = view + g
    elif type(buffer) is np.ndarray:
        np.add.at(buffer, index, g)
    else:   # another library's array: its scatter-add, or a clear refusal (Dask has none)
        namespace.scatter_add(buffer, index, g, "an indexed read x[index]")


def _dense(c):
    index, g, shape, dtype = c
    if type(g) is np.ndarray or not namespace.is_foreign(g):
        buffer = np.zeros(shape, np.result_type(dtype, g.dtype) if hasattr(g, "dtype") else dtype)
    else:   # zeros in g's namespace and on its device
        buffer = namespace.zeros(shape, namespace.result_type(g, dtype), g)
    _add_at(buffer, index, g)
    return buffer


def accumulate(cts, owned, i, c):
    """Add contribution ``c`` to the cotangent of tape entry ``i``."""
    old = cts[i]
    kind = type(c)
    if kind is tuple:
        if old is None:
            cts[i] = _dense(c)
            owned[i] = 1
        elif type(old) is Tracer:
            cts[i] = old + _dense(c)
        else:
            if not owned[i]:
                old = cts[i] = namespace.copy(old, namespace.result_type(old, c[1]))
                owned[i] = 1
            try:
                _add_at(old, c[0], c[1])
            except TypeError:  # a complex contribution into a real buffer
                old = cts[i] = old.astype(np.result_type(old, c[1]))
                _add_at(old, c[0], c[1])
        return
    if kind is _Select:
        if old is None:
            old = cts[i] = [None] * c.count
        prev = old[c.position]
        old[c.position] = c.g if prev is None else prev + c.g
        return
    if old is None:
        cts[i] = c
    elif owned[i] and kind is not Tracer and type(old) is np.ndarray:
        try:
            np.add(old, c, out=old)
        except TypeError:  # a complex contribution into a real buffer
            cts[i] = old + c
    elif kind is np.ndarray and type(old) is np.ndarray and old.shape == c.shape and old.dtype == c.dtype \
            and _sole(old):
        old += c   # a rule's fresh array that only the pass holds (as _backward's inline case): no copy
        owned[i] = 1
    else:
        new = old + c
        cts[i] = new
        owned[i] = type(new) is np.ndarray


def _refs(x):
    return _getrefcount(x)


def _calibrate():
    cts = [np.empty(1)]
    old = cts[0]
    return _refs(old)


_getrefcount = sys.getrefcount
_SOLE = _calibrate()   # references to an array held by the cotangent list and one local name


def _sole(old):
    """Is ``old`` (read from the cotangent list into a local name, as the pass does) an array that
    nothing else holds: not the caller's, not the tape's, not another entry's cotangent, no view's
    base, writable? Then the pass may add into it in place, as into a buffer it made (``owned``):
    a rule's fresh result (einsum's, a product's) is not copied before a second contribution lands
    in it. The count is calibrated on this interpreter (``_calibrate``: the same list slot and
    local name), as NumPy's own elision of temporaries counts references."""
    return old.base is None and _refs(old) == _SOLE + 1 and old.flags.writeable


def _carries_a_batch(g):
    """Is ``g`` (or an element of a multiple-result cotangent) a value of a vmap level?"""
    if type(g) is tuple or type(g) is list:
        return any(_carries_a_batch(x) for x in g)
    return is_batched(g)


def backward(tape, seeds, keep_tape=False):
    """Propagate ``seeds`` (pairs of tape index and cotangent) to every entry of ``tape``.

    Returns the list of cotangents, indexed like the tape; only inputs' entries are left filled.
    Unless ``keep_tape``, nodes are dropped as they are used, so memory is released during the pass.
    An engine observer (the profiler) sees the pass through its ``backward`` hook.
    """
    observer = OBSERVER[0]
    if observer is not None:
        return observer.backward(tape, lambda add=accumulate: _backward(tape, seeds, keep_tape, add))
    return _backward(tape, seeds, keep_tape, accumulate)


def _backward(tape, seeds, keep_tape, accumulate=accumulate):
    n = len(tape)
    cts = [None] * n
    owned = bytearray(n)
    for index, ct in seeds:
        if cts[index] is None and type(ct) is not tuple and type(ct) is not _Select and accumulate is _ACCUMULATE:
            cts[index] = ct   # stored as it is (as accumulate would): one seed per output, maybe thousands
        else:
            accumulate(cts, owned, index, ct)
    # Storing a first contribution is written out below (the common case of every entry), unless
    # an observer measures accumulation with an accumulator of its own.
    inline = accumulate is _ACCUMULATE
    for i in range(n - 1, -1, -1):
        g = cts[i]
        if g is None:
            continue
        prim, args, ans, params, parents = tape[i]
        if prim is None:
            continue
        if type(g) is not _ndarray and not prim.batched_vjp and _carries_a_batch(g):
            # inside vmap, a cotangent with a batch axis reached a rule not checked on batched values
            # (vmap runs the function once per example instead)
            raise NeedsLoop(f"the VJP rule of {prim.name} is not checked on vmap's batched values")
        cts[i] = None
        if not keep_tape:
            tape[i] = None
        if prim.multiple_results:
            g = tuple(
                namespace.zeros_like(a) if gi is None and type(a) is not Tracer
                else (a * 0 if gi is None else gi)
                for gi, a in zip(g, ans)
            )
        if type(g) is Tracer and prim.owned_vjp is not None and inline and g._trace.staged \
                and is_plain_basic(params["index"]):
            # a write under jit: x's cotangent (g zeroed at the write) is a new sample the pass holds
            # alone (owned 2), which the chain's next write zeroes in place (owned_vjp): staging a
            # loop of writes copies the cotangent's sample once, not once per write
            if owned[i] == 2:
                pieces = prim.owned_vjp(g, ans, args, params, parents)
            elif type(g.value) is _ndarray or isinstance(g.value, np.generic):
                # the chain's first write: its rule gets g over a copy of g's sample, which the pass
                # then holds alone (the copy the zeroing makes otherwise)
                pieces = prim.owned_vjp(g._trace.own(g), ans, args, params, parents)
            elif prim._fused_vjp is not None:
                pieces = prim._fused_vjp(g, ans, args, params, parents)
            else:
                pieces = [prim._vjp[position](g, ans, *args, **params) for position, _ in parents]
            for (position, parent), c in zip(parents, pieces):
                if c is not None:
                    if cts[parent] is None:
                        cts[parent] = c
                        owned[parent] = 2 if position == 0 else 0
                    else:
                        accumulate(cts, owned, parent, c)
            continue
        if prim._fused_vjp is not None:
            if prim.owned_vjp is not None and type(g) is _ndarray:
                if prim.element_write is prim.owned_vjp and inline and params["value_shape"] == ():
                    # x[i, j] = v of one element (the loop out[i, j] = dot(u, w)), the owned rule written
                    # out: v gets g[i, j] (a NumPy scalar, a copy), x gets g zeroed there, in place
                    index = params["index"]
                    piece = g[index]
                    if type(piece) is not _ndarray:
                        if not owned[i]:
                            g = np.array(g)
                        g[index] = 0
                        parent = parents[0][1]   # core/mutation.py records (0, x), then (1, v) if v is traced
                        if cts[parent] is None:
                            cts[parent] = g
                            owned[parent] = 1
                        else:
                            accumulate(cts, owned, parent, g)
                        if len(parents) == 2:
                            parent = parents[1][1]
                            if cts[parent] is None:
                                cts[parent] = piece
                            else:
                                accumulate(cts, owned, parent, piece)
                        continue
                # The rule may pass g on, changed in place, to a receiver that owns it in turn, so a
                # chain of in-place writes copies the cotangent once, not once per write.
                if not owned[i]:
                    g = np.array(g)
                for (position, parent), c in zip(parents, prim.owned_vjp(g, ans, args, params, parents)):
                    if c is not None:
                        if inline and cts[parent] is None and type(c) is not tuple and type(c) is not _Select:
                            cts[parent] = c   # a first contribution, stored as it is (owned if it is g)
                            if c is g:
                                owned[parent] = 1
                            continue
                        fresh = cts[parent] is None
                        accumulate(cts, owned, parent, c)
                        if fresh and c is g:
                            owned[parent] = 1
                continue
            for (position, parent), c in zip(parents, prim._fused_vjp(g, ans, args, params, parents)):
                if c is not None:
                    if inline and cts[parent] is None and type(c) is not tuple and type(c) is not _Select:
                        cts[parent] = c
                    else:
                        accumulate(cts, owned, parent, c)
            c = None   # held by no stale name: the next entry may find the piece held by the pass alone (_sole)
            continue
        if prim.indexed_read is not None and inline and type(g) is _ndarray and prim._vjp[0] is prim.indexed_read:
            # x[index] read in a loop: g added at index into x's buffer, as _add_at would (a view),
            # for an index of ints and slices (is_plain_basic, written out)
            index = params["index"]
            kind = type(index)
            if kind is tuple:
                plain = True
                for k in index:
                    if type(k) is not int and type(k) is not slice:
                        plain = False
                        break
            else:
                plain = kind is int or kind is slice
        else:
            plain = False
        if plain:
            parent = parents[0][1]
            old = cts[parent]
            if old is None:
                x = args[0]
                old = cts[parent] = np.zeros(x.shape, np.result_type(x.dtype, g.dtype))
                owned[parent] = 1
                old[index] = g
                continue
            if type(old) is _ndarray and (owned[parent] or (old.dtype == g.dtype and _sole(old))):
                owned[parent] = 1
                view = old[index]
                try:
                    if type(view) is _ndarray:
                        view += g
                    else:
                        old[index] = view + g
                    continue
                except TypeError:   # a complex cotangent into a real buffer: accumulate's
                    pass
            x = args[0]
            accumulate(cts, owned, parent, indexed_cotangent(index, g, x.shape, x.dtype))
            continue
        if prim.indexed_read is not None and type(g) is Tracer and g._trace.staged and inline \
                and prim._vjp[0] is prim.indexed_read and is_plain_basic(params["index"]):
            # the same read under jit: one staged index_add per read into the parent's accumulator
            # (owned 2: an index_add this loop made, whose sample jit may update in place)
            parent = parents[0][1]
            old = cts[parent]
            if old is None:
                c = prim.indexed_read(g, ans, args[0], params["index"])
                cts[parent] = c
                owned[parent] = 2 if type(c) is Tracer and c._trace is g._trace else 0
                continue
            new = g._trace.add_at(old, owned[parent] == 2, g, params["index"])
            if new is not None:
                cts[parent] = new
                owned[parent] = 2
                continue
        rules = prim._vjp
        size = -1 if params else len(args)   # positional calls spelled out for the common sizes
        for position, parent in parents:
            if size == 2:
                c = rules[position](g, ans, args[0], args[1])
            elif size == 1:
                c = rules[position](g, ans, args[0])
            else:
                c = rules[position](g, ans, *args, **params)
            if c is not None:
                if inline:
                    # accumulate's commonest cases, inlined: an array's first contribution is stored
                    # as it is; a later one is added into the buffer the pass owns
                    kind = type(c)
                    old = cts[parent]
                    if old is None:
                        if kind is not tuple and kind is not _Select:
                            cts[parent] = c
                            continue
                    elif not owned[parent]:
                        if kind is _ndarray and type(old) is _ndarray and old.shape == c.shape \
                                and old.dtype == c.dtype and _sole(old):
                            old += c   # a rule's fresh array that only the pass holds: no copy
                            owned[parent] = 1
                            continue
                        if kind is not tuple and kind is not _Select:
                            # a second contribution (or any to a 0-d input: NumPy scalars, never
                            # owned): a new sum, owned when it is an array
                            new = old + c
                            cts[parent] = new
                            owned[parent] = type(new) is _ndarray
                            continue
                    elif kind is _ndarray and type(old) is _ndarray:
                        try:
                            old += c   # np.add(old, c, out=old) without the call's lookups and keyword
                            continue
                        except TypeError:   # a complex contribution into a real buffer: accumulate's
                            pass
                accumulate(cts, owned, parent, c)
    return cts


_ACCUMULATE = accumulate
_ndarray = np.ndarray

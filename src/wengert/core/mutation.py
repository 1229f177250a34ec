"""In-place writes into traced arrays (``x[idx] = v``), with NumPy's meaning and no wrong gradients.

A write changes the array's memory, as NumPy would, so ``x`` and every view of it see the new
values. On the tape it becomes one entry, ``x_new = write(x_old, v, index)``, and the tracer
``x`` is moved to that entry, so later uses of ``x`` differentiate through the write.

A write through a view (``x[i][j] = v``) is rebased onto the tracer holding the whole array
(``write_through_view``), and a view made before a write is taken again from that tracer when it
is next used (``refresh``), so views keep NumPy's meaning with their gradients.

Two situations would make such a write give a silently wrong gradient; each raises instead:

* an earlier tape entry saved this memory for its VJP (``y = sin(x); x[0] = 0``): checked at
  the write, against the entries' kept values (read for their values, not only their shapes);
* the memory belongs to an input of the transform: writing would change the caller's array.

(A view wengert cannot express as an index of its base, one of another dtype such as ``y.real``,
raises when written through or used after a write.)
"""
from __future__ import annotations

import sys
import weakref

import numpy as np

from . import tree
from .errors import LeakedTracerError, NeedsLoop, WengertError
from .trace import Tracer, _new, is_batched


class InPlaceWriteError(WengertError, RuntimeError):
    pass


class BatchedInPlaceWriteError(InPlaceWriteError, NeedsLoop):
    """A write the batched run cannot record (a NeedsLoop, so vmap runs the function once per
    example instead, where the write is under a single transform)."""


ADVICE = ("Use x.at[idx].set(v), which returns a new array, or write into a copy "
          "(x = x.copy()) or a wengert.Buffer.")


def root(array):
    """The array that owns ``array``'s memory."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array


def memory_of(value):
    """The array that owns the memory of ``value``'s innermost value: through the tracers of outer
    levels (under ``jit(grad(f))`` a tape's values are jit's staged tracers, whose samples jit
    writes in place when it stages the write)."""
    while type(value) is Tracer:
        value = value.value
    return root(value)


def staged_or_plain(value):
    """Is ``value`` plain, or a jit-staged tracer of a plain value (a write into it is staged)?"""
    return type(value) is not Tracer or (value._trace.staged and type(value.value) is not Tracer)


def _scan_saved(trace):
    """Bring ``trace.saved`` (memory that tape entries keep for their values) up to date.

    Incremental: each entry is read once, at the first write after it was recorded. Most entries
    keep no array for its values (dropped, Metadata, plain numbers), so the loop only tests types;
    an array's memory is found without a call in the common cases (it owns its memory, or its base
    does).
    """
    saved = trace.saved
    if saved is None:
        saved = trace.saved = {}
    tape = trace.tape
    end = len(tape)
    ndarray = np.ndarray
    for i in range(trace.scanned, end):
        prim, args, ans, params, parents = tape[i]
        if prim is None:
            continue
        name = None
        if ans is not None:
            for a in (ans if prim.multiple_results else (ans,)):
                if type(a) is Tracer:   # under jit: the staged value's sample
                    a = memory_of(a)
                if isinstance(a, ndarray):
                    saved.setdefault(id(root(a)), prim.name)
        if args:
            flags = prim.value_args
            skip = None   # positions no rule that runs reads for its values (Primitive.plan), found once needed
            k = -1
            for a in args:
                k += 1
                if a is None or (flags is not None and k < len(flags) and not flags[k]):
                    continue
                if skip is None:
                    skip = _not_read_by_value(prim, parents)
                if k in skip:
                    continue
                kind = type(a)
                if kind is ndarray:
                    base = a.base
                    if base is not None:
                        a = base if type(base) is ndarray and base.base is None else root(base)
                elif kind is Tracer:
                    a = memory_of(a)
                    if not isinstance(a, ndarray):
                        continue
                elif isinstance(a, ndarray):
                    a = root(a)
                else:
                    continue
                if name is None:
                    name = prim.name
                saved.setdefault(id(a), name)
    trace.scanned = end


def _not_read_by_value(prim, parents):
    """The argument positions of an entry with traced arguments at ``parents`` that the rules which
    run read only for their shapes, or not at all (``x[0] * 3.0`` keeps a small ``x[0]`` that only
    the rule of ``3.0``, never run, would read): a write into their memory changes no gradient."""
    plans = prim.plans
    if plans is None:
        return ()
    traced = 0
    for position, _ in parents:
        traced |= 1 << position
    plan = plans.get(traced) or prim.plan(traced)
    trims = plan[1]
    return () if trims is None else trims[1] + trims[2]


def memory_key(value):
    """``id(memory_of(value))``, without a call in the common cases (an array that owns its memory,
    or whose base does)."""
    if type(value) is np.ndarray:
        base = value.base
        if base is None:
            return id(value)
        if type(base) is np.ndarray and base.base is None:
            return id(base)
    return id(memory_of(value))


def check_not_stale(trace, args, prim):
    """Bring up to date each tracer of ``args`` made before an in-place write into its memory
    (``refresh``); True when one was (its tape index or variable changed)."""
    written = trace.written
    moved = False
    for a in args:
        if type(a) is Tracer and a._trace is trace:
            key = memory_key(a.value)
            written_at = written.get(key)
            if written_at is not None and a.index < written_at:
                refresh(trace, a, key, prim)
                moved = True
    return moved


def _refuse_stale(prim):
    raise InPlaceWriteError(
        f"{prim.name} uses a view of an array that was changed in place after the view was "
        "made, and wengert cannot express the view as an index of that array (a view of another "
        "dtype, such as x.real of a complex array); the "
        "view's gradient would flow to the old values. Take the view again after the write, or "
        "copy it before the write (v = x[...].copy()). " + ADVICE
    )


def stale_guard(trace, args, prim):
    """A tape's guard once it has in-place writes: ``check_not_stale`` for the values made before
    the latest write (``trace.last_write``, a tape index). A value made after it cannot be a view
    that a write overtook, so the common case costs one comparison per argument. True when a
    tracer was brought up to date (bind then reads the arguments' tape indices again)."""
    last = trace.last_write
    moved = False
    for a in args:
        if type(a) is Tracer and a.index < last and a._trace is trace:
            # memory_key(a.value), written out: every operand of every operation after a write asks
            value = a.value
            while type(value) is Tracer:   # under jit(grad(f)): the staged value's sample
                value = value.value
            base = value.base if type(value) is np.ndarray else value
            if base is None:
                key = id(value)
            elif type(base) is np.ndarray and base.base is None:
                key = id(base)
            else:
                key = id(root(base))
            written_at = trace.written.get(key)
            if written_at is not None and a.index < written_at:
                refresh(trace, a, key, prim)
                moved = True
    return moved


# --- writes through views --------------------------------------------------------------------------
# A write into a view (``out[i][j] = v``, ``row = out[i]; row[j] = v``, ``out.T[i] = v``) is a write
# into the array the view looks at: it is rebased onto the tracer that holds that whole array (its
# *owner*) with the index the view's layout composes to (``out[i, j] = v``), so it is the same tape
# entry, forward-mode write or staged scatter as that spelling. Every tracer of the memory made before
# a write (the view written through, other views, other holders) is stale afterwards: at its next use
# it is derived again from the owner (``refresh``), so it reads the new values with their gradient.

def note_owner(trace, x, key):
    """``x`` holds the whole memory ``key`` and was just written: later writes through views of it,
    and the views made before, are rebased onto ``x`` (``trace.owners``, dropped when the level closes)."""
    owners = trace.owners
    if owners is None:
        owners = trace.owners = {}
    owners[key] = x


def _sample(value):
    while type(value) is Tracer:
        value = value.value
    return value


def _address(a):
    return a.__array_interface__["data"][0]


def _same_layout(sample, memory):
    """Does the array ``sample`` lay over its memory as the array ``memory`` does?"""
    return sample is memory or (sample.shape == memory.shape and sample.strides == memory.strides
                                and sample.dtype == memory.dtype and _address(sample) == _address(memory))


def _whole(sample, memory):
    """Does the array ``sample`` hold all of ``memory``, element for element in C order (as it is, or
    reshaped: a reshape NumPy had to copy is a view of its copy)?"""
    return _same_layout(sample, memory) or (
        sample.size == memory.size and sample.dtype == memory.dtype and sample.flags.c_contiguous
        and memory.flags.c_contiguous and _address(sample) == _address(memory))


def view_target(x):
    """The memory that ``x``'s value is a partial view of (a NumPy array), or None when it holds its
    whole memory (or is no array)."""
    sample = _sample(x.value)
    if type(sample) is not np.ndarray or sample.base is None:
        return None
    memory = root(sample)
    if not isinstance(memory, np.ndarray) or _whole(sample, memory):
        return None
    return memory


def _owner(trace, x, memory):
    """The tracer of ``trace`` holding ``memory`` whole that a write through the view ``x`` goes to:
    the last one written, or the tracer ``x`` was taken from (its ``src`` chain, set by indexing,
    transpose and reshape)."""
    owners = trace.owners
    owner = owners.get(id(memory)) if owners else None
    if owner is not None:
        return owner
    t = x
    while True:
        src = getattr(t, "src", None)
        if type(src) is not Tracer or src._trace is not trace:
            break
        t = src
    sample = _sample(t.value)
    if type(sample) is np.ndarray and root(sample) is memory and _whole(sample, memory):
        return t
    raise InPlaceWriteError(
        "x[...] = v writes through a view that wengert cannot follow back to the array it looks at "
        "(a view made by an operation other than indexing, transpose, reshape and flip, such as "
        "x.real of a complex array); write into that array itself (y[idx] = v, with the index the "
        "view would have added) or take the values out first (v = view.copy()). " + ADVICE)


def _plain_basic_parts(index):
    """``index`` as a tuple of ints, slices of ints, None and Ellipsis, or None when it holds anything
    else (arrays, masks, traced values): those writes go through a functional scatter of the view."""
    parts = index if type(index) is tuple else (index,)
    for i in parts:
        kind = type(i)
        if kind is int or i is None or i is Ellipsis:
            continue
        if kind is slice:
            if all(b is None or type(b) is int or isinstance(b, np.integer) for b in (i.start, i.stop, i.step)):
                continue
            return None
        if isinstance(i, np.integer) and kind is not np.bool_:
            continue
        return None
    return parts


def _layout_index(piece, memory):
    """``piece`` (a view of ``memory``) as ``memory[index]``, its axes reordered: (index, order, shape)
    where ``memory[index]`` has ``shape`` (``piece``'s axes longer than one, in ``memory``'s axis order)
    and ``order`` lists which of those axes each of ``piece``'s longer-than-one axes is; None when no
    index of ints and slices reaches exactly ``piece``'s elements (a reshape that merged axes).

    ``piece``'s first element is at a byte offset that the memory's strides split into one start per
    axis, and each of its axes steps along one axis of the memory: ``memory[index]`` then has
    ``piece``'s offset, lengths and strides, so it is the same elements (no check needed)."""
    size = memory.itemsize
    offset = _address(piece) - _address(memory)
    shape, strides = memory.shape, memory.strides
    axes = sorted((a for a in range(len(shape)) if shape[a] > 1), key=strides.__getitem__, reverse=True)
    if offset % size:
        return None
    starts = [0] * len(shape)
    for a in axes:
        stride = strides[a]
        if stride <= 0 or stride % size:
            return None
        starts[a], offset = divmod(offset, stride)
        if starts[a] >= shape[a]:
            return None
    if offset:
        return None
    used = {}   # memory axis -> (step, length)
    long_axes = []   # the memory axis of each of piece's axes longer than one
    for length, stride in zip(piece.shape, piece.strides):
        if length == 1:
            continue
        for a in axes:
            if a in used or stride % strides[a]:
                continue
            step = stride // strides[a]
            last = starts[a] + step * (length - 1)
            if step and 0 <= last < shape[a]:
                used[a] = (step, length)
                long_axes.append(a)
                break
        else:
            return None
    index = []
    for a in range(len(shape)):
        if a in used:
            step, length = used[a]
            stop = starts[a] + step * length
            index.append(slice(starts[a], stop if stop >= 0 else None, step))
        else:
            index.append(starts[a])
    in_order = sorted(long_axes)
    return tuple(index), tuple(in_order.index(a) for a in long_axes), tuple(used[a][1] for a in in_order)


def _positions(piece, memory):
    """The index arrays of ``memory`` at ``piece``'s elements (an advanced index of ``piece``'s shape),
    for a view no index of ints and slices reaches."""
    size = memory.itemsize
    if memory.flags.c_contiguous:
        order = "C"
    elif memory.flags.f_contiguous:
        order = "F"
    else:
        return None
    flat = np.asarray((_address(piece) - _address(memory)) // size, dtype=np.intp)
    for k, (length, stride) in enumerate(zip(piece.shape, piece.strides)):
        axis = np.arange(length, dtype=np.intp) * (stride // size)
        flat = flat + axis.reshape((length,) + (1,) * (piece.ndim - k - 1))
    return np.unravel_index(np.broadcast_to(flat, piece.shape), memory.shape, order=order)


def _place(piece, memory):
    """Where ``piece`` lies in ``memory``, as ``_layout_index`` gives it (index, order, shape); for a
    view no basic index reaches, the index arrays of ``_positions`` (already in ``piece``'s shape and
    order); None when neither reaches it."""
    found = _layout_index(piece, memory)
    if found is not None:
        return found
    positions = _positions(piece, memory)
    if positions is None:
        return None
    return positions, tuple(range(piece.ndim)), piece.shape


def write_through_view(x, index, value, memory):
    """``x[index] = value`` where ``x`` views part of ``memory``: the write goes to the owner of
    ``memory`` (``_owner``) at the composed index; ``x`` and the other views are refreshed at their
    next use."""
    trace = x._trace
    if not _sample(x.value).flags.writeable:   # NumPy's error for a read-only view (np.diagonal, broadcast_to)
        raise ValueError("assignment destination is read-only")
    parts = _plain_basic_parts(index)
    if parts is None:   # x[mask] = v, x[[0, 2]] = v: the view written functionally, then put back whole
        if trace.written is not None:
            check_not_stale(trace, (x,), _setitem_name)
        return write_through_view(x, Ellipsis, x.at[index].set(value), memory)
    owner = _owner(trace, x, memory)
    whole = _sample(owner.value)   # memory, maybe reshaped (_whole)
    sample = _sample(x.value)
    piece = sample[parts if Ellipsis in parts else parts + (Ellipsis,)]   # a view, even of one element
    if piece.size == 0:
        return None
    found = _place(piece, whole)
    if found is None:
        _owner_unreachable()
    target, order, shape = found
    if piece.shape != shape or order != tuple(range(len(order))):
        value = np.broadcast_to(value, _value_shape(value, piece.shape))
        value = np.transpose(np.reshape(value, tuple(n for n in piece.shape if n != 1)), _inverse(order))
    owner[target] = value
    return None


def _value_shape(value, shape):
    """``shape``, or NumPy's error for a value that does not broadcast to it (leading ones dropped,
    as an assignment does)."""
    have = tuple(np.shape(_sample(value)) if type(value) is Tracer else np.shape(value))
    while len(have) > len(shape) and have[0] == 1:
        have = have[1:]
    if np.broadcast_shapes(have, shape) != tuple(shape):   # (a ValueError too where they do not broadcast)
        raise ValueError(f"could not broadcast input array from shape {have} into shape {tuple(shape)}")
    return shape


def _inverse(order):
    inverse = [0] * len(order)
    for k, a in enumerate(order):
        inverse[a] = k
    return tuple(inverse)


def _owner_unreachable():
    raise InPlaceWriteError(
        "x[...] = v writes through a view that is not a regular part of the array it looks at; "
        "write into that array with one index (x[i, j] = v rather than x[i][j] = v). " + ADVICE)


def refresh(trace, a, key, prim):
    """Bring the tracer ``a``, made before the latest write into its memory ``key``, up to date: a
    holder of the whole memory takes the owner's place; a view is taken again from the owner by the
    index its layout composes to (so it reads the new values, and their gradient)."""
    owners = trace.owners
    owner = owners.get(key) if owners else None
    if owner is None:
        _refuse_stale(prim)
    sample = _sample(a.value)
    memory = _sample(owner.value)
    if type(sample) is not np.ndarray or type(memory) is not np.ndarray or sample.dtype != memory.dtype:
        _refuse_stale(prim)
    if _same_layout(sample, memory):
        a.value = owner.value
        fresh = owner
    elif _whole(sample, memory):
        fresh = np.reshape(owner, sample.shape)
    else:
        found = _place(sample, memory)
        if found is None:
            _refuse_stale(prim)
        target, order, shape = found
        fresh = owner[target]
        if order != tuple(range(len(order))):
            fresh = np.transpose(fresh, order)
        if sample.shape != shape:
            fresh = np.reshape(fresh, sample.shape)
    a.index = fresh.index
    if trace.computes:
        a.aux = getattr(fresh, "aux", None)


class _Named:
    def __init__(self, name):
        self.name = name


_setitem_name = _Named("x[...] = v")
_output_name = _Named("the function's result")


def settled(trace, out):
    """The result ``out`` of the function a transform runs at ``trace``, its tracers that are views
    made before an in-place write into their memory brought up to date (``refresh``) while the
    level is open."""
    if trace.written:
        for leaf in tree.flatten(out)[0]:
            if type(leaf) is Tracer and leaf._trace is trace:
                check_not_stale(trace, (leaf,), _output_name)
    return out


def refuse_writes_into_inputs(trace, memory):
    """An input of a transform is the caller's array: writing into it (or a view of it) is refused.
    The inputs' memory is found once per trace (again only when inputs were added): a loop of 32k
    writes under jit with 260 inputs had walked every input's bases at every write."""
    inputs = trace.inputs
    cached = _INPUT_ROOTS.get(trace)
    if cached is None or cached[0] != len(inputs):
        cached = _INPUT_ROOTS[trace] = (len(inputs), frozenset(id(root(arr)) for arr in inputs))
    if id(memory) in cached[1]:
        _refuse_input()


_INPUT_ROOTS = weakref.WeakKeyDictionary()   # trace -> (number of inputs, ids of their memory)


def _refuse_input():
    raise InPlaceWriteError(
        "x[...] = v writes into an input of the transform (or a view of one): that would change "
        "the caller's array. " + ADVICE)


def _input_memory(trace):
    """The ids of the memory of ``trace``'s inputs, computed again only when inputs were added."""
    inputs = trace.inputs
    cached = trace.input_memory
    if cached is None or cached[0] != len(inputs):
        cached = trace.input_memory = (len(inputs), frozenset(id(memory_of(arr)) for arr in inputs))
    return cached[1]


def _references(x):
    """How many references the value of tracer ``x`` has (``sys.getrefcount``, read the same way
    here and in the calibration below)."""
    return sys.getrefcount(x.value)


def _calibrate():
    """The count ``_references`` gives for an array that only its tracer and one local variable
    hold, or -1 (a count never seen, so the fast path is off) when this interpreter does not count
    one more for one more holder."""
    probe = _new(Tracer)
    probe.value = np.zeros(1)
    alone = _references(probe)
    extra = probe.value
    counted = _references(probe) == alone + 1
    del extra
    return alone + 1 if counted else -1


_HELD_ONCE = _calibrate()
_getrefcount = sys.getrefcount
_ndarray = np.ndarray
_generic = np.generic


def write_in_place(x, index, value, write_prim):
    """``x[index] = value`` for a tracer ``x``: mutate its memory and record the write."""
    trace = x._trace
    if not trace.alive:
        raise LeakedTracerError("x[...] = v")
    if not trace.hidden_axes:   # (vmap's level leaves writes to its per-example loop)
        array = x.value
        if type(array) is not _ndarray or array.base is not None:   # (an array owning its memory: no view)
            memory = view_target(x)
            if memory is not None:
                return write_through_view(x, index, value, memory)
    if trace.computes:   # a level without a tape handles the write itself
        return trace.write(x, index, value)
    if trace.observe is not None:   # watched by an engine observer (the profiler's detailed call)
        return trace.observe.recorder(trace, _checked_write, (x, index, value, write_prim))
    return _checked_write(x, index, value, write_prim)


def setitem_method(clean_index, write_prim):
    """``Tracer.__setitem__``: ``x[index] = value`` with ``write_prim`` as its tape entry, the index
    cleaned by ``clean_index`` unless it is ints and slices. The loop ``out[i] = v`` (a tape, only
    the tracer holds the array) writes and records in this one frame; everything else goes
    through ``write_in_place`` and its checks (its only caller: this fast path holds ``array``, so
    the same test there could never pass again)."""
    def setitem(x, index, value):
        kind = type(index)   # is_plain_basic, written out: ints and slices need no cleaning
        if kind is tuple:
            for i in index:
                if type(i) is not int and type(i) is not slice:
                    index = clean_index(index)
                    break
        elif kind is not int and kind is not slice:
            index = clean_index(index)
        trace = x._trace
        array = x.value
        if type(array) is _ndarray and array.base is None and _getrefcount(array) == _HELD_ONCE \
                and trace.alive and not trace.computes and trace.observe is None:
            # Only x holds this memory (the one more reference is ``array`` above; ``_references``
            # counts the same way): no view of it exists and no tape entry kept it, so the write can
            # neither make a view stale nor change what a rule saved, and it is not an input's.
            # Nothing to scan or check: write and record (_write_and_record, written out).
            ours = type(value) is Tracer and value._trace is trace
            if ours and value.index < trace.last_write and _may_be_stale(trace, value):
                check_not_stale(trace, (value,), write_prim)
            plain_value = value.value if ours else value
            kind = type(plain_value)
            if kind is not Tracer:
                array[index] = plain_value
                shape = plain_value.shape if kind is _ndarray or isinstance(plain_value, _generic) \
                    else np.shape(plain_value)
                tape = trace.tape
                last = len(tape)
                tape.append((write_prim, [None, None], None, {"index": index, "value_shape": shape},
                             ((0, x.index), (1, value.index)) if ours else ((0, x.index),)))
                x.index = last
                return
        write_in_place(x, index, value, write_prim)
    return setitem


def _may_be_stale(trace, value):
    """Can the tracer ``value``, made before the latest write, be a view that a write overtook? Not
    when it is a number or an array that owns memory never written (a loop's fixed operand)."""
    v = value.value
    kind = type(v)
    if kind is np.ndarray:
        return v.base is not None or id(v) in trace.written
    return kind is Tracer


def _write_and_record(trace, x, index, value, plain_value, ours, write_prim):
    """Write into ``x``'s array and append the write's tape entry (which keeps nothing); ``x`` now
    stands for the written array. Returns the entry's index."""
    x.value[index] = plain_value
    kind = type(plain_value)
    shape = plain_value.shape if kind is np.ndarray or kind is Tracer or isinstance(plain_value, np.generic) \
        else np.shape(plain_value)   # a NumPy scalar (a dot product's value) has its shape too
    tape = trace.tape
    last = len(tape)
    tape.append((write_prim, [None, None], None, {"index": index, "value_shape": shape},
                 ((0, x.index), (1, value.index)) if ours else ((0, x.index),)))
    x.index = last
    return last


def _checked_write(x, index, value, write_prim):
    trace = x._trace
    array = x.value   # under jit(grad(f)): a staged tracer, whose own write jit stages
    ours = type(value) is Tracer and value._trace is trace
    plain_value = value.value if ours else value
    if type(array) is np.ndarray and type(plain_value) is not Tracer and array.base is None:
        key = id(array)   # the common case: a plain array that owns its memory
    else:
        if not staged_or_plain(array) or not staged_or_plain(plain_value):
            if is_batched(x) or is_batched(value):
                raise BatchedInPlaceWriteError(
                    "an in-place write into values that vmap batches, under another transform")
            raise InPlaceWriteError(
                "In-place writes are supported under a single transform only (not inside grad of grad, "
                "jvp of grad or grad inside vmap; jit(grad(f)) is fine: jit stages the write). " + ADVICE)
        memory = memory_of(array)
        if not isinstance(memory, np.ndarray):
            raise InPlaceWriteError("Item assignment needs an array; " + ADVICE)
        key = id(memory)
    if key in _input_memory(trace):
        _refuse_input()
    if trace.scanned < len(trace.tape):
        _scan_saved(trace)
    saved = trace.saved
    saver = saved.get(key) if saved else None
    if saver is not None:
        raise InPlaceWriteError(
            f"x[...] = v changes an array that {saver} saved for its gradient earlier; the backward "
            f"pass of {saver} would read the new values and give a wrong gradient. " + ADVICE)
    if trace.written is None:
        trace.written = {}
        trace.guard = stale_guard
    else:
        last = trace.last_write
        if x.index < last or (ours and value.index < last and (type(plain_value) is _ndarray or type(plain_value)
                                                               is Tracer) and _may_be_stale(trace, value)):
            check_not_stale(trace, (x, value), write_prim)
            plain_value = value.value if ours else value
    last = _write_and_record(trace, x, index, value, plain_value, ours, write_prim)
    owners = trace.owners   # note_owner, written out
    if owners is None:
        owners = trace.owners = {}
    owners[key] = x
    trace.written[key] = last
    trace.last_write = last
    trace.scanned = last + 1   # the write's entry keeps nothing

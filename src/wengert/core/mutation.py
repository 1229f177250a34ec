"""In-place writes into traced arrays (``x[idx] = v``), with NumPy's meaning and no wrong gradients.

A write changes the array's memory, as NumPy would, so ``x`` and every view of it see the new
values. On the tape it becomes one entry, ``x_new = write(x_old, v, index)``, and the tracer
``x`` is moved to that entry, so later uses of ``x`` differentiate through the write.

Three situations would make such a write give a silently wrong gradient; each raises instead:

* an earlier tape entry saved this memory for its VJP (``y = sin(x); x[0] = 0``): checked at
  the write, against the entries' kept values (read for their values, not only their shapes);
* a view of this memory made before the write is used after it (its tape entry still points at
  the old value): checked when the view is used;
* the memory belongs to an input of the transform: writing would change the caller's array.
"""
from __future__ import annotations

import sys
import weakref

import numpy as np

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
            k = -1
            for a in args:
                k += 1
                if a is None or (flags is not None and k < len(flags) and not flags[k]):
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
    """Refuse to use a view that was made before an in-place write into its memory."""
    written = trace.written
    for a in args:
        if type(a) is Tracer and a._trace is trace:
            key = memory_key(a.value)
            written_at = written.get(key)
            if written_at is not None and a.index < written_at:
                _refuse_stale(prim, trace, key)


def _refuse_stale(prim, trace, key):
    if key in _VIEW_WRITES.get(trace, ()):
        raise InPlaceWriteError(
            f"{prim.name} uses an array that was changed through a view of it (x[i][j] = v, or "
            "v = x[i]; v[j] = ...): the write is recorded on the view, not on the array, so the "
            "array's gradient would flow to its old values. Write with one index, x[i, j] = v. " + ADVICE)
    raise InPlaceWriteError(
        f"{prim.name} uses a view of an array that was changed in place after the view was "
        "made; the view's gradient would flow to the old values. Take the view again after "
        "the write, or copy it before the write (v = x[...].copy()). " + ADVICE
    )


_VIEW_WRITES = weakref.WeakKeyDictionary()   # trace -> ids of the memory written through a view of it


def note_view_write(trace, array, key):
    """Remember that a write went into a view (``array.base`` is set) of the memory ``key``, for
    the message when the array itself is used afterwards (``_refuse_stale``)."""
    if type(array) is np.ndarray and array.base is not None:
        _VIEW_WRITES.setdefault(trace, set()).add(key)


def stale_guard(trace, args, prim):
    """A tape's guard once it has in-place writes: ``check_not_stale`` for the values made before
    the latest write (``trace.last_write``, a tape index). A value made after it cannot be a view
    that a write overtook, so the common case costs one comparison per argument."""
    last = trace.last_write
    for a in args:
        if type(a) is Tracer and a.index < last and a._trace is trace:
            key = memory_key(a.value)
            written_at = trace.written.get(key)
            if written_at is not None and a.index < written_at:
                _refuse_stale(prim, trace, key)


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
        note_view_write(trace, array.value if type(array) is Tracer else array, key)   # (jit(grad): a staged sample)
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
    elif x.index < trace.last_write:
        check_not_stale(trace, (x,), write_prim)
    last = _write_and_record(trace, x, index, value, plain_value, ours, write_prim)
    trace.written[key] = last
    trace.last_write = last
    trace.scanned = last + 1   # the write's entry keeps nothing

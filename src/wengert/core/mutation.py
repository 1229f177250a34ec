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

import numpy as np

from .errors import LeakedTracerError, NeedsLoop, WengertError
from .trace import Tracer, is_batched


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


def _scan_saved(trace):
    """Bring ``trace.saved`` (memory that tape entries keep for their values) up to date."""
    if trace.saved is None:
        trace.saved = {}
    tape = trace.tape
    for i in range(trace.scanned, len(tape)):
        prim, args, ans, params, parents = tape[i]
        if prim is None:
            continue
        if ans is not None:
            for a in (ans if prim.multiple_results else (ans,)):
                if isinstance(a, np.ndarray):
                    trace.saved.setdefault(id(root(a)), prim.name)
        flags = prim.value_args
        for k, a in enumerate(args or ()):
            if isinstance(a, np.ndarray) and (flags is None or k >= len(flags) or flags[k]):
                trace.saved.setdefault(id(root(a)), prim.name)
    trace.scanned = len(tape)


def check_not_stale(trace, args, prim):
    """Refuse to use a view that was made before an in-place write into its memory."""
    for a in args:
        if type(a) is Tracer and a._trace is trace:
            written_at = trace.written.get(id(root(a.value)))
            if written_at is not None and a.index < written_at:
                raise InPlaceWriteError(
                    f"{prim.name} uses a view of an array that was changed in place after the view was "
                    "made; the view's gradient would flow to the old values. Take the view again after "
                    "the write, or copy it before the write (v = x[...].copy()). " + ADVICE
                )


def refuse_writes_into_inputs(trace, memory):
    """An input of a transform is the caller's array: writing into it (or a view of it) is refused."""
    for arr in trace.inputs:
        if root(arr) is memory:
            raise InPlaceWriteError(
                "x[...] = v writes into an input of the transform (or a view of one): that would change "
                "the caller's array. " + ADVICE)


def write_in_place(x, index, value, write_prim):
    """``x[index] = value`` for a tracer ``x``: mutate its memory and record the write."""
    trace = x._trace
    if not trace.alive:
        raise LeakedTracerError("x[...] = v")
    if trace.computes:   # a level without a tape handles the write itself
        return trace.write(x, index, value)
    if trace.observe is not None:   # watched by an engine observer (the profiler's detailed call)
        return trace.observe.recorder(trace, _record_write, (x, index, value, write_prim))
    return _record_write(x, index, value, write_prim)


def _record_write(x, index, value, write_prim):
    trace = x._trace
    if type(x.value) is Tracer or (type(value) is Tracer and type(value.value) is Tracer):
        if is_batched(x) or is_batched(value):
            raise BatchedInPlaceWriteError(
                "an in-place write into values that vmap batches, under another transform")
        raise InPlaceWriteError(
            "In-place writes are supported under a single transform only (not inside grad of grad). "
            + ADVICE)
    memory = root(x.value)
    if not isinstance(x.value, np.ndarray):
        raise InPlaceWriteError("Item assignment needs an array; " + ADVICE)
    refuse_writes_into_inputs(trace, memory)
    _scan_saved(trace)
    saver = trace.saved.get(id(memory))
    if saver is not None:
        raise InPlaceWriteError(
            f"x[...] = v changes an array that {saver} saved for its gradient earlier; the backward "
            f"pass of {saver} would read the new values and give a wrong gradient. " + ADVICE)
    if trace.written is None:
        trace.written = {}
        trace.guard = check_not_stale
    else:
        check_not_stale(trace, (x,), write_prim)
    plain_value = value.value if type(value) is Tracer and value._trace is trace else value
    if type(plain_value) is Tracer:
        raise InPlaceWriteError("The written value belongs to another transform. " + ADVICE)
    x.value[index] = plain_value
    parents = [(0, x.index)]
    if type(value) is Tracer and value._trace is trace:
        parents.append((1, value.index))
    shape = np.shape(plain_value)
    x.index = trace.record(write_prim, [None, None], None, {"index": index, "value_shape": shape},
                           tuple(parents))
    trace.written[id(memory)] = x.index
    trace.scanned = len(trace.tape)

"""Mutation the way users write it: ``wengert.Buffer``, ``x.at[idx].set(v)`` and ``x[idx] = v``.

A Buffer is the Zygote.Buffer pattern (seed 000): allocate, write elements in a loop, freeze.
Writes cost one NumPy assignment and one list append; nothing is put on the tape until the
buffer is read or frozen, when one tape entry covers all writes since the last one. Its backward
pass costs the number of elements written plus one pass over the result, never
(number of writes) x (array size).
"""
from __future__ import annotations

import numpy as np

from .core import namespace
from .core.mutation import InPlaceWriteError
from .core.trace import ReverseTrace, Tracer, levels_of, make_tracer, unbox
from .numpy._methods import clean_index
from .primitives import elementwise as E
from .primitives.scatter import buffer_snapshot, has_duplicates, index_add, scatter_multiply, scatter_set
from .primitives.shape import getitem


class Buffer:
    """A writable array inside differentiated code; ``freeze()`` (or ``wnp.asarray``) gives the result.

    ``Buffer.zeros(shape, dtype)`` or ``Buffer(like=x)`` start from zeros; ``Buffer(x)`` starts
    from the values of ``x`` (traced or not; unwritten elements pass their gradient to ``x``).
    Reading before freezing works (``buf[i]``). After ``freeze()`` the buffer refuses writes.
    """

    __slots__ = ("_data", "_base", "_trace", "_writes", "_parents", "_frozen", "_functional", "_owned")

    def __init__(self, initial=None, *, like=None, shape=None, dtype=None):
        if initial is not None:
            start = unbox(initial)
            if namespace.is_foreign(start):   # storage in the values' own library (Dask, CuPy)
                self._data = namespace.copy(start, dtype)
            else:
                self._data = np.array(start, dtype=dtype or np.asarray(start).dtype, copy=True)
            self._base = initial if type(initial) is Tracer else None
        else:
            if like is not None:
                plain = unbox(like)
                shape = np.shape(plain) if shape is None else shape
                dtype = dtype or (plain.dtype if hasattr(plain, "dtype") else np.asarray(plain).dtype)
            if shape is None:
                raise TypeError("Buffer needs initial values, like=array, or shape= (see Buffer.zeros)")
            self._data = namespace.zeros(shape, dtype or np.float64, unbox(like) if like is not None else None)
            self._base = None
        self._trace = self._base._trace if self._base is not None else None
        self._writes = []
        self._parents = []
        self._frozen = False
        self._functional = None
        self._owned = False   # the functional state's sample is this Buffer's alone (see _write_functional)
        if self._trace is not None and self._trace.computes:
            self._functional = initial  # a level without a tape: functional updates from the start

    @classmethod
    def zeros(cls, shape, dtype=np.float64):
        return cls(shape=shape, dtype=dtype)

    shape = property(lambda self: self._data.shape)
    dtype = property(lambda self: self._data.dtype)
    ndim = property(lambda self: self._data.ndim)
    size = property(lambda self: self._data.size)

    def __len__(self):
        return len(self._data)

    def __setitem__(self, index, value):
        if self._frozen:
            raise InPlaceWriteError("This Buffer was frozen (freeze() or wnp.asarray); write into a new Buffer.")
        kind = type(index)
        if kind is tuple:
            for i in index:
                if type(i) is not int and type(i) is not slice:
                    index = clean_index(index)
                    break
        elif kind is not int:
            index = clean_index(index)
        if self._functional is not None:
            self._write_functional(index, value)
            return
        if type(value) is Tracer:
            trace = value._trace
            if self._trace is None:
                self._trace = trace
            if trace is not self._trace or type(value.value) is Tracer or trace.computes:
                self._go_functional()
                self[index] = value
                return
            plain = value.value
            self._data[index] = plain
            self._writes.append((index, len(self._parents), getattr(plain, "shape", ())))
            self._parents.append(value.index)
        else:
            self._data[index] = value
            if self._trace is not None:
                self._writes.append((index, None, None))

    def _write_functional(self, index, value):
        """A functional write; under ``jit(grad(...))`` the new state's sample is the old one written
        in place when this Buffer alone reads it: the old state was made by its own last write, with
        no read since (a read may be a view of the sample) and no one else holding it (the tape entry
        of a write keeps neither the old state nor the result). A loop of writes then stages one copy
        of the array, not one per write."""
        state = self._functional
        if self._owned and type(state) is Tracer and type(state._trace) is ReverseTrace:
            inner = state.value
            if type(inner) is Tracer and inner._trace.staged:
                inner._trace.lend(inner)
        self._functional = scatter_set(state, value, index=index)
        self._owned = True

    def __getitem__(self, index):
        if type(index) is not int:
            index = clean_index(index)
        if self._functional is not None:
            self._owned = False   # the read may be a view of the state's sample
            return getitem(self._functional, index=index)
        current = self._snapshot(final=False)
        if type(current) is Tracer:
            return getitem(current, index=index)
        value = current[index]
        return value.copy() if isinstance(value, np.ndarray) else value

    def freeze(self):
        """The buffer's contents as an array (traced when traced values were written)."""
        if self._functional is not None:
            self._frozen = True
            return self._functional
        result = self._snapshot(final=True)
        self._frozen = True
        return result

    def __wengert_array__(self):
        return self.freeze()

    def __array__(self, dtype=None, copy=None):
        if self._trace is not None:
            raise TypeError("This Buffer holds traced values: use buf.freeze() or wnp.asarray(buf)")
        return self._data if dtype is None else self._data.astype(dtype)

    def __repr__(self):
        state = "frozen" if self._frozen else "open"
        return f"Buffer({state}, shape={self.shape}, dtype={self.dtype})"

    def _snapshot(self, final):
        """One tape entry for all writes since the last snapshot; it becomes the new base."""
        if self._trace is None:
            return self._data
        if not self._writes and self._base is not None:
            return self._base
        if self._trace.observe is not None:   # watched by an engine observer (the profiler)
            return self._trace.observe.recorder(self._trace, self._record_snapshot, (final,))
        return self._record_snapshot(final)

    def _record_snapshot(self, final):
        trace = self._trace
        parents = []
        base_traced = self._base is not None
        if base_traced:
            parents.append((0, self._base.index))
        parents.extend((k + 1, tape_index) for k, tape_index in enumerate(self._parents))
        params = {"writes": self._writes, "shape": self._data.shape, "base_traced": base_traced}
        index = trace.record(buffer_snapshot, (), None, params, tuple(parents))
        self._base = make_tracer(self._data if final else self._data.copy(), trace, index)
        self._writes, self._parents = [], []
        return self._base

    def _go_functional(self):
        """Switch to functional updates (needed when values of nested transforms are written, and
        under forward mode or vmap, whose levels have no tape)."""
        if self._trace.computes and self._base is None:
            self._functional = self._data.copy()
        else:
            self._functional = self._snapshot(final=False)


class _IndexUpdates:
    """``x.at[index]``: JAX's functional updates; each returns a new array."""

    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array = array
        self.index = clean_index(index)

    def get(self):
        return getitem(self.array, index=self.index) if type(self.array) is Tracer else np.asarray(self.array)[self.index]

    def set(self, values):
        return scatter_set(self.array, values, index=self.index)

    def add(self, values):
        """Duplicate indices accumulate, as in JAX."""
        return index_add(self.array, values, index=self.index)

    def multiply(self, values):
        self._refuse_duplicates("multiply", values)
        return scatter_multiply(self.array, values, index=self.index)

    def min(self, values):  # noqa: A003 - JAX's name
        self._refuse_duplicates("min", values)
        return scatter_set(self.array, E.minimum(self.get(), values), index=self.index)

    def max(self, values):  # noqa: A003 - JAX's name
        self._refuse_duplicates("max", values)
        return scatter_set(self.array, E.maximum(self.get(), values), index=self.index)

    def _refuse_duplicates(self, name, values):
        traced = _differentiated(self.array) or _differentiated(values)
        shape = self.array.shape if type(self.array) is Tracer else np.shape(self.array)  # one example's under vmap
        if traced and has_duplicates(self.index, shape):
            raise NotImplementedError(
                f"x.at[idx].{name}(v) with repeated indices is not differentiable in wengert; "
                "make the indices unique (np.unique) or combine the values first")


def _differentiated(x):
    """Is ``x`` traced by a level that differentiates (not only jit's staging, which needs no rule)?"""
    return any(not t.staged for t in levels_of(x))


class _At:
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):
        return _IndexUpdates(self.array, index)


def at(x):
    """``at(x)[idx].set(v)`` for any array, traced or plain (``x.at`` on traced values)."""
    return _At(x if type(x) is Tracer else np.asarray(x))


Tracer.at = property(at)

"""``wg.jit``: stage a function once per signature, run it as straight-line NumPy, print it.

The fourth interpreter over the primitive table (after recording, forward mode and vmap). A jit
opens a :class:`StagingTrace`, a trace level whose ``process`` appends one equation (primitive,
operands, parameters, results) to a program (transforms/_ir.py) and computes the result on the
trace's sample values, so shapes, dtypes and the rules that need values have them. Transforms
opened inside the jitted function (``grad``, ``jvp``, ``vmap``) are levels above it: their
operations, and the VJP and JVP rules they run, are wengert operations on staged values, so the
forward and the backward pass land in one program. The program is optimized (dead code, common
subexpressions), written out as one line of Python per equation and compiled; later calls with the
same signature (pytree structure, leaf types, shapes and dtypes, static arguments) run it directly.

A staged value is only a sample: Python control flow on it (``if``, ``float()``, ``.item()``)
would bake one branch into a program replayed on other inputs, so it raises, naming the line.
Functions without a derivative (comparisons, masks, argmax) read values; under jit they are
staged too (``nondiff``'s hook), so a mask is recomputed for every input.

Called under ``grad``, ``jvp`` or ``vmap``, a jitted function is one primitive of theirs
(``jit_call``, carrying the function on flat leaves), whose rules are jitted programs too: its VJP
(the forward pass recomputed, then the backward pass), its JVP and its batched form, each traced
once per signature. Inside another jit, or when it closes over values of the enclosing
transforms, it runs inline: its operations belong to the enclosing levels.
"""
from __future__ import annotations

import collections
import functools
import gc
import inspect
import linecache
import os
import re
import sys
import time

import numpy as np

from ..core import backward as _backward
from ..core.backward import is_plain_basic
from ..core import tree
from ..core.errors import LeakedTracerError, NeedsLoop, TracerConversionError, run_user
from ..core.mutation import check_not_stale, note_owner, refuse_writes_into_inputs, root, settled, stale_guard
from ..core.trace import (Primitive, ReverseTrace, Trace, Tracer, close_level, make_tracer,
                          open_level, open_levels, unbox)
from ..primitives import _table
from ..primitives._batching import one_batch_axis
from ..primitives.contractions import dot, matmul
from ..primitives.scatter import scatter_set
from ..primitives.elementwise import add, divide, multiply, subtract
from ..primitives.shape import broadcast_to, getitem, index_add
from . import _ir, _rewrite, _vectorize
from .batching import vmap
from .forward import jvp
from .reverse import vjp

# --- coupling to core's interpreter stack (the one place to adapt when it changes) ---------------
def _levels_open():
    """Is any transform level open in this thread (so a jitted function called now runs inline)?"""
    return bool(open_levels())


def _open_staging_level(record_sources):
    return open_level(StagingTrace(record_sources))


def _close_staging_level(trace):
    close_level(trace)


# the backward loop's frame: its local ``prim`` names whose VJP rule is running (for the comments)
_BACKWARD_CODE = _backward._backward.__code__
# -------------------------------------------------------------------------------------------------


_new = object.__new__   # a tracer without __init__, as core's make_tracer builds it (inlined in stage)

# "fresh": the primitives besides the ufuncs whose results are new arrays the program may write into
# (the vectorizing pass's cotangent sums and scatters: W1 at 16x adds the two parts of b's cotangent,
# (64, 16, 256), into one of them)
_PRIMS = {"getitem": getitem, "scatter_set": scatter_set, "index_add": index_add, "add": add,
          "multiply": multiply, "fresh": (matmul, dot, _vectorize.GRID_ROWSUM, _vectorize.GRID_ADD)}


class ConcretizationError(TracerConversionError):
    """A value staged by jit was used as a Python value (bool, int, float, index)."""


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NUMPY = os.path.dirname(os.path.abspath(np.__file__))
_INTERNAL = {}


def _internal(code):
    known = _INTERNAL.get(code)
    if known is None:
        name = code.co_filename
        known = _INTERNAL[code] = name.startswith(_PACKAGE) or name.startswith(_NUMPY) or name.startswith("<frozen")
    return known




def _user_frame(trace, depth=2):
    """(filename, line, note) of the innermost caller outside wengert and NumPy, looked for from
    ``depth`` frames up (the callers below it are known to be wengert's: each frame the walk
    visits costs a frame object, the larger part of staging one equation). Reached through a
    backward pass, the note names the primitive whose VJP rule is running, and the line is that of
    the forward operation when its tape entry kept the output (else none is given). Equations
    staged from one place share one tuple (a loop of 10k trips stages 10k equations per line)."""
    frame = sys._getframe(depth)
    internal = _INTERNAL
    while frame is not None:
        code = frame.f_code
        known = internal.get(code)
        if not (_internal(code) if known is None else known):
            return trace.source(code.co_filename, frame.f_lineno, None)
        if code is _BACKWARD_CODE:
            local = frame.f_locals
            prim = local.get("prim")
            if prim is not None:
                note = _BACKWARD_NOTES.get(prim.name)
                if note is None:
                    note = _BACKWARD_NOTES[prim.name] = f"backward of {prim.name}"
                ans = local.get("ans")  # kept by the tape entry: the forward line that made it
                for value in (ans if type(ans) is tuple or type(ans) is list else (ans,)):
                    while type(value) is Tracer:
                        if value._trace is trace:
                            forward = trace.sources.get(value.index)
                            if forward is not None:
                                return trace.source(forward[0], forward[1], note)
                        value = value.value
                return trace.source(None, 0, note)
        frame = frame.f_back
    return None


_BACKWARD_NOTES = {}


class StagingTrace(Trace):
    """A jit level: its tracers' values are trace-time samples; operations become equations.

    It ``computes`` (bind hands it every operation) and keeps no tape, so Buffers and ``x[idx] = v``
    update functionally (``write``), as on a forward-mode level. ``record_sources``: find the user's
    line of each equation (a walk up the Python stack, about a tenth of staging), which only
    ``as_text()``'s comments need; a first call does without.
    """

    __slots__ = ("eqns", "vars", "sources", "program_inputs", "inputs", "written", "last_write", "_sources",
                 "record_sources", "lent", "pending")
    computes = staged = True

    def __init__(self, record_sources=True):
        super().__init__()
        self.record_sources = record_sources
        self.inputs = []      # the input arrays: in-place writes into them are refused
        self.written = None   # id(base array) -> the variable of its latest in-place write
        self.last_write = 0   # the variable of the latest in-place write into any array
        self.guard = _process_instead
        self.lent = None      # a staged value whose next write may update its sample in place (see lend)
        self.pending = {}     # variable id -> _ZeroedAt or _Broadcast: staged when read (zero_at, broadcast)
        self.eqns = []
        self.vars = []
        self.sources = {}  # variable id -> where the equation that defined it was staged (if recorded)
        self._sources = {}  # each (filename, line, note) once
        self.program_inputs = []

    def source(self, filename, line, note):
        key = (filename, line, note)
        return self._sources.setdefault(key, key)

    # -- values and variables --
    def new_var(self, value):
        if type(value) is np.ndarray or isinstance(value, np.generic):
            var = _ir.Var(len(self.vars), value.shape, value.dtype)
        else:
            var = _ir.Var(len(self.vars), np.shape(value), np.asarray(value).dtype)
        self.vars.append(var)
        return var

    def wrap(self, value, var):
        return make_tracer(value, self, var.id)

    def new_input(self, value):
        var = self.new_var(value)
        self.program_inputs.append(var)
        self.inputs.append(value)
        return self.wrap(value, var)

    def _split(self, x, uses):
        """(operand, value) of ``x``: a staged tracer is its Var and its sample."""
        t = type(x)
        if t is Tracer:
            if x._trace is not self:
                if x._trace.staged:
                    raise LeakedTracerError("a value of another jit")
                raise _ClosedOver  # a jitted function called under grad/jvp/vmap closes over their values
            if x.index in self.pending:
                self.settle(x.index)
            var = self.vars[x.index]
            uses.append(var)
            return var, x.value
        if t is tuple or t is list:
            if not any(type(v) is Tracer or type(v) is tuple or type(v) is list or type(v) is slice for v in x):
                return x, x
            pairs = [self._split(v, uses) for v in x]
            return t(p[0] for p in pairs), t(p[1] for p in pairs)
        if t is slice and (type(x.start) is Tracer or type(x.stop) is Tracer or type(x.step) is Tracer):
            pairs = [self._split(v, uses) for v in (x.start, x.stop, x.step)]
            return slice(*(p[0] for p in pairs)), slice(*(p[1] for p in pairs))
        return x, x

    # -- staging --
    def process(self, prim, args, vals, parents, params, impl=None):
        if not self.alive:
            raise LeakedTracerError(prim.name)
        if self.lent is not None:
            if prim is scatter_set and args[0] is self.lent and impl is None and type(self.lent.value) is np.ndarray \
                    and is_plain_basic(params["index"]):
                impl = _set_into
            self.lent = None
        if self.written is not None:
            # only a value made before the latest write can be a view that a write overtook
            stale_guard(self, args, prim)
        if prim is broadcast_to and impl is None:
            x = args[0]
            if type(x) is Tracer and x._trace is self and x.index not in self.pending:
                value = x.value
                shape = params["shape"]
                if (type(value) is np.ndarray and value.ndim == 0 or isinstance(value, np.generic)) \
                        and not value.dtype.hasobject and type(shape) is tuple \
                        and all(type(n) is int and n >= 0 for n in shape):
                    return self.broadcast(x, shape)
        return self.stage(prim, args, params, 4, impl)

    def stage(self, prim, args, params, depth=3, impl=None):
        """Append ``prim(*args, **params)`` to the program; its result, computed on the samples.
        ``depth``: the first frame that may be the user's (4 from ``process``: its caller, bind or
        a rule, is wengert's). ``impl``: what computes the sample instead of ``prim.impl`` (the
        same values, written into an operand's sample that nothing else reads: see ``write``)."""
        variables = self.vars
        pending = self.pending
        operands = []
        values = []
        uses = None   # the Vars read: ``operands`` itself while every operand so far is one
        for a in args:
            t = type(a)
            if t is Tracer and a._trace is self:
                if pending and a.index in pending:
                    var = self._read_pending(prim, a, args, params, not operands)
                else:
                    var = variables[a.index]
                if uses is not None:
                    uses.append(var)
                operands.append(var)
                values.append(a.value)
                continue
            if uses is None:
                uses = list(operands)
            if t is Tracer or t is tuple or t is list or t is slice:
                op, val = self._split(a, uses)
                operands.append(op)
                values.append(val)
            else:  # a constant
                operands.append(a)
                values.append(a)
        p_ops = p_vals = params
        if params:
            for k, v in params.items():
                t = type(v)
                if t is Tracer or (t is tuple or t is list) and _holds_tracer(v):  # else: a constant
                    if uses is None:
                        uses = list(operands)
                    op, val = self._split(v, uses)
                    if p_ops is params:
                        p_ops, p_vals = dict(params), dict(params)
                    p_ops[k], p_vals[k] = op, val
            if prim is getitem and uses is not None and len(uses) > 1:
                _refuse_value_dependent_shape(p_ops["index"])
            ans = (prim.impl if impl is None else impl)(*values, **p_vals)
        else:
            ans = (prim.impl if impl is None else impl)(*values)
        operands = tuple(operands)
        uses = operands if uses is None else tuple(uses)
        if prim.multiple_results or type(ans) is tuple and _NONDIFF_PRIMS.get((prim.impl, False)) is prim:
            if not prim.multiple_results:
                prim = _nondiff_primitive(prim.impl, multiple_results=True)  # np.histogram: (counts, edges)
            outs = tuple(self.new_var(a) for a in ans)
            result = tuple(self.wrap(a, o) for a, o in zip(ans, outs))
        else:
            if type(ans) is np.ndarray:  # new_var's common case, inline
                var = _ir.Var(len(variables), ans.shape, ans.dtype)
                variables.append(var)
            else:
                var = self.new_var(ans)
            outs = (var,)
            result = _new(Tracer)
            result.value = ans
            result._trace = self
            result.index = var.id
        if self.record_sources:
            source = _user_frame(self, depth)
            sources = self.sources
            for o in outs:
                sources[o.id] = source
        else:
            source = None
        self.eqns.append(_ir.Eqn(prim, operands, p_ops, outs, uses, source))
        return result

    # -- in-place writes (functional in the program) --
    def write(self, x, index, value):
        """``x[index] = value``: the sample is written in place (NumPy's meaning, so views made
        earlier are taken again from ``x`` when used, see core/mutation.py), the program gets a
        functional scatter. ``x`` holds its whole memory (a write through a view comes here rebased)."""
        memory = root(x.value)
        refuse_writes_into_inputs(self, memory)
        if self.written is None:
            self.written = {}
        else:
            check_not_stale(self, (x, value), scatter_set)
        note_owner(self, x, id(memory))
        if is_plain_basic(index):   # the sample is written in place, not copied first (a copy per write)
            new = self.stage(scatter_set, (x, value), {"index": index}, impl=_set_into)
        else:
            new = self.stage(scatter_set, (x, value), {"index": index})
            x.value[index] = value.value if type(value) is Tracer else value
        x.index = new.index
        self.written[id(memory)] = self.last_write = x.index

    def zero_at(self, g, index):
        """``g`` with the elements at ``index`` (ints and slices) set to zero, its sample ``g``'s own
        zeroed in place: the backward pass of a write calls it where it holds ``g``'s sample alone
        (primitives/scatter.py, ``_write_vjp_staged``). A chain of such zeroings of distinct single
        elements (a loop's ``out[t, b] = v``, differentiated) is staged as one equation when the
        result is first read (``settle``): the elements' own reads (the written values'
        cotangents) read the chain's first array, where those elements are not zeroed yet."""
        sample = g.value
        key = _element_key(index, sample.shape) if self.alive and type(sample) is np.ndarray else None
        if key is not None:
            chain = self.pending.get(g.index)
            if chain is not None and type(chain) is not _ZeroedAt:
                self.settle(g.index)
                chain = None
            if chain is None:
                chain = _ZeroedAt(self.vars[g.index], [], set(), 0,
                                  _user_frame(self, 2) if self.record_sources else None)
            if chain.count == len(chain.elements) and key not in chain.written:
                sample[key] = 0
                chain.elements.append(key)
                chain.written.add(key)
                var = self.new_var(sample)
                self.pending[var.id] = _ZeroedAt(chain.base, chain.elements, chain.written, chain.count + 1,
                                                 chain.source)
                if chain.source is not None:
                    self.sources[var.id] = chain.source
                return self.wrap(sample, var)
        return self.process(scatter_set, (g, np.zeros((), sample.dtype)), None, None, {"index": index}, _set_into)

    def own(self, x):
        """``x`` over a copy of its sample, which the caller then holds alone (see ``zero_at``)."""
        return self.wrap(np.array(x.value), self.vars[x.index])

    def _read_pending(self, prim, x, args, params, first):
        """The variable an equation reads for ``x``, a value not staged yet (see ``zero_at`` and
        ``broadcast``): the value it was made from where the equation gives the same result from
        that, else ``x`` itself, staged now."""
        record = self.pending[x.index]
        if type(record) is _Broadcast:
            # x * y, x + y, ... with y of x's shape and dtype: the same result from x's scalar
            if prim in _BROADCASTING and len(args) == 2 and not params:
                other = args[1] if first else args[0]
                t = type(other)
                if t is Tracer and other._trace is self:
                    fits = other.index not in self.pending or type(self.pending[other.index]) is not _Broadcast
                    other = other.value
                else:
                    fits = t is np.ndarray
                if fits and type(other) is np.ndarray and other.shape == x.value.shape \
                        and other.dtype == x.value.dtype:
                    return record.base
        elif prim is getitem and first and record.count == len(record.elements):
            # a read of one element the chain has not zeroed: the chain's first array
            key = _element_key(params["index"], x.value.shape)
            if key is not None and key not in record.written:
                return record.base
        self.settle(x.index)
        return self.vars[x.index]

    def broadcast(self, x, shape):
        """``broadcast_to(x, shape)`` of a 0-d ``x`` (a full reduction's cotangent, see
        primitives/reductions.py), staged when first read: an elementwise product or sum with an
        array of that shape reads ``x`` itself instead (the loop's ``np.sum(u * v)``, differentiated,
        stages ``g * v``, not ``broadcast_to(g) * v``). Its sample is a read-only view of ``x``'s."""
        value = x.value
        if type(value) is np.ndarray:
            sample = np.ndarray(shape, value.dtype, value, 0, (0,) * len(shape))
        else:
            sample = np.empty(shape, value.dtype)
            sample[...] = value
        sample.flags.writeable = False
        var = self.new_var(sample)
        source = _user_frame(self, 3) if self.record_sources else None
        self.pending[var.id] = _Broadcast(self.vars[x.index], source)
        if source is not None:
            self.sources[var.id] = source
        return self.wrap(sample, var)

    def settle(self, index):
        """Stage the equation that defines variable ``index``, whose sample is made already: the
        broadcast of ``broadcast``, or the zeroing of ``zero_at``, one ``scatter_set`` of zero at
        the chain's elements (index arrays, in order of position) or zeros where the chain zeroed
        every element."""
        chain = self.pending.pop(index)
        var = self.vars[index]
        if type(chain) is _Broadcast:
            self.eqns.append(_ir.Eqn(broadcast_to, (chain.base,), {"shape": var.shape}, (var,), (chain.base,),
                                     chain.source))
            return
        elements = chain.elements[:chain.count]
        zero = np.zeros((), var.dtype)
        if len(elements) == int(np.prod(var.shape, dtype=np.int64)):
            eqn = _ir.Eqn(broadcast_to, (zero,), {"shape": var.shape}, (var,), (), chain.source)
        else:
            elements.sort()
            columns = tuple(np.array(c, np.intp) for c in zip(*elements))
            eqn = _ir.Eqn(scatter_set, (chain.base, zero), {"index": columns}, (var,), (chain.base,), chain.source)
        self.eqns.append(eqn)

    def lend(self, x):
        """The next operation, when it is a write into ``x`` (``scatter_set`` at ints and slices),
        updates ``x``'s sample in place instead of a copy of it: ``x`` is a value whose sample
        nothing else reads and whose holder drops it for the write's result (a Buffer's state, see
        buffer.py). A loop of Buffer writes then costs the elements written, not a copy of the
        array per write. Any other operation first takes the loan back."""
        self.lent = x

    def add_at(self, acc, private, g, index):
        """``acc`` plus ``g`` at ``index`` (an index of ints and slices), as one ``index_add``: the
        backward loop adds a read ``x[index]``'s cotangent into ``x``'s accumulator ``acc`` with it
        (the program :func:`_ir.fold_indexed_adds` would make of ``acc + index_add(zeros, g)``).
        ``private``: ``acc``'s sample is held by that loop alone (an ``index_add`` it made), so the
        sample is updated in place: a loop of reads costs the elements read, not a copy of ``x``
        per read. None where ``acc`` is not this level's array of the sum's dtype."""
        if type(acc) is not Tracer or acc._trace is not self:
            return None
        sample, gv = acc.value, g.value
        kind = type(gv)
        if type(sample) is not np.ndarray or not (kind is np.ndarray or isinstance(gv, np.generic)) \
                or np.result_type(sample.dtype, gv.dtype) != sample.dtype:
            return None
        return self.process(index_add, (acc, g), None, None, {"index": index}, _add_into if private else None)

    def refuse_concrete(self):
        where = _user_frame(self)
        line = ""
        if where is not None and where[0] is not None:
            text = linecache.getline(where[0], where[1]).strip()
            line = f" at {os.path.basename(where[0])}:{where[1]} ({text})"
        elif where is not None:
            line = f" in the {where[2]}"
        raise ConcretizationError(
            f"a value staged by wg.jit is used as a Python value (if/while, bool(), int(), float(), "
            f".item(), an index){line}. The program is traced once and replayed on other inputs, so "
            "a branch on this value would be baked in. Mark the argument it comes from static "
            "(wg.jit(f, static_argnums=...) or static_argnames=...), or compute both branches and "
            "choose with wnp.where(condition, a, b).")


class _Broadcast:
    """A 0-d value broadcast to a shape, not staged yet (``StagingTrace.broadcast``)."""

    __slots__ = ("base", "source")

    def __init__(self, base, source):
        self.base = base
        self.source = source


_BROADCASTING = frozenset((multiply, add, subtract, divide))


class _ZeroedAt:
    """A cotangent zeroed at single elements, not staged yet (``StagingTrace.zero_at``): the
    chain's first array ``base`` with the first ``count`` of ``elements`` (tuples of ints) zeroed.
    A chain's members share ``elements`` and ``written`` (the same elements, as a set): only its
    latest member, whose ``count`` is their length, may go on or read the base."""

    __slots__ = ("base", "elements", "written", "count", "source")

    def __init__(self, base, elements, written, count, source):
        self.base = base
        self.elements = elements
        self.written = written
        self.count = count
        self.source = source


def _set_into(x, v, index):
    """``scatter_set``'s value, written into ``x`` (a sample the staged write overwrites anyway)."""
    x[index] = v
    return x


def _add_into(x, v, index):
    """``index_add``'s value for an index of ints and slices, added into ``x`` (a private sample)."""
    x[index] += v
    return x


def _element_key(index, shape):
    """``index`` as the non-negative tuple of one element of an array of ``shape``, or None where it
    is not one int per axis in bounds."""
    if type(index) is not tuple or len(index) != len(shape):
        return None
    key = []
    for i, n in zip(index, shape):
        if type(i) is not int or not -n <= i < n:
            return None
        key.append(i % n)
    return tuple(key)


def _holds_tracer(x):
    """Does the tuple or list ``x`` (an index, a shape) hold a tracer, at any depth?"""
    for v in x:
        t = type(v)
        if t is Tracer:
            return True
        if t is tuple or t is list:
            if _holds_tracer(v):
                return True
        elif t is slice and (type(v.start) is Tracer or type(v.stop) is Tracer or type(v.step) is Tracer):
            return True
    return False


def _process_instead(trace, args, prim):  # pragma: no cover - bind calls ``process`` instead
    raise AssertionError


_METADATA = frozenset(("shape", "ndim", "size", "result_type", "iscomplexobj", "isrealobj", "isscalar",
                       "min_scalar_type", "can_cast"))


def _sample(x):
    """``x`` with every tracer replaced by its trace-time value (containers rebuilt)."""
    t = type(x)
    if t is Tracer:
        return unbox(x)
    if t is tuple or t is list:
        return t(_sample(v) for v in x)
    return x


_VALUE_SHAPED = frozenset(("nonzero", "argwhere", "flatnonzero", "unique", "extract", "compress"))


def _refuse_value_dependent_shape(index):
    for i in index if type(index) is tuple else (index,):
        if type(i) is _ir.Var and i.dtype == np.bool_:
            raise ConcretizationError(
                "x[mask] with a mask computed from staged values: the result's size depends on the "
                "values, so it cannot be part of a program replayed on other inputs. Use "
                "wnp.where(mask, x, 0) (and sums over it) instead, or mark the argument static.")


# --- functions without a derivative: staged, so masks are recomputed for every input --------------
_NONDIFF_PRIMS = {}


def _nondiff_primitive(fn, multiple_results=False):
    """The primitive that stands for ``fn`` in programs (one returning a tuple: several results)."""
    prim = _NONDIFF_PRIMS.get((fn, multiple_results))
    if prim is None:
        name = getattr(fn, "__name__", "nondiff")
        prim = _NONDIFF_PRIMS[fn, multiple_results] = Primitive(name, fn, multiple_results=multiple_results)
    return prim


def _staged_in(x):
    t = type(x)
    if t is Tracer:
        while type(x) is Tracer:
            if x._trace.staged:
                return x._trace
            x = x.value
        return None
    if t is tuple or t is list:
        for v in x:
            found = _staged_in(v)
            if found is not None:
                return found
    return None


def _nondiff_staged(call, fn, args, kwargs):
    """``nondiff``'s hook while jit stages: a value-reading function of staged values is an equation."""
    trace = None
    for a in list(args) + list(kwargs.values()):
        trace = _staged_in(a)
        if trace is not None:
            break
    if trace is None:
        return None
    if not trace.alive:
        raise LeakedTracerError(getattr(fn, "__name__", "a function"))
    name = getattr(fn, "__name__", "")
    if name in _METADATA:  # a shape or a dtype: the same for every input of this signature
        return fn(*[_sample(a) for a in args], **{k: _sample(v) for k, v in kwargs.items()})
    if name in _VALUE_SHAPED:
        raise ConcretizationError(
            f"{name} of a value staged by wg.jit: the size of its result depends on the values, so it "
            "cannot be part of a program replayed on other inputs. Use wnp.where with a fixed-size "
            "result, or mark the argument static (static_argnums=...).")
    args = [_table.unbox_all(a) for a in args]
    kwargs = {k: _table.unbox_all(v) for k, v in kwargs.items()}
    return trace.stage(_nondiff_primitive(fn), args, kwargs)


# --- the jitted function -------------------------------------------------------------------------
class Lowered:
    """The staged program for one signature: ``as_text()`` is the Python that runs."""

    def __init__(self, program, code, fn, out_tree, eqns_traced, sources=True):
        self.program = program
        self.code = code  # the source compiled: as_text() without the comments
        self.fn = fn
        self.out_tree = out_tree
        self.eqns_traced = eqns_traced  # before the passes
        self.vectorized = {}  # the vectorizing pass: equations before and after it, classes batched
        self.timings = {}  # seconds spent tracing, optimizing, generating and compiling it
        self.donated = ()  # positions of the input leaves the program may write into (donate_argnums)
        self.sources = sources  # were the equations' user lines recorded (the comments of as_text)?
        self._relower = None  # traces the program again, recording them (set by Jitted.lower)
        self._text = None

    def as_text(self):
        """The program's source, each line with the line of user code it came from. A program
        lowered by a call recorded no lines (they cost about a tenth of the first call): it is
        traced again here, recording them, and that program (the same, for a function without side
        effects on its tracing) becomes the one this signature runs, so the text is always what runs."""
        if self._text is None:
            if not self.sources:
                again = self._relower()
                self._relower = None
                self.program, self.code, self.fn, self.out_tree = again.program, again.code, again.fn, again.out_tree
                self.eqns_traced, self.donated, self.vectorized = again.eqns_traced, again.donated, again.vectorized
                self.sources = True
            self._text = _ir.annotate(self.code, self.program)
        return self._text

    @property
    def eqns(self):
        return len(self.program.eqns)


def _leaf_key(leaf, where):
    t = type(leaf)
    if t is np.ndarray:
        return (t, leaf.shape, leaf.dtype)
    if t is float or t is int or t is bool or t is complex:
        return (t,)
    if isinstance(leaf, np.generic):
        return (t, leaf.dtype)
    if type(leaf) is Tracer:
        raise LeakedTracerError("jit")
    raise TypeError(
        f"jit: {where} is a {t.__name__}, not an array or a number; values that are not arrays must "
        "be static: wg.jit(f, static_argnums=...) or static_argnames=...")


def _quick_key(args):
    """``(key, leaves)`` for positional arguments that are arrays or flat tuples/lists of arrays: the
    key (kinds, shapes, dtypes) determines the signature as :meth:`Jitted._signature` would; None for
    any other argument (it takes the general way)."""
    leaves = []
    parts = []
    for a in args:
        t = type(a)
        if t is np.ndarray:
            leaves.append(a)
            parts.append(a.shape)
            parts.append(a.dtype)
        elif t is tuple or t is list:
            parts.append((t, len(a)))
            for x in a:
                if type(x) is not np.ndarray:
                    return None
                leaves.append(x)
                parts.append(x.shape)
                parts.append(x.dtype)
        else:
            return None
    return (len(args), tuple(parts)), leaves


def _rebuilder(treedef):
    """A function from the program's flat outputs to the result's tree: for tuples, lists and None
    (value_and_grad's results) one compiled expression, otherwise ``tree.unflatten``."""
    counter = iter(range(treedef.num_leaves))

    def expr(d):
        if d.kind == "leaf":
            return f"o[{next(counter)}]"
        if d.kind == "none":
            return "None"
        inner = "".join(expr(c) + ", " for c in d.children)
        if d.kind == "tuple":
            return f"({inner})"
        if d.kind == "list":
            return f"[{inner}]"
        raise LookupError
    try:
        text = expr(treedef)
    except LookupError:
        return functools.partial(tree.unflatten, treedef)
    return eval(f"lambda o: {text}")  # noqa: S307 - built above from tuple/list/None kinds and indexes


class Jitted:
    """``wg.jit(f)``: call it like ``f``; ``lower(*args)`` gives the program for those arguments."""

    def __init__(self, f, static_argnums=(), static_argnames=(), donate_argnums=(), cache_size=64, vectorize=True):
        if not callable(f):
            raise TypeError(f"jit: expected a function, got {type(f).__name__}")
        self.f = f
        self.static_argnums = _as_tuple(static_argnums, "static_argnums", int)
        self.static_argnames = _as_tuple(static_argnames, "static_argnames", str)
        self.donate_argnums = _as_tuple(donate_argnums, "donate_argnums", int)
        if cache_size < 1:
            raise ValueError("jit: cache_size must be at least 1")
        self.cache_size = cache_size
        self.vectorize = vectorize
        self._cache = collections.OrderedDict()
        self._quick = {}  # _quick_key of plain positional arrays -> (entry, rebuild, key): see run_plain
        self.traces = 0  # how many times f was traced (a new signature, or a signature evicted)
        self._flats = {}  # (static values, tree structure) -> _Flat: its call primitive's programs
        try:
            self._params = inspect.signature(f).parameters
        except (TypeError, ValueError):
            self._params = {}
        functools.update_wrapper(self, f)

    def _split_args(self, args, kwargs):
        n = len(args)
        static = []
        for i in self.static_argnums:
            k = i % n if -n <= i < n else None
            if k is None:
                raise ValueError(f"jit: static_argnums={self.static_argnums} but {_name(self.f)} was called "
                                 f"with {n} positional argument(s)")
            static.append(("arg", k, args[k]))
        dyn_args = tuple(a for k, a in enumerate(args) if k not in {s[1] for s in static})
        dyn_kwargs = {}
        for key in sorted(kwargs):
            if key in self.static_argnames:
                static.append(("kw", key, kwargs[key]))
            else:
                dyn_kwargs[key] = kwargs[key]
        for kind, where, value in static:
            try:
                hash(value)
            except TypeError:
                raise TypeError(f"jit: the static argument {where!r} of {_name(self.f)} is a "
                                f"{type(value).__name__}, which is not hashable; static values key the cache, "
                                "so pass a tuple (not a list) or make the argument non-static") from None
        return tuple(static), dyn_args, dyn_kwargs

    def _signature(self, args, kwargs):
        static, dyn_args, dyn_kwargs = self._split_args(args, kwargs)
        leaves, treedef = tree.flatten((dyn_args, dyn_kwargs))
        keys = tuple(_leaf_key(leaf, "an argument") if type(leaf) is not np.ndarray else (np.ndarray, leaf.shape, leaf.dtype)
                     for leaf in leaves)
        return (treedef, keys, static), static, leaves, treedef

    def __call__(self, *args, **kwargs):
        if _levels_open():
            return self._call_under_transforms(args, kwargs)
        return self.run_plain(args, kwargs)

    def run_plain(self, args, kwargs):
        """Run the program for these (untraced) arguments, tracing it first for a new signature.
        Arguments that are arrays and flat tuples/lists of arrays (most calls) take a shorter way to
        the cached program: their shapes and dtypes key it without a pytree flatten and its hash."""
        quick = None if kwargs or self.static_argnums or self.static_argnames else _quick_key(args)
        if quick is not None:
            hit = self._quick.get(quick[0])
            if hit is not None:
                entry, rebuild, key = hit
                cache = self._cache
                if next(reversed(cache)) is not key:   # least recently used goes first, as below
                    cache.move_to_end(key)
                if entry.donated:
                    self._check_donated(entry.donated, quick[1])
                return rebuild(entry.fn(*quick[1]))
        key, static, leaves, treedef = self._signature(args, kwargs)
        cache = self._cache
        entry = cache.get(key)
        if entry is None:
            entry = self._lower(static, leaves, treedef, sources=False)
            cache[key] = entry
            if len(cache) > self.cache_size:
                cache.popitem(last=False)
                self._quick.clear()   # it may hold the evicted entry
        else:
            cache.move_to_end(key)
        if quick is not None:
            self._quick[quick[0]] = (entry, _rebuilder(entry.out_tree), key)
        if entry.donated:
            self._check_donated(entry.donated, leaves)
        return tree.unflatten(entry.out_tree, entry.fn(*leaves))

    def _check_donated(self, donated, leaves):
        """A donated array is written by the program: it must be writable and not the memory of
        another argument (which the program would then read after writing it)."""
        for k in donated:
            memory = root(leaves[k])
            if not leaves[k].flags.writeable:
                raise ValueError(f"jit: {_name(self.f)} donates a read-only array (donate_argnums="
                                 f"{self.donate_argnums}); pass a writable copy or do not donate it")
            for j, other in enumerate(leaves):
                if j != k and type(other) is np.ndarray and root(other) is memory:
                    raise ValueError(
                        f"jit: an array donated to {_name(self.f)} (donate_argnums={self.donate_argnums}) is "
                        "also passed as another argument, or shares its memory: the program would write "
                        "it while still reading the other. Pass a copy to one of them.")

    def _donated_leaves(self, static, treedef, leaves):
        """The positions of the array leaves of the donated positional arguments."""
        if not self.donate_argnums:
            return ()
        dyn_args, _ = tree.unflatten(treedef, list(range(len(leaves))))  # each leaf replaced by its position
        static_at = sorted(s[1] for s in static if s[0] == "arg")
        count = len(dyn_args) + len(static_at)
        positions = set()
        for i in self.donate_argnums:
            if not -count <= i < count:
                raise ValueError(f"jit: donate_argnums={self.donate_argnums} but {_name(self.f)} was called "
                                 f"with {count} positional argument(s)")
            k = i % count
            if k in static_at:
                raise ValueError(f"jit: argument {k} of {_name(self.f)} is both static and donated; a static "
                                 "value is part of the signature, not a buffer")
            positions.update(tree.leaves(dyn_args[k - sum(1 for s in static_at if s < k)]))
        return tuple(sorted(k for k in positions if type(leaves[k]) is np.ndarray))

    def _call_under_transforms(self, args, kwargs):
        """Called under grad, jvp or vmap: one ``jit_call`` equation of those transforms, whose rules
        are jitted programs too. Inside another jit, or when ``f`` closes over values of the
        enclosing transforms, ``f`` runs inline (its operations belong to the enclosing levels)."""
        if any(level.staged for level in open_levels()):
            return self.f(*args, **kwargs)
        static, dyn_args, dyn_kwargs = self._split_args(args, kwargs)
        leaves, treedef = tree.flatten((dyn_args, dyn_kwargs))
        flat = self._flats.get((static, treedef))
        if flat is None:
            flat = self._flats[static, treedef] = _Flat(self, static, treedef, len(leaves))
        if flat.inline:
            return self.f(*args, **kwargs)
        try:
            if not any(type(leaf) is Tracer for leaf in leaves):
                return self.run_plain(args, kwargs)  # constants of the enclosing transforms
            if _recorded_on_plain(leaves):
                outs = jit_forward(*leaves, flat=flat, box=_Residuals(flat.split_for(leaves)))
            else:
                outs = jit_call(*leaves, flat=flat)
        except _ClosedOver:
            flat.inline = True
            return self.f(*args, **kwargs)
        return tree.unflatten(flat.out_tree, list(outs))

    def lower(self, *args, **kwargs):
        """The program for these arguments (traced now if the cache does not hold it)."""
        if _levels_open():
            raise RuntimeError("jit(...).lower is called outside other transforms")
        key, static, leaves, treedef = self._signature(args, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._cache[key] = self._lower(static, leaves, treedef, sources=True)
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
                self._quick.clear()
        elif not entry.sources:  # lowered by a call: as_text() traces it again for the comments
            entry._relower = functools.partial(self._lower, static, leaves, treedef, sources=True)
        return entry

    def _rebuild(self, static, dyn_args, dyn_kwargs):
        args = list(dyn_args)
        kwargs = dict(dyn_kwargs)
        for kind, where, value in sorted((s for s in static if s[0] == "arg"), key=lambda s: s[1]):
            args.insert(where, value)
        for kind, where, value in static:
            if kind == "kw":
                kwargs[where] = value
        return args, kwargs

    def _lower(self, static, leaves, treedef, sources):
        # The collector is off while a program is traced and optimized. Staging makes millions of
        # objects (tracers, equations, Vars) that all live until lowering ends and make no cycles;
        # every collection, young or full, would only rescan them: off, the W1 16x loop's first
        # call took 12.7 s of CPU where rare full collections (collector_paused) took 17.0 s.
        # The price: cyclic garbage the user's function makes waits until this one trace is done.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._lower_program(static, leaves, treedef, sources)
        finally:
            if collecting:
                gc.enable()

    def _stage(self, static, leaves, treedef, sources):
        """Trace ``f`` on these leaves into a program: ``(program, out_tree)``."""
        self.traces += 1
        trace = _open_staging_level(sources)
        hook = _table.STAGING
        previous = hook[0]
        hook[0] = _nondiff_staged
        try:
            wrapped = [trace.new_input(leaf) for leaf in leaves]
            dyn_args, dyn_kwargs = tree.unflatten(treedef, wrapped)
            args, kwargs = self._rebuild(static, dyn_args, dyn_kwargs)
            out = settled(trace, run_user(self.f, args, kwargs))
        except NeedsLoop as e:  # vmap's signal for work whose shape depends on each example's values
            raise ConcretizationError(
                f"{e}. Under wg.jit the same holds for the values the program will receive: the result's "
                "size depends on them, so it cannot be one program; mark the argument static "
                "(static_argnums=...) or compute a fixed-size result (wnp.where)") from e
        finally:
            hook[0] = previous
            _close_staging_level(trace)
        out_leaves, out_tree = tree.flatten(out)
        outputs = []
        for leaf in out_leaves:
            if type(leaf) is Tracer:
                if leaf._trace is not trace:
                    if leaf._trace.alive and not leaf._trace.staged:
                        raise _ClosedOver
                    raise LeakedTracerError("jit")
                if leaf.index in trace.pending:
                    trace.settle(leaf.index)
                outputs.append(trace.vars[leaf.index])
            else:
                outputs.append(leaf)
        return _ir.Program(trace.program_inputs, trace.eqns, outputs), out_tree

    def _optimize(self, program, stats, donated=(), updates=True, cut=None):
        vectorize = functools.partial(_vectorize.vectorize, trace_type=StagingTrace, stats=stats, cut=cut) \
            if self.vectorize else None
        # The passes make no reference cycles, and every object they keep outlives them: young
        # collections would only rescan those (about a seventh of the passes' time on W2 colwise)
        collecting = gc.isenabled()
        gc.disable()
        try:
            return _ir.optimize(program, _PRIMS, vectorize, donated=donated, updates=updates,
                                simplify=_rewrite.simplify, spell=_rewrite.spell)
        finally:
            if collecting:
                gc.enable()

    def _lower_program(self, static, leaves, treedef, sources):
        t0 = time.perf_counter()
        program, out_tree = self._stage(static, leaves, treedef, sources)
        t1 = time.perf_counter()
        traced = len(program.eqns)
        stats = {}
        donated = self._donated_leaves(static, treedef, leaves)
        program = self._optimize(program, stats, donated=[program.inputs[k] for k in donated])
        t2 = time.perf_counter()
        name = _SAFE_NAME(getattr(self.f, "__name__", "f"))
        text, namespace = _ir.generate(program, getitem, name)
        t3 = time.perf_counter()
        fn, _ = _ir.compile_program(text, namespace, name)
        t4 = time.perf_counter()
        lowered = Lowered(program, text, fn, out_tree, traced, sources)
        lowered.donated = donated
        lowered.vectorized = stats
        lowered.timings = {"trace": t1 - t0, "optimize": t2 - t1, "generate": t3 - t2, "compile": t4 - t3}
        return lowered

    def __repr__(self):
        return f"<wg.jit of {_name(self.f)}>"


# --- a jitted function inside other transforms: one primitive whose rules are jitted too -----------
class _ClosedOver(Exception):
    """Staging met a value of an enclosing transform (``f`` closes over it): the call primitive
    cannot carry it, so that jitted function runs inline under the enclosing transforms."""


def _inexact(x):
    return np.issubdtype(np.result_type(unbox(x) if type(x) is Tracer else x), np.inexact)


class _Flat:
    """A jitted ``f`` on flat leaves, for one tree structure and one set of static values: what the
    call primitive ``jit_call`` carries. Its program, and the programs of its VJP, its JVP and its
    batched form, are jitted functions of their own, each traced once per signature and cached."""

    def __init__(self, jitted, static, treedef, count):
        self.jitted = jitted
        self.static = static
        self.treedef = treedef
        self.count = count        # input leaves
        self.out_tree = None
        self.inline = False       # f closes over a value of an enclosing transform: run it inline
        self.__name__ = _name(jitted.f)
        options = {"cache_size": jitted.cache_size, "vectorize": jitted.vectorize}
        self.call = Jitted(self.run, **options)
        self.vjp = Jitted(self.run_vjp, **options)
        self.jvp = Jitted(self.run_jvp, **options)
        self.batched = {}
        self.splits = collections.OrderedDict()

    def run(self, *leaves):
        dyn_args, dyn_kwargs = tree.unflatten(self.treedef, list(leaves))
        args, kwargs = self.jitted._rebuild(self.static, dyn_args, dyn_kwargs)
        self.jitted.traces += 1
        out_leaves, out_tree = tree.flatten(self.jitted.f(*args, **kwargs))
        if self.out_tree is None:
            self.out_tree = out_tree
        elif out_tree != self.out_tree:
            raise TypeError(f"jit: {self.__name__} returns a different structure for arguments of the same "
                            f"structure ({out_tree!r}, earlier {self.out_tree!r})")
        return tuple(out_leaves)

    def _differentiable(self, primals):
        """``run`` as a function of its floating-point leaves alone (integer leaves stay fixed)."""
        diff = [k for k, p in enumerate(primals) if _inexact(p)]

        def f(*values):
            full = list(primals)
            for k, v in zip(diff, values):
                full[k] = v
            return self.run(*full)
        return f, diff

    def run_vjp(self, *values):
        """The cotangents of the floating-point input leaves, from the primals and the outputs'
        cotangents (the forward pass is recomputed inside this program, as checkpoint does)."""
        primals, cts = values[:self.count], values[self.count:]
        f, diff = self._differentiable(primals)
        _, pullback = vjp(f, *[primals[k] for k in diff])
        return pullback(tuple(cts))

    def run_joint(self, *values):
        """The outputs and the floating-point input leaves' cotangents, from the primals and the
        outputs' cotangents: the program :class:`_Split` cuts in two."""
        primals, cts = values[:self.count], values[self.count:]
        f, diff = self._differentiable(primals)
        outs, pullback = vjp(f, *[primals[k] for k in diff])
        return tuple(outs), pullback(tuple(cts))

    def split_for(self, leaves):
        """The forward and backward programs for these leaves' signature (cached, bounded)."""
        values = tuple(leaf.value if type(leaf) is Tracer else leaf for leaf in leaves)
        key = tuple(_leaf_key(v, "an argument") for v in values)
        split = self.splits.get(key)
        if split is None:
            split = self.splits[key] = _Split(self, values)
            if len(self.splits) > self.jitted.cache_size:
                self.splits.popitem(last=False)
        return split

    def run_jvp(self, *values):
        """The outputs' tangents, from the primals and the floating-point inputs' tangents."""
        primals, tangents = values[:self.count], values[self.count:]
        f, diff = self._differentiable(primals)
        _, out = jvp(f, tuple(primals[k] for k in diff), tuple(tangents))
        return out

    def batch(self, batched):
        """The jitted vmap of ``run`` with these leaves batched along their first axis."""
        fn = self.batched.get(batched)
        if fn is None:
            fn = self.batched[batched] = Jitted(vmap(self.run, in_axes=tuple(0 if b else None for b in batched)),
                                                cache_size=self.jitted.cache_size, vectorize=self.jitted.vectorize)
        return fn


class _Split:
    """``grad(jit(f))`` on plain values: f's forward program also returns the residuals (what the
    VJP reads), and the backward program starts from them, so f's forward pass runs once where
    ``jit_call``'s VJP program would compute it again. Both come from one traced VJP program,
    cut where the cotangents enter (``_ir.split``); each then gets its own in-place updates, so the
    backward program never writes into a residual (a ``vjp_fn`` may be called again)."""

    __slots__ = ("outputs", "diff", "forward", "backward")

    def __init__(self, flat, primals):
        key, static, leaves, treedef = flat.call._signature(primals, {})
        lowered = flat.call._cache.get(key)   # the outputs' shapes: from the program, or a trace of f
        outputs = lowered.program.outputs if lowered is not None else \
            flat.call._stage(static, leaves, treedef, sources=False)[0].outputs
        samples = [np.zeros(v.shape, v.dtype) if type(v) is _ir.Var else np.zeros(np.shape(v), np.result_type(v))
                   for v in outputs]     # the outputs' cotangents, as samples
        self.outputs = len(samples)
        self.diff = [k for k, p in enumerate(primals) if _inexact(p)]
        joint = Jitted(flat.run_joint, vectorize=flat.jitted.vectorize)
        _, static, leaves, treedef = joint._signature((*primals, *samples), {})
        program, _ = joint._stage(static, leaves, treedef, sources=False)
        forward, backward = _ir.split(joint._optimize(program, {}, updates=False, cut=len(primals)), len(primals),
                                      self.outputs)
        self.forward = _compiled(_ir.in_place_updates(forward, _PRIMS, spell=_rewrite.spell), flat.__name__ + "_forward")
        self.backward = _compiled(_ir.in_place_updates(backward, _PRIMS, spell=_rewrite.spell), flat.__name__ + "_backward")


class _Residuals:
    """One call's residuals, held by its tape entry (the primitive's parameters) for the VJP."""

    __slots__ = ("split", "values")

    def __init__(self, split):
        self.split = split
        self.values = None


def _compiled(program, name):
    name = _SAFE_NAME(name)
    text, namespace = _ir.generate(program, getitem, name)
    return _ir.compile_program(text, namespace, name)[0]


def _recorded_on_plain(leaves):
    """Does the innermost level record (reverse mode) these leaves, whose values are all plain?"""
    top = open_levels()[-1]
    if type(top) is not ReverseTrace:
        return False
    return all(type(leaf) is not Tracer or (leaf._trace is top and type(leaf.value) is not Tracer)
               for leaf in leaves)


def _forward_impl(*leaves, flat, box):
    values = box.split.forward(*leaves)
    box.values = values[box.split.outputs:]
    return values[:box.split.outputs]


def _forward_vjp(g, ans, args, params, parents):
    box = params["box"]
    if any(type(gi) is Tracer for gi in g):    # the backward pass is recorded by another transform
        return _call_vjp(g, ans, args, params, parents)
    by_leaf = dict(zip(box.split.diff, box.split.backward(*box.values, *g)))
    return [by_leaf.get(position) for position, _ in parents]


def _call_impl(*leaves, flat):
    return flat.call.run_plain(leaves, {})


def _call_vjp(g, ans, args, params, parents):
    flat = params["flat"]
    diff = [k for k, a in enumerate(args) if _inexact(a)]
    cts = flat.vjp(*args, *g)
    by_leaf = dict(zip(diff, cts))
    return [by_leaf.get(position) for position, _ in parents]


def _call_jvp(tangents, ans, args, params):
    flat = params["flat"]
    diff = [k for k, a in enumerate(args) if _inexact(a)]
    if all(tangents[k] is None for k in diff):
        return None
    ts = [tangents[k] if tangents[k] is not None else np.zeros(np.shape(unbox(args[k])), np.result_type(unbox(args[k])))
          for k in diff]
    return list(flat.jvp(*args, *ts))


def _call_batch(prim, vals, batched, params, size):
    flat = params["flat"]
    return flat.batch(tuple(batched))(*vals)  # values of outer levels make it a jit_call there


jit_call = _table.defprim(_call_impl, name="jit_call", multiple_results=True, fused_vjp=_call_vjp,
                          fused_jvp=_call_jvp, batch=one_batch_axis(_call_batch))
# jit_call under a reverse level on plain values: the forward program keeps the residuals (its
# JVP and batched form are jit_call's, for a tape entry replayed under another transform)
jit_forward = _table.defprim(_forward_impl, name="jit_forward", multiple_results=True, fused_vjp=_forward_vjp,
                             fused_jvp=_call_jvp, batch=one_batch_axis(_call_batch))


def _SAFE_NAME(name):
    name = re.sub(r"[^0-9a-zA-Z_]", "_", name) or "f"
    return name if not name[0].isdigit() else "f_" + name


def _name(f):
    return getattr(f, "__name__", "f")


def _as_tuple(x, what, kind):
    items = tuple(x) if isinstance(x, (tuple, list)) else (x,)
    for i in items:
        if not isinstance(i, kind):
            raise TypeError(f"jit: {what} must be {kind.__name__}s (or a tuple of them), got {x!r}")
    return items


def jit(f=None, *, static_argnums=(), static_argnames=(), donate_argnums=(), cache_size=64, vectorize=True):
    """Stage ``f`` once per signature and run it as straight-line NumPy (see the module docstring).

    ``static_argnums``/``static_argnames`` name arguments whose values (hashable) are part of the
    signature, as in JAX: Python control flow may depend on them. ``donate_argnums`` names
    positional arguments whose arrays the program may reuse for its results and intermediates (an
    update ``p - lr * g`` written into ``p``), as in JAX: the caller must not use them afterwards.
    ``cache_size`` bounds the programs kept per function (least recently used are dropped and
    retraced).
    ``vectorize=False`` turns off the pass that batches a loop's isomorphic per-column equations
    (transforms/_vectorize.py), to compare.
    """
    if f is None:
        return functools.partial(jit, static_argnums=static_argnums, static_argnames=static_argnames,
                                 donate_argnums=donate_argnums, cache_size=cache_size, vectorize=vectorize)
    return Jitted(f, static_argnums, static_argnames, donate_argnums, cache_size, vectorize)

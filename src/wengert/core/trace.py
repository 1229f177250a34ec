"""The forward half of the engine: the interpreter stack, traces, tracers and primitives.

A transform opens a level on this thread's interpreter stack: a :class:`Trace`. Reverse mode's
level (:class:`ReverseTrace`) records a tape, a Wengert list of entries; forward mode's and
vmap's levels compute instead (``computes``: they live in transforms/, above this file). Every
value a transform follows is wrapped in a :class:`Tracer` of its level. Calling a
:class:`Primitive` on tracers unwraps the innermost level and either records one entry on its tape
or hands the operation to it, then wraps the answer again. Because a tracer's value may itself be a
tracer of an outer level, ``grad(grad(f))`` or ``vmap(grad(f))`` need no special case, and
perturbations of different levels never mix.
"""
from __future__ import annotations

import dis
import gc
import sys
import threading
from typing import NamedTuple

import numpy as np

from .errors import LeakedTracerError

_new = object.__new__


class _Levels(threading.local):
    """This thread's interpreter stack: the open levels, outermost first."""

    def __init__(self):
        self.open = []
        self.hiding = []   # the open levels whose values carry hidden axes (vmap's), innermost last


_LEVELS = _Levels()


def open_levels():
    """The interpreter levels open in this thread, outermost first (read it; do not change it)."""
    return _LEVELS.open


def open_level(trace):
    """Push ``trace`` on this thread's interpreter stack; its level is its depth there."""
    stack = _LEVELS.open
    stack.append(trace)
    trace.level = len(stack)
    trace.stack = stack
    if trace.hidden_axes:
        _LEVELS.hiding.append(trace)
    return trace


def hiding_levels():
    """The open levels (this thread's) whose values carry hidden axes, innermost last: functions
    without a derivative ask the innermost one to handle batched values (``nondiff``)."""
    return _LEVELS.hiding


def close_level(trace):
    """Pop ``trace`` (normally the top; a level closed out of order is removed where it is).

    From now on bind refuses its tracers (``LeakedTracerError``) instead of recording them.
    """
    observer = OBSERVER[0]
    if observer is not None and type(trace) is ReverseTrace:
        observer.closed(trace, sys._getframe(1))
    trace.alive = False
    trace.guard = _refuse_leaked
    trace.owners = None   # its tracers point back at the trace: no cycle outlives the level
    stack = trace.stack
    if stack and stack[-1] is trace:
        stack.pop()
    elif trace in stack:
        stack.remove(trace)
    if trace.hidden_axes:
        hiding = _LEVELS.hiding
        if hiding and hiding[-1] is trace:
            hiding.pop()
        elif trace in hiding:
            hiding.remove(trace)


class Trace:
    """One interpreter level: the base of every transform's trace.

    ``level`` is its depth on the thread's interpreter stack (inner transforms are higher), set by
    :func:`open_level`. What the engine asks of a level is three class attributes and a method:

    * ``computes``: bind hands every operation on its tracers to ``process(prim, args, vals,
      parents, params)`` (forward mode and vmap compute; reverse mode records on a tape);
    * ``hidden_axes``: how many leading axes of its values belong to the interpreter, not to the
      program (vmap's batch axes); a tracer's ``shape`` leaves them out;
    * ``guard``: when set, bind calls it (or ``process``) before each operation: the rare path.
    """

    __slots__ = ("level", "stack", "alive", "guard", "owners", "__weakref__")
    computes = False
    hidden_axes = 0
    observe = None    # a reverse level being watched operation by operation (see ReverseTrace)
    staged = False   # a jit level: its values are samples, never read for control flow (transforms/jit.py);
    # it also has ``add_at(acc, private, g, index)``, the backward loop's accumulation of a read's cotangent

    def __init__(self):
        self.level = 0
        self.alive = True
        self.guard = None
        self.owners = None   # id(memory) -> the tracer holding it whole, as last written (core/mutation.py)


class ReverseTrace(Trace):
    """Reverse mode's level: a tape (the Wengert list), the transform's inputs, and the
    bookkeeping in-place writes need (``core/mutation.py``)."""

    __slots__ = ("tape", "inputs", "written", "saved", "scanned", "observe", "last_write", "input_memory")

    def __init__(self):
        super().__init__()
        self.observe = None   # an engine observer's per-operation hooks (see Observer.opened)
        self.tape = []
        self.inputs = []      # the input arrays: in-place writes into them are refused
        self.written = None   # id(base array) -> tape index of its latest in-place write
        self.saved = None     # id(base array) -> name of a primitive that saved it (see mutation.py)
        self.scanned = 0      # how much of the tape ``saved`` covers
        self.last_write = -1  # tape index of the latest in-place write (values made later are not stale)
        self.input_memory = None   # (number of inputs, ids of their memory), for refusing writes into them

    def record(self, prim, args, ans, params, parents):
        """Append one tape entry; its index. (``bind`` inlines this: it is the hot path.)"""
        tape = self.tape
        tape.append((prim, args, ans, params, parents))
        return len(tape) - 1


class Entry(NamedTuple):
    """The fields of a tape entry, by name. Entries are plain tuples in this order (a tuple is
    cheaper to build on every operation); readers that want names use ``Entry._make(entry)``.

    ``parents`` pairs each traced argument's position with the tape index of its entry.
    """

    prim: object        # the Primitive; None for an input of the transform
    args: object        # the arguments the rules read (others None)
    ans: object         # the output, if a rule reads it (else None)
    params: dict        # the keyword parameters of the call
    parents: tuple      # ((argument position, tape index), ...)


# An input of the transform is the entry INPUT.
INPUT = (None, None, None, None, ())
PRIM, ARGS, ANS, PARAMS, PARENTS = range(5)   # positions of Entry's fields in a tape tuple


class Tracer:
    """A value being transformed: its value and its place at one interpreter level.

    ``index`` is its tape index on a reverse level (on a computing level, a counter the level may
    use); ``aux`` is what a computing level carries beside the value (forward mode: the tangent; on
a tape's tracers, the Metadata its indexed reads keep); ``src``, on a view (indexing, transpose,
reshape), the tracer it was taken from, where a write through the view goes (core/mutation.py).
    The array-like behaviour (operators, methods, NumPy protocols) is attached by
    ``wengert.numpy``, so the engine stays independent of the NumPy face.
    """

    __slots__ = ("value", "_trace", "index", "aux", "src")
    __array_priority__ = 1000.0

    def __init__(self, value, trace, index):
        self.value = value
        self._trace = trace
        self.index = index


def make_tracer(value, trace, index=0):
    """A tracer of ``trace`` (without ``__init__``: the one way every interpreter makes them)."""
    t = _new(Tracer)
    t.value = value
    t._trace = trace
    t.index = index
    return t


# Full collections during transforms: one per FULL_COLLECTION_EVERY collections of the middle
# generation (Python's default is one per 10; a middle collection comes every ~7,000 tracked
# allocations). See collector_paused.
FULL_COLLECTION_EVERY = 1000
_collector_lock = threading.Lock()
_collector = {"depth": 0, "saved": None}   # transforms open (all threads), thresholds to restore


class collector_paused:
    """Make Python's full garbage collections rare while transforms run; keep the young ones.

    A tape is many small tuples and tracers without reference cycles. A full collection rescans
    all of them, again and again as the tape grows (at Python's default thresholds a
    100,000-entry gradient took 1.4x as long). Young collections scan only recent objects, and
    they collect the cyclic garbage the user's function makes and drops (switching the collector
    off instead let it pile up until the transform returned: benchmarks/collector.py). So
    while any transform runs the third threshold is raised to ``FULL_COLLECTION_EVERY``, and
    restored when the last one, in any thread, ends. (A class, not a generator: every transform
    call enters it twice.)

    At 100, a gradient of seed 001's per-column loop (~20 tracked objects per trip, 600k on the
    tape) still ran one full collection per call, rescanning the tape: 6-11% of its time. At 1000
    it is one per ~10 calls. The price: cyclic garbage that survives a middle collection (alive
    across ~7,000 allocations) waits longer for a full one (benchmarks/collector.py measures both).
    """

    __slots__ = ()

    def __enter__(self):
        with _collector_lock:
            if _collector["depth"] == 0:
                saved = gc.get_threshold()
                _collector["saved"] = saved
                gc.set_threshold(saved[0], saved[1], max(saved[2], FULL_COLLECTION_EVERY))
            _collector["depth"] += 1

    def __exit__(self, *exc):
        with _collector_lock:
            _collector["depth"] -= 1
            if _collector["depth"] == 0:
                gc.set_threshold(*_collector["saved"])
        return False


class Observer:
    """A tool that watches the engine (the profiler, ``wengert.profiling``); set it with
    ``OBSERVER[0] = observer`` and remove it with None. Core calls these hooks while one is set;
    otherwise each costs one ``is None`` test per transform (none per operation).
    """

    def opened(self, trace, frame):
        """A reverse level was opened (``frame``: the function that opened it); the observer may
        give it a tape of its own (a list subclass that watches appends), and may watch it
        operation by operation: set ``trace.observe`` to an object with the methods below and
        ``trace.guard`` to any check (bind consults ``observe`` on its rare path only)."""

    def operation(self, trace, prim, args, vals, parents, params):
        """bind on a watched level: return ``apply_and_record(trace, prim, vals, parents, params)``."""
        return apply_and_record(trace, prim, vals, parents, params)

    def recorder(self, trace, fn, args):
        """An operation that records outside bind (an in-place write, a Buffer snapshot) on a
        watched level: return ``fn(*args)``."""
        return fn(*args)

    def closed(self, trace, frame):
        """A reverse level is about to close (its forward pass is over)."""

    def backward(self, tape, run):
        """A backward pass over ``tape``: return ``run()``, the cotangents (timing it, say);
        ``run(accumulate)`` runs it with another cotangent accumulator (one that measures)."""
        return run()


OBSERVER = [None]


def new_trace():
    """Open a reverse-mode level on this thread's interpreter stack."""
    trace = open_level(ReverseTrace())
    observer = OBSERVER[0]
    if observer is not None:
        observer.opened(trace, sys._getframe(1))
    return trace


def _refuse_leaked(trace, args, prim):
    raise LeakedTracerError(prim.name)


close_trace = close_level   # the name reverse mode uses


def new_input(value, trace):
    """Wrap ``value`` as an input of ``trace`` (a tape entry with no primitive)."""
    trace.inputs.append(value)
    return make_tracer(value, trace, trace.record(*INPUT))


def unbox(x):
    """The plain value under any number of tracer levels."""
    while type(x) is Tracer:
        x = x.value
    return x


def levels_of(x):
    """The levels tracing ``x``, outermost first (its chain of tracers)."""
    while type(x) is Tracer:
        yield x._trace
        x = x.value


def is_batched(x):
    """Does ``x`` carry a vmap level's batch axes (a level with hidden axes in its chain of tracers)?"""
    return any(t.hidden_axes for t in levels_of(x))


def shape_of(x):
    """``x``'s shape; a tracer's ``shape`` (inside vmap, one example's)."""
    return x.shape if type(x) is Tracer else np.shape(x)


def dtype_of(x):
    """The dtype of ``x``'s plain value."""
    x = unbox(x)
    return x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype


_METADATA = frozenset(("shape", "dtype", "ndim", "size"))


class Metadata:
    """What a tape entry keeps of an array its rules read only for shape, dtype, ndim or size (the
    shape and dtype): the array itself can be freed during the forward pass. Arrays of up to
    ``SMALL`` elements are kept as they are (cheaper than this object)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, array):
        self.shape = array.shape
        self.dtype = array.dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self):
        return f"Metadata(shape={self.shape}, dtype={self.dtype})"


SMALL = 64


def _names_read(fn):
    """Local names ``fn`` reads: ``(for their values, only for shape/dtype/ndim/size)``.

    None when it cannot tell (``*args``/``**kwargs`` rules): then everything is kept.
    """
    code = getattr(fn, "__code__", None)
    if code is None or code.co_flags & 0x0C:
        return None
    values, metadata = set(), set()
    instructions = list(dis.get_instructions(code))
    for k, ins in enumerate(instructions):
        if not ins.opname.startswith("LOAD_") or ins.opname in ("LOAD_CONST", "LOAD_GLOBAL", "LOAD_ATTR",
                                                                  "LOAD_METHOD", "LOAD_NAME"):
            continue
        names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
        after = instructions[k + 1] if k + 1 < len(instructions) else None
        if len(names) == 1 and after is not None and after.opname == "LOAD_ATTR" and after.argval in _METADATA:
            metadata.add(names[0])
        else:
            values.update(names)
    return values, metadata - values


def index_level(index):
    """The level whose values an index holds where that level has to run the indexing itself: a
    vmap level (indices that differ per example) or a jit level (indices the program computes);
    None for a plain index, or one only a differentiating level traces."""
    found = None
    for i in (index if type(index) is tuple else (index,)):
        if type(i) is Tracer and (i._trace.hidden_axes or i._trace.staged):
            if found is None or i._trace.level > found.level:
                found = i._trace
    return found


class Primitive:
    """An operation the engine knows how to differentiate.

    ``impl(*args, **params)`` computes on plain arrays. ``vjp`` is a tuple with one rule per
    positional argument, ``rule(g, ans, *args, **params) -> cotangent for that argument`` (``None``
    for arguments that are never differentiated). A primitive with many operands (concatenate,
    stack, Buffer snapshots) may instead give ``fused_vjp(g, ans, args, params, parents)``, which
    returns the cotangents of all traced operands at once, in the order of ``parents``. Forward
    mode reads ``jvp`` (one rule per argument, ``rule(t, ans, *args, **params)``: that argument's
    share of the output's tangent), ``fused_jvp(tangents, ans, args, params)`` (``None`` for
    arguments without a tangent) or ``linear``. Rules are written with wengert operations, so a
    backward pass run under an outer transform is itself recorded.

    The rules are read once, here, to find which of ``ans`` and the arguments they use; a node keeps
    only those, so intermediates that no rule needs are freed during the forward pass.
    """

    __slots__ = ("name", "impl", "_vjp", "_fused_vjp", "jvp", "fused_jvp", "linear", "batch", "batched_vjp", "keep_ans",
                 "_keep_args", "value_args", "multiple_results", "records", "drop_args", "owned_vjp", "rewrite", "_reads", "plans", "arity",
                 "_derived_ans", "indexed_read", "element_write")

    def __init__(self, name, impl, vjp=None, jvp=None, batch=None, multiple_results=False, fused_vjp=None,
                 fused_jvp=None, linear=False, owned_vjp=None, batched_vjp=False):
        self.name = name
        self.impl = impl
        self.vjp = vjp
        self.fused_vjp = fused_vjp
        self.jvp = jvp                # one rule per argument: rule(t, ans, *args, **params) -> J_i t
        self.fused_jvp = fused_jvp    # or one rule for all: fused_jvp(tangents, ans, args, params)
        self.linear = linear          # or linear in its arrays: the JVP is the primitive of the tangents
        self.batch = batch
        self.multiple_results = multiple_results
        self.owned_vjp = owned_vjp  # optional fused_vjp that may reuse ``g`` when the backward pass owns it
        self.rewrite = None    # hook: rewrite(*args, **params) on traced arguments, before anything is
        # recorded, returns a replacement result or None (rewrites.py's log of a known composition)
        self.batched_vjp = batched_vjp  # are its VJP rules right on values that carry vmap's batch axes? (a
        # tape inside vmap records it instead of vmap running the function once per example)
        self.keep_ans, keep, self.value_args = _what_rules_keep(vjp)
        self._keep_args = keep
        self.drop_args = () if keep is None else tuple(i for i, k in enumerate(keep) if not k)
        self._derived_ans = self.keep_ans   # keep_ans may be set to True by hand later (nn.py)
        self.indexed_read = None   # x[index] (getitem): the VJP rule whose work the backward pass does inline
        self.element_write = None  # x[index] = v (an in-place write): the owned rule whose work the backward
        # pass does inline when one element was written
        self._reads = _rule_reads(vjp)
        self.plans = {} if self._reads is not None else None
        self.arity = len(self._reads) if self._reads is not None else -1   # positional arguments the plans cover

    @property
    def vjp(self):
        return self._vjp

    @vjp.setter
    def vjp(self, rules):
        self._vjp = rules
        self.records = rules is not None or getattr(self, "_fused_vjp", None) is not None

    @property
    def fused_vjp(self):
        return self._fused_vjp

    @fused_vjp.setter
    def fused_vjp(self, rule):
        self._fused_vjp = rule
        self.records = rule is not None or getattr(self, "_vjp", None) is not None

    @property
    def keep_args(self):
        """Per-argument flags: does a rule read this argument? (None: keep all)."""
        return self._keep_args

    @keep_args.setter
    def keep_args(self, flags):
        """Fix what every tape entry keeps (custom functions, rewrites): no per-entry plans."""
        self._keep_args = flags
        self.drop_args = () if flags is None else tuple(i for i, keep in enumerate(flags) if not keep)
        self.plans = None

    def plan(self, traced):
        """What an entry keeps when the arguments at bit mask ``traced`` are traced: only the rules of
        those run. ``(keep_ans, trims)``: whether those rules read the output, and ``trims``, None
        when every argument is kept as it is, else ``(drop, spare, metadata)``: positions no rule
        reads (dropped), read only by the rules of untraced arguments (large arrays dropped), read
        only for metadata by the rules that run (large arrays kept as Metadata). Cached per mask:
        bind reads ``plans`` directly."""
        plan = self.plans.get(traced)
        if plan is None:
            values, metadata, keep_ans = set(), set(), False
            for position, (ans, by_value, by_metadata) in enumerate(self._reads):
                if traced >> position & 1:
                    values |= by_value
                    metadata |= by_metadata
                    keep_ans = keep_ans or ans
            keep_ans = keep_ans or (self.keep_ans and not self._derived_ans)
            n = len(self._reads)   # positional arguments (rules also name keyword parameters)
            read_at_all = set().union(*(r[1] | r[2] for r in self._reads))
            spare = tuple(sorted(i for i in read_at_all - values - metadata if i < n))
            trims = (tuple(i for i in self.drop_args if i < n), spare,
                     tuple(sorted(i for i in metadata - values if i < n)))
            plan = (keep_ans, trims if any(trims) else None)
            self.plans[traced] = plan
        return plan

    def __call__(self, *args, **params):
        for a in args:
            if type(a) is Tracer:
                if self.rewrite is not None:
                    out = self.rewrite(*args, **params)
                    if out is not None:
                        return out
                if params and type(self.impl) is _ufunc:
                    return _traced_ufunc_call(self, args, params)
                return bind(self, args, params)
        if params:
            if "index" in params:   # plain operands, but maybe an index vmap batches or jit stages
                level = index_level(params["index"])
                if level is not None:
                    return level.process(self, args, list(args), (), params)
            return self.impl(*args, **params)
        return self.impl(*args)   # plain operands, no keywords: the rules' calls (no empty ** to pass)

    def __repr__(self):
        return f"<primitive {self.name}>"


_ufunc = np.ufunc


def _traced_ufunc_call(prim, args, options):
    """NumPy's ufunc keywords on traced values: ``dtype=`` casts the result; the rest are refused."""
    dtype = options.pop("dtype", None)
    if options:
        raise TypeError(
            f"wengert.numpy.{prim.name}: the options {sorted(options)} are not supported on traced values "
            "(out= would write into a plain array and drop the gradient); use the returned value instead")
    out = bind(prim, args, {})
    return out if dtype is None else out.astype(dtype)


def _what_rules_keep(rules):
    """What a tape entry keeps for ``rules``: (ans?, per-argument flags, per-argument value flags).

    Flags are None for "keep everything". An argument read only for its shape or dtype is kept
    (cheaper than copying the metadata out) but not counted as a value the rules depend on, so
    an in-place write into it later is harmless (see ``wengert.mutation``).
    """
    if not rules:
        return False, None, None
    keep_ans = False
    keep = values = None
    for rule in rules:
        if rule is None:
            continue
        code = getattr(rule, "__code__", None)
        read = _names_read(rule)
        if read is None:
            return True, None, None
        value_names, meta_names = read
        names = code.co_varnames[: code.co_argcount]
        if len(names) >= 2 and names[1] in value_names | meta_names:
            keep_ans = True
        used = tuple(n in value_names or n in meta_names for n in names[2:])
        by_value = tuple(n in value_names for n in names[2:])
        if keep is not None and len(used) != len(keep):
            return True, None, None
        keep = used if keep is None else tuple(a or b for a, b in zip(keep, used))
        values = by_value if values is None else tuple(a or b for a, b in zip(values, by_value))
    if keep is not None and all(keep):
        keep = None
    return keep_ans, keep, values




def _rule_reads(rules):
    """Per argument, what its VJP rule reads: ``(ans?, positions read for values, positions read
    only for metadata)``; None when some rule cannot be read (then entries keep what
    ``_what_rules_keep`` says)."""
    if not rules:
        return None
    reads = []
    for rule in rules:
        if rule is None:
            reads.append((False, frozenset(), frozenset()))
            continue
        read = _names_read(rule)
        if read is None:
            return None
        value_names, meta_names = read
        names = rule.__code__.co_varnames[: rule.__code__.co_argcount]
        positions = {name: k for k, name in enumerate(names[2:])}
        reads.append((len(names) >= 2 and names[1] in value_names | meta_names,
                      frozenset(positions[n] for n in value_names if n in positions),
                      frozenset(positions[n] for n in meta_names if n in positions)))
    return reads


_ndarray = np.ndarray


def bind(prim, args, params, into=None):
    """Run ``prim`` on arguments some of which are tracers, recording one tape entry at the top level.

    This is the cost wengert adds to every operation, so the one- and two-argument cases are
    spelled out (which arguments are traced, as the bit mask ``traced``, and whether a value of an
    outer level remains, ``nested``, fall out of the same tests), and a tracer is built without an
    ``__init__`` call. ``into``: an operand's array the two-argument ufunc writes its result into
    (``reusable_operand``).
    """
    n = len(args)
    if n == 1:
        a = args[0]
        trace = a._trace
        va = a.value
        vals = [va]
        parents = ((0, a.index),)
        traced = 1
        nested = type(va) is Tracer
    elif n == 2:
        a, b = args
        if type(a) is Tracer:
            trace = a._trace
            va = a.value
            if type(b) is Tracer:
                other = b._trace
                if other is trace:
                    vb = b.value
                    vals = [va, vb]
                    parents = ((0, a.index), (1, b.index))
                    traced = 3
                    nested = type(va) is Tracer or type(vb) is Tracer
                else:   # two levels: the inner one records, the outer one sees it through prim()
                    nested = True
                    if other.level > trace.level:
                        trace = other
                        vals = [a, b.value]
                        parents = ((1, b.index),)
                        traced = 2
                    else:
                        vals = [va, b]
                        parents = ((0, a.index),)
                        traced = 1
            else:
                vals = [va, b]
                parents = ((0, a.index),)
                traced = 1
                nested = type(va) is Tracer
        else:
            trace = b._trace
            vb = b.value
            vals = [a, vb]
            parents = ((1, b.index),)
            traced = 2
            nested = type(vb) is Tracer
    else:
        trace = None
        for a in args:
            if type(a) is Tracer:
                t = a._trace
                if trace is None or t.level > trace.level:
                    trace = t
        vals = list(args)
        parents = []
        traced = 0
        nested = False
        for i, a in enumerate(args):
            if type(a) is Tracer:
                if a._trace is trace:
                    vals[i] = v = a.value
                    parents.append((i, a.index))
                    traced |= 1 << i
                    if type(v) is Tracer:
                        nested = True
                else:
                    nested = True
        parents = tuple(parents)
    if trace.guard is not None:
        if trace.computes:
            return trace.process(prim, args, vals, parents, params)
        if trace.guard(trace, args, prim):   # an argument made before an in-place write was brought up
            return bind(prim, args, params, into)   # to date (core/mutation.py): its tape index moved
        if trace.observe is not None:
            return trace.observe.operation(trace, prim, args, vals, parents, params)
    # the rest is apply_and_record, written out: this is the hot path (positional calls spelled
    # out: a call with ``*vals, **params`` builds a tuple and a dict on every operation)
    if nested:
        ans = prim(*vals, **params)
    elif params:
        ans = prim.impl(*vals, **params)
    elif n == 2:
        ans = prim.impl(vals[0], vals[1]) if into is None else prim.impl(vals[0], vals[1], out=into)
    elif n == 1:
        ans = prim.impl(vals[0])
    else:
        ans = prim.impl(*vals)
    if not prim.records:
        return ans
    plans = prim.plans
    if plans is not None and prim.arity == n:
        # keep what the rules of the traced arguments read (Primitive.plan)
        keep_ans, trims = plans.get(traced) or prim.plan(traced)
        if trims is not None:
            drop, spare, metadata = trims
            for i in drop:
                vals[i] = None
            for i in spare:
                v = vals[i]
                if type(v) is _ndarray and v.size > SMALL:
                    vals[i] = None
            for i in metadata:
                v = vals[i]
                if type(v) is _ndarray and v.size > SMALL:
                    vals[i] = Metadata(v)
    else:
        keep_ans = prim.keep_ans
        for i in prim.drop_args:
            if i < n:
                vals[i] = None
    tape = trace.tape
    index = len(tape)
    if prim.multiple_results:
        tape.append((prim, vals, ans, params, parents))
        return _select_outputs(ans, trace, index)
    tape.append((prim, vals, ans if keep_ans else None, params, parents))
    out = _new(Tracer)
    out.value = ans
    out._trace = trace
    out.index = index
    return out


# NumPy writes the result of ``a + b`` into a temporary operand's memory (temporary elision) when
# the operand is at least this large: the result then stays in cache. On a tape every operand is held
# by its tracer, so NumPy never can; ``reusable_operand`` does it for the operators instead.
ELIDE_BYTES = 1 << 18


def _value_refs():
    """References to an array held only by a tracer's ``value``, as ``reusable_operand`` counts them
    (the attribute, one local name, getrefcount's argument) on this interpreter."""
    holder = _new(Tracer)
    holder.value = np.empty(1)
    va = holder.value
    return _getrefcount(va)


_getrefcount = sys.getrefcount
_VALUE_REFS = _value_refs()


def reusable_operand(prim, t, other, position):
    """The array of tracer ``t`` (operand ``position`` of ``prim``, a two-argument ufunc called
    through an operator on a temporary ``t``) into which the result may be written: an array of at
    least ``ELIDE_BYTES`` that only ``t`` holds (no tape entry, view or name), of the result's dtype
    and shape, on a plain reverse level whose entry for this call keeps no more than its shape; else
    None."""
    trace = t._trace
    va = t.value
    if type(va) is not _ndarray or va.nbytes < ELIDE_BYTES or _getrefcount(va) != _VALUE_REFS \
            or va.base is not None or not va.flags.writeable or trace.guard is not None or trace.computes:
        return None
    if type(other) is Tracer:
        if other._trace is not trace:
            return None
        vb = other.value
        traced = 3
    else:
        vb = other
        traced = 1 << position
    if type(vb) is _ndarray:
        shape = va.shape
        if vb.ndim > len(shape) or any(m != 1 and m != n for m, n in zip(vb.shape[::-1], shape[::-1])):
            return None
    elif type(vb) is not float and type(vb) is not int and not isinstance(vb, np.generic):
        return None
    if np.result_type(va, vb) != va.dtype:
        return None
    plans = prim.plans
    if plans is None or prim.arity != 2:
        return None
    trims = (plans.get(traced) or prim.plan(traced))[1]
    if trims is None:
        return None
    drop, spare, metadata = trims
    return va if position in drop or position in spare or position in metadata else None


def apply(prim, vals, params):
    """``prim`` on values unwrapped from one level: its implementation, or the primitive again when
    values of outer levels remain (so that those levels see it). ``bind`` inlines this."""
    for v in vals:
        if type(v) is Tracer:
            return prim(*vals, **params)
    return prim.impl(*vals, **params)


def apply_and_record(trace, prim, vals, parents, params):
    """bind's second half on a reverse level: run ``prim`` on the unwrapped ``vals``, record one tape
    entry (keeping what the rules read) and wrap the answer. ``bind`` inlines the same lines."""
    ans = apply(prim, vals, params)
    if not prim.records:
        return ans
    n = len(vals)
    for i in prim.drop_args:
        if i < n:
            vals[i] = None
    if prim.multiple_results:
        return _select_outputs(ans, trace, trace.record(prim, vals, ans, params, parents))
    return make_tracer(ans, trace, trace.record(prim, vals, ans if prim.keep_ans else None, params, parents))


class _Select:
    """The cotangent of one output of a multiple-result primitive."""

    __slots__ = ("position", "count", "g")

    def __init__(self, position, count, g):
        self.position = position
        self.count = count
        self.g = g


def _select_vjp(g, ans, whole, position, count):
    return _Select(position, count, g)


select = Primitive("select", lambda whole, position, count: whole[position], vjp=(_select_vjp,),
                   batched_vjp=True)   # it only routes the cotangent


def _select_outputs(ans, trace, index):
    return tuple(make_tracer(value, trace, trace.record(select, (None,), None, {"position": k, "count": len(ans)},
                                                        ((0, index),)))
                 for k, value in enumerate(ans))

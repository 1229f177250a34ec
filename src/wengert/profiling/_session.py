"""The profiler's instrumentation: installed for the profiled period only, removed on exit.

Nothing here runs unless a profile is being taken. ``Session`` is the engine's observer
(``core.trace.Observer``, registered in ``OBSERVER`` while the session is open), and every
measurement comes through the engine's hooks:

* always, while the session is open (a few clock reads per gradient call): ``opened`` and
  ``closed`` when a reverse level opens and closes (the traced forward pass begins and ends), and
  ``backward`` around each backward pass;
* for a *detailed* call only: the call's level is watched (``trace.observe``), so bind hands the
  session every operation (``operation``: its time, its source line, its output) and in-place
  writes and Buffer snapshots come through ``recorder``; the call's tape (``_DetailedTape``) names
  and times every entry appended, and during the backward pass times the reads ``tape[i]`` (the
  reverse loop reads each entry once, so the time between two reads is one entry's backward time);
  the backward pass runs with a measuring accumulator (``_timed_accumulate``); and the primitives'
  ``impl`` are wrapped to time array kernels (put back when the call's backward pass ends: the one
  instrument that is not an engine hook, since a hook on every primitive call on plain arrays
  would cost NumPy-speed code).

Profiling is not thread-safe: profile one thread at a time.
"""
from __future__ import annotations

import os
import sys
from time import perf_counter

import numpy as np

from ..core import backward as _backward_mod
from ..core import trace as _trace_mod
from ..core.trace import Metadata
from .. import numpy as wnp
from ..primitives import _table
from ..transforms.reverse import value_and_grad

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep
_INTERNAL = (_PACKAGE_DIR, _NUMPY_DIR)
_MAX_FRAMES = 24

_internal_cache = {}


def is_internal(code):
    """True for code inside the wengert package (or NumPy): skipped when naming source lines."""
    hit = _internal_cache.get(code)
    if hit is None:
        filename = code.co_filename
        hit = _internal_cache[code] = filename.startswith(_INTERNAL) or filename.startswith("<frozen")
    return hit


_func_names = {}


def func_name(code):
    """``colwise`` or ``colwise.<listcomp>``: a code object's function, without ``<locals>``."""
    name = _func_names.get(code)
    if name is None:
        name = _func_names[code] = _func_name(code)
    return name


def _func_name(code):
    qualname = getattr(code, "co_qualname", code.co_name)
    parts = [p for p in qualname.split(".") if p != "<locals>"]
    named = [p for p in parts if not p.startswith("<")]
    if parts and parts[-1].startswith("<") and named:
        return f"{named[-1]}.{parts[-1]}"
    return parts[-1] if parts else code.co_name


class _Tape(list):
    """A profiled call's tape: a plain list that knows its call (``backward`` gets only the tape)."""

    __slots__ = ("call",)


class _DetailedTape(_Tape):
    """A detailed call's tape. While its forward pass runs (``STATE.tape is self``) every append is
    named and timed; while its backward pass runs (``STATE.bwd_tape is self``) each read ``tape[i]``
    starts entry ``i``. At other times it is a plain list."""

    __slots__ = ()

    def append(self, entry):
        now = perf_counter()
        list.append(self, entry)
        st = STATE
        if st.tape is self and st.depth_append == 0:
            log = st.current.log
            st.depth_append = 1
            try:
                log.appended(self, entry, now, sys._getframe(1))
            finally:
                st.depth_append = 0
            log.last_exit = perf_counter()
            log.overhead += log.last_exit - now

    def __getitem__(self, i):
        st = STATE
        if st.bwd_tape is not self or type(i) is not int:
            return list.__getitem__(self, i)
        now = perf_counter()
        log = st.bwd
        cur = st.cur
        log.bwd[cur] += now - st.t
        st.cur = i
        log.visited[i] = 1
        st.t = perf_counter()
        return list.__getitem__(self, i)


class NodeLog:
    """Everything measured about one detailed call, one slot per tape entry."""

    def __init__(self, boundary):
        self.boundary = boundary        # the user's frame that asked for the gradient (see _user_frame)
        self.n = 0
        self.input_entries = []
        self.kernel_total = 0.0
        self.name = []                  # primitive name ("input" for an input of the transform)
        self.site = []                  # stack id (see ``stacks``)
        self.fwd = []                   # seconds from the previous entry's append to this one's
        self.last_exit = 0.0
        self.kernel_mark = 0.0
        self.tail = 0.0                 # seconds from the last operation to the end of the forward pass
        self.fkern = []                 # seconds of it in the primitive's implementation
        self.out_bytes = []             # bytes of the output (logical: size * itemsize)
        self.out_new = []               # bytes of the output that are new memory (not a view)
        self.out_size = []              # elements of the output
        self.f64 = []                   # the output is float64
        self.extra = {}                 # index -> detail (getitem's index, a snapshot's writes, ...)
        self.promotions = {}            # index -> description of the operand that promoted to float64
        self.float32_in = False         # some input of the transform is float32
        self.stacks = []                # stack id -> tuple of (code, line), innermost first
        self._stack_ids = {}
        self.codes = {}                 # id(code) -> code (kept alive, so ids stay unique)
        self.in_bytes = []              # bytes of the traced operands (logical)
        self.parents = None             # per entry: tuple of (position, parent index), at backward
        self.bwd = None                 # seconds per entry in the backward pass (+1 slot: seeds)
        self.bkern = None
        self.acc = None                 # seconds in accumulate, per entry that made the contribution
        self.bwd_bytes = None           # bytes allocated by the entry's rules and its accumulations
        self.materialized = None        # parent index -> bytes of buffers made for its cotangent
        self.visited = None
        self.seen = {}                  # id(array made by a kernel in backward) -> entry
        self.overhead = 0.0             # seconds the profiler spent naming lines in forward
        self.backward_done = False

    # --- forward -----------------------------------------------------------------------------
    def stack_id(self, frame):
        boundary = self.boundary
        internal = _internal_cache
        key = []
        f = frame
        while f is not None and f is not boundary:
            code = f.f_code
            hit = internal.get(code)
            if hit is None:
                hit = is_internal(code)
            if not hit:
                key.append(id(code))
                key.append(f.f_lineno)
                self.codes[id(code)] = code
                if len(key) == 2 * _MAX_FRAMES:
                    break
            f = f.f_back
        key = tuple(key)
        sid = self._stack_ids.get(key)
        if sid is None:
            sid = self._stack_ids[key] = len(self.stacks)
            codes = self.codes
            self.stacks.append(tuple((codes[key[k]], key[k + 1]) for k in range(0, len(key), 2)))
        return sid

    def appended(self, tape, entry, now, frame):
        """Tape entry ``len(tape) - 1`` was just appended (by anything: bind, a fast path, a Buffer).

        Its forward time is the time since the previous entry was appended: the Python that led to
        it (the user's loop, wengert's wrappers), the primitive's implementation and its recording.
        """
        st = STATE
        if len(tape) - 1 != self.n:
            self.fill(tape, len(tape) - 1, frame)
        prim = entry[0]
        kernel = st.kernel - self.kernel_mark
        self.kernel_mark = st.kernel
        if prim is None:                              # an input: its value is known at close_trace
            self.input_entries.append(self.n)
            self._append("input", -1, 0.0, 0.0, None)
        else:
            value = entry[2]
            if value is None and prim.name == "getitem" and entry[1] and entry[3]:
                try:                                  # the fast path of x[index]: a view, cheap to make
                    parent = entry[1][0]
                    if type(parent) is Metadata:      # only its shape was kept: a zero-stride stand-in
                        parent = np.broadcast_to(np.zeros((), parent.dtype), parent.shape)
                    value = parent[entry[3]["index"]]
                except Exception:
                    value = None
            self._append(prim.name, self.stack_id(frame), now - self.last_exit, kernel, value)
            if prim.name in _NOTED:
                self._note(self.n - 1, prim, entry)

    def close(self, tape, inputs, frame):
        """At the end of the forward pass: entries not seen yet, and the inputs' values."""
        if self.n != len(tape):
            self.fill(tape, len(tape), frame)
        for k, j in enumerate(self.input_entries):
            if k < len(inputs):
                self._set_output(j, inputs[k])
                if getattr(_trace_mod.unbox(inputs[k]), "dtype", None) == np.float32:
                    self.float32_in = True

    def fill(self, tape, stop, frame):
        """Entries appended behind the tape's back (``list.append(tape, ...)``): named, not timed."""
        sid = None
        for j in range(self.n, stop):
            prim = tape[j][0]
            if sid is None:
                sid = self.stack_id(frame)
            self._append(prim.name if prim is not None else "input", sid if prim is not None else -1,
                         0.0, 0.0, None)

    def annotate(self, out, args, n0, dtypes=True):
        """What an instrumented call learned about the entries it appended from ``n0`` on: their
        outputs (``out``: a tracer or a tuple of them), their operands, and float64 promotion."""
        Tracer = _trace_mod.Tracer
        first = True
        for o in (out if type(out) is tuple else (out,)):
            if type(o) is not Tracer or not (n0 <= o.index < self.n):
                continue
            j = o.index
            self._set_output(j, o.value)
            if first and args is not None:
                total = 0
                for a in args:
                    if type(a) is Tracer:
                        total += getattr(a.value, "nbytes", 8)
                self.in_bytes[j] = total
                first = False
            if dtypes and args is not None and self.f64[j]:
                culprit = _promotion(args)
                if culprit is not None:
                    self.promotions[j] = culprit

    def _set_output(self, j, value):
        while type(value) is _trace_mod.Tracer:
            value = value.value
        if type(value) is np.ndarray:
            nbytes = value.nbytes
            self.out_bytes[j] = nbytes
            self.out_new[j] = nbytes if value.base is None else 0
            self.out_size[j] = value.size
            self.f64[j] = value.dtype.char == "d"
        elif value is not None:
            nbytes = getattr(value, "nbytes", 8)
            self.out_bytes[j] = nbytes
            self.out_new[j] = nbytes
            self.out_size[j] = getattr(value, "size", 1)
            dtype = getattr(value, "dtype", None)
            self.f64[j] = dtype is not None and dtype.char == "d"

    def _append(self, name, sid, seconds, kernel, value):
        self.name.append(name)
        self.site.append(sid)
        self.fwd.append(seconds)
        self.fkern.append(kernel)
        self.in_bytes.append(0)
        if value is None:
            self.out_bytes.append(0)
            self.out_new.append(0)
            self.out_size.append(0)
            self.f64.append(False)
        else:
            while type(value) is _trace_mod.Tracer:
                value = value.value
            if type(value) is np.ndarray:
                nbytes = value.nbytes
                self.out_bytes.append(nbytes)
                self.out_new.append(nbytes if value.base is None else 0)
                self.out_size.append(value.size)
                self.f64.append(value.dtype.char == "d")
            else:
                nbytes = getattr(value, "nbytes", 8)
                self.out_bytes.append(nbytes)
                self.out_new.append(nbytes)
                self.out_size.append(getattr(value, "size", 1))
                dtype = getattr(value, "dtype", None)
                self.f64.append(dtype is not None and dtype.char == "d")
        self.n += 1

    def _note(self, j, prim, entry):
        name = prim.name
        params = entry[3]
        if name == "getitem" and params:
            self.extra[j] = ("index", params.get("index"))      # described when the report is built
        elif name == "buffer_snapshot" and params:
            self.extra[j] = ("writes", len(params.get("writes", ())))

    # --- backward ----------------------------------------------------------------------------
    def start_backward(self, tape):
        n = len(tape)
        self.parents = [e[4] if e is not None else () for e in tape]
        self.bwd = [0.0] * (n + 1)
        self.bkern = [0.0] * (n + 1)
        self.acc = [0.0] * (n + 1)
        self.bwd_bytes = [0] * (n + 1)
        self.visited = bytearray(n + 1)
        self.materialized = {}


_NOTED = frozenset(("getitem", "buffer_snapshot"))


def _promotion(args):
    """The operand that turned float32 work into float64, or None when no float32 operand is traced."""
    f32 = False
    culprit = None
    for a in args:
        if type(a) is _trace_mod.Tracer:
            v = _trace_mod.unbox(a)
            dt = getattr(v, "dtype", None)
            if dt == np.float32 or dt == np.float16:
                f32 = True
            elif dt == np.float64 and culprit is None:
                culprit = f"a traced float64 array of shape {np.shape(v)}"
        elif isinstance(a, np.ndarray):
            if a.dtype == np.float64 and culprit is None:
                culprit = f"a float64 constant array of shape {a.shape}"
            elif a.dtype.kind in "iub" and culprit is None:
                culprit = f"an integer array ({a.dtype}) of shape {a.shape}"
        elif isinstance(a, np.generic):
            if a.dtype == np.float64 and culprit is None:
                culprit = "a NumPy float64 scalar (np.float64)"
        elif isinstance(a, (list, tuple)) and culprit is None:
            culprit = "a Python list or tuple (converted to a float64 array)"
    if not f32:
        return None
    return culprit or "an operand of another dtype"


def index_pattern(index):
    """``(slice(None), 3)`` -> ``"[:, i]"``: the shape of an indexing expression, for the evidence."""
    if type(index) is not tuple:
        index = (index,)
    letters = iter("ijklmn")
    parts = []
    for i in index:
        if i is None:
            parts.append("None")
        elif i is Ellipsis:
            parts.append("...")
        elif type(i) is slice:
            parts.append(":" if i == slice(None) else "a:b")
        elif isinstance(i, (int, np.integer)):
            parts.append(next(letters, "i"))
        elif isinstance(i, np.ndarray):
            parts.append("mask" if i.dtype == bool else "int array")
        else:
            parts.append(type(i).__name__)
    return "[" + ", ".join(parts) + "]"


class CallLog:
    """One gradient call seen by the session (a trace opened while no profiled trace was open)."""

    def __init__(self, detail, site, boundary):
        self.detail = detail
        self.site = site                # (filename, line, function) of the user's call, or None
        self.t_fwd = None               # seconds from new_trace to close_trace
        self.t_bwd = 0.0                # seconds in backward (all pulls)
        self.t_bwd_first = None
        self.pulls = 0
        self.log = NodeLog(boundary) if detail else None
        self.function = None            # (f, args, argnums, kwargs) when the caller exposes them
        self.t0 = None


class _State:
    def __init__(self):
        self.session = None
        self.current = None             # the CallLog whose forward pass is running
        self.tape = None                # its tape, when detailed
        self.inputs = None
        self.depth = 0                  # inside an instrumented bind (nested binds pass through)
        self.depth_append = 0
        self.bwd_tape = None            # the detailed tape whose backward pass runs
        self.in_kernel = False
        self.in_accumulate = False
        self.kernel = 0.0               # kernel seconds so far in the current forward pass
        self.bwd = None                 # NodeLog of the detailed backward pass running
        self.cur = -1
        self.t = 0.0


STATE = _State()
_CALIBRATION = None


def _calibration_chain(x):
    """A chain of common operations on a 4-element array (see ``Session._calibrate``)."""
    y = x
    for _ in range(12):
        y = wnp.tanh(y * 0.5 + 0.25) - y[::-1] / 3.0
        y = wnp.exp(-y * y) + wnp.sin(y)
        y = wnp.reshape(y, (2, 2)).T.reshape(4) + wnp.sum(y) * 0.01
    return wnp.sum(y * y)


def _user_frame(frame):
    """The first frame outside wengert at or above ``frame``.

    It asked for the gradient: the operations of the differentiated function are recorded from
    frames below it, so naming their lines walks the stack up to it and no further.
    """
    f = frame
    while f is not None and is_internal(f.f_code):
        f = f.f_back
    return f


class Session(_trace_mod.Observer):
    """Open with ``with Session(policy) as s``; ``policy(site) -> bool`` says whether a new call is
    detailed. ``s.calls`` lists the CallLogs. ``on_call(call, frame)`` (optional) runs before a call's
    trace is opened (the CLI times the plain forward pass there)."""

    def __init__(self, policy, on_call=None, calibrate=True):
        self.policy = policy
        self.calibrate = calibrate
        self.calibration = None         # fixed costs of one operation on tiny arrays (see _calibrate)
        self.on_call = on_call
        self.calls = []
        self._wrapped_impls = {}
        self.pending = None             # detailed call whose heavy patches are still installed
        self.paused = False             # while True, gradient calls are not profiled
        self._prims = None              # (cache key, the primitives whose impl is timed)

    # --- installing ----------------------------------------------------------------------------
    def __enter__(self):
        if STATE.session is not None:
            raise RuntimeError("wengert.profile is already running (profiles do not nest)")
        if _trace_mod.OBSERVER[0] is not None:
            raise RuntimeError("another observer of the engine is installed")
        STATE.session = self
        _trace_mod.OBSERVER[0] = self   # the engine calls opened, closed and backward (the hooks below)
        if self.calibrate:
            try:
                self.calibration = self._calibrate()
            except BaseException:
                self.__exit__(None, None, None)
                raise
        return self

    def _calibrate(self):
        """What one operation on tiny arrays costs, measured under the instrumentation: the backward
        time of one entry, and the forward time in the primitive's implementation.

        Time beyond these fixed costs is taken as array work (the backward rules run NumPy operators
        on plain arrays, which no wrapper sees). Cached for the process.
        """
        global _CALIBRATION
        if _CALIBRATION is not None:
            return _CALIBRATION
        policy, self.policy = self.policy, (lambda site: True)
        on_call, self.on_call = self.on_call, None
        start = len(self.calls)
        try:
            vg = value_and_grad(_calibration_chain)
            x = np.linspace(0.1, 0.9, 4)
            for _ in range(3):
                vg(x)
        finally:
            self.policy = policy
            self.on_call = on_call
            calls = self.calls[start:]
            del self.calls[start:]
        steps, kernels = [], []
        for call in calls[1:]:
            log = call.log
            steps.extend(log.bwd[j] - log.acc[j] for j in range(log.n)
                         if log.name[j] != "input" and log.visited[j])
            kernels.extend(log.fkern[j] for j in range(log.n) if log.name[j] != "input" and log.fkern[j] > 0)
        _CALIBRATION = {"backward_step": float(np.median(steps)) if steps else 0.0,
                        "forward_kernel": float(np.median(kernels)) if kernels else 0.0}
        return _CALIBRATION

    def __exit__(self, *exc):
        try:
            self._finish_pending()
        finally:
            _trace_mod.OBSERVER[0] = None
            STATE.__init__()
        return False

    def _install_heavy(self):
        """Time the primitives' implementations for one detailed call (each ``prim.impl`` wrapped,
        and put back when the call's backward pass ends)."""
        key = (len(sys.modules), len(_table.PRIMITIVES))
        if self._prims is None or self._prims[0] != key:
            prims = set(_table.PRIMITIVES.values())
            prims.add(_trace_mod.select)
            for name, module in _wengert_modules():
                for value in list(vars(module).values()):
                    if isinstance(value, _trace_mod.Primitive):
                        prims.add(value)
            self._prims = (key, prims)
        for prim in self._prims[1]:
            wrap_impl(prim, self._wrapped_impls)

    def _uninstall_heavy(self):
        for prim, impl in self._wrapped_impls.items():
            prim.impl = impl
        self._wrapped_impls = {}

    def _finish_pending(self):
        if self.pending is not None:
            self.pending = None
            self._uninstall_heavy()

    # --- the engine's hooks (core.trace.Observer) -------------------------------------------------
    def opened(self, trace, frame):
        st = STATE
        if st.current is not None or st.bwd is not None or self.paused:
            return
        self._finish_pending()
        caller = _user_frame(frame)         # the user's frame that asked for the gradient
        site = None if caller is None else (caller.f_code.co_filename, caller.f_lineno, func_name(caller.f_code))
        detail = bool(self.policy(site))
        call = CallLog(detail, site, caller)
        if self.on_call is not None:
            call.function = _function_of(frame)
            self.on_call(call)
        self.calls.append(call)
        if detail:
            self._install_heavy()
            self.pending = call
        tape = _DetailedTape() if detail else _Tape()
        tape.call = call
        trace.tape = tape
        if detail:   # watch it operation by operation (bind's and the recorders' hooks, below)
            trace.observe = self
            if trace.guard is None:
                trace.guard = _watched
        st.current = call
        if detail:
            st.tape = tape
            st.inputs = trace.inputs
            st.kernel = 0.0
            call.log.kernel_mark = 0.0
        call.t0 = perf_counter()
        if detail:
            call.log.last_exit = call.t0

    def closed(self, trace, frame):
        st = STATE
        call = st.current
        tape = trace.tape
        if call is not None and isinstance(tape, _Tape) and tape.call is call:
            t = perf_counter()
            call.t_fwd = t - call.t0
            if call.detail:
                log = call.log
                log.tail = t - log.last_exit
                st.tape = None
                trace.observe = None
                if trace.guard is _watched:
                    trace.guard = None
                log.close(tape, trace.inputs, frame)
                log.kernel_total = st.kernel
            st.current = None
            st.tape = None
            st.inputs = None

    def backward(self, tape, run):
        call = tape.call if isinstance(tape, _Tape) else None
        st = STATE
        if call is None or st.bwd is not None:
            return run()
        if call.detail and self.pending is call:
            log = call.log
            log.start_backward(tape)
            n = len(tape)
            st.bwd = log
            st.cur = n
            st.bwd_tape = tape
            t0 = st.t = perf_counter()
            try:
                cts = run(_timed_accumulate)
            finally:
                t1 = perf_counter()
                log.bwd[st.cur] += t1 - st.t
                st.bwd_tape = None
                st.bwd = None
                log.backward_done = True
                self.pending = None
                self._uninstall_heavy()
        else:
            t0 = perf_counter()
            cts = run()
            t1 = perf_counter()
        call.t_bwd += t1 - t0
        if call.t_bwd_first is None:
            call.t_bwd_first = t1 - t0
        call.pulls += 1
        return cts


    def operation(self, trace, prim, args, vals, parents, params):
        """bind on the detailed call's level: tells the log what the operation produced."""
        st = STATE
        tape = st.tape
        if tape is None or st.depth:
            return _trace_mod.apply_and_record(trace, prim, vals, parents, params)
        if prim not in self._wrapped_impls:
            wrap_impl(prim, self._wrapped_impls)
        n0 = len(tape)
        st.depth = 1
        try:
            ans = _trace_mod.apply_and_record(trace, prim, vals, parents, params)
        finally:
            st.depth = 0
        if len(tape) > n0:
            t = perf_counter()
            log = st.current.log
            log.annotate(ans, args, n0)
            log.overhead += perf_counter() - t
        return ans

    def recorder(self, trace, fn, args):
        """Operations that record without bind (Buffer snapshots, in-place writes): their work is
        copying arrays, so all of their time counts as kernel time."""
        st = STATE
        tape = st.tape
        if tape is None or st.depth:
            return fn(*args)
        log = st.current.log
        n0 = len(tape)
        spent = log.overhead
        st.depth = 1
        t0 = perf_counter()
        try:
            out = fn(*args)
        finally:
            st.depth = 0
        t1 = perf_counter()
        if len(tape) > n0:
            log.fkern[n0] += max(0.0, (t1 - t0) - (log.overhead - spent))
            log.annotate(out, args, n0, dtypes=False)
            log.overhead += perf_counter() - t1
        return out


def _watched(trace, args, prim):
    """The guard of a watched level: nothing to check; it routes bind to ``trace.observe``."""


def _function_of(frame):
    """``(f, args, argnums, kwargs)`` from the frame that opened the trace, when it is wengert's
    ``_Recording._record`` (which opens the trace before it touches its arguments)."""
    code = frame.f_code
    if code.co_name != "_record" or not is_internal(code):
        return None
    local = frame.f_locals
    try:
        return local["f"], tuple(local["args"]), tuple(local["argnums"]), dict(local.get("kwargs") or {})
    except (KeyError, TypeError):
        return None


def _wengert_modules():
    for name, module in list(sys.modules.items()):
        if module is not None and (name == "wengert" or name.startswith("wengert.")) \
                and not name.startswith("wengert.profiling"):
            yield name, module


def wrap_impl(prim, wrapped):
    impl = prim.impl
    if impl is None or prim in wrapped:
        return
    wrapped[prim] = impl

    def timed(*args, **params):
        st = STATE
        if st.in_kernel:
            return impl(*args, **params)
        st.in_kernel = True
        t0 = perf_counter()
        try:
            out = impl(*args, **params)
        finally:
            st.in_kernel = False
        dt = perf_counter() - t0
        log = st.bwd
        if log is None:
            st.kernel += dt
        else:
            cur = st.cur
            log.bkern[cur] += dt
            if type(out) is np.ndarray and out.base is None:
                log.bwd_bytes[cur] += out.nbytes
                log.seen[id(out)] = cur
        return out

    prim.impl = timed


def _timed_accumulate(cts, owned, i, c, real=_backward_mod.accumulate):
    """The backward pass's accumulator during a detailed call: its time, and the arrays it allocates."""
    st = STATE
    log = st.bwd
    if log is None or st.in_accumulate:
        return real(cts, owned, i, c)
    old = cts[i]
    st.in_accumulate = True
    t0 = perf_counter()
    try:
        real(cts, owned, i, c)
    finally:
        st.in_accumulate = False
    dt = perf_counter() - t0
    cur = st.cur
    log.acc[cur] += dt
    kind = type(c)
    array = c if kind is np.ndarray else (c[1] if kind is tuple and len(c) == 4 else None)
    if type(array) is np.ndarray and array.base is None and id(array) not in log.seen:
        log.bwd_bytes[cur] += array.nbytes      # made by the rule outside a primitive (not passed on)
        log.seen[id(array)] = cur
    new = cts[i]
    if new is not old and new is not c and type(new) is np.ndarray and new.base is None:
        log.bwd_bytes[cur] += new.nbytes         # a buffer the accumulator allocated
        log.materialized[i] = log.materialized.get(i, 0) + new.nbytes

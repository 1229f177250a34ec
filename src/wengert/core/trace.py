"""The forward half of the engine: traces, tracers, nodes and primitives.

A transform (``grad``, ``vjp``, ...) opens a :class:`Trace`, a Wengert list of tape entries at
one nesting level. Every value it differentiates is wrapped in a :class:`Tracer` that points at that
trace. Calling a :class:`Primitive` on tracers unwraps the innermost level, computes, records one
node on that level's tape and wraps the answer again. Because a tracer's value may itself be a
tracer of an outer trace, ``grad(grad(f))`` needs no special case, and perturbations of different
levels never mix.
"""
from __future__ import annotations

import dis

from .errors import LeakedTracerError


class Trace:
    """One transform's tape. ``level`` orders nested transforms: the innermost is highest."""

    __slots__ = ("level", "tape", "alive", "__weakref__")

    def __init__(self, level):
        self.level = level
        self.tape = []
        self.alive = True


# A tape entry is a plain tuple (cheaper to build than an object):
#   (primitive, arguments the rules read, output if the rules read it, parameters,
#    parents: a tuple of (argument position, tape index) for the traced arguments)
# An input of the transform is the entry INPUT.
INPUT = (None, None, None, None, ())


class Tracer:
    """A value being differentiated: its current value and its place on a trace's tape.

    The array-like behaviour (operators, methods, NumPy protocols) is attached by
    ``wengert.numpy``, so the engine stays independent of the NumPy face.
    """

    __slots__ = ("value", "_trace", "index")
    __array_priority__ = 1000.0

    def __init__(self, value, trace, index):
        self.value = value
        self._trace = trace
        self.index = index


_depth = [0]


def new_trace():
    _depth[0] += 1
    return Trace(_depth[0])


def close_trace(trace):
    trace.alive = False
    _depth[0] -= 1


def new_input(value, trace):
    """Wrap ``value`` as an input of ``trace`` (a tape entry with no primitive)."""
    tape = trace.tape
    tape.append(INPUT)
    return Tracer(value, trace, len(tape) - 1)


def unbox(x):
    """The plain value under any number of tracer levels."""
    while type(x) is Tracer:
        x = x.value
    return x


def _names_read(fn):
    """Names of the local variables that ``fn``'s body reads (used to decide what to keep)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    read = set()
    for ins in dis.get_instructions(code):
        if ins.opname.startswith("LOAD_") and ins.opname != "LOAD_CONST":
            read.add(ins.argval)
        elif ins.opname == "LOAD_CLOSURE" or ins.opname == "MAKE_CELL":
            read.add(ins.argval)
    if code.co_flags & 0x0C:  # *args or **kwargs: cannot tell, keep everything
        return None
    return read


class Primitive:
    """An operation the engine knows how to differentiate.

    ``impl(*args, **params)`` computes on plain arrays. ``vjp`` is a tuple with one rule per
    positional argument, ``rule(g, ans, *args, **params) -> cotangent for that argument`` (``None``
    for arguments that are never differentiated). Rules are written with wengert operations, so a
    backward pass run under an outer transform is itself recorded.

    The rules are read once, here, to find which of ``ans`` and the arguments they use; a node keeps
    only those, so intermediates that no rule needs are freed during the forward pass.
    """

    __slots__ = ("name", "impl", "vjp", "jvp", "batch", "keep_ans", "keep_args", "multiple_results")

    def __init__(self, name, impl, vjp=None, jvp=None, batch=None, multiple_results=False):
        self.name = name
        self.impl = impl
        self.vjp = vjp
        self.jvp = jvp
        self.batch = batch
        self.multiple_results = multiple_results
        self.keep_ans, self.keep_args = _what_rules_keep(vjp)

    def __call__(self, *args, **params):
        for a in args:
            if type(a) is Tracer:
                return bind(self, args, params)
        return self.impl(*args, **params)

    def __repr__(self):
        return f"<primitive {self.name}>"


def _what_rules_keep(rules):
    """(keep ans?, tuple of keep-argument flags or None for keep all) over all of ``rules``."""
    if not rules:
        return False, None
    keep_ans = False
    flags = None
    for rule in rules:
        if rule is None:
            continue
        read = _names_read(rule)
        code = getattr(rule, "__code__", None)
        if read is None or code is None:
            return True, None
        names = code.co_varnames[: code.co_argcount]
        if len(names) >= 2 and names[1] in read:
            keep_ans = True
        used = tuple(n in read for n in names[2:])
        flags = used if flags is None else tuple(a or b for a, b in zip(flags, used))
        if len(used) != len(flags):
            return True, None
    if flags is not None and all(flags):
        flags = None
    return keep_ans, flags


def bind(prim, args, params):
    """Run ``prim`` on arguments some of which are tracers, recording one node at the top level."""
    if len(args) == 1:
        a = args[0]
        trace = a._trace
        vals = [a.value]
        parents = ((0, a.index),)
    else:
        trace = None
        for a in args:
            if type(a) is Tracer:
                t = a._trace
                if trace is None or t.level > trace.level:
                    trace = t
        vals = list(args)
        parents = []
        for i, a in enumerate(args):
            if type(a) is Tracer and a._trace is trace:
                vals[i] = a.value
                parents.append((i, a.index))
        parents = tuple(parents)
    if not trace.alive:
        raise LeakedTracerError(prim.name)
    for v in vals:
        if type(v) is Tracer:
            ans = prim(*vals, **params)
            break
    else:
        ans = prim.impl(*vals, **params)
    if prim.vjp is None:
        return ans
    keep = prim.keep_args
    if keep is not None:
        for i in range(min(len(keep), len(vals))):
            if not keep[i]:
                vals[i] = None
    tape = trace.tape
    if prim.multiple_results:
        tape.append((prim, vals, ans, params, parents))
        return _select_outputs(ans, trace, len(tape) - 1)
    tape.append((prim, vals, ans if prim.keep_ans else None, params, parents))
    return Tracer(ans, trace, len(tape) - 1)


class _Select:
    """The cotangent of one output of a multiple-result primitive."""

    __slots__ = ("position", "count", "g")

    def __init__(self, position, count, g):
        self.position = position
        self.count = count
        self.g = g


def _select_vjp(g, ans, whole, position, count):
    return _Select(position, count, g)


select = Primitive("select", lambda whole, position, count: whole[position], vjp=(_select_vjp,))


def _select_outputs(ans, trace, index):
    tape = trace.tape
    outs = []
    for k, value in enumerate(ans):
        tape.append((select, (None,), None, {"position": k, "count": len(ans)}, ((0, index),)))
        outs.append(Tracer(value, trace, len(tape) - 1))
    return tuple(outs)

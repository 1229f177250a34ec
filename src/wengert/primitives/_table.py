"""How the table is declared: ``defprim`` for differentiable operations, ``nondiff`` for the rest.

Each family file under ``primitives/`` is a list of ``defprim`` lines: the NumPy implementation and
one VJP rule per differentiable argument, side by side. ``unbroadcast`` is the one helper almost
every binary rule needs.
"""
from __future__ import annotations

import numpy as np

from ..core.trace import Primitive, Tracer, hiding_levels, unbox
from ._batching import batch_elementwise
from ._registry import PRIMITIVES
STAGING = [None]   # set by jit (transforms/jit.py) while it stages: nondiff's hook for staged values


def defprim(impl, vjp=None, name=None, multiple_results=False, jvp=None, linear=False, batch=None, *,
            fused_vjp=None, owned_vjp=None, fused_jvp=None, batched_vjp=False, keep_ans=None):
    """Declare a primitive with every rule it has; nothing about it is set anywhere else.

    Reverse mode: ``vjp``, one rule (unary) or a tuple of rules, one per argument,
    ``rule(g, ans, *args, **params)``; or ``fused_vjp(g, ans, args, params, parents)`` for all
    traced operands at once (many operands: concatenate, einsum), with ``owned_vjp``, a variant
    that may reuse ``g`` when the backward pass owns it (a write's; under jit also a staged ``g``
    whose sample the pass holds alone, for writes with per-argument rules too). Forward mode:
    ``jvp`` (one rule or a tuple, ``rule(t, ans, *args, **params)``), ``fused_jvp(tangents, ans, args, params)``, or
    ``linear=True`` (linear in its array arguments: the JVP is the primitive of the tangents).
    vmap: ``batch(prim, vals, batched, params, trace)``, a rule from ``_batching.py`` (see there),
    and ``batched_vjp=True`` where the VJP rules were checked on values that carry vmap's batch
    axes (a tape inside vmap records them; otherwise vmap runs the function once per example).
    ``keep_ans=True`` keeps the output for a ``fused_vjp`` that reads it (per-argument rules are
    read for what they use).
    """
    if vjp is not None and not isinstance(vjp, tuple):
        vjp = (vjp,)
    if jvp is not None and not isinstance(jvp, tuple):
        jvp = (jvp,)
    prim = Primitive(name or impl.__name__, impl, vjp=vjp, jvp=jvp, linear=linear, batch=batch,
                     multiple_results=multiple_results, fused_vjp=fused_vjp, fused_jvp=fused_jvp,
                     owned_vjp=owned_vjp, batched_vjp=batched_vjp)
    if keep_ans is not None:
        prim.keep_ans = keep_ans
    if prim.name in PRIMITIVES:
        raise ValueError(f"defprim: a primitive named {prim.name!r} is already declared; names are unique")
    PRIMITIVES[prim.name] = prim
    return prim


def defunary(impl, rule, name=None, batch=batch_elementwise, batched_vjp=True):
    """An elementwise function of one array, ``rule(g, ans, x) = g * f'(x)``.

    Its Jacobian is diagonal, so ``J^T g`` and ``J t`` are the same product: the one rule serves
    as VJP and JVP. (Also for complex ``x`` when ``f`` is holomorphic, under JAX's convention:
    docs/complex.md. Non-holomorphic functions such as ``abs`` declare the two rules apart.)
    Being elementwise, it is batched by ``batch_elementwise``, and its rule, an elementwise product
    written with wengert operations, holds on batched values (``batched_vjp``).
    """
    return defprim(impl, rule, name=name, jvp=rule, batch=batch, batched_vjp=batched_vjp)


def unbox_all(x):
    """Strip tracers from ``x`` and from inside lists and tuples (for non-differentiable calls)."""
    t = type(x)
    if t is Tracer:
        if hiding_levels() or STAGING[0] is not None:
            # inside vmap or jit: keep the batch and staging levels, whose values are not one
            # example's (vmap) or are only this trace's sample (jit: see transforms/jit.py)
            while type(x) is Tracer and not x._trace.hidden_axes and not x._trace.staged:
                x = x.value
            return x
        return unbox(x)
    if t is list or t is tuple:
        return t(unbox_all(v) for v in x)
    return x


def constant(x):
    """``x`` without gradient or tangent levels, for a rule's masks and other constants. Inside
    vmap it keeps the batch levels: stripped of them, the whole batch would pass for one example."""
    return unbox_all(x) if type(x) is Tracer else x


def elementwise_constant(fn):
    """A rule's constant (a mask, a quotient) written in plain NumPy, elementwise and broadcasting.

    Plain arguments take ``fn`` directly (forward mode, jacfwd); traced ones go through ``nondiff``,
    which under vmap runs ``fn`` once on the batched values (padded to a common rank), so batched
    primals give per-example masks instead of the whole batch read as one example's constant.
    """
    fn.elementwise = True
    traced = nondiff(fn)

    def call(*args):
        for a in args:
            if type(a) is Tracer:
                return traced(*args)
        return fn(*args)

    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


def nondiff(fn):
    """A NumPy function whose result carries no gradient: tracers are read for their values."""

    def call(*args, **kwargs):
        hiding = hiding_levels()
        if hiding:  # inside vmap: batched values keep their batch axis
            out = hiding[-1].nondiff(call, fn, args, kwargs)
            if out is not None:
                return out
        if STAGING[0] is not None:  # under jit: a staged value's result is computed by the program
            out = STAGING[0](call, fn, args, kwargs)
            if out is not None:
                return out
        return fn(*[unbox_all(a) for a in args], **{k: unbox_all(v) for k, v in kwargs.items()})

    call.__name__ = getattr(fn, "__name__", "nondiff")
    call.__qualname__ = call.__name__
    call.__doc__ = getattr(fn, "__doc__", None)
    call.__wrapped__ = fn
    call.nondiff = True
    return call


def staged(x):
    """Is ``x`` (at any level) a value staged by ``wg.jit``? Its value is then only the trace's
    sample: a rule must not branch on it (the program is replayed on other inputs)."""
    while type(x) is Tracer:
        if x._trace.staged:
            return True
        x = x.value
    return False


def unbroadcast(g, x):
    """Sum ``g`` over the axes along which ``x`` was broadcast, giving ``x``'s shape.

    ``x`` is the argument or its shape; rules pass ``x.shape`` so that the tape knows they need
    only the argument's shape, not its values.
    """
    shape = x if type(x) is tuple else (x.shape if type(x) is Tracer else np.shape(x))
    gshape = g.shape
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    ones = tuple(lead + i for i, n in enumerate(shape) if n == 1 and gshape[lead + i] != 1)
    if type(g) is np.ndarray:   # plain: one reduction (sum's own), or a view where nothing is summed
        if not ones:
            if all(n == 1 for n in gshape[:lead]):
                return g.reshape(shape)   # (1, n) onto (n,): a sum over size-1 axes is a reshape (a view)
            return _add_reduce(g, axis=tuple(range(lead)))
        if not lead:   # x's size-1 axes kept: the shape comes out as it is
            return _add_reduce(g, axis=ones, keepdims=True)
        return _add_reduce(g, axis=tuple(range(lead)) + ones).reshape(shape)
    # the table's own entries, by name: sum and reshape are declared in files that import this one
    sum_ = PRIMITIVES["sum"]
    if not ones:   # only leading axes were added: summing them gives the shape
        return sum_(g, axis=tuple(range(lead)), keepdims=False)
    return PRIMITIVES["reshape"](sum_(g, axis=tuple(range(lead)) + ones, keepdims=False), shape=shape)


_add_reduce = np.add.reduce


def plain_dtype(x):
    return unbox(x).dtype if hasattr(unbox(x), "dtype") else np.asarray(x).dtype

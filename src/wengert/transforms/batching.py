"""vmap: run a function written for one example over a batch, without a Python loop.

``vmap`` opens a :class:`BatchTrace` (a trace level like ``grad``'s, so the two nest in either
order) and wraps each batched input leaf as a ``Tracer`` of that level whose value carries the
batch on axis 0 (inputs are moved there once). A tracer's ``shape`` at a batch level is the shape
of one example. ``bind`` hands every operation on such tracers to :meth:`BatchTrace.process`, which
applies the primitive's batching rule: elementwise operations align ranks and broadcast,
reductions and shape operations shift their axes by one, matmul/dot/tensordot/outer/einsum become
one batched contraction, indexing gets a leading full slice. The rules call primitives (not NumPy)
on the values, so an outer ``grad`` records them as usual: ``grad(lambda p: vmap(f)(p, xs).sum())``
is a single batched tape.

A ``vmap`` called inside a vmapped function on its batched values does not open a second level
that would pass each operation through both levels' rules: it is fused into the open level (see
"fused nested vmaps" below), so nested vmaps cost one rule call per operation.

A primitive without a rule is run once per example and stacked, with a warning naming it. Where
the batched run cannot be trusted at all (Python control flow on a batched value, ``float()`` of
one, a ``grad`` or ``jvp`` opened inside the vmapped function, a ``Buffer``), the whole function is
run once per example with a warning: slow, never silently wrong.
"""
from __future__ import annotations

import functools
import operator
import warnings

import numpy as np

from ..core import namespace, tree
from ..core.errors import LeakedTracerError, run_user
from ..core.trace import Trace, Tracer, close_level, make_tracer, open_level, open_levels
from ..primitives._batching import NeedsLoop, broadcast_batch, concrete, pad_batched
from ..primitives._batching import reshape as _reshape
from ..primitives._batching import shape as _shape
from ..primitives._registry import PRIMITIVES
from .. import numpy as wnp
from .reverse import _normalize_argnums, grad

__all__ = ["vmap", "batched_call", "NeedsLoop", "concrete", "FUSE"]


def _never(trace, args, prim):  # pragma: no cover - bind calls ``process`` instead
    raise AssertionError


def _recorded_by_a_tape(trace):
    """Would a batched value made now at ``trace``'s level be recorded by a tape level above it?

    Computing levels (vmap, jvp) record nothing, so nesting them is safe; and a level opened inside
    a jvp while that jvp computes a tangent never sees the tangent (``JVPTrace.shields``), so
    jacfwd(jacrev(f)) batches its basis tangents through grad's tape (transforms/forward.py).
    """
    level = trace.level
    stack = trace.stack
    for above in stack:
        if above.level <= level or above.computes:
            continue
        if any(j.level > level and j.level < above.level and any(above.level <= d for d in j.shields)
               for j in stack if getattr(j, "shields", None)):
            continue
        return True
    return False


class BatchTrace(Trace):
    """A vmap level: its tracers' values carry the batch on axis 0 (``nb`` = 1 leading batch axis)."""

    __slots__ = ("size", "parent", "chain")
    computes = True
    hidden_axes = nb = 1

    def __init__(self, size):
        super().__init__()
        self.size = size
        self.parent = None
        self.chain = ()  # the batch levels this one was fused with, outermost first (see FusedBatchTrace)
        self.guard = _never   # non-None: bind's rare path, which checks ``batched``

    def process(self, prim, args, vals, parents, params):
        if not self.alive:
            raise LeakedTracerError(prim.name)
        if self.stack[-1] is not self and not prim.batched_vjp and _recorded_by_a_tape(self):
            raise NeedsLoop(f"a transform (grad, jvp, ...) inside the vmapped function differentiates "
                            f"batched values ({prim.name})")
        batched = [False] * len(vals)
        for position, _ in parents:
            batched[position] = True
        rule = prim.batch
        out = NotImplemented if rule is None else rule(prim, vals, batched, params, self)
        if out is NotImplemented:
            if any(type(v) is Tracer and v._trace is self for v in params.values()):
                raise NeedsLoop(f"{prim.name} with a batched parameter")
            _warn_loop(prim.name, self.size)
            out = _loop(prim, vals, batched, params, self.size)
        if prim.multiple_results:
            return tuple(_wrap(o, self) for o in out)
        return _wrap(out, self)

    def nondiff(self, call, fn, args, kwargs):
        """A function without a derivative, met while this level is the innermost batch level."""
        return _nondiff_batched(call, fn, args, kwargs)

    def write(self, x, index, value):
        """``x[index] = value`` on a batched value: the per-example run does it (nothing is written
        here, so the caller's arrays stay as they were)."""
        raise NeedsLoop("an in-place write into values that vmap batches (x[idx] = v)")


def _wrap(value, trace):
    return make_tracer(value, trace)


def _warn_loop(name, size):
    warnings.warn(f"vmap: no batching rule for {name}; it runs once per example "
                  f"(a Python loop over {size})", stacklevel=4)


# --- helpers ---------------------------------------------------------------------------------------
def _ndim(x):
    return len(_shape(x))


def _take(x, i, is_batched):
    if not is_batched:
        return x
    if type(x) is Tracer:
        return PRIMITIVES["getitem"](x, index=i)
    return x[i]


def _stack(outs):
    return PRIMITIVES["stack"](*outs, axis=0)


def _loop(prim, vals, batched, params, size):
    outs = [prim(*[_take(v, i, b) for v, b in zip(vals, batched)], **params) for i in range(size)]
    pieces = list(zip(*outs)) if prim.multiple_results else [outs]
    for piece in pieces:
        if any(_shape(o) != _shape(piece[0]) for o in piece):
            raise NeedsLoop(f"{prim.name} gives results of different shapes per example")
    if prim.multiple_results:
        return tuple(_stack(list(piece)) for piece in pieces)
    return _stack(outs)


# --- functions without a derivative (comparisons, argmax, floor, ...) ---------------------------
_ELEMENTWISE_PLAIN = {operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
                      operator.floordiv}


def _batch_level(x):
    """The highest batch trace in ``x``'s chain of tracers, or None."""
    while type(x) is Tracer:
        if x._trace.hidden_axes:
            return x._trace
        x = x.value
    return None


def _at_level(x, trace):
    """``x`` with the tracers above ``trace`` stripped (they carry no gradient here): its value
    under ``trace`` (batched) or ``x`` itself (unbatched at that level)."""
    y = x
    while type(y) is Tracer:
        if y._trace is trace:
            return y.value, True
        if y._trace in trace.chain:  # a level fused into ``trace``: its value in trace's layout
            return _lift(y, trace), True
        if y._trace.hidden_axes and y._trace.level < trace.level:
            break
        y = y.value
    return y, False


def _nondiff_batched(call, fn, args, kwargs):
    """A function without a derivative on batched values (``nondiff``'s hook while vmap runs)."""
    traces = [t for t in (_batch_level(a) for a in list(args) + list(kwargs.values())) if t is not None]
    if not traces:
        return None
    trace = max(traces, key=lambda t: t.level)
    if not trace.alive:
        raise LeakedTracerError(getattr(fn, "__name__", "a function"))
    pairs = [_at_level(a, trace) for a in args]
    kw_pairs = {k: _at_level(v, trace) for k, v in kwargs.items()}
    size = trace.size
    nb = trace.nb
    if (isinstance(fn, np.ufunc) or fn in _ELEMENTWISE_PLAIN or getattr(fn, "elementwise", False)) \
            and not any(b for _, b in kw_pairs.values()):
        rank = max((_ndim(v) - nb * b for v, b in pairs), default=0)
        new = [pad_batched(v, nb, rank - (_ndim(v) - nb)) if b else v for v, b in pairs]
        out = call(*new, **{k: v for k, (v, _) in kw_pairs.items()})
    elif nb > 1:
        raise _Unfuse(getattr(fn, "__name__", "a function"))
    else:
        outs = []
        for i in range(size):
            outs.append(call(*[_take(v, i, b) for v, b in pairs],
                             **{k: _take(v, i, b) for k, (v, b) in kw_pairs.items()}))
        if isinstance(outs[0], tuple):  # nonzero, where(c): a tuple of index arrays per example
            raise NeedsLoop(f"{getattr(fn, '__name__', 'a function')} returns a tuple whose sizes depend on the values")
        if any(np.shape(o) != np.shape(outs[0]) for o in outs if type(o) is not Tracer):
            raise NeedsLoop(f"{getattr(fn, '__name__', 'a function')} returns arrays of different shapes per example")
        out = _stack(outs)
    return _wrap(out, trace)


# --- fused nested vmaps ----------------------------------------------------------------------------
# ``vmap(g)`` called inside a vmapped function, on values of the innermost open batch level P,
# does not open a level whose rules would pass every operation down through P's rules again.
# It opens a FusedBatchTrace: one level whose values carry P's batch axes and then its own, so
# each operation is one rule call whatever the nesting depth. A value that does not vary along
# one of those axes has size 1 there (a broadcasting view, never materialized): an operand of P
# met at the fused level is reshaped to its layout (``_lift``), and NumPy's broadcasting does the
# rest. Only a subset of the rules is written for several batch axes; anything else (and any
# NeedsLoop) aborts the fused run, and ``vmap`` runs the function again as an ordinary nested
# level: the fused path is an optimization that is either taken whole or not at all.

FUSE = True  # False: every vmap opens its own level (for comparisons and tests)


class _Unfuse(BaseException):
    """The fused run cannot express this: run the inner vmap as its own level instead. Not an
    Exception, so that the user's ``except Exception`` cannot swallow it and change the result."""


class FusedBatchTrace(BatchTrace):
    """A vmap level fused with the levels ``chain`` below it: values have ``nb`` leading batch axes
    (``parent``'s, then this vmap's), each of full size or 1."""

    __slots__ = ()

    def __init__(self, size, parent):
        if _PLAIN_TRACE_FIELDS:   # Trace.__init__ and BatchTrace.__init__ inlined: one per inner vmap call
            self.level = 0
            self.alive = True
            self.size = size
            self.guard = _never
            self.owners = None
        else:
            super().__init__(size)
        self.parent = parent
        self.chain = parent.chain + (parent,)

    def process(self, prim, args, vals, parents, params):
        if not self.alive:
            raise LeakedTracerError(prim.name)
        if self.stack[-1] is not self and not prim.batched_vjp and _recorded_by_a_tape(self):
            raise NeedsLoop(f"a transform (grad, jvp, ...) inside the vmapped function "
                            f"differentiates batched values ({prim.name})")
        rule = prim.batch
        if rule is None:
            raise _Unfuse(prim.name)
        n = len(vals)
        if n == 1:   # the operand is this level's own (bind unwrapped it)
            out = rule(prim, vals, _ONE, params, self)
        else:
            batched = [False] * n
            for position, _ in parents:
                batched[position] = True
            chain = self.chain
            for i in range(n):
                v = vals[i]
                if type(v) is Tracer and v._trace in chain:
                    vals[i] = _lift(v, self)
                    batched[i] = True
            out = rule(prim, vals, batched, params, self)
        if out is NotImplemented:
            raise _Unfuse(prim.name)
        if prim.multiple_results:
            return tuple(_wrap(o, self) for o in out)
        return make_tracer(out, self)


# the fields Trace.__init__ sets, as FusedBatchTrace.__init__ sets them (else it calls it)
_PLAIN_TRACE_FIELDS = Trace.__slots__ == ("level", "stack", "alive", "guard", "owners", "__weakref__")
_ONE = (True,)


_FUSED_CLASSES = {}


def _fused_class(nb):
    cls = _FUSED_CLASSES.get(nb)
    if cls is None:
        cls = _FUSED_CLASSES[nb] = type(f"FusedBatchTrace{nb}", (FusedBatchTrace,),
                                        {"__slots__": (), "nb": nb, "hidden_axes": nb})
    return cls


def _broadcast_to(x, shape):
    return np.broadcast_to(x, shape) if type(x) is np.ndarray else PRIMITIVES["broadcast_to"](x, shape=shape)


def _lift(v, trace):
    """The value of ``v`` (a tracer of one of ``trace``'s fused levels) in ``trace``'s layout."""
    x = v.value
    k = v._trace.nb
    sh = tuple(_shape(x))
    return _reshape(x, shape=sh[:k] + (1,) * (trace.nb - k) + sh[k:])


def _fusable(flat, top):
    for leaves, _, _ in flat:
        for leaf in leaves:
            if type(leaf) is Tracer and (leaf._trace is top or leaf._trace in top.chain):
                return True
    return False


def _run_fused(f, flat, size, out_axes, parent):
    k = parent.nb
    trace = open_level(_fused_class(k + 1)(size, parent))
    chain = parent.chain
    try:
        args = []
        for leaves, axes, treedef in flat:
            wrapped = []
            for leaf, ax in zip(leaves, axes):
                if ax is not None:
                    if type(leaf) is Tracer and leaf._trace is parent:
                        x = _move(leaf.value, k + ax, k)
                    elif type(leaf) is Tracer and leaf._trace in chain:
                        x = _move(_lift(leaf, parent), k + ax, k)
                    else:
                        x = _move(leaf, ax, 0)
                        x = _reshape(x, (1,) * k + tuple(_shape(x)))
                    leaf = make_tracer(x, trace)
                wrapped.append(leaf)
            args.append(wrapped[0] if treedef is tree.LEAF else tree.unflatten(treedef, wrapped))
        out = run_user(f, args, {})
        if type(out) is Tracer and type(out_axes) is int:
            leaves, axes, treedef = [out], [out_axes], tree.LEAF
        else:
            leaves, axes, treedef = _axes_for(out_axes, out, "out_axes")
        unfused_parent = type(parent) is BatchTrace   # its values have the full batch
        result = []
        for leaf, ax in zip(leaves, axes):
            if ax is None or type(leaf) is not Tracer or leaf._trace is not trace:
                raise _Unfuse("an output that is unbatched here, or out_axes None")
            x = leaf.value
            sh = _shape(x)
            if sh[k] != size or (unfused_parent and sh[0] != parent.size):
                full = list(sh)
                full[k] = size
                if unfused_parent:
                    full[0] = parent.size
                x = _broadcast_to(x, tuple(full))
            ax = k + ax % (len(sh) - k)
            if ax != k:
                x = _move(x, k, ax)
            result.append(make_tracer(x, parent))
    finally:
        close_level(trace)
    return result[0] if treedef is tree.LEAF else tree.unflatten(treedef, result)


# --- vmap ----------------------------------------------------------------------------------------
def _axis_at(axes, path, what):
    """The axis for the leaf at ``path`` in a pytree of axes; an int or None covers a whole subtree."""
    for key in path:
        if axes is None or isinstance(axes, (int, np.integer)):
            return axes
        try:
            axes = axes[key] if isinstance(axes, dict) or isinstance(key, int) else getattr(axes, key)
        except (KeyError, IndexError, AttributeError, TypeError):
            raise ValueError(f"vmap: {what} {axes!r} does not match the value's structure at {key!r}") from None
    if axes is not None and not isinstance(axes, (int, np.integer)):
        raise ValueError(f"vmap: {what} must be an int, None, or a pytree of them matching the value, got {axes!r}")
    return axes


def _axes_for(axes, arg, what):
    """Per-leaf axes for one argument: an int/None for all its leaves, or a matching pytree."""
    t = type(arg)
    if (t is Tracer or t is np.ndarray) and (axes is None or type(axes) is int):
        return [arg], [axes], tree.LEAF   # the common case: one array, one axis
    pairs, treedef = tree.flatten_with_paths(arg)
    if isinstance(axes, _AxesTree):
        return [leaf for _, leaf in pairs], list(axes.axes), treedef
    return [leaf for _, leaf in pairs], [_axis_at(axes, path, what) for path, _ in pairs], treedef


def _move(x, source, dest):
    if source == dest:
        return x
    if type(x) is not Tracer:
        if type(x) is not np.ndarray and not namespace.is_foreign(x):
            x = np.asarray(x)
        order = list(range(x.ndim))
        order.insert(dest, order.pop(source))
        return x.transpose(order)
    order = list(range(len(x.shape)))
    order.insert(dest, order.pop(source))
    return PRIMITIVES["transpose"](x, axes=tuple(order))


def vmap(f, in_axes=0, out_axes=0):
    """Vectorize ``f`` over an axis of its arguments: ``vmap(f)(xs)[i] == f(xs[i])``.

    ``in_axes``: an int (the batch axis of every argument), None (broadcast: the same value for
    every example), or a tuple with one entry per positional argument, each an int, None or a pytree
    of them matching the argument. Negative axes count from the end. ``out_axes``: where the batch
    axis goes in each output leaf (an int, or a pytree matching the output).
    """

    many = isinstance(in_axes, (tuple, list))
    fixed_axes = tuple(in_axes) if many else None
    spec = getattr(f, "_wengert_grad", None)   # set by grad when it makes f
    nested = getattr(f, "_wengert_per_example", None)   # set below when f is itself vmap(... grad ...)
    fusing = [True]   # False once a fused run of f failed

    @functools.wraps(f)
    def vmapped(*args):
        with namespace.dask_guard(args):   # a NumPy function Dask lacks is refused, not computed
            return run(*args)

    def run(*args):
        if many:
            if len(fixed_axes) != len(args):
                raise ValueError(f"vmap: in_axes has {len(in_axes)} entries for {len(args)} arguments")
            per_arg = fixed_axes
        else:
            per_arg = (in_axes,) * len(args)
        flat = []
        size = None
        n = -1
        for arg, axes in zip(args, per_arg):
            n += 1
            t = type(arg)
            if (t is Tracer or t is np.ndarray) and (axes is None or type(axes) is int):
                if axes is None:   # one array, unbatched
                    flat.append(([arg], [None], tree.LEAF))
                    continue
                leaves, axs, treedef = [arg], [axes], tree.LEAF   # one array, one axis
            else:
                leaves, axs, treedef = _axes_for(axes, arg, f"in_axes[{n}]")
            fixed = []
            for leaf, ax in zip(leaves, axs):
                if ax is not None:
                    shape = leaf.shape if type(leaf) is Tracer else _shape(leaf)
                    if not shape:
                        raise ValueError(f"vmap: argument {n} has a scalar leaf, which has no axis {ax}")
                    ax = ax % len(shape)
                    if size is None:
                        size = shape[ax]
                    elif shape[ax] != size:
                        raise ValueError(f"vmap: inconsistent batch sizes {size} and {shape[ax]} "
                                         f"(argument {n}, axis {ax})")
                fixed.append(ax)
            flat.append((leaves, fixed, treedef))
        if size is None:
            raise ValueError("vmap: no argument has a batch axis (in_axes are all None)")
        if spec is not None and spec[0] is f:
            done = _per_example_grad(spec[1], spec[2], flat, size, out_axes)
            if done is not None:
                return done[0]
        if nested is not None and nested[0] is f:
            done = _nested_per_example_grad(nested[1], nested[2], ((in_axes, out_axes),) + nested[3], args)
            if done is not None:
                return done[0]
        stack = open_levels()
        top = stack[-1] if stack else None
        if FUSE and fusing[0] and top is not None and top.hidden_axes and top.alive and _fusable(flat, top):
            try:
                return _run_fused(f, flat, size, out_axes, top)
            except (_Unfuse, NeedsLoop):
                # the unfused run below gives the same answer, or the same warning; later calls go
                # there directly instead of running f twice
                fusing[0] = False
        try:
            return _run_batched(f, flat, size, out_axes)
        except NeedsLoop as e:   # a rule said so; any other error is a bug and surfaces
            reason = str(e)
        warnings.warn(f"vmap: {reason}; running {getattr(f, '__name__', 'f')} once per example "
                      f"(a Python loop over {size})", stacklevel=3)
        return _run_loop(f, flat, size, out_axes)

    # vmap of vmap(grad(g)) (per-example gradients over several batch axes) is recognized as one
    # gradient too; functools.wraps copied f's attributes, so the owner is recorded with the spec
    if isinstance(out_axes, (int, np.integer)):
        if spec is not None and spec[0] is f:
            vmapped._wengert_per_example = (vmapped, spec[1], spec[2], ((in_axes, out_axes),))
        elif nested is not None and nested[0] is f:
            vmapped._wengert_per_example = (vmapped, nested[1], nested[2], ((in_axes, out_axes),) + nested[3])
    return vmapped


def _per_example_grad(f, argnums, flat, size, out_axes):
    """``vmap(grad(f))`` as ``grad`` of the sum over examples of ``vmap(f)``: examples are
    independent, so row i of the gradient with respect to the batched (or broadcast) arguments is
    example i's gradient. One batched forward and backward pass instead of a loop of gradients.
    Returns ``(result,)``, or None to take the general path (which gives ``grad``'s own errors)."""
    nums, many = _normalize_argnums(argnums, len(flat), f)
    args, axes = [], []
    for n, (leaves, leaf_axes, treedef) in enumerate(flat):
        new, new_axes = [], []
        for leaf, ax in zip(leaves, leaf_axes):
            if n in nums:
                if ax is None:
                    leaf = wnp.broadcast_to(leaf, (size,) + tuple(_shape(leaf))) if type(leaf) is Tracer \
                        else np.broadcast_to(leaf, (size,) + np.shape(leaf))
                else:
                    leaf = _move(leaf, ax, 0)
                ax = 0
            new.append(leaf)
            new_axes.append(ax)
        args.append(tree.unflatten(treedef, new))
        axes.append(_AxesLeaves(treedef, new_axes))
    in_axes = tuple(a.tree() for a in axes)
    batched_f = vmap(f, in_axes=in_axes)
    checked = []

    def total(*a):
        out = batched_f(*a)
        if tree.flatten(out)[1] != tree.LEAF or tuple(_shape(out)) != (size,):
            checked.append(False)
            return wnp.sum(out) * 0.0
        return wnp.sum(out)

    grads = grad(total, argnums=nums if many else nums[0])(*args)
    if checked:
        return None  # a non-scalar f: grad's own error comes from the general path
    moved = tree.map(lambda g: g if out_axes == 0 else _move(g, 0, out_axes % max(1, _ndim(g))), grads) \
        if isinstance(out_axes, (int, np.integer)) else _finish_batched(grads, out_axes)
    return (moved,)


def _nested_per_example_grad(f, argnums, levels, args):
    """``vmap(vmap(grad(f), in_1, out_1), in_0, out_0)`` (any depth; ``levels`` outermost first) as
    one gradient: each level's batch axis is moved to the front of every leaf it maps, the
    differentiated arguments are broadcast along the levels that do not map them (every example
    gets its own copy), and the gradient of the sum over all examples of the nested vmap of ``f``
    (in_axes 0 or None) holds each example's gradient; each level's out_axes is applied last,
    innermost first. Returns ``(result,)``, or None for the general path."""
    nums, many = _normalize_argnums(argnums, len(args), f)
    flat = [tree.flatten(a) for a in args]
    current = [list(leaves) for leaves, _ in flat]
    lead = [[0] * len(leaves) for leaves, _ in flat]   # level axes already in front of each leaf
    level_axes, sizes = [], []
    for in_axes, out_axes in levels:
        if not isinstance(out_axes, (int, np.integer)):
            return None
        per_arg = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if len(per_arg) != len(args):
            return None
        axes = [_axes_for(per_arg[n], args[n], f"in_axes[{n}]")[1] for n in range(len(args))]
        size = None
        for n, leaf_axes in enumerate(axes):
            for i, ax in enumerate(leaf_axes):
                if ax is None:
                    continue
                shape = _shape(current[n][i])[lead[n][i]:]
                if not shape:
                    return None
                ax = ax % len(shape)
                if size is None:
                    size = shape[ax]
                elif shape[ax] != size:
                    return None
                current[n][i] = _move(current[n][i], lead[n][i] + ax, lead[n][i])
        if size is None:
            return None
        this_level = []
        for n, leaf_axes in enumerate(axes):
            mapped = []
            for i, ax in enumerate(leaf_axes):
                if ax is None and n in nums:
                    x = current[n][i]
                    sh = tuple(_shape(x))
                    k = lead[n][i]
                    x = wnp.reshape(x, sh[:k] + (1,) + sh[k:]) if type(x) is Tracer else np.reshape(x, sh[:k] + (1,) + sh[k:])
                    full = sh[:k] + (size,) + sh[k:]
                    current[n][i] = wnp.broadcast_to(x, full) if type(x) is Tracer else np.broadcast_to(x, full)
                    ax = 0
                if ax is not None:
                    lead[n][i] += 1
                    ax = 0
                mapped.append(ax)
            this_level.append(_AxesLeaves(flat[n][1], mapped).tree())
        level_axes.append(tuple(this_level))
        sizes.append(size)
    batched_f = f
    for axes in reversed(level_axes):
        batched_f = vmap(batched_f, in_axes=axes)
    new_args = [tree.unflatten(treedef, leaves) for (_, treedef), leaves in zip(flat, current)]
    checked = []

    def total(*a):
        out = batched_f(*a)
        if tree.flatten(out)[1] != tree.LEAF or tuple(_shape(out)) != tuple(sizes):
            checked.append(False)
            return wnp.sum(out) * 0.0
        return wnp.sum(out)

    grads = grad(total, argnums=nums if many else nums[0])(*new_args)
    if checked:
        return None

    def place(g):
        for k in range(len(levels) - 1, -1, -1):
            g = _move(g, k, k + levels[k][1] % (_ndim(g) - k))
        return g

    return (tree.map(place, grads),)


class _AxesLeaves:
    """Per-leaf axes rebuilt as a pytree of the argument's structure (None leaves kept)."""

    def __init__(self, treedef, axes):
        self.treedef, self.axes = treedef, axes

    def tree(self):
        if self.treedef == tree.LEAF:
            return self.axes[0]
        if all(a == self.axes[0] for a in self.axes) and self.axes and self.axes[0] is not None:
            return self.axes[0]
        if all(a is None for a in self.axes):
            return None
        return _AxesTree(self.treedef, self.axes)


class _AxesTree:
    """An in_axes entry given per leaf (None included), read by ``_axis_at`` through ``_leaf_axes``."""

    def __init__(self, treedef, axes):
        self.treedef, self.axes = treedef, axes


def _finish_batched(grads, out_axes):
    leaves, axes, treedef = _axes_for(out_axes, grads, "out_axes")
    return tree.unflatten(treedef, [g if ax is None or ax == 0 else _move(g, 0, ax % max(1, _ndim(g)))
                                    for g, ax in zip(leaves, axes)])


def _run_batched(f, flat, size, out_axes):
    out, trace = _run_at_new_level(f, flat, size)
    return _finish(out, trace, size, out_axes)


def batched_call(f, args, in_axes):
    """``f`` over a batch, for rules that vmap user code (custom_vjp's fwd): ``in_axes`` is 0 or
    None per argument. Returns ``(out, axes)``, ``axes`` a pytree like ``out`` of 0 (that leaf is
    batched on axis 0) or None (it does not depend on the batch and is returned as it is: a
    residual may be any object, so nothing is broadcast). Raises NeedsLoop where vmap would loop."""
    size = next(_shape(a)[0] for a, ax in zip(args, in_axes) if ax is not None)
    out, trace = _run_at_new_level(f, [([a], [ax], tree.LEAF) for a, ax in zip(args, in_axes)], size)
    leaves, treedef = tree.flatten(out)
    batched = [type(leaf) is Tracer and leaf._trace is trace for leaf in leaves]
    return (tree.unflatten(treedef, [leaf.value if b else leaf for leaf, b in zip(leaves, batched)]),
            tree.unflatten(treedef, [0 if b else None for b in batched]))


def _run_at_new_level(f, flat, size):
    """Run ``f`` on ``flat``'s leaves (batched ones moved to axis 0) at a new batch level."""
    trace = open_level(BatchTrace(size))
    try:
        args = []
        for leaves, axes, treedef in flat:
            wrapped = [leaf if ax is None else _wrap(_move(leaf, ax, 0), trace) for leaf, ax in zip(leaves, axes)]
            args.append(wrapped[0] if treedef is tree.LEAF else tree.unflatten(treedef, wrapped))
        out = run_user(f, args, {})
    finally:
        close_level(trace)
    return out, trace


def _finish(out, trace, size, out_axes):
    leaves, axes, treedef = _axes_for(out_axes, out, "out_axes")
    result = []
    for leaf, ax in zip(leaves, axes):
        if type(leaf) is Tracer and leaf._trace is trace:
            value = leaf.value
        else:
            if ax is None:
                result.append(leaf)
                continue
            value = broadcast_batch(leaf, size) if type(leaf) is Tracer else \
                np.broadcast_to(leaf, (size,) + np.shape(leaf)).copy()
        if ax is None:
            raise ValueError("vmap: out_axes is None for an output that depends on the batch")
        result.append(_move(value, 0, ax % _ndim(value)))
    return result[0] if treedef is tree.LEAF else tree.unflatten(treedef, result)


def _run_loop(f, flat, size, out_axes):
    outs = []
    for i in range(size):
        args = []
        for leaves, axes, treedef in flat:
            args.append(tree.unflatten(treedef, [leaf if ax is None else _index_axis(leaf, ax, i)
                                                 for leaf, ax in zip(leaves, axes)]))
        outs.append(tree.flatten(f(*args)))
    treedef = outs[0][1]
    n = len(outs[0][0])
    axes = _axes_for(out_axes, tree.unflatten(treedef, outs[0][0]), "out_axes")[1]
    result = []
    for k in range(n):
        pieces = [o[0][k] for o in outs]
        if axes[k] is None:
            result.append(pieces[0])
            continue
        if any(type(p) is Tracer for p in pieces):
            stacked = wnp.stack(pieces)
        else:
            stacked = np.stack([p if namespace.is_foreign(p) else np.asarray(p) for p in pieces])
        result.append(_move(stacked, 0, axes[k] % np.ndim(stacked) if type(stacked) is not Tracer
                            else axes[k] % stacked.ndim))
    return tree.unflatten(treedef, result)


def _index_axis(x, axis, i):
    index = (slice(None),) * axis + (i,)
    return x[index]

"""Forward mode: jvp, jacfwd, hvp, hessian (forward over reverse), and linearize.

``jvp`` opens a :class:`JVPTrace`, a trace level that records nothing: each of its tracers carries
a tangent beside its value (``Tracer.aux``), and ``bind`` hands every operation on them to
:meth:`JVPTrace.process`, which computes the output and, from the primitive's JVP rules in the
table, the output's tangent. The cost is the forward pass plus one rule per operation, and memory
is the forward pass's: nothing is kept for later.

A tangent is absent (``None``) where a value does not depend on the inputs, never a zero array.
Rules are written with wengert operations on values that may be tracers of outer levels, so
``jvp(grad(f))`` (forward over reverse: ``hvp``, ``hessian``) and ``grad(jvp(f))`` need nothing
special, and ``jacfwd`` runs one JVP with a batch of tangents under ``vmap``.

``linearize`` records ``f`` once (reverse mode) and gives each JVP by transposing that record: the
gradient of ``<vjp_fn(ct), t>`` with respect to ``ct`` is ``J t``. It is the cheaper choice when
many JVPs are wanted at one point and ``f`` is expensive.
"""
from __future__ import annotations

import functools

import numpy as np

from ..core import namespace, tree
from ..core.errors import LeakedTracerError, NoDerivativeError, run_user
from ..core.mutation import (ADVICE, InPlaceWriteError, check_not_stale, memory_of, note_owner,
                             refuse_writes_into_inputs, settled, staged_or_plain)
from ..core.trace import Trace, Tracer, apply, close_level, dtype_of, make_tracer, open_level, shape_of, unbox
from .reverse import _as_input, _normalize_argnums, grad, jacobian, vjp
from .. import numpy as wnp
from ..primitives.complex import real
from ..primitives.scatter import scatter_set
from ..primitives.shape import astype, broadcast_to
from . import batching
from .reverse import value_and_grad


class JVPTrace(Trace):
    """A forward-mode level: its tracers carry their tangent in ``aux``; operations compute
    instead of recording.

    ``shields`` holds the stack depth while a tangent is being computed: the levels opened inside
    this JVP (between it and that depth) never see the tangent, so a batch of tangents (jacfwd's)
    reaches no tape of theirs (see ``batching.recorded_by_a_tape``).
    """

    __slots__ = ("count", "inputs", "written", "shields")
    computes = True

    def __init__(self):
        super().__init__()
        self.count = 0
        self.inputs = []      # the input arrays: in-place writes into them are refused
        self.written = None   # id(base array) -> the count of its latest in-place write
        self.shields = []
        self.guard = _process_instead  # non-None: bind's rare path, which checks ``computes``

    def process(self, prim, args, vals, parents, params):
        if not self.alive:
            raise LeakedTracerError(prim.name)
        if self.written is not None:
            check_not_stale(self, args, prim)
        ans = apply(prim, vals, params)
        tangents = [None] * len(vals)
        for position, _ in parents:
            tangents[position] = args[position].aux
        self.shields.append(len(self.stack))
        try:
            t = tangent_out(prim, tangents, ans, vals, params)
        finally:
            self.shields.pop()
        if prim.multiple_results:
            return tuple(self.wrap(a, ti) for a, ti in zip(ans, t if t is not None else (None,) * len(ans)))
        return self.wrap(ans, t)

    def wrap(self, value, tangent):
        """``value`` with ``tangent`` at this level (the plain value when the tangent is zero)."""
        tangent = _fit(tangent, value)
        if tangent is None:
            return value
        self.count += 1
        out = make_tracer(value, self, self.count)
        out.aux = tangent
        return out

    def write(self, x, index, value):
        """``x[index] = value``: the value is written in place (NumPy's meaning), the tangent anew.
        Under ``jit(jvp(f))`` the value is jit's staged tracer, whose own write jit stages."""
        array = x.value
        ours = type(value) is Tracer and value._trace is self
        plain = value.value if ours else value
        if not staged_or_plain(array) or not staged_or_plain(plain):
            raise InPlaceWriteError("In-place writes are supported under a single transform only "
                                    "(jit(jvp(f)) is fine: jit stages the write). " + ADVICE)
        memory = memory_of(array)
        if not isinstance(memory, np.ndarray):
            raise InPlaceWriteError("Item assignment needs an array of this transform; " + ADVICE)
        refuse_writes_into_inputs(self, memory)
        if self.written is None:
            self.written = {}
        else:
            check_not_stale(self, (x, value), _setitem_name)
            array = x.value
            plain = value.value if ours else value
        note_owner(self, x, id(memory))
        array[index] = plain
        old = x.aux if x.aux is not None else np.zeros(shape_of(array), dtype_of(array))
        new = value.aux if ours else np.zeros((), dtype_of(array))
        x.aux = scatter_set(old, new, index=index)
        self.count += 1
        x.index = self.count
        self.written[id(memory)] = x.index


class _SetitemName:
    name = "x[...] = v"


_setitem_name = _SetitemName()


def _process_instead(trace, args, prim):  # pragma: no cover - bind calls ``process`` instead
    raise AssertionError


# --- the rules' driver ---------------------------------------------------------------------------
def tangent_out(prim, tangents, ans, vals, params):
    """The output tangent of ``prim`` from its inputs' tangents (None where zero)."""
    if prim.fused_jvp is not None:
        return prim.fused_jvp(tangents, ans, vals, params)
    if prim.linear:
        return prim(*[t if t is not None else _zeros_for(v, ans) for t, v in zip(tangents, vals)], **params)
    if prim.jvp is not None:
        total = None
        for rule, t in zip(prim.jvp, tangents):
            if t is None or rule is None:
                continue
            share = rule(t, ans, *vals, **params)
            if share is not None:
                total = share if total is None else total + share
        return total
    return transposed_jvp(prim, tangents, vals, params)


def transposed_jvp(prim, tangents, vals, params):
    """``J t`` for a primitive with VJP rules only: the gradient of ``<vjp(g), t>`` in ``g``.

    Runs the primitive once more under a reverse trace; the fallback for primitives declared
    outside the table (the table's own primitives all have JVP rules: tests/test_forward.py).
    """
    if prim.vjp is None and prim.fused_vjp is None:
        raise NoDerivativeError(f"{prim.name} has no derivative rule (neither JVP nor VJP)")
    traced = [k for k, t in enumerate(tangents) if t is not None]

    def f(*xs):
        full = list(vals)
        for k, x in zip(traced, xs):
            full[k] = x
        return prim(*full, **params)

    _, f_jvp = linearize(f, *[vals[k] for k in traced])
    return f_jvp(*[tangents[k] for k in traced])


def _zeros_for(v, ans):
    if namespace.is_foreign(unbox(v)):
        return namespace.zeros(shape_of(v), namespace.result_type(unbox(v), unbox(ans)), unbox(v))
    dtype = np.result_type(dtype_of(v), dtype_of(ans))
    return np.zeros(shape_of(v), dtype)


_PLAIN = frozenset((np.ndarray, np.float64, np.float32, np.float16, np.complex128, np.complex64))


def _fit(t, ans):
    """A rule's tangent as the output's: its shape (broadcast) and dtype; None for integer outputs."""
    if t is None:
        return None
    kind = type(t)
    if kind is type(ans) and kind in _PLAIN and t.shape == ans.shape and t.dtype == ans.dtype:
        return t if ans.dtype.kind in "fc" else None
    dtype = dtype_of(ans)
    if not namespace.is_inexact(dtype):
        return None
    shape = shape_of(ans)
    if shape_of(t) != shape:
        t = broadcast_to(t, shape=tuple(shape))
    t_dtype = dtype_of(t)
    if t_dtype != dtype:
        if namespace.is_complex(t_dtype) and not namespace.is_complex(dtype):
            t = real(t)
        if dtype_of(t) != dtype:
            t = astype(t, dtype=dtype)
    return t


# --- the transforms --------------------------------------------------------------------------------
def _jvp_leaves(f, primal_leaves, tangent_leaves, rebuild):
    """Run ``f(*rebuild(wrapped leaves))`` at a new forward level; ``(out, out_tangents)``.

    A ``None`` tangent leaves that primal a constant.
    """
    trace = open_level(JVPTrace())
    try:
        wrapped = []
        for p, t in zip(primal_leaves, tangent_leaves):
            if t is None:
                wrapped.append(p)
                continue
            trace.inputs.append(unbox(p))
            tracer = make_tracer(p, trace)
            tracer.aux = t
            wrapped.append(tracer)
        out = settled(trace, run_user(f, rebuild(wrapped), {}))
    finally:
        close_level(trace)
    out_leaves, out_def = tree.flatten(out)
    values, tangents = [], []
    for leaf in out_leaves:
        if type(leaf) is Tracer and leaf._trace is trace:
            values.append(leaf.value)
            t = leaf.aux
            if type(t) is np.ndarray and not t.ndim and not isinstance(leaf.value, np.ndarray):
                t = t[()]  # a scalar output gets a scalar tangent
            tangents.append(t)
        else:
            values.append(leaf)
            tangents.append(_zeros_like(leaf))
    return tree.unflatten(out_def, values), tree.unflatten(out_def, tangents)


def _zeros_like(leaf):
    dtype = dtype_of(leaf)
    if not namespace.is_inexact(dtype):
        dtype = np.float64
    return namespace.zeros(shape_of(leaf), dtype, unbox(leaf))   # in the output's namespace


def _as_tangent(t, dtype):
    """A tangent as an array of its primal's dtype; another library's array stays in its namespace."""
    if not namespace.is_foreign(t):
        return np.asarray(t, dtype=dtype)
    return t if t.dtype == dtype else namespace.copy(t, dtype)


def _check_tangents(primals, tangents, f):
    """``(primal leaves, tangent leaves, primals' treedef)``, checked to match in structure and shape;
    primals must be floating point, and tangents come back as arrays of their primal's dtype."""
    p_pairs, p_def = tree.flatten_with_paths(tuple(primals))
    t_leaves, t_def = tree.flatten(tuple(tangents))
    if p_def != t_def:
        raise ValueError(f"jvp: the tangents' structure {t_def!r} differs from the primals' {p_def!r}")
    p_leaves, t_out = [], []
    for (path, p), t in zip(p_pairs, t_leaves):
        p = _as_input(p, f, path[0], path[1:])
        if tuple(shape_of(p)) != tuple(shape_of(t)):
            raise ValueError(f"jvp: a tangent of shape {tuple(shape_of(t))} for a primal of shape "
                             f"{tuple(shape_of(p))} (argument {path[0]}{tree.path_str(path[1:])})")
        p_leaves.append(p)
        t_out.append(t if type(t) is Tracer else _as_tangent(t, dtype_of(p)))
    return p_leaves, t_out, p_def


def jvp(f, primals, tangents):
    """``(f(*primals), J t)``: the output and its directional derivative along ``tangents``.

    ``primals`` and ``tangents`` are tuples (or lists) of the same pytree structure and shapes;
    the output tangent has the output's structure. One forward pass, with a rule per operation.
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp: primals and tangents must be tuples (or lists) of the arguments")
    p_leaves, t_leaves, p_def = _check_tangents(primals, tangents, f)
    with namespace.dask_guard(p_leaves):
        return _jvp_leaves(f, p_leaves, t_leaves, lambda leaves: tree.unflatten(p_def, leaves))


def linearize(f, *primals):
    """Run ``f(*primals)`` once; return ``(out, f_jvp)`` with ``f_jvp(*tangents)`` the JVP ``J t``.

    ``f_jvp`` may be called many times; each call transposes the one recorded pass (a backward
    pass recorded by an outer trace plus that trace's backward pass) and never re-runs ``f``.
    """
    out, vjp_fn = vjp(f, *primals)
    out_leaves, out_def = tree.flatten(out)
    floats = [k for k, leaf in enumerate(out_leaves) if np.issubdtype(dtype_of(leaf), np.inexact)]

    def f_jvp(*tangents):
        _, t_leaves, _ = _check_tangents(primals, tangents, f)

        def pairing(ct_float):
            cts = [None] * len(out_leaves)
            for k, c in zip(floats, ct_float):
                cts[k] = c
            for k, leaf in enumerate(out_leaves):
                if cts[k] is None:
                    cts[k] = _zeros_like(leaf)
            in_cts = tree.flatten(vjp_fn(tree.unflatten(out_def, cts)))[0]
            total = 0.0
            for c, t in zip(in_cts, t_leaves):
                if c is not None and t is not None:
                    total = total + wnp.sum(c * t)
            return total

        seeds = [_zeros_like(out_leaves[k]) for k in floats]
        tangent_float = _pairing_grad(pairing, seeds) if seeds else []
        t_out = []
        it = iter(tangent_float)
        for k, leaf in enumerate(out_leaves):
            t_out.append(next(it) if k in floats else _zeros_like(leaf))
        return tree.unflatten(out_def, t_out)

    return out, f_jvp


def _pairing_grad(pairing, seeds):
    """Gradient of the pairing in the cotangents; zeros when ``f``'s output does not depend on its inputs."""

    def scalar(cts):
        total = pairing(cts)
        if type(total) is not Tracer:  # nothing depends on the cotangent
            for c in cts:
                total = total + 0.0 * wnp.sum(c)
        # Re<vjp(g), t> = Re<g, J t>, and the gradient of Re<g, w> in g is w (docs/complex.md)
        return wnp.real(total) if np.iscomplexobj(unbox(total)) else total

    return value_and_grad(scalar)(list(seeds))[1]


def jacfwd(f, argnums=0):
    """The Jacobian of ``f`` by forward mode: one JVP whose tangents are the batch of basis vectors.

    Blocks have shape ``out_leaf.shape + in_leaf.shape``, nested like the output and inside it like
    the arguments (a tuple if ``argnums`` is), as ``wengert.jacobian`` (``jacrev``) gives them.
    The batch runs under ``vmap``; where it cannot (a ``grad`` inside ``f``: ``hessian``), one JVP
    per basis vector.
    """

    @functools.wraps(f)
    def jacfwd_f(*args):
        nums, many = _normalize_argnums(argnums, len(args), f)
        primals = tuple(args[a] for a in nums)
        p_leaves, _, p_def = _check_tangents(primals, tree.map(_zeros_like, primals), f)

        def g(*chosen):
            full = list(args)
            for a, v in zip(nums, chosen):
                full[a] = v
            return f(*full)

        rebuild = lambda leaves: tree.unflatten(p_def, leaves)  # noqa: E731
        out_def = None
        per_leaf = []  # per input leaf: the output tangent leaves, batched over its elements
        for j, leaf in enumerate(p_leaves):
            shape = tuple(shape_of(leaf))
            n = int(np.prod(shape, dtype=int))
            basis = np.eye(n, dtype=dtype_of(leaf)).reshape((n,) + shape)

            def along(t, j=j):
                ts = [None] * len(p_leaves)
                ts[j] = t
                return _jvp_leaves(g, p_leaves, ts, rebuild)[1]

            out_t = _batched(along, basis, n)
            leaves, out_def = tree.flatten(out_t)
            per_leaf.append((shape, leaves))
        if not p_leaves:
            raise ValueError("jacfwd: no arguments to differentiate")
        blocks_per_out = []
        for k in range(out_def.num_leaves):
            blocks = []
            for shape, leaves in per_leaf:
                block = _to_block(leaves[k], shape)
                blocks.append(block)
            arg_blocks = tree.unflatten(p_def, blocks)
            blocks_per_out.append(tuple(arg_blocks) if many else arg_blocks[0])
        return tree.unflatten(out_def, blocks_per_out)

    return jacfwd_f


def _batched(fn, basis, n):
    """``stack([fn(basis[i]) for i in range(n)])`` as one batched call when vmap can run it."""
    flat = [([basis], [0], tree.LEAF)]
    try:
        return batching._run_batched(fn, flat, n, 0)
    except batching.NeedsLoop:
        return batching._run_loop(fn, flat, n, 0)


def _to_block(batched_leaf, in_shape):
    """A (n, *out_shape) stack of JVP columns as the (*out_shape, *in_shape) Jacobian block."""
    out_shape = tuple(shape_of(batched_leaf))[1:]
    nd = len(out_shape)
    xp = wnp if type(batched_leaf) is Tracer else np
    moved = xp.moveaxis(batched_leaf, 0, -1) if nd else batched_leaf
    return xp.reshape(moved, out_shape + in_shape)


jacrev = jacobian  # one backward pass per output element: the better choice for few outputs


def hessian(f, argnums=0):
    """The Hessian of scalar ``f``: ``jacfwd(jacrev(f))``, forward over reverse.

    Blocks have shape ``in_leaf.shape + in_leaf.shape`` (nested per argument pair when ``argnums``
    is a tuple), as JAX's ``hessian``.
    """
    return jacfwd(jacrev(f, argnums), argnums)


def hvp(f, primals, vectors):
    """The Hessian-vector product of scalar ``f`` at ``primals`` along ``vectors`` (one per argument).

    Forward over reverse: the JVP of ``grad f`` along ``vectors``, about 2-3 gradients' cost and
    the memory of one. Returns a tuple like ``primals``, or one value when one argument is given.
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(vectors, (tuple, list)):
        raise TypeError("hvp: primals and vectors must be tuples (or lists) of the arguments")
    nums = tuple(range(len(primals)))
    out = jvp(grad(f, argnums=nums), tuple(primals), tuple(vectors))[1]
    return out if len(primals) != 1 else out[0]

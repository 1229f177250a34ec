"""Reverse-mode transforms: vjp, grad, value_and_grad, jacobian (hessian is in forward.py).

All of them are the same three steps: open a trace and wrap the chosen arguments' leaves as its
inputs; run the function; walk the tape backward from the outputs' cotangents.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from ..core import namespace, tree
from ..core.backward import backward
from ..core.mutation import root, settled
from ..core.errors import NonDifferentiableInputError, NonScalarOutputError, run_user
from ..core.trace import INPUT, Tracer, close_trace, collector_paused, dtype_of, make_tracer, new_trace, shape_of, unbox
from .. import numpy as wnp


def argnames(f, count):
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(count):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY,
                                                  params[i].POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        else:
            names.append(None)
    return names


def _describe(f, argnum, path):
    names = argnames(f, argnum + 1)
    name = f" ({names[argnum]})" if names[argnum] else ""
    return f"argument {argnum}{name}{tree.path_str(path)}"


def _as_input(leaf, f, argnum, path):
    """Check a leaf to be differentiated and return it as an array (or an outer tracer)."""
    plain = unbox(leaf)
    if isinstance(plain, (bool, int, float, complex)):
        dtype = np.asarray(plain).dtype
    else:
        dtype = getattr(plain, "dtype", None)
    if dtype is None or not namespace.is_inexact(dtype):
        if dtype is None:
            what = f"a {type(plain).__name__}"
        elif type(plain) in (bool, int):
            what = f"the Python {type(plain).__name__} {plain!r}"
        else:
            what = f"of dtype {dtype}"
        raise NonDifferentiableInputError(
            f"{_describe(f, argnum, path)} is {what}; only floating-point (or complex) values "
            "can be differentiated. Pass a float array (e.g. x.astype(float)), or leave this "
            "argument out of argnums."
        )
    if type(leaf) is Tracer or namespace.is_foreign(leaf):   # another library's array stays one
        return leaf
    return np.asarray(leaf)


def _normalize_argnums(argnums, nargs, f):
    many = isinstance(argnums, (tuple, list))
    nums = tuple(argnums) if many else (argnums,)
    for a in nums:
        if not isinstance(a, int):
            raise TypeError(f"argnums must be an int or a tuple of ints, got {argnums!r}")
        if not -nargs <= a < nargs:
            raise ValueError(
                f"argnums={argnums!r} but {getattr(f, '__name__', 'f')} was called with "
                f"{nargs} positional argument(s)"
            )
    nums = tuple(a % nargs for a in nums)
    for k, a in enumerate(nums):
        if a in nums[:k]:
            name = argnames(f, a + 1)[a]
            raise ValueError(
                f"argnums={argnums!r} names argument {a}{f' ({name})' if name else ''} twice; list each "
                "argument once (the gradient with respect to it comes back once)")
    return nums, many


class _Recording:
    """The result of running ``f`` on traced inputs: everything the backward pass needs."""

    def __init__(self, f, args, argnums, has_aux, kwargs=None, guarded=False):
        # the top-level arguments, checked for Dask arrays (leaves deeper in a pytree or in closures
        # are not: docs/backends.md)
        self.top = (*args, *kwargs.values()) if kwargs else args
        if guarded:   # the caller holds both guards (value_and_grad: once for recording and pulling)
            self._record(f, args, argnums, has_aux, kwargs or {})
            return
        with collector_paused(), namespace.dask_guard(self.top):
            self._record(f, args, argnums, has_aux, kwargs or {})

    def _record(self, f, args, argnums, has_aux, kwargs):
        self.trace = trace = new_trace()
        self.argnums = argnums
        self.in_defs = []
        self.in_leaves = []
        self.input_indices = []
        args = list(args)
        tape, inputs, in_leaves, input_indices = trace.tape, trace.inputs, self.in_leaves, self.input_indices
        try:
            for a in argnums:
                leaves, treedef = tree.flatten(args[a])
                paths = None   # made only for an error message about a leaf
                wrapped = []
                for k, leaf in enumerate(leaves):
                    if type(leaf) is np.ndarray and leaf.dtype.kind in "fc":
                        value = leaf
                    else:
                        if paths is None:
                            paths = [path for path, _ in tree.flatten_with_paths(args[a])[0]]
                        value = _as_input(leaf, f, a, paths[k])
                    index = len(tape)   # new_input's lines: an input entry and its tracer
                    tape.append(INPUT)
                    inputs.append(value)
                    wrapped.append(make_tracer(value, trace, index))
                    in_leaves.append(leaf)
                    input_indices.append(index)
                self.in_defs.append(treedef)
                args[a] = tree.unflatten(treedef, wrapped)
            out = settled(trace, run_user(f, args, kwargs))
        finally:
            close_trace(trace)
        if has_aux:
            if not (isinstance(out, (tuple, list)) and len(out) == 2):
                raise TypeError("has_aux=True: the function must return a pair (output, aux)")
            out, aux = out
            self.aux = tree.map(self.unwrap, aux)
        out_leaves, self.out_def = tree.flatten(out)
        self.out_indices = indices = []   # the tape index of each output leaf (None: not traced here)
        self.out_leaves = values = []
        for leaf in out_leaves:
            if type(leaf) is Tracer and leaf._trace is trace:
                indices.append(leaf.index)
                values.append(leaf.value)
            else:
                indices.append(None)
                values.append(leaf)
        self.out = tree.unflatten(self.out_def, self.out_leaves)

    def unwrap(self, leaf):
        if type(leaf) is Tracer and leaf._trace is self.trace:
            return leaf.value
        return leaf

    def pull(self, out_cts, keep_tape, guarded=False):
        """Input cotangents (a tuple over argnums of pytrees) for output cotangents ``out_cts``
        (``guarded``: the caller holds the collector and Dask guards)."""
        seeds = [(i, ct) for i, ct in zip(self.out_indices, out_cts) if i is not None and ct is not None]
        tape = self.trace.tape
        if guarded:
            cts = backward(tape, seeds, keep_tape=keep_tape) if seeds else [None] * len(tape)
        else:
            with collector_paused(), namespace.dask_guard(self.top):
                cts = backward(tape, seeds, keep_tape=keep_tape) if seeds else [None] * len(tape)
        grads = []
        made = []   # made by _finish: only an array the pass kept may alias the caller's arrays
        for i, leaf in zip(self.input_indices, self.in_leaves):
            g = cts[i]
            if type(g) is _ndarray and type(leaf) is _ndarray and g.dtype == leaf.dtype and g.shape == leaf.shape:
                grads.append(g)   # _finish's usual case, without the call
                made.append(False)
            else:
                grads.append(_finish(g, leaf))
                made.append(not isinstance(g, _ndarray))
        _give_away(grads, [*out_cts, *self.in_leaves], made)
        out, start = [], 0
        for treedef in self.in_defs:
            out.append(tree.unflatten(treedef, grads[start:start + treedef.num_leaves]))
            start += treedef.num_leaves
        return tuple(out)


def _finish(g, leaf):
    """An input's gradient in the input's own shape and dtype; zeros where nothing flowed.

    An array input gets an array back, a scalar input (Python or NumPy) a scalar. The zeros of an
    input that received nothing are a read-only broadcast of one zero (``np.broadcast_to``): no
    memory is written for them, so a record whose loss reads 3 of 10 fields costs what the 3 cost.
    They add to parameters like any array; ``g.copy()`` gives a writable one.
    """
    if type(g) is np.ndarray and type(leaf) is np.ndarray and g.dtype == leaf.dtype and g.shape == leaf.shape:
        return g   # the usual case: already the input's shape and dtype
    if type(leaf) is Tracer:   # an outer transform's value (inside vmap: one example's shape)
        plain, shape, dtype = None, tuple(leaf.shape), leaf.dtype
    else:
        plain = leaf
        shape = np.shape(plain)
        dtype = plain.dtype if hasattr(plain, "dtype") else np.asarray(plain).dtype
    if g is None:
        if namespace.is_foreign(plain):
            return namespace.zeros(shape, dtype, plain)
        g = _zeros(shape, dtype) if shape else np.zeros((), dtype)
    elif type(g) is Tracer:
        if g.dtype == dtype:
            return g
        return (g.real if g.dtype.kind == "c" and dtype.kind != "c" else g).astype(dtype)
    elif namespace.is_foreign(g) or namespace.is_foreign(plain):
        return _finish_foreign(g, plain, shape, dtype)
    else:
        g = np.asarray(g)
        if g.dtype != dtype:
            g = (g.real if g.dtype.kind == "c" and dtype.kind != "c" else g).astype(dtype)  # Re: docs/complex.md
        if g.shape != shape:
            g = np.broadcast_to(g, shape).copy()
    if plain is not None and not isinstance(plain, np.ndarray):
        return g[()]
    return g


def _finish_foreign(g, plain, shape, dtype):
    """``_finish`` for another library's arrays: cast and broadcast in their namespace, lazily."""
    xp = namespace.namespace(g, plain)
    if not namespace.is_foreign(g):   # a NumPy cotangent for a foreign input (a constant's rule)
        g = xp.asarray(g, device=namespace.device(plain))
    if g.dtype != dtype:
        if namespace.is_inexact(g.dtype) and not namespace.is_real_floating(g.dtype) and \
                namespace.is_real_floating(dtype):
            g = xp.real(g)   # Re: docs/complex.md
        g = xp.astype(g, namespace.dtype_in(xp, dtype))
    if tuple(g.shape) != tuple(shape):
        g = xp.broadcast_to(g, shape)
    return g


@functools.lru_cache(maxsize=256)
def _zeros(shape, dtype):
    """Read-only zeros of ``shape``: one zero broadcast (shared, as nothing can write into it)."""
    return np.broadcast_to(np.zeros((), dtype), shape)


def _give_away(grads, taken, made=None):
    """Make every plain gradient array one the caller alone owns, writable and aliasing nothing.

    The backward pass may hand the same cotangent to several inputs (``x + y``), a read-only
    broadcast view (``sum``), a view of another cotangent, or an array the caller passed in
    (``taken``: the output cotangents and the inputs); those are copied. A view of an array that
    nothing else holds (``reshape`` of a fresh product) is handed over as it is. Gradients flagged
    in ``made`` were made by ``_finish`` (from nothing: read-only broadcast zeros, which stay so;
    from a NumPy scalar) and are handed over as they are.
    """
    taken_memory = None   # ids of the memory of the taken arrays, found at the first gradient array
    owned = set()         # ids of the memory of gradients already handed over
    for k, g in enumerate(grads):
        if type(g) is not _ndarray or (made and made[k]):
            continue
        if taken_memory is None:
            taken_memory = {id(x) for x in taken}
            taken_memory.update(id(root(x)) for x in taken if isinstance(x, _ndarray) and x.base is not None)
        base = g.base
        base = g if base is None else root(base)
        key = id(base)
        if key in owned or key in taken_memory or not isinstance(base, _ndarray) or not g.flags.writeable:
            g = grads[k] = g.copy()
            key = id(g)
        owned.add(key)
    return grads


_ndarray = np.ndarray
_scalar = np.generic


def _cotangent_leaf(c, o):
    """A cotangent leaf for output leaf ``o``, checked for shape; plain values as arrays (0-d: a
    NumPy scalar, as operations on 0-d arrays return) of the output's dtype when the output is
    floating point: a ``1.0`` seed for a float32 loss must not turn every cotangent of the backward
    pass into float64 (NumPy's mixed float32/float64 products do not run in BLAS: several times
    slower, for gradients that come back as float32 anyway). A complex cotangent for a real output
    is kept as it is (docs/complex.md)."""
    if shape_of(c) != shape_of(o):
        raise ValueError(f"vjp_fn: cotangent of shape {shape_of(c)} for an output of shape {shape_of(o)}")
    if type(c) is Tracer or c is None or namespace.is_foreign(c):
        return c
    c = np.asarray(c)
    dtype = getattr(o, "dtype", None)
    if dtype is not None and c.dtype != dtype and dtype.kind in "fc" and not (
            c.dtype.kind == "c" and dtype.kind == "f"):
        c = c.astype(dtype)
    return c[()]


def vjp(f, *primals, has_aux=False):
    """Run ``f(*primals)``; return ``(out, vjp_fn)`` (and ``aux``), ``vjp_fn(ct)`` a tuple of cotangents.

    ``vjp_fn`` may be called many times; the tape lives as long as ``vjp_fn`` does. A real
    cotangent is taken in its output's floating dtype (``vjp_fn(1.0)`` of a float32 output runs
    a float32 backward pass).
    """
    rec = _Recording(f, primals, tuple(range(len(primals))), has_aux)

    def vjp_fn(ct):
        ct_leaves, ct_def = tree.flatten(ct)
        if ct_def != rec.out_def:
            raise ValueError(
                f"vjp_fn: the cotangent's structure {ct_def!r} differs from the output's {rec.out_def!r}"
            )
        checked = []
        for c, o in zip(ct_leaves, rec.out_leaves):
            # the common case first (an array for an array or NumPy scalar output): one shape test
            if type(c) is _ndarray and (type(o) is _ndarray or isinstance(o, _scalar)) and c.shape == o.shape \
                    and c.dtype == o.dtype:
                checked.append(c if c.ndim else c[()])
            else:
                checked.append(_cotangent_leaf(c, o))
        return rec.pull(checked, keep_tape=True)

    if has_aux:
        return rec.out, vjp_fn, rec.aux
    return rec.out, vjp_fn


def value_and_grad(f, argnums=0, has_aux=False):
    """``f``'s value and its gradient with respect to ``argnums``; ``f`` must return a scalar.

    An output holding exactly one element (shape ``(1,)``, ``(1, 1)``) counts as a scalar, as in
    autograd: the value comes back in its shape, the gradient is that of its one element.

    ``argnums`` counts positional arguments; keyword arguments are passed to ``f`` as they are and
    are not differentiated.
    """

    normalized = {}   # number of positional arguments -> (argnums as positions, many?)

    @functools.wraps(f)
    def value_and_grad_f(*args, **kwargs):
        found = normalized.get(len(args))
        if found is None:
            found = normalized[len(args)] = _normalize_argnums(argnums, len(args), f)
        nums, many = found
        with collector_paused(), namespace.dask_guard((*args, *kwargs.values()) if kwargs else args):
            rec = _Recording(f, args, nums, has_aux, kwargs, guarded=True)
            seed = _seed(rec, f)
            grads = rec.pull([seed], keep_tape=False, guarded=True)
        g = grads if many else grads[0]
        value = rec.out
        return ((value, rec.aux), g) if has_aux else (value, g)

    return value_and_grad_f


def _seed(rec, f):
    """The output cotangent 1 for ``rec``'s output, which must be real and hold one element."""
    out = rec.out
    if rec.out_def is tree.LEAF:
        value = out.value if type(out) is Tracer else out
        if type(value) in _FLOAT_SCALARS:   # the usual loss: a float NumPy scalar
            return value.dtype.type(1)
    # a scalar, or (autograd's habit) an array of exactly one element, shape (1,) or (1, 1)
    out_shape = shape_of(out) if rec.out_def == tree.LEAF else None
    if out_shape is None or any(n != 1 for n in out_shape):
        shape = out_shape if rec.out_def == tree.LEAF else f"a pytree {rec.out_def!r}"
        raise NonScalarOutputError(
            f"grad of {getattr(f, '__name__', 'f')}: the output must be a scalar (or hold "
            f"exactly one element), but it has shape {shape}. Use wengert.vjp for a "
            "vector-Jacobian product, or wengert.jacobian for the full Jacobian (or reduce "
            "the output, e.g. with .sum())."
        )
    plain = unbox(rec.out)
    dtype = plain.dtype if hasattr(plain, "dtype") else np.asarray(plain).dtype
    if not namespace.is_real_floating(dtype):
        hint = ("; differentiate a real function of it (its real part, abs, ...), or use "
                "wengert.vjp with the cotangent you mean" if namespace.is_inexact(dtype) else "")
        raise NonScalarOutputError(
            f"grad of {getattr(f, '__name__', 'f')}: the output has dtype "
            f"{dtype}; it must be real floating point to be differentiated{hint}"
        )
    # the seed is made where the output lives (a lazy Dask scalar's seed is a Dask array)
    return np.ones(out_shape, dtype)[()] if not namespace.is_foreign(plain) else \
        namespace.ones(out_shape, dtype, plain)


_FLOAT_SCALARS = (np.float64, np.float32, np.float16, np.longdouble)


def grad(f, argnums=0, has_aux=False):
    """The gradient of scalar-valued ``f`` with respect to argument(s) ``argnums``."""
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def grad_f(*args, **kwargs):
        (value, g) = vg(*args, **kwargs)
        if has_aux:
            return g, value[1]
        return g

    if not has_aux:  # vmap(grad(f)) batches it as grad of the sum over examples (batching.py)
        grad_f._wengert_grad = (grad_f, f, argnums)
    return grad_f


def jacobian(f, argnums=0, has_aux=False):
    """The Jacobian of ``f`` by reverse mode, one backward pass per output element.

    For an output leaf of shape ``S`` and an input leaf of shape ``T`` the block has shape ``S + T``.
    The result nests like the output, and inside it like the arguments (a tuple if ``argnums`` is).
    """

    @functools.wraps(f)
    def jacobian_f(*args, **kwargs):
        nums, many = _normalize_argnums(argnums, len(args), f)
        rec = _Recording(f, args, nums, has_aux, kwargs)
        blocks_per_out = []
        for k, out_leaf in enumerate(rec.out_leaves):
            out_shape = shape_of(out_leaf)
            in_shapes = [shape_of(leaf) for leaf in rec.in_leaves]
            rows = []
            for e in range(int(np.prod(out_shape, dtype=int))):
                cts = [None] * len(rec.out_leaves)
                out_dtype = dtype_of(out_leaf)
                basis = np.zeros(out_shape, np.result_type(out_dtype, np.float32) if
                                 namespace.is_inexact(out_dtype) else np.float64)
                basis.flat[e] = 1
                cts[k] = basis
                rows.append(rec.pull(cts, keep_tape=True))
            grads = []
            for a, treedef in enumerate(rec.in_defs):
                leaves_rows = [tree.flatten(row[a])[0] for row in rows]
                start = sum(d.num_leaves for d in rec.in_defs[:a])
                blocks = []
                for j in range(treedef.num_leaves):
                    shape = out_shape + in_shapes[start + j]
                    if not rows:
                        blocks.append(np.zeros(shape, np.asarray(unbox(rec.in_leaves[start + j])).dtype))
                        continue
                    pieces = [r[j] for r in leaves_rows]
                    block = _stack(pieces).reshape(shape)
                    if not shape and type(block) is not Tracer and not isinstance(
                            unbox(rec.in_leaves[start + j]), np.ndarray):
                        block = block[()]  # scalar in, scalar out: a scalar, as grad gives
                    blocks.append(block)
                grads.append(tree.unflatten(treedef, blocks))
            blocks_per_out.append(tuple(grads) if many else grads[0])
        result = tree.unflatten(rec.out_def, blocks_per_out)
        return (result, rec.aux) if has_aux else result

    return jacobian_f


def _stack(pieces):
    if any(type(p) is Tracer for p in pieces):
        return wnp.stack(pieces)
    return np.stack([p if namespace.is_foreign(p) else np.asarray(p) for p in pieces])


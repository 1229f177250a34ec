"""Manual gradients: ``custom_vjp`` (JAX's semantics) and ``op`` (the ``backprop`` library's ``op1``).

A custom function becomes one primitive on the tape, so it rides the same backward loop as
everything else. Its tape entry is ``fn(leaves...) -> output leaves`` (a multiple-result entry),
with parameters ``spec`` (the function, the inputs' tree structure, the nondiff arguments) and
``box``, a list that the forward pass fills with the residuals, the output structure and the
inputs' shapes and dtypes. The backward pass calls ``bwd(residuals, cotangent)``, checks what it
returned against those shapes and dtypes (an error names the function at the point of the
mistake), and hands the leaves' cotangents to the parents.

Nesting: when the values reaching the primitive are themselves traced by an outer transform
(``grad(grad(f))``), ``fwd`` runs on those traced values, so the outer transform records ``fwd``
and, later, the backward pass's ``bwd``; with ``bwd`` written with ``wengert.numpy`` that gives
correct higher derivatives (as in JAX). ``op`` functions are plain NumPy and say so instead.

With ``wg.config.update("check_custom_gradients", True)`` every custom rule is compared with
central finite differences of the function, on plain float64 copies of its arguments, the first
time it is differentiated with each shape.
"""
from __future__ import annotations

import functools
import inspect

import numpy as np

from ..config import config
from ..core import namespace, tree
from ..core.errors import WengertError
from ..core.trace import Primitive, Tracer, bind, dtype_of, open_levels, shape_of, unbox
from ..primitives._batching import NeedsLoop, one_batch_axis
from .. import numpy as wnp
from .batching import batched_call, vmap
from .reverse import grad


class CustomGradientError(WengertError, ValueError):
    """A custom gradient rule returned something of the wrong structure, shape or dtype, or
    disagrees with finite differences (``check_custom_gradients``), or was used where it cannot be."""


def _custom_impl(*leaves, spec, box):
    """Run ``fwd`` on the input leaves; fill ``box``; return the output leaves."""
    fn, in_def, nondiff = spec
    args = fn._full_args(tree.unflatten(in_def, leaves), nondiff)
    result = fn._fwd(*args)
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise CustomGradientError(
            f"{fn._describe()}: {fn._fwd_name} must return a pair (output, residuals), "
            f"got {_what(result)}")
    out, res = result
    out_leaves, out_def = tree.flatten(out)
    if not isinstance(fn, op):
        fn._check_fwd_output(leaves, in_def, nondiff, out_def, out_leaves)
    box[0] = res
    box[1] = out_def
    box[2] = [(shape_of(x), dtype_of(x)) for x in leaves]
    return tuple(out_leaves)


def _custom_vjp_rule(g, ans, args, params, parents):
    fn, in_def, nondiff = params["spec"]
    res, out_def, avals = params["box"]
    cts = fn._bwd(nondiff, res, tree.unflatten(out_def, list(g)))
    leaves = fn._check_cotangents(cts, in_def, avals)
    return [leaves[position] for position, _ in parents]


def _custom_jvp_rule(tangents, ans, args, params):
    """Forward mode by transposing ``bwd``: it is linear in the cotangent ``g``, so the gradient in
    ``g`` of ``<bwd(res, g), t>`` is ``J t``. That needs ``bwd`` written with wengert.numpy."""
    fn, in_def, nondiff = params["spec"]
    res, out_def, avals = params["box"]
    if isinstance(fn, op):
        raise CustomGradientError(
            f"{fn._describe()} has no forward mode (jvp, jacfwd, hvp, hessian): its pullback is plain "
            "NumPy, which cannot be transposed. Write it with wengert.custom_vjp and a bwd in "
            "wengert.numpy operations.")
    floats = [k for k, a in enumerate(ans) if np.issubdtype(dtype_of(a), np.inexact)]
    rng = np.random.default_rng(0)  # bwd is linear in g: any g gives the same gradient
    seeds = [rng.standard_normal(shape_of(ans[k])).astype(dtype_of(ans[k])) for k in floats]

    def pairing(gs):
        g = [np.zeros(shape_of(a), dtype_of(a)) for a in ans]
        for k, gk in zip(floats, gs):
            g[k] = gk
        leaves = fn._check_cotangents(fn._bwd(nondiff, res, tree.unflatten(out_def, g)), in_def, avals)
        level = len(open_levels())   # the grad below: its level is the innermost
        total = 0.0 * wnp.sum(gs[0]) if gs else 0.0
        for k, (leaf, t) in enumerate(zip(leaves, tangents)):
            if t is None or leaf is None:
                continue
            if not (type(leaf) is Tracer and leaf._trace.level == level) and np.any(unbox(leaf) != 0):
                raise CustomGradientError(
                    f"{fn._describe()}: forward mode (jvp, jacfwd, hvp, hessian) transposes "
                    f"{fn._bwd_name}, but its cotangent for {fn._label(k)} does not depend on g as a traced "
                    "value: write bwd with wengert.numpy operations (not numpy), so that it can be "
                    "transposed.")
            total = total + wnp.sum(leaf * t)
        # Re<bwd(g), t> = Re<g, J t>, whose gradient in g is J t (docs/complex.md)
        return wnp.real(total) if np.iscomplexobj(unbox(total)) else total

    t_float = grad(pairing)(seeds) if floats else []
    out = [None] * len(ans)
    for k, tk in zip(floats, t_float):
        out[k] = tk
    return tuple(out)


def _custom_batch_rule(prim, vals, batched, params, size):
    """vmap of a custom function, as JAX batches it: the same function over the whole batch as a
    custom_vjp whose fwd and bwd are the user's run under vmap, so an outer grad still goes
    through bwd. ``op`` functions (plain NumPy) run once per example."""
    fn, in_def, nondiff = params["spec"]
    if isinstance(fn, op):
        if any(type(v) is Tracer for v in vals):   # differentiated too: per example, whole function
            raise NeedsLoop(f"{fn._describe()} is plain NumPy, so it cannot take a batch and be differentiated")
        return NotImplemented                      # per example, this call only
    out_def = [None]
    out = tuple(_over_the_batch(fn, in_def, nondiff, batched, vals, size, out_def)(*vals))
    params["box"][1] = out_def[0]   # the output's structure, for the caller (as _custom_impl gives it)
    return out


def _over_the_batch(fn, in_def, nondiff, batched, vals, size, out_def):
    """A custom_vjp of the input leaves ``vals`` (batch of ``size`` on axis 0 where ``batched``)
    giving ``fn``'s output leaves for every example; ``out_def[0]`` receives the output's tree
    structure."""
    axes = tuple(0 if b else None for b in batched)
    avals = [(tuple(shape_of(v))[1:] if b else tuple(shape_of(v)), dtype_of(v)) for v, b in zip(vals, batched)]
    res_axes = [None]

    def one_example(*leaves):
        out, out_def[0] = tree.flatten(fn.fun(*fn._full_args(tree.unflatten(in_def, leaves), nondiff)))
        return tuple(out)

    def fwd_one_example(*leaves):
        out, res = _fwd_plain(fn, fn._full_args(tree.unflatten(in_def, leaves), nondiff))
        out, out_def[0] = tree.flatten(out)
        return tuple(out), res

    def bwd_one_example(res, g):
        return tuple(fn._check_cotangents(fn._bwd(nondiff, res, tree.unflatten(out_def[0], list(g))),
                                          in_def, avals))

    def whole(*leaves):
        return vmap(one_example, in_axes=axes)(*leaves)

    def whole_fwd(*leaves):
        (out, res), (out_axes, res_axes[0]) = batched_call(fwd_one_example, leaves, axes)
        out = tuple(o if ax == 0 else wnp.broadcast_to(o, (size,) + tuple(shape_of(o)))
                    for o, ax in zip(out, out_axes))
        return out, res

    def whole_bwd(res, g):
        cts = vmap(bwd_one_example, in_axes=(res_axes[0], 0))(res, g)
        return tuple(ct if ct is None or b else wnp.sum(ct, axis=0) for ct, b in zip(cts, batched))

    whole.__name__ = whole.__qualname__ = f"{fn._name()} (over a vmap batch)"
    batched_fn = custom_vjp(whole)
    batched_fn.defvjp(whole_fwd, whole_bwd)
    return batched_fn


class _CustomPrimitive(Primitive):
    """The primitive of one custom function. ``bind`` calls it with values that are themselves
    traced (an outer transform): then ``fwd`` runs on them, recorded by that outer transform."""

    __slots__ = ()

    def __init__(self, name, batched_vjp):
        super().__init__(name, _custom_impl, multiple_results=True, fused_vjp=_custom_vjp_rule,
                         fused_jvp=_custom_jvp_rule, batch=one_batch_axis(_custom_batch_rule),
                         batched_vjp=batched_vjp)
        self.value_args = ()
        self.drop_count(0)

    def drop_count(self, n):
        """Let the tape entry keep none of ``n`` input leaves: the rule reads residuals only."""
        self.keep_args = (False,) * n

    def __call__(self, *leaves, **params):
        return _custom_impl(*leaves, **params)


def _what(x):
    if type(x) is Tracer or isinstance(x, np.ndarray):
        return f"an array of shape {shape_of(x)} and dtype {dtype_of(x)}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of length {len(x)}"
    return f"a {type(x).__name__}"


def _contains_tracer(x):
    for leaf in tree.leaves(x):
        if type(leaf) is Tracer:
            return True
    return False


class _Custom:
    """What ``custom_vjp`` and ``op`` share: calling, recording, and checking the rule."""

    _fwd_name = "fwd"
    _bwd_name = "bwd"

    def __init__(self, fun, nondiff_argnums=()):
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = tuple(sorted(int(i) for i in nondiff_argnums))
        self._nondiff_set = frozenset(self.nondiff_argnums)
        # a custom_vjp's bwd, written with wengert.numpy, runs on vmap's batched values as any
        # wengert.numpy code does (JAX traces it under vmap too); op's plain-NumPy pullback cannot
        self._prim = _CustomPrimitive(getattr(fun, "__name__", "custom"), batched_vjp=not isinstance(self, op))
        self._checked = set()
        self._fwd_checked = set()   # argument signatures whose fwd output was checked

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._resolve_kwargs(args, kwargs)
        if self._nondiff_set:
            for i in self.nondiff_argnums:
                if i < len(args) and _contains_tracer(args[i]):
                    raise CustomGradientError(
                        f"{self._describe()}: argument {i} is in nondiff_argnums but holds a value being "
                        "differentiated; pass it as an ordinary argument (bwd may return None for it), "
                        "or compute it outside the differentiated function")
            diff = tuple(a for i, a in enumerate(args) if i not in self._nondiff_set)
            nondiff = tuple(a for i, a in enumerate(args) if i in self._nondiff_set)
        else:
            diff, nondiff = args, ()
        leaves, in_def = tree.flatten(diff)
        for leaf in leaves:
            if type(leaf) is Tracer:
                break
        else:
            return self._plain(args)
        if config.check_custom_gradients:
            self._check_rule(leaves, in_def, nondiff)
        prim = self._prim
        if len(prim.keep_args) != len(leaves):
            prim.drop_count(len(leaves))
        box = [None, None, None]
        out = bind(prim, tuple(leaves), {"spec": (self, in_def, nondiff), "box": box})
        for o in out:
            if type(o.value) is Tracer and o.value._trace is o._trace:
                raise CustomGradientError(
                    f"{self._describe()} closes over a value being differentiated (its output depends on "
                    "it, but its rule cannot give it a gradient); pass that value as an argument")
        return tree.unflatten(box[1], out)

    def _check_fwd_output(self, leaves, in_def, nondiff, out_def, out):
        """``fwd``'s output must be the function's own (structure and shapes): else the gradient of
        the rest of the program reaches ``bwd`` shaped for the wrong output, and the error would
        blame ``bwd``. The function runs once on the plain values per argument signature."""
        for leaf in leaves:
            while type(leaf) is Tracer:
                if leaf._trace.hidden_axes:
                    return   # the batch rule made a custom function of the whole batch, checked itself
                leaf = leaf.value
        key = (in_def, tuple((shape_of(x), str(dtype_of(x))) for x in leaves), _key_of(nondiff))
        if key in self._fwd_checked:
            return
        expected, expected_def = tree.flatten(self._plain(self._full_args(
            tree.unflatten(in_def, [unbox(x) for x in leaves]), nondiff)))
        if expected_def != out_def:
            raise CustomGradientError(
                f"{self._describe()}: {self._fwd_name} returned an output of structure {out_def!r}, but the "
                f"function itself returns {expected_def!r} for these arguments; fwd must return "
                "(the function's output, residuals)")
        for k, (got, want) in enumerate(zip(out, expected)):
            if tuple(shape_of(got)) != tuple(np.shape(want)):
                where = f"output {k}" if len(expected) > 1 else "output"
                raise CustomGradientError(
                    f"{self._describe()}: {self._fwd_name} returned an {where} of shape {tuple(shape_of(got))}, "
                    f"but the function itself returns shape {tuple(np.shape(want))} for these arguments; fwd "
                    "must return (the function's output, residuals), so the output's gradient reaches bwd "
                    "with the right shape")
        self._fwd_checked.add(key)

    def _plain(self, args):
        return self.fun(*args)

    def _resolve_kwargs(self, args, kwargs):
        try:
            bound = inspect.signature(self.fun).bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self._describe()}: {e}") from None
        bound.apply_defaults()
        if bound.kwargs:
            raise TypeError(f"{self._describe()}: keyword-only arguments ({', '.join(bound.kwargs)}) are not "
                            "supported by custom gradients; make them positional")
        return bound.args

    def _full_args(self, diff, nondiff):
        """The arguments in their original order, from the differentiable and the nondiff ones."""
        if not nondiff:
            return tuple(diff)
        diff = tuple(diff)
        d, nd = iter(diff), iter(nondiff)
        return tuple(next(nd) if i in self._nondiff_set else next(d) for i in range(len(diff) + len(nondiff)))

    # -- naming ----------------------------------------------------------------------------------
    def _name(self):
        return getattr(self.fun, "__qualname__", None) or getattr(self.fun, "__name__", "function")

    def _describe(self):
        return f"custom_vjp function {self._name()!r}"

    def _argnames(self):
        try:
            params = list(inspect.signature(self.fun).parameters.values())
        except (TypeError, ValueError):
            return []
        return [p.name for i, p in enumerate(params) if i not in self._nondiff_set]

    def _label(self, k, path=()):
        names = self._argnames()
        positions = [i for i in range(len(names) + len(self._nondiff_set)) if i not in self._nondiff_set]
        position = positions[k] if k < len(positions) else k
        name = f" ({names[k]})" if k < len(names) else ""
        return f"argument {position}{name}{tree.path_str(path)}"

    # -- the rule's output -----------------------------------------------------------------------
    def _check_cotangents(self, cts, in_def, avals):
        """The cotangents ``bwd`` returned as one entry per input leaf (None for zero), checked."""
        count = len(in_def.children)
        if not isinstance(cts, (tuple, list)):
            raise CustomGradientError(
                f"{self._describe()}: {self._bwd_name} returned {_what(cts)}; it must return a tuple with one "
                f"cotangent per differentiable argument ({count} here), e.g. (ct,) for one argument")
        if len(cts) != count:
            raise CustomGradientError(
                f"{self._describe()}: {self._bwd_name} returned {len(cts)} cotangent(s) for {count} "
                f"differentiable argument(s); return one per argument (None for zero)"
                + (f", leaving out nondiff_argnums {self.nondiff_argnums}" if self.nondiff_argnums else ""))
        out = []
        for k, (ct, sub) in enumerate(zip(cts, in_def.children)):
            self._flatten_like(ct, sub, k, (), out)
        checked = []
        for (ct, k, path), (shape, dtype) in zip(out, avals):
            checked.append(self._check_leaf(ct, shape, dtype, k, path))
        return checked

    def _flatten_like(self, ct, d, k, path, out):
        """Flatten ``ct`` along tree definition ``d``; a None anywhere stands for zeros below it."""
        if ct is None:
            out.extend((None, k, path) for _ in range(d.num_leaves))
            return
        if d.kind == "leaf":
            out.append((ct, k, path))
            return
        found = tree._children(ct)
        if found is None or found[0] != d.kind or len(found[2]) != len(d.children) or (
                d.kind in ("dict", "namedtuple", "dataclass") and found[1] != d.meta):
            raise CustomGradientError(
                f"{self._describe()}: the cotangent {self._bwd_name} returned for {self._label(k, path)} "
                f"has structure {tree.structure(ct)!r}; expected {d!r}, the argument's own structure")
        for key, child, sub in zip(found[3], found[2], d.children):
            self._flatten_like(child, sub, k, path + (key,), out)

    def _check_leaf(self, ct, shape, dtype, k, path):
        if ct is None or not np.issubdtype(dtype, np.inexact):
            return None  # integer or boolean input: nothing to differentiate
        if type(ct) is not Tracer and not isinstance(ct, np.ndarray) and not namespace.is_foreign(ct):
            if isinstance(ct, (bool, np.bool_)) or not isinstance(ct, (int, float, complex, np.number, list, tuple)):
                raise CustomGradientError(
                    f"{self._describe()}: {self._bwd_name} returned {_what(ct)} as the cotangent of "
                    f"{self._label(k, path)}; expected an array of shape {shape} and dtype {dtype}")
            plain = np.asarray(ct)
            if isinstance(ct, (int, float)) and plain.ndim == 0:
                plain = plain.astype(dtype)  # a Python number takes the argument's dtype, as NumPy would
            ct = plain
        ct_shape = shape_of(ct)
        ct_dtype = dtype_of(ct)
        if ct_shape != shape or ct_dtype != dtype:
            what = "shape" if ct_shape != shape else "dtype"
            raise CustomGradientError(
                f"{self._describe()}: {self._bwd_name} returned a cotangent of shape {ct_shape} and dtype "
                f"{ct_dtype} for {self._label(k, path)}, which has shape {shape} and dtype {dtype}; "
                f"the {what} must match the argument's")
        return ct

    # -- the debug check against finite differences ------------------------------------------------
    def _check_rule(self, leaves, in_def, nondiff):
        key = (in_def, tuple((shape_of(x), str(dtype_of(x))) for x in leaves), _key_of(nondiff))
        if key in self._checked:
            return
        self._checked.add(key)
        check_against_finite_differences(self, leaves, in_def, nondiff)


def _key_of(values):
    try:
        hash(values)
        return values
    except TypeError:
        return tuple(type(v).__name__ for v in values)


def check_against_finite_differences(fn, leaves, in_def, nondiff, max_elements=32, seed=0):
    """Compare ``fn``'s rule with central differences of ``fn`` at ``leaves`` (plain float64 copies).

    Raises :class:`CustomGradientError` naming the function, the argument and the worst element.
    """
    rng = np.random.default_rng(seed)
    plain = []
    for x in leaves:
        v = np.asarray(unbox(x))
        plain.append(v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v)
    diff = tree.unflatten(in_def, plain)
    args = fn._full_args(diff, nondiff)
    out, res = _fwd_plain(fn, args)
    out_leaves, out_def = tree.flatten(out)
    weights = [rng.standard_normal(np.shape(o)) if np.issubdtype(np.asarray(o).dtype, np.inexact)
               else None for o in out_leaves]
    ct_out = tree.unflatten(out_def, [w if w is None else np.asarray(w, np.asarray(o).dtype)
                                      for w, o in zip(weights, out_leaves)])
    avals = [(np.shape(x), x.dtype) for x in plain]
    cts = fn._check_cotangents(fn._bwd(nondiff, res, ct_out), in_def, avals)
    low_precision = any(np.asarray(o).dtype in (np.float16, np.float32) for o in out_leaves)
    step, rtol = (1e-3, 1e-2) if low_precision else (1e-6, 1e-4)

    def scalar(values):
        o = tree.flatten(fn._plain(fn._full_args(tree.unflatten(in_def, values), nondiff)))[0]
        return sum(float(np.sum(w * np.asarray(v, np.float64))) for w, v in zip(weights, o) if w is not None)

    paths = [(path[0], path[1:]) for path, _ in tree.flatten_with_paths(tuple(diff))[0]]
    worst = None
    for j, x in enumerate(plain):
        if not np.issubdtype(x.dtype, np.floating):
            continue
        analytic = np.zeros(x.shape) if cts[j] is None else np.asarray(cts[j], np.float64)
        size = x.size
        chosen = range(size) if size <= max_elements else rng.choice(size, max_elements, replace=False)
        numeric = {}
        for e in chosen:
            h = step * max(1.0, abs(float(x.flat[e])))
            values = []
            for sign in (1, -1):
                moved = x.copy()
                moved.flat[e] += sign * h
                trial = list(plain)
                trial[j] = moved
                values.append(scalar(trial))
            numeric[int(e)] = (values[0] - values[1]) / (2 * h)
        scale = max([1.0] + [abs(v) for v in numeric.values()])
        for e, num in numeric.items():
            a = float(analytic.flat[e])
            excess = abs(a - num) / (rtol * scale)
            if not np.isfinite(a) or excess > 1 and (worst is None or excess > worst[0]):
                worst = (np.inf if not np.isfinite(a) else excess, j, e, a, num, x.shape)
    if worst is not None:
        _, j, e, a, num, shape = worst
        k, path = paths[j] if j < len(paths) else (j, ())
        index = tuple(int(i) for i in np.unravel_index(e, shape)) if shape else ()
        raise CustomGradientError(
            f"{fn._describe()}: its gradient rule disagrees with finite differences of the function "
            f"(check_custom_gradients). Worst element: {fn._label(k, path)} at index {index}: the rule "
            f"gives {a!r}, finite differences give {num!r}. The rule was applied to a random output "
            f"cotangent at float64 copies of the arguments of shapes "
            f"{[np.shape(x) for x in plain]}.")


def _fwd_plain(fn, args):
    result = fn._fwd(*args)
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise CustomGradientError(
            f"{fn._describe()}: {fn._fwd_name} must return a pair (output, residuals), got {_what(result)}")
    return result


class custom_vjp(_Custom):
    """A function with a hand-written vector-Jacobian product, JAX's ``jax.custom_vjp``.

    ::

        @wg.custom_vjp
        def f(x, y):
            return wnp.sin(x) * y

        def f_fwd(x, y):
            return f(x, y), (wnp.cos(x), wnp.sin(x), y)     # (output, residuals)

        def f_bwd(res, g):
            cos_x, sin_x, y = res
            return (cos_x * g * y, sin_x * g)               # one cotangent per argument

        f.defvjp(f_fwd, f_bwd)

    ``fwd`` takes ``f``'s arguments and returns ``(output, residuals)``; ``bwd(residuals, g)``
    returns a tuple with one cotangent per argument (a pytree like the argument, or None for zero),
    each with the argument's shape and dtype. Arguments listed in ``nondiff_argnums`` are passed
    to ``bwd`` first (``bwd(*nondiff_args, residuals, g)``) and get no cotangent. Outputs and
    arguments may be pytrees. Write ``fwd`` and ``bwd`` with ``wengert.numpy`` and the function
    can be differentiated again (``grad(grad(f))``).
    """

    def __init__(self, fun, nondiff_argnums=()):
        super().__init__(fun, nondiff_argnums)
        self.fwd = self.bwd = None

    def defvjp(self, fwd, bwd):
        """Set the forward function ``fwd(*args) -> (out, residuals)`` and ``bwd(residuals, g)``."""
        self.fwd, self.bwd = fwd, bwd

    def _fwd(self, *args):
        if self.fwd is None:
            raise CustomGradientError(f"{self._describe()} is differentiated but has no rule: call "
                                      f"{self._name()}.defvjp(fwd, bwd) first")
        return self.fwd(*args)

    def _bwd(self, nondiff, res, g):
        return self.bwd(*nondiff, res, g)


def _first_order_only(fn):
    return CustomGradientError(
        f"{fn._describe()} was differentiated twice (a transform inside another, e.g. grad(grad(f)), or "
        "hessian). wengert.op gives first derivatives only: its pullback is plain NumPy. For higher "
        "derivatives, write the rule with wengert.custom_vjp and wengert.numpy operations.")


class op(_Custom):
    """A function with a hand-written pullback, in the ``backprop`` library's ``op1`` style.

    ::

        @wg.op
        def my_func(mt):                      # mt: a record (namedtuple, dataclass, dict, ...)
            value = mt.x * mt.y + mt.z
            return value, lambda d: MT(d * mt.y, mt.x * d, d)

    ``fn(*args)`` computes with plain NumPy and returns ``(value, pullback)``; ``pullback(g)``
    returns the cotangent of the argument (a function of one argument) or a tuple with one per
    argument. The result is an ordinary function on plain and traced values alike. First order
    only: differentiating it twice raises an error that says so.
    """

    _fwd_name = "the function"
    _bwd_name = "the pullback"

    def __init__(self, fun):
        super().__init__(fun)

    def _describe(self):
        return f"wengert.op function {self._name()!r}"

    def _plain(self, args):
        return self._fwd(*args)[0]

    def _fwd(self, *args):
        if _contains_tracer(args):
            raise _first_order_only(self)
        result = self.fun(*args)
        if not (isinstance(result, (tuple, list)) and len(result) == 2 and callable(result[1])):
            raise CustomGradientError(
                f"{self._describe()} must return a pair (value, pullback) with pullback(g) giving the "
                f"cotangents of its arguments; got {_what(result)}")
        value, pullback = result
        return value, (pullback, len(args))

    def _bwd(self, nondiff, res, g):
        pullback, n_args = res
        if _contains_tracer(g):
            raise _first_order_only(self)
        cts = pullback(g)
        if n_args == 1:
            return (cts,)
        return cts

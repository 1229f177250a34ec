"""check_grads: compare derivatives (reverse mode, and forward mode on request) with central finite
differences in float64."""
from __future__ import annotations

import numpy as np

from ..core import namespace, tree
from ..core.trace import Tracer, unbox
from .reverse import argnames, _Recording, grad
from .. import numpy as wnp
from .forward import jvp


def _to_float64(x):
    x = unbox(x)
    if isinstance(x, float):
        return np.float64(x)
    if isinstance(x, complex):
        return np.complex128(x)
    if namespace.is_foreign(x):   # another library's array: float64 in its own namespace
        return namespace.copy(x, np.complex128 if _is_complex(x) else np.float64) \
            if namespace.is_inexact(x.dtype) else x
    if hasattr(x, "dtype") and np.issubdtype(x.dtype, np.floating):
        return np.asarray(x, dtype=np.float64)
    if hasattr(x, "dtype") and np.issubdtype(x.dtype, np.complexfloating):
        return np.asarray(x, dtype=np.complex128)
    return x


def _differentiable(x):
    return hasattr(x, "dtype") and namespace.is_inexact(x.dtype)


def _is_complex(x):
    """np.iscomplexobj, also for an array-API namespace's dtypes."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or isinstance(dtype, np.dtype):
        return np.iscomplexobj(x)
    return namespace.is_inexact(dtype) and not namespace.is_real_floating(dtype)


def _split_complex(f, xs, labels):
    """Complex leaves as two real leaves, the real and imaginary parts (``z = re + 1j * im``).

    Derivatives in the parts are real, so everything below checks them as usual; with wengert's
    convention the gradient in ``z`` is ``d/dre - 1j d/dim`` (docs/complex.md).
    """
    parts, new_labels, spans = [], [], []
    for x, label in zip(xs, labels):
        if _is_complex(x):
            spans.append(2)
            parts += [np.real(x), np.imag(x)]
            new_labels += [f"{label} (real part)", f"{label} (imaginary part)"]
        else:
            spans.append(1)
            parts.append(x)
            new_labels.append(label)

    def of_parts(*ps):
        it, rebuilt = iter(ps), []
        for n in spans:
            rebuilt.append(next(it) + 1j * next(it) if n == 2 else next(it))
        return f(*rebuilt)

    of_parts.__name__ = getattr(f, "__name__", "f")
    return of_parts, parts, new_labels


def _on_traced_values(f):
    """``f`` evaluated on traced values even when given plain arrays (its output plain again).

    Finite differences then run the code the derivatives run: a function written for traced
    values (``x.at[idx].set(v)``, which plain NumPy arrays lack) is checked without wengert
    touching ``numpy.ndarray``. Called with tracers (inside ``grad``) it is ``f`` itself.
    """
    def traced_f(*xs):
        if any(type(x) is Tracer for x in xs):
            return f(*xs)
        return _Recording(f, xs, tuple(range(len(xs))), False).out

    traced_f.__name__ = getattr(f, "__name__", "f")
    return traced_f


def _scalarize(f, args, rng):
    """``f`` if it returns a scalar, else ``sum_k <u_k, f(...)_k>`` with fixed random ``u_k``."""
    out = f(*args)
    leaves, treedef = tree.flatten(out)
    if treedef == tree.LEAF and np.ndim(unbox(leaves[0])) == 0 and not _is_complex(unbox(leaves[0])):
        return f
    weights = [rng.standard_normal(np.shape(unbox(leaf))) for leaf in leaves]
    weights = [namespace.like(w + 1j * rng.standard_normal(np.shape(w)) if _is_complex(unbox(leaf))
                              else w, unbox(leaf))   # in the output's namespace and on its device
               for w, leaf in zip(weights, leaves)]

    def scalar_f(*a):
        total = 0.0
        for w, leaf in zip(weights, tree.flatten(f(*a))[0]):
            term = wnp.sum(w * leaf)
            total = total + (wnp.real(term) if _is_complex(unbox(term)) else term)
        return total

    return scalar_f


# A central difference subtracts two values of f: each is rounded to about machine epsilon times
# |f|, and the difference is divided by 2 * eps, so where |f| is large against its change (a sum of
# many terms) the quotient carries round-off of about EPSILON * (|f+| + |f-|) / (2 * eps) that no
# derivative can match. Twice that (measured: under 0.8 of it on sums of 10^4-10^5 terms) is added
# to the tolerance, so a right gradient of a large-valued function is not reported wrong.
_ROUNDING = 2 * np.finfo(np.float64).eps


def _rounding_noise(plus, minus, eps):
    """The round-off a central difference of ``f`` values ``plus`` and ``minus`` can carry."""
    return _ROUNDING * (abs(plus) + abs(minus)) / (2 * eps)


def _numeric_gradient(f, xs, i, eps, max_elements, rng):
    """Central differences of scalar ``f(*xs)`` in the elements of ``xs[i]`` (a sample if many),
    each with the round-off it may carry: ``{element: (difference quotient, noise)}``."""
    base = np.array(namespace.to_numpy(xs[i]), dtype=np.float64)
    size = base.size
    chosen = np.arange(size) if size <= max_elements else np.sort(rng.choice(size, max_elements, replace=False))
    numeric = {}
    for flat in chosen:
        values = []
        for step in (eps, -eps):
            moved = base.copy()
            moved.flat[flat] += step
            new = list(xs)
            new[i] = namespace.like(moved, xs[i]) if np.ndim(xs[i]) else moved[()]
            values.append(float(unbox(f(*new))))
        numeric[int(flat)] = ((values[0] - values[1]) / (2 * eps), _rounding_noise(*values, eps))
    return numeric


def check_grads(f, args, order=1, modes=("rev",), eps=1e-6, rtol=1e-5, atol=1e-6,
                max_elements=1000, seed=0):
    """Assert that wengert's derivatives of ``f`` at ``args`` match central finite differences.

    Floating-point arguments and pytree leaves are cast to float64 and checked; every other value
    (integers, booleans, strings, ...), alone or inside a pytree, is held fixed. A non-scalar
    output is reduced with fixed random weights. ``order=2`` also checks the derivative of the
    gradient. An element agrees when the two differ by at most ``atol + rtol * |numeric|`` plus the
    round-off the finite difference itself carries (large where ``|f|`` is large against its
    change). On a mismatch, the AssertionError names the argument (and the leaf's path), the
    element, both values and the relative error. Returns None when everything agrees.
    """
    if isinstance(modes, str):
        modes = (modes,)
    unknown = set(modes) - {"rev", "fwd"}
    if unknown or not modes:
        raise ValueError(f"check_grads: modes must be a tuple of 'fwd' and 'rev', got {modes!r}")
    args = tuple(tree.map(_to_float64, a) for a in (args if isinstance(args, (tuple, list)) else (args,)))
    names = argnames(f, len(args))
    flat = [tree.flatten_with_paths(a) for a in args]
    # the checked function takes the floating-point leaves only, one positional argument each
    slots = [(argnum, k) for argnum, (pairs, _) in enumerate(flat)
             for k, (_, leaf) in enumerate(pairs) if _differentiable(leaf)]
    if not slots:
        raise ValueError("check_grads: no floating-point argument to differentiate")
    labels = []
    for argnum, k in slots:
        name = f" ({names[argnum]})" if names[argnum] else ""
        labels.append(f"argument {argnum}{name}{tree.path_str(flat[argnum][0][k][0])}")

    def of_leaves(*xs):
        leaves = [[leaf for _, leaf in pairs] for pairs, _ in flat]
        for (argnum, k), x in zip(slots, xs):
            leaves[argnum][k] = x
        return f(*(tree.unflatten(treedef, ls) for (_, treedef), ls in zip(flat, leaves)))

    xs = [flat[argnum][0][k][1] for argnum, k in slots]
    if any(_is_complex(x) for x in xs):
        of_leaves, xs, labels = _split_complex(of_leaves, xs, labels)
    of_leaves = _on_traced_values(of_leaves)
    if "fwd" in modes:
        _check_forward(of_leaves, xs, getattr(f, "__name__", "f"), order, eps, rtol, atol, seed)
    if "rev" in modes:
        _check(of_leaves, xs, labels, getattr(f, "__name__", "f"), order, 1, eps, rtol, atol, max_elements, seed)


def _check_forward(f, xs, fname, order, eps, rtol, atol, seed):
    """Forward mode: ``jvp`` along random directions against central differences along them.

    With ``order=2`` the JVP of the gradient (a Hessian-vector product by forward over reverse) is
    checked the same way.
    """
    rng = np.random.default_rng(seed + 1000)
    scalar_f = _scalarize(f, xs, rng)
    fns = [(scalar_f, "the directional derivative")]
    if order >= 2:
        argnums = tuple(range(len(xs)))
        w = [namespace.like(rng.standard_normal(np.shape(x)), x) for x in xs]

        def grad_along(*a):
            total = 0.0
            for g, d in zip(grad(scalar_f, argnums=argnums)(*a), w):
                total = total + wnp.sum(g * d)
            return total
        fns.append((grad_along, "the directional derivative of the gradient (order 2)"))
    for fn, what in fns:
        for _ in range(2):
            ts = [rng.standard_normal(np.shape(x)) for x in xs]
            ts = [namespace.like(t, x) if np.ndim(x) else t[()] for t, x in zip(ts, xs)]
            fwd = float(namespace.to_numpy(unbox(jvp(fn, tuple(xs), tuple(ts))[1])))
            plus = fn(*[x + eps * t for x, t in zip(xs, ts)])
            minus = fn(*[x - eps * t for x, t in zip(xs, ts)])
            plus, minus = float(unbox(plus)), float(unbox(minus))
            num = (plus - minus) / (2 * eps)
            tolerance = atol + rtol * abs(num) + _rounding_noise(plus, minus, eps)
            if not (np.isfinite(fwd) and np.isfinite(num)) or abs(fwd - num) > tolerance:
                rel = abs(fwd - num) / max(abs(num), 1e-300)
                raise AssertionError(
                    f"check_grads (forward mode): {what} of {fname} along a random direction "
                    f"disagrees with finite differences: forward mode gives {fwd!r}, finite "
                    f"differences give {num!r} (relative error {rel:.3g}; rtol={rtol}, atol={atol}, "
                    f"allowance for the differences' round-off {_rounding_noise(plus, minus, eps):.3g})")


def _check(f, xs, labels, fname, order, level, eps, rtol, atol, max_elements, seed):
    """Check the ``level``-th derivative of the user's function, then the next ones up to ``order``.

    ``f`` takes the floating-point leaves ``xs`` (named by ``labels``); at level 1 it is the user's
    function, at level 2 the derivative of level 1 along a fixed random direction, and so on.
    """
    rng = np.random.default_rng(seed)
    scalar_f = _scalarize(f, xs, rng)
    argnums = tuple(range(len(xs)))
    if level == 1:
        what = f"the gradient of {fname}"
    else:
        what = (f"the derivative of order {level} of {fname} (the gradient of its derivative of "
                f"order {level - 1} along a random direction)")
    analytic = grad(scalar_f, argnums=argnums)(*xs)
    for i, (x, g) in enumerate(zip(xs, analytic)):
        numeric = _numeric_gradient(scalar_f, xs, i, eps, max_elements, rng)
        g_flat = np.asarray(namespace.to_numpy(unbox(g)), dtype=np.float64).reshape(-1)
        worst, worst_excess = None, 0.0
        for flat, (num, noise) in numeric.items():
            excess = abs(g_flat[flat] - num) - (atol + rtol * abs(num) + noise)
            if not (np.isfinite(g_flat[flat]) and np.isfinite(num)) or excess > worst_excess:
                worst, worst_excess = flat, (np.inf if not np.isfinite(excess) else excess)
        if worst is not None:
            num, rev = float(numeric[worst][0]), float(g_flat[worst])
            index = np.unravel_index(worst, np.shape(x)) if np.ndim(x) else ()
            rel = abs(rev - num) / max(abs(num), 1e-300)
            raise AssertionError(
                f"check_grads (order {level}): {what} with respect to {labels[i]} disagrees with "
                f"finite differences at element {tuple(int(k) for k in index)}: reverse mode gives "
                f"{rev!r}, finite differences give {num!r} (relative error {rel:.3g}; "
                f"rtol={rtol}, atol={atol}, allowance for the differences' round-off "
                f"{numeric[worst][1]:.3g})"
            )
    if level < order:
        directions = [namespace.like(rng.standard_normal(np.shape(x)), x) for x in xs]
        grad_f = grad(scalar_f, argnums=argnums)

        def directional(*a):
            total = 0.0
            for g, d in zip(grad_f(*a), directions):
                total = total + wnp.sum(g * d)
            return total

        _check(directional, xs, labels, fname, order, level + 1, eps, rtol, atol, max_elements, seed + 1)

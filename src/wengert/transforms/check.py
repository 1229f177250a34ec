"""check_grads: compare reverse-mode derivatives with central finite differences in float64."""
from __future__ import annotations

import numpy as np

from ..core import tree
from ..core.trace import unbox
from .reverse import _argnames, grad


def _to_float64(x):
    x = unbox(x)
    if isinstance(x, (float, int)) and not isinstance(x, bool):
        return np.float64(x)
    if hasattr(x, "dtype") and np.issubdtype(x.dtype, np.floating):
        return np.asarray(x, dtype=np.float64)
    return x


def _differentiable(x):
    return hasattr(x, "dtype") and np.issubdtype(x.dtype, np.floating)


def _scalarize(f, args, rng):
    """``f`` if it returns a scalar, else ``sum_k <u_k, f(...)_k>`` with fixed random ``u_k``."""
    out = f(*args)
    leaves, _ = tree.flatten(out)
    if len(leaves) == 1 and np.ndim(unbox(leaves[0])) == 0:
        return f
    weights = [rng.standard_normal(np.shape(unbox(leaf))) for leaf in leaves]

    def scalar_f(*a):
        from .. import numpy as wnp
        total = 0.0
        for w, leaf in zip(weights, tree.flatten(f(*a))[0]):
            total = total + wnp.sum(w * leaf)
        return total

    return scalar_f


def _numeric_gradient(f, args, argnum, leaf_index, eps, max_elements, rng):
    leaves, treedef = tree.flatten(args[argnum])
    base = np.array(leaves[leaf_index], dtype=np.float64)
    size = base.size
    chosen = np.arange(size) if size <= max_elements else np.sort(rng.choice(size, max_elements, replace=False))
    numeric = {}
    for flat in chosen:
        values = []
        for step in (eps, -eps):
            moved = base.copy()
            moved.flat[flat] += step
            new_leaves = list(leaves)
            new_leaves[leaf_index] = moved if np.ndim(leaves[leaf_index]) else moved[()]
            new_args = list(args)
            new_args[argnum] = tree.unflatten(treedef, new_leaves)
            values.append(float(unbox(f(*new_args))))
        numeric[int(flat)] = (values[0] - values[1]) / (2 * eps)
    return numeric


def check_grads(f, args, order=1, modes=("rev",), eps=1e-6, rtol=1e-5, atol=1e-6,
                max_elements=1000, seed=0):
    """Assert that wengert's derivatives of ``f`` at ``args`` match central finite differences.

    Floating-point arguments (and pytree leaves) are cast to float64 first; integer arguments
    are held fixed. A non-scalar output is reduced with fixed random weights. ``order=2`` also
    checks the derivative of the gradient. On a mismatch, the AssertionError names the argument,
    the element, both values and the relative error. Returns None when everything agrees.
    """
    if "rev" not in modes:
        raise NotImplementedError("check_grads: only modes=('rev',) is available; forward mode comes with wengert.jvp")
    rng = np.random.default_rng(seed)
    args = tuple(tree.map(_to_float64, a) for a in (args if isinstance(args, (tuple, list)) else (args,)))
    scalar_f = _scalarize(f, args, rng)
    argnums = tuple(i for i, a in enumerate(args) if any(_differentiable(x) for x in tree.flatten(a)[0]))
    if not argnums:
        raise ValueError("check_grads: no floating-point argument to differentiate")
    names = _argnames(f, len(args))
    analytic = grad(scalar_f, argnums=argnums)(*args)
    for argnum, g in zip(argnums, analytic):
        g_leaves = tree.flatten(g)[0]
        pairs = tree.flatten_with_paths(args[argnum])[0]
        for leaf_index, ((path, leaf), g_leaf) in enumerate(zip(pairs, g_leaves)):
            if not _differentiable(leaf):
                continue
            numeric = _numeric_gradient(scalar_f, args, argnum, leaf_index, eps, max_elements, rng)
            g_flat = np.asarray(unbox(g_leaf), dtype=np.float64).reshape(-1)
            worst, worst_excess = None, 0.0
            for flat, num in numeric.items():
                excess = abs(g_flat[flat] - num) - (atol + rtol * abs(num))
                if not np.isfinite(g_flat[flat]) or excess > worst_excess:
                    worst, worst_excess = flat, (np.inf if not np.isfinite(g_flat[flat]) else excess)
            if worst is not None:
                num, rev = numeric[worst], g_flat[worst]
                index = np.unravel_index(worst, np.shape(leaf)) if np.ndim(leaf) else ()
                name = f" ({names[argnum]})" if names[argnum] else ""
                rel = abs(rev - num) / max(abs(num), 1e-300)
                raise AssertionError(
                    f"check_grads (order {order}): the gradient of {getattr(f, '__name__', 'f')} with "
                    f"respect to argument {argnum}{name}{tree.path_str(path)} disagrees with finite "
                    f"differences at element {tuple(int(i) for i in index)}: reverse mode gives {rev!r}, "
                    f"finite differences give {num!r} (relative error {rel:.3g}; rtol={rtol}, atol={atol})"
                )
    if order >= 2:
        directions = [tree.map(lambda x: rng.standard_normal(np.shape(x)) if _differentiable(x) else None,
                               args[a]) for a in argnums]
        grad_f = grad(scalar_f, argnums=argnums)

        def directional(*a):
            from .. import numpy as wnp
            total = 0.0
            for g, d in zip(grad_f(*a), directions):
                for gl, dl in zip(tree.flatten(g)[0], tree.flatten(d)[0]):
                    if dl is not None:
                        total = total + wnp.sum(gl * dl)
            return total

        directional.__name__ = f"grad({getattr(f, '__name__', 'f')})"
        check_grads(directional, args, order=order - 1, modes=modes, eps=eps, rtol=rtol,
                    atol=atol, max_elements=max_elements, seed=seed + 1)

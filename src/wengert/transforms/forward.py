"""Forward mode: jvp, linearize, jacfwd, hvp.

Forward mode is derived from reverse mode by transposition ("double VJP"), so it needs no
per-primitive JVP rule and works for every primitive whose VJP rules can be differentiated (all of
the table's: that is what higher-order ``grad`` already relies on).

``vjp_fn(ct)`` is linear in the cotangent ``ct``: ``vjp_fn(ct) = J^T ct``. So for a tangent ``t``
the scalar ``s(ct) = <vjp_fn(ct), t> = <ct, J t>`` has gradient ``J t`` with respect to ``ct``, at
any ``ct`` (zeros are used). One forward pass is recorded once (``linearize``); each JVP is then a
backward pass recorded by an outer trace plus that trace's backward pass, about 2-3 times a
reverse-mode gradient, and no re-run of ``f``.
"""
from __future__ import annotations

import functools

import numpy as np

from ..core import tree
from ..core.trace import Tracer, unbox
from .reverse import _normalize_argnums, grad, vjp


def _is_float(leaf):
    dtype = np.asarray(unbox(leaf)).dtype
    return np.issubdtype(dtype, np.inexact)


def _zeros_like(leaf):
    plain = unbox(leaf)
    dtype = np.asarray(plain).dtype
    if not np.issubdtype(dtype, np.inexact):
        dtype = np.float64
    return np.zeros(np.shape(plain), dtype)


def _check_tangents(primals, tangents):
    p_leaves, p_def = tree.flatten(tuple(primals))
    t_leaves, t_def = tree.flatten(tuple(tangents))
    if p_def != t_def:
        raise ValueError(f"jvp: the tangents' structure {t_def!r} differs from the primals' {p_def!r}")
    for p, t in zip(p_leaves, t_leaves):
        if np.shape(unbox(p)) != np.shape(unbox(t)):
            raise ValueError(f"jvp: a tangent of shape {np.shape(unbox(t))} for a primal of shape "
                             f"{np.shape(unbox(p))}")
    return t_leaves


def linearize(f, *primals):
    """Run ``f(*primals)`` once; return ``(out, f_jvp)`` with ``f_jvp(*tangents)`` the JVP ``J t``.

    ``f_jvp`` may be called many times; each call reuses the recorded forward pass.
    """
    out, vjp_fn = vjp(f, *primals)
    out_leaves, out_def = tree.flatten(out)
    floats = [k for k, leaf in enumerate(out_leaves) if _is_float(leaf)]

    def f_jvp(*tangents):
        t_leaves = _check_tangents(primals, tangents)

        def pairing(ct_float):
            cts = [None] * len(out_leaves)
            for k, c in zip(floats, ct_float):
                cts[k] = c
            for k, leaf in enumerate(out_leaves):
                if cts[k] is None:
                    cts[k] = _zeros_like(leaf)
            in_cts = tree.flatten(vjp_fn(tree.unflatten(out_def, cts)))[0]
            from .. import numpy as wnp
            total = 0.0
            for c, t in zip(in_cts, t_leaves):
                if c is not None and t is not None:
                    total = total + wnp.sum(c * t)
            return total

        seeds = [_zeros_like(out_leaves[k]) for k in floats]
        if seeds:
            tangent_float = _pairing_grad(pairing, seeds)
        else:
            tangent_float = []
        t_out = []
        it = iter(tangent_float)
        for k, leaf in enumerate(out_leaves):
            t_out.append(next(it) if k in floats else _zeros_like(leaf))
        return tree.unflatten(out_def, t_out)

    return out, f_jvp


def _pairing_grad(pairing, seeds):
    """Gradient of the pairing in the cotangents; zeros when ``f``'s output does not depend on its inputs."""
    from .reverse import value_and_grad

    def scalar(cts):
        total = pairing(cts)
        if type(total) is not Tracer:  # nothing depends on the cotangent
            return total + 0.0 * sum_all(cts)
        return total

    return value_and_grad(scalar)(list(seeds))[1]


def sum_all(xs):
    from .. import numpy as wnp
    total = 0.0
    for x in xs:
        total = total + wnp.sum(x)
    return total


def jvp(f, primals, tangents):
    """``(f(*primals), J t)``: the output and its directional derivative along ``tangents``.

    ``primals`` and ``tangents`` are tuples (or lists) of the same pytree structure and shapes.
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp: primals and tangents must be tuples (or lists) of the arguments")
    _check_tangents(primals, tangents)
    out, f_jvp = linearize(f, *primals)
    return out, f_jvp(*tangents)


def jacfwd(f, argnums=0):
    """The Jacobian of ``f`` by forward mode, one JVP per input element (reusing one forward pass).

    Blocks have shape ``out_leaf.shape + in_leaf.shape``, nested like the output and inside it like
    the arguments (a tuple if ``argnums`` is), as ``wengert.jacobian`` gives them.
    """

    @functools.wraps(f)
    def jacfwd_f(*args):
        nums, many = _normalize_argnums(argnums, len(args), f)

        def g(*chosen):
            full = list(args)
            for a, v in zip(nums, chosen):
                full[a] = v
            return f(*full)

        primals = tuple(args[a] for a in nums)
        out, f_jvp = linearize(g, *primals)
        out_leaves, out_def = tree.flatten(out)
        in_leaves, in_def = tree.flatten(primals)
        in_zero = [_zeros_like(leaf) for leaf in in_leaves]
        columns = []  # per input leaf: list of output-leaf lists, one per element
        for j, leaf in enumerate(in_leaves):
            cols = []
            for e in range(int(np.prod(np.shape(unbox(leaf)), dtype=int))):
                t = list(in_zero)
                basis = np.zeros_like(in_zero[j])
                basis.flat[e] = 1
                t[j] = basis
                cols.append(tree.flatten(f_jvp(*tree.unflatten(in_def, t)))[0])
            columns.append(cols)
        per_out = []
        for k, o in enumerate(out_leaves):
            o_shape = np.shape(unbox(o))
            blocks = []
            for j, leaf in enumerate(in_leaves):
                i_shape = np.shape(unbox(leaf))
                pieces = [c[k] for c in columns[j]]
                if not pieces:
                    blocks.append(np.zeros(o_shape + i_shape))
                    continue
                from .. import numpy as wnp
                stacked = wnp.stack(pieces, axis=-1) if any(type(p) is Tracer for p in pieces) \
                    else np.stack([np.asarray(p) for p in pieces], axis=-1)
                block = stacked.reshape(o_shape + i_shape)
                if not (o_shape + i_shape) and type(block) is not Tracer and not isinstance(
                        unbox(leaf), np.ndarray):
                    block = block[()]
                blocks.append(block)
            arg_blocks = tree.unflatten(in_def, blocks)
            per_out.append(tuple(arg_blocks) if many else arg_blocks[0])
        return tree.unflatten(out_def, per_out)

    return jacfwd_f


def hvp(f, primals, vectors):
    """The Hessian-vector product of scalar ``f`` at ``primals`` along ``vectors`` (one per argument).

    Computed as the gradient of ``<grad f, v>`` (reverse over reverse: second-order rules only).
    Returns a tuple like ``primals``, or one value when one argument is given.
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(vectors, (tuple, list)):
        raise TypeError("hvp: primals and vectors must be tuples (or lists) of the arguments")
    _check_tangents(primals, vectors)
    nums = tuple(range(len(primals)))
    grad_f = grad(f, argnums=nums)
    v_leaves = tree.flatten(tuple(vectors))[0]

    def pairing(*p):
        from .. import numpy as wnp
        total = 0.0
        for g, v in zip(tree.flatten(grad_f(*p))[0], v_leaves):
            total = total + wnp.sum(g * v)
        return total

    out = grad(pairing, argnums=nums)(*primals)
    return out if len(primals) != 1 else out[0]

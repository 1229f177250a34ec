"""``ravel_pytree``: a pytree of arrays as one flat vector, and the function that turns it back.

Like ``jax.flatten_util.ravel_pytree`` and autograd's ``misc.flatten``: the leaves are raveled
in the order ``wengert.tree.flatten`` visits them (dict keys sorted) and concatenated, in the
dtype NumPy's promotion gives them all. ``unravel`` splits a vector of that length, restores each
leaf's shape and dtype, and rebuilds the containers. Both work on traced values, so an optimizer
written for flat vectors can be differentiated through.
"""
from __future__ import annotations

import numpy as np

from .core import tree
from .core.trace import Tracer, unbox
from . import numpy as wnp

__all__ = ["ravel_pytree"]


def ravel_pytree(pytree):
    """``(flat, unravel)``: ``flat`` a 1-D array of all leaves, ``unravel(flat)`` the pytree back."""

    leaves, treedef = tree.flatten(pytree)
    shapes = [np.shape(unbox(x)) for x in leaves]
    dtypes = [np.asarray(unbox(x)).dtype for x in leaves]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    total = sum(sizes)
    dtype = np.result_type(*dtypes) if dtypes else np.dtype(np.float64)
    if not leaves:
        flat = np.zeros(0, dtype)
    elif any(type(x) is Tracer for x in leaves):
        flat = wnp.concatenate([wnp.astype(wnp.ravel(x), dtype) if type(x) is Tracer
                                else np.ravel(x).astype(dtype) for x in leaves])
    else:
        flat = np.concatenate([np.ravel(x).astype(dtype) for x in leaves])

    def unravel(vector):
        if np.shape(unbox(vector)) != (total,):
            raise ValueError(f"unravel: expected a vector of shape ({total},), got shape "
                             f"{np.shape(unbox(vector))}")
        out, start = [], 0
        for shape, size, leaf_dtype in zip(shapes, sizes, dtypes):
            piece = vector[start:start + size]
            start += size
            if type(piece) is Tracer:
                piece = wnp.reshape(piece, shape)
                if np.issubdtype(leaf_dtype, np.inexact) and piece.dtype != leaf_dtype:
                    piece = wnp.astype(piece, leaf_dtype)
            else:
                piece = np.asarray(piece).reshape(shape).astype(leaf_dtype, copy=False)
            out.append(piece)
        return tree.unflatten(treedef, out)

    return flat, unravel

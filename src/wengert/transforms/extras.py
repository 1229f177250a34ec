"""autograd's conveniences: ``elementwise_grad`` and ``checkpoint``; and ``stop_gradient``."""
from __future__ import annotations

import functools

import numpy as np

from ..core import tree
from ..core.trace import Tracer, unbox
from ..primitives.elementwise import stop_gradient as _stop_gradient
from .custom import custom_vjp
from .reverse import _normalize_argnums, vjp


def elementwise_grad(f, argnum=0):
    """The sum of the Jacobian's rows: the vjp of ``f`` with a cotangent of ones (autograd's).

    For a function applied elementwise this is the derivative at each element. ``argnum`` is an
    int or a tuple of ints; keyword arguments are passed through and not differentiated.
    """

    @functools.wraps(f)
    def elementwise_grad_f(*args, **kwargs):
        nums, many = _normalize_argnums(argnum, len(args), f)

        def of_chosen(*chosen):
            full = list(args)
            for i, v in zip(nums, chosen):
                full[i] = v
            return f(*full, **kwargs)

        out, pull = vjp(of_chosen, *(args[i] for i in nums))
        ones = tree.map(lambda o: np.ones(np.shape(unbox(o)), np.asarray(unbox(o)).dtype), out)
        grads = pull(ones)
        return grads if many else grads[0]

    return elementwise_grad_f


def stop_gradient(x):
    """``x``'s value (any pytree) with a zero derivative, under every transform (JAX's).

    The explicit spelling of a deliberate conversion: ``float(wg.stop_gradient(loss))`` logs a
    value without the ``GradientDroppedWarning`` that ``float(loss)`` gives, and
    ``scale = wg.stop_gradient(wnp.max(x))`` keeps the scale out of the gradient on purpose.
    Inside ``vmap`` the batch is kept.
    """
    return tree.map(lambda leaf: _stop_gradient(leaf) if type(leaf) is Tracer else leaf, x)


def _is_float(leaf):
    plain = unbox(leaf)
    dtype = plain.dtype if hasattr(plain, "dtype") else np.asarray(plain).dtype
    return np.issubdtype(dtype, np.inexact)


def checkpoint(f):
    """``f`` whose intermediates are not stored: its backward pass runs ``f`` again.

    The tape keeps only ``f``'s arguments; when the backward pass reaches the call, ``f`` is
    recomputed under a fresh ``vjp`` and that tape is used and dropped at once. Memory falls from
    all of ``f``'s intermediates to its inputs, for the price of a second forward pass. Higher
    derivatives work (the recomputation is recorded by an outer transform). Keyword arguments are
    held fixed; positional arguments that are not floating point get no cotangent.
    """

    @functools.wraps(f)
    def checkpointed(*args, **kwargs):
        call = lambda *a: f(*a, **kwargs)  # noqa: E731

        @custom_vjp
        def run(*a):
            return call(*a)

        def fwd(*a):
            return call(*a), a

        def bwd(res, g):
            leaves, treedef = tree.flatten(res)
            chosen = [k for k, leaf in enumerate(leaves) if _is_float(leaf)]

            def of_floats(*xs):
                full = list(leaves)
                for k, x in zip(chosen, xs):
                    full[k] = x
                return call(*tree.unflatten(treedef, full))

            _, pull = vjp(of_floats, *(leaves[k] for k in chosen))
            cts = pull(g)
            out = [None] * len(leaves)
            for k, ct in zip(chosen, cts):
                out[k] = ct
            for k, leaf in enumerate(leaves):
                if out[k] is None:
                    out[k] = np.zeros(np.shape(unbox(leaf)), np.asarray(unbox(leaf)).dtype)
            return tuple(tree.unflatten(treedef, out))

        run.defvjp(fwd, bwd)
        return run(*args)

    return checkpointed

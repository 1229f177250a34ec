"""Checks the transform tests share: no fallback warnings, forward mode on a family's own JVP rules,
and a transform opened inside vmap against a loop over the examples."""
import contextlib
import warnings

import numpy as np

import wengert as wg


@contextlib.contextmanager
def no_warnings():
    """Fail the test if the block warns: vmap warns when it falls back to a loop over the examples,
    so a rule that is missing or refuses its case shows up here."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not caught, [str(w.message) for w in caught]


def refuse_transposed_jvp(monkeypatch, covers=lambda name: True):
    """Forward mode must run the own JVP rules of the primitives ``covers`` names: falling back to
    transposing their VJP fails the test."""
    from wengert.transforms import forward
    fallback = forward.transposed_jvp

    def refuse(prim, *args):
        if covers(prim.name):
            raise AssertionError(f"{prim.name} has no JVP rule: forward mode fell back to its VJP")
        return fallback(prim, *args)
    monkeypatch.setattr(forward, "transposed_jvp", refuse)


def grad_inside(loss, argnums=0):
    """A grad whose result is used inside the vmapped function (vmap(grad(f)) itself is rewritten as
    the gradient of a vmap and opens no tape inside the batch)."""
    return lambda *a: wg.tree.map(lambda t: t * 1.0, wg.grad(loss, argnums=argnums)(*a))


def inside_vmap_equals_loop(fn, args, in_axes=0, *, rtol, atol, allow_fallback=False):
    """vmap of ``fn``, which opens its own transform, against a loop over the examples (batched
    arguments on axis 0); vmap's per-example fallback fails the check unless ``allow_fallback``."""
    axes = tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if allow_fallback else "error")
        out = wg.vmap(lambda *a: fn(*a), in_axes=in_axes)(*args)
    size = next(np.shape(a)[0] for a, ax in zip(args, axes) if ax is not None)
    refs = [fn(*[a if ax is None else a[i] for a, ax in zip(args, axes)]) for i in range(size)]
    leaves, treedef = wg.tree.flatten(out)
    assert treedef == wg.tree.flatten(refs[0])[1]
    for k, leaf in enumerate(leaves):
        expected = np.stack([np.asarray(wg.tree.flatten(r)[0][k]) for r in refs])
        assert np.shape(leaf) == expected.shape
        np.testing.assert_allclose(leaf, expected, rtol=rtol, atol=atol)

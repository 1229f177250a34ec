"""The rewrites of transforms/_rewrite.py: each one happens on the program it targets (read off
``as_text()``), and the rewritten program's values and gradients equal eager wengert's."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.primitives import nn as P
from wengert.transforms import _ir
from test_jit import assert_trees_close
from test_vectorize import fd_check

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import workloads  # noqa: E402

rng = np.random.default_rng(7)


def calls(text, name):
    """How many lines of the program call ``name``."""
    return len(re.findall(rf"= {name}\(", text))


def einsums(text):
    """How many lines of the program call an einsum: the primitive, or NumPy's own loop (as spelled
    where the primitive would run that loop)."""
    return len(re.findall(r"= (np_)?einsum\(", text))


def staged(f, *args, argnums=0, vectorize=True):
    """(jit's value and gradient, eager's, the program's text, the program without the rewrites)."""
    vg = wg.value_and_grad(f, argnums=argnums)
    jitted = wg.jit(vg, vectorize=vectorize)
    text = jitted.lower(*args).as_text()
    saved = dict(_ir.PASSES)
    _ir.PASSES.update(simplify=False, spell=False)
    try:
        plain = wg.jit(wg.value_and_grad(f, argnums=argnums), vectorize=vectorize).lower(*args).as_text()
    finally:
        _ir.PASSES.update(saved)
    return jitted(*args), vg(*args), text, plain


def staged_w1(spelling, n, w, r, b):
    """Seed 000's loop in ``spelling`` at sizes N, W, R, B under jit, its value and gradient checked
    against eager and the hand-written gradient: the program's text."""
    a, bb = rng.random((w, r, b)), rng.random((w, n, b))
    wts = rng.standard_normal((n, r, b))
    f = workloads.w1_spellings_code(wnp, wg.Buffer)[spelling]
    got, want, text, _ = staged(f, a, bb, wts, argnums=(0, 1))
    assert_trees_close(got, want)
    assert_trees_close(got, workloads.w1_hand_einsum(a, bb, wts))
    return text


def test_diagonal_of_a_product_and_its_gradient_use_the_diagonal_alone():
    """np.diag(a.T @ b) per step (W2's diagmatmul): the forward pass is one einsum, not the whole
    product; the backward pass multiplies by the cotangent, not by a dense diagonal matrix."""
    a = rng.standard_normal((6, 5))
    bs = rng.standard_normal((4, 6, 5))
    w = rng.standard_normal((4, 5))

    def f(a, bs, w):
        zs = wnp.stack([wnp.diag(a.T @ bs[t]) for t in range(4)])
        return wnp.sum(wnp.tanh(zs) * w)

    got, want, text, plain = staged(f, a, bs, w, argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(plain, "diagonal_embed") >= 1 and calls(text, "diagonal_embed") == 0
    assert calls(text, "diagonal") == 0 and einsums(text) >= 1


def test_products_with_an_embedded_diagonal_are_scalings():
    d = rng.standard_normal(5)
    m = rng.standard_normal((5, 3))
    v = rng.standard_normal(5)

    def f(d, m, v):
        e = wnp.diag(wnp.sin(d))
        return wnp.sum(wnp.cos(e @ m)) + wnp.sum((m.T @ e) ** 2) + wnp.sum(wnp.exp(e @ v)) + wnp.sum(v @ e)

    got, want, text, plain = staged(f, d, m, v, argnums=(0, 1, 2))
    assert_trees_close(got, want)
    assert calls(plain, "np_dot|_?matmul|_?dot") > calls(text, "np_dot|_?matmul|_?dot")
    assert calls(text, "diagonal_embed") == 0


def test_negations_through_products_cancel():
    """The backward pass of 1 / (1 + exp(-x)) negates twice around a chain of products."""
    w = rng.standard_normal((4, 3))
    x = rng.standard_normal((2, 4))

    def f(w, x):
        return wnp.sum(1 / (1 + wnp.exp(-(x @ w))) * wnp.arange(3.0))

    got, want, text, plain = staged(f, w, x)
    assert_trees_close(got, want)
    assert calls(plain, "negative") == 2 and calls(text, "negative") == 1   # the forward pass's own


def test_negations_cancel_in_pairs_through_a_chain():
    w = rng.standard_normal((4, 3))
    x = rng.standard_normal((2, 4))
    v = rng.standard_normal(3)

    def f(w, x, v):
        h = 1 / (1 + wnp.exp(-(x @ w)))
        return wnp.sum(1 / (1 + wnp.exp(-(h * v))) * wnp.arange(3.0))

    got, want, text, plain = staged(f, w, x, v, argnums=(0, 2))
    assert_trees_close(got, want)
    assert calls(plain, "negative") == 5 and calls(text, "negative") == 2


def test_broadcasts_read_by_elementwise_operations_are_implicit():
    x = rng.standard_normal((5, 3))

    def f(x):
        e = wnp.exp(x - wnp.max(x, axis=0, keepdims=True))
        return wnp.sum(e / wnp.sum(e, axis=0, keepdims=True) * wnp.arange(15.0).reshape(5, 3))

    got, want, text, plain = staged(f, x)
    assert_trees_close(got, want)
    assert calls(plain, "broadcast_to") >= 2 and calls(text, "broadcast_to") == 0


def test_a_scatter_into_zeros_that_only_adds_axes_is_a_reshape():
    x = rng.standard_normal((4, 3))
    y = rng.standard_normal((2, 4, 3))

    def f(x, y):
        return wnp.sum(wnp.sin(x[None, :, :] * y))

    got, want, text, plain = staged(f, x, y)
    assert_trees_close(got, want)
    assert calls(plain, "index_add") == 1 and calls(text, "index_add") == 0


def test_a_division_by_one_is_dropped_also_for_a_returned_value():
    x = rng.standard_normal((1, 3))

    def f(x):
        return -wnp.sum(wnp.sin(x)) / x.shape[0]

    got, want, text, plain = staged(f, x)
    assert_trees_close(got, want)
    assert re.search(r"divide\(v\d+, 1\)", plain) and not re.search(r"divide\(v\d+, 1\)", text)
    value, grad = wg.jit(f)(x), wg.jit(wg.grad(f))(x)
    assert type(value) is type(f(x)) and grad.shape == x.shape


def test_reductions_transposes_and_reshapes_are_written_as_numpy_calls():
    w = rng.standard_normal((4, 3)).astype(np.float32)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    mask = x > 0

    def f(w, x):
        h = wnp.tanh(x @ w)
        return wnp.sum(h.reshape(3, 2) ** 2) + wnp.sum(wnp.max(h, axis=1)) + wnp.sum(mask) * wnp.sum(h)

    got, want, text, plain = staged(f, w, x)
    assert_trees_close(got, want, rtol=1e-6, atol=1e-6)
    assert calls(text, "add_reduce") >= 2 and calls(text, "maximum_reduce") == 1 and calls(text, "T") >= 1
    assert calls(text, "ndarray_reshape") >= 1
    # the tie count of max's rule, a sum of a comparison: its integer dtype is said, as np.sum chooses it
    assert calls(text, "_sum") == 0 and re.search(r"= add_reduce\(\w+, axis=\(1,\), keepdims=True, dtype=", text)
    assert calls(plain, "add_reduce") == 0


def test_rewrites_keep_values_for_every_input_of_the_cached_program():
    """Softmax whose maximum ties, and log_softmax/logsumexp rows of -inf (not finite maxima),
    through the cached program and eager."""
    def f(x):
        m = wnp.max(x, axis=1, keepdims=True)
        return wnp.sum(wnp.exp(x - m) / wnp.sum(wnp.exp(x - m), axis=1, keepdims=True) * wnp.arange(4.0))

    jitted = wg.jit(wg.value_and_grad(f))
    for x in (rng.standard_normal((3, 4)), np.array([[1.0, 1.0, 0.0, 1.0], [2.0, -1.0, 2.0, 0.0], [0.0] * 4])):
        assert_trees_close(jitted(x), wg.value_and_grad(f)(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nn_primitives_on_float_arrays_agree_with_the_general_path(dtype):
    """A finite row takes NumPy's few calls; an array with rows of -inf or +inf takes the general
    path (the maximum replaced by 0); both give the finite row the same values."""
    x = rng.standard_normal((3, 5)).astype(dtype)
    x[1] = -np.inf
    x[2, 1] = np.inf
    exact = x[:1].astype(np.float64)
    with np.errstate(all="ignore"):
        for keepdims in (True, False):
            for axis in ((1,), None):
                fast = P.logsumexp.impl(x[:1], axis=axis, keepdims=keepdims)
                want = np.log(np.sum(np.exp(exact), axis=axis, keepdims=keepdims))
                assert fast.dtype == dtype and fast.shape == want.shape
                np.testing.assert_allclose(fast, want, rtol=1e-6)
            general = P.logsumexp.impl(x, axis=(1,), keepdims=keepdims)
            np.testing.assert_allclose(general[:1], P.logsumexp.impl(x[:1], axis=(1,), keepdims=keepdims), rtol=1e-6)
        for prim, want in ((P.log_softmax, exact - np.log(np.sum(np.exp(exact)))),
                           (P.softmax, np.exp(exact) / np.sum(np.exp(exact)))):
            fast, general = prim.impl(x[:1], axis=(1,)), prim.impl(x, axis=(1,))
            assert fast.dtype == dtype and general.dtype == dtype
            np.testing.assert_allclose(fast, want, rtol=1e-5)
            np.testing.assert_allclose(general[:1], fast, rtol=1e-6)


def test_reshape_chains_and_sums_reshaped_to_their_kept_shape_are_one_call():
    """The backward passes of ``x[None, :, :]`` and of ``nb[:, None, :] * na[None, :, :]``: a sum,
    reshaped to the kept shape, scattered back through new axes (a reshape), i.e. one sum."""
    a = rng.standard_normal((6, 4, 3))
    b = rng.standard_normal((6, 5, 3))

    def f(a, b):
        na = wnp.sqrt(wnp.sum(a ** 2, axis=0))
        nb = wnp.sqrt(wnp.sum(b ** 2, axis=0))
        return wnp.sum(wnp.tanh(nb[:, None, :] * na[None, :, :]))

    got, want, text, plain = staged(f, a, b, argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(plain, "reshape") >= 4 and calls(text, "ndarray_reshape") <= 2
    assert calls(text, "index_add") == 0


def test_calls_with_arrays_and_tuples_of_arrays_take_the_short_way_with_the_same_results():
    """Positional arrays and flat tuples/lists of arrays key the cached program by kinds, shapes and
    dtypes; a tuple and a list, another dtype or a record are other signatures."""
    import dataclasses

    @dataclasses.dataclass
    class P:
        w: object
        b: object

    def loss(params, x):
        w, b = (params.w, params.b) if isinstance(params, P) else params
        return wnp.sum(wnp.tanh(x @ w + b))

    jitted = wg.jit(wg.value_and_grad(loss))
    w, b, x = rng.standard_normal((3, 2)), rng.standard_normal(2), rng.standard_normal((4, 3))
    for params in ((w, b), [w, b], (w, b), P(w, b), (w.astype(np.float32), b), [w, b]):
        got = jitted(params, x)
        want = wg.value_and_grad(loss)(params, x)
        assert type(got[1]) is type(want[1])
        assert_trees_close(got, want, rtol=1e-6, atol=1e-6)
    assert jitted.traces == 4
    assert jitted._quick   # the short way was taken (and filled)


def test_broadcast_products_summed_are_einsums_and_a_weighted_loss_reuses_the_backward_contraction():
    """W2's attention: ``C = sum(alpha[None] * H, axis=1)``, ``loss = sum(C * w)``. The forward and
    backward products over the large ``H`` are einsums, and the loss is ``sum(alpha * G)`` with the
    backward pass's ``G = einsum(w, H)``, so ``H`` is read by one equation."""
    alpha = rng.standard_normal((16, 8))
    H = rng.standard_normal((40, 16, 8))
    w = rng.standard_normal((40, 8))

    def f(alpha, H, w):
        a = wnp.exp(alpha)
        return wnp.sum(wnp.sum(a[None, :, :] * H, axis=1) * w)

    got, want, text, plain = staged(f, alpha, H, w)
    assert_trees_close(got, want)
    assert einsums(plain) == 0 and einsums(text) == 2
    reads_of_h = [line for line in text.splitlines()[1:] if re.search(r"\bx1\b", line.split("#")[0])]
    assert len(reads_of_h) == 1 and "einsum" in reads_of_h[0]
    saved = dict(_ir.PASSES)
    _ir.PASSES.update(contract=False)
    try:
        without = wg.jit(wg.value_and_grad(f)).lower(alpha, H, w).as_text()
    finally:
        _ir.PASSES.update(saved)
    assert einsums(without) == 0


def test_product_sums_keep_kept_axes_size_one_and_small_products_alone():
    """keepdims=True sums and reshape-expanded operands (the backward pass of a sum) give the same
    values; a product smaller than the threshold stays a multiply and a sum."""
    x = rng.standard_normal((32, 16))
    y = rng.standard_normal((12, 32, 16))

    def f(x, y):
        s = wnp.sum(wnp.tanh(x)[None, :, :] * y, axis=(0, 2), keepdims=True)
        return wnp.sum(wnp.sin(s)) + wnp.sum(wnp.cos(x[:2, :2])[None] * y[:3, :2, :2])

    got, want, text, _ = staged(f, x, y, argnums=(0, 1))
    assert_trees_close(got, want)
    assert einsums(text) >= 2   # the forward sum and the backward products over y's shape
    jitted = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    for _ in range(2):
        x, y = rng.standard_normal(x.shape), rng.standard_normal(y.shape)
        assert_trees_close(jitted(x, y), wg.value_and_grad(f, argnums=(0, 1))(x, y))


def test_elementwise_results_are_written_into_dead_operands_they_own_and_never_into_live_views():
    """``x @ w + b`` adds into the product's buffer; a ufunc does not write into an operand a later
    view still reads, nor into an input; results of one call are not changed by the next."""
    w = rng.standard_normal((6, 5))
    b = rng.standard_normal(5)

    def f(w, b, x):
        y = wnp.exp(x @ w + b)
        first = y[0]                     # a view of y, read after y's last direct read
        z = wnp.sin(y)
        return wnp.sum(z * 2.0 + first) + wnp.sum(x * 1.5)

    x = rng.standard_normal((4, 6))
    forward = wg.jit(f)
    text = forward.lower(w, b, x).as_text()
    assert re.search(r"= add_in_place\(v\d+, x1\)", text) and re.search(r"= exp\((v\d+), out=\1\)", text)
    assert re.search(r"= sin\(v\d+\)[;\s]", text)   # not into y: its view ``first`` is read afterwards
    assert not re.search(r"out=x\d", text)          # inputs are never written
    assert_trees_close(forward(w, b, x), f(w, b, x))
    jitted = wg.jit(wg.value_and_grad(f, argnums=(0, 1, 2)))
    assert not re.search(r"out=x\d", jitted.lower(w, b, x).as_text())
    first = jitted(w, b, x)
    kept = wg.tree.map(np.copy, first)
    again = jitted(w, b, rng.standard_normal((4, 6)))
    assert_trees_close(first, kept, rtol=0, atol=0)
    assert_trees_close(first, wg.value_and_grad(f, argnums=(0, 1, 2))(w, b, x))
    assert not np.shares_memory(first[1][0], again[1][0])


def test_a_batched_class_read_back_and_stacked_into_a_sum_is_summed_whole():
    """The per-step bias cotangents of a loop (W2's ``Wm @ x + b``), batched by the vectorizing
    pass and summed with the first step's odd term: one sum of the batched array and one add, not a
    read per step and a stack."""
    W, b = rng.standard_normal((5, 4)), rng.standard_normal(5)
    xs = [rng.standard_normal((4, 3)) for _ in range(12)]
    wts = rng.standard_normal((12, 3))

    def f(W, b, xs, wts):
        ys = [W @ x + b[:, None] for x in xs]
        return wnp.sum(wnp.stack([wnp.sum(ys[0] * y, axis=0) for y in ys]) * wts)

    got, want, text, plain = staged(f, W, b, xs, wts, argnums=(0, 1))
    assert_trees_close(got, want)
    reads = re.compile(r"= v\d+\[\d+\](; del v\d+)?($|  #)", re.M)
    assert len(reads.findall(plain)) >= 11 and len(reads.findall(text)) <= 2
    assert calls(text, "stack") == 1   # the inputs' own


def test_products_summed_through_transposes_and_reversals_are_einsums():
    """``sum(transpose(a * b)[::-1], axis=0)`` (the vectorizing pass's views between a batched product
    and its sum) is the einsum of ``a`` and ``b`` with the kept axes in the sum's order."""
    a = rng.standard_normal((64, 8))
    b = rng.standard_normal((64, 8, 16))

    def f(a, b):
        p = wnp.tanh(a)[:, :, None] * b
        return wnp.sum(wnp.sin(wnp.sum(wnp.transpose(p, (0, 2, 1))[::-1], axis=0)) * wnp.arange(128.0).reshape(16, 8))

    got, want, text, plain = staged(f, a, b, argnums=(0, 1))
    assert_trees_close(got, want)
    assert einsums(text) >= 1 and einsums(plain) == 0
    x = rng.standard_normal(a.shape)
    assert_trees_close(wg.jit(wg.value_and_grad(f))(x, b), wg.value_and_grad(f)(x, b))


def test_transposes_of_transposes_are_one_call_and_an_identity_none():
    """vmap's rules and their backward passes move the batch axis in and out: a transpose of a
    transpose is one transpose, and one that keeps every axis in place is its operand."""
    x = rng.standard_normal((3, 4, 5))

    def f(x):
        z = wnp.transpose(wnp.transpose(wnp.tanh(x), (1, 2, 0)), (2, 0, 1))   # x's own layout again
        w = wnp.transpose(wnp.transpose(wnp.cos(x), (2, 1, 0)), (1, 0, 2))
        return wnp.sum(z * x) + wnp.sum(wnp.sin(w) * wnp.arange(60.0).reshape(4, 5, 3))

    got, want, text, plain = staged(f, x)
    assert_trees_close(got, want)
    assert calls(plain, "transpose") >= 4
    assert calls(text, "ndarray_transpose|T") <= calls(plain, "transpose") // 2
    inner = wg.jit(lambda x: wnp.transpose(wnp.transpose(x, (1, 2, 0)), (2, 0, 1)))
    assert_trees_close(inner(x), x)
    assert inner(x) is not x   # a returned input is a view, never the input itself (as eager)


def _shapes_made(f, *args, argnums=0):
    """The shapes of the arrays each equation of the optimized program makes."""
    program = wg.jit(wg.value_and_grad(f, argnums=argnums)).lower(*args).program
    return [eqn.outs[0].shape for eqn in program.eqns]


def test_a_product_read_only_in_parts_is_made_in_parts():
    """``p = a * b`` read as ``p[1:]`` and ``p[0]`` (twice the first: the vectorizing pass's copies)
    is ``a * b[1:]`` and ``a * b[0]``: the (n, k) product is never made. Read whole as well, or in
    parts that overlap to more than the product, it stays."""
    a = rng.standard_normal(7)
    b = rng.standard_normal((9, 7))

    def parts(a, b):
        p = wnp.tanh(a) * b
        return wnp.sum(wnp.sin(p[1:])) + wnp.sum(wnp.cos(p[1:]) * 2) + wnp.sum(p[0] ** 2)

    def whole(a, b):
        p = wnp.tanh(a) * b
        return wnp.sum(wnp.sin(p[1:])) + wnp.sum(p)

    def overlapping(a, b):
        p = wnp.tanh(a) * b
        return wnp.sum(wnp.sin(p[1:])) + wnp.sum(wnp.cos(p[:-1]))

    got, want, text, plain = staged(parts, a, b, argnums=(0, 1))
    assert_trees_close(got, want)
    assert (9, 7) in _without_rewrites(parts, a, b)
    forward = text.split("backward of")[0]
    assert "= x1[1:,]" in forward and "= x1[0,]" in forward
    assert len(re.findall(r"= multiply\(v0, v\d+\)", forward)) == 2 and "multiply(v0, x1)" not in forward
    assert "multiply(v0, x1)" in plain.split("backward of")[0]
    for f in (whole, overlapping):
        assert_trees_close(wg.jit(wg.value_and_grad(f, argnums=(0, 1)))(a, b), wg.value_and_grad(f, argnums=(0, 1))(a, b))
        assert (9, 7) in _shapes_made(f, a, b, argnums=(0, 1))
    # a broadcast axis of size 1 keeps its one element; an int read drops the axis in both operands
    c = rng.standard_normal((9, 1, 7))

    def broadcast(a, c):
        p = wnp.tanh(a)[None, None, :] * c * wnp.ones((1, 4, 1))
        return wnp.sum(wnp.sin(p[2:5, 1:3])) + wnp.sum(wnp.cos(p[0, 1]))

    assert_trees_close(wg.jit(wg.value_and_grad(broadcast, argnums=(0, 1)))(a, c),
                       wg.value_and_grad(broadcast, argnums=(0, 1))(a, c))


def _without_rewrites(f, *args):
    saved = dict(_ir.PASSES)
    _ir.PASSES.update(simplify=False)
    try:
        program = wg.jit(f).lower(*args).program
    finally:
        _ir.PASSES.update(saved)
    return [eqn.outs[0].shape for eqn in program.eqns]


@pytest.mark.parametrize("keepdims", [False, True])
def test_a_sum_of_a_sum_is_one_sum(keepdims):
    """``sum(sum(x, 2, keepdims), 0)`` is one sum over both axes (a reshape where the kept axes differ)."""
    x = rng.standard_normal((5, 4, 6))

    def f(x):
        s = wnp.sum(wnp.sum(wnp.tanh(x), axis=2, keepdims=keepdims), axis=0)
        return wnp.sum(wnp.sin(s))

    got, want, text, plain = staged(f, x)
    assert_trees_close(got, want)
    forward = [line for line in text.splitlines() if "backward of" not in line]
    sums = lambda lines: sum(1 for line in lines if re.search(r"= (add_reduce|_sum)\(", line))
    assert sums(forward) == 2 and sums(l for l in plain.splitlines() if "backward of" not in l) == 3
    assert got[0].shape == () and got[1].shape == x.shape


def test_a_batched_product_of_a_broadcast_product_summed_over_the_batch_is_one_einsum():
    """``sum((u * g[:, None, :]) @ x.transpose(0, 2, 1), axis=0)`` (W2's weight cotangent): one
    einsum of ``u``, ``g`` and ``x``, which contracts ``g`` with ``x`` first, and no batched matmul
    (differentiated for ``u`` and ``g``: the product is read by the matmul alone); without the
    product, the batched matmul and the sum stay."""
    u = rng.standard_normal((8, 32))
    g = rng.standard_normal((40, 32))
    x = rng.standard_normal((40, 16, 32))

    def f(u, g, x):
        p = wnp.tanh(u)[None, :, :] * g[:, None, :]
        return wnp.sum(wnp.sin(wnp.sum(p @ wnp.transpose(x, (0, 2, 1)), axis=0)))

    def plain_stacks(u, g, x):
        p = wnp.tanh(u)[None, :, :] + g[:, None, :]
        return wnp.sum(wnp.sin(wnp.sum(p @ wnp.transpose(x, (0, 2, 1)), axis=0)))

    got, want, text, plain = staged(f, u, g, x, argnums=(0, 1))
    assert_trees_close(got, want)
    forward = text.split("backward of")[0]
    assert re.search(r"einsum\(\w+, \w+, \w+, subscripts=", forward) and "matmul" not in forward
    assert "matmul" in plain
    got, want, text, _ = staged(plain_stacks, u, g, x, argnums=(0, 1, 2))
    assert_trees_close(got, want)
    assert "np_matmul" in text.split("backward of")[0]


def test_w2_diagmatmul_makes_no_batched_product_for_the_weight_cotangent():
    """Seed 001's diagmatmul spelling: the backward pass's ``gz[t] * y1`` for every step and the 255
    matrix products with the steps' inputs are one einsum that reads the stacked inputs once."""
    T, B, n_in, n_out = 40, 16, 6, 8
    Wm, bm = rng.standard_normal((n_out, n_in)), rng.standard_normal(n_out)
    xs = [rng.standard_normal((n_in, B)) for _ in range(T)]
    Hs, wts = rng.standard_normal((6, T, B)), rng.standard_normal((6, B))

    def f(Wm, bm, xs, Hs, wts):
        ys = [Wm @ x + bm[:, None] for x in xs]
        z = wnp.stack([wnp.diag(ys[0].T @ y) for y in ys])
        e = wnp.exp(z - wnp.max(z, axis=0, keepdims=True))
        alpha = e / wnp.sum(e, axis=0, keepdims=True)
        return wnp.sum(wnp.sum(alpha[None] * Hs, axis=1) * wts)

    got, want, text, plain = staged(f, Wm, bm, xs, Hs, wts, argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(plain, "np_matmul") + calls(plain, "matmul") >= 2
    assert calls(text, "np_matmul") == 1   # the forward product alone
    assert (T - 1, n_out, B) not in _shapes_made(f, Wm, bm, xs, Hs, wts, argnums=(0, 1))
    jitted = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    for _ in range(2):
        xs = [rng.standard_normal((n_in, B)) for _ in range(T)]
        assert_trees_close(jitted(Wm, bm, xs, Hs, wts), wg.value_and_grad(f, argnums=(0, 1))(Wm, bm, xs, Hs, wts))


@pytest.mark.parametrize("keepdims", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logsumexp_of_an_array_shifted_by_its_maxima_takes_no_shift_of_its_own(keepdims, dtype):
    """W3's stable log-softmax, ``z - m - log(sum(exp(z - m)))`` with ``m = max(z)``: the eager
    rewrite records logsumexp of ``z - m``, whose maxima are 0; the program takes exp, sum and log
    of it, not logsumexp's own shift. Values and gradients equal eager's, also for ties in the
    maxima, entries of -inf and rows whose maximum is not finite."""
    def f(z, y):
        m = wnp.max(z, axis=1, keepdims=True)
        lse = wnp.log(wnp.sum(wnp.exp(z - m), axis=1, keepdims=keepdims))
        logp = z - m - (lse if keepdims else lse[:, None])
        return -wnp.sum(y * logp)

    z = rng.standard_normal((4, 6)).astype(dtype)
    y = rng.random((4, 6)).astype(dtype)
    # float32: the max's cotangent, zero in exact arithmetic, is not computed (eager's is rounding)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else {}
    got, want, text, plain = staged(f, z, y)
    assert_trees_close(got, want, **tol)
    assert calls(plain, "nn_logsumexp") == 1 and calls(text, "nn_logsumexp") == 0
    jitted = wg.jit(wg.value_and_grad(f))
    ties = z.copy()
    ties[:, 2] = ties[:, 4] = ties.max(axis=1) + 1   # two maxima in every row
    some_inf = z.copy()
    some_inf[1, :3] = -np.inf
    for other in (ties, some_inf):
        assert_trees_close(jitted(other, y), wg.value_and_grad(f)(other, y), **tol)
    for row in ([-np.inf] * 6, [np.inf] + [0.0] * 5, [np.nan] + [0.0] * 5):
        bad = z.copy()
        bad[2] = row
        value, (grad,) = jitted(bad, y)[0], (jitted(bad, y)[1],)
        want_value, want_grad = wg.value_and_grad(f)(bad, y)
        assert np.isnan(value) and np.isnan(want_value)
        np.testing.assert_array_equal(np.isnan(grad), np.isnan(want_grad))
        keep = [0, 1, 3]
        np.testing.assert_allclose(grad[keep], want_grad[keep], rtol=1e-5)


def test_a_logsumexp_of_another_shift_keeps_its_own():
    """Near misses: the maxima along another axis, or a shift by something else, keep logsumexp."""
    z = rng.standard_normal((4, 6))

    def other_axis(z):
        return wnp.sum(wnp.log(wnp.sum(wnp.exp(z - wnp.max(z, axis=0, keepdims=True)), axis=1)))

    def other_shift(z):
        return wnp.sum(wnp.log(wnp.sum(wnp.exp(z - wnp.mean(z, axis=1, keepdims=True)), axis=1)))

    for f in (other_axis, other_shift):
        got, want, text, _ = staged(f, z)
        assert_trees_close(got, want)
        assert calls(text, "nn_logsumexp") == 1


def test_float_squares_are_numpys_square():
    """``x ** 2`` is written as ``np.square`` (what NumPy's operator runs; ``np.power(x, 2)`` takes the
    general pow loop): the same values. Integer squares and other powers stay powers."""
    x = rng.standard_normal((5, 7))

    def f(x):
        return wnp.sum(wnp.sqrt(wnp.sum(x ** 2, axis=0)))

    got, want, text, plain = staged(f, x)
    assert_trees_close(got, want)
    assert calls(text, "square") == 1 and calls(text, "power") == 0 and calls(plain, "power") == 1
    np.testing.assert_array_equal(wg.jit(lambda x: x ** 2)(x), x ** 2)
    ints = np.arange(6).reshape(2, 3)
    text = wg.jit(lambda x, y: (x ** 2, y ** 3)).lower(ints, x).as_text()
    assert calls(text, "power") == 2 and calls(text, "square") == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_cotangents_are_shared_among_ties_on_the_reduced_shape(dtype):
    """max's rule under a trace, ``g * astype(t / sum(t))`` with ``t = (x == max)``, is
    ``t * (g / count)``: one division per lane, none in float64 per element. Equal to eager with
    no ties, two and three tied maxima, along either axis."""
    w = rng.standard_normal((6, 1)).astype(dtype)

    def f(x, axis):
        m = wnp.max(x, axis=axis, keepdims=True)
        return wnp.sum(wnp.sin(m) * (w if axis == 1 else w.T[:, :1]))

    x = rng.standard_normal((6, 5)).astype(dtype)
    ties = x.copy()
    ties[1, [0, 3]] = ties[2, [1, 2, 4]] = 9.0
    ties[[0, 4], 3] = 9.5
    for axis in (0, 1):
        got, want, text, plain = staged(lambda x: f(x, axis), x)
        assert_trees_close(got, want)
        assert calls(plain, "astype") == 1 and calls(text, "astype") == 1   # the count's, on the reduced shape
        count = re.search(r"(v\d+) = astype\((v\d+), dtype=", text)
        assert re.search(rf"= divide\(\w+, {count.group(1)}", text)
        jitted = wg.jit(wg.value_and_grad(lambda x: f(x, axis)))
        assert_trees_close(jitted(ties), wg.value_and_grad(lambda x: f(x, axis))(ties))


def test_the_shift_of_a_written_out_log_softmax_gets_no_cotangent():
    """``z - m - log(sum(exp(z - m)))`` with ``m = max(z)``: the cotangent ``m`` receives is
    ``-gl * sum(softmax) + gl``, zero in exact arithmetic, so neither it nor max's tie shares are
    computed (W3's stable log-softmax). Equal to eager with ties in the maxima and -inf entries;
    where the loss also reads ``m``, that term's cotangent still reaches ``z`` through the ties."""
    def f(z, y):
        m = wnp.max(z, axis=1, keepdims=True)
        logp = z - m - wnp.log(wnp.sum(wnp.exp(z - m), axis=1, keepdims=True))
        return -wnp.sum(y * logp)

    def also_m(z, y):
        m = wnp.max(z, axis=1, keepdims=True)
        logp = z - m - wnp.log(wnp.sum(wnp.exp(z - m), axis=1, keepdims=True))
        return -wnp.sum(y * logp) + wnp.sum(wnp.sin(m))

    z = rng.standard_normal((4, 6))
    y = rng.random((4, 6))
    ties = z.copy()
    ties[:, 1] = ties[:, 3] = ties.max(axis=1) + 1
    some_inf = z.copy()
    some_inf[0, :2] = -np.inf
    got, want, text, plain = staged(f, z, y)
    assert_trees_close(got, want)
    assert calls(plain, "equal") == 1 and calls(text, "equal") == 0
    for other in (ties, some_inf):
        assert_trees_close(wg.jit(wg.value_and_grad(f))(other, y), wg.value_and_grad(f)(other, y))
    got, want, text, _ = staged(also_m, ties, y)
    assert_trees_close(got, want)
    assert calls(text, "equal") == 1   # sin(m)'s cotangent is shared among the tied maxima
    grad = got[1]
    assert not np.allclose(grad, wg.value_and_grad(f)(ties, y)[1])


def rnn(W, U, xs, h0):
    """A recurrence: each step waits on the one before, so only the rewrites can shorten it."""
    h = h0
    for t in range(xs.shape[0]):
        h = wnp.tanh(W @ h + wnp.dot(U, xs[t]))
    return wnp.sum(h ** 2)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_recurrences_weight_cotangent_is_one_matrix_product_not_a_sum_of_outer_products(dtype):
    """W's cotangent sums outer(g_t, h_t) over the steps and U's outer(g_t, x_t): each becomes
    stack(g).T @ stack(h) and stack(g).T @ xs (the rows of xs themselves, in their order), one
    stack of the g's for both, with the values of eager wengert. (Without the vectorizing pass,
    which batches U @ xs[t] and so leaves U's cotangent no outer products.)"""
    W = (0.3 * rng.standard_normal((6, 6))).astype(dtype)
    U = rng.standard_normal((6, 3)).astype(dtype)
    xs = rng.standard_normal((6, 3)).astype(dtype)
    h0 = rng.standard_normal(6).astype(dtype)
    got, want, text, plain = staged(rnn, W, U, xs, h0, argnums=(0, 1), vectorize=False)
    assert_trees_close(got, want, rtol=1e-4 if dtype == np.float32 else 1e-10)
    assert got[1][0].dtype == dtype
    assert calls(plain, "outer") == 12 and calls(text, "outer") == 0
    assert calls(text, "stack") == 2             # the g's, the h's; U's second factor is xs
    assert re.search(r"= np_dot\(v\d+, x2\)", text)


def test_a_constant_zero_state_adds_no_term_and_a_short_sum_stays_as_it_was():
    """The first step's outer(g_1, zeros) is dropped; three steps (under four terms) keep their
    outer products."""
    W = 0.3 * rng.standard_normal((5, 5))
    U = rng.standard_normal((5, 2))

    def from_zero(W, U, xs):
        return rnn(W, U, xs, wnp.zeros(5))

    got, want, text, _ = staged(from_zero, W, U, rng.standard_normal((6, 2)), argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(text, "outer") == 0
    got, want, text, plain = staged(rnn, W, U, rng.standard_normal((3, 2)), rng.standard_normal(5), argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(text, "outer") == calls(plain, "outer") == 6


def test_an_outer_product_read_twice_keeps_the_sum_it_belongs_to():
    """A term the function also reads elsewhere is not folded away (its value is still needed)."""
    a = rng.standard_normal((6, 4))
    b = rng.standard_normal((6, 3))

    def f(a, b):
        terms = [wnp.outer(a[i], b[i]) for i in range(6)]
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return wnp.sum(wnp.sin(total)) + wnp.sum(terms[2] ** 2)

    got, want, text, _ = staged(f, a, b, argnums=(0, 1), vectorize=False)
    assert_trees_close(got, want)
    assert calls(text, "outer") >= 1


def test_the_shift_of_a_written_out_softmax_gets_no_cotangent():
    """``e / sum(e)`` with ``e = exp(z - max(z))``: the cotangent the shift receives is
    ``sum(h * e)`` with ``h`` the whole cotangent of ``e`` through the normalization, zero in exact
    arithmetic (``e / sum(e)`` does not change when ``e`` is scaled), so neither it nor max's tie
    shares are computed (W1's and W2's softmax, also under vmap). Equal to eager with ties in the
    maxima and -inf entries. Near misses keep them: the loss also reads ``e`` (its cotangent is no
    longer the normalization's alone), or it reads ``m`` (that term still reaches ``z``)."""
    def softmax(z, axis):
        e = wnp.exp(z - wnp.max(z, axis=axis, keepdims=True))
        return e, e / wnp.sum(e, axis=axis, keepdims=True)

    def f(z, y):
        return wnp.sum(softmax(z, 0)[1] * y)

    def vmapped(z, y):
        return wnp.sum(wg.vmap(lambda r: softmax(r, 0)[1])(z) * y)

    def also_e(z, y):
        e, p = softmax(z, 1)
        return wnp.sum(p * y) + wnp.sum(wnp.sin(e))

    def also_m(z, y):
        m = wnp.max(z, axis=1, keepdims=True)
        e = wnp.exp(z - m)
        return wnp.sum(e / wnp.sum(e, axis=1, keepdims=True) * y) + wnp.sum(wnp.sin(m))

    z = rng.standard_normal((4, 6))
    y = rng.random((4, 6))
    ties = z.copy()
    ties[1, :] = ties[3, :] = ties.max(axis=0) + 1
    ties[:, 2] = ties[:, 4] = ties.max(axis=1) + 1
    some_inf = z.copy()
    some_inf[:2, 0] = -np.inf
    for fn in (f, vmapped):
        got, want, text, plain = staged(fn, z, y)
        assert_trees_close(got, want)
        assert calls(plain, "equal") == 1 and calls(text, "equal") == 0 and calls(text, "astype") == 0
        for other in (ties, some_inf):
            assert_trees_close(wg.jit(wg.value_and_grad(fn))(other, y), wg.value_and_grad(fn)(other, y))
    for fn in (also_e, also_m):
        got, want, text, _ = staged(fn, ties, y)
        assert_trees_close(got, want)
        assert calls(text, "equal") == 1
    z32, y32 = z.astype(np.float32), y.astype(np.float32)
    got, want, _, _ = staged(f, z32, y32)
    assert_trees_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spelling", ["sum", "dot"])
def test_a_loss_accumulated_step_by_step_is_one_dot_product_of_the_stacked_states(spelling):
    """loss = loss + sum(h * c[t]) (or np.dot(h, c[t])) at every step of a recurrence: the n
    products and n - 1 adds become the stacked states dotted with c, read whole."""
    W = 0.3 * rng.standard_normal((5, 5))
    xs = rng.standard_normal((7, 5))
    cs = rng.standard_normal((7, 5))
    term = (lambda h, c: wnp.sum(h * c)) if spelling == "sum" else wnp.dot

    def f(W, xs, cs):
        h = wnp.tanh(xs[0])
        loss = term(h, cs[0])
        for t in range(1, 7):
            h = wnp.tanh(W @ h + xs[t])
            loss = loss + term(h, cs[t])
        return loss

    got, want, text, plain = staged(f, W, xs, cs, argnums=(0, 1, 2))
    assert_trees_close(got, want)
    def accumulating(program):   # the running sum's adds
        return [line for line in program.splitlines() if "loss = loss" in line and "= add(" in line]

    assert len(accumulating(plain)) == 6 and accumulating(text) == []
    assert calls(text, "add_reduce") == 0 and re.search(r"= np_dot\(v\d+, v\d+\)", text)


def views_in(text):
    """How many lines of the program are a transpose or a reshape."""
    return calls(text, "(?:ndarray_)?transpose") + calls(text, "T") + calls(text, "(?:ndarray_)?reshape")


def test_a_chain_of_transposes_and_unit_reshapes_is_one_transpose_and_one_reshape():
    """vmap moves batch axes to the front and back and adds an axis of length 1 where an operand is
    not batched; the backward pass undoes each step. A chain of such views is at most one transpose
    of where it starts and one reshape, sharing a transpose the program already makes; a chain whose
    middle is read elsewhere gains no call. Values and gradients equal eager's."""
    def chain(x):
        y = wnp.transpose(x, (2, 0, 1))                 # (4, 2, 3)
        y = wnp.reshape(y, (4, 1, 2, 3))
        y = wnp.transpose(y, (0, 1, 3, 2))              # (4, 1, 3, 2)
        y = wnp.reshape(y, (4, 3, 2))
        y = wnp.transpose(y, (0, 2, 1))                 # (4, 2, 3): x.transpose(2, 0, 1) again
        return wnp.sum(wnp.sin(y) * wnp.transpose(x, (2, 0, 1)))

    def middle_read(x):
        y = wnp.reshape(wnp.transpose(x, (2, 0, 1)), (4, 1, 2, 3))
        z = wnp.transpose(y, (3, 1, 2, 0))              # (3, 1, 2, 4)
        return wnp.sum(wnp.cos(y)) + wnp.sum(wnp.sin(z) ** 2)

    x = rng.standard_normal((2, 3, 4))
    got, want, text, plain = staged(chain, x)
    assert_trees_close(got, want)
    assert views_in(plain) == 11 and views_in(text) == 3   # x's transpose, and its cotangent's two
    got, want, text, plain = staged(middle_read, x)
    assert_trees_close(got, want)
    assert views_in(text) <= views_in(plain)
    w1 = wg.vmap(wg.vmap(wg.vmap(lambda u, v: wnp.dot(u, v) / wnp.sqrt(wnp.sum(u ** 2) * wnp.sum(v ** 2)),
                                 in_axes=(1, None)), in_axes=(None, 1), out_axes=1), in_axes=(2, 2), out_axes=2)

    def cosines(a, b):
        return wnp.sum(wnp.tanh(w1(b, a)))

    a, b = rng.standard_normal((5, 3, 2)), rng.standard_normal((5, 4, 2))
    got, want, text, plain = staged(cosines, a, b, argnums=(0, 1))
    assert_trees_close(got, want)
    assert views_in(text) < views_in(plain) - 4


def test_a_matrix_product_over_one_element_is_a_broadcast_product():
    """The VJP of a batched matrix-vector product gives the matrices' cotangent as a stack of outer
    products, matmul of (B, m, 1) and (B, 1, k): that is the broadcast product, without one tiny
    matrix product per item. A product over more than one element stays a matmul."""
    def f(Ms, vs):
        return wnp.sum(wnp.tanh(wg.vmap(lambda M, v: M @ v, in_axes=(0, 1))(Ms, vs)))

    def g(Ms, Ns):
        return wnp.sum(wnp.tanh(Ms @ Ns))

    Ms, vs = rng.standard_normal((7, 4, 5)), rng.standard_normal((5, 7))
    got, want, text, plain = staged(f, Ms, vs, argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(plain, "matmul") == 3 and calls(text, "np_matmul") == 2
    assert re.search(r"= multiply\(v\d+, v\d+\)[^#\n]*# backward of matmul", text)
    got, want, text, plain = staged(g, Ms, rng.standard_normal((7, 5, 2)), argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(text, "np_matmul") == 3


def test_the_transpose_of_a_product_of_a_transpose_is_one_product():
    """``(x.T @ g).T`` (W's cotangent in a vmapped ``W @ x``, which runs as ``X @ W.T``) is
    ``g.T @ x``: one transpose fewer, with eager's values. A product read elsewhere too is kept."""
    def f(W, X):
        return wnp.sum(wnp.tanh(wg.vmap(lambda x: W @ x)(X)))

    def read_twice(A, B):
        P = A.T @ B
        return wnp.sum(wnp.sin(P.T)) + wnp.sum(P ** 2)

    W, X = rng.standard_normal((6, 5)), rng.standard_normal((8, 5))
    got, want, text, plain = staged(f, W, X, argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(plain, "transpose") == 4 and views_in(text) == 2   # W.T, and g.T for W's cotangent
    got, want, text, plain = staged(read_twice, X, rng.standard_normal((8, 3)), argnums=(0, 1))
    assert_trees_close(got, want)


def test_per_example_gradients_multiply_the_shared_weights_once():
    """``vmap(grad(f))`` broadcasts the parameters to the batch (each example gets its own
    gradient), so ``W @ x`` per example multiplies a stack of copies of W, one small product per
    item. Under jit that is ``X @ W.T`` (and ``G @ W`` backward): no 3-D matmul is left, only the
    per-example outer products, as broadcast products. Equal to eager's per-example gradients and
    to a loop of gradients."""
    def loss(params, x, y):
        W1, b1, W2 = params
        h = wnp.tanh(W1 @ x + b1)
        return wnp.sum((W2 @ h - y) ** 2)

    params = (rng.standard_normal((8, 5)), rng.standard_normal(8), rng.standard_normal((3, 8)))
    X, Y = rng.standard_normal((6, 5)), rng.standard_normal((6, 3))
    per_example = wg.vmap(wg.grad(loss), in_axes=(None, 0, 0))
    jitted = wg.jit(per_example)
    got = jitted(params, X, Y)
    assert_trees_close(got, per_example(params, X, Y))
    for i in range(6):
        assert_trees_close(tuple(g[i] for g in got), wg.grad(loss)(params, X[i], Y[i]))
    text = jitted.lower(params, X, Y).as_text()
    assert calls(text, "np_matmul") == 0 and calls(text, "np_dot") == 3 and calls(text, "broadcast_to") == 0, text


def _fancy_reads(text):
    """Lines that index with a constant array (``x[c3, c4]``, ``x[:, c0, c1]``)."""
    return re.findall(r"= \w+\[(?:[^\]]*, )?c\d+", text)


def test_gathers_that_only_permute_are_views_copied_once():
    """Index arrays that read every element once, in an order a reshape, reversals and a transpose
    give (the vectorizing pass's column reads, the backward pass's read of a Buffer), are that view,
    copied by one reshape in the order NumPy lays a gather out (indexed axes first in memory).
    Indices that repeat or skip an element stay a gather, and their cotangents still add up."""
    x = rng.standard_normal((3, 4, 5))
    k, i = np.meshgrid(np.arange(5), np.arange(4), indexing="ij")
    cols, batch = i.ravel(), k.ravel()                        # x[:, i, k] for k outer, i inner
    rows, depth = (a.ravel() for a in np.meshgrid(np.arange(3), np.arange(5)[::-1], indexing="ij"))

    def permuted(x):
        g = x[:, cols, batch]                                 # (3, 20): x[:, :, :] transposed
        h = x[:, cols[::-1], batch[::-1]].T                   # every (i, k) backwards, (20, 3)
        apart = x[rows, :, depth]                             # arrays apart: lanes first, (15, 4)
        return wnp.sum(wnp.tanh(g) * wnp.arange(60.0).reshape(3, 20)) + wnp.sum(wnp.sin(h) * g.T) \
            + wnp.sum(wnp.cos(apart) * wnp.arange(60.0).reshape(15, 4))

    got, want, text, plain = staged(permuted, x)
    assert_trees_close(got, want)
    assert len(_fancy_reads(plain)) >= 3 and _fancy_reads(text) == [], text
    assert wg.jit(permuted)(x) == pytest.approx(float(permuted(x)), rel=1e-12)

    def repeated(x):                                          # column 0 read twice, column 3 never
        return wnp.sum(wnp.tanh(x[:, np.array([0, 1, 2, 0]), 1]) * wnp.arange(12.0).reshape(3, 4))

    def skipped(x):                                           # a permutation of part of the columns
        return wnp.sum(wnp.cos(x[:, np.array([2, 0, 1]), 2]) ** 2)

    for f in (repeated, skipped):
        got, want, text, plain = staged(f, x)
        assert_trees_close(got, want)
        assert len(_fancy_reads(text)) == 1, text


def test_a_loop_that_writes_every_element_once_makes_no_scatter():
    """A loop writing each element of a Buffer once, in another order than the Buffer's (column by
    column), is its lanes' results reshaped and transposed, then copied in the Buffer's layout; a
    loop that leaves elements unwritten, or writes one twice, keeps its scatter. Values and
    gradients equal eager's in all three."""
    x = rng.standard_normal((6, 4, 3))

    def filled(x, skip=None, twice=False):
        out = wg.Buffer.zeros((4, 3), x.dtype)
        for k in range(3):
            for i in range(4):
                if (i, k) != skip:
                    out[i, k] = wnp.sum(wnp.tanh(x[:, i, k]) * x[:, i, k])
        if twice:
            out[1, 2] = wnp.sum(wnp.sin(x[:, 1, 2]))
        return wnp.sum(wnp.exp(out.freeze()) * wnp.arange(12.0).reshape(4, 3))

    def scatters(f):
        lowered = wg.jit(wg.value_and_grad(f)).lower(x)
        names = ("grid_add", "scatter_set", "scatter_add", "set_in_place")
        return sum(1 for e in lowered.program.eqns if e.prim.name in names), lowered.as_text()

    for f, most in ((filled, 1), (lambda x: filled(x, skip=(2, 1)), None), (lambda x: filled(x, twice=True), None)):
        step = wg.jit(wg.value_and_grad(f))
        assert_trees_close(step(x), wg.value_and_grad(f)(x))
        found, text = scatters(f)
        if most is not None:   # the full loop: x's cotangent's scatter alone, the Buffer's is a view
            assert found == most and "ascontiguousarray" in text, text
        else:                  # the Buffer's scatter stays, beside x's cotangent's
            assert found >= 2, text


def test_an_array_reduced_over_a_middle_axis_before_a_short_one_is_laid_out_batch_last():
    """NumPy reduces with its inner loop along the axis last in memory: a (B, m, c) array reduced
    over m with c < 8 runs B * m loops of c elements. Made from a vector by a reshape, it is made
    with B last in memory instead (one copy); the same values and gradients, and no copy where the
    last axes are long or there is no long batch axis to move."""
    def softmaxed(v, shape, weights):
        y = wnp.tanh(v).reshape(shape)
        e = wnp.exp(y - wnp.max(y, axis=1, keepdims=True))
        return wnp.sum(e / wnp.sum(e, axis=1, keepdims=True) * weights)

    for shape, copies in (((16, 16, 4), 1), ((16, 2, 32), 0), ((4, 16, 16), 0), ((4, 64, 4), 0)):
        v, weights = rng.standard_normal(int(np.prod(shape))), rng.standard_normal(shape)
        got, want, text, plain = staged(lambda v: softmaxed(v, shape, weights), v)
        assert_trees_close(got, want)
        assert calls(text, "ascontiguousarray") == copies, (shape, text)


def test_w1_lists_and_stack_reads_its_cotangent_once_and_unreversed():
    """Seed 000's loop built as lists and stacked: the backward reads the softmax's cotangent as lanes
    twice, once against the class's order (``-g`` reversed and back): one view, no reversal, and
    the softmax over the stacked lanes runs with the batch last in memory, as the Buffer spelling's."""
    text = staged_w1("loop[lists+stack, @]", n=16, w=3, r=4, b=8)
    assert not re.findall(r"= \w+\[[^\]#]*::-1", text) and calls(text, "ascontiguousarray") == 1, text
    assert len(re.findall(r"= ndarray_reshape\(\w+, \(512,\)\)", text)) == 1, text   # the lanes: 16 * 4 * 8


def test_an_elementwise_function_of_a_reversal_reversed_again_is_the_function():
    """``f(x[::-1])[::-1]`` is ``f(x)`` for an elementwise f of one operand; a reversal of another
    axis, or a result read elsewhere too, stays."""
    x = rng.standard_normal((6, 5))
    c = rng.standard_normal((6, 5))

    def once(x):
        return wnp.sum(wnp.exp(wnp.negative(wnp.tanh(x)[::-1])[::-1] * c))

    def other_axis(x):
        return wnp.sum(wnp.exp(wnp.negative(wnp.tanh(x)[::-1])[:, ::-1] * c))

    def read_twice(x):
        s = wnp.negative(wnp.tanh(x)[::-1])
        return wnp.sum(wnp.exp(s[::-1] * c)) + wnp.sum(s * s)

    def reversals(text):   # reversed reads, not the comments' user lines
        return re.findall(r"= \w+\[[^\]#]*::-1", text)

    got, want, text, plain = staged(once, x)
    assert_trees_close(got, want)
    assert len(reversals(plain)) == 2 and reversals(text) == [], text
    for f in (other_axis, read_twice):
        got, want, text, plain = staged(f, x)
        assert_trees_close(got, want)
        assert len(reversals(text)) == 2, text


def test_sums_over_the_rows_of_a_columns_view_sum_the_columns_in_place():
    """A loop's ``sum(u ** 2)`` over the columns u = x[:, i, k]: the vectorizing pass reads the columns
    as rows (a transposed copy of x) and sums each row; the squares are taken of x as it lies and
    summed over x's own axis, then put in the rows' order. Where the squares are read again, the
    rows' squares stay. Values and gradients equal eager's (and the hand gradient for W1)."""
    text = staged_w1("loop[Buffer, np.dot]", n=8, w=5, r=3, b=4)
    assert calls(text, "square") == 2 and sorted(re.findall(r"= square\(x\d\)", text)) == ["= square(x0)", "= square(x1)"], text
    assert len(re.findall(r"= add_reduce\(\w+, axis=\(0,\)", text)) == 2, text

    x = rng.standard_normal((6, 4, 3))

    def squares_read_twice(x):
        out = wg.Buffer.zeros((4, 3), x.dtype)
        for k in range(3):
            for i in range(4):
                q = x[:, i, k] ** 2
                out[i, k] = wnp.sum(q) * wnp.sum(q * wnp.arange(6.0))
        return wnp.sum(wnp.tanh(out.freeze()))

    got, want, text, plain = staged(squares_read_twice, x)
    assert_trees_close(got, want)
    assert not re.findall(r"= square\(x\d\)", text), text


def test_einsums_that_run_numpys_loop_are_numpys_einsum_and_blas_contractions_stay():
    """A small contraction is written as ``np.einsum``; a matrix product written as an einsum (a BLAS
    call) stays with the primitive, and so does a batched contraction of many items, whose choice
    between np.matmul and einsum's loop the primitive makes per call on the operands' layout. Values
    and gradients equal eager's."""
    a = rng.standard_normal((80, 6, 5))
    b = rng.standard_normal((80, 7, 5))
    m = rng.standard_normal((30, 8, 5))
    n = rng.standard_normal((8, 5, 20))

    def f(a, b, m, n):
        d = wnp.einsum("bik,bjk->bij", a, b)                     # 80 items: matmul or NumPy's loop, per call
        s = wnp.einsum("ij,i->j", wnp.tanh(a[0]), wnp.cos(a[1, :, 0]))   # small: NumPy's loop
        p = wnp.einsum("ijk,jkl->il", m, n)                      # a matrix product: BLAS
        return wnp.sum(wnp.sin(d)) + wnp.sum(s * s) + wnp.sum(wnp.tanh(p))

    got, want, text, plain = staged(f, a, b, m, n, argnums=(0, 1, 2, 3))
    assert_trees_close(got, want)
    assert calls(text, "np_einsum") >= 2 and calls(plain, "np_einsum") == 0, text
    assert re.search(r"np_einsum\('ij,i->j', \w+, \w+\)", text), text
    assert re.search(r"= einsum\(x0, x1, subscripts='bik,bjk->bij'\)", text), text
    assert re.search(r"= einsum\(x2, x3, subscripts='ijk,jkl->il'\)", text), text


def test_an_einsum_that_sums_nothing_is_a_broadcast_product_written_in_place():
    """The cotangent of a batched dot product for one operand (``"tb,ob->otb"``, W2 glued) is a
    broadcast product of the operands put in the output's axis order, and the other operand's
    cotangent is added into it in place (an einsum's result is no array the program may write).
    Operands out of the output's order are transposed first. Values and gradients equal eager's
    (and the hand-written gradient for W2 glued)."""
    T, B, n_in, n_out, D = 5, 4, 3, 6, 7
    Wm, bm = rng.standard_normal((n_out, n_in)), rng.standard_normal(n_out)
    xt, Hs, wts = rng.standard_normal((n_in, T * B)), rng.standard_normal((D, T, B)), rng.standard_normal((D, B))
    glued = workloads.w2_code(wnp)["glued"]
    got, want, text, plain = staged(glued, Wm, bm, xt, Hs, wts, argnums=(0, 1))
    assert_trees_close(got, want)
    assert_trees_close(got, workloads.w2_hand(Wm, bm, xt, Hs, wts))
    assert "'tb,ob->otb'" in plain and "'tb,ob->otb'" not in text, text
    assert calls(text, "add_at_in_place") == 1 and calls(text, "index_add") == 0, text

    u = rng.standard_normal((4, 3))
    v = rng.standard_normal((5, 4))

    def outer(u, v):
        return wnp.sum(wnp.sin(wnp.einsum("bi,jb->ijb", u, v)) * wnp.arange(60.0).reshape(3, 5, 4))

    got, want, text, plain = staged(outer, u, v, argnums=(0, 1))
    assert_trees_close(got, want)
    assert "'bi,jb->ijb'" in plain and "'bi,jb->ijb'" not in text, text


def test_a_scaled_array_times_a_smaller_one_scales_the_smaller_one():
    """The backward pass of a square, ``g * (2 * x)`` with ``g`` broadcast (a sum's cotangent),
    doubles ``g``, not ``x``: every multiplication by a number in the program is of an array smaller
    than ``x``. Where the scaled array is read again, or the other factor is as large, it stays.
    Values and gradients equal eager's."""
    x = rng.standard_normal((40, 6, 5))
    w = rng.standard_normal((6, 5))

    def norms(x):
        return wnp.sum(wnp.sqrt(wnp.sum(x ** 2, axis=0)) * w)

    def scaled(jitted, x):
        return [e for e in jitted.lower(x).program.eqns
                if e.prim.name == "multiply" and any(type(a) in (int, float) for a in e.args)]

    got, want, text, plain = staged(norms, x)
    assert_trees_close(got, want)
    jitted = wg.jit(wg.value_and_grad(norms))
    found = scaled(jitted, x)
    assert found and all(int(np.prod(e.outs[0].shape)) < x.size for e in found), text

    def twice(x):   # 3 * x read by two products: kept whole
        t = 3.0 * x
        return wnp.sum(t * w) + wnp.sum(wnp.sin(t))

    got, want, text, _ = staged(twice, x)
    assert_trees_close(got, want)
    assert any(e.outs[0].shape == x.shape for e in scaled(wg.jit(wg.value_and_grad(twice)), x)), text


def _summed_einsums(text):
    """(einsum results, those a sum reads): a sum of an einsum's result is the einsum's job."""
    made = re.findall(r"(v\d+) = (?:np_)?einsum\(", text)
    summed = [v for v in made if re.search(rf"= (?:add_reduce|_sum)\({v}\b", text)]
    return made, summed


def test_an_einsum_summed_over_a_split_axis_is_one_einsum():
    """``sum(einsum('cik,cjk->cij').reshape(8, 4, 6, 7), axis=1)``: a sum over axes of an einsum's
    result, through a reshape that splits an axis, is the einsum without those indices (the operand
    split alike): one einsum, no sum of it. Values and gradients equal eager's and finite
    differences."""
    x, y = rng.standard_normal((32, 6, 5)), rng.standard_normal((32, 7, 5))
    w = rng.standard_normal((8, 6, 7))

    def f(x, y, w):
        p = wnp.einsum("cik,cjk->cij", wnp.tanh(x), y)
        return wnp.sum(wnp.sin(wnp.sum(p.reshape(8, 4, 6, 7), axis=1)) * w)

    forward = wg.jit(f).lower(x, y, w).as_text()
    made, summed = _summed_einsums(forward)
    assert len(made) == 1 and not summed and calls(forward, "add_reduce") == 1   # the loss's sum alone
    got, want, text, plain = staged(f, x, y, w, argnums=(0, 1))
    assert_trees_close(got, want)
    assert not _summed_einsums(text)[1]
    fd_check(f, (x, y, w), 0)
    fd_check(f, (x, y, w), 1)


def test_outer_products_summed_over_a_split_lane_axis_are_one_batched_contraction():
    """The lanes' outer products ``u[c] v[c]^T`` transposed, the lane axis split into (k, j) and summed
    over j (seed 000 written as a matrix-vector product per (j, k): b's cotangent) are the einsum
    'kjn,kjw->kwn' of the operands split alike, not a (64, 16, 32) product and a sum."""
    u, v = rng.standard_normal((64, 16)), rng.standard_normal((64, 32))
    w = rng.standard_normal((16, 32, 16))

    def f(u, v, w):
        p = wnp.tanh(u)[:, :, None] * v[:, None, :]
        return wnp.sum(wnp.sin(wnp.sum(wnp.transpose(p, (0, 2, 1)).reshape(16, 4, 32, 16), axis=1)) * w)

    forward = wg.jit(f).lower(u, v, w).as_text()
    made, summed = _summed_einsums(forward)
    assert len(made) == 1 and not summed and calls(forward, "multiply") == 1   # the loss's weights alone
    got, want, text, _ = staged(f, u, v, w, argnums=(0, 1))
    assert_trees_close(got, want)
    fd_check(f, (u, v, w), 0)
    fd_check(f, (u, v, w), 1)


def test_a_sum_through_a_reshape_that_mixes_axes_or_over_a_diagonal_stays_a_sum():
    """A reshape that mixes axes ((6, 32, 40) read as (4, 48, 40): no axis of 4 in 6) is no split:
    the product and its sum stay. An einsum whose input repeats an index (a diagonal) is left to its
    sum. Values and gradients equal eager's and finite differences."""
    u, v = rng.standard_normal((6, 32)), rng.standard_normal((6, 40))
    w = rng.standard_normal((48, 40))

    def mixed(u, v, w):
        p = wnp.tanh(u)[:, :, None] * v[:, None, :]
        return wnp.sum(wnp.sin(wnp.sum(p.reshape(4, 48, 40), axis=0)) * w)

    forward = wg.jit(mixed).lower(u, v, w).as_text()
    assert einsums(forward) == 0 and calls(forward, "add_reduce") == 2
    got, want, _, _ = staged(mixed, u, v, w, argnums=(0, 1))
    assert_trees_close(got, want)
    fd_check(mixed, (u, v, w), 0)

    x, y = rng.standard_normal((32, 6, 6)), rng.standard_normal((32, 5))
    z = rng.standard_normal((6, 5))

    def diagonal(x, y, z):
        return wnp.sum(wnp.sin(wnp.sum(wnp.einsum("cii,cj->cij", wnp.tanh(x), y), axis=0)) * z)

    made, summed = _summed_einsums(wg.jit(diagonal).lower(x, y, z).as_text())
    assert len(made) == 1 and summed
    got, want, _, _ = staged(diagonal, x, y, z, argnums=(0, 1))
    assert_trees_close(got, want)
    fd_check(diagonal, (x, y, z), 0)


def test_a_contraction_of_rows_gathered_repeatedly_reads_the_rows_once():
    """Seed 000 written as one matrix-vector product per (j, k) reads batch k's matrix ``b[:, :, k].T``
    for every column j: the lanes (k, j) gather each matrix R times. The contractions read the
    matrices themselves, the lane axis split into (k, j): no gather of them. Values and gradients
    equal eager's, the hand-written gradient's and finite differences."""
    n, width, r, b = 16, 32, 4, 8
    a, bb = rng.random((width, r, b)), rng.random((width, n, b))
    wts = rng.standard_normal((n, r, b))
    f = workloads.w1_loop_forms_code(wnp, wg.Buffer, at=wg.at)["matrix-vector per (j,k)"]
    got, want, text, plain = staged(f, a, bb, wts, argnums=(0, 1))
    assert_trees_close(got, want)
    assert_trees_close(got, workloads.w1_hand_einsum(a, bb, wts))

    def contracted_gathers(text):   # contractions reading a gather of rows by a constant index array
        gathers = re.findall(r"(v\d+) = v\d+\[c\d+,\]", text)
        return [line for line in text.splitlines() if re.search(r"= (np_)?(einsum|matmul)\(", line)
                and any(re.search(rf"\b{g}\b", line.split("#")[0].split("=", 1)[1]) for g in gathers)]
    assert contracted_gathers(plain) and not contracted_gathers(text)
    fd_check(f, (a, bb, wts), 0)
    fd_check(f, (a, bb, wts), 1)


@pytest.mark.parametrize("repeat", ["each row j times", "the whole base j times", "a permutation"])
def test_an_einsum_of_repeated_rows_splits_the_lane_axis(repeat):
    """``einsum('cab,cb->ca', x[idx], y)`` with ``idx`` repeating rows of ``x`` along a (k, j) grid
    of lanes reads ``x`` itself: no gather into the contraction. An index that repeats nothing (a
    permutation) keeps its gather. Values and gradients equal eager's and finite differences."""
    idx = {"each row j times": np.repeat(np.arange(8), 3), "the whole base j times": np.tile(np.arange(8), 3),
           "a permutation": np.random.default_rng(3).permutation(24)}[repeat]
    x = rng.standard_normal((8 if repeat != "a permutation" else 24, 16, 32))
    y = rng.standard_normal((24, 32))

    def f(x, y):
        return wnp.sum(wnp.sin(wnp.einsum("cab,cb->ca", wnp.tanh(x)[idx], y)))

    got, want, text, _ = staged(f, x, y, argnums=(0, 1))
    assert_trees_close(got, want)
    assert bool(re.search(r"= v\d+\[c\d+,?\]", text)) == (repeat == "a permutation"), text
    fd_check(f, (x, y), 0)
    fd_check(f, (x, y), 1)


def test_a_transpose_read_by_matrix_products_batched_over_its_unit_stride_axis_is_copied_once():
    """``tanh(x).T`` read by two batched matrix products (the forward's and y's cotangent) whose batch
    index is its unit-stride axis is copied once in C order, and both read the copy (each item's
    matrix then has a unit stride, as BLAS needs). One such product alone (the forward by itself),
    or a transpose whose unit-stride axis is no batch, keeps the view. Values and gradients equal
    eager's and finite differences."""
    x, y = rng.standard_normal((32, 16, 16)), rng.standard_normal((16, 32, 8))
    w = rng.standard_normal((16, 16, 8))

    def f(x, y, w):
        return wnp.sum(wnp.sin(wnp.einsum("knw,kwj->knj", wnp.transpose(wnp.tanh(x)), y)) * w)

    got, want, text, _ = staged(f, x, y, w, argnums=(0, 1))
    assert_trees_close(got, want)
    (copy,) = re.findall(r"(v\d+) = ascontiguousarray\(", text)
    readers = [line for line in text.splitlines() if re.search(r"= einsum\(", line) and re.search(rf"\b{copy}\b", line)]
    assert len(readers) == 2, text
    assert calls(wg.jit(f).lower(x, y, w).as_text(), "ascontiguousarray") == 0
    fd_check(f, (x, y, w), 0)
    fd_check(f, (x, y, w), 1)

    def other_axis(x, y, w):   # the batch is x's first axis, not its unit-stride one
        return wnp.sum(wnp.sin(wnp.einsum("knw,kwj->knj", wnp.transpose(wnp.tanh(x), (0, 2, 1)), y[:, :16])) * w)

    x = rng.standard_normal((16, 16, 16))
    got, want, text, _ = staged(other_axis, x, y, w, argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(text, "ascontiguousarray") == 0


def test_no_copy_for_a_batched_product_whose_other_operand_is_also_a_transpose_past_the_matmul_bound():
    """Past the einsum primitive's matmul bound (64 items) a product goes to ``np.matmul`` only when
    both operands lie as BLAS takes them: with the other operand a transpose too (W1 16x under vmap,
    ``b.T`` against ``a.T``, 256 items) a copy of one would only make einsum's loop run on mixed
    layouts, so none is made."""
    def f(a, b, w):
        return wnp.sum(wnp.sin(wnp.einsum("bda,bca->bcd", wnp.transpose(a), wnp.transpose(wnp.tanh(b)))) * w)

    a, b = rng.standard_normal((8, 6, 70)), rng.standard_normal((8, 3, 70))
    w = rng.standard_normal((70, 3, 6))
    got, want, text, _ = staged(f, a, b, w, argnums=(0, 1))
    assert_trees_close(got, want)
    assert calls(text, "ascontiguousarray") == 0, text
    fd_check(f, (a, b, w), 1)

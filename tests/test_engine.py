"""The engine's promises (docs/architecture.md, sections 1 to 3).

* The backward pass is a loop, not a recursion: a million-entry tape is fine.
* Absent means zero: an entry that receives no cotangent is skipped, its rule never runs; inputs
  that receive nothing get zeros of their own shape and dtype.
* Every contribution to an entry is added up, and the caller gets gradients that are theirs:
  writable arrays that alias neither each other nor anything the caller passed in.
* After the backward pass nothing of the tape stays alive; during it, entries are dropped as
  they are used.
* A tape entry keeps only what its rules read (``exp`` its output, ``sin`` its input).
* All reads of one array through indexing land in one buffer: the backward pass allocates in
  proportion to what was read, not to (number of reads) x (array size).
"""
from __future__ import annotations

import collections
import sys
import tracemalloc
import weakref

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.core.trace import Primitive
from wengert.primitives import elementwise as E
from wengert.primitives import shape as S


@pytest.fixture
def rule_calls(monkeypatch):
    """``rule_calls(prim, ...)`` wraps the VJP rules of ``prim``s to count their calls by name."""
    counts = collections.Counter()

    def watch(*prims):
        for prim in prims:
            def wrap(rule, name=prim.name):
                def counted(*args, **params):
                    counts[name] += 1
                    return rule(*args, **params)
                return counted
            monkeypatch.setattr(prim, "vjp", tuple(None if r is None else wrap(r) for r in prim.vjp))
        return counts

    return watch


# --- a loop, not a recursion -----------------------------------------------------------------------
def test_a_million_entry_tape_is_differentiated_without_recursion():
    # A primitive with plain-Python arithmetic keeps this about the engine: the cost is the tape.
    scale = Primitive("scale", lambda x: x * 1.0000001, vjp=(lambda g, ans, x: g * 1.0000001,))
    n = 10 ** 6

    def chain(x):
        for _ in range(n):
            x = scale(x)
        return x

    assert n > 100 * sys.getrecursionlimit()
    value, g = wg.value_and_grad(chain)(1.0)
    assert value == pytest.approx(1.0000001 ** n, rel=1e-9)
    assert g == pytest.approx(1.0000001 ** n, rel=1e-9)


def test_a_long_chain_of_numpy_operations_and_its_second_derivative():
    def chain(x):
        for _ in range(1200):  # deeper than the recursion limit
            x = wnp.sin(x) * 0.5 + x * 0.5
        return wnp.sum(x)

    x = np.array([0.1, 0.2])
    g = wg.grad(chain)(x)
    eps = 1e-6
    fd = [(chain(x + eps * e) - chain(x - eps * e)) / (2 * eps) for e in np.eye(2)]
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    # the inner backward pass is itself recorded on the outer tape: thousands more entries
    h = wg.grad(lambda x: wg.grad(chain)(x)[0])(x)
    assert np.all(np.isfinite(h))


# --- absent means zero ---------------------------------------------------------------------------------
def test_a_branch_whose_output_is_unused_is_never_called_back(rule_calls):
    calls = rule_calls(E.cos, E.sin, E.exp)

    def f(x):
        e = wnp.exp(x)
        unused = wnp.cos(e)  # noqa: F841  (computed, never used)
        return wnp.sum(wnp.sin(e))

    x = np.linspace(0, 1, 4)
    np.testing.assert_allclose(wg.grad(f)(x), np.cos(np.exp(x)) * np.exp(x))
    assert calls == {"sin": 1, "exp": 1}


def test_a_value_only_read_for_control_flow_or_indices_sends_nothing_back(rule_calls):
    calls = rule_calls(E.cos, E.tanh)

    def f(x):
        c = wnp.cos(x)
        i = int(wnp.argmax(c))  # no derivative flows through argmax
        if float(wg.stop_gradient(c[0])) > 0:  # a number for control flow, on purpose
            return wnp.tanh(x[i])
        return x[i]

    x = np.array([0.3, -0.1, 2.0])
    g = wg.grad(f)(x)
    np.testing.assert_allclose(g, [0.0, 1 - np.tanh(-0.1) ** 2, 0.0])
    assert calls == {"tanh": 1}


def test_a_rule_that_returns_none_stops_the_pass_there(rule_calls):
    calls = rule_calls(E.cos)
    block = Primitive("block", lambda x: x, vjp=(lambda g, ans, x: None,))
    g = wg.grad(lambda x: wnp.sum(block(wnp.cos(x))) + x[0])(np.ones(3))
    np.testing.assert_array_equal(g, [1.0, 0.0, 0.0])
    assert calls["cos"] == 0


def test_inputs_that_receive_nothing_get_zeros_of_their_shape_and_dtype():
    x = np.ones(3)
    y = np.ones((2, 2), np.float32)
    z = np.ones((), np.float16)
    gx, gy, gz, gw = wg.grad(lambda x, y, z, w: wnp.sum(x ** 2), argnums=(0, 1, 2, 3))(x, y, z, 2.5)
    np.testing.assert_allclose(gx, 2 * x)
    for g, like in ((gy, y), (gz, z)):
        assert type(g) is np.ndarray and g.shape == like.shape and g.dtype == like.dtype
        assert not g.any()
    assert gw == 0.0 and isinstance(gw, float)
    # the zeros of an array that received nothing are one broadcast zero, no memory written;
    # they add to parameters, and writing into them is refused rather than aliasing anything
    assert gy.strides == (0, 0) and not gy.flags.writeable
    updated = y - 0.1 * gy
    np.testing.assert_array_equal(updated, y)
    with pytest.raises(ValueError, match="read-only"):
        gy += 1


# --- accumulation ---------------------------------------------------------------------------------------
def test_contributions_from_every_use_are_added_up():
    x = np.random.default_rng(0).standard_normal(5)
    g = wg.grad(lambda x: wnp.sum(x * x + wnp.sin(x) + x) + wnp.sum(x) + x[1] * 3)(x)
    expected = 2 * x + np.cos(x) + 2
    expected[1] += 3
    np.testing.assert_allclose(g, expected)


def test_a_cotangent_shared_by_two_inputs_is_not_written_into():
    # x + y hands the same cotangent to x and to y; x's later contributions must not land in y's.
    x, y = np.ones(3), np.ones(3)
    gx, gy = wg.grad(lambda x, y: wnp.sum(x * 3) + wnp.sum((x + y) * 2), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, [5.0, 5.0, 5.0])
    np.testing.assert_array_equal(gy, [2.0, 2.0, 2.0])
    gx, gy = wg.grad(lambda x, y: x[0] + wnp.sum(x + y) + x[1:].sum(), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(gy, [1.0, 1.0, 1.0])


def test_a_rules_fresh_cotangent_is_added_into_in_place_and_nothing_else_is():
    """A second contribution lands in place in a cotangent that only the pass holds (einsum's fresh
    result, then a column read's share); one the caller, the tape or another entry also holds is
    copied first. Checked against finite differences, and the caller's cotangent stays as it was."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((3, 4, 5)), rng.standard_normal((4, 5))

    def f(x):
        y = x * 2.0
        z = wnp.einsum("ob,otb->tb", y[:, 0, :], y)   # y's cotangent: einsum's, then y[:, 0, :]'s
        return wnp.sum(z * w) + wnp.sum(wnp.tanh(z) * z)

    wg.check_grads(f, (x,), order=2, modes=("rev", "fwd"))
    ct = np.ones((3, 4))
    _, vjp_fn = wg.vjp(lambda x: (lambda y: y + y[0])(x + 0.0), x[:, :, 0])   # ct itself reaches y,
    (g,) = vjp_fn(ct)                                                     # then y[0]'s share
    np.testing.assert_array_equal(ct, np.ones((3, 4)))
    np.testing.assert_array_equal(g, [[4.0] * 4, [1.0] * 4, [1.0] * 4])


def test_repeated_and_masked_index_reads_add_up():
    x = np.arange(5.0)
    g = wg.grad(lambda x: wnp.sum(x[[0, 0, 2]]) + x[0] + wnp.sum(x[x > 2.5] * 2) + wnp.sum(x[1::2]))(x)
    np.testing.assert_array_equal(g, [3.0, 1.0, 1.0, 3.0, 2.0])
    g = wg.grad(lambda x: wnp.sum(x[:, [1, 1]]) + wnp.sum(x ** 2) + x[0, 1])(np.ones((2, 3)))
    np.testing.assert_array_equal(g, [[2.0, 5.0, 2.0], [2.0, 4.0, 2.0]])


def test_returned_gradients_are_writable_and_alias_nothing():
    x, y = np.ones(3), np.ones(3)
    gx, gy = wg.grad(lambda x, y: wnp.sum(x + y), argnums=(0, 1))(x, y)
    assert gx.flags.writeable and gy.flags.writeable
    assert not np.shares_memory(gx, gy)
    gx += 10
    np.testing.assert_array_equal(gy, np.ones(3))
    np.testing.assert_array_equal(x, np.ones(3))

    g = wg.grad(lambda p: wnp.sum(p["a"] + p["b"].reshape(3) + p["a"].T))({"a": x, "b": np.ones((3, 1))})
    assert not np.shares_memory(g["a"], g["b"])
    assert g["a"].flags.writeable and g["b"].flags.writeable

    assert wg.grad(lambda x: wnp.sum(x))(x).flags.writeable  # not the read-only broadcast of sum's rule


def test_a_broadcast_scalar_cotangent_folds_into_products_without_aliasing():
    """A full sum of a 3-D array hands its cotangent on as a read-only broadcast of one value; the
    product's rule takes it as that scalar (for 1, the other factor itself, read-only). Gradients
    match finite differences, are writable, and alias no input, whatever the dtypes."""
    rng = np.random.default_rng(0)
    x, y, w = (rng.standard_normal((3, 2, 4)) for _ in range(3))
    y0 = y.copy()
    gx, gy = wg.grad(lambda x, y: wnp.sum(x * y), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, y)
    np.testing.assert_array_equal(gy, x)
    assert gx.flags.writeable and not np.shares_memory(gx, y) and not np.shares_memory(gy, x)
    gx += 1
    np.testing.assert_array_equal(y, y0)

    def f(x, y):
        return wnp.sum(w * wnp.tanh(x * y)) + 2.0 * wnp.sum(wnp.sin(x) * w) + wnp.sum(x * 3.0)

    wg.check_grads(f, (x, y), order=2, modes=("rev", "fwd"))
    gx = wg.grad(f)(x, y)
    assert not np.shares_memory(gx, w)
    np.testing.assert_allclose(gx, w * (1 - np.tanh(x * y) ** 2) * y + 2 * np.cos(x) * w + 3.0)
    for xd, wd in ((np.float32, np.float64), (np.float64, np.float32), (np.float32, np.float16)):
        g = wg.grad(lambda x: wnp.sum(x * w.astype(wd)))(x.astype(xd))
        assert g.dtype == xd and g.flags.writeable
        np.testing.assert_allclose(g, w.astype(wd), rtol=1e-3)


def test_vjp_results_alias_neither_the_cotangent_nor_earlier_results():
    ct = np.ones(3)
    out, vjp_fn = wg.vjp(lambda x: x + 0.0, np.zeros(3))
    (g1,) = vjp_fn(ct)
    assert not np.shares_memory(g1, ct)
    g1 *= 5
    np.testing.assert_array_equal(ct, np.ones(3))
    (g2,) = vjp_fn(ct)
    np.testing.assert_array_equal(g2, np.ones(3))
    out, vjp_fn = wg.vjp(lambda x: x, np.zeros(3))
    assert not np.shares_memory(vjp_fn(ct)[0], ct)


def test_vjp_of_many_outputs_checks_each_cotangent_and_hands_back_no_view_of_them():
    """vjp_fn's per-leaf path: arrays for array and NumPy-scalar outputs, a Python float for a 0-d
    output, a wrong shape named; a gradient that is a view of a cotangent's memory is copied."""
    x = np.arange(3.0)
    outs, vjp_fn = wg.vjp(lambda x: [x.reshape(3, 1), wnp.sin(x[0]), x * 2.0], x)
    assert isinstance(outs[1], np.generic)
    big = np.ones((3, 4))
    (g,) = vjp_fn([big[:, :1], np.array(2.0), np.ones(3)])
    np.testing.assert_allclose(g, [1 + 2 * np.cos(0.0) + 2, 3, 3])
    (g,) = vjp_fn([big[:, 1:2], 0.0, np.zeros(3)])   # only the reshape: its rule gives a view of big
    np.testing.assert_array_equal(g, np.ones(3))
    assert not np.shares_memory(g, big) and g.flags.writeable
    with pytest.raises(ValueError, match=r"cotangent of shape \(2,\) for an output of shape \(3,\)"):
        vjp_fn([big[:, :1], 1.0, np.ones(2)])
    with pytest.raises(ValueError, match=r"cotangent of shape \(3,\) for an output of shape \(\)"):
        vjp_fn([big[:, :1], np.ones(3), np.ones(3)])
    s = np.float32(0.5)   # a 0-d input: every contribution is a NumPy scalar
    _, vjp_fn = wg.vjp(lambda s: [wnp.cos(s) for _ in range(5)], s)
    (gs,) = vjp_fn([np.float32(1.0)] * 5)
    assert type(gs) is np.float32 and np.isclose(gs, -5 * np.sin(0.5))


def test_tree_unflatten_refuses_a_wrong_number_of_leaves():
    from wengert import tree
    _, d = tree.flatten([np.ones(2), (1.0, 2.0)])
    assert tree.unflatten(d, [1, 2, 3]) == [1, (2, 3)]
    with pytest.raises(ValueError, match="fewer leaves"):
        tree.unflatten(d, [1, 2])
    with pytest.raises(ValueError, match="more leaves"):
        tree.unflatten(d, [1, 2, 3, 4])


# --- lifetime of the tape -----------------------------------------------------------------------------
def test_after_backward_nothing_of_the_tape_stays_alive():
    refs = {}

    def f(x):
        refs["trace"] = weakref.ref(x._trace)
        a = wnp.sin(x)
        b = wnp.exp(a)
        refs["sin output"] = weakref.ref(a.value)
        refs["exp output"] = weakref.ref(b.value)
        return wnp.sum(b * 3)

    wg.grad(f)(np.linspace(0, 1, 100))
    # no gc.collect(): the tape holds no reference cycles, so reference counting frees it
    assert {name: ref() for name, ref in refs.items()} == dict.fromkeys(refs)


def test_vjp_keeps_the_tape_exactly_as_long_as_vjp_fn_lives():
    refs = {}

    def f(x):
        refs["trace"] = weakref.ref(x._trace)
        y = wnp.exp(x)
        refs["exp output"] = weakref.ref(y.value)
        return y * 2.0

    out, vjp_fn = wg.vjp(f, np.ones(3))
    vjp_fn(np.ones(3))
    assert refs["trace"]() is not None and refs["exp output"]() is not None
    del vjp_fn
    assert refs["trace"]() is None and refs["exp output"]() is None


def test_an_exception_in_the_function_leaves_nothing_alive_and_transforms_still_work():
    refs = {}

    def broken(x):
        refs["trace"] = weakref.ref(x._trace)
        y = wnp.exp(x)
        refs["exp output"] = weakref.ref(y.value)
        raise ValueError("boom")

    raised = False
    try:  # not pytest.raises: its record of the traceback would keep the frames alive
        wg.grad(broken)(np.ones(3))
    except ValueError:
        raised = True
    assert raised
    assert refs["trace"]() is None and refs["exp output"]() is None
    assert wg.grad(lambda x: x * wg.grad(lambda y: x + y)(1.0))(2.0) == 1.0


def test_entries_are_released_during_the_backward_pass(monkeypatch):
    refs = {}
    seen = {}
    sin_rule = E.sin.vjp[0]

    def watching_sin_rule(g, ans, x):
        seen["exp output alive while sin's rule runs"] = refs["exp output"]() is not None
        return sin_rule(g, ans, x)

    monkeypatch.setattr(E.sin, "vjp", (watching_sin_rule,))

    def f(x):
        b = wnp.exp(wnp.sin(x))  # exp's entry keeps its output b
        refs["exp output"] = weakref.ref(b.value)
        return wnp.sum(wnp.tanh(b))  # tanh's entry keeps its own output, not b

    wg.grad(f)(np.linspace(0, 1, 100))
    assert seen == {"exp output alive while sin's rule runs": False}


# --- what a tape entry keeps ---------------------------------------------------------------------------
def test_an_entry_keeps_only_what_its_rules_read():
    alive = {}

    def f(x):
        a = wnp.sin(x)            # sin's rule reads x, not its output
        b = wnp.exp(a)            # exp's rule reads its output, not its input a
        ref_a = weakref.ref(a.value)
        del a
        alive["input of exp, output of sin"] = ref_a() is not None
        c = wnp.exp(x * 2.0)
        d = wnp.sin(c)            # sin keeps its input c
        ref_c = weakref.ref(c.value)
        del c
        alive["input of sin"] = ref_c() is not None
        return wnp.sum(b) + wnp.sum(d)

    x = np.linspace(0, 1, 10)
    with wg.config.override(rewrites=False):  # with rewrites on, exp also keeps its input (docs/rewrites.md)
        g = wg.grad(f)(x)
    np.testing.assert_allclose(g, np.exp(np.sin(x)) * np.cos(x) + np.cos(np.exp(2 * x)) * np.exp(2 * x) * 2)
    assert alive == {"input of exp, output of sin": False, "input of sin": True}


# --- reads through indexing share one buffer ------------------------------------------------------------
def _backward_bytes_for_column_reads(monkeypatch, n_cols, n_rows=100):
    """Bytes the backward pass allocates for ``n_cols`` reads ``x[:, j]`` of an (n_rows, n_cols) array.

    Measured as the sum, over the intervals between successive calls of getitem's rule (each
    interval holds one read's accumulation), of the peak of traced memory above its start.
    """
    getitem_rule = S.getitem.vjp[0]
    steps = []
    start = []

    def measuring_rule(g, ans, x, index):
        if not tracemalloc.is_tracing():  # first call: the forward pass is over, start measuring
            tracemalloc.start()
        else:
            steps.append(tracemalloc.get_traced_memory()[1] - start[0])
            tracemalloc.reset_peak()
        start[:] = [tracemalloc.get_traced_memory()[0]]
        return getitem_rule(g, ans, x, index)

    monkeypatch.setattr(S.getitem, "vjp", (measuring_rule,))
    x = np.ones((n_rows, n_cols))
    w = np.linspace(0, 1, n_cols)

    def f(x):
        total = 0.0
        for j in range(n_cols):
            total = total + wnp.sum(x[:, j]) * w[j]
        return total

    try:
        g = wg.grad(f)(x)
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(g, np.broadcast_to(w, x.shape))
    assert len(steps) == n_cols - 1
    return sum(steps), x.nbytes


def test_many_column_reads_accumulate_into_one_buffer(monkeypatch):
    # One dense cotangent per read would allocate n_cols * x.nbytes (for 1000 columns, 1000 times
    # 800 kB): quadratic in the number of columns read. One buffer for all reads allocates x.nbytes
    # once and about a column per read: linear.
    total, nbytes = _backward_bytes_for_column_reads(monkeypatch, n_cols=1000)
    assert total < 3 * nbytes
    small_total, _ = _backward_bytes_for_column_reads(monkeypatch, n_cols=100)
    assert total < 20 * small_total  # 10 times the reads (and columns): about 10 times the bytes


def test_a_rule_not_checked_on_batched_values_never_sees_them():
    """Inside vmap, a primitive recorded on unbatched values can still receive a batched cotangent
    (its output met batched values later); unless its rule is flagged batched_vjp, vmap runs the
    function once per example instead of trusting the rule with them."""
    import warnings
    seen = []

    def rule(g, ans, x):
        seen.append(type(g).__name__)
        return 2.0 * g * x

    square = Primitive("test.square", lambda x: x * x, vjp=(rule,))
    w, xs = np.array([0.5, -1.0, 2.0]), np.random.default_rng(3).random((4, 3))

    def per_example(x):
        return wg.grad(lambda v: wnp.sum(square(v) * x))(w) * 1.0

    with pytest.warns(UserWarning, match="not checked on vmap's batched values"):
        out = wg.vmap(per_example)(xs)
    np.testing.assert_allclose(out, 2 * w * xs)
    assert "Tracer" not in seen
    square.batched_vjp = True
    seen.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(wg.vmap(per_example)(xs), 2 * w * xs)
    assert seen == ["Tracer"]


def test_overlapping_reads_in_a_loop_sum_their_cotangents():
    """Reads x[i, j], x[:, j] and x[1:3, j] of one array, overlapping and repeated, each add their
    cotangent at their place (the backward pass does this without calling getitem's rule)."""
    def f(x):
        total = 0.0
        for j in range(x.shape[1]):
            col = x[:, j]
            total = total + wnp.sum(col * col) + x[1:3, j] @ x[0:2, j] + x[0, j] * x[2, j] + x[-1, -1 - j]
        return total
    x = np.random.default_rng(5).standard_normal((4, 3))
    wg.check_grads(f, (x,))
    wg.check_grads(lambda x: f(x) * (1 + 2j), (x,))   # complex cotangents into the real x's buffer


# --- temporaries: an operator's result written into a temporary operand (trace.reusable_operand) ---
def _reused(monkeypatch):
    """Record, per operator call on a temporary, whether its result went into the operand's array."""
    import wengert.numpy._methods as methods
    from wengert.core import trace
    seen = []

    def spy(prim, t, other, position):
        out = trace.reusable_operand(prim, t, other, position)
        seen.append((prim.name, out is not None))
        return out
    monkeypatch.setattr(methods, "reusable_operand", spy)
    return seen


BIG = np.random.default_rng(7).standard_normal((200, 200))   # 320 KB: past trace.ELIDE_BYTES
W_BIG = np.random.default_rng(8).standard_normal((200, 200))


def test_a_temporary_operand_takes_the_result(monkeypatch):
    seen = _reused(monkeypatch)
    value, g = wg.value_and_grad(lambda x: wnp.sum((1 - x * 2 + 1) * W_BIG))(BIG)
    assert ("add", True) in seen and ("multiply", True) in seen, seen
    np.testing.assert_allclose(value, np.sum((2 - BIG * 2) * W_BIG), rtol=1e-12)
    np.testing.assert_allclose(g, -2 * W_BIG, rtol=1e-12)


def test_named_and_listed_operands_are_never_written(monkeypatch):
    seen = _reused(monkeypatch)

    def f(x):
        y = x * 2
        z = y + 1                 # y is named: z is a new array
        ys = [x * 3, x * 4]
        s = sum(ys)               # builtin sum: its running total is a temporary, the list's items are not
        np.testing.assert_array_equal(y.value, BIG * 2)
        np.testing.assert_array_equal(ys[0].value, BIG * 3)
        np.testing.assert_array_equal(ys[1].value, BIG * 4)
        return wnp.sum(z * y) + wnp.sum(s * W_BIG)
    value, g = wg.value_and_grad(f)(BIG)
    assert ("add", True) in seen, seen                           # (0 + ys[0]) + ys[1]
    np.testing.assert_allclose(value, np.sum((2 * BIG + 1) * 2 * BIG) + np.sum(7 * BIG * W_BIG), rtol=1e-12)
    np.testing.assert_allclose(g, 2 * (4 * BIG + 1) + 7 * W_BIG, rtol=1e-12)


def test_an_operand_the_rules_read_is_not_written(monkeypatch):
    """x * y of two traced temporaries keeps both for the other's rule: neither takes the result
    (the product, times a constant, then does: the entry keeps the constant)."""
    seen = _reused(monkeypatch)
    value, g = wg.value_and_grad(lambda x: wnp.sum((x + 1) * (x - 1) * W_BIG))(BIG)
    assert seen == [("multiply", False), ("multiply", True)], seen
    np.testing.assert_allclose(g, 2 * BIG * W_BIG, rtol=1e-12)
    wg.check_grads(lambda x: wnp.sum((x + 1) * (x - 1) * W_BIG), (BIG,), order=1)

"""wg.jit's vectorizing pass (transforms/_vectorize.py): per-column loops of every primitive family
become batched equations with the values and gradients of eager wengert; dependent iterations stay
sequential; Buffer overwrites and repeated indices keep their meaning; the equation count drops."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.primitives.shape import _zeros_view
from wengert.transforms import _vectorize

import test_jit
from test_numpy_grads import CASE_IDS

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import workloads  # noqa: E402

rng = np.random.default_rng(17)
N = 12  # loop trips: above the pass's smallest class


close = test_jit.assert_trees_close


def fd_check(f, args, argnum=0, eps=1e-6, samples=6):
    """Central differences of the jitted forward against the jitted gradient, at a few elements."""
    forward = wg.jit(f)
    grad = wg.jit(wg.grad(f, argnums=argnum))(*args)
    x = args[argnum]
    picks = np.random.default_rng(0).choice(x.size, size=min(samples, x.size), replace=False)
    for flat in picks:
        index = np.unravel_index(flat, x.shape)
        plus, minus = [a.copy() if k == argnum else a for k, a in enumerate(args)], \
                      [a.copy() if k == argnum else a for k, a in enumerate(args)]
        plus[argnum][index] += eps
        minus[argnum][index] -= eps
        numeric = (forward(*plus) - forward(*minus)) / (2 * eps)
        np.testing.assert_allclose(grad[index], numeric, rtol=1e-5, atol=1e-7)


def w1_inputs(n, w, r, b):
    """Seed 000's arguments at sizes N, W, R, B: a (W, R, B), b (W, N, B) and the weights (N, R, B)."""
    a, bb = rng.random((w, r, b)), rng.random((w, n, b))
    return a, bb, rng.normal(size=(n, r, b))


def vectorized_like_eager(f, *args, argnums=0, shrink=2):
    """jit(value_and_grad(f)) with the pass equals eager, and its program is ``shrink`` times smaller
    than the unvectorized one. Returns the Lowered."""
    eager = wg.value_and_grad(f, argnums=argnums)
    step = wg.jit(eager)
    close(step(*args), eager(*args))
    lowered = step.lower(*args)
    plain = wg.jit(eager, vectorize=False).lower(*args)
    stats = lowered.vectorized
    assert stats["before"] >= plain.eqns  # what the pass met (the in-place pass folds a few after it)
    assert lowered.eqns * shrink <= plain.eqns, (lowered.eqns, plain.eqns, stats)
    assert stats["classes"] >= 1 and stats["after"] < stats["before"]
    assert "vectorized x" in lowered.as_text()
    return lowered


# --- every primitive family, looped over columns ---------------------------------------------------
def test_elementwise_unary_and_binary():
    x, y = rng.normal(size=(5, N)), rng.normal(size=(5, N))

    def f(x, y):
        total = 0.0
        for i in range(N):
            u, v = x[:, i], y[:, i]
            total = total + wnp.sum(wnp.sin(u) * wnp.exp(v) - u ** 2 / (1.0 + v * v) + wnp.tanh(u - v))
        return total

    vectorized_like_eager(f, x, y, argnums=(0, 1))
    fd_check(f, (x, y), argnum=1)


def test_reductions_per_column():
    x = rng.normal(size=(6, N))

    def f(x):
        out = wg.Buffer.zeros((4, N))
        for i in range(N):
            c = x[:, i]
            out[0, i] = wnp.sum(c)
            out[1, i] = wnp.max(c)
            out[2, i] = wnp.mean(c * c)
            out[3, i] = wnp.prod(wnp.cos(c))
        return wnp.sum(out.freeze() * np.arange(4 * N).reshape(4, N))

    vectorized_like_eager(f, x)
    fd_check(f, (x,))


@pytest.mark.parametrize("form", ["linalg.norm", "abs(u) ** 2", "abs(u).max()"])
def test_rules_with_elementwise_constants_vectorize(form):
    """Backward rules that compute a mask or a sign in plain NumPy (norm's zero test, abs's sign)
    stage it as an elementwise constant: grouped like a ufunc, not left as one call per column."""
    x = rng.normal(size=(6, N))
    norm = {"linalg.norm": lambda u: wnp.linalg.norm(u),
            "abs(u) ** 2": lambda u: wnp.sqrt(wnp.sum(wnp.abs(u) ** 2)),
            "abs(u).max()": lambda u: wnp.abs(u).max()}[form]

    def f(x):
        out = wg.Buffer.zeros(N)
        for i in range(N):
            out[i] = norm(x[:, i])
        return wnp.sum(out.freeze() * np.arange(1.0, N + 1))

    lowered = vectorized_like_eager(f, x)
    text = lowered.as_text()
    per_column = [line for line in text.splitlines() if "_is_zero(" in line or "_sign(" in line]
    assert len(per_column) <= 2, per_column
    fd_check(f, (x,))


@pytest.mark.parametrize("spelling", ["@", "np.dot", "np.sum(u*v)", "np.inner", "matmul"])
def test_dot_products_in_every_spelling(spelling):
    a, b = rng.normal(size=(7, N)), rng.normal(size=(7, N))
    m = rng.normal(size=(3, 7))
    dot = {"matmul": lambda u, v: wnp.sum(m @ u * (m @ v))}.get(spelling) or workloads.dot_spelling(wnp, spelling)

    def f(a, b):
        return wnp.sum(wnp.stack([dot(a[:, i], b[:, i]) for i in range(N)]) ** 2)

    vectorized_like_eager(f, a, b, argnums=(0, 1))


@pytest.mark.parametrize("read", ["two ints", "rows", "strided", "permuted", "reversed"])
def test_indexing_reads(read):
    x = rng.normal(size=(4, 3 * N, 2))
    perm = np.random.default_rng(1).permutation(3 * N)
    pick = {"two ints": lambda x, i: x[:, i, i % 2], "rows": lambda x, i: x[0, i],
            "strided": lambda x, i: x[:, 2 * i, 1], "permuted": lambda x, i: x[:, int(perm[i]), 0],
            "reversed": lambda x, i: x[:, 3 * N - 1 - i, :]}[read]

    def f(x):
        return wnp.sum(wnp.stack([wnp.sum(wnp.exp(pick(x, i)) * (i + 1)) for i in range(N)]))

    lowered = vectorized_like_eager(f, x)
    assert lowered.as_text().count("= exp(") == 1  # one batched exp for the forward pass (reused backward)


def test_stack_and_concatenate_of_loop_results():
    x = rng.normal(size=(3, N))

    def f(x):
        cols = [wnp.tanh(x[:, i]) * (i + 1.0) for i in range(N)]
        stacked = wnp.stack(cols, axis=1)           # (3, N)
        joined = wnp.concatenate(cols)              # (3N,)
        return wnp.sum(stacked ** 2) + wnp.sum(wnp.sin(joined))

    vectorized_like_eager(f, x)
    fd_check(f, (x,))


def test_where_per_column():
    x = rng.normal(size=(5, N))

    def f(x):
        total = 0.0
        for i in range(N):
            c = x[:, i]
            total = total + wnp.sum(wnp.where(c > 0, c, 0.1 * c) ** 2)
        return total

    vectorized_like_eager(f, x)
    x2 = rng.normal(size=(5, N))  # the mask is recomputed for the new input
    step = wg.jit(wg.value_and_grad(f))
    step(x)
    close(step(x2), wg.value_and_grad(f)(x2))


# --- where the results go: Buffer, x.at[].set, in-place writes ------------------------------------
def test_buffer_writes_and_reads_after_writes():
    x = rng.normal(size=(4, N))

    def f(x):
        out = wg.Buffer.zeros((2, N))
        for i in range(N):
            out[0, i] = wnp.sum(x[:, i] ** 2)
        for i in range(N):
            out[1, i] = out[0, i] * 2.0 + wnp.sin(x[0, i])   # reads elements written above
        return wnp.sum(out.freeze() * np.arange(2 * N).reshape(2, N))

    vectorized_like_eager(f, x)
    fd_check(f, (x,))


def test_at_set_chain():
    x = rng.normal(size=(3, N))

    def f(x):
        out = wnp.zeros(N)
        for i in range(N):
            out = wg.at(out)[i].set(wnp.dot(x[:, i], x[:, i]))
        return wnp.sum(wnp.sin(out))

    vectorized_like_eager(f, x)
    fd_check(f, (x,))


def test_in_place_writes_into_a_traced_array():
    x = rng.normal(size=(3, N))

    def f(x):
        out = workloads.traced_zeros(wnp, (N,), x)
        for i in range(N):
            out[i] = wnp.sum(wnp.exp(x[:, i]))
        return wnp.sum(out ** 2)

    jitted = wg.jit(f)
    close(jitted(x), f(x))
    lowered = jitted.lower(x)
    assert lowered.eqns * 2 <= lowered.vectorized["before"]
    if _grad_of_in_place_is_staged(f, x):  # jit(grad) of x[i] = v: docs/jit.md, "what it cannot do"
        vectorized_like_eager(f, x)


def _grad_of_in_place_is_staged(f, x):
    try:
        wg.jit(wg.grad(f))(x)
    except wg.InPlaceWriteError:
        return False
    return True


def test_overwritten_buffer_elements_pass_no_gradient():
    x = rng.normal(size=(3, 4 * N))

    def f(x):
        out = wg.Buffer.zeros((N,))
        for i in range(4 * N):  # element i % N written four times: the last write wins
            out[i % N] = wnp.sum(wnp.sin(x[:, i]))
        return wnp.sum(out.freeze() * np.arange(1.0, N + 1))

    vectorized_like_eager(f, x)
    g = wg.jit(wg.grad(f))(x)
    assert not g[:, :3 * N].any() and g[:, 3 * N:].all()
    fd_check(f, (x,))


def test_repeated_reads_accumulate_their_cotangents():
    x = rng.normal(size=(4, 3))

    def f(x):
        return wnp.sum(wnp.stack([wnp.sum(wnp.cos(x[:, i % 3]) * (i + 1.0)) for i in range(3 * N)]))

    vectorized_like_eager(f, x)
    fd_check(f, (x,))


# --- what stays sequential --------------------------------------------------------------------------
def test_a_recurrence_stays_sequential_and_correct():
    x = rng.normal(size=(3, N))
    w = rng.normal(size=3)

    def f(x, w):
        h = wnp.zeros(3)
        for i in range(N):
            h = wnp.tanh(w * h + x[:, i])
        return wnp.sum(h ** 2)

    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(x, w), wg.value_and_grad(f, argnums=(0, 1))(x, w))
    text = step.lower(x, w).as_text()
    assert text.count("= tanh(") == N  # one per step: each depends on the one before
    fd_check(f, (x, w), argnum=1)


def test_a_running_sum_is_a_reduction():
    x = rng.normal(size=(3, N))

    def f(x):
        s = 0.0
        for i in range(N):
            s = s + wnp.sum(wnp.exp(x[:, i]))
        return s

    lowered = vectorized_like_eager(f, x)
    assert lowered.as_text().count("= exp(") == 1


def test_nested_loops_seed_000_every_spelling():
    n, w, r, b = 3, 4, 2, 8
    a, bb, wts = w1_inputs(n, w, r, b)
    for name, f in workloads.w1_spellings_code(wnp, wg.Buffer).items():
        if "in-place" in name:
            continue
        vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)


def _seed_001_inputs(seed, T=9, B=8, n_in=5, n_out=4, D=6):
    """Seed 001's arguments, small: Wm, bm, the steps' inputs xs, Hs and the weights."""
    r = np.random.default_rng(seed)
    Wm, bm = r.normal(size=(n_out, n_in)), r.normal(size=n_out)
    xs = [r.random((n_in, B)) for _ in range(T)]
    return Wm, bm, xs, r.random((D, T, B)), r.normal(size=(D, B))


def test_seed_001_colwise_against_the_hand_written_gradient():
    Wm, bm, xs, Hs, wts = _seed_001_inputs(2)
    value, grads = workloads.w2_hand(Wm, bm, np.concatenate(xs, axis=1), Hs, wts)
    for name, f in workloads.w2_spellings_code(wnp, wg.Buffer).items():
        if "in-place" in name:
            continue
        step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
        got_value, got_grads = step(Wm, bm, xs, Hs, wts)
        close((got_value, got_grads), (value, grads), rtol=1e-9)
        assert step.lower(Wm, bm, xs, Hs, wts).eqns * 5 <= step.lower(Wm, bm, xs, Hs, wts).vectorized["before"]


@pytest.mark.parametrize("form", ["lists+np.array", "einsum per column"])
def test_a_column_read_twice_in_one_trip_only_still_scatters_on_a_grid(form):
    # seed 001 with ys[0][:, b] read in every step: at t = 0 the dot product reads one column twice,
    # so that trip adds two cotangents at each position of ys[0]; the chain is two grid scatters
    # (the first add of each run, then the second), not a sorted scatter-add of every member
    Wm, bm, xs, Hs, wts = _seed_001_inputs(3)
    f = workloads.w2_loop_forms_code(wnp, wg.Buffer, at=wg.at)[form]
    value, grads = workloads.w2_hand(Wm, bm, np.concatenate(xs, axis=1), Hs, wts)
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(Wm, bm, xs, Hs, wts), (value, grads), rtol=1e-9)
    lowered = vectorized_like_eager(f, Wm, bm, xs, Hs, wts, argnums=(0, 1), shrink=5)
    assert _count(lowered, "scatter_add") == 0
    fd_check(lambda Wm: f(Wm, bm, xs, Hs, wts), (Wm,))


def _seed_001_inline(b_outer):
    """Seed 001's loop with the columns read where they are used, the batch loop outside or inside."""
    def inline(Wm, bm, xs, Hs, wts):
        ys = [Wm @ x + bm[:, None] for x in xs]
        T, B = len(ys), ys[0].shape[1]
        z = wg.Buffer.zeros((T, B), Wm.dtype)
        for t, b in ([(t, b) for b in range(B) for t in range(T)] if b_outer else
                     [(t, b) for t in range(T) for b in range(B)]):
            z[t, b] = wnp.dot(ys[0][:, b], ys[t][:, b])
        alpha = workloads.softmax_code(wnp)(z.freeze(), axis=0)
        return wnp.sum(wnp.sum(alpha[None, :, :] * Hs, axis=1) * wts)
    return inline


def test_a_loop_run_out_of_memory_order_gives_the_program_of_the_loop_in_order():
    # for b: for t: z[t, b] = np.dot(ys[0][:, b], ys[t][:, b]) visits the steps' (t, b) columns b
    # first: its lanes are taken in memory order, (t, b), so the column reads are one copy of the
    # steps' array (no gather, no transposing copy of every step's output) and the scatter into z
    # a reshape: the program is the one the loop with t outside gives, line for line
    Wm, bm, xs, Hs, wts = _seed_001_inputs(5)
    f = _seed_001_inline(b_outer=True)
    value, grads = workloads.w2_hand(Wm, bm, np.concatenate(xs, axis=1), Hs, wts)
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(Wm, bm, xs, Hs, wts), (value, grads), rtol=1e-9)
    lowered = vectorized_like_eager(f, Wm, bm, xs, Hs, wts, argnums=(0, 1), shrink=5)
    in_order = wg.jit(wg.value_and_grad(_seed_001_inline(b_outer=False), argnums=(0, 1))).lower(Wm, bm, xs, Hs, wts)
    assert lowered.code.splitlines()[1:] == in_order.code.splitlines()[1:]
    assert not [e for e in lowered.program.eqns if e.prim.name == "getitem" and any(
        type(i) is np.ndarray for i in (e.params["index"] if type(e.params["index"]) is tuple else (e.params["index"],)))]
    fd_check(lambda Wm: f(Wm, bm, xs, Hs, wts), (Wm,))
    fd_check(lambda bm: f(Wm, bm, xs, Hs, wts), (bm,))


def test_a_lane_product_read_in_parts_through_views_is_computed_per_part():
    # seed 001 written one row per step, np.sum(ys[0] * y, axis=0): the backward's lane products
    # g[t] * ys[0] and g[t] * ys[t] are one class of 2T - 1 members, which would gather both
    # operands; read as two sums, each part reads them through views (g's rows in order, ys[0]
    # for every lane) and is computed on its own: no lane product of 2T - 1 rows, no gather of one
    T = 40   # 2T - 1 lanes: above the size narrow_lanes works from
    Wm, bm, xs, Hs, wts = _seed_001_inputs(4, T=T, B=3)
    f = workloads.w2_loop_forms_code(wnp, wg.Buffer, at=wg.at)["rows per step"]
    value, grads = workloads.w2_hand(Wm, bm, np.concatenate(xs, axis=1), Hs, wts)
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(Wm, bm, xs, Hs, wts), (value, grads), rtol=1e-9)
    lowered = vectorized_like_eager(f, Wm, bm, xs, Hs, wts, argnums=(0, 1), shrink=3)
    assert not [e for e in lowered.program.eqns if e.outs[0].shape[:1] == (2 * T - 1,)]
    fd_check(lambda Wm: f(Wm, bm, xs, Hs, wts), (Wm,))
    fd_check(lambda bm: f(Wm, bm, xs, Hs, wts), (bm,))


def test_narrow_lanes_splits_a_product_read_in_parts_only_where_the_parts_read_views():
    from wengert.primitives import elementwise as E
    from wengert.primitives.shape import getitem
    from wengert.transforms._ir import Program, Var
    n, w = 40, 3
    f64 = np.dtype(np.float64)
    x, y = Var(0, (n, w), f64), Var(1, (n, w), f64)
    lanes = 2 * n - 1   # y[0] * x[0], then y[0] * x[t] and y[t] * x[t] for t >= 1
    rx = np.r_[0, np.repeat(np.arange(1, n), 2)]
    ry = np.r_[0, np.ravel(np.stack([np.zeros(n - 1, int), np.arange(1, n)], axis=1))]
    xv_, yv_, prod = Var(2, (lanes, w), f64), Var(3, (lanes, w), f64), Var(4, (lanes, w), f64)
    even, odd = Var(5, (n, w), f64), Var(6, (n - 1, w), f64)
    program = Program([x, y], [
        _vectorize._eqn(getitem, (x,), {"index": (rx,)}, (xv_,), None),
        _vectorize._eqn(getitem, (y,), {"index": (ry,)}, (yv_,), None),
        _vectorize._eqn(E.multiply, (xv_, yv_), {}, (prod,), None),
        _vectorize._eqn(getitem, (prod,), {"index": (slice(0, lanes, 2),)}, (even,), None),   # y[t] * x[t]
        _vectorize._eqn(getitem, (prod,), {"index": (slice(1, lanes, 2),)}, (odd,), None)],   # y[0] * x[t], t >= 1
        [even, odd])
    split = _vectorize.narrow_lanes(program, _vectorize._Fresh(program))
    assert [e.outs[0].shape for e in split.eqns if e.prim is E.multiply] == [(n, w), (n - 1, w)]
    assert not [e for e in split.eqns if e.prim is getitem and any(type(i) is np.ndarray for i in e.params["index"])]
    xv, yv = rng.normal(size=(n, w)), rng.normal(size=(n, w))
    got = _run(split)(xv, yv)
    np.testing.assert_array_equal(got[0], yv * xv)
    np.testing.assert_array_equal(got[1], yv[0] * xv[1:])
    # read whole by one reader: left as it is
    whole = Program([x, y], program.eqns[:3], [prod])
    assert _vectorize.narrow_lanes(whole, _vectorize._Fresh(whole)) is whole


def test_a_loop_whose_body_differs_in_one_iteration():
    x = rng.normal(size=(4, N))

    def f(x):
        out = wg.Buffer.zeros((N,))
        for i in range(N):
            c = x[:, i]
            out[i] = wnp.sum(wnp.cos(c) if i == 5 else wnp.sin(c) * c)
        return wnp.sum(out.freeze() ** 2)

    text = vectorized_like_eager(f, x).as_text()
    assert "vectorized x" in text and "cos(" in text
    fd_check(f, (x,))


def test_vectorize_false_keeps_the_program_and_counts_are_reported():
    x = rng.normal(size=(3, N))

    def f(x):
        return wnp.sum(wnp.stack([wnp.sum(wnp.sin(x[:, i])) for i in range(N)]))

    on, off = wg.jit(f).lower(x), wg.jit(f, vectorize=False).lower(x)
    assert off.vectorized == {} and "vectorized" not in off.as_text()
    assert on.vectorized["before"] >= off.eqns > on.vectorized["after"] >= on.eqns  # the rewrites after it drop more
    assert on.vectorized["batched"] >= 2 * N


def test_a_short_loop_over_small_columns_is_batched_and_large_pairs_are_not():
    """Three columns of four: the chain sin -> square -> sum is batched from two members up (each call
    saved costs more than its arithmetic); two products of 64x64 arrays stay two calls (stacking
    them would copy 32 KB each to save one call)."""
    x = rng.normal(size=(4, 3))

    def cols(x):
        return wnp.sum(wnp.stack([wnp.sum(wnp.sin(x[:, i]) ** 2) for i in range(3)]) * wnp.arange(1.0, 4.0))

    lowered = wg.jit(wg.value_and_grad(cols)).lower(x)
    assert lowered.vectorized["batched"] >= 6 and _count(lowered, "sin") == 1
    test_jit.assert_trees_close(wg.jit(wg.value_and_grad(cols))(x), wg.value_and_grad(cols)(x))
    a, b, c = (rng.normal(size=(64, 64)) for _ in range(3))

    def pair(a, b, c):
        return wnp.sum(wnp.tanh(a * b + c))

    lowered = wg.jit(wg.value_and_grad(pair, argnums=(0, 1, 2))).lower(a, b, c)
    assert lowered.vectorized.get("batched", 0) == 0 and _count(lowered, "stack") == 0


# --- the pass on every row of the systematic table, with classes as small as two --------------------
@pytest.mark.parametrize("name", CASE_IDS)
def test_every_table_row_with_small_classes_vectorized(name, monkeypatch):
    monkeypatch.setattr(_vectorize, "MIN_GROUP", 2)
    test_jit.test_every_table_row_under_jit_grad_and_jvp_equals_eager(name)


# --- grids: dot products of gathered columns as one matmul, scatters with repeats as sums ----------
def _count(lowered, name):
    return sum(1 for e in lowered.program.eqns if e.prim.name == name)


def test_affine_index_arrays_and_their_joint_grid():
    k, j, i = np.meshgrid(np.arange(5), np.arange(3), np.arange(4), indexing="ij")   # lanes (k, j, i)
    rows = (4 * k + i).ravel()                       # rows of a (k, i) class read by every lane
    assert _vectorize._affine(rows) == (0, [(5, 4), (3, 0), (4, 1)])
    assert _vectorize._affine(np.arange(12)[::-1]) == (11, [(12, -1)])
    assert _vectorize._affine(np.array([0, 2, 1, 3])) == (0, [(2, 1), (2, 2)])
    assert _vectorize._affine(np.array([0, 1, 3, 2])) is None
    grid, starts, steps = _vectorize._joint_grid([rows, (3 * k + j).ravel()])
    assert grid == (5, 3, 4) and starts == [0, 0] and steps == [(4, 0, 1), (3, 1, 0)]
    assert _vectorize._joint_grid([rows, np.random.default_rng(0).permutation(60)]) is None


# spellings of a dot product beyond benchmarks/' four: wengert.numpy records each as ``dot``
MORE_DOTS = {"np.vdot": lambda u, v: wnp.vdot(u, v), "einsum('i,i->')": lambda u, v: wnp.einsum("i,i->", u, v),
             "np.tensordot(u, v, 1)": lambda u, v: wnp.tensordot(u, v, 1), "u.dot(v)": lambda u, v: u.dot(v)}


@pytest.mark.parametrize("spelling", ["@", "np.dot", "np.sum(u*v)", "np.inner", *MORE_DOTS])
def test_pairwise_dots_of_columns_are_one_matmul(spelling):
    dot = MORE_DOTS.get(spelling) or workloads.dot_spelling(wnp, spelling)
    x, y = rng.normal(size=(6, 9)), rng.normal(size=(6, 8))
    wts = rng.normal(size=(9, 8))

    def f(x, y):
        return wnp.sum(wnp.stack([wnp.stack([dot(x[:, i], y[:, j]) for j in range(8)]) for i in range(9)]) * wts)

    lowered = vectorized_like_eager(f, x, y, argnums=(0, 1))
    assert _count(lowered, "grid_dot") == 1
    assert _count(lowered, "einsum") == 0
    fd_check(f, (x, y), argnum=1)


def test_dots_of_scattered_pairs_keep_their_gathers():
    x, y = rng.normal(size=(6, 10)), rng.normal(size=(6, 10))
    pairs = [(int(a), int(b)) for a, b in np.random.default_rng(3).integers(0, 10, size=(N, 2))]

    def f(x, y):
        return wnp.sum(wnp.stack([wnp.dot(x[:, a], y[:, b]) for a, b in pairs]) ** 2)

    lowered = vectorized_like_eager(f, x, y, argnums=(0, 1))
    assert _count(lowered, "grid_dot") == 0


def test_repeated_reads_on_a_grid_scatter_their_cotangents_by_sums():
    x = rng.normal(size=(4, 8, 3))

    def f(x):   # every column x[:, i, k] read by 4 lanes j: its cotangent sums 4 terms
        return wnp.sum(wnp.stack([wnp.sum(wnp.sin(x[:, i, k]) * (j + 1.0)) for k in range(3) for j in range(4)
                                  for i in range(8)]) ** 2)

    lowered = vectorized_like_eager(f, x)
    assert _count(lowered, "grid_add") >= 1 and _count(lowered, "scatter_add") == 0
    fd_check(f, (x,))


@pytest.mark.parametrize("body", ["inline reads", "normalized first"])
def test_columns_read_twice_per_trip_add_their_cotangents_then_scatter_once(body):
    # Two cotangents per column per trip: the pass adds the two batched ones and scatters once,
    # so the program does not read back one row per member (its size does not grow with the loop).
    f = workloads.w1_loop_forms_code(wnp, wg.Buffer)[body]   # every column read twice per trip
    a, bb, wts = w1_inputs(4, 5, 3, 6)
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=8)
    member_reads = [e for e in lowered.program.eqns if e.prim.name == "getitem"
                    and type((e.params["index"] if type(e.params["index"]) is tuple else (e.params["index"],))[0]) is int]
    assert not member_reads and not any(e.prim.name == "stack" and len(e.args) > 4 for e in lowered.program.eqns)
    fd_check(lambda a: f(a, bb, wts), (a,))
    fd_check(lambda b: f(a, b, wts), (bb,))


def test_columns_read_where_used_contract_each_cotangent_term_per_column():
    """b's column is read by the dot and by its norm in one line: its two cotangents (the lanes' g times
    a's rows, and g' times the rows of b / |b|) are added as (lanes, w) products before the scatter.
    The scatter of the sum is the sum of each term's grid_rowsum: no (lanes, w) product is formed."""
    n, w, r, b = 6, 5, 3, 4
    a, bb, wts = w1_inputs(n, w, r, b)
    f = workloads.w1_loop_forms_code(wnp, wg.Buffer)["inline reads"]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=8)
    assert _count(lowered, "grid_rowsum") == 4
    assert not _lane_products(lowered, n * r * b, w, prims=("multiply", "add"))
    fd_check(lambda a: f(a, bb, wts), (a,))
    fd_check(lambda bb: f(a, bb, wts), (bb,))


def test_columns_normalized_per_pair_contract_their_cotangents_through_the_norms():
    """``np.dot(u / |u|, v / |v|)`` per pair: each pair's backward divides its cotangent by the column's
    norm and sums ``g * u * v / |u|`` over w. The divisions go onto the lanes' scalars (each term one
    grid_rowsum per column), the sums over w are the forward's dot products scaled per lane: no
    (lanes, w) array, and one grid_dot in all."""
    n, w, r, b = 6, 5, 3, 4
    a, bb, wts = w1_inputs(n, w, r, b)
    f = workloads.w1_loop_forms_code(wnp, wg.Buffer)["normalized in the kernel"]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=8)
    assert _count(lowered, "grid_rowsum") == 4 and _count(lowered, "grid_dot") == 1
    assert not _lane_products(lowered, n * r * b, w, prims=("multiply", "divide", "negative", "add"))
    fd_check(lambda a: f(a, bb, wts), (a,))
    fd_check(lambda bb: f(a, bb, wts), (bb,))


@pytest.mark.parametrize("body", ["loop order i,j,k", "lists+np.array"])
def test_many_batches_on_the_unit_stride_axis_take_einsums_loop_with_the_same_values(body, monkeypatch):
    """Seed 000's loop with more than _EINSUM_MIN_BATCH batches, written batch innermost (or building
    lists): the lanes' batch is the inputs' unit-stride axis, so grid_dot and grid_rowsum run
    einsum's loop on the strided views instead of copying them for matmul. Values and gradients
    equal eager's, the hand-written gradient's and finite differences, in float64."""
    chosen = []
    pays = _vectorize._batch_loop_pays
    monkeypatch.setattr(_vectorize, "_batch_loop_pays", lambda ops: chosen.append(pays(ops)) or chosen[-1])
    f = workloads.w1_loop_forms_code(wnp, wg.Buffer)[body]
    a, bb, wts = w1_inputs(3, 5, 2, _vectorize._EINSUM_MIN_BATCH + 6)
    eager = wg.value_and_grad(f, argnums=(0, 1))
    got = wg.jit(eager)(a, bb, wts)
    assert chosen and all(chosen), chosen
    close(got, eager(a, bb, wts))
    value, grads = workloads.w1_hand_einsum(a, bb, wts)
    np.testing.assert_allclose(got[0], value, rtol=1e-12)
    close(got[1], grads)
    fd_check(lambda b: f(a, b, wts), (bb,))
    # a C-order batch-first operand, or few batches: matmul as before
    x = rng.normal(size=(70, 3, 5))
    assert not pays((x, x.transpose(0, 2, 1).copy().transpose(0, 2, 1)))
    strided = np.ascontiguousarray(np.moveaxis(x, 0, -1)).transpose(2, 0, 1)
    assert pays((strided, strided)) and not pays((strided[:64], strided[:64]))


@pytest.mark.parametrize("xs,ys,outs", [("kiw", "kjw", "kij"), ("kiw", "kjw", "kji"), ("kjw", "kiw", "kij"),
                                         ("kabw", "kjw", "kjab"), ("kiw", "kw", "ki"), ("iw", "jw", "ij")])
def test_einsum_split_over_an_operands_own_axes_equals_einsum(xs, ys, outs, monkeypatch):
    """_grid_dot_columns's einsum, one call per index of the operand's own axes (those of one operand
    and the result only) where both operands have such axes: the same values as one einsum, into a
    result laid out either way, whichever operand is split; one call where an operand has none or
    both have too many."""
    sizes = {"k": 7, "i": 3, "j": 2, "a": 2, "b": 2, "w": 5}
    x = rng.normal(size=[sizes[c] for c in xs])
    y = rng.normal(size=[sizes[c] for c in ys])
    want = np.einsum(f"{xs},{ys}->{outs}", x, y)
    calls = []
    einsum = np.einsum
    monkeypatch.setattr(_vectorize.np, "einsum", lambda *a, **k: calls.append(1) or einsum(*a, **k))
    for order, limit in (("C", 16), ("F", 16), ("C", 1)):
        calls.clear()
        monkeypatch.setattr(_vectorize, "_EINSUM_SPLIT_MAX", limit)
        out = np.empty(want.shape, order=order)
        letters = {c: n for n, c in enumerate(sorted(set(xs + ys)))}
        got = _vectorize._einsum_split(x, [letters[c] for c in xs], y, [letters[c] for c in ys],
                                       [letters[c] for c in outs], out)
        assert got is out
        np.testing.assert_allclose(out, want, rtol=1e-12)
        own = [set(xs) - set(ys), set(ys) - set(xs)]
        shorter = min(int(np.prod([sizes[c] for c in o])) for o in own)
        assert len(calls) == (shorter if all(own) and shorter <= limit else 1), calls


def _input_readers(lowered, n):
    """The primitives of the equations that read the program's first ``n`` inputs."""
    ins = {v.id for v in lowered.program.inputs[:n]}
    return {e.prim.name for e in lowered.program.eqns if any(u.id in ins for u in e.uses)}


@pytest.mark.parametrize("spelling", ["loop", "loop[in-place, @]", "loop[lists+stack, np.sum(u*v)]", "inline reads"])
def test_columns_of_batch_last_inputs_are_read_and_written_where_they_lie(spelling):
    """Seed 000's loop over a batch-last a (W, R, B) and b (W, N, B) with more than _EINSUM_MIN_BATCH
    batches: the grid products read the columns as strided views of a and b themselves (no transposed
    copy of either), and each cotangent, which covers its input exactly once, is written by the
    products in the input's layout (no grid_add); the columns' norms (``np.linalg.norm`` of each
    column read inline too) are the inputs' norms over their axis 0. Values and gradients equal
    eager's, the hand-written gradient's and finite differences, in float64, also for inputs laid
    out another way."""
    a, bb, wts = w1_inputs(3, 5, 2, _vectorize._EINSUM_MIN_BATCH + 6)
    code = workloads.w1_code if spelling == "loop" else workloads.w1_loop_forms_code \
        if spelling == "inline reads" else workloads.w1_spellings_code
    f = code(wnp, wg.Buffer)[spelling]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=8)
    assert _input_readers(lowered, 2) <= {"grid_dot", "grid_rowsum", "square", "power", "pnorm"}, \
        _input_readers(lowered, 2)
    assert _count(lowered, "grid_add") == 0 and _count(lowered, "grid_dot") == 1
    ins = [v.id for v in lowered.program.inputs[:2]]
    assert all(e.args[-1].id in ins for e in lowered.program.eqns if e.prim.name in ("grid_dot", "grid_rowsum"))
    # each cotangent's parts are added into one of them, and the constant zeros the traced zeros of
    # the in-place spelling send to a are not added at all
    made = {o.id: e.prim.name for e in lowered.program.eqns for o in e.outs}
    sums = [e for e in lowered.program.eqns if e.prim.name in ("add", "add_in_place")]
    assert sums and all(e.prim.name == "add_in_place" and made[e.args[0].id] == "grid_rowsum" for e in sums), \
        lowered.as_text()
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    value, grads = workloads.w1_hand_einsum(a, bb, wts)
    for x, y in [(a, bb), (np.asfortranarray(a), bb), (a, np.pad(bb, ((0, 0), (0, 0), (1, 0)))[:, :, 1:])]:
        got = step(x, y, wts)
        np.testing.assert_allclose(got[0], value, rtol=1e-12)
        close(got[1], grads)
    fd_check(lambda a: f(a, bb, wts), (a,))
    if "in-place" not in spelling:   # its traced zeros follow a: b alone cannot be differentiated
        fd_check(lambda b: f(a, b, wts), (bb,))


def _cosines_over(js, n, r, b):
    """A pairwise loop like seed 000's whose lanes read a's columns ``js`` (a subset, or repeats) and
    every column of b, normalized by b's norms only."""
    wl = rng.normal(size=(b, len(js), n))

    def f(a, bb):
        out = []
        for k in range(b):
            for j in js:
                for i in range(n):
                    u, v = a[:, j, k], bb[:, i, k]
                    out.append(wnp.dot(u, v) / wnp.sqrt(wnp.sum(v ** 2)))
        return wnp.sum(wnp.stack(out) * wl.ravel())
    return f


@pytest.mark.parametrize("js", [[0, 2], [0, 0, 1, 1], [2, 1, 0]], ids=["subset", "repeats", "reversed"])
def test_columns_read_in_place_where_the_grid_does_not_cover_the_input_once(js):
    """a's columns read on a grid that skips some (its cotangent is scattered into zeros: grid_add
    stays, and the products read the gathered copy), repeats them or reverses them: the same values
    and gradients as eager and finite differences, in float64."""
    n, w, r, b = 2, 4, 3, _vectorize._EINSUM_MIN_BATCH + 6   # a and b of different shapes
    a, bb = rng.random((w, r, b)), rng.random((w, n, b))
    f = _cosines_over(js, n, r, b)
    lowered = vectorized_like_eager(f, a, bb, argnums=(0, 1), shrink=8)
    if js == [0, 2]:   # a's cotangent covers part of it: a scatter into zeros, and a read through its copy
        assert _count(lowered, "grid_add") >= 1
    fd_check(f, (a, bb), argnum=0)
    fd_check(f, (a, bb), argnum=1)


def test_columns_view_reads_the_rows_a_grid_names():
    """Rows ``start + sum(step * digit)`` of x[:, I, J].T over a grid are a strided view of x, for x
    in C order, Fortran order, or a view of another array."""
    x = rng.normal(size=(5, 6, 8))
    k, i = np.meshgrid(np.arange(8), np.arange(3), indexing="ij")   # lanes (k, i): rows of every other i
    rows_i, rows_k = (2 * i).ravel(), k.ravel()
    got = _vectorize._columns_of([rows_i, rows_k], 1, [(2, 6), (2, 1)])   # rows 1 + 6 * p + q
    assert got == ((2, 0), ((0, 2), (2, 0)))
    assert _vectorize._columns_of([rows_i, np.random.default_rng(1).permutation(rows_k)], 0, [(8, 3), (3, 1)]) is None
    cols = _vectorize._Columns((1, 2), got[0], got[1], x.shape)
    lanes = (1 + 6 * np.arange(2)[:, None] + np.arange(2)[None, :])
    for y in (x, np.asfortranarray(x), np.pad(x, ((0, 0), (1, 0), (0, 0)))[:, 1:]):
        view = cols.view(y, (2, 2))
        assert np.shares_memory(view, y)
        np.testing.assert_array_equal(view, y[:, rows_i, rows_k].T[lanes])
    assert cols.unit_strides([0, 1]) == [False, False] and _vectorize._Columns((1, 2), (0, 0), ((0, 1),), x.shape).unit_strides([0]) == [True]


@pytest.mark.parametrize("base", ["zeros", "values"])
def test_grid_add_matches_add_at(base):
    r = np.random.default_rng(4)
    shape = (3, 5, 4)
    k, j, i = np.meshgrid(np.arange(4), np.arange(2), np.arange(5), indexing="ij")
    columns = [(4 - i).ravel(), k.ravel()]           # reversed along axis 1, a repeat over j
    values = r.normal(size=(3, columns[0].size))
    index = (slice(None), columns[0], columns[1])
    plan = _vectorize._grid_add_plan(index, [1, 2], columns, shape, 1)
    assert plan is not None and plan.summed == (1,)
    start = _zeros_view(shape, np.float64) if base == "zeros" else r.normal(size=shape)
    expected = np.array(start, copy=True)
    np.add.at(expected, index, values)
    np.testing.assert_allclose(_vectorize._grid_add(start, values, plan), expected, rtol=1e-12)


@pytest.mark.parametrize("cover", ["all", "part"])
def test_grid_add_into_zeros_writes_every_element(cover):
    """A scatter into a cotangent's zeros that covers every element skips zeroing the result first;
    one that covers part of it must still leave zeros elsewhere (the freed array below hands its
    nan-filled memory to the next allocation of that size)."""
    shape = (3, 4, 6)
    k, i = np.meshgrid(np.arange(6 if cover == "all" else 3), np.arange(4), indexing="ij")  # lanes (k, i)
    columns = [i.ravel(), (k if cover == "all" else 2 * k).ravel()]
    values = rng.normal(size=(3, columns[0].size))
    index = (slice(None), columns[0], columns[1])
    plan = _vectorize._grid_add_plan(index, [1, 2], columns, shape, 1)
    assert plan is not None
    expected = np.zeros(shape)
    expected[index] = values
    for _ in range(3):
        garbage = np.full(shape, np.nan)
        del garbage
        np.testing.assert_array_equal(_vectorize._grid_add(_zeros_view(shape, np.float64), values, plan), expected)


@pytest.mark.parametrize("order", ["C", "F"])
def test_strided_rows_of_either_memory_order(order):
    """Rows of a lanes-first array read as a strided view of its memory, C order or Fortran order
    (the transpose of a gather), from a row other than the first."""
    x = np.asarray(rng.normal(size=(40, 3)), order=order)
    k, j = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    rows = 3 + 8 * k + j                            # start 3, a (4, 5) grid of rows
    view = _vectorize._strided_rows(x, 3, (4, 5), (8, 1))
    assert np.shares_memory(view, x)
    np.testing.assert_array_equal(view, x[rows])


@pytest.mark.parametrize("spelling", ["loop[Buffer, np.dot]", "loop[lists+stack, np.sum(u*v)]", "loop[in-place, @]"])
def test_seed_000_loop_becomes_matmuls_forward_and_backward(spelling):
    n, w, r, b = 8, 5, 9, 2   # a and b of different shapes: their column reads are two classes
    a, bb, wts = w1_inputs(n, w, r, b)
    f = workloads.w1_spellings_code(wnp, wg.Buffer)[spelling]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
    assert _count(lowered, "grid_dot") == 1 and _count(lowered, "einsum") == 0
    # each column's cotangent: the lanes' g * v summed per column, one matmul per term, no (n, w) products
    assert _count(lowered, "grid_rowsum") >= 4
    assert not any(e.prim.name == "multiply" and np.prod(e.outs[0].shape) == n * r * b * w for e in lowered.program.eqns)
    fd_check(lambda a: f(a, bb, wts), (a,))


def test_a_column_read_by_consecutive_trips_is_contracted_not_split_by_trip():
    # lists+stack reads b[:, i, k] in r consecutive trips: its cotangent chain has runs of r equal
    # positions, each the same computation; they are summed per column as matmuls, not taken apart
    n, w, r, b = 5, 4, 2, 3
    a, bb, wts = w1_inputs(n, w, r, b)
    f = workloads.w1_spellings_code(wnp, wg.Buffer)["loop[lists+stack, np.sum(u*v)]"]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
    assert _count(lowered, "grid_rowsum") >= 4
    assert not any(e.prim.name == "multiply" and np.prod(e.outs[0].shape) == n * r * b * w for e in lowered.program.eqns)


def test_rowsums_scale_the_lanes_not_the_rows():
    """The backward of the norms' ``x ** 2`` scales the (rows, w) columns by 2 for a grid_rowsum; with
    more elements in the rows than lanes the 2 multiplies the lanes' cotangents instead."""
    n, w, r, b = 4, 20, 3, 2
    a, bb, wts = w1_inputs(n, w, r, b)
    f = workloads.w1_spellings_code(wnp, wg.Buffer)["loop[Buffer, np.dot]"]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
    eqns = lowered.program.eqns
    made = {o.id: e for e in eqns for o in e.outs}
    rowsums = [e for e in eqns if e.prim.name == "grid_rowsum"]
    assert len(rowsums) >= 4
    scaled = [made.get(e.args[1].id) for e in rowsums]
    assert not any(m is not None and m.prim.name == "multiply" for m in scaled)
    assert not any(e.prim.name == "multiply" and len(e.outs[0].shape) == 2 and e.outs[0].shape[1] == w for e in eqns)
    fd_check(lambda a: f(a, bb, wts), (a,))


def test_a_norm_as_the_dot_of_a_column_with_itself_contracts_its_cotangent_per_column():
    """The backward of ``np.dot(u, u)`` sums u's two cotangents (a class's rows summed per lane); added to
    the cosine's dot cotangent before the scatter, each term is still one grid_rowsum per column: no
    (lanes, w) products are formed."""
    n, w, r, b = 8, 5, 9, 2
    a, bb, wts = w1_inputs(n, w, r, b)
    f = workloads.w1_spellings_code(wnp, wg.Buffer)["loop[Buffer, np.dot, np.sqrt(np.dot(u, u))]"]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
    eqns = lowered.program.eqns
    assert _count(lowered, "grid_rowsum") == 4
    assert not _lane_products(lowered, n * r * b, w)
    assert not any(e.prim.name == "grid_rowsum" and e.outs[0].shape[0] == n * r * b for e in eqns)
    fd_check(lambda a: f(a, bb, wts), (a,))
    fd_check(lambda bb: f(a, bb, wts), (bb,))


def _cosine_loop(norm):
    """Seed 000's cosine per pair of columns, summed with weights, the norm spelled ``norm``."""
    def f(a, b, wts):
        w, r, nb = a.shape
        out = wg.Buffer.zeros((b.shape[1], r, nb), a.dtype)
        for k in range(nb):
            for j in range(r):
                aj = a[:, j, k]
                for i in range(b.shape[1]):
                    u = b[:, i, k]
                    out[i, j, k] = wnp.dot(u, aj) / (norm(u) * norm(aj))
        return wnp.sum(out.freeze() * wts)
    return f


def _lane_products(lowered, lanes, w, prims=("multiply",)):
    """The program's ``prims`` equations (multiplies) that form (lanes, w) arrays: one row per lane, not
    per column."""
    return [e for e in lowered.program.eqns if e.prim.name in prims and len(e.outs[0].shape) >= 2
            and e.outs[0].shape[-1] == w and np.prod(e.outs[0].shape[:-1]) == lanes]


@pytest.mark.parametrize("norm", [lambda u: wnp.sqrt(wnp.sum(wnp.abs(u) ** 2)), lambda u: wnp.sqrt(wnp.square(u).sum()),
                                  lambda u: wnp.sqrt(wnp.sum(wnp.abs(u) * wnp.abs(u)))],
                         ids=["sqrt(sum(abs(u)**2))", "sqrt(square(u).sum())", "sqrt(sum(abs(u)*abs(u)))"])
def test_a_chain_of_row_factors_is_multiplied_per_column_then_contracted(norm):
    """The backward of ``np.abs(u) ** 2`` gives each lane its scalar times rows of 2|u| times rows of
    sign(u) (``np.square(u)``: the scalar times 2 times rows of u): the row factors are multiplied once
    per column (|u| sign(u) being u), the constants go on the lanes, and each column's cotangent is
    one grid_rowsum per term, no (lanes, w) products. Entries at 0 (abs's kink) keep eager's values
    and gradients."""
    n, w, r, b = 8, 5, 9, 2
    a, bb = rng.normal(size=(w, r, b)), rng.normal(size=(w, n, b))
    a[1, 2, 0] = a[3, 4, 1] = bb[0, 5, 1] = 0.0
    wts = rng.normal(size=(n, r, b))
    f = _cosine_loop(norm)
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
    assert _count(lowered, "grid_rowsum") == 4
    assert not _lane_products(lowered, n * r * b, w)
    assert _count(lowered, "_sign") == 0   # |u| sign(u) is u
    assert not any(e.prim.name == "grid_rowsum" and e.outs[0].shape[0] == n * r * b for e in lowered.program.eqns)
    fd_check(lambda a: f(a, bb, wts), (a,))
    fd_check(lambda bb: f(a, bb, wts), (bb,))


@pytest.mark.parametrize("same_rows", [True, False])
def test_a_lane_product_multiplies_its_row_factors_only_where_they_read_the_same_rows(same_rows):
    """``g[l] * S[ridx[l]] * (2 * T)[rows[l]]`` is one lane product ``(2 g)[l] * (S * T)[ridx[l]]`` when
    both factors read the same rows of their arrays; read at other rows (two different columns per
    lane) it is no product of one row set, and stays as it is."""
    from wengert.primitives.elementwise import multiply
    from wengert.primitives.shape import getitem, reshape
    from wengert.transforms._ir import Program, Var, producers_of, use_counts

    lanes, m, w = 12, 4, 5
    ridx = np.arange(lanes) % m
    rows = ridx if same_rows else ridx[::-1].copy()
    ids = iter(range(100))
    var = lambda shape: Var(next(ids), shape, np.dtype(np.float64))  # noqa: E731
    g, s, t = var((lanes,)), var((m, w)), var((m, w))
    t2, col, rs, rt, p1, p = var((m, w)), var((lanes, 1)), var((lanes, w)), var((lanes, w)), var((lanes, w)), var((lanes, w))
    eqns = [_vectorize._eqn(multiply, (2, t), {}, (t2,), None),
            _vectorize._eqn(reshape, (g,), {"shape": (lanes, 1)}, (col,), None),
            _vectorize._eqn(getitem, (s,), {"index": (ridx,)}, (rs,), None),
            _vectorize._eqn(getitem, (t2,), {"index": (rows,)}, (rt,), None),
            _vectorize._eqn(multiply, (col, rs), {}, (p1,), None),
            _vectorize._eqn(multiply, (p1, rt), {}, (p,), None)]
    program = Program([g, s, t], eqns, [p])
    products = _vectorize._Products(producers_of(program), use_counts(eqns, [p]), _vectorize._Fresh(program), None)
    found = _vectorize._lane_product(p, products, lanes)
    if not same_rows:
        assert found is None
        return
    g2, gidx, prod, got_rows = found
    np.testing.assert_array_equal(gidx, np.arange(lanes))
    np.testing.assert_array_equal(got_rows, ridx)
    made = {e.outs[0].id: e for e in products.made}
    assert made[prod.id].prim.name == "multiply" and {a.id for a in made[prod.id].args} == {s.id, t.id}
    assert made[g2.id].args == (2, g)   # the constant on the 12 lanes, not on the (4, 5) rows


def test_abs_times_sign_is_the_array_only_for_one_real_array():
    """Among a lane product's row factors, |x| sign(x) is x; |x| sign(y) stays as it is."""
    x = rng.normal(size=(4, 5))
    x[0, 0] = 0.0

    def run(f, *args):
        lowered = wg.jit(f).lower(*args)
        eqns = lowered.program.eqns
        parts = [e.outs[0] for e in eqns if e.prim.name in ("absolute", "sign")]
        return _vectorize._abs_times_sign(parts, {e.outs[0].id: e for e in eqns}), lowered.program

    same, program = run(lambda x: (wnp.abs(x), wnp.sign(x)), x)
    assert [v.id for v in same] == [program.inputs[0].id]
    other, _ = run(lambda x, y: (wnp.abs(x), wnp.sign(y)), x, x.copy())
    assert len(other) == 2
    np.testing.assert_array_equal(np.abs(x) * np.sign(x), x)


@pytest.mark.parametrize("spelling", ["np.linalg.norm(u)", "np.linalg.norm(u, 2)"])
def test_the_norms_backward_selects_and_divides_per_column(spelling):
    """``np.linalg.norm``'s backward ``x / where(norm == 0, 1, norm)`` expands the norms to x's shape
    before comparing and selecting: under the pass the comparison and the selection run once per
    column (the broadcast comes after them), and the division by each column's norm moves onto the
    lanes' scalars (no (columns, w) division is left). A column of zeros keeps eager's gradient there
    (0, not nan). Columns of w = 20: more elements than the 144 lanes."""
    n, w, r, b = 8, 20, 9, 2
    a, bb = rng.normal(size=(w, r, b)), rng.normal(size=(w, n, b))
    wts = rng.normal(size=(n, r, b))
    norm = (lambda u: wnp.linalg.norm(u)) if spelling == "np.linalg.norm(u)" else (lambda u: wnp.linalg.norm(u, 2))

    def per_column_work(lowered):
        eqns = lowered.program.eqns
        assert _count(lowered, "grid_rowsum") == 4 and _count(lowered, "broadcast_to") == 0
        for name in ("where", "_is_zero"):
            found = [e for e in eqns if e.prim.name == name]
            assert found and all(e.outs[0].shape[-1] == 1 for e in found), [e.outs[0].shape for e in found]
        assert not any(e.prim.name == "divide" and e.outs[0].shape[-1] == w for e in eqns)

    f = _cosine_loop(norm)
    per_column_work(vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4))
    fd_check(lambda a: f(a, bb, wts), (a,))

    def g(x, y, wts):   # no division by the norms: columns of zeros allowed
        out = wg.Buffer.zeros((n, r, b), x.dtype)
        for k in range(b):
            for j in range(r):
                for i in range(n):
                    u, v = y[:, i, k], x[:, j, k]
                    out[i, j, k] = wnp.dot(u, v) + norm(u) * norm(v)
        return wnp.sum(wnp.tanh(out.freeze()) * wts)

    a[:, 4, 1] = bb[:, 2, 0] = 0.0
    per_column_work(vectorized_like_eager(g, a, bb, wts, argnums=(0, 1), shrink=4))
    grads = wg.jit(wg.grad(g, argnums=(0, 1)))(a, bb, wts)
    assert all(np.all(np.isfinite(x)) for x in grads)
    fd_check(lambda a: g(a, bb, wts), (a,))


def test_elementwise_work_on_broadcasts_runs_on_the_arrays_broadcast():
    """A rule's elementwise work on an expanded reduction (here the norm's backward, per column) runs
    before the broadcast, and a broadcast operand is read as the array it broadcasts: same values
    as eager, including where the selection picks the other branch."""
    x = rng.normal(size=(6, 4, N))
    x[:, 1, 5] = 0.0

    def f(x):
        total = 0.0
        for i in range(N):
            m = x[:, :, i]
            total = total + wnp.sum(wnp.linalg.norm(m, axis=0) * wnp.sin(m[0]))
        return total

    lowered = vectorized_like_eager(f, x)
    assert all(len(e.outs[0].shape) < 3 or e.outs[0].shape[1] == 1 for e in lowered.program.eqns
               if e.prim.name in ("where", "_is_zero"))
    fd_check(f, (x,))


def test_rowsum_plan_against_a_loop():
    r = np.random.default_rng(5)
    k, j, i = np.meshgrid(np.arange(3), np.arange(4), np.arange(5), indexing="ij")
    gidx, ridx = (20 * k + 5 * j + i).ravel(), (4 * k + j).ravel()      # lanes (k, j, i); rows of s per (k, j)
    group = (5 * k + i).ravel()                                       # summed over j, per (k, i)
    g, s = r.normal(size=60), r.normal(size=(12, 7))
    plan = _vectorize._rowsum_plan(gidx, ridx, [group])
    expected = np.zeros((15, 7))
    np.add.at(expected, group, g[gidx][:, None] * s[ridx])
    np.testing.assert_allclose(_vectorize._grid_rowsum(g, s, plan), expected, rtol=1e-12)


def test_a_class_read_in_reverse_scatters_its_cotangent_as_a_view():
    x = rng.normal(size=(3, 4, N))

    def f(x):   # the forward reads columns in order, the batched backward meets them reversed
        return wnp.sum(wnp.stack([wnp.tanh(x[:, :, i]) * (i + 1.0) for i in range(N)]) ** 2)

    lowered = vectorized_like_eager(f, x)
    assert _count(lowered, "index_add") == 0
    fd_check(f, (x,))


@pytest.mark.parametrize("index, whole", [((slice(None), slice(None, None, -1)), True),
                                          ((slice(1, None),), False), ((slice(None, None, 2),), False),
                                          ((slice(None), slice(3, None, -1)), True)])
def test_whole_slices(index, whole):
    assert _vectorize._whole(index, (3, 4)) is whole


def test_the_backward_reuses_the_forwards_stack_of_distinct_operands():
    xs = [rng.normal(size=(3, 4)) for _ in range(N)]
    m = rng.normal(size=(5, 3))

    def f(m, xs):   # N different arrays, one class: the forward stacks them, the backward needs them again
        return wnp.sum(wnp.stack([wnp.tanh(m @ x) for x in xs]) ** 2)

    lowered = vectorized_like_eager(f, m, xs)
    assert sum(1 for e in lowered.program.eqns if e.prim.name == "stack" and len(e.args) == N) == 1
    fd_check(f, (m, xs))


def _reversed_reads(lowered):
    """Reads of a batched array against its order: a slice with a negative step."""
    def reversed_slice(index):
        index = index if type(index) is tuple else (index,)
        return any(type(i) is slice and i.step is not None and i.step < 0 for i in index)
    return [e for e in lowered.program.eqns if e.prim.name == "getitem" and reversed_slice(e.params["index"])]


def test_the_backward_reads_the_forward_classes_in_their_order():
    x = rng.normal(size=(3, 4, N))

    def f(x):   # the backward pass meets the columns last to first: its classes are taken forward
        return wnp.sum(wnp.stack([wnp.tanh(x[:, :, i]) * (i + 1.0) for i in range(N)]) ** 2)

    assert _reversed_reads(vectorized_like_eager(f, x)) == []
    fd_check(f, (x,))
    n, w, r, b = 8, 5, 9, 2
    a, bb, wts = w1_inputs(n, w, r, b)
    g = workloads.w1_spellings_code(wnp, wg.Buffer)["loop[Buffer, @]"]
    lowered = vectorized_like_eager(g, a, bb, wts, argnums=(0, 1), shrink=4)
    assert _reversed_reads(lowered) == []
    # the loop writes every element of the Buffer once: a view of its values (a reshape and a
    # transpose), no scatter; the backward of out[:, :, k] = softmax(out[:, :, k]) over every k
    # overwrites the whole cotangent: a view of the written values, not a scatter into a copy;
    # the two grid_adds left put the columns' cotangents into a's and b's
    assert _count(lowered, "scatter_set") == 0 and _count(lowered, "grid_add") == 2


def test_writes_that_overwrite_a_traced_array_everywhere():
    n, w, r, b = 8, 5, 9, 2
    a, bb, wts = w1_inputs(n, w, r, b)
    f = workloads.w1_spellings_code(wnp, wg.Buffer)["loop[in-place, np.sum(u*v)]"]
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(a, bb, wts), workloads.w1_hand_einsum(a, bb, wts), rtol=1e-9)
    lowered = step.lower(a, bb, wts)
    # out = zeros + 0 * a[0]; out[i, j, k] = ... everywhere: the values copied into zeros through a
    # strided view, and the backward's "zero the written elements" everywhere is zeros
    assert _count(lowered, "scatter_set") == 0 and _count(lowered, "set_in_place") == 0
    fd_check(lambda a: f(a, bb, wts), (a,))


def test_a_chain_written_last_to_first_scatters_forward():
    x = rng.normal(size=(3, N))

    def f(x):
        out = wg.Buffer.zeros((N, 3))
        for i in reversed(range(N)):
            out[i] = wnp.sin(x[:, i]) * x[:, i]
        return wnp.sum(out.freeze() ** 3)

    lowered = vectorized_like_eager(f, x)
    assert _reversed_reads(lowered) == []
    fd_check(f, (x,))


@pytest.mark.parametrize("spelling", ["loop[Buffer, np.sum(u*v)]", "loop[lists+stack, np.sum(u*v)]", "loop[Buffer, @]",
                                      "loop[in-place, np.inner]"])
def test_seed_001_backward_contracts_every_spelling_and_computes_only_the_rows_read(spelling):
    T, B, n_in, n_out, D = 9, 8, 5, 4, 6
    r = np.random.default_rng(2)
    Wm, bm = r.normal(size=(n_out, n_in)), r.normal(size=n_out)
    xs = [r.random((n_in, B)) for _ in range(T)]
    xs[3][:, 2] = xs[1][:, 2]                       # equal columns: ties in z along t
    Hs, wts = r.random((D, T, B)), r.normal(size=(D, B))
    f = workloads.w2_spellings_code(wnp, wg.Buffer)[spelling]
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(Wm, bm, xs, Hs, wts), workloads.w2_hand(Wm, bm, np.concatenate(xs, axis=1), Hs, wts), rtol=1e-9)
    close(step(Wm, bm, xs, Hs, wts), wg.value_and_grad(f, argnums=(0, 1))(Wm, bm, xs, Hs, wts), rtol=1e-9)
    lowered = step.lower(Wm, bm, xs, Hs, wts)
    # the sum over t of g[t, b] * ys[t][:, b] (np.sum(u*v)'s backward broadcasts g first) is a matmul,
    # and so is bm's cotangent, the lanes' g[t, b] * y1[b] summed over b (then over t): no sum reads
    # the (T - 1, n_out, B) products
    assert _count(lowered, "grid_rowsum") == 2
    assert not any(e.prim.name in ("sum", "add_reduce") and sorted(np.shape(e.args[0])) == sorted((T - 1, n_out, B))
                   for e in lowered.program.eqns)
    # the lanes' products g * y1[b] for the other operand: one row per lane (t, b), not one per operand
    # (its y1[b] rows, read once per step, are a strided view with a zero step, not a gather)
    rows = [np.prod(e.outs[0].shape[:-1]) for e in lowered.program.eqns if e.prim.name == "multiply"
            and len(e.outs[0].shape) >= 2 and e.outs[0].shape[-1] == n_out]
    assert rows and max(rows) <= T * B
    assert _count(lowered, "grid_rows") == 2
    assert not any(e.prim.name == "getitem" and e.outs[0].shape == (T * B, n_out) and e.args[0].shape == (T * B, n_out)
                   for e in lowered.program.eqns)


def _run(program):
    from wengert.primitives.shape import getitem
    from wengert.transforms import _ir
    text, namespace = _ir.generate(program, getitem)
    return _ir.compile_program(text, namespace)[0]


def test_narrow_lanes_computes_the_rows_read_once_each():
    from wengert.primitives import elementwise as E
    from wengert.primitives.shape import getitem, reshape
    from wengert.transforms._ir import Program, Var
    n, w = 96, 3
    f64 = np.dtype(np.float64)
    x, g = Var(0, (n, w), f64), Var(1, (n,), f64)
    col, prod = Var(2, (n, 1), f64), Var(3, (n, w), f64)
    reads = [7, 3, (slice(10, 40, 3),), (np.array([5, 5, 95, 7]),)]
    outs = [Var(4 + k, np.zeros((n, w))[idx].shape, f64) for k, idx in enumerate(reads)]
    eqns = [_vectorize._eqn(reshape, (g,), {"shape": (n, 1)}, (col,), None),
            _vectorize._eqn(E.multiply, (col, x), {}, (prod,), None)]
    eqns += [_vectorize._eqn(getitem, (prod,), {"index": idx}, (o,), None) for idx, o in zip(reads, outs)]
    program = Program([x, g], eqns, outs)
    narrowed = _vectorize.narrow_lanes(program, _vectorize._Fresh(program))
    products = [e for e in narrowed.eqns if e.prim is E.multiply]
    assert len(products) == 1 and products[0].outs[0].shape == (14, w)   # rows 3, 5, 7, 95 and 10..37 by 3, each once
    xv, gv = rng.normal(size=(n, w)), rng.normal(size=n)
    full = gv[:, None] * xv
    for got, want in zip(_run(narrowed)(xv, gv), [full[7], full[3], full[10:40:3], full[[5, 5, 95, 7]]]):
        np.testing.assert_array_equal(got, want)
    # read mostly whole: left as it is
    wide = Program([x, g], eqns[:2] + [_vectorize._eqn(getitem, (prod,), {"index": (slice(0, 90),)}, (outs[2],), None)],
                   [outs[2]])
    assert _vectorize.narrow_lanes(wide, _vectorize._Fresh(wide)) is wide


def _cosines_then_softmax(extra):
    """Seed 000's loop (cosines of columns into a Buffer, then a stable softmax per batch), the
    softmax written out; ``extra(e, s, m)`` adds a term that uses its pieces (then the shift by the
    max matters, and the max's tie split must stay)."""
    def f(a, b, wts):
        W, R, B = a.shape
        N = b.shape[1]
        out = wg.Buffer.zeros((N, R, B))
        for k in range(B):
            for j in range(R):
                for i in range(N):
                    u, v = b[:, i, k], a[:, j, k]
                    out[i, j, k] = wnp.dot(u, v) / (wnp.sqrt(wnp.sum(u ** 2)) * wnp.sqrt(wnp.sum(v ** 2)))
        for k in range(B):
            x = out[:, :, k]
            m = wnp.max(x, axis=0, keepdims=True)
            e = wnp.exp(x - m)
            s = wnp.sum(e, axis=0, keepdims=True)
            out[:, :, k] = e / s + extra(e, s, m)
        return wnp.sum(out.freeze() * wts)
    return f


def _tied_columns(n=3, w=4, r=2, b=8):
    """Inputs of seed 000 whose softmax has its max twice in every batch: b[:, 0] = b[:, 1] = 2 a[:, 0]
    (cosine 1, the largest there is, twice)."""
    a, bb, wts = w1_inputs(n, w, r, b)
    bb[:, 0] = bb[:, 1] = 2 * a[:, 0]
    return a, bb, wts


def _names(lowered):
    return [e.prim.name for e in lowered.program.eqns]


def test_a_softmax_backward_is_softmaxs_rule_without_the_max_tie_split():
    a, bb, wts = _tied_columns()
    fs = [_cosines_then_softmax(lambda e, s, m: 0.0)] + \
         [f for name, f in workloads.w1_spellings_code(wnp, wg.Buffer).items() if "in-place" not in name]
    for f in fs:
        names = _names(vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4))
        assert "equal" not in names and "astype" not in names   # the max's tie split is gone
        assert names.count("exp") == 1
    fd_check(lambda a: fs[0](a, bb, wts), (a,))


@pytest.mark.parametrize("extra", ["e", "s", "m"])
def test_a_softmax_whose_pieces_are_used_elsewhere_keeps_its_composition(extra):
    term = {"e": lambda e, s, m: 0.5 * e, "s": lambda e, s, m: 0.5 * s, "m": lambda e, s, m: m * 0.25}[extra]
    f = _cosines_then_softmax(term)
    a, bb, wts = _tied_columns()
    assert "equal" in _names(vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4))
    bb[:, 1] *= 0.9   # finite differences where the max is unique (a tie is a kink)
    fd_check(lambda a: f(a, bb, wts), (a,))


def test_equal_reads_are_computed_once():
    # the forward reads each lane's norms nb[i], na[j] from their classes; the backward reads them
    # again at the same lanes: one read each
    a, bb, wts = _tied_columns()
    f = workloads.w1_spellings_code(wnp, wg.Buffer)["loop[Buffer, @]"]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
    seen = []
    for e in lowered.program.eqns:
        index = e.params.get("index") if e.prim.name == "getitem" else None
        if type(index) is tuple and any(type(i) is np.ndarray for i in index):
            seen.append((e.args[0].id, tuple(i.tobytes() if type(i) is np.ndarray else repr(i) for i in index)))
    assert seen and len(seen) == len(set(seen))


@pytest.mark.parametrize("rows, summed", [("kji", 0), ("ki", 1), ("k", 1), ("j", 2)])
def test_rowsum_plan_sums_the_axes_the_rows_do_not_read(rows, summed):
    r = np.random.default_rng(6)
    k, j, i = np.meshgrid(np.arange(3), np.arange(4), np.arange(5), indexing="ij")   # lanes (k, j, i)
    gidx = (20 * k + 5 * j + i).ravel()
    ridx = {"kji": 20 * k + 5 * j + i, "ki": 5 * k + i, "k": k, "j": j}[rows].ravel()   # one row per group
    g, s = r.normal(size=60), r.normal(size=(int(ridx.max()) + 1, 7))
    plan = _vectorize._rowsum_plan(gidx, ridx, [ridx])
    assert plan is not None and plan.presum == summed
    expected = np.zeros(s.shape)
    np.add.at(expected, ridx, g[gidx][:, None] * s[ridx])
    np.testing.assert_allclose(_vectorize._grid_rowsum(g, s, plan), expected, rtol=1e-12)


def test_same_value_sees_equal_equations_over_equal_constants():
    from wengert.primitives.shape import index_add, reshape
    from wengert.transforms._ir import Var
    f64 = np.dtype(np.float64)
    x, r = Var(0, (6,), f64), Var(1, (1, 6), f64)
    a, b, c = Var(2, (3, 6), f64), Var(3, (3, 6), f64), Var(4, (3, 6), f64)
    eqns = [_vectorize._eqn(reshape, (x,), {"shape": (1, 6)}, (r,), None)]
    for out, base in ((a, np.zeros((3, 6))), (b, np.zeros((3, 6))), (c, np.ones((3, 6)))):
        eqns.append(_vectorize._eqn(index_add, (base, r), {"index": (slice(0, 1),)}, (out,), None))
    defs = {e.outs[0].id: e for e in eqns}
    assert _vectorize._same_value(a, b, defs) and not _vectorize._same_value(a, c, defs)
    assert not _vectorize._same_value(a, x, defs)


def test_steps_that_read_only_constants_are_computed_when_the_program_is_built():
    # seed 000 written in place into np.zeros(...) + 0 * a.ravel()[0]: the zeros are overwritten
    # everywhere, so their cotangent is zeros made from constants (a broadcast zero, its sum, a
    # product by 0, a scatter into zeros): no equation of the program computes it
    a, bb, wts = _tied_columns()
    f = workloads.w1_spellings_code(wnp, wg.Buffer)["loop[in-place, @]"]
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(a, bb, wts), wg.value_and_grad(f, argnums=(0, 1))(a, bb, wts))
    lowered = step.lower(a, bb, wts)
    assert not any(e.prim.name in ("broadcast_to", "index_add") or not e.uses for e in lowered.program.eqns)
    fd_check(lambda a: f(a, bb, wts), (a,))


def test_fold_constants_keeps_large_results_and_every_variable_step():
    from wengert.primitives import elementwise as E
    from wengert.primitives.reductions import sum_
    from wengert.primitives.shape import broadcast_to
    from wengert.transforms._ir import Program, Var
    f64 = np.dtype(np.float64)
    x = Var(0, (3,), f64)
    z, s, y, big = Var(1, (3,), f64), Var(2, (), f64), Var(3, (3,), f64), Var(4, (300, 300), f64)
    eqns = [_vectorize._eqn(broadcast_to, (np.asarray(2.0),), {"shape": (3,)}, (z,), None),
            _vectorize._eqn(sum_, (z,), {"axis": None, "keepdims": False}, (s,), None),
            _vectorize._eqn(E.multiply, (x, s), {}, (y,), None),
            _vectorize._eqn(E.add, (np.ones((300, 300)), np.ones((300, 300))), {}, (big,), None)]
    folded = _vectorize.fold_constants(Program([x], eqns, [y, big]))
    assert [e.prim for e in folded.eqns] == [E.multiply, E.add]    # the sum of the broadcast is 6.0
    xv = rng.normal(size=3)
    got = _run(folded)(xv)
    np.testing.assert_array_equal(got[0], 6.0 * xv)
    np.testing.assert_array_equal(got[1], 2.0)


def test_a_read_of_a_gather_is_one_gather():
    # the lists spelling's backward read the softmax's cotangent at the lanes through two gathers,
    # and those through two more
    a, bb, wts = _tied_columns()
    f = workloads.w1_spellings_code(wnp, wg.Buffer)["loop[lists+stack, @]"]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
    made = {o.id: e for e in lowered.program.eqns for o in e.outs}
    for e in lowered.program.eqns:
        if e.prim.name == "getitem" and e.args[0].id in made:
            inner = made[e.args[0].id]
            index = inner.params.get("index") if inner.prim.name == "getitem" else ()
            assert not any(type(i) is np.ndarray for i in (index if type(index) is tuple else (index,)))
    fd_check(lambda b: f(a, b, wts), (bb,))


# --- a column read in two steps: a[..., k][:, j], a.T[k][j], np.split, np.moveaxis -----------------
@pytest.mark.parametrize("first, second", [
    ((Ellipsis, 3), (slice(None), 1)), ((slice(None), slice(None), slice(2, 3)), (slice(None), 1, 0)),
    ((2,), (1,)), ((slice(1, None, 2),), (slice(None, None, -1), 0)), ((-1, slice(None, None, -2)), (Ellipsis, -2)),
    ((slice(None), slice(3, 0, -1)), (slice(None), slice(None), 4)), ((slice(None), 2), ())])
def test_composed_basic_indices_read_what_the_two_reads_read(first, second):
    x = np.arange(4 * 5 * 6).reshape(4, 5, 6)
    index = _vectorize._composed_index(x.shape, first, second)
    np.testing.assert_array_equal(x[index if index is not None else ()], x[first][second])


@pytest.mark.parametrize("axes, index", [(None, (2, 1)), ((2, 0, 1), (3,)), ((0, 2, 1), (Ellipsis, 1, slice(None))),
                                         ((1, 0, 2), (slice(1, 3), 0))])
def test_a_read_of_a_transpose_reads_the_array(axes, index):
    x = np.arange(4 * 5 * 6).reshape(4, 5, 6)
    y = np.transpose(x, axes)
    perm = list(range(3))[::-1] if axes is None else list(axes)
    np.testing.assert_array_equal(x[_vectorize._permuted_index(index, y.shape, perm)], y[index])


def test_a_read_of_a_transpose_that_keeps_axes_out_of_order_is_left():
    assert _vectorize._permuted_index((0,), (6, 5, 4), [2, 1, 0]) is None   # x.T[0] keeps x's axes reversed
    assert _vectorize._permuted_index((Ellipsis, 1), (6, 4, 5), [2, 0, 1]) is None


@pytest.mark.parametrize("form", ["columns of a[..., k]", "np.split, enumerate", "np.moveaxis, iterate", "rows of a.T"])
def test_a_column_read_in_two_steps_is_read_and_scattered_as_one_read(form):
    # a batch's matrix read first (a[..., k], a split, a moved axis iterated, a row of a.T), then its
    # columns: the reads compose into a[:, j, k], and the backward's scatter of each batch's column
    # cotangents into zeros, added into a's at k, into one chain of writes into a's cotangent: the
    # program does not grow with the loop (it was a scatter per batch, then a stack of them: 102-175
    # equations at B = 8, 171-372 at B = 24; 2162 and 26.9x the hand-written gradient for the rows of
    # a.T at the seed's size)
    f = workloads.w1_loop_forms_code(wnp, wg.Buffer)[form]
    counts = []
    for b in (8, 24):
        a, bb, wts = w1_inputs(3, 4, 2, b)
        step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
        close(step(a, bb, wts), workloads.w1_hand_einsum(a, bb, wts), rtol=1e-9)
        counts.append(vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4).eqns)
    assert max(counts) <= 70, counts
    fd_check(lambda a: f(a, bb, wts), (a,))
    fd_check(lambda bb: f(a, bb, wts), (bb,))


def test_seed_001_read_as_rows_of_the_transposes_is_the_column_loop():
    # z[t, b] = ys[0].T[b] @ y.T[b]: each trip's read of a transpose is a read of the column, and the
    # transpose of its cotangent (a row scattered into zeros) a column scattered into zeros, which the
    # chain of writes folds: the program of the loop that reads ys[0][:, b] (was 233x the hand-written
    # gradient at T = 64: each trip added a transposed dense array into the cotangent)
    Wm, bm, xs, Hs, wts = _seed_001_inputs(6)
    f = workloads.w2_loop_forms_code(wnp, wg.Buffer, at=wg.at)["rows of y.T"]

    def columns(Wm, bm, xs, Hs, wts):
        ys = [Wm @ x + bm[:, None] for x in xs]
        T, B = len(ys), ys[0].shape[1]
        z = wg.Buffer.zeros((T, B), Wm.dtype)
        for t, y in enumerate(ys):
            for b in range(B):
                z[t, b] = ys[0][:, b] @ y[:, b]
        alpha = workloads.softmax_code(wnp)(z.freeze(), axis=0)
        return wnp.sum(wnp.sum(alpha[None, :, :] * Hs, axis=1) * wts)

    value, grads = workloads.w2_hand(Wm, bm, np.concatenate(xs, axis=1), Hs, wts)
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(Wm, bm, xs, Hs, wts), (value, grads), rtol=1e-9)
    lowered = vectorized_like_eager(f, Wm, bm, xs, Hs, wts, argnums=(0, 1), shrink=5)
    plain = wg.jit(wg.value_and_grad(columns, argnums=(0, 1))).lower(Wm, bm, xs, Hs, wts)
    assert lowered.code.splitlines()[1:] == plain.code.splitlines()[1:]
    fd_check(lambda Wm: f(Wm, bm, xs, Hs, wts), (Wm,))
    fd_check(lambda bm: f(Wm, bm, xs, Hs, wts), (bm,))


def test_seed_001_read_from_the_stacked_steps_is_the_column_loop():
    # Y = np.stack(ys); z[t, b] = np.dot(Y[0, :, b], Y[t, :, b]): a read of a stack at a step reads
    # that step's array, and the stack's backward, each step's row of Y's cotangent (a chain of
    # writes at (t, :, b)), is the chain of that step's writes: the column loop's program, where
    # every column's cotangent went through one sorted scatter-add into Y's (3.5x at T = 64)
    Wm, bm, xs, Hs, wts = _seed_001_inputs(7)
    f = workloads.w2_loop_forms_code(wnp, wg.Buffer, at=wg.at)["steps stacked, Y[t, :, b]"]
    value, grads = workloads.w2_hand(Wm, bm, np.concatenate(xs, axis=1), Hs, wts)
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(Wm, bm, xs, Hs, wts), (value, grads), rtol=1e-9)
    lowered = vectorized_like_eager(f, Wm, bm, xs, Hs, wts, argnums=(0, 1), shrink=5)
    columns = wg.jit(wg.value_and_grad(_seed_001_inline(b_outer=False), argnums=(0, 1))).lower(Wm, bm, xs, Hs, wts)
    names = sorted(e.prim.name for e in lowered.program.eqns)
    assert names == sorted(e.prim.name for e in columns.program.eqns), names   # the same equations, two swapped
    assert _count(lowered, "scatter_add") == 0
    fd_check(lambda Wm: f(Wm, bm, xs, Hs, wts), (Wm,))
    fd_check(lambda bm: f(Wm, bm, xs, Hs, wts), (bm,))


# --- columns kept 2-D: x[:, j:j+1, k] and their (1, n) @ (n, 1) products ------------------------------
def _unit_slice_reads(lowered):
    """The program's reads at a one-element slice of a longer axis (a column read on its own)."""
    found = 0
    for e in lowered.program.eqns:
        if e.prim.name == "getitem":
            index = e.params["index"] if type(e.params["index"]) is tuple else (e.params["index"],)
            found += any(type(i) is slice and i != slice(None) and len(range(n)[i]) == 1 < n
                         for i, n in zip(index, e.args[0].shape))
    return found


def test_columns_kept_two_dimensional_are_read_and_scattered_as_columns():
    # a[:, j:j+1, k] is a[:, j, k] reshaped, and its cotangent, added at the slice, is added at the int:
    # reads and scatters at varying slice bounds were one equation per column (seed 000 so written:
    # 2563 equations, 18x the hand-written gradient at the seed's size; seed 001: 25195, 12x)
    # Their products (1, W) @ (W, 1) are the columns' dot products, and the backward's products over
    # one element (g @ v.T) products by a number: the lanes' dot products are matmuls over the grid
    # and no (lanes, 1, W) @ (lanes, W, 1) product is left (2.5x the hand-written gradient at the seed's
    # size, 6x at 16x). (The sizes put more than 64 items in every class, as a few items batch
    # dot products as NumPy's matmul.)
    f = workloads.w1_loop_forms_code(wnp, wg.Buffer)["columns kept 2-D"]
    counts = []
    for b in (40, 56):
        a, bb, wts = w1_inputs(3, 4, 2, b)
        step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
        close(step(a, bb, wts), workloads.w1_hand_einsum(a, bb, wts), rtol=1e-9)
        lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
        assert _unit_slice_reads(lowered) == 0
        assert _count(lowered, "grid_dot") == 3 and not any("matmul" in e.prim.name for e in lowered.program.eqns)
        counts.append(lowered.eqns)
    assert counts[0] == counts[1], counts   # the program does not grow with the loop
    fd_check(lambda a: f(a, bb, wts), (a,))
    fd_check(lambda bb: f(a, bb, wts), (bb,))
    Wm, bm, xs, Hs, wts = _seed_001_inputs(8)
    f = workloads.w2_loop_forms_code(wnp, wg.Buffer, at=wg.at)["columns kept 2-D"]
    value, grads = workloads.w2_hand(Wm, bm, np.concatenate(xs, axis=1), Hs, wts)
    close(wg.jit(wg.value_and_grad(f, argnums=(0, 1)))(Wm, bm, xs, Hs, wts), (value, grads), rtol=1e-9)
    lowered = vectorized_like_eager(f, Wm, bm, xs, Hs, wts, argnums=(0, 1), shrink=5)
    assert _unit_slice_reads(lowered) == 0
    # ys[0]'s column, read by every step, takes its cotangents as the dot products' spelling does:
    # no row of a batched array read back per member (seed 001 at its size: 32,816 equations, 4x)
    assert len([e for e in lowered.program.eqns if e.prim.name == "getitem"
                and type((e.params["index"] if type(e.params["index"]) is tuple else (e.params["index"],))[0]) is int]) <= 2
    fd_check(lambda Wm: f(Wm, bm, xs, Hs, wts), (Wm,))


def test_two_column_reads_of_one_array_per_trip_scatter_their_cotangents_on_two_grids():
    """Seed 001 with the steps glued first, ``np.dot(Y[:, b], Y[:, t*B + b])``: each trip adds two
    cotangents into Y's, at b (every step again: summed) and at t*B + b (every column once), one
    class's members interleaved. Taken every other write, the chain is two scatters on grids (the
    repeated positions summed by the grid), not one sorted scatter-add of every lane's product (4x the hand-written
    gradient at the seed's size)."""
    Wm, bm, xs, Hs, wts = _seed_001_inputs(8)
    f = workloads.w2_loop_forms_code(wnp, wg.Buffer, at=wg.at)["glued, Y[:, t*B + b]"]
    value, grads = workloads.w2_hand(Wm, bm, np.concatenate(xs, axis=1), Hs, wts)
    close(wg.jit(wg.value_and_grad(f, argnums=(0, 1)))(Wm, bm, xs, Hs, wts), (value, grads), rtol=1e-9)
    lowered = vectorized_like_eager(f, Wm, bm, xs, Hs, wts, argnums=(0, 1), shrink=5)
    assert _count(lowered, "scatter_add") == 0 and _count(lowered, "grid_add") >= 1
    fd_check(lambda Wm: f(Wm, bm, xs, Hs, wts), (Wm,))
    fd_check(lambda bm: f(Wm, bm, xs, Hs, wts), (bm,))


@pytest.mark.parametrize("spelling", ["u.T @ v", "@"])
def test_a_transpose_that_moves_nothing_is_its_operand(spelling):
    """``u.T @ v`` of two vectors stages a transpose of u (and one of its cotangent) that moves
    nothing: dropped, the loop is ``u @ v``'s, each cotangent term one grid_rowsum (with them between
    the terms and the scatter, the terms stayed (lanes, w) products: 1.6x the hand-written gradient)."""
    n, w, r, b = 6, 5, 3, 4
    a, bb, wts = w1_inputs(n, w, r, b)
    f = workloads.w1_spellings_code(wnp, wg.Buffer)[workloads.spelling_name("Buffer", spelling)]
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=8)
    assert _count(lowered, "grid_rowsum") == 4 and _count(lowered, "grid_dot") == 1
    assert not _lane_products(lowered, n * r * b, w, prims=("multiply", "add"))
    fd_check(lambda bb: f(a, bb, wts), (bb,))


@pytest.mark.parametrize("index, shape", [((slice(None), slice(2, 3), 1), (4, 5, 6)), ((slice(3, 4),), (5, 2)),
                                          ((Ellipsis, slice(0, 1)), (3, 2)), ((slice(4, 5, 2), 0), (6, 3))])
def test_a_one_element_slice_reads_what_the_int_reads(index, shape):
    x = np.arange(int(np.prod(shape))).reshape(shape)
    ints = _vectorize._unit_slices_as_ints(index, shape)
    np.testing.assert_array_equal(x[ints].reshape(x[index].shape), x[index])
    assert _vectorize._unit_slices_as_ints((slice(None), 1), (4, 1)) is None   # nothing to change


@pytest.mark.parametrize("index", [(slice(None), np.array([2]), 1), (np.array([-1]), Ellipsis), (Ellipsis, np.array([3])),
                                   (slice(None), 1, np.array([0])), (slice(None), None, 2, None), (None, Ellipsis, 1)])
def test_an_index_array_of_one_int_and_new_axes_read_what_the_basic_index_reads(index):
    x = np.arange(4 * 5 * 6).reshape(4, 5, 6)
    basic = _vectorize._basic_form(index, x.shape)
    np.testing.assert_array_equal(x[basic].reshape(x[index].shape), x[index])
    assert _vectorize._basic_form((np.array([1]), slice(None), 2), x.shape) is None   # NumPy moves the array's axis


@pytest.mark.parametrize("form", ["np.take, then the column", "list index, raveled"])
def test_columns_read_at_index_arrays_of_one_int_are_the_column_loop(form):
    # np.take(b, i, axis=1) reads b[:, array(i)], b[:, [i], k] reads b[:, i:i+1, k]: the same elements
    # as b[:, i] and b[:, i, k], so equal reads are one read (CSE keys a small integer index by its
    # value, not its identity) and the reads and their cotangents are at ints: the column loop's
    # program (was 6302 and 5578 equations, 134x and 49x the hand-written gradient at the seed's
    # size: each trip's read and scatter on its own)
    f = workloads.w1_loop_forms_code(wnp, wg.Buffer)[form]
    columns = workloads.w1_loop_forms_code(wnp, wg.Buffer)["columns of a[..., k]"]
    a, bb, wts = w1_inputs(3, 4, 2, 12)
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)))
    close(step(a, bb, wts), workloads.w1_hand_einsum(a, bb, wts), rtol=1e-9)
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
    assert lowered.eqns <= wg.jit(wg.value_and_grad(columns, argnums=(0, 1))).lower(a, bb, wts).eqns, lowered.eqns
    assert not any(type(i) is np.ndarray and i.size == 1 for e in lowered.program.eqns if e.prim.name == "getitem"
                   for i in (e.params["index"] if type(e.params["index"]) is tuple else (e.params["index"],)))
    fd_check(lambda bb: f(a, bb, wts), (bb,))


@pytest.mark.parametrize("read", [lambda x, i, k: x[:, i, k, None], lambda x, i, k: x[:, [i], k],
                                  lambda x, i, k: x[:, i, k:k + 1]], ids=["new axis", "list", "slice"])
def test_columns_kept_two_dimensional_multiply_and_sum_as_columns(read):
    # an elementwise operation on columns kept (W, 1), and a sum of all of such a product, run on the
    # (W,) columns and are reshaped after: the lanes' products are (lanes, W) products the grids take
    # (they were (lanes, W, 1): 63-64 equations, 3.5x the hand-written gradient at the seed's size)
    def f(a, b, wts):
        W, R, B = a.shape
        N = b.shape[1]
        out = wg.Buffer.zeros((N, R, B), a.dtype)
        for k in range(B):
            for j in range(R):
                aj = read(a, j, k)
                for i in range(N):
                    bi = read(b, i, k)
                    out[i, j, k] = wnp.sum(bi * aj) / wnp.sqrt(wnp.sum(bi * bi) * wnp.sum(aj * aj))
        return wnp.sum(workloads.softmax_code(wnp)(out.freeze(), axis=0) * wts)

    a, bb, wts = w1_inputs(3, 4, 2, 12)
    close(wg.jit(wg.value_and_grad(f, argnums=(0, 1)))(a, bb, wts), workloads.w1_hand_einsum(a, bb, wts), rtol=1e-9)
    lowered = vectorized_like_eager(f, a, bb, wts, argnums=(0, 1), shrink=4)
    assert not any(len(e.outs[0].shape) == 3 and e.outs[0].shape[-1] == 1 and e.prim.name == "multiply"
                   for e in lowered.program.eqns), lowered.as_text()
    fd_check(lambda a: f(a, bb, wts), (a,))

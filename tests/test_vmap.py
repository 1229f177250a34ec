"""vmap: every row of the gradient table vmapped against an explicit loop, axes handling, nesting,
composition with grad both ways, the per-example fallback and its warnings."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp

from test_numpy_grads import CASE_IDS, CASES, Arg, rng_for
from transform_checks import inside_vmap_equals_loop, no_warnings

# rows that cannot be batched at all: the result's size depends on the values of one example, or
# (piecewise) each function is applied to the elements one example's conditions select
RAGGED = {"x[x > 0]", "unique", "unique axis=1", "piecewise", "piecewise otherwise", "piecewise constant",
          "trim_zeros", "roots", "polydiv", "polydiv shorter", "unique_values", "unique_all", "unique_counts",
          "unique_inverse", "union1d", "intersect1d", "intersect1d return_indices", "setdiff1d", "setxor1d"}
# rows vmap runs once per example, with a warning: np.histogram returns a tuple (counts, edges)
LOOPED = {"histogram edges", "histogram_bin_edges", "histogramdd", "histogram2d"}


def _warnings_expected(name, caught):
    """No warning, except vmap's per-example warning for the LOOPED rows (and the result is right)."""
    messages = [str(w.message) for w in caught]
    if name in LOOPED:
        assert messages and all("once per example" in m for m in messages), messages
    else:
        assert not messages, messages


def _examples(name, count=3):
    fn, specs = CASES[name]
    rng = rng_for(name)
    ex = [[s.draw(rng) if isinstance(s, Arg) else s for s in specs] for _ in range(count)]
    batched = [isinstance(s, Arg) for s in specs]
    args = [np.stack([e[i] for e in ex]) if b else specs[i] for i, b in enumerate(batched)]
    axes = tuple(0 if b else None for b in batched)
    return fn, ex, args, axes


def assert_batched_equals_loop(out, refs):
    leaves, treedef = wg.tree.flatten(out)
    ref_leaves = [wg.tree.flatten(r)[0] for r in refs]
    assert treedef == wg.tree.flatten(refs[0])[1]
    for k, leaf in enumerate(leaves):
        expected = np.stack([np.asarray(r[k]) for r in ref_leaves])
        assert np.shape(leaf) == expected.shape
        np.testing.assert_allclose(leaf, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in CASE_IDS if n not in RAGGED])
def test_vmap_of_every_table_row_equals_a_loop(name):
    fn, ex, args, axes = _examples(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = wg.vmap(fn, in_axes=axes)(*args)
    assert_batched_equals_loop(out, [fn(*e) for e in ex])
    _warnings_expected(name, caught)


def test_ragged_result_is_an_error_not_a_wrong_answer():
    x = np.array([[1.0, -1.0], [1.0, 1.0]])
    with pytest.raises(ValueError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wg.vmap(lambda x: x[x > 0])(x)


def test_in_axes_none_negative_and_pytrees():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))      # batch on axis -1 (size 4)
    p = {"w": rng.standard_normal(3), "b": rng.standard_normal((4, 2))}   # b batched on axis 0
    c = rng.standard_normal(3)

    def f(x, p, c):
        return {"y": wnp.sum(x * p["w"] * c) + p["b"], "z": x * 2}

    out = wg.vmap(f, in_axes=(-1, {"w": None, "b": 0}, None), out_axes={"y": 0, "z": 1})(x, p, c)
    for i in range(4):
        ref = f(x[:, i], {"w": p["w"], "b": p["b"][i]}, c)
        np.testing.assert_allclose(out["y"][i], ref["y"])
        np.testing.assert_allclose(out["z"][:, i], ref["z"])


def test_unbatched_output_is_broadcast_and_errors_are_clear():
    out = wg.vmap(lambda x, y: y * 2, in_axes=(0, None))(np.ones((3, 2)), np.arange(2.0))
    np.testing.assert_array_equal(out, np.tile([0.0, 2.0], (3, 1)))
    with pytest.raises(ValueError, match="inconsistent batch sizes"):
        wg.vmap(lambda a, b: a + b)(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="no argument"):
        wg.vmap(lambda a: a, in_axes=None)(np.ones(3))


@pytest.mark.parametrize("shapes", [((3,), (3, 2)), ((2, 3), (3,)), ((3,), (3,)), ((2, 3), (3, 4)),
                                    ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4))])
@pytest.mark.parametrize("batched", [(True, True), (True, False), (False, True)])
def test_matmul_dot_and_friends_all_rank_combinations(shapes, batched):
    rng = np.random.default_rng(1)
    sa, sb = shapes
    a = rng.standard_normal(((4,) if batched[0] else ()) + sa)
    b = rng.standard_normal(((4,) if batched[1] else ()) + sb)
    axes = tuple(0 if x else None for x in batched)
    fns = [lambda a, b: a @ b, lambda a, b: wnp.matmul(a, b)]
    if len(sb) <= 2 or len(sa) == 1:
        fns.append(lambda a, b: wnp.dot(a, b))
    if sa[-1] == sb[0]:
        fns.append(lambda a, b: wnp.tensordot(a, b, axes=1))
    fns.append(lambda a, b: wnp.outer(a, b))
    for fn in fns:
        out = wg.vmap(fn, in_axes=axes)(a, b)
        refs = [fn(a[i] if batched[0] else a, b[i] if batched[1] else b) for i in range(4)]
        assert_batched_equals_loop(out, refs)


def test_nested_vmap_is_the_seed_cosine_similarity():
    rng = np.random.default_rng(2)
    a, b = rng.random((6, 4, 3)), rng.random((6, 5, 3))

    def cosinesim(u, v):
        return wnp.dot(u, v) / (wnp.sqrt(wnp.sum(u ** 2)) * wnp.sqrt(wnp.sum(v ** 2)))

    S = wg.vmap(wg.vmap(wg.vmap(cosinesim, in_axes=(1, None)), in_axes=(None, 1), out_axes=1),
                in_axes=(2, 2), out_axes=2)(b, a)
    ref = np.array([[[cosinesim(b[:, i, k], a[:, j, k]) for k in range(3)] for j in range(4)]
                    for i in range(5)])
    np.testing.assert_allclose(S, ref, rtol=1e-12)


def _loss(p, x, y):
    return (wnp.tanh(wnp.dot(x, p["w"])) + p["b"] - y) ** 2


def test_per_example_gradients_vmap_of_grad():
    rng = np.random.default_rng(3)
    p = {"w": rng.standard_normal(3), "b": np.float64(0.1)}
    xs, ys = rng.standard_normal((6, 3)), rng.standard_normal(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # batched: grad of the sum over examples, no loop
        per = wg.vmap(wg.grad(_loss), in_axes=(None, 0, 0))(p, xs, ys)
        per_x = wg.vmap(wg.grad(_loss, argnums=(0, 1)), in_axes=(None, 0, 0), out_axes=0)(p, xs, ys)[1]
    for i in range(6):
        np.testing.assert_allclose(per_x[i], wg.grad(_loss, argnums=1)(p, xs[i], ys[i]), rtol=1e-12)
    for i in range(6):
        ref = wg.grad(_loss)(p, xs[i], ys[i])
        np.testing.assert_allclose(per["w"][i], ref["w"], rtol=1e-12)
        np.testing.assert_allclose(per["b"][i], ref["b"], rtol=1e-12)


def test_grad_of_vmap_is_one_batched_tape_and_matches_the_loop():
    rng = np.random.default_rng(4)
    p = {"w": rng.standard_normal(3), "b": np.float64(0.1)}
    xs, ys = rng.standard_normal((6, 3)), rng.standard_normal(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: the batched path records on the outer tape
        g = wg.grad(lambda p: wnp.sum(wg.vmap(_loss, in_axes=(None, 0, 0))(p, xs, ys)))(p)
    ref = wg.grad(lambda p: sum(_loss(p, xs[i], ys[i]) for i in range(6)))(p)
    np.testing.assert_allclose(g["w"], ref["w"], rtol=1e-12)
    np.testing.assert_allclose(g["b"], ref["b"], rtol=1e-12)
    wg.check_grads(lambda p: wnp.sum(wg.vmap(_loss, in_axes=(None, 0, 0))(p, xs, ys)), (p,), order=2)


def test_jvp_of_vmap_and_vmap_of_jvp():
    rng = np.random.default_rng(5)
    xs, ts = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    f = lambda x: wnp.sin(x) * wnp.sum(x ** 2)
    _, t1 = wg.jvp(wg.vmap(f), (xs,), (ts,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t2 = wg.vmap(lambda x, t: wg.jvp(f, (x,), (t,))[1])(xs, ts)
    ref = np.stack([wg.jvp(f, (xs[i],), (ts[i],))[1] for i in range(4)])
    np.testing.assert_allclose(t1, ref, rtol=1e-12)
    np.testing.assert_allclose(t2, ref, rtol=1e-12)


def test_primitive_without_rule_loops_with_a_warning_naming_it():
    from wengert.core.trace import Primitive
    inverse_2d = Primitive("test.inverse_2d", _inverse_2d,
                           vjp=(lambda g, ans, x: -(ans.T @ g @ ans.T),))
    x = np.random.default_rng(6).standard_normal((3, 2, 2)) + 3 * np.eye(2)
    with pytest.warns(UserWarning, match="no batching rule for test.inverse_2d"):
        out = wg.vmap(inverse_2d)(x)
    np.testing.assert_allclose(out, np.linalg.inv(x))
    with pytest.warns(UserWarning, match="no batching rule for test.inverse_2d"):
        grads = wg.vmap(wg.grad(lambda x: wnp.sum(inverse_2d(x))))(x)
    np.testing.assert_allclose(grads, [wg.grad(lambda x: wnp.sum(wnp.linalg.inv(x)))(xi) for xi in x])


def _inverse_2d(x):
    if x.ndim != 2:
        raise ValueError("one matrix at a time")
    return np.linalg.inv(x)


def test_python_control_flow_on_batched_values_falls_back_to_a_loop():
    def f(x):
        if wnp.sum(x) > 0:
            return x * 2
        return -x
    x = np.array([[1.0, 2.0], [-3.0, 1.0]])
    with pytest.warns(UserWarning, match="once per example"):
        out = wg.vmap(f)(x)
    np.testing.assert_array_equal(out, [[2.0, 4.0], [3.0, -1.0]])


def test_batched_indices_and_comparisons():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 4, 3))
    i, j = rng.integers(0, 4, (5, 2)), rng.integers(0, 3, (5, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(wg.vmap(lambda x, i, j: x[i, j])(x, i, j),
                                      [x[k][i[k], j[k]] for k in range(5)])
        np.testing.assert_array_equal(wg.vmap(lambda x, i: x[i])(x, i), [x[k][i[k]] for k in range(5)])
        np.testing.assert_array_equal(wg.vmap(lambda x: x[wnp.argmax(x[:, 0])])(x),
                                      [x[k][np.argmax(x[k][:, 0])] for k in range(5)])
        np.testing.assert_array_equal(wg.vmap(lambda x: wnp.where(x > 0, x, 0.0))(x), np.maximum(x, 0))
    g = wg.grad(lambda x: wnp.sum(wg.vmap(lambda x, i: x[i] ** 2)(x, i)))(x)
    ref = np.zeros_like(x)
    for k in range(5):
        np.add.at(ref[k], i[k], 2 * x[k][i[k]])
    np.testing.assert_allclose(g, ref)


def test_buffer_writes_inside_vmap_are_batched():
    def doubled(x):
        b = wg.Buffer.zeros((3,), x.dtype)
        for i in range(3):
            b[i] = x[i] * 2
        return b.freeze()
    x = np.random.default_rng(8).standard_normal((4, 3))
    with no_warnings():
        np.testing.assert_allclose(wg.vmap(doubled)(x), 2 * x)
        g = wg.grad(lambda x: wnp.sum(wg.vmap(doubled)(x) ** 2))(x)
    np.testing.assert_allclose(g, 8 * x)


def test_leaked_batch_tracer_is_refused():
    leaked = []
    wg.vmap(lambda x: leaked.append(x) or x)(np.ones((2, 3)))
    with pytest.raises(wg.LeakedTracerError):
        leaked[0] * 2


def test_code_the_batched_path_cannot_run_falls_back_with_a_warning():
    def doubled_if_positive(x):
        return x * 2 if x[0] > 0 else -x   # Python control flow on a batched value
    x = np.random.default_rng(8).standard_normal((4, 3))
    expected = np.stack([r * 2 if r[0] > 0 else -r for r in x])
    with pytest.warns(UserWarning, match="once per example"):
        np.testing.assert_allclose(wg.vmap(doubled_if_positive)(x), expected)
    with pytest.raises(ValueError), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wg.vmap(lambda r: r @ np.ones(5))(x)   # the user's own error still surfaces


def test_vmap_of_grad_nested_and_non_scalar():
    x = np.random.default_rng(9).standard_normal((4, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_allclose(wg.vmap(wg.vmap(wg.grad(lambda s: s ** 3)))(x), 3 * x ** 2)
        with pytest.raises(wg.NonScalarOutputError):
            wg.vmap(wg.grad(lambda s: s * 2))(x)
    g = wg.grad(lambda x: wnp.sum(wg.vmap(wg.grad(lambda s: wnp.sum(wnp.sin(s))))(x)))(x)
    np.testing.assert_allclose(g, -np.sin(x))


# --- fused nested vmaps (an inner vmap on values of the open batch level runs at that level) ---
def _fused_count(monkeypatch):
    from wengert.transforms import batching
    counts = {"fused": 0, "unfused": 0}
    orig = batching._run_fused

    def spy(*a):
        try:
            out = orig(*a)
        except batching._Unfuse:
            counts["unfused"] += 1
            raise
        counts["fused"] += 1
        return out

    monkeypatch.setattr(batching, "_run_fused", spy)
    return counts


@pytest.mark.parametrize("name", [n for n in CASE_IDS if n not in RAGGED])
def test_nested_vmap_of_every_table_row_equals_a_double_loop(name):
    """vmap(vmap(fn)) fuses the inner level (or falls back to an unfused one): same values."""
    fn, specs = CASES[name]
    rng = rng_for(name)
    ex = [[[s.draw(rng) if isinstance(s, Arg) else s for s in specs] for _ in range(2)] for _ in range(3)]
    batched = [isinstance(s, Arg) for s in specs]
    args = [np.stack([np.stack([e[j][i] for j in range(2)]) for e in ex]) if b else specs[i]
            for i, b in enumerate(batched)]
    axes = tuple(0 if b else None for b in batched)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = wg.vmap(wg.vmap(fn, in_axes=axes), in_axes=axes)(*args)
    leaves = wg.tree.flatten(out)[0]
    for k, leaf in enumerate(leaves):
        expected = np.stack([np.stack([np.asarray(wg.tree.flatten(fn(*e[j]))[0][k]) for j in range(2)])
                             for e in ex])
        assert np.shape(leaf) == expected.shape
        np.testing.assert_allclose(leaf, expected, rtol=1e-12, atol=1e-12)
    # the gradient through the fused levels is the unfused one
    from wengert.transforms import batching
    nums = tuple(i for i, b in enumerate(batched) if b and np.issubdtype(np.asarray(args[i]).dtype, np.floating))
    if not nums or not all(np.issubdtype(np.asarray(leaf).dtype, np.floating) for leaf in leaves):
        return
    weights = [np.cos(np.arange(np.size(leaf))).reshape(np.shape(leaf)) for leaf in leaves]

    def loss(*a):
        outs = wg.tree.flatten(wg.vmap(wg.vmap(fn, in_axes=axes), in_axes=axes)(*a))[0]
        return sum(wnp.sum(o * w) for o, w in zip(outs, weights))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            batching.FUSE = False
            ref = wg.grad(loss, argnums=nums)(*args)
        except Exception:   # not differentiable (a row testing an error, integer outputs, ...)
            return
        finally:
            batching.FUSE = True
        got = wg.grad(loss, argnums=nums)(*args)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)


def _cos(u, v):
    return wnp.dot(u, v) / (wnp.sqrt(wnp.sum(u ** 2)) * wnp.sqrt(wnp.sum(v ** 2)))


@pytest.mark.parametrize("b_size", [3, 70])  # 70: past the matmul batch limit, einsum instead
def test_fused_seed_cosine_similarity_and_both_grad_orders(monkeypatch, b_size):
    from wengert.transforms import batching
    rng = np.random.default_rng(7)
    a, b = rng.random((6, 4, b_size)), rng.random((6, 5, b_size))
    pair = wg.vmap(wg.vmap(wg.vmap(_cos, in_axes=(1, None)), in_axes=(None, 1), out_axes=1),
                   in_axes=(2, 2), out_axes=2)
    counts = _fused_count(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        S = pair(b, a)
    assert counts == {"fused": 2, "unfused": 0}
    ref = np.array([[[_cos(b[:, i, k], a[:, j, k]) for k in range(b_size)] for j in range(4)]
                    for i in range(5)])
    np.testing.assert_allclose(S, ref, rtol=1e-12)
    w = rng.standard_normal(S.shape)

    def loss(a, b):
        return wnp.sum(pair(b, a) * w)

    monkeypatch.setattr(batching, "FUSE", False)
    ga_ref, gb_ref = wg.grad(loss, argnums=(0, 1))(a, b)
    monkeypatch.setattr(batching, "FUSE", True)
    ga, gb = wg.grad(loss, argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, ga_ref, rtol=1e-10)
    np.testing.assert_allclose(gb, gb_ref, rtol=1e-10)
    if b_size == 3:
        wg.check_grads(loss, (a, b), order=1)
        # vmap of grad inside a vmap: per-example gradients of each column pair
        g = wg.vmap(wg.vmap(wg.grad(_cos), in_axes=(1, None)), in_axes=(None, 1))(b[..., 0], a[..., 0])
        for j in range(4):
            for i in range(5):
                np.testing.assert_allclose(g[j, i], wg.grad(_cos)(b[:, i, 0], a[:, j, 0]), rtol=1e-12)


def test_fused_vmap_axes_closures_and_broadcast_outputs(monkeypatch):
    rng = np.random.default_rng(8)
    x, y, c = rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 3)), rng.standard_normal(4)
    counts = _fused_count(monkeypatch)

    def outer(xi, yi):  # xi (4, 5) -> its columns; yi (5,) is unbatched in the inner vmap
        inner = wg.vmap(lambda col, row: wnp.tanh(col * c) @ wnp.ones(4) + row * wnp.sum(xi) + wnp.max(col),
                        in_axes=(-1, None), out_axes=0)
        return inner(xi, yi)

    out = wg.vmap(outer, in_axes=(0, 1), out_axes=-1)(x, y)
    ref = np.stack([np.stack([np.tanh(x[i][:, k] * c) @ np.ones(4) + y[:, i] * np.sum(x[i]) + np.max(x[i][:, k])
                              for k in range(5)]) for i in range(3)], axis=-1)
    np.testing.assert_allclose(out, ref, rtol=1e-12)
    assert counts["fused"] == 1

    # an inner output that does not vary along the outer axis is broadcast along it; out_axes=1
    e = rng.standard_normal((2, 3))
    f = wg.vmap(lambda r: wg.vmap(lambda e, s: wnp.sin(e) * 2.0, in_axes=(0, None), out_axes=1)(e, r))
    np.testing.assert_allclose(f(y), np.broadcast_to((np.sin(e) * 2.0).T, (5, 3, 2)), rtol=1e-12)
    assert counts["fused"] == 2


def test_unfusable_inner_run_falls_back_to_its_own_level(monkeypatch):
    """An operation the fused level has no rule for (concatenate, a batched index, an unbatched
    output) reruns the inner vmap as its own level: same answer, no loop warning."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 4, 2))
    counts = _fused_count(monkeypatch)

    def inner(v):
        return wnp.concatenate([v, v * 2.0])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = wg.vmap(wg.vmap(inner, in_axes=1))(x)
    np.testing.assert_allclose(out, np.stack([np.stack([inner(x[i][:, k]) for k in range(2)]) for i in range(3)]))
    assert counts["unfused"] == 1
    idx = np.array([[0, 1], [1, 0], [0, 0]])
    with pytest.warns(UserWarning, match="indexing with indices batched elsewhere"):
        out = wg.vmap(lambda r, i: wg.vmap(lambda v: v[i])(r))(x, idx)
    np.testing.assert_allclose(out, np.stack([x[k][:, idx[k]] for k in range(3)]))
    from wengert.transforms import batching
    f = wg.vmap(lambda r: wg.vmap(lambda v: v * 2.0, out_axes=None)(r))
    # out_axes=None for an output that depends on the batch: the unfused run's answer, which is an
    # error (it used to be caught as a generic failure of the batched run, and the loop then kept
    # example 0's value only)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="out_axes is None for an output that depends on the batch"):
            f(x)
        monkeypatch.setattr(batching, "FUSE", False)
        with pytest.raises(ValueError, match="out_axes is None for an output that depends on the batch"):
            f(x)


def test_fused_vmap_under_grad_and_jvp_matches_unfused(monkeypatch):
    from wengert.transforms import batching
    rng = np.random.default_rng(10)
    w = rng.standard_normal((4, 3))
    xs = rng.standard_normal((5, 2, 3))

    def model(w, xs):
        per = wg.vmap(lambda xb: wg.vmap(lambda x: wnp.sum(wnp.tanh(w @ x) ** 2))(xb))
        return wnp.sum(per(xs))

    monkeypatch.setattr(batching, "FUSE", False)
    g_ref = wg.grad(model)(w, xs)
    t_ref = wg.jvp(lambda w: model(w, xs), (w,), (np.ones_like(w),))
    monkeypatch.setattr(batching, "FUSE", True)
    np.testing.assert_allclose(wg.grad(model)(w, xs), g_ref, rtol=1e-12)
    t = wg.jvp(lambda w: model(w, xs), (w,), (np.ones_like(w),))
    np.testing.assert_allclose(t[0], t_ref[0], rtol=1e-12)
    np.testing.assert_allclose(t[1], t_ref[1], rtol=1e-12)
    wg.check_grads(model, (w, xs), order=2)


@pytest.mark.parametrize("inner,outer", [((0, None), (None, 0)), ((None, 0), (0, None)), ((0, 0), (0, None)),
                                         ((0, None), (0, 0)), ((0, 0), (0, 0)), ((None, 0), (0, 0)),
                                         ((0, None), (0, 0))])
def test_fused_batched_vector_dots_every_axis_pattern(inner, outer):
    """The fused dot of two batched vectors is a matmul when the batch axes allow, else an einsum."""
    rng = np.random.default_rng(11)

    def draw(i_ax, o_ax):   # vectors of 5; outer batch 3, inner batch 4
        return rng.standard_normal(((3,) if o_ax == 0 else ()) + ((4,) if i_ax == 0 else ()) + (5,))

    x, y = draw(inner[0], outer[0]), draw(inner[1], outer[1])
    f = wg.vmap(lambda p, q: wg.vmap(wnp.dot, in_axes=inner)(p, q), in_axes=outer)

    def one(i, j):
        p = x[i] if outer[0] == 0 else x
        q = y[i] if outer[1] == 0 else y
        return np.dot(p[j] if inner[0] == 0 else p, q[j] if inner[1] == 0 else q)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = f(x, y)
    np.testing.assert_allclose(out, np.array([[one(i, j) for j in range(4)] for i in range(3)]), rtol=1e-12)
    from wengert.transforms import batching

    def loss(p, q):
        return wnp.sum(f(p, q) ** 2)

    g = wg.grad(loss, argnums=(0, 1))(x, y)
    old = batching.FUSE
    batching.FUSE = False
    try:
        g_ref = wg.grad(loss, argnums=(0, 1))(x, y)
    finally:
        batching.FUSE = old
    np.testing.assert_allclose(g[0], g_ref[0], rtol=1e-12)
    np.testing.assert_allclose(g[1], g_ref[1], rtol=1e-12)


def test_user_code_cannot_swallow_the_fused_abort():
    """Aborting a fused run is not an Exception: an ``except Exception`` in the vmapped function
    does not turn it into a different answer."""
    x = np.arange(12.0).reshape(3, 2, 2)

    def inner(v):
        try:
            return wnp.concatenate([v, v])
        except Exception:   # pragma: no cover - would be a wrong answer
            return v * 0.0

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = wg.vmap(wg.vmap(inner))(x)
    np.testing.assert_array_equal(out, np.concatenate([x, x], axis=-1))


# --- every primitive has a batching rule ------------------------------------------------------------
TAPE_ONLY = {"setitem", "buffer_snapshot"}  # recorded only by in-place writes and Buffer on a tape;
# under vmap those write functionally (scatter_set) instead


def test_every_primitive_has_a_batching_rule():
    import wengert.nn  # noqa: F401
    import wengert.numpy.fft  # noqa: F401
    import wengert.scipy.linalg  # noqa: F401
    import wengert.scipy.signal  # noqa: F401
    import wengert.scipy.special  # noqa: F401
    import wengert.scipy.stats  # noqa: F401
    from wengert.primitives._table import PRIMITIVES
    missing = sorted(name for name, p in PRIMITIVES.items()
                     if name not in TAPE_ONLY and p.batch is None)
    assert not missing, f"primitives without a batching rule: {missing}"


def test_integer_casts_and_counts_keep_the_batch():
    """Functions that read values without differentiating them must not read the whole batch as one
    example (a silently wrong answer)."""
    x = np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(wg.vmap(lambda r: r.astype(int) == 1)(x), x.astype(int) == 1)
        np.testing.assert_array_equal(wg.vmap(lambda r: wnp.astype(r, np.int32) * 2)(x), x.astype(np.int32) * 2)
        np.testing.assert_allclose(wg.vmap(lambda r: wnp.linalg.norm(r, 0))(x), [2.0, 1.0])
        grads = wg.vmap(wg.grad(lambda r: wnp.sum(r * r.astype(int))))(x + 0.5)
    np.testing.assert_allclose(grads, (x + 0.5).astype(int))


# --- per-example gradients over several batch axes: vmap(vmap(grad(f))) --------------------------

def test_vmap_of_vmap_of_grad_is_one_batched_gradient():
    rng = np.random.default_rng(11)
    b, a = rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    calls = []

    def cos(u, v):
        calls.append(1)
        return _cos(u, v)

    both = wg.grad(cos, argnums=(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = wg.vmap(wg.vmap(both, in_axes=(1, None), out_axes=1), in_axes=(None, 1), out_axes=-1)(b, a)
    assert len(calls) == 1   # one batched run, not one per pair
    for k in range(2):
        expected = np.stack([np.stack([wg.grad(_cos, argnums=(0, 1))(b[:, i], a[:, j])[k] for i in range(4)], axis=1)
                             for j in range(3)], axis=-1)
        np.testing.assert_allclose(g[k], expected, rtol=1e-12, atol=1e-12)


def test_three_levels_of_per_example_gradients_with_pytree_parameters_under_grad():
    rng = np.random.default_rng(12)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    xs = rng.standard_normal((2, 3, 4, 3))   # levels on axes 0, 2 and 1 (the innermost)

    def loss(p, x):
        return wnp.sum(wnp.tanh(x @ p["w"] + p["b"]) ** 2)

    per_example = wg.vmap(wg.vmap(wg.vmap(wg.grad(loss), in_axes=(None, 0)), in_axes=(None, 1)),
                          in_axes=(None, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = per_example(params, xs)
    expected = [[[wg.grad(loss)(params, xs[i, k, j]) for k in range(3)] for j in range(4)] for i in range(2)]
    for key in params:
        np.testing.assert_allclose(g[key], np.array([[[e[key] for e in row] for row in plane] for plane in expected]),
                                   rtol=1e-12, atol=1e-12)

    def penalty(p):
        return wnp.sum(per_example(p, xs)["b"] ** 2)

    def penalty_loop(p):
        return sum(wnp.sum(wg.grad(loss)(p, xs[i, k, j])["b"] ** 2)
                   for i in range(2) for j in range(4) for k in range(3))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        outer = wg.grad(penalty)(params)
    reference = wg.grad(penalty_loop)(params)
    for key in params:
        np.testing.assert_allclose(outer[key], reference[key], rtol=1e-10)


def test_nested_per_example_gradients_keep_the_errors_of_grad_and_vmap():
    x = np.ones((3, 4, 2))
    with pytest.raises(wg.NonScalarOutputError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wg.vmap(wg.vmap(wg.grad(lambda v: v * 2)))(x)
    with pytest.raises(ValueError, match="inconsistent batch sizes"):
        wg.vmap(wg.vmap(wg.grad(lambda u, v: wnp.sum(u * v))), in_axes=(0, 1))(x, x)


@pytest.mark.parametrize("reduce", [lambda v: wnp.max(v), lambda v: wnp.max(v, axis=0),
                                    lambda v: wnp.min(v, axis=1, keepdims=True)],
                         ids=["max", "max axis 0", "min axis 1 keepdims"])
def test_vmap_of_jvp_through_extrema_with_ties(reduce):
    """Tied elements share the tangent; the shares are found per example, with as many examples
    as rows, so that the batch axis cannot pass for the reduced one."""
    rng = np.random.default_rng(13)
    x, t = rng.standard_normal((3, 3, 4)), rng.standard_normal((3, 3, 4))
    x[0, 1] = x[0, 0]
    x[2, :, 1] = x[2, 0, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = wg.vmap(lambda a, b: wg.jvp(reduce, (a,), (b,))[1])(x, t)
        grads = wg.vmap(wg.grad(lambda a: wnp.sum(reduce(a) ** 2)))(x)
    np.testing.assert_allclose(out, np.stack([wg.jvp(reduce, (a,), (b,))[1] for a, b in zip(x, t)]), rtol=1e-12)
    np.testing.assert_allclose(grads, np.stack([wg.grad(lambda a: wnp.sum(reduce(a) ** 2))(a) for a in x]), rtol=1e-12)


# --- grad inside vmap: a tape that records batched values ---------------------------------------


def _sum_of_outputs(fn):
    def total(*args):
        leaves = wg.tree.flatten(fn(*args))[0]
        return sum(wnp.sum(wnp.real(leaf) * 1.0) for leaf in leaves
                   if np.issubdtype(leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype, np.inexact))
    return total


@pytest.mark.parametrize("opened_inside", [False, True], ids=["vmap(grad)", "grad inside vmap"])
@pytest.mark.parametrize("name", [n for n in CASE_IDS if n not in RAGGED])
def test_gradients_of_every_table_row_under_vmap_equal_a_loop(name, opened_inside):
    """vmap(grad(f)) itself is run as the gradient of a vmapped f (_per_example_grad); behind a
    wrapper the grad is opened inside vmap and its backward pass runs the VJP rules on batched values
    (sort's included: x[argsort(x)] reads indices that differ per example, and its transpose is a
    scatter with those indices). Both are batched for every row."""
    fn, ex, args, axes = _examples(name)
    floats = tuple(i for i, ax in enumerate(axes)
                   if ax is not None and np.issubdtype(np.asarray(ex[0][i]).dtype, np.inexact))
    if not floats:
        pytest.skip("no floating-point argument to differentiate")
    per_example = wg.grad(_sum_of_outputs(fn), argnums=floats)
    batched = (lambda *a: per_example(*a)) if opened_inside else per_example
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = wg.vmap(batched, in_axes=axes)(*args)
    assert_batched_equals_loop(out, [per_example(*e) for e in ex])
    _warnings_expected(name, caught)


def test_jacobians_hessians_and_vjps_inside_vmap_are_batched():
    rng = np.random.default_rng(14)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))

    def f(v):
        return wnp.sum(wnp.tanh(v) ** 2 * wnp.sin(v[::-1])) + wnp.dot(v, v) * wnp.exp(v[0])

    def h(v):
        return wnp.tanh(v @ w) * wnp.sum(v ** 2)

    cases = [lambda v: wg.grad(f)(v) * 2, lambda v: wg.jacobian(h)(v), lambda v: wg.jacfwd(h)(v),
             lambda v: wg.hessian(f)(v), lambda v: wg.jacobian(wg.jacobian(f))(v),
             lambda v: wg.hvp(f, (v,), (v[::-1],)), lambda v: wg.vjp(h, v)[1](wnp.ones(2))[0],
             lambda v: wg.grad(lambda s: wnp.sin(s) * v[0])(v[1])]
    for fn in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = wg.vmap(fn)(x)
        np.testing.assert_allclose(out, np.stack([fn(r) for r in x]), rtol=1e-12, atol=1e-12)


def _inside_equals_loop(fn, *args, in_axes=0):
    inside_vmap_equals_loop(fn, args, in_axes, rtol=1e-12, atol=1e-12)


_TIES = np.array([[[1.0, 3.0, 3.0], [0.0, 2.0, -1.0]],     # a tie in a row, none in a column
                  [[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]],      # everything tied
                  [[-1.0, 4.0, 0.0], [4.0, 4.0, 0.0]]])    # ties across rows and within a column


@pytest.mark.parametrize("reduce", [wnp.max, wnp.min])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (-1, False), (0, True), ((0, 1), False)])
def test_grad_inside_vmap_of_extrema_shares_ties_per_example(reduce, axis, keepdims):
    w = np.arange(1.0, 7.0).reshape(2, 3)

    def f(v):
        return wnp.sum(reduce(v * 1.0, axis=axis, keepdims=keepdims) * reduce(w, axis=axis, keepdims=keepdims))

    _inside_equals_loop(wg.grad(f), _TIES)
    _inside_equals_loop(lambda v: wg.hvp(f, (v,), (w,)), _TIES)   # forward over reverse
    _inside_equals_loop(lambda v: wg.vjp(lambda u: reduce(u, axis=axis, keepdims=keepdims), v)[1](
        np.ones(np.shape(np.max(w, axis=axis, keepdims=keepdims))))[0], _TIES)


def test_grad_inside_vmap_of_pad_and_max_of_a_list_with_ties():
    _inside_equals_loop(wg.grad(lambda v: wnp.sum(wnp.pad(v, 1, mode="maximum") ** 2)), _TIES)
    _inside_equals_loop(wg.grad(lambda v: wnp.sum(wnp.max([v[0], v[1]], axis=0) * v[0])), _TIES)


_ZEROS = np.array([[[1.5, -2.0, 0.5], [3.0, 0.7, -1.2]],      # no zero
                   [[0.0, -2.0, 0.5], [3.0, 0.7, 0.0]],       # one zero in each row
                   [[0.0, 0.0, 0.5], [0.0, 0.0, 0.0]]])       # two and three zeros in a row


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
def test_grad_and_hessian_inside_vmap_of_prod_with_zeros_in_some_examples(axis):
    def f(v):
        return wnp.sum(wnp.prod(v, axis=axis) ** 2)

    _inside_equals_loop(wg.grad(f), _ZEROS)
    _inside_equals_loop(wg.hessian(f), _ZEROS)
    _inside_equals_loop(lambda v: wg.hvp(f, (v,), (v[::-1] + 1.0,)), _ZEROS)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_grad_and_hessian_inside_vmap_of_cumprod_with_zeros_in_some_examples(axis):
    w = np.linspace(0.5, 2.0, 6).reshape(2, 3)

    def f(v):
        return wnp.sum(wnp.cumprod(v, axis=axis) * w)

    _inside_equals_loop(wg.grad(f), _ZEROS)
    _inside_equals_loop(wg.hessian(f), _ZEROS)
    _inside_equals_loop(wg.grad(lambda v: wnp.sum(wnp.cumprod(wnp.ravel(v)) * wnp.ravel(w))), _ZEROS)


@pytest.mark.parametrize("subscripts,shapes", [
    ("ij,jk->ik", ((2, 3), (3, 4))), ("ij,ij->", ((2, 3), (2, 3))), ("i,j->ij", ((3,), (4,))),
    ("ii,i->i", ((3, 3), (3,))), ("iij,jk->ik", ((2, 2, 3), (3, 2))), ("...ij,jk->...ik", ((2, 2, 3), (3, 1))),
    ("ij,kl->ijkl", ((1, 2), (2, 1)))])
@pytest.mark.parametrize("batched", [(True, True), (True, False), (False, True)])
def test_grad_inside_vmap_of_einsum_with_batched_and_unbatched_operands(subscripts, shapes, batched):
    rng = np.random.default_rng(31)
    a, b = (rng.standard_normal(((4,) if on else ()) + s) for on, s in zip(batched, shapes))
    axes = tuple(0 if on else None for on in batched)

    def f(x, y):
        return wnp.sum(wnp.sin(wnp.einsum(subscripts, x, y)))

    _inside_equals_loop(wg.grad(f, argnums=(0, 1)), a, b, in_axes=axes)
    _inside_equals_loop(wg.grad(f, argnums=1 if batched[0] else 0), a, b, in_axes=axes)   # the other operand batched
    _inside_equals_loop(lambda x, y: wg.hessian(f, argnums=0)(x, y), a, b, in_axes=axes)


def test_grad_inside_vmap_of_einsum_with_an_operand_used_twice_and_one_operand():
    x = np.random.default_rng(32).standard_normal((4, 3, 3))
    _inside_equals_loop(wg.grad(lambda v: wnp.einsum("ij,jk,ki->", v, v, v)), x)
    _inside_equals_loop(wg.grad(lambda v: wnp.sum(wnp.einsum("ii->i", v) ** 2)), x)
    _inside_equals_loop(wg.grad(lambda v: wnp.einsum("ij->", v * v)), x)
    _inside_equals_loop(wg.hessian(lambda v: wnp.einsum("ij,ji->", v, v ** 2)), x)


@pytest.mark.parametrize("offset", [0, 1, -1, 2])
def test_grad_inside_vmap_of_diagonal_and_trace_with_offsets(offset):
    x = np.random.default_rng(33).standard_normal((4, 3, 4, 2))
    _inside_equals_loop(wg.grad(lambda v: wnp.trace(v[..., 0] ** 2, offset=offset)), x)
    _inside_equals_loop(wg.grad(lambda v: wnp.sum(wnp.diagonal(v, offset, 1, 2) ** 3)), x)
    _inside_equals_loop(wg.grad(lambda v: wnp.sum(wnp.diagonal(v, offset, -2, 0) * v[0, 0, 0])), x)
    _inside_equals_loop(wg.grad(lambda v: wnp.sum(wnp.diag(v[:, :, 1], k=offset) ** 2)), x)
    _inside_equals_loop(wg.hessian(lambda v: wnp.trace(wnp.sin(v[..., 1]), offset=offset) ** 2), x)


def test_grad_inside_vmap_through_indices_that_differ_per_example():
    """sort and x[argmax(x)] read indices computed from each example: the gradient scatters back
    with those indices at the batch level, no loop."""
    rng = np.random.default_rng(15)
    xs, weights = rng.standard_normal((4, 5)), np.arange(5.0)
    for f in (lambda v: wnp.sum(wnp.sort(v) * weights * v),
              lambda v: wnp.sum(wnp.take_along_axis(v, wnp.argsort(v), axis=0) ** 2),
              lambda v: v[wnp.argmax(v)] * wnp.sum(v)):
        per_example = wg.grad(f)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = wg.vmap(lambda v: per_example(v) * 1.0)(xs)
        np.testing.assert_allclose(out, np.stack([per_example(x) for x in xs]), rtol=1e-12)


@pytest.mark.parametrize("spelling", ["W @ x", "np.dot(W, x)", "x @ W.T", "np.dot(x, W.T)"])
def test_a_shared_matrix_times_batched_vectors_is_one_matrix_product(spelling):
    """A per-example layer ``W @ x`` under vmap is ``X @ W.T``: one BLAS product for the whole
    batch, whose gradient is two more (``G @ W`` and ``G.T @ X``), not a matmul of ``W`` with a
    ``(B, k, 1)`` stack and a batch of outer products summed (at 784-300-100-10, batch 128, the
    latter took 117 ms a step under jit, the former 1.8 ms). Values and gradients equal the loop's."""
    rng = np.random.default_rng(12)
    layer = {"W @ x": lambda W, x: W @ x, "np.dot(W, x)": lambda W, x: wnp.dot(W, x),
             "x @ W.T": lambda W, x: x @ W.T, "np.dot(x, W.T)": lambda W, x: wnp.dot(x, W.T)}[spelling]

    def per_example(W, b, x, y):
        return wnp.sum((wnp.tanh(layer(W, x) + b) - y) ** 2)

    def loss(W, b, X, Y):
        return wnp.sum(wg.vmap(per_example, in_axes=(None, None, 0, 0))(W, b, X, Y))

    def loop(W, b, X, Y):
        return sum(per_example(W, b, X[i], Y[i]) for i in range(X.shape[0]))

    W, b = rng.standard_normal((6, 5)), rng.standard_normal(6)
    X, Y = rng.standard_normal((8, 5)), rng.standard_normal((8, 6))
    vg = wg.jit(wg.value_and_grad(loss, argnums=(0, 1, 2)))
    value, grads = vg(W, b, X, Y)
    ref_value, ref_grads = wg.value_and_grad(loop, argnums=(0, 1, 2))(W, b, X, Y)
    np.testing.assert_allclose(value, ref_value, rtol=1e-12)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)
    text = vg.lower(W, b, X, Y).as_text()
    products = [line for line in text.splitlines() if "np_dot(" in line or "np_matmul(" in line or "einsum(" in line]
    assert len(products) == 3 and all("np_dot(" in line for line in products), text
    wg.check_grads(loss, (W, b, X, Y), order=1)

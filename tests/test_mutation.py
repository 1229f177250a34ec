"""Mutation the way users write it: Buffer, at[] updates and x[idx] = v.

Gradients are checked against finite differences; the promises about cost (linear in what was
written or read) are checked by counting bytes allocated, never by timing.
"""
import tracemalloc

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert import InPlaceWriteError

from transform_checks import inside_vmap_equals_loop

rng = np.random.default_rng(0)


# --- Buffer ----------------------------------------------------------------------------------------
def seed_000_pairwise(a, b):
    """The seed-000 loop: cosine similarity of every column pair, written into a Buffer."""
    W, R, B = a.shape
    N = b.shape[1]
    out = wg.Buffer.zeros((N, R, B), a.dtype)
    for k in range(B):
        for j in range(R):
            aj = a[:, j, k]
            for i in range(N):
                bi = b[:, i, k]
                out[i, j, k] = wnp.dot(bi, aj) / (wnp.sqrt(wnp.sum(bi ** 2)) * wnp.sqrt(wnp.sum(aj ** 2)))
    s = out.freeze()
    e = wnp.exp(s - wnp.max(s, axis=0, keepdims=True))
    return e / wnp.sum(e, axis=0, keepdims=True)


def seed_000_vectorized(a, b):
    dots = wnp.einsum("wik,wjk->ijk", b, a)
    norms = wnp.sqrt(wnp.sum(b ** 2, axis=0))[:, None, :] * wnp.sqrt(wnp.sum(a ** 2, axis=0))[None, :, :]
    s = dots / norms
    e = wnp.exp(s - wnp.max(s, axis=0, keepdims=True))
    return e / wnp.sum(e, axis=0, keepdims=True)


def test_buffer_loop_matches_vectorized_value_and_gradient():
    a, b = rng.standard_normal((5, 2, 3)), rng.standard_normal((5, 4, 3))
    weights = rng.standard_normal((4, 2, 3))
    loop = lambda a, b: wnp.sum(weights * seed_000_pairwise(a, b))
    vec = lambda a, b: wnp.sum(weights * seed_000_vectorized(a, b))
    np.testing.assert_allclose(loop(a, b), vec(a, b), rtol=1e-12)
    for got, want in zip(wg.grad(loop, (0, 1))(a, b), wg.grad(vec, (0, 1))(a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    wg.check_grads(loop, (a, b))


def test_buffer_overwritten_element_passes_no_gradient():
    def f(x):
        buf = wg.Buffer.zeros((3,))
        buf[0] = x[0] * 2
        buf[1] = x[1] * 3
        buf[0] = x[2] * 5          # overwrites x[0]'s contribution
        buf[1] = 7.0               # a constant overwrite too
        return wnp.sum(buf.freeze())
    g = wg.grad(f)(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(g, [0.0, 0.0, 5.0])


def test_buffer_partial_overwrite_of_a_slice():
    def f(x):
        buf = wg.Buffer(like=x)
        buf[:] = x * x
        buf[1:3] = x[:2]
        return wnp.sum(buf.freeze() * np.arange(1.0, 5.0))
    wg.check_grads(f, (rng.standard_normal(4),))


def test_buffer_read_before_freeze_is_differentiated():
    def f(x):
        buf = wg.Buffer.zeros((2, 3))
        buf[0] = wnp.sin(x)
        first = buf[0]               # read the row just written
        buf[1] = first * x           # and use it for the next one
        buf[0, 1] = buf[1, 2] ** 2   # read a value, overwrite another
        return wnp.sum(wnp.asarray(buf) ** 2)
    wg.check_grads(f, (rng.standard_normal(3),), order=1)


def test_buffer_starting_from_a_traced_array_passes_gradient_to_unwritten_elements():
    def f(x, v):
        buf = wg.Buffer(x)
        buf[1] = v
        return wnp.sum(buf.freeze() ** 2)
    wg.check_grads(f, (rng.standard_normal((3, 2)), rng.standard_normal(2)))


def test_buffer_on_plain_arrays_is_plain_numpy():
    buf = wg.Buffer.zeros((2, 2), np.float32)
    buf[0, 1] = 3.0
    out = buf.freeze()
    assert type(out) is np.ndarray and out.dtype == np.float32 and out[0, 1] == 3.0


def test_frozen_buffer_refuses_writes():
    buf = wg.Buffer.zeros((2,))
    buf.freeze()
    with pytest.raises(InPlaceWriteError, match="frozen"):
        buf[0] = 1.0


def test_buffer_works_under_grad_of_grad():
    def f(x):
        buf = wg.Buffer.zeros((2,))
        buf[0] = x ** 3
        buf[1] = x * 2
        return wnp.sum(buf.freeze())
    assert np.isclose(wg.grad(wg.grad(f))(1.5), 6 * 1.5)


def test_buffer_backward_is_linear_in_elements_written():
    """1,000 scalar writes into a 1,000,000-element buffer: backward allocates ~one result-sized array."""
    def f(x):
        buf = wg.Buffer.zeros((1000, 1000))
        for i in range(1000):
            buf[i, i] = x[i] * 2.0
        return wnp.sum(buf.freeze())
    x = rng.standard_normal(1000)
    out, vjp_fn = wg.vjp(f, x)
    tracemalloc.start()
    g, = vjp_fn(1.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_allclose(g, 2.0)
    result_bytes = 1000 * 1000 * 8
    assert peak < 3 * result_bytes, f"backward peaked at {peak} bytes for an {result_bytes}-byte result"


# --- at[] -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("update", ["set", "add", "multiply", "min", "max"])
def test_at_updates_match_numpy_and_finite_differences(update):
    x, v = rng.standard_normal((4, 3)), rng.standard_normal(3)
    index = (slice(1, 3), slice(None))

    def f(x, v):
        return wnp.sum(getattr(wg.at(x)[index], update)(v) ** 2)

    original = x.copy()
    expected = x.copy()
    {"set": lambda: expected.__setitem__(index, v),
     "add": lambda: expected.__setitem__(index, expected[index] + v),
     "multiply": lambda: expected.__setitem__(index, expected[index] * v),
     "min": lambda: expected.__setitem__(index, np.minimum(expected[index], v)),
     "max": lambda: expected.__setitem__(index, np.maximum(expected[index], v))}[update]()
    np.testing.assert_array_equal(getattr(wg.at(x)[index], update)(v), expected)
    np.testing.assert_array_equal(x, original)  # functional: the input is untouched
    wg.check_grads(f, (x, v))


def test_at_add_accumulates_duplicate_indices_like_jax():
    x = np.zeros(3)
    idx = np.array([0, 2, 0, 0])
    np.testing.assert_array_equal(wg.at(x)[idx].add(1.0), [3.0, 0.0, 1.0])
    wg.check_grads(lambda x, v: wnp.sum(wg.at(x)[idx].add(v) ** 2), (rng.standard_normal(3), rng.standard_normal(4)))


def test_at_on_tracer_is_a_method_and_get_reads():
    """x.at exists on traced values (plain ndarrays have no .at: use wg.at(x) in shared code)."""
    def f(x):
        return wnp.sum(x.at[1].set(x.at[0].get() * 3.0) ** 2)
    x = rng.standard_normal((2, 2))
    np.testing.assert_allclose(wg.grad(f)(x), [20 * x[0], [0.0, 0.0]])


def test_at_multiply_with_duplicate_indices_is_refused_when_traced():
    with pytest.raises(NotImplementedError, match="repeated indices"):
        wg.grad(lambda x: wnp.sum(x.at[np.array([0, 0])].multiply(2.0)))(np.ones(3))


# --- x[idx] = v -------------------------------------------------------------------------------------
def test_setitem_has_numpy_meaning_and_gradients():
    def f(x, v):
        y = x * 1.0
        y[1:, 0] = v               # write
        y[0] = wnp.exp(y[0])       # read, then write the result back
        alias = y                  # the same array under another name sees the write
        return wnp.sum(alias ** 2)
    x, v = rng.standard_normal((3, 2)), rng.standard_normal(2)
    wg.check_grads(f, (x, v))


def test_views_taken_after_a_write_see_the_new_values():
    def f(x):
        y = x * 2.0
        y[0] = 0.0
        row = y[0]
        return wnp.sum(row) + wnp.sum(y[1])
    g = wg.grad(f)(np.ones((2, 2)))
    np.testing.assert_array_equal(g, [[0, 0], [2, 2]])


def test_write_into_a_value_saved_for_backward_is_refused_at_the_write():
    """PyTorch's version-counter case: exp saved its output, which is then changed in place."""
    def f(x):
        y = wnp.exp(x)
        y[0] = 0.0
        return wnp.sum(y)
    with pytest.raises(InPlaceWriteError, match=r"exp saved.*at\[idx\]\.set"):
        wg.grad(f)(np.ones(3))


def test_write_into_an_input_of_sin_is_refused():
    def f(x):
        y = x + 0.0
        s = wnp.sin(y)
        y[0] = 1.0
        return wnp.sum(s)
    with pytest.raises(InPlaceWriteError, match="sin saved"):
        wg.grad(f)(np.ones(3))


def test_a_view_made_before_a_write_reads_the_new_values():
    """NumPy's meaning: ``view`` sees the write into ``y``; its gradient flows to what was written."""
    def f(x):
        y = x + 0.0
        view = y[0]
        y[0, 0] = 5.0 * x[1, 1]
        return wnp.sum(view * x[1])
    x = np.array([[1.5, 2.0], [0.5, -1.0]])
    assert wg.value_and_grad(f)(x)[0] == f(x.copy())
    np.testing.assert_allclose(wg.grad(f)(x), [[0, -1.0], [5.0 * -1.0, 5.0 * 0.5 + 2.0]])
    assert wg.check_grads(f, (x,)) is None


def _chained_writes(x):
    out = wnp.zeros(x.shape) + 0.0 * x[0, 0]
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i][j] = x[i, j] ** 2      # NumPy writes through the view out[i] into out
    return wnp.sum(out)


@pytest.mark.parametrize("transform", ["grad", "jvp", "jit", "jit(grad)"])
def test_a_write_through_a_view_then_a_use_of_the_array(transform):
    """``out[i][j] = v`` changes ``out`` (the write goes to ``out[i, j]``); tests/test_views.py
    has the other spellings."""
    x = np.arange(6.0).reshape(2, 3)
    run = {"grad": lambda: wg.grad(_chained_writes)(x),
           "jvp": lambda: wg.jvp(_chained_writes, (x,), (np.ones_like(x),))[1],
           "jit": lambda: wg.jit(_chained_writes)(x),
           "jit(grad)": lambda: wg.jit(wg.grad(_chained_writes))(x)}[transform]
    expected = {"grad": 2 * x, "jvp": np.sum(2 * x), "jit": np.sum(x ** 2), "jit(grad)": 2 * x}[transform]
    np.testing.assert_allclose(run(), expected)


def test_a_write_through_a_view_used_alone_is_differentiated():
    """The view itself stands for the written values: only the array it came from is stale."""
    def f(x):
        y = x * 1.0
        row = y[1]
        row[0] = x[0, 0] ** 3
        return wnp.sum(row * row)
    x = np.array([[1.5, 2.0], [0.5, -1.0]])
    assert wg.check_grads(f, (x,)) is None
    np.testing.assert_allclose(wg.grad(f)(x), [[6 * 1.5 ** 5, 0], [0, -2]])


def test_buffer_of_element_writes_with_overwrites_negative_indices_and_constants():
    """A snapshot whose writes each set one element takes one gather in its backward pass: the
    latest write of a position gets its cotangent, overwritten ones and the base there get none."""
    def f(x):
        n, m = x.shape
        buf = wg.Buffer(x * 1.0)                 # a traced base; its last column is never written
        for i in range(n):
            for j in range(m - 1):
                buf[i, j] = x[i, j] * x[(i + 1) % n, j]
        buf[0, 1] = 3.0                          # a constant overwrites a traced write
        buf[-1, -2] = wnp.sin(x[0, 0])           # a negative index overwrites another
        buf[2, 0] = x[1, 1] ** 3
        return wnp.sum(buf.freeze() ** 2)
    wg.check_grads(f, (rng.standard_normal((4, 3)),))

    def one_dim(x):
        buf = wg.Buffer.zeros(5)
        for i in range(5):
            buf[i] = x[i] * x[4 - i]
        buf[(2,)] = x[0] * 2.0                   # buf[i,] is the same element as buf[i]
        return wnp.sum(buf.freeze() * wnp.arange(1.0, 6.0))
    wg.check_grads(one_dim, (rng.standard_normal(5),))


def test_writes_into_an_array_only_its_tracer_holds_keep_every_check():
    """A write into memory that nothing but its tracer holds skips the checks (no view of it and no
    tape entry keeping it can exist); the checks still run once a view or a saved value appears."""
    def stale(x):
        y = x + 0.0
        y[0, 0] = 1.0            # nothing else holds y's memory
        view = y[1]
        y[1, 1] = 5.0            # the view now holds it: checked, and the view is taken again when used
        return wnp.sum(view * x[0])
    np.testing.assert_allclose(wg.grad(stale)(np.full((2, 2), 2.0)), [[2, 5], [2, 0]])

    def saved(x):
        y = x * 2.0
        y[0] = 1.0
        s = wnp.sin(y)           # sin keeps y for its gradient
        y[1] = 2.0
        return wnp.sum(s)
    with pytest.raises(InPlaceWriteError, match="sin saved"):
        wg.grad(saved)(np.ones(3))

    def loop(x):                 # 80 elements: reads keep only out's shape, so most writes skip the checks
        n = len(x)
        out = wnp.zeros(n) + 0.0 * x[0]
        for i in range(n):
            out[i] = x[i] * x[(i + 1) % n]
            if i % 7 == 0:
                out[i] = out[i] * 3.0 + out[i - 1]   # overwrite, reading values written before
        return wnp.sum(out * out)
    wg.check_grads(loop, (rng.standard_normal(80),))


@pytest.mark.parametrize("product", [lambda u, v: u @ v, lambda u, v: np.dot(u, v), lambda u, v: np.inner(u, v),
                                     lambda u, v: wnp.dot(u, v)], ids=["@", "np.dot", "np.inner", "wnp.dot"])
def test_products_in_a_loop_of_writes_see_views_made_before_a_write(product):
    """The products of per-column loops are recorded without bind's generic steps; a view made
    before a write into its memory is still taken again when a product uses it, and a loop of
    products written in place has the gradient finite differences give."""
    def stale(x):
        y = x * 1.0
        row = y[0]                   # a view of y
        y[0, 1] = 5.0                # the view reads 5.0 there now
        return product(row, x[1])
    np.testing.assert_allclose(wg.grad(stale)(np.ones((2, 3))), [[1, 0, 1], [1, 5, 1]])

    def loop(x):
        out = wnp.zeros((2, 3)) + 0.0 * x[0, 0]
        first = out[0]   # a view: the writes are checked and the tape gets its stale-view guard
        for t in range(2):
            for b in range(3):
                out[t, b] = product(x[:, b], x[:, (b + t) % 3]) * (t + 1.0)
        assert first._trace.guard is not None
        return wnp.sum(out * out) + product(out[1], x[0, :])
    wg.check_grads(loop, (rng.standard_normal((4, 3)),))


def test_writing_into_the_callers_array_is_refused():
    x = np.ones(3)
    with pytest.raises(InPlaceWriteError, match="input"):
        wg.grad(lambda x: (x.__setitem__(0, 2.0), wnp.sum(x))[1])(x)
    np.testing.assert_array_equal(x, 1.0)


def test_write_after_shape_only_use_is_allowed():
    """add keeps its inputs only for their shapes, so a later write cannot change its gradient."""
    def f(x):
        y = x * 1.0
        t = y + 1.0
        y[0] = 3.0
        return wnp.sum(t * y)
    wg.check_grads(f, (rng.standard_normal(3),))


# --- reads through views accumulate into one buffer ------------------------------------------------
def test_column_reads_backward_bytes_are_linear_in_reads():
    """Reading k columns of an (n, 1000) array: backward bytes grow with k only through the reads."""
    x = rng.standard_normal((100, 1000))

    def backward_bytes(k):
        def f(x):
            total = 0.0
            for j in range(k):
                total = total + wnp.sum(x[:, j])
            return total
        out, vjp_fn = wg.vjp(f, x)
        tracemalloc.start()
        vjp_fn(1.0)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak

    small, large = backward_bytes(100), backward_bytes(1000)
    array_bytes = x.nbytes
    # one buffer for x (plus small per-read pieces), not one x-sized array per read
    assert large < 2 * array_bytes + 10 * (large - small) and large < 3 * array_bytes, (small, large)
    assert large - small < 0.2 * array_bytes


def test_a_loop_of_in_place_writes_copies_the_cotangent_once(monkeypatch):
    """200 row writes: the old array's cotangent is zeroed in place write by write, not copied 200 times."""
    from wengert.primitives import scatter
    copies = []
    real_zero_at = scatter._zero_at
    monkeypatch.setattr(scatter, "_zero_at", lambda g, index: copies.append(1) or real_zero_at(g, index))

    def f(x):
        y = x * 1.0
        for i in range(200):
            y[i] = x[i] * 2.0
        return wnp.sum(y)
    x = rng.standard_normal((200, 1000))
    g = wg.grad(f)(x)
    np.testing.assert_allclose(g, 2.0)
    assert len(copies) == 0, f"{len(copies)} full copies of the cotangent"
    monkeypatch.setattr(scatter.write, "owned_vjp", None)   # the copying rule, for contrast
    np.testing.assert_allclose(wg.grad(f)(x), 2.0)
    assert len(copies) == 200


# --- writes under a grad opened inside vmap ----------------------------------------------------------
def _inside_vmap_equals_loop(fn, *args, in_axes=0):
    inside_vmap_equals_loop(fn, args, in_axes, rtol=1e-12, atol=1e-12)


_INDICES = [1, slice(1, 3), (slice(None), 0), np.array([0, 2]), (np.array([1, 0]), np.array([2, 2]))]


@pytest.mark.parametrize("index", _INDICES, ids=["int", "slice", "column", "rows", "pairs"])
@pytest.mark.parametrize("batched", [(True, True), (True, False), (False, True)], ids=["both", "x", "v"])
def test_at_set_and_multiply_under_grad_inside_vmap_equal_a_loop(index, batched):
    x = rng.standard_normal((4, 3, 3))
    piece = np.zeros((3, 3))[index].shape
    v = rng.standard_normal((4,) + piece) if batched[1] else rng.standard_normal(piece)
    if not batched[0]:
        x = x[0]
    axes = tuple(0 if on else None for on in batched)

    def set_(a, b):
        return wnp.sum(wnp.sin(wg.at(a * 1.0)[index].set(b ** 2)) * a)

    def multiply(a, b):
        return wnp.sum(wnp.sin(wg.at(a * 1.0)[index].multiply(b)) * a)

    def add_and_max(a, b):
        return wnp.sum(wg.at(wg.at(a)[index].add(b * a[0, 0]))[index].max(b) ** 2)

    for f in (set_, multiply, add_and_max):
        _inside_vmap_equals_loop(wg.grad(f, argnums=(0, 1)), x, v, in_axes=axes)
        _inside_vmap_equals_loop(wg.hessian(f, argnums=1), x, v, in_axes=axes)
        _inside_vmap_equals_loop(lambda a, b: wg.hvp(lambda u: f(u, b), (a,), (a * 0.5 + 1.0,)), x, v,
                                 in_axes=axes)


def test_buffer_with_traced_writes_under_grad_inside_vmap_equals_a_loop():
    def f(v):
        buf = wg.Buffer(v * 2.0)
        buf[1] = v[0] ** 2
        buf[0, 1:] = wnp.sin(v[2, :2])
        return wnp.sum(buf.freeze() * v)

    _inside_vmap_equals_loop(wg.grad(f), rng.standard_normal((4, 3, 3)))


def test_item_assignment_under_grad_inside_vmap_runs_once_per_example():
    """``x[idx] = v`` on a grad tracer whose values carry vmap's batch cannot be recorded (core/
    mutation.py writes plain memory under one transform only): vmap runs the function once per
    example, with a warning, where each write is under grad alone; the functional form is batched."""
    x = rng.standard_normal((4, 3))

    def written(v):
        y = v * 2.0
        y[1] = v[0] ** 2
        return wnp.sum(y * v)

    def functional(v):
        return wnp.sum(wg.at(v * 2.0)[1].set(v[0] ** 2) * v)

    for vmapped in (wg.vmap(wg.grad(written)), wg.vmap(lambda v: wg.grad(written)(v))):
        with pytest.warns(UserWarning, match="in-place write into values that vmap batches"):
            out = vmapped(x)
        np.testing.assert_allclose(out, np.stack([wg.grad(written)(r) for r in x]), rtol=1e-12)
    _inside_vmap_equals_loop(wg.grad(functional), x)
    np.testing.assert_allclose(wg.vmap(lambda v: wg.grad(functional)(v))(x), np.stack([wg.grad(written)(r) for r in x]),
                               rtol=1e-12)


def test_element_writes_whose_array_cotangent_arrives_shared_or_accumulated():
    """The backward pass zeroes a written element of the array's cotangent in place: it must copy a
    cotangent it does not own first (here add's, which z receives too) and add into one that another
    use of the same version already started; constants and overwrites are among the writes."""
    w = rng.standard_normal((3, 2))

    def f(x):
        z = wnp.ones((3, 2)) * x[1]            # made before the writes: its cotangent comes after theirs
        out = wnp.zeros((3, 2)) + 0.0 * x[0]
        for i in range(3):
            out[i, 0] = x[i] * x[(i + 1) % 3]
            out[i, 1] = 2.0                    # a constant: no cotangent for the value
        out[1, 0] = wnp.sin(x[2])              # overwrite: the first value gets nothing
        return wnp.sum((out + z) * w)          # add hands the same cotangent to out and to z
    wg.check_grads(f, (rng.standard_normal(3),), order=1)

    def twice(x):
        out = wnp.zeros(4) + 0.0 * x[0]
        out[0] = x[0] * x[1]
        before = out + 1.0                     # this version of out is used here and by the next write
        out[1] = x[2] ** 2
        return wnp.sum(before * out)
    wg.check_grads(twice, (rng.standard_normal(3),), order=1)


def test_a_write_after_a_product_whose_rules_that_run_do_not_read_the_written_values():
    """``out[:, 0] *= 3.0`` keeps a small ``out[:, 0]`` on the tape only for the rule of ``3.0``,
    which never runs: the write is allowed. A factor of a traced operand is still refused."""
    def scaled(x):
        out = x * 1.0
        out[:, 0] *= 3.0
        out[0] = out[0] * 2.0
        return wnp.sum(out ** 2)
    x = rng.standard_normal((3, 4))
    assert wg.check_grads(scaled, (x,)) is None

    def read_by_a_rule(x):
        out = x * 1.0
        s = out[:, 0] * x[:, 1]          # the rule of x[:, 1] reads out[:, 0]
        out[:, 0] = 0.0
        return wnp.sum(s)
    with pytest.raises(InPlaceWriteError, match="multiply saved"):
        wg.grad(read_by_a_rule)(x)

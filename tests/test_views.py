"""Writes through views of traced arrays (``out[i][j] = v``, ``row = out[i]; row[j] = v``,
``out.T[i] = v``, ``out[:, k][mask] = v``): NumPy's meaning under every transform.

A view made by basic indexing, transpose, flip or a reshape NumPy returns as a view writes into its
base (core/mutation.py rebases the write onto the array with the composed index); a "view" NumPy
returns as a copy (advanced indexing) does not. Each function below is run by plain NumPy (the
reference values) and differentiated by wengert; gradients are checked against central finite
differences in float64.
"""
import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert import InPlaceWriteError

rng = np.random.default_rng(7)


def every_element(x, np=np):
    """A loop writing ``out[i][j]`` over all (i, j), each write reading elements written before."""
    out = x * 1.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i][j] = np.sin(x[i, j]) * out[i][(j + 1) % x.shape[1]] + out[i - 1, j]
    return out


def row_then_element(x, np=np):
    out = x * 2.0
    row = out[1]
    row[2] = np.cos(x[0, 0])          # out[1, 2] changes
    col = out[:, 2]                   # a view taken after the write, read after the next one
    out[0, 2] = x[2, 3] ** 2
    return np.concatenate([(out * out).ravel(), row * x[2], col ** 3])


def transposed(x, np=np):
    out = x * 1.0
    out.T[1] = np.exp(x[:, 0])        # out[:, 1]
    out.T[2:, 1:] = x[:2, 2:].T * 3.0  # out[1:, 2:], the value transposed
    out.swapaxes(0, 1)[3, 0] = x[1, 1] * x[2, 2]
    v = out[:, 1:3][::-1]             # a reversed view
    v[0] = x[0, :2]                   # out[2, 1:3]
    return np.concatenate([(out ** 2).ravel(), (v * 1.5).ravel()])


def column_mask(x, np=np):
    out = x * 1.0
    mask = np.array([True, False, True])
    out[:, 1][mask] = x[:2, 0] * 5    # advanced index into a view: still writes into out
    out[1, :][2] = 7.0 * x[0, 3]      # out[1, :] is a view too
    out[[0, 1]][0] = 100.0            # advanced indexing gives a copy: out is unchanged
    out[mask][0] = 100.0              # a copy too
    return out ** 2


def reshaped(x, np=np):
    out = x * 1.0
    flat = out.reshape(-1)            # a view (out is contiguous)
    flat[5] = x[0, 0] ** 3
    flat[7:9] = x[1, :2] * 2
    grid = out.reshape(2, 6)
    grid[1, ::2] = x[2, 1]
    return np.concatenate([(out ** 2).ravel(), flat[4:7] * x[2, 2]])


def overlapping(x, np=np):
    out = x * 1.0
    a = out[0:2]
    b = out[1:3]
    a[1] = x[0] * 2                   # out[1]
    b[0, 1:] = x[2, 1:] * 3           # out[1, 1:] again: overwrites part of a's write
    return np.concatenate([(a ** 2).ravel(), (b * x[2]).ravel(), (out ** 3).ravel()])


def view_before_write(x, np=np):
    """A view made before a write into its base, returned as it is: it shows the write."""
    out = x * 1.0
    row = out[0]
    col = out[:, 3]
    out[0, 3] = 5.0 * x[1, 1]
    out[2][3] = x[0, 0] ** 2
    return np.concatenate([row, col, out[1]])


def chained(x, np=np):
    out = x * 1.0
    out[1:][::-1][0][1:3][1] = x[0, 1] * 4   # out[2, 2]
    out[None, 0][..., 1][0] = x[2, 3]         # out[0, 1]
    return out.ravel() * np.arange(1.0, 13.0)


def whole_and_iterated(x, np=np):
    out = x * 1.0
    v = out[:]                        # every element: a holder of the whole array
    v[0, 1] = x[2, 2] * 3
    w = out[...]
    out[1, 1] = x[0, 0] ** 2
    for k, row in enumerate(out):     # iteration gives views too
        row[k + 1] = x[k, 3] * 2
    return np.concatenate([out.ravel(), v.ravel(), w.ravel()])


def reshapes_and_copies(x, np=np):
    out = x * 1.0
    c = out.T.reshape(-1)             # NumPy copies here: the write stays in the copy
    c[0] = 100.0 * x[1, 2]
    s = out[:, None, 1:3].squeeze(1)  # views
    s[0, 0] = x[1, 1] * 5
    e = np.expand_dims(out, 0)
    e[0, 2, 3] = x[0, 0]
    r = out.ravel()
    r[1] = x[2, 0] * 7
    np.fliplr(out)[1, 0] = x[0, 2]    # out[1, 3]
    out[::-1, ::2][0] = x[1, :2]      # out[2, ::2]
    return np.concatenate([out.ravel(), c, s.ravel(), e.ravel(), r])


def augmented_and_broadcast(x, np=np):
    out = x * 1.0
    out[1][2] += x[0, 0] * 2
    out.T[0] *= 3.0                   # the column out[:, 0], read then written
    out[:, None][1] = x[0] * 2        # a (4,) value into a (1, 4) view of out[1]
    out[None, :, 1:2][0, 1:] = x[:2, :1] * 3
    return out.ravel()


CASES = [every_element, row_then_element, transposed, column_mask, reshaped, overlapping, view_before_write,
         chained, whole_and_iterated, reshapes_and_copies, augmented_and_broadcast]


def numeric_jacobian(f, x, eps=1e-6):
    cols = []
    for k in range(x.size):
        d = np.zeros(x.size)
        d[k] = eps
        d = d.reshape(x.shape)
        cols.append((np.asarray(f(x + d)) - np.asarray(f(x - d))) / (2 * eps))
    return np.stack(cols, axis=-1)


def wnp_version(f):
    return lambda x: f(x, np=wnp)


@pytest.fixture(scope="module")
def x():
    return rng.standard_normal((3, 4))


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_values_and_gradients_under_grad_jvp_and_vmap(f, x):
    g = wnp_version(f)
    ref = f(x.copy())
    jac = numeric_jacobian(f, x)
    w = rng.standard_normal(ref.shape)
    value, grad = wg.value_and_grad(lambda x: wnp.sum(g(x) * w))(x)
    np.testing.assert_allclose(value, np.sum(ref * w), rtol=1e-12)
    np.testing.assert_allclose(grad, np.tensordot(w, jac, axes=w.ndim).reshape(x.shape), rtol=1e-6, atol=1e-7)
    t = rng.standard_normal(x.shape)
    primal, tangent = wg.jvp(g, (x,), (t,))
    np.testing.assert_allclose(primal, ref, rtol=1e-12)
    np.testing.assert_allclose(tangent, jac @ t.ravel(), rtol=1e-6, atol=1e-7)
    xs = np.stack([x, x + 0.5])
    with pytest.warns(UserWarning, match="once per example"):   # vmap runs the writes per example
        batched = wg.vmap(g)(xs)
    np.testing.assert_allclose(batched, np.stack([f(x.copy()), f(x + 0.5)]), rtol=1e-12)


@pytest.mark.parametrize("f", CASES, ids=lambda f: f.__name__)
def test_values_and_gradients_under_jit_and_jit_of_grad_on_a_second_input(f, x):
    g = wnp_version(f)
    w = rng.standard_normal(f(x.copy()).shape)
    run = wg.jit(g)
    step = wg.jit(wg.value_and_grad(lambda x: wnp.sum(g(x) * w)))
    for inputs in (x, x * 0.7 - 0.2):   # the second call runs the program made by the first
        np.testing.assert_allclose(run(inputs), f(inputs.copy()), rtol=1e-12)
        value, grad = step(inputs)
        np.testing.assert_allclose(value, np.sum(f(inputs.copy()) * w), rtol=1e-12)
        expected = np.tensordot(w, numeric_jacobian(f, inputs), axes=w.ndim).reshape(x.shape)
        np.testing.assert_allclose(grad, expected, rtol=1e-6, atol=1e-7)
    assert run.traces == 1 and step.traces == 1


def test_a_view_written_and_its_base_are_both_returned(x):
    """NumPy's aliasing survives the outputs: the view and its base both show every write."""
    def f(x):
        out = x * 1.0
        row = out[1]
        row[0] = x[0, 0] * 3.0
        out[1, 1] = x[2, 2] ** 2
        return out, row
    for run in (f, wg.jit(f)):
        out, row = run(x)
        np.testing.assert_allclose(row, out[1])
        np.testing.assert_allclose(out[1, :2], [x[0, 0] * 3.0, x[2, 2] ** 2])
    tangent = wg.jvp(f, (x,), (np.ones_like(x),))[1]
    np.testing.assert_allclose(tangent[1], [3.0, 2 * x[2, 2], 1.0, 1.0])
    np.testing.assert_allclose(tangent[0][1], tangent[1])


def test_a_write_through_a_view_of_an_input_is_refused(x):
    def f(x):
        row = x[0]
        row[1] = 2.0
        return wnp.sum(x)
    for run in (wg.grad(f), wg.jit(f), lambda x: wg.jvp(f, (x,), (x,))):
        with pytest.raises(InPlaceWriteError, match="input"):
            run(x)


def test_views_wengert_cannot_follow_raise_naming_the_alternative(x):
    """A view of another dtype (the real part of a complex array) is no index of its base."""
    def write(x):
        y = x * (1 + 1j)
        r = y.real
        r[0, 0] = 5.0
        return wnp.sum(wnp.abs(y))

    def read_after(x):
        y = x * (1 + 1j)
        r = y.real
        y[0, 0] = 5.0
        return wnp.sum(r)
    for run in (wg.grad, wg.jit):
        with pytest.raises(InPlaceWriteError, match=r"x\.real of a complex array.*write into that array itself"):
            run(write)(x)
        with pytest.raises(InPlaceWriteError, match=r"changed in place after the view was made.*x\.real"):
            run(read_after)(x)


def test_numpy_errors_of_the_write_itself(x):
    def broadcast(x):
        y = x * 1.0
        y.T[0] = x[0]          # 4 values into 3 places
        return wnp.sum(y)

    def read_only(x):
        y = x * 1.0
        wnp.diagonal(y)[0] = 1.0
        return wnp.sum(y)
    with pytest.raises(ValueError, match="could not broadcast"):
        wg.grad(broadcast)(x)
    with pytest.raises(ValueError, match="read-only"):
        wg.grad(read_only)(x)


def test_the_per_element_view_spelling_stages_the_program_of_the_one_index_spelling():
    """``out[i][j, k] = v`` is rebased to ``out[i, j, k] = v``: the jit program (and so what the
    vectorizing pass makes of it) is the same text."""
    def make(write):
        def f(a, b):
            out = wnp.zeros((3, 2, 2)) + 0.0 * a[0, 0, 0]
            for k in range(2):
                for j in range(2):
                    for i in range(3):
                        write(out, i, j, k, wnp.dot(b[:, i, k], a[:, j, k]))
            return wnp.sum(wnp.exp(out) * out)
        return f

    def one_index(out, i, j, k, v):
        out[i, j, k] = v

    def through_views(out, i, j, k, v):
        out[i][j][k] = v

    def through_a_column(out, i, j, k, v):
        col = out[:, j]
        col[i, k] = v
    a, b = rng.standard_normal((4, 2, 2)), rng.standard_normal((4, 3, 2))
    texts = []
    for write in (one_index, through_views, through_a_column):
        step = wg.jit(wg.value_and_grad(make(write), argnums=(0, 1)))
        value, grads = step(a, b)
        texts.append(step.lower(a, b).as_text().split("\n"))
        assert wg.check_grads(make(write), (a, b)) is None
    strip = [[line.split("  #")[0] for line in t] for t in texts]
    assert strip[1] == strip[0] and strip[2] == strip[0]

"""vmap of the write primitives scatter_set and scatter_multiply (``x.at[idx].set/multiply/min/max``,
``x[idx] = v`` and Buffer writes under forward mode): one write into the stack at ``(:, *idx)``,
equal to a loop over the examples, with no per-example loop warning."""

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp

from transform_checks import no_warnings


_NUMPY_UPDATE = {"set": lambda old, v: v + 0 * old, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}

# index, and the shape of one example's v (broadcast into x[index] of an example x of shape (4, 3))
_INDICES = {"slices": ((slice(1, 3), slice(None)), (3,)),
            "array": (np.array([2, 0]), (2, 3)),
            "int and array": ((1, np.array([0, 2])), (2,)),
            "int": (3, ()),
            "mask": (np.array([True, False, True, False]), (1, 3)),
            "int, v of higher rank": (3, (1, 3))}  # NumPy's set drops v's leading ones


def _loop(update, index, xs, vs):
    outs = []
    for x, v in zip(xs, vs):
        out = x.copy()
        out[index] = _NUMPY_UPDATE[update](out[index], v)
        outs.append(out)
    return np.stack(outs)


# NumPy's in-place multiply refuses a v of higher rank than x[index]
@pytest.mark.parametrize("update, index_name", [(u, i) for u in ("set", "multiply", "min", "max") for i in _INDICES
                                                if u == "set" or i != "int, v of higher rank"])
def test_vmap_equals_a_loop_without_warnings(update, index_name):
    rng = np.random.default_rng(0)
    index, v_shape = _INDICES[index_name]
    xs = rng.normal(size=(4, 5, 3))      # x batched on axis 1: examples xs[:, b]
    vs = rng.normal(size=v_shape + (5,))  # v batched on its last axis
    f = lambda x, v: getattr(wg.at(x)[index], update)(v)  # noqa: E731
    x_examples, v_examples = np.moveaxis(xs, 1, 0), np.moveaxis(vs, -1, 0)
    with no_warnings():
        both = wg.vmap(f, in_axes=(1, -1))(xs, vs)
        x_only = wg.vmap(f, in_axes=(1, None))(xs, v_examples[0])
        v_only = wg.vmap(f, in_axes=(None, -1))(x_examples[0], vs)
    np.testing.assert_allclose(both, _loop(update, index, x_examples, v_examples))
    np.testing.assert_allclose(x_only, _loop(update, index, x_examples, [v_examples[0]] * 5))
    np.testing.assert_allclose(v_only, _loop(update, index, [x_examples[0]] * 5, v_examples))


@pytest.mark.parametrize("update, index_name", [("set", "slices"), ("set", "array"), ("set", "mask"),
                                                ("multiply", "slices"), ("multiply", "array")])
def test_gradients_through_vmap_match_finite_differences(update, index_name):
    rng = np.random.default_rng(1)
    index, v_shape = _INDICES[index_name]
    xs, vs, w = rng.normal(size=(4, 3, 3)), rng.normal(size=(3,) + v_shape), rng.normal(size=v_shape)

    def loss(xs, vs, w):
        written = wg.vmap(lambda x, v: getattr(wg.at(x)[index], update)(v * w), in_axes=(1, 0))(xs, vs)
        return wnp.sum(wnp.sin(written))
    with no_warnings():
        wg.check_grads(loss, (xs, vs, w), modes=("fwd", "rev"))


def _in_place(x):
    y = x * 1.0
    y[1:, 0] = x[0, :2] * 3.0
    y[0] = wnp.exp(y[0])
    return y ** 2


def _buffer(x):
    buf = wg.Buffer(x)
    for i in range(3):
        buf[i, 1] = wnp.sin(x[i, 0]) * x[i, 1]
    return buf.freeze()


@pytest.mark.parametrize("f", [lambda x: wg.at(x)[np.array([0, 2]), 1].set(x[1, :2] ** 2),
                               lambda x: wg.at(x)[1:].multiply(x[0] * 2.0),
                               lambda x: wg.at(x)[np.array([2, 1])].max(wnp.cos(x[0])),
                               _in_place, _buffer],
                         ids=["at-set", "at-multiply", "at-max", "setitem", "Buffer"])
def test_jacfwd_equals_jacobian_without_warnings(f):
    x = np.random.default_rng(2).normal(size=(3, 2))
    with no_warnings():
        forward = wg.jacfwd(f)(x)
    np.testing.assert_allclose(forward, wg.jacobian(f)(x), atol=1e-12)


def test_nested_vmap_equals_a_double_loop():
    rng = np.random.default_rng(3)
    xs, vs = rng.normal(size=(2, 3, 4, 3)), rng.normal(size=(3, 2))
    f = lambda x, v: wg.at(wg.at(x)[np.array([0, 3]), 1:].set(v))[2].multiply(v[0])  # noqa: E731
    with no_warnings():
        got = wg.vmap(wg.vmap(f, in_axes=(0, 0)), in_axes=(0, None))(xs, vs)
    expected = np.empty_like(xs)
    for i in range(2):
        for j in range(3):
            out = xs[i, j].copy()
            out[np.array([0, 3]), 1:] = vs[j]
            out[2] *= vs[j][0]
            expected[i, j] = out
    np.testing.assert_allclose(got, expected)


def test_indices_that_cannot_be_batched_fall_back_to_a_correct_loop():
    """Advanced indices split by a slice (NumPy would move them before the batch axis) and indices
    that vary along the batch are run per example, with vmap's warning."""
    rng = np.random.default_rng(4)
    xs, vs = rng.normal(size=(3, 2, 4, 3)), rng.normal(size=(3, 2, 4))
    split = (np.array([0, 1]), slice(None), np.array([2, 0]))
    with pytest.warns(UserWarning, match="no batching rule for scatter_set"):
        got = wg.vmap(lambda x, v: wg.at(x)[split].set(v))(xs, vs)
    np.testing.assert_allclose(got, _loop("set", split, xs, vs))
    rows = np.array([1, 0, 1])
    with pytest.warns(UserWarning, match="once per example"):
        got = wg.vmap(lambda x, i: wg.at(x)[i].multiply(2.0))(xs[:, 0], rows)
    np.testing.assert_allclose(got, [_loop("multiply", i, [x], [2.0])[0] for x, i in zip(xs[:, 0], rows)])

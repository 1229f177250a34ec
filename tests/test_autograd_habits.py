"""autograd users' habits that cost nothing: grad of a one-element output, check_grads on x.at."""
import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp


@pytest.mark.parametrize("shape", [(1,), (1, 1), (1, 1, 1)])
def test_grad_of_a_one_element_output_is_the_gradient_of_that_element(shape):
    x = np.array([0.3, -1.2, 2.0])

    def f(x):
        return wnp.reshape(wnp.sum(wnp.sin(x) * x), shape)

    value, g = wg.value_and_grad(f)(x)
    assert value.shape == shape   # the value as the function returned it, as autograd gives it
    np.testing.assert_allclose(value.reshape(()), np.sum(np.sin(x) * x))
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(wg.grad(f)(x), g)
    wg.check_grads(f, (x,), order=2, modes=("fwd", "rev"))


def test_grad_of_a_one_element_output_nests_and_runs_under_vmap():
    cube = wg.grad(wg.grad(lambda s: wnp.reshape(s ** 3, (1, 1))))
    assert cube(2.0) == pytest.approx(12.0)
    xs = np.random.default_rng(0).standard_normal((4, 3))
    per_example = wg.vmap(wg.grad(lambda v: wnp.sum(v ** 2, keepdims=True)))(xs)
    np.testing.assert_allclose(per_example, 2 * xs)


@pytest.mark.parametrize("shape", [(2,), (1, 2), (0,)])
def test_grad_of_more_or_fewer_than_one_element_is_still_refused(shape):
    with pytest.raises(wg.NonScalarOutputError, match=str(shape).replace("(", r"\(").replace(")", r"\)")):
        wg.grad(lambda x: wnp.zeros(shape) + wnp.sum(x))(np.ones(3))


def scatter_loss(x, y):
    z = x.at[1].set(y[0] * x[0])
    z = z.at[0].add(wnp.sin(y[1]))
    return wnp.sum(z ** 2) + wnp.sum(x.at[2].multiply(y[1]))


def test_check_grads_runs_a_function_written_with_x_at():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, 0.3])
    wg.check_grads(scatter_loss, (x, y), order=2, modes=("fwd", "rev"))
    wg.check_grads(lambda x, y: x.at[1:].set(y) * x, (x, y))   # a non-scalar output too
    assert not hasattr(np.ones(2), "at")   # numpy.ndarray is left alone


def test_check_grads_on_x_at_still_catches_a_wrong_gradient():
    @wg.custom_vjp
    def doubled(x):
        return 2 * x

    doubled.defvjp(lambda x: (2 * x, None), lambda res, g: (3 * g,))   # wrong: 3 instead of 2

    def f(x):
        return wnp.sum(doubled(x.at[0].set(1.5)) ** 2)

    with pytest.raises(AssertionError, match="argument 0"):
        wg.check_grads(f, (np.array([1.0, 2.0]),))

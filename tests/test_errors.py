"""The errors' promises: each misuse raises an error that says what happened and what to do.

* grad of a non-scalar (or non-real) output names the shape and points to vjp / jacobian.
* A non-float value in a differentiated argument is named by position, parameter name and
  pytree path.
* A NumPy function with no derivative rule raises NoDerivativeError naming it.
* A tracer used after its transform returned raises LeakedTracerError.
* Reading a traced value as a number (float, bool, if) works; turning it into a plain array or
  writing into one (np.asarray, out=) raises a TypeError that says why.
* check_grads names the argument, the element, both values and the relative error.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.primitives import elementwise as E


# --- outputs -----------------------------------------------------------------------------------------
def test_grad_of_a_non_scalar_output_names_the_shape_and_the_alternatives():
    with pytest.raises(wg.NonScalarOutputError) as info:
        wg.grad(lambda x: x * 2)(np.ones((2, 3)))
    message = str(info.value)
    assert "(2, 3)" in message and "vjp" in message and "jacobian" in message
    assert isinstance(info.value, TypeError)


def test_grad_of_a_pytree_output_is_a_non_scalar_output():
    with pytest.raises(wg.NonScalarOutputError, match="vjp"):
        wg.grad(lambda x: (wnp.sum(x), wnp.sum(x)))(np.ones(3))


@pytest.mark.parametrize("f, dtype", [(lambda x: x > 0, "bool"), (lambda x: 3, "int"),
                                      (lambda x: x * 1j, "complex128")])
def test_grad_of_a_non_real_output_names_its_dtype(f, dtype):
    with pytest.raises(wg.NonScalarOutputError, match=dtype):
        wg.grad(f)(1.0)


# --- inputs ------------------------------------------------------------------------------------------
def loss(weights, bias):
    return wnp.sum(weights * bias)


def test_an_integer_argument_is_named_by_position_and_parameter_name():
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 1 \(bias\) is of dtype int64"):
        wg.grad(loss, argnums=1)(np.ones(3), np.arange(3))
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 0 \(weights\) is of dtype bool"):
        wg.grad(loss)(np.ones(3, bool), np.ones(3))
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 0 \(weights\) is the Python int 3"):
        wg.grad(loss)(3, 2.0)
    with pytest.raises(TypeError, match="astype"):  # it is a TypeError, and says what to do
        wg.grad(loss)(3, 2.0)


def test_an_integer_argument_outside_argnums_is_fine():
    np.testing.assert_allclose(wg.grad(loss)(np.ones(3), np.arange(3)), np.arange(3))


@dataclasses.dataclass
class Params:
    w: object
    steps: object


def test_a_non_float_leaf_is_named_by_its_pytree_path():
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 0 \(p\)\['layers'\]\[1\]\['b'\] "):
        wg.grad(lambda p: wnp.sum(p["layers"][0]["w"]))(
            {"layers": [{"w": np.ones(2), "b": np.zeros(2)}, {"w": np.ones(2), "b": np.zeros(2, int)}]})
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 0 \(p\)\.steps is the Python int 10"):
        wg.grad(lambda p: wnp.sum(p.w))(Params(np.ones(2), 10))
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 1 \(state\)\[0\]\.steps is a str"):
        wg.grad(lambda x, state: x, argnums=(0, 1))(1.0, [Params(1.0, "ten")])


def test_vjp_and_jacobian_check_their_inputs_the_same_way():
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 1 \(n\)"):
        wg.vjp(lambda x, n: x * n, 1.0, 3)
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 0 \(x\) is of dtype int64"):
        wg.jacobian(lambda x: x)(np.arange(3))


def test_argnums_must_name_existing_positional_arguments():
    with pytest.raises(ValueError, match="argnums=2"):
        wg.grad(lambda x, y: x * y, argnums=2)(1.0, 2.0)
    with pytest.raises(ValueError, match="argnums=-3"):
        wg.grad(lambda x, y: x * y, argnums=-3)(1.0, 2.0)
    with pytest.raises(TypeError, match="argnums must be an int or a tuple of ints"):
        wg.grad(lambda x: x, argnums="0")(1.0)


def test_has_aux_needs_a_pair():
    with pytest.raises(TypeError, match=r"has_aux=True.*pair"):
        wg.grad(lambda x: x * 2, has_aux=True)(1.0)


def test_vjp_fn_checks_the_cotangent_against_the_output():
    out, vjp_fn = wg.vjp(lambda x: (x * 2, x.sum()), np.ones(3))
    with pytest.raises(ValueError, match="structure"):
        vjp_fn(np.ones(3))
    with pytest.raises(ValueError, match=r"shape \(2,\) for an output of shape \(3,\)"):
        vjp_fn((np.ones(2), 1.0))


# --- functions without a derivative --------------------------------------------------------------------
@pytest.mark.parametrize("name, call", [
    ("numpy.put", lambda x: np.put(x, [0], x[1:2]) or x),
    ("numpy.putmask", lambda x: np.putmask(x, x > 1, 0.0) or x),
    ("numpy.fill_diagonal", lambda x: np.fill_diagonal(x.reshape(2, 2), 0.0) or x),
])
def test_a_numpy_function_without_a_rule_raises_no_derivative_error_naming_it(name, call):
    with pytest.raises(wg.NoDerivativeError) as info:
        wg.grad(lambda x: wnp.sum(call(x)))(np.arange(1.0, 5.0))
    assert str(info.value).startswith(f"{name} has no derivative rule")
    assert isinstance(info.value, NotImplementedError)


def test_the_same_function_on_plain_arrays_is_numpy():
    x = np.arange(1.0, 5.0)
    np.testing.assert_array_equal(wnp.unwrap(x), np.unwrap(x))


# --- leaked tracers ------------------------------------------------------------------------------------
LEAKED = []


def test_a_tracer_used_after_its_transform_returned_raises_leaked_tracer_error():
    def f(x):
        LEAKED.append(x * 2)  # stored in a global: outlives the transform
        return x * 3

    assert wg.grad(f)(2.0) == 3.0
    leaked = LEAKED.pop()
    with pytest.raises(wg.LeakedTracerError, match=r"^multiply: .*after the transform .*has_aux"):
        leaked * 2
    with pytest.raises(wg.LeakedTracerError, match="^sin"):
        np.sin(leaked)
    with pytest.raises(wg.LeakedTracerError):  # also inside a later transform
        wg.grad(lambda y: y * leaked)(1.0)


# --- reading values, writing arrays ------------------------------------------------------------------------
def test_python_control_flow_reads_the_value_of_a_traced_scalar():
    def f(x):
        if x > 0:
            return x ** 2
        return -x * 3

    assert wg.grad(f)(2.0) == 4.0
    assert wg.grad(f)(-2.0) == -3.0
    with pytest.warns(wg.GradientDroppedWarning):  # float(x) is a constant, and wengert says so
        assert wg.grad(lambda x: x * float(x))(3.0) == 3.0
    assert wg.grad(lambda x: x * float(wg.stop_gradient(x)))(3.0) == 3.0
    assert wg.grad(lambda x: x * 2 if bool(x > 0) else x)(1.0) == 2.0
    with pytest.warns(wg.GradientDroppedWarning):
        assert wg.grad(lambda x: x * int(x) + x.item())(2.5) == 2.0
    assert wg.grad(lambda x: wnp.sum(x[x > 0]) if (x > 0).any() else 0.0)(np.array([-1.0, 1.0])).tolist() == [0, 1]


@pytest.mark.parametrize("convert", [np.asarray, np.array, lambda t: np.array([t[0], t[1]])])
def test_np_asarray_of_a_traced_value_raises_a_type_error_that_explains_why(convert):
    with pytest.raises(TypeError) as info:
        wg.grad(lambda x: wnp.sum(convert(x)))(np.ones(2))
    message = str(info.value)
    assert "gradient" in message and "wnp.asarray" in message and "wg.stop_gradient(x)" in message
    assert isinstance(info.value, wg.TracerConversionError)


def test_out_on_a_traced_value_raises_and_leaves_the_buffer_alone():
    buffer = np.full(3, 7.0)
    with pytest.raises(TypeError, match="out="):
        wg.grad(lambda x: wnp.sum(np.sin(x, out=buffer)))(np.ones(3))
    with pytest.raises((TypeError, NotImplementedError), match="out="):
        wg.grad(lambda x: np.sum(x, out=np.zeros(())))(np.ones(3))
    with pytest.raises((TypeError, NotImplementedError), match="out="):
        wg.grad(lambda x: x.sum(out=np.zeros(())))(np.ones(3))
    np.testing.assert_array_equal(buffer, np.full(3, 7.0))


# --- check_grads -------------------------------------------------------------------------------------------
@pytest.fixture
def wrong_sin_rule(monkeypatch):
    """sin's rule made wrong by a factor 2 (restored after the test)."""
    monkeypatch.setattr(E.sin, "vjp", (lambda g, ans, x: g * 2 * E.cos(x),))


def model(w, b):
    return wnp.sum(wnp.sin(w) * b)


def test_check_grads_passes_on_correct_derivatives():
    w, b = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])
    assert wg.check_grads(model, (w, b), order=2) is None
    assert wg.check_grads(lambda p: {"a": wnp.sin(p["w"]), "b": p["w"] ** 2}, ({"w": w},)) is None


def test_check_grads_names_argument_element_both_values_and_the_relative_error(wrong_sin_rule):
    w, b = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])
    with pytest.raises(AssertionError) as info:
        wg.check_grads(model, (w, b))
    message = str(info.value)
    # the largest mismatch is at element 2: reverse mode says 2 * 3 cos(0.3), the truth is 3 cos(0.3)
    assert "gradient of model with respect to argument 0 (w)" in message
    assert "at element (2,)" in message
    rev, num, rel = map(float, re.search(
        r"reverse mode gives (\S+), finite differences give (\S+) \(relative error (\S+);", message).groups())
    assert rev == pytest.approx(6 * np.cos(0.3), rel=1e-12)
    assert num == pytest.approx(3 * np.cos(0.3), rel=1e-8)
    assert rel == pytest.approx(1.0, rel=1e-3)


def test_check_grads_names_the_pytree_path_of_the_leaf(wrong_sin_rule):
    # the error, cos(w), is largest at element (0, 1), where w = 0
    with pytest.raises(AssertionError, match=r"argument 0 \(p\)\['layer'\]\.w disagrees .* at element \(0, 1\)"):
        wg.check_grads(lambda p: wnp.sum(wnp.sin(p["layer"].w)),
                       ({"layer": Params(np.array([[1.5, 0.0], [1.2, 1.0]]), 1)},))


# A value near 1e6 is rounded to within about 1e-10, which a central difference with eps = 1e-6 turns
# into an error of up to about 1e-4 in a derivative near 1: more than rtol and atol allow, yet no
# fault of the rule.
def offset_sines(x):
    return 1e6 + wnp.sum(wnp.sin(x))


def scaled_sin(scale):
    """sin with a custom rule whose derivative is ``scale`` times the true one."""
    @wg.custom_vjp
    def f(x):
        return wnp.sin(x)
    f.defvjp(lambda x: (wnp.sin(x), x), lambda x, g: (g * scale * wnp.cos(x),))
    return f


def test_check_grads_allows_for_the_round_off_of_the_differences_of_a_large_value():
    x = np.linspace(-1.0, 1.0, 41)
    assert wg.check_grads(offset_sines, (x,), modes=("rev", "fwd")) is None
    right = scaled_sin(1.0)
    assert wg.check_grads(lambda x: 1e6 + wnp.sum(right(x)), (x,)) is None


@pytest.mark.parametrize("scale", [1.01, 0.99])
def test_check_grads_still_catches_a_derivative_1_percent_off_on_a_large_value(scale):
    x = np.linspace(-1.0, 1.0, 41)
    wrong = scaled_sin(scale)
    with pytest.raises(AssertionError, match=r"allowance for the differences' round-off"):
        wg.check_grads(lambda x: 1e6 + wnp.sum(wrong(x)), (x,))


def test_check_grads_holds_integer_arguments_and_leaves_fixed():
    x = np.array([0.5, 1.0, 2.0])
    assert wg.check_grads(lambda x, n: wnp.sum(x[:n] ** 2), (x, 2)) is None
    assert wg.check_grads(lambda p: wnp.sum(p["x"][:p["n"]] ** 3), ({"x": x, "n": np.int64(2)},), order=2) is None


def test_check_grads_of_order_two_names_the_order_and_the_argument(monkeypatch):
    monkeypatch.setattr(E.cos, "vjp", (lambda g, ans, x: g * E.sin(x),))  # sign error in cos' rule
    w, b = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])
    assert wg.check_grads(model, (w, b), order=1) is None  # first derivatives do not use cos' rule
    with pytest.raises(AssertionError, match=r"check_grads \(order 2\).* of model .*argument 0 \(w\)"):
        wg.check_grads(model, (w, b), order=2)

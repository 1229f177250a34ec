"""The transforms' promises: what grad, value_and_grad, vjp, jacobian (jacrev) and hessian take
and what they give back.

* ``argnums`` picks positional arguments (an int, a tuple, negative from the end); keyword
  arguments are passed through undifferentiated; ``has_aux`` returns a second, plain output.
* Arguments and outputs may be pytrees (tuples, lists, dicts, namedtuples, dataclasses, nested,
  frozen, with ``None`` leaves); gradients come back in the arguments' structure, shapes and
  floating dtypes, and a scalar argument gets a scalar gradient.
* ``vjp_fn`` can be called again; a Jacobian block has shape ``out.shape + in.shape``.
* Transforms nest: higher derivatives, derivatives of closures over outer traced values, and no
  perturbation confusion between levels.
"""
from __future__ import annotations

import dataclasses
from collections import namedtuple

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp


def numeric_jacobian(f, x, eps=1e-6):
    """Central finite differences of plain-NumPy ``f`` at float64 ``x``: shape out + in."""
    x = np.asarray(x, dtype=np.float64)
    out_shape = np.shape(f(x))
    J = np.zeros(out_shape + x.shape)
    for i in np.ndindex(*x.shape):
        dx = np.zeros_like(x)
        dx[i] = eps
        J[(Ellipsis,) + i] = (np.asarray(f(x + dx)) - np.asarray(f(x - dx))) / (2 * eps)
    return J


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# --- grad and argnums -----------------------------------------------------------------------------
def test_grad_of_a_scalar_function_is_its_analytic_gradient(rng):
    x = rng.standard_normal(5)
    g = wg.grad(lambda x: wnp.sum(wnp.sin(x) * x))(x)
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x))


def test_argnums_int_differentiates_that_argument_only(rng):
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    f = lambda x, y: wnp.sum(x * y ** 2)
    np.testing.assert_allclose(wg.grad(f)(x, y), y ** 2)
    np.testing.assert_allclose(wg.grad(f, argnums=1)(x, y), 2 * x * y)


def test_argnums_tuple_returns_a_tuple_in_the_order_asked(rng):
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    f = lambda x, y: wnp.sum(x * y ** 2)
    gy, gx = wg.grad(f, argnums=(1, 0))(x, y)
    np.testing.assert_allclose(gx, y ** 2)
    np.testing.assert_allclose(gy, 2 * x * y)
    single = wg.grad(f, argnums=(0,))(x, y)
    assert isinstance(single, tuple) and len(single) == 1
    np.testing.assert_allclose(single[0], y ** 2)


def test_negative_argnums_count_from_the_last_positional_argument():
    f = lambda a, b, c: a * b * c
    assert wg.grad(f, argnums=-1)(2.0, 3.0, 5.0) == 6.0
    assert wg.grad(f, argnums=(0, -2))(2.0, 3.0, 5.0) == (15.0, 10.0)


def test_keyword_arguments_are_passed_through_and_not_differentiated():
    f = lambda x, scale=1.0: scale * x ** 2
    assert wg.grad(f)(3.0, scale=10.0) == 60.0
    assert wg.value_and_grad(f)(3.0, scale=2.0) == (18.0, 12.0)
    np.testing.assert_allclose(wg.jacobian(lambda x, *, w: w * x)(np.ones(2), w=3.0), 3 * np.eye(2))


def test_value_and_grad_returns_the_value_of_the_function_too(rng):
    x = rng.standard_normal(4)
    value, g = wg.value_and_grad(lambda x: wnp.sum(wnp.exp(x)))(x)
    np.testing.assert_allclose(value, np.sum(np.exp(x)))
    np.testing.assert_allclose(g, np.exp(x))


def test_has_aux_returns_the_auxiliary_output_as_plain_values(rng):
    x = rng.standard_normal(3)

    def f(x):
        y = wnp.tanh(x)
        return wnp.sum(y ** 2), {"y": y, "label": "tanh", "n": 3}

    g, aux = wg.grad(f, has_aux=True)(x)
    np.testing.assert_allclose(g, 2 * np.tanh(x) * (1 - np.tanh(x) ** 2))
    assert type(aux["y"]) is np.ndarray and aux["label"] == "tanh" and aux["n"] == 3
    np.testing.assert_allclose(aux["y"], np.tanh(x))

    (value, aux), g2 = wg.value_and_grad(f, has_aux=True)(x)
    np.testing.assert_allclose(value, np.sum(np.tanh(x) ** 2))
    np.testing.assert_allclose(g2, g)

    out, vjp_fn, aux = wg.vjp(f, x, has_aux=True)
    np.testing.assert_allclose(vjp_fn(1.0)[0], g)

    J, aux = wg.jacobian(lambda x: (wnp.sin(x), x.sum()), has_aux=True)(x)
    np.testing.assert_allclose(J, np.diag(np.cos(x)))
    np.testing.assert_allclose(aux, x.sum())


def test_constant_output_has_zero_gradient():
    assert wg.grad(lambda x: 3.0)(1.0) == 0.0
    np.testing.assert_array_equal(wg.grad(lambda x, y: wnp.sum(y), argnums=0)(np.ones(2), np.ones(3)),
                                  np.zeros(2))


# --- pytrees ----------------------------------------------------------------------------------------
Pair = namedtuple("Pair", "w b")


@dataclasses.dataclass
class Layer:
    w: object
    b: object


@dataclasses.dataclass(frozen=True)
class Frozen:
    layer: Layer
    scale: object
    extra: object = None


def half_sq_norm(params):
    """0.5 * sum of squares of every leaf: its gradient is ``params`` itself."""
    return sum(0.5 * wnp.sum(leaf ** 2) for leaf in wg.tree.leaves(params))


def tree_examples():
    r = np.random.default_rng(1)
    a, b, c = r.standard_normal((2, 3)), r.standard_normal(3), r.standard_normal(())
    return {
        "tuple": (a, b),
        "list": [a, b, 2.5],
        "dict": {"w": a, "b": b},
        "dict with unsorted keys": {"z": a, "a": b, "m": 1.5},
        "namedtuple": Pair(a, b),
        "dataclass": Layer(a, b),
        "dataclass with a None leaf": Layer(a, None),
        "nested frozen dataclass": Frozen(Layer(a, [b, c]), 0.5),
        "everything nested": {"layers": [Layer(a, Pair(b, None)), Frozen(Layer(b, c), 2.0)],
                              "head": (c, None)},
    }


@pytest.mark.parametrize("name", list(tree_examples()))
def test_gradient_comes_back_in_the_arguments_structure(name):
    params = tree_examples()[name]
    g = wg.grad(half_sq_norm)(params)
    assert wg.tree.structure(g) == wg.tree.structure(params)
    assert type(g) is type(params)
    for gl, pl in zip(wg.tree.leaves(g), wg.tree.leaves(params)):
        assert np.shape(gl) == np.shape(pl)
        np.testing.assert_allclose(gl, pl)


def test_none_leaves_stay_none_and_dict_keys_match():
    g = wg.grad(half_sq_norm)({"z": np.ones(2), "a": None, "m": [None, 3.0]})
    assert g["a"] is None and g["m"][0] is None
    assert set(g) == {"z", "a", "m"}
    np.testing.assert_allclose(g["z"], np.ones(2))
    assert g["m"][1] == 3.0


def test_gradient_of_a_frozen_dataclass_is_a_frozen_instance_of_the_same_class():
    g = wg.grad(half_sq_norm)(Frozen(Layer(np.ones(2), np.zeros(1)), 2.0))
    assert type(g) is Frozen and type(g.layer) is Layer
    assert g.scale == 2.0 and g.extra is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.scale = 1.0


def test_tree_flatten_agrees_with_its_paths_and_round_trips():
    """``flatten`` (the transforms' fast path, which remembers leaf types) gives the leaves and
    definition ``flatten_with_paths`` gives, and classes (a dataclass's class object included)
    stay leaves after their instances were seen as containers."""
    from wengert import tree
    Point = namedtuple("Point", "x y")
    for _ in range(2):     # the second pass runs on the leaf-type memo the first filled
        t = {"b": [Layer(np.ones(2), 1.0), None], "a": (Point(3, np.zeros(1)), Layer, int, "s")}
        leaves, d = tree.flatten(t)
        pairs, d2 = tree.flatten_with_paths(t)
        assert d == d2 and all(a is b for a, (_, b) in zip(leaves, pairs))
        assert leaves[2] is Layer and leaves[3] is int and len(leaves) == 7
        back = tree.unflatten(d, leaves)
        assert type(back["b"][0]) is Layer and back["a"][0] == Point(3, back["a"][0].y)


def test_a_function_may_read_only_some_fields():
    params = {"used": np.ones(3), "unused": np.full((2, 2), 7.0, np.float32)}
    g = wg.grad(lambda p: wnp.sum(p["used"] * 2))(params)
    np.testing.assert_allclose(g["used"], 2.0)
    np.testing.assert_array_equal(g["unused"], np.zeros((2, 2)))
    assert g["unused"].dtype == np.float32


def test_vjp_takes_and_gives_pytrees(rng):
    x = rng.standard_normal(3)
    out, vjp_fn = wg.vjp(lambda p: {"s": wnp.sin(p.w), "t": (p.b * 2, p.w.sum())}, Pair(x, 1.5))
    assert set(out) == {"s", "t"} and len(out["t"]) == 2
    (g,) = vjp_fn({"s": np.ones(3), "t": (1.0, 1.0)})
    assert type(g) is Pair
    np.testing.assert_allclose(g.w, np.cos(x) + 1)
    assert g.b == 2.0


def test_jacobian_nests_output_structure_then_argument_structure(rng):
    x, y = rng.standard_normal((2, 3)), rng.standard_normal(3)
    J = wg.jacobian(lambda x, y: {"a": x * y, "b": x.sum()}, argnums=(0, 1))(x, y)
    assert set(J) == {"a", "b"}
    (Jax, Jay), (Jbx, Jby) = J["a"], J["b"]
    assert Jax.shape == (2, 3, 2, 3) and Jay.shape == (2, 3, 3)
    assert Jbx.shape == (2, 3) and Jby.shape == (3,)
    np.testing.assert_allclose(Jay, numeric_jacobian(lambda y: x * y, y), atol=1e-8)
    np.testing.assert_allclose(Jbx, np.ones((2, 3)))
    np.testing.assert_array_equal(Jby, np.zeros(3))

    J = wg.jacobian(lambda p: Pair(p["w"] ** 2, p["w"][0]))({"w": y})
    assert type(J) is Pair and set(J.w) == {"w"}
    np.testing.assert_allclose(J.w["w"], np.diag(2 * y))
    np.testing.assert_allclose(J.b["w"], np.eye(3)[0])


# --- dtypes and scalars ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype, rtol", [(np.float16, 1e-2), (np.float32, 1e-5), (np.float64, 1e-12)])
def test_gradient_has_the_input_dtype(dtype, rtol):
    x = np.linspace(-1, 1, 5).astype(dtype)
    value, g = wg.value_and_grad(lambda x: wnp.sum(wnp.sin(x) * x))(x)
    assert g.dtype == dtype and g.shape == x.shape
    assert np.asarray(value).dtype == dtype
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(g, np.cos(x64) * x64 + np.sin(x64), rtol=rtol, atol=rtol)


def test_each_argument_keeps_its_own_dtype():
    x, y = np.ones(2, np.float32), np.ones(2, np.float64)
    gx, gy = wg.grad(lambda x, y: wnp.sum(x * y), argnums=(0, 1))(x, y)
    assert gx.dtype == np.float32 and gy.dtype == np.float64


def test_python_float_in_float_out():
    g = wg.grad(lambda x: x ** 3)(2.0)
    assert isinstance(g, float) and not isinstance(g, np.ndarray)
    assert g == 12.0
    gx, gy = wg.grad(lambda x, y: x * y, argnums=(0, 1))(2.0, 3.0)
    assert isinstance(gx, float) and isinstance(gy, float)
    J = wg.jacobian(lambda x: x * 2)(2.0)
    assert isinstance(J, float) and J == 2.0


def test_numpy_scalars_and_zero_d_arrays_keep_their_kind():
    g = wg.grad(lambda x: x ** 2)(np.float32(3.0))
    assert type(g) is np.float32 and g == 6.0
    g = wg.grad(lambda x: x ** 2)(np.array(3.0))
    assert type(g) is np.ndarray and g.shape == () and g == 6.0


def test_jacobian_and_hessian_have_the_input_dtype():
    x = np.ones((2, 3), np.float32)
    assert wg.jacobian(lambda x: x * 2)(x).dtype == np.float32
    assert wg.hessian(lambda x: wnp.sum(x ** 3))(x).dtype == np.float32


# --- vjp --------------------------------------------------------------------------------------------
def test_vjp_is_the_cotangent_times_the_jacobian(rng):
    A = rng.standard_normal((4, 3))
    x = rng.standard_normal(3)
    f = lambda x: wnp.tanh(A @ x)
    out, vjp_fn = wg.vjp(f, x)
    np.testing.assert_allclose(out, np.tanh(A @ x))
    ct = rng.standard_normal(4)
    (g,) = vjp_fn(ct)
    np.testing.assert_allclose(g, ct @ numeric_jacobian(lambda x: np.tanh(A @ x), x), rtol=1e-6)


def test_vjp_fn_can_be_called_again_with_other_cotangents(rng):
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    out, vjp_fn = wg.vjp(lambda x, y: (x * y, wnp.exp(x)), x, y)
    first = vjp_fn((np.ones(3), np.zeros(3)))
    second = vjp_fn((np.zeros(3), np.ones(3)))
    again = vjp_fn((np.ones(3), np.zeros(3)))
    np.testing.assert_allclose(first[0], y)
    np.testing.assert_allclose(first[1], x)
    np.testing.assert_allclose(second[0], np.exp(x))
    np.testing.assert_array_equal(second[1], np.zeros(3))
    np.testing.assert_array_equal(again[0], first[0])
    np.testing.assert_array_equal(again[1], first[1])


@pytest.mark.parametrize("seed", [1.0, 1, np.float64(1.0), np.ones((), np.float64), np.ones((), np.float16)],
                         ids=["python float", "python int", "float64 scalar", "float64 0-d", "float16 0-d"])
def test_vjp_takes_the_cotangent_in_the_outputs_dtype(seed, rng):
    """A ``1.0`` seed for a float32 loss: every cotangent of the backward pass stays float32 (a
    float64 one would make each float32 product a mixed one, several times slower, and the
    gradient would be cast back to float32 anyway). PyTorch casts the same way."""
    W = rng.standard_normal((5, 4)).astype(np.float32)
    x = rng.standard_normal(4).astype(np.float32)
    seen = []

    @wg.custom_vjp
    def probe(v):
        return v

    probe.defvjp(lambda v: (v, None), lambda _, g: (seen.append(g.dtype) or g,))
    f = lambda W: wnp.sum(probe(wnp.tanh(W @ x)) ** 2)
    out, vjp_fn = wg.vjp(f, W)
    assert out.dtype == np.float32
    (g,) = vjp_fn(seed)
    (ref,) = vjp_fn(np.float32(1.0))
    assert seen == [np.float32, np.float32]
    np.testing.assert_array_equal(g, ref)


# --- jacobian -----------------------------------------------------------------------------------------
def test_jacobian_shape_is_output_shape_then_input_shape_and_matches_finite_differences(rng):
    W = rng.standard_normal((2, 3, 4))
    x = rng.standard_normal(4)
    J = wg.jacobian(lambda x: wnp.sin(W @ x))(x)
    assert J.shape == (2, 3, 4)
    np.testing.assert_allclose(J, numeric_jacobian(lambda x: np.sin(W @ x), x), rtol=1e-6, atol=1e-8)

    X = rng.standard_normal((2, 2))
    J = wg.jacrev(lambda X: X @ X)(X)
    assert J.shape == (2, 2, 2, 2)
    np.testing.assert_allclose(J, numeric_jacobian(lambda X: X @ X, X), rtol=1e-6, atol=1e-8)


def test_jacobian_of_a_scalar_function_is_its_gradient(rng):
    x = rng.standard_normal(3)
    f = lambda x: wnp.sum(wnp.cos(x) ** 2)
    np.testing.assert_allclose(wg.jacobian(f)(x), wg.grad(f)(x))


def test_jacrev_is_jacobian():
    assert wg.jacrev is wg.jacobian


# --- hessian --------------------------------------------------------------------------------------------
def test_hessian_of_a_quadratic_form_is_the_symmetrized_matrix(rng):
    A = rng.standard_normal((3, 3))
    x = rng.standard_normal(3)
    np.testing.assert_allclose(wg.hessian(lambda x: x @ A @ x)(x), A + A.T, rtol=1e-12)


def test_hessian_of_logsumexp_is_diag_p_minus_p_p_transpose(rng):
    x = rng.standard_normal(4)
    H = wg.hessian(lambda x: wnp.log(wnp.sum(wnp.exp(x))))(x)
    p = np.exp(x) / np.exp(x).sum()
    np.testing.assert_allclose(H, np.diag(p) - np.outer(p, p), atol=1e-12)


def test_hessian_of_rosenbrock():
    f = lambda v: (1 - v[0]) ** 2 + 100 * (v[1] - v[0] ** 2) ** 2
    x, y = 0.5, -0.3
    H = wg.hessian(f)(np.array([x, y]))
    expected = np.array([[2 - 400 * (y - x ** 2) + 800 * x ** 2, -400 * x],
                         [-400 * x, 200.0]])
    np.testing.assert_allclose(H, expected, rtol=1e-12)


def test_hessian_with_respect_to_two_arguments_gives_all_blocks(rng):
    x, y = rng.standard_normal(2), rng.standard_normal(2)
    (Hxx, Hxy), (Hyx, Hyy) = wg.hessian(lambda x, y: wnp.sum(x ** 2 * y), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(Hxx, np.diag(2 * y))
    np.testing.assert_allclose(Hxy, np.diag(2 * x))
    np.testing.assert_allclose(Hyx, np.diag(2 * x))
    np.testing.assert_array_equal(Hyy, np.zeros((2, 2)))


# --- higher order and nesting ---------------------------------------------------------------------------
def test_grad_of_grad_is_the_second_derivative():
    x = 0.7
    assert wg.grad(wg.grad(wnp.sin))(x) == pytest.approx(-np.sin(x), rel=1e-12)
    assert wg.grad(wg.grad(lambda x: x ** 3))(2.0) == pytest.approx(12.0)


def test_third_derivative():
    assert wg.grad(wg.grad(wg.grad(lambda x: x ** 4)))(2.0) == pytest.approx(48.0)
    x = 0.3
    assert wg.grad(wg.grad(wg.grad(wnp.tanh)))(x) == pytest.approx(
        -2 * (1 - np.tanh(x) ** 2) * (1 - 3 * np.tanh(x) ** 2), rel=1e-10)


def test_jacobian_of_grad_is_the_hessian(rng):
    x = rng.standard_normal(3)
    f = lambda x: wnp.sum(x ** 3) + wnp.prod(x)
    H = wg.jacobian(wg.grad(f))(x)
    expected = np.diag(6 * x) + np.array([[0, x[2], x[1]], [x[2], 0, x[0]], [x[1], x[0], 0]])
    np.testing.assert_allclose(H, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(wg.hessian(f)(x), H)


def test_hessian_vector_product_by_grad_of_a_dot(rng):
    A = rng.standard_normal((3, 3))
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    f = lambda x: 0.5 * x @ A @ x + wnp.sum(wnp.sin(x))
    hvp = wg.grad(lambda x: wg.grad(f)(x) @ v)(x)
    np.testing.assert_allclose(hvp, (0.5 * (A + A.T) - np.diag(np.sin(x))) @ v, rtol=1e-12)


def test_no_perturbation_confusion():
    # d/dx [x * (d/dy (x + y))] = d/dx [x * 1] = 1; mixing the two levels' perturbations gives 2.
    assert wg.grad(lambda x: x * wg.grad(lambda y: x + y)(1.0))(2.0) == 1.0
    # d/dx [x * (d/dy (x * y))] = d/dx [x * x] = 2x = 4 at x = 2.
    assert wg.grad(lambda x: x * wg.grad(lambda y: x * y)(1.0))(2.0) == 4.0


def test_inner_transform_may_close_over_an_outer_traced_value():
    # inner: d/dy sin(x y) at y = 1 is x cos(x); its derivative is cos(x) - x sin(x)
    x = 0.5
    g = wg.grad(lambda x: wg.grad(lambda y: wnp.sin(x * y))(1.0))(x)
    assert g == pytest.approx(np.cos(x) - x * np.sin(x), rel=1e-12)


def test_inner_transform_may_take_an_outer_traced_value_as_argument(rng):
    assert wg.grad(lambda x: wg.grad(lambda y: y ** 3)(x))(2.0) == pytest.approx(12.0)
    w = rng.standard_normal(3)
    # inner gradient of sum(w * y^2) in y is 2 w y; the outer differentiates sum(2 w y) in w at y = 1
    g = wg.grad(lambda w: wnp.sum(wg.grad(lambda y: wnp.sum(w * y ** 2))(np.ones(3))))(w)
    np.testing.assert_allclose(g, 2 * np.ones(3))


def test_inner_output_independent_of_its_argument_gives_zero_inside_an_outer_transform():
    assert wg.grad(lambda x: x * wg.grad(lambda y: x ** 2)(1.0))(3.0) == 0.0

"""Manual gradients: wg.custom_vjp (JAX's semantics) and wg.op (backprop's op1), the errors a wrong
rule gets, and the check_custom_gradients debug switch."""
from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import sys
import warnings
from collections import namedtuple

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert import CustomGradientError


# --- custom_vjp ------------------------------------------------------------------------------------
@wg.custom_vjp
def sin_times(x, y):
    return wnp.sin(x) * y


calls = {"fwd": 0, "bwd": 0}


def _sin_times_fwd(x, y):
    calls["fwd"] += 1
    return sin_times(x, y), (wnp.cos(x), wnp.sin(x), y)


def _sin_times_bwd(res, g):
    calls["bwd"] += 1
    cos_x, sin_x, y = res
    return (cos_x * g * y, sin_x * g)


sin_times.defvjp(_sin_times_fwd, _sin_times_bwd)

X = np.array([0.3, 1.2, -0.7])
Y = np.array([2.0, -1.0, 0.5])


def test_plain_call_runs_the_function_not_fwd():
    before = dict(calls)
    np.testing.assert_allclose(sin_times(X, Y), np.sin(X) * Y)
    assert calls == before
    assert sin_times.__name__ == "sin_times"


def test_gradient_comes_from_the_rule():
    @wg.custom_vjp
    def clip_gradient(x):
        return x

    clip_gradient.defvjp(lambda x: (x, None), lambda res, g: (wnp.clip(g, -1, 1),))
    g = wg.grad(lambda x: wnp.sum(clip_gradient(x) * 5.0))(X)
    np.testing.assert_array_equal(g, np.ones(3))      # the rule clipped 5 to 1


def test_inside_grad_value_and_grad_vjp_and_jacobian():
    f = lambda x, y: wnp.sum(sin_times(x, y) ** 2)     # noqa: E731
    ref = (2 * np.sin(X) * Y * np.cos(X) * Y, 2 * np.sin(X) * Y * np.sin(X))
    gx, gy = wg.grad(f, argnums=(0, 1))(X, Y)
    np.testing.assert_allclose(gx, ref[0])
    np.testing.assert_allclose(gy, ref[1])
    value, gx = wg.value_and_grad(f)(X, Y)
    np.testing.assert_allclose(value, np.sum((np.sin(X) * Y) ** 2))
    out, vjp_fn = wg.vjp(sin_times, X, Y)
    for _ in range(2):                                 # the tape is kept: vjp_fn can be called again
        cx, cy = vjp_fn(np.ones(3))
        np.testing.assert_allclose(cx, np.cos(X) * Y)
        np.testing.assert_allclose(cy, np.sin(X))
    np.testing.assert_allclose(wg.jacobian(sin_times)(X, Y), np.diag(np.cos(X) * Y))


def test_second_order_when_the_rule_uses_wengert_numpy():
    np.testing.assert_allclose(wg.hessian(lambda x: wnp.sum(sin_times(x, Y)))(X), np.diag(-np.sin(X) * Y))
    wg.check_grads(sin_times, (X, Y), order=2)
    np.testing.assert_allclose(wg.grad(wg.grad(lambda x: sin_times(x, 2.0)))(0.3), -2 * np.sin(0.3))


def test_pytrees_in_and_out():
    @wg.custom_vjp
    def f(params, x):
        return {"out": params["w"] * x, "aux": (params["b"] + x, x * 0)}

    def fwd(params, x):
        return f(params, x), (params, x)

    def bwd(res, g):
        params, x = res
        return ({"w": g["out"] * x, "b": g["aux"][0]}, g["out"] * params["w"] + g["aux"][0])

    f.defvjp(fwd, bwd)
    params = {"w": np.array([1.0, 2.0]), "b": np.array([0.5, -0.5])}
    x = np.array([3.0, 4.0])

    def loss(params, x):
        out = f(params, x)
        return wnp.sum(out["out"] ** 2) + wnp.sum(out["aux"][0])

    gp, gx = wg.grad(loss, argnums=(0, 1))(params, x)
    np.testing.assert_allclose(gp["w"], 2 * params["w"] * x * x)
    np.testing.assert_allclose(gp["b"], np.ones(2))
    np.testing.assert_allclose(gx, 2 * params["w"] ** 2 * x + 1)
    wg.check_grads(loss, (params, x))


def test_nondiff_argnums_pass_to_bwd_first():
    @functools.partial(wg.custom_vjp, nondiff_argnums=(0,))
    def apply(fn, x):
        return fn(x)

    def fwd(fn, x):
        return fn(x), x

    def bwd(fn, x, g):
        return (g * 2 * x,)            # the rule for fn = square

    apply.defvjp(fwd, bwd)
    g = wg.grad(lambda x: wnp.sum(apply(lambda v: v * v, x)))(X)
    np.testing.assert_allclose(g, 2 * X)


def test_nondiff_argnums_in_the_middle_and_keyword_arguments():
    @functools.partial(wg.custom_vjp, nondiff_argnums=(1,))
    def scale(x, k, y=1.0):
        return x * k * y

    scale.defvjp(lambda x, k, y: (scale(x, k, y), (x, y)),
                 lambda k, res, g: (g * k * res[1], wnp.sum(g * k * res[0])))
    gx, gy = wg.grad(lambda x, y: wnp.sum(scale(x, 3.0, y=y)), argnums=(0, 1))(X, 2.0)
    np.testing.assert_allclose(gx, np.full(3, 6.0))
    np.testing.assert_allclose(gy, 3 * X.sum())


def test_integer_arguments_and_unused_outputs():
    @wg.custom_vjp
    def pick(x, i):
        return x[i], x * 2

    pick.defvjp(lambda x, i: (pick(x, i), (x.shape, i)),
                lambda res, g: (wnp.where(np.arange(res[0][0]) == res[1], g[0], 0.0) + 2 * g[1], None))
    g = wg.grad(lambda x: pick(x, 1)[0] * 3)(X)     # second output unused: bwd gets zeros for it
    np.testing.assert_allclose(g, [0, 3, 0])


def test_the_same_function_used_twice_accumulates():
    g = wg.grad(lambda x: wnp.sum(sin_times(x, Y)) + wnp.sum(sin_times(x, 2 * Y)))(X)
    np.testing.assert_allclose(g, np.cos(X) * 3 * Y)


def test_check_grads_works_on_custom_functions():
    wg.check_grads(lambda x: sin_times(x, Y), (X,), order=2)

    @wg.custom_vjp
    def wrong(x):
        return x ** 2

    wrong.defvjp(lambda x: (wrong(x), x), lambda x, g: (g * 3 * x,))
    with pytest.raises(AssertionError, match="wrong"):
        wg.check_grads(wrong, (X,))


# --- errors at the point of the mistake ---------------------------------------------------------------
def _with_bwd(bwd, fwd=None, name="myrule"):
    def fn(x, y):
        return x * y
    fn.__name__ = fn.__qualname__ = name
    f = wg.custom_vjp(fn)
    f.defvjp(fwd or (lambda x, y: (x * y, (x, y))), bwd)
    return f


X32 = X.astype(np.float32)


@pytest.mark.parametrize("bwd, message", [
    (lambda res, g: g * res[1], r"bwd returned an array of shape \(3,\).*tuple with one cotangent per "
                                r"differentiable argument \(2 here\)"),
    (lambda res, g: (g * res[1],), r"bwd returned 1 cotangent\(s\) for 2 differentiable argument\(s\)"),
    (lambda res, g: (g[:2], None), r"shape \(2,\) and dtype float32 for argument 0 \(x\), which has shape "
                                   r"\(3,\) and dtype float32; the shape must match"),
    (lambda res, g: (g.astype(np.float64), None), r"dtype float64 for argument 0 \(x\).*dtype must match"),
    (lambda res, g: (None, "oops"), r"returned a str as the cotangent of argument 1 \(y\)"),
])
def test_a_wrong_rule_is_named_with_what_was_expected(bwd, message):
    f = _with_bwd(bwd)
    with pytest.raises(CustomGradientError, match="custom_vjp function 'myrule'.*" + message):
        wg.grad(lambda x, y: wnp.sum(f(x, y)), argnums=(0, 1))(X32, X32)


def test_a_wrong_pytree_structure_is_named():
    @wg.custom_vjp
    def f(p):
        return p["a"] * p["b"]

    f.defvjp(lambda p: (f(p), p), lambda p, g: ({"a": g * p["b"]},))
    with pytest.raises(CustomGradientError, match=r"for argument 0 \(p\) has structure.*expected"):
        wg.grad(lambda p: wnp.sum(f(p)))({"a": X, "b": Y})
    f.defvjp(lambda p: (f(p), p), lambda p, g: ({"a": g * p["b"], "b": None},))   # None: zero
    np.testing.assert_allclose(wg.grad(lambda p: wnp.sum(f(p)))({"a": X, "b": Y})["b"], np.zeros(3))


def test_fwd_must_return_a_pair_and_defvjp_must_be_called():
    f = _with_bwd(lambda res, g: (g, g), fwd=lambda x, y: x * y)
    with pytest.raises(CustomGradientError, match=r"'myrule': fwd must return a pair \(output, residuals\)"):
        wg.grad(lambda x: wnp.sum(f(x, X)))(X)

    @wg.custom_vjp
    def no_rule(x):
        return x

    np.testing.assert_array_equal(no_rule(X), X)
    with pytest.raises(CustomGradientError, match="defvjp"):
        wg.grad(lambda x: wnp.sum(no_rule(x)))(X)


def test_a_traced_nondiff_argument_is_refused():
    f = wg.custom_vjp(lambda x, k: x * k, nondiff_argnums=(1,))
    f.defvjp(lambda x, k: (x * k, None), lambda k, res, g: (g * k,))
    with pytest.raises(CustomGradientError, match="nondiff_argnums"):
        wg.grad(lambda x: wnp.sum(f(x, x)))(X)


# --- wg.op: backprop's op1 -----------------------------------------------------------------------------
MT = namedtuple("MT", "x y z")


def my_func(mt):                      # automatic: AD through the three field reads
    return mt.x * mt.y + mt.z


@wg.op
def my_func_manual(mt):               # manual: one pullback for the whole record
    return mt.x * mt.y + mt.z, lambda d: MT(d * mt.y, mt.x * d, d)


def test_the_record_example_written_both_ways():
    mt = MT(5.0, 7.0, 2.0)
    assert my_func_manual(mt) == my_func(mt) == 37.0
    assert wg.grad(my_func)(mt) == MT(7.0, 5.0, 1.0)
    assert wg.grad(my_func_manual)(mt) == MT(7.0, 5.0, 1.0)
    expected = MT(-0.5753964555687505, -0.41099746826339323, -0.08219949365267865)   # backprop's figures
    for f in (my_func, my_func_manual):
        g = wg.grad(lambda m: -wnp.sqrt(f(m)))(mt)
        np.testing.assert_allclose(tuple(g), expected, rtol=1e-15)


def test_op_with_several_arguments_and_a_dataclass():
    @dataclasses.dataclass
    class Layer:
        w: np.ndarray
        b: np.ndarray

    @wg.op
    def dense(layer, x):
        out = x @ layer.w + layer.b
        return out, lambda g: (Layer(x.T @ g, g.sum(0)), g @ layer.w.T)

    rng = np.random.default_rng(1)
    layer, x = Layer(rng.standard_normal((3, 2)), rng.standard_normal(2)), rng.standard_normal((4, 3))
    loss = lambda layer, x: wnp.sum(wnp.tanh(dense(layer, x)))          # noqa: E731
    auto = lambda layer, x: wnp.sum(wnp.tanh(x @ layer.w + layer.b))    # noqa: E731
    g1 = wg.grad(loss, argnums=(0, 1))(layer, x)
    g2 = wg.grad(auto, argnums=(0, 1))(layer, x)
    np.testing.assert_allclose(g1[0].w, g2[0].w)
    np.testing.assert_allclose(g1[0].b, g2[0].b)
    np.testing.assert_allclose(g1[1], g2[1])
    wg.check_grads(loss, (layer, x))


def test_op_is_first_order_only_and_says_so():
    with pytest.raises(CustomGradientError, match="my_func_manual.*differentiated twice.*custom_vjp"):
        wg.grad(wg.grad(my_func_manual))(MT(5.0, 7.0, 2.0))
    with pytest.raises(CustomGradientError, match="differentiated twice"):
        wg.hessian(lambda x: my_func_manual(MT(x, 7.0, 2.0)))(5.0)
    # a traced cotangent (vjp_fn called inside grad) also needs a second-order rule
    _, vjp_fn = wg.vjp(my_func_manual, MT(5.0, 7.0, 2.0))
    with pytest.raises(CustomGradientError, match="differentiated twice"):
        wg.grad(lambda c: vjp_fn(c)[0].x)(1.0)


def test_op_pullback_errors_name_the_op():
    @wg.op
    def double(x):
        return 2 * x, lambda g: (2 * g, 2 * g)

    with pytest.raises(CustomGradientError, match=r"wengert.op function .*double.*the pullback returned a "
                                                  r"cotangent of shape \(2, 3\)"):
        wg.grad(lambda x: wnp.sum(double(x)))(X)

    @wg.op
    def not_a_pair(x):
        return 2 * x

    with pytest.raises(CustomGradientError, match=r"must return a pair \(value, pullback\)"):
        wg.grad(lambda x: wnp.sum(not_a_pair(x)))(X)


# --- check_custom_gradients ---------------------------------------------------------------------------
@pytest.fixture
def checking():
    with wg.config.override(check_custom_gradients=True):
        yield


def _off_by_a_factor(factor):
    @wg.op
    def cube(x, y):
        return x ** 3 * y, lambda g: (g * 3 * x ** 2 * y * factor, g * x ** 3)
    return cube


def test_the_switch_is_off_by_default_and_then_checks_nothing():
    assert wg.config.check_custom_gradients is False
    wrong = _off_by_a_factor(2.0)
    wg.grad(lambda x: wnp.sum(wrong(x, Y)))(X)        # wrong, but not checked: no error


def test_a_wrong_rule_is_caught_on_its_first_call(checking):
    wrong = _off_by_a_factor(1.001)
    with pytest.raises(CustomGradientError, match=r"cube'.*disagrees with finite differences.*Worst element: "
                                                  r"argument 0 \(x\) at index \(\d,\)"):
        wg.grad(lambda x: wnp.sum(wrong(x, Y)))(X)


def test_a_right_rule_passes_and_is_checked_once_per_shape(checking, monkeypatch):
    from wengert.transforms import custom
    checked = []
    real = custom.check_against_finite_differences
    monkeypatch.setattr(custom, "check_against_finite_differences",
                        lambda fn, leaves, *a, **k: (checked.append(leaves[0].shape), real(fn, leaves, *a, **k)))
    right = _off_by_a_factor(1.0)
    for x in (X, X + 1, X[:2], X):
        wg.grad(lambda x: wnp.sum(right(x, Y[:len(x)])))(x)
    assert checked == [(3,), (2,)]
    sin_times._checked.clear()
    wg.grad(lambda x: wnp.sum(sin_times(x, Y)))(X)    # custom_vjp too
    assert len(sin_times._checked) == 1


def test_a_float32_rule_is_checked_in_float64(checking):
    right = _off_by_a_factor(1.0)
    wg.grad(lambda x: wnp.sum(right(x, Y.astype(np.float32))))(X32)


def test_the_environment_variable_turns_the_check_on():
    code = ("import wengert as wg, wengert.numpy as wnp, numpy as np\n"
            "assert wg.config.check_custom_gradients\n"
            "f = wg.op(lambda x: (x * x, lambda g: 3 * g * x))\n"
            "try:\n    wg.grad(lambda x: wnp.sum(f(x)))(np.ones(2))\n"
            "except wg.CustomGradientError as e:\n    print('caught', e)\n")
    env = dict(os.environ, WENGERT_CHECK_CUSTOM_GRADIENTS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "caught" in out.stdout and "finite differences" in out.stdout


def test_config_rejects_unknown_switches():
    with pytest.raises(KeyError, match="check_custom_gradients"):
        wg.config.update("check_custom_gradient", True)
    with pytest.raises(TypeError):
        wg.config.update("rewrites", "no")


def test_a_function_closing_over_a_traced_value_is_refused():
    def loss(w):
        @wg.custom_vjp
        def scale(x):
            return x * w

        scale.defvjp(lambda x: (x * w, None), lambda res, g: (g * w,))
        return wnp.sum(scale(w))

    with pytest.raises(CustomGradientError, match="closes over a value being differentiated"):
        wg.grad(loss)(X)


# --- custom functions under vmap -------------------------------------------------------------------
def _counted_sin_times():
    """custom_vjp sin(x) * y, counting bwd calls (one per batched backward pass, not per example)."""
    calls = []

    @wg.custom_vjp
    def f(x, y):
        return wnp.sin(x) * y

    def f_bwd(res, g):
        calls.append(1)
        cos_x, sin_x, y = res
        return (cos_x * g * y, sin_x * g)

    f.defvjp(lambda x, y: (f(x, y), (wnp.cos(x), wnp.sin(x), y)), f_bwd)
    return f, calls


def test_custom_vjp_under_vmap_runs_fwd_and_bwd_on_the_whole_batch():
    f, calls = _counted_sin_times()
    rng = np.random.default_rng(20)
    x, y = rng.standard_normal((5, 4)), rng.standard_normal(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = wg.vmap(f, in_axes=(0, None))(x, y)
        per_example = wg.vmap(wg.grad(lambda a, b: wnp.sum(f(a, b))), in_axes=(0, None))(x, y)
        nested = wg.vmap(wg.vmap(f))(x, np.ones((5, 4)))
        grad_y = wg.grad(lambda b: wnp.sum(wg.vmap(f, in_axes=(0, None))(x, b) ** 2))(y)
    np.testing.assert_allclose(out, np.sin(x) * y)
    np.testing.assert_allclose(per_example, np.cos(x) * y)
    np.testing.assert_allclose(nested, np.sin(x))
    np.testing.assert_allclose(grad_y, (2 * np.sin(x) ** 2 * y).sum(axis=0))   # y's cotangent summed over the batch
    assert len(calls) == 2   # one batched bwd per gradient
    wg.check_grads(lambda a, b: wnp.sum(wg.vmap(f, in_axes=(0, None))(a, b) ** 2), (x, y), order=2,
                   modes=("fwd", "rev"))


def test_custom_vjp_under_vmap_with_pytrees_nondiff_arguments_and_any_residuals():
    @wg.custom_vjp
    def layer(p, x):
        h = wnp.tanh(x @ p["w"] + p["b"])
        return {"h": h, "total": wnp.sum(h)}

    def layer_fwd(p, x):
        out = layer(p, x)
        return out, (p, x, out["h"], "a tag", x.shape)   # residuals need not be arrays

    def layer_bwd(res, ct):
        p, x, h, tag, shape = res
        assert tag == "a tag" and len(shape) == 1
        gh = (ct["h"] + ct["total"]) * (1 - h * h)
        return {"w": wnp.outer(x, gh), "b": gh}, p["w"] @ gh

    layer.defvjp(layer_fwd, layer_bwd)
    rng = np.random.default_rng(21)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    xs = rng.standard_normal((6, 3))

    def loss(p, x):
        out = layer(p, x)
        return wnp.sum(out["h"] ** 2) + out["total"]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grads = wg.vmap(wg.grad(loss), in_axes=(None, 0))(params, xs)
    for key in params:
        np.testing.assert_allclose(grads[key], np.stack([wg.grad(loss)(params, x)[key] for x in xs]), rtol=1e-12)

    @functools.partial(wg.custom_vjp, nondiff_argnums=(0,))
    def scaled(k, x):
        return wnp.sin(x) * k

    scaled.defvjp(lambda k, x: (scaled(k, x), x), lambda k, x, g: (g * k * wnp.cos(x),))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(wg.vmap(wg.grad(lambda v: wnp.sum(scaled(3.0, v))))(xs), 3 * np.cos(xs))


def test_op_under_vmap_runs_once_per_example_and_says_so():
    @wg.op
    def square(x):
        return x ** 2, lambda g: 2 * x * g

    xs = np.random.default_rng(22).standard_normal((4, 3))
    with pytest.warns(UserWarning, match="no batching rule for square"):
        np.testing.assert_allclose(wg.vmap(square)(xs), xs ** 2)
    with pytest.warns(UserWarning, match="square' is plain NumPy"):
        np.testing.assert_allclose(wg.vmap(wg.grad(lambda v: wnp.sum(square(v))))(xs), 2 * xs)


def test_transforms_of_a_custom_vjp_inside_vmap_are_batched():
    """grad, jacobian, hessian and jvp opened inside the vmapped function run bwd (and its
    transposition) on batched values, as any wengert.numpy code, instead of looping."""
    f, calls = _counted_sin_times()
    rng = np.random.default_rng(23)
    xs, y = rng.standard_normal((4, 3)), rng.standard_normal(3)
    cases = [lambda v: wg.grad(lambda u: wnp.sum(f(u, y) ** 2))(v) * 1.0,
             lambda v: wg.jacobian(lambda u: f(u, y))(v),
             lambda v: wg.grad(lambda w: wnp.sum(f(v, w) ** 2))(y),
             lambda v: wg.hessian(lambda u: wnp.sum(f(u, y) ** 2))(v),
             lambda v: wg.jvp(lambda u: f(u, y), (v,), (v,))[1]]
    for fn in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = wg.vmap(fn)(xs)
        np.testing.assert_allclose(out, np.stack([fn(x) for x in xs]), rtol=1e-12, atol=1e-12)


def test_custom_vjp_under_vmap_with_an_output_that_does_not_depend_on_the_batch():
    """fwd returns an output computed from unbatched arguments only: it is broadcast along the batch."""
    @wg.custom_vjp
    def f(x, y):
        return wnp.sin(x) * y, y * 2.0

    f.defvjp(lambda x, y: ((wnp.sin(x) * y, y * 2.0), (x, y)),
             lambda res, g: (wnp.cos(res[0]) * res[1] * g[0], wnp.sin(res[0]) * g[0] + 2.0 * g[1]))
    rng = np.random.default_rng(24)
    xs, y = rng.random((4, 3)), rng.random(3)

    def loss(xs, y):
        scaled, doubled = wg.vmap(f, in_axes=(0, None))(xs, y)
        return wnp.sum(scaled * doubled)

    gx, gy = wg.grad(loss, argnums=(0, 1))(xs, y)
    np.testing.assert_allclose(gx, np.cos(xs) * y * 2 * y)
    np.testing.assert_allclose(gy, (np.sin(xs) * 4 * y).sum(axis=0))

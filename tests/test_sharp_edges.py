"""No silent gradient loss (docs/sharp-edges.md): each way a gradient used to vanish quietly either
computes the right gradient or raises/warns with a message naming the user's line and the fix.

* A traced value written into a plain NumPy array raises TracerConversionError (wg.Buffer).
* float(), complex(), .item(), .tolist(), math.* warn (GradientDroppedWarning, once per line);
  int(), bool(), round(), math.floor/ceil/trunc are piecewise constant and silent;
  wg.stop_gradient is the explicit spelling and has a zero derivative under every transform.
* copy.copy / copy.deepcopy of tracers (and of pytrees holding them) are the identity on the tape.
* Duplicate argnums are refused naming the argument.
* Messages: a leaked tracer written into, a scipy.special ufunc on a traced value, a list holding
  tracers passed to a wengert.numpy ufunc, a custom_vjp fwd of the wrong shape.
"""
from __future__ import annotations

import copy
import math
import sys
import warnings

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.numpy import _methods


def _line_of(marker):
    """The line number in this file of the source line containing ``marker``."""
    with open(__file__) as source:
        return next(k + 1 for k, line in enumerate(source) if marker in line and "_line_of" not in line)


# --- element writes into a plain array: an error naming the line and wg.Buffer ------------------------
def test_writing_a_traced_element_into_a_plain_array_raises_naming_the_line_and_buffer():
    def f(x):
        out = np.zeros(3)
        for i in range(3):
            out[i] = x[i] * 2.0  # the element write
        return wnp.sum(out)

    with pytest.raises(wg.TracerConversionError) as info:   # wengert's error, not NumPy's ValueError
        wg.grad(f)(np.ones(3))
    message = str(info.value)
    assert f"test_sharp_edges.py:{_line_of('# the element write')}" in message
    assert "wg.Buffer" in message and "wg.stop_gradient" in message
    # the traceback ends at the user's line, not inside NumPy or wengert
    assert info.traceback[-1].lineno + 1 == _line_of("# the element write")


def _write_sum(x):
    out = np.zeros(3)
    out[0] = wnp.sum(x)  # a 0-d write
    return wnp.sum(x * x)


def _write_vector(x):
    out = np.zeros(3)
    out[0] = x * 2.0  # a vector into one element
    return wnp.sum(x * x)


def _write_complex(x):
    out = np.zeros(3, complex)
    out[1] = x[1]  # into a complex array
    return wnp.sum(x * x)


TRANSFORMS = {
    "grad": lambda f, x: wg.grad(f)(x),
    "jvp": lambda f, x: wg.jvp(f, (x,), (np.ones_like(x),)),
    "hessian": lambda f, x: wg.hessian(f)(x),
    "vmap(grad)": lambda f, x: wg.vmap(wg.grad(f))(np.stack([x, x])),
    "grad(vmap)": lambda f, x: wg.grad(lambda y: wnp.sum(wg.vmap(f)(y)))(np.stack([x, x])),
    "jit(grad)": lambda f, x: wg.jit(wg.grad(f))(x),
}


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.parametrize("f", [_write_sum, _write_vector, _write_complex], ids=lambda f: f.__name__)
def test_an_element_write_raises_wengerts_error_under_every_differentiating_transform(f, transform):
    # NumPy replaces any error of the conversion by "setting an array element with a sequence" for
    # an object with __getitem__; the transform running f raises wengert's in its place
    with pytest.raises(wg.TracerConversionError) as info:
        TRANSFORMS[transform](f, np.array([1.0, 2.0, 3.0]))
    message = str(info.value)
    assert "written into a plain NumPy array" in message and "wg.Buffer" in message
    line = f.__code__.co_firstlineno + 2
    assert f"test_sharp_edges.py:{line}" in message
    assert any(entry.lineno + 1 == line and str(entry.path) == __file__ for entry in info.traceback)


def test_an_element_write_under_vmap_alone_runs_once_per_example():
    # nothing is differentiated: the write is what NumPy would do to each example
    seen = []

    def f(x):
        out = np.zeros(2)
        out[0] = wnp.sum(x)
        seen.append(out[0])
        return x * 2.0

    with pytest.warns(UserWarning, match="once per example"):
        np.testing.assert_allclose(wg.vmap(f)(np.array([[1.0, 2.0], [3.0, 4.0]])), [[2.0, 4.0], [6.0, 8.0]])
    assert seen == [3.0, 7.0]


def test_an_element_write_under_jit_alone_names_the_line():
    def f(x):
        out = np.zeros(3)
        out[0] = wnp.sum(x)  # staged write
        return x

    with pytest.raises(wg.ConcretizationError) as info:
        wg.jit(f)(np.ones(3))
    assert f"test_sharp_edges.py:{_line_of('# staged write')}" in str(info.value)


@pytest.mark.parametrize("write", ["slice", "flat", "augmented"])
def test_every_spelling_of_a_write_into_a_plain_array_raises(write):
    def f(x):
        out = np.zeros(3)
        if write == "slice":
            out[0:2] = x[:2]
        elif write == "flat":
            out.flat[1] = x[1]
        else:
            out[1] += x[1]
        return wnp.sum(out * x)

    with pytest.raises((ValueError, TypeError)) as info:
        wg.grad(f)(np.ones(3))
    if write == "flat":   # NumPy's flat iterator replaces wengert's error by its own, without a cause
        assert "setting single item" in str(info.value)
        return
    assert isinstance(info.value, wg.TracerConversionError) and "wg.Buffer" in str(info.value)


def test_the_buffer_the_message_points_to_gives_the_gradient():
    def f(x):
        out = wg.Buffer.zeros(3)
        for i in range(3):
            out[i] = x[i] * 2.0
        return wnp.sum(out.freeze() ** 2)

    np.testing.assert_allclose(wg.grad(f)(np.array([1.0, 2.0, 3.0])), [8.0, 16.0, 24.0])


def test_stop_gradient_is_the_deliberate_spelling_of_an_element_write():
    def f(x):
        out = np.zeros(3)
        for i in range(3):
            out[i] = wg.stop_gradient(x[i])
        return wnp.sum(out * x)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(wg.grad(f)(np.array([1.0, 2.0, 3.0])), [1.0, 2.0, 3.0])


def test_writing_into_an_integer_array_truncates_silently_with_its_zero_derivative():
    def f(x):
        idx = np.zeros(2, dtype=int)
        idx[0] = x[0]   # int(): piecewise constant, so its zero derivative is the right one
        return x[idx[0]] * 3.0

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(wg.grad(f)(np.array([1.7, 5.0])), [0.0, 3.0])


# --- conversions to Python numbers ------------------------------------------------------------------
DROPPING = {
    "float": lambda x: x * float(x),
    "complex": lambda x: x * complex(x).real,
    "item": lambda x: x * x.item(),
    "tolist": lambda x: x * x.tolist(),
    "math.sin": lambda x: x * math.sin(x),
    "math.exp": lambda x: x * math.exp(x),
}


@pytest.mark.parametrize("name", sorted(DROPPING))
def test_a_conversion_that_keeps_the_value_warns_naming_the_line_and_stop_gradient(name):
    with pytest.warns(wg.GradientDroppedWarning) as record:
        g = wg.grad(DROPPING[name])(0.5)
    # the number carries no gradient: d/dx (x * c) = c, the value of the conversion
    expected = {"math.sin": math.sin(0.5), "math.exp": math.exp(0.5)}.get(name, 0.5)
    assert g == pytest.approx(expected)
    assert len(record) == 1
    warning = record[0]
    assert warning.filename == __file__ and warning.lineno == _line_of(f'"{name}": lambda')
    assert "wg.stop_gradient" in str(warning.message)


def test_the_warning_is_shown_once_per_line_under_the_default_filter():
    f = lambda x: x * float(x)  # noqa: E731
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("default")
        for _ in range(5):
            wg.grad(f)(1.0)
    assert len([w for w in record if issubclass(w.category, wg.GradientDroppedWarning)]) == 1


SILENT = {
    "int": lambda x: x * int(x),
    "bool": lambda x: x * bool(x),
    "round": lambda x: x * round(x),
    "math.floor": lambda x: x * math.floor(x),
    "math.ceil": lambda x: x * math.ceil(x),
    "math.trunc": lambda x: x * math.trunc(x),
    "if": lambda x: x * 2.0 if x > 0 else x,
}


@pytest.mark.parametrize("name", sorted(SILENT))
def test_a_piecewise_constant_conversion_is_silent_and_its_zero_derivative_is_right(name):
    x = 2.6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = wg.grad(SILENT[name])(x)
    step = 1e-6   # finite differences agree: the conversion is locally constant at 2.6
    numeric = (SILENT[name](x + step) - SILENT[name](x - step)) / (2 * step)
    assert g == pytest.approx(numeric, rel=1e-6)


@pytest.mark.parametrize("convert", [float, lambda v: v.item(), lambda v: v.tolist(), math.sin])
def test_stop_gradient_converts_without_a_warning(convert):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = wg.grad(lambda x: x * convert(wg.stop_gradient(x)))(0.5)
    assert g == pytest.approx(convert(np.float64(0.5)))


def test_forward_mode_warns_too_and_vmap_alone_does_not():
    with pytest.warns(wg.GradientDroppedWarning):
        _, t = wg.jvp(lambda x: x * float(x), (2.0,), (1.0,))
    assert t == 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", wg.GradientDroppedWarning)
        # float() of a batched value runs the function once per example: plain values, no warning
        with pytest.warns(UserWarning, match="once per example"):
            out = wg.vmap(lambda x: x * float(x))(np.array([1.0, 2.0]))
    np.testing.assert_allclose(out, [1.0, 4.0])


def test_a_leaked_tracer_converts_silently():
    leaked = []
    wg.grad(lambda x: (leaked.append(x * 2), x)[1])(1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert float(leaked[0]) == 3.0


def test_wengert_internals_do_not_warn():
    """check_grads, profile, vmap, hessian and custom rules convert on purpose; none of it warns."""
    @wg.custom_vjp
    def cube(x):
        return x ** 3

    cube.defvjp(lambda x: (x ** 3, x), lambda x, g: (3 * x ** 2 * g,))

    def loss(w):
        return wnp.sum(wnp.tanh(w) * cube(w)) + wnp.max(w)

    w = np.array([0.3, -0.2, 0.7])
    with warnings.catch_warnings():
        warnings.simplefilter("error", wg.GradientDroppedWarning)
        wg.check_grads(loss, (w,), order=2, modes=("fwd", "rev"))
        wg.hessian(loss)(w)
        wg.vmap(wg.grad(loss))(np.stack([w, w + 1]))
        wg.profile(loss, w)


# --- stop_gradient under every transform ------------------------------------------------------------
def test_stop_gradient_has_a_zero_derivative_in_every_interpreter():
    f = lambda x: x * wg.stop_gradient(x)  # noqa: E731   derivative: stop(x) = x
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(wg.grad(lambda x: wnp.sum(f(x)))(x), x)
    np.testing.assert_allclose(wg.jvp(f, (x,), (np.ones(3),))[1], x)
    np.testing.assert_allclose(wg.vmap(f)(x), x * x)
    np.testing.assert_allclose(wg.vmap(wg.grad(f))(x), x)
    np.testing.assert_allclose(wg.jacfwd(f)(x), np.diag(x))
    np.testing.assert_allclose(wg.hessian(lambda x: wnp.sum(f(x)))(x), np.zeros((3, 3)))
    # the outer level's gradient is stopped too, not only the innermost
    assert wg.grad(lambda y: wg.grad(lambda x: x * wg.stop_gradient(x * y))(2.0))(3.0) == 0.0
    # pytrees
    tree = wg.stop_gradient({"a": 1.0, "b": [np.ones(2)]})
    assert tree["a"] == 1.0 and tree["b"][0].shape == (2,)
    g = wg.grad(lambda p: wnp.sum(p["a"] * wg.stop_gradient(p)["b"]))({"a": 2.0, "b": np.ones(2)})
    np.testing.assert_allclose(g["b"], [0.0, 0.0]) and np.testing.assert_allclose(g["a"], 2.0)


# --- copies -----------------------------------------------------------------------------------------
def test_deepcopy_of_a_tracer_is_the_identity_on_the_tape():
    g = wg.grad(lambda x: wnp.sum(copy.deepcopy(x) * x))(np.array([1.0, 2.0]))
    np.testing.assert_allclose(g, [2.0, 4.0])
    g = wg.grad(lambda x: wnp.sum(copy.copy(x) * x))(np.array([1.0, 2.0]))
    np.testing.assert_allclose(g, [2.0, 4.0])


def test_deepcopy_of_a_params_dict_keeps_every_gradient():
    def loss(params, x):
        frozen = copy.deepcopy(params)   # e.g. a target network, copied inside the loss
        shared = copy.copy(params)
        return wnp.sum(wnp.tanh(x @ frozen["w"] + shared["b"]) ** 2) + wnp.sum(params["w"] ** 2)

    params = {"w": np.array([[0.3, -0.5], [0.2, 0.1]]), "b": np.array([0.1, -0.2])}
    x = np.array([[1.0, 2.0], [-1.0, 0.5]])
    wg.check_grads(loss, (params, x))
    reference = wg.grad(lambda p, x: wnp.sum(wnp.tanh(x @ p["w"] + p["b"]) ** 2) + wnp.sum(p["w"] ** 2))(params, x)
    got = wg.grad(loss)(params, x)
    for key in params:
        np.testing.assert_allclose(got[key], reference[key])


def test_deepcopy_keeps_sharing_and_works_under_forward_mode_and_vmap():
    def f(x):
        pair = copy.deepcopy([x, x])
        assert pair[0] is pair[1]       # the memo: one copy for one tracer, as for arrays
        return pair[0] * x

    np.testing.assert_allclose(wg.jvp(f, (np.array([1.0, 2.0]),), (np.ones(2),))[1], [2.0, 4.0])
    np.testing.assert_allclose(wg.vmap(wg.grad(lambda x: f(x)))(np.array([1.0, 2.0])), [2.0, 4.0])
    np.testing.assert_allclose(wg.grad(wg.grad(lambda x: f(x) * x))(1.5), 6 * 1.5)


# --- argnums ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("transform", [wg.grad, wg.value_and_grad, wg.jacobian, wg.jacfwd, wg.hessian])
def test_duplicate_argnums_are_refused_naming_the_argument(transform):
    def f(x, y):
        return wnp.sum(x * y)

    with pytest.raises(ValueError, match=r"argnums=\(1, 1\) names argument 1 \(y\) twice"):
        transform(f, argnums=(1, 1))(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match=r"argument 0 \(x\) twice"):
        transform(f, argnums=(0, -2))(np.ones(2), np.ones(2))


# --- messages ---------------------------------------------------------------------------------------
def test_writing_into_a_leaked_tracer_says_it_leaked():
    leaked = []
    wg.grad(lambda x: (leaked.append(x * 2), wnp.sum(x))[1])(np.ones(3))
    with pytest.raises(wg.LeakedTracerError, match="used after the transform"):
        leaked[0][0] = 1.0


def test_a_scipy_special_ufunc_on_a_traced_value_points_to_wengert_scipy_special(monkeypatch):
    scipy_special = pytest.importorskip("scipy.special")
    # as for a user who has not imported wengert.scipy.special (which registers scipy's ufuncs)
    monkeypatch.delitem(sys.modules, "wengert.scipy.special", raising=False)
    monkeypatch.delitem(_methods.UFUNCS, scipy_special.ndtri, raising=False)
    with pytest.raises(wg.NoDerivativeError) as info:
        wg.grad(lambda x: wnp.sum(scipy_special.ndtri(x)))(np.full(3, 0.3))
    message = str(info.value)
    assert "scipy.special.ndtri" in message and "wengert.scipy.special.ndtri" in message
    assert "numpy.ndtri" not in message


def test_a_list_holding_tracers_passed_to_a_ufunc_names_the_function_and_the_fix():
    with pytest.raises(wg.TracerConversionError) as info:
        wg.grad(lambda x: wnp.sum(wnp.sin([1.0, x])))(0.5)  # the list
    message = str(info.value)
    assert "wengert.numpy.sin was given a list" in message and "wnp.array" in message
    assert f"test_sharp_edges.py:{_line_of('# the list')}" in message
    assert "written into a plain NumPy array" not in message
    # what the message says works
    assert wg.grad(lambda x: wnp.sum(wnp.sin(wnp.array([1.0, x]))))(0.5) == pytest.approx(np.cos(0.5))


def test_np_asarray_of_a_tracer_names_the_line():
    with pytest.raises(wg.TracerConversionError) as info:
        wg.grad(lambda x: wnp.sum(np.asarray(x)))(np.ones(2))  # asarray here
    assert f"test_sharp_edges.py:{_line_of('# asarray here')}" in str(info.value)


@pytest.mark.parametrize("mode", ["grad", "jvp"])
def test_a_custom_vjp_fwd_of_the_wrong_shape_is_blamed_on_fwd(mode):
    @wg.custom_vjp
    def f(x):
        return wnp.sin(x)

    f.defvjp(lambda x: (wnp.sin(x)[:2], wnp.cos(x)), lambda c, g: (c * g,))
    with pytest.raises(wg.CustomGradientError) as info:
        if mode == "grad":
            wg.grad(lambda x: wnp.sum(f(x)))(np.ones(3))
        else:
            wg.jvp(f, (np.ones(3),), (np.ones(3),))
    message = str(info.value)
    assert "fwd returned an output of shape (2,)" in message and "returns shape (3,)" in message
    assert "bwd returned" not in message


def test_a_custom_vjp_fwd_of_the_wrong_structure_is_blamed_on_fwd():
    @wg.custom_vjp
    def f(x):
        return x * 2, x * 3

    f.defvjp(lambda x: (x * 2, None), lambda res, g: (g,))
    with pytest.raises(wg.CustomGradientError, match="fwd returned an output of structure"):
        wg.grad(lambda x: wnp.sum(f(x)[0]))(np.ones(3))

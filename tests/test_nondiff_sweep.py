"""The non-differentiable list (wengert.numpy's ``_NONDIFF``), swept: every entry is argued, and the
argument is checked. A function belongs there only when its zero derivative is the right one:

* ``index``: it returns positions (integers), whatever the values;
* ``integer`` / ``boolean``: its values are integers or booleans;
* ``piecewise constant``: float values that do not move under a small change of the input;
* ``metadata``: shape, size, dtype facts;
* ``constant``: values that do not depend on the input's values at all.

The functions that were listed but whose values move smoothly with an argument (unique, heaviside,
full_like, bincount, histogram, nextafter) are differentiated now; their gradients are checked
against finite differences below.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.numpy import _functions

RNG = np.random.default_rng(14)
X = RNG.uniform(0.2, 3.0, size=7)          # generic points: no ties, far from integers' edges
Y = RNG.uniform(0.2, 3.0, size=7)
INTS = np.array([3, 1, 4, 1, 5, 9, 2])

# name -> (why its zero derivative is right, how to call it on a float array x)
REASONS = {
    "argmax": ("index", lambda x: np.argmax(x)),
    "argmin": ("index", lambda x: np.argmin(x)),
    "argsort": ("index", lambda x: np.argsort(x)),
    "argwhere": ("index", lambda x: np.argwhere(x > 1.0)),
    "nonzero": ("index", lambda x: np.nonzero(x > 1.0)),
    "flatnonzero": ("index", lambda x: np.flatnonzero(x > 1.0)),
    "searchsorted": ("index", lambda x: np.searchsorted(np.sort(x), Y)),
    "digitize": ("index", lambda x: np.digitize(Y, np.sort(x))),   # bin numbers
    "nanargmax": ("index", lambda x: np.nanargmax(x)),
    "nanargmin": ("index", lambda x: np.nanargmin(x)),
    "lexsort": ("index", lambda x: np.lexsort((x, Y))),
    "sign": ("piecewise constant", lambda x: np.sign(x - 1.5)),
    "floor": ("piecewise constant", lambda x: np.floor(x)),
    "ceil": ("piecewise constant", lambda x: np.ceil(x)),
    "round": ("piecewise constant", lambda x: np.round(x, 1)),
    "around": ("piecewise constant", lambda x: np.around(x, 2)),
    "rint": ("piecewise constant", lambda x: np.rint(x)),
    "trunc": ("piecewise constant", lambda x: np.trunc(x)),
    "fix": ("piecewise constant", lambda x: np.fix(x)),
    "floor_divide": ("piecewise constant", lambda x: np.floor_divide(x, 0.7)),
    "spacing": ("piecewise constant", lambda x: np.spacing(x)),   # the float step: constant between powers of 2
    "isnan": ("boolean", lambda x: np.isnan(x)),
    "isinf": ("boolean", lambda x: np.isinf(x)),
    "isfinite": ("boolean", lambda x: np.isfinite(x)),
    "isclose": ("boolean", lambda x: np.isclose(x, Y)),
    "allclose": ("boolean", lambda x: np.allclose(x, Y)),
    "array_equal": ("boolean", lambda x: np.array_equal(x, Y)),
    "array_equiv": ("boolean", lambda x: np.array_equiv(x, Y)),
    "equal": ("boolean", lambda x: np.equal(x, Y)),
    "not_equal": ("boolean", lambda x: np.not_equal(x, Y)),
    "less": ("boolean", lambda x: np.less(x, Y)),
    "less_equal": ("boolean", lambda x: np.less_equal(x, Y)),
    "greater": ("boolean", lambda x: np.greater(x, Y)),
    "greater_equal": ("boolean", lambda x: np.greater_equal(x, Y)),
    "logical_and": ("boolean", lambda x: np.logical_and(x, Y)),
    "logical_or": ("boolean", lambda x: np.logical_or(x, Y)),
    "logical_not": ("boolean", lambda x: np.logical_not(x)),
    "logical_xor": ("boolean", lambda x: np.logical_xor(x, Y)),
    "any": ("boolean", lambda x: np.any(x > 1.0)),
    "all": ("boolean", lambda x: np.all(x > 1.0)),
    "sometrue": ("boolean", lambda x: np.any(x > 1.0)),   # NumPy's old alias of any (absent in NumPy 2)
    "alltrue": ("boolean", lambda x: np.all(x > 1.0)),    # NumPy's old alias of all
    "signbit": ("boolean", lambda x: np.signbit(x - 1.5)),
    "count_nonzero": ("integer", lambda x: np.count_nonzero(x > 1.0)),
    "bitwise_and": ("integer", lambda x: np.bitwise_and(x.astype(int), INTS)),   # integer operands only
    "bitwise_or": ("integer", lambda x: np.bitwise_or(x.astype(int), INTS)),
    "bitwise_xor": ("integer", lambda x: np.bitwise_xor(x.astype(int), INTS)),
    "invert": ("integer", lambda x: np.invert(x.astype(int))),
    "left_shift": ("integer", lambda x: np.left_shift(x.astype(int), 2)),
    "right_shift": ("integer", lambda x: np.right_shift(x.astype(int), 1)),
    "gcd": ("integer", lambda x: np.gcd(x.astype(int), INTS)),
    "lcm": ("integer", lambda x: np.lcm(x.astype(int), INTS)),
    "shape": ("metadata", lambda x: np.shape(x)),
    "ndim": ("metadata", lambda x: np.ndim(x)),
    "size": ("metadata", lambda x: np.size(x)),
    "result_type": ("metadata", lambda x: np.result_type(x)),
    "iscomplexobj": ("metadata", lambda x: np.iscomplexobj(x)),
    "isrealobj": ("metadata", lambda x: np.isrealobj(x)),
    "isscalar": ("metadata", lambda x: np.isscalar(x)),
    "zeros_like": ("constant", lambda x: np.zeros_like(x)),
    "ones_like": ("constant", lambda x: np.ones_like(x)),
    "empty_like": ("constant", lambda x: np.empty_like(x).shape),   # uninitialized: only its shape is defined
}


def test_every_entry_of_the_non_differentiable_list_is_argued():
    listed = {name for name in _functions._NONDIFF}
    assert listed == set(REASONS), (
        f"argue the new entries here: {sorted(listed - set(REASONS))}; drop: {sorted(set(REASONS) - listed)}")


def _leaves(out):
    return list(out) if isinstance(out, tuple) else [out]


# entries for names an older NumPy has (alltrue, sometrue) are checked where that NumPy runs
PRESENT = sorted(name for name in REASONS if hasattr(np, name))


@pytest.mark.parametrize("name", PRESENT)
def test_each_entry_has_the_property_it_is_listed_for(name):
    why, call = REASONS[name]
    out = call(X)
    if why in ("index", "integer", "boolean"):
        for leaf in _leaves(out):
            assert np.asarray(leaf).dtype.kind in "biu", (name, leaf)
    elif why == "piecewise constant":
        for step in (1e-9, -1e-9, 1e-7):
            np.testing.assert_array_equal(call(X + step), out, err_msg=name)
        assert np.asarray(out).dtype.kind == "f"
    elif why == "metadata":
        np.testing.assert_array_equal(np.asarray(call(X * 3.7 + 1.0) == out), True)
    else:   # constant: the same for other values of the same shape
        np.testing.assert_array_equal(call(X * 3.7 + 1.0), out)


@pytest.mark.parametrize("name", PRESENT)
def test_each_entry_reads_a_traced_value_and_returns_no_tracer(name):
    _, call = REASONS[name]
    seen = []

    def f(x):
        seen.append(call(x))
        return wnp.sum(x)

    with warnings.catch_warnings():
        warnings.simplefilter("error", wg.GradientDroppedWarning)
        wg.grad(f)(X)
    assert not any(type(leaf) is wg.Tracer for leaf in _leaves(seen[0]))
    for got, want in zip(_leaves(seen[0]), _leaves(call(X))):
        np.testing.assert_array_equal(got, want)


# --- taken off the list: their values move smoothly with an argument ---------------------------------
def test_unique_values_are_a_gather_with_the_gradient_of_the_first_occurrence():
    x = np.array([3.0, 1.0, 2.0])
    np.testing.assert_allclose(wg.grad(lambda x: wnp.sum(wnp.unique(x) ** 2))(x), [6.0, 2.0, 4.0])
    wg.check_grads(lambda x: wnp.unique(x) * np.arange(1.0, 4.0), (x,), order=2, modes=("fwd", "rev"))
    # ties: the gradient goes to each value's first occurrence; integer outputs as NumPy's
    x = np.array([2.0, 1.0, 2.0, 5.0])
    values, index, inverse, counts = wnp.unique(x, return_index=True, return_inverse=True, return_counts=True)
    g = wg.grad(lambda x: wnp.sum(wnp.unique(x, return_counts=True)[0] * np.array([1.0, 10.0, 100.0])))(x)
    np.testing.assert_allclose(g, [10.0, 1.0, 0.0, 100.0])

    def f(x):
        out = wnp.unique(x, return_index=True, return_inverse=True, return_counts=True)
        for got, want in zip(out[1:], (index, inverse, counts)):
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(out[0].value, values)
        return wnp.sum(out[0])

    wg.grad(f)(x)
    m = np.array([[1.0, 2.0], [2.0, 1.0], [0.5, 3.0]])   # distinct rows: finite differences keep the shape
    wg.check_grads(lambda m: wnp.unique(m, axis=0) * 2.0, (m,))
    np.testing.assert_allclose(wg.vmap(wg.grad(lambda v: wnp.sum(wnp.unique(v) ** 2)))(np.array([[3.0, 1.0], [2.0, 2.0]])),
                               [[6.0, 2.0], [4.0, 0.0]])


def test_heaviside_takes_its_second_argument_where_the_first_is_zero():
    x1 = np.array([-1.0, 0.0, 2.0, 0.0])
    g = wg.grad(lambda h: wnp.sum(wnp.heaviside(x1, h) * np.arange(1.0, 5.0)))(np.full(4, 0.5))
    np.testing.assert_allclose(g, [0.0, 2.0, 0.0, 4.0])
    wg.check_grads(lambda h: wnp.heaviside(x1, h), (np.array([0.3, 0.7, 0.1, 0.9]),), modes=("fwd", "rev"))
    assert wg.grad(lambda x: wnp.sum(wnp.heaviside(x, 0.5)))(x1).tolist() == [0.0] * 4


def test_full_like_carries_the_gradient_of_its_fill_value():
    a = np.ones((2, 3))
    assert wg.grad(lambda v: wnp.sum(wnp.full_like(a, v)))(1.5) == 6.0
    wg.check_grads(lambda v: wnp.full_like(a, v) * np.arange(6.0).reshape(2, 3), (0.3,), modes=("fwd", "rev"))
    np.testing.assert_allclose(wg.grad(lambda x: wnp.sum(wnp.full_like(x, 2.0) * x))(np.ones(3)), [2.0] * 3)


def test_bincount_is_linear_in_its_weights():
    idx = np.array([0, 2, 2, 4])
    w = np.array([0.5, 1.5, -1.0, 2.0])
    np.testing.assert_allclose(wg.grad(lambda w: wnp.sum(wnp.bincount(idx, w) * np.arange(5.0)))(w), [0, 2, 2, 4])
    wg.check_grads(lambda w: wnp.bincount(idx, w, minlength=7), (w,), modes=("fwd", "rev"))


def test_histogram_edges_move_with_the_data_and_traced_weights_are_refused():
    a = np.array([0.3, 1.2, 2.5, 0.9, 4.0])
    hist, edges = np.histogram(a, 4)

    def f(a):
        h, e = wnp.histogram(a, 4)
        np.testing.assert_array_equal(h, hist)
        np.testing.assert_array_equal(e.value, edges)   # NumPy's own edges, bit for bit
        return wnp.sum(e)

    wg.grad(f)(a)
    wg.check_grads(lambda a: wnp.histogram(a, 4)[1], (a,), modes=("fwd", "rev"))
    wg.check_grads(lambda r: wnp.histogram(a, 3, range=(r, 5.0))[1], (0.1,))
    with pytest.raises(wg.NoDerivativeError, match="traced weights"):
        wg.grad(lambda w: wnp.sum(wnp.histogram(a, 4, weights=w)[0]))(np.ones(5))
    with pytest.raises(wg.NoDerivativeError, match="density"):
        wg.grad(lambda a: wnp.sum(wnp.histogram(a, 4, density=True)[0]))(a)
    # fixed edges: the counts alone, no gradient (piecewise constant)
    assert wg.grad(lambda a: wnp.sum(wnp.histogram(a, [0.0, 1.0, 5.0])[0] * 1.0) + 0.0 * wnp.sum(a))(a).tolist() == [0.0] * 5


def test_nextafter_moves_with_its_first_argument():
    x1, x2 = np.array([1.0, -2.0, 0.0, np.inf]), np.array([2.0, -3.0, 1.0, 0.0])

    def f(x):
        out = wnp.nextafter(x, x2)
        np.testing.assert_array_equal(out.value, np.nextafter(x1, x2))   # NumPy's values exactly
        return wnp.sum(out)

    wg.grad(f)(x1)
    wg.check_grads(lambda x: wnp.nextafter(x, x2[:3]), (x1[:3],), modes=("fwd", "rev"))
    g = wg.grad(lambda x: wnp.sum(wnp.nextafter(x, x2)))(x1)
    np.testing.assert_array_equal(g, [1.0, 1.0, 1.0, 0.0])

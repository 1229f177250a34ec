"""wengert.nn: values against reference formulas, gradients against finite differences (first and
second order), finiteness at extreme inputs in float16 and float32, one tape entry per call."""
from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import scipy.special

import wengert as wg
import wengert.nn as wnn
import wengert.numpy as wnp

from transform_checks import grad_inside, inside_vmap_equals_loop, refuse_transposed_jvp

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 5))
T = RNG.random((4, 5))
LABELS = RNG.integers(0, 5, 4)
A3 = RNG.standard_normal((6, 3, 2))
B3 = RNG.standard_normal((6, 4, 2))


def _ref_pairwise(a, b):
    """Seed 000, written with loops: S[i, j, k] = cos(b[:, i, k], a[:, j, k]); softmax over i."""
    W, R, B = a.shape
    N = b.shape[1]
    s = np.zeros((N, R, B))
    for k in range(B):
        for j in range(R):
            for i in range(N):
                u, v = b[:, i, k], a[:, j, k]
                s[i, j, k] = u @ v / (np.linalg.norm(u) * np.linalg.norm(v))
    return scipy.special.softmax(s, axis=0)


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


# name: (wengert function, args, reference on plain arrays)
CASES = {
    "softmax": (lambda x: wnn.softmax(x, axis=1), (X,), lambda x: scipy.special.softmax(x, axis=1)),
    "softmax axis tuple": (lambda x: wnn.softmax(x, axis=(0, 1)), (X,), lambda x: scipy.special.softmax(x, axis=None)),
    "log_softmax": (lambda x: wnn.log_softmax(x, axis=0), (X,), lambda x: scipy.special.log_softmax(x, axis=0)),
    "logsumexp": (lambda x: wnn.logsumexp(x, axis=1), (X,), lambda x: scipy.special.logsumexp(x, axis=1)),
    "logsumexp keepdims": (lambda x: wnn.logsumexp(x, axis=1, keepdims=True), (X,),
                           lambda x: scipy.special.logsumexp(x, axis=1, keepdims=True)),
    "logsumexp all": (lambda x: wnn.logsumexp(x), (X,), lambda x: scipy.special.logsumexp(x)),
    "logsumexp b": (lambda x, b: wnn.logsumexp(x, axis=1, b=b), (X, T),
                    lambda x, b: scipy.special.logsumexp(x, axis=1, b=b)),
    "logsumexp b broadcast": (lambda x, b: wnn.logsumexp(x, axis=0, b=b[0]), (X, T),
                              lambda x, b: scipy.special.logsumexp(x, axis=0, b=b[0])),
    "cross-entropy labels": (lambda x: wnn.softmax_cross_entropy(x, LABELS), (X,),
                             lambda x: -np.mean(scipy.special.log_softmax(x, axis=1)[np.arange(4), LABELS])),
    "cross-entropy labels none": (lambda x: wnn.softmax_cross_entropy(x, LABELS, reduction="none"), (X,),
                                  lambda x: -scipy.special.log_softmax(x, axis=1)[np.arange(4), LABELS]),
    "cross-entropy labels axis 0 sum": (
        lambda x: wnn.softmax_cross_entropy(x.T, LABELS, axis=0, reduction="sum"), (X,),
        lambda x: -np.sum(scipy.special.log_softmax(x, axis=1)[np.arange(4), LABELS])),
    "cross-entropy probabilities": (lambda x, t: wnn.softmax_cross_entropy(x, t), (X, T),
                                    lambda x, t: -np.mean(np.sum(t * scipy.special.log_softmax(x, axis=1), 1))),
    "cross-entropy probabilities none": (
        lambda x, t: wnn.softmax_cross_entropy(x, t, reduction="none"), (X, T),
        lambda x, t: -np.sum(t * scipy.special.log_softmax(x, axis=1), axis=1)),
    "sigmoid": (wnn.sigmoid, (X,), scipy.special.expit),
    "log_sigmoid": (wnn.log_sigmoid, (X,), lambda x: np.log(scipy.special.expit(x))),
    "softplus": (wnn.softplus, (X,), lambda x: np.log1p(np.exp(x))),
    "relu": (wnn.relu, (X,), lambda x: np.maximum(x, 0)),
    "gelu": (wnn.gelu, (X,), lambda x: x * scipy.special.ndtr(x)),
    "gelu tanh": (lambda x: wnn.gelu(x, approximate=True), (X,), _gelu_tanh),
    "silu": (wnn.silu, (X,), lambda x: x * scipy.special.expit(x)),
    "bce with logits": (wnn.binary_cross_entropy_with_logits, (X, T),
                        lambda x, t: np.mean(-(t * np.log(scipy.special.expit(x))
                                               + (1 - t) * np.log(1 - scipy.special.expit(x))))),
    "bce with logits none": (lambda x, t: wnn.binary_cross_entropy_with_logits(x, t, reduction="none"), (X, T),
                             lambda x, t: -(t * np.log(scipy.special.expit(x))
                                            + (1 - t) * np.log(1 - scipy.special.expit(x)))),
    "mse": (wnn.mse, (X, T), lambda p, t: np.mean((p - t) ** 2)),
    "mse broadcast sum": (lambda p, t: wnn.mse(p, t[0], reduction="sum"), (X, T),
                          lambda p, t: np.sum((p - t[0]) ** 2)),
    "normalize": (lambda x: wnn.normalize(x, axis=1), (X,), lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)),
    "cosine_similarity": (lambda a, b: wnn.cosine_similarity(a, b, axis=1), (X, T),
                          lambda a, b: np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))),
    "cosine_similarity broadcast": (
        lambda a, b: wnn.cosine_similarity(a, b[0]), (X, T),
        lambda a, b: a @ b[0] / (np.linalg.norm(a, axis=1) * np.linalg.norm(b[0]))),
    "pairwise_cosine_softmax": (wnn.pairwise_cosine_softmax, (A3, B3), _ref_pairwise),
}


@pytest.mark.parametrize("name", list(CASES))
def test_value_matches_the_reference_formula(name):
    f, args, ref = CASES[name]
    out = f(*args)
    assert type(out) is not wg.Tracer
    np.testing.assert_allclose(out, ref(*args), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_matches_finite_differences_to_second_order(name):
    f, args, _ = CASES[name]
    wg.check_grads(f, args, order=2)


@pytest.mark.parametrize("name", list(CASES))
def test_each_call_is_one_tape_entry(name):
    f, args, _ = CASES[name]
    seen = []

    def traced(*a):
        out = f(*a)
        seen.extend(e[0].name for e in out._trace.tape if e[0] is not None)
        return wnp.sum(out * 1.5)

    wg.grad(traced, argnums=tuple(range(len(args))))(*args)
    # broadcasting a target or reshaping for broadcast adds a shape entry before the fused op
    fused = [n for n in seen if n.startswith("nn.")]
    assert len(fused) == 1, seen
    assert all(n.startswith("nn.") or n in ("broadcast_to", "reshape", "getitem", "transpose") for n in seen), seen


# --- extreme inputs --------------------------------------------------------------------------------
EXTREME = {
    "large": np.array([[1e4, -1e4, 0.0, 5.0], [-1e4, -1e4, 1e4, 1e4]]),
    "all equal": np.array([[3.0, 3.0, 3.0, 3.0], [-1e4, -1e4, -1e4, -1e4]]),
}
EXTREME_LABELS = np.array([1, 0])
EXTREME_TARGETS = np.array([[0.0, 1.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])

def _w(x, n=4):
    return (np.arange(n) / n).astype(x.dtype)   # weights that keep float16 sums in range


SCALAR_FNS = {
    "softmax": lambda x: wnp.sum(wnn.softmax(x) * _w(x)),
    "log_softmax": lambda x: wnp.sum(wnn.log_softmax(x) * _w(x)),
    "logsumexp": lambda x: wnp.sum(wnn.logsumexp(x, axis=1)),
    "logsumexp b": lambda x: wnp.sum(wnn.logsumexp(x, axis=1, b=np.array([0.5, 1.0, 2.0, 0.0], x.dtype))),
    "cross-entropy labels": lambda x: wnn.softmax_cross_entropy(x, EXTREME_LABELS),
    "cross-entropy probabilities": lambda x: wnn.softmax_cross_entropy(x, EXTREME_TARGETS.astype(x.dtype)),
    "sigmoid": lambda x: wnp.sum(wnn.sigmoid(x)),
    "log_sigmoid": lambda x: wnp.sum(wnn.log_sigmoid(x)),
    "softplus": lambda x: wnp.sum(wnn.softplus(x)),
    "relu": lambda x: wnp.sum(wnn.relu(x)),
    "gelu": lambda x: wnp.sum(wnn.gelu(x)),
    "gelu tanh": lambda x: wnp.sum(wnn.gelu(x, approximate=True)),
    "silu": lambda x: wnp.sum(wnn.silu(x)),
    "bce with logits": lambda x: wnn.binary_cross_entropy_with_logits(x, EXTREME_TARGETS.astype(x.dtype)),
    "normalize": lambda x: wnp.sum(wnn.normalize(x) * _w(x)),
    "cosine_similarity": lambda x: wnp.sum(wnn.cosine_similarity(x, x[::-1] + 1)),
    "pairwise_cosine_softmax": lambda x: wnp.sum(wnn.pairwise_cosine_softmax(x.reshape(4, 2, 1), x.reshape(4, 2, 1))
                                               * _w(x, 2)[:, None, None]),
    "mse": lambda x: wnn.mse(x / 1e3, x[::-1] / 1e3),   # float16 cannot hold (2e4)**2: scaled to fit
}


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("which", list(EXTREME))
@pytest.mark.parametrize("name", list(SCALAR_FNS))
def test_value_and_gradient_are_finite_at_extreme_inputs(name, which, dtype):
    x = EXTREME[which].astype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no overflow, no invalid value, anywhere inside
        value, g = wg.value_and_grad(SCALAR_FNS[name])(x)
    assert np.isfinite(value), value
    assert np.all(np.isfinite(g)), g
    assert g.dtype == dtype and np.asarray(value).dtype == dtype


def test_softmax_at_extreme_logits_is_exact():
    x = np.array([1e4, -1e4, 1e4], np.float32)
    np.testing.assert_array_equal(wnn.softmax(x), [0.5, 0, 0.5])
    np.testing.assert_allclose(wnn.log_softmax(x), [-np.log(2), -2e4 - np.log(2), -np.log(2)], rtol=1e-6)
    np.testing.assert_allclose(wnn.logsumexp(x), 1e4 + np.log(2), rtol=1e-7)
    assert wnn.log_sigmoid(np.float32(-1e4)) == np.float32(-1e4)
    assert wnn.softplus(np.float32(1e4)) == np.float32(1e4)


def test_cross_entropy_gradient_is_softmax_minus_onehot():
    g = wg.grad(lambda x: wnn.softmax_cross_entropy(x, LABELS, reduction="sum"))(X)
    np.testing.assert_allclose(g, scipy.special.softmax(X, axis=1) - np.eye(5)[LABELS], atol=1e-14)
    g = wg.grad(lambda x: wnn.softmax_cross_entropy(x, T, reduction="sum"))(X)
    np.testing.assert_allclose(g, scipy.special.softmax(X, axis=1) * T.sum(1, keepdims=True) - T, atol=1e-14)


def test_integer_labels_and_one_hot_targets_agree():
    onehot = wnn.one_hot(LABELS, 5)
    for reduction in ("mean", "sum", "none"):
        a = wg.value_and_grad(lambda x: wnp.sum(wnn.softmax_cross_entropy(x, LABELS, reduction=reduction)))(X)
        b = wg.value_and_grad(lambda x: wnp.sum(wnn.softmax_cross_entropy(x, onehot, reduction=reduction)))(X)
        np.testing.assert_allclose(a[0], b[0])
        np.testing.assert_allclose(a[1], b[1], atol=1e-15)


def test_cross_entropy_rejects_bad_arguments():
    with pytest.raises(ValueError, match="expected shape \\(4,\\)"):
        wnn.softmax_cross_entropy(X, LABELS[:3])
    with pytest.raises(ValueError, match="reduction"):
        wnn.softmax_cross_entropy(X, LABELS, reduction="average")


def test_one_hot():
    out = wnn.one_hot(np.array([0, 2, 5, -1]), 3)
    np.testing.assert_array_equal(out, [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]])
    assert out.dtype == np.float64
    assert wnn.one_hot(np.array([[1]]), 2, dtype=np.float32, axis=0).shape == (2, 1, 1)


def test_normalize_and_cosine_clamp_zero_vectors():
    x = np.zeros((2, 3))
    np.testing.assert_array_equal(wnn.normalize(x), x)
    g = wg.grad(lambda x: wnp.sum(wnn.normalize(x) * np.arange(3.0)))(x)
    np.testing.assert_allclose(g, np.tile(np.arange(3.0) / 1e-12, (2, 1)))
    assert wnn.cosine_similarity(x[0], np.ones(3)) == 0
    assert np.all(np.isfinite(wg.grad(lambda x: wnn.cosine_similarity(x, np.ones(3)))(x[0])))


def test_gradients_keep_float32():
    x = X.astype(np.float32)
    for name, f in SCALAR_FNS.items():
        if name == "pairwise_cosine_softmax":
            continue
        g = wg.grad(f)(np.resize(x, (2, 4)))
        assert g.dtype == np.float32, name


def test_functions_on_plain_arrays_are_plain_numpy():
    assert type(wnn.softmax(X)) is np.ndarray
    assert type(wnn.softmax([1.0, 2.0])) is np.ndarray
    np.testing.assert_allclose(wnn.softmax([1.0, 2.0]), scipy.special.softmax([1.0, 2.0]))


# --- forward mode ------------------------------------------------------------------------------------
@pytest.fixture
def own_jvp_rules(monkeypatch):
    """Forward mode must run the nn operations' own JVP rules: the transposed-VJP fallback fails the test."""
    refuse_transposed_jvp(monkeypatch, lambda name: name.startswith("nn."))


def test_every_nn_primitive_has_a_jvp_rule():
    from wengert.core.trace import Primitive
    from wengert.primitives import nn as prims
    ops = [v for v in vars(prims).values() if isinstance(v, Primitive)]
    assert len(ops) >= 19
    missing = [p.name for p in ops if p.jvp is None and p.fused_jvp is None and not p.linear]
    assert not missing


@pytest.mark.parametrize("name", list(CASES))
def test_forward_mode_matches_finite_differences_to_second_order(name, own_jvp_rules):
    """jvp against central differences, and jvp of the gradient (forward over reverse)."""
    f, args, _ = CASES[name]
    wg.check_grads(f, args, order=2, modes=("fwd", "rev"))
    if len(args) == 2:  # each argument's rule alone, the other a constant
        wg.check_grads(lambda x: f(x, args[1]), (args[0],), modes=("fwd",))
        wg.check_grads(lambda y: f(args[0], y), (args[1],), modes=("fwd",))


@pytest.mark.parametrize("name", list(CASES))
def test_jacfwd_equals_jacobian(name, own_jvp_rules):
    """jacfwd runs one JVP with a batch of tangents under vmap: the rules on batched tangents."""
    f, args, _ = CASES[name]
    fwd = wg.jacfwd(f, argnums=tuple(range(len(args))))(*args)
    rev = wg.jacobian(f, argnums=tuple(range(len(args))))(*args)
    for a, b in zip(fwd, rev):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "logsumexp b", "cross-entropy labels",
                                  "cross-entropy probabilities", "normalize", "cosine_similarity",
                                  "pairwise_cosine_softmax", "gelu tanh", "mse"])
def test_hessian_by_forward_over_reverse(name, own_jvp_rules):
    f, args, _ = CASES[name]
    w = np.linspace(0.5, 1.5, np.size(f(*args))).reshape(np.shape(f(*args)))

    def scalar(x):
        return wnp.sum(f(x, *args[1:]) * w)

    np.testing.assert_allclose(wg.hessian(scalar)(args[0]), wg.jacobian(wg.grad(scalar))(args[0]),
                               rtol=1e-10, atol=1e-12)


def test_cross_entropy_jvp_is_the_softmax_minus_onehot_pairing(own_jvp_rules):
    t = RNG.standard_normal(X.shape)
    p = scipy.special.softmax(X, axis=1)
    out, dt = wg.jvp(lambda x: wnn.softmax_cross_entropy(x, LABELS, reduction="none"), (X,), (t,))
    np.testing.assert_allclose(dt, np.sum(p * t, 1) - t[np.arange(4), LABELS], atol=1e-14)
    out, dt = wg.jvp(lambda x: wnn.softmax(x, axis=1), (X,), (t,))
    np.testing.assert_allclose(dt, p * (t - np.sum(p * t, 1, keepdims=True)), atol=1e-14)
    out, dt = wg.jvp(lambda x: wnn.log_softmax(x, axis=1), (X,), (t,))
    np.testing.assert_allclose(dt, t - np.sum(p * t, 1, keepdims=True), atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("which", list(EXTREME))
def test_forward_mode_is_finite_at_extreme_inputs(which, dtype, own_jvp_rules):
    x = EXTREME[which].astype(dtype)
    t = np.linspace(-1, 1, x.size).reshape(x.shape).astype(dtype)
    for name, f in SCALAR_FNS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            value, tangent = wg.jvp(f, (x,), (t,))
            g = wg.grad(f)(x)
        assert np.isfinite(tangent) and np.asarray(tangent).dtype == dtype, (name, tangent)
        expected = np.sum(g.astype(np.float64) * t)
        assert abs(float(tangent) - expected) <= 1e-2 * (1 + abs(expected)), (name, tangent, expected)


# --- vmap: every nn primitive has a batching rule (no per-example loop) -------------------------------
VB = 3   # batch size
XB = RNG.standard_normal((VB, 2, 4))
TB = RNG.random((VB, 2, 4))
LB = RNG.integers(0, 4, (VB, 2))
AB = RNG.standard_normal((VB, 5, 3, 2))
BB = RNG.standard_normal((VB, 5, 2, 2))

# name: (function of one example, batched arguments, in_axes); in_axes None: the argument's first row
# is passed unbatched
VMAP_CASES = {
    "softmax axis None": (lambda x: wnn.softmax(x, axis=None), (XB,), (0,)),
    "log_softmax axis None": (lambda x: wnn.log_softmax(x, axis=None), (XB,), (0,)),
    "log_softmax axis 0": (lambda x: wnn.log_softmax(x, axis=0), (XB,), (0,)),
    "logsumexp all": (lambda x: wnn.logsumexp(x), (XB,), (0,)),
    "logsumexp axis 0 keepdims": (lambda x: wnn.logsumexp(x, axis=0, keepdims=True), (XB,), (0,)),
    "logsumexp b unbatched": (lambda x, b: wnn.logsumexp(x, axis=1, b=b), (XB, TB), (0, None)),
    "logsumexp b batched, x unbatched": (lambda x, b: wnn.logsumexp(x, axis=-1, b=b), (XB, TB), (None, 0)),
    "logsumexp b lower rank": (lambda x, b: wnn.logsumexp(x, b=b[0]), (XB, TB), (0, 0)),
    "normalize": (lambda x: wnn.normalize(x, axis=0), (XB,), (0,)),
    "normalize axis None": (lambda x: wnn.normalize(x, axis=None), (XB,), (0,)),
    "cosine_similarity": (lambda a, b: wnn.cosine_similarity(a, b), (XB, TB), (0, 0)),
    "cosine_similarity unbatched lower rank": (lambda a, b: wnn.cosine_similarity(a, b[0], axis=-1),
                                               (XB, TB), (0, None)),
    "cosine_similarity axis None": (lambda a, b: wnn.cosine_similarity(a, b, axis=None), (XB, TB), (None, 0)),
    "pairwise_cosine_softmax": (wnn.pairwise_cosine_softmax, (AB, BB), (0, 0)),
    "pairwise_cosine_softmax a unbatched": (wnn.pairwise_cosine_softmax, (AB, BB), (None, 0)),
    "mse mean": (wnn.mse, (XB, TB), (0, 0)),
    "mse sum broadcast": (lambda p, t: wnn.mse(p, t[0], reduction="sum"), (XB, TB), (0, None)),
    "mse none": (lambda p, t: wnn.mse(p, t, reduction="none"), (XB, TB), (None, 0)),
    "bce mean": (wnn.binary_cross_entropy_with_logits, (XB, TB), (0, 0)),
    "bce sum, targets unbatched": (lambda x, t: wnn.binary_cross_entropy_with_logits(x, t, reduction="sum"),
                                   (XB, TB), (0, None)),
    "bce none, logits unbatched": (lambda x, t: wnn.binary_cross_entropy_with_logits(x, t, reduction="none"),
                                   (XB, TB), (None, 0)),
    "cross-entropy labels batched": (wnn.softmax_cross_entropy, (XB, LB), (0, 0)),
    "cross-entropy labels unbatched, sum": (lambda x, l: wnn.softmax_cross_entropy(x, l, reduction="sum"),
                                            (XB, LB), (0, None)),
    "cross-entropy logits unbatched, none": (lambda x, l: wnn.softmax_cross_entropy(x, l, reduction="none"),
                                             (XB, LB), (None, 0)),
    "cross-entropy labels axis 0": (lambda x, l: wnn.softmax_cross_entropy(x.T, l, axis=0), (XB, LB), (0, 0)),
    "cross-entropy one example row": (lambda x, l: wnn.softmax_cross_entropy(x[0], l[0]), (XB, LB), (0, 0)),
    "cross-entropy probabilities": (wnn.softmax_cross_entropy, (XB, TB), (0, 0)),
    "cross-entropy probabilities unbatched, sum": (
        lambda x, t: wnn.softmax_cross_entropy(x, t, reduction="sum"), (XB, TB), (0, None)),
    "cross-entropy probabilities none": (lambda x, t: wnn.softmax_cross_entropy(x, t, reduction="none"),
                                         (XB, TB), (None, 0)),
}


def _example(args, in_axes, i):
    return [a[0] if ax is None else a[i] for a, ax in zip(args, in_axes)]


def _vmap_args(args, in_axes):
    return [a[0] if ax is None else a for a, ax in zip(args, in_axes)]


def _no_warnings(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    assert not caught, [str(w.message) for w in caught]
    return out


@pytest.mark.parametrize("name", list(VMAP_CASES))
def test_vmap_equals_a_loop_without_warning(name):
    f, args, in_axes = VMAP_CASES[name]
    out = _no_warnings(wg.vmap(f, in_axes=in_axes), *_vmap_args(args, in_axes))
    ref = np.stack([f(*_example(args, in_axes, i)) for i in range(VB)])
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)


def _float_positions(args):
    return tuple(i for i, a in enumerate(args) if np.issubdtype(a.dtype, np.floating))


@pytest.mark.parametrize("name", list(VMAP_CASES))
def test_vmap_gradients_match_finite_differences(name):
    """grad and jvp of a weighted sum of the vmapped result (the batched call on the tape)."""
    f, args, in_axes = VMAP_CASES[name]
    vargs = _vmap_args(args, in_axes)
    out = wg.vmap(f, in_axes=in_axes)(*vargs)
    w = np.linspace(0.5, 1.5, out.size).reshape(out.shape)
    scalar = lambda *a: wnp.sum(wg.vmap(f, in_axes=in_axes)(*a) * w)   # noqa: E731
    _no_warnings(wg.check_grads, scalar, vargs, 1, ("fwd", "rev"))


@pytest.mark.parametrize("name", list(VMAP_CASES))
def test_vmap_jacfwd_equals_jacobian(name, own_jvp_rules):
    f, args, in_axes = VMAP_CASES[name]
    vargs = _vmap_args(args, in_axes)
    nums = _float_positions(vargs)
    g = wg.vmap(f, in_axes=in_axes)
    fwd = _no_warnings(wg.jacfwd(g, argnums=nums), *vargs)
    rev = _no_warnings(wg.jacobian(g, argnums=nums), *vargs)
    for a, b in zip(fwd, rev):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


PER_EXAMPLE_LOSSES = {
    "mse": (lambda w, x, y: wnn.mse(x @ w, y), TB),
    "bce": (lambda w, x, y: wnn.binary_cross_entropy_with_logits(x @ w, y, reduction="sum"), TB),
    "cross-entropy labels": (lambda w, x, y: wnn.softmax_cross_entropy(x @ w, y), LB),
    "cross-entropy probabilities": (lambda w, x, y: wnn.softmax_cross_entropy(x @ w, y), TB),
    "logsumexp": (lambda w, x, y: wnn.logsumexp(x @ w, b=y), TB),
    "cosine": (lambda w, x, y: wnp.sum(wnn.cosine_similarity(x @ w, y)), TB),
    "normalize": (lambda w, x, y: wnp.sum(wnn.normalize(x @ w, axis=None) * y), TB),
}


@pytest.mark.parametrize("name", list(PER_EXAMPLE_LOSSES))
def test_per_example_gradients_equal_a_loop(name):
    loss, ys = PER_EXAMPLE_LOSSES[name]
    weights = RNG.standard_normal((3, 4))
    xs = RNG.standard_normal((VB, 2, 3))
    out = _no_warnings(wg.vmap(wg.grad(loss), in_axes=(None, 0, 0)), weights, xs, ys)
    ref = np.stack([wg.grad(loss)(weights, xs[i], ys[i]) for i in range(VB)])
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)


NESTED_CASES = {
    "logsumexp": (lambda x: wnn.logsumexp(x, axis=0), (RNG.standard_normal((2, 3, 4, 2)),)),
    "normalize": (lambda x: wnn.normalize(x), (RNG.standard_normal((2, 3, 4)),)),
    "cosine_similarity": (wnn.cosine_similarity, (RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 3, 4)))),
    "mse": (wnn.mse, (RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 3, 4)))),
    "cross-entropy labels": (wnn.softmax_cross_entropy,
                             (RNG.standard_normal((2, 3, 2, 4)), RNG.integers(0, 4, (2, 3, 2)))),
    "pairwise_cosine_softmax": (wnn.pairwise_cosine_softmax,
                                (RNG.standard_normal((2, 2, 4, 3, 1)), RNG.standard_normal((2, 2, 4, 2, 1)))),
}


@pytest.mark.parametrize("name", list(NESTED_CASES))
def test_nested_vmap_equals_a_double_loop(name):
    f, args = NESTED_CASES[name]
    out = _no_warnings(wg.vmap(wg.vmap(f)), *args)
    ref = np.stack([np.stack([f(*[a[i, j] for a in args]) for j in range(args[0].shape[1])])
                    for i in range(args[0].shape[0])])
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)
    g = wg.grad(lambda *a: wnp.sum(wg.vmap(wg.vmap(f))(*a) ** 2))(*args)
    g_ref = wg.grad(lambda *a: sum(wnp.sum(f(*[x[i, j] for x in a]) ** 2)
                                   for i in range(args[0].shape[0]) for j in range(args[0].shape[1])))(*args)
    np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-14)


def test_vmap_of_the_rewrites_log_softmax_recomputes_it_batched():
    """log_softmax with a known value (what the log(softmax) rewrite records) holds one example's
    value: under vmap it is computed afresh for the batch, with the axis (None: all) shifted."""
    from wengert.primitives import nn as prims
    for axis in (None, (1,)):
        out = _no_warnings(wg.vmap(lambda x: prims.log_softmax_known(x, axis=axis, known=None)), XB)
        ref = np.stack([scipy.special.log_softmax(x, axis=axis) for x in XB])
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_vmapped_losses_keep_the_dtype(dtype):
    for f, args in ((wnn.mse, (XB, TB)), (wnn.binary_cross_entropy_with_logits, (XB, TB)),
                    (wnn.softmax_cross_entropy, (XB, LB)), (wnn.softmax_cross_entropy, (XB, TB))):
        args = [a.astype(dtype) if a.dtype.kind == "f" else a for a in args]
        out = _no_warnings(wg.vmap(f), *args)
        g = wg.grad(lambda x: wnp.sum(wg.vmap(f)(x, args[1])))(args[0])
        assert out.dtype == dtype and g.dtype == dtype
        ref = np.stack([f(*[a[i] for a in args]) for i in range(VB)])
        np.testing.assert_allclose(out, ref, rtol=2e-3 if dtype == np.float16 else 1e-6)


# --- a grad inside vmap: the tape records batched values (prim.batched_vjp) -------------------------
_inside_vmap_equals_loop = functools.partial(inside_vmap_equals_loop, rtol=1e-9, atol=1e-10)


_R = np.random.default_rng(31)
_X, _Y, _W = _R.standard_normal((3, 2, 4)), _R.standard_normal((3, 2, 4)), _R.standard_normal((2, 4))
_T = _R.random((3, 2, 4))
_LABELS, _LABELS1 = _R.integers(0, 4, (3, 2)), _R.integers(0, 4, 2)


def _sum_sin(f):
    return lambda *a: wnp.sum(wnp.sin(f(*a)))


_GRAD_INSIDE_CASES = {
    **{name: (_sum_sin(lambda a, b, f=getattr(wnn, name): f(a * b)), (_X, _W), (0, None), (0, 1))
       for name in ("sigmoid", "log_sigmoid", "softplus", "relu", "silu", "gelu")},
    "gelu tanh": (_sum_sin(lambda a: wnn.gelu(a, approximate=True)), (_X,), (0,), 0),
    "softmax": (_sum_sin(lambda a, b: wnn.softmax(a * b, axis=0)), (_X, _W), (0, None), (0, 1)),
    "softmax all axes": (_sum_sin(lambda a: wnn.softmax(a, axis=(0, 1))), (_X,), (0,), 0),
    "log_softmax": (_sum_sin(lambda a, b: wnn.log_softmax(a * b)), (_X, _W), (0, None), (0, 1)),
    "logsumexp": (_sum_sin(lambda a: wnn.logsumexp(a, axis=1)), (_X,), (0,), 0),
    "logsumexp keepdims": (_sum_sin(lambda a: wnn.logsumexp(a, axis=0, keepdims=True)), (_X,), (0,), 0),
    "logsumexp b": (_sum_sin(lambda a, b: wnn.logsumexp(a, axis=-1, b=b)), (_W, _T), (None, 0), (0, 1)),
    **{f"sparse cross-entropy {r}": (_sum_sin(lambda a, l, r=r: wnn.softmax_cross_entropy(a, l, reduction=r)),
                                     (_X, _LABELS), (0, 0), 0) for r in ("mean", "sum", "none")},
    "sparse cross-entropy unbatched labels": (lambda a, l: wnn.softmax_cross_entropy(a, l), (_X, _LABELS1),
                                              (0, None), 0),
    "sparse cross-entropy axis 0": (lambda a, l: wnn.softmax_cross_entropy(a, l, axis=0, reduction="sum"),
                                    (_X, _LABELS[:, :1].repeat(4, 1) % 2), (0, 0), 0),
    **{f"dense cross-entropy {r}": (_sum_sin(lambda a, t, r=r: wnn.softmax_cross_entropy(a, t, reduction=r)),
                                    (_X, _T), (0, 0), (0, 1)) for r in ("mean", "none")},
    "dense cross-entropy unbatched logits": (lambda a, t: wnn.softmax_cross_entropy(a, t), (_W, _T), (None, 0), (0, 1)),
    "bce": (lambda a, t: wnn.binary_cross_entropy_with_logits(a, t), (_X, _T[0]), (0, None), (0, 1)),
    "bce none": (_sum_sin(lambda a, t: wnn.binary_cross_entropy_with_logits(a, t, reduction="none")),
                 (_X, _T), (0, 0), (0, 1)),
    "mse broadcast": (lambda p, t: wnn.mse(p, t), (_X, _T[0, 0]), (0, None), (0, 1)),
    "normalize": (_sum_sin(lambda a, b: wnn.normalize(a * b, axis=0)), (_X, _W), (0, None), (0, 1)),
    "normalize a zero row": (_sum_sin(wnn.normalize), (np.concatenate([_X[:, :1], 0 * _X[:, 1:]], 1),), (0,), 0),
    "cosine": (_sum_sin(wnn.cosine_similarity), (_X, _Y), (0, 0), (0, 1)),
    "cosine unbatched, broadcast": (_sum_sin(wnn.cosine_similarity), (_X, _W[0]), (0, None), (0, 1)),
    "pairwise cosine softmax": (_sum_sin(wnn.pairwise_cosine_softmax), (_R.standard_normal((2, 3, 2, 2)),
                                _R.standard_normal((3, 4, 2))), (0, None), (0, 1)),
}


@pytest.mark.parametrize("name", list(_GRAD_INSIDE_CASES))
def test_grad_inside_vmap_is_batched_and_equals_a_loop(name):
    loss, args, in_axes, argnums = _GRAD_INSIDE_CASES[name]
    _inside_vmap_equals_loop(grad_inside(loss, argnums), args, in_axes)


@pytest.mark.parametrize("f", [wnn.softmax, wnn.log_softmax, wnn.normalize, lambda a: wnn.gelu(a) * wnn.silu(a)])
def test_jacobian_inside_vmap_is_batched(f):
    _inside_vmap_equals_loop(wg.jacobian(f), (_X[:, 0],), (0,))


@pytest.mark.parametrize("loss", [
    lambda a: wnp.sum(wnp.sin(wnn.softmax(a))), lambda a: wnn.logsumexp(a),
    lambda a: wnp.sum(wnn.sigmoid(a) * wnn.softplus(a) * wnn.log_sigmoid(a)),
    lambda a: wnp.sum(wnn.gelu(a, approximate=True) ** 2),
    lambda a: wnn.softmax_cross_entropy(a, np.array(2)),
    lambda a: wnp.sum(wnn.cosine_similarity(a, a[::-1] + 1.0, axis=0)),
])
def test_hessian_inside_vmap_is_batched(loss):
    _inside_vmap_equals_loop(wg.hessian(loss), (_X[:, 0],), (0,))


def test_sparse_cross_entropy_rules_take_batched_labels():
    """The one-hot of batched labels is per example (it was built from the whole batch as one)."""
    loss = lambda a, l: wnn.softmax_cross_entropy(a, l, reduction="sum")
    _inside_vmap_equals_loop(wg.hessian(loss), (_X[:, 0], _LABELS[:, 0]), (0, 0))
    _inside_vmap_equals_loop(lambda a, l: wg.jvp(lambda z: loss(z, l), (a,), (wnp.ones_like(a),))[1],
                             (_X, _LABELS), (0, 0))


def test_softmax_and_log_softmax_of_plain_arrays_equal_the_primitives_results():
    """On plain float arrays they run NumPy's few operations directly (the cost of NumPy code), and
    give what the primitives give, rows with infinite maxima included."""
    from wengert.primitives import nn as P
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    ragged = x.astype(np.float64)
    ragged[1] = -np.inf
    ragged[2, 0] = np.inf
    for a in (x, x.astype(np.float64), ragged):
        for axis in (0, 1, -1):
            with np.errstate(invalid="ignore"):
                np.testing.assert_array_equal(wnn.softmax(a, axis), P.softmax(a, axis=(axis % 2,)))
                np.testing.assert_array_equal(wnn.log_softmax(a, axis), P.log_softmax(a, axis=(axis % 2,)))
            assert wnn.softmax(a, axis).dtype == a.dtype

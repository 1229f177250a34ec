"""Forward mode: jvp, linearize, jacfwd, hvp and check_grads(modes=('fwd',)).

Every row of the systematic gradient table (tests/test_numpy_grads.py) is checked in forward mode
against finite differences along random directions.
"""
from __future__ import annotations

import collections
import warnings

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp

from test_numpy_grads import CASE_IDS, CASES, SECOND_ORDER, Arg, draw, rng_for
from transform_checks import refuse_transposed_jvp


TAPE_ONLY = {"setitem", "buffer_snapshot"}  # recorded only by in-place writes and Buffer on a tape;
# a forward level writes functionally (scatter_set) instead


def test_every_primitive_has_a_jvp_rule_next_to_its_vjp_rule():
    import wengert.nn  # noqa: F401
    import wengert.numpy.fft  # noqa: F401
    import wengert.scipy.linalg  # noqa: F401
    import wengert.scipy.signal  # noqa: F401
    import wengert.scipy.special  # noqa: F401
    import wengert.scipy.stats  # noqa: F401
    from wengert.primitives._table import PRIMITIVES
    missing = sorted(name for name, p in PRIMITIVES.items()
                     if name not in TAPE_ONLY and p.jvp is None and p.fused_jvp is None and not p.linear)
    assert not missing, f"primitives without a JVP rule: {missing}"
    assert len(PRIMITIVES) > 150


@pytest.fixture
def rules_only(monkeypatch):
    """Forward mode must run on the table's JVP rules: the transposed-VJP fallback fails the test."""
    refuse_transposed_jvp(monkeypatch)


@pytest.mark.parametrize("name", CASE_IDS)
def test_jvp_every_table_row_matches_finite_differences(name, rules_only):
    fn, specs = CASES[name]
    wg.check_grads(fn, draw(name, specs), modes=("fwd",))


@pytest.mark.parametrize("name", SECOND_ORDER[:12])
def test_forward_over_reverse_second_order(name):
    fn, specs = CASES[name]
    wg.check_grads(fn, draw(name, specs), order=2, modes=("fwd",))


def test_jvp_matches_jacobian_times_tangent():
    rng = np.random.default_rng(0)
    x, y, tx, ty = (rng.standard_normal(4) for _ in range(4))
    f = lambda x, y: wnp.tanh(x) * y + wnp.sum(x ** 2) * wnp.cos(y)
    out, t = wg.jvp(f, (x, y), (tx, ty))
    np.testing.assert_allclose(out, f(x, y))
    jx, jy = wg.jacobian(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(t, jx @ tx + jy @ ty, rtol=1e-12, atol=1e-12)


def test_jvp_pytrees_in_and_out():
    Point = collections.namedtuple("Point", "a b")
    p = {"w": np.array([1.0, 2.0]), "s": Point(np.float64(0.5), np.array([[1.0, -1.0]]))}
    t = {"w": np.array([1.0, 0.0]), "s": Point(np.float64(2.0), np.array([[0.0, 3.0]]))}

    def f(p):
        return {"u": p["w"] * p["s"].a, "v": (wnp.sum(p["s"].b ** 2), 7)}

    out, tout = wg.jvp(f, (p,), (t,))
    np.testing.assert_allclose(tout["u"], t["w"] * 0.5 + p["w"] * 2.0)
    np.testing.assert_allclose(tout["v"][0], np.sum(2 * p["s"].b * t["s"].b))
    assert out["v"][1] == 7 and np.all(tout["v"][1] == 0)


def test_jvp_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="shape"):
        wg.jvp(wnp.sin, (np.ones(3),), (np.ones(2),))


def test_linearize_reuses_one_forward_pass():
    calls = []

    def f(x):
        calls.append(1)
        return wnp.exp(x) * x

    x = np.array([0.1, 0.2, 0.3])
    out, f_jvp = wg.linearize(f, x)
    for t in np.eye(3):
        np.testing.assert_allclose(f_jvp(t), (np.exp(x) * (1 + x)) * t)
    assert len(calls) == 1


def test_jacfwd_equals_jacrev():
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((3, 2)), rng.standard_normal(2)
    f = lambda x, y: {"a": wnp.sin(x @ y), "b": wnp.sum(x * x)}
    fwd = wg.jacfwd(f, argnums=(0, 1))(x, y)
    rev = wg.jacrev(f, argnums=(0, 1))(x, y)
    for k in ("a", "b"):
        for i in range(2):
            assert np.shape(fwd[k][i]) == np.shape(rev[k][i])
            np.testing.assert_allclose(fwd[k][i], rev[k][i], rtol=1e-12, atol=1e-12)


def test_hvp_equals_hessian_times_vector():
    rng = np.random.default_rng(2)
    x, v = rng.standard_normal(5), rng.standard_normal(5)
    f = lambda x: wnp.sum(wnp.tanh(x) ** 3) + wnp.sum(x) ** 2
    np.testing.assert_allclose(wg.hvp(f, (x,), (v,)), wg.hessian(f)(x) @ v, rtol=1e-10)
    g = lambda a, b: wnp.sum(a * a * b) + wnp.sum(wnp.sin(b))
    a, b, va, vb = (rng.standard_normal(3) for _ in range(4))
    ha, hb = wg.hvp(g, (a, b), (va, vb))
    np.testing.assert_allclose(ha, 2 * b * va + 2 * a * vb)
    np.testing.assert_allclose(hb, 2 * a * va - np.sin(b) * vb)


def test_jvp_nests_inside_grad():
    d = wg.grad(lambda x: wg.jvp(wnp.sin, (x,), (1.0,))[1])(0.3)
    np.testing.assert_allclose(d, -np.sin(0.3))


def test_jvp_of_constant_function_is_zero():
    out, t = wg.jvp(lambda x: np.ones(2), (np.array([1.0]),), (np.array([1.0]),))
    np.testing.assert_array_equal(t, np.zeros(2))


def test_check_grads_fwd_catches_a_wrong_rule():
    bad = wg.custom_vjp(lambda x: wnp.sin(x))
    bad.defvjp(lambda x: (wnp.sin(x), x), lambda x, g: (g * 2 * wnp.cos(x),))
    with pytest.raises(AssertionError, match="forward mode"):
        wg.check_grads(bad, (np.array([0.3, 0.4]),), modes=("fwd",))


# --- the forward trace: one pass, no tape ----------------------------------------------------------
def test_jvp_runs_the_function_once():
    calls = []

    def f(x):
        calls.append(1)
        return wnp.exp(x) * x

    x, t = np.array([0.1, 0.2]), np.array([1.0, -1.0])
    _, tout = wg.jvp(f, (x,), (t,))
    np.testing.assert_allclose(tout, np.exp(x) * (1 + x) * t)
    assert len(calls) == 1


def test_jvp_keeps_the_primal_dtype():
    x = np.linspace(0.1, 1.0, 4, dtype=np.float32)
    out, t = wg.jvp(lambda x: wnp.sin(x) * 2.0, (x,), (np.ones(4, np.float32),))
    assert out.dtype == np.float32 and t.dtype == np.float32


def test_jvp_refuses_integer_primals_naming_the_argument():
    with pytest.raises(wg.NonDifferentiableInputError, match=r"argument 1 \(n\)"):
        wg.jvp(lambda x, n: x * n, (np.ones(2), np.arange(2)), (np.ones(2), np.ones(2)))


def test_leaked_forward_tracer_is_refused():
    kept = []
    wg.jvp(lambda x: kept.append(x) or wnp.sin(x), (np.ones(2),), (np.ones(2),))
    with pytest.raises(wg.LeakedTracerError):
        wnp.cos(kept[0])


def test_jvp_of_vmap_and_vmap_of_jvp_agree_with_a_loop():
    rng = np.random.default_rng(3)
    xs, ts = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    f = lambda x: wnp.sum(wnp.tanh(x) * x[::-1]) * x
    expected = np.stack([wg.jvp(f, (x,), (t,))[1] for x, t in zip(xs, ts)])
    inner = wg.jvp(wg.vmap(f), (xs,), (ts,))[1]
    outer = wg.vmap(lambda x, t: wg.jvp(f, (x,), (t,))[1])(xs, ts)
    np.testing.assert_allclose(inner, expected, rtol=1e-12)
    np.testing.assert_allclose(outer, expected, rtol=1e-12)


def test_jacfwd_is_one_batched_jvp_without_warnings():
    import warnings
    f = lambda x: wnp.cumsum(wnp.exp(x) * x[0])
    x = np.array([0.3, -0.2, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(wg.jacfwd(f)(x), wg.jacobian(f)(x), rtol=1e-12)


def test_hessian_is_forward_over_reverse_and_matches_reverse_over_reverse():
    import warnings
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(3), rng.standard_normal((2, 2))
    f = lambda a, b: wnp.sum(wnp.sin(a) ** 2) * wnp.sum(b ** 3) + wnp.sum(a[:2] @ b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fwd = wg.hessian(f, argnums=(0, 1))(a, b)
    rev = wg.jacobian(wg.jacobian(f, argnums=(0, 1)), argnums=(0, 1))(a, b)
    for i in range(2):
        for j in range(2):
            assert np.shape(fwd[i][j]) == np.shape(rev[i][j])
            np.testing.assert_allclose(fwd[i][j], rev[i][j], rtol=1e-10, atol=1e-12)


def test_in_place_writes_under_jvp_match_finite_differences():
    def f(x):
        y = x * 1.0
        y[1:] = wnp.sin(x[:-1])
        y[0] *= 3.0
        return y * x

    wg.check_grads(f, (np.array([0.3, -0.7, 1.1, 0.2]),), modes=("fwd", "rev"))


def test_in_place_write_into_a_jvp_input_is_refused():
    def f(x):
        x[0] = 0.0
        return x

    with pytest.raises(wg.InPlaceWriteError, match="input"):
        wg.jvp(f, (np.ones(3),), (np.ones(3),))


def test_view_used_after_a_write_sees_it_under_jvp():
    def f(x):
        y = x * 2.0
        view = y[:2]
        y[0] = 5.0
        return view * 1.0

    value, tangent = wg.jvp(f, (np.ones(3),), (np.ones(3),))
    np.testing.assert_allclose(value, [5.0, 2.0])
    np.testing.assert_allclose(tangent, [0.0, 2.0])


def test_buffer_under_jvp():
    def f(x):
        buf = wg.Buffer.zeros((3, 2))
        for i in range(3):
            buf[i] = x[i] * x[:2]
        buf[1, 0] = 7.0
        return wnp.sum(wnp.sin(buf.freeze()), axis=1)

    wg.check_grads(f, (np.array([0.3, -0.5, 0.8]),), modes=("fwd", "rev"))


def test_custom_vjp_forward_mode_transposes_bwd():
    @wg.custom_vjp
    def f(x, y):
        return wnp.sin(x) * y

    f.defvjp(lambda x, y: (wnp.sin(x) * y, (x, y)),
             lambda res, g: (g * wnp.cos(res[0]) * res[1], g * wnp.sin(res[0])))
    wg.check_grads(f, (np.array([0.2, 0.9]), np.array([1.5, -0.4])), modes=("fwd", "rev"))
    wg.check_grads(lambda x: wg.grad(lambda x: wnp.sum(f(x, x)))(x), (np.array([0.2, 0.9]),),
                   modes=("fwd",))


COMPLEX_Z = np.array([1 + 2j, -0.3 + 0.7j])
COMPLEX_T = np.array([0.2 - 1j, 1.5 + 0.1j])
SCALE = 0.5 - 2j


def test_vjp_only_primitive_on_complex_values_gets_a_transposed_jvp():
    """A primitive declared outside the table, with VJP rules only, holomorphic or not."""
    from wengert.core.trace import Primitive
    square = Primitive("test.square", lambda z: z * z, vjp=(lambda g, ans, z: g * 2 * z,))
    scaled_conj = Primitive("test.scaled_conj", lambda z: SCALE * np.conj(z),
                            vjp=(lambda g, ans, z: wnp.conj(g * SCALE),))
    abs2 = Primitive("test.abs2", lambda z: (z * np.conj(z)).real,
                     vjp=(lambda g, ans, z: 2 * wnp.real(g) * wnp.conj(z),))
    z, t = COMPLEX_Z, COMPLEX_T
    for prim, expected in [(square, 2 * z * t), (scaled_conj, SCALE * np.conj(t)),
                           (abs2, 2 * (z * np.conj(t)).real)]:
        _, tangent = wg.jvp(prim, (z,), (t,))
        np.testing.assert_allclose(tangent, expected, err_msg=prim.name)
        wg.check_grads(prim, (z,), modes=("fwd", "rev"))


def test_custom_vjp_forward_mode_on_complex_values():
    @wg.custom_vjp
    def f(z):
        return SCALE * wnp.conj(z) + z * z

    f.defvjp(lambda z: (f(z), z), lambda z, g: (wnp.conj(g * SCALE) + g * 2 * z,))
    _, tangent = wg.jvp(f, (COMPLEX_Z,), (COMPLEX_T,))
    np.testing.assert_allclose(tangent, SCALE * np.conj(COMPLEX_T) + 2 * COMPLEX_Z * COMPLEX_T)
    wg.check_grads(f, (COMPLEX_Z,), modes=("fwd", "rev"))


def test_linearize_of_a_non_holomorphic_function():
    z, t = COMPLEX_Z, COMPLEX_T
    _, f_jvp = wg.linearize(lambda z: wnp.sin(z) * wnp.conj(z), z)
    np.testing.assert_allclose(f_jvp(t), np.cos(z) * t * np.conj(z) + np.sin(z) * np.conj(t))


def test_custom_vjp_with_a_numpy_bwd_has_no_silent_forward_mode():
    @wg.custom_vjp
    def scaled(x):
        return x * 2.0

    def numpy_bwd(res, g):  # reads the plain values: fine for grad, not transposable
        return (np.asarray(g.value if isinstance(g, wg.Tracer) else g) * 2.0,)

    scaled.defvjp(lambda x: (x * 2.0, None), numpy_bwd)
    np.testing.assert_allclose(wg.grad(lambda x: wnp.sum(scaled(x)))(np.ones(2)), [2.0, 2.0])
    with pytest.raises(wg.CustomGradientError, match="scaled.*wengert.numpy"):
        wg.jvp(scaled, (np.ones(2),), (np.ones(2),))


def test_op_says_it_has_no_forward_mode():
    @wg.op
    def double(x):
        return x * 2, lambda g: 2 * g

    with pytest.raises(wg.CustomGradientError, match="double.*forward mode"):
        wg.jvp(lambda x: double(x), (np.ones(2),), (np.ones(2),))


# --- JVP rules of reductions, shape operations, contractions, writes, fft and convolve -------------
_STRUCTURAL = ("sum", "max", "min", "_prod", "_cumsum", "_cumprod", "reshape", "transpose", "broadcast_to", "astype",
               "concatenate", "stack", "getitem", "index_add", "flip", "roll", "diagonal", "diagonal_embed",
               "pad_constant", "matmul", "tensordot", "dot", "outer", "einsum", "scatter_set", "scatter_multiply",
               "fft.c2c", "fft.rfft", "fft.irfft", "scipy.signal.convolve")


@pytest.fixture
def own_structural_rules(monkeypatch):
    """Forward mode must run these primitives' own JVP rules: the transposed-VJP fallback fails the test."""
    refuse_transposed_jvp(monkeypatch, lambda name: name in _STRUCTURAL)


def test_structural_primitives_have_jvp_rules():
    import wengert.numpy.fft  # noqa: F401
    import wengert.scipy.signal  # noqa: F401
    from wengert.primitives._table import PRIMITIVES
    missing = [n for n in _STRUCTURAL
               if PRIMITIVES[n].jvp is None and PRIMITIVES[n].fused_jvp is None and not PRIMITIVES[n].linear]
    assert missing == []
    for name in ("setitem", "buffer_snapshot"):  # tape-only entries: forward mode never binds them
        with pytest.raises(AssertionError, match="reverse mode only"):
            PRIMITIVES[name].fused_jvp([None], None, (), {})


_I = np.array([[2, 0], [0, 1]])
_ROWS = np.array([2, 0, 2])
STRUCTURAL_CASES = {
    "prod one zero": (lambda x: wnp.prod(x, axis=1), [[0.9, 0.0, 1.2], [1.1, -0.8, 1.3]]),
    "prod two zeros in a lane": (lambda x: wnp.prod(x, axis=(0, 1)), [[0.9, 0.0], [0.0, 1.3]]),
    "prod no zero keepdims": (lambda x: wnp.prod(x, axis=0, keepdims=True), [[0.9, -1.1], [1.2, 1.3]]),
    "cumprod zeros": (lambda x: wnp.cumprod(x, axis=1), [[0.9, 0.0, 1.2, 0.0, 1.1], [0.0, 1.1, -0.8, 1.3, 0.7]]),
    "cumprod no zero": (lambda x: wnp.cumprod(x, axis=0), [[0.9, -1.1], [1.2, 1.3], [0.7, 1.5]]),
    "sum cumsum": (lambda x: wnp.cumsum(x, axis=0) + wnp.sum(x, axis=1, keepdims=True), [[0.3, -0.4], [1.2, 0.5]]),
    "max min": (lambda x: wnp.max(x, axis=0) * wnp.min(x), [[0.3, -0.4, 2.0], [1.2, 0.5, -1.0]]),
    "getitem integer arrays": (lambda x: x[_I, 1:].sum(axis=0) * x[_ROWS, :2][1:], [[0.3, -0.4, 2.0], [1.2, 0.5, -1.0], [0.1, 0.2, 0.7]]),
    "take_along_axis": (lambda x: wnp.take_along_axis(x, np.array([[0, 2, 2]]), axis=1), [[0.3, -0.4, 2.0]]),
    "at add repeats": (lambda x, v: wg.at(x)[np.array([0, 2, 0])].add(v), [0.3, -0.4, 2.0], [1.5, 0.5, -1.0]),
    "at add constant base": (lambda v: wg.at(np.zeros(3))[np.array([1, 1])].add(v * v), [1.5, 0.5]),
    "at set": (lambda x, v: wg.at(x)[1:].set(v * 2.0), [0.3, -0.4, 2.0], [1.5, 0.5]),
    "at set constant value": (lambda x: wg.at(x)[np.array([0, 2])].set(7.0) * x, [0.3, -0.4, 2.0]),
    "at set into a constant": (lambda v: wg.at(np.ones((2, 2)))[0].set(v), [1.5, 0.5]),
    "at multiply": (lambda x, v: wg.at(x)[np.array([2, 0])].multiply(v) * x, [0.3, -0.4, 2.0], [1.5, 0.5]),
    "concatenate stack with constants": (lambda x, y: wnp.concatenate([x, np.ones(2), y]) * wnp.stack(
        [x, y, np.zeros(2)], axis=1).sum(axis=1).sum(), [0.3, -0.4], [1.5, 0.5]),
    "pad with a nonzero constant": (lambda x: wnp.pad(x, ((1, 0), (0, 2)), constant_values=2.5) * 3, [[0.3, -0.4]]),
    "flip roll transpose reshape": (lambda x: wnp.flip(wnp.roll(x, 1, axis=0), axis=1).T.reshape(-1)[::-2],
                                    [[0.3, -0.4, 0.2], [1.2, 0.5, -1.0]]),
    "diag diagonal broadcast_to": (lambda x: wnp.diag(wnp.diagonal(x)) + wnp.broadcast_to(x[0], (3, 3)),
                                   [[0.3, -0.4, 0.2], [1.2, 0.5, -1.0], [0.1, 0.2, 0.7]]),
    "astype": (lambda x: wnp.astype(x.astype(np.complex128), np.float64) * x + x.astype(np.int64), [0.3, -1.4]),
    "matmul batched and 1-d": (lambda a, b, v: (a @ b) @ v + (v @ b.T).sum(),
                               np.arange(24.0).reshape(2, 3, 4) / 10, np.linspace(-1, 1, 20).reshape(4, 5),
                               [0.3, -0.4, 0.2, 1.1, 0.9]),
    "dot tensordot outer": (lambda a, b: wnp.dot(a, b) + wnp.tensordot(a, b, axes=([1], [0])) + wnp.outer(a[:, 0], b[1]),
                            [[0.3, -0.4, 0.2], [1.2, 0.5, -1.0]], [[0.1, 0.2], [0.7, -0.3], [1.1, 0.4]]),
    "dot scalar and vectors": (lambda a, b: wnp.dot(a[0], b) * wnp.dot(a, b) + wnp.dot(2.0, a), [0.3, -0.4], [1.2, 0.5]),
    "einsum three operands": (lambda a, b, c: wnp.einsum("ij,jk,k->i", a, b, c), [[0.3, -0.4], [1.2, 0.5]],
                              [[0.1, 0.2, 0.3], [0.7, -0.3, 0.5]], [1.1, 0.4, -0.6]),
    "einsum diagonal and one operand": (lambda a: wnp.einsum("ii->i", a) * wnp.einsum("ij,ij->", a, a),
                                        [[0.3, -0.4], [1.2, 0.5]]),
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL_CASES))
def test_structural_jvp_rules_match_finite_differences(name, own_structural_rules):
    fn, *args = STRUCTURAL_CASES[name]
    args = tuple(np.asarray(a, dtype=float) for a in args)
    wg.check_grads(fn, args, modes=("fwd",))


@pytest.mark.parametrize("name", ["prod one zero", "prod two zeros in a lane", "cumprod zeros", "at multiply",
                                  "matmul batched and 1-d", "einsum three operands", "max min"])
def test_structural_forward_over_reverse_and_jacfwd(name, own_structural_rules):
    fn, *args = STRUCTURAL_CASES[name]
    args = tuple(np.asarray(a, dtype=float) for a in args)
    wg.check_grads(fn, args, order=2, modes=("fwd",))
    nums = tuple(range(len(args)))
    fwd, rev = wg.jacfwd(fn, argnums=nums)(*args), wg.jacobian(fn, argnums=nums)(*args)
    for a, b in zip(fwd, rev):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_max_min_jvp_averages_tied_tangents(own_structural_rules):
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    t = np.array([[5.0, 1.0, 2.0], [3.0, 6.0, 0.0]])
    np.testing.assert_allclose(wg.jvp(lambda x: wnp.max(x, axis=1), (x,), (t,))[1], [1.5, 3.0])
    y = np.array([[1.0, 2.0, 2.0], [2.0, 2.0, 2.0]])
    np.testing.assert_allclose(wg.jvp(lambda y: wnp.min(y, axis=0), (y,), (t,))[1], [5.0, 3.5, 1.0])
    np.testing.assert_allclose(wg.jvp(wnp.max, (x,), (t,))[1], 1.5)
    # the same shares as reverse mode: the JVP equals the Jacobian (from the VJP) times t
    np.testing.assert_allclose(wg.jvp(wnp.min, (x,), (t,))[1], wg.jacobian(wnp.min)(x).ravel() @ t.ravel())


def test_prod_jvp_is_finite_at_subnormal_elements(own_structural_rules):
    x = np.array([1e-310, 2.0, 3.0])
    t = np.ones(3)
    out, dt = wg.jvp(wnp.prod, (x,), (t,))
    np.testing.assert_allclose(dt, 6.0 + 5e-310)
    np.testing.assert_allclose(wg.jvp(wnp.cumprod, (x,), (t,))[1], [1.0, 2.0, 6.0])
    zero = np.array([0.0, 2.0, 3.0])  # exact zeros: the surviving term exactly
    np.testing.assert_allclose(wg.jvp(wnp.cumprod, (zero,), (np.array([0.5, 1.0, 1.0]),))[1], [0.5, 1.0, 3.0])


def test_astype_jvp_to_integer_and_from_complex(own_structural_rules):
    x, t = np.array([1.7, -2.2]), np.array([1.0, 2.0])
    out, dt = wg.jvp(lambda x: x.astype(np.int64), (x,), (t,))
    assert out.dtype == np.int64 and np.all(dt == 0)
    z, tz = np.array([1.0 + 2.0j, -0.5j]), np.array([0.5 - 1.0j, 2.0 + 1.0j])
    out, dt = wg.jvp(lambda z: wnp.astype(z, np.float64), (z,), (tz,))  # the real part's tangent
    assert dt.dtype == np.float64
    np.testing.assert_allclose(dt, tz.real)
    out, dt = wg.jvp(lambda x: wnp.astype(x, np.complex128), (x,), (t,))
    assert dt.dtype == np.complex128
    np.testing.assert_allclose(dt, t)
    out, dt = wg.jvp(lambda x: x.astype(np.float32), (x,), (t,))
    assert dt.dtype == np.float32


# --- JVP rules of the elementwise primitives (primitives/elementwise.py and complex.py) -------------
_ELEMENTWISE = ("add", "subtract", "multiply", "divide", "negative", "positive", "power", "float_power", "square",
                "sqrt", "cbrt", "reciprocal", "remainder", "fmod", "exp", "exp2", "expm1", "log", "log2", "log10",
                "log1p", "logaddexp", "logaddexp2", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh",
                "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "arctan2", "hypot", "deg2rad", "rad2deg",
                "absolute", "fabs", "maximum", "minimum", "fmax", "fmin", "where", "clip", "real", "imag",
                "conjugate", "angle")


@pytest.fixture
def own_elementwise_rules(monkeypatch):
    """Forward mode must run the elementwise primitives' own JVP rules, not the transposed VJP."""
    refuse_transposed_jvp(monkeypatch, lambda name: name in _ELEMENTWISE)


def test_elementwise_primitives_have_jvp_rules():
    from wengert.primitives._table import PRIMITIVES
    assert [n for n in _ELEMENTWISE if PRIMITIVES[n].jvp is None and PRIMITIVES[n].fused_jvp is None
            and not PRIMITIVES[n].linear] == []


_ELEMENTWISE_ROWS = [n for n in CASE_IDS if n.split("(")[0] in _ELEMENTWISE + ("abs", "mod", "true_divide", "pow",
                                                                            "atan2", "conj")
                     or n.startswith(("power(", "float_power(", "divide ", "x ** ", "where", "clip", ".clip",
                                      "x % y", "c % x", "c ** x", "abs(x)", "np.maximum", "np.power", "np.where",
                                      "np.clip", "np.abs"))]


@pytest.mark.parametrize("name", _ELEMENTWISE_ROWS)
def test_elementwise_rows_run_their_own_jvp_rules(name, own_elementwise_rules):
    fn, specs = CASES[name]
    wg.check_grads(fn, draw(name, specs), modes=("fwd",))


@pytest.mark.parametrize("name", [n for n in SECOND_ORDER[12:] if n in _ELEMENTWISE_ROWS])
def test_elementwise_forward_over_reverse(name, own_elementwise_rules):
    fn, specs = CASES[name]
    wg.check_grads(fn, draw(name, specs), order=2, modes=("fwd",))


_BINARY_FNS = {
    "divide": wnp.divide, "arctan2": wnp.arctan2, "hypot": wnp.hypot, "power": lambda x, y: wnp.abs(x) ** y,
    "multiply": wnp.multiply, "subtract": wnp.subtract, "logaddexp2": wnp.logaddexp2, "maximum": wnp.maximum,
    "remainder": lambda x, y: wnp.remainder(x * 3, y), "fmod": lambda x, y: wnp.fmod(x * 3, y + 3),
    "where": lambda x, y: wnp.where(np.array([True, False, True, False]), x, y),
    "clip": lambda x, y: wnp.clip(y, x, x + 1),
}


@pytest.mark.parametrize("traced", ["x", "y", "both"])
@pytest.mark.parametrize("name", sorted(_BINARY_FNS))
def test_binary_jvp_with_one_or_both_arguments_traced(name, traced, own_elementwise_rules):
    """Per-argument and fused rules alike: each share alone, their sum, broadcast and mixed precision."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 1)).astype(np.float32)  # broadcast against y, and a float32 share
    y = rng.uniform(0.5, 2.0, 4)
    tx, ty = rng.standard_normal(x.shape).astype(np.float32), rng.standard_normal(y.shape)
    f = _BINARY_FNS[name]
    jx, jy = wg.jacobian(f, argnums=(0, 1))(x.astype(np.float64), y)
    if traced == "x":
        out, t = wg.jvp(lambda x: f(x, y), (x,), (tx,))
        expected = jx.reshape(12, 3) @ tx.ravel()
    elif traced == "y":
        out, t = wg.jvp(lambda y: f(x, y), (y,), (ty,))
        expected = jy.reshape(12, 4) @ ty
    else:
        out, t = wg.jvp(f, (x, y), (tx, ty))
        expected = jx.reshape(12, 3) @ tx.ravel() + jy.reshape(12, 4) @ ty
    assert t.shape == out.shape == (3, 4) and t.dtype == out.dtype
    np.testing.assert_allclose(t.ravel(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["maximum", "minimum", "fmax", "fmin"])
def test_extremum_jvp_averages_tied_tangents(name, own_elementwise_rules):
    x, y = np.array([1.0, 2.0, 3.0]), np.array([1.0, 5.0, 0.0])
    tx, ty = np.array([4.0, 1.0, 2.0]), np.array([6.0, 3.0, 7.0])
    f = getattr(wnp, name)
    t = wg.jvp(f, (x, y), (tx, ty))[1]
    x_wins = (x > y) if name in ("maximum", "fmax") else (x < y)
    np.testing.assert_allclose(t, np.where(x == y, (tx + ty) / 2, np.where(x_wins, tx, ty)))
    np.testing.assert_allclose(t, sum(j @ v for j, v in zip(wg.jacobian(f, argnums=(0, 1))(x, y), (tx, ty))))


def test_elementwise_jacfwd_and_hessian(own_elementwise_rules):
    rng = np.random.default_rng(8)
    x, y = rng.uniform(0.5, 2.0, 4), rng.standard_normal(4)

    def f(x, y):
        return (wnp.arctan2(y, x) * wnp.hypot(x, y) + x / (y * y + 1) + wnp.where(y > 0, wnp.sin(x), wnp.exp(y))
                + wnp.clip(y, -0.5, 0.5) * wnp.maximum(x, y) ** 1.5 + wnp.logaddexp(x, y) - wnp.remainder(x, 0.7))

    for a, b in zip(wg.jacfwd(f, argnums=(0, 1))(x, y), wg.jacobian(f, argnums=(0, 1))(x, y)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    s = lambda x: wnp.sum(f(x, y))  # noqa: E731
    np.testing.assert_allclose(wg.hessian(s)(x), wg.jacobian(wg.grad(s))(x), rtol=1e-10, atol=1e-12)


# --- vmap of jvp with batched primals: the rules' constants are per example ------------------------
# rows whose batched run needs vmap's per-example loop whatever the rules do
NOT_BATCHABLE = {
    "x[x > 0]": "ragged: the result's size depends on each example's values",
    "unique": "ragged: the result's size depends on each example's values",
    "unique axis=1": "ragged: the result's size depends on each example's values",
    "histogram edges": "np.histogram returns a tuple: vmap runs it once per example (test_vmap.py)",
    # each function sees the elements its condition selects, which differ per example (a loop)
    "piecewise": "conditions that depend on the values", "piecewise otherwise": "the same",
    "piecewise constant": "the same", "trim_zeros": "the result's length depends on each example's values",
    "roots": "the number of roots depends on each example's zero coefficients",
    "polydiv": "the remainder's length depends on each example's values", "polydiv shorter": "the same",
    **{name: "set operations: the result's size depends on each example's values" for name in (
        "unique_values", "unique_all", "unique_counts", "unique_inverse", "union1d", "intersect1d",
        "intersect1d return_indices", "setdiff1d", "setxor1d")},
    "histogram_bin_edges": "np.histogram returns a tuple: vmap runs it once per example (test_vmap.py)",
    "histogramdd": "the same (its edges are histogram's)", "histogram2d": "the same",
}


def _batched_jvp_examples(name, count=3):
    """``count`` examples of a table row (primals and tangents for its array arguments) and the
    row's function of those arguments alone (the other arguments fixed)."""
    fn, specs = CASES[name]
    rng = rng_for(name)
    positions = [i for i, s in enumerate(specs) if isinstance(s, Arg)]
    primals = [[specs[i].draw(rng) for i in positions] for _ in range(count)]
    tangents = [[specs[i].draw(rng) for i in positions] for _ in range(count)]

    def f(*xs):
        full = list(specs)
        for i, x in zip(positions, xs):
            full[i] = x
        return fn(*full)
    return f, primals, tangents


def _assert_stacked(out, refs):
    leaves, treedef = wg.tree.flatten(out)
    assert treedef == wg.tree.flatten(refs[0])[1]
    for k, leaf in enumerate(leaves):
        expected = np.stack([np.asarray(wg.tree.flatten(r)[0][k]) for r in refs])
        assert np.shape(leaf) == expected.shape
        np.testing.assert_allclose(leaf, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in CASE_IDS if n not in NOT_BATCHABLE])
def test_vmap_of_jvp_with_batched_primals_every_table_row(name):
    f, primals, tangents = _batched_jvp_examples(name)
    n = len(primals[0])
    refs = [wg.jvp(f, tuple(p), tuple(t))[1] for p, t in zip(primals, tangents)]
    stacked = [np.stack([p[i] for p in primals]) for i in range(n)] + \
              [np.stack([t[i] for t in tangents]) for i in range(n)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no per-example fallback
        out = wg.vmap(lambda *a: wg.jvp(f, a[:n], a[n:])[1])(*stacked)
    _assert_stacked(out, refs)


def _vmap_jvp_no_loop(f, xs, ts):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = wg.vmap(lambda *a: wg.jvp(f, a[:len(xs)], a[len(xs):])[1])(*xs, *ts)
    _assert_stacked(out, [wg.jvp(f, tuple(x[i] for x in xs), tuple(t[i] for t in ts))[1]
                          for i in range(len(xs[0]))])
    return out


@pytest.mark.parametrize("fn", [wnp.abs, wnp.fabs, wg.nn.relu], ids=["abs", "fabs", "relu"])
def test_vmap_of_jvp_at_the_kink(fn):
    """One example with zeros, one without: each example's tangent uses its own sign mask."""
    xs = np.array([[0.0, -2.0, 3.0], [1.0, 0.0, -1.0], [-1.0, -2.0, 0.5]])
    ts = np.array([[5.0, 1.0, 2.0], [3.0, 4.0, 6.0], [1.0, 1.0, 1.0]])
    out = _vmap_jvp_no_loop(fn, [xs], [ts])
    slope = np.sign(xs) if fn is not wg.nn.relu else (xs > 0)
    np.testing.assert_array_equal(out, ts * slope)


def test_vmap_of_jvp_maximum_ties_per_example():
    xs = np.array([[1.0, 2.0], [3.0, 0.0], [2.0, 2.0]])
    ys = np.array([[1.0, 5.0], [0.0, 0.0], [2.0, 1.0]])
    tx, ty = np.full((3, 2), 4.0), np.full((3, 2), 2.0)
    out = _vmap_jvp_no_loop(wnp.maximum, [xs, ys], [tx, ty])
    np.testing.assert_array_equal(out, np.where(xs == ys, 3.0, np.where(xs > ys, 4.0, 2.0)))
    # a batched x against an unbatched y of another rank
    y = np.array([2.0, 0.0])
    out = _vmap_jvp_no_loop(lambda x: wnp.maximum(x, y), [xs], [tx])
    np.testing.assert_array_equal(out, np.where(xs == y, 2.0, np.where(xs > y, 4.0, 0.0)))


def test_vmap_of_jvp_clip_at_the_bounds():
    xs = np.array([[-1.0, 0.0, 0.5], [1.0, 2.0, -0.5]])
    lo, hi = np.array([-0.5, -0.5]), np.array([1.0, 1.0])
    ts, tlo, thi = np.ones((2, 3)), np.full(2, 10.0), np.full(2, 100.0)
    out = _vmap_jvp_no_loop(lambda x, a, b: wnp.clip(x, a, b), [xs, lo, hi], [ts, tlo, thi])
    # NumPy's clip: x at a bound is inside (the tangent of x), beyond it the bound's tangent
    np.testing.assert_array_equal(out, [[10.0, 1.0, 1.0], [1.0, 100.0, 1.0]])
    out = _vmap_jvp_no_loop(lambda x: wnp.clip(x, -0.5, 1.0), [xs], [ts])
    np.testing.assert_array_equal(out, [[0.0, 1.0, 1.0], [1.0, 0.0, 1.0]])


def test_vmap_of_jvp_power_and_cumprod_with_zeros_in_some_examples():
    xs = np.array([[0.0, 2.0, 0.5], [1.5, 0.0, 0.0], [1.0, 2.0, 3.0]])
    ys = np.array([[0.0, 2.0, 1.0], [1.0, 0.0, 3.0], [0.0, 1.0, 2.0]])
    ts = np.ones((3, 3))
    _vmap_jvp_no_loop(wnp.power, [xs, ys], [ts, ts])
    _vmap_jvp_no_loop(wnp.cumprod, [xs], [ts])
    _vmap_jvp_no_loop(wnp.prod, [xs], [ts])


def test_vmap_of_jvp_linalg_and_norms_with_per_example_special_cases():
    """Eigenvalue ties, a singular matrix and a zero vector in one example only."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((3, 3, 3))
    a[0, :, 0] = a[0, :, 1]                                   # singular: det's cofactor path
    s = a @ a.transpose(0, 2, 1)
    s[1] = np.eye(3)                                          # tied eigenvalues
    ts = rng.standard_normal((3, 3, 3))
    _vmap_jvp_no_loop(wnp.linalg.det, [a], [ts])
    _vmap_jvp_no_loop(lambda m: wnp.linalg.eigh(m)[0], [s], [ts + ts.transpose(0, 2, 1)])
    v = rng.standard_normal((3, 4))
    v[2] = 0.0
    _vmap_jvp_no_loop(lambda x: wnp.linalg.norm(x, ord=3), [v], [np.ones((3, 4))])
    _vmap_jvp_no_loop(lambda x: wg.nn.normalize(x, axis=-1, eps=1e-3), [v], [np.ones((3, 4))])

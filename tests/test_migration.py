"""docs/from-autograd.md and docs/from-jax.md, row by row: each wengert spelling gives what the
autograd or JAX name gives, run side by side (skipped where the library is not installed)."""
import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.scipy import stats as wst
from wengert.scipy.integrate import odeint

RNG = np.random.default_rng(0)
X = RNG.standard_normal(3)
W = RNG.standard_normal((2, 3))


def close(a, b, rtol=1e-7):
    np.testing.assert_allclose(np.asarray(a, dtype=complex if np.iscomplexobj(a) else float), np.asarray(b),
                               rtol=rtol, atol=1e-10)


# --- autograd ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ag():
    return pytest.importorskip("autograd")


def test_autograd_differentiation_rows(ag):
    anp = pytest.importorskip("autograd.numpy")

    def loss(np_):
        return lambda w, x: np_.sum(np_.tanh(w @ x) ** 2)

    a, b = loss(anp), loss(wnp)
    close(wg.grad(b, argnums=1)(W, X), ag.grad(a, argnum=1)(W, X))
    close(wg.value_and_grad(b)(W, X)[1], ag.value_and_grad(a)(W, X)[1])
    g, aux = wg.grad(lambda w: (b(w, X), 7.0), has_aux=True)(W)
    g_ag, aux_ag = ag.grad_and_aux(lambda w: (a(w, X), 7.0))(W)
    close(g, g_ag)
    assert aux == aux_ag
    close(wg.elementwise_grad(wnp.sin)(X), ag.elementwise_grad(anp.sin)(X))
    close(wg.jacobian(lambda x: wnp.tanh(W @ x))(X), ag.jacobian(lambda x: anp.tanh(W @ x))(X))
    close(wg.hessian(lambda x: b(W, x))(X), ag.hessian(lambda x: a(W, x))(X))
    v = RNG.standard_normal(3)
    close(wg.hvp(lambda x: b(W, x), (X,), (v,)), ag.hessian_vector_product(lambda x: a(W, x))(X, v))
    _, hvp_at_x = wg.linearize(wg.grad(lambda x: b(W, x)), X)
    close(hvp_at_x(v), ag.make_hvp(lambda x: a(W, x))(X)[0](v))
    # one-element outputs are scalars in both
    close(wg.grad(lambda x: wnp.sum(x ** 2, keepdims=True))(X), ag.grad(lambda x: anp.sum(x ** 2, keepdims=True))(X))


def test_autograd_vjp_jvp_and_complex_rows(ag):
    anp = pytest.importorskip("autograd.numpy")
    u = RNG.standard_normal(2)
    pull_ag, out_ag = ag.make_vjp(lambda x: anp.tanh(W @ x))(X)
    out, pull = wg.vjp(lambda x: wnp.tanh(W @ x), X)   # the order is (out, vjp_fn)
    close(out, out_ag)
    close(pull(u)[0], pull_ag(u))
    v = RNG.standard_normal(3)
    close(wg.jvp(lambda x: wnp.tanh(W @ x), (X,), (v,))[1], ag.make_jvp(lambda x: anp.tanh(W @ x))(X)(v)[1])
    z = 1.0 + 2.0j
    close(wg.vjp(lambda z: z ** 3, z)[1](1.0 + 0j)[0], ag.holomorphic_grad(lambda z: z ** 3)(z))
    close(wg.grad(lambda z: wnp.abs(z) ** 2 + wnp.real(z))(z), ag.grad(lambda z: anp.abs(z) ** 2 + anp.real(z))(z))


def test_autograd_utilities_and_scipy_rows(ag):
    flatten = pytest.importorskip("autograd.misc").flatten
    tree = {"a": W, "b": [X, 2.0]}
    flat, unflatten = wg.flatten_util.ravel_pytree(tree)
    flat_ag, _ = flatten(tree)
    close(flat, flat_ag)
    close(unflatten(flat)["b"][0], X)
    import scipy.special as sc
    from wengert.scipy import special as ws
    asp = pytest.importorskip("autograd.scipy.special")
    missing = [n for n in dir(asp) if not n.startswith("_") and hasattr(sc, n) and not hasattr(ws, n)]
    assert not missing   # every scipy.special name autograd has
    assert ws.gammasgn(np.array([-0.5, 2.0])).tolist() == [-1.0, 1.0]
    ast = pytest.importorskip("autograd.scipy.stats")
    alpha = np.array([1.5, 2.0, 3.0])
    sample = wst.dirichlet.rvs(alpha, size=4, random_state=0)   # SciPy's, passed through
    close(wg.grad(lambda a: wnp.sum(wst.dirichlet.logpdf(sample.T, a)))(alpha),
          ag.grad(lambda a: sum(ast.dirichlet.logpdf(s, a) for s in sample))(alpha))
    aodeint = pytest.importorskip("autograd.scipy.integrate").odeint
    anp = pytest.importorskip("autograd.numpy")
    t = np.array([0.0, 0.5, 1.0])

    def total(solve, np_, pack):   # autograd needs its own tuple type for a differentiated args
        return lambda k: np_.sum(solve(lambda y, t, k: -k * y, np.array([1.0, 2.0]), t, pack((k,)),
                                       rtol=1e-10, atol=1e-10))

    close(wg.grad(total(odeint, wnp, tuple))(0.7), ag.grad(total(aodeint, anp, ag.builtins.tuple))(0.7), rtol=1e-6)
    check_grads = pytest.importorskip("autograd.test_util").check_grads
    check_grads(lambda x: anp.sum(anp.sin(x)), modes=["rev"], order=2)(X)
    wg.check_grads(lambda x: wnp.sum(wnp.sin(x)), (X,), order=2, modes=("rev",))


# --- JAX -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def test_jax_transform_rows(jax):
    jnp = jax.numpy

    def loss(np_):
        return lambda p, x: np_.sum(np_.tanh(p["w"] @ x) ** 2)

    params = {"w": W}
    a, b = loss(jnp), loss(wnp)
    close(wg.grad(b, argnums=(0, 1))(params, X)[0]["w"], jax.grad(a, argnums=(0, 1))(params, X)[0]["w"])
    close(wg.value_and_grad(b)(params, X)[0], jax.value_and_grad(a)(params, X)[0])
    f_j, f_w = (lambda x: jnp.tanh(W @ x)), (lambda x: wnp.tanh(W @ x))
    u, v = RNG.standard_normal(2), RNG.standard_normal(3)
    close(wg.vjp(f_w, X)[1](u)[0], jax.vjp(f_j, X)[1](u)[0])
    close(wg.jvp(f_w, (X,), (v,))[1], jax.jvp(f_j, (X,), (v,))[1])
    close(wg.jacfwd(f_w)(X), jax.jacfwd(f_j)(X))
    close(wg.hessian(lambda x: b(params, x))(X), jax.hessian(lambda x: a(params, x))(X))
    xs = RNG.standard_normal((4, 3))
    close(wg.vmap(f_w)(xs), jax.vmap(f_j)(xs))
    close(wg.vmap(wg.grad(b, argnums=1), in_axes=(None, 0))(params, xs),
          jax.vmap(jax.grad(a, argnums=1), in_axes=(None, 0))(params, xs))
    # the one deliberate difference: a one-element output
    one = lambda np_: lambda x: np_.sum(x ** 2, keepdims=True)  # noqa: E731
    close(wg.grad(one(wnp))(X), 2 * X)
    with pytest.raises(TypeError):
        jax.grad(one(jnp))(X)


def test_jax_stop_gradient_row(jax):
    def f(np_, stop):
        return lambda x: np_.sum(x * stop(x) ** 2)

    close(wg.grad(f(wnp, wg.stop_gradient))(X), jax.grad(f(jax.numpy, jax.lax.stop_gradient))(X))
    close(wg.grad(f(wnp, wg.stop_gradient))(X), X ** 2)


def test_jax_custom_vjp_row(jax):
    def make(decorator, np_):
        @decorator
        def clip_gradient(x):
            return np_.sin(x)

        clip_gradient.defvjp(lambda x: (np_.sin(x), np_.cos(x)), lambda c, g: (np_.clip(g * c, -0.1, 0.1),))
        return clip_gradient

    f_j, f_w = make(jax.custom_vjp, jax.numpy), make(wg.custom_vjp, wnp)
    close(wg.grad(lambda x: wnp.sum(f_w(x) * 3))(X), jax.grad(lambda x: jax.numpy.sum(f_j(x) * 3))(X))


def test_jax_tree_and_nn_rows(jax):
    from jax.flatten_util import ravel_pytree
    tree = {"b": [X, 2.0], "a": (W, None)}
    assert [np.shape(x) for x in wg.tree.leaves(tree)] == [np.shape(x) for x in jax.tree_util.tree_leaves(tree)]
    close(wg.tree.map(lambda x: x * 2, tree)["b"][0], jax.tree_util.tree_map(lambda x: x * 2, tree)["b"][0])
    close(wg.flatten_util.ravel_pytree(tree)[0], ravel_pytree(tree)[0])
    import wengert.nn as wnn
    logits = RNG.standard_normal((2, 5))
    for name in ("log_softmax", "softplus"):
        close(getattr(wnn, name)(logits), getattr(jax.nn, name)(logits))
    close(wnn.gelu(logits), jax.nn.gelu(logits, approximate=False))   # the defaults differ
    close(wnn.one_hot(np.array([0, 2]), 3), jax.nn.one_hot(np.array([0, 2]), 3))
    x = RNG.standard_normal(4)
    close(wg.grad(lambda x: wnp.sum(x.at[1].set(x[0] ** 2) ** 2))(x),
          jax.grad(lambda x: jax.numpy.sum(x.at[1].set(x[0] ** 2) ** 2))(x))

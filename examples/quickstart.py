"""A two-minute tour of wengert: grad, value_and_grad over a dict of parameters, check_grads, per-example
gradients with vmap, and forward mode (jvp, hvp, hessian)."""
import numpy as np

import wengert as wg
import wengert.numpy as wnp

# 1. grad of an ordinary function: d/dx sum(sin(x)**2) = 2 sin(x) cos(x) = sin(2x)
f = lambda x: wnp.sum(wnp.sin(x) ** 2)
x = np.linspace(0.0, 1.0, 5)
print("grad:", wg.grad(f)(x), "\nsin(2x):", np.sin(2 * x))

# 2. value_and_grad with parameters in a dict (any pytree: dicts, lists, tuples, dataclasses)
def loss(params, x, y):
    pred = wnp.tanh(x @ params["w"] + params["b"])
    return wnp.mean((pred - y) ** 2)

rng = np.random.default_rng(0)
params = {"w": rng.standard_normal((3, 1)), "b": np.zeros(1)}
xs, ys = rng.standard_normal((8, 3)), rng.standard_normal((8, 1))
value, grads = wg.value_and_grad(loss)(params, xs, ys)
print("loss:", value, "| gradient shapes:", {k: g.shape for k, g in grads.items()})

# 3. check_grads: first and second derivatives against finite differences (raises on mismatch)
wg.check_grads(loss, (params, xs, ys), order=2)
print("check_grads(order=2): ok")

# 4. a kernel for one example, run over a batch with vmap: per-example gradients in one batched pass
per_example = wg.vmap(wg.grad(loss), in_axes=(None, 0, 0))(params, xs[:, None], ys[:, None])
print("per-example gradient of w:", per_example["w"].shape)   # (8, 3, 1): one gradient per example

# 5. forward mode: a Jacobian-vector product, a Hessian-vector product, a whole Hessian
_, tangent = wg.jvp(f, (x,), (np.ones_like(x),))
print("jvp:", tangent, "= sum(sin(2x)):", np.sin(2 * x).sum())
print("hvp:", wg.hvp(f, (x,), (np.ones_like(x),)), "\nhessian diagonal:", np.diag(wg.hessian(f)(x)))

"""Other AD libraries on the same rows: autograd, PyTorch (CPU, eager), JAX (eager and jit), mygrad.

All optional (``pip install -e '.[bench]'``); a library that is not installed is skipped with a
note. Each adapter runs the *same* user code from ``workloads.py`` under the library's NumPy-like
namespace. Where a library has no NumPy name the code uses, a one-line alias supplies it
(``np.max`` is ``torch.amax``, ``np.dot`` is mygrad's ``matmul``, ...). The seed-000 loop writes
into the library's own form of a writable array:

* PyTorch and mygrad: a zeros tensor written in place (``t[i, j, k] = v``); reading a slice before
  writing it back clones it, as PyTorch requires when the read value is saved for backward;
* JAX: a zeros array updated with ``x = x.at[i, j, k].set(v)`` (JAX's replacement for mutation);
* autograd: no mutation at all, so the loop builds lists and calls ``np.array`` (autograd's idiom).

``prepare(lib, row)`` returns a :class:`Prepared` with ``fwd()`` (forward on the library's own
arrays, no gradient tracking) and ``vg()`` (value and gradient; returns the value as a float and
the gradient leaves as NumPy arrays in the order of ``leaves(...)``).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import types

import numpy


class Skip(Exception):
    """This library cannot run this row; the message says why."""


# --- pytrees: tuples, lists, dicts, dataclasses -------------------------------------------------
def tree_map(fn, x):
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(tree_map(fn, v) for v in x)
    if isinstance(x, list):
        return [tree_map(fn, v) for v in x]
    if isinstance(x, dict):
        return {k: tree_map(fn, v) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return type(x)(**{f.name: tree_map(fn, getattr(x, f.name)) for f in dataclasses.fields(x)})
    return fn(x)


def leaves(x):
    """The leaves of a pytree in a fixed order (dataclass field order, dict insertion order)."""
    out = []
    tree_map(out.append, x)
    return out


def to_numpy(x):
    for attr in ("detach",):                        # torch
        if hasattr(x, attr):
            return x.detach().numpy()
    if hasattr(x, "data") and type(x).__module__.startswith("mygrad"):
        return numpy.asarray(x.data)
    return numpy.asarray(x)


# --- the libraries ---------------------------------------------------------------------------
LIBS = ("autograd", "torch", "jax", "jax.jit", "mygrad")
_MODULES = {"autograd": "autograd", "torch": "torch", "jax": "jax", "jax.jit": "jax", "mygrad": "mygrad"}
# jax.jit of a Python loop unrolls it into one XLA program. In trial runs on a 2-core machine,
# W2 diagmatmul's 256 trips were still compiling after 120 s, and W1's seed-size loop (1,024 trips
# of ~12 ops) after 8 minutes and 9.7 GB; so the loop formulations are not jitted.
LOOP_JIT_LIMIT = 0


def availability(lib):
    """(version, None) if ``lib`` can be imported, else (None, reason)."""
    try:
        mod = importlib.import_module(_MODULES[lib])
    except Exception as e:  # noqa: BLE001 - any import failure means: not available
        return None, f"not installed ({type(e).__name__})"
    try:
        return importlib.metadata.version(_MODULES[lib]), None
    except importlib.metadata.PackageNotFoundError:
        return getattr(mod, "__version__", "?"), None


@dataclasses.dataclass
class Prepared:
    fwd: object
    vg: object
    note: str = ""


def prepare(lib, row):
    if row.spelling is not None:
        container = row.spelling[0]
        if container == "in-place" and lib in ("autograd", "jax", "jax.jit"):
            raise Skip("its arrays cannot be written in place")
        if container == "Buffer" and lib == "autograd":
            raise Skip("no writable array (the lists+stack spelling is autograd's)")
    return {"autograd": _autograd, "torch": _torch, "jax": _jax, "jax.jit": _jax_jit,
            "mygrad": _mygrad}[lib](row)


def _diff_mask(row):
    return [i in row.argnums for i in range(len(row.args))]


# --- autograd ----------------------------------------------------------------------------------
def _autograd(row):
    import autograd
    import autograd.numpy as anp

    fn = row.code(anp, None)[row.formulation]
    args = list(row.args)
    note = "lists + np.array (no mutation)" if row.formulation == "loop" else ""
    record_types = {}
    for i, a in enumerate(args):                    # autograd differentiates tuples/lists/dicts only
        if dataclasses.is_dataclass(a):
            record_types[i] = type(a)
            args[i] = {f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
            note = "record passed as a dict"
    if record_types:
        inner = fn

        def fn(*xs):
            xs = [types.SimpleNamespace(**x) if i in record_types else x for i, x in enumerate(xs)]
            return inner(*xs)

    argnum = row.argnums if len(row.argnums) > 1 else row.argnums[0]
    vg_fn = autograd.value_and_grad(fn, argnum=argnum)

    def vg():
        value, g = vg_fn(*args)
        g = g if len(row.argnums) > 1 else (g,)
        g = tuple(record_types[n](**gi) if n in record_types else gi for n, gi in zip(row.argnums, g))
        return float(value), [numpy.asarray(x) for x in leaves(g)]

    return Prepared(lambda: fn(*args), vg, note)


# --- PyTorch -----------------------------------------------------------------------------------
def _torch_namespace():
    import torch

    def axis_kw(axis, keepdims):
        return {} if axis is None else {"dim": axis, "keepdim": keepdims}

    ns = types.SimpleNamespace(
        sum=lambda x, axis=None, keepdims=False: torch.sum(x, **axis_kw(axis, keepdims)),
        max=lambda x, axis=None, keepdims=False: torch.amax(x, **({} if axis is None else
                                                                    {"dim": axis, "keepdim": keepdims})),
        exp=torch.exp, sqrt=torch.sqrt, log=torch.log, tanh=torch.tanh, einsum=torch.einsum,
        dot=lambda a, b: torch.dot(a, b) if a.ndim == 1 and b.ndim == 1 else torch.matmul(a, b),
        diag=torch.diag, reshape=torch.reshape, inner=torch.inner,
        stack=lambda xs, axis=0: torch.stack(xs, dim=axis),
        zeros=lambda shape, dtype: torch.zeros(shape, dtype=dtype),
    )
    return ns


class _TorchBuffer:
    """A zeros tensor written in place (PyTorch tracks the writes with CopySlices)."""

    def __init__(self, shape, dtype):
        import torch
        self.t = torch.zeros(shape, dtype=dtype)

    @classmethod
    def zeros(cls, shape, dtype):
        return cls(shape, dtype)

    def __setitem__(self, index, value):
        self.t[index] = value

    def __getitem__(self, index):
        return self.t[index].clone()       # the read is saved for backward, then overwritten

    def freeze(self):
        return self.t


def _torch(row):
    import torch
    torch.set_num_threads(1)
    fn = row.code(_torch_namespace(), _TorchBuffer)[row.formulation]
    mask = _diff_mask(row)
    plain = tree_map(lambda x: torch.from_numpy(numpy.ascontiguousarray(x)), list(row.args))
    diff_leaves = []

    def make_leaf(x):
        t = torch.from_numpy(numpy.array(x, copy=True)).requires_grad_(True)
        diff_leaves.append(t)
        return t

    args = [tree_map(make_leaf, a) if m else p for a, p, m in zip(row.args, plain, mask)]

    def vg():
        out = fn(*args)
        g = torch.autograd.grad(out, diff_leaves, allow_unused=True, materialize_grads=True)
        return float(out), [x.numpy() for x in g]

    def fwd():
        with torch.no_grad():
            return fn(*plain)

    return Prepared(fwd, vg, "in-place writes into a tensor" if row.formulation == "loop" else "")


# --- JAX ---------------------------------------------------------------------------------------
class _JaxBuffer:
    """A zeros array updated functionally: ``x = x.at[index].set(value)``."""

    def __init__(self, shape, dtype):
        import jax.numpy as jnp
        self.x = jnp.zeros(shape, dtype)

    @classmethod
    def zeros(cls, shape, dtype):
        return cls(shape, dtype)

    def __setitem__(self, index, value):
        self.x = self.x.at[index].set(value)

    def __getitem__(self, index):
        return self.x[index]

    def freeze(self):
        return self.x


_registered = set()


def _jax_setup(row):
    import jax
    import jax.numpy as jnp
    for a in row.args:
        if dataclasses.is_dataclass(a) and type(a) not in _registered:
            jax.tree_util.register_dataclass(type(a), data_fields=[f.name for f in dataclasses.fields(a)],
                                             meta_fields=[])
            _registered.add(type(a))
    fn = row.code(jnp, _JaxBuffer)[row.formulation]
    args = tree_map(jnp.asarray, list(row.args))
    return jax, fn, args


def _jax_result(value, g, row):
    g = g if len(row.argnums) > 1 else (g,)
    return float(value), [numpy.asarray(x) for x in leaves(tuple(g))]


def _jax(row):
    jax, fn, args = _jax_setup(row)
    vg_fn = jax.value_and_grad(fn, argnums=row.argnums if len(row.argnums) > 1 else row.argnums[0])

    def vg():
        value, g = jax.block_until_ready(vg_fn(*args))
        return _jax_result(value, g, row)

    note = "x.at[i].set(v) updates" if row.formulation == "loop" else ""
    return Prepared(lambda: jax.block_until_ready(fn(*args)), vg, note)


def _jax_jit(row):
    if row.loop_iterations > LOOP_JIT_LIMIT:
        raise Skip(f"jit unrolls the Python loop ({row.loop_iterations} trips) into one XLA program; "
                   "compiling it took > 120 s for 256 trips, > 8 min and 9.7 GB for 1,024")
    jax, fn, args = _jax_setup(row)
    vg_fn = jax.jit(jax.value_and_grad(fn, argnums=row.argnums if len(row.argnums) > 1 else row.argnums[0]))
    fwd_fn = jax.jit(fn)

    def vg():
        value, g = jax.block_until_ready(vg_fn(*args))
        return _jax_result(value, g, row)

    return Prepared(lambda: jax.block_until_ready(fwd_fn(*args)), vg, "")


# --- mygrad ------------------------------------------------------------------------------------
def _mygrad_namespace():
    import mygrad as mg

    def diag(x):
        n = min(x.shape)
        r = numpy.arange(n)
        return x[r, r]

    ns = types.SimpleNamespace(**{n: getattr(mg, n) for n in
                                  ("sum", "max", "exp", "sqrt", "log", "tanh", "einsum", "reshape", "stack")})
    ns.dot = mg.matmul
    ns.diag = diag
    ns.zeros = lambda shape, dtype: mg.zeros(shape, dtype=dtype)
    if hasattr(mg, "inner"):
        ns.inner = mg.inner
    return ns


class _MygradBuffer:
    def __init__(self, shape, dtype):
        import mygrad as mg
        self.t = mg.zeros(shape, dtype=dtype)

    @classmethod
    def zeros(cls, shape, dtype):
        return cls(shape, dtype)

    def __setitem__(self, index, value):
        self.t[index] = value

    def __getitem__(self, index):
        return self.t[index]

    def freeze(self):
        return self.t


def _mygrad(row):
    import mygrad as mg
    fn = row.code(_mygrad_namespace(), _MygradBuffer)[row.formulation]
    mask = _diff_mask(row)
    diff_leaves = []

    def make_leaf(x):
        t = mg.tensor(x)
        diff_leaves.append(t)
        return t

    args = [tree_map(make_leaf, a) if m else a for a, m in zip(row.args, mask)]
    const = tree_map(lambda x: mg.tensor(x, constant=True), list(row.args))

    def vg():
        out = fn(*args)
        out.backward()
        grads = [numpy.zeros_like(t.data) if t.grad is None else t.grad for t in diff_leaves]
        return float(out.item()), grads

    def fwd():
        with mg.no_autodiff:
            return fn(*const)

    return Prepared(fwd, vg, "in-place writes into a tensor" if row.formulation == "loop" else "")

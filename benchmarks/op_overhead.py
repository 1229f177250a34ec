"""What each operation costs wengert above NumPy's own forward: record and backward, per operation.

    python benchmarks/op_overhead.py                    # every case, small and medium operands
    python benchmarks/op_overhead.py --size small --only matmul,einsum --json out.json
    python benchmarks/op_overhead.py --quick            # every case once, tiny repeat counts (CI)

One row per case and size. A case is one operation as users spell it (``a @ b``, ``np.dot``,
``x[i]``, ``buf[i] = v``, ``wnn.softmax``, ...) or one primitive of the table called directly.
Every primitive registered in ``primitives._table.PRIMITIVES`` is covered by some case or listed in
``NOT_MEASURED`` with the reason (the smoke test checks this), so a new primitive cannot go unmeasured.

Method: the operation runs ``K`` times inside one ``wg.vjp`` (amortizing the transform's fixed
cost), and the backward pass runs once over the ``K`` outputs; divided by ``K``:

* ``numpy``: the same operation on plain arrays (wengert's face on plain arrays is NumPy);
* ``record``: time per operation under ``vjp`` minus ``numpy``: what tracing adds;
* ``backward``: the backward pass per operation (the rule plus accumulating into the inputs);
* ``overhead`` = record + backward: what differentiating costs above the plain forward.

PyTorch eager (when installed), side by side in the same run: the same operation on tensors that
require grad, minus the same operation under ``no_grad`` (its own forward), plus
``torch.autograd.backward`` over the ``K`` outputs. JAX eager (``--jax``; when installed), the same
way: ``jax.vjp`` of the function that runs the operation ``K`` times (JAX's dispatch, op by op, no
``jit``) minus the ``K`` operations run plainly, plus the ``vjp`` function called once on the ``K``
cotangents (results blocked on, so asynchronous dispatch is timed to completion). The PyTorch
spelling of each case serves JAX through a small namespace of JAX's names (``cat`` is
``jnp.concatenate``, ...); a case it cannot spell has no JAX figure. Operands are float32; one thread. Timings are
medians of repeats interleaved between the contestants, so that load on the machine hits them alike.
Small operands: 0-d and 16-element vectors for elementwise functions, 16-element vectors and 4x4
matrices for the rest; medium: 4096-element vectors and 64x64 matrices. Small and medium rows are
printed as two tables, each with its own summary.
"""
from __future__ import annotations

import os
import sys

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +   # JAX (--jax) on one thread as well
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402

import wengert as wg  # noqa: E402
import wengert.nn as wnn  # noqa: E402
import wengert.numpy as wnp  # noqa: E402
import wengert.numpy.fft  # noqa: E402,F401  (registers the FFT primitives)
import wengert.numpy.linalg  # noqa: E402,F401
from wengert.core import tree  # noqa: E402
from wengert.primitives._batching import elementwise_rule  # noqa: E402
from wengert.primitives._table import PRIMITIVES  # noqa: E402

try:  # the scipy face is optional
    import wengert.scipy.special as wsp_special  # noqa: E402
    import wengert.scipy.linalg  # noqa: E402,F401
    import wengert.scipy.signal  # noqa: E402,F401
    import wengert.scipy.stats  # noqa: E402,F401
except ImportError:  # pragma: no cover
    wsp_special = None

F32 = np.float32
RNG = np.random.default_rng(0)


# --- cases -------------------------------------------------------------------------------------
@dataclass
class Case:
    """One operation: ``run(ns, *args)`` spelled against a namespace (``wnp`` or ``np``), or
    separate ``traced``/``plain`` callables; ``torch(*tensors)`` is PyTorch's spelling (or None)."""
    name: str
    covers: tuple                       # primitive names this case exercises
    shapes: dict                        # size label -> tuple of operand shapes
    traced: Callable                    # f(*traced args) -> output (pytree)
    plain: Callable                     # f(*plain args) -> the same on plain arrays (NumPy)
    torch: Callable = None
    domain: tuple = (0.2, 0.8)          # operands drawn uniformly from here
    make: Callable = None               # make(shapes) -> operands, instead of uniform draws
    notes: str = ""
    group: str = "primitive"
    extra: dict = field(default_factory=dict)
    jax: Callable = None                # JAX's spelling (default: the PyTorch one, in JAX's names)


CASES = []


def case(name, covers, shapes, traced, plain=None, torch=None, **kw):
    if kw.get("jax") is None and torch is not None and hasattr(torch, "spelling"):
        kw["jax"] = _in_jax(torch.spelling)
    CASES.append(Case(name, tuple(covers), shapes, traced, plain or traced, torch, **kw))


SCALAR, VEC, MAT = (), (16,), (4, 4)
MVEC, MMAT = (4096,), (64, 64)
ELEMENTWISE = {"0-d": [SCALAR], "16": [VEC], "4096": [MVEC]}
VECTORS = {"16": [VEC], "4096": [MVEC]}
MATRICES = {"4x4": [MAT], "64x64": [MMAT]}
SMALL_LABELS = {"0-d", "16", "4x4", "16x2", "4x4@16"}


def _torch_fn(name):
    def get():
        import torch
        return getattr(torch, name, None)
    return get


# Elementwise primitives: each is called directly (the table's own entry), on 0-d and vectors.
_TORCH_NAMES = {"absolute": "abs", "arctan2": "atan2", "remainder": "remainder", "power": "pow",
                "float_power": "float_power", "fabs": "abs", "conjugate": None, "real": None,
                "imag": None, "angle": None, "nn.sigmoid": "sigmoid", "nn.relu": "relu",
                "nn.erf": "erf", "nn.softplus": "nn.functional.softplus", "nn.silu": "nn.functional.silu",
                "nn.gelu": "nn.functional.gelu", "nn.log_sigmoid": "nn.functional.logsigmoid",
                "nn.gelu_tanh": None, "scipy.special.expit": "sigmoid", "scipy.special.erf": "erf",
                "scipy.special.erfc": "erfc", "scipy.special.gammaln": "lgamma",
                "scipy.special.digamma": "digamma", "scipy.special.logit": "logit",
                "scipy.special.i0": "i0", "scipy.special.erfinv": "erfinv", "scipy.special.ndtr":
                "special.ndtr", "scipy.special.ndtri": "special.ndtri", "scipy.special.log_ndtr":
                "special.log_ndtr", "scipy.special.xlogy": "xlogy", "scipy.special.i0e": "special.i0e",
                "scipy.special.i1": "special.i1", "scipy.special.i1e": "special.i1e",
                "scipy.special.erfcx": "special.erfcx", "scipy.special.entr": "special.entr",
                "scipy.special.xlog1py": "special.xlog1py", "scipy.special.log_expit": "nn.functional.logsigmoid"}
_DOMAIN = {"arccosh": (1.2, 1.8), "scipy.special.i0": (0.2, 0.8)}
_INTEGER_ARGUMENTS = ("kn", "expn", "pdtri", "bdtr", "bdtrc", "bdtri", "nbdtr", "nbdtrc", "nbdtri", "eval_hermite",
                      "eval_hermitenorm", "legendre_p", "assoc_legendre_p", "sph_legendre_p", "sph_harm_y")
_UNARY_SKIP = {"scipy.special.polygamma", "scipy.special.gamma", "scipy.special.rgamma",
               *(f"scipy.special.{n}" for n in ("ivp", "jvp", "kvp", "yvp", "h1vp", "h2vp", "spherical_bessel",
                                                "lambertw")),
               *(f"scipy.special.{n}" for n in _INTEGER_ARGUMENTS), "scipy.special.ndtri_exp", "scipy.special.zeta"}


def _attr_path(obj, path):
    """``obj.a.b`` for ``path`` "a.b", or None where a name is missing."""
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _torch_attr(path):
    import torch
    return _attr_path(torch, path)


def _elementwise_cases():
    seen = set()
    for name, prim in PRIMITIVES.items():
        impl = prim.impl
        # ufuncs and the elementwise functions declared like them (defunary, scipy.special's binary
        # ones); clip and power have cases of their own
        ufunc_like = isinstance(impl, np.ufunc) or prim.batch is elementwise_rule and name not in ("clip", "power")
        if not ufunc_like or name in seen or name in ("where",) or prim.vjp is None:
            continue
        nin = len(prim.vjp)
        if any(r is None for r in prim.vjp):    # some arguments are orders, not differentiable
            continue
        # shape parameters without a derivative (gammainc's a, iv's order) are passed as constants
        diff = tuple(i for i, r in enumerate(prim.vjp) if not r.__qualname__.startswith("_no_derivative"))
        seen.add(name)
        tname = _TORCH_NAMES.get(name, name)
        torch_fn = None
        if tname:
            def torch_fn(*xs, _path=tname):
                fn = _torch_attr(_path)
                if fn is None:
                    raise LookupError(_path)
                return fn(*xs)
        if name in _UNARY_SKIP:
            continue
        lo, hi = _DOMAIN.get(name, (0.2, 0.8))
        shapes = {k: v * nin for k, v in ELEMENTWISE.items()}

        def jax_fn(*xs, _path=name):
            fn = _jax_attr(_path)
            if fn is None:
                raise LookupError(_path)
            return fn(*xs)

        case(name, [name], shapes, lambda *xs, _p=prim: _p(*xs), lambda *xs, _p=prim: _p.impl(*xs),
             torch_fn, domain=(lo, hi), group="elementwise", jax=jax_fn,
             extra={"argnums": diff} if len(diff) < nin else {})


# --- structural cases, spelled as users write them ----------------------------------------------
def _t(fn):
    """A PyTorch spelling, resolved when called (torch is imported lazily); ``spelling`` keeps
    ``fn(namespace, *xs)`` for JAX's namespace."""
    def call(*xs):
        import torch
        return fn(torch, *xs)
    call.spelling = fn
    return call


# JAX under the PyTorch names the cases use (a name JAX lacks raises, and the case has no JAX figure)
_JAX_SPECIAL_NAMES = {"nn.sigmoid": "nn.sigmoid", "nn.relu": "nn.relu", "nn.erf": "scipy.special.erf",
                      "nn.softplus": "nn.softplus", "nn.silu": "nn.silu", "nn.gelu": None,
                      "nn.log_sigmoid": "nn.log_sigmoid", "nn.gelu_tanh": None, "absolute": "abs",
                      "conjugate": "conj"}


def _jax_attr(path):
    """JAX's function for the table's name ``path`` (jnp's, jax.nn's or jax.scipy.special's)."""
    import jax
    import jax.numpy as jnp
    path = _JAX_SPECIAL_NAMES.get(path, path)
    if path is None:
        return None
    if path.startswith("nn.") or path.startswith("scipy."):
        return _attr_path(jax, path)
    return getattr(jnp, path, None)


class _JaxAsTorch:
    """``jax.numpy`` answering to the PyTorch names of the cases' spellings."""

    def __getattr__(self, name):
        import jax
        import jax.numpy as jnp
        aliases = {"cat": jnp.concatenate, "from_numpy": jnp.asarray, "tensor": jnp.asarray,
                   "softmax": lambda x, dim: jax.nn.softmax(x, axis=dim),
                   "log_softmax": lambda x, dim: jax.nn.log_softmax(x, axis=dim),
                   "logsumexp": lambda x, dims: jax.nn.logsumexp(x, axis=dims),
                   "nn": _JaxNN(), "linalg": _JaxLinalg()}
        if name in aliases:
            return aliases[name]
        return getattr(jnp, name)


class _JaxNN:
    @property
    def functional(self):
        import jax.numpy as jnp
        return types.SimpleNamespace(pad=lambda x, widths: jnp.pad(x, [tuple(widths)]))


class _JaxLinalg:
    def __getattr__(self, name):
        import jax.numpy as jnp
        return getattr(jnp.linalg, name)


def _in_jax(spelling):
    def call(*xs):
        return spelling(_JaxAsTorch(), *xs)
    return call


def _define():
    _elementwise_cases()
    M, V = MAT, VEC
    # products
    case("1-D @ 1-D", ["matmul"], {"16": [V, V], "4096": [MVEC, MVEC]}, lambda a, b: a @ b,
         torch=_t(lambda t, a, b: a @ b))
    case("matrix @ vector", ["matmul"], {"4x4@16": [(16, 16), V], "64x64": [MMAT, (64,)]},
         lambda a, b: a @ b, torch=_t(lambda t, a, b: a @ b))
    case("vector @ matrix", ["matmul"], {"4x4@16": [V, (16, 16)], "64x64": [(64,), MMAT]},
         lambda a, b: a @ b, torch=_t(lambda t, a, b: a @ b))
    case("matmul", ["matmul"], {"4x4": [M, M], "64x64": [MMAT, MMAT]}, lambda a, b: a @ b,
         torch=_t(lambda t, a, b: a @ b))
    case("batched matmul", ["matmul"], {"4x4": [(3,) + M, M], "64x64": [(3,) + MMAT, MMAT]},
         lambda a, b: a @ b, torch=_t(lambda t, a, b: a @ b))
    case("np.dot 1-D", ["dot"], {"16": [V, V], "4096": [MVEC, MVEC]}, lambda a, b: wnp.dot(a, b),
         np.dot, _t(lambda t, a, b: t.dot(a, b)))
    case("np.dot 2-D", ["dot"], {"4x4": [M, M], "64x64": [MMAT, MMAT]}, lambda a, b: wnp.dot(a, b),
         np.dot, _t(lambda t, a, b: a @ b))
    case("np.inner 1-D", ["tensordot"], {"16": [V, V], "4096": [MVEC, MVEC]}, lambda a, b: wnp.inner(a, b),
         np.inner, _t(lambda t, a, b: t.inner(a, b)))
    case("np.tensordot", ["tensordot"], {"4x4": [M, M], "64x64": [MMAT, MMAT]},
         lambda a, b: wnp.tensordot(a, b, 1), lambda a, b: np.tensordot(a, b, 1),
         _t(lambda t, a, b: t.tensordot(a, b, 1)))
    case("np.outer", ["outer"], {"16": [V, V], "4096": [(64,), (64,)]}, lambda a, b: wnp.outer(a, b),
         np.outer, _t(lambda t, a, b: t.outer(a, b)))
    case("np.vdot", ["dot"], {"4x4": [M, M], "64x64": [MMAT, MMAT]}, lambda a, b: wnp.vdot(a, b), np.vdot,
         _t(lambda t, a, b: t.vdot(a.reshape(-1), b.reshape(-1))))
    case("np.sum(u * v)", ["multiply", "sum"], {"16": [V, V], "4096": [MVEC, MVEC]},
         lambda a, b: wnp.sum(a * b), lambda a, b: np.sum(a * b), _t(lambda t, a, b: t.sum(a * b)))
    for subs, shapes in (("i,i->", {"16": [V, V], "4096": [MVEC, MVEC]}),
                         ("ij,jk->ik", {"4x4": [M, M], "64x64": [MMAT, MMAT]}),
                         ("ij->j", {"4x4": [M], "64x64": [MMAT]})):
        case(f"einsum '{subs}'", ["einsum"], shapes, lambda *xs, s=subs: wnp.einsum(s, *xs),
             lambda *xs, s=subs: np.einsum(s, *xs), _t(lambda t, *xs, s=subs: t.einsum(s, *xs)))
    # reductions
    for label, fn, tfn in (("sum", wnp.sum, lambda t, x: t.sum(x)), ("max", wnp.max, lambda t, x: t.amax(x)),
                           ("min", wnp.min, lambda t, x: t.amin(x)), ("mean", wnp.mean, lambda t, x: t.mean(x)),
                           ("prod", wnp.prod, lambda t, x: t.prod(x))):
        covers = {"sum": ["sum"], "max": ["max"], "min": ["min"], "mean": ["mean"], "prod": ["_prod"]}[label]
        case(f"{label} (full)", covers, {"16": [V], "4096": [MVEC]}, fn, getattr(np, label), _t(tfn))
        case(f"{label} (axis=1)", covers, {"4x4": [M], "64x64": [MMAT]}, lambda x, f=fn: f(x, axis=1),
             lambda x, f=getattr(np, label): f(x, axis=1), _t(lambda t, x, f=tfn: _torch_axis(t, f, x)))
    case("cumsum", ["_cumsum"], VECTORS, wnp.cumsum, np.cumsum, _t(lambda t, x: t.cumsum(x, 0)))
    case("cumprod", ["_cumprod"], VECTORS, wnp.cumprod, np.cumprod, _t(lambda t, x: t.cumprod(x, 0)))
    case("var", ["var"], VECTORS, wnp.var, np.var, _t(lambda t, x: t.var(x, correction=0)))
    # shapes
    case("reshape", ["reshape"], {"16": [V], "4096": [MVEC]}, lambda x: wnp.reshape(x, (4, -1)),
         lambda x: np.reshape(x, (4, -1)), _t(lambda t, x: x.reshape(4, -1)))
    case("transpose", ["transpose"], MATRICES, lambda x: x.T, lambda x: x.T, _t(lambda t, x: x.T))
    case("broadcast_to", ["broadcast_to"], {"16": [V], "4096": [(64,)]},
         lambda x: wnp.broadcast_to(x, (4,) + x.shape), lambda x: np.broadcast_to(x, (4,) + x.shape),
         _t(lambda t, x: x.expand((4,) + tuple(x.shape))))
    case("astype float64", ["astype"], VECTORS, lambda x: x.astype(np.float64), lambda x: x.astype(np.float64),
         _t(lambda t, x: x.double()))
    case("flip", ["flip"], VECTORS, wnp.flip, np.flip, _t(lambda t, x: t.flip(x, (0,))))
    case("roll", ["roll"], VECTORS, lambda x: wnp.roll(x, 1), lambda x: np.roll(x, 1),
         _t(lambda t, x: t.roll(x, 1)))
    case("diagonal", ["diagonal"], MATRICES, wnp.diagonal, np.diagonal, _t(lambda t, x: t.diagonal(x)))
    case("np.diag(a @ b) (rewritten)", ["diagonal_of_product"], {"4x4": [M, M], "64x64": [MMAT, MMAT]},
         lambda a, b: wnp.diag(a @ b), lambda a, b: np.diag(a @ b), _t(lambda t, a, b: t.diag(a @ b)))
    case("np.diag of vector", ["diagonal_embed"], {"16": [V], "4096": [(64,)]}, wnp.diag, np.diag,
         _t(lambda t, x: t.diag(x)))
    case("pad", ["pad_constant"], VECTORS, lambda x: wnp.pad(x, 1), lambda x: np.pad(x, 1),
         _t(lambda t, x: t.nn.functional.pad(x, (1, 1))))
    case("where", ["where"], {"16": [V, V], "4096": [MVEC, MVEC]}, lambda x, y: wnp.where(_MASK[x.shape], x, y),
         lambda x, y: np.where(_MASK[x.shape], x, y),
         _t(lambda t, x, y: t.where(t.from_numpy(_MASK[tuple(x.shape)]), x, y)))
    case("clip", ["clip"], VECTORS, lambda x: wnp.clip(x, 0.3, 0.7), lambda x: np.clip(x, 0.3, 0.7),
         _t(lambda t, x: t.clip(x, 0.3, 0.7)))
    case("x ** 3", ["power"], VECTORS, lambda x: x ** 3, lambda x: x ** 3, _t(lambda t, x: x ** 3))
    case("x ** 2", ["power"], VECTORS, lambda x: x ** 2, lambda x: x ** 2, _t(lambda t, x: x ** 2))
    case("x + y (broadcast row)", ["add"], {"4x4": [M, (4,)], "64x64": [MMAT, (64,)]}, lambda x, y: x + y,
         torch=_t(lambda t, x, y: x + y))
    case("x * scalar", ["multiply"], VECTORS, lambda x: x * 2.0, torch=_t(lambda t, x: x * 2.0))
    # stacking many small pieces
    for n in (2, 16):
        shapes = {"16x2" if n == 2 else "16": [V] * n, "4096": [(4096 // n,)] * n}
        case(f"concatenate of {n}", ["concatenate"], shapes, lambda *xs: wnp.concatenate(xs),
             lambda *xs: np.concatenate(xs), _t(lambda t, *xs: t.cat(xs)))
    case("stack of 16 0-d", ["stack"], {"0-d": [SCALAR] * 16, "4096": [(256,)] * 16}, lambda *xs: wnp.stack(xs),
         lambda *xs: np.stack(xs), _t(lambda t, *xs: t.stack(xs)))
    case("stack of 16 vectors", ["stack"], {"16": [V] * 16, "4096": [(256,)] * 16}, lambda *xs: wnp.stack(xs),
         lambda *xs: np.stack(xs), _t(lambda t, *xs: t.stack(xs)))
    case("nested lists + stack (4x4 of 0-d)", ["stack"], {"0-d": [SCALAR] * 16},
         lambda *xs: wnp.stack([wnp.stack(xs[i:i + 4]) for i in range(0, 16, 4)]),
         lambda *xs: np.stack([np.stack(xs[i:i + 4]) for i in range(0, 16, 4)]),
         _t(lambda t, *xs: t.stack([t.stack(xs[i:i + 4]) for i in range(0, 16, 4)])))
    # indexing
    for label, index in (("x[i]", 3), ("x[a:b]", slice(2, 10)), ("x[:, j]", (slice(None), 2)),
                         ("x[mask]", "mask"), ("x[int array]", "ints")):
        shapes = {"4x4": [M], "64x64": [MMAT]} if "," in label else {"16": [V], "4096": [MVEC]}
        case(f"getitem {label}", ["getitem"], shapes, lambda x, i=index: x[_index(i, x.shape)],
             torch=_t(lambda t, x, i=index: x[_torch_index(t, i, tuple(x.shape))]))
    # writes
    case("x.at[i].set(v)", ["scatter_set"], {"16": [V, SCALAR], "4096": [MVEC, SCALAR]},
         lambda x, v: x.at[3].set(v), lambda x, v: _np_set(x, 3, v),
         _t(lambda t, x, v: x.index_put((t.tensor([3]),), v.reshape(1))))
    case("x.at[i].multiply(v)", ["scatter_multiply"], {"16": [V, SCALAR], "4096": [MVEC, SCALAR]},
         lambda x, v: x.at[3].multiply(v), lambda x, v: _np_mul(x, 3, v), None)
    case("Buffer: 16 writes + freeze", ["buffer_snapshot"], {"0-d": [VEC, SCALAR]},
         _buffer_writes, _np_writes, None, notes="per write", extra={"per": 16})
    case("in-place y[i] = v (16 writes)", ["setitem"], {"0-d": [VEC, SCALAR]},
         _inplace_writes, _np_writes, _t(_torch_inplace), notes="per write", extra={"per": 16})
    # nn
    nnshapes = {"16": [V], "4096": [(64, 64)]}
    case("wnn.softmax", ["nn.softmax"], nnshapes, wnn.softmax, _np_softmax,
         _t(lambda t, x: t.softmax(x, -1)))
    case("wnn.log_softmax", ["nn.log_softmax"], nnshapes, wnn.log_softmax, _np_log_softmax,
         _t(lambda t, x: t.log_softmax(x, -1)))
    case("wnn.logsumexp", ["nn.logsumexp"], nnshapes, wnn.logsumexp, _np_logsumexp,
         _t(lambda t, x: t.logsumexp(x, tuple(range(x.ndim)))))
    case("wnn.logsumexp(b=)", ["nn.logsumexp_b"], {"16": [V, V]}, lambda x, b: wnn.logsumexp(x, b=b),
         lambda x, b: np.log(np.sum(b * np.exp(x))))
    case("softmax written out (rewritten)", ["nn.softmax_known"], nnshapes, lambda x: _written_softmax(wnp, x),
         _np_softmax, _t(_written_softmax_torch))   # PyTorch records the same four operations
    case("sigmoid written out (rewritten)", ["nn.sigmoid_known"], nnshapes, lambda x: 1 / (1 + wnp.exp(-x)),
         lambda x: 1 / (1 + np.exp(-x)), _t(lambda t, x: 1 / (1 + t.exp(-x))))   # PyTorch records the same three
    case("log(softmax(x)) (rewritten)", ["nn.log_softmax"], nnshapes, lambda x: wnp.log(wnn.softmax(x)),
         lambda x: np.log(_np_softmax(x)), _t(lambda t, x: t.log(t.softmax(x, -1))))
    case("softmax cross-entropy (labels)", ["nn.softmax_cross_entropy"], {"4x4": [M], "64x64": [MMAT]},
         lambda x: wnn.softmax_cross_entropy(x, _LABELS[x.shape[0]]),
         lambda x: _np_sce(x, _LABELS[x.shape[0]]),
         _t(lambda t, x: t.nn.functional.cross_entropy(x, t.from_numpy(_LABELS[x.shape[0]]))))
    case("softmax cross-entropy (dense)", ["nn.softmax_cross_entropy_dense"], {"4x4": [M, M], "64x64": [MMAT, MMAT]},
         lambda x, y: wnn.softmax_cross_entropy(x, y), lambda x, y: _np_sce_dense(x, y),
         _t(lambda t, x, y: t.nn.functional.cross_entropy(x, y)))
    case("binary cross-entropy with logits", ["nn.binary_cross_entropy_with_logits"], {"16": [V, V], "4096": [MVEC, MVEC]},
         wnn.binary_cross_entropy_with_logits, None,
         _t(lambda t, x, y: t.nn.functional.binary_cross_entropy_with_logits(x, y)))
    case("mse", ["nn.mse"], {"16": [V, V], "4096": [MVEC, MVEC]}, wnn.mse, lambda p, t: np.mean((p - t) ** 2),
         _t(lambda t, p, q: t.nn.functional.mse_loss(p, q)))
    case("normalize", ["nn.normalize"], {"4x4": [M], "64x64": [MMAT]}, wnn.normalize, None,
         _t(lambda t, x: t.nn.functional.normalize(x, dim=-1)))
    case("cosine_similarity", ["nn.cosine_similarity"], {"16": [V, V], "4096": [MVEC, MVEC]},
         wnn.cosine_similarity, None, _t(lambda t, x, y: t.nn.functional.cosine_similarity(x, y, dim=-1)))
    case("pairwise_cosine_softmax", ["nn.pairwise_cosine_softmax"], {"4x4": [(4, 3, 2), (4, 5, 2)]},
         wnn.pairwise_cosine_softmax, None)
    # linalg and fft (small matrices: the rule's own cost dominates)
    spd = lambda shapes: [_spd(shapes[0][0])]  # noqa: E731
    la = wnp.linalg
    for label, fn, npfn, covers, tfn, make in (
            ("inv", la.inv, np.linalg.inv, ["inv"], lambda t, x: t.linalg.inv(x), spd),
            ("det", la.det, np.linalg.det, ["det"], lambda t, x: t.linalg.det(x), spd),
            ("slogdet", la.slogdet, np.linalg.slogdet, ["slogdet"], lambda t, x: t.linalg.slogdet(x), spd),
            ("cholesky", la.cholesky, np.linalg.cholesky, ["cholesky"], lambda t, x: t.linalg.cholesky(x), spd),
            ("eigh", la.eigh, np.linalg.eigh, ["eigh"], lambda t, x: t.linalg.eigh(x), spd),
            ("eigvalsh", la.eigvalsh, np.linalg.eigvalsh, ["eigvalsh"], lambda t, x: t.linalg.eigvalsh(x), spd),
            ("eig", lambda x: la.eig(x)[0], lambda x: np.linalg.eig(x)[0], ["eig"], None, spd),
            ("eigvals", la.eigvals, np.linalg.eigvals, ["eigvals"], None, spd),
            ("svd", la.svd, np.linalg.svd, ["svd"], None, spd),
            ("svdvals", lambda x: la.svd(x, compute_uv=False), lambda x: np.linalg.svd(x, compute_uv=False),
             ["svdvals"], lambda t, x: t.linalg.svdvals(x), spd),
            ("qr", la.qr, np.linalg.qr, ["qr"], lambda t, x: t.linalg.qr(x), spd),
            ("pinv", la.pinv, np.linalg.pinv, ["pinv"], lambda t, x: t.linalg.pinv(x), spd),
            ("norm (2)", lambda x: la.norm(x, 2), lambda x: np.linalg.norm(x, 2), ["pnorm", "svdvals"],
             None, spd),
            ("norm (vector 3)", lambda x: la.norm(x.ravel(), 3), lambda x: np.linalg.norm(x.ravel(), 3),
             ["pnorm"], None, spd)):
        case(f"linalg.{label}", covers, {"4x4": [M]}, fn, npfn, _t(tfn) if tfn else None, make=make, group="linalg")
    case("linalg.solve", ["solve"], {"4x4": [M, M]}, la.solve, np.linalg.solve,
         _t(lambda t, a, b: t.linalg.solve(a, b)), make=lambda s: [_spd(4), RNG.random((4, 4), F32)], group="linalg")
    case("linalg.lstsq", ["lstsq"], {"4x4": [M, M]}, lambda a, b: la.lstsq(a, b)[0],
         lambda a, b: np.linalg.lstsq(a, b)[0], None, make=lambda s: [_spd(4), RNG.random((4, 4), F32)], group="linalg")
    ff = wnp.fft
    case("fft.fft", ["fft.c2c"], VECTORS, lambda x: ff.fft(x), np.fft.fft, None, group="fft")
    case("fft.rfft", ["fft.rfft"], VECTORS, lambda x: ff.rfft(x), np.fft.rfft, None, group="fft")
    case("fft.irfft", ["fft.irfft"], VECTORS, lambda x: ff.irfft(x), np.fft.irfft, None, group="fft")
    case("real/imag/conj/angle of complex", ["real", "imag", "conjugate", "angle"], VECTORS,
         lambda x: _complex_parts(wnp, x), lambda x: _complex_parts(np, x), None, group="complex")


NOT_MEASURED = {
    "select": "routes one output of a multiple-result primitive (measured with eigh, svd, qr, slogdet)",
    "jit_call": "a jitted function under grad/jvp/vmap: its cost is its programs' (benchmarks/jit.py)",
    "jit_forward": "a jitted function under grad: its cost is its programs' (benchmarks/jit.py)",
    "index_add": "the backward pass of getitem under an outer transform (measured with getitem)",
    "nn.log_softmax_known": "the rewrite of log(softmax(x)) (the case 'log(softmax(x)) (rewritten)')",
    "scipy.special.polygamma": "an order argument; same rule shape as digamma",
    "scipy.special.gamma": "overflows on the operands used here; same rule shape as gammaln",
    "scipy.special.rgamma": "same rule shape as gammaln",
    "scipy.linalg.solve_triangular": "scipy face, rules composed of solve_triangular itself",
    "scipy.linalg.solve_sylvester": "scipy face, large rule",
    "scipy.linalg.sqrtm": "scipy face, rule solves a Sylvester equation",
    "scipy.linalg.expm": "scipy face, rule is a block expm",
    "scipy.signal.convolve": "scipy face (a correlation per operand)",
    "scipy.integrate.odeint": "an ODE solve per call (benchmarks/odeint.py measures it)",
    **{f"scipy.special.{n}": "takes a keyword parameter (the derivative's order, the kind, the branch); "
       "same rule shape as jv" for n in ("ivp", "jvp", "kvp", "yvp", "h1vp", "h2vp", "spherical_bessel",
                                         "lambertw")},
    **{f"scipy.special.{n}": "an integer order or count (the generic elementwise case passes floats); same "
       "rule shape as jv" for n in _INTEGER_ARGUMENTS},
    "scipy.special.ndtri_exp": "defined for negative arguments only (the generic case's are positive)",
    "scipy.special.zeta": "the Hurwitz zeta in q needs x > 1 (the generic case's x are below 1)",
    "stop_gradient": "records nothing: it returns its argument's value without the level",
}


# --- helpers used by the cases -------------------------------------------------------------------
_MASK = {}
_LABELS = {}


def _prepare_constants(shapes_seen):
    for s in shapes_seen:
        _MASK.setdefault(s, RNG.random(s) > 0.5)
    for n in (4, 64):
        _LABELS[n] = RNG.integers(0, n, n)


def _torch_axis(t, f, x):
    name = f.__code__.co_names[-1] if f.__code__.co_names else ""
    return {"sum": lambda: t.sum(x, 1), "amax": lambda: t.amax(x, 1), "amin": lambda: t.amin(x, 1),
            "mean": lambda: t.mean(x, 1), "prod": lambda: t.prod(x, 1)}[name]()


def _index(i, shape):
    if i == "mask":
        return _MASK.setdefault(shape, RNG.random(shape) > 0.5)
    if i == "ints":
        return np.array([1, 3, 3, 7]) % shape[0]
    return i


def _torch_index(t, i, shape):
    if i == "mask":
        return t.from_numpy(_index(i, shape))
    if i == "ints":
        return t.from_numpy(_index(i, shape))
    return i


def _np_set(x, i, v):
    out = x.copy()
    out[i] = v
    return out


def _np_mul(x, i, v):
    out = x.copy()
    out[i] *= v
    return out


def _buffer_writes(x, v):
    buf = wg.Buffer.zeros(x.shape, x.dtype)
    for i in range(x.shape[0]):
        buf[i] = v
    return buf.freeze()


def _np_writes(x, v):
    out = np.zeros(x.shape, x.dtype)
    for i in range(x.shape[0]):
        out[i] = v
    return out


def _inplace_writes(x, v):
    y = x * 1.0
    for i in range(x.shape[0]):
        y[i] = v
    return y


def _torch_inplace(t, x, v):
    y = x * 1.0
    for i in range(x.shape[0]):
        y[i] = v
    return y


def _written_softmax(xp, x):
    """softmax as users write it: the rewrite records it as one softmax (rewrites.py)."""
    e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def _written_softmax_torch(t, x):
    """The same written-out softmax in PyTorch (``max`` along an axis is ``amax`` there)."""
    e = t.exp(x - t.amax(x, -1, keepdim=True))
    return e / t.sum(e, -1, keepdim=True)


def _np_softmax(x):
    return _written_softmax(np, x)


def _np_log_softmax(x):
    z = x - np.max(x, axis=-1, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def _np_logsumexp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


def _np_sce(x, labels):
    return -np.mean(_np_log_softmax(x)[np.arange(len(labels)), labels])


def _np_sce_dense(x, y):
    return -np.mean(np.sum(y * _np_log_softmax(x), axis=-1))


def _spd(n):
    a = RNG.random((n, n)).astype(F32)
    return (a @ a.T + n * np.eye(n, dtype=F32)).astype(F32)


def _complex_parts(ns, x):
    z = x * (1 + 0.5j)
    return ns.real(z) + ns.imag(z) + ns.real(ns.conj(z)) + ns.angle(z)


# --- measurement ---------------------------------------------------------------------------------
def _operands(c, label):
    shapes = [tuple(s) for s in c.shapes[label]]
    if c.make is not None:
        return [np.asarray(a, F32) for a in c.make(shapes)]
    lo, hi = c.domain
    return [np.asarray(RNG.uniform(lo, hi, s), F32) for s in shapes]


def _ones_like(out):
    return tree.map(lambda o: np.ones(np.shape(o), np.result_type(o)), out)


def _timer(fn, reps):
    """The median of ``reps`` calls of ``fn`` (seconds); ``fn`` returns its own elapsed time."""
    return statistics.median(fn() for _ in range(reps))


def measure(c, label, k, reps, torch=None, jax=None):
    args = _operands(c, label)
    per = c.extra.get("per", 1)

    def plain():
        t0 = time.process_time()
        for _ in range(k):
            c.plain(*args)
        return time.process_time() - t0

    argnums = c.extra.get("argnums")
    if argnums is None:
        def ops(*xs):
            return [c.traced(*xs) for _ in range(k)]
        diff_args = args
    else:   # the other operands are constants
        def ops(*xs):
            full = list(args)
            for i, x in zip(argnums, xs):
                full[i] = x
            return [c.traced(*full) for _ in range(k)]
        diff_args = [args[i] for i in argnums]

    def record_and_backward():
        t0 = time.process_time()
        outs, vjp_fn = wg.vjp(ops, *diff_args)
        t1 = time.process_time()
        cts = _ones_like(outs)
        t2 = time.process_time()
        vjp_fn(cts)
        t3 = time.process_time()
        return t1 - t0, t3 - t2

    record_and_backward()  # warm-up (and a check that the case runs)
    row = {"case": c.name, "size": label, "group": c.group, "covers": list(c.covers), "k": k * per}
    t_np, t_rec, t_bwd = [], [], []
    peers = {}   # "torch"/"jax" -> (run, [forward, record, backward] samples)
    if torch is not None and c.torch is not None:
        peers["torch"] = _torch_prepare(c, args, k, torch)
    if jax is not None and c.jax is not None:
        peers["jax"] = _jax_prepare(c, args, k, jax)
    peers = {name: (run, ([], [], [])) for name, run in peers.items() if run is not None}
    for _ in range(reps):   # interleaved: the same load hits every contestant
        t_np.append(plain())
        r, b = record_and_backward()
        t_rec.append(r)
        t_bwd.append(b)
        for run, samples in peers.values():
            for times, t in zip(samples, run()):
                times.append(t)
    n = k * per
    npf = statistics.median(t_np) / n
    row["numpy_us"] = npf * 1e6
    row["record_us"] = (statistics.median(t_rec) / n - npf) * 1e6
    row["backward_us"] = statistics.median(t_bwd) / n * 1e6
    row["overhead_us"] = row["record_us"] + row["backward_us"]
    for name, (_, (t_f, t_g, t_b)) in peers.items():
        f = statistics.median(t_f) / n
        row[f"{name}_forward_us"] = f * 1e6
        row[f"{name}_record_us"] = (statistics.median(t_g) / n - f) * 1e6
        row[f"{name}_backward_us"] = statistics.median(t_b) / n * 1e6
        row[f"{name}_overhead_us"] = row[f"{name}_record_us"] + row[f"{name}_backward_us"]
    return row


def _jax_prepare(c, args, k, jax):
    """JAX eager: ``jax.vjp`` of the ``k`` operations and its ``vjp`` function, no ``jit``."""
    import jax.numpy as jnp
    xs = [jnp.asarray(a) for a in args]

    def ops(*xs):
        return [c.jax(*xs) for _ in range(k)]

    def ready(tree):
        return jax.block_until_ready(tree)

    try:
        ready(ops(*xs))   # JAX compiles each operation for its shapes on first use: not timed
        outs, vjp_fn = jax.vjp(ops, *xs)
        ready(vjp_fn([jnp.ones_like(o) for o in outs]))
    except (LookupError, TypeError, AttributeError, ValueError, NotImplementedError):
        return None   # JAX has no such operation under this spelling

    def run():
        t0 = time.process_time()
        ready(ops(*xs))
        t1 = time.process_time()
        outs, vjp_fn = jax.vjp(ops, *xs)
        ready(outs)
        t2 = time.process_time()
        cts = ready([jnp.ones_like(o) for o in outs])
        t3 = time.process_time()
        ready(vjp_fn(cts))
        t4 = time.process_time()
        return t1 - t0, t2 - t1, t4 - t3

    return run


def _differentiable(results):
    """The tensors among ``results`` (a tuple result, such as eigh's, counts each of its tensors) that
    carry a gradient: every output wengert's side differentiates (slogdet's sign carries none)."""
    outs = []
    for r in results:
        for o in (r if isinstance(r, tuple) else (r,)):
            if o.requires_grad:
                outs.append(o)
    return outs


def _torch_prepare(c, args, k, torch):
    plain = [torch.from_numpy(a.copy()) for a in args]
    leaves = [torch.from_numpy(a.copy()).requires_grad_(True) for a in args]
    try:
        with torch.no_grad():
            c.torch(*plain)
        outs = _differentiable([c.torch(*leaves) for _ in range(2)])
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    except (LookupError, RuntimeError, TypeError, AttributeError, NotImplementedError):
        return None   # PyTorch has no such operation (or not differentiable there)

    def run():
        t0 = time.process_time()
        with torch.no_grad():
            for _ in range(k):
                c.torch(*plain)
        t1 = time.process_time()
        outs = _differentiable([c.torch(*leaves) for _ in range(k)])
        t2 = time.process_time()
        cts = [torch.ones_like(o) for o in outs]
        t3 = time.process_time()
        torch.autograd.backward(outs, cts)
        t4 = time.process_time()
        for x in leaves:
            x.grad = None
        return t1 - t0, t2 - t1, t4 - t3

    return run


def defined_cases():
    """Every case (defined on first use)."""
    if not CASES:
        _define()
    return CASES


def covered():
    names = set()
    for c in defined_cases():
        names.update(c.covers)
    return names


def uncovered():
    """Registered primitives with no case and no reason in NOT_MEASURED."""
    return sorted(n for n in PRIMITIVES if n not in covered() and n not in NOT_MEASURED)


# --- report --------------------------------------------------------------------------------------
def fmt(x):
    return "-" if x is None else f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"


def _per(a, b):
    return "-" if not b or b <= 0 else f"{a / b:.2f}x"


def table(rows, title):
    head = ["operation", "size", "numpy", "record", "backward", "wengert", "torch", "w/torch", "jax", "w/jax"]
    lines = []
    for r in rows:
        t, j = r.get("torch_overhead_us"), r.get("jax_overhead_us")
        lines.append([r["case"], r["size"], fmt(r["numpy_us"]), fmt(r["record_us"]), fmt(r["backward_us"]),
                      fmt(r["overhead_us"]), fmt(t), _per(r["overhead_us"], t), fmt(j), _per(r["overhead_us"], j)])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *lines)]
    out = [title, "", "  ".join(h.ljust(w) if i < 2 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))),
           "  ".join("-" * w for w in widths)]
    for line in lines:
        out.append("  ".join(str(x).ljust(w) if i < 2 else str(x).rjust(w) for i, (x, w) in enumerate(zip(line, widths))))
    return "\n".join(out)


def summary(rows):
    out = {}
    for label, part in (("small", [r for r in rows if r["size"] in SMALL_LABELS]),
                        ("medium", [r for r in rows if r["size"] not in SMALL_LABELS])):
        if not part:
            continue
        out[f"{label}_median_overhead_us"] = statistics.median(r["overhead_us"] for r in part)
        for peer in ("torch", "jax"):
            vs = [r for r in part if r.get(f"{peer}_overhead_us")]
            if vs:
                out[f"{label}_median_{peer}_overhead_us"] = statistics.median(r[f"{peer}_overhead_us"] for r in vs)
                out[f"{label}_rows_with_{peer}"] = len(vs)
                out[f"{label}_rows_slower_than_{peer}"] = sorted(
                    f"{r['case']} [{r['size']}]" for r in vs if r["overhead_us"] > r[f"{peer}_overhead_us"])
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="every case once with tiny counts (a smoke test)")
    p.add_argument("--size", choices=("small", "medium", "all"), default="all")
    p.add_argument("--only", default="", help="comma-separated substrings of case names")
    p.add_argument("--k", type=int, default=0, help="operations per recording (default: 200 small, 20 medium)")
    p.add_argument("--repeat", type=int, default=7, help="interleaved repeats; the median is reported")
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    p.add_argument("--jax", action="store_true", help="JAX eager beside PyTorch (jax.vjp op by op; slow to run)")
    p.add_argument("--json", default="", help="write every row as JSON here")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    defined_cases()
    missing = uncovered()
    if missing:
        raise SystemExit(f"primitives with no case and no reason in NOT_MEASURED: {missing}; add a case to "
                         "benchmarks/op_overhead.py (or a line to NOT_MEASURED saying why not)")
    torch = None
    if not args.no_torch and not args.quick:
        try:
            import torch
            torch.set_num_threads(1)
        except ImportError:
            torch = None
    jax = None
    if args.jax and not args.quick:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        try:
            import jax
        except ImportError:
            jax = None
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    shapes_seen = {tuple(s) for c in CASES for shapes in c.shapes.values() for s in shapes}
    _prepare_constants(shapes_seen)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for c in CASES:
            if only and not any(s in c.name for s in only):
                continue
            for label in c.shapes:
                small = label in SMALL_LABELS
                if args.size == "small" and not small or args.size == "medium" and small:
                    continue
                k = 2 if args.quick else args.k or (200 if small else 20)
                reps = 1 if args.quick else args.repeat
                rows.append(measure(c, label, k, reps, torch, jax))
    rows.sort(key=lambda r: -r["overhead_us"])
    title = ("per operation, µs: numpy = NumPy's forward; record = tracing's cost above it; backward = the "
             "backward pass;\nwengert = record + backward; torch, jax = PyTorch eager's and JAX eager's record + "
             "backward above their own forward (worst first)")
    summ = summary(rows)
    for label, part in (("small operands (0-d, 16-vectors, 4x4)", [r for r in rows if r["size"] in SMALL_LABELS]),
                        ("medium operands (4096-vectors, 64x64)", [r for r in rows if r["size"] not in SMALL_LABELS])):
        if part:
            print(table(part, f"{label}: {title}"))
            print()
    for key, value in summ.items():
        print(f"{key}: {fmt(value) if isinstance(value, float) else value}")
    if args.json:
        env = {"numpy": np.__version__, "torch": getattr(torch, "__version__", None),
               "jax": getattr(jax, "__version__", None), "load_average": os.getloadavg(),
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        Path(args.json).write_text(json.dumps({"environment": env, "rows": rows, "summary": summ,
                                               "not_measured": NOT_MEASURED}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

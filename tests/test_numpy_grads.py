"""The systematic gradient test: a coverage list of ``wengert.numpy``.

Every differentiable function ``wengert.numpy`` exposes is listed in a table below with the
shapes and domain of its arguments; each row is checked against central finite differences
(``check_grads``, in float64). A subset is checked to second order. The remaining tests pin down
the behaviour that finite differences cannot: NumPy's own functions on traced values, functions
without a derivative, exact agreement with NumPy on plain arrays, ties in max/min, and dtypes.

To add a primitive, add a row to the table of its family (see docs/architecture.md).
"""
from __future__ import annotations

import zlib

import warnings

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.primitives.contractions import _MATMUL_MAX_ITEMS, _blas_items, _contraction


# --- arguments: a shape and a domain ------------------------------------------------------------
class Arg:
    """A random float64 argument: ``shape`` and the domain its values are drawn from."""

    DOMAINS = {
        "real": lambda rng, s: rng.standard_normal(s),
        "pos": lambda rng, s: rng.uniform(0.5, 2.0, s),           # log, sqrt, base of power
        "unit": lambda rng, s: rng.uniform(-0.9, 0.9, s),         # arcsin, arccos, arctanh, tan
        "gt1": lambda rng, s: rng.uniform(1.2, 3.0, s),           # arccosh
        "nonzero": lambda rng, s: rng.choice([-1.0, 1.0], s) * rng.uniform(0.3, 2.0, s),  # kinks at 0
        "near1": lambda rng, s: rng.choice([-1.0, 1.0], s) * rng.uniform(0.6, 1.4, s),    # prod, cumprod
        "big": lambda rng, s: rng.uniform(0.1, 6.0, s),           # dividend of remainder / fmod
        # distinct values at least 0.2 apart, in random order: no ties for max / min / sort
        "distinct": lambda rng, s: (rng.permutation(int(np.prod(s, dtype=int))) * 0.25
                                    + rng.uniform(0, 0.05, s).ravel() - 1.0).reshape(s),
    }

    def __init__(self, domain, *shape, zeros=()):
        self.domain, self.shape, self.zeros = domain, shape, zeros

    def draw(self, rng):
        x = np.asarray(self.DOMAINS[self.domain](rng, self.shape), dtype=np.float64)
        for index in self.zeros:  # exact zeros at these positions (prod, cumprod)
            x[index] = 0.0
        return x

    def __repr__(self):
        return f"{self.domain}{self.shape}"


def real(*s): return Arg("real", *s)
def pos(*s): return Arg("pos", *s)
def unit(*s): return Arg("unit", *s)
def gt1(*s): return Arg("gt1", *s)
def nonzero(*s): return Arg("nonzero", *s)
def near1(*s): return Arg("near1", *s)
def big(*s): return Arg("big", *s)
def distinct(*s): return Arg("distinct", *s)


def rng_for(name):
    """A fixed generator per test id, so a case's inputs do not depend on which tests run."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def draw(name, specs):
    rng = rng_for(name)
    return tuple(spec.draw(rng) if isinstance(spec, Arg) else spec for spec in specs)


CASES = {}  # id -> (function, argument specs); filled by the family tables below
SECOND_ORDER = []  # ids also checked to second order


def case(name, fn, *specs, order2=False):
    assert name not in CASES, f"duplicate case id {name}"
    CASES[name] = (fn, specs)
    if order2:
        SECOND_ORDER.append(name)


# --- elementwise --------------------------------------------------------------------------------
UNARY = [  # name, domain
    ("negative", "real"), ("positive", "real"), ("square", "real"), ("sqrt", "pos"), ("cbrt", "nonzero"),
    ("reciprocal", "nonzero"), ("exp", "real"), ("exp2", "real"), ("expm1", "real"), ("log", "pos"),
    ("log2", "pos"), ("log10", "pos"), ("log1p", "pos"), ("sin", "real"), ("cos", "real"), ("tan", "unit"),
    ("arcsin", "unit"), ("arccos", "unit"), ("arctan", "real"), ("sinh", "real"), ("cosh", "real"),
    ("tanh", "real"), ("arcsinh", "real"), ("arccosh", "gt1"), ("arctanh", "unit"), ("deg2rad", "real"),
    ("rad2deg", "real"), ("radians", "real"), ("degrees", "real"), ("absolute", "nonzero"),
    ("abs", "nonzero"), ("fabs", "nonzero"),
    ("asin", "unit"), ("acos", "unit"), ("atan", "real"), ("asinh", "real"), ("acosh", "gt1"), ("atanh", "unit"),
    # on real arrays (complex values: tests/test_complex.py)
    ("real", "real"), ("imag", "real"), ("conj", "real"), ("conjugate", "real"), ("angle", "nonzero"),
]
UNARY_SHAPES = [(), (5,), (2, 3), (1, 4)]
UNARY_ORDER2 = {"sqrt", "cbrt", "reciprocal", "exp", "log", "log1p", "sin", "tan", "arcsin", "arccos",
                "tanh", "arccosh", "arctanh", "absolute"}

for _name, _domain in UNARY:
    for _shape in UNARY_SHAPES:
        case(f"{_name}{_shape}", getattr(wnp, _name), Arg(_domain, *_shape),
             order2=_name in UNARY_ORDER2 and _shape == (2, 3))

BINARY = [  # name, domain of x, domain of y
    ("add", "real", "real"), ("subtract", "real", "real"), ("multiply", "real", "real"),
    ("divide", "real", "nonzero"), ("true_divide", "real", "nonzero"), ("power", "pos", "real"),
    ("pow", "pos", "real"), ("float_power", "pos", "real"), ("remainder", "big", "pos"), ("mod", "big", "pos"),
    ("fmod", "big", "pos"), ("logaddexp", "real", "real"), ("logaddexp2", "real", "real"),
    ("arctan2", "real", "nonzero"), ("atan2", "real", "nonzero"), ("hypot", "nonzero", "nonzero"),
    ("maximum", "real", "real"), ("minimum", "real", "real"), ("fmax", "real", "real"), ("fmin", "real", "real"),
]
# equal shapes, a trailing 1-d operand, size-1 axes on both sides, a 0-d operand on either side
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((2, 3), ()), ((1, 4), (3, 1))]
BINARY_ORDER2 = {"multiply", "divide", "power", "float_power", "logaddexp", "arctan2", "hypot", "maximum"}

for _name, _dx, _dy in BINARY:
    for _sx, _sy in BINARY_SHAPES:
        case(f"{_name}{_sx}{_sy}", getattr(wnp, _name), Arg(_dx, *_sx), Arg(_dy, *_sy),
             order2=_name in BINARY_ORDER2 and _sy == (4,))

_MASK = np.array([[True, False, True, True], [False, False, True, False], [True, True, False, True]])
case("power(x, 3) negative base", lambda x: wnp.power(x, 3), real(3, 4), order2=True)
case("power(x, 0.5)", lambda x: wnp.power(x, 0.5), pos(3, 4))
case("power(x, int array)", lambda x: wnp.power(x, np.array([1, 2, 3, 4])), real(3, 4))
case("power(2, y)", lambda y: wnp.power(2.0, y), real(3, 4))
case("power(x, y) y=0", lambda x: wnp.power(x, np.zeros(4)), real(3, 4))
case("power(0, arange)", lambda x: wnp.power(x, np.arange(4)), Arg("real", 3, 4, zeros=[(0, 0), (1, 1), (2, 2), (2, 3)]),
     order2=True)
case("x ** 0.0 and x ** 1.0 at 0", lambda x: x ** 0.0 + x ** 1.0, Arg("real", 3, zeros=[1]), order2=True)
case("float_power(0, arange)", lambda x: wnp.float_power(x, np.arange(3.0)), Arg("real", 2, 3, zeros=[(0, 0), (1, 1)]),
     order2=True)
case("float_power(x, 2)", lambda x: wnp.float_power(x, 2), real(2, 3))
case("divide by constant", lambda x: wnp.divide(x, 3.0), real(2, 3))
case("divide constant by", lambda y: wnp.divide(3.0, y), nonzero(2, 3))
case("where(mask, x, y)", lambda x, y: wnp.where(_MASK, x, y), real(3, 4), real(4,), order2=True)
case("where(mask, x, 0)", lambda x: wnp.where(_MASK, x, 0.0), real(3, 4))
case("where(mask, 1, y)", lambda y: wnp.where(_MASK, 1.0, y), real(3, 1))
case("where(traced cond)", lambda x: wnp.where(x > 0, x, x * x), nonzero(3, 4))
case("where(mask, 0-d, y)", lambda x, y: wnp.where(_MASK, x, y), real(), real(3, 1))
case("clip(x, lo, hi)", lambda x: wnp.clip(x, -0.5, 0.5), real(3, 4), order2=True)
case("clip(x, None, hi)", lambda x: wnp.clip(x, None, 0.3), real(3, 4))
case("clip(x, lo, None)", lambda x: wnp.clip(x, -0.3, None), real(3, 4))
case("clip(x, min=, max=)", lambda x: wnp.clip(x, min=-0.5, max=0.5), real(3, 4))
case("clip traced bounds", lambda x, lo, hi: wnp.clip(x, lo, hi), real(3, 4), real(4), pos())
case("clip array bounds", lambda x: wnp.clip(x, np.array([-1.0, -0.5, 0.0, 0.2]), 1.0), real(3, 4))


# --- reductions -----------------------------------------------------------------------------------
AXES = [None, 0, -1, 1, (0, 2), (-1, 0), ()]
REDUCTIONS = [("sum", "real"), ("mean", "real"), ("prod", "near1"), ("max", "distinct"), ("min", "distinct"),
              ("amax", "distinct"), ("amin", "distinct"), ("var", "real"), ("std", "real")]
REDUCTION_ORDER2 = {"sum", "prod", "max", "var", "std"}

for _name, _domain in REDUCTIONS:
    for _axis in AXES:
        if _name == "std" and _axis == ():
            continue
        for _keep in (False, True):
            case(f"{_name}(axis={_axis}, keepdims={_keep})",
                 (lambda f, a, k: lambda x: f(x, axis=a, keepdims=k))(getattr(wnp, _name), _axis, _keep),
                 Arg(_domain, 2, 3, 4), order2=_name in REDUCTION_ORDER2 and _axis == (0, 2) and _keep)
    if _name == "std":
        continue  # std over no elements or one is identically 0: sqrt is not differentiable there
    case(f"{_name} of 0-d", getattr(wnp, _name), Arg(_domain if _domain != "distinct" else "real"))
    case(f"{_name} of size-1 axes", lambda x, f=getattr(wnp, _name): f(x, axis=1), Arg(_domain, 3, 1))

case("prod with one zero", lambda x: wnp.prod(x, axis=1), Arg("near1", 3, 4, zeros=[(0, 1), (2, 3)]), order2=True)
case("prod with two zeros", wnp.prod, Arg("near1", 2, 3, zeros=[(0, 1), (1, 2)]), order2=True)
case("prod with two zeros in a lane", lambda x: wnp.prod(x, axis=0), Arg("near1", 4, 2, zeros=[(0, 1), (2, 1)]),
     order2=True)
case("var(ddof=1)", lambda x: wnp.var(x, axis=0, ddof=1), real(3, 4))
case("std(ddof=1)", lambda x: wnp.std(x, axis=1, ddof=1, keepdims=True), real(3, 4))
case("sum(dtype=)", lambda x: wnp.sum(x, axis=0, dtype=np.float64), real(3, 4))
case("mean(dtype=)", lambda x: wnp.mean(x, axis=1, dtype=np.float64), real(3, 4))
for _name, _domain in [("cumsum", "real"), ("cumprod", "near1")]:
    for _axis in (None, 0, 1, -1):
        case(f"{_name}(axis={_axis})", (lambda f, a: lambda x: f(x, axis=a))(getattr(wnp, _name), _axis),
             Arg(_domain, 3, 4), order2=_axis == 1)
    case(f"{_name} 1-d", getattr(wnp, _name), Arg(_domain, 5))
case("cumprod with zeros", lambda x: wnp.cumprod(x, axis=1), Arg("near1", 3, 4, zeros=[(0, 1), (0, 3), (1, 2)]),
     order2=True)
case("cumprod with zeros 3-d", lambda x: wnp.cumprod(x, axis=1), Arg("near1", 2, 3, 2, zeros=[(0, 0, 1), (1, 1, 0)]),
     order2=True)
case("cumprod all zeros", lambda x: wnp.cumprod(x, axis=0), Arg("near1", 3, 2, zeros=[0, 1, 2]), order2=True)
case("average", wnp.average, real(3, 4))
case("average(axis=1)", lambda x: wnp.average(x, axis=1), real(3, 4))
case("average(axis=-1, keepdims)", lambda x: wnp.average(x, axis=-1, keepdims=True), real(3, 4))
case("average(weights)", lambda x, w: wnp.average(x, weights=w), real(3, 4), pos(3, 4), order2=True)
case("average(weights, axis=0)", lambda x, w: wnp.average(x, axis=0, weights=w), real(3, 4), pos(3, 4))
case("average(1-d weights, axis=1)", lambda x, w: wnp.average(x, axis=1, weights=w), real(3, 4), pos(4))
case("average(returned)", lambda x, w: wnp.average(x, axis=0, weights=w, returned=True), real(3, 4), pos(3))
case("average(constant weights)", lambda x: wnp.average(x, axis=1, weights=np.array([1.0, 2, 3, 4])), real(3, 4))


# --- products and contractions -----------------------------------------------------------------
case("dot 1-d 1-d", wnp.dot, real(3), real(3))
case("dot 2-d 1-d", wnp.dot, real(2, 3), real(3))
case("dot 1-d 2-d", wnp.dot, real(3), real(3, 4))
case("dot 2-d 2-d", wnp.dot, real(2, 3), real(3, 4), order2=True)
case("dot 3-d 2-d", wnp.dot, real(2, 3, 4), real(4, 2))
case("dot 2-d 3-d", wnp.dot, real(2, 3), real(2, 3, 4))
case("dot 3-d 1-d", wnp.dot, real(2, 3, 4), real(4))
case("dot 1-d 3-d", wnp.dot, real(3), real(2, 3, 4))
case("dot 0-d", wnp.dot, real(), real(2, 3))
case("dot 0-d right", wnp.dot, real(2, 3), real())
case("dot with constant", lambda a: wnp.dot(a, np.arange(12.0).reshape(3, 4)), real(2, 3))
case("vdot", wnp.vdot, real(3, 4), real(3, 4))
case("vdot 1-d 2-d", wnp.vdot, real(4), real(2, 2))
case("inner 1-d", wnp.inner, real(3), real(3))
case("inner 2-d", wnp.inner, real(2, 3), real(4, 3), order2=True)
case("inner 3-d 1-d", wnp.inner, real(2, 3, 4), real(4))
case("inner 0-d", wnp.inner, real(), real(3))
case("inner 2-d 3-d", wnp.inner, real(2, 3), real(2, 4, 3))
case("outer", wnp.outer, real(3), real(4), order2=True)
case("outer flattens", wnp.outer, real(2, 2), real(3))
case("outer 0-d", wnp.outer, real(), real(3))
case("matmul 2-d", wnp.matmul, real(2, 3), real(3, 4), order2=True)
case("matmul 1-d @ 2-d", wnp.matmul, real(3), real(3, 4))
case("matmul 2-d @ 1-d", wnp.matmul, real(2, 3), real(3))
case("matmul 1-d @ 1-d", wnp.matmul, real(3), real(3))
case("matmul batched", wnp.matmul, real(2, 2, 3), real(2, 3, 4), order2=True)
case("matmul broadcast batch", wnp.matmul, real(2, 1, 2, 3), real(3, 3, 2))
case("matmul 2-d @ batch", wnp.matmul, real(2, 3), real(4, 3, 2))
case("matmul batch @ 1-d", wnp.matmul, real(4, 2, 3), real(3))
case("matmul 1-d @ batch", wnp.matmul, real(3), real(2, 3, 4))
case("matmul inner dim 1", wnp.matmul, real(3, 1), real(1, 4))
case("@ operator", lambda a, b: a @ b, real(2, 3), real(3, 4))
case("@ operator, constant left", lambda b: np.arange(6.0).reshape(2, 3) @ b, real(3, 4))
case("tensordot axes=2", wnp.tensordot, real(2, 3, 4), real(3, 4, 2), order2=True)
case("tensordot axes=1", lambda a, b: wnp.tensordot(a, b, axes=1), real(2, 3), real(3, 4))
case("tensordot axes=0", lambda a, b: wnp.tensordot(a, b, axes=0), real(2, 3), real(4))
case("tensordot axes pairs", lambda a, b: wnp.tensordot(a, b, axes=([1, 0], [0, 1])), real(2, 3, 4), real(3, 2))
case("tensordot negative axes", lambda a, b: wnp.tensordot(a, b, axes=([-1], [0])), real(2, 3), real(3, 4))
case("tensordot crossed axes", lambda a, b: wnp.tensordot(a, b, axes=([0, 2], [2, 0])), real(2, 3, 4), real(4, 3, 2))
case("tensordot int axes", lambda a, b: wnp.tensordot(a, b, axes=(1, 0)), real(2, 3), real(3, 4))
EINSUMS = [  # subscripts, operand shapes
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij->j", [(3, 4)]), ("ij->", [(3, 4)]), ("ij->ji", [(3, 4)]),
    ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("iij->ij", [(3, 3, 2)]), ("iji->j", [(3, 2, 3)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]), ("i,j->ij", [(3,), (4,)]), ("ij,jk", [(2, 3), (3, 4)]),
    ("ij,k->i", [(2, 3), (4,)]), ("ij,j->i", [(3, 4), (4,)]), ("i,i->", [(4,), (4,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]), ("...ij,jk->...ik", [(2, 2, 3), (3, 4)]),
    ("i...->...", [(3, 2, 2)]), ("...i,...i->...", [(2, 3), (2, 3)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("i,i,i->", [(4,), (4,), (4,)]), ("ii,i->i", [(3, 3), (3,)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("ij,kl->ijkl", [(2, 2), (2, 3)]),
    # above the small-contraction size, batched contractions are lowered to np.matmul
    ("wik,wjk->ijk", [(24, 8, 8), (24, 6, 8)]), ("kaib,kbj->jkia", [(3, 4, 5, 24), (3, 24, 6)]),
]
EINSUM_ORDER2 = {"ij,jk->ik", "ii->i", "...ij,...jk->...ik", "ij,jk,kl->il", "ij,k->i", "wik,wjk->ijk"}
for _subs, _shapes in EINSUMS:
    case(f"einsum {_subs}", (lambda s: lambda *ops: wnp.einsum(s, *ops))(_subs), *[real(*s) for s in _shapes],
         order2=_subs in EINSUM_ORDER2)
case("einsum ...: size-1 broadcast", lambda a, b: wnp.einsum("...ij,...jk->...ik", a, b), real(1, 2, 3), real(2, 3, 4),
     order2=True)
case("einsum ...: fewer dims", lambda a, b: wnp.einsum("...ij,...jk->...ik", a, b), real(2, 3), real(2, 3, 4))
case("einsum size-1 index broadcast", lambda a, b: wnp.einsum("...i,...i->...", a, b), real(3, 1), real(4))
case("einsum size-1 named index", lambda a, b: wnp.einsum("ij,ij->j", a, b), real(1, 3), real(4, 3))
case("einsum with constant operand", lambda a: wnp.einsum("ij,jk->ik", a, np.ones((3, 2))), real(2, 3))
case("einsum one operand traced twice", lambda a: wnp.einsum("ij,ij->", a, a), real(2, 3))
case("trace", wnp.trace, real(3, 3))
case("trace offset", lambda x: wnp.trace(x, offset=1), real(3, 4))
case("trace negative offset", lambda x: wnp.trace(x, offset=-1), real(4, 3))
case("trace batched axes", lambda x: wnp.trace(x, axis1=1, axis2=2), real(2, 3, 3), order2=True)
case("kron 2-d", wnp.kron, real(2, 2), real(2, 3), order2=True)
case("kron 1-d", wnp.kron, real(3), real(2))
case("kron mixed ndim", wnp.kron, real(2), real(2, 2))
case("kron 0-d", wnp.kron, real(), real(2, 3))


# --- shape and assembly ----------------------------------------------------------------------------
_IDX = np.array([2, 0, 2, 1])
case("reshape", lambda x: wnp.reshape(x, (3, 4)), real(2, 6), order2=True)
case("reshape -1", lambda x: wnp.reshape(x, (-1, 2)), real(2, 3))
case("reshape int", lambda x: wnp.reshape(x, 6), real(2, 3))
case("reshape 0-d", lambda x: wnp.reshape(x, (1, 1)), real())
case("ravel", wnp.ravel, real(2, 3))
case("transpose", wnp.transpose, real(2, 3, 4))
case("transpose axes", lambda x: wnp.transpose(x, (1, 2, 0)), real(2, 3, 4), order2=True)
case("transpose negative axes", lambda x: wnp.transpose(x, (-1, 0, 1)), real(2, 3, 4))
case("moveaxis", lambda x: wnp.moveaxis(x, 0, -1), real(2, 3, 4))
case("moveaxis lists", lambda x: wnp.moveaxis(x, [0, 1], [2, 0]), real(2, 3, 4))
case("swapaxes", lambda x: wnp.swapaxes(x, 0, 2), real(2, 3, 4))
case("expand_dims", lambda x: wnp.expand_dims(x, 1), real(2, 3))
case("expand_dims -1", lambda x: wnp.expand_dims(x, -1), real(2, 3))
case("expand_dims tuple", lambda x: wnp.expand_dims(x, (0, 3)), real(2, 3))
case("squeeze", wnp.squeeze, real(1, 3, 1))
case("squeeze axis", lambda x: wnp.squeeze(x, axis=-1), real(1, 3, 1))
case("broadcast_to", lambda x: wnp.broadcast_to(x, (2, 3, 4)), real(3, 1), order2=True)
case("broadcast_to int", lambda x: wnp.broadcast_to(x, 4), real(1))
case("broadcast_arrays", wnp.broadcast_arrays, real(3, 1), real(4))
case("concatenate", lambda x, y: wnp.concatenate([x, y]), real(2, 3), real(1, 3), order2=True)
case("concatenate axis=1", lambda x, y: wnp.concatenate((x, y, x), axis=1), real(2, 3), real(2, 1))
case("concatenate axis=-1", lambda x, y: wnp.concatenate([x, y], axis=-1), real(2, 2), real(2, 3))
case("concatenate axis=None", lambda x, y: wnp.concatenate([x, y], axis=None), real(2, 2), real(3))
case("concatenate constant", lambda x: wnp.concatenate([np.ones((1, 3)), x]), real(2, 3))
case("stack", lambda x, y: wnp.stack([x, y]), real(2, 3), real(2, 3))
case("stack axis=-1", lambda x, y: wnp.stack([x, y, x], axis=-1), real(2, 3), real(2, 3))
case("stack 0-d", lambda x, y: wnp.stack([x, y]), real(), real())
case("hstack 1-d", lambda x, y: wnp.hstack([x, y]), real(2), real(3))
case("hstack 2-d", lambda x, y: wnp.hstack([x, y]), real(2, 1), real(2, 3))
case("hstack 0-d", lambda x, y: wnp.hstack([x, y]), real(), real(2))
case("vstack 1-d", lambda x, y: wnp.vstack([x, y]), real(3), real(3))
case("vstack 2-d", lambda x, y: wnp.vstack([x, y]), real(1, 3), real(2, 3))
case("row_stack", lambda x, y: wnp.row_stack([x, y]), real(3), real(2, 3))
case("dstack", lambda x, y: wnp.dstack([x, y]), real(2, 3), real(2, 3))
case("dstack 1-d", lambda x, y: wnp.dstack([x, y]), real(3), real(3))
case("column_stack", lambda x, y: wnp.column_stack([x, y]), real(3), real(3, 2))
case("split", lambda x: wnp.split(x, 2), real(4, 3))
case("split indices", lambda x: wnp.split(x, [1, 3], axis=1), real(2, 4), order2=True)
case("split negative axis", lambda x: wnp.split(x, 3, axis=-1), real(2, 3))
case("split negative index", lambda x: wnp.split(x, [-1], axis=1), real(3, 4))
case("array_split past the end", lambda x: wnp.array_split(x, [1, 10]), real(3, 4))
case("array_split uneven", lambda x: wnp.array_split(x, 3), real(5, 2))
case("array_split more than size", lambda x: wnp.array_split(x, 4, axis=1), real(2, 3))
case("hsplit", lambda x: wnp.hsplit(x, 2), real(3, 4))
case("vsplit", lambda x: wnp.vsplit(x, [1]), real(3, 4))
case("tile int", lambda x: wnp.tile(x, 2), real(2, 3))
case("tile tuple", lambda x: wnp.tile(x, (2, 1)), real(2, 3), order2=True)
case("tile more reps than dims", lambda x: wnp.tile(x, (2, 1, 2)), real(3))
case("tile 0-d", lambda x: wnp.tile(x, 3), real())
case("repeat scalar", lambda x: wnp.repeat(x, 2), real(2, 3))
case("repeat scalar axis", lambda x: wnp.repeat(x, 3, axis=1), real(2, 3), order2=True)
case("repeat negative axis", lambda x: wnp.repeat(x, 2, axis=-2), real(2, 3))
case("repeat array", lambda x: wnp.repeat(x, [1, 0, 3], axis=1), real(2, 3), order2=True)
case("repeat array flat", lambda x: wnp.repeat(x, [2, 1, 1, 0, 1, 3]), real(2, 3))
case("repeat size-1 array", lambda x: wnp.repeat(x, np.array([2]), axis=0), real(2, 3))
case("repeat 0-d", lambda x: wnp.repeat(x, 3), real())
case("pad constant", lambda x: wnp.pad(x, 1), real(2, 3), order2=True)
case("pad constant per axis", lambda x: wnp.pad(x, ((1, 0), (0, 2))), real(2, 3))
case("pad constant value", lambda x: wnp.pad(x, ((0, 1), (2, 1)), constant_values=1.5), real(2, 3))
case("pad edge", lambda x: wnp.pad(x, ((1, 2), (2, 0)), mode="edge"), real(2, 3), order2=True)
case("pad reflect", lambda x: wnp.pad(x, 2, mode="reflect"), real(3, 4))
case("pad symmetric", lambda x: wnp.pad(x, ((1, 1), (0, 2)), mode="symmetric"), real(3, 4))
case("pad wrap", lambda x: wnp.pad(x, ((1, 2), (3, 0)), mode="wrap"), real(3, 4))
case("pad 1-d", lambda x: wnp.pad(x, (2, 1), mode="reflect"), real(4))
case("pad reflect wider than axis", lambda x: wnp.pad(x, ((5, 4), (0, 0)), mode="reflect"), real(3, 2))
case("pad maximum", lambda x: wnp.pad(x, ((1, 2), (2, 1)), mode="maximum"), distinct(3, 4), order2=True)
case("pad minimum", lambda x: wnp.pad(x, 1, mode="minimum"), distinct(3, 4))
case("pad mean", lambda x: wnp.pad(x, ((0, 2), (1, 0)), mode="mean"), real(3, 4))
case("flip", wnp.flip, real(2, 3))
case("flip axis", lambda x: wnp.flip(x, 1), real(2, 3, 2))
case("flip axes", lambda x: wnp.flip(x, (0, -1)), real(2, 3, 2))
case("fliplr", wnp.fliplr, real(2, 3))
case("flipud", wnp.flipud, real(2, 3))
case("roll flat", lambda x: wnp.roll(x, 2), real(2, 3), order2=True)
case("roll axis", lambda x: wnp.roll(x, -1, axis=1), real(2, 3))
case("roll axes", lambda x: wnp.roll(x, (1, 2), axis=(0, 1)), real(2, 3))
case("diag of 1-d", wnp.diag, real(3), order2=True)
case("diag of 1-d k=1", lambda v: wnp.diag(v, 1), real(3))
case("diag of 1-d k=-2", lambda v: wnp.diag(v, k=-2), real(2))
case("diag of 2-d", wnp.diag, real(3, 3))
case("diag of 2-d k=1", lambda x: wnp.diag(x, 1), real(3, 4))
case("diag of 2-d k=-1", lambda x: wnp.diag(x, -1), real(4, 3))
case("diagonal", wnp.diagonal, real(3, 4))
case("diagonal axes", lambda x: wnp.diagonal(x, offset=1, axis1=2, axis2=0), real(3, 2, 4))
case("diagonal negative axes", lambda x: wnp.diagonal(x, axis1=-1, axis2=-2), real(2, 3, 3))
case("triu", wnp.triu, real(3, 4), order2=True)
case("triu k=1", lambda x: wnp.triu(x, 1), real(4, 3))
case("tril", wnp.tril, real(3, 4))
case("tril k=-1", lambda x: wnp.tril(x, k=-1), real(2, 3, 3))
case("take flat", lambda x: wnp.take(x, _IDX), real(2, 3))
case("take axis", lambda x: wnp.take(x, _IDX, axis=1), real(2, 3), order2=True)
case("take negative axis", lambda x: wnp.take(x, [[0, 1], [1, 1]], axis=-2), real(2, 3))
case("take scalar index", lambda x: wnp.take(x, 1, axis=0), real(2, 3))
case("take_along_axis", lambda x: wnp.take_along_axis(x, np.array([[0, 2, 2], [1, 1, 0]]), axis=1), real(2, 3))
case("take_along_axis axis=0", lambda x: wnp.take_along_axis(x, np.array([[1, 0, 1]]), axis=0), real(2, 3))
case("take_along_axis None", lambda x: wnp.take_along_axis(x, np.array([5, 0, 0]), axis=None), real(2, 3))
case("sort", wnp.sort, distinct(3, 4), order2=True)
case("sort axis=0", lambda x: wnp.sort(x, axis=0), distinct(3, 4))
case("sort axis=None", lambda x: wnp.sort(x, axis=None), distinct(3, 4))
case("sort 1-d", wnp.sort, distinct(5))
# values that move smoothly with one argument (taken off the non-differentiable list: test_nondiff_sweep.py)
case("unique", wnp.unique, distinct(5), order2=True)
case("unique axis=1", lambda x: wnp.unique(x, axis=1), distinct(2, 3))
case("heaviside x2", lambda h: wnp.heaviside(np.array([-1.0, 0.0, 2.0, 0.0]), h), real(4), order2=True)
case("full_like fill", lambda v: wnp.full_like(np.ones((2, 3)), v), real())
case("bincount weights", lambda w: wnp.bincount(np.array([0, 2, 2, 4]), w, minlength=6), real(4))
case("histogram edges", lambda a: wnp.histogram(a, 4)[1], distinct(6))
case("nextafter", lambda x: wnp.nextafter(x, np.array([2.0, -3.0, 1.0])), nonzero(3))
case("atleast_1d 0-d", wnp.atleast_1d, real())
case("atleast_1d many", lambda x, y: wnp.atleast_1d(x, y), real(), real(2, 3))
case("atleast_2d 0-d", wnp.atleast_2d, real())
case("atleast_2d 1-d", wnp.atleast_2d, real(3))
case("atleast_3d 1-d", wnp.atleast_3d, real(3))
case("atleast_3d 2-d", wnp.atleast_3d, real(2, 3))
case("atleast_3d 0-d", wnp.atleast_3d, real())
case("copy", wnp.copy, real(2, 3))
case("astype float64", lambda x: wnp.astype(x, np.float64) * 2, real(2, 3))
case("array of traced", lambda x, y: wnp.array([x, y, x * y]), real(), real())
case("array nested", lambda x, y: wnp.array([[x, 1.0], [y, x]]), real(), real())
case("array of arrays", lambda x, y: wnp.array([x, y]), real(3), real(3))
case("asarray of traced list", lambda x: wnp.asarray([x, x]), real(2))


# --- lists of traced values where NumPy takes an array (NumPy converts them; so does wengert) --------
case("sum([x, y])", lambda x, y: wnp.sum([x, y], axis=0), real(3), real(3))
case("mean([x0, y1, 2.0])", lambda x, y: wnp.mean([x[0], y[1], 2.0]), real(3), real(3))
case("max([x, y])", lambda x, y: wnp.max([x, y], axis=0), real(3), real(3))
case("var([x, y])", lambda x, y: wnp.var([x, y], axis=1), real(3), real(3))
case("trace(nested list)", lambda x, y: wnp.trace([[x[0], y[0]], [y[1], x[1]]]), real(3), real(3))
case("dot(list, x)", lambda x, y: wnp.dot([x, y], x), real(3), real(3))
case("matmul(list, x)", lambda x, y: wnp.matmul([x, y], x), real(3), real(3))
case("einsum(list)", lambda x, y: wnp.einsum("ij->j", [x, y]), real(3), real(3))
case("concatenate([list, x])", lambda x, y: wnp.concatenate([[x[0], y[0]], x]), real(3), real(3))
case("column_stack([list, x])", lambda x, y: wnp.column_stack([[x[0], y[0], 1.0], x]), real(3), real(3))
case("hstack(scalars)", lambda x, y: wnp.hstack([x[0], y[0], 1.0]), real(3), real(3))

# --- indexing -------------------------------------------------------------------------------------
INDEXES = [  # name, index, argument shape
    ("x[int]", 1, (3, 4)), ("x[-1]", -1, (3, 4)), ("x[int, int]", (2, 1), (3, 4)),
    ("x[slice]", slice(1, 3), (3, 4)), ("x[::2, 1]", (slice(None, None, 2), 1), (3, 4)),
    ("x[::-1]", slice(None, None, -1), (4,)), ("x[None]", None, (3, 4)), ("x[..., 0]", (Ellipsis, 0), (2, 3, 4)),
    ("x[1, ..., None]", (1, Ellipsis, None), (2, 3, 4)), ("x[:, None, ...]", (slice(None), None, Ellipsis), (2, 3, 4)),
    ("x[bool mask]", _MASK, (3, 4)),
    ("x[row mask]", np.array([True, False, True]), (3, 4)),
    ("x[int array] duplicates", np.array([0, 2, 0, 0]), (3, 4)), ("x[int list] duplicates", [1, 1, 2], (3, 4)),
    ("x[arr, arr]", (np.array([0, 1, 0]), np.array([2, 2, 2])), (3, 4)),
    ("x[:, arr]", (slice(None), np.array([1, 1, 3])), (3, 4)),
    ("x[arr, 1:]", (np.array([2, 0, 2]), slice(1, None)), (3, 4)),
    ("x[2-d int array]", np.array([[0, 1], [1, 1]]), (3, 4)),
    ("x[mixed int, arr, slice]", (1, np.array([0, 0, 2]), slice(None, 2)), (2, 3, 4)),
    ("x[()]", (), ()), ("x[negative int array]", np.array([-1, 0, -1]), (3, 4)),
    ("x[int list, :]", ([0, 2], slice(None)), (3, 4)), ("x[empty int array]", np.array([], dtype=int), (3, 4)),
]
INDEX_ORDER2 = {"x[slice]", "x[bool mask]", "x[int array] duplicates"}
for _name, _index, _shape in INDEXES:
    case(_name, (lambda i: lambda x: x[i])(_index), real(*_shape), order2=_name in INDEX_ORDER2)
case("x[0][1:] twice", lambda x: x[0][1:] * x[0][:-1] + x[1][:3], real(3, 4), order2=True)
case("many reads of one array", lambda x: sum(x[i] * x[j] for i in range(3) for j in range(i, 3)), real(3, 2))
case("x[x > 0]", lambda x: x[x > 0], nonzero(3, 4))
case("iterate rows", lambda x: wnp.stack([r * k for k, r in enumerate(x)]), real(3, 2))


# --- Tracer methods and operators ------------------------------------------------------------------
case(".sum()", lambda x: x.sum(), real(3, 4))
case(".sum(axis)", lambda x: x.sum(axis=0, keepdims=True), real(3, 4))
# 3-d sums: their cotangent is a read-only broadcast view (reductions._broadcast_view)
case("sum(3-d, axis=(0, 2)) * w", lambda x: wnp.sum(x, axis=(0, 2)) * np.arange(1.0, 4.0), real(2, 3, 4))
case("sum(3-d, axis=1, keepdims) * w", lambda x: wnp.sum(x, axis=1, keepdims=True) * np.arange(1.0, 5.0),
     real(2, 3, 4))
case("sum(3-d) * x", lambda x: wnp.sum(x) * x, real(2, 3, 4))
case(".mean(axis)", lambda x: x.mean(1), real(3, 4))
case(".prod(axis)", lambda x: x.prod(axis=1), near1(3, 4))
case(".max()", lambda x: x.max(), distinct(3, 4))
case(".min(axis)", lambda x: x.min(axis=-1), distinct(3, 4))
case(".var()", lambda x: x.var(ddof=1), real(3, 4))
case(".std(axis)", lambda x: x.std(axis=0), real(3, 4))
case(".cumsum(axis)", lambda x: x.cumsum(axis=1), real(3, 4))
case(".cumprod()", lambda x: x.cumprod(), near1(3, 2))
case(".reshape(*shape)", lambda x: x.reshape(4, 3), real(3, 4))
case(".reshape(tuple)", lambda x: x.reshape((2, -1)), real(3, 4))
case(".T", lambda x: x.T, real(3, 4))
case(".mT", lambda x: x.mT, real(2, 3, 4))
case(".transpose(*axes)", lambda x: x.transpose(2, 0, 1), real(2, 3, 4))
case(".swapaxes", lambda x: x.swapaxes(0, 1), real(3, 4))
case(".dot", lambda x, y: x.dot(y), real(3, 4), real(4))
case(".astype(float64)", lambda x: x.astype("float64"), real(3, 4))
case(".clip", lambda x: x.clip(-0.5, 0.5), real(3, 4))
case(".clip(max=)", lambda x: x.clip(max=0.5), real(3, 4))
case(".flatten", lambda x: x.flatten(), real(3, 4))
case(".ravel", lambda x: x.ravel(), real(3, 4))
case(".squeeze", lambda x: x.squeeze(), real(3, 1))
case(".repeat", lambda x: x.repeat(2, axis=0), real(3, 1))
case(".take", lambda x: x.take([0, 0, 2]), real(3, 1))
case(".diagonal", lambda x: x.diagonal(), real(3, 4))
case(".trace", lambda x: x.trace(), real(3, 4))
case(".copy", lambda x: x.copy(), real(3, 4))
case(".conj", lambda x: x.conj(), real(3, 4))
case(".real", lambda x: x.real, real(3, 4))
OPERATORS = [  # name, function
    ("x + y", lambda x, y: x + y), ("x - y", lambda x, y: x - y), ("x * y", lambda x, y: x * y),
    ("x / y", lambda x, y: x / y), ("x ** y", lambda x, y: abs(x) ** y), ("x % y", lambda x, y: (x * 3) % y),
    ("-x", lambda x, y: -x * y), ("+x", lambda x, y: +x * y), ("abs(x)", lambda x, y: abs(x) * y),
    ("c + x", lambda x, y: 2.0 + x + np.ones(4) + y), ("c - x", lambda x, y: 2.0 - x - y),
    ("c * x", lambda x, y: 2.0 * x * y), ("c / x", lambda x, y: 2.0 / x / y), ("c ** x", lambda x, y: 2.0 ** x * y),
    ("c % x", lambda x, y: 5.0 % abs(y)), ("array + x", lambda x, y: np.ones((3, 4)) + x - np.ones(4) * y),
    ("array * x", lambda x, y: np.arange(4.0) * x / (np.ones(4) + abs(y))),
]
for _name, _fn in OPERATORS:
    case(_name, _fn, nonzero(3, 4), nonzero(4), order2=_name in {"x / y", "x ** y"})



# --- the rest of NumPy's surface (wengert/numpy/_compositions.py, _statistics.py) -------------------
_NANS = [(0, 1), (2, 3), (1, 0)]  # nan positions for the nan-ignoring reductions


def _with_nan(fn, positions=_NANS):
    """``fn`` of ``x`` with nan written at ``positions`` (constant), so the nan* functions see nan."""
    def f(x):
        mask = np.zeros(x.shape, bool)
        for p in positions:
            mask[p] = True
        return fn(wnp.where(mask, np.nan, x))
    return f


case("diff", wnp.diff, real(5), order2=True)
case("diff n=2 axis=0", lambda x: wnp.diff(x, n=2, axis=0), real(4, 3))
case("diff prepend append", lambda x: wnp.diff(x, prepend=0.5, append=x[:, :1]), real(3, 4))
case("ediff1d", lambda x: wnp.ediff1d(x, to_begin=[1.0], to_end=x[0, :2]), real(2, 3))
case("gradient 1-d", wnp.gradient, real(6), order2=True)
case("gradient 2-d spacing", lambda x: wnp.gradient(x, 0.5, edge_order=2), real(4, 5))
case("gradient coordinates", lambda f: wnp.gradient(f, np.array([0.0, 0.3, 1.0, 1.2, 2.0])), real(5))
case("gradient coordinates edge_order=2 axis", lambda f: wnp.gradient(f, np.array([0.0, 0.3, 1.0, 1.2]), axis=1,
                                                                       edge_order=2), real(2, 4))
case("gradient traced coordinates", lambda f, h: wnp.gradient(f, wnp.cumsum(h)), real(5), pos(5))
case("trapezoid", wnp.trapezoid, real(5), order2=True)
case("trapezoid x axis=0", lambda y, x: wnp.trapezoid(y, x, axis=0), real(4, 3), real(4))
case("trapezoid dx", lambda y: wnp.trapezoid(y, dx=0.3), real(2, 5))
case("polyval", wnp.polyval, real(4), real(3), order2=True)
case("vander", wnp.vander, real(4))
case("vander N increasing", lambda x: wnp.vander(x, 3, increasing=True), real(4))
case("polyfit", lambda x, y: wnp.polyfit(x, y, 2), distinct(6), real(6), order2=True)
case("polyfit 2-d y, w", lambda y, w: wnp.polyfit(np.linspace(0, 1, 5), y, 1, w=w), real(5, 2), pos(5))
case("convolve", wnp.convolve, real(5), real(3), order2=True)
case("convolve same", lambda a, v: wnp.convolve(a, v, mode="same"), real(3), real(5))
case("convolve valid", lambda a, v: wnp.convolve(a, v, "valid"), real(6), real(4))
case("correlate", wnp.correlate, real(5), real(3))
case("correlate full", lambda a, v: wnp.correlate(a, v, mode="full"), real(3), real(4))
case("correlate same", lambda a, v: wnp.correlate(a, v, mode="same"), real(4), real(6))
_XP = np.array([-1.0, -0.2, 0.4, 1.5])
case("interp", lambda x, fp: wnp.interp(x, _XP, fp), Arg("unit", 6), real(4), order2=True)
case("interp outside, left/right", lambda x: wnp.interp(x * 3, _XP, np.array([1.0, 2, 0, 1]), left=-1.0), real(6))
case("interp traced xp", lambda xp: wnp.interp(np.array([0.1, 0.5, 0.7]), wnp.sort(xp), np.array([1.0, 2.0, 0.5])),
     distinct(3))
case("interp period", lambda x, fp: wnp.interp(x, np.array([0.0, 1.0, 2.5]), fp, period=3.0), real(5), real(3))
case("cross", wnp.cross, real(4, 3), real(3), order2=True)
case("cross 2-d vectors", wnp.cross, real(3, 2), real(3, 2))
case("cross 2 and 3, axes", lambda a, b: wnp.cross(a, b, axisa=0, axisc=0), real(2, 4), real(4, 3))
case("cross axis", lambda a, b: wnp.cross(a, b, axis=0), real(3, 2), real(3, 2))


def _phase_free(usv, k=None):
    """What the SVD of a complex matrix determines: each singular vector is known up to a phase
    (shared by u_i and v_i), so |U|^2, |Vh|^2, s and the reconstruction, never U itself."""
    u, s, vh = usv
    u, vh = u[..., :k], vh[..., :k, :]
    return wnp.abs(u) ** 2, s, (u * s[..., None, :]) @ vh, wnp.abs(vh) ** 2


case("svd complex", lambda x, y: _phase_free(wnp.linalg.svd(x + 1j * y)), real(3, 3), real(3, 3), order2=True)
case("svd complex tall full_matrices", lambda x, y: _phase_free(wnp.linalg.svd(x + 1j * y), 2), real(4, 2), real(4, 2),
     order2=True)
case("svd complex wide reduced", lambda x, y: _phase_free(wnp.linalg.svd(x + 1j * y, full_matrices=False)),
     real(2, 4), real(2, 4), order2=True)
case("svd complex rank-1 piece", lambda x, y: (lambda u, s, vh: u[:, :1] * vh[:1])(*wnp.linalg.svd(x + 1j * y)),
     real(3, 2), real(3, 2))
case("svd complex values", lambda x, y: wnp.linalg.svd(x + 1j * y, compute_uv=False), real(3, 4), real(3, 4),
     order2=True)
case("nuclear norm complex", lambda x, y: wnp.linalg.norm(x + 1j * y, "nuc"), real(3, 3), real(3, 3), order2=True)
case("qr complex", lambda x, y: wnp.linalg.qr(x + 1j * y), real(4, 3), real(4, 3), order2=True)
case("qr complex wide", lambda x, y: wnp.linalg.qr(x + 1j * y), real(2, 3), real(2, 3), order2=True)
case("qr complex complete", lambda x, y: (lambda q, r: (q[:, :2], r))(*wnp.linalg.qr(x + 1j * y, "complete")),
     real(4, 2), real(4, 2))
case("qr complex r", lambda x, y: wnp.linalg.qr(x + 1j * y, mode="r"), real(3, 3), real(3, 3))
case("linalg.cross", lambda a, b: wnp.linalg.cross(a, b, axis=0), real(3, 2), real(3, 1))
case("unwrap", lambda p: wnp.unwrap(p * 4), real(6))
case("append", wnp.append, real(2, 3), real(2))
case("append axis", lambda x, y: wnp.append(x, y, axis=0), real(2, 3), real(1, 3))
case("rot90", wnp.rot90, real(2, 3), order2=True)
case("rot90 k=2", lambda x: wnp.rot90(x, 2), real(2, 3))
case("rot90 k=-1 axes", lambda x: wnp.rot90(x, k=-1, axes=(1, 2)), real(2, 3, 4))
case("rollaxis", lambda x: wnp.rollaxis(x, 2), real(2, 3, 4))
case("rollaxis start", lambda x: wnp.rollaxis(x, 0, 3), real(2, 3, 4))
case("dsplit", lambda x: wnp.dsplit(x, 2), real(2, 1, 4))
case("meshgrid", wnp.meshgrid, real(3), real(2), order2=True)
case("meshgrid ij sparse", lambda x, y, z: wnp.meshgrid(x, y, z, indexing="ij", sparse=True), real(3), real(2), real(2))
case("block", lambda a, b, c: wnp.block([[a, b], [c, np.ones((1, 3))]]), real(2, 2), real(2, 1), real(1, 0))
case("block 1-d", lambda a, b: wnp.block([a, b, 1.0]), real(2), real(3))
case("r_", lambda a, b: wnp.r_[a, b, 0.5, 1:3], real(2), real(3), order2=True)
case("r_ directive", lambda a, b: wnp.r_["0,2", a, b], real(3), real(3))
case("c_", lambda a, b: wnp.c_[a, b], real(3), real(3))
case("c_ 2-d", lambda a, b: wnp.c_[a, b], real(2, 2), real(2, 1))
case("apply_along_axis", lambda x: wnp.apply_along_axis(lambda r: r * wnp.sum(r), 0, x), real(3, 2))
case("apply_along_axis scalar", lambda x: wnp.apply_along_axis(wnp.std, 1, x), real(2, 4))
case("apply_along_axis matrix", lambda x: wnp.apply_along_axis(lambda r: wnp.outer(r, r), 1, x), real(2, 3))
case("apply_over_axes", lambda x: wnp.apply_over_axes(wnp.sum, x, [0, 2]), real(2, 3, 2))
case("select", lambda x, y: wnp.select([x > 0.5, x < -0.5], [x * y, x ** 2], default=y), nonzero(3, 4), real(4),
     order2=True)
case("select constant choice", lambda x: wnp.select([x > 0], [x], 0.0), nonzero(5))
case("select choices of different shapes", lambda x, y: wnp.select([_MASK, ~_MASK], [x, y]), real(3, 4), real(4))
case("piecewise", lambda x: wnp.piecewise(x, [x < 0, x >= 0], [lambda v: v ** 2, wnp.sin]), nonzero(5), order2=True)
case("piecewise otherwise", lambda x: wnp.piecewise(x, [x < -0.5], [wnp.exp, lambda v: wnp.log(wnp.abs(v) + 2)]),
     real(2, 3))
case("piecewise constant", lambda x: wnp.piecewise(x, [x < 0], [1.0, lambda v: v * 3]), nonzero(4))
case("piecewise constant conditions", lambda x: wnp.piecewise(x, [_MASK], [wnp.cos, lambda v: v * 3]), real(3, 4))
case("sinc", wnp.sinc, real(5), order2=True)
case("sinc at 0", wnp.sinc, Arg("real", 4, zeros=[1]), order2=True)
case("nan_to_num", lambda x: wnp.nan_to_num(wnp.where(_MASK, x, np.array([np.inf, -np.inf, np.nan, 1.0])), posinf=5.0,
                                            neginf=-4.0), real(3, 4))  # finfo.max would drown finite differences
case("nan_to_num nan=", lambda x: wnp.nan_to_num(_with_nan(lambda v: v)(x), nan=2.0), real(3, 4))
case("real_if_close", lambda x: wnp.real_if_close(x + 0j), real(4))
case("copysign", wnp.copysign, nonzero(3, 4), nonzero(4), order2=True)
case("copysign constant sign", lambda x: wnp.copysign(x, np.array([-1.0, 2.0, -0.0, 0.0])), nonzero(4))
case("modf", wnp.modf, big(3))
case("ldexp", lambda x: wnp.ldexp(x, np.array([1, -2, 0, 3])), real(2, 4), order2=True)
case("frexp", wnp.frexp, nonzero(5))
case("matrix_transpose", wnp.matrix_transpose, real(2, 3, 4))
case("permute_dims", lambda x: wnp.permute_dims(x, (2, 0, 1)), real(2, 3, 4))
case("concat", lambda x, y: wnp.concat([x, y], axis=1), real(2, 3), real(2, 1))
case("unstack", lambda x: wnp.unstack(x, axis=1), real(2, 3))
case("vecdot", wnp.vecdot, real(2, 3), real(3), order2=True)
case("vecdot axis", lambda x, y: wnp.vecdot(x, y, axis=0), real(3, 2), real(3, 2))
case("matvec", wnp.matvec, real(2, 3, 4), real(4))
case("vecmat", wnp.vecmat, real(3), real(2, 3, 4))
case("cumulative_sum", lambda x: wnp.cumulative_sum(x, axis=1, include_initial=True), real(2, 3))
case("cumulative_prod", wnp.cumulative_prod, near1(4))
case("einsum sublists", lambda a, b: wnp.einsum(a, [0, 1], b, [1, 2], [0, 2]), real(2, 3), real(3, 4), order2=True)
case("einsum sublists ellipsis", lambda a: wnp.einsum(a, [Ellipsis, 0, 0]), real(2, 3, 3))
case("where by keyword", lambda x, y: wnp.where(_MASK, x=x, y=y), real(3, 4), real(4))

case("linspace", lambda a, b: wnp.linspace(a, b, 5), real(), real(), order2=True)
case("linspace arrays axis endpoint", lambda a, b: wnp.linspace(a, b, 4, endpoint=False, axis=1), real(2), real(2))
case("linspace retstep", lambda a: wnp.linspace(a, 2.0, 3, retstep=True), real())
case("logspace", lambda a, b: wnp.logspace(a, b, 4, base=2.0), real(), real(3))
case("geomspace", lambda a, b: wnp.geomspace(a, b, 5), pos(), pos(2))
case("i0", wnp.i0, real(2, 3), order2=True)
case("i0 large", lambda x: wnp.i0(x * 8), pos(4))
case("kaiser", lambda b: wnp.kaiser(6, b), pos())
case("asanyarray and friends", lambda x: wnp.asanyarray(x) + wnp.ascontiguousarray(x) * wnp.asfortranarray(x)
     - wnp.require(x) + wnp.asarray_chkfinite(x), real(2, 3))
case("full", lambda v: wnp.full((2, 3), v), real(3))
case("diagflat", lambda v: wnp.diagflat(v, 1), real(2, 2))
case("extract", lambda x: wnp.extract(_MASK, x), real(3, 4))
case("compress", lambda x: wnp.compress([True, False, True], x, axis=0), real(3, 4))
case("delete", lambda x: wnp.delete(x, [0, 2], axis=1), real(3, 4))
case("delete flat", lambda x: wnp.delete(x, 1), real(2, 3))
case("insert", lambda x, v: wnp.insert(x, 1, v, axis=1), real(3, 4), real(3))
case("insert several", lambda x, v: wnp.insert(x, [0, 2, 2], v), real(4), real(3))
case("resize", lambda x: wnp.resize(x, (3, 3)), real(2, 2))
case("choose", lambda a, b: wnp.choose(np.array([[0, 1, 1], [1, 0, 0]]), [a, b]), real(2, 3), real(3))
case("sort_complex", wnp.sort_complex, distinct(4))
case("trim_zeros", lambda x: wnp.trim_zeros(x * np.array([0.0, 1, 0, 1, 0, 0])), real(6))
case("divmod", lambda x: wnp.divmod(x, 0.7)[1], big(5))
case("polyadd", wnp.polyadd, real(3), real(2))
case("polysub", wnp.polysub, real(2), real(4))
case("polymul", wnp.polymul, real(3), real(2), order2=True)
case("polyder", lambda p: wnp.polyder(p, 2), real(4))
case("polyint", lambda p, k: wnp.polyint(p, 2, k), real(3), real(2))
case("poly", wnp.poly, real(3), order2=True)
case("polydiv", wnp.polydiv, real(5), nonzero(3), order2=True)
case("polydiv shorter", wnp.polydiv, real(2), nonzero(3))
case("poly of a matrix", lambda a: wnp.poly(a + np.diag([0.0, 3.0, -2.0])), real(3, 3))
case("roots", lambda p: wnp.roots(p * np.array([1.0, 1, 1, 0])), real(4), order2=True)
case("fft.hfft", lambda a, b: wnp.fft.hfft(a + 1j * b, 6), real(4), real(4))
case("fft.ihfft", lambda a: wnp.fft.ihfft(a, norm="ortho"), real(5))
case("np.add.accumulate", lambda x: np.add.accumulate(x, axis=1), real(2, 3))
case("np.multiply.accumulate", lambda x: np.multiply.accumulate(x), near1(3, 2))
case("np.logaddexp.reduce", lambda x: np.logaddexp.reduce(x, axis=1), real(2, 4), order2=True)
case("np.logaddexp2.reduce keepdims", lambda x: np.logaddexp2.reduce(x, axis=0, keepdims=True), real(3, 2))
case("np.hypot.reduce (a fold)", lambda x: np.hypot.reduce(x, axis=0), nonzero(3, 2))
case("np.maximum.accumulate (a scan)", lambda x: np.maximum.accumulate(x, axis=0), distinct(4, 2))
case("np.subtract.outer", lambda a, b: np.subtract.outer(a, b), real(3), real(2, 2))
case("np.add.reduceat", lambda x: np.add.reduceat(x, [0, 2, 2, 3], axis=1), real(2, 5), order2=True)
case("np.multiply.reduceat", lambda x: np.multiply.reduceat(x, np.array([3, 0, 2])), near1(4, 2))
case("np.maximum.reduceat", lambda x: np.maximum.reduceat(x, [1, 3], axis=-1), distinct(2, 4))
case("np.minimum.reduceat", lambda x: np.minimum.reduceat(x, [0, 2]), distinct(4, 2))
case("np.logaddexp.reduceat", lambda x: np.logaddexp.reduceat(x, [0, 1, 4], axis=0), real(5, 2), order2=True)
case("np.add.reduceat no segments", lambda x: np.add.reduceat(x, np.array([], dtype=int), axis=1), real(2, 3))
case("np.hypot.reduceat (a fold)", lambda x: np.hypot.reduceat(x, [0, 2]), nonzero(3))
case("np.add.reduce initial", lambda x: np.add.reduce(x, axis=None, initial=1.5), real(2, 2))

# duplicated values: the first occurrence gets the gradient (unique's convention)
case("unique_values", lambda x: wnp.unique_values(wnp.concatenate([x, x[1:3]])), distinct(4))
case("unique_all", lambda x: wnp.unique_all(wnp.concatenate([x, x[:2]])).values, distinct(4))
case("unique_counts", lambda x: wnp.unique_counts(x).values, distinct(5))
case("unique_inverse", lambda x: wnp.unique_inverse(x).values, distinct(2, 3))
case("union1d", lambda a, b: wnp.union1d(a, wnp.concatenate([b, a[:1]])), distinct(3), distinct(2))
case("intersect1d", lambda a: wnp.intersect1d(a, a[::2]), distinct(5))
case("intersect1d return_indices", lambda a: wnp.intersect1d(a, a[1:3], return_indices=True)[0], distinct(5))
case("setdiff1d", lambda a, b: wnp.setdiff1d(wnp.concatenate([a, b]), b), distinct(4), distinct(2))
case("setxor1d", lambda a: wnp.setxor1d(a, a[:2]), distinct(5))
case("histogram_bin_edges", lambda a: wnp.histogram_bin_edges(a, bins=4), distinct(6))
case("histogramdd", lambda s: wnp.histogramdd(s, bins=(3, 2)), distinct(6, 2))
case("histogram2d", lambda x, y: wnp.histogram2d(x, y, bins=3, range=[None, (0.0, 2.0)])[1:], distinct(5),
     distinct(5))

case("median", wnp.median, distinct(5), order2=True)
case("median even axis", lambda x: wnp.median(x, axis=1), distinct(3, 4))
case("median axes keepdims", lambda x: wnp.median(x, axis=(0, 2), keepdims=True), distinct(2, 3, 2))
case("quantile", lambda x: wnp.quantile(x, 0.3), distinct(6))
case("quantile array q axis", lambda x: wnp.quantile(x, [0.1, 0.5, 0.95], axis=0), distinct(5, 2), order2=True)
case("quantile traced q", lambda x, q: wnp.quantile(x, q * 0.1 + 0.5), distinct(7), Arg("unit", 2))
case("quantile methods", lambda x: [wnp.quantile(x, 0.37, method=m) for m in
                                    ("lower", "higher", "nearest", "midpoint", "hazen", "weibull",
                                     "median_unbiased", "normal_unbiased", "interpolated_inverted_cdf")],
     distinct(6))
case("percentile", lambda x: wnp.percentile(x, [25, 80], axis=1, keepdims=True), distinct(2, 5))
case("partition", lambda x: wnp.partition(x, 2), distinct(6), order2=True)
case("partition axis", lambda x: wnp.partition(x, (0, 2), axis=0), distinct(4, 3))
case("ptp", wnp.ptp, distinct(3, 4))
case("ptp axis", lambda x: wnp.ptp(x, axis=0, keepdims=True), distinct(3, 4))
case("nansum", _with_nan(wnp.nansum), real(3, 4), order2=True)
case("nansum axis", _with_nan(lambda x: wnp.nansum(x, axis=0, keepdims=True)), real(3, 4))
case("nanprod", _with_nan(lambda x: wnp.nanprod(x, axis=1)), near1(3, 4), order2=True)
case("nancumsum", _with_nan(lambda x: wnp.nancumsum(x, axis=1)), real(3, 4))
case("nancumprod", _with_nan(wnp.nancumprod), near1(3, 4))
case("nanmax", _with_nan(lambda x: wnp.nanmax(x, axis=1)), distinct(3, 4), order2=True)
case("nanmin", _with_nan(wnp.nanmin), distinct(3, 4))
case("nanmean", _with_nan(lambda x: wnp.nanmean(x, axis=0)), real(3, 4), order2=True)
case("nanmean all", _with_nan(wnp.nanmean), real(3, 4))
case("nanvar", _with_nan(lambda x: wnp.nanvar(x, axis=1, ddof=1)), real(3, 4), order2=True)
case("nanstd", _with_nan(lambda x: wnp.nanstd(x, axis=0, keepdims=True)), real(3, 4))
case("nanmedian", _with_nan(lambda x: wnp.nanmedian(x, axis=1)), distinct(3, 4), order2=True)
case("nanmedian all", _with_nan(wnp.nanmedian), distinct(3, 4))
case("nanquantile", _with_nan(lambda x: wnp.nanquantile(x, [0.2, 0.7], axis=0)), distinct(3, 4))
case("nanpercentile", _with_nan(lambda x: wnp.nanpercentile(x, 40.0, axis=1, keepdims=True)), distinct(3, 4))
case("cov", wnp.cov, real(3, 5), order2=True)
case("cov y rowvar=False", lambda x, y: wnp.cov(x, y, rowvar=False), real(5, 2), real(5))
case("cov weights", lambda x, a: wnp.cov(x, fweights=np.array([1, 2, 1, 3]), aweights=a, ddof=1), real(2, 4), pos(4))
case("cov bias 1-d", lambda x: wnp.cov(x, bias=True), real(5))
case("corrcoef", wnp.corrcoef, real(3, 5), order2=True)
case("corrcoef x y", wnp.corrcoef, real(4), real(4))
case("var of complex", lambda x, y: wnp.var(x + 1j * y, axis=0), real(3, 2), real(3, 2), order2=True)
case("std of complex", lambda x, y: wnp.std(x + 1j * y), real(3, 2), real(3, 2))

# --- NumPy's own functions on traced values (__array_ufunc__ / __array_function__) ----------------
NUMPY_OWN = [  # name, function, argument specs
    ("np.sin", lambda x: np.sin(x), [real(3, 4)]),
    ("np.exp * ndarray", lambda x: np.exp(x) * np.arange(4.0), [real(3, 4)]),
    ("np.add(ndarray, x)", lambda x: np.add(np.ones(4), x), [real(3, 4)]),
    ("ndarray + x", lambda x: np.ones((3, 4)) + x, [real(3, 4)]),
    ("ndarray * x", lambda x: np.arange(4.0) * x, [real(3, 4)]),
    ("ndarray @ x", lambda x: np.ones((2, 3)) @ x, [real(3, 4)]),
    ("np.maximum", lambda x, y: np.maximum(x, y), [real(3, 4), real(4)]),
    ("np.power", lambda x: np.power(x, 3), [real(3, 4)]),
    ("np.sqrt", lambda x: np.sqrt(x), [pos(3, 4)]),
    ("np.sum(axis=0)", lambda x: np.sum(x, axis=0), [real(3, 4)]),
    ("np.mean", lambda x: np.mean(x), [real(3, 4)]),
    ("np.mean(axis, keepdims)", lambda x: np.mean(x, axis=1, keepdims=True), [real(3, 4)]),
    ("np.var", lambda x: np.var(x, axis=0), [real(3, 4)]),
    ("np.std", lambda x: np.std(x), [real(3, 4)]),
    ("np.max", lambda x: np.max(x, axis=1), [distinct(3, 4)]),
    ("np.prod", lambda x: np.prod(x), [near1(3, 2)]),
    ("np.cumsum", lambda x: np.cumsum(x, axis=0), [real(3, 4)]),
    ("np.add.reduce", lambda x: np.add.reduce(x), [real(3, 4)]),
    ("np.multiply.reduce", lambda x: np.multiply.reduce(x, axis=1), [near1(3, 4)]),
    ("np.maximum.reduce", lambda x: np.maximum.reduce(x, axis=None), [distinct(3, 4)]),
    ("np.einsum", lambda x: np.einsum("ij->j", x), [real(3, 4)]),
    ("np.einsum two operands", lambda x, y: np.einsum("ij,jk->ik", x, y), [real(2, 3), real(3, 4)]),
    ("np.dot", lambda x, y: np.dot(x, y), [real(2, 3), real(3)]),
    ("np.matmul", lambda x, y: np.matmul(x, y), [real(2, 3), real(3, 4)]),
    ("np.tensordot", lambda x, y: np.tensordot(x, y, axes=1), [real(2, 3), real(3, 4)]),
    ("np.outer", lambda x, y: np.outer(x, y), [real(3), real(2)]),
    ("np.trace", lambda x: np.trace(x), [real(3, 3)]),
    ("np.concatenate", lambda x: np.concatenate([x, x]), [real(2, 3)]),
    ("np.concatenate with ndarray", lambda x: np.concatenate([np.zeros((1, 3)), x], axis=0), [real(2, 3)]),
    ("np.stack", lambda x, y: np.stack([x, y], axis=1), [real(2, 3), real(2, 3)]),
    ("np.reshape", lambda x: np.reshape(x, (4, 3)), [real(3, 4)]),
    ("np.transpose", lambda x: np.transpose(x), [real(3, 4)]),
    ("np.where", lambda x: np.where(_MASK, x, 0.0), [real(3, 4)]),
    ("np.clip", lambda x: np.clip(x, -0.5, 0.5), [real(3, 4)]),
    ("np.sort", lambda x: np.sort(x, axis=0), [distinct(3, 4)]),
    ("np.pad", lambda x: np.pad(x, 1, mode="edge"), [real(2, 3)]),
    ("np.tile", lambda x: np.tile(x, (2, 1)), [real(2, 3)]),
    ("np.take", lambda x: np.take(x, [0, 0, 2], axis=1), [real(2, 3)]),
    ("np.diag", lambda x: np.diag(x), [real(3)]),
    ("np.split", lambda x: np.split(x, 2, axis=1), [real(3, 4)]),
    ("np.average", lambda x: np.average(x, axis=0, weights=np.arange(1.0, 4.0)), [real(3, 4)]),
    ("np.abs", lambda x: np.abs(x), [nonzero(3, 4)]),
    ("np.linalg-free composition", lambda x: np.sum(np.tanh(x @ x.T) ** 2), [real(3, 4)]),
]
for _name, _fn, _specs in NUMPY_OWN:
    case(_name, _fn, *_specs, order2=_name in {"np.sin", "np.einsum two operands", "np.var"})

CASE_IDS = list(CASES)


def assert_same_values(traced, plain):
    """The traced computation returns NumPy's values, shapes and dtypes (up to rounding)."""
    t_leaves, t_def = wg.tree.flatten(traced)
    p_leaves, p_def = wg.tree.flatten(plain)
    assert t_def == p_def
    for t, p in zip(t_leaves, p_leaves):
        assert np.shape(t) == np.shape(p)
        assert np.result_type(t) == np.result_type(p)
        np.testing.assert_allclose(t, p, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASE_IDS)
def test_first_order(name):
    fn, specs = CASES[name]
    args = draw(name, specs)
    traced_out, _ = wg.vjp(fn, *args)
    assert_same_values(traced_out, fn(*args))
    # inside each function's smooth domain (a nan would make finite differences meaningless)
    assert all(np.all(np.isfinite(leaf)) for leaf in wg.tree.flatten(traced_out)[0])
    wg.check_grads(fn, args, order=1)


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_order(name):
    fn, specs = CASES[name]
    wg.check_grads(fn, draw(name, specs), order=2)


def test_the_table_is_large_enough():
    """Guards against a loop above silently producing nothing."""
    assert len(CASES) > 500
    assert len(SECOND_ORDER) >= 25


def test_every_differentiable_function_is_in_the_table():
    """A new function in ``wengert.numpy`` must get a row above (its name, called as ``wnp.name``)."""
    import pathlib
    import re

    from wengert.numpy import _compositions, _functions, _statistics

    source = pathlib.Path(__file__).read_text()
    names = [n for n in _functions.__all__ + _compositions.__all__ + _statistics.__all__
             if callable(getattr(wnp, n)) and not getattr(getattr(wnp, n), "nondiff", False)]
    assert len(names) > 100
    missing = [n for n in names if not re.search(rf'wnp\.{n}\b|\("{n}"', source)]
    assert not missing, f"no gradient test for wengert.numpy.{missing}"


# --- functions without a derivative: plain values, zero gradient ----------------------------------
X = np.array([[0.3, -1.7, 2.5, np.nan], [1.5, 0.2, -0.6, 4.0]])
NONDIFF = [  # name, function of the traced value (NumPy's name, NumPy's protocol, or a method)
    ("wnp.argmax", lambda x: wnp.argmax(x[:, :3], axis=1)), ("np.argmax", lambda x: np.argmax(x[:, :3])),
    ("x.argmax", lambda x: x[:, :3].argmax(axis=0)), ("wnp.argmin", lambda x: wnp.argmin(x[:, :3])),
    ("wnp.argsort", lambda x: wnp.argsort(x[:, :3], axis=1)), ("np.argsort", lambda x: np.argsort(x[:, :3])),
    ("x.argsort", lambda x: x[:, :3].argsort()), ("wnp.floor", lambda x: wnp.floor(x)),
    ("np.floor", lambda x: np.floor(x)), ("wnp.ceil", lambda x: wnp.ceil(x)),
    ("wnp.round", lambda x: wnp.round(x, 1)), ("np.round", lambda x: np.round(x)), ("x.round", lambda x: x.round()),
    ("wnp.rint", lambda x: wnp.rint(x)), ("wnp.trunc", lambda x: wnp.trunc(x)), ("wnp.sign", lambda x: wnp.sign(x)),
    ("np.sign", lambda x: np.sign(x)), ("wnp.isnan", lambda x: wnp.isnan(x)), ("np.isnan", lambda x: np.isnan(x)),
    ("wnp.isfinite", lambda x: wnp.isfinite(x)), ("x > 0", lambda x: x > 0), ("x <= x", lambda x: x <= x[0]),
    ("x == x", lambda x: x == x), ("0.5 < x", lambda x: 0.5 < x), ("np.greater", lambda x: np.greater(x, 0)),
    ("wnp.less", lambda x: wnp.less(x, 1)), ("x // 1", lambda x: x // 1.0), ("wnp.floor_divide", lambda x: wnp.floor_divide(x, 2)),
    ("wnp.nonzero", lambda x: wnp.nonzero(x > 0)), ("wnp.count_nonzero", lambda x: wnp.count_nonzero(x > 0)),
    ("wnp.any", lambda x: wnp.any(x > 3)), ("x.all", lambda x: (x > -5).all()),
    ("wnp.searchsorted", lambda x: wnp.searchsorted(np.arange(3.0), x[0])),
    ("wnp.zeros_like", lambda x: wnp.zeros_like(x)), ("wnp.shape", lambda x: wnp.shape(x)),
]


def _plain(value):
    return tuple(_plain(v) for v in value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("name,fn", NONDIFF, ids=[n for n, _ in NONDIFF])
def test_nondifferentiable_functions_pass_values_through(name, fn):
    seen = {}

    def f(x):
        out = fn(x)
        seen["out"] = out
        return wnp.sum(x * 0.0)  # a traced scalar, so grad runs a backward pass

    g = wg.grad(f)(X)
    out = seen["out"]
    leaves = wg.tree.flatten(out)[0]
    assert not any(isinstance(v, wg.Tracer) for v in leaves), f"{name} returned a traced value"
    expected = fn(X)
    for got, want in zip(leaves, wg.tree.flatten(expected)[0]):
        np.testing.assert_array_equal(got, want)
        assert np.result_type(got) == np.result_type(want)
    np.testing.assert_array_equal(np.nan_to_num(g), 0.0)


def test_nondifferentiable_results_have_zero_gradient_but_do_not_stop_others():
    x = np.array([[0.3, -1.7, 2.5], [1.5, 0.2, -0.6]])
    # the output depends on x only through functions without a derivative: gradient exactly 0
    for fn in [lambda x: wnp.sum(wnp.floor(x) * 1.0), lambda x: wnp.sum(wnp.sign(x) + (x > 0)),
               lambda x: wnp.sum(np.round(x)) + 0.0, lambda x: float(wnp.argmax(x)) + 0.0]:
        g = wg.grad(lambda x: fn(x) + wnp.sum(x * 0.0))(x)
        np.testing.assert_array_equal(g, np.zeros_like(x))
        assert g.dtype == x.dtype
    # used alongside differentiable operations, they act as constants
    wg.check_grads(lambda x: wnp.sum(x * wnp.floor(x) + wnp.sign(x) * x ** 2), (x,))
    wg.check_grads(lambda x: x[np.arange(2), wnp.argmax(x, axis=1)], (x,))
    wg.check_grads(lambda x: wnp.take_along_axis(x, wnp.argsort(x, axis=1), axis=1), (x,))
    wg.check_grads(lambda x: wnp.where(wnp.isnan(x) | (x > 0), x, 0.0), (x,))


def test_numpy_function_without_a_rule_names_it():
    with pytest.raises(wg.NoDerivativeError, match="putmask"):
        wg.grad(lambda x: wnp.sum(np.putmask(x, x > 1, 0.0) or x))(np.arange(1.0, 4.0))
    with pytest.raises(wg.NoDerivativeError, match="putmask"):
        wg.grad(lambda x: wnp.sum(wnp.putmask(x, x > 1, 0.0) or x))(np.arange(1.0, 4.0))
    with pytest.raises(TypeError, match="gradient"):
        wg.grad(lambda x: np.asarray(x).sum())(np.arange(3.0))


@pytest.mark.parametrize("name, build", [("r_", lambda x: np.r_[x, 1.0]), ("c_", lambda x: np.c_[x, x]),
                                         ("r_", lambda x: np.r_["0,2", 2.0, x])])
def test_numpy_r_and_c_with_traced_pieces_name_wengerts_spelling(name, build):
    """NumPy's r_ and c_ call np.array on each piece, which no protocol routes to wengert: the error
    names the user's line and wnp.r_ / wnp.c_, which take the same syntax."""
    with pytest.raises(wg.TracerConversionError, match=rf"np\.{name}\[\.\.\.\].*test_numpy_grads.py.*wnp\.{name}\["):
        wg.grad(lambda x: wnp.sum(build(x)))(np.arange(3.0))


@pytest.mark.parametrize("mode", ["linear_ramp", "median", "empty"])
def test_pad_modes_without_a_traced_version_say_so(mode):
    with pytest.raises(NotImplementedError, match=mode):
        wg.grad(lambda x: wnp.sum(wnp.pad(x, 1, mode=mode)))(np.arange(3.0))


# --- plain arrays: exactly NumPy's result ---------------------------------------------------------
_I = np.arange(12).reshape(3, 4)  # integers
_F = np.linspace(-2.0, 3.0, 12).reshape(3, 4)
_S = _F.astype(np.float32)
_B = _I % 3 == 0
PLAIN = [  # name, positional args, keyword args
    ("add", (_I, 2), {}), ("add", (_S, 1.5), {}), ("divide", (_I, 4), {}), ("power", (_I, 2), {}),
    ("sqrt", (_I,), {}), ("exp", (_S,), {}), ("maximum", (_I, _F), {}), ("abs", (-_I,), {}),
    ("remainder", (_I, 5), {}), ("arctan2", (_S, _F), {}), ("sin", (3,), {}), ("log1p", (_B,), {}),
    ("where", (_B, _I, _F), {}), ("where", (_B,), {}), ("clip", (_I, 2, 7), {}), ("clip", (_S,), {"max": 1.0, "min": 0.0}),
    ("sum", (_I,), {}), ("sum", (_B,), {"axis": 0}), ("sum", (_S,), {"axis": (0, 1), "keepdims": True}),
    ("mean", (_I,), {"axis": 1}), ("mean", (_S,), {}), ("prod", (_I + 1,), {"axis": -1}),
    ("max", (_I,), {"axis": 0}), ("amin", (_S,), {"keepdims": True}), ("var", (_I,), {"ddof": 1}),
    ("std", (_S,), {"axis": 0}), ("cumsum", (_I,), {}), ("cumprod", (_S,), {"axis": 1}),
    ("average", (_I,), {"axis": 0, "weights": [1, 2, 3]}), ("average", (_S,), {"returned": True}),
    ("dot", (_I, _I.T), {}), ("vdot", (_I, _F), {}), ("inner", (_S, _S), {}), ("outer", (_I[0], _F[1]), {}),
    ("matmul", (_I, _I.T), {}), ("tensordot", (_I, _F), {"axes": ([0, 1], [0, 1])}),
    ("einsum", ("ij,kj->ik", _I, _F), {}), ("einsum", ("ii->i", _I[:, :3]), {}), ("trace", (_S,), {}),
    ("kron", (_I[:2, :2], _I[:2, :2]), {}), ("reshape", (_I, (4, 3)), {}), ("ravel", (_S,), {}),
    ("transpose", (_I,), {}), ("moveaxis", (_I, 0, 1), {}), ("swapaxes", (_F, 0, 1), {}),
    ("expand_dims", (_I, (0, 2)), {}), ("squeeze", (_I[:1],), {}), ("broadcast_to", (_I[0], (2, 4)), {}),
    ("concatenate", ([_I, _F],), {}), ("concatenate", ([_I, _I],), {"axis": None}), ("stack", ([_I, _I],), {"axis": 1}),
    ("hstack", ([_I, _B],), {}), ("vstack", ([_I[0], _F],), {}), ("dstack", ([_S, _S],), {}),
    ("column_stack", ([_I[0], _F[0]],), {}), ("split", (_I, 2, 1), {}), ("array_split", (_F, 3, 1), {}),
    ("tile", (_I, (2, 1)), {}), ("repeat", (_I, [1, 0, 2], 0), {}), ("repeat", (_S, 2), {}),
    ("pad", (_I, 1), {}), ("pad", (_F, ((1, 0), (2, 1))), {"mode": "reflect"}), ("pad", (_S, 2), {"mode": "maximum"}),
    ("flip", (_I,), {}), ("fliplr", (_I,), {}), ("roll", (_I, 2), {"axis": 1}), ("diag", (_I,), {"k": 1}),
    ("diag", (_I[0],), {}), ("diagonal", (_F,), {"offset": -1}), ("triu", (_I,), {}), ("tril", (_S, -1), {}),
    ("take", (_I, [0, 0, 2]), {}), ("take_along_axis", (_I, np.array([[1], [0], [3]]), 1), {}),
    ("sort", (_F[::-1],), {"axis": 0}), ("atleast_1d", (3.0,), {}), ("atleast_2d", (_I[0],), {}),
    ("atleast_3d", (_I,), {}), ("copy", (_S,), {}), ("array", ([[1, 2], [3, 4]],), {}), ("asarray", (_S,), {}),
    ("argmax", (_F,), {"axis": 0}), ("floor", (_S,), {}), ("round", (_F, 1), {}),
]


@pytest.mark.parametrize("name,args,kwargs", PLAIN, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(PLAIN)])
def test_plain_arrays_get_numpy_result_exactly(name, args, kwargs):
    got = getattr(wnp, name)(*args, **kwargs)
    want = getattr(np, name)(*args, **kwargs)
    assert type(got) is type(want)
    for g, w in zip(wg.tree.flatten(got)[0], wg.tree.flatten(want)[0]):
        assert type(g) is type(w)
        assert np.result_type(g) == np.result_type(w)
        np.testing.assert_array_equal(g, w)


# --- ties in max / min / maximum / minimum share the gradient equally -----------------------------
def test_max_ties_share_gradient_equally():
    x = np.array([1.0, 3.0, 3.0])
    np.testing.assert_array_equal(wg.grad(wnp.max)(x), [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(wg.grad(wnp.amax)(x), [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(wg.grad(lambda x: np.max(x))(x), [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(wg.grad(lambda x: x.max())(x), [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(wg.grad(wnp.min)(np.array([2.0, 2.0, 2.0])), [1 / 3, 1 / 3, 1 / 3])
    m = np.array([[1.0, 1.0, 0.0], [2.0, 5.0, 5.0], [4.0, 4.0, 4.0]])
    np.testing.assert_allclose(wg.grad(lambda m: wnp.sum(wnp.max(m, axis=1) * np.array([1.0, 2.0, 3.0])))(m),
                               [[0.5, 0.5, 0], [0, 1, 1], [1, 1, 1]])
    np.testing.assert_allclose(wg.grad(lambda m: wnp.sum(wnp.amin(m, axis=0, keepdims=True)))(m),
                               [[1, 1, 1], [0, 0, 0], [0, 0, 0]])
    np.testing.assert_allclose(wg.grad(lambda m: wnp.sum(wnp.max(m, axis=(0, 1))))(m),
                               [[0, 0, 0], [0, 0.5, 0.5], [0, 0, 0]])


@pytest.mark.parametrize("name", ["maximum", "minimum", "fmax", "fmin"])
def test_binary_extremum_ties_share_gradient_equally(name):
    fn = getattr(wnp, name)
    x = np.array([[1.0, 2.0, 3.0], [2.0, 2.0, 0.0]])
    y = np.array([2.0, 2.0, 2.0])  # broadcast against x; ties at [:, 1] and [1, 0]
    gx, gy = wg.grad(lambda x, y: wnp.sum(fn(x, y)), argnums=(0, 1))(x, y)
    x_wins = (x > y) if name in ("maximum", "fmax") else (x < y)
    tie = x == y
    np.testing.assert_array_equal(gx, x_wins + 0.5 * tie)
    np.testing.assert_array_equal(gy, np.sum(~x_wins & ~tie, axis=0) + 0.5 * np.sum(tie, axis=0))
    # a two-way tie is where central differences take the average of the one-sided slopes: the same
    wg.check_grads(lambda x, y: fn(x, y), (x, y))
    wg.check_grads(lambda x: fn(x, x[::-1]), (np.array([1.0, 2.0, 1.0]),))


def test_fmax_ignores_nan_in_the_gradient():
    x, y = np.array([np.nan, 1.0, 3.0]), np.array([2.0, np.nan, 1.0])
    gx, gy = wg.grad(lambda x, y: wnp.sum(wnp.fmax(x, y)), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, [0, 1, 1])
    np.testing.assert_array_equal(gy, [1, 0, 0])


# --- float32 in, float32 out ----------------------------------------------------------------------
FLOAT32_CASES = ["sin(2, 3)", "exp(2, 3)", "log(2, 3)", "tanh(2, 3)", "multiply(3, 4)(4,)", "divide(2, 1, 4)(3, 1)",
                 "power(3, 4)(4,)", "maximum(3, 4)(4,)", "clip(x, lo, hi)", "where(mask, x, y)",
                 "sum(axis=(0, 2), keepdims=True)", "mean(axis=1, keepdims=False)", "max(axis=-1, keepdims=True)",
                 "prod(axis=None, keepdims=False)", "var(axis=0, keepdims=False)", "std(axis=None, keepdims=True)",
                 "cumsum(axis=1)", "cumprod(axis=0)", "matmul batched", "matmul 1-d @ 2-d", "dot 2-d 2-d",
                 "tensordot axes=2", "einsum ij,jk,kl->il", "einsum ii->i", "kron 2-d", "concatenate", "stack",
                 "pad reflect", "sort", "repeat array", "x[bool mask]", "x[int array] duplicates", "diag of 1-d",
                 "average(weights)", "power(x, 3) negative base", "x / y", "c ** x", "np.sin", "np.einsum",
                 "median even axis", "percentile", "nanmean", "nanvar", "cov", "corrcoef", "interp", "gradient 1-d",
                 "trapezoid", "sinc", "i0", "cross", "convolve", "polyval", "linspace", "ldexp", "np.logaddexp.reduce",
                 "vander"]


@pytest.mark.parametrize("name", FLOAT32_CASES)
def test_float32_inputs_give_float32_gradients(name):
    fn, specs = CASES[name]
    args64 = draw(name, specs)
    args32 = tuple(a.astype(np.float32) for a in args64)
    out, vjp_fn = wg.vjp(fn, *args32)
    plain = fn(*args32)
    for o, p in zip(wg.tree.flatten(out)[0], wg.tree.flatten(plain)[0]):
        assert o.dtype == p.dtype  # the forward pass keeps NumPy's dtypes
    cts = wg.tree.map(lambda o: np.ones_like(o), out)
    grads32 = vjp_fn(cts)
    grads64 = wg.vjp(fn, *args64)[1](wg.tree.map(lambda o: np.ones(np.shape(o)), wg.vjp(fn, *args64)[0]))
    for g32, g64 in zip(grads32, grads64):
        assert g32.dtype == np.float32
        np.testing.assert_allclose(g32, g64, rtol=2e-3, atol=2e-3)


def test_astype_gradient_comes_back_in_the_input_dtype():
    x = np.array([0.5, -1.25, 2.0])
    g = wg.grad(lambda x: wnp.sum(x.astype(np.float32) * np.float32(3)))(x)
    assert g.dtype == np.float64
    np.testing.assert_array_equal(g, [3.0, 3.0, 3.0])
    g32 = wg.grad(lambda x: wnp.sum(wnp.astype(x, np.float64) ** 2))(x.astype(np.float32))
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, 2 * x)
    # casting to an integer type ends differentiation
    np.testing.assert_array_equal(wg.grad(lambda x: wnp.sum(x.astype(int) * x))(x), x.astype(int))


# --- std at zero variance: derivative 0 (wengert's convention; JAX gives nan) -------------------------
def test_std_at_zero_variance_has_derivative_zero_in_every_mode():
    """std is a cone at constant data (it grows like |t| along any direction): 0 is the subgradient
    of least norm, as abs and norm give at 0. The value is NumPy's, nan stays nan."""
    x = np.full((2, 3), 1.5)
    assert wnp.std(x) == 0.0
    np.testing.assert_array_equal(wg.grad(wnp.std)(x), np.zeros_like(x))
    np.testing.assert_array_equal(wg.grad(lambda x: wnp.sum(wnp.std(x, axis=1)))(x), np.zeros_like(x))
    np.testing.assert_array_equal(wg.jvp(wnp.std, (x,), (np.ones_like(x),))[1], 0.0)
    np.testing.assert_array_equal(wg.hessian(wnp.std)(x), np.zeros((2, 3, 2, 3)))
    # one lane constant, the other not: only the constant lane's derivative is 0
    y = np.array([[1.0, 1.0, 1.0], [0.5, -1.0, 2.0]])
    g = wg.grad(lambda y: wnp.sum(wnp.std(y, axis=1)))(y)
    np.testing.assert_array_equal(g[0], 0.0)
    wg.check_grads(lambda v: wnp.std(v), (y[1],))
    assert np.isnan(wg.value_and_grad(wnp.std)(np.array([1.0, np.nan]))[0])
    np.testing.assert_array_equal(wg.grad(wnp.nanstd)(np.array([2.0, np.nan, 2.0])), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.complex128])
def test_traced_mean_and_var_give_numpys_values_bit_for_bit(dtype):
    """The primitives reduce float32/float64 with NumPy's own calls minus its Python layer (faster on
    small arrays); every axis, keepdims and ddof gives NumPy's exact value, type and dtype, and the
    dtypes and cases left to NumPy (float16, complex, ddof >= n, empty) do too."""
    rng = np.random.default_rng(3)
    for shape in [(), (1,), (16,), (4, 4), (3, 5, 7), (0, 3)]:
        x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
        axes = [None] + list(range(len(shape))) + ([(0, 2)] if len(shape) == 3 else [])
        for axis, keepdims in ((a, k) for a in axes for k in (False, True)):
            cases = [(wnp.mean, np.mean, {})]
            if dtype != np.complex128:
                cases += [(wnp.var, np.var, {"ddof": d}) for d in (0, 1, 7)]
            for ours, theirs, kw in cases:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")   # empty slices, ddof >= n: NumPy warns and gives nan
                    expected = theirs(x, axis=axis, keepdims=keepdims, **kw)
                    got = wg.vjp(lambda v: ours(v, axis=axis, keepdims=keepdims, **kw), x)[0]
                assert type(got) is type(expected) and got.dtype == expected.dtype, (shape, axis, kw)
                np.testing.assert_array_equal(got, expected)


def test_var_and_std_of_complex_values_are_real():
    z = np.array([1 + 2j, -0.5 + 1j, 2 - 1j])
    out, _ = wg.vjp(wnp.var, z)
    assert out.dtype == np.var(z).dtype == np.float64
    np.testing.assert_allclose(out, np.var(z))
    np.testing.assert_allclose(wg.vjp(wnp.std, z)[0], np.std(z))


def test_large_batched_einsums_in_the_table_take_the_matmul_path():
    """The table's big batched contractions exercise the np.matmul lowering, not opt_einsum's."""
    for subscripts, shapes in EINSUMS[-2:]:
        plan = _contraction(subscripts, tuple(shapes))
        assert plan.__name__ == "contract", (subscripts, plan)


def _einsum_layouts(a, b):
    """``a`` (n, r, i) and ``b`` (n, i, c) laid out five ways, each pair holding the same values but
    the broadcast one: (name, a, b, can BLAS take each item of both as it lies)."""
    def batch_last(x):
        return np.ascontiguousarray(np.moveaxis(x, 0, -1)).transpose(2, 0, 1)

    def transposed(x):
        return np.ascontiguousarray(x.transpose(0, 2, 1)).transpose(0, 2, 1)
    wide = np.zeros(a.shape[:2] + (2 * a.shape[2],))
    wide[:, :, ::2] = a
    return [("contiguous", a, b, True), ("transposed", transposed(a), transposed(b), True),
            ("batch-last", batch_last(a), batch_last(b), False),
            ("broadcast", np.broadcast_to(a[:1], a.shape), b, True),
            ("every other column", wide[:, :, ::2], b, False)]


@pytest.mark.parametrize("n", [6, _MATMUL_MAX_ITEMS + 6])
def test_batched_einsum_takes_matmul_or_einsums_loop_by_layout_with_the_same_values(n):
    """Past _MATMUL_MAX_ITEMS items the einsum primitive picks np.matmul where BLAS takes each item's
    matrices as they lie and einsum's loop elsewhere: both give NumPy's einsum, and so do the
    gradients (against the contraction written out), in float64, for every layout."""
    r, i, c = 8, 16, 12   # past _SMALL_CONTRACTION at 6 items: the batched plan
    rng = np.random.default_rng(11)
    a0, b0 = rng.standard_normal((n, r, i)), rng.standard_normal((n, i, c))
    g = rng.standard_normal((n, r, c))
    plan = _contraction("nri,nic->nrc", ((n, r, i), (n, i, c)))
    assert plan.__name__ == "contract"
    for name, a, b, blas in _einsum_layouts(a0, b0):
        assert (_blas_items(a, 1, 1, r, i) and _blas_items(b, 1, 1, i, c)) == blas, name
        np.testing.assert_allclose(plan(a, b), np.einsum("nri,nic->nrc", a, b), rtol=1e-13, atol=1e-13)
        out, vjp = wg.vjp(lambda x, y: wnp.einsum("nri,nic->nrc", x, y), a, b)
        np.testing.assert_allclose(out, np.einsum("nri,nic->nrc", a, b), rtol=1e-13, atol=1e-13)
        ga, gb = vjp(g)
        np.testing.assert_allclose(ga, np.einsum("nrc,nic->nri", g, b), rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(gb, np.einsum("nrc,nri->nic", g, a), rtol=1e-13, atol=1e-13)


def test_batched_einsum_layouts_with_several_letters_per_group():
    """Two batch letters, two free letters of one operand: a view that merges them goes to matmul,
    one that cannot be merged without a copy to einsum's loop; the values agree in float64."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((8, 12, 2, 3, 5))   # batch (8, 12), rows (2, 3), inner 5
    y = rng.standard_normal((8, 12, 5, 4))
    plan = _contraction("pqrsi,pqic->pqrsc", (x.shape, y.shape))
    assert _blas_items(x, 2, 2, 6, 5) and _blas_items(y, 2, 1, 5, 4)
    swapped = np.ascontiguousarray(x.transpose(1, 0, 2, 3, 4)).transpose(1, 0, 2, 3, 4)   # batch axes not one stride
    assert not _blas_items(swapped, 2, 2, 6, 5)
    rows_split = np.ascontiguousarray(x.transpose(0, 1, 3, 2, 4)).transpose(0, 1, 3, 2, 4)   # rows not one stride
    assert not _blas_items(rows_split, 2, 2, 6, 5)
    for a in (x, swapped, rows_split):
        np.testing.assert_allclose(plan(a, y), np.einsum("pqrsi,pqic->pqrsc", a, y), rtol=1e-13, atol=1e-13)

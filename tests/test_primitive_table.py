"""The primitive table as a whole: every primitive has a rule for every interpreter, under a name of
its own; and vmap falls back to its per-example loop only when a rule says so (NeedsLoop).
"""
from __future__ import annotations

import importlib
import pkgutil
import warnings

import numpy as np
import pytest

import wengert
import wengert as wg
import wengert.numpy as wnp
from wengert.core.trace import Primitive
from wengert.primitives._batching import NeedsLoop, elementwise_rule
from wengert.primitives._table import PRIMITIVES, defprim


def _every_module():
    """Import every module of wengert (nn, linalg, fft, scipy, ...): each declares its primitives."""
    modules = []
    for info in pkgutil.walk_packages(wengert.__path__, "wengert."):
        if info.name.endswith("__main__") or ".profiling._cli" in info.name:
            continue
        modules.append(importlib.import_module(info.name))
    return modules


def _custom_primitives():
    @wg.custom_vjp
    def f(x):
        return x * 2.0

    f.defvjp(lambda x: (x * 2.0, None), lambda res, g: (g * 2.0,))

    @wg.op
    def g(x):
        return x * 2.0, lambda ct: ct * 2.0
    return {"custom_vjp": f._prim, "op": g._prim}


# Deliberate exceptions, each with its reason: {primitive name: {interpreter: reason}}
EXCEPTIONS = {
    "setitem": {"batch": "recorded only by an in-place write on a tape; under vmap the write goes to "
                         "BatchTrace.write and runs per example"},
    "buffer_snapshot": {"batch": "recorded only by a Buffer on a tape; under vmap a Buffer updates "
                                 "functionally (scatter_set)"},
    "stop_gradient": {"vjp": "its derivative is zero: a tape records nothing and returns the value"},
}


def _has_vjp(p):
    return p.fused_vjp is not None or (p.vjp is not None and any(r is not None for r in p.vjp))


def _has_jvp(p):
    return p.linear or p.fused_jvp is not None or (p.jvp is not None and any(r is not None for r in p.jvp))


def test_every_primitive_has_a_rule_for_every_interpreter():
    _every_module()
    table = dict(PRIMITIVES)
    table.update(_custom_primitives())
    assert len(table) > 150
    missing = []
    for name, p in sorted(table.items()):
        allowed = EXCEPTIONS.get(name, {})
        for interpreter, present in (("vjp", _has_vjp(p)), ("jvp", _has_jvp(p)), ("batch", p.batch is not None)):
            if not present and interpreter not in allowed:
                missing.append(f"{name}: no {interpreter} rule")
            if present and interpreter in allowed:
                missing.append(f"{name}: listed as an exception for {interpreter} but has a rule")
    assert not missing, missing
    assert set(EXCEPTIONS) <= set(table), "an exception names a primitive that no longer exists"


def test_every_primitive_is_registered_under_its_own_name():
    """A primitive declared anywhere in the package is the table's entry for its name: two under one
    name would leave one out of the table (and out of the test above)."""
    modules = _every_module()
    seen = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Primitive) and value.name != "select":   # core's output selector
                seen.setdefault(id(value), value)
    unregistered = sorted(p.name for p in seen.values() if PRIMITIVES.get(p.name) is not p)
    assert not unregistered, f"primitives not in the table under their name: {unregistered}"
    names = [p.name for p in PRIMITIVES.values()]
    assert len(names) == len(set(names)) and all(PRIMITIVES[p.name] is p for p in PRIMITIVES.values())


def test_a_name_declared_twice_is_refused():
    with pytest.raises(ValueError, match="already declared"):
        defprim(np.sin, lambda g, ans, x: g, name="sin")


# --- vmap falls back only on NeedsLoop --------------------------------------------------------------
def _double(prim, rule):
    return Primitive(prim, lambda x: 2.0 * x, vjp=(lambda g, ans, x: 2.0 * g,), jvp=(lambda t, ans, x: 2.0 * t,),
                     batch=rule)


def _broken_rule(prim, vals, batched, params, trace):
    raise TypeError("a bug in this batching rule")


def _declining_rule(prim, vals, batched, params, trace):
    raise NeedsLoop("this rule cannot batch this case")


def test_a_rule_that_raises_type_error_surfaces_as_that_error():
    double = _double("test.double_broken", _broken_rule)
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # and no fallback warning either
        with pytest.raises(TypeError, match="a bug in this batching rule"):
            wg.vmap(lambda x: double(x) + 1.0)(np.ones((3, 2)))


def test_a_rule_that_raises_needs_loop_runs_per_example_with_a_warning():
    double = _double("test.double_declining", _declining_rule)
    xs = np.arange(6.0).reshape(3, 2)
    with pytest.warns(UserWarning, match="this rule cannot batch this case.*once per example"):
        out = wg.vmap(lambda x: wnp.sin(double(x)))(xs)
    np.testing.assert_allclose(out, np.sin(2.0 * xs))


def test_needs_loop_is_not_a_type_error():
    """``except TypeError`` in user code or in the engine must not catch the fallback signal."""
    assert not issubclass(NeedsLoop, TypeError)


def test_elementwise_rule_serves_one_and_several_batch_axes():
    """One rule for a plain vmap level (nb = 1) and for nested vmaps fused into one level."""
    hits = []

    def counting(prim, vals, batched, params, trace):
        hits.append(trace.nb)
        return elementwise_rule(prim, vals, batched, params, trace)

    double = _double("test.double_counting", counting)
    x = np.arange(12.0).reshape(3, 4)
    out = wg.vmap(wg.vmap(lambda v: double(v) * 1.0))(x)
    np.testing.assert_allclose(out, 2.0 * x)
    assert hits and set(hits) == {2}
    hits.clear()
    np.testing.assert_allclose(wg.vmap(double)(x), 2.0 * x)
    assert hits == [1]

"""wg.jit: staging, the signature cache, composition with the other transforms, value-dependent
rules that must stay right for every input the cached program receives, and errors."""
from __future__ import annotations

import gc
import re

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.transforms import _ir
from test_numpy_grads import CASE_IDS, CASES, Arg, rng_for

rng = np.random.default_rng(0)


def assert_trees_close(a, b, rtol=1e-10, atol=1e-12):
    la, ta = wg.tree.flatten(a)
    lb, tb = wg.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


def mlp(w, x):
    h = wnp.tanh(x @ w)
    return wnp.sum(h ** 2) + wnp.sum(wnp.where(h > 0, h, 0.0))


# --- common subexpressions: operands are equal exactly when their keys are -----------------------
def test_cse_keys_tell_apart_values_python_calls_equal():
    x = np.zeros(3)
    v = _ir.Var(0, (3,), np.float64)
    distinct = [1, 1.0, True, "1", (1,), [1], (1.0,), ((1,),), slice(1), (slice(1),), (slice(1.0),), (None,),
                ("slice", 1, None, None), (bool, True), None, Ellipsis, {"a": 1}, {"a": True}, v, (v,), x, (x,),
                float("nan"), (slice(None), 2), (slice(None), True), (slice(None), 2.0)]
    keys = [_ir._key(d) for d in distinct]
    for i, a in enumerate(keys):
        for j, b in enumerate(keys):
            assert (a == b) == (i == j), (distinct[i], distinct[j])
    assert _ir._key((slice(None), 2, [3, v])) == _ir._key((slice(None), 2, [3, v]))
    assert _ir._key(float("nan")) == _ir._key(float("nan"))  # a NaN constant: one equation, not two
    with pytest.raises(_ir._Unhashable):
        _ir._key((1, object()))


def test_cse_drops_identities_in_its_walk_as_the_two_passes_do():
    """cse(program, multiply) is drop_identities then cse in one walk: the same program, with a
    product by ones whose result another product repeats, and a returned product by ones kept."""
    from wengert.primitives.elementwise import multiply, sin
    x = _ir.Var(0, (3,), np.float64)
    v = [_ir.Var(k, (3,), np.float64) for k in range(1, 7)]
    eqns = [_ir.Eqn(multiply, (x, np.ones(3)), {}, (v[0],), (x,), None),      # x * 1: x
            _ir.Eqn(sin, (v[0],), {}, (v[1],), (v[0],), None),
            _ir.Eqn(sin, (x,), {}, (v[2],), (x,), None),                       # sin(x) again
            _ir.Eqn(multiply, (v[1], v[2]), {}, (v[3],), (v[1], v[2]), None),
            _ir.Eqn(multiply, (1.0, v[3]), {}, (v[4],), (v[3],), None),        # returned: kept
            _ir.Eqn(multiply, (v[3], 2.0), {}, (v[5],), (v[3],), None)]
    program = _ir.Program([x], eqns, [v[4], v[5], v[1]])
    fused = _ir.cse(program, multiply)
    apart = _ir.cse(_ir.drop_identities(program, multiply))
    assert [(e.prim, e.args, e.outs) for e in fused.eqns] == [(e.prim, e.args, e.outs) for e in apart.eqns]
    assert fused.outputs == apart.outputs
    assert len(fused.eqns) == 4 and fused.outputs[2] is v[1]   # sin(x) once, x * 1 gone, 1.0 * v3 kept


# --- staging and the cache -----------------------------------------------------------------------
def test_jit_equals_eager_and_value_and_grad_stages_both_passes():
    w, x = rng.normal(size=(3, 2)), rng.normal(size=(4, 3))
    assert_trees_close(wg.jit(mlp)(w, x), mlp(w, x))
    step = wg.jit(wg.value_and_grad(mlp))
    for _ in range(3):  # the same program on new values, including the mask h > 0
        w = rng.normal(size=(3, 2))
        assert_trees_close(step(w, x), wg.value_and_grad(mlp)(w, x))
    assert step.traces == 1
    text = step.lower(w, x).as_text()
    assert "tanh(" in text and "backward of tanh" in text and "Tracer" not in text


def test_a_new_signature_retraces_and_the_cache_is_bounded():
    calls = []

    def f(x):
        calls.append(1)
        return wnp.sin(x) * 2

    jf = wg.jit(f, cache_size=2)
    for shape in [(2,), (3,), (2,), (2, 2), (3,)]:
        x = rng.normal(size=shape)
        assert_trees_close(jf(x), np.sin(x) * 2)
    # (2,), (3,) traced; (2,) hit; (2, 2) evicted (3,); (3,) traced again
    assert len(calls) == jf.traces == 4
    jf(np.float32(1.0)), jf(1.0), jf(np.ones(2, np.float32))  # dtype and leaf type are part of it
    assert jf.traces == 7
    assert jf(1.0) == pytest.approx(np.sin(1.0) * 2)


def test_static_arguments_key_the_cache_and_may_steer_control_flow():
    def f(x, n, mode="sin"):
        for _ in range(n):
            x = wnp.sin(x) if mode == "sin" else wnp.cos(x)
        return x

    jf = wg.jit(f, static_argnums=1, static_argnames="mode")
    x = rng.normal(size=3)
    assert_trees_close(jf(x, 2), np.sin(np.sin(x)))
    assert_trees_close(jf(x, 3, mode="cos"), np.cos(np.cos(np.cos(x))))
    assert_trees_close(jf(x, 2), np.sin(np.sin(x)))
    assert jf.traces == 2
    with pytest.raises(TypeError, match="not hashable"):
        wg.jit(lambda x, s: x, static_argnums=1)(x, [1, 2])
    with pytest.raises(TypeError, match="static"):
        wg.jit(lambda x, s: x)(x, "text")


def test_pytrees_in_and_out_kwargs_integer_and_constant_outputs():
    def f(d, k, scale=1.0):
        return {"a": d["x"][k] * scale, "b": [d["y"], 3.0, np.arange(2)]}

    jf = wg.jit(f)
    d = {"x": rng.normal(size=4), "y": 1.5}
    for k in (1, 3):
        out = jf(d, k, scale=2.0)
        assert_trees_close(out, f(d, k, scale=2.0))
    out["b"][2][0] = 7  # a constant output is a fresh array per call
    assert jf(d, 1, scale=2.0)["b"][2][0] == 0


def test_generated_code_is_deterministic_and_names_the_source_line():
    w, x = rng.normal(size=(3, 2)), rng.normal(size=(4, 3))
    texts = [wg.jit(wg.value_and_grad(mlp)).lower(w, x).as_text() for _ in range(2)]
    assert texts[0] == texts[1]
    assert "h = wnp.tanh(x @ w)" in texts[0] and "test_jit.py:" in texts[0]
    compile(texts[0], "<test>", "exec")  # the printed program is the Python that runs


def test_a_program_lowered_by_a_call_gets_its_comments_by_tracing_again():
    """A call records no source lines (they cost a stack walk per equation): ``as_text()`` traces
    once more, recording them, and gives the text a program lowered by ``lower()`` has."""
    w, x = rng.normal(size=(3, 2)), rng.normal(size=(4, 3))
    step = wg.jit(wg.value_and_grad(mlp))
    expected = step(w, x)
    lowered = step.lower(w, x)
    assert step.traces == 1 and not lowered.sources
    assert all(eqn.source is None for eqn in lowered.program.eqns)
    text = lowered.as_text()
    assert step.traces == 2 and lowered.sources
    assert text == wg.jit(wg.value_and_grad(mlp)).lower(w, x).as_text()
    assert "h = wnp.tanh(x @ w)" in text and "backward of tanh" in text
    assert step.lower(w, x) is lowered and lowered.as_text() is text and step.traces == 2
    assert_trees_close(step(w, x), expected)  # the program traced again is the one that runs


def test_dead_code_and_common_subexpressions_are_removed():
    def f(x):
        unused = wnp.exp(x)  # noqa: F841
        return wnp.sum(x[:, 0] * x[:, 0]) + wnp.sum(wnp.sin(x[:, 0]))

    lowered = wg.jit(f).lower(rng.normal(size=(3, 2)))
    code = "\n".join(line.split("#")[0] for line in lowered.as_text().splitlines())
    assert "exp(" not in code and code.count("[:, 0]") == 1
    assert lowered.eqns < lowered.eqns_traced


def test_python_control_flow_on_a_staged_value_names_the_line():
    def f(x):
        if wnp.sum(x) > 0:
            return x
        return -x

    with pytest.raises(wg.ConcretizationError, match=r"test_jit.py:\d+ \(if wnp.sum\(x\) > 0:.*static_argnums.*wnp.where"):
        wg.jit(f)(rng.normal(size=3))
    for convert in (float, int, bool, lambda v: v.item()):
        with pytest.raises(wg.ConcretizationError):
            wg.jit(lambda x: convert(wnp.sum(x)))(np.ones(2))
    with pytest.raises(wg.ConcretizationError, match="wnp.where"):
        wg.jit(lambda x: wnp.sum(x[x > 0]))(np.ones(3))


# --- composition -----------------------------------------------------------------------------------
f_sin = lambda x: wnp.sum(wnp.sin(x) * x)  # noqa: E731


def test_jit_of_forward_mode_vmap_and_hessian():
    x, t = rng.normal(size=5), rng.normal(size=5)
    assert_trees_close(wg.jit(lambda x, t: wg.jvp(f_sin, (x,), (t,)))(x, t), wg.jvp(f_sin, (x,), (t,)))
    g = wg.grad(lambda x: wnp.sin(x) * x)
    assert_trees_close(wg.jit(wg.vmap(g))(x), wg.vmap(g)(x))
    assert_trees_close(wg.jit(wg.hessian(f_sin))(x), wg.hessian(f_sin)(x))


def test_transforms_of_a_jitted_function_and_nested_jit():
    x = rng.normal(size=5)
    assert_trees_close(wg.grad(wg.jit(f_sin))(x), wg.grad(f_sin)(x))
    assert_trees_close(wg.vmap(wg.jit(wnp.sin))(x), np.sin(x))
    assert_trees_close(wg.jit(lambda x: wg.jit(wnp.sin)(x) * 2)(x), 2 * np.sin(x))


def counted(f):
    """``f`` with a count of how many times its Python body ran (each trace runs it once)."""
    def g(*args):
        g.runs += 1
        return f(*args)
    g.runs = 0
    return g


def pair(x, y):  # several outputs, one of them integer, and an integer input
    h = wnp.tanh(x[..., :3] * y) + wnp.sin(x[..., 1:4]) ** 2
    return {"h": h, "s": wnp.sum(h * x[..., :3]), "n": wnp.argmax(h)}


def test_grad_of_jit_is_one_primitive_traced_once_per_signature():
    x, y = rng.normal(size=5), rng.normal(size=3)
    body = counted(lambda x, y: wnp.sum(wnp.sin(x[:3]) * y) * wnp.prod(x[3:]))
    fj = wg.jit(body)
    loss = lambda x, y: fj(x, y) * 2.0  # noqa: E731
    for _ in range(3):
        assert_trees_close(wg.grad(loss, argnums=(0, 1))(x, y), wg.grad(lambda x, y: body(x, y) * 2.0, argnums=(0, 1))(x, y))
    # one trace of the program and one of its VJP's (the eager references ran the body 3 times)
    assert body.runs == 2 + 3 and fj.traces == 2
    wg.grad(loss)(x + 1.0, y)                       # same signature: no new trace
    assert fj.traces == 2
    wg.grad(loss)(np.ones(7), y)                    # a new shape: the program and its VJP again
    assert fj.traces == 4
    wg.check_grads(loss, (x, y))                    # finite differences, through the jitted VJP


def test_grad_of_jit_runs_the_forward_program_once_keeping_residuals():
    """Under a reverse level, the forward program also returns what the VJP reads; the backward
    program starts from it (the VJP program that computes the forward pass again is not made).
    Its in-place updates never write into the residuals: a vjp_fn called twice agrees."""
    idx = np.array([0, 2, 2, 4, 1])

    def body(x, w):
        gathered = x[idx] * w               # repeated reads: the backward pass scatter-adds
        return wnp.sum(wnp.tanh(gathered) ** 2) + wnp.sum(x[1:3] * gathered[:2]), gathered
    fj = wg.jit(body)
    x, w = rng.normal(size=5), rng.normal(size=5)
    ct = (1.5, rng.normal(size=5))
    out, pull = wg.vjp(fj, x, w)
    want_out, want_pull = wg.vjp(body, x, w)
    assert_trees_close(out, want_out)
    first = pull(ct)
    assert_trees_close(first, want_pull(ct))
    assert_trees_close(pull(ct), first)                       # residuals unchanged by the first call
    assert all(not flat.vjp._cache for flat in fj._flats.values())   # no recomputing VJP program
    # the backward pass recorded by an outer transform (a traced cotangent) still differentiates
    through = lambda c: wnp.sum(pull((1.0, c))[0] ** 2)      # noqa: E731
    eager = lambda c: wnp.sum(want_pull((1.0, c))[0] ** 2)  # noqa: E731
    assert_trees_close(wg.grad(through)(ct[1]), wg.grad(eager)(ct[1]))
    wg.check_grads(lambda x, w: fj(x, w)[0], (x, w))


def test_grad_of_jit_never_batches_a_forward_step_with_a_backward_step():
    """x * 2 in the forward pass and g * 2 (its VJP) in the backward pass look alike to the
    vectorizing pass; batched together, the forward program would read the cotangents."""
    def doubled(xs):
        return [x * 2.0 for x in xs]
    xs = [rng.normal(size=3) for _ in range(8)]
    cts = [rng.normal(size=3) for _ in range(8)]
    out, pull = wg.vjp(wg.jit(doubled), xs)
    assert_trees_close(out, doubled(xs))
    assert_trees_close(pull(cts), ([2.0 * c for c in cts],))


# --- indices a program computes (argsort, argmax) with plain operands: the level holding them runs
# the indexing. A constant tangent, or a Hessian's seed, is a plain array indexed by a staged index.
def _weights(n):
    return np.arange(1.0, n + 1.0)


def _buffer_at_computed_places(x):
    b = wg.Buffer.zeros(x.shape)
    order = wnp.argsort(x)
    for k in range(3):
        b[order[k]] = x[k] ** 2
    return wnp.sum(b.freeze() * _weights(x.size))


INDEX_PROGRAMS = {
    "read": lambda x: wnp.sum(x[wnp.argsort(x)] ** 2 * _weights(x.size)),
    "at.set": lambda x: wnp.sum(x.at[wnp.argsort(x)[:3]].set(x[:3] ** 2) * _weights(x.size)),
    "at.add": lambda x: wnp.sum(x.at[wnp.argsort(x)[:3]].add(x[:3] ** 2) ** 2),
    "take_along_axis": lambda x: wnp.sum(wnp.take_along_axis(x, wnp.argsort(x), 0) ** 3 * _weights(x.size)),
    "sort": lambda x: wnp.sum(wnp.sort(x) ** 2 * _weights(x.size)),
    "argmax": lambda x: x[wnp.argmax(x)] ** 3,
    "Buffer": _buffer_at_computed_places,
}
INDEX_TRANSFORMS = {
    "jit(jvp), constant tangent": lambda f, x, t: wg.jit(lambda x: wg.jvp(f, (x,), (t,)))(x),
    "jvp(jit)": lambda f, x, t: wg.jvp(wg.jit(f), (x,), (t,)),
    "vmap(jvp), constant tangent": lambda f, x, t: tuple(
        r[0] for r in wg.vmap(lambda x: wg.jvp(f, (x,), (t,)))(np.stack([x, x]))),
    "jit(hessian) @ t": lambda f, x, t: wg.jit(wg.hessian(f))(x) @ t,
}


@pytest.mark.parametrize("transform", INDEX_TRANSFORMS, ids=str)
@pytest.mark.parametrize("name", INDEX_PROGRAMS, ids=str)
def test_indices_the_program_computes_index_plain_operands_under_jit_and_vmap(name, transform):
    f = INDEX_PROGRAMS[name]
    for x in (np.array([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]), rng.normal(size=6)):   # two orders
        t = rng.normal(size=6)
        got = INDEX_TRANSFORMS[transform](f, x, t)
        want = wg.hessian(f)(x) @ t if transform.startswith("jit(hessian)") else wg.jvp(f, (x,), (t,))
        assert_trees_close(got, want, rtol=1e-9)


def test_at_multiply_with_computed_indices_runs_under_jit_and_is_refused_only_when_differentiated():
    f = lambda x: wnp.sum(x.at[wnp.argsort(x)[:3]].multiply(x[:3] ** 2))
    x = np.array([3.0, 1.0, 2.0, 6.0, 5.0, 4.0])
    want = x.copy()
    np.multiply.at(want, np.argsort(x)[:3], x[:3] ** 2)
    assert_trees_close(wg.jit(f)(x), want.sum())
    with pytest.raises(NotImplementedError, match="static argument"):
        wg.jit(wg.grad(f))(x)


def test_a_primitive_named_like_the_program_does_not_call_the_program():
    """checkpoint's custom_vjp function is called ``run``, like grad(jit(f))'s VJP program: the
    generated module names them apart (the program called itself with the primitive's keywords)."""
    f = lambda x: wnp.sum(wg.checkpoint(lambda y: wnp.sin(y) ** 2)(x))
    x = rng.normal(size=5)
    assert_trees_close(wg.grad(wg.jit(f))(x), wg.grad(f)(x))

    @wg.custom_vjp
    def square(x):
        return x * x
    square.defvjp(lambda x: (x * x, x), lambda x, g: (2.0 * x * g,))
    assert_trees_close(wg.jit(square)(x), x * x)   # the program is named after the function
    assert_trees_close(wg.grad(lambda x: wnp.sum(wg.jit(square)(x)))(x), 2.0 * x)


def test_second_order_jvp_and_hessian_of_jit():
    x = rng.normal(size=5)
    fj = wg.jit(f_sin)
    assert_trees_close(wg.hessian(fj)(x), wg.hessian(f_sin)(x))
    assert_trees_close(wg.grad(lambda x: wg.grad(fj)(x).sum())(x), wg.grad(lambda x: wg.grad(f_sin)(x).sum())(x))
    t = rng.normal(size=5)
    assert_trees_close(wg.jvp(fj, (x,), (t,)), wg.jvp(f_sin, (x,), (t,)))
    wg.check_grads(fj, (x,), order=2, modes=("fwd", "rev"))


def test_pytree_outputs_integer_leaves_and_vmap_of_jit():
    x, y = rng.normal(size=5), rng.normal(size=3)
    pj = wg.jit(pair)
    assert_trees_close(wg.grad(lambda x: pj(x, y)["s"])(x), wg.grad(lambda x: pair(x, y)["s"])(x))
    assert_trees_close(wg.jvp(lambda x: pj(x, y)["h"], (x,), (y[:1] + x,)), wg.jvp(lambda x: pair(x, y)["h"], (x,), (y[:1] + x,)))
    xs = rng.normal(size=(4, 5))
    body = counted(pair)
    vj = wg.vmap(wg.jit(body), in_axes=(0, None))
    for _ in range(2):
        assert_trees_close(vj(xs, y), wg.vmap(pair, in_axes=(0, None))(xs, y))
    assert body.runs == 1                            # the batched program is traced once
    per_example = wg.vmap(wg.grad(lambda x, y: wg.jit(pair)(x, y)["s"]), in_axes=(0, None))(xs, y)
    assert_trees_close(per_example, np.stack([wg.grad(lambda x: pair(x, y)["s"])(r) for r in xs]))


def test_jitted_function_closing_over_a_traced_value_runs_inline():
    x = rng.normal(size=5)
    body = counted(lambda b, a: wnp.sum(wnp.sin(b) * a))
    g = wg.grad(lambda a: wg.jit(lambda b: body(b, a))(x))(0.7)
    np.testing.assert_allclose(g, np.sum(np.sin(x)))


def test_buffer_at_and_in_place_writes():
    x = rng.normal(size=5)

    def buf(x):
        b = wg.Buffer.zeros((3,))
        for i in range(3):
            b[i] = wnp.sum(x[i:i + 2] ** 2)
        return wnp.sum(b.freeze() * wnp.arange(3.0))

    def setitem(x):
        y = x * 1.0
        y[1] = x[0] ** 2
        return wnp.sum(y * y)

    def at(x):
        return wnp.sum(wg.at(x)[1:3].set(x[0] ** 2) ** 2)

    for f in (buf, setitem, at):
        assert_trees_close(wg.jit(f)(x), f(x))
    for f in (buf, at):
        assert_trees_close(wg.jit(wg.grad(f))(x), wg.grad(f)(x))


def _staged(f, *args):
    """The program ``wg.jit(f)`` stages for ``args``, before any pass."""
    jitted = wg.jit(f)
    _, static, leaves, treedef = jitted._signature(args, {})
    return jitted._stage(static, leaves, treedef, sources=False)[0]


def test_reads_cotangents_accumulate_as_one_index_add_chain_and_equal_eager():
    # each read x[index] adds its cotangent into x's accumulator with one index_add (no dense
    # zeros plus an add per read); repeated and overlapping reads, a dense use of x beside them, a
    # complex cotangent into a real x, and a second-order grad through the reads all equal eager
    x = rng.normal(size=(4, 6))
    w = rng.normal(size=6)

    def reads(x):
        total = wnp.sum(x * 0.5)                                  # a dense contribution first
        for j in range(6):
            total = total + wnp.sum(wnp.sin(x[:, j]) * w[j])
        return total + wnp.sum(x[1:3, 2:5] ** 2) + x[1, 2] * x[1, 2] + wnp.sum(x[:, 0])  # repeats, overlaps

    def complex_reads(x):
        z = x[:, 0] * (1 + 2j) + x[:, 1] * 1j
        return wnp.real(wnp.sum(z * wnp.conj(z))) + wnp.sum(x[:, 0])

    def second_order(x):
        return wnp.sum(wg.grad(reads)(x) ** 2)

    for f in (reads, complex_reads, second_order):
        assert_trees_close(wg.jit(wg.grad(f))(x), wg.grad(f)(x))
        assert_trees_close(wg.jit(wg.grad(f), vectorize=False)(x), wg.grad(f)(x))
    program = _staged(wg.grad(lambda x: sum(wnp.sum(wnp.sin(x[:, j]) * w[j]) for j in range(6))), x)
    names = {o.id: e.prim.name for e in program.eqns for o in e.outs}
    scatters = [e for e in program.eqns if e.prim.name == "index_add"]
    assert len(scatters) == 6
    assert sum(1 for e in scatters if type(e.args[0]) is not _ir.Var) == 1   # zeros once, then one chain
    assert sum(1 for e in scatters if names.get(getattr(e.args[0], "id", None)) == "index_add") == 5
    assert not any(e.prim.name == "add" and e.outs[0].shape == x.shape for e in program.eqns)


def test_a_staged_write_leaves_earlier_samples_and_the_program_as_they_were():
    # the write's sample is made in place (no copy per write): a value read before the write keeps
    # its own program value, and a loop of writes into a traced array equals eager
    x = rng.normal(size=(3, 4))

    def f(x):
        y = x * 2.0
        before = y[0] + 1.0
        for j in range(4):
            y[0, j] = wnp.sin(x[1, j])
        return wnp.sum(y * y) + wnp.sum(before)

    assert_trees_close(wg.jit(f)(x), f(x))
    assert_trees_close(wg.jit(wg.value_and_grad(f))(x), wg.value_and_grad(f)(x))


def test_the_collector_is_off_while_lowering_and_comes_back_after_errors():
    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return wnp.sum(x)

    assert wg.jit(f)(np.ones(2)) == 2.0 and seen == [False] and gc.isenabled()
    with pytest.raises(wg.ConcretizationError):
        wg.jit(lambda x: float(wnp.sum(x)))(np.ones(2))
    assert gc.isenabled()
    gc.disable()   # a caller that runs without the collector keeps it off
    try:
        wg.jit(f)(np.ones(3))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_updates_never_write_into_the_callers_arrays():
    # the in-place pass writes only into arrays the program made: an input that is dead after a
    # functional update is still the caller's
    def at_set(x):
        return wnp.sum(x.at[0].set(5.0) * 2)

    def buffer(x):
        b = wg.Buffer(x)
        b[1] = x[0] * 3
        return wnp.sum(b.freeze())

    def grad_reads_columns(x):
        return wnp.sum(x[:, 0] * x[:, 1])

    for fn, shape in ((at_set, (3,)), (buffer, (3,)), (grad_reads_columns, (3, 2))):
        for jitted in (wg.jit(fn), wg.jit(wg.value_and_grad(fn))):
            x = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
            before = x.copy()
            first, second = jitted(x), jitted(x)
            np.testing.assert_array_equal(x, before)
            assert repr(first) == repr(second)


def test_custom_vjp_checkpoint_nn_linalg_fft_complex_scipy():
    import wengert.nn as nn
    import wengert.scipy.special as sp

    @wg.custom_vjp
    def f(x):
        return wnp.sin(x)

    f.defvjp(lambda x: (wnp.sin(x), wnp.cos(x)), lambda c, g: (g * c,))
    x = rng.normal(size=5)
    a = rng.normal(size=(4, 4))
    a = a @ a.T + 4 * np.eye(4)
    cases = [
        (lambda x: wnp.sum(f(x) * 3), x),
        (lambda x: wnp.sum(wg.checkpoint(wnp.sin)(x)), x),
        (lambda x: wnp.sum(nn.log_softmax(x) * wnp.arange(5.0)), x),
        (lambda a: wnp.linalg.slogdet(a)[1] + wnp.sum(wnp.linalg.eigh(a)[0] ** 2), a),
        (lambda x: wnp.sum(wnp.abs(wnp.fft.fft(x)) ** 2), x),
        (lambda z: wnp.sum(wnp.abs(z * z)), x + 1j * x[::-1]),
        (lambda x: wnp.sum(sp.gammaln(x)), np.abs(x) + 0.5),
    ]
    for fn, arg in cases:
        assert_trees_close(wg.jit(wg.grad(fn))(arg), wg.grad(fn)(arg))


# --- value-dependent rules: the cached program meets inputs that take the other branch ------------
OTHER_BRANCH = {
    "relu": (lambda x: wnp.sum(wnp.maximum(x, 0) ** 2), np.array([1.0, 2.0, -3.0]), np.array([-1.0, -2.0, 3.0])),
    "abs": (lambda x: wnp.sum(wnp.abs(x)), np.array([1.0, -2.0]), np.array([-1.0, 0.0])),
    "max ties": (lambda x: wnp.max(x), np.array([1.0, 2.0, 0.5]), np.array([2.0, 2.0, 1.0])),
    "argmax index": (lambda x: x[wnp.argmax(x)] * 2, np.array([1.0, 3.0, 2.0]), np.array([5.0, 3.0, 2.0])),
    "prod zero": (lambda x: wnp.prod(x), np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0])),
    "cumprod zero": (lambda x: wnp.sum(wnp.cumprod(x)), np.array([1.0, 2.0, 3.0]), np.array([0.0, 2.0, 0.0])),
    "power 0**0": (lambda x: wnp.sum(x ** x[0]), np.array([1.5, 2.0]), np.array([0.0, 0.0])),
    "complex abs 0": (lambda z: wnp.sum(wnp.abs(z)), np.array([1.0 + 1j, 2.0]), np.array([0j, 1.0])),
    "det singular": (lambda a: wnp.linalg.det(a), np.eye(2) * 2.0, np.array([[1.0, 2.0], [2.0, 4.0]])),
    "sort": (lambda x: wnp.sum(wnp.sort(x) * wnp.arange(3.0)), np.array([1.0, 2.0, 3.0]), np.array([3.0, 1.0, 2.0])),
    "clip": (lambda x: wnp.sum(wnp.clip(x, -1, 1) ** 2), np.array([0.5, 2.0, -3.0]), np.array([-3.0, 0.5, 2.0])),
}


@pytest.mark.parametrize("name", list(OTHER_BRANCH))
def test_rules_that_read_values_are_right_for_every_input(name):
    fn, first, second = OTHER_BRANCH[name]
    jitted = wg.jit(wg.grad(fn))
    forward = wg.jit(lambda x, t: wg.jvp(fn, (x,), (t,)))
    for x in (first, second):
        assert_trees_close(jitted(x), wg.grad(fn)(x))
        t = np.linspace(0.5, 1.5, x.size).reshape(x.shape).astype(x.dtype)
        assert_trees_close(forward(x, t), wg.jvp(fn, (x,), (t,)))
    assert jitted.traces == 1


def test_traced_integer_indices_are_part_of_the_program():
    def gather(x, i):
        return wnp.sum(x[i] ** 2)

    jitted = wg.jit(wg.grad(gather))
    x = rng.normal(size=5)
    for idx in (np.array([0, 2, 2, 4]), np.array([4, 4, 1, 0])):
        assert_trees_close(jitted(x, idx), wg.grad(gather)(x, idx))
    assert jitted.traces == 1


# --- the systematic table under jit(grad) and jit(jvp), each on two draws --------------------------
# Rows whose result's size depends on the values: under jit they are refused with a TypeError that
# says so (ConcretizationError, or the function's own refusal of per-example sizes), never run with
# a size baked in from the trace.
REFUSAL = re.compile("depend|differ|each example|per example")
VALUE_SHAPED = {"x[x > 0]", "piecewise", "piecewise otherwise", "piecewise constant", "trim_zeros", "polydiv",
                "polydiv shorter", "roots", "union1d", "intersect1d", "intersect1d return_indices", "setdiff1d",
                "setxor1d"} | {name for name in CASE_IDS if name.startswith("unique")}


def _draws(name, count=2):
    fn, specs = CASES[name]
    r = rng_for(name)
    return fn, specs, [[s.draw(r) if isinstance(s, Arg) else s for s in specs] for _ in range(count)]


def _float_positions(specs):
    return tuple(i for i, s in enumerate(specs) if isinstance(s, Arg))


def _scalar_loss(fn, specs, args):
    nums = _float_positions(specs)
    out = wg.tree.leaves(fn(*args))
    weights = [np.cos(np.arange(np.size(o))).reshape(np.shape(o)) for o in out]
    inexact = [np.issubdtype(np.asarray(o).dtype, np.inexact) for o in out]

    def loss(*xs):
        full = list(args)
        for k, v in zip(nums, xs):
            full[k] = v
        total = 0.0
        for leaf, w, keep in zip(wg.tree.leaves(fn(*full)), weights, inexact):
            if keep:
                total = total + wnp.sum(wnp.real(leaf * w))
        return total

    return loss, nums


@pytest.mark.parametrize("name", CASE_IDS)
def test_every_table_row_under_jit_grad_and_jvp_equals_eager(name):
    fn, specs, draws = _draws(name)
    if name in VALUE_SHAPED:
        with pytest.raises(TypeError, match=REFUSAL):
            wg.jit(fn)(*draws[0])
        return
    loss, nums = _scalar_loss(fn, specs, draws[0])
    if not nums:
        return
    jitted_grad = wg.jit(lambda *xs: wg.grad(loss, argnums=tuple(range(len(nums))))(*xs))

    def tangent_run(*xs_and_ts):
        xs, ts = xs_and_ts[:len(nums)], xs_and_ts[len(nums):]
        return wg.jvp(loss, tuple(xs), tuple(ts))

    jitted_jvp = wg.jit(tangent_run)
    first = [draws[0][k] for k in nums]
    try:
        jitted_grad(*first)
    except TypeError as e:
        # a function that refuses values it cannot handle one program for (vmap's per-example
        # refusals meet staged values too): a clear error, never a result with a baked-in size
        assert REFUSAL.search(str(e)), e
        return
    for args in draws:
        xs = [args[k] for k in nums]
        ts = [np.cos(np.arange(np.size(x)) + 1.0).reshape(np.shape(x)) for x in xs]
        assert_trees_close(jitted_grad(*xs), wg.grad(loss, argnums=tuple(range(len(nums))))(*xs), rtol=1e-9)
        assert_trees_close(jitted_jvp(*xs, *ts), tangent_run(*xs, *ts), rtol=1e-9)
    assert jitted_grad.traces == 1


# --- in-place updates: only where no alias of the array is read afterwards -------------------------
def test_updates_write_in_place_only_when_nothing_reads_the_old_array():
    def loop(x):
        b = wg.Buffer.zeros((4,))
        for i in range(4):
            b[i] = wnp.sum(x[i] * x[:, i])
        b[1] = b[0] * 3  # an overwrite, read from the buffer
        return wnp.sum(b.freeze() ** 2)

    def aliased(x):
        y = x * 2.0
        view = y[1:3]                 # a view of y, read after the update below
        z = wg.at(y)[1].set(7.0)
        return wnp.sum(view) + wnp.sum(z * z)

    def read_after(x):
        y = x * 2.0
        z = wg.at(y)[0].set(1.0)
        return wnp.sum(z) + wnp.sum(y)  # y itself is read after the update

    x = rng.normal(size=(4, 4))
    for f in (loop, aliased, read_after):
        step = wg.jit(wg.value_and_grad(f))
        for _ in range(2):
            assert_trees_close(step(x), wg.value_and_grad(f)(x))
            x = rng.normal(size=(4, 4))
    code = wg.jit(wg.value_and_grad(loop)).lower(x).as_text()
    assert "set_in_place(" in code and "add_at_in_place(" in code
    for f in (aliased, read_after):
        text = wg.jit(f).lower(x).as_text()
        assert "scatter_set(" in text and "set_in_place(" not in text


# --- x[idx] = v under jit(grad): the tape's write on staged values is staged by jit ---------------
def written(x):
    y = x * 1.0
    y[1:3] = wnp.sin(x[0:2]) * 2.0
    y[0] = y[4] ** 2
    y[3:] += x[:2] ** 2
    return wnp.sum(y * y * x)


def central_differences(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)]).reshape(x.shape)


def test_in_place_writes_under_jit_of_grad_match_finite_differences():
    step = wg.jit(wg.grad(written))
    for x in (np.linspace(0.2, 1.3, 5), rng.normal(size=5)):   # the second draw reuses the program
        np.testing.assert_allclose(step(x), central_differences(written, x), rtol=1e-6, atol=1e-8)
        assert_trees_close(step(x), wg.grad(written)(x))
    assert step.traces == 1
    vg = wg.jit(wg.value_and_grad(written))(np.ones(5))
    assert_trees_close(vg, wg.value_and_grad(written)(np.ones(5)))


def test_in_place_writes_under_jit_of_jvp_match_finite_differences():
    """jvp writes the value in place and the tangent anew; under jit both writes are staged."""
    step = wg.jit(lambda x, t: wg.jvp(written, (x,), (t,)))
    for x in (np.linspace(0.2, 1.3, 5), rng.normal(size=5)):   # the second draw reuses the program
        t = rng.normal(size=5)
        value, tangent = step(x, t)
        np.testing.assert_allclose(value, written(x), rtol=1e-12)
        np.testing.assert_allclose(tangent, central_differences(written, x) @ t, rtol=1e-6, atol=1e-8)
        assert_trees_close((value, tangent), wg.jvp(written, (x,), (t,)))
    assert step.traces == 1


def test_in_place_writes_under_jit_of_jvp_see_views_and_refuse_inputs():
    x = rng.normal(size=5)
    f = lambda y: wnp.sum(_write_after(y, lambda z: z[0:2]))   # the view reads the 3.0 written
    np.testing.assert_allclose(wg.jit(lambda x: wg.jvp(f, (x,), (x,)))(x),
                               (f(x.copy()), x[1] * 2 * x[1]), rtol=1e-12)

    def into_input(y):
        y[0] = 1.0
        return y
    inner = rng.normal(size=3)
    with pytest.raises(wg.InPlaceWriteError, match="input"):
        wg.jit(lambda x: wg.jvp(into_input, (x * 2.0,), (x,)))(inner)


def test_in_place_writes_under_jit_of_grad_refused_as_under_grad():
    x = rng.normal(size=5)
    f = lambda x: wnp.sum(_write_after(x, lambda y: wnp.sin(y)))
    for transform in (wg.grad, lambda f: wg.jit(wg.grad(f))):
        with pytest.raises(wg.InPlaceWriteError, match="sin saved"):
            transform(f)(x)


def test_a_view_made_before_a_write_under_jit_of_grad_reads_the_write():
    x = rng.normal(size=5)
    f = lambda x: wnp.sum(_write_after(x, lambda y: y[0:2]))   # kept[0] reads the 3.0 written
    for transform in (wg.grad, lambda f: wg.jit(wg.grad(f))):
        np.testing.assert_allclose(transform(f)(x), [0, 2 * x[1], 0, 0, 0], rtol=1e-12)


def _write_after(x, use):
    y = x * 1.0
    kept = use(y)
    y[0] = 3.0
    return kept * y[:kept.shape[0]]


def test_in_place_writes_still_refused_under_two_differentiating_transforms():
    def f(x):
        y = x * 1.0
        y[0] = x[1] ** 2
        return wnp.sum(y ** 3)
    with pytest.raises(wg.InPlaceWriteError, match="single transform"):
        wg.grad(lambda x: wg.grad(f)(x).sum())(rng.normal(size=3))


# --- donate_argnums -------------------------------------------------------------------------------
def sgd(params, x, lr):
    value, grads = wg.value_and_grad(lambda p: wnp.sum(wnp.tanh(x @ p["w"]) ** 2) + wnp.sum(p["b"] ** 2))(params)
    return value, {k: params[k] - lr * grads[k] for k in params}


def test_donated_parameters_are_updated_in_their_own_buffers():
    params = {"w": rng.normal(size=(4, 3)), "b": rng.normal(size=3)}
    x = rng.normal(size=(6, 4))
    expected = wg.jit(sgd)(params, x, 0.1)
    step = wg.jit(sgd, donate_argnums=0)
    donated = {k: v.copy() for k, v in params.items()}
    buffers = dict(donated)
    value, new = step(donated, x, 0.1)
    assert_trees_close((value, new), expected)
    assert all(np.shares_memory(new[k], buffers[k]) for k in params)   # written in place
    assert not np.shares_memory(expected[1]["w"], params["w"])         # without donation: fresh arrays
    again = step(new, x, 0.1)                                          # the usual loop: donate the result
    assert_trees_close(again, wg.jit(sgd)(expected[1], x, 0.1))


def test_donation_errors_name_the_problem():
    x = rng.normal(size=(3, 3))
    add = wg.jit(lambda a, b: a * 2.0 + b, donate_argnums=0)
    with pytest.raises(ValueError, match="also passed as another argument"):
        add(x, x[0])
    read_only = x.copy()
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        add(read_only, x)
    with pytest.raises(ValueError, match="both static and donated"):
        wg.jit(lambda a, n: a * n, static_argnums=1, donate_argnums=1)(x, 2)
    with pytest.raises(ValueError, match="positional argument"):
        wg.jit(lambda a: a * 2.0, donate_argnums=3)(x)
    mine = x.copy()
    np.testing.assert_allclose(add(mine, x), x * 3.0)


# --- identities: x * 1 is x ------------------------------------------------------------------------
def test_multiplying_by_ones_is_dropped_only_where_the_product_is_x_itself():
    x = np.arange(1.0, 7.0).reshape(2, 3)
    ones64 = np.broadcast_to(np.ones((), np.float64), (2, 3))
    loss = lambda x: wnp.sum(wnp.tanh(x) * ones64)                 # noqa: E731
    step = wg.jit(wg.value_and_grad(loss))
    code = step.lower(x).code                                      # the program without its comments
    assert code.count("multiply(") == wg.jit(wg.value_and_grad(
        lambda x: wnp.sum(wnp.tanh(x)))).lower(x).code.count("multiply(")
    np.testing.assert_allclose(step(x)[1], wg.grad(loss)(x))
    # float32 times float64 ones is a float64 array, not x: kept
    x32 = x.astype(np.float32)
    promote = wg.jit(lambda x: x * ones64)
    assert promote(x32).dtype == np.float64 and "multiply(" in promote.lower(x32).code
    # a returned product is a new array, never the caller's x
    same = wg.jit(lambda x: x * 1.0)
    assert not np.shares_memory(same(x), x)
    # ones that broadcast x to a larger shape are kept
    grow = wg.jit(lambda v: v * np.ones((2, 3)))
    np.testing.assert_array_equal(grow(np.arange(3.0)), np.ones((2, 3)) * np.arange(3.0))


def test_an_unused_input_gradient_is_read_only_zeros_as_in_eager_not_a_copy_per_call():
    p = {"used": np.arange(4.0), "unused": np.ones((64, 64))}
    loss = lambda p: wnp.sum(p["used"] ** 2)                        # noqa: E731
    step = wg.jit(wg.grad(loss))
    g, eager = step(p), wg.grad(loss)(p)
    np.testing.assert_array_equal(g["unused"], eager["unused"])
    assert not g["unused"].flags.writeable and not eager["unused"].flags.writeable
    assert ".copy()" not in step.lower(p).code
    assert np.array_equal(p["unused"] - 0.1 * g["unused"], p["unused"])   # adds to parameters


@pytest.mark.parametrize("container", ["in-place", "Buffer"])
def test_a_loop_of_writes_under_jit_of_grad_equals_eager(container):
    """The staged backward of a chain of writes zeroes one cotangent sample in place (after the
    written value's cotangent is read): element writes, an overwritten element, a row written as a
    slice (its cotangent a view of the sample: copied instead), and a read between the writes."""
    wts = rng.normal(size=(4, 3))

    def f(x):
        out = wnp.zeros((4, 3)) + 0 * x[0, 0] if container == "in-place" else wg.Buffer.zeros((4, 3))
        for i in range(4):
            for j in range(3):
                out[i, j] = wnp.sum(x[i] * x[j])
        out[1, 2] = x[0, 0] * 3.0
        out[2, :] = x[2, :3] ** 2
        mid = out[0, 1] * 2.0
        out[0, 1] = mid + x[3, 3]
        out[3, 0] = out[3, 0] * out[1, 1]
        return wnp.sum((out if container == "in-place" else out.freeze()) * wts)

    x = rng.normal(size=(4, 4))
    step = wg.jit(wg.value_and_grad(f))
    assert_trees_close(step(x), wg.value_and_grad(f)(x))
    x2 = rng.normal(size=(4, 4))   # the same program on other values
    assert_trees_close(step(x2), wg.value_and_grad(f)(x2))
    flat = central_differences(lambda v: f(v.reshape(4, 4)), x2.ravel()).reshape(4, 4)
    np.testing.assert_allclose(step(x2)[1], flat, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("container", ["in-place", "Buffer"])
def test_a_loop_of_element_writes_stages_one_zeroing_of_its_cotangent(container):
    """The backward pass of a chain of single-element writes zeroes the cotangent at each written
    element; under jit that is one equation, staged where the zeroed cotangent is first read, and
    the written values' cotangents read the cotangent before any zeroing. The chain here covers
    part of the array (index arrays), uses negative indices, writes one element twice (the first
    value gets no cotangent) and ends in the gradient itself (add passes g on unchanged)."""
    writes = [(0, 1), (-1, 2), (2, -3), (1, 1), (-4, 1), (3, 0)]   # (0, 1) again as (-4, 1)

    def f(x, w):
        y = x + 0.0 if container == "in-place" else wg.Buffer(x + 0.0)
        for k, (i, j) in enumerate(writes):
            y[i, j] = wnp.sum(w[k] * w[(k + 1) % len(writes)])
        return wnp.sum((y if container == "in-place" else y.freeze()) ** 2)

    x, w = rng.normal(size=(4, 3)), rng.normal(size=(len(writes), 5))
    step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)), vectorize=False)
    for _ in range(2):   # the second call reuses the program on other values
        assert_trees_close(step(x, w), wg.value_and_grad(f, argnums=(0, 1))(x, w))
        gx = step(x, w)[1][0]
        assert np.all(gx[[0, 3, 2, 1, 3], [1, 2, 0, 1, 0]] == 0) and np.all(gx[1:3, 2] == 2 * x[1:3, 2])
        flat = central_differences(lambda v: f(x, v.reshape(w.shape)), w.ravel()).reshape(w.shape)
        np.testing.assert_allclose(step(x, w)[1][1], flat, rtol=1e-6, atol=1e-7)
        x, w = rng.normal(size=(4, 3)), rng.normal(size=(len(writes), 5))
    text = step.lower(x, w).as_text()
    zeroings = [line for line in text.splitlines() if "backward of" in line and re.search(r"set_in_place\(|scatter_set\(", line)]
    # the chain's five distinct elements in one zeroing; the repeated element (0, 1) is zeroed
    # already when the chain reaches it, so the chain is staged there and a second one starts
    assert len(zeroings) == 2, zeroings


def test_a_full_sums_cotangent_is_broadcast_only_where_a_rule_needs_it(monkeypatch):
    """np.sum(x)'s VJP broadcasts its 0-d cotangent to x's shape; under jit that broadcast is
    staged when first read, and an elementwise product or sum with an array of that shape and
    dtype reads the 0-d cotangent itself. Every other reader gets the broadcast array: another
    shape (y broadcasts against it), another dtype, a reduction, a read of part of it, two
    broadcasts together, the gradient itself."""
    def dot_loop(x, y):   # np.sum(u * v) per column: g * v, g * u, no broadcast staged
        return wnp.sum(wnp.stack([wnp.sum(x[:, j] * y[:, j]) for j in range(3)]) ** 2)

    def readers(x, y):
        s = wnp.sum(x * y[:1])       # y[:1] broadcasts: its cotangent needs the (4, 3) broadcast
        t = wnp.sum(x) * 2.0 + wnp.sum(x * x)
        u = wnp.sum(x * c32)           # x * c32's rule: g (float64) times c32 (float32)
        return s * t + u + wnp.sum(wnp.sum(x, axis=0) ** 2) + wnp.sum(x[1:] * y[1:])

    def itself(x, y):                # x's cotangent is the broadcast itself (add passes g on)
        return wnp.sum(x + y)

    def both(x, y):                  # two broadcasts meet: x * x's rule reads both
        return wnp.sum(wnp.sum(x) * wnp.broadcast_to(wnp.sum(y), (4, 3)) * x)

    c32 = rng.normal(size=(4, 3)).astype(np.float32)
    for f in (dot_loop, readers, itself, both):
        step = wg.jit(wg.value_and_grad(f, argnums=(0, 1)), vectorize=False)
        for _ in range(2):
            x, y = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
            assert_trees_close(step(x, y), wg.value_and_grad(f, argnums=(0, 1))(x, y), rtol=1e-6, atol=1e-9)
            for k, a in enumerate((x, y)):
                fk = lambda v: f(v.reshape(4, 3), y) if k == 0 else f(x, v.reshape(4, 3))   # noqa: E731
                flat = central_differences(fk, a.ravel()).reshape(4, 3)
                np.testing.assert_allclose(step(x, y)[1][k], flat, rtol=1e-5, atol=1e-6)
    monkeypatch.setitem(_ir.PASSES, "simplify", False)   # which removes such broadcasts later
    text = wg.jit(wg.value_and_grad(dot_loop, argnums=(0, 1)), vectorize=False).lower(x, y).as_text()
    assert "broadcast_to" not in text and text.count("multiply(") >= 9, text
    text = wg.jit(wg.value_and_grad(both, argnums=(0, 1)), vectorize=False).lower(x, y).as_text()
    assert text.count("broadcast_to(") >= 2, text


def test_a_buffer_loop_under_jit_of_grad_copies_its_sample_once_per_read(monkeypatch):
    """Staging a Buffer's writes under jit(grad) updates the state's sample in place while the
    Buffer alone reads it: a read in between (which may be a view of that sample) makes the next
    write copy, so the value read keeps what it was when it was read."""
    from wengert.core.trace import unbox
    from wengert.primitives.scatter import scatter_set
    copies = []
    impl = scatter_set.impl
    monkeypatch.setattr(scatter_set, "impl", lambda x, v, index: copies.append(index) or impl(x, v, index))
    seen = []

    def f(x):
        buf = wg.Buffer.zeros((3, 4))
        for i in range(3):
            for j in range(4):
                buf[i, j] = x[i] * (j + 1)
        row = buf[1]              # a view of the state's sample, at trace time
        buf[1, 2] = x[0] * 10.0   # so this write copies it
        buf[2, 3] = x[1] * 7.0
        seen.append(unbox(row).copy())
        return wnp.sum(buf.freeze() * row[:, None].sum())

    x = rng.normal(size=3)
    step = wg.jit(wg.value_and_grad(f))
    value, grad = step(x)
    staged = [index for index in copies if all(type(i) is int for i in index)]   # not the passes' batched writes
    np.testing.assert_allclose(seen[0], x[1] * np.arange(1, 5))   # the row as it was read
    assert_trees_close((value, grad), wg.value_and_grad(f)(x))
    # 14 writes: the first and the one after the read copy the forward state (28 copies, forward and
    # backward, when every write copied); the backward pass zeroes the written elements of one
    # cotangent, copied once
    assert len(staged) <= 3, staged

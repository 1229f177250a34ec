"""wg.profile explains a slow gradient: the findings on the seed workloads, and no cost when off.

The seed workloads are ported here as users would write them (small sizes, so the file runs in
seconds). The tests assert what the report *says* (which finding, which line), never timings.
Lines are found by the marker comments at their ends, so editing this file does not break them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

import wengert as wg
import wengert.numpy as wnp
from wengert.core import backward as backward_mod
from wengert.core import trace as trace_mod
from wengert.numpy import _methods
from wengert.primitives._table import PRIMITIVES
from wengert.profiling import _session

HERE = os.path.abspath(__file__)
F32 = np.float32


def line_of(marker):
    with open(HERE) as fh:
        for k, text in enumerate(fh, 1):
            if text.rstrip().endswith(f"# <{marker}>"):
                return k
    raise AssertionError(f"marker {marker} not found")


def _line_in(function):
    """The line of the one-line body of ``function`` in this file."""
    import inspect
    lines, first = inspect.getsourcelines(globals()[function])
    return first + len(lines) - 1


def no_rewrites():
    config = getattr(wg, "config", None)
    if config is not None and hasattr(config, "override"):
        return config.override(rewrites=False)
    return contextlib.nullcontext()


# --- the seed workloads, as a user writes them ---------------------------------------------------
def softmax(x, axis):
    e = wnp.exp(x - wnp.max(x, axis=axis, keepdims=True))
    return e / wnp.sum(e, axis=axis, keepdims=True)


# seed 001: attention over time, the "colwise" formulation (per-column views in Python loops)
def dense(Wm, bm, x):
    return Wm @ x + bm[:, None]


def colwise(Wm, bm, xs, Hs, wts):
    ys = [dense(Wm, bm, x) for x in xs]
    batch_size = ys[0].shape[1]
    y1 = [ys[0][:, b] for b in range(batch_size)]
    zs = [wnp.stack([wnp.dot(y1[b], y[:, b]) for b in range(batch_size)]) for y in ys]  # <colwise loop>
    alpha = softmax(wnp.stack(zs), axis=0)
    C = wnp.sum(alpha[None, :, :] * Hs, axis=1)
    return wnp.sum(C * wts)


def glued(Wm, bm, xt, Hs, wts):
    out, (D, T, B) = Wm.shape[0], Hs.shape
    ys = wnp.reshape(dense(Wm, bm, xt), (out, T, B))
    z = wnp.einsum("ob,otb->tb", ys[:, 0, :], ys)
    alpha = softmax(z, axis=0)
    return wnp.sum(wnp.einsum("tb,dtb->db", alpha, Hs) * wts)


def attention_inputs(T=16, B=16, n_in=8, n_out=6, D=5):
    rng = np.random.default_rng(1)
    Wm = rng.standard_normal((n_out, n_in)).astype(F32)
    bm = rng.standard_normal(n_out).astype(F32)
    xs = [rng.random((n_in, B), dtype=F32) for _ in range(T)]
    Hs = rng.random((D, T, B), dtype=F32)
    wts = rng.standard_normal((D, B)).astype(F32)
    return Wm, bm, xs, Hs, wts


# seed 000: pairwise cosine similarity, a per-element loop writing into a Buffer
def mynorm(x):
    return wnp.sqrt(wnp.sum(x ** 2))


def cosinesim(u, v):
    return wnp.dot(u, v) / (mynorm(u) * mynorm(v))


def _pairwise(r, a, b, K):
    W, na, batchsize = a.shape
    nb = b.shape[1]
    for k in range(batchsize):
        for j in range(na):
            aj = a[:, j, k]
            for i in range(nb):  # <element loop header>
                bi = b[:, i, k]  # <column read>
                r[i, j, k] = K(bi, aj)  # <element loop>
    return r


def pairwise_loss(a, b, wts):
    W, R, batchsize = a.shape
    N = b.shape[1]
    out = wg.Buffer.zeros((N, R, batchsize), a.dtype)
    _pairwise(out, a, b, cosinesim)
    for k in range(batchsize):
        out[:, :, k] = softmax(out[:, :, k], axis=0)
    return wnp.sum(out.freeze() * wts)


def pairwise_inputs(N=5, W=8, R=3, B=4):
    rng = np.random.default_rng(0)
    return (rng.random((W, R, B), dtype=F32), rng.random((W, N, B), dtype=F32),
            rng.standard_normal((N, R, B)).astype(F32))


# seed 002: a record of 10 parameter arrays of which the loss reads 3
@dataclasses.dataclass
class Params10:
    w0: Any
    w1: Any
    w2: Any
    w3: Any
    w4: Any
    w5: Any
    w6: Any
    w7: Any
    w8: Any
    w9: Any


def record_loss(p, wts):
    return wnp.sum(wts * wnp.tanh(p.w0 * p.w1 + p.w2))


def record_inputs(shape=(512, 512)):
    rng = np.random.default_rng(3)
    p = Params10(**{f"w{i}": (0.5 * rng.standard_normal(shape)).astype(F32) for i in range(10)})
    return p, rng.standard_normal(shape).astype(F32)


# --- the three seed reports ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def colwise_report():
    return wg.profile(colwise, *attention_inputs(), argnums=(0, 1), repeat=2)


def test_colwise_top_finding_names_the_per_column_view_loop_and_its_line(colwise_report):
    top = colwise_report.findings[0]
    assert top.kind == "loop"
    assert top.file == HERE and top.line == line_of("colwise loop")
    assert f"test_profile.py:{line_of('colwise loop')}" in top.where
    assert "x[:, i]" in top.evidence                       # the per-column views, named as such
    assert top.data["primitives"]["getitem"] == 16 * 16 and top.data["primitives"]["dot"] == 16 * 16
    assert "einsum" in top.fix or "axis=0" in top.fix
    text = str(colwise_report)
    assert "Findings (most costly first)" in text and "1. Many small operations from one loop" in text
    # the table by line puts the same line first
    assert colwise_report.lines[0]["line"] == line_of("colwise loop")


def test_the_glued_formulation_has_no_loop_finding():
    report = wg.profile(glued, *attention_inputs()[:2], np.concatenate(attention_inputs()[2], axis=1),
                        *attention_inputs()[3:], argnums=(0, 1), repeat=2)
    assert not [f for f in report.findings if f.kind == "loop"]


def test_seed000_loop_form_top_finding_names_the_per_element_loop():
    report = wg.profile(pairwise_loss, *pairwise_inputs(), argnums=(0, 1), repeat=2)
    top = report.findings[0]
    assert top.kind == "loop"
    assert top.file == HERE and top.line == line_of("element loop")   # `r[i, j, k] = K(bi, aj)`
    assert top.data["loop_line"] == line_of("element loop header")    # `for i in range(nb):`
    assert "for i in range(nb):" in top.evidence and "for j in range(na):" in top.evidence
    assert "cosinesim" in top.evidence and "mynorm" in top.evidence    # the calls the line goes through
    assert "wg.Buffer" in top.evidence                                 # its results, written one by one
    # every operation is charged to the line that recorded it, indexing reads included
    rows = {row["line"]: row for row in report.lines if row["file"] == HERE}
    assert rows[line_of("column read")]["primitives"] == [["getitem", 5 * 3 * 4]]
    assert rows[line_of("column read")]["forward_s"] > 0
    assert dict(map(tuple, rows[_line_in("mynorm")]["primitives"])) == {
        "power": 2 * 5 * 3 * 4, "sum": 2 * 5 * 3 * 4, "sqrt": 2 * 5 * 3 * 4}


def test_record_with_10_fields_of_which_3_are_used_reports_no_redundant_work():
    p, wts = record_inputs()
    report = wg.profile(record_loss, p, wts, repeat=2)
    assert report.findings == []
    assert [d["name"] for d in report.inputs if d["used"]] == ["p.w0", "p.w1", "p.w2"]
    assert report.redundant["unused_inputs"] == [f"p.w{i}" for i in range(3, 10)]
    assert report.redundant["dead_operations"] == 0 and report.redundant["inputs_rematerialized"] == 0
    text = str(report)
    assert "redundant work: none found" in text
    assert "the backward pass did no work for the 7 unused input(s)" in text
    assert "Findings: none." in text


# --- the other detectors -------------------------------------------------------------------------
def test_silent_float64_promotion_is_found_at_the_line_that_promotes():
    rng = np.random.default_rng(0)
    w64 = rng.standard_normal((32, 16))                      # float64 by accident

    def mlp(x):
        h = wnp.tanh(x @ w64)  # <promotes>
        return wnp.sum(h * h)

    report = wg.profile(mlp, rng.standard_normal((64, 32)).astype(F32), repeat=2)
    found = [f for f in report.findings if f.kind == "float64"]
    assert len(found) == 1
    assert found[0].line == line_of("promotes")
    assert "float64 constant array of shape (32, 16)" in found[0].evidence
    assert "float32" in found[0].fix


def test_float64_work_that_was_always_float64_is_not_a_finding():
    x = np.random.default_rng(0).standard_normal((16, 8))
    report = wg.profile(lambda x: wnp.sum(wnp.tanh(x * np.float64(2.0))), x, repeat=2)
    assert not [f for f in report.findings if f.kind == "float64"]


def test_unfused_log_softmax_is_found_when_not_rewritten():
    rng = np.random.default_rng(0)

    def xent(z, y):
        e = wnp.exp(z - wnp.max(z, axis=1, keepdims=True))
        p = e / wnp.sum(e, axis=1, keepdims=True)
        return -wnp.sum(y * wnp.log(p))  # <log softmax>

    z, y = rng.standard_normal((32, 10)), np.eye(10)[rng.integers(0, 10, 32)]
    with no_rewrites():
        report = wg.profile(xent, z, y, repeat=2)
    found = [f for f in report.findings if f.kind == "unfused"]
    assert len(found) == 1 and found[0].data["pattern"] == "log(softmax(x))"
    assert found[0].line == line_of("log softmax")
    assert "np.log(np.sum(np.exp(z - m)" in found[0].fix


def test_log_sum_exp_composition_is_found():
    def lse(x):
        return wnp.sum(wnp.log(wnp.sum(wnp.exp(x), axis=1)))

    with no_rewrites():
        report = wg.profile(lse, np.random.default_rng(0).standard_normal((8, 5)), repeat=2)
    assert [f.data["pattern"] for f in report.findings if f.kind == "unfused"] == ["log(sum(exp(x)))"]


def test_in_place_writes_in_a_loop_are_a_mutation_finding():
    def writes(x):
        y = x * 2.0
        for i in range(y.shape[0]):
            y[i] = x[i] * 3.0  # <setitem>
        return wnp.sum(y)

    report = wg.profile(writes, np.random.default_rng(0).standard_normal((200, 100)), repeat=1)
    found = [f for f in report.findings if f.kind == "mutation"]
    assert len(found) == 1 and found[0].line == line_of("setitem")
    assert found[0].data["operations"] == 200
    array_bytes = 200 * 100 * 8
    assert found[0].data["bytes_moved"] <= 3 * array_bytes          # copied once, not once per write
    assert "wg.Buffer" in found[0].fix


def test_reading_a_buffer_inside_its_writing_loop_is_a_mutation_finding():
    def smooth(x):
        buf = wg.Buffer.zeros(x.shape)
        buf[0] = wnp.sin(x[0])
        for i in range(1, x.shape[0]):
            buf[i] = wnp.sin(x[i]) + 0.5 * buf[i - 1]  # <buffer read>
        return wnp.sum(buf.freeze())

    report = wg.profile(smooth, np.random.default_rng(0).standard_normal((60, 1000)), repeat=1)
    found = [f for f in report.findings if f.kind == "mutation"]
    assert len(found) == 1 and found[0].line == line_of("buffer read")
    assert "snapshot" in found[0].evidence and "freeze" in found[0].fix


def test_one_freeze_of_a_large_buffer_is_no_mutation_finding():
    """Writing a buffer and reading it once is the advice itself: the one snapshot is no finding,
    even where it is a large share of a cheap gradient (or a loaded machine inflates its share)."""
    def written_then_frozen(x):
        buf = wg.Buffer.zeros(x.shape)
        for i in range(x.shape[0]):
            buf[i] = x[i] * 2.0
        return wnp.sum(buf.freeze())

    report = wg.profile(written_then_frozen, np.random.default_rng(0).standard_normal((4, 200_000)), repeat=1)
    assert not [f for f in report.findings if f.kind == "mutation"]


def test_a_small_read_of_a_large_computed_array_is_a_materialized_finding():
    def first_row(x):
        y = wnp.exp(x)
        return wnp.sum(y[0])  # <small read>

    report = wg.profile(first_row, np.random.default_rng(0).standard_normal((512, 512)), repeat=1)
    found = [f for f in report.findings if f.kind == "materialized"]
    assert len(found) == 1 and found[0].line == line_of("small read")
    assert "Index earlier" in found[0].fix


def test_work_that_never_reaches_the_output_is_found():
    def with_metrics(x):
        loss = wnp.sum(x * x)
        metrics = [wnp.mean(wnp.abs(x - k)) for k in range(30)]  # <dead>
        return loss

    report = wg.profile(with_metrics, np.random.default_rng(0).standard_normal((50, 50)), repeat=2)
    found = [f for f in report.findings if f.kind == "dead"]
    assert len(found) == 1 and found[0].line == line_of("dead")
    assert report.redundant["dead_operations"] >= 30


def test_bookkeeping_finding_is_not_repeated_when_a_loop_explains_it(colwise_report):
    kinds = [f.kind for f in colwise_report.findings]
    assert kinds.count("loop") >= 1 and "bookkeeping" not in kinds


def _slow_rule(g, ans, x):
    total = 0
    for k in range(4000):   # the rule's own Python: what a rule made of many small steps costs
        total += k
    return g


_SLOW = trace_mod.Primitive("slow_rule_demo", lambda x: x * 1.0, vjp=(_slow_rule,))


def test_a_slow_backward_rule_is_named_instead_of_called_bookkeeping():
    def chain(x):
        y = x
        for _ in range(60):
            y = wnp.sin(_SLOW(y))
        return wnp.sum(y)

    report = wg.profile(chain, np.linspace(0.1, 0.4, 4), repeat=2)
    rules = [f for f in report.findings if f.kind == "rule"]
    assert [f.data["primitive"] for f in rules] == ["slow_rule_demo"], report
    assert "backward rule of `slow_rule_demo`" in rules[0].evidence and "slow_rule_demo" in str(report)
    assert rules[0].data["rule_step_s"] >= 3 * rules[0].data["engine_step_s"]
    # what the rule explains is not counted again as bookkeeping, and the loop's finding names it
    assert all(f.seconds <= rules[0].seconds for f in report.findings if f.kind == "bookkeeping")
    loops = [f for f in report.findings if f.kind == "loop"]
    assert loops and all("backward rule of `slow_rule_demo` adds" in f.evidence for f in loops)


def test_cheap_rules_are_not_called_slow():
    def chain(x):
        y = x
        for _ in range(60):
            y = wnp.sin(y) * 1.01
        return wnp.sum(y)

    report = wg.profile(chain, np.linspace(0.1, 0.4, 4), repeat=2)
    assert not [f for f in report.findings if f.kind == "rule"], report


# --- the report's forms --------------------------------------------------------------------------
def test_report_numbers_are_consistent(colwise_report):
    r = colwise_report
    assert r.plain_forward > 0 and r.traced_forward > 0 and r.backward > 0
    assert r.gradient == pytest.approx(r.traced_forward + r.backward)
    assert r.ratio == pytest.approx(r.gradient / r.plain_forward)
    assert sum(r.split.values()) == pytest.approx(1.0)
    assert sum(r.split_backward.values()) == pytest.approx(1.0)
    # the backward pass was timed entry by entry (the reverse loop reads tape[i] once per entry)
    assert r.lines[0]["backward_s"] > 0 and r.lines[0]["backward_bytes"] > 0
    assert sum(row["nodes"] for row in r.lines) == r.nodes == sum(row["nodes"] for row in r.primitives)
    shares = sum(row["share"] for row in r.lines) + r.tail_share
    assert shares == pytest.approx(1.0, rel=1e-6)


def test_to_dict_is_plain_json(colwise_report):
    data = json.loads(colwise_report.to_json())
    assert data["findings"][0]["kind"] == "loop"
    assert data["findings"][0]["line"] == line_of("colwise loop")
    assert {"plain_forward_s", "traced_forward_s", "backward_s", "gradient_over_forward"} <= set(data["totals"])
    assert data["lines"][0]["line"] == line_of("colwise loop")


def test_plot(colwise_report, tmp_path):
    pytest.importorskip("matplotlib")
    path = colwise_report.plot(str(tmp_path / "profile.png"))
    assert os.path.getsize(path) > 1000


def test_profile_of_a_function_that_takes_a_gradient_itself():
    def g(x):
        return wnp.sum(wnp.sin(x) ** 2)

    def f(x):
        return wnp.sum(wg.grad(g)(x) ** 2)

    report = wg.profile(f, np.linspace(0.1, 1.0, 5), repeat=1)
    assert report.nodes > 0
    with_grad = wg.grad(f)(np.linspace(0.1, 1.0, 5))
    assert np.all(np.isfinite(with_grad))


# --- off means off -------------------------------------------------------------------------------
def _engine_functions():
    mods = [m for name, m in sys.modules.items() if name.startswith("wengert") and m is not None]
    names = ("bind", "backward", "accumulate", "new_trace", "close_trace", "write_in_place")
    return {(m.__name__, n): getattr(m, n) for m in mods for n in names if hasattr(m, n)}


def test_profiling_leaves_the_engine_exactly_as_it_was():
    before = _engine_functions()
    impls = {name: prim.impl for name, prim in PRIMITIVES.items()}
    snapshot = wg.Buffer._snapshot
    wg.profile(pairwise_loss, *pairwise_inputs(2, 4, 2, 2), argnums=(0, 1), repeat=1)
    assert _engine_functions() == before
    assert {name: prim.impl for name, prim in PRIMITIVES.items()} == impls
    assert wg.Buffer._snapshot is snapshot
    assert _methods.bind is trace_mod.bind and "profiling" not in trace_mod.bind.__module__
    assert backward_mod.accumulate.__module__ == "wengert.core.backward"
    assert _session.STATE.session is None and _session.STATE.tape is None


def test_an_error_inside_the_profiled_function_restores_the_engine():
    before = _engine_functions()

    def broken(x):
        y = wnp.sin(x)
        if not isinstance(y, np.ndarray):   # traced: fail inside the instrumented forward pass
            raise ValueError("boom")
        return wnp.sum(y)

    with pytest.raises(ValueError, match="boom"):
        wg.profile(broken, np.ones(3), repeat=1)
    assert _engine_functions() == before
    assert _session.STATE.session is None
    assert float(wg.grad(lambda x: wnp.sum(wnp.sin(x)))(np.zeros(3))[0]) == 1.0


def test_the_hot_path_has_no_profiling_hook():
    # bind, the reverse loop and Primitive.__call__ name nothing of the profiler
    for fn in (trace_mod.bind, backward_mod.backward, backward_mod.accumulate, trace_mod.Primitive.__call__):
        names = set(fn.__code__.co_names) | set(fn.__code__.co_varnames)
        assert not any("profil" in n or "perf_counter" in n or "_getframe" in n for n in names), fn


# --- the command line ----------------------------------------------------------------------------
SCRIPT = """
import numpy as np
import wengert as wg
import wengert.numpy as wnp

def loss(w, xs):
    total = 0.0
    for x in xs:
        total = total + wnp.sum(wnp.tanh(x @ w) ** 2)   # LOOP
    return total

rng = np.random.default_rng(0)
w = rng.standard_normal((8, 4))
xs = [rng.standard_normal(8) for _ in range(60)]
vg = wg.value_and_grad(loss)
for step in range(4):
    value, g = vg(w, xs)
    w = w - 0.01 * g
print("trained", float(value) > 0)
"""


def test_command_line_profiles_a_script_unchanged(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out_json = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-m", "wengert", "profile", "--json", str(out_json), str(script)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "trained True" in proc.stdout                   # the script ran, with its own output
    assert "gradient call site train.py:17 in <module>: 4 call(s)" in proc.stdout
    assert "Many small operations from one loop -- train.py:9 in loss" in proc.stdout
    data = json.loads(out_json.read_text())
    assert len(data) == 1 and data[0]["calls"] == 4
    report = data[0]["report"]
    assert report["findings"][0]["kind"] == "loop" and report["findings"][0]["line"] == 9
    assert report["totals"]["runs"] == 2                   # calls 3 and 4: timed clean
    assert report["totals"]["plain_forward_s"] > 0


def test_command_line_usage():
    proc = subprocess.run([sys.executable, "-m", "wengert"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "python -m wengert profile" in proc.stderr


# --- a loop's other fix: wg.jit, measured on the user's arguments ---------------------------------
def test_a_loop_finding_quotes_jit_measured_on_the_profiled_arguments():
    report = wg.profile(pairwise_loss, *pairwise_inputs(), argnums=(0, 1), repeat=2)
    top = report.findings[0]
    assert top.kind == "loop" and top.data["jit"] is report.jit
    m = report.jit
    assert m["measured"] and m["first_call_s"] > 0 and m["value_and_grad_s"] > 0
    assert m["eager_value_and_grad_s"] == report.gradient
    assert m["speedup"] == pytest.approx(report.gradient / m["value_and_grad_s"])
    assert 0 < m["equations"] < m["equations_traced"]     # the vectorizing pass shrank the loop
    assert "wg.jit(wg.value_and_grad(f))" in top.fix and f"{m['speedup']:.1f}x" in top.fix
    assert json.loads(report.to_json())["jit"]["equations"] == m["equations"]


def test_jit_is_not_measured_when_asked_not_to_or_over_the_time_budget():
    off = wg.profile(pairwise_loss, *pairwise_inputs(), argnums=(0, 1), repeat=1, try_jit=False)
    assert off.jit is None and "wg.jit" not in off.findings[0].fix
    tight = wg.profile(pairwise_loss, *pairwise_inputs(), argnums=(0, 1), repeat=1, max_seconds=1e-4)
    assert not tight.jit["measured"] and "try_jit=True" in tight.jit["reason"]
    assert "not measured here" in tight.findings[0].fix


def test_no_jit_measurement_without_a_loop_finding():
    report = wg.profile(glued, *attention_inputs()[:2], np.concatenate(attention_inputs()[2], axis=1),
                        *attention_inputs()[3:], argnums=(0, 1), repeat=1)
    assert report.jit is None


def _branchy_loop(x):
    total = 0.0
    for i in range(x.shape[0]):
        total = total + (wnp.sin(x[i]) if x[i] > 0 else wnp.cos(x[i]))   # a Python branch on a value
    return total


def test_a_function_jit_cannot_stage_says_why_in_the_finding():
    x = np.random.default_rng(0).standard_normal(200)
    report = wg.profile(_branchy_loop, x, repeat=1, try_jit=True)
    assert [f for f in report.findings if f.kind == "loop"]
    assert not report.jit["measured"] and "cannot stage" in report.jit["reason"]

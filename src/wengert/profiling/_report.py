"""From measurements to explanations: the tables, the detectors and the printed report.

A report is built from one *detailed* gradient call (every operation timed, its source line
named) and several *clean* calls (timed only at the boundaries of the forward and backward passes).
Totals come from the clean calls; the breakdown by line and primitive from the detailed one, whose
shares are reliable and whose absolute times carry the profiler's own cost per operation. Estimates
of what a finding costs are the detailed shares applied to the clean totals.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import json
import linecache
import os
import textwrap
from collections import Counter, defaultdict

import numpy as np

from .. import nn
from ..config import config
from ._session import func_name, index_pattern

DOCS = "docs/performance.md"

# Detector thresholds (named so the docs and the tests can refer to them).
LOOP_MIN_NODES = 50                 # a loop must record at least this many operations ...
LOOP_MIN_SHARE = 0.05               # ... take at least this share of the gradient's time ...
LOOP_MIN_BOOKKEEPING = 0.5          # ... and be mostly bookkeeping, not array arithmetic
BOOKKEEPING_MIN_SHARE = 0.5         # backward bookkeeping share that is worth a finding
RULE_MIN_RATIO = 3.0                # a rule's fixed cost per step, in engine steps, that makes it slow ...
RULE_MIN_SHARE = 0.10               # ... when its excess is at least this share of the backward pass
RULE_MIN_NODES = 20                 # ... over at least this many small operations
MATERIALIZED_MIN_BYTES = 1 << 20    # buffers smaller than 1 MiB are never a finding
MATERIALIZED_RATIO = 3.0            # cotangent buffers made per array, or backward/forward bytes
MUTATION_MIN_COPIES = 4
DEAD_MIN_SHARE = 0.10
_TRANSPARENT = {"reshape", "broadcast_to", "transpose", "astype"}
_MUTATION = {"buffer_snapshot", "setitem", "scatter_set", "scatter_multiply", "index_add"}


# --- small helpers -----------------------------------------------------------------------------
def short_path(path):
    """``path`` relative to the working directory when it is below it, else its last two parts."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    if not rel.startswith(".."):
        return rel
    parts = os.path.normpath(path).split(os.sep)
    return os.sep.join(parts[-2:])


def source_line(filename, line, width=70):
    text = linecache.getline(filename, line).strip()
    return text if len(text) <= width else text[: width - 3] + "..."


def fmt_time(seconds):
    if seconds is None:
        return "n/a"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def fmt_bytes(n):
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{int(n)} B"


def _best(values):
    """The fastest of repeated timings: the run least disturbed by the rest of the machine."""
    values = [v for v in values if v is not None]
    return min(values) if values else None


# --- loops in the user's source ----------------------------------------------------------------
_LOOP_NODES = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_FUNC_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclasses.dataclass(frozen=True)
class Loop:
    line: int           # the loop's first line (a ``for``/``while`` header or a comprehension)
    end: int
    header: str         # its source text
    depth: int          # nesting depth among the loops of its function (0: outermost)


@functools.lru_cache(maxsize=256)
def _parse(filename):
    lines = linecache.getlines(filename)
    if not lines:
        return None
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return None
    loops, funcs = [], []
    for node in ast.walk(tree):
        if isinstance(node, _LOOP_NODES):
            if isinstance(node, (ast.For, ast.AsyncFor)):
                body = min([node.body[0].lineno] + [s.lineno for s in node.orelse])
            else:
                body = node.lineno          # a while's test and a comprehension run every iteration
            loops.append((node.lineno, node.end_lineno, body))
        elif isinstance(node, _FUNC_NODES):
            funcs.append((node.lineno, node.end_lineno))
    return loops, funcs


@functools.lru_cache(maxsize=4096)
def loops_at(filename, line):
    """The loops of the innermost function around ``line`` whose bodies contain it, outermost first."""
    parsed = _parse(filename)
    if parsed is None:
        return ()
    loops, funcs = parsed
    inside = [(lo, hi) for lo, hi in funcs if lo <= line <= hi]
    lo_f, hi_f = max(inside, key=lambda s: s[0]) if inside else (0, 1 << 30)
    found = sorted((lo, -hi, body, hi) for lo, hi, body in loops
                   if lo_f <= lo and hi <= hi_f and body <= line <= hi and (lo, hi) != (lo_f, hi_f))
    return tuple(Loop(lo, hi, source_line(filename, lo), depth)
                 for depth, (lo, _, body, hi) in enumerate(found))


# --- the report's parts ------------------------------------------------------------------------
@dataclasses.dataclass
class Finding:
    """One diagnosis: what, where, the evidence, the fix, and what it costs per gradient call."""
    kind: str           # loop, rule, bookkeeping, float64, materialized, unfused, mutation, dead
    title: str
    where: str          # "file:line in function", or "" when it is not one place
    evidence: str
    fix: str
    seconds: float      # estimated cost per value_and_grad (clean run) that a fix addresses
    share: float        # the same as a share of the gradient's time
    file: str = None
    line: int = None
    function: str = None
    data: dict = dataclasses.field(default_factory=dict)

    def to_dict(self):
        d = dataclasses.asdict(self)
        d["data"] = _jsonable(self.data)
        return d


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    return x


class Report:
    """What ``wg.profile`` returns. ``print(report)``, ``report.to_dict()``, ``report.to_json()``,
    ``report.plot(path)``; ``report.findings`` is the ranked list of :class:`Finding`."""

    def __init__(self, title, details, clean, plain, input_names=None, notes=(), calibration=None):
        self.title = title
        self.jit = None   # wg.jit measured as a loop's fix (advise_jit), when a loop is a finding
        self.notes = list(notes)
        self.calibration = calibration or {}
        if not isinstance(details, (list, tuple)):
            details = [details]
        self._build(_merge(details), clean, plain, input_names or [])

    # --- building ---------------------------------------------------------------------------------
    def _build(self, detail, clean, plain, input_names):
        log = detail.log
        timed = [c for c in clean if c.t_fwd is not None]
        self.runs = len(timed)
        self.totals_from_detail = not timed
        if not timed:
            timed = [detail]
        self.plain_forward = _best(plain)
        self.traced_forward = _best([c.t_fwd for c in timed])
        self.backward = _best([c.t_bwd_first or 0.0 for c in timed])   # no backward pass: nothing to seed
        self.gradient = self.traced_forward + self.backward
        self.ratio = self.gradient / self.plain_forward if self.plain_forward else None
        self.detail_forward = detail.t_fwd
        self.detail_backward = detail.t_bwd_first or 0.0
        detail_total = self.detail_forward + self.detail_backward
        self.overhead_ratio = detail_total / self.gradient if self.gradient else None

        n = log.n
        names = log.name
        is_node = np.array([nm != "input" for nm in names], bool)
        self.nodes = int(is_node.sum())
        fwd = np.array(log.fwd, float)
        fkern = np.array(log.fkern, float)
        have_bwd = log.bwd is not None
        bwd = np.array(log.bwd[:n], float) if have_bwd else np.zeros(n)
        bkern = np.array(log.bkern[:n], float) if have_bwd else np.zeros(n)
        acc = np.array(log.acc[:n], float) if have_bwd else np.zeros(n)
        bbytes = np.array(log.bwd_bytes[:n], float) if have_bwd else np.zeros(n)
        seed_time = log.bwd[n] if have_bwd else 0.0
        size = np.array(log.out_size, float)
        out_bytes = np.array(log.out_bytes, float)
        out_new = np.array(log.out_new, float)
        visited = np.frombuffer(bytes(log.visited[:n]), np.uint8).astype(bool) if have_bwd else np.zeros(n, bool)
        # Array work versus fixed cost. An operation's array work is its time beyond what the same
        # primitive costs on tiny arrays: measured on this run's own tiny operations when there are
        # enough of them, else on the session's calibration chain. Forward: the time inside the
        # primitive's implementation; backward: the entry's time less accumulation (the rules run
        # NumPy operators on plain arrays, which no wrapper sees). NumPy's own per-call overhead is
        # thus counted as fixed cost, with wengert's tape and tracers and the Python around them.
        in_bytes = np.array(log.in_bytes, float)
        steps = bwd - acc
        tiny_mask = is_node & (size <= 64) & (in_bytes <= 512)
        fixed_b, fixed_f = {}, {}
        tiny_b, tiny_f = defaultdict(list), defaultdict(list)
        for j in np.flatnonzero(tiny_mask):
            if visited[j]:
                tiny_b[names[j]].append(steps[j])
            if fkern[j] > 0:
                tiny_f[names[j]].append(fkern[j])
        for table, values in ((fixed_b, tiny_b), (fixed_f, tiny_f)):
            for name, v in values.items():
                if len(v) >= 5:
                    table[name] = float(np.median(v))
        base_b = self.calibration.get("backward_step", 0.0)
        base_f = self.calibration.get("forward_kernel", 0.0)
        self._rule_fixed, self._base_step = fixed_b, base_b   # for the slow-rule detector
        # On tiny arrays there is no array work by definition: all of it is fixed cost.
        bkern = np.array([max(0.0, steps[j] - fixed_b.get(names[j], base_b)) if visited[j] and not tiny_mask[j]
                          else 0.0 for j in range(n)])
        fkern = np.array([max(0.0, fkern[j] - fixed_f.get(names[j], base_f)) if fkern[j] > 0 and not tiny_mask[j]
                          else 0.0 for j in range(n)])

        # An operation's forward time runs from the previous tape entry to its own: the Python that
        # led to it (the user's loop, wengert's NumPy-face wrappers), its kernel, its recording. Times shown
        # are the instrumented run's shares applied to the clean totals, forward and backward apart,
        # so the tables add up to the totals and the profiler's own cost is left out.
        tail = log.tail
        f_total = fwd.sum() + tail
        b_total = bwd.sum() + seed_time
        scale_f = self.traced_forward / f_total if f_total > 0 else 0.0
        scale_b = self.backward / b_total if b_total > 0 else 0.0
        fwd_c = fwd * scale_f
        bwd_c = bwd * scale_b
        # Outside any operation: after the last one, seeding the backward pass, the inputs' entries.
        self.tail = (tail + fwd[~is_node].sum()) * scale_f + (seed_time + bwd[~is_node].sum()) * scale_b
        self.scale = (scale_f, scale_b)
        # The split is taken within the instrumented run (kernels, accumulation and everything else
        # measured on the same run), less the time the profiler spent naming lines.
        kern_f, kern_b, acc_t = fkern.sum(), bkern.sum(), acc.sum()
        whole = max(f_total + b_total, kern_f + kern_b + acc_t, 1e-12)
        back = max(b_total, kern_b + acc_t, 1e-12)
        self.split = {"array kernels": (kern_f + kern_b) / whole, "accumulation": acc_t / whole}
        self.split["bookkeeping"] = max(0.0, 1.0 - self.split["array kernels"] - self.split["accumulation"])
        self.split_backward = {"array kernels": kern_b / back, "accumulation": acc_t / back}
        self.split_backward["bookkeeping"] = max(
            0.0, 1.0 - self.split_backward["array kernels"] - self.split_backward["accumulation"])
        node_sizes = size[is_node]
        self.median_size = float(np.percentile(node_sizes, 50, method="lower")) if node_sizes.size else 0.0
        self.backward_bytes = float(bbytes.sum())
        self.overhead_per_node = ((detail_total - self.gradient) / self.nodes
                                  if self.nodes and self.gradient else None)

        # Sites: the innermost user frame of each operation.
        stacks = log.stacks
        site_of = {}
        for sid, stack in enumerate(stacks):
            if stack:
                code, line = stack[0]
                site_of[sid] = (code.co_filename, line, func_name(code))
            else:
                site_of[sid] = ("<wengert>", 0, "(inside wengert)")
        sites = np.array(log.site, int)
        self._site_of = site_of

        def rows_by(keys, label):
            groups = defaultdict(list)
            for j in range(n):
                if is_node[j]:
                    groups[keys(j)].append(j)
            rows = []
            for key, idx in groups.items():
                idx = np.array(idx)
                t = fwd_c[idx].sum() + bwd_c[idx].sum()
                row = label(key, idx)
                row.update(nodes=len(idx), forward_s=float(fwd_c[idx].sum()), backward_s=float(bwd_c[idx].sum()),
                           backward_bytes=int(bbytes[idx].sum()), share=float(t / max(self.gradient, 1e-12)))
                rows.append(row)
            rows.sort(key=lambda r: -(r["forward_s"] + r["backward_s"]))
            return rows

        def site_label(sid_site, idx):
            filename, line, func = sid_site
            prims = Counter(names[j] for j in idx).most_common(3)
            return dict(file=filename, line=line, function=func, source=source_line(filename, line) if line else "",
                        primitives=[[p, c] for p, c in prims])

        self.lines = rows_by(lambda j: site_of[sites[j]], site_label)
        self.primitives = rows_by(lambda j: names[j], lambda name, idx: dict(primitive=name))
        self.tail_share = self.tail / max(self.gradient, 1e-12)

        # Inputs and redundant work.
        parents = log.parents if log.parents is not None else [() for _ in range(n)]
        used = set()
        for j in range(n):
            for _, p in parents[j]:
                used.add(p)
        inputs = [j for j in range(n) if names[j] == "input"]
        labels = list(input_names) + [f"input {k}" for k in range(len(input_names), len(inputs))]
        self.inputs = [dict(name=labels[k], used=j in used, bytes=int(out_bytes[j]))
                       for k, j in enumerate(inputs)]
        dead = is_node & ~visited if have_bwd else np.zeros(n, bool)
        remat = {i: b for i, b in (log.materialized or {}).items()
                 if names[i] == "input" and b > 2 * max(out_bytes[i], 1)}
        self.redundant = dict(
            unused_inputs=[d["name"] for d in self.inputs if not d["used"]],
            backward_work_for_unused_inputs=0,
            dead_operations=int(dead.sum()),
            dead_forward_s=float(fwd[dead].sum()),
            inputs_rematerialized=len(remat),
            fused_operations=sum(1 for nm in names if nm.startswith("nn.")),
        )

        # Findings.
        ctx = _Context(log=log, names=names, is_node=is_node, fwd=fwd, bwd=bwd, fkern=fkern, bkern=bkern,
                       acc=acc, bbytes=bbytes, size=size, out_bytes=out_bytes, out_new=out_new,
                       in_bytes=np.array(log.in_bytes, float),
                       sites=sites, site_of=site_of, parents=parents, visited=visited, dead=dead,
                       fwd_c=fwd_c, bwd_c=bwd_c, report=self)
        findings = []
        for detector in (_loops, _slow_rules, _bookkeeping, _float64, _materialized, _unfused, _mutation, _dead):
            findings.extend(detector(ctx))
        findings.sort(key=lambda f: -f.seconds)
        self.findings = findings

    def advise_jit(self, measurement):
        """Quote ``wg.jit``'s measured gain (``profile``'s ``_measure_jit``) in each loop finding's fix:
        the fix that keeps the loop as the user wrote it."""
        self.jit = measurement
        if measurement["measured"]:
            m = measurement
            text = (f" Or keep the loop and compile it: `wg.jit(wg.value_and_grad(f))` stages it once and "
                    f"vectorizes the loop ({m['equations_traced']:,} staged equations became {m['equations']:,}); "
                    f"measured now on these arguments, it computes this gradient in {fmt_time(m['value_and_grad_s'])} "
                    f"instead of {fmt_time(m['eager_value_and_grad_s'])} ({m['speedup']:.1f}x faster), after a "
                    f"first call of {fmt_time(m['first_call_s'])} that stages it (docs/jit.md).")
        else:
            text = (f" Or keep the loop and compile it with `wg.jit(wg.value_and_grad(f))`, which vectorizes "
                    f"loops (docs/jit.md); not measured here: {measurement['reason']}.")
        for finding in self.findings:
            if finding.kind == "loop":
                finding.fix += text
                finding.data["jit"] = measurement

    # --- output -----------------------------------------------------------------------------------
    def to_dict(self):
        return _jsonable(dict(
            title=self.title,
            totals=dict(plain_forward_s=self.plain_forward, traced_forward_s=self.traced_forward,
                        backward_s=self.backward, value_and_grad_s=self.gradient, gradient_over_forward=self.ratio,
                        runs=self.runs, totals_from_instrumented_run=self.totals_from_detail),
            instrumented=dict(forward_s=self.detail_forward, backward_s=self.detail_backward,
                              overhead_ratio=self.overhead_ratio, overhead_per_node_s=self.overhead_per_node),
            nodes=self.nodes, median_size=self.median_size, backward_bytes=self.backward_bytes,
            split=self.split, split_backward=self.split_backward,
            outside_operations_s=self.tail,
            lines=self.lines, primitives=self.primitives, inputs=self.inputs, redundant=self.redundant,
            findings=[f.to_dict() for f in self.findings], notes=self.notes, jit=self.jit,
        ))

    def to_json(self, **kwargs):
        return json.dumps(self.to_dict(), **kwargs)

    def __repr__(self):
        return f"<wengert profile report: {self.title}, {len(self.findings)} finding(s)>"

    def __str__(self):
        out = []
        w = out.append
        w(f"wengert profile: {self.title}")
        runs = (f"best of {self.runs} run(s)" if not self.totals_from_detail
                else "one instrumented run only: totals include the profiler's overhead")
        w(f"  totals per call ({runs})")
        w(f"    plain forward (no tracing)  {fmt_time(self.plain_forward):>10}")
        fx = f"   ({self.traced_forward / self.plain_forward:.1f}x plain)" if self.plain_forward else ""
        w(f"    traced forward              {fmt_time(self.traced_forward):>10}{fx}")
        w(f"    backward                    {fmt_time(self.backward):>10}")
        ratio = f"   gradient/forward = {self.ratio:.1f}x" if self.ratio else ""
        w(f"    value_and_grad              {fmt_time(self.gradient):>10}{ratio}")
        s = self.split
        w(f"  tape: {self.nodes:,} operations, median output {_elements(self.median_size)}; "
          f"backward allocated {fmt_bytes(self.backward_bytes)}")
        w(f"  where the time goes: bookkeeping {s['bookkeeping']:.0%} (the fixed cost of each operation: tape, "
          f"tracers, Python, NumPy's call overhead), array kernels {s['array kernels']:.0%} (work that grows "
          f"with the arrays), cotangent accumulation {s['accumulation']:.0%}")
        sb = self.split_backward
        w(f"    backward pass alone: bookkeeping {sb['bookkeeping']:.0%}, array kernels {sb['array kernels']:.0%}, "
          f"accumulation {sb['accumulation']:.0%}")
        used = [d["name"] for d in self.inputs if d["used"]]
        unused = self.redundant["unused_inputs"]
        w(f"  inputs: {len(self.inputs)} array(s) differentiated, {len(used)} reach the output"
          + (f"; unused: {_names(unused)} (zero gradients, made once after the backward pass)" if unused else ""))
        w("  redundant work: " + self._redundant_text())
        w("")
        oh = (f", which took {self.overhead_ratio:.1f}x as long as a clean one"
              if self.overhead_ratio and not self.totals_from_detail else "")
        w(f"By source line (per call: the shares of an instrumented run{oh}, applied to the totals)")
        w(_table(
            ["line", "ops", "fwd", "bwd", "bwd alloc", "share", "primitives"],
            [[f"{short_path(r['file'])}:{r['line']} {r['function']}", f"{r['nodes']:,}", fmt_time(r["forward_s"]),
              fmt_time(r["backward_s"]), fmt_bytes(r["backward_bytes"]), f"{r['share']:.1%}",
              ", ".join(f"{p} {c:,}" for p, c in r["primitives"])] for r in self.lines[:12]]
            + ([["(outside any operation)", "", fmt_time(self.tail), "", "", f"{self.tail_share:.1%}", ""]]
               if self.tail_share >= 0.005 else []),
            more=len(self.lines) - 12))
        w("")
        w("By primitive")
        w(_table(
            ["primitive", "ops", "fwd", "bwd", "bwd alloc", "share"],
            [[r["primitive"], f"{r['nodes']:,}", fmt_time(r["forward_s"]), fmt_time(r["backward_s"]),
              fmt_bytes(r["backward_bytes"]), f"{r['share']:.1%}"] for r in self.primitives[:10]],
            more=len(self.primitives) - 10))
        w("")
        if self.findings:
            w("Findings (most costly first)")
            for k, f in enumerate(self.findings, 1):
                where = f" -- {f.where}" if f.where else ""
                w(f"  {k}. {f.title}{where}  [~{fmt_time(f.seconds)} per call, {f.share:.0%}]")
                w(_indent(f.evidence, 5))
                w(_indent("Fix: " + f.fix, 5))
        else:
            w("Findings: none. No loop of small operations, no bookkeeping-dominated backward pass, no float64 "
              "promotion, no materialized cotangents, no unfused log/softmax, no costly mutation.")
        for note in self.notes:
            w(f"Note: {note}")
        return "\n".join(out)

    def _redundant_text(self):
        r = self.redundant
        parts = []
        if r["dead_operations"]:
            text = (f"{r['dead_operations']:,} recorded operation(s) never reach the output "
                    f"({fmt_time(r['dead_forward_s'])} of forward work)")
            if r.get("fused_operations"):
                text += (" -- wengert recorded a fused operation in place of a composition (wengert.rewrites), "
                         "whose unfused steps stay on the tape unused; calling wengert.nn directly skips them")
            parts.append(text)
        if r["inputs_rematerialized"]:
            parts.append(f"{r['inputs_rematerialized']} input cotangent(s) were materialized more than once")
        if parts:
            return "; ".join(parts)
        text = "none found: every recorded operation reaches the output, and each cotangent buffer was made once"
        if r["unused_inputs"]:
            text += f"; the backward pass did no work for the {len(r['unused_inputs'])} unused input(s)"
        return text

    def plot(self, path, top=15):
        """Draw forward and backward time by source line as a bar chart into ``path`` (png, svg, pdf)."""
        try:
            import matplotlib
            matplotlib.use("Agg", force=False)
            import matplotlib.pyplot as plt
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("report.plot needs matplotlib: pip install 'wengert[plot]'") from e
        rows = self.lines[:top][::-1]
        labels = [f"{short_path(r['file'])}:{r['line']} {r['function']}" for r in rows]
        fwd = [r["forward_s"] * 1e3 for r in rows]
        bwd = [r["backward_s"] * 1e3 for r in rows]
        fig, ax = plt.subplots(figsize=(10, 1.2 + 0.38 * max(len(rows), 1)))
        y = np.arange(len(rows))
        ax.barh(y, fwd, color="#4c72b0", label="forward (traced)")
        ax.barh(y, bwd, left=fwd, color="#dd8452", label="backward")
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xlabel("milliseconds per call")
        ratio = f", gradient/forward {self.ratio:.1f}x" if self.ratio else ""
        name = self.title.split("(")[0] if "(" in self.title else self.title
        ax.set_title(f"{name}: value_and_grad {fmt_time(self.gradient)}{ratio}", fontsize=10)
        ax.legend(loc="lower right", fontsize=8)
        if self.findings:
            f = self.findings[0]
            fig.text(0.01, 0.005, f"Top finding: {f.title} -- {f.where}", fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


class _Merged:
    """Several detailed runs of the same call, merged entry by entry with the minimum of each time."""

    def __init__(self, details):
        last = details[-1]
        logs = [d.log for d in details if d.log is not None and d.log.backward_done]
        logs = [lg for lg in logs if lg.n == last.log.n and lg.name == last.log.name] or [last.log]
        self.log = log = logs[-1]
        self.t_fwd = min((d.t_fwd for d in details if d.log in logs and d.t_fwd is not None), default=0.0)
        self.t_bwd_first = min((d.t_bwd_first for d in details if d.log in logs and d.t_bwd_first is not None),
                               default=None)
        if len(logs) > 1:
            for attr in ("fwd", "fkern", "bwd", "bkern", "acc"):
                columns = [getattr(lg, attr) for lg in logs]
                if all(c is not None for c in columns):
                    setattr(log, attr, [min(v) for v in zip(*columns)])
            log.overhead = min(lg.overhead for lg in logs)


def _merge(details):
    return _Merged(details)


def _elements(n):
    return "1 element" if n == 1 else f"{n:,.0f} elements"


def _names(names, limit=6):
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... ({len(names)} in all)"


def _indent(text, n):
    pad = " " * n
    return "\n".join(textwrap.fill(par, width=100, initial_indent=pad, subsequent_indent=pad)
                     for par in text.split("\n"))


def _table(header, rows, more=0):
    if not rows:
        return "  (no operations recorded)"
    widths = [max(len(str(r[k])) for r in rows + [header]) for k in range(len(header))]
    left = {0, len(header) - 1} if header[-1] == "primitives" else {0}

    def line(r):
        cells = []
        for k, v in enumerate(r):
            cells.append(str(v).ljust(widths[k]) if k in left else str(v).rjust(widths[k]))
        return "  " + "  ".join(cells).rstrip()

    text = [line(header)] + [line(r) for r in rows]
    if more > 0:
        text.append(f"  ... {more} more")
    return "\n".join(text)


# --- detectors ---------------------------------------------------------------------------------
@dataclasses.dataclass
class _Context:
    log: object
    names: list
    is_node: np.ndarray
    fwd: np.ndarray
    bwd: np.ndarray
    fkern: np.ndarray
    bkern: np.ndarray
    acc: np.ndarray
    bbytes: np.ndarray
    size: np.ndarray
    out_bytes: np.ndarray
    out_new: np.ndarray
    in_bytes: np.ndarray
    sites: np.ndarray
    site_of: dict
    parents: list
    visited: np.ndarray
    dead: np.ndarray
    fwd_c: np.ndarray
    bwd_c: np.ndarray
    report: Report
    loop_groups: list = dataclasses.field(default_factory=list)
    rule_excess: float = 0.0       # backward time (detailed run) that slow rules explain
    slow_rules: dict = None        # see _slow_rule_steps

    def clean_seconds(self, idx):
        """Seconds per clean call: the entries' shares of the instrumented run, applied to the totals."""
        idx = np.asarray(idx, int)
        return float(self.fwd_c[idx].sum() + self.bwd_c[idx].sum())

    def share(self, idx):
        return self.clean_seconds(idx) / max(self.report.gradient, 1e-12)

    def kernels(self, idx):
        """Seconds per clean call spent in array kernels by these entries."""
        return self.clean_seconds(idx) * self.kernel_fraction(idx)

    def kernel_fraction(self, idx):
        """The share of array-kernel time in these entries' time, within the instrumented run."""
        idx = np.asarray(idx, int)
        total = float(self.fwd[idx].sum() + self.bwd[idx].sum())
        return min(1.0, float(self.fkern[idx].sum() + self.bkern[idx].sum()) / total) if total > 0 else 0.0

    def where(self, j):
        filename, line, func = self.site_of[self.sites[j]]
        return f"{short_path(filename)}:{line} in {func}", filename, line, func


def _loop_of_stack(stack):
    """The first frame (innermost first) whose line lies in a loop body: (code, line, loops)."""
    for code, line in stack:
        loops = loops_at(code.co_filename, line)
        if loops:
            return code, line, loops
    return None


def _loops(ctx):
    log = ctx.log
    loop_of = {sid: _loop_of_stack(stack) for sid, stack in enumerate(log.stacks)}
    groups = defaultdict(list)
    for j in np.flatnonzero(ctx.is_node):
        found = loop_of.get(ctx.sites[j])
        if found is not None:
            code, line, loops = found
            groups[(code.co_filename, loops[0].line)].append(j)
        else:                                       # no loop in the source: the line itself repeats
            filename, line, func = ctx.site_of[ctx.sites[j]]
            groups[(filename, -line)].append(j)
    out = []
    for (filename, root), idx in groups.items():
        n = len(idx)
        if n < LOOP_MIN_NODES:
            continue
        share = ctx.share(idx)
        seconds = ctx.clean_seconds(idx)
        kernels = seconds * ctx.kernel_fraction(idx)
        bookkeeping = max(0.0, seconds - kernels)
        if share < LOOP_MIN_SHARE or seconds <= 0 or bookkeeping / seconds < LOOP_MIN_BOOKKEEPING:
            continue
        prims = Counter(ctx.names[j] for j in idx)
        median = float(np.percentile(ctx.size[idx], 50, method="lower"))
        # Which line of the looping function the operations come through, and the loop around it.
        through = Counter()
        inner = {}
        funcs = {}
        callees = defaultdict(Counter)
        for j in idx:
            stack = log.stacks[ctx.sites[j]]
            found = loop_of.get(ctx.sites[j])
            if found is None:
                through[stack[0][1]] += 1
                funcs[stack[0][1]] = ctx.site_of[ctx.sites[j]][2]
                continue
            code, line, loops = found
            through[line] += 1
            inner[line] = loops[-1]
            funcs[line] = func_name(code)
            for c, _ in stack:
                if c is code:
                    break
                callees[line][func_name(c)] += 1
        line, count = through.most_common(1)[0]
        func = funcs[line]
        patterns = Counter(p for p in (index_pattern(ctx.log.extra[j][1]) for j in idx
                                       if ctx.log.extra.get(j, ("",))[0] == "index")
                           if any(c in p for c in "ijklmn"))
        ops = ", ".join(f"{p} {c:,}" for p, c in prims.most_common(4))
        via = [name for name, _ in callees[line].most_common(3)]
        where = f"{short_path(filename)}:{line} in {func}"
        if root > 0:
            loop = inner.get(line)
            loops = loops_at(filename, line)
            outer = [lp for lp in loops if lp.line != loop.line]
            nest = (" (inside " + ", ".join(f"`{lp.header}`" for lp in reversed(outer)) + ")") if outer else ""
            if loop.line == line:
                head = (f"{n:,} operations are recorded by the loop at {short_path(filename)}:{line}{nest}: "
                        f"`{source_line(filename, line)}`" + (f" (via {', '.join(via)})" if via else "") + ".")
            else:
                head = (f"{n:,} operations are recorded by the loop `{loop.header}` at "
                        f"{short_path(filename)}:{loop.line}{nest}, {count:,} of them through line {line}: "
                        f"`{source_line(filename, line)}`" + (f" (via {', '.join(via)})" if via else "") + ".")
            title = "Many small operations from one loop"
            loop_line = loop.line
        else:
            head = (f"{n:,} operations come from the single line {short_path(filename)}:{line} "
                    f"`{source_line(filename, line)}`, executed many times (a loop, a comprehension or repeated "
                    f"calls that the source does not show as a loop).")
            title = "Many small operations from one line"
            loop_line = None
        # slow backward rules among these operations are named, not counted as bookkeeping
        slow = _slow_rule_steps(ctx)
        base = getattr(ctx.report, "_base_step", 0.0)
        scale_b = ctx.report.scale[1]
        in_rules = Counter(ctx.names[j] for j in idx if ctx.names[j] in slow and ctx.visited[j])
        rules_s = sum((slow[name][0] - base) * c for name, c in in_rules.items()) * scale_b
        per_node_bk = max(0.0, bookkeeping - rules_s) / n
        per_node_k = kernels / n
        evidence = (f"{head} Operations: {ops}; median output {_elements(median)}. They take {share:.0%} of "
                    f"the gradient's time; each costs ~{per_node_bk * 1e6:.1f} us of bookkeeping (recording, "
                    f"tracers, NumPy's call overhead) for ~{per_node_k * 1e6:.1f} us of array work.")
        for name, c in in_rules.most_common():
            evidence += (f" The backward rule of `{name}` adds ~{(slow[name][0] - base) * scale_b * 1e6:.1f} us to "
                         f"each of its {c:,} operations (its own finding below).")
        if patterns:
            pat, c = patterns.most_common(1)[0]
            evidence += f" {c:,} of them are indexing reads x{pat}, one slice at a time."
        fix = _loop_fix(prims, patterns)
        writes = sum(extra[1] for extra in log.extra.values() if extra[0] == "writes")
        if writes >= LOOP_MIN_NODES and "] =" in source_line(filename, line, 200):
            evidence += (f" The loop writes its results one element at a time into a wg.Buffer "
                         f"({writes:,} writes).")
            fix = ("Compute the whole block at once and write it with one assignment (or return it): for "
                   "example all pairwise dot products of columns are one `np.einsum` over the shared axis, and "
                   "all norms one `np.sqrt(np.sum(x * x, axis=0))`. " + fix)
        ctx.loop_groups.append(np.asarray(idx, int))
        out.append(Finding("loop", title, where, evidence, fix, bookkeeping, share, filename, line, func,
                           dict(operations=n, loop_line=loop_line, primitives=dict(prims), median_size=median,
                                bookkeeping_per_op_s=per_node_bk, kernel_per_op_s=per_node_k,
                                index_patterns=dict(patterns), through_line=count)))
    return out


def _loop_fix(prims, patterns):
    reads = sum(patterns.values())
    total = sum(prims.values())
    if reads >= 0.2 * total:
        return ("Work on whole arrays instead of one slice per iteration: replace the loop by array operations "
                "over the looped axis, e.g. a per-column dot product `sum(x[:, j] * y[:, j])` for each j becomes "
                "`np.sum(x * y, axis=0)` or `np.einsum('ij,ij->j', x, y)`; stack a list of arrays once "
                "(`np.stack(xs)`) and index the stacked array. Every recorded operation costs a few "
                f"microseconds whatever its size, so one big operation beats thousands of small ones. See {DOCS}, "
                "'Many small operations from one loop'.")
    return ("Vectorize the loop: compute all iterations with array operations over one more axis (broadcasting, "
            "np.sum(..., axis=...), np.einsum, matmul). Every recorded operation has a fixed cost of a few "
            "microseconds in each pass whatever its size, so a handful of operations on whole arrays replaces "
            "thousands of small ones; if the loop must stay, give its body a hand-written gradient "
            f"(wg.custom_vjp). See {DOCS}, 'Many small operations from one loop'.")


def _slow_rule_steps(ctx):
    """{primitive: (its backward step on small operands, count)} for the rules that are slow:
    several engine steps each, over enough operations to be a real share of the backward pass."""
    if ctx.slow_rules is not None:
        return ctx.slow_rules
    ctx.slow_rules = {}
    rep = ctx.report
    base = getattr(rep, "_base_step", 0.0)
    back = float(ctx.bwd.sum())
    if base <= 0 or back <= 0:
        return ctx.slow_rules
    counts = Counter(ctx.names[j] for j in np.flatnonzero(ctx.is_node & ctx.visited))
    for name, step in getattr(rep, "_rule_fixed", {}).items():
        n = counts.get(name, 0)
        if n >= RULE_MIN_NODES and step >= RULE_MIN_RATIO * base and (step - base) * n >= RULE_MIN_SHARE * back:
            ctx.slow_rules[name] = (step, n)
    return ctx.slow_rules


def _slow_rules(ctx):
    """A primitive whose backward step on small operands costs several times the engine's own step:
    its rule's Python and NumPy calls are the cost, which is the rule's to fix, not bookkeeping."""
    rep = ctx.report
    base = getattr(rep, "_base_step", 0.0)
    back = float(ctx.bwd.sum())
    out = []
    for name, (step, n) in _slow_rule_steps(ctx).items():
        excess = (step - base) * n
        ctx.rule_excess += excess
        seconds = excess / back * rep.backward
        evidence = (f"The backward rule of `{name}` costs ~{step * 1e6:.1f} us per operation on small operands "
                    f"({n:,} operations), {step / base:.1f}x the engine's own cost of a backward step "
                    f"(~{base * 1e6:.1f} us, measured on common operations): {excess / back:.0%} of the backward "
                    f"pass is that rule's own work (its Python and the NumPy calls it makes), not the engine's "
                    f"bookkeeping.")
        fix = (f"Write the operation with a primitive whose rule is cheap on these shapes, or give the hot "
               f"composition one hand-written gradient (wg.custom_vjp); the cost of every rule on small operands "
               f"is measured by benchmarks/op_overhead.py. See {DOCS}, 'A backward rule that is slow on small "
               f"operands'.")
        out.append(Finding("rule", f"The backward rule of {name} is slow on small operands", name, evidence, fix,
                           seconds, seconds / rep.gradient if rep.gradient else 0.0,
                           data=dict(primitive=name, operations=n, rule_step_s=step, engine_step_s=base)))
    return out


def _bookkeeping(ctx):
    rep = ctx.report
    if not rep.backward or rep.backward < 1e-3:
        return []
    share_bk = rep.split_backward["bookkeeping"]
    if share_bk < BOOKKEEPING_MIN_SHARE:
        return []
    bk_total = share_bk * rep.backward
    # Backward bookkeeping already explained by a loop finding is not counted again.
    overhead = np.clip(ctx.bwd - ctx.bkern - ctx.acc, 0.0, None)
    covered = sum(float(overhead[idx].sum()) for idx in ctx.loop_groups) + ctx.rule_excess
    rest = bk_total * max(0.0, 1.0 - covered / max(float(overhead.sum()), 1e-12))
    if rest < 0.3 * rep.backward:
        return []
    idx = np.flatnonzero(ctx.is_node & ctx.visited)
    n = len(idx)
    if not n:
        return []
    top = Counter()
    for j in idx:
        top[ctx.site_of[ctx.sites[j]]] += 1
    lines = ", ".join(f"{short_path(fn)}:{ln} ({c:,})" for (fn, ln, _), c in top.most_common(3))
    evidence = (f"The backward pass is {share_bk:.0%} bookkeeping: {n:,} operations with a median output of "
                f"{_elements(rep.median_size)}, ~{bk_total / n * 1e6:.1f} us of bookkeeping each against "
                f"~{rep.split_backward['array kernels'] * rep.backward / n * 1e6:.1f} us of array arithmetic. The operations come from many "
                f"lines; the busiest are {lines}.")
    fix = ("Make fewer, larger operations: batch small arrays into one (np.stack, a leading batch axis), and "
           "replace hot compositions of many tiny steps by one operation with a hand-written gradient "
           f"(wg.custom_vjp). See {DOCS}, 'A backward pass that is mostly bookkeeping'.")
    return [Finding("bookkeeping", "The backward pass is mostly bookkeeping", "", evidence, fix, rest,
                    rest / rep.gradient if rep.gradient else 0.0, data=dict(operations=n, bookkeeping_share=share_bk))]


def _float64(ctx):
    log = ctx.log
    if not log.promotions:
        return []
    points = sorted(log.promotions)
    first = points[0]
    where, filename, line, func = ctx.where(first)
    f64 = np.flatnonzero(ctx.is_node & np.array(log.f64, bool))
    seconds = 0.5 * ctx.kernels(f64)       # float32 kernels move half the bytes
    share = ctx.share(f64)
    other = sorted({ctx.where(j)[0] for j in points[1:]} - {where})
    culprit = log.promotions[first]
    evidence = (f"float32 values become float64 at {where}: `{source_line(filename, line)}` -- "
                f"{ctx.names[first]} with {culprit}. From there {len(f64):,} operations run in float64 "
                f"({share:.0%} of the gradient's time), moving twice the bytes, and the gradients of float32 "
                f"inputs are computed in float64 and cast back at the end.")
    if other:
        evidence += f" Other promotions: {_names(other, 4)}."
    if not log.float32_in:
        evidence += " (The differentiated inputs are not float32; the promoted values come from inside the function.)"
    fix = ("Keep constants in the working dtype: create them as float32 (`w.astype(np.float32)`, "
           "`np.float32(0.5)`, `np.zeros(n, dtype=np.float32)`); a Python float never promotes, a NumPy float64 "
           f"scalar or array does. See {DOCS}, 'Silent float64 promotion'.")
    return [Finding("float64", "Silent float64 promotion of float32 work", where, evidence, fix,
                    max(seconds, 1e-9), share, filename, line, func,
                    dict(first_operation=ctx.names[first], culprit=culprit, float64_operations=len(f64),
                         promotion_points=len(points)))]


def _materialized(ctx):
    log = ctx.log
    out = []
    total_bwd_bytes = max(float(ctx.bbytes.sum()), 1.0)
    # (1) One array's cotangent made as a full-size buffer again and again.
    for i, nbytes in (log.materialized or {}).items():
        size = max(float(ctx.out_bytes[i]), 1.0)
        if nbytes >= MATERIALIZED_MIN_BYTES and nbytes >= MATERIALIZED_RATIO * size:
            where, filename, line, func = ctx.where(i) if ctx.names[i] != "input" else ("an input", None, None, None)
            evidence = (f"The cotangent of the array made at {where} ({fmt_bytes(size)}) was materialized "
                        f"{nbytes / size:.0f} times over in the backward pass ({fmt_bytes(nbytes)} of new buffers).")
            fix = ("Read the array once (or through one indexing operation) instead of many overlapping ways, so its "
                   f"cotangent accumulates into one buffer. See {DOCS}, 'Arrays materialized in the backward pass'.")
            out.append(Finding("materialized", "An array's cotangent materialized many times", where, evidence, fix,
                               0.0, nbytes / total_bwd_bytes, filename, line, func, dict(bytes=nbytes)))
    # (2) A line whose backward allocates far more than its forward produced.
    by_site = defaultdict(list)
    for j in np.flatnonzero(ctx.is_node):
        by_site[ctx.sites[j]].append(j)
    for sid, idx in by_site.items():
        idx = np.array(idx)
        back = float(ctx.bbytes[idx].sum())
        # What the operations touched: reads count what they read, others their operands and output.
        forward = float(sum(ctx.out_bytes[j] if ctx.names[j] == "getitem" else ctx.out_bytes[j] + ctx.in_bytes[j]
                            for j in idx))
        if back < MATERIALIZED_MIN_BYTES or back < MATERIALIZED_RATIO * max(forward, 1.0) or back < 0.25 * total_bwd_bytes:
            continue
        if any(ctx.names[j] in _MUTATION for j in idx):
            continue                                   # explained by the mutation finding
        where, filename, line, func = ctx.where(idx[0])
        seconds = float(ctx.bwd_c[idx].sum())
        evidence = (f"The backward pass of {len(idx):,} operation(s) at {where} (`{source_line(filename, line)}`) "
                    f"allocated {fmt_bytes(back)}, {back / max(forward, 1.0):.0f}x the {fmt_bytes(forward)} they "
                    f"read and wrote in the forward pass ({back / total_bwd_bytes:.0%} of all backward allocation).")
        reads = sum(1 for j in idx if ctx.names[j] == "getitem")
        if reads >= len(idx) / 2:
            evidence += (" They read a small part of a large computed array, so the whole array's cotangent is "
                         "materialized (zeros, plus the part that was read) and flows back through everything that "
                         "computed it.")
            fix = ("Index earlier: compute only the part you need (e.g. `f(x[0])` rather than `f(x)[0]`), so the "
                   f"backward pass works on that part alone. See {DOCS}, 'Arrays materialized in the backward pass'.")
        else:
            fix = ("These operations make full-size arrays (zeros or copies) for small results. Prefer operations "
                   "whose gradient is as small as their input, and avoid many overlapping reads of one array. "
                   f"See {DOCS}, 'Arrays materialized in the backward pass'.")
        out.append(Finding("materialized", "Large arrays materialized in the backward pass", where, evidence, fix,
                           seconds, ctx.share(idx), filename, line, func, dict(bytes=back, forward_bytes=forward)))
    return out


def _through(ctx, j, position=0):
    """The parent of ``j`` at ``position``, looking through reshapes and broadcasts."""
    for pos, p in ctx.parents[j]:
        if pos == position:
            while ctx.names[p] in _TRANSPARENT and ctx.parents[p]:
                p = ctx.parents[p][0][1]
            return p
    return None


def _unfused(ctx):
    names = ctx.names
    matches = defaultdict(list)       # (site, kind) -> list of node index sets
    for j in np.flatnonzero(ctx.is_node):
        if names[j] != "log" or not ctx.parents[j]:
            continue
        p = _through(ctx, j)
        if p is None:
            continue
        kind = None
        involved = [j, p]
        if names[p] == "divide":
            num, den = _through(ctx, p, 0), _through(ctx, p, 1)
            if num is not None and den is not None and names[num] == "exp" and names[den] == "sum":
                if _through(ctx, den) == num:
                    kind = "log(softmax(x))"
                    involved += [num, den]
            elif num is None and den is not None and names[den] == "add":
                e = _through(ctx, den, 0) if _through(ctx, den, 0) is not None else _through(ctx, den, 1)
                if e is not None and names[e] == "exp":
                    kind = "log(sigmoid(x))"
                    involved += [den, e]
        elif names[p] == "sum":
            e = _through(ctx, p)
            if e is not None and names[e] == "exp":
                kind = "log(sum(exp(x)))"
                involved += [e]
        elif names[p] == "add" and len(ctx.parents[p]) == 1:
            e = _through(ctx, p, ctx.parents[p][0][0])
            if e is not None and names[e] == "exp":
                kind = "log(1 + exp(x))"
                involved += [e]
        if kind is not None:
            matches[(ctx.sites[j], kind)].append(involved)
    fixes = {
        "log(softmax(x))": ("compute the log-probabilities directly: `m = z.max(axis, keepdims=True); "
                            "logp = z - m - np.log(np.sum(np.exp(z - m), axis, keepdims=True))`"),
        "log(sum(exp(x)))": ("subtract the maximum first: `m = x.max(axis, keepdims=True); "
                             "m + np.log(np.sum(np.exp(x - m), axis, keepdims=True))`"),
        "log(sigmoid(x))": "use `-np.logaddexp(0, -x)`",
        "log(1 + exp(x))": "use `np.logaddexp(0, x)`",
    }
    nn = _fused_names()
    out = []
    for (sid, kind), groups in matches.items():
        idx = sorted({i for g in groups for i in g})
        first = groups[0][0]
        where, filename, line, func = ctx.where(first)
        seconds = 0.5 * ctx.clean_seconds(idx)
        evidence = (f"`{source_line(filename, line)}` computes {kind} as {len(groups[0])} separate operations "
                    f"({', '.join(sorted({names[i] for i in groups[0]}))}) that were recorded unfused"
                    + (f", {len(groups)} times" if len(groups) > 1 else "")
                    + f"; together they take {ctx.share(idx):.1%} of the gradient's time. Unfused, the "
                    "backward pass goes through every step, and the log of a probability that underflowed "
                    "is -inf.")
        fix = fixes[kind] + "; its gradient is then one stable step (softmax(z) - target for a cross-entropy)."
        if nn.get(kind):
            fix += f" Or call {nn[kind]}."
        if _rewrites_off():
            fix += (" wengert rewrites common forms of this composition by itself, but its rewrites are switched "
                    "off (wg.config.update('rewrites', True) turns them on).")
        fix += f" See {DOCS}, 'Unfused log/softmax'."
        out.append(Finding("unfused", f"Unfused {kind}", where, evidence, fix, max(seconds, 1e-9), ctx.share(idx),
                           filename, line, func, dict(pattern=kind, count=len(groups))))
    return out


def _rewrites_off():
    return getattr(config, "rewrites", True) is False


def _fused_names():
    names = {}
    for kind, attr in (("log(softmax(x))", "log_softmax"), ("log(sum(exp(x)))", "logsumexp"),
                       ("log(sigmoid(x))", "log_sigmoid"), ("log(1 + exp(x))", "softplus")):
        if hasattr(nn, attr):
            names[kind] = f"wengert.nn.{attr}"
    return names


def _mutation(ctx):
    names = ctx.names
    by_site = defaultdict(list)
    for j in np.flatnonzero(ctx.is_node):
        if names[j] in _MUTATION:
            by_site[ctx.sites[j]].append(j)
    out = []
    for sid, idx in by_site.items():
        idx = np.array(idx)
        n = len(idx)
        largest = float(max(ctx.out_bytes[idx].max(), ctx.in_bytes[idx].max(), ctx.bbytes[idx].max())) if n else 0.0
        moved = float(ctx.out_new[idx].sum() + ctx.bbytes[idx].sum())
        share = ctx.share(idx)
        seconds = ctx.clean_seconds(idx)
        writes = sum(ctx.log.extra.get(j, ("", 0))[1] for j in idx if ctx.log.extra.get(j, ("",))[0] == "writes")
        quadratic = n >= MUTATION_MIN_COPIES and moved >= MUTATION_MIN_COPIES * largest and moved >= MATERIALIZED_MIN_BYTES
        # a site that copies once (a freeze after the loop, one write) has nothing to read less often:
        # its share of the time is no finding, however the machine's load inflates it
        if not (quadratic or (share >= LOOP_MIN_SHARE and n > 1)):
            continue
        where, filename, line, func = ctx.where(idx[0])
        kinds = Counter(names[j] for j in idx)
        if kinds.get("buffer_snapshot"):
            evidence = (f"{n:,} snapshot(s) of a wg.Buffer at {where} (`{source_line(filename, line)}`): each read "
                        f"of a Buffer that was written since the last read copies the whole buffer "
                        f"({fmt_bytes(largest)}); {fmt_bytes(moved)} copied in the forward and backward passes, "
                        f"{share:.0%} of the gradient's time" + (f", routing the gradient of {writes:,} writes" if writes else "") + ".")
            fix = ("Write everything first and read once: freeze the Buffer (buf.freeze()) after the writing loop and "
                   "work on the frozen array, or compute a whole block with array operations and write it with one "
                   f"assignment. See {DOCS}, 'Mutation cost'.")
        else:
            op = ", ".join(f"{k} {c:,}" for k, c in kinds.most_common())
            cost = (f"the gradient of each write passes a full copy of the array's cotangent ({fmt_bytes(largest)}) "
                    f"to the array it overwrote, {fmt_bytes(moved)} in all" if quadratic else
                    f"the writes move {fmt_bytes(moved)} in the backward pass (the array's cotangent is copied once "
                    f"and zeroed in place write by write), but each write is a recorded operation")
            evidence = (f"{n:,} write(s) into a traced array at {where} (`{source_line(filename, line)}`; {op}): "
                        f"{cost} ({share:.0%} of the gradient's time).")
            fix = ("Collect the values in a wg.Buffer (writes cost only what they write) or build the result with "
                   f"np.stack / np.concatenate, then use it. See {DOCS}, 'Mutation cost'.")
        out.append(Finding("mutation", "Mutation cost", where, evidence, fix, max(seconds, 1e-9), share,
                           filename, line, func, dict(operations=n, bytes_moved=moved, array_bytes=largest,
                                                      writes=writes)))
    return out


def _dead(ctx):
    rep = ctx.report
    dead = np.flatnonzero(ctx.dead)
    if len(dead) < 10 or not rep.traced_forward:
        return []
    share_fwd = float(ctx.fwd_c[dead].sum()) / rep.traced_forward
    if share_fwd < DEAD_MIN_SHARE:
        return []
    top = Counter(ctx.site_of[ctx.sites[j]] for j in dead).most_common(3)
    lines = ", ".join(f"{short_path(fn)}:{ln} ({c:,})" for (fn, ln, _), c in top)
    evidence = (f"{len(dead):,} recorded operations never reach the output ({share_fwd:.0%} of the traced forward "
                f"pass): {lines}. They are recorded, and their inputs kept alive, for nothing.")
    fix = ("Compute values that the loss does not depend on (metrics, logging) outside the differentiated "
           f"function, on plain arrays. See {DOCS}, 'Work that never reaches the output'.")
    seconds = float(ctx.fwd_c[dead].sum())
    (fn, ln, func), _ = top[0]
    return [Finding("dead", "Work that never reaches the output", f"{short_path(fn)}:{ln} in {func}", evidence, fix,
                    seconds, seconds / rep.gradient if rep.gradient else 0.0, fn, ln, func,
                    dict(operations=len(dead)))]

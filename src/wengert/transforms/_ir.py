"""The program ``wg.jit`` stages: variables, equations, the passes over them, and the Python code
they become.

A :class:`Program` is a Wengert list with names: each :class:`Eqn` applies one primitive (or one
value-reading NumPy function, see transforms/jit.py) to operands that are variables of earlier
equations or constants, with the primitive's keyword parameters, and defines one variable per
result. Variables carry the shape and dtype they had when the program was traced; every program
is cached per signature (leaf shapes and dtypes), so those are the shapes it always sees.

The passes are plain functions from program to program (dead-code and common-subexpression
elimination). :func:`generate` writes one line of Python per equation (the primitive's NumPy
implementation called on local variables) and compiles it once: at run time there are no tracers,
no tape and no rule lookups, only the NumPy calls the gradient needs.
"""
from __future__ import annotations

import builtins
import collections
import itertools
import keyword
import linecache
import operator
import os
import re

import numpy as np


class Var:
    """A value of the program: defined once, by an input or an equation. One object per variable
    (every equation reads the object its producer defined), so passes may hash Vars by identity."""

    __slots__ = ("id", "shape", "dtype")

    def __init__(self, id, shape, dtype):  # noqa: A002 - the variable's number
        self.id = id
        self.shape = shape
        self.dtype = dtype

    def __repr__(self):
        return f"v{self.id}"


class Eqn:
    """``outs = prim.impl(*args, **params)``. ``args`` and ``params`` hold Vars, constants, and
    tuples/lists/slices of them (an index computed by the program is a parameter holding Vars);
    ``uses`` lists every Var read; ``source`` is (filename, line, note) of the user's code."""

    __slots__ = ("prim", "args", "params", "outs", "uses", "source")

    def __init__(self, prim, args, params, outs, uses, source):
        self.prim = prim
        self.args = args
        self.params = params
        self.outs = outs
        self.uses = uses
        self.source = source


class Program:
    """Inputs (Vars, the flattened dynamic arguments), equations in order, outputs (Vars or
    constants, the flattened result)."""

    __slots__ = ("inputs", "eqns", "outputs")

    def __init__(self, inputs, eqns, outputs):
        self.inputs = inputs
        self.eqns = eqns
        self.outputs = outputs


# --- walking operands ------------------------------------------------------------------------------
def substitute(x, rename):
    """``x`` with Vars replaced through ``rename`` (id -> Var), containers rebuilt as needed."""
    t = type(x)
    if t is Var:
        return rename.get(x.id, x)
    if t is tuple or t is list:
        return t(substitute(v, rename) for v in x)
    if t is slice:
        return slice(substitute(x.start, rename), substitute(x.stop, rename), substitute(x.step, rename))
    return x


def renamed(eqn, rename):
    """``eqn`` reading through ``rename`` (id -> Var): itself when it reads none of the renamed Vars."""
    for v in eqn.uses:
        if v.id in rename:
            return _renamed(eqn, rename)
    return eqn


def _renamed(eqn, rename):
    """``eqn`` reading through ``rename``, which renames one of its Vars. Where every Var it reads
    is an operand itself (``uses`` lists every Var read, so its parameters then hold none), only
    the operands change and the parameters are shared."""
    args, uses = eqn.args, eqn.uses
    if len(uses) == len(args):
        for a in args:
            if type(a) is not Var:
                break
        else:
            args = tuple([rename.get(a.id, a) for a in args])
            return Eqn(eqn.prim, args, eqn.params, eqn.outs, args, eqn.source)
    return Eqn(eqn.prim, substitute(args, rename), {k: substitute(p, rename) for k, p in eqn.params.items()},
               eqn.outs, tuple([rename.get(u.id, u) for u in uses]), eqn.source)


# --- passes --------------------------------------------------------------------------------------
def producers_of(program):
    """The equation that makes each variable, by the variable's id."""
    return {o.id: eqn for eqn in program.eqns for o in eqn.outs}


def use_counts(eqns, outputs):
    """How often each variable is read, by the variable's id (an output counts as one read)."""
    counts = {}
    for eqn in eqns:
        for v in eqn.uses:
            counts[v.id] = counts.get(v.id, 0) + 1
    for v in outputs:
        if type(v) is Var:
            counts[v.id] = counts.get(v.id, 0) + 1
    return counts


def dce(program):
    """Keep only the equations whose results reach an output."""
    live = {v for v in program.outputs if type(v) is Var}
    kept = []
    update = live.update
    disjoint = live.isdisjoint
    for eqn in reversed(program.eqns):
        if not disjoint(eqn.outs):
            kept.append(eqn)
            update(eqn.uses)
    kept.reverse()
    return Program(program.inputs, kept, program.outputs)


class _Unhashable(Exception):
    """An operand CSE cannot compare by value (a container it does not know): the equation is kept."""


def _key(x):
    """A hashable key that is equal exactly when two operands are the same (constants by identity
    for arrays and other objects, by type and value for Python scalars). Ints, strings, None and
    Ellipsis stand for themselves (no two of them are equal across types); a bool, a float or a
    complex is tagged with its type (``1 == 1.0 == True``), and every container with its kind, so
    a tagged scalar never meets a container's key. Indexes of ints and slices of ints, the common
    parameters, are keyed without recursing."""
    t = type(x)
    if t is Var or t is int or t is str or x is None or x is Ellipsis:
        return x  # a Var is hashed by identity: renaming gives the canonical Var object
    if t is tuple or t is list:
        parts = []
        for v in x:
            u = type(v)
            if u is Var or u is int or v is None:
                parts.append(v)
            elif u is slice:
                a, b, c = v.start, v.stop, v.step
                if (a is None or type(a) is int) and (b is None or type(b) is int) and (c is None or type(c) is int):
                    parts.append(("slice", a, b, c))
                else:
                    parts.append(_key(v))
            elif u is np.ndarray:   # by identity; a small integer one (an index: np.take's, a list's) by value
                parts.append(("ints", v.dtype.str, v.shape, tuple(v.ravel().tolist()))
                             if v.dtype.kind in "iu" and v.size <= 16 else ("id", id(v)))
            else:
                parts.append(_key(v))
        return (t, tuple(parts))
    if t is slice:
        if _plain_slice(x):
            return ("slice", x.start, x.stop, x.step)
        return ("slice", _key(x.start), _key(x.stop), _key(x.step))
    if t is bool:
        return (bool, x)
    if t is float or t is complex:
        return (t, x) if x == x else ("nan",)
    if t is dict:
        return ("dict", tuple([(k, _key(v)) for k, v in x.items()]))  # equal dicts in another order: kept twice
    if isinstance(x, (np.ndarray, np.generic, np.dtype, type)) or callable(x):
        return ("id", id(x))
    raise _Unhashable


def _params_key(params):
    """``_key`` of a parameter dict (keys in its order: equal dicts in another order are kept twice),
    with the common values (ints, strings, None, bools, Vars) keyed inline."""
    items = []
    for k, v in params.items():
        t = type(v)
        if t is int or t is str or v is None or t is Var:
            items.append((k, v))
        elif t is bool:
            items.append((k, (bool, v)))
        else:
            items.append((k, _key(v)))
    return tuple(items)


def _plain_slice(s):
    a, b, c = s.start, s.stop, s.step
    return (a is None or type(a) is int) and (b is None or type(b) is int) and (c is None or type(c) is int)


def cse(program, multiply=None):
    """Compute each (primitive, operands, parameters) once: the same column read twice, the same
    rule constant made in two backward steps. Every primitive is a pure function of its operands.
    It leaves no dead code: the first of two equal equations takes over the uses of the second.
    ``multiply``: also drop ``x * 1`` as :func:`drop_identities` does, in the same walk over the
    program (one walk fewer over a loop's hundreds of thousands of equations)."""
    rename = {}
    gone = set()   # the renamed Vars themselves (one object per variable): one C-level test per equation
    disjoint = gone.isdisjoint
    seen = {}
    setdefault = seen.setdefault
    kept = []
    append = kept.append
    returned = {v.id for v in program.outputs if type(v) is Var} if multiply is not None else ()
    for eqn in program.eqns:
        if gone and not disjoint(eqn.uses):
            eqn = _renamed(eqn, rename)
        prim = eqn.prim
        args = eqn.args
        params = eqn.params
        if prim is multiply and not params and len(args) == 2 and (type(args[0]) is not Var or type(args[1]) is not Var):
            x = _identity_operand(eqn, returned)
            if x is not None:
                rename[eqn.outs[0].id] = x
                gone.add(eqn.outs[0])
                continue
        try:
            n = len(args)
            if n == 1 and type(args[0]) is Var or n == 2 and type(args[0]) is Var and type(args[1]) is Var:
                args_key = args
            else:
                args_key = _key(args)
            key = (prim, args_key, _params_key(params) if params else None)
        except _Unhashable:
            append(eqn)
            continue
        first = setdefault(key, eqn)   # one hash of the key (tuples do not keep theirs)
        if first is eqn:
            append(eqn)
        else:
            for o, f in zip(eqn.outs, first.outs):
                rename[o.id] = f
                gone.add(o)
    outputs = [substitute(v, rename) for v in program.outputs] if rename else program.outputs
    return Program(program.inputs, kept, outputs)


def _is_one(c):
    """Is constant ``c`` one everywhere? Checked only where that is cheap: a Python or NumPy scalar,
    an array of at most 65,536 elements (a sum's cotangent, folded while tracing, can be dense
    ones), or a broadcast array (all strides 0: one value repeated, as a seed's ones are)."""
    if type(c) in (int, float, bool) or isinstance(c, np.generic):
        return c == 1
    if type(c) is np.ndarray and c.dtype.kind in "biufc" and (c.size <= 1 << 16 or not any(c.strides)):
        return c.size > 0 and bool(np.all(c == 1) if any(c.strides) else c.flat[0] == 1)
    return False


def _identity_operand(eqn, returned):
    """``x`` when the product ``eqn`` (two operands, no parameters) is ``x * 1`` and may be ``x``
    itself (see :func:`drop_identities`), else None."""
    a, b = eqn.args
    x = b if type(a) is not Var and _is_one(a) else a if type(b) is not Var and _is_one(b) else None
    out = eqn.outs[0]
    if type(x) is Var and x.shape == out.shape and x.dtype == out.dtype and out.id not in returned:
        return x
    return None


def drop_identities(program, multiply):
    """``x * 1`` is ``x``: the backward pass seeds a sum's cotangent with broadcast ones, and the
    first rule multiplies by them (an elementwise pass over the whole array per call). Dropped only
    where the result is ``x`` exactly: same shape and dtype as the product, so the ones neither
    broadcast ``x`` nor change its type, and not for a returned product (the caller gets a new array,
    never ``x`` itself). :func:`cse` does the same in its walk when given ``multiply``."""
    rename = {}
    kept = []
    returned = {v.id for v in program.outputs if type(v) is Var}   # a result stays its own array
    for eqn in program.eqns:
        if rename:
            eqn = renamed(eqn, rename)
        if eqn.prim is multiply and len(eqn.args) == 2 and not eqn.params:
            x = _identity_operand(eqn, returned)
            if x is not None:
                rename[eqn.outs[0].id] = x
                continue
        kept.append(eqn)
    outputs = [substitute(v, rename) for v in program.outputs] if rename else program.outputs
    return Program(program.inputs, kept, outputs)


# The passes, by name; benchmarks/jit.py switches them off one at a time to measure each.
PASSES = {"identities": True, "cse": True, "simplify": True, "contract": True, "in_place": True, "out": True,
          "spell": True}


def optimize(program, prims, vectorize=None, donated=(), updates=True, simplify=None, spell=None):
    """The passes, in order. ``prims``: the primitives the passes know by identity (getitem,
    scatter_set, index_add, add); ``vectorize``: the vectorizing pass (transforms/_vectorize.py,
    bound by jit), run after CSE and before the in-place updates, or None; ``donated``: the input
    Vars whose arrays the program may write (``donate_argnums``); ``updates=False`` stops before
    the in-place updates (a program :func:`split` cuts in two gets them per part); ``simplify``
    and ``spell``: the rewrites of transforms/_rewrite.py, run after vectorizing and last, or None."""
    program = dce(program)
    if PASSES["cse"]:   # with the identities dropped in the same walk
        program = cse(program, prims["multiply"] if PASSES["identities"] else None)
    elif PASSES["identities"]:
        program = drop_identities(program, prims["multiply"])
    if vectorize is not None:
        program = vectorize(program)
    if simplify is not None and PASSES["simplify"]:
        program = simplify(program)
    return in_place_updates(program, prims, donated, spell) if updates else program


def in_place_updates(program, prims, donated=(), spell=None):
    """The passes that let updates write into buffers the program owns (see :func:`in_place`), then
    ``spell`` (transforms/_rewrite.py) when given."""
    if PASSES["in_place"]:
        program = fold_indexed_adds(program, prims["index_add"], prims["add"])
        program = hoist_reads(program, prims["scatter_set"], prims["getitem"])
        program = in_place(program, prims["scatter_set"], prims["index_add"], prims["add"], prims["getitem"], donated,
                           fresh=prims.get("fresh", ()))
    if spell is not None and PASSES["spell"]:
        program = spell(program)
    return program


def split(program, known, first):
    """Cut ``program`` where its first ``known`` inputs end: ``(forward, backward)``. ``forward``
    takes those inputs and returns the first ``first`` outputs (which must need no other input)
    and then the residuals, the values it computed that ``backward`` reads; ``backward`` takes the
    residuals and the other inputs and returns the other outputs. For a VJP program (primals, then
    cotangents) this is the forward pass that keeps what the backward pass needs, instead of a
    backward pass that computes the forward one again."""
    ready = {v.id for v in program.inputs[:known]}
    ahead, behind = [], []
    for eqn in program.eqns:
        if all(v.id in ready for v in eqn.uses):
            ahead.append(eqn)
            ready.update(o.id for o in eqn.outs)
        else:
            behind.append(eqn)
    early, late = program.outputs[:first], program.outputs[first:]
    if any(type(v) is Var and v.id not in ready for v in early):
        raise AssertionError("split: an output of the first part reads an input of the second")
    residuals = {}
    for v in [u for eqn in behind for u in eqn.uses] + [v for v in late if type(v) is Var]:
        if v.id in ready:
            residuals.setdefault(v.id, v)
    residuals = list(residuals.values())
    forward = dce(Program(program.inputs[:known], ahead, list(early) + residuals))
    return forward, Program(residuals + list(program.inputs[known:]), behind, list(late))


# --- code generation -----------------------------------------------------------------------------
_SAFE = re.compile(r"[^0-9a-zA-Z_]")
_TAKEN = re.compile(r"^(v|c)\d+$")


class _Names:
    """Names in the generated module: one per implementation and per constant, in order of use."""

    def __init__(self):
        self.namespace = {}
        self._by_id = {}

    def function(self, fn, name):
        known = self._by_id.get(id(fn))
        if known is not None:
            return known
        base = _SAFE.sub("_", name) or "f"
        if base[0].isdigit() or keyword.iskeyword(base) or hasattr(builtins, base) or _TAKEN.match(base):
            base = "_" + base
        name, k = base, 1
        while name in self.namespace:
            k += 1
            name = f"{base}_{k}"
        self.namespace[name] = fn
        self._by_id[id(fn)] = name
        return name

    def constant(self, value):
        known = self._by_id.get(id(value))
        if known is not None:
            return known
        name = f"c{len(self._by_id)}"
        self.namespace[name] = value
        self._by_id[id(value)] = name
        return name


def _literal(x, names, var_names):
    t = type(x)
    if t is Var:
        return var_names[x.id]
    if x is None or t is bool or t is int or t is str:
        return repr(x)
    if x is Ellipsis:
        return "..."
    if t is float:
        return repr(x) if np.isfinite(x) else names.constant(x)
    if t is complex:
        return repr(x) if np.isfinite(x) else names.constant(x)
    if t is tuple:
        inner = ", ".join(_literal(v, names, var_names) for v in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    if t is list:
        return "[" + ", ".join(_literal(v, names, var_names) for v in x) + "]"
    if t is slice:
        return "slice(" + ", ".join(_literal(v, names, var_names) for v in (x.start, x.stop, x.step)) + ")"
    return names.constant(x)


def _index_literal(index, names, var_names):
    """``x[...]`` written as Python writes it: ``v3[:, 2]``."""
    parts = index if type(index) is tuple else (index,)
    out = []
    for i in parts:
        if type(i) is slice:
            out.append(":".join("" if v is None else _literal(v, names, var_names)
                                for v in ((i.start, i.stop) if i.step is None else (i.start, i.stop, i.step))))
        else:
            out.append(_literal(i, names, var_names))
    if type(index) is tuple and len(index) == 1:
        return out[0] + ","
    return ", ".join(out) if out else "()"


def _comment(source):
    if source is None:
        return ""
    filename, line, note = source
    text = linecache.getline(filename, line).strip() if filename else ""
    if len(text) > 70:
        text = text[:67] + "..."
    where = f"{os.path.basename(filename)}:{line}  {text}" if filename else ""
    parts = [part for part in (note, where) if part]
    return "  # " + "; ".join(parts) if parts else ""


def generate(program, getitem, name="program"):
    """Python source of ``program`` and the namespace it runs in: one line per equation (line
    ``k + 2`` is equation ``k``; :func:`annotate` adds the comments saying where each came from).

    A variable is deleted after its last use (``del`` on the same line), so intermediates are
    freed as the program goes, as the eager backward pass frees its tape. ``getitem`` (the
    indexing primitive) is written as Python subscription.
    """
    names = _Names()
    names.namespace[name] = None   # taken by the program itself: a primitive of that name is renamed
    var_names = {}
    for k, v in enumerate(program.inputs):
        var_names[v.id] = f"x{k}"
    counter = 0
    last_use = {}
    eqns = program.eqns
    for k, eqn in enumerate(eqns):
        for v in eqn.uses:
            last_use[v.id] = k
    for v in program.outputs:
        if type(v) is Var:
            last_use[v.id] = len(eqns)
    lines = [f"def {name}({', '.join(var_names[v.id] for v in program.inputs)}):"]
    append = lines.append
    function = names.function
    for k, eqn in enumerate(eqns):
        prim = eqn.prim
        if prim is getitem:
            rhs = f"{_literal(eqn.args[0], names, var_names)}[{_index_literal(eqn.params['index'], names, var_names)}]"
        else:
            parts = [var_names[a.id] if type(a) is Var else _literal(a, names, var_names) for a in eqn.args]
            if eqn.params:
                parts += [f"{key}={_literal(value, names, var_names)}" for key, value in eqn.params.items()]
            rhs = f"{function(prim.impl, prim.name)}({', '.join(parts)})"
        targets = []
        for o in eqn.outs:
            if o.id in last_use:
                var_names[o.id] = target = f"v{counter}"
                counter += 1
                targets.append(target)
            else:
                targets.append("_")
        if prim.multiple_results:
            lhs = ", ".join(targets) + ("," if len(targets) == 1 else "")
        else:
            lhs = targets[0]
        dead = [var_names[v.id] for v in eqn.uses if last_use[v.id] == k]
        if dead:
            if len(dead) > 1:
                dead = sorted(set(dead))
            append(f"    {lhs} = {rhs}; del {', '.join(dead)}")
        else:
            append(f"    {lhs} = {rhs}")
    outs = []
    for v in program.outputs:
        if type(v) is Var:
            outs.append(var_names[v.id])
        elif isinstance(v, np.ndarray) and v.flags.writeable:
            outs.append(f"{names.constant(v)}.copy()")  # a fresh array per call, as eager returns
        elif isinstance(v, np.ndarray):   # read-only (an unused input's broadcast zeros): returned as eager does
            outs.append(names.constant(v))
        else:
            outs.append(_literal(v, names, var_names))
    append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    return "\n".join(lines) + "\n", names.namespace


def annotate(text, program):
    """``text`` (from :func:`generate`) with each equation's line followed by a comment naming the
    line of user code it came from; written only when asked for (``as_text()``)."""
    lines = text.splitlines()
    for k, eqn in enumerate(program.eqns):
        lines[k + 1] += _comment(eqn.source)
    return "\n".join(lines) + "\n"


def compile_program(text, namespace, name="program"):
    """The generated function; its source is registered with linecache so tracebacks show it."""
    filename = f"<wg.jit {name} {id(text):x}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    code = compile(text, filename, "exec")
    scope = dict(namespace)
    exec(code, scope)  # noqa: S102 - our own generated source
    return scope[name], filename


# --- in-place updates ------------------------------------------------------------------------------
# A functional update (``scatter_set``: copy, then write; ``index_add``: copy, then add; ``add``) of
# an array that nothing reads afterwards can write into that array instead: the loop of Buffer
# writes, and the backward pass's accumulation of many column reads into one cotangent, then cost
# the elements written, not a copy of the whole array per step. Which arrays may be written is
# decided by ownership and aliasing: an array is owned when the program made it fresh (a ufunc's
# result, a copy); any other operation's result may be a view of its operands (getitem, reshape,
# transpose, ...), so it keeps those buffers alive for as long as it is read.

def _set_in_place(x, v, index):
    x[index] = v
    return x


def _add_at_in_place(x, v, index):
    if _basic(index):
        x[index] += v
    else:
        np.add.at(x, index, v)
    return x


def _add_in_place(x, v):
    return np.add(x, v, out=x)


def _basic(index):
    for i in index if type(index) is tuple else (index,):
        if not (i is None or i is Ellipsis or type(i) is slice or isinstance(i, (int, np.integer))):
            return False
    return True


class _InPlace:
    """A primitive-like record for the generated code (impl and name only)."""

    multiple_results = False

    def __init__(self, name, impl):
        self.name = name
        self.impl = impl


SET_IN_PLACE = _InPlace("set_in_place", _set_in_place)
ADD_AT_IN_PLACE = _InPlace("add_at_in_place", _add_at_in_place)
ADD_IN_PLACE = _InPlace("add_in_place", _add_in_place)


def _scalar_read(eqn, getitem):
    """``x[i, j, k]`` with one int per axis: a NumPy scalar, a copy, never a view."""
    if eqn.prim is not getitem:
        return False
    index = eqn.params["index"]
    index = index if type(index) is tuple else (index,)
    base = eqn.args[0]
    return type(base) is Var and len(index) == len(base.shape) and all(type(i) is int for i in index)


def hoist_reads(program, scatter_set, getitem):
    """Move scalar reads ``y = x[i, j]`` of an array to just before a ``scatter_set`` of that array
    that precedes them, so the write can happen in place (the backward pass of Buffer writes reads
    an element, then zeroes it, in the other order)."""
    eqns = program.eqns
    users = {}
    for k, eqn in enumerate(eqns):
        for v in eqn.uses:
            users.setdefault(v.id, []).append(k)
    defined_at = {}
    for k, eqn in enumerate(eqns):
        for o in eqn.outs:
            defined_at[o.id] = k
    moved = {}
    taken = set()
    for k, eqn in enumerate(eqns):
        if eqn.prim is not scatter_set or type(eqn.args[0]) is not Var:
            continue
        later = [j for j in users.get(eqn.args[0].id, ()) if j > k]
        if later and all(_scalar_read(eqns[j], getitem) and j not in taken and
                         all(defined_at.get(v.id, -1) < k for v in eqns[j].uses) for j in later):
            moved[k] = later
            taken.update(later)
    if not moved:
        return program
    order = []
    for k, eqn in enumerate(eqns):
        if k in taken:
            continue
        for j in moved.get(k, ()):
            order.append(eqns[j])
        order.append(eqn)
    return Program(program.inputs, order, program.outputs)


_USES = operator.attrgetter("uses")
_PRIM = operator.attrgetter("prim")


def _all_zero(a):
    """Is the constant ``a`` all zeros? A broadcast scalar (no strides) is read at one element."""
    if a.size and not any(a.strides):
        return not a[(0,) * a.ndim]
    return not a.any()


def _positions(prims, prim):
    """The positions where ``prim`` occurs in ``prims`` (an iterable of primitives), found without a
    Python-level step per equation."""
    return itertools.compress(itertools.count(), map(operator.is_, prims, itertools.repeat(prim)))


def _without(eqns, dropped):
    """``eqns`` less the positions ``dropped`` (few), copied by slices."""
    out, start = [], 0
    for k in sorted(dropped):
        out += eqns[start:k]
        start = k + 1
    out += eqns[start:]
    return out


def fold_indexed_adds(program, index_add, add):
    """``t = index_add(zeros, g, i); s = add(acc, t)`` (t read once) becomes ``s = index_add(acc, g, i)``:
    the backward pass of a column read adds into the accumulated cotangent, not via a dense zero array."""
    eqns = program.eqns
    prims = list(map(_PRIM, eqns))
    scattered = {}   # each scatter into zeros's result (a Var: one object per variable) -> its position
    for k in _positions(prims, index_add):
        eqn = eqns[k]
        if type(eqn.args[0]) is np.ndarray and _all_zero(eqn.args[0]):
            scattered[eqn.outs[0]] = k
    if not scattered:
        return program
    adds = [k for k in _positions(prims, add)
            if not eqns[k].params and any(type(a) is Var and a in scattered for a in eqns[k].args)]
    if not adds:
        return program   # no add reads a scatter (seed 000's loop: the reads' cotangents chain as index_adds)
    # the reads of the scatters only, counted without leaving C (filtered by set membership)
    counts = collections.Counter(filter(scattered.__contains__, itertools.chain.from_iterable(map(_USES, eqns))))
    counts.update(v for v in program.outputs if type(v) is Var)
    out = None
    folded = []   # the scatters now done by the add that read them (their one use): dropped
    for k in adds:
        eqn = eqns[k]
        a, b = eqn.args
        result = eqn.outs[0]
        for acc, t in ((a, b), (b, a)):
            if type(t) is Var and t in scattered and counts[t] == 1 and type(acc) is Var and acc is not t \
                    and acc.shape == result.shape == t.shape and acc.dtype == result.dtype:
                src = eqns[scattered[t]]
                g = src.args[1]
                uses = tuple(v for v in (acc, g) if type(v) is Var) + tuple(
                    v for v in src.uses if v is not g and v is not src.args[0])
                if out is None:
                    out = list(eqns)
                out[k] = Eqn(index_add, (acc, g), src.params, eqn.outs, uses, eqn.source or src.source)
                folded.append(scattered[t])
                break
    if out is None:
        return program
    return Program(program.inputs, _without(out, folded), program.outputs)


def _into_operand(eqn, owned, fits):
    """The operand an elementwise ufunc may write its result into (``out=``): one whose buffer the
    program owns (a fresh result, or a donated input) and that is read for the last time here, of
    the result's shape and dtype; None otherwise. A fresh result of a million elements costs its
    allocation and first touch (page faults) again per call: writing into a dead operand's buffer
    instead made ``np.add`` 2.7x faster there (the forward pass's ``Wm @ x + b``, the backward
    pass's products), and costs nothing at ten elements."""
    impl = eqn.prim.impl
    if not isinstance(impl, np.ufunc) or impl.nout != 1 or eqn.params or len(eqn.args) != impl.nin:
        return None
    for a in eqn.args:
        if type(a) is Var and a.id in owned and fits(a):
            return a
    return None


def in_place(program, scatter_set, index_add, add, getitem, donated=(), fresh=()):
    """Mark the updates that may write into their first operand (see above). A donated input is
    owned from the start, and an elementwise ufunc whose operand the program owns and reads for the
    last time writes its result there (:func:`_into_operand`): ``p - lr * g`` updates a donated
    ``p`` in place, and ``x @ w + b`` adds ``b`` into the product. ``fresh``: primitives besides
    the ufuncs whose results are always new arrays (products)."""
    eqns = program.eqns
    last = {}
    for k, eqn in enumerate(eqns):
        for v in eqn.uses:
            last[v.id] = k
    end = len(eqns)
    for v in program.outputs:
        if type(v) is Var:
            last[v.id] = end
    buffers = {}     # var id -> the buffers it may alias (frozenset of buffer ids)
    buffer_last = {}  # buffer id -> last read of any var aliasing it, among the vars defined so far
    owned = set()    # var ids whose buffer the program made and may write
    for v in program.inputs:
        buffers[v.id] = frozenset((("in", v.id),))
        buffer_last[("in", v.id)] = max(buffer_last.get(("in", v.id), -1), last.get(v.id, -1))
    owned.update(v.id for v in donated)
    out = []
    rename = {}   # the sums of an owned array and constant zeros: that array (see below)
    for k, eqn in enumerate(eqns):
        if rename:
            eqn = renamed(eqn, rename)
        prim = eqn.prim
        target = eqn.args[0] if eqn.args else None
        result = eqn.outs[0]
        replacement = None
        if prim is scatter_set or prim is index_add or (prim is add and not eqn.params):
            if type(target) is Var and target.id in owned and target.shape == result.shape \
                    and target.dtype == result.dtype and target.shape != () \
                    and last.get(target.id) == k and all(buffer_last.get(b, -1) <= k for b in buffers[target.id]) \
                    and not (prim is add and eqn.args[1] is target):
                if prim is add and type(eqn.args[1]) is np.ndarray and _all_zero(eqn.args[1]):
                    # ``x + zeros`` that would write into x is x: the cotangent that
                    # ``np.zeros(shape) + 0 * x.ravel()[0]`` sends to x, folded to a dense zero
                    # array (W1 at 16x written in place: 29 us a call on a (64, 4, 256) array)
                    rename[result.id] = target
                    last[target.id] = last.get(result.id, -1)
                    for b in buffers[target.id]:
                        buffer_last[b] = max(buffer_last.get(b, -1), last[target.id])
                    continue
                replacement = SET_IN_PLACE if prim is scatter_set else ADD_AT_IN_PLACE if prim is index_add else ADD_IN_PLACE
        if replacement is None and PASSES["out"]:
            def fits(a, k=k, result=result):
                return a.shape == result.shape and a.dtype == result.dtype and a.shape != () and last.get(a.id) == k \
                    and all(buffer_last.get(b, -1) <= k for b in buffers[a.id])
            into = _into_operand(eqn, owned, fits)
            if into is not None:
                eqn = Eqn(prim, eqn.args, {"out": into}, eqn.outs, eqn.uses, eqn.source)
                buffers[result.id] = buffers[into.id]
                owned.add(result.id)
                for b in buffers[result.id]:
                    buffer_last[b] = max(buffer_last.get(b, -1), last.get(result.id, -1))
                out.append(eqn)
                continue
        if replacement is not None:
            eqn = Eqn(replacement, eqn.args, eqn.params, eqn.outs, eqn.uses, eqn.source)
            buffers[result.id] = buffers[target.id]
            owned.add(result.id)
        elif isinstance(prim.impl, np.ufunc) or prim in fresh or prim is scatter_set or prim is index_add \
                or _scalar_read(eqn, getitem):
            for o in eqn.outs:
                buffers[o.id] = frozenset((o.id,))
                if o.shape != () and not _scalar_read(eqn, getitem):
                    owned.add(o.id)
        else:
            inherited = frozenset().union(*(buffers.get(v.id, frozenset()) for v in eqn.uses))
            for o in eqn.outs:
                buffers[o.id] = inherited | {o.id}
        for o in eqn.outs:
            for b in buffers[o.id]:
                buffer_last[b] = max(buffer_last.get(b, -1), last.get(o.id, -1))
        out.append(eqn)
    return Program(program.inputs, out, [substitute(v, rename) for v in program.outputs] if rename else program.outputs)

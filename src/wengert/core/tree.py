"""Pytrees: nested containers of arrays, flattened at the transform boundary.

Tuples, lists, dicts (keys sorted, as JAX does), namedtuples and dataclass instances are
containers; ``None`` is an empty container; everything else is a leaf. Dataclasses need no
registration. Each leaf becomes its own tape input, so a function that reads 3 fields of a
10-field record does work for 3 fields, not 10.
"""
from __future__ import annotations

import dataclasses


class TreeDef:
    """The shape of a pytree without its leaves."""

    __slots__ = ("kind", "meta", "children", "num_leaves", "_hash")

    def __init__(self, kind, meta, children):
        self.kind = kind
        self.meta = meta
        self.children = children
        self.num_leaves = 1 if kind == "leaf" else sum(c.num_leaves for c in children)
        self._hash = None

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.kind == other.kind
                and self.meta == other.meta and self.children == other.children)

    def __hash__(self):   # computed once: transforms key caches on the definitions of every call
        if self._hash is None:
            self._hash = hash((self.kind, self.meta, self.children))
        return self._hash

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(map(repr, self.children))
        return f"{self.kind}[{self.meta}]({inner})" if self.meta is not None else f"{self.kind}({inner})"


LEAF = TreeDef("leaf", None, ())


class FieldName(str):
    """A path key that names a field of a namedtuple or dataclass, as opposed to a dict key.

    It equals the plain string; :func:`path_str` prints it as ``.name`` and a dict key as
    ``['name']``.
    """

    __slots__ = ()


_LEAF_TYPES = set()   # types seen to be leaves: arrays, scalars, tracers (containerness is a type's)
_NAMEDTUPLE_KEYS = {}   # namedtuple type -> its fields as path keys (linalg's results are namedtuples)


def _children(x):
    """(kind, meta, children, child keys) for a container, or None for a leaf."""
    t = type(x)
    if t in _LEAF_TYPES:
        return None
    if x is None:
        return "none", None, (), ()
    if t is tuple:
        return "tuple", None, x, range(len(x))
    if t is list:
        return "list", None, x, range(len(x))
    if t is dict:
        keys = tuple(sorted(x))
        return "dict", keys, tuple(x[k] for k in keys), keys
    if t in _NAMEDTUPLE_KEYS:
        return "namedtuple", t, tuple(x), _NAMEDTUPLE_KEYS[t]
    if isinstance(x, tuple) and hasattr(t, "_fields"):
        keys = _NAMEDTUPLE_KEYS[t] = tuple(FieldName(n) for n in t._fields)
        return "namedtuple", t, tuple(x), keys
    if dataclasses.is_dataclass(t):    # an instance (a dataclass's class object is a leaf)
        names = tuple(f.name for f in dataclasses.fields(x))
        return "dataclass", (t, names), tuple(getattr(x, n) for n in names), tuple(FieldName(n) for n in names)
    _LEAF_TYPES.add(t)
    return None


def flatten_with_paths(tree, path=()):
    """Leaves with their paths (tuples of keys), and the tree's definition."""
    found = _children(tree)
    if found is None:
        return [(path, tree)], LEAF
    kind, meta, children, keys = found
    leaves, defs = [], []
    for key, child in zip(keys, children):
        sub, d = flatten_with_paths(child, path + (key,))
        leaves.extend(sub)
        defs.append(d)
    return leaves, TreeDef(kind, meta, tuple(defs))


def flatten(tree):
    """``(leaves, treedef)``; ``unflatten(treedef, leaves)`` rebuilds the tree."""
    leaves = []
    return leaves, _flatten_into(tree, leaves)


def _flatten_into(x, leaves):
    """``flatten_with_paths`` without the paths: transforms flatten every output and cotangent
    (a list of many arrays too: a child of a type already seen to be a leaf is taken without a
    call per leaf)."""
    found = _children(x)
    if found is None:
        leaves.append(x)
        return LEAF
    kind, meta, children, _ = found
    defs = []
    for c in children:
        if type(c) in _LEAF_TYPES:
            leaves.append(c)
            defs.append(LEAF)
        else:
            defs.append(_flatten_into(c, leaves))
    return TreeDef(kind, meta, tuple(defs))


def unflatten(treedef, leaves):
    leaves = list(leaves)
    if len(leaves) != treedef.num_leaves:
        more = "more" if len(leaves) > treedef.num_leaves else "fewer"
        raise ValueError(f"unflatten: {more} leaves ({len(leaves)}) than the tree definition {treedef!r} "
                         f"holds ({treedef.num_leaves})")
    return _build(treedef, iter(leaves))


def _build(d, it):
    if d is LEAF:
        return next(it)
    children = [next(it) if c is LEAF else _build(c, it) for c in d.children]
    if d.kind == "none":
        return None
    if d.kind == "tuple":
        return tuple(children)
    if d.kind == "list":
        return children
    if d.kind == "dict":
        return dict(zip(d.meta, children))
    if d.kind == "namedtuple":
        return d.meta(*children)
    cls, names = d.meta
    obj = object.__new__(cls)
    for name, value in zip(names, children):
        object.__setattr__(obj, name, value)
    return obj


def map(fn, tree, *rest):  # noqa: A001 - mirrors jax.tree.map
    """Apply ``fn`` to each leaf (and the matching leaves of ``rest``, which share the structure)."""
    leaves, treedef = flatten(tree)
    others = []
    for r in rest:
        r_leaves, r_def = flatten(r)
        if r_def != treedef:
            raise ValueError(f"tree.map: structures differ: {treedef!r} vs {r_def!r}")
        others.append(r_leaves)
    return unflatten(treedef, [fn(*xs) for xs in zip(leaves, *others)])


def leaves(tree):
    return flatten(tree)[0]


def structure(tree):
    return flatten(tree)[1]


def path_str(path):
    """A readable path such as ``['w'].b[0]`` for error messages: dict keys and sequence positions
    in brackets, namedtuple and dataclass fields after a dot."""
    out = ""
    for key in path:
        if type(key) is FieldName:
            out += f".{key}"
        else:
            out += f"[{str(key)!r}]" if isinstance(key, str) else f"[{key!r}]"
    return out

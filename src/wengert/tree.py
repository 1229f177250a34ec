"""Pytrees for users: flatten, unflatten and map over nested tuples, lists, dicts,
namedtuples and dataclass instances, the same way wengert's transforms see them."""
from .core.tree import TreeDef, flatten, flatten_with_paths, leaves, map, structure, unflatten  # noqa: F401

__all__ = ["TreeDef", "flatten", "flatten_with_paths", "leaves", "map", "structure", "unflatten"]

"""The primitive table: each primitive by its (unique) name, filled by ``defprim``.

A module of its own so that the batching rules (``_batching.py``), which sit below the families that
declare them, can call the primitives they need (reshape, einsum, ...) without importing them.
"""
PRIMITIVES = {}

"""Transforms over the primitive table: reverse mode now; forward mode, vmap and jit later."""

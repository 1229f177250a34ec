"""The engine: traces and tracers, the tape and the backward pass, pytrees."""

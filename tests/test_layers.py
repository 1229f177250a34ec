"""The package's layers, read from its sources: imports go downwards only, private names stay inside
their package, and no import hides inside a function to dodge a cycle.

Layers, lowest first: core/ (the engine) <- primitives/ (the table) <- numpy/ (the NumPy face) <-
everything else (transforms/, scipy/, profiling/, and the modules at the top: nn.py, buffer.py, ...).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "wengert"
LAYER = {"core": 0, "primitives": 1, "numpy": 2}   # anything else: 3
# Function-local imports that are not cycle dodges: optional dependencies imported where they are
# used (matplotlib only for a plot) and the command line's entry point.
LOCAL_ALLOWED = {
    ("profiling/_report.py", "matplotlib"), ("profiling/_report.py", "matplotlib.pyplot"),
    ("__main__.py", "wengert.profiling._cli"),
}


def _package(parts):
    """The package of a module given as path parts under wengert/: core, primitives, ... or the
    module's own name for one at the top (nn.py, buffer.py, rewrites.py, ...)."""
    return parts[0] if len(parts) > 1 else parts[0].removesuffix(".py")


def _layer(package):
    return LAYER.get(package, 3)


def _imports():
    """(file, line, importing package, imported module parts, imported names, at module level?)."""
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        tree = ast.parse(path.read_text(), str(path))
        top_level = {id(node) for node in tree.body}
        for node in tree.body:   # imports inside a module-level try (optional dependencies) count as top
            if isinstance(node, ast.Try):
                top_level.update(id(n) for n in node.body + [h for h in node.handlers] + node.orelse)
                for h in node.handlers:
                    top_level.update(id(n) for n in h.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    if not (node.module or "").startswith("wengert"):
                        continue
                    target = node.module.split(".")[1:]
                else:
                    base = list(rel.parts[:-1])
                    base = base[:len(base) - (node.level - 1)]
                    target = base + (node.module.split(".") if node.module else [])
                names = [a.name for a in node.names]
                if not target:   # from . import numpy: the named modules are the targets
                    for name in names:
                        out.append((str(rel), node.lineno, [name], [], id(node) in top_level, node))
                    continue
                out.append((str(rel), node.lineno, target, names, id(node) in top_level, node))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("wengert"):
                        out.append((str(rel), node.lineno, a.name.split(".")[1:], [], id(node) in top_level, node))
                    elif id(node) not in top_level:
                        out.append((str(rel), node.lineno, ["<external>", a.name], [], False, node))
    return out


def _is_module(parts):
    return (SRC.joinpath(*parts).with_suffix(".py")).exists() or SRC.joinpath(*parts).is_dir()


def _module_name(target):
    return "wengert." + ".".join(target) if target and target[0] != "<external>" else target[-1]


IMPORTS = _imports()


def _packages(rel, target):
    """The packages of the importing file ``rel`` and of the imported ``target``."""
    return (_package(pathlib.PurePath(rel).parts),
            _package(target if len(target) > 1 or target[0] in LAYER else [target[0] + ".py"]))


def test_layers_import_downwards_only():
    upward = []
    for rel, line, target, names, _, _ in IMPORTS:
        if not target or target[0] == "<external>":
            continue
        here, there = _packages(rel, target)
        if _layer(there) > _layer(here) or (_layer(here) < 3 and _layer(there) == _layer(here) and there != here):
            upward.append(f"{rel}:{line} imports {_module_name(target)}")
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_no_private_name_crosses_a_package_boundary():
    leaks = []
    for rel, line, target, names, _, _ in IMPORTS:
        if not target or target[0] == "<external>":
            continue
        here, there = _packages(rel, target)
        if here == there:
            continue
        # a package's private module may be named (``primitives._table``); its private names may not
        private = [n for n in names if n.startswith("_") and not _is_module(target + [n])]
        if private:
            leaks.append(f"{rel}:{line} imports {private} from {_module_name(target)}")
    assert not leaks, "private names imported from another package:\n" + "\n".join(leaks)


def test_no_function_local_imports():
    """An import inside a function is how a cycle is dodged; the layers above make it unnecessary."""
    local = [f"{rel}:{line} imports {_module_name(target)}" for rel, line, target, _, top, _ in IMPORTS
             if not top and (rel, _module_name(target)) not in LOCAL_ALLOWED]
    assert not local, "function-local imports:\n" + "\n".join(local)


@pytest.mark.parametrize("layer", ["primitives", "numpy"])
def test_the_table_and_the_numpy_face_know_no_transform(layer):
    found = [f"{rel}:{line}" for rel, line, target, _, _, _ in IMPORTS
             if rel.startswith(layer + "/") and target and target[0] == "transforms"]
    assert not found, found

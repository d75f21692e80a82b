"""Imports a framework's module without running the `__init__` of the packages above it, which
load the framework's training stack (torch and the like) that its sandbox path never uses. The
modules themselves are the framework's own, unmodified."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types


def installed(package: str) -> str:
    """The directory that holds an installed `package`, found without importing it."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not installed"
    return os.path.dirname(next(iter(spec.submodule_search_locations)))


def bare_packages(root: str, *names: str) -> None:
    """Registers each dotted package of `names` (parents first) as a bare package whose modules
    are found under `root`, its `__init__` not run; a parent not named is imported as it is."""
    for name in names:
        if name in sys.modules:
            continue
        parent = name.rpartition(".")[0]
        if parent:
            importlib.import_module(parent)
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(root, *name.split("."))]
        sys.modules[name] = pkg
        if parent:
            setattr(sys.modules[parent], name.rpartition(".")[2], pkg)


def load(root: str, module: str, *bare: str) -> types.ModuleType:
    """`module` of the framework under `root`, the packages `bare` left bare."""
    if root not in sys.path:
        sys.path.insert(0, root)
    bare_packages(root, *bare)
    return importlib.import_module(module)

"""Backends create and destroy sandboxes; `get_backend` builds one by name."""

from __future__ import annotations

import importlib
import re
from typing import Any

from ..errors import BackendUnavailable, InvalidRequest
from .base import Backend, SandboxHandle

__all__ = ["Backend", "SandboxHandle", "get_backend"]


def get_backend(name: str, **kwargs: Any) -> Backend:
    """A new backend by name: module `sandboxes.backends.<name>` must define `create_backend(**kw)`,
    which returns a `Backend` (a subclass of `base.Backend`).

    The pool passes `pool_id=`; "local" is built in, "docker" / "kubernetes" plug in the same way.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
        raise InvalidRequest(f"invalid backend name {name!r}")
    module_name = f"{__name__}.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            raise InvalidRequest(f"unknown backend {name!r}") from e
        raise BackendUnavailable(f"backend {name!r} needs a missing module: {e.name}") from e
    factory = getattr(module, "create_backend", None)
    if factory is None:
        raise InvalidRequest(f"backend module {module_name} has no create_backend()")
    return factory(**kwargs)

"""The remote API server (`sandboxes serve`): gRPC service over a Pool, auth, quotas, metrics.

Submodules are imported on use (`Server` and `serve` below).
"""

from __future__ import annotations

from typing import Any

__all__ = ["Server", "serve"]


def __getattr__(name: str) -> Any:
    if name in ("Server", "serve"):
        from sandboxes.server import app

        return getattr(app, name)
    raise AttributeError(name)

"""The one small interface the pool drives, whatever runs the sandboxes (process, container, pod)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..templates import Template

__all__ = ["Backend", "SandboxHandle"]


@dataclass
class SandboxHandle:
    """A running sandbox as its backend knows it.

    `endpoint` / `token` reach its agent (`unix:///…/agent.sock` or `http://ip:port`);
    `backend_data` is the backend's own object (a `_native.LocalSandbox`, a container, a pod name).
    """

    id: str
    endpoint: str
    token: str = field(repr=False)
    backend_data: Any = None
    created_at: float = field(default_factory=time.time)


@runtime_checkable
class Backend(Protocol):
    """Creates and destroys sandboxes. The pool never knows which backend it drives."""

    name: str

    async def create(self, template: Template, sandbox_id: str) -> SandboxHandle:
        """Start a sandbox; returns only once its agent answered (ready means ready).

        Raises `LaunchError` (a step failed) or `BackendUnavailable`.
        """
        ...

    async def destroy(self, handle: SandboxHandle) -> None:
        """Kill the sandbox and free everything it held. Idempotent."""
        ...

    async def reap_orphans(self) -> int:
        """Remove leftovers of dead pools owned by this backend; returns how many sandboxes."""
        ...

    async def close(self) -> None:
        """Release the backend's own resources (sandboxes are destroyed by the pool first)."""
        ...

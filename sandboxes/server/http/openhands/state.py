"""What the OpenHands runtime API keeps about a runtime beyond the server's record: the session it
serves, the image and command it was started with, its session key and the address of its agent
server, and how that server's process is doing (`Runtime`)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandboxes.server.registry import Record

__all__ = ["ATTR", "LOG_TAIL_BYTES", "Runtime"]

ATTR = "openhands"  # Record.attrs key of a runtime this API started
LOG_TAIL_BYTES = 16 << 10  # of the agent server's output, kept for `pod_logs`


@dataclass
class Runtime:
    """One runtime as the API shows it. `id` (its `runtime_id`) is the server's sandbox id."""

    id: str
    session_id: str
    image: str
    command: str
    working_dir: str
    port: int  # where its agent server listens inside the sandbox
    url: str = ""  # that port from outside: no path (`ServerCore.port_listener`)
    session_api_key: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    resource_factor: int = 1
    created_at: float = field(default_factory=time.time)
    exit_code: int | None = None  # set once its agent server's process ended
    logs: str = ""  # the tail of that process's output

    def add_output(self, data: bytes) -> None:
        self.logs = (self.logs + data.decode("utf-8", "replace"))[-LOG_TAIL_BYTES:]

    def to_json(self, rec: Record) -> dict[str, Any]:
        """The platform's runtime (`/start`, `/sessions/{id}`, `/runtime/{id}`, `/list`)."""
        paused = rec.state == "paused"
        if paused:
            pod = "paused"
        elif self.exit_code is not None:
            pod = "failed"
        else:
            pod = "ready"
        out: dict[str, Any] = {
            "runtime_id": self.id,
            "session_id": self.session_id,
            "url": self.url,
            "session_api_key": self.session_api_key,
            "status": "paused" if paused else "running",
            "pod_status": pod,
            "image": self.image,
            "work_hosts": {},
            "restart_count": 0,
            "restart_reasons": [],
            "resource_factor": self.resource_factor,
        }
        if pod == "failed":
            out["pod_logs"] = self.logs
            out["exit_code"] = self.exit_code
        return out

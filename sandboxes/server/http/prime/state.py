"""What the Prime Sandboxes API keeps about a sandbox beyond the server's record: the fields its
clients read back (name, image, resources, timeouts, labels), its gateway tokens, its status, and
the tombstones of sandboxes that ended (so a client asking about one learns why it ended)."""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from sandboxes.server.http.timestamps import iso
from sandboxes.server.http.tokens import digest, matches

__all__ = ["GATEWAY_TOKEN_TTL_S", "PrimeSandbox", "Tombstones"]

# A gateway token lives this long; clients refresh a minute before it expires (`POST .../auth`).
GATEWAY_TOKEN_TTL_S = 3600.0
# A new token is minted once the current one has less than this left.
GATEWAY_TOKEN_RENEW_S = 600.0
# Where the sandbox's start command writes (read back by `GET /sandbox/{id}/logs`).
START_LOG = "/tmp/.sandbox-start.log"


@dataclass
class PrimeSandbox:
    """One sandbox as the API shows it. `id` is the server's sandbox id."""

    id: str
    name: str
    docker_image: str
    template: str
    cpu_cores: float
    memory_gb: float
    disk_size_gb: float
    disk_mount_path: str
    timeout_minutes: int
    idle_timeout_minutes: int | None
    labels: list[str]
    environment_vars: dict[str, str]
    secrets: dict[str, str]
    vm: bool
    start_command: dict[str, Any] | None
    user: str  # who runs programs: "root" or the template's unprivileged user
    # The egress policy as last given (both None: none was, and the sandbox reaches nothing).
    network_allowlist: list[str] | None = None
    network_denylist: list[str] | None = None
    policy_generation: int = 1
    created_at: float = field(default_factory=time.time)
    status: str = "RUNNING"
    terminated_at: float | None = None
    termination_reason: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    # (sha256 of token, expiry unix seconds); the current one last.
    _tokens: list[tuple[bytes, float]] = field(default_factory=list)
    _token: str = ""
    log: list[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        """A line of the sandbox's log (`GET /sandbox/{id}/logs`), bounded."""
        self.log.append(f"{iso(time.time())} {line}")
        del self.log[:-200]

    def gateway_token(self) -> tuple[str, float]:
        """The current token and its expiry, minted anew when it is close to expiring; the
        previous token stays valid until its own expiry."""
        now = time.time()
        if not self._tokens or self._tokens[-1][1] - now < GATEWAY_TOKEN_RENEW_S:
            self._token = secrets.token_urlsafe(32)
            self._tokens = [t for t in self._tokens if t[1] > now][-1:]
            self._tokens.append((digest(self._token), now + GATEWAY_TOKEN_TTL_S))
        return self._token, self._tokens[-1][1]

    def token_ok(self, token: str) -> bool:
        """Whether `token` is one of this sandbox's unexpired tokens (constant time per token)."""
        now = time.time()
        return matches((known for known, expires in self._tokens if expires > now), token)

    def end(
        self, status: str, reason: str, error_type: str | None = None, message: str | None = None
    ) -> None:
        if self.terminated_at is None:
            self.status, self.termination_reason = status, reason
            self.error_type, self.error_message = error_type, message
            self.terminated_at = time.time()
            self.note(f"sandbox ended: {reason}")

    def to_json(self) -> dict[str, Any]:
        """The API's camelCase sandbox object."""
        updated = self.terminated_at or self.created_at
        return {
            "id": self.id,
            "name": self.name,
            "dockerImage": self.docker_image,
            "startCommand": self.start_command,
            "cpuCores": self.cpu_cores,
            "memoryGB": self.memory_gb,
            "diskSizeGB": self.disk_size_gb,
            "diskMountPath": self.disk_mount_path,
            "gpuCount": 0,
            "gpuType": None,
            "vm": self.vm,
            "networkAllowlist": self.network_allowlist,
            "networkDenylist": self.network_denylist,
            "status": self.status,
            "timeoutMinutes": self.timeout_minutes,
            "idleTimeoutMinutes": self.idle_timeout_minutes,
            "terminationReason": self.termination_reason,
            # Values of secrets are never sent back.
            "environmentVars": dict(self.environment_vars),
            "secrets": {k: "********" for k in self.secrets},
            "advancedConfigs": None,
            "labels": list(self.labels),
            "createdAt": iso(self.created_at),
            "updatedAt": iso(updated),
            "startedAt": iso(self.created_at),
            "terminatedAt": iso(self.terminated_at) if self.terminated_at else None,
            "exitCode": None,
            "errorType": self.error_type,
            "errorMessage": self.error_message,
            "userId": None,
            "teamId": None,
            "region": "local",
        }

    def status_json(self) -> dict[str, Any]:
        return {
            "sandbox_id": self.id,
            "status": self.status,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "pending_image_build_id": None,
        }


class Tombstones:
    """Ended sandboxes by id, newest kept (bounded): `get` still answers for them, with their
    final status, and their gateway answers "terminated" instead of an unknown sandbox."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[str, PrimeSandbox]] = OrderedDict()

    def add(self, owner: str, sandbox: PrimeSandbox) -> None:
        self._items[sandbox.id] = (owner, sandbox)
        self._items.move_to_end(sandbox.id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def get(self, sandbox_id: str, owner: str | None = None) -> PrimeSandbox | None:
        item = self._items.get(sandbox_id)
        if item is None or (owner is not None and item[0] != owner):
            return None
        return item[1]

    def of(self, owner: str) -> list[PrimeSandbox]:
        return [sb for o, sb in self._items.values() if o == owner]

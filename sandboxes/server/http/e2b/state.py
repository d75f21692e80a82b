"""What the E2B API keeps about a sandbox beyond the server's record: the template it was asked
for, its metadata, its in-sandbox access token, its timeout, and how it shows itself to clients."""

from __future__ import annotations

import posixpath
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from sandboxes.errors import InvalidRequest
from sandboxes.server.http.timestamps import iso
from sandboxes.server.http.tokens import digest, matches

__all__ = ["ENVD_VERSION", "E2bSandbox"]

# The in-sandbox daemon's version the SDK is told: the newest protocol it speaks (no older
# client-side fallbacks apply; every call it gates is served or refused here).
ENVD_VERSION = "0.6.4"


@dataclass
class E2bSandbox:
    """One sandbox as the API shows it. `id` is the server's sandbox id."""

    id: str
    template_id: str  # as the client named it
    template: str  # the server's template that runs it
    metadata: dict[str, str]
    env: dict[str, str]
    cpu_count: int
    memory_mb: int
    disk_mb: int
    user: str  # who runs programs: "root" or the template's unprivileged user
    work_dir: str
    allow_internet_access: bool
    client_id: str = field(default_factory=lambda: secrets.token_hex(8))
    started_at: float = field(default_factory=time.time)
    end_at: float = 0.0
    state: str = "running"  # or "paused"
    timeout_s: float = 300.0  # asked at create: what a resume's timeout is unless it asks
    on_timeout: str = "kill"  # or "pause" (autoPause)
    auto_resume: bool = False  # a call to a paused sandbox resumes it (autoResume)
    # Where its ports are reached (`get_host`: `{port}-{id}.{domain}`): the server's ports
    # listener, None where it serves none.
    domain: str | None = None
    # The envd access token (`X-Access-Token`) and the traffic token of the code interpreter's
    # calls (`E2B-Traffic-Access-Token`): handed out once, kept as digests.
    access_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    _digest: bytes = b""
    # The sandbox's user a call that names none runs as ("": its programs' own): a built
    # template's `user` step.
    run_as: str = ""

    def __post_init__(self) -> None:
        self._digest = digest(self.access_token)

    def token_ok(self, token: str | None) -> bool:
        """Whether `token` is this sandbox's access token (constant time)."""
        return bool(token) and matches((self._digest,), (token or "").strip())

    def user_of(self, name: str | None) -> str | None:
        """The agent's user for a call that names `name` (None: none named): None for the
        sandbox's programs' own, which `user` names as the platform does."""
        if not name:
            return self.run_as or None
        if name == self.user and not self.run_as:
            return None
        return name

    def resolve(self, path: str | None) -> str:
        """`path` made absolute: relative paths are under the work dir (the platform's home)."""
        if not path:
            raise InvalidRequest("path is required")
        if "\0" in path:
            raise InvalidRequest("path contains a NUL byte")
        return posixpath.normpath(posixpath.join(self.work_dir, path))

    def created_json(self) -> dict[str, Any]:
        """The `Sandbox` object of create and connect."""
        return {
            "sandboxID": self.id,
            "templateID": self.template_id,
            "clientID": self.client_id,
            "alias": self.template_id,
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": self.access_token,
            "trafficAccessToken": self.access_token,
            "domain": self.domain,
        }

    def listed_json(self) -> dict[str, Any]:
        """The `ListedSandbox` object of list."""
        return {
            "sandboxID": self.id,
            "templateID": self.template_id,
            "clientID": self.client_id,
            "alias": self.template_id,
            "startedAt": iso(self.started_at),
            "endAt": iso(self.end_at),
            "cpuCount": self.cpu_count,
            "memoryMB": self.memory_mb,
            "diskSizeMB": self.disk_mb,
            "state": self.state,
            "envdVersion": ENVD_VERSION,
            "metadata": dict(self.metadata),
        }

    def detail_json(self) -> dict[str, Any]:
        """The `SandboxDetail` object of get info."""
        return {
            **self.listed_json(),
            "domain": self.domain,
            "allowInternetAccess": self.allow_internet_access,
            "lifecycle": {"onTimeout": self.on_timeout, "autoResume": self.auto_resume},
        }

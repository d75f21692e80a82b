"""What the OpenSandbox API keeps about a sandbox beyond the server's record: the image, entrypoint,
metadata and environment it was created with, its execd's access token, and how it shows itself
(`Sandbox`)."""

from __future__ import annotations

import posixpath
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandboxes.server.http.endpoint import Refused
from sandboxes.server.http.timestamps import iso
from sandboxes.server.http.tokens import digest, matches

if TYPE_CHECKING:
    from sandboxes.server.registry import Record

__all__ = ["ATTR", "OpenSandbox", "view"]

ATTR = "opensandbox"  # Record.attrs key of a sandbox this API made


@dataclass
class OpenSandbox:
    """One sandbox as the API shows it. `id` is the server's sandbox id."""

    id: str
    image: str  # as the client named it
    template: str  # the server's template that runs it
    entrypoint: list[str]
    metadata: dict[str, str]
    env: dict[str, str]
    work_dir: str
    extensions: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None  # asked at create (None: it lives until deleted)
    state: str = "Running"  # or "Paused"
    created_at: float = field(default_factory=time.time)
    changed_at: float = field(default_factory=time.time)  # its state's last transition
    # The credential of its execd (and egress) routes: direct-mode clients send no API key to
    # execd, so the endpoint the lifecycle API hands out carries it in its path.
    execd_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    def token_ok(self, token: str) -> bool:
        """Whether `token` is this sandbox's execd token (constant time)."""
        return matches((digest(self.execd_token),), token)

    def resolve(self, path: Any, what: str = "path") -> str:
        """`path` made absolute: relative paths are under the work dir."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise Refused(400, f"{what} is required", fields={"code": "MISSING_QUERY"})
        return posixpath.normpath(posixpath.join(self.work_dir, path))

    def status(self) -> dict[str, Any]:
        return {"state": self.state, "lastTransitionAt": iso(self.changed_at)}

    def to_json(self, expires_at: float | None) -> dict[str, Any]:
        """The API's `Sandbox` (every field its SDK requires, in the platform's casing)."""
        out: dict[str, Any] = {
            "id": self.id,
            "image": {"uri": self.image},
            "status": self.status(),
            "metadata": dict(self.metadata),
            "entrypoint": list(self.entrypoint),
            "createdAt": iso(self.created_at),
        }
        if expires_at is not None:
            out["expiresAt"] = iso(expires_at)
        if self.extensions:
            out["extensions"] = dict(self.extensions)
        return out

    def touch(self, state: str) -> None:
        if state != self.state:
            self.state, self.changed_at = state, time.time()


def view(rec: Record) -> OpenSandbox:
    """The API's view of `rec`, with its state as the record has it now."""
    sb: OpenSandbox = rec.attrs[ATTR]
    sb.touch("Paused" if rec.state == "paused" else "Running")
    return sb

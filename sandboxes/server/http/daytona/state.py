"""What the Daytona API keeps about a sandbox beyond the server's record: the fields its SDK reads
back (name, labels, env, resources, lifecycle intervals) and how it shows itself (`Sandbox`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sandboxes.server.http.timestamps import iso

__all__ = ["DEFAULT_USER", "ORGANIZATION", "TARGET", "DaytonaSandbox"]

DEFAULT_USER = "daytona"  # who runs programs in a sandbox whose template is not root
ORGANIZATION = "sandboxes"  # every key is an organization of its own; the SDK only echoes it
TARGET = "local"
# The platform's defaults: a sandbox stops after 15 idle minutes; stopped ones are kept.
DEFAULT_AUTO_STOP_MIN = 15
DEFAULT_AUTO_ARCHIVE_MIN = 7 * 24 * 60
DEFAULT_AUTO_DELETE_MIN = -1


@dataclass
class DaytonaSandbox:
    """One sandbox as the API shows it. `id` is the server's sandbox id."""

    id: str
    name: str
    template: str  # the server's template that runs it
    snapshot: str  # the snapshot or image it was asked for
    user: str  # who runs programs: "root" or the template's unprivileged user
    work_dir: str
    env: dict[str, str]
    labels: dict[str, str]
    cpu: int
    memory_gib: int
    disk_gib: int
    public: bool = False
    network_block_all: bool = False
    network_allow_list: str | None = None
    auto_stop_min: int = DEFAULT_AUTO_STOP_MIN
    auto_archive_min: int = DEFAULT_AUTO_ARCHIVE_MIN
    auto_delete_min: int = DEFAULT_AUTO_DELETE_MIN
    state: str = "started"
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    def to_json(self, toolbox_url: str) -> dict[str, Any]:
        """The SDK's `Sandbox` (every field it requires, strictly typed)."""
        out: dict[str, Any] = {
            "id": self.id,
            "organizationId": ORGANIZATION,
            "name": self.name,
            "snapshot": self.snapshot,
            "user": self.user,
            "env": dict(self.env),
            "labels": dict(self.labels),
            "public": self.public,
            "networkBlockAll": self.network_block_all,
            "kvm": False,
            "target": TARGET,
            "cpu": self.cpu,
            "gpu": 0,
            "memory": self.memory_gib,
            "disk": self.disk_gib,
            "state": self.state,
            "desiredState": "destroyed" if self.state == "destroyed" else self.state,
            "autoStopInterval": self.auto_stop_min,
            "autoArchiveInterval": self.auto_archive_min,
            "autoDeleteInterval": self.auto_delete_min,
            "volumes": [],
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
            "toolboxProxyUrl": toolbox_url,
        }
        if self.network_allow_list is not None:
            out["networkAllowList"] = self.network_allow_list
        return out

    def touch(self, state: str | None = None) -> None:
        if state is not None:
            self.state = state
        self.updated_at = time.time()

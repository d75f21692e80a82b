"""The one small interface the pool drives, whatever runs the sandboxes (process, container, pod).

Four methods every backend has (`create`, `destroy`, `reap_orphans`, `close`) and the optional
capabilities, each declared here with the default a backend without it gets: the pool and the
server call them on any backend, never probing for them.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..templates import Template

if TYPE_CHECKING:
    from ..egress import EgressPolicy
    from .kubernetes.claims import ClusterRecords

__all__ = ["Backend", "LostListener", "SandboxHandle"]

LostListener = Callable[[str, str], None]
"""`fn(sandbox_id, reason)`, called on the event loop when a backend sees a live sandbox go."""


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


class Backend(abc.ABC):
    """Creates and destroys sandboxes. The pool never knows which backend it drives."""

    name: ClassVar[str]

    create_concurrency: int = 0
    """How many creates the pool should run at once at least (pod starts are slow, so the
    kubernetes backend wants many in flight); 0: the pool's own default."""

    checkpoints: bool = False
    """Whether its sandboxes can be checkpointed and made from checkpoint layers
    (`Template.layers`: directories of the host the pool runs on); False: `Pool.checkpoint` and
    `Pool.fork` refuse its sandboxes."""

    no_checkpoints_why: str = "its layers would not be on the host this pool runs on"
    """Why it does not checkpoint, for the refusal (when `checkpoints` is False)."""

    volumes: bool = False
    """Whether its sandboxes can mount volumes (`Template.volumes`: directories of the host the
    pool runs on, or with `volume_claims` the cluster's claims)."""

    volume_claims: bool = False
    """Whether its volumes are the cluster's storage (`create_volume_claim`: a claim named by
    `volume_claim_prefix` and the volume's id, mounted by its sandboxes) rather than images on
    the pool's host."""

    volume_claim_prefix: str = ""

    layered_volumes: bool = False
    """Whether its sandboxes can mount layered volumes (`Template.layered_volumes`: checkpoint
    layers of the host the pool runs on)."""

    pauses: bool = False
    """Whether its sandboxes can be paused where they run (every process stopped, memory, files
    and connections kept) and resumed (`pause` / `resume`); False: `Pool.pause` refuses its
    sandboxes."""

    records: ClusterRecords | None = None
    """The claimed sandboxes' records this backend keeps where every replica of a cluster reads
    them (kubernetes with `KubeConfig.shared`); None: claims are this process's alone."""

    @abc.abstractmethod
    async def create(self, template: Template, sandbox_id: str) -> SandboxHandle:
        """Start a sandbox; returns only once its agent answered (ready means ready).

        Raises `LaunchError` (a step failed) or `BackendUnavailable`.
        """

    @abc.abstractmethod
    async def destroy(self, handle: SandboxHandle) -> None:
        """Kill the sandbox and free everything it held. Idempotent."""

    @abc.abstractmethod
    async def reap_orphans(self) -> int:
        """Remove leftovers of dead pools owned by this backend; returns how many sandboxes."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the backend's own resources (sandboxes are destroyed by the pool first)."""

    async def pause(self, handle: SandboxHandle) -> None:
        """Stop every process of the sandbox, its agent included; returns once they are all
        stopped. Only called when `pauses`."""
        raise NotImplementedError(f"the {self.name} backend cannot pause a sandbox")

    async def resume(self, handle: SandboxHandle) -> None:
        """Continue every process of a paused sandbox. Only called when `pauses`."""
        raise NotImplementedError(f"the {self.name} backend cannot resume a sandbox")

    async def set_egress(self, handle: SandboxHandle, policy: EgressPolicy) -> None:
        """Give the cluster's own fence of the sandbox's egress the policy its agent is about to
        enforce (kubernetes: the NetworkPolicy its pod is under). Default: none (the agent's
        policy is the only one)."""

    async def create_volume_claim(self, volume: Any) -> None:
        """Makes the cluster's claim of a new volume (`volume.claim`, `volume.size_bytes`). Only
        called when `volume_claims`."""
        raise NotImplementedError(f"the {self.name} backend keeps no volumes in a cluster")

    async def delete_volume_claim(self, volume: Any) -> None:
        """Deletes a deleted volume's claim (the cluster keeps its storage while pods use it).
        Only called when `volume_claims`."""
        raise NotImplementedError(f"the {self.name} backend keeps no volumes in a cluster")

    def set_lost_listener(self, fn: LostListener | None) -> None:
        """Push notice of lost sandboxes to `fn`. Default: none (the pool finds a lost sandbox
        when a call to its agent fails, or by `alive`)."""

    def forget(self, handle: SandboxHandle) -> None:
        """Stop watching over a sandbox another replica keeps from now on (no request).
        Default: nothing to stop."""

    def alive(self, handle: SandboxHandle) -> bool:
        """A cheap local liveness check, no request (a process, a pod the watch saw go); True
        when the backend cannot tell (the next call to the agent does)."""
        return True

"""The one small interface the pool drives, whatever runs the sandboxes (process, container, pod).

Four methods every backend has (`create`, `destroy`, `reap_orphans`, `close`) and the optional
capabilities, each declared here with the default a backend without it gets: the pool and the
server call them on any backend, never probing for them. `ClaimRecords` is what the server asks of
the claimed sandboxes' records a backend keeps where every replica of a cluster reads them
(`Backend.records`; the kubernetes backend's `ClusterRecords`).
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from ..templates import Template

if TYPE_CHECKING:
    from pathlib import Path

    from ..egress import EgressPolicy

__all__ = ["Backend", "ClaimListener", "ClaimRecord", "ClaimRecords", "LostListener", "SandboxHandle"]

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


class ClaimRecord(Protocol):
    """One claimed sandbox's record as a cluster keeps it for every replica. The server reads
    these fields and writes back `labels`, `expires_at`, `idle_s` and `active_at` (then
    `ClaimRecords.update`)."""

    sandbox_id: str
    template: str
    owner: str  # the API key's owner that claimed it
    labels: dict[str, str]
    created_at: float  # unix seconds
    expires_at: float | None  # unix seconds
    idle_s: float | None  # its idle bound (`Record.idle_s`)
    active_at: float | None  # unix seconds of its last activity the cluster knows
    key: str | None  # idempotency key


ClaimT = TypeVar("ClaimT", bound=ClaimRecord)
ClaimT_contra = TypeVar("ClaimT_contra", bound=ClaimRecord, contravariant=True)


class ClaimListener(Protocol[ClaimT_contra]):
    """What the server is told as the cluster's records change (on the event loop)."""

    def claim_changed(self, claim: ClaimT_contra) -> None: ...

    def claim_gone(self, sandbox_id: str) -> None: ...

    def adopted(self, claim: ClaimT_contra) -> None:
        """`claim` is held by this replica from now on (another replica that held it is gone)."""


class ClaimRecords(Protocol[ClaimT]):
    """The claimed sandboxes' records a backend keeps where every replica of a cluster reads them
    (`Backend.records`), as the server (`server/replicated.py`) uses them. Its claims are its
    own type (`ClaimT`): the server makes them with `new_claim` and hands them back."""

    def new_claim(
        self,
        sandbox_id: str,
        *,
        template: str,
        owner: str,
        labels: dict[str, str],
        created_at: float,
        expires_at: float | None,
        idle_s: float | None = None,
        active_at: float | None = None,
        key: str | None,
    ) -> ClaimT:
        """The record of a sandbox this replica is claiming, not written yet (`publish`)."""

    def lookup(self, sandbox_id: str) -> ClaimT | None:
        """The claim of `sandbox_id` as the cache knows it (no request)."""

    async def fetch(self, sandbox_id: str) -> ClaimT | None:
        """`lookup`, asking the cluster when the cache does not know the id (yet)."""

    def claims(self) -> Iterable[ClaimT]: ...

    def find_key(self, owner: str, key: str) -> ClaimT | None:
        """The claim of `owner`'s idempotency key `key`."""

    def handle(self, claim: ClaimT) -> SandboxHandle | None:
        """How to reach `claim`'s agent (None while the cache lacks part of it)."""

    def private(self, claim: ClaimT) -> dict[str, Any] | None:
        """The claim's env and surfaces' state (None while the cache lacks it)."""

    async def publish(self, claim: ClaimT, private: dict[str, Any] | None) -> None:
        """Write a claim this replica just handed out."""

    async def update(self, claim: ClaimT, private: dict[str, Any] | None = None) -> None:
        """Rewrite a claim (TTL, labels) and, when given, its private part."""

    async def reserve_key(self, owner: str, key: str, sandbox_id: str) -> str:
        """Bind `owner`'s idempotency key to `sandbox_id` unless another replica did first: the
        id the key belongs to."""

    async def serve(self, listener: ClaimListener[ClaimT]) -> None:
        """Start telling `listener` of changes, and adopting dead replicas' claims."""

    def others_alive(self) -> bool:
        """Whether another replica lives to take this one's claims."""

    async def hand_over(self) -> None:
        """Leave the cluster: the other replicas adopt this one's claims."""


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

    memory_snapshots: bool = False
    """Whether its sandboxes' running programs can be dumped into a checkpoint and restored into
    sandboxes made from it (`dump_memory` / `restore_memory`); False: `Pool.checkpoint(memory=
    True)` refuses its sandboxes."""

    no_memory_snapshots_why: str = "it cannot dump a sandbox's processes"
    """Why it takes no memory snapshots, for the refusal (when `memory_snapshots` is False)."""

    records: ClaimRecords[Any] | None = None
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

    async def dump_memory(
        self, handle: SandboxHandle, dest: Path, leave_out: Collection[int] = ()
    ) -> tuple[int, Callable[[], None]]:
        """Dumps the sandbox's running programs (but those whose pid in the sandbox is in
        `leave_out`) into `dest` (made here) and leaves them stopped:
        `(bytes of the images, a function that continues them)`, to call once the sandbox's
        files are captured. Raises `MemorySnapshotError` naming what could not be dumped, with
        the programs running on. Only called when `memory_snapshots`."""
        raise NotImplementedError(f"the {self.name} backend takes no memory snapshots")

    async def restore_memory(self, handle: SandboxHandle, src: Path) -> None:
        """Restores programs dumped by `dump_memory` into a new sandbox of the same template and
        files; they run on there. Raises `MemorySnapshotError`. Only called when
        `memory_snapshots`."""
        raise NotImplementedError(f"the {self.name} backend takes no memory snapshots")

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

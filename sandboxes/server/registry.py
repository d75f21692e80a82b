"""The server's registry of claimed sandboxes: id -> record, idempotency keys, and TTL expiry.

Expiry uses a timer heap: one reaper task sleeps until the earliest deadline (woken early when an
earlier one is pushed), so an idle server does no work and a million live sandboxes cost nothing
per second. Heap entries are invalidated lazily: a popped entry whose record is gone (or whose
deadline changed) is skipped.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandboxes.server.replicated import SharedRecords

__all__ = ["Record", "Registry"]

log = logging.getLogger("sandboxes.server.registry")


@dataclass(eq=False)
class Record:
    """One claimed sandbox as the server knows it."""

    id: str
    sandbox: Any  # sandboxes.sandbox.Sandbox
    template: str
    labels: dict[str, str]
    owner: str
    idempotency_key: str | None = None
    created_at: float = field(default_factory=time.time)  # unix seconds
    expires_at: float | None = None  # unix seconds
    deadline: float | None = None  # loop.time() of expires_at
    attrs: dict[str, Any] = field(default_factory=dict)  # what the surface that made it keeps
    local: bool = True  # claimed through this replica (holds a unit of its owner's quota)
    claim: Any = None  # its record in the cluster, when shared (`replicated.py`)
    paused_ttl_s: float | None = None  # while paused: the TTL left at the pause (None: none)
    # Paused to a filesystem checkpoint (its id): the sandbox is gone, its files are kept, and
    # resuming makes a new one from them.
    evicted: str | None = None
    # What its TTL does: "delete" it, or "pause" it (with its memory unless `pause_memory` is
    # False), as E2B's auto-pause asks.
    on_ttl: str = "delete"
    pause_memory: bool = True

    @property
    def state(self) -> str:
        """The sandbox's state: paused or running."""
        return "paused" if self.evicted or getattr(self.sandbox, "paused", False) else "running"


class Registry:
    """Records by id, the owner's idempotency keys, and the TTL reaper.

    `on_expire(record)` is awaited (in its own task) for each record whose TTL passed; it is expected
    to delete it (`pop`) and destroy the sandbox.
    """

    def __init__(self, on_expire: Callable[[Record], Awaitable[None]]) -> None:
        self._records: dict[str, Record] = {}
        # (owner, key) -> the create in progress or done; waiters share it.
        self._keys: dict[tuple[str, str], asyncio.Future] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._on_expire = on_expire
        self._reaper: asyncio.Task | None = None
        self._expiring: set[asyncio.Task] = set()
        # The other replicas' records, when the registry is shared through the cluster.
        self.shared: SharedRecords | None = None

    # -- records -----------------------------------------------------------------------------

    def add(self, rec: Record, ttl_s: float | None) -> None:
        self._records[rec.id] = rec
        if ttl_s and rec.expires_at is not None:
            # Published with its claim already (a shared registry's create): only the deadline.
            self.expire_at(rec, rec.expires_at, publish=False)
        elif ttl_s:
            self.set_ttl(rec, ttl_s)

    def set_ttl(self, rec: Record, ttl_s: float) -> None:
        """`rec` expires `ttl_s` from now (sooner or later than it would have)."""
        self.expire_at(rec, time.time() + ttl_s)

    def expire_at(self, rec: Record, expires_at: float, *, publish: bool = True) -> None:
        """`rec` expires at `expires_at` (unix seconds); `publish` writes it to the cluster."""
        loop = asyncio.get_running_loop()
        rec.deadline = loop.time() + max(0.0, expires_at - time.time())
        rec.expires_at = expires_at
        entry = (rec.deadline, next(self._seq), rec.id)
        heapq.heappush(self._heap, entry)
        if self._heap[0] is entry:
            self._wake.set()  # earlier than what the reaper sleeps for
        if publish and self.shared is not None:
            self.shared.changed(rec)

    def clear_ttl(self, rec: Record) -> None:
        """`rec` no longer expires (its heap entry goes stale)."""
        rec.deadline = None
        rec.expires_at = None
        if self.shared is not None:
            self.shared.changed(rec)

    def local(self, sandbox_id: str) -> Record | None:
        """The record this replica has, if any (no look into the cluster)."""
        return self._records.get(sandbox_id)

    def get(self, sandbox_id: str, owner: str | None = None) -> Record | None:
        """The record, if it exists and (when `owner` is given) belongs to `owner`; a shared
        registry finds the other replicas' records in its cache."""
        rec = self._records.get(sandbox_id)
        if rec is None and self.shared is not None:
            rec = self.shared.resolve(sandbox_id)
        if rec is None or (owner is not None and rec.owner != owner):
            return None
        return rec

    async def find(self, sandbox_id: str, owner: str | None = None) -> Record | None:
        """`get`, asking the cluster when the cache does not know the id (yet): a sandbox
        another replica made a moment ago is found before its watch event arrives."""
        rec = self.get(sandbox_id)
        if rec is None and self.shared is not None:
            rec = await self.shared.fetch(sandbox_id)
        if rec is None or (owner is not None and rec.owner != owner):
            return None
        return rec

    def pop(self, sandbox_id: str) -> Record | None:
        """Remove a record (and its idempotency key); its heap entry goes stale."""
        rec = self._records.pop(sandbox_id, None)
        if rec is not None and rec.idempotency_key is not None:
            k = (rec.owner, rec.idempotency_key)
            fut = self._keys.get(k)
            done_ok = fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None
            if done_ok and fut is not None and fut.result() is rec:
                del self._keys[k]
        return rec

    def select(self, owner: str | None, labels: dict[str, str] | None = None) -> list[Record]:
        """Records of `owner` (None: everyone's) whose labels contain every pair of `labels`."""
        labels = labels or {}
        if self.shared is not None:
            self.shared.all(owner)  # the other replicas' records too, made local
        return [
            r
            for r in self._records.values()
            if (owner is None or r.owner == owner) and all(r.labels.get(k) == v for k, v in labels.items())
        ]

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        return iter(list(self._records.values()))

    # -- idempotency -------------------------------------------------------------------------

    def pending(self, owner: str, key: str) -> asyncio.Future | None:
        """The create already started with this key, if any."""
        return self._keys.get((owner, key))

    def track(self, owner: str, key: str, fut: asyncio.Future) -> None:
        """Remember the create of `key`; a failed create forgets it, so a retry tries again."""
        k = (owner, key)
        self._keys[k] = fut

        def done(f: asyncio.Future) -> None:
            if (f.cancelled() or f.exception() is not None) and self._keys.get(k) is f:
                del self._keys[k]

        fut.add_done_callback(done)

    # -- TTL reaper --------------------------------------------------------------------------

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap(), name="sandboxes-ttl-reaper")

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            try:
                await self._reaper
            except asyncio.CancelledError:
                pass
            self._reaper = None
        for t in list(self._expiring):
            t.cancel()
        if self._expiring:
            await asyncio.gather(*self._expiring, return_exceptions=True)

    async def _reap(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            while self._heap and self._heap[0][0] <= now:
                deadline, _, sid = heapq.heappop(self._heap)
                rec = self._records.get(sid)
                if rec is None or rec.deadline != deadline:
                    continue  # deleted meanwhile, or its TTL changed
                task = asyncio.create_task(self._expire(rec), name=f"sandboxes-expire-{sid}")
                self._expiring.add(task)
                task.add_done_callback(self._expiring.discard)
            self._wake.clear()
            timeout = self._heap[0][0] - now if self._heap else None
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    async def _expire(self, rec: Record) -> None:
        try:
            await self._on_expire(rec)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("expiring sandbox %s failed", rec.id)

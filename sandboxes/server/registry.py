"""The server's registry of claimed sandboxes: id -> record, idempotency keys, and lifetimes.

A record's lifetime is one policy: an absolute TTL (`expires_at`), an optional idle bound (it ends
`idle_s` after its last activity, `active_at`), and what its end does (`on_ttl`: delete it, or
pause it). Surfaces mark activity with `touch`; the idle bound counts only while the sandbox runs
(a paused one keeps what is left of its TTL, and resuming is activity).

Expiry uses a timer heap: one reaper task sleeps until the earliest entry (woken early when an
earlier one is pushed), so an idle server does no work and a million live sandboxes cost nothing
per second. Entries are checked lazily: a popped entry whose record is gone or was scheduled again
is skipped, and one whose record's end moved later (activity, a longer TTL) is pushed again at the
new end: a touch, which only moves the end later, is an assignment, not a heap push. In a shared
registry (`replicated.py`) the reaper also writes a record's activity to the cluster before the
other replicas, which know an older one, would end it.
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
    expires_at: float | None = None  # unix seconds: where its TTL ends it (None: no TTL)
    # Its idle bound: it ends this long after its last activity while it runs (None: none).
    idle_s: float | None = None
    active_at: float = field(default_factory=time.time)  # unix seconds of its last activity
    deadline: float | None = None  # loop.time() of its heap entry (None: it has none)
    ended_by: str | None = None  # which bound ended its lifetime last: "ttl" or "idle"
    attrs: dict[str, Any] = field(default_factory=dict)  # what the surface that made it keeps
    local: bool = True  # claimed through this replica (holds a unit of its owner's quota)
    claim: Any = None  # its record in the cluster, when shared (`replicated.py`)
    paused_ttl_s: float | None = None  # while paused: the TTL left at the pause (None: none)
    # Paused to a filesystem checkpoint (its id): the sandbox is gone, its files are kept, and
    # resuming makes a new one from them.
    evicted: str | None = None
    # What the end of its lifetime (TTL or idle bound) does: "delete" it, or "pause" it (with its
    # memory unless `pause_memory` is False), as E2B's auto-pause and Daytona's auto-stop ask.
    on_ttl: str = "delete"
    pause_memory: bool = True

    @property
    def state(self) -> str:
        """The sandbox's state: paused or running."""
        return "paused" if self.evicted or getattr(self.sandbox, "paused", False) else "running"

    def lifetime_end(self) -> tuple[float, str] | None:
        """When its lifetime ends (unix seconds) and which bound ends it: "ttl" or "idle" (the
        idle bound counts only while it runs); None: never."""
        end = (self.expires_at, "ttl") if self.expires_at is not None else None
        if self.idle_s is not None and self.state == "running":
            idle = (self.active_at + self.idle_s, "idle")
            if end is None or idle[0] <= end[0]:
                end = idle
        return end


class Registry:
    """Records by id, the owner's idempotency keys, and the reaper of their lifetimes.

    `on_expire(record)` is awaited (in its own task) for each record whose lifetime ended
    (`record.ended_by` says which bound ended it); it is expected to do what `record.on_ttl`
    asks: delete it (`pop`) and destroy the sandbox, or pause it.
    """

    def __init__(self, on_expire: Callable[[Record], Awaitable[None]]) -> None:
        self._records: dict[str, Record] = {}
        # (owner, key) -> the create in progress or done; waiters share it.
        self._keys: dict[tuple[str, str], asyncio.Future] = {}
        # (loop time, seq, record id, the unix time it was pushed for)
        self._heap: list[tuple[float, int, str, float]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()
        self._on_expire = on_expire
        self._reaper: asyncio.Task | None = None
        self._expiring: set[asyncio.Task] = set()
        # The other replicas' records, when the registry is shared through the cluster.
        self.shared: SharedRecords | None = None

    # -- records -----------------------------------------------------------------------------

    def add(self, rec: Record, ttl_s: float | None) -> None:
        """Register `rec`: its lifetime is `ttl_s` from now when given (unless its `expires_at`
        was set already: published with its claim, a shared registry's create), and its idle
        bound (`idle_s`) counts from its `active_at`."""
        self._records[rec.id] = rec
        if ttl_s and rec.expires_at is None:
            self.set_ttl(rec, ttl_s)
        else:
            self._schedule(rec)

    def set_ttl(self, rec: Record, ttl_s: float) -> None:
        """`rec` expires `ttl_s` from now (sooner or later than it would have)."""
        self.expire_at(rec, time.time() + ttl_s)

    def expire_at(self, rec: Record, expires_at: float, *, publish: bool = True) -> None:
        """`rec` expires at `expires_at` (unix seconds); `publish` writes it to the cluster."""
        rec.expires_at = expires_at
        self._schedule(rec)
        if publish and self.shared is not None:
            self.shared.changed(rec)

    def clear_ttl(self, rec: Record) -> None:
        """`rec` no longer has a TTL (its idle bound, if any, still holds)."""
        rec.expires_at = None
        self._schedule(rec)
        if self.shared is not None:
            self.shared.changed(rec)

    def set_idle(self, rec: Record, idle_s: float | None) -> None:
        """`rec` ends `idle_s` after its last activity (None: no idle bound); the change counts
        as activity."""
        rec.idle_s = idle_s
        rec.active_at = time.time()
        self._schedule(rec)
        if self.shared is not None:
            self.shared.changed(rec)

    def touch(self, rec: Record, at: float | None = None) -> None:
        """Activity of `rec` at `at` (unix seconds; now by default): its idle bound counts from
        there. Activity now only moves its end later, which the reaper finds when the entry it
        has comes due, so this is one assignment (in a shared registry, a push at most once
        between two writes of its activity to the cluster)."""
        earlier = at is not None and at < rec.active_at
        rec.active_at = time.time() if at is None else at
        if rec.idle_s is not None and (earlier or self.shared is not None):
            self._schedule(rec)

    def lifetime_from_cluster(
        self, rec: Record, expires_at: float | None, idle_s: float | None, active_at: float | None
    ) -> None:
        """`rec`'s lifetime as another replica wrote it (not written back): its TTL when it has
        one, its idle bound, and its activity there when later than what is known here."""
        if expires_at:
            rec.expires_at = expires_at
        rec.idle_s = idle_s
        if active_at is not None and active_at > rec.active_at:
            rec.active_at = active_at
        self._schedule(rec)

    def _publish_by(self, rec: Record) -> float | None:
        """When this replica must write `rec`'s activity to the cluster (None: it need not)."""
        if self.shared is None or rec.idle_s is None:
            return None
        return self.shared.publish_by(rec)

    def _schedule(self, rec: Record) -> None:
        """Give `rec` a heap entry at the next time the reaper has to look at it (its end, or
        the write of its activity to the cluster), unless the one it has comes sooner."""
        when = None
        end = rec.lifetime_end()
        if end is not None:
            when = end[0]
        publish = self._publish_by(rec)
        if publish is not None and (when is None or publish < when):
            when = publish
        if when is None:
            rec.deadline = None  # its entries go stale
            return
        deadline = asyncio.get_running_loop().time() + max(0.0, when - time.time())
        if rec.deadline is not None and rec.deadline <= deadline:
            return  # the entry it has comes due first, and schedules it again then
        rec.deadline = deadline
        entry = (deadline, next(self._seq), rec.id, when)
        heapq.heappush(self._heap, entry)
        if self._heap[0] is entry:
            self._wake.set()  # earlier than what the reaper sleeps for

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

    # -- the reaper --------------------------------------------------------------------------

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
                deadline, _, sid, when = heapq.heappop(self._heap)
                rec = self._records.get(sid)
                if rec is None or rec.deadline != deadline:
                    continue  # deleted meanwhile, or given an earlier entry since
                rec.deadline = None
                self._due(rec, when)
            self._wake.clear()
            timeout = self._heap[0][0] - now if self._heap else None
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass

    def _due(self, rec: Record, when: float) -> None:
        """`rec`'s entry, pushed for `when` (unix seconds), came due: its activity is written to
        the cluster if the other replicas would end it otherwise; it expires if its end is
        still `when`, else it is scheduled at its later end."""
        publish = self._publish_by(rec)
        if publish is not None and publish <= when and self.shared is not None:
            self.shared.changed(rec)  # the others learn of its activity before they end it
        end = rec.lifetime_end()
        if end is None or end[0] > when:
            self._schedule(rec)
            return
        rec.ended_by = end[1]
        task = asyncio.create_task(self._expire(rec), name=f"sandboxes-expire-{rec.id}")
        self._expiring.add(task)
        task.add_done_callback(self._expiring.discard)

    async def _expire(self, rec: Record) -> None:
        try:
            await self._on_expire(rec)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("expiring sandbox %s failed", rec.id)

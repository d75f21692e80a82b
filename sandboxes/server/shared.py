"""The server's registry shared with the other replicas of a release, through the cluster.

On the kubernetes backend a claimed sandbox's record lives on its pod (`backends/kubernetes/
shared.py`). This module turns those records into the server's `Record`s and back:

- a record this replica claims is published (its pod's claim written) before the create returns;
- a record another replica claimed becomes a local `Record` the first time a call names it
  (`resolve`), from the watch-fed cache: its sandbox is attached to this replica's pool (which
  renews its lease while it is here), so get / exec / files / delete cost no API request;
- a change of TTL or labels is written back; a change seen on the watch is applied here;
- a sandbox deleted elsewhere leaves this registry; a dead replica's sandboxes adopted by this
  one are registered here, their TTL kept by this replica from then on.

What a surface keeps with a record (`Record.attrs`) crosses replicas through the codecs it
registers (`codec()`): JSON-able state, written to the claim's Secret. Live state (a running
background job, a code-interpreter kernel) stays on the replica that runs it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandboxes import errors as E

if TYPE_CHECKING:
    from sandboxes.backends.kubernetes.shared import Claim, ClusterRecords
    from sandboxes.server.registry import Record, Registry

__all__ = ["Codec", "SharedRecords"]

log = logging.getLogger("sandboxes.server.shared")


@dataclass(frozen=True)
class Codec:
    """How a surface's `Record.attrs[name]` is written to the cluster and read back."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


class SharedRecords:
    """The registry's view of the release's claimed sandboxes (see the module docstring).

    `gone(record)` is awaited (in a task) when a sandbox this replica has a record of was deleted
    or lost elsewhere; it is expected to unregister it.
    """

    def __init__(
        self,
        registry: Registry,
        pool: Any,
        records: ClusterRecords,
        gone: Callable[[Record], Any],
    ) -> None:
        self.registry = registry
        self.pool = pool
        self.records = records
        self._gone = gone
        self.codecs: dict[str, Codec] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- from the cluster to records -----------------------------------------------------------

    def resolve(self, sandbox_id: str) -> Record | None:
        """The record of a sandbox claimed through any replica, from the cache (no request)."""
        claim = self.records.lookup(sandbox_id)
        return self._materialize(claim) if claim is not None else None

    async def fetch(self, sandbox_id: str) -> Record | None:
        """`resolve`, asking the API server when the cache does not know the id (yet)."""
        rec = self.resolve(sandbox_id)
        if rec is not None:
            return rec
        claim = await self.records.fetch(sandbox_id)
        return self._materialize(claim) if claim is not None else None

    def all(self, owner: str | None = None) -> list[Record]:
        """Every record of `owner` (None: of everyone) in the cluster, made local."""
        out = []
        for claim in self.records.claims():
            if owner is not None and claim.owner != owner:
                continue
            rec = self._materialize(claim)
            if rec is not None:
                out.append(rec)
        return out

    def by_key(self, owner: str, key: str) -> Record | None:
        claim = self.records.find_key(owner, key)
        return self._materialize(claim) if claim is not None else None

    async def wait_for(self, sandbox_id: str, timeout: float) -> Record:
        """The record of a sandbox another replica is publishing (an idempotency key it won)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        delay = 0.01
        while True:
            rec = await self.fetch(sandbox_id)
            if rec is not None:
                return rec
            if loop.time() + delay > deadline:
                raise E.PoolExhausted(f"sandbox {sandbox_id} of this idempotency key did not appear in time")
            await asyncio.sleep(delay)  # the winner's claim write is in flight: bounded backoff
            delay = min(0.5, delay * 2)

    def _materialize(self, claim: Claim) -> Record | None:
        from sandboxes.server.registry import Record

        rec = self.registry.local(claim.sandbox_id)
        if rec is not None:
            return rec
        handle = self.records.handle(claim)
        private = self.records.private(claim)
        if handle is None or private is None:
            return None  # its token or private part is not in this replica's cache yet
        if claim.template not in getattr(self.pool, "templates", {}):
            log.warning("sandbox %s is of template %r, unknown here", claim.sandbox_id, claim.template)
            return None
        env = private.get("env") or {}
        sb = self.pool.attach(claim.template, handle, labels=claim.labels, env=env)
        attrs = {}
        for name, raw in (private.get("attrs") or {}).items():
            codec = self.codecs.get(name)
            if codec is not None:
                try:
                    attrs[name] = codec.decode(raw)
                except Exception:
                    log.exception("reading %s of sandbox %s failed", name, claim.sandbox_id)
        rec = Record(
            id=claim.sandbox_id,
            sandbox=sb,
            template=claim.template,
            labels=dict(claim.labels),
            owner=claim.owner,
            idempotency_key=claim.key,
            created_at=claim.created_at,
            attrs=attrs,
            local=False,
        )
        rec.claim = claim
        self.registry.add(rec, None)
        if claim.expires_at:
            self.registry.expire_at(rec, claim.expires_at, publish=False)
        return rec

    # --- from records to the cluster -----------------------------------------------------------

    async def publish(self, rec: Record, env: dict[str, str] | None) -> None:
        """Write a record this replica just claimed (before its create returns)."""
        from sandboxes.backends.kubernetes.shared import Claim

        claim = Claim(
            sandbox_id=rec.id,
            pod=rec.id.lower(),
            template=rec.template,
            owner=rec.owner,
            labels=dict(rec.labels),
            created_at=rec.created_at,
            expires_at=rec.expires_at,
            key=rec.idempotency_key,
        )
        rec.claim = claim
        await self.records.publish(claim, self._private(rec, env))

    def changed(self, rec: Record, *, attrs: bool = False) -> None:
        """`rec`'s TTL or labels (and, with `attrs`, its surfaces' state) changed here: write
        them (in the background; the last write wins)."""
        claim = getattr(rec, "claim", None)
        if claim is None:
            return
        claim.expires_at = rec.expires_at
        claim.labels = dict(rec.labels)
        private = self._private(rec, dict(rec.sandbox.env)) if attrs else None

        async def write() -> None:
            try:
                await self.records.update(claim, private)
            except Exception as e:  # noqa: BLE001 - this replica keeps it; the others see the old one
                log.warning("writing the record of %s failed: %s", rec.id, e)

        self._spawn(write())

    def _private(self, rec: Record, env: dict[str, str] | None) -> dict[str, Any]:
        attrs = {}
        for name, value in rec.attrs.items():
            codec = self.codecs.get(name)
            if codec is not None:
                attrs[name] = codec.encode(value)
        out: dict[str, Any] = {}
        if env:
            out["env"] = dict(env)
        if attrs:
            out["attrs"] = attrs
        return out

    # --- the cluster's events (ClusterRecords' listener) ------------------------------------------

    def claim_changed(self, claim: Claim) -> None:
        rec = self.registry.local(claim.sandbox_id)
        if rec is None:
            return
        rec.claim = claim
        rec.labels = dict(claim.labels)
        if claim.expires_at and claim.expires_at != rec.expires_at:
            self.registry.expire_at(rec, claim.expires_at, publish=False)

    def claim_gone(self, sandbox_id: str) -> None:
        rec = self.registry.local(sandbox_id)
        if rec is not None:
            self._spawn(self._gone(rec))

    def adopted(self, claim: Claim) -> None:
        if self.registry.local(claim.sandbox_id) is not None:
            return
        if self._materialize(claim) is None:
            log.warning("adopted sandbox %s cannot be served here yet", claim.sandbox_id)
        else:
            log.info("adopted sandbox %s", claim.sandbox_id)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def remaining(expires_at: float) -> float:
    """Seconds from now until `expires_at` (unix seconds), at least a millisecond."""
    return max(0.001, expires_at - time.time())

"""The server's registry shared with the other replicas of a release, through the cluster.

A backend that shares its claims (`Backend.records`, a `backends.base.ClaimRecords`; on the
kubernetes backend a claimed sandbox's record lives on its pod, `backends/kubernetes/claims.py`)
is what this module turns into the server's `Record`s and back:

- a record this replica claims is published (its pod's claim written) before the create returns;
- a record another replica claimed becomes a local `Record` the first time a call names it
  (`resolve`), from the watch-fed cache: its sandbox is attached to this replica's pool (which
  renews its lease while it is here), so get / exec / files / delete cost no API request;
- a change of TTL, idle bound or labels is written back; a change seen on the watch is applied
  here;
- a record's activity (`Registry.touch`) stays on the replica that served it until the other
  replicas, which count its idle bound from the activity the cluster knows, would end it: then
  (`PUBLISH_LEAD_S` ahead) the registry's reaper writes it, at most once per idle bound;
- a sandbox deleted elsewhere leaves this registry; a dead replica's sandboxes adopted by this
  one are registered here, their TTL kept by this replica from then on.

What a surface keeps with a record (`Record.attrs`) crosses replicas through the codecs it
registers (`codec()`): JSON-able state, written to the claim's Secret. Live state (a running
background job, a code-interpreter kernel) stays on the replica that runs it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandboxes import errors as E
from sandboxes.server.registry import Record

if TYPE_CHECKING:
    from sandboxes.backends.base import ClaimRecord, ClaimRecords
    from sandboxes.server.registry import Registry

__all__ = ["Codec", "SharedRecords", "dataclass_codec"]

log = logging.getLogger("sandboxes.server.replicated")

# How many deleted ids a replica keeps refusing to serve again, and for how long at least: until
# the watch reports the pod gone, which takes a round trip to the API server.
DELETED_KEPT = 10_000
DELETED_FOR_S = 60.0
# A record's activity is written this long (at most half its idle bound) before the other replicas
# would end it: a write's round trip and the watch that brings it to them.
PUBLISH_LEAD_S = 5.0


@dataclass(frozen=True)
class Codec:
    """How a surface's `Record.attrs[name]` is written to the cluster and read back; `on_load`
    (record, value) is called on the replica that read it (e.g. to set the sandbox's limits)."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    on_load: Callable[[Any, Any], None] | None = None


def dataclass_codec(cls: type, *, exclude: tuple[str, ...] = (), on_load: Any = None) -> Codec:
    """A codec of a dataclass whose fields are JSON, bytes, lists, tuples and dicts of them;
    `exclude`: fields that mean nothing in another process (rebuilt by the class)."""
    names = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in exclude]

    def encode(obj: Any) -> dict[str, Any]:
        return {n: _to_json(getattr(obj, n)) for n in names}

    def decode(data: dict[str, Any]) -> Any:
        return cls(**{n: _from_json(v) for n, v in data.items() if n in names})

    return Codec(encode, decode, on_load)


def _to_json(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"$bytes": v.hex()}
    if isinstance(v, (list, tuple)):
        return [_to_json(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _to_json(x) for k, x in v.items()}
    return v


def _from_json(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"$bytes"}:
            return bytes.fromhex(v["$bytes"])
        return {k: _from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_from_json(x) for x in v]
    return v


def _template_codec() -> Codec:
    from sandboxes.templates import Template
    from sandboxes.types import Limits

    def encode(t: Any) -> dict[str, Any]:
        return _to_json(dataclasses.asdict(t))

    def decode(d: dict[str, Any]) -> Any:
        return Template(**{**d, "limits": Limits(**d["limits"])})

    return Codec(encode, decode)


class SharedRecords:
    """The registry's view of the release's claimed sandboxes (see the module docstring).

    `gone(record)` is awaited (in a task) when a sandbox this replica has a record of was deleted
    or lost elsewhere; it is expected to unregister it.
    """

    def __init__(
        self,
        registry: Registry,
        pool: Any,
        records: ClaimRecords[ClaimRecord],
        gone: Callable[[Record], Any],
        codecs: dict[str, Codec],
    ) -> None:
        self.registry = registry
        self.pool = pool
        self.records = records
        self._gone = gone
        self.codecs = codecs  # the surfaces', by attribute name (they register them as they start)
        self._template = _template_codec()
        # Templates every replica serves (its configuration); one made at run time (an image a
        # compatible API named) travels with the record, and the replica reading it adds it.
        self._configured = set(getattr(pool, "templates", {}))
        self._tasks: set[asyncio.Task[Any]] = set()
        # Sandboxes this replica deleted, whose pods the watch may still show claimed for a while:
        # never made records again (a get right after a delete must not bring one back to life).
        self._deleted: dict[str, float] = {}  # sandbox id -> when (monotonic)

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

    def deleted(self, sandbox_id: str) -> None:
        """This replica deleted `sandbox_id`: its claim, still in the cache until the watch sees
        the pod go, is no record any more."""
        now = time.monotonic()
        if len(self._deleted) >= DELETED_KEPT:
            self._deleted = {k: t for k, t in self._deleted.items() if now - t < DELETED_FOR_S}
        self._deleted[sandbox_id] = now

    def _materialize(self, claim: ClaimRecord) -> Record | None:
        rec = self.registry.local(claim.sandbox_id)
        if rec is not None:
            return rec
        if claim.sandbox_id in self._deleted:
            return None
        handle = self.records.handle(claim)
        private = self.records.private(claim)
        if handle is None or private is None:
            return None  # its token or private part is not in this replica's cache yet
        if claim.template not in getattr(self.pool, "templates", {}):
            if "template" not in private:
                log.warning("sandbox %s is of template %r, unknown here", claim.sandbox_id, claim.template)
                return None
            self.pool.serve_template(self._template.decode(private["template"]))
        env = private.get("env") or {}
        sb = self.pool.attach(claim.template, handle, labels=claim.labels, env=env)
        rec = Record(
            id=claim.sandbox_id,
            sandbox=sb,
            template=claim.template,
            labels=dict(claim.labels),
            owner=claim.owner,
            idempotency_key=claim.key,
            created_at=claim.created_at,
            expires_at=claim.expires_at or None,
            idle_s=claim.idle_s,
            active_at=claim.active_at or claim.created_at,
            local=False,
        )
        rec.claim = claim
        self.registry.add(rec, None)
        self._load_attrs(rec, private)
        return rec

    def _load_attrs(self, rec: Record, private: dict[str, Any]) -> None:
        for name, raw in (private.get("attrs") or {}).items():
            codec = self.codecs.get(name)
            if codec is None:
                continue
            try:
                value = codec.decode(raw)
                rec.attrs[name] = value
                if codec.on_load is not None:
                    codec.on_load(rec, value)
            except Exception:
                log.exception("reading %s of sandbox %s failed", name, rec.id)

    # --- from records to the cluster -----------------------------------------------------------

    async def publish(self, rec: Record, env: dict[str, str] | None) -> None:
        """Write a record this replica just claimed (before its create returns)."""
        claim = self.records.new_claim(
            rec.id,
            template=rec.template,
            owner=rec.owner,
            labels=dict(rec.labels),
            created_at=rec.created_at,
            expires_at=rec.expires_at,
            idle_s=rec.idle_s,
            active_at=rec.active_at,
            key=rec.idempotency_key,
        )
        rec.claim = claim
        await self.records.publish(claim, self._private(rec, env))

    def changed(self, rec: Record) -> None:
        """`rec`'s lifetime (TTL, idle bound, activity) or labels changed here: write them (in
        the background; the last write wins)."""
        claim = getattr(rec, "claim", None)
        if claim is None:
            return
        _lifetime_to(claim, rec)

        async def write() -> None:
            try:
                await self.records.update(claim)
            except Exception as e:  # noqa: BLE001 - this replica keeps it; the others see the old one
                log.warning("writing the record of %s failed: %s", rec.id, e)

        self._spawn(write())

    async def save(self, rec: Record) -> None:
        """Write `rec` whole (TTL, labels and its surfaces' state) before the caller answers,
        so that the next call, on any replica, finds what this one made."""
        claim = getattr(rec, "claim", None)
        if claim is None:
            return
        _lifetime_to(claim, rec)
        await self.records.update(claim, self._private(rec, dict(rec.sandbox.env)))

    def publish_by(self, rec: Record) -> float | None:
        """When `rec`'s activity must be written (unix seconds), or None: the cluster knows its
        latest activity (or it is not in the cluster). The other replicas end it at the
        activity they know plus its idle bound."""
        claim = getattr(rec, "claim", None)
        if claim is None or rec.idle_s is None:
            return None
        known = claim.active_at or claim.created_at
        if rec.active_at <= known:
            return None
        return known + rec.idle_s - min(PUBLISH_LEAD_S, rec.idle_s / 2)

    def _private(self, rec: Record, env: dict[str, str] | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if rec.template not in self._configured:
            template = getattr(self.pool, "templates", {}).get(rec.template)
            if template is not None:
                out["template"] = self._template.encode(template)
        attrs = {}
        for name, value in rec.attrs.items():
            codec = self.codecs.get(name)
            if codec is not None:
                attrs[name] = codec.encode(value)
        if env:
            out["env"] = dict(env)
        if attrs:
            out["attrs"] = attrs
        return out

    # --- the cluster's events (the records' listener) ---------------------------------------------

    def claim_changed(self, claim: ClaimRecord) -> None:
        rec = self.registry.local(claim.sandbox_id)
        if rec is None:
            return
        rec.claim = claim
        rec.labels = dict(claim.labels)
        self.registry.lifetime_from_cluster(rec, claim.expires_at, claim.idle_s, claim.active_at)
        private = self.records.private(claim)
        if private:
            self._load_attrs(rec, private)

    def claim_gone(self, sandbox_id: str) -> None:
        self._deleted.pop(sandbox_id, None)
        rec = self.registry.local(sandbox_id)
        if rec is not None:
            self._spawn(self._gone(rec))

    def adopted(self, claim: ClaimRecord) -> None:
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


def _lifetime_to(claim: ClaimRecord, rec: Record) -> None:
    """`rec`'s lifetime and labels onto its claim, as they are to be written."""
    claim.expires_at = rec.expires_at
    claim.idle_s = rec.idle_s
    claim.active_at = rec.active_at
    claim.labels = dict(rec.labels)


def remaining(expires_at: float) -> float:
    """Seconds from now until `expires_at` (unix seconds), at least a millisecond."""
    return max(0.001, expires_at - time.time())

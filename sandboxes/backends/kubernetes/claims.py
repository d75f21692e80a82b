"""Claimed sandboxes whose records live in the cluster, so that any replica serves any sandbox.

A claim is written on the sandbox's pod in one optimistic PATCH (`metadata.resourceVersion` of
the pod as this replica last saw it: it wins once): the label `sandboxes.io/claimed=true` and
the annotation `sandboxes.io/claim` (owner, template, labels, created / expires at, idempotency
key). What a record holds that pod readers must not see (the claim's env, the state the HTTP
surfaces keep) goes into a Secret `<pod>-claim` owned by the pod, written before the PATCH. The
agent's token is the pod's token Secret. Every replica watches the release's pods and those
Secrets, so finding a sandbox, its agent's address and its token costs no API request.

The pod's owner label names the replica that *holds* it: that replica renews its agent's lease
and expires its TTL (any replica serving it renews too). A replica whose Lease lapses or is
deleted (`replicas.py`), and found so by asking the API server (a lagging watch is no proof),
loses its claimed pods to whichever replica first rewrites their owner label (again a
resourceVersion-checked PATCH). Its warm pods are left to their agents' leases: they end by
themselves if it is truly gone (and are deleted then), and a replica wrongly judged dead (its
renewals slowed by a busy API server) loses nothing but the holding of its claimed sandboxes.

Idempotency keys hold across replicas through a Lease per (owner, key), named by their hash and
owned by the sandbox's pod: creating it is atomic, so two replicas given the same key at once
agree on one sandbox.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...errors import LaunchError
from ..base import ClaimListener, SandboxHandle
from .api import _Api, _api_failure, _ApiError
from .config import (
    ANN_CLAIM,
    ANN_MANAGER_POD,
    ANN_MANAGER_UID,
    ANN_REPLICA_LEASE,
    LABEL_CLAIMED,
    LABEL_COMPONENT,
    LABEL_MANAGER,
    LABEL_NAME,
    LABEL_OWNER,
    LABEL_POOL,
    TOKEN_KEY,
    KubeConfig,
)
from .manifests import Owner
from .pod_cache import PodCache
from .pods import PodRef, pod_readiness
from .replicas import LEASES, Replicas
from .watch import Watch, by_name, cancel

log = logging.getLogger(__name__)

CLAIM_KEY = "claim.json"
_SANDBOX_ID = re.compile(r"^sb-[0-9a-f]{12}$")
_MISS_TTL_S = 2.0  # how long an id the API server does not know is not asked for again


@dataclass
class Claim:
    """One claimed sandbox's record as the cluster holds it."""

    sandbox_id: str
    pod: str
    template: str
    owner: str  # the API key's owner that claimed it
    labels: dict[str, str] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    expires_at: float | None = None  # unix seconds
    idle_s: float | None = None  # its idle bound (`Record.idle_s`)
    active_at: float | None = None  # unix seconds of its last activity the cluster knows
    key: str | None = None  # idempotency key
    private: bool = False  # env / surface state in the `<pod>-claim` Secret
    holder: str = ""  # the replica (owner label) that keeps it

    def annotation(self) -> str:
        return json.dumps(
            {
                "id": self.sandbox_id,
                "template": self.template,
                "owner": self.owner,
                "labels": self.labels,
                "created_at": self.created_at,
                "expires_at": self.expires_at,
                "idle_s": self.idle_s,
                "active_at": self.active_at,
                "key": self.key,
                "private": self.private,
            },
            sort_keys=True,
        )


def claim_of(pod: Mapping[str, Any] | None) -> Claim | None:
    """The claim written on `pod`, if it is claimed and live."""
    if pod is None or pod_readiness(pod)[0] != "ready":
        return None
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    raw = (meta.get("annotations") or {}).get(ANN_CLAIM)
    if labels.get(LABEL_CLAIMED) != "true" or not raw:
        return None
    try:
        d = json.loads(raw)
        return Claim(
            sandbox_id=str(d["id"]),
            pod=str(meta["name"]),
            template=str(d["template"]),
            owner=str(d["owner"]),
            labels={str(k): str(v) for k, v in (d.get("labels") or {}).items()},
            created_at=float(d.get("created_at") or 0.0),
            expires_at=float(d["expires_at"]) if d.get("expires_at") else None,
            idle_s=float(d["idle_s"]) if d.get("idle_s") else None,
            active_at=float(d["active_at"]) if d.get("active_at") else None,
            key=d.get("key") or None,
            private=bool(d.get("private")),
            holder=str(labels.get(LABEL_OWNER) or ""),
        )
    except (KeyError, TypeError, ValueError) as e:
        log.warning("pod %s has an unreadable claim record (%s); ignoring it", meta.get("name"), e)
        return None


def key_lease_name(pool: str, owner: str, key: str) -> str:
    digest = hashlib.sha256(f"{owner}\0{key}".encode()).hexdigest()[:40]
    return f"{pool[:40]}-key-{digest}"


class ClusterRecords:
    """The release's claimed sandboxes, from the backend's pod cache and a Secret watch (the
    backend's `records`: a `base.ClaimRecords` of `Claim`s). `who` is the manager these records
    are kept by (`me`: its owner label)."""

    def __init__(self, api: _Api, cfg: KubeConfig, pods: PodCache, who: Owner) -> None:
        self.api = api
        self.cfg = cfg
        self.pods = pods
        self.who = who
        self.me = who.owner
        pods.listeners.append(self.pod_event)
        self.replicas = Replicas(self.api, cfg, self.me, self._kick)
        self.listener: ClaimListener[Claim] | None = None
        self.secrets_path = f"/api/v1/namespaces/{cfg.namespace}/secrets"
        self.leases_path = LEASES.format(ns=cfg.namespace)
        self._secrets: dict[str, dict[str, str]] = {}  # name -> decoded data
        self._secret_watch = Watch(
            self.api,
            self.secrets_path,
            f"{LABEL_POOL}={cfg.pool},{LABEL_COMPONENT} in (sandbox-token,sandbox-claim)",
            self._secret_list,
            self._secret_event,
            "secret",
        )
        self._claims: dict[str, Claim] = {}  # sandbox id -> claim
        self._by_pod: dict[str, str] = {}  # pod name -> sandbox id
        self._keys: dict[tuple[str, str], str] = {}  # (owner, idempotency key) -> sandbox id
        self._held: set[str] = set()  # sandbox ids this replica holds
        self._publishing: set[str] = set()  # claims of this replica being written
        # One write of a claim's record at a time, each built from the claim as it is when its
        # turn comes: a background TTL write started before a save cannot land after it with the
        # claim as it was (say, without the private part the save wrote).
        self._writes: dict[str, tuple[asyncio.Lock, list[int]]] = {}  # id -> (lock, [users])
        self._first_seen: dict[str, float] = {}  # pod name -> loop time this replica first saw it
        self._misses: dict[str, float] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._joined = False
        self._join_lock: asyncio.Lock | None = None
        self._serving = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def join(self) -> None:
        """Create this replica's Lease and start watching the release's Secrets, before its first
        pod: no replica may take a pod whose maker has no Lease yet for a dead one's, and the
        first list is in before this replica's own creates crowd the API server."""
        if self._joined:
            return
        if self._join_lock is None:
            self._join_lock = asyncio.Lock()
        async with self._join_lock:
            if self._joined:
                return
            await self.replicas.start()
            self._tasks.append(asyncio.create_task(self._secret_watch.run(), name="kube-secret-watch"))
            async with asyncio.timeout(self.cfg.api_timeout_s):
                await self._secret_watch.synced.wait()
            self._joined = True

    async def serve(self, listener: ClaimListener[Claim]) -> None:
        """Start telling `listener`, and adopting the claimed pods of dead replicas."""
        self.listener = listener
        await self.join()
        await self.pods.ensure()
        self._serving = True
        for name, pod in list(self.pods.release.items()):
            self.pod_event("MODIFIED", name, pod)
        self._tasks.append(asyncio.create_task(self._adopt_loop(), name="kube-adopt"))

    def others_alive(self) -> bool:
        return any(o != self.me and self.replicas.alive(o) for o in self.replicas.known())

    async def hand_over(self) -> None:
        """Leave the release: delete this replica's Lease, so the others adopt its claimed
        sandboxes at once."""
        await self._stop_tasks()
        await self.replicas.leave()

    async def close(self) -> None:
        await self._stop_tasks()
        await self.replicas.close()

    async def _stop_tasks(self) -> None:
        self._secret_watch.closing = True
        await cancel(self._tasks)

    # --- reading ------------------------------------------------------------------------------

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
    ) -> Claim:
        """The claim of a sandbox this replica hands out (its pod is named by its id), written by
        `publish`."""
        return Claim(
            sandbox_id=sandbox_id,
            pod=sandbox_id.lower(),
            template=template,
            owner=owner,
            labels=labels,
            created_at=created_at,
            expires_at=expires_at,
            idle_s=idle_s,
            active_at=active_at,
            key=key,
        )

    def lookup(self, sandbox_id: str) -> Claim | None:
        return self._claims.get(sandbox_id)

    def claims(self) -> list[Claim]:
        return list(self._claims.values())

    def find_key(self, owner: str, key: str) -> Claim | None:
        sid = self._keys.get((owner, key))
        return self._claims.get(sid) if sid else None

    def held(self) -> list[Claim]:
        return [c for sid in self._held if (c := self._claims.get(sid)) is not None]

    def handle(self, claim: Claim) -> SandboxHandle | None:
        """How to reach `claim`'s agent (None while its token is not in yet)."""
        pod = self.pods.release.get(claim.pod)
        state, ip = pod_readiness(pod)
        if pod is None or state != "ready":
            return None
        token = self._token(pod)
        if token is None:
            return None
        port = self.pods.port(pod)
        ref = self.pods.live.get(claim.pod)
        if ref is None or not ref.alive():
            uid = str(pod.get("metadata", {}).get("uid") or "")
            ref = PodRef(claim.pod, self.cfg.namespace, uid, claim.sandbox_id, ip, port)
            self.pods.live[claim.pod] = ref
        return SandboxHandle(
            id=claim.sandbox_id, endpoint=f"http://{ip}:{port}", token=token, backend_data=ref
        )

    def private(self, claim: Claim) -> dict[str, Any] | None:
        """The claim's env and surface state (None while its Secret is not in yet)."""
        if not claim.private:
            return {}
        data = self._secrets.get(f"{claim.pod}-claim")
        if data is None or CLAIM_KEY not in data:
            return None
        try:
            out = json.loads(data[CLAIM_KEY])
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}

    def _token(self, pod: Mapping[str, Any]) -> str | None:
        if self.cfg.token_mode == "env":
            for c in pod.get("spec", {}).get("containers") or ():
                for e in c.get("env") or ():
                    if e.get("name") == "SANDBOX_AGENT_TOKEN":
                        return str(e.get("value"))
            return None
        name = pod.get("metadata", {}).get("name")
        return (self._secrets.get(f"{name}-token") or {}).get(TOKEN_KEY)

    async def fetch(self, sandbox_id: str) -> Claim | None:
        """A sandbox this replica's watches do not show (yet): asked of the API server, for an
        id of the right shape not asked for in the last seconds. This is what makes a create
        on one replica visible at once on another, ahead of its watch."""
        if not _SANDBOX_ID.match(sandbox_id):
            return None
        loop = asyncio.get_running_loop()
        if self._misses.get(sandbox_id, 0.0) > loop.time():
            return None
        name = sandbox_id.lower()
        try:
            pod = await self.api.request("GET", f"{self.pods.path}/{name}")
            claim = claim_of(pod)
            if claim is not None:
                wanted = [f"{name}-token"] if self.cfg.token_mode == "secret" else []
                if claim.private:
                    wanted.append(f"{name}-claim")
                for sname in wanted:
                    if sname not in self._secrets:
                        self._secret_event(
                            "MODIFIED", await self.api.request("GET", f"{self.secrets_path}/{sname}")
                        )
        except _ApiError as e:
            if e.status != 404:
                raise _api_failure(e, f"reading sandbox {sandbox_id}") from e
            self._misses[sandbox_id] = loop.time() + _MISS_TTL_S
            return None
        if len(self._misses) > 10_000:
            self._misses = {k: v for k, v in self._misses.items() if v > loop.time()}
        self.pods.apply_if_newer(pod)
        return self.lookup(sandbox_id)

    # --- writing ------------------------------------------------------------------------------

    async def publish(self, claim: Claim, private: dict[str, Any] | None) -> None:
        """Write the claim of a pod this replica owns and just handed out. Raises `LaunchError`
        (step "conflict") if the pod changed hands meanwhile."""
        name = claim.pod
        uid = self.pods.uid(name)
        claim.holder = self.me
        claim.private = bool(private)
        self._publishing.add(claim.sandbox_id)
        try:
            if private:
                await self._write_private(name, uid, private, create=True)
            for attempt in range(3):
                rv = (self.pods.release.get(name) or {}).get("metadata", {}).get("resourceVersion")
                body: dict[str, Any] = {
                    "metadata": {
                        "labels": {LABEL_CLAIMED: "true"},
                        "annotations": {ANN_CLAIM: claim.annotation()},
                    }
                }
                if rv:
                    body["metadata"]["resourceVersion"] = str(rv)
                try:
                    obj = await self._patch_pod(name, body)
                    break
                except _ApiError as e:
                    if e.status != 409 or attempt == 2:
                        raise _api_failure(e, f"claiming pod {name}") from e
                    fresh = await self.api.request("GET", f"{self.pods.path}/{name}")
                    labels = fresh.get("metadata", {}).get("labels") or {}
                    if labels.get(LABEL_OWNER) != self.me or labels.get(LABEL_CLAIMED) == "true":
                        raise LaunchError(f"pod {name} was taken by another replica", step="conflict") from e
                    self.pods.apply_if_newer(fresh)  # a status update raced us: try again on it
            self._held.add(claim.sandbox_id)
            self.pods.apply_if_newer(obj)
        finally:
            self._publishing.discard(claim.sandbox_id)

    async def update(self, claim: Claim, private: dict[str, Any] | None = None) -> None:
        """Rewrite a claim's record (TTL, labels) and, when given, its private part."""
        lock, users = self._writes.setdefault(claim.sandbox_id, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                if private is not None:
                    uid = self.pods.uid(claim.pod)
                    await self._write_private(claim.pod, uid, private, create=not claim.private)
                    claim.private = True
                try:
                    obj = await self._patch_pod(
                        claim.pod, {"metadata": {"annotations": {ANN_CLAIM: claim.annotation()}}}
                    )
                except _ApiError as e:
                    raise _api_failure(e, f"updating sandbox {claim.sandbox_id}") from e
                self.pods.apply_if_newer(obj)
        finally:
            users[0] -= 1
            if not users[0]:
                del self._writes[claim.sandbox_id]

    async def reserve_key(self, owner: str, key: str, sandbox_id: str) -> str:
        """Bind idempotency key `key` of `owner` to `sandbox_id`, unless another replica bound it
        first: the id the key belongs to."""
        pod_name = sandbox_id.lower()
        uid = self.pods.uid(pod_name)
        name = key_lease_name(self.cfg.pool, owner, key)
        meta: dict[str, Any] = {
            "name": name,
            "namespace": self.cfg.namespace,
            "labels": {
                LABEL_NAME: "sandboxes",
                LABEL_COMPONENT: "idempotency-key",
                LABEL_POOL: self.cfg.pool,
            },
        }
        if uid:  # deleted with the sandbox, so the key can make a new one after
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": uid}]
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {"holderIdentity": sandbox_id},
        }
        try:
            await self.api.request("POST", self.leases_path, body=body)
            return sandbox_id
        except _ApiError as e:
            if e.status != 409:
                raise _api_failure(e, "reserving an idempotency key") from e
        try:
            lease = await self.api.request("GET", f"{self.leases_path}/{name}")
        except _ApiError as e:
            raise _api_failure(e, "reading an idempotency key") from e
        return str(lease.get("spec", {}).get("holderIdentity") or sandbox_id)

    async def _write_private(self, pod: str, uid: str, data: dict[str, Any], *, create: bool) -> None:
        encoded = base64.b64encode(json.dumps(data, sort_keys=True).encode()).decode()
        if not create:
            try:
                await self.api.request(
                    "PATCH",
                    f"{self.secrets_path}/{pod}-claim",
                    body={"data": {CLAIM_KEY: encoded}},
                    content_type="application/merge-patch+json",
                )
                return
            except _ApiError as e:
                if e.status != 404:
                    raise _api_failure(e, f"writing the record of {pod}") from e
        meta: dict[str, Any] = {
            "name": f"{pod}-claim",
            "namespace": self.cfg.namespace,
            "labels": {LABEL_NAME: "sandboxes", LABEL_COMPONENT: "sandbox-claim", LABEL_POOL: self.cfg.pool},
        }
        if uid:
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}]
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": meta,
            "data": {CLAIM_KEY: encoded},
        }
        try:
            obj = await self.api.request("POST", self.secrets_path, body=body)
        except _ApiError as e:
            raise _api_failure(e, f"writing the record of {pod}") from e
        self._secret_event("ADDED", obj)

    async def _patch_pod(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.api.request(
            "PATCH", f"{self.pods.path}/{name}", body=body, content_type="application/merge-patch+json"
        )

    # --- events -------------------------------------------------------------------------------

    def pod_event(self, kind: str, name: str, pod: dict[str, Any]) -> None:
        """A change of pod `name` the cache applied (its listener)."""
        if kind == "DELETED":
            self._first_seen.pop(name, None)
        else:
            self._first_seen.setdefault(name, asyncio.get_running_loop().time())
        claim = None if kind == "DELETED" else claim_of(pod)
        old = self._by_pod.get(name)
        if claim is None:
            if old is not None:
                self._forget(name, old)
            return
        sid = claim.sandbox_id
        self._claims[sid] = claim
        self._by_pod[name] = sid
        if claim.key:
            self._keys[(claim.owner, claim.key)] = sid
        if not self._serving or self.listener is None:
            return
        if claim.holder == self.me:
            if sid not in self._held and sid not in self._publishing:
                self._held.add(sid)
                self.listener.adopted(claim)
        else:
            self._held.discard(sid)
        self.listener.claim_changed(claim)

    def _forget(self, pod: str, sid: str) -> None:
        self._by_pod.pop(pod, None)
        claim = self._claims.pop(sid, None)
        if claim is not None and claim.key and self._keys.get((claim.owner, claim.key)) == sid:
            del self._keys[(claim.owner, claim.key)]
        self._held.discard(sid)
        self.pods.live.pop(pod, None)
        if self.listener is not None:
            self.listener.claim_gone(sid)

    def _secret_list(self, items: list[dict[str, Any]]) -> None:
        present = by_name(items)
        for name in list(self._secrets):
            if name not in present:
                self._secrets.pop(name, None)
        for obj in present.values():
            self._secret_event("MODIFIED", obj)

    def _secret_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name")
        if not name:
            return
        if kind == "DELETED":
            self._secrets.pop(name, None)
            return
        data = {}
        for k, v in (obj.get("data") or {}).items():
            with contextlib.suppress(ValueError, TypeError):
                data[k] = base64.b64decode(v).decode()
        if self._secrets.get(name) == data:
            return
        self._secrets[name] = data
        sid = self._by_pod.get(name.removesuffix("-claim")) if name.endswith("-claim") else None
        claim = self._claims.get(sid) if sid else None
        if claim is not None and self._serving and self.listener is not None:
            self.listener.claim_changed(claim)  # its private part changed

    # --- adoption -------------------------------------------------------------------------------

    def _kick(self) -> None:
        self._wake.set()

    def _dead(self, name: str, pod: Mapping[str, Any]) -> bool:
        """Whether `pod` was made by a sharing replica that is gone (never this one's)."""
        meta = pod.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(LABEL_OWNER)
        if not owner or owner == self.me or not (meta.get("annotations") or {}).get(ANN_REPLICA_LEASE):
            return False
        if self.replicas.alive(owner):
            return False
        if owner in self.replicas.known():
            return True  # its Lease lapsed
        # Never seen alive: dead only once its pod has been around for a Lease's duration.
        loop = asyncio.get_running_loop()
        return loop.time() - self._first_seen.get(name, loop.time()) >= self.replicas.duration

    async def _adopt_loop(self) -> None:
        period = self.replicas.duration / 4
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):
                    await self._wake.wait()
            self._wake.clear()
            confirmed: dict[str, bool] = {}
            for name, pod in list(self.pods.release.items()):
                if not self._dead(name, pod):
                    continue
                meta = pod.get("metadata") or {}
                owner = str((meta.get("labels") or {}).get(LABEL_OWNER))
                ended = pod_readiness(pod)[0] == "failed"
                claimed = claim_of(pod) is not None
                if not ended and not claimed:
                    continue  # a warm pod: its agent's lease ends it if its replica is truly gone
                try:
                    if owner not in confirmed:
                        lease = str((meta.get("annotations") or {}).get(ANN_REPLICA_LEASE))
                        confirmed[owner] = await self.replicas.confirm_dead(owner, lease)
                    if not confirmed[owner]:
                        continue
                    if claimed:
                        await self._adopt(name, pod)
                    else:  # its agent ended: nobody's to keep
                        await self.pods.delete(name)
                        log.info("deleted ended pod %s of a replica that is gone", name)
                except Exception as e:  # noqa: BLE001 - the next round tries again
                    log.warning("taking over pod %s failed: %s", name, e)
            if self.listener is not None:  # what this replica holds is served here
                for claim in self.held():
                    self.listener.adopted(claim)

    async def _adopt(self, name: str, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        ann: dict[str, Any] = {ANN_REPLICA_LEASE: self.replicas.name}
        if self.who.manager_pod and self.who.manager_uid:
            ann[ANN_MANAGER_POD] = self.who.manager_pod
            ann[ANN_MANAGER_UID] = self.who.manager_uid
        body = {
            "metadata": {
                "resourceVersion": str(meta.get("resourceVersion") or ""),
                "labels": {LABEL_OWNER: self.me, LABEL_MANAGER: self.who.identity},
                "annotations": ann,
            }
        }
        try:
            obj = await self._patch_pod(name, body)
        except _ApiError as e:
            if e.status in (404, 409):
                return  # gone, or another replica was first: the next round sees which
            raise
        log.info("adopted sandbox pod %s of replica %s", name, (meta.get("labels") or {}).get(LABEL_OWNER))
        self.pods.apply_if_newer(obj)

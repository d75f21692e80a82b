"""Which manager replicas of a release are alive: one `coordination.k8s.io/v1` Lease per replica.

Each replica creates its Lease at start, renews it every `duration / 4` and deletes it when it
drains. Every replica watches the release's Leases and judges the others by what it observes
with its own clock (as client-go's leader election does), never by comparing wall clocks: a
replica whose Lease has not changed for `duration` seconds, or whose Lease is gone, is dead.
The watch and the renewals are the only API traffic this adds (a write per replica every few
seconds); none of it is on the exec path.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable
from typing import Any

from .api import _Api, _ApiError
from .config import LABEL_COMPONENT, LABEL_NAME, LABEL_OWNER, LABEL_POOL, KubeConfig, _label_value
from .watch import Watch, by_name, cancel

log = logging.getLogger(__name__)

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
COMPONENT = "manager-replica"


def lease_name(pool: str, owner: str) -> str:
    """The Lease of replica `owner` (a valid object name, unique per owner)."""
    return _label_value(f"{pool}-replica-{owner}", 253)


def _now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Replicas:
    """This replica's Lease and the liveness of the release's other replicas.

    `on_change()` is called (on the loop) whenever a replica appears, goes or is judged dead.
    """

    def __init__(self, api: _Api, cfg: KubeConfig, me: str, on_change: Callable[[], None]) -> None:
        self.api = api
        self.cfg = cfg
        self.me = me
        self.duration = float(cfg.replica_lease_s)
        self.on_change = on_change
        self.path = LEASES.format(ns=cfg.namespace)
        self.name = lease_name(cfg.pool, me)
        self.selector = f"{LABEL_POOL}={cfg.pool},{LABEL_COMPONENT}={COMPONENT}"
        # owner -> (resourceVersion last seen, loop time it was first seen at that version)
        self._seen: dict[str, tuple[str, float]] = {}
        self._watch = Watch(api, self.path, self.selector, self._list, self._observe, "replica lease")
        self._tasks: list[asyncio.Task[None]] = []
        self._leaving = False

    # --- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Create this replica's Lease, then watch everyone's; returns once the first list is in."""
        await self._create()
        self._tasks.append(asyncio.create_task(self._renew_loop(), name="replica-lease-renew"))
        self._tasks.append(asyncio.create_task(self._watch.run(), name="replica-lease-watch"))
        async with asyncio.timeout(self.cfg.api_timeout_s):
            await self._watch.synced.wait()

    async def leave(self) -> None:
        """Stop renewing and delete this replica's Lease: the others take over at once."""
        self._leaving = True
        await self._stop_tasks()
        with contextlib.suppress(Exception):
            await self.api.request("DELETE", f"{self.path}/{self.name}")

    async def close(self) -> None:
        await self._stop_tasks()

    async def _stop_tasks(self) -> None:
        self._watch.closing = True
        await cancel(self._tasks)

    # --- liveness ----------------------------------------------------------------------------

    def alive(self, owner: str) -> bool:
        """Whether replica `owner` is alive as far as this replica can tell."""
        if owner == self.me:
            return not self._leaving
        seen = self._seen.get(owner)
        if seen is None:
            return False
        return asyncio.get_running_loop().time() - seen[1] < self.duration

    def known(self) -> list[str]:
        return sorted(self._seen)

    async def confirm_dead(self, owner: str, lease: str) -> bool:
        """Whether replica `owner` (whose Lease is named `lease`) is dead, asked of the API
        server: a watch that lags (this replica busy, the API server slow) must not make a live
        replica look dead. A Lease changed since this replica last saw it counts as a renewal."""
        try:
            obj = await self.api.request("GET", f"{self.path}/{lease}")
        except _ApiError as e:
            if e.status == 404:
                return True
            raise
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        seen = self._seen.get(owner)
        if seen is None or seen[0] != rv:
            self._seen[owner] = (rv, asyncio.get_running_loop().time())
            return False
        return True

    # --- this replica's Lease ----------------------------------------------------------------

    def _manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.cfg.namespace,
                "labels": {
                    LABEL_NAME: "sandboxes",
                    LABEL_COMPONENT: COMPONENT,
                    LABEL_POOL: self.cfg.pool,
                    LABEL_OWNER: self.me,
                },
            },
            "spec": {
                "holderIdentity": self.me,
                "leaseDurationSeconds": max(1, int(self.duration)),
                "renewTime": _now(),
            },
        }

    async def _create(self) -> None:
        try:
            await self.api.request("POST", self.path, body=self._manifest())
        except _ApiError as e:
            if e.status != 409:  # our own from an earlier start of this process id: renew it
                raise
            await self._renew()

    async def _renew(self) -> None:
        await self.api.request(
            "PATCH",
            f"{self.path}/{self.name}",
            body={"spec": {"renewTime": _now(), "holderIdentity": self.me}},
            content_type="application/merge-patch+json",
        )

    async def _renew_loop(self) -> None:
        period = self.duration / 4
        while True:
            await asyncio.sleep(period)
            try:
                await self._renew()
            except _ApiError as e:
                if e.status == 404:  # deleted under us (by hand): make it again
                    with contextlib.suppress(Exception):
                        await self._create()
                else:
                    log.warning("renewing this replica's lease failed: %s", e)
            except Exception as e:  # noqa: BLE001 - an API outage must not end the loop
                log.warning("renewing this replica's lease failed: %s", e)

    # --- everyone's Leases ---------------------------------------------------------------------

    def _observe(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(LABEL_OWNER)
        if not owner:
            return
        now = asyncio.get_running_loop().time()
        if kind == "DELETED":
            if self._seen.pop(owner, None) is not None:
                self.on_change()
            return
        rv = str(meta.get("resourceVersion") or "")
        old = self._seen.get(owner)
        if old is None or old[0] != rv:
            self._seen[owner] = (rv, now)
            if old is None:
                self.on_change()

    def _list(self, items: list[dict[str, Any]]) -> None:
        present = by_name(items)
        owners = {((o.get("metadata") or {}).get("labels") or {}).get(LABEL_OWNER) for o in present.values()}
        for owner in list(self._seen):
            if owner not in owners:
                self._observe("DELETED", {"metadata": {"labels": {LABEL_OWNER: owner}}})
        for obj in present.values():
            self._observe("MODIFIED", obj)

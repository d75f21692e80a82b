"""The release's pods as one watch reports them: the cache the backend and the cluster's claim
records (`claims.py`) both read, so neither asks the API server on a sandbox's path."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import BackendUnavailable, LaunchError
from .api import _Api, _api_failure, _ApiError
from .config import ANN_AGENT_PORT, LABEL_OWNER, LABEL_POOL, KubeConfig
from .pods import PodRef
from .watch import Watch, by_name

PodListener = Callable[[str, str, dict[str, Any]], None]
"""`fn(kind, name, pod)` after the cache applied an event ("" kind: a change a list found)."""


class PodCache:
    """Every pod of the release (every replica's: one watch sees them all), the pods of this
    manager (`owner`), and the live sandboxes' `PodRef`s by pod name. Listeners hear each change
    after it is applied, in the order they were added."""

    def __init__(self, api: _Api, cfg: KubeConfig, owner: str) -> None:
        self.api = api
        self.cfg = cfg
        self.owner = owner
        self.release: dict[str, dict[str, Any]] = {}  # pod name -> last seen object (every replica's)
        self.mine: dict[str, dict[str, Any]] = {}  # pod name -> last seen object (this owner's)
        self.live: dict[str, PodRef] = {}  # pod name -> live sandbox
        self.listeners: list[PodListener] = []
        self.closing = False
        self._watch = Watch(api, self.path, self.selector, self._sync, self.apply, "pod")
        self._task: asyncio.Task[None] | None = None

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.cfg.namespace}/pods"

    @property
    def selector(self) -> str:
        """The pods of every replica of this release (one watch sees them all)."""
        return f"{LABEL_POOL}={self.cfg.pool},{LABEL_OWNER}"

    @property
    def restarts(self) -> int:
        return self._watch.restarts

    async def ensure(self) -> None:
        """The watch runs and its first list is in (`BackendUnavailable` if none came in time)."""
        if self.closing:
            raise LaunchError("backend closed", step="closed")
        if self._task is None or self._task.done():
            self._watch.synced.clear()
            self._task = asyncio.create_task(self._watch.run(), name="kube-watch")
        if not self._watch.synced.is_set():
            try:
                async with asyncio.timeout(self.cfg.api_timeout_s):
                    await self._watch.synced.wait()
            except TimeoutError as e:
                err = self._watch.error
                raise BackendUnavailable(f"cannot list pods: {err or 'no answer'}") from e

    async def stop(self) -> None:
        """Stop the watch (the cache keeps what it saw last)."""
        self.closing = self._watch.closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None

    def apply(self, kind: str | None, pod: dict[str, Any]) -> None:
        """Take one event (or a fresher object a request returned) into the cache."""
        meta = pod.get("metadata", {})
        name = meta.get("name")
        labels = meta.get("labels") or {}
        if not name or labels.get(LABEL_POOL) != self.cfg.pool:
            return  # not of this release (an emulator without label selectors)
        if kind == "DELETED":
            self.release.pop(name, None)
            self.mine.pop(name, None)
        else:
            self.release[name] = pod
            if labels.get(LABEL_OWNER) == self.owner:
                self.mine[name] = pod
            else:  # another replica's (or adopted by one)
                self.mine.pop(name, None)
        for fn in self.listeners:
            fn(kind or "", name, pod)

    def apply_if_newer(self, pod: dict[str, Any]) -> None:
        """`apply` an object a request returned, unless the watch already brought a later one."""
        name = pod.get("metadata", {}).get("name")
        have = (self.release.get(name) or {}).get("metadata", {}).get("resourceVersion")
        got = pod.get("metadata", {}).get("resourceVersion")
        if have is None or (str(got).isdigit() and str(have).isdigit() and int(got) > int(have)):
            self.apply("MODIFIED", pod)

    def _sync(self, items: list[dict[str, Any]]) -> None:
        seen = by_name(items)
        for name in list(self.release):
            if name not in seen:
                self.apply("DELETED", self.release[name])
        for pod in seen.values():
            self.apply("MODIFIED", pod)

    def port(self, pod: Mapping[str, Any]) -> int:
        """The agent's port on `pod` (per pod only on the emulator: `port_from_annotation`)."""
        if self.cfg.port_from_annotation:
            raw = (pod.get("metadata", {}).get("annotations") or {}).get(ANN_AGENT_PORT)
            if raw and str(raw).isdigit():
                return int(raw)
        return self.cfg.agent_port

    def uid(self, name: str) -> str:
        """The uid of pod `name` as last seen ("" when unknown)."""
        return str((self.release.get(name) or {}).get("metadata", {}).get("uid") or "")

    async def delete(self, name: str, attempts: int = 3) -> None:
        """DELETE the pod (404 is fine); retried a few times on API failures."""
        delay = 0.2
        for i in range(attempts):
            try:
                await self.api.request("DELETE", f"{self.path}/{name}")
                return
            except _ApiError as e:
                if e.status == 404:
                    return
                if e.status < 500 and e.status != 429 or i == attempts - 1:
                    raise _api_failure(e, f"deleting pod {name}") from e
            except BackendUnavailable:
                if i == attempts - 1:
                    raise
            await asyncio.sleep(delay)
            delay *= 2

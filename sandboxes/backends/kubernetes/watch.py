"""List-then-watch of one kind of object, kept up for good: the one loop every cache of the
backend (pods, token and claim Secrets, replica Leases) is fed by."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .api import _Api, _ApiError

log = logging.getLogger(__name__)


@dataclass
class Watch:
    """`run()` lists the objects of `path` matching `selector`, hands them to `on_list`, then
    streams changes to `on_event(kind, obj)` from that version; on any failure it backs off and
    lists again (the list catches what the gap hid, deletions included). A normal end of the
    stream (the server's timeout) resumes from the last version without a list."""

    api: _Api
    path: str
    selector: str
    on_list: Callable[[list[dict[str, Any]]], None]
    on_event: Callable[[str, dict[str, Any]], None]
    what: str
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    error: BaseException | None = None
    restarts: int = 0
    closing: bool = False

    async def run(self) -> None:
        backoff = 0.1
        while not self.closing:
            try:
                lst = await self.api.request("GET", self.path, query=[("labelSelector", self.selector)])
                rv = str(lst.get("metadata", {}).get("resourceVersion") or "")
                self.on_list(lst.get("items") or [])
                self.synced.set()
                self.error = None
                while not self.closing:
                    query = [
                        ("labelSelector", self.selector),
                        ("watch", "true"),
                        ("allowWatchBookmarks", "true"),
                        ("timeoutSeconds", str(240 + secrets.randbelow(120))),
                    ]
                    if rv and rv.isdigit():
                        query.append(("resourceVersion", rv))
                    resp = await self.api.stream(self.path, query)
                    try:
                        async for line in resp.content:
                            if not line.strip():
                                continue
                            ev = json.loads(line)
                            kind, obj = ev.get("type"), ev.get("object") or {}
                            if kind == "ERROR":
                                raise _ApiError(
                                    int(obj.get("code") or 500),
                                    str(obj.get("reason")),
                                    str(obj.get("message")),
                                )
                            new_rv = obj.get("metadata", {}).get("resourceVersion")
                            if new_rv:
                                rv = str(new_rv)
                            if kind == "BOOKMARK":
                                continue
                            self.on_event(str(kind), obj)
                            backoff = 0.1
                    finally:
                        resp.release()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the watch must survive anything
                if self.closing:
                    return
                self.error = e
                self.restarts += 1
                log.warning("%s watch failed (%s); listing again in %.1fs", self.what, e, backoff)
                await asyncio.sleep(backoff)  # retry backoff after a failure, not condition polling
                backoff = min(5.0, backoff * 2)


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A list's objects by name."""
    out = {}
    for obj in items:
        name = obj.get("metadata", {}).get("name")
        if name:
            out[name] = obj
    return out


async def cancel(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel background loops (watches, renewals) and wait for them; the list is emptied."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(BaseException):
            await t
    tasks.clear()

"""What the watch says of a pod: references to the pods a manager owns and their readiness."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import CONTAINER, FATAL_WAITING


@dataclass(eq=False)
class PodRef:
    """`SandboxHandle.backend_data` of a kubernetes sandbox: its pod, and whether it was lost."""

    name: str
    namespace: str
    uid: str
    sandbox_id: str
    ip: str
    port: int
    lost_reason: str | None = None

    def alive(self) -> bool:
        """False once the watch saw the pod go (deleted, evicted, ended, node lost)."""
        return self.lost_reason is None


@dataclass(eq=False)
class _Starting:
    future: asyncio.Future[tuple[str, int]]
    last_status: str = "pod created, not scheduled yet"


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in pod.get("status", {}).get("conditions") or ():
        if c.get("type") == kind:
            return c
    return None


def _container_status(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cs in pod.get("status", {}).get("containerStatuses") or ():
        if cs.get("name") == CONTAINER:
            return cs
    return None


def _describe_terminated(pod: Mapping[str, Any]) -> str:
    cs = _container_status(pod) or {}
    term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
    phase = pod.get("status", {}).get("phase", "?")
    if term:
        msg = (term.get("message") or "").strip()
        return (
            f"pod {phase}: container {term.get('reason') or 'terminated'} "
            f"(exit code {term.get('exitCode')}){': ' + msg[:300] if msg else ''}"
        )
    reason = pod.get("status", {}).get("reason") or ""
    message = pod.get("status", {}).get("message") or ""
    return f"pod {phase}" + (f": {reason}" if reason else "") + (f": {message[:300]}" if message else "")


def pod_readiness(pod: Mapping[str, Any] | None) -> tuple[str, str]:
    """("ready", ip) | ("pending", what it waits for) | ("failed", why) | ("gone", why)."""
    if pod is None:
        return "gone", "pod was deleted"
    meta = pod.get("metadata", {})
    if meta.get("deletionTimestamp"):
        return "gone", "pod is being deleted"
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if phase in ("Succeeded", "Failed"):
        return "failed", _describe_terminated(pod)
    cs = _container_status(pod)
    if cs:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") in FATAL_WAITING:
            msg = (waiting.get("message") or "").strip()
            return "failed", f"container {waiting['reason']}" + (f": {msg[:300]}" if msg else "")
        if (cs.get("state") or {}).get("terminated"):
            return "failed", _describe_terminated(pod)
    ready = _condition(pod, "Ready")
    ip = status.get("podIP")
    if phase == "Running" and ready is not None and ready.get("status") == "True" and ip:
        return "ready", ip
    sched = _condition(pod, "PodScheduled")
    if sched is not None and sched.get("status") == "False":
        return "pending", f"not scheduled: {sched.get('reason', '')} {sched.get('message', '')}".strip()
    if cs and (cs.get("state") or {}).get("waiting"):
        w = cs["state"]["waiting"]
        return "pending", f"container waiting: {w.get('reason', '')} {w.get('message', '')}".strip()
    return "pending", f"phase {phase}" + (", no pod IP yet" if not ip else ", not Ready yet")

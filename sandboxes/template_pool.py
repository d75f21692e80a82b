"""One template's sandboxes as a `Pool` keeps them (`TemplatePool`): its warm set, the claims
waiting, the sandboxes claimed and attached, and the counters `Pool.stats` reports; for a pool
derived from state (`derived_pools.py`), also what it is made of. Only touched from the event
loop."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import Any

from .backends import Backend
from .sandbox import Sandbox
from .templates import Template

__all__ = ["CLAIM_WAIT_BUCKETS", "Histogram", "TemplatePool"]

CLAIM_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Histogram:
    """Cumulative-bucket histogram (Prometheus style) of claim waits in seconds."""

    def __init__(self, buckets: tuple[float, ...] = CLAIM_WAIT_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, v: float) -> None:
        self.sum += v
        self.count += 1
        for i, le in enumerate(self.buckets):
            if v <= le:
                self.counts[i] += 1
        self.counts[-1] += 1

    def snapshot(self) -> dict[str, Any]:
        les = [*map(str, self.buckets), "+Inf"]
        return {"buckets": dict(zip(les, self.counts)), "sum": self.sum, "count": self.count}


@dataclass(eq=False)
class TemplatePool:
    """State of one template's sandboxes. Only touched from the event loop."""

    template: Template
    backend: Backend
    warm_target: int
    warm: collections.deque[Sandbox] = field(default_factory=collections.deque)
    # Claims waiting for a sandbox, oldest first; each is removed once answered or given up, so
    # that counting them costs nothing per create in a burst of thousands.
    waiters: collections.deque[asyncio.Future[Sandbox]] = field(default_factory=collections.deque)
    claimed: dict[str, Sandbox] = field(default_factory=dict)
    # Claimed through another replica of a cluster, served here too (`Pool.attach`): renewed
    # while here, destroyed when released, never counted in the pool's size.
    attached: dict[str, Sandbox] = field(default_factory=dict)
    creating: int = 0
    destroying: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    consecutive_failures: int = 0
    backoff_until: float = 0.0
    last_error: BaseException | None = None
    created_total: int = 0
    destroyed_total: int = 0
    create_failures_total: int = 0
    lost_total: int = 0
    claims_total: int = 0
    claim_timeouts_total: int = 0
    renewals_total: int = 0
    renew_failures_total: int = 0
    claim_wait: Histogram = field(default_factory=Histogram)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # A checkpoint's or a volume's sandboxes (`derived_pools.py`): the template they are made
    # of, the layers, the volumes (volume id, path, read-only) and the layered volumes (path,
    # read-only, layer digests); its claims' last time and the timer that cools it.
    base: str = ""
    layers: tuple[str, ...] = ()
    volumes: tuple[tuple[str, str, bool], ...] = ()
    layered: tuple[tuple[str, bool, tuple[str, ...]], ...] = ()
    last_claim: float = 0.0
    linger: asyncio.TimerHandle | None = None
    destroy_tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def name(self) -> str:
        return self.template.name

    @property
    def derived(self) -> bool:
        """Whether it serves sandboxes derived from state (a checkpoint's, with volumes)."""
        return bool(self.base)

    def live_waiters(self) -> int:
        return len(self.waiters)

    def size(self) -> int:
        return len(self.warm) + len(self.claimed) + self.creating + self.destroying

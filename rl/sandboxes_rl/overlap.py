"""Overlap: provision a rollout's sandbox while the model is still thinking.

A rollout starts claiming its sandbox the moment it begins -- `SandboxLease.start()` creates an
asyncio task, it does not await -- and waits for it only where it is needed: at the first tool call,
or at scoring when the model called no tool. With a first inference turn longer than provisioning the
sandbox is ready before anyone asks for it and the rollout never waits.

```python
lease = SandboxLease(pool).start()          # a task: returns at once
reply = await llm.chat(messages)            # first inference turn; provisioning runs meanwhile
sb = await lease.get()                      # first tool call: only the wait that was not hidden
r = await sb.exec(["python3", "-c", code])
...
await lease.release()
lease.ready_wait_s, lease.provision_s       # per-rollout metrics
```

Works with an embedded `sandboxes.Pool` (a claim) and with a remote `sandboxes.AsyncSandboxClient`
(a create). `ready_wait_s` is the time spent in the first `get()` before the sandbox was ready (0
when it was ready already); `provision_s` is the time from `start()` to ready.

Provisioning failures (`PoolExhausted`, `LaunchError`, `SandboxLost`, ...) are raised from `get()` as
the `sandboxes.errors` exception they are: they are infrastructure failures, never a program's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

from sandboxes import InvalidRequest, Pool, SandboxBase, SandboxError, SandboxLost
from sandboxes.errors import NotFound

__all__ = [
    "ClientProvider",
    "OverlapSummary",
    "PoolProvider",
    "SandboxLease",
    "SandboxProvider",
    "as_provider",
    "summarize",
]

log = logging.getLogger(__name__)

# TTL of sandboxes created through a remote client: a rollout that dies without releasing its
# sandbox does not hold it for longer than this.
DEFAULT_REMOTE_TTL_S = 3600.0


@runtime_checkable
class SandboxProvider(Protocol):
    """Where a lease gets its sandbox from."""

    #: True when cancelling an `acquire` in flight cannot leave a sandbox behind.
    cancel_safe: bool

    async def acquire(
        self,
        *,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> SandboxBase: ...


class PoolProvider:
    """Claims from an embedded `sandboxes.Pool` (a cancelled claim hands its sandbox back)."""

    cancel_safe = True

    def __init__(self, pool: Pool, template: str | None = None) -> None:
        self.pool = pool
        self.template = template

    async def acquire(self, *, env=None, files=None, labels=None, timeout=None) -> SandboxBase:
        return await self.pool.claim(self.template, env=env, files=files, labels=labels, timeout=timeout)

    def __repr__(self) -> str:
        return f"PoolProvider({self.pool!r}, template={self.template!r})"


class ClientProvider:
    """Creates sandboxes through a remote `sandboxes.AsyncSandboxClient`.

    A create that was cancelled may still have claimed a sandbox on the server (the claim outlives
    the call, so that a retry gets the same sandbox); a lease therefore lets it finish and deletes
    the sandbox instead of cancelling. `ttl_s` bounds how long a forgotten sandbox lives.
    """

    cancel_safe = False

    def __init__(self, client: Any, template: str = "default", ttl_s: float | None = DEFAULT_REMOTE_TTL_S):
        self.client = client
        self.template = template or "default"
        self.ttl_s = ttl_s

    async def acquire(self, *, env=None, files=None, labels=None, timeout=None) -> SandboxBase:
        return await self.client.create(
            self.template, labels=labels, env=env, files=files, ttl_s=self.ttl_s, timeout=timeout
        )

    def __repr__(self) -> str:
        return f"ClientProvider({getattr(self.client, 'address', self.client)!r}, template={self.template!r})"


def as_provider(source: Any, template: str | None = None) -> SandboxProvider:
    """A provider from a `Pool`, an `AsyncSandboxClient` or anything with `acquire()`."""
    if isinstance(source, (PoolProvider, ClientProvider)):
        return source
    if isinstance(source, Pool):
        return PoolProvider(source, template)
    from sandboxes.client import AsyncSandboxClient

    if isinstance(source, AsyncSandboxClient):
        return ClientProvider(source, template or "default")
    if isinstance(source, SandboxProvider):
        return source
    raise InvalidRequest(
        f"cannot get sandboxes from {type(source).__name__}: give a sandboxes.Pool, a "
        "sandboxes.AsyncSandboxClient or an object with async acquire()"
    )


class SandboxLease:
    """One rollout's sandbox, provisioned in the background from `start()` on.

    Not thread-safe: use it from the event loop it was started on. `release()` is idempotent and
    safe at any point (before start, while provisioning, after a failure).
    """

    def __init__(
        self,
        source: Any,
        *,
        template: str | None = None,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.provider = as_provider(source, template)
        self._kwargs = {"env": env, "files": files, "labels": labels, "timeout": timeout}
        self._clock = clock
        self._task: asyncio.Task[SandboxBase] | None = None
        self._t_start: float | None = None
        self._t_ready: float | None = None
        self._t_first_get: float | None = None
        self._ready_wait_s: float | None = None
        self._released = False
        self._sandbox: SandboxBase | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Self:
        """Begin provisioning (an asyncio task); returns at once. Idempotent."""
        if self._released:
            raise SandboxLost("this sandbox lease was released")
        if self._task is None:
            self._t_start = self._clock()
            self._task = asyncio.get_running_loop().create_task(self._provision(), name="sandbox-lease")
            # A failure nobody awaited (the rollout ended first) is not an unhandled task error.
            self._task.add_done_callback(_consume_exception)
        return self

    async def _provision(self) -> SandboxBase:
        sb = await self.provider.acquire(**self._kwargs)
        self._t_ready = self._clock()
        self._sandbox = sb
        return sb

    async def get(self) -> SandboxBase:
        """The sandbox, waiting for it if it is not ready yet (starts provisioning if needed).

        The first call records `ready_wait_s`. Raises the provisioning failure (a
        `sandboxes.SandboxError`) if there was one.
        """
        if self._released:
            raise SandboxLost("this sandbox lease was released")
        if self._task is None:
            self.start()
        task = self._task
        assert task is not None
        first = self._t_first_get is None
        if first:
            self._t_first_get = self._clock()
        if task.done():
            if first:
                self._ready_wait_s = 0.0
            return task.result()
        t0 = self._clock()
        try:
            return await asyncio.shield(task)
        finally:
            if first:
                end = self._t_ready if (task.done() and self._t_ready is not None) else self._clock()
                self._ready_wait_s = max(0.0, end - t0)

    async def release(self) -> None:
        """Give the sandbox back (destroyed by its pool / deleted on the server). Idempotent.

        Still provisioning: a pool claim is cancelled; a remote create is awaited and its sandbox
        deleted (see `ClientProvider`). Errors while releasing are logged, not raised: they cannot
        change a result that was already computed.
        """
        if self._released:
            return
        self._released = True
        task = self._task
        if task is None:
            return
        if not task.done():
            if self.provider.cancel_safe:
                task.cancel()
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                # We were cancelled while provisioning finishes: close whatever it yields later.
                task.add_done_callback(_close_when_done)
                raise
        if task.cancelled() or task.exception() is not None:
            return  # nothing was provisioned, nothing to give back
        await _close_quietly(task.result())

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.shield(self.release())

    # -- metrics -----------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._task is not None

    @property
    def ready(self) -> bool:
        """True once the sandbox is provisioned (and provisioning did not fail)."""
        return self._t_ready is not None

    @property
    def sandbox(self) -> SandboxBase | None:
        """The sandbox if it is ready, else None (never waits)."""
        return self._sandbox

    @property
    def provision_s(self) -> float | None:
        """Seconds from `start()` to ready (None while provisioning or after a failure)."""
        if self._t_start is None or self._t_ready is None:
            return None
        return self._t_ready - self._t_start

    @property
    def ready_wait_s(self) -> float:
        """Seconds the first `get()` waited for the sandbox: provisioning that was not hidden."""
        return self._ready_wait_s or 0.0

    @property
    def head_start_s(self) -> float | None:
        """Seconds between `start()` and the first `get()`: the time provisioning had to hide in."""
        if self._t_start is None or self._t_first_get is None:
            return None
        return self._t_first_get - self._t_start

    def metrics(self) -> dict[str, float]:
        """`sandbox_ready_wait_s` and `sandbox_provision_s` (NaN when not provisioned)."""
        p = self.provision_s
        return {
            "sandbox_ready_wait_s": self.ready_wait_s,
            "sandbox_provision_s": float("nan") if p is None else p,
        }

    def __repr__(self) -> str:
        state = (
            "released"
            if self._released
            else "ready"
            if self.ready
            else "provisioning"
            if self.started
            else "new"
        )
        return f"<SandboxLease {state} via {self.provider!r}>"


def _consume_exception(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()


_closing: set[asyncio.Task] = set()


async def _close_quietly(sb: SandboxBase) -> None:
    try:
        await sb.close()
    except NotFound:
        pass
    except SandboxError as e:
        log.warning("releasing sandbox %s failed: %s", sb.id, e)


def _close_when_done(task: asyncio.Task) -> None:
    if task.cancelled() or task.exception() is not None:
        return
    closer = task.get_loop().create_task(_close_quietly(task.result()))
    _closing.add(closer)
    closer.add_done_callback(_closing.discard)


@dataclass(frozen=True)
class OverlapSummary:
    """How much provisioning the rollouts hid behind their first inference turn."""

    rollouts: int
    mean_provision_s: float
    mean_ready_wait_s: float
    max_ready_wait_s: float

    @property
    def hidden_fraction(self) -> float:
        """1 - mean ready wait / mean provisioning time (1.0: fully hidden)."""
        if self.mean_provision_s <= 0:
            return 1.0
        return max(0.0, 1.0 - self.mean_ready_wait_s / self.mean_provision_s)

    def as_dict(self) -> dict[str, float]:
        return {
            "rollouts": self.rollouts,
            "mean_provision_s": self.mean_provision_s,
            "mean_ready_wait_s": self.mean_ready_wait_s,
            "max_ready_wait_s": self.max_ready_wait_s,
            "hidden_fraction": self.hidden_fraction,
        }


def summarize(leases: Iterable[SandboxLease]) -> OverlapSummary:
    """Aggregate the metrics of provisioned leases."""
    done = [lease for lease in leases if lease.provision_s is not None]
    if not done:
        return OverlapSummary(0, 0.0, 0.0, 0.0)
    waits = [lease.ready_wait_s for lease in done]
    return OverlapSummary(
        rollouts=len(done),
        mean_provision_s=statistics.fmean(lease.provision_s or 0.0 for lease in done),
        mean_ready_wait_s=statistics.fmean(waits),
        max_ready_wait_s=max(waits),
    )


@contextlib.asynccontextmanager
async def leased(source: Any, **kwargs: Any):
    """`async with leased(pool) as lease:` -- start on entry, release on exit."""
    lease = SandboxLease(source, **kwargs).start()
    try:
        yield lease
    finally:
        await asyncio.shield(lease.release())

"""`Pool`: warm sandboxes per template, claimed instantly, replenished ahead of demand.

Per template, one replenish task wakes on an `asyncio.Event` (set by claims, finished creates,
releases) and starts creates up to the demand (`warm` target + waiting claims) within the create
concurrency and the pool's `max_size`. Waiting claims are served strictly first come, first served.
A renew task per template extends every live sandbox's lease each `lease_ttl_s / 3`; a warm
sandbox whose renewal finds it lost is dropped and replaced. Failed creates are counted, logged
and retried with exponential backoff; they never stop the pool.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from . import _bridge
from .backends import Backend, SandboxHandle, get_backend
from .checkpoints import DEFAULT_TTL_S, Checkpoint, CheckpointStore
from .egress import EgressPolicy
from .errors import (
    Cancelled,
    InvalidRequest,
    LaunchError,
    NotFound,
    PoolExhausted,
    SandboxError,
    SandboxLost,
    SandboxTimeout,
)
from .grading import Grading, grade_on_pool
from .judging import TestReport
from .sandbox import Data, Sandbox
from .templates import Template, validate_env
from .types import Limits
from .volumes import DEFAULT_SIZE_BYTES as DEFAULT_VOLUME_BYTES
from .volumes import Volume, VolumeStore

__all__ = ["Pool"]

log = logging.getLogger(__name__)

# After this many creates in a row failed, waiting claims get the launch error instead of waiting on.
FAIL_FAST_AFTER = 3
MAX_VOLUMES = 16  # volumes of one sandbox
PAUSED_LEASE_S = 7 * 24 * 3600.0  # a paused agent's lease: the longest the agent grants
BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 10.0
# A checkpoint's (or a built template's) sandboxes are served warm, one ahead, while claims of it
# keep coming: at most this long after the last one (`Pool._linger`).
LINGER_S = 60.0
CLAIM_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _Histogram:
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
class _TemplatePool:
    """State of one template's sandboxes. Only touched from the event loop."""

    template: Template
    backend: Backend
    warm_target: int
    warm: collections.deque[Sandbox] = field(default_factory=collections.deque)
    waiters: collections.deque[asyncio.Future[Sandbox]] = field(default_factory=collections.deque)
    claimed: dict[str, Sandbox] = field(default_factory=dict)
    # Claimed through another replica of a cluster, served here too (`attach`): renewed while
    # here, destroyed when released, never counted in the pool's size.
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
    claim_wait: _Histogram = field(default_factory=_Histogram)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # A checkpoint's or a volume's sandboxes (`Pool._layered`): the template they are made of,
    # the layers, the volumes (volume id, path, read-only) and the layered volumes (path,
    # read-only, layer digests).
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

    def live_waiters(self) -> int:
        return sum(1 for f in self.waiters if not f.done())

    def size(self) -> int:
        return len(self.warm) + len(self.claimed) + self.creating + self.destroying


class Pool:
    """Warm pools of sandboxes, one per template, driven through a backend ("local" by default).

    ```
    async with Pool(warm=8) as pool:
        async with pool.sandbox(env={"K": "V"}, files={"main.py": src}) as sb:
            r = await sb.exec(["python3", "main.py"], timeout=5)
    ```

    `template_kwargs` build the default template (see `Template`); or pass `template=` and/or
    `templates={name: Template}`. `warm` is the ready-sandbox target of templates that set none.
    `max_size` caps the live sandboxes of the whole pool (None: no cap). `claim_timeout` is how
    long a claim waits for a sandbox before `PoolExhausted`. `backend` is a name or a `Backend`.
    """

    def __init__(
        self,
        backend: str | Backend = "local",
        warm: int = 8,
        template: Template | None = None,
        templates: Mapping[str, Template] | None = None,
        max_size: int | None = None,
        claim_timeout: float = 30.0,
        *,
        create_concurrency: int | None = None,
        renew_concurrency: int = 64,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        volume_dir: str | os.PathLike[str] | None = None,
        **template_kwargs: Any,
    ) -> None:
        if isinstance(warm, bool) or not isinstance(warm, int) or warm < 0:
            raise InvalidRequest(f"warm must be an int >= 0, got {warm!r}")
        if max_size is not None and (not isinstance(max_size, int) or max_size < 1):
            raise InvalidRequest(f"max_size must be an int >= 1 or None, got {max_size!r}")
        if not isinstance(claim_timeout, (int, float)) or claim_timeout < 0:
            raise InvalidRequest(f"claim_timeout must be >= 0, got {claim_timeout!r}")
        self.id = uuid.uuid4().hex[:12]
        self.max_size = max_size
        self.claim_timeout = float(claim_timeout)
        self.create_concurrency = create_concurrency or min(8, 2 * (os.cpu_count() or 1))
        self._create_concurrency_given = create_concurrency is not None
        self._renew_sem_size = renew_concurrency
        self._backends: dict[str, Backend] = {}
        if isinstance(backend, str):
            backend_name = backend
        else:
            backend_name = backend.name
            self._backends[backend_name] = backend

        tmpls: dict[str, Template] = dict(templates or {})
        for key, t in tmpls.items():
            if key != t.name:
                raise InvalidRequest(f"templates[{key!r}] is named {t.name!r}")
        if template is not None and template_kwargs:
            raise InvalidRequest("pass either template= or template fields, not both")
        if template_kwargs:
            template = Template(**{"backend": backend_name, **template_kwargs})
        if template is None and not tmpls:
            template = Template(backend=backend_name)
        if template is not None:
            tmpls[template.name] = template
            self.default_template = template.name
        else:
            self.default_template = "default" if "default" in tmpls else next(iter(tmpls))
        self._templates = tmpls
        self._default_warm = warm

        self._tps: dict[str, _TemplatePool] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._pause_locks: dict[str, asyncio.Lock] = {}  # sandbox id -> its pause / resume
        self._create_tasks: set[asyncio.Task[None]] = set()
        self._destroy_tasks: set[asyncio.Task[None]] = set()
        self._renew_sem: asyncio.Semaphore | None = None
        self._started = False
        self._closing = False
        self._start_lock: asyncio.Lock | None = None
        self._close_task: asyncio.Task[None] | None = None
        self.checkpoints = CheckpointStore(None if checkpoint_dir is None else Path(checkpoint_dir))
        self.checkpoints.on_drop.append(self._checkpoint_dropped)
        self.volumes = VolumeStore(None if volume_dir is None else Path(volume_dir))

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> Self:
        """Reap leftovers of dead pools, then fill the warm sets in the background."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._closing:
                raise Cancelled("pool is closed")
            if self._started:
                return self
            try:
                for t in self._templates.values():
                    if t.backend not in self._backends:
                        self._backends[t.backend] = get_backend(t.backend, pool_id=self.id)
                for b in self._backends.values():
                    if not self._create_concurrency_given and b.create_concurrency > 0:
                        self.create_concurrency = max(self.create_concurrency, b.create_concurrency)
                    b.set_lost_listener(self._backend_lost)
                    reaped = await b.reap_orphans()
                    if reaped:
                        log.info("backend %s reaped %d orphaned sandboxes", b.name, reaped)
            except BaseException:
                for b in self._backends.values():
                    with contextlib.suppress(Exception):
                        await b.close()
                raise
            self._renew_sem = asyncio.Semaphore(self._renew_sem_size)
            for t in self._templates.values():
                self._serve_template(t)
            self._started = True
            return self

    def _serve_template(self, t: Template) -> _TemplatePool:
        """Start keeping `t`'s sandboxes (its warm set, renewals) on a backend already open."""
        warm = self._default_warm if t.warm is None else t.warm
        tp = _TemplatePool(template=t, backend=self._backends[t.backend], warm_target=warm)
        self._tps[t.name] = tp
        tp.tasks.append(asyncio.create_task(self._replenish(tp), name=f"replenish-{t.name}"))
        if t.lease_ttl_s > 0:
            tp.tasks.append(asyncio.create_task(self._renew(tp), name=f"renew-{t.name}"))
        self._tasks += tp.tasks
        return tp

    async def add_template(self, template: Template) -> None:
        """Serve one more template from now on (a started pool; its backend must be one the pool
        already uses). Adding a template of a name the pool has is a no-op when it is the same
        template, else `InvalidRequest`."""
        if not self._started:
            await self.start()
        self.serve_template(template)

    def serve_template(self, template: Template) -> None:
        """`add_template` on a started pool, at once (no await)."""
        if self._closing:
            raise Cancelled("pool is closing")
        known = self._templates.get(template.name)
        if known is not None:
            if known != template:
                raise InvalidRequest(f"the pool has another template named {template.name!r}")
            return
        if template.backend not in self._backends:
            raise InvalidRequest(
                f"backend {template.backend!r} is not one of this pool's ({sorted(self._backends)})"
            )
        self._templates[template.name] = template
        self._serve_template(template)

    async def close(self) -> None:
        """Destroy every sandbox (warm and claimed), stop background tasks, close the backends."""
        if self._close_task is None:
            self._closing = True
            self._close_task = asyncio.ensure_future(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Creates in flight finish (bounded by create_timeout_s) and destroy what they made.
        await asyncio.gather(*list(self._create_tasks), return_exceptions=True)
        doomed: list[tuple[_TemplatePool, Sandbox]] = []
        for tp in self._tps.values():
            while tp.waiters:
                fut = tp.waiters.popleft()
                if not fut.done():
                    fut.set_exception(Cancelled("pool is closing"))
            doomed += [(tp, sb) for sb in tp.warm]
            doomed += [(tp, sb) for sb in tp.claimed.values()]
            for sb in list(tp.attached.values()):
                self.detach(sb)
            tp.warm.clear()
            tp.claimed.clear()
        for tp, sb in doomed:
            self._destroy_soon(tp, sb)
        while self._destroy_tasks:
            await asyncio.gather(*list(self._destroy_tasks), return_exceptions=True)
        for tp in [tp for tp in self._tps.values() if tp.base]:  # checkpoints' and volumes' pools
            del self._tps[tp.name]
            self._templates.pop(tp.name, None)
            self._release_layers(tp)
            await asyncio.to_thread(self._unmount, tp.volumes)
        await asyncio.to_thread(self.volumes.close)  # the mounts kept for a next sandbox
        for b in self._backends.values():
            try:
                await b.close()
            except Exception:
                log.exception("closing backend %s failed", b.name)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- claims ----------------------------------------------------------------------------------

    async def claim(
        self,
        template: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, Data] | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float | None = None,
        checkpoint: str | Checkpoint | None = None,
        owner: str | None = None,
        volumes: Mapping[str, str | tuple[str, bool]] | None = None,
        warm_ahead: bool = True,
        layered_volumes: Sequence[tuple[str, bool, Sequence[str]]] | None = None,
    ) -> Sandbox:
        """A ready sandbox of `template` (default: the pool's default template).

        Served from the warm set at once, else waits (first come, first served) up to `timeout`
        (default `claim_timeout`) and raises `PoolExhausted`. `env` is merged into every exec of
        this sandbox client-side; `files` are written with one call. Release with `sb.close()`.

        With `checkpoint` (a `Checkpoint` or the id of one of `owner`'s, None: anyone's), the
        sandbox is made from it (its template, with the checkpoint's files). The first is created
        for the claim; with `warm_ahead` (and a template that keeps any warm), one more is then
        kept ready for the next claim of it, while they keep coming (`LINGER_S`).

        With `volumes` (a path in the sandbox -> the id or name of one of `owner`'s volumes, or
        `(volume, read_only)`), each volume is mounted at its path: made for the claim too.

        With `layered_volumes` ((path in the sandbox, read-only, layer digests of this pool's
        checkpoint store, bottom first)), each is a directory of the sandbox's own made of those
        layers (`Template.layered_volumes`), its writes a new layer by `capture_volume`.
        """
        if not self._started:
            await self.start()
        if self._closing:
            raise Cancelled("pool is closing")
        if checkpoint is None and not volumes and not layered_volumes:
            return await self._claim(self._tp(template), env, files, labels, timeout)
        layered = tuple((path, ro, tuple(digests)) for path, ro, digests in layered_volumes or ())
        mounts = await asyncio.to_thread(self._resolve_volumes, volumes or {}, owner)
        layers: tuple[str, ...] = ()
        if checkpoint is None:
            base = self._tp(template).name
        else:
            if isinstance(checkpoint, Checkpoint):
                checkpoint = self.checkpoints.get(checkpoint.id, checkpoint.owner if owner is None else owner)
            else:
                checkpoint = self.checkpoints.get(checkpoint, owner)
            base, layers = checkpoint.template, checkpoint.layers
        tp = await self._derived(base, layers, mounts, layered)
        if checkpoint is not None and not mounts and not layered and warm_ahead:
            self._linger(tp)
        try:
            return await self._claim(tp, env, files, labels, timeout)
        finally:
            self._retire_if_idle(tp)

    async def _claim(
        self,
        tp: _TemplatePool,
        env: Mapping[str, str] | None,
        files: Mapping[str, Data] | None,
        labels: Mapping[str, str] | None,
        timeout: float | None,
    ) -> Sandbox:
        if env:
            validate_env(env)
        wait = self.claim_timeout if timeout is None else timeout
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or wait < 0:
            raise InvalidRequest(f"claim timeout must be >= 0, got {timeout!r}")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while True:
            sb = await self._take(tp, t0 + wait)
            try:
                if env:
                    sb.set_env(env)
                if labels:
                    sb.labels.update(labels)
                if files:
                    await sb.write_files(files)
            except SandboxLost:
                tp.lost_total += 1
                tp.claimed.pop(sb.id, None)
                self._destroy_soon(tp, sb)
                if loop.time() < t0 + wait:
                    continue
                raise
            except BaseException:
                await self.release(sb)
                raise
            break
        tp.claims_total += 1
        tp.claim_wait.observe(loop.time() - t0)
        return sb

    async def _take(self, tp: _TemplatePool, deadline: float) -> Sandbox:
        """The next sandbox of `tp`, in claim order; registered as claimed."""
        while tp.warm and not tp.live_waiters():
            sb = tp.warm.popleft()
            if not tp.backend.alive(sb.handle):
                tp.lost_total += 1
                self._destroy_soon(tp, sb)
                continue
            tp.claimed[sb.id] = sb
            tp.wake.set()
            return sb
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Sandbox] = loop.create_future()
        tp.waiters.append(fut)
        tp.wake.set()
        try:
            done, _ = await asyncio.wait({fut}, timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._unclaim(tp, fut.result())
            fut.cancel()
            raise
        if not done:
            fut.cancel()
            with contextlib.suppress(ValueError):
                tp.waiters.remove(fut)
            tp.claim_timeouts_total += 1
            raise PoolExhausted(
                f"no {tp.name!r} sandbox became free in time (warm={len(tp.warm)} "
                f"claimed={len(tp.claimed)} creating={tp.creating} max_size={self.max_size})",
                detail=repr(tp.last_error) if tp.last_error else "",
            )
        return fut.result()

    def _unclaim(self, tp: _TemplatePool, sb: Sandbox) -> None:
        """A sandbox handed to a claim that went away: back to the front of the line."""
        tp.claimed.pop(sb.id, None)
        self._offer(tp, sb, front=True)

    def _offer(self, tp: _TemplatePool, sb: Sandbox, front: bool = False) -> None:
        """Give a ready sandbox to the oldest waiting claim, else to the warm set."""
        while tp.waiters:
            fut = tp.waiters.popleft()
            if not fut.done():
                tp.claimed[sb.id] = sb
                fut.set_result(sb)
                return
        if tp.base and len(tp.warm) >= tp.warm_target:  # a checkpoint's, past its warm set
            self._destroy_soon(tp, sb)
        elif front:
            tp.warm.appendleft(sb)
        else:
            tp.warm.append(sb)

    async def release(self, sb: Sandbox, reuse: bool = False) -> None:
        """Give a claimed sandbox back. It is destroyed and the pool refills in the background.

        `reuse=True` is accepted for the server's API but currently also destroys: a used
        sandbox may hold leftover processes and files, and a fresh one costs only a launch.
        """
        tp = self._tps.get(sb.template)
        self._pause_locks.pop(sb.id, None)
        if tp is None or (tp.claimed.pop(sb.id, None) or tp.attached.pop(sb.id, None)) is None:
            sb._mark_closed()
            return
        await asyncio.shield(self._destroy_soon(tp, sb))
        if tp.base and not tp.warm_target and tp.destroy_tasks:
            # A checkpoint no longer kept warm: its layers are let go once this returns.
            await asyncio.shield(asyncio.gather(*tp.destroy_tasks, return_exceptions=True))

    def attach(
        self,
        template: str,
        handle: SandboxHandle,
        *,
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Sandbox:
        """A claimed sandbox this pool did not hand out (claimed through another replica of a
        cluster), served by this pool from now on: its lease renewed while it is here, destroyed
        when released. Attaching one already here returns it."""
        tp = self._tp(template)
        sb = tp.claimed.get(handle.id) or tp.attached.get(handle.id)
        if sb is not None:
            return sb
        sb = self._make_sandbox(tp, handle)
        if labels:
            sb.labels.update(labels)
        if env:
            sb.set_env(env)
        tp.attached[sb.id] = sb
        return sb

    def detach(self, sb: Sandbox) -> None:
        """Stop serving a claimed sandbox without destroying it (another replica keeps it)."""
        tp = self._tps.get(sb.template)
        if tp is None or (tp.claimed.pop(sb.id, None) or tp.attached.pop(sb.id, None)) is None:
            return
        sb._mark_closed()
        tp.backend.forget(sb.handle)

    @contextlib.asynccontextmanager
    async def sandbox(
        self,
        template: str | None = None,
        *,
        env: Mapping[str, str] | None = None,
        files: Mapping[str, Data] | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float | None = None,
        checkpoint: str | Checkpoint | None = None,
        owner: str | None = None,
        volumes: Mapping[str, str | tuple[str, bool]] | None = None,
        layered_volumes: Sequence[tuple[str, bool, Sequence[str]]] | None = None,
    ) -> AsyncIterator[Sandbox]:
        """`async with pool.sandbox(...) as sb:` claims a sandbox and destroys it afterwards."""
        sb = await self.claim(
            template,
            env=env,
            files=files,
            labels=labels,
            timeout=timeout,
            checkpoint=checkpoint,
            owner=owner,
            volumes=volumes,
            layered_volumes=layered_volumes,
        )
        try:
            yield sb
        finally:
            await sb.close()

    # --- checkpoints -----------------------------------------------------------------------------

    def _chain(self, sb: Sandbox) -> tuple[_TemplatePool, str, tuple[str, ...]]:
        """`sb`'s template pool, the template it is made of and the layers beneath it."""
        tp = self._tps.get(sb.template)
        if tp is None or sb.closed:
            raise NotFound(f"sandbox {sb.id} is not one of this pool's")
        if not tp.backend.checkpoints:
            raise InvalidRequest(
                f"the {tp.backend.name} backend cannot checkpoint a sandbox ({tp.backend.no_checkpoints_why})"
            )
        return tp, tp.base or tp.name, tp.layers

    async def checkpoint(
        self,
        sb: Sandbox,
        *,
        owner: str = "",
        name: str = "",
        ttl_s: float | None = DEFAULT_TTL_S,
        labels: dict[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> Checkpoint:
        """`sb`'s file system now, as a checkpoint of `owner`'s (kept `ttl_s`, None: until
        deleted; `labels` kept with it). `sb` keeps running; a sandbox made from the checkpoint sees exactly this state.
        Past `max_bytes` of changes (or the store's own bounds) it raises `TooLarge`."""
        _, base, layers = self._chain(sb)
        digest, size, _ = await sb._call(self.checkpoints.capture, sb._client, max_bytes=max_bytes)
        return self.checkpoints.add(
            template=base,
            layers=(*layers, digest),
            owner=owner,
            name=name,
            source=sb.id,
            size=size,
            ttl_s=ttl_s,
            labels=labels,
        )

    async def capture_volume(self, sb: Sandbox, path: str, max_bytes: int | None = None) -> tuple[str, int]:
        """The writes of `sb` into its layered volume at `path` (`claim(layered_volumes=...)`) as a
        layer of this pool's checkpoint store: `(digest, bytes)`. The volume's layers plus this
        one are the volume as `sb` sees it now; `sb` keeps running, unaffected."""
        tp, _, _ = self._chain(sb)
        if not any(p == path for p, _, _ in tp.layered):
            raise NotFound(f"sandbox {sb.id} has no layered volume at {path!r}")
        digest, size, _ = await sb._call(
            self.checkpoints.capture, sb._client, volume=path, max_bytes=max_bytes
        )
        return digest, size

    async def fork(
        self,
        sb: Sandbox,
        n: int,
        *,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> list[Sandbox]:
        """`n` new sandboxes of `sb`'s file system now: one checkpoint layer (kept while they
        run) and `n` sandboxes made from it, each with its own writes. All or none: when one
        cannot be made, those made are released and the error raised."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1024:
            raise InvalidRequest(f"fork count must be an int in [1, 1024], got {n!r}")
        _, base, layers = self._chain(sb)
        digest, _, _ = await sb._call(self.checkpoints.capture, sb._client)
        tp = self._layered(base, (*layers, digest))
        try:
            made = await asyncio.gather(
                *(self._claim(tp, env, None, labels, timeout) for _ in range(n)), return_exceptions=True
            )
            failed = [r for r in made if isinstance(r, BaseException)]
            forks = [r for r in made if isinstance(r, Sandbox)]
            if failed:
                await asyncio.gather(*(f.close() for f in forks), return_exceptions=True)
                raise failed[0]
            return forks
        finally:
            self._retire_if_idle(tp)

    async def fence_egress(self, sb: Sandbox, policy: EgressPolicy) -> None:
        """The backend's own fence of `sb`'s egress (kubernetes: its pod's NetworkPolicy) set to
        `policy`, before its agent enforces it (`Sandbox.set_egress_policy`)."""
        tp = self._tps.get(sb.template)
        if tp is not None:
            await tp.backend.set_egress(sb.handle, policy)

    # --- pause and resume ------------------------------------------------------------------------

    async def pause(self, sb: Sandbox) -> bool:
        """Stop every process of `sb` where it runs, its agent included: it uses no CPU and keeps
        its memory, files and connections; its calls are refused (`SandboxPaused`) until
        `resume`. Calls in flight wait. False when it was paused already."""
        tp = self._pausable(sb)
        async with self._pause_lock(sb):
            if sb.paused:
                return False
            # The agent's lease clock runs on while it is frozen: the lease must outlast the
            # pause, or the agent would stop itself the moment it is resumed. The pool's own
            # end still ends it (the backend's watchdog reaps a dead pool's paused sandboxes).
            await sb._renew_lease(PAUSED_LEASE_S)
            await tp.backend.pause(sb.handle)
            sb._paused = True
        return True

    async def resume(self, sb: Sandbox) -> bool:
        """Continue the processes of a paused sandbox; False when it was not paused."""
        tp = self._pausable(sb)
        async with self._pause_lock(sb):
            if not sb.paused:
                return False
            await tp.backend.resume(sb.handle)
            sb._paused = False
            if tp.template.lease_ttl_s > 0:
                await sb._renew_lease(tp.template.lease_ttl_s)
        return True

    def _resolve_volumes(
        self, volumes: Mapping[str, str | tuple[str, bool]], owner: str | None
    ) -> tuple[tuple[str, str, bool], ...]:
        """(volume id, path, read-only) of each asked mount, sorted by path."""
        if not isinstance(volumes, Mapping) or len(volumes) > MAX_VOLUMES:
            raise InvalidRequest(f"volumes must map at most {MAX_VOLUMES} paths to volumes")
        out = []
        for path, ref in volumes.items():
            name, ro = ref if isinstance(ref, tuple) else (ref, False)
            if not isinstance(path, str) or not path.startswith("/") or not isinstance(ro, bool):
                raise InvalidRequest(f"a volume's path must be absolute, got {path!r}")
            out.append((self.volumes.get(name, owner).id, path, ro))
        return tuple(sorted(out, key=lambda m: m[1]))

    async def create_volume(
        self,
        name: str,
        *,
        owner: str = "",
        size_bytes: int = DEFAULT_VOLUME_BYTES,
        inodes: int | None = None,
    ) -> Volume:
        """A new empty volume of `owner`'s (`VolumeStore.create`), mounted with `claim(volumes=...)`.
        A pool whose default template's backend keeps volumes as the cluster's claims
        (kubernetes: a PersistentVolumeClaim each) makes one; else an image on this host."""
        backend = self._volume_backend()
        if backend is None:
            return await asyncio.to_thread(
                self.volumes.create, name, owner=owner, size_bytes=size_bytes, inodes=inodes
            )
        vol = await asyncio.to_thread(
            self.volumes.create,
            name,
            owner=owner,
            size_bytes=size_bytes,
            inodes=inodes,
            claim=backend.volume_claim_prefix,
        )
        try:
            await backend.create_volume_claim(vol)
        except BaseException:
            await asyncio.to_thread(self.volumes.delete, vol.id, owner)
            raise
        return vol

    async def delete_volume(self, ref: str, *, owner: str | None = None) -> Volume:
        """Deletes a volume (deferred while sandboxes mount it: the cluster defers a claim's)."""
        vol = await asyncio.to_thread(self.volumes.delete, ref, owner)
        backend = self._volume_backend()
        if vol.claim and backend is not None:
            await backend.delete_volume_claim(vol)
        return vol

    def _volume_backend(self) -> Backend | None:
        """The backend whose claims hold this pool's volumes (its default template's), if any."""
        t = self._templates.get(self.default_template)
        backend = self._backends.get(t.backend) if t is not None else None
        return backend if backend is not None and backend.volume_claims else None

    def can_pause(self, sb: Sandbox) -> bool:
        """Whether `sb` is one of this pool's, on a backend that pauses (keeps processes)."""
        tp = self._tps.get(sb.template)
        return tp is not None and tp.backend.pauses

    def can_checkpoint(self, sb: Sandbox) -> bool:
        """Whether `sb` is one of this pool's, on a backend that checkpoints."""
        tp = self._tps.get(sb.template)
        return tp is not None and tp.backend.checkpoints

    def _pausable(self, sb: Sandbox) -> _TemplatePool:
        tp = self._tps.get(sb.template)
        if tp is None or sb.closed or (tp.claimed.get(sb.id) or tp.attached.get(sb.id)) is not sb:
            raise NotFound(f"sandbox {sb.id} is not one of this pool's")
        if not tp.backend.pauses:
            raise InvalidRequest(f"the {tp.backend.name} backend cannot pause a sandbox")
        return tp

    def _pause_lock(self, sb: Sandbox) -> asyncio.Lock:
        lock = self._pause_locks.get(sb.id)
        if lock is None:
            lock = self._pause_locks[sb.id] = asyncio.Lock()
        return lock

    @staticmethod
    def _derived_name(
        base: str,
        layers: tuple[str, ...],
        volumes: tuple[tuple[str, str, bool], ...],
        layered: tuple[tuple[str, bool, tuple[str, ...]], ...] = (),
    ) -> str:
        parts = (
            base,
            *layers,
            *(f"{v}:{p}:{int(ro)}" for v, p, ro in volumes),
            *(f"layered:{p}:{int(ro)}:{','.join(ds)}" for p, ro, ds in layered),
        )
        return "cp-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]

    async def _derived(
        self,
        base: str,
        layers: tuple[str, ...],
        volumes: tuple[tuple[str, str, bool], ...],
        layered: tuple[tuple[str, bool, tuple[str, ...]], ...] = (),
    ) -> _TemplatePool:
        """`_layered`, mounting the volumes off the event loop first."""
        name = self._derived_name(base, layers, volumes, layered)
        if name in self._tps:
            return self._tps[name]
        if not volumes:
            return self._layered(base, layers, layered=layered)
        t = self._templates.get(base)
        claims = t is not None and t.backend in self._backends and self._backends[t.backend].volume_claims
        hosts = await asyncio.to_thread(self._mount, volumes, claims)
        if name in self._tps:  # made by another claim meanwhile
            await asyncio.to_thread(self._unmount, volumes)
            return self._tps[name]
        try:
            return self._layered(base, layers, volumes, hosts, layered)
        except BaseException:
            await asyncio.to_thread(self._unmount, volumes)
            raise

    def _mount(self, volumes: tuple[tuple[str, str, bool], ...], claims: bool = False) -> tuple[str, ...]:
        """Each volume's host directory, mounted for one more template pool (all or none); with
        `claims` (a backend whose volumes are the cluster's claims) each one's claim."""
        hosts: list[str] = []
        try:
            for vid, _, _ in volumes:
                claim = self.volumes.get(vid).claim
                if claim and not claims:
                    raise InvalidRequest(
                        f"volume {vid} is a cluster's claim: only kubernetes sandboxes mount it"
                    )
                if claims and not claim:
                    raise InvalidRequest(
                        f"volume {vid} is on this host: kubernetes sandboxes cannot mount it"
                    )
                hosts.append(claim or self.volumes.acquire(vid))
        except BaseException:
            self._unmount(volumes[: len(hosts)])
            raise
        return tuple(hosts)

    def _unmount(self, volumes: tuple[tuple[str, str, bool], ...]) -> None:
        for vid, _, _ in volumes:
            self.volumes.release(vid)

    def _layered(
        self,
        base: str,
        layers: tuple[str, ...],
        volumes: tuple[tuple[str, str, bool], ...] = (),
        hosts: tuple[str, ...] = (),
        layered: tuple[tuple[str, bool, tuple[str, ...]], ...] = (),
    ) -> _TemplatePool:
        """The template pool of sandboxes of template `base` made from `layers`, with `volumes`
        mounted from their `hosts` directories (mounted for it: it unmounts them when retired)
        and `layered` volumes, served while it has sandboxes or claims; its layers are in use
        meanwhile."""
        name = self._derived_name(base, layers, volumes, layered)
        tp = self._tps.get(name)
        if tp is not None:
            return tp
        t = self._templates.get(base)
        if t is None:
            raise NotFound(f"no template {base!r} in this pool")
        backend = self._backends[t.backend]
        if layers and not backend.checkpoints:
            raise InvalidRequest(f"the {t.backend} backend cannot make sandboxes from checkpoints")
        if volumes and not backend.volumes:
            raise InvalidRequest(f"the {t.backend} backend cannot mount volumes")
        if layered and not backend.layered_volumes:
            raise InvalidRequest(
                f"the {t.backend} backend cannot mount versions of volumes ({backend.no_checkpoints_why})"
            )
        paths = self.checkpoints.acquire(layers)
        try:
            layered_dirs = tuple((p, ro, tuple(self.checkpoints.acquire(ds))) for p, ro, ds in layered)
        except BaseException:
            self.checkpoints.release(layers)
            raise
        mounts = tuple((host, path, ro) for host, (_, path, ro) in zip(hosts, volumes, strict=True))
        t = t.replace(name=name, layers=tuple(paths), volumes=mounts, layered_volumes=layered_dirs, warm=0)
        self._templates[name] = t
        tp = self._serve_template(t)
        tp.base, tp.layers, tp.volumes, tp.layered = base, layers, volumes, layered
        return tp

    def _release_layers(self, tp: _TemplatePool) -> None:
        """A retired template pool's layers, its layered volumes' included, are let go."""
        self.checkpoints.release(tp.layers)
        for _, _, digests in tp.layered:
            self.checkpoints.release(digests)

    def _retire_if_idle(self, tp: _TemplatePool) -> None:
        """Stops serving a checkpoint's template pool with no sandbox and no claim left."""
        if not tp.base or tp.size() or tp.live_waiters() or tp.attached or self._tps.get(tp.name) is not tp:
            return
        del self._tps[tp.name]
        self._templates.pop(tp.name, None)
        if tp.linger is not None:
            tp.linger.cancel()
        for task in tp.tasks:
            task.cancel()
            with contextlib.suppress(ValueError):
                self._tasks.remove(task)
        self._release_layers(tp)
        self._unmount(tp.volumes)  # a volume's last user lets it go (`volumes.LINGER_S`)

    def _linger(self, tp: _TemplatePool) -> None:
        """A claim of a checkpoint's sandboxes: one is kept warm ahead (if its template keeps
        any) until `LINGER_S` pass without another claim, so that a template built once and
        used again, or a group of rollouts from one checkpoint, starts as fast as the image's."""
        loop = asyncio.get_running_loop()
        tp.last_claim = loop.time()
        base = self._tps.get(tp.base)
        if tp.linger is None and base is not None and base.warm_target > 0:
            tp.warm_target = 1
            tp.wake.set()
            tp.linger = loop.call_later(LINGER_S, self._linger_check, tp)

    def _linger_check(self, tp: _TemplatePool) -> None:
        tp.linger = None
        if self._closing or self._tps.get(tp.name) is not tp:
            return
        left = tp.last_claim + LINGER_S - asyncio.get_running_loop().time()
        if left > 0:
            tp.linger = asyncio.get_running_loop().call_later(left, self._linger_check, tp)
        else:
            self._cool(tp)

    def _cool(self, tp: _TemplatePool) -> list[asyncio.Task[None]]:
        """No more warm sandboxes of a checkpoint: those ready are destroyed (the tasks), and the
        pool retires once its claimed ones end."""
        if tp.linger is not None:
            tp.linger.cancel()
            tp.linger = None
        tp.warm_target = 0
        done = []
        while tp.warm:
            done.append(self._destroy_soon(tp, tp.warm.popleft()))
        self._retire_if_idle(tp)
        return done

    def _checkpoint_dropped(self, cp: Checkpoint) -> list[asyncio.Task[None]]:
        """A deleted or expired checkpoint's sandboxes are kept warm no longer."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return []  # dropped off the loop (a thread): its warm ones go when their linger ends
        done = []
        for tp in list(self._tps.values()):
            if tp.base and tp.layers == tuple(cp.layers) and tp.warm_target:
                done += self._cool(tp)
        return done

    async def delete_checkpoint(self, checkpoint_id: str, owner: str | None = None) -> Checkpoint:
        """Deletes a checkpoint (`CheckpointStore.delete`); returns once its warm sandboxes are
        gone, so that its layers go now unless sandboxes made from it still run."""
        cp = self.checkpoints.get(checkpoint_id, owner)
        done = self._checkpoint_dropped(cp)
        self.checkpoints.delete(cp.id, owner)
        if done:
            await asyncio.gather(*done, return_exceptions=True)
        return cp

    def grade(
        self,
        gradings: Sequence[Grading],
        *,
        template: str | None = None,
        sandboxes: int | None = None,
        chunk: int | None = None,
        time_limit: float | None = None,
        memory_limit_mb: float | None = None,
        stop_on_first_failure: bool = False,
        compare: str = "whitespace",
        float_tolerance: float | None = None,
        limits: Limits | None = None,
    ) -> AsyncIterator[tuple[int, TestReport]]:
        """Grade a batch of any size across the pool: `(index, TestReport)` as each finishes (see
        `grading`).

        `sandboxes` lanes (default: one per 8 gradings, at most the template's warm count and, on
        the local and docker backends, as many as keep this machine's CPUs busy) each claim a
        sandbox and send it `chunk` gradings a call until none are left; the other
        arguments are those of `Sandbox.run_tests_batch`. Raises `InvalidRequest` before anything
        runs when a grading is invalid.
        """
        tmpl = self._templates.get(template or self.default_template)
        if tmpl is None:
            raise InvalidRequest(f"unknown template {template!r}")
        return grade_on_pool(
            self,
            gradings,
            template=template,
            tmpl=tmpl,
            warm=tmpl.warm if tmpl.warm is not None else self._default_warm,
            sandboxes=sandboxes,
            chunk=chunk,
            time_limit=time_limit,
            memory_limit_mb=memory_limit_mb,
            stop_on_first_failure=stop_on_first_failure,
            compare=compare,
            float_tolerance=float_tolerance,
            limits=limits,
        )

    # --- introspection ---------------------------------------------------------------------------

    @property
    def backends(self) -> list[Backend]:
        """The backends this pool drives (open once the pool started)."""
        return list(self._backends.values())

    @property
    def templates(self) -> dict[str, Template]:
        """The pool's templates by name (not those it serves checkpoints' sandboxes from)."""
        return {name: t for name, t in self._templates.items() if not t.layers}

    def stats(self) -> dict[str, dict[str, Any]]:
        """Sizes and counters per template, for the metrics endpoint."""
        out: dict[str, dict[str, Any]] = {}
        for name, tp in self._tps.items():
            out[name] = {
                "warm": len(tp.warm),
                "warm_target": tp.warm_target,
                "claimed": len(tp.claimed),
                "creating": tp.creating,
                "destroying": tp.destroying,
                "waiting": tp.live_waiters(),
                "created_total": tp.created_total,
                "destroyed_total": tp.destroyed_total,
                "create_failures_total": tp.create_failures_total,
                "lost_total": tp.lost_total,
                "claims_total": tp.claims_total,
                "claim_timeouts_total": tp.claim_timeouts_total,
                "renewals_total": tp.renewals_total,
                "renew_failures_total": tp.renew_failures_total,
                "claim_wait_seconds": tp.claim_wait.snapshot(),
            }
        return out

    # --- background: replenish -------------------------------------------------------------------

    def _tp(self, template: str | None) -> _TemplatePool:
        name = template or self.default_template
        tp = self._tps.get(name)
        if tp is None:
            raise NotFound(f"no template {name!r} in this pool (have {sorted(self._tps)})")
        return tp

    def _total_size(self) -> int:
        return sum(tp.size() for tp in self._tps.values())

    def _should_create(self, tp: _TemplatePool, now: float) -> bool:
        if self._closing or now < tp.backoff_until:
            return False
        demand = tp.warm_target + tp.live_waiters() - len(tp.warm) - tp.creating
        if demand <= 0 or tp.creating >= self.create_concurrency:
            return False
        return self.max_size is None or self._total_size() < self.max_size

    async def _replenish(self, tp: _TemplatePool) -> None:
        """Start creates whenever woken; sleeps on the event (or the backoff) otherwise."""
        loop = asyncio.get_running_loop()
        while not self._closing:
            tp.wake.clear()
            now = loop.time()
            while self._should_create(tp, now):
                tp.creating += 1
                task = asyncio.create_task(self._create_one(tp), name=f"create-{tp.name}")
                self._create_tasks.add(task)
                task.add_done_callback(self._create_tasks.discard)
            delay = None
            if tp.backoff_until > now:
                delay = tp.backoff_until - now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tp.wake.wait(), delay)

    async def _create_one(self, tp: _TemplatePool) -> None:
        """Create one sandbox (the caller counted it in `creating`) and offer it."""
        t = tp.template
        sid = f"sb-{uuid.uuid4().hex[:12]}"
        handle: SandboxHandle | None = None
        try:
            try:
                async with asyncio.timeout(t.create_timeout_s):
                    handle = await tp.backend.create(t, sid)
            except TimeoutError as e:
                if isinstance(e, SandboxError):
                    raise
                raise LaunchError(f"create took over {t.create_timeout_s}s", step="timeout") from e
            sb = self._make_sandbox(tp, handle)
        except asyncio.CancelledError:
            tp.creating -= 1
            raise
        except Exception as e:  # noqa: BLE001 - any backend failure is counted and retried
            tp.creating -= 1
            if handle is not None:
                with contextlib.suppress(Exception):
                    await tp.backend.destroy(handle)
            self._create_failed(tp, e)
            return
        tp.creating -= 1
        tp.created_total += 1
        tp.consecutive_failures = 0
        tp.backoff_until = 0.0
        if self._closing:
            tp.claimed[sb.id] = sb
            await self.release(sb)
            return
        self._offer(tp, sb)
        tp.wake.set()

    def _make_sandbox(self, tp: _TemplatePool, handle: SandboxHandle) -> Sandbox:
        client = _bridge.api().AgentClient(handle.endpoint, handle.token)
        t = tp.template
        sb = Sandbox(
            handle,
            client,
            template=t.name,
            limits=t.limits,
            labels=dict(t.labels),
            on_close=self.release,
        )
        sb._pool = self
        return sb

    def _create_failed(self, tp: _TemplatePool, e: Exception) -> None:
        tp.create_failures_total += 1
        tp.consecutive_failures += 1
        tp.last_error = e
        backoff = min(BACKOFF_MAX_S, BACKOFF_INITIAL_S * 2 ** (tp.consecutive_failures - 1))
        tp.backoff_until = asyncio.get_running_loop().time() + backoff
        log.warning(
            "creating a %r sandbox failed (%d in a row, retry in %.1fs): %s",
            tp.name,
            tp.consecutive_failures,
            backoff,
            e,
        )
        if tp.consecutive_failures >= FAIL_FAST_AFTER:
            err = e if isinstance(e, SandboxError) else LaunchError(str(e), step="create")
            while tp.waiters:
                fut = tp.waiters.popleft()
                if not fut.done():
                    fut.set_exception(err)
        tp.wake.set()

    # --- background: destroy ---------------------------------------------------------------------

    def _destroy_soon(self, tp: _TemplatePool, sb: Sandbox) -> asyncio.Task[None]:
        """Destroy in a task of its own, so a cancelled caller never leaves a sandbox behind."""
        sb._mark_closed()
        tp.destroying += 1
        task = asyncio.ensure_future(self._destroy(tp, sb))
        for tasks in (self._destroy_tasks, tp.destroy_tasks):
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return task

    async def _destroy(self, tp: _TemplatePool, sb: Sandbox) -> None:
        try:
            await tp.backend.destroy(sb.handle)
        except Exception:
            log.exception("destroying sandbox %s failed", sb.id)
        finally:
            tp.destroying -= 1
            tp.destroyed_total += 1
            for other in self._tps.values():  # capacity freed under max_size
                other.wake.set()
            self._retire_if_idle(tp)

    # --- background: leases ----------------------------------------------------------------------

    async def _renew(self, tp: _TemplatePool) -> None:
        """Renew every live sandbox's lease once per `lease_ttl_s / 3`."""
        ttl = tp.template.lease_ttl_s
        period = ttl / 3
        loop = asyncio.get_running_loop()
        next_at = loop.time() + period
        while not self._closing:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            next_at += period
            sandboxes = [*tp.warm, *tp.claimed.values(), *tp.attached.values()]
            await asyncio.gather(*(self._renew_one(tp, sb, ttl, period) for sb in sandboxes))
            if loop.time() > next_at:  # a slow round: do not burst to catch up
                next_at = loop.time() + period

    async def _renew_one(self, tp: _TemplatePool, sb: Sandbox, ttl: float, period: float) -> None:
        assert self._renew_sem is not None
        async with self._renew_sem:
            if sb.closed or sb.paused:  # a paused agent holds a lease of the pause's length
                return
            try:
                async with asyncio.timeout(period):
                    await sb._renew_lease(ttl)
                tp.renewals_total += 1
            except (SandboxError, TimeoutError) as e:
                if sb.closed:
                    return
                tp.renew_failures_total += 1
                if isinstance(e, (SandboxLost, SandboxTimeout, TimeoutError)):
                    self._drop_lost(tp, sb, e)
                else:
                    log.warning("renewing the lease of %s failed: %s", sb.id, e)

    def _backend_lost(self, sandbox_id: str, reason: str) -> None:
        """A backend saw a sandbox go (e.g. its pod was deleted): replace it when warm."""
        for tp in self._tps.values():
            for sb in tp.warm:
                if sb.id == sandbox_id:
                    self._drop_lost(tp, sb, SandboxLost(reason))
                    return
            if sandbox_id in tp.claimed or sandbox_id in tp.attached:
                tp.lost_total += 1
                log.warning("claimed sandbox %s lost: %s", sandbox_id, reason)
                return

    def _drop_lost(self, tp: _TemplatePool, sb: Sandbox, e: BaseException) -> None:
        if sb in tp.warm:
            tp.warm.remove(sb)
            tp.lost_total += 1
            log.warning("warm sandbox %s lost (%s); replacing it", sb.id, e)
            self._destroy_soon(tp, sb)
            tp.wake.set()
        elif sb.id in tp.claimed:
            log.warning("claimed sandbox %s lost (%s)", sb.id, e)

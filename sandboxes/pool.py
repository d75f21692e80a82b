"""`Pool`: warm sandboxes per template, claimed instantly, replenished ahead of demand.

Per template, one replenish task wakes on an `asyncio.Event` (set by claims, finished creates,
releases) and starts creates up to the demand (`warm` target + waiting claims) within the create
concurrency and the pool's `max_size`. Waiting claims are served strictly first come, first served.
A renew task per template extends every live sandbox's lease each `lease_ttl_s / 3`; a warm
sandbox whose renewal finds it lost is dropped and replaced. Failed creates are counted, logged
and retried with exponential backoff; they never stop the pool. One template's state is a
`TemplatePool` (`template_pool.py`); the pools of checkpoints, forks and volumes are template pools
too, made and retired by `derived_pools.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from . import _bridge
from .backends import Backend, SandboxHandle, get_backend
from .derived_pools import DerivedPools
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
from .state.checkpoints import DEFAULT_TTL_S, Checkpoint, CheckpointStore
from .state.volumes import DEFAULT_SIZE_BYTES as DEFAULT_VOLUME_BYTES
from .state.volumes import Volume, VolumeStore
from .template_pool import TemplatePool
from .templates import Template, validate_env
from .types import Limits

__all__ = ["Pool"]

log = logging.getLogger(__name__)

# After this many creates in a row failed, waiting claims get the launch error instead of waiting on.
FAIL_FAST_AFTER = 3
PAUSED_LEASE_S = 7 * 24 * 3600.0  # a paused agent's lease: the longest the agent grants
BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 10.0


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

        self._tps: dict[str, TemplatePool] = {}
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
        self.volumes = VolumeStore(None if volume_dir is None else Path(volume_dir))
        # The pools of checkpoints, forks and volumes (`derived_pools.py`).
        self.derived = DerivedPools(self, self.checkpoints, self.volumes)

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

    def _serve_template(self, t: Template) -> TemplatePool:
        """Start keeping `t`'s sandboxes (its warm set, renewals) on a backend already open."""
        warm = self._default_warm if t.warm is None else t.warm
        tp = TemplatePool(template=t, backend=self._backends[t.backend], warm_target=warm)
        self._tps[t.name] = tp
        tp.tasks.append(asyncio.create_task(self._replenish(tp), name=f"replenish-{t.name}"))
        if t.lease_ttl_s > 0:
            tp.tasks.append(asyncio.create_task(self._renew(tp), name=f"renew-{t.name}"))
        self._tasks += tp.tasks
        return tp

    def _add_template(self, t: Template) -> TemplatePool:
        """Serve `t` from now on, its name known to the pool (`serve_template`, a derived pool)."""
        self._templates[t.name] = t
        return self._serve_template(t)

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
        self._add_template(template)

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
        doomed: list[tuple[TemplatePool, Sandbox]] = []
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
        await self.derived.close()  # checkpoints' and volumes' pools, the volumes' mounts
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
        kept ready for the next claim of it, while they keep coming (`derived_pools.LINGER_S`).

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
        return await self.derived.claim(
            template,
            env,
            files,
            labels,
            timeout,
            checkpoint=checkpoint,
            owner=owner,
            volumes=volumes,
            warm_ahead=warm_ahead,
            layered_volumes=layered_volumes,
        )

    async def _claim(
        self,
        tp: TemplatePool,
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

    async def _take(self, tp: TemplatePool, deadline: float) -> Sandbox:
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
            with contextlib.suppress(ValueError):
                tp.waiters.remove(fut)
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

    def _unclaim(self, tp: TemplatePool, sb: Sandbox) -> None:
        """A sandbox handed to a claim that went away: back to the front of the line."""
        tp.claimed.pop(sb.id, None)
        self._offer(tp, sb, front=True)

    def _offer(self, tp: TemplatePool, sb: Sandbox, front: bool = False) -> None:
        """Give a ready sandbox to the oldest waiting claim, else to the warm set."""
        while tp.waiters:
            fut = tp.waiters.popleft()
            if not fut.done():
                tp.claimed[sb.id] = sb
                fut.set_result(sb)
                return
        if tp.derived and len(tp.warm) >= tp.warm_target:  # a checkpoint's, past its warm set
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
        if tp.derived and not tp.warm_target and tp.destroy_tasks:
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

    # --- checkpoints, forks and volumes (`derived_pools.py`) -----------------------------------------

    async def checkpoint(
        self,
        sb: Sandbox,
        *,
        owner: str = "",
        name: str = "",
        ttl_s: float | None = DEFAULT_TTL_S,
        labels: dict[str, str] | None = None,
        max_bytes: int | None = None,
        memory: bool = False,
        leave_out: Collection[int] = (),
    ) -> Checkpoint:
        """`sb`'s file system now, as a checkpoint of `owner`'s (kept `ttl_s`, None: until
        deleted; `labels` kept with it). `sb` keeps running; a sandbox made from the checkpoint sees exactly this state.
        Past `max_bytes` of changes (or the store's own bounds) it raises `TooLarge`.

        With `memory`, its running programs too (the local backend, with the host's CRIU:
        `backends/memory.py`), stopped for the moment of the dump and the files' capture: each
        sandbox made from the checkpoint runs them on from that moment, in its own namespaces and
        cgroup, their standard streams its `/dev/null`. Their images count in the checkpoint's
        bytes. A program CRIU cannot dump makes it raise `MemorySnapshotError` naming what, and
        `sb` runs on as it was. `leave_out`: pids (in the sandbox) of programs not taken, which
        the caller makes afresh in each copy (a code interpreter's kernel, say)."""
        return await self.derived.checkpoint(
            sb,
            owner=owner,
            name=name,
            ttl_s=ttl_s,
            labels=labels,
            max_bytes=max_bytes,
            memory=memory,
            leave_out=leave_out,
        )

    async def capture_volume(self, sb: Sandbox, path: str, max_bytes: int | None = None) -> tuple[str, int]:
        """The writes of `sb` into its layered volume at `path` (`claim(layered_volumes=...)`) as a
        layer of this pool's checkpoint store: `(digest, bytes)`. The volume's layers plus this
        one are the volume as `sb` sees it now; `sb` keeps running, unaffected."""
        return await self.derived.capture_volume(sb, path, max_bytes)

    def memory_snapshots_missing(self, sb: Sandbox) -> str:
        """Why `sb`'s running programs cannot go into a checkpoint or a fork here ("" when its
        backend takes them; the host's CRIU is the backend's to find)."""
        tp = self._template_pool(sb.template)
        if tp is None:
            return f"sandbox {sb.id} is not one of this pool's"
        if not tp.backend.memory_snapshots:
            return f"the {tp.backend.name} backend takes no memory snapshots ({tp.backend.no_memory_snapshots_why})"
        return ""

    async def fork(
        self,
        sb: Sandbox,
        n: int,
        *,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float | None = None,
        memory: bool = False,
        leave_out: Collection[int] = (),
    ) -> list[Sandbox]:
        """`n` new sandboxes of `sb`'s file system now: one checkpoint layer (kept while they
        run) and `n` sandboxes made from it, each with its own writes. All or none: when one
        cannot be made, those made are released and the error raised. With `memory`, `sb`'s
        running programs run on in each (as for `checkpoint(memory=True)`)."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1024:
            raise InvalidRequest(f"fork count must be an int in [1, 1024], got {n!r}")
        return await self.derived.fork(sb, n, env, labels, timeout, memory=memory, leave_out=leave_out)

    async def delete_checkpoint(self, checkpoint_id: str, owner: str | None = None) -> Checkpoint:
        """Deletes a checkpoint (`CheckpointStore.delete`); returns once its warm sandboxes are
        gone, so that its layers go now unless sandboxes made from it still run."""
        return await self.derived.delete_checkpoint(checkpoint_id, owner)

    def can_checkpoint(self, sb: Sandbox) -> bool:
        """Whether `sb` is one of this pool's, on a backend that checkpoints."""
        tp = self._tps.get(sb.template)
        return tp is not None and tp.backend.checkpoints

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
        return await self.derived.create_volume(name, owner=owner, size_bytes=size_bytes, inodes=inodes)

    async def delete_volume(self, ref: str, *, owner: str | None = None) -> Volume:
        """Deletes a volume (deferred while sandboxes mount it: the cluster defers a claim's)."""
        return await self.derived.delete_volume(ref, owner=owner)

    # --- pause, resume and egress --------------------------------------------------------------------

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

    def can_pause(self, sb: Sandbox) -> bool:
        """Whether `sb` is one of this pool's, on a backend that pauses (keeps processes)."""
        tp = self._tps.get(sb.template)
        return tp is not None and tp.backend.pauses

    def _pausable(self, sb: Sandbox) -> TemplatePool:
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

    async def fence_egress(self, sb: Sandbox, policy: EgressPolicy) -> None:
        """The backend's own fence of `sb`'s egress (kubernetes: its pod's NetworkPolicy) set to
        `policy`, before its agent enforces it (`Sandbox.set_egress_policy`)."""
        tp = self._tps.get(sb.template)
        if tp is not None:
            await tp.backend.set_egress(sb.handle, policy)

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

    # --- what the derived pools use (`derived_pools.WarmSets`) ---------------------------------------

    @property
    def closing(self) -> bool:
        """Whether the pool is closing (or closed)."""
        return self._closing

    def _template_pool(self, name: str) -> TemplatePool | None:
        return self._tps.get(name)

    def _template_pools(self) -> list[TemplatePool]:
        return list(self._tps.values())

    def _template(self, name: str) -> Template | None:
        return self._templates.get(name)

    def _backend(self, name: str) -> Backend | None:
        return self._backends.get(name)

    def _retire(self, tp: TemplatePool) -> None:
        """Serve `tp`'s template no longer: forgotten, its tasks cancelled."""
        del self._tps[tp.name]
        self._templates.pop(tp.name, None)
        for task in tp.tasks:
            task.cancel()
            with contextlib.suppress(ValueError):
                self._tasks.remove(task)

    # --- background: replenish -------------------------------------------------------------------

    def _tp(self, template: str | None) -> TemplatePool:
        name = template or self.default_template
        tp = self._tps.get(name)
        if tp is None:
            raise NotFound(f"no template {name!r} in this pool (have {sorted(self._tps)})")
        return tp

    def _total_size(self) -> int:
        return sum(tp.size() for tp in self._tps.values())

    def _should_create(self, tp: TemplatePool, now: float) -> bool:
        if self._closing or now < tp.backoff_until:
            return False
        demand = tp.warm_target + tp.live_waiters() - len(tp.warm) - tp.creating
        if demand <= 0 or tp.creating >= self.create_concurrency:
            return False
        return self.max_size is None or self._total_size() < self.max_size

    async def _replenish(self, tp: TemplatePool) -> None:
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

    async def _create_one(self, tp: TemplatePool) -> None:
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

    def _make_sandbox(self, tp: TemplatePool, handle: SandboxHandle) -> Sandbox:
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

    def _create_failed(self, tp: TemplatePool, e: Exception) -> None:
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

    def _destroy_soon(self, tp: TemplatePool, sb: Sandbox) -> asyncio.Task[None]:
        """Destroy in a task of its own, so a cancelled caller never leaves a sandbox behind."""
        sb._mark_closed()
        tp.destroying += 1
        task = asyncio.ensure_future(self._destroy(tp, sb))
        for tasks in (self._destroy_tasks, tp.destroy_tasks):
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        return task

    async def _destroy(self, tp: TemplatePool, sb: Sandbox) -> None:
        try:
            await tp.backend.destroy(sb.handle)
        except Exception:
            log.exception("destroying sandbox %s failed", sb.id)
        finally:
            tp.destroying -= 1
            tp.destroyed_total += 1
            for other in self._tps.values():  # capacity freed under max_size
                other.wake.set()
            self.derived.retire_if_idle(tp)

    # --- background: leases ----------------------------------------------------------------------

    async def _renew(self, tp: TemplatePool) -> None:
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

    async def _renew_one(self, tp: TemplatePool, sb: Sandbox, ttl: float, period: float) -> None:
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

    def _drop_lost(self, tp: TemplatePool, sb: Sandbox, e: BaseException) -> None:
        if sb in tp.warm:
            tp.warm.remove(sb)
            tp.lost_total += 1
            log.warning("warm sandbox %s lost (%s); replacing it", sb.id, e)
            self._destroy_soon(tp, sb)
            tp.wake.set()
        elif sb.id in tp.claimed:
            log.warning("claimed sandbox %s lost (%s)", sb.id, e)

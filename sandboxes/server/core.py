"""The server's core, below every transport: claims and records, quotas, idempotency,
lifetimes, draining and exec slots. The gRPC service (`service.py`) and every HTTP API (`http/`) get their
sandboxes and charge their executions here, and nowhere else:

- `claim` a sandbox that outlives the call (registered: found by id, deleted by its owner or at
  the end of its lifetime, shared with the other replicas of a cluster); its lifetime is the
  registry's (`registry.py`): a TTL, an idle bound the surfaces' calls renew
  (`touch`), and whether its end deletes or pauses it;
- `one_shot` a sandbox for one request (the SandboxFusion and Piston runs): the same admission,
  quota and pool, never registered, destroyed when the request ends;
- `session(rec, method)`, the one way a surface runs a program in a sandbox: each holds one of the
  owner's exec slots (`exec_slot`) while it runs (`session.py`);
- `checkpoint`, `fork` and the caller's checkpoints (`sandboxes.state.checkpoints`), counted in its
  quotas; `claim(checkpoint=...)` makes a sandbox from one;
- `pause` and `resume` a sandbox where it runs (its lifetime stops while paused: what is left of
  its TTL is kept, and resuming is activity for its idle bound).

A transport turns its requests into these calls and their errors (`sandboxes.errors`) into its
own answers; it keeps no sandbox or quota state of its own. The HTTP surfaces hold the core as a
`SurfaceCore` (`surface_core.py`), the protocol of the calls they make, which `ServerCore`
satisfies (`_as_surface_core`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandboxes import errors as E
from sandboxes.egress import EgressPolicy
from sandboxes.errors import Step
from sandboxes.server import criu
from sandboxes.server.create import CreateSpec, Source, resolve
from sandboxes.server.image_templates import template_for_image
from sandboxes.server.metrics import Metrics
from sandboxes.server.ports import TOKEN_ATTR, PortGate, PortProxy, port_token
from sandboxes.server.programs import Holder, end_programs, holder_of
from sandboxes.server.quota import QuotaLimits, Quotas
from sandboxes.server.registry import Record, Registry
from sandboxes.server.replicated import Codec, SharedRecords
from sandboxes.server.session import Session
from sandboxes.server.template_build import TEMPLATE_LABEL, Builder, BuildSpec, start_and_wait
from sandboxes.server.validation import Bounds, Validator
from sandboxes.server.volume_versions import (
    ATTACHMENTS_ATTR,
    VOLUME_LABEL,
    VersionedVolume,
    VolumeVersions,
    attachments_codec,
)
from sandboxes.state.built_templates import Build, BuiltTemplate, BuiltTemplates
from sandboxes.state.checkpoints import DEFAULT_TTL_S as DEFAULT_CHECKPOINT_TTL_S
from sandboxes.state.volumes import DEFAULT_SIZE_BYTES as DEFAULT_VOLUME_BYTES

if TYPE_CHECKING:
    from sandboxes.server.surface_core import SurfaceCore
    from sandboxes.templates import Template

__all__ = ["DRAIN_QUIET_S", "ServerCore"]

_PAUSE_LOCK = "core.pause"  # Record.attrs key of the lock pause / resume / evict take


def _evicted_owner(owner: str) -> str:
    """The checkpoints of `owner`'s evicted sandboxes are kept apart from its own."""
    return f"{owner}\0evicted"


DRAIN_QUIET_S = 0.25  # a draining server closes once no call came for this long
MAX_FORK = 64  # sandboxes of one fork call

log = logging.getLogger("sandboxes.server")


class ServerCore:
    """Claims, records, quotas and draining of one server over `pool`."""

    def __init__(
        self,
        pool: Any,
        *,
        quotas: Quotas | None = None,
        metrics: Metrics | None = None,
        bounds: Bounds | None = None,
        default_claim_timeout_s: float | None = None,
    ) -> None:
        self.pool = pool
        self.quotas = quotas or Quotas()
        self.metrics = metrics or Metrics()
        self.bounds = bounds or Bounds()
        self.validate = Validator(self.bounds)
        self.default_claim_timeout_s = default_claim_timeout_s
        self.registry = Registry(self._expire)
        self.started_at = time.time()
        self.draining = False
        # Where sandboxes' ports are reached (`host:port` of the ports listener, else of the HTTP
        # port; None: neither is served).
        self.ports_base: str | None = None
        # The carrier of sandboxes' ports and the host its own listeners bind (`port_listener`),
        # with the name clients reach that host by; set by the server that serves ports.
        self.ports: PortProxy | None = None
        self.ports_bind: tuple[str, str] = ("127.0.0.1", "127.0.0.1")
        self._active = 0  # calls being served (a draining server waits for them)
        self._idle = asyncio.Event()
        self._idle.set()
        self._last_call = 0.0  # loop time of the latest call
        self._deleting: dict[str, asyncio.Task] = {}
        # The registry shared with the other replicas of a cluster (`join_cluster`).
        self.shared: SharedRecords | None = None
        # How the surfaces' state of a record (`Record.attrs[name]`) crosses replicas.
        self.attr_codecs: dict[str, Codec] = {TOKEN_ATTR: Codec(str, str)}
        # Called with (record, reason) as a sandbox leaves the registry (delete, ttl, shutdown...).
        self.on_delete: list[Callable[[Record, str], None]] = []
        self.on_delete.append(self._close_port_listeners)
        # Templates built through the APIs (`built_templates.py`), beside the pool's checkpoints.
        self.built = BuiltTemplates(pool.checkpoints.root / "templates")
        # Volumes kept as versions (`volume_versions.py`), beside them too.
        self.volume_versions = VolumeVersions(pool.checkpoints.root / "volume-versions", pool)
        self.attr_codecs[ATTACHMENTS_ATTR] = attachments_codec()
        self.builder = Builder(self, self.built)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.registry.start()

    async def join_cluster(self) -> bool:
        """Share the registry with the other replicas of the pool's cluster, when its backend
        keeps records there (`replicated.py`); whether it does."""
        for backend in self.pool.backends:
            records = backend.records
            if records is not None:
                self.shared = SharedRecords(self.registry, self.pool, records, self._gone, self.attr_codecs)
                self.registry.shared = self.shared
                await records.serve(self.shared)
                return True
        return False

    async def close(self) -> None:
        """Stop the reaper and destroy every claimed sandbox (the pool closes after this). A
        replica of a cluster whose other replicas live leaves its claimed sandboxes to them."""
        self.draining = True
        await self.builder.close()
        await self.registry.stop()
        records = list(self.registry)
        if self.shared is not None:
            cluster = self.shared.records
            if cluster.others_alive():
                for rec in records:
                    self.registry.pop(rec.id)
                    end_programs(rec)  # this server's streams to them end with it
                    if rec.local:
                        self.quotas.release_sandbox(rec.owner)
                    self.pool.detach(rec.sandbox)
                await cluster.hand_over()
                await self.shared.close()
                log.info("left %d sandboxes to the other replicas", len(records))
                return
            await cluster.hand_over()
        await asyncio.gather(*(self.delete_record(r, "shutdown") for r in records), return_exceptions=True)
        if self.shared is not None:
            await self.shared.close()

    def add_delete_listener(self, listener: Callable[[Record, str], None]) -> None:
        """`listener(record, reason)` is called as each sandbox leaves the registry (`on_delete`)."""
        self.on_delete.append(listener)

    def limits(self, owner: str) -> QuotaLimits:
        """`owner`'s quota limits."""
        return self.quotas.limits_of(owner)

    # -- draining ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def serving(self, method: str, *, while_draining: bool = False) -> Iterator[None]:
        """One call being served; a draining server refuses new ones (`Draining`: untouched,
        safe to send again) unless `while_draining` (health probes)."""
        self._last_call = asyncio.get_running_loop().time()
        if self.draining and not while_draining:
            raise E.Draining(
                "the server is shutting down; send the call again (a new connection reaches another replica)"
            )
        self._active += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._active -= 1
            if not self._active:
                self._idle.set()

    async def drain(self, grace: float) -> None:
        """Refuse new calls (`Draining`: clients send them again elsewhere) until the calls being
        served finished and no call came for `DRAIN_QUIET_S` (clients still connected have
        learnt to move before the connection goes), `grace` seconds at most."""
        self.draining = True
        loop = asyncio.get_running_loop()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                while True:
                    await self._idle.wait()
                    quiet = loop.time() - self._last_call
                    if quiet >= DRAIN_QUIET_S:
                        return
                    await asyncio.sleep(DRAIN_QUIET_S - quiet)  # a call came: quiet again first

    # -- getting a sandbox -------------------------------------------------------------------

    def templates(self) -> set[str] | None:
        templates = getattr(self.pool, "templates", None)
        if isinstance(templates, dict):
            return set(templates)
        return None

    def default_template(self) -> str:
        return getattr(self.pool, "default_template", "default")

    def template(self, name: str) -> Template | None:
        """The server's template `name`; None where this server has none of that name (a record
        of another replica may name a template made there for an image)."""
        return self.pool.templates.get(name)

    async def image_template(self, image: str | None) -> tuple[str, str]:
        """(template name, how it was chosen) of the template that runs `image`
        (`image_templates.template_for_image`; None: the template the HTTP APIs default to)."""
        return await template_for_image(self.pool, image)

    def _admit(self, template: str) -> None:
        """Whether a sandbox of `template` may be had now: not while draining, not of an unknown
        template."""
        if self.draining:
            raise E.Cancelled("the server is shutting down")
        known = self.templates()
        if known is not None and template not in known:
            raise E.NotFound(f"unknown template {template!r}; known: {', '.join(sorted(known))}")

    async def _take(
        self,
        owner: str,
        template: str,
        *,
        env: dict[str, str] | None = None,
        files: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None,
        timeout: float | None = None,
        checkpoint: Any = None,
        volumes: dict[str, tuple[str, bool]] | None = None,
        layered_volumes: list[tuple[str, bool, tuple[str, ...]]] | None = None,
    ) -> Any:
        """A sandbox of `template` from the pool (made from `checkpoint`, one of `owner`'s, when
        given; with `owner`'s `volumes` mounted and `layered_volumes`, `Pool.claim`), holding one
        unit of `owner`'s sandbox quota (released here if the claim fails; the caller's to
        release after)."""
        self.quotas.acquire_sandbox(owner)
        try:
            # The pool writes the files and merges the env before handing the sandbox out; a
            # cancelled claim leaves nothing claimed behind.
            kwargs: dict[str, Any] = (
                {"checkpoint": checkpoint, "owner": owner} if checkpoint is not None else {}
            )
            if volumes:
                kwargs.update(volumes=volumes, owner=owner)
            if layered_volumes:
                kwargs.update(layered_volumes=layered_volumes)
            return await self.pool.claim(
                template=template,
                env=env or None,
                files=files or None,
                labels=labels or None,
                timeout=timeout or self.default_claim_timeout_s,
                **kwargs,
            )
        except BaseException as e:
            self.quotas.release_sandbox(owner)
            if isinstance(e, TimeoutError) and not isinstance(e, E.SandboxError):
                raise E.PoolExhausted(f"no {template!r} sandbox became free in time") from e
            raise

    @contextlib.asynccontextmanager
    async def one_shot(
        self, owner: str, template: str | None = None, *, files: dict[str, Any] | None = None, method: str
    ) -> AsyncIterator[Any]:
        """A sandbox for one request of `owner`, holding one exec slot while it runs: admitted,
        charged and claimed as every sandbox is, never registered (nobody names it afterwards),
        destroyed at the end."""
        template = template or self.default_template()
        self._admit(template)
        with self.exec_slot(owner, method):
            sb = await self._take(owner, template, files=files)
            try:
                yield sb
            finally:
                try:
                    await asyncio.shield(sb.close())
                finally:
                    self.quotas.release_sandbox(owner)

    async def create(self, owner: str, spec: CreateSpec) -> tuple[Record, Source]:
        """A sandbox of `owner`'s as `spec` asks: the one way every surface makes a sandbox that
        outlives its call. Resolves the spec's source once (`create.resolve`), claims it (quota,
        idempotency across retries, lifetime), gives it `spec.network` before anything of it runs, then
        starts a built template's start command; a failure after the claim deletes the sandbox.
        An image that cannot be had is `ImageUnavailable`. The record and what its source
        resolved to."""
        source = await resolve(self, owner, spec)
        try:
            rec = await self.claim(
                owner,
                source.template,
                labels=spec.labels,
                env={**(source.build.env if source.build is not None else {}), **spec.env},
                files=spec.files,
                ttl_s=spec.ttl_s,
                timeout=spec.timeout,
                idempotency_key=spec.idempotency_key,
                checkpoint=source.checkpoint,
                volumes=spec.volumes,
                versioned_volumes=spec.versioned_volumes,
                network=source.network,
                built=source.built,
                on_ttl=spec.on_ttl,
                pause_memory=spec.pause_memory,
                idle_s=spec.idle_s,
            )
        except E.LaunchError as e:
            if e.step is not Step.IMAGE or isinstance(e, E.ImageUnavailable):
                raise
            raise E.ImageUnavailable(e.message, detail=e.detail) from e
        return rec, source

    async def claim(
        self,
        owner: str,
        template: str,
        *,
        labels: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
        files: list[tuple[str, bytes, int]] | None = None,
        ttl_s: float | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        attrs: dict[str, Any] | None = None,
        checkpoint: str | None = None,
        volumes: dict[str, tuple[str, bool]] | None = None,
        versioned_volumes: list[tuple[str, str, bool]] | None = None,
        network: EgressPolicy | None = None,
        built: tuple[Any, Any] | None = None,
        on_ttl: str = "delete",
        pause_memory: bool = True,
        idle_s: float | None = None,
    ) -> Record:
        """Claim a sandbox of `template` (a template of the server's) for `owner` and register it
        (quota, idempotency across retries, lifetime: `ttl_s`, `idle_s`, `on_ttl`); `create` is
        the surfaces' way in. Arguments are
        validated by the caller; `attrs` is what the caller keeps with the record. With
        `checkpoint` (the id of one of `owner`'s checkpoints) the sandbox is made from it, and
        `template` is the checkpoint's. `volumes` maps paths in the sandbox to `owner`'s volumes
        (id or name, read-only) mounted there; `versioned_volumes` (name, path, read-only) are
        `owner`'s volumes kept as versions (`volume_versions.py`) attached at their paths, each as
        its head is now (the record's `ATTACHMENTS_ATTR`). `network` is given to the sandbox, and
        then `built`'s start command runs (`start_built`), before the claim answers: a retry with
        the same idempotency key gets the sandbox once both are done."""
        if checkpoint is not None:
            template = self.restorable(owner, checkpoint).template
        self._admit(template)
        key = idempotency_key
        if key is not None:
            if len(key) > 256:
                raise E.InvalidRequest("idempotency_key is longer than 256 characters")
            existing = self.registry.pending(owner, key)
            if existing is not None:
                return _same_template(await asyncio.shield(existing), template)
            if self.shared is not None and (rec := self.shared.by_key(owner, key)) is not None:
                return _same_template(rec, template)

        coro = self._claim(
            owner,
            template,
            labels or {},
            env or {},
            files or [],
            ttl_s,
            timeout,
            key,
            attrs,
            checkpoint,
            volumes,
            built,
            versioned_volumes,
            network,
            (on_ttl, pause_memory),
            idle_s,
        )
        if key is None:
            # Without a key nobody can pick the sandbox up later: a cancelled call cancels the claim.
            return await coro
        # With a key the claim outlives this call, so a retry after a lost answer gets the same sandbox.
        task = asyncio.ensure_future(coro)
        self.registry.track(owner, key, task)
        return await asyncio.shield(task)

    async def _claim(
        self,
        owner,
        template,
        labels,
        env,
        files,
        ttl_s,
        timeout,
        key,
        attrs=None,
        checkpoint=None,
        volumes=None,
        built=None,
        versioned_volumes=None,
        network=None,
        lifetime=("delete", True),
        idle_s=None,
    ) -> Record:
        """Claim from the pool and register; owns one unit of `owner`'s sandbox quota."""
        started = time.perf_counter()
        # The versions attached are held from here (a publish meanwhile may replace them) until
        # the sandbox's template pool holds them.
        attachments = [self.volume_versions.attach(owner, *v) for v in versioned_volumes or ()]
        held = [d for a in attachments for d in a.layers]
        if held:
            self.pool.checkpoints.acquire(held)
        try:
            sb = await self._take(
                owner,
                template,
                env=env,
                files=file_map(files),
                labels=labels,
                timeout=timeout,
                checkpoint=checkpoint,
                volumes=volumes,
                layered_volumes=[a.mount() for a in attachments],
            )
        finally:
            if held:
                self.pool.checkpoints.release(held)
        if attachments:
            attrs = {**(attrs or {}), ATTACHMENTS_ATTR: attachments}
        rec = await self._register(
            sb, owner, template, labels, env, ttl_s, timeout, key, attrs, started, idle_s=idle_s
        )
        rec.on_ttl, rec.pause_memory = lifetime
        try:
            if network is not None:  # fenced before anything of the sandbox's runs
                await self.set_network(rec, network)
            if built is not None:
                t, build = built
                await self.start_built(rec, t, build, env)
        except BaseException:
            await self.delete_record(rec, "create failed")
            raise
        return rec

    async def _register(
        self,
        sb,
        owner,
        template,
        labels,
        env,
        ttl_s,
        timeout,
        key=None,
        attrs=None,
        started=None,
        idle_s=None,
    ) -> Record:
        """Registers a claimed sandbox of `owner` (holding one unit of its sandbox quota), its
        lifetime `ttl_s` from now and its idle bound `idle_s`."""
        started = time.perf_counter() if started is None else started
        rec = Record(
            id=sb.id,
            sandbox=sb,
            template=template,
            labels=dict(labels),
            owner=owner,
            idempotency_key=key,
            attrs=dict(attrs or {}),
            idle_s=idle_s,
        )
        # Made now, so that it is in the cluster's record of a shared registry: any replica's
        # ports listener checks the same token.
        port_token(rec)
        if self.shared is not None:
            try:
                won = await self._share(rec, env, ttl_s, timeout)
            except BaseException:
                self.quotas.release_sandbox(owner)
                await self._release_quietly(sb)
                raise
            if won is not rec:  # another replica made this key's sandbox first
                self.quotas.release_sandbox(owner)
                await self._release_quietly(sb)
                return _same_template(won, template)
        self.registry.add(rec, ttl_s)
        self.metrics.claims.labels(template).inc()
        self.metrics.create_latency.labels(template).observe(time.perf_counter() - started)
        self.metrics.live_sandboxes.set(len(self.registry))
        log.info(
            "sandbox created",
            extra={"sandbox_id": rec.id, "template": template, "owner": owner, "ttl_s": ttl_s},
        )
        return rec

    async def _share(self, rec: Record, env: dict, ttl_s: float | None, timeout: float | None) -> Record:
        """Publish a claim to the cluster; with an idempotency key, first bind the key, unless
        another replica bound it first: then its record."""
        assert self.shared is not None
        if rec.idempotency_key is not None:
            winner = await self.shared.records.reserve_key(rec.owner, rec.idempotency_key, rec.id)
            if winner != rec.id:
                return await self.shared.wait_for(winner, timeout or 30.0)
        if ttl_s:
            rec.expires_at = time.time() + ttl_s
        await self.shared.publish(rec, env)
        return rec

    # -- checkpoints -------------------------------------------------------------------------

    def checkpoint_of(self, owner: str, checkpoint_id: str) -> Any:
        """`owner`'s checkpoint `checkpoint_id`; `NotFound` for an unknown or another owner's."""
        if not isinstance(checkpoint_id, str) or not 0 < len(checkpoint_id) <= 128:
            raise E.InvalidRequest("checkpoint id must be a non-empty string of at most 128 characters")
        return self.pool.checkpoints.get(checkpoint_id, owner)

    def restorable(self, owner: str, checkpoint_id: str) -> Any:
        """`owner`'s checkpoint `checkpoint_id` that sandboxes can be made from: a version of a
        volume (`volume_versions`) is a directory's, not a sandbox's file system."""
        cp = self.checkpoint_of(owner, checkpoint_id)
        if VOLUME_LABEL in cp.labels:
            raise E.InvalidRequest(
                f"checkpoint {checkpoint_id} is a version of a volume: attach the volume instead"
            )
        return cp

    async def checkpoint(
        self,
        rec: Record,
        *,
        name: str = "",
        ttl_s: float | None = DEFAULT_CHECKPOINT_TTL_S,
        labels: dict[str, str] | None = None,
        memory: bool = False,
    ) -> Any:
        """A checkpoint of `rec`'s sandbox, its owner's (counted in the owner's quota); with
        `memory`, its running programs too (`memory_snapshots_missing` says whether they can be)."""
        count, size = self.pool.checkpoints.usage(rec.owner)
        left = self.quotas.check_checkpoints(rec.owner, count, size)
        if len(name) > 256:
            raise E.InvalidRequest("a checkpoint's name is at most 256 characters")
        cp = await self.pool.checkpoint(
            rec.sandbox,
            owner=rec.owner,
            name=name,
            ttl_s=ttl_s,
            labels=labels,
            max_bytes=left,
            memory=memory,
            leave_out=self.programs(rec).left_out() if memory else (),
        )
        log.info("checkpoint taken", extra={"sandbox_id": rec.id, "checkpoint_id": cp.id, "owner": rec.owner})
        return cp

    async def memory_snapshots_missing(self, rec: Record) -> str:
        """Why `rec`'s sandbox cannot be checkpointed with its running programs ("" when it can):
        its backend's reason, else the host's CRIU's (probed once, off the loop)."""
        return self.pool.memory_snapshots_missing(rec.sandbox) or await asyncio.to_thread(
            criu.memory_snapshots_missing
        )

    def checkpoints(self, owner: str) -> list[Any]:
        """`owner`'s checkpoints (not those that hold built templates or volumes' versions: they are
        the templates' and the volumes')."""
        return [
            cp
            for cp in self.pool.checkpoints.list(owner)
            if TEMPLATE_LABEL not in cp.labels and VOLUME_LABEL not in cp.labels
        ]

    async def delete_checkpoint(self, owner: str, checkpoint_id: str) -> Any:
        """Deletes `owner`'s checkpoint; its layers stay while sandboxes made from it run."""
        labels = self.checkpoint_of(owner, checkpoint_id).labels
        if TEMPLATE_LABEL in labels or VOLUME_LABEL in labels:
            raise E.NotFound(f"no checkpoint {checkpoint_id!r}")
        return await self.pool.delete_checkpoint(checkpoint_id, owner)

    async def fork(
        self,
        rec: Record,
        count: int,
        *,
        labels: dict[str, str] | None = None,
        ttl_s: float | None = None,
        attrs: dict[str, Any] | None = None,
        idle_s: float | None = None,
        memory: bool = False,
    ) -> list[Record]:
        """`count` sandboxes of `rec`'s file system now (with `memory`, its running programs too),
        each registered as its owner's (one unit of sandbox quota each: all or none), with the
        lifetime `ttl_s` and `idle_s` give."""
        owner = rec.owner
        self._admit(rec.template)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_FORK:
            raise E.InvalidRequest(f"a fork makes 1 to {MAX_FORK} sandboxes, not {count!r}")
        held = 0
        try:
            for _ in range(count):
                self.quotas.acquire_sandbox(owner)
                held += 1
            forks = await self.pool.fork(
                rec.sandbox,
                count,
                labels=labels or None,
                memory=memory,
                leave_out=self.programs(rec).left_out() if memory else (),
            )
        except BaseException:
            for _ in range(held):
                self.quotas.release_sandbox(owner)
            raise
        return [
            await self._register(
                sb, owner, rec.template, labels or rec.labels, {}, ttl_s, None, attrs=attrs, idle_s=idle_s
            )
            for sb in forks
        ]

    # -- templates built through the APIs (`template_build.py`) --------------------------------

    async def start_built(self, rec: Record, t: Any, build: Any, env: dict[str, str] | None = None) -> None:
        """A sandbox of a built template, made from its checkpoint, starts as its build ended:
        the template's start command running and its ready command succeeding (else
        `LaunchError`, and the claim deletes the sandbox)."""
        self.built.spawned(t)
        if not build.start_cmd:
            return
        error = await start_and_wait(
            rec.sandbox, build.start_cmd, build.ready_cmd, build.work_dir, env or {}, build.run_as
        )
        if error:
            raise E.LaunchError(f"template {t.name!r}: {error}")

    async def delete_built_template(self, owner: str, ref: str) -> Any:
        """Deletes `owner`'s built template and its builds' checkpoints."""
        t = self.built.delete(owner, ref)
        for b in t.builds.values():
            if b.checkpoint:
                with contextlib.suppress(E.NotFound):
                    await self.pool.delete_checkpoint(b.checkpoint, owner)
        return t

    def built_templates(self, owner: str) -> list[BuiltTemplate]:
        """`owner`'s built templates, oldest first."""
        return self.built.of(owner)

    def built_template(self, owner: str, ref: str) -> BuiltTemplate:
        """`owner`'s built template by id or name (a tag is ignored); `NotFound` otherwise."""
        return self.built.get(owner, ref)

    def find_built(self, owner: str, ref: str) -> BuiltTemplate | None:
        """`owner`'s built template by id or name, if any."""
        return self.built.find(owner, ref)

    def built_template_exists(self, template_id: str) -> bool:
        """Whether a built template of that id (anyone's) exists."""
        return self.built.exists(template_id)

    def ready_build(self, owner: str, ref: str) -> tuple[BuiltTemplate, Build] | None:
        """The ready build `ref` (`name`, `name:tag` or an id) names among `owner`'s, if any."""
        return self.built.ready_build(owner, ref)

    def request_build(
        self, owner: str, ref: str, tags: list[str], cpu_count: int, memory_mb: int
    ) -> tuple[BuiltTemplate, Build]:
        """A new build, waiting, of `owner`'s template named by `ref` (made if new)."""
        return self.built.request(owner, ref, tags, cpu_count, memory_mb)

    def start_build(self, t: BuiltTemplate, b: Build, spec: BuildSpec) -> None:
        """Runs build `b` of `spec` in the background (its state is `b`'s)."""
        self.builder.start(t, b, spec)

    async def build(self, owner: str, name: str, spec: BuildSpec) -> tuple[BuiltTemplate, Build]:
        """`owner`'s ready build of `name`, else a new build of `spec` run to its end (ready or
        failed: `Build.status`)."""
        found = self.built.ready_build(owner, name)
        if found is not None:
            return found
        t, b = self.built.request(owner, name, [], 0, 0)
        await self.builder.run(t, b, spec)
        return t, b

    async def template_from_sandbox(self, rec: Record, name: str, work_dir: str) -> BuiltTemplate:
        """A built template `name` of `rec`'s owner whose one build is `rec`'s files now (a
        checkpoint, counted in the owner's quota), starting in `work_dir`."""
        t, b = self.built.request(rec.owner, name, [], 0, 0)
        try:
            cp = await self.checkpoint(rec, name=name, ttl_s=None, labels={TEMPLATE_LABEL: t.id})
        except BaseException:
            self.built.delete(rec.owner, t.id)
            raise
        b.checkpoint, b.work_dir, b.status = cp.id, work_dir, "ready"
        self.built.finish(t, b)
        return t

    def tag_build(self, owner: str, target: str, tags: list[str]) -> Build:
        """Tags the build `target` (`name:tag`) names with `tags` too."""
        return self.built.assign_tags(owner, target, tags)

    def untag_build(self, owner: str, ref: str, tags: list[str]) -> None:
        """Removes `tags` from `owner`'s template `ref`; the builds left without one go, with
        their checkpoints."""
        for cp in self.built.remove_tags(owner, ref, tags):
            self.builder.drop_checkpoint(owner, cp)

    def upload_path(self, template_id: str, digest: str) -> Path:
        """Where the archive `digest` uploaded for a built template is kept."""
        return self.built.upload_path(template_id, digest)

    def upload_token(self, template_id: str, digest: str) -> str:
        """The token of the link that uploads archive `digest` (the uploader sends no key)."""
        return self.built.upload_token(template_id, digest)

    def upload_ok(self, template_id: str, digest: str, token: str | None) -> bool:
        """Whether `token` is the upload link's."""
        return self.built.upload_ok(template_id, digest, token)

    @contextlib.contextmanager
    def uploading(self, template_id: str) -> Iterator[Callable[[int], None]]:
        """One upload to `template_id`, told each chunk's size (`QuotaExceeded` past the key's
        upload quota)."""
        with self.built.uploading(template_id) as add:
            yield add

    # -- volumes -------------------------------------------------------------------------------

    def volume_of(self, owner: str, ref: str) -> Any:
        """`owner`'s volume by id or name; `NotFound` for an unknown or another owner's."""
        if not isinstance(ref, str) or not 0 < len(ref) <= 128:
            raise E.InvalidRequest("a volume is named by an id or name of at most 128 characters")
        return self.pool.volumes.get(ref, owner)

    async def create_volume(
        self, owner: str, name: str, *, size_bytes: int | None = None, inodes: int | None = None
    ) -> Any:
        """A new volume of `owner`'s, counted in its quotas."""
        size = DEFAULT_VOLUME_BYTES if size_bytes is None else size_bytes
        count, used = self.pool.volumes.usage(owner)
        self.quotas.check_volumes(owner, count, used, size if isinstance(size, int) else 0)
        vol = await self.pool.create_volume(name, owner=owner, size_bytes=size, inodes=inodes)
        log.info("volume created", extra={"volume_id": vol.id, "owner": owner, "size_bytes": size})
        return vol

    def volumes(self, owner: str) -> list[Any]:
        return list(self.pool.volumes.list(owner))

    async def delete_volume(self, owner: str, ref: str) -> Any:
        """Deletes `owner`'s volume; its data goes once no sandbox mounts it."""
        self.volume_of(owner, ref)
        return await self.pool.delete_volume(ref, owner=owner)

    def volumes_root(self) -> Path:
        """The directory the volumes are kept in (a surface's keys for them are kept there too)."""
        return Path(self.pool.volumes.root)

    def volume_by_id(self, volume_id: str) -> Any:
        """The volume `volume_id`, whoever's it is (for a caller its own token authorized);
        `NotFound` otherwise. Blocking: call from a thread."""
        return self.pool.volumes.get(volume_id)

    @contextlib.contextmanager
    def volume_mounted(self, volume_id: str) -> Iterator[str]:
        """The host directory of volume `volume_id`, mounted while the block runs (a sandbox's
        mount of it is shared). Blocking: call from a thread."""
        root = self.pool.volumes.acquire(volume_id)
        try:
            yield root
        finally:
            self.pool.volumes.release(volume_id)

    # -- volumes kept as versions (`volume_versions.py`) ----------------------------------------

    def versioned_volumes(self, owner: str) -> list[VersionedVolume]:
        """`owner`'s volumes kept as versions."""
        return self.volume_versions.list(owner)

    def versioned_volume(self, owner: str, name: str) -> VersionedVolume:
        """`owner`'s volume kept as versions named `name`; `NotFound` otherwise."""
        return self.volume_versions.get(owner, name)

    def versioned_bytes(self, owner: str) -> int:
        """What `owner`'s volumes kept as versions hold."""
        return self.volume_versions.used_bytes(owner)

    def create_volume_version(self, owner: str, name: str) -> Any:
        """A new, never published, volume of `owner`'s kept as versions, counted in its volume
        quota with its live volumes."""
        count, used = self.pool.volumes.usage(owner)
        self.quotas.check_volumes(owner, count + len(self.volume_versions.list(owner)), used, 0)
        return self.volume_versions.create(owner, name)

    async def delete_volume_version(self, owner: str, name: str) -> Any:
        """Deletes `owner`'s volume kept as versions; refused (`Conflict`) while a live sandbox
        has it attached."""
        v = self.volume_versions.get(owner, name)
        for rec in self.registry.select(owner):
            if any(a.volume_id == v.id for a in rec.attrs.get(ATTACHMENTS_ATTR, ())):
                raise E.Conflict(f"volume {name!r} is attached to sandbox {rec.id}: delete the sandbox first")
        return await self.volume_versions.delete(owner, name)

    async def publish_volume(
        self, rec: Record, name: str, *, force: bool = False, labels: dict[str, str] | None = None
    ) -> Any:
        """`rec`'s writes into its attached volume `name` as the volume's new head (a checkpoint
        of `rec`'s owner, counted in its checkpoint quota)."""
        att = next((a for a in rec.attrs.get(ATTACHMENTS_ATTR, ()) if a.name == name), None)
        if att is None:
            raise E.NotFound(f"volume {name!r} is not attached to sandbox {rec.id}")
        left = None
        if not att.read_only:
            count, size = self.pool.checkpoints.usage(rec.owner)
            left = self.quotas.check_checkpoints(rec.owner, count, size)
        cp = await self.volume_versions.publish(
            rec.sandbox, rec.owner, att, force=force, labels=labels, max_bytes=left
        )
        await self.save(rec)  # the attachment's head, for the other replicas
        log.info("volume published", extra={"sandbox_id": rec.id, "checkpoint_id": cp.id, "owner": rec.owner})
        return cp

    # -- pause and resume --------------------------------------------------------------------

    async def pause(self, rec: Record, *, memory: bool = True) -> bool:
        """Pause `rec`'s sandbox; its lifetime stops (what is left of its TTL is kept, its idle
        bound does not count while it is paused). With `memory`, where it runs (`Pool.pause`:
        processes kept), evicted after `Bounds.max_paused_s` to a checkpoint of its files and, where
        they can be taken, its running programs (resuming runs them on); without,
        or on a backend that checkpoints but cannot keep processes (kubernetes: the pod ends),
        evicted at once: its files are kept, its processes end, and resuming starts a new
        sandbox from the files. False when it was paused already."""
        if memory and not self.pool.can_pause(rec.sandbox) and self.pool.can_checkpoint(rec.sandbox):
            memory = False
        async with self._pausing(rec):
            if rec.state == "paused":
                return False
            left = max(1.0, rec.expires_at - time.time()) if rec.expires_at is not None else None
            if memory:
                await self.pool.pause(rec.sandbox)
                self.registry.expire_at(rec, time.time() + self.bounds.max_paused_s)
            else:
                await self._evict(rec)
            rec.paused_ttl_s = left
        log.info("sandbox paused", extra={"sandbox_id": rec.id, "owner": rec.owner, "memory": memory})
        return True

    async def resume(self, rec: Record, ttl_s: float | None = None, *, memory: bool = True) -> bool:
        """Continue `rec`'s paused sandbox; its TTL runs again: `ttl_s` from now, else what was
        left at the pause; resuming is activity (its idle bound counts from now). Without `memory` a sandbox paused with its processes restarts from
        its files (a cold boot). False (and nothing changed) when it was not paused."""
        async with self._pausing(rec):
            if rec.state != "paused":
                return False
            if not memory and not rec.evicted:
                await self._evict(rec)
            if rec.evicted:
                await self._restore(rec)
            else:
                await self.pool.resume(rec.sandbox)
            self.registry.touch(rec)
            ttl = ttl_s or rec.paused_ttl_s
            if ttl:
                self.registry.set_ttl(rec, ttl)
            else:
                self.registry.clear_ttl(rec)
            rec.paused_ttl_s = None
        log.info("sandbox resumed", extra={"sandbox_id": rec.id, "owner": rec.owner})
        return True

    # -- network -----------------------------------------------------------------------------

    def network_of(self, rec: Record) -> EgressPolicy | bool:
        """`rec`'s egress policy now: its last replacement or its template's list, or the
        template's False (none) / True (the outside's), which cannot change."""
        replaced = getattr(rec.sandbox, "egress", None)
        if replaced is not None:
            return replaced
        network = self.pool.templates[rec.template].network
        return EgressPolicy(network) if isinstance(network, tuple) else network

    async def set_network(self, rec: Record, policy: EgressPolicy) -> None:
        """Replaces `rec`'s egress policy (`Sandbox.set_network`): a template whose network is a
        list lets its owner ask for any policy; one whose network is none or the outside's
        lets none be asked for. A paused sandbox is refused (`SandboxPaused`)."""
        if not isinstance(self.network_of(rec), EgressPolicy):
            raise E.InvalidRequest(
                f"sandbox {rec.id} was started without an egress policy (its template's network is "
                "none or the outside's): its egress cannot change"
            )
        async with self._pausing(rec):
            if rec.state == "paused":
                raise E.SandboxPaused(f"sandbox {rec.id} is paused: resume it first")
            await rec.sandbox.set_egress_policy(policy)
        log.info("sandbox egress set", extra={"sandbox_id": rec.id, "owner": rec.owner, "deny": policy.deny})

    # -- ports -------------------------------------------------------------------------------

    def port_access(self, rec: Record, port: int) -> tuple[str, str, str]:
        """(URL by path, host name, token) that reach `port` of `rec`'s sandbox from outside
        (`ports.py`); InvalidRequest where this server does not serve ports."""
        if self.ports_base is None:
            raise E.InvalidRequest(
                "this server does not serve sandboxes' ports (serve --http-port or --ports-port)"
            )
        if not isinstance(port, int) or not 0 < port < 65536:
            raise E.InvalidRequest(f"port must be 1..65535, got {port!r}")
        token = port_token(rec)
        return (
            f"http://{self.ports_base}/ports/{rec.id}/{port}/{token}/",
            f"{port}-{rec.id}.{self.ports_base}",
            token,
        )

    def port_listener(self, rec: Record, port: int, gate: PortGate) -> str:
        """The URL (`http://host:port`, no path) of a listener of its own that carries every
        connection to `port` of `rec`'s sandbox, opened by `gate` (`ports.PortGate`), for clients
        that take a sandbox's port as the base URL of an API; closed as the sandbox is deleted.
        InvalidRequest where this server does not serve ports."""
        if self.ports is None:
            raise E.InvalidRequest(
                "this server does not serve sandboxes' ports (serve --http-port or --ports-port)"
            )
        if not isinstance(port, int) or not 0 < port < 65536:
            raise E.InvalidRequest(f"port must be 1..65535, got {port!r}")
        bind, name = self.ports_bind
        try:
            n = self.ports.listen(bind, rec.id, port, gate)
        except OSError as e:
            raise E.BackendUnavailable(f"no port for sandbox {rec.id}'s port {port}: {e}") from None
        return f"http://{'[' + name + ']' if ':' in name else name}:{n}"

    def _close_port_listeners(self, rec: Record, reason: str) -> None:
        if self.ports is not None:
            self.ports.close(rec.id)

    def _pausing(self, rec: Record) -> asyncio.Lock:
        lock = rec.attrs.get(_PAUSE_LOCK)
        if lock is None:
            lock = rec.attrs[_PAUSE_LOCK] = asyncio.Lock()
        return lock

    async def _evict(self, rec: Record, *, processes: bool = False) -> None:
        """`rec`'s sandbox ends, its files kept in a checkpoint the record holds (no one's
        listing, no quota: it is the paused sandbox itself); with `processes`, its running
        programs too where they can be taken (`memory_snapshots_missing`), so resuming runs them
        on (a program CRIU refuses leaves the files alone, as a pause without memory would)."""
        sb = rec.sandbox
        if sb.paused:
            await self.pool.resume(sb)  # the checkpoint is its agent's work

        async def kept(memory: bool) -> Any:
            return await self.pool.checkpoint(
                sb,
                owner=_evicted_owner(rec.owner),
                name=rec.id,
                ttl_s=self.bounds.max_paused_s + 60.0,
                memory=memory,
                leave_out=self.programs(rec).left_out() if memory else (),
            )

        cp = None
        if processes and not await self.memory_snapshots_missing(rec):
            try:
                cp = await kept(True)
            except E.MemorySnapshotError as e:
                log.warning(
                    "evicting sandbox %s keeps its files only: %s", rec.id, e, extra={"sandbox_id": rec.id}
                )
        if cp is None:
            cp = await kept(False)
        rec.evicted = cp.id
        sb._paused = True  # its calls are refused as a paused sandbox's from now on
        self.registry.expire_at(rec, time.time() + self.bounds.max_paused_s)
        end_programs(rec)  # its processes end with it
        await self._release_quietly(sb)

    async def _restore(self, rec: Record) -> None:
        """A new sandbox from an evicted record's files takes its place (same id to callers)."""
        old, cp = rec.sandbox, rec.evicted
        assert cp is not None
        sb = await self.pool.claim(
            checkpoint=cp, owner=_evicted_owner(rec.owner), env=old.env, labels=old.labels, warm_ahead=False
        )
        rec.sandbox, rec.evicted = sb, None
        self._forget_evicted(rec.owner, cp)
        if old.egress is not None:  # the policy it was given, not its template's
            await sb.set_egress_policy(old.egress)

    def _forget_evicted(self, owner: str, checkpoint_id: str) -> None:
        with contextlib.suppress(E.NotFound):
            self.pool.checkpoints.delete(checkpoint_id, _evicted_owner(owner))

    # -- records -----------------------------------------------------------------------------

    async def record(self, sandbox_id: str, owner: str) -> Record:
        """The caller's record of `sandbox_id`; `NotFound` for an unknown or another owner's one."""
        sid = self.validate.sandbox_id(sandbox_id)
        rec = await self.registry.find(sid, owner)
        if rec is None:
            raise E.NotFound(f"no sandbox {sid!r}")
        return rec

    async def find_record(self, sandbox_id: str, owner: str | None = None) -> Record | None:
        """The record of `sandbox_id` (of `owner`, when given), if any: asked of the cluster when
        this replica does not know it (yet). Unlike `record`, the id is not validated."""
        return await self.registry.find(sandbox_id, owner)

    def records(self, owner: str) -> list[Record]:
        """`owner`'s records (the other replicas' too)."""
        return self.registry.select(owner)

    def touch(self, rec: Record) -> None:
        """Activity of `rec` now: its idle bound counts from here."""
        self.registry.touch(rec)

    def set_ttl(self, rec: Record, ttl_s: float) -> None:
        """`rec` ends `ttl_s` from now (sooner or later than it would have)."""
        self.registry.set_ttl(rec, ttl_s)

    def set_idle(self, rec: Record, idle_s: float | None) -> None:
        """`rec` ends `idle_s` after its last activity (None: no idle bound); counted from now."""
        self.registry.set_idle(rec, idle_s)

    def share_attr(self, name: str, codec: Codec) -> None:
        """Let `Record.attrs[name]` reach the other replicas of a cluster (through `save`)."""
        self.attr_codecs[name] = codec

    async def save(self, rec: Record) -> None:
        """Write `rec` (with its surfaces' state) to the cluster before answering, when shared."""
        if self.shared is not None:
            await self.shared.save(rec)

    async def _gone(self, rec: Record) -> None:
        """A sandbox deleted or lost elsewhere in the cluster leaves this registry."""
        await self.delete_record(rec, "gone")

    async def _release_quietly(self, sb: Any) -> None:
        try:
            await asyncio.shield(self.pool.release(sb))
        except Exception:
            log.exception("releasing sandbox %s failed", getattr(sb, "id", "?"))

    async def delete_record(self, rec: Record, reason: str) -> bool:
        """Unregister and destroy `rec`; concurrent deletes of one sandbox share the work.
        `reason` is counted and told to the `on_delete` listeners. Whether this call removed it."""
        if self.registry.pop(rec.id) is None:
            task = self._deleting.get(rec.id)
            if task is not None:
                await asyncio.shield(task)
            return False
        if self.shared is not None:
            self.shared.deleted(rec.id)
        if rec.local:
            self.quotas.release_sandbox(rec.owner)
        end_programs(rec)
        for listener in self.on_delete:
            try:
                listener(rec, reason)
            except Exception:
                log.exception("a delete listener failed for %s", rec.id)
        if rec.evicted:
            self._forget_evicted(rec.owner, rec.evicted)
        self.metrics.deletes.labels(reason).inc()
        self.metrics.live_sandboxes.set(len(self.registry))
        task = asyncio.ensure_future(self._release_quietly(rec.sandbox))
        self._deleting[rec.id] = task
        task.add_done_callback(lambda _t: self._deleting.pop(rec.id, None))
        log.info("sandbox deleted", extra={"sandbox_id": rec.id, "owner": rec.owner, "reason": reason})
        # The sandbox is destroyed even if this call is cancelled.
        await asyncio.shield(task)
        return True

    async def _expire(self, rec: Record) -> None:
        """Its lifetime ended (`rec.ended_by`: its TTL or its idle bound): deleted with that
        reason ("ttl", "idle"), or paused when the record asks (`on_ttl`); a sandbox paused with
        its processes past `max_paused_s` is evicted to its files (and its programs, where they can
        be taken) instead, where its backend can checkpoint."""
        try:
            if rec.state == "running" and rec.on_ttl == "pause":
                await self.pause(rec, memory=rec.pause_memory)
                return
            if rec.state == "paused" and not rec.evicted and self.pool.can_checkpoint(rec.sandbox):
                async with self._pausing(rec):
                    if not rec.evicted:
                        await self._evict(rec, processes=True)
                return
        except E.SandboxError as e:
            log.warning("pausing or evicting sandbox %s at its TTL failed (%s); deleting it", rec.id, e)
        await self.delete_record(rec, rec.ended_by or "ttl")

    def template_of(self, rec: Record) -> Any:
        """The template `rec`'s sandbox is of (`sandboxes.Template`)."""
        return self.pool.templates[rec.template]

    # -- execution ---------------------------------------------------------------------------

    def session(self, rec: Record, method: str) -> Session:
        """`rec`'s sandbox as `method` runs programs in it, each charged to `rec.owner`."""
        return Session(self, rec, method)

    def programs(self, rec: Record) -> Holder:
        """The long-lived programs of `rec`'s sandbox (`programs.py`): every surface starts its
        sessions, terminals and kernels there; they end as the sandbox is deleted or evicted."""
        return holder_of(self, rec)

    @contextlib.contextmanager
    def exec_slot(self, owner: str, method: str) -> Iterator[None]:
        """One execution of `owner` in flight (`QuotaExceeded` past the key's limit), counted and
        timed as `method`: every surface's every execution takes one."""
        with self.quotas.exec_slot(owner):
            self.metrics.inflight_execs.inc()
            started = time.perf_counter()
            try:
                yield
            finally:
                self.metrics.inflight_execs.dec()
                self.metrics.exec_latency.labels(method).observe(time.perf_counter() - started)


def _as_surface_core(core: ServerCore) -> SurfaceCore:
    """Where mypy checks that `ServerCore` is the core the HTTP surfaces type against."""
    return core


def _same_template(rec: Record, template: str) -> Record:
    if rec.template != template:
        raise E.InvalidRequest(f"idempotency_key was used for a sandbox of template {rec.template!r}")
    return rec


def file_map(files: list[tuple[str, bytes, int]]) -> dict[str, tuple[bytes, int]]:
    """(path, data, mode) triples -> the `{path: (data, mode)}` map of `Sandbox.write_files`;
    mode 0 on the wire means 0644."""
    return {path: (data, mode or 0o644) for path, data, mode in files}

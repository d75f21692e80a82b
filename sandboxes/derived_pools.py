"""The pools a `Pool` derives from state: sandboxes made from a checkpoint's layers
(`Pool.claim(checkpoint=)`, `Pool.fork`), with volumes mounted (`claim(volumes=)`) or with layered
volumes (`claim(layered_volumes=)`), and the captures that make those layers (`Pool.checkpoint`,
`Pool.capture_volume`).

Each distinct (template, layers, volumes, layered volumes) is served by a template pool of its own
(a `TemplatePool` with `base` set, named `cp-<digest>`), made when a claim first asks for it and
retired with its last sandbox and claim; its layers are held in the checkpoint store and its
volumes mounted meanwhile. A checkpoint's pool is kept one sandbox warm ahead while its claims
keep coming (`LINGER_S`), and cooled at once when the checkpoint is deleted or expires. The pool's
warm sets serve them like any template (`WarmSets`: what this module asks of the pool).
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from .backends import Backend
from .errors import InvalidRequest, NotFound, TooLarge
from .sandbox import Data, Sandbox
from .state.checkpoints import Checkpoint, CheckpointStore
from .state.volumes import Volume, VolumeStore
from .template_pool import TemplatePool
from .templates import Template

__all__ = ["LINGER_S", "MAX_VOLUMES", "DerivedPools", "WarmSets"]

MAX_VOLUMES = 16  # volumes of one sandbox
# A checkpoint's (or a built template's) sandboxes are served warm, one ahead, while claims of it
# keep coming: at most this long after the last one (`DerivedPools._linger`).
LINGER_S = 60.0

Mounts = tuple[tuple[str, str, bool], ...]  # (volume id, path in the sandbox, read-only), by path
Layered = tuple[tuple[str, bool, tuple[str, ...]], ...]  # (path, read-only, layer digests)


class WarmSets(Protocol):
    """What the derived pools ask of the pool whose warm sets serve their sandboxes (`Pool`)."""

    default_template: str

    @property
    def closing(self) -> bool: ...

    def _tp(self, template: str | None) -> TemplatePool:
        """The template pool serving `template` (None: the default); `NotFound` if none."""
        ...

    def _template_pool(self, name: str) -> TemplatePool | None: ...

    def _template_pools(self) -> list[TemplatePool]: ...

    def _template(self, name: str) -> Template | None: ...

    def _backend(self, name: str) -> Backend | None:
        """The pool's backend of that name, once open."""
        ...

    def _add_template(self, template: Template) -> TemplatePool:
        """Serve one more template from now on."""
        ...

    def _retire(self, tp: TemplatePool) -> None:
        """Serve `tp`'s template no longer (its sandboxes are gone)."""
        ...

    async def _claim(
        self,
        tp: TemplatePool,
        env: Mapping[str, str] | None,
        files: Mapping[str, Data] | None,
        labels: Mapping[str, str] | None,
        timeout: float | None,
    ) -> Sandbox:
        """A claim of one of `tp`'s sandboxes."""
        ...

    def _destroy_soon(self, tp: TemplatePool, sb: Sandbox) -> asyncio.Task[None]: ...


def derived_name(
    base: str, layers: tuple[str, ...], volumes: Mounts, layered: Layered = (), memory: bool = False
) -> str:
    """The name of the template pool of `base` made from `layers`, `volumes` and `layered` (and
    that restores memory snapshots' programs: `Template.memory_restores`)."""
    parts = (
        base,
        *(["memory"] if memory else []),
        *layers,
        *(f"{v}:{p}:{int(ro)}" for v, p, ro in volumes),
        *(f"layered:{p}:{int(ro)}:{','.join(ds)}" for p, ro, ds in layered),
    )
    return "cp-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


class DerivedPools:
    """A pool's checkpoints, forks and volumes: the template pools they are served from, and the
    stores they hold layers and volumes in (the pool's `checkpoints` and `volumes`)."""

    def __init__(self, pool: WarmSets, checkpoints: CheckpointStore, volumes: VolumeStore) -> None:
        self.pool = pool
        self.checkpoints = checkpoints
        self.volumes = volumes
        checkpoints.on_drop.append(self.checkpoint_dropped)

    # --- claims ----------------------------------------------------------------------------------

    async def claim(
        self,
        template: str | None,
        env: Mapping[str, str] | None,
        files: Mapping[str, Data] | None,
        labels: Mapping[str, str] | None,
        timeout: float | None,
        *,
        checkpoint: str | Checkpoint | None,
        owner: str | None,
        volumes: Mapping[str, str | tuple[str, bool]] | None,
        warm_ahead: bool,
        layered_volumes: Sequence[tuple[str, bool, Sequence[str]]] | None,
    ) -> Sandbox:
        """`Pool.claim` of a sandbox made from a checkpoint, or with volumes or layered volumes."""
        layered = tuple((path, ro, tuple(digests)) for path, ro, digests in layered_volumes or ())
        mounts = await asyncio.to_thread(self._resolve_volumes, volumes or {}, owner)
        layers: tuple[str, ...] = ()
        if checkpoint is None:
            base = self.pool._tp(template).name
        else:
            if isinstance(checkpoint, Checkpoint):
                checkpoint = self.checkpoints.get(checkpoint.id, checkpoint.owner if owner is None else owner)
            else:
                checkpoint = self.checkpoints.get(checkpoint, owner)
            base, layers = checkpoint.template, checkpoint.layers
        memory = checkpoint is not None and checkpoint.memory
        tp = await self._derived(base, layers, mounts, layered, memory)
        if checkpoint is not None and not mounts and not layered and warm_ahead:
            self._linger(tp)
        try:
            if checkpoint is None or not checkpoint.memory:
                return await self.pool._claim(tp, env, files, labels, timeout)
            # The programs first: a file written starts a thread of the agent's, which could
            # hold a pid of theirs (`backends.memory`).
            with self.checkpoints.using_memory(checkpoint) as images:
                sb = await self._claim_restored(tp, env, labels, timeout, images)
            if files:
                try:
                    await sb.write_files(files)
                except BaseException:
                    await asyncio.shield(sb.close())
                    raise
            return sb
        finally:
            self.retire_if_idle(tp)

    def _resolve_volumes(self, volumes: Mapping[str, str | tuple[str, bool]], owner: str | None) -> Mounts:
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

    # --- checkpoints and forks -------------------------------------------------------------------

    def _chain(self, sb: Sandbox) -> tuple[TemplatePool, str, tuple[str, ...]]:
        """`sb`'s template pool, the template it is made of and the layers beneath it."""
        tp = self.pool._template_pool(sb.template)
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
        owner: str,
        name: str,
        ttl_s: float | None,
        labels: dict[str, str] | None,
        max_bytes: int | None,
        memory: bool = False,
        leave_out: Collection[int] = (),
    ) -> Checkpoint:
        """`Pool.checkpoint`: `sb`'s writes captured as one more layer of its own; with `memory`,
        its running programs (but those of `leave_out`) dumped first and left stopped until the
        files are captured (the files are those the programs' images expect), then continued."""
        tp, base, layers = self._chain(sb)

        def add(digest: str, size: int, images: Path | None = None) -> Checkpoint:
            return self.checkpoints.add(
                template=base,
                layers=(*layers, digest),
                owner=owner,
                name=name,
                source=sb.id,
                size=size,
                ttl_s=ttl_s,
                labels=labels,
                memory=images,
            )

        if not memory:
            digest, size, _ = await sb.call_agent(self.checkpoints.capture, max_bytes=max_bytes)
            return add(digest, size)
        self._check_memory(tp)
        images = self.checkpoints.memory_tmp()
        try:
            mem_bytes, carry_on = await tp.backend.dump_memory(sb.handle, images, leave_out)
            try:
                if max_bytes is not None and mem_bytes > max_bytes:
                    raise TooLarge(f"the sandbox's programs take {mem_bytes} bytes, over {max_bytes}")
                left = None if max_bytes is None else max_bytes - mem_bytes
                digest, size, _ = await sb.call_agent(self.checkpoints.capture, max_bytes=left)
            finally:
                carry_on()
            return add(digest, size + mem_bytes, images)
        finally:
            if images.exists():
                await asyncio.to_thread(shutil.rmtree, images, True)

    async def capture_volume(self, sb: Sandbox, path: str, max_bytes: int | None) -> tuple[str, int]:
        """`Pool.capture_volume`: the writes of `sb` into its layered volume at `path`."""
        tp, _, _ = self._chain(sb)
        if not any(p == path for p, _, _ in tp.layered):
            raise NotFound(f"sandbox {sb.id} has no layered volume at {path!r}")
        digest, size, _ = await sb.call_agent(self.checkpoints.capture, volume=path, max_bytes=max_bytes)
        return digest, size

    async def fork(
        self,
        sb: Sandbox,
        n: int,
        env: Mapping[str, str] | None,
        labels: Mapping[str, str] | None,
        timeout: float | None,
        memory: bool = False,
        leave_out: Collection[int] = (),
    ) -> list[Sandbox]:
        """`Pool.fork`: one layer of `sb`'s writes now (kept while they run), and `n` sandboxes
        made from it; all or none. With `memory`, `sb`'s running programs too, dumped as for a
        checkpoint and restored into each fork (their images removed once they are)."""
        source, base, layers = self._chain(sb)
        images = self.checkpoints.memory_tmp()
        try:
            if memory:
                self._check_memory(source)
                _, carry_on = await source.backend.dump_memory(sb.handle, images, leave_out)
                try:
                    digest, _, _ = await sb.call_agent(self.checkpoints.capture)
                finally:
                    carry_on()
            else:
                digest, _, _ = await sb.call_agent(self.checkpoints.capture)
            tp = self._layered(base, (*layers, digest), memory=memory)
            try:
                made = await asyncio.gather(
                    *(
                        self._claim_restored(tp, env, labels, timeout, images if memory else None)
                        for _ in range(n)
                    ),
                    return_exceptions=True,
                )
                failed = [r for r in made if isinstance(r, BaseException)]
                forks = [r for r in made if isinstance(r, Sandbox)]
                if failed:
                    await asyncio.gather(*(f.close() for f in forks), return_exceptions=True)
                    raise failed[0]
                return forks
            finally:
                self.retire_if_idle(tp)
        finally:
            if images.exists():
                await asyncio.to_thread(shutil.rmtree, images, True)

    async def _claim_restored(
        self,
        tp: TemplatePool,
        env: Mapping[str, str] | None,
        labels: Mapping[str, str] | None,
        timeout: float | None,
        images: Path | None,
    ) -> Sandbox:
        """A claim of one of `tp`'s sandboxes, with the programs of `images` restored into it."""
        sb = await self.pool._claim(tp, env, None, labels, timeout)
        if images is not None:
            try:
                await tp.backend.restore_memory(sb.handle, images)
            except BaseException:
                await asyncio.shield(sb.close())
                raise
        return sb

    @staticmethod
    def _check_memory(tp: TemplatePool) -> None:
        if not tp.backend.memory_snapshots:
            raise InvalidRequest(
                f"the {tp.backend.name} backend takes no memory snapshots ({tp.backend.no_memory_snapshots_why})"
            )

    def checkpoint_dropped(self, cp: Checkpoint) -> list[asyncio.Task[None]]:
        """A deleted or expired checkpoint's sandboxes are kept warm no longer (the store's
        `on_drop`): the tasks destroying the warm ones."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return []  # dropped off the loop (a thread): its warm ones go when their linger ends
        done = []
        for tp in self.pool._template_pools():
            if tp.base and tp.layers == tuple(cp.layers) and tp.warm_target:
                done += self._cool(tp)
        return done

    async def delete_checkpoint(self, checkpoint_id: str, owner: str | None) -> Checkpoint:
        """`Pool.delete_checkpoint`: returns once its warm sandboxes are gone."""
        cp = self.checkpoints.get(checkpoint_id, owner)
        done = self.checkpoint_dropped(cp)
        self.checkpoints.delete(cp.id, owner)
        if done:
            await asyncio.gather(*done, return_exceptions=True)
        return cp

    # --- volumes ---------------------------------------------------------------------------------

    async def create_volume(self, name: str, *, owner: str, size_bytes: int, inodes: int | None) -> Volume:
        """`Pool.create_volume`: an image on this host, or the cluster's claim."""
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

    async def delete_volume(self, ref: str, *, owner: str | None) -> Volume:
        """`Pool.delete_volume`."""
        vol = await asyncio.to_thread(self.volumes.delete, ref, owner)
        backend = self._volume_backend()
        if vol.claim and backend is not None:
            await backend.delete_volume_claim(vol)
        return vol

    def _volume_backend(self) -> Backend | None:
        """The backend whose claims hold this pool's volumes (its default template's), if any."""
        t = self.pool._template(self.pool.default_template)
        backend = self.pool._backend(t.backend) if t is not None else None
        return backend if backend is not None and backend.volume_claims else None

    def _mount(self, volumes: Mounts, claims: bool = False) -> tuple[str, ...]:
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

    def _unmount(self, volumes: Mounts) -> None:
        for vid, _, _ in volumes:
            self.volumes.release(vid)

    # --- the template pools ----------------------------------------------------------------------

    async def _derived(
        self, base: str, layers: tuple[str, ...], volumes: Mounts, layered: Layered = (), memory: bool = False
    ) -> TemplatePool:
        """`_layered`, mounting the volumes off the event loop first."""
        name = derived_name(base, layers, volumes, layered, memory)
        if (tp := self.pool._template_pool(name)) is not None:
            return tp
        if not volumes:
            return self._layered(base, layers, layered=layered, memory=memory)
        t = self.pool._template(base)
        backend = self.pool._backend(t.backend) if t is not None else None
        hosts = await asyncio.to_thread(self._mount, volumes, backend is not None and backend.volume_claims)
        if (tp := self.pool._template_pool(name)) is not None:  # made by another claim meanwhile
            await asyncio.to_thread(self._unmount, volumes)
            return tp
        try:
            return self._layered(base, layers, volumes, hosts, layered, memory)
        except BaseException:
            await asyncio.to_thread(self._unmount, volumes)
            raise

    def _layered(
        self,
        base: str,
        layers: tuple[str, ...],
        volumes: Mounts = (),
        hosts: tuple[str, ...] = (),
        layered: Layered = (),
        memory: bool = False,
    ) -> TemplatePool:
        """The template pool of sandboxes of template `base` made from `layers`, with `volumes`
        mounted from their `hosts` directories (mounted for it: it unmounts them when retired)
        and `layered` volumes, served while it has sandboxes or claims; its layers are in use
        meanwhile. With `memory`, its sandboxes are what memory snapshots' programs are restored
        into (`Template.memory_restores`)."""
        name = derived_name(base, layers, volumes, layered, memory)
        if (tp := self.pool._template_pool(name)) is not None:
            return tp
        t = self.pool._template(base)
        if t is None:
            raise NotFound(f"no template {base!r} in this pool")
        backend = self.pool._backend(t.backend)
        if backend is None:
            raise NotFound(f"backend {t.backend!r} is not open in this pool")
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
        t = t.replace(
            name=name,
            layers=tuple(paths),
            volumes=mounts,
            layered_volumes=layered_dirs,
            warm=0,
            memory_restores=memory,
        )
        tp = self.pool._add_template(t)
        tp.base, tp.layers, tp.volumes, tp.layered = base, layers, volumes, layered
        return tp

    def _release_layers(self, tp: TemplatePool) -> None:
        """A retired template pool's layers, its layered volumes' included, are let go."""
        self.checkpoints.release(tp.layers)
        for _, _, digests in tp.layered:
            self.checkpoints.release(digests)

    def retire_if_idle(self, tp: TemplatePool) -> None:
        """Stops serving a derived template pool with no sandbox and no claim left."""
        if (
            not tp.base
            or tp.size()
            or tp.live_waiters()
            or tp.attached
            or self.pool._template_pool(tp.name) is not tp
        ):
            return
        self.pool._retire(tp)
        if tp.linger is not None:
            tp.linger.cancel()
        self._release_layers(tp)
        self._unmount(tp.volumes)  # a volume's last user lets it go (`volumes.LINGER_S`)

    def _linger(self, tp: TemplatePool) -> None:
        """A claim of a checkpoint's sandboxes: one is kept warm ahead (if its template keeps
        any) until `LINGER_S` pass without another claim, so that a template built once and
        used again, or a group of rollouts from one checkpoint, starts as fast as the image's."""
        loop = asyncio.get_running_loop()
        tp.last_claim = loop.time()
        base = self.pool._template_pool(tp.base)
        if tp.linger is None and base is not None and base.warm_target > 0:
            tp.warm_target = 1
            tp.wake.set()
            tp.linger = loop.call_later(LINGER_S, self._linger_check, tp)

    def _linger_check(self, tp: TemplatePool) -> None:
        tp.linger = None
        if self.pool.closing or self.pool._template_pool(tp.name) is not tp:
            return
        left = tp.last_claim + LINGER_S - asyncio.get_running_loop().time()
        if left > 0:
            tp.linger = asyncio.get_running_loop().call_later(left, self._linger_check, tp)
        else:
            self._cool(tp)

    def _cool(self, tp: TemplatePool) -> list[asyncio.Task[None]]:
        """No more warm sandboxes of a checkpoint: those ready are destroyed (the tasks), and the
        pool retires once its claimed ones end."""
        if tp.linger is not None:
            tp.linger.cancel()
            tp.linger = None
        tp.warm_target = 0
        done = []
        while tp.warm:
            done.append(self.pool._destroy_soon(tp, tp.warm.popleft()))
        self.retire_if_idle(tp)
        return done

    async def close(self) -> None:
        """The pool closes, its sandboxes destroyed: every derived template pool is retired, its
        layers let go and its volumes unmounted, then the volumes kept mounted for a next
        sandbox."""
        for tp in [tp for tp in self.pool._template_pools() if tp.base]:
            self.pool._retire(tp)
            self._release_layers(tp)
            await asyncio.to_thread(self._unmount, tp.volumes)
        await asyncio.to_thread(self.volumes.close)

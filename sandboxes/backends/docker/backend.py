"""`DockerBackend`: creates and removes the containers of one pool (the package's docstring says
how)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from ... import _bridge
from ...errors import BackendUnavailable, LaunchError, MemorySnapshotError, SandboxLost
from ...templates import Template
from .. import ids, images, memory, readiness, watchdog
from ..base import Backend, SandboxHandle
from ..rundirs import alive, default_run_root, make_pool_dir, starttime
from . import engine, rundir
from .config import DEFAULT_IMAGE
from .orphans import POOL_DIR_PREFIX, reap_dead_owners
from .spec import Placement, container_spec

log = logging.getLogger("sandboxes.backends.docker")

_MAX_SOCKET_PATH = 107


class DockerSandbox:
    """What the docker backend knows of one sandbox (`SandboxHandle.backend_data`)."""

    def __init__(
        self, container_id: str, name: str, image: str, run_dir: Path, id_base: int = 0, cgroups: bool = True
    ) -> None:
        self.container_id = container_id
        self.name = name
        self.image = image
        self.run_dir = run_dir
        self.id_base = id_base  # a root sandbox's host id range (0: none)
        self.cgroups = cgroups  # its agent puts each program in an exec cgroup (`Template.cgroups`)
        self.pid: int | None = None  # the agent's pid as this host sees it (None: unknown)
        self.starttime: int | None = None

    def alive(self) -> bool:
        """Cheap liveness check without the Docker API: the agent process (pid + start time)."""
        if self.pid is None:
            return True
        return alive(self.pid, self.starttime)

    def __repr__(self) -> str:
        return f"DockerSandbox({self.name}, {self.container_id[:12]}, image={self.image})"


class DockerBackend(Backend):
    """Creates sandboxes as containers through the Docker engine (`docker` SDK, in threads).

    `docker_host` overrides `$DOCKER_HOST`; `default_image` is used by templates without an image.
    The engine must run on this host: the agent's socket lives in a bind-mounted host directory.
    """

    checkpoints = True
    pauses = True  # the engine's pause (its cgroup freezer)
    volumes = True
    layered_volumes = True
    # The host's CRIU entered into the container's namespaces, as on the local backend
    # (`memory.py`): the agent is the container's pid 1, its programs its children.
    memory_snapshots = True

    name = "docker"

    def __init__(
        self,
        pool_id: str | None = None,
        run_root: str | os.PathLike[str] | None = None,
        agent_bin: str | None = None,
        docker_host: str | None = None,
        default_image: str = DEFAULT_IMAGE,
        api_timeout_s: float = 60.0,
        max_workers: int = 16,
    ) -> None:
        self.pool_id = pool_id or uuid.uuid4().hex[:12]
        self.run_root = Path(run_root) if run_root else default_run_root()
        self.pool_dir = self.run_root / f"{POOL_DIR_PREFIX}{self.pool_id}"
        self.default_image = default_image
        self.engine = engine.Engine(docker_host, api_timeout_s, max_workers)
        self._agent_bin = agent_bin  # resolved when a template asks for agent_mount
        self._live: dict[str, DockerSandbox] = {}
        self._images: dict[str, str] = {}  # image id -> its unpacked root in the host's cache
        self._cleanups: set[asyncio.Task[None]] = set()
        self._dir_ready = False
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._hostname = socket.gethostname()
        me = os.getpid()
        self.owner = f"{self._hostname}:{me}:{starttime(me)}"

    # --- Backend protocol ------------------------------------------------------------------------

    async def create(self, template: Template, sandbox_id: str) -> SandboxHandle:
        """Start a container for `template`; returns once its agent pushed readiness."""
        image = template.image or self.default_image
        await self.engine.api()  # BackendUnavailable before anything is made on the host
        agent_bin = self._agent_path() if template.agent_mount else None
        image_root = await self._image_root(image)
        # Held while its run dir exists too: the container may outlive this pool (until its lease
        # lapses, or a later pool reaps it), and its ids must not go to another sandbox meanwhile.
        id_base = await ids.claim_async(sandbox_id, holder=self.pool_dir / sandbox_id)
        try:
            self._ensure_pool_dir()
            run_dir = self.pool_dir / sandbox_id
            place = Placement(
                self.pool_id,
                self.owner,
                image,
                f"sandboxes-{self.pool_id}-{sandbox_id}",
                run_dir,
                image_root,
                agent_bin,
                id_base,
            )
            return await self._create(template, sandbox_id, place)
        except BaseException:
            if id_base:
                ids.release_soon(id_base, sandbox_id)
            raise

    async def _image_root(self, image: str) -> str:
        """The unpacked root of `image` in the host's cache (`images.resolve`), once per image id:
        a name rebuilt since is unpacked anew, so the root is always the container's image."""
        image_id = await self.engine.run(engine.image_id, image)
        if image_id not in self._images:
            self._images[image_id] = str(await asyncio.to_thread(images.resolve, image))
        return self._images[image_id]

    async def _create(self, template: Template, sandbox_id: str, place: Placement) -> SandboxHandle:
        run_dir, name = place.run_dir, place.name
        sock = run_dir / "agent.sock"
        if len(str(sock).encode()) > _MAX_SOCKET_PATH:
            raise LaunchError(
                f"socket path {sock} is too long for a unix socket; set $SANDBOXES_RUN_DIR shorter",
                step="run_dir",
            )
        token = secrets.token_urlsafe(32)
        spec = container_spec(template, place)
        loop = asyncio.get_running_loop()
        try:
            ready_fd = rundir.prepare(run_dir, token)
        except OSError as e:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise LaunchError(f"cannot prepare run dir {run_dir}: {e}", step="run_dir") from e
        start = self.engine.submit(self._create_start, spec)
        ds: DockerSandbox | None = None
        try:
            container_id = await asyncio.shield(start)
            ds = DockerSandbox(container_id, name, place.image, run_dir, place.id_base, template.cgroups)
            self._live[sandbox_id] = ds
            fd, ready_fd = ready_fd, -1  # await_ready owns (and closes) it from here
            failed = readiness.launch_error(
                await rundir.await_ready(loop, fd),
                f"the agent of container {name} (image {place.image!r})",
                unreported=lambda: rundir.log_tail(run_dir),
            )
            if failed is not None:
                raise failed
        except BaseException:
            if ready_fd >= 0:
                os.close(ready_fd)
            self._live.pop(sandbox_id, None)
            # Remove whatever was made, in a task of its own: a cancelled create must not leak a
            # container whose API call is still running in a thread.
            self._cleanup_soon(start, name, run_dir)
            raise
        # Ready: the agent has read its token; it need not stay on disk.
        for leftover in ("token", "ready"):
            with contextlib.suppress(OSError):
                (run_dir / leftover).unlink()
        ds.pid = rundir.peer_pid(sock)
        ds.starttime = starttime(ds.pid) if ds.pid else None
        return SandboxHandle(
            id=sandbox_id,
            endpoint=f"unix://{sock}",
            token=token,
            backend_data=ds,
            created_at=time.time(),
        )

    def _create_start(self, spec: dict[str, Any]) -> str:
        """create + start in the engine (blocking: run in its threads)."""
        return engine.create_start(self.engine.connected, spec)

    async def pause(self, handle: SandboxHandle) -> None:
        """`docker pause`: the engine freezes the container's cgroup."""
        await self.engine.run(engine.pause_container, self._name(handle), True)

    async def resume(self, handle: SandboxHandle) -> None:
        await self.engine.run(engine.pause_container, self._name(handle), False)

    async def dump_memory(
        self, handle: SandboxHandle, dest: Path, leave_out: Collection[int] = ()
    ) -> tuple[int, Callable[[], None]]:
        agent = self._agent_pid(handle)
        if not handle.backend_data.cgroups:  # the container's own cgroups hold the agent and all
            raise MemorySnapshotError(
                "the sandbox has no cgroups (its template's cgroups=False): its programs cannot be told "
                "from its agent's own processes",
                stage="dump",
            )
        dumped = await asyncio.to_thread(
            memory.dump_programs, agent, dest, leave_stopped=True, leave_out=leave_out
        )
        return sum(p.bytes for p in dumped), lambda: memory.continue_programs(dumped)

    async def restore_memory(self, handle: SandboxHandle, src: Path) -> None:
        await asyncio.to_thread(memory.restore_programs, self._agent_pid(handle), src)

    def _agent_pid(self, handle: SandboxHandle) -> int:
        """The container's agent as this host sees it (its socket's peer, checked by start time)."""
        ds: DockerSandbox | None = handle.backend_data
        if ds is None or handle.id not in self._live or ds.pid is None or not ds.alive():
            raise SandboxLost(f"sandbox {handle.id} is not running")
        return ds.pid

    def _name(self, handle: SandboxHandle) -> str:
        ds: DockerSandbox | None = handle.backend_data
        if ds is None or handle.id not in self._live:
            raise SandboxLost(f"sandbox {handle.id} is not running")
        return ds.name

    async def destroy(self, handle: SandboxHandle) -> None:
        """Remove the container (killing it) and its run dir. Idempotent."""
        ds: DockerSandbox | None = handle.backend_data
        self._live.pop(handle.id, None)
        if ds is None:
            return
        try:
            await self.engine.run(engine.remove_container, ds.name)
        finally:
            await asyncio.to_thread(shutil.rmtree, ds.run_dir, True)
            if ds.id_base:
                ids.release_soon(ds.id_base, handle.id)

    def alive(self, handle: SandboxHandle) -> bool:
        """The agent process runs (as this host sees it; no request)."""
        ds = handle.backend_data
        return ds.alive() if isinstance(ds, DockerSandbox) else True

    async def reap_orphans(self) -> int:
        """Remove containers and run dirs of dead pools on this host; returns how many containers.

        Never raises for an unreachable engine (the pool must start and serve other templates):
        it logs and reaps nothing; the leftovers' own leases still bound their lives.
        """
        try:
            return await self.engine.run(
                reap_dead_owners, self.pool_id, self._hostname, self.run_root, self.pool_dir
            )
        except BackendUnavailable as e:
            log.warning("docker backend: cannot reap orphaned containers: %s", e)
            return 0

    async def close(self) -> None:
        """Wait for pending clean-ups, remove anything still live and the pool dir."""
        while self._cleanups:
            await asyncio.gather(*list(self._cleanups), return_exceptions=True)
        for sid, ds in list(self._live.items()):
            log.warning("docker backend closing with sandbox %s still live; removing it", sid)
            try:
                await self.engine.run(engine.remove_container, ds.name)
            except Exception:
                log.exception("removing container %s failed", ds.name)
            self._live.pop(sid, None)
            if ds.id_base:
                ids.release_soon(ds.id_base, sid)
        await asyncio.to_thread(watchdog.stop, self._watchdog)
        self._watchdog = None
        await asyncio.to_thread(shutil.rmtree, self.pool_dir, True)
        self._dir_ready = False
        self.engine.close()

    # --- host side --------------------------------------------------------------------------------

    def _agent_path(self) -> str:
        if self._agent_bin is None:
            self._agent_bin = _bridge.agent_path()
        return self._agent_bin

    def _ensure_pool_dir(self) -> None:
        if self._dir_ready:
            return
        make_pool_dir(self.run_root, self.pool_dir)
        self._watchdog = watchdog.start(self.name, self.pool_dir, self.engine.docker_host or "")
        self._dir_ready = True

    def _cleanup_soon(self, start: asyncio.Future[str], name: str, run_dir: Path) -> None:
        async def cleanup() -> None:
            with contextlib.suppress(BaseException):
                await start  # the API call may still be running in its thread
            try:
                await self.engine.run(engine.remove_container, name)
            except Exception as e:  # noqa: BLE001
                log.warning("removing container %s after a failed create: %s", name, e)
            await asyncio.to_thread(shutil.rmtree, run_dir, True)

        task = asyncio.ensure_future(cleanup())
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

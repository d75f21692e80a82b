"""The embedded default backend: each sandbox is an agent process in fresh Linux namespaces.

Layout on the host (root: `/run/sandboxes`, else `$XDG_RUNTIME_DIR/sandboxes`, else
`/tmp/sandboxes-<uid>`, with `/dev/shm` in place of `/run` or `/tmp` where only it is a tmpfs:
`rundirs.volatile_dir`; env `SANDBOXES_RUN_DIR` overrides):

    <root>/pool-<pool_id>/owner.json     {"pid", "starttime"} of the managing process
    <root>/pool-<pool_id>/<sandbox>/     run dir of one agent (its socket lives here)
    <root>/pool-<pool_id>/<sandbox>.json {"pid", "starttime", "cgroup", "run_dir"} of its agent

`reap_orphans` removes the pool dirs whose owner is dead, SIGKILLing agents still recorded there
(checked by pid *and* start time, so a reused pid is never hit) and removing their cgroups.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from .. import _bridge
from ..errors import LaunchError, SandboxLost
from ..templates import Template
from . import ids, images, memory, watchdog
from .base import Backend, SandboxHandle
from .python_template import PythonTemplates
from .rundirs import (
    OWNER_FILE,
    RUN_DIR_ENV,
    alive,
    dead_pool_dirs,
    default_run_root,
    make_pool_dir,
    read_json,
    starttime,
    write_json,
)

__all__ = ["LocalBackend", "create_backend", "default_run_root", "reap_dead_pool"]

log = logging.getLogger(__name__)

_SOCKET_NAME = "agent.sock"
_MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with the NUL
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def create_backend(**kwargs: Any) -> LocalBackend:
    """Factory used by `sandboxes.backends.get_backend`."""
    return LocalBackend(**kwargs)


class LocalBackend(Backend):
    """Launches agents through `_native.launch_local`: fresh namespaces, a cgroup, no network.

    `create` returns once the agent pushed readiness through a pipe (never polled).
    """

    checkpoints = True
    pauses = True  # the sandbox's cgroup freezer
    volumes = True
    layered_volumes = True
    memory_snapshots = True  # CRIU (`memory.py`), when the host has it

    name = "local"

    def __init__(
        self,
        pool_id: str | None = None,
        run_root: str | os.PathLike[str] | None = None,
        agent_bin: str | None = None,
    ) -> None:
        self.pool_id = pool_id or uuid.uuid4().hex[:12]
        self.run_root = Path(run_root) if run_root else default_run_root()
        self.agent_bin = agent_bin or _bridge.agent_path()  # fail at start, not at first claim
        self.pool_dir = self.run_root / f"pool-{self.pool_id}"
        self._live: dict[str, Any] = {}  # sandbox id -> _native.LocalSandbox
        self._id_bases: dict[str, int] = {}  # sandbox id -> its host id range (0: none)
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._images: dict[str, str] = {}  # template image -> its unpacked root
        self._python_templates = PythonTemplates(self.pool_dir)
        self._dir_ready = False

    # --- Backend protocol ------------------------------------------------------------------------

    async def pause(self, handle: SandboxHandle) -> None:
        await asyncio.to_thread(self._freeze, handle, True)

    async def resume(self, handle: SandboxHandle) -> None:
        await asyncio.to_thread(self._freeze, handle, False)

    def _freeze(self, handle: SandboxHandle, frozen: bool) -> None:
        local = self._live.get(handle.id)
        if local is None:
            raise SandboxLost(f"sandbox {handle.id} is not running")
        try:
            local.freeze(frozen)
        except Exception as e:
            raise _bridge.translate(e) from e

    async def dump_memory(
        self, handle: SandboxHandle, dest: Path, leave_out: Collection[int] = ()
    ) -> tuple[int, Callable[[], None]]:
        dumped = await asyncio.to_thread(
            memory.dump_programs,
            self._agent_pid(handle),
            dest,
            leave_stopped=True,
            leave_out=leave_out,
            many_tasks=True,  # restored into `Template.memory_restores` sandboxes
        )
        return sum(p.bytes for p in dumped), lambda: memory.continue_programs(dumped)

    async def restore_memory(self, handle: SandboxHandle, src: Path) -> None:
        await asyncio.to_thread(memory.restore_programs, self._agent_pid(handle), src)

    def _agent_pid(self, handle: SandboxHandle) -> int:
        local = self._live.get(handle.id)
        if local is None or not local.alive():
            raise SandboxLost(f"sandbox {handle.id} is not running")
        return int(local.pid)

    async def create(self, template: Template, sandbox_id: str) -> SandboxHandle:
        """Launch one agent for `template`; returns when it is serving."""
        self._ensure_pool_dir()
        run_dir = self.pool_dir / sandbox_id
        sock = run_dir / _SOCKET_NAME
        if len(str(sock).encode()) > _MAX_SOCKET_PATH:
            raise LaunchError(
                f"socket path {sock} is too long for a unix socket; set ${RUN_DIR_ENV} shorter",
                step="run_dir",
            )
        # Every sandbox of a root launcher gets host ids of its own (root sandboxes need them).
        id_base = await ids.claim_async(sandbox_id) if template.user == "root" or os.geteuid() == 0 else 0
        try:
            local = await self._launch(template, run_dir, id_base)
        except BaseException:
            if id_base:
                ids.release_soon(id_base, sandbox_id)
            raise
        # No await from here on: the agent is recorded before anything can cancel us.
        self._live[sandbox_id] = local
        self._id_bases[sandbox_id] = id_base
        self._write_record(sandbox_id, local)
        return SandboxHandle(
            id=sandbox_id,
            endpoint=local.endpoint,
            token=local.token,
            backend_data=local,
            created_at=time.time(),
        )

    async def _launch(self, template: Template, run_dir: Path, id_base: int) -> Any:
        image_root = await self._image_root(template.image) if template.image else ""
        native = _bridge.api()
        config = native.LaunchConfig(
            self.agent_bin,
            str(run_dir),
            uid=template.uid,
            gid=template.gid,
            lease_ttl_s=template.lease_ttl_s,
            memory_bytes=template.memory_bytes,
            max_pids=template.max_pids,
            cpu_quota=template.cpu_quota,
            work_dir=template.work_dir,
            work_size_bytes=template.work_size_bytes,
            tmp_size_bytes=template.tmp_size_bytes,
            network=template.network is True,
            egress_allow=list(template.egress_allow) if template.has_egress else None,
            seccomp=template.seccomp,
            cgroups=template.cgroups,
            ro_binds=list(template.ro_binds) or None,
            env=dict(template.env) or None,
            python_zygote=template.python_zygote,
            user=template.user,
            id_base=id_base,
            root_size_bytes=template.root_size_bytes,
            image_root=image_root,
            layers=list(template.layers) or None,
            volumes=[f"{src}:{dst}{':ro' if ro else ''}" for src, dst, ro in template.volumes] or None,
            layered_volumes=[
                ":".join(("ro" if ro else "rw", dst, *layer_dirs))
                for dst, ro, layer_dirs in template.layered_volumes
            ]
            or None,
            # A template's zygote reaches the agent as an orphan its pid namespace's init takes,
            # which a restore target's is not (`Template.memory_restores`).
            python_template=""
            if template.memory_restores
            else await self._python_templates.path_for(template),
            programs_pid_ns=template.memory_restores,
        )
        return await native.launch_local(config)

    async def _image_root(self, image: str) -> str:
        """The unpacked root of `image`, resolved once per backend (`images.resolve`)."""
        if image not in self._images:
            self._images[image] = str(await asyncio.to_thread(images.resolve, image))
        return self._images[image]

    async def destroy(self, handle: SandboxHandle) -> None:
        """SIGKILL the agent (its pid namespace dies with it), remove its cgroup and run dir."""
        local = handle.backend_data
        try:
            if local is not None:
                await asyncio.to_thread(local.kill)
        finally:
            self._live.pop(handle.id, None)
            if id_base := self._id_bases.pop(handle.id, 0):
                ids.release_soon(id_base, handle.id)
            _unlink(self.pool_dir / f"{handle.id}.json")

    def alive(self, handle: SandboxHandle) -> bool:
        """The agent process runs (the launcher's handle, no request)."""
        return handle.backend_data is None or bool(handle.backend_data.alive())

    async def reap_orphans(self) -> int:
        """Remove pool dirs of dead owners; returns how many recorded sandboxes were reaped."""
        return await asyncio.to_thread(self._reap_sync)

    async def close(self) -> None:
        """Kill anything still live (normally nothing: the pool destroyed it) and remove the pool dir."""
        leftovers = list(self._live.items())
        for sid, local in leftovers:
            log.warning("local backend closing with sandbox %s still live; killing it", sid)
            try:
                await asyncio.to_thread(local.kill)
            except Exception:
                log.exception("killing sandbox %s failed", sid)
            self._live.pop(sid, None)
            if id_base := self._id_bases.pop(sid, 0):
                ids.release_soon(id_base, sid)
        await self._python_templates.close()
        await asyncio.to_thread(watchdog.stop, self._watchdog)
        self._watchdog = None
        shutil.rmtree(self.pool_dir, ignore_errors=True)
        self._dir_ready = False

    # --- run dirs --------------------------------------------------------------------------------

    def _ensure_pool_dir(self) -> None:
        if self._dir_ready:
            return
        make_pool_dir(self.run_root, self.pool_dir)
        self._watchdog = watchdog.start(self.name, self.pool_dir)
        self._dir_ready = True

    def _write_record(self, sandbox_id: str, local: Any) -> None:
        record = {
            "pid": local.pid,
            "starttime": starttime(local.pid),
            "cgroup": local.cgroup,
            "run_dir": local.run_dir,
        }
        try:
            write_json(self.pool_dir / f"{sandbox_id}.json", record)
        except OSError:
            log.exception("cannot record sandbox %s (its lease still bounds its life)", sandbox_id)

    def _reap_sync(self) -> int:
        reaped = 0
        for d in dead_pool_dirs(self.run_root, "pool-*", self.pool_dir):
            try:
                reaped += _reap_pool_dir(d)
            except OSError as e:  # e.g. another pool reaping the same dir concurrently
                log.warning("reaping %s failed: %s", d, e)
        return reaped


# --- helpers (sync; run in a thread) -------------------------------------------------------------


def reap_dead_pool(pool_dir: Path, owner: int, owner_start: int | None) -> int:
    """The watchdog's job once `owner` died without closing `pool_dir` (`watchdog.py`): its
    sandboxes reaped at once, then the host id ranges it held; returns how many sandboxes."""
    n = _reap_pool_dir(pool_dir) if pool_dir.is_dir() else 0
    ids.release_owned_by(owner, owner_start)
    return n


def _reap_pool_dir(d: Path) -> int:
    """Kill what a dead pool left in `d` and remove it; returns how many sandboxes it held.

    Victims are the recorded agents (matched by pid and start time) and every process still in a
    cgroup named after one of the pool's sandboxes, so an agent launched just before its owner
    died, and not yet recorded, is found too.
    """
    records = {p.stem: r for p in d.glob("*.json") if p.name != OWNER_FILE and (r := read_json(p))}
    names = set(records)
    names |= {p.name for p in d.iterdir() if p.is_dir()} if d.is_dir() else set()
    cgroups = {n: _cgroup_dirs(str(records.get(n, {}).get("cgroup") or n)) for n in names}
    victims: set[tuple[int, int | None]] = set()
    for r in records.values():
        if alive(r.get("pid"), r.get("starttime")):
            victims.add((r["pid"], r.get("starttime")))
    for dirs in cgroups.values():
        victims |= {(pid, starttime(pid)) for pid in _cgroup_pids(dirs)}
    me = os.getpid()
    for pid, _ in victims:
        if pid != me:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                log.info("killed pid %s left by dead pool %s", pid, d.name)
    for dirs in cgroups.values():
        _thaw(dirs)  # a paused sandbox's processes die only once thawed
    deadline = time.monotonic() + 5.0
    while any(alive(p, s) for p, s in victims if p != me) and time.monotonic() < deadline:
        time.sleep(0.01)
    for dirs in cgroups.values():
        _remove_cgroup_dirs(dirs)
    shutil.rmtree(d, ignore_errors=True)
    return len(names)


def _cgroup_pids(dirs: list[Path]) -> set[int]:
    """Pids in these cgroups and their descendants."""
    pids: set[int] = set()
    for top in dirs:
        if not top.is_dir():
            continue
        for root, _dirs, _files in os.walk(top):
            try:
                text = (Path(root) / "cgroup.procs").read_text()
            except OSError:
                continue
            pids |= {int(x) for x in text.split()}
    return pids


def _thaw(dirs: list[Path]) -> None:
    """Thaw whichever of these cgroups is a v1 freezer (a v2 cgroup's frozen tasks die on
    SIGKILL)."""
    for top in dirs:
        state = top / "freezer.state"
        if state.exists():
            with contextlib.suppress(OSError):
                state.write_text("THAWED")


def _own_cgroup_dirs() -> list[Path]:
    """This process's own cgroup directory in each hierarchy sandboxes' cgroups are made in (v1:
    one per controller hierarchy; v2: one), as the exec crate discovers it (`own_cgroup_dirs`)."""
    return [Path(d) for _, d in _bridge.native().own_cgroup_dirs()]


def _cgroup_dirs(cgroup: str) -> list[Path]:
    """Every directory of a sandbox's cgroup: the recorded one plus `<own>/sandboxes/<name>` in
    each hierarchy (on cgroup v1 the launcher makes one per controller, and reports the first).
    `cgroup` may also be just the name (the sandbox id)."""
    if not cgroup:
        return []
    recorded = Path(cgroup)
    out = [recorded] if recorded.is_absolute() else []
    for own in _own_cgroup_dirs():
        d = own / "sandboxes" / recorded.name
        if d not in out:
            out.append(d)
    return out


def _remove_cgroup_dirs(dirs: list[Path]) -> None:
    """rmdir these cgroups (children first); bounded retry on EBUSY."""
    for top in dirs:
        if not top.is_dir():
            continue
        deadline = time.monotonic() + 2.0
        for root, _dirs, _files in sorted(os.walk(top, topdown=False), key=lambda t: -len(t[0])):
            while True:
                try:
                    os.rmdir(root)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        log.warning("cannot remove cgroup %s: %s", root, e)
                        break
                    time.sleep(0.01)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass

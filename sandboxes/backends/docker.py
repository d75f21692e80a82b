"""The docker backend: each sandbox is a container whose entrypoint is the agent.

The pool reaches the agent over a unix socket in a host directory bind-mounted into the
container, with the native gRPC client: no `docker exec`, no network. The Docker API is used
only to create and remove containers (control plane), always from a small thread pool so the
event loop never blocks on it.

Layout on the host (the root is the local backend's: `SANDBOXES_RUN_DIR`, `/run/sandboxes`, ...):

    <root>/docker-<pool_id>/owner.json     {"pid", "starttime"} of the managing process
    <root>/docker-<pool_id>/<sandbox>/     run dir (0700), mounted at /run/sandbox:
        token       the agent's token (0600), removed as soon as the agent is ready
        ready       a FIFO, the agent's readiness channel (`readiness`): one byte once it serves,
                    or the failure record of its start-up step (readiness is pushed)
        agent.sock  the agent's socket (0600, owned by root: only the manager may connect)
        agent.log   the agent's stderr (for people: the backend reads the step from `ready`)

Container settings: read-only root (the container's own, which only the agent sees), the image
unpacked into the host's image cache (`images.resolve`, once per image id) bind-mounted read-only
at `IMAGE_MOUNT`, `network_mode="none"` unless the template allows the network, every capability
dropped but the few the agent needs (`AGENT_CAPABILITIES`), `no-new-privileges`, a private cgroup
namespace, memory / pids / CPU limits from the template, `auto_remove` (a container whose agent
exited -- its lease lapsed -- removes itself) and the labels `sandboxes.pool`, `sandboxes.owner`
(`host:pid:starttime`), `sandboxes.lease_ttl`, `sandboxes.sandbox`, `sandboxes.run_dir`.

The sandbox is the agent's, as on the local backend: the agent builds the root (an overlay of
the unpacked image, idmapped into a user namespace whose ids are a host range of the sandbox's
own, `ids.claim`, with its upper layer, work dir and /tmp on tmpfs bounded in size and inodes),
pivots into it and runs programs in that namespace: uid 65534 by default, root (with a writable
root of `root_size_bytes`) for `Template.user="root"`, never with a capability over the host;
its per-exec cgroups live in the container's cgroup namespace. The agent binds its socket before
it pivots, so the manager reaches it through the run dir while no program can. Docker's seccomp
profile is off (`SECURITY_OPTS`: it refuses pivot_root): the agent's own filter, worn by its
serving thread and by every program, is the one that holds.

Readiness: the entrypoint is `/bin/sh -c` that opens the `ready` FIFO as fd 3 and execs the agent
with `--ready-fd 3` (the agent has no `--ready-file`; an inherited fd cannot cross the container
boundary, so the shell bridges it). The backend awaits the FIFO with `loop.add_reader`: `R` means
ready; a failure record names the step that failed (the agent's, or the shell's `agent` when the
image has no agent); end-of-file means the agent died unreported (`agent_start`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import secrets
import shutil
import socket
import stat
import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .. import _bridge
from ..errors import BackendUnavailable, LaunchError, SandboxError
from ..templates import Template
from . import ids, images, readiness
from .base import SandboxHandle
from .rundirs import alive, default_run_root, make_private_dir, read_json, starttime, write_json

__all__ = [
    "AGENT_CAPABILITIES",
    "AGENT_IN_IMAGE",
    "DEFAULT_IMAGE",
    "DockerBackend",
    "DockerSandbox",
    "create_backend",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_IMAGE = "sandboxes-sandbox:latest"
AGENT_IN_IMAGE = "/usr/local/bin/sandbox-agent"
RUN_MOUNT = "/run/sandbox"
IMAGE_MOUNT = "/run/sandbox-image"  # the unpacked image, read-only (the root's lower layer)
BUILD_DIR = "/run/sandbox-disk"  # where the agent mounts the sandbox's disk and builds its root
DEFAULT_PIDS_LIMIT = 1024  # per container when the template sets no max_pids

LABEL_POOL = "sandboxes.pool"
LABEL_OWNER = "sandboxes.owner"
LABEL_LEASE = "sandboxes.lease_ttl"
LABEL_SANDBOX = "sandboxes.sandbox"
LABEL_RUN_DIR = "sandboxes.run_dir"
LABEL_TEMPLATE = "sandboxes.template"

# Every capability is dropped except these, each needed by the agent (root in the container) to
# run user programs as another uid and to manage their files. User programs get none of them:
# the agent drops to the sandbox uid, which clears all capabilities, with no_new_privs set.
AGENT_CAPABILITIES = {
    "SETUID": "setresuid() to the sandbox uid before exec'ing a user program",
    "SETGID": "setresgid() / setgroups() to the sandbox gid before exec'ing a user program",
    "KILL": "signal and kill user programs, which run under another uid",
    "CHOWN": "hand files written through the API to the sandbox uid",
    "DAC_OVERRIDE": "read, write and remove files in the work dir whatever their mode "
    "(the work dir belongs to the sandbox uid; programs may create 0600 files)",
    "FOWNER": "chmod / utime files the agent does not own (written by user programs)",
    "SYS_ADMIN": "mount the sandbox's root (overlay of the idmapped image, tmpfs), pivot_root into "
    "it, make the programs' user namespace",
}
# An allow-list sandbox's agent starts in the host's network namespace (its proxy's way out) and
# moves itself and its programs to a fresh one.
EGRESS_CAPABILITIES = {
    "NET_ADMIN": "bring up lo in the sandbox's own network namespace",
    "NET_BIND_SERVICE": "serve the sandbox's DNS on port 53 and allowed names on their ports",
}
# Docker's seccomp profile refuses pivot_root; the agent's own filter, worn by its serving thread
# and every program, is the one that holds. No AppArmor profile either (docker-default refuses
# mounts): the agent builds the root, then nothing in the sandbox can mount.
SECURITY_OPTS = ("no-new-privileges", "seccomp=unconfined", "apparmor=unconfined")

# The entrypoint script. fd 3 is the `ready` FIFO (opened first, so any failure after this point
# closes it: the backend sees end-of-file), stderr goes to agent.log in the run dir (readable from
# the host after an auto-removed container is gone). $1 is the agent path, the rest its flags. A
# missing agent is reported as the failure record of step `agent`.
_ENTRYPOINT = (
    "exec 3>" + RUN_MOUNT + "/ready 2>>" + RUN_MOUNT + "/agent.log; "
    'a="$1"; shift; '
    '[ -x "$a" ] || { m="sandboxes: no executable agent at $a in this image"; '
    'echo "$m" >&2; printf "F%s\n%s" agent "$m" >&3; exit 127; }; '
    'exec "$a" "$@" --ready-fd 3'
)
_MAX_SOCKET_PATH = 107
_UNOWNED_GRACE_S = 60.0
_LOG_TAIL = 2000


def create_backend(**kwargs: Any) -> DockerBackend:
    """Factory used by `sandboxes.backends.get_backend`."""
    return DockerBackend(**kwargs)


class DockerSandbox:
    """What the docker backend knows of one sandbox (`SandboxHandle.backend_data`)."""

    def __init__(self, container_id: str, name: str, image: str, run_dir: Path, id_base: int = 0) -> None:
        self.container_id = container_id
        self.name = name
        self.image = image
        self.run_dir = run_dir
        self.id_base = id_base  # a root sandbox's host id range (0: none)
        self.pid: int | None = None  # the agent's pid as this host sees it (None: unknown)
        self.starttime: int | None = None

    def alive(self) -> bool:
        """Cheap liveness check without the Docker API: the agent process (pid + start time)."""
        if self.pid is None:
            return True
        return alive(self.pid, self.starttime)

    def __repr__(self) -> str:
        return f"DockerSandbox({self.name}, {self.container_id[:12]}, image={self.image})"


class DockerBackend:
    """Creates sandboxes as containers through the Docker engine (`docker` SDK, in threads).

    `docker_host` overrides `$DOCKER_HOST`; `default_image` is used by templates without an image.
    The engine must run on this host: the agent's socket lives in a bind-mounted host directory.
    """

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
        self.pool_dir = self.run_root / f"docker-{self.pool_id}"
        self.default_image = default_image
        self._agent_bin = agent_bin  # resolved when a template asks for agent_mount
        self._docker_host = docker_host
        self._api_timeout_s = api_timeout_s
        self._max_workers = max_workers
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="sandboxes-docker"
        )
        self._client: Any = None  # docker.DockerClient, made on first use (in a thread)
        self._client_lock = asyncio.Lock()
        self._live: dict[str, DockerSandbox] = {}
        self._images: dict[str, str] = {}  # image id -> its unpacked root in the host's cache
        self._cleanups: set[asyncio.Task[None]] = set()
        self._dir_ready = False
        self._hostname = socket.gethostname()
        me = os.getpid()
        self.owner = f"{self._hostname}:{me}:{starttime(me)}"

    # --- Backend protocol ------------------------------------------------------------------------

    async def create(self, template: Template, sandbox_id: str) -> SandboxHandle:
        """Start a container for `template`; returns once its agent pushed readiness."""
        image = template.image or self.default_image
        await self._api()  # BackendUnavailable before anything is made on the host
        agent_bin = self._agent_path() if template.agent_mount else None
        image_root = await self._image_root(image)
        # Held while its run dir exists too: the container may outlive this pool (until its lease
        # lapses, or a later pool reaps it), and its ids must not go to another sandbox meanwhile.
        id_base = ids.claim(sandbox_id, holder=self.pool_dir / sandbox_id)
        try:
            return await self._create(template, sandbox_id, image, agent_bin, image_root, id_base)
        except BaseException:
            if id_base:
                ids.release(id_base, sandbox_id)
            raise

    async def _image_root(self, image: str) -> str:
        """The unpacked root of `image` in the host's cache (`images.resolve`), once per image id:
        a name rebuilt since is unpacked anew, so the root is always the container's image."""
        import docker.errors as de

        try:
            image_id = (await self._call(self._client.api.inspect_image, image))["Id"]
        except de.ImageNotFound as e:
            raise _missing_image(image, e) from e
        except de.DockerException as e:
            raise _translate(e, "inspect", image) from e
        if image_id not in self._images:
            self._images[image_id] = str(await asyncio.to_thread(images.resolve, image))
        return self._images[image_id]

    async def _create(
        self,
        template: Template,
        sandbox_id: str,
        image: str,
        agent_bin: str | None,
        image_root: str,
        id_base: int,
    ) -> SandboxHandle:
        self._ensure_pool_dir()
        run_dir = self.pool_dir / sandbox_id
        sock = run_dir / "agent.sock"
        if len(str(sock).encode()) > _MAX_SOCKET_PATH:
            raise LaunchError(
                f"socket path {sock} is too long for a unix socket; set $SANDBOXES_RUN_DIR shorter",
                step="run_dir",
            )
        token = secrets.token_urlsafe(32)
        name = f"sandboxes-{self.pool_id}-{sandbox_id}"
        spec = self._container_spec(template, image, name, run_dir, agent_bin, image_root, id_base)
        loop = asyncio.get_running_loop()
        try:
            ready_fd = _prepare_run_dir(run_dir, token)
        except OSError as e:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise LaunchError(f"cannot prepare run dir {run_dir}: {e}", step="run_dir") from e
        start = loop.run_in_executor(self._executor, functools.partial(self._create_start, spec))
        ds: DockerSandbox | None = None
        try:
            container_id = await asyncio.shield(start)
            ds = DockerSandbox(container_id, name, image, run_dir, id_base)
            self._live[sandbox_id] = ds
            fd, ready_fd = ready_fd, -1  # _await_ready owns (and closes) it from here
            failed = readiness.launch_error(
                await _await_ready(loop, fd),
                f"the agent of container {name} (image {image!r})",
                unreported=lambda: _log_tail(run_dir),
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
        ds.pid = _peer_pid(sock)
        ds.starttime = starttime(ds.pid) if ds.pid else None
        return SandboxHandle(
            id=sandbox_id,
            endpoint=f"unix://{sock}",
            token=token,
            backend_data=ds,
            created_at=time.time(),
        )

    async def destroy(self, handle: SandboxHandle) -> None:
        """Remove the container (killing it) and its run dir. Idempotent."""
        ds: DockerSandbox | None = handle.backend_data
        self._live.pop(handle.id, None)
        if ds is None:
            return
        try:
            await self._call(self._remove_container, ds.name)
        finally:
            await asyncio.to_thread(shutil.rmtree, ds.run_dir, True)
            if ds.id_base:
                ids.release(ds.id_base, handle.id)

    async def reap_orphans(self) -> int:
        """Remove containers and run dirs of dead pools on this host; returns how many containers.

        Never raises for an unreachable engine (the pool must start and serve other templates):
        it logs and reaps nothing; the leftovers' own leases still bound their lives.
        """
        try:
            api = await self._api()
            return await self._call(self._reap_sync, api)
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
                await self._call(self._remove_container, ds.name)
            except Exception:
                log.exception("removing container %s failed", ds.name)
            self._live.pop(sid, None)
            if ds.id_base:
                ids.release(ds.id_base, sid)
        await asyncio.to_thread(shutil.rmtree, self.pool_dir, True)
        self._dir_ready = False
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- the Docker API (sync, run in the executor) ---------------------------------------------

    async def _api(self) -> Any:
        """The low-level `docker.APIClient`; connects on first use. `BackendUnavailable` if not."""
        if self._client is None:
            async with self._client_lock:
                if self._client is None:
                    self._client = await self._call(self._connect)
        return self._client.api

    def _connect(self) -> Any:
        try:
            import docker
        except ImportError as e:
            raise BackendUnavailable(
                "the docker backend needs the `docker` package: pip install 'sandboxes[docker]'",
                detail=str(e),
            ) from e
        try:
            if self._docker_host:
                client = docker.DockerClient(
                    base_url=self._docker_host,
                    timeout=int(self._api_timeout_s),
                    max_pool_size=self._max_workers,
                )
            else:
                client = docker.from_env(timeout=int(self._api_timeout_s), max_pool_size=self._max_workers)
            client.api.ping()
        except Exception as e:
            raise BackendUnavailable(f"the Docker engine does not answer: {e}", detail=str(e)) from e
        return client

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args))
        except RuntimeError as e:  # executor shut down
            raise BackendUnavailable(f"docker backend is closed: {e}") from e

    def _container_spec(
        self,
        t: Template,
        image: str,
        name: str,
        run_dir: Path,
        agent_bin: str | None,
        image_root: str,
        id_base: int,
    ) -> dict[str, Any]:
        agent_args = [
            "--listen", f"unix:{RUN_MOUNT}/agent.sock",
            "--token-file", f"{RUN_MOUNT}/token",
            "--lease-ttl", repr(float(t.lease_ttl_s)),
            "--work-dir", t.work_dir,
            "--uid", str(t.uid),
            "--gid", str(t.gid),
            "--namespaces", "pid,mnt,net,ipc,uts,cgroup,user",
            "--python-zygote", t.python_zygote,
            "--new-root",
            "--build-dir", BUILD_DIR,
            "--image-root", IMAGE_MOUNT,
            "--user", t.user,
            "--id-base", str(id_base),
            "--root-size", str(t.root_size_bytes),
            "--work-size", str(t.work_size_bytes),
            "--tmp-size", str(t.tmp_size_bytes),
        ]  # fmt: skip
        if not t.seccomp:
            agent_args.append("--no-seccomp")
        if not t.cgroups:
            agent_args.append("--no-cgroups")
        for k, v in t.env.items():
            agent_args += ["--env", f"{k}={v}"]
        for rule in t.egress_allow:
            agent_args += ["--egress-allow", rule]
        if t.egress_allow:  # the engine names no host in the host's network namespace
            agent_args += ["--hostname", "sandbox"]
        if t.network is True:  # the bridge's resolver, which the engine gave the container
            agent_args.append("--outside-dns")
        binds = {
            str(run_dir): {"bind": RUN_MOUNT, "mode": "rw"},
            image_root: {"bind": IMAGE_MOUNT, "mode": "ro"},
        }
        if agent_bin:
            binds[agent_bin] = {"bind": AGENT_IN_IMAGE, "mode": "ro"}
        for p in t.ro_binds:
            binds[p] = {"bind": p, "mode": "ro"}  # into the container, and from there into the root
            agent_args += ["--ro-bind", p]
        host_config: dict[str, Any] = {
            "binds": binds,
            # The mount point of the sandbox's disk (a directory docker makes in the read-only root).
            "tmpfs": {BUILD_DIR: "rw,nosuid,nodev,noexec,size=1m,mode=0700"},
            "read_only": True,
            "network_mode": _network_mode(t),
            "cap_drop": ["ALL"],
            "cap_add": sorted({*AGENT_CAPABILITIES, *(EGRESS_CAPABILITIES if t.egress_allow else ())}),
            "security_opt": list(SECURITY_OPTS),
            "cgroupns": "private",
            "pids_limit": t.max_pids or DEFAULT_PIDS_LIMIT,
            "auto_remove": True,
            "init": False,
        }
        if t.memory_bytes:
            host_config["mem_limit"] = t.memory_bytes
            host_config["memswap_limit"] = t.memory_bytes  # no swap beyond the limit
        if t.cpu_quota:
            host_config["nano_cpus"] = int(t.cpu_quota * 1e9)
        labels = {
            LABEL_POOL: self.pool_id,
            LABEL_OWNER: self.owner,
            LABEL_LEASE: repr(float(t.lease_ttl_s)),
            LABEL_SANDBOX: run_dir.name,
            LABEL_RUN_DIR: str(run_dir),
            LABEL_TEMPLATE: t.name,
        }
        return {
            "image": image,
            "name": name,
            "entrypoint": ["/bin/sh", "-c", _ENTRYPOINT, "sandbox-agent", AGENT_IN_IMAGE, *agent_args],
            "user": "0:0",
            "working_dir": "/",
            "hostname": None if t.egress_allow else "sandbox",
            "labels": labels,
            "host_config": host_config,
        }

    def _create_start(self, spec: dict[str, Any]) -> str:
        """create + start (2 API calls); the container is removed again if start fails."""
        import docker.errors as de

        api = self._client.api
        host_config = api.create_host_config(**spec["host_config"])
        image = spec["image"]
        try:
            created = api.create_container(
                image=image,
                name=spec["name"],
                entrypoint=spec["entrypoint"],
                user=spec["user"],
                working_dir=spec["working_dir"],
                hostname=spec["hostname"],
                labels=spec["labels"],
                host_config=host_config,
            )
        except de.ImageNotFound as e:
            raise _missing_image(image, e) from e
        except Exception as e:
            raise _translate(e, "create", image) from e
        cid = created["Id"]
        try:
            api.start(cid)
        except Exception as e:
            with contextlib.suppress(Exception):
                api.remove_container(cid, force=True)
            raise _translate(e, "start", image) from e
        return cid

    def _remove_container(self, ref: str) -> None:
        """Force-remove (SIGKILL + remove); a container already gone or being removed is fine."""
        import docker.errors as de

        try:
            self._client.api.remove_container(ref, force=True)
        except de.NotFound:
            pass
        except de.APIError as e:
            if e.status_code == 409 and "in progress" in str(e.explanation):  # auto_remove racing
                return
            raise _translate(e, "remove", "") from e
        except Exception as e:
            raise _translate(e, "remove", "") from e

    def _reap_sync(self, api: Any) -> int:
        try:
            containers = api.containers(all=True, filters={"label": LABEL_OWNER})
        except Exception as e:
            raise _translate(e, "list", "") from e
        reaped = 0
        dead: set[tuple[int, int | None]] = set()
        for c in containers:
            labels = c.get("Labels") or {}
            if labels.get(LABEL_POOL) == self.pool_id:
                continue
            host, pid, start = _parse_owner(labels.get(LABEL_OWNER, ""))
            if host != self._hostname or pid is None or alive(pid, start):
                continue  # another host's, or its owner still runs
            try:
                self._remove_container(c["Id"])
            except SandboxError as e:
                log.warning("removing orphaned container %s failed: %s", c["Id"][:12], e)
                continue
            log.info("removed container %s left by dead pool %s", c["Id"][:12], labels.get(LABEL_POOL))
            reaped += 1
            run_dir = _safe_run_dir(labels.get(LABEL_RUN_DIR, ""), labels.get(LABEL_SANDBOX, ""))
            if run_dir is not None:
                shutil.rmtree(run_dir, ignore_errors=True)
            dead.add((pid, start))
        self._sweep_pool_dirs()
        for pid, start in dead:  # their id ranges, held while the run dirs were there
            ids.release_owned_by(pid, start)
        return reaped

    def _sweep_pool_dirs(self) -> None:
        """Remove `docker-*` pool dirs of dead owners (their containers were removed above or are
        gone by themselves)."""
        if not self.run_root.is_dir():
            return
        for d in self.run_root.glob("docker-*"):
            if d == self.pool_dir or not d.is_dir():
                continue
            owner = read_json(d / "owner.json")
            if owner is None:
                try:
                    if time.time() - d.stat().st_mtime < _UNOWNED_GRACE_S:
                        continue
                except FileNotFoundError:
                    continue
            elif alive(owner.get("pid"), owner.get("starttime")):
                continue
            shutil.rmtree(d, ignore_errors=True)

    # --- host side --------------------------------------------------------------------------------

    def _agent_path(self) -> str:
        if self._agent_bin is None:
            self._agent_bin = _bridge.agent_path()
        return self._agent_bin

    def _ensure_pool_dir(self) -> None:
        if self._dir_ready:
            return
        make_private_dir(self.run_root)
        self.pool_dir.mkdir(mode=0o700, exist_ok=True)
        me = os.getpid()
        write_json(self.pool_dir / "owner.json", {"pid": me, "starttime": starttime(me)})
        self._dir_ready = True

    def _cleanup_soon(self, start: asyncio.Future[str], name: str, run_dir: Path) -> None:
        async def cleanup() -> None:
            with contextlib.suppress(BaseException):
                await start  # the API call may still be running in its thread
            try:
                await self._call(self._remove_container, name)
            except Exception as e:  # noqa: BLE001
                log.warning("removing container %s after a failed create: %s", name, e)
            await asyncio.to_thread(shutil.rmtree, run_dir, True)

        task = asyncio.ensure_future(cleanup())
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)


# --- helpers -------------------------------------------------------------------------------------


def _prepare_run_dir(run_dir: Path, token: str) -> int:
    """Make the run dir with its token file and readiness FIFO; returns the FIFO's read end
    (non-blocking: opening it does not wait for the writer)."""
    run_dir.mkdir(mode=0o700)
    fd = os.open(run_dir / "token", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, token.encode())
    finally:
        os.close(fd)
    os.mkfifo(run_dir / "ready", 0o600)
    return os.open(run_dir / "ready", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)


async def _await_ready(loop: asyncio.AbstractEventLoop, fd: int) -> bytes:
    """Wait (no thread, no polling) until the FIFO has the agent's report (its ready byte or its
    failure record, which arrives whole) or its writer went away without one (b""). Closes `fd`."""
    fut: asyncio.Future[bytes] = loop.create_future()

    def readable() -> None:
        # Before any writer opened the FIFO the kernel does not report it readable; after one
        # did, readable means data or end-of-file.
        try:
            data = os.read(fd, readiness.MAX_RECORD)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not fut.done():
            fut.set_result(data)

    loop.add_reader(fd, readable)
    try:
        return await fut
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _peer_pid(sock: Path) -> int | None:
    """The agent's pid as this host sees it (SO_PEERCRED of its socket); None if unavailable."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(str(sock))
            cred = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid = struct.unpack("3i", cred)[0]
        return pid if pid > 0 else None
    except OSError:
        return None


def _missing_image(image: str, e: BaseException) -> LaunchError:
    return LaunchError(
        f"docker image {image!r} is not in the engine (nothing is pulled: build it with "
        f"`make images`, or `docker load` it)",
        detail=str(e),
        step="image",
    )


def _network_mode(t: Template) -> str:
    """`none`; the bridge for `network=True`; for an allow-list the host's namespace, which only
    the agent's egress helper keeps (programs are in a namespace with only lo): connections are
    opened where the local backend opens them, and the allow-list is the only way out."""
    if t.egress_allow:
        return "host"
    return "bridge" if t.network else "none"


def _log_tail(run_dir: Path) -> str:
    try:
        with open(run_dir / "agent.log", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _LOG_TAIL))
            text = f.read().decode(errors="replace").strip()
    except OSError:
        return "(no output)"
    return text or "(no output)"


def _parse_owner(owner: str) -> tuple[str, int | None, int | None]:
    parts = owner.rsplit(":", 2)
    if len(parts) != 3:
        return "", None, None
    host, pid_s, start_s = parts
    try:
        pid = int(pid_s)
    except ValueError:
        return host, None, None
    try:
        start = int(start_s)
    except ValueError:
        start = None
    return host, pid, start


def _safe_run_dir(path: str, sandbox_id: str) -> Path | None:
    """The run dir named by a container label, only if it has our shape (never rm an arbitrary path)."""
    if not path or not sandbox_id:
        return None
    p = Path(path)
    if not p.is_absolute() or p.name != sandbox_id or not p.parent.name.startswith("docker-"):
        return None
    if ".." in p.parts:
        return None
    try:
        st = p.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return None
    return p


def _translate(e: BaseException, step: str, image: str) -> SandboxError:
    """A Docker SDK / transport failure as a `sandboxes.errors` exception."""
    if isinstance(e, SandboxError):
        return e
    try:
        import docker.errors as de
        import requests
    except ImportError:  # pragma: no cover - the SDK is there if we got this far
        return BackendUnavailable(str(e))
    if isinstance(e, de.APIError):
        why = str(e.explanation or e)
        if step == "start" and ("/bin/sh" in why and ("no such file" in why or "not found" in why)):
            return LaunchError(
                f"image {image!r} has no /bin/sh, which the docker backend's entrypoint needs: {why}",
                detail=why,
                step="entrypoint",
            )
        if e.status_code is not None and e.status_code >= 500 and step in ("list", "remove"):
            return BackendUnavailable(f"docker {step} failed: {why}", detail=why)
        where = f" (image {image!r})" if image else ""
        return LaunchError(f"docker {step} failed{where}: {why}", detail=why, step=step)
    if isinstance(e, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, de.DockerException)):
        return BackendUnavailable(f"the Docker engine does not answer ({step}): {e}", detail=str(e))
    return LaunchError(f"docker {step} failed: {e!r}", detail=str(e), step=step)

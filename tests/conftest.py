"""Shared fixtures. Tests drive the real agent binary through the real native module.

Every test session runs its pools under a private run dir and checks at the end, from the outside,
that it left nothing behind: no `sandbox-agent` process it started, no cgroup, no run dir.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
import pytest_asyncio

# Short, private run dir for the whole session (unix socket paths must stay under 108 bytes).
RUN_ROOT = Path(tempfile.mkdtemp(prefix="sbx-", dir="/tmp"))
os.environ["SANDBOXES_RUN_DIR"] = str(RUN_ROOT)
# Images the local backend unpacks go to a cache of this session's, removed at its end.
IMAGE_CACHE = Path(tempfile.mkdtemp(prefix="sbx-images-", dir="/var/tmp"))
os.environ["SANDBOXES_IMAGE_CACHE"] = str(IMAGE_CACHE)
# Checkpoints and their layers likewise.
CHECKPOINT_DIR = Path(tempfile.mkdtemp(prefix="sbx-checkpoints-", dir="/var/tmp"))
os.environ["SANDBOXES_CHECKPOINT_DIR"] = str(CHECKPOINT_DIR)
REPO = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO / "deploy" / "docker" / "build_images.sh"

import grpc
from helpers import (  # noqa: F401
    agent_pids,
    become_subreaper,
    cgroup_exists,
    pgrep,
    pid_running,
    sandbox_containers,
    wait_until,
)
from server_helpers import KEY_A, KEY_B, KEYS

import sandboxes
from sandboxes import _bridge
from sandboxes._proto.service_pb2_grpc import SandboxesStub
from sandboxes.backends.local import _cgroup_dirs
from sandboxes.backends.rundirs import alive, starttime
from sandboxes.client import AsyncSandboxClient
from sandboxes.server.app import Server
from sandboxes.server.auth import ApiKeys

# --- session: native module present, launches recorded, leak check ------------------------------


class LaunchLog:
    """Every agent launched in this session (through any path), for the leak check."""

    def __init__(self) -> None:
        self.launched: list[dict[str, Any]] = []


@pytest.fixture(scope="session")
def native() -> Any:
    """The native module; fails the run with a clear message when it was not built."""
    try:
        mod = _bridge.native()
        _bridge.agent_path()
    except sandboxes.LaunchError as e:
        pytest.fail(f"native parts are not built ({e}); run `make install` first", pytrace=False)
    return mod


def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    """A session that ran no test (all deselected) never set `no_leaks` up: its dirs go here."""
    shutil.rmtree(RUN_ROOT, ignore_errors=True)
    shutil.rmtree(IMAGE_CACHE, ignore_errors=True)
    shutil.rmtree(CHECKPOINT_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def own_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's pools and servers keep their checkpoints and volumes in directories of the
    test's own: a server's key sees exactly the checkpoints and volumes its test made."""
    monkeypatch.setenv("SANDBOXES_CHECKPOINT_DIR", str(tmp_path / "checkpoints"))
    monkeypatch.setenv("SANDBOXES_VOLUME_DIR", str(tmp_path / "volumes"))


def volume_mounts() -> set[str]:
    """Mount points of volumes (`sandboxes.state.volumes`: `<dir>/mnt/vol-<id>`) on this host."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return {p for line in lines if re.search(r"/mnt/vol-[0-9a-f]{16}$", p := line.split()[4])}


@pytest.fixture(scope="session", autouse=True)
def no_leaks() -> Any:
    """Fails the session when an agent process, cgroup, run dir or container it created is left behind."""
    become_subreaper()
    before = agent_pids()
    containers_before = sandbox_containers(RUN_ROOT)
    mounts_before = volume_mounts()
    log = LaunchLog()
    mod = None
    original = None
    try:
        mod = _bridge.native()
    except sandboxes.LaunchError:
        pass
    if mod is not None:
        original = mod.launch_local

        async def recording_launch(config: Any) -> Any:
            local = await original(config)
            log.launched.append(
                {
                    "pid": local.pid,
                    "starttime": starttime(local.pid),
                    "cgroup": local.cgroup,
                    "run_dir": local.run_dir,
                }
            )
            return local

        mod.launch_local = recording_launch
    yield log
    if mod is not None:
        mod.launch_local = original

    def leftovers() -> list[str]:
        found = [f"agent process {p}" for p in sorted(agent_pids() - before)]
        for rec in log.launched:
            # Pid and start time: pids wrap (pid_max is 32768 here) over a run of this many
            # processes, and a recorded agent's pid may be another process's by the end.
            if rec["starttime"] is not None and alive(rec["pid"], rec["starttime"]):
                found.append(f"agent pid {rec['pid']}")
            if rec["cgroup"] and cgroup_exists(rec["cgroup"]):
                found.append(f"cgroup {rec['cgroup']}")
            if rec["run_dir"] and os.path.exists(rec["run_dir"]):
                found.append(f"run dir {rec['run_dir']}")
        if RUN_ROOT.exists():
            found += [f"run dir {p}" for p in RUN_ROOT.iterdir()]
        found += [f"container {c}" for c in sorted(sandbox_containers(RUN_ROOT) - containers_before)]
        found += [f"volume mount {m}" for m in sorted(volume_mounts() - mounts_before)]
        return found

    deadline = time.monotonic() + 10.0  # bound for the kernel to finish tearing namespaces down
    while (found := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Clean up whatever leaked, so one failing run does not poison the next.
    for p in agent_pids() - before:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for rec in log.launched:
        for d in _cgroup_dirs(rec["cgroup"] or ""):
            if d.is_dir():
                subprocess.run(["find", str(d), "-depth", "-type", "d", "-delete"], check=False)
    for c in sandbox_containers(RUN_ROOT) - containers_before:
        subprocess.run(["docker", "rm", "-f", c], capture_output=True, check=False)
    for m in volume_mounts() - mounts_before:
        subprocess.run(["umount", "-l", m], capture_output=True, check=False)
    shutil.rmtree(RUN_ROOT, ignore_errors=True)
    shutil.rmtree(IMAGE_CACHE, ignore_errors=True)
    shutil.rmtree(CHECKPOINT_DIR, ignore_errors=True)
    if found:
        pytest.fail("the session leaked: " + ", ".join(found), pytrace=False)


# --- what CI always has: a Docker engine, the loopback registry, root, CRIU ----------------------

# `.ci/run` sets SANDBOXES_CI=1: there a test that finds one of them missing fails instead of
# skipping, so a CI machine that lost one cannot pass by skipping what needs it. Elsewhere it
# skips with its reason (`make test` runs `pytest -rs`, which prints them).
CI = os.environ.get("SANDBOXES_CI") == "1"


def skip_or_fail(reason: str) -> NoReturn:
    """Skips the test with `reason`; in CI fails it."""
    if CI:
        pytest.fail(f"{reason} (SANDBOXES_CI=1: CI has it, so this is a failure)", pytrace=False)
    pytest.skip(reason)


def _missing(what: str) -> str | None:
    """Why `what` is missing here (None: it is present)."""
    if what == "root":
        return None if os.geteuid() == 0 else "needs root"
    if what == "registry":
        from sandboxes_testing.loopback_registry import REGISTRY_BIN

        return None if os.path.exists(REGISTRY_BIN) else "needs the loopback registry (`make test-tools`)"
    if what == "criu":
        from sandboxes.server.criu import probe

        host = probe()
        return None if host.ok else f"needs CRIU 4.1 or later (`make criu`): {host.reason}"
    raise ValueError(f"requires({what!r}): root, registry or criu")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "requires(what, reason=...): the test needs root, the loopback registry (`make test-tools`) or"
        " CRIU (`make criu`); without it the test skips, in CI (SANDBOXES_CI=1) it fails",
    )


def pytest_runtest_setup(item: Any) -> None:
    for mark in item.iter_markers("requires"):
        if (why := _missing(mark.args[0])) is not None:
            skip_or_fail(mark.kwargs.get("reason") or why)


# --- the Docker engine and the images `make images` builds ---------------------------------------


@pytest.fixture(scope="session")
def docker_api() -> Any:
    """The low-level Docker API client; skips the module when no engine answers (fails in CI)."""
    import docker

    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as e:  # noqa: BLE001
        skip_or_fail(f"no Docker engine answers: {e}")
    yield client.api
    client.close()


def build_images(what: str, *flags: str) -> None:
    """Runs the project's image script with `flags`; an engine answers, so the images must build:
    a broken build fails the tests that need `what`, it is not a skip."""
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT), *flags],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
            env={**os.environ, "PYTHON": sys.executable},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"building the {what} took over 25 minutes")
    if proc.returncode != 0:
        pytest.fail(f"the {what} does not build: {proc.stderr[-1500:]}")


@pytest.fixture(scope="session")
def images(docker_api: Any, native: Any) -> str:
    """Builds (or finds up to date) the base and sandbox images with the project's own script
    (an engine answers: `docker_api`), and unpacks the sandbox image into the session's image
    cache: the docker backend's one-time first use of an image (a minute for this one), which a
    test's first create would otherwise pay inside its create timeout."""
    build_images("sandbox image")
    from sandboxes.backends import images as image_cache
    from sandboxes.backends.docker import DEFAULT_IMAGE

    image_cache.resolve(DEFAULT_IMAGE)
    return DEFAULT_IMAGE


@pytest.fixture(scope="session")
def dev_image(images: str) -> str:
    """The dev image (git, build tools, python3 with pip and venv), built by the same script."""
    build_images("dev image", "--dev")
    return "sandboxes-dev:bookworm"


@pytest.fixture(scope="session")
def manager_image(images: str) -> str:
    """The manager image (`sandboxes serve`), named as the chart's default, built by the same script."""
    build_images("manager image", "--manager")
    import yaml

    chart = REPO / "deploy" / "helm" / "sandboxes"
    repository = yaml.safe_load((chart / "values.yaml").read_text())["manager"]["image"]["repository"]
    return f"{repository}:{yaml.safe_load((chart / 'Chart.yaml').read_text())['appVersion']}"


# --- pools ---------------------------------------------------------------------------------------


@pytest_asyncio.fixture
async def make_pool(native: Any) -> AsyncIterator[Callable[..., Awaitable[sandboxes.Pool]]]:
    """Factory: `await make_pool(**kwargs)` starts a pool closed at the end of the test."""
    pools: list[sandboxes.Pool] = []

    async def make(**kwargs: Any) -> sandboxes.Pool:
        kwargs.setdefault("claim_timeout", 60.0)
        p = sandboxes.Pool(**kwargs)
        pools.append(p)
        await p.start()
        return p

    yield make
    for p in pools:
        await p.close()


@pytest_asyncio.fixture
async def pool(make_pool: Callable[..., Awaitable[sandboxes.Pool]]) -> sandboxes.Pool:
    """A local pool with two warm sandboxes."""
    return await make_pool(warm=2)


@pytest_asyncio.fixture
async def sb(pool: sandboxes.Pool) -> AsyncIterator[sandboxes.Sandbox]:
    """One claimed sandbox, destroyed after the test."""
    async with pool.sandbox() as s:
        yield s


# --- a real server over a real local pool, and real clients (helpers: server_helpers.py) -----------


@pytest_asyncio.fixture
async def make_server(native: Any) -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    """Factory: `await make_server(**Server kwargs)`; auth with KEYS unless `auth=` / `insecure=`."""
    servers: list[Server] = []

    async def make(**kwargs: Any) -> Server:
        insecure = kwargs.pop("insecure", False)
        if "auth" not in kwargs:
            kwargs["auth"] = ApiKeys({} if insecure else KEYS, insecure=insecure)
        kwargs.setdefault("host", "127.0.0.1")
        kwargs.setdefault("port", 0)
        kwargs.setdefault("warm", 1)
        kwargs.setdefault("grace_s", 2.0)
        kwargs.setdefault("pool_kwargs", {"claim_timeout": 60.0})
        s = Server(**kwargs)
        servers.append(s)
        await s.start()
        return s

    yield make
    for s in servers:
        await s.stop(grace=0)


@pytest_asyncio.fixture
async def server(make_server: Callable[..., Awaitable[Server]]) -> Server:
    return await make_server()


@pytest_asyncio.fixture
async def client(server: Server) -> AsyncIterator[AsyncSandboxClient]:
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as c:
        yield c


@pytest_asyncio.fixture
async def client_b(server: Server) -> AsyncIterator[AsyncSandboxClient]:
    async with AsyncSandboxClient(server.address, KEY_B, timeout=60.0) as c:
        yield c


@pytest_asyncio.fixture
async def raw_stub(server: Server) -> AsyncIterator[Any]:
    """A bare generated stub (no client-side validation, no send limit) for malformed requests."""
    channel = grpc.aio.insecure_channel(
        server.address,
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", 64 << 20)],
    )
    stub = SandboxesStub(channel)
    stub.channel = channel
    yield stub
    await channel.close()

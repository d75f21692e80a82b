"""The docker backend against this machine's real Docker engine and the image `make images` builds.

Skips (with the reason) only where no engine answers or the `docker` SDK is missing; with an
engine, images that do not build fail the suite. Every container a test makes is checked gone from the outside (Docker API);
the session's leak check counts containers labelled `sandboxes.pool` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import BASE_IMAGE, wait_until
from terminals import drive_bash

import sandboxes
from sandboxes import Pool, TestCase
from sandboxes.backends import docker as docker_backend
from sandboxes.backends import ids
from sandboxes.backends.docker import DockerBackend
from sandboxes.templates import Template

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(900)]

IMAGE = docker_backend.DEFAULT_IMAGE
MakePool = Callable[..., Awaitable[Pool]]


# --- fixtures (the engine and the images: conftest.py) --------------------------------------------


@pytest_asyncio.fixture
async def docker_pool(images: str, make_pool: MakePool) -> MakePool:
    """Factory of docker pools (closed by make_pool at the end of the test)."""

    async def make(**kwargs: Any) -> Pool:
        kwargs.setdefault("backend", "docker")
        return await make_pool(**kwargs)

    return make


@pytest_asyncio.fixture
async def backend(images: str) -> AsyncIterator[DockerBackend]:
    """A bare backend (no pool: no lease renewal)."""
    b = DockerBackend()
    yield b
    await b.close()


def containers(api: Any, **labels: str) -> list[dict[str, Any]]:
    """Containers (any state) carrying all these labels."""
    filters = [f"{k}={v}" for k, v in labels.items()] or [docker_backend.LABEL_POOL]
    return api.containers(all=True, filters={"label": filters})


def exists(api: Any, container_id: str) -> bool:
    import docker.errors

    try:
        api.inspect_container(container_id)
    except docker.errors.NotFound:
        return False
    return True


# --- the Sandbox API on containers -----------------------------------------------------------------


async def test_create_claim_exec_files_delete(docker_api: Any, docker_pool: MakePool) -> None:
    pool = await docker_pool(warm=1)
    sb = await pool.claim()
    ds = sb.handle.backend_data
    assert isinstance(ds, docker_backend.DockerSandbox)
    c = docker_api.inspect_container(ds.container_id)
    assert c["State"]["Running"] and c["Config"]["Image"] == IMAGE
    assert c["Config"]["Labels"][docker_backend.LABEL_POOL] == pool.id

    r = await sb.exec(["echo", "hello"])
    assert (r.exit_code, r.stdout, r.stderr) == (0, b"hello\n", b"")
    await sb.write_files({"a.txt": b"alpha", "dir/b.bin": (bytes(range(256)), 0o600)})
    assert await sb.read_file("a.txt") == b"alpha"
    assert await sb.read_file("dir/b.bin") == bytes(range(256))
    names = {e.name for e in await sb.list_dir(".")}
    assert {"a.txt", "dir"} <= names
    r = await sb.exec(["sh", "-c", "cat a.txt; stat -c '%U %a' dir/b.bin"])
    assert r.stdout == b"alphanobody 600\n", r.stderr
    await sb.remove("dir", recursive=True)
    assert {e.name for e in await sb.list_dir(".")} == {"a.txt"}
    async with sb.exec_stream(["cat"]) as stream:
        async for ev in stream:
            if ev.kind == "started":
                await stream.send_stdin(b"streamed")
                await stream.close_stdin()
    assert stream.result is not None and stream.result.stdout in (b"", b"streamed")

    # The data plane is the agent's socket: the Docker API never ran an exec in the container.
    assert not docker_api.inspect_container(ds.container_id).get("ExecIDs")

    await sb.close()
    assert not exists(docker_api, ds.container_id)
    assert not ds.run_dir.exists()
    with pytest.raises(sandboxes.SandboxLost):
        await sb.exec(["true"])


async def test_a_shell_on_a_terminal_in_a_container(docker_pool: MakePool) -> None:
    """`bash -i` on a pseudo-terminal of the container's own devpts, through its agent."""
    pool = await docker_pool(warm=0)
    async with pool.sandbox() as sb:
        await drive_bash(sb)


async def test_container_is_locked_down(docker_api: Any, docker_pool: MakePool) -> None:
    pool = await docker_pool(warm=0)
    async with pool.sandbox() as sb:
        info = await sb.info()
        assert (info.sandbox_uid, info.sandbox_gid) == (65534, 65534)
        script = textwrap.dedent(
            """
            import os
            print(os.getuid(), os.getgid())
            print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])
            for p in ('/usr/x', '/etc/x', '/x'):
                try:
                    open(p, 'w')
                    print('wrote', p)
                except OSError as e:
                    print('ro', e.errno)
            try:
                os.listdir('/run/sandbox')
                print('run dir visible')
            except OSError:
                print('run dir hidden')
            open('/tmp/t', 'w').write('x'); open('/work/w', 'w').write('x'); print('tmp ok')
            """
        )
        r = await sb.exec(["python3", "-c", script])
        assert r.exit_code == 0, r.stderr
        lines = r.stdout.decode().splitlines()
        assert lines[0] == "65534 65534"
        assert int(lines[1], 16) == 0  # no capability at all
        assert lines[2:5] == ["ro 13"] * 3  # EACCES: the image's files are root's inside
        assert lines[5:] == ["run dir hidden", "tmp ok"]
        ds = sb.handle.backend_data
        assert not (ds.run_dir / "token").exists()  # removed once the agent was ready
        hc = docker_api.inspect_container(ds.container_id)["HostConfig"]
        assert hc["ReadonlyRootfs"] and hc["NetworkMode"] == "none"
        assert hc["CapDrop"] == ["ALL"] and sorted(hc["CapAdd"]) == sorted(docker_backend.AGENT_CAPABILITIES)
        assert "no-new-privileges" in hc["SecurityOpt"]


async def test_run_tests_python_and_c(docker_pool: MakePool) -> None:
    pool = await docker_pool(warm=1)
    async with pool.sandbox() as sb:
        add = "a, b = map(int, input().split())\nprint(a + b)\n"
        report = await sb.run_tests(add, [TestCase("1 2", "3"), TestCase("2 2", "5")])
        assert [c.verdict.value for c in report.cases] == ["accepted", "wrong_answer"]
        c_src = '#include <stdio.h>\nint main(){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);}\n'
        report = await sb.run_tests(c_src, [TestCase("40 2", "42")], language="c")
        assert report.compiled and report.passed == 1, report
        report = await sb.run_tests("while True: pass", [TestCase("", "")], time_limit=0.5)
        assert report.cases[0].verdict.value == "time_limit"


class NotifyingBackend(DockerBackend):
    """A docker backend that tells when a create finished (the pool offers it right after)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.created: asyncio.Queue[str] = asyncio.Queue()

    async def create(self, template: Template, sandbox_id: str) -> Any:
        handle = await super().create(template, sandbox_id)
        self.created.put_nowait(handle.id)
        return handle


async def test_per_claim_env_and_files_go_into_a_warm_container(images: str, make_pool: MakePool) -> None:
    backend = NotifyingBackend()
    pool = await make_pool(backend=backend, warm=1, env={"BASE": "template"})
    warm_id = await asyncio.wait_for(backend.created.get(), 120)  # the warm container is ready
    assert pool.stats()["default"]["warm"] == 1
    files = {"main.py": "import os; print(os.environ['K'])"}
    async with pool.sandbox(env={"K": "V"}, files=files) as sb:
        assert sb.id == warm_id  # served from the warm set: no cold start for env and files
        r = await sb.exec(["python3", "main.py"])
        assert r.stdout == b"V\n", r.stderr
        r = await sb.exec(["sh", "-c", "echo $BASE $K"], env={"K": "call"})
        assert r.stdout == b"template call\n"


async def test_network_is_really_off(docker_pool: MakePool) -> None:
    """No interface but lo, no route, and the host's loopback services are out of reach.

    Nothing here sends a packet off the machine: a UDP connect() only looks up a route.
    """
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        pool = await docker_pool(warm=0)
        async with pool.sandbox() as sb:
            script = textwrap.dedent(
                f"""
                import errno, os, socket
                print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))
                print(len(open('/proc/net/route').read().splitlines()) - 1)
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                try:
                    s.connect(('192.0.2.1', 9))
                    print('routed')
                except OSError as e:
                    print(errno.errorcode[e.errno])
                t = socket.socket()
                try:
                    t.connect(('127.0.0.1', {port}))
                    print('reached the host')
                except OSError as e:
                    print(errno.errorcode[e.errno])
                """
            )
            r = await sb.exec(["python3", "-c", script])
            assert r.exit_code == 0, r.stderr
            assert r.stdout.decode().splitlines() == ["['lo']", "0", "ENETUNREACH", "ECONNREFUSED"]
    finally:
        server.close()
        await server.wait_closed()


async def test_memory_limit_verdict(docker_pool: MakePool) -> None:
    pool = await docker_pool(warm=0, memory_bytes=128 << 20)
    async with pool.sandbox() as sb:
        hog = "x = bytearray(512 << 20)\nprint(len(x))\n"
        report = await sb.run_tests(hog, [TestCase("", "")], memory_limit_mb=64)
        case = report.cases[0]
        # The program dies either way, and the sandbox survives it.
        assert case.verdict.value != "accepted"
        assert (await sb.exec(["echo", "alive"])).stdout == b"alive\n"
        r = await sb.exec(["python3", "-c", hog])
        assert r.signal == signal.SIGKILL or r.exit_code != 0
        # Per-exec cgroups in the container's own cgroup namespace: the exec's limit killed it.
        assert (await sb.info()).cgroup_version != "none"
        assert case.verdict.value == "memory_limit", case
        assert r.oom_killed


async def test_processes_of_one_container_do_not_limit_another(docker_pool: MakePool) -> None:
    """Each container's programs have host ids of its own (its user namespace's range), and the
    container's pids limit bounds each: one container's processes never starve another's forks."""
    pool = await docker_pool(warm=0)
    async with pool.sandbox() as a, pool.sandbox() as b:
        stream = a.exec_stream(["/bin/sh", "-c", "for i in $(seq 300); do sleep 60 & done; echo up; wait"])
        async for ev in stream:
            if ev.kind == "stdout" and b"up" in ev.data:
                break
        r = await b.exec(["/bin/sh", "-c", "for i in $(seq 50); do /bin/true & done; wait; echo forked"])
        assert (r.exit_code, r.stdout) == (0, b"forked\n"), r.stderr
        stream.cancel()


async def test_ro_binds_and_template_resources(
    docker_api: Any, docker_pool: MakePool, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("from the host\n")
    shared.chmod(0o755)
    tmp_path.chmod(0o755)
    pool = await docker_pool(
        warm=0,
        memory_bytes=256 << 20,
        max_pids=100,
        cpu_quota=0.5,
        ro_binds=(str(shared),),
        work_size_bytes=8 << 20,
    )
    async with pool.sandbox() as sb:
        r = await sb.exec(["sh", "-c", f"cat {shared}/data.txt; touch {shared}/x || echo ro"])
        assert r.stdout == b"from the host\nro\n", r.stderr
        r = await sb.exec(["sh", "-c", "head -c 16777216 /dev/zero > big || echo full"])
        assert b"full" in r.stdout
        hc = docker_api.inspect_container(sb.handle.backend_data.container_id)["HostConfig"]
        assert (hc["Memory"], hc["PidsLimit"], hc["NanoCpus"]) == (256 << 20, 100, 500_000_000)


async def test_a_default_container_is_bounded(docker_api: Any, docker_pool: MakePool) -> None:
    """The default template's caps reach the container (memory, pids, CPU, tmpfs size and
    inodes) and the kernel holds a program to them even when its own exec limits are looser."""
    t = Template()
    pool = await docker_pool(warm=0)
    async with pool.sandbox() as sb:
        hc = docker_api.inspect_container(sb.handle.backend_data.container_id)["HostConfig"]
        assert (hc["Memory"], hc["PidsLimit"], hc["NanoCpus"]) == (
            t.memory_bytes,
            t.max_pids,
            int(t.cpu_quota * 1e9),
        )
        r = await sb.exec(["sh", "-c", f"stat -f -c '%b %S %c' {t.work_dir}"])
        blocks, block_size, inodes = map(int, r.stdout.split())
        assert (blocks * block_size, inodes) == (
            t.work_size_bytes,
            t.work_size_bytes // sandboxes.templates.BYTES_PER_INODE,
        ), r
        loose = sandboxes.Limits(memory_bytes=4 << 30, wall_time_s=60)
        r = await sb.exec(["python3", "-c", "b = b'x' * (1536 << 20); print('allocated')"], limits=loose)
        assert r.stdout == b"" and r.exit_code != 0, r
        assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"


# --- lifecycle: leases, crashes, orphans ---------------------------------------------------------


async def test_lapsed_lease_removes_the_container(docker_api: Any, backend: DockerBackend) -> None:
    handle = await backend.create(Template(backend="docker", lease_ttl_s=1.0), "sb-lease")
    ds = handle.backend_data
    assert ds.alive()
    # Nobody renews: the agent exits, and auto_remove takes the container (waited on, not polled).
    import docker.errors

    try:
        await asyncio.to_thread(docker_api.wait, ds.container_id, 60, "removed")
    except docker.errors.NotFound:
        pass  # already removed
    assert not exists(docker_api, ds.container_id)
    assert not ds.alive()
    await backend.destroy(handle)  # idempotent on a container already gone
    assert not ds.run_dir.exists()


CRASHING_POOL = """
import asyncio, json, sys
import sandboxes

async def main():
    pool = sandboxes.Pool(backend="docker", warm=0, lease_ttl_s=float(sys.argv[1]))
    await pool.start()
    held = [await pool.claim(), await pool.claim()]
    ds = [sb.handle.backend_data for sb in held]
    print(json.dumps({"pool": pool.id, "dir": str(ds[0].run_dir.parent),
                      "sandboxes": [sb.id for sb in held], "containers": [d.container_id for d in ds]}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

asyncio.run(main())
"""


async def crash_a_pool(lease_ttl_s: float) -> dict[str, Any]:
    """What a docker pool in a process of its own holds (two claimed sandboxes), once that process
    was killed with SIGKILL: no close(), no destroy, nobody renews the leases any more."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CRASHING_POOL, str(lease_ttl_s),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ),
    )  # fmt: skip
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        assert line, "the crashing pool did not start"
        return dict(json.loads(line))
    finally:
        proc.kill()
        await proc.wait()


async def test_crashed_pool_leaves_containers_the_next_start_removes(
    docker_api: Any, docker_pool: MakePool
) -> None:
    crashed = await crash_a_pool(600)  # the lease (600 s) keeps them alive
    pool_id, held = crashed["pool"], crashed["containers"]
    left = containers(docker_api, **{docker_backend.LABEL_POOL: pool_id})
    assert {c["Id"] for c in left} >= set(held) and len(left) >= 2
    assert all(c["State"] == "running" for c in left)
    run_dirs = [Path(c["Labels"][docker_backend.LABEL_RUN_DIR]) for c in left]
    assert all(d.is_dir() for d in run_dirs)
    sandbox_ids = {c["Labels"][docker_backend.LABEL_SANDBOX] for c in left}

    def held_slots() -> list[Path]:
        return [p for p in ids.id_dir().glob("[0-9]*") if p.read_text().split()[2] in sandbox_ids]

    assert len(held_slots()) == len(sandbox_ids)

    await docker_pool(warm=0)  # its start reaps the dead pool's containers

    assert containers(docker_api, **{docker_backend.LABEL_POOL: pool_id}) == []
    assert not any(d.exists() for d in run_dirs)
    assert not run_dirs[0].parent.exists()
    assert held_slots() == []  # their id ranges are free again


def processes_naming(text: str) -> list[int]:
    """Pids of the processes whose command line names `text` (a pool's watchdog names its dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


async def test_a_crashed_pool_leaves_nothing_once_its_leases_lapse(docker_api: Any, images: str) -> None:
    """No later pool needed: the dead pool's containers end when their agents' leases lapse
    (each removes itself), and its watchdog removes their run dirs, id ranges and the pool dir,
    then exits."""
    crashed = await crash_a_pool(2)
    pool_id, pool_dir, sandbox_ids = crashed["pool"], Path(crashed["dir"]), crashed["sandboxes"]
    assert len(sandbox_ids) == 2 and all((pool_dir / sid).is_dir() for sid in sandbox_ids)

    def held_slots() -> list[Path]:
        return [p for p in ids.id_dir().glob("[0-9]*") if p.read_text().split()[2] in sandbox_ids]

    def gone() -> bool:
        return (
            containers(docker_api, **{docker_backend.LABEL_POOL: pool_id}) == []
            and not pool_dir.exists()
            and held_slots() == []
            and processes_naming(str(pool_dir)) == []
        )

    await wait_until(
        gone, timeout=60, interval=0.2, what="the dead pool's containers, run dirs, ids and watchdog"
    )


async def test_live_pools_are_left_alone(docker_pool: MakePool) -> None:
    first = await docker_pool(warm=0)
    held = await first.claim()
    await docker_pool(warm=0)  # reaps at start; `first` is alive
    assert (await held.exec(["true"])).exit_code == 0
    await held.close()


async def test_destroy_is_idempotent(docker_api: Any, backend: DockerBackend) -> None:
    handle = await backend.create(Template(backend="docker"), "sb-idem")
    await backend.destroy(handle)
    await backend.destroy(handle)
    assert not exists(docker_api, handle.backend_data.container_id)


async def test_cancelled_create_leaves_nothing(docker_api: Any, backend: DockerBackend) -> None:
    """Cancelled while its API call runs in a thread: the container made there is removed."""
    await backend.reap_orphans()  # connected: the create goes straight to its API call
    loop = asyncio.get_running_loop()
    in_api = asyncio.Event()
    made: list[str] = []
    create_start = backend._create_start

    def spying_create_start(spec: dict[str, Any]) -> str:
        loop.call_soon_threadsafe(in_api.set)
        cid = create_start(spec)
        made.append(cid)
        return cid

    backend._create_start = spying_create_start  # type: ignore[method-assign]
    task = asyncio.ensure_future(backend.create(Template(backend="docker"), "sb-cancel"))
    await in_api.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await backend.close()  # waits for the clean-up of the half-made container
    assert len(made) == 1 and not exists(docker_api, made[0])
    assert containers(docker_api, **{docker_backend.LABEL_POOL: backend.pool_id}) == []
    assert not backend.pool_dir.exists()


# --- bad input -------------------------------------------------------------------------------------


async def test_missing_image_is_a_clear_error_and_other_templates_serve(docker_pool: MakePool) -> None:
    pool = await docker_pool(
        warm=0,
        templates={
            "good": Template(name="good", backend="docker"),
            "ghost": Template(name="ghost", backend="docker", image="sandboxes-no-such-image:1"),
        },
    )
    with pytest.raises(sandboxes.LaunchError) as e:
        await pool.claim("ghost")
    assert e.value.step == "image" and "sandboxes-no-such-image:1" in str(e.value)
    async with pool.sandbox("good") as sb:
        assert (await sb.exec(["true"])).exit_code == 0


async def test_image_without_the_agent(images: str, docker_pool: MakePool) -> None:
    pool = await docker_pool(
        warm=0,
        templates={
            "bare": Template(name="bare", backend="docker", image=BASE_IMAGE),
            "mounted": Template(name="mounted", backend="docker", image=BASE_IMAGE, agent_mount=True),
        },
    )
    with pytest.raises(sandboxes.LaunchError) as e:
        await pool.claim("bare")
    assert e.value.step == "agent" and "no executable agent" in str(e.value)
    # The same image works with the host's agent bind-mounted.
    async with pool.sandbox("mounted") as sb:
        r = await sb.exec(["python3", "-c", "print(6 * 7)"])
        assert r.stdout == b"42\n"


async def test_an_agent_start_up_step_reaches_the_pool_caller(docker_pool: MakePool) -> None:
    """The agent reports its failed start-up step through the `ready` FIFO (no log text is read):
    here its check of its flags (a uid outside the sandbox's id range)."""
    pool = await docker_pool(
        warm=0, templates={"bad": Template(name="bad", backend="docker", image=IMAGE, uid=70000)}
    )
    with pytest.raises(sandboxes.LaunchError) as e:
        await pool.claim("bad")
    assert e.value.step is sandboxes.errors.Step.FLAGS and "--uid/--gid" in str(e.value), e.value


@pytest.fixture
def image_without_shell(docker_api: Any, images: str) -> Any:
    """A one-file image (no /bin/sh), imported from a tar; removed afterwards."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    tag = "sandboxes-test-noshell:latest"
    docker_api.import_image_from_data(buf.getvalue(), repository="sandboxes-test-noshell", tag="latest")
    yield tag
    docker_api.remove_image(tag, force=True)


async def test_image_without_a_shell(backend: DockerBackend, image_without_shell: str) -> None:
    with pytest.raises(sandboxes.LaunchError) as e:
        await backend.create(
            Template(backend="docker", image=image_without_shell, agent_mount=True), "sb-nosh"
        )
    assert e.value.step == "entrypoint" and "/bin/sh" in str(e.value)


async def test_daemon_unavailable(tmp_path: Path, native: Any, make_pool: MakePool) -> None:
    dead = DockerBackend(docker_host=f"unix://{tmp_path}/no-docker.sock")
    assert await dead.reap_orphans() == 0  # never stops a pool from starting
    with pytest.raises(sandboxes.BackendUnavailable):
        await dead.create(Template(backend="docker"), "sb-nodaemon")
    # A pool with a docker template on a dead engine still serves its local template.
    pool = await make_pool(
        backend=dead,
        warm=0,
        templates={
            "dock": Template(name="dock", backend="docker"),
            "loc": Template(name="loc", backend="local"),
        },
    )
    with pytest.raises(sandboxes.BackendUnavailable):
        await pool.claim("dock")
    async with pool.sandbox("loc") as sb:
        assert (await sb.exec(["true"])).exit_code == 0


async def test_templates_choose_backend_and_image() -> None:
    t = Template(backend="docker", image="my/image:1", agent_mount=True)
    assert (t.backend, t.image, t.agent_mount) == ("docker", "my/image:1", True)
    with pytest.raises(sandboxes.InvalidRequest):
        Template(backend="docker", image="")
    with pytest.raises(sandboxes.InvalidRequest):
        Template(backend="docker", agent_mount="yes")  # type: ignore[arg-type]
    pool = Pool(backend="docker", image="my/image:1")
    assert pool.templates["default"].image == "my/image:1"
    assert pool.templates["default"].backend == "docker"
    assert Pool(backend="docker").templates["default"].image is None  # backend default applies
    from sandboxes.cli import build_parser

    args = build_parser().parse_args(["serve", "--backend", "docker", "--image", "my/image:1"])
    assert (args.backend, args.image) == ("docker", "my/image:1")


async def test_per_exec_limits_hold_in_a_container(docker_pool: MakePool) -> None:
    """An exec's own memory and pids limits are its cgroup's (the container's cgroup namespace),
    well below the container's: a program over them is killed, the sandbox serves on."""
    pool = await docker_pool(warm=0)
    async with pool.sandbox() as sb:
        r = await sb.exec(
            ["python3", "-c", "x = bytearray(300 << 20); print('allocated')"],
            limits=sandboxes.Limits(memory_bytes=64 << 20),
        )
        assert r.oom_killed and r.stdout == b"", r
        r = await sb.exec(
            ["/bin/sh", "-c", "for i in $(seq 40); do sleep 5 & done 2>/dev/null; wait; echo done"],
            limits=sandboxes.Limits(max_pids=10, wall_time_s=30),
        )
        assert r.pids_limited and r.exit_code != 0 and b"done" not in r.stdout, r
        assert (await sb.exec(["echo", "alive"])).stdout == b"alive\n"


async def test_a_rebuilt_image_is_what_the_next_sandbox_runs(
    docker_api: Any, docker_pool: MakePool, tmp_path: Path
) -> None:
    """The root is built from the image the name stands for now: a tag rebuilt between two
    sandboxes gives the second the new image (its id is unpacked anew), never the old copy."""
    tag = f"sandboxes-test-rebuilt:{os.getpid()}"
    built: list[str] = []

    def build(marker: str) -> None:
        ctx = tmp_path / marker
        ctx.mkdir()
        (ctx / "marker").write_text(marker)
        (ctx / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY marker /marker\n")
        subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], check=True, capture_output=True)
        built.append(docker_api.inspect_image(tag)["Id"])

    try:
        await asyncio.to_thread(build, "one")
        pool = await docker_pool(warm=0, image=tag, agent_mount=True)
        async with pool.sandbox() as sb:
            assert (await sb.exec(["cat", "/marker"])).stdout == b"one"
        await asyncio.to_thread(build, "two")
        async with pool.sandbox() as sb:
            assert (await sb.exec(["cat", "/marker"])).stdout == b"two"
    finally:
        for image_id in built:
            with contextlib.suppress(Exception):
                docker_api.remove_image(image_id, force=True)

"""The agent and its native data path, driven directly: `_native.launch_local` starts the real agent
binary in fresh namespaces and `_native.AgentClient` talks to it over its unix socket.

Isolation is checked from the outside where it can be: host processes, the agent's socket, its token.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from helpers import pgrep, pid_running, wait_until

from sandboxes import _bridge

# The session's private run dir (tests/conftest.py sets it before any test module is imported).
RUN_ROOT = Path(os.environ["SANDBOXES_RUN_DIR"])


def marker() -> str:
    """A unique, valid `sleep` argument, findable with pgrep from the host."""
    return f"{1000 + uuid.uuid4().int % 100000}.{uuid.uuid4().int % 10**9:09d}"


@pytest_asyncio.fixture
async def agent(native: Any) -> AsyncIterator[tuple[Any, Any]]:
    """One agent with a 30 s lease, killed at the end of the test."""
    local = await native.launch_local(
        native.LaunchConfig(_bridge.agent_path(), str(RUN_ROOT / f"agent-{uuid.uuid4().hex[:8]}"))
    )
    try:
        yield local, native.AgentClient(local.endpoint, local.token)
    finally:
        local.kill()


async def still_serving(client: Any) -> None:
    r = await client.exec(["echo", "alive"])
    assert (r.exit_code, r.stdout) == (0, b"alive\n")


async def test_exec_reports_what_the_program_did(agent: tuple[Any, Any]) -> None:
    _, client = agent
    r = await client.exec(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.exit_code, r.signal, r.stdout, r.stderr) == (3, 0, b"out\n", b"err\n")
    assert r.path == "spawn" and r.wall_time_s > 0 and not r.timed_out


async def test_stream_with_stdin_and_signal(native: Any, agent: tuple[Any, Any]) -> None:
    _, client = agent
    stream = client.exec_stream(["/bin/cat"])
    ev = await stream.next()
    assert ev.kind == "started" and ev.pid > 0
    await stream.send_stdin(b"hello ")
    await stream.send_stdin(b"world")
    await stream.close_stdin()
    out = b""
    while (ev := await stream.next()) is not None:
        if ev.kind == "stdout":
            out += ev.data
        if ev.kind == "exit":
            assert ev.result.exit_code == 0
    assert out == b"hello world"

    stream = client.exec_stream(["/bin/sleep", "60"])
    assert (await stream.next()).kind == "started"
    await stream.signal(9)
    while (ev := await stream.next()) is not None:
        last = ev
    assert last.kind == "exit" and last.result.signal == 9


async def test_timeout_kills_the_tree_including_setsid_grandchildren(
    agent: tuple[Any, Any], native: Any
) -> None:
    _, client = agent
    m = marker()
    r = await client.exec(
        ["/bin/sh", "-c", f"setsid sleep {m} & sleep {m}"],
        limits=native.Limits(wall_time_s=0.5),
    )
    assert r.timed_out and r.signal == 9
    await wait_until(lambda: not pgrep(f"sleep {m}"), what="every process of the tree to be gone")


async def test_memory_limit_is_reported_as_oom(agent: tuple[Any, Any], native: Any) -> None:
    _, client = agent
    hog = "x = bytearray(1 << 30)"
    r = await client.exec(["/usr/bin/python3", "-c", hog], limits=native.Limits(memory_bytes=64 << 20))
    assert r.oom_killed and r.exit_code != 0
    await still_serving(client)


async def test_fork_bomb_is_contained_and_the_agent_survives(agent: tuple[Any, Any], native: Any) -> None:
    local, client = agent
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    r = await client.exec(["/usr/bin/python3", "-c", bomb], limits=native.Limits(wall_time_s=2, max_pids=32))
    assert r.pids_limited or r.timed_out
    assert local.alive()
    await still_serving(client)
    info = await client.info()
    assert info.running_execs == 0


async def test_output_flood_is_truncated(agent: tuple[Any, Any], native: Any) -> None:
    _, client = agent
    r = await client.exec(["/usr/bin/yes"], limits=native.Limits(wall_time_s=1, max_output_bytes=1 << 16))
    assert r.stdout_truncated and len(r.stdout) == 1 << 16
    await still_serving(client)


async def test_user_code_cannot_reach_the_agent(agent: tuple[Any, Any]) -> None:
    """The socket path is outside the sandbox's file system and no fd of it is inherited."""
    local, client = agent
    sock = local.endpoint.removeprefix("unix://")
    probe = (
        "import socket, os\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        f"try:\n    s.connect({sock!r})\n    print('connected')\nexcept OSError as e:\n    print('refused', e.errno)\n"
        "s.close()\n"
        "print(sorted(int(f) for f in os.listdir('/proc/self/fd')))\n"
    )
    r = await client.exec(["/usr/bin/python3", "-c", probe])
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("refused"), r
    assert lines[1] == "[0, 1, 2, 3]", r  # stdio and listdir's own fd: nothing of the agent inherited


async def test_the_agent_itself_serves_under_the_deny_list(agent: tuple[Any, Any]) -> None:
    """Read from the host: once set up, the agent's serving thread wears the same seccomp filter as
    the programs it starts (they are cloned from it and inherit it), so a request that tricked the
    agent could not mount, unshare or trace either."""
    local, client = agent
    await still_serving(client)
    text = Path(f"/proc/{local.pid}/status").read_text()
    status = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
    assert status["Seccomp"] == "2" and status["NoNewPrivs"] == "1", status
    if "Seccomp_filters" in status:
        assert status["Seccomp_filters"] == "1", status


async def test_the_agent_holds_no_fd_of_its_launcher_but_its_own(native: Any) -> None:
    """Read from the host: an inheritable fd of the process that launches sandboxes (a client's
    own, a library's opened without close-on-exec) does not reach the agent, which holds only
    the fds it opened itself and the ones it was handed (stdio, socket, readiness, token)."""
    fd = os.open("/etc/hostname", os.O_RDONLY)
    high = os.dup2(fd, 777, inheritable=True)
    os.close(fd)
    try:
        local = await native.launch_local(
            native.LaunchConfig(_bridge.agent_path(), str(RUN_ROOT / f"agent-{uuid.uuid4().hex[:8]}"))
        )
        try:
            await still_serving(native.AgentClient(local.endpoint, local.token))
            held = {int(f) for f in os.listdir(f"/proc/{local.pid}/fd")}
            assert high not in held, sorted(held)
        finally:
            local.kill()
    finally:
        os.close(high)


async def test_wrong_token_is_refused_and_the_agent_keeps_serving(
    agent: tuple[Any, Any], native: Any
) -> None:
    local, client = agent
    for token in ("x" * 48, ""):
        with pytest.raises(native.NativeError) as e:
            await native.AgentClient(local.endpoint, token).exec(["true"])
        assert e.value.kind == "auth"
    await still_serving(client)


async def test_lease_expiry_kills_the_agent_and_its_children(native: Any) -> None:
    local = await native.launch_local(
        native.LaunchConfig(
            _bridge.agent_path(), str(RUN_ROOT / f"lease-{uuid.uuid4().hex[:8]}"), lease_ttl_s=1.0
        )
    )
    try:
        client = native.AgentClient(local.endpoint, local.token)
        m = marker()
        stream = client.exec_stream(["/bin/sleep", m])
        assert (await stream.next()).kind == "started"
        assert pgrep(f"sleep {m}")
        status = await asyncio.wait_for(local.wait(), 30)  # a bound; the lease is 1 s
        assert os.WIFEXITED(status) or os.WIFSIGNALED(status)
        await wait_until(lambda: not pgrep(f"sleep {m}"), what="the program of a lapsed agent to die")
        assert not pid_running(local.pid)
    finally:
        local.kill()


def agent_pids() -> set[int]:
    return set(pgrep("sandbox-agent --listen-fd"))


async def test_an_agent_that_cannot_be_executed_fails_the_launch_at_its_step(
    native: Any, tmp_path: Any
) -> None:
    """The launcher's child reports the step that failed (here its exec of the agent), and the
    launch leaves nothing behind."""
    fake = tmp_path / "not-an-agent"
    fake.write_text("not a program\n")
    fake.chmod(0o644)
    run_dir = RUN_ROOT / f"noexec-{uuid.uuid4().hex[:8]}"
    with pytest.raises(native.NativeError) as e:
        await native.launch_local(native.LaunchConfig(str(fake), str(run_dir)))
    assert (e.value.kind, e.value.step) == ("launch", "exec_agent"), e.value
    assert "denied" in e.value.detail.lower(), e.value.detail
    assert not run_dir.exists()


async def test_a_cancelled_launch_leaves_nothing(native: Any) -> None:
    """A launch cancelled while the agent starts (a pool closing, a create timing out) kills and
    removes what it started: no agent process, no run dir. Cancelled at several points of the
    start; one that finished first is killed by the test."""
    before = agent_pids()
    for delay in (0.0, 0.001, 0.002, 0.004, 0.008):
        run_dir = RUN_ROOT / f"cancel-{uuid.uuid4().hex[:8]}"
        task = asyncio.ensure_future(
            native.launch_local(native.LaunchConfig(_bridge.agent_path(), str(run_dir)))
        )
        await asyncio.sleep(delay)
        task.cancel()
        try:
            (await task).kill()
        except asyncio.CancelledError:
            pass
        await wait_until(
            lambda: agent_pids() <= before, what=f"no agent left by a launch cancelled after {delay}s"
        )
        await wait_until(
            lambda run_dir=run_dir: not run_dir.exists(), what="the run dir of a cancelled launch to go"
        )


async def test_renewed_lease_keeps_the_agent(native: Any) -> None:
    """Renewed right after start, the agent outlives its first lease (3 s: room for a loaded host
    between readiness and the renewal)."""
    local = await native.launch_local(
        native.LaunchConfig(
            _bridge.agent_path(), str(RUN_ROOT / f"lease-{uuid.uuid4().hex[:8]}"), lease_ttl_s=3.0
        )
    )
    try:
        client = native.AgentClient(local.endpoint, local.token)
        assert await client.renew_lease(3600) == 3600
        waiter = asyncio.ensure_future(local.wait())
        await asyncio.sleep(0)  # let the waiter start; it must stay pending past the first lease
        r = await client.exec(["/bin/sleep", "3.5"])
        assert r.exit_code == 0 and not waiter.done() and local.alive()
        waiter.cancel()
    finally:
        local.kill()


@pytest.mark.parametrize(
    "argv, limits, kind",
    [
        (["/no/such/program"], {}, "not_found"),
        ([], {}, "invalid_request"),
        ([""], {}, "invalid_request"),
        (["true"], {"wall_time_s": -1.0}, "invalid_request"),
        (["true"], {"wall_time_s": float("nan")}, "invalid_request"),
        (["true"], {"wall_time_s": 1e12}, "invalid_request"),
        (["true"], {"memory_bytes": 1 << 62}, "invalid_request"),
        (["true"], {"max_pids": 1 << 30}, "invalid_request"),
    ],
)
async def test_bad_exec_requests_get_clear_errors(
    agent: tuple[Any, Any], native: Any, argv: list[str], limits: dict, kind: str
) -> None:
    _, client = agent
    with pytest.raises(native.NativeError) as e:
        await client.exec(argv, limits=native.Limits(**limits))
    assert e.value.kind == kind, e.value
    await still_serving(client)


async def test_non_utf8_arguments_are_invalid(agent: tuple[Any, Any], native: Any) -> None:
    _, client = agent
    with pytest.raises(native.NativeError) as e:
        await client.exec(["echo", "\udcff"])
    assert e.value.kind == "invalid_request"
    await still_serving(client)


@pytest.mark.parametrize(
    "path", ["../etc/passwd", "/etc/passwd", "a/../../x", "/work/../etc/x", "/proc/1/environ"]
)
async def test_paths_outside_the_sandbox_are_refused(agent: tuple[Any, Any], native: Any, path: str) -> None:
    _, client = agent
    with pytest.raises(native.NativeError) as e:
        await client.write_files([(path, b"x", 0)])
    assert e.value.kind in ("auth", "invalid_request"), e.value
    with pytest.raises(native.NativeError):
        await client.read_file(path, 0, 0, 1 << 20)
    await still_serving(client)


async def test_symlink_planted_by_user_code_cannot_escape(agent: tuple[Any, Any], native: Any) -> None:
    _, client = agent
    r = await client.exec(["/bin/ln", "-s", "/etc", "escape"])
    assert r.exit_code == 0
    with pytest.raises(native.NativeError) as e:
        await client.write_files([("escape/owned", b"x", 0)])
    assert e.value.kind in ("auth", "invalid_request")
    with pytest.raises(native.NativeError):
        await client.read_file("escape/passwd", 0, 0, 1 << 20)


async def test_huge_request_is_refused_and_the_agent_keeps_serving(
    agent: tuple[Any, Any], native: Any
) -> None:
    _, client = agent
    with pytest.raises(native.NativeError) as e:
        await client.exec(["true"] + ["a" * 1024] * 10_000)
    assert e.value.kind == "invalid_request"
    big = b"z" * (300 << 20)  # under the per-call bound, over the work dir's 256 MiB
    with pytest.raises(native.NativeError) as e:
        await client.write_files([("big.bin", big, 0)])
    assert e.value.kind == "no_space", e.value
    with pytest.raises(native.NativeError) as e:
        await client.write_files([("a.bin", big, 0), ("b.bin", big, 0)])  # over the per-call bound
    assert e.value.kind == "too_large", e.value
    await still_serving(client)


async def test_files_round_trip_chunked(agent: tuple[Any, Any]) -> None:
    _, client = agent
    blob = os.urandom(3 << 20)  # several read chunks
    assert await client.write_files([("d/e/blob", blob, 0o600), ("x.sh", b"echo hi", 0o755)]) == len(blob) + 7
    assert await client.read_file("d/e/blob", 0, 0, len(blob)) == blob
    names = {e.name: e for e in await client.list_dir("")}
    assert names["d"].is_dir and names["x.sh"].mode == 0o755
    await client.remove("d", recursive=True)
    assert "d" not in {e.name for e in await client.list_dir(".")}
    r = await client.exec(["/bin/sh", "-c", "./x.sh && id -u"])
    assert r.stdout == b"hi\n65534\n"


async def test_calls_finishing_together_each_get_their_own_result(agent: tuple[Any, Any]) -> None:
    """Many calls in flight at once on one loop: each result reaches its own future (finished calls
    queue up and the loop takes them in batches), and cancelling some strands none of the others."""
    _, client = agent
    calls = [asyncio.ensure_future(client.exec(["/bin/echo", str(i)])) for i in range(40)]
    slow = [asyncio.ensure_future(client.exec(["/bin/sleep", marker()])) for _ in range(3)]
    await asyncio.sleep(0.05)
    for t in slow:
        t.cancel()
    results = await asyncio.gather(*calls)
    assert [(r.exit_code, r.stdout) for r in results] == [(0, f"{i}\n".encode()) for i in range(40)]
    for t in slow:
        with pytest.raises(asyncio.CancelledError):
            await t
    await still_serving(client)


async def test_calls_resolve_on_every_event_loop_at_once(agent: tuple[Any, Any]) -> None:
    """One client used from this loop, a plain asyncio loop and a uvloop loop in other threads, all at
    the same time: every loop gets its own completion queue and every call its own result."""
    import uvloop

    _, client = agent

    async def echoes(tag: str) -> list[bytes]:
        rs = await asyncio.gather(*(client.exec(["/bin/echo", f"{tag}{i}"]) for i in range(15)))
        return [r.stdout for r in rs]

    def in_new_loop(factory: Any, tag: str) -> list[bytes]:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(echoes(tag))

    here, plain, uv = await asyncio.gather(
        echoes("main"),
        asyncio.to_thread(in_new_loop, asyncio.new_event_loop, "plain"),
        asyncio.to_thread(in_new_loop, uvloop.new_event_loop, "uv"),
    )
    for tag, got in (("main", here), ("plain", plain), ("uv", uv)):
        assert got == [f"{tag}{i}\n".encode() for i in range(15)]


class NoReaderLoop(asyncio.SelectorEventLoop):
    """A loop that cannot watch descriptors (as a proactor loop cannot)."""

    def add_reader(self, *args: Any) -> None:
        raise NotImplementedError


async def test_calls_resolve_on_a_loop_that_cannot_watch_descriptors(agent: tuple[Any, Any]) -> None:
    """Such a loop gets results through `call_soon_threadsafe` instead of a completion queue:
    results, errors and cancellation work the same."""
    _, client = agent

    async def use() -> list[Any]:
        rs = await asyncio.gather(*(client.exec(["/bin/echo", str(i)]) for i in range(10)))
        with pytest.raises(Exception) as bad:
            await client.exec([])
        slow = asyncio.ensure_future(client.exec(["/bin/sleep", marker()]))
        await asyncio.sleep(0.05)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        return [[r.stdout for r in rs], type(bad.value).__name__]

    def in_loop() -> list[Any]:
        with asyncio.Runner(loop_factory=NoReaderLoop) as runner:
            return runner.run(use())

    outs, error = await asyncio.to_thread(in_loop)
    assert outs == [f"{i}\n".encode() for i in range(10)]
    assert error == "NativeError"
    await still_serving(client)


def eventfds() -> int:
    fds = "/proc/self/fd"
    n = 0
    for fd in os.listdir(fds):
        try:
            n += os.readlink(f"{fds}/{fd}") == "anon_inode:[eventfd]"
        except OSError:
            pass
    return n


async def test_an_event_loop_takes_its_completion_queue_with_it(agent: tuple[Any, Any]) -> None:
    """A process that runs many short-lived loops (a script calling `asyncio.run` per job) keeps a
    bounded number of descriptors: each loop's completion queue goes when the loop does."""
    import gc

    _, client = agent

    async def true() -> int:
        return (await client.exec(["/bin/true"])).exit_code

    def one_loop() -> int:
        return asyncio.run(true())

    assert await asyncio.to_thread(one_loop) == 0
    gc.collect()
    before = eventfds()
    for _ in range(12):
        assert await asyncio.to_thread(one_loop) == 0
    gc.collect()
    assert eventfds() <= before + 1

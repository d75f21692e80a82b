"""One local sandbox, driven through the public `Sandbox` API; isolation checked from the outside."""

from __future__ import annotations

import asyncio
import secrets
import tempfile

import pytest
from helpers import kernel_has_landlock, pgrep, wait_until, warm_zygote

import sandboxes
from sandboxes import Limits

pytestmark = pytest.mark.asyncio


def marker() -> str:
    """A unique `sleep` argument to find a program from the host with `pgrep -f`."""
    return f"{86000 + secrets.randbelow(399)}.{secrets.randbelow(10**9):09d}"


async def test_exec(sb: sandboxes.Sandbox) -> None:
    r = await sb.exec(["echo", "hello"])
    assert r.exit_code == 0 and r.ok
    assert r.stdout == b"hello\n" and r.stderr == b""
    assert not r.timed_out and not r.oom_killed


async def test_exec_str_runs_through_shell_with_env_stdin_cwd(sb: sandboxes.Sandbox) -> None:
    await sb.write_file("sub/keep.txt", b"")
    work = (await sb.info()).work_dir
    r = await sb.exec("echo $GREETING; pwd; cat", env={"GREETING": "hi"}, stdin="input", cwd=f"{work}/sub")
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"hi\n{work}/sub\ninput".encode()


async def test_a_program_can_reopen_its_own_stdio_by_name(sb: sandboxes.Sandbox) -> None:
    """`> /dev/stderr` and `open('/dev/stdout')` reopen the program's pipes through /proc/self/fd:
    the pipes must be open to the program's uid, not only to the agent that made them."""
    r = await sb.exec(
        "echo out > /dev/stdout; echo err > /dev/stderr; read x < /dev/stdin; echo $x", stdin=b"in\n"
    )
    assert (r.exit_code, r.stdout, r.stderr) == (0, b"out\nin\n", b"err\n"), r


async def test_relative_cwd_is_under_the_work_dir(sb: sandboxes.Sandbox) -> None:
    await sb.write_file("rel/keep.txt", b"")
    r = await sb.exec(["pwd"], cwd="rel")
    assert r.stdout == f"{(await sb.info()).work_dir}/rel\n".encode()


async def test_exec_stream_interactive_stdin(sb: sandboxes.Sandbox) -> None:
    out = bytearray()
    kinds = []
    async with sb.exec_stream(["cat"]) as stream:
        async for ev in stream:
            kinds.append(ev.kind)
            if ev.kind == "started":
                assert ev.pid
                await stream.send_stdin(b"hello ")
                await stream.send_stdin("world")
                await stream.close_stdin()
            elif ev.kind == "stdout":
                out += ev.data
    assert kinds[0] == "started" and kinds[-1] == "exit"
    assert bytes(out) == b"hello world"
    assert stream.result is not None and stream.result.exit_code == 0


async def test_exec_stream_with_stdin_argument(sb: sandboxes.Sandbox) -> None:
    r = await sb.exec_stream("tr a-z A-Z; echo done >&2", stdin=b"shout").wait()
    assert (r.exit_code, r.stdout, r.stderr) == (0, b"SHOUT", b"done\n")


async def test_exec_stream_signal(sb: sandboxes.Sandbox) -> None:
    async with sb.exec_stream(["sleep", marker()]) as stream:
        async for ev in stream:
            if ev.kind == "started":
                await stream.signal(15)
    assert stream.result is not None
    assert stream.result.signal == 15 and stream.result.exit_code == -1


async def test_files_round_trip(sb: sandboxes.Sandbox) -> None:
    blob = bytes(range(256)) * 1000
    await sb.write_file("data/blob.bin", blob)
    await sb.write_files({"a.txt": "alpha", "b/c.txt": b"gamma", "run.sh": ("#!/bin/sh\necho ran\n", 0o755)})
    assert await sb.read_file("data/blob.bin") == blob
    assert await sb.read_file("a.txt") == b"alpha"
    assert await sb.read_file("b/c.txt") == b"gamma"
    r = await sb.exec(["./run.sh"])
    assert r.stdout == b"ran\n", r.stderr
    # Files written by user code are readable too.
    await sb.exec("printf made > made.txt")
    assert await sb.read_file("made.txt") == b"made"


async def test_list_dir(sb: sandboxes.Sandbox) -> None:
    await sb.write_files({"d/one.txt": b"1", "d/two.txt": b"22", "d/sub/x": b""})
    entries = {e.name: e for e in await sb.list_dir("d")}
    assert set(entries) == {"one.txt", "two.txt", "sub"}
    assert entries["two.txt"].size == 2 and not entries["two.txt"].is_dir
    assert entries["sub"].is_dir
    assert "d" in {e.name for e in await sb.list_dir()}


async def test_remove(sb: sandboxes.Sandbox) -> None:
    await sb.write_files({"f.txt": b"x", "tree/a/b.txt": b"y"})
    await sb.remove("f.txt")
    with pytest.raises(sandboxes.NotFound):
        await sb.read_file("f.txt")
    with pytest.raises(sandboxes.SandboxError):
        await sb.remove("tree")  # not empty
    await sb.remove("tree", recursive=True)
    assert "tree" not in {e.name for e in await sb.list_dir()}


async def test_paths_cannot_leave_the_sandbox(sb: sandboxes.Sandbox) -> None:
    with pytest.raises((sandboxes.AuthError, sandboxes.InvalidRequest)):
        await sb.read_file("../../etc/shadow")
    with pytest.raises((sandboxes.AuthError, sandboxes.InvalidRequest)):
        await sb.write_file("/etc/evil", b"x")


async def test_timeout_kills_the_process_tree(sb: sandboxes.Sandbox) -> None:
    m1, m2 = marker(), marker()
    r = await sb.exec(f"sleep {m1} & setsid sleep {m2} & wait", timeout=0.5)
    assert r.timed_out
    assert not r.ok
    await wait_until(
        lambda: not pgrep(f"sleep {m1}") and not pgrep(f"sleep {m2}"), what="the timed-out tree to be gone"
    )
    assert (await sb.exec(["true"])).exit_code == 0


async def test_kept_descendants_outlive_the_program_and_end_with_the_sandbox(pool: sandboxes.Pool) -> None:
    """`keep_descendants`: what a shell leaves behind with `&` (same process group, same exec
    cgroup) keeps running after the exec answers, as in a container, until the sandbox ends;
    without it, it dies with the program. A descendant holding the output pipe does not hold
    up the answer."""
    kept, killed, holder = marker(), marker(), marker()
    async with pool.sandbox() as sb:
        r = await sb.exec(f"sleep {kept} > /dev/null 2>&1 & echo started", keep_descendants=True)
        assert r.ok and r.stdout == b"started\n"
        r = await sb.exec(f"sleep {holder} & echo holding", keep_descendants=True, timeout=60)
        assert r.ok and r.stdout == b"holding\n" and not r.timed_out
        r = await sb.exec(f"sleep {killed} > /dev/null 2>&1 & echo started")
        assert r.ok
        await wait_until(lambda: not pgrep(f"sleep {killed}"), what="the unkept descendant to die")
        assert pgrep(f"sleep {kept}") and pgrep(f"sleep {holder}")
        seen = await sb.exec(["ps", "-e", "-o", "args"])
        assert f"sleep {kept}".encode() in seen.stdout
        # A later exec is unaffected, and the kept processes still count against the sandbox.
        assert (await sb.exec(["echo", "alive"])).stdout == b"alive\n"
    await wait_until(
        lambda: not pgrep(f"sleep {kept}") and not pgrep(f"sleep {holder}"),
        what="the kept descendants to end with their sandbox",
    )


async def test_memory_limit_is_oom_killed(sb: sandboxes.Sandbox) -> None:
    r = await sb.exec(
        ["python3", "-c", "x = bytearray(400 << 20); x[::4096] = b'1' * len(x[::4096])"],
        limits=Limits(memory_bytes=64 << 20),
        timeout=20,
    )
    assert r.oom_killed, r
    assert not r.ok
    assert (await sb.exec(["true"])).exit_code == 0


async def test_cancelled_exec_kills_the_program(sb: sandboxes.Sandbox) -> None:
    m = marker()
    task = asyncio.create_task(sb.exec(["sleep", m], timeout=120))
    await wait_until(lambda: bool(pgrep(f"sleep {m}")), what="the program to start")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not pgrep(f"sleep {m}"), what="the cancelled program to die")
    assert (await sb.exec(["echo", "alive"])).stdout == b"alive\n"


async def test_cancelled_stream_kills_the_program(sb: sandboxes.Sandbox) -> None:
    """Cancelling a stream resets the call; the agent must notice at once, not at its next
    keepalive, and kill the program (the bound below is shorter than the keepalive period)."""
    m = marker()
    stream = sb.exec_stream(["sleep", m])
    async for ev in stream:
        if ev.kind == "started":
            break
    await wait_until(lambda: bool(pgrep(f"sleep {m}")), what="the program to start")
    stream.cancel()
    await wait_until(
        lambda: not pgrep(f"sleep {m}"), timeout=5.0, what="the cancelled stream's program to die"
    )
    assert (await sb.exec(["echo", "alive"])).stdout == b"alive\n"


async def test_network_is_off(sb: sandboxes.Sandbox) -> None:
    connected = asyncio.Event()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.set()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        code = (
            "import socket,sys\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
            "except OSError as e:\n"
            "    print(type(e).__name__); sys.exit(7)\n"
        )
        r = await sb.exec(["python3", "-c", code], timeout=20)
        assert r.exit_code == 7, r
        ifaces = await sb.exec("cat /proc/net/dev", timeout=10)
        names = {ln.split(b":")[0].strip() for ln in ifaces.stdout.splitlines()[2:]}
        assert names <= {b"lo"}, names
    finally:
        server.close()
        await server.wait_closed()
    assert not connected.is_set()


async def test_host_files_are_not_visible(sb: sandboxes.Sandbox) -> None:
    with tempfile.NamedTemporaryFile(prefix="host-secret-", dir="/tmp") as f:
        script = f'test ! -e /work/main && test ! -e /root/.bashrc && test ! -e "{f.name}"'
        r = await sb.exec(["/bin/sh", "-c", script])
        assert r.exit_code == 0, (r.stdout, r.stderr)
    r = await sb.exec(["ls", "/root"])
    assert r.exit_code != 0 or r.stdout == b""


async def test_user_code_runs_as_nobody(sb: sandboxes.Sandbox) -> None:
    r = await sb.exec(["id", "-u"])
    assert r.stdout.strip() == b"65534"
    r = await sb.exec(["id", "-g"])
    assert r.stdout.strip() == b"65534"
    info = await sb.info()
    assert info.sandbox_uid == 65534
    assert "net" in info.namespaces
    # Judged cases are confined to their directory where the kernel can (Landlock, 5.13+).
    assert info.landlock == kernel_has_landlock()


async def test_failing_program_is_a_result(sb: sandboxes.Sandbox) -> None:
    r = await sb.exec("echo oops >&2; exit 3")
    assert (r.exit_code, r.stderr) == (3, b"oops\n")
    r = await sb.exec("no-such-program-here")
    assert r.exit_code == 127


async def test_output_is_capped(sb: sandboxes.Sandbox) -> None:
    r = await sb.exec("head -c 100000 /dev/zero", limits=Limits(max_output_bytes=1000))
    assert r.stdout_truncated and len(r.stdout) <= 1000


async def test_python_runs_through_the_zygote_with_the_same_isolation(sb: sandboxes.Sandbox) -> None:
    await warm_zygote(sb)
    r = await sb.exec(["python3", "-c", "print(1)"])
    assert (r.stdout, r.exit_code, r.path) == (b"1\n", 0, "zygote")
    assert (await sb.info()).zygote
    r = await sb.exec(["python3", "-c", "import os, sys; print(os.getuid(), sys.stdin.read())"], stdin="in")
    assert (r.stdout, r.path) == (b"65534 in\n", "zygote")
    # State set by one execution is not seen by the next.
    await sb.exec(["python3", "-c", "import json; json.leak = 1"])
    r = await sb.exec(["python3", "-c", "import json; print(hasattr(json, 'leak'))"])
    assert (r.stdout, r.path) == (b"False\n", "zygote")
    r = await sb.exec(["python3", "-c", "import time; time.sleep(100)"], timeout=0.5)
    assert r.timed_out and r.path == "zygote"
    r = await sb.exec(["python3", "-c", "b = bytearray(1 << 30)"], limits=Limits(memory_bytes=64 << 20))
    assert r.oom_killed and r.path == "zygote"
    # Other programs are spawned as before.
    assert (await sb.exec(["true"])).path == "spawn"

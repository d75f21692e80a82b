"""Checkpoints that carry a sandbox's running programs (`sb.checkpoint(memory=True)`, the local
backend with the host's CRIU): every sandbox made from one runs them on from the checkpoint's
moment, each copy on its own, and the source runs on; what CRIU cannot dump is refused by name."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from server_helpers import KEY_A
from test_cli import run_cli

from sandboxes import NotFound, Pool, Sandbox
from sandboxes.backends import memory
from sandboxes.client import AsyncSandboxClient
from sandboxes.errors import Conflict, MemorySnapshotError

pytestmark = [pytest.mark.requires("criu"), pytest.mark.asyncio]

# Counts from its argument, prints each value, keeps /tmp/count (replaced whole, so a snapshot
# taken at any instant holds a count) and appends to an open log.
COUNTER = """
import os, sys, time
n = int(sys.argv[1])
log = open("/tmp/log", "a")
while True:
    n += 1
    print(n, flush=True)
    log.write(f"{n}\\n")
    log.flush()
    with open("/tmp/count.tmp", "w") as f:
        f.write(str(n))
    os.replace("/tmp/count.tmp", "/tmp/count")
    time.sleep(0.02)
"""
START = 1_000_000  # given to the source's program only: a count above it elsewhere is its memory

IO_URING = """
import ctypes, time
params = (ctypes.c_char * 120)()
fd = ctypes.CDLL(None, use_errno=True).syscall(425, 4, params)  # io_uring_setup
print(fd, flush=True)
n = 0
while True:
    n += 1
    open("/tmp/count", "w").write(str(n))
    time.sleep(0.02)
"""

UNDUMPABLE = """
import ctypes, time
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
n = 0
while True:
    n += 1
    open("/tmp/count", "w").write(str(n))
    time.sleep(0.02)
"""


async def _count(sb: Any) -> int:
    r = await sb.exec(["sh", "-c", "cat /tmp/count 2>/dev/null || echo 0"])
    return int(r.stdout.strip() or 0)


async def _above(sb: Any, n: int) -> bool:
    return await _count(sb) > n


def _agent(sb: Sandbox) -> int:
    return int(sb.handle.backend_data.pid)


async def test_sandboxes_made_from_a_memory_checkpoint_count_on_from_its_moment(
    make_pool: Callable[..., Awaitable[Pool]],
) -> None:
    pool = await make_pool(warm=0)
    async with pool.sandbox() as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        async with a.exec_stream(["python3", "/tmp/counter.py", str(START)]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, START), what="the source counting")
            cp = await a.checkpoint(memory=True)
            at_checkpoint = await _count(a)
            assert cp.memory and cp.bytes > 1 << 20  # a Python process's memory is in it
            assert pool.checkpoints.memory_path(cp.id).is_dir()

            # The source runs on, its stream too.
            await wait_until(lambda: _above(a, at_checkpoint), what="the source counting on")
            assert (await anext(program)).kind == "stdout"

            # Two at once: restores read the images side by side.
            copies = list(await asyncio.gather(pool.claim(checkpoint=cp), pool.claim(checkpoint=cp)))
            try:
                for b in copies:
                    # The checkpoint's files hold its moment's count; the program, the source's
                    # memory, counts on from there, appending to the log it holds open (restored
                    # with it: its size is the one of the checkpoint's files).
                    at_copy = await _count(b)
                    assert at_copy > START
                    await wait_until(functools.partial(_above, b, at_copy), what="a copy counting on")
                    log = (await b.read_file("/tmp/log")).split()
                    assert int(log[0]) == START + 1 and int(log[-1]) > at_copy
                    [restored] = memory.programs_of(_agent(b))
                    assert os.readlink(f"/proc/{restored}/ns/pid") == os.readlink(f"/proc/{_agent(b)}/ns/pid")

                # Each copy is its own: the first's program ends, the second's and the source's go on.
                first, second = copies
                r = await first.exec(["kill", "-9", str(program.pid)])
                assert r.exit_code == 0, r.stderr
                await wait_until(
                    lambda: not memory.programs_of(_agent(first)), what="the copy's program gone"
                )
                stopped_at = await _count(first)
                second_now, a_now = await _count(second), await _count(a)
                await wait_until(lambda: _above(second, second_now), what="the other copy counting on")
                await wait_until(lambda: _above(a, a_now), what="the source counting on")
                assert await _count(first) == stopped_at
            finally:
                for b in copies:
                    await b.close()

    await pool.delete_checkpoint(cp.id)
    assert not pool.checkpoints.memory_path(cp.id).exists()


async def test_forks_with_memory_count_on_and_leave_no_images(
    make_pool: Callable[..., Awaitable[Pool]],
) -> None:
    pool = await make_pool(warm=0)
    async with pool.sandbox() as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        async with a.exec_stream(["python3", "/tmp/counter.py", str(START)]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, START), what="the source counting")
            forks = await a.fork(2, memory=True)
            try:
                for b in forks:
                    at_fork = await _count(b)
                    await wait_until(functools.partial(_above, b, at_fork), what="a fork counting on")
                    assert memory.programs_of(_agent(b))  # its own copy, a child of its own agent
                a_now = await _count(a)
                await wait_until(lambda: _above(a, a_now), what="the source counting on")
                # A restored program is its sandbox's own: a checkpoint of the fork carries it on.
                cp = await forks[0].checkpoint(memory=True)
                async with pool.sandbox(checkpoint=cp) as c:
                    at_c = await _count(c)
                    await wait_until(functools.partial(_above, c, at_c), what="the fork's copy counting on")
                await pool.delete_checkpoint(cp.id)
            finally:
                for b in forks:
                    await b.close()
    assert pool.checkpoints.list() == []
    assert list(pool.checkpoints.tmp_dir.iterdir()) == []


async def test_a_memory_checkpoint_outlives_its_source_and_its_pool(
    make_pool: Callable[..., Awaitable[Pool]],
) -> None:
    first = await make_pool(warm=0)
    async with first.sandbox() as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        async with a.exec_stream(["python3", "/tmp/counter.py", str(START)]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, START), what="the source counting")
            cp = await a.checkpoint(memory=True, ttl_s=None)
    await first.close()

    # Another pool over the same store (a server restarted) makes sandboxes from it.
    second = await make_pool(warm=0)
    async with second.sandbox(checkpoint=cp.id) as b:
        at_copy = await _count(b)
        assert at_copy > START
        await wait_until(functools.partial(_above, b, at_copy), what="the copy counting on")
    await second.delete_checkpoint(cp.id)
    assert not second.checkpoints.memory_path(cp.id).exists()


async def test_a_python_program_of_the_zygote_is_carried_and_the_zygote_is_not(
    make_pool: Callable[..., Awaitable[Pool]],
) -> None:
    # Every sandbox of this template starts its own zygote at start: the copy keeps its own.
    pool = await make_pool(warm=0, python_zygote="eager")
    async with pool.sandbox() as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        async with a.exec_stream(["python3", "/tmp/counter.py", str(START)]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, START), what="the source counting")
            assert [memory._ns_pid(p) for p in memory.programs_of(_agent(a))] == [program.pid]
            cp = await a.checkpoint(memory=True)
        async with pool.sandbox(checkpoint=cp) as b:
            at_copy = await _count(b)
            await wait_until(functools.partial(_above, b, at_copy), what="the copy counting on")
            r = await b.exec(["python3", "-c", "print(6 * 7)"])  # its own zygote serves it
            assert r.stdout.strip() == b"42", r
    await pool.delete_checkpoint(cp.id)


async def test_a_sandbox_without_cgroups_is_refused_not_copied_without_its_programs(
    make_pool: Callable[..., Awaitable[Pool]],
) -> None:
    pool = await make_pool(warm=0, cgroups=False)
    async with pool.sandbox() as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        async with a.exec_stream(["python3", "/tmp/counter.py", "0"]) as program:
            assert (await anext(program)).kind == "started"
            with pytest.raises(MemorySnapshotError, match="no cgroups"):
                await a.checkpoint(memory=True)
    assert pool.checkpoints.list() == []


async def test_a_memory_checkpoint_is_missing_to_another_owner(
    make_pool: Callable[..., Awaitable[Pool]],
) -> None:
    pool = await make_pool(warm=0)
    async with pool.sandbox() as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        async with a.exec_stream(["python3", "/tmp/counter.py", "0"]) as program:
            assert (await anext(program)).kind == "started"
            cp = await pool.checkpoint(a, owner="k1", memory=True)
        with pytest.raises(NotFound):
            await pool.claim(checkpoint=cp.id, owner="k2")
    await pool.delete_checkpoint(cp.id, owner="k1")


# A thread counts, which the main thread writes to /tmp/count; a child process (a shell, which
# starts a process per step) counts in /tmp/child.
FAMILY = """
import os, subprocess, threading, time
n = 0
def count():
    global n
    while True:
        n += 1
        time.sleep(0.01)
threading.Thread(target=count, daemon=True).start()
step = "i=$((i+1)); echo $i > /tmp/child.tmp; mv /tmp/child.tmp /tmp/child; sleep 0.02"
subprocess.Popen(["sh", "-c", f"i=0; while :; do {step}; done"])
while True:
    with open("/tmp/count.tmp", "w") as f:
        f.write(str(n))
    os.replace("/tmp/count.tmp", "/tmp/count")
    time.sleep(0.02)
"""


async def _child_count(sb: Any) -> int:
    r = await sb.exec(["sh", "-c", "cat /tmp/child 2>/dev/null || echo 0"])
    return int(r.stdout.strip() or 0)


async def test_a_program_with_threads_and_child_processes_is_carried(
    make_pool: Callable[..., Awaitable[Pool]],
) -> None:
    """A program of several tasks (a thread of its own, a child shell and the processes that shell
    starts) is restored whole into each copy: its pid namespace belongs to its programs' user
    namespace, where the restored tasks may take their pids. Each copy's thread and child count on
    from the checkpoint's moment, on their own."""
    pool = await make_pool(warm=0)
    async with pool.sandbox() as a:
        await a.write_file("/tmp/family.py", FAMILY)
        async with a.exec_stream(["python3", "/tmp/family.py"]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, 0), what="the thread counting")

            async def child_counting(sb: Any, n: int) -> bool:
                return await _child_count(sb) > n

            await wait_until(lambda: child_counting(a, 0), what="the child counting")
            cp = await a.checkpoint(memory=True)
        copies = list(await asyncio.gather(pool.claim(checkpoint=cp), pool.claim(checkpoint=cp)))
        try:
            for b in copies:
                at_copy, child_at = await _count(b), await _child_count(b)
                assert at_copy > 0 and child_at > 0  # the checkpoint's files
                await wait_until(functools.partial(_above, b, at_copy), what="a copy's thread counting on")
                await wait_until(
                    functools.partial(child_counting, b, child_at), what="a copy's child counting on"
                )
                [restored] = memory.programs_of(_agent(b))
                assert memory._status_field(restored, "Threads") == "2"
                assert memory._tree(restored)[1:], "the child shell is restored with its parent"
            # Each copy is its own: the first's program and its child end, the second's count on.
            first, second = copies
            [restored] = memory.programs_of(_agent(first))
            for pid in memory._tree(restored):
                with contextlib.suppress(ProcessLookupError):  # the shell's step ended meanwhile
                    os.kill(pid, 9)
            await wait_until(lambda: not memory.programs_of(_agent(first)), what="the copy's program gone")
            now = await _count(second)
            await wait_until(functools.partial(_above, second, now), what="the other copy counting on")
        finally:
            for b in copies:
                await b.close()
    await pool.delete_checkpoint(cp.id)


@pytest.mark.parametrize(
    ("program", "named"),
    [
        (IO_URING, "anon_inode:[io_uring]"),
        (UNDUMPABLE, "made itself undumpable"),
    ],
)
async def test_a_program_criu_cannot_take_is_named_and_its_sandbox_runs_on(
    make_pool: Callable[..., Awaitable[Pool]], program: str, named: str
) -> None:
    pool = await make_pool(warm=0)
    async with pool.sandbox() as a:
        await a.write_file("/tmp/p.py", program)
        async with a.exec_stream(["python3", "/tmp/p.py"]) as stream:
            assert (await anext(stream)).kind == "started"
            await wait_until(lambda: _above(a, 0), what="the program running")
            with pytest.raises(MemorySnapshotError) as refused:
                await a.checkpoint(memory=True)
            assert named in str(refused.value) and refused.value.stage == "dump"
            now = await _count(a)
            await wait_until(lambda: _above(a, now), what="the program running on")
            assert pool.checkpoints.list() == []
            assert list(pool.checkpoints.tmp_dir.iterdir()) == []


async def test_memory_checkpoints_and_forks_over_grpc_and_the_cli(server) -> None:
    """Through the server: `checkpoint(memory=True)` by our gRPC client and `sandboxes checkpoint
    create --memory` / `sandboxes fork --memory` by the CLI; in each sandbox made, the counter the
    source started counts on above the start only the source was given."""
    addr = {"SANDBOXES_ADDRESS": server.address, "SANDBOXES_API_KEY": KEY_A}

    async def counting(sb: Any, above: int) -> bool:
        first = await _count(sb)
        await asyncio.sleep(0.3)
        return above < first < await _count(sb)

    async with AsyncSandboxClient(server.address, KEY_A) as client:
        sb = await client.create()
        await sb.write_file("/tmp/counter.py", COUNTER.encode())
        await sb.exec(
            ["sh", "-c", f"setsid python3 /tmp/counter.py {START} >/dev/null 2>&1 &"], keep_descendants=True
        )
        await wait_until(lambda: _above(sb, START), what="the source's counter")
        cp = await sb.checkpoint(memory=True)
        assert cp.memory and [c.memory for c in await client.checkpoints()] == [True]
        made = await client.create(checkpoint=cp.id)
        assert await counting(made, START)
        await made.close()
        rc, out, err = await run_cli("checkpoint", "create", sb.id, "--memory", "--keep", **addr)
        assert rc == 0, err
        rc, out, err = await run_cli(
            "exec", "--checkpoint", out.decode().strip(), "--", "pgrep", "-f", "[c]ounter", **addr
        )
        assert rc == 0 and out.split(), err  # the counter runs there, restored, not started
        rc, out, err = await run_cli("fork", sb.id, "-n", "2", "--memory", **addr)
        assert rc == 0, err
        for fid in out.decode().split():
            fork = await client.get(fid)
            assert await counting(fork, START)
            await fork.close()
        # A program CRIU cannot take: refused by name (FAILED_PRECONDITION), the sandbox runs on.
        await sb.write_file("/tmp/undumpable.py", UNDUMPABLE.encode())
        await sb.exec(
            ["sh", "-c", "setsid python3 /tmp/undumpable.py >/dev/null 2>&1 &"], keep_descendants=True
        )
        await wait_until(lambda: _above(sb, 0), what="the undumpable program")
        with pytest.raises(Conflict, match="made itself undumpable"):
            await sb.checkpoint(memory=True)
        assert (await sb.exec(["true"])).exit_code == 0
        await sb.close()


# Holds a listening socket, a file it wrote and a pipe, and counts.
HOLDER = """
import os, socket, sys, time
srv = socket.socket()
srv.bind(("127.0.0.1", 8123))
srv.listen()
held = open("/tmp/held", "w")
r, w = os.pipe()
n = int(sys.argv[1])
while True:
    n += 1
    with open("/tmp/count", "w") as f:
        f.write(str(n))
    time.sleep(0.02)
"""


def _fds(pid: int) -> dict[int, str]:
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return out


def _tree(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        kids = [int(p) for p in f.read().split()]
    return [pid, *(k for c in kids for k in _tree(c))]


async def test_a_restored_sandbox_holds_nothing_of_the_host_or_of_its_source(
    make_pool: Callable[..., Awaitable[Pool]],
) -> None:
    """Checked from the host: a restored program (a listening socket, a file, a pipe) is in the new sandbox's namespaces (its programs' user namespace, its agent's others), sees
    its root, sits in its cgroup, and holds no socket, pipe or file of the source's processes; its
    files are the new sandbox's, and the host's are not among them."""
    pool = await make_pool(warm=0)
    async with pool.sandbox() as a:
        await a.write_file("/tmp/holder.py", HOLDER)
        async with a.exec_stream(["python3", "/tmp/holder.py", str(START)]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, START), what="the source counting")
            cp = await a.checkpoint(memory=True)
            async with pool.sandbox(checkpoint=cp) as b:
                [src] = memory.programs_of(_agent(a))
                [dst] = memory.programs_of(_agent(b))
                agent_b = _agent(b)
                for ns in ("pid", "mnt", "net", "ipc", "uts", "cgroup"):
                    assert os.readlink(f"/proc/{dst}/ns/{ns}") == os.readlink(f"/proc/{agent_b}/ns/{ns}"), ns
                    assert os.readlink(f"/proc/{dst}/ns/{ns}") != os.readlink(f"/proc/{src}/ns/{ns}"), ns
                assert os.readlink(f"/proc/{dst}/ns/user") == os.readlink(f"/proc/{agent_b}/fd/1021")
                root_b, root_dst = os.stat(f"/proc/{agent_b}/root/"), os.stat(f"/proc/{dst}/root/")
                assert (root_dst.st_dev, root_dst.st_ino) == (root_b.st_dev, root_b.st_ino)
                # Its cgroups (memory and pids, which bound it) are below the new sandbox's own.
                names = {d.name for d in memory.sandbox_cgroup_dirs(agent_b)}
                bounding = [
                    line.split(":", 2)[2]
                    for line in Path(f"/proc/{dst}/cgroup").read_text().splitlines()
                    if {"memory", "pids"} & set(line.split(":", 2)[1].split(","))
                ]
                assert bounding and all(any(f"/{n}/" in f"{path}/" for n in names) for path in bounding), (
                    names,
                    bounding,
                )
                # Nothing of the source's tree or of the host: sockets and pipes are objects of
                # their own, files are the new sandbox's (its mount namespace's), not the host's.
                source_objects = {
                    t for p in _tree(src) for t in _fds(p).values() if t.startswith(("socket:", "pipe:"))
                }
                restored = [t for p in _tree(dst) for t in _fds(p).values()]
                assert [t for t in restored if t.startswith("socket:")], restored  # its listener
                assert not source_objects & set(restored), (source_objects, restored)
                for p in _tree(dst):
                    for fd, target in _fds(p).items():
                        if target.startswith("/"):
                            st = os.stat(f"/proc/{p}/fd/{fd}")
                            if stat.S_ISCHR(st.st_mode):
                                continue  # /dev/null and the like: the devices every sandbox binds
                            host = os.stat(target) if os.path.exists(target) else None
                            assert host is None or (host.st_dev, host.st_ino) != (st.st_dev, st.st_ino), (
                                target
                            )
                r = await b.exec(
                    ["python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 8123))"]
                )
                assert r.exit_code == 0, r.stderr  # its listener listens in the new sandbox
    await pool.delete_checkpoint(cp.id)

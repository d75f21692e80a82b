"""Checkpoints that carry a sandbox's running programs (`sb.checkpoint(memory=True)`, the local
backend with the host's CRIU): every sandbox made from one runs them on from the checkpoint's
moment, each copy on its own, and the source runs on; what CRIU cannot dump is refused by name."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable

import pytest
from helpers import wait_until

from sandboxes import NotFound, Pool, Sandbox
from sandboxes.backends import memory
from sandboxes.errors import MemorySnapshotError

pytestmark = [pytest.mark.requires("criu"), pytest.mark.asyncio]

# Counts from its argument, prints each value, keeps /tmp/count and appends to an open log.
COUNTER = """
import sys, time
n = int(sys.argv[1])
log = open("/tmp/log", "a")
while True:
    n += 1
    print(n, flush=True)
    log.write(f"{n}\\n")
    log.flush()
    with open("/tmp/count", "w") as f:
        f.write(str(n))
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


async def _count(sb: Sandbox) -> int:
    r = await sb.exec(["sh", "-c", "cat /tmp/count 2>/dev/null || echo 0"])
    return int(r.stdout.strip() or 0)


async def _above(sb: Sandbox, n: int) -> bool:
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


@pytest.mark.parametrize(
    ("program", "named"), [(IO_URING, "anon_inode:[io_uring]"), (UNDUMPABLE, "made itself undumpable")]
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

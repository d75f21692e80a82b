"""The host's CRIU as `make criu` installs it: its own check passes here, the server learns at
start that memory snapshots' dependency is met (Health shows the probe's answer), and a running
program is dumped from one sandbox and restored into another (`sandboxes.backends.memory`)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from helpers import wait_until

from sandboxes import Limits, Pool, Sandbox
from sandboxes.backends import memory
from sandboxes.client import AsyncSandboxClient
from sandboxes.errors import MemorySnapshotError
from sandboxes.server.criu import MIN_VERSION, parse_version, probe


@pytest.mark.requires("criu")
def test_the_installed_criu_passes_its_check() -> None:
    criu = shutil.which("criu")
    assert criu is not None
    version = subprocess.run([criu, "--version"], check=True, capture_output=True, text=True, timeout=30)
    release = parse_version(version.stdout)
    assert release is not None and release >= MIN_VERSION, version.stdout
    r = subprocess.run([criu, "check"], check=False, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.asyncio
async def test_health_shows_the_probe(server, client: AsyncSandboxClient) -> None:
    assert (await client.health())["criu"] == dataclasses.asdict(probe())


@pytest.mark.requires("criu")
@pytest.mark.asyncio
async def test_health_reports_memory_snapshots_possible(server, client: AsyncSandboxClient) -> None:
    host = (await client.health())["criu"]
    assert host["found"] and host["ok"] and host["reason"] == ""
    assert (parse_version(f"Version: {host['version']}") or ()) >= MIN_VERSION


# --- the mechanism: a running program carried from one sandbox into another ----------------------

COUNTER = """
import sys, time
n = int(sys.argv[1])
while True:
    n += 1
    print(n, flush=True)
    with open("/tmp/count", "w") as f:
        f.write(str(n))
    time.sleep(0.02)
"""
START = 1_000_000  # given to the program in A only: a count above it in B is A's memory


async def _count(sb: Sandbox) -> int:
    r = await sb.exec(["sh", "-c", "cat /tmp/count 2>/dev/null || echo 0"])
    return int(r.stdout.strip() or 0)


async def _above(sb: Sandbox, n: int) -> bool:
    return await _count(sb) > n


def _ns(pid: int, name: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{name}")


def _status(pid: int, field: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"/proc/{pid}/status has no {field}")


@pytest.mark.requires("criu")
@pytest.mark.asyncio
async def test_a_running_program_dumped_in_one_sandbox_counts_on_in_another(
    make_pool: Callable[..., Awaitable[Pool]], tmp_path: Path
) -> None:
    pool = await make_pool(warm=0)
    async with pool.sandbox() as a, pool.sandbox() as b:
        agent_a, agent_b = a.handle.backend_data.pid, b.handle.backend_data.pid
        await a.write_file("/tmp/counter.py", COUNTER)
        limits = Limits(memory_bytes=300 << 20, max_pids=7)
        async with a.exec_stream(["python3", "/tmp/counter.py", str(START)], limits=limits) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, START), what="A counting")
            before_dump = await _count(a)

            dumped = await asyncio.to_thread(memory.dump_programs, agent_a, tmp_path / "images")
            assert [p.pid for p in dumped] == [program.pid]
            # A program's pid is above every pid of a fresh sandbox's start-up (the agent moves
            # its pid namespace's last pid up once started), which B's tasks hold. B is asked
            # nothing before the restore: a request's thread would take the next pid, as A's did.
            b_tasks = [
                int(_status(int(t.name), "NSpid").split()[-1])
                for t in Path(f"/proc/{agent_b}/task").iterdir()
            ]
            assert max(b_tasks) < program.pid
            await asyncio.to_thread(memory.restore_programs, agent_b, dumped)

            # B's copy goes on from the dumped count, and A's original runs on.
            await wait_until(lambda: _above(b, before_dump), what="B counting on from A's value")
            a_now, b_now = await _count(a), await _count(b)
            await wait_until(lambda: _above(a, a_now), what="A counting on")
            await wait_until(lambda: _above(b, b_now), what="B counting on")

            # From the host: B's copy is in B's pid namespace, programs' user namespace and cgroup.
            [restored] = memory.programs_of(agent_b)
            assert _ns(restored, "pid") == _ns(agent_b, "pid") != _ns(agent_a, "pid")
            assert _ns(restored, "time") == _ns(agent_b, "time")  # none of CRIU's making
            assert _ns(restored, "user") == os.readlink(f"/proc/{agent_b}/fd/{memory.USERNS_FD}")
            assert _status(restored, "NSpid").split()[-1] == str(program.pid)
            assert _status(restored, "Seccomp") == "2"  # its filter came with it
            # Its stdout, a pipe to A's agent, is B's /dev/null: it prints on.
            assert [os.readlink(f"/proc/{restored}/fd/{fd}") for fd in (0, 1, 2)] == ["/dev/null"] * 3
            for d in memory.sandbox_cgroup_dirs(agent_b):
                own = d / f"{memory.RESTORED_CGROUP}{program.pid}"
                assert str(restored) in (own / "cgroup.procs").read_text().split()
            # ... which holds the limits its exec had in A.
            kept = memory._exec_limits(restored)
            assert kept["pids.max"] == "7"
            assert kept.get("memory.max", kept.get("memory.limit_in_bytes")) == str(300 << 20)
            in_a = [_status(p, "NSpid").split()[-1] for p in memory.programs_of(agent_a)]
            assert in_a == [str(program.pid)]  # A's original, still its only program

            # B's copy holds the pid: a second restore into B is refused before CRIU runs, naming
            # it, and the copy counts on.
            taken = f"pid {program.pid} is taken in the new sandbox by python3"
            with pytest.raises(MemorySnapshotError, match=taken):
                await asyncio.to_thread(memory.restore_programs, agent_b, dumped)
            assert memory.programs_of(agent_b) == [restored]
            b_now = await _count(b)
            await wait_until(lambda: _above(b, b_now), what="B counting on after the refusal")

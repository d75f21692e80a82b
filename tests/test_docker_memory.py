"""Memory checkpoints and forks on the docker backend: the host's CRIU, entered into a container's
namespaces (`sandboxes.backends.memory`), carries a running program into new containers. Each copy
counts on from the checkpoint's moment, the source runs on, and every restored program is checked
from the host: in its own container's namespaces and in that container's cgroup in every
hierarchy the engine placed it in."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until
from test_memory_checkpoints import COUNTER, START, _above, _count

from sandboxes import Pool, Sandbox
from sandboxes.backends import memory
from sandboxes.errors import MemorySnapshotError
from sandboxes.templates import Template

pytestmark = [pytest.mark.requires("criu"), pytest.mark.asyncio, pytest.mark.timeout(900)]

MakePool = Callable[..., Awaitable[Pool]]


def _agent(sb: Sandbox) -> int:
    return int(sb.handle.backend_data.pid)


def _cgroups(pid: int) -> dict[str, str]:
    return {
        ctrls: path
        for _, ctrls, path in (
            line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        )
    }


def _engine_pid(docker_api: Any, sb: Sandbox) -> int:
    """The container's init as the engine reports it (`State.Pid`)."""
    return int(docker_api.inspect_container(sb.handle.backend_data.container_id)["State"]["Pid"])


def _restored_in_its_container(docker_api: Any, sb: Sandbox) -> int:
    """The one program restored into `sb`, checked from the host: a child of the container's init
    (its agent), in all of that init's namespaces but the user one (the programs' own), and below
    the container's cgroup in every hierarchy; returns its host pid."""
    agent = _agent(sb)
    assert _engine_pid(docker_api, sb) == agent
    [restored] = memory.programs_of(agent)
    for ns in ("pid", "mnt", "net", "ipc", "uts", "cgroup"):
        assert os.readlink(f"/proc/{restored}/ns/{ns}") == os.readlink(f"/proc/{agent}/ns/{ns}"), ns
    assert os.readlink(f"/proc/{restored}/ns/user") == os.readlink(f"/proc/{agent}/fd/{memory.USERNS_FD}")
    container, program = _cgroups(agent), _cgroups(restored)
    assert set(program) == set(container)
    for ctrls, path in container.items():
        assert program[ctrls].startswith(path.rstrip("/") + "/"), (ctrls, program[ctrls], path)
    return restored


@pytest.fixture
def docker_pool(images: str, make_pool: MakePool) -> MakePool:
    async def make(**kwargs: Any) -> Pool:
        return await make_pool(backend="docker", warm=0, **kwargs)

    return make


async def test_containers_made_from_a_memory_checkpoint_count_on(
    docker_api: Any, docker_pool: MakePool
) -> None:
    pool = await docker_pool()
    async with pool.sandbox() as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        async with a.exec_stream(["python3", "/tmp/counter.py", str(START)]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, START), what="the source counting")
            cp = await a.checkpoint(memory=True)
            assert cp.memory and cp.bytes > 1 << 20
            at_checkpoint = await _count(a)
            await wait_until(lambda: _above(a, at_checkpoint), what="the source counting on")

            copies = list(await asyncio.gather(pool.claim(checkpoint=cp), pool.claim(checkpoint=cp)))
            try:
                restored = []
                for b in copies:
                    at_copy = await _count(b)
                    assert at_copy > START  # the source's memory: only it was given START
                    await wait_until(functools.partial(_above, b, at_copy), what="a copy counting on")
                    log = (await b.read_file("/tmp/log")).split()
                    assert int(log[0]) == START + 1 and int(log[-1]) > at_copy
                    restored.append(_restored_in_its_container(docker_api, b))
                first, second = restored
                assert os.readlink(f"/proc/{first}/ns/pid") != os.readlink(f"/proc/{second}/ns/pid")
                # Each copy is its own: the first's program ends, the second's and the source's go on.
                r = await copies[0].exec(["sh", "-c", f"kill -9 {program.pid}"])
                assert r.exit_code == 0, r.stderr
                await wait_until(
                    lambda: not memory.programs_of(_agent(copies[0])), what="the copy's program gone"
                )
                second_now, a_now = await _count(copies[1]), await _count(a)
                await wait_until(lambda: _above(copies[1], second_now), what="the other copy counting on")
                await wait_until(lambda: _above(a, a_now), what="the source counting on")
                # A copy's restored program is a program of its container: it is carried on again.
                [again] = await copies[1].fork(1, memory=True)
                try:
                    at_again = await _count(again)
                    assert at_again > second_now
                    await wait_until(
                        functools.partial(_above, again, at_again), what="a copy's fork counting on"
                    )
                    _restored_in_its_container(docker_api, again)
                finally:
                    await again.close()
            finally:
                for b in copies:
                    await b.close()
    await pool.delete_checkpoint(cp.id)
    assert not pool.checkpoints.memory_path(cp.id).exists()


async def test_forks_of_a_container_with_memory_count_on(docker_api: Any, docker_pool: MakePool) -> None:
    pool = await docker_pool()
    async with pool.sandbox() as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        async with a.exec_stream(["python3", "/tmp/counter.py", str(START)]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, START), what="the source counting")
            forks = await a.fork(2, memory=True)
            try:
                for b in forks:
                    at_fork = await _count(b)
                    assert at_fork > START
                    await wait_until(functools.partial(_above, b, at_fork), what="a fork counting on")
                    _restored_in_its_container(docker_api, b)
                a_now = await _count(a)
                await wait_until(lambda: _above(a, a_now), what="the source counting on")
            finally:
                for b in forks:
                    await b.close()
    assert pool.checkpoints.list() == []
    assert list(pool.checkpoints.tmp_dir.iterdir()) == []


# A library that leaves a mark where CRIU loads it (the sandbox's own programs load it too).
MARKER_LIB = """
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char exe[4096] = {0};
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) > 0 && strstr(exe, "criu"))
        close(open("MARK", O_CREAT | O_WRONLY, 0644));
}
"""


@pytest.fixture
def marker_lib(tmp_path: Path) -> tuple[str, bytes]:
    """`MARKER_LIB` built on the host: (the mark's path, the library)."""
    mark = f"/tmp/criu-loaded-{uuid.uuid4().hex}"
    src = tmp_path / "marker.c"
    src.write_text(MARKER_LIB.replace("MARK", mark))
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "marker.so"), str(src)], check=True)
    return mark, (tmp_path / "marker.so").read_bytes()


async def test_criu_loads_nothing_from_a_containers_root(
    docker_pool: MakePool, marker_lib: tuple[str, bytes]
) -> None:
    """A root sandbox owns its root: a library it names in its /etc/ld.so.preload, or puts where
    CRIU looks for plugins, is loaded by neither the dump nor the restore, which run as host root
    (the mark it leaves would be in the host's /tmp or the sandbox's)."""
    mark, lib = marker_lib
    root = Template(name="root", backend="docker", user="root")
    pool = await docker_pool(templates={"root": root})
    async with pool.sandbox("root") as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        assert (await a.exec(["mkdir", "-p", "/usr/lib/criu"])).exit_code == 0
        await a.write_file("/opt/marker.so", lib)
        await a.write_file("/usr/lib/criu/marker.so", lib)
        await a.write_file("/etc/ld.so.preload", "/opt/marker.so\n")
        r = await a.exec(["sh", "-c", "cat /etc/ld.so.preload; ls /usr/lib/criu"])
        assert r.stdout.decode().split() == ["/opt/marker.so", "marker.so"], r.stderr
        async with a.exec_stream(["python3", "/tmp/counter.py", str(START)]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, START), what="the source counting")
            async with pool.sandbox(checkpoint=await a.checkpoint(memory=True)) as b:
                at_copy = await _count(b)
                await wait_until(functools.partial(_above, b, at_copy), what="the copy counting on")
                for sb in (a, b):  # b's root is a's, its library included
                    r = await sb.exec(["sh", "-c", f"test -e /etc/ld.so.preload && test ! -e {mark}"])
                    assert r.exit_code == 0, "CRIU loaded the sandbox's library"
    assert not os.path.exists(mark), "CRIU loaded the sandbox's library on the host"


async def test_a_container_without_cgroups_is_refused_and_runs_on(docker_pool: MakePool) -> None:
    """Without cgroups (`cgroups=False`) the container's programs share its agent's cgroups, so
    nothing tells them from the agent's own processes: refused, never a copy of the files alone."""
    pool = await docker_pool(cgroups=False)
    async with pool.sandbox() as a:
        await a.write_file("/tmp/counter.py", COUNTER)
        async with a.exec_stream(["python3", "/tmp/counter.py", "0"]) as program:
            assert (await anext(program)).kind == "started"
            await wait_until(lambda: _above(a, 0), what="the program running")
            with pytest.raises(MemorySnapshotError, match="no cgroups") as refused:
                await a.checkpoint(memory=True)
            assert refused.value.stage == "dump"
            now = await _count(a)
            await wait_until(lambda: _above(a, now), what="the program running on")
    assert pool.checkpoints.list() == []

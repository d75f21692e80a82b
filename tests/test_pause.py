"""Pause and resume on the real agent: every process of a sandbox stopped where it runs (the
local launcher's freezer cgroup, docker's pause) and continued, the agent's lease outliving the
pause, calls refused meanwhile; through the embedded pool, the gRPC API, and the server core's
eviction to a filesystem checkpoint (files kept, processes ended, the same id restarted)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

import sandboxes
from sandboxes import Template
from sandboxes.errors import InvalidRequest, SandboxPaused

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

# Appends the time to /tmp/ticks every 50 ms, from a process left running after its exec.
TICKER = "(while true; do date +%s.%N >> /tmp/ticks; sleep 0.05; done) >/dev/null 2>&1 &"
RUNNING = "pgrep -f '[t]icks' || true"


async def out(sb: sandboxes.SandboxBase, cmd: str) -> str:
    r = await sb.exec(["/bin/sh", "-ec", cmd], keep_descendants=True)
    assert r.exit_code == 0, r
    return r.stdout.decode()


async def ticks(sb: sandboxes.SandboxBase) -> list[float]:
    return [float(t) for t in (await sb.read_file("/tmp/ticks")).split()]


async def paused_for(sb: sandboxes.SandboxBase, seconds: float, pause, resume) -> tuple[float, float]:
    """Pause, wait `seconds`, resume; the host times the pause returned and the resume began."""
    assert await pause()
    paused_at = time.time()
    await asyncio.sleep(seconds)
    resumed_at = time.time()
    assert await resume()
    return paused_at, resumed_at


@pytest.mark.parametrize("user", ["sandbox", "root"])
async def test_a_paused_sandbox_runs_nothing_and_resumes_where_it_was(make_pool, user) -> None:
    """No tick is written while paused (every process is stopped, the agent too), the same process
    goes on after the resume, calls are refused meanwhile, and the agent's lease (1.5 s here,
    shorter than the pause) does not end the sandbox at its resume."""
    t = Template(name="t", user=user, lease_ttl_s=1.5)
    pool = await make_pool(warm=0, templates={"t": t})
    async with pool.sandbox("t") as sb:
        await out(sb, f"echo kept > /work/f; {TICKER}")
        await asyncio.sleep(0.3)
        pid = await out(sb, RUNNING)
        assert pid.strip()

        async def refused_while_paused() -> bool:
            assert sb.paused and not await sb.pause()  # paused already
            for call in (sb.exec(["true"]), sb.read_file("/work/f"), sb.checkpoint()):
                with pytest.raises(SandboxPaused):
                    await call
            return await sb.resume()

        paused_at, resumed_at = await paused_for(sb, 2.5, sb.pause, refused_while_paused)
        assert not sb.paused and not await sb.resume()  # not paused
        await asyncio.sleep(0.3)
        seen = await ticks(sb)
        assert [x for x in seen if paused_at + 0.1 < x < resumed_at] == []
        assert [x for x in seen if x > resumed_at]
        assert await out(sb, RUNNING) == pid
        assert await out(sb, "cat /work/f") == "kept\n"
        await asyncio.sleep(2.0)  # past the lease: the pool renews it again
        assert await out(sb, "echo alive") == "alive\n"


async def test_a_paused_sandbox_is_destroyed_leaving_nothing(make_pool) -> None:
    """Closing a paused sandbox kills its stopped processes (a frozen process dies only once
    thawed) and removes its cgroups, the freezer's included."""
    pool = await make_pool(warm=0)
    sb = await pool.claim()
    await out(sb, TICKER)
    local = sb.handle.backend_data
    name = Path(local.cgroup).name
    dirs = [Path(d) / "sandboxes" / name for _, d in sandboxes._bridge.native().own_cgroup_dirs()]
    assert dirs and all(d.is_dir() for d in dirs)
    await sb.pause()
    await asyncio.wait_for(sb.close(), 30)
    assert not local.alive() and not os.path.exists(local.run_dir)
    assert [d for d in dirs if d.exists()] == []


async def test_pause_through_the_grpc_api(server, client, client_b) -> None:
    """The remote client: pause, the state in Get and List, calls FAILED_PRECONDITION
    (`SandboxPaused`), the TTL stopped while paused and back on resume; a files-only pause ends
    the processes and resume restarts the same id from its files; another key cannot pause it."""
    sb = await client.create(ttl_s=600)
    try:
        await out(sb, f"echo remote > /work/f; {TICKER}")
        assert await sb.pause() and not await sb.pause()
        got = await client.get(sb.id)
        assert got.expires_at is None or got.expires_at > time.time() + 3600  # the pause's bound
        with pytest.raises(SandboxPaused):
            await sb.exec(["true"])
        from sandboxes.errors import NotFound

        with pytest.raises(NotFound):
            await (await client_b.get(sb.id)).pause()
    except BaseException:
        await sb.close()
        raise
    try:
        assert await sb.resume() and not await sb.resume()
        assert sb.expires_at is not None and 500 < sb.expires_at - time.time() <= 600
        assert (await out(sb, RUNNING)).strip()
        assert await sb.pause(files_only=True)
        with pytest.raises(SandboxPaused):
            await sb.read_file("/work/f")
        assert await sb.resume(ttl_s=120)
        assert sb.expires_at is not None and sb.expires_at - time.time() <= 120
        assert await out(sb, "cat /work/f") == "remote\n"
        assert await out(sb, RUNNING) == ""
        assert [s.id for s in await client.list()] == [sb.id]
    finally:
        await sb.close()


async def test_a_backend_that_cannot_pause_says_so(make_pool) -> None:
    pool = await make_pool(warm=0, templates={"t": Template(name="t", cgroups=False)})
    async with pool.sandbox("t") as sb:
        with pytest.raises(sandboxes.errors.SandboxError) as e:
            await sb.pause()
        assert "cgroups" in str(e.value)
        assert not sb.paused and await out(sb, "echo ok") == "ok\n"


@pytest.mark.parametrize("backend", ["docker"])
async def test_docker_pause(images: str, make_pool, backend) -> None:
    """The engine's pause: the same stop and resume of every process of the container."""
    t = Template(name="d", backend=backend, agent_mount=True)
    pool = await make_pool(backend=backend, warm=0, templates={"d": t})
    async with pool.sandbox("d") as sb:
        await out(sb, TICKER)
        await asyncio.sleep(0.3)
        pid = await out(sb, RUNNING)
        paused_at, resumed_at = await paused_for(sb, 1.5, sb.pause, sb.resume)
        await asyncio.sleep(0.3)
        seen = await ticks(sb)
        assert [x for x in seen if paused_at + 0.1 < x < resumed_at] == []
        assert [x for x in seen if x > resumed_at] and await out(sb, RUNNING) == pid


async def test_pausing_a_sandbox_of_another_pool_is_refused(make_pool) -> None:
    a = await make_pool(warm=0)
    b = await make_pool(warm=0)
    async with a.sandbox() as sb:
        with pytest.raises((InvalidRequest, sandboxes.errors.NotFound)):
            await b.pause(sb)

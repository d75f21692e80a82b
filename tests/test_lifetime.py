"""One lifetime policy in the server's registry, seen through the real server and its HTTP
surfaces: an idle bound renewed by each surface's calls (`Registry.touch`), and what its end does
(`on_ttl`). The bounds are the APIs' own in minutes; here they are shortened on the record to a
second (`Registry.set_idle`), and the surfaces' calls are the activity."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from helpers import wait_until
from server_helpers import KEY_A

pytestmark = pytest.mark.asyncio

AUTH = {"Authorization": f"Bearer {KEY_A}"}
IDLE_S = 1.0


def no_sweeper() -> bool:
    return not any(t.get_name() == "sandboxes-prime-idle" for t in asyncio.all_tasks())


async def keep_busy(call: Any, span_s: float) -> int:
    """Calls `call()` every quarter of the idle bound for `span_s`; how many calls were made."""
    loop = asyncio.get_running_loop()
    until, calls = loop.time() + span_s, 0
    while loop.time() < until:
        await call()
        calls += 1
        await asyncio.sleep(IDLE_S / 4)
    return calls


async def test_prime_idle_timeout_is_renewed_by_gateway_calls_and_ends_an_idle_sandbox(make_server) -> None:
    """A Prime sandbox with an idle timeout outlives it while its gateway is called (well past the
    bound counted from its creation), then ends once idle, TERMINATED as `idle_timeout`; no
    sweeper task exists at any point: the registry's reaper ends it."""
    server = await make_server(http_port=0, warm=1)
    registry = server.core.registry
    base = f"http://127.0.0.1:{server.http_port}/api/v1/sandbox"
    async with aiohttp.ClientSession() as http:
        r = await http.post(
            base,
            headers=AUTH,
            json={"name": "idle", "docker_image": "x", "timeout_minutes": 30, "idle_timeout_minutes": 1},
        )
        assert r.status == 200, await r.text()
        sid = (await r.json())["id"]
        rec = registry.get(sid)
        assert rec is not None and rec.idle_s == 60.0 and no_sweeper()
        registry.set_idle(rec, IDLE_S)
        auth = await (await http.post(f"{base}/{sid}/auth", headers=AUTH)).json()
        gateway = f"{auth['gateway_url']}/{auth['user_ns']}/{auth['job_id']}"

        async def command() -> None:
            r = await http.post(
                f"{gateway}/exec",
                headers={"Authorization": f"Bearer {auth['token']}"},
                json={"command": "true"},
            )
            assert r.status == 200, await r.text()

        assert await keep_busy(command, 3 * IDLE_S) >= 4
        assert registry.get(sid) is rec and no_sweeper()  # three bounds past its creation
        await wait_until(lambda: registry.get(sid) is None, what="the idle timeout", timeout=30)
        assert rec.ended_by == "idle" and no_sweeper()
        got = await (await http.get(f"{base}/{sid}", headers=AUTH)).json()
        assert got["status"] == "TERMINATED" and got["terminationReason"] == "idle_timeout"


async def test_daytona_auto_stop_is_renewed_by_toolbox_calls_and_stops_an_idle_sandbox(make_server) -> None:
    """A Daytona sandbox's auto-stop is its idle bound: toolbox calls keep it started past the
    bound counted from its creation; idle, it is stopped (paused to its files, still listed), as
    `on_ttl` asks, not deleted."""
    server = await make_server(http_port=0, warm=1)
    registry = server.core.registry
    base = f"http://127.0.0.1:{server.http_port}/daytona"
    async with aiohttp.ClientSession() as http:
        r = await http.post(f"{base}/sandbox", headers=AUTH, json={"autoStopInterval": 1})
        assert r.status == 200, await r.text()
        sid = (await r.json())["id"]
        rec = registry.get(sid)
        assert rec is not None and rec.idle_s == 60.0 and rec.expires_at is None and rec.on_ttl == "pause"
        registry.set_idle(rec, IDLE_S)

        async def listing() -> None:
            r = await http.get(f"{base}/toolbox/{sid}/files", headers=AUTH, params={"path": "/tmp"})
            assert r.status == 200, await r.text()

        assert await keep_busy(listing, 3 * IDLE_S) >= 4
        state = (await (await http.get(f"{base}/sandbox/{sid}", headers=AUTH)).json())["state"]
        assert state == "started"
        await wait_until(lambda: rec.state == "paused", what="the auto-stop", timeout=60)
        assert rec.ended_by == "idle" and registry.get(sid) is rec
        state = (await (await http.get(f"{base}/sandbox/{sid}", headers=AUTH)).json())["state"]
        assert state == "stopped"

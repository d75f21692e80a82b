"""One holder of a sandbox's long-lived programs (`sandboxes/server/programs.py`), driven through
the real server's HTTP APIs: a Prime command session, an E2B process, Daytona's session shell with
a command running in it and its terminal, and the code interpreters' kernels are held under their
kinds, charged to the owner's exec slots as each surface charges them (a session's program, a
command, a terminal: one slot each; a shell or a kernel serving them: none), and all end, their
slots given back, when their sandbox is deleted, or stopped."""

from __future__ import annotations

import json
import secrets
import struct
from typing import Any

import aiohttp
import pytest
from helpers import pgrep
from server_helpers import KEY_A, KEYS, wait_for

from sandboxes._proto import command_session_pb2 as cs
from sandboxes._proto import envd_process_pb2 as pp
from sandboxes.server.programs import ATTR

pytestmark = pytest.mark.asyncio

OWNER = KEYS[KEY_A]
BEARER = {"Authorization": f"Bearer {KEY_A}"}


def _marker() -> str:
    """A `sleep` argument no other program on the host has (seen from outside with `pgrep`)."""
    return f"{71000 + secrets.randbelow(999)}.{secrets.randbelow(10**9):09d}"


async def _connect_start(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str], req: Any, resp: Any
) -> Any:
    """A Connect server stream's first message (the program's start), the stream then closed."""
    body = req.SerializeToString()
    async with http.post(
        url,
        headers={**headers, "Content-Type": "application/connect+proto"},
        data=struct.pack(">BI", 0, len(body)) + body,
    ) as r:
        assert r.status == 200, await r.text()
        flags, size = struct.unpack(">BI", await r.content.readexactly(5))
        frame = await r.content.readexactly(size)
        assert flags == 0, frame
        return resp.FromString(frame)


def _record(server: Any, sandbox_id: str) -> Any:
    return next(rec for rec in server.core.registry if rec.id == sandbox_id)


def _kinds(rec: Any) -> list[str]:
    return sorted(k.partition("/")[0] for k in rec.attrs[ATTR].running())


async def _daytona_sandbox(http: aiohttp.ClientSession, base: str) -> str:
    async with http.post(f"{base}/daytona/sandbox", headers=BEARER, json={}) as r:
        assert r.status == 200, await r.text()
        return str((await r.json())["id"])


async def _daytona_programs(
    http: aiohttp.ClientSession, base: str, did: str, command: str, typed: str
) -> Any:
    """A session whose shell runs `command`, a terminal `typed` is typed into, and a kernel; the
    terminal's WebSocket."""
    toolbox = f"{base}/daytona/toolbox/{did}"
    async with http.post(f"{toolbox}/process/session", headers=BEARER, json={"sessionId": "s"}) as r:
        assert r.status == 201, await r.text()
    exec_url = f"{toolbox}/process/session/s/exec"
    async with http.post(exec_url, headers=BEARER, json={"command": command, "runAsync": True}) as r:
        assert r.status == 202, await r.text()
    async with http.post(f"{toolbox}/process/interpreter/context", headers=BEARER, json={}) as r:
        assert r.status == 200, await r.text()
    ws = await http.ws_connect(
        f"{toolbox.replace('http', 'ws', 1)}/process/pty/create-connect?id=t", headers=BEARER
    )
    assert json.loads((await ws.receive()).data) == {"type": "control", "status": "connected"}
    await ws.send_bytes(typed.encode() + b"\n")
    return ws


@pytest.mark.timeout(300)
async def test_deleting_a_sandbox_ends_its_programs_of_every_kind(make_server) -> None:
    server = await make_server(http_port=0, warm=3)
    base = f"http://127.0.0.1:{server.http_port}"
    marks = {name: _marker() for name in ("prime", "e2b", "daytona command", "daytona terminal")}
    async with aiohttp.ClientSession() as http:
        # Prime: a named command session (it outlives the stream that started it).
        async with http.post(
            f"{base}/api/v1/sandbox", headers=BEARER, json={"name": "n", "docker_image": "default"}
        ) as r:
            assert r.status == 200, await r.text()
            made = await r.json()
        pid, gw = made["id"], made["gatewayAuth"]
        start = cs.StartRequest(command=cs.CommandSpec(cmd="sleep", args=[marks["prime"]]), session_uuid="u")
        first = await _connect_start(
            http,
            f"{base}/gateway/{gw['user_ns']}/{gw['job_id']}/command_session.CommandSession/Start",
            {"Authorization": f"Bearer {gw['token']}"},
            start,
            cs.StartResponse,
        )
        assert first.event.start.pid > 0

        # E2B: a process (it outlives its stream, as under the platform's daemon) and a kernel.
        async with http.post(
            f"{base}/v2/sandboxes", headers={"X-API-KEY": KEY_A}, json={"templateID": "base"}
        ) as r:
            assert r.status == 201, await r.text()
            made = await r.json()
        sid = made["sandboxID"]
        envd = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": made["envdAccessToken"]}
        first = await _connect_start(
            http,
            f"{base}/process.Process/Start",
            envd,
            pp.StartRequest(process=pp.ProcessConfig(cmd="sleep", args=[marks["e2b"]])),
            pp.StartResponse,
        )
        assert first.event.start.pid > 0
        async with http.post(
            f"{base}/contexts", headers={**envd, "E2b-Sandbox-Port": "49999"}, json={"language": "python"}
        ) as r:
            assert r.status == 200, await r.text()

        # Daytona: a session's shell running a command, a terminal, a kernel.
        did = await _daytona_sandbox(http, base)
        ws = await _daytona_programs(
            http, base, did, f"sleep {marks['daytona command']}", f"sleep {marks['daytona terminal']}"
        )
        try:
            for mark in marks.values():
                await wait_for(lambda mark=mark: bool(pgrep(f"sleep {mark}")), f"sleep {mark} to run")
            recs = {name: _record(server, i) for name, i in (("prime", pid), ("e2b", sid), ("daytona", did))}
            held = {name: rec.attrs[ATTR] for name, rec in recs.items()}
            assert _kinds(recs["prime"]) == ["prime_sessions"]
            assert _kinds(recs["e2b"]) == ["e2b_processes", "kernel"]
            assert _kinds(recs["daytona"]) == ["daytona.pty", "daytona.session", "kernel"]
            # Charged: the two sessions' programs, the command, the terminal; not the shell nor the kernels.
            assert server.core.quotas.execs(OWNER) == 4

            for url, headers in (
                (f"{base}/api/v1/sandbox/{pid}", BEARER),
                (f"{base}/sandboxes/{sid}", {"X-API-KEY": KEY_A}),
                (f"{base}/daytona/sandbox/{did}", BEARER),
            ):
                async with http.delete(url, headers=headers) as r:
                    assert r.status < 300, await r.text()
        finally:
            await ws.close()

        for name, rec in recs.items():
            assert held[name].closed and len(held[name]) == 0 and ATTR not in rec.attrs, name
        await wait_for(lambda: server.core.quotas.execs(OWNER) == 0, "every slot given back")
        for mark in marks.values():
            await wait_for(lambda mark=mark: not pgrep(f"sleep {mark}"), f"sleep {mark} to end")
    assert len(server.core.registry) == 0


@pytest.mark.timeout(300)
async def test_a_stopped_sandbox_ends_its_programs_and_starts_with_none(make_server) -> None:
    """Daytona's stop evicts the sandbox to its files: its programs end with it (the core's one
    hook), and the sandbox started again has a new, empty holder (no sessions, no terminals)."""
    server = await make_server(http_port=0, warm=1)
    base = f"http://127.0.0.1:{server.http_port}"
    command, typed = _marker(), _marker()
    async with aiohttp.ClientSession() as http:
        did = await _daytona_sandbox(http, base)
        ws = await _daytona_programs(http, base, did, f"sleep {command}", f"sleep {typed}")
        try:
            for mark in (command, typed):
                await wait_for(lambda mark=mark: bool(pgrep(f"sleep {mark}")), f"sleep {mark} to run")
            rec = _record(server, did)
            held = rec.attrs[ATTR]
            assert _kinds(rec) == ["daytona.pty", "daytona.session", "kernel"]
            assert server.core.quotas.execs(OWNER) == 2
            async with http.post(f"{base}/daytona/sandbox/{did}/stop", headers=BEARER) as r:
                assert r.status == 200, await r.text()
        finally:
            await ws.close()
        assert held.closed and len(held) == 0 and ATTR not in rec.attrs
        await wait_for(lambda: server.core.quotas.execs(OWNER) == 0, "every slot given back")
        for mark in (command, typed):
            await wait_for(lambda mark=mark: not pgrep(f"sleep {mark}"), f"sleep {mark} to end")

        async with http.post(f"{base}/daytona/sandbox/{did}/start", headers=BEARER) as r:
            assert r.status == 200, await r.text()
        toolbox = f"{base}/daytona/toolbox/{did}"
        async with http.get(f"{toolbox}/process/session", headers=BEARER) as r:
            assert (r.status, await r.json()) == (200, [])
        async with http.get(f"{toolbox}/process/pty", headers=BEARER) as r:
            assert (r.status, await r.json()) == (200, {"sessions": []})
        assert rec.attrs[ATTR] is not held and len(rec.attrs[ATTR]) == 0
        async with http.delete(f"{base}/daytona/sandbox/{did}", headers=BEARER) as r:
            assert r.status < 300, await r.text()

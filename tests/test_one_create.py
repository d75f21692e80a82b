"""One create under every surface: a sandbox made from a built template with an egress policy
has that policy in force before the build's start command runs. The start command connects,
through the sandbox's proxy, to a loopback server of the test's that only the create's policy
lets out (the built template's own policy reaches nothing); each surface's create (E2B, Prime,
Daytona, over real HTTP) answers only once the start command's ready check passed, and the
start command was let through. Real agent, real server."""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

import aiohttp
import pytest
from server_helpers import KEY_A, KEYS

from sandboxes.server.template_build import BuildSpec

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.timeout(600),
    pytest.mark.requires("root", reason="egress policies need a manager that is root"),
]

OWNER = KEYS[KEY_A]

PROBE = textwrap.dedent("""
    import socket, sys
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    target = "127.0.0.1:" + sys.argv[1]
    s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
    got = b""
    while chunk := s.recv(4096):
        got += chunk
    print(got.split(b"\\r\\n", 1)[0].decode(), got.rsplit(b"\\r\\n\\r\\n", 1)[-1].decode().strip())
""")


OUT = "/tmp/probe-$(readlink /proc/self/ns/pid | tr -dc 0-9)"  # one name per sandbox


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"fenced-ok\n")
    await writer.drain()
    writer.close()


async def _build(server: Any, port: int) -> str:
    """A template of `OWNER`'s whose start command probes the loopback server at `port`."""
    core = server.core
    # The build runs its start command too, and its checkpoint keeps what that wrote: the probe's
    # file is named by the sandbox's pid namespace, so a new sandbox's ready check never passes on
    # the build's answer.
    start = f"python3 -c {_quote(PROBE)} {port} > {OUT}.part 2>&1; mv {OUT}.part {OUT}"
    spec = BuildSpec(
        template="agent",
        base="image:fenced",
        steps=(),
        user="root",
        start_cmd=start,
        ready_cmd=f"grep -q HTTP {OUT}",
    )
    t, b = core.built.request(OWNER, "fenced", [], 0, 0)
    await core.builder.run(t, b, spec)
    assert b.status == "ready", b.reason
    return t.name


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


async def _probe_of(server: Any, sandbox_id: str) -> str:
    rec = await server.core.record(sandbox_id, OWNER)
    r = await rec.sandbox.exec(["/bin/sh", "-c", f"cat {OUT}"])
    return r.stdout.decode().strip()


async def test_each_surface_s_create_fences_egress_before_the_start_command(make_server) -> None:
    server = await make_server(http_port=0, warm=1)
    listener = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    base = f"http://127.0.0.1:{server.http_port}"
    try:
        name = await _build(server, port)
        creates = {
            "e2b": (
                f"{base}/v2/sandboxes",
                {"X-API-KEY": KEY_A},
                {"templateID": name, "network": {"allowOut": ["127.0.0.1"], "denyOut": ["0.0.0.0/0"]}},
                "sandboxID",
            ),
            "prime": (
                f"{base}/api/v1/sandbox",
                {"Authorization": f"Bearer {KEY_A}"},
                {"name": "fenced", "docker_image": name, "network_allowlist": ["127.0.0.1"]},
                "id",
            ),
            "daytona": (
                f"{base}/daytona/sandbox",
                {"Authorization": f"Bearer {KEY_A}"},
                {"snapshot": name, "networkAllowList": "127.0.0.1/32"},
                "id",
            ),
        }
        seen = {}
        async with aiohttp.ClientSession() as s:
            for surface, (url, headers, body, field) in creates.items():
                async with s.post(url, json=body, headers=headers) as r:
                    answer = await r.json()
                    assert r.status in (200, 201), (surface, r.status, answer)
                sid = answer[field]
                seen[surface] = await _probe_of(server, sid)
                await server.core.delete_record(await server.core.record(sid, OWNER), "test")
        assert seen == {k: "HTTP/1.1 200 Connection established fenced-ok" for k in creates}, seen
    finally:
        listener.close()
        await listener.wait_closed()
    assert len(server.core.registry) == 0

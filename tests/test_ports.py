"""Ports of sandboxes reached from outside through the server's ports listener (`serve
--ports-port`, `sandboxes/server/ports.py`), or its HTTP port, and the real agent's `Forward`: an ordinary HTTP
client on the host fetching from `python3 -m http.server` inside a sandbox (by path and by host
name), a download streamed whole, a WebSocket echo server inside reached by a WebSocket client
on the host; tokens, other sandboxes, deleted sandboxes, ports nothing listens on and a sandbox
on the host's network refused; nothing listens on the host for a sandbox."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import textwrap
import urllib.error
import urllib.request

import aiohttp
import pytest
from helpers import start_server_inside
from server_helpers import KEY_A

import sandboxes
from sandboxes import Template

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

PORT = 38517  # inside the sandboxes; nothing of theirs may listen on the host's

# A WebSocket echo server of the standard library only (RFC 6455: the handshake, unmasked
# replies of the masked frames it gets, text and binary, a close answered).
WS_SERVER = textwrap.dedent("""
    import base64, hashlib, socket, struct, sys, threading
    GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
    def serve(c):
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            head += c.recv(4096)
        key = [l.split(b":", 1)[1].strip() for l in head.split(b"\\r\\n") if l.lower().startswith(b"sec-websocket-key")][0]
        accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: " + accept + b"\\r\\n\\r\\n")
        f = c.makefile("rb")
        while True:
            b0, b1 = f.read(2)
            n = b1 & 127
            if n == 126: n = struct.unpack(">H", f.read(2))[0]
            elif n == 127: n = struct.unpack(">Q", f.read(8))[0]
            mask = f.read(4)
            data = bytes(x ^ mask[i % 4] for i, x in enumerate(f.read(n)))
            op = b0 & 15
            reply = data if op != 1 else b"echo:" + data
            ln = len(reply)
            hdr = bytes([0x80 | op]) + (bytes([ln]) if ln < 126 else bytes([126]) + struct.pack(">H", ln) if ln < 65536 else bytes([127]) + struct.pack(">Q", ln))
            c.sendall(hdr + reply)
            if op == 8:
                c.close()
                return
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
""")


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def host_refuses(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_an_http_server_inside_is_reached_from_the_host(make_server, request, backend) -> None:
    """On docker the agent forwards in the container's namespace: a bridged container's own
    loopback, so its ports are served too."""
    if backend == "docker":
        request.getfixturevalue("images")
    server = await make_server(
        warm=0,
        ports_port=0,
        backend=backend,
        templates={
            "default": Template(name="default", backend=backend),
            "outside": Template(name="outside", backend=backend, network=True),
        },
    )
    async with sandboxes.AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        sb = await client.create()
        other = await client.create()
        try:
            await sb.write_file("hello.txt", b"hello from inside\n")
            big = bytes(range(256)) * (20 << 12)  # 20 MiB
            await sb.write_file("big.bin", big)
            await start_server_inside(
                sb, f"cd /work && exec python3 -m http.server {PORT} --bind 127.0.0.1", PORT
            )
            assert host_refuses(PORT)  # nothing of the sandbox's on the host
            url = await sb.port_url(PORT)
            assert url.startswith(f"http://127.0.0.1:{server.ports_port}/ports/{sb.id}/{PORT}/")
            got = await asyncio.to_thread(fetch, url + "hello.txt")
            assert got == (200, b"hello from inside\n")
            status, body = await asyncio.to_thread(fetch, url + "big.bin")
            assert status == 200 and hashlib.sha256(body).digest() == hashlib.sha256(big).digest()

            host, token = await sb.port_host(PORT)
            assert host == f"{PORT}-{sb.id}.127.0.0.1:{server.ports_port}"
            base = f"http://127.0.0.1:{server.ports_port}/hello.txt"
            got = await asyncio.to_thread(fetch, base, {"Host": host, "X-Sandbox-Token": token})
            assert got == (200, b"hello from inside\n")
            # Without the token, with another sandbox's, by another sandbox's path: refused.
            assert (await asyncio.to_thread(fetch, base, {"Host": host}))[0] == 401
            _, other_token = await other.port_host(PORT)
            assert (await asyncio.to_thread(fetch, base, {"Host": host, "X-Sandbox-Token": other_token}))[
                0
            ] == 401
            wrong = url.replace(f"/ports/{sb.id}/", f"/ports/{other.id}/")
            assert (await asyncio.to_thread(fetch, wrong + "hello.txt"))[0] == 401
            # The other sandbox has nothing on the port: 502, and the first one keeps serving.
            status, body = await asyncio.to_thread(fetch, (await other.port_url(PORT)) + "x")
            assert status == 502 and b"nothing answers" in body
            assert (await asyncio.to_thread(fetch, url + "hello.txt"))[0] == 200
        finally:
            await other.close()
            await sb.close()
        assert (await asyncio.to_thread(fetch, url + "hello.txt"))[0] == 404  # deleted
        assert host_refuses(PORT)

        outside = await client.create(template="outside")
        try:
            status, body = await asyncio.to_thread(fetch, (await outside.port_url(PORT)) + "x")
            if backend == "local":  # the host's loopback: never forwarded
                assert status == 502 and b"host's network" in body
            else:  # the container's own loopback, where nothing listens
                assert status == 502 and b"nothing answers" in body
        finally:
            await outside.close()


async def test_the_http_port_carries_sandboxes_ports_beside_its_apis(make_server) -> None:
    """Without a ports listener, the HTTP port itself carries a connection whose first request
    names a sandbox's port (Host `{port}-{id}.domain`, or the `/ports/` path), HTTP and WebSocket,
    while every other request on it is the APIs'; the E2B in-sandbox ports stay the E2B API's."""
    server = await make_server(warm=0, http_port=0)
    http_base = f"http://127.0.0.1:{server.http_port}"
    async with sandboxes.AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        sb = await client.create()
        try:
            await sb.write_file("hello.txt", b"hello from inside\n")
            await sb.write_file("ws.py", WS_SERVER.encode())
            await start_server_inside(
                sb, f"cd /work && exec python3 -m http.server {PORT} --bind 127.0.0.1", PORT
            )
            await start_server_inside(sb, f"exec python3 /work/ws.py {PORT + 1}", PORT + 1)
            host, token = await sb.port_host(PORT)
            assert host == f"{PORT}-{sb.id}.127.0.0.1:{server.http_port}"
            got = await asyncio.to_thread(
                fetch, f"{http_base}/hello.txt", {"Host": host, "X-Sandbox-Token": token}
            )
            assert got == (200, b"hello from inside\n")
            assert (await asyncio.to_thread(fetch, f"{http_base}/hello.txt", {"Host": host}))[0] == 401
            url = await sb.port_url(PORT)
            assert url.startswith(f"{http_base}/ports/{sb.id}/{PORT}/")
            assert await asyncio.to_thread(fetch, url + "hello.txt") == (200, b"hello from inside\n")
            ws_host, ws_token = await sb.port_host(PORT + 1)
            headers = {"Host": ws_host, "X-Sandbox-Token": ws_token}
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(f"{http_base}/echo", headers=headers) as ws,
            ):
                await ws.send_str("hi")
                assert (await ws.receive(timeout=10)).data == "echo:hi"
            # The APIs on the same port: an unkeyed API call is the API's own 401, and a Host of an
            # E2B in-sandbox port is not carried (the E2B API serves those by their headers).
            status, body = await asyncio.to_thread(fetch, f"{http_base}/sandboxes")
            assert status == 401 and b"API key" in body
            envd = {"Host": f"49983-{sb.id}.127.0.0.1:{server.http_port}"}
            assert (await asyncio.to_thread(fetch, f"{http_base}/health", envd))[0] != 502
        finally:
            await sb.close()
        assert (
            await asyncio.to_thread(fetch, f"{http_base}/hello.txt", {"Host": host, "X-Sandbox-Token": token})
        )[0] == 404
    assert host_refuses(PORT)


async def test_a_websocket_server_inside_is_reached_from_the_host(make_server) -> None:
    server = await make_server(warm=0, ports_port=0)
    async with sandboxes.AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        sb = await client.create()
        try:
            await sb.write_file("ws.py", WS_SERVER.encode())
            await start_server_inside(sb, f"exec python3 /work/ws.py {PORT}", PORT)
            url = (await sb.port_url(PORT)).replace("http://", "ws://") + "echo"
            async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
                await ws.send_str("hi")
                assert (await ws.receive(timeout=10)).data == "echo:hi"
                payload = bytes(range(256)) * 1024
                await ws.send_bytes(payload)
                assert (await ws.receive(timeout=10)).data == payload
                for i in range(50):  # in order, none lost
                    await ws.send_str(str(i))
                assert [(await ws.receive(timeout=10)).data for _ in range(50)] == [
                    f"echo:{i}" for i in range(50)
                ]
        finally:
            await sb.close()


async def test_ports_are_refused_where_not_served(server, client) -> None:
    sb = await client.create()
    try:
        with pytest.raises(sandboxes.InvalidRequest, match="ports-port"):
            await sb.port_url(PORT)
    finally:
        await sb.close()

"""Ports of sandboxes reached from outside: connections carried to a port a program listens on
inside a sandbox, through that sandbox's agent (`Forward`: the agent connects from inside the
sandbox's network namespace). The server's HTTP port takes them (`adopt`: its HTTP server hands
over each connection whose first request names a sandbox's port, `names_a_port`), so one address
behind one wildcard name serves every API and every sandbox's ports; `serve --ports-port` adds a
listener of their own. Nothing is published on the host for a sandbox; a sandbox whose egress is
off still serves its ports (inbound is not egress).

A connection is routed by its first request's head:

- by host name, `Host: {port}-{sandbox id}.{anything}` (as e2b's `get_host` forms it), with the
  sandbox's port token in `X-Sandbox-Token` (or its E2B traffic token in
  `E2B-Traffic-Access-Token`);
- by path, for clients without wildcard DNS: `/ports/{sandbox id}/{port}/{token}/rest`, sent on
  as `/rest` with `Connection: close` (each request then opens a connection of its own, so every
  request is routed; a WebSocket upgrade keeps its connection).

Once routed, the bytes go both ways in the native module (`AgentClient.forward`), streamed, never
buffered whole: HTTP/1.1, WebSocket or anything else over TCP. A missing or wrong token is 401,
an unknown (or another key's: tokens are per sandbox) sandbox 404, a paused one 409, a port
nothing listens on 502.

A client that takes a sandbox's port as the base URL of its API (OpenHands' runtime URL: no path,
and no header of ours) gets a listener of its own (`listen`): every connection it accepts goes to
that one port of that one sandbox, opened by the key the surface gave (`PortGate`: its header,
and the GET paths that open without it, each such request on a connection of its own), closed
with the sandbox (`close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
import re
import secrets
import socket
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from sandboxes import errors as E
from sandboxes.server.http.endpoint import Refused

__all__ = ["MAX_CONNECTIONS", "TOKEN_ATTR", "PortGate", "PortProxy", "port_token"]

log = logging.getLogger(__name__)

MAX_HEAD = 16 << 10
HEAD_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 4096
TOKEN_ATTR = "port_token"
_HOST = re.compile(r"^(\d{1,5})-([A-Za-z0-9_.-]+?)\.")
_PATH = re.compile(r"^/ports/([A-Za-z0-9_.-]+)/(\d{1,5})/([A-Za-z0-9_-]+)(/[^ ]*)?$")


def port_token(rec: Any) -> str:
    """The token that opens `rec`'s ports (made on first use, kept with the record)."""
    token = rec.attrs.get(TOKEN_ATTR)
    if token is None:
        token = rec.attrs[TOKEN_ATTR] = secrets.token_urlsafe(24)
    return str(token)


@dataclass(frozen=True)
class PortGate:
    """What opens a port that has a listener of its own (`PortProxy.listen`): `key` in the
    request header `header`; a GET (or HEAD) of one of
    `open_paths` (a health check), sent on with `Connection: close` so that the next request of
    its client is checked again; a WebSocket upgrade under one of `upgrade_paths`, whose server
    inside takes the key in the socket's first message (the connection is then that socket)."""

    header: str
    key: str
    open_paths: frozenset[str] = frozenset()
    upgrade_paths: tuple[str, ...] = ()

    def opens(self, method: str, target: str, headers: dict[str, str]) -> str | None:
        """None when the request may not pass, else how: "key", "open" or "upgrade"."""
        path = target.partition("?")[0]
        given = headers.get(self.header.lower(), "")
        if given and hmac.compare_digest(given.encode(), self.key.encode()):
            return "key"
        if method in ("GET", "HEAD") and path in self.open_paths:
            return "open"
        if (
            method == "GET"
            and headers.get("upgrade", "").lower() == "websocket"
            and path.startswith(self.upgrade_paths)
            and self.upgrade_paths
        ):
            return "upgrade"
        return None


class PortProxy:
    """Carries connections to sandboxes' ports: those of its own listener (`start`) and those the
    HTTP port hands over (`adopt`). `reserved`: ports a Host route never names here (a surface's
    own in-sandbox services, which the HTTP port serves itself)."""

    def __init__(self, core: Any, reserved: frozenset[int] = frozenset()) -> None:
        self.core = core
        self.reserved = reserved
        self.port: int | None = None
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._conns: set[asyncio.Task] = set()
        # sandbox id -> {its port: (listener, accepting task)} (`listen`)
        self._own: dict[str, dict[int, tuple[socket.socket, asyncio.Task]]] = {}

    async def start(self, host: str, port: int) -> int:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._accepting = asyncio.create_task(self._accept(sock), name="sandboxes-ports")
        return self.port

    def names_a_port(self, head: bytes) -> bool:
        """Whether a request head (up to its blank line) names a sandbox's port: its Host
        (`{port}-{id}.`, not a reserved port) or its path (`/ports/...`)."""
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) == 3 and _PATH.match(parts[1].decode("latin-1")):
            return True
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if sep and name.strip().lower() == b"host":
                m = _HOST.match(value.strip().decode("latin-1"))
                return m is not None and int(m.group(1)) not in self.reserved
        return False

    def adopt(self, sock: socket.socket, received: bytes) -> None:
        """Carries a connection another server accepted, `received` its bytes read so far."""
        if len(self._conns) >= MAX_CONNECTIONS:
            sock.close()
            return
        sock.setblocking(False)
        task = asyncio.create_task(self._serve(sock, received))
        self._conns.add(task)
        task.add_done_callback(self._conns.discard)

    def listen(self, host: str, sandbox_id: str, port: int, gate: PortGate) -> int:
        """A listener on `host` (a port the kernel picks) whose every connection goes to `port`
        of sandbox `sandbox_id`, opened by `gate`; its port number. One per sandbox and port:
        asked again, the same."""
        mine = self._own.setdefault(sandbox_id, {})
        if port in mine:
            return int(mine[port][0].getsockname()[1])
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((host, 0))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        task = asyncio.create_task(
            self._accept(sock, (sandbox_id, port, gate)), name=f"sandboxes-port-{sandbox_id}"
        )
        mine[port] = (sock, task)
        return int(sock.getsockname()[1])

    def close(self, sandbox_id: str) -> None:
        """Closes the listeners of sandbox `sandbox_id` (`listen`); its connections end with it."""
        for sock, task in self._own.pop(sandbox_id, {}).values():
            task.cancel()
            sock.close()

    async def stop(self) -> None:
        for sid in list(self._own):
            self.close(sid)
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        for t in list(self._conns):
            t.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)
        if self._sock is not None:
            self._sock.close()

    async def _accept(self, sock: socket.socket, fixed: tuple[str, int, PortGate] | None = None) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(sock)
            if len(self._conns) >= MAX_CONNECTIONS:
                conn.close()
                continue
            conn.setblocking(False)
            task = asyncio.create_task(self._serve(conn, fixed=fixed))
            self._conns.add(task)
            task.add_done_callback(self._conns.discard)

    async def _serve(
        self, conn: socket.socket, received: bytes = b"", fixed: tuple[str, int, PortGate] | None = None
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            try:
                async with asyncio.timeout(HEAD_TIMEOUT_S):
                    head, rest = await _read_head(loop, conn, received)
                if fixed is None:
                    rec, port, head = await self._route(head)
                else:
                    rec, port, head = await self._gated(head, *fixed)
            except Refused as r:
                await _answer(loop, conn, r.status, r.message)
                return
            except (TimeoutError, ConnectionError, OSError):
                return
            fd = os.dup(conn.fileno())
            try:
                await rec.sandbox._client.forward(port, fd, head + rest)
            except E.NotFound as e:
                await _answer(loop, conn, 502, e.message)
            except E.SandboxError as e:
                await _answer(loop, conn, 502, f"port {port}: {e.message}")
        except Exception:
            log.exception("a forwarded connection failed")
        finally:
            conn.close()

    async def _route(self, head: bytes) -> tuple[Any, int, bytes]:
        """The record and port a request head names, and the head to send on."""
        lines, parts, headers = _parse_head(head)
        host = _HOST.match(headers.get("host", ""))
        path = _PATH.match(parts[1])
        if host is not None:
            port, sid = int(host.group(1)), host.group(2)
            token = headers.get("x-sandbox-token") or headers.get("e2b-traffic-access-token") or ""
        elif path is not None:
            sid, port, token = path.group(1), int(path.group(2)), path.group(3)
            parts[1] = path.group(4) or "/"
            lines[0] = " ".join(parts)
            if headers.get("upgrade") is None:
                lines = [ln for ln in lines if not ln.lower().startswith("connection:")]
                lines.insert(1, "Connection: close")
            head = "\r\n".join(lines).encode("latin-1")
        else:
            raise Refused(
                404, "name a sandbox's port: Host {port}-{id}.domain, or /ports/{id}/{port}/{token}/"
            )
        if not 0 < port < 65536:
            raise Refused(400, f"port must be 1..65535, got {port}")
        rec = await self.core.registry.find(sid)
        if rec is None:
            raise Refused(404, f"no sandbox {sid}")
        if not _token_ok(rec, token):
            raise Refused(401, f"a token of sandbox {sid} is required")
        if rec.state == "paused":
            raise Refused(409, f"sandbox {sid} is paused")
        return rec, port, head

    async def _gated(self, head: bytes, sid: str, port: int, gate: PortGate) -> tuple[Any, int, bytes]:
        """The route of a connection to a listener of one sandbox's port (`listen`)."""
        lines, parts, headers = _parse_head(head)
        rec = await self.core.registry.find(sid)
        if rec is None:
            raise Refused(404, f"no sandbox {sid}")
        how = gate.opens(parts[0], parts[1], headers)
        if how is None:
            raise Refused(401, f"{gate.header} is required")
        if rec.state == "paused":
            raise Refused(409, f"sandbox {sid} is paused")
        if how == "open":  # no upgrade either: a tunnel would pass unchecked
            lines = [ln for ln in lines if not ln.lower().startswith(("connection:", "upgrade:"))]
            lines.insert(1, "Connection: close")
            head = "\r\n".join(lines).encode("latin-1")
        return rec, port, head


def _parse_head(head: bytes) -> tuple[list[str], list[str], dict[str, str]]:
    """A request head's lines, its request line's three parts and its headers (names lowered)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise Refused(400, "not an HTTP/1.x request")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return lines, parts, headers


def _token_ok(rec: Any, token: str) -> bool:
    if not token:
        return False
    if hmac.compare_digest(token.encode(), port_token(rec).encode()):
        return True
    e2b = rec.attrs.get("e2b")
    return bool(e2b is not None and e2b.token_ok(token))


async def _read_head(
    loop: asyncio.AbstractEventLoop, conn: socket.socket, buf: bytes = b""
) -> tuple[bytes, bytes]:
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            return buf[:end], buf[end:]
        if len(buf) > MAX_HEAD:
            raise Refused(431, "the request head is too large")
        chunk = await loop.sock_recv(conn, 4096)
        if not chunk:
            raise ConnectionError("closed before its request head")
        buf += chunk


async def _answer(loop: asyncio.AbstractEventLoop, conn: socket.socket, status: int, message: str) -> None:
    body = (message + "\n").encode()
    reason = HTTPStatus(status).phrase
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        await loop.sock_sendall(conn, head.encode() + body)

"""The E2B API (`e2b` SDK, `e2b-code-interpreter`) on the server's HTTP
port: the control plane (`api.py`) and, for the SDK's in-sandbox calls, the daemon's HTTP and
Connect services (`envd.py`, `process.py`, `filesystem.py`) and the code interpreter
(`interpreter.py`). A user sets `E2B_API_URL` and `E2B_SANDBOX_URL` to this port and
`E2B_API_KEY` to a server key.

With `E2B_SANDBOX_URL` set, every in-sandbox call comes here with the headers `E2b-Sandbox-Id`
and `E2b-Sandbox-Port` (49983: the daemon, 49999: the code interpreter): `traffic` takes those
requests before any other route, checks the sandbox's access token (`X-Access-Token`, or
`E2B-Traffic-Access-Token` on the code interpreter's calls) and serves them for that sandbox.
A sandbox that has ended (or never existed) answers 502 "The sandbox ... was not found", as the
platform's proxy does, which the SDK reads as a sandbox that is no longer running. Sandboxes are
the server's records (`ServerCore.claim`), so quotas, TTLs and shutdown treat them as any
other.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.routing import BaseRoute, Router

from sandboxes import errors as E
from sandboxes.server.http.e2b.api import ControlPlane
from sandboxes.server.http.e2b.envd import envd_app
from sandboxes.server.http.e2b.filesystem import Filesystem
from sandboxes.server.http.e2b.interpreter import Interpreter
from sandboxes.server.http.e2b.process import TARGET, Process
from sandboxes.server.http.e2b.state import E2bSandbox
from sandboxes.server.http.e2b.volumes import VolumeContent
from sandboxes.server.http.endpoint import code_body
from sandboxes.server.http.surface import Front, Surface
from sandboxes.server.replicated import dataclass_codec

if TYPE_CHECKING:
    from sandboxes.server.auth import ApiKeys
    from sandboxes.server.registry import Record
    from sandboxes.server.surface_core import SurfaceCore

__all__ = ["IN_SANDBOX_PORTS", "E2bApi"]

ENVD_PORT = b"49983"
INTERPRETER_PORT = b"49999"
# The in-sandbox services this surface serves itself: never a port a Host route carries.
IN_SANDBOX_PORTS = frozenset({int(ENVD_PORT), int(INTERPRETER_PORT)})


class E2bApi(Surface):
    def __init__(self, core: SurfaceCore, auth: ApiKeys, image_key: str | None = None) -> None:
        self.core = core
        self.auth = auth
        # A metadata key whose value, at create, names the image or template to run.
        self.image_key = image_key
        self.control = ControlPlane(self)
        self.envd = envd_app(Process(core), Filesystem(core))
        self.interpreter = Router(routes=Interpreter(core).routes())
        # The API's view of a sandbox reaches the other replicas of a cluster with its record.
        core.share_attr("e2b", dataclass_codec(E2bSandbox, exclude=("_digest",), on_load=_end_at))

    def routes(self) -> list[BaseRoute]:
        content = VolumeContent(self.core, self.control.volumes.tokens)
        return [*self.control.routes(), self.control.templates.upload_route(), *content.routes()]

    def front(self) -> Sequence[Front]:
        """The in-sandbox calls (`traffic`), told apart by their headers."""
        return [self.traffic]

    def owner(self, request: Request) -> str:
        key = request.headers.get("x-api-key")
        return self.auth.authenticate_header(f"Bearer {key}" if key else None)

    async def traffic(self, scope: dict[str, Any], receive: Any, send: Any) -> bool:
        """Serves `scope` if it is an in-sandbox call (True), else leaves it (False)."""
        if scope["type"] != "http":
            return False
        headers = dict(scope.get("headers") or ())
        sandbox_id = headers.get(b"e2b-sandbox-id")
        if sandbox_id is None:
            return False
        sid = sandbox_id.decode("latin-1")
        port = headers.get(b"e2b-sandbox-port", ENVD_PORT)
        rec = await self.core.find_record(sid)
        sb = rec.attrs.get("e2b") if rec is not None else None
        if rec is None or sb is None:
            await _answer(send, 502, f"The sandbox {sid} was not found")
            return True
        token = headers.get(b"x-access-token")
        if token is None and port == INTERPRETER_PORT:
            token = headers.get(b"e2b-traffic-access-token")
        if not sb.token_ok(token.decode("latin-1") if token else None):
            await _answer(send, 401, "missing or invalid access token of this sandbox (X-Access-Token)")
            return True
        if rec.state == "paused":
            if not sb.auto_resume:
                await _answer(send, 502, f"The sandbox {sid} is paused")
                return True
            try:
                await self.control._resume(rec, sb, {})
            except E.SandboxError as e:
                await _answer(send, 502, f"The sandbox {sid} could not be resumed: {e.message}")
                return True
        if port == ENVD_PORT:
            app = self.envd
        elif port == INTERPRETER_PORT:
            app = self.interpreter
        else:
            await _answer(send, 502, f"The sandbox {sid} is running but port {port.decode()} is not open")
            return True
        reset = TARGET.set((rec, sb))
        try:
            await app(scope, receive, send)
        finally:
            TARGET.reset(reset)
        return True


async def _answer(send: Any, status: int, message: str) -> None:
    """The platform proxy's error body (`{"code", "message"}`), sent before any routing."""
    body = json.dumps(code_body(status, message)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _end_at(rec: Record, sb: E2bSandbox) -> None:
    """A sandbox read from the cluster ends when its record says (its TTL may have moved)."""
    sb.end_at = rec.expires_at or sb.end_at

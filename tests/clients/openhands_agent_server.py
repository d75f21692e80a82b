#!/usr/bin/env python3
"""A stand-in for the OpenHands agent server (stdlib only: the real one needs Python 3.12, which
sandboxes of the host's /usr lack), installed by tests/clients/openhands_scenarios.py's image
build as /usr/local/bin/openhands-agent-server. It serves what `RemoteWorkspace` calls, in the
agent server's shapes: `/alive`, `/health`, `/server_info` without a key; with the key of
`SESSION_API_KEY` / `OH_SESSION_API_KEYS_0` in `X-Session-API-Key`:

    POST /api/bash/start_bash_command {command, cwd?, timeout}  -> {id, ...}
    GET  /api/bash/bash_events/search?command_id__eq&order__gt  -> {items: [BashOutput], next_page_id}
    POST /api/file/upload?path=P   (multipart `file`)            -> {success, file_size}
    GET  /api/file/download?path=P                               -> the bytes
    GET  /sockets/...   (no key: the real server reads it in the socket's first message)  -> 404

    openhands-agent-server --port N
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import os
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

KEYS = {k for k in (os.environ.get("SESSION_API_KEY"), os.environ.get("OH_SESSION_API_KEYS_0")) if k}
EVENTS: list[dict] = []
LOCK = threading.Lock()


def run(command: str, cwd: str | None, timeout: float, command_id: str) -> None:
    try:
        p = subprocess.run(
            ["/bin/sh", "-c", command], cwd=cwd, capture_output=True, timeout=timeout, check=False
        )
        out, err, code = p.stdout.decode(), p.stderr.decode(), p.returncode
    except subprocess.TimeoutExpired:
        out, err, code = "", "timed out", -1
    with LOCK:
        EVENTS.append(
            {
                "kind": "BashOutput",
                "id": uuid.uuid4().hex,
                "command_id": command_id,
                "order": len(EVENTS),
                "stdout": out,
                "stderr": err,
                "exit_code": code,
            }
        )


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def answer(self, status: int, body: bytes | dict, kind: str = "application/json") -> None:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def allowed(self) -> bool:
        if self.headers.get("X-Session-API-Key") in KEYS:
            return True
        self.answer(401, {"detail": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path in ("/alive", "/health"):
            return self.answer(200, {"status": "ok"})
        if url.path == "/server_info":
            return self.answer(200, {"version": "stand-in", "keys": len(KEYS)})
        if url.path.startswith("/sockets/"):  # the real server takes the key in the socket's first message
            return self.answer(404, {"detail": "Not Found"})
        if not self.allowed():
            return None
        if url.path == "/api/bash/bash_events/search":
            after = int(q.get("order__gt", -1))
            with LOCK:
                items = [
                    e
                    for e in EVENTS
                    if e["order"] > after and q.get("command_id__eq") in (None, e["command_id"])
                ]
            return self.answer(200, {"items": items, "next_page_id": None})
        if url.path == "/api/file/download":
            try:
                with open(q["path"], "rb") as f:
                    return self.answer(200, f.read(), "application/octet-stream")
            except OSError as e:
                return self.answer(404, {"detail": str(e)})
        return self.answer(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.allowed():
            return None
        if url.path == "/api/bash/start_bash_command":
            req = json.loads(body)
            command_id = uuid.uuid4().hex
            args = (req["command"], req.get("cwd"), float(req.get("timeout") or 30), command_id)
            threading.Thread(target=run, args=args, daemon=True).start()
            return self.answer(200, {"id": command_id, "command": req["command"], "kind": "BashCommand"})
        if url.path == "/api/file/upload":
            head = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
            msg = email.parser.BytesParser(policy=email.policy.default).parsebytes(head + body)
            for part in msg.iter_parts():
                if part.get_param("name", header="content-disposition") == "file":
                    data = part.get_payload(decode=True) or b""
                    os.makedirs(os.path.dirname(q["path"]) or "/", exist_ok=True)
                    with open(q["path"], "wb") as f:
                        f.write(data)
                    return self.answer(200, {"success": True, "file_size": len(data)})
            return self.answer(400, {"detail": "no file part"})
        return self.answer(404, {"detail": "Not Found"})


def main() -> None:
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 8000
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()


if __name__ == "__main__":
    main()

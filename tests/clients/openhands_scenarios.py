"""Scenarios of the unmodified `openhands-workspace` (`APIRemoteWorkspace`) against a real
`sandboxes serve`, run inside the client virtualenv (tests/clients/openhands.txt) by
tests/test_openhands_api.py:

    python openhands_scenarios.py SCENARIO [BASE]    (OH_RUNTIME_API_URL, OH_RUNTIME_API_KEY, OH_OTHER_KEY set)

The image of the runtime is built first through the API's image routes as OpenHands' V0
`RemoteRuntimeBuilder` calls them (a Dockerfile in a base64 tar.gz): it installs a stand-in agent
server (`openhands_agent_server.py`) where the workspace's command starts one, `FROM` the image
BASE (python:3.11-slim without). Each scenario prints one JSON object of what it observed.
"""

from __future__ import annotations

import base64
import io
import json
import os
import socket
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import httpx
from openhands.workspace import APIRemoteWorkspace

URL = os.environ.get("OH_RUNTIME_API_URL", "")
KEY = os.environ.get("OH_RUNTIME_API_KEY", "")
OTHER = os.environ.get("OH_OTHER_KEY", "")
BASE = "python:3.11-slim"


def dockerfile(base: str) -> str:
    server = base64.b64encode((Path(__file__).parent / "openhands_agent_server.py").read_bytes()).decode()
    path = "/usr/local/bin/openhands-agent-server"
    return (
        f"FROM {base}\n"
        f"RUN mkdir -p /usr/local/bin && echo {server} | base64 -d > {path} && chmod 755 {path}\n"
        "ENV OH_STAND_IN=1\n"
    )


def context(text: str) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = text.encode()
        info = tarfile.TarInfo("./Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def build(api: httpx.Client, target: str, base: str) -> dict[str, Any]:
    """The image build as the V0 builder does it: `/build`, then `/build_status` until done."""
    files = [("context", ("context.tar.gz", context(dockerfile(base)))), ("target_image", (None, target))]
    started = api.post(f"{URL}/build", files=files)
    started.raise_for_status()
    build_id = started.json()["build_id"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = api.get(f"{URL}/build_status", params={"build_id": build_id}).json()
        if status["status"] not in ("PENDING", "BUILDING"):
            return status
        time.sleep(0.5)
    raise TimeoutError("the build did not finish")


def status_of(resp: httpx.Response) -> list[Any]:
    try:
        body = resp.json()
    except ValueError:
        body = resp.text
    return [resp.status_code, body]


def get(url: str, headers: dict[str, str] | None = None) -> list[Any]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, e.read().decode()]
    except urllib.error.URLError as e:
        return [None, str(e.reason)]


def exchange(host: str, request: bytes, *, until_closed: bool = True) -> bytes:
    """What the runtime's url answers to `request` (raw bytes): all it sends before it closes
    the connection, or (`until_closed` false) its first response."""
    netloc = urllib.parse.urlsplit(host)
    with socket.create_connection((netloc.hostname, netloc.port), timeout=10) as s:
        s.sendall(request)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
            head, sep, body = got.partition(b"\r\n\r\n")
            if not until_closed and sep:
                length = next(
                    (
                        int(v)
                        for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n"))
                        if k.lower() == b"content-length"
                    ),
                    0,
                )
                if len(body) >= length:
                    break
    return got


def raw_checks(host: str) -> dict[str, Any]:
    """The gate of the runtime's url, on raw connections."""
    h = "Host: x\r\n"
    health = f"GET /health HTTP/1.1\r\n{h}Connection: keep-alive\r\n\r\n"
    then = f"GET /api/file/download?path=/etc/hostname HTTP/1.1\r\n{h}Connection: close\r\n\r\n"
    pipelined = exchange(host, (health + then).encode())
    upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    sockets = exchange(
        host, f"GET /sockets/events/x HTTP/1.1\r\n{h}{upgrade}\r\n".encode(), until_closed=False
    )
    elsewhere = exchange(host, f"GET /api/anything HTTP/1.1\r\n{h}{upgrade}\r\n".encode())
    return {
        # A health check opens no keep-alive connection: its next request is never answered.
        "pipelined": [pipelined.count(b"HTTP/1.1 "), pipelined.split(b" ", 2)[1].decode()],
        # A WebSocket under /sockets/ reaches the agent server (here: its 404, in its JSON).
        "sockets": [sockets.split(b" ", 2)[1].decode(), b'"Not Found"' in sockets],
        "elsewhere": elsewhere.split(b" ", 2)[1].decode(),
    }


def workspace(base: str = BASE) -> dict[str, Any]:
    out: dict[str, Any] = {}
    api = httpx.Client(headers={"X-API-Key": KEY}, timeout=60)
    prefix = api.get(f"{URL}/registry_prefix").json()["registry_prefix"]
    image = f"{prefix}/runtime:oh-stand-in"
    out["exists_before"] = api.get(f"{URL}/image_exists", params={"image": image}).json()["exists"]
    out["build"] = build(api, image, base)
    exists = api.get(f"{URL}/image_exists", params={"image": image}).json()
    out["exists_after"] = exists["exists"]
    out["unknown_session"] = status_of(api.get(f"{URL}/sessions/no-such-session"))

    session = f"agent-server-{uuid.uuid4()}"
    ws = APIRemoteWorkspace(
        runtime_api_url=URL,
        runtime_api_key=KEY,
        server_image=out["build"]["image"],
        session_id=session,
        working_dir="/tmp",
        startup_wait_timeout=120,
        init_timeout=120,
    )
    try:
        host = ws.host
        out["host_has_no_path"] = host.count("/") == 2
        out["alive"] = ws.alive
        out["health"] = get(f"{host}/health")
        out["api_without_key"] = get(f"{host}/api/file/download?path=/etc/hostname")
        out["raw"] = raw_checks(host)
        out["api_wrong_key"] = get(
            f"{host}/api/file/download?path=/etc/hostname", {"X-Session-API-Key": "wrong"}
        )[0]
        info = api.get(f"{URL}/sessions/{session}").json()
        out["session"] = [info["status"], info["pod_status"], info["runtime_id"] == ws._runtime_id]
        out["session_fields"] = sorted(k for k in ("url", "session_api_key") if info.get(k))
        out["runtime"] = api.get(f"{URL}/runtime/{ws._runtime_id}").json()["session_id"] == session
        out["listed"] = [r["session_id"] for r in api.get(f"{URL}/list").json()["runtimes"]]
        batch = api.get(f"{URL}/sessions/batch", params=[("ids", session), ("ids", "nope")]).json()
        out["batch"] = [r["session_id"] for r in batch]

        r = ws.execute_command("echo hello; echo oops >&2; echo $OH_STAND_IN; exit 3", cwd="/tmp")
        out["command"] = [r.exit_code, r.stdout, r.stderr]
        up = ws.file_upload(b"written through the agent server\n", "/tmp/oh/notes.txt")
        out["upload"] = [up.success, up.file_size, up.error]
        out["cat"] = ws.execute_command("cat /tmp/oh/notes.txt").stdout
        local = Path(f"/tmp/oh-download-{uuid.uuid4().hex}")
        down = ws.file_download("/tmp/oh/notes.txt", local)
        out["download"] = [down.success, local.read_text() if local.exists() else None]
        local.unlink(missing_ok=True)

        # A second workspace of the same session attaches to its runtime.
        again = APIRemoteWorkspace(
            runtime_api_url=URL, runtime_api_key=KEY, server_image=image, session_id=session, keep_alive=True
        )
        out["attached"] = again._runtime_id == ws._runtime_id
        again.cleanup()

        other = httpx.Client(headers={"X-API-Key": OTHER}, timeout=30)
        out["other_session"] = other.get(f"{URL}/sessions/{session}").status_code
        out["other_runtime"] = other.get(f"{URL}/runtime/{ws._runtime_id}").status_code
        out["other_stop"] = other.post(f"{URL}/stop", json={"runtime_id": ws._runtime_id}).status_code
        out["other_list"] = other.get(f"{URL}/list").json()["runtimes"]
        out["wrong_key"] = status_of(
            httpx.get(f"{URL}/sessions/{session}", headers={"X-API-Key": "not-a-key"})
        )
        out["no_key"] = httpx.get(f"{URL}/list").status_code

        ws.pause()
        info = api.get(f"{URL}/sessions/{session}").json()
        out["paused"] = [info["status"], info["pod_status"]]
        out["health_paused"] = get(f"{host}/health")[0]
        ws.resume()
        out["resumed"] = api.get(f"{URL}/sessions/{session}").json()["status"]
        out["after_resume"] = ws.execute_command("cat /tmp/oh/notes.txt").stdout
    finally:
        runtime_id = ws._runtime_id
        ws.cleanup()
    out["stopped"] = status_of(api.get(f"{URL}/sessions/{session}"))[0]
    out["stopped_runtime"] = api.get(f"{URL}/runtime/{runtime_id}").status_code
    out["health_stopped"] = get(f"{host}/health")[0] if host else None
    return out


def refused(base: str = BASE) -> dict[str, Any]:
    """What the API refuses, in the platform's `{"detail": ...}`."""
    api = httpx.Client(headers={"X-API-Key": KEY}, timeout=60)
    out: dict[str, Any] = {}
    out["no_image"] = status_of(api.post(f"{URL}/start", json={"command": "x"}))
    out["bad_factor"] = status_of(
        api.post(f"{URL}/start", json={"image": base, "command": "x", "resource_factor": 3})
    )[0]
    files = [
        ("context", ("context.tar.gz", context("FROM python:3.11-slim\nCOPY . /app\n"))),
        ("target_image", (None, "x:y")),
    ]
    out["copy"] = status_of(api.post(f"{URL}/build", files=files))
    out["no_build"] = api.get(f"{URL}/build_status", params={"build_id": "nope"}).status_code
    out["pause_unknown"] = api.post(f"{URL}/pause", json={"runtime_id": "nope"}).status_code
    # A command that ends at once: the runtime's pod fails, with its output.
    started = api.post(
        f"{URL}/start",
        json={
            "image": base,
            "command": "echo dying; exit 4",
            "session_id": "short-lived",
            "working_dir": "/",
        },
    )
    rt = started.json()
    deadline = time.monotonic() + 30
    info = rt
    while time.monotonic() < deadline and info.get("pod_status") != "failed":
        time.sleep(0.2)
        info = api.get(f"{URL}/sessions/short-lived").json()
    out["failed"] = [started.status_code, info.get("pod_status"), info.get("pod_logs"), info.get("exit_code")]
    out["stop"] = status_of(api.post(f"{URL}/stop", json={"runtime_id": rt["runtime_id"]}))
    return out


SCENARIOS = {"workspace": workspace, "refused": refused}


def main() -> None:
    print(json.dumps(SCENARIOS[sys.argv[1]](*sys.argv[2:]), default=str))


if __name__ == "__main__":
    main()

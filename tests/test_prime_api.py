"""The Prime Sandboxes API, proven by the unmodified `prime-sandboxes` SDK from PyPI (each pinned
version in its own virtualenv, tests/clients/) against a real server over real sockets: the
server runs here, the SDK in a subprocess (`clients/prime_scenarios.py`) pointed at it by
`PRIME_API_BASE_URL` and `PRIME_API_KEY` only, with a fresh HOME (the SDK caches gateway tokens
there)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import http_answering, pgrep, wait_until
from server_helpers import KEY_A, KEY_B, client_python, run_scenario

pytestmark = pytest.mark.asyncio

SCENARIOS = Path(__file__).resolve().parent / "clients" / "prime_scenarios.py"
CURRENT, LEGACY = "prime-current", "prime-0.2.39"
VENVS = [CURRENT, LEGACY]


async def prime_server(make_server: Any, **kw: Any) -> Any:
    return await make_server(http_port=0, warm=1, **kw)


def base_url(server: Any) -> str:
    return f"http://127.0.0.1:{server.http_port}"


async def scenario(
    server: Any,
    venv: str,
    name: str,
    arg: str | None = None,
    *,
    key: str = KEY_A,
    home: Path | None = None,
    timeout: float = 600,
    image: str | None = None,
) -> dict[str, Any]:
    """Runs one scenario of the real SDK; its JSON observations. `image`: the image sandboxes are
    asked for (the scenarios' own variable)."""
    own = home is None
    home = home or Path(tempfile.mkdtemp(prefix="prime-home-"))
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "PRIME_API_BASE_URL": base_url(server),
        "PRIME_API_KEY": key,
        **({"SCENARIO_IMAGE": image} if image else {}),
    }
    try:
        return await run_scenario(
            venv, "prime_scenarios.py", [name, *([arg] if arg else [])], env, timeout=timeout
        )
    finally:
        if own:  # the SDK's config and cache, gone with the run
            shutil.rmtree(home, ignore_errors=True)


@pytest.mark.parametrize("venv", VENVS)
async def test_lifecycle(make_server, venv) -> None:
    server = await prime_server(make_server)
    o = await scenario(server, venv, "lifecycle")
    assert o["created"] == {
        "status": "RUNNING",
        "same_for_key": True,
        "distinct": True,
        "memory_gb": 0.5,
        "timeout_minutes": 30,
        "labels": ["lc", "first"],
    }
    assert o["env"] == "bar s3\n"
    assert o["get"]["status"] == "RUNNING" and o["get"]["image"] == "python:3.11-slim"
    assert o["list_first"] and o["paging"] == {
        "total": 2,
        "has_next": True,
        "second_has_next": False,
        "ids": True,
    }
    assert o["statuses"]["errors"] == [["sb-doesnotexist", "NOT_FOUND"]]
    assert o["statuses"]["statuses"][0][1] == "RUNNING"
    assert "template 'agent'" in o["logs"]  # the image's mapping is said in the sandbox's log
    assert o["delete"] == {} and o["after_delete"] == "TERMINATED"
    assert o["exec_after_delete"]["error"] == "SandboxNotRunningError", o["exec_after_delete"]
    assert o["delete_twice"]["error"] == "APIError" and "404" in o["delete_twice"]["message"]
    assert o["bulk"] == {"succeeded": True, "failed": []}
    assert o["active_after"] == []
    assert len(server.service.registry) == 0


@pytest.mark.parametrize("venv", VENVS)
async def test_commands(make_server, venv) -> None:
    server = await prime_server(make_server)
    o = await scenario(server, venv, "commands")
    assert o["basic"] == {"stdout": "out\n", "stderr": "err\n", "exit_code": 3}
    assert o["whoami"]["stdout"] == "0\n0\n"  # root inside its own user namespace
    assert o["workdir"]["exit_code"] == 0 and o["cwd"]["stdout"] == "/app\ndata\n"
    assert o["env"]["stdout"] == "1-two words\n"
    assert o["user_root"] == {"ok": {"stdout": "0\n", "stderr": "", "exit_code": 0}}
    assert "error" in o["user_other"]
    assert o["timeout"]["error"] == "CommandTimeoutError", o["timeout"]
    assert o["after_timeout"]["stdout"] == "alive\n"
    assert o["big_stdout"] == 3_000_000
    assert o["pip"] == {"stdout": "42\n", "stderr": "", "exit_code": 0}


async def test_async_client(make_server) -> None:
    server = await prime_server(make_server)
    o = await scenario(server, CURRENT, "async_commands")
    assert o["parallel"] == [str(i) for i in range(20)] and o["exit"] == 9


@pytest.mark.parametrize("venv,vm", [(CURRENT, None), (LEGACY, "vm")])
async def test_interactive_processes(make_server, venv, vm) -> None:
    server = await prime_server(make_server)
    o = await scenario(server, venv, "processes", vm)
    assert o["stdout"] == "got:hello\n" and o["stderr"] == "to-err\n"
    assert o["terminated"] == 128 + signal.SIGTERM
    assert o["killed"] == 128 + signal.SIGKILL
    assert o["exited"] == 5


@pytest.mark.parametrize("venv", VENVS)
async def test_background_jobs(make_server, venv) -> None:
    server = await prime_server(make_server)
    o = await scenario(server, venv, "jobs")
    assert o["first_completed"] is False
    assert o["done"] == {"completed": True, "exit_code": 7, "stdout": "job-out\n", "stderr": "job-err\n"}
    if venv == CURRENT:
        assert o["batch"] == {"ok": [[True, True, 0], [True, True, 1], [True, True, 2]]}, o["batch"]


@pytest.mark.parametrize("venv", VENVS)
async def test_files(make_server, venv) -> None:
    server = await prime_server(make_server)
    o = await scenario(server, venv, "files", "100" if venv == CURRENT else "8")
    assert o["upload"] == {"success": True, "size": True}
    assert o["remote_digest"] and o["download_digest"]
    assert o["read"] == {
        "whole": ["0123456789", 10, False],
        "window": ["234", 2, 10, True],
        "tail": ["6789", 6],
    }
    assert o["missing"]["error"] == "SandboxFileNotFoundError"
    assert o["too_large"]["error"] == "SandboxFileTooLargeError"
    assert o["huge_window"] == {"ok": 10}
    assert "error" in o["outside"]


async def test_keys_see_only_their_sandboxes(make_server, tmp_path) -> None:
    server = await prime_server(make_server)
    home = tmp_path / "prime-home"
    async with aiohttp.ClientSession() as http:
        r = await http.post(
            f"{base_url(server)}/api/v1/sandbox",
            headers={"Authorization": f"Bearer {KEY_B}"},
            json={"name": "bobs", "docker_image": "python:3.11-slim"},
        )
        bobs = (await r.json())["id"]
    o = await scenario(server, CURRENT, "auth", bobs, home=home)
    for call in ("get_other", "exec_other", "delete_other"):
        assert o[call]["error"] == "APIError" and "404" in o[call]["message"], o[call]
    assert bobs not in o["list_other"]
    assert server.service.registry.get(bobs) is not None
    wrong = await scenario(server, CURRENT, "auth", key="wrong-key")
    assert wrong["list"]["error"] == wrong["create"]["error"] == "UnauthorizedError"


async def test_network_policy(make_server) -> None:
    """A policy set while the sandbox runs, or given at create, is its egress (the local
    backend's proxy): the test's server on this host's loopback is reached through an
    allow-list naming it, its neighbour is not, and the public internet (`allow=["*"]`) never
    includes the host's loopback. Every change is applied when its call returns."""
    async with http_answering(b"prime-allowed") as (port, seen):
        server = await prime_server(make_server)
        o = await scenario(server, CURRENT, "network", str(port))
    assert o["direct"]["exit_code"] != 0  # no network by default
    assert o["deny_all"] == {
        "ok": {"policy": {"allowlist": [], "denylist": None}, "applied": True, "generation": 2}
    }
    want = {
        "policy": {"allowlist": [f"127.0.0.2:{port}"], "denylist": None},
        "applied": True,
        "generation": 3,
    }
    assert o["allow_later"] == o["get"] == {"ok": want}
    assert o["later_fetch"] == {"stdout": "prime-allowed\n", "stderr": "", "exit_code": 0}, o["later_fetch"]
    assert o["later_fetch_other"]["exit_code"] != 0 and "403" in o["later_fetch_other"]["stderr"]
    assert o["open"]["ok"]["policy"] == {"allowlist": None, "denylist": []}
    assert o["open_fetch"]["exit_code"] != 0 and "403" in o["open_fetch"]["stderr"]
    assert o["shown_later"] == []
    assert o["bad_later"]["error"] == "APIError" and "422" in o["bad_later"]["message"]
    assert o["shown"] == [f"127.0.0.2:{port}"] and o["policy"] == [f"127.0.0.2:{port}"]
    assert o["fetch"] == {"stdout": "prime-allowed\n", "stderr": "", "exit_code": 0}, o["fetch"]
    assert o["fetch_other"]["exit_code"] != 0 and "403" in o["fetch_other"]["stderr"]
    assert o["range"]["error"] == "APIError" and "port ranges" in o["range"]["message"]
    assert len(seen) == 2


async def test_a_client_gone_mid_command_has_its_program_killed(make_server, tmp_path) -> None:
    server = await prime_server(make_server)
    marker = f"{77000 + secrets.randbelow(999)}.{secrets.randbelow(10**9):09d}"
    home = tmp_path / "prime-home"
    home.mkdir(parents=True)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "PRIME_API_BASE_URL": base_url(server),
        "PRIME_API_KEY": KEY_A,
    }
    proc = await asyncio.create_subprocess_exec(
        client_python(CURRENT),
        str(SCENARIOS),
        "hold",
        marker,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await wait_until(lambda: bool(pgrep(f"sleep {marker}")), what="the command to start")
    finally:
        proc.kill()
        await proc.wait()
    await wait_until(lambda: not pgrep(f"sleep {marker}"), what="the abandoned command to be killed")
    assert len(server.service.registry) == 1  # the sandbox itself keeps serving


async def test_bad_input_gets_the_errors_the_sdk_expects(make_server) -> None:
    server = await prime_server(make_server)
    url = f"{base_url(server)}/api/v1/sandbox"
    auth = {"Authorization": f"Bearer {KEY_A}"}
    async with aiohttp.ClientSession() as http:

        async def post(body: Any, raw: bytes | None = None) -> tuple[int, Any]:
            r = await http.post(
                url,
                headers={**auth, "Content-Type": "application/json"},
                data=raw if raw is not None else json.dumps(body),
            )
            return r.status, await r.json()

        base = {"name": "n", "docker_image": "python:3.11-slim"}
        assert (await post(None, b"{not json"))[0] == 422
        status, body = await post({**base, "surprise": 1})
        assert status == 422 and "surprise" in body["detail"]
        for absurd in (
            {"cpu_cores": 1e9},
            {"memory_gb": -1},
            {"disk_size_gb": float("inf")},
            {"gpu_count": 8},
            {"timeout_minutes": "soon"},
            {"labels": ["x"] * 1000},
            {"environment_vars": {"1A": "x"}},
        ):
            status, body = await post({**base, **absurd})
            assert status == 422 and body["detail"], absurd
        r = await http.get(url, headers={"Authorization": "Bearer nope"})
        assert r.status == 401
        status, created = await post(base)
        assert status == 200
        sid, gw = created["id"], created["gatewayAuth"]
        gateway = f"{gw['gateway_url']}/{gw['user_ns']}/{gw['job_id']}"
        tok = {"Authorization": f"Bearer {gw['token']}"}
        r = await http.get(
            f"{gateway}/read-file",
            params={"path": "/etc/hostname"},
            headers={"Authorization": "Bearer forged"},
        )
        assert r.status == 401
        r = await http.get(f"{gateway}/read-file", params={"path": "/../../etc/shadow"}, headers=tok)
        assert r.status in (400, 403, 404)
        # A relative path is the working directory's, for every file call.
        form = aiohttp.FormData()
        form.add_field("file", b"relative", filename="f")
        r = await http.post(f"{gateway}/upload", params={"path": "rel.txt"}, data=form, headers=tok)
        assert r.status == 200, await r.text()
        r = await http.get(f"{gateway}/read-file", params={"path": "rel.txt"}, headers=tok)
        assert (r.status, (await r.json())["content"]) == (200, "relative")
        # An upload declaring more than the bound is refused before its body is read (its own
        # connection: the server closes it rather than read a terabyte).
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as lone:
            form = aiohttp.FormData()
            form.add_field("file", b"x" * 10, filename="f")
            r = await lone.post(
                f"{gateway}/upload",
                params={"path": "/tmp/ok"},
                data=form,
                headers={**tok, "Content-Length": str(1 << 40)},
            )
            assert r.status == 413 and r.headers.get("Connection") == "close"
        # A Connect envelope cut short: a Connect error, not a 500.
        r = await http.post(
            f"{gateway}/command_session.CommandSession/Start",
            headers={**tok, "Content-Type": "application/connect+proto"},
            data=b"\x00\x00\x00\x10\x0a",
        )
        body = await r.read()
        assert (r.status == 200 and b'"error"' in body) or 400 <= r.status < 500, (r.status, body)
        # A client gone mid-request: the server drops that connection only.
        host, port = "127.0.0.1", server.http_port
        _reader, writer = await asyncio.open_connection(host, port)
        path = f"/gateway/{gw['user_ns']}/{gw['job_id']}/command_session.CommandSession/Start"
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {gw['token']}\r\n"
            "Content-Type: application/connect+proto\r\nContent-Length: 100\r\n\r\n\x00\x00".encode()
        )
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        r = await http.get(f"{url}/{sid}", headers=auth)
        assert r.status == 200 and (await r.json())["status"] == "RUNNING"
    o = await scenario(server, CURRENT, "async_commands")
    assert o["exit"] == 9


async def test_timeouts_are_enforced_by_the_server(make_server) -> None:
    """`timeout_minutes` is the record's TTL and `idle_timeout_minutes` its idle bound (the
    registry's reaper ends it at either); an idle sandbox ends as `idle_timeout` (its last
    activity set back here, rather than waiting a minute)."""
    server = await prime_server(make_server)
    url = f"{base_url(server)}/api/v1/sandbox"
    auth = {"Authorization": f"Bearer {KEY_A}"}
    async with aiohttp.ClientSession() as http:
        r = await http.post(
            url,
            headers=auth,
            json={"name": "t", "docker_image": "x", "timeout_minutes": 2, "idle_timeout_minutes": 1},
        )
        created = await r.json()
        rec = server.service.registry.get(created["id"])
        assert rec.expires_at - rec.created_at == pytest.approx(120, abs=2)
        unbounded = await (
            await http.post(url, headers=auth, json={"name": "u", "docker_image": "x", "timeout_minutes": -1})
        ).json()
        assert server.service.registry.get(unbounded["id"]).expires_at is None
        server.service.registry.touch(rec, at=time.time() - 3600)
        await wait_until(lambda: server.service.registry.get(created["id"]) is None, what="the idle timeout")
        r = await http.get(f"{url}/{created['id']}", headers=auth)
        got = await r.json()
        assert got["status"] == "TERMINATED" and got["terminationReason"] == "idle_timeout"


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("venv", VENVS)
async def test_jobs_files_and_processes_on_the_docker_backend(make_server, images, venv) -> None:
    """Background jobs, files (100 MB with the current SDK) and interactive processes on
    containers."""
    server = await make_server(http_port=0, warm=1, backend="docker")
    jobs = await scenario(server, venv, "jobs", image=images)
    assert jobs["done"] == {"completed": True, "exit_code": 7, "stdout": "job-out\n", "stderr": "job-err\n"}
    files = await scenario(server, venv, "files", "100" if venv == CURRENT else "8", image=images)
    assert (
        files["upload"] == {"success": True, "size": True}
        and files["remote_digest"]
        and files["download_digest"]
    )
    assert files["read"]["window"] == ["234", 2, 10, True]
    assert files["missing"]["error"] == "SandboxFileNotFoundError"
    procs = await scenario(server, venv, "processes", None if venv == CURRENT else "vm", image=images)
    assert procs["stdout"] == "got:hello\n" and procs["terminated"] == 128 + signal.SIGTERM


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("venv", VENVS)
async def test_root_commands_on_the_docker_backend(make_server, dev_image, venv) -> None:
    """A sandbox of the image asked for (the dev image) is a container as a Prime user expects:
    root inside (its own user namespace), a writable root (`mkdir -p /app`, a venv under /opt),
    the SDK's timeout."""
    server = await make_server(http_port=0, warm=1, backend="docker")
    o = await scenario(server, venv, "commands", image=dev_image)
    assert o["basic"] == {"stdout": "out\n", "stderr": "err\n", "exit_code": 3}
    assert o["whoami"]["stdout"] == "0\n0\n"
    assert o["workdir"]["exit_code"] == 0 and o["cwd"]["stdout"] == "/app\ndata\n"
    assert o["timeout"]["error"] == "CommandTimeoutError", o["timeout"]
    assert o["pip"] == {"stdout": "42\n", "stderr": "", "exit_code": 0}


@pytest.mark.timeout(1800)
async def test_docker_image_selects_the_image_on_the_docker_backend(make_server, dev_image) -> None:
    """An image no template names runs as that image (the default template's bounds, the agent
    mounted in); one the engine does not have is a sandbox in ERROR whose wait raises the SDK's
    SandboxImagePullError."""
    server = await make_server(http_port=0, warm=1, backend="docker")
    o = await scenario(server, CURRENT, "images", dev_image)
    assert o["git"] == {"stdout": "git version\n", "stderr": "", "exit_code": 0}
    assert o["missing_status"] == "ERROR"
    assert o["missing_wait"]["error"] == "SandboxImagePullError", o["missing_wait"]


async def test_checkpoints_as_the_prime_cli_takes_them(make_server) -> None:
    """Checkpoint, wait (DURABLE), list, batch get, restore into two sandboxes (a fork: each
    writes its own), a checkpoint of a restored one (depth 1), delete; another key's is missing."""
    server = await prime_server(make_server)
    o = await scenario(server, CURRENT, "checkpoints")
    assert o["checkpoint"] == {
        "state": "DURABLE",
        "sandbox_id": True,
        "docker_image": "python:3.11-slim",
        "depth": 0,
    }
    assert o["listed"] == [True]
    assert o["batch"] == {"found": [True], "errors": ["NOT_FOUND"]}
    assert o["restored_image"] == "python:3.11-slim"
    assert [f["stdout"] for f in o["forks"]] == ["mine\nstate\n", "before\nstate\n"]
    assert o["parent"]["stdout"] == "after\n"
    assert o["second_depth"] == 1
    assert o["after_delete"]["error"] == "APIError" and "404" in o["after_delete"]["message"]
    assert o["sandbox_delete"] is True
    assert "404" in o["restore_deleted"]["message"], o["restore_deleted"]
    cp = await server_checkpoint(server)
    other = await scenario(server, CURRENT, "checkpoint_other", cp, key=KEY_B)
    for call in ("get", "delete", "restore"):
        assert "404" in other[call].get("message", ""), other[call]


async def server_checkpoint(server: Any) -> str:
    """A checkpoint of KEY_A's, taken over the Prime API with plain HTTP."""
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        r = await http.post(
            f"{base_url(server)}/api/v1/sandbox", json={"name": "a", "docker_image": "python:3.11-slim"}
        )
        sid = (await r.json())["id"]
        r = await http.post(f"{base_url(server)}/api/v1/sandbox/{sid}/checkpoints")
        assert r.status == 200, await r.text()
        return (await r.json())["id"]


def check_volumes(o: dict[str, Any]) -> None:
    """What the `volumes` scenario observed, on any backend."""
    assert o["created"] == {"name": "data", "head": None, "occupied": 0}
    assert "409" in o["taken"]["message"], o["taken"]
    assert o["empty"] == {"stdout": "", "stderr": "", "exit_code": 0}
    assert o["published"]["state"] == "DURABLE" and o["published"]["by"] is True
    assert o["head"] == {"is_publish": True, "occupied": True, "account": True}
    assert o["checkpoint_get"] == "DURABLE"
    assert o["in_sandbox_list"] == []  # a sandbox's checkpoints are of its root file system only
    assert "422" in o["restore"]["message"], o["restore"]
    assert o["reader"]["stdout"] == "v1\nx\n" and o["reader"]["exit_code"] != 0, o["reader"]
    assert "Read-only" in o["reader"]["stderr"]
    assert "422" in o["reader_publish"]["message"], o["reader_publish"]
    assert o["late_sees"]["stdout"] == ""  # its copy is the volume as it was at its create
    assert "409" in o["stale"]["message"], o["stale"]
    assert o["forced_head"] is True
    assert "404" in o["replaced"]["message"], o["replaced"]
    assert o["fresh"]["stdout"] == "late\nf\n", o["fresh"]
    assert "409" in o["writer_again"]["message"], o["writer_again"]
    assert "404" in o["not_attached"]["message"], o["not_attached"]
    assert "404" in o["unknown"]["message"], o["unknown"]
    assert "409" in o["delete_attached"]["message"], o["delete_attached"]
    assert o["list"] == {"total": 2, "names": ["data", "kept"]}
    assert "404" in o["after_delete"]["message"], o["after_delete"]


async def volumes_of_another_key(server: Any) -> None:
    """KEY_A's volume `kept` is missing to KEY_B, which may name one of its own so; then KEY_A's
    goes too, and no version of a volume is left."""
    other = await scenario(server, CURRENT, "volume_other", "kept", key=KEY_B)
    for call in ("get", "delete", "attach"):
        assert "404" in other[call].get("message", ""), other[call]
    assert other["own"] == "kept"
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEY_A}"}) as http:
        r = await http.delete(f"{base_url(server)}/api/v1/sandbox/volumes/kept")
        assert r.status == 200, await r.text()
    assert server.service.pool.checkpoints.list() == []


async def test_volumes_as_the_prime_cli_uses_them(make_server) -> None:
    """Volumes kept as versions: created, attached (a private copy of the newest version each),
    published (a DURABLE checkpoint, the new head), read-only, a stale publish 409 then forced,
    a delete refused while attached; another key's is missing."""
    server = await prime_server(make_server)
    check_volumes(await scenario(server, CURRENT, "volumes"))
    await volumes_of_another_key(server)


@pytest.mark.timeout(1800)
async def test_volumes_on_the_docker_backend(make_server, images) -> None:
    server = await make_server(http_port=0, warm=1, backend="docker")
    check_volumes(await scenario(server, CURRENT, "volumes", image=images))
    await volumes_of_another_key(server)

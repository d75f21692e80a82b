"""The E2B API, proven by the unmodified `e2b` and `e2b-code-interpreter` SDKs from PyPI (in their
own virtualenv, tests/clients/e2b.txt) against a real server over real sockets: the server runs
here, the SDKs in a subprocess (`clients/e2b_scenarios.py`) pointed at it by `E2B_API_URL`,
`E2B_SANDBOX_URL` and `E2B_API_KEY` only."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from helpers import http_answering, wait_until
from server_helpers import KEY_A, KEY_B, KEYS, run_scenario

pytestmark = pytest.mark.asyncio

VENV = "e2b"


async def e2b_server(make_server: Any, **kw: Any) -> Any:
    return await make_server(http_port=0, warm=1, **kw)


def url(server: Any) -> str:
    return f"http://127.0.0.1:{server.http_port}"


async def scenario(server: Any, name: str, arg: str | None = None, *, key: str = KEY_A) -> dict[str, Any]:
    env = {
        "E2B_API_URL": url(server),
        "E2B_SANDBOX_URL": url(server),
        "E2B_VOLUME_API_URL": url(server),
        "E2B_API_KEY": key,
    }
    return await run_scenario(VENV, "e2b_scenarios.py", [name, *([arg] if arg else [])], env)


def check_memory_refused(o: dict[str, Any]) -> None:
    """A full snapshot and a fork where processes cannot be taken: 501, saying so."""
    for call in ("full", "fork"):
        assert o[call]["message"].startswith("501: ") and "memory snapshots" in o[call]["message"], o[call]


def check_lifecycle(o: dict[str, Any]) -> None:
    assert o["info"] == {
        "id": True,
        "template": "base",
        "metadata": {"run": "lc", "k y": "v&1"},
        "state": "running",
        "ttl": 120,
        "envd": "0.6.4",
        "cpu": 1,
        "memory_mb": 1024,
    }
    assert o["env"] == "hi\n" and o["connect"] == "again\n" and o["extended"] and o["idempotent"]
    assert o["paging"] == {"first": 1, "has_next": True, "second": 1, "ids": True}
    assert o["metadata_filter"]
    assert o["metrics"] == {"ok": []}
    assert o["running"] and o["kill"] is True and o["kill_again"] is False and o["running_after"] is False
    assert o["info_after"]["error"] == o["connect_after"]["error"] == "SandboxNotFoundException"
    assert o["command_after"]["error"] == o["file_after"]["error"] == "SandboxNotRunningException"
    assert o["with_block"] == "in-block\n" and o["with_gone"] is False
    assert o["left"] == []


async def test_lifecycle(make_server) -> None:
    server = await e2b_server(make_server)
    o = await scenario(server, "lifecycle")
    check_lifecycle(o)
    assert o["unknown_template"] == {"ok": True}  # the local backend runs it on its agent template
    assert len(server.service.registry) == 0


def check_commands(o: dict[str, Any]) -> None:
    assert o["basic"] == {"stdout": "out\n", "stderr": "err\n", "exit_code": 0}
    assert o["exit"] == {"exit_code": 3, "stdout": "before\n", "class": "CommandExitException"}
    assert o["cwd_env"] == "/tmp\n1\n" and o["root"] == "0\n"
    assert o["other_user"]["error"] == "InvalidArgumentException"
    assert o["streamed"] == ["1\n2\n3\n", ["e\n"]]
    assert o["timeout"]["error"] == "TimeoutException" and o["timeout_fast"]
    assert o["after_timeout"] == []  # killed at its deadline
    assert o["stdin"] == {"stdout": "got:hello\n", "stderr": "", "exit_code": 0}
    assert o["close_stdin"] == "xclosed\n"
    assert o["listed"] and o["list_args"] == [["-l", "-c", "sleep 60"]]
    assert o["kill"] is True and o["kill_gone"] is False and o["empty"] == []
    assert o["killed_wait"]["error"] == "CommandExitException" and "code -1" in o["killed_wait"]["message"]
    assert o["connect"] == "late\n" and o["survived"] == "done\n"
    assert o["big"] == [3 << 20, ["x"]], str(o["big"])[:200]


async def test_commands(make_server) -> None:
    server = await e2b_server(make_server)
    check_commands(await scenario(server, "commands"))
    assert len(server.service.registry) == 0


def check_files(o: dict[str, Any], work_dir: str) -> None:
    assert o["write"] == {"name": "a.txt", "path": f"{work_dir}/notes/a.txt", "type": "file"}
    assert o["read"] == o["stream"] == "hello" and o["bytes"] == [104, 101]
    assert o["many"] == ["/tmp/m/1", "/tmp/m/2"] and o["list"] == [["1", "file"], ["2", "file"]]
    assert o["deep"] == [f"{work_dir}/notes/a.txt"]
    assert o["exists"] == [True, False]
    assert o["stat"] == {"size": 5, "type": "file", "perm": "-rw-r--r--", "name": "a.txt"}
    assert o["mkdir"] == [True, False]
    assert o["rename"] == ["/tmp/d/b.txt", "hello", False] and o["removed"] is False
    for missing in ("missing", "missing_remove", "missing_info"):
        assert o[missing]["error"] == "FileNotFoundException", o[missing]
    # A FIFO a program made is refused at once, as the caller's error.
    assert o["fifo"]["error"] == "InvalidArgumentException" and o["fifo_fast"]
    assert o["big"] == {"same": True, "remote": True}


async def test_files(make_server) -> None:
    """Text, bytes, streams, several files at once, listing, stat, mkdir, rename, remove, the
    SDK's errors, and 100 MB each way."""
    server = await e2b_server(make_server)
    check_files(await scenario(server, "files", "100"), "/work")


async def test_async_sdk(make_server) -> None:
    server = await e2b_server(make_server)
    o = await scenario(server, "async_api")
    assert o["run"] == ["a\nb\n", "a\nb\n"] and o["background"] == "bg\n"
    assert o["exit"]["error"] == "CommandExitException" and "code 4" in o["exit"]["message"]
    assert o["file"] == "async file" and o["list"] == [True] and o["running"] and o["kill"] is True
    assert o["files"] == {
        "list": ["1", "2"],
        "exists": True,
        "info": 1,
        "mkdir": True,
        "rename": True,
        "removed": True,
    }
    assert o["stdin"] == "piped" and o["listed"] and o["kill_process"] is True
    assert o["connect"] == "via connect\n" and o["info"] == "base"
    assert o["after"]["error"] == "SandboxNotRunningException"


def check_interpreter(o: dict[str, Any]) -> None:
    assert o["state"] == [str(i * (i + 1)) for i in range(20)]  # 20 cells of one namespace
    assert o["cell"] == {"text": "4.0", "stdout": ["hi\n"], "count": 21}
    assert o["import_kept"] == "True"
    assert o["error"] == {"name": "ValueError", "value": "bad value", "tb": True}
    got = o["callbacks"]
    assert "".join(t for k, t in got if k == "out") == "a\nsub\n"
    assert [t for k, t in got if k == "err"] == ["b\n"]
    assert [t for k, t in got if k == "result"] == ["CompletedProcess(args=['echo', 'sub'], returncode=0)"]
    assert o["indented"] == "3"
    assert o["string"] == "quoted" and o["env"] == "v"
    # The SDK's timeout interrupts the cell; the context keeps its state.
    assert o["timeout"]["error"] == "TimeoutException" and o["after_timeout"] == "6" and o["quick"]
    assert o["context"] == {"language": "python", "isolated": "False"}
    assert o["context_state"] == "5" and o["contexts"] == 2 and o["restarted"] == "False"
    assert o["removed"]["error"] == "NotFoundException"
    assert o["language"]["error"] == "SandboxException" and "400" in o["language"]["message"]
    assert o["both"]["error"] == "InvalidArgumentException"
    assert o["shell"] == "same sandbox\n"
    assert o["killed"]["error"] == "TimeoutException" and o["gone"]


async def test_code_interpreter(make_server) -> None:
    server = await e2b_server(make_server)
    check_interpreter(await scenario(server, "interpreter"))
    o = await scenario(server, "interpreter_async")
    assert o == {"text": "30", "error": "KeyError"}
    assert len(server.service.registry) == 0


async def test_keys(make_server) -> None:
    """A wrong key is the SDK's AuthenticationException; another key's sandbox is not found, is
    not listed and cannot be killed."""
    server = await e2b_server(make_server)
    wrong = await scenario(server, "wrong_key", key="not-a-key")
    assert wrong["create"]["error"] == wrong["list"]["error"] == "AuthenticationException"
    mine = await scenario(server, "create_one")
    theirs = await scenario(server, "other_key", mine["id"], key=KEY_B)
    assert theirs["info"]["error"] == theirs["connect"]["error"] == "SandboxNotFoundException"
    assert theirs["kill"] is False and theirs["listed"] == []
    assert server.service.registry.get(mine["id"]) is not None


async def test_bad_input(make_server) -> None:
    """Bad requests of every E2B surface get a clear 4xx in the shape the SDK reads; the sandbox
    and the server keep serving."""
    server = await e2b_server(make_server)
    key = {"X-API-KEY": KEY_A}
    async with aiohttp.ClientSession() as http:
        base = url(server)
        r = await http.post(f"{base}/v2/sandboxes", headers=key, data=b"{not json")
        assert r.status == 400 and (await r.json())["code"] == 400
        for body in ({}, {"templateID": "base", "timeout": -1}, {"templateID": "base", "envVars": {"A": 1}}):
            r = await http.post(f"{base}/v2/sandboxes", headers=key, json=body)
            assert r.status == 400 and isinstance((await r.json())["message"], str), body
        r = await http.get(f"{base}/sandboxes/sb-nope", headers=key)
        assert r.status == 404 and (await r.json())["code"] == 404
        r = await http.post(f"{base}/v2/sandboxes", headers=key, json={"templateID": "base"})
        assert r.status == 201
        made = await r.json()
        sid, token = made["sandboxID"], made["envdAccessToken"]
        envd = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}
        r = await http.get(f"{base}/health", headers={**envd, "X-Access-Token": "wrong"})
        assert r.status == 401
        r = await http.get(f"{base}/health", headers={**envd, "E2b-Sandbox-Id": "sb-nope"})
        assert r.status == 502 and "was not found" in (await r.json())["message"]
        r = await http.get(f"{base}/health", headers={**envd, "E2b-Sandbox-Port": "8080"})
        assert r.status == 502 and "port 8080 is not open" in (await r.json())["message"]
        r = await http.get(f"{base}/files", headers=envd)
        assert r.status == 400
        r = await http.post(
            f"{base}/process.Process/List",
            headers={**envd, "Content-Type": "application/json"},
            data=b"{bad",
        )
        assert r.status == 400 and (await r.json())["code"] == "invalid_argument"
        ci = {**envd, "E2b-Sandbox-Port": "49999"}
        r = await http.post(f"{base}/execute", headers=ci, json={"code": 1})
        assert r.status == 400
        r = await http.post(
            f"{base}/execute", headers=ci, json={"code": "1", "context_id": "x", "language": "python"}
        )
        assert r.status == 400 and "Only one of" in await r.text()
        r = await http.post(f"{base}/execute", headers=ci, json={"code": "1", "context_id": "nope"})
        assert r.status == 404
        # Still serving.
        r = await http.post(f"{base}/execute", headers=ci, json={"code": "6 * 7"})
        lines = [json.loads(line) for line in (await r.text()).splitlines()]
        assert r.status == 200 and {"type": "result", "text": "42", "is_main_result": True} in lines
        assert lines[-1] == {"type": "end_of_execution"}
        r = await http.delete(f"{base}/sandboxes/{sid}", headers=key)
        assert r.status == 204


@pytest.mark.timeout(1800)
async def test_on_the_docker_backend(make_server, images) -> None:
    """The same SDK calls on containers: lifecycle, commands as root, files (100 MB), the code
    interpreter's kernel inside the container."""
    server = await e2b_server(make_server, backend="docker")
    o = await scenario(server, "lifecycle")
    check_lifecycle(o)
    assert o["unknown_template"]["error"] == "SandboxException"  # an image the engine lacks
    check_commands(await scenario(server, "commands"))
    check_files(await scenario(server, "files", "100"), "/work")
    check_interpreter(await scenario(server, "interpreter"))
    assert len(server.service.registry) == 0


async def test_filesystem_snapshots(make_server) -> None:
    """e2b's `create_snapshot(mode="filesystem")`, `Sandbox.create(snapshot_id)` (twice: each
    made sandbox writes its own, without the source's processes), `list_snapshots`,
    `delete_snapshot`; another key's snapshot is missing to it."""
    server = await e2b_server(make_server)
    o = await scenario(server, "snapshots")
    assert o["snapshot"] == {"names": ["warm:default"], "id": True}
    assert o["made"] == ["mine", "before"] and o["parent"] == "after"
    assert o["made_processes"] == ""
    assert o["listed"] == [True] and o["by_name"] == [True]
    assert (o["deleted"], o["deleted_again"]) == (True, False)
    assert "error" in o["create_deleted"]
    mine = await scenario(server, "snapshots", "keep")
    theirs = await scenario(server, "snapshot_other", mine["other_key_id"], key=KEY_B)
    assert "error" in theirs["create"] and theirs["listed"] == [] and theirs["delete"] is False
    assert mine["other_key_id"] in [
        cp.id for cp in server.service.core.pool.checkpoints.list()
    ]  # still there


@pytest.mark.requires("criu")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_a_memory_snapshot_of_programs_with_children_and_threads(
    make_server, request, backend: str
) -> None:
    """e2b's full snapshot of a sandbox running a shell that starts a process per step and a
    Python program with a thread of its own: on the local backend a sandbox made from it runs
    both on from the snapshot's moment (its pid namespace is its programs' user namespace's:
    `Template.memory_restores`); on containers the snapshot is refused, naming the program, and
    the source runs on."""
    if backend == "docker":
        request.getfixturevalue("images")
    server = await e2b_server(make_server, ports_port=0, backend=backend)
    o = await scenario(server, "memory_family", None)
    if backend == "local":
        first, then = o["copy"]["first"], o["copy"]["then"]
        assert all(a > 0 for a in first) and all(b > a for a, b in zip(first, then, strict=True)), o
    else:
        message = o["snapshot"]["message"]
        assert "child processes" in message or "threads" in message, o
        assert o["source_runs_on"], o


@pytest.mark.requires("criu")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_memory_snapshots_and_forks(make_server, request, backend: str) -> None:
    """e2b's full snapshot (the SDK's default) of a sandbox running a counter and an HTTP server,
    two sandboxes made from it and `fork(count=2)`: each copy's counter counts on from the
    snapshot's moment (above the start only the source's command line was given), its server
    answers through `get_host`, and each copy is a machine of its own (the first's file and its
    stopped counter are not the second's). Another key's memory snapshot is missing to it. On
    the local backend and on containers."""
    if backend == "docker":
        request.getfixturevalue("images")
    server = await e2b_server(make_server, ports_port=0, backend=backend)
    o = await scenario(server, "memory", "8000")
    before = o["before"]
    for copy in o["copies"]:
        assert before <= copy["first"] < copy["then"], o
        assert copy["counters"] == 1, o
    assert o["copies"][0]["served"] == [200, "changed in the first copy\n"], o
    assert o["copies"][1]["served"] == [200, "served from the snapshot\n"], o
    assert o["stopped_stays"] and o["other_runs_on"], o
    assert o["source"]["first"] < o["source"]["then"] and o["source"]["served"][0] == 200, o
    assert len(o["forks"]) == 2, o
    for fork in o["forks"]:
        assert o["before_fork"] <= fork["first"] < fork["then"], o
        assert fork["served"] == [200, "served from the snapshot\n"] and fork["counters"] == 1, o
    assert o["source_id_kept"], o
    theirs = await scenario(server, "snapshot_other", o["snapshot_id"], key=KEY_B)
    assert "error" in theirs["create"] and theirs["listed"] == [] and theirs["delete"] is False
    # The fork's own snapshot is not kept; the full snapshot is, until deleted.
    kept = [cp.id for cp in server.service.core.pool.checkpoints.list()]
    assert kept == [o["snapshot_id"]], kept
    assert len(server.service.registry) == 0


@pytest.mark.requires("criu")
@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_a_paused_sandbox_evicted_keeps_its_processes(make_server, request, backend: str) -> None:
    """e2b's `pause()` of a sandbox running a counter; the server evicts it past its bound of a
    pause (its agent ends, its files and running programs kept in a memory checkpoint);
    `connect()` resumes it under the same id: the counter counts on, above the start only its
    command line was given. On the local backend (its cgroup frozen) and on containers (the
    engine's pause)."""
    from sandboxes.server.service import ServiceConfig
    from sandboxes.server.validation import Bounds

    if backend == "docker":
        request.getfixturevalue("images")
    # Evicted once paused this long; the evicted record is then kept as long again.
    server = await e2b_server(
        make_server, backend=backend, config=ServiceConfig(bounds=Bounds(max_paused_s=6.0))
    )
    paused = await scenario(server, "pause_evicted")
    assert paused["paused"] is True and paused["before"] > 1_000_000, paused
    rec = server.service.registry.get(paused["id"])
    assert rec is not None
    old = rec.sandbox
    # Evicted: the record names its checkpoint first, then its agent is ended; what is kept is
    # the checkpoint.
    await wait_until(
        lambda: rec.evicted is not None and old.closed, timeout=60, what="the paused sandbox evicted"
    )
    o = await scenario(server, "pause_evicted", paused["id"])
    assert paused["before"] <= o["first"] < o["then"] and o["counters"] == 1, (paused, o)
    assert len(server.service.registry) == 0


@pytest.mark.requires("criu")
async def test_a_code_interpreters_sandbox_is_snapshotted_without_its_kernel(make_server) -> None:
    """A full snapshot of a sandbox with a code interpreter context (its kernel runs threads,
    which a memory snapshot cannot take): the kernel is left out, the counter is carried, the
    copy's cells run in a fresh context, and the source's context keeps its state."""
    server = await e2b_server(make_server)
    o = await scenario(server, "memory_interpreter")
    assert o == {
        "source_cell": "42",
        "copy_counts_on": True,
        "copy_x": "NameError",
        "copy_cell": "42",
        "source_after": "43",
    }, o
    assert len(server.service.registry) == 0


async def test_memory_snapshots_refused_without_criu(make_server, monkeypatch) -> None:
    """On a host whose CRIU cannot run, a full snapshot and a fork are 501, naming what is missing
    (never a copy of the files alone)."""
    from sandboxes.server import criu

    monkeypatch.setattr(criu, "_answer", criu.Criu(False, "", False, "CRIU is not installed on this host"))
    server = await e2b_server(make_server)
    o = await scenario(server, "memory_refused")
    check_memory_refused(o)
    assert "CRIU is not installed" in o["full"]["message"], o
    assert len(server.service.registry) == 0


async def test_pause_and_resume(make_server) -> None:
    """e2b's `pause` stops every process where the sandbox runs (no tick is written while paused;
    the same process goes on after `connect` resumes it; files kept); a second pause is False;
    the sandbox lists as paused and refuses commands meanwhile. A `mode="filesystem"` pause and a
    resume with `on_resume="reboot"` keep the files and end the processes. A sandbox created with
    `lifecycle={"on_timeout": "pause"}` is paused at its timeout; with `auto_resume` a command
    resumes it, without it `connect` does."""
    server = await e2b_server(make_server)
    o = await scenario(server, "pause")
    assert (o["paused"], o["paused_again"], o["state"]) == (True, False, "paused"), o
    assert o["listed_paused"] == [True] and o["listed_running"] == []
    assert "error" in o["command_while_paused"]
    assert o["ticks_while_paused"] == 0 and o["ticks_after"] and o["same_process"], o
    assert (o["state_after"], o["ttl_after"], o["file"]) == ("running", True, "kept")
    assert (o["fs_paused"], o["fs_state"], o["fs_file"], o["fs_processes"]) == (True, "paused", "kept", "")
    assert (o["reboot_file"], o["reboot_processes"]) == ("after a restart", "")
    assert o["killed"] is True and o["pause_gone"]["error"] == "SandboxNotFoundException"
    assert o["auto_states"] == ["paused", "paused"]
    assert o["auto_lifecycle"] == {"on_timeout": "pause", "auto_resume": True}, o["auto_lifecycle"]
    assert (o["auto_command"], o["auto_after"]) == ("auto", "running")
    assert "error" in o["manual_command"] and o["manual_connect"] == "back\n"
    assert len(server.service.registry) == 0


async def test_network(make_server) -> None:
    """e2b's `update_network` and `network=` at create: the sandbox's egress policy replaced while
    it runs (the agent's proxy enforces it when the call returns): the test's server on this
    host's loopback reached through an allow-list naming it, its neighbour not; an update that
    clears the rules opens the public internet, never the host's loopback; transform rules and
    bad rules are 400, a paused sandbox 409, a killed one 404."""
    async with http_answering(b"e2b-allowed") as (port, seen):
        server = await e2b_server(make_server)
        o = await scenario(server, "network", str(port))
    assert o["before"] != 0
    assert o["info"] == {"allow_out": [f"127.0.0.2:{port}"], "deny_out": ["0.0.0.0/0"]}, o["info"]
    assert (o["allowed"]["stdout"], o["allowed"]["exit_code"]) == ("e2b-allowed\n", 0), o["allowed"]
    assert o["other"]["exit_code"] != 0 and "403" in o["other"]["stderr"]
    assert o["cleared"]["exit_code"] != 0 and "403" in o["cleared"]["stderr"]
    assert o["cleared_info"] == {"allow_out": [], "deny_out": []}
    assert o["transform"]["message"].startswith("400: per-host transform rules"), o["transform"]
    assert o["bad"]["message"].startswith("400: "), o["bad"]
    assert "409" in o["paused"]["message"] or o["paused"]["error"] == "ConflictException", o["paused"]
    assert o["gone"]["error"] == "SandboxNotFoundException"
    assert o["at_create"]["stdout"] == "e2b-allowed\n", o["at_create"]
    assert len(seen) == 2
    assert len(server.service.registry) == 0


async def test_ports_through_get_host(make_server) -> None:
    """e2b's `get_host(port)` names the server's ports listener (the create's `domain`); an
    ordinary HTTP client with the sandbox's traffic token reaches `python3 -m http.server`
    inside through it, and nothing is published on the host for the sandbox."""
    server = await e2b_server(make_server, ports_port=0)
    o = await scenario(server, "ports", "38519")
    assert o["host"].startswith("38519-") and o["host"].endswith(f".127.0.0.1:{server.ports_port}"), o
    assert o["fetched"] == [200, "served from inside\n"], o
    assert o["no_token"] == 401
    assert len(server.service.registry) == 0


async def test_pty(make_server) -> None:
    """e2b's `pty`: `bash -i -l` on a real pseudo-terminal of the sandbox's agent, typed into,
    resized (`stty size` sees it), Ctrl-C interrupting `sleep` and not the shell, watched by a
    second `connect`, its exit status through `wait`; `kill` ends another; a command without a
    terminal cannot be resized."""
    server = await e2b_server(make_server)
    o = await scenario(server, "pty")
    assert o["size"] and o["resized"] and o["interrupted"] and o["connected"], o
    assert o["exit"] == 3, o
    assert o["killed"] is True and o["killed_wait"]["error"] == "CommandExitException", o
    assert o["resize_plain"]["error"] == "InvalidArgumentException", o
    assert len(server.service.registry) == 0


async def test_pty_with_a_slow_reader(make_server) -> None:
    """A fast producer on a terminal read slowly by the unmodified SDK (an async `on_data` that
    sleeps on each chunk): 1.5 million lines of `seq`, more than the sockets between hold, all
    arrive in order, and the server never holds more than `LISTENER_CHUNKS` chunks for the
    reader (it stops reading the program's output meanwhile, so the program waits)."""
    from sandboxes.server.http.sessions import LISTENER_CHUNKS

    server = await e2b_server(make_server)
    deepest = 0

    async def watch() -> None:
        nonlocal deepest
        while True:
            for rec in list(server.service.registry):
                sessions = rec.attrs.get("e2b_processes")
                for s in list(sessions.live) if sessions else ():
                    deepest = max([deepest, *(q.qsize() for q in s.listeners)])
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        o = await scenario(server, "pty_slow_reader", "1500000")
    finally:
        watcher.cancel()
    assert o == {"exit": 0, "in_order": True, "count": 1500000}, o
    assert 0 < deepest <= LISTENER_CHUNKS, deepest
    assert len(server.service.registry) == 0


async def test_volumes(make_server) -> None:
    """e2b's `Volume`: created, written and read through the volume content API, mounted by
    sandboxes (by the object and by name) that see and add files, a symlink a sandbox planted
    neither followed nor resolved on the host, destroyed; another key's volume is missing to it."""
    server = await e2b_server(make_server)
    o = await scenario(server, "volumes")
    assert o["created"] == {"name": "data", "token": True, "id": True}
    assert o["duplicate"]["error"] == "VolumeException" and "409" in o["duplicate"]["message"]
    assert o["listed"] == ["data"] and o["written"] == 0o640 and o["made"] == "directory"
    assert o["stat"] == len("seeded")
    assert o["in_sandbox"] == "seededdir\nseed.txt\n"
    assert o["read_back"] == "from-sandbox\n" and o["second"] == "from-sandbox\n"
    assert "error" in o["through_link"] and o["link"] == "symlink"
    assert o["entries"] == ["dir", "link", "out.txt", "seed.txt"]
    assert o["exists_after"] is False
    assert "404" in o["missing_volume"]["message"]
    assert (o["destroyed"], o["destroyed_again"]) == (True, False)
    assert o["info_gone"]["error"] == "VolumeNotFoundException"
    alices = await server.service.core.create_volume(KEYS[KEY_A], "alices", size_bytes=8 << 20)
    theirs = await scenario(server, "volume_other", alices.id, key=KEY_B)
    assert theirs == {"info": theirs["info"], "listed": []}
    assert theirs["info"]["error"] == "VolumeNotFoundException"
    assert len(server.service.registry) == 0


async def test_a_fifo_in_a_volume_stalls_nothing(make_server) -> None:
    """A FIFO a sandbox made in its volume: ten reads of it at once through the volume content
    API, and a write, are refused at once with the API's 400 (the SDK's VolumeException), never
    a call that waits for a writer with a thread of the server held; meanwhile another key's
    volume create and this key's read of a file answer as fast as usual."""
    server = await e2b_server(make_server)
    o = await scenario(server, "volume_fifo", KEY_B)
    assert o["made"] == "ok\n"
    for r in [*o["reads"], o["write"]]:
        assert r["error"] == "VolumeException" and r["message"].startswith("400: "), r
        assert "not a regular file" in r["message"], r
    assert o["stat"] == "unknown"
    assert o["same"] == {"ok": "plain\n"} and o["other"] is True
    usual = max(o["usual_s"])
    assert o["other_s"] < 4 * usual + 0.5 and o["same_s"] < 4 * usual + 0.5, o
    assert o["destroyed"] is True and len(server.service.registry) == 0


async def test_a_key_holds_a_bounded_share_of_the_volume_threads(make_server, monkeypatch) -> None:
    """One key's volume reads that block in the file system (held here on an event, as a slow
    disk would hold them) take at most `THREADS_PER_KEY` threads of the server at once; another
    key's volume calls meanwhile answer, and the held key's reads all answer once released."""
    import threading

    from sandboxes.server.http.e2b import volumes as e2b_volumes
    from sandboxes.state.volume_files import VolumeFiles

    server = await e2b_server(make_server)
    base = url(server)
    release, lock = threading.Event(), threading.Lock()
    running = {"now": 0, "most": 0}
    read = VolumeFiles.read

    def held_read(self: VolumeFiles, path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("held"):
            with lock:
                running["now"] += 1
                running["most"] = max(running["most"], running["now"])
            release.wait(60)
            with lock:
                running["now"] -= 1
        return read(self, path, *args, **kwargs)

    monkeypatch.setattr(VolumeFiles, "read", held_read)

    async with aiohttp.ClientSession() as s:

        async def volume(key: str, name: str) -> tuple[str, dict[str, str]]:
            async with s.post(f"{base}/volumes", json={"name": name}, headers={"X-API-KEY": key}) as r:
                assert r.status == 201, await r.text()
                v = await r.json()
            return v["volumeID"], {"Authorization": f"Bearer {v['token']}"}

        async def call(
            method: str, vid: str, auth: dict[str, str], path: str, data: bytes = b""
        ) -> tuple[int, bytes]:
            async with s.request(
                method,
                f"{base}/volumecontent/{vid}/file",
                params={"path": path},
                data=data or None,
                headers=auth,
            ) as r:
                return r.status, await r.read()

        mine, my_auth = await volume(KEY_A, "held")
        theirs, their_auth = await volume(KEY_B, "free")
        assert (await call("PUT", mine, my_auth, "/held", b"mine"))[0] == 201
        reads = [asyncio.create_task(call("GET", mine, my_auth, "/held")) for _ in range(8)]
        await asyncio.sleep(0.5)
        assert (await call("PUT", theirs, their_auth, "/f", b"theirs"))[0] == 201
        assert await call("GET", theirs, their_auth, "/f") == (200, b"theirs")
        assert running["most"] == e2b_volumes.THREADS_PER_KEY, running
        release.set()
        assert [await r for r in reads] == [(200, b"mine")] * 8
        for key, vid in ((KEY_A, mine), (KEY_B, theirs)):
            async with s.delete(f"{base}/volumes/{vid}", headers={"X-API-KEY": key}) as r:
                assert r.status == 204


async def test_the_sdk_before_the_v2_routes(make_server) -> None:
    """e2b 2.50 (the last before the v2 create route) creates with `POST /sandboxes`, connects
    with `POST /sandboxes/{id}/connect`; its code interpreter and commands run, and its kill
    leaves nothing."""
    server = await e2b_server(make_server)
    env = {"E2B_API_URL": url(server), "E2B_SANDBOX_URL": url(server), "E2B_API_KEY": KEY_A}
    o = await run_scenario("e2b-2.50", "e2b_v1_scenarios.py", [], env)
    assert o["code"] == "42" and o["command"] == "v1\n" and o["connected"] == "again\n"
    assert o["listed"] == [True] and o["killed"] is True and o["gone"] is True
    assert len(server.service.registry) == 0

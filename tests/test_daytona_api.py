"""The Daytona API, proven by the unmodified `daytona` SDK from PyPI (its own virtualenv,
tests/clients/daytona.txt) against a real server over real sockets: the server runs here, the SDK
in a subprocess (`clients/daytona_scenarios.py`) pointed at it by `DAYTONA_API_URL` and
`DAYTONA_API_KEY` only."""

from __future__ import annotations

from typing import Any

import pytest
from server_helpers import KEY_A, KEY_B, run_scenario

pytestmark = pytest.mark.asyncio


async def scenario(server: Any, name: str, arg: str | None = None, *, key: str = KEY_A) -> dict[str, Any]:
    env = {"DAYTONA_API_URL": f"http://127.0.0.1:{server.http_port}/daytona", "DAYTONA_API_KEY": key}
    return await run_scenario("daytona", "daytona_scenarios.py", [name, *([arg] if arg else [])], env)


def check_lifecycle(o: dict[str, Any]) -> None:
    assert o["state"] == "started"
    assert o["exec"] == [0, "hi\nto-stderr\nx1\n/work\n"] or o["exec"][1].endswith("\n")
    assert o["cwd"] == "/tmp\n" and o["exit"] == 3
    assert o["timeout"]["error"] == "DaytonaProcessExecutionTimeoutError"
    assert o["code_run"] == [0, "42\n"] and o["code_run_fresh"] == [1, True]
    assert o["interp"] == ["counter 42\n4.0\n", "counter 42\n4.0\n", None]
    assert o["interp_error"] == ["ZeroDivisionError", "division by zero"]
    assert o["interp_isolated"] == "False\n" and o["interp_contexts"] == [True]
    assert o["interp_timeout"]["error"] == "DaytonaTimeoutError"
    assert o["interp_after_timeout"] == "42\n"  # interrupted, its state kept
    assert "not found" in o["interp_deleted"]["ok"]  # an error of the run: its context is gone
    assert o["pty"] == [True, True] and o["pty_resized"] is True and o["pty_listed"] == ["t1"]
    assert o["pty_exit"] == 7 and o["pty_killed"] != 0
    assert o["session"] == [0, "/tmp\nkept\n", "e\n"]
    assert o["session_syntax"] != 0 and o["session_after"] == "still\n"
    assert o["async_running"] is None and o["async"] == [5, "later\n"]
    # Followed over the WebSocket as it runs (more than one chunk), both streams whole.
    assert o["streamed"] == ["out1\nout2\nout3\n", "err1\nerr2\nerr3\n", True]
    assert o["sessions"] == ["s1"] and o["session_commands"] == 6
    assert o["session_gone"]["error"] == "DaytonaNotFoundError"
    assert o["download"] == "hello world\n"
    assert o["download_missing"]["error"] == "DaytonaFileNotFoundError"
    assert o["list"] == [["a.txt", False, 12], ["b.txt", False, 7]]
    assert o["info"] == ["a.txt", False, 12, "0644"]
    assert o["moved"] == "second\n"
    assert o["find"] == [["a.txt", 1, "hello world"]]
    assert o["search"] == ["a.txt", "b.txt"]
    assert o["replace"] == [True] and o["replaced"] == "hello there\n"
    assert o["mode"] == "0600"
    assert o["deleted"]["error"] == "DaytonaFileNotFoundError"
    assert o["by_name"] and o["listed"] and o["listed_none"] == []
    assert o["stopped"] == "stopped" and o["exec_stopped"]["error"] == "DaytonaConflictError"
    assert o["started"] == "started" and o["after_restart"] == "hello there\n"
    assert o["session_after_restart"]["error"] == "DaytonaNotFoundError"  # it ended with the stop
    assert o["fork"] == "hello there\n"
    assert o["gpu"]["error"] == "DaytonaBadRequestError"
    assert o["declarative"] == "built\n/opt/img\nv 1\n"
    assert o["copy"]["error"] == "DaytonaBadRequestError" and "ADD" in o["copy"]["message"]
    assert o["after_delete"]["error"] == "DaytonaNotFoundError"
    assert o["left"] == []


async def test_lifecycle(make_server) -> None:
    server = await make_server(http_port=0, ports_port=0)
    o = await scenario(server, "lifecycle")
    check_lifecycle(o)
    assert o["exec"] == [0, "hi\nto-stderr\nx1\n/work\n"]
    assert o["preview"] == {"ok": [True, True]}
    # The declarative image was built once: the second create found its template.
    (t,) = server.core.built.of("alice")
    assert t.name.startswith("image-") and len(t.builds) == 1
    assert len(server.service.registry) == 0


async def test_snapshots_and_volumes(make_server) -> None:
    """A snapshot of an image (built: pending, then active), one of a sandbox's files (what it
    wrote before, not after), listed and deleted; a volume two sandboxes share."""
    server = await make_server(http_port=0)
    o = await scenario(server, "images")
    assert o["snap_state"] == "active"
    assert o["from_sandbox"] == "made\n"
    assert o["listed"] == ["snap-img", "snap-sb"]
    assert o["memory"]["error"] == "DaytonaNotFoundError"
    assert o["volume_get"] and o["volume"] == "shared\n" and o["volumes"] == ["vol-a"]
    assert o["missing_volume"]["error"] == "DaytonaNotFoundError"
    assert o["snapshots_after"] == [] and o["volumes_after"] == []
    assert len(server.service.registry) == 0
    assert server.pool.checkpoints.list() == []


async def test_declared_snapshot_and_a_missing_one(make_server) -> None:
    """A snapshot made from a declarative image runs its steps (files, ENV, WORKDIR reach the
    sandboxes made from it); before it exists, both its lookup and a create from it fail as the
    platform's do (404, and a create's 400), so a caller's build-on-miss fallback runs."""
    server = await make_server(http_port=0)
    o = await scenario(server, "declared_snapshots")
    assert o["missing_get"]["error"] == "DaytonaNotFoundError"
    assert o["missing_create"]["error"] == "DaytonaBadRequestError"
    assert "Snapshot baked not found" in o["missing_create"]["message"]
    assert o["state"] == "active"
    assert o["baked"] == "baked\nyes\n/opt/baked\n"
    assert o["left"] == []
    assert len(server.service.registry) == 0


async def test_sync_client(make_server) -> None:
    server = await make_server(http_port=0)
    o = await scenario(server, "sync_client")
    assert o["exec"] == "sync\n" and o["download"] == "sync file" and o["code_run"] == "2\n"
    assert len(server.service.registry) == 0


async def test_keys(make_server) -> None:
    """Another key's sandbox is not found and not listed; a wrong key is refused."""
    server = await make_server(http_port=0)
    held = await scenario(server, "hold")
    other = await scenario(server, "other_key", held["id"], key=KEY_B)
    assert other["get"]["error"] == "DaytonaNotFoundError" and other["listed"] == {"ok": []}
    wrong = await scenario(server, "other_key", held["id"], key="not-a-key-0123456789")
    assert wrong["get"]["error"] == wrong["listed"]["error"] == "DaytonaAuthenticationError"
    mine = await scenario(server, "other_key", held["id"])
    assert "ok" in mine["get"] and mine["listed"] == {"ok": [held["id"]]}


@pytest.mark.timeout(1800)
async def test_on_the_docker_backend(make_server, dev_image) -> None:
    """The same on docker: the sandbox is a container of the image asked for."""
    server = await make_server(http_port=0, backend="docker")
    o = await scenario(server, "lifecycle", dev_image)
    check_lifecycle(o)
    assert o["preview"] == {"ok": [True, True]}  # sandboxes' ports on the HTTP port
    assert len(server.service.registry) == 0


async def test_a_command_leaves_its_server_running(make_server) -> None:
    """`process.exec("server &")` returns while the server it started keeps serving, whether the
    command redirected its output (`nohup ... > log &`) or not."""
    server = await make_server(http_port=0, warm=1)
    o = await scenario(server, "background")
    assert o["started"] == [0, "started\n"] and o["plain"][0] == 0 and o["plain"][1].startswith("plain\n"), o
    assert o["answered"] == "200 200\n", o
    assert len(server.service.registry) == 0

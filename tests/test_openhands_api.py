"""The OpenHands runtime API, proven by the unmodified `openhands-workspace` `APIRemoteWorkspace`
from PyPI (its own Python 3.12 virtualenv, tests/clients/openhands.txt) against a real server over
real sockets: the server runs here, the client in a subprocess (`clients/openhands_scenarios.py`)
pointed at `http://127.0.0.1:PORT/openhands` with a server key. The runtime's image is a
template the key built through the API's `/build`; its agent server is a stdlib stand-in
(`clients/openhands_agent_server.py`) serving the health, command and file routes the workspace
calls."""

from __future__ import annotations

from typing import Any

import pytest
from server_helpers import KEY_A, KEY_B, run_scenario

pytestmark = pytest.mark.asyncio


async def scenario(server: Any, name: str, base: str | None = None) -> dict[str, Any]:
    env = {
        "OH_RUNTIME_API_URL": f"http://127.0.0.1:{server.http_port}/openhands",
        "OH_RUNTIME_API_KEY": KEY_A,
        "OH_OTHER_KEY": KEY_B,
        "HOME": "/tmp",
    }
    return await run_scenario("openhands", "openhands_scenarios.py", [name, *([base] if base else [])], env)


def check_workspace(o: dict[str, Any]) -> None:
    # The image: a template built through /build, found by /image_exists once ready.
    assert o["exists_before"] is False and o["exists_after"] is True, o
    assert o["build"]["status"] == "SUCCESS" and o["build"]["image"] == "runtime:oh-stand-in"
    assert o["unknown_session"][0] == 404 and "detail" in o["unknown_session"][1]
    # The runtime's url is an address of its own, no path; health opens without the session key.
    assert o["host_has_no_path"] is True and o["alive"] is True
    assert o["health"][0] == 200
    # The session key is checked on the way in (the gate's own answer, before the agent server's).
    assert o["api_without_key"] == [401, "X-Session-API-Key is required\n"] and o["api_wrong_key"] == 401
    assert o["raw"] == {"pipelined": [1, "200"], "sockets": ["404", True], "elsewhere": "401"}
    assert o["session"] == ["running", "ready", True] and o["session_fields"] == ["session_api_key", "url"]
    assert o["runtime"] is True and len(o["listed"]) == 1 and o["batch"] == o["listed"]
    # A command and a file through the agent server inside the sandbox.
    assert o["command"] == [3, "hello\n1\n", "oops\n"]
    assert o["upload"] == [True, 33, None] and o["cat"] == "written through the agent server\n"
    assert o["download"] == [True, "written through the agent server\n"]
    assert o["attached"] is True
    # Another key sees nothing of it; no key or a wrong one is 401.
    assert o["other_session"] == o["other_runtime"] == o["other_stop"] == 404
    assert o["other_list"] == []
    assert o["wrong_key"][0] == 401 and "detail" in o["wrong_key"][1] and o["no_key"] == 401
    # Pause freezes it (its port answers 409 meanwhile); resume brings back the same server.
    assert o["paused"] == ["paused", "paused"] and o["health_paused"] == 409
    assert o["resumed"] == "running" and o["after_resume"] == "written through the agent server\n"
    # Stop deletes it: its session, runtime and address are gone.
    assert o["stopped"] == 404 and o["stopped_runtime"] == 404
    assert o["health_stopped"] != 200


async def test_workspace(make_server) -> None:
    server = await make_server(http_port=0)
    check_workspace(await scenario(server, "workspace"))
    assert len(server.service.registry) == 0


@pytest.mark.timeout(1800)
async def test_on_the_docker_backend(make_server, dev_image) -> None:
    """The same on docker: the stand-in's image is built `FROM` the dev image (its `RUN` in a
    container of it), and the runtime is a container of that build; a server that ends at once
    fails its runtime with its output."""
    server = await make_server(http_port=0, backend="docker")
    check_workspace(await scenario(server, "workspace", dev_image))
    check_refused(await scenario(server, "refused", dev_image))
    assert len(server.service.registry) == 0


def check_refused(o: dict[str, Any]) -> None:
    assert o["no_image"] == [400, {"detail": "image is required"}], o
    assert o["bad_factor"] == 400
    assert o["copy"][0] == 400 and "COPY" in o["copy"][1]["detail"]
    assert o["no_build"] == 404 and o["pause_unknown"] == 404
    assert o["failed"] == [201, "failed", "dying\n", 4]
    assert o["stop"] == [200, {"runtime_id": o["stop"][1]["runtime_id"], "status": "stopped"}]


async def test_refusals_and_a_failed_server(make_server) -> None:
    server = await make_server(http_port=0)
    check_refused(await scenario(server, "refused"))
    assert len(server.service.registry) == 0

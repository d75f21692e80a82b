"""The OpenSandbox API, proven by the unmodified `opensandbox` SDK from PyPI (its own virtualenv,
tests/clients/opensandbox.txt) against a real server over real sockets: the server runs here, the
SDK in a subprocess (`clients/opensandbox_scenarios.py`) pointed at it by `OPEN_SANDBOX_DOMAIN`
and `OPEN_SANDBOX_API_KEY` only."""

from __future__ import annotations

from typing import Any

import pytest
from server_helpers import KEY_A, KEY_B, run_scenario

pytestmark = pytest.mark.asyncio


async def scenario(server: Any, name: str, arg: str | None = None, *, key: str = KEY_A) -> dict[str, Any]:
    env = {
        "OPEN_SANDBOX_DOMAIN": f"http://127.0.0.1:{server.http_port}/opensandbox",
        "OPEN_SANDBOX_API_KEY": key,
    }
    return await run_scenario("opensandbox", "opensandbox_scenarios.py", [name, *([arg] if arg else [])], env)


def check_lifecycle(o: dict[str, Any]) -> None:
    assert o["info"] == ["Running", {"run": "lc", "team": "a&b=c"}, True, ["tail", "-f", "/dev/null"]], o
    assert o["run"] == [0, "hi\nx1\n/work\n", "to-stderr\n"] and o["run_id"], o
    assert o["cwd"] == "/tmp\n" and o["argv"] == "a b|c|"
    assert o["exit"] == [3, "CommandExecError", "3"]
    # Streamed as it runs (more than one chunk), then complete.
    assert o["streamed"] == ["out1\nout2\nout3\n", True, 0]
    assert o["timeout"] == [-1, True] and o["status_fg"] is False
    assert o["bg_running"] == [True, "sleep 0.5; echo later; exit 5"]
    assert o["bg"] == [5, "later\n", 6] and o["bg_tail"] == ""
    assert o["interrupted"] == [False, -1]
    assert o["missing_command"]["status"] == 404
    assert o["read"] == "hello world\n" and o["read_lines"] == "hello world\n" and o["read_range"] == "hello"
    assert o["info_files"] == [
        ["notes/a.txt", "file", 12, 644, True],
        ["notes/b.txt", "file", 7, 600, True],
    ]
    assert o["read_missing"]["status"] == 404
    assert o["info_missing"]["status"] == 404 and o["info_missing"]["code"] == "FILE_NOT_FOUND"
    assert o["search"] == ["a.txt", "b.txt"]
    assert o["mkdir"] == ["directory", 700]
    assert o["list_dir"] == [
        ["a.txt", "file"],
        ["b.txt", "file"],
        ["sub", "directory"],
        ["sub/deep", "directory"],
    ]
    assert o["chmod"] == 640
    assert o["moved"] == "second\n"
    assert o["replaced"] == [[["notes/a.txt", 1]], "hello there\n"]
    assert o["deleted"]["status"] == 404 and o["deleted_dir"]["status"] == 404
    assert o["endpoint"] == [True, True]
    assert o["egress"]["ok"]["defaultAction"] in ("allow", "deny")
    assert o["listed"] == [[True], 1] and o["listed_none"] == [0, False] and o["listed_paused"] == 0
    assert o["renewed"] is True and o["patched"] == {"run": "lc", "phase": "two"}
    assert o["paused"] == "Paused"
    assert o["run_paused"]["status"] == 409
    assert o["resumed"] == "Running" and o["ticking"] is True  # its processes lived through the pause
    assert o["after_delete"]["status"] == 404 and o["after_delete"]["code"] == "SANDBOX::NOT_FOUND"
    assert o["left"] == []


def check_extras(o: dict[str, Any]) -> None:
    assert o["served"] == [200, "from the sandbox"], o
    assert o["ping"] == 200 and o["wrong_token"] == [404, "SANDBOX_NOT_FOUND"]
    assert o["abandoned"] == [False, -1]  # killed once its client went away
    assert o["proxy_endpoint"] is True
    assert o["proxy_run"] == [0, "from the sandbox", ""] and o["proxy_read"] == "proxied"


async def test_lifecycle(make_server) -> None:
    server = await make_server(http_port=0)
    check_lifecycle(await scenario(server, "lifecycle"))
    assert len(server.service.registry) == 0


async def test_refusals_and_egress(make_server) -> None:
    """GPUs and templates get the platform's own refusals; a create's network policy is the
    sandbox's egress policy, which the egress endpoint reads and changes."""
    server = await make_server(http_port=0)
    o = await scenario(server, "refused")
    assert o["gpu"]["status"] == 400 and o["gpu"]["code"] == "SANDBOX::INVALID_PARAMETER", o
    # A status its client has no model for: the SDK keeps the body in the message.
    assert o["template"]["status"] == 501 and "SANDBOX::API_NOT_SUPPORTED" in o["template"]["message"]
    assert o["missing"]["status"] == 404
    assert o["policy"]["defaultAction"] == "deny"
    assert o["policy"]["egress"] == [{"action": "allow", "target": "pypi.org"}]
    assert o["policy_after"]["egress"] == [{"action": "allow", "target": "example.com"}]
    assert o["session"]["status"] == 501
    assert len(server.service.registry) == 0


async def test_entrypoint_ports_and_the_server_proxy(make_server) -> None:
    """An entrypoint runs as the sandbox's main process: a web server, reached through its
    port's endpoint; execd answers through the server's proxy with the key, and directly only
    with the sandbox's token."""
    server = await make_server(http_port=0)
    check_extras(await scenario(server, "extras"))
    assert len(server.service.registry) == 0


@pytest.mark.timeout(1800)
async def test_on_the_docker_backend(make_server, dev_image) -> None:
    """The same on docker: the sandbox is a container of the image asked for; its commands,
    files, pause and resume, a port of its own reached through its endpoint, its snapshots."""
    server = await make_server(http_port=0, backend="docker")
    check_lifecycle(await scenario(server, "lifecycle", dev_image))
    check_extras(await scenario(server, "extras", dev_image))
    await check_snapshots(server, dev_image)
    assert server.pool.checkpoints.list() == []
    assert len(server.service.registry) == 0


async def test_sync_client(make_server) -> None:
    server = await make_server(http_port=0)
    o = await scenario(server, "sync_client")
    assert o["run"] == [2, "sync\n", "e\n"], o
    assert o["read"] == "sync file" and o["info"] == 9
    assert o["paused"] == "Paused" and o["resumed"] == "sync file" and o["listed"] == [True]
    assert len(server.service.registry) == 0


async def test_keys(make_server) -> None:
    """Another key's sandbox is not found, not listed, not deleted; a wrong key is refused."""
    server = await make_server(http_port=0)
    held = await scenario(server, "hold")
    other = await scenario(server, "other_key", held["id"], key=KEY_B)
    assert other["get"]["status"] == 404 and other["listed"] == {"ok": []}, other
    assert other["kill"]["status"] == 404 and other["connect"]["status"] == 404
    wrong = await scenario(server, "other_key", held["id"], key="not-a-key-0123456789")
    assert wrong["get"]["status"] == wrong["listed"]["status"] == 401
    assert wrong["get"]["code"] == "INVALID_API_KEY"
    mine = await scenario(server, "other_key", held["id"])
    assert "ok" in mine["get"] and mine["listed"] == {"ok": [held["id"]]}
    assert mine["connect"] == {"ok": "mine\n"}
    assert len(server.service.registry) == 0


async def check_snapshots(server: Any, image: str = "python:3.11-slim") -> None:
    """Runs the snapshot scenarios of sandboxes of `image` on `server`."""
    o = await scenario(server, "snapshots", image)
    sid = o["id"]
    assert o["taken"][1:] == ["v1", "Ready", True], o
    assert o["got"] == o["taken"][:3] and o["listed"] == [[True], 1], o
    assert o["by_name"] == [True] and o["by_other_name"] == 0
    assert o["missing"]["status"] == 404
    assert o["restored"] == ["before the snapshot", "deep\n/work\n", image], o
    assert o["original"] == "after the snapshot"
    assert o["from_missing"]["status"] == 404, o
    assert o["outlives"] == o["taken"][:3]
    other = await scenario(server, "snapshot_other_key", sid, key=KEY_B)
    assert other["get"]["status"] == 404 and other["listed"] == 0, other
    assert other["delete"]["status"] == 404 and other["create"]["status"] == 404, other
    gone = await scenario(server, "snapshot_delete", sid)
    assert gone["after"]["status"] == 404 and gone["listed"] == 0, gone


async def test_snapshots(make_server) -> None:
    """A snapshot keeps the sandbox's files: a file written before it is in a sandbox made from
    it (with the image and work dir of the one it was taken of), not what was written after; it
    outlives its sandbox until deleted, and another key can neither see nor use it."""
    server = await make_server(http_port=0)
    await check_snapshots(server)
    assert len(server.service.registry) == 0


async def test_pty_sessions(make_server) -> None:
    """execd's PTY sessions on the wire (the SDK has no PTY API; NeMo-Gym's provider drives them in
    tests/test_frameworks.py): a program on pipes, its exit, its output replayed from an offset to
    a later connection, takeover; the sandbox's token or its owner's key, nobody else's."""
    import json

    import aiohttp

    server = await make_server(http_port=0)
    held = await scenario(server, "hold")
    api = f"http://127.0.0.1:{server.http_port}/opensandbox/v1"
    key_a, key_b = {"OPEN-SANDBOX-API-KEY": KEY_A}, {"OPEN-SANDBOX-API-KEY": KEY_B}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{api}/sandboxes/{held['id']}/endpoints/44772", headers=key_a) as r:
            execd = "http://" + (await r.json())["endpoint"]
        proxied = f"{api}/sandboxes/{held['id']}/proxy/44772"

        async def session(command: str) -> str:
            async with http.post(f"{execd}/pty", json={"command": command}) as r:
                assert r.status == 200, await r.text()
                sid: str = (await r.json())["session_id"]
                return sid

        async def frames(ws: aiohttp.ClientWebSocketResponse) -> list[Any]:
            got: list[Any] = []
            async for m in ws:
                got.append(json.loads(m.data) if m.type == aiohttp.WSMsgType.TEXT else bytes(m.data))
            return got

        sid = await session("read line; echo got $line; echo to-err >&2; exit 5")
        async with http.ws_connect(f"{execd.replace('http', 'ws', 1)}/pty/{sid}/ws?pty=0") as ws:
            first = await ws.receive_json()
            await ws.send_bytes(b"\x00hello\n")
            rest = await frames(ws)
        assert first["type"] == "connected" and first["mode"] == "pipe", first
        assert b"\x01got hello\n" in rest and b"\x02to-err\n" in rest, rest
        assert rest[-1] == {"type": "exit", "exit_code": 5}, rest
        async with http.get(f"{execd}/pty/{sid}") as r:
            assert (await r.json())["exit_code"] == 5
        # A later connection replays what was kept from the offset it names, then the exit.
        async with http.ws_connect(f"{execd.replace('http', 'ws', 1)}/pty/{sid}/ws?since=4") as ws:
            replay = await frames(ws)
        assert replay[1][:9] == b"\x03" + (4).to_bytes(8, "big") and replay[1][9:].startswith(b"hello\n"), (
            replay
        )
        assert replay[-1] == {"type": "exit", "exit_code": 5}

        # One connection at a time; another takes the session over or is turned away.
        sid = await session("sleep 30")
        ws_url = f"{proxied.replace('http', 'ws', 1)}/pty/{sid}/ws"
        async with http.ws_connect(ws_url, headers=key_a) as holder:
            assert (await holder.receive_json())["type"] == "connected"
            async with http.ws_connect(ws_url, headers=key_a) as turned:
                await turned.receive()
                assert turned.close_code == 1008
            async with http.ws_connect(ws_url + "?takeover=1", headers=key_a) as taker:
                assert (await taker.receive_json())["type"] == "connected"
                await holder.receive()
                assert holder.close_code == 4001
        # Nobody else's: another key, a wrong token.
        async with http.get(f"{proxied}/pty/{sid}", headers=key_b) as r:
            assert r.status == 404
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(ws_url, headers=key_b)
        wrong = execd.rsplit("/", 1)[0] + "/not-the-token"
        async with http.get(f"{wrong}/pty/{sid}") as r:
            assert r.status == 404 and (await r.json())["code"] == "SANDBOX_NOT_FOUND"
        async with http.delete(f"{execd}/pty/{sid}") as r:
            assert r.status == 200
        async with http.get(f"{execd}/pty/{sid}") as r:
            assert r.status == 404 and (await r.json())["code"] == "CONTEXT_NOT_FOUND"
        async with http.delete(f"{api}/sandboxes/{held['id']}", headers=key_a) as r:
            assert r.status == 204
    assert len(server.service.registry) == 0

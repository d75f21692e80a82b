"""The server's core under its transports: every surface's execution (gRPC, SandboxFusion,
Piston, the Prime API through its unmodified SDK, the E2B API through its unmodified SDKs, the
Daytona API through its unmodified SDK: its toolbox's commands, code_run, file calls, sessions,
terminals and interpreter cells, the OpenSandbox API through its unmodified SDK: execd's
commands, streamed and in the background, and its file search) takes a slot of the same per-key exec quota, so a key at its
limit is refused on each, in each API's own shape, and served on each once a slot is free."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from server_helpers import KEY_A, KEYS, run_scenario, wait_for

from sandboxes import AsyncSandboxClient
from sandboxes import errors as E
from sandboxes.server.quota import QuotaLimits

pytestmark = pytest.mark.asyncio

OWNER = KEYS[KEY_A]
HEADERS = {"Authorization": f"Bearer {KEY_A}"}


async def _http(server: Any) -> dict[str, Any]:
    """The status of one SandboxFusion run and one Piston job of the key's."""
    base = f"http://127.0.0.1:{server.http_port}"
    out: dict[str, Any] = {}
    async with aiohttp.ClientSession(headers=HEADERS) as s:
        async with s.post(f"{base}/run_code", json={"code": "print(1)", "language": "python"}) as r:
            out["fusion"] = (r.status, await r.json())
        job = {"language": "python", "version": "*", "files": [{"content": "print(1)"}]}
        async with s.post(f"{base}/api/v2/execute", json=job) as r:
            out["piston"] = (r.status, await r.json())
    return out


async def _sdks(server: Any) -> dict[str, Any]:
    """What the Prime and E2B SDKs observe of their executions (`executions` scenarios)."""
    base = f"http://127.0.0.1:{server.http_port}"
    # One after the other: with one exec slot, the two SDKs' executions would refuse each other.
    with tempfile.TemporaryDirectory(prefix="prime-home-") as home:
        prime = await run_scenario(
            "prime-current",
            "prime_scenarios.py",
            ["executions"],
            {"HOME": str(Path(home)), "PRIME_API_BASE_URL": base, "PRIME_API_KEY": KEY_A},
        )
    e2b = await run_scenario(
        "e2b",
        "e2b_scenarios.py",
        ["executions"],
        {"E2B_API_URL": base, "E2B_SANDBOX_URL": base, "E2B_API_KEY": KEY_A},
    )
    daytona = await run_scenario(
        "daytona",
        "daytona_scenarios.py",
        ["executions"],
        {"DAYTONA_API_URL": f"{base}/daytona", "DAYTONA_API_KEY": KEY_A},
    )
    opensandbox = await run_scenario(
        "opensandbox",
        "opensandbox_scenarios.py",
        ["executions"],
        {"OPEN_SANDBOX_DOMAIN": f"{base}/opensandbox", "OPEN_SANDBOX_API_KEY": KEY_A},
    )
    return {"prime": prime, "e2b": e2b, "daytona": daytona, "opensandbox": opensandbox}


DAYTONA_EXECUTIONS = ("exec", "code_run", "files", "session", "terminal", "cell")
OPENSANDBOX_EXECUTIONS = ("command", "background", "search")


async def test_every_surface_takes_the_same_exec_slots(make_server) -> None:
    server = await make_server(http_port=0, warm=2, quota=QuotaLimits(max_execs=1))
    async with AsyncSandboxClient(server.address, KEY_A, timeout=120.0) as client:
        sb = await client.create()
        held = asyncio.create_task(sb.exec(["sleep", "120"], timeout=180))
        await wait_for(lambda: server.core.quotas.execs(OWNER) == 1, "the key's one exec slot taken")

        with pytest.raises(E.QuotaExceeded):
            await sb.exec(["true"])
        http = await _http(server)
        assert http["fusion"][0] == 429 and "exec quota" in http["fusion"][1]["detail"]
        assert http["piston"][0] == 429 and "exec quota" in http["piston"][1]["message"]
        sdks = await _sdks(server)
        refused = [sdks["prime"]["command"], *(sdks["e2b"][k] for k in ("command", "list", "cell"))]
        refused += [sdks["daytona"][k] for k in DAYTONA_EXECUTIONS]
        refused += [sdks["opensandbox"][k] for k in OPENSANDBOX_EXECUTIONS]
        assert {sdks["opensandbox"][k].get("status") for k in OPENSANDBOX_EXECUTIONS} == {429}, sdks
        for o in refused:
            assert "exec quota" in o.get("message", ""), sdks

        held.cancel()
        with pytest.raises(asyncio.CancelledError):
            await held
        await wait_for(lambda: server.core.quotas.execs(OWNER) == 0, "the slot given back")

        assert (await sb.exec(["true"])).exit_code == 0
        http = await _http(server)
        assert http["fusion"][0] == 200 and http["fusion"][1]["run_result"]["stdout"] == "1\n"
        assert http["piston"][0] == 200 and http["piston"][1]["run"]["stdout"] == "1\n"
        sdks = await _sdks(server)
        assert sdks["prime"]["command"].get("ok", {}).get("stdout") == "ran\n", sdks
        assert sdks["e2b"]["command"].get("ok", {}).get("stdout") == "ran\n", sdks
        assert sdks["e2b"]["list"].get("ok") and sdks["e2b"]["cell"].get("ok") == "42", sdks
        assert {k: sdks["daytona"][k] for k in DAYTONA_EXECUTIONS} == {
            "exec": {"ok": "ran\n"},
            "code_run": {"ok": "ran\n"},
            "files": {"ok": True},
            "session": {"ok": "ran\n"},
            "terminal": {"ok": [5, True]},
            "cell": {"ok": "42\n"},
        }, sdks
        assert sdks["opensandbox"] == {
            "command": {"ok": "ran\n"},
            "background": {"ok": True},
            "search": {"ok": True},
        }, sdks
        await sb.close()
    assert server.core.quotas.execs(OWNER) == 0

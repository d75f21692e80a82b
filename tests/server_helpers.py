"""Helpers of the server / client tests: the API keys the test servers know, bearer headers, a
bounded wait, the agents of a server's pool (seen from outside), and a run of an unmodified
client's scenario in its own virtualenv. The fixtures themselves (a real server on 127.0.0.1 over
a real local pool, real clients) are in conftest.py."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_until

from sandboxes.backends.local import default_run_root
from sandboxes.server.app import Server

__all__ = [
    "KEYS",
    "KEY_A",
    "KEY_B",
    "agent_pids_of",
    "bearer",
    "client_python",
    "run_client",
    "run_scenario",
    "wait_for",
]

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = Path(__file__).resolve().parent / "clients"

KEY_A = "test-key-alice-0123456789"
KEY_B = "test-key-bob-9876543210"
KEYS = {KEY_A: "alice", KEY_B: "bob"}


def bearer(key: str = KEY_A) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


async def wait_for(cond: Callable[[], Any], what: str, bound_s: float = 30.0, interval: float = 0.02) -> None:
    """Poll a real condition (sync or async) until it holds; fail past the bound (`wait_until`)."""
    await wait_until(cond, timeout=bound_s, interval=interval, what=what)


def agent_pids_of(server: Server) -> set[int]:
    """Pids of the agents of the server's pool, read from the local backend's records (outside view)."""
    pool_dir = Path(default_run_root()) / f"pool-{server.pool.id}"
    pids = set()
    for f in pool_dir.glob("*.json"):
        if f.name == "owner.json":
            continue
        try:
            pids.add(int(json.loads(f.read_text())["pid"]))
        except (OSError, ValueError, KeyError):
            continue
    return pids


def client_python(venv: str) -> str:
    """The interpreter of a client virtualenv (tests/clients/<venv>.txt, made by `make clients`).
    `make test-fast` (SANDBOXES_TEST_FAST=1) skips the tests that run one."""
    if os.environ.get("SANDBOXES_TEST_FAST") == "1":
        pytest.skip("runs a client virtualenv: `make test` runs it, `make test-fast` does not")
    py = ROOT / os.environ.get("CLIENT_VENVS", ".venv-clients") / venv / "bin" / "python"
    if not py.exists():
        pytest.fail(f"client virtualenv {venv} is missing: run `make clients` (tests/clients/{venv}.txt)")
    return str(py)


async def run_client(venv: str, args: list[str], env: Mapping[str, str], *, timeout: float = 600) -> str:
    """Runs `python ARGS...` of the client virtualenv `venv` with only `env` (plus PATH); its
    stdout (its exit status must be 0)."""
    proc = await asyncio.create_subprocess_exec(
        client_python(venv),
        *args,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, errout = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, errout.decode()[-4000:]
    return out.decode()


async def run_scenario(
    venv: str, script: str, args: list[str], env: Mapping[str, str], *, timeout: float = 600
) -> dict[str, Any]:
    """Runs `tests/clients/<script> ARGS...` with the client of `venv`; the JSON object its last
    line prints."""
    out = await run_client(venv, [str(CLIENTS / script), *args], env, timeout=timeout)
    return json.loads(out.strip().splitlines()[-1])


async def drive_exec_stream(server: Server, sandbox_id: str, argv: list[str]) -> tuple[asyncio.Queue, Any]:
    """The service's `ExecStream` of `argv` in `sandbox_id`, driven directly (no transport, so the
    order of input and events is the test's): the queue its input messages are put on (None ends
    the input) and the stream of its events, whose first (`started`) is taken."""
    from sandboxes._proto import service_pb2 as pb

    rec = await server.service.registry.find(sandbox_id)
    inputs: asyncio.Queue = asyncio.Queue()

    async def requests() -> Any:
        while (msg := await inputs.get()) is not None:
            yield msg

    await inputs.put(pb.ExecInput(start=pb.ExecRequest(sandbox_id=sandbox_id, argv=argv)))
    events = server.service.exec_stream(requests(), None, rec.owner)
    first = await asyncio.wait_for(events.__anext__(), 10)
    assert first.WhichOneof("kind") == "started", first
    return inputs, events

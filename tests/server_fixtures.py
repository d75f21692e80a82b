"""Fixtures of the server / client tests: a real server on 127.0.0.1 (port 0) over a real local
pool of real agents, and real clients. Import with `from server_fixtures import *`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest_asyncio

from sandboxes._proto.service_pb2_grpc import SandboxesStub
from sandboxes.backends.local import default_run_root
from sandboxes.client import AsyncSandboxClient
from sandboxes.server.app import Server
from sandboxes.server.auth import ApiKeys

__all__ = [
    "KEYS",
    "KEY_A",
    "KEY_B",
    "agent_pids_of",
    "bearer",
    "client",
    "client_b",
    "make_server",
    "raw_stub",
    "server",
    "wait_for",
]

KEY_A = "test-key-alice-0123456789"
KEY_B = "test-key-bob-9876543210"
KEYS = {KEY_A: "alice", KEY_B: "bob"}


def bearer(key: str = KEY_A) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


async def wait_for(cond: Callable[[], Any], what: str, bound_s: float = 30.0, interval: float = 0.02) -> None:
    """Poll a real condition (sync or async) until it holds; fail past the bound."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while True:
        r = cond()
        if asyncio.iscoroutine(r):
            r = await r
        if r:
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


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


@pytest_asyncio.fixture
async def make_server(native: Any) -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    """Factory: `await make_server(**Server kwargs)`; auth with KEYS unless `auth=` / `insecure=`."""
    servers: list[Server] = []

    async def make(**kwargs: Any) -> Server:
        insecure = kwargs.pop("insecure", False)
        if "auth" not in kwargs:
            kwargs["auth"] = ApiKeys({} if insecure else KEYS, insecure=insecure)
        kwargs.setdefault("host", "127.0.0.1")
        kwargs.setdefault("port", 0)
        kwargs.setdefault("warm", 1)
        kwargs.setdefault("grace_s", 2.0)
        kwargs.setdefault("pool_kwargs", {"claim_timeout": 60.0})
        s = Server(**kwargs)
        servers.append(s)
        await s.start()
        return s

    yield make
    for s in servers:
        await s.stop(grace=0)


@pytest_asyncio.fixture
async def server(make_server: Callable[..., Awaitable[Server]]) -> Server:
    return await make_server()


@pytest_asyncio.fixture
async def client(server: Server) -> AsyncIterator[AsyncSandboxClient]:
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as c:
        yield c


@pytest_asyncio.fixture
async def client_b(server: Server) -> AsyncIterator[AsyncSandboxClient]:
    async with AsyncSandboxClient(server.address, KEY_B, timeout=60.0) as c:
        yield c


@pytest_asyncio.fixture
async def raw_stub(server: Server) -> AsyncIterator[Any]:
    """A bare generated stub (no client-side validation, no send limit) for malformed requests."""
    channel = grpc.aio.insecure_channel(
        server.address,
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", 64 << 20)],
    )
    stub = SandboxesStub(channel)
    stub.channel = channel
    yield stub
    await channel.close()

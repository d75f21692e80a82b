"""API-key authentication, per-key isolation and per-key quotas of the real server."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest
from helpers import pgrep
from server_helpers import KEY_A, KEY_B, bearer, wait_for

from sandboxes import errors as E
from sandboxes._proto import service_pb2 as pb
from sandboxes.client import AsyncSandboxClient
from sandboxes.server.auth import ApiKeys, load_keys, parse_keys
from sandboxes.server.quota import QuotaLimits


async def test_missing_and_wrong_keys_are_unauthenticated(server, raw_stub) -> None:
    for metadata in [
        (),
        bearer("wrong-key"),
        (("authorization", "Basic abc"),),
        (("authorization", "Bearer "),),
    ]:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await raw_stub.List(pb.ListRequest(), metadata=metadata, timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert dict(info.value.trailing_metadata())["sandboxes-error-kind"] == "auth"
    # Through the client: the exact exception class.
    for key in (None, "wrong-key"):
        async with AsyncSandboxClient(server.address, key or "", timeout=30) as c:
            with pytest.raises(E.AuthError):
                await c.create()
            with pytest.raises(E.AuthError):
                await c.list()
    # The right key still works, and health answers without a key (status only).
    assert (await raw_stub.List(pb.ListRequest(), metadata=bearer(KEY_A), timeout=30)).sandboxes == []
    h = await raw_stub.Health(pb.HealthRequest(), timeout=30)
    assert h.status == "serving" and not h.pools


async def test_keys_isolate_owners(client: AsyncSandboxClient, client_b: AsyncSandboxClient) -> None:
    a = await client.create(labels={"owner": "a"})
    assert await client_b.list() == []
    with pytest.raises(E.NotFound):
        await client_b.get(a.id)
    with pytest.raises(E.NotFound):
        await client_b.delete(a.id)
    assert await client_b.bulk_delete(ids=[a.id], labels={"owner": "a"}) == []
    assert [s.id for s in await client.list()] == [a.id]
    await a.close()


async def test_insecure_server_needs_no_key(make_server) -> None:
    server = await make_server(insecure=True)
    async with AsyncSandboxClient(server.address, "", timeout=60) as c:
        sb = await c.create()
        assert (await sb.exec(["true"])).exit_code == 0
        await sb.close()


def test_no_keys_without_insecure_refuses_to_start() -> None:
    with pytest.raises(E.InvalidRequest, match="insecure"):
        ApiKeys({}, insecure=False)


def test_key_sources(tmp_path) -> None:
    f = tmp_path / "keys.txt"
    f.write_text("# comment\nalice:key-a\n\nkey-bare\n")
    keys = load_keys(f, env={"SANDBOXES_API_KEYS": "bob:key-b, key-c"})
    assert keys["key-a"] == "alice" and keys["key-b"] == "bob"
    assert keys["key-bare"].startswith("key-") and "key-bare" not in keys["key-bare"]
    assert set(keys) == {"key-a", "key-bare", "key-b", "key-c"}
    auth = ApiKeys(keys)
    assert auth.authenticate(bearer("key-a")) == "alice"
    assert auth.authenticate((("authorization", "bearer key-b"),)) == "bob"
    with pytest.raises(E.AuthError):
        auth.authenticate(bearer("key-"))
    assert parse_keys(["", "  ", "#x"]) == {}


async def test_sandbox_quota(make_server) -> None:
    server = await make_server(warm=1, quota=QuotaLimits(max_sandboxes=2))
    async with (
        AsyncSandboxClient(server.address, KEY_A, timeout=60) as a,
        AsyncSandboxClient(server.address, KEY_B, timeout=60) as b,
    ):
        s1, s2 = await a.create(), await a.create()
        with pytest.raises(E.QuotaExceeded):
            await a.create()
        # Another key has its own quota.
        sb = await b.create()
        await sb.close()
        # Freeing one makes room again.
        await s1.close()
        s3 = await a.create()
        await asyncio.gather(s2.close(), s3.close())


async def test_concurrent_creates_cannot_overshoot_quota(make_server) -> None:
    server = await make_server(warm=1, quota=QuotaLimits(max_sandboxes=2))
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60) as a:
        results = await asyncio.gather(*(a.create() for _ in range(5)), return_exceptions=True)
        ok = [r for r in results if not isinstance(r, Exception)]
        refused = [r for r in results if isinstance(r, E.QuotaExceeded)]
        assert len(ok) == 2 and len(refused) == 3
        await asyncio.gather(*(s.close() for s in ok))


async def test_exec_quota(make_server) -> None:
    server = await make_server(quota=QuotaLimits(max_execs=1))
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60) as a:
        sb = await a.create()
        m = f"sbx-quota-{uuid.uuid4().hex}"
        running = asyncio.ensure_future(sb.exec(["sh", "-c", "sleep 1000", m]))
        await wait_for(lambda: pgrep(m), "first exec to run")
        with pytest.raises(E.QuotaExceeded):
            await sb.exec(["true"])
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        await wait_for(lambda: server.quotas.execs("alice") == 0, "exec slot to be freed")
        assert (await sb.exec(["true"])).exit_code == 0
        await sb.close()

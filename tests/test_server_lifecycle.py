"""Sandbox lifecycle through the real server: create / get / list / delete, idempotency, labels,
empty-pool claims, per-claim env and files, TTL expiry, and shutdown leaving nothing behind."""

from __future__ import annotations

import asyncio

import pytest
from helpers import kernel_has_landlock, pid_running
from server_helpers import KEY_A, agent_pids_of, wait_for

from sandboxes import errors as E
from sandboxes.client import AsyncSandboxClient
from sandboxes.server.service import ServiceConfig


async def test_create_exec_delete(client: AsyncSandboxClient) -> None:
    sb = await client.create(labels={"job": "t1"})
    assert sb.id and sb.template == "default" and sb.labels == {"job": "t1"}
    r = await sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=30)
    # A failing program is a result, not an error.
    assert (r.exit_code, r.stdout, r.stderr) == (3, b"out\n", b"err\n")
    assert not r.timed_out
    got = await client.get(sb.id)
    assert got.id == sb.id and got.labels == {"job": "t1"}
    info = await sb.info()
    assert info.version and info.landlock == kernel_has_landlock()  # through the server
    await client.delete(sb.id)
    with pytest.raises(E.NotFound):
        await client.get(sb.id)
    with pytest.raises(E.NotFound):
        await sb.exec(["true"])
    with pytest.raises(E.NotFound):
        await client.delete(sb.id)
    await sb.close()  # idempotent: already gone is fine


async def test_exec_timeout_is_a_result(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    r = await sb.exec(["sleep", "30"], timeout=0.5)
    assert r.timed_out and r.exit_code != 0
    r = await sb.exec("echo still here")
    assert r.stdout == b"still here\n"
    await sb.close()


async def test_idempotent_create_sequential(client: AsyncSandboxClient) -> None:
    a = await client.create(idempotency_key="same-key", labels={"k": "1"})
    b = await client.create(idempotency_key="same-key", labels={"k": "1"})
    assert a.id == b.id
    assert [s.id for s in await client.list({"k": "1"})] == [a.id]
    await a.close()
    # Once deleted, the key is free: a new create makes a new sandbox.
    c = await client.create(idempotency_key="same-key")
    assert c.id != a.id
    await c.close()


async def test_idempotent_create_concurrent(client: AsyncSandboxClient) -> None:
    sbs = await asyncio.gather(
        *(client.create(idempotency_key="concurrent", labels={"c": "1"}) for _ in range(6))
    )
    assert len({s.id for s in sbs}) == 1
    assert len(await client.list({"c": "1"})) == 1
    await sbs[0].close()


async def test_idempotency_key_is_per_api_key(
    client: AsyncSandboxClient, client_b: AsyncSandboxClient
) -> None:
    a = await client.create(idempotency_key="shared")
    b = await client_b.create(idempotency_key="shared")
    assert a.id != b.id
    await a.close()
    await b.close()


async def test_list_and_bulk_delete_by_labels(client: AsyncSandboxClient) -> None:
    red1 = await client.create(labels={"color": "red", "n": "1"})
    red2 = await client.create(labels={"color": "red", "n": "2"})
    blue = await client.create(labels={"color": "blue", "n": "1"})
    assert {s.id for s in await client.list({"color": "red"})} == {red1.id, red2.id}
    assert [s.id for s in await client.list({"color": "red", "n": "2"})] == [red2.id]
    assert {s.id for s in await client.list()} >= {red1.id, red2.id, blue.id}
    deleted = await client.bulk_delete(labels={"color": "red"})
    assert set(deleted) == {red1.id, red2.id}
    assert [s.id for s in await client.list()] == [blue.id]
    assert await client.bulk_delete(ids=[blue.id, "sb-doesnotexist"]) == [blue.id]
    assert await client.list() == []
    with pytest.raises(E.InvalidRequest):
        await client.bulk_delete()  # neither ids nor labels: refuses to delete everything


async def test_claim_while_pool_is_empty_waits_then_refills(make_server) -> None:
    server = await make_server(warm=1)
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        # More claims than warm sandboxes: the extra ones wait for the pool to create more.
        sbs = await asyncio.gather(*(client.create(labels={"w": "1"}) for _ in range(3)))
        assert len({s.id for s in sbs}) == 3
        for sb in sbs:
            assert (await sb.exec(["true"])).exit_code == 0
        stats = server.pool.stats()["default"]
        assert stats["claimed"] == 3 and stats["claims_total"] == 3
        # And the pool refills its warm set behind the claims.
        await wait_for(lambda: server.pool.stats()["default"]["warm"] >= 1, "warm refill")
        await client.bulk_delete(labels={"w": "1"})


async def test_claim_timeout_is_pool_exhausted(make_server) -> None:
    server = await make_server(warm=0, pool_kwargs={"claim_timeout": 60.0, "max_size": 1})
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        first = await client.create()
        with pytest.raises(E.PoolExhausted):
            await client.create(timeout=0.2)
        await first.close()
        second = await client.create()  # capacity came back
        await second.close()


async def test_per_claim_env_and_files(client: AsyncSandboxClient) -> None:
    sb = await client.create(
        env={"GREETING": "hello"},
        files={"data/in.txt": b"payload\n", "run.sh": (b"#!/bin/sh\necho script $GREETING\n", 0o755)},
    )
    r = await sb.exec(["sh", "-c", 'echo "$GREETING"; cat data/in.txt; ./run.sh'])
    assert r.exit_code == 0, r
    assert r.stdout == b"hello\npayload\nscript hello\n"
    # A per-exec env overrides the per-claim one.
    r = await sb.exec(["sh", "-c", 'echo "$GREETING"'], env={"GREETING": "bye"})
    assert r.stdout == b"bye\n"
    await sb.close()


async def test_files_roundtrip(client: AsyncSandboxClient) -> None:
    sb = await client.create()
    big = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB: several ReadFile chunks
    await sb.write_files({"a.txt": "text", "dir/big.bin": big})
    assert await sb.read_file("a.txt") == b"text"
    assert await sb.read_file("dir/big.bin") == big
    names = {e.name: e for e in await sb.list_dir(".")}
    assert "a.txt" in names and names["dir"].is_dir
    await sb.remove("dir", recursive=True)
    assert "dir" not in {e.name for e in await sb.list_dir(".")}
    with pytest.raises(E.NotFound):
        await sb.read_file("dir/big.bin")
    await sb.close()


async def test_ttl_expiry_deletes(make_server) -> None:
    server = await make_server(config=ServiceConfig())
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        keep = await client.create(labels={"ttl": "none"})
        short = await client.create(ttl_s=0.3, labels={"ttl": "short"})
        assert short.expires_at and short.expires_at > short.created_at
        pids_before = agent_pids_of(server)

        async def gone() -> bool:
            try:
                await client.get(short.id)
                return False
            except E.NotFound:
                return True

        await wait_for(gone, "TTL expiry")
        assert [s.id for s in await client.list()] == [keep.id]
        assert (await keep.exec(["true"])).exit_code == 0
        # The expired sandbox's agent is gone too, seen from the outside.
        await wait_for(
            lambda: not any(pid_running(p) for p in pids_before - agent_pids_of(server)),
            "expired agent to exit",
        )
        await keep.close()


async def test_default_ttl_applies(make_server) -> None:
    server = await make_server(config=ServiceConfig(default_ttl_s=0.3))
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        sb = await client.create()
        assert sb.expires_at

        async def gone() -> bool:
            return not await client.list()

        await wait_for(gone, "default TTL expiry")


async def test_stop_leaves_no_sandbox_behind(make_server) -> None:
    server = await make_server(warm=2)
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0, retries=0) as client:
        sbs = [await client.create(labels={"r": "1"}) for _ in range(2)]
        running = asyncio.ensure_future(sbs[0].exec(["sleep", "1000"]))
        pids = agent_pids_of(server)
        assert len(pids) >= 2 and all(pid_running(p) for p in pids)
        await server.stop(grace=0.5)
        # No agent of the stopped server survives (outside view: the pids themselves).
        await wait_for(lambda: not any(pid_running(p) for p in pids), "agents of the stopped server to exit")
        with pytest.raises(E.SandboxError):
            await running  # the in-flight exec ended with an infrastructure error, not a result
        with pytest.raises(E.BackendUnavailable):
            await client.list()

    # A new server does not know the old sandboxes.
    restarted = await make_server(warm=1)
    async with AsyncSandboxClient(restarted.address, KEY_A, timeout=60.0) as client:
        assert await client.list() == []
        with pytest.raises(E.NotFound):
            await client.get(sbs[0].id)
        sb = await client.create()
        assert (await sb.exec(["true"])).exit_code == 0
        await sb.close()


async def test_file_reads_are_ranges_bounded_end_to_end(client: AsyncSandboxClient) -> None:
    """Through the API server: ranges, the caller's bound (`TooLarge` rebuilt from the trailer,
    not a quota error), and a FIFO refused at once as the caller's error."""
    sb = await client.create()
    try:
        blob = bytes(range(256)) * 4096  # 1 MiB
        await sb.write_file("blob", blob)
        assert await sb.read_file("blob", offset=1000, length=5000) == blob[1000:6000]
        assert await sb.read_file("blob", max_bytes=len(blob)) == blob
        with pytest.raises(E.TooLarge) as err:
            await sb.read_file("blob", max_bytes=1000)
        assert not err.value.retryable
        assert (await sb.exec("mkfifo pipe")).exit_code == 0
        with pytest.raises(E.InvalidRequest, match="FIFO"):
            await asyncio.wait_for(sb.read_file("pipe"), 30)
        assert await sb.read_file("blob", length=3) == blob[:3]
    finally:
        await sb.close()

"""SandboxLease: provisioning starts at once, waits only at first use, reports the unhidden wait;
with an embedded pool and with the remote client; releases in every state; failures are raised."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sandboxes_rl.overlap import ClientProvider, PoolProvider, SandboxLease, as_provider, summarize
from server_helpers import KEY_A

import sandboxes
from sandboxes.client import AsyncSandboxClient


class GatedProvider:
    """Wraps a provider: acquire waits for `gate`, then sets `acquired` (test control, no sleeps)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.cancel_safe = inner.cancel_safe
        self.gate = asyncio.Event()
        self.acquired = asyncio.Event()

    async def acquire(self, **kwargs: Any) -> Any:
        await self.gate.wait()
        sb = await self.inner.acquire(**kwargs)
        self.acquired.set()
        return sb


async def test_provisioning_hidden_when_ready_before_first_use(make_pool) -> None:
    pool = await make_pool(warm=0)
    gated = GatedProvider(PoolProvider(pool))
    lease = SandboxLease(gated).start()
    assert lease.started and not lease.ready
    gated.gate.set()
    await gated.acquired.wait()  # "the first inference turn" outlasts provisioning
    sb = await lease.get()
    assert lease.ready_wait_s == 0.0
    assert lease.provision_s is not None and lease.provision_s > 0
    assert lease.head_start_s is not None and lease.head_start_s >= lease.provision_s
    r = await sb.exec(["python3", "-c", "print(6 * 7)"])
    assert r.stdout == b"42\n"
    assert (await lease.get()) is sb  # later gets are immediate and change nothing
    assert lease.ready_wait_s == 0.0
    await lease.release()
    assert pool.stats()[pool.default_template]["claimed"] == 0


async def test_unhidden_wait_is_reported(make_pool) -> None:
    pool = await make_pool(warm=0)
    gated = GatedProvider(PoolProvider(pool))
    lease = SandboxLease(gated).start()
    getter = asyncio.ensure_future(lease.get())  # first tool call before the sandbox is ready
    await asyncio.sleep(0)
    assert not getter.done()
    gated.gate.set()
    sb = await getter
    assert lease.ready_wait_s > 0
    assert lease.provision_s is not None and lease.ready_wait_s <= lease.provision_s
    m = lease.metrics()
    assert m["sandbox_ready_wait_s"] == lease.ready_wait_s and m["sandbox_provision_s"] == lease.provision_s
    assert (await sb.exec(["true"])).exit_code == 0
    await lease.release()
    s = summarize([lease])
    assert s.rollouts == 1 and 0.0 <= s.hidden_fraction < 1.0


async def test_release_while_provisioning_gives_nothing_back(make_pool) -> None:
    pool = await make_pool(warm=0)
    gated = GatedProvider(PoolProvider(pool))
    lease = SandboxLease(gated).start()
    await lease.release()  # a pool claim in flight is cancelled
    st = pool.stats()[pool.default_template]
    assert st["claimed"] == 0 and st["waiting"] == 0
    with pytest.raises(sandboxes.SandboxLost):
        await lease.get()
    await lease.release()  # idempotent


async def test_release_before_start_and_context_manager(make_pool) -> None:
    pool = await make_pool(warm=1)
    lease = SandboxLease(pool)
    await lease.release()
    async with SandboxLease(pool) as lease2:
        sb = await lease2.get()
        assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"
    assert pool.stats()[pool.default_template]["claimed"] == 0


async def test_provisioning_failure_is_raised_not_hidden(make_pool) -> None:
    pool = await make_pool(warm=0, max_size=1, claim_timeout=0.05)
    held = await pool.claim(timeout=60)
    try:
        lease = SandboxLease(pool).start()
        with pytest.raises(sandboxes.PoolExhausted):
            await lease.get()
        assert not lease.ready and lease.provision_s is None
        await lease.release()
    finally:
        await held.close()


async def test_lease_with_remote_client(server) -> None:
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        provider = as_provider(client)
        assert isinstance(provider, ClientProvider)
        lease = SandboxLease(client, env={"GREETING": "hi"}, labels={"run": "lease"}).start()
        sb = await lease.get()
        r = await sb.exec("echo $GREETING")
        assert r.stdout == b"hi\n"
        assert [s.id for s in await client.list({"run": "lease"})] == [sb.id]
        await lease.release()
        assert await client.list({"run": "lease"}) == []


async def test_remote_release_while_provisioning_deletes_the_sandbox(server) -> None:
    async with AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client:
        gated = GatedProvider(ClientProvider(client))
        lease = SandboxLease(gated, labels={"run": "early"}).start()
        release = asyncio.ensure_future(lease.release())
        await asyncio.sleep(0)
        assert not release.done()  # a remote create is not cancelled: it is awaited, then deleted
        gated.gate.set()
        await release
        assert gated.acquired.is_set()
        assert await client.list({"run": "early"}) == []


def test_as_provider_refuses_unknown_sources() -> None:
    with pytest.raises(sandboxes.InvalidRequest):
        as_provider(object())

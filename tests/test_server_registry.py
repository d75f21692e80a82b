"""The server registry: its timer heap (expiry order, early wake-up, lazily skipped deleted
entries), idle bounds (renewed by touches without heap pushes, not counted while paused, written
to the cluster before the other replicas would end a busy record), owners and labels, idempotency
keys, and the records it makes of the cluster's claims."""

from __future__ import annotations

import asyncio

from sandboxes.server.registry import Record, Registry


def rec(i: str, owner: str = "o", labels: dict | None = None) -> Record:
    return Record(id=i, sandbox=None, template="default", labels=labels or {}, owner=owner)


async def test_expiry_order_and_deleted_entries_are_skipped() -> None:
    expired: list[str] = []
    all_done = asyncio.Event()

    async def on_expire(r: Record) -> None:
        reg.pop(r.id)
        expired.append(r.id)
        if len(expired) == 2:
            all_done.set()

    reg = Registry(on_expire)
    reg.start()
    try:
        reg.add(rec("late"), ttl_s=0.2)
        reg.add(rec("never"), ttl_s=None)
        reg.add(rec("deleted"), ttl_s=0.05)
        # Pushed after a later deadline: must wake the reaper earlier than "late".
        reg.add(rec("early"), ttl_s=0.01)
        reg.pop("deleted")
        await asyncio.wait_for(all_done.wait(), 30)
        assert expired == ["early", "late"]
        assert [r.id for r in reg] == ["never"]
    finally:
        await reg.stop()


async def test_select_by_owner_and_labels() -> None:
    async def never(r: Record) -> None:
        raise AssertionError("no TTL here")

    reg = Registry(never)
    reg.add(rec("a", "alice", {"x": "1", "y": "2"}), None)
    reg.add(rec("b", "alice", {"x": "1"}), None)
    reg.add(rec("c", "bob", {"x": "1"}), None)
    assert {r.id for r in reg.select("alice", {"x": "1"})} == {"a", "b"}
    assert {r.id for r in reg.select("alice", {"x": "1", "y": "2"})} == {"a"}
    assert {r.id for r in reg.select(None, {"x": "1"})} == {"a", "b", "c"}
    assert reg.get("c", "alice") is None and reg.get("c", "bob") is not None


async def test_idempotency_keys_are_forgotten_on_failure_and_delete() -> None:
    async def never(r: Record) -> None:
        pass

    reg = Registry(never)
    loop = asyncio.get_running_loop()
    failed = loop.create_future()
    reg.track("o", "k1", failed)
    failed.set_exception(RuntimeError("claim failed"))
    failed.exception()
    await asyncio.sleep(0)  # let the done-callback run (it is scheduled by the loop)
    assert reg.pending("o", "k1") is None

    ok = loop.create_future()
    reg.track("o", "k2", ok)
    r = rec("x")
    r.idempotency_key = "k2"
    reg.add(r, None)
    ok.set_result(r)
    await asyncio.sleep(0)
    assert reg.pending("o", "k2") is ok
    reg.pop("x")
    assert reg.pending("o", "k2") is None


async def test_a_sandbox_deleted_here_is_not_served_again_from_a_stale_cluster_cache() -> None:
    """A replica that deleted a sandbox does not make a record of it again while its watch still
    shows the pod claimed (the watch sees the pod go a round trip later): a get right after a
    delete finds nothing. Once the watch reports the claim gone, the id is forgotten."""
    from sandboxes.backends.kubernetes.claims import Claim
    from sandboxes.server.replicated import SharedRecords

    claim = Claim(sandbox_id="sb-1", pod="sb-1", template="default", owner="o")

    class Cluster:  # the watch-fed cache, still showing the claim
        def lookup(self, sandbox_id: str) -> Claim | None:
            return claim if sandbox_id == claim.sandbox_id else None

        def handle(self, c: Claim) -> object:
            return object()

        def private(self, c: Claim) -> dict:
            return {}

    class Pool:
        def __init__(self) -> None:
            self.templates = {"default": object()}

        def attach(self, template: str, handle: object, **kw: object) -> object:
            return handle

    async def never(r: Record) -> None:
        raise AssertionError("no TTL here")

    reg = Registry(never)
    reg.shared = SharedRecords(reg, Pool(), Cluster(), gone=never, codecs={})  # type: ignore[arg-type]
    assert reg.get("sb-1", "o") is not None  # another replica's sandbox, served here
    reg.pop("sb-1")  # what a delete does, then:
    reg.shared.deleted("sb-1")
    assert reg.get("sb-1", "o") is None
    reg.shared.claim_gone("sb-1")
    assert reg.get("sb-1", "o") is not None  # a claim of that id seen again is a new one


async def test_an_idle_bound_is_renewed_by_touches_without_heap_pushes() -> None:
    """A record with an idle bound lives while it is touched (each touch an assignment: the heap
    keeps one entry, checked again when it comes due) and ends, as "idle", once it is not."""
    ended = asyncio.Event()

    async def on_expire(r: Record) -> None:
        reg.pop(r.id)
        ended.set()

    reg = Registry(on_expire)
    reg.start()
    try:
        r = rec("busy")
        r.idle_s = 0.3
        reg.add(r, ttl_s=60)
        loop = asyncio.get_running_loop()
        until = loop.time() + 1.0  # more than three idle bounds from its creation
        while loop.time() < until:
            for _ in range(100):
                reg.touch(r)
            assert len(reg._heap) == 1  # its one entry, however many touches
            await asyncio.sleep(0.05)
        assert reg.get("busy") is not None and not ended.is_set()
        await asyncio.wait_for(ended.wait(), 30)
        assert r.ended_by == "idle" and reg.get("busy") is None
    finally:
        await reg.stop()


async def test_the_idle_bound_does_not_count_while_paused() -> None:
    """A paused record's lifetime is its TTL alone; resuming is activity (`touch`)."""

    async def never(r: Record) -> None:
        raise AssertionError("not expired here")

    class Sandbox:
        paused = True

    reg = Registry(never)
    r = rec("p")
    r.sandbox = Sandbox()
    r.idle_s = 1.0
    r.active_at -= 3600
    reg.add(r, None)
    assert r.lifetime_end() is None and r.deadline is None
    reg.expire_at(r, r.active_at + 7200)
    assert r.lifetime_end() == (r.active_at + 7200, "ttl")
    Sandbox.paused = False
    reg.touch(r)
    end = r.lifetime_end()
    assert end is not None and end[1] == "idle" and end[0] == r.active_at + 1.0


async def test_activity_reaches_the_cluster_before_the_other_replicas_would_end_it() -> None:
    """On a shared registry a touch writes nothing itself: the reaper writes the record's
    activity once the other replicas, which count the idle bound from the activity the cluster
    knows, would end it soon (`PUBLISH_LEAD_S` ahead, at most half the bound), so each write
    lands before the previous one's idle deadline, and far fewer writes than touches."""
    import time

    from sandboxes.backends.kubernetes.claims import Claim
    from sandboxes.server.replicated import SharedRecords

    idle_s = 1.0
    claim = Claim(
        sandbox_id="sb-1", pod="sb-1", template="default", owner="o", idle_s=idle_s, active_at=time.time()
    )
    writes: list[tuple[float, float | None]] = []  # (when written, its activity before)
    known = [claim.active_at]

    class Cluster:
        def lookup(self, sandbox_id: str) -> Claim | None:
            return claim if sandbox_id == claim.sandbox_id else None

        def handle(self, c: Claim) -> object:
            return object()

        def private(self, c: Claim) -> dict:
            return {}

        async def update(self, c: Claim, private: object = None) -> None:
            writes.append((time.time(), known[-1]))
            known.append(c.active_at)

    class Pool:
        def __init__(self) -> None:
            self.templates = {"default": object()}

        def attach(self, template: str, handle: object, **kw: object) -> object:
            return handle

    async def never(r: Record) -> None:
        raise AssertionError("touched: not idle")

    reg = Registry(never)
    reg.shared = SharedRecords(reg, Pool(), Cluster(), gone=never, codecs={})  # type: ignore[arg-type]
    reg.start()
    try:
        r = reg.get("sb-1", "o")
        assert r is not None and r.idle_s == idle_s
        touches = 0
        loop = asyncio.get_running_loop()
        until = loop.time() + 3 * idle_s
        while loop.time() < until:
            reg.touch(r)
            touches += 1
            await asyncio.sleep(0.05)
        assert 2 <= len(writes) <= touches // 4
        for written, before in writes:
            assert before is not None and written < before + idle_s  # before the others end it
        assert reg.get("sb-1") is r
    finally:
        await reg.stop()
        await reg.shared.close()

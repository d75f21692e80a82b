"""Several replicas of the served release share its sandboxes through the cluster: any replica
serves any sandbox, a replica that dies or drains leaves its sandboxes to the others, and claims
and idempotency keys hold across replicas.

The cluster is EMULATED (`tests/kube_release.py`: the emulated API server and kubelet stand-in,
which runs each pod's real agent on this machine); the replicas are real `sandboxes serve`
processes talking to it and to the agents over real sockets. `test_kubernetes_e2e.py` runs on a
real cluster when KUBECONFIG is set.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from helm_chart import by_kind, render
from helpers import start_server_inside, wait_until
from kube_release import KEY, Release, release
from server_helpers import run_scenario

from sandboxes.backends.kubernetes.pods import pod_readiness
from sandboxes.errors import NotFound

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(600)]

# Short replica Leases and agent leases, so that a dead replica's sandboxes must be adopted (and
# their leases renewed by the adopter) within the test's time.
KUBE = {"replica_lease_s": 3.0}
TEMPLATES = {"default": {"lease_ttl_s": 6.0}}
PRE_STOP_S = 1.0  # the chart's preStop wait, shortened: endpoints drop the replica before SIGTERM


@pytest_asyncio.fixture(params=["process", "image"])
async def rel(request: Any, native: object, tmp_path: Path) -> AsyncIterator[Release]:
    """The release on the emulated cluster, its replicas `sandboxes serve` processes of this
    checkout, or containers of the built manager image run as the chart's Deployment says."""
    if request.param == "process":
        async with release(tmp_path) as r:
            r.write_config(KUBE, TEMPLATES)
            yield r
        return
    image = request.getfixturevalue("manager_image")
    docs = render({"manager": {"replicas": 2}, "templates": TEMPLATES})
    data = by_kind(docs, "ConfigMap")[0]["data"]
    async with release(tmp_path, image=image, deployment=by_kind(docs, "Deployment")[0]) as r:
        r.write_config({**json.loads(data["kube.json"]), **KUBE}, json.loads(data["templates.json"]))
        yield r


def _not_exec_path(request: str) -> bool:
    """Replica heartbeats (their Leases' renewals) are the only API traffic of a steady state."""
    return "/leases" in request


async def _serving(rel: Release) -> None:
    await rel.start("replica-a")
    await rel.start("replica-b")
    await wait_until(lambda: len(rel.pods()) >= 2 * rel.warm, timeout=60, what="both warm sets")


async def test_any_replica_serves_any_sandbox(rel: Release) -> None:
    await _serving(rel)
    a, b = rel.client("replica-a"), rel.client("replica-b")
    made = await a.create(labels={"job": "j1"}, env={"GREETING": "hi"}, timeout=60)
    # Created on A; everything else on B.
    sb = await b.get(made.id)
    r = await sb.exec(["sh", "-c", 'echo "$GREETING from $(hostname)"'])
    assert r.exit_code == 0 and r.stdout.startswith(b"hi from"), r
    await sb.write_files({"notes/a.txt": b"written through B"})
    assert await (await a.get(made.id)).read_file("notes/a.txt") == b"written through B"
    assert [s.id for s in await b.list(labels={"job": "j1"})] == [made.id]
    assert (await b.health())["sandboxes"] == 1
    await b.delete(made.id)

    async def gone_on_a() -> bool:
        try:
            await a.get(made.id)
        except NotFound:
            return True
        return False

    await wait_until(gone_on_a, timeout=10, what="the delete on B seen by A")
    assert made.id.lower() not in {p["metadata"]["name"] for p in rel.pods()}


async def test_a_port_of_a_sandbox_is_reached_through_any_replica(rel: Release) -> None:
    """A server inside a pod created through replica A is reached through replica B's ports
    listener with the token A handed out: B finds the record (and its token) in the cluster and
    forwards through the pod's agent; a wrong token is refused there too."""
    await _serving(rel)
    a, b = rel.client("replica-a"), rel.client("replica-b")
    ports_a, ports_b = (rel.replicas[n].ports_port for n in ("replica-a", "replica-b"))
    assert ports_a and ports_b
    port = 38623
    sb = await a.create(timeout=60)
    try:
        await sb.write_files({"page.txt": b"from the pod\n"})
        work = (await sb.info()).work_dir
        await start_server_inside(
            sb, f"cd {work} && exec python3 -m http.server {port} --bind 127.0.0.1", port
        )
        url = await sb.port_url(port)
        assert f":{ports_a}/" in url
        through_b = url.replace(f":{ports_a}/", f":{ports_b}/")
        async with aiohttp.ClientSession() as http:
            async with http.get(through_b + "page.txt") as r:
                assert (r.status, await r.read()) == (200, b"from the pod\n")
            forged = through_b.replace(f"/{port}/", f"/{port}/x")
            async with http.get(forged + "page.txt") as r:
                assert r.status == 401
        await b.delete(sb.id)
    finally:
        # The emulator's pods are processes of this host: a program left running outlives its
        # pod there (a real pod's end ends them all).
        await (await asyncio.create_subprocess_exec("pkill", "-f", f"http.server {port}")).wait()


async def test_the_exec_path_makes_no_api_request_with_two_replicas(rel: Release) -> None:
    await _serving(rel)
    made = [await rel.client().create(timeout=60) for _ in range(6)]
    await wait_until(lambda: len(rel.claimed()) == 6, timeout=10, what="six claims on their pods")
    await asyncio.sleep(1.0)  # the watches of both replicas have the claims
    # Every sandbox through both replicas, alternating as a Service would.
    handles = [await rel.client(name).get(m.id) for m in made for name in ("replica-a", "replica-b")]
    before = rel.api.request_count()
    for round_ in range(25):
        results = await asyncio.gather(*(h.exec(["true"]) for h in handles))
        assert all(r.exit_code == 0 for r in results), round_
    requests = [r for r in rel.api.requests_since(before) if not _not_exec_path(r)]
    assert requests == [], requests[:10]
    for m in made:
        await rel.client().delete(m.id)


async def test_idempotent_creates_agree_across_replicas(rel: Release) -> None:
    await _serving(rel)
    a, b = rel.client("replica-a"), rel.client("replica-b")
    for i in range(5):
        key = f"rollout-{i}"
        first, second = await asyncio.gather(
            a.create(idempotency_key=key, timeout=60), b.create(idempotency_key=key, timeout=60)
        )
        assert first.id == second.id, (key, first.id, second.id)
        again = await (a if i % 2 else b).create(idempotency_key=key, timeout=60)
        assert again.id == first.id
    await wait_until(lambda: len(rel.claimed()) == 5, timeout=10, what="one sandbox per key")
    for s in await a.list():
        await s.close()
    await wait_until(lambda: not rel.claimed(), timeout=10, what="deleted")


async def test_a_killed_replicas_sandboxes_keep_serving(rel: Release) -> None:
    """SIGKILL of one replica with 100 claimed sandboxes: every one keeps serving through the
    other (no NotFound, no lost file), is adopted by it (its agent's lease renewed past the
    lease's length), and none is left once their owner deleted them."""
    await _serving(rel)
    before = rel.api.request_count()
    made = await asyncio.gather(*(rel.client().create(ttl_s=600, timeout=120) for _ in range(100)))
    names = {m.id.lower() for m in made}
    claim_writes = sum(
        r.startswith("PATCH ") and r.rpartition("/pods/")[2] in names for r in rel.api.requests_since(before)
    )
    assert claim_writes == 100, claim_writes  # one optimistic write per claim (its TTL in it), no conflict
    await asyncio.gather(*(m.write_files({"id.txt": m.id.encode()}) for m in made))
    owner_a = rel.owner_of("replica-a")
    held_by_a = {n for n, o in rel.claimed().items() if o == owner_a}
    assert 30 <= len(held_by_a) <= 70, len(held_by_a)
    loop = asyncio.get_running_loop()
    killed = loop.time()
    await rel.kill("replica-a")
    b = rel.client("replica-b")

    async def all_serve() -> None:
        handles = [await b.get(m.id) for m in made]
        texts = await asyncio.gather(*(h.read_file("id.txt") for h in handles))
        assert texts == [m.id.encode() for m in made]
        runs = await asyncio.gather(*(h.exec(["cat", "id.txt"]) for h in handles))
        assert [r.stdout for r in runs] == texts

    await all_serve()  # at once, before any adoption
    served = loop.time()
    owner_b = rel.owner_of("replica-b")
    await wait_until(
        lambda: set(rel.claimed().values()) == {owner_b}, timeout=30, what="B adopted A's sandboxes"
    )
    # What the loss cost, printed for `pytest -s -k killed` (docs/kubernetes.md).
    print(
        f"\nreplica loss [{rel.image and 'image' or 'process'}]: {len(held_by_a)} of its sandboxes, "
        f"all 100 served through the other {served - killed:.2f} s after the kill (0 failed), "
        f"adopted after {loop.time() - killed:.2f} s (replica Lease {KUBE['replica_lease_s']:g} s)"
    )
    await asyncio.sleep(2 * TEMPLATES["default"]["lease_ttl_s"])  # only B renews their leases now
    await all_serve()
    await asyncio.gather(*(b.delete(m.id) for m in made))
    await wait_until(lambda: not rel.claimed(), timeout=30, what="every sandbox deleted")
    # A's warm pods went with A: only B's warm set is left.
    await wait_until(
        lambda: {p["metadata"]["labels"]["sandboxes.io/owner"] for p in rel.pods()} == {owner_b},
        timeout=30,
        what="the dead replica's warm pods deleted",
    )
    await rel.stop("replica-b")
    await wait_until(lambda: not rel.pods(), timeout=30, what="no pod left")
    assert rel.api.objects_of("secrets") == []


async def test_a_rolling_restart_fails_no_exec(rel: Release) -> None:
    """Both replicas restarted one at a time (out of the endpoints, SIGTERM, drain; a new one
    in) while execs run without pause on sandboxes claimed through both: none fails."""
    await _serving(rel)
    made = [await rel.client().create(timeout=60) for _ in range(8)]
    failures: list[BaseException] = []
    done = 0
    stop = asyncio.Event()

    async def load() -> None:
        nonlocal done
        client = rel.service_client()  # its own connection, as each rollout worker has
        i = 0
        while not stop.is_set():
            m = made[i % len(made)]
            i += 1
            try:
                sb = await client.get(m.id)
                r = await sb.exec(["sh", "-c", "echo ok"], timeout=30)
                assert r.stdout == b"ok\n", r
                done += 1
            except Exception as e:  # noqa: BLE001 - counted, then asserted on
                failures.append(e)

    workers = [asyncio.create_task(load()) for _ in range(4)]
    try:
        for old, new in (("replica-a", "replica-a2"), ("replica-b", "replica-b2")):
            await rel.start(new)
            await rel.stop(old, pre_stop_s=PRE_STOP_S)
            await asyncio.sleep(1.0)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    assert not failures, failures[:5]
    assert done > 100, done
    survivors = {rel.owner_of("replica-a2"), rel.owner_of("replica-b2")}
    assert set(rel.claimed().values()) <= survivors and len(rel.claimed()) == len(made)
    for m in made:
        await rel.client().delete(m.id)


async def test_concurrent_creates_across_replicas_hand_each_sandbox_out_once(
    native: object, tmp_path: Path
) -> None:
    """1,000 creates at once, through two replicas, against a warm set of 500: every idempotency
    key (each sent to both replicas) gets one sandbox, the same through either, and no sandbox
    is handed out twice."""
    async with release(tmp_path, warm=250) as rel:
        rel.write_config({}, {"default": {}})  # the default Leases: under this load, what users get
        await rel.start("replica-a")
        await rel.start("replica-b")
        await wait_until(lambda: len(rel.pods()) >= 500, timeout=300, what="a warm set of 500")
        a, b = rel.client("replica-a"), rel.client("replica-b")
        keys = [f"rollout-{i}" for i in range(500)]
        made = await asyncio.gather(*(c.create(idempotency_key=k, timeout=300) for k in keys for c in (a, b)))
        pairs = list(zip(made[0::2], made[1::2], strict=True))
        assert all(x.id == y.id for x, y in pairs), [(x.id, y.id) for x, y in pairs if x.id != y.id][:5]
        ids = {x.id for x, _ in pairs}
        assert len(ids) == 500
        await wait_until(lambda: len(rel.claimed()) == 500, timeout=60, what="the losers' pods released")
        assert set(rel.claimed()) == {i.lower() for i in ids}
        gate = asyncio.Semaphore(50)  # the clean-up, not what is tested: within the clients' deadline

        async def delete(i: str) -> None:
            async with gate:
                await rel.client().delete(i)

        await asyncio.gather(*(delete(i) for i in ids))


async def test_the_prime_sdk_uses_a_sandbox_through_another_replica(native: object, tmp_path: Path) -> None:
    """The unmodified Prime SDK makes a sandbox through one replica's HTTP API, another SDK
    process uses it (gets, lists, runs a command, deletes) through the other's."""
    async with release(tmp_path) as rel:
        rel.write_config(KUBE, TEMPLATES)
        await _serving(rel)

        async def sdk(replica: str, *args: str) -> dict[str, Any]:
            home = tmp_path / f"home-{replica}"
            home.mkdir(exist_ok=True)
            env = {
                "HOME": str(home),
                "PRIME_API_BASE_URL": f"http://127.0.0.1:{rel.replicas[replica].http_port}",
                "PRIME_API_KEY": KEY,
            }
            return await run_scenario("prime-current", "prime_scenarios.py", list(args), env, timeout=300)

        made = await sdk("replica-a", "make")
        assert made["wrote"]["exit_code"] == 0, made
        used = await sdk("replica-b", "use", made["id"])
        assert used["status"] == "RUNNING" and used["listed"], used
        assert used["read"] == {"stdout": "made here\n", "stderr": "", "exit_code": 0}, used
        assert used["after"] == {"ok": "TERMINATED"}, used  # the platform's tombstone of a deleted one
        await wait_until(lambda: not rel.claimed(), timeout=10, what="deleted")


async def test_the_e2b_sdk_uses_a_sandbox_through_another_replica(native: object, tmp_path: Path) -> None:
    """The unmodified e2b SDK creates a sandbox through one replica; another SDK process connects
    to it, runs a command, writes and reads a file and kills it through the other."""
    async with release(tmp_path) as rel:
        rel.write_config(KUBE, TEMPLATES)
        await _serving(rel)

        async def sdk(replica: str, *args: str) -> dict[str, Any]:
            url = f"http://127.0.0.1:{rel.replicas[replica].http_port}"
            env = {"E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": KEY}
            return await run_scenario("e2b", "e2b_scenarios.py", list(args), env, timeout=300)

        made = await sdk("replica-a", "create_one")
        used = await sdk("replica-b", "use_elsewhere", made["id"])
        assert used["run"]["stdout"] == "hi\n" and used["run"]["exit_code"] == 0, used
        assert used["read"] == "written here" and used["listed"] and used["kill"] is True, used
        await wait_until(lambda: not rel.claimed(), timeout=10, what="killed")


async def test_http_surfaces_find_a_sandbox_another_replica_made_before_their_watch_does(
    native: object, tmp_path: Path
) -> None:
    """Replica B serves, through each HTTP surface, a sandbox made through A a moment before,
    while B's watch has not yet reported it (the EMULATED API server holds every watch event
    back): a surface that does not know an id asks the API server before answering 404."""
    async with release(tmp_path) as rel:
        rel.write_config(KUBE, TEMPLATES)
        await _serving(rel)
        a, b = (f"http://127.0.0.1:{rel.replicas[r].http_port}" for r in ("replica-a", "replica-b"))
        await wait_until(
            lambda: all(pod_readiness(p)[0] == "ready" for p in rel.pods()),
            timeout=60,
            what="warm pods ready",
        )
        await asyncio.sleep(1.0)  # for both replicas' watches to report them (no lag yet)
        rel.api.watch_lag_s = 30.0
        async with aiohttp.ClientSession() as http:
            key = {"X-API-KEY": KEY}
            r = await http.post(f"{a}/v2/sandboxes", headers=key, json={"templateID": "base"})
            assert r.status == 201, await r.text()
            made = await r.json()
            sid = made["sandboxID"]
            r = await http.get(f"{b}/sandboxes/{sid}", headers=key)
            assert r.status == 200 and (await r.json())["sandboxID"] == sid
            envd = {
                "E2b-Sandbox-Id": sid,
                "E2b-Sandbox-Port": "49983",
                "X-Access-Token": made["envdAccessToken"],
            }
            r = await http.get(f"{b}/health", headers=envd)
            assert r.status < 300, await r.text()

            auth = {"Authorization": f"Bearer {KEY}"}
            r = await http.post(
                f"{a}/api/v1/sandbox", headers=auth, json={"name": "n", "docker_image": "default"}
            )
            assert r.status == 200, await r.text()
            created = await r.json()
            pid, gw = created["id"], created["gatewayAuth"]
            r = await http.get(f"{b}/api/v1/sandbox/{pid}", headers=auth)
            assert r.status == 200 and (await r.json())["id"] == pid
            gateway = f"{b}/gateway/{gw['user_ns']}/{gw['job_id']}"
            tok = {"Authorization": f"Bearer {gw['token']}"}
            # An emulated pod's /tmp is this host's: the file goes with the test.
            path = Path("/tmp") / f"{pid}-through-b"
            try:
                form = aiohttp.FormData()
                form.add_field("file", b"through b", filename="f")
                r = await http.post(f"{gateway}/upload", params={"path": str(path)}, data=form, headers=tok)
                assert r.status == 200, await r.text()
                r = await http.get(f"{gateway}/read-file", params={"path": str(path)}, headers=tok)
                assert r.status == 200 and "through b" in await r.text(), await r.text()
            finally:
                path.unlink(missing_ok=True)
            assert len(rel.claimed()) == 2
            rel.api.watch_lag_s = 0.0
            r = await http.delete(f"{b}/sandboxes/{sid}", headers=key)
            assert r.status == 204, await r.text()
            r = await http.delete(f"{b}/api/v1/sandbox/{pid}", headers=auth)
            assert r.status == 200, await r.text()
        await wait_until(lambda: not rel.claimed(), timeout=10, what="deleted")

"""k8s: the kubernetes backend at scale against an EMULATED control plane (a simulation).

No real cluster: the API server is `sandboxes_testing.kube_emulator` (kmock) with an injected
per-request latency (uniform 5-20 ms: a loaded but healthy API server), run in a process of its own
together with the fake kubelet, so the emulator's CPU is not charged to the manager's event loop.
For scale the fake kubelet points all pods at a few real agents (`SHARED_AGENTS`, one shared
token): every pod still costs its real API traffic (POST pod, POST secret, the kubelet's status
PATCH, watch events, DELETE) and its own gRPC readiness check and lease renewals, but not a
process of its own. Kubelet-side work (image pull, container start: ~1-3 s on real nodes) is
*not* simulated; see docs/kubernetes.md for what that adds.

Measured:
- prewarm: wall time until `PODS` pods are warm, from an empty pool;
- claim latency of `CLAIMS` concurrent claims on the warm pool (each claim, one exec, release):
  the first `PODS` are served from the warm set, the rest wait for pods created on demand;
- API requests per sandbox, and API requests while execs run on warm pods (must be zero).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request

from bench.common import Report, Stats

PODS = 500
CLAIMS = 1_000
SHARED_AGENTS = 8
LATENCY_MS = (5.0, 20.0)
TOKEN = "bench-shared-token-0123456789abcdef"


def _stats(url: str) -> int:
    with urllib.request.urlopen(f"{url}/_emulator/stats", timeout=10) as r:
        return int(json.load(r)["requests"])


def _start_emulator() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandboxes_testing.kube_emulator",
            "--latency-ms",
            *map(str, LATENCY_MS),
            "--shared-agents",
            str(SHARED_AGENTS),
            "--shared-token",
            TOKEN,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("ready "):
        proc.kill()
        raise RuntimeError(f"emulator did not start: {line!r}")
    return proc, line.split()[1]


async def _run(url: str, pods: int, claims: int) -> dict:
    import sandboxes
    from sandboxes.backends.kubernetes import KubeConfig, KubernetesBackend

    cfg = KubeConfig(
        api_url=url,
        image="sandboxes-sandbox:bench",
        identity="bench",
        port_from_annotation=True,
        create_concurrency=200,
        api_concurrency=64,
    )
    be = KubernetesBackend(cfg, token_factory=lambda: TOKEN)
    template = sandboxes.Template(backend="kubernetes", lease_ttl_s=60)
    out: dict = {}
    loop = asyncio.get_running_loop()
    req0 = await asyncio.to_thread(_stats, url)
    cpu0 = time.process_time()
    t0 = loop.time()
    pool = sandboxes.Pool(backend=be, warm=pods, template=template, claim_timeout=300)
    await pool.start()
    try:
        while pool.stats()["default"]["warm"] < pods:  # measuring: sample the pool every 5 ms
            await asyncio.sleep(0.005)
        out["prewarm_s"] = loop.time() - t0
        out["manager_cpu_ms_per_pod"] = (time.process_time() - cpu0) * 1000 / pods
        req1 = await asyncio.to_thread(_stats, url)
        out["api_requests_per_sandbox"] = (req1 - req0 - 1) / pods

        # Execs on warm pods: zero API requests.
        sbs = [await pool.claim() for _ in range(16)]
        while pool.stats()["default"]["creating"] or pool.stats()["default"]["warm"] < pods:
            await asyncio.sleep(0.005)
        r0 = await asyncio.to_thread(_stats, url)
        sem = asyncio.Semaphore(100)

        async def one_exec(i: int) -> None:
            async with sem:
                await sbs[i % len(sbs)].exec(["/bin/true"])

        await asyncio.gather(*(one_exec(i) for i in range(1000)))
        out["api_requests_during_1000_execs"] = await asyncio.to_thread(_stats, url) - r0 - 1
        for sb in sbs:
            await sb.close()
        while pool.stats()["default"]["creating"] or pool.stats()["default"]["warm"] < pods:
            await asyncio.sleep(0.005)

        # 1,000 concurrent claims on `pods` warm pods.
        lat: list[float] = []
        errors = 0

        async def one_claim() -> None:
            nonlocal errors
            t = loop.time()
            try:
                sb = await pool.claim()
            except sandboxes.SandboxError:
                errors += 1
                return
            lat.append(loop.time() - t)
            try:
                await sb.exec(["/bin/true"])
            finally:
                await sb.close()

        t1 = loop.time()
        cpu1 = time.process_time()
        await asyncio.gather(*(one_claim() for _ in range(claims)))
        out["claims_wall_s"] = loop.time() - t1
        out["manager_cpu_busy"] = (time.process_time() - cpu1) / out["claims_wall_s"]
        out["claim_latencies"] = lat
        out["claim_errors"] = errors
        out["watch_restarts"] = be.watch_restarts
    finally:
        await pool.close()
    return out


def run(pods: int = PODS, claims: int = CLAIMS) -> Report:
    rep = Report("k8s")
    proc, url = _start_emulator()
    try:
        res = asyncio.run(_run(url, pods, claims))
    finally:
        proc.terminate()
        proc.wait(30)
    lat = sorted(res.pop("claim_latencies"))
    warm_hits = lat[: min(pods, len(lat))]
    waited = lat[min(pods, len(lat)) :]
    rep.add(Stats.of(f"claim, {claims} concurrent on {pods} warm", lat))
    rep.add(Stats.of("  the fastest (warm hits)", warm_hits))
    if waited:
        rep.add(Stats.of("  the rest (pods created on demand)", waited))
    rep.extra.update(
        {
            "pods": pods,
            "prewarm_s": round(res["prewarm_s"], 3),
            "pods_per_s": round(pods / res["prewarm_s"], 1),
            "api_latency_ms": list(LATENCY_MS),
            "shared_agents": SHARED_AGENTS,
            "api_requests_per_sandbox": round(res["api_requests_per_sandbox"], 2),
            "api_requests_during_1000_execs": res["api_requests_during_1000_execs"],
            "claims": claims,
            "claims_wall_s": round(res["claims_wall_s"], 3),
            "manager_cpu_ms_per_pod_prewarm": round(res["manager_cpu_ms_per_pod"], 2),
            "manager_cpu_busy_during_claims": round(res["manager_cpu_busy"], 2),
            "claim_errors": res["claim_errors"],
            "watch_restarts": res["watch_restarts"],
        }
    )
    rep.headline(
        "kubernetes (emulated API server): API requests during 1,000 execs on warm pods",
        f"{res['api_requests_during_1000_execs']}; {pods} pods prewarmed in {res['prewarm_s']:.1f} s, "
        f"{res['api_requests_per_sandbox']:.1f} requests per sandbox",
    )
    return rep


if __name__ == "__main__":
    r = run(*(int(a) for a in sys.argv[1:3]))
    r.print()
    print(f"saved {r.save()}")

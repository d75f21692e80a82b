"""Docker backend benchmarks, measured side by side in one run:

- cold create: `DockerBackend.create` (container created, started, the agent's root built from
  the image in the host's cache, agent ready) one at a time, next to the Docker API's own floor
  (create + start of a container of the same image running `sleep`, no readiness) and the local
  backend's cold create; the first use of an image (saved from the engine and unpacked into the
  cache, once per image) on its own row;
- warm claim: claims served from a warm docker pool (8 concurrent claimers);
- exec of /bin/true in one container: the direct gRPC path (`Sandbox.exec` -> agent over the
  bind-mounted unix socket) against `docker exec` of the same command through the Docker API
  (`container.exec_run`, as the sandbox uid), interleaved call by call.

Needs the image of `make images` (`sandboxes-sandbox:latest`) and a Docker engine.
"""

from __future__ import annotations

import asyncio
import time

from bench.common import Report, Stats
from bench.pool_bench import cold_creates as local_cold_creates
from bench.pool_bench import warm_claims

IMAGE = "sandboxes-sandbox:latest"


def first_use_of_an_image() -> float:
    """Save the image from the engine and unpack it, into a cache of its own (removed after)."""
    import tempfile
    from pathlib import Path

    from sandboxes.backends import images

    with tempfile.TemporaryDirectory(dir="/var/tmp") as root:
        t = time.perf_counter()
        images.resolve(IMAGE, root=Path(root))
        return time.perf_counter() - t


async def cold_creates(n: int) -> list[float]:
    from sandboxes.backends import images
    from sandboxes.backends.docker import DockerBackend
    from sandboxes.templates import Template

    backend = DockerBackend()
    tmpl = Template(backend="docker", image=IMAGE)
    out = []
    try:
        await backend.reap_orphans()  # connects to the engine outside the measurement
        await asyncio.to_thread(images.resolve, IMAGE)  # the image's first use is its own row
        for i in range(n):
            t = time.perf_counter()
            h = await backend.create(tmpl, f"bench-{i}")
            out.append(time.perf_counter() - t)
            await backend.destroy(h)
    finally:
        await backend.close()
    return out


def docker_api_floor(n: int) -> list[float]:
    """create + start of a plain container of the same image (what any docker backend pays)."""
    import docker

    api = docker.from_env().api
    out = []
    for _ in range(n):
        t = time.perf_counter()
        c = api.create_container(
            IMAGE,
            entrypoint=["sleep", "600"],
            host_config=api.create_host_config(network_mode="none", auto_remove=False),
        )
        api.start(c["Id"])
        out.append(time.perf_counter() - t)
        api.remove_container(c["Id"], force=True)
    return out


async def exec_grpc_vs_docker_exec(n: int) -> tuple[list[float], list[float]]:
    import docker

    import sandboxes

    grpc_s, dexec_s = [], []
    client = docker.from_env()
    async with sandboxes.Pool(backend="docker", image=IMAGE, warm=0) as pool, pool.sandbox() as sb:
        container = client.containers.get(sb.handle.backend_data.container_id)
        for _ in range(20):  # warm both paths up
            await sb.exec(["/bin/true"])
            container.exec_run(["/bin/true"], user="65534:65534")
        for _ in range(n):
            t = time.perf_counter()
            r = await sb.exec(["/bin/true"])
            grpc_s.append(time.perf_counter() - t)
            assert r.exit_code == 0
            t = time.perf_counter()
            # Blocking on purpose: the baseline gets the loop's thread to itself.
            res = container.exec_run(["/bin/true"], user="65534:65534")
            dexec_s.append(time.perf_counter() - t)
            # None: exec_inspect answered before the engine recorded the exit (a known race).
            assert res.exit_code in (0, None), res
    client.close()
    return grpc_s, dexec_s


def run() -> Report:
    rep = Report("docker")
    grpc_s, dexec_s = asyncio.run(exec_grpc_vs_docker_exec(300))
    g = rep.add(Stats.of("exec /bin/true, direct gRPC (agent socket)", grpc_s))
    d = rep.add(Stats.of("exec /bin/true, docker exec (Docker API)", dexec_s))
    rep.ratios["docker exec / direct gRPC (median)"] = d.median_ms / g.median_ms
    rep.ratios["docker exec / direct gRPC (p99)"] = d.p99_ms / g.p99_ms
    rep.headline(
        "docker: exec `/bin/true` over the agent's socket vs `docker exec` (target 10x)",
        g,
        d,
        "docker exec / direct gRPC (median)",
    )

    cold = rep.add(Stats.of("cold create, docker backend (ready)", asyncio.run(cold_creates(30))))
    floor = rep.add(Stats.of("docker create+start, no agent (API floor)", docker_api_floor(30)))
    local = rep.add(Stats.of("cold create, local backend", asyncio.run(local_cold_creates(30))))
    rep.ratios["docker cold create / API floor (median)"] = cold.median_ms / floor.median_ms
    rep.ratios["docker cold create / local cold create (median)"] = cold.median_ms / local.median_ms
    rep.ratios["docker cold create median / 1 s target"] = cold.median_ms / 1000.0
    rep.headline(
        "docker: cold create, ready (target 1 s)", cold, floor, "docker cold create / API floor (median)"
    )

    rep.add(
        Stats.of(
            "first use of an image: save from the engine + unpack (once per image)", [first_use_of_an_image()]
        )
    )
    warm = rep.add(
        Stats.of(
            "warm claim, docker pool (8 concurrent)",
            asyncio.run(warm_claims(8, 4, backend="docker", image=IMAGE)),
        )
    )
    rep.ratios["docker cold create / warm claim (median)"] = cold.median_ms / warm.median_ms
    return rep


if __name__ == "__main__":
    r = run()
    r.print()
    print(f"saved {r.save()}")

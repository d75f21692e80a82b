"""Pause and resume, against what a user of containers would write, in the same run:

- pause, then resume, of a sandbox whose program spins (a busy loop left running after its
  exec), through the embedded pool (`Sandbox.pause` / `resume`: the lease made to outlast the
  pause, then the backend's freeze), on the local backend (its freezer cgroup) and on the docker
  backend (the engine's pause), against the Docker engine's own pause / unpause of a plain
  container of the same image spinning the same loop (the docker SDK's API calls: no lease, no
  agent);
- the CPU the machine spends in a second while the spinning sandbox is paused, against a second
  while it runs (local backend): a paused sandbox uses none.

Needs a Docker engine and the sandbox image (`make images`).
"""

from __future__ import annotations

import asyncio
import time

from bench.cgroup_cpu import machine_cpu_s
from bench.common import Report, Stats

N = 30
SPIN = "(while :; do :; done) >/dev/null 2>&1 &"
IMAGE = "sandboxes-sandbox:latest"


async def ours(backend: str) -> tuple[list[float], list[float], float, float]:
    """Pause and resume times of one spinning sandbox; on local, the machine's CPU seconds in a
    second paused and in a second running."""
    import sandboxes

    kw = {"image": IMAGE} if backend == "docker" else {}
    pauses, resumes = [], []
    async with sandboxes.Pool(backend=backend, warm=0, **kw) as pool, pool.sandbox() as sb:
        r = await sb.exec(["/bin/sh", "-c", SPIN], keep_descendants=True)
        assert r.exit_code == 0, r
        for _ in range(N):
            t = time.perf_counter()
            assert await sb.pause()
            pauses.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert await sb.resume()
            resumes.append(time.perf_counter() - t)
        running = await _cpu_in_a_second()
        await sb.pause()
        paused = await _cpu_in_a_second()
        await sb.resume()
    return pauses, resumes, paused, running


async def _cpu_in_a_second() -> float:
    c = machine_cpu_s()
    await asyncio.sleep(1.0)
    return machine_cpu_s() - c


def engine() -> tuple[list[float], list[float]]:
    """The engine's pause / unpause of a plain container spinning the same loop."""
    import docker

    api = docker.from_env().api
    c = api.create_container(
        IMAGE,
        entrypoint=["/bin/sh", "-c", "while :; do :; done"],
        host_config=api.create_host_config(network_mode="none"),
    )
    pauses, resumes = [], []
    try:
        api.start(c["Id"])
        for _ in range(N):
            t = time.perf_counter()
            api.pause(c["Id"])
            pauses.append(time.perf_counter() - t)
            t = time.perf_counter()
            api.unpause(c["Id"])
            resumes.append(time.perf_counter() - t)
    finally:
        api.remove_container(c["Id"], force=True)
    return pauses, resumes


def run() -> Report:
    rep = Report("pause")
    local_p, local_r, paused_cpu, running_cpu = asyncio.run(ours("local"))
    docker_p, docker_r, _, _ = asyncio.run(ours("docker"))
    engine_p, engine_r = engine()
    s = {
        "local pause": rep.add(Stats.of("pause, local backend", local_p)),
        "local resume": rep.add(Stats.of("resume, local backend", local_r)),
        "docker pause": rep.add(Stats.of("pause, docker backend", docker_p)),
        "docker resume": rep.add(Stats.of("resume, docker backend", docker_r)),
        "engine pause": rep.add(Stats.of("docker engine pause of a container", engine_p)),
        "engine resume": rep.add(Stats.of("docker engine unpause of a container", engine_r)),
    }
    for kind in ("pause", "resume"):
        for backend in ("local", "docker"):
            rep.ratios[f"{kind}, {backend} backend / docker engine"] = (
                s[f"{backend} {kind}"].median_ms / s[f"engine {kind}"].median_ms
            )
    rep.extra["machine CPU ms in a second, the spinning sandbox running"] = round(running_cpu * 1000)
    rep.extra["machine CPU ms in a second, the same sandbox paused"] = round(paused_cpu * 1000)
    rep.ratios["CPU paused / running"] = paused_cpu / running_cpu
    rep.headline(
        "Pause + resume of a busy sandbox (local backend) vs the Docker engine's pause + unpause",
        f"{s['local pause'].median_ms:.2g} + {s['local resume'].median_ms:.2g} ms median",
        f"{s['engine pause'].median_ms:.3g} + {s['engine resume'].median_ms:.3g} ms median",
        "pause, local backend / docker engine",
    )
    return rep

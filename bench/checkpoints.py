"""Checkpoints and forks, each against its baseline in the same run, on the docker backend with the
dev image (a root sandbox, as an agent's is):

- checkpoint of a sandbox with 200 MB of changes (`STATE_MB` files of 1 MB under /root/state and
  a `pip`-style tree of small files) against `docker commit` of a container of the same image with
  the same changes: wall, and CPU (ours: this process, which unpacks the layer, plus the
  sandbox's container; docker's: dockerd and containerd);
- fork into 16 sandboxes, each having run its first command, against 16 plain creates of the
  image, each having run its first command (both: one call per sandbox in flight at once);
- time to first command (claim + `/bin/true`) of a sandbox made from the checkpoint against one
  made from the image, one at a time;
- memory and disk on the host of 16 forks of the 200 MB state against one sandbox holding it:
  the containers' memory (docker's stats: what their own disks hold) plus the layer on disk.

Needs the dev image (`make images`, `deploy/docker/build_images.sh --dev`) and a Docker engine.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import Report, Stats

IMAGE = "sandboxes-dev:bookworm"
STATE_MB = 200
FORKS = 16
# 200 files of 1 MB of random bytes, and 2,000 small files (what a `pip install` leaves).
MAKE_STATE = (
    "mkdir -p /root/state /root/tree && "
    f"for i in $(seq 1 {STATE_MB}); do head -c 1048576 /dev/urandom > /root/state/f$i; done && "
    "for i in $(seq 1 2000); do echo $i > /root/tree/m$i.py; done"
)


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _engine_pids() -> list[int]:
    out = subprocess.run(
        ["pgrep", "-x", "dockerd|containerd"], check=False, capture_output=True, text=True
    ).stdout
    return [int(p) for p in out.split()]


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _cgroup_file(container_id: str, v2: str, v1: str) -> Path | None:
    """A file of a container's cgroup: v2 (systemd or cgroupfs driver) or v1 (`controller/file`)."""
    controller, name = v1.split("/")
    for p in (
        f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/{v2}",
        f"/sys/fs/cgroup/docker/{container_id}/{v2}",
        f"/sys/fs/cgroup/{controller}/docker/{container_id}/{name}",
        f"/sys/fs/cgroup/{controller}/system.slice/docker-{container_id}.scope/{name}",
    ):
        if os.path.exists(p):
            return Path(p)
    return None


def _container_cpu(container_id: str) -> float:
    """CPU seconds of a container's cgroup."""
    p = _cgroup_file(container_id, "cpu.stat", "cpuacct/cpuacct.usage")
    if p is None:
        return 0.0
    if p.name == "cpuacct.usage":
        return int(p.read_text()) / 1e9
    for line in p.read_text().splitlines():
        if line.startswith("usage_usec"):
            return int(line.split()[1]) / 1e6
    return 0.0


def _container_memory(api, container_id: str) -> int:
    """Bytes of memory a container's cgroup holds (its tmpfs disks included)."""
    p = _cgroup_file(container_id, "memory.current", "memory/memory.usage_in_bytes")
    return int(p.read_text()) if p is not None else 0


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def docker_commits(n: int) -> tuple[list[float], list[float]]:
    """`docker commit` of a container of IMAGE holding the same changes: wall and engine CPU."""
    import docker

    api = docker.from_env().api
    walls, cpus = [], []
    for _ in range(n):
        c = api.create_container(
            IMAGE, command=["sleep", "600"], host_config=api.create_host_config(network_mode="none")
        )
        api.start(c["Id"])
        try:
            e = api.exec_create(c["Id"], ["/bin/sh", "-c", MAKE_STATE])
            api.exec_start(e["Id"])
            pids = _engine_pids()
            cpu0 = sum(_cpu_of(p) for p in pids)
            t = time.perf_counter()
            image = api.commit(c["Id"])
            walls.append(time.perf_counter() - t)
            cpus.append(sum(_cpu_of(p) for p in pids) - cpu0)
            api.remove_image(image["Id"], force=True)
        finally:
            api.remove_container(c["Id"], force=True)
    return walls, cpus


async def measure(n: int) -> dict:
    import docker

    import sandboxes
    from sandboxes import Template

    api = docker.from_env().api
    root = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="bench-cps-"))
    t = Template(name="dev", backend="docker", image=IMAGE, user="root", warm=0, agent_mount=True)
    res: dict = {
        "checkpoint": [],
        "checkpoint_cpu": [],
        "fork": [],
        "creates": [],
        "first_cp": [],
        "first_image": [],
    }
    try:
        async with (
            sandboxes.Pool(backend="docker", templates={"dev": t}, warm=0, checkpoint_dir=root) as pool,
            pool.sandbox("dev") as sb,
        ):
            r = await sb.exec(["/bin/sh", "-c", MAKE_STATE], timeout=300)
            assert r.exit_code == 0, r
            cid = sb.handle.backend_data.container_id
            cp = None
            for _ in range(n):
                cpu0, ccpu0 = _own_cpu(), _container_cpu(cid)
                t0 = time.perf_counter()
                cp = await sb.checkpoint()
                res["checkpoint"].append(time.perf_counter() - t0)
                res["checkpoint_cpu"].append(_own_cpu() - cpu0 + _container_cpu(cid) - ccpu0)
            assert cp is not None
            res["layer_bytes"] = cp.bytes
            one_memory = _container_memory(api, cid)

            async def first(**kw) -> float:
                t0 = time.perf_counter()
                s = await pool.claim("dev", **kw)
                assert (await s.exec(["/bin/true"])).exit_code == 0
                d = time.perf_counter() - t0
                await s.close()
                return d

            for _ in range(n * 3):
                res["first_cp"].append(await first(checkpoint=cp))
                res["first_image"].append(await first())

            for _ in range(n):
                t0 = time.perf_counter()
                forks = await sb.fork(FORKS)
                await asyncio.gather(*(f.exec(["/bin/true"]) for f in forks))
                res["fork"].append(time.perf_counter() - t0)
                memory = sum(_container_memory(api, f.handle.backend_data.container_id) for f in forks)
                await asyncio.gather(*(f.close() for f in forks))

                async def plain() -> sandboxes.Sandbox:
                    s = await pool.claim("dev")
                    await s.exec(["/bin/true"])
                    return s

                t0 = time.perf_counter()
                made = await asyncio.gather(*(plain() for _ in range(FORKS)))
                res["creates"].append(time.perf_counter() - t0)
                await asyncio.gather(*(s.close() for s in made))
            layer = sum(_du(pool.checkpoints.layer_path(d)) for d in cp.layers)
            res["forks_host_bytes"] = memory + layer
            res["one_host_bytes"] = one_memory
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return res


def run() -> Report:
    rep = Report("checkpoints")
    res = asyncio.run(measure(3))
    walls, cpus = docker_commits(3)
    ours = rep.add(Stats.of(f"checkpoint of {STATE_MB} MB of changes (dev image)", res["checkpoint"]))
    commit = rep.add(Stats.of(f"docker commit of the same {STATE_MB} MB", walls))
    ours_cpu = rep.add(Stats.of("checkpoint CPU (this process + the sandbox)", res["checkpoint_cpu"]))
    commit_cpu = rep.add(Stats.of("docker commit CPU (dockerd + containerd)", cpus))
    rep.ratios["docker commit / checkpoint (median wall)"] = commit.median_ms / ours.median_ms
    rep.ratios["docker commit / checkpoint (median CPU)"] = commit_cpu.median_ms / max(
        ours_cpu.median_ms, 1e-3
    )
    rep.headline(
        f"checkpoint of {STATE_MB} MB of changes vs `docker commit` (target 10x)",
        ours,
        commit,
        "docker commit / checkpoint (median wall)",
    )
    fork = rep.add(Stats.of(f"fork into {FORKS}, each ran its first command", res["fork"]))
    creates = rep.add(Stats.of(f"{FORKS} creates of the image, each ran its first command", res["creates"]))
    rep.ratios[f"fork {FORKS} / {FORKS} creates (median)"] = fork.median_ms / creates.median_ms
    rep.headline(
        f"fork into {FORKS} vs {FORKS} creates of the image (target at most 2x)",
        fork,
        creates,
        f"fork {FORKS} / {FORKS} creates (median)",
    )
    fcp = rep.add(Stats.of("time to first command, from the checkpoint", res["first_cp"]))
    fimg = rep.add(Stats.of("time to first command, from the image", res["first_image"]))
    rep.ratios["first command: checkpoint / image (median)"] = fcp.median_ms / fimg.median_ms
    rep.headline(
        "time to first command from a checkpoint vs from the image",
        fcp,
        fimg,
        "first command: checkpoint / image (median)",
    )
    rep.ratios[f"host bytes: {FORKS} forks / one sandbox"] = res["forks_host_bytes"] / res["one_host_bytes"]
    rep.extra.update(
        {
            "layer bytes (stream)": res["layer_bytes"],
            f"host bytes of {FORKS} forks (their memory + the layer on disk)": res["forks_host_bytes"],
            f"host bytes of one sandbox holding the {STATE_MB} MB": res["one_host_bytes"],
        }
    )
    mb = 1 << 20
    rep.headline(
        f"host memory + disk of {FORKS} forks of a {STATE_MB} MB state vs one (target under 2x)",
        f"{res['forks_host_bytes'] / mb:.0f} MB",
        f"{res['one_host_bytes'] / mb:.0f} MB",
        f"host bytes: {FORKS} forks / one sandbox",
    )
    return rep


if __name__ == "__main__":
    r = run()
    r.print()
    print(f"saved {r.save()}")

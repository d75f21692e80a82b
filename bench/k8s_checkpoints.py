"""k8s_checkpoints: what a checkpoint costs on the kubernetes backend, through the cluster's
registry, against what a user of containers would do instead, in the same run.

The cluster is EMULATED (`sandboxes_testing.kube_emulator`, user-namespace mode: each pod runs its
image, pulled from the registry by the local Docker engine and unpacked, as a node would); the
registry is a real one (`sandboxes_testing.loopback_registry`: Debian's `docker-registry` on loopback)
holding a small image of the agent and a few tools. A root sandbox writes `STATE_MB` files of
1 MB of random bytes, then:

- ours: the checkpoint (the agent's stream to the manager) plus the push of the image made from
  it (the template's image with the checkpoint's layer, `layered.py`), the point from which any
  node can run a sandbox of it; baseline: `docker commit` of a container of the same image with
  the same files plus `docker push` of the result to the same registry (the engine's own
  CPU counted as the commit's was in `checkpoints.py`, not here: wall only);
- time to first command of a sandbox made from the checkpoint, its image already pushed and
  pulled, against one of the template's image (both pods on the emulated kubelet).
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import Report, Stats

STATE_MB = 50
RUNS = 3
FIRST_COMMANDS = 10
WRITE = (
    "mkdir -p /root/state && i=0 && "
    f"while [ $i -lt {STATE_MB} ]; do dd if=/dev/urandom of=/root/state/f$i bs=1M count=1 2>/dev/null || exit 1; "
    "i=$((i+1)); done; set -- /root/state/*; echo $#"
)


async def ours(tmp: Path) -> dict[str, list[float]]:
    from sandboxes_testing.loopback_registry import cluster_pool

    out: dict[str, list[float]] = {"ours": [], "docker": [], "from checkpoint": [], "from image": []}
    async with cluster_pool(tmp, "root") as (pool, image, _):
        (backend,) = pool.backends
        cp = None
        for _ in range(RUNS):
            async with pool.sandbox("root") as sb:
                r = await sb.exec(["/bin/sh", "-c", WRITE], timeout=120)
                assert r.exit_code == 0 and r.stdout == f"{STATE_MB}\n".encode(), r
                t0 = time.perf_counter()
                cp = await sb.checkpoint()
                paths = pool.checkpoints.acquire(cp.layers)
                try:
                    await backend.layered.image_for(image, paths, pool.templates["root"].work_dir)
                finally:
                    pool.checkpoints.release(cp.layers)
                out["ours"].append(time.perf_counter() - t0)
        assert cp is not None
        for label, kw in (("from checkpoint", {"checkpoint": cp}), ("from image", {})):
            for i in range(FIRST_COMMANDS + 1):
                t0 = time.perf_counter()
                async with pool.sandbox("root", **kw) as sb:
                    r = await sb.exec(["true"])
                    took = time.perf_counter() - t0
                assert r.exit_code == 0, r
                if i:  # the first pulls and unpacks the image
                    out[label].append(took)
        out["docker"] = [docker_commit_and_push(image, i) for i in range(RUNS)]
    return out


def docker_commit_and_push(image: str, i: int) -> float:
    """`docker commit` of a container of `image` holding the same files, then `docker push`."""
    name = f"bench-k8s-cp-{i}"
    done = subprocess.run(
        ["docker", "run", "--name", name, "--network", "none", image, "/bin/sh", "-c", WRITE],
        check=True,
        capture_output=True,
    )
    assert done.stdout == f"{STATE_MB}\n".encode(), done
    tag = f"{image.rsplit(':', 1)[0]}:committed-{i}"
    try:
        t0 = time.perf_counter()
        subprocess.run(["docker", "commit", name, tag], check=True, capture_output=True)
        subprocess.run(["docker", "push", tag], check=True, capture_output=True)
        return time.perf_counter() - t0
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def run() -> Report:
    rep = Report("k8s_checkpoints")
    with tempfile.TemporaryDirectory() as d:
        out = asyncio.run(ours(Path(d)))
    mine = rep.add(Stats.of(f"checkpoint of {STATE_MB} MB + its image pushed", out["ours"]))
    theirs = rep.add(Stats.of(f"docker commit + docker push of the same {STATE_MB} MB", out["docker"]))
    cp = rep.add(Stats.of("time to first command, from the checkpoint", out["from checkpoint"]))
    img = rep.add(Stats.of("time to first command, from the image", out["from image"]))
    rep.ratios["docker commit + push / checkpoint + push (median)"] = theirs.median_ms / mine.median_ms
    rep.ratios["first command: checkpoint / image (median)"] = cp.median_ms / img.median_ms
    rep.headline(
        f"kubernetes (emulated): checkpoint of {STATE_MB} MB pushed to the cluster's registry vs docker commit + push",
        mine,
        theirs,
        "docker commit + push / checkpoint + push (median)",
    )
    return rep

"""Volumes kept as versions (the Prime API's), against what a user would otherwise write to carry a
directory from one sandbox to the next, in the same run (local backend, root template):

- keeping 50 MB of new files written into a volume: a publish (the sandbox's writes captured as
  one layer and recorded as the volume's head), against `tar` of the directory in the sandbox
  read out to the host (`read_file`);
- the next sandbox seeing them: time to first command of a sandbox that attaches the published
  version, against a sandbox that gets the tar written in and unpacks it (`tar -x`) before its
  first command; both created for the claim (no warm set).

CPU: the machine's (every process: this one, the agents, the kernel's share) over each whole
measured phase, per repetition.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from bench.cgroup_cpu import machine_cpu_s
from bench.common import Report, Stats

N = 5
MB = 50
WRITE = f"mkdir -p {{0}} && for i in $(seq 1 {MB}); do head -c 1048576 /dev/urandom > {{0}}/f$i; done"


async def measure() -> dict[str, list[float]]:
    import sandboxes
    from sandboxes import Template
    from sandboxes.server.volume_versions import VolumeVersions

    out: dict[str, list[float]] = {k: [] for k in ("publish", "tar", "attach", "untar")}
    cpu: dict[str, list[float]] = {k: [] for k in out}
    with tempfile.TemporaryDirectory() as d:
        root = Template(name="root", user="root", work_size_bytes=512 << 20, root_size_bytes=1 << 30)
        async with sandboxes.Pool(warm=0, templates={"root": root}, checkpoint_dir=Path(d, "cp")) as pool:
            store = VolumeVersions(Path(d, "volume-versions"), pool)
            for i in range(N):
                name = f"v{i}"
                store.create("bench", name)
                att = store.attach("bench", name, "/data", False)
                async with pool.sandbox("root", layered_volumes=[att.mount()]) as sb:
                    assert (await sb.exec(["/bin/sh", "-c", WRITE.format("/data")])).exit_code == 0
                    assert (await sb.exec(["/bin/sh", "-c", WRITE.format("/work/d")])).exit_code == 0
                    t, c = time.perf_counter(), machine_cpu_s()
                    await store.publish(sb, "bench", att)
                    out["publish"].append(time.perf_counter() - t)
                    cpu["publish"].append(machine_cpu_s() - c)
                    t, c = time.perf_counter(), machine_cpu_s()
                    r = await sb.exec(["tar", "-cf", "/tmp/d.tar", "-C", "/work/d", "."])
                    assert r.exit_code == 0, r
                    tar = await sb.read_file("/tmp/d.tar", max_bytes=(MB + 8) << 20)
                    out["tar"].append(time.perf_counter() - t)
                    cpu["tar"].append(machine_cpu_s() - c)
                head = store.attach("bench", name, "/data", True)
                t, c = time.perf_counter(), machine_cpu_s()
                async with pool.sandbox("root", layered_volumes=[head.mount()]) as sb:
                    r = await sb.exec(["/bin/true"])
                    out["attach"].append(time.perf_counter() - t)
                    cpu["attach"].append(machine_cpu_s() - c)
                    assert r.exit_code == 0 and (await sb.exec(["test", "-f", f"/data/f{MB}"])).exit_code == 0
                t, c = time.perf_counter(), machine_cpu_s()
                async with pool.sandbox("root", files={"/tmp/d.tar": tar}) as sb:
                    r = await sb.exec(["tar", "-xf", "/tmp/d.tar", "-C", "/work"])
                    assert r.exit_code == 0, r
                    r = await sb.exec(["/bin/true"])
                    out["untar"].append(time.perf_counter() - t)
                    cpu["untar"].append(machine_cpu_s() - c)
                await store.delete("bench", name)
    return {**out, **{f"{k} cpu": v for k, v in cpu.items()}}


def run() -> Report:
    rep = Report("volume_versions")
    out = asyncio.run(measure())
    publish = rep.add(Stats.of(f"publish {MB} MB written into a volume", out["publish"]))
    tar = rep.add(Stats.of(f"tar the same {MB} MB in the sandbox and read it out", out["tar"]))
    attach = rep.add(Stats.of("first command of a sandbox attaching the published version", out["attach"]))
    untar = rep.add(Stats.of("first command of a sandbox given the tar and unpacking it", out["untar"]))
    publish_cpu = rep.add(Stats.of("publish CPU (machine)", out["publish cpu"]))
    tar_cpu = rep.add(Stats.of("tar + read out CPU (machine)", out["tar cpu"]))
    attach_cpu = rep.add(Stats.of("attach + first command CPU (machine)", out["attach cpu"]))
    untar_cpu = rep.add(Stats.of("write + unpack + first command CPU (machine)", out["untar cpu"]))
    rep.ratios["keep: publish / tar (median)"] = publish.median_ms / tar.median_ms
    rep.ratios["keep CPU: publish / tar (median)"] = publish_cpu.median_ms / tar_cpu.median_ms
    rep.ratios["next sandbox: attach / unpack (median)"] = attach.median_ms / untar.median_ms
    rep.ratios["next sandbox CPU: attach / unpack (median)"] = attach_cpu.median_ms / untar_cpu.median_ms
    rep.headline(
        f"Keep {MB} MB a sandbox wrote for the next sandboxes (a volume's publish vs tar + read out)",
        publish,
        tar,
        "keep: publish / tar (median)",
    )
    rep.headline(
        f"First command of a sandbox with those {MB} MB (attach the version vs write + unpack the tar)",
        attach,
        untar,
        "next sandbox: attach / unpack (median)",
    )
    return rep

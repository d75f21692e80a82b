"""Volumes, against the same sandbox without one, in the same run (local backend):

- time to first command (claim + `/bin/true`) of a sandbox that mounts a volume at create,
  against one that mounts none; both created for the claim (no warm set), one at a time;
- writing 100 MB (`dd`, flushed to the disk with `conv=fsync`) into the volume, against the same
  into the sandbox's work dir (memory-backed): what persistence costs a program.
"""

from __future__ import annotations

import asyncio
import tempfile
import time

from bench.common import Report, Stats

N = 30
WRITE = "dd if=/dev/zero of={} bs=1M count=100 conv=fsync 2>&1 | tail -1"


async def measure() -> dict[str, list[float]]:
    import sandboxes

    out: dict[str, list[float]] = {"with": [], "without": [], "write volume": [], "write work": []}
    with tempfile.TemporaryDirectory() as d:
        async with sandboxes.Pool(warm=0, volume_dir=f"{d}/volumes") as pool:
            await pool.create_volume("bench", size_bytes=1 << 30)
            for _ in range(N):
                for label, volumes in (("with", {"/data": "bench"}), ("without", None)):
                    t = time.perf_counter()
                    async with pool.sandbox(volumes=volumes) as sb:
                        r = await sb.exec(["/bin/true"])
                        out[label].append(time.perf_counter() - t)
                        assert r.exit_code == 0, r
            async with pool.sandbox(volumes={"/data": "bench"}) as sb:
                for _ in range(5):
                    for label, path in (("write volume", "/data/f"), ("write work", "/work/f")):
                        t = time.perf_counter()
                        r = await sb.exec(["/bin/sh", "-c", WRITE.format(path)])
                        out[label].append(time.perf_counter() - t)
                        assert r.exit_code == 0 and b"copied" in r.stdout, r
                        await sb.exec(["rm", "-f", path])
            await pool.delete_volume("bench")
    return out


def run() -> Report:
    rep = Report("volumes")
    out = asyncio.run(measure())
    with_v = rep.add(Stats.of("time to first command, a volume mounted", out["with"]))
    without = rep.add(Stats.of("time to first command, no volume", out["without"]))
    vol = rep.add(Stats.of("write 100 MB + fsync into the volume", out["write volume"]))
    work = rep.add(Stats.of("write 100 MB + fsync into the work dir", out["write work"]))
    rep.ratios["first command: volume / none (median)"] = with_v.median_ms / without.median_ms
    rep.ratios["write 100 MB: volume / work dir (median)"] = vol.median_ms / work.median_ms
    rep.headline(
        "Time to first command of a sandbox with a volume mounted (vs none, both cold)",
        with_v,
        without,
        "first command: volume / none (median)",
    )
    return rep

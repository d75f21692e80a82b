"""Memory snapshots of a sandbox (`backends/memory.py`, the local backend), against CRIU run by
hand on the same program on the host, in the same run (the Docker engine here has no checkpoint:
it needs its experimental mode and CRIU of its own):

- dump, left running, of a sandbox's program holding 256 MB of memory, and its restore into a
  fresh sandbox of the same template, against `criu dump --leave-running` and `criu restore
  --restore-detached` of the same program started directly on the host;
- time to first command of a sandbox made from a memory checkpoint of that program (claim, the
  restore, then `true`) against a cold start of the same service: a sandbox claimed, the program
  started, its memory filled.

Needs root and the CRIU of `deploy/criu.sh` (`make criu`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import Report, Stats

N = 5
MB = 256
# Fills MB of memory, says so with a file, then idles.
SERVICE = """
import os, sys, time
held = bytearray(os.urandom(1 << 20)) * int(sys.argv[1])
open(sys.argv[2], "w").write("ready")
while True:
    time.sleep(1)
"""


async def _ready(sb, path: str) -> None:  # type: ignore[no-untyped-def]
    while (await sb.exec(["test", "-e", path])).exit_code != 0:
        await asyncio.sleep(0.02)


async def ours() -> dict[str, list[float]]:
    import sandboxes
    from sandboxes.backends import memory

    out: dict[str, list[float]] = {"dump": [], "restore": [], "first": [], "cold": []}
    async with sandboxes.Pool(warm=0, memory_bytes=2 << 30) as pool:
        for _ in range(N):
            # Cold: the service started in a fresh sandbox, up to its first command.
            t = time.perf_counter()
            async with pool.sandbox() as a:
                await a.write_file("/tmp/service.py", SERVICE)
                async with a.exec_stream(["python3", "/tmp/service.py", str(MB), "/tmp/ready"]) as s:
                    await anext(s)
                    await _ready(a, "/tmp/ready")
                    await a.exec(["true"])
                    out["cold"].append(time.perf_counter() - t)

                    async with pool.sandbox() as b:
                        images = Path(tempfile.mkdtemp()) / "images"
                        try:
                            agent_a, agent_b = a.handle.backend_data.pid, b.handle.backend_data.pid
                            dumped = await asyncio.to_thread(memory.dump_programs, agent_a, images)
                            out["dump"] += [p.seconds for p in dumped]
                            out["restore"] += await asyncio.to_thread(
                                memory.restore_programs, agent_b, dumped
                            )
                        finally:
                            shutil.rmtree(images.parent, ignore_errors=True)

                    cp = await a.checkpoint(memory=True)
            t = time.perf_counter()
            async with pool.sandbox(checkpoint=cp) as c:
                await c.exec(["true"])
                out["first"].append(time.perf_counter() - t)
            await pool.delete_checkpoint(cp.id)
    return out


def by_hand() -> dict[str, list[float]]:
    """The same program on the host, dumped and restored by CRIU directly."""
    out: dict[str, list[float]] = {"dump": [], "restore": []}
    for _ in range(N):
        d = Path(tempfile.mkdtemp())
        images, ready = d / "images", d / "ready"
        images.mkdir()
        program = subprocess.Popen(
            ["setsid", "python3", "-c", SERVICE, str(MB), str(ready)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        restored = 0
        try:
            while not ready.exists():
                time.sleep(0.02)
            t = time.perf_counter()
            subprocess.run(
                [
                    "criu",
                    "dump",
                    "-t",
                    str(program.pid),
                    "--leave-running",
                    "-D",
                    str(images),
                    "-o",
                    "dump.log",
                ],
                check=True,
            )
            out["dump"].append(time.perf_counter() - t)
            program.kill()
            program.wait()
            t = time.perf_counter()
            subprocess.run(
                ["criu", "restore", "-D", str(images), "-o", "restore.log", "--restore-detached"]
                + ["--pidfile", str(d / "pid")],
                check=True,
            )
            out["restore"].append(time.perf_counter() - t)
            restored = int((d / "pid").read_text())
        finally:
            program.kill()
            program.wait()
            if restored:
                os.kill(restored, signal.SIGKILL)
            shutil.rmtree(d, ignore_errors=True)
    return out


def run() -> Report:
    rep = Report("memory_snapshots")
    o = asyncio.run(ours())
    h = by_hand()
    s = {
        "dump": rep.add(Stats.of(f"dump of a sandbox's {MB} MB program", o["dump"])),
        "restore": rep.add(Stats.of(f"restore into a fresh sandbox, {MB} MB", o["restore"])),
        "criu dump": rep.add(Stats.of(f"criu dump by hand, {MB} MB, host", h["dump"])),
        "criu restore": rep.add(Stats.of(f"criu restore by hand, {MB} MB, host", h["restore"])),
        "first": rep.add(Stats.of("first command from a memory checkpoint", o["first"])),
        "cold": rep.add(Stats.of(f"cold start of the {MB} MB service", o["cold"])),
    }
    rep.ratios["dump / criu by hand"] = s["dump"].median_ms / s["criu dump"].median_ms
    rep.ratios["restore / criu by hand"] = s["restore"].median_ms / s["criu restore"].median_ms
    rep.ratios["first command from a memory checkpoint / cold start"] = (
        s["first"].median_ms / s["cold"].median_ms
    )
    rep.headline(
        f"Dump + restore of a sandbox's {MB} MB program vs CRIU by hand on the host",
        f"{s['dump'].median_ms:.3g} + {s['restore'].median_ms:.3g} ms median",
        f"{s['criu dump'].median_ms:.3g} + {s['criu restore'].median_ms:.3g} ms median",
        "restore / criu by hand",
    )
    rep.headline(
        f"First command from a memory checkpoint of a {MB} MB service vs its cold start",
        s["first"],
        s["cold"],
        "first command from a memory checkpoint / cold start",
    )
    return rep

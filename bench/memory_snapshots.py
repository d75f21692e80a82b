"""Memory snapshots of a sandbox (`backends/memory.py`) on the local and docker backends, against
baselines run in the same run:

- dump, left running, of a sandbox's program holding 256 MB of memory, and its restore into a
  fresh sandbox of the same template: on the local backend against `criu dump --leave-running`
  and `criu restore --restore-detached` of the same program started directly on the host; on the
  docker backend against the engine's own checkpoint of a container running the same program on
  the same image. `docker checkpoint create` needs the daemon's experimental mode (the engine
  here runs without it), so its mechanism is run directly: `runc checkpoint --leave-running` and
  `runc restore` of a plain runc container (the sandbox's own container cannot be dumped so:
  CRIU refuses its programs' nested user namespace);
- time to first command of a sandbox made from a memory checkpoint of that program (claim, the
  restore, then `true`) against a cold start of the same service: a sandbox claimed, the program
  started, its memory filled, on each backend.

Needs root and the CRIU of `deploy/criu.sh` (`make criu`); the docker rows the Docker engine,
`make images` and `runc` (the engine's runtime).
"""

from __future__ import annotations

import asyncio
import json
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


async def ours(backend: str) -> dict[str, list[float]]:
    import sandboxes
    from sandboxes.backends import memory

    out: dict[str, list[float]] = {"dump": [], "restore": [], "first": [], "cold": []}
    async with sandboxes.Pool(backend=backend, warm=0, memory_bytes=2 << 30) as pool:
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


def _runc(root: Path, *args: str) -> None:
    subprocess.run(
        ["runc", "--root", str(root), *args],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def engine_checkpoint() -> dict[str, list[float]]:
    """The same program in a plain container of the sandbox image (its root the backend's
    unpacked copy, read-only; /tmp a tmpfs; a host directory at /run/bench for its ready file),
    dumped and restored by the engine's checkpoint mechanism: runc with the host's CRIU."""
    from sandboxes.backends import images
    from sandboxes.backends.docker import DEFAULT_IMAGE

    rootfs = str(images.resolve(DEFAULT_IMAGE))
    out: dict[str, list[float]] = {"dump": [], "restore": []}
    for i in range(N):
        d = Path(tempfile.mkdtemp())
        bundle, state, images_dir, shared = d / "bundle", d / "runc", d / "images", d / "shared"
        for p in (bundle, state, images_dir, shared):
            p.mkdir()
        subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
        spec = json.loads((bundle / "config.json").read_text())
        spec["root"] = {"path": rootfs, "readonly": True}
        spec["process"]["terminal"] = False
        spec["process"]["args"] = ["python3", "-c", SERVICE, str(MB), "/run/bench/ready"]
        spec["mounts"] += [
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]},
            {"destination": "/run/bench", "type": "bind", "source": str(shared), "options": ["rbind", "rw"]},
        ]
        spec["linux"]["cgroupsPath"] = f"/sandboxes-bench-{os.getpid()}-{i}"  # runc removes it
        (bundle / "config.json").write_text(json.dumps(spec))
        made = []
        try:
            made.append("source")
            _runc(state, "run", "-d", "--bundle", str(bundle), "source")
            while not (shared / "ready").exists():
                time.sleep(0.02)
            cr = ["--image-path", str(images_dir), "--work-path", str(images_dir)]
            t = time.perf_counter()
            _runc(state, "checkpoint", "--leave-running", *cr, "source")
            out["dump"].append(time.perf_counter() - t)
            _runc(state, "delete", "-f", "source")
            made.append("copy")
            t = time.perf_counter()
            _runc(state, "restore", "-d", *cr, "--bundle", str(bundle), "copy")
            out["restore"].append(time.perf_counter() - t)
        finally:
            for name in made:
                subprocess.run(
                    ["runc", "--root", str(state), "delete", "-f", name], capture_output=True, check=False
                )
            shutil.rmtree(d, ignore_errors=True)
    return out


def run() -> Report:
    rep = Report("memory_snapshots")
    o = asyncio.run(ours("local"))
    h = by_hand()
    od = asyncio.run(ours("docker"))
    e = engine_checkpoint()
    s = {
        "dump": rep.add(Stats.of(f"dump of a sandbox's {MB} MB program", o["dump"])),
        "restore": rep.add(Stats.of(f"restore into a fresh sandbox, {MB} MB", o["restore"])),
        "criu dump": rep.add(Stats.of(f"criu dump by hand, {MB} MB, host", h["dump"])),
        "criu restore": rep.add(Stats.of(f"criu restore by hand, {MB} MB, host", h["restore"])),
        "first": rep.add(Stats.of("first command from a memory checkpoint", o["first"])),
        "cold": rep.add(Stats.of(f"cold start of the {MB} MB service", o["cold"])),
    }
    d = {
        "dump": rep.add(Stats.of(f"docker: dump of a container's {MB} MB program", od["dump"])),
        "restore": rep.add(Stats.of(f"docker: restore into a fresh container, {MB} MB", od["restore"])),
        "engine dump": rep.add(Stats.of(f"docker: runc checkpoint of a plain container, {MB} MB", e["dump"])),
        "engine restore": rep.add(
            Stats.of(f"docker: runc restore of a plain container, {MB} MB", e["restore"])
        ),
        "first": rep.add(Stats.of("docker: first command from a memory checkpoint", od["first"])),
        "cold": rep.add(Stats.of(f"docker: cold start of the {MB} MB service", od["cold"])),
    }
    rep.ratios["docker: dump / the engine's checkpoint"] = d["dump"].median_ms / d["engine dump"].median_ms
    rep.ratios["docker: restore / the engine's restore"] = (
        d["restore"].median_ms / d["engine restore"].median_ms
    )
    rep.ratios["docker: first command from a memory checkpoint / cold start"] = (
        d["first"].median_ms / d["cold"].median_ms
    )
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
    rep.headline(
        f"Docker: dump + restore of a container's {MB} MB program vs the engine's checkpoint (runc)",
        f"{d['dump'].median_ms:.3g} + {d['restore'].median_ms:.3g} ms median",
        f"{d['engine dump'].median_ms:.3g} + {d['engine restore'].median_ms:.3g} ms median",
        "docker: restore / the engine's restore",
    )
    rep.headline(
        f"Docker: first command from a memory checkpoint of a {MB} MB service vs its cold start",
        d["first"],
        d["cold"],
        "docker: first command from a memory checkpoint / cold start",
    )
    return rep

"""Templates built on demand, through the unmodified e2b SDK (its client virtualenv, `make
clients`) against a `sandboxes serve` with its defaults (`bench/served.py`): a build of
`from_image` + a copied local wheel installed with pip + a copied file; the same build again (a
cache hit); time to first command (create, then `commands.run("true")`) from the built template
against from its base image.

Baselines in the same run: `docker build` of the equivalent Dockerfile (no cache) and its rebuild
(cached), on the same base image, when a Docker engine with the dev image answers; on the docker
backend the server's build runs in a container of that image too. On the local backend the base
image is the host's file system (the agent template)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from bench.common import Report, Stats, client_python

ROOT = Path(__file__).resolve().parent.parent
CLIENT = client_python("e2b")
SCENARIOS = ROOT / "tests" / "clients" / "e2b_template_scenarios.py"
DEV_IMAGE = "sandboxes-dev:bookworm"
FIRST_COMMANDS = 20
BUILDS = 3
WHEEL = "benchpkg-1.0-py3-none-any.whl"


def context() -> Path:
    """A build context: a small pure-Python wheel and a data file."""
    ctx = Path(tempfile.mkdtemp(prefix="bench-tpl-"))
    with zipfile.ZipFile(ctx / WHEEL, "w") as z:
        z.writestr("benchpkg/__init__.py", "VALUE = 42\n")
        z.writestr("benchpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: benchpkg\nVersion: 1.0\n")
        z.writestr(
            "benchpkg-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr("benchpkg-1.0.dist-info/RECORD", "")
    (ctx / "data.txt").write_text("bench data\n" * 1000)
    return ctx


PIP = f"python3 -m pip install -q --no-index --break-system-packages /tmp/{WHEEL}"


def dockerfile(image: str) -> str:
    return (
        f"FROM {image}\nUSER root\nCOPY {WHEEL} /tmp/\nRUN {PIP}\nCOPY data.txt /srv/\n"
        'RUN python3 -c "import benchpkg; assert benchpkg.VALUE == 42"\n'
    )


def docker_builds(ctx: Path, image: str) -> tuple[list[float], list[float]]:
    """Wall seconds of `BUILDS` runs of `docker build` without cache, then as many cached."""
    (ctx / "Dockerfile").write_text(dockerfile(image))
    tag = "sandboxes-bench-template:latest"
    times: dict[str, list[float]] = {"cold": [], "cached": []}
    for label in ["cold"] * BUILDS + ["cached"] * BUILDS:
        flags = ["--no-cache"] if label == "cold" else []
        t = time.perf_counter()
        subprocess.run(
            ["docker", "build", "-q", *flags, "-t", tag, str(ctx)], check=True, capture_output=True
        )
        times[label].append(time.perf_counter() - t)
    subprocess.run(["docker", "rmi", "-f", tag], check=False, capture_output=True)
    subprocess.run(["docker", "builder", "prune", "-f"], check=False, capture_output=True)
    return times["cold"], times["cached"]


async def sdk(served_args: tuple[str, ...], image: str, ctx: Path) -> dict[str, Any]:
    from bench.served import run_driver, served

    async with served(*served_args) as server:
        env = {"E2B_API_URL": server.http_url, "E2B_SANDBOX_URL": server.http_url, "E2B_API_KEY": server.key}
        spec = json.dumps(
            {
                "image": image,
                "ctx": str(ctx),
                "pip": PIP,
                "wheel": WHEEL,
                "n": FIRST_COMMANDS,
                "builds": BUILDS,
            }
        )
        return await run_driver([str(CLIENT), str(SCENARIOS), "bench", spec], env)


def _docker_ready() -> bool:
    try:
        import docker

        docker.from_env().images.get(DEV_IMAGE)
        return True
    except Exception:  # noqa: BLE001 - no engine or no image: the docker rows are left out
        return False


def run() -> Report:
    if not CLIENT.exists():
        raise SystemExit(f"{CLIENT} is missing: run `make clients`")
    rep = Report("templates")
    ctx = context()
    try:
        kinds: dict[str, tuple[tuple[str, ...], str]] = {"local": ((), "python:3.11-slim")}
        if _docker_ready():
            kinds["docker"] = (("--backend", "docker"), DEV_IMAGE)
        for name, (args, image) in kinds.items():
            o = asyncio.run(sdk(args, image, ctx))
            build = rep.add(
                Stats.of(f"{name}: build (from_image + pip install of a wheel + a file)", o["build_s"])
            )
            hit = rep.add(Stats.of(f"{name}: the same build again (cache hit)", o["cached_s"]))
            built = rep.add(Stats.of(f"{name}: first command from the built template", o["built"]))
            base = rep.add(Stats.of(f"{name}: first command from its base image", o["base"]))
            rep.ratios[f"{name}: first command, built template / base image"] = (
                built.median_ms / base.median_ms
            )
            if name == "docker":
                cold_s, cached_s = docker_builds(ctx, image)
                cold = rep.add(Stats.of("docker build (no cache)", cold_s))
                cached = rep.add(Stats.of("docker build again (cached)", cached_s))
                rep.ratios["docker: build / docker build"] = build.median_ms / cold.median_ms
                rep.ratios["docker: cached build / docker build cached"] = hit.median_ms / cached.median_ms
                rep.headline(
                    "Template build (from_image + pip install of a wheel + a file), e2b SDK, docker backend",
                    build,
                    cold,
                    "docker: build / docker build",
                )
                rep.headline(
                    "The same template build again (cache hit), e2b SDK, docker backend",
                    hit,
                    cached,
                    "docker: cached build / docker build cached",
                )
        first = "docker" if "docker" in kinds else "local"
        rep.headline(
            f"Time to first command from a built template ({first} backend, e2b SDK)",
            _stat(rep, f"{first}: first command from the built template"),
            _stat(rep, f"{first}: first command from its base image"),
            f"{first}: first command, built template / base image",
        )
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return rep


def _stat(rep: Report, name: str) -> Stats:
    return next(s for s in rep.stats if s.name == name)


if __name__ == "__main__":
    r = run()
    r.print()
    print(f"saved {r.save()}")

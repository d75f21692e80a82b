"""Kinds of local sandbox beside the default one (read-only host /usr), alternated in one run so
drift hits all alike: a root sandbox (writable root, idmapped /usr overlay), and sandboxes of a
Docker image from the local engine (unpacked once into the image cache, then an overlay per
sandbox), as the default user and as root. Cold create, first exec, execs in a claimed sandbox;
the image's first use (the unpack) is reported on its own."""

from __future__ import annotations

import asyncio
import time

from bench.common import Report, Stats

IMAGE = "sandboxes-base:bookworm"  # built by `make images`


def kinds(image: bool) -> dict:
    import sandboxes

    t = {"default": sandboxes.Template(), "root": sandboxes.Template(name="root", user="root")}
    if image:
        t["image"] = sandboxes.Template(name="image", image=IMAGE)
        t["image-root"] = sandboxes.Template(name="image-root", image=IMAGE, user="root")
    return t


def image_available() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            client.images.get(IMAGE)
        finally:
            client.close()
        return True
    except Exception:  # noqa: BLE001 - no engine, no SDK or no image: the image rows are left out
        return False


def first_unpack() -> float:
    """The image's first use: saving it from the engine and unpacking it into an empty cache."""
    import tempfile
    from pathlib import Path

    from sandboxes.backends import images

    with tempfile.TemporaryDirectory(dir="/var/tmp") as cache:
        t = time.perf_counter()
        images.resolve(IMAGE, root=Path(cache))
        return time.perf_counter() - t


async def alternated_creates(templates: dict, n: int = 60) -> dict[str, tuple[list[float], list[float]]]:
    import sandboxes

    out: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in templates}
    async with sandboxes.Pool(warm=0, templates=templates) as pool:
        for name in templates:  # the image's unpack (if any) is not part of a create
            async with pool.sandbox(template=name):
                pass
        for _ in range(n):
            for name in templates:
                t = time.perf_counter()
                async with pool.sandbox(template=name) as sb:
                    created = time.perf_counter()
                    await sb.exec(["/bin/true"])
                    out[name][0].append(created - t)
                    out[name][1].append(time.perf_counter() - created)
    return out


async def steady_execs(n: int = 500) -> dict[str, list[float]]:
    """Exec of /bin/true in a claimed sandbox of each kind, alternated: a root sandbox's programs
    enter its user namespace and attach the seccomp filter themselves."""
    import sandboxes

    templates = {"default": sandboxes.Template(), "root": sandboxes.Template(name="root", user="root")}
    out: dict[str, list[float]] = {k: [] for k in templates}
    pool = sandboxes.Pool(warm=0, templates=templates)
    async with pool, pool.sandbox(template="default") as d, pool.sandbox(template="root") as r:
        for sb in (d, r):
            await sb.exec(["/bin/true"])
        for _ in range(n):
            for name, sb in (("default", d), ("root", r)):
                t = time.perf_counter()
                await sb.exec(["/bin/true"])
                out[name].append(time.perf_counter() - t)
    return out


def run() -> Report:
    rep = Report("kinds")
    image = image_available()
    templates = kinds(image)
    got = asyncio.run(alternated_creates(templates))
    base = rep.add(Stats.of("cold create, default sandbox (baseline)", got["default"][0]))
    first = rep.add(Stats.of("first exec, default sandbox (baseline)", got["default"][1]))
    for name in templates:
        if name == "default":
            continue
        c = rep.add(Stats.of(f"cold create, {name} sandbox", got[name][0]))
        e = rep.add(Stats.of(f"first exec, {name} sandbox", got[name][1]))
        rep.ratios[f"cold create {name} / default (median)"] = c.median_ms / base.median_ms
        rep.ratios[f"first exec {name} / default (median)"] = e.median_ms / first.median_ms
        rep.headline(
            f"cold create, {name} sandbox (target 2x the default)",
            c,
            base,
            f"cold create {name} / default (median)",
        )
    steady = asyncio.run(steady_execs())
    ds = rep.add(Stats.of("exec /bin/true, default sandbox", steady["default"]))
    rs = rep.add(Stats.of("exec /bin/true, root sandbox", steady["root"]))
    rep.ratios["exec root / default (median)"] = rs.median_ms / ds.median_ms
    if image:
        rep.extra["first use of the image (save + unpack), s"] = round(first_unpack(), 2)
    else:
        rep.extra["image rows"] = f"left out: {IMAGE} is not in a local Docker engine (make images)"
    return rep

"""Images on the local backend: a Docker image (from the local engine, a `docker save` archive or
an unpacked directory) unpacked once into the session's image cache and used as the read-only
lower layer of each sandbox's root. Needs the Docker engine for the image (`images` fixture)."""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import subprocess
import tarfile
from pathlib import Path

import pytest
from helpers import BASE_IMAGE, memory_kib, million_entry_archive, tiny_wheel

import sandboxes
from sandboxes import Template
from sandboxes.backends import images as image_cache

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(900)]

# Present on this host, absent from the image's minimal Debian: tells the two roots apart.
HOST_ONLY = "/usr/bin/gdb"


@pytest.fixture
async def image_pool(images: str, make_pool):
    t = Template(name="img", image=BASE_IMAGE)
    root = t.replace(name="imgroot", user="root")
    return await make_pool(warm=0, templates={"img": t, "imgroot": root})


async def sh(sb: sandboxes.Sandbox, cmd: str) -> sandboxes.ExecResult:
    return await sb.exec(["/bin/sh", "-c", cmd])


async def test_a_local_sandbox_runs_the_image(image_pool) -> None:
    assert os.path.exists(HOST_ONLY), "this test tells the image from the host by gdb"
    async with image_pool.sandbox(template="img") as sb:
        r = await sh(
            sb, f"test -e {HOST_ONLY} && echo host || echo image; test -d /var/lib/dpkg && echo dpkg; id -u"
        )
        assert r.stdout == b"image\ndpkg\n65534\n", r
        r = await sb.exec(["python3", "-c", "import sys; print(sys.version_info[:2] >= (3, 11))"])
        assert r.stdout == b"True\n", r
        # Not root: the image's root-owned directories are not the program's to change.
        r = await sh(sb, "echo x > /x || echo refused; echo y > /usr/lib/y || echo refused")
        assert r.stdout == b"refused\nrefused\n", r
        await sb.write_file("hello.txt", b"hi")
        assert (await sh(sb, "cat hello.txt")).stdout == b"hi"
        report = await sb.run_tests(
            '#include <stdio.h>\nint main(){int x; scanf("%d", &x); printf("%d\\n", x * 3);}',
            [sandboxes.TestCase(input="14", expected_output="42")],
            language="c",
        )
        assert report.cases[0].verdict == "accepted", report


async def test_root_writes_to_its_own_layer_only(image_pool) -> None:
    name = f"mark-{secrets.token_hex(4)}"
    async with image_pool.sandbox(template="imgroot") as sb:
        r = await sh(
            sb,
            f"id -u && echo a > /{name} && echo b > /usr/lib/{name} && echo c >> /etc/{name} "
            f"&& mkdir -p /app && echo d > /app/{name} && cat /{name} /usr/lib/{name} /app/{name}",
        )
        assert r.stdout == b"0\na\nb\nd\n", r
        r = await sh(
            sb, "echo changed >> /etc/os-release && rm /usr/bin/perl* 2>/dev/null; tail -1 /etc/os-release"
        )
        assert r.stdout == b"changed\n", r
    cached = image_cache.resolve(BASE_IMAGE)
    found = list(cached.rglob(f"*{name}*"))
    assert found == [], found
    assert b"changed" not in (cached / "etc/os-release").read_bytes()
    async with image_pool.sandbox(template="imgroot") as fresh:
        r = await sh(
            fresh, f"ls /{name} /usr/lib/{name} /app 2>&1 | grep -c 'No such'; tail -1 /etc/os-release"
        )
        assert r.stdout.split(b"\n")[0] == b"3" and b"changed" not in r.stdout, r


async def test_an_image_is_unpacked_once_and_shared(image_pool) -> None:
    async with image_pool.sandbox(template="img"), image_pool.sandbox(template="imgroot"):
        pass
    async with image_pool.sandbox(template="img"):
        pass
    import docker

    client = docker.from_env()
    key = "docker-" + client.images.get(BASE_IMAGE).id.removeprefix("sha256:")
    client.close()
    # One entry for this image (other tests' images may be cached beside it), nothing half-made.
    entries = [p for p in image_cache.cache_root().iterdir() if key in p.name and p.is_dir()]
    assert [p.name for p in entries] == [key], entries
    inode = entries[0].stat().st_ino
    assert image_cache.resolve(BASE_IMAGE) == entries[0] and entries[0].stat().st_ino == inode


async def test_an_archive_and_a_directory_are_images_too(images: str, make_pool, tmp_path: Path) -> None:
    archive = tmp_path / "base.tar"
    with archive.open("wb") as f:
        await asyncio.to_thread(subprocess.run, ["docker", "save", BASE_IMAGE], stdout=f, check=True)
    unpacked = image_cache.resolve(str(archive))
    assert (unpacked / "usr/bin/python3").exists()
    pool = await make_pool(
        warm=0,
        templates={
            "archive": Template(name="archive", image=str(archive)),
            "dir": Template(name="dir", image=str(unpacked), user="root"),
        },
    )
    for name in ("archive", "dir"):
        async with pool.sandbox(template=name) as sb:
            r = await sh(sb, f"test -e {HOST_ONLY} || echo image")
            assert r.stdout == b"image\n", (name, r)


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for info, data in members:
            info.size = len(data)
            t.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


async def test_an_image_cannot_write_outside_its_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    evil_link = tarfile.TarInfo("usr")
    evil_link.type, evil_link.linkname = tarfile.SYMTYPE, str(outside)
    through = tarfile.TarInfo("usr/planted")
    dotdot = tarfile.TarInfo("../planted")
    for i, members in enumerate(([(evil_link, b""), (through, b"x")], [(dotdot, b"x")])):
        p = tmp_path / f"evil{i}.tar"
        p.write_bytes(_tar(members))
        with pytest.raises(sandboxes.LaunchError) as err:
            image_cache.resolve(str(p), root=tmp_path / "cache")
        assert err.value.step == "image"
    assert list(outside.iterdir()) == [] and not (tmp_path / "planted").exists()


async def test_whiteouts_of_upper_layers_remove_lower_files(tmp_path: Path) -> None:
    """A `docker save` archive of two layers: the second deletes a file and a directory's
    contents of the first (OCI whiteouts)."""

    def f(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
        return tarfile.TarInfo(name), data

    def d(name: str) -> tuple[tarfile.TarInfo, bytes]:
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        return info, b""

    lower = _tar([d("usr"), d("usr/bin"), f("usr/bin/keep"), f("usr/bin/gone"), d("opt"), f("opt/old")])
    upper = _tar([f("usr/bin/.wh.gone", b""), d("opt"), f("opt/.wh..wh..opq", b""), f("opt/new")])
    manifest = b'[{"Config": "c.json", "Layers": ["l1/layer.tar", "l2/layer.tar"]}]'
    archive = tmp_path / "two-layers.tar"
    archive.write_bytes(
        _tar(
            [
                f("manifest.json", manifest),
                f("c.json", b"{}"),
                f("l1/layer.tar", lower),
                f("l2/layer.tar", upper),
            ]
        )
    )
    root = image_cache.resolve(str(archive), root=tmp_path / "cache")
    assert sorted(p.name for p in (root / "usr/bin").iterdir()) == ["keep"]
    assert sorted(p.name for p in (root / "opt").iterdir()) == ["new"]


async def test_an_opaque_directory_keeps_what_its_own_layer_puts_before_the_marker(tmp_path: Path) -> None:
    """Layers are read as streams, whiteouts first: an opaque marker that comes after the
    directory's new files in the same layer removes only what the lower layers had there."""
    info = tarfile.TarInfo("opt")
    info.type, info.mode = tarfile.DIRTYPE, 0o755
    lower = _tar([(info, b""), (tarfile.TarInfo("opt/old"), b"x")])
    upper = _tar(
        [(info, b""), (tarfile.TarInfo("opt/new"), b"x"), (tarfile.TarInfo("opt/.wh..wh..opq"), b"")]
    )
    manifest = b'[{"Config": "c.json", "Layers": ["l1/layer.tar", "l2/layer.tar"]}]'
    archive = tmp_path / "opaque.tar"
    archive.write_bytes(
        _tar(
            [
                (tarfile.TarInfo("manifest.json"), manifest),
                (tarfile.TarInfo("c.json"), b"{}"),
                (tarfile.TarInfo("l1/layer.tar"), lower),
                (tarfile.TarInfo("l2/layer.tar"), upper),
            ]
        )
    )
    root = image_cache.resolve(str(archive), root=tmp_path / "cache")
    assert sorted(p.name for p in (root / "opt").iterdir()) == ["new"]


async def test_a_root_file_system_tarball_is_unpacked_in_bounded_memory(tmp_path: Path) -> None:
    """A tarball of 100,000 empty files is unpacked without a list of its entries: the process
    grows by a few MiB (a `TarFile` that keeps them takes over 40 MiB)."""
    archive = tmp_path / "many.tar.gz"
    million_entry_archive(archive, 100_000, "usr")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here on
    before = memory_kib("VmRSS")
    root = await asyncio.to_thread(image_cache.resolve, str(archive), tmp_path / "cache")
    grown_mib = (memory_kib("VmHWM") - before) / 1024
    assert (root / "usr/f0099999").is_file()
    assert grown_mib < 16, f"grew by {grown_mib:.0f} MiB"


async def test_a_missing_image_is_a_launch_error_at_the_image_step(images: str) -> None:
    with pytest.raises(sandboxes.LaunchError) as err:
        image_cache.resolve(f"no-such-image-{secrets.token_hex(4)}:latest")
    assert err.value.step == "image"


@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_an_agent_clones_builds_and_installs_as_root_in_the_dev_image(
    dev_image: str, make_pool, backend
) -> None:
    """What a coding agent does first, offline: clone a repository, build C, make a venv and
    pip-install into it and into the system, all as root inside a sandbox of the dev image (on
    docker too: the image has no agent of ours, the backend mounts it in)."""
    dev = Template(name="dev", backend=backend, image=dev_image, user="root", agent_mount=backend == "docker")
    pool = await make_pool(backend=backend, warm=0, templates={"dev": dev})
    wheel_name, wheel = tiny_wheel()
    async with pool.sandbox(template="dev") as sb:
        await sb.write_file(f"/tmp/{wheel_name}", wheel)
        steps = {
            "repository": "git init -q /src && cd /src && git -c user.email=a@b -c user.name=t commit -q "
            "--allow-empty -m one && echo hi > f && git add f && "
            "git -c user.email=a@b -c user.name=t commit -qm two",
            "clone": "git clone -q /src /app/clone && cat /app/clone/f && git -C /app/clone log --oneline | wc -l",
            "build": "printf 'int main(void){return 7;}' > /tmp/a.c && cc -O2 /tmp/a.c -o /usr/local/bin/seven; "
            "seven; echo $?",
            "venv": f"python3 -m venv /opt/venv && /opt/venv/bin/pip install -q --no-index /tmp/{wheel_name} "
            "&& /opt/venv/bin/python -c 'import tinypkg; print(tinypkg.VALUE)'",
            "system pip": f"pip install -q --no-index --break-system-packages /tmp/{wheel_name} "
            "&& python3 -c 'import tinypkg, os; print(tinypkg.__file__.startswith(\"/usr/local\"))'",
        }
        outputs = {}
        for what, cmd in steps.items():
            r = await sb.exec(["/bin/sh", "-c", cmd], limits=sandboxes.Limits(wall_time_s=120))
            assert r.exit_code == 0, (what, r)
            outputs[what] = r.stdout.decode().split()
        assert outputs["clone"] == ["hi", "2"]
        assert outputs["build"] == ["7"]
        assert outputs["venv"] == ["42"]
        assert outputs["system pip"] == ["True"]
    cached = image_cache.resolve(dev_image)
    assert not (cached / "usr/local/bin/seven").exists() and not (cached / "opt/venv").exists()

"""Volumes on the real agent: a named, bounded file system of an owner's (an ext4 image mounted once
on the host, bound into each sandbox that asks for it), shared by that owner's sandboxes, kept
after they end and across pools (a server restart), ENOSPC past its bounds with the sandbox still
serving, read-only when asked, nothing planted in it reaching out; through the embedded pool,
the gRPC API and the docker backend."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import sandboxes
from sandboxes import Template
from sandboxes.errors import InvalidRequest, NotFound

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

TEMPLATES = {"default": Template(name="default"), "root": Template(name="root", user="root")}
MB = 1 << 20


async def sh(sb: sandboxes.SandboxBase, cmd: str) -> sandboxes.ExecResult:
    return await sb.exec(["/bin/sh", "-c", cmd])


async def out(sb: sandboxes.SandboxBase, cmd: str) -> str:
    r = await sh(sb, cmd)
    assert r.exit_code == 0, r
    return r.stdout.decode()


def mounted(volume_dir: Path) -> list[str]:
    """Mount points under `volume_dir` in this host's mount table."""
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if str(volume_dir) in line
    ]


async def test_a_volume_is_shared_kept_and_bounded(make_pool, tmp_path: Path) -> None:
    vdir = tmp_path / "vols"
    pool = await make_pool(warm=0, templates=TEMPLATES, volume_dir=vdir)
    vol = await pool.create_volume("data", size_bytes=8 * MB, inodes=128)
    assert [v.id for v in pool.volumes.list()] == [vol.id]
    async with pool.sandbox(volumes={"/data": "data"}) as user:
        await out(user, "echo from-user > /data/u; mkdir /data/dir")
        async with pool.sandbox("root", volumes={"/mnt/shared": vol.id}) as root:
            # The same files, with the ids each sandbox's programs see.
            assert await out(root, "cat /mnt/shared/u; stat -c %u /mnt/shared/u") == "from-user\n65534\n"
            await out(root, "echo from-root > /mnt/shared/r")
        assert await out(user, "cat /data/r; stat -c %u /data/r") == "from-root\n0\n"
        # Its bounds are its own file system's: ENOSPC for bytes and for inodes, and the sandbox
        # (its own disk and the volume's other files) keeps serving.
        full = await sh(user, "dd if=/dev/zero of=/data/big bs=1M count=16 2>&1")
        assert full.exit_code != 0 and b"No space left on device" in full.stdout
        await out(user, "rm /data/big")
        many = await sh(user, "for i in $(seq 1 200); do touch /data/dir/f$i || exit 7; done")
        assert many.exit_code == 7 and b"No space left on device" in many.stderr
        assert await out(user, "cat /data/u; echo ok > /work/w; cat /work/w") == "from-user\nok\n"
    assert len(mounted(vdir)) == 1  # kept mounted for a next sandbox (`volumes.LINGER_S`)
    await pool.close()
    assert mounted(vdir) == []  # unmounted with the pool
    # Another pool on the same directory (a restarted server) finds it and its files.
    again = await make_pool(warm=0, templates=TEMPLATES, volume_dir=vdir)
    async with again.sandbox(volumes={"/data": ("data", True)}) as ro:
        assert await out(ro, "cat /data/u /data/r") == "from-user\nfrom-root\n"
        assert b"Read-only file system" in (await sh(ro, "touch /data/x")).stderr
    await again.delete_volume("data")
    assert again.volumes.list() == [] and list(vdir.glob("vol-*")) == []


async def test_sandboxes_of_one_mount_at_once_all_have_it(make_pool, tmp_path: Path) -> None:
    """Three sandboxes alive together, of one template with the same volume at the same path
    (one template pool of theirs): each has it mounted and sees the others' writes."""
    pool = await make_pool(warm=0, templates=TEMPLATES, volume_dir=tmp_path / "vols")
    await pool.create_volume("data", size_bytes=8 * MB)
    async with (
        pool.sandbox("root", volumes={"/mnt/data": "data"}) as a,
        pool.sandbox("root", volumes={"/mnt/data": "data"}) as b,
        pool.sandbox("root", volumes={"/mnt/data": "data"}) as c,
    ):
        await out(a, "echo from-a > /mnt/data/a")
        assert await out(b, "cat /mnt/data/a; echo from-b > /mnt/data/b") == "from-a\n"
        assert await out(c, "cat /mnt/data/a /mnt/data/b") == "from-a\nfrom-b\n"
    await pool.delete_volume("data")


async def test_a_volume_stays_mounted_a_while_for_the_next_sandbox(
    make_pool, tmp_path: Path, monkeypatch
) -> None:
    """A volume no sandbox uses stays mounted `LINGER_S` (the next sandbox skips the mount),
    then is unmounted; a delete unmounts one that lingers at once."""
    from sandboxes.state import volumes

    vdir = tmp_path / "vols"
    pool = await make_pool(warm=0, volume_dir=vdir)
    await pool.create_volume("a", size_bytes=4 * MB)
    await pool.create_volume("b", size_bytes=4 * MB)
    monkeypatch.setattr(volumes, "LINGER_S", 0.3)
    async with pool.sandbox(volumes={"/d": "a"}) as sb:
        await out(sb, "echo one > /d/f")
    (kept,) = mounted(vdir)
    async with pool.sandbox(volumes={"/d": "a"}) as sb:
        assert mounted(vdir) == [kept]
        assert await out(sb, "cat /d/f") == "one\n"
    while mounted(vdir):  # then unmounted
        await asyncio.sleep(0.05)
    monkeypatch.setattr(volumes, "LINGER_S", 60.0)
    async with pool.sandbox(volumes={"/d": "b"}) as sb:
        await out(sb, "echo two > /d/f")
    assert len(mounted(vdir)) == 1
    await pool.delete_volume("b")
    assert mounted(vdir) == [] and len(list(vdir.glob("vol-*.img"))) == 1


async def test_a_volume_is_its_owners_alone_and_deleting_one_in_use_waits(make_pool, tmp_path: Path) -> None:
    vdir = tmp_path / "vols"
    pool = await make_pool(warm=0, volume_dir=vdir)
    await pool.create_volume("mine", owner="a", size_bytes=4 * MB)
    with pytest.raises(InvalidRequest):
        await pool.create_volume("mine", owner="a", size_bytes=4 * MB)  # names are unique per owner
    for call in (pool.claim(volumes={"/d": "mine"}, owner="b"), pool.delete_volume("mine", owner="b")):
        with pytest.raises(NotFound):
            await call
    sb = await pool.claim(volumes={"/d": "mine"}, owner="a")
    await out(sb, "echo kept > /d/f")
    await pool.delete_volume("mine", owner="a")
    assert pool.volumes.list() == []
    assert await out(sb, "cat /d/f") == "kept\n"  # its sandbox keeps it until it ends
    assert len(list(vdir.glob("vol-*.img"))) == 1
    await sb.close()
    assert list(vdir.glob("vol-*")) == [] and mounted(vdir) == []


async def test_what_a_program_plants_in_a_volume_reaches_nothing(make_pool, tmp_path: Path) -> None:
    """A set-uid root binary, a device node and a symlink to the host's files, planted by root in
    one sandbox, give another sandbox's user nothing: no set-id, no device, and the symlink
    resolves inside the reader's own root."""
    pool = await make_pool(warm=0, templates=TEMPLATES, volume_dir=tmp_path / "vols")
    await pool.create_volume("v", size_bytes=8 * MB)
    async with pool.sandbox("root", volumes={"/v": "v"}) as root:
        await out(root, "cp /usr/bin/id /v/id && chmod 4755 /v/id; ln -s /etc/shadow /v/shadow")
        assert (await sh(root, "mknod /v/null c 1 3")).exit_code != 0  # no devices in a volume
    async with pool.sandbox(volumes={"/v": "v"}) as user:
        assert await out(user, "stat -c %a /v/id; /v/id -u") == "4755\n65534\n"
        assert (await sh(user, "cat /v/shadow")).exit_code != 0


async def test_bad_volume_requests_are_refused(make_pool, tmp_path: Path) -> None:
    pool = await make_pool(warm=0, volume_dir=tmp_path / "vols")
    for kwargs in ({"size_bytes": 1}, {"size_bytes": 1 << 50}, {"inodes": 0}):
        with pytest.raises(InvalidRequest):
            await pool.create_volume("x", **kwargs)
    with pytest.raises(InvalidRequest):
        await pool.create_volume("../x")
    await pool.create_volume("x", size_bytes=4 * MB)
    for path in ("relative", "/proc/x", "/etc", "/"):
        with pytest.raises(sandboxes.errors.SandboxError):
            await pool.claim(volumes={path: "x"})
    async with pool.sandbox() as sb:  # the pool still serves
        assert await out(sb, "echo ok") == "ok\n"


async def test_volumes_through_the_grpc_api(server, client, client_b) -> None:
    vol = await client.create_volume("cache", size_bytes=8 * MB)
    assert (vol.name, vol.size_bytes) == ("cache", 8 * MB)
    assert [v.id for v in await client.volumes()] == [vol.id] and await client_b.volumes() == []
    async with client.sandbox(volumes={"/cache": "cache"}) as a:
        await out(a, "echo remote > /cache/f")
    async with client.sandbox(volumes={"/c": (vol.id, True)}) as b:
        assert await out(b, "cat /c/f") == "remote\n"
    for call in (
        client_b.get_volume("cache"),
        client_b.delete_volume(vol.id),
        client_b.create(volumes={"/c": "cache"}),
    ):
        with pytest.raises(NotFound):
            await call
    await client.delete_volume("cache")
    assert await client.volumes() == []


async def test_docker_volumes(images: str, make_pool, tmp_path: Path) -> None:
    """A container's agent binds the volume's host mount the same way."""
    t = Template(name="d", backend="docker", agent_mount=True)
    pool = await make_pool(backend="docker", warm=0, templates={"d": t}, volume_dir=tmp_path / "vols")
    await pool.create_volume("v", size_bytes=8 * MB)
    async with pool.sandbox("d", volumes={"/v": "v"}) as a:
        await out(a, "echo docker > /v/f")
        full = await sh(a, "dd if=/dev/zero of=/v/big bs=1M count=16 2>&1")
        assert b"No space left on device" in full.stdout
    local = await make_pool(warm=0, volume_dir=tmp_path / "vols")
    async with local.sandbox(volumes={"/v": "v"}) as b:
        assert await out(b, "cat /v/f") == "docker\n"

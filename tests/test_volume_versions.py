"""Volumes kept as versions, on the real agent: a layered volume (a directory of the sandbox's own
made of checkpoint layers, its writes private to it and bounded), a capture of its writes as a
layer, the versions store (attach, publish, a moved head, a restart), and what a program plants in
a volume reaching nothing outside in the sandboxes that see its next version."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from test_checkpoints import out, sh

from sandboxes import Template
from sandboxes.errors import Conflict, InvalidRequest, LaunchError, NoSpace, NotFound
from sandboxes.server.volume_versions import VolumeVersions

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

TEMPLATES = {
    "default": Template(name="default", work_size_bytes=8 << 20),
    "root": Template(name="root", user="root", work_size_bytes=8 << 20),
}


@pytest.fixture
async def pool(make_pool, tmp_path: Path):
    return await make_pool(warm=0, templates=TEMPLATES, checkpoint_dir=tmp_path / "checkpoints")


@pytest.mark.parametrize("template", ["default", "root"])
async def test_a_layered_volume_is_private_bounded_and_captured_alone(pool, template) -> None:
    first = await pool.claim(template, layered_volumes=[("/data", False, ())])
    try:
        assert await out(first, "ls -A /data") == ""
        await out(first, "echo one > /data/a; mkdir /data/d; echo x > /data/d/f; echo w > /work/w")
        # Bounded like the work dir (8 MiB here): ENOSPC, and the sandbox serves on.
        with pytest.raises(NoSpace):
            await first.write_files({"/data/big": b"\0" * (16 << 20)})
        await out(first, "rm -f /data/big")
        digest, size = await pool.capture_volume(first, "/data")
        assert size > 0 and sorted(os.listdir(pool.checkpoints.layer_path(digest))) == ["a", "d"]
        # The sandbox's own checkpoint holds its file system, never the volume.
        cp = await first.checkpoint()
        own = pool.checkpoints.layer_path(cp.layers[-1])
        assert (own / "work" / "w").is_file()
        assert not (own / "data").exists() or not os.listdir(own / "data")  # at most its mount point
        with pytest.raises(NotFound):
            await pool.capture_volume(first, "/work")
    finally:
        await first.close()
    # The layer is the volume's next version: a sandbox attached to it sees it, its writes its own.
    reader = await pool.claim(template, layered_volumes=[("/v", True, (digest,))])
    writer = await pool.claim(template, layered_volumes=[("/v", False, (digest,))])
    try:
        assert await out(reader, "cat /v/a /v/d/f") == "one\nx\n"
        assert (await sh(reader, "touch /v/z")).exit_code != 0
        await out(writer, "rm /v/a; echo two > /v/b")
        assert await out(reader, "ls /v") == "a\nd\n"
        second, _ = await pool.capture_volume(writer, "/v")
        # Named by a record (as a version is), the layers outlive the sandboxes using them.
        pool.checkpoints.add(template="", layers=(digest, second), ttl_s=None)
    finally:
        await reader.close()
        await writer.close()
    async with pool.sandbox(template, layered_volumes=[("/w", False, (digest, second))]) as sb:
        assert await out(sb, "ls -A /w; cat /w/b") == "b\nd\ntwo\n"


async def test_a_layered_volume_cannot_hide_a_place_of_the_sandbox(pool) -> None:
    with pytest.raises(LaunchError):
        await pool.claim(layered_volumes=[("/work", False, ())], timeout=30)
    with pytest.raises(InvalidRequest):
        Template(name="bad", layered_volumes=[("data", False, ())])
    with pytest.raises(InvalidRequest):
        Template(name="bad", layered_volumes=[("/data", "yes", ())])
    async with pool.sandbox() as sb:  # the pool serves on
        assert await out(sb, "echo ok") == "ok\n"


async def test_what_a_program_plants_in_a_volume_reaches_nothing_outside(pool, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret\n")
    async with pool.sandbox("root", layered_volumes=[("/data", False, ())]) as sb:
        await out(
            sb,
            f"ln -s {outside} /data/to-host; mkfifo /data/fifo; cp /bin/true /data/suid; chmod 4755 /data/suid; "
            "ln /data/suid /data/hard; mknod /data/dev c 1 3 2>/dev/null || true",
        )
        digest, _ = await pool.capture_volume(sb, "/data")
    layer = pool.checkpoints.layer_path(digest)
    for p in layer.rglob("*"):
        st = p.lstat()
        assert not stat.S_ISFIFO(st.st_mode) and not stat.S_ISBLK(st.st_mode), p
        assert not (stat.S_ISCHR(st.st_mode) and st.st_rdev != 0), p
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), p
    assert os.readlink(layer / "to-host") == str(outside)
    assert (layer / "hard").stat().st_ino != (layer / "suid").stat().st_ino
    async with pool.sandbox("root", layered_volumes=[("/v", False, (digest,))]) as made:
        assert (await sh(made, "cat /v/to-host")).exit_code != 0
        assert await out(made, "ls /v") == "hard\nsuid\nto-host\n"
    assert outside.read_text() == "host secret\n"


async def test_versions_are_published_heads_and_survive_a_restart(make_pool, tmp_path: Path) -> None:
    cps = tmp_path / "checkpoints"
    pool = await make_pool(warm=0, checkpoint_dir=cps)
    store = VolumeVersions(cps / "volume-versions", pool)
    store.create("key-a", "cache")
    with pytest.raises(Conflict):
        store.create("key-a", "cache")
    store.create("key-b", "cache")  # one name in two keys' scopes
    early = store.attach("key-a", "cache", "/c", False)
    late = store.attach("key-a", "cache", "/c", False)
    async with (
        pool.sandbox(layered_volumes=[early.mount()]) as a,
        pool.sandbox(layered_volumes=[late.mount()]) as b,
    ):
        await out(a, "echo a > /c/f")
        await out(b, "echo b > /c/f")
        first = await store.publish(a, "key-a", early)
        with pytest.raises(Conflict):  # b attached an older head
            await store.publish(b, "key-a", late)
        forced = await store.publish(b, "key-a", late, force=True)
        assert store.get("key-a", "cache").head == forced.id
        with pytest.raises(NotFound):  # the replaced version
            pool.checkpoints.get(first.id)
    await pool.close()
    again = await make_pool(warm=0, checkpoint_dir=cps)
    store = VolumeVersions(cps / "volume-versions", again)
    assert store.get("key-a", "cache").head == forced.id and store.get("key-b", "cache").head is None
    att = store.attach("key-a", "cache", "/c", True)
    async with again.sandbox(layered_volumes=[att.mount()]) as sb:
        assert await out(sb, "cat /c/f") == "b\n"
    await store.delete("key-a", "cache")
    await store.delete("key-b", "cache")
    assert again.checkpoints.list() == [] and os.listdir(again.checkpoints.layers_dir) == []


async def test_a_long_chain_of_versions_is_folded_into_one_layer(pool, tmp_path: Path, monkeypatch) -> None:
    from sandboxes.server import volume_versions

    monkeypatch.setattr(volume_versions, "MAX_CHAIN", 2)
    store = VolumeVersions(tmp_path / "volume-versions", pool)
    store.create("k", "v")
    steps = [
        "mkdir -p /v/d/e; echo 1 > /v/a; echo x > /v/d/e/f; ln -s a /v/l",
        "rm /v/a; echo 2 > /v/b; rm -r /v/d; mkdir /v/d; echo y > /v/d/g",  # an opaque directory
        "echo 3 > /v/c; chmod 700 /v/d",
    ]
    for cmd in steps:
        att = store.attach("k", "v", "/v", False)
        async with pool.sandbox("root", layered_volumes=[att.mount()]) as sb:
            await out(sb, cmd)
            cp = await store.publish(sb, "k", att)
    assert len(cp.layers) == 1 and cp.layers[0].startswith("squash-")
    att = store.attach("k", "v", "/v", True)
    async with pool.sandbox("root", layered_volumes=[att.mount()]) as sb:
        listing = "ls -A /v; ls -A /v/d; cat /v/b /v/c /v/d/g; stat -c %a /v/d; readlink /v/l"
        assert await out(sb, listing) == "b\nc\nd\nl\ng\n2\n3\ny\n700\na\n"
    await store.delete("k", "v")
    assert os.listdir(pool.checkpoints.layers_dir) == []

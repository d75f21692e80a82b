"""Checkpoints and forks through the embedded pool, on the real agent: a sandbox's file system
frozen into a layer on this host, sandboxes made from it (each an overlay of its own on the
shared layer), stacked checkpoints, forks that see none of each other's writes, and what a
program plants in its sandbox reaching nothing outside when a sandbox is made from it."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest
from helpers import BASE_IMAGE

import sandboxes
from sandboxes import Template
from sandboxes.errors import InvalidRequest, NotFound
from sandboxes.state.checkpoints import CheckpointStore

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

TEMPLATES = {
    "default": Template(name="default"),
    "root": Template(name="root", user="root"),
}


async def sh(sb: sandboxes.Sandbox, cmd: str) -> sandboxes.ExecResult:
    return await sb.exec(["/bin/sh", "-ec", cmd])


async def out(sb: sandboxes.Sandbox, cmd: str) -> str:
    r = await sh(sb, cmd)
    assert r.exit_code == 0, r
    return r.stdout.decode()


@pytest.fixture
async def pool(make_pool, tmp_path: Path):
    return await make_pool(warm=1, templates=TEMPLATES, checkpoint_dir=tmp_path / "checkpoints")


@pytest.mark.parametrize("template", ["default", "root"])
async def test_a_sandbox_made_from_a_checkpoint_sees_that_state_and_nothing_later(pool, template) -> None:
    async with pool.sandbox(template) as sb:
        await out(sb, "echo one > /work/a.txt; mkdir -p /tmp/d/e; echo two > /tmp/d/e/f; ln -s a.txt /work/l")
        cp = await sb.checkpoint()
        await out(sb, "echo later > /work/b.txt; echo changed > /work/a.txt")
        assert cp.template == template and len(cp.layers) == 1 and cp.bytes > 0
        async with pool.sandbox(checkpoint=cp.id) as made:
            assert await out(made, "cat /work/a.txt /tmp/d/e/f /work/l") == "one\ntwo\none\n"
            assert (await sh(made, "test -e /work/b.txt")).exit_code == 1
            who = "root" if template == "root" else "sandbox"
            assert await out(made, "stat -c %U /work/a.txt") == f"{who}\n"
            # Its own writes, in its own disk: the parent does not see them.
            await out(made, "echo mine > /work/c.txt")
        assert (await sh(sb, "test -e /work/c.txt")).exit_code == 1
        assert await out(sb, "cat /work/a.txt") == "changed\n"


async def test_checkpoints_stack_and_carry_deletions(pool) -> None:
    async with pool.sandbox("root") as sb:
        await out(
            sb,
            "echo 1 > /work/keep; echo 2 > /work/gone; mkdir /root/tree; echo 3 > /root/tree/x; echo u > /usr/local/u",
        )
        first = await sb.checkpoint()
    async with pool.sandbox(checkpoint=first) as sb:
        await out(
            sb, "rm /work/gone; rm -r /root/tree; mkdir /root/tree; echo new > /root/tree/y; rm /usr/local/u"
        )
        second = await sb.checkpoint()
    assert second.layers[:1] == first.layers and len(second.layers) == 2
    async with pool.sandbox(checkpoint=second) as sb:
        assert await out(sb, "cat /work/keep; ls /root/tree") == "1\ny\n"
        for gone in ("/work/gone", "/root/tree/x", "/usr/local/u"):
            assert (await sh(sb, f"test -e {gone}")).exit_code == 1, gone
    # The first checkpoint is unchanged by the second.
    async with pool.sandbox(checkpoint=first) as sb:
        assert await out(sb, "cat /work/gone /root/tree/x /usr/local/u") == "2\n3\nu\n"


async def test_forks_see_the_state_and_none_of_each_others_writes(pool) -> None:
    async with pool.sandbox() as parent:
        await out(parent, "echo base > /work/state")
        forks = await parent.fork(4)
        try:
            assert len({f.id for f in forks}) == 4
            for i, f in enumerate(forks):
                assert (
                    await out(f, f"cat /work/state; echo {i} > /work/mine; echo {i} >> /work/state")
                    == "base\n"
                )
            for i, f in enumerate(forks):
                assert await out(f, "cat /work/mine; cat /work/state") == f"{i}\nbase\n{i}\n"
            assert (await sh(parent, "test -e /work/mine")).exit_code == 1
            assert await out(parent, "cat /work/state") == "base\n"
        finally:
            for f in forks:
                await f.close()
    # A fork's layer is nobody's checkpoint: it goes with the last fork.
    assert not any(pool.checkpoints.layers_dir.iterdir())
    assert set(pool.stats()) == set(TEMPLATES)  # its template pool retired with it


async def test_what_a_program_plants_reaches_nothing_outside(pool, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret\n")
    async with pool.sandbox("root") as sb:
        await out(
            sb,
            f"ln -s {outside} /work/to-host; ln -s /proc/1/root /work/to-agent-root; "
            "mkfifo /work/fifo; cp /bin/true /work/suid; chmod 4755 /work/suid; "
            "ln /work/suid /work/hard; python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.bind('/work/sock')\"; "
            "mknod /work/dev c 1 3 2>/dev/null || true",
        )
        await out(sb, "cp -r /etc /work/etc-copy 2>/dev/null || true; env > /work/env")
        token = sb.handle.token.encode()
        cp = await sb.checkpoint()
    layer = pool.checkpoints.layer_path(cp.layers[-1])
    # Nothing of the agent's: its token is nowhere in the layer (never on the sandbox's disk).
    for p in layer.rglob("*"):
        if not p.is_symlink() and p.is_file():
            assert token not in p.read_bytes(), p
    for p in layer.rglob("*"):
        st = p.lstat()
        assert (
            not stat.S_ISFIFO(st.st_mode) and not stat.S_ISSOCK(st.st_mode) and not stat.S_ISBLK(st.st_mode)
        )
        assert not (stat.S_ISCHR(st.st_mode) and st.st_rdev != 0), p  # only whiteouts
        assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), p
    assert os.readlink(layer / "work" / "to-host") == str(outside)  # a symlink stays one, never followed
    assert (layer / "work" / "hard").stat().st_ino != (layer / "work" / "suid").stat().st_ino
    async with pool.sandbox(checkpoint=cp) as made:
        # Inside, the links resolve in the sandbox: the host's file is not there.
        assert (await sh(made, "cat /work/to-host")).exit_code != 0
        assert await out(made, "ls /work") == "env\netc-copy\nhard\nsuid\nto-agent-root\nto-host\n"
        assert await out(made, "stat -c %a /work/suid") == "755\n"
    assert outside.read_text() == "host secret\n"


async def test_checkpoints_survive_their_pool_and_belong_to_their_owner(make_pool, tmp_path: Path) -> None:
    cps = tmp_path / "checkpoints"
    first = await make_pool(warm=0, checkpoint_dir=cps)
    async with first.sandbox() as sb:
        await out(sb, "echo kept > /work/k")
        cp = await first.checkpoint(sb, owner="key-a", name="warm", ttl_s=None)
    await first.close()
    again = await make_pool(warm=0, checkpoint_dir=cps)
    assert [c.id for c in again.checkpoints.list("key-a")] == [cp.id]
    assert again.checkpoints.list("key-b") == []
    with pytest.raises(NotFound):
        again.checkpoints.get(cp.id, "key-b")
    with pytest.raises(NotFound):
        await again.claim(checkpoint=cp.id, owner="key-b")
    async with again.sandbox(checkpoint=cp.id, owner="key-a") as sb:
        assert await out(sb, "cat /work/k") == "kept\n"
        # Deleted while a sandbox runs on it: the record goes, the layer stays until the sandbox ends.
        again.checkpoints.delete(cp.id, "key-a")
        assert again.checkpoints.layer_path(cp.layers[0]).is_dir()
        assert await out(sb, "cat /work/k") == "kept\n"
    assert not again.checkpoints.layer_path(cp.layers[0]).exists()


async def test_a_checkpoint_in_use_is_served_warm_until_its_claims_stop(pool, monkeypatch) -> None:
    """Claims of one checkpoint keep one of its sandboxes ready ahead (the next claim takes it);
    it goes when its claims stop for `LINGER_S`, or at once with the checkpoint."""
    async with pool.sandbox() as sb:
        await out(sb, "echo kept > /work/k")
        cp = await sb.checkpoint()
    monkeypatch.setattr(sandboxes.derived_pools, "LINGER_S", 0.5)
    for _ in range(3):
        async with pool.sandbox(checkpoint=cp) as made:
            assert await out(made, "cat /work/k; echo mine >> /work/k") == "kept\n"
            derived = next(n for n in pool.stats() if n not in TEMPLATES)
            while pool.stats()[derived]["warm"] < 1:  # the next one is made while this one works
                await asyncio.sleep(0.01)
    stats = pool.stats()[derived]
    assert stats["created_total"] == 4 and stats["warm"] == 1
    # Claims stopped: the ready one goes, and with it the checkpoint's pool.
    while derived in pool.stats():
        await asyncio.sleep(0.05)
    async with pool.sandbox(checkpoint=cp) as made:
        assert await out(made, "cat /work/k") == "kept\n"
    # Deleted: no sandbox of it is kept, its layer goes now.
    monkeypatch.setattr(sandboxes.derived_pools, "LINGER_S", 60.0)
    async with pool.sandbox(checkpoint=cp) as made:
        while pool.stats()[derived]["warm"] < 1:
            await asyncio.sleep(0.01)
        await pool.delete_checkpoint(cp.id)
        assert pool.checkpoints.layer_path(cp.layers[0]).is_dir()
    assert set(pool.stats()) == set(TEMPLATES)
    assert not pool.checkpoints.layer_path(cp.layers[0]).exists()


async def test_a_checkpoint_expires_after_its_ttl(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    cp = store.add(template="default", layers=["abc"], ttl_s=0.001)
    (store.layer_path("abc")).mkdir()
    await asyncio.sleep(0.01)
    assert store.list() == []
    with pytest.raises(NotFound):
        store.get(cp.id)
    assert not store.layer_path("abc").exists()
    with pytest.raises(InvalidRequest):
        store.add(template="default", layers=[], ttl_s=-1)


async def test_the_same_changes_are_the_same_layer(pool) -> None:
    async with pool.sandbox() as sb:
        await out(sb, "echo same > /work/x; touch -d @1000000000 /work/x /work")
        a = await sb.checkpoint()
        b = await sb.checkpoint()
    assert a.id != b.id and a.layers == b.layers


async def test_checkpoints_and_forks_through_the_grpc_api(server, client, client_b) -> None:
    """The remote client against a real server: checkpoint, create from it, fork, list, delete;
    another key's checkpoint is missing to it."""
    async with client.sandbox() as sb:
        await sh(sb, "echo remote > /work/r")
        cp = await sb.checkpoint(name="after-setup")
        assert cp.name == "after-setup" and cp.source == sb.id and cp.bytes > 0 and cp.expires_at
        forks = await sb.fork(2)
        try:
            await sh(forks[0], "echo 0 > /work/r")
            assert [await out(f, "cat /work/r") for f in forks] == ["0\n", "remote\n"]
            assert {s.id for s in await client.list()} >= {f.id for f in forks}
        finally:
            for f in forks:
                await f.close()
    made = await client.create(checkpoint=cp)
    try:
        assert await out(made, "cat /work/r") == "remote\n"
        assert made.template == "default"
    finally:
        await made.close()
    assert [c.id for c in await client.checkpoints()] == [cp.id]
    assert await client_b.checkpoints() == []
    for call in (
        client_b.get_checkpoint(cp.id),
        client_b.delete_checkpoint(cp.id),
        client_b.create(checkpoint=cp.id),
    ):
        with pytest.raises(NotFound):
            await call
    kept = await (await client.create()).checkpoint(ttl_s=None)
    assert kept.expires_at is None
    await client.delete_checkpoint(cp.id)
    await client.delete_checkpoint(kept.id)
    assert await client.checkpoints() == []
    with pytest.raises(NotFound):
        await client.create(checkpoint=cp.id)


async def test_health_shows_a_key_the_checkpoint_pools_of_its_own_sandboxes_only(
    server, client, client_b
) -> None:
    """A sandbox made from a checkpoint is served by a pool of its own (`cp-<hash>`): the
    authenticated Health call lists it to the key whose sandbox it serves, never to another key,
    which sees the server's own templates as before."""
    served = set(server.pool.templates)
    async with client.sandbox() as sb:
        await sh(sb, "echo mine > /work/f")
        cp = await sb.checkpoint()
    made = await client.create(checkpoint=cp)
    try:
        derived = {name for name in server.pool.stats() if name not in served}
        assert len(derived) == 1 and next(iter(derived)).startswith("cp-")
        mine, theirs = await client.health(), await client_b.health()
        assert derived <= set(mine["pools"]) and mine["sandboxes"] == 1
        assert set(theirs["pools"]) == served and theirs["sandboxes"] == 0
    finally:
        await made.close()
        await client.delete_checkpoint(cp.id)


@pytest.mark.parametrize("backend", ["local", "docker"])
@pytest.mark.parametrize("user", ["sandbox", "root"])
async def test_an_image_sandbox_checkpoints_its_changes_only(
    images: str, make_pool, tmp_path: Path, backend, user
) -> None:
    """On an image (the local backend's unpacked image, or a container's): the checkpoint holds
    what changed, never the image, and a sandbox made from it is the image plus those changes.
    The docker sandbox runs this build's agent (`agent_mount`)."""
    t = Template(name="img", backend=backend, image=BASE_IMAGE, user=user, agent_mount=backend == "docker")
    pool = await make_pool(backend=backend, warm=0, templates={"img": t}, checkpoint_dir=tmp_path / "cps")
    async with pool.sandbox("img") as sb:
        writable = "/etc/added" if user == "root" else "/tmp/added"
        await out(sb, f"echo added > {writable}; echo w > /work/w")
        if user == "root":
            await out(sb, "rm /etc/debian_version")
        cp = await sb.checkpoint()
    assert cp.bytes < 1 << 20  # the changes, not the image
    async with pool.sandbox(checkpoint=cp) as made:
        assert await out(made, f"cat {writable} /work/w; cat /etc/os-release | head -1") == (
            'added\nw\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n'
        )
        if user == "root":
            assert (await sh(made, "test -e /etc/debian_version")).exit_code == 1
        forks = await made.fork(2)
        try:
            await out(forks[0], "echo mine > /work/w")
            assert [await out(f, "cat /work/w") for f in forks] == ["mine\n", "w\n"]
            assert await out(made, "cat /work/w") == "w\n"
        finally:
            for f in forks:
                await f.close()


async def test_stores_sharing_a_directory_see_each_others_records(tmp_path: Path) -> None:
    """Two stores on one directory (the replicas of a cluster on one shared claim): what one
    records or deletes, the other sees, though it had read the directory before."""
    from sandboxes.state.built_templates import BuiltTemplates

    a, b = CheckpointStore(tmp_path / "cp"), CheckpointStore(tmp_path / "cp")
    assert b.list() == []
    (a.layers_dir / "abc").mkdir()
    cp = a.add(template="default", layers=["abc"], owner="k")
    assert b.get(cp.id, "k").layers == ("abc",) and [c.id for c in b.list("k")] == [cp.id]
    a.delete(cp.id, "k")
    assert b.list("k") == []
    ta, tb = BuiltTemplates(tmp_path / "cp" / "templates"), BuiltTemplates(tmp_path / "cp" / "templates")
    assert tb.of("k") == []
    t, _ = ta.request("k", "app", [], 1, 512)
    assert tb.find("k", "app") is not None and [x.id for x in tb.of("k")] == [t.id]
    tb.delete("k", "app")  # through the other replica: gone for this one too
    assert ta.find("k", "app") is None and ta.of("k") == []

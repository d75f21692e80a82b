"""The agent's file operations (stat, list to a depth, make dir, move, permissions, find, search)
through the real agent binary: embedded, as root inside, and through the server's gRPC API.

Each runs on the agent's path resolution, so the hostile cases are the point: a symlink planted by
the sandbox's programs never leads a walk or a read out of the sandbox, no mount is crossed, a
FIFO never holds a search up, and an overlong line or a huge tree is bounded.
"""

from __future__ import annotations

import asyncio

import pytest

import sandboxes
from sandboxes import Template
from sandboxes import errors as E

pytestmark = pytest.mark.asyncio

ROOT = Template(name="root", user="root")


async def test_stat_and_a_listing_to_a_depth(sb: sandboxes.Sandbox) -> None:
    wd = (await sb.info()).work_dir
    await sb.write_files({"d/one.txt": b"1", "d/sub/two.txt": b"22", "d/sub/deeper/three": b"333"})
    await sb.exec("ln -s sub d/link && ln -s /etc/passwd d/out")
    info = await sb.stat("d/sub/two.txt")
    assert (info.name, info.size, info.is_dir, info.type) == ("two.txt", 2, False, "file")
    assert info.path == f"{wd}/d/sub/two.txt" and info.mode == 0o644
    me = (await sb.exec("id -un")).stdout.decode().strip()
    assert info.owner == me and info.uid == (await sb.info()).sandbox_uid

    link = await sb.stat("d/link")
    assert link.is_symlink and not link.is_dir and link.symlink_target == "sub" and link.target_is_dir
    out = await sb.stat("d/out")  # leads out of the sandbox's roots: described, never followed
    assert out.is_symlink and out.symlink_target == "/etc/passwd" and not out.target_is_dir

    one = [e.path.removeprefix(wd + "/") for e in await sb.list_dir("d")]
    assert one == ["d/link", "d/one.txt", "d/out", "d/sub"]
    three = [e.path.removeprefix(wd + "/") for e in await sb.list_dir("d", depth=3)]
    assert three == [
        "d/link",
        "d/one.txt",
        "d/out",
        "d/sub",
        "d/sub/deeper",
        "d/sub/deeper/three",
        "d/sub/two.txt",
    ]  # a directory's entries right after it, the symlink to a directory not entered
    with pytest.raises(E.NotFound):
        await sb.stat("d/nope")
    with pytest.raises(E.InvalidRequest):
        await sb.list_dir("d/one.txt")
    with pytest.raises(E.InvalidRequest):
        await sb.list_dir("d", depth=65)


async def test_make_dir(sb: sandboxes.Sandbox) -> None:
    wd = (await sb.info()).work_dir
    made = await sb.make_dir("a/b/c", mode=0o700)
    assert made.is_dir and made.mode == 0o700 and made.path == f"{wd}/a/b/c"
    r = await sb.exec("stat -c '%a %U' a/b a/b/c && touch a/b/c/mine")
    assert r.stdout.decode().split("\n")[:2] == ["755 " + made.owner, "700 " + made.owner], r
    assert (await sb.make_dir("a/b/c")).mode == 0o700  # exist_ok: as it was
    with pytest.raises(E.Conflict):
        await sb.make_dir("a/b/c", exist_ok=False)
    await sb.write_file("f", b"")
    with pytest.raises(E.InvalidRequest, match="not a directory"):
        await sb.make_dir("f")
    with pytest.raises(E.InvalidRequest):
        await sb.make_dir("f/under")
    with pytest.raises((E.AuthError, E.InvalidRequest)):
        await sb.make_dir("/etc/evil")


async def test_move(sb: sandboxes.Sandbox) -> None:
    wd = (await sb.info()).work_dir
    await sb.write_files({"src/a.txt": b"a", "src/tree/b.txt": b"b", "dest/keep": b""})
    moved = await sb.move("src/a.txt", "new/place/a.txt", make_parents=True)
    assert moved.path == f"{wd}/new/place/a.txt" and await sb.read_file("new/place/a.txt") == b"a"
    with pytest.raises(E.NotFound):
        await sb.read_file("src/a.txt")
    with pytest.raises(E.NotFound):
        await sb.move("src/a.txt", "x")
    with pytest.raises(E.NotFound):  # no parents made unless asked
        await sb.move("src/tree", "no/such/dir")
    # into_directory: an existing directory receives it (mv); without, a directory needs an empty one.
    assert (await sb.move("src/tree", "dest", into_directory=True)).path == f"{wd}/dest/tree"
    with pytest.raises(E.InvalidRequest):
        await sb.move("dest/tree", "dest")
    # Between file systems (the work dir and /tmp): copied with modes, then removed.
    await sb.exec("chmod 0751 dest/tree && ln -s b.txt dest/tree/link")
    across = await sb.move("dest/tree", "/tmp/tree")
    assert across.is_dir and across.mode == 0o751
    r = await sb.exec("cat /tmp/tree/b.txt /tmp/tree/link; test -e dest/tree || echo gone")
    assert r.stdout == b"bbgone\n", r
    with pytest.raises((E.AuthError, E.InvalidRequest)):
        await sb.move("dest/keep", "/etc/keep")
    with pytest.raises(E.InvalidRequest):
        await sb.move(".", "elsewhere")


async def test_set_permissions(sb: sandboxes.Sandbox) -> None:
    await sb.write_file("f", b"x")
    assert (await sb.set_permissions("f", mode=0o600)).mode == 0o600
    assert (await sb.exec("stat -c %a f")).stdout == b"600\n"
    me = (await sb.stat("f")).owner
    assert (await sb.set_permissions("f", owner=me)).owner == me  # its own user: allowed
    with pytest.raises(E.InvalidRequest):  # another user: only where programs run as root
        await sb.set_permissions("f", owner="0")
    with pytest.raises(E.InvalidRequest):
        await sb.set_permissions("f", mode=0o10000)
    with pytest.raises(E.NotFound):
        await sb.set_permissions("nope", mode=0o600)


async def test_find_and_search(sb: sandboxes.Sandbox) -> None:
    wd = (await sb.info()).work_dir
    long = b"x" * (3 << 20) + b" needle at the end\n"  # searched in its first MiB only
    await sb.write_files(
        {
            "t/a.py": b"import os\nprint('needle')\n",
            "t/deep/b.py": b"needle\nno\nneedle again\n",
            "t/deep/c.txt": b"a needle in text\n",
            "t/bin.dat": b"\0needle\n",
            "t/long.txt": long,
        }
    )
    # Planted: links out of the sandbox, a FIFO nobody writes to, a loop of links.
    await sb.exec("ln -s /etc t/etc && ln -s /etc/passwd t/passwd && mkfifo t/fifo && ln -s loop t/loop")
    assert await sb.find_files("t", "*.py") == [f"{wd}/t/a.py", f"{wd}/t/deep/b.py"]
    assert await sb.find_files("t/deep/b.py", "b.*") == [f"{wd}/t/deep/b.py"]
    assert await sb.find_files("t", "passwd") == [f"{wd}/t/passwd"]  # the link, not followed
    found = await asyncio.wait_for(sb.search_files("t", "needle"), 60)
    got = [(m.path.removeprefix(wd + "/"), m.line, m.content) for m in found]
    assert got == [
        ("t/a.py", 2, "print('needle')"),
        ("t/deep/b.py", 1, "needle"),
        ("t/deep/b.py", 3, "needle again"),
        ("t/deep/c.txt", 1, "a needle in text"),
    ]  # no binary file, no FIFO, nothing behind the links, the long line past its first MiB
    assert not await sb.search_files("t", "root:")  # /etc/passwd is never read through t/passwd
    assert [m.line for m in await sb.search_files("t/deep/b.py", "again")] == [3]
    with pytest.raises(E.NotFound):
        await sb.search_files("nope", "x")
    with pytest.raises(E.InvalidRequest):
        await sb.find_files("t", "")


async def test_a_huge_listing_is_refused_not_answered(sb: sandboxes.Sandbox) -> None:
    r = await sb.exec("mkdir many && cd many && seq 1 100001 | xargs touch", timeout=300)
    assert r.exit_code == 0, r
    with pytest.raises(E.TooLarge):
        await sb.list_dir("many")
    assert len(await sb.find_files("many", "10000?")) == 2
    assert (await sb.exec("true")).exit_code == 0  # the sandbox serves on


@pytest.mark.requires("root", reason="root sandboxes need a manager that is root")
async def test_as_root_inside_a_user_owns_what_is_made_for_it(make_pool) -> None:
    pool = await make_pool(warm=0, templates={"root": ROOT})
    async with pool.sandbox("root") as sb:
        r = await sb.exec("useradd -m alice && groupadd team")
        assert r.exit_code == 0, r
        made = await sb.make_dir("/home/alice/proj/src", user="alice")
        assert (made.owner, made.group) == ("alice", "alice")
        assert (await sb.stat("/home/alice/proj")).owner == "alice"
        await sb.write_file("/srv/f", b"x")
        changed = await sb.set_permissions("/srv/f", mode=0o640, owner="alice", group="team")
        assert (changed.owner, changed.group, changed.mode) == ("alice", "team", 0o640)
        r = await sb.exec("stat -c '%U %G %a' /srv/f")
        assert r.stdout == b"alice team 640\n", r
        with pytest.raises(E.InvalidRequest):
            await sb.set_permissions("/srv/f", owner="nobody-here")
        moved = await sb.move("/srv/f", "/home/alice/inbox/f", make_parents=True, user="alice")
        assert moved.owner == "alice" and (await sb.stat("/home/alice/inbox")).owner == "alice"
        assert "/usr/bin/python3" in await sb.find_files("/usr/bin", "python3")


async def test_through_the_server(client) -> None:
    sb = await client.create()
    try:
        wd = (await sb.info()).work_dir
        await sb.write_files({"p/q/r.txt": b"hello\n"})
        assert [e.name for e in await sb.list_dir("p", depth=2)] == ["q", "r.txt"]
        assert (await sb.stat("p/q/r.txt")).size == 6
        assert (await sb.make_dir("p/new", mode=0o750)).mode == 0o750
        with pytest.raises(E.Conflict):
            await sb.make_dir("p/new", exist_ok=False)
        assert (await sb.move("p/q/r.txt", "p/new/r.txt")).path.endswith("/p/new/r.txt")
        assert (await sb.set_permissions("p/new/r.txt", mode=0o600)).mode == 0o600
        assert await sb.find_files("p", "r.*") == [f"{wd}/p/new/r.txt"]
        assert [m.content for m in await sb.search_files("p", "hell")] == ["hello"]
        with pytest.raises(E.NotFound):
            await sb.stat("p/gone")
    finally:
        await sb.close()

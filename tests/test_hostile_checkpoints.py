"""Checkpoints and forks against a hostile program, on the real agent through the embedded pool:
files with holes cost the host what they cost the sandbox, a capture past its bound stops with a
typed error that names the bound (and leaves the sandbox serving and nothing on the host), and a
program renaming its own directories while a checkpoint walks them never makes the checkpoint an
infrastructure failure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sandboxes
from sandboxes import Template
from sandboxes.errors import TooLarge

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(600)]

TEMPLATES = {"default": Template(name="default"), "root": Template(name="root", user="root")}
SPARSE = 256 << 20


def allocated(root: Path) -> int:
    """Bytes the files and directories under `root` allocate on the host."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


async def out(sb: sandboxes.Sandbox, cmd: str) -> str:
    r = await sb.exec(["/bin/sh", "-ec", cmd])
    assert r.exit_code == 0, r
    return r.stdout.decode()


@pytest.fixture
async def pool(make_pool, tmp_path: Path):
    return await make_pool(warm=1, templates=TEMPLATES, checkpoint_dir=tmp_path / "checkpoints")


MAKE_SPARSE = f"""
import os
for i in range(4):
    with open(f"/work/sparse{{i}}", "wb") as f:
        f.seek({SPARSE} - 1)
        f.write(b"x")
print(sum(os.stat(f"/work/sparse{{i}}").st_blocks * 512 for i in range(4)))
"""


@pytest.mark.parametrize("template", ["default", "root"])
async def test_holes_cost_the_host_what_they_cost_the_sandbox(pool, template) -> None:
    """Four files of 256 MiB that are one hole each: the checkpoint's layer and a fork's allocate
    at most twice what the sandbox's files do beyond what a checkpoint of the same sandbox
    without them allocates (its directories), and read back the same."""
    layers = pool.checkpoints.layers_dir
    async with pool.sandbox(template) as sb:
        before = await sb.checkpoint()
        without = allocated(pool.checkpoints.layer_path(before.layers[-1]))
        r = await sb.exec(["python3", "-c", MAKE_SPARSE])
        assert r.exit_code == 0, r
        in_sandbox = int(r.stdout)
        assert in_sandbox <= 64 << 10
        cp = await sb.checkpoint()
        after_checkpoint = allocated(layers)
        taken = allocated(pool.checkpoints.layer_path(cp.layers[-1])) - without
        assert taken <= 2 * in_sandbox, (taken, in_sandbox)
        assert cp.bytes - before.bytes <= 2 * in_sandbox, (cp.bytes, before.bytes)
        forks = await sb.fork(2)
        try:
            assert allocated(layers) - after_checkpoint <= 2 * in_sandbox + (64 << 10)
            for f in forks:
                assert await out(f, "stat -c %s /work/sparse3; tail -c 1 /work/sparse3") == f"{SPARSE}\nx"
                assert await out(f, "head -c 4096 /work/sparse0 | tr -d '\\000' | wc -c") == "0\n"
        finally:
            for f in forks:
                await f.close()
        async with pool.sandbox(checkpoint=cp.id) as made:
            assert await out(made, "du -k /work/sparse1 | cut -f1") in ("0\n", "4\n", "8\n")
            assert await out(made, "tail -c 1 /work/sparse2") == "x"


async def test_a_capture_past_its_bound_stops_naming_it(pool) -> None:
    """A sandbox whose changes pass the store's bound of bytes, then of entries: the checkpoint
    (and the fork) raise `TooLarge` naming the bound while the stream runs; the sandbox serves
    on, and nothing of the stopped captures is left on the host."""
    store = pool.checkpoints
    store.max_capture_bytes = 1 << 20
    async with pool.sandbox() as sb:
        await out(sb, "head -c 4194304 /dev/urandom > /work/big")
        with pytest.raises(TooLarge, match="1048576 bytes"):
            await sb.checkpoint()
        with pytest.raises(TooLarge, match="1048576 bytes"):
            await sb.fork(2)
        assert await out(sb, "echo still here") == "still here\n"
        await out(sb, "rm /work/big; mkdir /work/many; cd /work/many; seq 1 500 | xargs touch")
        store.max_capture_entries = 100
        with pytest.raises(TooLarge, match="100 files and directories"):
            await sb.checkpoint()
        store.max_capture_entries, store.max_capture_bytes = 1_000_000, 32 << 30
        cp = await sb.checkpoint()
        assert await out(sb, "ls /work/many | wc -l") == "500\n"
    assert [p.name for p in store.layers_dir.iterdir()] == list(cp.layers)
    assert list(store.tmp_dir.iterdir()) == []


RENAMER = """
cd /work
while :; do
    mkdir -p d/a/b/c; touch d/a/b/c/f d/a/x
    mv d e 2>/dev/null; rm -rf e; echo > d; rm -f d
    mkdir -p d/a; mv d/a d/z 2>/dev/null; echo x > d/a; rm -rf d
done
"""


@pytest.mark.parametrize("template", ["default", "root"])
async def test_a_program_renaming_its_files_meanwhile_is_no_infrastructure_failure(pool, template) -> None:
    """While a program renames and replaces its own directories without pause, 20 checkpoints are
    taken: each succeeds (what moved is taken as gone)."""
    async with pool.sandbox(template) as sb:
        await sb.write_file("/work/renamer.sh", RENAMER.encode())
        await out(sb, "nohup sh /work/renamer.sh > /dev/null 2>&1 & echo started")
        for _ in range(20):
            cp = await sb.checkpoint(ttl_s=60)
            assert cp.layers

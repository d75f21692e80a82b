"""The `prime` CLI 0.18 (unmodified, from PyPI: tests/clients/prime-cli.txt) against a real
server, through `PRIME_API_BASE_URL` and `PRIME_API_KEY` only: its sandbox checkpoint commands
(create, list, get, delete), `checkpoint restore` and `fork`, and its `sandbox volumes` commands,
each run as a user types it."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from server_helpers import KEY_A, KEY_B, run_client

pytestmark = pytest.mark.asyncio

VENV = "prime-cli"


class Prime:
    """Runs `prime --plain ...` of the pinned CLI with a fresh HOME (its config and caches)."""

    def __init__(self, server: Any, key: str) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="prime-cli-home-"))
        self.env = {
            "HOME": str(self.home),
            "COLUMNS": "200",
            "PRIME_API_BASE_URL": f"http://127.0.0.1:{server.http_port}",
            "PRIME_API_KEY": key,
        }

    async def __call__(self, *args: str) -> str:
        return await run_client(VENV, ["-m", "prime_cli.main", "--plain", *args], self.env, timeout=300)

    async def json(self, *args: str) -> Any:
        out = await self(*args, "--output", "json")
        return json.loads(out[out.index("{") :])

    async def json_flag(self, *args: str) -> Any:
        """The output of a command whose JSON is asked for with `--json`."""
        out = await self(*args, "--json")
        return json.loads(out[out.index("{") :])

    def close(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)


def made(out: str, verb: str) -> str:
    m = re.search(rf"Successfully {verb} (sb-[0-9a-f]+)", out)
    assert m, out
    return m.group(1)


async def test_checkpoints_restore_and_fork_through_the_prime_cli(make_server) -> None:
    server = await make_server(http_port=0, warm=1)
    prime, other = Prime(server, KEY_A), Prime(server, KEY_B)
    try:
        src = made(
            await prime("sandbox", "create", "python:3.11-slim", "--name", "src", "--yes"), "created sandbox"
        )
        await prime("sandbox", "run", src, "--", "sh", "-c", "echo set-up > /work/state")
        cp = await prime.json("sandbox", "checkpoint", "create", src)
        assert (cp["sandbox_id"], cp["state"], cp["docker_image"]) == (src, "DURABLE", "python:3.11-slim")
        await prime("sandbox", "run", src, "--", "sh", "-c", "echo later > /work/state")
        listed = await prime.json("sandbox", "checkpoint", "list", src)
        assert [c["id"] for c in listed["checkpoints"]] == [cp["id"]]
        got = await prime.json("sandbox", "checkpoint", "get", cp["id"])
        assert got["id"] == cp["id"] and got["occupied_bytes"] > 0
        restored = made(
            await prime("sandbox", "checkpoint", "restore", cp["id"], "--name", "r", "-y"), "created sandbox"
        )
        forked = made(await prime("sandbox", "fork", src, "-y"), "forked into sandbox")
        assert "set-up" in await prime("sandbox", "run", restored, "cat", "/work/state")
        assert "later" in await prime("sandbox", "run", forked, "cat", "/work/state")
        # Another key: the checkpoint and the sandbox are missing to it.
        with pytest.raises(AssertionError):
            await other("sandbox", "checkpoint", "get", cp["id"])
        with pytest.raises(AssertionError):
            await other("sandbox", "fork", src, "-y")
        deleted = await prime.json("sandbox", "checkpoint", "delete", cp["id"], "-y")
        assert deleted["deleted"] == [cp["id"]] and deleted["errors"] == []
        # The fork took a checkpoint of its own (the CLI's fork is a checkpoint and a create).
        left = [c["id"] for c in (await prime.json("sandbox", "checkpoint", "list", src))["checkpoints"]]
        assert len(left) == 1 and cp["id"] not in left
        swept = await prime.json("sandbox", "checkpoint", "delete", "--sandbox", src, "-y")
        assert swept["deleted"] == left
        assert (await prime.json("sandbox", "checkpoint", "list", src))["checkpoints"] == []
        for sid in (src, restored, forked):
            await prime("sandbox", "delete", sid, "-y")
        assert len(server.service.registry) == 0
    finally:
        prime.close()
        other.close()


async def test_volumes_through_the_prime_cli(make_server) -> None:
    """`prime sandbox volumes create / list / get / publish / delete` and `sandbox create
    --volume NAME:/path[:ro]`: a sandbox's writes published as the volume's new version, seen by
    a sandbox created after; a delete refused while a sandbox has the volume attached."""
    server = await make_server(http_port=0, warm=1)
    prime, other = Prime(server, KEY_A), Prime(server, KEY_B)
    try:
        assert "Head checkpoint: none (never published)" in await prime(
            "sandbox", "volumes", "create", "data"
        )
        writer = made(
            await prime("sandbox", "create", "python:3.11-slim", "--volume", "data:/data", "--yes"),
            "created sandbox",
        )
        await prime("sandbox", "run", writer, "--", "sh", "-c", "echo v1 > /data/f")
        published = await prime("sandbox", "volumes", "publish", "data", "--sandbox", writer)
        assert "State: DURABLE" in published and "Published volume data" in published, published
        head = re.search(r"Checkpoint ID: (cp-[0-9a-f]+)", published)
        assert head, published
        got = await prime("sandbox", "volumes", "get", "data")
        assert f"Head checkpoint: {head.group(1)}" in got, got
        assert "DURABLE" in await prime("sandbox", "checkpoint", "get", head.group(1))
        listed = await prime.json_flag("sandbox", "volumes", "list")
        assert [v["name"] for v in listed["volumes"]] == ["data"] and listed["volumes"][0][
            "occupied_bytes"
        ] > 0
        reader = made(
            await prime("sandbox", "create", "python:3.11-slim", "--volume", "data:/data:ro", "--yes"),
            "created sandbox",
        )
        assert "v1" in await prime("sandbox", "run", reader, "cat", "/data/f")
        with pytest.raises(AssertionError):  # attached: the delete is refused
            await prime("sandbox", "volumes", "delete", "data", "-y")
        with pytest.raises(AssertionError):  # another key's volume is missing to it
            await other("sandbox", "volumes", "get", "data")
        for sid in (writer, reader):
            await prime("sandbox", "delete", sid, "-y")
        assert "Deleted volume data" in await prime("sandbox", "volumes", "delete", "data", "-y")
        assert server.service.pool.checkpoints.list() == []
    finally:
        prime.close()
        other.close()

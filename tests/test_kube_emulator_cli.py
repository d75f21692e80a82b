"""The emulated cluster as a person runs it (issue: a runnable emulated cluster): the EMULATED
API server and kubelet stand-in of `python -m sandboxes_testing.kube_emulator --write-config`
(no real cluster exists here), then `sandboxes serve --backend kubernetes --kube-config` on
the settings it wrote, then a client that creates a sandbox, runs a program in it and closes it,
all over real sockets. With KUBECONFIG set, `test_kubernetes_e2e.py` does the same on a real
cluster."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandboxes.client import AsyncSandboxClient

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]
KEY = "emulated-cluster-key-0123456789"


@contextlib.asynccontextmanager
async def process(*argv: str, until: Any, env: dict[str, str] | None = None) -> AsyncIterator[Any]:
    """A child process, yielded with the first stdout/stderr line for which `until` is not None."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
    )
    assert proc.stdout is not None
    try:
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), 120)
            assert line, f"{argv} exited ({await proc.wait()}) before it was ready"
            found = until(line.decode())
            if found is not None:
                break
        drain = asyncio.create_task(proc.stdout.read())
        yield found
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 60)
        with contextlib.suppress(NameError):
            await drain


def started(line: str) -> str | None:
    with contextlib.suppress(ValueError):
        rec = json.loads(line)
        if rec.get("msg") == "server started":
            return rec["address"]
    return None


async def test_serve_on_the_emulated_cluster(native: Any, images: str, tmp_path: Path) -> None:
    config = tmp_path / "kube.json"
    emulator = ["-m", "sandboxes_testing.kube_emulator", "--write-config", str(config)]
    async with process(*emulator, until=lambda line: line if line.startswith("ready ") else None):
        assert json.loads(config.read_text())["api_url"].startswith("http://")
        env = {**os.environ, "SANDBOXES_API_KEYS": f"me:{KEY}"}
        serve = [
            "-m",
            "sandboxes",
            "serve",
            "--backend",
            "kubernetes",
            "--kube-config",
            str(config),
            "--port",
            "0",
        ]
        async with (
            process(*serve, "--warm", "1", until=started, env=env) as address,
            AsyncSandboxClient(address, api_key=KEY) as client,
        ):
            sb = await client.create()
            r = await sb.exec(["sh", "-c", "echo from a pod; id -u"])
            assert (r.exit_code, r.stdout) == (0, b"from a pod\n65534\n"), r
            await sb.close()

"""The host's CRIU as `make criu` installs it: its own check passes here, and the server learns at
start that memory snapshots' dependency is met (Health shows the probe's answer)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest

from sandboxes.client import AsyncSandboxClient
from sandboxes.server.criu import MIN_VERSION, parse_version, probe


@pytest.mark.requires("criu")
def test_the_installed_criu_passes_its_check() -> None:
    criu = shutil.which("criu")
    assert criu is not None
    version = subprocess.run([criu, "--version"], check=True, capture_output=True, text=True, timeout=30)
    release = parse_version(version.stdout)
    assert release is not None and release >= MIN_VERSION, version.stdout
    r = subprocess.run([criu, "check"], check=False, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.asyncio
async def test_health_shows_the_probe(server, client: AsyncSandboxClient) -> None:
    assert (await client.health())["criu"] == dataclasses.asdict(probe())


@pytest.mark.requires("criu")
@pytest.mark.asyncio
async def test_health_reports_memory_snapshots_possible(server, client: AsyncSandboxClient) -> None:
    host = (await client.health())["criu"]
    assert host["found"] and host["ok"] and host["reason"] == ""
    assert (parse_version(f"Version: {host['version']}") or ()) >= MIN_VERSION

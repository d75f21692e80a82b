"""The manager image `make images` builds offline (deploy/docker/build_images.sh --manager), under
the name the Helm chart's Deployment runs by default: `sandboxes serve` works in it, as a
non-root user, on a read-only root file system, with the package's native extension and agent."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(1800)


def run(image: str, *args: str, entrypoint: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["docker", "run", "--rm", "--read-only", "--network", "none", "--cap-drop", "ALL"]
    if entrypoint:
        cmd += ["--entrypoint", entrypoint]
    return subprocess.run([*cmd, image, *args], capture_output=True, text=True, timeout=120, check=False)


def test_the_charts_default_image_serves(docker_api: Any, manager_image: str) -> None:
    config = docker_api.inspect_image(manager_image)["Config"]
    assert config["User"] == "65532:65532" and config["Entrypoint"] == ["sandboxes"]
    r = run(manager_image, "serve", "--help")
    assert r.returncode == 0 and "--http-port" in r.stdout and "--backend" in r.stdout, r.stderr
    r = run(
        manager_image,
        "-c",
        "import os, kubernetes_asyncio, sandboxes._native, sandboxes._bridge as b; "
        "print(os.getuid(), os.access(b.agent_path(), os.X_OK))",
        entrypoint="python3",
    )
    assert (r.returncode, r.stdout) == (0, "65532 True\n"), r.stderr


def test_the_manager_image_carries_no_test_helper(manager_image: str) -> None:
    """The kube emulator and its kmock are the tests' (`testing/`), never the service's."""
    r = run(
        manager_image,
        "-c",
        "import importlib.util as u, pathlib, sandboxes; "
        "print(u.find_spec('sandboxes_testing'), u.find_spec('kmock'), "
        "pathlib.Path(sandboxes.__file__).with_name('testing').exists())",
        entrypoint="python3",
    )
    assert (r.returncode, r.stdout) == (0, "None None False\n"), r.stderr

"""The RL frameworks' own sandbox code, unmodified, against a real `sandboxes serve`: each
framework's provider, installed from the package registry at the version its lock file pins (in a
client venv of tests/clients/), or, for a framework that is not published, its source at the commit
named in ../shared/frameworks/README.md, unpacked from that archive onto the client's PYTHONPATH.
Each scenario (tests/frameworks/) drives the framework's path as training does: create (its image,
snapshot or template), exec, files, its reward, delete."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from server_helpers import KEY_A, run_scenario

pytestmark = pytest.mark.asyncio

HERE = Path(__file__).parent
# The frameworks' archives sit beside the checkout (../shared/frameworks); a clone elsewhere on
# this machine finds them at the workspace's, or where SANDBOXES_FRAMEWORKS says.
ARCHIVES = next(
    (
        p
        for p in (
            Path(os.environ.get("SANDBOXES_FRAMEWORKS", "/nonexistent")),
            HERE.parent.parent / "shared" / "frameworks",
            Path("/work/shared/frameworks"),
        )
        if p.is_dir()
    ),
    HERE.parent.parent / "shared" / "frameworks",
)


def unpacked(archive: str, into: Path) -> Path:
    """The framework's source tree of `archive` (in ARCHIVES), unpacked under `into`."""
    path = ARCHIVES / archive
    if not path.exists():
        pytest.fail(f"{path} is missing: the frameworks' archives come with the repository's checkout")
    with tarfile.open(path) as tar:
        tar.extractall(into, filter="data")
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


def http(server: Any) -> str:
    return f"http://127.0.0.1:{server.http_port}"


def e2b_env(server: Any) -> dict[str, str]:
    return {"E2B_API_URL": http(server), "E2B_SANDBOX_URL": http(server), "E2B_API_KEY": KEY_A}


async def scenario(venv: str, script: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    return await run_scenario(venv, f"../frameworks/{script}", args, env)


async def test_slime_runs_its_agent_as_its_own_user(make_server, tmp_path) -> None:
    """slime (E2B): the task's image by a metadata key, `useradd agent` and `chown agent:agent`
    (a Debian user database in the sandbox), the agent's files and detached commands as `agent`."""
    server = await make_server(http_port=0, warm=1, image_metadata_key="swe/image")
    src = unpacked("slime-624b824.tar.gz", tmp_path)
    env = {**e2b_env(server), "SLIME_AGENT_SANDBOX_IMAGE_METADATA_KEY": "swe/image", "PYTHONPATH": str(src)}
    o = await scenario("e2b", "slime_scenario.py", ["python:3.11-slim"], env)
    assert o["repo"] == 0
    assert o["agent"][:2] == ["agent", "/home/agent"] and "agent" in o["agent"][2:], o
    assert o["owner"] == "agent:agent"
    code, text = o["run"]
    assert code == 0 and text.startswith("42\n") and "app.py" in text, o
    assert o["read"] == "x = 2\nprint(x * 21)\n"
    assert o["root_only"] != 0  # the agent is not root
    assert len(server.service.registry) == 0

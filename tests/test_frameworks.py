"""The RL frameworks' own sandbox code, unmodified, against a real `sandboxes serve`: each
framework's provider, installed from the package registry at the version its lock file pins (in a
client venv of tests/clients/), or, for a framework that is not published, its source at the commit
named in ../shared/frameworks/README.md, unpacked from that archive onto the client's PYTHONPATH.
Each scenario (tests/frameworks/) drives the framework's path as training does: create (its image,
snapshot or template), exec, files, its reward, delete."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import wait_until
from server_helpers import KEY_A, client_python, run_scenario

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def process(argv: list[str], env: dict[str, str], health: str) -> AsyncIterator[None]:
    """A framework's own server (`argv`) while it answers `health`; killed after."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:

        async def up() -> bool:
            try:
                async with aiohttp.ClientSession() as s, s.get(health) as r:
                    return r.status == 200
            except aiohttp.ClientError:
                assert proc.returncode is None, await proc.stderr.read()  # type: ignore[union-attr]
                return False

        await wait_until(up, timeout=60)
        yield
    finally:
        proc.kill()
        await proc.wait()


async def test_open_r1_code_reward_through_execute_batch(make_server, tmp_path) -> None:
    """open-r1's code reward, its indented script per completion: through this server's own
    `/execute_batch` (keyless, as its router is), and through open-r1's router script on this
    server's E2B API; the same rewards both ways, and no sandbox left behind."""
    server = await make_server(http_port=0, warm=1, http_insecure=True)
    src = unpacked("open-r1-1416fa0.tar.gz", tmp_path) / "src"
    want = [1.0, pytest.approx(1 / 3), 0.0]
    direct = await scenario("open-r1", "open_r1_scenario.py", [str(src), f"127.0.0.1:{server.http_port}"], {})
    assert direct["rewards"] == want, direct
    port = free_port()
    router = [client_python("open-r1"), str(src.parent / "scripts" / "e2b_router.py"), "--host", "127.0.0.1"]
    async with process([*router, "--port", str(port)], e2b_env(server), f"http://127.0.0.1:{port}/health"):
        routed = await scenario("open-r1", "open_r1_scenario.py", [str(src), f"127.0.0.1:{port}"], {})
    assert routed["rewards"] == want, routed
    assert len(server.service.registry) == 0


def daytona_env(server: Any) -> dict[str, str]:
    return {"DAYTONA_API_URL": f"{http(server)}/daytona", "DAYTONA_API_KEY": KEY_A}


async def test_rllm_warm_starts_from_its_snapshot_and_falls_back_cold(make_server, tmp_path) -> None:
    """rLLM (Daytona): a task's snapshot booted by `get_sandbox` with its RUN steps baked; once
    rLLM deletes it, the platform's answer to a create from a missing snapshot sends rLLM to its
    cold start (the base image, the RUN steps replayed); files by its upload calls; nothing left."""
    server = await make_server(http_port=0, warm=1)
    src = unpacked("rllm-9beb6e0.tar.gz", tmp_path / "src")
    task = tmp_path / "task"
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text(
        "FROM python:3.11-slim\nRUN mkdir -p /opt && echo baked > /opt/marker.txt\n"
        "RUN echo replayed > /opt/replayed.txt\n"
    )
    env = {**daytona_env(server), "PYTHONPATH": str(src), "RLLM_HOME": str(tmp_path / "home")}
    o = await scenario("rllm", "rllm_scenario.py", [str(task), str(tmp_path / "snapshots.json")], env)
    assert o["own_build"].startswith("TypeError") and "create_timeout" in o["own_build"], (
        o
    )  # docs/frameworks.md
    warm = o["warm"]
    assert warm["baked"] == "baked\n" and warm["replayed"] == "replayed\n" and warm["alive"] is True, o
    assert warm["snapshot"] == o["key"], o  # booted from the snapshot, its RUN steps not replayed
    assert warm["uploaded"] == "one\na\n" and warm["failed"].startswith("Command failed (exit 3)"), o
    assert o["closed_alive"] is False
    assert o["deleted"] is True and o["absent"] is True
    cold = o["cold"]
    assert cold["baked"] == "baked\n" and cold["replayed"] == "replayed\n" and cold["snapshot"] != o["key"], o
    assert o["discarded"] is True
    assert len(server.service.registry) == 0


async def test_tinker_grades_livecodebench_rollouts(make_server) -> None:
    """tinker-cookbook (SandboxFusion `/run_code`, keyless as its client is): LiveCodeBench's own
    test runner, which imports numpy, grades standard-input and call-based solutions, right and
    wrong, as its environment's reward does."""
    server = await make_server(http_port=0, warm=1, http_insecure=True)
    o = await scenario("tinker", "tinker_scenario.py", [], {"SANDBOX_URL": f"{http(server)}/run_code"})
    assert o["stdin_solved"] == {"passed": True, "status": "Success", "error": None}, o
    assert o["call_solved"]["passed"] is True, o
    for wrong in ("stdin_wrong", "call_wrong"):
        assert o[wrong]["passed"] is False and o[wrong]["status"] == "Failed", o
    assert len(server.service.registry) == 0


async def test_verl_scores_code_through_run_code(make_server) -> None:
    """veRL (SandboxFusion `/run_code`, keyless as its reward is): `compute_score` per response,
    standard-input and call-based cases, partial credit, and a program that does not compile."""
    server = await make_server(http_port=0, warm=1, http_insecure=True)
    o = await scenario("verl", "verl_scenario.py", [f"{http(server)}/run_code"], {})
    assert o["stdin_solved"]["score"] == 1.0 and o["call_solved"]["score"] == 1.0, o
    assert o["stdin_half"]["score"] == 0.5, o
    assert o["broken"]["score"] == 0.0, o
    assert len(server.service.registry) == 0


async def test_areal_runs_rollout_code_in_a_daytona_sandbox(make_server) -> None:
    """AReaL (Daytona): its runner's sandbox runs code, keeps files between runs, reports a
    failing program and one past its timeout as results, and is deleted on close."""
    server = await make_server(http_port=0, warm=1)
    o = await scenario("areal", "areal_scenario.py", [], daytona_env(server))
    assert o["first"] == ["120\n", 0, None], o
    assert o["again"] == ["kept\n", 0], o
    assert o["failed"][0] != 0 and "ValueError: bad input" in o["failed"][1], o
    assert o["slow"][0] != 0, o  # its timeout is a result, not an error of the runner
    assert o["after"] == ["still serving\n", 0], o
    assert len(server.service.registry) == 0


@pytest.mark.parametrize("provider", ["daytona", "e2b"])
async def test_nemo_gym_providers_run_its_agents_sandboxes(make_server, provider) -> None:
    """NeMo-Gym (its Daytona provider, and its E2B one on the SDK it pins, 2.46: the v1 create):
    the shipped provider config, a sandbox with its spec's environment and files, commands, files
    both ways, status, stop."""
    server = await make_server(http_port=0, warm=1)
    env = {
        **(daytona_env(server) if provider == "daytona" else e2b_env(server)),
        "SCENARIO_PROVIDER": provider,
    }
    o = await scenario("nemo-gym", "nemo_gym_scenario.py", [], env)
    assert o["exec"] == [0, "t-1\n42\n"], o
    assert o["cwd"] == "/tmp\n", o
    assert o["failed"][0] == 4 and "oops" in o["failed"][1], o
    # Its Daytona provider makes a command past its timeout a result; its E2B one raises.
    assert o["timeout"] == ([124, "timeout"] if provider == "daytona" else ["raised", "TimeoutError"]), o
    assert o["uploaded"] == "uploaded\n" and o["downloaded"] == "21\n", o
    # NeMo-Gym's Daytona provider reads the SDK's state enum with str(), which names the enum on
    # Python 3.11+: "unknown" on every platform (docs/frameworks.md).
    assert o["status"] == ("unknown" if provider == "daytona" else "running"), o
    assert len(server.service.registry) == 0


def harbor_task(at: Path, copy: bool = True, prebuilt: bool = False) -> Path:
    """A Harbor task: its environment a Dockerfile (a file copied in unless not `copy`, a RUN step,
    a work dir), or with `prebuilt` a prebuilt image (`docker_image`) and a work dir that the
    environment's files are uploaded to; its verifier a test script that rewards the answer 42."""
    (at / "environment").mkdir(parents=True)
    (at / "tests").mkdir()
    image = 'docker_image = "python:3.11-slim"\nworkdir = "/workdir"\n' if prebuilt else ""
    (at / "task.toml").write_text(
        'version = "1.0"\n\n[verifier]\ntimeout_sec = 120.0\n\n[agent]\ntimeout_sec = 120.0\n\n'
        f"[environment]\nbuild_timeout_sec = 600.0\n{image}"
    )
    (at / "instruction.md").write_text("Write the answer to /workdir/answer.txt.\n")
    (at / "environment" / "data.txt").write_text("data\n")
    if prebuilt:  # the oracle's solution answers 42 if the environment's files are in the work dir
        (at / "environment" / "setup.txt").write_text("setup\n")
        (at / "solution").mkdir()
        solve = at / "solution" / "solve.sh"
        solve.write_text(
            '#!/bin/bash\nif [ "$(cat data.txt setup.txt; pwd)" = "$(printf \'data\\nsetup\\n/workdir\')" ];'
            " then echo -n 42 > /workdir/answer.txt; fi\n"
        )
        solve.chmod(0o755)
    else:
        copied = "COPY data.txt /opt/data.txt\n" if copy else "RUN echo data > /opt/data.txt\n"
        (at / "environment" / "Dockerfile").write_text(
            f"FROM python:3.11-slim\nWORKDIR /workdir\n{copied}RUN echo setup > /opt/setup.txt\n"
        )
    test = at / "tests" / "test.sh"
    test.write_text(
        "#!/bin/bash\n"
        'if [ "$(cat /workdir/answer.txt)" = "42" ]; then echo 1 > /logs/verifier/reward.txt;'
        " else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    test.chmod(0o755)
    return at


@pytest.mark.parametrize("provider", ["daytona", "e2b"])
async def test_harbor_and_trl_run_a_task_and_its_verifier(make_server, tmp_path, provider) -> None:
    """Harbor + TRL (`HarborBashEnv`, its Daytona and E2B environments): the task's Dockerfile built
    (an E2B template, whose build ends as E2B's `user`; a Daytona declarative image), the model's
    commands, and the task's verifier run as the environment runs it (`su` on Daytona), per rollout.
    A Daytona image's `COPY` needs the build context the SDK uploads to the platform's object
    storage, which this server does not serve (README): the Daytona task writes its file instead."""
    server = await make_server(http_port=0, warm=1)
    task = harbor_task(tmp_path / "task", copy=provider == "e2b")
    env = daytona_env(server) if provider == "daytona" else e2b_env(server)
    o = await scenario("harbor", "harbor_scenario.py", [provider, str(task)], env)
    right, wrong = o["rollouts"]
    assert right["instruction"] == "Write the answer to /workdir/answer.txt.", o
    assert right["seen"] == "data\nsetup\n/workdir\n", o
    assert (right["reward"], wrong["reward"]) == (1.0, 0.0), o
    assert len(server.service.registry) == 0


async def test_harbor_opensandbox_environment_runs_a_trial(make_server, tmp_path) -> None:
    """Harbor's OpenSandbox environment under Harbor's own trial runner (`--env opensandbox
    --ek protocol=http`; TRL's `HarborBashEnv` cannot pass `protocol`, so it reaches an https
    server only: tests/frameworks/harbor_opensandbox_scenario.py): a prebuilt-image task, its
    environment's files in its work dir, the oracle's solution and the verifier's reward; the
    nop agent's trial rewards nothing."""
    server = await make_server(http_port=0, warm=1)
    task = harbor_task(tmp_path / "task", prebuilt=True)
    env = {"OPENSANDBOX_DOMAIN": f"{http(server)}/opensandbox", "OPENSANDBOX_API_KEY": KEY_A}
    o = await scenario("harbor", "harbor_opensandbox_scenario.py", [str(task), str(tmp_path / "trials")], env)
    assert o["oracle"] == {"reward": 1.0, "error": None}, o
    assert o["nop"] == {"reward": 0.0, "error": None}, o
    assert len(server.service.registry) == 0


async def test_nemo_gym_opensandbox_provider_runs_its_agents_sandboxes(make_server) -> None:
    """NeMo-Gym's OpenSandbox provider (its shipped config: through the server proxy, commands in
    the background polled for status and logs, its aiohttp transport): a sandbox with its spec's
    environment and files, commands, files both ways, status, terminals (one-shot, a live shell,
    detached), pause and resume with a process
    living through them, a sandbox from a snapshot, its snapshot tool, stop."""
    server = await make_server(http_port=0, warm=1)
    env = {
        "OPENSANDBOX_DOMAIN": f"{http(server)}/opensandbox",
        "OPENSANDBOX_API_KEY": KEY_A,
        "SCENARIO_PROVIDER": "opensandbox",
    }
    o = await scenario("nemo-gym", "nemo_gym_scenario.py", [], env)
    assert o["exec"] == [0, "t-1\n42\n"], o
    assert o["cwd"] == "/tmp\n", o
    # Its commands run in the background, polled: their output one stream, stderr the status's
    # error; one past its timeout is killed (-1, as execd reports it).
    assert o["failed"] == [4, "exit status 4"] and o["failed_output"] == "oops\n", o
    assert o["timeout"] == [-1, None], o
    assert o["pty_exec"] == [3, True] and o["pipe_exec"] == [2, "out\n", "err\n"], o
    assert o["pty_session"] == [0, True] and o["pty_detached"] == [0, True], o
    assert o["uploaded"] == "uploaded\n" and o["downloaded"] == "21\n", o
    assert o["status"] == "running" and o["paused"] == "paused" and o["ticking"] is True, o
    assert o["restored"] == [0, "from-the-snapshot\n21\n"], o
    assert o["snapshot_tool"] == [0, 0, True] and o["snapshots_left"] == 0, o
    assert len(server.service.registry) == 0

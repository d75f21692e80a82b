"""The `sandboxes` command, run as a real subprocess: embedded and remote exec, ls / rm, and a
`serve` that stops cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import types
from pathlib import Path

import pytest
from server_helpers import KEY_A, wait_for

import sandboxes
from sandboxes import cli
from sandboxes.client import AsyncSandboxClient
from sandboxes.templates import Template

PKG_ROOT = str(Path(sandboxes.__file__).resolve().parent.parent)


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    # The subprocess imports the same `sandboxes` as this test process.
    env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SANDBOXES_API_KEY", None)
    env.update(extra)
    return env


async def run_cli(*args: str, stdin: bytes = b"", **env: str) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sandboxes",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(**env),
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), 240)
    return proc.returncode, out, err


async def test_exec_embedded(native) -> None:
    rc, out, err = await run_cli("exec", "--", "sh", "-c", "echo out; echo err >&2; exit 5")
    assert rc == 5, err
    assert out == b"out\n" and b"err\n" in err


async def test_exec_embedded_shell_env_stdin_and_file(native, tmp_path) -> None:
    f = tmp_path / "input.txt"
    f.write_text("file content\n")
    rc, out, err = await run_cli(
        "exec",
        "-e",
        "X=42",
        "-f",
        f"{f}:in.txt",
        "--stdin",
        "-c",
        'echo "$X"; cat in.txt; cat',
        stdin=b"piped\n",
    )
    assert rc == 0, err
    assert out == b"42\nfile content\npiped\n"


async def test_exec_embedded_timeout_exit_code(native) -> None:
    rc, _, err = await run_cli("exec", "--timeout", "0.5", "--", "sleep", "30")
    assert rc == cli.EXIT_TIMEOUT, err
    assert b"timed out" in err


async def test_exec_usage_errors() -> None:
    rc, _, err = await run_cli("exec")
    assert rc == 2 and b"nothing to run" in err
    rc, _, err = await run_cli("ls")
    assert rc == 2 and b"--address" in err


async def test_exec_remote_ls_rm(server) -> None:
    rc, out, err = await run_cli("exec", "--address", server.address, "--", "echo", "remote")
    assert rc != 0 and b"auth" in err  # no key
    rc, out, err = await run_cli(
        "exec", "--address", server.address, "--api-key", KEY_A, "--", "echo", "remote"
    )
    assert rc == 0 and out == b"remote\n", err

    async with AsyncSandboxClient(server.address, KEY_A, timeout=60) as client:
        a = await client.create(labels={"cli": "yes"})
        b = await client.create(labels={"cli": "yes"})
        c = await client.create(labels={"cli": "no"})
        rc, out, err = await run_cli(
            "ls", "--json", "--label", "cli=yes", "--address", server.address, SANDBOXES_API_KEY=KEY_A
        )
        assert rc == 0, err
        assert {row["id"] for row in json.loads(out)} == {a.id, b.id}
        rc, out, err = await run_cli(
            "rm", "--label", "cli=yes", "--address", server.address, "--api-key", KEY_A
        )
        assert rc == 0, err
        assert set(out.decode().split()) == {a.id, b.id}
        rc, out, err = await run_cli(
            "rm", c.id, "sb-missing", "--address", server.address, "--api-key", KEY_A
        )
        assert rc == 1 and out.decode().split() == [c.id] and b"sb-missing" in err
        assert await client.list() == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_serve_stops_cleanly_on_sigterm(native, tmp_path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("carol:carol-key\n")
    templates = tmp_path / "templates.json"
    templates.write_text(json.dumps({"default": {"limits": {"wall_time_s": 30}}, "small": {"warm": 0}}))
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sandboxes",
        "serve",
        "--port",
        str(port),
        "--warm",
        "1",
        "--api-keys-file",
        str(keys),
        "--template-file",
        str(templates),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_env(),
    )
    try:
        async with AsyncSandboxClient(f"127.0.0.1:{port}", "carol-key", timeout=60, retries=0) as client:

            async def up() -> bool:
                try:
                    return (await client.health())["status"] == "serving"
                except sandboxes.BackendUnavailable:
                    assert proc.returncode is None, "server exited"
                    return False

            await wait_for(up, "server to serve", bound_s=60)
            sb = await client.create(template="small")
            assert (await sb.exec(["echo", "hi"])).stdout == b"hi\n"
            assert set((await client.health())["pools"]) == {"default", "small"}
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert rc == 0
    err = (await proc.stderr.read()).decode()
    logs = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    msgs = [entry["msg"] for entry in logs]
    assert "server started" in msgs and "server stopped" in msgs, err
    # The pool removed every sandbox it made (the session's leak check sees the agents themselves).
    run_root = Path(os.environ["SANDBOXES_RUN_DIR"])
    started = next(e for e in logs if e["msg"] == "server started")
    assert started["auth"] == "api-key"
    assert set(started["criu"]) == {"found", "version", "ok", "reason"}  # the host's CRIU, probed at start
    assert not [
        p for p in run_root.glob("pool-*") if (p / "owner.json").exists() and _owner_pid(p) == proc.pid
    ]


def _owner_pid(pool_dir: Path) -> int | None:
    try:
        return int(json.loads((pool_dir / "owner.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def test_serve_without_keys_refuses(monkeypatch) -> None:
    monkeypatch.delenv("SANDBOXES_API_KEYS", raising=False)
    assert cli.main(["serve", "--port", "0"]) == 2


def test_load_templates(tmp_path) -> None:
    f = tmp_path / "t.json"
    f.write_text(json.dumps([{"name": "py", "limits": {"wall_time_s": 5}, "env": {"A": "1"}, "warm": 2}]))
    t = cli.load_templates(str(f))
    assert isinstance(t["py"], Template) and t["py"].limits.wall_time_s == 5 and t["py"].warm == 2
    f.write_text("{not json")
    with pytest.raises(SystemExit):
        cli.load_templates(str(f))


def test_bench_dispatch(monkeypatch) -> None:
    seen = []
    pkg, fake = types.ModuleType("bench"), types.ModuleType("bench.run")
    fake.main = lambda argv: seen.append(argv) or 0
    pkg.run = fake
    monkeypatch.setitem(sys.modules, "bench", pkg)
    monkeypatch.setitem(sys.modules, "bench.run", fake)
    assert cli.main(["bench", "--quick"]) == 0
    assert seen == [["--quick"]]


async def test_checkpoint_create_ls_exec_fork_rm(server) -> None:
    """`sandboxes checkpoint` and `sandboxes fork` against a real server, as a subprocess."""
    addr = {"SANDBOXES_ADDRESS": server.address, "SANDBOXES_API_KEY": KEY_A}
    async with AsyncSandboxClient(server.address, KEY_A) as client:
        sb = await client.create()
        await sb.exec(["sh", "-c", "echo saved > /work/s"])
        rc, out, err = await run_cli("checkpoint", "create", sb.id, "--name", "setup", "--keep", **addr)
        assert rc == 0, err
        cid = out.decode().strip()
        rc, out, err = await run_cli("checkpoint", "ls", "--json", **addr)
        assert rc == 0, err
        [row] = json.loads(out)
        assert (row["id"], row["name"], row["expires_at"]) == (cid, "setup", None)
        rc, out, err = await run_cli("exec", "--checkpoint", cid, "--", "cat", "/work/s", **addr)
        assert (rc, out) == (0, b"saved\n"), err
        rc, out, err = await run_cli("fork", sb.id, "-n", "2", **addr)
        assert rc == 0, err
        forks = out.decode().split()
        assert len(forks) == 2
        for fid in forks:
            assert (await (await client.get(fid)).exec(["cat", "/work/s"])).stdout == b"saved\n"
            await client.delete(fid)
        rc, out, err = await run_cli("checkpoint", "rm", cid, "cp-missing", **addr)
        assert rc == 1 and out.decode().split() == [cid] and b"cp-missing" in err
        await sb.close()


async def test_volume_pause_resume(server) -> None:
    """`sandboxes volume`, `exec --volume`, `pause` and `resume` against a real server."""
    addr = {"SANDBOXES_ADDRESS": server.address, "SANDBOXES_API_KEY": KEY_A}
    rc, out, err = await run_cli("volume", "create", "cli-vol", "--size", str(8 << 20), **addr)
    assert rc == 0, err
    vid = out.decode().strip()
    rc, out, err = await run_cli(
        "exec", "--volume", "/v=cli-vol", "--", "sh", "-c", "echo kept > /v/f", **addr
    )
    assert rc == 0, err
    rc, out, err = await run_cli("exec", "--volume", "/v=cli-vol:ro", "--", "cat", "/v/f", **addr)
    assert (rc, out) == (0, b"kept\n"), err
    rc, out, err = await run_cli("volume", "ls", "--json", **addr)
    assert rc == 0 and [r["id"] for r in json.loads(out)] == [vid], err
    async with AsyncSandboxClient(server.address, KEY_A) as client:
        sb = await client.create()
        rc, out, err = await run_cli("pause", sb.id, **addr)
        assert (rc, out) == (0, b"paused\n"), err
        assert (await client.get(sb.id)).template == "default"
        rc, out, err = await run_cli("resume", sb.id, **addr)
        assert (rc, out) == (0, b"resumed\n"), err
        assert (await sb.exec(["echo", "ok"])).stdout == b"ok\n"
        await sb.close()
    rc, out, err = await run_cli("volume", "rm", "cli-vol", "no-such", **addr)
    assert rc == 1 and out.decode().split() == ["cli-vol"] and b"no-such" in err

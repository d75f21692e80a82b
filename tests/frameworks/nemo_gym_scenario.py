"""NeMo-Gym's sandbox API with its Daytona, E2B and OpenSandbox providers (`nemo_gym/sandbox`,
unmodified, from its wheel, configured by the provider configs it ships) against a real
`sandboxes serve`, run by tests/test_frameworks.py in the nemo-gym client venv (Python 3.13):

    SCENARIO_PROVIDER=daytona|e2b|opensandbox python nemo_gym_scenario.py
        (daytona: DAYTONA_API_URL, DAYTONA_API_KEY set; e2b: E2B_API_URL, E2B_SANDBOX_URL,
        E2B_API_KEY set; opensandbox: OPENSANDBOX_DOMAIN, OPENSANDBOX_API_KEY set; the provider
        is named in the environment, not as an argument: NeMo-Gym reads the command line as Hydra
        overrides of its global config)

What its agents do with a sandbox: start one (the spec's image, environment and files), run
commands (a cwd, a failing one, one past its timeout), upload and download a file, read its
status, stop it. On OpenSandbox also what its provider adds: terminals (execd's PTY sessions),
pause and resume (a process living through them), a sandbox started from a snapshot (`provider_options.snapshot_id`; the snapshot
taken with the OpenSandbox SDK, as NeMo-Gym takes none itself), and its snapshot tool
(`providers/opensandbox/snapshots.py`) auditing and reaping it. Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

from bare import installed
from nemo_gym.sandbox import AsyncSandbox, SandboxSpec
from omegaconf import OmegaConf

PACKAGE = Path(installed("nemo_gym"), "nemo_gym")
IMAGES = {"daytona": "python:3.11-slim", "e2b": "base", "opensandbox": "python:3.11-slim"}


def provider_config(name: str) -> dict:
    """The provider config NeMo-Gym ships for `name`, its `${oc.env:...}` resolved."""
    shipped = OmegaConf.load(PACKAGE / "sandbox" / "providers" / name / "configs" / f"{name}.yaml")
    sandbox = OmegaConf.to_container(shipped, resolve=True)["sandbox"]
    return {name: sandbox[name]}


async def main(name: str) -> None:
    out: dict = {}
    spec = SandboxSpec(image=IMAGES[name], env={"TASK": "t-1"}, files={"/tmp/task/input.txt": "21\n"})
    async with AsyncSandbox(provider=provider_config(name)) as sb:
        await sb.start(spec)
        r = await sb.exec("echo $TASK; python3 -c 'print(int(open(\"/tmp/task/input.txt\").read()) * 2)'")
        out["exec"] = [r.return_code, r.stdout]
        r = await sb.exec("pwd", cwd="/tmp")
        out["cwd"] = r.stdout
        r = await sb.exec("echo oops >&2; exit 4")
        out["failed"] = [r.return_code, r.stderr or r.stdout]
        try:  # a result from one provider, an exception from the other
            r = await sb.exec("sleep 30", timeout_s=2)
            out["timeout"] = [r.return_code, r.error_type]
        except TimeoutError as e:
            out["timeout"] = ["raised", type(e).__name__]
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp, "up.py")
            src.write_text("print('uploaded')\n")
            await sb.upload(src, "/tmp/task/up.py")
            r = await sb.exec("python3 /tmp/task/up.py")
            out["uploaded"] = r.stdout
            await sb.download("/tmp/task/input.txt", Path(tmp, "down.txt"))
            out["downloaded"] = Path(tmp, "down.txt").read_text()
        out["status"] = str(getattr(await sb.status(), "value", "")).lower()
        if name == "opensandbox":
            out.update(await opensandbox_extras(sb))
        await sb.stop()
        out["stopped"] = str(getattr(await sb.status(), "value", "")).lower()
    print(json.dumps(out), flush=True)


async def opensandbox_extras(sb: AsyncSandbox) -> dict:
    """Pause / resume, a sandbox from a snapshot, and NeMo-Gym's snapshot tool."""
    import contextlib
    import io

    from nemo_gym.sandbox.providers.opensandbox.snapshots import cleanup_snapshots
    from opensandbox import SandboxManager
    from opensandbox.config import ConnectionConfig

    out: dict = {}
    # Its background commands' logs are one stream (stdout), its stderr the status's error.
    r = await sb.exec("echo oops >&2; exit 4")
    out["failed_output"] = r.stdout

    # Terminals: a one-shot command on a terminal and on pipes, a live shell keeping its state,
    # and a command run detached (re-attached to drain what it wrote meanwhile).
    r = await sb.pty.exec("echo on-a-terminal; (exit 3)")
    out["pty_exec"] = [r.return_code, "on-a-terminal" in r.stdout]
    r = await sb.pty.exec("echo out; echo err >&2; exit 2", pty=False)
    out["pipe_exec"] = [r.return_code, r.stdout, r.stderr]
    shell = await sb.pty.create()
    await sb.pty.exec("cd /tmp/task; X=kept", session=shell)
    r = await sb.pty.exec('echo "$X $(pwd)"', session=shell)
    out["pty_session"] = [r.return_code, "kept /tmp/task" in r.stdout]
    r = await sb.pty.exec("sleep 1; echo done-detached", detach=True, poll_interval_s=0.3)
    out["pty_detached"] = [r.return_code, "done-detached" in r.stdout]
    await shell.close()

    await sb.exec("nohup sh -c 'while true; do echo tick >> /tmp/ticks; sleep 0.1; done' >/dev/null 2>&1 &")
    await sb.pause()
    out["paused"] = str(getattr(await sb.status(), "value", "")).lower()
    await sb.resume()
    before = len((await sb.exec("cat /tmp/ticks")).stdout.split())
    await asyncio.sleep(0.5)
    out["ticking"] = len((await sb.exec("cat /tmp/ticks")).stdout.split()) > before

    domain, key = os.environ["OPENSANDBOX_DOMAIN"], os.environ["OPENSANDBOX_API_KEY"]
    await sb.exec("echo from-the-snapshot > /tmp/task/kept.txt")
    config = ConnectionConfig(domain=domain, api_key=key)
    async with await SandboxManager.create(connection_config=config) as m:
        snap = await m.create_snapshot(sb._require_handle().sandbox_id, name="nemo")
    spec = SandboxSpec(provider_options={"snapshot_id": snap.id})
    async with AsyncSandbox(provider=provider_config("opensandbox")) as restored:
        await restored.start(spec)
        r = await restored.exec("cat /tmp/task/kept.txt /tmp/task/input.txt")
        out["restored"] = [r.return_code, r.stdout]
        await restored.stop()

    listing = io.StringIO()
    with contextlib.redirect_stdout(listing):
        audit = await cleanup_snapshots(
            domain=domain,
            protocol="http",
            access_key=key,
            sandbox_id=None,
            states=None,
            snapshot_ids=None,
            kill_paused=False,
            reap=False,
        )
        reaped = await cleanup_snapshots(
            domain=domain,
            protocol="http",
            access_key=key,
            sandbox_id=None,
            states=["Ready"],
            snapshot_ids=None,
            kill_paused=False,
            reap=True,
        )
    out["snapshot_tool"] = [audit, reaped, f"Would delete snapshot {snap.id}" in listing.getvalue()]
    async with await SandboxManager.create(connection_config=config) as m:
        from opensandbox.models.sandboxes import SnapshotFilter

        out["snapshots_left"] = len((await m.list_snapshots(SnapshotFilter())).snapshot_infos)
    return out


if __name__ == "__main__":
    # NeMo-Gym's global config (Hydra) writes a run directory under the working directory.
    with tempfile.TemporaryDirectory() as cwd:
        os.chdir(cwd)
        asyncio.run(main(os.environ["SCENARIO_PROVIDER"]))
    os._exit(0)

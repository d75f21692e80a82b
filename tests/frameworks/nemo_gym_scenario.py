"""NeMo-Gym's sandbox API with its Daytona and E2B providers (`nemo_gym/sandbox`, unmodified, from
its wheel, configured by the provider configs it ships) against a real `sandboxes serve`, run by
tests/test_frameworks.py in the nemo-gym client venv (Python 3.13):

    SCENARIO_PROVIDER=daytona|e2b python nemo_gym_scenario.py
        (daytona: DAYTONA_API_URL, DAYTONA_API_KEY set; e2b: E2B_API_URL, E2B_SANDBOX_URL,
        E2B_API_KEY set; the provider is named in the environment, not as an argument: NeMo-Gym
        reads the command line as Hydra overrides of its global config)

What its agents do with a sandbox: start one (the spec's image, environment and files), run
commands (a cwd, a failing one, one past its timeout), upload and download a file, read its
status, stop it. Prints one JSON object.
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
IMAGES = {"daytona": "python:3.11-slim", "e2b": "base"}


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
        await sb.stop()
        out["stopped"] = str(getattr(await sb.status(), "value", "")).lower()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    # NeMo-Gym's global config (Hydra) writes a run directory under the working directory.
    with tempfile.TemporaryDirectory() as cwd:
        os.chdir(cwd)
        asyncio.run(main(os.environ["SCENARIO_PROVIDER"]))
    os._exit(0)

"""Replicas of the served release as a cluster runs them, against an EMULATED cluster (no real
cluster exists here): the emulated API server and kubelet stand-in run in the test's process
(`sandboxes.testing.kube_emulator`); each replica is a `sandboxes serve --backend kubernetes`
process of its own, started either from this checkout or as a container of the built manager
image with the command, args and env of the chart's Deployment (`launcher`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandboxes.client import AsyncSandboxClient
from sandboxes.testing.kube_emulator import EMULATED_IMAGE, emulated_cluster, match_selector

KEY = "replica-test-key-0123456789abcdef"
CLAIMED = "sandboxes.io/claimed"
OWNER = "sandboxes.io/owner"


def _started(line: str) -> str | None:
    with contextlib.suppress(ValueError):
        rec = json.loads(line)
        if rec.get("msg") == "server started":
            return str(rec["address"])
    return None


@dataclass
class Replica:
    name: str
    address: str
    proc: Any  # asyncio subprocess (of `sandboxes serve`, or of `docker run`)
    container: str | None = None
    log: list[str] = field(default_factory=list)
    drain: asyncio.Task[None] | None = None
    client: AsyncSandboxClient | None = None


class Release:
    """The emulated cluster and the replicas serving on it; `endpoints` are the replicas a
    Service would route to (those started and not being stopped)."""

    def __init__(self, api: Any, kubelet: Any, url: str, tmp: Path, *, image: str | None, warm: int) -> None:
        self.api = api
        self.kubelet = kubelet
        self.url = url
        self.tmp = tmp
        self.image = image
        self.warm = warm
        self.replicas: dict[str, Replica] = {}
        self.endpoints: list[str] = []
        self._turn = 0
        self.config_dir = tmp / "config"
        self.config_dir.mkdir()
        self.config_dir.chmod(0o755)

    def write_config(self, kube: dict[str, Any], templates: dict[str, Any]) -> None:
        settings = {"api_url": self.url, "image": EMULATED_IMAGE, "port_from_annotation": True, **kube}
        (self.config_dir / "kube.json").write_text(json.dumps(settings))
        (self.config_dir / "templates.json").write_text(json.dumps(templates))
        keys = self.config_dir / "keys"
        keys.mkdir(exist_ok=True)
        (keys / "api-keys").write_text(f"tester:{KEY}\n")
        for p in (self.config_dir / "kube.json", self.config_dir / "templates.json", keys / "api-keys"):
            p.chmod(0o644)
        keys.chmod(0o755)

    # --- replicas -----------------------------------------------------------------------------

    async def start(self, name: str, *, deployment: dict[str, Any] | None = None) -> Replica:
        """Start replica `name`; returns once it serves. `deployment` is the chart's rendered
        Deployment, whose container command / args / env the image launcher runs."""
        env = {**os.environ, "SANDBOXES_MANAGER_ID": name, "POD_NAME": name, "POD_NAMESPACE": "default"}
        cfg = self.config_dir
        container = None
        if self.image is None:
            argv = [sys.executable, "-m", "sandboxes", "serve", "--backend", "kubernetes"]
            argv += ["--kube-config", str(cfg / "kube.json"), "--template-file", str(cfg / "templates.json")]
            argv += [
                "--api-keys-file",
                str(cfg / "keys" / "api-keys"),
                "--port",
                "0",
                "--warm",
                str(self.warm),
            ]
            argv += ["--grace", "5"]
        else:
            assert deployment is not None
            spec = deployment["spec"]["template"]["spec"]["containers"][0]
            args = [a for a in spec["args"] if not a.startswith(("--port=", "--metrics-port=", "--warm="))]
            args += ["--port=0", f"--warm={self.warm}", "--grace=5"]
            container = f"sandboxes-replica-{name}-{os.getpid()}"
            argv = ["docker", "run", "--rm", "--name", container, "--network", "host", "--read-only"]
            argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--user", "65532:65532"]
            argv += ["--tmpfs", "/tmp:size=64m", "-v", f"{cfg}:/etc/sandboxes:ro"]
            for e in spec.get("env") or ():
                if "value" in e:
                    argv += ["-e", f"{e['name']}={e['value']}"]
            argv += [
                "-e",
                f"POD_NAME={name}",
                "-e",
                "POD_NAMESPACE=default",
                "-e",
                f"SANDBOXES_MANAGER_ID={name}",
            ]
            argv += ["--entrypoint", spec["command"][0], self.image, *args]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=env
        )
        assert proc.stdout is not None
        rep = Replica(name, "", proc, container)
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), 180)
            assert line, f"replica {name} exited ({await proc.wait()}) before serving:\n" + "".join(rep.log)
            rep.log.append(line.decode(errors="replace"))
            address = _started(line.decode(errors="replace"))
            if address is not None:
                rep.address = address
                break
        rep.drain = asyncio.create_task(self._read(rep))
        rep.client = AsyncSandboxClient(rep.address, api_key=KEY)
        self.replicas[name] = rep
        self.endpoints.append(name)
        return rep

    async def _read(self, rep: Replica) -> None:
        assert rep.proc.stdout is not None
        async for line in rep.proc.stdout:
            rep.log.append(line.decode(errors="replace"))

    def client(self, name: str | None = None) -> AsyncSandboxClient:
        """A client of replica `name`, else of the next endpoint in turn (as a Service spreads
        connections)."""
        if name is None:
            assert self.endpoints, "no replica serves"
            name = self.endpoints[self._turn % len(self.endpoints)]
            self._turn += 1
        client = self.replicas[name].client
        assert client is not None
        return client

    async def kill(self, name: str) -> None:
        """SIGKILL: the replica ends with nothing cleaned up."""
        rep = self.replicas.pop(name)
        self.endpoints.remove(name)
        if rep.container:
            subprocess.run(
                ["docker", "kill", "--signal", "KILL", rep.container], capture_output=True, check=False
            )
        else:
            rep.proc.send_signal(signal.SIGKILL)
        await self._reap(rep)

    async def stop(self, name: str) -> None:
        """What a rolling update does to a pod: out of the Service's endpoints, then SIGTERM; the
        replica drains (running calls finish) and exits."""
        rep = self.replicas.pop(name)
        self.endpoints.remove(name)
        if rep.container:
            subprocess.run(
                ["docker", "kill", "--signal", "TERM", rep.container], capture_output=True, check=False
            )
        else:
            rep.proc.send_signal(signal.SIGTERM)
        await self._reap(rep)

    async def _reap(self, rep: Replica) -> None:
        try:
            await asyncio.wait_for(rep.proc.wait(), 60)
        finally:
            if rep.drain is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(rep.drain, 5)
            if rep.client is not None:
                await rep.client.close()

    async def close(self) -> None:
        for name in list(self.replicas):
            await self.stop(name)

    # --- what the cluster holds ------------------------------------------------------------------

    def pods(self, selector: str = "") -> list[dict[str, Any]]:
        return [
            p
            for p in self.api.objects_of("pods")
            if match_selector(selector, p["metadata"].get("labels"))
            and "sandboxes.io/pool" in (p["metadata"].get("labels") or {})
        ]

    def claimed(self) -> dict[str, str]:
        """Claimed sandbox pod -> the replica (owner label) holding it."""
        return {p["metadata"]["name"]: p["metadata"]["labels"][OWNER] for p in self.pods(f"{CLAIMED}=true")}

    def owner_of(self, name: str) -> str:
        """The owner label value of replica `name`'s pods (its identity and process id)."""
        for p in self.pods():
            if p["metadata"]["labels"].get("sandboxes.io/manager") == name:
                return str(p["metadata"]["labels"][OWNER])
        raise AssertionError(f"replica {name} has no pod")


@contextlib.asynccontextmanager
async def release(
    tmp: Path, *, image: str | None = None, warm: int = 2, **kubelet: Any
) -> AsyncIterator[Release]:
    async with emulated_cluster(**kubelet) as (api, kube, url):
        rel = Release(api, kube, url, tmp, image=image, warm=warm)
        try:
            yield rel
        finally:
            await rel.close()

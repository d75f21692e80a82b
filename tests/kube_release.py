"""Replicas of the served release as a cluster runs them, against an EMULATED cluster (no real
cluster exists here): the emulated API server and kubelet stand-in run in the test's process
(`sandboxes_testing.kube_emulator`); each replica is a `sandboxes serve --backend kubernetes`
process of its own, started either from this checkout or as a container of the built manager
image with the command, args and env of the chart's Deployment (`launcher`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandboxes_testing.kube_emulator import EMULATED_IMAGE, emulated_cluster, match_selector

from sandboxes.client import AsyncSandboxClient

KEY = "replica-test-key-0123456789abcdef"
CLAIMED = "sandboxes.io/claimed"
OWNER = "sandboxes.io/owner"


def _started(line: str) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError):
        rec = json.loads(line)
        if rec.get("msg") == "server started":
            return dict(rec)
    return None


class Service:
    """A Service's virtual IP as kube-proxy makes it: each TCP connection goes to the next of the
    release's endpoints, in turn; a replica out of the endpoints gets no new connection."""

    def __init__(self, release: Release) -> None:
        self.release = release
        self.server: asyncio.Server | None = None
        self.address = ""
        self._turn = 0
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        self.address = f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        endpoints = self.release.endpoints
        if not endpoints:
            writer.close()
            return
        name = endpoints[self._turn % len(endpoints)]
        self._turn += 1
        host, _, port = self.release.replicas[name].address.rpartition(":")
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(_pipe(src, dst))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(1 << 16):
            dst.write(data)
            await dst.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        dst.close()


@dataclass
class Replica:
    name: str
    address: str
    proc: Any  # asyncio subprocess (of `sandboxes serve`, or of `docker run`)
    container: str | None = None
    http_port: int | None = None
    ports_port: int | None = None
    log: list[str] = field(default_factory=list)
    drain: asyncio.Task[None] | None = None
    client: AsyncSandboxClient | None = None


class Release:
    """The emulated cluster and the replicas serving on it; `endpoints` are the replicas a
    Service would route to (those started and not being stopped)."""

    def __init__(
        self,
        api: Any,
        kubelet: Any,
        url: str,
        tmp: Path,
        *,
        image: str | None,
        deployment: dict[str, Any] | None,
        warm: int,
    ) -> None:
        self.api = api
        self.kubelet = kubelet
        self.url = url
        self.tmp = tmp
        self.image = image
        self.deployment = deployment
        self.warm = warm
        self.replicas: dict[str, Replica] = {}
        self.endpoints: list[str] = []
        self.service = Service(self)
        self._service_clients: list[AsyncSandboxClient] = []
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

    async def start(self, name: str) -> Replica:
        """Start replica `name`; returns once it serves. The image launcher runs the container
        command / args / env of the chart's rendered Deployment."""
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
            argv += ["--http-port", "0", "--ports-port", "0", "--grace", "5"]
        else:
            assert self.deployment is not None
            spec = self.deployment["spec"]["template"]["spec"]["containers"][0]
            # Every replica shares this host's network: ports the kernel picks, no metrics port.
            fixed = ("--port=", "--metrics-port=", "--http-port=", "--ports-port=", "--warm=", "--grace=")
            args = [a for a in spec["args"] if not a.startswith(fixed)]
            args += ["--port=0", "--http-port=0", "--ports-port=0", f"--warm={self.warm}", "--grace=5"]
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
            started = _started(line.decode(errors="replace"))
            if started is not None:
                rep.address, rep.http_port = str(started["address"]), started.get("http_port")
                rep.ports_port = started.get("ports_port")
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

    def service_client(self) -> AsyncSandboxClient:
        """A client of the Service (its own connection, to whichever replica the Service picked)."""
        client = AsyncSandboxClient(self.service.address, api_key=KEY)
        self._service_clients.append(client)
        return client

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
        self.endpoints.remove(name)
        await self._signal(name, signal.SIGKILL)

    async def stop(self, name: str, *, pre_stop_s: float = 0.0) -> None:
        """What a rolling update does to a pod: out of the Service's endpoints, the preStop hook's
        wait, then SIGTERM; the replica drains (running calls finish) and exits."""
        self.endpoints.remove(name)
        await asyncio.sleep(pre_stop_s)
        await self._signal(name, signal.SIGTERM)

    async def _signal(self, name: str, sig: signal.Signals) -> None:
        rep = self.replicas.pop(name)
        if rep.container:
            docker = await asyncio.create_subprocess_exec(
                "docker", "kill", "--signal", sig.name, rep.container, stdout=asyncio.subprocess.DEVNULL
            )
            await docker.wait()
        else:
            rep.proc.send_signal(sig)
        try:
            await asyncio.wait_for(rep.proc.wait(), 60)
        finally:
            if rep.drain is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(rep.drain, 5)
            if rep.client is not None:
                await rep.client.close()

    async def close(self) -> None:
        for client in self._service_clients:
            await client.close()
        for name in list(self.replicas):
            await self.stop(name)
        await self.service.close()

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
    tmp: Path,
    *,
    image: str | None = None,
    deployment: dict[str, Any] | None = None,
    warm: int = 2,
) -> AsyncIterator[Release]:
    """The emulated cluster and its replicas (launched from `image` when given, else from this
    checkout); every replica still running at the end is stopped."""
    async with emulated_cluster() as (api, kube, url):
        rel = Release(api, kube, url, tmp, image=image, deployment=deployment, warm=warm)
        await rel.service.start()
        try:
            yield rel
        finally:
            await rel.close()

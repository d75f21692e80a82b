"""A container registry on loopback (Debian's `docker-registry`, the distribution project's
server) and a small image in it that holds this machine's agent, a shell and a few tools: what
the tests and benchmarks of the kubernetes backend use as a cluster's registry and its sandbox
image, and a pool on the emulated cluster that uses both (`cluster_pool`). Everything made is
removed on exit: the registry's storage, the images the local engine has of it and their
unpacked copies in the image cache."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from sandboxes import _bridge

__all__ = ["REGISTRY_BIN", "cluster_pool", "loopback_registry", "push_small_image"]

REGISTRY_BIN = "/usr/bin/docker-registry"
# The programs the tests run in a pod of the small image, with the libraries they load.
PROGRAMS = (
    "sh",
    "bash",
    "cat",
    "dd",
    "head",
    "ls",
    "mkdir",
    "pgrep",
    "rm",
    "id",
    "stat",
    "sleep",
    "echo",
    "test",
    "true",
    "env",
    "touch",
)
CONFIG = """version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def loopback_registry() -> Iterator[str]:
    """A registry on 127.0.0.1: yields its `host:port`."""
    d = Path(tempfile.mkdtemp(prefix="sandboxes-registry-"))
    port = _free_port()
    (d / "config.yml").write_text(CONFIG.format(root=d / "storage", port=port))
    proc = subprocess.Popen(
        [REGISTRY_BIN, "serve", str(d / "config.yml")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    host = f"127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://{host}/v2/", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    why = proc.stderr.read() if proc.stderr is not None else b""
                    raise RuntimeError(f"docker-registry exited: {why!r}") from None
                time.sleep(0.05)
        yield host
    finally:
        proc.terminate()
        proc.wait()
        _remove_images(host)
        shutil.rmtree(d, ignore_errors=True)


def _libraries(path: str) -> set[str]:
    out = subprocess.run(["ldd", path], capture_output=True, text=True, check=False).stdout
    return {w for w in out.split() if w.startswith("/")}


def push_small_image(host: str, name: str = "sandboxes-small") -> str:
    """An image of the agent, a shell and a few tools (from this host), pushed to the registry at
    `host`; returns its name there."""
    agent = _bridge.agent_path()
    files = {"/usr/local/bin/sandbox-agent": agent}
    for prog in PROGRAMS:
        real = os.path.realpath(shutil.which(prog) or f"/bin/{prog}")
        files[f"/bin/{prog}"] = real
        for lib in _libraries(real) | _libraries(agent):
            files[lib] = os.path.realpath(lib)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for d in ("tmp", "etc", "proc", "dev", "sys", "run", "root", "work", "usr/local/bin", "lib64"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            t.addfile(info)
        for dest, src in sorted(files.items()):
            t.add(src, dest.lstrip("/"))
        info = tarfile.TarInfo("etc/passwd")
        data = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    image = f"{host}/{name}:latest"
    subprocess.run(["docker", "import", "-", image], input=buf.getvalue(), check=True, capture_output=True)
    subprocess.run(["docker", "push", image], check=True, capture_output=True)
    return image


def _remove_images(host: str) -> None:
    """The local engine's images of the registry at `host`, and their unpacked copies."""
    from sandboxes.backends.images import cache_root

    out = subprocess.run(
        ["docker", "images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    for line in out.splitlines():
        name, image_id = line.split()
        if name.startswith(f"{host}/"):
            subprocess.run(["docker", "rmi", "-f", name], capture_output=True, check=False)
            key = "docker-" + image_id.removeprefix("sha256:")
            shutil.rmtree(cache_root() / key, ignore_errors=True)
            (cache_root() / f".{key}.lock").unlink(missing_ok=True)


@contextlib.asynccontextmanager
async def cluster_pool(state: Path, name: str, nodes: int = 0) -> AsyncIterator[tuple[Any, str, Any]]:
    """A started pool of root template `name`, the small image of a registry on loopback, on the
    EMULATED cluster (user-namespace mode; `nodes` kubelets, one per node), pushing its
    checkpoints to that registry; its checkpoint and volume records under `state`. Yields (the
    pool, the image, the emulated API server)."""
    import sandboxes
    from sandboxes import Template
    from sandboxes.backends.kubernetes import KubeConfig, KubernetesBackend

    from .kube_emulator import emulated_cluster

    with loopback_registry() as host:
        image = push_small_image(host)
        async with emulated_cluster(user_namespaces=True, nodes=nodes) as (api, _kubelet, url):
            cfg = KubeConfig(
                api_url=url,
                identity="registry-pool",
                port_from_annotation=True,
                image=image,
                registry_url=f"http://{host}",
            )
            root = Template(name=name, user="root", backend="kubernetes")
            pool = sandboxes.Pool(
                backend=KubernetesBackend(cfg),
                warm=0,
                templates={name: root},
                claim_timeout=120.0,
                checkpoint_dir=state / "checkpoints",
                volume_dir=state / "volumes",
            )
            await pool.start()
            try:
                yield pool, image, api
            finally:
                await pool.close()

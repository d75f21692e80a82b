"""End to end on a REAL cluster: install the Helm chart, create sandboxes through the API server,
exec in them, uninstall. Runs only when `KUBECONFIG` is set; skips otherwise.

Needs images the cluster can pull (or already has): `SANDBOXES_E2E_MANAGER_IMAGE` (the `sandboxes`
package, default `sandboxes-manager:0.1.0`) and `SANDBOXES_E2E_SANDBOX_IMAGE` (the agent plus
python3, default `sandboxes-sandbox:latest`; e.g. `kind load docker-image` them). The API server
is reached through `kubectl port-forward` when kubectl is installed, else at
`SANDBOXES_E2E_ADDRESS` (host:port of the chart's Service, e.g. a LoadBalancer). Set
`SANDBOXES_E2E_HOST_USERS=null` on clusters without user-namespace support.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

if not os.environ.get("KUBECONFIG"):
    pytest.skip("no KUBECONFIG: the real-cluster end-to-end test is skipped", allow_module_level=True)

import helm_python as helm

import sandboxes

CHART = Path(__file__).resolve().parent.parent / "deploy" / "helm" / "sandboxes"
NAMESPACE = os.environ.get("SANDBOXES_E2E_NAMESPACE", "sandboxes-e2e")
RELEASE = "e2e"


def _image(env: str, default: str) -> dict[str, str]:
    ref = os.environ.get(env, default)
    repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    return {"repository": repo, "tag": tag}


@pytest.fixture(scope="module")
def api_key() -> str:
    return secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def release(api_key: str) -> Iterator[str]:
    host_users = os.environ.get("SANDBOXES_E2E_HOST_USERS", "false")
    values = {
        "manager": {
            "image": {
                **_image("SANDBOXES_E2E_MANAGER_IMAGE", "sandboxes-manager:0.1.0"),
                "pullPolicy": "IfNotPresent",
            },
            "warm": 2,
        },
        "sandbox": {
            "image": {
                **_image("SANDBOXES_E2E_SANDBOX_IMAGE", "sandboxes-sandbox:latest"),
                "pullPolicy": "IfNotPresent",
            },
            "hostUsers": None if host_users == "null" else host_users == "true",
        },
        "apiKeys": {"keys": [{"name": "e2e", "key": api_key}]},
    }
    if host_users == "false":  # root inside needs user-namespaced pods
        values["templates"] = {
            "default": {"lease_ttl_s": 30, "memory_bytes": 536870912, "cpu_quota": 1.0},
            "root": {"user": "root", "warm": 0, "lease_ttl_s": 30, "root_size_bytes": 268435456},
        }
    with helm.Config(namespace=NAMESPACE, kubeconfig_path=os.environ["KUBECONFIG"]) as cfg:
        cfg.install(
            str(CHART),
            RELEASE,
            values,
            namespace=NAMESPACE,
            create_namespace=True,
            wait="watcher",
            timeout=300,
        )
        try:
            yield f"{RELEASE}-sandboxes"
        finally:
            cfg.uninstall(RELEASE, wait="watcher", timeout=300, ignore_not_found=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def address(release: str) -> Iterator[str]:
    given = os.environ.get("SANDBOXES_E2E_ADDRESS")
    if given:
        yield given
        return
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("neither kubectl (for port-forward) nor SANDBOXES_E2E_ADDRESS is available")
    port = _free_port()
    proc = subprocess.Popen(
        [kubectl, "-n", NAMESPACE, "port-forward", f"svc/{release}", f"{port}:50051"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Forwarding from 127.0.0.1:PORT -> 50051": it listens
        assert "Forwarding" in line, line
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


async def _sandbox_pods(pool_label: str) -> list[str]:
    from kubernetes_asyncio import client, config

    await config.load_kube_config()
    async with client.ApiClient() as api:
        pods = await client.CoreV1Api(api).list_namespaced_pod(
            NAMESPACE, label_selector=f"sandboxes.io/pool={pool_label}"
        )
        return [p.metadata.name for p in pods.items if not p.metadata.deletion_timestamp]


@contextlib.asynccontextmanager
async def _client(address: str, key: str) -> AsyncIterator[sandboxes.AsyncSandboxClient]:
    async with sandboxes.AsyncSandboxClient(address, api_key=key) as c:
        yield c


async def test_create_exec_and_pods_are_direct(release: str, address: str, api_key: str) -> None:
    async with _client(address, api_key) as client:
        sb = await client.create(template="default", timeout=120)
        try:
            r = await sb.exec(["python3", "-c", "import os; print(6 * 7, os.getuid())"], timeout=30)
            assert r.exit_code == 0 and r.stdout.split() == [b"42", b"65534"], r.stderr
            # Sandboxed code has no egress and no service-account token.
            r = await sb.exec(
                "ls /var/run/secrets/kubernetes.io 2>&1; cat /var/run/sandboxes/token", timeout=10
            )
            assert r.exit_code != 0 and b"Permission denied" in r.stdout + r.stderr
        finally:
            await sb.close()
    assert len(await _sandbox_pods(release)) >= 2  # the warm set


async def test_a_root_sandbox(release: str, address: str, api_key: str) -> None:
    """Root inside a user-namespaced pod: uid 0, a writable root of its own, no token, no power
    over the pod's namespaces."""
    if os.environ.get("SANDBOXES_E2E_HOST_USERS", "false") != "false":
        pytest.skip("root sandboxes need user-namespaced pods")
    async with _client(address, api_key) as client:
        sb = await client.create(template="root", timeout=180)
        try:
            r = await sb.exec(
                "id -u && echo changed >> /usr/lib/os-release && tail -1 /usr/lib/os-release", timeout=30
            )
            assert (r.exit_code, r.stdout) == (0, b"0\nchanged\n"), r
            for cmd in ("cat /var/run/sandboxes/token", "mount -t tmpfs none /mnt", "kill -0 1"):
                r = await sb.exec(cmd, timeout=10)
                assert r.exit_code != 0, (cmd, r)
        finally:
            await sb.close()


async def _manager_pods() -> list[str]:
    from kubernetes_asyncio import client, config

    await config.load_kube_config()
    async with client.ApiClient() as api:
        pods = await client.CoreV1Api(api).list_namespaced_pod(
            NAMESPACE, label_selector="app.kubernetes.io/component=manager"
        )
        return sorted(
            p.metadata.name
            for p in pods.items
            if not p.metadata.deletion_timestamp and p.status.phase == "Running"
        )


@contextlib.contextmanager
def _forward(target: str) -> Iterator[str]:
    """`kubectl port-forward` to one manager pod: its gRPC port on this host."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("the replica scenario needs kubectl (port-forward to each manager pod)")
    port = _free_port()
    proc = subprocess.Popen(
        [kubectl, "-n", NAMESPACE, "port-forward", target, f"{port}:50051"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "Forwarding" in line, line
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_replicas_share_sandboxes_and_survive_a_lost_one(release: str, api_key: str) -> None:
    """The chart's two replicas: a sandbox created through one is used and deleted through the
    other; one replica's pod deleted at once (no grace: as a crash) while 20 sandboxes are
    claimed, every one keeps serving through the other."""
    from kubernetes_asyncio import client as kclient
    from kubernetes_asyncio import config

    managers = await _manager_pods()
    if len(managers) < 2:
        pytest.skip(f"the release runs {len(managers)} manager replica(s)")
    first, second = managers[:2]
    with _forward(f"pod/{first}") as a_addr, _forward(f"pod/{second}") as b_addr:
        async with _client(a_addr, api_key) as a, _client(b_addr, api_key) as b:
            made = await a.create(timeout=120)
            sb = await b.get(made.id)
            await sb.write_files({"f.txt": b"through the other"})
            assert await (await a.get(made.id)).read_file("f.txt") == b"through the other"
            await b.delete(made.id)
            held = [await a.create(timeout=120) for _ in range(20)]
            await config.load_kube_config()
            async with kclient.ApiClient() as api:
                await kclient.CoreV1Api(api).delete_namespaced_pod(first, NAMESPACE, grace_period_seconds=0)
            for h in held:
                r = await (await b.get(h.id)).exec(["echo", "alive"], timeout=30)
                assert r.stdout == b"alive\n", r
            await asyncio.sleep(30)  # past a template's lease: only the survivor renews now
            for h in held:
                r = await (await b.get(h.id)).exec(["echo", "still"], timeout=30)
                assert r.stdout == b"still\n", r
                await b.delete(h.id)


async def test_uninstall_leaves_no_sandbox_pods(release: str, address: str) -> None:
    with helm.Config(namespace=NAMESPACE, kubeconfig_path=os.environ["KUBECONFIG"]) as cfg:
        cfg.uninstall(RELEASE, wait="watcher", timeout=300)
    deadline = time.monotonic() + 120  # bound: the managers delete their pods on SIGTERM
    while await _sandbox_pods(release):
        assert time.monotonic() < deadline, "sandbox pods left after uninstall"
        await asyncio.sleep(1)

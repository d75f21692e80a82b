"""Volumes on the kubernetes backend: a PersistentVolumeClaim each, mounted by the pods of the
sandboxes that ask for it (the agent binds the pod's mount into the root it builds), shared by
them, kept after them, read-only when asked, bounded by the claim's size, and the claim deleted
with the volume.

The cluster is EMULATED (`sandboxes_testing.kube_emulator`: no real API server, kubelet or
storage provisioner can run here): its kubelet, in user-namespace mode, provisions each claim as
an ext4 image of the size the claim asks for and binds it into the pods that mount it."""

from __future__ import annotations

import os

import pytest
from sandboxes_testing.registry import REGISTRY_BIN, cluster_pool
from test_e2b_api import scenario

import sandboxes

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="root sandboxes need a manager that is root"),
    pytest.mark.skipif(not os.path.exists(REGISTRY_BIN), reason="docker-registry is not installed"),
]
MB = 1 << 20


async def out(sb: sandboxes.Sandbox, cmd: str) -> str:
    r = await sb.exec(["/bin/sh", "-c", cmd])
    assert r.exit_code == 0, r
    return r.stdout.decode()


def claims(api) -> list[dict]:
    return api.objects_of("persistentvolumeclaims")


async def test_a_volume_is_a_claim_its_sandboxes_share(images, tmp_path) -> None:
    async with cluster_pool(tmp_path, "root") as (pool, _, api):
        vol = await pool.create_volume("data", size_bytes=8 * MB)
        (claim,) = claims(api)
        assert claim["metadata"]["name"] == vol.claim == f"sandboxes-{vol.id}"
        assert claim["spec"]["resources"]["requests"]["storage"] == str(8 * MB)
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
        async with pool.sandbox("root", volumes={"/data": "data"}) as a:
            await out(a, "echo from-a > /data/a")
            async with pool.sandbox("root", volumes={"/mnt/shared": ("data", True)}) as b:
                assert await out(b, "cat /mnt/shared/a") == "from-a\n"
                r = await b.exec(["/bin/sh", "-c", "echo x > /mnt/shared/b"])
                assert r.exit_code != 0 and b"Read-only file system" in r.stderr
            # Its bound is the claim's: ENOSPC, and the sandbox serves on.
            r = await a.exec(["/bin/sh", "-c", "cat /dev/zero > /data/big"])
            assert r.exit_code != 0 and b"No space left on device" in r.stderr
            assert await out(a, "rm /data/big; cat /data/a") == "from-a\n"
        async with pool.sandbox("root", volumes={"/data": vol.id}) as later:
            assert await out(later, "cat /data/a") == "from-a\n"  # kept after its sandboxes
        # A pod cannot mount a volume over a place of its own.
        with pytest.raises(sandboxes.errors.InvalidRequest):
            await pool.claim("root", volumes={"/tmp": "data"})
        await pool.delete_volume("data")
        assert claims(api) == [] and pool.volumes.list() == []


async def test_e2b_volumes_on_kubernetes(images, tmp_path, make_server) -> None:
    """The unmodified e2b SDK's volumes on a server whose backend is the (emulated) cluster: a
    claim mounted by two sandboxes at once; the content API (which works on the server's host)
    refused for it."""
    async with cluster_pool(tmp_path, "agent") as (pool, _, api):
        server = await make_server(pool=pool, own_pool=False, http_port=0)
        o = await scenario(server, "volumes_mounted")
        assert o["seen_by_b"] == "from-a\n" and o["destroyed"] is True
        assert "error" in o["content_api"] and "cluster's storage" in o["content_api"]["message"]
        assert claims(api) == []

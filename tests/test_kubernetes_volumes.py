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
from sandboxes_testing.loopback_registry import cluster_pool
from test_e2b_api import scenario

import sandboxes

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.timeout(300),
    pytest.mark.requires("root", reason="root sandboxes need a manager that is root"),
    pytest.mark.requires("registry", reason="docker-registry is not installed"),
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


async def test_versions_of_a_volume_on_kubernetes(images, tmp_path) -> None:
    """Volumes kept as versions (the Prime API's) on the cluster: a pod's writes into its layered
    volume published as a version; a pod attaching it gets an image with the version's layers
    (from the registry) beneath a volume of its own; stacked versions carry a deletion."""
    from sandboxes.server.volume_versions import VolumeVersions

    async with cluster_pool(tmp_path, "root") as (pool, _, _):
        store = VolumeVersions(tmp_path / "volume-versions", pool)
        store.create("k", "data")
        first = store.attach("k", "data", "/data", False)
        async with pool.sandbox("root", layered_volumes=[first.mount()]) as sb:
            assert await out(sb, "ls -A /data") == ""
            await out(sb, "echo one > /data/a; mkdir /data/d; echo x > /data/d/f")
            await store.publish(sb, "k", first)
        second = store.attach("k", "data", "/v", False)
        async with pool.sandbox("root", layered_volumes=[second.mount()]) as sb:
            assert await out(sb, "cat /v/a /v/d/f") == "one\nx\n"
            await out(sb, "rm /v/a; echo two > /v/b")
            await store.publish(sb, "k", second)
        reader = store.attach("k", "data", "/data", True)
        async with pool.sandbox("root", layered_volumes=[reader.mount()]) as sb:
            assert await out(sb, "ls -A /data; cat /data/b") == "b\nd\ntwo\n"
            assert (await sb.exec(["/bin/sh", "-c", "touch /data/z"])).exit_code != 0
            # The sandbox's own checkpoint never holds the volume.
            cp = await sb.checkpoint()
            own = pool.checkpoints.layer_path(cp.layers[-1])
            assert not (own / "data").exists() or not os.listdir(own / "data")
        await store.delete("k", "data")


async def test_the_prime_sdk_s_volumes_on_kubernetes(images, tmp_path, make_server) -> None:
    """The unmodified prime-sandboxes 0.5.1 runs the volumes scenario of the host backends on a
    server whose backend is the (emulated) cluster with its registry."""
    from test_prime_api import CURRENT, check_volumes, volumes_of_another_key
    from test_prime_api import scenario as prime_scenario

    async with cluster_pool(tmp_path, "agent") as (pool, image, _):
        server = await make_server(pool=pool, own_pool=False, http_port=0)
        check_volumes(await prime_scenario(server, CURRENT, "volumes", image=image))
        await volumes_of_another_key(server)

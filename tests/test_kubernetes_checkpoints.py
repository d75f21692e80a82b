"""Checkpoints, sandboxes made from them and forks on the kubernetes backend, through the cluster's
registry: a checkpoint's layer goes from the pod's agent to the manager and, for the sandboxes
made from it, on top of the template's image to the registry, whose image the nodes pull.

The cluster is EMULATED (`sandboxes_testing.kube_emulator`: no real API server or kubelet can
run here), in its user-namespace mode, whose pods run their image (pulled from the registry by
the local Docker engine, as a node pulls it) as a container runtime runs a `hostUsers: false`
pod; the registry is a real one (Debian's `docker-registry`) on loopback. The template's image is
a small one of this host's agent and tools, pushed there first."""

from __future__ import annotations

import pytest
from sandboxes_testing.loopback_registry import cluster_pool
from test_e2b_api import check_memory_refused, scenario
from test_e2b_templates import scenario as template_scenario
from test_opensandbox_api import check_snapshots as check_opensandbox_snapshots

import sandboxes

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.timeout(300),
    pytest.mark.requires("root", reason="root sandboxes need a manager that is root"),
    pytest.mark.requires("registry", reason="docker-registry is not installed"),
]


@pytest.fixture
async def kube_pool(images, tmp_path):
    async with cluster_pool(tmp_path, "root") as (pool, _, _):
        yield pool


async def out(sb: sandboxes.Sandbox, cmd: str) -> str:
    r = await sb.exec(["/bin/sh", "-c", cmd])
    assert r.exit_code == 0, r
    return r.stdout.decode()


async def test_a_checkpoint_made_on_kubernetes_is_what_its_sandboxes_start_from(kube_pool) -> None:
    pool = kube_pool
    async with pool.sandbox("root") as sb:
        await out(
            sb, "echo one > /work/a; echo g > /work/gone; mkdir -p /opt/x; echo y > /opt/x/y; rm /bin/touch"
        )
        cp = await sb.checkpoint()
        await out(sb, "echo later > /work/b")
        async with pool.sandbox(checkpoint=cp) as made:
            assert await out(made, "cat /work/a /opt/x/y") == "one\ny\n"
            assert await out(made, "test -e /work/b || echo no-b; test -e /bin/touch || echo no-touch") == (
                "no-b\nno-touch\n"
            )
            await out(
                made,
                "echo two > /work/a; echo mine > /opt/mine; rm /work/gone; rm -r /opt/x; mkdir /opt/x; echo z > /opt/x/z",
            )
            second = await made.checkpoint()  # a checkpoint of a sandbox made from one: they stack
        assert await out(sb, "cat /work/a; test -e /opt/mine || echo no-mine") == "one\nno-mine\n"
    async with pool.sandbox(checkpoint=second) as again:
        # A deleted file and a directory made again (an opaque one: nothing of the old beneath).
        assert await out(again, "cat /work/a /opt/mine; ls /opt/x; test -e /work/gone || echo none") == (
            "two\nmine\nz\nnone\n"
        )


async def test_a_checkpoint_taken_on_one_node_starts_sandboxes_on_another(images, tmp_path) -> None:
    """Two EMULATED nodes (a kubelet each, pods bound to them in turn): a checkpoint of a pod on
    one node, a sandbox made from it on the other, whose node pulled the checkpoint's image from
    the registry: no byte of it goes from node to node, nor through the API server."""
    async with cluster_pool(tmp_path, "root", nodes=2) as (pool, _, api), pool.sandbox("root") as sb:
        await out(sb, "echo there > /work/f; mkdir -p /opt/o; echo o > /opt/o/p")
        cp = await sb.checkpoint()
        async with pool.sandbox(checkpoint=cp) as made:
            assert await out(made, "cat /work/f /opt/o/p") == "there\no\n"
            node = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in api.objects_of("pods")}
            source, there = node[sb.handle.backend_data.name], node[made.handle.backend_data.name]
            assert source != there
            assert any(":cp-" in image for image in api.kubelets[there].pulled), api.kubelets[there].pulled


async def test_forks_on_kubernetes_see_none_of_each_others_writes(kube_pool) -> None:
    pool = kube_pool
    async with pool.sandbox("root") as parent:
        await out(parent, "echo base > /work/state")
        forks = await parent.fork(2)
        try:
            for i, f in enumerate(forks):
                assert await out(f, f"cat /work/state; echo {i} > /work/mine") == "base\n"
            for i, f in enumerate(forks):
                assert await out(f, "cat /work/mine") == f"{i}\n"
            assert await out(parent, "test -e /work/mine || echo none") == "none\n"
        finally:
            for f in forks:
                await f.close()


async def test_a_template_built_through_the_e2b_api_on_kubernetes(images, tmp_path, make_server) -> None:
    """The unmodified e2b SDK builds a template from the registry's image on a server whose
    backend is the (emulated) cluster: the build's sandbox is a pod, its result pushed to the
    registry, and the template's sandboxes are pods of that image."""
    async with cluster_pool(tmp_path, "agent") as (pool, image, _):
        server = await make_server(pool=pool, own_pool=False, http_port=0)
        o = await template_scenario(server, "build_on", image)
        assert o == {"stdout": "one\ntwo\nthree\n", "deleted": 204}


async def test_a_pause_on_kubernetes_keeps_the_files(images, tmp_path, make_server) -> None:
    """A pod cannot be frozen: on kubernetes an E2B pause (the unmodified SDK) keeps the sandbox's
    files in a checkpoint and ends its pod; connect starts a pod from them under the same id."""
    async with cluster_pool(tmp_path, "agent") as (pool, _, _):
        server = await make_server(pool=pool, own_pool=False, http_port=0)
        o = await scenario(server, "pause_files")
        assert o["paused"] is True and o["state"] == "paused" and o["state_after"] == "running"
        assert o["command_while_paused"]["error"] == "SandboxUnreachableException"
        assert o["file"] == "kept" and o["killed"] is True
        # The background sleep ended with the pod (what runs is the command that looked).
        assert "sleep" not in o["processes"] and "cat" in o["processes"]


async def test_e2b_snapshots_on_kubernetes(images, tmp_path, make_server) -> None:
    """The unmodified e2b SDK's filesystem snapshots on the (emulated) cluster: sandboxes made
    from one see its files, each its own writes, no process; the full snapshot and fork, which
    carry processes, are refused as elsewhere."""
    async with cluster_pool(tmp_path, "agent") as (pool, _, _):
        server = await make_server(pool=pool, own_pool=False, http_port=0)
        o = await scenario(server, "snapshots")
        assert o["made"] == ["mine", "before"] and o["parent"] == "after" and o["made_processes"] == ""
        assert o["listed"] == [True] and o["by_name"] == [True]
        check_memory_refused(await scenario(server, "memory_refused"))
        assert (o["deleted"], o["deleted_again"]) == (True, False)


async def test_opensandbox_snapshots_on_kubernetes(images, tmp_path, make_server) -> None:
    """The unmodified opensandbox SDK's snapshots on the (emulated) cluster: a sandbox of the
    registry's image, a snapshot of it in the cluster's registry, a sandbox made from it with the
    files of its moment; another key neither sees nor uses it."""
    async with cluster_pool(tmp_path, "agent") as (pool, image, _):
        server = await make_server(pool=pool, own_pool=False, http_port=0)
        await check_opensandbox_snapshots(server, image)
        assert len(server.service.registry) == 0

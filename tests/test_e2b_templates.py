"""The E2B template API, proven by the unmodified `e2b` SDK (tests/clients/e2b.txt) against a
real server: `Template` builds from an image with env, run, work dir and copy steps and a start
command, the same build again is a cache hit, sandboxes are made from the template (by name and
by tag) and from a template built on it, tags move, a failing step fails the build and leaves no
template, another key sees none of it, and a delete removes it and its layers."""

from __future__ import annotations

import hashlib
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import memory_kib, million_entry_archive
from server_helpers import KEY_A, KEY_B, run_scenario
from test_e2b_api import e2b_server, url

from sandboxes import errors as E
from sandboxes.client import AsyncSandboxClient

pytestmark = pytest.mark.asyncio


async def scenario(
    server: Any, name: str, arg: str | None = None, *, key: str | None = None
) -> dict[str, Any]:
    env = {"E2B_API_URL": url(server), "E2B_SANDBOX_URL": url(server), "E2B_API_KEY": key or KEY_A}
    return await run_scenario("e2b", "e2b_template_scenarios.py", [name, *([arg] if arg else [])], env)


def layers(server: Any) -> set[str]:
    d = server.pool.checkpoints.layers_dir
    return {p.name for p in d.iterdir()} if d.exists() else set()


@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_templates(make_server, request, backend) -> None:
    """On docker the build and the template's sandboxes are containers of the image asked for."""
    image = request.getfixturevalue("dev_image") if backend == "docker" else "python:3.11-slim"
    server = await e2b_server(make_server, backend=backend)
    before = layers(server)
    o = await scenario(server, "templates", image)
    assert o["exists_before"] is False and o["exists"] is True and o["exists_missing"] is False
    assert o["info"]["name"] == "scn-app" and o["info"]["tags"] == ["default"]
    assert "built-line" in o["logs"] and "copied 2 files to /srv/app/code" in o["logs"]
    assert o["again_same_template"] and any(m.startswith("CACHED") for m in o["logs_again"])
    assert o["inside"] == (
        "hello from the build\n/srv/app\ndata from the context\nmain of app\nX = 42\ntool ran\n"
        "main of app\nstarted\nenv:unset\n"
    )
    assert o["isolated"] is False
    assert o["child"] == "hello from the build\nchild\n/srv/app\n"
    assert o["assigned"] == ["stable"] and o["tags"] == ["default", "stable"]
    assert o["by_tag"] == "hello from the build\n"
    assert o["tags_after"] == ["default"]
    assert o["missing_tag"]["error"] == "SandboxException" and o["missing_tag"]["message"].startswith("404: ")
    assert o["failed"]["error"] == "BuildException"
    assert o["failed"]["message"].endswith("failed with exit code 3: about-to-fail")
    # As on the platform, a name exists from its first build request; its tag only once built.
    assert o["failed_exists"] == [True, False]
    assert o["failed_create"]["error"] == "SandboxException" and o["failed_create"]["message"].startswith(
        "404: "
    )
    assert o["bad_user"]["error"] == "BuildException" and "nobody-here" in o["bad_user"]["message"]
    assert o["bad_name"]["error"] == "BuildException" and "400" in o["bad_name"]["message"]
    assert o["no_parent"]["error"] == "BuildException" and "scn-nope" in o["no_parent"]["message"]
    assert o["deleted_status"] == 204 and o["exists_after_delete"] is False
    # A deleted name is no template of this key: a create asks for an image of that name, which
    # the local backend runs on its agent template and the docker engine does not have.
    if backend == "local":
        assert o["create_after_delete"] == {"ok": "scn-app"}
    else:
        assert o["create_after_delete"]["message"].startswith("404: ")
    assert len(server.service.registry) == 0
    # The child template keeps its layers (the parent's beneath its own); the rest are gone.
    remaining = {cp.id for cp in server.pool.checkpoints.list()}
    assert len(remaining) == 1
    cp = server.pool.checkpoints.list()[0]
    assert layers(server) - before == set(cp.layers)


async def test_templates_belong_to_a_key(make_server) -> None:
    server = await e2b_server(make_server)
    o = await scenario(server, "build_one", "scn-mine")
    assert o["stdout"] == "one\n"
    other = await scenario(server, "other_key", "scn-mine", key=KEY_B)
    assert other["exists"] is False
    # Another key's name is no template of its own: its create runs the image of that name.
    assert other["create"] == {"ok": "scn-mine"}
    mine = await scenario(server, "other_key", "scn-mine")
    assert mine["exists"] is True


async def test_a_key_s_uploads_are_bounded(make_server) -> None:
    """A build whose upload would pass the key's bound on uploaded files fails with the server's
    413 (the SDK's FileUploadException); deleting a template makes room again."""
    server = await e2b_server(make_server)
    server.core.built.upload_quota = 3 << 20
    o = await scenario(server, "upload_quota", str(2 << 20))
    assert "ok" in o["scn-q1"]
    assert o["scn-q2"]["error"] == "FileUploadException" and "413" in o["scn-q2"]["message"]
    assert o["deleted"] == 204 and o["size"] == str(2 << 20)
    assert server.core.built.upload_bytes("alice") <= 3 << 20


async def test_a_key_s_copies_read_a_bounded_number_of_entries(make_server) -> None:
    """A build whose copy reads more archive entries than the key's bound (lowered here) fails
    with the SDK's BuildException naming the bound; nothing stays counted against the key."""
    server = await e2b_server(make_server)
    server.core.built.entry_quota = 20
    o = await scenario(server, "copy_many", "50")
    assert o["build"]["error"] == "BuildException", o
    assert "at most 20 archive entries" in o["build"]["message"], o
    assert not server.core.built._unpacking


async def test_the_image_named_by_metadata(make_server) -> None:
    server = await e2b_server(make_server, image_metadata_key="task-image")
    await scenario(server, "build_one", "scn-meta")
    o = await scenario(server, "by_metadata", "scn-meta")
    assert o["stdout"] == "one\n"


async def test_a_built_template_through_the_prime_api(make_server) -> None:
    """A template built through the E2B API is the `docker_image` of a Prime sandbox (the
    prime-sandboxes SDK), for its key only."""
    from test_prime_api import CURRENT
    from test_prime_api import scenario as prime_scenario

    server = await e2b_server(make_server)
    await scenario(server, "build_one", "scn-prime")
    o = await prime_scenario(server, CURRENT, "built", "scn-prime")
    assert o["one"] == {"stdout": "one\n", "stderr": "", "exit_code": 0}
    other = await prime_scenario(server, CURRENT, "built", "scn-prime", key=KEY_B)
    assert other["one"]["exit_code"] != 0  # the image of that name: no /one in it
    assert len(server.service.registry) == 0


@pytest.mark.parametrize("backend", ["local", "docker"])
async def test_verifiers_e2b_runtime(make_server, request, backend, tmp_path) -> None:
    """verifiers 0.4's `E2BRuntime` (tests/clients/verifiers-e2b.txt, on e2b 2.56) provisions two
    rollouts: the first builds its `vf-<digest>` template from the image, the second finds it; each
    runs commands as root in /app, a durable program, a live process, and writes and reads files.
    On docker the template's sandboxes run the image asked for."""
    image = request.getfixturevalue("images") if backend == "docker" else "python:3.11-slim"
    server = await make_server(http_port=0, warm=1, backend=backend)
    env = {
        "E2B_API_URL": url(server),
        "E2B_SANDBOX_URL": url(server),
        "E2B_API_KEY": KEY_A,
        "HOME": str(tmp_path),  # its template locks
        "VF_RUN_ID": "sandboxes-tests",
    }
    o = await run_scenario("verifiers-e2b", "verifiers_e2b_scenarios.py", ["session", image], env)
    assert o["template_0"] == o["template_1"] and o["template_0"].startswith("vf-")
    for i in range(2):
        assert o[f"run_{i}"] == [0, "/app 0\n", ""]
        assert o[f"exit_{i}"] == [4, "from-env\n"]
        assert o[f"read_{i}"] == f"written by rollout {i}\n"
        assert o[f"program_{i}"] == [2, "program-out\n", "program-err\n"]
        assert o[f"process_{i}"] == [0, "HELLO PROCESS\n\n"]
    (t,) = server.core.built.of("alice")
    assert len(t.builds) == 1  # built once, found the second time
    assert len(server.service.registry) == 0


async def test_built_templates_outlive_the_server_and_serve_grpc(make_server) -> None:
    """A built template is kept on disk: a new server on the same directory serves it, and our
    own client (gRPC) creates from it by name, `name:tag` and id; another key cannot."""
    server = await e2b_server(make_server)
    built = await scenario(server, "build_one", "scn-kept")
    await server.stop(grace=0)
    again = await e2b_server(make_server)
    async with AsyncSandboxClient(again.address, KEY_A) as c:
        for name in ("scn-kept", "scn-kept:default", built["template_id"]):
            async with c.sandbox(template=name) as sb:
                r = await sb.exec(["cat", "/one"])
                assert (r.exit_code, r.stdout) == (0, b"one\n")
        with pytest.raises(E.NotFound):
            await c.create(template="scn-kept:nope")
    async with AsyncSandboxClient(again.address, KEY_B) as c:
        with pytest.raises(E.NotFound):
            await c.create(template="scn-kept")
    assert len(again.service.registry) == 0


async def test_a_million_entry_archive_is_refused_in_bounded_memory_and_no_other_key_waits(
    make_server, tmp_path: Path
) -> None:
    """A COPY of a 7 MB tar.gz of a million empty files, sent as the `e2b` SDK sends it (the
    build request, the upload link, the PUT, the build with its steps), fails the build with
    the bound it passed (`MAX_COPY_ENTRIES`) before anything is written; the server's memory
    meanwhile grows by less than 64 MiB (the archive is read by a process of its own, as a
    stream), and another key's calls meanwhile answer within twice their usual time."""
    from sandboxes.server.template_build import MAX_COPY_ENTRIES

    server = await e2b_server(make_server)
    archive = tmp_path / "million.tar.gz"
    million_entry_archive(archive, 1_000_000, "many")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    mine, theirs = {"X-API-KEY": KEY_A}, {"X-API-KEY": KEY_B}
    async with aiohttp.ClientSession(base_url=url(server)) as http:

        async def other_key() -> float:
            t0 = time.perf_counter()
            async with http.get("/templates", headers=theirs) as r:
                assert r.status == 200, await r.text()
                await r.read()
            return time.perf_counter() - t0

        usual = [await other_key() for _ in range(30)]
        async with http.post("/v3/templates", headers=mine, json={"name": "scn-million"}) as r:
            made = await r.json()
        tid, bid = made["templateID"], made["buildID"]
        async with http.get(f"/templates/{tid}/files/{digest}", headers=mine) as r:
            link = (await r.json())["url"]
        with archive.open("rb") as f:
            async with http.put(link, data=f) as r:
                assert r.status == 200, await r.text()

        Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here on
        before = memory_kib("VmRSS")
        steps = [
            {"type": "COPY", "args": ["many", "/srv/many/", "", ""], "filesHash": digest, "force": False}
        ]
        body = {"fromImage": "python:3.11-slim", "steps": steps, "force": False}
        async with http.post(f"/v2/templates/{tid}/builds/{bid}", headers=mine, json=body) as r:
            assert r.status == 202, await r.text()
        during: list[float] = []
        while True:
            async with http.get(f"/templates/{tid}/builds/{bid}/status", headers=mine) as r:
                status = await r.json()
            if status["status"] not in ("waiting", "building"):
                break
            during.append(await other_key())
        grown_mib = (memory_kib("VmHWM") - before) / 1024

    assert status["status"] == "error", status
    assert f"more than {MAX_COPY_ENTRIES} entries" in status["reason"]["message"], status["reason"]
    assert grown_mib < 64, f"the server grew by {grown_mib:.0f} MiB"
    # Calls made while the archive was read: as fast as before, none held up (a reader in the
    # server's threads makes them twice as slow and holds some up for a second and more).
    assert len(during) >= 5, during
    assert statistics.median(during) < 2 * statistics.median(usual), (statistics.median(during), usual)
    assert max(during) < max(1.0, 20 * max(usual)), (max(during), max(usual))
    assert len(server.service.registry) == 0

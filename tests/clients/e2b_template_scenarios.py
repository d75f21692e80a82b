"""Template scenarios of the unmodified `e2b` SDK against a real `sandboxes serve`, run inside
the client virtualenv (tests/clients/e2b.txt) by tests/test_e2b_templates.py:

    python e2b_template_scenarios.py SCENARIO [ARG]    (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set)

Each prints one JSON object of what it observed; exceptions are recorded by class name.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from e2b import AsyncSandbox, AsyncTemplate, Template, wait_for_file
from e2b.api.client.api.templates import delete_templates_template_id
from e2b.api.client_async import get_api_client
from e2b.connection_config import ConnectionConfig


def err(e: BaseException) -> dict[str, Any]:
    return {"error": type(e).__name__, "message": str(e)[:500]}


async def aattempt(coro: Any) -> Any:
    try:
        return {"ok": await coro}
    except Exception as e:  # noqa: BLE001 - the class of the error is what is observed
        return err(e)


async def create_and_kill(name: str) -> str:
    """Creates a sandbox of `name` and kills it: the template it shows."""
    sb = await AsyncSandbox.create(name)
    info = await sb.get_info()
    await sb.kill()
    return info.template_id


def context() -> str:
    """A build context: a file, a directory of two, an executable script."""
    root = Path(tempfile.mkdtemp(prefix="e2b-ctx-"))
    (root / "data.txt").write_text("data from the context\n")
    (root / "app").mkdir()
    (root / "app" / "main.py").write_text("print('main of app')\n")
    (root / "app" / "lib").mkdir()
    (root / "app" / "lib" / "util.py").write_text("X = 42\n")
    (root / "tool.sh").write_text("#!/bin/sh\necho tool ran\n")
    return str(root)


def app_template(ctx: str, image: str) -> Any:
    return (
        Template(file_context_path=ctx)
        .from_image(image)
        .set_envs({"GREETING": "hello from the build"})
        .run_cmd('mkdir -p /opt/tool && echo "$GREETING" > /opt/tool/greeting && echo built-line')
        .set_workdir("/srv/app")
        .copy("data.txt", "/srv/app/")
        .copy("app", "/srv/app/code")
        .copy("tool.sh", "/usr/local/bin/tool", mode=0o755)
        .run_cmd("python3 code/main.py > ran.txt")
        .set_start_cmd("echo started > /tmp/started && sleep 1000", wait_for_file("/tmp/started"))
    )


async def templates(image: str | None) -> dict[str, Any]:
    """Everything a user does with templates, on `image`."""
    image = image or "python:3.11-slim"
    out: dict[str, Any] = {}
    ctx = context()
    out["exists_before"] = await AsyncTemplate.exists("scn-app")
    logs: list[Any] = []
    t0 = time.monotonic()
    info = await AsyncTemplate.build(
        app_template(ctx, image), "scn-app", cpu_count=2, memory_mb=1024, on_build_logs=logs.append
    )
    out["first_s"] = time.monotonic() - t0
    out["info"] = {"template_id": info.template_id, "name": info.name, "tags": info.tags}
    out["logs"] = [str(e.message) for e in logs]
    out["exists"] = await AsyncTemplate.exists("scn-app")
    out["exists_missing"] = await AsyncTemplate.exists("scn-nothing")

    logs2: list[Any] = []
    t0 = time.monotonic()
    again = await AsyncTemplate.build(app_template(ctx, image), "scn-app", on_build_logs=logs2.append)
    out["cached_s"] = time.monotonic() - t0
    out["again_same_template"] = again.template_id == info.template_id
    out["logs_again"] = [str(e.message) for e in logs2]

    sb = await AsyncSandbox.create("scn-app")
    r = await sb.commands.run(
        "cat /opt/tool/greeting; pwd; cat data.txt; python3 code/main.py; cat code/lib/util.py; tool; "
        'cat ran.txt; cat /tmp/started; echo "env:${GREETING:-unset}"',
        user="root",
    )
    out["inside"] = r.stdout
    await sb.files.write("/srv/app/scratch.txt", "only in the first sandbox")
    other = await AsyncSandbox.create("scn-app")
    out["isolated"] = await other.files.exists("/srv/app/scratch.txt")
    await sb.kill()
    await other.kill()

    # A template on a template: the parent's files, and its own.
    child = Template().from_template("scn-app").run_cmd("echo child > /opt/tool/child")
    await AsyncTemplate.build(child, "scn-child")
    sb = await AsyncSandbox.create("scn-child")
    out["child"] = (await sb.commands.run("cat /opt/tool/greeting /opt/tool/child; pwd")).stdout
    await sb.kill()

    # Tags.
    tagged = await AsyncTemplate.assign_tags("scn-app:default", ["stable"])
    out["assigned"] = tagged.tags
    out["tags"] = sorted(t.tag for t in await AsyncTemplate.get_tags("scn-app"))
    sb = await AsyncSandbox.create("scn-app:stable")
    out["by_tag"] = (await sb.commands.run("cat /opt/tool/greeting")).stdout
    await sb.kill()
    await AsyncTemplate.remove_tags("scn-app", "stable")
    out["tags_after"] = sorted(t.tag for t in await AsyncTemplate.get_tags("scn-app"))
    out["missing_tag"] = await aattempt(create_and_kill("scn-app:stable"))

    # A failing step: a failed build with the step's output, no template made.
    bad = Template().from_image(image).run_cmd("echo about-to-fail; exit 3")
    out["failed"] = await aattempt(AsyncTemplate.build(bad, "scn-bad"))
    out["failed_exists"] = [
        await AsyncTemplate.exists("scn-bad"),
        await AsyncTemplate.exists("scn-bad:default"),
    ]
    out["failed_create"] = await aattempt(create_and_kill("scn-bad"))
    out["bad_user"] = await aattempt(
        AsyncTemplate.build(Template().from_image(image).set_user("nobody-here"), "scn-bad")
    )
    out["bad_name"] = await aattempt(AsyncTemplate.build(Template().from_image(image), "Bad Name!"))
    out["no_parent"] = await aattempt(AsyncTemplate.build(Template().from_template("scn-nope"), "scn-bad"))

    # Deleted (the SDK's own API client: `Template` has no delete of its own).
    client = get_api_client(ConnectionConfig())
    for template_id in (info.template_id,):
        res = await delete_templates_template_id.asyncio_detailed(template_id=template_id, client=client)
        out["deleted_status"] = res.status_code
    out["exists_after_delete"] = await AsyncTemplate.exists("scn-app")
    out["create_after_delete"] = await aattempt(create_and_kill("scn-app"))
    return out


async def other_key(name: str | None) -> dict[str, Any]:
    """Another key's view of a template: none."""
    return {
        "exists": await AsyncTemplate.exists(name or ""),
        "create": await aattempt(create_and_kill(name or "")),
    }


async def build_one(name: str | None) -> dict[str, Any]:
    """Builds `name` from the image and a step, and creates one sandbox of it."""
    info = await AsyncTemplate.build(
        Template().from_image("python:3.11-slim").run_cmd("echo one > /one"), name or ""
    )
    sb = await AsyncSandbox.create(name or "", metadata={"run": "x"})
    r = await sb.commands.run("cat /one")
    await sb.kill()
    return {"template_id": info.template_id, "stdout": r.stdout}


async def build_on(image: str | None) -> dict[str, Any]:
    """Builds `scn-on` from `image` with run steps, creates a sandbox of it, reads what the steps
    wrote, deletes the template."""
    t = (
        Template()
        .from_image(image or "")
        .run_cmd("echo one > /one && mkdir -p /srv && echo two > /srv/two")
        .set_workdir("/srv")
        .run_cmd("echo three > here")
    )
    info = await AsyncTemplate.build(t, "scn-on")
    sb = await AsyncSandbox.create("scn-on")
    r = await sb.commands.run("cat /one /srv/two here")
    await sb.kill()
    client = get_api_client(ConnectionConfig())
    gone = await delete_templates_template_id.asyncio_detailed(template_id=info.template_id, client=client)
    return {"stdout": r.stdout, "deleted": gone.status_code}


async def upload_quota(size: str | None) -> dict[str, Any]:
    """Two builds copying a file of `size` bytes each (different content): the server's per-key
    bound on uploads is between one and two; after the first template is deleted the second
    builds."""
    ctx = Path(tempfile.mkdtemp(prefix="e2b-quota-"))
    out: dict[str, Any] = {}
    for name in ("scn-q1", "scn-q2"):
        (ctx / "blob").write_bytes(os.urandom(int(size or 0)))
        t = Template(file_context_path=str(ctx)).from_image("python:3.11-slim").copy("blob", "/blob")
        out[name] = await aattempt(AsyncTemplate.build(t, name))
    client = get_api_client(ConnectionConfig())
    gone = await delete_templates_template_id.asyncio_detailed(template_id="scn-q1", client=client)
    out["deleted"] = gone.status_code
    t = Template(file_context_path=str(ctx)).from_image("python:3.11-slim").copy("blob", "/blob")
    built = await AsyncTemplate.build(t, "scn-q2")
    sb = await AsyncSandbox.create(built.template_id)
    out["size"] = (await sb.commands.run("stat -c %s /blob")).stdout.strip()
    await sb.kill()
    return out


async def copy_many(count: str | None) -> dict[str, Any]:
    """A build copying a directory of `count` small files."""
    ctx = Path(tempfile.mkdtemp(prefix="e2b-many-"))
    (ctx / "many").mkdir()
    for i in range(int(count or 0)):
        (ctx / "many" / f"f{i}").write_text(str(i))
    t = Template(file_context_path=str(ctx)).from_image("python:3.11-slim").copy("many", "/srv/many")
    return {"build": await aattempt(AsyncTemplate.build(t, "scn-many"))}


async def by_metadata(name: str | None) -> dict[str, Any]:
    """A create whose metadata names what to run (the server's --image-metadata-key)."""
    sb = await AsyncSandbox.create(metadata={"task-image": name or ""})
    r = await sb.commands.run("cat /one")
    await sb.kill()
    return {"stdout": r.stdout}


async def bench(spec: str | None) -> dict[str, Any]:
    """bench/templates.py's driver: `builds` builds of `from_image` + a copied wheel installed with
    pip + a copied file (the first, then with `skip_cache`), as many cache hits, and `n` first
    commands from the template and from its base."""
    o = json.loads(spec or "{}")

    def template() -> Any:  # a new one each build: `skip_cache` marks the one it is given
        return (
            Template(file_context_path=o["ctx"])
            .from_image(o["image"])
            .set_user("root")
            .copy(o["wheel"], "/tmp/")
            .run_cmd(o["pip"])
            .copy("data.txt", "/srv/")
            .run_cmd("python3 -c 'import benchpkg; assert benchpkg.VALUE == 42'")
        )

    out: dict[str, Any] = {"build_s": [], "cached_s": []}
    for label, skip_cache in (
        ("build_s", False),
        *((label, True) for label in ["build_s"] * (o["builds"] - 1)),
    ):
        t0 = time.perf_counter()
        info = await AsyncTemplate.build(template(), "bench-template", skip_cache=skip_cache)
        out[label].append(time.perf_counter() - t0)
    for _ in range(o["builds"]):
        t0 = time.perf_counter()
        await AsyncTemplate.build(template(), "bench-template")
        out["cached_s"].append(time.perf_counter() - t0)
    for label, name in (("built", "bench-template"), ("base", o["image"])):
        times = []
        for _ in range(o["n"] + 2):
            t0 = time.perf_counter()
            sb = await AsyncSandbox.create(name)
            await sb.commands.run("true")
            times.append(time.perf_counter() - t0)
            await sb.kill()
        out[label] = times[2:]  # the first two warm the server's pool of that template
    client = get_api_client(ConnectionConfig())
    await delete_templates_template_id.asyncio_detailed(template_id=info.template_id, client=client)
    return out


SCENARIOS = {
    "bench": bench,
    "templates": templates,
    "other_key": other_key,
    "build_one": build_one,
    "by_metadata": by_metadata,
    "upload_quota": upload_quota,
    "copy_many": copy_many,
    "build_on": build_on,
}


def main() -> None:
    name = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else None
    out = asyncio.run(SCENARIOS[name](arg))
    print(json.dumps(out, default=str), flush=True)
    os._exit(0)  # as e2b_scenarios.py: the SDK's transport may abort at interpreter teardown


if __name__ == "__main__":
    main()

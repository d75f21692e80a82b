"""Scenarios of the unmodified `opensandbox` SDK against a real `sandboxes serve`, run inside the
client virtualenv (tests/clients/opensandbox.txt) by tests/test_opensandbox_api.py:

    python opensandbox_scenarios.py SCENARIO [ARG]    (OPEN_SANDBOX_DOMAIN, OPEN_SANDBOX_API_KEY set)

`lifecycle`, `extras` and `snapshots` take the image to create from as their ARG (python:3.11-slim
without).

Each drives the SDK as its users do and prints one JSON object of what it observed; exceptions
are recorded by class name, HTTP status and error code, since those are the contract.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from typing import Any

from opensandbox import Sandbox, SandboxManager, SandboxManagerSync, SandboxSync
from opensandbox.models.execd import ExecutionHandlers, RunCommandOpts
from opensandbox.models.filesystem import (
    ContentReplaceEntry,
    DirectoryListEntry,
    MoveEntry,
    SearchEntry,
    SetPermissionEntry,
    WriteEntry,
)
from opensandbox.models.sandboxes import NetworkPolicy, NetworkRule, SandboxFilter, SnapshotFilter

IMAGE = "python:3.11-slim"


def err(e: BaseException) -> dict[str, Any]:
    error = getattr(e, "error", None)
    return {
        "error": type(e).__name__,
        "status": getattr(e, "status_code", None),
        "code": getattr(error, "code", None),
        "message": str(e)[:300],
    }


async def aattempt(coro: Any) -> Any:
    try:
        return {"ok": await coro}
    except Exception as e:  # noqa: BLE001 - the class of the error is what is observed
        return err(e)


def attempt(fn: Any) -> Any:
    try:
        return {"ok": fn()}
    except Exception as e:  # noqa: BLE001
        return err(e)


def text(execution: Any) -> list[Any]:
    """An execution as [exit code, stdout, stderr]."""
    logs = execution.logs
    return [
        execution.exit_code,
        "".join(m.text for m in logs.stdout),
        "".join(m.text for m in logs.stderr),
    ]


async def lifecycle(image: str = IMAGE) -> dict[str, Any]:
    """Create from an image, commands (streamed, failing, timed out, in the background,
    interrupted), files, endpoints, the egress policy, list, renew, pause / resume, delete."""
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    sb = await Sandbox.create(
        image,
        env={"GREETING": "hi"},
        metadata={"run": "lc", "team": "a&b=c"},
        timeout=timedelta(minutes=10),
        resource={"cpu": "1", "memory": "1Gi"},
    )
    out["create_s"] = time.perf_counter() - t0
    info = await sb.get_info()
    out["info"] = [info.status.state, info.metadata, info.expires_at is not None, info.entrypoint]

    # Commands.
    cmds = sb.commands
    r = await cmds.run(
        "echo $GREETING; echo to-stderr >&2; echo $X; pwd", opts=RunCommandOpts(envs={"X": "x1"})
    )
    out["run"] = text(r)
    out["run_id"] = bool(r.id)
    out["cwd"] = text(await cmds.run("pwd", opts=RunCommandOpts(working_directory="/tmp")))[1]
    r = await cmds.run("echo partial; exit 3")
    out["exit"] = [r.exit_code, r.error.name if r.error else None, r.error.value if r.error else None]
    out["argv"] = text(await cmds.run(["printf", "%s|", "a b", "c"]))[1]
    chunks: list[str] = []

    async def on_stdout(m: Any) -> None:
        chunks.append(m.text)

    r = await cmds.run(
        "for i in 1 2 3; do echo out$i; sleep 0.2; done",
        handlers=ExecutionHandlers(on_stdout=on_stdout),
    )
    out["streamed"] = ["".join(chunks), len(chunks) > 1, r.exit_code]
    t0 = time.perf_counter()
    r = await cmds.run("sleep 30", opts=RunCommandOpts(timeout=timedelta(seconds=1)))
    out["timeout"] = [r.exit_code, time.perf_counter() - t0 < 15]
    out["status_fg"] = (await cmds.get_command_status(r.id)).running

    bg = await cmds.run("sleep 0.5; echo later; exit 5", opts=RunCommandOpts(background=True))
    status = await cmds.get_command_status(bg.id)
    out["bg_running"] = [status.running, status.content]
    while (status := await cmds.get_command_status(bg.id)).running:
        await asyncio.sleep(0.1)
    logs = await cmds.get_background_command_logs(bg.id)
    out["bg"] = [status.exit_code, logs.content, logs.cursor]
    tail = await cmds.get_background_command_logs(bg.id, cursor=logs.cursor)
    out["bg_tail"] = tail.content
    long = await cmds.run("sleep 60", opts=RunCommandOpts(background=True))
    await cmds.interrupt(long.id)
    status = await cmds.get_command_status(long.id)
    out["interrupted"] = [status.running, status.exit_code]
    out["missing_command"] = await aattempt(cmds.get_command_status("nope"))

    # Files.
    fs = sb.files
    await fs.write_file("notes/a.txt", "hello world\n", mode=644)
    await fs.write_files([WriteEntry(path="notes/b.txt", data=b"second\n", mode=600)])
    out["read"] = await fs.read_file("notes/a.txt")
    out["read_lines"] = await fs.read_file("notes/a.txt", offset=1, limit=1)
    out["read_range"] = (await fs.read_bytes("notes/a.txt", range_header="bytes=0-4")).decode()
    infos = await fs.get_file_info(["notes/a.txt", "notes/b.txt"])
    out["info_files"] = sorted(
        [p, i.entry_type, i.size, i.mode, i.path.endswith(p)] for p, i in infos.items()
    )
    out["read_missing"] = await aattempt(fs.read_file("notes/none.txt"))
    out["info_missing"] = await aattempt(fs.get_file_info(["notes/none.txt"]))
    found = await fs.search(SearchEntry(path="notes", pattern="*.txt"))
    out["search"] = sorted(f.path.rsplit("/", 1)[-1] for f in found)
    await fs.create_directories([WriteEntry(path="notes/sub/deep", mode=700)])
    d = (await fs.get_file_info(["notes/sub/deep"]))["notes/sub/deep"]
    out["mkdir"] = [d.entry_type, d.mode]
    listed = await fs.list_directory(DirectoryListEntry(path="notes", depth=2))
    out["list_dir"] = sorted([e.path.split("notes/", 1)[-1], e.entry_type] for e in listed)
    await fs.set_permissions([SetPermissionEntry(path="notes/b.txt", mode=640)])
    out["chmod"] = (await fs.get_file_info(["notes/b.txt"]))["notes/b.txt"].mode
    await fs.move_files([MoveEntry(src="notes/b.txt", dest="notes/sub/b.txt")])
    out["moved"] = await fs.read_file("notes/sub/b.txt")
    res = await fs.replace_contents_detailed(
        [ContentReplaceEntry(path="notes/a.txt", old_content="world", new_content="there")]
    )
    out["replaced"] = [[x.path, x.replaced_count] for x in res], await fs.read_file("notes/a.txt")
    await fs.delete_files(["notes/a.txt"])
    out["deleted"] = await aattempt(fs.get_file_info(["notes/a.txt"]))
    await fs.delete_directories(["notes/sub"])
    out["deleted_dir"] = await aattempt(fs.get_file_info(["notes/sub"]))

    # Endpoints: a port of the sandbox's own, through the server's port routing.
    ep = await sb.get_endpoint(8080)
    out["endpoint"] = ["://" not in ep.endpoint, "/ports/" in ep.endpoint]
    out["egress"] = await aattempt(sb.get_egress_policy())
    if "ok" in out["egress"]:
        out["egress"] = {"ok": out["egress"]["ok"].model_dump(by_alias=True, mode="json")}

    # The manager: list by metadata, renew.
    async with await SandboxManager.create() as m:
        listed = await m.list_sandbox_infos(SandboxFilter(metadata={"run": "lc", "team": "a&b=c"}))
        out["listed"] = [[s.id == sb.id for s in listed.sandbox_infos], listed.pagination.total_items]
        none = await m.list_sandbox_infos(SandboxFilter(metadata={"run": "none"}))
        out["listed_none"] = [len(none.sandbox_infos), none.pagination.has_next_page]
        paused_only = await m.list_sandbox_infos(SandboxFilter(states=["Paused"]))
        out["listed_paused"] = len(paused_only.sandbox_infos)
    renewed = await sb.renew(timedelta(minutes=30))
    out["renewed"] = (renewed.expires_at.timestamp() - time.time()) > 25 * 60
    patched = await sb.patch_metadata({"team": None, "phase": "two"})
    out["patched"] = patched.metadata

    # Pause keeps memory: a background process lives through it.
    await cmds.run("nohup sh -c 'while true; do echo tick >> /tmp/ticks; sleep 0.1; done' >/dev/null 2>&1 &")
    await sb.pause()
    out["paused"] = (await sb.get_info()).status.state
    out["run_paused"] = await aattempt(cmds.run("true"))
    again = await Sandbox.resume(sb.id)
    out["resumed"] = (await again.get_info()).status.state
    before = len((await again.files.read_file("/tmp/ticks")).split())
    await asyncio.sleep(0.5)
    out["ticking"] = len((await again.files.read_file("/tmp/ticks")).split()) > before
    await again.kill()
    out["after_delete"] = await aattempt(again.get_info())
    await again.close()
    await sb.close()
    async with await SandboxManager.create() as m:
        out["left"] = [s.id for s in (await m.list_sandbox_infos(SandboxFilter())).sandbox_infos]
    return out


async def refused() -> dict[str, Any]:
    """What this server answers with the platform's own refusals."""
    out: dict[str, Any] = {}
    out["gpu"] = await aattempt(Sandbox.create(IMAGE, resource={"cpu": "1", "memory": "1Gi", "gpu": "1"}))
    async with await SandboxManager.create() as m:
        out["template"] = await aattempt(m.get_template("tpl-1"))
        out["missing"] = await aattempt(m.get_sandbox_info("sb-does-not-exist"))
    sb = await Sandbox.create(
        IMAGE,
        network_policy=NetworkPolicy(
            default_action="deny", egress=[NetworkRule(action="allow", target="pypi.org")]
        ),
    )
    policy = await sb.get_egress_policy()
    out["policy"] = policy.model_dump(by_alias=True, mode="json")
    await sb.patch_egress_rules([NetworkRule(action="allow", target="example.com")])
    await sb.delete_egress_rules(["pypi.org"])
    out["policy_after"] = (await sb.get_egress_policy()).model_dump(by_alias=True, mode="json")
    out["session"] = await aattempt(sb.commands.create_session())
    await sb.kill()
    await sb.close()
    return out


def sync_client() -> dict[str, Any]:
    out: dict[str, Any] = {}
    sb = SandboxSync.create(IMAGE, metadata={"run": "sync"})
    out["run"] = text(sb.commands.run("echo sync; echo e >&2; exit 2"))
    sb.files.write_file("s.txt", "sync file", mode=644)
    out["read"] = sb.files.read_file("s.txt")
    out["info"] = sb.files.get_file_info(["s.txt"])["s.txt"].size
    sb.pause()
    out["paused"] = sb.get_info().status.state
    again = SandboxSync.resume(sb.id)
    out["resumed"] = again.files.read_file("s.txt")
    with SandboxManagerSync.create() as m:
        out["listed"] = [
            s.id == sb.id for s in m.list_sandbox_infos(SandboxFilter(metadata={"run": "sync"})).sandbox_infos
        ]
    again.kill()
    again.close()
    sb.close()
    return out


async def hold() -> dict[str, Any]:
    sb = await Sandbox.create(IMAGE, metadata={"run": "held"})
    await sb.close()
    return {"id": sb.id}


async def other_key(sandbox_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with await SandboxManager.create() as m:
        out["get"] = await aattempt(m.get_sandbox_info(sandbox_id))
        listed = await aattempt(m.list_sandbox_infos(SandboxFilter()))
        out["listed"] = {"ok": [s.id for s in listed["ok"].sandbox_infos]} if "ok" in listed else listed
        out["kill"] = await aattempt(m.kill_sandbox(sandbox_id)) if "ok" not in out["get"] else "mine"
    out["connect"] = await aattempt(Sandbox.connect(sandbox_id, skip_health_check=True))
    if "ok" in out["connect"]:
        sb = out["connect"]["ok"]
        out["connect"] = {"ok": (await sb.commands.run("echo mine")).logs.stdout[0].text}
        await sb.kill()
        await sb.close()
    return out


def snap(info: Any) -> list[Any]:
    return [info.sandbox_id, info.name, info.status.state]


async def snapshots(image: str = IMAGE) -> dict[str, Any]:
    """A snapshot of a sandbox's files: taken, got, listed, and a sandbox made from it (kept for
    `snapshot_other_key` and `snapshot_delete`)."""
    out: dict[str, Any] = {}
    sb = await Sandbox.create(image, metadata={"run": "snap"})
    await sb.files.write_file("kept.txt", "before the snapshot")
    await sb.commands.run("mkdir -p /tmp/deep && echo deep > /tmp/deep/f")
    taken = await sb.create_snapshot(name="v1")
    out["id"] = taken.id
    out["taken"] = [*snap(taken), taken.sandbox_id == sb.id]
    await sb.files.write_file("kept.txt", "after the snapshot")
    async with await SandboxManager.create() as m:
        out["got"] = snap(await m.get_snapshot(taken.id))
        listed = await m.list_snapshots(SnapshotFilter(sandbox_id=sb.id))
        out["listed"] = [[s.id == taken.id for s in listed.snapshot_infos], listed.pagination.total_items]
        by_name = await m.list_snapshots(SnapshotFilter(name="v1", states=["Ready"]))
        out["by_name"] = [s.id == taken.id for s in by_name.snapshot_infos]
        out["by_other_name"] = len((await m.list_snapshots(SnapshotFilter(name="v2"))).snapshot_infos)
        out["missing"] = await aattempt(m.get_snapshot("snap-does-not-exist"))
    restored = await Sandbox.create(snapshot_id=taken.id)
    out["restored"] = [
        await restored.files.read_file("kept.txt"),
        text(await restored.commands.run("cat /tmp/deep/f; pwd"))[1],
        (await restored.get_info()).image.image,
    ]
    out["original"] = await sb.files.read_file("kept.txt")
    out["from_missing"] = await aattempt(Sandbox.create(snapshot_id="snap-does-not-exist"))
    await restored.kill()
    await sb.kill()
    await restored.close()
    await sb.close()
    out["outlives"] = snap(await (await SandboxManager.create()).get_snapshot(taken.id))
    return out


async def snapshot_other_key(snapshot_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with await SandboxManager.create() as m:
        out["get"] = await aattempt(m.get_snapshot(snapshot_id))
        out["listed"] = len((await m.list_snapshots(SnapshotFilter())).snapshot_infos)
        out["delete"] = await aattempt(m.delete_snapshot(snapshot_id))
    out["create"] = await aattempt(Sandbox.create(snapshot_id=snapshot_id))
    return out


async def snapshot_delete(snapshot_id: str) -> dict[str, Any]:
    async with await SandboxManager.create() as m:
        await m.delete_snapshot(snapshot_id)
        return {
            "after": await aattempt(m.get_snapshot(snapshot_id)),
            "listed": len((await m.list_snapshots(SnapshotFilter())).snapshot_infos),
        }


async def extras(image: str = IMAGE) -> dict[str, Any]:
    """An entrypoint as the sandbox's main process, serving a port reached through its endpoint;
    execd through the server's proxy (`use_server_proxy`); execd's token."""
    import httpx
    from opensandbox.config import ConnectionConfig

    out: dict[str, Any] = {}
    sb = await Sandbox.create(image, entrypoint=["python3", "-m", "http.server", "8080"])
    await sb.files.write_file("served.txt", "from the sandbox")
    ep = await sb.get_endpoint(8080)
    async with httpx.AsyncClient() as http:
        for _ in range(100):  # the server starts with the sandbox, not before create returns
            r = await http.get(f"http://{ep.endpoint}/served.txt", headers=ep.headers)
            if r.status_code != 502:  # 502: nothing listens on the port yet
                break
            await asyncio.sleep(0.1)
        out["served"] = [r.status_code, r.text]
        execd = (await sb.get_endpoint(44772)).endpoint
        out["ping"] = (await http.get(f"http://{execd}/ping")).status_code
        wrong = execd.rsplit("/", 1)[0] + "/not-the-token"
        r = await http.get(f"http://{wrong}/ping")
        out["wrong_token"] = [r.status_code, r.json().get("code")]
    # A foreground command whose client goes away ends.
    started: asyncio.Future = asyncio.get_running_loop().create_future()

    async def on_init(init: Any) -> None:
        started.set_result(init.id)

    task = asyncio.create_task(sb.commands.run("sleep 30", handlers=ExecutionHandlers(on_init=on_init)))
    cid = await started
    task.cancel()
    for _ in range(100):
        status = await sb.commands.get_command_status(cid)
        if not status.running:
            break
        await asyncio.sleep(0.1)
    out["abandoned"] = [status.running, status.exit_code]
    proxied = await Sandbox.connect(sb.id, connection_config=ConnectionConfig(use_server_proxy=True))
    out["proxy_endpoint"] = "/v1/sandboxes/" in (await proxied.get_endpoint(44772)).endpoint
    out["proxy_run"] = text(await proxied.commands.run("cat served.txt"))
    await proxied.files.write_file("via-proxy.txt", "proxied", mode=644)
    out["proxy_read"] = await sb.files.read_file("via-proxy.txt")
    await proxied.close()
    await sb.kill()
    await sb.close()
    return out


async def executions() -> dict[str, Any]:
    """Every kind of execution the SDK makes in a sandbox: a command streamed, one in the
    background, a file search (a walk the agent makes); each one's result, or the error the SDK
    raised (or the command's own error event)."""
    sb = await Sandbox.create(IMAGE)
    try:
        cmds = sb.commands

        async def command() -> Any:
            r = await cmds.run("echo ran")
            if r.error is not None:
                return {"error": r.error.name, "message": f"{r.error.name}: {r.error.value}"}
            return text(r)[1]

        async def background() -> Any:
            r = await cmds.run("echo ran", opts=RunCommandOpts(background=True))
            if r.error is not None:
                return {"error": r.error.name, "message": f"{r.error.name}: {r.error.value}"}
            return bool(r.id)

        async def search() -> Any:
            return isinstance(await sb.files.search(SearchEntry(path="/tmp", pattern="*")), list)

        out = {
            "command": await aattempt(command()),
            "background": await aattempt(background()),
            "search": await aattempt(search()),
        }
        for k, v in out.items():  # a command's own error event is the SDK's answer too
            if isinstance(v.get("ok"), dict) and "error" in v["ok"]:
                out[k] = v["ok"]
        return out
    finally:
        await sb.kill()
        await sb.close()


SCENARIOS = {
    "lifecycle": lifecycle,
    "executions": executions,
    "extras": extras,
    "refused": refused,
    "hold": hold,
    "other_key": other_key,
    "snapshots": snapshots,
    "snapshot_other_key": snapshot_other_key,
    "snapshot_delete": snapshot_delete,
}


def main() -> None:
    name, args = sys.argv[1], sys.argv[2:]
    result = sync_client() if name == "sync_client" else asyncio.run(SCENARIOS[name](*args))
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()

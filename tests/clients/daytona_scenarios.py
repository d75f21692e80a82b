"""Scenarios of the unmodified `daytona` SDK against a real `sandboxes serve`, run inside the
client virtualenv (tests/clients/daytona.txt) by tests/test_daytona_api.py:

    python daytona_scenarios.py SCENARIO [ARG]    (DAYTONA_API_URL, DAYTONA_API_KEY set)

Each drives the SDK as its users do and prints one JSON object of what it observed; exceptions
are recorded by class name, since which one the SDK raises is the contract.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from daytona import (
    AsyncDaytona,
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    CreateSnapshotParams,
    Daytona,
    FileUpload,
    Image,
    ListSandboxesQuery,
    PtySize,
    Resources,
    SessionExecuteRequest,
    VolumeMount,
)


def err(e: BaseException) -> dict[str, Any]:
    return {"error": type(e).__name__, "message": str(e)[:300]}


async def aattempt(coro: Any) -> Any:
    try:
        return {"ok": await coro}
    except Exception as e:  # noqa: BLE001 - the class of the error is what is observed
        return err(e)


async def lifecycle(image: str | None) -> dict[str, Any]:
    """Create from an image, exec, code_run, sessions, files, labels, stop / start, fork, delete."""
    out: dict[str, Any] = {}
    async with AsyncDaytona() as d:
        t0 = time.perf_counter()
        sb = await d.create(
            CreateSandboxFromImageParams(
                image=image or "python:3.11-slim",
                env_vars={"GREETING": "hi"},
                labels={"run": "lc"},
                name="lc-box",
            )
        )
        out["create_s"] = time.perf_counter() - t0
        out["state"] = str(sb.state.value if hasattr(sb.state, "value") else sb.state)
        r = await sb.process.exec("echo $GREETING; echo to-stderr >&2; echo $X; pwd", env={"X": "x1"})
        out["exec"] = [r.exit_code, r.result]
        r = await sb.process.exec("pwd", cwd="/tmp")
        out["cwd"] = r.result
        out["exit"] = (await sb.process.exec("exit 3")).exit_code
        out["timeout"] = await aattempt(sb.process.exec("sleep 30", timeout=1))
        r = await sb.process.code_run("x = 6 * 7\nprint(x)")
        out["code_run"] = [r.exit_code, r.result]
        r = await sb.process.code_run("print(x)")
        out["code_run_fresh"] = [r.exit_code, "NameError" in r.result]

        # The code interpreter: state kept in a context, streamed output, errors, timeouts.
        ci = sb.code_interpreter
        await ci.run_code("import math\ncounter = 41")
        streamed: list[str] = []
        r = await ci.run_code(
            "counter += 1\nprint('counter', counter)\nprint(math.sqrt(16))",
            on_stdout=lambda m: streamed.append(m.output),
        )
        out["interp"] = [r.stdout, "".join(streamed), r.error]
        r = await ci.run_code("1/0")
        out["interp_error"] = [r.error.name, r.error.value] if r.error else None
        ctx = await ci.create_context()
        r = await ci.run_code("print('counter' in globals())", context=ctx)
        out["interp_isolated"] = r.stdout
        out["interp_contexts"] = [c.id == ctx.id for c in await ci.list_contexts()]
        out["interp_timeout"] = await aattempt(ci.run_code("import time\ntime.sleep(30)", timeout=1))
        out["interp_after_timeout"] = (await ci.run_code("print(counter)")).stdout
        await ci.delete_context(ctx)
        out["interp_deleted"] = await aattempt(ci.run_code("print(1)", context=ctx))

        # A terminal: a shell typed into, resized, exited with a status; another one killed.
        seen = bytearray()
        term = await sb.process.create_pty_session(
            "t1", on_data=seen.extend, pty_size=PtySize(rows=30, cols=100), envs={"TERMVAR": "tv"}
        )

        async def until(text: bytes) -> bool:
            for _ in range(100):
                if text in seen:
                    return True
                await asyncio.sleep(0.05)
            return False

        await term.send_input("stty size; echo hi-$((6*7)) $TERMVAR\n")
        out["pty"] = [await until(b"30 100"), await until(b"hi-42 tv")]
        await term.resize(PtySize(rows=40, cols=120))
        await term.send_input("stty size\n")
        out["pty_resized"] = await until(b"40 120")
        out["pty_listed"] = [s.id for s in await sb.process.list_pty_sessions()]
        await term.send_input("exit 7\n")
        out["pty_exit"] = (await term.wait()).exit_code
        other = await sb.process.create_pty_session("t2", on_data=lambda _: None)
        await other.kill()
        out["pty_killed"] = (await other.wait()).exit_code

        # Sessions: state kept between commands, async commands, logs.
        p = sb.process
        await p.create_session("s1")
        await p.execute_session_command("s1", SessionExecuteRequest(command="cd /tmp && export V=kept"))
        r = await p.execute_session_command("s1", SessionExecuteRequest(command="pwd; echo $V; echo e >&2"))
        out["session"] = [r.exit_code, r.stdout, r.stderr]
        r = await p.execute_session_command("s1", SessionExecuteRequest(command="if then fi"))
        out["session_syntax"] = r.exit_code
        r = await p.execute_session_command("s1", SessionExecuteRequest(command="echo still"))
        out["session_after"] = r.stdout
        r = await p.execute_session_command(
            "s1", SessionExecuteRequest(command="sleep 0.5; echo later; exit 5", run_async=True)
        )
        running = await p.get_session_command("s1", r.cmd_id)
        out["async_running"] = running.exit_code
        while (c := await p.get_session_command("s1", r.cmd_id)).exit_code is None:
            await asyncio.sleep(0.1)
        logs = await p.get_session_command_logs("s1", r.cmd_id)
        out["async"] = [c.exit_code, logs.stdout]
        r = await p.execute_session_command(
            "s1",
            SessionExecuteRequest(
                command="for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.2; done", run_async=True
            ),
        )
        got: dict[str, list[str]] = {"out": [], "err": []}
        await p.get_session_command_logs_async("s1", r.cmd_id, got["out"].append, got["err"].append)
        out["streamed"] = ["".join(got["out"]), "".join(got["err"]), len(got["out"]) > 1]
        out["sessions"] = [s.session_id for s in await p.list_sessions()]
        out["session_commands"] = len((await p.get_session("s1")).commands)
        await p.delete_session("s1")
        out["session_gone"] = await aattempt(p.get_session("s1"))

        # Files.
        fs = sb.fs
        await fs.upload_file(b"hello world\n", "notes/a.txt")
        await fs.upload_files([FileUpload(source=b"second\n", destination="notes/b.txt")])
        out["download"] = (await fs.download_file("notes/a.txt")).decode()
        out["download_missing"] = await aattempt(fs.download_file("notes/none.txt"))
        out["list"] = sorted((f.name, f.is_dir, f.size) for f in await fs.list_files("notes"))
        info = await fs.get_file_info("notes/a.txt")
        out["info"] = [info.name, info.is_dir, info.size, info.permissions]
        await fs.create_folder("notes/sub", "755")
        await fs.move_files("notes/b.txt", "notes/sub/b.txt")
        out["moved"] = (await fs.download_file("notes/sub/b.txt")).decode()
        out["find"] = [
            (m.file.rsplit("/", 1)[-1], m.line, m.content) for m in await fs.find_files("notes", "hello")
        ]
        out["search"] = sorted(f.rsplit("/", 1)[-1] for f in (await fs.search_files("notes", "*.txt")).files)
        res = await fs.replace_in_files(["notes/a.txt"], "world", "there")
        out["replace"] = [bool(x.success) for x in res]
        out["replaced"] = (await fs.download_file("notes/a.txt")).decode()
        await fs.set_file_permissions("notes/a.txt", mode="600")
        out["mode"] = (await fs.get_file_info("notes/a.txt")).permissions
        await fs.delete_file("notes/sub", recursive=True)
        out["deleted"] = await aattempt(fs.get_file_info("notes/sub"))

        # Labels, get, list.
        await sb.set_labels({"run": "lc", "phase": "two"})
        out["by_name"] = (await d.get("lc-box")).id == sb.id
        listed = [s.id async for s in d.list(ListSandboxesQuery(labels={"phase": "two"}))]
        out["listed"] = listed == [sb.id]
        out["listed_none"] = [s.id async for s in d.list(ListSandboxesQuery(labels={"phase": "none"}))]

        # Stop keeps the files; start boots from them.
        await sb.process.create_session("before-stop")
        await sb.stop()
        out["stopped"] = str((await d.get(sb.id)).state.value)
        out["exec_stopped"] = await aattempt(sb.process.exec("true"))
        await sb.start()
        out["started"] = str((await d.get(sb.id)).state.value)
        out["after_restart"] = (await sb.process.exec("cat notes/a.txt")).result
        out["session_after_restart"] = await aattempt(sb.process.get_session("before-stop"))

        fork = await sb.fork(name="lc-fork")
        out["fork"] = (await fork.process.exec("cat notes/a.txt")).result
        await fork.delete()

        out["preview"] = await aattempt(sb.get_preview_link(8080))
        if "ok" in out["preview"]:
            out["preview"] = {
                "ok": [out["preview"]["ok"].url.startswith("http"), bool(out["preview"]["ok"].token)]
            }
        out["gpu"] = await aattempt(
            d.create(CreateSandboxFromImageParams(image="python:3.11-slim", resources=Resources(gpu=1)))
        )
        # A declarative image: built into a template first (the same Dockerfile again: that
        # template), its ENV and WORKDIR the sandbox's.
        img = (
            Image.base(image or "python:3.11-slim")
            .run_commands("mkdir -p /opt/img && echo built > /opt/img/x")
            .env({"IMGVAR": "v 1"})
            .workdir("/opt/img")
        )
        built = []
        for _ in range(2):
            t0 = time.perf_counter()
            s2 = await d.create(CreateSandboxFromImageParams(image=img))
            built.append(time.perf_counter() - t0)
            out["declarative"] = (await s2.process.exec("cat x; pwd; echo $IMGVAR")).result
            await s2.delete()
        out["declarative_s"] = built
        out["copy"] = await aattempt(
            d.create(CreateSandboxFromImageParams(image=Image.base("x").dockerfile_commands(["ADD a /b"])))
        )

        out["id"] = sb.id
        await sb.delete()
        out["after_delete"] = await aattempt(d.get(sb.id))
        out["left"] = [s.id async for s in d.list()]
    return out


async def images(image: str | None) -> dict[str, Any]:
    """Snapshots (of an image, of a sandbox's files) and volumes shared by sandboxes."""
    out: dict[str, Any] = {}
    async with AsyncDaytona() as d:
        snap = await d.snapshot.create(
            CreateSnapshotParams(name="snap-img", image=image or "python:3.11-slim")
        )
        out["snap_state"] = str(snap.state.value if hasattr(snap.state, "value") else snap.state)
        sb = await d.create(CreateSandboxFromSnapshotParams(snapshot="snap-img"))
        await sb.process.exec("mkdir -p /opt/state && echo made > /opt/state/made.txt")
        await sb.create_snapshot("snap-sb")
        await sb.process.exec("echo later > /opt/state/later.txt")
        again = await d.create(CreateSandboxFromSnapshotParams(snapshot="snap-sb"))
        out["from_sandbox"] = (await again.process.exec("cat /opt/state/*")).result
        out["listed"] = sorted(s.name for s in (await d.snapshot.list()).items)
        out["memory"] = await aattempt(d.snapshot.get("snap-none"))
        vol = await d.volume.create("vol-a")
        out["volume_get"] = (await d.volume.get("vol-a")).id == vol.id
        mount = [VolumeMount(volume_id=vol.id, mount_path="/mnt/data")]
        one = await d.create(CreateSandboxFromSnapshotParams(volumes=mount))
        two = await d.create(CreateSandboxFromSnapshotParams(volumes=mount))
        await one.process.exec("echo shared > /mnt/data/f")
        out["volume"] = (await two.process.exec("cat /mnt/data/f")).result
        out["volumes"] = [v.name for v in await d.volume.list()]
        out["missing_volume"] = await aattempt(
            d.create(
                CreateSandboxFromSnapshotParams(volumes=[VolumeMount(volume_id="nope", mount_path="/x")])
            )
        )
        for s in (sb, again, one, two):
            await s.delete()
        await d.volume.delete(vol)
        for name in ("snap-img", "snap-sb"):
            await d.snapshot.delete(await d.snapshot.get(name))
        out["snapshots_after"] = (await d.snapshot.list()).items
        out["volumes_after"] = await d.volume.list()
    return out


async def declared_snapshots(_: str | None) -> dict[str, Any]:
    """A snapshot of a declarative image carries its steps; a create from a snapshot that does not
    exist is the platform's error (what a caller that then builds the snapshot waits for)."""
    out: dict[str, Any] = {}
    async with AsyncDaytona() as d:
        out["missing_get"] = await aattempt(d.snapshot.get("baked"))
        out["missing_create"] = await aattempt(d.create(CreateSandboxFromSnapshotParams(snapshot="baked")))
        image = (
            Image.base("python:3.11-slim")
            .run_commands("mkdir -p /opt/baked && echo baked > /opt/baked/f.txt")
            .env({"BAKED": "yes"})
            .workdir("/opt/baked")
        )
        snap = await d.snapshot.create(CreateSnapshotParams(name="baked", image=image))
        out["state"] = str(snap.state.value if hasattr(snap.state, "value") else snap.state)
        sb = await d.create(CreateSandboxFromSnapshotParams(snapshot="baked"))
        out["baked"] = (await sb.process.exec("cat f.txt; echo $BAKED; pwd")).result
        await sb.delete()
        await d.snapshot.delete(await d.snapshot.get("baked"))
        out["left"] = [s.name for s in (await d.snapshot.list()).items]
    return out


def sync_client(_: str | None) -> dict[str, Any]:
    """The sync client: create (from the default snapshot), exec, files, delete."""
    d = Daytona()
    sb = d.create(CreateSandboxFromSnapshotParams(labels={"client": "sync"}))
    out: dict[str, Any] = {"exec": sb.process.exec("echo sync").result}
    sb.fs.upload_file(b"sync file", "s.txt")
    out["download"] = sb.fs.download_file("s.txt").decode()
    out["code_run"] = sb.process.code_run("print(1 + 1)").result
    out["id"] = sb.id
    sb.delete()
    return out


async def hold(_: str | None) -> dict[str, Any]:
    """Creates a sandbox and leaves it (another key's view of it is the next scenario)."""
    async with AsyncDaytona() as d:
        sb = await d.create()
        return {"id": sb.id}


async def other_key(sandbox_id: str | None) -> dict[str, Any]:
    async with AsyncDaytona() as d:

        async def listed() -> list[str]:
            return [s.id async for s in d.list()]

        return {"get": await aattempt(d.get(sandbox_id or "")), "listed": await aattempt(listed())}


async def bench(n: str | None) -> dict[str, Any]:
    """`process.exec("true")` timings in one sandbox (bench/daytona_api.py)."""
    async with AsyncDaytona() as d:
        sb = await d.create()
        for _ in range(10):
            await sb.process.exec("true")
        times = []
        for _ in range(int(n or 200)):
            t = time.perf_counter()
            await sb.process.exec("true")
            times.append(time.perf_counter() - t)
        await sb.delete()
        return {"exec_true": times}


async def first_commands(shape: str | None) -> dict[str, list[float]]:
    """Seconds from `create()` to `process.exec("true")` done, one at a time, then in each burst
    (`SEQUENTIAL,BURST,...`); each sandbox deleted after (bench/first_command.py). A failed one is
    NaN, its error on stderr."""
    sequential, *bursts = (int(n) for n in str(shape or "10").split(","))
    async with AsyncDaytona() as d:

        async def one() -> float:
            t = time.perf_counter()
            sb = None
            try:
                sb = await d.create(timeout=0)
                r = await sb.process.exec("true")
                dt = time.perf_counter() - t if r.exit_code == 0 else float("nan")
            except Exception as e:  # noqa: BLE001 - counted by the benchmark (NaN), not fatal
                print(f"first command failed: {type(e).__name__}: {e}", file=sys.stderr)
                dt = float("nan")
            if sb is not None:
                try:
                    await sb.delete()
                except Exception:  # noqa: BLE001, S110 - best effort: the server reaps it anyway
                    pass
            return dt

        out = {"sequential": [await one() for _ in range(sequential)]}
        for n in bursts:
            await asyncio.sleep(2.0)
            out[str(n)] = list(await asyncio.gather(*(one() for _ in range(n))))
        return out


async def executions(_: str | None) -> dict[str, Any]:
    """Every kind of execution the SDK makes in a sandbox: a command, code_run, a file listing
    (a program the toolbox runs), a session's command, a terminal and an interpreter cell; each
    one's result, or the error the SDK raised."""
    async with AsyncDaytona() as d:
        sb = await d.create()
        try:
            p = sb.process

            async def session() -> str:
                await p.create_session("slots")
                try:
                    r = await p.execute_session_command("slots", SessionExecuteRequest(command="echo ran"))
                    return r.stdout or r.output or ""
                finally:
                    await p.delete_session("slots")

            async def terminal() -> list[Any]:
                seen = bytearray()
                term = await p.create_pty_session("slots", on_data=seen.extend)
                await term.send_input("echo r$((1))an; exit 5\n")
                return [(await term.wait()).exit_code, b"r1an" in seen]

            async def cell() -> str:
                r = await sb.code_interpreter.run_code("print(6 * 7)")
                if r.error:  # how the SDK reports a cell the toolbox refused
                    raise RuntimeError(f"{r.error.name}: {r.error.value}")
                return r.stdout

            async def command() -> str:
                return (await p.exec("echo ran")).result

            async def code() -> str:
                return (await p.code_run("print('ran')")).result

            async def listing() -> bool:
                return isinstance(await sb.fs.list_files("."), list)

            return {
                "exec": await aattempt(command()),
                "code_run": await aattempt(code()),
                "files": await aattempt(listing()),
                "session": await aattempt(session()),
                "terminal": await aattempt(terminal()),
                "cell": await aattempt(cell()),
            }
        finally:
            await sb.delete()


async def background(_: str | None) -> dict[str, Any]:
    """A server started in the background of a command (`nohup ... &`, and `... &` whose output
    stays the command's) keeps running after the command returns, as agent harnesses rely on."""
    async with AsyncDaytona() as d:
        sb = await d.create()
        try:
            p = sb.process
            started = await p.exec(
                "nohup python3 -m http.server 8123 --bind 127.0.0.1 > /tmp/srv.log 2>&1 & echo started"
            )
            plain = await p.exec("python3 -m http.server 8124 --bind 127.0.0.1 & echo plain")
            probe = (
                "import time, urllib.request as u\n"
                "for _ in range(100):\n"
                "    try:\n"
                "        print(u.urlopen('http://127.0.0.1:8123/').status, u.urlopen('http://127.0.0.1:8124/').status)\n"
                "        break\n"
                "    except OSError:\n"
                "        time.sleep(0.1)\n"
            )
            answered = await p.code_run(probe)
            return {
                "started": [started.exit_code, started.result],
                "plain": [plain.exit_code, plain.result],
                "answered": answered.result,
            }
        finally:
            await sb.delete()


SCENARIOS = {
    "background": background,
    "executions": executions,
    "lifecycle": lifecycle,
    "images": images,
    "declared_snapshots": declared_snapshots,
    "sync_client": sync_client,
    "hold": hold,
    "other_key": other_key,
    "bench": bench,
    "first_commands": first_commands,
}


def main() -> None:
    fn = SCENARIOS[sys.argv[1]]
    arg = sys.argv[2] if len(sys.argv) > 2 else None
    out = asyncio.run(fn(arg)) if asyncio.iscoroutinefunction(fn) else fn(arg)
    print(json.dumps(out, default=str), flush=True)
    os._exit(0)  # the SDK's background realtime client may still be tearing down


if __name__ == "__main__":
    main()

"""Scenarios of the unmodified `e2b` and `e2b-code-interpreter` SDKs against a real `sandboxes
serve`, run inside the client virtualenv (tests/clients/e2b.txt) by tests/test_e2b_api.py:

    python e2b_scenarios.py SCENARIO [ARG]    (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set)

Each scenario drives the SDK as its users do and prints one JSON object of what it observed; the
test asserts on it. Exceptions are recorded by class name, since which one the SDK raises is the
contract.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sys
import time
from typing import Any

import e2b_code_interpreter
from e2b import AsyncSandbox, CommandExitException, Sandbox, SandboxQuery, SandboxState, Volume


def err(e: BaseException) -> dict[str, Any]:
    return {"error": type(e).__name__, "message": str(e)[:300]}


def attempt(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return {"ok": fn(*args, **kwargs)}
    except Exception as e:  # noqa: BLE001 - the class of the error is what is observed
        return err(e)


async def aattempt(coro: Any) -> Any:
    try:
        return {"ok": await coro}
    except Exception as e:  # noqa: BLE001
        return err(e)


def result(r: Any) -> dict[str, Any]:
    return {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code}


# -- scenarios -------------------------------------------------------------------------------


def lifecycle(_: str | None) -> dict[str, Any]:
    o: dict[str, Any] = {}
    a = Sandbox.create(timeout=120, metadata={"run": "lc", "k y": "v&1"}, envs={"GREETING": "hi"})
    b = Sandbox.create(metadata={"run": "lc"}, idempotency_key="lc-b-1")
    o["idempotent"] = (
        Sandbox.create(metadata={"run": "lc"}, idempotency_key="lc-b-1").sandbox_id == b.sandbox_id
    )
    info = a.get_info()
    o["info"] = {
        "id": info.sandbox_id == a.sandbox_id,
        "template": info.template_id,
        "metadata": info.metadata,
        "state": info.state.value,
        "ttl": round((info.end_at - info.started_at).total_seconds()),
        "envd": info.envd_version,
        "cpu": info.cpu_count,
        "memory_mb": info.memory_mb,
    }
    o["env"] = a.commands.run("echo $GREETING").stdout
    found = Sandbox.list(query=SandboxQuery(metadata={"run": "lc"}), limit=1)
    first = found.next_items()
    o["paging"] = {"first": len(first), "has_next": found.has_next}
    second = found.next_items()
    o["paging"]["second"] = len(second)
    o["paging"]["ids"] = sorted(s.sandbox_id for s in first + second) == sorted([a.sandbox_id, b.sandbox_id])
    quoted = Sandbox.list(query=SandboxQuery(metadata={"k y": "v&1"})).next_items()
    o["metadata_filter"] = [s.sandbox_id for s in quoted] == [a.sandbox_id]
    again = Sandbox.connect(a.sandbox_id)
    o["connect"] = again.commands.run("echo again").stdout
    a.set_timeout(600)
    o["extended"] = round((a.get_info().end_at - a.get_info().started_at).total_seconds()) >= 590
    o["metrics"] = attempt(lambda: a.get_metrics())
    other = attempt(Sandbox.create, template="no-such-image:latest")
    o["unknown_template"] = other if "error" in other else {"ok": other["ok"].kill()}
    o["running"] = a.is_running()
    o["kill"] = a.kill()
    o["kill_again"] = Sandbox.kill(a.sandbox_id)
    o["running_after"] = a.is_running()
    o["info_after"] = attempt(a.get_info)
    o["connect_after"] = attempt(Sandbox.connect, a.sandbox_id)
    o["command_after"] = attempt(lambda: a.commands.run("true"))
    o["file_after"] = attempt(lambda: a.files.read("x"))
    with Sandbox.create() as c:
        o["with_block"] = c.commands.run("echo in-block").stdout
    o["with_gone"] = c.is_running()
    b.kill()
    o["left"] = [s.sandbox_id for s in Sandbox.list().next_items()]
    return o


def commands(_: str | None) -> dict[str, Any]:
    o: dict[str, Any] = {}
    with Sandbox.create() as sb:
        o["basic"] = result(sb.commands.run("echo out; echo err >&2"))
        try:
            sb.commands.run("echo before; exit 3")
        except CommandExitException as e:
            o["exit"] = {"exit_code": e.exit_code, "stdout": e.stdout, "class": "CommandExitException"}
        o["cwd_env"] = sb.commands.run("pwd; echo $A", cwd="/tmp", envs={"A": "1"}).stdout
        o["root"] = sb.commands.run("id -u", user="root").stdout
        o["other_user"] = attempt(lambda: sb.commands.run("id -u", user="user"))
        chunks: list[Any] = []
        sb.commands.run(
            "for i in 1 2 3; do echo $i; sleep 0.05; done; echo e >&2",
            on_stdout=lambda s: chunks.append(["out", s]),
            on_stderr=lambda s: chunks.append(["err", s]),
        )
        o["streamed"] = (
            "".join(c[1] for c in chunks if c[0] == "out"),
            [c[1] for c in chunks if c[0] == "err"],
        )
        t = time.monotonic()
        o["timeout"] = attempt(lambda: sb.commands.run("sleep 30", timeout=1))
        o["timeout_fast"] = time.monotonic() - t < 20
        # The server kills it at the same deadline.
        deadline = time.monotonic() + 10
        while sb.commands.list() and time.monotonic() < deadline:
            time.sleep(0.05)
        o["after_timeout"] = [p.cmd for p in sb.commands.list()]
        h = sb.commands.run("read line; echo got:$line", background=True, stdin=True)
        sb.commands.send_stdin(h.pid, "hello\n")
        o["stdin"] = result(h.wait())
        h = sb.commands.run("cat; echo closed", background=True, stdin=True)
        sb.commands.send_stdin(h.pid, "x")
        sb.commands.close_stdin(h.pid)
        o["close_stdin"] = h.wait().stdout
        bg = sb.commands.run("sleep 60", background=True)
        o["listed"] = [p.pid for p in sb.commands.list()] == [bg.pid]
        o["list_args"] = [p.args for p in sb.commands.list()]
        o["kill"] = sb.commands.kill(bg.pid)
        o["killed_wait"] = attempt(bg.wait)
        o["kill_gone"] = sb.commands.kill(bg.pid)
        o["empty"] = sb.commands.list()
        h = sb.commands.run("sleep 0.5; echo late", background=True)
        o["connect"] = sb.commands.connect(h.pid).wait().stdout
        # A background command whose stream the client drops keeps running.
        h = sb.commands.run("sleep 1; echo done > /tmp/survived", background=True)
        h.disconnect()
        time.sleep(2)
        o["survived"] = sb.files.read("/tmp/survived")
        # The platform's daemon caps no output: 3 MiB come back whole.
        big = sb.commands.run("head -c 3145728 /dev/zero | tr '\\0' x").stdout
        o["big"] = (len(big), sorted(set(big)))
    return o


def files(arg: str | None) -> dict[str, Any]:
    o: dict[str, Any] = {}
    mb = int(arg or "8")
    with Sandbox.create() as sb:
        info = sb.files.write("notes/a.txt", "hello")
        o["write"] = {"name": info.name, "path": info.path, "type": info.type.value}
        o["read"] = sb.files.read("notes/a.txt")
        o["bytes"] = list(sb.files.read("notes/a.txt", format="bytes"))[:2]
        o["stream"] = b"".join(sb.files.read("notes/a.txt", format="stream")).decode()
        many = sb.files.write_files(
            [{"path": "/tmp/m/1", "data": b"one"}, {"path": "/tmp/m/2", "data": "two"}]
        )
        o["many"] = sorted(w.path for w in many)
        o["list"] = sorted((e.name, e.type.value) for e in sb.files.list("/tmp/m"))
        o["deep"] = sorted(e.path for e in sb.files.list("notes", depth=2))
        o["exists"] = [sb.files.exists("notes/a.txt"), sb.files.exists("notes/nope")]
        stat = sb.files.get_info("notes/a.txt")
        o["stat"] = {"size": stat.size, "type": stat.type.value, "perm": stat.permissions, "name": stat.name}
        o["mkdir"] = [sb.files.make_dir("/tmp/d/e"), sb.files.make_dir("/tmp/d/e")]
        moved = sb.files.rename("notes/a.txt", "/tmp/d/b.txt")
        o["rename"] = [moved.path, sb.files.read("/tmp/d/b.txt"), sb.files.exists("notes/a.txt")]
        sb.files.remove("/tmp/d")
        o["removed"] = sb.files.exists("/tmp/d")
        o["missing"] = attempt(lambda: sb.files.read("/no/such/file"))
        o["missing_remove"] = attempt(lambda: sb.files.remove("/no/such/file"))
        o["missing_info"] = attempt(lambda: sb.files.get_info("/no/such/file"))
        sb.commands.run("mkfifo /tmp/fifo")
        t = time.monotonic()
        o["fifo"] = attempt(lambda: sb.files.read("/tmp/fifo"))
        o["fifo_fast"] = time.monotonic() - t < 10
        blob = os.urandom(1 << 20) * mb
        sb.files.write("/tmp/big.bin", blob)
        back = sb.files.read("/tmp/big.bin", format="bytes")
        o["big"] = {
            "same": hashlib.sha256(bytes(back)).hexdigest() == hashlib.sha256(blob).hexdigest(),
            "remote": sb.commands.run("sha256sum /tmp/big.bin | cut -d' ' -f1").stdout.strip()
            == hashlib.sha256(blob).hexdigest(),
        }
    return o


async def async_api(_: str | None) -> dict[str, Any]:
    o: dict[str, Any] = {}
    sb = await AsyncSandbox.create(metadata={"kind": "async"})
    got: list[str] = []

    async def on_out(s: str) -> None:
        got.append(s)

    r = await sb.commands.run("echo a; echo b", on_stdout=on_out)
    o["run"] = [r.stdout, "".join(got)]
    h = await sb.commands.run("sleep 0.3; echo bg", background=True)
    o["background"] = (await h.wait()).stdout
    o["exit"] = await aattempt(sb.commands.run("exit 4"))
    await sb.files.write("x.txt", "async file")
    o["file"] = await sb.files.read("x.txt")
    await sb.files.write_files([{"path": "d/1", "data": b"1"}, {"path": "d/2", "data": b"2"}])
    o["files"] = {
        "list": sorted(e.name for e in await sb.files.list("d")),
        "exists": await sb.files.exists("d/1"),
        "info": (await sb.files.get_info("d/2")).size,
        "mkdir": await sb.files.make_dir("e"),
        "rename": (await sb.files.rename("d/1", "e/1")).path.endswith("/e/1"),
    }
    await sb.files.remove("d")
    o["files"]["removed"] = not await sb.files.exists("d")
    h = await sb.commands.run("cat", background=True, stdin=True)
    await sb.commands.send_stdin(h.pid, "piped")
    await sb.commands.close_stdin(h.pid)
    o["stdin"] = (await h.wait()).stdout
    h = await sb.commands.run("sleep 60", background=True)
    o["listed"] = [p.pid for p in await sb.commands.list()] == [h.pid]
    o["kill_process"] = await sb.commands.kill(h.pid)
    again = await AsyncSandbox.connect(sb.sandbox_id)
    o["connect"] = (await again.commands.run("echo via connect")).stdout
    await sb.set_timeout(200)
    o["info"] = (await sb.get_info()).template_id
    o["list"] = [s.sandbox_id == sb.sandbox_id for s in await AsyncSandbox.list().next_items()]
    o["running"] = await sb.is_running()
    o["kill"] = await sb.kill()
    o["after"] = await aattempt(sb.commands.run("true"))
    return o


def interpreter(_: str | None) -> dict[str, Any]:
    o: dict[str, Any] = {}
    with e2b_code_interpreter.Sandbox.create() as sb:
        texts = []
        for i in range(20):
            code = f"x{i} = {i} * 2\nsum(globals()['x%d' % j] for j in range({i + 1}))"
            texts.append(sb.run_code(code).text)
        o["state"] = texts
        ex = sb.run_code("import math\nprint('hi')\nmath.sqrt(16)")
        o["cell"] = {"text": ex.text, "stdout": ex.logs.stdout, "count": ex.execution_count}
        o["import_kept"] = sb.run_code("math.pi > 3").text
        ex = sb.run_code("def f():\n    raise ValueError('bad value')\nf()")
        o["error"] = {"name": ex.error.name, "value": ex.error.value, "tb": "in f" in ex.error.traceback}
        got: list[Any] = []
        sb.run_code(
            "import sys, subprocess\nprint('a')\nprint('b', file=sys.stderr)\nsubprocess.run(['echo', 'sub'])",
            on_stdout=lambda m: got.append(["out", m.line]),
            on_stderr=lambda m: got.append(["err", m.line]),
            on_result=lambda r: got.append(["result", r.text]),
        )
        o["callbacks"] = got
        o["string"] = sb.run_code("'quoted'").text
        # Indented as a whole (a template written inside a block): run as IPython runs it.
        o["indented"] = sb.run_code("\n    a = 2\n    if a:\n        a += 1\n    a\n").text
        o["env"] = sb.run_code("import os\nos.environ.get('CELL_VAR')", envs={"CELL_VAR": "v"}).text
        t = time.monotonic()
        o["timeout"] = attempt(lambda: sb.run_code("import time\ntime.sleep(60)", timeout=2).text)
        o["after_timeout"] = sb.run_code("x3").text
        o["quick"] = time.monotonic() - t < 30
        ctx = sb.create_code_context()
        o["context"] = {
            "language": ctx.language,
            "isolated": sb.run_code("'x3' in globals()", context=ctx).text,
        }
        sb.run_code("y = 5", context=ctx)
        o["context_state"] = sb.run_code("y", context=ctx).text
        o["contexts"] = len(sb.list_code_contexts())
        sb.restart_code_context(ctx)
        o["restarted"] = sb.run_code("'y' in globals()", context=ctx).text
        sb.remove_code_context(ctx)
        o["removed"] = attempt(lambda: sb.run_code("1", context=ctx).text)
        o["language"] = attempt(lambda: sb.run_code("1", language="r").text)
        o["both"] = attempt(lambda: sb.run_code("1", language="python", context=ctx).text)
        o["shell"] = sb.commands.run("echo same sandbox").stdout
        sid = sb.sandbox_id
    o["killed"] = attempt(lambda: sb.run_code("1").text)
    o["gone"] = not any(s.sandbox_id == sid for s in Sandbox.list().next_items())
    return o


async def interpreter_async(_: str | None) -> dict[str, Any]:
    sb = await e2b_code_interpreter.AsyncSandbox.create()
    try:
        await sb.run_code("n = 10")
        ex = await sb.run_code("n * 3")
        err_ex = await sb.run_code("raise KeyError('k')")
        return {"text": ex.text, "error": err_ex.error.name}
    finally:
        await sb.kill()


def other_key(sandbox_id: str | None) -> dict[str, Any]:
    """As another key: another key's sandbox is not there."""
    return {
        "info": attempt(Sandbox.get_info, sandbox_id),
        "connect": attempt(Sandbox.connect, sandbox_id),
        "kill": Sandbox.kill(sandbox_id),
        "listed": [s.sandbox_id for s in Sandbox.list().next_items()],
    }


def create_one(_: str | None) -> dict[str, Any]:
    sb = Sandbox.create(timeout=300)
    return {"id": sb.sandbox_id}


def use_elsewhere(sandbox_id: str | None) -> dict[str, Any]:
    """A sandbox another process created (through another server): connect, run, files, kill."""
    sb = Sandbox.connect(sandbox_id)
    out: dict[str, Any] = {"run": result(sb.commands.run("echo hi"))}
    path = f"/tmp/elsewhere-{sandbox_id}.txt"  # a writable root of every backend, the emulator's too
    sb.files.write(path, "written here")
    out["read"] = sb.files.read(path)
    sb.files.remove(path)
    out["listed"] = sandbox_id in [s.sandbox_id for s in Sandbox.list().next_items()]
    out["kill"] = sb.kill()
    return out


def wrong_key(_: str | None) -> dict[str, Any]:
    return {"create": attempt(Sandbox.create), "list": attempt(lambda: Sandbox.list().next_items())}


def executions(_: str | None) -> dict[str, Any]:
    """Every kind of execution the SDKs make in a sandbox: a command, a directory listing (a
    filesystem call run as a program) and a code-interpreter cell."""
    sb = e2b_code_interpreter.Sandbox.create(timeout=120)
    try:
        return {
            "command": attempt(lambda: result(sb.commands.run("echo ran"))),
            "list": attempt(lambda: [e.name for e in sb.files.list("/")][:1]),
            "cell": attempt(lambda: sb.run_code("6 * 7").text),
        }
    finally:
        sb.kill()


def bench(arg: str | None) -> dict[str, Any]:
    """Latency of `commands.run("true")` and `run_code("1+1")` (seconds per call)."""
    n = int(arg or "200")
    out: dict[str, Any] = {}
    with e2b_code_interpreter.Sandbox.create() as sb:
        for _ in range(10):
            sb.commands.run("true")
            sb.run_code("1+1")
        runs = []
        for _ in range(n):
            t = time.perf_counter()
            sb.commands.run("true")
            runs.append(time.perf_counter() - t)
        cells = []
        for _ in range(n):
            t = time.perf_counter()
            sb.run_code("1+1")
            cells.append(time.perf_counter() - t)
        out = {"commands_run": runs, "run_code": cells}
    return out


async def first_commands(shape: str | None) -> dict[str, list[float]]:
    """Seconds from `AsyncSandbox.create` to `commands.run("true")` done, one at a time, then in
    each burst (`SEQUENTIAL,BURST,...`); each sandbox killed after (bench/first_command.py)."""
    sequential, *bursts = (int(n) for n in str(shape or "10").split(","))

    async def one() -> float:
        t = time.perf_counter()
        sb = await AsyncSandbox.create()
        await sb.commands.run("true")
        d = time.perf_counter() - t
        await sb.kill()
        return d

    out = {"sequential": [await one() for _ in range(sequential)]}
    for n in bursts:
        await asyncio.sleep(2.0)
        out[str(n)] = list(await asyncio.gather(*(one() for _ in range(n))))
    return out


def snapshots(keep: str | None) -> dict[str, Any]:
    """A filesystem snapshot, sandboxes made from it (each with writes of its own and none of the
    source's processes), list, delete."""
    o: dict[str, Any] = {}
    sb = Sandbox.create(timeout=120)
    sb.files.write("state.txt", "before")
    sb.commands.run("sleep 300", background=True)
    snap = sb.create_snapshot(name="warm", mode="filesystem")
    o["snapshot"] = {"names": snap.names, "id": bool(snap.snapshot_id)}
    sb.files.write("state.txt", "after")
    made = [Sandbox.create(snap.snapshot_id, timeout=120) for _ in range(2)]
    made[0].files.write("state.txt", "mine")
    o["made"] = [m.files.read("state.txt") for m in made]
    o["made_processes"] = made[1].commands.run("pgrep -x sleep || true").stdout
    o["parent"] = sb.files.read("state.txt")
    o["listed"] = [s.snapshot_id == snap.snapshot_id for s in sb.list_snapshots().next_items()]
    o["by_name"] = [
        s.snapshot_id == snap.snapshot_id for s in Sandbox.list_snapshots(name="warm").next_items()
    ]
    o["other_key_id"] = snap.snapshot_id
    for m in made:
        m.kill()
    if keep:  # for the other key's test
        sb.kill()
        return o
    o["deleted"] = Sandbox.delete_snapshot(snap.snapshot_id)
    o["deleted_again"] = Sandbox.delete_snapshot(snap.snapshot_id)
    o["create_deleted"] = attempt(Sandbox.create, snap.snapshot_id)
    sb.kill()
    return o


def memory_refused(_: str | None) -> dict[str, Any]:
    """The full snapshot (the SDK's default) and fork, which carry processes, where they cannot
    be taken."""
    sb = Sandbox.create(timeout=120)
    o = {"full": attempt(sb.create_snapshot), "fork": attempt(sb.fork)}
    sb.kill()
    return o


COUNTER = """import os, sys, time
n = int(sys.argv[1])
while True:
    n += 1
    with open("/tmp/count.tmp", "w") as f:
        f.write(str(n))
    os.replace("/tmp/count.tmp", "/tmp/count")
    time.sleep(0.02)
"""
START = 1_000_000  # given to the source's counter only: a count above it elsewhere is its memory
# The counters' /proc entries, and a command ending them: by /proc alone (an image may have no
# procps); the pattern does not match the command line of the grep that looks for it.
COUNTERS = "grep -l '[c]ounter.py' /proc/[0-9]*/cmdline 2>/dev/null || true"
STOP_COUNTERS = f"for f in $({COUNTERS}); do p=${{f#/proc/}}; kill ${{p%/cmdline}}; done"


def memory_interpreter(_: str | None) -> dict[str, Any]:
    """A full snapshot of a code interpreter's sandbox with a context holding state and a counter
    running: the counter counts on in the copy, whose cells run in a fresh context (a context's
    kernel is not carried); the source's context keeps its state."""
    o: dict[str, Any] = {}
    sb = e2b_code_interpreter.Sandbox.create(timeout=120)
    o["source_cell"] = sb.run_code("x = 41\nx + 1").text
    sb.files.write("/tmp/counter.py", COUNTER)
    sb.commands.run(f"python3 /tmp/counter.py {START}", background=True)
    sb.commands.run("for i in $(seq 100); do test -s /tmp/count && exit 0; sleep 0.1; done; exit 1")
    before = int(sb.files.read("/tmp/count"))
    snap = sb.create_snapshot()
    copy = e2b_code_interpreter.Sandbox.create(snap.snapshot_id, timeout=120)
    first = int(copy.files.read("/tmp/count"))
    time.sleep(0.5)
    o["copy_counts_on"] = before <= first < int(copy.files.read("/tmp/count"))
    missing = copy.run_code("x")
    o["copy_x"] = missing.error.name if missing.error else missing.text
    o["copy_cell"] = copy.run_code("y = 2\ny * 21").text
    o["source_after"] = sb.run_code("x + 2").text
    copy.kill()
    sb.kill()
    Sandbox.delete_snapshot(snap.snapshot_id)
    return o


def memory(port: str | None) -> dict[str, Any]:
    """A full snapshot (the default) of a sandbox running a counter and an HTTP server, two
    sandboxes made from it, and `fork(count=2)`: in each copy the counter counts on from the
    snapshot's moment and the server answers through `get_host`; each copy is a machine of its
    own (its own files, its own processes)."""
    import http.client

    o: dict[str, Any] = {}
    sb = Sandbox.create(timeout=300)
    sb.files.write("/tmp/counter.py", COUNTER)
    sb.files.write("/tmp/page.txt", "served from the snapshot\n")
    sb.commands.run(f"python3 /tmp/counter.py {START}", background=True)
    sb.commands.run(f"python3 -m http.server {port} --bind 127.0.0.1 --directory /tmp", background=True)
    sb.commands.run(
        f'for i in $(seq 100); do test -s /tmp/count && python3 -c "import socket; '
        f"socket.create_connection(('127.0.0.1', {port}))\" && exit 0; sleep 0.1; done; exit 1"
    )

    def count(s: Any) -> int:
        return int(s.files.read("/tmp/count"))

    def look(s: Any) -> dict[str, Any]:
        first = count(s)
        time.sleep(0.5)
        host = s.get_host(int(str(port)))
        conn = http.client.HTTPConnection(host.split(".", 1)[1], timeout=30)
        conn.request(
            "GET",
            "/page.txt",
            headers={"Host": host, "e2b-traffic-access-token": s.traffic_access_token or ""},
        )
        r = conn.getresponse()
        return {
            "first": first,
            "then": count(s),
            "served": [r.status, r.read().decode()],
            "counters": len(s.commands.run(COUNTERS).stdout.split()),
        }

    before = count(sb)
    snap = sb.create_snapshot()
    o["snapshot_id"] = snap.snapshot_id
    o["before"] = before
    copies = [Sandbox.create(snap.snapshot_id, timeout=120) for _ in range(2)]
    copies[0].files.write("/tmp/page.txt", "changed in the first copy\n")
    o["copies"] = [look(c) for c in copies]
    # The first copy's counter stopped: the second's runs on (a process of its own).
    copies[0].commands.run(STOP_COUNTERS)
    stopped = count(copies[0])
    time.sleep(0.3)
    o["stopped_stays"] = count(copies[0]) == stopped
    o["other_runs_on"] = look(copies[1])["then"] > o["copies"][1]["then"]
    o["source"] = look(sb)
    before_fork = count(sb)
    forks = sb.fork(count=2)
    o["forks"] = [look(f) if not isinstance(f, Exception) else err(f) for f in forks]
    o["before_fork"] = before_fork
    o["source_id_kept"] = sb.get_info().sandbox_id == sb.sandbox_id
    for s in [*copies, *[f for f in forks if not isinstance(f, Exception)], sb]:
        s.kill()
    return o


# A shell counting in /tmp/shcount, a process per step (its children), and a Python program
# whose thread counts in /tmp/tcount.
SHELL_COUNTER = (
    "i=0; while :; do i=$((i+1)); echo $i > /tmp/shcount.tmp; mv /tmp/shcount.tmp /tmp/shcount; "
    "sleep 0.05; done"
)
THREAD_COUNTER = """import os, threading, time
n = 0
def count():
    global n
    while True:
        n += 1
        time.sleep(0.01)
threading.Thread(target=count, daemon=True).start()
while True:
    with open("/tmp/tcount.tmp", "w") as f:
        f.write(str(n))
    os.replace("/tmp/tcount.tmp", "/tmp/tcount")
    time.sleep(0.02)
"""


def memory_family(_: str | None) -> dict[str, Any]:
    """A full snapshot of a sandbox running programs of several tasks (a shell that starts a
    process per step, a Python program with a thread of its own), and a sandbox made from it:
    both count on there (or the snapshot is refused, naming what it cannot take)."""
    o: dict[str, Any] = {}
    sb = Sandbox.create(timeout=300)
    sb.files.write("/tmp/threads.py", THREAD_COUNTER)
    sb.commands.run(SHELL_COUNTER, background=True)
    sb.commands.run("python3 /tmp/threads.py", background=True)
    sb.commands.run(
        "for i in $(seq 100); do test -s /tmp/shcount && test -s /tmp/tcount && exit 0; sleep 0.1; done; exit 1"
    )

    def counts(s: Any) -> list[int]:
        return [int(s.files.read(f)) for f in ("/tmp/shcount", "/tmp/tcount")]

    made = attempt(sb.create_snapshot)
    if "error" in made:
        o["snapshot"] = made
        before = counts(sb)
        time.sleep(0.3)
        o["source_runs_on"] = all(b > a for a, b in zip(before, counts(sb), strict=True))
        sb.kill()
        return o
    snap = made["ok"]
    copy = Sandbox.create(snap.snapshot_id, timeout=120)
    first = counts(copy)
    time.sleep(0.5)
    o["copy"] = {"first": first, "then": counts(copy)}
    copy.kill()
    sb.kill()
    Sandbox.delete_snapshot(snap.snapshot_id)
    return o


def pause_evicted(sandbox_id: str | None) -> dict[str, Any]:
    """A sandbox with a counter running, paused (the server evicts it past its bound of a pause);
    then, given its id, `connect` resumes it: the counter counts on."""
    if sandbox_id is None:
        sb = Sandbox.create(timeout=300)
        sb.files.write("/tmp/counter.py", COUNTER)
        sb.commands.run(f"python3 /tmp/counter.py {START}", background=True)
        sb.commands.run("for i in $(seq 100); do test -s /tmp/count && exit 0; sleep 0.1; done; exit 1")
        before = int(sb.files.read("/tmp/count"))
        return {"id": sb.sandbox_id, "before": before, "paused": sb.pause()}
    sb = Sandbox.connect(sandbox_id, timeout=120)
    first = int(sb.files.read("/tmp/count"))
    time.sleep(0.5)
    o = {
        "first": first,
        "then": int(sb.files.read("/tmp/count")),
        "counters": len(sb.commands.run(COUNTERS).stdout.split()),
    }
    sb.kill()
    return o


TICKER = "while true; do date +%s.%N >> /tmp/ticks; sleep 0.05; done"


def ticks(sb: Any) -> list[float]:
    return [float(t) for t in sb.files.read("/tmp/ticks").split()]


def pause(_: str | None) -> dict[str, Any]:
    """Pause keeps processes and files and runs nothing until connect resumes it; a filesystem
    pause, and a reboot on resume, keep the files and end the processes."""
    o: dict[str, Any] = {}
    sb = Sandbox.create(timeout=120)
    sb.files.write("state.txt", "kept")
    sb.commands.run(TICKER, background=True)
    time.sleep(0.3)
    pid = sb.commands.run("pgrep -f [t]icks").stdout
    o["paused"] = sb.pause()
    paused_at = time.time()
    o["paused_again"] = sb.pause()
    o["state"] = sb.get_info().state.value
    listed = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
    o["listed_paused"] = [s.sandbox_id == sb.sandbox_id for s in listed]
    o["listed_running"] = [
        s.sandbox_id for s in Sandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
    ]
    o["command_while_paused"] = attempt(lambda: sb.commands.run("true", timeout=5))
    time.sleep(1.0)
    resumed_at = time.time()
    again = Sandbox.connect(sb.sandbox_id, timeout=60)
    time.sleep(0.3)
    seen = ticks(again)
    o["ticks_while_paused"] = len([t for t in seen if paused_at + 0.1 < t < resumed_at])
    o["ticks_after"] = len([t for t in seen if t > resumed_at]) > 0
    o["same_process"] = bool(pid.strip()) and again.commands.run("pgrep -f [t]icks").stdout == pid
    o["state_after"] = again.get_info().state.value
    o["ttl_after"] = round((again.get_info().end_at - again.get_info().started_at).total_seconds()) > 0
    o["file"] = again.files.read("state.txt")
    # Only the files are kept: the processes end, the sandbox restarts from them.
    o["fs_paused"] = again.pause(mode="filesystem")
    o["fs_state"] = again.get_info().state.value
    back = Sandbox.connect(sb.sandbox_id)
    o["fs_file"] = back.files.read("state.txt")
    o["fs_processes"] = back.commands.run("pgrep -f [t]icks || true").stdout
    back.files.write("state.txt", "after a restart")
    back.commands.run(TICKER, background=True)
    back.pause()
    rebooted = Sandbox.connect(sb.sandbox_id, on_resume="reboot")
    o["reboot_file"] = rebooted.files.read("state.txt")
    o["reboot_processes"] = rebooted.commands.run("pgrep -f [t]icks || true").stdout
    o["killed"] = rebooted.kill()
    o["pause_gone"] = attempt(Sandbox.pause, sb.sandbox_id)
    # Paused at its timeout instead of killed; a command resumes it (auto-resume), or connect.
    auto = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause", "auto_resume": True})
    manual = Sandbox.create(timeout=2, lifecycle={"on_timeout": "pause"})
    auto.files.write("kept.txt", "auto")
    time.sleep(4)
    o["auto_states"] = [s.get_info().state.value for s in (auto, manual)]
    o["auto_lifecycle"] = auto.get_info().lifecycle
    o["auto_command"] = auto.commands.run("cat kept.txt").stdout
    o["auto_after"] = auto.get_info().state.value
    o["manual_command"] = attempt(lambda: manual.commands.run("true", timeout=5))
    o["manual_connect"] = Sandbox.connect(manual.sandbox_id, timeout=60).commands.run("echo back").stdout
    auto.kill()
    manual.kill()
    return o


def pause_files(_: str | None) -> dict[str, Any]:
    """Pause and connect where a pause keeps the files only (kubernetes: the pod ends): the files
    are there after, a background process is not, and calls between are refused."""
    o: dict[str, Any] = {}
    sb = Sandbox.create(timeout=120)
    sb.files.write("state.txt", "kept")
    sb.commands.run("sleep 600", background=True)
    o["paused"] = sb.pause()
    o["state"] = sb.get_info().state.value
    o["command_while_paused"] = attempt(lambda: sb.commands.run("true", timeout=5))
    again = Sandbox.connect(sb.sandbox_id, timeout=60)
    o["state_after"] = again.get_info().state.value
    o["file"] = again.files.read("state.txt")
    o["processes"] = again.commands.run("cat /proc/[0-9]*/comm").stdout.split()
    o["killed"] = again.kill()
    return o


def volumes(_: str | None) -> dict[str, Any]:
    """A volume made, written through the content API, mounted by two sandboxes in turn (by the
    `Volume` and by its name), read back, listed, removed from, destroyed."""
    o: dict[str, Any] = {}
    vol = Volume.create("data")
    o["created"] = {"name": vol.name, "token": bool(vol.token), "id": vol.volume_id.startswith("vol-")}
    o["duplicate"] = attempt(Volume.create, "data")
    o["listed"] = [v.name for v in Volume.list()]
    o["written"] = vol.write_file("/seed.txt", "seeded", mode=0o640).mode
    o["made"] = vol.make_dir("/dir/sub", force=True).type.value
    o["stat"] = vol.get_info("/seed.txt").size
    sb = Sandbox.create(volume_mounts={"/mnt/data": vol}, timeout=120)
    o["in_sandbox"] = sb.commands.run("cat /mnt/data/seed.txt; ls /mnt/data").stdout
    sb.commands.run("echo from-sandbox > /mnt/data/out.txt; ln -s /etc/passwd /mnt/data/link")
    sb.kill()
    o["read_back"] = vol.read_file("/out.txt")
    o["through_link"] = attempt(vol.read_file, "/link/x")
    o["link"] = vol.get_info("/link").type.value
    again = Sandbox.create(volume_mounts={"/v": "data"}, timeout=120)
    o["second"] = again.commands.run("cat /v/out.txt").stdout
    again.kill()
    o["entries"] = sorted(e.name for e in vol.list("/"))
    vol.remove("/dir")
    o["exists_after"] = vol.exists("/dir")
    o["missing_volume"] = attempt(Sandbox.create, volume_mounts={"/v": "no-such-volume"})
    o["other_key_id"] = vol.volume_id
    o["destroyed"] = Volume.destroy(vol.volume_id)
    o["destroyed_again"] = Volume.destroy(vol.volume_id)
    o["info_gone"] = attempt(Volume.get_info, vol.volume_id)
    return o


def volumes_mounted(_: str | None) -> dict[str, Any]:
    """A volume made, mounted by two sandboxes at once (by the `Volume` and by its name), written
    by one and read by the other, then destroyed; its content API refused where its files are
    not on the server's host (a kubernetes claim)."""
    o: dict[str, Any] = {}
    vol = Volume.create("shared")
    a = Sandbox.create(volume_mounts={"/mnt/data": vol}, timeout=120)
    b = Sandbox.create(volume_mounts={"/v": "shared"}, timeout=120)
    a.commands.run("echo from-a > /mnt/data/a.txt")
    o["seen_by_b"] = b.commands.run("cat /v/a.txt").stdout
    o["content_api"] = attempt(vol.read_file, "/a.txt")
    a.kill()
    b.kill()
    o["destroyed"] = Volume.destroy(vol.volume_id)
    return o


def network(port: str | None) -> dict[str, Any]:
    """Egress: none by default; `update_network` replaces it while the sandbox runs (the test's
    server on 127.0.0.2:`port` allowed and nothing else; cleared: the public internet, never the
    host's loopback); `network=` at create; rules it cannot serve refused."""
    from e2b import ALL_TRAFFIC

    fetch = 'python3 -c "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=20).read().decode())" '

    def get(sb: Any, p: object) -> dict[str, Any]:
        try:
            return result(sb.commands.run(fetch + f"http://127.0.0.2:{p}/", timeout=60))
        except CommandExitException as e:
            return {"stdout": e.stdout, "stderr": e.stderr[-200:], "exit_code": e.exit_code}

    o: dict[str, Any] = {}
    sb = Sandbox.create(timeout=120)
    o["before"] = get(sb, port)["exit_code"]
    sb.update_network({"allow_out": [f"127.0.0.2:{port}"], "deny_out": [ALL_TRAFFIC]})
    o["info"] = sb.get_info().network
    o["allowed"] = get(sb, port)
    o["other"] = get(sb, int(str(port)) + 1)
    sb.update_network({})
    o["cleared"] = get(sb, port)
    o["cleared_info"] = sb.get_info().network
    o["transform"] = attempt(
        sb.update_network, {"rules": {"x.example": [{"transform": {"headers": {"a": "b"}}}]}}
    )
    o["bad"] = attempt(sb.update_network, {"allow_out": ["not a rule"], "deny_out": [ALL_TRAFFIC]})
    sb.pause()
    o["paused"] = attempt(sb.update_network, {"deny_out": [ALL_TRAFFIC]})
    sb.kill()
    o["gone"] = attempt(sb.update_network, {})
    made = Sandbox.create(
        timeout=120, network={"allow_out": [f"127.0.0.2:{port}"], "deny_out": [ALL_TRAFFIC]}
    )
    o["at_create"] = get(made, port)
    made.kill()
    return o


def ports(port: str | None) -> dict[str, Any]:
    """`get_host`: `python3 -m http.server` started inside (a background command), fetched by an
    ordinary HTTP client through the host name the SDK forms, with the sandbox's traffic token;
    without it refused."""
    import http.client

    o: dict[str, Any] = {}
    sb = Sandbox.create(timeout=120)
    sb.files.write("page.txt", "served from inside\n")
    sb.commands.run(f"python3 -m http.server {port} --bind 127.0.0.1", background=True)
    sb.commands.run(
        f"for i in $(seq 100); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\" && exit 0; sleep 0.1; done; exit 1"
    )
    host = sb.get_host(int(str(port)))
    o["host"] = host
    address = host.split(".", 1)[1]  # the server's ports listener, as the domain names it

    def get(headers: dict[str, str]) -> tuple[int, str]:
        conn = http.client.HTTPConnection(address, timeout=30)
        conn.request("GET", "/page.txt", headers={"Host": host, **headers})
        r = conn.getresponse()
        return r.status, r.read().decode()

    o["fetched"] = get({"e2b-traffic-access-token": sb.traffic_access_token or ""})
    o["no_token"] = get({})[0]
    sb.kill()
    return o


async def pty(_: str | None) -> dict[str, Any]:
    """`pty.create` (`bash -i -l` on a 24x80 terminal): a command, `resize` seen by `stty size`,
    Ctrl-C interrupting `sleep`, a second listener through `pty.connect`, the exit status through
    `wait`; `kill`; a resize of a command without a terminal. Expected text is computed by the
    shell, so the terminal's echo of what was typed never matches it."""
    from e2b import PtySize

    o: dict[str, Any] = {}
    sb = await AsyncSandbox.create(timeout=120)
    shown = bytearray()
    h = await sb.pty.create(PtySize(rows=24, cols=80), on_data=shown.extend)

    async def until(buf: bytearray, text: str) -> bool:
        for _ in range(600):
            if text.encode() in buf:
                return True
            await asyncio.sleep(0.05)
        return False

    async def typed(data: str) -> None:
        await sb.pty.send_stdin(h.pid, data.encode())

    await typed("stty size\n")
    o["size"] = await until(shown, "24 80\r\n")
    await sb.pty.resize(h.pid, PtySize(rows=40, cols=120))
    await typed("stty size\n")
    o["resized"] = await until(shown, "40 120\r\n")
    await typed("sleep 600; echo not-$((1+1))-interrupted\n")
    await asyncio.sleep(0.5)
    await typed("\x03")
    await typed("echo alive-$((40+2))\n")
    o["interrupted"] = await until(shown, "alive-42\r\n") and b"not-2-interrupted" not in shown
    again = bytearray()
    h2 = await sb.pty.connect(h.pid, on_data=again.extend)
    await typed("echo twice-$((3*3))\n")
    o["connected"] = await until(again, "twice-9\r\n") and await until(shown, "twice-9\r\n")
    await h2.disconnect()
    await typed("exit 3\n")
    try:
        await h.wait()
        o["exit"] = 0
    except CommandExitException as e:
        o["exit"] = e.exit_code
    other = await sb.pty.create(PtySize(rows=24, cols=80), on_data=lambda _: None)
    o["killed"] = await sb.pty.kill(other.pid)
    o["killed_wait"] = await aattempt(other.wait())
    plain = await sb.commands.run("sleep 30", background=True)
    o["resize_plain"] = await aattempt(sb.pty.resize(plain.pid, PtySize(rows=10, cols=10)))
    await plain.kill()
    await sb.kill()
    return o


async def pty_slow_reader(lines: str | None) -> dict[str, Any]:
    """A terminal whose reader is slow (an `on_data` that sleeps on every chunk) while `seq`
    prints `lines` lines: everything arrives, in order."""
    from e2b import PtySize

    n = int(lines or "100000")
    sb = await AsyncSandbox.create(timeout=300)
    shown = bytearray()

    async def slow(data: bytes) -> None:
        shown.extend(data)
        await asyncio.sleep(0.002)

    h = await sb.pty.create(PtySize(rows=24, cols=80), on_data=slow, timeout=240)
    await sb.pty.send_stdin(h.pid, f"seq 1 {n}; exit 0\n".encode())
    try:
        await h.wait()
        exit_code = 0
    except CommandExitException as e:
        exit_code = e.exit_code
    # The shell's bracketed-paste switches and CRs of the terminal are not lines of `seq`.
    text = re.sub(r"\x1b\[\?2004[hl]|\r", "", shown.decode(errors="replace"))
    numbers = [line for line in text.split("\n") if line.isdigit()]
    await sb.kill()
    return {
        "exit": exit_code,
        "in_order": numbers == [str(i) for i in range(1, n + 1)],
        "count": len(numbers),
    }


def volume_fifo(other_key: str | None) -> dict[str, Any]:
    """A FIFO a sandbox made in its volume, read ten times at once through the content API (and
    written once) while another key (`other_key`) creates volumes and this key reads a file."""
    from concurrent.futures import ThreadPoolExecutor

    def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
        t0 = time.perf_counter()
        out = attempt(fn, *args, **kwargs)
        return time.perf_counter() - t0, out

    theirs = {"api_key": other_key, "request_timeout": 20}
    o: dict[str, Any] = {}
    vol = Volume.create("with-fifo")
    sb = Sandbox.create(volume_mounts={"/mnt/data": vol}, timeout=120)
    o["made"] = sb.commands.run("mkfifo /mnt/data/fifo && echo plain > /mnt/data/file && echo ok").stdout
    o["usual_s"] = [timed(Volume.create, f"usual-{i}", **theirs)[0] for i in range(3)]
    with ThreadPoolExecutor(12) as pool:
        reads = [pool.submit(timed, vol.read_file, "/fifo", request_timeout=20) for _ in range(10)]
        other = pool.submit(timed, Volume.create, "during", **theirs)
        same = pool.submit(timed, vol.read_file, "/file", request_timeout=20)
        o["reads"] = [f.result()[1] for f in reads]
        o["reads_s"] = max(f.result()[0] for f in reads)
        o["other_s"], o["other"] = other.result()[0], "ok" in other.result()[1]
        o["same_s"], o["same"] = same.result()
    o["write"] = attempt(vol.write_file, "/fifo", "into the fifo", request_timeout=20)
    o["stat"] = vol.get_info("/fifo").type.value
    sb.kill()
    for v in Volume.list(api_key=other_key):
        Volume.destroy(v.volume_id, api_key=other_key)
    o["destroyed"] = Volume.destroy(vol.volume_id)
    return o


def volume_other(volume_id: str | None) -> dict[str, Any]:
    """Another key's volume: missing to this key."""
    return {"info": attempt(Volume.get_info, volume_id), "listed": [v.name for v in Volume.list()]}


def snapshot_other(snapshot_id: str | None) -> dict[str, Any]:
    """Another key's snapshot: missing to this key."""
    return {
        "create": attempt(Sandbox.create, snapshot_id),
        "listed": [s.snapshot_id for s in Sandbox.list_snapshots().next_items()],
        "delete": Sandbox.delete_snapshot(snapshot_id),
    }


SCENARIOS = {
    "lifecycle": lifecycle,
    "commands": commands,
    "files": files,
    "async_api": async_api,
    "interpreter": interpreter,
    "interpreter_async": interpreter_async,
    "other_key": other_key,
    "create_one": create_one,
    "use_elsewhere": use_elsewhere,
    "wrong_key": wrong_key,
    "executions": executions,
    "bench": bench,
    "first_commands": first_commands,
    "snapshots": snapshots,
    "memory": memory,
    "memory_family": memory_family,
    "memory_interpreter": memory_interpreter,
    "memory_refused": memory_refused,
    "pause_evicted": pause_evicted,
    "snapshot_other": snapshot_other,
    "pause": pause,
    "pause_files": pause_files,
    "volumes": volumes,
    "volumes_mounted": volumes_mounted,
    "volume_other": volume_other,
    "volume_fifo": volume_fifo,
    "network": network,
    "ports": ports,
    "pty": pty,
    "pty_slow_reader": pty_slow_reader,
}


def main() -> None:
    name = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else None
    fn = SCENARIOS[name]
    out = asyncio.run(fn(arg)) if asyncio.iscoroutinefunction(fn) else fn(arg)
    print(json.dumps(out, default=str), flush=True)
    # The observations are out; the SDK's transport (a Rust runtime of its own) may abort while
    # the interpreter tears down after an event loop closed, which is not what is tested here.
    os._exit(0)


if __name__ == "__main__":
    main()

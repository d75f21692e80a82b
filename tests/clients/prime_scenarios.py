"""Scenarios of the unmodified `prime-sandboxes` SDK against a real `sandboxes serve`, run inside a
client virtualenv (tests/clients/*.txt) by tests/test_prime_api.py:

    python prime_scenarios.py SCENARIO [ARG]      (PRIME_API_BASE_URL, PRIME_API_KEY, HOME set)

Each scenario drives the SDK as its users do and prints one JSON object of what it observed; the
test asserts on it. Exceptions are recorded by class name, since which one the SDK raises is the
contract. Works with every SDK version the tests pin (calls a version lacks are skipped by the
test, not here).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Any

from prime_sandboxes import APIClient, AsyncSandboxClient, CreateSandboxRequest, SandboxClient

try:
    from prime_sandboxes import VolumeMount
except ImportError:  # SDKs before 0.5 have no volumes
    VolumeMount = None

# The image sandboxes are asked for; a container backend runs exactly that image, so its tests name
# one the engine has.
IMAGE = os.environ.get("SCENARIO_IMAGE", "python:3.11-slim")
# Where the file scenarios write: anywhere in a root sandbox's writable root.
DIR = "/app"


def err(e: BaseException) -> str:
    return type(e).__name__


def attempt(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return {"ok": fn(*args, **kwargs)}
    except Exception as e:  # noqa: BLE001 - the class of the error is what is observed
        return {"error": err(e), "message": str(e)[:300]}


async def aattempt(coro: Any) -> Any:
    try:
        return {"ok": await coro}
    except Exception as e:  # noqa: BLE001
        return {"error": err(e), "message": str(e)[:300]}


def request(**kw: Any) -> CreateSandboxRequest:
    return CreateSandboxRequest(**{"name": "scenario", "docker_image": IMAGE, **kw})


def cmd(r: Any) -> dict[str, Any]:
    return {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code}


# -- scenarios -------------------------------------------------------------------------------


def lifecycle(_: str | None) -> dict[str, Any]:
    c = SandboxClient(APIClient())
    out: dict[str, Any] = {}
    a = c.create(
        request(
            labels=["lc", "first"],
            environment_vars={"FOO": "bar"},
            secrets={"TOKEN": "s3"},
            cpu_cores=1,
            memory_gb=0.5,
            timeout_minutes=30,
            idempotency_key="lifecycle-a",
        )
    )
    again = c.create(request(labels=["lc", "first"], idempotency_key="lifecycle-a"))
    b = c.create(
        request(labels=["lc"], vm=False)
        if "vm" in CreateSandboxRequest.model_fields
        else request(labels=["lc"])
    )
    out["created"] = {
        "status": a.status,
        "same_for_key": again.id == a.id,
        "distinct": a.id != b.id,
        "memory_gb": a.memory_gb,
        "timeout_minutes": a.timeout_minutes,
        "labels": a.labels,
    }
    c.wait_for_creation(a.id)
    c.bulk_wait_for_creation([a.id, b.id])
    env = c.execute_command(a.id, "echo $FOO $TOKEN")
    out["env"] = env.stdout
    got = c.get(a.id)
    out["get"] = {"id": got.id, "status": got.status, "name": got.name, "image": got.docker_image}
    listed = c.list(labels=["first"])
    out["list_first"] = [s.id for s in listed.sandboxes] == [a.id]
    page1 = c.list(labels=["lc"], per_page=1, page=1)
    page2 = c.list(labels=["lc"], per_page=1, page=2)
    out["paging"] = {
        "total": page1.total,
        "has_next": page1.has_next,
        "second_has_next": page2.has_next,
        "ids": sorted([page1.sandboxes[0].id, page2.sandboxes[0].id]) == sorted([a.id, b.id]),
    }
    st = c.get_sandbox_statuses([a.id, "sb-doesnotexist"])
    out["statuses"] = {
        "statuses": [(s.sandbox_id, str(s.status.value)) for s in st.statuses],
        "errors": [(e.sandbox_id, e.code) for e in st.errors],
    }
    out["logs"] = c.get_logs(a.id)
    out["delete"] = c.delete(a.id)
    out["after_delete"] = c.get(a.id).status
    out["exec_after_delete"] = attempt(c.execute_command, a.id, "true")
    out["delete_twice"] = attempt(c.delete, a.id)
    bulk = c.bulk_delete(labels=["lc"])
    out["bulk"] = {"succeeded": bulk.succeeded == [b.id], "failed": bulk.failed}
    out["active_after"] = [s.id for s in c.list(labels=["lc"], exclude_terminated=True).sandboxes]
    return out


def commands(_: str | None) -> dict[str, Any]:
    from prime_sandboxes.exceptions import CommandTimeoutError  # noqa: F401 - the class asserted

    c = SandboxClient(APIClient())
    sb = c.create(request())
    c.wait_for_creation(sb.id)
    out: dict[str, Any] = {}
    out["basic"] = cmd(c.execute_command(sb.id, "echo out; echo err >&2; exit 3"))
    out["whoami"] = cmd(c.execute_command(sb.id, "id -u; id -g"))
    out["workdir"] = cmd(c.execute_command(sb.id, "mkdir -p /app && echo data > /app/f && pwd"))
    out["cwd"] = cmd(c.execute_command(sb.id, "pwd; cat f", working_dir="/app"))
    out["env"] = cmd(c.execute_command(sb.id, 'echo "$A-$B"', env={"A": "1", "B": "two words"}))
    out["user_root"] = attempt(lambda: cmd(c.execute_command(sb.id, "id -u", user="root")))
    out["user_other"] = attempt(c.execute_command, sb.id, "id -u", user="nobody")
    t0 = time.monotonic()
    out["timeout"] = attempt(c.execute_command, sb.id, "sleep 30", timeout=2)
    out["timeout_s"] = time.monotonic() - t0
    out["after_timeout"] = cmd(c.execute_command(sb.id, "echo alive"))
    big = c.execute_command(sb.id, "head -c 3000000 /dev/zero | tr '\\0' x")
    out["big_stdout"] = len(big.stdout)
    out["pip"] = cmd(
        c.execute_command(sb.id, "python3 -m venv /opt/v && /opt/v/bin/python -c 'print(42)'", timeout=120)
    )
    c.delete(sb.id)
    return out


def executions(_: str | None) -> dict[str, Any]:
    """A command, as the SDK runs one (its command sessions), after the SDK's wait for the
    sandbox."""
    c = SandboxClient(APIClient())
    sb = c.create(request())

    def run() -> dict[str, Any]:
        c.wait_for_creation(sb.id)  # which runs a command in the sandbox too
        return cmd(c.execute_command(sb.id, "echo ran"))

    try:
        return {"command": attempt(run)}
    finally:
        c.delete(sb.id)


def async_commands(_: str | None) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        c = AsyncSandboxClient()
        sb = await c.create(request())
        await c.wait_for_creation(sb.id)
        rs = await asyncio.gather(*(c.execute_command(sb.id, f"echo {i}") for i in range(20)))
        out = {"parallel": [r.stdout.strip() for r in rs]}
        out["exit"] = (await c.execute_command(sb.id, "exit 9")).exit_code
        await c.delete(sb.id)
        await c.aclose()
        return out

    return asyncio.run(main())


def processes(vm: str | None) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        c = AsyncSandboxClient()
        sb = await c.create(request(vm=True) if vm else request())
        await c.wait_for_creation(sb.id)
        out: dict[str, Any] = {}
        p = await c.open_process(sb.id, "read line; echo got:$line; echo to-err >&2; sleep 60")
        await p.write_stdin(b"hello\n")
        out["stdout"] = (await p.stdout.__anext__()).decode()
        out["stderr"] = (await p.stderr.__anext__()).decode()
        await p.terminate()
        out["terminated"] = await p.wait()
        p2 = await c.open_process(sb.id, "trap '' TERM; sleep 60")
        await asyncio.sleep(0.3)
        await p2.kill()
        out["killed"] = await p2.wait()
        p3 = await c.open_process(sb.id, "exit 5")
        out["exited"] = await p3.wait()
        await c.delete(sb.id)
        await c.aclose()
        return out

    return asyncio.run(main())


def jobs(_: str | None) -> dict[str, Any]:
    c = SandboxClient(APIClient())
    sb = c.create(request())
    c.wait_for_creation(sb.id)
    out: dict[str, Any] = {}
    job = c.start_background_job(
        sb.id, "sleep 1; echo job-out; echo job-err >&2; exit 7", working_dir="/tmp", env={"J": "1"}
    )
    first = c.get_background_job(sb.id, job)
    out["first_completed"] = first.completed
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        st = c.get_background_job(sb.id, job)
        if st.completed:
            break
        time.sleep(0.2)
    out["done"] = {
        "completed": st.completed,
        "exit_code": st.exit_code,
        "stdout": st.stdout,
        "stderr": st.stderr,
    }
    if hasattr(c, "get_background_job_statuses"):
        more = [c.start_background_job(sb.id, f"exit {i}") for i in range(3)]
        time.sleep(1.5)
        out["batch"] = attempt(
            lambda: [
                (s.job_id == j.job_id, s.completed, s.exit_code)
                for s, j in zip(c.get_background_job_statuses(more), more)
            ]
        )
    c.delete(sb.id)
    return out


def files(size_mb: str | None) -> dict[str, Any]:
    from prime_sandboxes.exceptions import SandboxFileNotFoundError, SandboxFileTooLargeError  # noqa: F401

    c = SandboxClient(APIClient())
    sb = c.create(request())
    c.wait_for_creation(sb.id)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src.bin")
        n = int(size_mb or 1) << 20
        data = os.urandom(n)
        with open(src, "wb") as f:
            f.write(data)
        digest = hashlib.sha256(data).hexdigest()
        up = c.upload_file(sb.id, f"{DIR}/big.bin", src, timeout=300)
        out["upload"] = {"success": up.success, "size": up.size == n}
        remote = c.execute_command(sb.id, f"sha256sum {DIR}/big.bin", timeout=120).stdout.split()[0]
        out["remote_digest"] = remote == digest
        dst = os.path.join(d, "dst.bin")
        c.download_file(sb.id, f"{DIR}/big.bin", dst, timeout=300)
        with open(dst, "rb") as f:
            out["download_digest"] = hashlib.sha256(f.read()).hexdigest() == digest
    c.upload_bytes(sb.id, f"{DIR}/text.txt", b"0123456789", "text.txt")
    whole = c.read_file(sb.id, f"{DIR}/text.txt")
    win = c.read_file(sb.id, f"{DIR}/text.txt", offset=2, length=3)
    tail = c.read_file(sb.id, f"{DIR}/text.txt", offset=-4, length=4)
    out["read"] = {
        "whole": (whole.content, whole.size, whole.truncated),
        "window": (win.content, win.offset, win.total_size, win.truncated),
        "tail": (tail.content, tail.offset),
    }
    out["missing"] = attempt(c.read_file, sb.id, f"{DIR}/nope.txt")
    c.execute_command(sb.id, "head -c 50000000 /dev/zero > /tmp/huge")
    out["too_large"] = attempt(c.read_file, sb.id, "/tmp/huge")
    out["huge_window"] = attempt(lambda: c.read_file(sb.id, "/tmp/huge", offset=-10, length=10).size)
    out["outside"] = attempt(c.read_file, sb.id, "/proc/1/environ")
    c.delete(sb.id)
    return out


def auth(other_id: str | None) -> dict[str, Any]:
    from prime_sandboxes.core.client import UnauthorizedError  # noqa: F401

    c = SandboxClient(APIClient())
    out: dict[str, Any] = {}
    if os.environ.get("PRIME_API_KEY") == "wrong-key":
        out["list"] = attempt(lambda: c.list().total)
        out["create"] = attempt(lambda: c.create(request()).id)
        return out
    out["get_other"] = attempt(lambda: c.get(other_id).id)
    out["exec_other"] = attempt(lambda: c.execute_command(other_id, "true").exit_code)
    out["delete_other"] = attempt(c.delete, other_id)
    out["list_other"] = [s.id for s in c.list().sandboxes]
    return out


def network(port: str | None) -> dict[str, Any]:
    """Egress policies: none by default; `set_network` replaces one while the sandbox runs (an
    allow-list reaching the test's server on 127.0.0.2:`port` and nothing else, `allow=["*"]`
    the public internet only, `deny=["*"]` nothing), each applied when its call returns; an
    allow-list given at create."""
    c = SandboxClient(APIClient())
    sb = c.create(request())
    c.wait_for_creation(sb.id)
    out: dict[str, Any] = {}

    def fetch(p: object) -> str:
        return f"python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.2:{p}/', timeout=20).read().decode())\""

    def status(s: Any) -> dict[str, Any]:
        return {"policy": s.policy.model_dump(), "applied": s.applied, "generation": s.generation}

    out["direct"] = cmd(
        c.execute_command(
            sb.id,
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.2', {port}), timeout=2)\"",
        )
    )
    out["deny_all"] = attempt(lambda: status(c.set_network(sb.id, deny=["*"])))
    out["allow_later"] = attempt(lambda: status(c.set_network(sb.id, allow=[f"127.0.0.2:{port}"])))
    out["get"] = attempt(lambda: status(c.get_network(sb.id)))
    out["later_fetch"] = cmd(c.execute_command(sb.id, fetch(port), timeout=60))
    out["later_fetch_other"] = cmd(c.execute_command(sb.id, fetch(int(str(port)) + 1), timeout=60))
    out["open"] = attempt(lambda: status(c.set_network(sb.id, allow=["*"])))
    out["open_fetch"] = cmd(c.execute_command(sb.id, fetch(port), timeout=60))
    out["shown_later"] = c.get(sb.id).network_denylist
    allowed = c.create(request(network_allowlist=[f"127.0.0.2:{port}"]))
    c.wait_for_creation(allowed.id)
    out["shown"] = c.get(allowed.id).network_allowlist
    out["policy"] = c.get_network(allowed.id).policy.allowlist
    out["fetch"] = cmd(c.execute_command(allowed.id, fetch(port), timeout=60))
    out["fetch_other"] = cmd(c.execute_command(allowed.id, fetch(int(str(port)) + 1), timeout=60))
    out["range"] = attempt(lambda: c.create(request(network_allowlist=["10.0.0.0/8:1000-2000"])).id)
    out["bad_later"] = attempt(
        lambda: c.client.request("PUT", f"/sandbox/{sb.id}/egress-policy", json={"allowlist": ["a b"]})
    )
    c.delete(sb.id)
    c.delete(allowed.id)
    return out


def images(image: str | None) -> dict[str, Any]:
    """`docker_image` on a container backend: that image runs; one the engine lacks fails as a pull."""
    c = SandboxClient(APIClient())
    out: dict[str, Any] = {}
    sb = c.create(CreateSandboxRequest(name="img", docker_image=image))
    c.wait_for_creation(sb.id)
    out["git"] = cmd(c.execute_command(sb.id, "git --version | cut -d' ' -f1-2"))
    c.delete(sb.id)
    missing = c.create(CreateSandboxRequest(name="img", docker_image="no-such-image:0"))
    out["missing_status"] = missing.status
    out["missing_wait"] = attempt(c.wait_for_creation, missing.id)
    return out


def built(name: str | None) -> dict[str, Any]:
    """`docker_image` naming a template built on the server (through the E2B template API)."""
    c = SandboxClient(APIClient())
    sb = c.create(CreateSandboxRequest(name="built", docker_image=name))
    c.wait_for_creation(sb.id)
    out = {"one": cmd(c.execute_command(sb.id, "cat /one"))}
    c.delete(sb.id)
    return out


def hold(marker: str | None) -> dict[str, Any]:
    """Starts a long command and never returns: the test kills this process mid-command."""
    c = SandboxClient(APIClient())
    sb = c.create(request())
    c.wait_for_creation(sb.id)
    print(json.dumps({"sandbox": sb.id}), flush=True)
    c.execute_command(sb.id, f"sleep {marker}", timeout=600)
    return {}


def make(_: str | None) -> dict[str, Any]:
    """A sandbox made and written to (the next scenario may use it through another server)."""
    c = SandboxClient(APIClient())
    sb = c.create(request(labels=["cross"]))
    c.wait_for_creation(sb.id)
    wrote = cmd(c.execute_command(sb.id, "echo made here > made.txt && echo $HOSTNAME"))
    return {"id": sb.id, "wrote": wrote}


def use(sandbox_id: str | None) -> dict[str, Any]:
    """Everything a client does to a sandbox made elsewhere: get, list, command, delete."""
    c = SandboxClient(APIClient())
    out: dict[str, Any] = {"status": c.get(sandbox_id).status}
    out["listed"] = sandbox_id in [s.id for s in c.list().sandboxes]
    out["read"] = cmd(c.execute_command(sandbox_id, "cat made.txt"))
    c.delete(sandbox_id)
    out["after"] = attempt(lambda: c.get(sandbox_id).status)
    return out


def checkpoints(_: str | None) -> dict[str, Any]:
    """The `prime` CLI's checkpoint calls: take one (and wait for it as the SDK does), list, batch
    get, restore (twice: a fork's sandboxes, each with writes of its own), delete."""
    c = SandboxClient(APIClient())
    sb = c.create(request())
    c.wait_for_creation(sb.id)
    out: dict[str, Any] = {}
    c.execute_command(sb.id, f"mkdir -p {DIR} && echo before > {DIR}/state")
    cp = c.checkpoint(sb.id)
    durable = c.wait_for_checkpoint(cp.id, timeout_seconds=60)
    out["checkpoint"] = {
        "state": durable.state,
        "sandbox_id": durable.sandbox_id == sb.id,
        "docker_image": durable.docker_image,
        "depth": durable.depth,
    }
    c.execute_command(sb.id, f"echo after > {DIR}/state; echo later > {DIR}/later")
    out["listed"] = [x.id == cp.id for x in c.list_checkpoints(sb.id)]
    batch = c.get_checkpoints([cp.id, "cp-missing"])
    out["batch"] = {
        "found": [x.id == cp.id for x in batch.checkpoints],
        "errors": [e.code for e in batch.errors],
    }
    forks = [c.create(CreateSandboxRequest(name=f"fork{i}", checkpoint_id=cp.id)) for i in range(2)]
    for f in forks:
        c.wait_for_creation(f.id)
    out["restored_image"] = c.get(forks[0].id).docker_image
    c.execute_command(forks[0].id, f"echo mine > {DIR}/state")
    out["forks"] = [cmd(c.execute_command(f.id, f"cat {DIR}/state; ls {DIR}")) for f in forks]
    out["parent"] = cmd(c.execute_command(sb.id, f"cat {DIR}/state"))
    second = c.checkpoint(forks[0].id)
    out["second_depth"] = c.get_checkpoint(second.id).depth
    out["other_key_id"] = cp.id
    c.delete_checkpoint(cp.id)
    out["after_delete"] = attempt(lambda: c.get_checkpoint(cp.id).state)
    out["sandbox_delete"] = c.delete_sandbox_checkpoints(forks[0].id).deleted == [second.id]
    out["restore_deleted"] = attempt(
        lambda: c.create(CreateSandboxRequest(name="gone", checkpoint_id=cp.id)).id
    )
    for x in (sb, *forks):
        c.delete(x.id)
    return out


def checkpoint_other(checkpoint_id: str | None) -> dict[str, Any]:
    """Another key's checkpoint: missing to this key, as an unknown one."""
    c = SandboxClient(APIClient())
    return {
        "get": attempt(lambda: c.get_checkpoint(checkpoint_id).state),
        "delete": attempt(c.delete_checkpoint, checkpoint_id),
        "restore": attempt(lambda: c.create(CreateSandboxRequest(name="x", checkpoint_id=checkpoint_id)).id),
    }


def volumes(_: str | None) -> dict[str, Any]:
    """The `prime sandbox volumes` calls: a volume created, attached writable by two sandboxes (a
    private copy each), published by one (the new head), read by a third (read-only), the other's
    stale publish refused then forced; deletes. Leaves a volume `kept` for `volume_other`."""
    c = SandboxClient(APIClient())
    out: dict[str, Any] = {}

    def attached(name: str, path: str, ro: bool = False) -> Any:
        sb = c.create(request(volumes=[VolumeMount(name=name, mount_path=path, read_only=ro)]))
        c.wait_for_creation(sb.id)
        return sb

    v = c.volumes.create("data")
    out["created"] = {"name": v.name, "head": v.head_checkpoint_id, "occupied": v.occupied_bytes}
    out["taken"] = attempt(lambda: c.volumes.create("data").id)
    writer, late = attached("data", "/data"), attached("data", "/mnt/v")
    out["empty"] = cmd(c.execute_command(writer.id, "ls -A /data"))
    c.execute_command(writer.id, "echo v1 > /data/f && mkdir -p /data/d && echo x > /data/d/g")
    cp = c.volumes.publish(writer.id, "data")
    out["published"] = {"state": cp.state, "by": cp.sandbox_id == writer.id, "image": cp.docker_image}
    got = c.volumes.get("data")
    out["head"] = {
        "is_publish": got.head_checkpoint_id == cp.id,
        "occupied": got.occupied_bytes > 0,
        "account": got.account_storage_used_bytes == got.occupied_bytes,
    }
    out["checkpoint_get"] = c.get_checkpoint(cp.id).state
    out["in_sandbox_list"] = [x.id for x in c.list_checkpoints(writer.id)]
    out["restore"] = attempt(lambda: c.create(CreateSandboxRequest(name="r", checkpoint_id=cp.id)).id)
    reader = attached("data", "/data", ro=True)
    out["reader"] = cmd(c.execute_command(reader.id, "cat /data/f /data/d/g; touch /data/z"))
    out["reader_publish"] = attempt(lambda: c.volumes.publish(reader.id, "data").id)
    out["late_sees"] = cmd(c.execute_command(late.id, "ls -A /mnt/v"))
    c.execute_command(late.id, "echo late > /mnt/v/f")
    out["stale"] = attempt(lambda: c.volumes.publish(late.id, "data").id)
    forced = c.volumes.publish(late.id, "data", force=True)
    out["forced_head"] = c.volumes.get("data").head_checkpoint_id == forced.id
    out["replaced"] = attempt(lambda: c.get_checkpoint(cp.id).state)
    fresh = attached("data", "/data")
    out["fresh"] = cmd(c.execute_command(fresh.id, "cat /data/f; ls -A /data"))
    out["writer_again"] = attempt(lambda: c.volumes.publish(writer.id, "data").id)
    out["not_attached"] = attempt(lambda: c.volumes.publish(fresh.id, "other").id)
    out["unknown"] = attempt(lambda: attached("nope", "/x").id)
    out["delete_attached"] = attempt(c.volumes.delete, "data")
    c.volumes.create("kept")
    listed = c.volumes.list()
    out["list"] = {"total": listed.total, "names": [x.name for x in listed.volumes]}
    for x in (writer, late, reader, fresh):
        c.delete(x.id)
    c.volumes.delete("data")
    out["after_delete"] = attempt(lambda: c.volumes.get("data").id)
    return out


def volume_other(name: str | None) -> dict[str, Any]:
    """Another key's volume `name`: missing to this key, whose own may have that name."""
    c = SandboxClient(APIClient())
    out = {
        "get": attempt(lambda: c.volumes.get(name).id),
        "delete": attempt(c.volumes.delete, name),
        "attach": attempt(lambda: c.create(request(volumes=[VolumeMount(name=name, mount_path="/data")])).id),
        "own": c.volumes.create(name).name,
    }
    c.volumes.delete(name)
    return out


SCENARIOS = {
    f.__name__: f
    for f in (
        lifecycle,
        commands,
        async_commands,
        processes,
        jobs,
        files,
        auth,
        network,
        images,
        built,
        hold,
        make,
        use,
        executions,
        checkpoints,
        checkpoint_other,
        volumes,
        volume_other,
    )
}


if __name__ == "__main__":
    name, arg = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
    print(json.dumps(SCENARIOS[name](arg), default=str))

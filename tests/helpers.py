"""Outside views of the host for tests: processes, cgroups, this process's memory, bounded polling of
real conditions, and archives too large to make with tarfile in a test's time."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gzip
import os
import re
import subprocess
import tarfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from sandboxes.backends.local import _cgroup_dirs

AGENT_NAME = "sandbox-agent"
# Built by deploy/docker/build_images.sh (the `images` fixture): Debian with python3 and a C
# toolchain, no agent inside.
BASE_IMAGE = "sandboxes-base:bookworm"


def become_subreaper() -> None:
    """Make this process the reaper of its orphaned descendants (`PR_SET_CHILD_SUBREAPER`): a
    process whose parent dies (a killed pool's agents) stays in this process's tree, so
    `agent_pids` still finds it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _descends_from_us(pid: int) -> bool:
    me = os.getpid()
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat[stat.rfind(")") + 2 :].split()[1])
        if pid == me:
            return True
    return False


def agent_pids() -> set[int]:
    """Pids of running agent processes of this test process's tree (`pgrep -f sandbox-agent`,
    minus unrelated command lines).

    Another test session's agents on the same machine are not this one's to count or kill (the
    session makes itself its tree's subreaper, `become_subreaper`, so orphans stay in its tree).
    Agents inside Docker containers are left out: they are accounted per container (by run dir,
    see `sandbox_containers`).
    """
    out = subprocess.run(["pgrep", "-f", AGENT_NAME], capture_output=True, text=True, check=False).stdout
    pids = set()
    for line in out.split():
        pid = int(line)
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            continue
        if (
            (comm == AGENT_NAME or exe.startswith(AGENT_NAME))
            and not _in_docker(pid)
            and _descends_from_us(pid)
        ):
            pids.add(pid)
    return pids


def _in_docker(pid: int) -> bool:
    """True for a process in a Docker container (when the tests themselves run outside one)."""
    try:
        if "docker" in Path("/proc/self/cgroup").read_text():
            return False
        return "docker" in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def sandbox_containers(run_root: Path) -> set[str]:
    """Ids of Docker containers of sandboxes whose run dir is under `run_root` (this test session's;
    other sessions on the machine have their own). Empty without a Docker CLI or engine."""
    try:
        out = subprocess.run(
            [
                "docker",
                "ps",
                "-a",
                "--no-trunc",
                "--filter",
                "label=sandboxes.pool",
                "--format",
                '{{.ID}} {{.Label "sandboxes.run_dir"}}',
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return set()
    prefix = str(run_root).rstrip("/") + "/"
    return {
        cid
        for cid, _, run_dir in (line.partition(" ") for line in out.splitlines())
        if run_dir.startswith(prefix)
    }


def pgrep(pattern: str) -> list[int]:
    """Pids whose command line contains `pattern` (host view: sees into sandboxes' pid namespaces)."""
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split() if int(p) != os.getpid()]


def pid_running(pid: int) -> bool:
    """True when `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def cgroup_exists(cgroup: str) -> bool:
    return any(d.is_dir() for d in _cgroup_dirs(cgroup))


async def wait_until(
    cond: Callable[[], bool | Awaitable[bool]],
    timeout: float = 30.0,
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    """Poll a real condition until it holds; fail after `timeout` seconds (a bound, not a wait)."""
    deadline = time.monotonic() + timeout
    while True:
        r = cond()
        if asyncio.iscoroutine(r) or isinstance(r, asyncio.Future):
            r = await r
        if r:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


async def warm_zygote(sb) -> None:
    """Runs Python in `sb` until the zygote serves it. The execution that starts the zygote (and any
    while it loads its modules) is spawned, with the same result; nobody waits for the zygote. A
    sandbox's first Python run made from a template ran in place of a zygote: one more makes it."""
    for _ in range(200):
        r = await sb.exec(["python3", "-c", "print(1)"])
        assert r.stdout == b"1\n", r
        if r.path == "zygote":
            r = await sb.exec(["python3", "-c", "print(1)"])
            assert (r.stdout, r.path) == (b"1\n", "zygote"), r
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the python zygote never became ready")


def kernel_has_landlock() -> bool:
    """Whether this kernel has Landlock (which confines judged cases' writes)."""
    return ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1) > 0


def tiny_wheel() -> tuple[str, bytes]:
    """A pure-Python wheel made here (nothing is fetched): `import tinypkg; tinypkg.VALUE == 42`."""
    import io
    import zipfile

    files = {
        "tinypkg/__init__.py": "VALUE = 42\n",
        "tinypkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files["tinypkg-1.0.dist-info/RECORD"] = "".join(
        f"{n},,\n" for n in [*files, "tinypkg-1.0.dist-info/RECORD"]
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return "tinypkg-1.0-py3-none-any.whl", buf.getvalue()


@contextlib.asynccontextmanager
async def http_answering(body: bytes, host: str = "127.0.0.2") -> AsyncIterator[tuple[int, list[bytes]]]:
    """A server on `host` (a loopback address) that answers every request with 200 and `body`:
    (its port, the heads of the requests it got)."""
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, host, 0)
    try:
        yield server.sockets[0].getsockname()[1], seen
    finally:
        server.close()
        await server.wait_closed()


async def start_server_inside(sb: Any, argv: str, port: int) -> None:
    """Starts `argv` in the background inside `sb` and waits until `port` answers there."""
    r = await sb.exec(["/bin/sh", "-c", f"({argv}) >/dev/null 2>&1 &"], keep_descendants=True)
    assert r.exit_code == 0, r
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1)"
    for _ in range(100):
        if (await sb.exec(["python3", "-c", probe])).exit_code == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"nothing listens on {port} inside the sandbox")


def million_entry_archive(path: Path, n: int, top: str) -> None:
    """A tar.gz of `n` empty files `top/f0000000`, ...: the headers written directly (tarfile's
    own writer takes most of a minute for a million), gzip at zlib's default level (a million:
    about 7 MB, in 3 s)."""
    proto = tarfile.TarInfo(f"{top}/f{0:07d}")
    proto.mode, proto.mtime = 0o644, 0
    header = bytearray(proto.tobuf(format=tarfile.USTAR_FORMAT))
    width = len(proto.name)
    # The checksum of every header but its name (its own field counted as spaces).
    rest = sum(header[:148]) + 8 * ord(" ") + sum(header[156:]) - sum(header[:width])
    with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as gz:
        out = bytearray()
        for i in range(n):
            name = f"{top}/f{i:07d}".encode()
            header[:width] = name
            header[148:155] = b"%06o\0" % (rest + sum(name))
            out += header
            if len(out) >= 1 << 20:
                gz.write(out)
                out.clear()
        gz.write(bytes(out) + bytes(1024))


def memory_kib(field: str) -> int:
    """This process's `VmRSS` or `VmHWM` (its peak since `/proc/self/clear_refs` was given "5"),
    in KiB; a test's server and pools run in this process."""
    found = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert found is not None
    return int(found.group(1))

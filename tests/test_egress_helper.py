"""The egress helper, attacked from inside a root sandbox and checked from the host: the one
process of a sandbox that keeps the host's network namespace never reads the sandbox's files nor
loads its libraries. A program that rewrites `/etc/hosts` does not choose what an allowed name
resolves to, one that plants `/etc/nsswitch.conf` and an NSS module in its `/usr` never has it
loaded in the helper, and the helper's root and mounts are the host's (`/proc/PID/root`,
`/proc/PID/mountinfo`), in every one of 50 fresh sandboxes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Self

import pytest
import pytest_asyncio
from helpers import agent_pids

from sandboxes import Template

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.timeout(900),
    pytest.mark.requires("root", reason="egress allow-lists need a manager that is root"),
]

SANDBOXES = 50
# The address a hostile /etc/hosts gives `localhost` (nothing listens there).
PLANTED = "127.0.0.213"
# Where the planted NSS module reports from, were it ever loaded in the host's network namespace.
CANARY_HOST = "127.0.0.2"

NSS_MODULE = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
__attribute__((constructor)) static void report(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PORT)};
    inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) write(s, "loaded\n", 7);
    close(s);
}
"""


class Listener:
    """A loopback TCP server of the test's that records what each connection sends."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.got: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Self:
        self.server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            writer.write(b"real server\n")
            await writer.drain()
            self.got.append(await asyncio.wait_for(reader.read(100), 5))
        writer.close()

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest_asyncio.fixture
async def canary() -> AsyncIterator[Listener]:
    async with Listener(CANARY_HOST) as c:
        yield c


def nss_module(tmp_path: Path, port: int) -> bytes:
    src = tmp_path / "nss.c"
    src.write_text(NSS_MODULE.replace("PORT", str(port)))
    out = tmp_path / "libnss_planted.so.2"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out.read_bytes()


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def helpers_of(agents: set[int]) -> set[int]:
    """The egress helpers among `agents`: agent processes forked by an agent, which drop to
    65534 (the agent itself stays root outside)."""
    found = set()
    for pid in agents:
        with contextlib.suppress(OSError):
            st = status_of(pid)
            if int(st["PPid"]) in agents and st["Uid"].split()[0] == "65534":
                found.add(pid)
    return found


def root_mount(mountinfo: str) -> tuple[str, str]:
    """The file system type and source of the mount at `/` of a mountinfo."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if fields[4] == "/":
            after = fields[fields.index("-") + 1 :]
            return after[0], after[1]
    raise AssertionError("no root mount")


PROBE = textwrap.dedent("""
    import socket, sys
    def ask(target):
        s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
        s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\nprobe\\n".encode())
        got = b""
        while chunk := s.recv(4096):
            got += chunk
        head, _, body = got.partition(b"\\r\\n\\r\\n")
        if b" 200 " in head.split(b"\\r\\n")[0]:
            return "connected: " + body.decode().strip()
        return body.decode(errors="replace").strip()
    print(ask(sys.argv[1]))
""")


async def test_no_sandbox_steers_the_helper_through_its_files(
    make_pool, canary: Listener, tmp_path: Path
) -> None:
    """50 fresh root sandboxes, each planting a hosts file that sends `localhost` elsewhere and
    an NSS module in its `/usr` named by its `nsswitch.conf`: every one reaches the host's real
    `localhost` server through the proxy, the module is never loaded (the canary on the host's
    loopback hears nothing), and each helper's root is the host's, not the sandbox's."""
    module = nss_module(tmp_path, canary.port)
    host_root = os.stat("/")
    host_mount = root_mount(Path("/proc/self/mountinfo").read_text())
    t = Template(name="planted", user="root", network=[])
    pool = await make_pool(warm=2, templates={"planted": t})
    async with Listener("127.0.0.1") as real:
        rules = [f"localhost:{real.port}", f"127.0.0.1:{real.port}"]
        answers = []
        for _ in range(SANDBOXES):
            async with pool.sandbox(template="planted") as sb:
                await sb.write_file("/usr/lib/x86_64-linux-gnu/libnss_planted.so.2", module)
                await sb.write_file("/etc/nsswitch.conf", b"hosts: planted files dns\n")
                await sb.write_file("/etc/hosts", f"{PLANTED} localhost\n".encode())
                # The policy changes after the files are planted: the helper hears of it, and
                # must resolve without them.
                await sb.set_network(allow=rules)
                r = await sb.exec(["python3", "-c", PROBE, f"localhost:{real.port}"])
                assert r.exit_code == 0, r
                answers.append(r.stdout.decode().strip())
                # Every helper of this test's agents (this sandbox's and the warm ones').
                helpers = helpers_of(agent_pids())
                assert helpers, "no egress helper found"
                for h in helpers:
                    st = os.stat(f"/proc/{h}/root")
                    assert (st.st_dev, st.st_ino) == (host_root.st_dev, host_root.st_ino), h
                    assert root_mount(Path(f"/proc/{h}/mountinfo").read_text()) == host_mount
                # A deny-list refuses the host's loopback: the refusal names the real address.
                await sb.set_network(deny=[])
                refused = (await sb.exec(["python3", "-c", PROBE, f"localhost:{real.port}"])).stdout.decode()
                assert PLANTED not in refused and "127.0.0.1" in refused, refused
    assert answers == ["connected: real server"] * SANDBOXES, answers
    assert canary.got == [], "a planted NSS module ran with the host's network"


async def test_a_port_allowed_after_a_lookup_is_forwarded(make_pool) -> None:
    """A program that looked an allowed name up keeps its address; a port the policy allows the
    name later answers there too (the agent listens on it once the policy holds), without a new
    lookup."""
    t = Template(name="later", user="root", network=[])
    pool = await make_pool(warm=0, templates={"later": t})
    async with Listener("127.0.0.1") as first, Listener("127.0.0.1") as second:
        rules = [f"localhost:{first.port}", f"127.0.0.1:{first.port}"]
        async with pool.sandbox(template="later") as sb:
            await sb.set_network(allow=rules)
            look = "import socket; print(socket.getaddrinfo('localhost.', 80, socket.AF_INET)[0][4][0])"
            r = await sb.exec(["python3", "-c", look])
            assert r.exit_code == 0, r
            address = r.stdout.decode().strip()
            assert address.startswith("127.77."), address
            connect = (
                "import socket, sys; s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20);"
                " print(s.recv(100).decode().strip())"
            )
            await sb.set_network(allow=[*rules, f"localhost:{second.port}", f"127.0.0.1:{second.port}"])
            r = await sb.exec(["python3", "-c", connect, address, str(second.port)])
            assert (r.exit_code, r.stdout.decode().strip()) == (0, "real server"), r

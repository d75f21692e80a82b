"""Egress by allow-list (`Template(network=[...])`) on the local and docker backends, through the
real agent: its proxy is the sandbox's only way out, and it opens what the list names, nothing
else. The test servers listen on this host's loopback at 127.0.0.2 (the only network these
tests use; a sandbox's own loopback is another one), so "allowed" and "refused" are both
observable without leaving the machine."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import json
import textwrap
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from helpers import tiny_wheel

import sandboxes
from sandboxes import Template

pytestmark = [
    pytest.mark.asyncio,
    pytest.mark.timeout(600),
    pytest.mark.requires("root", reason="egress allow-lists need a manager that is root"),
]

HOST = "127.0.0.2"


class Seen:
    """A loopback HTTP server of the test's: it answers its own name and records request lines."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: list[str] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            head = await reader.readuntil(b"\r\n\r\n")
            self.lines.append(head.split(b"\r\n")[0].decode())
            body = self.name.encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
        writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@pytest_asyncio.fixture
async def servers() -> AsyncIterator[tuple[Seen, Seen]]:
    allowed, other = Seen("allowed"), Seen("other")
    await allowed.start()
    await other.start()
    yield allowed, other
    await allowed.stop()
    await other.stop()


@pytest.fixture(params=["local", "docker"])
def backend(request) -> str:
    if request.param == "docker":
        request.getfixturevalue("images")
    return request.param


async def test_the_allow_list_reaches_what_it_names_and_nothing_else(backend, servers, make_pool) -> None:
    """As root inside: the allowed server answers through the proxy; the other server, a name
    that resolves to loopback, a name not listed and a direct connection do not; the sandbox's
    DNS answers no unlisted name; every decision is counted."""
    allowed, other = servers
    rules = (f"{HOST}:{allowed.port}", f"localhost:{other.port}")
    t = Template(name="egress", backend=backend, user="root", network=rules)
    pool = await make_pool(backend=backend, warm=0, templates={"egress": t})
    script = textwrap.dedent(f"""
        import json, os, socket, urllib.request, urllib.error
        out = {{}}
        def get(url):
            try:
                return urllib.request.urlopen(url, timeout=20).read().decode()
            except urllib.error.HTTPError as e:
                return e.code
            except Exception as e:
                return type(e).__name__
        out["allowed"] = get("http://{HOST}:{allowed.port}/some/path?q=1")
        out["other"] = get("http://{HOST}:{other.port}/")
        out["unlisted_name"] = get("http://unlisted.example/")
        def connect(target):
            s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
            s.sendall(("CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % (target, target)).encode())
            return s.recv(200).split(b"\\r\\n")[0].decode()
        out["connect_allowed"] = connect("{HOST}:{allowed.port}")
        out["connect_unlisted"] = connect("unlisted.example:443")
        out["to_loopback_by_name"] = connect("localhost:{other.port}")  # no_proxy skips it: ask directly
        try:
            socket.create_connection(("{HOST}", {allowed.port}), timeout=5)
            out["direct"] = "connected"
        except OSError as e:
            out["direct"] = type(e).__name__
        try:
            socket.getaddrinfo("unlisted.example", 80)
            out["dns"] = "answered"
        except OSError as e:
            out["dns"] = type(e).__name__
        out["interfaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
        out["proxy_env"] = os.environ.get("https_proxy")
        print(json.dumps(out))
    """)
    async with pool.sandbox(template="egress") as sb:
        r = await sb.exec(["python3", "-c", script], limits=sandboxes.Limits(wall_time_s=120))
        assert r.exit_code == 0, r
        out = json.loads(r.stdout)
        info = await sb.info()
    assert out["allowed"] == "allowed"
    assert allowed.lines[0] == "GET /some/path?q=1 HTTP/1.1"  # sent on in origin form
    assert out["other"] == 403 and out["unlisted_name"] == 403
    assert out["to_loopback_by_name"] == "HTTP/1.1 403 Forbidden"
    assert out["connect_allowed"] == "HTTP/1.1 200 Connection established"
    assert out["connect_unlisted"] == "HTTP/1.1 403 Forbidden"
    assert not other.lines  # never reached, neither by address nor by a name for it
    assert out["direct"] == "ConnectionRefusedError"  # the sandbox's own loopback, nothing there
    assert out["dns"] == "gaierror"
    assert out["interfaces"] == ["lo"]
    assert out["proxy_env"] == "http://127.0.0.1:3128"
    assert (info.egress_allowed, info.egress_refused) == (2, 4), info


async def test_allowed_names_are_reached_without_the_proxy(backend, make_pool) -> None:
    """A program that ignores the proxy variables (a raw socket) reaches an allowed name through
    the sandbox's DNS: the name resolves to an address of the sandbox's loopback, where the agent
    forwards to the real name (here `localhost`, which the helper resolves outside to this host's
    127.0.0.1, an address the list names). Unlisted names are NXDOMAIN, an allowed name has no
    IPv6 answer, and only the listed port of the name answers. `localhost.` (fully qualified)
    is asked of DNS: the sandbox's /etc/hosts answers plain `localhost` with its own loopback."""
    seen = Seen("by-name")
    seen.server = await asyncio.start_server(seen._serve, "127.0.0.1", 0)
    seen.port = seen.server.sockets[0].getsockname()[1]
    try:
        rules = (f"localhost:{seen.port}", f"127.0.0.1:{seen.port}", "*.wild.test:8443")
        t = Template(name="egress-dns", backend=backend, user="root", network=rules)
        pool = await make_pool(backend=backend, warm=0, templates={"egress-dns": t})
        script = textwrap.dedent(f"""
            import json, socket
            out = {{"resolv": open("/etc/resolv.conf").read()}}
            def lookup(name, family=socket.AF_INET):
                try:
                    return sorted({{a[4][0] for a in socket.getaddrinfo(name, 80, family, socket.SOCK_STREAM)}})
                except OSError as e:
                    return type(e).__name__
            out["name"] = lookup("localhost.")
            out["again"] = lookup("LOCALHOST.")
            out["wildcard"] = lookup("a.wild.test")
            out["wildcard_itself"] = lookup("wild.test")
            out["unlisted"] = lookup("unlisted.example")
            out["v6"] = lookup("localhost.", socket.AF_INET6)
            s = socket.create_connection(("localhost.", {seen.port}), timeout=20)
            s.sendall(b"GET /raw HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
            out["reply"] = s.makefile("rb").read().split(b"\\r\\n\\r\\n")[-1].decode()
            try:
                socket.create_connection((out["name"][0], 80), timeout=20)
                out["other_port"] = "connected"
            except OSError as e:
                out["other_port"] = type(e).__name__
            print(json.dumps(out))
        """)
        async with pool.sandbox(template="egress-dns") as sb:
            r = await sb.exec(["python3", "-c", script], limits=sandboxes.Limits(wall_time_s=120))
            assert r.exit_code == 0, r
            out = json.loads(r.stdout)
            info = await sb.info()
    finally:
        await seen.stop()
    assert out["resolv"] == "nameserver 127.0.0.53\n"
    assert out["name"] == ["127.77.0.1"] and out["again"] == ["127.77.0.1"]
    assert out["wildcard"] == ["127.77.0.2"] and out["wildcard_itself"] == "gaierror"
    assert out["unlisted"] == "gaierror" and out["v6"] == "gaierror"
    assert out["reply"] == "by-name" and seen.lines == ["GET /raw HTTP/1.1"]
    assert out["other_port"] == "ConnectionRefusedError"  # the rule names one port of the name
    assert (info.egress_allowed, info.egress_refused) == (1, 0), info


async def test_the_full_network_resolves_names_as_the_outside_does(backend, make_pool) -> None:
    """`network=True`: the sandbox's resolver is the outside's (the host's, or the one the engine
    gives a bridged container), as root and as the default uid; with no network there is none.
    (The file only: tests reach no network beyond loopback.)"""

    def nameservers(text: str) -> list[str]:
        return [line.split()[1] for line in text.splitlines() if line.startswith("nameserver ")]

    want = nameservers(Path("/etc/resolv.conf").read_text())
    templates = {
        "root": Template(name="root", backend=backend, user="root", network=True),
        "plain": Template(name="plain", backend=backend, network=True),
        "none": Template(name="none", backend=backend, user="root"),
    }
    pool = await make_pool(backend=backend, warm=0, templates=templates)
    for name in ("root", "plain"):
        async with pool.sandbox(name) as sb:
            r = await sb.exec(["cat", "/etc/resolv.conf"])
            got = nameservers(r.stdout.decode())
            assert got and (got == want or backend == "docker"), (name, r)
            if backend == "docker":  # the engine's copy of the host's (it drops loopback ones)
                assert got == [ns for ns in want if not ns.startswith("127.")] or got == [
                    "8.8.8.8",
                    "8.8.4.4",
                ], r
            r = await sb.exec(["grep", "^hosts:", "/etc/nsswitch.conf"])
            assert b"dns" in r.stdout or backend == "docker", r  # docker: the image's own file
    async with pool.sandbox("none") as sb:
        r = await sb.exec(["cat", "/etc/resolv.conf"])
        assert nameservers(r.stdout.decode()) == [], r


GET_SCRIPT = """
import sys, urllib.request, urllib.error
for url in sys.argv[1:]:
    try:
        print(urllib.request.urlopen(url, timeout=20).read().decode())
    except urllib.error.HTTPError as e:
        print(e.code)
    except Exception as e:
        print(type(e).__name__)
"""

# Opens a tunnel through the proxy, says so, waits for a line on stdin, then uses the tunnel.
TUNNEL_SCRIPT = """
import socket, sys
target = sys.argv[1]
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(("CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % (target, target)).encode())
print(s.recv(200).split(b"\\r\\n")[0].decode(), flush=True)
sys.stdin.readline()
s.sendall(b"GET /late HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
print(s.recv(200).split(b"\\r\\n\\r\\n")[-1].decode(), flush=True)
"""


async def test_the_policy_changes_while_the_sandbox_runs(backend, servers, make_pool) -> None:
    """A sandbox started with an empty allow-list reaches nothing; after `set_network` it
    reaches what the new allow-list names and nothing else; a narrower policy refuses new
    connections at once while a tunnel opened before it stays open; a deny-list opens the public
    internet but never the host's loopback. A bad policy is refused and changes nothing; a
    sandbox whose network is none cannot change it."""
    allowed, other = servers
    a_url, o_url = f"http://{HOST}:{allowed.port}/", f"http://{HOST}:{other.port}/"
    t = Template(name="changing", backend=backend, user="root", network=[])
    none = Template(name="none", backend=backend)
    pool = await make_pool(backend=backend, warm=0, templates={"changing": t, "none": none})

    async def get(sb: sandboxes.Sandbox, *urls: str) -> list[str]:
        r = await sb.exec(["python3", "-c", GET_SCRIPT, *urls], limits=sandboxes.Limits(wall_time_s=60))
        assert r.exit_code == 0, r
        return r.stdout.decode().split()

    async with pool.sandbox(template="changing") as sb:
        assert await get(sb, a_url, o_url) == ["403", "403"]
        policy = await sb.set_network(allow=[f"{HOST}:{allowed.port}"])
        assert policy == sandboxes.EgressPolicy((f"{HOST}:{allowed.port}",)) and sb.egress == policy
        assert await get(sb, a_url, o_url) == ["allowed", "403"]

        # Narrowed while a tunnel is open: the tunnel stays, a new connection is refused.
        async with sb.exec_stream(["python3", "-c", TUNNEL_SCRIPT, f"{HOST}:{allowed.port}"]) as stream:
            lines: list[str] = []
            async for ev in stream:
                if ev.kind != "stdout":
                    continue
                lines += ev.data.decode().split("\n")
                if lines[0] == "HTTP/1.1 200 Connection established" and len(lines) == 2:
                    await sb.set_network(allow=[])
                    assert await get(sb, a_url) == ["403"]
                    await stream.send_stdin(b"go\n")
        assert stream.result is not None and stream.result.exit_code == 0, stream.result
        assert "allowed" in lines, lines
        assert allowed.lines[-1] == "GET /late HTTP/1.1"

        # A deny-list reaches public destinations only: never the host's loopback.
        await sb.set_network(deny=[])
        assert await get(sb, a_url, o_url) == ["403", "403"]

        for bad in ({"allow": ["has space"]}, {"allow": ["x"], "deny": []}, {}, {"deny": "pypi.org"}):
            with pytest.raises(sandboxes.InvalidRequest):
                await sb.set_network(**bad)
        await sb.set_network(allow=[f"{HOST}:{other.port}"])
        assert await get(sb, a_url, o_url) == ["403", "other"]
        info = await sb.info()
        assert info.egress_allowed >= 3 and info.egress_refused >= 6, info

    async with pool.sandbox(template="none") as sb:
        with pytest.raises(sandboxes.InvalidRequest, match="without an egress policy"):
            await sb.set_network(allow=[f"{HOST}:{allowed.port}"])
        assert (await sb.exec("echo still")).stdout == b"still\n"


async def test_the_policy_changes_through_the_grpc_api(make_server, servers) -> None:
    """SetNetwork / GetNetwork through the remote client: the new policy is enforced when the
    call returns and read back; a bad rule is INVALID_ARGUMENT and changes nothing; a sandbox
    with no network cannot change it; another key's sandbox is missing."""
    from server_helpers import KEY_A, KEY_B

    allowed, _ = servers
    server = await make_server(
        warm=0,
        templates={
            "default": Template(name="default"),
            "changing": Template(name="changing", user="root", network=[]),
        },
    )
    async with (
        sandboxes.AsyncSandboxClient(server.address, KEY_A, timeout=60.0) as client,
        sandboxes.AsyncSandboxClient(server.address, KEY_B, timeout=60.0) as other,
    ):
        sb = await client.create(template="changing")
        try:
            assert await sb.network() == sandboxes.EgressPolicy(())
            url = f"http://{HOST}:{allowed.port}/"
            rule = f"{HOST}:{allowed.port}"
            assert await sb.set_network(allow=[rule]) == sandboxes.EgressPolicy((rule,))
            r = await sb.exec(["python3", "-c", GET_SCRIPT, url])
            assert r.stdout == b"allowed\n", r
            with pytest.raises(sandboxes.InvalidRequest):
                await sb.set_network(allow=["a:b:c:d/99"])
            with pytest.raises(sandboxes.InvalidRequest):
                await sb.set_network(allow=[rule], deny=[])
            assert await sb.network() == sandboxes.EgressPolicy((rule,))
            await sb.set_network(deny=["pypi.org"])
            assert await sb.network() == sandboxes.EgressPolicy(("pypi.org",), deny=True)
            assert (await sb.exec(["python3", "-c", GET_SCRIPT, url])).stdout == b"403\n"
            with pytest.raises(sandboxes.NotFound):
                await (await other.get(sb.id)).set_network(allow=[])
        finally:
            await sb.close()
        plain = await client.create()
        try:
            assert await plain.network() is False
            with pytest.raises(sandboxes.InvalidRequest, match="without an egress policy"):
                await plain.set_network(allow=[])
        finally:
            await plain.close()


async def test_bad_rules_and_conflicts_are_refused() -> None:
    with pytest.raises(sandboxes.InvalidRequest):
        Template(network=["has space"])
    with pytest.raises(sandboxes.InvalidRequest):
        Template(network="pypi.org")
    assert Template(network=["pypi.org", "*.pythonhosted.org:443"]).egress_allow == (
        "pypi.org",
        "*.pythonhosted.org:443",
    )
    assert Template(network=True).egress_allow == () and Template().egress_allow == ()


@contextlib.contextmanager
def package_index(root: Path) -> Iterator[int]:
    """A PEP 503 index of one wheel, served from `root` on HOST by the standard library's server."""
    name, wheel = tiny_wheel()
    (root / "simple" / "tinypkg").mkdir(parents=True)
    (root / "simple" / "tinypkg" / name).write_bytes(wheel)
    (root / "simple" / "tinypkg" / "index.html").write_text(f'<a href="{name}">{name}</a>\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer((HOST, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def test_pip_installs_from_an_index_the_allow_list_names(
    backend, dev_image, make_pool, tmp_path
) -> None:
    """A root sandbox of the dev image pip-installs from a package index it may reach, and only
    from it."""
    with package_index(tmp_path) as port:
        t = Template(
            name="dev",
            backend=backend,
            image=dev_image,
            user="root",
            agent_mount=backend == "docker",
            network=(f"{HOST}:{port}",),
        )
        pool = await make_pool(backend=backend, warm=0, templates={"dev": t})
        async with pool.sandbox(template="dev") as sb:
            install = (
                f"pip install -q --break-system-packages --index-url http://{HOST}:{port}/simple tinypkg "
                "&& python3 -c 'import tinypkg; print(tinypkg.VALUE)'"
            )
            r = await sb.exec(["sh", "-c", install], limits=sandboxes.Limits(wall_time_s=180))
            assert (r.exit_code, r.stdout) == (0, b"42\n"), r
            r = await sb.exec(
                [
                    "sh",
                    "-c",
                    f"pip download -q --no-deps -d /tmp/x --index-url http://{HOST}:{port + 1}/simple tinypkg",
                ],
                limits=sandboxes.Limits(wall_time_s=180),
            )
            assert r.exit_code != 0, r

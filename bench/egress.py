"""Egress of an allow-list sandbox (local backend, a manager that is root), against the same
connections made directly on the host in the same run: one TCP connection and one request /
response to a server on this host's loopback that the list names, made

- by name through the sandbox's DNS and the agent's forwarder (what a program that ignores the
  proxy variables does: a lookup of the name, a connection to the address it gets);
- through the agent's proxy (`CONNECT`), what pip, git and curl do;
- directly on the host, by the same interpreter (the baseline).

Each is timed inside the program that makes it (one program per way, `ROUNDS` connections,
alternated in blocks), so no exec or RPC is counted. The name's lookup alone is reported too.

A policy change (`Sandbox.set_network`, which returns once the agent and its helper enforce the
new policy) is timed from the manager against the cheapest call to the same agent (`info`),
alternated, `POLICY_ROUNDS` each."""

from __future__ import annotations

import asyncio
import json
import subprocess
import textwrap

from bench.common import Report, Stats

ROUNDS = 300
POLICY_ROUNDS = 200
BLOCKS = 3
HOST = "127.0.0.1"

PROGRAM = textwrap.dedent("""
    import json, socket, sys, time
    way, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = {"connect": [], "lookup": []}
    for _ in range(n):
        t = time.perf_counter()
        if way == "dns":
            addr = socket.getaddrinfo("localhost.", port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
            out["lookup"].append(time.perf_counter() - t)
            s = socket.create_connection(addr)
        elif way == "proxy":
            s = socket.create_connection(("127.0.0.1", 3128))
            s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\\r\\n\\r\\n" % port)
            head = b""
            while not head.endswith(b"\\r\\n\\r\\n"):
                head += s.recv(1)
        else:
            s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"ping")
        assert s.recv(4) == b"ping"
        s.close()
        out["connect"].append(time.perf_counter() - t)
    print(json.dumps(out))
""")


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        writer.write(await reader.readexactly(4))
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()


async def measure() -> dict[str, dict[str, list[float]]]:
    import time

    import sandboxes

    server = await asyncio.start_server(_echo, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    t = sandboxes.Template(name="egress", network=(f"localhost:{port}", f"{HOST}:{port}"))
    got: dict[str, dict[str, list[float]]] = {
        w: {"connect": [], "lookup": []} for w in ("dns", "proxy", "direct")
    }
    got["policy"] = {"set_network": [], "info": []}
    try:
        async with (
            sandboxes.Pool(warm=0, templates={"egress": t}) as pool,
            pool.sandbox(template="egress") as sb,
        ):
            for _ in range(BLOCKS):
                for way in ("dns", "proxy", "direct"):
                    argv = ["/usr/bin/python3", "-c", PROGRAM, way, str(port), str(ROUNDS)]
                    if way == "direct":
                        proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE)
                        stdout, _ = await proc.communicate()
                        assert proc.returncode == 0
                    else:
                        r = await sb.exec(argv, timeout=120)
                        assert r.exit_code == 0, r
                        stdout = r.stdout
                    for k, v in json.loads(stdout).items():
                        got[way][k] += v
            rules = [[f"localhost:{port}", f"{HOST}:{port}"], [f"{HOST}:{port}"]]
            for i in range(POLICY_ROUNDS):
                t0 = time.perf_counter()
                await sb.set_network(allow=rules[i % 2])
                t1 = time.perf_counter()
                await sb.info()
                got["policy"]["set_network"].append(t1 - t0)
                got["policy"]["info"].append(time.perf_counter() - t1)
    finally:
        server.close()
        await server.wait_closed()
    return got


def run() -> Report:
    rep = Report("egress")
    got = asyncio.run(measure())
    direct = rep.add(
        Stats.of("connect + request/response, directly on the host (baseline)", got["direct"]["connect"])
    )
    by_name = rep.add(Stats.of("connect + request/response by name: DNS + forwarder", got["dns"]["connect"]))
    proxy = rep.add(
        Stats.of("connect + request/response through the proxy (CONNECT)", got["proxy"]["connect"])
    )
    lookup = rep.add(Stats.of("lookup of the allowed name (the sandbox's DNS)", got["dns"]["lookup"]))
    rep.ratios["by name / direct (median)"] = by_name.median_ms / direct.median_ms
    rep.ratios["proxy / direct (median)"] = proxy.median_ms / direct.median_ms
    rep.headline(
        "allow-list sandbox: connection by name (DNS + forwarder)",
        by_name,
        direct,
        "by name / direct (median)",
    )
    rep.headline("allow-list sandbox: connection through the proxy", proxy, direct, "proxy / direct (median)")
    rep.extra["lookup median ms"] = round(lookup.median_ms, 3)
    call = rep.add(Stats.of("an agent call from the manager: info (baseline)", got["policy"]["info"]))
    change = rep.add(
        Stats.of("egress policy change, enforced when it returns: set_network", got["policy"]["set_network"])
    )
    rep.ratios["policy change / info (median)"] = change.median_ms / call.median_ms
    rep.headline(
        "egress policy change until applied (set_network)", change, call, "policy change / info (median)"
    )
    return rep

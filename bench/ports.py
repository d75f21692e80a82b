"""Ports reached from outside (`serve --ports-port`), against the same server program reached
directly on this host's loopback, in the same run:

- one request (a new connection, a GET of a small file, the answer read whole) to
  `python3 -m http.server` inside a sandbox, by the port's URL, against the same command run on
  the host and fetched directly; `ROUNDS` each, alternated in blocks;
- a download of `DOWNLOAD_MB` MB from each, its throughput;
- `CONCURRENT` connections at once spread over `SANDBOXES` sandboxes (an asyncio server of the
  standard library in each), each a request and its answer: how many fail.

The clients run in a process of their own (the standard library's `http.client`, and aiohttp for
the concurrent ones), as a user's would; the server is one embedded `Server` (local backend)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

from bench.common import Report, Stats

ROUNDS = 300
BLOCKS = 3
DOWNLOAD_MB = 100
SANDBOXES = 8
CONCURRENT = 1000
PORT = 38600

CLIENT = textwrap.dedent("""
    import http.client, json, sys, time, urllib.parse
    what, url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    u = urllib.parse.urlsplit(url)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        c.request("GET", u.path)
        r = c.getresponse()
        got = 0
        while chunk := r.read(1 << 16):
            got += len(chunk)
        assert r.status == 200, r.status
        c.close()
        out.append(time.perf_counter() - t)
    print(json.dumps(out))
""")

CONCURRENT_CLIENT = textwrap.dedent("""
    import asyncio, json, sys, aiohttp
    urls = sys.argv[1:]
    async def main():
        conn = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=120)) as s:
            async def one(u):
                try:
                    async with s.get(u) as r:
                        return r.status == 200 and await r.read() == b"ok"
                except Exception:
                    return False
            return await asyncio.gather(*(one(u) for u in urls))
    ok = asyncio.run(main())
    print(json.dumps({"ok": sum(ok), "failed": len(ok) - sum(ok)}))
""")

# One thread, asyncio: answers every request "ok" (many connections without a thread each).
ASYNC_SERVER = textwrap.dedent("""
    import asyncio, sys
    async def serve(r, w):
        try:
            await r.readuntil(b"\\r\\n\\r\\n")
            w.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\nok")
            await w.drain()
        except Exception:
            pass
        w.close()
    async def main():
        s = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]), backlog=2048)
        await s.serve_forever()
    asyncio.run(main())
""")


def _client(what: str, url: str, n: int) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, what, url, str(n)], capture_output=True, check=True, timeout=900
    )
    return list(json.loads(out.stdout))


async def _wait_port(sb, port: int) -> None:
    probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1)"
    for _ in range(200):
        if (await sb.exec(["python3", "-c", probe])).exit_code == 0:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


SMALL = b"x" * 1024
BIG_BYTES = DOWNLOAD_MB << 20


async def measure() -> dict:
    """Against `python3 -m http.server` on the host's PORT (started by `run`)."""
    import sandboxes
    from sandboxes.server.app import Server

    server = Server(insecure=True, port=0, warm=0, ports_port=0)
    await server.start()
    got: dict = {"ours": [], "direct": []}
    try:
        async with sandboxes.AsyncSandboxClient(server.address, "", timeout=120.0) as client:
            sb = await client.create()
            await sb.write_file("small.txt", SMALL)
            await sb.exec(["/bin/sh", "-c", f"head -c {BIG_BYTES} /dev/urandom > /work/big.bin"])
            await sb.exec(
                [
                    "/bin/sh",
                    "-c",
                    f"(cd /work && exec python3 -m http.server {PORT} --bind 127.0.0.1) >/dev/null 2>&1 &",
                ],
                keep_descendants=True,
            )
            await _wait_port(sb, PORT)
            url = await sb.port_url(PORT)
            direct = f"http://127.0.0.1:{PORT}/"
            for _ in range(BLOCKS):
                got["ours"] += await asyncio.to_thread(_client, "small", url + "small.txt", ROUNDS // BLOCKS)
                got["direct"] += await asyncio.to_thread(
                    _client, "small", direct + "small.txt", ROUNDS // BLOCKS
                )
            got["ours_big"] = (await asyncio.to_thread(_client, "big", url + "big.bin", 1))[0]
            got["direct_big"] = (await asyncio.to_thread(_client, "big", direct + "big.bin", 1))[0]
            await sb.close()

            boxes = [await client.create() for _ in range(SANDBOXES)]
            try:
                urls = []
                for b in boxes:
                    await b.write_file("srv.py", ASYNC_SERVER.encode())
                    await b.exec(
                        ["/bin/sh", "-c", f"(exec python3 /work/srv.py {PORT}) >/dev/null 2>&1 &"],
                        keep_descendants=True,
                    )
                    await _wait_port(b, PORT)
                    urls.append(await b.port_url(PORT))
                wanted = [urls[i % SANDBOXES] + "x" for i in range(CONCURRENT)]
                t = time.perf_counter()
                out = await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "-c", CONCURRENT_CLIENT, *wanted],
                    capture_output=True,
                    timeout=300,
                )
                got["concurrent_s"] = time.perf_counter() - t
                got["concurrent"] = json.loads(out.stdout)
            finally:
                for b in boxes:
                    await b.close()
    finally:
        await server.stop(grace=0)
    return got


def run() -> Report:
    rep = Report("ports")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "small.txt"), "wb") as f:
            f.write(SMALL)
        with open(os.path.join(d, "big.bin"), "wb") as f:
            f.write(os.urandom(BIG_BYTES))
        host_server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(PORT), "--bind", "127.0.0.1"],
            cwd=d,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            got = asyncio.run(measure())
        finally:
            host_server.terminate()
            host_server.wait()
    direct = rep.add(
        Stats.of("GET of 1 KiB from python3 -m http.server on the host, directly (baseline)", got["direct"])
    )
    ours = rep.add(
        Stats.of("GET of 1 KiB from python3 -m http.server inside a sandbox, by its port URL", got["ours"])
    )
    rep.ratios["port URL / direct (median)"] = ours.median_ms / direct.median_ms
    rep.extra["added at the median ms (goal <= 1)"] = round(ours.median_ms - direct.median_ms, 3)
    mb_s = DOWNLOAD_MB * (1 << 20) / 1e6
    ours_tp, direct_tp = mb_s / got["ours_big"], mb_s / got["direct_big"]
    rep.ratios[f"{DOWNLOAD_MB} MB download: port URL / direct throughput (goal >= 0.8)"] = ours_tp / direct_tp
    rep.extra[f"{DOWNLOAD_MB} MB download MB/s, port URL"] = round(ours_tp, 1)
    rep.extra[f"{DOWNLOAD_MB} MB download MB/s, direct"] = round(direct_tp, 1)
    rep.extra[f"{CONCURRENT} concurrent connections over {SANDBOXES} sandboxes"] = got["concurrent"]
    rep.extra[f"{CONCURRENT} concurrent connections, wall s"] = round(got["concurrent_s"], 2)
    rep.headline(
        "request through a sandbox's port URL (vs the same server on the host)",
        ours,
        direct,
        "port URL / direct (median)",
    )
    return rep

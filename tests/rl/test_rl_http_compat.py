"""The SandboxFusion-compatible HTTP endpoint, driven by the real `sandbox-fusion` PyPI client;
`sandboxes serve --http-port` starts it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import sandbox_fusion as sf
from server_helpers import KEY_A

import sandboxes
from sandboxes.client import AsyncSandboxClient


def url(server) -> str:
    return f"http://127.0.0.1:{server.http_port}"


async def run(server, **kw) -> object:
    """The client's async entry point (aiohttp), as users call it."""
    return await sf.run_code_async(sf.RunCodeRequest(**kw), endpoint=url(server), max_attempts=1)


# SandboxFusion's names for the judge's compiled and managed languages.
FUSION_NAMES = {
    "java": "java",
    "javascript": "nodejs",
    "typescript": "typescript",
    "go": "go",
    "rust": "rust",
}


@pytest.mark.parametrize("language", list(FUSION_NAMES))
async def test_every_language_through_the_real_client(make_server, language) -> None:
    """The reference program runs (compiled where the language compiles), a wrong one prints the
    wrong answer, a syntax error is `Failed` at its compile step (JavaScript: at its run)."""
    from language_programs import PROGRAMS

    p = PROGRAMS[language]
    server = await make_server(insecure=True, http_port=0, warm=1)
    name = FUSION_NAMES[language]
    r = await run(server, code=p.sum, language=name, stdin="2 3\n", compile_timeout=30, run_timeout=10)
    assert r.status == sf.RunStatus.Success and r.run_result.stdout == "5\n", r
    assert (r.compile_result is None) == (language == "javascript")
    r = await run(server, code=p.wrong, language=name, stdin="2 3\n", compile_timeout=30)
    assert r.run_result.stdout == "-1\n"
    r = await run(server, code=p.broken, language=name, compile_timeout=30)
    assert r.status == sf.RunStatus.Failed
    if language == "javascript":
        assert r.run_result.return_code != 0
    else:
        assert r.run_result is None and r.compile_result.return_code != 0


async def test_run_code_with_the_real_client(make_server) -> None:
    server = await make_server(insecure=True, http_port=0, warm=2)
    r = await run(server, code="print('hello')", language="python")
    assert r.status == sf.RunStatus.Success and r.run_result.stdout == "hello\n"
    assert r.run_result.return_code == 0 and r.compile_result is None and r.executor_pod_name
    assert sf.summary_run_code_result(r, sf.SummaryMapping()) == "Success"

    r = await run(
        server,
        code="import sys\nprint(sum(map(int, sys.stdin.read().split())))",
        language="python",
        stdin="1 2 3\n",
    )
    assert r.run_result.stdout == "6\n"

    r = await run(server, code="import sys; print('bad', file=sys.stderr); sys.exit(3)", language="python")
    assert (
        r.status == sf.RunStatus.Failed and r.run_result.return_code == 3 and r.run_result.stderr == "bad\n"
    )

    r = await run(server, code="while True: pass", language="python", run_timeout=1)
    assert r.status == sf.RunStatus.Failed
    assert r.run_result.status == sf.CommandRunStatus.TimeLimitExceeded
    assert sf.summary_run_code_result(r, sf.SummaryMapping(RunTimeout="timeout")) == "timeout"

    cpp = "#include <iostream>\nint main(){int a,b;std::cin>>a>>b;std::cout<<a*b<<std::endl;}\n"
    r = await run(server, code=cpp, language="cpp", stdin="6 7")
    assert (
        r.status == sf.RunStatus.Success
        and r.compile_result.return_code == 0
        and r.run_result.stdout == "42\n"
    )

    r = await run(server, code="int main( {", language="cpp")
    assert r.status == sf.RunStatus.Failed and r.run_result is None and r.compile_result.return_code != 0
    assert sf.summary_run_code_result(r, sf.SummaryMapping(CompileFailed="ce")) == "ce"

    r = await run(
        server,
        code="echo $((2+3)); cat data.txt > copy.txt",
        language="bash",
        files={"data.txt": base64.b64encode(b"payload").decode()},
        fetch_files=["copy.txt", "missing"],
    )
    assert r.run_result.stdout == "5\n" and base64.b64decode(r.files["copy.txt"]) == b"payload"
    assert "missing" not in r.files


# A GNU extension: accepted under the judge's -std=gnu++17 / gnu17, refused under strict c++17 / c11.
GNU_CPP = '#include <cstdio>\nint main(){int x = 41; typeof(x) y = x + 1; std::printf("%d\\n", y);}\n'
GNU_C = '#include <stdio.h>\nint main(void){int x = 41; typeof(x) y = x + 1; printf("%d\\n", y); return 0;}\n'


async def test_programs_compile_here_as_in_the_judge(make_server) -> None:
    """One language table: the endpoint compiles with the judge's commands, so a program the judge
    accepts compiles here too (the endpoint had stricter flags of its own)."""
    server = await make_server(insecure=True, http_port=0, warm=1)
    r = await run(server, code=GNU_CPP, language="cpp")  # the client knows no "c"
    assert r.status == sf.RunStatus.Success and r.run_result.stdout == "42\n", r
    async with AsyncSandboxClient(server.address, KEY_A) as client:
        sb = await client.create()
        try:
            for language, code in (("cpp", GNU_CPP), ("c", GNU_C)):
                report = await sb.run_tests(code, [sandboxes.TestCase("", "42\n")], language=language)
                assert report.cases[0].verdict == "accepted", (language, report)
        finally:
            await sb.close()


def test_sync_client_and_endpoint_config(make_server_sync) -> None:
    server = make_server_sync
    sf.set_endpoint(url(server))
    try:
        r = sf.run_code(sf.RunCodeRequest(code="print(2 ** 10)", language="python"), max_attempts=1)
    finally:
        sf.set_endpoint("http://localhost:8080")
    assert r.status == sf.RunStatus.Success and r.run_result.stdout == "1024\n"


@pytest.fixture
def make_server_sync(native):
    """A server on its own loop thread, for the client's synchronous (requests) entry point."""
    from sandboxes_rl.runtime import SandboxRuntime

    from sandboxes.server.app import Server

    rt = SandboxRuntime()
    server = rt.call(lambda: Server(insecure=True, port=0, http_port=0, warm=1).start())
    yield server
    rt.call(server.stop)
    rt.close()


async def test_batch_endpoint(make_server) -> None:
    server = await make_server(insecure=True, http_port=0, warm=2)
    reqs = [{"code": f"print({i} * {i})", "language": "python"} for i in range(6)]
    reqs.append({"code": "exit 1", "language": "bash"})
    async with aiohttp.ClientSession() as s:
        async with s.post(url(server) + "/run_code/batch", json={"requests": reqs}) as resp:
            assert resp.status == 200
            body = await resp.json()
        async with s.post(url(server) + "/run_code/batch", json=[{"code": "x", "language": "cobol"}]) as resp:
            assert resp.status == 422
        async with s.get(url(server) + "/v1/ping") as resp:
            assert await resp.text() == "pong"
    results = [sf.RunCodeResponse(**r) for r in body["results"]]
    assert [r.run_result.stdout for r in results[:6]] == [f"{i * i}\n" for i in range(6)]
    assert results[6].status == sf.RunStatus.Failed


async def test_invalid_requests_and_auth(make_server) -> None:
    server = await make_server(http_port=0)  # API keys on: the HTTP endpoint asks for them too
    async with aiohttp.ClientSession() as s:
        body = {"code": "print(1)", "language": "python"}
        async with s.post(url(server) + "/run_code", json=body) as resp:
            assert resp.status == 401
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with s.post(url(server) + "/run_code", json=body, headers=headers) as resp:
            assert resp.status == 200 and (await resp.json())["run_result"]["stdout"] == "1\n"
        for bad in (
            {"code": "x"},
            {"code": "x", "language": "cobol"},
            {"code": "x", "language": "python", "run_timeout": -1},
            {"code": "x", "language": "python", "files": {"a": "!!notb64"}},
        ):
            async with s.post(url(server) + "/run_code", json=bad, headers=headers) as resp:
                assert resp.status == 422, bad
        async with s.post(url(server) + "/run_code", data=b"{nope", headers=headers) as resp:
            assert resp.status == 422


async def test_infrastructure_failure_is_a_sandbox_error_not_a_wrong_answer(make_server) -> None:
    server = await make_server(
        insecure=True, http_port=0, warm=0, pool_kwargs={"max_size": 1, "claim_timeout": 60.0}
    )
    async with AsyncSandboxClient(server.address) as grpc_client:
        held = await grpc_client.create()  # the pool's only sandbox
        server.pool.claim_timeout = 0.05
        body_in = {"code": "print(1)", "language": "python"}
        async with aiohttp.ClientSession() as s, s.post(url(server) + "/run_code", json=body_in) as resp:
            body = await resp.json()
        assert resp.status == 200 and body["status"] == "SandboxError" and "pool_exhausted" in body["message"]
        with pytest.raises(Exception, match="Sandbox responded with error"):
            await run(server, code="print(1)", language="python")  # the client raises: never a "Failed"
        await held.close()


async def test_serve_cli_starts_the_http_endpoint(native) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = (
        str(Path(sandboxes.__file__).resolve().parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sandboxes",
        "serve",
        "--insecure",
        "--port",
        "0",
        "--http-port",
        "0",
        "--warm",
        "1",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        started = None
        async with asyncio.timeout(120):  # a bound: the log line arrives as soon as the server is up
            while started is None:
                line = await proc.stderr.readline()
                assert line, "server exited before it started"
                if line.startswith(b"{"):
                    entry = json.loads(line)
                    if entry.get("msg") == "server started":
                        started = entry
        assert started["http_port"]
        r = await sf.run_code_async(
            sf.RunCodeRequest(code="print('from cli')", language="python"),
            endpoint=f"http://127.0.0.1:{started['http_port']}",
            max_attempts=1,
        )
        assert r.run_result.stdout == "from cli\n"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 120) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

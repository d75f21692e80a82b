"""The Piston API (v2) and open-r1's batch router shape on `sandboxes serve --http-port`, sent
as those clients send them (aiohttp, JSON bodies, no auth: the server runs `--http-insecure` as
a Piston deployment would) and through the real agent. HumanEval's canonical solutions pass
and its broken ones fail through both shapes."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import aiohttp
import pytest
from server_helpers import bearer

from sandboxes.datasets.humaneval import load_humaneval

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(600)]


async def piston_server(make_server: Any, **kw: Any) -> Any:
    kw.setdefault("http_insecure", True)
    kw.setdefault("warm", 2)
    return await make_server(http_port=0, **kw)


def url(server: Any, path: str) -> str:
    return f"http://127.0.0.1:{server.http_port}{path}"


async def post(server: Any, path: str, body: Any, **kw: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(url(server, path), json=body, **kw) as r:
        return r.status, await r.json(content_type=None)


def platform_python() -> str:
    """The version of the host's /usr/bin/python3 (what a local sandbox runs)."""
    out = subprocess.run(["/usr/bin/python3", "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]


def program(problem: Any, source: str) -> str:
    return f"{source}\n{problem.tests[0].check}\ncheck({problem.entry_point})\n"


async def test_runtimes_are_the_judges_languages_with_their_tools_versions(make_server) -> None:
    server = await piston_server(make_server)
    async with aiohttp.ClientSession() as s, s.get(url(server, "/api/v2/runtimes")) as r:
        assert r.status == 200
        runtimes = await r.json()
    by_name = {rt["language"]: rt for rt in runtimes}
    assert {"python", "c", "cpp", "bash"} <= set(by_name), runtimes
    host_python = platform_python()
    assert by_name["python"]["version"] == host_python  # the local backend runs the host's /usr
    assert "py" in by_name["python"]["aliases"] or "python3" in by_name["python"]["aliases"]


async def test_execute_runs_compiles_and_reports_as_piston(make_server) -> None:
    server = await piston_server(make_server)
    status, out = await post(
        server,
        "/api/v2/execute",
        {
            "language": "python",
            "version": "3.x",
            "files": [{"name": "main.py", "content": "import sys, helper\nprint(sys.argv[1:], input(), helper.X)"},
                      {"name": "helper.py", "content": "X = 42"}],
            "stdin": "from stdin\n",
            "args": ["a", "b"],
        },
    )  # fmt: skip
    assert status == 200, out
    assert out["language"] == "python" and re.fullmatch(r"3\.\d+\.\d+", out["version"])
    assert out["run"]["stdout"] == "['a', 'b'] from stdin 42\n" and out["run"]["code"] == 0
    assert out["run"]["signal"] is None and out["run"]["status"] is None and "compile" not in out

    c = '#include <stdio.h>\nint main(){int x; scanf("%d", &x); printf("%d\\n", x * 2); return 3;}'
    status, out = await post(
        server, "/api/v2/execute", {"language": "c", "version": "*", "files": [{"content": c}], "stdin": "21"}
    )
    assert status == 200 and out["compile"]["code"] == 0, out
    assert (out["run"]["stdout"], out["run"]["code"], out["run"]["status"]) == ("42\n", 3, "RE")

    status, out = await post(
        server, "/api/v2/execute", {"language": "cpp", "version": "*", "files": [{"content": "int main( {"}]}
    )
    assert status == 200 and out["compile"]["code"] != 0 and out["run"] == out["compile"], out
    assert "error" in out["compile"]["stderr"]

    status, out = await post(
        server,
        "/api/v2/execute",
        {"language": "bash", "version": "*", "files": [{"content": "sleep 30"}], "run_timeout": 300},
    )
    assert status == 200 and out["run"]["status"] == "TO" and out["run"]["signal"] == "SIGKILL", out
    assert out["run"]["code"] is None

    hog = "x = bytearray(200 << 20); print('allocated')"
    status, out = await post(
        server,
        "/api/v2/execute",
        {"language": "python", "version": "*", "files": [{"content": hog}], "run_memory_limit": 64 << 20},
    )
    assert status == 200 and out["run"]["stdout"] == "" and out["run"]["signal"] == "SIGKILL", out


async def test_bad_jobs_get_pistons_errors(make_server) -> None:
    server = await piston_server(make_server)
    cases = [
        ({"version": "*", "files": []}, "language is required as a string"),
        ({"language": "python", "files": []}, "version is required as a string"),
        ({"language": "python", "version": "*"}, "files is required as an array"),
        (
            {"language": "python", "version": "*", "files": [{"name": "a.py"}]},
            "files[0].content is required as a string",
        ),
        (
            {"language": "python", "version": "2.7", "files": [{"content": "1"}]},
            "python-2.7 runtime is unknown",
        ),
        ({"language": "cobol", "version": "*", "files": [{"content": "1"}]}, "cobol-* runtime is unknown"),
        (
            {"language": "python", "version": "*", "files": [{"content": "1"}], "run_timeout": "9"},
            "run_timeout must be a number",
        ),
    ]
    for body, message in cases:
        status, out = await post(server, "/api/v2/execute", body)
        assert status == 400 and message in out["message"], (body, status, out)
    async with aiohttp.ClientSession() as s, s.post(url(server, "/api/v2/execute"), data="x") as r:
        assert r.status == 415 and (await r.json())["message"] == "requests must be of type application/json"
    # The server serves on.
    status, out = await post(
        server, "/api/v2/execute", {"language": "py", "version": "*", "files": [{"content": "print(1)"}]}
    )
    assert status == 200 and out["run"]["stdout"] == "1\n"


async def test_humaneval_passes_and_fails_through_both_shapes(make_server) -> None:
    server = await piston_server(make_server, warm=4)
    problems = load_humaneval()[:8]
    for p in problems:
        for source, passing in ((p.reference(), True), (p.broken(), False)):
            status, out = await post(
                server,
                "/api/v2/execute",
                {"language": "python", "version": "*", "files": [{"content": program(p, source)}]},
            )
            assert status == 200 and (out["run"]["code"] == 0) is passing, (p.problem_id, passing, out["run"])

    # open-r1's routed code reward: each script's last expression is its score.
    def scored(source: str, p: Any) -> str:
        return (
            "def _score():\n"
            "    try:\n"
            f"        exec({program(p, source)!r}, {{}})\n"
            "        return 1.0\n"
            "    except BaseException:\n"
            "        return 0.0\n"
            "_score()\n"
        )

    scripts = [scored(p.reference(), p) for p in problems] + [scored(p.broken(), p) for p in problems]
    status, results = await post(
        server, "/execute_batch", {"scripts": scripts, "language": "python", "timeout": 60}
    )
    assert status == 200 and len(results) == len(scripts), results
    texts = [r["execution"]["results"][0]["text"] for r in results]
    assert texts == ["1.0"] * len(problems) + ["0.0"] * len(problems)
    assert all(r["execution"]["results"][0]["is_main_result"] and r["exception_str"] is None for r in results)


async def test_batch_cells_keep_output_errors_and_timeouts_apart(make_server) -> None:
    server = await piston_server(make_server)
    scripts = [
        "print('out'); import sys; print('err', file=sys.stderr); 6 * 7",
        "x = 1\nraise ValueError('bad value')",
        "import time\ntime.sleep(30)",
        "echo from bash; exit 4",
    ]
    status, results = await post(
        server,
        "/execute_batch",
        {"scripts": scripts, "languages": ["python", "python", "python", "bash"], "timeout": 2},
    )
    assert status == 200, results
    ok, raised, slow, shell = (r["execution"] for r in results)
    assert ok["results"] == [{"text": "42", "is_main_result": True}] and ok["error"] is None
    assert ok["logs"] == {"stdout": ["out\n"], "stderr": ["err\n"]} and ok["execution_count"] == 1
    assert raised["error"]["name"] == "ValueError" and raised["error"]["value"] == "bad value"
    assert "Traceback" in raised["error"]["traceback"] and raised["results"] == []
    assert slow["error"]["name"] == "TimeoutError"
    assert shell["logs"]["stdout"] == ["from bash\n"] and shell["error"]["name"] == "Error"
    status, out = await post(server, "/execute_batch", {"scripts": "print(1)"})
    assert status == 400 and "scripts" in out["message"]


async def test_batch_cells_indented_as_a_whole_run_as_ipython_runs_them(make_server) -> None:
    """open-r1 writes its reward script inside an indented string: IPython takes the first line's
    indent off the cell, and so does the batch."""
    server = await piston_server(make_server)
    script = "\n    def score():\n        return 0.5\n\n    score()\n"
    status, results = await post(server, "/execute_batch", {"scripts": [script], "language": "python"})
    assert status == 200, results
    assert results[0]["execution"]["results"] == [{"text": "0.5", "is_main_result": True}]


async def test_keys_guard_the_surface_unless_it_is_open(make_server) -> None:
    server = await make_server(http_port=0, warm=1)
    body = {"language": "python", "version": "*", "files": [{"content": "print(1)"}]}
    status, out = await post(server, "/api/v2/execute", body)
    assert status == 401, out
    status, out = await post(server, "/api/v2/execute", body, headers=dict(bearer()))
    assert status == 200 and out["run"]["stdout"] == "1\n", out


async def test_an_open_run_surface_leaves_the_stateful_apis_keyed(make_server) -> None:
    """`--http-insecure` serves the one-shot run endpoints to callers that send no key (veRL,
    tinker and open-r1's router send none) as one owner of its own; the APIs that keep
    sandboxes still refuse a call without a key."""
    server = await make_server(http_port=0, warm=1, http_insecure=True)
    status, out = await post(server, "/execute_batch", {"scripts": ["1 + 1"], "language": "python"})
    assert status == 200 and out[0]["execution"]["results"][0]["text"] == "2", out
    status, out = await post(server, "/run_code", {"code": "print(3)", "language": "python"})
    assert status == 200 and out["run_result"]["stdout"] == "3\n", out
    for path in ("/v2/sandboxes", "/daytona/sandbox"):
        status, out = await post(server, path, {"templateID": "base"})
        assert status == 401, (path, out)
    assert len(server.service.registry) == 0


# Piston's names for the judge's compiled and managed languages.
PISTON_NAMES = {
    "java": "java",
    "javascript": "javascript",
    "typescript": "typescript",
    "go": "go",
    "rust": "rust",
}


@pytest.mark.parametrize("language", list(PISTON_NAMES))
async def test_every_language_as_piston_runs_it(make_server, language) -> None:
    """The runtime is listed with its tool's version; the reference program runs (compiled once
    where the language compiles), a wrong one prints the wrong answer, a syntax error fails its
    compile stage (JavaScript: its run)."""
    from language_programs import PROGRAMS

    server = await piston_server(make_server, warm=1)
    async with aiohttp.ClientSession() as s, s.get(url(server, "/api/v2/runtimes")) as r:
        runtimes = {rt["language"]: rt for rt in await r.json()}
    assert re.fullmatch(r"\d+(\.\d+){1,2}", runtimes[language]["version"]), runtimes[language]
    p = PROGRAMS[language]

    async def execute(source: str) -> dict[str, Any]:
        job = {
            "language": PISTON_NAMES[language],
            "version": "*",
            "files": [{"content": source}],
            "stdin": "2 3\n",
            "compile_timeout": 30000,
            "run_timeout": 10000,
        }
        status, out = await post(server, "/api/v2/execute", job)
        assert status == 200, out
        return out

    ok = await execute(p.sum)
    assert ok["run"]["stdout"] == "5\n" and ok["run"]["code"] == 0, ok
    assert ("compile" in ok) == (language != "javascript")
    assert (await execute(p.wrong))["run"]["stdout"] == "-1\n"
    broken = await execute(p.broken)
    stage = broken["run"] if language == "javascript" else broken["compile"]
    assert stage["code"] != 0 and stage["stderr"], broken

"""Programs written as SandboxFusion's own tests write them, run through `/run_code` with the real
`sandbox-fusion` client: what they import, assert and write must behave as it does there."""

from __future__ import annotations

import base64

import sandbox_fusion as sf


async def run(server, **kw) -> object:
    endpoint = f"http://127.0.0.1:{server.http_port}"
    return await sf.run_code_async(sf.RunCodeRequest(**kw), endpoint=endpoint, max_attempts=1)


async def test_typescript_default_imports_of_node_modules(make_server) -> None:
    """`import x from "assert"` of a CommonJS module is the module (esModuleInterop), so a failed
    assertion is an AssertionError, and `util`'s helpers are there."""
    server = await make_server(insecure=True, http_port=0, warm=1)
    code = 'import assert from "assert";\nassert.strictEqual(1, 2);\n'
    r = await run(server, code=code, language="typescript", compile_timeout=30)
    assert r.status == sf.RunStatus.Failed and r.run_result.status == sf.CommandRunStatus.Finished, r
    assert "AssertionError" in r.run_result.stderr and "TypeError" not in r.run_result.stderr, r

    code = "import util from 'util';\nconsole.log(util.format('%d + %s', 2, 'x'));\n"
    r = await run(server, code=code, language="typescript", compile_timeout=30)
    assert r.status == sf.RunStatus.Success and r.run_result.stdout == "2 + x\n", r

    # Awaiting a long sleep under a short limit is a time limit (not a TypeError at once).
    code = (
        "import util from 'util';\n"
        "const sleep = util.promisify(setTimeout);\n"
        "(async () => { await sleep(60_000); console.log('woke'); })();\n"
    )
    r = await run(server, code=code, language="typescript", compile_timeout=30, run_timeout=1)
    assert r.run_result.status == sf.CommandRunStatus.TimeLimitExceeded, r


async def test_java_assertions_are_enabled(make_server) -> None:
    server = await make_server(insecure=True, http_port=0, warm=1)
    code = "public class Main {\n  public static void main(String[] args) {\n    assert 1 == 2;\n  }\n}\n"
    r = await run(server, code=code, language="java", compile_timeout=60)
    assert r.status == sf.RunStatus.Failed and r.run_result.status == sf.CommandRunStatus.Finished, r
    assert r.run_result.return_code != 0 and "java.lang.AssertionError" in r.run_result.stderr, r

    code = code.replace("1 == 2", "1 == 1")
    r = await run(server, code=code, language="java", compile_timeout=60)
    assert r.status == sf.RunStatus.Success, r


async def test_files_written_under_mnt_are_fetched(make_server) -> None:
    """SandboxFusion's programs write under /mnt: it is writable, and fetch_files reads it back
    by its absolute path (as it does the work dir's and /tmp's files)."""
    server = await make_server(insecure=True, http_port=0, warm=1)
    code = (
        "import os\n"
        'open("/mnt/b", "w").write("sauce")\n'
        'os.makedirs("/mnt/d/e")\n'
        'open("/mnt/d/e/f", "w").write("deep")\n'
        'open("/tmp/t", "w").write("tmp")\n'
    )
    r = await run(
        server,
        code=code,
        language="python",
        run_timeout=5,
        fetch_files=["/mnt/b", "/mnt/d/e/f", "/tmp/t", "/mnt/missing"],
    )
    assert r.status == sf.RunStatus.Success, r
    got = {path: base64.b64decode(data) for path, data in r.files.items()}
    assert got == {"/mnt/b": b"sauce", "/mnt/d/e/f": b"deep", "/tmp/t": b"tmp"}, r

"""README.md's examples print what README.md says they print (run as a user would, in a fresh
interpreter)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def example(section: str) -> tuple[str, str]:
    """The first python block of `section` and the text block after it."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end > 0 else None]
    m = re.search(r"```python\n(.*?)```\s*```text\n(.*?)```", body, re.DOTALL)
    assert m, f"no python + text blocks in README section {section!r}"
    return m.group(1), m.group(2)


def run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_quick_start_prints_what_readme_shows(native) -> None:
    code, shown = example("Quick start")
    assert run(code) == shown


def test_the_batch_example_prints_what_readme_shows(native) -> None:
    code, shown = example("Grading batches")
    assert run(code) == shown


@pytest.mark.timeout(900)
def test_the_coding_agent_example_prints_what_readme_shows(dev_image: str) -> None:
    code, shown = example("Sandboxes for coding agents")
    assert dev_image in code
    assert run(code) == shown


async def test_the_prime_example_prints_what_readme_shows(make_server, tmp_path) -> None:
    """The Prime Sandboxes example, run by the real SDK (its client virtualenv) with the two
    environment variables the README sets, against a real server."""
    from server_helpers import KEY_A, run_client
    from test_prime_api import CURRENT

    code, shown = example("Run Prime Sandboxes / verifiers environments on your own machines")
    server = await make_server(http_port=0, warm=1)
    home = tmp_path / "prime-home"
    home.mkdir()
    env = {
        "HOME": str(home),
        "PRIME_API_BASE_URL": f"http://127.0.0.1:{server.http_port}",
        "PRIME_API_KEY": KEY_A,
    }
    assert await run_client(CURRENT, ["-c", code], env, timeout=300) == shown


async def test_the_e2b_example_prints_what_readme_shows(make_server) -> None:
    """The E2B example, run by the real SDKs (their client virtualenv) with the three environment
    variables the README sets, against a real server."""
    from server_helpers import KEY_A, run_client

    code, shown = example("Run E2B clients on your own machines")
    server = await make_server(http_port=0, warm=1)
    base = f"http://127.0.0.1:{server.http_port}"
    env = {"E2B_API_URL": base, "E2B_SANDBOX_URL": base, "E2B_API_KEY": KEY_A}
    assert await run_client("e2b", ["-c", code], env, timeout=300) == shown

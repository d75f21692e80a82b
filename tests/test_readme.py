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
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_quick_start_prints_what_readme_shows(native) -> None:
    code, shown = example("Quick start")
    assert run(code) == shown


@pytest.mark.timeout(900)
def test_the_coding_agent_example_prints_what_readme_shows(dev_image: str) -> None:
    code, shown = example("Sandboxes for coding agents")
    assert dev_image in code
    assert run(code) == shown

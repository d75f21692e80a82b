"""The probe behind the refusal of memory snapshots: it names what this host lacks, from `criu`
on the PATH and its own `criu check` (here, scripts standing in for CRIU's answers)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from sandboxes.server.criu import memory_snapshots_missing


@pytest.fixture(autouse=True)
def fresh_probe():
    memory_snapshots_missing.cache_clear()
    yield
    memory_snapshots_missing.cache_clear()


def fake_criu(tmp_path: Path, script: str) -> str:
    path = tmp_path / "criu"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(tmp_path)


def test_no_criu(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "not installed" in memory_snapshots_missing()


def test_a_failing_check_is_named(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(
        "PATH",
        fake_criu(
            tmp_path, 'echo "Error (criu/vdso.c:627): vdso: Unexpected rt vDSO area bounds" >&2; exit 1'
        ),
    )
    assert memory_snapshots_missing() == (
        "CRIU fails its own check on this host (Error (criu/vdso.c:627): vdso: Unexpected rt vDSO area bounds)"
    )


def test_a_passing_check_still_says_files_only(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", fake_criu(tmp_path, 'echo "Looks good."'))
    assert "files, not its processes" in memory_snapshots_missing()

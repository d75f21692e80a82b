"""The probe of the host's CRIU: its version and check, read from `criu` on the PATH (here, scripts
standing in for CRIU's answers), and the reason it names when memory snapshots cannot be served."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from sandboxes.backends.memory import MNTNS_PRELOAD
from sandboxes.server import criu
from sandboxes.server.criu import Criu, check, parse_version


def fake_criu(tmp_path: Path, version: str, check_script: str, preload: bool = True) -> str:
    """A `criu` answering `--version` with `version` and `check` with `check_script`, in `sbin/`
    (the PATH returned), with (`preload`) the preload where deploy/criu.sh puts it beside it."""
    path = tmp_path / "sbin" / "criu"
    path.parent.mkdir()
    path.write_text(f'#!/bin/sh\ncase "$1" in\n--version) {version} ;;\ncheck) {check_script} ;;\nesac\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    if preload:
        (tmp_path / MNTNS_PRELOAD).parent.mkdir(parents=True)
        (tmp_path / MNTNS_PRELOAD).write_bytes(b"")
    return str(path.parent)


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("Version: 4.1.1\n", (4, 1, 1)),
        ("Version: 3.17.1\nGitID: v3.17.1\n", (3, 17, 1)),
        ("Version: 4.1\nGitID: v4.1-12-gdeadbee\n", (4, 1)),
        ("criu 4.1\n", None),
        ("", None),
    ],
)
def test_parse_version(text: str, release: tuple[int, ...] | None) -> None:
    assert parse_version(text) == release


def test_no_criu(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    host = check()
    assert (host.found, host.ok) == (False, False)
    assert "not installed" in host.reason and host.missing == host.reason


def test_an_old_release_is_named(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", fake_criu(tmp_path, 'echo "Version: 3.17.1"', "exit 0"))
    assert check() == Criu(
        True, "3.17.1", False, "CRIU 3.17.1 is older than 4.1, which memory snapshots need"
    )


def test_a_failing_check_is_named(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv(
        "PATH",
        fake_criu(
            tmp_path,
            'echo "Version: 4.1.1"',
            'echo "Error (criu/vdso.c:627): vdso: Unexpected rt vDSO area bounds" >&2; exit 1',
        ),
    )
    assert check() == Criu(
        True,
        "4.1.1",
        False,
        "CRIU fails its own check on this host (Error (criu/vdso.c:627): vdso: Unexpected rt vDSO area bounds)",
    )


def test_an_unsaid_version_is_named(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", fake_criu(tmp_path, "echo 'no such option' >&2; exit 1", "exit 0"))
    host = check()
    assert (host.found, host.version, host.ok) == (True, "", False)
    assert host.reason.endswith("does not say its version (no such option)")


def test_a_passing_check_is_ok_and_misses_nothing(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", fake_criu(tmp_path, 'echo "Version: 4.1.1"', 'echo "Looks good."'))
    host = check()
    assert host == Criu(True, "4.1.1", True, "")
    assert host.missing == ""


def test_a_missing_preload_is_named(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", fake_criu(tmp_path, 'echo "Version: 4.1.1"', "exit 0", preload=False))
    host = check()
    assert not host.ok and host.missing == (
        f"{tmp_path / MNTNS_PRELOAD}, which enters CRIU into a sandbox, is missing (deploy/criu.sh)"
    )


def test_probed_once_by_threads_that_ask_at_once(monkeypatch) -> None:
    monkeypatch.setattr(criu, "_answer", None)
    calls: list[int] = []
    release = threading.Event()

    def slow_check() -> Criu:
        calls.append(1)
        release.wait(timeout=10)
        return Criu(False, "", False, "none here")

    monkeypatch.setattr(criu, "check", slow_check)
    assert criu.probed() is None
    answers: list[Criu] = []
    threads = [threading.Thread(target=lambda: answers.append(criu.probe())) for _ in range(4)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(timeout=10)
    assert len(calls) == 1 and len(answers) == 4 and len(set(answers)) == 1
    assert criu.probed() == answers[0]

"""What the service ships: the `sandboxes` wheel (`make install` builds it with maturin) carries
the package and never the test helpers (the kube emulator is the `sandboxes-testing`
distribution, `testing/`), and importing the service loads none of them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TEST_HELPERS = ("kube_emulator", "userns_pod", "sandboxes_testing", "kmock")


def test_importing_the_service_loads_no_test_helper() -> None:
    # Modules by name (an editable install's finder, loaded at start-up, is not the package).
    code = (
        "import sys, sandboxes, sandboxes.server.app, sandboxes.backends.local, "
        "sandboxes.backends.docker, sandboxes.backends.kubernetes, sandboxes.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith('sandboxes.testing') or "
        f"any(h in m.split('.') for h in {TEST_HELPERS!r})))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (r.returncode, r.stdout) == (0, "[]\n"), r.stderr


@pytest.mark.timeout(1200)
def test_the_wheel_carries_the_package_and_no_test_helper(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "maturin", "build", "--release", "-q", "-o", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("sandboxes-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sandboxes/backends/kubernetes/backend.py" in names and "sandboxes/_bin/sandbox-agent" in names
    assert [n for n in names if any(h in n for h in TEST_HELPERS) or n.startswith("sandboxes/testing/")] == []

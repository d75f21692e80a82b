"""Where a host's run state lives: in memory where the host has a tmpfs for it, and in a
directory only this process's user can enter, whoever made it first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandboxes.backends import ids, rundirs
from sandboxes.errors import LaunchError


def test_run_roots_and_id_ranges_live_on_a_tmpfs_where_the_host_has_one() -> None:
    tmpfs = [d for d in ("/run", "/dev/shm") if rundirs._filesystem(d) == "tmpfs"]
    if not tmpfs:
        pytest.skip("neither /run nor /dev/shm is a tmpfs here")
    assert str(rundirs.volatile_dir("/run")) == tmpfs[0]
    if os.environ.get(rundirs.RUN_DIR_ENV) is None and os.geteuid() == 0:
        assert rundirs.default_run_root().parent == Path(tmpfs[0])
        assert ids.id_dir().parent == Path(tmpfs[0])
        assert rundirs._filesystem(str(ids.id_dir())) == "tmpfs"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_run_dir_someone_else_made_or_linked_is_refused_and_ours_is_made_private(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(LaunchError, match="owned by uid 65534"):
        rundirs.make_private_dir(theirs)
    target = tmp_path / "ours-elsewhere"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(LaunchError, match="not a directory"):
        rundirs.make_private_dir(link)
    with pytest.raises(LaunchError, match="not a directory"):
        ids.claim("sb-x", link)
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o755)
    rundirs.make_private_dir(ours)
    assert oct(ours.stat().st_mode & 0o777) == "0o700"
    rundirs.make_private_dir(tmp_path / "new" / "deeper")
    assert oct((tmp_path / "new" / "deeper").stat().st_mode & 0o777) == "0o700"

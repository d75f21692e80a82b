"""JSON records in a directory, each written whole: to a temporary file beside it, renamed over
the record, so that a reader (another process sharing the directory too) never sees half of one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["write_record"]


def write_record(directory: Path, name: str, data: Any) -> None:
    """`directory`/`name`.json holds `data` (JSON) from now on."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, Path(directory) / f"{name}.json")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

"""JSON records in a directory, each written whole: to a temporary file beside it, renamed over
the record, so that a reader (another process sharing the directory too) never sees half of one.
A file that is gone, or not a record of the kind read, is skipped by the readers."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["read_record", "read_records", "write_record"]

T = TypeVar("T")


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


def read_record(path: Path, decode: Callable[[Any], T]) -> T | None:
    """The record at `path` as `decode` makes it of its JSON; None when there is none."""
    try:
        return decode(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def read_records(directory: Path, decode: Callable[[Any], T], pattern: str = "*.json") -> list[T]:
    """Every record of `directory` (its files matching `pattern`)."""
    found = (read_record(p, decode) for p in Path(directory).glob(pattern))
    return [r for r in found if r is not None]

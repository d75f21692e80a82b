"""The languages programs are judged and run in: the agent's judge table (`sandbox_core` judge
crate, `languages.rs`), read through the native module, so every surface (the API server's
validation, the SandboxFusion-compatible endpoint, the RL adapters, the dataset builder) uses
the same names and the same compiler flags. Whether a sandbox has a language's tools is the
agent's answer (`Info.languages`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from . import _bridge
from .errors import InvalidRequest

__all__ = ["Language", "by_name", "canonical", "require", "script_commands", "table"]


@dataclass(frozen=True)
class Language:
    """One language. `compile` and `run` are argv with paths relative to the program's directory:
    the source is `source_file`, the compile step writes what the run step runs beside it;
    `version` prints the version of the language's tools."""

    name: str
    aliases: tuple[str, ...]
    source_file: str
    compile: tuple[str, ...] | None
    run: tuple[str, ...]
    checks: bool  # cases may carry a check script (run after the program, same interpreter)
    version: tuple[str, ...]


@functools.cache
def table() -> tuple[Language, ...]:
    """Every language the judge knows."""
    return tuple(
        Language(name, tuple(aliases), source, tuple(c) if c else None, tuple(run), checks, tuple(version))
        for name, aliases, source, c, run, checks, version in _bridge.native().languages()
    )


@functools.cache
def _names() -> dict[str, Language]:
    return {alias: lang for lang in table() for alias in lang.aliases}


def by_name(name: str) -> Language | None:
    """The language `name` (any alias, any case) stands for, or None."""
    return _names().get(name.strip().lower())


def require(name: str) -> Language:
    """The language `name` stands for; `InvalidRequest` naming the known ones when none."""
    lang = by_name(name)
    if lang is None:
        known = ", ".join(sorted(x.name for x in table()))
        raise InvalidRequest(f"unknown language {name[:64]!r}; known: {known}")
    return lang


def canonical(name: str) -> str | None:
    """The canonical name of the language `name` stands for, or None."""
    lang = by_name(name)
    return lang.name if lang else None


def script_commands(name: str) -> tuple[str, list[str] | None, list[str]] | None:
    """(source file, compile argv or None, run argv) of the language `name` stands for, in the
    program's directory: the judge's file names and compile commands. An interpreted program
    runs as a plain script, without the judge's isolation flags, so files sent with it import
    as they would on the platforms whose APIs run it (SandboxFusion, Piston). None: unknown."""
    lang = by_name(name)
    if lang is None:
        return None
    run = list(lang.run) if lang.compile else [lang.run[0], lang.source_file]
    return lang.source_file, list(lang.compile) if lang.compile else None, run

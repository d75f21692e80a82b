"""Python run as a code interpreter's cell: the program's own output, the value of its last
expression as the main result (its `repr`, as a notebook shows it) and an exception as an error
with name, value and traceback, in the shape of e2b-code-interpreter's `Execution`.

The runner is a small program of its own (`RUNNER`), run in the sandbox like any program, beside
the cell's source; it writes its findings to `RESULT_FILE`, which the caller reads back.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["CELL_FILE", "RESULT_FILE", "RUNNER", "RUNNER_FILE", "execution", "source"]

CELL_FILE = "cell.py"
RUNNER_FILE = "_cell_runner.py"
RESULT_FILE = ".cell-result.json"


def source(code: str) -> str:
    """A cell's Python as IPython runs it: leading blank lines dropped, and when its first line
    is indented, that indent taken off every line that starts with it (so a cell pasted from
    inside a block, or a template written indented, runs as the notebook would run it)."""
    lines = code.splitlines(keepends=True)
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return ""
    first = lines[0]
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    if not indent:
        return "".join(lines)
    return "".join(line.removeprefix(indent) for line in lines)


RUNNER = f"""\
import ast, json, sys, traceback
out = {{"results": [], "error": None}}
namespace = {{"__name__": "__main__", "__builtins__": __builtins__}}
try:
    with open({CELL_FILE!r}) as f:
        tree = ast.parse(f.read(), "<cell>")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
        if value is not None:
            out["results"].append({{"text": repr(value), "is_main_result": True}})
except BaseException as e:
    out["error"] = {{
        "name": type(e).__name__,
        "value": str(e),
        "traceback": "".join(traceback.format_exception(e)),
    }}
sys.stdout.flush()
sys.stderr.flush()
with open({RESULT_FILE!r}, "w") as f:
    json.dump(out, f)
"""


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines(keepends=True)


def execution(
    stdout: bytes, stderr: bytes, found: bytes | None, error: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An `Execution` object: the cell's output, what the runner found (`RESULT_FILE`'s bytes, None
    when it wrote none) and, for a cell that never finished, `error`."""
    results: list[dict[str, Any]] = []
    if found is not None and error is None:
        try:
            parsed = json.loads(found)
            results = list(parsed.get("results") or [])
            error = parsed.get("error")
        except (ValueError, AttributeError):
            error = {"name": "SandboxError", "value": "the cell's result could not be read", "traceback": ""}
    elif error is None:
        error = {"name": "SandboxError", "value": "the cell ended without a result", "traceback": ""}
    return {
        "results": results,
        "logs": {"stdout": _lines(stdout), "stderr": _lines(stderr)},
        "error": error,
        "execution_count": 1,
    }

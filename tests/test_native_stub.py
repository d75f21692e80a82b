"""`sandboxes/_native.pyi` says what the built extension has: every public class and function on
both sides, and every method and attribute of a class the stub names."""

from __future__ import annotations

import ast
from pathlib import Path

STUB = Path(__file__).resolve().parent.parent / "sandboxes" / "_native.pyi"


def stub_names() -> tuple[set[str], dict[str, set[str]]]:
    tree = ast.parse(STUB.read_text())
    top: set[str] = set()
    members: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            top.add(node.name)
        elif isinstance(node, ast.ClassDef):
            top.add(node.name)
            names = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith(
                    "__"
                ):
                    names.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
            members[node.name] = names
    return top, members


def test_the_stub_and_the_module_name_the_same_things(native) -> None:
    top, members = stub_names()
    public = {n for n in dir(native) if not n.startswith("_")}
    assert top - public == set(), f"in the stub, not in the module: {sorted(top - public)}"
    assert public - top == set(), f"in the module, not in the stub: {sorted(public - top)}"
    for cls, names in members.items():
        runtime = getattr(native, cls)
        missing = {n for n in names if not hasattr(runtime, n)}
        assert not missing, f"{cls}: in the stub, not in the module: {sorted(missing)}"
        inherited = set(dir(BaseException)) if issubclass(runtime, BaseException) else set()
        unnamed = {n for n in dir(runtime) if not n.startswith("_")} - names - inherited
        assert not unnamed, f"{cls}: in the module, not in the stub: {sorted(unnamed)}"

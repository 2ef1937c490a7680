"""No Python module (tests included) is over 500 lines and no function over 80: a
module that big holds several jobs, a function that long several steps. Left out:
engine/run.py, which starting, watching and reading the workers still share (``LEFT_OUT``).

``python tests/unit/test_sizes.py`` prints the largest of each."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("core", "topologies", "traffic", "model", "emu", "engine", "experiments", "bench",
         "labs", "cli", "examples", "scripts", "tests")
LEFT_OUT = ("engine/run.py",)
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def _files() -> list[Path]:
    return sorted(p for root in ROOTS for p in (REPO / root).rglob("*.py")
                  if str(p.relative_to(REPO)) not in LEFT_OUT)


def file_lines() -> dict[str, int]:
    """Lines of every module but those ``LEFT_OUT``."""
    return {str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in _files()}


def _functions(node: ast.AST, prefix: str) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function under ``node``."""
    out: list[tuple[str, int]] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{child.name}"
            out.append((name, child.end_lineno - child.lineno + 1))  # type: ignore[operator]
            out += _functions(child, name + ".")
        elif isinstance(child, ast.ClassDef):
            out += _functions(child, f"{prefix}{child.name}.")
        else:
            out += _functions(child, prefix)
    return out


def function_lines() -> dict[str, int]:
    """Lines of every function and method (decorators aside), ``path:qualname``."""
    return {f"{p.relative_to(REPO)}:{name}": n for p in _files()
            for name, n in _functions(ast.parse(p.read_text()), "")}


def test_no_module_over_500_lines():
    sizes = file_lines()
    assert len(sizes) > 80
    over = {p: n for p, n in sizes.items() if n > MAX_FILE_LINES}
    assert not over, f"modules over {MAX_FILE_LINES} lines: {over}"


def test_no_function_over_80_lines():
    sizes = function_lines()
    assert len(sizes) > 500
    over = {f: n for f, n in sizes.items() if n > MAX_FUNCTION_LINES}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"


if __name__ == "__main__":
    for title, sizes in (("modules", file_lines()), ("functions", function_lines())):
        print(f"largest {title}:")
        for name, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:8]:
            print(f"  {n:5d}  {name}")

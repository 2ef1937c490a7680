"""The floors of docs/architecture.md, read from the code's own imports (function-level
and TYPE_CHECKING imports included): no import runs back up, and there is no loop."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Ground up; a module may import from its own floor and the floors below it.
FLOORS = ("core", "topologies", "traffic", "model", "emu", "engine", "experiments", "bench",
          "labs", "cli")


def _modules() -> dict[str, Path]:
    found = {}
    for floor in FLOORS:
        for path in (REPO / floor).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports (the longest known prefix of each import)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
                break
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_every_floor_exists_and_holds_code():
    modules = _modules()
    for floor in FLOORS:
        assert any(m == floor or m.startswith(floor + ".") for m in modules), floor
    assert len(modules) > 80


def test_no_import_runs_back_up():
    def floor(module: str) -> int:
        return FLOORS.index(module.split(".")[0])

    upward = sorted(f"{a} -> {b}" for a, targets in _graph().items() for b in targets
                    if floor(b) > floor(a))
    assert not upward, upward


def test_no_import_loop():
    graph = _graph()
    state: dict[str, int] = {}
    loops = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                loops.append(" -> ".join([*stack[stack.index(nxt):], nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    assert not loops, loops


def test_the_checker_sees_function_level_imports(tmp_path):
    """The check would be blind if it read only top-level imports."""
    (tmp_path / "m.py").write_text("def f():\n    from engine.run import run_workload\n")
    modules = {"engine.run": tmp_path / "x.py", "core.units": tmp_path / "m.py"}
    assert _imports("core.units", tmp_path / "m.py", modules) == {"engine.run"}

"""Every file the project writes goes through core.safefile: no other module opens a
file for writing, renames one into place or lets a library write to a path.

A line may opt out with a ``# safefile: ok - why`` comment (procfs and sysfs knobs,
a compiler's output in a private directory, a directory renamed whole)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLOORS = ("core", "topologies", "traffic", "model", "emu", "engine", "experiments", "bench",
          "labs", "cli")
HOME = ROOT / "core" / "safefile.py"

#: Methods that write to a path they are given (pathlib, pandas, matplotlib, numpy, json).
_WRITING_METHODS = {"write_text", "write_bytes", "savefig", "to_csv", "to_json", "to_parquet",
                    "to_pickle", "touch", "savetxt", "savez", "dump", "symlink_to",
                    "hardlink_to"}
_WRITING_FUNCS = {("os", "replace"), ("os", "rename"), ("os", "link"), ("os", "symlink"),
                  ("os", "mkfifo"), ("shutil", "copy"), ("shutil", "copy2"),
                  ("shutil", "copyfile"), ("shutil", "move"), ("tempfile", "mkstemp"),
                  ("tempfile", "NamedTemporaryFile"), ("np", "save"), ("json", "dump"),
                  ("pickle", "dump")}
_CREATING_FLAGS = {"O_CREAT", "O_WRONLY", "O_RDWR", "O_TRUNC", "O_APPEND"}


def _sources() -> list[Path]:
    return sorted(p for floor in FLOORS for p in (ROOT / floor).rglob("*.py")
                  if p != HOME and "starter" not in p.parts and "solution" not in p.parts)


def _writes(call: ast.Call) -> str | None:
    """What makes ``call`` a write outside core.safefile, or None."""
    func = call.func
    if isinstance(func, ast.Name) and func.id == "open":
        mode = call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "mode"), None)
        if isinstance(mode, ast.Constant) and isinstance(mode.value, str) \
                and set(mode.value) & set("wax+"):
            return f"open(..., {mode.value!r})"
        if mode is not None and not isinstance(mode, ast.Constant):
            return "open() with a computed mode"
        return None
    if not isinstance(func, ast.Attribute):
        return None
    owner = func.value.id if isinstance(func.value, ast.Name) else None
    if owner == "os" and func.attr == "open":
        flags = {n.attr for a in call.args[1:2] for n in ast.walk(a)
                 if isinstance(n, ast.Attribute)}
        return "os.open(" + "|".join(sorted(flags & _CREATING_FLAGS)) + ")" \
            if flags & _CREATING_FLAGS else None
    if (owner, func.attr) in _WRITING_FUNCS:
        return f"{owner}.{func.attr}()"
    if func.attr in _WRITING_METHODS and owner not in ("safefile",):
        return f".{func.attr}()"
    return None


def test_no_module_writes_a_file_outside_safefile() -> None:
    offences = []
    for path in _sources():
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Call) and (what := _writes(node)):
                span = lines[node.lineno - 1:(node.end_lineno or node.lineno)]
                if not any("# safefile: ok" in line for line in span):
                    offences.append(f"{path.relative_to(ROOT)}:{node.lineno}: {what}")
    assert not offences, ("write through core.safefile (or mark the line "
                          "'# safefile: ok - why'):\n" + "\n".join(offences))


def test_the_lint_sees_each_kind_of_write() -> None:
    """The check above can fail: each way of writing a file is recognised."""
    samples = ['open(p, "w")', 'open(p, mode="ab")', 'p.write_text("x")', "fig.savefig(p)",
               "df.to_csv(p)", "os.replace(a, b)", "os.open(p, os.O_WRONLY | os.O_CREAT)",
               "json.dump(x, f)", "shutil.copy(a, b)"]
    for sample in samples:
        call = ast.parse(sample).body[0].value
        assert isinstance(call, ast.Call) and _writes(call), sample
    for harmless in ['open(p)', 'open(p, "rb")', "os.open(p, os.O_RDONLY)",
                     "safefile.write_text(p, x)"]:
        assert not _writes(ast.parse(harmless).body[0].value), harmless

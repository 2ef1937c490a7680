"""Every module's file name is unique across the floors, so a name in a traceback, a
grep or a review says which module it is (`dcqcn.py` three times did not).

Left out: ``__init__.py``; tests/ (pytest's own layout); and each lab's folder
(labs/labN_*/), whose layout the lab format fixes: every lab has a ``checks.py`` that
labs.catalog imports as ``labs.<lab>.checks``, and ``starter/`` and ``solution/`` hold
the same student file in two states."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOTS = ("core", "topologies", "traffic", "model", "emu", "engine", "experiments", "bench",
         "labs", "cli", "examples", "scripts")


def _basenames() -> dict[str, list[str]]:
    seen: dict[str, list[str]] = defaultdict(list)
    for root in ROOTS:
        for path in (REPO / root).rglob("*.py"):
            rel = path.relative_to(REPO)
            if path.name == "__init__.py" or (rel.parts[0] == "labs" and len(rel.parts) > 2):
                continue
            seen[path.name].append(str(rel))
    return seen


def test_no_two_modules_share_a_file_name():
    seen = _basenames()
    assert len(seen) > 80
    shared = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not shared, f"module file names used more than once: {shared}"

"""The lab folders and what each ``lab.toml`` declares: scenarios and checks, as data.

```toml
number = 1
title = "ECN and DCTCP"
student_writes = "DCTCP's alpha update and window cut"
class_minutes = 90                     # how long a student takes
[student]
file = "dctcp_lab.py"                   # copied from starter/ by `emu lab start`
class = "LabDctcp"                     # a congestion-control class (omit for functions)
[[scenario]]
name = "ksweep"
experiment = "cc"                      # any `emu run` experiment
quick = true
seconds = 60                           # measured wall time of one run, for the estimate
set = { algorithms = "{student}", scenarios = "oscillation" }
sweep = { osc_k = ["8K", "32K", "128K"] }   # one run per value
repeats = 1                            # runs per value; checks take the median
[[check]]
id = "alpha"
title = "alpha <- (1 - g) alpha + g F, once per window of data"
kind = "algorithm"                     # or "emulation" (then scenario = "...")
points = 3
todo = "TODO 1"                        # what a failure points the student to
function = "alpha_update"              # in the lab's checks.py
visibility = "visible"                 # or "hidden": the student sees pass/fail only
params = { tolerance = 1e-6 }          # handed to the check
```

``{student}`` in a scenario's settings stands for the student's class
(``path/file.py:Class``).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import tomllib

from core.errors import ParameterError

__all__ = ["LABS_DIR", "CheckSpec", "Lab", "Scenario", "all_labs", "find_lab"]

#: Where the lab folders live: beside this package's modules.
LABS_DIR = Path(__file__).resolve().parent
KINDS = ("algorithm", "emulation")
VISIBILITIES = ("visible", "hidden")
_FOLDER = re.compile(r"lab(\d+)_[a-z0-9_]+")


@dataclass(frozen=True)
class Scenario:
    """Runs of one experiment with the student's code: one per sweep value and repeat."""

    name: str
    experiment: str
    quick: bool
    seconds: float
    settings: dict[str, str]
    sweep: tuple[str, tuple[str, ...]] | None = None
    repeats: int = 1

    def points(self) -> list[str | None]:
        """The swept values, or [None] for a single configuration."""
        return list(self.sweep[1]) if self.sweep else [None]

    def runs(self) -> int:
        return len(self.points()) * self.repeats


@dataclass(frozen=True)
class CheckSpec:
    id: str
    title: str
    kind: str
    points: float
    todo: str
    function: str
    scenario: str | None = None
    visibility: str = "visible"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Lab:
    number: int
    slug: str
    title: str
    folder: Path
    student_writes: str
    class_minutes: int
    student_file: str
    student_class: str | None
    scenarios: tuple[Scenario, ...]
    checks: tuple[CheckSpec, ...]

    @property
    def starter(self) -> Path:
        return self.folder / "starter"

    @property
    def solution(self) -> Path:
        return self.folder / "solution"

    def checks_module(self) -> ModuleType:
        return importlib.import_module(f"labs.{self.folder.name}.checks")

    def scenario(self, name: str) -> Scenario:
        return next(s for s in self.scenarios if s.name == name)

    def max_points(self) -> float:
        return sum(c.points for c in self.checks)

    def estimate_s(self, emulation: bool = True) -> float:
        """Wall time of a check: the scenarios' measured run times, plus a few
        seconds for the algorithm checks."""
        runs = sum(s.seconds * s.runs() for s in self.scenarios) if emulation else 0.0
        return 5.0 + runs


def _need(table: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = table.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ParameterError(where, key, f"needs {key} ({kind.__name__})")
    return value


def _scenario(t: dict[str, Any], where: str) -> Scenario:
    sweep = t.get("sweep") or {}
    if len(sweep) > 1:
        raise ParameterError(where, sweep, "sweeps one option at a time")
    sw = next(((k, tuple(str(v) for v in vs)) for k, vs in sweep.items()), None)
    return Scenario(name=_need(t, "name", str, where), experiment=_need(t, "experiment", str, where),
                    quick=bool(t.get("quick", True)), seconds=float(_need(t, "seconds", int | float, where)),
                    settings={k: str(v) for k, v in (t.get("set") or {}).items()}, sweep=sw,
                    repeats=int(t.get("repeats", 1)))


def _check(t: dict[str, Any], where: str, scenarios: set[str]) -> CheckSpec:
    spec = CheckSpec(id=_need(t, "id", str, where), title=_need(t, "title", str, where),
                     kind=_need(t, "kind", str, where),
                     points=float(_need(t, "points", int | float, where)),
                     todo=_need(t, "todo", str, where), function=_need(t, "function", str, where),
                     scenario=t.get("scenario"), visibility=t.get("visibility", "visible"),
                     params=dict(t.get("params") or {}))
    if spec.kind not in KINDS:
        raise ParameterError(f"{where} check {spec.id}", spec.kind, f"kind is one of {KINDS}")
    if spec.visibility not in VISIBILITIES:
        raise ParameterError(f"{where} check {spec.id}", spec.visibility,
                             f"visibility is one of {VISIBILITIES}")
    if (spec.kind == "emulation") != (spec.scenario in scenarios):
        raise ParameterError(f"{where} check {spec.id}", spec.scenario,
                             "an emulation check names one of the lab's scenarios; "
                             "an algorithm check none")
    if not spec.points >= 0:
        raise ParameterError(f"{where} check {spec.id}", spec.points, "points must be >= 0")
    return spec


def load_lab(folder: Path) -> Lab:
    """The lab of one folder; ParameterError naming the file when lab.toml is wrong."""
    where = str(folder / "lab.toml")
    try:
        data = tomllib.loads((folder / "lab.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ParameterError("lab", where, str(e)) from None
    student = data.get("student") or {}
    scenarios = tuple(_scenario(t, where) for t in data.get("scenario", []))
    names = {s.name for s in scenarios}
    checks = tuple(_check(t, where, names) for t in data.get("check", []))
    if not checks:
        raise ParameterError("lab", where, "declares no check")
    if len({c.id for c in checks}) != len(checks):
        raise ParameterError("lab", where, "two checks share an id")
    return Lab(number=_need(data, "number", int, where), slug=folder.name.split("_", 1)[1],
               title=_need(data, "title", str, where), folder=folder,
               student_writes=_need(data, "student_writes", str, where),
               class_minutes=int(data.get("class_minutes", 60)),
               student_file=_need(student, "file", str, where),
               student_class=student.get("class"), scenarios=scenarios, checks=checks)


def _folders() -> list[Path]:
    """The lab folders (``labN_slug`` holding a lab.toml), by number."""
    found = [p for p in LABS_DIR.iterdir()
             if p.is_dir() and _FOLDER.fullmatch(p.name) and (p / "lab.toml").is_file()]
    return sorted(found, key=lambda p: int(_FOLDER.fullmatch(p.name).group(1)))  # type: ignore[union-attr]


def all_labs() -> list[Lab]:
    """Every lab, by number."""
    return [load_lab(p) for p in _folders()]


def find_lab(number: int | str) -> Lab:
    """Lab ``number`` (``1``, ``"1"``, or its name ``"dctcp"``); ParameterError if none.
    Only that lab's lab.toml is read."""
    key = str(number).strip().lower()
    folders = _folders()
    for p in folders:
        n, slug = p.name[3:].split("_", 1)
        if key in (n, slug, p.name):
            return load_lab(p)
    known = ", ".join(f"{p.name[3:].split('_', 1)[0]} ({p.name.split('_', 1)[1]})" for p in folders)
    raise ParameterError("lab", number, f"known labs: {known}")

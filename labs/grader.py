"""Grading a student's working folder against a lab: algorithm checks on the simulated
clock first, then the emulation checks on the lab's scenarios.

A check is a function of the lab's ``checks.py``, named in ``lab.toml``, that takes a
``CheckContext`` and returns an ``Outcome`` (``labs.verdict.ok/fail/ungraded``). The
student's exceptions, hangs and out-of-range values (``StudentError``,
``HarnessError``) fail the check with their one line; an emulation check whose
scenario the machine could not measure is ungraded, never failed. A
checks module may also define ``plots(runs, out, code)``: the lab's own figures from
the scenarios' runs and the student's code, written under ``out``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs.catalog import CheckSpec, Lab
from labs.emulation import ScenarioRuns, machine_reason, run_scenarios, student_spec
from labs.harness import Harness, HarnessError
from labs.student import StudentCode, StudentError
from labs.verdict import CheckResult, Grade, Outcome, fail, ungraded

__all__ = ["CheckContext", "grade", "run_lab"]


@dataclass
class CheckContext:
    """What a check function gets: its spec (``params``), the student's code, and for
    an emulation check the runs of its scenario."""

    lab: Lab
    spec: CheckSpec
    code: StudentCode
    runs: ScenarioRuns | None = None

    @property
    def params(self) -> dict[str, Any]:
        return self.spec.params

    def student_class(self) -> type:
        assert self.lab.student_class is not None
        return self.code.attr(self.lab.student_class)

    def new_cc(self, line_rate_bps: float = 100e9, start_s: float = 0.0, **params: Any) -> object:
        """An instance of the student's class, as the engine builds one per QP."""
        cls = self.student_class()
        return self.code.call(f"{cls.__name__}(line_rate_bps={line_rate_bps:g})", cls,
                              line_rate_bps, start_s, **params)

    def harness(self, line_rate_bps: float = 100e9, start_s: float = 0.0,
                **params: Any) -> Harness:
        """The student's class on a simulated clock that starts at ``start_s``."""
        return Harness(self.new_cc(line_rate_bps, start_s, **params), start_s,
                       call=self.code.call)

    def function(self, name: str) -> Callable[..., Any]:
        """A function the student wrote, called through ``code.call`` (one-line errors)."""
        fn = self.code.attr(name)
        return lambda *args, **kwargs: self.code.call(f"{name}()", fn, *args, **kwargs)


def _load(lab: Lab, code: StudentCode) -> str | None:
    """Why the student's file cannot be graded at all (an import that fails, no such
    class), or None. What the class does with events is the checks' business: the
    harness names the event and the line that failed."""
    try:
        code.module()
        if lab.student_class and not isinstance(code.attr(lab.student_class), type):
            return f"{lab.student_class} in {code.name} is not a class"
    except StudentError as e:
        return str(e)
    return None


def _run_check(ctx: CheckContext) -> Outcome:
    fn = getattr(ctx.lab.checks_module(), ctx.spec.function)
    try:
        return fn(ctx)
    except (StudentError, HarnessError) as e:
        return fail(str(e))


def grade(lab: Lab, workdir: Path, *, emulation: bool = True, out: Path | None = None,
          attempts: int = 3, say: Callable[[str], None] = lambda _text: None) -> Grade:
    """Grade ``workdir`` (a folder holding the lab's student file). Emulation run
    directories go under ``out`` (default ``workdir/runs/labN-check-<time>``)."""
    t0 = time.monotonic()
    g = Grade(lab.number, lab.title)
    code = StudentCode(workdir / lab.student_file)
    broken = _load(lab, code)
    if broken:
        g.notes.append(broken)

    def add(spec: CheckSpec, outcome: Outcome, seconds: float) -> None:
        g.results.append(CheckResult(spec.id, spec.title, spec.kind, spec.todo, spec.visibility,
                                     spec.points, outcome, seconds))

    for spec in lab.checks:
        if spec.kind != "algorithm":
            continue
        t = time.monotonic()
        add(spec, fail(broken) if broken else _run_check(CheckContext(lab, spec, code)),
            time.monotonic() - t)

    emu_checks = [c for c in lab.checks if c.kind == "emulation"]
    runs: dict[str, ScenarioRuns] = {}
    if emu_checks and emulation and not broken and machine_reason() is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = out or workdir / "runs" / f"lab{lab.number}-check-{stamp}"
        runs = run_scenarios(lab, workdir, out, attempts=attempts,
                             only={c.scenario for c in emu_checks if c.scenario}, say=say)
        g.notes.append(f"emulation runs in {out}")
        plots = getattr(lab.checks_module(), "plots", None)
        if plots is not None and any(sr.runs for sr in runs.values()):
            for path in plots(runs, out, code):
                g.notes.append(f"plot: {path}")
    for spec in emu_checks:
        t = time.monotonic()
        sr = runs.get(spec.scenario or "")
        if broken:
            outcome = fail(broken)
        elif not emulation:
            outcome = ungraded("not run (--no-emulation)")
        elif sr is None:
            outcome = ungraded(machine_reason() or "not run")
        elif sr.student_error:
            outcome = fail(sr.student_error)
        elif sr.ungraded:
            outcome = ungraded(sr.ungraded)
        else:
            outcome = _run_check(CheckContext(lab, spec, code, sr))
        add(spec, outcome, time.monotonic() - t)
    g.seconds = time.monotonic() - t0
    if broken is None and lab.student_class:
        g.notes.append(f"your class as a cc setting: {student_spec(lab, workdir)}")
    return g


def run_lab(lab: Lab, workdir: Path, out: Path,
            say: Callable[[str], None] = lambda _text: None) -> tuple[dict[str, ScenarioRuns], list[Path]]:
    """``emu lab run``: every scenario on the student's code, and the lab's plots."""
    code = StudentCode(workdir / lab.student_file)
    broken = _load(lab, code)
    if broken:
        raise StudentError(broken)
    reason = machine_reason()
    if reason:
        raise StudentError(reason)
    runs = run_scenarios(lab, workdir, out, say=say)
    plots = getattr(lab.checks_module(), "plots", None)
    return runs, (plots(runs, out, code) if plots is not None else [])

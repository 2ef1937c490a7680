"""A lab's scenarios on the emulated fabric, through the ordinary experiment path.

Every run is an ``emu run`` experiment with the scenario's settings and the
student's class in place of ``{student}``; it writes the usual run directory. A run
the fidelity gate refuses is measured again (up to ``attempts`` times) and never
graded: if no attempt is valid, the scenario is **ungraded** with the gate's reasons,
and the checks that need it cost the student nothing. A scenario repeated ``repeats``
times gives each metric as the median of its valid runs.

The student's own failures are theirs: a class that raises or returns a bad rate in
the middle of a run stops it with one line (``traffic.ccload.run_fault``), which the
checks report as their feedback.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from core.errors import ParameterError
from core.machinecpu import cpu_ticks, steal_share
from labs.catalog import Lab, Scenario
from labs.student import StudentCode, StudentError

__all__ = ["RunRecord", "ScenarioRuns", "run_scenarios"]

#: Measurements of one configuration before it is declared ungraded.
ATTEMPTS = 3


@dataclass
class RunRecord:
    """One configuration of a scenario (a sweep value and repeat), after its attempts."""

    point: str | None
    repeat: int
    run_dir: Path | None = None
    valid: bool = False
    attempts: int = 0
    reasons: list[str] = field(default_factory=list)
    failed_checks: list[str] = field(default_factory=list)   # the last attempt's, by name
    #: per attempt, the share of the machine's CPU the hypervisor took (steal)
    stolen_shares: list[float] = field(default_factory=list)
    metrics: pd.DataFrame | None = None


@dataclass
class ScenarioRuns:
    """What a scenario measured. ``ungraded``: why it could not (else None);
    ``student_error``: the student's code stopped a run (else None)."""

    scenario: Scenario
    runs: list[RunRecord] = field(default_factory=list)
    ungraded: str | None = None
    student_error: str | None = None

    def points(self) -> list[str | None]:
        return self.scenario.points()

    def valid_runs(self, point: str | None = None) -> list[RunRecord]:
        return [r for r in self.runs if r.valid and r.point == point]

    def metric(self, metric: str, case_contains: str = "", point: str | None = None,
               column: str = "measured") -> float:
        """The median over the valid runs at ``point`` of ``metric`` in the first case
        whose name contains ``case_contains``; NaN if no run measured it.
        ``column="predicted"``: the model's value beside it."""
        values = []
        for r in self.valid_runs(point):
            assert r.metrics is not None
            m = r.metrics
            rows = m[(m.metric == metric) & m.case.str.contains(case_contains, regex=False)]
            if not rows.empty and pd.notna(rows.iloc[0][column]):
                values.append(float(rows.iloc[0][column]))
        return statistics.median(values) if values else math.nan

    def table(self, name: str, point: str | None = None) -> list[pd.DataFrame]:
        """The CSV ``name`` of every valid run at ``point``."""
        out = []
        for r in self.valid_runs(point):
            assert r.run_dir is not None
            if (r.run_dir / name).is_file():
                out.append(pd.read_csv(r.run_dir / name))
        return out


def student_spec(lab: Lab, workdir: Path) -> str:
    """The ``cc`` setting of the student's class: ``/abs/path/file.py:Class``."""
    return f"{(workdir / lab.student_file).resolve()}:{lab.student_class}"


def _settings(lab: Lab, scenario: Scenario, workdir: Path, point: str | None) -> dict[str, str]:
    """The scenario's ``--set`` values for one run. A lab whose checks module has
    ``scenario_settings(code, scenario_name, point)`` adds what the student's code
    computes (e.g. PFC thresholds from their function); its StudentError is theirs."""
    spec = student_spec(lab, workdir) if lab.student_class else ""
    out = {k: v.replace("{student}", spec) for k, v in scenario.settings.items()}
    if scenario.sweep and point is not None:
        out[scenario.sweep[0]] = point
    hook = getattr(lab.checks_module(), "scenario_settings", None)
    if hook is not None:
        out.update(hook(StudentCode(workdir / lab.student_file), scenario.name, point))
    return out


def _label(scenario: Scenario, point: str | None, repeat: int, attempt: int) -> str:
    parts = [scenario.name]
    if point is not None:
        parts.append(f"{scenario.sweep[0]}={point}" if scenario.sweep else point)
    if scenario.repeats > 1:
        parts.append(f"r{repeat + 1}")
    if attempt:
        parts.append(f"again{attempt}")
    return "-".join(parts).replace("/", "_")


def _refused(rec: RunRecord, label: str) -> str:
    """Why a configuration no attempt of which was valid is ungraded: the machine's
    timing where the gate's own rule says so (`experiments.rundir.interference_only`),
    else the gate's refusal as it stands (a teacher then reads the reasons)."""
    from experiments.rundir import interference_only

    reasons = "; ".join(rec.reasons)[:300]
    shares = rec.stolen_shares
    stolen = (f"; the hypervisor took {min(shares):.1%}-{max(shares):.1%} of the CPU in "
              f"those runs" if shares else "")
    if interference_only(rec.failed_checks):
        return (f"machine too busy: {rec.attempts} run(s) of {label} refused by the "
                f"fidelity gate ({reasons}){stolen}")
    return (f"the fidelity gate refused {rec.attempts} run(s) of {label}, not for the "
            f"machine's timing alone ({reasons}){stolen}")


def machine_reason() -> str | None:
    """Why this machine cannot run a fabric at all, or None."""
    if os.geteuid() != 0:
        return "the emulated fabric needs root: run `sudo emu lab ...` (or as root in the lab VM)"
    return None


def run_scenarios(lab: Lab, workdir: Path, out: Path, *, attempts: int = ATTEMPTS,
                  only: set[str] | None = None,
                  say: Callable[[str], None] = lambda _text: None) -> dict[str, ScenarioRuns]:
    """Run every scenario of ``lab`` (or those in ``only``) on the student's code in
    ``workdir``; run directories go under ``out``."""
    from experiments.registry import cli_run

    results: dict[str, ScenarioRuns] = {}
    blocked = machine_reason()
    for scenario in lab.scenarios:
        if only is not None and scenario.name not in only:
            continue
        sr = ScenarioRuns(scenario)
        results[scenario.name] = sr
        if blocked:
            sr.ungraded = blocked
            continue
        for point in scenario.points():
            for repeat in range(scenario.repeats):
                rec = RunRecord(point, repeat)
                sr.runs.append(rec)
                while rec.attempts < attempts and not rec.valid and sr.student_error is None:
                    run_dir = out / _label(scenario, point, repeat, rec.attempts)
                    rec.attempts += 1
                    say(f"{run_dir.name}: running (attempt {rec.attempts} of at most "
                        f"{attempts}, about {scenario.seconds:.0f} s)")
                    t0, ticks = time.monotonic(), cpu_ticks()
                    try:
                        result = cli_run(scenario.experiment, run_dir, scenario.quick, None,
                                         _settings(lab, scenario, workdir, point), show=False)
                    except StudentError as e:
                        sr.student_error = str(e)
                        break
                    except ParameterError as e:
                        if e.name == "cc" or "invalid cc=" in str(e):
                            sr.student_error = f"your class stopped the run: {e.why}"
                            break
                        raise
                    rec.stolen_shares.append(steal_share(ticks, cpu_ticks()))
                    rec.run_dir, rec.valid = result.run_dir, result.valid
                    rec.metrics = result.metrics
                    rec.reasons = list(result.fidelity.reasons)
                    rec.failed_checks = [c.name for c in result.fidelity.checks if not c.ok]
                    say(f"{run_dir.name}: {'valid' if rec.valid else 'refused by the gate'} "
                        f"in {time.monotonic() - t0:.0f} s"
                        + ("" if rec.valid else f" ({'; '.join(rec.reasons)[:200]})"))
                if not rec.valid and sr.student_error is None and sr.ungraded is None:
                    sr.ungraded = _refused(rec, _label(scenario, point, repeat, 0))
            if sr.student_error:
                break
    return results


def check_runnable(lab: Lab, workdir: Path) -> None:
    """The scenarios' settings parse with the student's code (a broken class is a
    StudentError-worthy ParameterError here, before any fabric is built)."""
    from experiments.options import resolve_typed
    from experiments.registry import EXPERIMENTS

    for scenario in lab.scenarios:
        module = EXPERIMENTS[scenario.experiment]
        for point in scenario.points():
            resolve_typed(module.Options, module.OPTIONS, scenario.quick,
                          _settings(lab, scenario, workdir, point), module.check)

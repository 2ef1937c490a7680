"""A run directory's top-level files, made from its case records (``cases/NNN/``,
`experiments.storage`): ``metrics.csv``, one CSV per frame, ``deviations.csv``,
``config.json`` and ``summary.json``, each replaced whole (core.safefile).

They are written when a run starts (a resumed one with the cases it keeps) and when it
ends or stops, not as each case ends: a case's commit writes its own record only, so
recording a run costs time in proportion to its cases, not to their square. A run
killed before its end (SIGKILL, the OOM killer) holds more records than its top-level
files cover (summary.json's ``cases_recorded``); :func:`catch_up`, which ``emu report``
calls first, writes them from the records.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from core import safefile
from core.errors import FabricEmuError
from core.scaling import DEFAULT_SCALE
from emu.runs import owner_alive, start_ticks
from experiments.fidelity import FidelityReport, combine
from experiments.storage import CASES_DIR, MAX_RUN_JSON_BYTES, CaseRecord, record_count

#: metrics.csv's columns (summary.json's metric rows hold the same keys).
METRIC_COLUMNS = ("case", "metric", "unit", "measured", "predicted", "kind", "tolerance_rel",
                  "error_rel", "model_disagrees", "valid")
#: config.json's keys that come from the case records (the others are the run's own).
_FROM_RECORDS = ("status", "fabrics", "fixed_delays", "notes")


def json_safe(x: Any) -> Any:
    """``x`` as JSON holds it: None for a non-finite float, numpy scalars as Python's."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):  # numpy scalars
        return json_safe(x.item())
    return x


def with_valid(df: pd.DataFrame, unit_cases: Mapping[str, FidelityReport],
               cases: Mapping[str, FidelityReport], run_valid: bool) -> pd.DataFrame:
    """``df`` with a ``valid`` column (kept if it has one): the verdict of the row's
    ``case`` where the gate judged that case, else of the committed unit the rows were
    measured in (all its cases valid), else the run's (rows no case measured, such as
    the model's curves)."""
    if "valid" in df.columns:
        return df
    unit_valid = all(r.valid for r in unit_cases.values()) if unit_cases else run_valid
    if "case" in df.columns:
        verdicts = {c: r.valid for c, r in cases.items()}
        valid = df["case"].map(lambda c: verdicts.get(c, unit_valid)).astype(bool)
    else:
        valid = pd.Series(unit_valid, index=df.index, dtype=bool)
    return df.assign(valid=valid)


@dataclass(frozen=True)
class Written:
    """What :func:`write_run_files` wrote: the summary rows, the run's verdict and each
    case's."""

    metrics: pd.DataFrame
    verdict: FidelityReport
    cases: dict[str, FidelityReport]


def write_run_files(run_dir: Path, units: Sequence[CaseRecord], config: Mapping[str, Any], *,
                    status: str, scale: float, stopped: str | None = None,
                    rerun_at: Callable[[float], str] | None = None,
                    owner: Mapping[str, Any] | None = None) -> Written:
    """Every top-level file of ``run_dir`` from ``units``. ``config``: config.json's keys
    that are the run's own (experiment, options, environment, ...); ``status``: running,
    stopped (``stopped`` the reason) or finished; ``rerun_at(S)``: the command that
    repeats a finished run the gate refused at the S it suggests; ``owner``: the
    process recording the run (`owner`), kept while it runs."""
    cases = {c: r for u in units for c, r in u.cases.items()}
    reports = list(cases.values())
    if status != "finished":
        reason = stopped or (f"incomplete: {len(units)} case(s) finished so far; the run "
                             "is still going or was killed")
        reports.append(FidelityReport(False, [reason], scale))
    verdict = combine(reports)
    rows = [dict(r) for u in units for r in u.rows]
    for row in rows:
        row["valid"] = cases[row["case"]].valid if row["case"] in cases else verdict.valid
    metrics = pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
    safefile.write_csv(run_dir / "metrics.csv", metrics)
    for name in dict.fromkeys(name for u in units for name in u.frames):
        parts = [with_valid(df, u.cases, cases, verdict.valid) for u in units
                 for df in u.frames.get(name, [])]
        safefile.write_csv(run_dir / f"{name}.csv", pd.concat(parts, ignore_index=True))
    fabrics = {k: v for u in units for k, v in u.fabrics.items()}
    deviations = [{k: json_safe(v) for k, v in d.items()} for u in units for d in u.deviations]
    if deviations:
        safefile.write_csv(run_dir / "deviations.csv",
                           with_valid(pd.DataFrame(deviations), {}, cases, verdict.valid))
    safefile.write_json(run_dir / "config.json", {
        **config, "status": status, "fabrics": fabrics,
        # Which real-fabric fixed delays each fabric emulated (the model prices all).
        "fixed_delays": {k: v.get("fixed_delays") for k, v in fabrics.items()},
        "notes": [n for u in units for n in u.notes]}, indent=2)
    summary = {
        "experiment": config.get("experiment"), "valid": verdict.valid, "status": status,
        "suggested_scale": verdict.suggested_scale, "reasons": verdict.reasons,
        # A refused run the gate says a larger S fixes, as a command (none where the
        # slowest link caps S at or below the run's: no S passes on that fabric).
        "suggested_rerun": (rerun_at(verdict.suggested_scale)
                            if rerun_at is not None and status == "finished"
                            and not verdict.valid and verdict.suggested_scale > scale
                            else None),
        "cases": {c: r.as_dict() for c, r in cases.items()},
        "metrics": [{k: json_safe(v) for k, v in r.items()} for r in rows],
        # Predictions further from the measurement than their tolerance (model.claims):
        # the model's verdict, apart from the gate's "valid".
        "model_disagrees": [{"case": r["case"], "metric": r["metric"]} for r in rows
                            if r.get("model_disagrees")],
        "deviations": deviations,
        # Earlier attempts of a case the gate refused for interference, with their
        # reasons (Run.attempt): never dropped silently.
        "refused_attempts": {c: r for u in units for c, r in u.refused.items()},
        # Where a randomised model's realisations put a metric (same unit as the
        # metric): "band" their 5-95 % points, "range" their least and greatest.
        "model_spreads": {c: r for u in units for c, r in u.spreads.items()},
        # The case records (cases/NNN/) these files were made from: a run killed
        # later holds more (catch_up).
        "cases_recorded": len(units),
        "owner": owner if status == "running" else None,
    }
    safefile.write_json(run_dir / "summary.json", summary, indent=2)
    return Written(metrics, verdict, cases)


def owner() -> dict[str, Any]:
    """This process, as a running run's summary.json names the process recording it."""
    return {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid())}


def _still_going(summary: Mapping[str, Any]) -> int | None:
    """The pid of the process still recording the run, None if it ended."""
    who = summary.get("owner")
    if not isinstance(who, dict) or not isinstance(who.get("pid"), int):
        return None
    ticks = who.get("start_ticks")
    alive = owner_alive(who["pid"], ticks if isinstance(ticks, int) else None)
    return who["pid"] if alive else None


def catch_up(run_dir: Path) -> bool:
    """Write the top-level files of a run that did not end (summary.json still says
    running) from its case records, if it holds more than they cover; True if it did.
    A directory this cannot read is left as it is, for the report to say what is wrong."""
    try:
        summary = json.loads(safefile.read_regular(run_dir / "summary.json", MAX_RUN_JSON_BYTES))
        config = json.loads(safefile.read_regular(run_dir / "config.json", MAX_RUN_JSON_BYTES))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if not (isinstance(summary, dict) and isinstance(config, dict)
            and summary.get("status") == "running"):
        return False
    recorded = summary.get("cases_recorded")
    if not isinstance(recorded, int) or record_count(run_dir / CASES_DIR) <= recorded:
        return False
    # Another process still recording writes them itself when it ends (this one, if it
    # is the owner, stopped recording: a full disk).
    if (pid := _still_going(summary)) is not None and pid != os.getpid():
        raise FabricEmuError(f"{run_dir} is a run still going (pid {pid}): its files are "
                             "written when it ends; report it then")
    try:
        units = CaseRecord.load_all(run_dir / CASES_DIR)
    except FabricEmuError as e:
        raise FabricEmuError(f"cannot report {run_dir}, a run that did not end: {e}") from None
    scale = config.get("scale")
    write_run_files(run_dir, units, {k: v for k, v in config.items() if k not in _FROM_RECORDS},
                    status="running", scale=float(scale) if isinstance(scale, (int, float))
                    and not isinstance(scale, bool) else DEFAULT_SCALE)
    return True

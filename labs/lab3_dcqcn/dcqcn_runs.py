"""Lab 3's fabric checks read the scenario's run directories through this: each valid run's
cc.csv rows of the student's class and of the built-in DCQCN, the incast port's Kmin and
Kmax, and its time-weighted queue over the incast's second half."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs.emulation import ScenarioRuns

BUILTIN = "dcqcn"


def is_student(cc: Any) -> Any:
    """The student's rows: their class is a ``path.py:Class`` setting."""
    return cc.astype(str).str.contains(".py:", regex=False)


@dataclass(frozen=True)
class RunView:
    """One valid run of the scenario: the student's and the built-in's cc.csv rows."""

    run_dir: Path
    cc: Any                      # pandas DataFrame of cc.csv

    def row(self, scenario: str, student: bool) -> Any:
        rows = self.cc[self.cc.scenario == scenario]
        rows = rows[is_student(rows.cc) if student else (rows.cc == BUILTIN)]
        return rows.iloc[0] if len(rows) else None


def run_views(runs: ScenarioRuns) -> list[RunView]:
    import pandas as pd

    out = []
    for rec in runs.valid_runs():
        if rec.run_dir is not None and (rec.run_dir / "cc.csv").is_file():
            out.append(RunView(rec.run_dir, pd.read_csv(rec.run_dir / "cc.csv")))
    return out


def median(values: Sequence[float]) -> float:
    import statistics

    clean = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(clean) if clean else math.nan


def thresholds_kb(view: RunView) -> tuple[float, float]:
    """Kmin and Kmax of the incast's bottleneck port (the port queue.csv samples)."""
    import pandas as pd

    ports = pd.read_csv(view.run_dir / "ports.csv")
    queue = pd.read_csv(view.run_dir / "queue.csv", usecols=["port"], nrows=1)
    row = ports[(ports.port == queue.port.iloc[0]) & ports.case.str.startswith("incast")].iloc[0]
    return float(row.kmin_bytes) / 1e3, float(row.kmax_bytes) / 1e3


def second_half_queue_kb(view: RunView) -> float:
    """The student's incast: the time-weighted mean bottleneck queue over the second half
    of the incast (completion / 2 to completion), in KB."""
    import numpy as np
    import pandas as pd

    row = view.row("incast", True)
    end_s = float(row.completion_us) * 1e-6
    q = pd.read_csv(view.run_dir / "queue.csv", usecols=["case", "t_s", "backlog_bytes"])
    q = q[q.case == row.case].sort_values("t_s")
    q = q[(q.t_s >= end_s / 2) & (q.t_s <= end_s)]
    if q.empty:
        return math.nan
    t = q.t_s.to_numpy()
    dt = np.diff(np.append(t, end_s))
    if dt.sum() <= 0:
        return float(q.backlog_bytes.mean()) / 1e3
    return float((q.backlog_bytes.to_numpy() * dt).sum() / dt.sum()) / 1e3

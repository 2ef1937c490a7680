"""render_plots draws a run's plots in forked processes: the same files as drawn in
turn, and a CSV it cannot draw is the same one-line ParameterError, raised in the
parent."""

from __future__ import annotations

import pickle
from pathlib import Path

import pandas as pd
import pytest

from core import forkmap
from core.errors import ParameterError
from experiments import plots


def test_a_parameter_error_survives_pickling_whole():
    e = ParameterError("run_dir", "/tmp/x", "queue.csv lacks the column(s) t_s")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is ParameterError and str(back) == str(e)
    assert (back.name, back.value, back.why) == (e.name, e.value, e.why)


def _run_dir(tmp_path: Path) -> Path:
    """A run directory with two plots to draw: queue over time and latency CCDF."""
    (tmp_path / "metrics.csv").write_text(
        "case,metric,unit,measured,predicted,kind,tolerance_rel,error_rel,"
        "model_disagrees,valid\n")
    (tmp_path / "config.json").write_text('{"scale": 10000}')
    (tmp_path / "summary.json").write_text('{"cases": {"a": {"valid": true}}}')
    pd.DataFrame({"case": "a", "port": "e1:e1-eth1", "t_s": [0.0, 1e-6, 2e-6],
                  "backlog_bytes": [0, 4096, 0], "valid": True}).to_csv(
        tmp_path / "queue.csv", index=False)
    pd.DataFrame({"case": "a", "one_way_s": [1e-6, 2e-6, 3e-6], "valid": True}).to_csv(
        tmp_path / "latency.csv", index=False)
    return tmp_path


def test_forked_and_in_turn_draw_the_same_plots(tmp_path, monkeypatch):
    run_dir = _run_dir(tmp_path)
    forked = plots.render_plots(run_dir)
    assert len(forked) == 2 and all(p.is_file() and p.stat().st_size > 0 for p in forked)
    monkeypatch.setattr(forkmap.os, "sched_getaffinity", lambda _pid: {0})  # one CPU: in turn
    assert plots.render_plots(run_dir) == forked


def test_a_csv_a_forked_process_cannot_draw_is_one_line_in_the_parent(tmp_path):
    run_dir = _run_dir(tmp_path)
    (run_dir / "latency.csv").write_text("case,valid\na,True\n")
    with pytest.raises(ParameterError) as err:
        plots.render_plots(run_dir)
    assert "latency.csv lacks the column(s)" in str(err.value) and "\n" not in str(err.value)

"""--predictions FILE.csv (experiments/predictions.py): a user's predictions round-trip
into a finished run's report beside the measurement and the model, with both errors."""

from __future__ import annotations

import json

import pytest

from core.errors import ParameterError
from experiments.fidelity import FidelityReport
from experiments.predictions import read_predictions
from experiments.report import render_report
from experiments.rundir import Run
from model.claims import DAG_TIME


def _run(tmp_path):
    run = Run("synthetic", tmp_path / "run", {"scale": 50000.0}, quick=True)
    run.metric("a,b c", "iteration", "us", 110.0, 100.0, DAG_TIME)
    run.metric("a,b c", "busbw", "GB/s", 40.0, 50.0, DAG_TIME)
    run.fidelity("a,b c", FidelityReport(True, [], 50000.0))
    run.commit("a,b c")
    run.finish(show=False)
    return tmp_path / "run"


def test_predictions_round_trip_into_the_report(tmp_path, capsys):
    run_dir = _run(tmp_path)
    path = tmp_path / "p.csv"
    path.write_text('unit,case,metric,value\nus,"a,b c",iteration,125\n\n')
    render_report(run_dir, predictions=path)
    (row,) = json.loads((run_dir / "summary.json").read_text())["predictions"]
    assert row["measured"] == 110.0 and row["user"] == 125.0 and row["model"] == 100.0
    assert row["user_error_rel"] == pytest.approx(110 / 125 - 1)
    assert row["model_error_rel"] == pytest.approx(0.10)
    assert "predictions.csv" in {p.name for p in run_dir.iterdir()}
    out = capsys.readouterr().out
    assert "your predictions" in out and "-12.0%" in out and "+10.0%" in out
    # A re-render keeps them (summary.json holds them).
    render_report(run_dir)
    assert "-12.0%" in capsys.readouterr().out


@pytest.mark.parametrize(("text", "match"), [
    ("case,metric,value\n", "header"),
    ("case,metric,value,unit,extra\n", "header"),
    ("case,metric,value,unit\nx,y,abc,us\n", "finite"),
    ("case,metric,value,unit\nx,y,nan,us\n", "finite"),
    ("case,metric,value,unit\nx,y,1\n", "fields"),
    ("case,metric,value,unit\nx,y,1,us\nx,y,2,us\n", "twice"),
    ("", "empty"),
])
def test_malformed_predictions_are_refused(tmp_path, text, match):
    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(ParameterError, match=match):
        read_predictions(path)


@pytest.mark.parametrize(("row", "match"), [
    ('"a,b c",nope,1,us', "no such"), ('"a,b c",iteration,1,ms', "unit")])
def test_predictions_must_name_the_runs_metrics_in_their_units(tmp_path, row, match):
    run_dir = _run(tmp_path)
    path = tmp_path / "p.csv"
    path.write_text(f"case,metric,value,unit\n{row}\n")
    with pytest.raises(ParameterError, match=match):
        render_report(run_dir, predictions=path, show=False)
    assert "predictions" not in json.loads((run_dir / "summary.json").read_text())

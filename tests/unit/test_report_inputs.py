"""`emu report` on damaged or foreign run directories: one ParameterError naming the
problem, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from core.errors import ParameterError
from experiments import rundir
from experiments.fidelity import FidelityReport
from experiments.report import render_report
from experiments.rundir import Run
from model.claims import ALPHABETA


@pytest.fixture
def run_dir(tmp_path, monkeypatch) -> Path:
    """A small finished run with a queue and a latency plot."""
    monkeypatch.setattr(rundir, "capabilities", lambda: {})
    run = Run("synthetic", tmp_path / "run", {"scale": 1e5}, quick=True)
    run.metric("c", "latency p99", "us", 2.0, 2.1, ALPHABETA)
    run.frame("queue", pd.DataFrame({"t_s": [0.0, 1e-6], "port": "p",
                                     "backlog_bytes": [0, 4154]}), case="c")
    run.frame("latency", pd.DataFrame({"one_way_s": [1e-6, 2e-6]}), case="c")
    run.fidelity("c", FidelityReport(True, [], 1e5))
    run.finish(show=False)
    return tmp_path / "run"


def test_the_fixture_renders(run_dir):
    assert {p.name for p in render_report(run_dir, show=True)} == {"queue_over_time.png",
                                                                   "latency_ccdf.png"}


def _truncate(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[:len(text) // 2])


DAMAGE = {
    "truncated summary.json": lambda d: _truncate(d / "summary.json"),
    "empty summary.json": lambda d: (d / "summary.json").write_text(""),
    "summary.json a list": lambda d: (d / "summary.json").write_text("[1, 2]"),
    "summary.json binary": lambda d: (d / "summary.json").write_bytes(b"\xff\xfe\x00garbage"),
    "summary.json without metrics": lambda d: (d / "summary.json").write_text(
        json.dumps({"experiment": "x", "valid": True, "cases": {}})),
    "summary.json malformed row": lambda d: (d / "summary.json").write_text(
        json.dumps({"experiment": "x", "valid": True, "cases": {}, "metrics": [1]})),
    "summary.json missing": lambda d: (d / "summary.json").unlink(),
    "config.json missing": lambda d: (d / "config.json").unlink(),
    "truncated config.json": lambda d: _truncate(d / "config.json"),
    "garbage queue.csv": lambda d: (d / "queue.csv").write_bytes(bytes(range(256)) * 8),
    "queue.csv of text": lambda d: (d / "queue.csv").write_text("hello world\nthis is\n"),
    "queue.csv wrong columns": lambda d: (d / "queue.csv").write_text("a,b\n1,2\n"),
    "queue.csv non-numeric": lambda d: (d / "queue.csv").write_text(
        "case,port,t_s,backlog_bytes\nc,p,zero,lots\n"),
    "ragged latency.csv": lambda d: (d / "latency.csv").write_text(
        'case,one_way_s\nc,1\n"c,2,3,4\n'),
    "metrics.csv missing": lambda d: (d / "metrics.csv").unlink(),
    "metrics.csv garbage": lambda d: (d / "metrics.csv").write_text("\x00\x01,\x02\n"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_run_directories_are_refused_in_one_line(run_dir, damage):
    DAMAGE[damage](run_dir)
    with pytest.raises(ParameterError) as err:
        render_report(run_dir)
    assert "\n" not in str(err.value)
    assert str(run_dir) in str(err.value)


def test_an_empty_csv_is_skipped(run_dir):
    (run_dir / "queue.csv").write_text("")
    assert {p.name for p in render_report(run_dir, show=False)} == {"latency_ccdf.png"}


@pytest.mark.parametrize("make", ["missing", "file", "empty dir"])
def test_not_a_run_directory(tmp_path, make):
    path = tmp_path / "x"
    if make == "file":
        path.write_text("")
    elif make == "empty dir":
        path.mkdir()
    with pytest.raises(ParameterError):
        render_report(path)


def test_markup_in_case_names_is_printed_as_text(run_dir):
    data = json.loads((run_dir / "summary.json").read_text())
    data["metrics"][0]["case"] = "[bold red"
    data["cases"] = {"[/]": {"valid": False, "reasons": ["[oops"]}}
    (run_dir / "summary.json").write_text(json.dumps(data))
    render_report(run_dir, show=True)


def test_a_copied_run_renders_the_same(run_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    assert len(render_report(copy, show=False)) == 2


def test_a_runs_notes_are_printed(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rundir, "capabilities", lambda: {})
    run = Run("synthetic", tmp_path / "run", {"scale": 1e5}, quick=True)
    run.metric("c", "latency p99", "us", 2.0, 2.1, ALPHABETA)
    run.note("c: 12 frames dropped [by full buffers]")
    run.fidelity("c", FidelityReport(True, [], 1e5))
    run.finish(show=False)
    render_report(tmp_path / "run", show=True)
    assert "note: c: 12 frames dropped [by full buffers]" in capsys.readouterr().out

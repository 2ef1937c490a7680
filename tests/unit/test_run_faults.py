"""Faults during a run that need no fabric (issue 29): a full disk and a removed run
directory each end in a one-line error saying what happened, with the cases finished
before kept and nothing half-written left behind. Synthetic cases, no kernel."""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.errors import FabricEmuError
from core.safefile import WriteError
from experiments import rundir
from experiments.fidelity import FidelityReport
from experiments.option_parsers import parse_list, parse_scale, parse_text
from experiments.options import ExperimentOptions, Option
from experiments.report import render_report
from experiments.rundir import Run
from experiments.runner import run_experiment
from model.claims import ALPHABETA

SPEC = {"cases": Option(["a", "b", "c"], "case names", parse=parse_list(parse_text)),
        "scale": Option(1e5, "S", parse=parse_scale)}


@dataclass(frozen=True)
class SpecOptions(ExperimentOptions):
    cases: list[str]
    scale: float


@pytest.fixture(autouse=True)
def no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rundir, "capabilities", lambda: {})


def sweep(fault_before: str, fault) -> object:  # noqa: ANN001
    def execute(run: Run, opts: SpecOptions) -> None:
        for case in opts.cases:
            if case == fault_before:
                fault(run)
            run.metric(case, "m", "u", 1.0, 1.0, ALPHABETA)
            run.fidelity(case, FidelityReport(True, [], opts.scale))
            run.commit(case)
    return execute


def test_a_full_disk_keeps_the_finished_cases(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    def disk_full(run: Run) -> None:
        def full(fd: int) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(os, "fsync", full)

    out = tmp_path / "run"
    with pytest.raises(WriteError) as e:
        run_experiment("s", SPEC, SpecOptions, sweep("c", disk_full), out, False, {}, show=False)
    message = str(e.value)
    assert "no space left on device" in message and "\n" not in message and len(message) < 300
    monkeypatch.undo()
    assert sorted(p.name for p in (out / "cases").iterdir()) == ["000", "001"]
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "running" and summary["cases_recorded"] == 0  # the run's start
    render_report(out, show=False)  # with space again: the files made from the records
    summary = json.loads((out / "summary.json").read_text())
    assert {m["case"] for m in summary["metrics"]} == {"a", "b"}


def test_a_removed_run_directory_is_said_and_not_made_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(FabricEmuError, match=r"run directory .* was removed while the run was "
                                             r"going; case 'b'"):
        # Once case a's record is written (by the forked writer): removed mid-write,
        # rmtree itself may fail, as it may for a user.
        run_experiment("s", SPEC, SpecOptions,
                       sweep("b", lambda run: (run.saved(), shutil.rmtree(run.dir))), out, False,
                       {}, show=False)
    assert not out.exists()

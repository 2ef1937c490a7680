"""Lab 2 graded end to end on the emulated fabric: the reference solution earns every
point, and thresholds the emulator would refuse fail the emulation checks before any
fabric is built (root: builds fabrics)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labs.catalog import find_lab
from labs.grader import grade

pytestmark = [pytest.mark.root, pytest.mark.slow]
LAB = find_lab(2)


def _grade(folder: Path, tmp_path: Path):
    g = grade(LAB, folder, out=tmp_path / "runs")
    if g.ungraded:
        pytest.skip("machine too busy: " + "; ".join(r.outcome.feedback for r in g.ungraded))
    return g


def test_the_solution_passes_on_the_fabric(tmp_path):
    work = tmp_path / "work"
    shutil.copytree(LAB.solution, work, ignore=shutil.ignore_patterns("runs", "*.json"))
    g = _grade(work, tmp_path)
    failed = [(r.id, r.outcome.feedback) for r in g.results if r.outcome.status == "failed"]
    assert not failed
    assert g.score == g.max_score
    assert (tmp_path / "runs" / "lab2_pfc.png").is_file()


def test_the_starters_thresholds_are_refused_before_a_fabric_is_built(tmp_path):
    """The starter's Xoff is the whole buffer: the student's error, in one line."""
    work = tmp_path / "work"
    shutil.copytree(LAB.starter, work, ignore=shutil.ignore_patterns("runs", "*.json"))
    g = _grade(work, tmp_path)
    emulation = [r for r in g.results if r.kind == "emulation"]
    assert emulation and all(r.outcome.status == "failed" for r in emulation)
    assert all("above buffer - headroom" in r.outcome.feedback for r in emulation)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("metrics.csv"))

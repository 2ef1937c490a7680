"""Lab 1 graded end to end on the emulated fabric: the reference solution earns every
point, and a class that never cuts fails the emulation checks (root: builds fabrics)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labs.catalog import find_lab
from labs.grader import grade

pytestmark = [pytest.mark.root, pytest.mark.slow]
LAB = find_lab(1)


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
    assert (tmp_path / "runs" / "lab1_k_sweep.png").is_file()


def test_a_class_that_never_cuts_fails_on_the_fabric(tmp_path):
    """The starter (no alpha, no cut) fills the port's buffer: far above K."""
    work = tmp_path / "work"
    shutil.copytree(LAB.starter, work, ignore=shutil.ignore_patterns("runs", "*.json"))
    g = _grade(work, tmp_path)
    queue = next(r for r in g.results if r.id == "queue-near-k")
    assert queue.outcome.status == "failed", queue.outcome.feedback
    assert "TODO" in queue.feedback()

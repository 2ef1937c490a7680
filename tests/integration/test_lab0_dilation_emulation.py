"""Lab 0 on the fabric: the reference solution's predictions lie within the stated
bands of the measured CC-off incast and ring all-reduce (root; about 15 s)."""

from __future__ import annotations

import shutil

import pytest

from labs.catalog import find_lab
from labs.grader import grade

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.all_labs]


def test_solution_passes_on_the_fabric(tmp_path):
    lab = find_lab(0)
    shutil.copy(lab.solution / lab.student_file, tmp_path / lab.student_file)
    g = grade(lab, tmp_path, emulation=True, out=tmp_path / "runs")
    failed = [(r.id, r.outcome.feedback) for r in g.results if r.outcome.status == "failed"]
    assert not failed, failed
    if g.ungraded:
        pytest.skip("; ".join(f"{r.id}: {r.outcome.feedback}" for r in g.ungraded))
    assert g.verdict == "PASSED"
    assert any("lab0_prediction_vs_measurement.png" in note for note in g.notes), g.notes

"""Lab 2 graded end to end on the emulated fabric: the reference solution earns every
point, and thresholds the emulator would refuse fail the emulation checks before any
fabric is built (root: builds fabrics)."""

from __future__ import annotations

import pytest

from labs.catalog import find_lab
from tests.conftest import assert_solution_passes_on_fabric, grade_on_fabric, skip_if_ungraded

pytestmark = [pytest.mark.root, pytest.mark.slow]
LAB = find_lab(2)


def test_the_solution_passes_on_the_fabric(tmp_path):
    assert_solution_passes_on_fabric(LAB, tmp_path, "lab2_pfc.png")


def test_the_starters_thresholds_are_refused_before_a_fabric_is_built(tmp_path):
    """The starter's Xoff is the whole buffer: the student's error, in one line."""
    g = grade_on_fabric(LAB, LAB.starter, tmp_path)
    skip_if_ungraded(g)
    emulation = [r for r in g.results if r.kind == "emulation"]
    assert emulation and all(r.outcome.status == "failed" for r in emulation)
    assert all("above buffer - headroom" in r.outcome.feedback for r in emulation)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("metrics.csv"))

"""Lab 1 graded end to end on the emulated fabric: the reference solution earns every
point, and a class that never cuts fails the emulation checks (root: builds fabrics)."""

from __future__ import annotations

import pytest

from labs.catalog import find_lab
from tests.conftest import assert_solution_passes_on_fabric, grade_on_fabric, skip_if_ungraded

pytestmark = [pytest.mark.root, pytest.mark.slow]
LAB = find_lab(1)


def test_the_solution_passes_on_the_fabric(tmp_path):
    assert_solution_passes_on_fabric(LAB, tmp_path, "lab1_k_sweep.png")


def test_a_class_that_never_cuts_fails_on_the_fabric(tmp_path):
    """The starter (no alpha, no cut) fills the port's buffer: far above K."""
    g = grade_on_fabric(LAB, LAB.starter, tmp_path)
    skip_if_ungraded(g)
    queue = next(r for r in g.results if r.id == "queue-near-k")
    assert queue.outcome.status == "failed", queue.outcome.feedback
    assert "TODO" in queue.feedback()

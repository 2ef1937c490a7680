"""Lab 4 (HPCC) on the fabric: the reference solution passes every check. A check the
machine could not measure skips the test with the gate's reasons."""

from __future__ import annotations

import pytest

from labs.catalog import find_lab
from tests.conftest import assert_solution_passes_on_fabric

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_the_solution_passes_on_the_fabric(tmp_path):
    assert_solution_passes_on_fabric(find_lab(4), tmp_path, "lab4_queue.png")

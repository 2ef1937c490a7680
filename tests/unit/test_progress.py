"""The progress tracker's estimate of the time left, on a fake clock."""

from __future__ import annotations

import pytest

from experiments.progress import Tracker, eta_s, format_eta


class _Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_eta_is_the_mean_measured_case_times_the_cases_left_less_the_current_ones_time():
    assert eta_s([], 3) is None                      # nothing measured yet: no guess
    assert eta_s([10.0, 20.0], 0) == 0.0
    assert eta_s([10.0, 20.0], 4) == pytest.approx(60.0)
    assert eta_s([10.0, 20.0], 4, current_s=5.0) == pytest.approx(55.0)
    # A current case beyond the mean is taken as about to end, never a negative guess.
    assert eta_s([10.0], 1, current_s=30.0) == pytest.approx(0.0)


def test_kept_cases_of_a_resumed_run_do_not_count_and_a_fabric_build_does():
    clock = _Clock()
    t = Tracker(5, clock=clock)
    t("kept 1")
    t("kept 2")                                      # resumed: advanced, never started
    assert (t.done, t.durations_s, t.eta_s()) == (2, [], None)
    clock.now_s += 4.0                               # the fabric is built ...
    t.start("case 3")
    assert t.current == "case 3"
    clock.now_s += 6.0                               # ... and the case measured
    t("case 3")
    assert t.durations_s == [pytest.approx(10.0)] and t.current == ""
    assert t.eta_s() == pytest.approx(20.0)          # two left at 10 s each
    t.start("case 4")
    clock.now_s += 3.0
    assert t.eta_s() == pytest.approx(17.0)


def test_format_eta():
    assert format_eta(None) == ""
    assert format_eta(44.6) == "~45 s left"
    assert format_eta(125.0) == "~2 min 05 s left"

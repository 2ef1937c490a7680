"""core.machinecpu: steal and busy shares from /proc/stat readings, and
wait_until_quiet on a made-up machine (no sleeping)."""

from __future__ import annotations

from core import machinecpu
from core.machinecpu import CpuTicks, machine_busy, wait_until_quiet


def _machine(steal_per_window: list[int], total: int = 100):
    """Readings of a machine whose hypervisor takes ``steal_per_window`` jiffies (of
    ``total``) in each successive window; and the sleeps asked for."""
    readings: list[CpuTicks] = [(0, 0, 0)]
    for stolen in steal_per_window:
        all_, idle, steal = readings[-1]
        readings.append((all_ + total, idle + total // 2, steal + stolen))
    it = iter(readings[:1] + [r for r in readings[1:] for _ in (0, 1)])
    slept: list[float] = []
    return (lambda: next(it)), slept.append, slept


def test_it_returns_at_the_first_quiet_window():
    ticks, sleep, slept = _machine([30, 25, 1, 40])
    seen = wait_until_quiet(10.0, window_s=0.5, steal_limit=0.02, ticks=ticks, sleep=sleep)
    assert seen == machinecpu.Quiet(1.5, 0.01, True)
    assert slept == [0.5, 0.5, 0.5]


def test_it_gives_up_after_its_limit_and_says_the_machine_is_still_busy():
    ticks, sleep, slept = _machine([30] * 10)
    seen = wait_until_quiet(2.0, window_s=0.5, steal_limit=0.02, ticks=ticks, sleep=sleep)
    assert seen == machinecpu.Quiet(2.0, 0.3, False)
    assert len(slept) == 4


def test_shares_of_busy_and_stolen_time():
    assert machine_busy((0, 0, 0), (200, 50, 10)) == 0.75
    assert machine_busy((5, 5, 0), (5, 5, 0)) == 0.0

"""The whole machine's CPU time, from /proc/stat: how busy it was between two readings, and
how much the hypervisor took (`wait_until_quiet` watches for a window where it took little).
The engine's fidelity checks, `emu doctor`, the shaper's rate measurement and the
experiments' second attempts read it; it knows nothing about them."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

#: (all jiffies, idle + iowait jiffies, steal jiffies) at one instant.
CpuTicks = tuple[int, int, int]


def cpu_ticks() -> CpuTicks:
    """(all jiffies, idle + iowait jiffies, steal jiffies) of the whole machine, from
    /proc/stat. Steal is time the hypervisor ran something else on our virtual CPUs."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks[:8]), ticks[3] + ticks[4], ticks[7]  # guest time is already in user


def steal_s(before: CpuTicks, after: CpuTicks) -> float:
    """CPU seconds the hypervisor took between two ``cpu_ticks`` readings."""
    return (after[2] - before[2]) / os.sysconf("SC_CLK_TCK")


def machine_busy(before: CpuTicks, after: CpuTicks) -> float:
    """Fraction of all CPU time that was busy between two ``cpu_ticks`` readings."""
    total = after[0] - before[0]
    return 1.0 - (after[1] - before[1]) / total if total > 0 else 0.0


@dataclass(frozen=True)
class Quiet:
    """What `wait_until_quiet` saw: how long it waited, and the hypervisor's share of
    the machine's CPU in its last window (``quiet``: at most the limit)."""

    waited_s: float
    steal_share: float
    quiet: bool


def wait_until_quiet(max_wait_s: float, *, window_s: float = 0.5, steal_limit: float = 0.02,
                     ticks: Callable[[], CpuTicks] = cpu_ticks,
                     sleep: Callable[[float], None] = time.sleep) -> Quiet:
    """Watch the machine in windows of ``window_s`` until the hypervisor took at most
    ``steal_limit`` of all its CPU time in one (steal comes in spells, and a stall of
    a few ms refuses a run), or ``max_wait_s`` passed."""
    waited = 0.0
    share = 0.0
    while True:
        before = ticks()
        sleep(window_s)
        after = ticks()
        waited += window_s
        total = after[0] - before[0]
        share = (after[2] - before[2]) / total if total > 0 else 0.0
        if share <= steal_limit or waited >= max_wait_s:
            return Quiet(waited, share, share <= steal_limit)

"""The whole machine's CPU time, from /proc/stat: how busy it was between two readings, and
how much the hypervisor took. The engine's fidelity checks, `emu doctor`, the shaper's
rate measurement and the labs' grader read it; it knows nothing about them."""

from __future__ import annotations

import os

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


def steal_share(before: CpuTicks, after: CpuTicks) -> float:
    """Share of all CPU time the hypervisor took between two ``cpu_ticks`` readings."""
    total = after[0] - before[0]
    return (after[2] - before[2]) / total if total > 0 else 0.0


def machine_busy(before: CpuTicks, after: CpuTicks) -> float:
    """Fraction of all CPU time that was busy between two ``cpu_ticks`` readings."""
    total = after[0] - before[0]
    return 1.0 - (after[1] - before[1]) / total if total > 0 else 0.0

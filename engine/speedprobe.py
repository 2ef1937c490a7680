"""The CPU speed probe: how much of a run the hypervisor slowed every CPU at once
without counting it as steal. engine/csrc/speed_probe.c through ctypes.

``engine.run`` runs it beside the workers; the fidelity gate judges its share where
the run lagged (``experiments.fidelity``, "hypervisor throttling"); ``emu doctor`` runs
it on the idle machine.

Why: a host that caps its VM's CPU (a quota) stops or slows every virtual CPU for
spells of tens of ms without /proc/stat's steal counting any of it. On this
project's 2-vCPU VM a spin loop found 0.7 s of 12 s so lost with 0 ms of steal, and
in one fattree,8 run a worker's passes took 6x their usual time per frame in spells of
20-50 ms while a fixed piece of work took 15-25x its best time; a fattree,4 run
refused for 12.8 ms of send lag had 8-11 % of such time, the valid runs beside it
0-1 %.

How: one thread per CPU, pinned, under SCHED_FIFO above the workers (so that their
work never delays it), times ~10 µs of arithmetic every 4 ms. A run at least
`SLOW_FACTOR` times its best time is slow over its length; a wake-up a whole period
late (the CPU held between two runs) is slow from when it was due. The kernel's own
softirqs (the fabric's forwarding) may land in one CPU's run; a hypervisor slows
every vCPU at once, so a period counts as throttled only when every CPU was slow
in it. Without SCHED_FIFO or a compiler the probe does not run, and nothing is
judged.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from core.errors import CapabilityError
from emu.cbuild import compile_c

PERIOD_NS = 4_000_000
WORK_NS = 10_000
#: A run this many times its best time is slow: the CPU ran at under 1/4 of its speed.
SLOW_FACTOR = 4
#: Above the workers' SCHED_FIFO priority (engine.worker).
PRIORITY = 2
_CAP = 1 << 16  # slow runs kept per CPU: 4 min of a wholly throttled machine


class _Probe(ctypes.Structure):
    """speed_probe.c's struct probe."""

    _fields_ = [("period_ns", ctypes.c_int64), ("iters", ctypes.c_int64),
                ("slow_ns", ctypes.c_int64), ("stop", ctypes.c_int64),
                ("runs", ctypes.c_int64), ("n_slow", ctypes.c_int64),
                ("cap", ctypes.c_int64), ("start_ns", ctypes.POINTER(ctypes.c_int64)),
                ("took_ns", ctypes.POINTER(ctypes.c_int64))]


@dataclass(frozen=True)
class SlowRun:
    """A spell ``cpu`` was not the probe's: a slow run, or a late wake-up and its run."""

    cpu: int
    start_ns: int
    took_ns: int


@dataclass(frozen=True)
class ProbeResult:
    """What the probe saw from ``t0_ns`` for ``wall_ns`` on ``cpus`` CPUs."""

    cpus: int
    period_ns: int
    t0_ns: int
    wall_ns: int
    runs: int
    slow: tuple[SlowRun, ...]

    @property
    def throttled_ns(self) -> int:
        return throttled_periods(self.slow, self.cpus, self.t0_ns, self.period_ns) * self.period_ns

    @property
    def throttled_share(self) -> float:
        """The share of the wall time during which every CPU ran at under 1/`SLOW_FACTOR`
        of its speed."""
        return min(1.0, self.throttled_ns / self.wall_ns) if self.wall_ns > 0 else 0.0


def throttled_periods(slow: tuple[SlowRun, ...] | list[SlowRun], cpus: int, t0_ns: int,
                      period_ns: int) -> int:
    """Periods (``period_ns`` long, counted from ``t0_ns``) that a slow spell of every
    one of ``cpus`` CPUs overlapped."""
    seen: dict[int, set[int]] = {}
    for run in slow:
        first = (run.start_ns - t0_ns) // period_ns
        last = (run.start_ns + run.took_ns - t0_ns) // period_ns
        for period in range(first, last + 1):
            seen.setdefault(period, set()).add(run.cpu)
    return sum(1 for got in seen.values() if len(got) >= cpus)


def source() -> Path:
    return Path(__file__).resolve().parent / "csrc" / "speed_probe.c"


class SpeedProbe:
    """``start()`` one probe thread per CPU this process may use; ``stop()`` returns
    what they saw, or None where the probe could not run (no compiler, no SCHED_FIFO):
    it may be called whatever ``start()`` answered."""

    def __init__(self, period_ns: int = PERIOD_NS, work_ns: int = WORK_NS) -> None:
        self.period_ns = period_ns
        self.work_ns = work_ns
        self._threads: list[threading.Thread] = []
        self._probes: list[_Probe] = []
        self._buffers: list[tuple[ctypes.Array, ctypes.Array]] = []
        self._failed: list[str] = []
        self._cpus: list[int] = []
        self._t0_ns = 0

    def start(self) -> bool:
        try:
            lib = ctypes.CDLL(str(compile_c(source(), "shared", what="the CPU speed probe")))
        except (CapabilityError, OSError):
            return False
        lib.probe_best.restype = ctypes.c_int64
        lib.probe_best.argtypes = [ctypes.c_int64, ctypes.c_int64]
        lib.probe_run.restype = None
        lib.probe_run.argtypes = [ctypes.POINTER(_Probe)]
        per_1000 = max(1, lib.probe_best(1000, 20))
        iters = max(100, self.work_ns * 1000 // per_1000)
        self._cpus = sorted(os.sched_getaffinity(0))
        ready = threading.Barrier(len(self._cpus) + 1)
        self._t0_ns = time.monotonic_ns()
        for cpu in self._cpus:
            starts, took = (ctypes.c_int64 * _CAP)(), (ctypes.c_int64 * _CAP)()
            probe = _Probe(period_ns=self.period_ns, iters=iters, cap=_CAP,
                           start_ns=starts, took_ns=took)
            self._probes.append(probe)
            self._buffers.append((starts, took))
            thread = threading.Thread(target=self._run, args=(lib, probe, cpu, ready),
                                      name=f"fabricemu-speed-probe-{cpu}", daemon=True)
            thread.start()
            self._threads.append(thread)
        ready.wait()
        if self._failed:
            self.stop()
            return False
        return True

    def _run(self, lib: ctypes.CDLL, probe: _Probe, cpu: int, ready: threading.Barrier) -> None:
        try:
            os.sched_setaffinity(0, {cpu})  # this thread's: Linux schedules threads
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(PRIORITY))
        except OSError as e:
            self._failed.append(f"CPU {cpu}: {e}")
            ready.wait()
            return
        probe.slow_ns = SLOW_FACTOR * lib.probe_best(probe.iters, 50)
        ready.wait()
        if not self._failed:
            lib.probe_run(ctypes.byref(probe))

    def stop(self) -> ProbeResult | None:
        wall_ns = time.monotonic_ns() - self._t0_ns
        for probe in self._probes:
            probe.stop = 1
        for thread in self._threads:
            thread.join()
        if self._failed or not self._probes:
            return None
        slow = tuple(SlowRun(cpu, starts[i], took[i])
                     for cpu, probe, (starts, took) in zip(self._cpus, self._probes,
                                                           self._buffers, strict=True)
                     for i in range(probe.n_slow))
        return ProbeResult(len(self._probes), self.period_ns, self._t0_ns, wall_ns,
                           sum(p.runs for p in self._probes), slow)

"""The parent's watchdog: a worker whose loop stops turning is stopped after STUCK_S."""

from __future__ import annotations

import signal
import subprocess
import sys
from types import SimpleNamespace

from engine import plan
from engine.run import _Watchdog


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _ticks(dog: _Watchdog, start: float, end: float) -> None:
    """Check every 50 ms of parent time from ``start`` to ``end``, as ``_collect`` does."""
    t = start
    while t < end:
        t += 0.05
        dog.check(t)


def test_a_worker_whose_turns_stop_gets_sigterm_once_and_only_then():
    idle, busy = _sleeper(), _sleeper()
    try:
        shared = SimpleNamespace(turns=[5, 7], stuck=[0, 0], status=[plan.READY, plan.READY])
        dog = _Watchdog(shared, [idle, busy], 100.0)
        half = 100.0 + plan.STUCK_S / 2
        _ticks(dog, 100.0, half)
        shared.turns[1] = 8                                 # worker 1 turned once, late
        _ticks(dog, half, 100.0 + plan.STUCK_S - 0.1)
        assert shared.stuck == [0, 0]
        _ticks(dog, 100.0 + plan.STUCK_S - 0.1, 100.0 + plan.STUCK_S + 0.2)
        assert shared.stuck == [1, 0]                       # worker 0 never turned since
        assert idle.wait(timeout=10) == -signal.SIGTERM
        _ticks(dog, 100.0 + plan.STUCK_S + 0.2, half + plan.STUCK_S + 0.2)
        assert shared.stuck == [1, 1]                       # worker 1 stopped turning too
        assert busy.wait(timeout=10) == -signal.SIGTERM
    finally:
        for p in (idle, busy):
            p.kill()
            p.wait()


def test_a_paused_machine_finished_loop_or_finished_worker_is_left_alone():
    # procs of None: a kill would raise, so the test fails if any worker is stopped.
    shared = SimpleNamespace(turns=[2, -1, 3], stuck=[0, 0, 0],
                             status=[plan.READY, plan.READY, plan.FINISHED])
    dog = _Watchdog(shared, [None, None, None], 0.0)
    dog.check(plan.STUCK_S + 5.0)             # one check after a long pause of the VM
    _ticks(dog, plan.STUCK_S + 5.0, 1.9 * plan.STUCK_S)
    assert shared.stuck == [0, 0, 0]

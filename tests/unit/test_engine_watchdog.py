"""The parent's watchdog: a worker whose loop stops turning is stopped after STUCK_S."""

from __future__ import annotations

import signal
import subprocess
import sys
from types import SimpleNamespace

from engine import plan
from engine.run import _stop_stuck


def test_a_worker_whose_turns_stop_gets_sigterm_once_and_only_then():
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    busy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        shared = SimpleNamespace(turns=[5, 7], stuck=[0, 0], status=[plan.READY, plan.READY])
        turns, turned = [5, 7], [100.0, 100.0]
        procs = [idle, busy]
        shared.turns[1] = 8                                 # worker 1 turned
        _stop_stuck(shared, procs, turns, turned, 100.0 + plan.STUCK_S - 0.1)
        assert shared.stuck == [0, 0] and turned[1] == 100.0 + plan.STUCK_S - 0.1
        _stop_stuck(shared, procs, turns, turned, 100.0 + plan.STUCK_S + 0.1)
        assert shared.stuck == [1, 0]                       # worker 0 never turned since
        assert idle.wait(timeout=10) == -signal.SIGTERM
        _stop_stuck(shared, procs, turns, turned, 100.0 + 3 * plan.STUCK_S)
        assert shared.stuck == [1, 1]                       # worker 1 stopped turning too
        assert busy.wait(timeout=10) == -signal.SIGTERM
    finally:
        for p in (idle, busy):
            p.kill()
            p.wait()


def test_a_finished_loop_or_worker_is_left_alone():
    shared = SimpleNamespace(turns=[-1, 3], stuck=[0, 0], status=[plan.READY, plan.FINISHED])
    turns, turned = [-1, 3], [0.0, 0.0]
    _stop_stuck(shared, [None, None], turns, turned, 10 * plan.STUCK_S)  # would fail on kill
    assert shared.stuck == [0, 0]

"""A worker that ends without its report: killed by a signal the engine did not send
(the run then stops with ``WorkerKilled``, naming the worker, its pid and the signal)
or exited on its own (a failed measurement, as before)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

from engine.run import WorkerKilled, _died, _killed
from engine.stats import WorkerStats

_FORK = multiprocessing.get_context("fork")


def test_a_worker_killed_by_a_signal_is_named_with_it() -> None:
    proc = _FORK.Process(target=time.sleep, args=(60,), daemon=True)
    proc.start()
    os.kill(proc.pid, signal.SIGKILL)
    report = _died(1, proc)
    assert report.killed_by == signal.SIGKILL and not report.reported
    assert report.error == "worker 1 was killed by SIGKILL"
    killed = _killed({0: WorkerStats.failed(0, "worker 0: stopped"), 1: report}, [proc, proc])
    assert isinstance(killed, WorkerKilled)
    assert str(killed) == (f"engine worker 1 (pid {proc.pid}) was killed by SIGKILL while the "
                           "traffic ran; the run stopped")


def test_a_worker_that_exits_without_a_report_fails_the_measurement_only() -> None:
    proc = _FORK.Process(target=os._exit, args=(3,), daemon=True)
    proc.start()
    report = _died(0, proc)
    assert report.killed_by is None
    assert report.error == "worker 0 exited without a report (exit code 3)"
    assert _killed({0: report}, [proc]) is None

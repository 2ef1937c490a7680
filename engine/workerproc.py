"""A forked engine worker process: its set-up, its signals, its one report.

`worker_main` is what `engine.run` forks per worker. It prepares the process (dies
with its parent, a tight timer slack, its CPU, SIGTERM as an exception), builds the
`engine.worker.Worker` (its QPs' frames first, while the parent opens the sockets it
then receives, `engine.rawsock.take_over`), moves it under the real-time scheduler,
runs it, and sends its `WorkerStats` on its pipe: the results, or what failed,
SIGTERM and a user's congestion-control class included.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import traceback
from collections.abc import Mapping
from typing import Any

from core.gcpause import collector_paused
from engine.burst import Burst
from engine.plan import FAILED, FINISHED, READY, STUCK_S, Shared, WorkerPlan
from engine.rawsock import RingSpec, take_over
from engine.rx import RxLib
from engine.stats import WorkerStats
from engine.worker import Worker, prepared_qps
from traffic.ccload import run_fault

PR_SET_PDEATHSIG = 1
PR_SET_TIMERSLACK = 29


class _Stop(Exception):
    """SIGTERM (or SIGHUP) inside a worker; its one argument is the signal."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Stop(signum)


def _setup_process(cpu: int | None) -> None:
    """Prepare a forked worker."""
    libc = ctypes.CDLL(None, use_errno=True)
    # Die with the engine process, even if it is SIGKILLed: no orphans.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The timerfd fires within ~1 us of the deadline instead of the default 50 us slack.
    libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent coordinates Ctrl-C
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGHUP, _on_sigterm)  # not the CLI's handler, inherited by the fork
    if cpu is not None:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})


def _realtime() -> bool:
    """Put the worker under the real-time scheduler; True if it is.

    The lowest real-time priority: a worker whose timer fires takes its CPU at once
    instead of waiting for the running task's slice to end (under the fair scheduler a
    runnable worker can wait milliseconds behind the engine's own sampler and kworkers,
    many frame times at any S; docs/validation.md). Workers sleep between deadlines, and
    the kernel's real-time throttling (95 % by default) keeps the machine responsive
    regardless. Only once set up: a worker building on every CPU under it would starve
    the parent opening its sockets meanwhile. Without the privilege the worker stays a
    normal task (the run says so)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        return False
    return True


def sockets_in_order(plan: WorkerPlan, rx: Mapping[str, socket.socket],
                     tx: Mapping[tuple[str, str], socket.socket]) -> list[socket.socket]:
    """The sockets a worker of ``plan`` takes over, in the order it expects them: its
    hosts' receive rings (``plan.hosts``' order), then its NICs' send sockets."""
    return [*(rx[h] for h in plan.hosts), *(tx[key] for key in _nic_keys(plan))]


def _nic_keys(plan: WorkerPlan) -> list[tuple[str, str]]:
    return [(n.host, n.ifname) for n in plan.nics]


def worker_main(plan: WorkerPlan, shared: Shared, conn: Any, sockets: socket.socket,
                ring: RingSpec, burst: Burst, rx_lib: RxLib, parent_pid: int) -> None:
    """Entry point of a forked worker: run the NIC models, send the results on ``conn``.
    Its sockets come on ``sockets`` (`engine.rawsock.hand_over`), as `sockets_in_order`
    lists them."""
    _setup_process(plan.cpu)
    w = plan.worker
    worker: Worker | None = None
    try:
        # Hundreds of thousands of long-lived objects and no garbage: the collector's
        # passes were half of a fattree,8 worker's set-up (run() freezes them).
        with collector_paused():
            # The QPs' frames first: the parent opens the sockets meanwhile.
            qps = prepared_qps(plan, burst)
            socks = take_over(sockets, len(plan.hosts) + len(plan.nics),
                              lambda: bool(shared.stop.value))
            rx_socks = dict(zip(plan.hosts, socks[:len(plan.hosts)], strict=True))
            tx_socks = dict(zip(_nic_keys(plan), socks[len(plan.hosts):], strict=True))
            worker = Worker(plan, shared, qps, rx_socks, tx_socks, ring, burst, rx_lib,
                            parent_pid)
        worker.realtime = _realtime()
        shared.status[w] = READY
        worker.run()
        conn.send(worker.results())
        shared.status[w] = FINISHED
    except BaseException as e:  # report anything, also SIGTERM, then leave
        shared.status[w] = FAILED
        shared.stop.value = 1
        with contextlib.suppress(OSError):
            for fd in shared.wake_fds:
                os.eventfd_write(fd, 1)
        reason = "terminated" if isinstance(e, _Stop) else traceback.format_exc(limit=8)
        stuck_s = STUCK_S if shared.stuck[w] else None  # the parent's watchdog stopped it
        if stuck_s is not None:
            here = [f for f in traceback.extract_tb(e.__traceback__) if f.name != "_on_sigterm"]
            reason = f"no progress for {stuck_s:g} s" + (
                f", stopped in {here[-1].name} ({here[-1].filename}, line {here[-1].lineno})"
                if here else "")
        report = WorkerStats.failed(w, f"worker {w}: {reason}", killed_by=e.args[0] if
                                    isinstance(e, _Stop) and stuck_s is None else None)
        # A plain stop (SIGTERM at the end) may find the worker in a user's class too.
        if worker is not None and isinstance(e, Exception) and (stuck_s or not isinstance(e, _Stop)):
            with contextlib.suppress(Exception):  # the report goes out whatever this does
                report.cc_fault = run_fault(plan.cc, [q.cc for q in worker.senders if q.cc], e,
                                            stuck_s)
        with contextlib.suppress(Exception):
            conn.send(report)
    finally:
        conn.close()
        sockets.close()

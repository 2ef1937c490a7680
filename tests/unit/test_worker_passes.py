"""A pass of the worker's loop over its deadlines (engine.worker.Worker._fire_due), on a
simulated clock: what is due within a turn fires, earliest first, each at the time
it is fired; a pass stops after a turn of work (the rings are read before the rest);
a timer that fired early and re-armed for the same time is waited for. And a whole
pass (``Worker._pass``) on real file descriptors: a deadline due within the batch is
slept for on the clock alone."""

from __future__ import annotations

import os
import select
import threading
import time
from types import SimpleNamespace

import pytest

from engine import worker as worker_mod
from engine.rawsock import TimerFd
from engine.sources import Source
from engine.worker import _Alarm
from traffic.pacing import Deadlines

TURN_NS = 100


class _Clock:
    def __init__(self, t_ns: int):
        self.t_ns = t_ns

    def __call__(self) -> int:
        return self.t_ns


class _Work(Source):
    """Takes ``cost_ns`` of the clock when fired; ``rearm_ns``: arms itself again there."""

    def __init__(self, name: str, clock: _Clock, log: list, deadlines: Deadlines,
                 cost_ns: int = 0, rearm_ns: int | None = None):
        self.name, self.clock, self.log, self.deadlines = name, clock, log, deadlines
        self.cost_ns, self.rearm_ns = cost_ns, rearm_ns

    def fire(self, now: int) -> None:
        self.log.append((self.name, now))
        self.clock.t_ns += self.cost_ns
        if self.rearm_ns is not None:
            self.deadlines.arm(self, self.rearm_ns)


@pytest.fixture
def rig(monkeypatch):
    clock = _Clock(1000)
    monkeypatch.setattr(worker_mod.time, "monotonic_ns", clock)
    deadlines = Deadlines()
    fake = SimpleNamespace(books=SimpleNamespace(deadlines=deadlines, turn_ns=TURN_NS),
                           wait_ns=-1)
    log: list = []

    def fire_due() -> int:
        return worker_mod.Worker._fire_due(fake, clock())  # type: ignore[arg-type]

    def work(name: str, at_ns: int, **kw) -> _Work:
        w = _Work(name, clock, log, deadlines, **kw)
        deadlines.arm(w, at_ns)
        return w

    return SimpleNamespace(clock=clock, deadlines=deadlines, fake=fake, log=log,
                           fire_due=fire_due, work=work)


def test_what_is_due_within_a_turn_fires_earliest_first_at_its_own_time(rig):
    rig.work("b", 1090, cost_ns=5)
    rig.work("a", 1020, cost_ns=5)
    rig.work("later", 1200)
    stopped = rig.fire_due()
    assert rig.log == [("a", 1000), ("b", 1005)]
    assert stopped == 1010
    assert rig.deadlines.next_ns() == 1200


def test_a_pass_stops_after_a_turn_of_work_and_leaves_the_rest_due(rig):
    for k in range(5):
        rig.work(f"nic{k}", 1000 + k, cost_ns=40)
    stopped = rig.fire_due()
    # 40 ns each: the third ends past the turn (1000 + 100); the rest wait for the next pass.
    assert [name for name, _ in rig.log] == ["nic0", "nic1", "nic2"]
    assert stopped == 1120
    assert len(rig.deadlines) == 2
    rig.fire_due()
    assert [name for name, _ in rig.log] == ["nic0", "nic1", "nic2", "nic3", "nic4"]


def test_deadlines_due_together_still_yield_to_the_rings_after_a_turn(rig):
    """Eight QPs of one worker started by one completion are due at one instant; 40 ns
    of Python each would hold the rings for a ring all-reduce's step if they fired
    as one."""
    for k in range(5):
        rig.work(f"qp{k}", 1000, cost_ns=40)
    stopped = rig.fire_due()
    assert [name for name, _ in rig.log] == ["qp0", "qp1", "qp2"]
    assert stopped == 1120 and len(rig.deadlines) == 2


def test_a_timer_that_fired_early_and_rearmed_for_the_same_time_is_waited_for(rig):
    rto = rig.work("rto", 1050, rearm_ns=1050)
    rig.fire_due()
    assert rig.log == [("rto", 1000)]
    assert rig.fake.wait_ns == 1050
    rig.fire_due()  # not again before its time
    assert rig.log == [("rto", 1000)]
    rig.clock.t_ns = 1050
    rto.rearm_ns = 2000  # on time it expires and moves on
    rig.fire_due()
    assert rig.log == [("rto", 1000), ("rto", 1050)]
    assert rig.deadlines.next_ns() == 2000


class _Logged(Source):
    """Logs when it fires; ``fd``: an eventfd it reads."""

    def __init__(self, name: str, log: list, fd: int | None = None):
        self.name, self.log, self.fd = name, log, fd

    def fire(self, now: int) -> None:
        if self.fd is not None:
            os.eventfd_read(self.fd)
        self.log.append((self.name, now))


@pytest.mark.parametrize("batched", [True, False])
def test_a_deadline_within_the_batch_is_slept_for_on_the_clock_alone(batched):
    """The Python twin of tests/unit/test_cloop.py's test of the same name: an eventfd
    that gets ready during the sleep waits for a deadline due within ``batch_ns``."""
    far_ns = 200_000_000                     # the eventfd is written 195 ms before it
    turn_ns = 1_000_000
    deadlines = Deadlines()
    fake = SimpleNamespace(books=SimpleNamespace(
        deadlines=deadlines, turn_ns=turn_ns, batch_ns=2 * far_ns if batched else turn_ns),
        wait_ns=-1, wakeups=0)
    fake._fire_due = lambda now: worker_mod.Worker._fire_due(fake, now)  # type: ignore[arg-type]
    log: list = []
    efd = os.eventfd(0, os.EFD_NONBLOCK)
    timer = TimerFd()
    ep, ep_io = select.epoll(), select.epoll()
    try:
        for e in (ep, ep_io):
            e.register(efd, select.EPOLLIN)
        ep.register(timer.fd, select.EPOLLIN)
        at = time.monotonic_ns() + far_ns
        deadlines.arm(_Logged("due", log), at)
        writer = threading.Thread(target=lambda: (time.sleep(0.005), os.eventfd_write(efd, 1)))
        writer.start()
        worker_mod.Worker._pass(fake, {efd: _Logged("fd", log, efd), timer.fd: _Alarm(timer)},  # type: ignore[arg-type]
                                timer, ep, ep_io)
        writer.join()
    finally:
        for fd in (ep, ep_io):
            fd.close()
        timer.close()
        os.close(efd)
    assert fake.wakeups == 1
    assert log[0][0] == "fd" and (log[0][1] >= at) == batched
    assert [name for name, _ in log] == (["fd", "due"] if batched else ["fd"])

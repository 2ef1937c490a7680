"""roce_loop.c's pass (engine/cloop.py) on real file descriptors, without a fabric:
what it hands back to Python, in which order, and when it sleeps."""

from __future__ import annotations

import ctypes
import os
import select
import threading
import time

import pytest

from core.errors import CapabilityError
from engine.books import NEVER_NS
from engine.cloop import LOOP_DONE, LOOP_FD, LOOP_NIC, LOOP_PY, LoopLib, _Loop
from engine.rawsock import TimerFd

TURN_NS = 1_000_000


@pytest.fixture()
def loop():
    try:
        lib = LoopLib()
    except (CapabilityError, OSError) as e:
        pytest.skip(f"no compiled loop here: {e}")
    efd = os.eventfd(0, os.EFD_NONBLOCK)
    timer = TimerFd()
    ep, ep_io = select.epoll(), select.epoll()
    ep.register(efd, select.EPOLLIN)
    ep_io.register(efd, select.EPOLLIN)
    ep.register(timer.fd, select.EPOLLIN)
    due = (ctypes.c_int64 * 1)(NEVER_NS)
    nics = (ctypes.c_void_p * 1)(None)       # a NIC Python serves (no QP sends on it)
    blocked = (ctypes.c_uint8 * 1)()
    c = _Loop(nics=nics, blocked=ctypes.addressof(blocked), due=due, n_nics=1,
              ep=ep.fileno(), ep_io=ep_io.fileno(), timer_fd=timer.fd,
              turn_ns=TURN_NS, idle_ns=1_000_000_000, batch_ns=TURN_NS, wait_ns=-1,
              py_due=NEVER_NS)

    def run(py_due: int = NEVER_NS) -> int:
        c.py_due = py_due
        return lib.loop_pass(ctypes.addressof(c))

    yield c, due, efd, run
    for fd in (ep, ep_io):
        fd.close()
    timer.close()
    os.close(efd)


def test_a_pass_hands_back_python_deadlines_before_a_nic_due_later(loop):
    c, due, _, run = loop
    now = time.monotonic_ns()
    due[0] = now
    assert run(now - 1) == LOOP_PY and c.slot == now - 1   # earliest first
    assert run() == LOOP_NIC and c.slot == 0 and due[0] == NEVER_NS
    assert run() == LOOP_DONE
    assert c.wakeups == 0


def test_a_ready_eventfd_is_handed_back_and_nothing_due_ends_the_pass(loop):
    c, _, efd, run = loop
    os.eventfd_write(efd, 1)
    assert run(time.monotonic_ns() + 10 * TURN_NS) == LOOP_FD and c.slot == efd
    os.eventfd_read(efd)
    assert run(time.monotonic_ns() + 10 * TURN_NS) == LOOP_DONE
    assert c.wakeups == 0                    # it was ready: no sleep


def test_it_sleeps_until_a_deadline_more_than_a_turn_away(loop):
    c, _, _, run = loop
    at = time.monotonic_ns() + 5 * TURN_NS
    assert run(at) == LOOP_PY and c.slot == at
    assert c.wakeups == 1
    assert time.monotonic_ns() >= at - TURN_NS  # served at most a turn early


def _write_later(fd: int, after_s: float) -> threading.Thread:
    t = threading.Thread(target=lambda: (time.sleep(after_s), os.eventfd_write(fd, 1)))
    t.start()
    return t


@pytest.mark.parametrize("batched", [True, False])
def test_a_deadline_within_the_batch_is_slept_for_on_the_clock_alone(loop, batched):
    """A file descriptor that gets ready during the sleep waits for the deadline when it
    is due within ``batch_ns``; otherwise it wakes the worker at once."""
    c, _, efd, run = loop
    far_s = 0.2                               # the eventfd is written 0.195 s before it
    c.batch_ns = 2 * int(far_s * 1e9) if batched else TURN_NS
    at = time.monotonic_ns() + int(far_s * 1e9)
    writer = _write_later(efd, 0.005)
    assert run(at) == LOOP_FD and c.wakeups == 1
    woke = time.monotonic_ns()
    writer.join()
    assert (woke >= at) == batched

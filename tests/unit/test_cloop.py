"""roce_loop.c's pass (engine/cloop.py) on real file descriptors, without a fabric:
what it hands back to Python, in which order, and when it sleeps."""

from __future__ import annotations

import ctypes
import os
import select
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
              turn_ns=TURN_NS, idle_ns=50_000_000, wait_ns=-1, py_due=NEVER_NS)

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

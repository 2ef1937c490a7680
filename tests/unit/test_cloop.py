"""roce_loop.c's pass (engine/cloop.py) on real file descriptors, without a fabric:
what it hands back to Python, in which order, and when it sleeps."""

from __future__ import annotations

import ctypes
import os
import select
import threading
import time

import pytest

from core.frame import FIRST_QPN, INT_BLOCK_BYTES
from engine.books import NEVER_NS
from engine.cloop import LOOP_CTRL, LOOP_DONE, LOOP_FD, LOOP_NIC, LOOP_PY, LoopLib
from engine.rx import EV_ACK_IN, EV_CNP_IN, EV_DONE
from tests.unit.loop_rig import TURN_NS, loop_rig


@pytest.fixture()
def loop():
    due = (ctypes.c_int64 * 1)(NEVER_NS)
    nics = (ctypes.c_void_p * 1)(None)       # a NIC Python serves (no QP sends on it)
    blocked = (ctypes.c_uint8 * 1)()
    efd = os.eventfd(0, os.EFD_NONBLOCK)
    with loop_rig(nics=nics, blocked=ctypes.addressof(blocked), due=due,
                  n_nics=1) as (lib, c, ep, ep_io):
        ep.register(efd, select.EPOLLIN)
        ep_io.register(efd, select.EPOLLIN)

        def run(py_due: int = NEVER_NS) -> int:
            c.py_due = py_due
            return lib.loop_pass(ctypes.addressof(c))

        yield c, due, efd, run
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


#: Where the kernel shows a thread asleep in epoll or on the clock (/proc/.../wchan).
_ASLEEP = ("do_epoll_wait", "ep_poll", "hrtimer_nanosleep", "do_nanosleep")


def _write_once_asleep(fd: int) -> threading.Thread:
    """Write ``fd`` once the main thread sleeps in the loop (its wchan says so), so that
    the write lands during the sleep however late the loop gets there."""
    wchan = f"/proc/self/task/{threading.main_thread().native_id}/wchan"
    try:
        with open(wchan) as f:
            f.read()
    except OSError as e:
        pytest.skip(f"cannot tell when the loop sleeps: {wchan}: {e.strerror}")

    def write() -> None:
        give_up = time.monotonic() + 10
        while time.monotonic() < give_up:
            with open(wchan) as f:
                if f.read().strip() in _ASLEEP:
                    break
            time.sleep(0.0002)
        os.eventfd_write(fd, 1)

    t = threading.Thread(target=write)
    t.start()
    return t


@pytest.mark.parametrize("batched", [True, False])
def test_a_deadline_within_the_batch_is_slept_for_on_the_clock_alone(loop, batched):
    """A file descriptor that gets ready during the sleep waits for the deadline when it
    is due within ``batch_ns``; otherwise it wakes the worker at once."""
    c, _, efd, run = loop
    far_s = 0.2                               # the eventfd is written during the sleep
    c.batch_ns = 2 * int(far_s * 1e9) if batched else TURN_NS
    at = time.monotonic_ns() + int(far_s * 1e9)
    writer = _write_once_asleep(efd)
    assert run(at) == LOOP_FD and c.wakeups == 1
    woke = time.monotonic_ns()
    writer.join()
    assert (woke >= at) == batched


# -- the control line ---------------------------------------------------------------------
_DELAY_NS = 50 * TURN_NS                      # far enough that nothing is due at once


@pytest.fixture()
def line(loop):
    """The loop with messages 0-2 sent from host 0, 0 and 1 with a reply delay, message
    3 without; a read's events as ``ctrl_hold`` sees them (``hold(events)``)."""
    from engine.rx import _RxCall, _RxEvent

    c, _, _, run = loop
    lib = LoopLib()
    delay = (ctypes.c_int64 * 4)(_DELAY_NS, 2 * _DELAY_NS, _DELAY_NS, 0)
    host = (ctypes.c_int64 * 4)(0, 0, 1, 0)
    c.ctrl_delay_ns, c.ctrl_host, c.n_msgs = delay, host, 4
    ev = (_RxEvent * 8)()
    n_ev = ctypes.c_uint32(0)
    intbuf = ctypes.create_string_buffer(8 * INT_BLOCK_BYTES)

    def hold(events: list[tuple], ring: int = 0, int_hops: dict[int, int] | None = None
             ) -> list[tuple]:
        for k, e in enumerate(events):
            ev[k] = _RxEvent(*e)
            intbuf[k * INT_BLOCK_BYTES] = (int_hops or {}).get(k, 0)
            intbuf[k * INT_BLOCK_BYTES + 1] = k   # which event's block it is
        n_ev.value = len(events)
        call = _RxCall(ev=ctypes.addressof(ev), n_ev=ctypes.addressof(n_ev),
                       intbuf=ctypes.addressof(intbuf))
        lib.ctrl_hold(ctypes.addressof(c), ring, ctypes.addressof(call))
        return [((e.rx_ns, e.kind, e.qpn, e.psn, e.arg, e.msn), intbuf.raw[k * INT_BLOCK_BYTES + 1])
                for k, e in enumerate(ev[:n_ev.value])]

    yield c, run, hold
    lib.loop_free(ctypes.addressof(c))


def test_the_line_holds_its_senders_acks_and_cnps_and_leaves_the_rest_in_order(line):
    c, _, hold = line
    q = FIRST_QPN
    kept = hold([(1, EV_DONE, q + 5, 0, 0, 0),
                 (2, EV_ACK_IN, q + 0, 7, 0, 1),       # held
                 (3, EV_ACK_IN, q + 2, 7, 0, 1),       # message 2 is host 1's: not this ring's
                 (4, EV_CNP_IN, q + 1, 0, 0, 0),       # held
                 (5, EV_ACK_IN, q + 3, 7, 0, 1),       # no delay: Python acts at once
                 (6, EV_ACK_IN, q + 1, 9, 0, 2),       # echoes INT: Python's
                 (7, EV_ACK_IN, q + 9, 7, 0, 1)],      # not a message of the run
                int_hops={5: 2})
    assert [e[0][0] for e in kept] == [1, 3, 5, 6, 7]
    assert [e[1] for e in kept] == [0, 2, 4, 5, 6]     # each INT block moved with its event
    assert c.heap_n == 2


def test_held_replies_come_back_when_due_in_release_then_arrival_order(line):
    c, run, hold = line
    now = time.monotonic_ns()
    q = FIRST_QPN
    # message 1's delay is twice message 0's: its ACK arrives first, released last
    hold([(now - 2 * _DELAY_NS + 10, EV_ACK_IN, q + 1, 4, 0x100, 3),
          (now - _DELAY_NS, EV_ACK_IN, q + 0, 8, 0, 9),
          (now - _DELAY_NS, EV_CNP_IN, q + 0, 8, 0, 0),
          (now + _DELAY_NS, EV_ACK_IN, q + 0, 9, 0, 10)])
    got = []
    while (answer := run()) == LOOP_CTRL:
        h = c.ctrl
        got.append((h.msg, h.kind, h.psn, h.arg, h.msn, h.release_ns - now))
    assert answer == LOOP_DONE
    assert got == [(0, EV_ACK_IN, 8, 0, 9, 0), (0, EV_CNP_IN, 8, 0, 0, 0),
                   (1, EV_ACK_IN, 4, 0x100, 3, 10)]
    assert c.heap_n == 1
    at = time.monotonic_ns()
    assert run() == LOOP_CTRL and c.ctrl.psn == 9  # it sleeps until the last is due
    assert c.wakeups >= 1 and time.monotonic_ns() >= now + 2 * _DELAY_NS - TURN_NS > at


def test_the_line_grows_past_its_first_room(line):
    c, run, hold = line
    now = time.monotonic_ns() - 10 * _DELAY_NS
    for batch in range(100):
        hold([(now + 8 * batch + k, EV_ACK_IN, FIRST_QPN, 8 * batch + k, 0, 0)
              for k in range(8)])
    assert c.heap_n == 800
    psns = []
    while c.heap_n:  # a pass ends after a turn (LOOP_DONE): the next goes on
        if run() == LOOP_CTRL:
            psns.append(c.ctrl.psn)
    assert psns == list(range(800))

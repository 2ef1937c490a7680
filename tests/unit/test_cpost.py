"""Posting in the compiled loop (roce_loop.c's struct posts, engine/cpost.py), without a
fabric: dependency counters, post times, the starts C makes and those it leaves to
Python, a ring read's completions (engine.requester.Posting is the Python twin), and
the ACKs and retransmission timer of the QPs C starts (Requester.on_ack, on_due)."""

from __future__ import annotations

import ctypes
import math
import os
import time

import pytest

from core.frame import FIRST_QPN
from engine.books import NEVER_NS
from engine.cloop import LOOP_DONE, LOOP_DRAIN, LOOP_NIC, LOOP_START
from engine.cpost import _PostQp, _Posts
from engine.rx import EV_ACK_IN, EV_ANNOUNCE, EV_DONE, _RxCall, _RxEvent
from engine.tx import TxCall, TxNic, TxQp
from tests.unit.loop_rig import TURN_NS, loop_rig
from traffic.gbn import PSN_MASK

OVERHEAD_NS = 7_000
GAP_NS = 300_000
I64 = ctypes.c_int64

# Sender slots: 0 sends message 2 after messages 0 and 1 (C starts it); 1 sends
# message 3 after message 0 (Python starts it); 2 sends message 4, no dependency.
# Another worker waits for message 0 too.
_MSG = (2, 3, 4)
_KIDS = {0: [0, 1], 1: [0]}


@pytest.fixture()
def posting():
    keep: list = []                            # every array C points into

    def arr(ctype, values):
        a = (ctype * len(values))(*values)
        keep.append(a)
        return a

    qps = (TxQp * 3)()
    for q in qps:
        q.idle = 1
    active = arr(ctypes.c_int32, [0, 0, 0])
    nic = TxNic(line_due=NEVER_NS)
    nic.active = ctypes.cast(active, ctypes.POINTER(ctypes.c_int32))
    call = TxCall(qps=ctypes.cast(qps, ctypes.POINTER(TxQp)))
    due = arr(I64, [NEVER_NS])
    blocked = arr(ctypes.c_uint8, [1])         # Python serves the NIC: LOOP_NIC when due
    fields = dict(tx=ctypes.addressof(call), nics=arr(ctypes.c_void_p, [ctypes.addressof(nic)]),
                  blocked=ctypes.addressof(blocked), due=due, n_nics=1,
                  ctrl_delay_ns=arr(I64, [0] * 5), ctrl_host=arr(I64, [0] * 5), n_msgs=5)
    with loop_rig(**fields) as (lib, c, _, _):
        post_qps = (_PostQp * 3)(*[_PostQp(post_ns=-1, deps=sum(s in k for k in _KIDS.values()),
                                           msg=m, gap_ns=GAP_NS if s == 0 else 0, by_c=s == 0)
                                   for s, m in enumerate(_MSG)])
        kids_at = [0]
        for m in range(5):
            kids_at.append(kids_at[-1] + len(_KIDS.get(m, [])))
        received = arr(ctypes.c_int8, [0] * 5)
        started = arr(I64, [0] * 6)
        wake_fd = os.eventfd(0, os.EFD_NONBLOCK)
        c.t0_ns = time.monotonic_ns() - 10**9
        posts = _Posts(qp=post_qps, sender=arr(ctypes.c_int32, [-1, -1, 0, 1, 2]),
                       kids_at=arr(I64, kids_at),
                       kids=arr(ctypes.c_int32, [s for m in range(5) for s in _KIDS.get(m, [])]),
                       remote=arr(ctypes.c_uint8, [1, 0, 0, 0, 0]),
                       received=ctypes.addressof(received), done=arr(ctypes.c_uint8, [0] * 5),
                       overhead_ns=OVERHEAD_NS, trace_ns=TURN_NS, started=started,
                       started_cap=len(started), scale_ns=1e9, acked=arr(I64, [0, 0]), worker=1,
                       n_senders=1, wake_fds=arr(ctypes.c_int32, [wake_fd]), n_workers=1,
                       started_trace=arr(ctypes.c_double, [0.0] * 9))
        for p in post_qps:
            p.acked_ns, p.rto_ns = -1, NEVER_NS
        c.posts = ctypes.addressof(posts)
        addr = ctypes.addressof(c)
        yield lib, addr, c, qps, nic, post_qps, posts, received
        lib.loop_free(addr)
        os.close(wake_fd)


def test_a_message_is_posted_at_its_last_dependency_and_started_by_c_or_python(posting):
    lib, addr, c, qps, nic, post_qps, posts, _ = posting
    now = time.monotonic_ns()
    assert lib.post_done(addr, 0, now - 3 * TURN_NS) == 0
    assert lib.post_done(addr, 0, now) == 0    # counted once, as DepCounter does
    assert c.heap_n == 1 and post_qps[1].post_ns == now - 3 * TURN_NS
    assert post_qps[0].post_ns == -1 and post_qps[0].deps == 1   # waits for message 1
    assert lib.post_done(addr, 1, now - 2 * TURN_NS) == 0
    assert post_qps[0].post_ns == now - 2 * TURN_NS + GAP_NS       # plus its compute gap

    assert lib.loop_pass(addr) == LOOP_START and c.slot == 3       # Python's, due first
    assert lib.loop_pass(addr) == LOOP_NIC                          # C started message 2
    t_start = posts.started[1]
    assert (posts.n_started, posts.started[0]) == (2, 0)
    assert math.isnan(posts.started_trace[0])  # no C twin: Python reads its algorithm
    assert now <= t_start <= time.monotonic_ns()
    assert qps[0].idle == 0 and qps[0].next_trace_ns == t_start + TURN_NS
    assert qps[0].sched.next_ns == post_qps[0].post_ns + OVERHEAD_NS
    assert nic.sched.next_ns == post_qps[0].post_ns + OVERHEAD_NS  # the NIC was idle
    assert (nic.n_active, nic.active[0]) == (1, 0)
    assert lib.loop_pass(addr) == LOOP_DONE
    # Nothing due: before it sleeps, Python keeps the books of the start.
    assert lib.loop_pass(addr) == LOOP_DRAIN and c.wakeups == 0


def test_a_post_waits_for_its_own_start_time_on_its_nic_s_clock(posting):
    lib, addr, c, qps, nic, post_qps, posts, _ = posting
    now = time.monotonic_ns()
    fwd = 3 * TURN_NS
    post_qps[0].fwd_ns = nic.fwd_ns = fwd
    post_qps[0].earliest_ns = now + 2 * TURN_NS     # later than its dependencies' end
    lib.post_done(addr, 1, now - 10 * TURN_NS)
    posts.qp[1].deps = 5                            # message 3 is not this test's
    lib.post_done(addr, 0, now - 10 * TURN_NS)
    assert post_qps[0].post_ns == now + 2 * TURN_NS
    assert lib.loop_pass(addr) == LOOP_NIC          # slept until it was due
    t_start = posts.started[1]
    assert t_start >= now + 2 * TURN_NS - TURN_NS   # at most a turn early, NIC time
    # The NIC was armed at the start on the wall clock, and served then (its slot).
    assert c.slot == 0 and c.now >= t_start + fwd - TURN_NS


def test_a_read_s_completions_post_in_c_and_stay_only_to_be_announced(posting):
    lib, addr, c, qps, nic, post_qps, posts, received = posting
    ev = (_RxEvent * 4)()
    n_ev = ctypes.c_uint32(0)
    events = [(5, EV_DONE, FIRST_QPN + 1, 0, 0, 0),   # only this worker waits for it
              (6, EV_ACK_IN, FIRST_QPN + 4, 9, 0, 1),  # no delay: Python's
              (7, EV_DONE, FIRST_QPN + 0, 0, 0, 0)]    # another worker waits for it too
    for k, e in enumerate(events):
        ev[k] = _RxEvent(*e)
    n_ev.value = len(events)
    call = _RxCall(ev=ctypes.addressof(ev), n_ev=ctypes.addressof(n_ev))
    assert lib.ctrl_hold(addr, 0, ctypes.addressof(call)) == 0
    assert [(e.rx_ns, e.kind, e.qpn - FIRST_QPN) for e in ev[:n_ev.value]] == [
        (6, EV_ACK_IN, 4), (7, EV_ANNOUNCE, 0)]
    assert list(received) == [1, 1, 0, 0, 0]
    assert post_qps[0].post_ns == 7 + GAP_NS and post_qps[1].post_ns == 7
    assert c.heap_n == 2


_START_PSN = PSN_MASK - 1                       # its PSNs wrap around


def _sent(qps, post_qps, total: int, sent: int, timer_start_s: float) -> None:
    """Sender slot 0 started and sent ``sent`` of its ``total`` frames; idle since."""
    g = qps[0].gbn
    g.total_packets, g.window, g.timeout_s, g.start_psn = total, 64, 2e-3, _START_PSN
    g._nxt = g._max_sent = sent
    g._timer_start_raw = timer_start_s
    post_qps[0].started = 1


def _ack(lib, addr, c, kind_arg: list[tuple[int, int]], base_ns: int | None = None
         ) -> list[tuple[int, int]]:
    """ACKs of message 2 (slot 0) in one ring read, (PSN index, arg) each, arrived a ms
    apart after ``base_ns`` (default: t0); what stays."""
    base_ns = c.t0_ns if base_ns is None else base_ns
    ev = (_RxEvent * 4)()
    n_ev = ctypes.c_uint32(len(kind_arg))
    for k, (index, arg) in enumerate(kind_arg):
        ev[k] = _RxEvent(base_ns + 10**6 * (k + 1), EV_ACK_IN,
                         FIRST_QPN + 2, (_START_PSN + index) & PSN_MASK, arg, 1)
    call = _RxCall(ev=ctypes.addressof(ev), n_ev=ctypes.addressof(n_ev))
    assert lib.ctrl_hold(addr, 0, ctypes.addressof(call)) == 0
    return [((e.psn - _START_PSN) & PSN_MASK, e.arg) for e in ev[:n_ev.value]]


def test_c_acts_on_the_acks_of_a_qp_it_started_and_counts_it_acknowledged(posting):
    lib, addr, c, qps, nic, post_qps, posts, _ = posting
    _sent(qps, post_qps, total=3, sent=3, timer_start_s=0.0)
    # An ECN echo (a trace row) and a NAK are Python's; the cumulative ACKs are C's.
    assert _ack(lib, addr, c, [(0, 0x100), (1, 0x60), (0, 0), (2, 0)]) == [(0, 0x100), (1, 0x60)]
    g = qps[0].gbn
    assert (g._una, g.acks, g.stale_acks) == (3, 2, 0) and math.isnan(g._timer_start_raw)
    assert post_qps[0].acked_ns == c.t0_ns + 4 * 10**6   # the last ACK's arrival
    assert posts.acked_here == 1 and posts.acked[1] == 1
    assert os.eventfd_read(posts.wake_fds[0]) == 1        # all of this worker's: told
    assert _ack(lib, addr, c, [(2, 0)]) == [] and g.stale_acks == 1   # a late copy


def test_an_ack_that_opens_the_window_wakes_the_qp_and_its_timer_goes_back(posting):
    lib, addr, c, qps, nic, post_qps, posts, _ = posting
    now_s = (time.monotonic_ns() - c.t0_ns) / 1e9
    _sent(qps, post_qps, total=4, sent=2, timer_start_s=now_s)
    assert _ack(lib, addr, c, [(0, 0)]) == []            # window-held, it has frames left
    assert qps[0].idle == 0 and (nic.n_active, nic.active[0]) == (1, 0)
    assert post_qps[0].rto_ns == NEVER_NS
    # All sent now, idle again: the next ACK arms the timer (2 ms after it).
    qps[0].idle, nic.n_active, c.due[0] = 1, 0, NEVER_NS
    qps[0].gbn._nxt = qps[0].gbn._max_sent = 4
    assert _ack(lib, addr, c, [(1, 0)], base_ns=time.monotonic_ns()) == []
    armed = post_qps[0].rto_ns
    assert armed == c.t0_ns + int((qps[0].gbn._timer_start_raw + 2e-3) * 1e9)
    assert lib.loop_pass(addr) == LOOP_NIC                # slept until then, went back
    assert time.monotonic_ns() >= armed - TURN_NS
    g = qps[0].gbn
    assert (g.timeouts, g._nxt, g._una) == (1, 2, 2) and qps[0].idle == 0

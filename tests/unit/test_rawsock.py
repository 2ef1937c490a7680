"""Engine plumbing that needs no root: the timerfd and the header-only ring geometry."""

from __future__ import annotations

import select
import time

from engine.rawsock import (
    SNAP_BYTES,
    RingSpec,
    TimerFd,
    _bpf_program,
    slot_offsets,
    wakeup_cpu_us,
)


def test_timerfd_fires_at_its_absolute_deadline_and_not_before():
    timer = TimerFd()
    ep = select.epoll()
    try:
        ep.register(timer.fd, select.EPOLLIN)
        deadline = time.monotonic_ns() + 3_000_000
        timer.arm(deadline)
        events = ep.poll(5.0)
        assert time.monotonic_ns() >= deadline
        assert [fd for fd, _ in events] == [timer.fd]
        timer.clear()
        assert ep.poll(0) == []                       # consumed: no longer readable
        timer.arm(time.monotonic_ns() - 1)            # a past deadline fires at once
        assert [fd for fd, _ in ep.poll(5.0)] == [timer.fd]
        timer.fired()                                 # not read: re-arming resets it
        deadline = time.monotonic_ns() + 3_000_000
        timer.arm(deadline)
        assert ep.poll(0) == []
        assert [fd for fd, _ in ep.poll(5.0)] == [timer.fd]
        assert time.monotonic_ns() >= deadline
    finally:
        ep.close()
        timer.close()


def test_the_wakeup_price_sleeps_every_cycle_and_counts_only_cpu():
    wall0, cpu0 = time.monotonic(), time.process_time()
    price_us = wakeup_cpu_us(sleep_s=2e-3, cycles=5)
    wall_s, cpu_s = time.monotonic() - wall0, time.process_time() - cpu0
    assert wall_s >= 5 * 2e-3                          # it really slept to each deadline
    assert 0 < price_us <= cpu_s / 5 * 1e6 + 1         # the CPU of a cycle, not its wall time
    assert price_us < 2e3                              # far below the 2 ms each cycle slept


def test_ring_slots_hold_headers_only_and_the_filter_snaps_them():
    ring = RingSpec.for_headers(4 << 20)
    # tpacket2 header + sockaddr_ll + alignment put the MAC header at offset 66.
    assert ring.frame_size >= 66 + SNAP_BYTES and ring.frame_size % 16 == 0
    assert ring.frame_nr >= 16_000                     # ~20k frames in 4 MB, not ~1000
    offsets = slot_offsets(ring)
    assert len(offsets) == ring.frame_nr and len(set(offsets)) == ring.frame_nr
    assert max(offsets) + ring.frame_size <= ring.size_bytes
    accept = _bpf_program(SNAP_BYTES)[-1]
    assert accept[0] == 0x06 and accept[3] == SNAP_BYTES  # BPF_RET k: the snap length


def test_sockets_handed_over_arrive_in_order_also_past_one_message():
    """SCM_RIGHTS carries at most 253 descriptors a message: 300 go in two."""
    import socket

    from engine.rawsock import hand_over, take_over
    give, take = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sent = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(300)]
    try:
        for k, s in enumerate(sent):
            s.bind(("127.0.0.1", 0))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096 + 64 * k)
        hand_over(give, sent)
        got = take_over(take, len(sent), lambda: False)
        assert [g.getsockname() for g in got] == [s.getsockname() for s in sent]
        assert [g.fileno() not in {s.fileno() for s in sent} for g in got] == [True] * 300
        for g in got:
            g.close()
    finally:
        for s in [*sent, give, take]:
            s.close()


def test_taking_over_sockets_ends_when_the_engine_stops_or_hangs_up():
    import socket

    import pytest

    from engine.rawsock import take_over
    give, take = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        began = time.monotonic()
        with pytest.raises(ConnectionAbortedError, match="stopped"):
            take_over(take, 2, lambda: time.monotonic() - began > 0.1)
        give.close()
        with pytest.raises(ConnectionAbortedError, match="closed"):
            take_over(take, 2, lambda: False)
    finally:
        give.close()
        take.close()

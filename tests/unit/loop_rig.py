"""roce_loop.c's pass without a fabric: a compiled loop's argument block on its own
timerfd and epolls, for test_cloop, test_cpost and test_tx_line."""

from __future__ import annotations

import contextlib
import select
from collections.abc import Iterator
from typing import Any

import pytest

from core.errors import CapabilityError
from engine.books import NEVER_NS
from engine.cloop import LoopLib, _Loop
from engine.rawsock import TimerFd

TURN_NS = 1_000_000


@contextlib.contextmanager
def loop_rig(**fields: Any) -> Iterator[tuple[LoopLib, _Loop, select.epoll, select.epoll]]:
    """The loop library and a ``_Loop`` with ``fields`` (by default a turn and a batch of
    ``TURN_NS``, nothing due, a second's idle sleep at most), its epolls (the timerfd in
    the sleeping one) closed afterwards; skips where roce_loop.c cannot be built."""
    try:
        lib = LoopLib()
    except (CapabilityError, OSError) as e:
        pytest.skip(f"no compiled loop here: {e}")
    timer = TimerFd()
    ep, ep_io = select.epoll(), select.epoll()
    ep.register(timer.fd, select.EPOLLIN)
    settings = {"turn_ns": TURN_NS, "batch_ns": TURN_NS, "idle_ns": 1_000_000_000,
                "wait_ns": -1, "py_due": NEVER_NS, **fields}
    try:
        yield lib, _Loop(ep=ep.fileno(), ep_io=ep_io.fileno(), timer_fd=timer.fd,
                         **settings), ep, ep_io
    finally:
        ep.close()
        ep_io.close()
        timer.close()

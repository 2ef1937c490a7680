"""A simulated clock that drives one congestion-control object with scripted events.

The algorithm checks of a lab use it instead of a fabric: no root, no timing noise,
the same verdict on every machine. Time is real-fabric seconds, as in the engine,
and the object sees exactly the engine's calls (docs/congestion-control.md)::

    h = Harness(LabDctcp(100e9), call=code.call)
    h.ack(4096, rtt_s=10e-6, ecn_echo=True, dt_s=1e-6)   # 1 us later, a marked ACK
    h.advance(60e-6)                                      # fires on_timer when due
    h.read().window_bytes

After every event it reads back ``rate_bps``, ``window_bytes`` and ``next_timer_s``
and checks them as the engine does (a rate must be positive and finite), so that a
NaN or a zero rate is reported at the event that produced it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import FabricEmuError

__all__ = ["Harness", "HarnessError", "Readback"]

#: Timer firings one ``advance`` may take before the algorithm is said to loop.
MAX_TIMERS = 100_000


class HarnessError(FabricEmuError):
    """The algorithm read back a value the engine would refuse, or its timer never moves."""


@dataclass(frozen=True)
class Readback:
    rate_bps: float
    window_bytes: float | None
    next_timer_s: float


def _direct(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class Harness:
    """One QP's algorithm ``cc`` on a clock that starts at ``now_s``.

    ``call(what, fn, *args)`` makes every call into the algorithm (a
    ``labs.student.StudentCode.call`` turns the student's exceptions into one line).
    ``history`` keeps ``(time, event, readback)`` for every event.
    """

    def __init__(self, cc: object, now_s: float = 0.0,
                 call: Callable[..., Any] = _direct):
        self.cc = cc
        self.now_s = float(now_s)
        self._call = call
        self.history: list[tuple[float, str, Readback]] = []
        self.timers_fired = 0
        self.read("the constructor")

    # ------------------------------------------------------------------ read back
    def read(self, after: str = "now") -> Readback:
        """The values the engine would pace with, checked as the engine checks them."""
        cc = self.cc
        rate = getattr(cc, "rate_bps", None)
        window = getattr(cc, "window_bytes", None)
        timer = getattr(cc, "next_timer_s", math.inf)
        if isinstance(rate, bool) or not isinstance(rate, int | float) \
                or not 0 < rate < math.inf:
            raise HarnessError(f"rate_bps after {after} is {rate!r}: it must be a positive, "
                               "finite number of bit/s")
        if window is not None and (isinstance(window, bool) or not isinstance(window, int | float)
                                   or not 0 <= window < math.inf):
            raise HarnessError(f"window_bytes after {after} is {window!r}: it must be None "
                               "or a finite number of bytes >= 0")
        if isinstance(timer, bool) or not isinstance(timer, int | float) or math.isnan(timer):
            raise HarnessError(f"next_timer_s after {after} is {timer!r}: it must be a time "
                               "in seconds, or math.inf")
        return Readback(float(rate), None if window is None else float(window), float(timer))

    def _event(self, name: str, *args: Any) -> Readback:
        fn = getattr(self.cc, name, None)
        if not callable(fn):
            raise HarnessError(f"the class has no method {name}: derive it from "
                               "traffic.cc.CongestionControl, or write one")
        self._call(f"{name} at t = {self.now_s * 1e6:.3f} us", fn, *args)
        rb = self.read(name)
        self.history.append((self.now_s, name, rb))
        return rb

    # ------------------------------------------------------------------ the clock
    def advance(self, dt_s: float) -> Readback:
        """Move the clock ``dt_s`` on, calling ``on_timer`` at every due ``next_timer_s``
        on the way (at the timer's own time, as the engine does)."""
        if dt_s < 0:
            raise ValueError("the clock never goes backwards")
        end_s = self.now_s + dt_s
        fired = 0
        while True:
            due = self.read("the last event").next_timer_s
            if due > end_s:
                break
            fired += 1
            if fired > MAX_TIMERS:
                raise HarnessError(f"on_timer fired {MAX_TIMERS} times within {dt_s * 1e6:g} us: "
                                   "does next_timer_s move forward after each timer?")
            self.now_s = max(self.now_s, due)
            self._event("on_timer", self.now_s)
        self.timers_fired += fired
        self.now_s = end_s
        return self.read("the last event")

    # ------------------------------------------------------------------ events
    def send(self, n_bytes: int, dt_s: float = 0.0) -> Readback:
        self.advance(dt_s)
        return self._event("on_send", n_bytes, self.now_s)

    def ack(self, bytes_acked: int, rtt_s: float, ecn_echo: bool = False,
            int_records: Sequence[object] = (), dt_s: float = 0.0) -> Readback:
        self.advance(dt_s)
        return self._event("on_ack", bytes_acked, rtt_s, ecn_echo, tuple(int_records),
                           self.now_s)

    def cnp(self, dt_s: float = 0.0) -> Readback:
        self.advance(dt_s)
        return self._event("on_cnp", self.now_s)

"""Lab 3's algorithm checks' instrument: the student's class on the harness's simulated clock
with its ``trace()`` read after every event, the paper's parameters for this fabric's
100G NICs, and the step arithmetic the checks share (exact to ``REL``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from labs.grader import CheckContext
from labs.harness import Harness, HarnessError
from labs.verdict import Outcome, fail

LINE_BPS = 100e9
G = 1 / 256
PERIOD_S = 55e-6                 # K, and the rate-increase timer
BYTE_COUNTER_BYTES = 10 * 1024 * 1024
F = 5
R_AI_BPS = LINE_BPS / 1000
R_HAI_BPS = LINE_BPS / 200
MIN_RATE_BPS = 1e6
CNP_GAP_S = 50e-6                # the notification point's CNP interval
REL = 1e-9                       # "exact" arithmetic, for floating-point rounding


@dataclass(frozen=True)
class Point:
    """The student's (R_C, R_T, alpha) right after one event."""

    t_s: float
    event: str
    rc: float
    rt: float
    alpha: float


class Recorder:
    """The student's class on the harness, with its trace() read after every event
    (timers included), so that each rate-increase event can be checked on its own."""

    def __init__(self, ctx: CheckContext, line_rate_bps: float = LINE_BPS):
        self.ctx = ctx
        self.points: list[Point] = []
        self.h = Harness(ctx.new_cc(line_rate_bps, 0.0), 0.0, call=self._call)
        self.points.append(Point(0.0, "start", *self.state()))

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        out = self.ctx.code.call(what, fn, *args)
        self.points.append(Point(float(args[-1]), what.split()[0], *self.state()))
        return out

    def state(self) -> tuple[float, float, float]:
        """(R_C, R_T, alpha) from trace(); R_C must be the rate the engine paces with."""
        cc = self.h.cc
        values = self.ctx.code.call("trace()", cc.trace)
        try:
            rc, rt, alpha = (float(v) for v in values)
        except (TypeError, ValueError):
            raise HarnessError(f"trace() returned {values!r}: it must return three numbers, "
                               "(rate_bps, target_rate_bps, alpha)") from None
        rate = float(cc.rate_bps)
        if not close(rc, rate, 1e-12):
            raise HarnessError(f"trace()[0] is {rc:.6g} but rate_bps is {rate:.6g}: trace() "
                               "must return (rate_bps, target_rate_bps, alpha)")
        if not all(math.isfinite(v) for v in (rt, alpha)):
            raise HarnessError(f"trace() returned a target rate {rt!r} and alpha {alpha!r}: "
                               "both must be finite numbers")
        return rc, rt, alpha

    def now(self) -> Point:
        return self.points[-1]

    def cnp(self, dt_s: float = 0.0) -> Point:
        self.h.cnp(dt_s)
        return self.now()

    def advance(self, dt_s: float) -> Point:
        self.h.advance(dt_s)
        self.points.append(Point(self.h.now_s, "advance", *self.state()))
        return self.now()

    def send(self, n_bytes: int, dt_s: float = 0.0) -> Point:
        self.h.send(n_bytes, dt_s)
        return self.now()

    def changes(self, since: int) -> list[tuple[Point, Point]]:
        """(before, after) of every event after ``points[since]`` that moved R_C or R_T."""
        out = []
        for before, after in zip(self.points[since:], self.points[since + 1:], strict=False):
            if not (close(before.rc, after.rc, 1e-13) and close(before.rt, after.rt, 1e-13)):
                out.append((before, after))
        return out


def close(a: float, b: float, rel: float = REL) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def gbps(value: float) -> str:
    """A rate in Gb/s for feedback."""
    return f"{value / 1e9:.6g} Gb/s"


def two_cuts(ctx: CheckContext) -> tuple[Recorder, int, Point]:
    """A CNP at 1 us, another at 2 us: R_T falls below the line rate, so the increases
    that follow are visible. Returns the recorder, the index of the second cut's point
    and that point."""
    r = Recorder(ctx)
    r.cnp(1e-6)
    p = r.cnp(1e-6)
    return r, len(r.points) - 1, p


def need_gap(p: Point) -> Outcome | None:
    if not p.rc < p.rt * (1 - 1e-6) or not p.rt < LINE_BPS * (1 - 1e-6):
        return fail(f"after two CNPs R_C = {gbps(p.rc)} and R_T = {gbps(p.rt)}: the cut (TODO 1) "
                    "must leave R_C below R_T (and R_T <- R_C below the line rate) before "
                    "the rate can recover")
    return None


def decays(a_from: float, a_to: float) -> float:
    """How many factors (1 - g) take alpha from ``a_from`` to ``a_to`` (a real number)."""
    if a_from <= 0 or a_to <= 0:
        return math.nan
    return math.log(a_to / a_from) / math.log(1 - G)


def whole_decays(r: Recorder, a_from: float, periods: int, what: str) -> tuple[int, str | None]:
    """alpha after ``periods`` and a half alpha periods without a CNP must be
    a_from (1 - g)^n with a whole n of periods, one more or fewer for the timer's phase."""
    a_to = r.now().alpha
    n = decays(a_from, a_to)
    text = (f"{what}: alpha went from {a_from:.8f} to {a_to:.8f} in {periods + 0.5:g} alpha "
            f"periods of {PERIOD_S * 1e6:g} us without a CNP")
    if not math.isfinite(n) or abs(n - round(n)) > 1e-6 * max(1.0, abs(n)):
        return 0, (f"{text}; that is not alpha (1 - g)^n for a whole number n of periods "
                   f"(g = 1/256)")
    n = round(n)
    if n == 0:
        return n, (f"{text}: it never decayed; once per period K = 55 us without a CNP, "
                   "alpha <- (1 - g) alpha (is the timer's period in seconds, 55e-6?)")
    if not periods - 1 <= n <= periods + 1:
        return n, (f"{text}, i.e. {n} decays by (1 - g); once per period gives {periods} "
                   f"(one more or fewer for the timer's phase)"
                   + (" (is the period in seconds, 55e-6?)" if n > periods + 1 else ""))
    return n, None


def check_additive(steps: Sequence[tuple[Point, Point]], first: int, what: str) -> str | None:
    for k, (b, a) in enumerate(steps, first):
        want_rt = min(LINE_BPS, b.rt + R_AI_BPS)
        want_rc = (want_rt + b.rc) / 2
        text = (f"increase event {k} after the cut ({what}, t = {a.t_s * 1e6:.1f} us): "
                f"R_T {gbps(b.rt)} -> {gbps(a.rt)}, R_C {gbps(b.rc)} -> {gbps(a.rc)}")
        if not close(a.rt, want_rt):
            hint = ""
            if close(a.rt, b.rt):
                hint = " (R_T did not grow: still fast recovery?)"
            elif abs((a.rt - b.rt) / R_HAI_BPS - round((a.rt - b.rt) / R_HAI_BPS)) < 1e-6:
                hint = " (a hyper step: hyper increase needs both T and BC to reach F)"
            return fail(f"{text}; additive increase: R_T + R_AI = {gbps(want_rt)} "
                        f"(R_AI = {R_AI_BPS / 1e6:g} Mb/s){hint}")
        if not close(a.rc, want_rc):
            hint = (" (averaged with the old R_T: add R_AI to R_T first)"
                    if close(a.rc, (b.rt + b.rc) / 2) else "")
            return fail(f"{text}; then R_C <- (R_T + R_C) / 2 = {gbps(want_rc)}{hint}")
    return None

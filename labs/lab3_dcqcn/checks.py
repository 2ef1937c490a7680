"""Lab 3's checks: DCQCN's reaction point on a simulated clock (the cut, alpha, fast
recovery, additive and hyper increase, the clamps, the timers' units), then the
student's class on the fabric beside the built-in DCQCN (fairness and incast).

Every expected value is the SIGCOMM 2015 definition applied to the values the
student's class reports through ``trace()`` = (R_C, R_T, alpha) just before the
event: the arithmetic must be exact (to 1e-9), while the bookkeeping the paper
leaves open is accepted either way (a timer that runs freely rather than restarting
at each CNP, the cut with alpha before or after its update, a hyper step of R_HAI or
of a growing multiple i R_HAI).

The paper's parameters for this fabric's 100G NICs (the class's defaults, required by
the handout): g = 1/256, K = rate timer = 55 us, B = 10 MiB, F = 5, R_AI = 100 Mb/s
and R_HAI = 500 Mb/s (the paper's 40 and 200 Mb/s at 40G, scaled with the line rate),
a floor of 1 Mb/s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.safefile import save_figure
from labs.emulation import ScenarioRuns
from labs.grader import CheckContext
from labs.harness import Harness, HarnessError
from labs.student import StudentCode
from labs.verdict import Outcome, fail, ok

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


# ----------------------------------------------------------------------------- recording

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
        if not _close(rc, rate, 1e-12):
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
            if not (_close(before.rc, after.rc, 1e-13) and _close(before.rt, after.rt, 1e-13)):
                out.append((before, after))
        return out


def _close(a: float, b: float, rel: float = REL) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def _g(value: float) -> str:
    """A rate in Gb/s for feedback."""
    return f"{value / 1e9:.6g} Gb/s"


def _two_cuts(ctx: CheckContext) -> tuple[Recorder, int, Point]:
    """A CNP at 1 us, another at 2 us: R_T falls below the line rate, so the increases
    that follow are visible. Returns the recorder, the index of the second cut's point
    and that point."""
    r = Recorder(ctx)
    r.cnp(1e-6)
    p = r.cnp(1e-6)
    return r, len(r.points) - 1, p


def _need_gap(p: Point) -> Outcome | None:
    if not p.rc < p.rt * (1 - 1e-6) or not p.rt < LINE_BPS * (1 - 1e-6):
        return fail(f"after two CNPs R_C = {_g(p.rc)} and R_T = {_g(p.rt)}: the cut (TODO 1) "
                    "must leave R_C below R_T (and R_T <- R_C below the line rate) before "
                    "the rate can recover")
    return None


# ----------------------------------------------------------------------------- the cut

def cut(ctx: CheckContext) -> Outcome:
    """R_T <- R_C; R_C <- R_C (1 - alpha / 2), with alpha of before or after its update."""
    r = Recorder(ctx)
    p0 = r.advance(10 * PERIOD_S + 5e-6)       # let alpha move away from 1 first (if it decays)
    if not 0.0 <= p0.alpha <= 1.0:
        return fail(f"alpha is {p0.alpha:.6g} before any CNP; it must stay within [0, 1]")
    lines = []
    for k in (1, 2):
        before = r.advance(CNP_GAP_S if k == 2 else 0.0)   # timers due on the way fire first
        after = r.cnp()
        want = sorted(before.rc * (1 - a / 2) for a in (before.alpha, after.alpha))
        text = (f"CNP {k} with R_C = {_g(before.rc)}, R_T = {_g(before.rt)}, alpha = "
                f"{before.alpha:.6f}: R_C became {_g(after.rc)}, R_T {_g(after.rt)}")
        if not (want[0] * (1 - REL) <= after.rc <= want[1] * (1 + REL)):
            hint = ""
            if _close(after.rc, before.rc, 1e-6):
                hint = " (no cut at all?)"
            elif _close(after.rc, before.rc / 2, 1e-6):
                hint = " (halved: the cut is R_C (1 - alpha / 2), not R_C / 2)"
            elif _close(after.rc, before.rc * before.alpha / 2, 1e-6):
                hint = " (R_C alpha / 2 is what the cut removes, not what it leaves)"
            return fail(f"{text}; R_C (1 - alpha / 2) = {_g(want[0])}{hint}")
        if not _close(after.rt, before.rc):
            hint = (" (R_T kept its old value: R_T <- R_C comes first, the rate just before "
                    "the cut)" if _close(after.rt, before.rt) else "")
            return fail(f"{text}; R_T <- R_C gives {_g(before.rc)}{hint}")
        lines.append(f"{_g(before.rc)} -> {_g(after.rc)} at alpha {before.alpha:.4f}, "
                     f"R_T {_g(after.rt)}")
    return ok("; ".join(lines))


# ----------------------------------------------------------------------------- alpha

def _decays(a_from: float, a_to: float) -> float:
    """How many factors (1 - g) take alpha from ``a_from`` to ``a_to`` (a real number)."""
    if a_from <= 0 or a_to <= 0:
        return math.nan
    return math.log(a_to / a_from) / math.log(1 - G)


def _whole_decays(r: Recorder, a_from: float, periods: int, what: str) -> tuple[int, str | None]:
    """alpha after ``periods`` and a half alpha periods without a CNP must be
    a_from (1 - g)^n with a whole n of periods, one more or fewer for the timer's phase."""
    a_to = r.now().alpha
    n = _decays(a_from, a_to)
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


def alpha(ctx: CheckContext) -> Outcome:
    """alpha <- (1 - g) alpha + g on each CNP; alpha <- (1 - g) alpha per alpha period
    without one."""
    r = Recorder(ctx)
    a_start = r.now().alpha
    if not _close(a_start, 1.0, 1e-9):
        return fail(f"alpha starts at {a_start:.6g}; DCQCN starts it at 1")
    a1 = r.cnp(1e-6).alpha
    r.advance(20.5 * PERIOD_S)
    n1, why = _whole_decays(r, a1, 20, "after a CNP")
    if why:
        return fail(why)
    lines = [f"{n1} decays in 20.5 periods: alpha {a1:.6f} -> {r.now().alpha:.6f}"]
    for k in (1, 2):
        before = r.advance(CNP_GAP_S if k == 2 else 0.0).alpha
        after = r.cnp().alpha
        want = (1 - G) * before + G
        if not _close(after, want):
            hint = ""
            if _close(after, before):
                hint = " (no update on a CNP?)"
            elif _close(after, before + G):
                hint = " (the old alpha is weighted by 1 - g)"
            elif _close(after, (1 - G) * before):
                hint = " (that is the decay without a CNP; a CNP adds g)"
            return fail(f"a CNP at alpha = {before:.8f} left alpha at {after:.8f}; "
                        f"(1 - g) alpha + g = {want:.8f}{hint}")
        lines.append(f"CNP: {before:.6f} -> {after:.6f}")
    a2 = r.now().alpha
    r.advance(3.5 * PERIOD_S)
    n2, why = _whole_decays(r, a2, 3, "after the second of two CNPs")
    if why:
        return fail(why)
    lines.append(f"{n2} decays in 3.5 periods")
    return ok("; ".join(lines))


# ----------------------------------------------------------------------------- reactions

def reactions(ctx: CheckContext) -> Outcome:
    """Only CNPs cut, one cut per CNP: marked ACKs and timers never do."""
    r = Recorder(ctx)
    r.advance(1e-6)
    start = len(r.points) - 1
    for _ in range(20):                        # ECN echoes on ACKs: DCTCP's signal, not DCQCN's
        r.h.ack(4096, 5e-6, True, dt_s=0.5e-6)
    moved = r.changes(start)
    if moved:
        b, a = moved[0]
        return fail(f"a marked ACK (ECN echo) moved R_C from {_g(b.rc)} to {_g(a.rc)}: DCQCN's "
                    "reaction point reacts to CNPs only (the receiver turns marks into CNPs, "
                    "at most one per 50 us)")
    cuts = []
    for k in range(4):
        before = r.advance(CNP_GAP_S if k else 1e-6)
        after = r.cnp()
        cuts.append(after.rc < before.rc * (1 - 1e-9))
    if not all(cuts):
        return fail(f"{sum(cuts)} of 4 CNPs, 50 us apart, cut R_C: every CNP cuts once "
                    "(the notification point already spaces them)")
    last = len(r.points) - 1
    r.advance(12 * PERIOD_S)
    for b, a in r.changes(last):
        if a.rc < b.rc * (1 - 1e-9):
            return fail(f"without a CNP, R_C fell from {_g(b.rc)} to {_g(a.rc)} at "
                        f"t = {a.t_s * 1e6:.1f} us ({a.event}): only a CNP cuts; after it the "
                        "timers and the byte counter only increase")
    return ok("no reaction to 20 marked ACKs; 4 CNPs, 4 cuts; no cut in the 660 us after")


def min_rate(ctx: CheckContext) -> Outcome:
    """R_C never below the floor (1 Mb/s), and it reaches it under a stream of CNPs."""
    r = Recorder(ctx)
    for _ in range(40):
        r.cnp(CNP_GAP_S)
    lowest = min(p.rc for p in r.points)
    last = r.now().rc
    if lowest < MIN_RATE_BPS * (1 - REL):
        return fail(f"40 CNPs 50 us apart took R_C down to {lowest:.4g} b/s: it must never go "
                    f"below min_rate_bps = {MIN_RATE_BPS:.0e} b/s (the floor of the cut)")
    if last > 1.5 * MIN_RATE_BPS:
        return fail(f"after 40 CNPs 50 us apart R_C is still {last:.4g} b/s: each should cut "
                    "by about half, down to the floor of 1 Mb/s (do the cut first)")
    return ok(f"floor held: R_C {last:.4g} b/s after 40 CNPs")


# ----------------------------------------------------------------------------- increases

def fast_recovery(ctx: CheckContext) -> Outcome:
    """The first F = 5 increase events after a cut: R_C <- (R_T + R_C) / 2, R_T kept,
    one per rate-timer period."""
    r, i0, p = _two_cuts(ctx)
    if (bad := _need_gap(p)) is not None:
        return bad
    r.advance(5.5 * PERIOD_S)
    steps = r.changes(i0)
    if not steps:
        return fail(f"no rate change in {5.5 * PERIOD_S * 1e6:.1f} us (5.5 rate-timer periods) "
                    "after a CNP: the rate timer should fire every 55 us (in seconds: 55e-6) "
                    "and each of its first five events is fast recovery")
    for k, (b, a) in enumerate(steps[:F], 1):
        want = (b.rt + b.rc) / 2
        text = (f"increase event {k} after the cut (t = {a.t_s * 1e6:.1f} us, {a.event}): "
                f"R_C {_g(b.rc)} -> {_g(a.rc)}, R_T {_g(b.rt)} -> {_g(a.rt)}")
        if not _close(a.rt, b.rt):
            return fail(f"{text}; fast recovery keeps R_T for the first F = {F} events")
        if not _close(a.rc, want):
            hint = " (R_C jumped to R_T)" if _close(a.rc, b.rt) else ""
            return fail(f"{text}; fast recovery gives (R_T + R_C) / 2 = {_g(want)}{hint}")
        lo_s, hi_s = p.t_s + (k - 1) * PERIOD_S, p.t_s + k * PERIOD_S
        if not lo_s - 1e-9 < a.t_s <= hi_s + 1e-9:
            return fail(f"{text}; the k-th rate-timer event after a cut comes within "
                        f"({(k - 1) * 55} us, {k * 55} us] of it (is the period 55e-6 s?)")
    if len(steps) < F:
        return fail(f"only {len(steps)} rate increases in 5.5 periods of 55 us after a cut: one "
                    "per period of the rate timer expected")
    gap0, gap5 = p.rt - p.rc, steps[F - 1][1].rt - steps[F - 1][1].rc
    return ok(f"5 halvings of the gap to R_T: {_g(gap0)} -> {_g(gap5)} "
              f"(ratio {gap5 / gap0:.5f}, 1/32 = 0.03125)")


def _check_additive(steps: Sequence[tuple[Point, Point]], first: int, what: str) -> str | None:
    for k, (b, a) in enumerate(steps, first):
        want_rt = min(LINE_BPS, b.rt + R_AI_BPS)
        want_rc = (want_rt + b.rc) / 2
        text = (f"increase event {k} after the cut ({what}, t = {a.t_s * 1e6:.1f} us): "
                f"R_T {_g(b.rt)} -> {_g(a.rt)}, R_C {_g(b.rc)} -> {_g(a.rc)}")
        if not _close(a.rt, want_rt):
            hint = ""
            if _close(a.rt, b.rt):
                hint = " (R_T did not grow: still fast recovery?)"
            elif abs((a.rt - b.rt) / R_HAI_BPS - round((a.rt - b.rt) / R_HAI_BPS)) < 1e-6:
                hint = " (a hyper step: hyper increase needs both T and BC to reach F)"
            return fail(f"{text}; additive increase: R_T + R_AI = {_g(want_rt)} "
                        f"(R_AI = {R_AI_BPS / 1e6:g} Mb/s){hint}")
        if not _close(a.rc, want_rc):
            hint = (" (averaged with the old R_T: add R_AI to R_T first)"
                    if _close(a.rc, (b.rt + b.rc) / 2) else "")
            return fail(f"{text}; then R_C <- (R_T + R_C) / 2 = {_g(want_rc)}{hint}")
    return None


def additive_increase(ctx: CheckContext) -> Outcome:
    """With the rate timer alone (no byte-counter event), every event after the first
    F is additive: R_T += R_AI, R_C <- (R_T + R_C) / 2; never hyper."""
    r, i0, p = _two_cuts(ctx)
    if (bad := _need_gap(p)) is not None:
        return bad
    r.advance(20.5 * PERIOD_S)
    steps = r.changes(i0)
    if len(steps) < 20:
        return fail(f"{len(steps)} rate increases in 20.5 periods of 55 us after a cut, without "
                    "bytes sent: one per rate-timer period expected")
    why = _check_additive(steps[F:20], F + 1, "rate timer only")
    if why:
        return fail(why)
    return ok(f"15 additive steps of {R_AI_BPS / 1e6:g} Mb/s: R_T {_g(p.rt)} -> "
              f"{_g(steps[19][1].rt)}")


def hyper_increase(ctx: CheckContext) -> Outcome:
    """Once both the timer and the byte counter have had F events since the cut, each
    event adds a whole multiple i of R_HAI to R_T (i growing or constant), then
    R_C <- (R_T + R_C) / 2. Before that, byte-counter events are additive."""
    r, i0, p = _two_cuts(ctx)
    if (bad := _need_gap(p)) is not None:
        return bad
    r.advance(10.5 * PERIOD_S)                  # T = 10: 5 fast recovery, 5 additive
    timer_steps = len(r.changes(i0))
    if not 10 <= timer_steps <= 11:             # 11: a timer that runs freely through the cut
        return fail(f"{timer_steps} rate increases in 10.5 periods of 55 us after a cut: one per "
                    "rate-timer period expected (do the fast recovery and additive checks first)")
    mark = len(r.points) - 1
    for _ in range(5 * 4):                      # 5 byte-counter events: B bytes each, in quarters
        r.send(BYTE_COUNTER_BYTES // 4, 0.1e-6)
    byte_steps = r.changes(mark)
    if len(byte_steps) != 5:
        return fail(f"sending 5 x B = 5 x 10 MiB gave {len(byte_steps)} rate increases: the byte "
                    "counter (given in the starter) should count one event per B bytes sent")
    why = _check_additive(byte_steps, timer_steps + 1, "byte counter, T >= F but BC < F")
    if why:
        return fail(why)
    mark = len(r.points) - 1
    r.advance(3 * PERIOD_S)                     # 3 timer events with T >= F and BC >= F
    for _ in range(2 * 4):                      # 2 more byte-counter events
        r.send(BYTE_COUNTER_BYTES // 4, 0.1e-6)
    hyper = r.changes(mark)
    if len(hyper) < 4:
        return fail(f"3 rate-timer periods and 2 x B bytes gave {len(hyper)} increases, not 5")
    multiples = []
    for k, (b, a) in enumerate(hyper, timer_steps + 6):
        step = (a.rt - b.rt) / R_HAI_BPS
        text = (f"increase event {k} after the cut (T and BC both >= F, t = "
                f"{a.t_s * 1e6:.1f} us): R_T {_g(b.rt)} -> {_g(a.rt)}, R_C {_g(b.rc)} -> "
                f"{_g(a.rc)}")
        if not (step >= 1 - 1e-6 and abs(step - round(step)) < 1e-6 * max(1.0, step)):
            hint = (" (an additive step: both T and BC have reached F, so this is hyper "
                    "increase)" if _close(a.rt - b.rt, R_AI_BPS, 1e-6) else "")
            return fail(f"{text}; hyper increase adds i R_HAI (R_HAI = {R_HAI_BPS / 1e6:g} Mb/s, "
                        f"i = min(T, BC) - F + 1 >= 1){hint}")
        if multiples and round(step) < multiples[-1]:
            return fail(f"{text}; the hyper step went down from {multiples[-1]} R_HAI to "
                        f"{round(step)} R_HAI without a cut")
        multiples.append(round(step))
        if not _close(a.rc, (a.rt + b.rc) / 2):
            return fail(f"{text}; then R_C <- (R_T + R_C) / 2 = {_g((a.rt + b.rc) / 2)}")
    return ok(f"5 additive byte-counter events, then hyper steps of {multiples} x R_HAI")


def line_rate(ctx: CheckContext) -> Outcome:
    """R_T and R_C never above the line rate, and R_C gets back to it."""
    r = Recorder(ctx)
    if not r.cnp(1e-6).rc < LINE_BPS * (1 - 1e-6):
        return fail("a CNP at line rate left R_C at the line rate: nothing to recover from "
                    "(do the cut, TODO 1, first)")
    for _ in range(40):                         # the rate timer and the byte counter at work
        for _ in range(4):
            r.send(BYTE_COUNTER_BYTES // 2, PERIOD_S / 4)
    top_rc = max(pt.rc for pt in r.points)
    top_rt = max(pt.rt for pt in r.points)
    if top_rt > LINE_BPS * (1 + REL):
        return fail(f"R_T reached {_g(top_rt)} after a cut from 100 Gb/s: additive and hyper "
                    "increase must never take R_T above the line rate (clamp it)")
    if top_rc > LINE_BPS * (1 + REL):
        return fail(f"R_C reached {_g(top_rc)}: it must never go above the line rate")
    if r.now().rc < LINE_BPS * 0.999:
        return fail(f"2.2 ms after a single CNP, with the timer and the byte counter at work, "
                    f"R_C is only {_g(r.now().rc)}: it should be back at the line rate")
    return ok(f"R_T and R_C at most {_g(max(top_rc, top_rt))}; R_C back to {_g(r.now().rc)}")


def timer_periods(ctx: CheckContext) -> Outcome:
    """The given timers: one rate event and one alpha decay per 55 us (real seconds)."""
    r, i0, _p = _two_cuts(ctx)
    a0 = r.now().alpha
    r.advance(100.5 * PERIOD_S)
    n_rate = len(r.changes(i0))
    n_alpha = _decays(a0, r.now().alpha) if r.now().alpha != a0 else 0.0
    if not 99 <= n_rate <= 101:
        return fail(f"{n_rate} rate increases in 100.5 periods of 55 us: the rate timer must "
                    "fire once per 55e-6 s of real time (times are seconds, not us or ns)")
    if not (math.isfinite(n_alpha) and 99 <= n_alpha <= 101):
        return fail(f"alpha decayed {n_alpha:.4g} times in 100.5 periods of 55 us: once per "
                    "55e-6 s expected (times are seconds, not us or ns)")
    return ok(f"{n_rate} rate events and {n_alpha:.0f} alpha decays in 100.5 periods")


# ----------------------------------------------------------------------------- emulation

BUILTIN = "dcqcn"


def _is_student(cc: Any) -> Any:
    """The student's rows: their class is a ``path.py:Class`` setting."""
    return cc.astype(str).str.contains(".py:", regex=False)


@dataclass(frozen=True)
class RunView:
    """One valid run of the scenario: the student's and the built-in's cc.csv rows."""

    run_dir: Path
    cc: Any                      # pandas DataFrame of cc.csv

    def row(self, scenario: str, student: bool) -> Any:
        rows = self.cc[self.cc.scenario == scenario]
        rows = rows[_is_student(rows.cc) if student else (rows.cc == BUILTIN)]
        return rows.iloc[0] if len(rows) else None


def _views(runs: ScenarioRuns) -> list[RunView]:
    import pandas as pd

    out = []
    for rec in runs.valid_runs():
        if rec.run_dir is not None and (rec.run_dir / "cc.csv").is_file():
            out.append(RunView(rec.run_dir, pd.read_csv(rec.run_dir / "cc.csv")))
    return out


def _median(values: Sequence[float]) -> float:
    import statistics

    clean = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(clean) if clean else math.nan


def _thresholds_kb(view: RunView) -> tuple[float, float]:
    """Kmin and Kmax of the incast's bottleneck port (the port queue.csv samples)."""
    import pandas as pd

    ports = pd.read_csv(view.run_dir / "ports.csv")
    queue = pd.read_csv(view.run_dir / "queue.csv", usecols=["port"], nrows=1)
    row = ports[(ports.port == queue.port.iloc[0]) & ports.case.str.startswith("incast")].iloc[0]
    return float(row.kmin_bytes) / 1e3, float(row.kmax_bytes) / 1e3


def cnps_cut(ctx: CheckContext) -> Outcome:
    """On the fabric the class receives CNPs in both cases, and its trace shows each
    CNP leaving R_C below R_T (a cut)."""
    import pandas as pd

    views = _views(ctx.runs) if ctx.runs else []
    if not views:
        return fail("no valid run to read")
    lines = []
    for v in views:
        counts = {}
        for scenario in ("incast", "fairness"):
            row = v.row(scenario, student=True)
            counts[scenario] = 0 if row is None or pd.isna(row.cnps) else int(row.cnps)
        if min(counts.values()) <= 0:
            return fail(f"your class counted {counts['incast']} CNPs in the incast and "
                        f"{counts['fairness']} in the fairness case ({v.run_dir.name}): the "
                        "receivers send CNPs for marked frames; on_cnp must count them in "
                        "cnps_received")
        rates = pd.read_csv(v.run_dir / "rates.csv")
        mine = rates[_is_student(rates.cc) & (rates.event == "cnp")]
        if mine.empty:
            return fail(f"no CNP in your class's rate trace of the fairness case ({v.run_dir.name})")
        cut = int((mine.rate_bps < mine.target_rate_bps * (1 - 1e-6)).sum())
        if cut < len(mine):
            return fail(f"after {len(mine) - cut} of the {len(mine)} CNPs of the fairness case your "
                        "trace shows R_C not below R_T: a CNP sets R_T to the old rate and cuts "
                        "R_C below it")
        lines.append(f"{counts['incast']} + {counts['fairness']} CNPs, {cut} cuts traced")
    return ok("; ".join(lines))


def fair_share(ctx: CheckContext) -> Outcome:
    """Three flows sharing the bottleneck converge to a fair share: Jain index over the
    all-flows interval at least ``jain_min``, aggregate at least ``aggregate_min`` of the
    max-min model's."""
    views = _views(ctx.runs) if ctx.runs else []
    if not views:
        return fail("no valid run to read")
    jain_min = float(ctx.params.get("jain_min", 0.85))
    agg_min = float(ctx.params.get("aggregate_min", 0.85))
    mine = [v.row("fairness", True) for v in views]
    ref = [v.row("fairness", False) for v in views]
    jain = _median([float(r.jain) for r in mine if r is not None])
    agg = _median([float(r.aggregate_gbps) for r in mine if r is not None])
    small = _median([float(r.smallest_gbps) for r in mine if r is not None])
    jain_ref = _median([float(r.jain) for r in ref if r is not None])
    model = ctx.runs.metric("aggregate throughput", "fairness", column="predicted") \
        if ctx.runs else math.nan
    text = (f"Jain index {jain:.3f}, aggregate {agg:.1f} Gb/s (max-min model {model:.1f}), "
            f"smallest share {small:.1f} Gb/s; the built-in DCQCN in the same run: Jain "
            f"{jain_ref:.3f}")
    if not jain >= jain_min:
        return fail(f"{text}: the three flows should share the bottleneck fairly (Jain >= "
                    f"{jain_min:g}); a class that does not cut on CNPs (or never recovers) "
                    "leaves the first flow with most of it")
    if math.isfinite(model) and not agg >= agg_min * model:
        return fail(f"{text}: the flows should keep the bottleneck busy (>= {agg_min:.0%} of "
                    "the model): do the rates recover after the cuts (TODO 3, TODO 4)?")
    return ok(text)


def _second_half_queue_kb(view: RunView) -> float:
    """The student's incast: the time-weighted mean bottleneck queue over the second half
    of the incast (completion / 2 to completion), in KB."""
    import numpy as np
    import pandas as pd

    row = view.row("incast", True)
    end_s = float(row.completion_us) * 1e-6
    q = pd.read_csv(view.run_dir / "queue.csv", usecols=["case", "t_s", "backlog_bytes"])
    q = q[q.case == row.case].sort_values("t_s")
    q = q[(q.t_s >= end_s / 2) & (q.t_s <= end_s)]
    if q.empty:
        return math.nan
    t = q.t_s.to_numpy()
    dt = np.diff(np.append(t, end_s))
    if dt.sum() <= 0:
        return float(q.backlog_bytes.mean()) / 1e3
    return float((q.backlog_bytes.to_numpy() * dt).sum() / dt.sum()) / 1e3


def incast_queue(ctx: CheckContext) -> Outcome:
    """The incast's queue leaves the marking region once the cuts have taken hold: over
    the incast's second half its mean is below ``below`` x Kmin (without congestion
    control it stays far above Kmin, near the buffer, until the senders finish)."""
    views = _views(ctx.runs) if ctx.runs else []
    views = [v for v in views if v.row("incast", True) is not None]
    if not views:
        return fail("no valid run to read")
    below = float(ctx.params.get("below", 1.0))
    kmin, kmax = _thresholds_kb(views[0])
    late = _median([_second_half_queue_kb(v) for v in views])
    mean = _median([float(v.row("incast", True).mean_queue_KB) for v in views])
    peak = _median([float(v.row("incast", True).peak_queue_KB) for v in views])
    ref = _median([float(v.row("incast", False).mean_queue_KB) for v in views
                   if v.row("incast", False) is not None])
    text = (f"incast bottleneck queue: peak {peak:.0f} KB, mean {mean:.1f} KB over the incast "
            f"(built-in DCQCN: {ref:.1f} KB), mean {late:.1f} KB over its second half; Kmin "
            f"{kmin:.0f} KB, Kmax {kmax:.0f} KB")
    if not late <= below * kmin:
        return fail(f"{text}: once the CNPs' cuts take hold the senders' total rate falls below "
                    f"the port's and the queue drains below Kmin; yours stayed at {late:.0f} KB "
                    "as without congestion control: does each CNP cut R_C (TODO 1)?")
    return ok(text)


def incast_drops(ctx: CheckContext) -> Outcome:
    """The incast drops about as many frames as the built-in DCQCN in the same runs
    (within a factor ``factor``): both lose what arrives before the first CNPs' cuts."""
    views = _views(ctx.runs) if ctx.runs else []
    factor = float(ctx.params.get("factor", 1.5))
    pairs = [(v.row("incast", True), v.row("incast", False)) for v in views]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    if not pairs:
        return fail("no valid run to read")
    mine = _median([float(a.drops) for a, _ in pairs])
    ref = _median([float(b.drops) for _, b in pairs])
    text = f"incast drops: yours {mine:.0f}, the built-in DCQCN's {ref:.0f} (median of the runs)"
    if not ref / factor <= mine <= ref * factor:
        hint = (" - many more: do your CNPs cut the rate (TODO 1)?" if mine > ref * factor
                else " - far fewer: do your cuts go deeper than R_C (1 - alpha / 2)?")
        return fail(f"{text}: expected within a factor {factor:g} of the built-in's{hint}")
    return ok(text)


def plots(runs: dict[str, ScenarioRuns], out: Path, code: StudentCode) -> list[Path]:
    """Your flows' rates in the fairness case (CNPs marked) beside the built-in's, and
    the incast's bottleneck queue against Kmin and Kmax."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    sr = runs.get("dcqcn")
    views = _views(sr) if sr is not None else []
    if not views:
        return []
    v = views[0]
    rates = pd.read_csv(v.run_dir / "rates.csv")
    queue = pd.read_csv(v.run_dir / "queue.csv")
    kmin, kmax = _thresholds_kb(v)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for student, style in ((True, "-"), (False, ":")):
        mine = rates[_is_student(rates.cc) if student else (rates.cc == BUILTIN)]
        who = "yours" if student else "built-in"
        for k, (msg, flow) in enumerate(mine.groupby("msg_id")):
            color = f"C{k}"
            ax1.step(flow.t_s * 1e6, flow.rate_bps / 1e9, style, where="post", color=color,
                     label=f"flow {msg} ({who})", lw=1.4 if student else 1.0)
            cnp = flow[flow.event == "cnp"]
            if student and not cnp.empty:
                ax1.plot(cnp.t_s * 1e6, cnp.rate_bps / 1e9, "v", color=color, ms=6)
    ax1.plot([], [], "kv", label="CNP (yours)")
    ax1.set(xlabel="time (us, real fabric)", ylabel="R_C (Gb/s)",
            title="fairness: each flow's rate (dotted: built-in DCQCN)")
    for student, color in ((True, "C0"), (False, "C7")):
        q = queue[queue.case.str.startswith("incast")]
        q = q[_is_student(q.cc) if student else (q.cc == BUILTIN)]
        ax2.plot(q.t_s * 1e6, q.backlog_bytes / 1e3, color=color, lw=1.0,
                 label="yours" if student else "built-in DCQCN")
    for value, name in ((kmin, "Kmin"), (kmax, "Kmax")):
        ax2.axhline(value, color="red", ls="--", lw=0.8)
        ax2.annotate(name, (0, value), color="red", fontsize=8)
    ax2.set(xlabel="time (us, real fabric)", ylabel="bottleneck queue (KB)",
            title="incast: the receiver's last hop")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Lab 3: DCQCN on the fabric (real-fabric units)")
    fig.tight_layout()
    path = out / "lab3_dcqcn.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return [path]

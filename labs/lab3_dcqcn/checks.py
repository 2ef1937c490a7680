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
a floor of 1 Mb/s. The instrument that records the student's class is
`dcqcn_recorder`; the fabric checks read their runs through `dcqcn_runs`.
"""

from __future__ import annotations

import math
from pathlib import Path

from core.safefile import save_figure
from labs.emulation import ScenarioRuns
from labs.grader import CheckContext
from labs.lab3_dcqcn.dcqcn_recorder import (
    BYTE_COUNTER_BYTES,
    CNP_GAP_S,
    LINE_BPS,
    MIN_RATE_BPS,
    PERIOD_S,
    R_AI_BPS,
    R_HAI_BPS,
    REL,
    F,
    G,
    Recorder,
    check_additive,
    close,
    decays,
    gbps,
    need_gap,
    two_cuts,
    whole_decays,
)
from labs.lab3_dcqcn.dcqcn_runs import (
    BUILTIN,
    is_student,
    median,
    run_views,
    second_half_queue_kb,
    thresholds_kb,
)
from labs.student import StudentCode
from labs.verdict import Outcome, fail, ok

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
        text = (f"CNP {k} with R_C = {gbps(before.rc)}, R_T = {gbps(before.rt)}, alpha = "
                f"{before.alpha:.6f}: R_C became {gbps(after.rc)}, R_T {gbps(after.rt)}")
        if not (want[0] * (1 - REL) <= after.rc <= want[1] * (1 + REL)):
            hint = ""
            if close(after.rc, before.rc, 1e-6):
                hint = " (no cut at all?)"
            elif close(after.rc, before.rc / 2, 1e-6):
                hint = " (halved: the cut is R_C (1 - alpha / 2), not R_C / 2)"
            elif close(after.rc, before.rc * before.alpha / 2, 1e-6):
                hint = " (R_C alpha / 2 is what the cut removes, not what it leaves)"
            return fail(f"{text}; R_C (1 - alpha / 2) = {gbps(want[0])}{hint}")
        if not close(after.rt, before.rc):
            hint = (" (R_T kept its old value: R_T <- R_C comes first, the rate just before "
                    "the cut)" if close(after.rt, before.rt) else "")
            return fail(f"{text}; R_T <- R_C gives {gbps(before.rc)}{hint}")
        lines.append(f"{gbps(before.rc)} -> {gbps(after.rc)} at alpha {before.alpha:.4f}, "
                     f"R_T {gbps(after.rt)}")
    return ok("; ".join(lines))


# ----------------------------------------------------------------------------- alpha


def alpha(ctx: CheckContext) -> Outcome:
    """alpha <- (1 - g) alpha + g on each CNP; alpha <- (1 - g) alpha per alpha period
    without one."""
    r = Recorder(ctx)
    a_start = r.now().alpha
    if not close(a_start, 1.0, 1e-9):
        return fail(f"alpha starts at {a_start:.6g}; DCQCN starts it at 1")
    a1 = r.cnp(1e-6).alpha
    r.advance(20.5 * PERIOD_S)
    n1, why = whole_decays(r, a1, 20, "after a CNP")
    if why:
        return fail(why)
    lines = [f"{n1} decays in 20.5 periods: alpha {a1:.6f} -> {r.now().alpha:.6f}"]
    for k in (1, 2):
        before = r.advance(CNP_GAP_S if k == 2 else 0.0).alpha
        after = r.cnp().alpha
        want = (1 - G) * before + G
        if not close(after, want):
            hint = ""
            if close(after, before):
                hint = " (no update on a CNP?)"
            elif close(after, before + G):
                hint = " (the old alpha is weighted by 1 - g)"
            elif close(after, (1 - G) * before):
                hint = " (that is the decay without a CNP; a CNP adds g)"
            return fail(f"a CNP at alpha = {before:.8f} left alpha at {after:.8f}; "
                        f"(1 - g) alpha + g = {want:.8f}{hint}")
        lines.append(f"CNP: {before:.6f} -> {after:.6f}")
    a2 = r.now().alpha
    r.advance(3.5 * PERIOD_S)
    n2, why = whole_decays(r, a2, 3, "after the second of two CNPs")
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
        return fail(f"a marked ACK (ECN echo) moved R_C from {gbps(b.rc)} to {gbps(a.rc)}: DCQCN's "
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
            return fail(f"without a CNP, R_C fell from {gbps(b.rc)} to {gbps(a.rc)} at "
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
    r, i0, p = two_cuts(ctx)
    if (bad := need_gap(p)) is not None:
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
                f"R_C {gbps(b.rc)} -> {gbps(a.rc)}, R_T {gbps(b.rt)} -> {gbps(a.rt)}")
        if not close(a.rt, b.rt):
            return fail(f"{text}; fast recovery keeps R_T for the first F = {F} events")
        if not close(a.rc, want):
            hint = " (R_C jumped to R_T)" if close(a.rc, b.rt) else ""
            return fail(f"{text}; fast recovery gives (R_T + R_C) / 2 = {gbps(want)}{hint}")
        lo_s, hi_s = p.t_s + (k - 1) * PERIOD_S, p.t_s + k * PERIOD_S
        if not lo_s - 1e-9 < a.t_s <= hi_s + 1e-9:
            return fail(f"{text}; the k-th rate-timer event after a cut comes within "
                        f"({(k - 1) * 55} us, {k * 55} us] of it (is the period 55e-6 s?)")
    if len(steps) < F:
        return fail(f"only {len(steps)} rate increases in 5.5 periods of 55 us after a cut: one "
                    "per period of the rate timer expected")
    gap0, gap5 = p.rt - p.rc, steps[F - 1][1].rt - steps[F - 1][1].rc
    return ok(f"5 halvings of the gap to R_T: {gbps(gap0)} -> {gbps(gap5)} "
              f"(ratio {gap5 / gap0:.5f}, 1/32 = 0.03125)")


def additive_increase(ctx: CheckContext) -> Outcome:
    """With the rate timer alone (no byte-counter event), every event after the first
    F is additive: R_T += R_AI, R_C <- (R_T + R_C) / 2; never hyper."""
    r, i0, p = two_cuts(ctx)
    if (bad := need_gap(p)) is not None:
        return bad
    r.advance(20.5 * PERIOD_S)
    steps = r.changes(i0)
    if len(steps) < 20:
        return fail(f"{len(steps)} rate increases in 20.5 periods of 55 us after a cut, without "
                    "bytes sent: one per rate-timer period expected")
    why = check_additive(steps[F:20], F + 1, "rate timer only")
    if why:
        return fail(why)
    return ok(f"15 additive steps of {R_AI_BPS / 1e6:g} Mb/s: R_T {gbps(p.rt)} -> "
              f"{gbps(steps[19][1].rt)}")


def hyper_increase(ctx: CheckContext) -> Outcome:
    """Once both the timer and the byte counter have had F events since the cut, each
    event adds a whole multiple i of R_HAI to R_T (i growing or constant), then
    R_C <- (R_T + R_C) / 2. Before that, byte-counter events are additive."""
    r, i0, p = two_cuts(ctx)
    if (bad := need_gap(p)) is not None:
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
    why = check_additive(byte_steps, timer_steps + 1, "byte counter, T >= F but BC < F")
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
                f"{a.t_s * 1e6:.1f} us): R_T {gbps(b.rt)} -> {gbps(a.rt)}, R_C {gbps(b.rc)} -> "
                f"{gbps(a.rc)}")
        if not (step >= 1 - 1e-6 and abs(step - round(step)) < 1e-6 * max(1.0, step)):
            hint = (" (an additive step: both T and BC have reached F, so this is hyper "
                    "increase)" if close(a.rt - b.rt, R_AI_BPS, 1e-6) else "")
            return fail(f"{text}; hyper increase adds i R_HAI (R_HAI = {R_HAI_BPS / 1e6:g} Mb/s, "
                        f"i = min(T, BC) - F + 1 >= 1){hint}")
        if multiples and round(step) < multiples[-1]:
            return fail(f"{text}; the hyper step went down from {multiples[-1]} R_HAI to "
                        f"{round(step)} R_HAI without a cut")
        multiples.append(round(step))
        if not close(a.rc, (a.rt + b.rc) / 2):
            return fail(f"{text}; then R_C <- (R_T + R_C) / 2 = {gbps((a.rt + b.rc) / 2)}")
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
        return fail(f"R_T reached {gbps(top_rt)} after a cut from 100 Gb/s: additive and hyper "
                    "increase must never take R_T above the line rate (clamp it)")
    if top_rc > LINE_BPS * (1 + REL):
        return fail(f"R_C reached {gbps(top_rc)}: it must never go above the line rate")
    if r.now().rc < LINE_BPS * 0.999:
        return fail(f"2.2 ms after a single CNP, with the timer and the byte counter at work, "
                    f"R_C is only {gbps(r.now().rc)}: it should be back at the line rate")
    return ok(f"R_T and R_C at most {gbps(max(top_rc, top_rt))}; R_C back to {gbps(r.now().rc)}")


def timer_periods(ctx: CheckContext) -> Outcome:
    """The given timers: one rate event and one alpha decay per 55 us (real seconds)."""
    r, i0, _p = two_cuts(ctx)
    a0 = r.now().alpha
    r.advance(100.5 * PERIOD_S)
    n_rate = len(r.changes(i0))
    n_alpha = decays(a0, r.now().alpha) if r.now().alpha != a0 else 0.0
    if not 99 <= n_rate <= 101:
        return fail(f"{n_rate} rate increases in 100.5 periods of 55 us: the rate timer must "
                    "fire once per 55e-6 s of real time (times are seconds, not us or ns)")
    if not (math.isfinite(n_alpha) and 99 <= n_alpha <= 101):
        return fail(f"alpha decayed {n_alpha:.4g} times in 100.5 periods of 55 us: once per "
                    "55e-6 s expected (times are seconds, not us or ns)")
    return ok(f"{n_rate} rate events and {n_alpha:.0f} alpha decays in 100.5 periods")


# ----------------------------------------------------------------------------- emulation


def cnps_cut(ctx: CheckContext) -> Outcome:
    """On the fabric the class receives CNPs in both cases, and its trace shows each
    CNP leaving R_C below R_T (a cut)."""
    import pandas as pd

    views = run_views(ctx.runs) if ctx.runs else []
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
        mine = rates[is_student(rates.cc) & (rates.event == "cnp")]
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
    views = run_views(ctx.runs) if ctx.runs else []
    if not views:
        return fail("no valid run to read")
    jain_min = float(ctx.params.get("jain_min", 0.85))
    agg_min = float(ctx.params.get("aggregate_min", 0.85))
    mine = [v.row("fairness", True) for v in views]
    ref = [v.row("fairness", False) for v in views]
    jain = median([float(r.jain) for r in mine if r is not None])
    agg = median([float(r.aggregate_gbps) for r in mine if r is not None])
    small = median([float(r.smallest_gbps) for r in mine if r is not None])
    jain_ref = median([float(r.jain) for r in ref if r is not None])
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


def incast_queue(ctx: CheckContext) -> Outcome:
    """The incast's queue leaves the marking region once the cuts have taken hold: over
    the incast's second half its mean is below ``below`` x Kmin (without congestion
    control it stays far above Kmin, near the buffer, until the senders finish)."""
    views = run_views(ctx.runs) if ctx.runs else []
    views = [v for v in views if v.row("incast", True) is not None]
    if not views:
        return fail("no valid run to read")
    below = float(ctx.params.get("below", 1.0))
    kmin, kmax = thresholds_kb(views[0])
    late = median([second_half_queue_kb(v) for v in views])
    mean = median([float(v.row("incast", True).mean_queue_KB) for v in views])
    peak = median([float(v.row("incast", True).peak_queue_KB) for v in views])
    ref = median([float(v.row("incast", False).mean_queue_KB) for v in views
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
    views = run_views(ctx.runs) if ctx.runs else []
    factor = float(ctx.params.get("factor", 1.5))
    pairs = [(v.row("incast", True), v.row("incast", False)) for v in views]
    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
    if not pairs:
        return fail("no valid run to read")
    mine = median([float(a.drops) for a, _ in pairs])
    ref = median([float(b.drops) for _, b in pairs])
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
    views = run_views(sr) if sr is not None else []
    if not views:
        return []
    v = views[0]
    rates = pd.read_csv(v.run_dir / "rates.csv")
    queue = pd.read_csv(v.run_dir / "queue.csv")
    kmin, kmax = thresholds_kb(v)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for student, style in ((True, "-"), (False, ":")):
        mine = rates[is_student(rates.cc) if student else (rates.cc == BUILTIN)]
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
        q = q[is_student(q.cc) if student else (q.cc == BUILTIN)]
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

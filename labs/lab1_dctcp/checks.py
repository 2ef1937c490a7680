"""Lab 1's checks: DCTCP's alpha update and window cut on a simulated clock, then the
queue and the throughput of the student's class on the fabric, at three K.

The scripted traffic: one ACK of one frame (4096 B) every microsecond, each for a
frame sent one round trip (10 us) earlier, so that a window of data is ten ACKs. The
checks accept any bookkeeping that ends a window once per round trip (a window more
or fewer over a phase), and read alpha from ``trace()``'s third value.
"""

from __future__ import annotations

import math
from pathlib import Path

from core.safefile import save_figure
from labs.emulation import ScenarioRuns
from labs.grader import CheckContext
from labs.harness import Harness
from labs.student import StudentCode
from labs.verdict import Outcome, fail, ok

MTU = 4096
RTT_S = 10e-6
ACK_GAP_S = 1e-6


def _alpha(ctx: CheckContext, h: Harness) -> float:
    alpha = ctx.code.call("trace()", h.cc.trace)[2]
    return float(alpha)


def _acks(h: Harness, duration_s: float, marked: object = False) -> None:
    """One ACK per microsecond for ``duration_s``: ``marked`` True, False, or
    "alternate" (every other ACK, F = 1/2)."""
    for i in range(round(duration_s / ACK_GAP_S)):
        echo = (i % 2 == 0) if marked == "alternate" else bool(marked)
        h.ack(MTU, RTT_S, echo, dt_s=ACK_GAP_S)


def _between(value: float, lo: float, hi: float, slack: float = 1e-9) -> bool:
    return lo * (1 - slack) - slack <= value <= hi * (1 + slack) + slack


def alpha_update(ctx: CheckContext) -> Outcome:
    g = float(ctx.params.get("g", 0.25))
    h = ctx.harness(100e9, 0.0, g=g, base_rtt_s=RTT_S)
    a0 = _alpha(ctx, h)
    if not _between(a0, 1.0, 1.0, 1e-6):
        return fail(f"alpha starts at {a0:.4g}; DCTCP starts it at 1 here")
    # 6 round trips without a mark: alpha decays by (1 - g) per window of data.
    _acks(h, 6 * RTT_S)
    a = _alpha(ctx, h)
    lo, hi = (1 - g) ** 7, (1 - g) ** 5
    if not _between(a, lo, hi, 1e-6):
        per_ack = " (updated on every ACK instead of once per window?)" if a < lo else ""
        return fail(f"with g = {g:g}, after 6 round trips without marks alpha is {a:.4g}; "
                    f"(1 - g)^6 = {(1 - g) ** 6:.4g} (between {lo:.4g} and {hi:.4g} for one "
                    f"window more or less){per_ack}")
    # 4 round trips with every byte marked: F = 1, alpha climbs back towards 1.
    _acks(h, 4 * RTT_S, marked=True)
    a2 = _alpha(ctx, h)
    lo2, hi2 = 1 - (1 - lo) * (1 - g) ** 3, 1 - (1 - hi) * (1 - g) ** 5
    lo2, hi2 = min(lo2, hi2), max(lo2, hi2)
    if not _between(a2, lo2, hi2, 1e-6):
        return fail(f"after 4 round trips with every ACK marked (F = 1) alpha is {a2:.4g}; "
                    f"(1 - g) alpha + g F per window gives {lo2:.4g} to {hi2:.4g}"
                    + (" (alpha must stay within [0, 1]: is F weighted by g?)" if a2 > 1 else ""))
    # 30 round trips with half the bytes marked: alpha settles at F = 1/2.
    _acks(h, 30 * RTT_S, marked="alternate")
    a3 = _alpha(ctx, h)
    if not _between(a3, 0.4, 0.6):
        return fail(f"with half of every window's bytes marked for 30 round trips alpha is "
                    f"{a3:.4g}; it should settle near F = 0.5 (is F marked / acked bytes "
                    "of this window, reset at each window?)")
    return ok(f"alpha {a0:g} -> {a:.3f} (no marks) -> {a2:.3f} (all marked) -> {a3:.3f} "
              "(half marked)")


def _first_cut(ctx: CheckContext) -> tuple[Harness, float, float, float, float]:
    """Three unmarked round trips, then one marked ACK between windows' ends: the
    window and alpha before it and after it."""
    h = ctx.harness(100e9, 0.0, base_rtt_s=RTT_S)
    _acks(h, 3 * RTT_S)
    w0, a0 = h.read().window_bytes, _alpha(ctx, h)
    rb = h.ack(MTU, RTT_S, True, dt_s=ACK_GAP_S / 2)
    return h, float(w0 or 0.0), a0, float(rb.window_bytes or 0.0), _alpha(ctx, h)


def window_cut(ctx: CheckContext) -> Outcome:
    h, w0, a0, w1, a1 = _first_cut(ctx)
    if w0 <= 0:
        return fail("window_bytes is not set: DCTCP limits the bytes in flight")
    want = sorted(w0 * (1 - a / 2) for a in (a0, a1))
    if not _between(w1, want[0], want[1], 2e-3):
        hint = ""
        if _between(w1, w0, w0 * 1.05):
            hint = " (no cut at all?)"
        elif _between(w1, w0 / 2, w0 / 2, 2e-3):
            hint = " (halved: the cut is W (1 - alpha / 2), not W / 2)"
        elif _between(w1, w0 * a0 / 2, w0 * a1 / 2, 5e-2):
            hint = " (W alpha / 2 is what the cut removes, not what it leaves)"
        return fail(f"a marked ACK with alpha = {a0:.4f} took the window from {w0 / 1e3:.2f} KB "
                    f"to {w1 / 1e3:.2f} KB; W (1 - alpha / 2) = {want[0] / 1e3:.2f} KB{hint}")
    return ok(f"{w0 / 1e3:.1f} KB -> {w1 / 1e3:.1f} KB at alpha = {a0:.3f}")


def cut_once_per_rtt(ctx: CheckContext) -> Outcome:
    h, w0, a0, w1, a1 = _first_cut(ctx)
    if not w1 < w0:
        return fail("no cut on the first marked ACK, so nothing to check yet (do TODO 2)")
    for _ in range(5):   # marks of frames sent before the cut: the same congestion
        h.ack(MTU, RTT_S, True, dt_s=ACK_GAP_S)
    w2 = float(h.read().window_bytes or 0.0)
    if not _between(w2, w1, w1, 1e-3):
        return fail(f"five more marked ACKs within the same round trip moved the window from "
                    f"{w1 / 1e3:.2f} KB to {w2 / 1e3:.2f} KB; DCTCP cuts at most once per round "
                    "trip (the marks of frames sent before the cut answer the same congestion)")
    w3 = float(h.ack(MTU, RTT_S, True, dt_s=RTT_S - 4 * ACK_GAP_S).window_bytes or 0.0)
    if not w3 < w2 * (1 - 0.9 * min(a0, a1) / 2):
        return fail(f"a marked ACK for a frame sent after the cut left the window at "
                    f"{w3 / 1e3:.2f} KB (from {w2 / 1e3:.2f} KB): a new round trip may cut again")
    return ok(f"one cut per round trip: {w1 / 1e3:.1f} KB held, then {w3 / 1e3:.1f} KB")


def min_window(ctx: CheckContext) -> Outcome:
    h = ctx.harness(100e9, 0.0, base_rtt_s=RTT_S)
    _acks(h, 230 * RTT_S, marked=True)
    smallest = min(rb.window_bytes for _, _, rb in h.history if rb.window_bytes is not None)
    if smallest > 2 * MTU:
        return fail(f"230 round trips with every ACK marked left the window at {smallest:.0f} B "
                    "or more: it should have been cut down to its floor (do the cut first)")
    if smallest < MTU * (1 - 1e-9):
        return fail(f"after 230 round trips of marks the window fell to {smallest:.4g} B; it "
                    f"must never go below min_window_bytes = {MTU} B (one frame)")
    return ok(f"smallest window {smallest:.0f} B")


def additive_increase(ctx: CheckContext) -> Outcome:
    h = ctx.harness(100e9, 0.0, base_rtt_s=RTT_S)
    w0 = float(h.read().window_bytes or 0.0)
    acked = 0.0
    while acked < w0:
        h.ack(MTU, RTT_S, False, dt_s=ACK_GAP_S)
        acked += MTU
    grown = float(h.read().window_bytes or 0.0) - w0
    if not 0.7 * MTU <= grown <= 1.3 * MTU:
        return fail(f"acknowledging one window of data without marks grew the window by "
                    f"{grown:.0f} B; TCP's additive increase adds about one MTU ({MTU} B)")
    return ok(f"+{grown:.0f} B per window of data")


# ----------------------------------------------------------------------------- emulation

def _k_bytes(point: str) -> float:
    from core.units import parse_size_bytes

    return float(parse_size_bytes(point, "osc_k"))


def queue_near_k(ctx: CheckContext) -> Outcome:
    """At the K of the guideline and above, the queue oscillates around K as DCTCP's
    analysis predicts: mean within ``mean_band`` of the model, amplitude within a
    factor ``amplitude_factor``."""
    runs = ctx.runs
    assert runs is not None
    band = float(ctx.params.get("mean_band", 0.35))
    factor = float(ctx.params.get("amplitude_factor", 2.0))
    lines, bad = [], []
    for point in ctx.params.get("points", ["40K", "160K"]):
        mean = runs.metric("mean queue", point=point)
        mean_model = runs.metric("mean queue", point=point, column="predicted")
        amp = runs.metric("queue amplitude", point=point)
        amp_model = runs.metric("queue amplitude", point=point, column="predicted")
        lines.append(f"K = {point}: mean queue {mean:.1f} KB (model {mean_model:.1f}), amplitude "
                     f"{amp:.1f} KB (model {amp_model:.1f})")
        if not (abs(mean - mean_model) <= band * mean_model
                and amp_model / factor <= amp <= amp_model * factor):
            bad.append(point)
    if bad:
        return fail(f"the queue does not oscillate near K as DCTCP's does at K = {', '.join(bad)}: "
                    + "; ".join(lines) + f" (mean within {band:.0%}, amplitude within a factor "
                    f"{factor:g} of the analysis)")
    return ok("; ".join(lines))


def throughput_vs_k(ctx: CheckContext) -> Outcome:
    """Full throughput at a large K; less once K is far below C x RTT / 7."""
    runs = ctx.runs
    assert runs is not None
    small, large = ctx.params.get("small", "4K"), ctx.params.get("large", "160K")
    t_small = runs.metric("aggregate throughput", point=small)
    t_large = runs.metric("aggregate throughput", point=large)
    capacity = runs.metric("aggregate throughput", point=large, column="predicted")
    need = float(ctx.params.get("utilisation", 0.9))
    drop = float(ctx.params.get("min_drop", 0.015))
    text = (f"throughput {t_small:.1f} Gb/s at K = {small}, {t_large:.1f} Gb/s at K = {large} "
            f"(the port's payload rate: {capacity:.1f} Gb/s)")
    if not t_large >= need * capacity:
        return fail(f"{text}: at a large K the flows should keep the port busy (>= {need:.0%})")
    if not t_small <= (1 - drop) * t_large:
        return fail(f"{text}: far below C x RTT / 7 the queue should empty each period and cost "
                    f"throughput (at least {drop:.1%} less)")
    return ok(text)


def plots(runs: dict[str, ScenarioRuns], out: Path, code: StudentCode) -> list[Path]:
    """Throughput and mean queue against K, beside the analysis and C x RTT / 7."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sr = runs.get("ksweep")
    if sr is None or not any(r.valid for r in sr.runs):
        return []
    ks, thr, mean, model = [], [], [], []
    rtt_us = port_gbps = math.nan
    for point in sr.points():
        tables = sr.table("cc.csv", point)
        if not tables:
            continue
        row = tables[0].iloc[0]
        rtt_us, port_gbps = float(row.rtt_us), float(row.port_gbps)
        ks.append(_k_bytes(str(point)) / 1e3)
        thr.append(sr.metric("aggregate throughput", point=point))
        mean.append(sr.metric("mean queue", point=point))
        model.append(sr.metric("mean queue", point=point, column="predicted"))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(ks, thr, "o-", label="measured")
    ax1.set(xscale="log", xlabel="K (KB)", ylabel="throughput (Gb/s, payload)",
            title="throughput against K")
    ax2.plot(ks, mean, "o-", label="measured")
    ax2.plot(ks, model, "s--", label="DCTCP analysis")
    ax2.plot(ks, ks, ":", color="grey", label="K")
    ax2.set(xscale="log", yscale="log", xlabel="K (KB)", ylabel="mean queue (KB)",
            title="mean queue against K")
    guide_kb = port_gbps * 1e9 * rtt_us * 1e-6 / 8 / 7 / 1e3
    for ax in (ax1, ax2):
        ax.axvline(guide_kb, color="red", lw=0.8, label=f"C x RTT / 7 = {guide_kb:.1f} KB")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("Lab 1: DCTCP at three K (real-fabric units)")
    fig.tight_layout()
    path = out / "lab1_k_sweep.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return [path]

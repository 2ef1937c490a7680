"""Lab 4's checks: HPCC's utilisation, window and rate on a simulated clock with
scripted INT records, then the student's class beside DCQCN in `emu run cc`'s incast.

The scripted path: a 100G NIC, base RTT T = 8 us (so B_nic T = 100,000 bytes), and
one record per switch egress port, its ``tx_bytes`` counter advanced by the rate the
script gives over the records' time step. The expected values are Algorithm 1 of Li
et al. (SIGCOMM 2019) applied to those records by hand, never the reference solution.
Where the paper leaves room the checks accept any reading of it: the current record's
queue or the smaller of the two (a port's queue is the same in both records here), a
reference update one ACK earlier or later, ``incStage`` compared one stage early or
late. U is read from ``trace()``'s third value, W from ``window_bytes``.

On the fabric (three runs of ``emu run cc --quick``, algorithms ``dcqcn;{student}``,
scenario ``incast``, medians) the checks grade the orderings the paper predicts and the
project measured: the mean bottleneck queue and the incast frames' median latency a
fraction of DCQCN's (they tell a reacting HPCC from a window that never moves), the peak
queue below DCQCN's and no drop (what any window of at most B_nic T gives here). The
short victim flow's latency is not graded: it never crosses the bottleneck, and over 15
runs it was lower with one or the other by turns (README.md, "What to expect").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

from core.safefile import save_figure
from labs.emulation import ScenarioRuns
from labs.grader import CheckContext
from labs.harness import Harness, HarnessError
from labs.student import StudentCode
from labs.verdict import Outcome, fail, ok, ungraded
from traffic.ccalgos import IntRecord

MTU = 4096
NIC_BPS = 100e9
T_S = 8e-6                      # base RTT T
W_MAX = NIC_BPS * T_S / 8       # B_nic T = 100,000 bytes: the line-rate start
W_AI = 2000.0                   # large enough that forgetting it shows
ETA = 0.95
MAX_STAGE = 5
#: The ACKs' RTT samples: a queue adds a quarter to the base RTT, so that a class that
#: takes T from the samples instead of base_rtt_s is seen.
RTT_SAMPLE_S = 1.25 * T_S
REL = 1e-6                      # the arithmetic is exact up to rounding


class Path_:
    """The ports of a scripted path: each call gives one ACK's records after ``tau_s``
    of traffic at the given rates, with the given queues."""

    def __init__(self, rates_bps: Sequence[float], t0_s: float = 1e-3):
        self.rates_bps = list(rates_bps)
        self.tx_bytes = [0] * len(rates_bps)
        self.ts_s = t0_s

    def records(self, tau_s: float = 0.0, tx_bps: Sequence[float] | None = None,
                qlen_bytes: Sequence[float] | None = None) -> list[IntRecord]:
        self.ts_s += tau_s
        tx = tx_bps or [0.0] * len(self.rates_bps)
        for j, r in enumerate(tx):
            self.tx_bytes[j] += round(r * tau_s / 8)
        q = qlen_bytes or [0.0] * len(self.rates_bps)
        return [IntRecord(float(q[j]), self.tx_bytes[j], self.ts_s, self.rates_bps[j])
                for j in range(len(self.rates_bps))]


def definition(old: IntRecord, new: IntRecord, t_s: float = T_S) -> tuple[float, float]:
    """(queue term, rate term) of u_j by the paper's definition, for the feedback."""
    tau = new.ts_s - old.ts_s
    queue = new.qlen_bytes * 8 / (new.rate_bps * t_s)
    rate = (new.tx_bytes - old.tx_bytes) * 8 / tau / new.rate_bps
    return queue, rate


def close(got: float | None, want: float, rel: float = REL) -> bool:
    return got is not None and math.isfinite(got) and abs(got - want) <= rel * abs(want) + 1e-12


def which(got: float, candidates: dict[str, float]) -> str:
    """The first mistake whose value ``got`` matches, as a hint in brackets, or ''."""
    for hint, value in candidates.items():
        if close(got, value, 1e-4):
            return f" ({hint})"
    return ""


def utilisation(ctx: CheckContext, h: Harness) -> float:
    return float(ctx.code.call("trace()", h.cc.trace)[2])


def window(h: Harness) -> float:
    return float(h.read().window_bytes or 0.0)


def hpcc(ctx: CheckContext, **params: float) -> Harness:
    return ctx.harness(NIC_BPS, 0.0, base_rtt_s=T_S, eta=ETA, max_stage=MAX_STAGE,
                       w_ai_bytes=W_AI, min_window_bytes=float(MTU), **params)


def ack(h: Harness, records: list[IntRecord], dt_s: float) -> float:
    """One ACK with ``records``, ``dt_s`` after the last event; the window after it."""
    return float(h.ack(MTU, RTT_SAMPLE_S, False, records, dt_s=dt_s).window_bytes or 0.0)


#: ACKs this far apart each end a round trip (their frames left after the last update).
SPACED_S = 1.5 * RTT_SAMPLE_S


class OneHop:
    """A fresh HPCC on one 100G hop. ``rtts(loads)``: one ACK per round trip for each
    (qlen_bytes, tx_bps), its records T after the last (so U = u at once), after a first
    ACK whose records only serve to compare with. A port's queue never grows from one
    record to the next, so the current queue and the smaller of the two agree."""

    def __init__(self, ctx: CheckContext):
        self.h = hpcc(ctx)
        self.path = Path_([NIC_BPS])
        self.started = False

    def rtts(self, loads: Sequence[tuple[float, float]]) -> list[float]:
        if not self.started:
            ack(self.h, self.path.records(0.0, [0.0], [loads[0][0]]), SPACED_S)
            self.started = True
        return [ack(self.h, self.path.records(T_S, [r], [q]), SPACED_S) for q, r in loads]


# ----------------------------------------------------------------------------- TODO 1, 2

def single_hop_utilisation(ctx: CheckContext) -> Outcome:
    """u = qlen / (B T) + txRate / B on one hop, for a queue alone, a rate alone, both."""
    cases = [("a 30,000-byte queue, nothing sent", 30_000.0, 0.0),
             ("no queue, 70 Gb/s sent", 0.0, 70e9),
             ("a 20,000-byte queue and 90 Gb/s sent", 20_000.0, 90e9)]
    lines = []
    for what, qlen, tx_bps in cases:
        h = hpcc(ctx)
        path = Path_([NIC_BPS])
        old = path.records(0.0, [0.0], [qlen])
        ack(h, old, SPACED_S)
        u0 = utilisation(ctx, h)
        new = path.records(T_S, [tx_bps], [qlen])
        ack(h, new, SPACED_S)
        got = utilisation(ctx, h)
        q, r = definition(old[0], new[0])
        want = q + r
        if not close(got, want):
            hint = which(got, {
                "U did not move: does hop_utilisation return (u_j, tau_j), and does "
                "TODO 2 write U?": u0,
                "the queue is in bytes and B T in bits: qlen * 8 / (B T)": q / 8 + r,
                "txRate is bytes over seconds: times 8 for bit/s": q + r / 8,
                "bytes against bits in both terms": (q + r) / 8,
                "T is the base RTT (base_rtt_s), not the ACK's RTT sample":
                    q * T_S / RTT_SAMPLE_S + r,
                "the queue term is missing": r, "the rate term is missing": q,
                "ts_s and T are seconds: no conversion to microseconds":
                    q + r * 1e-6 if r else math.nan,
                "ts_s is in seconds, not microseconds": q + r * 1e6 if r else math.nan,
                "T is in seconds, not microseconds": q * 1e6 + r if q else math.nan,
            })
            return fail(f"with {what} over T = {T_S * 1e6:g} us on a {NIC_BPS / 1e9:g}G port, "
                        f"U = {got:.6g}; u = qlen/(B T) + txRate/B = {q:.4g} + {r:.4g} = "
                        f"{want:.4g} (two records T apart give U = u){hint}")
        lines.append(f"{want:.2f}")
    return ok(f"U = {', '.join(lines)} for a queue alone, a rate alone, both")


def largest_hop(ctx: CheckContext) -> Outcome:
    """U follows the most loaded hop, each hop with its own rate B_j."""
    rates = [300e9, 300e9, 100e9]                 # leaf uplink, spine down, leaf to host
    tx, qlen = [150e9, 240e9, 60e9], [0.0, 30_000.0, 10_000.0]
    h = hpcc(ctx)
    path = Path_(rates)
    old = path.records(0.0, tx, qlen)
    ack(h, old, SPACED_S)
    new = path.records(T_S, tx, qlen)
    ack(h, new, SPACED_S)
    got = utilisation(ctx, h)
    terms = [definition(o, n) for o, n in zip(old, new, strict=True)]
    u = [q + r for q, r in terms]
    want = max(u)
    if not close(got, want):
        hint = which(got, {
            "the first hop, not the largest": u[0], "the last hop, not the largest": u[-1],
            "the sum over the hops, not the largest": sum(u),
            "the mean over the hops, not the largest": sum(u) / len(u),
            "each hop's B_j is its own port rate (record.rate_bps), not the NIC's":
                max((q * rates[j] + r * rates[j]) / NIC_BPS for j, (q, r) in enumerate(terms)),
        })
        return fail(f"three hops (300G, 300G, 100G) at u_j = "
                    f"{', '.join(f'{x:.2f}' for x in u)} gave U = {got:.6g}; HPCC reacts to the "
                    f"most loaded hop: U = {want:.2f}{hint}")
    return ok(f"u_j = {', '.join(f'{x:.2f}' for x in u)}: U = {got:.3f}")


def ewma(ctx: CheckContext) -> Outcome:
    """U <- (1 - tau/T) U + (tau/T) u, with tau capped at T."""
    h = hpcc(ctx)
    path = Path_([NIC_BPS])
    ack(h, path.records(), SPACED_S)
    ack(h, path.records(T_S, [60e9]), SPACED_S)
    u1 = utilisation(ctx, h)
    if not close(u1, 0.6):
        return fail(f"records T apart at 60 Gb/s on a 100G port gave U = {u1:.6g}; with tau = T "
                    "the EWMA weighs the new sample fully: U = u = 0.6 (do TODO 1 first)")
    ack(h, path.records(T_S / 4, [100e9]), T_S / 4)
    u2 = utilisation(ctx, h)
    want2 = 0.75 * 0.6 + 0.25 * 1.0
    if not close(u2, want2):
        hint = which(u2, {"U took the new sample whole: the EWMA weighs it by tau/T": 1.0,
                          "the weights are swapped: (1 - tau/T) belongs to the old U":
                              0.25 * 0.6 + 0.75 * 1.0,
                          "U did not move: the EWMA adds (tau/T) u": 0.6})
        return fail(f"from U = 0.6, records T/4 apart at 100 Gb/s (u = 1.0) gave U = {u2:.6g}; "
                    f"(1 - tau/T) U + (tau/T) u = {want2:.4g}{hint}")
    try:
        ack(h, path.records(2 * T_S, [20e9]), 2 * T_S)
    except HarnessError as e:
        return fail(f"records 2T apart (u = 0.2) broke the window: {e} (tau is capped at T, "
                    "else the EWMA's weight 1 - tau/T turns negative)")
    u3 = utilisation(ctx, h)
    if not close(u3, 0.2):
        hint = which(u3, {"tau is capped at T: min(tau, T) / T is at most 1":
                          -1.0 * want2 + 2.0 * 0.2})
        return fail(f"from U = {want2:.2f}, records 2T apart at 20 Gb/s (u = 0.2) gave U = "
                    f"{u3:.6g}; with tau capped at T the weight is 1: U = 0.2{hint}")
    return ok(f"U = 0.6 -> {u2:.3f} (tau = T/4) -> {u3:.3f} (tau = 2T, capped at T)")


# ----------------------------------------------------------------------------- TODO 3

def _moved(w: float) -> str:
    return (" (W stayed at B_nic T: U above eta must shrink it, W_c / (U / eta), not "
            "W_c (U / eta); or is TODO 3 not done yet? TODO 1 and TODO 2 move U first)"
            if close(w, W_MAX) else "")


def multiplicative_decrease(ctx: CheckContext) -> Outcome:
    """U above eta: W = W_c / (U / eta) + W_AI, the reference window moving once per RTT."""
    w1, w2 = OneHop(ctx).rtts([(50_000.0, 100e9), (20_000.0, 100e9)])
    want1 = W_MAX * ETA / 1.5 + W_AI
    if not close(w1, want1):
        hint = which(w1, {"W_AI is added after the multiplicative step too": want1 - W_AI,
                          "W_c / (U / eta): eta is missing": W_MAX / 1.5 + W_AI,
                          "U / eta is inverted": W_MAX * 1.5 / ETA + W_AI}) or _moved(w1)
        return fail(f"from W_c = {W_MAX:.0f} B, U = 1.5 (eta = {ETA}) gave W = {w1:.1f} B; "
                    f"W_c / (U / eta) + W_AI = {want1:.1f} B{hint}")
    want2 = want1 * ETA / 1.2 + W_AI
    if not close(w2, want2):
        hint = which(w2, {"W_c was not updated to W at the round trip's first ACK":
                          W_MAX * ETA / 1.2 + W_AI})
        return fail(f"one round trip later, U = 1.2 gave W = {w2:.1f} B; from W_c = {want1:.1f} B "
                    f"(the last round trip's W) W_c / (U / eta) + W_AI = {want2:.1f} B{hint}")
    return ok(f"W = {W_MAX:.0f} -> {w1:.1f} (U = 1.5) -> {w2:.1f} B (U = 1.2)")


def additive_increase(ctx: CheckContext) -> Outcome:
    """U below eta: W_c + W_AI per RTT, multiplicative again after maxStage stages."""
    script = OneHop(ctx)
    (w_md,) = script.rtts([(50_000.0, 100e9)])
    if not close(w_md, W_MAX * ETA / 1.5 + W_AI):
        return fail(f"U = 1.5 took W to {w_md:.1f} B, not W_c / (U / eta) + W_AI: pass the "
                    "multiplicative-decrease check first")
    u = 0.8
    windows = script.rtts([(0.0, u * NIC_BPS)] * (MAX_STAGE + 2))
    prev = w_md
    for stage, w in enumerate(windows, start=1):
        additive = prev + W_AI
        multiplicative = min(W_MAX, prev * ETA / u + W_AI)
        if close(w, multiplicative) and stage >= MAX_STAGE:
            return ok(f"W = {w_md:.0f} + {stage - 1} x W_AI = {prev:.0f} B over {stage - 1} "
                      f"round trips at U = {u}, then x eta/U: {w:.0f} B")
        if not close(w, additive):
            hint = which(w, {"below eta, before maxStage stages, HPCC adds W_AI: "
                             "W = W_c + W_AI": multiplicative,
                             "W_c was not updated to W at the round trip's first ACK":
                                 w_md + W_AI}) or _moved(w)
            return fail(f"round trip {stage} at U = {u} < eta took W from {prev:.1f} B to "
                        f"{w:.1f} B; W_c + W_AI = {additive:.1f} B{hint}")
        prev = w
    return fail(f"{len(windows)} round trips at U = {u} < eta only added W_AI ({prev:.0f} B); "
                f"after maxStage = {MAX_STAGE} additive stages HPCC grows by W_c / (U / eta) + "
                "W_AI (is inc_stage counted on each update of W_c, and reset after a "
                "multiplicative step?)")


def once_per_rtt(ctx: CheckContext) -> Outcome:
    """Every ACK computes W from W_c; W_c itself moves once per round trip."""
    h = hpcc(ctx)
    path = Path_([NIC_BPS])
    load = ([100e9], [50_000.0])                     # u = 1.5, U stays 1.5
    ack(h, path.records(0.0, *load), SPACED_S)
    w1 = ack(h, path.records(T_S, *load), SPACED_S)
    want1 = W_MAX * ETA / 1.5 + W_AI
    if not close(w1, want1):
        return fail(f"U = 1.5 took W to {w1:.1f} B, not W_c / (U / eta) + W_AI = {want1:.1f} B: "
                    "pass the multiplicative-decrease check first")
    step = RTT_SAMPLE_S / 5
    # Three ACKs within the round trip after that update: their frames left before it
    # (and less than T has passed, for a round trip timed on the base RTT instead).
    within = [ack(h, path.records(step, *load), step) for _ in range(3)]
    want2 = want1 * ETA / 1.5 + W_AI
    for k, w in enumerate(within, start=1):
        if not close(w, want2):
            hint = which(w, {"W_c moves once per round trip, not on every ACK":
                             want2 * ETA / 1.5 + W_AI,
                             "every ACK computes W from W_c (HPCC reacts per ACK); only W_c "
                             "waits for the round trip": want1})
            return fail(f"ACK {k} of the round trip after W_c = {want1:.1f} B, at U = 1.5, left "
                        f"W = {w:.1f} B; every ACK of that round trip gives W_c / (U / eta) + "
                        f"W_AI = {want2:.1f} B{hint}")
    # Four more ACKs (T to 1.75 T after the update): the round trip ends at one of them
    # (at T, 1.25 T or 1.5 T, by the reading of "sent after"), and W_c becomes W.
    after = [ack(h, path.records(step, *load), step) for _ in range(4)]
    want3 = want2 * ETA / 1.5 + W_AI
    if not close(after[-1], want3):
        return fail(f"a round trip later W is {after[-1]:.1f} B; the first ACK of the new round "
                    f"trip sets W_c = {want2:.1f} B, and W_c / (U / eta) + W_AI = {want3:.1f} B "
                    "(is W_c updated when update_reference is True?)")
    return ok(f"W_c held at {want1:.0f} B for a round trip (W = {want2:.0f} B on each ACK), "
              f"then W_c = {want2:.0f} B and W = {want3:.0f} B")


def clamp(ctx: CheckContext) -> Outcome:
    """W stays within [min_window_bytes, B_nic T] (the rate within the NIC's)."""
    low = OneHop(ctx).rtts([(1_900_000.0, 100e9)] * 6)           # u = 20
    if min(low) < MTU * (1 - REL):
        return fail(f"six round trips at U = 20 took W down to {min(low):.1f} B; it must stay "
                    f">= min_window_bytes = {MTU} B (one frame in flight)")
    if min(low) > 1.01 * MTU:
        return fail(f"six round trips at U = 20 left W at {min(low):.1f} B or more; W_c / (U / "
                    f"eta) + W_AI should have reached the floor of {MTU} B" + _moved(low[0]))
    high = OneHop(ctx).rtts([(0.0, 20e9)] * 12)                  # u = 0.2
    if max(high) > W_MAX * (1 + REL):
        return fail(f"at U = 0.2 W grew to {max(high):.1f} B; it must stay <= B_nic T = "
                    f"{W_MAX:.0f} B (line rate for one base RTT)")
    return ok(f"W within [{min(low):.0f}, {max(high):.0f}] B")


# ----------------------------------------------------------------------------- TODO 4

def rate(ctx: CheckContext) -> Outcome:
    """R = W / T in bit/s, with T the base RTT."""
    script = OneHop(ctx)
    r0 = script.h.read().rate_bps
    if not close(r0, NIC_BPS):
        hint = which(r0, {"W is in bytes: times 8 for bit/s": NIC_BPS / 8})
        return fail(f"at the start W = {W_MAX:.0f} B = B_nic T, so R = W / T is the line rate "
                    f"{NIC_BPS / 1e9:g} Gb/s; rate_bps is {r0 / 1e9:.6g} Gb/s{hint}")
    w, w2 = script.rtts([(50_000.0, 100e9), (0.0, 50e9)])
    if close(w, W_MAX):
        return fail("the window never moved, so the rate cannot be checked yet (do TODO 1 "
                    "to TODO 3 first)")
    got = script.h.read().rate_bps
    want = w2 * 8 / T_S
    if not close(got, want):
        hint = which(got, {"W is in bytes: times 8 for bit/s": w2 / T_S,
                           "T is the base RTT (base_rtt_s), not the ACK's RTT sample":
                               w2 * 8 / RTT_SAMPLE_S,
                           "the rate follows the window": NIC_BPS})
        return fail(f"W = {w2:.1f} B and T = {T_S * 1e6:g} us give R = W / T = "
                    f"{want / 1e9:.4f} Gb/s; rate_bps is {got / 1e9:.6g} Gb/s{hint}")
    return ok(f"W = {w2:.0f} B: R = {got / 1e9:.2f} Gb/s")


# ----------------------------------------------------------------------------- emulation

def _cases(ctx: CheckContext) -> tuple[str, str]:
    """The substrings of the DCQCN case's and the student's case's names in metrics.csv
    ("incast cc=dcqcn pfc=off", "incast cc=hpcc_lab.py:LabHpcc pfc=off")."""
    return "cc=dcqcn pfc", f":{ctx.lab.student_class} pfc"


def _pair(ctx: CheckContext, metric: str) -> tuple[float, float]:
    runs = ctx.runs
    assert runs is not None
    dcqcn, mine = _cases(ctx)
    return runs.metric(metric, mine), runs.metric(metric, dcqcn)


def _ratio_check(ctx: CheckContext, metric: str, unit: str, default: float, why: str) -> Outcome:
    limit = float(ctx.params.get("max_ratio", default))
    mine, dcqcn = _pair(ctx, metric)
    if math.isnan(dcqcn) or dcqcn <= 0:
        return ungraded(f"the DCQCN case measured no {metric} to compare with")
    if math.isnan(mine):
        return fail(f"your incast measured no {metric} (did it finish?)")
    n = len(ctx.runs.valid_runs()) if ctx.runs else 0
    text = (f"{metric}: yours {mine:.1f} {unit}, DCQCN's {dcqcn:.1f} {unit} "
            f"(ratio {mine / dcqcn:.3f}, median of {n} run(s))")
    if mine > limit * dcqcn:
        return fail(f"{text}; HPCC's should be at most {limit:g}x DCQCN's: {why}")
    return ok(f"{text} <= {limit:g}x")


def mean_queue(ctx: CheckContext) -> Outcome:
    return _ratio_check(ctx, "mean queue", "KB", 0.25,
                        "it drains the line-rate start's queue within a round trip or two and "
                        "then holds U near eta < 1, so no standing queue (does W shrink when "
                        "U > eta?)")


def peak_queue(ctx: CheckContext) -> Outcome:
    return _ratio_check(ctx, "peak queue", "KB", 0.5,
                        "after the first round trip, whose line-rate windows set the peak, the "
                        "INT records stop the senders before the queue grows further")


def _median_latency_us(ctx: CheckContext, case_part: str) -> float:
    """The median over the valid runs of the incast frames' median one-way latency in
    the case whose name contains ``case_part`` (the victim's frames left out)."""
    runs = ctx.runs
    assert runs is not None
    per_run = []
    for lat, msgs in zip(runs.table("latency.csv"), runs.table("messages.csv"), strict=True):
        case = lat[lat.case.str.contains(case_part, regex=False)]
        victims = msgs[msgs.case.str.contains(case_part, regex=False) & (msgs.tag == "victim")]
        frames = case[~case.msg_id.isin(victims.msg_id)]
        if not frames.empty:
            per_run.append(float(frames.one_way_s.median()) * 1e6)
    return statistics.median(per_run) if per_run else math.nan


def incast_latency(ctx: CheckContext) -> Outcome:
    """The typical incast frame waits behind no standing queue: its median one-way
    latency is a fraction of DCQCN's. (The p99 is set by the line-rate start's first
    round trip, which no reaction can avoid: it is reported, not graded.)"""
    limit = float(ctx.params.get("max_ratio", 0.35))
    dcqcn_case, mine_case = _cases(ctx)
    mine, dcqcn = _median_latency_us(ctx, mine_case), _median_latency_us(ctx, dcqcn_case)
    if math.isnan(dcqcn) or dcqcn <= 0:
        return ungraded("the DCQCN case measured no latency to compare with")
    if math.isnan(mine):
        return fail("your incast's frames measured no latency (did it run?)")
    p99_mine, p99_dcqcn = _pair(ctx, "latency p99")
    text = (f"median one-way latency of the incast's frames: yours {mine:.2f} us, DCQCN's "
            f"{dcqcn:.2f} us (ratio {mine / dcqcn:.3f}; p99 {p99_mine:.1f} against "
            f"{p99_dcqcn:.1f} us)")
    if mine > limit * dcqcn:
        return fail(f"{text}; HPCC's should be at most {limit:g}x DCQCN's: once the first "
                    "round trip's queue has drained, a frame should find almost no queue "
                    "(does U include the queue term, and does W shrink when U > eta?)")
    return ok(f"{text} <= {limit:g}x")


def no_drops(ctx: CheckContext) -> Outcome:
    runs = ctx.runs
    assert runs is not None
    _, mine = _cases(ctx)
    drops = []
    for r in runs.valid_runs():
        assert r.metrics is not None
        m = r.metrics
        rows = m[(m.metric == "drops") & m.case.str.contains(mine, regex=False)]
        drops.extend(float(v) for v in rows.measured)
    dcqcn = runs.metric("drops", _cases(ctx)[0])
    if not drops:
        return fail("your incast measured no drop count (did it run?)")
    text = (f"drops per run: {', '.join(f'{d:.0f}' for d in drops)} (DCQCN's median: "
            f"{dcqcn:.0f})")
    if max(drops) > 0:
        return fail(f"{text}; with a queue of about 110 KB at its peak, HPCC never fills the "
                    "512 KiB buffer: no frame should be lost")
    return ok(text)


def plots(runs: dict[str, ScenarioRuns], out: Path, code: StudentCode) -> list[Path]:
    """The bottleneck queue over time, each case of the first valid run, on one axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sr = runs.get("incast")
    tables = sr.table("queue.csv") if sr is not None else []
    if not tables:
        return []
    q = tables[0]
    fig, ax = plt.subplots(figsize=(9, 4))
    for case, g in q.groupby("case", sort=False):
        label = str(case).removeprefix("incast ").removesuffix(" pfc=off")
        ax.plot(g.t_s * 1e6, g.backlog_bytes / 1e3, lw=1, label=label)
    busy = q[q.backlog_bytes > 0]
    if not busy.empty:                 # the first frames reach the port at about t = 0
        ax.set_xlim(left=float(busy.t_s.min()) * 1e6 - 5)
    ax.axhline(512 * 1024 / 1e3, color="grey", ls=":", lw=0.8, label="buffer (512 KiB)")
    ax.set(xlabel="time (us, real fabric)", ylabel="bottleneck queue (KB)",
           title="Lab 4: incast bottleneck (l3 -> h9) queue, DCQCN vs your HPCC")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "lab4_queue.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return [path]

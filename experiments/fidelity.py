"""Fidelity gate: is an emulated run a faithful picture of the real fabric? (docs/design.md)

Pure checks over what a run measured; no kernel access. A run is *valid* when

* every traffic message completed and the engine reported no error;
* shaped ports delivered their configured rate: no port sent faster than
  configured (the shaper leaked), and ports the model says were saturated over a
  window reached their rate over that window (else the engine or the kernel could
  not offer the load: the fabric measured the machine, not the network);
* the engine kept its pacing schedule: the p99 lag of a send behind its due time
  is at most two dilated packet times. The engine paces against absolute due
  times and the host port is itself shaped at line rate, so a frame late by up to
  two packet times leaves together with the next one and the shaper re-spaces
  them: no rate is lost and the extra NIC queueing is at most one frame. Beyond
  that the engine falls frames behind and bursts, distorting rate and latency.
  The lag is also judged as it accumulated: the mean lag per frame stays below
  half a packet time, and no stall made a schedule drop its debt (a reset);
* every host NIC that was busy sent at the rate its schedule allotted it during
  its busy periods of at least a few full frames (shorter ones are wake-up lag,
  judged above): busy time (first frame out to last frame out) at most
  1 / (1 - rate_under) times the time the schedule gave the same frames. The
  schedule runs at min(line rate, congestion-control rate), the sender's share
  the model allocates to it when the network does not push back;
* the machine had headroom: the fraction of ALL its CPU time that was busy over
  the run (/proc/stat: every process, the kernel's forwarding and softirq
  included) stays below a ceiling. A busy machine delays the shapers' timers
  and the engine alike, whatever the engine's own use; without that figure the
  workers' own CPU (busy CPU seconds / (wall x workers)) is judged instead;
* the hypervisor left the machine its CPUs: it took (steal) at most 1 % of all CPU
  time over the run. A stolen CPU stalls the kernel's shapers and a window's
  reaction to its marks, which no engine lag shows, for many packet times at once;
  the lag checks let at most 1 % of the sends be that late, and the fabric is held
  to the same share;
* a run that lagged was not slowed by the hypervisor without it counting steal:
  every CPU ran at under 1/4 of its speed for at most 1 % of it
  (``engine.speedprobe``: a fixed piece of work timed every 4 ms on each CPU). A
  host's CPU quota does that for spells of 20-50 ms with no steal counted; the lag
  checks see its effect on the workers, this one names the cause. Throttled runs
  that kept their timing matched valid ones, so it is judged only beside a failed
  lag check. A run that fails either machine check with the machine's CPU below its
  ceiling suggests no larger S;
* nothing was lost outside the modelled fabric: no receive-ring drops, and no
  retransmissions unless a switch port dropped frames, or the routing mode reorders
  a flow by design (spraying, adaptive, flowlets) and the transport is go-back-N,
  which retransmits after every out-of-sequence frame (then some frames must have
  arrived out of sequence). Selective repeat's tolerance is derived from the
  fabric's worst reordering (``traffic.reorder_bound``), so under it a
  retransmission without a drop is refused whatever the routing;
* ECN marks and CNPs agree with the configuration: no marks without a marker; a
  queue above Kmax was marked (every packet there is); no marks without a queue
  above Kmin; receivers saw at most the packets switches marked; with DCQCN on,
  marked packets produced CNPs, at most one per marked packet, and senders
  received at most the CNPs receivers sent; with CC off no sender reacted.

Resource failures (rate, lag, CPU) come with a suggested scale factor: a larger S
slows the fabric down, so the same machine keeps up. Scale rules: core/scaling.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from engine.speedprobe import SLOW_FACTOR
from engine.stats import EngineStats


@dataclass(frozen=True)
class PortRate:
    """Rate of one shaped port over a window (real bit/s)."""

    port: str
    configured_bps: float
    achieved_bps: float
    #: The model says the port is busy for the whole window, so it must reach its rate.
    expect_saturated: bool = False
    #: The most a shaped port can show for the bytes it carried in this window: its rate
    #: plus what an idle shaper lets through at the start of each busy period
    #: (emu.wirerate.capacity_bound_bps). Above it (beyond ``uncertainty``) the shaper
    #: or the measurement is wrong.
    capacity_bps: float | None = None  # None: the configured rate, no burst allowance
    #: Relative uncertainty of ``achieved_bps``: its window's (measured edges: small;
    #: a window the model gives: the model's own error).
    uncertainty: float = 0.01


@dataclass(frozen=True)
class PortQueue:
    """Queue and marks of one marked switch port over a run.

    The highest queue a packet found is known within [lo, hi]: the marker's
    per-packet histogram gives a bucket; periodic samples give only a lower bound
    (hi = inf), as they may miss the peak.
    """

    port: str
    kmin_bytes: float
    kmax_bytes: float
    max_queue_lo_bytes: float
    max_queue_hi_bytes: float
    marks: int


@dataclass(frozen=True)
class MarkingCounts:
    """ECN and CNP counts of one traffic run."""

    marking: bool                 # a marker was attached to the switch ports
    cc: bool                      # DCQCN reaction point on at the senders
    marks: int                    # CE marks made by switch ports
    ce_received: int              # CE-marked packets seen by receivers
    cnps_sent: int                # CNPs sent by receivers (notification points)
    cnps_received: int            # CNPs received by senders (reaction points)
    rate_reductions: int = 0      # DCQCN rate cuts at the senders
    ports: Sequence[PortQueue] = ()


@dataclass(frozen=True)
class RunMeasures:
    """What the gate needs from one traffic run: the engine's own report, read as it
    is, and what was measured around it."""

    engine: EngineStats           # pacing and receive lag, NIC busy time, CPU, drops, errors
    packet_time_s: float          # real serialization time of a full packet at the NIC
    messages_expected: int
    messages_completed: int
    port_rates: Sequence[PortRate] = ()
    marking: MarkingCounts | None = None
    fabric_drops: int = 0         # frames switch and host ports dropped
    #: The routing mode sends one flow's frames over several paths (reordering is real).
    reorders_by_design: bool = False


#: Checks of the machine alone, which no S passes: a run that fails one is not priced.
MACHINE_CHECKS = ("hypervisor steal", "hypervisor throttling")


@dataclass(frozen=True)
class Limits:
    """Tolerances of the gate (fractions)."""

    rate_under: float = 0.10      # a saturated port must reach 90 % of its rate
    cpu_busy: float = 0.90        # of wall x workers (when the machine's figure is unknown)
    machine_busy: float = 0.85    # of all CPU time of the machine
    steal_share: float = 0.01     # of all CPU time of the machine, taken by the hypervisor
    #: of the run's wall time, every CPU at under 1/4 of its speed (engine.speedprobe),
    #: judged where the run lagged
    throttled_share: float = 0.01
    lag_packets: float = 2.0      # p99 pacing lag, in dilated packet times
    lag_mean_packets: float = 0.5  # mean pacing lag per frame, in dilated packet times
    margin: float = 1.25          # head-room in the suggested scale


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    measured: float | None
    limit: float | None
    detail: str


@dataclass(frozen=True)
class FidelityReport:
    valid: bool
    reasons: list[str]
    suggested_scale: float
    checks: list[Check] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> FidelityReport:
        return cls(d["valid"], list(d["reasons"]), d["suggested_scale"],
                   [Check(**c) for c in d.get("checks", [])])


def nice_scale(x: float) -> float:
    """Round up to 1, 2 or 5 x 10^k (a scale factor people can type)."""
    if x <= 1:
        return 1.0
    exp = math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        if m * 10**exp >= x * (1 - 1e-12):
            return float(m * 10**exp)
    raise AssertionError("unreachable")


def _ratio_check(name: str, measured: float, limit: float, detail: str) -> tuple[Check, float]:
    """A resource check and the factor by which S must grow to pass it (1 if it passes)."""
    ok = measured <= limit
    return Check(name, ok, measured, limit, detail), (1.0 if ok else measured / limit)


def _rate_checks(rates: Sequence[PortRate], lim: Limits) -> tuple[list[Check], float]:
    checks, need = [], 1.0
    for r in rates:
        ratio = r.achieved_bps / r.configured_bps
        capacity = r.configured_bps if r.capacity_bps is None else r.capacity_bps
        ceiling = capacity / r.configured_bps * (1 + r.uncertainty)
        if ratio > ceiling:
            checks.append(Check(f"rate {r.port}", False, ratio, ceiling,
                                f"sent {ratio:.1%} of its configured rate, above the "
                                f"{ceiling:.1%} a shaped port can carry (capacity "
                                f"{capacity / r.configured_bps:.1%} of its rate, window "
                                f"uncertainty {r.uncertainty:.0%}): the shaper or the "
                                "measurement is wrong"))
        elif r.expect_saturated and ratio < 1 - lim.rate_under:
            checks.append(Check(f"rate {r.port}", False, ratio, 1 - lim.rate_under,
                                f"saturated port reached only {ratio:.1%} of its rate"))
            need = max(need, (1 - lim.rate_under / 2) / max(ratio, 1e-3))
        else:
            checks.append(Check(f"rate {r.port}", True, ratio, None,
                                f"{ratio:.1%} of configured rate"))
    return checks, need


def _marking_checks(m: MarkingCounts) -> list[Check]:
    def check(name: str, ok: bool, detail: str) -> Check:
        return Check(name, ok, None, None, detail)

    out = []
    if not m.marking:
        out.append(check("no marks without marker", m.marks == 0 and m.ce_received == 0,
                         f"{m.marks} marks, {m.ce_received} CE received with marking off"))
    else:
        out.append(check("marks received <= marks made", m.ce_received <= m.marks,
                         f"{m.ce_received} CE packets received, {m.marks} marked by switches"))
    for q in m.ports:
        # Above Kmax every ECT packet is marked; between Kmin and Kmax marking is random
        # and may legitimately not happen in a short excursion, so only Kmax forces marks.
        if q.max_queue_lo_bytes > q.kmax_bytes and q.marks == 0:
            out.append(check(f"queue above Kmax marked {q.port}", False,
                             f"queue reached {q.max_queue_lo_bytes:.0f} B > Kmax "
                             f"{q.kmax_bytes:.0f} B without a mark"))
        if q.max_queue_hi_bytes <= q.kmin_bytes and q.marks > 0:
            out.append(check(f"no marks below Kmin {q.port}", False,
                             f"{q.marks} marks but the queue never exceeded "
                             f"{q.max_queue_hi_bytes:.0f} B <= Kmin {q.kmin_bytes:.0f} B"))
    if m.cc:
        out.append(check("CE produced CNPs", m.ce_received == 0 or m.cnps_sent > 0,
                         f"{m.ce_received} CE received, {m.cnps_sent} CNPs sent"))
        out.append(check("at most one CNP per CE packet", m.cnps_sent <= m.ce_received,
                         f"{m.cnps_sent} CNPs sent for {m.ce_received} CE packets"))
        out.append(check("CNPs received <= sent", m.cnps_received <= m.cnps_sent,
                         f"{m.cnps_received} received, {m.cnps_sent} sent"))
    else:
        out.append(check("no rate cuts with CC off", m.rate_reductions == 0,
                         f"{m.rate_reductions} DCQCN rate reductions with CC off"))
    return out


def _stall_context(run: RunMeasures) -> str:
    """What took the CPU from the workers meanwhile, as far as the kernel tells."""
    parts = []
    cpu_wait_s = run.engine.cpu_wait_s_total
    if cpu_wait_s is not None:
        parts.append(f"workers waited {cpu_wait_s * 1e3:.1f} ms for a CPU")
    if run.engine.steal_s is not None:
        parts.append(f"the hypervisor took {run.engine.steal_s * 1e3:.0f} ms of CPU")
    if run.engine.throttled_s is not None:
        parts.append(f"every CPU ran at under 1/{SLOW_FACTOR} speed for "
                     f"{run.engine.throttled_s * 1e3:.0f} ms")
    return f" ({', '.join(parts)}, wall clock)" if parts else ""


def evaluate(run: RunMeasures, limits: Limits = Limits(),
             max_scale: float = math.inf) -> FidelityReport:
    """Run every check; ``max_scale`` is the largest S the topology allows (slowest link)."""
    eng = run.engine
    checks: list[Check] = []
    need = 1.0
    done = run.messages_completed == run.messages_expected and not eng.error
    checks.append(Check("traffic completed", done, run.messages_completed,
                        run.messages_expected,
                        eng.error or f"{run.messages_completed}/{run.messages_expected} messages"))

    rate_checks, rate_need = _rate_checks(run.port_rates, limits)
    checks += rate_checks
    need = max(need, rate_need)

    lag_checks, lag_need = _lag_checks(run, limits)
    checks += lag_checks
    need = max(need, lag_need)

    cpu, cpu_need = _cpu_check(eng, limits)
    checks.append(cpu)
    need = max(need, cpu_need)
    if eng.steal_share is not None:  # no S helps: the hypervisor's share is the same at any S
        checks.append(Check(
            "hypervisor steal", eng.steal_share <= limits.steal_share, eng.steal_share,
            limits.steal_share,
            f"the hypervisor took {eng.steal_share:.2%} of all CPU time during the run "
            f"(limit {limits.steal_share:.0%}): the kernel's shapers and the senders' "
            "reactions stalled with it; run again on a quieter machine"))
    if eng.throttled_share is not None:
        # Judged only beside a lag: runs throttled for 2.5-5.9 % that kept their timing
        # matched the valid ones beside them (docs/validation.md). It names the cause.
        lagged = not all(c.ok for c in lag_checks)
        checks.append(Check(
            "hypervisor throttling", not lagged or eng.throttled_share <= limits.throttled_share,
            eng.throttled_share, limits.throttled_share,
            f"every CPU ran at under 1/{SLOW_FACTOR} of its speed for "
            f"{eng.throttled_share:.1%} of the "
            f"run (limit {limits.throttled_share:.0%} where the run lagged), which the "
            "hypervisor did not count as steal (a host's CPU quota, for one)"
            + ("; the workers lagged with it: run again on a quieter machine" if lagged
               else "; the workers kept their timing")))
    if cpu.ok and not all(c.ok for c in checks if c.name in MACHINE_CHECKS):
        # The machine paused a run that left it head-room: a larger S does not make the
        # machine ours again. A busy machine may be short of CPU as well: priced.
        need = 1.0

    checks.append(Check("receive rings kept up", eng.ring_drops == 0, eng.ring_drops, 0,
                        f"{eng.ring_drops} frames dropped by full receive rings"))
    if eng.ring_drops:
        need = max(need, 2.0)  # a worker that reads late is short of CPU
    checks.append(_retransmission_check(run))

    if run.marking is not None:
        checks += _marking_checks(run.marking)

    reasons = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    scale = eng.scale.factor
    suggested = scale
    if need > 1:
        suggested = min(nice_scale(scale * need * limits.margin), max_scale)
        if suggested > scale:
            reasons.append(f"suggested scale factor S = {suggested:g} (now {scale:g})"
                           + (" -- the slowest link caps S here" if suggested == max_scale
                              else ""))
        else:  # never suggest an S that does not help
            suggested = scale
            reasons.append(f"no larger S helps here: the slowest link caps S at "
                           f"{max_scale:g} (now {scale:g})")
    return FidelityReport(not any(not c.ok for c in checks), reasons, suggested, checks)


def _retransmission_check(run: RunMeasures) -> Check:
    """Retransmissions only where the real fabric would make them: after drops, or
    go-back-N's after frames a reordering routing mode delivered out of sequence."""
    eng = run.engine
    reordered = (run.reorders_by_design and eng.transport == "gbn"
                 and eng.out_of_sequence > 0)
    expected = run.fabric_drops > 0 or reordered
    why = (f"{eng.retransmitted} frames retransmitted, {run.fabric_drops} dropped by ports, "
           f"{eng.out_of_sequence} received out of sequence")
    if eng.reorder_packets is not None:
        why += f" (selective repeat, reorder tolerance {eng.reorder_packets} PSNs)"
    elif reordered:
        why += " (go-back-N under a reordering routing mode)"
    return Check("no unexpected retransmissions", expected or eng.retransmitted == 0,
                 eng.retransmitted, None, why)


def _lag_checks(run: RunMeasures, limits: Limits) -> tuple[list[Check], float]:
    """Send and receive lag (p99, mean, dropped debt) and each NIC's rate while busy,
    against dilated packet times; and the factor S must grow by to pass them."""
    eng = run.engine
    checks: list[Check] = []
    need = 1.0
    packet_time_emu_s = eng.scale.time_emu_s(run.packet_time_s)
    # A frame read late is answered late: its ACK or CNP leaves late, and a sender held
    # to its window (HPCC, DCTCP, Swift) loses throughput that no send lag shows.
    starts = ("" if eng.start_lag_p99_emu_s is None else
              f"; messages started p99 {eng.start_lag_p99_emu_s * 1e3:.3f} ms behind "
              "their post times")
    for name, what, lag_s, more in (
            ("pacing lag p99", "send", eng.pacing_lag_p99_emu_s, starts),
            ("receive lag p99", "receive", eng.receive_lag_p99_emu_s, "")):
        lag, lag_need = _ratio_check(
            name, lag_s, limits.lag_packets * packet_time_emu_s,
            f"p99 {what} lag {lag_s * 1e3:.3f} ms emulated vs {limits.lag_packets:g} x "
            f"packet time {packet_time_emu_s * 1e3:.3f} ms{more}" + _stall_context(run))
        checks.append(lag)
        need = max(need, lag_need)

    if eng.data_packets_sent:
        mean_s = eng.pacing_lag_total_emu_s / eng.data_packets_sent
        mean, mean_need = _ratio_check(
            "pacing lag mean", mean_s, limits.lag_mean_packets * packet_time_emu_s,
            f"mean send lag {mean_s * 1e3:.3f} ms emulated over {eng.data_packets_sent} frames "
            f"vs {limits.lag_mean_packets:g} x packet time")
        checks.append(mean)
        need = max(need, mean_need)
    resets_ok = eng.pacing_resets == 0
    checks.append(Check("pacing debt kept", resets_ok, eng.pacing_resets, 0,
                        f"{eng.pacing_resets} stalls dropped "
                        f"{eng.pacing_dropped_emu_s * 1e3:.3f} ms of emulated schedule debt"))
    if not resets_ok:
        need = max(need, 2.0)
    for nb in eng.nics:
        if nb.busy_emu_s <= 0:
            continue
        ratio = nb.scheduled_emu_s / nb.busy_emu_s
        floor = 1 - limits.rate_under
        checks.append(Check(f"NIC rate {nb.name}", ratio >= floor, ratio, floor,
                            f"sent at {ratio:.1%} of its scheduled rate while busy"))
        if ratio < floor:
            need = max(need, floor / max(ratio, 1e-3))
    return checks, need


def _cpu_check(eng: EngineStats, limits: Limits) -> tuple[Check, float]:
    """The machine's CPU over the run, else the workers' own."""
    cpu_s = eng.cpu_s_total
    wall_s, n = eng.run_wall_s, eng.n_workers
    workers_busy = cpu_s / (wall_s * n) if wall_s > 0 and n else 0.0
    workers = f"workers {cpu_s:.1f} CPU s over {wall_s:.1f} s x {n}"
    if eng.machine_busy is not None:
        return _ratio_check(
            "machine CPU", eng.machine_busy, limits.machine_busy,
            f"{eng.machine_busy:.0%} of all CPU busy during the run ({workers})")
    return _ratio_check("engine CPU", workers_busy, limits.cpu_busy,
                        f"{workers} = {workers_busy:.0%}")


def combine(reports: Sequence[FidelityReport]) -> FidelityReport:
    """One verdict for a run made of several traffic cases (valid iff all are, and
    there is at least one: a run that measured nothing is not valid). The suggested S
    is the refused cases' (a valid case on a fabric of its own S suggests that S)."""
    if not reports:
        return FidelityReport(False, ["nothing was measured: no traffic case ran"], 1.0)
    reasons = [r for rep in reports for r in rep.reasons]
    refused = [rep for rep in reports if not rep.valid] or reports
    suggested = max(rep.suggested_scale for rep in refused)
    return FidelityReport(all(rep.valid for rep in reports), reasons, suggested,
                          [c for rep in reports for c in rep.checks])


def queue_divergence_checks(samples: dict[str, Sequence[tuple[float, float]]],
                            packet_bytes: float, limit_frames: float = 2.0) -> list[Check]:
    """The real queue against the marker's: per port, the median over samples of
    |qdisc backlog - virtual queue| (bytes), at most ``limit_frames`` frames.

    The marker decides marks from its virtual queue, the model assumes one queue: if
    the qdisc's real backlog drifts away from it (the shaper and the marker disagree
    on the rate, or the marker misses packets), marks and queueing no longer describe
    the same port. ``samples`` maps a port to (backlog, virtual queue) pairs read
    together; pairs where either is missing (NaN) are left out, and a port with none
    left is not judged."""
    out = []
    for port, pairs in samples.items():
        both = sorted(abs(b - v) for b, v in pairs if math.isfinite(b) and math.isfinite(v))
        if not both:
            continue
        mid = len(both) // 2
        median = both[mid] if len(both) % 2 else (both[mid - 1] + both[mid]) / 2
        frames = median / packet_bytes
        out.append(Check(f"real vs virtual queue {port}", frames <= limit_frames, frames,
                         limit_frames,
                         f"median |qdisc backlog - marker's virtual queue| {median:.0f} B = "
                         f"{frames:.2f} frames over {len(both)} samples (limit "
                         f"{limit_frames:g} frames)"))
    return out

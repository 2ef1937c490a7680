"""Measuring a run on a live fabric: port counters, queue samples, the fidelity gate,
the fixed delays the emulator lacks or misses (as measured deviations) and FCT slowdown.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from core.ecn import ThresholdPolicy
from core.frame import (
    FRAME_BYTES,
    HEADER_BYTES,
    MTU_PAYLOAD_BYTES,
    WIRE_FRAME_BYTES,
)
from core.gcpause import collector_paused
from emu.ecmp_hashing import ecmp_check
from emu.fabric import Fabric
from emu.telemetry import QueueSampler
from emu.wirerate import capacity_bound_bps
from engine.capture import Captured, HostCapture
from engine.rawsock import realtime_offset_ns
from engine.run import EngineConfig, first_frame_bytes, run_workload
from engine.stats import EngineStats
from experiments.exporter import Exporter, current
from experiments.faultrun import with_faults
from experiments.fidelity import (
    Check,
    FidelityReport,
    MarkingCounts,
    PortQueue,
    PortRate,
    RunMeasures,
    evaluate,
    queue_divergence_checks,
)
from experiments.rundir import Run, emulated_fixed_delays
from model.alphabeta import DEFAULT_OVERHEAD_S
from topologies.routing import topo_graph
from traffic.ccload import resolve_cc
from traffic.fixeddelay import NIC_OVERHEAD, path_delay
from traffic.reorder_bound import reorders_by_design

# ----------------------------------------------------------------------------- fabric

def delay_emulated(fab: Fabric) -> bool:
    return bool(fab.summary().get("delay_emulated", False))


def model_graph(fab: Fabric) -> Any:
    """The routed graph the model prices: the real fabric's link rates, propagation
    (link ``delay_s``) and switch latency (node ``switch_latency_s``) as the topology
    gives them, whatever the emulator reproduces (`emulated_fixed_delays`)."""

    return topo_graph(fab.topo)


def packet_time_s(rate_bps: float) -> float:
    """Real serialization time of one full RoCEv2 frame at ``rate_bps`` (its wire time,
    Ethernet's preamble, FCS and gap included)."""
    return 8.0 * WIRE_FRAME_BYTES / rate_bps


def max_scale(fab: Fabric) -> float:
    """Largest S at which the slowest link of the fabric is still shaped accurately."""
    slowest = min(p.rate_bps for p in fab.ports())
    return slowest / fab.scale.min_emulated_rate_bps


# ----------------------------------------------------------------------------- measuring

#: Per-port counters that are differenced over a traffic run.
PORT_COUNTERS = ("tx_bytes", "tx_packets", "drops", "ecn_marked", "ect_packets", "marker_packets")
#: With PFC on (emu.pfc_controller): counted over the run, and the thresholds in force.
PFC_COUNTERS = ("pause_events", "xoff_events", "pfc_kicks")
PFC_LEVELS = ("xoff_bytes", "xon_bytes", "headroom_bytes")


@dataclass
class Measurement:
    """Everything measured in one traffic run, real-fabric units (times in real s)."""

    messages: pd.DataFrame
    latency: pd.DataFrame
    rates: pd.DataFrame
    queue: pd.DataFrame          # t_s, port, backlog_bytes, vq_bytes
    ports: pd.DataFrame          # one row per port: counter deltas, max queue bounds
    stats: EngineStats           # the engine's report (engine/stats.py)
    wall_s: float
    captures: dict[str, Captured] = field(default_factory=dict)  # host -> its NIC's frames
    fault_events: pd.DataFrame | None = None  # the run's faults as applied (faults option)
    #: Frames the faults applied during the run cost outside the ports' queues (no
    #: route, a dead port's, loss filters: `emu.faultinject.FaultInjector.lost_frames`),
    #: which retransmissions recover as they do a queue's drops.
    failure_drops: int = 0
    #: The links the faults took down at some moment of the run (their ECMP groups'
    #: idle members are the reroute's doing, not the hash's: `ecmp_hashing_check`).
    links_down: frozenset[frozenset[str]] = frozenset()

    @property
    def completion_s(self) -> float:
        """First start to last completion of the run's messages (real s)."""
        return float(self.messages.end_s.max() - self.messages.start_s.min())

    def port(self, name: str) -> pd.Series:
        return self.ports.loc[name]


def port_deltas(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Counter deltas per port (PFC's too while it is on, with its thresholds), and
    bounds of the highest queue a packet found there from the marker's per-packet
    histogram (NaN without a BPF marker)."""
    b = before.set_index("port")
    a = after.set_index("port")
    out = a[["node", "peer", "tier", "rate_bps", "buffer_bytes", "backend"]].copy()

    def delta(col: str) -> pd.Series:
        was = pd.to_numeric(b[col], errors="coerce").fillna(0) if col in b else 0
        return pd.to_numeric(a[col], errors="coerce").fillna(0) - was

    pfc = "pause_events" in a
    for col in PORT_COUNTERS + (PFC_COUNTERS if pfc else ()):
        out[col] = delta(col).astype("int64")
    if pfc:
        out["paused_s_real"] = delta("paused_s_real")
        for col in PFC_LEVELS:
            out[col] = pd.to_numeric(a[col], errors="coerce")
    lo, hi = [], []
    for port in out.index:
        h_after, h_before = a.at[port, "hist"], b.at[port, "hist"]
        if h_after is None or not isinstance(h_after, list):
            lo.append(math.nan)
            hi.append(math.nan)
            continue
        bucket = float(a.at[port, "hist_bucket_bytes"])
        delta = [x - y for x, y in zip(h_after, h_before or [0] * len(h_after), strict=True)]
        seen = [i for i, d in enumerate(delta) if d > 0]
        top = max(seen, default=None)
        lo.append(0.0 if top is None else top * bucket)
        # The last bucket also holds everything beyond it.
        hi.append(0.0 if top is None else math.inf if top == len(delta) - 1 else (top + 1) * bucket)
    out["max_queue_lo_bytes"] = lo
    out["max_queue_hi_bytes"] = hi
    return out


def measure(fab: Fabric, workload: Any, engine_config: Any, *, watch: Sequence[Any] = (),
            sample_interval_s: float | None = None, capture: Sequence[str] = (),
            during: Callable[[Any], None] | None = None) -> Measurement:
    """Run ``workload`` on ``fab`` with the engine, sampling the queues of ``watch``
    ports every ``sample_interval_s`` (real s; default: one packet time of the
    slowest watched port), capturing the RoCEv2 frames at the NICs of the hosts in
    ``capture`` (``engine.capture``), and difference the port counters around the run.
    ``during`` is told the engine's shared state (its clock) as the run starts and None
    as it ends (`emu.faultinject.FaultInjector.watch`); without it, the run's ``faults``
    option is (`experiments.faultrun`)."""
    def run(hook: Callable[[Any], None] | None) -> Measurement:
        return _measure(fab, workload, engine_config, watch, sample_interval_s, capture, hook)
    return run(during) if during is not None else with_faults(fab, workload, model_graph(fab), run)


def _measure(fab: Fabric, workload: Any, engine_config: Any, watch: Sequence[Any],
             sample_interval_s: float | None, capture: Sequence[str],
             during: Callable[[Any], None] | None) -> Measurement:
    if sample_interval_s is None and watch:
        sample_interval_s = packet_time_s(min(p.rate_bps for p in watch))
    before = fab.port_stats()
    exporter = current()
    watcher = _watch(exporter, fab, workload) if exporter is not None else None
    sampler = QueueSampler(list(watch), fab.iprs_by_path(),
                           interval_s=fab.scale.time_emu_s(sample_interval_s or 1.0)) if watch else None
    with HostCapture(fab, capture, workload, engine_config.payload_bytes) as taps:
        t0 = time.monotonic()
        if sampler is not None:
            sampler.start()
        try:
            result = run_workload(fab, workload, engine_config, live=_both(watcher, during))
        finally:
            if sampler is not None:
                sampler.stop()
        wall_s = time.monotonic() - t0
        t0_ns = result.stats.t0_monotonic_ns
        captures = taps.result(t0_ns + realtime_offset_ns(), fab.scale) if t0_ns else {}
    after = fab.port_stats()
    if exporter is not None:
        exporter.traffic_ended(after, result.messages, _nics(fab, result.messages))
    queue = sampler.frame() if sampler is not None else pd.DataFrame(
        columns=["t_s", "port", "backlog_bytes", "vq_bytes"])
    if sampler is not None and result.stats.t0_monotonic_ns:
        # On the engine's time base (t = 0 when it starts sending), like messages.csv.
        queue["t_s"] += (sampler.start_ns - result.stats.t0_monotonic_ns) / 1e9
    queue["t_s"] = fab.scale.to_real_time_s(queue["t_s"])
    ports = port_deltas(before, after)
    # The marking thresholds in force at each switch port that marks (the plots' lines).
    marks = {p.name: _thresholds_of(fab, p) for p in fab.ports() if p.is_switch}
    marking = [n in marks and ports.at[n, "backend"] != "off" for n in ports.index]
    for col in ("kmin_bytes", "kmax_bytes"):
        ports[col] = [getattr(marks[n], col) if m else math.nan
                      for n, m in zip(ports.index, marking, strict=True)]
    return Measurement(result.messages, result.latency, result.rates, queue, ports,
                       result.stats, wall_s, captures)


def _both(*hooks: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """One ``live`` hook that calls each of ``hooks`` given."""
    given = [h for h in hooks if h is not None]
    if not given:
        return None
    return lambda shared: [h(shared) for h in given] and None


def _watch(exporter: Exporter, fab: Fabric, workload: Any) -> Callable[[Any], None]:
    """Tell ``exporter`` that a traffic run begins; what run_workload's ``live`` calls."""
    exporter.traffic_started(fab, workload)
    qps = [(fab.egress(m.src, m.dst).ifname if m.src != m.dst else m.src, str(m.msg_id))
           for m in workload.messages]
    return lambda shared: exporter.engine(shared, qps)


def _nics(fab: Fabric, messages: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(host, peer) -> the host's NIC toward the peer, for every pair of ``messages``."""
    pairs = {(a, b) for s, d in zip(messages.src, messages.dst, strict=True)
             for a, b in ((s, d), (d, s))}
    return {(a, b): fab.egress(a, b).ifname if a != b else a for a, b in pairs}


def engine_config(cc: str, workers: int | str | None = "auto", **kw: Any) -> Any:
    """The engine's configuration for a cc setting (``experiments.option_parsers.parse_cc``) on
    ``workers`` workers (the ``workers`` option: 'auto' or None lets the engine choose)."""

    return EngineConfig(cc=cc, workers=None if workers in ("auto", None) else workers, **kw)


def _thresholds_of(fab: Fabric, port: Any) -> Any:
    return ThresholdPolicy.of(fab.thresholds).for_port(port)


#: How far a rate over a measured window (engine start to last completion) may be off:
#: the window's edges are known to a wake-up, far below 1 %.
MEASURED_WINDOW_UNCERTAINTY = 0.01
#: A window the model says a port is saturated over is as uncertain as the model (its
#: error bound for a valid run, 5 %).
MODEL_WINDOW_UNCERTAINTY = 0.05


def fidelity_of(fab: Fabric, m: Measurement, workload: Any, *, cc: bool,
                saturated: Mapping[str, float] | None = None) -> FidelityReport:
    """The gate over one measured traffic run. ``saturated`` maps port names to the
    real window (s) over which the model says the port sends at its full rate;
    every host NIC is also checked not to exceed its rate over the whole run.
    Frames lost to failures (``m.failure_drops``) count as the fabric's drops."""

    ports = {p.name: p for p in fab.ports()}
    windows = {p.name: (m.completion_s, False) for p in fab.ports()
               if not p.is_switch and m.ports.at[p.name, "tx_bytes"] > 0}
    windows.update({name: (w, True) for name, w in (saturated or {}).items()})
    # Busy periods per port: at most one per message (an upper bound loosens the
    # capacity bound, so it never fails a run for bursts the shaper really allows).
    periods = max(1, len(workload.messages))
    rates = []
    for name, (window_s, busy) in windows.items():
        carried = float(m.ports.at[name, "tx_bytes"])
        achieved = 8.0 * carried / window_s if window_s > 0 else 0.0
        capacity = capacity_bound_bps(ports[name].rate_bps, carried, fab.scale,
                                      busy_periods=periods)
        rates.append(PortRate(name, ports[name].rate_bps, achieved, expect_saturated=busy,
                              capacity_bps=capacity,
                              uncertainty=MODEL_WINDOW_UNCERTAINTY if busy else
                              MEASURED_WINDOW_UNCERTAINTY))
    marked = [p for p in fab.ports() if p.marker is not None]
    queues = []
    for p in marked:
        row = m.ports.loc[p.name]
        if row.tx_packets > 0:
            t = _thresholds_of(fab, p)
            queues.append(PortQueue(p.name, t.kmin_bytes, t.kmax_bytes,
                                    float(row.max_queue_lo_bytes), float(row.max_queue_hi_bytes),
                                    int(row.ecn_marked)))
    host_rate = max(p.rate_bps for p in fab.ports() if not p.is_switch)
    switch_ports = m.ports[[ports[n].is_switch for n in m.ports.index]]
    msgs = m.messages
    marking = MarkingCounts(
        marking=fab.marking != "off", cc=cc, marks=int(switch_ports.ecn_marked.sum()),
        ce_received=int(msgs.ce_marked.sum()), cnps_sent=int(msgs.cnps_sent.sum()),
        cnps_received=int(msgs.cnps_received.sum()),
        rate_reductions=int((m.rates.groupby("msg_id").rate_bps.diff() < 0).sum()),
        ports=queues)
    measures = RunMeasures(
        engine=m.stats, packet_time_s=packet_time_s(host_rate),
        messages_expected=len(workload.messages),
        messages_completed=int(msgs.completed.sum()),
        port_rates=rates, marking=marking,
        fabric_drops=int(m.ports.drops.sum()) + m.failure_drops,
        reorders_by_design=reorders_by_design(fab.routing))
    return evaluate(measures, max_scale=max_scale(fab))


def gate(fab: Fabric, m: Measurement, workload: Any, *, cc: bool,
         saturated: Mapping[str, float] | None = None) -> FidelityReport:
    """`fidelity_of` plus the real-queue check of every sampled port: the qdisc backlog
    against the marker's virtual queue (`experiments.fidelity.queue_divergence_checks`),
    both read by the QueueSampler in one pass."""

    report = fidelity_of(fab, m, workload, cc=cc, saturated=saturated)
    queue = m.queue
    samples = {str(port): list(zip(g.backlog_bytes.astype(float), g.vq_bytes.astype(float),
                                   strict=True))
               for port, g in queue.groupby("port")} if not queue.empty else {}
    checks = queue_divergence_checks(samples, FRAME_BYTES)
    ecmp = ecmp_hashing_check(fab, m, workload)
    if ecmp is not None:
        checks.append(ecmp)
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    return FidelityReport(report.valid and not failed, [*report.reasons, *failed],
                          report.suggested_scale, [*report.checks, *checks])


def ecmp_hashing_check(fab: Fabric, m: Measurement, workload: Any) -> Check | None:
    """Did the switches hash independently, as the model assumes (`emu.ecmp_hashing.ecmp_check`
    on the bytes each switch egress sent)? None for fabrics routed without ECMP."""
    if fab.topo.routing != "ecmp" or not workload.messages:
        return None
    sent = {(p.node, p.peer_node): float(m.ports.at[p.name, "tx_bytes"])
            for p in fab.ports() if p.is_switch and p.name in m.ports.index}
    largest = max(int(msg.size_bytes) for msg in workload.messages)
    # One message is one flow (its own QP and UDP source port); what it puts on a port.
    flow_bytes = largest + max(1, math.ceil(largest / MTU_PAYLOAD_BYTES)) * HEADER_BYTES
    result = ecmp_check(fab.routes, fab.switches, sent, flow_bytes, links_down=m.links_down)
    detail = "; ".join(result.reasons) if result.reasons else (
        f"{result.groups_checked} ECMP groups consistent with independent hashing "
        f"({result.groups_skipped} shared with other routes or over a link taken down, "
        "not judged)")
    return Check("ECMP hashing", result.ok, result.groups_checked, None, detail)


# ----------------------------------------------------------------------------- one case

def record_case(run: Run, fab: Fabric, case: str, m: Measurement, workload: Any, *,
                cc: object, effect: str, saturated: Mapping[str, float] | None = None,
                report: FidelityReport | None = None,
                frames: Mapping[str, pd.DataFrame] | None = None,
                labels: Mapping[str, Any] | None = None, graph: Any | None = None,
                verdicts: Sequence[str] | None = None,
                deviation_case: str | None = None) -> FidelityReport:
    """How every measured case ends, after its own metrics: the gate's verdict (`gate`
    for the case's cc setting or factory ``cc`` and ``saturated``, or ``report`` where the caller had to gate while
    the run's own settings were in force), its ``frames`` (each labelled with
    ``labels``), its captures (pcap/<case>/) and the fixed delays it did not reproduce
    (`measure_deviations`), each with ``effect``: what the delay does to the case's
    headline. ``verdicts``: the cases the verdict is recorded for (default: ``case``);
    ``deviation_case``: the case the deviations name (default: ``case``)."""
    if report is None:
        report = gate(fab, m, workload, cc=not resolve_cc(cc).is_off, saturated=saturated)
    for name, frame in (frames or {}).items():
        run.frame(name, frame, **(labels or {}))
    for verdict in ([case] if verdicts is None else verdicts):
        run.fidelity(verdict, report)
    run.pcaps(case, m.captures)
    if m.fault_events is not None:
        run.frame("fault_events", m.fault_events, case=case)
    run.deviations([{**d, "effect": effect} for d in
                    measure_deviations(fab, m, deviation_case or case, graph)])
    return report


# ----------------------------------------------------------------------------- deviations

#: A fixed delay counts as reproduced when the emulator's measured value is within this
#: fraction of the real fabric's (the issue's 5 % on unloaded one-way latency).
DEVIATION_TOLERANCE = 0.05


@collector_paused()
def measure_deviations(fab: Fabric, m: Measurement, case: str, graph: Any | None = None
                       ) -> list[dict[str, Any]]:
    """The fixed delays one run did not reproduce, measured.

    * path: a message's first frames see empty queues, so the lowest one-way latency
      of its frames is the unloaded path delay; the real fabric's is the hop sum of
      `traffic.fixeddelay.path_delay` (store and forward) for its first frame on the
      message's shortest route.
    * NIC overhead: a message's first frame leaves first_tx_s - start_s after the
      engine posts it; the real NIC needs alphabeta.DEFAULT_OVERHEAD_S.

    Both are measured whatever the run emulates (`emulated_fixed_delays`, with what
    the engine declared in ``m.stats``); one row per shortfall beyond
    DEVIATION_TOLERANCE names the parts not emulated, and where every part is
    emulated a residual beyond it, either way, is a row named '... (emulated:
    residual)'. Real and measured values are medians over the run's messages."""

    graph = model_graph(fab) if graph is None else graph
    emulated = emulated_fixed_delays(fab, m.stats.emulated_fixed_delays)
    msgs = m.messages[m.messages.end_s.notna() & (m.messages.src != m.messages.dst)]
    lowest = m.latency.groupby("msg_id").one_way_s.min() if not m.latency.empty else pd.Series()
    seen = msgs[msgs.msg_id.isin(lowest.index)]
    # One shortest-route delay per (pair, first frame size): a ring's 254 messages a pair.
    keys = list(zip(seen.src, seen.dst, (first_frame_bytes(int(b), MTU_PAYLOAD_BYTES)
                                         for b in seen.size_bytes), strict=True))
    shortest = {key: min((path_delay(graph, p, key[2]) for p in fab.routes.paths(key[0], key[1])),
                         key=lambda d: d.total_s).parts() for key in dict.fromkeys(keys)}
    rows = []
    if keys:
        real = {k: float(pd.Series([shortest[key][k] for key in keys]).median())
                for k in shortest[keys[0]]}
        measured_s = float(seen.msg_id.map(lowest).astype(float).median())
        rows.append(_deviation_row(
            case, list(real), [k for k in real if not emulated[k]["emulated"]],
            "unloaded one-way latency of a message's first frames (median over messages)",
            sum(real.values()), measured_s,
            "; ".join(f"{k} {v * 1e9:.0f} ns ({emulated[k]['how']})" for k, v in real.items())))
    started = msgs[(msgs.first_tx_s >= 0) & (msgs.start_s >= 0)]
    if not started.empty:
        rows.append(_deviation_row(
            case, [NIC_OVERHEAD], [] if emulated[NIC_OVERHEAD]["emulated"] else [NIC_OVERHEAD],
            "per-message NIC overhead: first frame on the wire after the message is posted "
            "(median over messages)", DEFAULT_OVERHEAD_S,
            float((started.first_tx_s - started.start_s).median()),
            f"a real RDMA NIC needs ~{DEFAULT_OVERHEAD_S * 1e6:g} us per message "
            f"({emulated[NIC_OVERHEAD]['how']})"))
    return [r for r in rows if r is not None]


def _deviation_row(case: str, names: list[str], missing: list[str], what: str, real_s: float,
                   measured_s: float, detail: str) -> dict[str, Any] | None:
    """A row if the ``missing`` parts of ``names`` leave the measured value short of
    the real one, or (none missing) if its residual exceeds the tolerance."""
    off_s = real_s - measured_s
    if (off_s if missing else abs(off_s)) <= DEVIATION_TOLERANCE * real_s:
        return None
    name = " + ".join(missing) if missing else " + ".join(names) + " (emulated: residual)"
    return {"case": case, "name": name, "emulated": not missing, "what": what,
            "real_s": real_s, "measured_s": measured_s, "missing_s": off_s,
            "missing_rel": off_s / real_s, "detail": detail}


# ----------------------------------------------------------------------------- FCT slowdown

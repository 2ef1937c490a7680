"""The long-flow cases of the ``cc`` experiment (`experiments.cc_compare`), measured against the
steady state the project models for the algorithm (``CcFactory.oscillation_model``,
``CcFactory.steady_model``):

* ``oscillation cc=X`` (DCTCP only, no PFC): every switch port marks at one step
  threshold ``osc_k`` (Kmin = Kmax, Pmax = 1, as DCTCP prescribes), and ``osc_flows``
  hosts with the same unloaded round trip to the receiver (the largest such group, the
  receiver's leaf excluded when another group is as large) each send ``osc_size``
  bytes to it, all from t = 0. Over the interval when all are active (first
  ``osc_settle`` skipped, and the drain before the first flow ends), the bottleneck's
  sampled queue gives the sawtooth: amplitude (sqrt(12) x its standard deviation),
  mean, p5 and p95, and the period (its strongest frequency), beside DCTCP's steady
  alpha from the senders' trace.
  The model is the DCTCP paper's analysis (``model.dctcp_oscillation``) from the configured
  rates, the path's unloaded round trip and K.
* ``steady cc=X`` (HPCC only, no PFC): the same long flows at the fabric's marking,
  against HPCC's equilibrium (U = eta): no standing queue (mean and p95 of the
  bottleneck's sampled queue, predicted 0) and eta of the port delivered (payload).
  DCQCN's fixed point (``model.dcqcn_fluid``) has no such case: its alpha settles from 1 by
  g = 1/256 per 55 us, some 30 ms of real time (minutes of wall time), far beyond a run.

Each case function records its metrics and returns the measured flows, its cc.csv row
and what the note says of its marking (a `LongCase`); `experiments.cc_compare` records the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from core.ecn import Thresholds
from core.frame import FRAME_BYTES, WIRE_FRAME_BYTES
from core.messages import Workload
from emu.fabric import Fabric
from experiments import incast
from experiments.fairness import window_rate_bps
from experiments.measure import Measurement, engine_config, gate, measure, model_graph
from experiments.options import CommonOptions
from experiments.rundir import Run
from model.alphabeta import roce_wire_factor
from model.claims import (
    BUSY_PORT,
    DCTCP_AMPLITUDE,
    DCTCP_MEAN,
    DCTCP_TIMING,
    HPCC_EQUILIBRIUM,
    HPCC_UTILISATION,
)
from model.dctcp_oscillation import dctcp_oscillation
from traffic import collectives
from traffic.ccload import CcFactory
from traffic.fixeddelay import round_trip_s


@dataclass(frozen=True)
class LongFlowOptions(CommonOptions):
    """The options the long-flow cases read (the ``cc`` experiment's Options derive
    from these): how many flows of how many bytes, DCTCP's step threshold K, and the
    share of the run to let settle before the measured window."""

    osc_flows: int
    osc_size: int
    osc_k: int
    osc_settle: float


def same_rtt_senders(hosts: list[str], receiver: str,
                     rtt_s: Callable[[str], float]) -> list[str]:
    """The largest group of hosts with one unloaded round trip ``rtt_s(host)`` to
    ``receiver`` (ns resolution), the longer round trip on a tie."""
    groups: dict[int, list[str]] = {}
    for h in hosts:
        if h != receiver:
            groups.setdefault(round(rtt_s(h) * 1e9), []).append(h)
    return max(groups.items(), key=lambda kv: (len(kv[1]), kv[0]))[1]


@dataclass(frozen=True)
class Sawtooth:
    """A queue's oscillation over a window: bytes, and the period in seconds."""

    amplitude_bytes: float   # sqrt(12) x standard deviation
    mean_bytes: float
    p5_bytes: float
    p95_bytes: float
    period_s: float          # NaN: fewer than three cycles fit the window


def sawtooth(t_s: Sequence[float], queue_bytes: Sequence[float]) -> Sawtooth:
    """The oscillation of queue samples ``queue_bytes`` taken at times ``t_s``.

    The amplitude is that of a linear sawtooth, whose samples spread evenly between
    its trough and crest (standard deviation = amplitude / sqrt(12)): every sample
    counts, so the queue's whole-frame steps and a stray reading move it far less
    than they move the extremes or quantiles. The period is that of the strongest
    frequency of the queue resampled evenly (Hann window), NaN unless three or more
    of its cycles fit the window."""
    q = np.asarray(queue_bytes, dtype=float)
    t = np.asarray(t_s, dtype=float)
    if len(q) < 8:
        return Sawtooth(math.nan, math.nan, math.nan, math.nan, math.nan)
    p5, p95 = (float(x) for x in np.quantile(q, [0.05, 0.95]))
    span_s = float(t[-1] - t[0])
    dt_s = float(np.median(np.diff(t)))
    period = math.nan
    if span_s > 0 and dt_s > 0:
        even = np.interp(np.arange(t[0], t[-1], dt_s), t, q)
        power = np.abs(np.fft.rfft((even - even.mean()) * np.hanning(len(even)))) ** 2
        freq = np.fft.rfftfreq(len(even), dt_s)
        power[0] = 0
        peak = float(freq[int(np.argmax(power))])
        if power.max() > 0 and peak * span_s >= 3:
            period = 1 / peak
    return Sawtooth(math.sqrt(12) * float(q.std()), float(q.mean()), p5, p95, period)


@dataclass(frozen=True)
class LongFlowSet:
    """``osc_flows`` hosts with one unloaded round trip to the receiver (the largest
    such group), their bottleneck port and that round trip."""

    receiver: str
    senders: list[str]
    port: Any                 # the bottleneck (emu.ports.Port)
    rtt_s: float


def long_flow_set(fab: Fabric, receiver: str, opts: LongFlowOptions) -> LongFlowSet:
    graph = model_graph(fab)

    def rtt_s(h: str) -> float:
        return round_trip_s(graph, fab.routes.paths, h, receiver)

    senders = same_rtt_senders(list(fab.hosts), receiver, rtt_s)[:opts.osc_flows]
    return LongFlowSet(receiver, senders, incast.bottleneck_port(fab, senders, receiver),
                       rtt_s(senders[0]))


@dataclass(frozen=True)
class LongFlows:
    """The set's senders writing ``osc_size`` bytes each to the receiver from t = 0,
    measured, and the window where all are active and settled."""

    fs: LongFlowSet
    workload: Workload
    m: Measurement
    report: Any               # the gate's verdict
    lo_s: float               # the window [lo, hi)
    hi_s: float
    flows: list[int]

    def queue(self) -> pd.DataFrame:
        q = self.m.queue
        return q[(q.port == self.fs.port.name) & (q.t_s >= self.lo_s) & (q.t_s < self.hi_s)]

    def rates(self) -> pd.DataFrame:
        r = self.m.rates
        return r[(r.t_s >= self.lo_s) & (r.t_s < self.hi_s)]

    def payload_bps(self) -> float:
        """Payload delivered to the receiver in the window, all flows."""
        return sum(window_rate_bps(self.m, f, self.lo_s, self.hi_s, 0.0, 0.0)
                   for f in self.flows)


#: What a long-flow case returns: the measured flows, its cc.csv row, and its marking.
LongCase = tuple[LongFlows, dict[str, Any], str]


def long_flows(fab: Fabric, fs: LongFlowSet, opts: LongFlowOptions, cc: CcFactory,
               drain_queue_bytes: float,
               marking: tuple[Thresholds, Thresholds] | None = None) -> LongFlows:
    """Run the long flows of the oscillation and steady cases, with every switch port
    at ``marking[0]`` for the run and ``marking[1]`` after, if given (else as the fabric
    marks). The window starts once every flow has delivered a frame and ``osc_settle``
    of the rest has passed; it ends two round trips with ``drain_queue_bytes`` queued
    before the first flow completes, where that queue starts to drain."""
    workload = collectives.build("incast", [fs.receiver, *fs.senders], opts.osc_size)
    if marking:
        fab.set_thresholds(marking[0])
    try:
        m = measure(fab, workload, engine_config(cc, opts.workers, transport=opts.transport), watch=[fs.port],
                    capture=opts.capture)
        report = gate(fab, m, workload, cc=True)
    finally:
        if marking:
            fab.set_thresholds(marking[1])
    ids = [msg.msg_id for msg in workload.messages if msg.src != msg.dst]
    lat = m.latency[m.latency.msg_id.isin(ids)]
    t0 = float(lat.groupby("msg_id").t_s.min().max())
    drain_s = 2 * (fs.rtt_s + 8 * drain_queue_bytes / fs.port.rate_bps)
    t1 = float(m.messages[m.messages.msg_id.isin(ids)].end_s.min()) - drain_s
    lo = t0 + opts.osc_settle * (t1 - t0)
    return LongFlows(fs, workload, m, report, lo, t1, ids)


def run_oscillation(run: Run, fab: Fabric, case: str, receiver: str, opts: LongFlowOptions,
                    cc: CcFactory, t: Thresholds) -> LongCase:
    """DCTCP's steady queue oscillation at a step threshold (see the module doc)."""
    k = opts.osc_k
    fs = long_flow_set(fab, receiver, opts)
    pred = dctcp_oscillation(len(fs.senders), fs.port.rate_bps, fs.rtt_s, k, WIRE_FRAME_BYTES,
                             FRAME_BYTES)
    lf = long_flows(fab, fs, opts, cc, pred.q_max_bytes, (Thresholds(k, k, 1.0), t))
    q = lf.queue()
    saw = sawtooth(q.t_s, q.backlog_bytes)
    rates = lf.rates()
    alpha = float(rates.alpha.mean()) if not rates.empty else math.nan
    m = lf.m
    row = {"case": case, "scenario": "oscillation", "cc": cc.name, "pfc": False,
           "flows": len(fs.senders), "k_KB": k / 1e3, "rtt_us": fs.rtt_s * 1e6,
           "port_gbps": fs.port.rate_bps * 1e-9,
           "amplitude_KB": saw.amplitude_bytes / 1e3, "model_amplitude_KB": pred.amplitude_bytes / 1e3,
           "mean_queue_KB": saw.mean_bytes / 1e3, "model_mean_queue_KB": pred.mean_bytes / 1e3,
           "period_us": saw.period_s * 1e6, "model_period_us": pred.period_s * 1e6,
           "alpha": alpha, "model_alpha": pred.alpha,
           "aggregate_gbps": lf.payload_bps() * 1e-9,
           "retransmitted": int(m.messages.retransmitted.sum()), "drops": int(m.ports.drops.sum())}
    run.metric(case, "queue amplitude", "KB", row["amplitude_KB"], row["model_amplitude_KB"],
               DCTCP_AMPLITUDE)
    run.metric(case, "mean queue", "KB", row["mean_queue_KB"], row["model_mean_queue_KB"],
               DCTCP_MEAN)
    run.metric(case, "queue p95", "KB", saw.p95_bytes / 1e3,
               (pred.q_max_bytes - 0.05 * pred.amplitude_bytes) / 1e3, DCTCP_AMPLITUDE)
    run.metric(case, "queue p5", "KB", saw.p5_bytes / 1e3,
               (pred.q_min_bytes + 0.05 * pred.amplitude_bytes) / 1e3, DCTCP_AMPLITUDE)
    run.metric(case, "oscillation period", "us", row["period_us"], row["model_period_us"],
               DCTCP_TIMING)
    run.metric(case, "alpha", "", alpha, pred.alpha, DCTCP_TIMING)
    # The analysis' queue never empties above K > C x RTT / 7, so the port stays busy.
    run.metric(case, "aggregate throughput", "Gb/s", row["aggregate_gbps"],
               fs.port.rate_bps / roce_wire_factor() * 1e-9 if pred.q_min_bytes > 0 else None,
               BUSY_PORT)
    return lf, row, f"step marking at K = {k} B"


def run_steady(run: Run, fab: Fabric, case: str, receiver: str, opts: LongFlowOptions,
               cc: CcFactory) -> LongCase:
    """HPCC's long flows against its equilibrium: no standing queue, eta of the port."""
    fs = long_flow_set(fab, receiver, opts)
    lf = long_flows(fab, fs, opts, cc, 0.0)
    q = lf.queue()
    payload_bps = lf.payload_bps()
    eta = cc.target_utilisation
    m = lf.m
    row = {"case": case, "scenario": "steady", "cc": cc.name, "pfc": False,
           "flows": len(fs.senders), "mean_queue_KB": float(q.backlog_bytes.mean()) / 1e3,
           "aggregate_gbps": payload_bps * 1e-9,
           "retransmitted": int(m.messages.retransmitted.sum()), "drops": int(m.ports.drops.sum())}
    run.metric(case, "mean queue", "KB", row["mean_queue_KB"], 0.0, HPCC_EQUILIBRIUM)
    run.metric(case, "queue p95", "KB", float(q.backlog_bytes.quantile(0.95)) / 1e3, 0.0,
               HPCC_EQUILIBRIUM)
    run.metric(case, "aggregate throughput", "Gb/s", row["aggregate_gbps"],
               eta * fs.port.rate_bps / roce_wire_factor() * 1e-9, HPCC_UTILISATION)
    return lf, row, "INT on every switch port"


"""Max-min fair shares over time, predicted from the configuration alone (a model).

Input: every flow's routed paths, size and configured start time, and the link rates.
The flows share the links max-min fairly (progressive filling, `model.maxmin`) and
the allocation is recomputed whenever a flow starts or finishes (the fluid model of
`model.fluid`), so the schedule of who is active when, and at what rate, comes
from the configuration and not from measured start or end times.

A flow released at ``start_s`` sends its first byte ``overhead_s`` later (the NIC's
per-message cost, as in `model.alphabeta`), drains at its max-min rate and
completes one path latency after its last byte left. Sizes are payload bytes; the wire
carries ``wire_factor`` times as much (RoCEv2 headers by default), and the rates are
wire rates (``payload_rates_bps`` divides them back). This is the ideal congestion
control's allocation: a real one (DCQCN) converges to it only on average.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx

from core.frame import FRAME_BYTES
from model.alphabeta import DEFAULT_OVERHEAD_S, path_latency_s, roce_wire_factor
from model.fluid import FluidJob, simulate
from model.maxmin import Choice, Link, as_capacities, make_flow, max_min_rates


@dataclass(frozen=True)
class FlowSpec:
    """A configured flow: its equal-cost paths, payload bytes and release time."""

    flow_id: Hashable
    paths: Sequence[Sequence[str]]
    size_bytes: float
    start_s: float = 0.0
    cap_bps: float = math.inf


@dataclass(frozen=True)
class ShareInterval:
    """Between two starts/finishes: the active flows and their max-min wire rates."""

    t0_s: float
    t1_s: float
    rates_bps: Mapping[Hashable, float]
    wire_factor: float

    @property
    def payload_rates_bps(self) -> dict[Hashable, float]:
        return {f: r / self.wire_factor for f, r in self.rates_bps.items()}


@dataclass(frozen=True)
class FairShareSchedule:
    """Predicted bandwidth phase (first to last byte sent) and completion per flow, and
    the intervals of constant allocation between them (real seconds)."""

    intervals: tuple[ShareInterval, ...]
    first_byte_s: Mapping[Hashable, float] = field(default_factory=dict)
    last_byte_s: Mapping[Hashable, float] = field(default_factory=dict)
    finish_s: Mapping[Hashable, float] = field(default_factory=dict)


def fair_share_schedule(graph: nx.Graph | Mapping[Link, float], flows: Sequence[FlowSpec], *,
                        mode: str = "spread", choice: Choice | None = None,
                        overhead_s: float = DEFAULT_OVERHEAD_S,
                        wire_factor: float | None = None,
                        packet_bytes: float = FRAME_BYTES) -> FairShareSchedule:
    """Max-min fair shares of ``flows`` over time (see the module doc). ``graph`` (or
    directed link capacities, then without path latency) gives the link rates."""
    wire = roce_wire_factor() if wire_factor is None else wire_factor
    caps = as_capacities(graph)
    routed = {f.flow_id: make_flow(f.flow_id, f.paths, mode=mode, choice=choice,
                                   cap_bps=f.cap_bps) for f in flows}
    if len(routed) != len(flows):
        raise ValueError("flow ids must be unique")
    jobs = []
    for f in flows:
        size_bits = 8.0 * wire * f.size_bytes
        latency_s = 0.0
        if isinstance(graph, nx.Graph):
            last_bytes = min(packet_bytes, size_bits / 8.0)
            latency_s = max(path_latency_s(graph, p, last_bytes) for p in routed[f.flow_id].paths)
        jobs.append(FluidJob(job_id=f.flow_id, fractions=routed[f.flow_id].fractions,
                             size_bits=size_bits, cap_bps=f.cap_bps, release_s=f.start_s,
                             pre_s=overhead_s, post_s=latency_s))
    res = simulate(jobs, caps)
    events = sorted(set(res.start_s.values()) | set(res.drained_s.values()))
    intervals = []
    for t0, t1 in zip(events[:-1], events[1:], strict=True):
        active = [fid for fid in routed
                  if res.start_s[fid] <= t0 and res.drained_s[fid] >= t1 and t1 > t0]
        if active:
            rates = max_min_rates(caps, [routed[fid] for fid in active]).rates_bps
            intervals.append(ShareInterval(t0, t1, rates, wire))
    return FairShareSchedule(tuple(intervals), dict(res.start_s), dict(res.drained_s),
                             dict(res.finish_s))

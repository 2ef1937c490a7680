"""Congestion control compared: the same scenarios for every algorithm, with and without PFC.

One leaf-spine fabric (default: 3 leaves of 3 hosts at 100G, one spine, 300G uplinks,
every port buffer 512 KiB so that the queues, not the message sizes, decide) and, for
each ``cc`` setting in ``algorithms``:

* ``incast cc=X pfc=off|on`` (scenarios a and c, measured together): the incast
  senders write ``size`` bytes each to the last host, the receiver; meanwhile a victim
  flow of ``size`` bytes goes from the one host of the senders' leaf that is not a
  sender to a host on a third leaf: it shares its leaf's uplink with incast senders
  but never crosses the incast's bottleneck (the receiver's last hop). The senders are
  the hosts of the victim's leaf and the receiver's leaf-mates, so the receiver's last
  hop is the only port where traffic fans in beyond its rate. Without PFC the
  bottleneck drops what it cannot hold and go-back-N recovers; with PFC (enabled once
  every case without it has run) nothing is dropped, the pauses spread upstream and
  the uplink the victim shares with senders pauses the victim too: PFC's head-of-line
  blocking. Measured: the incast's completion and throughput (its payload over the
  completion, and that as a share of the bottleneck's payload rate), drops (every
  port), PAUSE events, p99 one-way latency of its frames, peak and mean bottleneck
  queue (the mean over the incast's duration), retransmissions, ECN-echo ACKs; the
  victim's FCT, throughput and p99 one-way latency.
* ``fairness cc=X`` (scenario b, no PFC): ``flows`` of those senders write
  ``flow_size`` bytes each to the receiver, flow k starting ``k * gap`` after the
  first. Over the interval when all are active (the model's, shifted by the path
  latency, its first ``settle`` skipped): Jain index, aggregate throughput and the
  smallest share; the convergence (settling) time runs from the last flow's first
  frame at the receiver to the end of the last bin (32 frame times of the bottleneck
  each), before the first flow completes, whose per-flow delivered rates have a Jain
  index below 0.95.

* ``oscillation cc=X`` (an algorithm with an oscillation model: DCTCP) and ``steady
  cc=X`` (one with a steady-state model: HPCC), no PFC: long flows against the
  model's steady state (`experiments.longflows`).

Model predictions where the project has them: the incast with CC off (its completion,
latency, peak queue and drops: ``model.queueing.incast_cc_off`` through
``model.incast_predict``; with PFC only the lossless completion), DCQCN's incast without PFC
(the fluid model of ``model.incast_predict``), the victim's FCT and the fair shares under
max-min fair sharing (``model.fairshare``: an ideal congestion control, without PFC's
head-of-line blocking; for an algorithm that declares a ``target_utilisation``, HPCC's
eta, the shares of that fraction of the bottleneck), DCTCP's steady queue oscillation
(``model.dctcp_oscillation``), HPCC's equilibrium. The model
has no incast or fairness dynamics of DCTCP, TIMELY, Swift, HPCC or a user algorithm, no
PAUSE and no convergence dynamics: those metrics are measured only (no prediction).
HPCC runs on the in-band telemetry the switches' eBPF markers write (``hpcc`` needs
eBPF marking on every switch port).
Every case gets the fidelity gate's verdict. cc.csv has one row per case with the
headline numbers (printed as a table), beside messages, latency, queue, ports and
rates (fairness cases) CSVs. The incast's hosts, prediction, row and metrics are
`experiments.cc_incast`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from core.ecn import Thresholds
from core.errors import ParameterError
from core.frame import WIRE_FRAME_BYTES
from core.scaling import Scale
from core.units import parse_size_bytes
from emu.fabric import Fabric
from emu.pfc_controller import PfcConfig
from experiments import incast
from experiments.cc_incast import (
    Roles,
    incast_metrics,
    incast_row,
    incast_workload,
    predict_incast,
    roles,
)
from experiments.fairness import parse_gap, staggered, window_rate_bps
from experiments.longflows import LongFlowOptions, LongFlows, run_oscillation, run_steady
from experiments.measure import (
    Measurement,
    engine_config,
    measure,
    model_graph,
    record_case,
)
from experiments.option_parsers import (
    CC_CHOICES,
    parse_cc,
    parse_float,
    parse_int,
    parse_list,
    parse_size,
    parse_text,
    parse_thresholds,
    parse_topo,
)
from experiments.options import Option, check_thresholds, check_topology, with_common
from experiments.progress import progress
from experiments.rundir import Run, jain_index
from model.claims import (
    FAIR_AGGREGATE,
    FAIR_JAIN,
    FAIR_SMALLEST,
)
from model.fairshare import FlowSpec, fair_share_schedule
from topologies.routing import topo_graph
from topologies.spec import build_topo
from traffic import collectives
from traffic.ccload import CcFactory, resolve_cc

NAME = "cc"
KIB = 1 << 10

#: Convergence: bins of this many full frames at the bottleneck rate, and the Jain
#: index every bin after the settling time reaches.
CONVERGENCE_BIN_FRAMES = 32
CONVERGED_JAIN = 0.95

#: The cases ``scenarios`` may name; ``incast-pfc`` is the incast with PFC on.
SCENARIOS = ("incast", "fairness", "oscillation", "steady", "incast-pfc")


def parse_scenarios(value: Any) -> str | list[str]:
    """``auto`` or a ';'-separated subset of SCENARIOS."""
    if isinstance(value, str) and value.strip() == "auto":
        return "auto"
    names = parse_list(parse_text)(value)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ParameterError("scenarios", unknown[0], f"expected auto or some of {', '.join(SCENARIOS)}")
    return names


def parse_threshold(value: Any) -> str | int:
    """``auto`` or a byte count (``200K``, ``64KiB``)."""
    if isinstance(value, str) and value.strip() == "auto":
        return "auto"
    return parse_size_bytes(value, "PFC threshold")


OPTIONS: dict[str, Option] = with_common({
    "algorithms": Option(["off", "dcqcn", "dctcp", "timely", "swift", "hpcc"],
                         f"congestion-control settings compared, ';'-separated ({CC_CHOICES})",
                         parse=parse_list(parse_cc)),
    "topo": Option("leafspine,3,1,3,host_rate=100G", "topology; its hosts must sit on three "
                   "or more first-hop switches", parse=parse_topo),
    "buffer": Option(512 * KIB, "egress buffer of every port (real bytes)", parse=parse_size),
    "senders": Option(4, "incast senders", parse=parse_int(2)),
    "size": Option(1 << 20, "bytes per incast sender and of the victim flow", quick=256 * KIB,
                   parse=parse_size),
    "flows": Option(3, "flows of the fairness case", parse=parse_int(2)),
    "flow_size": Option(1 << 20, "bytes per fairness flow", quick=512 * KIB, parse=parse_size),
    "gap": Option(20e-6, "real seconds between fairness flow starts", quick=10e-6,
                  parse=parse_gap),
    "settle": Option(0.3, "fraction of the all-flows interval skipped before Jain and "
                     "throughput are measured", parse=parse_float(0, 1, open_high=True)),
    # Two flows whose windows (W* = 17 frames at K = 80 KB on the default fabric) are
    # large enough for the analysis' fluid sawtooth; 4 MiB each give alpha (from 1) time
    # to settle and some 10 periods after it.
    "osc_flows": Option(2, "flows of the DCTCP oscillation and HPCC steady cases",
                        parse=parse_int(1)),
    "osc_size": Option(4 << 20, "bytes per flow of the DCTCP oscillation and HPCC steady "
                       "cases (also when quick: a shorter run measures alpha still settling)",
                       parse=parse_size),
    "osc_k": Option(80_000, "DCTCP step-marking threshold K of the oscillation case (bytes)",
                    parse=parse_size),
    "osc_settle": Option(0.5, "fraction of the oscillation and steady cases skipped while "
                         "the algorithm settles", parse=parse_float(0, 1, open_high=True)),
    "thresholds": Option("40K/160K", "ECN Kmin/Kmax of every switch port (bytes)",
                         parse=parse_thresholds),
    "pmax": Option(0.2, "marking probability at Kmax", parse=parse_float(0, 1, open_low=True)),
    # 50 ms wall is 5 us real at the default S = 10000: headroom that 512 KiB buffers
    # hold behind 300G uplinks; the controller reacts in ~1 ms wall (docs/pfc.md).
    "scenarios": Option("auto", "cases run for every algorithm, ';'-separated, from "
                        f"{', '.join(SCENARIOS)}; auto: incast, fairness and incast-pfc, with "
                        "oscillation for DCTCP and steady for HPCC", parse=parse_scenarios),
    "xoff": Option("auto", "PFC Xoff of every switch port (real bytes of its queue); auto: "
                   "buffer - headroom (docs/pfc.md)", parse=parse_threshold),
    "xon": Option("auto", "PFC Xon of every switch port (real bytes); auto: Xoff - 2 frames",
                  parse=parse_threshold),
    "pfc_budget": Option(0.05, "wall-clock reaction time PFC's headroom is sized for (s)",
                         parse=parse_float(1e-3, 10.0)),
})


@dataclass(frozen=True)
class Options(LongFlowOptions):
    """The options of the cc experiment (OPTIONS), typed."""

    algorithms: list[str]
    topo: str
    buffer: int
    senders: int
    size: int
    flows: int
    flow_size: int
    gap: float
    settle: float
    thresholds: str
    pmax: float
    scenarios: str | list[str]
    xoff: str | int
    xon: str | int
    pfc_budget: float


def check(opts: Options) -> None:
    """Options that depend on each other, checked before anything is built."""
    check_topology(opts.topo, opts.scale, min_hosts=4)
    topo = build_topo(opts.topo)
    r = roles(topo_graph(topo), list(topo.host_nodes()), opts.senders)
    if opts.flows > len(r.senders):
        raise ParameterError("flows", opts.flows, f"at most senders = {len(r.senders)}")
    check_thresholds([opts.thresholds], opts.pmax)
    if any(resolve_cc(cc).oscillation_model for cc in opts.algorithms):
        Thresholds(opts.osc_k, opts.osc_k, 1.0)
        if opts.osc_k >= opts.buffer:
            raise ParameterError("osc_k", opts.osc_k, f"must be below the buffer ({opts.buffer} B)")


def run_incast(run: Run, fab: Fabric, case: str, r: Roles, opts: Options,
               cc: CcFactory, pfc: bool, t: Thresholds) -> None:
    """Scenarios a and c: the incast and the victim flow, with or without PFC."""
    size = opts.size
    workload = incast_workload(r, size)
    port = incast.bottleneck_port(fab, list(r.senders), r.receiver)
    pred = predict_incast(fab, r, size, cc, pfc, t)
    graph = model_graph(fab)
    shares = fair_share_schedule(graph, [FlowSpec(msg.msg_id, fab.routes.paths(msg.src, msg.dst),
                                                  msg.size_bytes) for msg in workload.messages])
    pauses0 = fab.pfc.summary()["pause_events"] if pfc else 0
    m = measure(fab, workload, engine_config(cc, opts.workers, transport=opts.transport), watch=[port],
                capture=opts.capture)
    pauses = fab.pfc.summary()["pause_events"] - pauses0 if pfc else None
    row, completion_s = incast_row(case, r, size, cc, pfc, m, port, pauses)
    incast_metrics(run, row, r, size, cc, port, pred, shares.finish_s[len(r.senders) + 1])
    # CC off without a drop (PFC, or a buffer the model says holds the incast): the
    # bottleneck is busy from first to last byte; idling would be the machine's doing.
    busy = cc.is_off and pred.get("drops") == 0
    record(run, fab, row, m, workload, rates=False, graph=graph, cc=cc,
           effect=f"incast completion: measured {completion_s * 1e6:.2f} us",
           saturated={port.name: completion_s} if busy else {})


def record(run: Run, fab: Fabric, row: dict[str, Any], m: Measurement, workload: Any, *,
           rates: bool, **case: Any) -> None:
    """The case's row of cc.csv, then `record_case` (``case``: its keywords) with the
    measurement's frames labelled with the case (the congestion-control trace with
    ``rates``)."""
    run.frame("cc", pd.DataFrame([row]))
    frames = {"messages": m.messages, "latency": m.latency, "queue": m.queue,
              "ports": m.ports.reset_index(), **({"rates": m.rates} if rates else {})}
    record_case(run, fab, row["case"], m, workload, frames=frames,
                labels={k: row[k] for k in ("case", "cc", "pfc")}, **case)


def convergence_s(m: Measurement, flows: list[int], bin_s: float) -> float:
    """Settling time: from the last flow's first frame at the receiver to the end of the
    last bin, before the first of the flows completes, whose per-flow delivered rates
    have a Jain index below CONVERGED_JAIN (0 if there is none); NaN if the last bin
    is one of them (the rates never settled) or the interval holds fewer than two bins."""
    lat = m.latency[m.latency.msg_id.isin(flows)]
    join = float(lat.groupby("msg_id").t_s.min().max())
    end = float(m.messages[m.messages.msg_id.isin(flows)].end_s.min())
    edges = np.arange(join, end, bin_s)
    if len(edges) < 3:
        return math.nan
    counts = [np.histogram(lat[lat.msg_id == f].t_s, bins=edges)[0] for f in flows]
    unfair = [i for i in range(len(edges) - 1)
              if jain_index([c[i] for c in counts]) < CONVERGED_JAIN]
    if not unfair:
        return 0.0
    return math.nan if unfair[-1] == len(edges) - 2 else float(edges[unfair[-1] + 1] - join)


def run_fairness(run: Run, fab: Fabric, case: str, r: Roles, opts: Options,
                 cc: CcFactory) -> None:
    """Scenario b: flows joining one bottleneck one by one."""
    senders = list(r.senders[:opts.flows])
    workload = staggered(collectives.build("incast", [r.receiver, *senders], opts.flow_size),
                         opts.gap)
    flows = [msg for msg in workload.messages if msg.src != msg.dst]
    graph = model_graph(fab)
    sched = fair_share_schedule(graph, [FlowSpec(msg.msg_id, fab.routes.paths(msg.src, msg.dst),
                                                 msg.size_bytes, msg.start_s) for msg in flows])
    port = incast.bottleneck_port(fab, senders, r.receiver)
    m = measure(fab, workload, engine_config(cc, opts.workers, transport=opts.transport), watch=[port],
                capture=opts.capture)
    full = max(sched.intervals, key=lambda iv: len(iv.rates_bps))
    active = list(full.rates_bps)
    measured = [window_rate_bps(m, f, full.t0_s, full.t1_s, opts.settle,
                                sched.finish_s[f] - sched.last_byte_s[f]) for f in active]
    # The max-min shares of an ideal control, scaled by the bottleneck share the
    # algorithm aims at where it declares one (HPCC: eta, by design below 1).
    aim = cc.target_utilisation
    model = [full.payload_rates_bps[f] * aim for f in active]
    bin_s = CONVERGENCE_BIN_FRAMES * 8.0 * WIRE_FRAME_BYTES / port.rate_bps
    conv_s = convergence_s(m, active, bin_s)
    row = {"case": case, "scenario": "fairness", "cc": cc.name, "pfc": False,
           "jain": jain_index(measured) if sum(measured) > 0 else math.nan,
           "aggregate_gbps": sum(measured) * 1e-9, "smallest_gbps": min(measured) * 1e-9,
           "convergence_us": conv_s * 1e6,
           "retransmitted": int(m.messages.retransmitted.sum()),
           "drops": int(m.ports.drops.sum()),
           "ecn_echoes": int(m.messages.ecn_echoes.sum()),
           "cnps": int(m.messages.cnps_received.sum())}
    run.metric(case, "Jain index", "", row["jain"], jain_index(model), FAIR_JAIN)
    run.metric(case, "aggregate throughput", "Gb/s", row["aggregate_gbps"], sum(model) * 1e-9,
               FAIR_AGGREGATE)
    run.metric(case, "smallest share", "Gb/s", row["smallest_gbps"], min(model) * 1e-9,
               FAIR_SMALLEST)
    run.metric(case, "convergence time", "us", row["convergence_us"], None)
    if math.isnan(conv_s):
        run.note(f"{case}: the flows' rates had not settled (Jain >= {CONVERGED_JAIN} in bins "
                 f"of {bin_s * 1e6:.2f} us) when the first flow ended")
    record(run, fab, row, m, workload, rates=True, graph=graph, cc=cc,
           effect="shifts the measured windows against the model's schedule by the "
           "missing delay")


def scenarios_of(scenarios: str | Sequence[str], cc: CcFactory, pfc: bool) -> tuple[str, ...]:
    """The kinds of case run for ``cc`` without PFC (``pfc`` False) or with it: those
    named, or by default incast and fairness, oscillation for DCTCP and steady for
    HPCC, then the incast with PFC."""
    if scenarios == "auto":
        scenarios = ["incast", "fairness", *(["oscillation"] if cc.oscillation_model else []),
                     *(["steady"] if cc.steady_model else []), "incast-pfc"]
    if pfc:
        return ("incast",) if "incast-pfc" in scenarios else ()
    return tuple(k for k in SCENARIOS if k in scenarios and k != "incast-pfc")


def pfc_config(opts: Options) -> PfcConfig:
    """PFC as the options set it: thresholds given or planned from the headroom."""
    def given(value: str | int) -> int | None:
        return None if value == "auto" else int(value)

    return PfcConfig(xoff_bytes=given(opts.xoff), xon_bytes=given(opts.xon),
                     reaction_budget_wall_s=opts.pfc_budget)


def _finish_long(run: Run, fab: Fabric, case: str, cc: CcFactory, lf: LongFlows,
                 row: dict[str, Any], what: str) -> None:
    run.note(f"{case}: {len(lf.fs.senders)} flows ({', '.join(lf.fs.senders)}) at "
             f"{lf.fs.rtt_s * 1e6:.2f} us unloaded RTT, {what}; {len(lf.queue())} queue samples "
             f"over {(lf.hi_s - lf.lo_s) * 1e6:.1f} us")
    record(run, fab, row, lf.m, lf.workload, rates=True, report=lf.report, cc=cc,
           graph=model_graph(fab),
           effect="lengthens the round trip the flows see by the missing delay")


def _measure(run: Run, fab: Fabric, kind: str, case: str, r: Roles, opts: Options,
             cc: CcFactory, pfc: bool, t: Thresholds) -> None:
    """Case ``case`` of scenario ``kind`` on ``fab``."""
    if kind == "incast":
        run_incast(run, fab, case, r, opts, cc, pfc, t)
    elif kind == "oscillation":
        _finish_long(run, fab, case, cc, *run_oscillation(run, fab, case, r.receiver, opts,
                                                          cc, t))
    elif kind == "steady":
        _finish_long(run, fab, case, cc, *run_steady(run, fab, case, r.receiver, opts, cc))
    else:
        run_fairness(run, fab, case, r, opts, cc)


def execute(run: Run, opts: Options, prefix: str = "") -> None:
    """Every case, committed as it ends: without PFC first (incast, fairness), then
    PFC is enabled on the same fabric for the incast cases with it."""
    topo = build_topo(opts.topo)
    for a, b in topo.links():
        topo.linkInfo(a, b)["buffer_bytes"] = opts.buffer
    t = Thresholds.from_text(opts.thresholds, opts.pmax)
    plan = [(kind, cc, pfc, f"{prefix}{kind} cc={cc.name}"
             + ("" if kind != "incast" else f" pfc={'on' if pfc else 'off'}"))
            for pfc in (False, True) for cc in map(resolve_cc, opts.algorithms)
            for kind in scenarios_of(opts.scenarios, cc, pfc)]
    todo = [p for p in plan if not run.finished(p[3])]
    run.note("metrics without a prediction are measured only: the model has no DCTCP, "
             "TIMELY, Swift or user algorithm, no PAUSE and no convergence dynamics")
    with progress(len(plan), f"{prefix}cc") as advance:
        for p in plan:
            if p not in todo:
                advance(p[3])
        if not todo:
            return
        with Fabric(topo, Scale(opts.scale), marking="auto", thresholds=t,
                    **opts.fabric_options()) as fab:
            run.fabric(f"{prefix}cc {opts.topo} buffer={opts.buffer}", fab)
            r = roles(topo_graph(topo), list(topo.host_nodes()), opts.senders)
            for kind, cc, pfc, case in todo:
                advance.start(case)
                if pfc and fab.pfc is None:
                    fab.enable_pfc(pfc_config(opts))
                run.attempt(partial(_measure, run, fab, kind, case, r, opts, cc, pfc, t),
                            opts.attempts)
                run.commit(case)
                advance(case)

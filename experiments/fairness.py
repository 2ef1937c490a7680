"""Fairness: DCQCN convergence as flows join and leave one bottleneck.

``flows`` senders (the hosts nearest the receiver) send ``size`` bytes each to one
receiver; flow k starts ``k * gap`` after the first, so flows join one by one and
leave as they finish. The set of active flows (measured start/end times) cuts the
run into intervals; in each, every flow's delivered throughput is counted from
its packets' arrival times (payload bytes per second, real units), after a settle
time of ``settle`` of the interval for DCQCN to converge. The intervals and their
rates are predicted from the configuration alone (`model.fairshare`: configured
starts, sizes, routes and link rates; max-min fair shares, the model of an ideal
congestion control); each flow's window is the model's interval shifted by its
path latency, when its bytes reach the receiver. Compared per interval: Jain index,
aggregate throughput and smallest share. The DCQCN rate of every flow over time is
in rates.csv, the receiver port's real and virtual queue in queue.csv.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import pandas as pd

from core.ecn import Thresholds
from core.errors import ParameterError
from core.frame import MTU_PAYLOAD_BYTES
from core.messages import Workload
from core.scaling import Scale
from core.units import parse_time_s
from emu.fabric import Fabric
from experiments.incast import nearest_senders
from experiments.measure import (
    Measurement,
    engine_config,
    measure,
    model_graph,
    record_case,
)
from experiments.option_parsers import (
    CC_HELP,
    parse_cc,
    parse_float,
    parse_int,
    parse_size,
    parse_thresholds,
    parse_topo,
)
from experiments.options import CommonOptions, Option, check_senders, check_thresholds, with_common
from experiments.progress import progress
from experiments.rundir import Run, jain_index
from model.claims import FAIR_AGGREGATE, FAIR_JAIN, FAIR_SMALLEST
from model.fairshare import FlowSpec, fair_share_schedule
from topologies.spec import build_topo
from traffic import collectives

NAME = "fairness"

#: Largest gap between flow starts (real): dilated by S = 1e5 it is 100 s per flow.
MAX_GAP_S = 1e-3


def parse_gap(value: Any) -> float:
    gap_s = parse_time_s(value, "gap")
    if gap_s > MAX_GAP_S:
        raise ParameterError("gap", value, f"must be at most {MAX_GAP_S * 1e3:g} ms (real)")
    return gap_s

OPTIONS: dict[str, Option] = with_common({
    "topo": Option("fattree,4", "topology", parse=parse_topo),
    "flows": Option(3, "number of flows (senders nearest the receiver)", parse=parse_int(1)),
    "size": Option(2 << 20, "bytes per flow", quick=1 << 20, parse=parse_size),
    "gap": Option(20e-6, "real seconds between flow starts", quick=10e-6, parse=parse_gap),
    "settle": Option(0.3, "fraction of each interval skipped while DCQCN converges",
                     parse=parse_float(0, 1, open_high=True)),
    "cc": Option("nic", CC_HELP, parse=parse_cc),
    "thresholds": Option("100K/400K", "Kmin/Kmax (bytes)", parse=parse_thresholds),
    "pmax": Option(0.2, "marking probability at Kmax", parse=parse_float(0, 1, open_low=True)),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    """The options of the fairness experiment (OPTIONS), typed."""

    topo: str
    flows: int
    size: int
    gap: float
    settle: float
    cc: str
    thresholds: str
    pmax: float


def check(opts: Options) -> None:
    """Options that depend on each other, checked before anything is built."""
    check_senders(opts.topo, opts.scale, opts.flows, "flows")
    check_thresholds([opts.thresholds], opts.pmax)


def staggered(workload: Workload, gap_s: float) -> Workload:
    """The same messages, message k released ``k * gap_s`` after the first."""
    msgs = [replace(m, start_s=k * gap_s) for k, m in enumerate(workload.messages)]
    return Workload("fairness", msgs, workload.ranks, workload.size_bytes, dict(workload.meta))


def _measure(run: Run, fab: Fabric, prefix: str, opts: Options) -> None:
    """The staggered flows on ``fab``: each interval's shares against the model's."""
    receiver = fab.hosts[0]
    senders = nearest_senders(fab, receiver, opts.flows)
    workload = staggered(collectives.build("incast", [receiver, *senders], opts.size),
                         opts.gap)
    flows = [msg for msg in workload.messages if msg.src != msg.dst]
    # The prediction, from the configuration alone: routes, sizes, configured starts.
    graph = model_graph(fab)
    sched = fair_share_schedule(graph, [FlowSpec(msg.msg_id,
                                                 fab.routes.paths(msg.src, msg.dst),
                                                 msg.size_bytes, msg.start_s)
                                        for msg in flows])
    port = fab.port(fab.routes.paths(senders[0], receiver)[0][-2], receiver)
    m = measure(fab, workload, engine_config(opts.cc, opts.workers, transport=opts.transport), watch=[port],
                capture=opts.capture)
    rows, cases = [], []
    for i, iv in enumerate(sched.intervals):
        active = list(iv.rates_bps)
        measured = [window_rate_bps(m, f, iv.t0_s, iv.t1_s, opts.settle,
                                    sched.finish_s[f] - sched.last_byte_s[f])
                    for f in active]
        model = [iv.payload_rates_bps[f] for f in active]
        case = f"{prefix}interval {i} ({len(active)} flows)"
        if sum(measured) > 0:
            run.metric(case, "Jain index", "", jain_index(measured), jain_index(model),
                       FAIR_JAIN)
        else:  # Jain's index of nothing is undefined; the zero throughput says it
            run.note(f"{case}: no packet arrived in the window the model gives "
                     "(its timeline and the emulator's drift apart by the missing fixed "
                     "delays, see the deviations)")
        run.metric(case, "aggregate throughput", "Gb/s", sum(measured) * 1e-9,
                   sum(model) * 1e-9, FAIR_AGGREGATE)
        run.metric(case, "smallest share", "Gb/s", min(measured) * 1e-9, min(model) * 1e-9,
                   FAIR_SMALLEST)
        rows += [{"interval": i, "t0_s": iv.t0_s, "t1_s": iv.t1_s, "msg_id": f,
                  "active": len(active), "throughput_bps": x, "model_bps": y}
                 for f, x, y in zip(active, measured, model, strict=True)]
        cases.append(case)
    # One measurement for every interval: its verdict is theirs.
    measurement = f"{prefix}cc={opts.cc}"
    record_case(run, fab, measurement, m, workload, cc=opts.cc,
                effect="shifts the measured windows against the model's schedule by the "
                "missing delay", graph=graph, verdicts=cases, deviation_case=f"{prefix}{NAME}",
                labels={"case": measurement},
                frames={"rates": m.rates, "queue": m.queue, "ports": m.ports.reset_index()})
    run.frame("intervals", pd.DataFrame(rows))
    run.frame("messages", m.messages)


def execute(run: Run, opts: Options, prefix: str = "") -> None:
    key = f"{prefix}{NAME}"
    if run.finished(key):  # one measurement: a resumed run has it or runs it all
        return
    t = Thresholds.from_text(opts.thresholds, opts.pmax)
    with progress(1, f"{prefix}fairness") as advance, \
            Fabric(build_topo(opts.topo), Scale(opts.scale), marking="auto",
                   thresholds=t, **opts.fabric_options()) as fab:
        run.fabric(opts.topo, fab)
        advance.start(key)
        run.attempt(partial(_measure, run, fab, prefix, opts), opts.attempts)
        run.commit(key)
        advance(key)


def window_rate_bps(m: Measurement, flow: Any, t0_s: float, t1_s: float, settle: float,
                    latency_s: float) -> float:
    """Payload rate of ``flow`` delivered in the model's interval [t0, t1] shifted to the
    receiver by the flow's path latency, its first ``settle`` fraction skipped."""
    lo, hi = t0_s + latency_s + settle * (t1_s - t0_s), t1_s + latency_s
    pkts = m.latency[(m.latency.msg_id == flow) & (m.latency.t_s >= lo) & (m.latency.t_s < hi)]
    return 8.0 * MTU_PAYLOAD_BYTES * len(pkts) / (hi - lo)

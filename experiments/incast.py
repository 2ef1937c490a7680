"""Incast: N senders -> 1 receiver, congestion control off and DCQCN (or any cc setting)
over a Kmin/Kmax sweep.

Measured per case: completion time, goodput, one-way latency p50/p99/p99.9, the
receiver port's queue over time and its peak, ECN marks, CNPs, drops and
retransmissions; each beside `model.incast_predict.predict_incast_on_graph` for the real
fabric (its switch latency, propagation, store and forward and NIC overhead; DCQCN:
the model's own fluid transient from the first byte; its steady state, the fixed
point, goes into the run's notes; other algorithms are measured only, as the model
has none of them). FCT slowdown by size bucket (fct_slowdown.csv):
each flow's FCT over the model's FCT of that size alone on an idle fabric, beside
the model's max-min fair shares (`model.fairshare`). The fixed delays the
emulator lacks are measured and listed as deviations.

Senders are the N hosts nearest the receiver (fewest routed hops, then name), so
that on the default topologies the receiver's port is the only one where traffic
fans in: the model has one bottleneck queue, and a fabric port that also queued
(e.g. two remote senders hashed onto one 800G aggregation downlink) would add a
queue the model does not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pandas as pd

from core.ecn import Thresholds, mark_probability
from core.errors import ParameterError
from core.forkmap import forked_map
from core.frame import MTU_PAYLOAD_BYTES, WIRE_FRAME_BYTES
from core.scaling import Scale
from core.units import format_size
from emu.fabric import Fabric
from experiments.measure import (
    engine_config,
    measure,
    model_graph,
    record_case,
)
from experiments.modelcache import PricedAhead
from experiments.option_parsers import (
    CC_CHOICES,
    parse_cc,
    parse_dcqcn,
    parse_float,
    parse_int,
    parse_list,
    parse_size,
    parse_thresholds,
    parse_topo,
)
from experiments.options import CommonOptions, Option, check_senders, check_thresholds, with_common
from experiments.progress import progress
from experiments.rundir import Run
from experiments.slowdown import fct_slowdown, ideal_fct_s, record_slowdown
from model.alphabeta import roce_wire_factor
from model.claims import FAIR_SHARE, INCAST_SLOWDOWN, Claim, incast_claims
from model.fairshare import FlowSpec, fair_share_schedule
from model.incast_predict import predict_incast_on_graph
from model.queueing import QueueDist, incast_cc_off
from topologies.spec import build_topo
from traffic import collectives
from traffic.ccload import resolve_cc
from traffic.transport import TRANSPORTS

NAME = "incast"

# Defaults: 3 senders of 2 MiB keep the CC-off peak queue ((N-1) x size = 4 MiB)
# inside the 8 MiB port buffer, so the lossless model applies; DCQCN with the
# paper's parameters (the NIC set's 300 us recovery timer stalls a short incast).
OPTIONS: dict[str, Option] = with_common({
    "topo": Option("fattree,4", "topology (NAME,ARG,KEY=VALUE)", parse=parse_topo),
    "senders": Option(3, "number of senders (the hosts nearest the receiver)",
                      parse=parse_int(1)),
    "size": Option(2 << 20, "bytes per sender", quick=1 << 20, parse=parse_size),
    "cc": Option(["off", "dcqcn"], f"congestion control settings to run, ';'-separated "
                 f"({CC_CHOICES}; dcqcn uses the dcqcn option's set)",
                 parse=parse_list(parse_cc)),
    "dcqcn": Option("paper", "DCQCN parameter set of cc=dcqcn: paper | nic", parse=parse_dcqcn),
    "thresholds": Option(["100K/400K", "400K/1.6M"], "Kmin/Kmax sweep (bytes) for the "
                         "DCQCN runs; CC off runs with the first", quick=["100K/400K"],
                         parse=parse_list(parse_thresholds)),
    "pmax": Option(0.2, "marking probability at Kmax", parse=parse_float(0, 1, open_low=True)),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    """The options of the incast experiment (OPTIONS), typed."""

    topo: str
    senders: int
    size: int
    cc: list[str]
    dcqcn: str
    thresholds: list[str]
    pmax: float


def check(opts: Options) -> None:
    """Options that depend on each other, checked before anything is built."""
    check_senders(opts.topo, opts.scale, opts.senders, "senders")
    check_thresholds(opts.thresholds, opts.pmax)


def case_name(prefix: str, cc: str, t: Thresholds) -> str:
    return (f"{prefix}cc={resolve_cc(cc).name} "
            f"K={format_size(t.kmin_bytes)}/{format_size(t.kmax_bytes)}")


def dcqcn_set(cc: str, dcqcn: str) -> str | None:
    """The DCQCN parameter set a cc setting runs (``dcqcn``: the option's), else None."""
    return dcqcn if cc == "dcqcn" else cc if cc in ("paper", "nic") else None


def mark_fraction(dist: QueueDist, t: Thresholds, points: int = 400) -> float:
    """Expected fraction of packets marked: E[p(q)] over the packet-weighted queue."""

    qs = (dist.quantile((i + 0.5) / points) for i in range(points))
    return sum(mark_probability(q, t) for q in qs) / points


def nearest_senders(fab: Fabric, receiver: str, n: int) -> list[str]:
    others = [h for h in fab.hosts if h != receiver]
    if not 1 <= n <= len(others):
        raise ParameterError("senders", n, f"the fabric has {len(others)} other hosts")
    dist = fab.routes.distances_to(receiver)
    return sorted(others, key=lambda h: (dist[h], fab.hosts.index(h)))[:n]


def bottleneck_port(fab: Fabric, senders: list[str], receiver: str) -> Any:
    """The receiver's last-hop port, where an incast fans in."""
    return fab.port(fab.routes.paths(senders[0], receiver)[0][-2], receiver)


def predict(fab: Fabric, senders: list[str], receiver: str, size_bytes: int, cc: str,
            t: Thresholds, dcqcn: str) -> dict[str, Any]:
    """Model metrics for one case (``cc`` 'off' or 'dcqcn' with the parameter set
    ``dcqcn``), plus expected marks and CNPs."""

    graph = model_graph(fab)
    common = dict(packet_bytes=WIRE_FRAME_BYTES, kmin_bytes=t.kmin_bytes, kmax_bytes=t.kmax_bytes,
                  pmax=t.pmax)
    n = len(senders)
    packets = n * -(-size_bytes // MTU_PAYLOAD_BYTES)
    wire_bytes = size_bytes * roce_wire_factor()  # time on the wire, Ethernet overhead included
    if cc == "off":
        pred = predict_incast_on_graph(graph, fab.routes.paths, senders, receiver, wire_bytes,
                                       cc="off", **common)
        port = bottleneck_port(fab, senders, receiver)
        dist = incast_cc_off(n, wire_bytes, pred["sender_rate_bps"], port.rate_bps,
                             port.buffer_bytes, packet_bytes=WIRE_FRAME_BYTES).queue
        pred["cnps"] = None  # receivers send CNPs with CC off too, but no model for them
        pred["marks"] = packets * mark_fraction(dist, t)
    else:
        # Before a run or beside a fabric's build: the machine's CPUs are the model's.
        pred = predict_incast_on_graph(graph, fab.routes.paths, senders, receiver, wire_bytes,
                                       cc="dcqcn", dcqcn=dcqcn, map_realisations=forked_map,
                                       **common)
        pred["marks"] = pred["ecn_marks"]
    pred["drops"] = pred["dropped_bytes"] / WIRE_FRAME_BYTES
    pred["goodput_bps"] = 8.0 * n * size_bytes / pred["completion_s"]
    return pred


def _note_model(run: Run, case: str, cc_name: str, model_cc: str | None,
                pred: dict[str, Any]) -> None:
    """The run's notes on what the model of ``case`` is (none, the DCQCN fluid's fixed
    point, a mean of random-marking runs) and the spread of those runs."""
    if model_cc is None:
        run.note(f"{case}: the model has no {cc_name}; its metrics are measured "
                 "only (FCT slowdown against the ideal congestion control's fair shares)")
    if "q_star_bytes" in pred:
        run.note(
            f"{case}: predictions from the DCQCN fluid transient; its steady state (fixed "
            f"point, Zhu et al. 2016) is q* = {pred['q_star_bytes'] / 1e3:.1f} KB at "
            f"p* = {pred['p_mark']:.3g}{' (pinned at Kmax)' if pred['marking_saturated'] else ''}")
    if pred.get("realisations", 1) > 1:
        (p99_lo, p99_hi), (peak_lo, peak_hi) = (pred["bands"][k] for k in
                                                ("latency_p99_s", "max_queue_bytes"))
        run.note(
            f"{case}: switches mark at random, so the model is the mean of "
            f"{pred['realisations']} runs of the fluid with random marks; 90 % of them lie in "
            f"p99 latency {p99_lo * 1e6:.1f}-{p99_hi * 1e6:.1f} us, peak queue "
            f"{peak_lo / 1e3:.0f}-{peak_hi / 1e3:.0f} KB: where one measured run may fall")
        for metric, key, factor in (("completion time", "completion_s", 1e6),
                                    ("latency p50", "latency_p50_s", 1e6),
                                    ("latency p99", "latency_p99_s", 1e6),
                                    ("latency p99.9", "latency_p999_s", 1e6),
                                    ("peak queue", "max_queue_bytes", 1e-3)):
            run.spread(case, metric, tuple(x * factor for x in pred["bands"][key]),
                       tuple(x * factor for x in pred["ranges"][key]))


def model_of(cc: str, dcqcn: str) -> str | None:
    """The model's congestion control for the run's ``cc``: 'off', 'dcqcn' or None (the
    model has none of that algorithm)."""
    if resolve_cc(cc).is_off:
        return "off"
    return None if dcqcn_set(cc, dcqcn) is None else "dcqcn"


def predict_case(fab: Fabric, senders: list[str], receiver: str, size_bytes: int, cc: str,
                 t: Thresholds, dcqcn: str) -> dict[str, Any]:
    """`predict` for a case run with ``cc``; {} where the model has no such algorithm."""
    model_cc = model_of(cc, dcqcn)
    if model_cc is None:
        return {}
    return predict(fab, senders, receiver, size_bytes, model_cc, t, dcqcn_set(cc, dcqcn) or dcqcn)


def run_case(run: Run, fab: Fabric, case: str, senders: list[str], receiver: str,
             size_bytes: int, cc: str, t: Thresholds, dcqcn: str, workers: int | str,
             capture: Sequence[str] = (), transport: str = TRANSPORTS[0], *,
             pred: dict[str, Any]) -> None:
    """Run one incast on ``fab`` and record it beside the model's ``pred`` (`predict_case`:
    CC off and DCQCN; other algorithms are measured only)."""
    factory = resolve_cc(cc)
    model_cc = model_of(cc, dcqcn)
    port = bottleneck_port(fab, senders, receiver)

    claims = incast_claims(model_cc, bool(pred["drops"])) if pred else {}

    def model(key: str, factor: float = 1.0) -> tuple[float | None, Claim | None]:
        """The model's value of ``key`` times ``factor``, and its claim."""
        if pred.get(key) is None:
            return None, None
        return pred[key] * factor, claims[key]

    _note_model(run, case, factory.name, model_cc, pred)
    workload = collectives.build("incast", [receiver, *senders], size_bytes, root=0)
    m = measure(fab, workload, engine_config(dcqcn if cc == "dcqcn" else cc, workers,
                                               transport=transport),
                watch=[port], capture=capture)
    done = m.messages.end_s.notna().all()
    completion_s = m.completion_s if done else float("nan")
    at_port = m.port(port.name)
    lat_us = m.latency.one_way_s * 1e6
    run.metric(case, "completion time", "us", completion_s * 1e6, *model("completion_s", 1e6))
    run.metric(case, "goodput", "Gb/s", 8e-9 * len(senders) * size_bytes / completion_s,
               *model("goodput_bps", 1e-9))
    for q, key in ((0.5, "p50"), (0.99, "p99"), (0.999, "p99.9")):
        run.metric(case, f"latency {key}", "us", float(lat_us.quantile(q)),
                   *model(f"latency_{key.replace('.', '')}_s", 1e6))
    peak_bytes = float(m.queue[m.queue.port == port.name].backlog_bytes.max())
    run.metric(case, "peak queue", "KB", peak_bytes / 1e3, *model("max_queue_bytes", 1e-3))
    run.metric(case, "ECN marks", "packets", float(at_port.ecn_marked), *model("marks"))
    if model_cc is None or pred["cnps"] is not None:
        run.metric(case, "CNPs", "packets", float(m.messages.cnps_sent.sum()),
                   *model("cnps"))
    run.metric(case, "drops", "packets", float(at_port.drops), *model("drops"))
    if pred and not pred["drops"]:
        run.metric(case, "retransmissions", "packets", float(m.messages.retransmitted.sum()),
                   0.0, claims["drops"])
    labels = {"case": case, "cc": cc, "kmin_bytes": t.kmin_bytes, "kmax_bytes": t.kmax_bytes}
    if pred:
        run.frame("queue_model", pd.DataFrame(pred["queue_trace"], columns=["t_s", "queue_bytes"]),
                  port=port.name, **labels)
    # Each port's own marking thresholds are columns of its row (kmin_bytes, kmax_bytes).
    run.frame("ports", m.ports.reset_index(), case=case, cc=cc)
    # Without CC and without drops the model keeps the port busy from first to last
    # byte; a port idling then means the machine, not the network, held traffic back.
    busy = factory.is_off and not pred["drops"]
    effect = f"completion: measured {completion_s * 1e6:.2f} us" + (
        f", model {pred['completion_s'] * 1e6:.2f} us" if pred else "")
    record_case(run, fab, case, m, workload, cc=factory, effect=effect,
                saturated={port.name: completion_s} if busy else {}, labels=labels,
                frames={"messages": m.messages, "latency": m.latency, "rates": m.rates,
                        "queue": m.queue})
    record_slowdown(run, case, slowdown_table(fab, workload, m.messages),
                    FAIR_SHARE if model_cc is None else INCAST_SLOWDOWN)


def slowdown_table(fab: Fabric, workload: Any, messages: pd.DataFrame) -> pd.DataFrame:
    """FCT slowdown by size bucket, measured and under the model's fair shares."""

    graph = model_graph(fab)
    msgs = [msg for msg in workload.messages if msg.src != msg.dst]
    ideal = {msg.msg_id: ideal_fct_s(graph, fab.routes.paths, msg.src, msg.dst, msg.size_bytes)
             for msg in msgs}
    sched = fair_share_schedule(graph, [FlowSpec(msg.msg_id, fab.routes.paths(msg.src, msg.dst),
                                                 msg.size_bytes, msg.start_s) for msg in msgs])
    predicted = {msg.msg_id: [sched.finish_s[msg.msg_id] - msg.start_s] for msg in msgs}
    return fct_slowdown(messages[messages.msg_id.isin(ideal)], ideal, predicted)


def _predict_cases(fab: Fabric, senders: list[str], receiver: str, size_bytes: int,
                   ccs: Sequence[str], t: Thresholds, dcqcn: str) -> dict[str, dict[str, Any]]:
    """`predict_case` of each of ``ccs``, by cc (in `PricedAhead`'s process: the fabric
    is not built yet, and the predictions need only its topology and routes)."""
    return {cc: predict_case(fab, senders, receiver, size_bytes, cc, t, dcqcn) for cc in ccs}


def execute(run: Run, opts: Options, prefix: str = "") -> None:
    """Every case of the incast experiment, recorded into ``run`` (each committed as
    it ends; cases a resumed run already has are skipped, fabrics with none left too)."""

    topo = build_topo(opts.topo)
    sweep = [Thresholds.from_text(x, opts.pmax) for x in opts.thresholds]
    plan = [(t, cc) for i, t in enumerate(sweep) for cc in opts.cc
            if i == 0 or not resolve_cc(cc).is_off]
    with progress(len(plan), f"{prefix}incast") as advance:
        for t in sweep:
            cases = [(cc, case_name(prefix, cc, t)) for tt, cc in plan if tt is t]
            for _, case in cases:
                if run.finished(case):
                    advance(case)
            todo = [(cc, case) for cc, case in cases if not run.finished(case)]
            if not todo:
                continue
            fab = Fabric(topo, Scale(opts.scale), marking="auto", thresholds=t,
                         **opts.fabric_options())
            receiver = fab.hosts[0]
            senders = nearest_senders(fab, receiver, opts.senders)
            # DCQCN's fluid realisations (seconds of CPU) are predicted while the fabric
            # is built; every case is predicted once, not again on each attempt.
            slow = [cc for cc, _ in todo if model_of(cc, opts.dcqcn) == "dcqcn"]
            with (PricedAhead(partial(_predict_cases, fab, senders, receiver, opts.size, slow,
                                      t, opts.dcqcn)) as ahead, fab):
                ahead.wait()
                preds = ahead.result or {}
                run.fabric(f"{prefix}incast K={t.kmin_bytes}/{t.kmax_bytes}", fab)
                for cc, case in todo:
                    advance.start(case)
                    pred = preds[cc] if cc in preds else predict_case(
                        fab, senders, receiver, opts.size, cc, t, opts.dcqcn)
                    run.attempt(partial(run_case, run, fab, case, senders, receiver,
                                        opts.size, cc, t, opts.dcqcn, opts.workers,
                                        opts.capture, opts.transport, pred=pred),
                                opts.attempts)
                    run.commit(case)
                    advance(case)

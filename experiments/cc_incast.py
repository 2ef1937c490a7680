"""The incast scenario of the ``cc`` experiment (`experiments.cc_compare`'s scenarios a
and c): who sends to whom on the fabric (``roles``), the incast with its victim flow
(``incast_workload``), the model's prediction and what it claims (``predict_incast``,
``incast_claims``), and the case's cc.csv row and metrics from its measurement
(``incast_row``, ``incast_metrics``). `experiments.cc_compare` measures and records it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.ecn import Thresholds
from core.errors import ParameterError
from core.frame import WIRE_FRAME_BYTES
from core.messages import Message, Workload
from emu.fabric import Fabric
from experiments import incast
from experiments.measure import Measurement, model_graph
from experiments.rundir import Run
from model.alphabeta import roce_wire_factor
from model.claims import AIMED_THROUGHPUT, FAIR_SHARE, PFC_LOSSLESS, Claim
from model.claims import incast_claims as model_incast_claims
from model.incast_predict import predict_incast_on_graph
from traffic.ccload import CcFactory


@dataclass(frozen=True)
class Roles:
    """Who sends what to whom (see `experiments.cc_compare`'s module doc)."""

    receiver: str
    senders: tuple[str, ...]      # incast, in order: the victim's leaf, then leaf-mates
    victim: tuple[str, str]       # (source, destination)


def roles(graph: Any, hosts: list[str], n_senders: int) -> Roles:
    """The scenario's hosts on ``graph`` (first-hop switch = a host's neighbour);
    ParameterError naming the option when the topology or ``n_senders`` do not fit."""
    leaf = {h: min(graph.neighbors(h)) for h in hosts}
    receiver = hosts[-1]
    by_leaf: dict[str, list[str]] = {}
    for h in hosts:
        by_leaf.setdefault(leaf[h], []).append(h)
    others = [hs for sw, hs in by_leaf.items() if sw != leaf[receiver]]
    if len(others) < 2 or len(others[0]) < 2:
        raise ParameterError("topo", len(by_leaf), "needs hosts on three first-hop switches, "
                             "two or more on the second (the victim's), for the victim flow")
    victim_leaf, dst_leaf = others[0], others[1]
    pool = victim_leaf[:-1] + [h for h in by_leaf[leaf[receiver]] if h != receiver]
    if n_senders > len(pool):
        raise ParameterError("senders", n_senders, f"at most {len(pool)} on this topology "
                             "(the victim's leaf-mates and the receiver's)")
    return Roles(receiver, tuple(pool[:n_senders]), (victim_leaf[-1], dst_leaf[0]))



def incast_workload(r: Roles, size_bytes: int) -> Workload:
    msgs = [Message(i, s, r.receiver, size_bytes) for i, s in enumerate(r.senders, start=1)]
    victim = Message(len(msgs) + 1, *r.victim, size_bytes, tag="victim")
    return Workload("incast+victim", [*msgs, victim], [*r.senders, r.receiver, *r.victim],
                    size_bytes)


def predict_incast(fab: Fabric, r: Roles, size_bytes: int, cc: CcFactory, pfc: bool,
                   t: Thresholds) -> dict[str, Any]:
    """The model's incast where it has one: CC off (lossless with PFC), DCQCN without PFC."""
    senders = list(r.senders)
    dcqcn = incast.dcqcn_set(cc.spec, "paper")
    if pfc and cc.is_off:
        wire_bytes = size_bytes * roce_wire_factor()
        pred = predict_incast_on_graph(model_graph(fab), fab.routes.paths, senders, r.receiver,
                                       wire_bytes, cc="off", buffer_bytes=math.inf,
                                       packet_bytes=WIRE_FRAME_BYTES)
        return {"completion_s": pred["completion_s"], "drops": 0.0}
    if pfc or (not cc.is_off and dcqcn is None):
        return {}
    return incast.predict(fab, senders, r.receiver, size_bytes, "off" if cc.is_off else "dcqcn",
                          t, dcqcn or "paper")


def incast_claims(cc: CcFactory, pfc: bool, pred: dict[str, Any]) -> dict[str, Claim]:
    """What each value of `predict_incast`'s prediction claims to be (`model.claims`)."""
    if pfc:
        return {"completion_s": PFC_LOSSLESS, "goodput_bps": PFC_LOSSLESS, "drops": PFC_LOSSLESS}
    if not pred:
        return {}
    return model_incast_claims("off" if cc.is_off else "dcqcn", bool(pred["drops"]))




def _payload_bits_and_capacity_bps(r: Roles, size_bytes: int, port: Any) -> tuple[float, float]:
    """The incast's payload (bits) and the bottleneck ``port``'s payload rate."""
    return 8.0 * size_bytes * len(r.senders), port.rate_bps / roce_wire_factor()


def incast_row(case: str, r: Roles, size_bytes: int, cc: CcFactory, pfc: bool,
               m: Measurement, port: Any, pauses: int | None) -> tuple[dict[str, Any], float]:
    """The case's cc.csv row from its measurement at the bottleneck ``port``, and the
    incast's completion (s; NaN if a message did not complete)."""
    msgs = m.messages
    victim_id = len(r.senders) + 1
    inc = msgs[msgs.msg_id != victim_id]
    victim = msgs[msgs.msg_id == victim_id].iloc[0]
    done = bool(inc.end_s.notna().all())
    completion_s = float(inc.end_s.max() - inc.start_s.min()) if done else math.nan
    lat = m.latency
    inc_lat_us = lat[lat.msg_id != victim_id].one_way_s * 1e6
    victim_lat_us = lat[lat.msg_id == victim_id].one_way_s * 1e6
    drops = int(m.ports.drops.sum())
    q = m.queue[m.queue.port == port.name]
    peak_bytes = float(q.backlog_bytes.max())
    # Time-averaged over the incast (the samples are periodic): the line-rate start of
    # a window-based control sets the peak, its reaction the mean.
    during = q[(q.t_s >= inc.start_s.min()) & (q.t_s <= inc.end_s.max())] if done else q
    mean_bytes = float(during.backlog_bytes.mean())
    # The incast's payload over its completion, against the bottleneck's payload rate.
    incast_bits, capacity_bps = _payload_bits_and_capacity_bps(r, size_bytes, port)
    row = {
        "case": case, "scenario": "incast", "cc": cc.name, "pfc": pfc,
        "completion_us": completion_s * 1e6, "drops": drops, "pauses": pauses,
        "incast_gbps": incast_bits / completion_s * 1e-9,
        "bottleneck_share": incast_bits / completion_s / capacity_bps,
        "latency_p99_us": float(inc_lat_us.quantile(0.99)),
        "peak_queue_KB": peak_bytes / 1e3, "mean_queue_KB": mean_bytes / 1e3,
        "retransmitted": int(msgs.retransmitted.sum()),
        "ecn_echoes": int(msgs.ecn_echoes.sum()), "cnps": int(msgs.cnps_received.sum()),
        "victim_fct_us": float(victim.fct_s) * 1e6,
        "victim_gbps": 8e-9 * size_bytes / float(victim.fct_s),
        "victim_latency_p99_us": float(victim_lat_us.quantile(0.99)),
    }
    return row, completion_s


def incast_metrics(run: Run, row: dict[str, Any], r: Roles, size_bytes: int, cc: CcFactory,
                   port: Any, pred: dict[str, Any], victim_model_s: float) -> None:
    """The case's metrics: ``row``'s measured values against the model's ``pred`` (and
    the victim's FCT under max-min fair sharing, ``victim_model_s``) where it has one."""
    case, pfc = row["case"], row["pfc"]
    claims = incast_claims(cc, pfc, pred)

    def model(key: str, factor: float = 1.0) -> tuple[float | None, Claim | None]:
        """The model's value of ``key`` times ``factor``, and its claim."""
        if pred.get(key) is None:
            return None, None
        return pred[key] * factor, claims[key]

    incast_bits, capacity_bps = _payload_bits_and_capacity_bps(r, size_bytes, port)
    run.metric(case, "incast completion", "us", row["completion_us"],
               *model("completion_s", 1e6))
    # Where the model has no completion: an ideal control (scaled by the share the
    # algorithm aims at) keeps the bottleneck busy from the first byte to the last.
    if pred.get("completion_s"):
        run.metric(case, "incast throughput", "Gb/s", row["incast_gbps"],
                   incast_bits / pred["completion_s"] * 1e-9, claims["goodput_bps"])
    else:
        run.metric(case, "incast throughput", "Gb/s", row["incast_gbps"],
                   cc.target_utilisation * capacity_bps * 1e-9, AIMED_THROUGHPUT)
    run.metric(case, "drops", "packets", row["drops"], *model("drops"))
    run.metric(case, "latency p99", "us", row["latency_p99_us"], *model("latency_p99_s", 1e6))
    run.metric(case, "peak queue", "KB", row["peak_queue_KB"],
               *model("max_queue_bytes", 1e-3))
    run.metric(case, "mean queue", "KB", row["mean_queue_KB"], None)
    if pfc:
        run.metric(case, "PAUSE events", "count", row["pauses"], None)
    run.metric(case, "retransmissions", "packets", row["retransmitted"], None)
    run.metric(case, "ECN-echo ACKs", "count", row["ecn_echoes"], None)
    run.metric(case, "victim FCT", "us", row["victim_fct_us"], victim_model_s * 1e6, FAIR_SHARE)
    run.metric(case, "victim throughput", "Gb/s", row["victim_gbps"],
               8e-9 * size_bytes / victim_model_s, FAIR_SHARE)
    run.metric(case, "victim latency p99", "us", row["victim_latency_p99_us"], None)

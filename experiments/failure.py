"""Failures mid-collective: what a link that goes down, degrades or flaps costs a ring
all-reduce and an all-to-all, against the same collective without failure.

Cases, for each collective: no failure; ``link`` down at ``fail_at`` (real time) at
every detection delay (its ends reroute at once, the rest of the fabric after the
delay: `emu.faultinject`); ``degraded_link`` at ``degraded_rate`` of its rate from the
start; ``flap_link`` flapping (``flap``, with ``detect_delay``; a link back up is routed over
again once it has stayed up for ``holddown``, so a flap with shorter up phases is a
link down from its first down phase on); and the user's own ``faults``, if any, at
every detection delay. Engine go-back-N recovers
what the black hole took.

Per case: completion time and busbw, frames the fabric lost (no route, at the dead
link's ports: its queue flushed with it and frames sent into it, loss filters; all
counted, `emu.lossledger`) and frames retransmitted, the time until every route is on
a live path (from the applied events), the time until the last message hit was
delivered, and the model (`model.failurecost`): the no-failure and rerouted fabric
priced as the collective experiment prices them, plus the go-back-N recovery of the
messages hit, held back in the collective's DAG. failure.csv holds the rows,
events.csv every applied action, flow_rates.csv each message's mean rate over its
life, which the timeline plot draws.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from core.errors import FabricEmuError, ParameterError
from core.frame import WIRE_FRAME_BYTES
from core.scaling import Scale
from core.units import format_size, format_time, parse_time_s
from emu.ecn.backend import CHOICES as MARKING_CHOICES
from emu.fabric import Fabric
from emu.faultinject import FaultInjector, require_faults_supported
from experiments.measure import Measurement, engine_config, gate, measure, model_graph, record_case
from experiments.option_parsers import (
    CC_HELP,
    parse_cc,
    parse_choice,
    parse_collective,
    parse_list,
    parse_size,
    parse_text,
    parse_topo,
)
from experiments.options import (
    CommonOptions,
    Option,
    check_topology,
    parse_faults_option,
    with_common,
)
from experiments.progress import progress
from experiments.rundir import Run
from model.alphabeta import (
    Late,
    path_latency_s,
    predict_workload,
    predict_workload_hashed,
    roce_wire_factor,
    workload_bottleneck_rate_bps,
)
from model.claims import ALPHABETA, Claim, Kind, estimate, prediction
from model.failurecost import (
    LinkDownModel,
    degraded_graph,
    failed_fabric,
    late_of,
    nak_resent_bits,
    ring_slowest_link_s,
    sent_by,
)
from topologies.faultspec import (
    Fault,
    check_times,
    format_faults,
    held_down_from,
    parse_faults,
    resolve,
)
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic import collectives

NAME = "failure"

#: Ring with a link down mid-run: capacity left + the go-back-N recovery of the messages
#: the failure hit (timeouts past the detection, or a NAK), fed into the collective's
#: DAG; 10 %, the issue's target. Which messages were hit depends on the kernel's ECMP
#: hash, which cannot be reproduced from outside: the measured run says (those that
#: resent frames: lost ACKs alone cost no message anything; timed out or not), and the
#: model prices their recovery.
LINK_DOWN_RING = prediction(0.10, "capacity left + go-back-N recovery of the messages hit "
                                  "(timeouts or NAK, as measured), carried on by the ring's "
                                  "DAG")
LINK_DOWN_SPREAD = estimate("capacity left + go-back-N recovery of the messages hit, "
                            "carried on by the collective's DAG")
#: A ring with one slow link that its flows cannot avoid (a host's link, or any link
#: on every path of the flows that may cross it): busbw is the slowest hop's rate (the
#: issue's 5 %).
SLOWEST_LINK = prediction(0.05, "slowest-link model: the ring at its slowest hop's rate, "
                                "step latency hidden")
#: A slow link the ECMP hash may or may not put a message on: every message is its own
#: QP and hashes anew, by a kernel key that is random per boot, so a run is one draw of
#: the hash; the model is the mean over draws, an estimate of any one run.
SLOW_LINK_HASHED = estimate("the collective's DAG on the fabric with the slow link, the "
                            "mean over ECMP hash draws (a run is one draw)")
#: A flap re-admitted between its down phases (up phases longer than the hold-down), or
#: a user's faults: never faster than without failure.
NO_FAILURE_BOUND = Claim(Kind.LOWER_BOUND, None, "the same collective without failure")
HASH_DRAWS = 16


def parse_time(value: Any) -> float:
    return parse_time_s(value, "time") if not isinstance(value, float) else parse_time_s(value)


def parse_rate_fraction(value: Any) -> float:
    """A rate fraction as a fault's ``rate=`` takes it: 0.25 or 25%, above 0, at most 1."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = repr(float(value))
    (fault,) = parse_faults(f"x-y:rate={parse_text(value)}@0")
    return float(fault.value or 0.0)


def parse_flap(value: Any) -> str:
    text = parse_text(value)
    parse_faults(f"x-y:flap={text}@0")
    return text


OPTIONS: dict[str, Option] = with_common({
    "topo": Option("fattree,4", "fabric (NAME,ARG,KEY=VALUE)", parse=parse_topo),
    "collectives": Option(["allreduce-ring", "alltoall"], "collectives (';'-separated)",
                          parse=parse_list(parse_collective)),
    "size": Option(4 << 20, "buffer size (NCCL-tests size)", quick=1 << 20, parse=parse_size),
    "link": Option("a1-c1", "the link that goes down (A-B, by name or role rank: agg1-core1)",
                   parse=parse_text),
    "fail_at": Option(50e-6, "when it goes down (real time after the start, e.g. 50us)", quick=10e-6,
                      parse=parse_time),
    "detect_delays": Option([0.0, 50e-6, 1e-3, 3e-3], "detection delays of the fabric beyond "
                            "the link's ends (real, ';'-separated)", quick=[0.0, 50e-6],
                            parse=parse_list(parse_time)),
    "degraded_link": Option("h1-e1", "the link degraded from the start (A-B)", parse=parse_text),
    "degraded_rate": Option(0.25, "fraction of its rate the degraded link keeps (0.25 or 25%)",
                            parse=parse_rate_fraction),
    "flap_link": Option("a1-c1", "the link that flaps (A-B)", parse=parse_text),
    "flap": Option("20us/10us", "its flap: UP/DOWN durations (real)", parse=parse_flap),
    "cc": Option("off", CC_HELP, parse=parse_cc),
    "marking": Option("off", "ECN marking at the switches' ports: off | bpf | red | auto; "
                             "with bpf, a dead link's ports count what they are offered "
                             "with the marker's own counter (emu.lossledger)",
                      parse=parse_choice(*MARKING_CHOICES)),
}, faults=Option("none", "further faults of your own, one more case at every detection "
                         "delay: TARGET:ACTION@TIME;... (topologies.faultspec)",
                 parse=parse_faults_option),
   detect_delay=Option(50e-6, "the flapping link's detection delay (real; the other cases "
                              "take every detect_delays)", parse=parse_time))


@dataclass(frozen=True)
class Options(CommonOptions):
    """The options of the failure experiment (OPTIONS), typed."""

    topo: str
    collectives: list[str]
    size: int
    link: str
    fail_at: float
    detect_delays: list[float]
    degraded_link: str
    degraded_rate: float
    flap_link: str
    flap: str
    cc: str
    marking: str


@dataclass(frozen=True)
class Case:
    """One measured case: its name, kind and faults (resolved), detection delay."""

    name: str
    collective: str
    kind: str            # none | down | degraded | flap | faults
    faults: tuple[Fault, ...]
    detect_s: float


def _link_fault(topo: Any, spec: str, link: str, action: str, option: str) -> Fault:
    try:
        (fault,) = resolve(parse_faults(f"{link}:{action}"), topo, spec)
    except ParameterError as e:
        raise ParameterError(option, link, e.why) from None
    if not fault.is_link:
        raise ParameterError(option, link, "expected a link A-B")
    return fault


def cases(opts: Options) -> list[Case]:
    """Every case of the run, its faults resolved against the topology."""
    topo = build_topo(opts.topo)
    down = _link_fault(topo, opts.topo, opts.link, f"down@{opts.fail_at}", "link")
    degraded = _link_fault(topo, opts.topo, opts.degraded_link,
                           f"rate={opts.degraded_rate}@0", "degraded_link")
    flap = _link_fault(topo, opts.topo, opts.flap_link, f"flap={opts.flap}@0", "flap_link")
    own = tuple(resolve(parse_faults(opts.faults), topo, opts.topo))
    flap_d = opts.detect_delay
    out = []
    for name in opts.collectives:
        out.append(Case(f"{name} no failure", name, "none", (), 0.0))
        for d in opts.detect_delays:
            out.append(Case(f"{name} {down.target} down@{format_time(opts.fail_at)} detect "
                            f"{format_time(d)}", name, "down", (down,), d))
        out.append(Case(f"{name} {degraded.target} at {opts.degraded_rate:.0%}", name,
                        "degraded", (degraded,), 0.0))
        out.append(Case(f"{name} {flap.target} flap {opts.flap} detect {format_time(flap_d)}",
                        name, "flap", (flap,), flap_d))
        if own:
            out += [Case(f"{name} {format_faults(own)} detect {format_time(d)}", name, "faults",
                         own, d) for d in opts.detect_delays]
    return out


def check(opts: Options) -> None:
    check_topology(opts.topo, opts.scale)
    all_cases = cases(opts)
    for name in opts.collectives:
        ends_s = collective_time_s(opts.topo, name, opts.size)
        for case in all_cases:
            if case.collective == name and case.kind in ("down", "faults"):
                check_times([f for f in case.faults if f.kind != "up"], ends_s,
                            f"{name} of {format_size(opts.size)} (model)")


@functools.lru_cache(maxsize=64)
def collective_time_s(spec: str, name: str, size_bytes: int) -> float:
    """The collective's time without failure, ECMP spread evenly (the model's fastest):
    what a fault's time is checked against."""
    topo = build_topo(spec)
    return predict_workload(build_workload(topo, name, size_bytes), topo_graph(topo),
                            compute_routes(topo).paths).completion_s


def build_workload(topo: Any, name: str, size_bytes: int) -> Any:
    return collectives.build(name, list(topo.host_nodes()), size_bytes)


def price_draws(workload: Any, graph: Any, routes: Any, seed: int,
                late: dict[Any, Late] | None = None) -> list[Any]:
    """The collective's model on ``graph`` routed by ``routes``, one prediction per ECMP
    hash draw, as the collective experiment prices it; ``late``: messages held back
    (`model.alphabeta.Late`)."""
    return predict_workload_hashed(workload, graph, routes.paths, samples=HASH_DRAWS,
                                   seed=seed, late=late)


def price(workload: Any, graph: Any, routes: Any, seed: int,
          late: dict[Any, Late] | None = None) -> float:
    """The collective's model time (real s): the mean over `price_draws`."""
    return float(np.mean([p.completion_s
                          for p in price_draws(workload, graph, routes, seed, late)]))


# ----------------------------------------------------------------------------- counters

def timeline(m: Measurement) -> pd.DataFrame:
    """Each message's mean delivery rate over its life (first frame to delivery)."""
    msgs = m.messages[m.messages.end_s.notna() & (m.messages.src != m.messages.dst)]
    start = msgs.first_tx_s.where(msgs.first_tx_s >= 0, msgs.start_s)
    life = (msgs.end_s - start).clip(lower=1e-12)
    return pd.DataFrame({"flow": msgs.src + ">" + msgs.dst, "msg_id": msgs.msg_id,
                         "start_s": start, "end_s": msgs.end_s,
                         "rate_bps": 8.0 * msgs.size_bytes / life,
                         "retransmitted": msgs.retransmitted})


def reroute_s(events: pd.DataFrame) -> float:
    """Longest time from a link going down to the fabric's routes around it (applied)."""
    if events.empty:
        return float("nan")
    worst = 0.0
    for _, ev in events.groupby("link"):
        downs = ev[(ev.op == "link") & ~ev.up.astype(bool)]
        learns = ev[(ev.op == "learn") & ~ev.up.astype(bool)]
        for t in downs.applied_s:
            later = learns.applied_s[learns.applied_s >= t]
            if len(later):
                worst = max(worst, float(later.min()) - float(t))
    return worst


# ----------------------------------------------------------------------------- one case

def _measure(run: Run, fab: Fabric, case: Case, opts: Options, nofail_s: float) -> None:
    workload = build_workload(fab.topo, case.collective, opts.size)
    injector = FaultInjector(fab, case.faults, case.detect_s, opts.holddown)
    try:
        m = measure(fab, workload, engine_config(opts.cc, workers=opts.workers),
                    during=injector.watch)
        lost = injector.lost_frames()
    finally:
        injector.restore()
    if injector.error:
        raise FabricEmuError(f"faults {format_faults(case.faults)} could not be applied: "
                             f"{injector.error}")
    m.failure_drops = lost.total
    m.links_down = injector.links_taken_down()
    events = injector.events()
    factor = workload.meta["busbw_factor"]
    time_s = m.completion_s
    busbw = 8.0 * opts.size / time_s * factor
    retx = int(m.messages.retransmitted.sum())
    model_s, claim, model_row = model_of(fab, case, opts, workload, nofail_s, m)
    run.metric(case.name, "time", "us", time_s * 1e6, model_s * 1e6, claim)
    run.metric(case.name, "busbw", "GB/s", busbw / 8e9, 8.0 * opts.size / model_s * factor / 8e9,
               claim)
    hit = m.messages[m.messages.retransmitted > 0]
    fail_at = min((f.at_s for f in case.faults), default=0.0)
    row = {"case": case.name, "collective": case.collective, "kind": case.kind,
           "faults": format_faults(case.faults), "detect_s": case.detect_s,
           "holddown_s": opts.holddown,
           "size_bytes": opts.size, "time_s": time_s, "busbw_bps": busbw,
           "time_model_s": model_s, "claim": claim.label, **model_row,
           "frames_lost": lost.total, "frames_no_route": lost.no_route,
           "frames_lost_ports": lost.at_ports, "frames_lost_filters": lost.filtered,
           "frames_dropped_queues": int(m.ports.drops.sum()),
           # Frames the hosts sent and no host received that no counter explains (0 when
           # the count is whole; a frame still in flight at the end would show here).
           "frames_unaccounted": (m.stats.packets_sent - m.stats.packets_received
                                  - int(m.ports.drops.sum()) - lost.total),
           "frames_retransmitted": retx, "timeouts": int(m.messages.timeouts.sum()),
           "messages_completed": int(m.messages.completed.sum()),
           "messages": len(workload.messages), "reroute_s": reroute_s(events),
           "recovered_s": float(hit.end_s.max()) - fail_at if len(hit) else 0.0,
           "rto_s": m.stats.rto_s}
    report = gate(fab, m, workload, cc=opts.cc != "off")
    row["valid"] = report.valid
    run.frame("failure", pd.DataFrame([row]))
    run.frame("events", events, case=case.name)
    run.frame("flow_rates", timeline(m), case=case.name, fail_at_s=fail_at,
              detect_s=case.detect_s)
    record_case(run, fab, case.name, m, workload, cc=opts.cc, report=report,
                effect=f"{case.name}: measured {time_s * 1e6:.1f} us, model {model_s * 1e6:.1f} us")


def model_of(fab: Fabric, case: Case, opts: Options, workload: Any, nofail_s: float,
             m: Measurement) -> tuple[float, Claim, dict[str, float]]:
    """The case's model time, its claim and its parts (the messages hit read from
    ``m``)."""
    graph = model_graph(fab)
    case = as_link_down(case, opts.holddown)
    if case.kind == "none":
        return nofail_s, ALPHABETA, {"model_nofail_s": nofail_s}
    f = case.faults[0]
    if case.kind == "degraded":
        slow = degraded_graph(graph, f.nodes, float(f.value or 1.0))
        t = price(workload, slow, fab.routes, opts.size)
        if not case.collective.startswith("allreduce-ring"):
            return t, ALPHABETA, {"model_nofail_s": nofail_s, "model_dag_s": t}
        if hashed_onto(fab, workload, f.nodes):
            return t, SLOW_LINK_HASHED, {"model_nofail_s": nofail_s, "model_dag_s": t}
        bottleneck = workload_bottleneck_rate_bps(workload, slow, fab.routes.paths)
        # A link left no slower than the ring's own pace costs nothing: never below
        # the no-failure time (whose step latency the bandwidth term leaves out).
        ring = max(nofail_s, ring_slowest_link_s(len(workload.ranks), opts.size, bottleneck,
                                                 roce_wire_factor()))
        return ring, SLOWEST_LINK, {"model_nofail_s": nofail_s, "model_dag_s": t,
                                    "bottleneck_bps": bottleneck}
    if case.kind == "down":
        after_graph, after_routes = failed_fabric(fab.topo, frozenset({frozenset(f.nodes)}))
        base = price_draws(workload, after_graph, after_routes, opts.size)
        after_s = float(np.mean([p.completion_s for p in base]))
        late = late_messages(m, base, workload, f.at_s, case.detect_s,
                             nak_rtt_of(fab, graph, workload, f.nodes))
        late_s = (price(workload, after_graph, after_routes, opts.size, late=late) - after_s
                  if late else 0.0)
        model = LinkDownModel(nofail_s, after_s, f.at_s, case.detect_s, late_s)
        ring = case.collective.startswith("allreduce-ring")
        claim = LINK_DOWN_RING if ring else LINK_DOWN_SPREAD
        return model.completion_s, claim, {
            "model_nofail_s": nofail_s, "model_after_s": model.after_s,
            "model_capacity_s": model.capacity_s, "model_recovery_s": late_s,
            "model_reroute_s": model.reroute_s}
    return nofail_s, NO_FAILURE_BOUND, {"model_nofail_s": nofail_s}


def as_link_down(case: Case, holddown_s: float) -> Case:
    """A flap held down (`faultspec.held_down_from`: never re-admitted while it flaps,
    and the case's flap never ends) as the link down it is, at its first down phase;
    any other case as it is."""
    if case.kind != "flap":
        return case
    (flap,) = case.faults
    down_at_s = held_down_from(flap, holddown_s)
    if down_at_s is None:
        return case
    return Case(case.name, case.collective, "down", (Fault("down", flap.nodes, down_at_s),),
                case.detect_s)


def hashed_onto(fab: Fabric, workload: Any, link: tuple[str, ...]) -> bool:
    """Does ``link`` carry a message only if the ECMP hash puts it there (some message
    has paths both over it and not)?"""
    for msg in workload.messages:
        uses = {_uses(p, link) for p in fab.routes.paths(msg.src, msg.dst)} if msg.src != msg.dst else set()
        if len(uses) == 2:
            return True
    return False


def late_messages(m: Measurement, base: list[Any], workload: Any, fail_at_s: float,
                  detect_s: float, rtt_s: float) -> dict[Any, Late]:
    """The messages the failure hit, as the run says (which ones depends on the ECMP
    hash: those that resent frames; lost ACKs alone cost nothing), each held back as
    `late_of` prices its recovery: a timeout if one held its delivery, else a NAK after
    ``rtt_s`` (`nak_rtt_of`). When a message was posted, what it had sent by the
    failure, and its rate during the NAK's round trip, are read from the model's
    timing (``base``: the predictions without it, mean over them)."""
    hit = m.messages[m.messages.retransmitted > 0]
    rto_s = float(m.stats.rto_s or 0.0)
    # A timeout that fired after the message was delivered (its last ACKs lost) held
    # back nothing: the branch is a timeout only if the delivery came most of an RTO
    # after the message was sent or the failure (its timer starts at the last ACK
    # before), half an RTO being far beyond any NAK's round trip.
    waited = hit.end_s - np.maximum(hit.start_s, fail_at_s) >= rto_s / 2
    timed_out = (hit.timeouts > 0) & waited
    wire = roce_wire_factor()
    size = {msg.msg_id: 8.0 * wire * msg.size_bytes for msg in workload.messages}
    out = {}
    for msg_id, timeout in zip(hit.msg_id, timed_out, strict=True):
        bits = size[msg_id]
        sent = np.mean([sent_by(p.ready_s[msg_id], p.finish_s[msg_id], fail_at_s)
                        for p in base])
        posted_s = float(np.mean([p.ready_s[msg_id] for p in base]))
        rate_bps = np.mean([bits / max(p.finish_s[msg_id] - p.ready_s[msg_id], 1e-12)
                            for p in base])
        # Its frame in service at the dead port lost (the model's load on a fabric
        # link of a ring or all-to-all stays under its rate: no standing queue), and,
        # until the reroute, whatever it sent on into the black hole.
        left_s = (1.0 - float(sent)) * bits / float(rate_bps)
        blackhole_s = min(left_s, max(0.0, fail_at_s + detect_s - max(posted_s, fail_at_s)))
        nak_bits = nak_resent_bits(rtt_s, WIRE_FRAME_BYTES, float(rate_bps), blackhole_s)
        out[msg_id] = late_of(bool(timeout), fail_at_s, detect_s, rto_s, nak_bits,
                              float(sent) * bits, posted_s)
    return out


def nak_rtt_of(fab: Fabric, graph: Any, workload: Any, link: tuple[str, ...]) -> float:
    """The round trip a NAK takes for a message caught on ``link``: the longest of the
    workload's paths over the link, there and back (0 when none crosses it)."""
    crossing = [p for msg in workload.messages if msg.src != msg.dst
                for p in fab.routes.paths(msg.src, msg.dst) if _uses(p, link)]
    return 2 * max((path_latency_s(graph, p) for p in crossing), default=0.0)


def _uses(path: Any, link: tuple[str, ...]) -> bool:
    return any({u, v} == set(link) for u, v in zip(path[:-1], path[1:], strict=False))


def execute(run: Run, opts: Options) -> None:
    all_cases = cases(opts)
    require_faults_supported([f for c in all_cases for f in c.faults])
    topo = build_topo(opts.topo)
    with progress(len(all_cases), NAME) as advance:
        for case in all_cases:
            if run.finished(case.name):
                advance(case.name)
        if all(run.finished(c.name) for c in all_cases):
            return
        with Fabric(topo, Scale(opts.scale), marking=opts.marking,
                    **opts.fabric_options()) as fab:
            run.fabric(opts.topo, fab)
            nofail = {name: price(build_workload(topo, name, opts.size), model_graph(fab),
                                  fab.routes, opts.size) for name in opts.collectives}
            for case in all_cases:
                if run.finished(case.name):
                    continue
                advance.start(case.name)
                run.attempt(partial(_measure, run, fab, case, opts, nofail[case.collective]),
                            opts.attempts)
                run.commit(case.name)
                advance(case.name)


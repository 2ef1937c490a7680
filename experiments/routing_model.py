"""The a priori models `emu run routing` compares each routing mode with.

All from the topology and the workload, before anything runs:

* **ideal (balanced) bound**: every message spread evenly over all of its routed paths
  (`model.alphabeta.predict_workload`, mode 'spread'): no link carries more than its
  share, so no routing of these paths does better. A bound on completion (lower),
  busbw (upper) and on the max/mean link load (lower).
* **ECMP's expected collision loss**: the same fluid model with every message hashed
  onto one path, over ``samples`` independent hash draws (`predict_workload_hashed`):
  the mean over draws is the expectation, the 5-95 % band its spread.
* **dragonfly, non-minimal**: Valiant's halved global bandwidth and UGAL's bound come
  from `model.ugal` (``valiant_bound(topo, pairs)``, ``ugal_bound(topo, pairs)``: the
  max-min rates over the switches' path probabilities; the slowest flow's rate is the
  permutation's busbw bound) where that module exists; without it the case says so
  and has no model value.
* the unloaded one-way latency of each message's path, a lower bound of its frames'.
* **adaptive, spray, spray-rr, valiant, ugal (estimate)**: `model.adaptive`'s
  frame-level model, the switches' decision on every frame, over seeds and timing
  noise (`frame_estimate`), with the case's window.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from core.errors import ParameterError
from core.messages import Message, Workload
from model.adaptive import NOISE_LEVELS_S, FrameRun, flows_of, spread
from model.alphabeta import (
    WorkloadPrediction,
    busiest_link_bound,
    one_step,
    path_latency_s,
    predict_workload,
    predict_workload_hashed,
)
from model.claims import Claim, Kind, estimate
from topologies.base import FabricTopo
from topologies.routing import Routes
from topologies.valiant import GroupRoutes

IDEAL_TIME = Claim(Kind.LOWER_BOUND, None, "every message spread evenly over its paths")
IDEAL_RATE = Claim(Kind.UPPER_BOUND, None, "every message spread evenly over its paths")
IDEAL_LOAD = Claim(Kind.LOWER_BOUND, None, "max/mean link load with every message spread evenly")
ECMP_EXPECTED = estimate("fluid max-min, mean over random ECMP hash draws")
ECMP_BUSIEST = estimate("busiest link per random ECMP hash draw, mean over draws: each draw's "
                        "value is a lower bound of its fluid max-min completion (3.4-4.7 % "
                        "below it on fattree,4's all-to-all)")
#: Messages beyond which a one-step workload is priced by its busiest link
#: (`model.alphabeta.busiest_link_bound`): fattree,8's all-to-all (16,256 messages)
#: takes minutes per fluid draw, its busiest-link bound 0.4 s.
FLUID_MAX_MESSAGES = 3000
UNLOADED_LATENCY = Claim(Kind.LOWER_BOUND, None, "p99 over messages of the unloaded path latency")
NO_RETRANSMISSION = estimate("no drop expected: 0 retransmissions")
SINGLE_PATH_ORDER = estimate("one path per flow: frames arrive in order")
CPU_PARITY = Claim(Kind.UPPER_BOUND, None, "the target: within 20 % of ECMP's; one run of "
                   "each, whose ratio scatters by about +-20 % run to run (docs/validation.md)")
VALIANT_BOUND = Claim(Kind.UPPER_BOUND, None, "Valiant: half the global links' bandwidth")
UGAL_BOUND = Claim(Kind.UPPER_BOUND, None, "UGAL: the better of minimal and Valiant")
FRAME_ESTIMATE = estimate("frame model (model.adaptive): the switch's rule on every frame, "
                          "mean over seeds: start phases, timing noise 1-10 ns")
#: The modes `frame_estimate` prices, and the frames x runs beyond which it would take
#: more than about 10 s (fattree,8's permutation): fewer seeds, or skipped with a note.
FRAME_MODES = ("adaptive", "spray", "spray-rr", "valiant", "ugal")
FRAME_MODEL_MAX_FRAMES = 300_000


@dataclass(frozen=True)
class Expectation:
    """One workload's models: completion (real s), busbw (bit/s), max/mean link load."""

    ideal: WorkloadPrediction
    ideal_load: float
    ecmp_s: list[float]          # completion per hash draw
    ecmp_busbw_bps: list[float]
    ecmp_load: list[float]
    latency_p99_s: float
    ecmp_claim: Claim = ECMP_EXPECTED  # how the draws were priced


def link_load_ratio(link_bits: dict[tuple[str, str], float], links: list[tuple[str, str]]
                    ) -> float:
    """max / mean of the bits carried by ``links`` (NaN if they carried nothing)."""
    carried = np.array([link_bits.get(link, 0.0) for link in links], dtype=float)
    mean = carried.mean() if len(carried) else 0.0
    return float(carried.max() / mean) if mean > 0 else float("nan")


def fabric_links(graph: nx.Graph) -> list[tuple[str, str]]:
    """Every switch-to-switch link, both directions: the links routing chooses among."""
    switch = {n for n, d in graph.nodes(data=True) if d.get("role") != "host"}
    return sorted((u, v) for a, b in graph.edges for u, v in ((a, b), (b, a))
                  if u in switch and v in switch)


def expect(workload: Workload, graph: nx.Graph, routes: Routes, nic_bps: float,
           samples: int, seed: int) -> Expectation:
    """The ideal bound and ECMP's hash-draw distribution for ``workload``: the fluid
    max-min model, or for a one-step workload of more than FLUID_MAX_MESSAGES
    messages the busiest-link bound (`ecmp_claim` says which)."""
    links = fabric_links(graph)
    kw = {"nic_rate_bps": nic_bps, "collective": collective_of(workload)}
    busiest = len(workload.messages) > FLUID_MAX_MESSAGES and one_step(workload)
    price = busiest_link_bound if busiest else predict_workload
    ideal = price(workload, graph, routes.paths, mode="spread", **kw)
    draws = predict_workload_hashed(workload, graph, routes.paths, samples=samples, seed=seed,
                                    price=price, **kw)
    latency = [min(path_latency_s(graph, p) for p in routes.paths(m.src, m.dst))
               for m in workload.messages]
    return Expectation(
        ideal=ideal, ideal_load=link_load_ratio(ideal.link_bits, links),
        ecmp_s=[d.completion_s for d in draws],
        ecmp_busbw_bps=[float(d.busbw_bps or 0.0) for d in draws],
        ecmp_load=[link_load_ratio(d.link_bits, links) for d in draws],
        latency_p99_s=float(np.quantile(latency, 0.99)),
        ecmp_claim=ECMP_BUSIEST if busiest else ECMP_EXPECTED)


def collective_of(workload: Workload) -> str:
    """The collective whose busbw convention a workload follows ('allreduce-ring' is an
    all-reduce)."""
    return workload.name.split("-")[0]


def group_shift(topo: FabricTopo, size_bytes: int) -> Workload:
    """Dragonfly's adversarial pattern: the k-th host of every group sends to the k-th
    host of the next group, so minimal routing puts a group's whole demand on the
    global links toward one group."""
    groups: dict[int, list[str]] = {}
    for host in topo.host_nodes():
        groups.setdefault(int(topo.nodeInfo(host)["group"]), []).append(host)
    order = sorted(groups)
    msgs = []
    for i, g in enumerate(order):
        nxt = groups[order[(i + 1) % len(order)]]
        for k, src in enumerate(sorted(groups[g], key=_host_index)):
            dst = sorted(nxt, key=_host_index)[k % len(nxt)]
            msgs.append(Message(len(msgs), src, dst, size_bytes, tag="group-shift"))
    ranks = sorted(topo.host_nodes(), key=_host_index)
    return Workload("permutation", msgs, ranks, size_bytes, meta={"algorithm": "group shift"})


def _host_index(name: str) -> int:
    return int(name[1:])


def dragonfly_bound(mode: str) -> Callable[..., Any] | None:
    """``model.ugal``'s bound for ``mode`` ('valiant' or 'ugal'), None where that model
    is not part of this build."""
    try:
        ugal = importlib.import_module("model.ugal")
    except ModuleNotFoundError:
        return None
    return getattr(ugal, f"{mode}_bound", None)


def frame_estimate(workload: Workload, graph: nx.Graph, routes: Routes, mode: str, *,
                   groups: GroupRoutes | None = None, window: int | None = None
                   ) -> list[FrameRun] | str:
    """`model.adaptive.spread` of ``mode`` on ``workload`` (``groups``: a dragonfly's,
    for Valiant and UGAL; ``window``: the QPs' window in frames), with as many seeds per
    noise level as FRAME_MODEL_MAX_FRAMES allows, at most 4; or why there is none (a
    workload whose messages wait, or one too large to price in seconds)."""
    try:
        flows = flows_of(workload)
    except ParameterError as exc:
        return f"no frame estimate: {exc}"
    frames = sum(f.frames for f in flows)
    seeds = min(4, FRAME_MODEL_MAX_FRAMES // (frames * len(NOISE_LEVELS_S)))
    if seeds < 1:
        return (f"no frame estimate: {frames} frames x {len(NOISE_LEVELS_S)} runs would "
                f"take too long (limit {FRAME_MODEL_MAX_FRAMES})")
    return spread(graph, routes, flows, mode, seeds, groups=groups, window=window)

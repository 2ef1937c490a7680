"""Alpha-beta cost of message DAGs and collectives on the placed topology.

Model and assumptions (real-fabric units):

* A message of S bytes from a to b costs ``alpha + S / B``:
  alpha = ``overhead_s`` (fixed per-message software/NIC cost, paid before the
  first byte leaves) + the path latency: the links' ``delay_s`` (propagation) and
  the switches' ``switch_latency_s`` (pipeline; a node attribute, 0 if absent) plus
  what forwarding adds on top of the bandwidth term (``forwarding``):
  'store-and-forward' (a hop sends a frame only once it holds all of it): the last
  packet's serialization at every hop except the bottleneck one, since a k-packet
  pipeline through hops of serialization s_h takes ``k*max(s_h) + sum(s_h) -
  max(s_h)`` and ``k*max(s_h)`` is the bandwidth term; 'cut-through' (a hop
  forwards a frame's head as it arrives): nothing, the last packet's tail arrives
  as it leaves the bottleneck. The last packet is a full frame (``packet_bytes``) or
  the whole message if it is smaller. B is the message's max-min fair rate, which
  changes whenever other messages start or finish (fluid model).
* The defaults describe a real RoCEv2 fabric: store-and-forward switches, full
  4154-byte frames that take 4178 bytes of wire time (preamble, FCS and inter-frame
  gap), RoCEv2 headers on the wire and ~1 us NIC overhead per message.
* ``wire_factor`` (>= 1) scales bytes on the wire per payload byte (headers and
  Ethernet's per-frame overhead); the default `roce_wire_factor()` adds both, 1.0
  prices payload only.
* ECMP: 'spread' splits each message evenly over its equal-cost paths (the ideal);
  'hashed' puts it on one path chosen by ``choice`` (flow id = msg_id), as the
  engine does with one QP and UDP source port per message;
  `predict_workload_hashed` prices random draws of those choices.
* Optional ``nic_rate_bps`` caps every message (a QP never exceeds line rate; the
  NIC link already limits the sum).
* Closed forms assume every step's concurrent flows get the same rate B, the
  bottleneck per-flow max-min rate of that step's flows on the routed paths
  (`bottleneck_rate_bps`); steps are synchronous (no overlap between steps).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import networkx as nx

from core.frame import HEADER_BYTES, MTU_PAYLOAD_BYTES, WIRE_FRAME_BYTES, WIRE_OVERHEAD_BYTES
from core.gcpause import collector_paused
from model.busbw import busbw_factor
from model.fluid import FluidDag, FluidJob, simulate
from model.jobs import Late as Late
from model.jobs import PathsLike as PathsLike
from model.jobs import WorkloadJobs, memo_paths, resolve_paths
from model.jobs import path_latency_s as path_latency_s
from model.maxmin import (
    Choice,
    Path,
    link_capacities,
    make_flow,
    max_min_rates,
)


class Message(Protocol):
    """What the model reads of one message (any object with these attributes, e.g. a
    `core.messages.Message`)."""

    @property
    def msg_id(self) -> Hashable: ...
    @property
    def src(self) -> str: ...
    @property
    def dst(self) -> str: ...
    @property
    def size_bytes(self) -> float: ...
    @property
    def deps(self) -> Sequence[Hashable]: ...
    @property
    def start_s(self) -> float: ...
    @property
    def step(self) -> int: ...


class Workload(Protocol):
    """What the model reads of a message DAG (e.g. `core.messages.Workload`): its messages, ranks, nominal size, name and meta."""

    @property
    def name(self) -> str: ...
    @property
    def messages(self) -> Sequence[Message]: ...
    @property
    def ranks(self) -> Sequence[str]: ...
    @property
    def size_bytes(self) -> float: ...
    @property
    def meta(self) -> Mapping[str, Any]: ...


#: Per-message software/NIC overhead of a real RDMA NIC (post WQE -> wire, CQE).
DEFAULT_OVERHEAD_S = 1e-6
def roce_wire_factor(payload_bytes: int = MTU_PAYLOAD_BYTES,
                     header_bytes: int = HEADER_BYTES + WIRE_OVERHEAD_BYTES) -> float:
    """Wire bytes per payload byte of full-size RoCEv2 packets (4178 / 4096)."""
    return (payload_bytes + header_bytes) / payload_bytes


@dataclass
class WorkloadPrediction:
    """Model prediction for a message DAG (real seconds after the run's time zero)."""

    completion_s: float                    # last completion - first earliest start
    finish_s: dict[int, float] = field(default_factory=dict)
    ready_s: dict[int, float] = field(default_factory=dict)
    duration_s: dict[int, float] = field(default_factory=dict)   # finish - ready
    algbw_bps: float | None = None
    busbw_bps: float | None = None
    recomputations: int = 0
    link_bits: dict[tuple[str, str], float] = field(default_factory=dict)  # carried, wire



@collector_paused()
def predict_workload(workload: Workload, graph: nx.Graph, paths: PathsLike, *,
                     mode: str = "spread", choice: Choice | None = None,
                     overhead_s: float = DEFAULT_OVERHEAD_S,
                     packet_bytes: float = WIRE_FRAME_BYTES,
                     forwarding: str = "store-and-forward", wire_factor: float | None = None,
                     nic_rate_bps: float | None = None,
                     collective: str | None = None,
                     late: Mapping[Hashable, Late] | None = None) -> WorkloadPrediction:
    """Completion time of a Workload's message DAG as a fluid max-min simulation.

    A message becomes ready its ``gap_s`` (compute, if it has one) after its deps have
    completed (and not before its ``start_s``), starts sending ``overhead_s`` later, drains at its max-min rate
    and completes one path latency after its last byte is sent. algbw/busbw use
    ``collective`` (default: the workload's name, if it names a collective). ``late``:
    messages held back (`Late`); their successors wait for them and share with them.
    """
    return _prediction(workload, workload_jobs(
        workload, graph, paths, mode=mode, choice=choice, overhead_s=overhead_s,
        packet_bytes=packet_bytes, forwarding=forwarding, wire_factor=wire_factor,
        nic_rate_bps=nic_rate_bps, late=late), link_capacities(graph), collective,
        _first_start_s(workload))


def hashed_pricer(workload: Workload, graph: nx.Graph, paths: PathsLike, *,
                  overhead_s: float = DEFAULT_OVERHEAD_S,
                  packet_bytes: float = WIRE_FRAME_BYTES,
                  forwarding: str = "store-and-forward", wire_factor: float | None = None,
                  nic_rate_bps: float | None = None, collective: str | None = None,
                  late: Mapping[Hashable, Late] | None = None
                  ) -> Callable[[Choice | None], WorkloadPrediction]:
    """`predict_workload` in 'hashed' mode as a function of the ``choice`` of paths,
    for pricing many draws: what does not depend on the messages' paths is laid out
    once (`model.jobs.WorkloadJobs`), for every draw it prices."""
    prepared = WorkloadJobs(workload, graph, paths, overhead_s=overhead_s,
                            packet_bytes=packet_bytes, forwarding=forwarding,
                            wire_factor=roce_wire_factor() if wire_factor is None
                            else wire_factor, nic_rate_bps=nic_rate_bps, late=late)
    capacities = link_capacities(graph)
    t0_s = _first_start_s(workload)

    @collector_paused()
    def price(choice: Choice | None) -> WorkloadPrediction:
        return _prediction(workload, prepared.jobs("hashed", choice), capacities, collective,
                           t0_s, prepared.dag)
    return price


def _first_start_s(workload: Workload) -> float:
    """When the first of ``workload``'s messages starts (its completion counts from it)."""
    return min((m.start_s for m in workload.messages), default=0.0)


def _prediction(workload: Workload, jobs: tuple[list[FluidJob], dict[tuple[str, str], float]],
                capacities: Mapping[tuple[str, str], float], collective: str | None,
                t0_s: float, dag: FluidDag | None = None) -> WorkloadPrediction:
    """The prediction of ``workload`` from its fluid jobs and links' bits (``t0_s``:
    its `_first_start_s`; ``dag``: its jobs', laid out before)."""
    res = simulate(jobs[0], capacities, dag)
    pred = WorkloadPrediction(
        completion_s=res.makespan_s - t0_s if workload.messages else 0.0,
        finish_s=dict(res.finish_s), ready_s=dict(res.ready_s),
        duration_s={k: res.finish_s[k] - res.ready_s[k] for k in res.finish_s},
        recomputations=res.recomputations, link_bits=jobs[1],
    )
    _add_bandwidths(pred, workload, collective)
    return pred


def busiest_link_bound(workload: Workload, graph: nx.Graph, paths: PathsLike, *,
                       mode: str = "spread", choice: Choice | None = None,
                       overhead_s: float = DEFAULT_OVERHEAD_S,
                       packet_bytes: float = WIRE_FRAME_BYTES,
                       forwarding: str = "store-and-forward", wire_factor: float | None = None,
                       nic_rate_bps: float | None = None,
                       collective: str | None = None) -> WorkloadPrediction:
    """A lower bound of `predict_workload`'s completion for a one-step workload (every
    message released at once, no dependency, no gap), in time linear in its messages:
    the first byte leaves ``overhead_s`` after the release, the busiest link (the hosts'
    NIC links included) carries its bits at its rate, and the last one still takes the
    shortest path latency of any message. Max-min fills the busiest link from the start
    only if none of its flows is held back elsewhere, so the fluid completion can be
    later; `busbw_bps` is correspondingly an upper bound. For all-to-alls too large
    for the fluid simulation (fattree,8's 16,256 messages)."""
    if not one_step(workload):
        raise ValueError("the busiest-link bound needs a one-step workload: every message "
                         "released at once, none waiting for another")
    jobs, link_bits = workload_jobs(workload, graph, paths, mode=mode, choice=choice,
                                    overhead_s=overhead_s, packet_bytes=packet_bytes,
                                    forwarding=forwarding, wire_factor=wire_factor,
                                    nic_rate_bps=nic_rate_bps)
    caps = link_capacities(graph)
    busiest_s = max((bits / caps[link] for link, bits in link_bits.items()), default=0.0)
    post_s = min((j.post_s for j in jobs), default=0.0)
    pred = WorkloadPrediction(completion_s=overhead_s + busiest_s + post_s if jobs else 0.0,
                              link_bits=link_bits)
    _add_bandwidths(pred, workload, collective)
    return pred


def one_step(workload: Workload) -> bool:
    """Every message released at once, none waiting for another or for compute."""
    return (len({m.start_s for m in workload.messages}) <= 1
            and not any(m.deps or getattr(m, "gap_s", 0.0) for m in workload.messages))


def _add_bandwidths(pred: WorkloadPrediction, workload: Workload, collective: str | None
                    ) -> None:
    """algbw and busbw of ``pred`` from its completion (busbw None for no collective)."""
    name = collective or workload.meta.get("collective") or workload.name
    if pred.completion_s > 0:
        pred.algbw_bps = 8.0 * workload.size_bytes / pred.completion_s
        try:
            pred.busbw_bps = pred.algbw_bps * busbw_factor(name, len(workload.ranks))
        except ValueError:
            pred.busbw_bps = None


def workload_jobs(workload: Workload, graph: nx.Graph, paths: PathsLike, *, mode: str,
                  choice: Choice | None, overhead_s: float, packet_bytes: float,
                  forwarding: str, wire_factor: float | None, nic_rate_bps: float | None,
                  late: Mapping[Hashable, Late] | None = None
                  ) -> tuple[list[FluidJob], dict[tuple[str, str], float]]:
    """The fluid jobs of ``workload``'s messages and the wire bits each link carries
    (see `predict_workload` for the parameters)."""
    return WorkloadJobs(workload, graph, paths, overhead_s=overhead_s,
                        packet_bytes=packet_bytes, forwarding=forwarding,
                        wire_factor=roce_wire_factor() if wire_factor is None else wire_factor,
                        nic_rate_bps=nic_rate_bps, late=late).jobs(mode, choice)


#: A host pair's routes as the per-hop hash walks them: a leaf is the chosen path (a
#: tuple), a branch the list of its subtrees in sorted next-hop order.
HashTree = list | tuple


def hash_tree(paths: Sequence[Path]) -> HashTree:
    """The decisions `per_hop_hash_choice` makes for ``paths``, laid out once: the
    source host's first next hop taken, then at every switch with more than one
    remaining path the subtrees of its next hops, sorted."""
    cands, depth = list(paths), 1
    while len(cands) > 1 and depth == 1:
        first = min(p[1] for p in cands)
        cands, depth = [p for p in cands if p[1] == first], 2

    def branch(cands: list, depth: int) -> HashTree:
        if len(cands) == 1:
            return tuple(cands[0])
        hops = sorted({p[depth] for p in cands})
        return [branch([p for p in cands if p[depth] == h], depth + 1) for h in hops]
    return branch(cands, depth)


def per_hop_hash_choice(rng: random.Random, trees: dict[int, tuple[Any, HashTree]] | None = None
                        ) -> Choice:
    """A 'hashed' ECMP draw as independently seeded switches make it: at every switch
    a uniform pick among the next hops of the flow's remaining paths (not a uniform
    pick among whole paths, which differs where branches have unequal path counts);
    the source host sends on its first next hop, as the engine does.

    Each host pair's decisions are laid out once (`hash_tree`, kept in ``trees``,
    which draws over the same routes may share); a draw walks them with one
    ``rng.choice`` per switch that has a choice, as the walk over the paths did."""
    known = {} if trees is None else trees

    def choose(flow_id: Hashable, paths: Sequence[Path]) -> Path:
        node = _tree_of(known, paths)
        while type(node) is list:
            node = rng.choice(node)
        return node
    return choose


def _tree_of(known: dict[int, tuple[Any, HashTree]], paths: Sequence[Path]) -> HashTree:
    """The `hash_tree` of ``paths``, laid out once and kept in ``known``."""
    entry = known.get(id(paths))
    if entry is None or entry[0] is not paths:  # kept with it: its id stays its own
        entry = known[id(paths)] = (paths, hash_tree(paths))
    return entry[1]


def hash_draws(workload: Workload, paths: PathsLike, *, samples: int,
               seed: int = 0) -> list[dict[Hashable, Path]] | None:
    """The path of every message with a choice of path (``{msg_id: path}``) under each
    of ``samples`` independent draws (`per_hop_hash_choice`, one generator seeded
    with ``seed``, draw after draw); None when no message has a choice."""
    route = memo_paths(paths)
    choosing = [m for m in workload.messages if m.src != m.dst]
    if all(len(route(m.src, m.dst)) <= 1 for m in choosing):
        return None
    for m in choosing:
        if not route(m.src, m.dst):
            raise ValueError(f"flow {m.msg_id!r} has no routed path")
    # `per_hop_hash_choice`'s walk, each message's tree looked up once for all draws.
    trees: dict[int, tuple[Any, HashTree]] = {}
    ids = [m.msg_id for m in choosing]
    roots = [_tree_of(trees, route(m.src, m.dst)) for m in choosing]
    pick = random.Random(seed).choice
    draws = []
    for _ in range(samples):
        draw = {}
        for msg_id, node in zip(ids, roots, strict=True):
            while type(node) is list:
                node = pick(node)
            draw[msg_id] = node
        draws.append(draw)
    return draws


def predict_workload_hashed(workload: Workload, graph: nx.Graph, paths: PathsLike, *,
                            samples: int, seed: int = 0,
                            price: Callable[..., WorkloadPrediction] = predict_workload,
                            **kw: Any) -> list[WorkloadPrediction]:
    """`predict_workload` (or ``price``: `busiest_link_bound`) with every message hashed
    onto one path, under ``samples`` independent draws (`hash_draws`): the kernel's
    hash cannot be reproduced from outside, so the model gives the distribution over
    hash outcomes. One prediction when no message has a choice of path."""
    route = memo_paths(paths)
    draws = hash_draws(workload, route, samples=samples, seed=seed)
    if price is predict_workload:
        priced = hashed_pricer(workload, graph, route, **kw)
        return [priced(draw) for draw in draws or [None]]
    if draws is None:
        return [price(workload, graph, route, mode="hashed", **kw)]
    return [price(workload, graph, route, mode="hashed", choice=draw, **kw) for draw in draws]


# ---------------------------------------------------------------- closed forms

def _beta_s(size_bytes: float, bw_bps: float) -> float:
    return 8.0 * size_bytes / bw_bps


def ring_allreduce_time_s(n: int, size_bytes: float, bw_bps: float, alpha_s: float = 0.0) -> float:
    """Ring all-reduce: 2(n-1) steps of S/n bytes: ``2(n-1)(alpha + (S/n)/B)``."""
    return 2 * (n - 1) * (alpha_s + _beta_s(size_bytes / n, bw_bps))


def halving_doubling_allreduce_time_s(n: int, size_bytes: float, bw_bps: float,
                                      alpha_s: float = 0.0) -> float:
    """Rabenseifner (recursive halving reduce-scatter + doubling all-gather), n = 2^k:
    ``2 log2(n) alpha + 2 (n-1)/n S/B``."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"halving-doubling needs a power-of-two rank count, not {n}")
    return 2 * math.log2(n) * alpha_s + 2 * (n - 1) / n * _beta_s(size_bytes, bw_bps)


# ---------------------------------------------------------- topology-aware forms

def bottleneck_rate_bps(graph: nx.Graph, paths: PathsLike, pairs: Sequence[tuple[str, str]], *,
                        mode: str = "spread", choice: Choice | None = None,
                        nic_rate_bps: float | None = None) -> float:
    """Bottleneck per-flow rate of one step: the smallest max-min rate among the
    concurrent flows ``pairs`` (flow id = (src, dst) for a hashed ``choice``)."""
    route = resolve_paths(paths)
    cap_bps = math.inf if nic_rate_bps is None else float(nic_rate_bps)
    flows = [make_flow((s, d), route(s, d), mode=mode, choice=choice, cap_bps=cap_bps)
             for s, d in pairs if s != d]
    if not flows:
        return math.inf
    return min(max_min_rates(graph, flows).rates_bps.values())


def workload_bottleneck_rate_bps(workload: Workload, graph: nx.Graph, paths: PathsLike, *,
                                 mode: str = "spread", choice: Choice | None = None,
                                 nic_rate_bps: float | None = None) -> float:
    """Bottleneck per-flow rate of a compiled collective: the smallest
    `bottleneck_rate_bps` over its algorithm steps (messages grouped by ``step``, one
    flow per distinct (src, dst) pair), whatever the algorithm and rank count.
    All-to-all's steps are its pairwise shifts; sent all at once it can beat them."""
    steps: dict[int, set[tuple[str, str]]] = {}
    for m in workload.messages:
        steps.setdefault(m.step, set()).add((m.src, m.dst))
    flow_sets = [tuple(sorted(pairs)) for pairs in steps.values()]
    if not (mode == "hashed" and callable(choice)):
        # Steps of one flow set (all of a ring's) have one rate: priced once. A drawn
        # choice (a callable) may place a step's flows anew each time: priced per step.
        flow_sets = list(dict.fromkeys(flow_sets))
    route = memo_paths(paths)
    return min((bottleneck_rate_bps(graph, route, pairs, mode=mode, choice=choice,
                                    nic_rate_bps=nic_rate_bps) for pairs in flow_sets),
               default=math.inf)

"""A priori throughput of minimal, Valiant and UGAL routing on a dragonfly (pure).

Each flow (source host, destination host) is split over its paths with the
probabilities the switches use (``topologies.valiant``, emu/bpf/router.c), and the
flows share the links max-min fairly (`model.maxmin`), each capped by its NIC:

* **minimal**: the fabric's routes (fewest global links, then fewest hops), each
  equal-cost next hop with equal probability, as the switches draw per frame;
* **valiant**: through an intermediate group drawn uniformly among the groups
  other than the source's and the destination's (intra-group flows, and every
  flow with fewer than three groups, stay minimal): minimal to that group, then
  minimal to the destination. On the adversarial pattern every flow crosses two
  global links and none uses the direct link to the next group: its bound is half
  the global bandwidth the other groups' links give;
* **ugal**: the mix ``x`` minimal + ``1 - x`` Valiant, the same ``x`` for every
  flow, that maximizes the slowest flow's rate: what a UGAL router that balances
  the two perfectly reaches. UGAL-L decides from the source switch's own queues,
  which need not see a congested global link one local hop away, so it can stay
  below this bound; per-flow mixes could exceed it in patterns that are not
  symmetric.

`adversarial_pairs`: host k of group i sends to host k of group i + 1, so a group's
a*p hosts share its global links to the next group under minimal routing.

Rates are link rates (wire bit/s, as the links' ``rate_bps``); a RoCE payload
rate is that over ``model.alphabeta.roce_wire_factor()``. Fixed latencies are left
out: for large messages a flow's completion time is its size over its rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import ParameterError
from model.maxmin import Flow, max_min_rates
from topologies.base import FabricTopo
from topologies.routing import Routes, compute_routes, topo_graph
from topologies.valiant import (
    TAG_MINIMAL,
    GroupRoutes,
    group_routes,
    intermediate_group,
    next_hops,
    outcomes,
    tag_of,
)

Pair = tuple[str, str]
Path = tuple[str, ...]
#: Steps of the search for UGAL's mix (then refined around the best).
MIX_STEPS = 50


@dataclass(frozen=True)
class RoutingBound:
    """What a routing mode gives a set of flows: the slowest and mean flow rate,
    their sum (bit/s), the traffic share on minimal paths, and the tier of the link
    that limits the slowest flow (None: its NIC)."""

    mode: str
    slowest_flow_bps: float
    mean_flow_bps: float
    aggregate_bps: float
    minimal_fraction: float
    bottleneck: str | None


def adversarial_pairs(topo: FabricTopo) -> list[Pair]:
    """Every host to the host at the same position in the next group."""
    by_group: dict[int, list[str]] = {}
    for host in topo.host_nodes():
        by_group.setdefault(int(topo.nodeInfo(host)["group"]), []).append(host)
    groups = sorted(by_group)
    return [(src, by_group[groups[(i + 1) % len(groups)]][k])
            for i, grp in enumerate(groups) for k, src in enumerate(by_group[grp])]


def _walk(step: object, start: tuple[str, int], dst: str) -> dict[Path, float]:
    """Paths to ``dst`` and their probabilities from ``start`` (node, tag), each hop
    drawing uniformly among ``step(node, tag)``'s next hops."""
    out: dict[Path, float] = {}
    stack: list[tuple[Path, int, float]] = [((start[0],), start[1], 1.0)]
    while stack:
        path, tag, prob = stack.pop()
        hops, new_tag = step(path[-1], tag)  # type: ignore[operator]
        if not hops:
            raise ParameterError("dst", dst, f"no route from {path[0]}")
        for hop in hops:
            if hop == dst:
                out[(*path, hop)] = out.get((*path, hop), 0.0) + prob / len(hops)
            else:
                stack.append(((*path, hop), new_tag, prob / len(hops)))
    return out


def path_split(topo: FabricTopo, routes: Routes, gr: GroupRoutes, src: str, dst: str,
               mode: str) -> dict[Path, float]:
    """The paths of flow ``src`` -> ``dst`` under ``mode`` ('minimal' or 'valiant')
    with their probabilities."""
    first = routes.next_hops[src][dst]
    if mode == "minimal":
        return {(src, *p): w / len(first) for s in first
                for p, w in _walk(lambda n, t: (routes.next_hops[n][dst], 0), (s, 0), dst).items()}
    if mode != "valiant":
        raise ParameterError("mode", mode, "expected minimal or valiant")
    own, far = gr.group_of[src], gr.group_of[dst]
    # every group intermediate_group draws, each with the same probability
    vias = sorted({intermediate_group(own, far, gr.groups, r) for r in range(gr.groups)} - {None})
    if not vias:
        return path_split(topo, routes, gr, src, dst, "minimal")
    def step(node: str, tag: int) -> tuple[tuple[str, ...], int]:
        (after,) = outcomes("valiant", gr, node, src, dst, tag, False)
        return next_hops(gr, routes, node, dst, after), after

    split: dict[Path, float] = {}
    for via in vias:
        for s in first:
            # the source switch sends the frame toward ``via`` if it can (else minimal)
            tag = tag_of(via) if gr.to_group[s].get(via) else TAG_MINIMAL
            hops = next_hops(gr, routes, s, dst, tag)
            for hop in hops:
                for p, w in _walk(step, (hop, tag), dst).items():
                    split[(src, s, *p)] = (split.get((src, s, *p), 0.0)
                                           + w / len(hops) / len(first) / len(vias))
    return split


def _rates(topo: FabricTopo, splits: Sequence[dict[Path, float]], caps: Sequence[float],
           mode: str, minimal_fraction: float) -> RoutingBound:
    graph = topo_graph(topo)
    flows = [Flow(i, tuple(split), tuple(split.values()), cap_bps=cap)
             for i, (split, cap) in enumerate(zip(splits, caps, strict=True))]
    result = max_min_rates(graph, flows)
    rates = [result.rates_bps[i] for i in range(len(flows))]
    slowest = min(range(len(rates)), key=rates.__getitem__)
    link = result.bottleneck[slowest]
    return RoutingBound(mode, rates[slowest], sum(rates) / len(rates), sum(rates),
                        minimal_fraction, None if link is None else graph.edges[link]["tier"])


def _flows(topo: FabricTopo, pairs: Sequence[Pair] | None
           ) -> tuple[list[Pair], list[dict[Path, float]], list[dict[Path, float]], list[float]]:
    pairs = list(adversarial_pairs(topo) if pairs is None else pairs)
    if not pairs:
        raise ParameterError("pairs", pairs, "needs at least one flow")
    routes = compute_routes(topo)
    gr = group_routes(topo, routes)
    graph = topo_graph(topo)
    minimal = [path_split(topo, routes, gr, s, d, "minimal") for s, d in pairs]
    valiant = [path_split(topo, routes, gr, s, d, "valiant") for s, d in pairs]
    caps = [min(graph.edges[s, hop]["rate_bps"] for hop in graph.adj[s]) for s, _ in pairs]
    return pairs, minimal, valiant, caps


def _mixed(minimal: dict[Path, float], valiant: dict[Path, float], x: float) -> dict[Path, float]:
    mix = {p: x * w for p, w in minimal.items()}
    for p, w in valiant.items():
        mix[p] = mix.get(p, 0.0) + (1 - x) * w
    return {p: w for p, w in mix.items() if w > 0}


def minimal_bound(topo: FabricTopo, pairs: Sequence[Pair] | None = None) -> RoutingBound:
    """Max-min rates of ``pairs`` (default `adversarial_pairs`) under minimal routing."""
    _, minimal, _, caps = _flows(topo, pairs)
    return _rates(topo, minimal, caps, "minimal", 1.0)


def valiant_bound(topo: FabricTopo, pairs: Sequence[Pair] | None = None) -> RoutingBound:
    """Max-min rates of ``pairs`` (default `adversarial_pairs`) under Valiant routing."""
    _, _, valiant, caps = _flows(topo, pairs)
    return _rates(topo, valiant, caps, "valiant", 0.0)


def ugal_bound(topo: FabricTopo, pairs: Sequence[Pair] | None = None) -> RoutingBound:
    """Max-min rates of ``pairs`` (default `adversarial_pairs`) under the best common
    mix of minimal and Valiant routing (the highest slowest flow; then the most
    minimal traffic)."""
    _, minimal, valiant, caps = _flows(topo, pairs)

    def at(x: float) -> RoutingBound:
        return _rates(topo, [_mixed(m, v, x) for m, v in zip(minimal, valiant, strict=True)],
                      caps, "ugal", x)

    grid = [at(i / MIX_STEPS) for i in range(MIX_STEPS + 1)]
    best = max(grid, key=lambda b: (b.slowest_flow_bps, b.minimal_fraction))
    # Refine inside the best step's neighbours (the slowest rate is piecewise smooth in x).
    lo = max(0.0, best.minimal_fraction - 1 / MIX_STEPS)
    hi = min(1.0, best.minimal_fraction + 1 / MIX_STEPS)
    for _ in range(30):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if at(a).slowest_flow_bps < at(b).slowest_flow_bps:
            lo = a
        else:
            hi = b
    refined = at((lo + hi) / 2)
    return refined if refined.slowest_flow_bps > best.slowest_flow_bps else best

"""Valiant and UGAL on a dragonfly: the pure decisions, the group tables, every
possible path (delivered, loop-free, through an intermediate group) and the model's
bounds against hand computations."""

from __future__ import annotations

from collections import Counter

import pytest

from core.errors import ParameterError
from model.ugal import adversarial_pairs, minimal_bound, path_split, ugal_bound, valiant_bound
from topologies.routing import compute_routes
from topologies.spec import build_topo
from topologies.valiant import (
    TAG_MINIMAL,
    TAG_UNDECIDED,
    group_routes,
    intermediate_group,
    next_hops,
    outcomes,
    tag_of,
    ugal_prefers_valiant,
)

GBPS = 1e9


def test_intermediate_group_is_uniform_over_the_other_groups():
    for groups, own, dst in ((3, 0, 1), (5, 4, 1), (9, 2, 3), (9, 8, 0)):
        counts = Counter(intermediate_group(own, dst, groups, rnd)
                         for rnd in range(7 * (groups - 2)))
        assert set(counts) == set(range(groups)) - {own, dst}
        assert set(counts.values()) == {7}
    assert intermediate_group(2, 2, 5, 123) is None
    assert intermediate_group(0, 1, 2, 123) is None


def test_ugal_compares_queue_times_hops_and_ties_stay_minimal():
    assert not ugal_prefers_valiant(0, 3, 0, 5)
    assert ugal_prefers_valiant(1000, 3, 500, 5)       # 2500 < 3000
    assert not ugal_prefers_valiant(1000, 3, 600, 5)   # 3000 = 3000
    assert not ugal_prefers_valiant(1000, 3, 700, 5)
    # In whole frames: a frame still being sent (under one quantum) is no queue.
    assert not ugal_prefers_valiant(4000, 1, 0, 2, quantum=4178)
    assert ugal_prefers_valiant(4178, 1, 0, 2, quantum=4178)
    # 1 frame x 5 hops < 3 frames x 3 hops, where the bytes (8355 x 5 > 12534 x 3) would not.
    assert ugal_prefers_valiant(3 * 4178, 3, 2 * 4178 - 1, 5, quantum=4178)
    assert not ugal_prefers_valiant(3 * 4178, 3, 2 * 4178 - 1, 5)


def test_group_tables_lead_to_each_group():
    topo = build_topo("dragonfly,p=1,a=2,h=2")
    routes = compute_routes(topo)
    gr = group_routes(topo, routes)
    assert gr.groups == 5
    for switch, table in gr.to_group.items():
        own = gr.group_of[switch]
        assert set(table) == set(range(5)) - {own}
        for grp, hops in table.items():
            # a full dragonfly: at most one local hop then the global link
            assert gr.hops_to_group[switch][grp] in (1, 2)
            assert all(gr.entries[switch][grp] <= {s for s in gr.group_of
                                                   if gr.group_of[s] == grp} for _ in hops)
    with pytest.raises(ParameterError, match="dragonfly"):
        group_routes(build_topo("leafspine,2,2,2"), compute_routes(build_topo("leafspine,2,2,2")))


def _every_path(mode, topo, routes, gr, src, dst, strict):
    """Every path a frame may take (each decision, each member), as (node, tag) lists;
    fails on a loop or a dead end. A loop: a (node, tag) state twice, with ``strict`` a
    node twice (ugal's second decision may send a frame back through its source
    switch, and a detour around a down link may pass a node again, with another tag)."""
    done, stack = [], [[(src, TAG_UNDECIDED)]]
    while stack:
        path = stack.pop()
        node, tag = path[-1]
        if node == dst:
            done.append(path)
            continue
        if node == src:
            succ = [(hop, TAG_UNDECIDED) for hop in routes.next_hops[src][dst]]
        else:
            succ = [(hop, after)
                    for after in outcomes(mode, gr, node, src, dst, tag, len(path) == 2)
                    for hop in next_hops(gr, routes, node, dst, after)]
        assert succ, f"dead end at {node} ({src}->{dst}, tag {tag})"
        for hop, after in succ:
            seen = [n for n, _ in path] if strict else path
            assert (hop if strict else (hop, after)) not in seen, f"loop at {hop}: {path}"
            stack.append([*path, (hop, after)])
    return done


@pytest.mark.parametrize("spec,down", [
    ("dragonfly,p=1,a=2,h=1", ()),
    ("dragonfly,p=1,a=2,h=2", ()),
    ("dragonfly,p=1,a=3,h=2,g=4", ()),             # two global links per pair of groups
    ("dragonfly,p=1,a=2,h=2", (("g0r0", "g1r1"),)),  # a global link down
    ("dragonfly,p=1,a=3,h=1", (("g0r0", "g0r1"),)),  # a local link down
])
@pytest.mark.parametrize("mode", ["valiant", "ugal"])
def test_every_decision_delivers_without_loops(spec, down, mode):
    topo = build_topo(spec)
    down_links = frozenset(frozenset(link) for link in down)
    for link in down_links:
        assert set(link) in [set(e) for e in topo.links()]
    routes = compute_routes(topo, down_links)
    gr = group_routes(topo, routes, down_links)
    hosts = topo.host_nodes()
    through = 0
    for src in hosts:
        for dst in hosts:
            if src == dst:
                continue
            paths = _every_path(mode, topo, routes, gr, src, dst, strict=not down and mode == "valiant")
            pair_through = 0
            for path in paths:
                tags = [t for _, t in path[2:]]
                # the tag only moves forward: undecided, at most one group, minimal
                assert len({t for t in tags if t not in (TAG_UNDECIDED, TAG_MINIMAL)}) <= 1
                order = [0 if t == TAG_UNDECIDED else 2 if t == TAG_MINIMAL else 1 for t in tags]
                assert order == sorted(order)
                groups = [gr.group_of[n] for n, _ in path[1:-1]]
                visited = [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g]
                assert len(visited) <= 3 + 2 * len(down)
                assert len(visited) == len(set(visited)) or down
                pair_through += len(visited) == 3
            if not down and gr.group_of[src] != gr.group_of[dst]:
                # every other group is an intermediate one some path takes
                assert pair_through >= gr.groups - 2
            through += pair_through
    assert through > 0


def test_valiant_split_goes_through_every_other_group_evenly():
    topo = build_topo("dragonfly,p=1,a=2,h=2")
    routes = compute_routes(topo)
    gr = group_routes(topo, routes)
    src, dst = adversarial_pairs(topo)[0]
    split = path_split(topo, routes, gr, src, dst, "valiant")
    assert sum(split.values()) == pytest.approx(1.0)
    via = Counter()
    for path, w in split.items():
        groups = {gr.group_of[n] for n in path[1:-1]} - {gr.group_of[src], gr.group_of[dst]}
        (g,) = groups
        via[g] += w
    assert via == pytest.approx(dict.fromkeys(set(range(5)) - {0, 1}, 1 / 3))
    assert tag_of(0) == 1


@pytest.mark.parametrize("spec,per_host_gbps", [
    # one 800G global link per pair of groups; a*p hosts of 400G per group.
    # minimal: a*p hosts share the link to the next group: 800 / (a*p).
    # valiant: 2 global hops per flow over the g-2 other links: (g-2)*800/2/(a*p), or the
    #   local links (p=2,a=2,h=1: the intermediate group's local hop carries 2 flows' worth).
    # ugal: the direct link plus valiant on the others: (800 + (g-2)*800/2) / (a*p), NIC-capped.
    ("dragonfly,p=2,a=2,h=1", (200, 100, 300)),
    ("dragonfly,p=1,a=4,h=1", (200, 300, 400)),
    ("dragonfly,p=1,a=3,h=1", (800 / 3, 800 / 3, 400)),
])
def test_adversarial_bounds_match_the_hand_computation(spec, per_host_gbps):
    topo = build_topo(spec)
    got = [f(topo).slowest_flow_bps / GBPS for f in (minimal_bound, valiant_bound, ugal_bound)]
    assert got == pytest.approx(per_host_gbps, rel=1e-3)
    assert minimal_bound(topo).bottleneck == "global"
    hosts = len(topo.host_nodes())
    assert ugal_bound(topo).aggregate_bps == pytest.approx(hosts * per_host_gbps[2] * GBPS, rel=1e-3)


def test_bounds_of_intra_group_flows_are_minimal():
    topo = build_topo("dragonfly,p=2,a=2,h=1")
    pairs = [("h1", "h3"), ("h3", "h1")]  # same group, different routers
    assert valiant_bound(topo, pairs).slowest_flow_bps == minimal_bound(topo, pairs).slowest_flow_bps
    assert valiant_bound(topo, pairs).bottleneck is None  # 400G NICs, 800G local link
    with pytest.raises(ParameterError):
        minimal_bound(topo, [])

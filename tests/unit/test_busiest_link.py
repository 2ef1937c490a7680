"""`model.alphabeta.busiest_link_bound`: the one-step workloads' fast lower bound, and
the routing model's switch to it for all-to-alls too large for the fluid model."""

from __future__ import annotations

import pytest

from core.messages import Message, Workload
from experiments import routing_model
from model.alphabeta import (
    busiest_link_bound,
    one_step,
    path_latency_s,
    predict_workload,
    predict_workload_hashed,
    roce_wire_factor,
)
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic import collectives

FATTREE4 = "fattree,4,fabric_rate=400G,core_rate=400G"
MIB = 1 << 20


def _fabric(spec: str):
    topo = build_topo(spec)
    hosts = sorted(topo.host_nodes(), key=lambda h: int(h[1:]))
    return topo_graph(topo), compute_routes(topo), hosts


def test_an_incast_is_exactly_its_receivers_link():
    graph, routes, hosts = _fabric("leafspine,2,1,2")
    sink = hosts[0]
    msgs = [Message(i, src, sink, MIB) for i, src in enumerate(hosts[1:])]
    w = Workload("incast", msgs, hosts, MIB)
    bound = busiest_link_bound(w, graph, routes.paths, overhead_s=1e-6)
    # Every byte enters the sink through its one link; the closest sender is the
    # shortest path latency.
    rate_bps = graph.edges[sink, next(iter(graph[sink]))]["rate_bps"]
    wire_s = 8.0 * roce_wire_factor() * MIB * len(msgs) / rate_bps
    latency_s = min(path_latency_s(graph, routes.paths(m.src, sink)[0]) for m in msgs)
    assert bound.completion_s == pytest.approx(1e-6 + wire_s + latency_s, rel=1e-9)
    fluid = predict_workload(w, graph, routes.paths, overhead_s=1e-6)
    assert bound.completion_s <= fluid.completion_s * (1 + 1e-12)


def test_the_bound_is_below_the_fluid_model_on_every_all_to_all_draw():
    graph, routes, hosts = _fabric(FATTREE4)
    w = collectives.build("alltoall", hosts, 4 * MIB, seed=1)
    kw = {"nic_rate_bps": 400e9, "collective": "alltoall"}
    fluid = predict_workload_hashed(w, graph, routes.paths, samples=8, seed=3, **kw)
    bound = predict_workload_hashed(w, graph, routes.paths, samples=8, seed=3,
                                    price=busiest_link_bound, **kw)
    for f, b in zip(fluid, bound, strict=True):
        assert b.link_bits == f.link_bits
        assert b.completion_s <= f.completion_s
        assert b.busbw_bps >= f.busbw_bps
        # Not a vacuous bound: within 5 % here (the note's 3.4-4.7 %).
        assert b.completion_s > 0.95 * f.completion_s


def test_a_workload_that_waits_has_no_busiest_link_bound():
    graph, routes, hosts = _fabric(FATTREE4)
    ring = collectives.build("allreduce-ring", hosts, 4 * MIB)
    assert not one_step(ring)
    with pytest.raises(ValueError, match="one-step"):
        busiest_link_bound(ring, graph, routes.paths)


def test_the_routing_model_prices_large_one_step_workloads_by_their_busiest_link(monkeypatch):
    graph, routes, hosts = _fabric(FATTREE4)
    a2a = collectives.build("alltoall", hosts, 4 * MIB, seed=1)
    fluid = routing_model.expect(a2a, graph, routes, 400e9, samples=4, seed=1)
    monkeypatch.setattr(routing_model, "FLUID_MAX_MESSAGES", len(a2a.messages) - 1)
    fast = routing_model.expect(a2a, graph, routes, 400e9, samples=4, seed=1)
    assert fluid.ecmp_claim is routing_model.ECMP_EXPECTED
    assert fast.ecmp_claim is routing_model.ECMP_BUSIEST
    assert all(b < f for b, f in zip(fast.ecmp_s, fluid.ecmp_s, strict=True))
    assert fast.ecmp_load == fluid.ecmp_load
    # A ring waits from step to step: never priced by its busiest link.
    ring = collectives.build("allreduce-ring", hosts, 4 * MIB)
    monkeypatch.setattr(routing_model, "FLUID_MAX_MESSAGES", 1)
    assert routing_model.expect(ring, graph, routes, 400e9, samples=2,
                                seed=1).ecmp_claim is routing_model.ECMP_EXPECTED

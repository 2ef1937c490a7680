"""model.failurecost: capacity left, detection and go-back-N recovery, the slowest link;
and the failure experiment's options, refused before any fabric is built."""

from __future__ import annotations

import pytest

from core.errors import ParameterError
from model.failurecost import (
    LinkDownModel,
    degraded_graph,
    failed_fabric,
    recovery_timeouts,
    ring_slowest_link_s,
)
from topologies.fattree import FatTree
from topologies.routing import topo_graph


def test_recovery_waits_whole_timeouts_until_one_falls_after_the_reroute():
    assert recovery_timeouts(0.0, 500e-6) == 0        # rerouted at once: a NAK, no timeout
    assert recovery_timeouts(50e-6, 500e-6) == 1
    assert recovery_timeouts(1e-3, 500e-6) == 2
    assert recovery_timeouts(3e-3, 500e-6) == 6
    assert recovery_timeouts(3.1e-3, 500e-6) == 7


def test_a_ring_waits_whole_for_the_lost_message_an_all_to_all_does_not():
    ring = LinkDownModel(100e-6, 120e-6, 50e-6, 1e-3, 500e-6, lost=True, chained=True)
    assert ring.capacity_s == pytest.approx(50e-6 + 0.5 * 120e-6)
    assert ring.completion_s == pytest.approx(ring.capacity_s + 1e-3)
    a2a = LinkDownModel(100e-6, 120e-6, 50e-6, 1e-3, 500e-6, lost=True, chained=False)
    assert a2a.completion_s == pytest.approx(50e-6 + 1e-3)
    missed = LinkDownModel(100e-6, 120e-6, 50e-6, 1e-3, 500e-6, lost=False, chained=True)
    assert missed.completion_s == pytest.approx(missed.capacity_s)
    late = LinkDownModel(100e-6, 120e-6, 150e-6, 1e-3, 500e-6, lost=False, chained=True)
    assert late.completion_s == 100e-6


def test_rerouted_at_once_a_lost_queue_costs_a_round_trip_and_its_resending():
    from model.failurecost import nak_recovery_s

    # 64 KiB lost at an 800 Gb/s port, 4 us round trip: 4 us + 0.66 us.
    assert nak_recovery_s(4e-6, 65536, 800e9) == pytest.approx(4e-6 + 65536 * 8 / 800e9)
    ring = LinkDownModel(100e-6, 100e-6, 50e-6, 0.0, 500e-6, lost=True, chained=True,
                         nak_s=5e-6)
    assert ring.recovery_s == 5e-6 and ring.completion_s == pytest.approx(105e-6)
    tail = LinkDownModel(100e-6, 100e-6, 50e-6, 0.0, 500e-6, lost=True, chained=True,
                         nak_s=5e-6, timed_out=True)  # no frame after the lost ones
    assert tail.completion_s == pytest.approx(600e-6)
    assert LinkDownModel(100e-6, 100e-6, 50e-6, 0.0, 500e-6, lost=False, chained=True,
                         nak_s=5e-6).completion_s == pytest.approx(100e-6)


def test_degraded_and_failed_graphs():
    topo = FatTree(4)
    graph = topo_graph(topo)
    slow = degraded_graph(graph, ("h1", "e1"), 0.25)
    assert slow.edges["h1", "e1"]["rate_bps"] == graph.edges["h1", "e1"]["rate_bps"] / 4
    assert graph.edges["h1", "e1"]["rate_bps"] == 400e9  # the original is untouched
    after, routes = failed_fabric(topo, frozenset({frozenset(("a1", "c1"))}))
    assert not after.has_edge("a1", "c1")
    assert "c1" not in routes.next_hops["a1"]["h5"]
    # 16 ranks, 4 MiB, a 100 Gb/s hop: 2 * 15/16 * 4 MiB at 100 Gb/s.
    assert ring_slowest_link_s(16, 4 << 20, 100e9, 1.0) == pytest.approx(
        2 * 15 / 16 * 8 * (4 << 20) / 100e9)


def resolve(**sets):
    from experiments import failure
    from experiments.options import resolve_typed

    return resolve_typed(failure.Options, failure.OPTIONS, True, sets, failure.check)[1]


def test_the_experiment_refuses_bad_faults_before_building_anything():
    opts = resolve()
    names = [c.name for c in __import__("experiments.failure", fromlist=["cases"]).cases(opts)]
    assert len(names) == len(set(names))
    with pytest.raises(ParameterError, match="no link a2-c1"):
        resolve(link="agg2-core1")
    with pytest.raises(ParameterError, match="after"):
        resolve(fail_at="5ms")
    with pytest.raises(ParameterError, match="no node"):
        resolve(faults="x1-c1:down@1us")
    with pytest.raises(ParameterError, match="flap"):
        resolve(flap="20us")



def test_a_fabric_link_is_hashed_onto_and_a_host_link_is_not():
    from types import SimpleNamespace

    from experiments.failure import build_workload, hashed_onto
    from topologies.routing import compute_routes
    from topologies.spec import build_topo

    topo = build_topo("fattree,4")
    fab = SimpleNamespace(routes=compute_routes(topo))
    ring = build_workload(topo, "allreduce-ring", 1 << 20)
    assert hashed_onto(fab, ring, ("a3", "e4"))
    assert not hashed_onto(fab, ring, ("h1", "e1"))

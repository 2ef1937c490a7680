"""model.wan's closed forms, by hand, and beside the fluid DAG model on two DCs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.dcqcn_params import PARAMETER_SETS
from experiments.collective import build_workload
from experiments.wanmodel import closed_form_s, transport_window_bytes
from model.alphabeta import predict_workload
from model.wan import (
    Edge,
    bdp_bytes,
    burst_queue_bytes,
    hierarchical_allreduce_s,
    ring_allreduce_s,
    ring_crossings,
    ring_long_starts_s,
    send_time_s,
    wan_feedback,
    window_rate_bps,
)
from topologies.routing import compute_routes, topo_graph
from topologies.twodc import WanLink, two_dcs

BARE = {"wire_factor": 1.0, "overhead_s": 0.0}


def test_bdp_and_window_rate():
    assert bdp_bytes(400e9, 1e-3) == pytest.approx(50e6)
    assert window_rate_bps(400e9, 4 << 20, 1e-3) == pytest.approx(8 * (4 << 20) / 1e-3)
    assert window_rate_bps(400e9, None, 1e-3) == 400e9


def test_a_window_below_the_bdp_pays_a_round_trip_per_window():
    # 10 MB through 4 MB windows at 400G over 1 ms: two round trips, then the last 2 MB
    assert send_time_s(10e6, 400e9, wire_factor=1.0, window_bytes=4e6, rtt_s=1e-3) == \
        pytest.approx(2e-3 + 8 * 2e6 / 400e9)
    # a window as large as the BDP, or the message, never waits
    assert send_time_s(10e6, 400e9, wire_factor=1.0, window_bytes=50e6, rtt_s=1e-3) == \
        pytest.approx(8 * 10e6 / 400e9)
    assert send_time_s(3e6, 400e9, wire_factor=1.0, window_bytes=4e6, rtt_s=1e-3) == \
        pytest.approx(8 * 3e6 / 400e9)


def test_ring_crossings_of_two_dcs():
    # 4 ranks, long edges 1 -> 2 and 3 -> 0: a chain of 6 edges crosses 3 times
    assert ring_crossings([False, True, False, True]) == 3
    # 8 ranks: 14 edges, 4 crossings
    assert ring_crossings([False] * 3 + [True] + [False] * 3 + [True]) == 4


def test_ring_by_hand():
    short, long = Edge(400e9, 1e-6, 3e-6), Edge(400e9, 500e-6, 1e-3, long=True)
    edges = [short, long, short, long]
    chunk_s = 8 * 1e6 / 400e9
    # 6 edges from rank 1: long, short, long, short, long, short
    want = 6 * chunk_s + 3 * 500e-6 + 3 * 1e-6
    assert ring_allreduce_s(edges, 4e6, **BARE) == pytest.approx(want)


def test_hierarchical_by_hand():
    short, long = Edge(400e9, 1e-6, 3e-6), Edge(400e9, 500e-6, 1e-3, long=True)
    # 2 local ranks: 2 local edges of size/2, then 2 crossings of size/4 sharing by 2
    want = 2 * (1e-6 + 8 * 2e6 / 400e9) + 2 * (500e-6 + 8 * 1e6 / 200e9)
    assert hierarchical_allreduce_s([short, short], long, 4e6, **BARE) == pytest.approx(want)


@pytest.mark.parametrize("name", ["allreduce-ring", "allreduce-hier"])
def test_the_closed_form_agrees_with_the_fluid_dag_model_when_no_window_binds(name):
    topo = two_dcs("leafspine,2,1,2", WanLink(100e3))
    routes = compute_routes(topo)
    fab = SimpleNamespace(topo=topo, routes=routes)
    workload = build_workload(topo, routes, name, 16 << 20)
    fluid_s = predict_workload(workload, topo_graph(topo), routes.paths).completion_s
    assert closed_form_s(fab, name, 16 << 20, "gbn") == pytest.approx(fluid_s, rel=0.01)
    # selective repeat's 4 MiB window binds on 64 MB across 1 ms; go-back-N's never does
    assert closed_form_s(fab, name, 64 << 20, "sr") > 1.2 * closed_form_s(fab, name, 64 << 20,
                                                                            "gbn")
    assert transport_window_bytes("sr") == 4 << 20


def test_a_message_shorter_than_the_loop_arrives_whole_before_feedback():
    prm = PARAMETER_SETS["paper"]
    fb = wan_feedback(1, 400e9, 100e9, 1e-3, 8e6, 100e3, 400e3, 0.2, prm, 2e6)
    assert fb.buffer_needed_bytes == pytest.approx(1.5e6)     # 2 MB x (1 - 100/400)
    assert fb.peak_queue_bytes == pytest.approx(1.5e6, rel=0.02)
    assert fb.dropped_bytes == 0


def test_a_long_flow_needs_the_excess_over_a_round_trip_and_drops_without_it():
    prm = PARAMETER_SETS["paper"]
    need = 100e3 + 300e9 * 1e-3 / 8                               # Kmin + 37.5 MB
    shallow = wan_feedback(1, 400e9, 100e9, 1e-3, 2 << 20, 100e3, 400e3, 0.2, prm, 64e6)
    deep = wan_feedback(1, 400e9, 100e9, 1e-3, 64 << 20, 100e3, 400e3, 0.2, prm, 64e6)
    local = wan_feedback(1, 400e9, 100e9, 10e-6, 2 << 20, 100e3, 400e3, 0.2, prm, 64e6)
    assert shallow.buffer_needed_bytes == pytest.approx(need)
    assert shallow.dropped_bytes > 30e6 and deep.dropped_bytes == 0
    assert deep.peak_queue_bytes > 0.9 * need
    assert local.dropped_bytes == 0 and local.peak_queue_bytes < 2 << 20
    assert shallow.cuts_per_rtt == pytest.approx(1e-3 / prm.cnp_interval_s)


def test_the_burst_a_port_holds_by_hand():
    # four 2 MB messages back to back at 400G into 100G: 8 MB in 160 us, 6 MB left
    assert burst_queue_bytes([0.0, 40e-6, 80e-6, 120e-6], 2e6, 400e9, 100e9) == \
        pytest.approx(6e6)
    # a second burst after the first drained adds nothing
    assert burst_queue_bytes([0.0, 1e-3], 2e6, 400e9, 100e9) == pytest.approx(1.5e6)
    # a window caps what each message puts in; a port as fast as the sender holds none
    assert burst_queue_bytes([0.0], 8e6, 400e9, 100e9, window_bytes=4e6) == pytest.approx(3e6)
    assert burst_queue_bytes([0.0, 0.0], 2e6, 400e9, 400e9) == 0.0


def test_a_slow_long_link_sees_the_next_steps_before_the_first_is_through():
    short, long = Edge(400e9, 1e-6, 3e-6), Edge(100e9, 500e-6, 1e-3, long=True)
    starts = ring_long_starts_s([short, long, short, long], 4e6, **BARE)
    local_s = 1e-6 + 8 * 1e6 / 400e9
    long_s = 500e-6 + 8 * 1e6 / 100e9
    assert starts[:3] == pytest.approx([0.0, local_s, local_s + long_s])

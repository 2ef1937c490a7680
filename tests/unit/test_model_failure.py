"""model.failurecost: capacity left, detection and go-back-N recovery, the slowest link;
and the failure experiment's options, refused before any fabric is built."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import networkx as nx
import pandas as pd
import pytest

from core.errors import ParameterError
from model.alphabeta import Late, predict_workload, roce_wire_factor
from model.failurecost import (
    LinkDownModel,
    degraded_graph,
    failed_fabric,
    late_of,
    nak_resent_bits,
    recovery_timeouts,
    ring_slowest_link_s,
    sent_by,
)
from topologies.fattree import FatTree
from topologies.routing import topo_graph


def test_recovery_waits_whole_timeouts_until_one_falls_after_the_reroute():
    assert recovery_timeouts(0.0, 500e-6) == 0        # rerouted at once: a NAK, no timeout
    assert recovery_timeouts(50e-6, 500e-6) == 1
    assert recovery_timeouts(1e-3, 500e-6) == 2
    assert recovery_timeouts(3e-3, 500e-6) == 6
    assert recovery_timeouts(3.1e-3, 500e-6) == 7


def test_the_capacity_left_plus_the_late_messages_delay():
    model = LinkDownModel(100e-6, 120e-6, 50e-6, 1e-3, late_s=30e-6)
    assert model.capacity_s == pytest.approx(50e-6 + 0.5 * 120e-6)
    assert model.completion_s == pytest.approx(model.capacity_s + 30e-6)
    assert LinkDownModel(100e-6, 120e-6, 150e-6, 1e-3).completion_s == 100e-6  # after the end


def test_a_timed_out_message_restarts_after_its_timeouts_a_naked_one_sends_more():
    timed = late_of(True, 50e-6, 1e-3, 500e-6, nak_bits=1e6, acked_bits=2e5, sent_s=40e-6)
    assert timed == Late(not_before_s=50e-6, wait_s=2 * 500e-6, acked_bits=2e5)
    # Sent 550 us after the failure: its first retry already falls after the reroute.
    assert late_of(True, 50e-6, 1e-3, 500e-6, 1e6, 0.0, sent_s=600e-6).wait_s == 500e-6
    # Without detection delay, the frames lost were the message's last: one timeout.
    assert late_of(True, 50e-6, 0.0, 500e-6, 1e6, 0.0, 60e-6).wait_s == 500e-6
    assert late_of(False, 50e-6, 0.0, 500e-6, 1e6, 0.0, 60e-6) == Late(extra_bits=1e6)
    # 4 us round trip at 100 Gb/s, one 4178-byte frame lost.
    assert nak_resent_bits(4e-6, 4178, 100e9) == pytest.approx(4e5 + 8 * 4178)
    # Sending on into the black hole for 50 us before the reroute: all of it resent.
    assert nak_resent_bits(4e-6, 4178, 100e9, blackhole_s=50e-6) == pytest.approx(
        5.4e6 + 8 * 4178)
    assert sent_by(10e-6, 20e-6, 15e-6) == pytest.approx(0.5)
    assert sent_by(10e-6, 20e-6, 5e-6) == 0.0 and sent_by(10e-6, 20e-6, 25e-6) == 1.0


def _chain() -> SimpleNamespace:
    """Two hosts' ring-like DAG: a1 then its successor b1 (a1's receiver sends on),
    and a2, posted at 0 on b1's NIC, which b1 shares when it is late."""
    msg = partial(SimpleNamespace, size_bytes=125_000, start_s=0.0, step=0)
    return SimpleNamespace(name="chain", ranks=["x", "y", "z"], size_bytes=250_000, meta={},
                           messages=[msg(msg_id="a1", src="x", dst="y", deps=()),
                                     msg(msg_id="b1", src="y", dst="z", deps=("a1",)),
                                     msg(msg_id="a2", src="y", dst="z", deps=())])


def test_the_dag_carries_a_late_message_on_to_its_successors_and_their_nic():
    graph = nx.Graph()
    for u, v in (("x", "s"), ("s", "y"), ("y", "t"), ("t", "z")):
        graph.add_edge(u, v, rate_bps=1e9, delay_s=0.0)
    paths = {("x", "y"): [["x", "s", "y"]], ("y", "z"): [["y", "t", "z"]]}
    kw = {"overhead_s": 0.0, "wire_factor": 1.0, "packet_bytes": 1.0}
    on_time = predict_workload(_chain(), graph, paths, **kw)
    # 1 ms a message alone; a2 and b1 one after the other on y's NIC.
    assert on_time.finish_s["a1"] == pytest.approx(1e-3, rel=1e-3)
    assert on_time.completion_s == pytest.approx(2e-3, rel=1e-3)
    late = predict_workload(_chain(), graph, paths, late={"a1": Late(wait_s=0.5e-3)}, **kw)
    assert late.finish_s["b1"] == pytest.approx(2.5e-3, rel=1e-3)
    resent = predict_workload(_chain(), graph, paths, late={"a1": Late(extra_bits=5e5)}, **kw)
    assert resent.finish_s["a1"] == pytest.approx(1.5e-3, rel=1e-3)
    held = predict_workload(_chain(), graph, paths,
                            late={"a2": Late(not_before_s=0.9e-3, acked_bits=5e5)}, **kw)
    # a2 resends half from 0.9 ms; b1 from 1 ms shares y's NIC with it until a2 ends.
    assert held.finish_s["a2"] == pytest.approx(0.9e-3 + 0.1e-3 + 2 * 0.4e-3, rel=1e-3)


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


def test_a_timeout_after_the_delivery_holds_nothing_back():
    from experiments.failure import late_messages

    wl = _chain()
    base = [SimpleNamespace(ready_s={"a1": 0.0, "b1": 1e-3, "a2": 0.0},
                            finish_s={"a1": 1e-3, "b1": 2e-3, "a2": 2e-3})]
    msgs = pd.DataFrame({"msg_id": ["a1", "a2"], "retransmitted": [64, 64],
                         "timeouts": [1, 1], "start_s": [0.0, 0.0],
                         "end_s": [1.1e-3, 60e-6]})
    m = SimpleNamespace(messages=msgs, stats=SimpleNamespace(rto_s=500e-6))
    late = late_messages(m, base, wl, 50e-6, 0.0, rtt_s=4e-6)
    # a1 was delivered 1 ms after the failure: its timeout held it back, the 5 % it had
    # sent by the failure not sent again. a2 was delivered 10 us after the failure: its
    # timeout fired later (lost ACKs), its resent frames are priced as a NAK's.
    assert late["a1"].wait_s == 500e-6 and late["a1"].acked_bits == pytest.approx(
        0.05 * 8 * 125_000 * roce_wire_factor())
    assert late["a2"].wait_s == 0.0 and late["a2"].extra_bits > 0

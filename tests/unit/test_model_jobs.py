"""model.jobs: the fluid jobs of a message DAG, laid out once and reused per draw.

By hand on two leaves and two spines; against a plain loop (every link's bits
added message after message, the jobs built one by one) on fattree,4's
collectives under several seeds; and reuse across draws gives what a fresh
layout gives. test_model_identical.py pins the predictions themselves to those
of the code before.
"""

from __future__ import annotations

import math
import random

import networkx as nx
import pytest

from core.messages import Message, Workload
from model.alphabeta import (
    Late,
    hash_draws,
    hashed_pricer,
    memo_paths,
    path_latency_s,
    per_hop_hash_choice,
    predict_workload,
    roce_wire_factor,
)
from model.fluid import FluidJob
from model.jobs import WorkloadJobs
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic import collectives

G = 1e9
OPTIONS = dict(overhead_s=1e-6, packet_bytes=4178.0, forwarding="store-and-forward",
               wire_factor=roce_wire_factor(), nic_rate_bps=None)


def two_spines() -> tuple[nx.Graph, object]:
    g = nx.Graph()
    for leaf, host in (("l0", "a"), ("l1", "b")):
        g.add_edge(host, leaf, rate_bps=400 * G, delay_s=1e-6)
        for s in ("s0", "s1"):
            g.add_edge(leaf, s, rate_bps=200 * G, delay_s=2e-6)

    def paths(src: str, dst: str) -> list[tuple[str, ...]]:
        ls, ld = ("l0", "l1") if src == "a" else ("l1", "l0")
        return [(src, ls, s, ld, dst) for s in ("s0", "s1")]
    return g, paths


def test_hashed_jobs_by_hand():
    g, paths = two_spines()
    msgs = [Message(0, "a", "b", 1000), Message(1, "b", "a", 2000, deps=(0,), gap_s=3e-6),
            Message(2, "a", "b", 1000, start_s=5e-6), Message(3, "a", "a", 10)]
    work = Workload("dag", msgs, ["a", "b"], 1000)
    late = {2: Late(not_before_s=7e-6, wait_s=1e-6, extra_bits=80.0, acked_bits=16.0)}
    jobs, bits = WorkloadJobs(work, g, paths, late=late, **{**OPTIONS, "wire_factor": 1.0}
                              ).jobs("hashed", {0: 0, 1: ("b", "l1", "s1", "l0", "a"), 2: 1})
    over_s0 = {("a", "l0"): 1.0, ("l0", "s0"): 1.0, ("s0", "l1"): 1.0, ("l1", "b"): 1.0}
    over_s1 = {("a", "l0"): 1.0, ("l0", "s1"): 1.0, ("s1", "l1"): 1.0, ("l1", "b"): 1.0}
    back_s1 = {("b", "l1"): 1.0, ("l1", "s1"): 1.0, ("s1", "l0"): 1.0, ("l0", "a"): 1.0}
    # The last packet's serialization at every hop but the slowest (200G): two 400G hops
    # of 1000 bytes and one 200G hop; propagation 2 x 1 + 2 x 2 us.
    lat_1000 = 6e-6 + 2 * 8 * 1000 / 400e9 + 8 * 1000 / 200e9
    assert [j.fractions for j in jobs] == [over_s0, back_s1, over_s1, {}]
    assert [j.size_bits for j in jobs] == [8000.0, 16000.0, 8000.0 + 80.0 - 16.0, 80.0]
    assert [j.release_s for j in jobs] == [0.0, 0.0, 7e-6, 0.0]
    assert [j.pre_s for j in jobs] == [1e-6, 1e-6, 2e-6, 1e-6]
    assert [j.deps for j in jobs] == [(), (0,), (), ()]
    assert [j.gap_s for j in jobs] == [0.0, 3e-6, 0.0, 0.0]
    assert jobs[0].post_s == pytest.approx(lat_1000, rel=1e-12)
    assert jobs[3].post_s == 0.0 and jobs[0].cap_bps == math.inf
    assert bits == {("a", "l0"): 16064.0, ("l0", "s0"): 8000.0, ("s0", "l1"): 8000.0,
                    ("l1", "b"): 16064.0, ("b", "l1"): 16000.0, ("l1", "s1"): 16000.0,
                    ("s1", "l0"): 16000.0, ("l0", "a"): 16000.0, ("l0", "s1"): 8064.0,
                    ("s1", "l1"): 8064.0}
    assert list(bits)[:5] == [("a", "l0"), ("l0", "s0"), ("s0", "l1"), ("l1", "b"), ("b", "l1")]


def test_a_choice_off_the_routes_is_refused_once_cached_for_another_pair():
    g, paths = two_spines()
    work = Workload("two", [Message(0, "a", "b", 1000), Message(1, "b", "a", 1000)],
                    ["a", "b"], 1000)
    path = ("a", "l0", "s0", "l1", "b")
    with pytest.raises(ValueError, match="not a routed path"):
        WorkloadJobs(work, g, paths, **OPTIONS).jobs("hashed", {0: path, 1: path})
    with pytest.raises(ValueError, match="ECMP mode"):
        WorkloadJobs(work, g, paths, **OPTIONS).jobs("sprayed")


def loop_jobs(work: Workload, graph: nx.Graph, paths, choice) -> tuple[list, dict]:
    """The jobs and links' bits of a hashed draw, message by message (the reference)."""
    wire, route = roce_wire_factor(), memo_paths(paths)
    jobs, bits = [], {}
    for m in work.messages:
        size_bits = 8.0 * wire * m.size_bytes
        fractions, latency_s = {}, 0.0
        if m.src != m.dst:
            path = choice[m.msg_id]
            assert path in route(m.src, m.dst)
            fractions = {(u, v): 1.0 for u, v in zip(path[:-1], path[1:], strict=True)}
            latency_s = path_latency_s(graph, path, min(4178.0, size_bits / 8.0))
        for link, frac in fractions.items():
            bits[link] = bits.get(link, 0.0) + frac * size_bits
        jobs.append(FluidJob(m.msg_id, fractions, size_bits, math.inf, m.start_s,
                             tuple(m.deps), 1e-6, latency_s, 0.0))
    return jobs, bits


@pytest.mark.parametrize("collective, size", [("allreduce-ring", 4 << 20),
                                              ("allreduce-hd", 3 << 20), ("alltoall", 1000)])
def test_draws_reuse_the_layout_and_match_a_plain_loop(collective, size):
    topo = build_topo("fattree,4")
    graph, routes = topo_graph(topo), compute_routes(topo)
    work = collectives.build(collective, list(topo.hosts()), size)
    layout = WorkloadJobs(work, graph, routes.paths, **OPTIONS)
    for draw in hash_draws(work, routes.paths, samples=3, seed=size):
        jobs, bits = layout.jobs("hashed", draw)
        want_jobs, want_bits = loop_jobs(work, graph, routes.paths, draw)
        assert jobs == want_jobs
        assert list(bits.items()) == list(want_bits.items())   # float for float, in order
        assert WorkloadJobs(work, graph, routes.paths, **OPTIONS).jobs("hashed", draw) \
            == (jobs, bits)


def test_a_pricer_predicts_what_predict_workload_does_with_any_choice():
    topo = build_topo("fattree,4")
    graph, routes = topo_graph(topo), compute_routes(topo)
    work = collectives.build("allreduce-ring", list(topo.hosts()), 1 << 20)
    late = {5: Late(not_before_s=2e-6, extra_bits=4000.0)}
    price = hashed_pricer(work, graph, routes.paths, late=late, nic_rate_bps=300e9)
    for seed in (1, 2):
        # A callable choice is asked message after message, in order: the same draws.
        for choice in (per_hop_hash_choice(random.Random(seed)),
                       hash_draws(work, routes.paths, samples=1, seed=seed)[0]):
            want = predict_workload(work, graph, routes.paths, mode="hashed", late=late,
                                    nic_rate_bps=300e9,
                                    choice=hash_draws(work, routes.paths, samples=1,
                                                      seed=seed)[0])
            got = price(choice)
            assert (got.completion_s, got.finish_s, got.ready_s, got.link_bits,
                    got.recomputations) == (want.completion_s, want.finish_s, want.ready_s,
                                            want.link_bits, want.recomputations)

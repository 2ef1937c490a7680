"""bench.ns3ring: the ring's plan, the fabric as ns-3 builds it, and (where ns-3's
wheel is installed) a ring run in ns-3 against what its own links allow."""

import importlib.util
import itertools
import sys

import pytest

from bench.ns3ring import (
    ROCE_WIRE_EXTRA_BYTES,
    RingPlan,
    load_ns3,
    ns3_links,
    run_in_own_process,
)
from core.errors import CapabilityError, ParameterError
from topologies.spec import build_topo


def test_a_ring_plan_is_two_n_minus_one_steps_of_a_rank_share():
    plan = RingPlan.of(16, 4 << 20)
    assert (plan.steps, plan.chunk_bytes) == (30, 262144)
    assert plan.rank_bytes == 30 * 262144
    assert RingPlan.of(3, 10).chunk_bytes == 4  # rounded up: every byte is sent


@pytest.mark.parametrize("ranks,size", [(1, 1 << 20), (8, 7)])
def test_a_ring_too_small_is_refused(ranks, size):
    with pytest.raises(ParameterError):
        RingPlan.of(ranks, size)


def test_ns3_links_are_the_topologys_with_switch_latency_on_their_delays():
    topo = build_topo("fattree,4")
    links = ns3_links(topo)
    assert len(links) == len(topo.fabric_links())
    latency = {n: topo.nodeInfo(n).get("switch_latency_s", 0.0) for n in topo.nodes()}
    for link, (a, b, info) in zip(links, topo.fabric_links(), strict=True):
        assert (link.a, link.b, link.rate_bps, link.buffer_bytes) == (
            a, b, info["rate_bps"], info["buffer_bytes"])
        assert link.delay_s == pytest.approx(info["delay_s"] + (latency[a] + latency[b]) / 2)
    # Over a path, the halves add up to the whole latency of every switch on it.
    path = ["h1", "e1", "a1", "e2", "h3"]
    by_pair = {frozenset((x.a, x.b)): x for x in links}
    hops = list(itertools.pairwise(path))
    assert sum(by_pair[frozenset(p)].delay_s for p in hops) == pytest.approx(
        sum(topo.linkInfo(*p)["delay_s"] for p in hops) + sum(latency[n] for n in path[1:-1]))
    assert all(latency[n] > 0 for n in path[1:-1])


def test_without_the_ns3_wheel_the_benchmark_says_so_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ns", None)  # import ns raises ImportError
    with pytest.raises(CapabilityError, match="pip install ns3"):
        load_ns3()


@pytest.mark.skipif(importlib.util.find_spec("ns") is None,
                    reason="ns-3's wheel is not installed (.venv/bin/pip install ns3)")
def test_ns3_runs_the_ring_at_its_links_pace():
    """leafspine,2,2,2: 4 ranks, 6 steps each to the next rank. Over UDP every rank
    paces at its NIC's rate, so the ring takes at least a rank's bytes on the wire
    at that rate, plus a step's fixed delays per step; and every byte arrives."""
    spec, size = "leafspine,2,2,2", 1 << 20
    r = run_in_own_process(spec, size, "udp")
    plan = RingPlan.of(4, size)
    assert r.complete and r.delivered_bytes == r.expected_bytes == 4 * plan.rank_bytes
    topo = build_topo(spec)
    nic_bps = next(x.rate_bps for x in ns3_links(topo) if "h1" in (x.a, x.b))
    frames = plan.steps * -(-plan.chunk_bytes // 4096)
    wire_s = (plan.rank_bytes + frames * ROCE_WIRE_EXTRA_BYTES) * 8 / nic_bps
    assert wire_s < r.sim_s < 2 * wire_s
    assert r.run_wall_s > 0 and r.slowdown > 1

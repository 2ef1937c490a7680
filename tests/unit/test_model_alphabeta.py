"""Alpha-beta model: DAG fluid simulation and closed forms, on hand-worked examples."""

from __future__ import annotations

import math
import random

import networkx as nx
import pytest

from core.messages import Message, Workload
from model.alphabeta import (
    bottleneck_rate_bps,
    halving_doubling_allreduce_time_s,
    path_latency_s,
    per_hop_hash_choice,
    predict_workload,
    predict_workload_hashed,
    ring_allreduce_time_s,
    roce_wire_factor,
    workload_bottleneck_rate_bps,
)
from model.busbw import algbw_bps, busbw_bps, busbw_factor

G = 1e9
MIB = 1 << 20
#: Payload only and no store-and-forward bubble, as most hand computations below
#: assume; the model's defaults are the real fabric's (test_real_fabric_defaults).
IDEAL = dict(packet_bytes=0.0, wire_factor=1.0)


def star(n_hosts: int, rate_bps: float = 400 * G, delay_s: float = 0.5e-6) -> nx.Graph:
    g = nx.Graph()
    g.add_node("sw", role="leaf")
    for i in range(n_hosts):
        g.add_node(f"h{i}", role="host")
        g.add_edge(f"h{i}", "sw", rate_bps=rate_bps, delay_s=delay_s, tier="host-leaf")
    return g


def star_paths(src: str, dst: str) -> list[tuple[str, ...]]:
    return [(src, "sw", dst)]


def two_leaves(hosts_per_leaf: int, n_spines: int, uplink_bps: float) -> nx.Graph:
    """Leaves l0, l1; hosts a0.. on l0 and b0.. on l1; zero delays."""
    g = nx.Graph()
    for leaf, prefix in (("l0", "a"), ("l1", "b")):
        for i in range(hosts_per_leaf):
            g.add_edge(f"{prefix}{i}", leaf, rate_bps=400 * G, delay_s=0.0, tier="host-leaf")
        for s in range(n_spines):
            g.add_edge(leaf, f"s{s}", rate_bps=uplink_bps, delay_s=0.0, tier="leaf-spine")
    for n in g.nodes:
        g.nodes[n]["role"] = "host" if n[0] in "ab" else "switch"
    return g


def two_leaf_paths(n_spines: int):
    def paths(src: str, dst: str) -> list[tuple[str, ...]]:
        ls, ld = ("l0" if src[0] == "a" else "l1"), ("l0" if dst[0] == "a" else "l1")
        if ls == ld:
            return [(src, ls, dst)]
        return [(src, ls, f"s{s}", ld, dst) for s in range(n_spines)]
    return paths


def ring_allreduce_workload(ranks: list[str], size_bytes: int) -> Workload:
    """2(n-1) ring steps; rank i's step-s send waits for what it received at s-1."""
    n = len(ranks)
    msgs, ids = [], {}
    for s in range(2 * (n - 1)):
        for i in range(n):
            deps = (ids[(s - 1, (i - 1) % n)],) if s else ()
            ids[(s, i)] = len(msgs)
            msgs.append(Message(len(msgs), ranks[i], ranks[(i + 1) % n], size_bytes // n,
                                deps=deps, step=s))
    return Workload("allreduce", msgs, list(ranks), size_bytes)


# ------------------------------------------------------------------ closed forms

def test_ring_allreduce_on_one_switch_by_hand():
    # 4 hosts, 400G, 0.5 us per link, 1 us overhead. S = 4 MiB -> S/4 = 1 MiB =
    # 8388608 bit -> 20.97152 us at 400G. alpha = 1 + 0.5 + 0.5 = 2 us.
    # T = 2 * 3 * (2 + 20.97152) us = 137.82912 us.
    expected_s = 137.82912e-6
    assert ring_allreduce_time_s(4, 4 * MIB, 400 * G, 2e-6) == pytest.approx(expected_s)
    g, ranks = star(4), [f"h{i}" for i in range(4)]
    # the DAG fluid model of the same ring gives the same time (symmetric steps)
    dag = predict_workload(ring_allreduce_workload(ranks, 4 * MIB), g, star_paths,
                           overhead_s=1e-6, **IDEAL)
    assert dag.completion_s == pytest.approx(expected_s)


def test_ring_allreduce_busbw_equals_link_rate_without_alpha():
    # busbw = 2(n-1)/n * S / (2(n-1) (S/n)/B) = B
    g, ranks = star(4, delay_s=0.0), [f"h{i}" for i in range(4)]
    dag = predict_workload(ring_allreduce_workload(ranks, 64 * MIB), g, star_paths,
                           overhead_s=0.0, **IDEAL)
    assert dag.busbw_bps == pytest.approx(400 * G)
    assert dag.algbw_bps == pytest.approx(400 * G * 4 / 6)


def test_oversubscribed_uplink_moves_the_bottleneck():
    # 2 leaves x 2 hosts, one spine, 400G uplinks (2:1). Ring a0 -> b0 -> a1 -> b1 -> a0:
    # l0->s0 carries a0->b0 and a1->b1, l1->s0 carries b0->a1 and b1->a0: 200G each.
    g, paths = two_leaves(2, 1, 400 * G), two_leaf_paths(1)
    ranks = ["a0", "b0", "a1", "b1"]
    size = 8 * MIB
    expected_s = 2 * 3 * (size / 4 * 8) / (200 * G)
    dag = predict_workload(ring_allreduce_workload(ranks, size), g, paths, overhead_s=0.0, **IDEAL)
    assert dag.completion_s == pytest.approx(expected_s)
    # with ranks ordered leaf by leaf only one flow per uplink: the NIC (400G) binds
    assert bottleneck_rate_bps(g, paths, [("a0", "a1"), ("a1", "b0"), ("b0", "b1"),
                                          ("b1", "a0")]) == pytest.approx(400 * G)
    # the DAG's own steps give the same bottleneck
    assert workload_bottleneck_rate_bps(ring_allreduce_workload(ranks, size), g,
                                        paths) == pytest.approx(200 * G)


def test_workload_bottleneck_of_a_non_power_of_two_dag():
    # 2 leaves x 3 hosts, one 400G uplink. Step 0 (a fold): a2 -> a0 alone, 400G.
    # Step 1: a0 <-> a1, 400G each way. Step 2: a0 -> b0 and a1 -> b1 (two messages,
    # one pair) share the uplink: 200G each.
    g, paths = two_leaves(3, 1, 400 * G), two_leaf_paths(1)
    msgs = [Message(0, "a2", "a0", MIB, step=0), Message(1, "a0", "a1", MIB, step=1),
            Message(2, "a1", "a0", MIB, step=1), Message(3, "a0", "b0", MIB, step=2),
            Message(4, "a1", "b1", MIB, step=2), Message(5, "a1", "b1", MIB, step=2)]
    wl = Workload("x", msgs, ["a0", "a1", "a2", "b0", "b1"], MIB)
    assert workload_bottleneck_rate_bps(wl, g, paths) == pytest.approx(200 * G)
    assert workload_bottleneck_rate_bps(Workload("x", msgs[:3], wl.ranks, MIB), g,
                                        paths) == pytest.approx(400 * G)


def test_ecmp_spread_vs_hashed_collision_in_a_dag():
    # 2 spines, 400G uplinks. a0->b0 and a1->b1 at once, 1 MiB each, no latency.
    g, paths = two_leaves(2, 2, 400 * G), two_leaf_paths(2)
    msgs = [Message(0, "a0", "b0", MIB), Message(1, "a1", "b1", MIB)]
    wl = Workload("permutation", msgs, ["a0", "a1", "b0", "b1"], MIB)
    one_mib_at_400g_s = MIB * 8 / (400 * G)
    spread = predict_workload(wl, g, paths, overhead_s=0.0, **IDEAL)
    assert spread.completion_s == pytest.approx(one_mib_at_400g_s)
    collide = predict_workload(wl, g, paths, mode="hashed", choice={0: 0, 1: 0}, overhead_s=0.0, **IDEAL)
    assert collide.completion_s == pytest.approx(2 * one_mib_at_400g_s)
    apart = predict_workload(wl, g, paths, mode="hashed", choice={0: 0, 1: 1}, overhead_s=0.0, **IDEAL)
    assert apart.completion_s == pytest.approx(one_mib_at_400g_s)
    pairs = [("a0", "b0"), ("a1", "b1")]
    assert bottleneck_rate_bps(g, paths, pairs, mode="hashed",
                               choice=lambda fid, p: 0) == pytest.approx(200 * G)


def test_per_hop_hash_choice_is_uniform_per_switch_not_per_path():
    # At s the flow goes to a or b (1/2 each); only b's branch splits again, so the
    # path via a has probability 1/2, not 1/3. The host sends on its first next hop.
    paths = [("h", "s", "a", "d"), ("h", "s", "b", "c1", "d"), ("h", "s", "b", "c2", "d"),
             ("h", "t", "a", "d")]
    choose = per_hop_hash_choice(random.Random(1))
    picks = [choose(k, paths) for k in range(4000)]
    assert all(p[1] == "s" for p in picks)
    assert sum(p[2] == "a" for p in picks) / 4000 == pytest.approx(0.5, abs=0.03)
    assert sum(p[3] == "c1" for p in picks) / 4000 == pytest.approx(0.25, abs=0.03)


def test_hashed_draws_collide_half_the_time():
    # 2 spines, 400G uplinks; a0->b0 and a1->b1, 1 MiB each. Each message picks a spine
    # at l0 (its only choice): same spine w.p. 1/2 -> 2 t, else t: mean 1.5 t.
    g, paths = two_leaves(2, 2, 400 * G), two_leaf_paths(2)
    wl = Workload("permutation", [Message(0, "a0", "b0", MIB), Message(1, "a1", "b1", MIB)],
                  ["a0", "a1", "b0", "b1"], MIB)
    t_s = MIB * 8 / (400 * G)
    draws = predict_workload_hashed(wl, g, paths, samples=400, seed=3, overhead_s=0.0, **IDEAL)
    times = [d.completion_s / t_s for d in draws]
    assert set(round(x, 9) for x in times) == {1.0, 2.0}
    assert sum(times) / len(times) == pytest.approx(1.5, abs=0.08)
    # bits per link: the message's wire bits on each hop of its one path
    for d in draws:
        assert sum(bits for (u, v), bits in d.link_bits.items() if u == "l0") == \
            pytest.approx(2 * MIB * 8)
    # spread: half a message on each spine uplink, never a collision
    spread = predict_workload(wl, g, paths, overhead_s=0.0, **IDEAL)
    assert spread.link_bits[("l0", "s0")] == pytest.approx(MIB * 8)
    assert spread.completion_s == pytest.approx(t_s)
    # one path only: one prediction, no draws
    star_wl = Workload("sendrecv", [Message(0, "h0", "h1", MIB)], ["h0", "h1"], MIB)
    assert len(predict_workload_hashed(star_wl, star(2), star_paths, samples=9, **IDEAL)) == 1


def test_dag_dependencies_and_release_time():
    # m0: h0->h1 1 MiB; m1 waits for m0; m2 released at 100 us. Delay 0.5 us per link,
    # overhead 1 us: alpha = 2 us; beta = 20.97152 us.
    g = star(3)
    beta_s, alpha_s = 20.97152e-6, 2e-6
    msgs = [Message(0, "h0", "h1", MIB), Message(1, "h1", "h2", MIB, deps=(0,)),
            Message(2, "h2", "h0", MIB, start_s=100e-6)]
    pred = predict_workload(Workload("chain", msgs, ["h0", "h1", "h2"], MIB), g, star_paths,
                            overhead_s=1e-6, **IDEAL)
    assert pred.finish_s[0] == pytest.approx(alpha_s + beta_s)
    assert pred.finish_s[1] == pytest.approx(2 * (alpha_s + beta_s))
    assert pred.ready_s[2] == pytest.approx(100e-6)
    assert pred.finish_s[2] == pytest.approx(100e-6 + alpha_s + beta_s)
    assert pred.busbw_bps is None        # 'chain' is not a collective


def test_dag_cycle_is_rejected():
    msgs = [Message(0, "h0", "h1", 10, deps=(1,)), Message(1, "h1", "h0", 10, deps=(0,))]
    with pytest.raises(ValueError):
        predict_workload(Workload("x", msgs, ["h0", "h1"], 10), star(2), star_paths, **IDEAL)


def test_direct_alltoall_shares_each_nic_three_ways():
    # n = 4 behind one switch: every NIC carries 3 flows each way -> 400/3 G per flow.
    # T = S/4 / (400G/3) with zero alpha. S = 3 MiB -> 768 KiB per flow.
    g, ranks = star(4, delay_s=0.0), [f"h{i}" for i in range(4)]
    size = 3 * MIB
    expected_s = (size / 4 * 8) / (400 * G / 3)
    msgs = [Message(k, a, b, size // 4) for k, (a, b) in
            enumerate((a, b) for a in ranks for b in ranks if a != b)]
    dag = predict_workload(Workload("alltoall", msgs, ranks, size), g, star_paths,
                           overhead_s=0.0, **IDEAL)
    assert dag.completion_s == pytest.approx(expected_s)


def test_closed_forms_by_hand():
    # n = 8, S = 8e6 B, B = 100 Gb/s -> S/n = 1e6 B = 80 us; alpha = 5 us.
    assert ring_allreduce_time_s(8, 8e6, 100 * G, 5e-6) == pytest.approx(14 * 85e-6)
    # halving-doubling: 2*3 alpha + 2*(7/8)*640 us = 30 + 1120 us
    assert halving_doubling_allreduce_time_s(8, 8e6, 100 * G, 5e-6) == pytest.approx(1150e-6)
    with pytest.raises(ValueError):
        halving_doubling_allreduce_time_s(6, 8e6, 100 * G)


def test_path_latency_store_and_forward():
    # hops 400G, 800G, 400G; 4000-B packet: 80, 40, 80 ns; the bottleneck hop's 80 ns
    # is in the bandwidth term -> 120 ns extra, plus 0.5 + 1 + 0.5 us propagation.
    g = nx.Graph()
    g.add_edge("h0", "l0", rate_bps=400 * G, delay_s=0.5e-6)
    g.add_edge("l0", "l1", rate_bps=800 * G, delay_s=1e-6)
    g.add_edge("l1", "h1", rate_bps=400 * G, delay_s=0.5e-6)
    assert path_latency_s(g, ("h0", "l0", "l1", "h1"), 4000) == pytest.approx(2.12e-6)
    assert path_latency_s(g, ("h0", "l0", "l1", "h1"), 0) == pytest.approx(2e-6)
    # default: a full 4154-B RoCEv2 frame, 4178 B of wire time (preamble, FCS, gap):
    # 83.56 ns at 400G and 41.78 ns at 800G
    assert path_latency_s(g, ("h0", "l0", "l1", "h1")) == pytest.approx(2e-6 + 125.34e-9)
    # cut-through forwards the head on arrival: propagation only, whatever the packet
    assert path_latency_s(g, ("h0", "l0", "l1", "h1"), 4000,
                          forwarding="cut-through") == pytest.approx(2e-6)
    with pytest.raises(ValueError):
        path_latency_s(g, ("h0", "l0", "l1", "h1"), 4000, forwarding="wormhole")
    # switch pipeline latency: a node attribute of every switch crossed (hosts have none)
    g.nodes["l0"]["switch_latency_s"] = 0.6e-6
    g.nodes["l1"]["switch_latency_s"] = 0.8e-6
    assert path_latency_s(g, ("h0", "l0", "l1", "h1"), 4000) == pytest.approx(3.52e-6)


def test_ring_step_bubble_is_store_and_forward_only():
    # 4 hosts on one 400G switch, zero delay, S = 64 KiB -> 16 KiB = 4 packets of
    # 4096 B per step, 81.92 ns each: beta = 327.68 ns per step, 6 steps.
    # Store-and-forward: a step's message arrives whole one packet (the host->switch
    # hop, the switch->host one being the bottleneck in the bandwidth term) after its
    # sender's NIC finished: 6 * (327.68 + 81.92) = 2457.6 ns. Cut-through: 6 * 327.68
    # = 1966.08 ns, busbw = the link rate.
    g, ranks = star(4, delay_s=0.0), [f"h{i}" for i in range(4)]
    wl = ring_allreduce_workload(ranks, 64 << 10)
    saf = predict_workload(wl, g, star_paths, overhead_s=0.0, packet_bytes=4096, wire_factor=1.0)
    assert saf.completion_s == pytest.approx(2457.6e-9)
    ct = predict_workload(wl, g, star_paths, overhead_s=0.0, packet_bytes=4096,
                          forwarding="cut-through", wire_factor=1.0)
    assert ct.completion_s == pytest.approx(1966.08e-9)
    assert ct.busbw_bps == pytest.approx(400 * G)
    # a 1 us NIC overhead is paid once per step on top: 6 us more
    nic = predict_workload(wl, g, star_paths, overhead_s=1e-6, forwarding="cut-through", **IDEAL)
    assert nic.completion_s == pytest.approx(1966.08e-9 + 6e-6)


def test_wire_factor_and_nic_cap():
    assert roce_wire_factor() == pytest.approx(4178 / 4096)
    g = star(2, delay_s=0.0)
    wl = Workload("sendrecv", [Message(0, "h0", "h1", MIB)], ["h0", "h1"], MIB)
    plain = predict_workload(wl, g, star_paths, overhead_s=0.0, **IDEAL)
    capped = predict_workload(wl, g, star_paths, overhead_s=0.0, nic_rate_bps=100 * G, **IDEAL)
    assert capped.completion_s == pytest.approx(4 * plain.completion_s)
    wired = predict_workload(wl, g, star_paths, overhead_s=0.0, wire_factor=1.5, packet_bytes=0.0)
    assert wired.completion_s == pytest.approx(1.5 * plain.completion_s)
    assert plain.busbw_bps == pytest.approx(400 * G)


def test_busbw_conventions():
    assert busbw_factor("allreduce", 8) == pytest.approx(14 / 8)
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("ReduceScatter", 8) == pytest.approx(7 / 8)
    assert busbw_factor("all-to-all", 8) == pytest.approx(7 / 8)
    assert busbw_factor("broadcast", 8) == 1.0
    assert busbw_factor("incast", 8) == 1.0
    assert busbw_factor("permutation", 8) == 1.0
    assert algbw_bps(1e9, 0.1) == pytest.approx(80 * G)
    assert busbw_bps("allreduce", 4, 1e9, 0.1) == pytest.approx(80 * G * 1.5)
    with pytest.raises(ValueError):
        busbw_factor("gossip", 4)
    assert math.isclose(busbw_factor("allreduce", 1), 0.0)


def test_mapping_paths_accepted():
    g = star(2, delay_s=0.0)
    table = {("h0", "h1"): [("h0", "sw", "h1")], ("h1", "h0"): [("h1", "sw", "h0")]}
    assert bottleneck_rate_bps(g, table, [("h0", "h1"), ("h1", "h0")]) == pytest.approx(400 * G)


def test_64_rank_ring_dag_matches_the_closed_form():
    # 8064 messages; symmetric steps, so the DAG equals 2(n-1)(alpha + (S/n)/B).
    n = 64
    g, ranks = star(n), [f"h{i}" for i in range(n)]
    size = 64 * MIB                      # S/n = 1 MiB -> 20.97152 us at 400G
    dag = predict_workload(ring_allreduce_workload(ranks, size), g, star_paths,
                           overhead_s=1e-6, **IDEAL)
    assert dag.completion_s == pytest.approx(2 * 63 * (2e-6 + 20.97152e-6))
    assert dag.recomputations <= n       # one per ring edge (component), reused every step


def test_real_fabric_defaults():
    # The natural call prices a real RoCEv2 fabric: 1 us NIC overhead per message,
    # store-and-forward of full frames, headers and Ethernet overhead on the wire
    # (4178 B per 4096 B of payload). Ring all-reduce, 4 hosts on one 400G switch,
    # 0.5 us per link and a 0.6 us switch, S = 4 MiB: a step sends 1 MiB of payload
    # = 1 MiB x 4178/4096 on the wire = 21.39136 us; alpha = 1 us + 2 x 0.5 us +
    # 0.6 us + one frame at 400G (83.56 ns) = 2.68356 us.
    g, ranks = star(4), [f"h{i}" for i in range(4)]
    g.nodes["sw"]["switch_latency_s"] = 0.6e-6
    step_s = MIB * 8 * 4178 / 4096 / (400 * G) + 2.68356e-6
    dag = predict_workload(ring_allreduce_workload(ranks, 4 * MIB), g, star_paths)
    assert dag.completion_s == pytest.approx(6 * step_s)
    # a message smaller than a frame is stored and forwarded whole: 8 B -> 8.11 B on
    # the wire, 0.162 ps per hop; the latency regime is the fixed delays
    tiny = predict_workload(Workload("sendrecv", [Message(0, "h0", "h1", 8)], ["h0", "h1"], 8),
                            g, star_paths)
    wire_s = 8 * 8 * 4154 / 4096 / (400 * G)
    assert tiny.completion_s == pytest.approx(1e-6 + 1e-6 + 0.6e-6 + 2 * wire_s)

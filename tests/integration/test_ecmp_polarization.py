"""Hashing alike polarizes a fat-tree, and `emu.ecmp_hashing.ecmp_check` catches it.

With one hash function on every switch (``ecmp_hash='shared'``, all a kernel without
per-netns seeds or per-netns hash fields offers), an aggregation switch hashes a flow
exactly as the edge before it did, so the flows the edge sent it all leave by one core
link. The check must mark that run invalid; the test in test_fabric.py shows that the
per-switch mechanisms spread the same flows."""

from __future__ import annotations

import socket
import time

import pytest

pytestmark = pytest.mark.root
FLOWS = 64
PACKETS_PER_FLOW = 5


def _switch_tx_packets(fab) -> dict[tuple[str, str], int]:
    from emu.shaping import port_qdisc_stats

    return {(p.node, p.peer_node): port_qdisc_stats(fab.ipr(p.node), p.ifindex)["tx_packets"]
            for p in fab.ports() if p.is_switch}


def _send_flows(fab, src: str, dst: str) -> dict[tuple[str, str], float]:
    """FLOWS UDP flows (distinct source ports) src -> dst; flows sent per switch port."""
    from emu.netns import in_netns

    before = _switch_tx_packets(fab)
    with in_netns(fab.netns_path(src)):
        socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(FLOWS)]
    try:
        for i, s in enumerate(socks):
            s.bind((fab.plan.host_ip[src], 20000 + i))
            for _ in range(PACKETS_PER_FLOW):
                s.sendto(b"x" * 64, (fab.plan.host_ip[dst], 4791))
        # Until every packet reached dst's edge downlink (no fixed sleep).
        last = (fab.routes.paths(src, dst)[0][-2], dst)
        deadline = time.monotonic() + 20
        while (_switch_tx_packets(fab)[last] - before[last] < FLOWS * PACKETS_PER_FLOW
               and time.monotonic() < deadline):
            time.sleep(0.05)
    finally:
        for s in socks:
            s.close()
    after = _switch_tx_packets(fab)
    return {port: (after[port] - before[port]) / PACKETS_PER_FLOW for port in after}


def test_shared_hash_polarizes_and_the_check_marks_it():
    from core.scaling import Scale
    from emu.ecmp_hashing import available_mechanisms, ecmp_check
    from emu.fabric import Fabric
    from topologies.spec import build_topo

    assert "shared" in available_mechanisms()
    with Fabric(build_topo("fattree,4"), Scale(4000), marking="off", ecmp_hash="shared") as fab:
        summary = fab.summary()
        assert summary["ecmp_hash"] == "shared" and summary["ecmp_hash_independent"] is False
        assert summary["ecmp_correlated_pairs"] == 16
        src, dst = "h1", fab.hosts[-1]
        flows = _send_flows(fab, src, dst)
        edge = fab.routes.next_hops[src][dst][0]
        aggs = fab.routes.next_hops[edge][dst]
        assert sum(flows[(edge, a)] for a in aggs) == pytest.approx(FLOWS)
        core_links = [(a, c) for a in aggs for c in fab.routes.next_hops[a][dst]]
        idle = [link for link in core_links if flows[link] == 0]
        # Each agg got Binomial(64, 1/2) >= 16 flows (P > 1 - 1e-4) and, hashing as the
        # edge did, sent all of them up the same one of its two core links.
        assert len(idle) == 2 and {a for a, _ in idle} == set(aggs), flows
        res = ecmp_check(fab.routes, fab.switches, flows, max_flow_units=1)
        assert not res.ok and len(res.reasons) == 2, res

"""Fair shares over time from the configuration alone, on a hand-worked example."""

from __future__ import annotations

import networkx as nx
import pytest

from model.fairshare import FlowSpec, fair_share_schedule

G = 1e9
MIB = 1 << 20


def star(n_hosts: int) -> nx.Graph:
    g = nx.Graph()
    for i in range(n_hosts):
        g.add_edge(f"h{i}", "sw", rate_bps=400 * G, delay_s=0.5e-6)
    return g


def test_three_staggered_flows_into_one_receiver_by_hand():
    # h1, h2, h3 -> h0, 1 MiB of payload each (8388608 bit), released 0, 10, 20 us;
    # payload only, no overhead.
    # [0, 10]: flow 0 alone at 400G sends 4e6 bit (4388608 left).
    # [10, 20]: 0 and 1 at 200G: 2e6 bit each (flow 0: 2388608 left).
    # [20, 37.91456]: three at 400/3G; flow 0 needs 2388608 x 3 / 400e9 = 17.91456 us.
    #   Flows 1 and 2 then have 4e6 and 6e6 bit left.
    # [37.91456, 57.91456]: 1 and 2 at 200G: flow 1 needs 20 us.
    # [57.91456, 62.91456]: flow 2 alone at 400G for its last 2e6 bit: 5 us.
    g = star(4)
    flows = [FlowSpec(k, [(f"h{k + 1}", "sw", "h0")], MIB, start_s=10e-6 * k) for k in range(3)]
    sched = fair_share_schedule(g, flows, overhead_s=0.0, wire_factor=1.0, packet_bytes=0.0)
    bounds = [t for iv in sched.intervals for t in (iv.t0_s * 1e6, iv.t1_s * 1e6)]
    assert bounds == pytest.approx([0, 10, 10, 20, 20, 37.91456, 37.91456, 57.91456,
                                    57.91456, 62.91456])
    shares = [sorted(iv.rates_bps.values()) for iv in sched.intervals]
    assert shares[0] == pytest.approx([400 * G])
    assert shares[1] == pytest.approx([200 * G] * 2)
    assert shares[2] == pytest.approx([400 * G / 3] * 3)
    assert shares[3] == pytest.approx([200 * G] * 2)
    assert shares[4] == pytest.approx([400 * G])
    assert sched.last_byte_s[0] == pytest.approx(37.91456e-6)
    # completion adds the path latency (two 0.5 us links)
    assert sched.finish_s[2] == pytest.approx(62.91456e-6 + 1e-6)


def test_defaults_price_headers_and_the_nic():
    # one flow alone: 1 us NIC overhead before the first byte, payload x 4178/4096 on
    # the wire, the payload rate is the wire rate / the same factor
    g = star(2)
    sched = fair_share_schedule(g, [FlowSpec("a", [("h1", "sw", "h0")], MIB)])
    assert sched.first_byte_s["a"] == pytest.approx(1e-6)
    assert sched.last_byte_s["a"] == pytest.approx(1e-6 + MIB * 8 * 4178 / 4096 / (400 * G))
    (iv,) = sched.intervals
    assert iv.payload_rates_bps["a"] == pytest.approx(400 * G * 4096 / 4178)
    with pytest.raises(ValueError):
        fair_share_schedule(g, [FlowSpec("a", [("h1", "sw", "h0")], MIB)] * 2)

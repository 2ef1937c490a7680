"""The engine's default retransmission timeout (pure: a stand-in fabric)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.run import _auto_rto_s
from topologies.base import FABRIC_LINK_DELAY_S
from topologies.fattree import LeafSpine
from topologies.routing import compute_routes
from topologies.twodc import WanLink, two_dcs


def _fabric(pfc: object, topo: object = None) -> SimpleNamespace:
    topo = topo or LeafSpine(leaves=2, spines=1, hosts_per_leaf=2, host_rate="100G")
    ports = [SimpleNamespace(buffer_bytes=512 << 10, rate_bps=100e9),
             SimpleNamespace(buffer_bytes=1 << 20, rate_bps=400e9)]
    return SimpleNamespace(hosts=list(topo.hosts()), routes=compute_routes(topo),
                           ports=lambda: ports, pfc=pfc, topo=topo)


def test_rto_covers_a_full_buffer_and_with_pfc_one_at_every_hop():
    drain_s = (512 << 10) * 8 / 100e9                  # the slowest port to drain
    # host -> leaf -> spine -> leaf -> host: four hops, there and back at the longest delay
    propagation_s = 2 * 4 * FABRIC_LINK_DELAY_S
    assert _auto_rto_s(_fabric(None)) == pytest.approx(3 * drain_s + propagation_s)
    # four ports, each may hold a paused frame
    assert _auto_rto_s(_fabric(object())) == pytest.approx(3 * drain_s * 4 + propagation_s)


def test_rto_outlasts_the_round_trip_over_a_long_link():
    topo = two_dcs("leafspine,2,1,2", WanLink(100e3))
    round_trip_s = 2 * 100e3 * 5e-9                    # 1 ms of fibre there and back
    assert _auto_rto_s(_fabric(None, topo)) > round_trip_s

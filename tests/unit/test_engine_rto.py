"""The engine's default retransmission timeout (pure: a stand-in fabric)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.run import _auto_rto_s
from topologies.fattree import LeafSpine
from topologies.routing import compute_routes


def _fabric(pfc: object) -> SimpleNamespace:
    topo = LeafSpine(leaves=2, spines=1, hosts_per_leaf=2, host_rate="100G")
    ports = [SimpleNamespace(buffer_bytes=512 << 10, rate_bps=100e9),
             SimpleNamespace(buffer_bytes=1 << 20, rate_bps=400e9)]
    return SimpleNamespace(hosts=list(topo.hosts()), routes=compute_routes(topo),
                           ports=lambda: ports, pfc=pfc)


def test_rto_covers_a_full_buffer_and_with_pfc_one_at_every_hop():
    drain_s = (512 << 10) * 8 / 100e9                  # the slowest port to drain
    assert _auto_rto_s(_fabric(None)) == pytest.approx(3 * drain_s)
    # host -> leaf -> spine -> leaf -> host: four ports, each may hold a paused frame
    assert _auto_rto_s(_fabric(object())) == pytest.approx(3 * drain_s * 4)

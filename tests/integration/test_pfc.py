"""PFC lossless mode on a live fabric: an 8->1 incast without congestion control drops nothing
with PFC (pauses propagate hop by hop up to the senders' NICs) and drops without it; stopping
the controller puts the fabric's byte FIFOs back.

Leaf-spine of 3 leaves x 3 hosts at 100G (300G uplinks, one spine), h1..h8 -> h9 (on l3),
every port with a shallow 512 KiB buffer so that the queues, not the message sizes, decide.
PFC's reading and gating go through the kernel's rtnl lock, which other work on the machine
(a namespace being torn down) can hold for tens of ms: the headroom is sized for a 100 ms
wall-clock reaction, 5 µs real at S = 20000.
"""

from __future__ import annotations

import os

import pytest

from core.messages import Message, Workload
from core.scaling import Scale
from emu.fabric import Fabric
from emu.pfc_controller import PfcConfig
from emu.telemetry import QdiscReader
from engine.run import EngineConfig, run_workload
from topologies.fattree import LeafSpine

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: builds network namespaces"),
]

KIB = 1 << 10
S = 20000
SIZE_BYTES = BUFFER_BYTES = 512 * KIB
PFC = PfcConfig(reaction_budget_wall_s=0.1)
SENDERS = [f"h{i}" for i in range(1, 9)]


def _fabric() -> Fabric:
    topo = LeafSpine(leaves=3, spines=1, hosts_per_leaf=3, host_rate="100G")
    for a, b in topo.links():
        topo.linkInfo(a, b)["buffer_bytes"] = BUFFER_BYTES
    return Fabric(topo, Scale(S), marking="off")


def _incast() -> Workload:
    msgs = [Message(i, h, "h9", SIZE_BYTES) for i, h in enumerate(SENDERS, start=1)]
    return Workload("incast-8to1", msgs, [*SENDERS, "h9"], SIZE_BYTES)


def _leaf(port) -> dict:
    reader = QdiscReader(port.netns_path)
    try:
        return reader.leaf_stats()[port.ifindex]
    finally:
        reader.close()


def _assert_complete(result) -> None:
    m = result.messages
    assert result.completed, result.stats.error
    assert (m["bytes_received"] == m["size_bytes"]).all() and m["completed"].all()


def test_pfc_incast_is_lossless_and_pauses_hop_by_hop():
    with _fabric() as fab:
        pfc = fab.enable_pfc(PFC)
        kinds = {p.name: _leaf(p)["kind"] for p in fab.ports() if p.peer_node in fab.switches}
        result = run_workload(fab, _incast(), EngineConfig(cc=None, timeout_s=120))
        stats = fab.port_stats().set_index("port")
    summary = pfc.summary()
    assert pfc.error is None and summary["error"] is None
    assert set(kinds.values()) == {"tbf"}  # every port sending into a switch has its gate
    _assert_complete(result)
    m = result.messages
    # Lossless: no port dropped anything (qdisc or marker), nothing was resent.
    dropped = stats[(stats["qdisc_drops"] > 0) | (stats["marker_drops"] > 0)]
    assert dropped.empty, "\n".join([
        dropped[["qdisc_drops", "marker_drops", "xoff_bytes", "headroom_bytes", "pause_events",
                 "xoff_events"]].to_string(), *(f"{k}={v}" for k, v in summary.items())])
    assert (m["retransmitted"] == 0).all() and (m["naks"] == 0).all() and (m["timeouts"] == 0).all()
    # The bottleneck asserted Xoff and paused its feeders: the spine and h9's neighbours...
    bottleneck = fab.port("l3", "h9").name
    assert stats.loc[bottleneck, "xoff_events"] > 0
    for node, peer in (("s1", "l3"), ("h7", "l3"), ("h8", "l3")):
        assert stats.loc[fab.port(node, peer).name, "pause_events"] > 0
    # ... the spine's queue then paused the leaves' uplinks, and those the senders' NICs.
    assert stats.loc[fab.port("s1", "l3").name, "xoff_events"] > 0
    for leaf, hosts in (("l1", ["h1", "h2", "h3"]), ("l2", ["h4", "h5", "h6"])):
        assert stats.loc[fab.port(leaf, "s1").name, "pause_events"] > 0
        assert stats.loc[fab.port(leaf, "s1").name, "xoff_events"] > 0
        for h in hosts:
            assert stats.loc[fab.port(h, leaf).name, "pause_events"] > 0
    # Nothing feeds h9's own NIC toward the congestion: never paused.
    assert stats.loc[fab.port("h9", "l3").name, "pause_events"] == 0
    paused = stats[stats["pause_events"] > 0]
    assert (paused["paused_s_emu"] > 0).all()
    assert paused["paused_s_real"].to_numpy() == pytest.approx(paused["paused_s_emu"].to_numpy() / S)
    # No queue went past its Xoff by more than its headroom (else it would have dropped,
    # checked above); reaction and actuation were measured, in wall and real time.
    assert summary["pause_events"] == int(stats["pause_events"].sum()) > 0
    for name in ("reaction", "change"):
        wall = summary[f"{name}_wall_p50_s"]
        assert wall > 0 and summary[f"{name}_real_p50_s"] == pytest.approx(wall / S)
    assert summary["polls"] > 0 and 0 < summary["cpu_fraction"] <= 1.0


def test_same_incast_without_pfc_drops_and_recovers():
    with _fabric() as fab:
        result = run_workload(fab, _incast(), EngineConfig(cc=None, timeout_s=120))
        stats = fab.port_stats().set_index("port")
    _assert_complete(result)
    assert "pause_events" not in stats.columns
    assert stats.loc[fab.port("l3", "h9").name, "qdisc_drops"] > 0
    assert result.messages["retransmitted"].sum() > 0


def test_stopping_pfc_puts_the_byte_fifos_back():
    with _fabric() as fab:
        pfc = fab.enable_pfc(PFC)
        gates = [p for p in fab.ports() if p.peer_node in fab.switches]
        pfc.stop(restore=True)
        leaves = {p.name: _leaf(p) for p in gates}
        summary = pfc.summary()
    assert {leaf["kind"] for leaf in leaves.values()} == {"bfifo"}
    assert summary["error"] is None and summary["pause_events"] == 0

"""`emu pcap` traffic replayed into a fabric arrives where its addresses say."""

from __future__ import annotations

import socket
import time

import pytest

pytestmark = pytest.mark.root


def _replay_and_count(tmp_path, write_gap_s: float, **limits):
    from core.scaling import Scale
    from emu.fabric import Fabric
    from emu.shaping import port_qdisc_stats
    from engine.replay import replay_pcap
    from topologies.fattree import LeafSpine
    from traffic.pcap import read_roce_pcap, write_pcap
    from traffic.workload_pcap import collective_pcap

    path = tmp_path / "a2a.pcap"
    collective_pcap("alltoall", 4, 256 * 1024, path)
    if write_gap_s:  # the second half of the frames after an idle gap
        frames = read_roce_pcap(path)
        half = len(frames) // 2
        write_pcap(path, frames[:half] + [(t + write_gap_s, f) for t, f in frames[half:]])
    expected: dict[str, int] = {}
    with Fabric(LeafSpine(2, 2, 2), Scale(4000), marking="off") as fab:
        for _, frame in read_roce_pcap(path):
            dst = fab.plan.host_by_ip[socket.inet_ntoa(frame[30:34])]
            expected[dst] = expected.get(dst, 0) + 1
        # the leaf's port toward each host (hosts of a leaf-spine have one NIC)
        last_hop = {h: fab.port(fab.plan.interfaces[h][0].peer_node, h) for h in fab.hosts}
        before = {h: port_qdisc_stats(fab.ipr(p.node), p.ifindex)["tx_packets"]
                  for h, p in last_hop.items()}
        result = replay_pcap(fab, path, **limits)
        time.sleep(0.5)  # let the shaped queues drain
        delivered = {h: port_qdisc_stats(fab.ipr(p.node), p.ifindex)["tx_packets"] - before[h]
                     for h, p in last_hop.items()}
    return result, expected, delivered


def test_replayed_frames_reach_their_destination_hosts(tmp_path):
    result, expected, delivered = _replay_and_count(tmp_path, 0.0)
    assert result.frames == sum(expected.values()) and result.compressed_gaps == 0
    assert delivered == expected


def test_an_idle_hour_is_shortened_by_max_gap(tmp_path):
    from traffic.pcap import PcapError

    with pytest.raises(PcapError, match="would take 167 days"):
        _replay_and_count(tmp_path, 3600.0)  # refused before a frame is sent
    result, expected, delivered = _replay_and_count(tmp_path, 3600.0, max_gap_s=1e-6)
    assert result.compressed_gaps >= 1 and result.duration_s < 1e-3  # the hour is gone
    assert delivered == expected


def test_foreign_pcap_is_refused_before_building(tmp_path):
    from traffic.pcap import PcapError, read_roce_pcap, write_pcap

    path = tmp_path / "udp.pcap"
    frame = bytes(12) + b"\x08\x00" + bytes(40)
    write_pcap(path, [(0.0, frame)])
    with pytest.raises(PcapError):
        read_roce_pcap(path)

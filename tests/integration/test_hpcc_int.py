"""HPCC end to end: the switches' eBPF markers write in-band telemetry into RoCEv2 data
frames, the responder echoes it in its ACKs, and HPCC keeps the incast queue short.

Fabric: leafspine,2,1,4 with 100G hosts (400G uplinks); h1, h2, h3 (leaf l1) each write
512 KiB to h8 (leaf l2). A frame from l1 to h8 crosses three switch egress ports:
l1 -> s1 (400G), s1 -> l2 (400G), l2 -> h8 (100G, the bottleneck).
"""

from __future__ import annotations

import os

import pytest

from core.errors import CapabilityError
from core.frame import OFF_ACK_INT, OFF_INT, OFF_INT_RETH
from core.messages import Message, Workload
from core.scaling import Scale
from emu.fabric import Fabric
from engine.capture import HostCapture
from engine.rawsock import realtime_offset_ns
from engine.run import EngineConfig, run_workload
from tests.conftest import roce_frames, tap
from topologies.spec import build_topo
from traffic.ccload import resolve_cc
from traffic.icrc import icrc_ok
from traffic.int_telemetry import decode_block
from traffic.pcap import iter_pcap
from traffic.roce import ACKNOWLEDGE, DATA_OPCODES, RETH_OPCODES

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: builds network namespaces"),
]

SIZE = 512 << 10
#: The egress ports' real rates along l1 -> s1 -> l2 -> h8.
PATH_RATES_BPS = [400e9, 400e9, 100e9]
#: HPCC's T: the fabric's unloaded round trip is ~5 us (fixed delays, 3 switches).
HPCC = resolve_cc("hpcc", {"base_rtt_s": 5e-6})


def _incast() -> Workload:
    msgs = [Message(i, f"h{i + 1}", "h8", SIZE) for i in range(3)]
    return Workload("incast", msgs, ["h1", "h2", "h3", "h8"], SIZE)


@pytest.fixture(scope="module")
def runs():
    topo = build_topo("leafspine,2,1,4,host_rate=100G")
    fab = Fabric(topo, Scale(20000), marking="bpf")
    try:
        fab.start()
    except CapabilityError as e:
        fab.stop()
        pytest.skip(f"in-band telemetry needs the eBPF marker: {e}")
    try:
        taps = {h: tap(fab, h) for h in ("h1", "h8")}
        with HostCapture(fab, ["h1", "h8"], _incast()) as capture:
            hpcc = run_workload(fab, _incast(), EngineConfig(cc=HPCC))
            captured = capture.result(hpcc.stats.t0_monotonic_ns + realtime_offset_ns(),
                                      fab.scale)
        frames = {h: roce_frames(s) for h, s in taps.items()}
        for s in taps.values():
            s.close()
        python_path = run_workload(fab, _incast(), EngineConfig(cc=HPCC, send_path="python"))
        dcqcn = run_workload(fab, _incast(), EngineConfig(cc="paper"))
    finally:
        fab.stop()
    return hpcc, python_path, dcqcn, frames, captured


def test_every_switch_hop_writes_its_record_and_the_ack_echoes_it(runs):
    hpcc, _, _, frames, _ = runs
    assert hpcc.completed, hpcc.stats.error
    data = [f for f in frames["h8"] if f[42] in DATA_OPCODES]
    assert len(data) >= 3 * SIZE // 4096 * 0.9
    tx_seen: list[list[int]] = [[], [], []]
    for f in data:
        at = OFF_INT_RETH if f[42] in RETH_OPCODES else OFF_INT
        recs = decode_block(f[at:])
        assert [r.rate_bps for r in recs] == PATH_RATES_BPS
        assert all(a.ts_s < b.ts_s for a, b in zip(recs, recs[1:], strict=False))  # hop order
        for k, r in enumerate(recs):
            tx_seen[k].append(r.tx_bytes)
    for counters in tx_seen:  # each port's transmitted bytes only grow
        assert counters == sorted(counters) and counters[-1] > counters[0]
    acks = [f for f in frames["h1"] if f[42] == ACKNOWLEDGE]
    assert acks and all(icrc_ok(a) for a in acks)
    echoed = [decode_block(a[OFF_ACK_INT:]) for a in acks]
    assert all([r.rate_bps for r in e] == PATH_RATES_BPS for e in echoed)


def test_hpcc_keeps_the_incast_queue_short_on_both_receive_paths(runs):
    hpcc, python_path, dcqcn, _, _ = runs
    for r in (hpcc, python_path, dcqcn):
        assert r.completed, r.stats.error
        assert int(r.messages.retransmitted.sum()) == 0
    # One-way latency above the unloaded path is queueing at the bottleneck.
    p99 = {name: float(r.latency.one_way_s.quantile(0.99))
           for name, r in (("hpcc", hpcc), ("python", python_path), ("dcqcn", dcqcn))}
    assert p99["hpcc"] < 0.3 * p99["dcqcn"], p99
    assert p99["python"] < 0.3 * p99["dcqcn"], p99


def test_a_capture_keeps_every_frame_a_tap_saw_in_real_time_and_writes_a_pcap(runs, tmp_path):
    hpcc, _, _, frames, captured = runs
    end_s = float(hpcc.messages.end_s.max())
    for host in ("h1", "h8"):
        cap = captured[host]
        assert cap.ring_drops == 0 and cap.before_t0 == 0
        # The same frames, whole and in the same order, as a plain socket on the NIC.
        assert [f for _, f, _ in cap.frames] == frames[host]
        assert all(n == len(f) for _, f, n in cap.frames)
        times = [t for t, _, _ in cap.frames]
        assert times == sorted(times) and times[0] >= 0 and times[-1] <= 1.01 * end_s
        path = tmp_path / f"{host}.pcap"
        assert cap.write(path) == len(cap.frames)
        # In whole ns, as the pcap stores them (rounding to 9 decimals instead split a
        # stamp that fell on half a ns, 2.99635e-05 s, differently on the two sides).
        assert [(round(t * 1e9), f) for t, f in iter_pcap(path)] == \
            [(round(t * 1e9), f) for t, f, _ in cap.frames]
    # The receiver's capture: every data frame of the three writes, each with its
    # three records; the ACKs it sends echo them.
    data = [f for _, f, _ in captured["h8"].frames if f[42] in DATA_OPCODES]
    assert len(data) == int(hpcc.messages.packets_sent.sum())
    assert all(len(decode_block(f[OFF_INT_RETH if f[42] in RETH_OPCODES else OFF_INT:])) == 3
               for f in data)

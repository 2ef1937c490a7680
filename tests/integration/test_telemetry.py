"""Telemetry: the per-port DataFrame against `ip -s link` / `tc -s qdisc`, and the sampler."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

pytestmark = pytest.mark.root

RATE_EMU_BPS = 16e6
BUFFER_BYTES = 100_000


@pytest.fixture(scope="module")
def rig():
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, tc, BPF)")
    if shutil.which("clang") is None:
        pytest.skip("the bpf marker needs clang")
    from core.ecn import Thresholds
    from emu.ecn.rig import MarkerRig
    r = MarkerRig("tele", RATE_EMU_BPS, BUFFER_BYTES, Thresholds(10_000, 40_000, 0.5))
    yield r
    r.close()


def _ns_name(path: str) -> str:
    return os.path.basename(path)


def test_port_stats_match_interface_and_qdisc_statistics(rig):
    from emu.telemetry import port_stats
    frames = [rig.frame(i + 1, 1 if i % 3 else 0) for i in range(400)]  # overload: marks + drops
    rig.start_receiver()
    rig.send(frames)
    rx = rig.stop_receiver()
    df = port_stats([rig.port()])

    expected = {"node", "ifname", "peer", "tier", "rate_bps", "tx_bytes", "tx_packets", "drops",
                "backlog_bytes", "ecn_marked", "ect_packets", "marker_packets", "marker_bytes",
                "vq_bytes", "hist", "hist_bucket_bytes", "qdisc_drops", "marker_drops"}
    assert expected <= set(df.columns)
    row = df.iloc[0]

    # Independent views: iproute2's JSON output (forked here only, never in the fabric path).
    ns = _ns_name(rig.switch_ns)
    link = json.loads(subprocess.check_output(["ip", "-n", ns, "-s", "-j", "link", "show", "w1"]))[0]
    qd = json.loads(subprocess.check_output(["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", "w1"]))
    leaf = next(q for q in qd if q.get("handle") == "10:")
    assert row.tx_packets == link["stats64"]["tx"]["packets"]
    assert row.tx_bytes == link["stats64"]["tx"]["bytes"]
    assert row.qdisc_tx_packets == leaf["packets"] and row.qdisc_drops == leaf["drops"]
    assert row.backlog_bytes == leaf["backlog"] == 0

    # And what the receiver saw.
    assert row.tx_packets == len(rx.ip_id)
    assert row.ecn_marked == sum(e == 3 for e in rx.ecn) > 0
    assert row.marker_packets == 400 and row.marker_bytes == 400 * 1000
    assert row.ect_packets == sum(1 for i in range(400) if i % 3)
    assert row.drops == row.marker_drops + row.qdisc_drops == 400 - len(rx.ip_id) > 0
    assert len(row["hist"]) == 32 and sum(row["hist"]) == 400
    assert row.hist_bucket_bytes * 32 >= BUFFER_BYTES


def test_sampler_records_queue_depth_at_the_interval(rig):
    from emu.telemetry import QueueSampler
    rig.wait_idle()
    frames = [rig.frame(1000 + i, 1) for i in range(300)]
    with QueueSampler([rig.port()], {rig.switch_ns: rig.ipr_switch}, interval_s=0.01) as s:
        rig.send(frames, rate_pps=3000)  # 1.5x the port rate for 0.1 s, then drain
        rig.wait_idle()
        time.sleep(0.05)  # a few samples of the empty queue
    df = s.frame()
    assert list(df.columns) == ["t_s", "port", "backlog_bytes", "vq_bytes"]
    assert set(df.port) == {"sw:w1"}
    assert df.backlog_bytes.max() > 10_000 and df.vq_bytes.max() > 10_000
    assert df.backlog_bytes.iloc[-1] == 0
    # Never faster than the interval on average; a busy machine may make it later, and
    # its speed and CPU cost are measured by bench.marker, not asserted here.
    span_s = df.t_s.iloc[-1] - df.t_s.iloc[0]
    assert df.t_s.is_monotonic_increasing
    assert len(df) - 1 <= span_s / 0.01 + 1, (len(df), span_s)


def test_port_stats_without_marker_reports_qdisc_only(rig):
    from dataclasses import replace

    from emu.telemetry import port_stats
    p = replace(rig.port(), marker=None)
    row = port_stats([p]).iloc[0]
    assert row.backend == "off" and row["hist"] is None
    assert row.ecn_marked == 0 and row.tx_packets > 0

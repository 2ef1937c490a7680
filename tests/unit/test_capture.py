"""Capture rings sized from the workload, within the per-host and total budgets."""

from __future__ import annotations

from core.frame import HEADER_BYTES, MTU_PAYLOAD_BYTES, RETH_BYTES
from core.messages import Message, Workload
from engine.capture import MAX_CAPTURE_BYTES, MAX_CAPTURE_FRAMES, HostCapture


def _workload(size_bytes: int, n_hosts: int = 2) -> Workload:
    hosts = [f"h{i}" for i in range(1, n_hosts + 1)]
    msgs = [Message(i, hosts[i], hosts[(i + 1) % n_hosts], size_bytes) for i in range(n_hosts)]
    return Workload("ring", msgs, hosts, size_bytes)


def test_a_ring_holds_a_data_frame_and_an_ack_per_frame_of_its_hosts_messages_whole():
    cap = HostCapture(None, ["h1", "h3"], _workload(1 << 20))  # type: ignore[arg-type]
    ring = cap.rings["h1"]
    # h1 sends 256 frames and receives 256: with their ACKs and slack, 1,344 slots.
    assert ring.frame_nr >= 2 * 512 * 1.25 + 64
    assert ring.snap_bytes == HEADER_BYTES + RETH_BYTES + MTU_PAYLOAD_BYTES
    assert cap.rings["h3"].frame_nr < 200          # no message of its own: a small ring


def test_rings_stay_within_the_per_host_and_the_total_budget():
    one = HostCapture(None, ["h1"], _workload(4 << 30))  # type: ignore[arg-type]
    assert one.rings["h1"].frame_nr <= MAX_CAPTURE_FRAMES * 1.01
    hosts = [f"h{i}" for i in range(1, 33)]
    many = HostCapture(None, hosts, _workload(4 << 30, 32))  # type: ignore[arg-type]
    assert sum(r.size_bytes for r in many.rings.values()) <= MAX_CAPTURE_BYTES
    assert len(many.rings) == 32

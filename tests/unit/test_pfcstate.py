"""PFC without root: headroom and thresholds by hand, feeders from real routes, the Xoff/Xon
hysteresis, pause accounting, action ordering, the controller's plan and the netlink encoding."""

from __future__ import annotations

import struct

import pytest

from core.errors import FabricEmuError, ParameterError
from core.scaling import Scale
from emu.pfc_controller import PfcConfig, PfcController
from emu.pfcgate import (
    KICK_FRAME,
    OPEN_BURST_BYTES,
    PAUSED_BURST_BYTES,
    PAUSED_RATE_BYTES_PS,
    qdisc_message,
    tbf_options,
)
from emu.ports import Port
from emu.shaping import CLASS_HANDLE, LEAF_HANDLE
from topologies.fattree import LeafSpine
from topologies.routing import compute_routes
from traffic.pfc import (
    ActionQueue,
    Hysteresis,
    PauseLedger,
    PfcThresholds,
    feeders,
    headroom_bytes,
    plan_thresholds,
)


def test_headroom_is_rate_times_reaction_and_round_trip_plus_one_frame_per_feeder():
    # 100G over a 0.5 µs link: 12.5e9 B/s x (0.4 + 1.0) µs = 17,500 B, + 9014
    # 300G over a 1.0 µs link: 37.5e9 B/s x (0.4 + 2.0) µs = 90,000 B, + 9014
    got = headroom_bytes([(100e9, 0.5e-6), (300e9, 1e-6)], reaction_s=0.4e-6, leak_bytes=9014)
    assert got == 17_500 + 9014 + 90_000 + 9014
    assert headroom_bytes([], 1e-6, 9014) == 0
    with pytest.raises(ParameterError):
        headroom_bytes([(1e9, 0)], -1.0, 0)


def test_thresholds_default_to_the_buffer_minus_headroom_and_a_gap():
    th = plan_thresholds("l1:x", 1_000_000, 150_000, xon_gap_bytes=18_028)
    assert th == PfcThresholds(850_000, 850_000 - 18_028, 150_000, 1_000_000)
    th = plan_thresholds("l1:x", 1_000_000, 150_000, xoff_bytes=500_000, xon_bytes=100_000)
    assert (th.xoff_bytes, th.xon_bytes) == (500_000, 100_000)
    assert plan_thresholds("p", 100, 10, xon_gap_bytes=1000).xon_bytes == 0


@pytest.mark.parametrize("kwargs, name", [
    ({"buffer_bytes": 100_000, "headroom": 100_000}, "buffer_bytes"),
    ({"buffer_bytes": 100_000, "headroom": 10_000, "xoff_bytes": 95_000}, "xoff_bytes"),
    ({"buffer_bytes": 100_000, "headroom": 10_000, "xoff_bytes": 0}, "xoff_bytes"),
    ({"buffer_bytes": 100_000, "headroom": 10_000, "xoff_bytes": 50_000, "xon_bytes": 50_000},
     "xon_bytes"),
])
def test_thresholds_that_could_drop_are_refused_naming_the_port(kwargs, name):
    with pytest.raises(ParameterError) as err:
        plan_thresholds("s1:s1-eth3", **kwargs)
    assert err.value.name == name and "s1:s1-eth3" in str(err.value)


def test_feeders_follow_the_routes_of_a_leaf_spine():
    topo = LeafSpine(leaves=3, spines=1, hosts_per_leaf=3, host_rate="100G")
    nh = compute_routes(topo).next_hops

    def nbrs(node):
        return [b if a == node else a for a, b in topo.links() if node in (a, b)]

    # Toward a host: its leaf's other hosts and the spine.
    assert feeders(nh, "l3", "h9", nbrs("l3")) == {"h7", "h8", "s1"}
    # Spine toward a leaf: the other leaves only.
    assert feeders(nh, "s1", "l3", nbrs("s1")) == {"l1", "l2"}
    # Leaf uplink: only its own hosts (the spine never sends back up).
    assert feeders(nh, "l1", "s1", nbrs("l1")) == {"h1", "h2", "h3"}


def _hyst() -> Hysteresis:
    th = PfcThresholds(xoff_bytes=1000, xon_bytes=400, headroom_bytes=0, buffer_bytes=2000)
    return Hysteresis({"e1": ["g1", "g2"], "e2": ["g2", "g3"]}, {"e1": th, "e2": th})


def test_hysteresis_pauses_at_xoff_holds_between_and_resumes_at_xon():
    h = _hyst()
    assert h.update({"e1": 999, "e2": 0}) == []
    assert sorted(h.update({"e1": 1000, "e2": 0})) == [("g1", True), ("g2", True)]
    assert h.update({"e1": 401, "e2": 0}) == []          # between Xon and Xoff: still paused
    assert h.update({"e1": 5000, "e2": 0}) == []         # already asserted: no new event
    assert sorted(h.update({"e1": 400, "e2": 0})) == [("g1", False), ("g2", False)]
    assert h.xoff_events == {"e1": 1, "e2": 0}


def test_a_gate_feeding_two_congested_ports_resumes_only_when_both_are_below_xon():
    h = _hyst()
    assert sorted(h.update({"e1": 1500, "e2": 1500})) == [("g1", True), ("g2", True), ("g3", True)]
    assert sorted(h.update({"e1": 0, "e2": 900})) == [("g1", False)]
    assert h.gate_paused("g2")
    assert sorted(h.update({"e1": 0, "e2": 0})) == [("g2", False), ("g3", False)]


def test_one_poll_reports_net_changes_only():
    h = _hyst()
    h.update({"e2": 1500})                                # g2, g3 paused by e2
    # e2 drains and e1 fills in the same poll: g2 stays paused, no resume-and-pause.
    assert sorted(h.update({"e2": 0, "e1": 1500})) == [("g1", True), ("g3", False)]


def test_ledger_counts_events_and_paused_time_with_the_running_interval():
    led = PauseLedger(["g1", "g2"])
    led.paused("g1", 100)
    led.paused("g1", 150)                                 # already paused: same event
    led.resumed("g1", 400)
    led.resumed("g2", 500)                                # never paused: nothing
    led.paused("g1", 1000)
    assert led.events == {"g1": 2, "g2": 0}
    assert led.total_ns("g1") == 300
    assert led.total_ns("g1", now_ns=1100) == 400
    led.close(1200)
    assert led.total_ns("g1") == 500 and not led.since


def test_actions_come_out_when_due_in_order():
    q = ActionQueue()
    q.push(300, "g1", False, 10)
    q.push(100, "g1", True, 5)
    q.push(100, "g2", True, 6)
    assert q.next_due_ns() == 100 and len(q) == 3
    assert q.pop_due(99) == []
    assert q.pop_due(100) == [("g1", True, 100, 5), ("g2", True, 100, 6)]
    assert q.pop_due(10_000) == [("g1", False, 300, 10)]
    assert q.next_due_ns() is None


@pytest.mark.parametrize("kwargs", [
    {"priority": 0}, {"xoff_bytes": -1}, {"xon_bytes": 1.5}, {"xon_gap_bytes": -2},
    {"poll_interval_s": 1e-6}, {"poll_interval_s": 1e-3, "reaction_budget_wall_s": 1e-4},
    {"host_queue_bytes": 100},
])
def test_bad_config_is_a_parameter_error(kwargs):
    with pytest.raises(ParameterError):
        PfcConfig(**kwargs)


class _FakeFabric:
    """What PfcController.plan() reads of a fabric, built from a topology (no namespaces)."""

    def __init__(self, topo, scale: float, delay_emulated: bool) -> None:
        self.topo = topo
        self.scale = Scale(scale)
        self.delay_emulated = delay_emulated
        self.switches = topo.switch_nodes()
        self.routes = compute_routes(topo)
        self._ports = []
        for i, (a, b) in enumerate(topo.links()):
            info = topo.linkInfo(a, b)
            for node, peer in ((a, b), (b, a)):
                self._ports.append(Port(node, f"{node}-{peer}", i, f"/ns/{node}", peer,
                                        info["rate_bps"], info["rate_bps"] / scale,
                                        info["buffer_bytes"], info["tier"],
                                        node in self.switches))

    def ports(self):
        return list(self._ports)


@pytest.mark.parametrize("delay_emulated", [False, True])
def test_controller_plan_thresholds_and_propagation(delay_emulated):
    topo = LeafSpine(leaves=3, spines=1, hosts_per_leaf=3, host_rate="100G")
    ctl = PfcController(_FakeFabric(topo, 5000, delay_emulated), PfcConfig())
    ctl.plan()
    assert ctl.egress_feeders[("l3", "h9")] == {("h7", "l3"), ("h8", "l3"), ("s1", "l3")}
    # Headroom of l3 -> h9 by hand: reaction = wall budget / S; two host links at 100G
    # and the spine link at 300G, each with its round trip; one paused-burst frame per
    # feeder.
    r = PfcConfig().reaction_budget_wall_s / 5000
    d_host, d_spine = topo.linkInfo("h7", "l3")["delay_s"], topo.linkInfo("s1", "l3")["delay_s"]
    want = (2 * 12.5e9 * (r + 2 * d_host) + 37.5e9 * (r + 2 * d_spine) + 3 * PAUSED_BURST_BYTES)
    th = ctl.thresholds[("l3", "h9")]
    assert th.headroom_bytes == pytest.approx(want, abs=1)
    assert th.xoff_bytes == th.buffer_bytes - th.headroom_bytes
    # Every port that sends into a switch is a gate, hosts' NICs included.
    assert set(ctl.applied) == {(p.node, p.peer_node) for p in ctl.fab.ports()
                                if p.peer_node in ctl.fab.switches}
    # With delay emulated a pause takes effect after the dilated round trip of its link.
    assert ctl.delay_ns[("s1", "l3")] == (round(2 * d_spine * 5000 * 1e9) if delay_emulated else 0)


def test_controller_refuses_a_buffer_without_room_for_headroom():
    topo = LeafSpine(leaves=2, spines=1, hosts_per_leaf=2, host_rate="100G")
    for a, b in topo.links():
        topo.linkInfo(a, b)["buffer_bytes"] = 20_000
    with pytest.raises(ParameterError) as err:
        PfcController(_FakeFabric(topo, 5000, False)).plan()
    assert err.value.name == "buffer_bytes"


def _attrs(buf: bytes) -> dict[int, bytes]:
    out, off = {}, 0
    while off + 4 <= len(buf):
        ln, typ = struct.unpack_from("=HH", buf, off)
        out[typ] = buf[off + 4:off + ln]
        off += (ln + 3) & ~3
    return out


def test_tbf_change_message_layout():
    body = tbf_options(PAUSED_RATE_BYTES_PS, PAUSED_BURST_BYTES, 123_456)
    msg = qdisc_message(36, 0, 7, 42, body)
    ln, typ, flags, seq, _pid = struct.unpack_from("=IHHII", msg)
    assert (ln, typ, seq) == (len(msg), 36, 7) and flags & 0x5 == 0x5  # REQUEST | ACK
    _f, _p1, _p2, ifindex, handle, parent, _info = struct.unpack_from("=BBHiIII", msg, 16)
    assert (ifindex, handle, parent) == (42, LEAF_HANDLE, CLASS_HANDLE)
    opts = _attrs(_attrs(body)[2])
    _cell, linklayer, _ovh, _align, _mpu, rate = struct.unpack_from("=BBHhHI", opts[1])
    assert (linklayer, rate) == (1, PAUSED_RATE_BYTES_PS)
    assert struct.unpack_from("=I", opts[1], 24) == (123_456,)     # limit after rate + peak
    assert struct.unpack("=I", opts[6]) == (PAUSED_BURST_BYTES,)
    assert PAUSED_BURST_BYTES >= 9000 + 14 and OPEN_BURST_BYTES > PAUSED_BURST_BYTES


def test_kick_frame_is_a_minimal_mac_control_frame():
    assert len(KICK_FRAME) == 60
    assert KICK_FRAME[:6] == bytes.fromhex("0180c2000001")
    assert KICK_FRAME[12:14] == b"\x88\x08"


def test_controller_needs_a_running_fabric_and_a_config():
    topo = LeafSpine(leaves=2, spines=1, hosts_per_leaf=2, host_rate="100G")
    fab = _FakeFabric(topo, 5000, False)
    with pytest.raises(FabricEmuError, match="running fabric"):
        PfcController(fab).start()
    with pytest.raises(ParameterError):
        PfcController(fab, {"xoff_bytes": 1})

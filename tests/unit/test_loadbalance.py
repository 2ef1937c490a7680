"""Routing modes beyond ECMP: options, a switch's tables, each mode's decision, the C layouts."""

from __future__ import annotations

import ctypes
import shutil
from collections import Counter

import pytest

from core.errors import ParameterError
from topologies.addressing import plan_addresses
from topologies.loadbalance import (
    DEFAULT_FLOWLET_GAP_S,
    MAX_NEXT_HOPS,
    MAX_PORTS,
    ROUTING_MODES,
    VQ_SCALE,
    FlowletTable,
    least_queue_choice,
    max_idle_ns,
    parse_flowlet_gap_s,
    parse_routing,
    queue_now_scaled,
    round_robin_choice,
    spray_choice,
    switch_tables,
)
from topologies.routing import compute_routes
from topologies.spec import build_topo


def test_routing_options_parse_and_refuse():
    assert parse_routing(" Spray ") == "spray"
    assert [parse_routing(m) for m in ROUTING_MODES] == list(ROUTING_MODES)
    for bad in ("valiant-ish", "", None, 3):
        with pytest.raises(ParameterError, match="routing"):
            parse_routing(bad)
    assert parse_flowlet_gap_s("10us") == pytest.approx(10e-6)
    assert parse_flowlet_gap_s(DEFAULT_FLOWLET_GAP_S) == DEFAULT_FLOWLET_GAP_S
    for bad in ("0", "2s", "-1us", "soon", None, [1e-6], True):
        with pytest.raises(ParameterError, match="flowlet_gap"):
            parse_flowlet_gap_s(bad)


@pytest.mark.parametrize("spec", ["leafspine,2,2,2", "fattree,4", "dragonfly,p=1,a=2,h=1"])
def test_switch_tables_follow_routes_and_addresses(spec):
    topo = build_topo(spec)
    plan, routes = plan_addresses(topo), compute_routes(topo)
    for switch in topo.switch_nodes():
        tables = switch_tables(plan, routes, switch)
        ifaces = plan.interfaces[switch]
        assert [p.ifname for p in tables.ports] == [i.ifname for i in ifaces]
        for port, iface in zip(tables.ports, ifaces, strict=True):
            assert (port.mac, port.peer_mac, port.peer_node) == (iface.mac, iface.peer_mac,
                                                                iface.peer_node)
        expected = {plan.host_ip[dst]: hops for dst, hops in routes.next_hops[switch].items()
                    if hops}
        assert tables.dests.keys() == expected.keys()
        for ip, slots in tables.dests.items():
            assert tuple(tables.ports[s].peer_node for s in slots) == expected[ip]


def test_fattree_edges_spread_over_both_aggregations():
    topo = build_topo("fattree,4")
    plan, routes = plan_addresses(topo), compute_routes(topo)
    edge = routes.next_hops["h1"][topo.host_nodes()[-1]][0]
    tables = switch_tables(plan, routes, edge)
    widths = Counter(len(s) for s in tables.dests.values())
    assert widths == {1: 2, 2: 14}  # its own two hosts, then both uplinks for the others


def test_spray_covers_every_member_uniformly():
    counts = Counter(spray_choice(4, rnd) for rnd in range(4000))
    assert counts == {0: 1000, 1: 1000, 2: 1000, 3: 1000}


def test_round_robin_takes_members_in_turn():
    assert [round_robin_choice(t, 3) for t in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_flowlet_keeps_its_path_within_the_gap_and_redraws_after():
    table = FlowletTable(gap_ns=1000)
    flow = ("10.0.0.1", "10.0.0.3", 5000, 4791, 17)
    assert table.choose(flow, 0, 2, fresh=1) == 1
    # Frames closer than the gap (the gap itself included) keep the flowlet's member,
    # whatever the draw says.
    assert [table.choose(flow, t, 2, fresh=0) for t in (500, 1500, 2500)] == [1, 1, 1]
    assert table.flowlets == 1
    assert table.choose(flow, 3501, 2, fresh=0) == 0  # idle 1001 ns: a new flowlet
    assert table.flowlets == 2
    other = ("10.0.0.2", "10.0.0.3", 5000, 4791, 17)
    assert table.choose(other, 3502, 3, fresh=2) == 2  # flows are independent
    # A member that no longer exists (a link went down) is redrawn at once.
    assert table.choose(other, 3503, 2, fresh=1) == 1 and table.flowlets == 4
    # One next hop: nothing to choose, no flowlet kept.
    assert table.choose(("x",), 3504, 1, fresh=0) == 0 and table.flowlets == 4


def test_queue_now_drains_at_the_emulated_rate():
    rate = 8e6  # bit/s: 1 byte per microsecond
    q, burst = 10_000 * VQ_SCALE, 5_000 * VQ_SCALE
    assert queue_now_scaled(q, burst, 1_000, 1_000, rate, burst) == q
    # 4 ms later 4000 bytes have left
    assert queue_now_scaled(q, burst, 1_000, 4_001_000, rate, burst) == 6_000 * VQ_SCALE
    assert queue_now_scaled(q, burst, 0, 20_000_000, rate, burst) == 0
    assert queue_now_scaled(q, burst, 0, max_idle_ns(rate) + 1, rate, burst) == 0
    assert queue_now_scaled(q, burst, 5_000, 1_000, rate, burst) == q  # a clock behind: no drain


def test_queue_now_counts_what_the_bucket_sent_ahead_of_the_rate():
    rate, burst = 8e6, 5_000 * VQ_SCALE
    # an empty virtual queue whose bucket has sent 4000 bytes at once: 4000 still to
    # leave at 1 byte/µs, as an ideal port would hold them; 1 ms later 3000
    assert queue_now_scaled(0, 1_000 * VQ_SCALE, 0, 0, rate, burst) == 4_000 * VQ_SCALE
    assert queue_now_scaled(0, 1_000 * VQ_SCALE, 0, 1_000_000, rate, burst) == 3_000 * VQ_SCALE
    assert queue_now_scaled(0, burst, 0, 0, rate, burst) == 0  # idle: a full bucket
    assert queue_now_scaled(2_000 * VQ_SCALE, 0, 0, 0, rate, burst) == 7_000 * VQ_SCALE


def test_least_queue_takes_the_shortest_and_breaks_ties_from_start():
    assert least_queue_choice([30, 10, 20], start=0) == 1
    assert least_queue_choice([30, 10, 20], start=2) == 1
    assert least_queue_choice([5, 0, 0, 5], start=0) == 1
    assert least_queue_choice([5, 0, 0, 5], start=2) == 2
    assert least_queue_choice([0, 0, 0, 0], start=3) == 3
    # read in units of 10: queues within one unit tie, the first from start wins
    assert least_queue_choice([30, 10, 19], start=2, quantum=10) == 2
    assert least_queue_choice([30, 10, 20], start=2, quantum=10) == 1


def test_switch_tables_refuse_what_the_program_cannot_hold():
    topo = build_topo("leafspine,2,2,2")
    plan, routes = plan_addresses(topo), compute_routes(topo)
    too_wide = type(routes)(routes.kind, routes.hosts, {
        **routes.next_hops, "l1": {**routes.next_hops["l1"],
                                   "h3": tuple(["s1"] * (MAX_NEXT_HOPS + 1))}})
    with pytest.raises(ParameterError, match="next hops"):
        switch_tables(plan, too_wide, "l1")


def test_router_map_layouts_match_the_c_structs():
    from emu.lbrouter import (
        GROUP_SLOTS,
        MAPS,
        MODE_NUMBER,
        _Cfg,
        _Dest,
        _NhSet,
        _Port,
        _Stats,
    )

    assert ctypes.sizeof(_Cfg) == 32
    assert ctypes.sizeof(_Port) == 48
    assert ctypes.sizeof(_Dest) == 8 + 4 * MAX_NEXT_HOPS + 8 + GROUP_SLOTS
    assert ctypes.sizeof(_NhSet) == 4 + 4 * MAX_NEXT_HOPS
    assert ctypes.sizeof(_Stats) == (5 + MAX_PORTS) * 8
    from emu.ecn.bpf import _VqState
    assert ctypes.sizeof(_VqState) == 40  # struct vq_state (emu/bpf/vq_state.h)
    assert set(MODE_NUMBER) == set(ROUTING_MODES) - {"ecmp"}
    assert "vq" not in MAPS  # the markers' own map, reused: the router keeps no fd of it


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang is not installed")
def test_router_c_compiles_with_the_python_constants():
    from emu.lbrouter import MODE_NUMBER, compile_router, router_source

    data = compile_router().read_bytes()
    assert data[:4] == b"\x7fELF" and b"fabricemu_route" in data
    source = router_source().read_text()
    assert f"#define MAX_PORTS {MAX_PORTS}" in source
    assert f"#define MAX_NH {MAX_NEXT_HOPS}" in source
    assert "MODE_SPRAY = {spray}, MODE_SPRAY_RR = {spray-rr}, MODE_FLOWLET = {flowlet}, " \
           "MODE_ADAPTIVE = {adaptive},\n\t    MODE_ADAPTIVE_FLOWLET = {adaptive-flowlet}, " \
           "MODE_VALIANT = {valiant}, MODE_UGAL = {ugal} }}".format_map(MODE_NUMBER) in source
    from emu.lbrouter import GROUP_SLOTS
    from topologies.valiant import TAG_MASK, TAG_OFFSET
    assert f"#define MAX_GROUPS {GROUP_SLOTS}" in source
    assert f"#define TAG_OFFSET {TAG_OFFSET}" in source
    assert f"#define TAG_MASK {TAG_MASK:#x}" in source


def test_a_router_that_cannot_load_is_a_one_line_error_never_ecmp(monkeypatch):
    from core.errors import CapabilityError
    from emu import lbrouter
    from emu.ports import Port

    topo = build_topo("leafspine,2,2,2")
    tables = {s: switch_tables(plan_addresses(topo), compute_routes(topo), s)
              for s in topo.switch_nodes()}
    ports = [Port(s, p.ifname, 1, "/ns", p.peer_node, 400e9, 4e7, 1 << 20, "t", True)
             for s, t in tables.items() for p in t.ports]
    with pytest.raises(CapabilityError, match="adaptive reads each port's queue from the eBPF"):
        lbrouter.install_routers("adaptive", 1000, tables, ports, {}, marking="red")

    def refuse(*_a, **_k):
        raise CapabilityError("the kernel refused the eBPF router (Permission denied):\n"
                              "R1 unbounded memory access")

    monkeypatch.setattr(lbrouter, "compile_router", lambda: "router.o")
    monkeypatch.setattr(lbrouter, "load_object", refuse)
    with pytest.raises(CapabilityError) as err:
        lbrouter.install_routers("spray", 1000, tables, ports, dict.fromkeys(tables), marking="off")
    assert str(err.value) == ("routing=spray needs the eBPF router in every switch: the kernel "
                              "refused the eBPF router (Permission denied):")

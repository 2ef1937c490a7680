"""Link delay planning (emu.delay): dilation, netem's limits, placement, the on/off choice."""

from __future__ import annotations

from itertools import pairwise

import networkx as nx
import pytest

from core.errors import CapabilityError, ParameterError
from core.scaling import Scale
from emu.delay import (
    MIN_FRAME_BYTES,
    NETEM_LIMIT_FLOOR,
    NETEM_LIMIT_MAX,
    NETEM_MAX_DELAY_US,
    NetemOptions,
    choose_delay,
    netem_delay_us,
    netem_limit_packets,
    netem_options,
    parse_delay_request,
    plan_delays,
    port_delay_s,
)
from topologies.addressing import plan_addresses
from topologies.base import FabricTopo
from topologies.spec import build_topo

NETEM_OK = {"ok": True}
NETEM_MISSING = {"ok": False, "why": "the kernel has no sch_netem (netem qdisc)"}


def test_delay_is_dilated_by_s_in_whole_microseconds():
    assert netem_delay_us(0.5e-6, Scale(4000)) == 2000
    assert netem_delay_us(1e-6, Scale(4000)) == 4000
    assert netem_delay_us(0.3e-6, Scale(5)) == 2          # 1.5 µs rounds to 2
    assert netem_delay_us(0.0, Scale(4000)) == 0
    opts = NetemOptions(2000, 5000)
    assert opts.real_delay_s(Scale(4000)) == pytest.approx(0.5e-6)
    assert opts.tc_kwargs() == {"delay": 2000, "limit": 5000}  # pyroute2: delay in µs


def test_delay_below_the_resolution_gives_no_delay_line():
    # 0.3 µs at S = 1 is 0.3 µs emulated: below netem's 1 µs, so no netem at all
    assert netem_delay_us(0.3e-6, Scale(1)) == 0
    assert netem_options(0.3e-6, Scale(1), arrival_rate_emu_bps=1e9, buffer_bytes=10**6) is None
    assert netem_options(0.0, Scale(4000), arrival_rate_emu_bps=1e9, buffer_bytes=10**6) is None


def test_delay_netem_cannot_express_suggests_a_smaller_scale():
    # 100 ms real x S = 4000 = 400 s > ~275 s (2^32-1 ticks of 64 ns)
    with pytest.raises(ParameterError, match=r"scale factor of at most 2748"):
        netem_delay_us(0.1, Scale(4000))
    assert netem_delay_us(NETEM_MAX_DELAY_US * 1e-6, Scale(1)) == NETEM_MAX_DELAY_US
    assert NETEM_MAX_DELAY_US * 15.625 < 2**32  # pyroute2: ticks = µs * 15.625 (u32)


@pytest.mark.parametrize("bad", [-1e-6, float("nan"), float("inf")])
def test_invalid_delay_is_a_parameter_error(bad):
    with pytest.raises(ParameterError, match="delay_s"):
        netem_delay_us(bad, Scale(4000))


def test_limit_holds_the_bdp_plus_the_buffer_in_minimum_frames():
    rate, delay, buf = 400e6, 4e-3, 8 * 2**20
    bdp = rate / 8 * delay  # 200 kB in flight during one delay
    assert netem_limit_packets(rate, delay, buf) == -(-(bdp + buf) // MIN_FRAME_BYTES)
    # the floor (netem's own default) and the u32 cap
    assert netem_limit_packets(1e6, 1e-6, 0) == NETEM_LIMIT_FLOOR
    assert netem_limit_packets(1e15, 1e3, 2**40) == NETEM_LIMIT_MAX
    # the dilation invariant: same real BDP at every S
    s1, s2 = Scale(2000), Scale(8000)
    lim = [netem_options(1e-6, s, arrival_rate_emu_bps=s.rate_emu_bps(1.6e12), buffer_bytes=0).limit
           for s in (s1, s2)]
    assert lim[0] == lim[1] == pytest.approx(1.6e12 / 8 * 1e-6 / MIN_FRAME_BYTES, abs=1)


def test_host_link_delay_sits_on_the_switch_side():
    d = 0.5e-6
    assert port_delay_s(d, node_is_host=True, peer_is_host=False) == 0.0
    assert port_delay_s(d, node_is_host=False, peer_is_host=True) == 2 * d
    assert port_delay_s(d, node_is_host=False, peer_is_host=False) == d
    assert port_delay_s(d, node_is_host=True, peer_is_host=True) == d


@pytest.mark.parametrize("spec", ["leafspine,2,2,2", "fattree,4", "railopt,2,gpus=4", "torus,3,3"])
def test_plan_keeps_every_round_trip_and_host_to_host_one_way_delay(spec):
    topo, scale = build_topo(spec), Scale(4000)
    dp = plan_delays(topo, plan_addresses(topo), scale)
    assert not dp.notes
    hosts = set(topo.host_nodes())
    for a, b in topo.links():
        want = topo.linkInfo(a, b)["delay_s"]
        both = dp.delay_s.get((a, b), 0.0) + dp.delay_s.get((b, a), 0.0)
        assert both == pytest.approx(2 * want)               # RTT over the link is exact
        for node, peer in ((a, b), (b, a)):
            if node in hosts:
                assert (node, peer) not in dp.netem          # the NIC keeps its push-back
            else:
                assert dp.netem[(node, peer)].delay_us == round(dp.delay_s[(node, peer)] * 4000e6)
    # one way, host to host along a shortest path: the topology's sum
    g = nx.Graph(list(topo.links()))
    src, dst = sorted(hosts)[0], sorted(hosts)[-1]
    path = nx.shortest_path(g, src, dst)
    one_way = sum(dp.delay_s.get(hop, 0.0) for hop in pairwise(path))
    assert one_way == pytest.approx(sum(topo.linkInfo(a, b)["delay_s"] for a, b in pairwise(path)))


class _Tiny(FabricTopo):
    """h1 - sw - h2 at 1 Gb/s with 0.2 µs links (emulable at S = 1)."""

    def build(self, delay_s: float = 0.2e-6):
        self.add_host("h1")
        self.add_host("h2")
        self.add_switch("sw", "leaf", 1)
        for h in ("h1", "h2"):
            self.add_link(h, "sw", rate_bps=1e9, delay_s=delay_s, tier="host-leaf")


def test_plan_notes_delays_too_fine_for_netem():
    topo = _Tiny(delay_s=0.2e-6)  # 0.4 µs on the switch side at S = 1: rounds to 0
    dp = plan_delays(topo, plan_addresses(topo), Scale(1))
    assert not dp.netem and not dp.delay_s
    assert len(dp.notes) == 1 and "2 port(s)" in dp.notes[0] and "1 µs resolution" in dp.notes[0]
    topo = _Tiny(delay_s=0.7e-6)  # 1.4 µs -> 1 µs: emulated, with the rounding noted
    dp = plan_delays(topo, plan_addresses(topo), Scale(1))
    assert dp.delay_s[("sw", "h1")] == pytest.approx(1e-6)
    assert dp.notes and "off by up to 28.6%" in dp.notes[0]


@pytest.mark.parametrize("value,choice", [(True, "on"), (False, "off"), ("auto", "auto"),
                                          ("ON", "on"), ("off", "off"), ("yes", "on")])
def test_parse_delay_request(value, choice):
    assert parse_delay_request(value) == choice


@pytest.mark.parametrize("bad", ["sometimes", 2, None])
def test_parse_delay_request_rejects(bad):
    with pytest.raises(ParameterError, match="delay"):
        parse_delay_request(bad)


def test_choose_delay():
    assert choose_delay("auto", NETEM_OK) == (True, "netem, dilated by S")
    on, why = choose_delay("auto", NETEM_MISSING)
    assert not on and "no sch_netem" in why
    assert choose_delay(False, NETEM_MISSING) == (False, "off (requested)")
    assert choose_delay("off", NETEM_OK)[0] is False
    assert choose_delay(True, NETEM_OK)[0] is True
    with pytest.raises(CapabilityError, match="sch_netem"):
        choose_delay(True, NETEM_MISSING)


class _FakeFabric:
    """What model_graph reads from a fabric."""

    def __init__(self, topo, emulated: bool):
        self.topo = topo
        self.emulated = emulated
        self.dp = plan_delays(topo, plan_addresses(topo), Scale(4000))

    def summary(self) -> dict:
        return {"delay_emulated": self.emulated}

    def link_delay_s(self, a: str, b: str) -> float:
        return (self.dp.delay_s.get((a, b), 0.0) + self.dp.delay_s.get((b, a), 0.0)) / 2


@pytest.mark.parametrize("emulated", [True, False])
def test_model_graph_prices_the_real_fabric_with_or_without_netem(emulated):
    """The model keeps the topology's propagation and switch latency whether or not
    the fabric emulates them (what it does not emulate is a reported deviation)."""
    from experiments.measure import model_graph

    topo = build_topo("leafspine,2,2,1")
    graph = model_graph(_FakeFabric(topo, emulated))
    for a, b, data in graph.edges(data=True):
        assert data["delay_s"] > 0
        assert data["delay_s"] == pytest.approx(topo.linkInfo(a, b)["delay_s"])
    for node in topo.switch_nodes():
        assert graph.nodes[node]["switch_latency_s"] == pytest.approx(600e-9)


class _RecordingIPRoute:
    """Stands in for pyroute2's IPRoute: records tc calls (no netlink, no root)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def tc(self, command: str, kind: str, index: int, handle: int, **kwargs) -> None:
        self.calls.append((command, kind, handle, kwargs.get("parent"), kwargs))


@pytest.mark.parametrize("leaf", ["bfifo", "red"])
def test_shape_port_puts_netem_at_the_root_over_the_unchanged_htb_tree(leaf):
    from pyroute2.netlink.rtnl import TC_H_ROOT
    from pyroute2.netlink.rtnl.tcmsg import sched_netem

    from emu.shaping import CLASS_HANDLE, DELAY_HANDLE, HTB_HANDLE, LEAF_HANDLE, shape_port

    plain, delayed = _RecordingIPRoute(), _RecordingIPRoute()
    opts = NetemOptions(4000, 132635)
    leaf_options = {"limit": 10**6} if leaf == "red" else None
    shape_port(plain, 7, 100e6, 10**6, leaf=leaf, leaf_options=leaf_options)
    shape_port(delayed, 7, 100e6, 10**6, leaf=leaf, leaf_options=leaf_options, delay=opts)
    command, kind, handle, parent, kwargs = delayed.calls[0]
    assert (command, kind, handle, parent) == ("add", "netem", DELAY_HANDLE, None)  # root
    assert kwargs == {"delay": 4000, "limit": 132635}
    assert [c[:3] for c in delayed.calls[1:]] == [c[:3] for c in plain.calls] == [
        ("add", "htb", HTB_HANDLE), ("add-class", "htb", CLASS_HANDLE), ("add", leaf, LEAF_HANDLE)]
    assert plain.calls[0][3] == TC_H_ROOT
    assert delayed.calls[1][3] == DELAY_HANDLE | 1          # HTB is netem's child
    assert delayed.calls[3][3] == plain.calls[2][3] == CLASS_HANDLE
    # pyroute2's netem plugin turns whole µs into 64 ns psched ticks
    qopt = sched_netem.get_parameters(opts.tc_kwargs())
    assert int(qopt["delay"]) == 4000 * 1000 // 64 and qopt["limit"] == 132635

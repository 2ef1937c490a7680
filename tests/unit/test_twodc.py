"""Two data centres over a long link (topologies.twodc) and the collective's wan option."""

from __future__ import annotations

import pytest

from core.errors import ParameterError
from core.scaling import Scale
from emu.delay import plan_delays
from experiments import collective
from topologies.addressing import plan_addresses
from topologies.routing import compute_routes, topo_graph
from topologies.spec import topo_size
from topologies.twodc import (
    GATEWAY_TIER,
    WAN_TIER,
    TwoDcs,
    WanLink,
    parse_distance_m,
    parse_wan,
    two_dcs,
)
from traffic.fixeddelay import path_delay


@pytest.mark.parametrize("spec", ["leafspine,2,2,2", "fattree,4", "railopt,2,gpus=4",
                                  "dragonfly,p=2,a=2,h=1"])
def test_two_copies_plus_two_gateways_one_uplink_per_top_switch_and_the_long_link(spec):
    inner = topo_size(spec)
    topo = two_dcs(spec, WanLink(100e3))
    top = len({a for a, b, info in topo.fabric_links() if info["tier"] == GATEWAY_TIER})
    assert len(topo.host_nodes()) == 2 * inner.hosts
    assert len(topo.switch_nodes()) == 2 * inner.switches + 2
    assert len(topo.links()) == 2 * inner.links + top + 1
    assert TwoDcs.size(spec, WanLink(100e3)).links == len(topo.links())


def test_leafspine_counts_by_hand():
    topo = two_dcs("leafspine,2,2,2", WanLink(100e3))
    # per DC 4 hosts, 2 leaves + 2 spines, 4 host links + 4 leaf-spine links;
    # each gateway to the DC's 2 spines; one long link
    assert (len(topo.host_nodes()), len(topo.switch_nodes()), len(topo.links())) == (8, 10, 21)
    assert topo.host_nodes() == ["ah1", "ah2", "ah3", "ah4", "bh1", "bh2", "bh3", "bh4"]
    assert [topo.nodeInfo(h)["dc"] for h in topo.host_nodes()] == [0] * 4 + [1] * 4


def test_the_long_link_is_5_us_per_km_at_its_rate_and_buffer():
    topo = two_dcs("leafspine,2,1,2", parse_wan("100km,rate=100G,buffer=64MB"))
    (info,) = [i for *_, i in topo.fabric_links() if i["tier"] == WAN_TIER]
    assert info["delay_s"] == pytest.approx(500e-6)
    assert info["rate_bps"] == 100e9
    assert info["buffer_bytes"] == 64_000_000


def test_inter_dc_paths_cross_the_long_link_once_and_intra_dc_paths_never():
    for spec in ("leafspine,2,2,2", "dragonfly,p=2,a=2,h=1"):
        topo = two_dcs(spec, WanLink(100e3))
        routes = compute_routes(topo)
        hosts = topo.host_nodes()
        half = len(hosts) // 2
        for path in routes.paths(hosts[0], hosts[-1]):
            assert sum(n in ("gwa", "gwb") for n in path) == 2
        for dst in hosts[1:half]:
            for path in routes.paths(hosts[0], dst):
                assert not {"gwa", "gwb"} & set(path), path


def test_the_dilated_delay_of_both_realisations():
    topo = two_dcs("leafspine,1,1,1", WanLink(10e3))
    graph, routes = topo_graph(topo), compute_routes(topo)
    (path,) = routes.paths("ah1", "bh1")
    # what the engine adds where netem is missing: 50 us of fibre + 1.33 us of cables
    assert path_delay(graph, path, 4096).propagation_s == pytest.approx(51.33e-6)
    # where netem exists: the long link's own delay line, dilated by S (whole us)
    delays = plan_delays(topo, plan_addresses(topo), Scale(10_000))
    assert delays.netem[("gwa", "gwb")].delay_us == 500_000
    assert delays.delay_s[("gwb", "gwa")] == pytest.approx(50e-6)


def test_ports_keep_their_meaning():
    topo = two_dcs("railopt,2,gpus=4", WanLink(10e3))
    plan = plan_addresses(topo)
    assert plan.iface("ah1g0", "ar0").ifname == "ah1g0-eth0"   # a GPU's NIC is eth0


@pytest.mark.parametrize("text", ["100", "-5km", "0km", "1e9km", "abckm", "100km,foo=1",
                                  "100km,rate=abc", "100km,rate", "100km,buffer=-1"])
def test_bad_wan_texts_are_one_line_errors(text):
    with pytest.raises(ParameterError):
        parse_wan(text)


def test_wan_texts():
    assert parse_wan("off") is None
    assert parse_distance_m("2500m") == 2500.0
    assert parse_wan("100km") == WanLink(100e3)
    assert parse_wan("100km,rate=400G").rate_bps == 400e9


def test_a_torus_cannot_be_joined():
    with pytest.raises(ParameterError, match="ECMP"):
        two_dcs("torus,2,2", WanLink(1e3))


def test_the_collective_option_wraps_each_fabric_and_groups_hier_by_dc():
    assert collective.parse_wan_text(" off ") == "off"
    assert collective.parse_wan_text("100km,rate=400G") == "100km,rate=400G"
    topo = collective.fabric_topo("leafspine,2,1,2", "100km")
    assert isinstance(topo, TwoDcs)
    groups = collective.servers_of(topo, compute_routes(topo))
    assert groups == [0] * 4 + [1] * 4
    wl = collective.build_workload(topo, compute_routes(topo), "allreduce-hier", 1 << 20)
    assert wl.meta["algorithm"] == "hierarchical (2 servers x 4 GPUs)"
    # only the all-reduce between the DCs crosses: 4 pairs, 2 steps, both ways
    assert sum(m.src[0] != m.dst[0] for m in wl.messages) == 16
    with pytest.raises(ParameterError):
        collective.check_fabrics(["torus,2,2"], 10_000, "100km")

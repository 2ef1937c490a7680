"""Address plan: host IPs, /31 per link, MACs, interface names."""

from __future__ import annotations

import ipaddress

import pytest

from core.errors import ParameterError
from topologies import addressing
from topologies.addressing import interface_name, plan_addresses
from topologies.base import FabricTopo
from topologies.dragonfly import Dragonfly
from topologies.fattree import FatTree, LeafSpine
from topologies.railopt import RailOptimized
from topologies.torus import Torus

TOPOS = [FatTree(4), LeafSpine(3, 2, 2), RailOptimized(2, 4), Dragonfly(1, 2, 1), Torus(3, 3)]


@pytest.mark.parametrize("topo", TOPOS, ids=lambda t: t.family)
def test_addresses_unique_and_peers_consistent(topo):
    plan = plan_addresses(topo)
    every = [i for node in topo.nodes() for i in plan.interfaces[node]]
    assert len(every) == 2 * len(topo.links())
    ips = [i.ip for i in every] + list(plan.host_ip.values())
    assert len(set(ips)) == len(ips)
    assert len({i.mac for i in every}) == len(every)
    assert all(ipaddress.ip_address(i.ip) in ipaddress.ip_network("10.128.0.0/9") for i in every)
    for i in every:
        peer = plan.iface(i.peer_node, i.node)
        assert (peer.peer_node, peer.peer_ip, peer.peer_mac, peer.peer_ifname) == (
            i.node, i.ip, i.mac, i.ifname)
        net = ipaddress.ip_interface(f"{i.ip}/{i.prefixlen}").network
        assert i.prefixlen == 31 and ipaddress.ip_address(i.peer_ip) in net
        assert int(i.mac.split(":")[0], 16) & 0b11 == 0b10  # locally administered unicast
        info = topo.linkInfo(i.node, i.peer_node)
        assert (i.rate_bps, i.delay_s, i.buffer_bytes, i.tier) == (
            info["rate_bps"], info["delay_s"], info["buffer_bytes"], info["tier"])
        assert i.port == topo.port(i.node, i.peer_node)[0]
        assert i.ifname == f"{i.node}-eth{i.port}"


def test_host_ips_sequential_and_reverse_map():
    topo = FatTree(4)
    plan = plan_addresses(topo)
    assert plan.host_ip["h1"] == "10.0.0.1"
    assert plan.host_ip["h16"] == "10.0.0.16"
    assert [plan.host_ip[h] for h in topo.hosts()] == [f"10.0.0.{i}" for i in range(1, 17)]
    assert {plan.host_by_ip[ip]: ip for ip in plan.host_by_ip} == plan.host_ip


def test_interfaces_in_port_order_and_iface_lookup():
    plan = plan_addresses(FatTree(4))
    assert [i.port for i in plan.interfaces["e1"]] == [1, 2, 3, 4]
    assert [i.peer_node for i in plan.interfaces["e1"]] == ["h1", "h2", "a1", "a2"]
    assert plan.iface("h1", "e1").ifname == "h1-eth0"
    with pytest.raises(KeyError):
        plan.iface("h1", "e2")


def test_plan_is_deterministic():
    assert plan_addresses(Dragonfly(1, 2, 1)) == plan_addresses(Dragonfly(1, 2, 1))


class _LongNames(FabricTopo):
    def build(self):
        self.add_host("a-very-long-host")
        self.add_switch("sw", "leaf", 1)
        self.add_link("a-very-long-host", "sw", rate_bps=1e9, delay_s=0, tier="host-leaf")


def test_long_interface_names_fall_back_to_eth_port():
    assert interface_name("h1", 0) == "h1-eth0"
    assert interface_name("abcdefghij", 10) == "eth10"  # 'abcdefghij-eth10' is 16 chars
    plan = plan_addresses(_LongNames())
    assert plan.iface("a-very-long-host", "sw").ifname == "eth0"
    assert plan.iface("sw", "a-very-long-host").peer_ifname == "eth0"


def test_overflow_is_a_parameter_error(monkeypatch):
    monkeypatch.setattr(addressing, "HOST_NET", ipaddress.IPv4Network("10.0.0.0/28"))
    with pytest.raises(ParameterError, match="hosts"):
        plan_addresses(FatTree(4))  # 16 hosts, 14 addresses
    monkeypatch.setattr(addressing, "HOST_NET", ipaddress.IPv4Network("10.0.0.0/16"))
    monkeypatch.setattr(addressing, "LINK_NET", ipaddress.IPv4Network("10.128.0.0/27"))
    with pytest.raises(ParameterError, match="links"):
        plan_addresses(LeafSpine(4, 2, 4))  # 24 links, 16 /31s
    plan_addresses(LeafSpine(2, 2, 2))  # 8 links fit

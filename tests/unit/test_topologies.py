"""Topology graphs: sizes, degrees, per-tier rates, parameter errors, loading."""

from __future__ import annotations

import itertools
import os
import runpy
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from core.errors import ParameterError
from topologies.dragonfly import Dragonfly
from topologies.fattree import FatTree, LeafSpine
from topologies.railopt import RailOptimized
from topologies.spec import build_topo, registry
from topologies.torus import Torus

REPO = Path(__file__).resolve().parents[2]
TOPO_FILES = ["fattree", "railopt", "dragonfly", "torus"]


def roles(topo) -> Counter:
    return Counter(topo.role(n) for n in topo.nodes())


def tier_rates(topo) -> dict[str, set[float]]:
    rates: dict[str, set[float]] = {}
    for _, _, info in topo.links(withInfo=True):
        rates.setdefault(info["tier"], set()).add(info["rate_bps"])
    return rates


def degree(topo, node) -> int:
    return sum(node in link for link in topo.links())


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fattree_sizes_and_degrees(k):
    topo = FatTree(k)
    half = k // 2
    assert roles(topo) == {"host": k**3 // 4, "edge": k * half, "agg": k * half,
                           "core": half * half}
    assert len(topo.links()) == k**3 // 4 + 2 * k * half * half
    assert all(degree(topo, s) == k for s in topo.switches())
    assert all(degree(topo, h) == 1 for h in topo.hosts())
    # every core reaches every pod exactly once
    for core in (n for n in topo.nodes() if topo.role(n) == "core"):
        pods = [topo.nodeInfo(peer)["pod"] for link in topo.links() if core in link
                for peer in link if peer != core]
        assert sorted(pods) == list(range(k))


def test_fattree_tier_rates_default_and_override():
    assert tier_rates(FatTree(4)) == {"host-edge": {400e9}, "edge-agg": {800e9},
                                      "agg-core": {1.6e12}}
    topo = FatTree(4, host_rate="100G", fabric_rate=200e9, core_rate="1T")
    assert tier_rates(topo) == {"host-edge": {100e9}, "edge-agg": {200e9}, "agg-core": {1e12}}
    assert topo.params() == {"k": 4, "host_rate": 100e9, "fabric_rate": 200e9,
                             "core_rate": 1e12}


@pytest.mark.parametrize("kwargs, name", [
    ({"k": 3}, "k"), ({"k": 0}, "k"), ({"k": 1}, "k"), ({"k": 4.5}, "k"), ({"k": "four"}, "k"),
    ({"k": 4, "host_rate": 0}, "host_rate"), ({"k": 4, "fabric_rate": "-1G"}, "fabric_rate"),
    ({"k": 4, "core_rate": "fast"}, "core_rate"),
])
def test_fattree_parameter_errors(kwargs, name):
    with pytest.raises(ParameterError) as err:
        FatTree(**kwargs)
    assert err.value.name == name


@pytest.mark.parametrize("leaves, spines, hpl", [(1, 1, 1), (4, 2, 4), (3, 5, 2)])
def test_leafspine_sizes(leaves, spines, hpl):
    topo = LeafSpine(leaves, spines, hpl)
    assert roles(topo) == {"host": leaves * hpl, "leaf": leaves, "spine": spines}
    assert all(degree(topo, n) == hpl + spines for n in topo.nodes() if topo.role(n) == "leaf")
    assert all(degree(topo, n) == leaves for n in topo.nodes() if topo.role(n) == "spine")


def test_leafspine_uplink_rate_rule():
    # host bandwidth / uplink bandwidth = oversub
    assert tier_rates(LeafSpine(4, 2, 4)) == {"host-leaf": {400e9}, "leaf-spine": {800e9}}
    assert tier_rates(LeafSpine(4, 2, 8, oversub=2))["leaf-spine"] == {800e9}
    assert tier_rates(LeafSpine(4, 4, 8, oversub=4))["leaf-spine"] == {200e9}
    explicit = LeafSpine(4, 2, 8, fabric_rate="400G")
    assert tier_rates(explicit)["leaf-spine"] == {400e9}
    assert explicit.params()["oversub"] == 4.0


@pytest.mark.parametrize("kwargs, name", [
    ({"oversub": 0}, "oversub"), ({"oversub": -2}, "oversub"), ({"oversub": "x"}, "oversub"),
    ({"oversub": 2, "fabric_rate": "800G"}, "oversub"), ({"leaves": 0}, "leaves"),
    ({"spines": 1.5}, "spines"), ({"hosts_per_leaf": 0}, "hosts_per_leaf"),
    ({"fabric_rate": 0}, "fabric_rate"),
])
def test_leafspine_parameter_errors(kwargs, name):
    with pytest.raises(ParameterError) as err:
        LeafSpine(**kwargs)
    assert err.value.name == name


@pytest.mark.parametrize("servers, gpus, nvlink", [(2, 8, True), (3, 4, False), (1, 2, True)])
def test_railopt_structure(servers, gpus, nvlink):
    topo = RailOptimized(servers, gpus, nvlink=nvlink)
    spines = topo.params()["spines"]
    expected = {"host": servers * gpus, "leaf": gpus, "spine": spines}
    if nvlink:
        expected["nvswitch"] = servers
    assert roles(topo) == expected
    for host in topo.hosts():
        info = topo.nodeInfo(host)
        peers = {peer for link in topo.links() if host in link for peer in link if peer != host}
        rail = {p for p in peers if topo.role(p) == "leaf"}
        assert rail == {f"r{info['gpu']}"}
        assert len(peers) == (2 if nvlink else 1)
        if nvlink:
            assert f"nv{info['server']}" in peers
            assert topo.linkInfo(host, f"nv{info['server']}")["rate_bps"] == 3.6e12
    assert all(degree(topo, f"r{g}") == servers + spines for g in range(gpus))


def test_railopt_spine_default_and_rates():
    assert RailOptimized(4, 8).params()["spines"] == 2  # 4 x 400G down = 2 x 800G up
    assert RailOptimized(5, 8).params()["spines"] == 3
    assert RailOptimized(4, 8, spines=1).params()["spines"] == 1
    topo = RailOptimized(2, 2, nvlink_rate="1.8T", host_rate="200G")
    assert tier_rates(topo) == {"host-leaf": {200e9}, "nvlink": {1.8e12},
                                "leaf-spine": {800e9}}
    assert RailOptimized(2, 2, nvlink="False").params()["nvlink"] is False


@pytest.mark.parametrize("kwargs, name", [
    ({"servers": 0}, "servers"), ({"gpus": 0}, "gpus"), ({"spines": 0}, "spines"),
    ({"nvlink": "maybe"}, "nvlink"), ({"nvlink_rate": -1}, "nvlink_rate"),
])
def test_railopt_parameter_errors(kwargs, name):
    with pytest.raises(ParameterError) as err:
        RailOptimized(**kwargs)
    assert err.value.name == name


def group_links(topo) -> Counter:
    counts: Counter = Counter()
    for a, b, info in topo.links(withInfo=True):
        if info["tier"] == "global":
            counts[frozenset((topo.nodeInfo(a)["group"], topo.nodeInfo(b)["group"]))] += 1
    return counts


@pytest.mark.parametrize("p, a, h", [(1, 2, 1), (2, 4, 2), (1, 3, 2), (2, 2, 3)])
def test_dragonfly_full_size_one_link_per_group_pair(p, a, h):
    topo = Dragonfly(p, a, h)
    g = a * h + 1
    assert topo.params()["g"] == g
    assert roles(topo) == {"host": g * a * p, "router": g * a}
    assert all(degree(topo, r) == p + a - 1 + h for r in topo.switches())
    assert group_links(topo) == {frozenset(pair): 1 for pair in itertools.combinations(range(g), 2)}
    assert tier_rates(topo) == {"host-router": {400e9}, "local": {800e9}, "global": {800e9}}


@pytest.mark.parametrize("p, a, h, g", [(1, 4, 2, 5), (1, 4, 2, 4), (1, 4, 2, 3), (1, 2, 1, 2),
                                        (1, 3, 3, 4), (2, 6, 2, 6)])
def test_dragonfly_fewer_groups_spread_evenly(p, a, h, g):
    topo = Dragonfly(p, a, h, g)
    counts = group_links(topo)
    assert set(counts) == {frozenset(pair) for pair in itertools.combinations(range(g), 2)}
    assert max(counts.values()) - min(counts.values()) <= 1
    assert sum(counts.values()) == (g * a * h) // 2
    topo.fabric_links()  # no two routers joined twice
    global_degree = Counter(n for a_, b_, info in topo.links(withInfo=True)
                            if info["tier"] == "global" for n in (a_, b_))
    assert max(global_degree.values()) == h


def test_dragonfly_rates_override():
    topo = Dragonfly(1, 2, 1, local_rate="400G", global_rate="1.6T", host_rate=100e9)
    assert tier_rates(topo) == {"host-router": {100e9}, "local": {400e9}, "global": {1.6e12}}


@pytest.mark.parametrize("args, name", [
    ((1, 2, 1, 4), "g"), ((1, 2, 2, 1), "g"), ((1, 2, 3, 3), "g"), ((0, 2, 1), "p"),
    ((1, 0, 1), "a"), ((1, 2, 0), "h"), ((1, 2, 1.5), "h"),
])
def test_dragonfly_parameter_errors(args, name):
    with pytest.raises(ParameterError) as err:
        Dragonfly(*args)
    assert err.value.name == name


@pytest.mark.parametrize("dims, hpn", [((4, 4), 1), ((3, 3, 3), 2), ((2, 2), 1), ((2, 5, 3), 1)])
def test_torus_structure(dims, hpn):
    topo = Torus(*dims, hosts_per_node=hpn)
    nodes = [n for n in topo.nodes() if topo.role(n) == "torus"]
    count = 1
    for size in dims:
        count *= size
    assert len(nodes) == count and len(topo.hosts()) == count * hpn
    per_axis = [2 if size >= 3 else 1 for size in dims]
    assert all(degree(topo, n) == hpn + sum(per_axis) for n in nodes)
    links = Counter(info["tier"] for _, _, info in topo.links(withInfo=True))
    for axis, size in enumerate(dims):
        assert links[f"torus-{'xyz'[axis]}"] == count * (1 if size >= 3 else 0.5)
    assert {topo.nodeInfo(n)["coord"] for n in nodes} == set(
        itertools.product(*(range(s) for s in dims)))
    assert Torus.routing == "dor"


@pytest.mark.parametrize("dims, kwargs, name", [
    ((4,), {}, "dims"), ((2, 2, 2, 2), {}, "dims"), ((), {}, "dims"), ((4, 1), {}, "dims[1]"),
    ((4, 4), {"hosts_per_node": 0}, "hosts_per_node"), ((4, 4), {"link_rate": 0}, "link_rate"),
])
def test_torus_parameter_errors(dims, kwargs, name):
    with pytest.raises(ParameterError) as err:
        Torus(*dims, **kwargs)
    assert err.value.name == name


@pytest.mark.parametrize("topo", [
    FatTree(16), LeafSpine(32, 16, 32), RailOptimized(64, 8), Dragonfly(4, 8, 4),
    Torus(10, 10, 10),
], ids=lambda t: t.family)
def test_interface_names_fit_and_dpids_unique(topo):
    for a, b, info in topo.links(withInfo=True):
        assert len(f"{a}-eth{info['port1']}") <= 15
        assert len(f"{b}-eth{info['port2']}") <= 15
    dpids = [topo.nodeInfo(s)["dpid"] for s in topo.switches()]
    assert len(set(dpids)) == len(dpids)


def test_registry_and_build_topo():
    assert set(registry()) >= {"fattree", "leafspine", "railopt", "dragonfly", "torus"}
    assert build_topo("fattree,4").params()["k"] == 4
    topo = build_topo("leafspine,4,2,8,oversub=2,host_rate=400G")
    assert topo.params()["fabric_rate"] == 800e9
    assert build_topo("torus,3,3,3").dims == (3, 3, 3)


@pytest.mark.parametrize("spec, fragment", [
    ("nosuch,4", "known: dragonfly, fattree"),
    ("fattree,4,5,6,7,8", "fattree,k=4,host_rate=400G"),
    ("fattree,4,speed=1", "unexpected keyword"),
    ("fattree,5", "must be even"),
])
def test_build_topo_errors(spec, fragment):
    with pytest.raises(ParameterError, match=fragment):
        build_topo(spec)


@pytest.mark.parametrize("name", TOPO_FILES)
def test_topology_file_runs_standalone(name):
    namespace = runpy.run_path(str(REPO / "topologies" / f"{name}.py"))
    assert namespace["topos"]
    assert all(namespace["topos"][key].family == key for key in namespace["topos"])


@pytest.mark.skipif(subprocess.run(["/usr/bin/python3", "-c", "import mininet"],
                                   capture_output=True).returncode != 0,
                    reason="/usr/bin/python3 has no Mininet")
def test_topologies_load_like_mn_custom(tmp_path):
    """mn --custom exec()s topologies/mn.py with the system Python, from any cwd, no __file__."""
    script = (
        "import sys\nfrom mininet.util import buildTopo\n"
        "customs = {}\n"
        "exec(compile(open(sys.argv[1]).read(), sys.argv[1], 'exec'), customs, customs)\n"
        "for spec in sys.argv[2:]:\n"
        "    print(len(buildTopo(customs['topos'], spec).hosts()))\n")
    specs = ["fattree,4", "railopt,2,4", "dragonfly,1,2,1", "torus,3,3", "leafspine,2,2,3"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(["/usr/bin/python3", "-I", "-c", script, str(REPO / "topologies" / "mn.py"),
                          *specs], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["16", "8", "6", "9", "6"]


def test_every_topology_file_is_registered():
    """A file that defines ``topos`` but is missing from FABRIC_MODULES would be invisible."""
    import ast

    from topologies.spec import FABRIC_MODULES

    defines = sorted(p.stem for p in (REPO / "topologies").glob("*.py")
                     if any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "topos"
                                                              for t in n.targets)
                            for n in ast.parse(p.read_text()).body) and p.stem != "mn")
    assert defines == sorted(FABRIC_MODULES)

"""Topology sizes are computed from the parameters, and caps refuse a huge topology
before any graph is built."""

from __future__ import annotations

import inspect
import itertools

import pytest

from core.errors import ParameterError
from topologies.base import MAX_HOSTS, MAX_LINKS, MAX_SWITCHES, FabricTopo
from topologies.spec import build_topo, registry, topo_size

SPECS = [
    *(f"fattree,{k}" for k in (2, 4, 6, 8)),
    "fattree,4,400G,400G",
    *(f"leafspine,{leaves},{spines},{hpl}" for leaves, spines, hpl
      in itertools.product((1, 3), (1, 2), (1, 4))),
    "leafspine,2,2,2,oversub=2",
    *(f"torus,{','.join(map(str, dims))},hosts_per_node={hpn}" for dims, hpn in
      (((2, 2), 1), ((3, 3), 2), ((2, 5, 3), 1), ((4, 4, 4), 1), ((2, 2, 2), 3))),
    *(f"dragonfly,p={p},a={a},h={h}" for p, a, h in ((1, 2, 1), (2, 4, 2), (1, 3, 3))),
    *(f"dragonfly,p=1,a={a},h={h},g={g}" for a, h, g in
      ((4, 2, 5), (4, 2, 4), (4, 2, 3), (3, 3, 4), (3, 1, 3), (5, 3, 6), (5, 3, 8), (3, 3, 5),
       (7, 1, 4), (5, 1, 6))),
    *(f"railopt,{s},gpus={g},nvlink={nv}" for s, g, nv in
      itertools.product((1, 3), (2, 4), (True, False))),
    "railopt,2,gpus=4,spines=3", "railopt,5,gpus=2,host_rate=800G,fabric_rate=400G",
]


@pytest.mark.parametrize("spec", SPECS)
def test_size_from_parameters_matches_the_built_graph(spec):
    size = topo_size(spec)
    topo = build_topo(spec)
    assert (size.hosts, size.switches, size.links) == (
        len(topo.host_nodes()), len(topo.switch_nodes()), len(topo.links()))


def test_every_registered_topology_computes_its_size():
    for name, cls in registry().items():
        assert cls.size.__func__ is not FabricTopo.size.__func__, name


def test_a_topology_without_size_is_checked_once_built():
    class Star(FabricTopo):
        family = "star"

        def build(self, n: int = 2) -> None:
            hub = self.add_switch("s1", "leaf", 1)
            for i in range(n):
                self.add_link(self.add_host(f"h{i + 1}"), hub, rate_bps=1e9, delay_s=0.0,
                              tier="host-leaf")

    assert len(Star(3).host_nodes()) == 3
    with pytest.raises(ParameterError) as err:
        Star(MAX_HOSTS + 1)
    assert err.value.name == "hosts"


@pytest.mark.parametrize("spec, name", [
    ("fattree,64", "hosts"), ("fattree,10000", "hosts"), ("fattree,k=1000000000000", "hosts"),
    ("torus,1000,1000", "hosts"), ("torus,2,2,hosts_per_node=100000000", "hosts"),
    ("torus,40,40,hosts_per_node=1", "switches"),
    ("dragonfly,a=100000,h=100000", "hosts"), ("dragonfly,p=1,a=40,h=1", "switches"),
    ("railopt,100000", "hosts"), ("leafspine,1000,1000,1", "switches"),
    ("leafspine,50,200,1", "links"),
])
def test_caps_refuse_before_building(spec, name, monkeypatch):
    for cls in registry().values():
        monkeypatch.setattr(cls, "build", _never_built(cls.build))
    with pytest.raises(ParameterError) as err:
        build_topo(spec)
    assert err.value.name == name
    with pytest.raises(ParameterError):
        topo_size(spec)


def _never_built(build):
    def fail(self, *args, **kwargs):
        raise AssertionError("the graph was built before the size check")
    fail.__signature__ = inspect.signature(build)  # build_topo binds to it
    return fail


def test_caps_are_reachable_but_not_exceeded():
    at_cap = topo_size("torus,32,32")
    assert at_cap.switches == MAX_SWITCHES
    assert topo_size("fattree,20").hosts <= MAX_HOSTS
    assert topo_size("leafspine,2,2,2").links <= MAX_LINKS


@pytest.mark.parametrize("spec, name", [
    ("fattree,3", "k"), ("fattree,1e400", "k"), ("fattree,nan", "k"), ("fattree,,4", "k"),
    ("torus,4", "dims"), ("dragonfly,a=0", "a"), ("railopt,0", "servers"),
])
def test_size_raises_the_parameter_errors_of_build(spec, name):
    with pytest.raises(ParameterError) as err:
        topo_size(spec)
    assert err.value.name == name


@pytest.mark.parametrize("spec", ["", "  ", "nosuch,4", "fattree,=4", "fattree,4,5,6,7,8"])
def test_bad_specs(spec):
    with pytest.raises(ParameterError):
        topo_size(spec)

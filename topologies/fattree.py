"""Clos fabrics: the k-ary three-tier fat-tree and the two-tier leaf-spine.

Names (short, so that ``<node>-eth<port>`` fits Linux's 15 characters):
hosts ``h1..hN``; fat-tree edge ``e1..``, aggregation ``a1..``, core ``c1..``;
leaf-spine leaves ``l1..`` and spines ``s1..``. Pods and indices in node info
count from 0. Ports: hosts first on every switch, then uplinks, in index order.
"""

from __future__ import annotations

from core.errors import ParameterError
from core.units import MAX_RATE_BPS, MIN_RATE_BPS, format_rate
from topologies.base import (
    CORE_LINK_DELAY_S,
    FABRIC_LINK_DELAY_S,
    HOST_LINK_DELAY_S,
    LEAF_SPINE_RATE_BPS,
    NIC_RATE_BPS,
    SPINE_CORE_RATE_BPS,
    FabricTopo,
    Rate,
    TopoSize,
    require_int,
    require_positive,
    require_rate,
)


class FatTree(FabricTopo):
    """k-ary fat-tree (Al-Fares et al. 2008): k pods of k/2 edge + k/2 aggregation
    switches, (k/2)^2 cores, k^3/4 hosts (k/2 per edge switch).

    Aggregation switch j of every pod connects to cores j*k/2 .. j*k/2 + k/2 - 1.
    Rates: host-edge ``host_rate`` (400G), edge-agg ``fabric_rate`` (800G),
    agg-core ``core_rate`` (1.6T).
    """

    family = "fattree"

    @staticmethod
    def _k(k: object) -> int:
        k = require_int("k", k, minimum=2)
        if k % 2:
            raise ParameterError("k", k, "must be even")
        return k

    @classmethod
    def size(cls, k: int = 4, **_rates: object) -> TopoSize:
        k = cls._k(k)
        return TopoSize(hosts=k**3 // 4, switches=k * k + k * k // 4, links=3 * k**3 // 4)

    def build(self, k: int = 4, host_rate: Rate = NIC_RATE_BPS,
              fabric_rate: Rate = LEAF_SPINE_RATE_BPS,
              core_rate: Rate = SPINE_CORE_RATE_BPS) -> None:
        k = self._k(k)
        host_bps = require_rate("host_rate", host_rate)
        fabric_bps = require_rate("fabric_rate", fabric_rate)
        core_bps = require_rate("core_rate", core_rate)
        self._params = {"k": k, "host_rate": host_bps, "fabric_rate": fabric_bps,
                        "core_rate": core_bps}
        half = k // 2
        cores = [self.add_switch(f"c{i + 1}", "core", 3, index=i) for i in range(half * half)]
        host_count = 0
        for pod in range(k):
            edges = []
            for e in range(half):
                edge = self.add_switch(f"e{pod * half + e + 1}", "edge", 1, pod=pod, index=e)
                edges.append(edge)
                for _ in range(half):
                    host_count += 1
                    host = self.add_host(f"h{host_count}", pod=pod, edge=edge)
                    self.add_link(host, edge, rate_bps=host_bps, delay_s=HOST_LINK_DELAY_S,
                                  tier="host-edge")
            for j in range(half):
                agg = self.add_switch(f"a{pod * half + j + 1}", "agg", 2, pod=pod, index=j)
                for edge in edges:
                    self.add_link(edge, agg, rate_bps=fabric_bps, delay_s=FABRIC_LINK_DELAY_S,
                                  tier="edge-agg")
                for core in cores[j * half:(j + 1) * half]:
                    self.add_link(agg, core, rate_bps=core_bps, delay_s=CORE_LINK_DELAY_S,
                                  tier="agg-core")


class LeafSpine(FabricTopo):
    """Two-tier leaf-spine: ``hosts_per_leaf`` hosts per leaf, one uplink per spine.

    Uplink rate rule: ``fabric_rate`` if given, else
    ``hosts_per_leaf * host_rate / (spines * oversub)`` so that a leaf's host
    bandwidth over its uplink bandwidth is ``oversub`` (default 1, non-blocking).
    Give ``oversub`` or ``fabric_rate``, not both; params() records both, the
    oversubscription being derived when the rate is explicit. The defaults
    (4 leaves x 4 hosts, 2 spines) give 800G uplinks.
    """

    family = "leafspine"

    @classmethod
    def size(cls, leaves: int = 4, spines: int = 2, hosts_per_leaf: int = 4,
             **_rates: object) -> TopoSize:
        leaves = require_int("leaves", leaves)
        spines = require_int("spines", spines)
        hosts = leaves * require_int("hosts_per_leaf", hosts_per_leaf)
        return TopoSize(hosts=hosts, switches=leaves + spines, links=hosts + leaves * spines)

    def build(self, leaves: int = 4, spines: int = 2, hosts_per_leaf: int = 4,
              oversub: float | None = None, host_rate: Rate = NIC_RATE_BPS,
              fabric_rate: Rate | None = None) -> None:
        leaves = require_int("leaves", leaves)
        spines = require_int("spines", spines)
        hosts_per_leaf = require_int("hosts_per_leaf", hosts_per_leaf)
        host_bps = require_rate("host_rate", host_rate)
        down_bps = hosts_per_leaf * host_bps
        if fabric_rate is None:
            oversub = 1.0 if oversub is None else require_positive("oversub", oversub)
            fabric_bps = down_bps / (spines * oversub)
            if not MIN_RATE_BPS <= fabric_bps <= MAX_RATE_BPS:
                raise ParameterError("oversub", oversub, "spine links would run " + (
                    f"above {format_rate(MAX_RATE_BPS)}bit/s" if fabric_bps > MAX_RATE_BPS
                    else f"below {MIN_RATE_BPS:g} bit/s"))
        elif oversub is not None:
            raise ParameterError("oversub", oversub,
                                 "give either oversub or fabric_rate, not both")
        else:
            fabric_bps = require_rate("fabric_rate", fabric_rate)
            oversub = down_bps / (spines * fabric_bps)
        self._params = {"leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf,
                        "oversub": oversub, "host_rate": host_bps, "fabric_rate": fabric_bps}
        spine_nodes = [self.add_switch(f"s{i + 1}", "spine", 2, index=i) for i in range(spines)]
        for i in range(leaves):
            leaf = self.add_switch(f"l{i + 1}", "leaf", 1, index=i)
            for j in range(hosts_per_leaf):
                host = self.add_host(f"h{i * hosts_per_leaf + j + 1}", leaf=leaf)
                self.add_link(host, leaf, rate_bps=host_bps, delay_s=HOST_LINK_DELAY_S,
                              tier="host-leaf")
            for spine in spine_nodes:
                self.add_link(leaf, spine, rate_bps=fabric_bps, delay_s=FABRIC_LINK_DELAY_S,
                              tier="leaf-spine")


topos = {"fattree": FatTree, "leafspine": LeafSpine}

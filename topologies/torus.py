"""2D/3D torus of switches with hosts attached, routed dimension-order.

Names: torus switches ``t<x>_<y>[_<z>]`` (coordinates from 0), hosts ``h1..hN``
in coordinate order. ``mn --topo torus,4,4`` replaces Mininet's own 'torus'.
"""

from __future__ import annotations

import itertools
import math

from core.errors import ParameterError
from topologies.base import (
    FABRIC_LINK_DELAY_S,
    HOST_LINK_DELAY_S,
    LEAF_SPINE_RATE_BPS,
    NIC_RATE_BPS,
    FabricTopo,
    Rate,
    TopoSize,
    require_int,
    require_rate,
)

AXES = "xyz"


class Torus(FabricTopo):
    """Torus of the given dimension sizes (2 or 3 of them, each >= 2).

    Neighbours along each axis are linked (tier 'torus-x', 'torus-y', 'torus-z')
    at ``link_rate`` (800G), with the wrap-around link for sizes >= 3; a size-2
    axis has one link between its two nodes, not two. ``hosts_per_node`` hosts
    hang off every torus switch at ``host_rate`` (400G). Node info ``coord``.
    """

    family = "torus"
    routing = "dor"

    @staticmethod
    def _dims(dims: tuple) -> tuple[int, ...]:
        if len(dims) not in (2, 3):
            raise ParameterError("dims", dims, "a torus has 2 or 3 dimensions, e.g. torus,4,4")
        return tuple(require_int(f"dims[{i}]", size, minimum=2) for i, size in enumerate(dims))

    @classmethod
    def size(cls, *dims: int, hosts_per_node: int = 1, **_rates: object) -> TopoSize:
        dims = cls._dims(dims)
        switches = math.prod(dims)
        hosts = switches * require_int("hosts_per_node", hosts_per_node)
        # A size-2 axis has one link per pair of nodes, a longer one a ring.
        ring_links = sum(switches // 2 if size == 2 else switches for size in dims)
        return TopoSize(hosts=hosts, switches=switches, links=hosts + ring_links)

    def build(self, *dims: int, hosts_per_node: int = 1, host_rate: Rate = NIC_RATE_BPS,
              link_rate: Rate = LEAF_SPINE_RATE_BPS) -> None:
        dims = self._dims(dims)
        hosts_per_node = require_int("hosts_per_node", hosts_per_node)
        host_bps = require_rate("host_rate", host_rate)
        link_bps = require_rate("link_rate", link_rate)
        self.dims = dims
        self._params = {"dims": dims, "hosts_per_node": hosts_per_node, "host_rate": host_bps,
                        "link_rate": link_bps}
        nodes = {}
        for coord in itertools.product(*(range(size) for size in dims)):
            node = self.add_switch("t" + "_".join(map(str, coord)), "torus", 1, coord=coord)
            nodes[coord] = node
            for j in range(hosts_per_node):
                host = self.add_host(f"h{(len(nodes) - 1) * hosts_per_node + j + 1}", coord=coord)
                self.add_link(host, node, rate_bps=host_bps, delay_s=HOST_LINK_DELAY_S,
                              tier="host-torus")
        for axis, size in enumerate(dims):
            for coord, node in nodes.items():
                if size == 2 and coord[axis] == 1:
                    continue  # the only link of a size-2 axis was added from coordinate 0
                step = list(coord)
                step[axis] = (coord[axis] + 1) % size
                self.add_link(node, nodes[tuple(step)], rate_bps=link_bps,
                              delay_s=FABRIC_LINK_DELAY_S, tier=f"torus-{AXES[axis]}")


topos = {"torus": Torus}

"""Dragonfly (Kim et al. 2008): groups of all-to-all routers joined by global links.

Names: routers ``g<group>r<router>`` (from 0), hosts ``h1..hN``. Router ports:
hosts first, then local links (by peer router), then global links.

Global-link arrangement. Group i has a*h global ports; port j sits on router
j mod a (striped). Ports are handed out to peer groups by offset d = 1..g-1
(peer group (i + d) mod g) in order, each offset taking m_d consecutive ports,
and the r-th port of offset d in group i is wired to the r-th port of offset
g - d in group i + d. With the full size g = a*h + 1 every m_d = 1: exactly one
global link per pair of groups. With fewer groups m_d = floor(a*h/(g-1)) or one
more: the a*h mod (g-1) extra links go to offsets d and g - d pairwise (and
g/2 if g is even), so every pair of groups is joined and the pair counts differ
by at most one; if g is odd and that remainder is odd, one port per group
stays unused. Consecutive ports of one offset land on different routers, so no
two routers are joined twice as long as m_d <= a, i.e. g >= h + 1.
"""

from __future__ import annotations

from core.errors import ParameterError
from topologies.base import (
    CORE_LINK_DELAY_S,
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


def global_links(a: int, h: int, g: int) -> list[tuple[int, int, int, int]]:
    """Global links as (group, router, peer group, peer router), each link once."""
    per_offset, extra = divmod(a * h, g - 1)
    multiplicity = dict.fromkeys(range(1, g), per_offset)
    d = 1
    while extra >= 2 and d < g - d:
        multiplicity[d] += 1
        multiplicity[g - d] += 1
        extra -= 2
        d += 1
    if extra and g % 2 == 0:
        multiplicity[g // 2] += 1
    # Router of the r-th port of offset d; the same for every group.
    router: dict[tuple[int, int], int] = {}
    for d, count in multiplicity.items():
        for r in range(count):
            router[d, r] = len(router) % a
    links = []
    for group in range(g):
        for (d, r), rtr in router.items():
            peer = (group + d) % g
            if group < peer:
                links.append((group, rtr, peer, router[g - d, r]))
    return links


class Dragonfly(FabricTopo):
    """``p`` hosts per router, ``a`` routers per group, ``h`` global links per router,
    ``g`` groups (default and maximum a*h + 1, minimum max(2, h + 1)).

    Rates: host links ``host_rate`` (400G), local ``local_rate`` (800G), global
    ``global_rate`` (800G). Routing: minimal, i.e. every path with the fewest
    global links (at most one), then the fewest hops: local-global-local at most.
    Plain shortest paths would also take global-global detours via a third group.
    """

    family = "dragonfly"
    # A global link outweighs any all-local detour, so least-cost = minimal routing.
    link_costs = {"global": 1000}

    @staticmethod
    def _counts(p: object, a: object, h: object, g: object) -> tuple[int, int, int, int]:
        p = require_int("p", p)
        a = require_int("a", a)
        h = require_int("h", h)
        g = a * h + 1 if g is None else require_int("g", g, minimum=2)
        if g > a * h + 1:
            raise ParameterError("g", g, f"must be <= a*h+1 = {a * h + 1}: each group has "
                                         f"only a*h = {a * h} global ports")
        if g < h + 1:
            raise ParameterError("g", g, f"must be >= h+1 = {h + 1} so that a router's h "
                                         "global links can reach h different groups")
        return p, a, h, g

    @classmethod
    def size(cls, p: int = 1, a: int = 2, h: int = 1, g: int | None = None,
             **_rates: object) -> TopoSize:
        p, a, h, g = cls._counts(p, a, h, g)
        # Global ports a group uses, as global_links() hands them out: a*h split over
        # the g-1 offsets, the remainder pairwise (one more for g/2 if g is even).
        per_offset, extra = divmod(a * h, g - 1)
        used = per_offset * (g - 1) + 2 * (extra // 2) + (extra % 2 if g % 2 == 0 else 0)
        routers = g * a
        return TopoSize(hosts=routers * p, switches=routers,
                        links=routers * p + g * (a * (a - 1) // 2) + g * used // 2)

    def build(self, p: int = 1, a: int = 2, h: int = 1, g: int | None = None,
              host_rate: Rate = NIC_RATE_BPS, local_rate: Rate = LEAF_SPINE_RATE_BPS,
              global_rate: Rate = LEAF_SPINE_RATE_BPS) -> None:
        p, a, h, g = self._counts(p, a, h, g)
        host_bps = require_rate("host_rate", host_rate)
        local_bps = require_rate("local_rate", local_rate)
        global_bps = require_rate("global_rate", global_rate)
        self._params = {"p": p, "a": a, "h": h, "g": g, "host_rate": host_bps,
                        "local_rate": local_bps, "global_rate": global_bps}
        routers = [[self.add_switch(f"g{grp}r{r}", "router", 1, group=grp, router=r)
                    for r in range(a)] for grp in range(g)]
        for grp, group_routers in enumerate(routers):
            for r, rtr in enumerate(group_routers):
                for j in range(p):
                    host = self.add_host(f"h{(grp * a + r) * p + j + 1}", group=grp, router=r)
                    self.add_link(host, rtr, rate_bps=host_bps, delay_s=HOST_LINK_DELAY_S,
                                  tier="host-router")
            for r, rtr in enumerate(group_routers):
                for peer in group_routers[r + 1:]:
                    self.add_link(rtr, peer, rate_bps=local_bps, delay_s=FABRIC_LINK_DELAY_S,
                                  tier="local")
        for grp, r, peer_grp, peer_r in global_links(a, h, g):
            self.add_link(routers[grp][r], routers[peer_grp][peer_r], rate_bps=global_bps,
                          delay_s=CORE_LINK_DELAY_S, tier="global")


topos = {"dragonfly": Dragonfly}

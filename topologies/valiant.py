"""Valiant and UGAL routing on a dragonfly: the group tables and each decision (pure).

``routing=valiant`` and ``routing=ugal`` (``topologies.loadbalance``) run in each
switch as the eBPF router (emu/bpf/router.c), per RoCEv2 frame:

* At the **source switch** (the frame came in from a host port) toward a host of
  another group, with at least three groups: `intermediate_group` draws a group
  other than the source's and the destination's, uniformly. ``valiant`` always
  sends the frame there; ``ugal`` (UGAL-L, Kim et al., ISCA 2008) compares, from
  the switch's own egress queues, ``q_min x H_min`` with ``q_val x H_val``
  (`ugal_prefers_valiant`): the shortest queue among the minimal next hops times
  the minimal path's hop count against the shortest queue among the next hops
  toward the intermediate group times the Valiant path's hop count
  (`GroupRoutes.via_hops`). Ties stay minimal.
* A frame sent through an intermediate group I carries the **tag** I + 1 in the
  six reserved bits of its BTH byte 4 (``TAG_OFFSET``; FECN and BECN are the two
  high bits). RoCEv2's ICRC treats that byte as variant (masked to ones), as it
  does the IP TOS and TTL, so a switch may rewrite it without breaking the ICRC,
  and no IP or UDP checksum covers it (RoCEv2 sends UDP checksum 0; a frame with
  a UDP checksum stays minimal). Hosts never see a tag: `transit` clears it on
  arrival in group I, which comes before the destination's group.
* Every other switch (`transit`): a tagged frame follows the minimal next hops
  toward group I (`GroupRoutes.to_group`, least cost to any router of I, as the
  fabric's routes: fewest global links, then fewest hops); in group I, or where I
  has become unreachable, the tag is cleared and the frame follows the fabric's
  routes to its destination. Each member is drawn at random per frame.

Why per frame and not per flow: UGAL's choice follows its queues, and a flow's
queues change within the flow; decided once per flow (at its first frame, on idle
queues) every flow would stay minimal. Valiant's load spreading over intermediate
groups, the basis of its bound (``model.dragonfly``), is per packet too. The
reordering this causes is what the selective-repeat transport (``transport=sr``)
absorbs; over go-back-N it costs retransmissions.

No loop, no black hole: only a source switch sets a tag, from a host port, so a
frame is tagged at most once; while tagged, every hop strictly lowers its cost to
group I; after, every hop follows the fabric's loop-free routes to the
destination; a switch without a next hop toward I clears the tag rather than
drop the frame. A frame thus crosses at most the source group, group I and the
destination group: local, global, local, global, local in a full dragonfly.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from core.errors import ParameterError
from core.frame import OFF_BTH
from topologies.base import FabricTopo
from topologies.routing import DownLinks, Routes, topo_graph

#: Where the tag lives: BTH byte 4 (FECN, BECN, six reserved bits).
TAG_OFFSET = OFF_BTH + 4
TAG_MASK = 0x3F
#: Groups a tag can name (tag = group + 1, 0 = none); router.c's MAX_GROUPS is 64.
MAX_GROUPS = TAG_MASK
#: A hop count as the switch holds it (one byte); also "unreachable".
MAX_HOPS = 255


@dataclass(frozen=True)
class GroupRoutes:
    """Per switch, the next hops and hop counts toward each other group, and every
    node's hop count to every host (the fabric's routes)."""

    groups: int
    group_of: dict[str, int]
    #: switch -> group -> next hops on the least-cost paths to any router of the group
    to_group: dict[str, dict[int, tuple[str, ...]]]
    #: switch -> group -> links to the first router of the group on those paths
    hops_to_group: dict[str, dict[int, int]]
    #: switch -> group -> the routers of the group those paths end at
    entries: dict[str, dict[int, frozenset[str]]]
    #: destination host -> node -> routed links to it
    hops_to_host: dict[str, dict[str, int]]

    def via_hops(self, switch: str, group: int, dst: str) -> int:
        """Links from ``switch`` to ``dst`` through ``group``: to the group, then the
        longest of the routes from where it is entered."""
        return min(MAX_HOPS, self.hops_to_group[switch][group] + max(
            self.hops_to_host[dst].get(e, MAX_HOPS) for e in self.entries[switch][group]))


def group_routes(topo: FabricTopo, routes: Routes, down: DownLinks = frozenset()) -> GroupRoutes:
    """``topo``'s `GroupRoutes` (a dragonfly: every switch has a ``group``) around
    the ``down`` links; ParameterError for another family or too many groups."""
    if topo.family != "dragonfly":
        raise ParameterError("routing", topo.family, "valiant and ugal route dragonflies: "
                                                     "use a dragonfly topology")
    hosts = set(topo.host_nodes())
    group_of = {n: int(topo.nodeInfo(n)["group"]) for n in topo.nodes()}
    groups = 1 + max(group_of.values())
    if groups > MAX_GROUPS:
        raise ParameterError("routing", groups, f"groups; the tag names at most {MAX_GROUPS}")
    graph = topo_graph(topo, down)
    peers = {s: [(p, topo.link_costs.get(link["tier"], 1)) for p, link in graph.adj[s].items()
                 if p not in hosts] for s in graph if s not in hosts}
    to_group: dict[str, dict[int, tuple[str, ...]]] = {s: {} for s in peers}
    hops_to_group: dict[str, dict[int, int]] = {s: {} for s in peers}
    entries: dict[str, dict[int, frozenset[str]]] = {s: {} for s in peers}
    for grp in range(groups):
        members = [s for s in peers if group_of[s] == grp]
        cost = _costs_from(members, peers)
        # Nearest first: each switch's next hops are already filled in.
        for s in sorted(cost, key=cost.__getitem__):
            if group_of[s] == grp:
                hops_to_group[s][grp] = 0
                entries[s][grp] = frozenset((s,))
                continue
            nh = tuple(sorted(p for p, c in peers[s] if p in cost and cost[p] + c == cost[s]))
            to_group[s][grp] = nh
            hops_to_group[s][grp] = 1 + hops_to_group[nh[0]][grp]
            entries[s][grp] = frozenset().union(*(entries[p][grp] for p in nh))
    hops_to_host = {dst: routes.distances_to(dst) for dst in routes.hosts}
    return GroupRoutes(groups, group_of, to_group, hops_to_group, entries, hops_to_host)


def _costs_from(sources: list[str], peers: dict[str, list[tuple[str, int]]]) -> dict[str, int]:
    """Least cost from every switch to the nearest of ``sources`` (Dijkstra)."""
    cost = dict.fromkeys(sources, 0)
    heap = [(0, s) for s in sources]
    while heap:
        c, node = heapq.heappop(heap)
        if c > cost[node]:
            continue
        for peer, step in peers[node]:
            if peer not in cost or c + step < cost[peer]:
                cost[peer] = c + step
                heapq.heappush(heap, (c + step, peer))
    return cost


# ----------------------------------------------------------------------------- decisions

def intermediate_group(own: int, dst: int, groups: int, rnd: int) -> int | None:
    """The intermediate group a random 32-bit draw ``rnd`` picks, uniform over the
    groups other than ``own`` and ``dst``; None when there is none (same group, or
    fewer than three groups)."""
    if own == dst or groups < 3:
        return None
    pick = rnd % (groups - 2)
    for skip in sorted((own, dst)):
        if pick >= skip:
            pick += 1
    return pick


def ugal_prefers_valiant(q_min: int, h_min: int, q_val: int, h_val: int) -> bool:
    """UGAL-L: Valiant when its queue times hops is strictly below minimal's."""
    return q_val * h_val < q_min * h_min


def tag_of(group: int | None) -> int:
    """The tag a frame through ``group`` carries (0: none)."""
    return 0 if group is None else group + 1


def transit(gr: GroupRoutes, routes: Routes, switch: str, dst: str, tag: int
            ) -> tuple[tuple[str, ...], int]:
    """At a switch other than the source's: the next hops a frame to ``dst`` with
    ``tag`` may take, and its tag after this switch."""
    if tag:
        group = tag - 1
        toward = gr.to_group[switch].get(group, ())
        if gr.group_of[switch] != group and toward:
            return toward, tag
    return routes.next_hops[switch].get(dst, ()), 0

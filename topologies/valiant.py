"""Valiant and UGAL routing on a dragonfly: the group tables and each decision (pure).

``routing=valiant`` and ``routing=ugal`` (``topologies.loadbalance``) run in each
switch as the eBPF router (emu/bpf/router.c), per RoCEv2 frame. A frame carries
its routing state, the **tag**, in the six reserved bits of its BTH byte 4
(``TAG_OFFSET``; FECN and BECN are the two high bits): `TAG_UNDECIDED` (0, as
hosts send it), ``g + 1`` (through intermediate group g, `tag_of`), or
`TAG_MINIMAL` (minimal to the destination from here on). RoCEv2's ICRC treats
that byte as variant (masked to ones), as it does the IP TOS and TTL, so a switch
may rewrite it without breaking the ICRC, and no IP or UDP checksum covers it
(RoCEv2 sends UDP checksum 0; a frame with a UDP checksum is routed minimally).
The switch that delivers a frame to its host clears the tag.

The decisions (`outcomes`, then `next_hops` for the new tag; members drawn at
random per frame):

* At the **source switch** (the frame came in from a host port) toward a host of
  another group, with at least three groups, `intermediate_group` draws a group
  other than the source's and the destination's, uniformly. ``valiant`` sends
  the frame there. ``ugal`` (UGAL-L, Kim et al., ISCA 2008) compares, from the
  switch's own egress queues, ``q_min x H_min`` with ``q_val x H_val``
  (`ugal_prefers_valiant`): the shortest queue among the minimal next hops times
  the minimal path's hop count, against the shortest queue among the next hops
  toward the intermediate group times the Valiant path's hop count
  (`GroupRoutes.via_hops`); ties stay minimal. Every other frame is tagged minimal.
* ``ugal`` leaves a frame it sends minimally **undecided**, and the next switch,
  if still in the source group, decides again from its own queues (progressive
  adaptive routing, Jiang, Kim and Dally, ISCA 2009), then tags it minimal or
  Valiant. Without this second look UGAL-L cannot see the queue that matters on
  a dragonfly: a host's traffic reaches the global link to the next group through
  a local link that is rarely its bottleneck, so its own switch sees no queue and
  stays minimal while the global link one hop away overflows. An undecided frame
  outside its source group is tagged minimal.
* A frame tagged through group g follows the minimal next hops toward g
  (`GroupRoutes.to_group`: least cost to any router of g, as the fabric's
  routes: fewest global links, then fewest hops); in group g, in the
  destination's group (a detour around a failed link may pass it) or where g has
  become unreachable, it is tagged minimal and follows the fabric's routes.

Why per frame and not per flow: UGAL's choice follows its queues, which change
within a flow; decided once per flow (at its first frame, on idle queues) every
flow would stay minimal. Valiant's load spreading over intermediate groups, the
basis of its bound (``model.ugal``), is per packet too. The reordering this
causes is what the selective-repeat transport (``transport=sr``) absorbs; over
go-back-N it costs retransmissions.

No loop, no black hole: a frame's tag only moves forward, undecided, then at most
one intermediate group, then minimal; at most two switches (the source switch
and the next one, both in the source group) decide; while undecided or minimal
every hop follows the fabric's loop-free routes to the destination, while
through g every hop strictly lowers the cost to g; a switch without a next hop
toward g tags the frame minimal rather than drop it. A frame thus crosses at most
the source group, group g and the destination group: local, global, local,
global, local in a full dragonfly.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ParameterError
from core.frame import OFF_BTH
from topologies.base import FabricTopo
from topologies.routing import DownLinks, Routes, least_costs, topo_graph

#: Where the tag lives: BTH byte 4 (FECN, BECN, six reserved bits).
TAG_OFFSET = OFF_BTH + 4
TAG_MASK = 0x3F
TAG_UNDECIDED = 0
TAG_MINIMAL = TAG_MASK
#: Groups a tag can name (tag = group + 1, between the two above); router.c holds 64.
MAX_GROUPS = TAG_MINIMAL - 1
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
    return least_costs(dict.fromkeys(sources, 0), peers)


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


def ugal_prefers_valiant(q_min: int, h_min: int, q_val: int, h_val: int,
                         quantum: int = 1) -> bool:
    """UGAL-L: Valiant when its queue times hops is strictly below minimal's, the queues
    in whole units of ``quantum`` (a frame, as adaptive routing compares them: the frame
    a port is still sending is not a queue to route around)."""
    q = max(1, quantum)
    return (q_val // q) * h_val < (q_min // q) * h_min


def tag_of(group: int) -> int:
    """The tag of a frame through ``group``."""
    return group + 1


def outcomes(mode: str, gr: GroupRoutes, switch: str, src: str, dst: str, tag: int,
             from_host: bool) -> list[int]:
    """Every tag a frame from ``src`` to ``dst`` arriving at ``switch`` with ``tag``
    may leave it with (``from_host``: it came in from a host port): which one is
    the draw of `intermediate_group` and, under ugal, `ugal_prefers_valiant`."""
    own, src_group, dst_group = gr.group_of[switch], gr.group_of[src], gr.group_of[dst]
    reachable = [tag_of(g) for g in range(gr.groups) if g not in (src_group, dst_group)
                 and gr.to_group[switch].get(g)]
    if from_host:
        if src_group == dst_group or gr.groups < 3:
            return [TAG_MINIMAL]
        vias = [tag_of(g) for g in range(gr.groups) if g not in (own, dst_group)]
        # a drawn group this switch cannot reach: minimal (ugal: undecided)
        fallback = TAG_MINIMAL if mode == "valiant" else TAG_UNDECIDED
        out = {t if t in reachable else fallback for t in vias}
        return sorted(out | ({TAG_UNDECIDED} if mode == "ugal" else set()))
    if tag == TAG_UNDECIDED:
        if mode == "ugal" and own == src_group and src_group != dst_group and gr.groups >= 3:
            return sorted({TAG_MINIMAL, *reachable})
        return [TAG_MINIMAL]
    if tag != TAG_MINIMAL and (own in (tag - 1, dst_group) or not gr.to_group[switch].get(tag - 1)):
        return [TAG_MINIMAL]
    return [tag]


def next_hops(gr: GroupRoutes, routes: Routes, switch: str, dst: str, tag: int
              ) -> tuple[str, ...]:
    """The next hops of a frame to ``dst`` leaving ``switch`` with ``tag``."""
    if tag not in (TAG_UNDECIDED, TAG_MINIMAL):
        return gr.to_group[switch][tag - 1]
    return routes.next_hops[switch].get(dst, ())

"""Routes of a fabric topology, computed from the graph (pure, no kernel).

'ecmp' (Clos, dragonfly, rail-optimized): every shortest path in hops on which
hosts are only endpoints; a multi-homed host (a GPU with an NVLink port) thus
uses whichever of its ports starts a shortest path. 'dor' (torus):
dimension-order routing, axis 0 first, each axis the shorter way round (ties
go +), a single path.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import networkx as nx

from core.errors import ParameterError
from topologies.base import FabricTopo

LINK_KEYS = ("rate_bps", "delay_s", "tier", "buffer_bytes")

NextHops = dict[str, dict[str, tuple[str, ...]]]
#: Links taken down, each as the frozenset of its two end nodes.
DownLinks = frozenset[frozenset[str]]


@dataclass(frozen=True)
class Routes:
    """``next_hops[node][dst_host]`` -> sorted ECMP set of neighbour nodes.

    Every node (hosts included) has an entry for every host it can reach
    without transiting another host; a missing entry means no route (e.g. an
    NVSwitch towards another server's GPUs). A node has no entry for itself.
    """

    kind: str
    hosts: tuple[str, ...]
    next_hops: NextHops

    def paths(self, src: str, dst: str) -> list[tuple[str, ...]]:
        """Every routed path from src to dst as node names, src..dst, sorted."""
        if src == dst:
            return [(src,)]
        found: list[tuple[str, ...]] = []
        stack = [(src,)]
        while stack:
            path = stack.pop()
            for hop in self.next_hops[path[-1]].get(dst, ()):
                (found if hop == dst else stack).append((*path, hop))
        return sorted(found)

    def ecmp_width(self, src: str, dst: str) -> int:
        """Number of distinct routed paths from src to dst."""
        return len(self.paths(src, dst))

    def distances_to(self, dst: str) -> dict[str, int]:
        """Routed hop count (links) to dst from every node that has a route to it."""
        dist = {dst: 0}
        for start in self.next_hops:
            chain = []
            node = start
            while node not in dist and self.next_hops[node].get(dst):
                chain.append(node)
                node = self.next_hops[node][dst][0]  # all routed paths have one length
            if node in dist:
                hops = dist[node]
                for hop in reversed(chain):
                    hops += 1
                    dist[hop] = hops
        return dist

    def hops(self, src: str, dst: str) -> int:
        """Routed hop count (links) from src to dst; ParameterError if unreachable."""
        dist = 0
        node = src
        while node != dst:
            step = self.next_hops[node].get(dst)
            if not step:
                raise ParameterError("dst", dst, f"no route from {src}")
            node = step[0]
            dist += 1
        return dist


def topo_graph(topo: FabricTopo, down: DownLinks = frozenset()) -> nx.Graph:
    """The topology as a networkx graph: node attributes = nodeInfo, edge
    attributes = rate_bps, delay_s, tier, buffer_bytes; the ``down`` links left out."""
    graph = nx.Graph()
    for node in topo.nodes():
        graph.add_node(node, **topo.nodeInfo(node))
    for a, b, info in topo.fabric_links():
        if frozenset((a, b)) not in down:
            graph.add_edge(a, b, **{key: info[key] for key in LINK_KEYS})
    return graph


def compute_routes(topo: FabricTopo, down: DownLinks = frozenset()) -> Routes:
    """Routes for every (node, destination host) pair, per ``topo.routing``,
    around the ``down`` links: 'ecmp' takes the least-cost paths that remain (as
    a converged routing protocol would); 'dor' has no alternative path, so a
    route crossing a down link is withdrawn, up to its source."""
    hosts = tuple(topo.hosts())
    if topo.routing == "ecmp":
        graph = topo_graph(topo, down)
        return Routes("ecmp", hosts, _least_cost_next_hops(graph, hosts, topo.link_costs))
    if topo.routing == "dor":
        next_hops = _dor_next_hops(topo_graph(topo), hosts)
        if down:
            _withdraw(next_hops, down)
        return Routes("dor", hosts, next_hops)
    raise ParameterError("routing", topo.routing, "must be 'ecmp' or 'dor'")


def _withdraw(next_hops: NextHops, down: DownLinks) -> None:
    """Drop every next hop across a down link, then every next hop that no longer
    leads to its destination, until nothing changes (in place)."""
    for node, table in next_hops.items():
        for dst, hops in list(table.items()):
            table[dst] = tuple(hop for hop in hops if frozenset((node, hop)) not in down)
    changed = True
    while changed:
        changed = False
        for table in next_hops.values():
            for dst, hops in list(table.items()):
                alive = tuple(hop for hop in hops if hop == dst or next_hops[hop].get(dst))
                if not alive:
                    del table[dst]
                    changed = True
                elif alive != hops:
                    table[dst] = alive
                    changed = True


def _switch_peers(graph: nx.Graph, host_set: set[str],
                  costs: dict[str, int]) -> dict[str, list[tuple[str, int]]]:
    """(switch neighbour, link cost) of every node: routes never enter a host."""
    return {node: [(peer, costs.get(link["tier"], 1)) for peer, link in graph.adj[node].items()
                   if peer not in host_set] for node in graph}


def _by_attachment(hosts: Iterable[str], switch_peers: dict[str, list[tuple[str, int]]],
                   ) -> dict[tuple[tuple[str, int], ...], list[str]]:
    """Destination hosts grouped by the (switch, link cost) pairs they hang off:
    the fabric's routes to all hosts of a group are the same, computed once."""
    groups: dict[tuple[tuple[str, int], ...], list[str]] = defaultdict(list)
    for host in hosts:
        groups[tuple(sorted(switch_peers[host]))].append(host)
    return groups


def _fill(next_hops: NextHops, dsts: list[str], last: Iterable[str],
          shared: dict[str, tuple[str, ...]]) -> None:
    """Store a group's shared next hops for each of its destination hosts;
    the ``last`` switches deliver to the destination directly."""
    last = tuple(last)
    for dst in dsts:
        for node, hops in shared.items():
            if node != dst:
                next_hops[node][dst] = hops
        for switch in last:
            next_hops[switch][dst] = (dst,)


def least_costs(start: Mapping[str, int],
                peers: Mapping[str, Sequence[tuple[str, int]]]) -> dict[str, int]:
    """Least cost to every node reachable through ``peers`` (node -> (peer, link cost))
    from the ``start`` nodes at their given costs (Dijkstra)."""
    dist = dict(start)
    heap = [(d, node) for node, d in start.items()]
    heapq.heapify(heap)
    while heap:
        d, node = heapq.heappop(heap)
        if d > dist[node]:
            continue
        for peer, c in peers[node]:
            if peer not in dist or d + c < dist[peer]:
                dist[peer] = d + c
                heapq.heappush(heap, (d + c, peer))
    return dist


def _least_cost_next_hops(graph: nx.Graph, hosts: tuple[str, ...],
                          costs: dict[str, int]) -> NextHops:
    host_set = set(hosts)
    switch_peers = _switch_peers(graph, host_set, costs)
    next_hops: NextHops = {node: {} for node in graph}
    for attach, dsts in _by_attachment(hosts, switch_peers).items():
        # Dijkstra outwards from the attachment switches.
        direct = dict(attach)
        dist = least_costs(direct, switch_peers)
        last = [node for node, d in direct.items() if dist[node] == d]
        shared = {}
        for node in graph:
            if node in host_set:  # a host: its cheapest first hops
                reach = {p: dist[p] + c for p, c in switch_peers[node] if p in dist}
                if reach:
                    best = min(reach.values())
                    shared[node] = tuple(sorted(p for p, d in reach.items() if d == best))
            elif node in dist and node not in last:
                shared[node] = tuple(sorted(p for p, c in switch_peers[node]
                                            if p in dist and dist[p] + c == dist[node]))
        _fill(next_hops, dsts, last, shared)
    return next_hops


def _dor_next_hops(graph: nx.Graph, hosts: tuple[str, ...]) -> NextHops:
    host_set = set(hosts)
    at = {graph.nodes[n]["coord"]: n for n in graph if n not in host_set}
    dims = tuple(max(coord[axis] for coord in at) + 1 for axis in range(len(next(iter(at)))))
    next_hops: NextHops = {node: {} for node in graph}
    for attach, dsts in _by_attachment(hosts, _switch_peers(graph, host_set, {})).items():
        if len(attach) != 1:
            raise ParameterError("routing", "dor", f"host {dsts[0]} must hang off one switch")
        ((switch, _),) = attach
        target = graph.nodes[switch]["coord"]
        shared = {host: tuple(sorted(graph[host])) for host in hosts}
        for coord, node in at.items():
            if coord != target:
                shared[node] = (at[_dor_step(coord, target, dims)],)
        _fill(next_hops, dsts, [switch], shared)
    return next_hops


def _dor_step(coord: tuple[int, ...], target: tuple[int, ...],
              dims: tuple[int, ...]) -> tuple[int, ...]:
    """The next coordinate on the dimension-order route from coord to target."""
    axis = next(i for i, (c, t) in enumerate(zip(coord, target, strict=True)) if c != t)
    size = dims[axis]
    forward = (target[axis] - coord[axis]) % size
    step = 1 if forward <= size - forward else -1
    return (*coord[:axis], (coord[axis] + step) % size, *coord[axis + 1:])


def bisection_bandwidth_bps(topo: FabricTopo) -> float:
    """Max-flow (one direction) from the first half of the hosts, in Mininet's
    natural name order, to the second half, hosts never transiting.

    That is the min cut separating those two halves, host links included: for a
    non-blocking Clos N/2 x NIC rate, for an oversubscribed leaf-spine the
    leaves' uplinks, for the torus the cut across axis 0 (hosts are numbered in
    coordinate order). It is the bandwidth of this one bisection, not the
    minimum over all bisections (NP-hard in general).
    """
    graph = topo_graph(topo)
    hosts = topo.hosts()
    if len(hosts) < 2:
        raise ParameterError("hosts", len(hosts), "bisection needs at least two hosts")
    senders = set(hosts[:len(hosts) // 2])
    receivers = set(hosts) - senders
    flow = nx.DiGraph()
    for a, b, rate_bps in graph.edges(data="rate_bps"):
        for u, v in ((a, b), (b, a)):
            # Senders only send and receivers only receive: no flow transits a host.
            if u not in receivers and v not in senders:
                flow.add_edge(u, v, capacity=rate_bps)
    for host in senders:
        flow.add_edge("_src", host)  # no capacity attribute: unbounded
    for host in receivers:
        flow.add_edge(host, "_dst")
    value, _ = nx.maximum_flow(flow, "_src", "_dst")
    return float(value)


def diameter_hops(topo: FabricTopo, routes: Routes | None = None) -> int:
    """Longest routed host-to-host path, in links (host links included)."""
    routes = routes or compute_routes(topo)
    hosts = set(routes.hosts)
    groups = _by_attachment(routes.hosts, _switch_peers(topo_graph(topo), hosts, {}))
    # Hosts hanging off the same switches are interchangeable: one destination
    # per group gives every distance.
    return max((dist for dsts in groups.values()
                for node, dist in routes.distances_to(dsts[0]).items() if node in hosts),
               default=0)

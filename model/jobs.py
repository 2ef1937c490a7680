"""The fluid jobs of a message DAG, as `model.alphabeta` prices it: per message its
bits on the wire, release, dependencies and fixed delays; per path its link
fractions and latency; and the bits every link carries.

What does not depend on the messages' paths is laid out once per workload
(`WorkloadJobs`): hashed ECMP prices the same DAG under many path draws (16 per
case, each of 32,512 messages on fattree,8's ring), and a draw then only looks up
each message's path. The links' bits are summed with numpy in message order, the
order the per-message loop added them in: the same sums, float for float.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

import networkx as nx
import numpy as np

from core.frame import WIRE_FRAME_BYTES
from model.fluid import FluidDag, FluidJob
from model.maxmin import Choice, Flow, Link, Path, choose_path, make_flow

PathsLike = Callable[[str, str], Sequence[Sequence[str]]] | Mapping[tuple[str, str], Sequence[Sequence[str]]]
#: How a hop forwards a frame (see `model.alphabeta`'s module doc); commodity
#: Ethernet switches store and forward, low-latency data-centre switches cut through.
FORWARDING = ("store-and-forward", "cut-through")


def resolve_paths(paths: PathsLike) -> Callable[[str, str], list[Path]]:
    """A ``paths(src, dst)`` callable from a callable or a ``{(src, dst): paths}`` mapping."""
    if isinstance(paths, Mapping):
        table = paths
        return lambda s, d: [tuple(p) for p in table[(s, d)]]
    fn = paths
    return lambda s, d: [tuple(p) for p in fn(s, d)]


def memo_paths(paths: PathsLike) -> Callable[[str, str], tuple[Path, ...]]:
    """`resolve_paths`, each (src, dst) resolved once: a DAG has many messages per
    host pair (routes are fixed for a prediction). Returns the same tuple per pair."""
    route = resolve_paths(paths)
    table: dict[tuple[str, str], tuple[Path, ...]] = {}

    def memo(src: str, dst: str) -> tuple[Path, ...]:
        found = table.get((src, dst))
        if found is None:
            found = table[(src, dst)] = tuple(route(src, dst))
        return found
    return memo


def check_forwarding(forwarding: str) -> None:
    if forwarding not in FORWARDING:
        raise ValueError(f"forwarding must be one of {FORWARDING}, not {forwarding!r}")


def path_latency_s(graph: nx.Graph, path: Sequence[str],
                   packet_bytes: float = WIRE_FRAME_BYTES,
                   forwarding: str = "store-and-forward") -> float:
    """Propagation and switch latency of a path plus, when storing and forwarding, the
    last packet's serialization at every hop but the bottleneck (see module doc)."""
    check_forwarding(forwarding)
    delay_s = sum(float(graph.nodes[n].get("switch_latency_s", 0.0)) for n in path[1:-1])
    ser_s: list[float] = []
    for u, v in zip(path[:-1], path[1:], strict=True):
        data = graph.edges[u, v]
        delay_s += float(data.get("delay_s", 0.0))
        ser_s.append(8.0 * packet_bytes / float(data["rate_bps"]))
    if ser_s and forwarding == "store-and-forward":
        delay_s += sum(ser_s) - max(ser_s)
    return delay_s


class Late(NamedTuple):
    """How a message is held back beyond the DAG's own timing (a failure's recovery):
    it is not ready before ``not_before_s``, waits ``wait_s`` more before its bytes go
    (the NIC idle for it, e.g. a retransmission timeout), and sends ``extra_bits`` more
    (bits sent again, sharing the links as its own do) and ``acked_bits`` fewer (bits
    delivered before it was held back, not sent again)."""

    not_before_s: float = 0.0
    wait_s: float = 0.0
    extra_bits: float = 0.0
    acked_bits: float = 0.0


_ON_TIME = Late()


class _Route(NamedTuple):
    """What follows from one message's route: its link fractions, its latency and
    its number among the routes (`WorkloadJobs` keeps its links' indices)."""

    fractions: dict[Link, float]
    latency_s: float
    number: int


_NUMBER = attrgetter("number")


class WorkloadJobs:
    """``workload``'s messages priced on ``graph`` over ``paths`` (the options of
    `model.alphabeta.predict_workload`), up to their paths: `jobs` gives the fluid
    jobs and the links' wire bits for one ECMP mode and choice."""

    def __init__(self, workload: Any, graph: nx.Graph, paths: PathsLike, *,
                 overhead_s: float, packet_bytes: float, forwarding: str,
                 wire_factor: float, nic_rate_bps: float | None,
                 late: Mapping[Hashable, Late] | None = None) -> None:
        check_forwarding(forwarding)
        self.graph, self.forwarding, self.route = graph, forwarding, memo_paths(paths)
        self.cap_bps = math.inf if nic_rate_bps is None else float(nic_rate_bps)
        held = late or {}
        messages = workload.messages
        self.ids = [m.msg_id for m in messages]
        self.pairs = [(m.src, m.dst) for m in messages]
        self.last_bytes, self.size_bits, self.release_s, self.deps = [], [], [], []
        self.pre_s, self.gap_s = [], []
        for m in messages:
            size_bits = 8.0 * wire_factor * m.size_bytes
            self.last_bytes.append(min(packet_bytes, size_bits / 8.0))
            hold = held.get(m.msg_id, _ON_TIME)
            self.size_bits.append(max(0.0, size_bits + hold.extra_bits - hold.acked_bits))
            self.release_s.append(max(m.start_s, hold.not_before_s))
            self.deps.append(tuple(m.deps))
            self.pre_s.append(overhead_s + hold.wait_s)
            self.gap_s.append(float(getattr(m, "gap_s", 0.0)))
        #: Messages with a path to choose (not to themselves), by index.
        self.routed = [i for i, (s, d) in enumerate(self.pairs) if s != d]
        self.routed_ids = [self.ids[i] for i in self.routed]
        self.routed_pairs = [self.pairs[i] for i in self.routed]
        self.routed_last_bytes = [self.last_bytes[i] for i in self.routed]
        self.link_of: dict[Link, int] = {}
        self.links: list[Link] = []
        self.by_path: dict[tuple, _Route] = {}
        #: (id of a choice's answer, host pair, last packet) -> (the answer, its route).
        self.picked: dict[tuple[int, tuple[str, str], float], tuple[Any, _Route]] = {}
        #: Every route's links (their indices) and fractions, route after route;
        #: ``route_start[k]`` is where route k's begin (k = its number).
        self.route_start, self.route_links, self.route_fracs = [0], [], []
        self._flat: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        #: The jobs' `FluidDag` (the same whatever their paths), laid out by the first `jobs`.
        self.dag: FluidDag | None = None
        self.size_bits_array = np.array(self.size_bits, dtype=float)
        self.alone = self._numbered({}, 0.0)

    def _route(self, flow: Flow, last_bytes: float, latency_s: float | None = None) -> _Route:
        """The `_Route` of ``flow`` (its fractions and latency), its links numbered."""
        fractions = dict(flow.fractions)
        if latency_s is None:
            latency_s = max(path_latency_s(self.graph, p, last_bytes, self.forwarding)
                            for p in flow.paths)
        return self._numbered(fractions, latency_s)

    def _numbered(self, fractions: dict[Link, float], latency_s: float) -> _Route:
        """A new route, its links numbered and kept."""
        for link, frac in fractions.items():
            if link not in self.link_of:
                self.link_of[link] = len(self.links)
                self.links.append(link)
            self.route_links.append(self.link_of[link])
            self.route_fracs.append(frac)
        self.route_start.append(len(self.route_links))
        self._flat = None
        return _Route(fractions, latency_s, len(self.route_start) - 2)

    def _message_route(self, i: int, mode: str, choice: Choice | None) -> _Route:
        """One message's route, priced for itself (any mode)."""
        src, dst = self.pairs[i]
        if src == dst:
            return self.alone
        flow = make_flow(self.ids[i], self.route(src, dst), mode=mode, choice=choice,
                         cap_bps=self.cap_bps)
        return self._route(flow, self.last_bytes[i])

    def _hashed(self, i: int, picked: Any) -> _Route:
        """Message ``i``'s route under a choice that answered ``picked`` (checked and
        priced once per answer, host pair and last packet)."""
        key = (id(picked), self.pairs[i], self.last_bytes[i])
        found = self.picked.get(key)
        if found is not None and found[0] is picked:   # kept with it: its id stays its own
            return found[1]
        route = self._path_route(i, {self.ids[i]: picked})
        self.picked[key] = (picked, route)
        return route

    def _path_route(self, i: int, choice: Choice | None) -> _Route:
        """Message ``i``'s route hashed by ``choice`` onto one of its paths."""
        all_paths = self.route(*self.pairs[i])
        if not all_paths:
            raise ValueError(f"flow {self.ids[i]!r} has no routed path")
        path = choose_path(self.ids[i], all_paths, choice)
        key = (path, self.last_bytes[i])
        found = self.by_path.get(key)
        if found is None:
            # The path is the message's own draw; what follows from a path is not.
            found = self.by_path[key] = self._route(
                Flow(self.ids[i], (path,), cap_bps=self.cap_bps), self.last_bytes[i],
                path_latency_s(self.graph, path, self.last_bytes[i], self.forwarding))
        return found

    def _hashed_routes(self, choice: Choice | None) -> list[_Route]:
        """Every message's route, each hashed onto one path by ``choice``."""
        routes = [self.alone] * len(self.ids)
        if isinstance(choice, Mapping):
            answers = list(map(choice.__getitem__, self.routed_ids))
            keys = zip(map(id, answers), self.routed_pairs, self.routed_last_bytes,
                       strict=True)
            for i, answer, found in zip(self.routed, answers, map(self.picked.get, keys),
                                        strict=True):
                routes[i] = found[1] if found is not None and found[0] is answer else \
                    self._hashed(i, answer)
        else:
            for i in self.routed:
                routes[i] = self._path_route(i, choice)
        return routes

    def _spread_routes(self) -> list[_Route]:
        """Every message's route spread evenly over its paths (one per pair and size)."""
        routes = []
        for i, (src, dst) in enumerate(self.pairs):
            key = (src, dst, self.last_bytes[i])
            found = self.by_path.get(key)
            if found is None:
                found = self.by_path[key] = self._message_route(i, "spread", None)
            routes.append(found)
        return routes

    def jobs(self, mode: str, choice: Choice | None = None
             ) -> tuple[list[FluidJob], dict[Link, float]]:
        """The fluid jobs and the wire bits each link carries, in ECMP ``mode``
        ('spread', or 'hashed' onto the path ``choice`` picks)."""
        if mode == "spread":
            routes = self._spread_routes()
        elif mode == "hashed":
            routes = self._hashed_routes(choice)
        else:
            routes = [self._message_route(i, mode, choice) for i in range(len(self.ids))]
        n = len(self.ids)
        jobs = list(map(FluidJob, self.ids, [r.fractions for r in routes], self.size_bits,
                        [self.cap_bps] * n, self.release_s, self.deps, self.pre_s,
                        [r.latency_s for r in routes], self.gap_s))
        if self.dag is None:
            self.dag = FluidDag(jobs)
        return jobs, self._link_bits(routes)

    def _link_bits(self, routes: list[_Route]) -> dict[Link, float]:
        """Each link's bits, summed message after message (as `np.bincount` adds its
        weights, in order), keyed in the order the links first carry a message."""
        if self._flat is None:
            self._flat = (np.array(self.route_start, dtype=np.intp),
                          np.array(self.route_links, dtype=np.intp),
                          np.array(self.route_fracs, dtype=float))
        start, links, fracs = self._flat
        number = np.fromiter(map(_NUMBER, routes), dtype=np.intp, count=len(routes))
        counts = start[number + 1] - start[number]
        total = int(counts.sum())
        if not total:
            return {}
        # Message i's links are at start[number[i]] onwards: one position per link.
        at = np.repeat(start[number] - (np.cumsum(counts) - counts), counts) + np.arange(total)
        index = links[at]
        bits = fracs[at] * np.repeat(self.size_bits_array, counts)
        totals = np.bincount(index, weights=bits, minlength=len(self.links))
        seen, first = np.unique(index, return_index=True)
        return {self.links[k]: float(totals[k]) for k in seen[np.argsort(first)].tolist()}

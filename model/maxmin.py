"""Flow-level max-min fair rates over routed paths (progressive filling).

Model and assumptions:

* Every undirected graph edge is two directed links, each of capacity
  ``rate_bps`` (full duplex). A host's NIC is its host-switch edge, so NIC
  contention is a link like any other.
* A flow's traffic is split over its paths with fixed fractions (weights):
  'hashed' ECMP puts the whole flow on one path (fraction 1), 'spread' splits it
  evenly over all equal-cost paths (the ideal of perfect load balancing). A flow
  has ONE rate r; a link l carries ``a[f, l] * r`` of it, where ``a[f, l]`` is the
  sum of the fractions of the flow's paths that cross l.
* Max-min fairness by progressive filling: all unfrozen flows grow at the same
  speed; when a link saturates every flow crossing it is frozen; a flow whose
  rate cap (NIC line rate, DCQCN rate) is reached is frozen as well.
* Identical flows (same link fractions and cap) get identical rates in the
  max-min allocation, so the solver works on *classes* of flows with a
  multiplicity; that keeps all-to-all and ring steps cheap.
* The fluid completion-time model (`model.fluid.flow_completion_times`)
  recomputes the allocation whenever the set of active flows changes.

Units: rates in bit/s, sizes in bytes, times in real seconds.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

Link = tuple[str, str]          # directed link (from_node, to_node)
Path = tuple[str, ...]          # node names, source host first

#: Relative tolerance used to decide that a link is saturated or a cap reached.
REL_TOL = 1e-9

Choice = Callable[[Hashable, Sequence[Path]], "int | Path"] | Mapping[Hashable, "int | Path"]


def path_links(path: Sequence[str]) -> list[Link]:
    """Directed links traversed by a path of node names."""
    return [(path[i], path[i + 1]) for i in range(len(path) - 1)]


def link_capacities(graph: nx.Graph, attr: str = "rate_bps") -> dict[Link, float]:
    """Directed link capacities: each undirected edge gives both directions."""
    caps: dict[Link, float] = {}
    for u, v, data in graph.edges(data=True):
        rate_bps = float(data[attr])
        caps[(u, v)] = rate_bps
        caps[(v, u)] = rate_bps
    return caps


@dataclass(frozen=True)
class Flow:
    """A flow on one or more paths with fixed traffic fractions.

    ``weights`` default to an even split. ``cap_bps`` bounds the flow's rate.
    """

    flow_id: Hashable
    paths: tuple[Path, ...]
    weights: tuple[float, ...] | None = None
    cap_bps: float = math.inf
    fractions: dict[Link, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.paths:
            raise ValueError(f"flow {self.flow_id!r} has no path")
        weights = self.weights or tuple(1.0 / len(self.paths) for _ in self.paths)
        if len(weights) != len(self.paths):
            raise ValueError(f"flow {self.flow_id!r}: one weight per path is needed")
        total = sum(weights)
        fractions: dict[Link, float] = {}
        for path, w in zip(self.paths, weights, strict=True):
            for link in path_links(path):
                fractions[link] = fractions.get(link, 0.0) + w / total
        object.__setattr__(self, "fractions", fractions)

    def route_key(self) -> tuple:
        """Identical keys => identical max-min rate (used to group flows)."""
        return (tuple(sorted(self.fractions.items())), self.cap_bps)


def default_hash_choice(flow_id: Hashable, paths: Sequence[Path]) -> int:
    """Deterministic stand-in for a switch's ECMP hash (CRC32 of the flow id).

    It does not reproduce the kernel's hash; it only gives a reproducible,
    roughly uniform placement for 'hashed' predictions.
    """
    return zlib.crc32(repr(flow_id).encode()) % len(paths)


def choose_path(flow_id: Hashable, paths: Sequence[Path], choice: Choice | None) -> Path:
    """The one path a hashed flow takes; ``choice`` gives an index or a path."""
    if choice is None:
        picked: int | Path = default_hash_choice(flow_id, paths)
    elif isinstance(choice, Mapping):
        picked = choice[flow_id]
    else:
        picked = choice(flow_id, paths)
    if isinstance(picked, (int, np.integer)):
        return tuple(paths[int(picked) % len(paths)])
    picked = tuple(picked)
    if picked not in paths and picked not in {tuple(p) for p in paths}:  # paths may be lists
        raise ValueError(f"flow {flow_id!r}: chosen path {picked} is not a routed path")
    return picked


def make_flow(flow_id: Hashable, paths: Sequence[Sequence[str]], *, mode: str = "spread",
              choice: Choice | None = None, cap_bps: float = math.inf) -> Flow:
    """A flow over its equal-cost ``paths``: 'spread' evenly or 'hashed' onto one."""
    all_paths = tuple(tuple(p) for p in paths)
    if not all_paths:
        raise ValueError(f"flow {flow_id!r} has no routed path")
    if mode == "spread":
        return Flow(flow_id, all_paths, cap_bps=cap_bps)
    if mode == "hashed":
        return Flow(flow_id, (choose_path(flow_id, all_paths, choice),), cap_bps=cap_bps)
    raise ValueError(f"ECMP mode must be 'spread' or 'hashed', not {mode!r}")


def as_flow(item: Flow | tuple) -> Flow:
    """Accept a `Flow` or a plain ``(flow_id, path)`` pair."""
    if isinstance(item, Flow):
        return item
    flow_id, path = item
    return Flow(flow_id, (tuple(path),))


def as_capacities(capacities: Mapping[Link, float] | nx.Graph) -> Mapping[Link, float]:
    if isinstance(capacities, nx.Graph):
        return link_capacities(capacities)
    return capacities


@dataclass(frozen=True)
class MaxMinResult:
    """Rates per flow, load and utilisation per directed link, and what froze each flow.

    ``bottleneck[flow_id]`` is the saturated link that froze the flow, or None
    when its rate cap did (or it crosses no link).
    """

    rates_bps: dict[Hashable, float]
    link_load_bps: dict[Link, float]
    link_utilisation: dict[Link, float]
    bottleneck: dict[Hashable, Link | None]


def fill_classes(coef: np.ndarray, mult: np.ndarray, link_cap_bps: np.ndarray,
                 cap_bps: np.ndarray, want_bottleneck: bool = True,
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Progressive filling on flow classes.

    ``coef[i, l]``: fraction of one class-i flow's rate on link l; ``mult[i]``:
    flows in class i; ``cap_bps[i]``: per-flow cap (inf for none). Returns the
    per-flow rate of each class and the index of the link that froze it (-1 when
    its cap did).
    """
    n_cls, n_links = coef.shape
    rate = np.zeros(n_cls)
    froze_by = np.full(n_cls, -1, dtype=np.int64)
    uses = (coef > 0).astype(float)
    frozen = uses.sum(axis=1) == 0
    rate[frozen] = cap_bps[frozen]          # no link: only the cap limits it
    weighted = coef * mult[:, None]
    # All unfrozen classes share one rate, the water level; per link we keep the
    # load coefficient of unfrozen classes and the capacity frozen ones left.
    active_load = weighted[~frozen].sum(axis=0)
    active_count = uses[~frozen].sum(axis=0)
    spare = link_cap_bps.astype(float).copy()
    cap_left = np.where(frozen, np.inf, cap_bps)
    link_level = np.empty(n_links)
    level = 0.0
    while not frozen.all():
        link_level.fill(np.inf)
        np.divide(spare, active_load, out=link_level, where=active_count > 0.5)
        level = max(level, min(float(link_level.min()), float(cap_left.min())))
        threshold = level * (1.0 + REL_TOL)
        saturated = link_level <= threshold
        hit = uses @ saturated.astype(float) > 0
        newly = np.flatnonzero(~frozen & (hit | (cap_left <= threshold)))
        if newly.size == 0:      # cannot happen with positive capacities; guard against loops
            raise RuntimeError("progressive filling made no progress")
        if want_bottleneck:
            by_link = newly[hit[newly] & (cap_bps[newly] > threshold)]
            froze_by[by_link] = np.argmax(uses[by_link] * saturated, axis=1)
        rate[newly] = np.minimum(level, cap_bps[newly])
        frozen[newly] = True
        cap_left[newly] = np.inf
        w = weighted[newly]
        active_load -= w.sum(axis=0)
        active_count -= uses[newly].sum(axis=0)
        spare = np.maximum(spare - rate[newly] @ w, 0.0)
    return rate, froze_by


def fill_sparse(rows: Sequence[Sequence[tuple[int, float]]], mult: Sequence[float],
                link_cap_bps: Sequence[float], cap_bps: Sequence[float]) -> list[float]:
    """`fill_classes` in plain Python on sparse rows ``[(link, coef), ...]``.

    Same algorithm; faster than numpy for the small components the fluid engine
    re-solves at most events (numpy's per-call overhead dominates there).
    """
    n_cls = len(rows)
    rate = [0.0] * n_cls
    load: dict[int, float] = {}
    count: dict[int, int] = {}
    active = []
    for i, row in enumerate(rows):
        if not row:
            rate[i] = cap_bps[i]
            continue
        active.append(i)
        for link, c in row:
            load[link] = load.get(link, 0.0) + c * mult[i]
            count[link] = count.get(link, 0) + 1
    spare = {link: float(link_cap_bps[link]) for link in load}
    level = 0.0
    while active:
        link_level = {link: spare[link] / load[link] for link in load if count[link] > 0}
        best = min(link_level.values(), default=math.inf)
        level = max(level, min(best, min(cap_bps[i] for i in active)))
        threshold = level * (1.0 + REL_TOL)
        saturated = {link for link, v in link_level.items() if v <= threshold}
        newly = [i for i in active
                 if cap_bps[i] <= threshold or any(link in saturated for link, _ in rows[i])]
        if not newly:
            raise RuntimeError("progressive filling made no progress")
        for i in newly:
            rate[i] = min(level, cap_bps[i])
            for link, c in rows[i]:
                w = c * mult[i]
                load[link] -= w
                count[link] -= 1
                spare[link] = max(0.0, spare[link] - w * rate[i])
        frozen = set(newly)
        active = [i for i in active if i not in frozen]
    return rate


def max_min_rates(capacities: Mapping[Link, float] | nx.Graph,
                  flows: Iterable[Flow | tuple],
                  caps_bps: Mapping[Hashable, float] | None = None) -> MaxMinResult:
    """Max-min fair rates of ``flows`` on directed link ``capacities`` (or a graph).

    ``flows`` are `Flow` objects or ``(flow_id, path)`` pairs; ``caps_bps`` adds
    per-flow caps on top of each Flow's own ``cap_bps``.
    """
    caps = as_capacities(capacities)
    flow_list = [as_flow(f) for f in flows]
    ids = [f.flow_id for f in flow_list]
    if len(set(ids)) != len(ids):
        raise ValueError("flow ids must be unique")
    extra = caps_bps or {}

    class_of: dict[tuple, int] = {}
    members: list[list[Hashable]] = []
    cls_flow: list[Flow] = []
    cls_cap: list[float] = []
    for f in flow_list:
        cap = min(f.cap_bps, float(extra.get(f.flow_id, math.inf)))
        key = (f.route_key(), cap)
        if key not in class_of:
            class_of[key] = len(members)
            members.append([])
            cls_flow.append(f)
            cls_cap.append(cap)
        members[class_of[key]].append(f.flow_id)

    links = sorted({link for f in cls_flow for link in f.fractions})
    index = {link: j for j, link in enumerate(links)}
    missing = [link for link in links if link not in caps]
    if missing:
        raise ValueError(f"paths use links that are not in the topology: {missing[:3]}")
    coef = np.zeros((len(cls_flow), len(links)))
    for i, f in enumerate(cls_flow):
        for link, frac in f.fractions.items():
            coef[i, index[link]] = frac
    mult = np.array([len(m) for m in members], dtype=float)
    link_cap = np.array([caps[link] for link in links], dtype=float)
    rate, froze_by = fill_classes(coef, mult, link_cap, np.array(cls_cap, dtype=float))

    rates: dict[Hashable, float] = {}
    bottleneck: dict[Hashable, Link | None] = {}
    for i, ids_i in enumerate(members):
        for fid in ids_i:
            rates[fid] = float(rate[i])
            bottleneck[fid] = links[froze_by[i]] if froze_by[i] >= 0 else None
    load = (coef * (mult * np.where(np.isfinite(rate), rate, 0.0))[:, None]).sum(axis=0)
    link_load = {link: float(load[j]) for j, link in enumerate(links)}
    util = {link: float(load[j] / link_cap[j]) for j, link in enumerate(links)}
    return MaxMinResult(rates, link_load, util, bottleneck)

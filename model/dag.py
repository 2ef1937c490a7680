"""A message DAG with compute gaps, analysed: its critical path, its ranks' timelines,
and the time and bus bandwidth of its collectives, from any message times.

* ``critical_path``: every message alone on the fabric (no sharing), ``overhead +
  path latency + wire bytes / the path's slowest link`` on its routed path
  (`model.alphabeta`'s alpha and beta), posted ``gap_s`` after its last dependency
  (and not before ``start_s``): a lower bound of the DAG's time wherever messages
  share links; `model.alphabeta.predict_workload` prices the sharing (fluid max-min).
* ``rank_timelines``: from each message's post and completion time (measured, or a
  model's) and the DAG's compute segments (``traffic.dagfile.ComputeSegment``), each
  rank's end, its compute, and its exposed time (waiting) split by the dimension (the
  message tag) of the message that ended each wait: a wait for a pipeline stage's
  activation is the pipeline's bubble and counts as ``pp``.
* ``op_stats``: each collective op's time (first post to last completion of its
  messages) and busbw (NCCL-tests' factor of its kind and rank count).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from core.frame import WIRE_FRAME_BYTES
from model.alphabeta import (
    DEFAULT_OVERHEAD_S,
    PathsLike,
    Workload,
    memo_paths,
    path_latency_s,
    roce_wire_factor,
)
from model.busbw import busbw_factor


@dataclass
class DagTimes:
    """Post (ready) and completion time of every message (real s from time zero)."""

    ready_s: dict[Hashable, float]
    finish_s: dict[Hashable, float]
    path: list[Hashable] = field(default_factory=list)   # the critical chain, first first

    @property
    def completion_s(self) -> float:
        return max(self.finish_s.values(), default=0.0)


def message_time_s(graph: nx.Graph, path: Sequence[str], size_bytes: float, *,
                   overhead_s: float = DEFAULT_OVERHEAD_S, wire_factor: float | None = None,
                   packet_bytes: float = WIRE_FRAME_BYTES,
                   forwarding: str = "store-and-forward") -> float:
    """One message alone on ``path``: alpha (overhead, latency) + beta at its slowest link."""
    wire = roce_wire_factor() if wire_factor is None else wire_factor
    bits = 8.0 * wire * size_bytes
    rate_bps = min(float(graph.edges[u, v]["rate_bps"]) for u, v in zip(path[:-1], path[1:],
                                                                         strict=True))
    last = min(packet_bytes, bits / 8.0)
    return overhead_s + path_latency_s(graph, path, last, forwarding) + bits / rate_bps


def critical_path(workload: Workload, graph: nx.Graph, paths: PathsLike,
                  **pricing: Any) -> DagTimes:
    """Every message's post and completion with no link shared (see the module doc);
    ``pricing``: `message_time_s`'s keywords."""
    route = memo_paths(paths)
    ready: dict[Hashable, float] = {}
    finish: dict[Hashable, float] = {}
    last_dep: dict[Hashable, Hashable | None] = {}
    cost: dict[tuple[str, str, float], float] = {}
    for m in _topological(workload.messages):
        deps_done = [(finish[d], d) for d in m.deps]
        latest = max(deps_done, default=(0.0, None))
        ready[m.msg_id] = max(latest[0] + float(getattr(m, "gap_s", 0.0)), float(m.start_s))
        last_dep[m.msg_id] = latest[1]
        key = (m.src, m.dst, float(m.size_bytes))
        if key not in cost:
            cost[key] = message_time_s(graph, route(m.src, m.dst)[0], m.size_bytes, **pricing)
        finish[m.msg_id] = ready[m.msg_id] + cost[key]
    chain: list[Hashable] = []
    node: Hashable | None = max(finish, key=finish.__getitem__) if finish else None
    while node is not None:
        chain.append(node)
        node = last_dep[node]
    return DagTimes(ready, finish, chain[::-1])


def _topological(messages: Sequence[Any]) -> list[Any]:
    by_id = {m.msg_id: m for m in messages}
    done: set[Hashable] = set()
    out: list[Any] = []
    for m in messages:
        stack = [m]
        while stack:
            top = stack[-1]
            if top.msg_id in done:
                stack.pop()
                continue
            todo = [by_id[d] for d in top.deps if d not in done]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            done.add(top.msg_id)
            out.append(top)
    return out


@dataclass
class RankTimeline:
    """One rank's iteration: its end, compute, and waits by dimension (real s)."""

    rank: str
    end_s: float
    compute_s: float
    exposed_s: dict[str, float]
    #: (start, end, what): compute as 'compute', waits as their dimension
    segments: list[tuple[float, float, str]]


def rank_timelines(workload: Workload, ready_s: Mapping[Hashable, float],
                   finish_s: Mapping[Hashable, float]) -> list[RankTimeline]:
    """Every rank's timeline from message times and ``meta['compute']`` (module doc).
    A rank ends at its last compute, or at the last completion of a message it sent or
    received, whichever is later."""
    tag = {m.msg_id: m.tag or "untagged" for m in workload.messages}
    segments: dict[int, list[tuple[float, float, str]]] = {}
    for c in workload.meta.get("compute", ()):
        base, cause = max(((finish_s[d], tag[d]) for d in c.deps), default=(0.0, ""))
        start = base + c.offset_s
        segments.setdefault(c.rank, []).append((start, start + c.duration_s, cause))
    ends: dict[str, tuple[float, str]] = {}
    for m in workload.messages:
        for host in (m.src, m.dst):
            if finish_s[m.msg_id] > ends.get(host, (-math.inf, ""))[0]:
                ends[host] = (finish_s[m.msg_id], tag[m.msg_id])
    out = []
    for r, host in enumerate(workload.ranks):
        exposed: dict[str, float] = {}
        line: list[tuple[float, float, str]] = []
        t = 0.0
        compute = 0.0
        for start, end, cause in sorted(segments.get(r, [])):
            if start > t and cause:
                exposed[cause] = exposed.get(cause, 0.0) + start - t
                line.append((t, start, cause))
            line.append((start, end, "compute"))
            compute += end - start
            t = max(t, end)
        last, cause = ends.get(host, (0.0, ""))
        if last > t:
            exposed[cause] = exposed.get(cause, 0.0) + last - t
            line.append((t, last, cause))
            t = last
        out.append(RankTimeline(host, t, compute, exposed, line))
    return out


@dataclass(frozen=True)
class OpStat:
    """A collective op of the DAG (``meta['ops']``): its time and bus bandwidth."""

    op: str
    collective: str
    tag: str
    size_bytes: int
    ranks: int
    time_s: float
    busbw_bps: float


def op_stats(workload: Workload, ready_s: Mapping[Hashable, float],
             finish_s: Mapping[Hashable, float]) -> list[OpStat]:
    """Each op's first post to last completion and its busbw (module doc)."""
    span: dict[str, list[float]] = {}
    for msg_id, op in workload.meta.get("op_of", {}).items():
        lo_hi = span.setdefault(op, [math.inf, -math.inf])
        lo_hi[0] = min(lo_hi[0], ready_s[msg_id])
        lo_hi[1] = max(lo_hi[1], finish_s[msg_id])
    out = []
    for op, (lo, hi) in span.items():
        spec = workload.meta["ops"][op]
        time_s = hi - lo
        factor = busbw_factor(spec["collective"], spec["ranks"])
        out.append(OpStat(op, spec["collective"], spec.get("tag", ""), spec["size_bytes"],
                          spec["ranks"], time_s,
                          8.0 * spec["size_bytes"] / time_s * factor if time_s > 0 else math.nan))
    return out


def busbw_by(stats: Sequence[OpStat], key: str) -> dict[str, tuple[float, float, int]]:
    """{collective kind or tag: (busbw over all its ops = sum of 8 S factor / sum of
    times, total time, op count)}; ``key``: 'collective' or 'tag'."""
    acc: dict[str, list[float]] = {}
    for s in stats:
        a = acc.setdefault(getattr(s, key), [0.0, 0.0, 0])
        factor = busbw_factor(s.collective, s.ranks)
        a[0] += 8.0 * s.size_bytes * factor
        a[1] += s.time_s
        a[2] += 1
    return {k: (bits / t if t > 0 else math.nan, t, int(n)) for k, (bits, t, n) in acc.items()}

"""Lab 0's reference values: the scenario fabric's routed paths as the handout describes
them, the closed forms of a path's latency and an incast's completion, and the project's
model of the incast and the ring all-reduce (no root, no fabric). The checks compare the
student's answers with these."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from core.frame import MTU_PAYLOAD_BYTES, WIRE_FRAME_BYTES

#: Bytes a full frame adds on the wire beyond its payload: RoCEv2 headers + Ethernet's 24.
FRAME_EXTRA_BYTES = WIRE_FRAME_BYTES - MTU_PAYLOAD_BYTES
NIC_OVERHEAD_S = 1e-6

PathDict = dict[str, list[float]]


@lru_cache(maxsize=4)
def routed_fabric(spec: str) -> tuple[Any, Any, tuple[str, ...]]:
    """The routed graph of a topology, as the model prices it, and its hosts in the
    fabric's order (no root, no fabric)."""
    from topologies.routing import compute_routes, topo_graph
    from topologies.spec import build_topo

    topo = build_topo(spec)
    return topo_graph(topo), compute_routes(topo), tuple(topo.host_nodes())


def path_dict(graph: Any, nodes: Sequence[str]) -> PathDict:
    """A routed path as the handout describes it: per link its rate and propagation,
    per switch its latency."""
    links = list(zip(nodes[:-1], nodes[1:], strict=True))
    return {"rates_bps": [float(graph.edges[u, v]["rate_bps"]) for u, v in links],
            "propagation_s": [float(graph.edges[u, v].get("delay_s", 0.0)) for u, v in links],
            "switch_latency_s": [float(graph.nodes[n].get("switch_latency_s", 0.0))
                                 for n in nodes[1:-1]]}


def incast_hosts(spec: str, n_senders: int) -> tuple[str, list[str]]:
    """The incast experiment's receiver (the first host) and its N nearest senders."""
    _, routes, hosts = routed_fabric(spec)
    receiver = hosts[0]
    dist = routes.distances_to(receiver)
    others = sorted((h for h in hosts if h != receiver), key=lambda h: (dist[h], hosts.index(h)))
    return receiver, others[:n_senders]


def incast_path(spec: str, n_senders: int) -> PathDict:
    """The first sender's first routed path to the receiver (the model's)."""
    graph, routes, _ = routed_fabric(spec)
    receiver, senders = incast_hosts(spec, n_senders)
    return path_dict(graph, routes.paths(senders[0], receiver)[0])


def ring_paths(spec: str) -> list[PathDict]:
    """Every rank's path to its successor on the ring of all hosts in order."""
    graph, routes, hosts = routed_fabric(spec)
    n = len(hosts)
    return [path_dict(graph, routes.paths(hosts[i], hosts[(i + 1) % n])[0]) for i in range(n)]


def closed_latency_s(path: PathDict, frame_bytes: float, last_at_bottleneck: bool = False) -> float:
    """One frame's fixed latency, store and forward at every hop; with
    ``last_at_bottleneck`` the bottleneck's serialization left to a bandwidth term."""
    ser = [8.0 * frame_bytes / r for r in path["rates_bps"]]
    total = sum(ser) - (max(ser) if last_at_bottleneck else 0.0)
    return total + sum(path["propagation_s"]) + sum(path["switch_latency_s"])


def closed_wire_bytes(payload_bytes: float) -> float:
    return payload_bytes + math.ceil(payload_bytes / MTU_PAYLOAD_BYTES) * FRAME_EXTRA_BYTES


def closed_incast_s(n: int, size_bytes: float, path: PathDict, overhead_s: float) -> tuple[float, float]:
    """The incast's completion, both bookkeepings: (last frame counted once, twice)."""
    wire = closed_wire_bytes(size_bytes)
    last = path["rates_bps"][-1]
    frame = min(WIRE_FRAME_BYTES, wire)
    twice = 8.0 * n * wire / last + overhead_s + closed_latency_s(path, frame)
    return twice - 8.0 * frame / last, twice


def model_incast_s(spec: str, n_senders: int, size_bytes: int) -> float:
    """The project's model of the CC-off incast, priced as `emu run incast` does."""
    from model.alphabeta import roce_wire_factor
    from model.incast_predict import predict_incast_on_graph

    graph, routes, _ = routed_fabric(spec)
    receiver, senders = incast_hosts(spec, n_senders)
    pred = predict_incast_on_graph(graph, routes.paths, senders, receiver,
                                   size_bytes * roce_wire_factor(), cc="off",
                                   packet_bytes=WIRE_FRAME_BYTES)
    return float(pred["completion_s"])


@lru_cache(maxsize=16)
def model_ring_s(spec: str, size_bytes: int) -> float:
    """The project's model of a ring all-reduce over every host, as `emu run collective`
    prices it (the message DAG on the routed fabric, fluid max-min)."""
    from model.alphabeta import predict_workload
    from traffic import collectives

    graph, routes, hosts = routed_fabric(spec)
    workload = collectives.build("allreduce-ring", list(hosts), size_bytes)
    return float(predict_workload(workload, graph, routes.paths, mode="spread").completion_s)

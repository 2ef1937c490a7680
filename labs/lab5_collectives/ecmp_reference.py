"""Lab 5's ECMP check's reference values: how a permutation's flows fall on the leaves and
their equal-cost paths, the mean throughput the project's ECMP model gives at its two
extreme hash outcomes, and the model's per-draw means from a run's flows."""

from __future__ import annotations

from typing import Any


def leaf_pairs(spec: str, pairs: list[tuple[str, str]]) -> tuple[int, dict[tuple[str, str], int], int]:
    """Flows within one leaf, flows per (source leaf, destination leaf), and the
    number of equal-cost paths between two leaves."""
    from topologies.routing import compute_routes
    from topologies.spec import build_topo

    routes = compute_routes(build_topo(spec))
    leaf = {h: next(iter(routes.next_hops[h].values()))[0] for h in routes.hosts}
    local, cross, width = 0, {}, 1
    for src, dst in pairs:
        if leaf[src] == leaf[dst]:
            local += 1
        else:
            key = (leaf[src], leaf[dst])
            cross[key] = cross.get(key, 0) + 1
            width = routes.ecmp_width(src, dst)
    return local, cross, width


def permutation_bounds(spec: str, msgs: Any) -> tuple[float, float]:
    """Mean flow throughput (payload bit/s) of the permutation ``msgs`` in the project's
    ECMP model (`experiments.ecmp`: fluid max-min, NIC overhead before the first byte,
    path latency after the last) at its two extreme hash outcomes: every flow on its
    first path (on a leaf-spine, each leaf pair's flows all on one spine) and ECMP
    spread evenly (no collision)."""
    from core.frame import WIRE_FRAME_BYTES
    from model.alphabeta import DEFAULT_OVERHEAD_S, path_latency_s, roce_wire_factor
    from model.fluid import flow_completion_times
    from model.maxmin import make_flow
    from topologies.routing import compute_routes, topo_graph
    from topologies.spec import build_topo

    topo = build_topo(spec)
    routes, graph = compute_routes(topo), topo_graph(topo)
    rows = list(zip(msgs.msg_id, msgs.src, msgs.dst, msgs.size_bytes, strict=True))
    wire = {mid: float(size) * roce_wire_factor() for mid, _, _, size in rows}
    means = []
    for mode in ("hashed", "spread"):
        flows = [make_flow(mid, routes.paths(src, dst), mode=mode, choice=lambda _f, _p: 0)
                 for mid, src, dst, _ in rows]
        fct = flow_completion_times(graph, flows, wire)
        thr = [8.0 * float(size) / (DEFAULT_OVERHEAD_S + fct[mid] + path_latency_s(
                   graph, flow.paths[0], min(WIRE_FRAME_BYTES, wire[mid])))
               for (mid, _, _, size), flow in zip(rows, flows, strict=True)]
        means.append(sum(thr) / len(thr))
    return means[0], means[1]


def model_means(flows: Any, n_flows: int) -> tuple[list[float], Any]:
    """Per-hash-draw mean throughput of the model's rows (draw after draw, n_flows each)
    and each flow's collision-free throughput (its best over the draws)."""
    model = flows[flows.source == "model"].reset_index(drop=True)
    draw = model.index // n_flows
    return list(model.groupby(draw).throughput_bps.mean()), model.groupby("msg_id").throughput_bps.max()

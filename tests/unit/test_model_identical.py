"""The model's predictions are bit for bit those of the slower code they replaced.

The collective experiment prices a ring all-reduce with hashed ECMP draws on the
real-fabric graph and on the graph without the fixed delays the emulator lacks,
spread evenly, and by its bottleneck rate. The fingerprints below were computed by
the code before its speed-up (main at cf7d7ad, 37 s of model per fattree,8 ring):
every completion, ready and finish time, every link's bits, the recomputation count.
"""

from __future__ import annotations

import hashlib

import pytest

from model.alphabeta import (
    predict_workload,
    predict_workload_hashed,
    roce_wire_factor,
    workload_bottleneck_rate_bps,
)
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic import collectives


def fingerprint(predictions: list) -> str:
    h = hashlib.sha256()
    for p in predictions:
        h.update(repr((p.completion_s, sorted(p.finish_s.items()), sorted(p.ready_s.items()),
                       sorted(p.duration_s.items()), p.algbw_bps, p.busbw_bps,
                       p.recomputations, sorted(p.link_bits.items()))).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("spec, collective, draws, expected", [
    ("fattree,4", "allreduce-ring", 4,
     ("1d284bf40c0c1b4e", "84c26c77f79152de", "f3df6cf112f3094d", 400e9)),
    ("fattree,4", "alltoall", 2,
     ("fc5f4704b7fceadd", "61ff845bc599ffba", "d740b8526ca1e222", 400e9)),
    ("fattree,8", "allreduce-ring", 2,
     ("f832be7bdb647da5", "1fa555c2c066a372", "1cc0b00efe9f7bc2", 400e9)),
])
def test_predictions_are_those_of_the_code_before(spec, collective, draws, expected):
    topo = build_topo(spec)
    routes, graph = compute_routes(topo), topo_graph(topo)
    workload = collectives.build(collective, list(topo.hosts()), 4 << 20)
    bare = graph.copy()
    for _, _, data in bare.edges(data=True):
        data["delay_s"] = 0.0
    got = (fingerprint(predict_workload_hashed(workload, graph, routes.paths, samples=draws,
                                               seed=4 << 20)),
           fingerprint(predict_workload_hashed(workload, bare, routes.paths, samples=draws,
                                               seed=4 << 20, forwarding="cut-through",
                                               overhead_s=0.0, wire_factor=roce_wire_factor())),
           fingerprint([predict_workload(workload, graph, routes.paths, mode="spread")]),
           workload_bottleneck_rate_bps(workload, graph, routes.paths, mode="spread"))
    assert got == expected

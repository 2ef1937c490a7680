"""The routing comparison's a priori models (experiments.routing_model), pure."""

from __future__ import annotations

import math

from experiments.routing_model import expect, fabric_links, group_shift, link_load_ratio
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic import collectives


def test_link_load_ratio_counts_idle_links():
    links = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    assert link_load_ratio({("a", "b"): 4.0}, links) == 4.0
    assert link_load_ratio({link: 1.0 for link in links}, links) == 1.0
    assert math.isnan(link_load_ratio({}, links))


def test_group_shift_sends_every_group_to_the_next():
    topo = build_topo("dragonfly,1,2,2")  # 5 groups of 2 routers, 1 host each
    w = group_shift(topo, 1 << 20)
    group = {h: topo.nodeInfo(h)["group"] for h in topo.host_nodes()}
    assert len(w.messages) == len(group) == 10
    assert sorted(m.src for m in w.messages) == sorted(group)
    assert sorted(m.dst for m in w.messages) == sorted(group)  # a permutation
    assert all(group[m.dst] == (group[m.src] + 1) % 5 for m in w.messages)


def test_ideal_bound_beats_every_hash_draw_on_a_fattree_permutation():
    topo = build_topo("fattree,4,fabric_rate=400G,core_rate=400G")
    graph, routes = topo_graph(topo), compute_routes(topo)
    hosts = sorted(topo.host_nodes(), key=lambda h: int(h[1:]))
    w = collectives.build("permutation", hosts, 4 << 20, seed=1)
    e = expect(w, graph, routes, 400e9, samples=20, seed=1)
    assert all(f"{u}" != f"{v}" for u, v in fabric_links(graph))
    # Full bisection: spread evenly, every flow runs at its NIC's rate (~95 % after
    # headers and latency) and no link carries more than another's share.
    assert e.ideal.busbw_bps > 0.9 * 400e9 * 4096 / 4154
    assert all(b <= e.ideal.busbw_bps * (1 + 1e-9) for b in e.ecmp_busbw_bps)
    assert all(s >= e.ideal.completion_s * (1 - 1e-9) for s in e.ecmp_s)
    # Collisions: the expectation is well below the ideal, and loads are uneven.
    assert sum(e.ecmp_busbw_bps) / len(e.ecmp_busbw_bps) < 0.8 * e.ideal.busbw_bps
    assert min(e.ecmp_load) > e.ideal_load
    assert e.latency_p99_s > 0


def test_the_routing_experiments_defaults_pass_its_check_and_group_modes_need_a_dragonfly():
    import pytest

    from core.errors import ParameterError
    from experiments import routing_compare as rc
    from experiments.options import resolve_typed

    _, opts = resolve_typed(rc.Options, rc.OPTIONS, False, {}, rc.check)
    assert "valiant" not in opts.modes and "valiant" in opts.dragonfly_modes
    with pytest.raises(ParameterError, match="dragonfly"):
        resolve_typed(rc.Options, rc.OPTIONS, True, {"modes": "ecmp;valiant"}, rc.check)
    _, ok = resolve_typed(rc.Options, rc.OPTIONS, True,
                          {"modes": "ecmp;ugal", "topos": "dragonfly,1,2,2"}, rc.check)
    assert ok.modes == ["ecmp", "ugal"]


def test_the_routing_experiment_runs_selective_repeat_when_a_mode_reorders():
    from experiments import routing_compare as rc
    from experiments.options import resolve_typed

    def transport(**given: str) -> str:
        _, opts = resolve_typed(rc.Options, rc.OPTIONS, True, given, rc.check)
        return rc.resolved_transport(opts)

    assert rc.OPTIONS["transport"].default == "auto"
    assert transport() == "sr"                                   # spray, adaptive, ...
    assert transport(modes="ecmp", dragonfly="none") == "gbn"
    assert transport(modes="ecmp", dragonfly="dragonfly,1,2,2", dragonfly_modes="ecmp;ugal") == "sr"
    assert transport(modes="ecmp;spray", transport="gbn") == "gbn"  # asked for: kept

"""Max-min fair rates and fluid completion times on hand-worked examples."""

from __future__ import annotations

import networkx as nx
import pytest

from model.fluid import flow_completion_times
from model.maxmin import (
    Flow,
    link_capacities,
    make_flow,
    max_min_rates,
)

G = 1e9


def chain(*rates_bps: float) -> nx.Graph:
    """n0 - n1 - n2 ... with the given per-direction rates."""
    g = nx.Graph()
    for i, r in enumerate(rates_bps):
        g.add_edge(f"n{i}", f"n{i + 1}", rate_bps=r, delay_s=0.0, tier="t")
    return g


def leaf_spine(hosts_per_leaf: int, n_spines: int, uplink_bps: float,
               nic_bps: float = 400 * G) -> nx.Graph:
    """Two leaves l0, l1; hosts h{leaf}{i}; spines s0.. (one uplink per leaf-spine pair)."""
    g = nx.Graph()
    for leaf in range(2):
        g.add_node(f"l{leaf}", role="leaf")
        for i in range(hosts_per_leaf):
            g.add_node(f"h{leaf}{i}", role="host")
            g.add_edge(f"h{leaf}{i}", f"l{leaf}", rate_bps=nic_bps, delay_s=0.0, tier="host-leaf")
        for s in range(n_spines):
            g.add_node(f"s{s}", role="spine")
            g.add_edge(f"l{leaf}", f"s{s}", rate_bps=uplink_bps, delay_s=0.0, tier="leaf-spine")
    return g


def cross_paths(src: str, dst: str, n_spines: int) -> list[tuple[str, ...]]:
    ls, ld = f"l{src[1]}", f"l{dst[1]}"
    return [(src, ls, f"s{s}", ld, dst) for s in range(n_spines)]


def test_capacities_are_per_direction():
    caps = link_capacities(chain(10 * G))
    assert caps == {("n0", "n1"): 10 * G, ("n1", "n0"): 10 * G}


def test_three_flows_one_also_crosses_a_second_bottleneck():
    # Link n0->n1 (30G) carries f1, f2, f3; f1 also crosses n1->n2 (6G).
    # f1 is frozen at 6 by the 6G link; f2, f3 share the rest: (30 - 6) / 2 = 12.
    g = chain(30 * G, 6 * G)
    res = max_min_rates(g, [("f1", ("n0", "n1", "n2")), ("f2", ("n0", "n1")),
                            ("f3", ("n0", "n1"))])
    assert res.rates_bps["f1"] == pytest.approx(6 * G)
    assert res.rates_bps["f2"] == pytest.approx(12 * G)
    assert res.rates_bps["f3"] == pytest.approx(12 * G)
    assert res.bottleneck["f1"] == ("n1", "n2")
    assert res.bottleneck["f2"] == ("n0", "n1")
    assert res.link_utilisation[("n0", "n1")] == pytest.approx(1.0)
    assert res.link_utilisation[("n1", "n2")] == pytest.approx(1.0)


def test_textbook_long_flow_and_two_short_links():
    # Two 1G links in series. Long flow L on both; A and D on the first link, B on
    # the second. First link: 3 flows -> 1/3 each. B gets 1 - 1/3 = 2/3.
    g = chain(1 * G, 1 * G)
    res = max_min_rates(g, [("L", ("n0", "n1", "n2")), ("A", ("n0", "n1")),
                            ("D", ("n0", "n1")), ("B", ("n1", "n2"))])
    assert res.rates_bps["L"] == pytest.approx(G / 3)
    assert res.rates_bps["A"] == pytest.approx(G / 3)
    assert res.rates_bps["D"] == pytest.approx(G / 3)
    assert res.rates_bps["B"] == pytest.approx(2 * G / 3)
    assert res.link_load_bps[("n1", "n2")] == pytest.approx(1 * G)


def test_full_duplex_directions_do_not_share():
    g = chain(400 * G)
    res = max_min_rates(g, [("ab", ("n0", "n1")), ("ba", ("n1", "n0"))])
    assert res.rates_bps == {"ab": pytest.approx(400 * G), "ba": pytest.approx(400 * G)}


def test_rate_cap_leaves_the_rest_to_the_other_flow():
    g = chain(400 * G)
    flows = [Flow("capped", (("n0", "n1"),), cap_bps=100 * G), ("free", ("n0", "n1"))]
    res = max_min_rates(g, flows)
    assert res.rates_bps["capped"] == pytest.approx(100 * G)
    assert res.rates_bps["free"] == pytest.approx(300 * G)
    assert res.bottleneck["capped"] is None
    # caps can also be given per flow id
    res2 = max_min_rates(g, [("a", ("n0", "n1")), ("b", ("n0", "n1"))], caps_bps={"a": 50 * G})
    assert res2.rates_bps["b"] == pytest.approx(350 * G)


def test_ecmp_spread_versus_hashed_collision():
    # 2 leaves x 2 hosts, 2 spines, 400G everywhere. Two cross-leaf flows.
    g = leaf_spine(2, 2, 400 * G)
    pa, pb = cross_paths("h00", "h10", 2), cross_paths("h01", "h11", 2)
    spread = max_min_rates(g, [make_flow("a", pa), make_flow("b", pb)])
    # each uplink carries half of each flow: 0.5 ra + 0.5 rb <= 400 and NICs cap 400
    assert spread.rates_bps["a"] == pytest.approx(400 * G)
    assert spread.rates_bps["b"] == pytest.approx(400 * G)
    both_s0 = {"a": 0, "b": 0}
    hashed = max_min_rates(g, [make_flow("a", pa, mode="hashed", choice=both_s0),
                               make_flow("b", pb, mode="hashed", choice=both_s0)])
    assert hashed.rates_bps["a"] == pytest.approx(200 * G)
    assert hashed.rates_bps["b"] == pytest.approx(200 * G)
    assert hashed.bottleneck["a"] in {("l0", "s0"), ("s0", "l1")}
    apart = max_min_rates(g, [make_flow("a", pa, mode="hashed", choice={"a": 0}),
                              make_flow("b", pb, mode="hashed", choice={"b": 1})])
    assert apart.rates_bps["a"] == pytest.approx(400 * G)
    # a callable choice returning a path works too
    fa = make_flow("a", pa, mode="hashed", choice=lambda fid, paths: paths[1])
    assert fa.paths == (pa[1],)


def test_oversubscribed_uplink_is_the_bottleneck():
    # 4 hosts per leaf at 400G, one 800G uplink (2:1). Four cross-leaf flows share
    # l0->s0: 800 / 4 = 200G each, below the 400G NICs.
    g = leaf_spine(4, 1, 800 * G)
    flows = [make_flow(i, cross_paths(f"h0{i}", f"h1{i}", 1)) for i in range(4)]
    res = max_min_rates(g, flows)
    for i in range(4):
        assert res.rates_bps[i] == pytest.approx(200 * G)
        assert res.bottleneck[i] == ("l0", "s0")
    assert res.link_utilisation[("h00", "l0")] == pytest.approx(0.5)


def test_weighted_split_over_paths():
    # 75% of flow x on the 100G link path via m1, 25% via m2 (100G too).
    # The m1 path saturates when 0.75 r = 100G -> r = 133.3G.
    g = nx.Graph()
    for m in ("m1", "m2"):
        g.add_edge("a", m, rate_bps=100 * G)
        g.add_edge(m, "b", rate_bps=100 * G)
    f = Flow("x", (("a", "m1", "b"), ("a", "m2", "b")), weights=(3.0, 1.0))
    res = max_min_rates(g, [f])
    assert res.rates_bps["x"] == pytest.approx(400 * G / 3)
    assert res.link_utilisation[("a", "m2")] == pytest.approx(1 / 3)


def test_unknown_link_is_an_error():
    with pytest.raises(ValueError):
        max_min_rates(chain(G), [("f", ("n0", "n9"))])


def test_fct_two_flows_share_then_one_speeds_up():
    # 8 Gb/s = 1e9 B/s. A: 100 MB, B: 300 MB. Both at 0.5e9 B/s: A done at 0.2 s
    # (100 MB). B has 200 MB left at 1e9 B/s: done at 0.4 s.
    g = chain(8 * G)
    flows = [("A", ("n0", "n1")), ("B", ("n0", "n1"))]
    fct = flow_completion_times(g, flows, {"A": 100e6, "B": 300e6})
    assert fct["A"] == pytest.approx(0.2)
    assert fct["B"] == pytest.approx(0.4)


def test_fct_with_a_late_start():
    # A (150 MB) alone at 1e9 B/s for 0.1 s -> 50 MB left; B (300 MB) starts at 0.1.
    # Shared 0.5e9 B/s: A ends at 0.2. B sent 50 MB by then, 250 MB alone -> 0.45.
    g = chain(8 * G)
    fct = flow_completion_times(g, [("A", ("n0", "n1")), ("B", ("n0", "n1"))],
                                {"A": 150e6, "B": 300e6}, start_s={"B": 0.1})
    assert fct["A"] == pytest.approx(0.2)
    assert fct["B"] == pytest.approx(0.45 - 0.1)


def test_fct_rates_reallocated_across_two_bottlenecks():
    # Long flow L (n0->n2) and short flow A (n0->n1) on two 8G links.
    # Both 4G on n0->n1; the n1->n2 link holds only L. A (50 MB) done at 0.1 s;
    # L then has 1e9 B/s: L = 150 MB -> 50 MB by 0.1 s, 100 MB more -> 0.2 s.
    g = chain(8 * G, 8 * G)
    fct = flow_completion_times(g, [("L", ("n0", "n1", "n2")), ("A", ("n0", "n1"))],
                                {"L": 150e6, "A": 50e6})
    assert fct["A"] == pytest.approx(0.1)
    assert fct["L"] == pytest.approx(0.2)


def test_numpy_and_python_fillers_agree():
    # The fluid engine solves small components in Python and large ones with numpy.
    import numpy as np

    from model.maxmin import fill_classes, fill_sparse

    rng = np.random.default_rng(7)
    n_cls, n_links = 80, 30
    coef = np.where(rng.random((n_cls, n_links)) < 0.15, rng.random((n_cls, n_links)), 0.0)
    coef[:, 0] += 0.01                         # every class crosses at least one link
    mult = rng.integers(1, 4, n_cls).astype(float)
    link_cap = rng.uniform(1, 10, n_links) * G
    caps = np.where(rng.random(n_cls) < 0.2, 0.05 * G, np.inf)
    dense, _ = fill_classes(coef, mult, link_cap, caps)
    rows = [[(k, float(coef[i, k])) for k in np.flatnonzero(coef[i])] for i in range(n_cls)]
    sparse = fill_sparse(rows, mult.tolist(), link_cap.tolist(), caps.tolist())
    assert np.allclose(dense, sparse, rtol=1e-9)
    # feasibility: no link over capacity, and every class is capped or on a full link
    load = (coef * (mult * dense)[:, None]).sum(axis=0)
    assert np.all(load <= link_cap * (1 + 1e-9))
    full = load >= link_cap * (1 - 1e-9)
    assert np.all((dense >= caps * (1 - 1e-9)) | (coef[:, full] > 0).any(axis=1))

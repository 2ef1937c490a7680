"""Per-switch ECMP hashing plans and the polarization check (pure, no kernel)."""

from __future__ import annotations

import pytest

from core.errors import ParameterError
from emu.ecmp_hashing import (
    F_SRC_PORT,
    FIELD_SETS,
    FIELDS_SYSCTL,
    FIVE_TUPLE,
    POLICY_SYSCTL,
    SEED_SYSCTL,
    choose_mechanism,
    ecmp_check,
    hash_conflicts,
    plan_hashing,
)
from topologies.routing import compute_routes
from topologies.spec import build_topo


@pytest.fixture(scope="module")
def fattree():
    topo = build_topo("fattree,4")
    return topo, compute_routes(topo)


def test_mechanism_by_capability():
    assert choose_mechanism("auto", ("seed", "fields", "shared")) == "seed"
    assert choose_mechanism("auto", ("fields", "shared")) == "fields"  # Linux 5.12 .. 6.10
    assert choose_mechanism("auto", ("shared",)) == "shared"
    assert choose_mechanism("fields", ("seed", "fields", "shared")) == "fields"
    with pytest.raises(ParameterError, match="lacks it"):
        choose_mechanism("seed", ("fields", "shared"))
    with pytest.raises(ParameterError):
        choose_mechanism("random", ("shared",))


def test_field_sets_all_hash_the_source_port_and_differ():
    assert len(set(FIELD_SETS)) == 16
    assert all(f & F_SRC_PORT for f in FIELD_SETS)
    assert FIELD_SETS[0] == FIVE_TUPLE == 0x37  # the 5-tuple first: what policy 1 hashes


def test_fat_tree_conflicts_are_edge_agg_pairs_of_a_pod(fattree):
    topo, routes = fattree
    pairs = hash_conflicts(routes, topo.switch_nodes())
    # 4 pods x 2 edges x 2 aggs; cores have one way down, so never choose
    assert len(pairs) == 16
    assert {"".join(sorted(s[0] for s in p)) for p in pairs} == {"ae"}


def test_fields_plan_gives_conflicting_switches_different_sets(fattree):
    topo, routes = fattree
    plan = plan_hashing("fields", routes, topo.switch_nodes())
    pairs = hash_conflicts(routes, topo.switch_nodes())
    assert all(plan.field_sets[a] != plan.field_sets[b] for a, b in map(tuple, pairs))
    assert plan.correlated_pairs == 0 and plan.summary()["ecmp_hash_independent"]
    assert all(v[POLICY_SYSCTL] == 3 and v[FIELDS_SYSCTL] in FIELD_SETS for v in plan.sysctls.values())


def test_seed_and_shared_plans(fattree):
    topo, routes = fattree
    seed = plan_hashing("seed", routes, topo.switch_nodes())
    assert len({v[SEED_SYSCTL] for v in seed.sysctls.values()}) == len(topo.switch_nodes())
    # The 5-tuple as custom fields: policy 1 would reuse the receive-steering hash,
    # one function for every switch.
    assert all(v[POLICY_SYSCTL] == 3 and v[FIELDS_SYSCTL] == FIVE_TUPLE
               for v in seed.sysctls.values())
    assert seed.summary()["ecmp_hash_independent"]
    shared = plan_hashing("shared", routes, topo.switch_nodes())
    assert shared.summary()["ecmp_hash_independent"] is False
    assert shared.summary()["ecmp_correlated_pairs"] == 16


def _two_tier_counts(routes, src, dst, agg_split, core_split):
    """Flows per switch egress of one src -> dst burst, as counts per port."""
    edge = routes.next_hops[src][dst][0]
    a1, a2 = routes.next_hops[edge][dst]
    counts = {(edge, a1): agg_split[0], (edge, a2): agg_split[1]}
    for agg, split in ((a1, core_split[0]), (a2, core_split[1])):
        c1, c2 = routes.next_hops[agg][dst]
        counts[(agg, c1)], counts[(agg, c2)] = split
    return counts


def test_check_flags_a_polarized_fabric_and_passes_a_spread_one(fattree):
    topo, routes = fattree
    src, dst = "h1", topo.host_nodes()[-1]
    # Polarized: the agg sends every flow it got up its first core link.
    polar = _two_tier_counts(routes, src, dst, (30, 34), ((30, 0), (34, 0)))
    res = ecmp_check(routes, topo.switch_nodes(), polar, max_flow_units=1)
    assert not res.ok and len(res.reasons) == 2 and "polarized" in res.reasons[0]
    spread = _two_tier_counts(routes, src, dst, (30, 34), ((14, 16), (20, 14)))
    assert ecmp_check(routes, topo.switch_nodes(), spread, max_flow_units=1).ok


def test_check_does_not_blame_chance_on_few_flows(fattree):
    topo, routes = fattree
    src, dst = "h1", topo.host_nodes()[-1]
    # 3 flows at one agg, all up one link: P = 2 * 2^-3 = 0.25, plain luck.
    few = _two_tier_counts(routes, src, dst, (3, 0), ((3, 0), (0, 0)))
    assert ecmp_check(routes, topo.switch_nodes(), few, max_flow_units=1).ok
    # Bytes: 64 KB through a group whose flows carry up to 64 KB each is >= 1 flow only.
    one = _two_tier_counts(routes, src, dst, (65536, 0), ((65536, 0), (0, 0)))
    assert ecmp_check(routes, topo.switch_nodes(), one, max_flow_units=65536).ok
    with pytest.raises(ParameterError):
        ecmp_check(routes, topo.switch_nodes(), few, max_flow_units=0)


def test_a_member_over_a_link_taken_down_is_not_blamed_on_the_hash(fattree):
    topo, routes = fattree
    src, dst = "h1", topo.host_nodes()[-1]
    # The first agg's first core link went down: every flow took the other one.
    counts = _two_tier_counts(routes, src, dst, (30, 34), ((30, 0), (14, 20)))
    agg = routes.next_hops[routes.next_hops[src][dst][0]][dst][0]
    dead = frozenset((agg, routes.next_hops[agg][dst][1]))
    assert not ecmp_check(routes, topo.switch_nodes(), counts, max_flow_units=1).ok
    res = ecmp_check(routes, topo.switch_nodes(), counts, max_flow_units=1, links_down={dead})
    assert res.ok
    # Only that switch's group is excused: polarization elsewhere is still caught.
    polar = _two_tier_counts(routes, src, dst, (30, 34), ((30, 0), (34, 0)))
    assert len(ecmp_check(routes, topo.switch_nodes(), polar, max_flow_units=1,
                          links_down={dead}).reasons) == 1

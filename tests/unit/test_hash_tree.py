"""The per-hop hash draw laid out once per host pair (`model.alphabeta.hash_tree`)
picks the very paths, in the very order, of the walk over the paths it replaced,
and leaves the random generator in the same state: the model's hashed predictions
do not change."""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence

import pytest

from model.alphabeta import memo_paths, per_hop_hash_choice
from topologies.routing import compute_routes
from topologies.spec import build_topo


def walk_choice(rng: random.Random):
    """The draw as it was computed before: a walk over the remaining paths per hop."""
    def choose(flow_id: Hashable, paths: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
        cands = list(paths)
        depth = 1
        while len(cands) > 1:
            hops = sorted({p[depth] for p in cands})
            pick = hops[0] if depth == 1 else rng.choice(hops)
            cands = [p for p in cands if p[depth] == pick]
            depth += 1
        return tuple(cands[0])
    return choose


@pytest.mark.parametrize("spec", ["fattree,4", "fattree,8", "leafspine,4,2,2",
                                  "dragonfly,p=2,a=2,h=1"])
@pytest.mark.parametrize("seed", [0, 7, 4 << 20])
def test_same_paths_and_generator_state_as_the_walk(spec, seed):
    topo = build_topo(spec)
    route = memo_paths(compute_routes(topo).paths)
    hosts = list(topo.hosts())
    # Every ordered pair, twice, in a shuffled order: draws over pairs seen before too.
    pairs = [(s, d) for s in hosts for d in hosts if s != d] * 2
    random.Random(seed).shuffle(pairs)
    pairs = pairs[:4000]
    old_rng, new_rng = random.Random(seed), random.Random(seed)
    old, new = walk_choice(old_rng), per_hop_hash_choice(new_rng, {})
    assert [new(i, route(s, d)) for i, (s, d) in enumerate(pairs)] == \
        [old(i, route(s, d)) for i, (s, d) in enumerate(pairs)]
    assert new_rng.getstate() == old_rng.getstate()


def test_unequal_branches_and_single_next_hops_draw_as_the_walk():
    # b splits again, a does not; after x the only next hop is y, which the walk still
    # draws from (a draw of one), then z1 or z2; t is not the host's first next hop.
    paths = [("h", "s", "a", "d", "f", "e"), ("h", "s", "b", "c1", "f", "e"),
             ("h", "s", "b", "c2", "f", "e"), ("h", "s", "x", "y", "z1", "e"),
             ("h", "s", "x", "y", "z2", "e"), ("h", "t", "a", "d", "f", "e")]
    old_rng, new_rng = random.Random(5), random.Random(5)
    old, new = walk_choice(old_rng), per_hop_hash_choice(new_rng)
    assert [new(k, paths) for k in range(500)] == [old(k, paths) for k in range(500)]
    assert new_rng.getstate() == old_rng.getstate()

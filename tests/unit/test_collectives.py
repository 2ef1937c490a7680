"""Collective DAGs: structure, textbook volumes and symbolic reduction semantics."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from core.errors import ParameterError
from core.messages import Workload
from traffic.collectives import NAMES, build, busbw_factor

NS = (2, 3, 4, 8)
SIZES = (1, 1000, 4096, 1 << 20)
CHUNKS = (None, 700)


def hosts(n: int) -> list[str]:
    return [f"h{i + 1}" for i in range(n)]


def volumes(w: Workload) -> tuple[Counter, Counter]:
    sent, recv = Counter(), Counter()
    for m in w.messages:
        sent[m.src] += m.size_bytes
        recv[m.dst] += m.size_bytes
    return sent, recv


def units_of(w: Workload, m) -> range:
    unit = w.meta["unit_bytes"]
    assert m.size_bytes % unit == 0
    return range(m.chunk, m.chunk + m.size_bytes // unit)


def random_topological_order(w: Workload, rng: random.Random) -> list:
    """Any order the engine could complete the messages in (deps first)."""
    waiting = {m.msg_id: set(m.deps) for m in w.messages}
    done: list = []
    ready = [m for m in w.messages if not m.deps]
    while ready:
        m = ready.pop(rng.randrange(len(ready)))
        done.append(m)
        for other in w.messages:
            if m.msg_id in waiting[other.msg_id]:
                waiting[other.msg_id].discard(m.msg_id)
                if not waiting[other.msg_id]:
                    ready.append(other)
    assert len(done) == len(w.messages), "deps form a cycle or dangle"
    return done


def simulate(w: Workload, initial: dict[int, dict[int, Counter]], seed: int) -> list[dict]:
    """Run the DAG on symbolic data: each unit is a multiset of contributing ranks."""
    rank_of = {h: r for r, h in enumerate(w.ranks)}
    state = [{u: Counter(c) for u, c in initial[r].items()} for r in range(len(w.ranks))]
    for m in random_topological_order(w, random.Random(seed)):
        src, dst = rank_of[m.src], rank_of[m.dst]
        for u in units_of(w, m):
            data = Counter(state[src].get(u, Counter()))
            state[dst][u] = state[dst].get(u, Counter()) + data if m.reduce else data
    return state


def n_units(w: Workload) -> int:
    return w.meta["padded_size_bytes"] // w.meta["unit_bytes"]


def everyone_has_all(n: int, u_count: int) -> dict[int, dict[int, Counter]]:
    return {r: {u: Counter({r: 1}) for u in range(u_count)} for r in range(n)}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_dag_is_well_formed(name, n, chunk):
    opts = {"gpus_per_server": 2 if n % 2 == 0 else n} if name == "allreduce-hier" else {}
    w = build(name, hosts(n), 100_000, chunk_bytes=chunk, **opts)
    assert [m.msg_id for m in w.messages] == list(range(len(w.messages)))
    for m in w.messages:
        assert all(0 <= d < m.msg_id for d in m.deps)
        assert len(set(m.deps)) == len(m.deps)
        assert m.src != m.dst and m.size_bytes > 0
        if chunk is not None:
            assert m.size_bytes <= chunk
    assert w.meta["padded_size_bytes"] >= 100_000
    assert w.meta["padded_size_bytes"] - 100_000 < n * w.meta["unit_bytes"]


def ring_share(n: int, padded: int, factor: int) -> int:
    return factor * (n - 1) * padded // n


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_textbook_volumes(n, size, chunk):
    expected_share = {"allreduce-ring": 2, "allgather": 1, "reducescatter": 1, "alltoall": 1}
    for name, factor in expected_share.items():
        w = build(name, hosts(n), size, chunk_bytes=chunk)
        sent, recv = volumes(w)
        want = ring_share(n, w.meta["padded_size_bytes"], factor)
        assert all(sent[h] == want and recv[h] == want for h in w.ranks), name
    if n & (n - 1) == 0:
        w = build("allreduce-hd", hosts(n), size, chunk_bytes=chunk)
        sent, recv = volumes(w)
        want = ring_share(n, w.meta["padded_size_bytes"], 2)
        assert all(sent[h] == want and recv[h] == want for h in w.ranks)
    w = build("incast", hosts(n), size, chunk_bytes=chunk, root=n - 1)
    sent, recv = volumes(w)
    padded = w.meta["padded_size_bytes"]
    assert all(sent[h] == padded for h in w.ranks[:-1]) and recv[w.ranks[-1]] == (n - 1) * padded
    assert sent[w.ranks[-1]] == 0
    for name in ("permutation", "broadcast"):
        w = build(name, hosts(n), size, chunk_bytes=chunk)
        sent, recv = volumes(w)
        assert sum(sent.values()) == (n - 1 if name == "broadcast" else n) * padded
        assert all(recv[h] == padded for h in w.ranks[1:])


def test_hd_fold_volumes_for_non_power_of_two():
    w = build("allreduce-hd", hosts(6), 4096)  # p = 4, ranks 4 and 5 fold into 0 and 1
    sent, recv = volumes(w)
    s = w.meta["padded_size_bytes"]
    assert sent["h5"] == recv["h5"] == sent["h6"] == recv["h6"] == s
    assert sent["h1"] == recv["h1"] == s + 2 * 3 * s // 4
    assert sent["h3"] == recv["h3"] == 2 * 3 * s // 4


@pytest.mark.parametrize("gpus, n", [(4, 8), (2, 8), (1, 4), (4, 4), (3, 6)])
def test_hierarchical_volumes(gpus, n):
    w = build("allreduce-hier", hosts(n), 1 << 20, gpus_per_server=gpus)
    s, m = w.meta["padded_size_bytes"], n // gpus
    want = 2 * (gpus - 1) * s // gpus + 2 * (m - 1) * (s // gpus) // m
    sent, recv = volumes(w)
    assert all(sent[h] == want and recv[h] == want for h in w.ranks)
    intra = [x for x in w.messages if x.tag.startswith("intra")]
    assert all((int(x.src[1:]) - 1) // gpus == (int(x.dst[1:]) - 1) // gpus for x in intra)


ALLREDUCES = [("allreduce-ring", {}), ("allreduce-hd", {}),
              ("allreduce-hier", {"gpus_per_server": 2})]


@pytest.mark.parametrize("name, opts", ALLREDUCES)
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("seed", range(3))
def test_allreduce_semantics(name, opts, n, chunk, seed):
    if name == "allreduce-hier" and n % 2:
        opts = {"server_of": [r % 3 for r in range(n)]}  # 3 servers, any n divisible by 3
    w = build(name, hosts(n), 10_000, chunk_bytes=chunk, **opts)
    state = simulate(w, everyone_has_all(n, n_units(w)), seed)
    full = Counter(range(n))
    for r in range(n):
        assert all(state[r][u] == full for u in range(n_units(w))), (r, state[r])


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("chunk", CHUNKS)
def test_reducescatter_and_allgather_semantics(n, chunk):
    w = build("reducescatter", hosts(n), 10_000, chunk_bytes=chunk)
    k = n_units(w) // n
    state = simulate(w, everyone_has_all(n, n_units(w)), seed=n)
    for r in range(n):
        assert all(state[r][u] == Counter(range(n)) for u in range(r * k, (r + 1) * k))
    w = build("allgather", hosts(n), 10_000, chunk_bytes=chunk)
    k = n_units(w) // n
    initial = {r: {u: Counter({r: 1}) for u in range(r * k, (r + 1) * k)} for r in range(n)}
    state = simulate(w, initial, seed=n)
    for r in range(n):
        assert all(state[r][u] == Counter({u // k: 1}) for u in range(n_units(w)))


@pytest.mark.parametrize("n", NS)
def test_broadcast_and_pairwise_patterns(n):
    w = build("broadcast", hosts(n), 10_000, chunk_bytes=1000, root=1)
    initial = {r: ({u: Counter({1: 1}) for u in range(n_units(w))} if r == 1 else {})
               for r in range(n)}
    state = simulate(w, initial, seed=0)
    assert all(state[r][u] == Counter({1: 1}) for r in range(n) for u in range(n_units(w)))
    w = build("alltoall", hosts(n), 10_000)
    pairs = Counter((m.src, m.dst) for m in w.messages)
    assert len(pairs) == n * (n - 1) and not any(m.deps for m in w.messages)
    w = build("permutation", hosts(n), 10_000, seed=7)
    dsts = [m.dst for m in w.messages]
    assert sorted(dsts) == sorted(w.ranks) and all(m.src != m.dst for m in w.messages)
    assert [m.dst for m in build("permutation", hosts(n), 10_000, seed=7).messages] == dsts


def test_chunking_pipelines_ring_steps():
    w = build("allreduce-ring", hosts(4), 1 << 20, chunk_bytes=64 << 10)
    by_id = {m.msg_id: m for m in w.messages}
    chained = [m for m in w.messages if m.deps]
    assert chained and all(by_id[d].chunk == m.chunk for m in chained for d in m.deps)
    assert len(w.messages) == 2 * 3 * 4 * 4  # 2(n-1) steps x n ranks x 4 chunks of 64 KiB


def test_semantic_check_detects_a_missing_message():
    w = build("allreduce-ring", hosts(4), 4096)
    w.messages.pop(5)  # later deps still name it; drop those references
    w.messages[:] = [m.__class__(**{**m.__dict__, "deps": tuple(d for d in m.deps if d != 5)})
                     for m in w.messages]
    state = simulate(w, everyone_has_all(4, n_units(w)), seed=0)
    assert any(state[r][u] != Counter(range(4)) for r in range(4) for u in range(n_units(w)))


def test_semantic_check_detects_a_missing_dependency():
    w = build("allreduce-ring", hosts(4), 4096)
    w.messages[:] = [m.__class__(**{**m.__dict__, "deps": ()}) for m in w.messages]
    broken = False
    for seed in range(20):
        state = simulate(w, everyone_has_all(4, n_units(w)), seed)
        broken |= any(state[r][u] != Counter(range(4)) for r in range(4) for u in range(4))
    assert broken


def test_busbw_factors():
    assert busbw_factor("allreduce-ring", 4) == busbw_factor("allreduce-hier", 4) == 1.5
    assert busbw_factor("allgather", 4) == busbw_factor("reducescatter", 4) == 0.75
    assert busbw_factor("alltoall", 8) == 7 / 8
    assert busbw_factor("broadcast", 8) == busbw_factor("incast", 8) == 1.0
    assert busbw_factor("permutation", 3) == 1.0


@pytest.mark.parametrize("kwargs, match", [
    ({"name": "allreduce-bogus"}, "allreduce-ring, allreduce-hd"),
    ({"size_bytes": 0}, "size_bytes"),
    ({"size_bytes": -5}, "size_bytes"),
    ({"ranks": ["h1"]}, "at least 2"),
    ({"ranks": ["h1", "h1"]}, "own host"),
    ({"chunk_bytes": 0}, "chunk_bytes"),
    ({"name": "broadcast", "root": 4}, "root"),
    ({"name": "allreduce-hier"}, "gpus_per_server"),
    ({"name": "allreduce-hier", "gpus_per_server": 3}, "divide"),
    ({"name": "allreduce-hier", "server_of": [0, 0, 0, 1]}, "same number"),
])
def test_bad_parameters(kwargs, match):
    args = {"name": "allreduce-ring", "ranks": hosts(4), "size_bytes": 4096, **kwargs}
    with pytest.raises(ParameterError, match=match):
        build(**args)

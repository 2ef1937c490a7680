"""experiments.modelcache: a case's hashed draws priced once per topology and seed,
read back float for float; anything the answer depends on changes the file."""

from __future__ import annotations

import os

import pytest

import experiments.modelcache as mc
from model.alphabeta import DEFAULT_OVERHEAD_S, predict_workload_hashed, roce_wire_factor
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic import collectives


@pytest.fixture
def case(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICEMU_CACHE", str(tmp_path))
    monkeypatch.delenv("FABRICEMU_MODEL_CACHE", raising=False)
    topo = build_topo("fattree,4")
    workload = collectives.build("allreduce-ring", list(topo.hosts()), 1 << 20)
    return workload, topo_graph(topo), compute_routes(topo).paths, tmp_path / "model"


def summary(draws):
    return [(p.completion_s, p.algbw_bps, p.busbw_bps, p.recomputations,
             sorted(p.link_bits.items())) for p in draws]


def test_cached_draws_are_the_computed_ones(case, monkeypatch):
    # Priced in forked processes where there are two CPUs: the same floats.
    workload, graph, paths, directory = case
    fresh = predict_workload_hashed(workload, graph, paths, samples=3, seed=5, overhead_s=0.0)
    first = mc.hashed_draws(workload, graph, paths, samples=3, seed=5, overhead_s=0.0)
    assert len(list(directory.glob("*.json"))) == 1

    def priced_again(*args, **kwargs):
        raise AssertionError("priced again instead of read from the cache")
    monkeypatch.setattr(mc, "_price", priced_again)
    again = mc.hashed_draws(workload, graph, paths, samples=3, seed=5, overhead_s=0.0)
    assert summary(again) == summary(first) == summary(fresh)
    assert all(not p.finish_s for p in again + first)  # never the per-message times


def test_seed_options_graph_and_model_source_make_new_entries(case, monkeypatch):
    workload, graph, paths, directory = case
    mc.hashed_draws(workload, graph, paths, samples=2, seed=1)
    mc.hashed_draws(workload, graph, paths, samples=2, seed=2)
    mc.hashed_draws(workload, graph, paths, samples=2, seed=1, overhead_s=0.0)
    slower = graph.copy()
    next(iter(slower.edges(data=True)))[2]["rate_bps"] /= 2
    mc.hashed_draws(workload, slower, paths, samples=2, seed=1)
    assert len(list(directory.glob("*.json"))) == 4
    key = mc.case_key(workload, graph, paths, 2, 1, {})
    # A default spelled out is the same call (the emulable pricing of a run that
    # emulates every fixed delay); a value off the default is not.
    defaults = {"forwarding": "store-and-forward", "wire_factor": roce_wire_factor(),
                "overhead_s": DEFAULT_OVERHEAD_S}
    assert mc.case_key(workload, graph, paths, 2, 1, defaults) == key
    assert mc.case_key(workload, graph, paths, 2, 1, {"wire_factor": 1.0}) != key
    assert mc.case_key(workload, graph, paths, 2, 1, {"forwarding": "cut-through"}) != key
    monkeypatch.setattr(mc, "_model_source_sha256", lambda: "another model")
    assert mc.case_key(workload, graph, paths, 2, 1, {}) != key


def test_off_unsafe_or_foreign_files_are_priced_afresh(case, monkeypatch):
    workload, graph, paths, directory = case
    monkeypatch.setenv("FABRICEMU_MODEL_CACHE", "off")
    mc.hashed_draws(workload, graph, paths, samples=2, seed=1)
    assert not directory.exists()
    monkeypatch.delenv("FABRICEMU_MODEL_CACHE")
    first = mc.hashed_draws(workload, graph, paths, samples=2, seed=1)
    (entry,) = directory.glob("*.json")
    os.chmod(entry, 0o666)  # writable by others: not trusted, priced again
    assert summary(mc.hashed_draws(workload, graph, paths, samples=2, seed=1)) == summary(first)
    assert entry.stat().st_mode & 0o777 == 0o644  # written anew
    os.chmod(directory, 0o777)  # the directory too: nothing cached
    assert mc._directory() is None


def test_the_spread_prediction_is_cached_apart_from_the_draws(case, monkeypatch):
    """Zero draws: never a hashed call's file, and read back float for float."""
    from model.alphabeta import predict_workload
    workload, graph, paths, directory = case
    fresh = predict_workload(workload, graph, paths, mode="spread")
    first = mc.spread_prediction(workload, graph, paths)
    mc.hashed_draws(workload, graph, paths, samples=1, seed=0)
    assert len(list(directory.glob("*.json"))) == 2

    def priced_again(*args, **kwargs):
        raise AssertionError("priced again instead of read from the cache")
    monkeypatch.setattr(mc, "predict_workload", priced_again)
    again = mc.spread_prediction(workload, graph, paths)
    assert summary([again]) == summary([first]) == summary([fresh])
    assert fresh.finish_s and not again.finish_s

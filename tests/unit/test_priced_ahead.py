"""experiments.modelcache.PricedAhead: pricing done in a forked process lands in the
cache the parent reads; leaving the block ends it and its pool; off without a cache."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

import experiments.modelcache as mc
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic import collectives


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FABRICEMU_CACHE", str(tmp_path))
    monkeypatch.delenv("FABRICEMU_MODEL_CACHE", raising=False)
    return tmp_path


def test_priced_ahead_is_read_by_the_parent(cache, monkeypatch):
    topo = build_topo("fattree,4")
    workload = collectives.build("allreduce-ring", list(topo.hosts()), 1 << 20)
    graph, paths = topo_graph(topo), compute_routes(topo).paths
    with mc.PricedAhead(lambda: mc.hashed_draws(workload, graph, paths, samples=2,
                                                seed=3)) as ahead:
        assert ahead.process is not None
        ahead.wait()

    def priced_again(*args, **kwargs):
        raise AssertionError("priced again instead of read from the cache")
    monkeypatch.setattr(mc, "_price", priced_again)
    assert len(mc.hashed_draws(workload, graph, paths, samples=2, seed=3)) == 2


def _fails() -> None:
    raise RuntimeError("priced nothing")


def test_the_parent_gets_what_was_priced_or_none(cache):
    with mc.PricedAhead(lambda: {("fattree,4", "ring"): [1.5, 2.5]}) as ahead:
        ahead.wait()
    assert ahead.result == {("fattree,4", "ring"): [1.5, 2.5]}
    with mc.PricedAhead(_fails) as ahead:
        ahead.wait()
    assert ahead.result is None


def _note_and_sleep(path: str) -> None:
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(60)


def _slow_pool(path: str) -> None:
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(_note_and_sleep, [path, path], chunksize=1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_leaving_the_block_ends_it_and_its_pool(cache):
    noted = cache / "pids"
    started = time.monotonic()
    with mc.PricedAhead(lambda: _slow_pool(str(noted))) as ahead:
        process = ahead.process
        while len(noted.read_text().split() if noted.exists() else []) < 2:
            assert time.monotonic() - started < 30, "the pool never started"
            time.sleep(0.05)
    assert process is not None and not process.is_alive()
    pids = [int(p) for p in noted.read_text().split()]
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)   # the pool's workers are reaped by the pricing process
    assert not any(_alive(p) for p in pids)


def test_nothing_forked_when_caching_is_off(monkeypatch):
    monkeypatch.setenv("FABRICEMU_MODEL_CACHE", "off")
    ran = Path("/nonexistent")
    with mc.PricedAhead(lambda: ran.touch()) as ahead:
        assert ahead.process is None
        ahead.wait()


class _Frames:
    def __init__(self) -> None:
        self.frames: list[tuple] = []

    def frame(self, name, df, **labels) -> None:
        self.frames.append((name, df, labels))


def test_curves_priced_ahead_are_recorded_not_priced_again(monkeypatch):
    import experiments.collective as collective

    def priced_again(*args, **kwargs):
        raise AssertionError("the curve was priced again")
    priced = {("fattree,4", "allreduce-ring"): "curve A"}
    monkeypatch.setattr(collective, "model_curve", priced_again)
    run = _Frames()
    collective.record_model_curves(run, {"f4": "fattree,4"}, ["allreduce-ring"], [1 << 20], 2,
                                   priced=priced)
    assert run.frames == [("busbw_model", "curve A",
                           {"fabric": "f4", "collective": "allreduce-ring"})]
    monkeypatch.setattr(collective, "model_curve", lambda *a: f"priced {a[1]}")
    collective.record_model_curves(run, {"f4": "fattree,4"}, ["alltoall"], [1 << 20], 2,
                                   priced=priced)
    assert run.frames[-1][1] == "priced alltoall"


def test_an_incast_predicted_ahead_on_an_unbuilt_fabric_is_the_one_predicted_after(
        cache, monkeypatch):
    """The incast experiment predicts DCQCN's cases while the fabric is built, its
    realisations in forked processes: from its topology and routes alone, float for
    float what the parent predicts itself, and what one CPU predicts in turn."""
    from core import forkmap
    from core.ecn import Thresholds
    from emu.fabric import Fabric
    from experiments import incast

    fab = Fabric(build_topo("fattree,4"))          # constructed, never started
    receiver = fab.hosts[0]
    senders = incast.nearest_senders(fab, receiver, 3)
    t = Thresholds.from_text("100K/400K", 0.01)
    assert [incast.model_of(cc, "paper") for cc in ("off", "dcqcn", "dctcp")] == \
        ["off", "dcqcn", None]
    with mc.PricedAhead(lambda: incast._predict_cases(fab, senders, receiver, 256 << 10,
                                                      ["dcqcn"], t, "paper")) as ahead:
        ahead.wait()
    here = incast.predict_case(fab, senders, receiver, 256 << 10, "dcqcn", t, "paper")
    assert ahead.result == {"dcqcn": here}
    assert here["completion_s"] > 0 and here["realisations"] > 1
    monkeypatch.setattr(forkmap.os, "sched_getaffinity", lambda _pid: {0})
    assert incast.predict_case(fab, senders, receiver, 256 << 10, "dcqcn", t, "paper") == here
    assert incast.predict_case(fab, senders, receiver, 256 << 10, "dctcp", t, "paper") == {}

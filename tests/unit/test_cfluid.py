"""The compiled fluid event loop (engine/cfluid.py) gives the Python loop's floats.

Random job sets on random links (shared links: components of many jobs, priced by
the Python solver through the callback; caps; jobs without a link; empty jobs;
dependencies with gaps, releases, overheads and latencies) are run through both
loops and every time compared exactly; the pinned fingerprints of the model's
predictions hold with the compiled loop installed; a cycle and a stall fail alike.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import pytest

import model.fluid as fluid
from engine.cfluid import compiled_event_loop
from model.fluid import FluidJob, FluidResult
from tests.unit import test_model_identical as pinned

COMPILED = compiled_event_loop()
pytestmark = pytest.mark.skipif(COMPILED is None, reason="engine/csrc/fluid_loop.c does not build "
                                "here (no clang)")


@pytest.fixture
def compiled() -> Iterator[None]:
    fluid.use_event_loop(COMPILED)
    try:
        yield
    finally:
        fluid.use_event_loop(None)


def random_case(rng: random.Random, n_jobs: int, n_links: int) -> tuple[list, dict]:
    links = [(f"n{k}", f"n{k + 1}") for k in range(n_links)]
    capacities = {link: rng.choice([1e9, 2.5e9, 1e10, 4e10]) for link in links}
    paths = [{link: rng.choice([1.0, 0.5, 0.25]) for link in rng.sample(links, rng.randint(1, min(4, n_links)))}
             for _ in range(max(1, n_jobs // 6))]
    jobs = []
    for i in range(n_jobs):
        kind = rng.random()
        fractions = {} if kind < 0.05 else rng.choice(paths)
        cap = rng.choice([math.inf, math.inf, 3e9]) if fractions else rng.choice([math.inf, 5e9])
        deps = tuple(rng.sample(range(i), rng.randint(0, min(i, 3))))
        jobs.append(FluidJob(job_id=i, fractions=fractions,
                             size_bits=0.0 if kind > 0.97 else rng.uniform(1e3, 1e8),
                             cap_bps=cap, release_s=rng.choice([0.0, 0.0, rng.uniform(0, 1e-3)]),
                             deps=deps, pre_s=rng.choice([0.0, 2e-6]),
                             post_s=rng.choice([0.0, 1e-6, 3.3e-6]),
                             gap_s=rng.choice([0.0, 0.0, 5e-6])))
    return jobs, capacities


def outcome(result: FluidResult) -> tuple:
    return (sorted(result.ready_s.items()), sorted(result.start_s.items()),
            sorted(result.drained_s.items()), sorted(result.finish_s.items()),
            result.recomputations)


@pytest.mark.parametrize("seed", range(12))
def test_random_fabrics_give_the_python_loops_floats(seed: int) -> None:
    rng = random.Random(seed)
    jobs, capacities = random_case(rng, rng.choice([20, 120, 400]), rng.choice([3, 12, 40]))
    python = fluid.simulate(jobs, capacities)
    fluid.use_event_loop(COMPILED)
    try:
        compiled = fluid.simulate(jobs, capacities)
    finally:
        fluid.use_event_loop(None)
    assert outcome(compiled) == outcome(python)
    assert python.recomputations > 1


@pytest.mark.parametrize("spec, collective, draws, expected",
                         [p for p in pinned.test_predictions_are_those_of_the_code_before
                          .pytestmark[0].args[1] if p[0] == "fattree,4"])
def test_the_pinned_predictions_hold_compiled(compiled: None, spec: str, collective: str,
                                              draws: int, expected: tuple) -> None:
    pinned.test_predictions_are_those_of_the_code_before(spec, collective, draws, expected)


def test_a_cycle_and_a_stall_fail_as_in_python(compiled: None) -> None:
    link = ("a", "b")
    cycle = [FluidJob(0, {link: 1.0}, 1e3, deps=(1,)), FluidJob(1, {link: 1.0}, 1e3, deps=(0,))]
    with pytest.raises(ValueError, match="dependency cycle"):
        fluid.simulate(cycle, {link: 1e9})
    with pytest.raises(RuntimeError, match="stalled"):
        fluid.simulate([FluidJob(0, {link: 1.0}, 1e3)], {link: 0.0})


@pytest.mark.parametrize("loop", [None, COMPILED], ids=["python", "compiled"])
@pytest.mark.parametrize("seed", range(4))
def test_runs_sharing_one_dag_give_each_run_alones_floats(loop: object, seed: int) -> None:
    """A `FluidDag` laid out once serves runs of the same jobs on other paths (hashed
    ECMP's draws): each gives what it gives laid out alone, and no run counts down the
    dependencies of the next."""
    rng = random.Random(seed)
    jobs, capacities = random_case(rng, 150, 12)
    dag = fluid.FluidDag(jobs)
    fluid.use_event_loop(loop)  # type: ignore[arg-type]
    try:
        for _ in range(3):
            paths = [job.fractions for job in rng.sample(jobs, len(jobs))]
            draw = [job._replace(fractions=f, post_s=rng.choice([0.0, 1e-6]))
                    for job, f in zip(jobs, paths, strict=True)]
            assert outcome(fluid.simulate(draw, capacities, dag)) == \
                outcome(fluid.simulate(draw, capacities))
        with pytest.raises(ValueError, match="the DAG has 150 jobs, the run 149"):
            fluid.simulate(jobs[:-1], capacities, dag)
    finally:
        fluid.use_event_loop(None)

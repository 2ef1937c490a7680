"""`simulate` runs with the cyclic collector paused (`core.gcpause`) and gives the
fluid's answer."""

from __future__ import annotations

import gc

import pytest

from model.fluid import FluidJob, simulate


def test_simulate_pauses_it_and_answers_alike():
    seen = []

    class Probe(dict):   # the fractions mapping, read while the run is set up
        def items(self):
            seen.append(gc.isenabled())
            return super().items()

    jobs = [FluidJob("a", Probe({("x", "y"): 1.0}), 8e6), FluidJob("b", {("x", "y"): 1.0}, 4e6,
                                                                     deps=("a",))]
    got = simulate(jobs, {("x", "y"): 1e9})
    assert seen and not any(seen)
    assert got.finish_s == {"a": pytest.approx(8e-3, rel=1e-12), "b": pytest.approx(12e-3, rel=1e-12)}

"""How many workers the engine starts: as few as the workload's peak frame rate needs."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from core.frame import WIRE_FRAME_BYTES
from core.messages import Message, Workload
from core.scaling import Scale
from engine.run import WORKER_FRAMES_PER_S, EngineConfig, _plans, auto_workers
from tests.unit.test_engine_cc import _Fabric


@pytest.mark.parametrize(("fps", "cpus", "want"), [
    (0.0, 4, 1), (1.0, 4, 1), (WORKER_FRAMES_PER_S, 4, 1), (WORKER_FRAMES_PER_S + 1, 4, 2),
    (3.5 * WORKER_FRAMES_PER_S, 4, 4), (3.5 * WORKER_FRAMES_PER_S, 2, 2), (1e9, 1, 1)])
def test_one_worker_per_share_of_the_peak_frame_rate(fps, cpus, want):
    assert auto_workers(fps, cpus) == want


def _n_workers(scale: float, workers: int | None = None) -> int:
    fab = _Fabric()
    fab.scale = Scale(scale)
    # Both hosts send: two 100G NICs' full frames, all at once.
    wl = Workload("w", [Message(1, "h1", "h2", 1 << 20), Message(2, "h2", "h1", 1 << 20)],
                  ["h1", "h2"], 1 << 20)
    config = replace(EngineConfig(cc="off", workers=workers), fixed_delays=False)
    return len(_plans(fab, wl, config, {1: 0, 2: 1}, 0))


def test_the_plans_follow_the_sending_nics_line_rate_and_s():
    peak_fps_at_1 = 2 * 100e9 / (8 * WIRE_FRAME_BYTES)      # both NICs, S = 1
    light = peak_fps_at_1 / WORKER_FRAMES_PER_S            # the S at which one worker is full
    cpus = len(os.sched_getaffinity(0))
    assert _n_workers(light * 1.01) == 1
    assert _n_workers(light / 1.01) == min(2, cpus)         # never more than hosts or CPUs
    # A setting is kept (within the CPUs and hosts).
    assert _n_workers(light * 1.01, workers=2) == min(2, cpus)
    assert _n_workers(light / 1.01, workers=1) == 1

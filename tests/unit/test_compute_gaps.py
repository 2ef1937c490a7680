"""Compute gaps (``Message.gap_s``): the engine's plan and the model both post a
message its gap after its last dependency completed, and not before its start."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from core.errors import ParameterError
from core.frame import MTU_PAYLOAD_BYTES as MTU
from core.messages import Message, Workload
from core.scaling import Scale
from engine.run import EngineConfig, _check_workload, _plans, frame_rates
from model.alphabeta import predict_workload
from tests.unit.test_engine_cc import _Fabric
from tests.unit.test_engine_workers import FRAME_BITS, _msg
from tests.unit.test_model_alphabeta import IDEAL, MIB, star, star_paths


def test_the_model_posts_a_message_its_gap_after_its_last_dependency():
    # As test_dag_dependencies_and_release_time: alpha = 2 us, beta = 20.97152 us.
    beta_s, alpha_s = 20.97152e-6, 2e-6
    msgs = [Message(0, "h0", "h1", MIB, gap_s=5e-6),              # from time zero
            Message(1, "h1", "h2", MIB, deps=(0,), gap_s=30e-6),
            Message(2, "h2", "h0", MIB, deps=(0,), gap_s=1e-6, start_s=200e-6)]
    pred = predict_workload(Workload("w", msgs, ["h0", "h1", "h2"], MIB), star(3),
                            star_paths, overhead_s=1e-6, **IDEAL)
    assert pred.ready_s[0] == pytest.approx(5e-6)
    first = 5e-6 + alpha_s + beta_s
    assert pred.finish_s[0] == pytest.approx(first)
    assert pred.ready_s[1] == pytest.approx(first + 30e-6)
    assert pred.finish_s[1] == pytest.approx(first + 30e-6 + alpha_s + beta_s)
    assert pred.ready_s[2] == pytest.approx(200e-6)   # its start is later than dep + gap


def test_the_engine_plans_the_gap_dilated_and_a_root_gap_as_its_start():
    fab = _Fabric()     # S = 1000
    wl = Workload("w", [Message(1, "h1", "h2", 1 << 20, gap_s=3e-6, start_s=1e-6),
                        Message(2, "h2", "h1", 1 << 20, deps=(1,), gap_s=7e-6)],
                  ["h1", "h2"], 1 << 20)
    config = replace(EngineConfig(cc="off", workers=1), fixed_delays=False)
    (worker,) = _plans(fab, wl, config, _check_workload(fab, wl), 0)
    root, child = sorted(worker.sends, key=lambda p: p.index)
    assert root.start_emu_ns == 3_000_000 and root.gap_emu_ns == 3_000_000
    assert child.start_emu_ns == 0 and child.gap_emu_ns == 7_000_000


@pytest.mark.parametrize("gap_s", [-1e-6, math.inf, math.nan])
def test_a_bad_gap_is_refused(gap_s):
    fab = _Fabric()
    wl = Workload("w", [Message(1, "h1", "h2", 100, gap_s=gap_s)], ["h1", "h2"], 100)
    with pytest.raises(ParameterError, match="gap_s"):
        _check_workload(fab, wl)


def test_the_expected_schedule_counts_the_gap():
    rate = {("a", "eth0"): 100e9, ("b", "eth0"): 100e9}
    frame_ns = FRAME_BITS / 100e9 * 1e9
    # 10 frames, a gap of 20 frame times, 10 more: 20 frames over 40 frame times.
    chain = [_msg(0, "a", 10 * MTU), replace(_msg(1, "b", 10 * MTU, deps=(0,)),
                                             gap_emu_ns=round(20 * frame_ns))]
    r = frame_rates(chain, rate, MTU, Scale(1.0), [2, 2])
    assert r.mean == pytest.approx(20 / (40 * frame_ns * 1e-9), rel=1e-4)

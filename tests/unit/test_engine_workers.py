"""How many workers the engine starts: enough for the workload's peak frame rate and
its mean rate of frames across links at S, as few as that."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from core.frame import HEADER_BYTES, WIRE_FRAME_BYTES, WIRE_OVERHEAD_BYTES
from core.frame import MTU_PAYLOAD_BYTES as MTU
from core.messages import Message, Workload
from core.scaling import Scale
from engine.plan import MsgPlan
from engine.run import (
    ACK_PER_MESSAGE,
    DEFAULT_ACKS_EVERY,
    WORKER_MEAN_LINK_FRAMES_PER_S,
    WORKER_PEAK_FRAMES_PER_S,
    EngineConfig,
    FrameRates,
    _plans,
    ack_weight,
    auto_workers,
    frame_rates,
)
from tests.unit.test_engine_cc import _Fabric

PEAK, MEAN = WORKER_PEAK_FRAMES_PER_S, WORKER_MEAN_LINK_FRAMES_PER_S
FRAME_BITS = 8 * WIRE_FRAME_BYTES


@pytest.mark.parametrize(("peak", "mean", "cpus", "want"), [
    (0.0, 0.0, 4, 1), (PEAK, MEAN, 4, 1),
    (PEAK + 1, 1.0, 4, 2),                  # a burst of every NIC at once is too much
    (PEAK, MEAN + 1, 4, 2),                 # so is the average (an all-to-all's long paths)
    (3.5 * PEAK, MEAN, 4, 4), (3.5 * PEAK, MEAN, 2, 2), (1e9, 1e9, 1, 1)])
def test_enough_workers_for_the_burst_and_the_mean(peak, mean, cpus, want):
    assert auto_workers(FrameRates(peak, 0.0, mean), cpus) == want


def _msg(index: int, src: str, size: int, deps: tuple[int, ...] = (), start_ns: int = 0,
         delay_ns: int = 0) -> MsgPlan:
    return MsgPlan(index=index, msg_id=index + 1, src=src, dst="x", size_bytes=size, deps=deps,
                   start_emu_ns=start_ns, flow=None, reply_flow=None,  # type: ignore[arg-type]
                   reply_ifname="eth0", ifname="eth0", fwd_delay_emu_ns=delay_ns)


def test_frame_rates_of_an_ideal_fabric():
    rate = {("a", "eth0"): 100e9, ("b", "eth0"): 100e9}
    frame_ns = FRAME_BITS / 100e9 * 1e9                 # at S = 1
    # Two NICs, one 10-frame message each at once: both busy for 10 frames.
    # Their paths cross 2 and 3 links.
    r = frame_rates([_msg(0, "a", 10 * MTU), _msg(1, "b", 10 * MTU)], rate, MTU, Scale(1.0), [2, 3])
    assert r.peak == pytest.approx(2 * 100e9 / FRAME_BITS)
    assert r.mean == pytest.approx(r.peak)
    assert r.mean_links == pytest.approx(2.5 * r.mean)
    # A chain through a fixed delay of 10 frame times: 20 frames over 40 frame times,
    # whatever the order the messages are listed in.
    chain = [_msg(0, "b", 10 * MTU, deps=(1,), delay_ns=round(10 * frame_ns)),
             _msg(1, "a", 10 * MTU, delay_ns=round(10 * frame_ns))]
    r = frame_rates(chain, rate, MTU, Scale(1.0), [2, 2])
    assert r.mean == pytest.approx(20 / (40 * frame_ns * 1e-9), rel=1e-4)   # delays are whole ns
    # One NIC's messages queue: 2 x 10 frames on "a" take 20 frame times. At S = 10
    # every rate is ten times lower.
    r = frame_rates([_msg(0, "a", 10 * MTU), _msg(1, "a", 10 * MTU)], rate, MTU, Scale(10.0), [2, 2])
    assert r.mean == pytest.approx(20 / (20 * frame_ns * 10 * 1e-9))
    assert r.peak == pytest.approx(100e9 / 10 / FRAME_BITS)   # one sending NIC
    # A late start counts from its start time.
    r = frame_rates([_msg(0, "a", 10 * MTU, start_ns=round(30 * frame_ns))], rate, MTU, Scale(1.0), [2])
    assert r.mean == pytest.approx(10 / (40 * frame_ns * 1e-9), rel=1e-4)   # delays are whole ns


def test_acks_beyond_the_default_coalescing_count_as_frames():
    assert ack_weight(DEFAULT_ACKS_EVERY) == 1.0
    assert ack_weight(1) == pytest.approx(2 - 1 / DEFAULT_ACKS_EVERY)     # HPCC's per frame
    assert ack_weight(4) == pytest.approx(1 + 1 / 4 - 1 / DEFAULT_ACKS_EVERY)
    assert ack_weight(1000) == 1.0               # fewer ACKs than measured: no discount
    # The same two NICs as above, an ACK per frame: every rate 2 - 1/16 times.
    rate = {("a", "eth0"): 100e9, ("b", "eth0"): 100e9}
    msgs = [_msg(0, "a", 10 * MTU), _msg(1, "b", 10 * MTU)]
    base = frame_rates(msgs, rate, MTU, Scale(1.0), [2, 3])
    acked = frame_rates(msgs, rate, MTU, Scale(1.0), [2, 3], lambda rate_bps, n: 1)
    w = 2 - 1 / DEFAULT_ACKS_EVERY
    assert (acked.peak, acked.mean, acked.mean_links) == pytest.approx(
        (w * base.peak, w * base.mean, w * base.mean_links))


def test_frames_per_ack_follows_the_responders_settings():
    frame_bits = 8 * (MTU + HEADER_BYTES + WIRE_OVERHEAD_BYTES)
    assert EngineConfig(cc="hpcc").frames_per_ack(400e9, 1000) == 1          # per frame
    assert EngineConfig(cc="dcqcn").frames_per_ack(400e9, 1000) == DEFAULT_ACKS_EVERY
    assert EngineConfig(cc="off", ack_coalesce=ACK_PER_MESSAGE).frames_per_ack(1e9, 70) == 70
    # DCTCP's delayed-ACK timer (1 us) fires before 16 frames arrive at 100G: an ACK
    # per frame that arrived in that microsecond.
    assert EngineConfig(cc="dctcp").frames_per_ack(100e9, 1000) == 1 + int(1e-6 * 100e9
                                                                            // frame_bits)
    assert EngineConfig(cc="dctcp").frames_per_ack(1e12, 1000) == DEFAULT_ACKS_EVERY


def _n_workers(scale: float, workers: int | None = None) -> int:
    fab = _Fabric()
    fab.scale = Scale(scale)
    # Both hosts send at once: two 100G NICs' full frames, busy together throughout.
    wl = Workload("w", [Message(1, "h1", "h2", 1 << 20), Message(2, "h2", "h1", 1 << 20)],
                  ["h1", "h2"], 1 << 20)
    config = replace(EngineConfig(cc="off", workers=workers), fixed_delays=False)
    return len(_plans(fab, wl, config, {1: 0, 2: 1}, 0))


def test_the_plans_follow_the_frame_rates_at_s():
    # Two 100G NICs, peak = mean (always both busy), two links each (h1 -> l1 -> h2):
    # the S above which one worker keeps up with both.
    light = max(2 * 100e9 / FRAME_BITS / PEAK, 2 * 2 * 100e9 / FRAME_BITS / MEAN)
    cpus = len(os.sched_getaffinity(0))
    assert _n_workers(light * 1.01) == 1
    assert _n_workers(light / 1.01) == min(2, cpus)    # never more than hosts or CPUs
    # A setting is kept (within the CPUs and hosts).
    assert _n_workers(light * 1.01, workers=2) == min(2, cpus)
    assert _n_workers(light / 1.01, workers=1) == 1

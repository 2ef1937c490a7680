"""Replay plans: a pcap is read and judged (hosts, wall time, gaps) without any fabric."""

from __future__ import annotations

import pytest

from core.errors import ParameterError
from core.scaling import Scale
from emu.fabric import Fabric
from engine.replay import DEFAULT_MAX_WALL_S, plan_replay
from topologies.spec import build_topo
from traffic.pcap import PcapError, read_roce_pcap, write_pcap
from traffic.workload_pcap import collective_pcap


def fabric(scale: float = 4000, topo: str = "fattree,4") -> Fabric:
    return Fabric(build_topo(topo), Scale(scale))  # planned, never started: no root needed


@pytest.fixture(scope="module")
def a2a(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "a2a.pcap"
    collective_pcap("alltoall", 4, 64 * 1024, path)
    return path, read_roce_pcap(path)


@pytest.fixture
def gap_pcap(a2a, tmp_path):
    _, frames = a2a
    half = len(frames) // 2
    path = tmp_path / "gap.pcap"
    write_pcap(path, frames[:half] + [(t + 3600, f) for t, f in frames[half:]])  # an idle hour
    return path, frames, half


def test_plan_of_a_plain_pcap(a2a):
    path, frames = a2a
    plan = plan_replay(path, fabric())
    span_s = frames[-1][0] - frames[0][0]
    assert plan.frames == len(frames) and plan.compressed_gaps == 0
    assert plan.span_s == pytest.approx(span_s) and plan.captured_span_s == pytest.approx(span_s)
    assert plan.wall_s == pytest.approx(4000 * span_s)


def test_an_idle_hour_is_refused(gap_pcap):
    path, _, half = gap_pcap
    with pytest.raises(PcapError, match=rf"would take 167 days .* longest gap 60 min before "
                                        rf"frame {half + 1}\), above the 10 min limit"):
        plan_replay(path, fabric())
    assert DEFAULT_MAX_WALL_S == 600


def test_gaps_can_be_shortened(gap_pcap):
    path, frames, half = gap_pcap
    plan = plan_replay(path, fabric(), max_gap_s=1e-6)
    assert plan.compressed_gaps >= 1 and plan.longest_gap_s == pytest.approx(3600, abs=1e-3)
    assert plan.captured_span_s == pytest.approx(3600 + frames[-1][0] - frames[0][0], abs=1e-6)
    assert plan.span_s <= frames[-1][0] - frames[0][0] + 1e-6  # the hour is gone
    assert plan.wall_s == pytest.approx(4000 * plan.span_s)


def test_the_wall_limit_can_be_raised(gap_pcap):
    path, _, _ = gap_pcap
    plan = plan_replay(path, fabric(1000), max_wall_s=4e6)
    assert plan.wall_s == pytest.approx(3.6e6, abs=1)


def test_addresses_must_be_hosts_of_the_fabric(a2a):
    path, _ = a2a
    with pytest.raises(PcapError, match=r"address 10\.0\.0\.[34] is not a host of this fabric "
                                        r"\(2 hosts, 10\.0\.0\.1 \.\. 10\.0\.0\.2\)"):
        plan_replay(path, fabric(topo="leafspine,1,1,2"))


def test_traffic_must_cross_the_fabric(a2a, tmp_path):
    _, frames = a2a
    loop = bytearray(frames[0][1])
    loop[30:34] = loop[26:30]
    path = tmp_path / "loop.pcap"
    write_pcap(path, [frames[0], (frames[0][0], bytes(loop))])
    with pytest.raises(PcapError, match="frame 2 of the pcap goes from h1 to itself"):
        plan_replay(path, fabric())


def test_bad_limits_are_refused(a2a):
    path, _ = a2a
    with pytest.raises(ParameterError, match="max_gap_s"):
        plan_replay(path, fabric(), max_gap_s=-1.0)
    with pytest.raises(ParameterError, match="max_wall_s"):
        plan_replay(path, fabric(), max_wall_s=0.0)


def test_frames_are_capped(a2a):
    path, frames = a2a
    with pytest.raises(PcapError, match="holds more than 10 RoCEv2 frames"):
        plan_replay(path, fabric(), max_frames=10)
    assert plan_replay(path, fabric(),
                       max_frames=len(frames)).frames == len(frames)

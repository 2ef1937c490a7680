"""The frame-level routing model (model/adaptive.py) on cases computed by hand, and the
routing report's use of it (experiments.routing_model.frame_estimate)."""

from __future__ import annotations

import pytest

from core.errors import ParameterError
from core.messages import Message, Workload
from experiments.routing_model import frame_estimate
from model.adaptive import Flow, estimate, flows_of, ideal_s
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic import collectives

# leafspine,2,2,2: hosts at 400G, 15 ns; leaf-spine links 150 ns; 600 ns per switch.
NIC_FRAME_PS = 83_560     # 4178 wire bytes at 400 Gb/s
HALF_FRAME_PS = 167_120   # at 200 Gb/s
FRAMES = 64
SIZE = FRAMES * 4096


def _fabric(fabric_rate: str):
    topo = build_topo(f"leafspine,2,2,2,fabric_rate={fabric_rate}")
    return topo_graph(topo), compute_routes(topo)


def _one_flow_path_ps() -> int:
    """h1 -> l1 -> spine -> l2 -> h3, the last frame unloaded, fabric at half the NIC's rate."""
    serialize = NIC_FRAME_PS + 2 * HALF_FRAME_PS + NIC_FRAME_PS
    return serialize + 2 * 15_000 + 2 * 150_000 + 3 * 600_000


@pytest.mark.parametrize("mode", ["spray-rr", "adaptive"])
def test_splitting_one_flow_over_two_half_rate_paths_is_exactly_ideal(mode):
    # frames alternate over the two spines, so each 200G uplink gets one frame per
    # two NIC frame times: no queue anywhere, and the last frame leaves at 63 T
    graph, routes = _fabric("200G")
    run = estimate(graph, routes, [Flow("h1", "h3", SIZE)], mode, acks_every=0,
                   timing_noise_s=0, start_phase=False)
    expected_ps = (FRAMES - 1) * NIC_FRAME_PS + _one_flow_path_ps()
    assert run.completion_s * 1e12 == pytest.approx(expected_ps, abs=1)
    assert run.ideal_s * 1e12 == pytest.approx(expected_ps, abs=1)
    assert run.link_bytes["l1", "s1"] == run.link_bytes["l1", "s2"] == FRAMES // 2 * 4178


def test_one_path_for_that_flow_takes_twice_as_long():
    # ECMP keeps the flow on one 200G spine link: 64 frames at 2 T each
    graph, routes = _fabric("200G")
    run = estimate(graph, routes, [Flow("h1", "h3", SIZE)], "ecmp", acks_every=0,
                   timing_noise_s=0, start_phase=False)
    expected_ps = NIC_FRAME_PS + FRAMES * HALF_FRAME_PS + HALF_FRAME_PS + NIC_FRAME_PS \
        + 2 * 15_000 + 2 * 150_000 + 3 * 600_000
    assert run.completion_s * 1e12 == pytest.approx(expected_ps, abs=1)


def test_an_ecmp_collision_halves_the_shared_link():
    # two flows leaf 1 -> leaf 2 at full rate: hashed apart they run at line rate,
    # hashed together the shared uplink carries 128 frames, 64 frame times more
    graph, routes = _fabric("400G")
    flows = [Flow("h1", "h3", SIZE), Flow("h2", "h4", SIZE)]
    runs = [estimate(graph, routes, flows, "ecmp", seed=s, acks_every=0, timing_noise_s=0, start_phase=False)
            for s in range(12)]
    extra_frames = [(r.completion_s - r.ideal_s) * 1e12 / NIC_FRAME_PS for r in runs]
    collided = [x for x in extra_frames if x > 32]
    assert collided and len(collided) < len(runs)
    assert all(x == pytest.approx(FRAMES, abs=1.01) for x in collided)
    assert all(x <= 1.01 for x in extra_frames if x <= 32)


def test_acks_are_counted_on_the_reverse_links():
    graph, routes = _fabric("400G")
    run = estimate(graph, routes, [Flow("h1", "h3", SIZE)], "spray", acks_every=16)
    assert run.link_bytes["h1", "l1"] == FRAMES * 4178
    assert run.link_bytes["h3", "l2"] == FRAMES // 16 * (62 + 24)


def test_random_spray_on_the_fattree_permutation_stays_below_the_ideal():
    topo = build_topo("fattree,4,fabric_rate=400G,core_rate=400G")
    graph, routes = topo_graph(topo), compute_routes(topo)
    flows = flows_of(collectives.build("permutation", list(topo.host_nodes()), 1 << 20, seed=1))
    run = estimate(graph, routes, flows, "spray", seed=3)
    # every host sends its 256 frames and, as a receiver, 16 ACKs
    assert sum(run.link_bytes[f.src, next(iter(graph[f.src]))] for f in flows) \
        == len(flows) * (256 * 4178 + 16 * 86)
    assert 0.8 < run.ratio < 1.0


def test_bad_input_is_a_parameter_error():
    graph, routes = _fabric("400G")
    with pytest.raises(ParameterError):
        estimate(graph, routes, [Flow("h1", "h3", SIZE)], "valiant")
    with pytest.raises(ParameterError):
        estimate(graph, routes, [Flow("h1", "h3", SIZE)], "spray", timing_noise_s=-1)
    waits = Workload("chain", [Message(0, "h1", "h3", SIZE), Message(1, "h3", "h1", SIZE,
                                                                     deps=(0,))], ["h1", "h3"], SIZE)
    with pytest.raises(ParameterError):
        flows_of(waits)


def test_the_routing_report_prices_small_one_shot_workloads_and_skips_the_rest():
    topo = build_topo("leafspine,2,2,2")
    graph, routes = topo_graph(topo), compute_routes(topo)
    small = collectives.build("permutation", list(topo.host_nodes()), 64 << 10, seed=1)
    runs = frame_estimate(small, graph, routes, "adaptive")
    assert not isinstance(runs, str) and len(runs) == 12
    assert all(0.5 < r.ratio <= 1.0 for r in runs)
    large = collectives.build("permutation", list(topo.host_nodes()), 1 << 30, seed=1)
    assert "too long" in frame_estimate(large, graph, routes, "spray")
    ring = collectives.build("allreduce-ring", list(topo.host_nodes()), 1 << 20)
    assert "wait" in frame_estimate(ring, graph, routes, "spray")


@pytest.mark.parametrize("flows", [[Flow("h1", "h3", SIZE), Flow("h1", "h4", SIZE)],
                                   [Flow("h1", "h3", SIZE), Flow("h2", "h3", SIZE)]])
def test_the_ideal_of_two_flows_through_one_nic_is_twice_one_flows(flows):
    # out of one sender or into one receiver: 128 frames through its 400G link, the
    # last crossing a 400G path (4 links, 3 switches)
    graph, routes = _fabric("400G")
    crossing_ps = 4 * NIC_FRAME_PS + 2 * 15_000 + 2 * 150_000 + 3 * 600_000
    assert ideal_s(graph, routes, flows) * 1e12 == pytest.approx(
        (2 * FRAMES - 1) * NIC_FRAME_PS + crossing_ps, abs=1)
    run = estimate(graph, routes, flows, "spray-rr", acks_every=0, timing_noise_s=0, start_phase=False)
    assert run.ratio == pytest.approx(1.0, abs=2 * NIC_FRAME_PS / run.completion_s / 1e12)

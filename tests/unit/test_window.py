"""traffic.window: IRN's BDP window, computed by hand on two fabrics, and the
settings a run may give."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from core.errors import ParameterError
from core.frame import WIRE_FRAME_BYTES
from engine.run import EngineConfig
from experiments.routing_compare import _note_loss, _parse_window
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic.fixeddelay import round_trip_s
from traffic.selective_repeat import WINDOW_PACKETS
from traffic.window import bdp_window_packets, check_window


def _fabric(spec: str):
    topo = build_topo(spec)
    return topo_graph(topo), compute_routes(topo)


def test_the_bdp_window_is_the_longest_round_trip_at_line_rate_plus_the_ack_coalescing():
    graph, routes = _fabric("fattree,4,fabric_rate=400G,core_rate=400G")
    near, far = ("h1", "h2"), ("h1", "h16")  # same edge switch; across the core
    rtt_far = round_trip_s(graph, routes.paths, *far)
    assert rtt_far > round_trip_s(graph, routes.paths, *near)
    frames = math.ceil(rtt_far * 400e9 / (8 * WIRE_FRAME_BYTES))
    assert bdp_window_packets(graph, routes, {near, far}, "ecmp", 16) == frames + 16
    assert bdp_window_packets(graph, routes, {far}, "spray", 0) == frames
    # the near pair alone needs fewer
    assert bdp_window_packets(graph, routes, {near}, "ecmp", 0) < frames


def test_a_detour_through_another_group_doubles_the_round_trip():
    graph, routes = _fabric("dragonfly,2,2,2,global_rate=400G")
    pair = {("h1", "h5")}
    minimal = bdp_window_packets(graph, routes, pair, "ecmp", 0)
    assert bdp_window_packets(graph, routes, pair, "valiant", 0) == 2 * minimal
    assert bdp_window_packets(graph, routes, pair, "ugal", 16) == 2 * minimal + 16


def test_the_window_never_exceeds_the_responders_bitmap():
    graph, routes = _fabric("fattree,4,fabric_rate=400G,core_rate=400G")
    assert bdp_window_packets(graph, routes, {("h1", "h16")}, "ecmp", 5000) == WINDOW_PACKETS


def test_no_pairs_is_refused():
    graph, routes = _fabric("fattree,4")
    with pytest.raises(ParameterError):
        bdp_window_packets(graph, routes, set(), "ecmp", 16)


@pytest.mark.parametrize("value, expected", [(None, None), ("none", None), ("bdp", "bdp"),
                                             (1, 1), (WINDOW_PACKETS, WINDOW_PACKETS)])
def test_window_settings(value, expected):
    assert check_window(value) == expected
    assert EngineConfig(window=value).window == expected


@pytest.mark.parametrize("value", [0, WINDOW_PACKETS + 1, True, 2.5, "BDP ", "x", -3])
def test_bad_window_settings_are_refused_in_one_line(value):
    with pytest.raises(ParameterError) as err:
        check_window(value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value, expected", [("auto", "auto"), (" Auto", "auto"), ("bdp", "bdp"),
                                             ("none", None), ("64", 64), (" 64 ", 64)])
def test_the_routing_experiments_window_option(value, expected):
    assert _parse_window(value) == expected


@pytest.mark.parametrize("value", ["0", "1025", "many", "1.5"])
def test_the_routing_experiment_refuses_a_bad_window(value):
    with pytest.raises(ParameterError):
        _parse_window(value)


class _Notes:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


@pytest.mark.parametrize("drops, window, noted", [(3823, None, True), (0, None, False),
                                                  (12, 79, False)])
def test_a_case_that_lost_frames_without_a_window_says_why(drops, window, noted):
    run = _Notes()
    m = SimpleNamespace(ports=pd.DataFrame({"drops": [drops, 0]}),
                        stats=SimpleNamespace(window=window))
    _note_loss(run, "group-shift ecmp", m, 6430)
    assert bool(run.notes) == noted
    if noted:
        assert run.notes[0].startswith("group-shift ecmp: 3823 frames dropped by full port "
                                       "buffers and 6430 retransmitted")
        assert "--set window=bdp" in run.notes[0]

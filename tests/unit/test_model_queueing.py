"""Incast queueing, DCQCN fixed point, latency percentiles and the incast prediction on
hand-worked examples."""

from __future__ import annotations

import math

import networkx as nx
import pytest

from core.ecn import marking_curve as mark_probability
from core.frame import CNP_FRAME_BYTES
from model.incast_predict import predict_incast, predict_incast_on_graph
from model.queueing import (
    QueueDist,
    base_latency_s,
    incast_backlog_growth_bps,
    incast_cc_off,
    incast_completion_time_s,
    latency_percentiles_s,
    time_to_fill_s,
)

G = 1e9
C = 400 * G
KMIN, KMAX, PMAX = 5e3, 200e3, 0.01
HOPS = dict(hop_rates_bps=[C, C], hop_delays_s=[0.5e-6, 0.5e-6], packet_bytes=4000)
BASE_S = 1e-6 + 2 * 4000 * 8 / C          # 1 us + 2 x 80 ns = 1.16 us
NIC_S = 1e-6                              # the NIC's per-message overhead (default)


def test_incast_backlog_growth_and_fill_time():
    assert incast_backlog_growth_bps(4, C, C) == pytest.approx(3 * C)
    assert incast_backlog_growth_bps(2, 100 * G, C) == 0.0
    # 8 MB at 1.2 Tb/s: 64e6 bit / 1.2e12 = 53.33 us
    assert time_to_fill_s(8e6, 4, C, C) == pytest.approx(64e6 / 1.2e12)
    assert math.isinf(time_to_fill_s(8e6, 1, C, C))


def test_incast_completion_lossless():
    # 4 x 1 MB through 400G: 32e6 bit / 400e9 = 80 us, + alpha 2 us
    assert incast_completion_time_s(4, 1e6, C, 2e-6) == pytest.approx(82e-6)


def test_cc_off_without_drops_uniform_ramp():
    # Senders transmit for 1 MB / 400G = 20 us; queue grows at 3C: peak 3 MB.
    # A packet's queue is uniform on [0, 3 MB]: p50 = 1.5 MB = 30 us at 400G,
    # p99 = 2.97 MB = 59.4 us, p99.9 = 2.997 MB = 59.94 us.
    res = incast_cc_off(4, 1e6, C, C, buffer_bytes=8e6)
    assert not res.drops
    assert res.peak_queue_bytes == pytest.approx(3e6)
    pred = predict_incast(4, 1e6, C, buffer_bytes=8e6, **HOPS)
    assert pred["base_latency_s"] == pytest.approx(BASE_S)
    assert pred["latency_p50_s"] == pytest.approx(BASE_S + 30e-6)
    assert pred["latency_p99_s"] == pytest.approx(BASE_S + 59.4e-6)
    assert pred["latency_p999_s"] == pytest.approx(BASE_S + 59.94e-6)
    assert pred["completion_s"] == pytest.approx(80e-6 + BASE_S + NIC_S)
    assert pred["max_queue_bytes"] == pytest.approx(3e6)
    assert pred["drops"] is False
    # The trajectory behind it: up to 3 MB at 20 us, drained at C by 80 us.
    (t0, q0), (t1, q1), (t2, q2) = pred["queue_trace"]
    assert (t0, q0) == (0.0, 0.0)
    assert (t1, q1) == (pytest.approx(20e-6), pytest.approx(3e6))
    assert (t2, q2) == (pytest.approx(80e-6), 0.0)


def test_cc_off_with_drops_and_go_back_n_estimate():
    # 2 senders at C into C, 1 MB buffer, 10 MB each: growth C, peak would be 10 MB.
    # Fill at 8e6 bit / 400e9 = 20 us. Drop probability 1 - C/2C = 0.5 -> one
    # packet in order per go-back window; window = 0 rtt + 1 MB / C = 20 us.
    # Goodput = 2 x 1 x 4000 B x 8 / 20 us = 3.2 Gb/s.
    res = incast_cc_off(2, 10e6, C, C, buffer_bytes=1e6, packet_bytes=4000)
    assert res.drops
    assert res.fill_time_s == pytest.approx(20e-6)
    assert res.goodput_after_fill_bps == pytest.approx(3.2 * G)
    # by fill time 1 MB delivered + 1 MB queued in order; 18 MB at 3.2 Gb/s remain
    assert res.completion_s == pytest.approx(20e-6 + 20e-6 + 18e6 * 8 / (3.2 * G))
    assert res.dropped_bytes == pytest.approx(C * (200e-6 - 20e-6) / 8)
    pred = predict_incast(2, 10e6, C, buffer_bytes=1e6, **HOPS)
    assert pred["drops"] is True
    assert pred["max_queue_bytes"] == pytest.approx(1e6)
    # Full from the fill time until the last 1 MB drains at C before completion.
    trace = pred["queue_trace"]
    assert trace[1] == (pytest.approx(20e-6), 1e6)
    assert trace[2][1] == 1e6 and trace[3][1] == 0.0
    assert trace[3][0] - trace[2][0] == pytest.approx(20e-6)
    assert trace[3][0] == pytest.approx(pred["completion_s"] - BASE_S - NIC_S)
    assert pred["completion_s"] > incast_completion_time_s(2, 10e6, C)


def test_no_queue_when_the_port_keeps_up():
    pred = predict_incast(2, 1e6, C, sender_rate_bps=100 * G, buffer_bytes=1e6, **HOPS)
    assert pred["max_queue_bytes"] == 0.0
    assert pred["latency_p999_s"] == pytest.approx(BASE_S)
    assert pred["completion_s"] == pytest.approx(8e6 / (100 * G) + BASE_S + NIC_S)


def test_marking_curve():
    assert mark_probability(KMIN, KMIN, KMAX, PMAX) == 0.0
    assert mark_probability((KMIN + KMAX) / 2, KMIN, KMAX, PMAX) == pytest.approx(PMAX / 2)
    assert mark_probability(KMAX, KMIN, KMAX, PMAX) == pytest.approx(PMAX)
    assert mark_probability(KMAX + 1, KMIN, KMAX, PMAX) == 1.0
    # DCTCP step: Kmin = Kmax
    assert mark_probability(10e3, 20e3, 20e3, 1.0) == 0.0
    assert mark_probability(30e3, 20e3, 20e3, 1.0) == 1.0


def test_dcqcn_incast_prediction():
    pred = predict_incast(4, 10e6, C, buffer_bytes=8e6, cc="dcqcn", kmin_bytes=KMIN,
                          kmax_bytes=KMAX, pmax=PMAX, realisations=4, **HOPS)
    # steady state reported beside the transient
    assert KMIN <= pred["q_star_bytes"] <= KMAX
    assert pred["per_flow_rate_bps"] == pytest.approx(C / 4)
    # line-rate start: the queue overshoots Kmax before the first CNPs return
    assert KMAX < pred["max_queue_bytes"] < 8e6
    assert pred["drops"] is False and pred["dropped_bytes"] == 0.0
    assert pred["cnps"] >= 4 and pred["ecn_marks"] > 0
    assert pred["completion_s"] >= 4 * 10e6 * 8 / C + BASE_S
    assert pred["goodput_bps"] == pytest.approx(4 * 10e6 * 8 / pred["completion_s"])
    with pytest.raises(ValueError):
        predict_incast(4, 1e6, C, buffer_bytes=8e6, cc="dcqcn")
    with pytest.raises(ValueError):
        predict_incast(4, 1e6, C, buffer_bytes=8e6, cc="dcqcn", kmin_bytes=KMIN,
                       kmax_bytes=KMAX, pmax=PMAX, dcqcn="off")


@pytest.mark.parametrize("kwargs", [
    dict(n_senders=4, size_bytes=1e6, buffer_bytes=8e6),
    dict(n_senders=2, size_bytes=10e6, buffer_bytes=1e6),
    dict(n_senders=8, size_bytes=1e6, buffer_bytes=8e6, cc="dcqcn", kmin_bytes=KMIN,
         kmax_bytes=KMAX, pmax=PMAX),
])
def test_latency_percentiles_are_monotone(kwargs):
    pred = predict_incast(port_rate_bps=C, **kwargs, **HOPS)
    assert BASE_S <= pred["latency_p50_s"] <= pred["latency_p99_s"] <= pred["latency_p999_s"]


def test_queue_mixture_quantiles():
    # equal weight: uniform [0, 10] and a point mass at 10. cdf(5) = 0.25.
    dist = QueueDist(((1.0, 0.0, 10.0), (1.0, 10.0, 10.0)))
    assert dist.cdf(5.0) == pytest.approx(0.25)
    assert dist.quantile(0.25) == pytest.approx(5.0)
    assert dist.quantile(0.9) == pytest.approx(10.0)
    assert dist.mean_bytes == pytest.approx(7.5)
    lat = latency_percentiles_s(1e-6, QueueDist.uniform(0, 1e6), C, (0.5,))
    assert lat[0.5] == pytest.approx(1e-6 + 0.5e6 * 8 / C)
    assert base_latency_s([C], [0.0], 4000) == pytest.approx(80e-9)


def test_prediction_from_graph():
    g = nx.Graph()
    for h in ("h0", "h1", "h2", "h3", "h4"):
        g.add_edge(h, "sw", rate_bps=C, delay_s=0.5e-6, buffer_bytes=8e6)
    pred = predict_incast_on_graph(g, lambda s, d: [(s, "sw", d)], ["h0", "h1", "h2", "h3"],
                                   "h4", 1e6, packet_bytes=4000)
    assert pred["backlog_growth_bps"] == pytest.approx(3 * C)
    assert pred["max_queue_bytes"] == pytest.approx(3e6)
    assert pred["latency_p50_s"] == pytest.approx(BASE_S + 30e-6)
    # a switch's pipeline latency adds to the base latency of every path through it
    g.nodes["sw"]["switch_latency_s"] = 0.6e-6
    pred = predict_incast_on_graph(g, lambda s, d: [(s, "sw", d)], ["h0", "h1", "h2", "h3"],
                                   "h4", 1e6, packet_bytes=4000)
    assert pred["base_latency_s"] == pytest.approx(BASE_S + 0.6e-6)


def test_latency_of_senders_with_different_bases_is_their_mixture():
    # Bases 0 and 10 us, each with half the packets, queue uniform on [0, Q] with
    # Q / C = 10 us: latencies U[0, 10] and U[10, 20] us together are U[0, 20] us.
    q_bytes = 10e-6 * C / 8
    lat = latency_percentiles_s([0.0, 10e-6], QueueDist.uniform(0, q_bytes), C, (0.25, 0.5, 0.99))
    assert lat[0.25] == pytest.approx(5e-6)
    assert lat[0.5] == pytest.approx(10e-6)
    assert lat[0.99] == pytest.approx(19.8e-6)
    one = latency_percentiles_s([1e-6], QueueDist.uniform(0, q_bytes), C, (0.99,))
    assert one[0.99] == pytest.approx(latency_percentiles_s(1e-6, QueueDist.uniform(0, q_bytes),
                                                            C, (0.99,))[0.99])


def test_dcqcn_prediction_is_the_mean_of_random_realisations_with_a_band():
    kw = dict(buffer_bytes=8e6, cc="dcqcn", kmin_bytes=KMIN, kmax_bytes=KMAX, pmax=PMAX, **HOPS)
    mc = predict_incast(3, 2e6, C, realisations=16, **kw)
    expected = predict_incast(3, 2e6, C, realisations=0, **kw)
    assert mc["realisations"] == 16 and expected["realisations"] == 1
    for key in ("max_queue_bytes", "latency_p99_s", "completion_s"):
        lo, hi = mc["bands"][key]
        assert lo <= mc[key] <= hi
        assert expected["bands"][key] == (expected[key], expected[key])
    assert mc["bands"]["max_queue_bytes"][0] < mc["bands"]["max_queue_bytes"][1]
    for key, (lo, hi) in mc["ranges"].items():
        assert lo <= mc["bands"][key][0] <= mc["bands"][key][1] <= hi
    # the first marks come at random, sooner on average than the expected marks'
    # deterministic count of 1 (E[sqrt(Exp(1))] < 1 on a linear ramp)
    assert mc["max_queue_bytes"] < expected["max_queue_bytes"]
    with pytest.raises(ValueError):
        predict_incast(3, 2e6, C, realisations=-1, **kw)
    with pytest.raises(ValueError):
        predict_incast(3, 2e6, C, sender_paths_s=[(1e-6, 2e-6)], **kw)


def test_prediction_from_graph_gives_each_sender_its_path():
    # h0 is one hop from the switch, h1 has a 2 us longer cable: its first byte
    # reaches the queue 2 us later and its CNPs return 2 us later (4 us more RTT).
    g = nx.Graph()
    for h, delay in (("h0", 0.5e-6), ("h1", 2.5e-6), ("h2", 0.5e-6)):
        g.add_edge(h, "sw", rate_bps=C, delay_s=delay, buffer_bytes=8e6)
    kw = dict(cc="dcqcn", kmin_bytes=KMIN, kmax_bytes=KMAX, pmax=PMAX, packet_bytes=4000,
              realisations=0)
    pred = predict_incast_on_graph(g, lambda s, d: [(s, "sw", d)], ["h0", "h1"], "h2", 1e6, **kw)
    ack_s = 2 * CNP_FRAME_BYTES * 8 / C
    paths = [(BASE_S, 2 * BASE_S - 2 * 4000 * 8 / C + ack_s),
             (BASE_S + 2e-6, 2 * BASE_S + 4e-6 - 2 * 4000 * 8 / C + ack_s)]
    by_hand = predict_incast(2, 1e6, C, buffer_bytes=8e6, sender_paths_s=paths,
                             hop_rates_bps=[C, C], hop_delays_s=[0.5e-6, 0.5e-6], **kw)
    for key in ("max_queue_bytes", "latency_p99_s", "completion_s", "cnps"):
        assert pred[key] == pytest.approx(by_hand[key])
    same = predict_incast(2, 1e6, C, buffer_bytes=8e6, hop_rates_bps=[C, C],
                          hop_delays_s=[0.5e-6, 0.5e-6], **kw)
    assert pred["latency_p99_s"] > same["latency_p99_s"] + 1e-6   # half its packets 2 us later

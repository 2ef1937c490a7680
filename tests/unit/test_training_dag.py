"""The training-iteration generator (traffic/iteration.py) and the DAG analysis
(model/dag.py): message counts per dimension, compute from FLOPs, and an iteration's
time by hand."""

from __future__ import annotations

from collections import Counter

import pytest

from core.errors import ParameterError
from core.messages import Message, Workload
from model.alphabeta import predict_workload
from model.dag import critical_path, message_time_s, op_stats, rank_timelines
from tests.unit.test_model_alphabeta import star, star_paths
from traffic.dagfile import ComputeSegment
from traffic.iteration import Gpu, Layout, Transformer, iteration, layer_flops

HOSTS = [f"h{i}" for i in range(8)]


def test_messages_per_dimension_by_hand():
    model = Transformer(layers=2, micro_batches=2)
    wl = iteration(model, Layout(tp=2, pp=2, dp=2), HOSTS)
    tags = Counter(m.tag for m in wl.messages)
    # TP: a 2-rank ring all-reduce is 4 messages; 4 per layer and micro-batch (2 forward,
    # 2 backward), 1 layer per stage, 2 micro-batches, 4 TP groups.
    assert tags["tp"] == 4 * 4 * 1 * 2 * 4
    # PP: an activation and a gradient per micro-batch from each of the 4 (tp, dp) pairs.
    assert tags["pp"] == 2 * 2 * 4
    # DP: one bucket per stage, a 2-rank ring all-reduce per TP index.
    assert tags["dp"] == 2 * 2 * 4
    assert wl.meta["inexact_waits"] == 0
    # Every PP activation carries b s h p / TP bytes.
    assert {m.size_bytes for m in wl.messages if m.tag == "pp"} == {1024 * 1024 * 2 // 2}


def test_moe_and_zero_add_their_collectives():
    model = Transformer(layers=2, micro_batches=2, experts=4, top_k=2)
    wl = iteration(model, Layout(tp=1, pp=1, dp=4, ep=2, zero=1), HOSTS)
    ops = wl.meta["ops"]
    kinds = Counter((o["tag"], o["collective"]) for o in ops.values())
    # Two EP groups of 2, dispatch and combine, forward and backward, 2 layers, 2 mb.
    assert kinds[("ep", "alltoall")] == 2 * 2 * 2 * 2 * 2
    assert kinds[("dp", "reducescatter")] > 0 and kinds[("dp", "allgather")] == 1


@pytest.mark.parametrize(("layout", "match"), [
    (Layout(tp=3, pp=2), "tp"), (Layout(tp=1, pp=1), "ranks"), (Layout(pp=3, dp=1, tp=1), "pp"), (Layout(ep=2, dp=2), "ep"),
    (Layout(zero=2, dp=2), "zero"), (Layout(tp=2, placement="x"), "placement")])
def test_bad_layouts_are_refused(layout, match):
    with pytest.raises(ParameterError, match=match):
        iteration(Transformer(layers=4), layout, HOSTS[:6] if layout.tp == 3 else HOSTS)


def test_one_layer_iteration_by_hand():
    # TP = 2 alone, one layer, one micro-batch: attention, AR, MLP, AR, LM head forward,
    # its backward (2x), MLP backward, AR, attention backward, AR: compute plus 4
    # all-reduces of 2 steps, nothing overlapping.
    model = Transformer(layers=1, micro_batches=1, hidden=256, heads=4, seq=128, vocab=1000)
    gpu = Gpu(1e12, 0.5)
    wl = iteration(model, Layout(tp=2), ["h0", "h1"], gpu=gpu)
    attn, mlp = layer_flops(model)
    head = 2 * 128 * 256 * 1000
    compute_s = (3 * (attn + mlp) + 3 * head) / 2 / 0.5e12
    assert wl.meta["compute_s"] == pytest.approx(compute_s)
    g = star(2)
    step_s = message_time_s(g, ("h0", "sw", "h1"), 128 * 256 * 2 // 2)
    cp = critical_path(wl, g, star_paths)
    assert cp.completion_s == pytest.approx(compute_s + 4 * 2 * step_s)
    # Alone on its links every message is priced the same by the fluid model.
    fluid = predict_workload(wl, g, star_paths)
    assert fluid.completion_s == pytest.approx(cp.completion_s, rel=1e-9)
    line = rank_timelines(wl, cp.ready_s, cp.finish_s)
    assert [r.end_s for r in line] == pytest.approx([cp.completion_s] * 2)
    assert line[0].compute_s == pytest.approx(compute_s)
    assert line[0].exposed_s["tp"] == pytest.approx(4 * 2 * step_s)
    stats = op_stats(wl, cp.ready_s, cp.finish_s)
    assert len(stats) == 4 and all(s.time_s == pytest.approx(2 * step_s) for s in stats)


def test_rank_timelines_attribute_waits_to_what_ended_them():
    msgs = [Message(0, "a", "b", 10, gap_s=2.0, tag="pp"), Message(1, "b", "a", 10, deps=(0,),
                                                                 gap_s=1.0, tag="dp")]
    compute = [ComputeSegment(0, (), 0.0, 2.0), ComputeSegment(1, (0,), 0.0, 1.0)]
    wl = Workload("w", msgs, ["a", "b"], 10, meta={"compute": compute})
    ready, finish = {0: 2.0, 1: 6.0}, {0: 5.0, 1: 9.0}
    a, b = rank_timelines(wl, ready, finish)
    assert (a.end_s, a.compute_s, a.exposed_s) == (9.0, 2.0, {"dp": 7.0})
    assert (b.end_s, b.compute_s, b.exposed_s) == (9.0, 1.0, {"pp": 5.0, "dp": 3.0})

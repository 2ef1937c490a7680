"""The serving DAG of traffic.serving, its sizes and times computed by hand."""

from __future__ import annotations

import math

import pytest

from core.errors import ParameterError
from core.messages import Message, Workload
from traffic.iteration import Gpu
from traffic.serving import (
    ServedModel,
    Serving,
    arrivals,
    beside,
    decode_compute,
    decode_timeline,
    inference,
    prefill_s,
    quantile,
)

HOSTS = [f"h{i}" for i in range(1, 17)]
MODEL = ServedModel(layers=2, hidden=256, kv_heads=4, head_dim=64, prompt=128, vocab=1000,
                    precision_bytes=2, experts=4, top_k=2)
SERVING = Serving(prefill=2, decode=4, requests=3, load=0.5, batch=2, steps=5,
                  hbm_bps=8e12)
GPU = Gpu(1e15, 0.5)   # 5e14 FLOP/s


def test_kv_cache_bytes_by_hand() -> None:
    # K and V x layers x KV heads x head dim x prompt x bytes
    assert MODEL.kv_bytes == 2 * 2 * 4 * 64 * 128 * 2 == 262144


def test_prefill_time_and_arrivals_by_hand() -> None:
    h, s = 256, 128
    attn = 8 * s * h * h + 4 * s * s * h
    mlp = 16 * s * h * h * 2          # top_k experts per token
    flops = 2 * (attn + mlp) + 2 * s * h * 1000
    each = flops / 2 / 5e14           # over TP = 2 prefill ranks
    assert prefill_s(MODEL, SERVING, GPU) == pytest.approx(each)
    arrive, ends = arrivals(MODEL, SERVING, GPU)
    assert arrive == pytest.approx([0.0, 2 * each, 4 * each])   # every prefill time / 0.5
    assert ends == pytest.approx([each, 3 * each, 5 * each])
    queued = arrivals(MODEL, Serving(prefill=2, decode=4, requests=3, load=1.0), GPU)[1]
    assert queued == pytest.approx([each, 2 * each, 3 * each])


def test_kv_messages_open_loop_to_the_requests_decode_rank() -> None:
    w = inference(MODEL, SERVING, HOSTS, gpu=GPU)
    ends = arrivals(MODEL, SERVING, GPU)[1]
    kv = [m for m in w.messages if m.tag == "kv"]
    assert len(kv) == 3 * 2
    for r, ids in w.meta["kv"].items():
        for i, msg_id in enumerate(ids):
            m = w.messages[msg_id]
            assert (m.src, m.dst) == (HOSTS[i], HOSTS[2 + r % 4])
            assert m.size_bytes == 262144 // 2
            assert m.start_s == pytest.approx(ends[r]) and m.deps == () and m.gap_s == 0


def test_decode_all_to_alls_by_hand() -> None:
    w = inference(MODEL, SERVING, HOSTS, gpu=GPU)
    moe = [m for m in w.messages if m.tag == "moe"]
    # steps x layers x (dispatch, combine) x D (D - 1)
    assert len(moe) == 5 * 2 * 2 * 4 * 3
    # batch x top_k x hidden x bytes / D to every other decode rank
    assert {m.size_bytes for m in moe} == {2 * 2 * 256 * 2 // 4}
    assert {m.src for m in moe} == set(HOSTS[2:6])
    c = decode_compute(MODEL, SERVING, GPU)
    # step 0's first dispatch: posted after attention, with nothing before it
    assert [m.gap_s for m in moe[:12]] == pytest.approx([c.attention_s] * 12)
    assert all(m.deps == () for m in moe[:12])
    # its combine: after the experts, once the rank's dispatch messages are done
    assert [m.gap_s for m in moe[12:24]] == pytest.approx([c.experts_s] * 12)
    assert all(len(m.deps) == 2 * 3 for m in moe[12:24])


def test_decode_roofline_by_hand() -> None:
    c = decode_compute(MODEL, SERVING, GPU)
    h, b, p = 256, 2, 2
    attn_bytes = 4 * h * h * p + b * 128 * 2 * 4 * 64 * p
    assert c.attention_s == pytest.approx(max((8 * b * h * h + 4 * b * 128 * h) / 5e14,
                                              8 * attn_bytes / 8e12))
    # 1 local expert, 4 tokens reach this rank: that expert's weights once
    assert c.experts_s == pytest.approx(max(16 * h * h * 4 / 5e14, 8 * 8 * h * h * p / 8e12))
    assert c.head_s == pytest.approx(max(2 * b * h * 1000 / 5e14, 8 * h * 1000 * p / 8e12))
    assert c.step_s == pytest.approx(2 * (c.attention_s + c.experts_s) + c.head_s)


def test_decode_timeline_by_hand() -> None:
    """Steps end every 100 us; each KV lands 10 us after its prefill: a request's first
    token is the end of the first step that starts once its KV is in."""
    w = inference(MODEL, SERVING, HOSTS, gpu=GPU)
    meta = w.meta
    head = meta["compute"].head_s
    finish = {m.msg_id: 0.0 for m in w.messages}
    for k, per_rank in meta["steps"].items():
        for ids in per_rank.values():
            for i in ids:
                finish[i] = (k + 1) * 100e-6 - head
    for r, ids in meta["kv"].items():
        for i in ids:
            finish[i] = meta["prefill_end_s"][r] + 10e-6
    lat = decode_timeline(w, finish)
    step = meta["compute"].step_s
    assert lat.tpot_s == pytest.approx([100e-6] * 5 * 4)
    assert lat.tpot_network_s == pytest.approx([100e-6 - step] * 5 * 4)
    served = []
    for r in range(3):
        kv_done = meta["prefill_end_s"][r] + 10e-6
        k = math.ceil(kv_done / 100e-6)
        if k < 5:
            served.append((r, (k + 1) * 100e-6 - meta["arrival_s"][r], 10e-6 + 100e-6 - step))
    assert lat.unserved == 3 - len(served)
    assert lat.ttft_s == pytest.approx([t for _, t, _ in served])
    assert lat.ttft_network_s == pytest.approx([n for _, _, n in served])


def test_auto_steps_cover_the_last_prefill() -> None:
    auto = Serving(prefill=2, decode=4, requests=3, load=0.5, batch=2, steps=0, hbm_bps=8e12)
    w = inference(MODEL, auto, HOSTS, gpu=GPU)
    last = w.meta["prefill_end_s"][-1]
    assert len(w.meta["steps"]) == math.ceil(1.25 * last / w.meta["compute"].step_s) + 4


def test_beside_renumbers_and_chains_the_background() -> None:
    fg = Workload("fg", [Message(0, "a", "b", 10)], ["a", "b"], 10, meta={"x": 1})
    bg = Workload("bg", [Message(0, "c", "d", 5, gap_s=1e-6, tag="tp"),
                         Message(1, "d", "c", 5, deps=(0,), tag="tp")], ["c", "d"], 5)
    w = beside(fg, bg, 2)
    assert [(m.msg_id, m.deps, m.tag) for m in w.messages] == [
        (0, (), ""), (1, (), "bg-tp"), (2, (1,), "bg-tp"), (3, (2,), "bg-tp"),
        (4, (3,), "bg-tp")]
    assert w.messages[3].gap_s == 1e-6   # the next run's compute, after the last one ended
    assert w.meta == {"x": 1, "background_messages": 4}
    with pytest.raises(ParameterError, match="hosts taken"):
        beside(fg, Workload("bg", [Message(0, "b", "d", 5)], ["b", "d"], 5), 1)


@pytest.mark.parametrize(("model", "serving", "what"), [
    (MODEL, Serving(prefill=3), "prefill"),            # 3 does not divide 4 KV heads
    (MODEL, Serving(decode=3), "decode"),              # nor 4 experts
    (MODEL, Serving(decode=1), "decode"),
    (MODEL, Serving(load=0.0), "load"),
    (MODEL, Serving(steps=-1), "steps"),
    (ServedModel(experts=2, top_k=3), Serving(decode=2), "top_k"),
    (ServedModel(prompt=0), Serving(), "prompt"),
    (MODEL, Serving(decode=4, steps=10_000, batch=2), "steps"),   # about 480,000 messages
    (MODEL, Serving(load=1e-12), "load"),                              # arrivals days apart
    (ServedModel(layers=64, kv_heads=4096, head_dim=4096, prompt=64), Serving(prefill=1),
     "prompt"),                                                    # a 256 GiB KV share
])
def test_bad_deployments_are_one_line_errors(model: ServedModel, serving: Serving,
                                             what: str) -> None:
    with pytest.raises(ParameterError, match=what) as e:
        inference(model, serving, HOSTS)
    assert "\n" not in str(e.value)


def test_more_ranks_than_hosts() -> None:
    with pytest.raises(ParameterError, match="hosts"):
        inference(MODEL, SERVING, HOSTS[:5])


def test_quantile_by_hand() -> None:
    assert quantile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.5
    assert quantile([1.0, 2.0], 0.99) == pytest.approx(1.99)
    assert math.isnan(quantile([], 0.5))

"""Disaggregated LLM serving as a message DAG: the prefill-to-decode KV-cache transfers
and the decode instance's MoE all-to-alls, step by step.

Roles. Ranks 0..P-1 are one prefill instance, tensor parallel over P (each rank holds
kv_heads / P of the KV heads); ranks P..P+D-1 are the decode instance: each rank runs
attention for its own requests, and the experts are spread over all D (expert
parallel).

Prefill. Request r arrives at r x interval_s. The prefill instance serves requests in
order, one at a time: request r's prefill starts at max(its arrival, the previous
prefill's end) and lasts its FLOPs / (peak x MFU), the FLOPs of a training forward
(`traffic.iteration.layer_flops`) at seq = prompt, over P. That schedule is compute
only, so every KV transfer is open loop: at the prefill's end (``start_s``) each
prefill rank sends its share of the KV cache, 2 (K and V) x layers x kv_heads / P x
head_dim x prompt x precision bytes, to the request's decode rank P + (r mod D)
(tag 'kv'), one message.

Decode. The decode instance runs ``steps`` steps of continuous batching from time
zero, every decode rank with ``batch`` running tokens (the batch stays full: a finished
request's slot goes to the next). Per step and layer, every decode rank computes
attention, sends each token to its top_k experts (an all-to-all dispatch among the D
ranks: batch x top_k x hidden x precision / D bytes to each other rank, the experts
spread evenly), computes the experts for the tokens it received, and an all-to-all
combine returns them (tag 'moe'); after the last layer, the LM head. A compute segment
lasts the roofline's max(FLOPs / (peak x MFU), bytes read / HBM bandwidth): decode
reads every weight and the KV cache for a few tokens, so it is memory bound.

A request joins the decode batch at the first step that starts once its KV cache has
arrived; its first token leaves at that step's end (``decode_timeline``). Since the
batch stays full, whom the decode steps serve changes nothing in the DAG, so the join
is found afterwards from the message times (measured, or a model's), not fixed in the
DAG.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace

from core.errors import ParameterError
from core.messages import Workload
from traffic.iteration import DagBuilder, Gpu, Transformer, layer_flops

#: The GPU when none is given: traffic.iteration's H100.
DEFAULT_GPU = Gpu()
#: Most decode steps one DAG holds (each is 2 x layers all-to-alls of D (D - 1) messages).
MAX_STEPS = 10_000
#: Most messages one serving DAG holds: the engine runs one QP per message.
MAX_MESSAGES = 200_000
#: The largest message: one RDMA WRITE's length (RETH's 32-bit DMA length).
MAX_MESSAGE_BYTES = (1 << 32) - 1
#: The last request's prefill must end this soon (real s): longer is hours at S.
MAX_SPAN_S = 10.0


@dataclass(frozen=True)
class ServedModel:
    """The served transformer: every layer's MLP a MoE of ``experts`` (top ``top_k``)."""

    layers: int = 4
    hidden: int = 2048
    kv_heads: int = 8
    head_dim: int = 128
    prompt: int = 512
    vocab: int = 32000
    precision_bytes: int = 2
    experts: int = 8
    top_k: int = 2

    def check(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ParameterError(name, value, "must be an integer >= 1")
        if self.top_k > self.experts:
            raise ParameterError("top_k", self.top_k, f"must be <= experts={self.experts}")

    @property
    def kv_bytes(self) -> int:
        """One request's KV cache: K and V of every layer, KV head and prompt token."""
        return (2 * self.layers * self.kv_heads * self.head_dim * self.prompt
                * self.precision_bytes)


@dataclass(frozen=True)
class Serving:
    """The deployment and its load: instance sizes, requests, decode batch and steps."""

    prefill: int = 2
    decode: int = 4
    requests: int = 8
    load: float = 0.8           # prefill utilisation: arrivals every prefill time / load
    batch: int = 8              # running tokens per decode rank
    steps: int = 0              # decode steps; 0: enough to serve every request (steps_for)
    hbm_bps: float = 3.35e12 * 8   # H100 SXM HBM3: 3.35 TB/s

    def check(self, model: ServedModel) -> None:
        for name in ("prefill", "decode", "requests", "batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ParameterError(name, value, "must be an integer >= 1")
        if self.decode < 2:
            raise ParameterError("decode", self.decode, "the MoE all-to-all needs >= 2 ranks")
        if not 0 <= self.steps <= MAX_STEPS:
            raise ParameterError("steps", self.steps, f"expected 0 (auto) .. {MAX_STEPS}")
        if not (math.isfinite(self.load) and 0 < self.load <= 1):
            raise ParameterError("load", self.load, "expected 0 < load <= 1")
        if not (math.isfinite(self.hbm_bps) and self.hbm_bps > 0):
            raise ParameterError("hbm", self.hbm_bps, "must be positive")
        if model.kv_heads % self.prefill:
            raise ParameterError("prefill", self.prefill,
                                 f"must divide kv_heads={model.kv_heads} (TP shards the KV heads)")
        if model.experts % self.decode:
            raise ParameterError("decode", self.decode,
                                 f"must divide experts={model.experts} (EP spreads them)")


def prefill_s(model: ServedModel, serving: Serving, gpu: Gpu) -> float:
    """One request's prefill on the P-rank instance (FLOPs / (peak x MFU), module doc)."""
    dense = Transformer(layers=model.layers, hidden=model.hidden, seq=model.prompt,
                        micro_batch=1, experts=model.experts, top_k=model.top_k)
    attn, mlp = layer_flops(dense)
    head = 2 * model.prompt * model.hidden * model.vocab
    return gpu.seconds((model.layers * (attn + mlp) + head) / serving.prefill)


@dataclass(frozen=True)
class DecodeCompute:
    """One decode step's compute on a decode rank, per part (real s)."""

    attention_s: float
    experts_s: float
    head_s: float
    layers: int

    @property
    def step_s(self) -> float:
        return self.layers * (self.attention_s + self.experts_s) + self.head_s


def decode_compute(model: ServedModel, serving: Serving, gpu: Gpu) -> DecodeCompute:
    """The roofline of each part of a decode step (module doc): the batch's attention
    (projections and the KV cache read), the experts of this rank (weights of every
    local expert a token reaches), the LM head."""
    h, b, p = model.hidden, serving.batch, model.precision_bytes
    kv_per_token = 2 * model.kv_heads * model.head_dim * p

    def roofline(flops: float, bytes_read: float) -> float:
        return max(gpu.seconds(flops), 8.0 * bytes_read / serving.hbm_bps)

    attention = roofline(8 * b * h * h + 4 * b * model.prompt * h,
                         4 * h * h * p + b * model.prompt * kv_per_token)
    tokens_here = b * model.top_k           # tokens routed to this rank, on average
    local = model.experts // serving.decode
    experts = roofline(16 * h * h * tokens_here, min(local, tokens_here) * 8 * h * h * p)
    head = roofline(2 * b * h * model.vocab, h * model.vocab * p)
    return DecodeCompute(attention, experts, head, model.layers)


def arrivals(model: ServedModel, serving: Serving, gpu: Gpu) -> tuple[list[float], list[float]]:
    """(arrival, prefill end) of every request (module doc), real s."""
    each = prefill_s(model, serving, gpu)
    interval = each / serving.load
    arrive = [r * interval for r in range(serving.requests)]
    ends: list[float] = []
    for a in arrive:
        ends.append(max(a, ends[-1] if ends else 0.0) + each)
    return arrive, ends


def steps_for(model: ServedModel, serving: Serving, gpu: Gpu) -> int:
    """``serving.steps``, or (0) the steps that cover the last prefill's end by a
    quarter more in compute-only time and then 4 more: room for the KV transfers and for
    steps slowed by the network."""
    if serving.steps:
        return serving.steps
    step = decode_compute(model, serving, gpu).step_s
    steps = 1.25 * arrivals(model, serving, gpu)[1][-1] / step
    return MAX_STEPS if not steps < MAX_STEPS else min(MAX_STEPS, math.ceil(steps) + 4)


def inference(model: ServedModel, serving: Serving, hosts: Sequence[str], *,
              gpu: Gpu = DEFAULT_GPU, size_scale: float = 1.0) -> Workload:
    """The serving DAG on ``hosts`` (prefill ranks first, then decode; module doc).
    ``meta``: 'arrival_s', 'prefill_end_s', 'kv' (request -> its KV message ids),
    'decode_ranks', 'steps' (step -> rank -> the ids of its last combine), 'compute'
    (`DecodeCompute`), 'prefill_s'."""
    model.check()
    serving.check(model)
    gpu.check()
    if not (math.isfinite(size_scale) and 0 < size_scale <= 1):
        raise ParameterError("size_scale", size_scale, "expected 0 < scale <= 1")
    n = serving.prefill + serving.decode
    if n > len(hosts):
        raise ParameterError("prefill + decode", n, f"more than the fabric's {len(hosts)} hosts")
    arrive, ends = arrivals(model, serving, gpu)
    if not ends[-1] <= MAX_SPAN_S:
        raise ParameterError("load", serving.load, f"the last prefill would end "
                             f"{ends[-1]:.3g} s in; at most {MAX_SPAN_S:g} s")
    n_steps = steps_for(model, serving, gpu)
    count = (serving.requests * serving.prefill
             + n_steps * model.layers * 2 * serving.decode * (serving.decode - 1))
    if count > MAX_MESSAGES:
        raise ParameterError("steps", n_steps, f"{count:,} messages; at most {MAX_MESSAGES:,} "
                             "(fewer steps, layers, decode ranks or requests)")
    share = model.kv_bytes / serving.prefill
    a2a = serving.batch * model.top_k * model.hidden * model.precision_bytes
    for what, value, size in (("prompt", model.prompt, share),
                              ("batch", serving.batch, a2a / serving.decode)):
        if size * size_scale > MAX_MESSAGE_BYTES:
            raise ParameterError(what, value, f"a message of {size:.3g} B: more than one "
                                 f"RDMA WRITE's {MAX_MESSAGE_BYTES:,} B (or lower size_scale)")
    g = DagBuilder(list(hosts[:n]), size_scale)
    kv: dict[int, list[int]] = {}
    for r, end in enumerate(ends):
        dst = serving.prefill + r % serving.decode
        kv[r] = [g.send(i, dst, share, "kv", f"kv-r{r}-p{i}", start_s=end)
                 for i in range(serving.prefill)]
    compute = decode_compute(model, serving, gpu)
    ranks = list(range(serving.prefill, n))
    steps: dict[int, dict[int, list[int]]] = {}
    for k in range(n_steps):
        for layer in range(model.layers):
            for r in ranks:
                g.work(r, compute.attention_s, f"step {k} L{layer} attention")
            g.collective("alltoall", ranks, a2a, "moe", f"moe-dispatch-s{k}-L{layer}")
            for r in ranks:
                g.work(r, compute.experts_s, f"step {k} L{layer} experts")
            start = len(g.messages)
            g.collective("alltoall", ranks, a2a, "moe", f"moe-combine-s{k}-L{layer}")
        steps[k] = {r: [m.msg_id for m in g.messages[start:] if g.hosts[r] in (m.src, m.dst)]
                    for r in ranks}
        for r in ranks:
            g.work(r, compute.head_s, f"step {k} LM head")
    return Workload(f"inference p{serving.prefill} d{serving.decode}", g.messages, list(g.hosts),
                    max(m.size_bytes for m in g.messages),
                    meta={"ops": g.ops, "op_of": g.op_of, "arrival_s": arrive,
                          "prefill_end_s": ends, "kv": kv, "decode_ranks": ranks,
                          "steps": steps, "compute": compute, "size_scale": size_scale,
                          "prefill_s": prefill_s(model, serving, gpu)})


@dataclass(frozen=True)
class Latencies:
    """Per request: TTFT and its network part; per decode step and rank: its time and
    network part (real s). A request whose KV arrived after the last step started has
    no first token (``unserved``)."""

    ttft_s: list[float]
    ttft_network_s: list[float]
    tpot_s: list[float]
    tpot_network_s: list[float]
    unserved: int


def decode_timeline(workload: Workload, finish_s: Mapping[Hashable, float]) -> Latencies:
    """TTFT and time per output token from message completions (module doc): a decode
    rank's step ends at its last combine's completion plus the LM head; a step's network
    part is its time minus its compute; a request's, its KV transfer (prefill end to
    the last share's completion) plus its first step's network part."""
    meta = workload.meta
    compute: DecodeCompute = meta["compute"]
    ends: dict[int, list[float]] = {r: [] for r in meta["decode_ranks"]}
    for k in sorted(meta["steps"]):
        for r, ids in meta["steps"][k].items():
            ends[r].append(max(finish_s[i] for i in ids) + compute.head_s)
    tpot, tpot_net = [], []
    for line in ends.values():
        for a, b in zip([0.0, *line[:-1]], line, strict=True):
            tpot.append(b - a)
            tpot_net.append(max(0.0, b - a - compute.step_s))
    ttft, ttft_net = [], []
    unserved = 0
    first = meta["decode_ranks"][0]
    for r, ids in meta["kv"].items():
        line = ends[first + r % len(ends)]
        kv_done = max(finish_s[i] for i in ids)
        starts = [0.0, *line[:-1]]
        k = next((k for k, s in enumerate(starts) if s >= kv_done), None)
        if k is None:
            unserved += 1
            continue
        ttft.append(line[k] - meta["arrival_s"][r])
        step_net = max(0.0, line[k] - starts[k] - compute.step_s)
        ttft_net.append(kv_done - meta["prefill_end_s"][r] + step_net)
    return Latencies(ttft, ttft_net, tpot, tpot_net, unserved)


def beside(workload: Workload, background: Workload, repeats: int) -> Workload:
    """``workload`` and ``repeats`` back-to-back runs of ``background`` (its messages
    renumbered after the first's and tagged 'bg-TAG'; each run's first messages wait
    for the previous run's last ones, their gaps counted from then) in one DAG, on
    disjoint hosts. ``meta`` is the first's, plus 'background_messages'."""
    if set(workload.ranks) & set(background.ranks):
        raise ParameterError("background", ",".join(sorted(set(workload.ranks)
                                                           & set(background.ranks))),
                             "hosts taken by the inference")
    messages = list(workload.messages)
    depended = {d for m in background.messages for d in m.deps}
    sinks: list[int] = []
    for _ in range(repeats):
        base = len(messages)
        messages += [replace(m, msg_id=base + m.msg_id,
                             deps=tuple(base + d for d in m.deps) if m.deps else tuple(sinks),
                             tag=f"bg-{m.tag}") for m in background.messages]
        sinks = [base + m.msg_id for m in background.messages if m.msg_id not in depended]
    return Workload(f"{workload.name} + {background.name} x{repeats}", messages,
                    [*workload.ranks, *background.ranks],
                    max(workload.size_bytes, background.size_bytes),
                    meta={**workload.meta,
                          "background_messages": len(messages) - len(workload.messages)})


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (linear interpolation), NaN for no values."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

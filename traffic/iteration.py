"""One training iteration of a transformer under a parallel layout, as a message DAG
with compute gaps (``core.messages.Message.gap_s``).

Inputs: the model (``Transformer``), the layout (``Layout``: TP, PP, DP, EP degrees,
ZeRO 0/1/3, placement), the GPU (``Gpu``: peak FLOP/s and MFU) and a message-size
scale (every message's bytes times ``size_scale``; compute is not scaled).

Ranks. rank = tp + TP (dp + DP pp) ('tp-inside': a TP group is consecutive hosts,
one server of a rail-optimised fabric when TP divides its GPUs) or rank = pp + PP
(dp + DP tp) ('tp-across': a TP group's ranks are spread over the hosts). Rank i runs
on the i-th host of the fabric.

Schedule. Megatron's 1F1B without interleaving: stage s runs min(PP - s - 1, M)
warm-up forwards, then alternates a forward and a backward, then drains the
backwards. Per layer and micro-batch:
* forward: attention compute, TP all-reduce (or, with ``tp_comm='rs-ag'``,
  reduce-scatter then all-gather: sequence parallelism), MLP compute, TP all-reduce;
  a MoE layer's MLP is an EP all-to-all (dispatch), the experts' compute and an EP
  all-to-all (combine) among the EP group (ranks of one stage and TP index whose DP
  indices share a block of EP); ZeRO-3 all-gathers the layer's parameters over DP first;
* backward: the same communication in reverse, twice the compute (ZeRO-3 gathers again);
* PP: the activation (forward) and its gradient (backward) between adjacent stages,
  1/TP of b s h from every TP rank to its peer (Megatron's scatter-gather); the
  sender goes on computing, the receiver waits for it;
* DP: in the last micro-batch's backward, each bucket of ``bucket_bytes`` of gradients
  (the layers' parameters in reverse order) is all-reduced over the DP group
  (reduce-scattered with ZeRO 1/3), overlapped with the remaining backward; expert
  parameters over the expert-data-parallel group (DP / EP ranks). ZeRO-1 all-gathers the
  updated parameters after the last reduce-scatter (the optimizer's time is not counted).

Compute. FLOPs per layer and micro-batch forward: 8 b s h^2 + 4 b s^2 h (attention)
plus 16 b s h^2 per expert a token visits (MLP; dense: 1), divided by TP; the last
stage adds the LM head, 2 b s h V / TP; backward is twice the forward. A compute
segment lasts FLOPs / (peak x MFU).

How a rank's timeline becomes a DAG. Each rank keeps a cursor: the messages it last
waited for and the compute since then. A message it sends gets the cursor's messages
as dependencies and the compute as its gap; a blocking collective's messages received
or sent by the rank become the new cursor (exact: its first send left at the cursor). The later messages of a collective depend on the
data they forward and on the rank's first message of it (a rank forwards only once it
has joined). A receive while compute is pending cannot be said exactly with one gap
per message: the generator then waits for both and computes afterwards (a later start
by at most that compute), and counts these in ``meta['inexact_waits']``; with TP > 1
every layer ends in a TP collective and there are none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import ParameterError
from core.messages import Message, Workload
from traffic import collectives
from traffic.dagfile import ComputeSegment

PLACEMENTS = ("tp-inside", "tp-across")
TP_COMMS = ("allreduce", "rs-ag")
DIMENSIONS = ("tp", "pp", "dp", "ep")


@dataclass(frozen=True)
class Transformer:
    """A GPT-style decoder; ``experts`` > 0 makes every layer's MLP a MoE."""

    layers: int = 4
    hidden: int = 1024
    heads: int = 16
    seq: int = 1024
    vocab: int = 32000
    micro_batch: int = 1
    micro_batches: int = 4
    precision_bytes: int = 2
    experts: int = 0
    top_k: int = 1

    def check(self) -> None:
        for name in ("layers", "hidden", "heads", "seq", "vocab", "micro_batch",
                     "micro_batches", "precision_bytes", "top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ParameterError(name, value, "must be an integer >= 1")
        if self.hidden % self.heads:
            raise ParameterError("heads", self.heads, f"must divide hidden={self.hidden}")
        if self.experts < 0 or (self.experts and self.top_k > self.experts):
            raise ParameterError("experts", self.experts, "must be 0 (dense) or >= top_k")


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    zero: int = 0
    placement: str = "tp-inside"
    tp_comm: str = "allreduce"
    bucket_bytes: int = 25 << 20

    @property
    def ranks(self) -> int:
        return self.tp * self.pp * self.dp

    def check(self, model: Transformer) -> None:
        for name in ("tp", "pp", "dp", "ep", "bucket_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ParameterError(name, value, "must be an integer >= 1")
        if self.zero not in (0, 1, 3):
            raise ParameterError("zero", self.zero, "expected 0 (off), 1 or 3")
        if self.placement not in PLACEMENTS:
            raise ParameterError("placement", self.placement, f"expected {PLACEMENTS}")
        if self.tp_comm not in TP_COMMS:
            raise ParameterError("tp_comm", self.tp_comm, f"expected {TP_COMMS}")
        if self.ranks < 2:
            raise ParameterError("layout", self, "TP x PP x DP must be at least 2 ranks")
        if model.heads % self.tp:
            raise ParameterError("tp", self.tp, f"must divide heads={model.heads}")
        if model.layers % self.pp:
            raise ParameterError("pp", self.pp, f"must divide layers={model.layers}")
        if self.ep > 1 and not model.experts:
            raise ParameterError("ep", self.ep, "expert parallelism needs experts > 0")
        if self.dp % self.ep or (model.experts and model.experts % self.ep):
            raise ParameterError("ep", self.ep, "must divide dp and the number of experts")
        if self.zero and self.dp < 2:
            raise ParameterError("zero", self.zero, "sharding needs dp >= 2")


@dataclass(frozen=True)
class Gpu:
    peak_flops: float = 989e12      # H100 SXM, dense BF16
    mfu: float = 0.4

    def seconds(self, flops: float) -> float:
        return flops / (self.peak_flops * self.mfu)

    def check(self) -> None:
        if not (math.isfinite(self.peak_flops) and self.peak_flops > 0):
            raise ParameterError("peak_flops", self.peak_flops, "must be positive")
        if not 0 < self.mfu <= 1:
            raise ParameterError("mfu", self.mfu, "expected 0 < MFU <= 1")


@dataclass
class _Cursor:
    deps: frozenset[int] = frozenset()
    offset_s: float = 0.0


@dataclass
class DagBuilder:
    """A DAG under construction, one cursor per rank (module doc): compute, sends and
    collectives appended in each rank's program order."""

    hosts: list[str]
    size_scale: float
    messages: list[Message] = field(default_factory=list)
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    op_of: dict[int, str] = field(default_factory=dict)
    compute: list[ComputeSegment] = field(default_factory=list)
    cursors: dict[int, _Cursor] = field(default_factory=dict)
    inexact_waits: int = 0

    def cursor(self, rank: int) -> _Cursor:
        return self.cursors.setdefault(rank, _Cursor())

    def work(self, rank: int, seconds: float, what: str) -> None:
        if seconds <= 0:
            return
        c = self.cursor(rank)
        self.compute.append(ComputeSegment(rank, tuple(sorted(c.deps)), c.offset_s, seconds,
                                           what))
        c.offset_s += seconds

    def wait(self, rank: int, received: Sequence[int]) -> None:
        """The rank cannot go on before ``received`` completed (a blocking receive)."""
        c = self.cursor(rank)
        if c.offset_s > 0:
            self.inexact_waits += 1
        self.cursors[rank] = _Cursor(c.deps | frozenset(received), c.offset_s)

    def joined(self, rank: int, done: Sequence[int]) -> None:
        """A blocking collective ended at the rank with ``done``, every message it sent
        or received there: the first it sent left at its cursor, so they end later."""
        self.cursors[rank] = _Cursor(frozenset(done), 0.0)

    def scaled(self, size_bytes: float) -> int:
        return max(1, math.ceil(size_bytes * self.size_scale))

    def collective(self, kind: str, ranks: Sequence[int], size_bytes: float, tag: str,
                   op: str, blocking: bool = True) -> None:
        """``kind`` (a traffic.collectives name) over ``ranks``, joined at each rank's
        cursor; with ``blocking`` what each rank receives becomes its cursor."""
        size = self.scaled(size_bytes)
        n = len(ranks)
        if n < 2:
            return
        sub = collectives.build(kind, [str(r) for r in ranks], size)
        base = len(self.messages)
        first: dict[str, int] = {}
        for m in sub.messages:
            if not m.deps:
                first.setdefault(m.src, base + m.msg_id)
        ended: dict[int, list[int]] = {}
        for m in sub.messages:
            src, dst = int(m.src), int(m.dst)
            msg_id = base + m.msg_id
            if m.deps:
                deps = {base + d for d in m.deps} | {first[m.src]}
                gap = 0.0
            else:
                c = self.cursor(src)
                deps, gap = set(c.deps), c.offset_s
            self.messages.append(Message(msg_id, self.hosts[src], self.hosts[dst], m.size_bytes,
                                         tuple(sorted(deps)), gap_s=gap, step=m.step, tag=tag))
            self.op_of[msg_id] = op
            ended.setdefault(dst, []).append(msg_id)
            ended.setdefault(src, []).append(msg_id)
        self.ops[op] = {"collective": kind.split("-")[0], "size_bytes": size, "ranks": n,
                        "tag": tag}
        if blocking:
            for r in ranks:
                self.joined(r, ended[r])

    def send(self, src: int, dst: int, size_bytes: float, tag: str, op: str,
             start_s: float = 0.0) -> int:
        """One message at ``src``'s cursor, not before ``start_s`` (open loop); its id."""
        c = self.cursor(src)
        msg_id = len(self.messages)
        size = self.scaled(size_bytes)
        self.messages.append(Message(msg_id, self.hosts[src], self.hosts[dst], size,
                                     tuple(sorted(c.deps)), start_s=start_s,
                                     gap_s=c.offset_s, tag=tag))
        self.op_of[msg_id] = op
        self.ops[op] = {"collective": "sendrecv", "size_bytes": size, "ranks": 2, "tag": tag}
        return msg_id


def rank_of(layout: Layout, tp: int, dp: int, pp: int) -> int:
    if layout.placement == "tp-inside":
        return tp + layout.tp * (dp + layout.dp * pp)
    return pp + layout.pp * (dp + layout.dp * tp)


def _schedule(stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """1F1B: ('F', m) and ('B', m) in the order stage ``stage`` runs them."""
    warmup = min(stages - stage - 1, micro_batches)
    order = [("F", m) for m in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [("F", warmup + i), ("B", i)]
    order += [("B", m) for m in range(micro_batches - warmup, micro_batches)]
    return order


def layer_flops(model: Transformer) -> tuple[float, float]:
    """Forward FLOPs of one layer and micro-batch: (attention, MLP), before TP."""
    b, s, h = model.micro_batch, model.seq, model.hidden
    attn = 8 * b * s * h * h + 4 * b * s * s * h
    mlp = 16 * b * s * h * h * (model.top_k if model.experts else 1)
    return attn, mlp


def params_per_layer(model: Transformer, layout: Layout) -> tuple[float, float]:
    """Parameters of one layer held by one rank: (dense, experts)."""
    h = model.hidden
    dense = (4 * h * h + (0 if model.experts else 8 * h * h)) / layout.tp
    experts = 8 * h * h * model.experts / layout.ep / layout.tp if model.experts else 0.0
    return dense, experts


class _Iteration:
    """The generator's state: the model, the layout, the compute times and the DAG."""

    def __init__(self, model: Transformer, layout: Layout, hosts: Sequence[str], gpu: Gpu,
                 size_scale: float) -> None:
        self.model, self.layout = model, layout
        self.g = DagBuilder(list(hosts[:layout.ranks]), size_scale)
        self.tp, self.pp, self.dp, self.ep = layout.tp, layout.pp, layout.dp, layout.ep
        b, s, h = model.micro_batch, model.seq, model.hidden
        self.prec = model.precision_bytes
        self.act_bytes = b * s * h * self.prec
        attn_flops, mlp_flops = layer_flops(model)
        self.attn_s, self.mlp_s = gpu.seconds(attn_flops / self.tp), gpu.seconds(mlp_flops
                                                                                / self.tp)
        self.head_s = gpu.seconds(2 * b * s * h * model.vocab / self.tp)
        self.per_stage = model.layers // self.pp
        self.dense_params, self.expert_params = params_per_layer(model, layout)
        self.a2a_bytes = self.act_bytes * model.top_k / self.tp
        layer_bytes = (self.dense_params + self.expert_params) * self.prec
        self.per_bucket = max(1, int(layout.bucket_bytes // layer_bytes))
        self.sent: dict[tuple[str, int, int, int], int] = {}  # (act|grad, mb, src, dst) -> id

    def group_tp(self, d: int, p: int) -> list[int]:
        return [rank_of(self.layout, t, d, p) for t in range(self.tp)]

    def group_dp(self, t: int, p: int, members: Sequence[int]) -> list[int]:
        return [rank_of(self.layout, t, d, p) for d in members]

    def each_rank(self, p: int, seconds: float, what: str) -> None:
        for d in range(self.dp):
            for r in self.group_tp(d, p):
                self.g.work(r, seconds, what)

    def tp_comm(self, p: int, what: str) -> None:
        for d in range(self.dp):
            ranks = self.group_tp(d, p)
            if self.layout.tp_comm == "allreduce":
                self.g.collective("allreduce-ring", ranks, self.act_bytes, "tp", f"{what}-d{d}")
            else:
                self.g.collective("reducescatter", ranks, self.act_bytes, "tp", f"{what}-d{d}-rs")
                self.g.collective("allgather", ranks, self.act_bytes, "tp", f"{what}-d{d}-ag")

    def all_to_all(self, p: int, what: str) -> None:
        """Every EP group of stage ``p`` (ranks of one TP index, a block of EP DP indices)."""
        for t in range(self.tp):
            for k in range(0, self.dp, self.ep):
                self.g.collective("alltoall", self.group_dp(t, p, range(k, k + self.ep)),
                                  self.a2a_bytes, "ep", f"{what}-t{t}-g{k // self.ep}")

    def layer_pass(self, p: int, mb: int, layer: int, phase: str) -> None:
        """One layer's forward ('fwd') or backward ('bwd') on stage ``p`` (module doc)."""
        factor = 1.0 if phase == "fwd" else 2.0
        name = f"{phase}-mb{mb}-L{layer}"
        if self.layout.zero == 3:
            for t in range(self.tp):
                self.g.collective("allgather", self.group_dp(t, p, range(self.dp)),
                                  self.dense_params * self.prec, "dp", f"dp-zero3-ag-{name}-t{t}")
        for part in (["mlp", "attn"] if phase == "bwd" else ["attn", "mlp"]):
            if part == "attn":
                self.each_rank(p, factor * self.attn_s, f"{phase} L{layer} attention")
                self.tp_comm(p, f"tp-{name}-attn")
            elif self.model.experts and self.ep > 1:
                self.all_to_all(p, f"ep-a2a-dispatch-{name}")
                self.each_rank(p, factor * self.mlp_s, f"{phase} L{layer} experts")
                self.all_to_all(p, f"ep-a2a-combine-{name}")
                if self.tp > 1:
                    self.tp_comm(p, f"tp-{name}-mlp")
            else:
                self.each_rank(p, factor * self.mlp_s, f"{phase} L{layer} mlp")
                self.tp_comm(p, f"tp-{name}-mlp")

    def gradients(self, p: int, layers: Sequence[int]) -> None:
        """DP buckets of the gradients of ``layers`` (just computed), non-blocking."""
        kind = "reducescatter" if self.layout.zero else "allreduce-ring"
        dense = self.dense_params * self.prec * len(layers)
        experts = self.expert_params * self.prec * len(layers)
        name = f"L{layers[0]}-{layers[-1]}"
        for t in range(self.tp):
            if self.dp > 1 and dense:
                self.g.collective(kind, self.group_dp(t, p, range(self.dp)), dense, "dp",
                                  f"dp-grad-{name}-t{t}", blocking=False)
            if self.dp // self.ep > 1 and experts:
                for k in range(self.ep):
                    self.g.collective(kind, self.group_dp(t, p, range(k, self.dp, self.ep)),
                                      experts, "dp", f"dp-expert-grad-{name}-t{t}-e{k}",
                                      blocking=False)

    def micro_step(self, p: int, phase: str, mb: int) -> bool:
        """Stage ``p``'s forward ('F') or backward ('B') of micro-batch ``mb``; False
        (nothing done) while the neighbour stage has not sent what it needs."""
        kind, peer, nxt = ("act", p - 1, p + 1) if phase == "F" else ("grad", p + 1, p - 1)
        pairs = [(rank_of(self.layout, t, d, peer), rank_of(self.layout, t, d, p))
                 for d in range(self.dp) for t in range(self.tp)] if 0 <= peer < self.pp else []
        if any((kind, mb, src, dst) not in self.sent for src, dst in pairs):
            return False
        for src, dst in pairs:
            self.g.wait(dst, [self.sent[(kind, mb, src, dst)]])
        stage_layers = range(p * self.per_stage, (p + 1) * self.per_stage)
        last = p == self.pp - 1
        if phase == "F":
            for layer in stage_layers:
                self.layer_pass(p, mb, layer, "fwd")
            if last:
                self.each_rank(p, self.head_s, "fwd LM head")
        else:
            if last:
                self.each_rank(p, 2 * self.head_s, "bwd LM head")
            done: list[int] = []
            for layer in reversed(stage_layers):
                self.layer_pass(p, mb, layer, "bwd")
                done.append(layer)
                if mb == self.model.micro_batches - 1 and (len(done) == self.per_bucket
                                                           or layer == stage_layers[0]):
                    self.gradients(p, sorted(done))
                    done = []
        if 0 <= nxt < self.pp:
            for d in range(self.dp):
                for t in range(self.tp):
                    src, dst = rank_of(self.layout, t, d, p), rank_of(self.layout, t, d, nxt)
                    self.sent[(kind, mb, src, dst)] = self.g.send(
                        src, dst, self.act_bytes / self.tp, "pp",
                        f"pp-{kind}-mb{mb}-s{p}-d{d}-t{t}")
        return True

    def schedule(self) -> None:
        """Every stage's 1F1B order, each stage running until it waits for a neighbour."""
        pointers = [0] * self.pp
        orders = [_schedule(p, self.pp, self.model.micro_batches) for p in range(self.pp)]
        while any(pointers[p] < len(orders[p]) for p in range(self.pp)):
            progressed = False
            for p in range(self.pp):
                while pointers[p] < len(orders[p]) and self.micro_step(p, *orders[p][pointers[p]]):
                    pointers[p] += 1
                    progressed = True
            if not progressed:
                raise AssertionError("the 1F1B schedule deadlocked")  # 1F1B never does

    def zero1_gather(self) -> None:
        """ZeRO-1: every rank all-gathers its stage's updated parameters once its
        gradient shards are in (the optimizer's time is not counted)."""
        g = self.g
        for p in range(self.pp):
            for t in range(self.tp):
                group = self.group_dp(t, p, range(self.dp))
                for r in group:
                    g.wait(r, [m.msg_id for m in g.messages
                               if m.tag == "dp" and g.hosts[r] in (m.src, m.dst)])
                g.collective("allgather", group, self.dense_params * self.prec * self.per_stage,
                             "dp", f"dp-zero1-params-s{p}-t{t}")

    def workload(self) -> Workload:
        self.schedule()
        if self.layout.zero == 1:
            self.zero1_gather()
        g, layout = self.g, self.layout
        compute_s = dict.fromkeys(range(layout.ranks), 0.0)
        for c in g.compute:
            compute_s[c.rank] += c.duration_s
        return Workload(
            f"training tp{self.tp} pp{self.pp} dp{self.dp} ep{self.ep}", g.messages,
            list(g.hosts), max(m.size_bytes for m in g.messages),
            meta={"ops": g.ops, "op_of": g.op_of, "compute": g.compute,
                  "size_scale": g.size_scale, "inexact_waits": g.inexact_waits,
                  "compute_s": max(compute_s.values()),
                  "layout": {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep,
                             "zero": layout.zero, "placement": layout.placement,
                             "tp_comm": layout.tp_comm}})


def iteration(model: Transformer, layout: Layout, hosts: Sequence[str], *, gpu: Gpu = Gpu(),
              size_scale: float = 1.0) -> Workload:
    """The iteration's message DAG on ``hosts`` (rank i on hosts[i]; module doc)."""
    model.check()
    layout.check(model)
    gpu.check()
    if not (math.isfinite(size_scale) and 0 < size_scale <= 1):
        raise ParameterError("size_scale", size_scale, "expected 0 < scale <= 1")
    if layout.ranks > len(hosts):
        raise ParameterError("layout", f"{layout.ranks} ranks",
                             f"more than the fabric's {len(hosts)} hosts")
    return _Iteration(model, layout, hosts, gpu, size_scale).workload()

"""A priori frame-level estimate of per-frame routing (adaptive, spray, spray-rr, ECMP,
and on a dragonfly Valiant and UGAL).

Every directed link is a FIFO egress queue drained at its rate; each data frame of each
flow is injected by its source host at NIC rate (the whole message fits in the
selective-repeat window, ``traffic.selective_repeat.WINDOW_PACKETS``, and cc is off, so
a host sends back to back), and at every switch takes the member that the routing
mode's decision (`topologies.loadbalance`, the same functions emu/bpf/router.c mirrors)
picks from the state the switch would read at that instant:

* ``adaptive``: `least_queue_choice` over the members' backlog now (the bytes a port
  draining at its rate still holds, the frame on the wire included, as
  `queue_now_scaled` reads it), in whole frames (``WIRE_FRAME_BYTES``), ties from the
  member after the destination's last;
* ``spray``: `spray_choice` of a seeded random draw; ``spray-rr``: `round_robin_choice`
  of the destination's counter; ``ecmp``: one seeded random member per flow and switch
  (a hash draw);
* ``valiant`` and ``ugal`` (a dragonfly, given its `topologies.valiant.GroupRoutes`):
  each frame carries its tag, and each switch takes the decision router.c's
  ``group_slot`` takes: at the source switch a uniform intermediate group
  (`intermediate_group`), under ``ugal`` only if its shortest next-hop queue times
  the Valiant path's links is below the minimal next hops' times the minimal path's
  (`ugal_prefers_valiant`, queues in whole frames, ties from a random member), a
  minimal frame decided again at the next switch of the source group; a tagged frame
  follows the next hops toward its group, then minimal; members at random.

With a ``window`` a host keeps at most that many of a flow's frames unacknowledged,
as the engine's requester does (`traffic.window`): the next frame waits for the ACK
that opens the window.

The receiver returns an ACK every ``acks_every`` data frames and on the last one; ACKs
are routed by the same rule and share a destination's state, as in the switch. Times
are integer picoseconds, so that a queue of exactly one frame reads one frame.

Timing: each flow starts at a seeded random instant within its first frame's time on
its NIC (``start_phase``), and every link crossing takes a seeded random extra delay in
[0, ``timing_noise_s``) (a link stays FIFO). In the emulator the hosts of one edge
switch send at a nearly fixed relative phase: a capture of h1 and h2 under adaptive
(fattree,4 permutation) puts h1's frames 0.06-0.14 frame times before h2's nearest in
80 % of cases, so what matters is a static phase and a few ns of relative jitter, not
the 5-25 ns of spacing jitter each NIC shows by itself.

Adaptive routing's result depends on that timing, erratically (fattree,4 permutation
with its ACKs, 40 seeds each): 0.996 of the ideal with neither phase nor noise; with
random phases 0.97, 0.89, 0.85, 0.84, 0.96 at 1, 3, 10, 30, 100 ns of noise. What does
not depend on it: with the fabric's links 3 % faster than the NICs, 0.995 at every
level. At exact saturation (two hosts at line rate into two uplinks at that rate) the
queues, compared in whole frames, sit at the boundary between 0 and 1 frame: a port
whose frame is on the wire reads 0, as an idle one does, so the choice is a tie that
alternates the destination's frames; a few bytes more (an ACK) or a few ns earlier
make it read 1 and force the choice, and forced choices unbalance each destination's
split, which overloads the downlinks. Spray and spray-rr barely change. `spread` runs
each of `NOISE_LEVELS_S`.

What it leaves out: reordering's effect on the sender (none: nothing is lost, and
the window counts acknowledged frames), drops (queues are unbounded), HTB's bucket (a port may send up to a
frame ahead of its rate; the switch's reading subtracts it, `queue_now_scaled`).

`estimate` runs one workload; `ideal_s` is the model's own balanced reference (every
flow at NIC rate, one unloaded path latency), so `FrameRun.ratio` is comparable to the
experiment's busbw ÷ ideal.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from core.errors import ParameterError
from core.frame import ACK_FRAME_BYTES, MTU_PAYLOAD_BYTES, WIRE_FRAME_BYTES, WIRE_OVERHEAD_BYTES
from core.messages import Workload
from topologies.loadbalance import (
    GROUP_MODES,
    least_queue_choice,
    round_robin_choice,
    spray_choice,
)
from topologies.routing import Routes
from topologies.valiant import (
    TAG_MINIMAL,
    TAG_UNDECIDED,
    GroupRoutes,
    intermediate_group,
    tag_of,
    ugal_prefers_valiant,
)

#: The modes of any fabric (and GROUP_MODES on a dragonfly).
MODES = ("adaptive", "spray", "spray-rr", "ecmp")
#: Data frames per ACK: the engine's default coalescing (engine.run.DEFAULT_ACKS_EVERY).
DEFAULT_ACKS_EVERY = 16
#: Timing noise of `estimate`: arrivals are never exactly simultaneous (see above).
DEFAULT_TIMING_NOISE_S = 1e-9
#: The noise levels `spread` runs: the relative jitter of two hosts' frames measured
#: in the emulator is a few ns (see above).
NOISE_LEVELS_S = (1e-9, 3e-9, 1e-8)
_PS_PER_S = 10**12
_ACK_WIRE_BYTES = ACK_FRAME_BYTES + WIRE_OVERHEAD_BYTES
_HEADER_WIRE_BYTES = WIRE_FRAME_BYTES - MTU_PAYLOAD_BYTES


@dataclass(frozen=True)
class Flow:
    """One message: ``src`` sends ``size_bytes`` to ``dst``."""

    src: str
    dst: str
    size_bytes: int

    @property
    def frames(self) -> int:
        return max(1, math.ceil(self.size_bytes / MTU_PAYLOAD_BYTES))

    def wire_bytes(self, psn: int) -> int:
        """Frame ``psn``'s bytes on the wire (the last one carries the remainder)."""
        payload = self.size_bytes - psn * MTU_PAYLOAD_BYTES
        return _HEADER_WIRE_BYTES + max(0, min(MTU_PAYLOAD_BYTES, payload))


@dataclass(frozen=True)
class FrameRun:
    """One estimate: the last data frame's arrival (s), the model's ideal (s), and the
    wire bytes each directed link carried."""

    completion_s: float
    ideal_s: float
    link_bytes: dict[tuple[str, str], int]

    @property
    def ratio(self) -> float:
        """Throughput ÷ the ideal (ideal time ÷ completion time)."""
        return self.ideal_s / self.completion_s


class _Fabric:
    """The links' rates and delays in integer picoseconds, and each port's state."""

    def __init__(self, graph: nx.Graph, rng: random.Random | None = None, noise_ps: int = 0):
        self.rate_bps: dict[tuple[str, str], float] = {}
        self.delay_ps: dict[tuple[str, str], int] = {}
        for a, b, info in graph.edges(data=True):
            for u, v in ((a, b), (b, a)):
                # a switch's pipeline latency counted on the links it sends on
                pipeline_s = float(graph.nodes[u].get("switch_latency_s", 0.0))
                self.rate_bps[u, v] = float(info["rate_bps"])
                self.delay_ps[u, v] = round((float(info.get("delay_s", 0.0)) + pipeline_s)
                                            * _PS_PER_S)
        self.free_ps: dict[tuple[str, str], int] = dict.fromkeys(self.rate_bps, 0)
        self.carried: dict[tuple[str, str], int] = dict.fromkeys(self.rate_bps, 0)
        self.last_arrival_ps: dict[tuple[str, str], int] = dict.fromkeys(self.rate_bps, 0)
        self.rng, self.noise_ps = rng, noise_ps

    def serialize_ps(self, link: tuple[str, str], wire_bytes: int) -> int:
        return math.ceil(wire_bytes * 8 * _PS_PER_S / self.rate_bps[link])

    def frames_queued(self, link: tuple[str, str], now_ps: int) -> int:
        """The port's backlog at ``now_ps`` in whole full-size frames."""
        left_ps = self.free_ps[link] - now_ps
        if left_ps <= 0:
            return 0
        return int(left_ps * self.rate_bps[link] // (8 * _PS_PER_S * WIRE_FRAME_BYTES))

    def send(self, link: tuple[str, str], now_ps: int, wire_bytes: int) -> int:
        """Queue a frame on ``link`` at ``now_ps``; when it is whole at the far end."""
        done = max(now_ps, self.free_ps[link]) + self.serialize_ps(link, wire_bytes)
        self.free_ps[link] = done
        self.carried[link] += wire_bytes
        arrive = done + self.delay_ps[link]
        if self.rng is not None and self.noise_ps:
            arrive = max(arrive + self.rng.randrange(self.noise_ps), self.last_arrival_ps[link])
            self.last_arrival_ps[link] = arrive
        return arrive


class _Decider:
    """A mode's per-switch decision and the state it keeps per destination."""

    def __init__(self, mode: str, fabric: _Fabric, rng: random.Random,
                 routes: Routes, groups: GroupRoutes | None = None):
        self.mode, self.fabric, self.rng = mode, fabric, rng
        self.routes, self.groups = routes, groups
        self.turn: dict[tuple[str, str], int] = {}      # (switch, dst) -> rr counter
        self.hashed: dict[tuple[str, str, str], int] = {}  # (switch, src, dst) -> member

    def hop(self, node: str, src: str, dst: str, tag: int, from_host: bool, now_ps: int
            ) -> tuple[str, int]:
        """The next node of a frame from ``src`` to ``dst`` at ``node`` carrying ``tag``
        (``from_host``: it came in from its host), and the tag it leaves with."""
        if self.groups is not None and node not in (src, dst):
            return self._group_hop(node, src, dst, tag, from_host, now_ps)
        hops = self._minimal(node, dst)
        return hops[self.member(node, hops, src, dst, now_ps) if len(hops) > 1 else 0], tag

    def _group_hop(self, node: str, src: str, dst: str, tag: int, from_host: bool,
                   now_ps: int) -> tuple[str, int]:
        """router.c's group_slot: Valiant's or UGAL's decision and its tag."""
        gr = self.groups
        assert gr is not None
        own, dst_group, n_groups = gr.group_of[node], gr.group_of[dst], gr.groups
        minimal = self._minimal(node, dst)
        decide = False
        if from_host:
            decide = own != dst_group and n_groups >= 3
        elif tag == TAG_UNDECIDED:
            decide = (self.mode == "ugal" and own != dst_group and n_groups >= 3
                      and gr.group_of[src] == own)
        elif tag != TAG_MINIMAL:
            via_hops = gr.to_group[node].get(tag - 1) if own not in (tag - 1, dst_group) else ()
            if via_hops:
                return self._any(via_hops), tag
        if not decide:
            return self._any(minimal), TAG_MINIMAL
        via = intermediate_group(own, dst_group, n_groups, self.rng.getrandbits(32))
        minimal_tag = TAG_UNDECIDED if from_host and self.mode == "ugal" else TAG_MINIMAL
        toward = gr.to_group[node].get(via) if via is not None else ()
        if not toward:
            return self._any(minimal), minimal_tag
        if self.mode == "valiant":
            return self._any(toward), tag_of(via)
        q_min = [self.fabric.frames_queued((node, h), now_ps) for h in minimal]
        q_val = [self.fabric.frames_queued((node, h), now_ps) for h in toward]
        m = least_queue_choice(q_min, self.rng.randrange(len(minimal)))
        v = least_queue_choice(q_val, self.rng.randrange(len(toward)))
        if ugal_prefers_valiant(q_min[m], gr.hops_to_host[dst][node], q_val[v],
                                gr.via_hops(node, via, dst)):
            return toward[v], tag_of(via)
        return minimal[m], minimal_tag

    def _minimal(self, node: str, dst: str) -> tuple[str, ...]:
        """The fabric's next hops from ``node`` toward ``dst``."""
        hops = self.routes.next_hops[node].get(dst)
        if not hops:
            raise ParameterError("routes", (node, dst), "no route for a frame of the workload")
        return hops

    def _any(self, hops: tuple[str, ...]) -> str:
        return hops[self.rng.randrange(len(hops))] if len(hops) > 1 else hops[0]

    def member(self, node: str, hops: tuple[str, ...], src: str, dst: str, now_ps: int) -> int:
        n = len(hops)
        key = (node, dst)
        if self.mode == "spray":
            return spray_choice(n, self.rng.getrandbits(32))
        if self.mode == "spray-rr":
            turn = self.turn.get(key, 0)
            self.turn[key] = turn + 1
            return round_robin_choice(turn, n)
        if self.mode == "adaptive":
            queues = [self.fabric.frames_queued((node, h), now_ps) for h in hops]
            choice = least_queue_choice(queues, self.turn.get(key, 0) % n)
            self.turn[key] = choice + 1
            return choice
        flow = (node, src, dst)
        if flow not in self.hashed:
            self.hashed[flow] = self.rng.randrange(n)
        return self.hashed[flow]


def estimate(graph: nx.Graph, routes: Routes, flows: Sequence[Flow], mode: str, *,
             seed: int = 0, acks_every: int = DEFAULT_ACKS_EVERY,
             timing_noise_s: float = DEFAULT_TIMING_NOISE_S, start_phase: bool = True,
             groups: GroupRoutes | None = None, window: int | None = None) -> FrameRun:
    """Route every frame of ``flows`` (starting together, or each within
    its first frame's time with ``start_phase``) under ``mode`` on ``graph``
    (edge attributes ``rate_bps``, ``delay_s``; node ``switch_latency_s``) and
    ``routes`` (``groups``: the dragonfly's, for `GROUP_MODES`); ``seed`` draws
    spray's members, ECMP's hashes, the start phases and the timing noise;
    ``acks_every`` 0 sends no ACK; ``window``: the most unacknowledged frames per
    flow (None: no limit)."""
    if mode not in MODES + GROUP_MODES:
        raise ParameterError("mode", mode, f"choose one of {' | '.join(MODES + GROUP_MODES)}")
    if mode in GROUP_MODES and groups is None:
        raise ParameterError("groups", None, f"{mode} routes through dragonfly groups: "
                                             "give the fabric's GroupRoutes")
    if acks_every < 0 or not 0 <= timing_noise_s < 1:
        raise ParameterError("acks_every/timing_noise_s", (acks_every, timing_noise_s),
                             "expected acks_every >= 0 and a noise in [0, 1 s)")
    if window is not None and (window < 1 or not acks_every or window < acks_every):
        raise ParameterError("window", window, "expected at least one ACK's frames "
                                               "(acks_every >= 1) or None")
    rng = random.Random(seed)
    fabric = _Fabric(graph, rng, round(timing_noise_s * _PS_PER_S))
    decider = _Decider(mode, fabric, rng, routes, groups if mode in GROUP_MODES else None)
    # events: (time ps, sequence, node, came from its host, flow index, psn, is ACK,
    # tag); a data frame at its source host is one waiting for the NIC, an ACK's psn
    # the frames it acknowledges
    events = []
    for i, flow in enumerate(flows):
        first = routes.next_hops.get(flow.src, {}).get(flow.dst)
        if not first:
            raise ParameterError("routes", (flow.src, flow.dst), "no route for a flow")
        frame_ps = fabric.serialize_ps((flow.src, first[0]), WIRE_FRAME_BYTES)
        phase = rng.randrange(frame_ps) if start_phase else 0
        events.append((phase, i, flow.src, False, i, 0, False, TAG_UNDECIDED))
    heapq.heapify(events)
    seq = len(events)
    received = [0] * len(flows)
    acked = [0] * len(flows)
    waiting: dict[int, int] = {}  # flow -> the psn its window holds back
    done_ps = 0
    while events:
        now, _, node, from_host, i, psn, ack, tag = heapq.heappop(events)
        flow = flows[i]
        src, dst = (flow.dst, flow.src) if ack else (flow.src, flow.dst)
        if node == dst:
            if ack:
                acked[i] = max(acked[i], psn)
                held = waiting.get(i)
                if window is not None and held is not None and held - acked[i] < window:
                    del waiting[i]
                    seq += 1
                    heapq.heappush(events, (now, seq, flow.src, False, i, held, False,
                                            TAG_UNDECIDED))
                continue
            received[i] += 1
            done_ps = max(done_ps, now)
            if acks_every and (received[i] % acks_every == 0 or received[i] == flow.frames):
                node, src, dst, ack = flow.dst, flow.dst, flow.src, True
                psn, tag = received[i], TAG_UNDECIDED
            else:
                continue
        nxt, tag = decider.hop(node, src, dst, tag, from_host, now)
        wire = _ACK_WIRE_BYTES if ack else flow.wire_bytes(psn)
        arrive = fabric.send((node, nxt), now, wire)
        seq += 1
        heapq.heappush(events, (arrive, seq, nxt, node == src, i, psn, ack, tag))
        if node == flow.src and not ack and psn + 1 < flow.frames:
            if window is not None and psn + 1 - acked[i] >= window:
                waiting[i] = psn + 1
                continue
            # the next frame waits for the NIC; an ACK queued meanwhile goes first
            seq += 1
            heapq.heappush(events, (fabric.free_ps[(node, nxt)], seq, node, False, i, psn + 1,
                                    False, TAG_UNDECIDED))
    return FrameRun(done_ps / _PS_PER_S, ideal_s(graph, routes, flows),
                    {link: b for link, b in fabric.carried.items() if b})


def ideal_s(graph: nx.Graph, routes: Routes, flows: Sequence[Flow]) -> float:
    """No queue but at the hosts' NICs: each host sends its flows' frames back to back
    and receives theirs back to back, every frame crossing an unloaded path; when the
    last frame of the slowest host lands."""
    fabric = _Fabric(graph)
    paths = [routes.paths(f.src, f.dst)[0] for f in flows]
    sent_ps: dict[str, int] = {}
    received_ps: dict[str, int] = {}
    for flow, path in zip(flows, paths, strict=True):
        every = range(flow.frames)
        sent_ps[flow.src] = sent_ps.get(flow.src, 0) + sum(
            fabric.serialize_ps((path[0], path[1]), flow.wire_bytes(p)) for p in every)
        received_ps[flow.dst] = received_ps.get(flow.dst, 0) + sum(
            fabric.serialize_ps((path[-2], path[-1]), flow.wire_bytes(p)) for p in every)
    worst_ps = 0
    for flow, path in zip(flows, paths, strict=True):
        last = flow.wire_bytes(flow.frames - 1)
        links = list(zip(path, path[1:], strict=False))
        crossing = sum(fabric.serialize_ps(link, last) + fabric.delay_ps[link] for link in links)
        # the sender's NIC sends everything, then the last frame crosses; or the
        # receiver's link delivers everything after the first frame has crossed
        send_side = sent_ps[flow.src] - fabric.serialize_ps(links[0], last) + crossing
        receive_side = crossing - fabric.serialize_ps(links[-1], last) + received_ps[flow.dst]
        worst_ps = max(worst_ps, send_side, receive_side)
    return worst_ps / _PS_PER_S


def flows_of(workload: Workload) -> list[Flow]:
    """A workload's messages as `Flow` s all posted at once (ParameterError for one that
    waits: the model starts every flow at 0)."""
    if any(m.deps or m.start_s or m.gap_s for m in workload.messages):
        raise ParameterError("workload", workload.name,
                             "has messages that wait (deps, start or gap): the frame "
                             "model posts every message at once")
    return [Flow(m.src, m.dst, m.size_bytes) for m in workload.messages]


def spread(graph: nx.Graph, routes: Routes, flows: Sequence[Flow], mode: str,
           seeds_per_level: int = 4, groups: GroupRoutes | None = None,
           window: int | None = None) -> list[FrameRun]:
    """`estimate` with ``seeds_per_level`` seeds at each of `NOISE_LEVELS_S`: the spread
    of spray's draws and of the unknown timing noise."""
    return [estimate(graph, routes, flows, mode, seed=s, timing_noise_s=noise,
                     groups=groups, window=window)
            for noise in NOISE_LEVELS_S for s in range(seeds_per_level)]

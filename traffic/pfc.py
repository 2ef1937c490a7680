"""PFC logic without I/O: headroom, Xoff/Xon thresholds, who feeds a port, hysteresis, accounting.

Terms (docs/pfc.md):

* an **egress** is a switch port ``(switch, peer)``: the queue PFC watches;
* a **gate** is a port ``(node, switch)`` that sends *into* a switch: the port PFC pauses;
* the **feeders** of egress ``(X, Y)`` are the gates ``(N, X)`` whose traffic can leave X
  toward Y under the fabric's routes (X is N's next hop toward some host that X
  forwards to Y). The emulated switch has no per-ingress buffer accounting (its queue
  is the egress qdisc), so an egress above Xoff pauses all of its feeders, also those
  whose traffic is for other egresses: this is PFC's head-of-line blocking of victims.

All byte quantities are real (bytes are not dilated); times are real seconds except
the ``*_ns`` clocks, which are the controller's wall clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.errors import ParameterError

#: The one lossless priority emulated: RoCEv2's usual class (DSCP 26 -> priority 3).
#: Every frame of the fabric (data, ACK, NAK, CNP) shares a port's single queue, so
#: all of them are paused together.
PRIORITY = 3


def headroom_bytes(feeders: Iterable[tuple[float, float]], reaction_s: float,
                   leak_bytes: int) -> int:
    """Bytes that may still arrive at an egress after its queue crossed Xoff.

    ``feeders``: (rate_bps, link_delay_s) of every port feeding it (real units).
    Each keeps sending at line rate for the controller's reaction time plus a round
    trip over its link (the PAUSE frame travels out, the data on the wire comes in),
    then finishes at most ``leak_bytes`` (the frame in progress).
    """
    if not reaction_s >= 0 or not math.isfinite(reaction_s):
        raise ParameterError("reaction_s", reaction_s, "must be finite and >= 0")
    total = 0.0
    for rate_bps, delay_s in feeders:
        total += rate_bps / 8 * (reaction_s + 2 * delay_s) + leak_bytes
    return math.ceil(total)


@dataclass(frozen=True)
class PfcThresholds:
    """Xoff/Xon of one egress (bytes of its queue) and the headroom above Xoff."""

    xoff_bytes: int
    xon_bytes: int
    headroom_bytes: int
    buffer_bytes: int


def plan_thresholds(port: str, buffer_bytes: int, headroom: int, xoff_bytes: int | None = None,
                    xon_bytes: int | None = None, xon_gap_bytes: int = 0) -> PfcThresholds:
    """Xoff = buffer - headroom unless given (then at most that), Xon = Xoff - gap unless given.

    ParameterError naming ``port`` when the buffer cannot hold the headroom or the
    thresholds are not 0 <= Xon < Xoff <= buffer - headroom.
    """
    ceiling = buffer_bytes - headroom
    if ceiling <= 0:
        raise ParameterError("buffer_bytes", buffer_bytes,
                             f"port {port} cannot hold PFC's headroom of {headroom} B (rate x "
                             "(reaction + 2 x link delay) + one frame per feeding port); "
                             "use a larger buffer, a larger S or a shorter reaction budget")
    xoff = ceiling if xoff_bytes is None else int(xoff_bytes)
    if not 0 < xoff <= ceiling:
        raise ParameterError("xoff_bytes", xoff_bytes,
                             f"port {port} needs 0 < Xoff <= buffer - headroom = "
                             f"{buffer_bytes} - {headroom} = {ceiling} B, or it may drop")
    xon = max(0, xoff - xon_gap_bytes) if xon_bytes is None else int(xon_bytes)
    if not 0 <= xon < xoff:
        raise ParameterError("xon_bytes", xon_bytes,
                             f"port {port} needs 0 <= Xon < Xoff = {xoff} B")
    return PfcThresholds(xoff, xon, headroom, buffer_bytes)


def feeders(next_hops: Mapping[str, Mapping[str, Sequence[str]]], switch: str, peer: str,
            neighbours: Iterable[str]) -> frozenset[str]:
    """Neighbours of ``switch`` whose traffic can leave it toward ``peer``.

    ``next_hops[node][dst_host]`` are the routes (``topologies.routing.Routes``). Traffic from
    neighbour N reaches ``peer`` through ``switch`` when, for some host h, ``switch``
    is one of N's next hops toward h and ``peer`` one of ``switch``'s.
    """
    dsts = [h for h, hops in next_hops.get(switch, {}).items() if peer in hops]
    return frozenset(n for n in neighbours if n != peer
                     and any(switch in next_hops.get(n, {}).get(h, ()) for h in dsts))


class Hysteresis:
    """Which egresses assert a pause, and so which gates are paused.

    An egress asserts from the poll its queue is >= Xoff until the poll it is <= Xon;
    a gate is paused while at least one egress it feeds asserts.
    """

    def __init__(self, egress_feeders: Mapping[Hashable, Iterable[Hashable]],
                 thresholds: Mapping[Hashable, PfcThresholds]) -> None:
        self.feeders = {e: tuple(g) for e, g in egress_feeders.items()}
        self.thresholds = dict(thresholds)
        self.asserting = {e: False for e in self.feeders}
        self.xoff_events = {e: 0 for e in self.feeders}
        self.holders: dict[Hashable, set[Hashable]] = {}
        for gs in self.feeders.values():
            for g in gs:
                self.holders.setdefault(g, set())

    def gate_paused(self, gate: Hashable) -> bool:
        return bool(self.holders.get(gate))

    def update(self, backlogs: Mapping[Hashable, int]) -> list[tuple[Hashable, bool]]:
        """Feed one poll's queue depths; return the gates whose state changed as (gate, paused)."""
        touched: dict[Hashable, bool] = {}
        for e, backlog in backlogs.items():
            th = self.thresholds[e]
            if not self.asserting[e] and backlog >= th.xoff_bytes:
                self.asserting[e] = True
                self.xoff_events[e] += 1
                for g in self.feeders[e]:
                    touched.setdefault(g, self.gate_paused(g))
                    self.holders[g].add(e)
            elif self.asserting[e] and backlog <= th.xon_bytes:
                self.asserting[e] = False
                for g in self.feeders[e]:
                    touched.setdefault(g, self.gate_paused(g))
                    self.holders[g].discard(e)
        return [(g, now) for g, before in touched.items() if (now := self.gate_paused(g)) != before]


class PauseLedger:
    """Pause events and paused time per gate, on the clock the caller gives (ns)."""

    def __init__(self, gates: Iterable[Hashable]) -> None:
        self.events = {g: 0 for g in gates}
        self.paused_ns = {g: 0 for g in self.events}
        self.since: dict[Hashable, int] = {}

    def paused(self, gate: Hashable, t_ns: int) -> None:
        if gate not in self.since:
            self.since[gate] = t_ns
            self.events[gate] += 1

    def resumed(self, gate: Hashable, t_ns: int) -> None:
        t0 = self.since.pop(gate, None)
        if t0 is not None:
            self.paused_ns[gate] += max(0, t_ns - t0)

    def close(self, t_ns: int) -> None:
        for g in list(self.since):
            self.resumed(g, t_ns)

    def total_ns(self, gate: Hashable, now_ns: int | None = None) -> int:
        """Paused time so far, the running interval included when ``now_ns`` is given."""
        open_ns = now_ns - self.since[gate] if now_ns is not None and gate in self.since else 0
        return self.paused_ns[gate] + max(0, open_ns)


class ActionQueue:
    """Gate actions due at a wall time (the emulated PAUSE/RESUME propagation), in order."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable, bool, int]] = []
        self._seq = 0

    def push(self, due_ns: int, gate: Hashable, pause: bool, decided_ns: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due_ns, self._seq, gate, pause, decided_ns))

    def pop_due(self, now_ns: int) -> list[tuple[Hashable, bool, int, int]]:
        """(gate, pause, due_ns, decided_ns) of every action due by ``now_ns``, oldest first."""
        out = []
        while self._heap and self._heap[0][0] <= now_ns:
            due, _seq, gate, pause, decided = heapq.heappop(self._heap)
            out.append((gate, pause, due, decided))
        return out

    def next_due_ns(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)

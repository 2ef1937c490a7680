"""The fixed delays of a real fabric along a routed path, by part. Pure.

A frame crossing an idle real fabric from host to host is late by

* **per-hop serialization**: a store-and-forward hop (NIC or switch port) sends a
  frame only once it holds all of it, so every hop adds ``8 * frame_bytes / rate_bps``
  of its link; a cut-through hop forwards the head as it arrives, so the frame is
  serialized once, at the slowest hop;
* **switch latency**: the pipeline of every switch on the path (node attribute
  ``switch_latency_s``);
* **link propagation**: every link's ``delay_s`` (cable length x 5 ns/m);

and a message by the **NIC overhead** before its first frame. The emulated fabric
(veths into HTB shapers) has none of these of its own; the engine adds them
(docs/design.md, "Fixed delays"), netem adds propagation where the kernel has it.

``graph`` is the topology as `topologies.routing.topo_graph` builds it: edges carry
``rate_bps`` and ``delay_s``, switches ``switch_latency_s``; a path is a sequence of
node names from host to host (`Routes.paths`). Times are real seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import ParameterError
from core.frame import ACK_FRAME_BYTES, FRAME_BYTES, WIRE_OVERHEAD_BYTES

#: The fixed delays by name, as runs record them (config.json ``fixed_delays``).
SERIALIZATION = "per-hop serialization"
SWITCH_LATENCY = "switch latency"
PROPAGATION = "link propagation"
NIC_OVERHEAD = "NIC overhead"
FIXED_DELAYS = (SERIALIZATION, SWITCH_LATENCY, PROPAGATION, NIC_OVERHEAD)
#: How hops forward a frame: commodity Ethernet switches store and forward.
FORWARDING = ("store-and-forward", "cut-through")


@dataclass(frozen=True)
class PathDelay:
    """The path parts of the fixed delay of one frame (real s)."""

    serialization_s: float = 0.0
    switch_s: float = 0.0
    propagation_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.serialization_s + self.switch_s + self.propagation_s

    def parts(self) -> dict[str, float]:
        """{fixed-delay name: seconds}, the names of FIXED_DELAYS."""
        return {SERIALIZATION: self.serialization_s, SWITCH_LATENCY: self.switch_s,
                PROPAGATION: self.propagation_s}

    def less_propagation(self, emulated_s: float) -> PathDelay:
        """What is left to add where ``emulated_s`` of the propagation is already
        emulated (netem delay lines on the path's links)."""
        return PathDelay(self.serialization_s, self.switch_s,
                         max(0.0, self.propagation_s - emulated_s))


def check_forwarding(forwarding: str) -> None:
    if forwarding not in FORWARDING:
        raise ParameterError("forwarding", forwarding, f"expected one of {', '.join(FORWARDING)}")


def hops(path: Sequence[str]) -> list[tuple[str, str]]:
    """The links of a path, in order."""
    return list(zip(path[:-1], path[1:], strict=True))


def path_delay(graph: Any, path: Sequence[str], frame_bytes: float,
               forwarding: str = "store-and-forward") -> PathDelay:
    """The fixed delay of one frame of ``frame_bytes`` crossing ``path`` on an idle fabric.

    A hop serializes the frame's time on the wire: its bytes plus Ethernet's preamble,
    FCS and gap (core.frame.WIRE_OVERHEAD_BYTES)."""
    check_forwarding(forwarding)
    if len(path) < 2:
        raise ParameterError("path", tuple(path), "a path runs from one host to another")
    links = hops(path)
    wire_bits = 8.0 * (frame_bytes + WIRE_OVERHEAD_BYTES)
    ser = [wire_bits / float(graph.edges[u, v]["rate_bps"]) for u, v in links]
    return PathDelay(
        serialization_s=sum(ser) if forwarding == "store-and-forward" else max(ser),
        switch_s=sum(float(graph.nodes[n].get("switch_latency_s", 0.0)) for n in path[1:-1]),
        propagation_s=sum(float(graph.edges[u, v].get("delay_s", 0.0)) for u, v in links))


def mean_delay(delays: Sequence[PathDelay]) -> PathDelay:
    """Part by part mean over the equal-cost paths a flow may hash onto (they are equal
    in a Clos, so this is the common value there)."""
    if not delays:
        raise ParameterError("paths", 0, "no routed path")
    n = len(delays)
    return PathDelay(sum(d.serialization_s for d in delays) / n,
                     sum(d.switch_s for d in delays) / n,
                     sum(d.propagation_s for d in delays) / n)


def round_trip_s(graph: Any, paths: Callable[[str, str], Sequence[Sequence[str]]], src: str,
                 dst: str, forwarding: str = FORWARDING[0]) -> float:
    """The unloaded round trip from ``src`` to ``dst``: a full frame there and its ACK
    back, each the mean over the equal-cost paths ``paths(a, b)`` gives."""
    return sum(mean_delay([path_delay(graph, p, size, forwarding) for p in paths(a, b)]).total_s
               for a, b, size in ((src, dst, FRAME_BYTES), (dst, src, ACK_FRAME_BYTES)))

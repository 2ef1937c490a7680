"""Lab 0: time dilation and the bandwidth-delay product, by hand. Fill in
TODO 1 to TODO 4 (see HANDOUT.md); check your work with
`emu lab check 0 . --no-emulation` (seconds), then `sudo emu lab check 0 .`.

Every quantity is in real-fabric units (bit/s, s, bytes) unless a name says
"emulated". A path is a dict of three lists, in the order a frame crosses it:

* ``rates_bps``: each link's rate (host -> first switch first);
* ``propagation_s``: each link's propagation delay;
* ``switch_latency_s``: each switch's pipeline latency (one fewer than links).
"""

from __future__ import annotations

import math  # noqa: F401  (math.ceil may help)

#: RoCE path MTU: the payload of a full frame.
MTU_PAYLOAD_BYTES = 4096
#: RoCEv2 headers of a data frame: Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4.
HEADER_BYTES = 58
#: What Ethernet spends per frame beyond its bytes: preamble 8, FCS 4, gap 12.
WIRE_OVERHEAD_BYTES = 24
#: A full data frame's time on the wire, in bytes (4178).
WIRE_FRAME_BYTES = MTU_PAYLOAD_BYTES + HEADER_BYTES + WIRE_OVERHEAD_BYTES
#: An ACK on the wire: BTH + AETH + ICRC over Ethernet/IP/UDP (62), plus 24.
ACK_WIRE_BYTES = 62 + WIRE_OVERHEAD_BYTES

Path = dict[str, list[float]]


# --------------------------------------------------------------- TODO 1: dilation

def emulated_rate_bps(real_rate_bps: float, scale: float) -> float:
    """The rate the emulator shapes a real link to: S times slower."""
    # TODO 1: rates divide by S.
    raise NotImplementedError("TODO 1: emulated_rate_bps")


def emulated_time_s(real_time_s: float, scale: float) -> float:
    """How long a real duration lasts on the emulator: S times longer."""
    # TODO 1: times multiply by S.
    raise NotImplementedError("TODO 1: emulated_time_s")


def serialization_s(frame_bytes: float, rate_bps: float) -> float:
    """Time to clock ``frame_bytes`` (bytes on the wire) onto a link of ``rate_bps``."""
    # TODO 1: bytes become bits before they meet a rate.
    raise NotImplementedError("TODO 1: serialization_s")


# ---------------------------------------------------- TODO 2: a path's latency and BDP

def one_way_latency_s(path: Path, frame_bytes: float) -> float:
    """One frame across an idle path: every store-and-forward hop serializes it
    in full, every link propagates it, every switch adds its pipeline latency."""
    # TODO 2: per hop: serialization (store and forward), propagation; per switch: its latency.
    raise NotImplementedError("TODO 2: one_way_latency_s")


def reverse(path: Path) -> Path:
    """The same links and switches, crossed the other way."""
    return {key: list(reversed(values)) for key, values in path.items()}


def path_bdp_bytes(path: Path) -> float:
    """Bytes in flight that keep the path's bottleneck busy for one round trip:
    a full data frame there and its ACK back."""
    # TODO 2: the bottleneck rate x the round trip (a full frame there, an ACK back), in bytes.
    raise NotImplementedError("TODO 2: path_bdp_bytes")


# --------------------------------------------------------------- TODO 3: the incast

def wire_bytes(payload_bytes: float) -> float:
    """Bytes on the wire for a message: every frame carries its headers and
    Ethernet's per-frame overhead."""
    # TODO 3: the payload plus, per frame, the headers and Ethernet's overhead.
    raise NotImplementedError("TODO 3: wire_bytes")


def incast_completion_s(n_senders: int, size_bytes: float, path: Path,
                        nic_overhead_s: float) -> float:
    """N senders x size through the receiver's last hop, with congestion control
    off: that port is busy from the first byte to the last, plus one frame's fixed
    latency across the path and the NIC's per-message overhead."""
    # TODO 3: N x size on the wire through the last hop, plus one frame's path latency and the NIC overhead.
    raise NotImplementedError("TODO 3: incast_completion_s")


# --------------------------------------------------------- TODO 4: ring all-reduce

def ring_step_latency_s(neighbour_paths: list[Path], nic_overhead_s: float) -> float:
    """A ring's steps are not barriers: each rank waits only for its predecessor, so
    the critical path crosses the ring's links in turn and a step costs, on average,
    the mean neighbour latency plus the NIC overhead."""
    # TODO 4: the NIC overhead plus the ring neighbours' latency (which one? read the docstring).
    raise NotImplementedError("TODO 4: ring_step_latency_s")


def ring_allreduce_s(n_ranks: int, size_bytes: float, rate_bps: float,
                     step_latency_s: float) -> float:
    """Ring all-reduce: 2(n-1) steps, each sends S/n bytes (with headers) at the NIC rate."""
    # TODO 4: 2(n-1) steps of S/n bytes on the wire at the NIC rate, each plus the step latency.
    raise NotImplementedError("TODO 4: ring_allreduce_s")

"""Lab 6: an alpha-beta model of all-reduce on the fabric. Fill in TODO 1 to TODO 3
(see HANDOUT.md); check with `emu lab check 6 . --no-emulation`, then
`sudo emu lab check 6 .`.

``predict_allreduce_s(algorithm, n_ranks, size_bytes, fabric)`` is what the checks
call; the helpers are yours to reshape. Everything is in real-fabric units: bit/s,
seconds, bytes. ``fabric`` (built by the lab from the topology the model prices):

* ``nic_rate_bps``: every host's NIC rate;
* ``nic_overhead_s``: the NIC's cost per message, before its first byte;
* ``mtu_payload_bytes`` (4096) and ``frame_overhead_bytes`` (82: RoCEv2's 58 bytes of
  headers and Ethernet's 24 of preamble, FCS and gap, per frame);
* ``paths[(i, j)]``: rank i's routed path to rank j, as in lab 0: a dict of
  ``rates_bps`` and ``propagation_s`` per link, ``switch_latency_s`` per switch;
* ``ranks``: the host of each rank.
"""

from __future__ import annotations

import math  # noqa: F401  (math.ceil, math.log2 may help)
from typing import Any

Fabric = dict[str, Any]


# ------------------------------------------------ TODO 1: the pieces of alpha and beta

def wire_bytes(payload_bytes: float, fabric: Fabric) -> float:
    """Bytes on the wire: every frame carries its headers and Ethernet's overhead."""
    # TODO 1: the payload plus frame_overhead_bytes per frame of mtu_payload_bytes.
    raise NotImplementedError("TODO 1: wire_bytes")


def path_latency_s(path: dict[str, list[float]], frame_bytes: float) -> float:
    """One frame across an idle path (lab 0's one_way_latency_s)."""
    # TODO 1: store-and-forward serialization per hop, propagation, switch latency.
    raise NotImplementedError("TODO 1: path_latency_s")


def message_alpha_s(fabric: Fabric, src: int, dst: int, payload_bytes: float) -> float:
    """A message's fixed cost from rank src to rank dst."""
    # TODO 1: what does a message pay before and after its bytes drain?
    raise NotImplementedError("TODO 1: message_alpha_s")


def beta_s(fabric: Fabric, payload_bytes: float) -> float:
    """A message's bandwidth term."""
    # TODO 1: its bytes on the wire at the bottleneck rate (which link is it here?).
    raise NotImplementedError("TODO 1: beta_s")


# ---------------------------------------------------------------- TODO 2: the ring

def ring_allreduce_s(n: int, size_bytes: float, fabric: Fabric) -> float:
    """Ring all-reduce: reduce-scatter then all-gather around ranks 0 -> 1 -> ... -> n-1 -> 0."""
    # TODO 2: how many steps, how many bytes each, and what latency does a step pay?
    # (Is a step a barrier? Rank i starts step k once rank i-1's step k-1 has arrived.)
    raise NotImplementedError("TODO 2: ring_allreduce_s")


# --------------------------------------------------------- TODO 3: halving-doubling

def hd_allreduce_s(n: int, size_bytes: float, fabric: Fabric) -> float:
    """Halving-doubling (Rabenseifner), n a power of two: recursive-halving
    reduce-scatter, then the recursive-doubling all-gather that mirrors it. At the
    first level rank i exchanges half the buffer with rank i XOR n/2."""
    # TODO 3: sum the levels; which pair finishes last at each level?
    raise NotImplementedError("TODO 3: hd_allreduce_s")


def predict_allreduce_s(algorithm: str, n_ranks: int, size_bytes: float,
                        fabric: Fabric) -> float:
    """Your model's all-reduce time: ``algorithm`` is "ring" or "hd"."""
    if algorithm == "ring":
        return ring_allreduce_s(n_ranks, size_bytes, fabric)
    if algorithm == "hd":
        return hd_allreduce_s(n_ranks, size_bytes, fabric)
    raise ValueError(f"algorithm is 'ring' or 'hd', not {algorithm!r}")

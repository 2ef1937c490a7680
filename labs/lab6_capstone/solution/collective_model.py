"""Lab 6: an alpha-beta model of all-reduce on the fabric (reference solution).

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

import math
from typing import Any

Fabric = dict[str, Any]


# ------------------------------------------------ TODO 1: the pieces of alpha and beta

def wire_bytes(payload_bytes: float, fabric: Fabric) -> float:
    """Bytes on the wire: every frame carries its headers and Ethernet's overhead."""
    frames = math.ceil(payload_bytes / fabric["mtu_payload_bytes"])
    return payload_bytes + frames * fabric["frame_overhead_bytes"]


def path_latency_s(path: dict[str, list[float]], frame_bytes: float) -> float:
    """One frame across an idle path: store-and-forward serialization at every hop,
    propagation on every link, every switch's pipeline."""
    serialization = sum(8.0 * frame_bytes / r for r in path["rates_bps"])
    return serialization + sum(path["propagation_s"]) + sum(path["switch_latency_s"])


def message_alpha_s(fabric: Fabric, src: int, dst: int, payload_bytes: float) -> float:
    """A message's fixed cost: the NIC overhead and its last frame's path latency."""
    frame = min(wire_bytes(payload_bytes, fabric),
                fabric["mtu_payload_bytes"] + fabric["frame_overhead_bytes"])
    return fabric["nic_overhead_s"] + path_latency_s(fabric["paths"][(src, dst)], frame)


def beta_s(fabric: Fabric, payload_bytes: float) -> float:
    """A message's bytes on the wire at the NIC rate (the NIC is the bottleneck when
    the fabric's links are faster, as on the fat-tree)."""
    return 8.0 * wire_bytes(payload_bytes, fabric) / fabric["nic_rate_bps"]


# ---------------------------------------------------------------- TODO 2: the ring

def ring_allreduce_s(n: int, size_bytes: float, fabric: Fabric) -> float:
    """2(n-1) steps of S/n. The steps are not barriers: rank i waits only for rank
    i-1, so the critical path crosses the ring's links in turn, and a step costs the
    mean neighbour alpha."""
    chunk = size_bytes / n
    alphas = [message_alpha_s(fabric, i, (i + 1) % n, chunk) for i in range(n)]
    return 2 * (n - 1) * (sum(alphas) / n + beta_s(fabric, chunk))


# --------------------------------------------------------- TODO 3: halving-doubling

def hd_allreduce_s(n: int, size_bytes: float, fabric: Fabric) -> float:
    """Recursive halving (reduce-scatter) then doubling (all-gather), n = 2^k: at
    level k every rank exchanges S/2^k with its partner at distance n/2^k; a level
    ends when its slowest pair has finished, and the doubling mirrors the halving."""
    if n & (n - 1):
        raise ValueError(f"halving-doubling needs a power-of-two rank count, not {n}")
    total = 0.0
    level, distance = 1, n // 2
    while distance >= 1:
        chunk = size_bytes / 2**level
        alpha = max(message_alpha_s(fabric, i, i ^ distance, chunk) for i in range(n))
        total += alpha + beta_s(fabric, chunk)
        level, distance = level + 1, distance // 2
    return 2 * total


def predict_allreduce_s(algorithm: str, n_ranks: int, size_bytes: float,
                        fabric: Fabric) -> float:
    """Your model's all-reduce time: ``algorithm`` is "ring" or "hd"."""
    if algorithm == "ring":
        return ring_allreduce_s(n_ranks, size_bytes, fabric)
    if algorithm == "hd":
        return hd_allreduce_s(n_ranks, size_bytes, fabric)
    raise ValueError(f"algorithm is 'ring' or 'hd', not {algorithm!r}")

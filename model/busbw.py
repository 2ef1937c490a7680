"""NCCL-tests bandwidth conventions.

algbw = size / time, with size the collective's nominal size S (the NCCL-tests
"size": the full buffer for all-reduce and broadcast, the *output* buffer for
all-gather, the *input* buffer for reduce-scatter, the whole send buffer for
all-to-all). busbw = algbw x factor, so that busbw is comparable to the link
rate whatever the algorithm:

    all-reduce                          2(n-1)/n
    reduce-scatter, all-gather, all-to-all  (n-1)/n
    broadcast, reduce, incast, permutation, send/recv   1

Bandwidths here are in bit/s (NCCL-tests prints GB/s = 1e9 bytes/s).
"""

from __future__ import annotations

_ALIASES = {
    "allreduce": "allreduce", "ringallreduce": "allreduce", "treeallreduce": "allreduce",
    "halvingdoubling": "allreduce", "hdallreduce": "allreduce",
    "reducescatter": "reducescatter", "allgather": "allgather", "alltoall": "alltoall",
    "broadcast": "broadcast", "bcast": "broadcast", "reduce": "reduce",
    "incast": "incast", "permutation": "permutation", "sendrecv": "sendrecv",
}


def normalize_collective(name: str) -> str:
    """'all-reduce', 'AllReduce', 'all_reduce' -> 'allreduce'."""
    key = name.lower().replace("-", "").replace("_", "").replace(" ", "")
    if key not in _ALIASES:
        raise ValueError(f"unknown collective {name!r}; known: {sorted(set(_ALIASES.values()))}")
    return _ALIASES[key]


def busbw_factor(collective: str, n_ranks: int) -> float:
    """NCCL-tests bus-bandwidth factor of a collective over ``n_ranks`` ranks."""
    if n_ranks < 1:
        raise ValueError(f"n_ranks must be >= 1, not {n_ranks}")
    kind = normalize_collective(collective)
    n = n_ranks
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind in ("reducescatter", "allgather", "alltoall"):
        return (n - 1) / n
    return 1.0


def algbw_bps(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth S / t in bit/s."""
    if not time_s > 0:
        raise ValueError(f"time_s must be positive, not {time_s}")
    return 8.0 * size_bytes / time_s


def busbw_bps(collective: str, n_ranks: int, size_bytes: float, time_s: float) -> float:
    """Bus bandwidth algbw x factor in bit/s."""
    return algbw_bps(size_bytes, time_s) * busbw_factor(collective, n_ranks)

"""Lab 5: collectives and load balance. Fill in TODO 1 to TODO 4 (see HANDOUT.md).

Alpha-beta costs (Hockney; Thakur, Rabenseifner and Gropp 2005) of an all-reduce of
S bytes over n ranks, each message paying alpha (s) plus its bits over the link's
bandwidth B (bit/s):

    ring:               2 (n - 1) steps of S / n bytes
    halving-doubling:   log2 n steps of S/2, S/4, ..., S/n (reduce-scatter),
                        then the same steps in reverse (all-gather)

and balls into bins for ECMP: m flows each hashed onto one of k equal-cost paths,
uniformly and independently. Times are real-fabric seconds, sizes bytes, rates bit/s
(a byte is 8 bits). Check your work with `emu lab check 5 . --no-emulation`.
"""

from __future__ import annotations

import math


def ring_allreduce_time_s(n_ranks: int, size_bytes: float, alpha_s: float,
                          link_bps: float) -> float:
    """Ring all-reduce: reduce-scatter then all-gather, 2 (n - 1) steps of S / n."""
    # TODO 1: every step costs alpha plus the time to send S / n bytes at link_bps.
    return 0.0


def hd_allreduce_time_s(n_ranks: int, size_bytes: float, alpha_s: float,
                        link_bps: float) -> float:
    """Halving-doubling all-reduce (n a power of two): step k of the reduce-scatter
    exchanges S / 2^k with the partner at distance n / 2^k; the all-gather mirrors it."""
    levels = round(math.log2(n_ranks))
    if 2 ** levels != n_ranks:
        raise ValueError(f"halving-doubling needs a power-of-two rank count, not {n_ranks}")
    # TODO 2: add up the 2 log2(n) steps: alpha plus the time of S / 2^k bytes each.
    return 0.0


def crossover_bytes(n_ranks: int, alpha_s: float, ring_bps: float, hd_bps: float) -> float:
    """The size at which the ring (at ``ring_bps``) and halving-doubling (at the lower
    ``hd_bps`` its far partners get) cost the same; math.inf if HD is never slower."""
    # TODO 3: solve ring(S) = hd(S) for S. Which alpha terms differ, which beta terms?
    return 0.0


def collision_fraction(n_flows: int, n_paths: int) -> float:
    """Expected fraction of flows that share their path with at least one other flow."""
    # TODO 4a: the chance that none of the other flows hashes onto this flow's path.
    return 0.0


def permutation_throughput_fraction(n_flows: int, n_paths: int) -> float:
    """Expected mean throughput of m line-rate flows hashed onto k line-rate paths, as
    a fraction of line rate (the flows of one path share it equally)."""
    # TODO 4b: how many paths are busy, on average?
    return 0.0

"""Lab 5: collectives and load balance, the reference solution.

Alpha-beta costs (Hockney; Thakur, Rabenseifner and Gropp 2005) of an all-reduce of
S bytes over n ranks, each message paying alpha (s) plus its bits over the link's
bandwidth B (bit/s):

    ring:               2 (n - 1) steps of S / n bytes
    halving-doubling:   log2 n steps of S/2, S/4, ..., S/n (reduce-scatter),
                        then the same steps in reverse (all-gather)

and balls into bins for ECMP: m flows each hashed onto one of k equal-cost paths,
uniformly and independently. Times are real-fabric seconds, sizes bytes, rates bit/s.
"""

from __future__ import annotations

import math


def ring_allreduce_time_s(n_ranks: int, size_bytes: float, alpha_s: float,
                          link_bps: float) -> float:
    """Ring all-reduce: reduce-scatter then all-gather, 2 (n - 1) steps of S / n."""
    steps = 2 * (n_ranks - 1)
    return steps * (alpha_s + 8.0 * size_bytes / n_ranks / link_bps)


def hd_allreduce_time_s(n_ranks: int, size_bytes: float, alpha_s: float,
                        link_bps: float) -> float:
    """Halving-doubling all-reduce (n a power of two): step k of the reduce-scatter
    exchanges S / 2^k with the partner at distance n / 2^k; the all-gather mirrors it."""
    levels = round(math.log2(n_ranks))
    if 2 ** levels != n_ranks:
        raise ValueError(f"halving-doubling needs a power-of-two rank count, not {n_ranks}")
    reduce_scatter_s = sum(alpha_s + 8.0 * size_bytes / 2 ** k / link_bps
                           for k in range(1, levels + 1))
    return 2 * reduce_scatter_s


def crossover_bytes(n_ranks: int, alpha_s: float, ring_bps: float, hd_bps: float) -> float:
    """The size at which the ring (at ``ring_bps``) and halving-doubling (at the lower
    ``hd_bps`` its far partners get) cost the same; math.inf if HD is never slower.

    Both move 2 (n - 1) / n S bytes per rank; the ring pays 2 (n - 1) alphas, HD
    2 log2 n. Equal costs: 2 (n - 1 - log2 n) alpha = 2 (n - 1) / n 8 S (1/hd - 1/ring).
    """
    if hd_bps >= ring_bps:
        return math.inf
    extra_alpha_s = 2 * (n_ranks - 1 - math.log2(n_ranks)) * alpha_s
    extra_s_per_byte = 2 * (n_ranks - 1) / n_ranks * 8.0 * (1 / hd_bps - 1 / ring_bps)
    return extra_alpha_s / extra_s_per_byte


def collision_fraction(n_flows: int, n_paths: int) -> float:
    """Expected fraction of flows that share their path with at least one other: a
    flow is alone when each of the other m - 1 flows misses its path (1 - 1/k each)."""
    return 1.0 - (1.0 - 1.0 / n_paths) ** (n_flows - 1)


def permutation_throughput_fraction(n_flows: int, n_paths: int) -> float:
    """Expected mean throughput of m line-rate flows hashed onto k line-rate paths, as
    a fraction of line rate: a path carrying j flows gives each 1/j, so the flows
    together get one line rate per busy path, and E[busy paths] = k (1 - (1 - 1/k)^m)."""
    busy = n_paths * (1.0 - (1.0 - 1.0 / n_paths) ** n_flows)
    return busy / n_flows

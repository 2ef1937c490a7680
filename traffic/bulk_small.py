"""Bimodal traffic: bulk collectives and small latency-sensitive messages on one fabric.

The bulk class is ``rounds`` back-to-back runs of a collective (a `traffic.collectives`
name) over ``hosts``, each round's first messages waiting for the previous round's last
ones (tag 'bulk'). The small class is ``count`` single messages, sizes cycling through
``small_sizes``, each between a random pair of distinct hosts (seeded), posted open loop
at evenly spaced times over ``window_s`` (tag 'small'): RPCs, decode all-to-alls,
parameter-server pulls beside a training job's all-reduces.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from core.errors import ParameterError
from core.messages import Message, Workload
from traffic import collectives

#: Most small messages one workload holds.
MAX_SMALL = 100_000
#: Most bulk rounds.
MAX_ROUNDS = 1000


def bulk(kind: str, hosts: Sequence[str], size_bytes: int, rounds: int) -> list[Message]:
    """``rounds`` chained runs of collective ``kind`` (module doc), ids from 0."""
    if not 1 <= rounds <= MAX_ROUNDS:
        raise ParameterError("rounds", rounds, f"expected 1..{MAX_ROUNDS}")
    one = collectives.build(kind, list(hosts), size_bytes).messages
    depended = {d for m in one for d in m.deps}
    out: list[Message] = []
    sinks: tuple[int, ...] = ()
    for _ in range(rounds):
        base = len(out)
        out += [replace(m, msg_id=base + m.msg_id,
                        deps=tuple(base + d for d in m.deps) if m.deps else sinks, tag="bulk")
                for m in one]
        sinks = tuple(base + m.msg_id for m in one if m.msg_id not in depended)
    return out


def small(hosts: Sequence[str], sizes: Sequence[int], count: int, window_s: float,
          seed: int, first_id: int = 0) -> list[Message]:
    """The small class (module doc), ids from ``first_id``: message i at i x window /
    count."""
    if len(hosts) < 2:
        raise ParameterError("hosts", len(hosts), "small messages need at least 2 hosts")
    if not 1 <= count <= MAX_SMALL:
        raise ParameterError("small_count", count, f"expected 1..{MAX_SMALL}")
    if not sizes or any(s < 1 for s in sizes):
        raise ParameterError("small_sizes", list(sizes), "expected sizes >= 1 B")
    if not (math.isfinite(window_s) and window_s >= 0):
        raise ParameterError("window_s", window_s, "expected a finite time >= 0")
    rng = random.Random(seed)
    out = []
    for i in range(count):
        src, dst = rng.sample(list(hosts), 2)
        out.append(Message(first_id + i, src, dst, int(sizes[i % len(sizes)]),
                           start_s=i * window_s / count, tag="small"))
    return out


def bimodal(kind: str, hosts: Sequence[str], bulk_bytes: int, rounds: int,
            sizes: Sequence[int], count: int, window_s: float, seed: int = 0,
            with_bulk: bool = True) -> Workload:
    """Both classes in one DAG (module doc); ``with_bulk=False``: the small class alone,
    the same messages at the same times."""
    heavy = bulk(kind, hosts, bulk_bytes, rounds) if with_bulk else []
    light = small(hosts, sizes, count, window_s, seed, first_id=len(heavy))
    messages = heavy + light
    return Workload(f"{kind} x{rounds} + {count} small" if with_bulk else f"{count} small",
                    messages, list(hosts), max(m.size_bytes for m in messages))

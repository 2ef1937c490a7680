"""Latency and bandwidth regimes: collectives over message sizes from 8 B to 64 MiB.

Ring and halving-doubling all-reduce and all-to-all over every host of one fabric
(k=4 fat-tree by default), each size measured and priced a priori for the real fabric
as in `experiments.collective` (same cases, same deviations). Small messages are bound
by the per-step latency alpha (NIC overhead, switch latency, propagation, store and
forward), large ones by bandwidth beta; the report prints the NCCL-tests table
(nccl.csv: size, count, type, redop, time in us, algbw and busbw in GB/s, model
beside), plots time against size on log-log axes with the crossover size
alpha/beta of every collective marked (nccl_sweep.png), and busbw in GB/s beside the
model's curve over every power of two of the sizes (busbw_vs_size.png).

Run time: a 64 MiB ring all-reduce over 16 ranks lasts ~2.7 ms real, S times that
emulated (54 s at S = 2e4, 270 s at 1e5); the default sweep takes about four times
its largest ring, --quick (8 B, 64 KiB, 1 MiB) well under a minute.
"""

from __future__ import annotations

from dataclasses import dataclass

from experiments import collective
from experiments.option_parsers import (
    CC_HELP,
    parse_cc,
    parse_collective,
    parse_list,
    parse_sizes,
    parse_topo,
)
from experiments.options import (
    CommonOptions,
    Option,
    check_topology,
    hash_draws_option,
    with_common,
)
from experiments.rundir import Run

NAME = "sweep"

#: 8 B x 4^k up to 32 MiB, then 64 MiB: both regimes and the crossover between them.
SIZES = [8 << (2 * k) for k in range(12)] + [64 << 20]

OPTIONS: dict[str, Option] = with_common({
    "topo": Option("fattree,4", "topology", parse=parse_topo),
    "collectives": Option(["allreduce-ring", "allreduce-hd", "alltoall"],
                          "collectives (traffic.collectives.NAMES)",
                          parse=parse_list(parse_collective)),
    "sizes": Option(SIZES, "message sizes (NCCL-tests size)", quick=[8, 64 << 10, 1 << 20],
                    parse=parse_sizes),
    "cc": Option("off", CC_HELP, parse=parse_cc),
    "hash_draws": hash_draws_option(16, collective.MAX_HASH_DRAWS),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    """The options of the size sweep (OPTIONS), typed."""

    topo: str
    collectives: list[str]
    sizes: list[int]
    cc: str
    hash_draws: int


def check(opts: Options) -> None:
    """The fabric has ranks to run on and is shaped accurately at S."""
    check_topology(opts.topo, opts.scale, option="topo")


def execute(run: Run, opts: Options) -> None:
    collective.execute(run, collective.Options(
        topos=[opts.topo], collectives=opts.collectives, sizes=opts.sizes, cc=opts.cc,
        hash_draws=opts.hash_draws, **opts.common()), prefix="", label=NAME)

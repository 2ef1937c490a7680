"""The default demo (the README's first command): on a k=4 fat-tree, an incast with
congestion control off and with DCQCN, then a ring all-reduce over all 16 hosts;
ends with the measured-vs-model table and where the plots are. About a minute on
two cores.
"""

from __future__ import annotations

from dataclasses import dataclass

from experiments import collective, incast
from experiments.option_parsers import (
    parse_dcqcn,
    parse_int,
    parse_size,
    parse_sizes,
    parse_thresholds,
    parse_topo,
)
from experiments.options import CommonOptions, Option, check_senders, check_thresholds, with_common
from experiments.rundir import Run

NAME = "demo"

# S: core.scaling.DEFAULT_SCALE (why 20000 on 2 cores is explained there): the
# two 3 x 2 MiB incasts take ~13 s emulated each and the ring all-reduces ~10 s, so
# the demo fits in about a minute with fabric set-up.
OPTIONS: dict[str, Option] = with_common({
    "topo": Option("fattree,4", "topology of both parts", parse=parse_topo),
    "senders": Option(3, "incast senders (the hosts nearest the receiver)",
                      parse=parse_int(1)),
    "incast_size": Option(2 << 20, "bytes per incast sender", quick=1 << 20,
                          parse=parse_size),
    "thresholds": Option("100K/400K", "Kmin/Kmax (bytes) of the DCQCN run",
                         parse=parse_thresholds),
    "dcqcn": Option("paper", "DCQCN parameter set: paper | nic", parse=parse_dcqcn),
    "sizes": Option([1 << 20, 4 << 20], "ring all-reduce sizes", quick=[1 << 20],
                    parse=parse_sizes),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    """The options of the demo (OPTIONS), typed."""

    topo: str
    senders: int
    incast_size: int
    thresholds: str
    dcqcn: str
    sizes: list[int]


def check(opts: Options) -> None:
    """Options that depend on each other, checked before anything is built."""
    check_senders(opts.topo, opts.scale, opts.senders, "senders")
    check_thresholds([opts.thresholds], incast.OPTIONS["pmax"].default)


def execute(run: Run, opts: Options) -> None:
    incast.execute(run, incast.Options(
        topo=opts.topo, senders=opts.senders, size=opts.incast_size, cc=["off", "dcqcn"],
        dcqcn=opts.dcqcn, thresholds=[opts.thresholds], pmax=incast.OPTIONS["pmax"].default,
        **opts.common()), prefix="incast ")
    collective.execute(run, collective.Options(
        topos=[opts.topo], collectives=["allreduce-ring"], sizes=opts.sizes, cc="off",
        hash_draws=collective.OPTIONS["hash_draws"].default, **opts.common()))

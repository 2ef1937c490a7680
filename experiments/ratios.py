"""Rate ratios: the same collective on tiered fabrics (400G NICs, 800G / 1.6T fabric
links) and on uniform ones (every link 400G), showing where the bottleneck moves.

For every fabric: busbw measured vs model, and per link tier the utilisation of
its busiest link, bytes the port sent / (rate x completion time), measured and
predicted (the model's bytes per link and completion time, averaged over its random
ECMP hash outcomes, `experiments.collective`). The tier whose busiest link is fullest
is the bottleneck: the NIC on a tiered fabric, the fabric tier on an oversubscribed
uniform one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from core.scaling import Scale
from emu.fabric import Fabric
from experiments.collective import (
    MAX_HASH_DRAWS,
    CollectiveRun,
    case_name,
    check_fabrics,
    record,
    record_model_curves,
    run_collective,
)
from experiments.option_parsers import (
    CC_HELP,
    parse_cc,
    parse_collective,
    parse_sizes,
    parse_specs,
)
from experiments.options import CommonOptions, Option, hash_draws_option, with_common
from experiments.progress import progress
from experiments.rundir import Run
from model.claims import TIER_UTILISATION
from topologies.spec import build_topo

NAME = "ratios"

OPTIONS: dict[str, Option] = with_common({
    "topos": Option(
        ["leafspine,2,2,4", "leafspine,2,2,4,fabric_rate=400G",
         "fattree,4", "fattree,4,fabric_rate=400G,core_rate=400G"],
        "fabrics to compare (';'-separated); tiered and uniform variants",
        quick=["leafspine,2,1,2,fabric_rate=800G", "leafspine,2,1,2,fabric_rate=400G"],
        parse=parse_specs),
    "collective": Option("alltoall", "the collective (all-to-all loads every tier)",
                         parse=parse_collective),
    "sizes": Option([4 << 20], "buffer sizes", quick=[1 << 20], parse=parse_sizes),
    "cc": Option("off", CC_HELP, parse=parse_cc),
    "hash_draws": hash_draws_option(16, MAX_HASH_DRAWS),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    """The options of the tier-ratio experiment (OPTIONS), typed."""

    topos: list[str]
    collective: str
    sizes: list[int]
    cc: str
    hash_draws: int


def check(opts: Options) -> None:
    """A tier-ratio run is collective runs on several fabrics: the same checks."""
    check_fabrics(opts.topos, opts.scale)


def model_tier_utilisation(fab: Fabric, r: CollectiveRun) -> dict[str, float]:
    """Busiest-link utilisation per tier, as measured: bits a link carries / (rate x
    completion time), for each hash draw of the model, averaged over the draws."""
    per_draw = []
    for pred in r.model:
        tiers: dict[str, float] = {}
        for (u, v), bits in pred.link_bits.items():
            port = fab.port(u, v)
            x = bits / (port.rate_bps * pred.completion_s)
            tiers[port.tier] = max(tiers.get(port.tier, 0.0), x)
        per_draw.append(tiers)
    return {tier: float(np.mean([d.get(tier, 0.0) for d in per_draw])) for tier in per_draw[0]}


def measured_tier_utilisation(r: CollectiveRun) -> dict[str, float]:
    ports = r.measurement.ports
    util = ports.tx_bytes * 8.0 / (ports.rate_bps * r.time_s)
    return util.groupby(ports.tier).max().to_dict()


def _measure(run: Run, fab: Fabric, prefix: str, spec: str, size: int,
             opts: Options) -> None:
    """One collective on ``fab``: its record and the utilisation of each link tier."""
    r = run_collective(fab, opts.collective, size, opts.cc, opts.hash_draws,
                       opts.capture, workers=opts.workers,
                       transport=opts.transport)
    case = record(run, prefix + spec, opts.collective, size, r, fab, opts.cc)
    model = model_tier_utilisation(fab, r)
    measured = measured_tier_utilisation(r)
    rows = []
    for tier in sorted(model, key=lambda t: -model[t]):
        run.metric(case, f"busiest {tier} link utilisation", "fraction",
                   measured.get(tier, 0.0), model[tier], TIER_UTILISATION)
        rows.append({"fabric": spec, "size_bytes": size, "tier": tier,
                     "utilisation_measured": measured.get(tier, 0.0),
                     "utilisation_model": model[tier]})
    frame = pd.DataFrame(rows)
    frame["bottleneck_measured"] = frame.tier == max(measured, key=measured.get)
    frame["bottleneck_model"] = frame.tier == max(model, key=model.get)
    run.frame("tiers", frame)


def execute(run: Run, opts: Options, prefix: str = "") -> None:
    total = len(opts.topos) * len(opts.sizes)
    with progress(total, f"{prefix}ratios") as advance:
        for spec in opts.topos:
            cases = {size: case_name(prefix + spec, opts.collective, size)
                     for size in opts.sizes}
            for case in cases.values():
                if run.finished(case):
                    advance(case)
            if all(run.finished(case) for case in cases.values()):
                continue
            with Fabric(build_topo(spec), Scale(opts.scale), marking="auto",
                        **opts.fabric_options()) as fab:
                run.fabric(spec, fab)
                for size, case in cases.items():
                    if run.finished(case):
                        continue
                    advance.start(case)
                    run.attempt(partial(_measure, run, fab, prefix, spec, size, opts),
                                opts.attempts)
                    run.commit(case)
                    advance(case)
    record_model_curves(run, {prefix + spec: spec for spec in opts.topos},
                        [opts.collective], opts.sizes, opts.hash_draws)

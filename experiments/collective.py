"""Collectives over a sweep of message sizes on several fabrics: an NCCL-tests-style
table (size, time, algbw, busbw) with the model's columns beside it.

Every rank is one host, in host order. Collectives: ring, halving-doubling (the
tree-like all-reduce) and hierarchical all-reduce (ranks grouped by server, or by
the switch they hang off where a topology has no servers), all-gather,
reduce-scatter and all-to-all (`traffic.collectives`). The model prices the same
message DAG a priori for the real fabric (`model.alphabeta.predict_workload`
with its defaults: fluid max-min over the routed paths, RoCEv2 headers on the wire,
store-and-forward hops, the topology's switch latency and propagation, ~1 us NIC
overhead per message). What the emulator does not reproduce of those fixed delays is
measured per case and listed as a named deviation (`experiments.measure.measure_deviations`),
with the model's time without them beside it for attribution only; the headline
comparison is always with the real fabric. The engine hashes every
message onto one of its equal-cost paths (one QP, one UDP source port), so the
model's prediction is the mean completion time over ``hash_draws`` random per-switch
hash outcomes (`predict_workload_hashed`), with their p10-p90 busbw and the ideal of
ECMP spread evenly beside it. The bottleneck rate is the smallest per-flow max-min
rate of the DAG's steps (`workload_bottleneck_rate_bps`).

With ``wan`` each fabric runs as two data centres over a long link
(`topologies.twodc`, docs/wan.md): the hierarchical all-reduce then groups ranks by DC,
and `experiments.wanmodel` adds `model.wan`'s closed form of the ring and hierarchical
all-reduce (the transport's window against the long round trip) and wan.csv.

The table is NCCL-tests' (nccl.csv, printed by the report): size (B), count (float32
elements), type, redop, time (us), algbw and busbw in GB/s, beside the model's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from core.gcpause import collector_paused
from core.scaling import Scale, scale_keeping_frame_time
from core.units import format_size
from emu.fabric import Fabric
from experiments.measure import (
    Measurement,
    emulated_fixed_delays,
    engine_config,
    measure,
    model_graph,
    record_case,
)
from experiments.modelcache import PricedAhead, hashed_draws, spread_prediction
from experiments.option_parsers import (
    CC_HELP,
    parse_cc,
    parse_collective,
    parse_list,
    parse_sizes,
    parse_topo_at,
    split_topo_at,
)
from experiments.options import (
    CommonOptions,
    Option,
    check_topology,
    hash_draws_option,
    with_common,
)
from experiments.progress import progress
from experiments.rundir import Run
from experiments.wanmodel import record_wan
from model.alphabeta import (
    DEFAULT_OVERHEAD_S,
    WorkloadPrediction,
    roce_wire_factor,
    workload_bottleneck_rate_bps,
)
from model.claims import ALPHABETA
from topologies.base import NVLINK_RATE_BPS
from topologies.routing import Routes, compute_routes, topo_graph
from topologies.spec import build_topo
from topologies.twodc import parse_wan, two_dcs
from traffic import collectives

NAME = "collective"

#: The ``wan`` option's value for one data centre.
WAN_OFF = "off"
#: The model prices the whole DAG once per hash draw; beyond this it would run longer
#: than the measurement it is compared with.
MAX_HASH_DRAWS = 1000

def parse_wan_text(value: Any) -> str:
    """The ``wan`` option: 'off' or a `topologies.twodc.parse_wan` text, checked."""
    text = str(value).strip()
    return WAN_OFF if parse_wan(text) is None else text


OPTIONS: dict[str, Option] = with_common({
    # The rail-optimised fabric's GPUs also send on 3.6 Tb/s NVLink: it runs at the S
    # that keeps that frame time a 400G NIC's at the default S, since the engine paces
    # and the gate judges lags in frame times (at the default S the gate refuses its
    # cases; figures: docs/validation.md).
    "topos": Option(["fattree,4", "dragonfly,p=2,a=2,h=1",
                     f"railopt,2,gpus=4@{scale_keeping_frame_time(NVLINK_RATE_BPS):g}"],
                    "fabrics (';'-separated NAME,ARG,KEY=VALUE, each optionally @S: its "
                    "own S instead of the run's)", quick=["leafspine,2,2,2"],
                    parse=parse_list(parse_topo_at)),
    "collectives": Option(["allreduce-ring", "allreduce-hd", "allreduce-hier", "allgather",
                           "alltoall"], "collectives (traffic.collectives.NAMES)",
                          quick=["allreduce-ring", "alltoall"],
                          parse=parse_list(parse_collective)),
    "sizes": Option([256 << 10, 1 << 20, 4 << 20], "buffer sizes (NCCL-tests size)",
                    quick=[256 << 10, 1 << 20], parse=parse_sizes),
    "cc": Option("off", CC_HELP, parse=parse_cc),
    "hash_draws": hash_draws_option(16, MAX_HASH_DRAWS),
    "wan": Option(WAN_OFF, "two data centres: each fabric twice, joined by gateway switches "
                           "over a long link, DISTANCE[,rate=R][,buffer=B] (e.g. 100km,"
                           "rate=400G; 5 us/km, dilated by S); allreduce-hier then groups "
                           "ranks by DC; off: one DC", parse=parse_wan_text),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    """The options of the collective experiment (OPTIONS), typed."""

    topos: list[str]
    collectives: list[str]
    sizes: list[int]
    cc: str
    hash_draws: int
    wan: str = WAN_OFF


def check_fabrics(topos: Sequence[str], scale: float, wan: str = WAN_OFF) -> None:
    """Every fabric has ranks to run on and is shaped accurately at its S (the run's
    ``scale`` unless the entry gives its own), joined with its copy if ``wan`` says so."""
    link = parse_wan(wan)
    for entry in topos:
        spec, at_scale = split_topo_at(entry, scale)
        check_topology(spec, at_scale, option="topos")
        if link is not None:
            two_dcs(spec, link)
            Scale(at_scale).rate_emu_bps(link.rate_bps)


def check(opts: Options) -> None:
    check_fabrics(opts.topos, opts.scale, opts.wan)


@dataclass
class CollectiveRun:
    """One measured collective beside its model."""

    workload: Any
    measurement: Measurement
    time_s: float
    algbw_bps: float
    busbw_bps: float
    time_model_s: float                  # mean over the hash draws
    algbw_model_bps: float
    busbw_model_bps: float
    bottleneck_bps: float
    bottleneck_tier: str
    factor: float
    model: list[WorkloadPrediction]      # one per hash draw (experiments.modelcache)
    busbw_model_spread_bps: float        # ECMP spread evenly: the ideal
    time_model_emulable_s: float         # the model without the delays not emulated
    time_model_emulable_range_s: tuple[float, float]  # its fastest and slowest hash draw
    model_wall_s: float = 0.0            # wall time the model took to price the case

    def busbw_model_quantile_bps(self, q: float) -> float:
        times_s = np.array([p.completion_s for p in self.model])
        return float(np.quantile(8.0 * self.workload.size_bytes / times_s, q)) * self.factor


def fabric_topo(spec: str, wan: str = WAN_OFF) -> Any:
    """The topology of ``spec``, or two copies of it over the long link ``wan``."""
    link = parse_wan(wan)
    return build_topo(spec) if link is None else two_dcs(spec, link)


def servers_of(topo: Any, routes: Routes) -> list[Any]:
    """Group of every host for the hierarchical all-reduce: its data centre ('dc' node
    info, two DCs over a long link), else its 'server', else the switch it hangs off."""
    return [topo.nodeInfo(h).get("dc", topo.nodeInfo(h).get(
        "server", next(iter(routes.next_hops[h].values()))[0])) for h in topo.host_nodes()]


def build_workload(topo: Any, routes: Routes, name: str, size_bytes: int) -> Any:
    """Collective ``name`` of ``size_bytes`` over every host of ``topo``, in host order."""
    extra = {"server_of": servers_of(topo, routes)} if name == "allreduce-hier" else {}
    return collectives.build(name, list(topo.host_nodes()), size_bytes, **extra)


#: The model's busbw curve (busbw_model.csv) spans the measured sizes and this factor
#: beyond them, at every power of two.
CURVE_MARGIN = 4


@collector_paused()
def model_curve(spec: str, name: str, sizes: Sequence[int], hash_draws: int,
                wan: str = WAN_OFF, margin: int = CURVE_MARGIN,
                spreads: bool = False) -> pd.DataFrame:
    """The model's time and busbw of ``name`` on topology ``spec`` over a dense size
    grid (every power of two from the smallest measured size / ``margin`` to the
    largest x ``margin``, and the measured sizes; 1: the measured sizes and the powers
    of two between them), each priced as a measured case is (`run_collective`: the
    mean over ``hash_draws`` hash outcomes seeded by the size): the model's own curve,
    not a line through its values at the measured sizes. ``spreads``: the measured
    sizes' spread predictions (`run_collective`'s) priced too, into the cache."""
    topo = fabric_topo(spec, wan)
    graph, routes = topo_graph(topo), compute_routes(topo)
    lo = max(1, min(sizes) // margin)
    hi = max(sizes) * margin
    grid = sorted({*sizes, *(1 << k for k in range(lo.bit_length() - 1, hi.bit_length())
                             if lo <= 1 << k <= hi)})
    rows = []
    for size in grid:
        workload = build_workload(topo, routes, name, size)
        draws = hashed_draws(workload, graph, routes.paths, samples=hash_draws, seed=size)
        if spreads and size in sizes:
            spread_prediction(workload, graph, routes.paths)
        time_s = float(np.mean([p.completion_s for p in draws]))
        rows.append({"size_bytes": size, "time_model_s": time_s,
                     "busbw_model_bps": 8.0 * size / time_s * workload.meta["busbw_factor"]})
    return pd.DataFrame(rows)


def run_collective(fab: Fabric, name: str, size_bytes: int, cc: str,
                   hash_draws: int, capture: Sequence[str] = (), **engine: Any) -> CollectiveRun:
    """Run ``name`` of ``size_bytes`` over every host of ``fab`` and price it (``capture``:
    hosts whose frames to keep; ``engine``: further ``EngineConfig`` settings)."""

    workload = build_workload(fab.topo, fab.routes, name, size_bytes)
    priced = time.perf_counter()
    graph = model_graph(fab)
    draws = hashed_draws(workload, graph, fab.routes.paths, samples=hash_draws,
                         seed=size_bytes)
    spread = spread_prediction(workload, graph, fab.routes.paths)
    bare_graph, bare = emulable_pricing(fab, graph)
    emulable = hashed_draws(workload, bare_graph, fab.routes.paths, samples=hash_draws,
                            seed=size_bytes, **bare)
    bottleneck_bps = workload_bottleneck_rate_bps(workload, graph, fab.routes.paths,
                                                  mode="spread")
    model_wall_s = time.perf_counter() - priced
    m = measure(fab, workload, engine_config(cc, **engine), capture=capture)
    factor = workload.meta["busbw_factor"]
    time_s = m.completion_s
    algbw = 8.0 * size_bytes / time_s
    time_model_s = float(np.mean([p.completion_s for p in draws]))
    algbw_model = 8.0 * size_bytes / time_model_s
    return CollectiveRun(workload, m, time_s, algbw, algbw * factor, time_model_s,
                         algbw_model, algbw_model * factor, bottleneck_bps,
                         bottleneck_tier(fab, m), factor, draws,
                         8.0 * size_bytes / spread.completion_s * factor,
                         float(np.mean([p.completion_s for p in emulable])),
                         (min(p.completion_s for p in emulable),
                          max(p.completion_s for p in emulable)), model_wall_s)


def emulable_pricing(fab: Fabric, graph: Any) -> tuple[Any, dict[str, Any]]:
    """The real-fabric graph and model options with every fixed delay the fabric does
    not emulate taken out: what the deviations account for, never the comparison."""

    emulated = {k: v["emulated"] for k, v in emulated_fixed_delays(fab).items()}
    bare = graph.copy()
    if not emulated["switch latency"]:
        for node in bare.nodes:
            bare.nodes[node]["switch_latency_s"] = 0.0
    if not emulated["link propagation"]:
        for _, _, data in bare.edges(data=True):
            data["delay_s"] = 0.0
    return bare, {"forwarding": "store-and-forward" if emulated["per-hop serialization"]
                  else "cut-through", "wire_factor": roce_wire_factor(),
                  "overhead_s": DEFAULT_OVERHEAD_S if emulated["NIC overhead"] else 0.0}


def bottleneck_tier(fab: Fabric, m: Measurement) -> str:
    """The link tier of the port that carried the most bytes relative to its rate."""
    ports = m.ports.assign(load=m.ports.tx_bytes * 8.0 / m.ports.rate_bps)
    return str(ports.sort_values("load").iloc[-1].tier)


def case_name(fabric: str, name: str, size_bytes: int) -> str:
    return f"{fabric} {name} {format_size(size_bytes)}"


def record(run: Run, fabric: str, name: str, size_bytes: int, r: CollectiveRun,
           fab: Fabric, cc: str, transport: str = "gbn") -> str:
    """Summary metric, table row and fidelity of one collective run (on two DCs also
    `experiments.wanmodel`'s); returns the case."""
    case = case_name(fabric, name, size_bytes)
    run.metric(case, "time", "us", r.time_s * 1e6, r.time_model_s * 1e6, ALPHABETA)
    run.metric(case, "busbw", "GB/s", r.busbw_bps / 8e9, r.busbw_model_bps / 8e9, ALPHABETA)
    record_wan(run, case, fab, name, size_bytes, transport, r.time_s, r.measurement.ports)
    effect = (f"{name} {format_size(size_bytes)}: real-fabric model {r.time_model_s * 1e6:.2f} "
              f"us, {r.time_model_emulable_s * 1e6:.2f} us without the fixed delays the "
              f"emulator lacks; measured {r.time_s * 1e6:.2f} us")
    report = record_case(run, fab, case, r.measurement, r.workload, cc=cc,
                         effect=effect, labels={"case": case},
                         frames={"messages": r.measurement.messages,
                                 "ports": r.measurement.ports.reset_index()})
    row = {"fabric": fabric, "collective": name, "ranks": len(fab.hosts),
           "size_bytes": size_bytes, "time_s": r.time_s, "algbw_bps": r.algbw_bps,
           "busbw_bps": r.busbw_bps, "time_model_s": r.time_model_s,
           "algbw_model_bps": r.algbw_model_bps, "busbw_model_bps": r.busbw_model_bps,
           "busbw_error_rel": (r.busbw_bps - r.busbw_model_bps) / r.busbw_model_bps,
           "busbw_model_p10_bps": r.busbw_model_quantile_bps(0.1),
           "busbw_model_p90_bps": r.busbw_model_quantile_bps(0.9),
           "busbw_model_spread_bps": r.busbw_model_spread_bps, "hash_draws": len(r.model),
           "time_model_emulable_s": r.time_model_emulable_s,
           "time_model_emulable_min_s": r.time_model_emulable_range_s[0],
           "time_model_emulable_max_s": r.time_model_emulable_range_s[1],
           "bottleneck_bps": r.bottleneck_bps, "busbw_factor": r.factor,
           "measured_bottleneck_tier": r.bottleneck_tier, "valid": report.valid}
    run.frame("collective", pd.DataFrame([row]))
    run.frame("nccl", pd.DataFrame([nccl_row(fabric, name, size_bytes, r, report.valid)]))
    return case


#: Element type and reduction of the table's count/type/redop columns (NCCL-tests'
#: defaults: float32, sum); collectives that do not reduce show 'none'.
ELEMENT_BYTES = 4
REDUCING = ("allreduce", "reducescatter", "reduce")


def nccl_row(fabric: str, name: str, size_bytes: int, r: CollectiveRun,
             valid: bool) -> dict[str, Any]:
    """One line of the NCCL-tests-style table: time in us, algbw and busbw in GB/s, and
    the fidelity gate's verdict on the case."""
    kind = name.split("-")[0]
    return {"fabric": fabric, "collective": name, "size_bytes": size_bytes,
            "count": size_bytes // ELEMENT_BYTES, "type": "float",
            "redop": "sum" if kind in REDUCING else "none", "time_us": r.time_s * 1e6,
            "algbw_GBps": r.algbw_bps / 8e9, "busbw_GBps": r.busbw_bps / 8e9,
            "model_time_us": r.time_model_s * 1e6, "model_busbw_GBps": r.busbw_model_bps / 8e9,
            "error": (r.time_s - r.time_model_s) / r.time_model_s, "valid": valid}


def _measure(run: Run, fab: Fabric, fabric: str, name: str, size_bytes: int, cc: str,
             hash_draws: int, workers: int | str, capture: Sequence[str],
             transport: str) -> None:
    """Run one collective case on ``fab`` on ``workers`` workers over ``transport`` and
    record it, gated."""
    r = run_collective(fab, name, size_bytes, cc, hash_draws, capture, workers=workers,
                       transport=transport)
    record(run, fabric, name, size_bytes, r, fab, cc, transport)


def execute(run: Run, opts: Options, prefix: str = "", label: str = NAME) -> None:
    """Every collective on every fabric, each case committed as it ends (a resumed
    run skips the cases it has, and fabrics with none left)."""

    total = len(opts.topos) * len(opts.collectives) * len(opts.sizes)
    curves: dict[tuple[str, str], pd.DataFrame] = {}
    with progress(total, f"{prefix}{label}") as advance:
        for entry in opts.topos:
            spec, scale = split_topo_at(entry, opts.scale)
            cases = {(name, size): case_name(prefix + entry, name, size)
                     for name in opts.collectives for size in opts.sizes}
            for case in cases.values():
                if run.finished(case):
                    advance(case)
            if all(run.finished(case) for case in cases.values()):
                continue
            # The model's curve (which holds the measured sizes' draws) is priced while
            # the fabric is built; the cases read its draws, `record_model_curves` it.
            with (PricedAhead(partial(price_curves, spec, opts)) as ahead,
                  Fabric(fabric_topo(spec, opts.wan), Scale(scale), marking="auto",
                         **opts.fabric_options()) as fab):
                ahead.wait()
                curves.update(ahead.result or {})
                run.fabric(entry, fab)
                for (name, size), case in cases.items():
                    if run.finished(case):
                        continue
                    advance.start(case)
                    run.attempt(partial(_measure, run, fab, prefix + entry, name, size,
                                        opts.cc, opts.hash_draws, opts.workers,
                                        opts.capture, opts.transport),
                                opts.attempts)
                    run.commit(case)
                    advance(case)
    record_model_curves(run, {prefix + entry: split_topo_at(entry, opts.scale)[0]
                              for entry in opts.topos},
                        opts.collectives, opts.sizes, opts.hash_draws, opts.wan, curves)


def price_curves(spec: str, opts: Options) -> dict[tuple[str, str], pd.DataFrame]:
    """Every collective's `model_curve` on ``spec`` ({(spec, collective): curve}), its
    draws left in the cache (`PricedAhead`), and there too each measured size's spread
    prediction (`run_collective`'s)."""
    return {(spec, name): model_curve(spec, name, opts.sizes, opts.hash_draws, opts.wan,
                                      spreads=True)
            for name in opts.collectives}


def record_model_curves(run: Run, fabrics: Mapping[str, str], names: Sequence[str],
                        sizes: Sequence[int], hash_draws: int, wan: str = WAN_OFF,
                        priced: Mapping[tuple[str, str], pd.DataFrame] | None = None) -> None:
    """busbw_model.csv: the model's own curve (`model_curve`) of every collective on
    every fabric ({label in collective.csv: topology spec}), or the one ``priced``
    already ({(spec, collective): curve} of these sizes, draws and ``wan``); no fabric
    is built."""
    known = priced or {}
    for label, spec in fabrics.items():
        for name in names:
            curve = known.get((spec, name))
            if curve is None:
                curve = model_curve(spec, name, sizes, hash_draws, wan)
            run.frame("busbw_model", curve, fabric=label, collective=name)

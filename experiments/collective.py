"""Collectives over a sweep of message sizes on several fabrics: an NCCL-tests-style
table (size, time, algbw, busbw) with the model's columns beside it.

Every rank is one host, in host order. Collectives: ring, halving-doubling (the
tree-like all-reduce) and hierarchical all-reduce (ranks grouped by server, or by
the switch they hang off where a topology has no servers), all-gather,
reduce-scatter and all-to-all (`traffic.collectives`). The model prices the same
message DAG (`emu.model.alphabeta.predict_workload`: fluid max-min over the routed
paths, ECMP spread evenly, RoCEv2 headers on the wire); the bottleneck rate is the
smallest per-flow max-min rate of the collective's steps (`predict_collective`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from emu.fabric import Fabric
from emu.model.alphabeta import predict_collective, predict_workload, roce_wire_factor
from emu.scaling import Scale
from emu.topospec import build_topo
from experiments.common import (
    DEFAULT_SCALE,
    PACKET_BYTES,
    SCALE_HELP,
    Measurement,
    Option,
    Run,
    RunResult,
    engine_config,
    fidelity_of,
    measure,
    model_graph,
    parse_sizes,
    parse_specs,
    progress,
    run_experiment,
    size_label,
)
from traffic import collectives

NAME = "collective"

OPTIONS: dict[str, Option] = {
    "topos": Option(["fattree,4", "dragonfly,p=2,a=2,h=1", "railopt,2,gpus=4"],
                    "fabrics (';'-separated NAME,ARG,KEY=VALUE)", quick=["leafspine,2,2,2"],
                    parse=parse_specs),
    "collectives": Option(["allreduce-ring", "allreduce-hd", "allreduce-hier", "allgather",
                           "alltoall"], "collectives (traffic.collectives.NAMES)",
                          quick=["allreduce-ring", "alltoall"], parse=parse_specs),
    "sizes": Option([256 << 10, 1 << 20, 4 << 20], "buffer sizes (NCCL-tests size)",
                    quick=[256 << 10, 1 << 20], parse=parse_sizes),
    "cc": Option("off", "congestion control: off | nic | paper"),
    "scale": Option(DEFAULT_SCALE, SCALE_HELP, parse=float),
}


@dataclass
class CollectiveRun:
    """One measured collective beside its model."""

    workload: Any
    measurement: Measurement
    time_s: float
    algbw_bps: float
    busbw_bps: float
    time_model_s: float
    algbw_model_bps: float
    busbw_model_bps: float
    bottleneck_bps: float
    bottleneck_tier: str
    factor: float


def servers_of(fab: Fabric) -> list[Any]:
    """Server of every host: its 'server' node info, else the switch it hangs off."""
    topo = fab.topo
    return [topo.nodeInfo(h).get("server", next(iter(fab.routes.next_hops[h].values()))[0])
            for h in fab.hosts]


def build_workload(fab: Fabric, name: str, size_bytes: int) -> Any:
    extra = {"server_of": servers_of(fab)} if name == "allreduce-hier" else {}
    return collectives.build(name, list(fab.hosts), size_bytes, **extra)


def run_collective(fab: Fabric, name: str, size_bytes: int, cc: str) -> CollectiveRun:
    """Run ``name`` of ``size_bytes`` over every host of ``fab`` and price it."""
    workload = build_workload(fab, name, size_bytes)
    graph = model_graph(fab)
    pred = predict_workload(workload, graph, fab.routes.paths, mode="spread",
                            packet_bytes=PACKET_BYTES, wire_factor=roce_wire_factor(),
                            overhead_s=0.0)
    kind = name.split("-")[0]
    algorithm = {"allreduce-hd": "hd"}.get(name, "ring")
    bottleneck = predict_collective(kind, graph, fab.routes.paths, list(fab.hosts), size_bytes,
                                    algorithm=algorithm, mode="spread") \
        if name != "allreduce-hier" else None
    bottleneck_bps = bottleneck.bottleneck_bw_bps if bottleneck else min(
        p.rate_bps for p in fab.ports() if not p.is_switch)
    m = measure(fab, workload, engine_config(cc))
    factor = workload.meta["busbw_factor"]
    time_s = m.completion_s
    algbw = 8.0 * size_bytes / time_s
    return CollectiveRun(workload, m, time_s, algbw, algbw * factor, pred.completion_s,
                         pred.algbw_bps, pred.algbw_bps * factor, bottleneck_bps,
                         bottleneck_tier(fab, m), factor)


def bottleneck_tier(fab: Fabric, m: Measurement) -> str:
    """The link tier of the port that carried the most bytes relative to its rate."""
    ports = m.ports.assign(load=m.ports.tx_bytes * 8.0 / m.ports.rate_bps)
    return str(ports.sort_values("load").iloc[-1].tier)


def record(run: Run, fabric: str, name: str, size_bytes: int, r: CollectiveRun,
           fab: Fabric, cc: str) -> str:
    """Summary metric, table row and fidelity of one collective run; returns the case."""
    case = f"{fabric} {name} {size_label(size_bytes)}"
    run.metric(case, "busbw", "Gb/s", r.busbw_bps * 1e-9, r.busbw_model_bps * 1e-9)
    report = fidelity_of(fab, r.measurement, r.workload, cc=cc != "off")
    run.fidelity(case, report)
    row = {"fabric": fabric, "collective": name, "ranks": len(fab.hosts),
           "size_bytes": size_bytes, "time_s": r.time_s, "algbw_bps": r.algbw_bps,
           "busbw_bps": r.busbw_bps, "time_model_s": r.time_model_s,
           "algbw_model_bps": r.algbw_model_bps, "busbw_model_bps": r.busbw_model_bps,
           "busbw_error_rel": (r.busbw_bps - r.busbw_model_bps) / r.busbw_model_bps,
           "bottleneck_bps": r.bottleneck_bps, "busbw_factor": r.factor,
           "measured_bottleneck_tier": r.bottleneck_tier, "valid": report.valid}
    run.frame("collective", pd.DataFrame([row]))
    run.frame("messages", r.measurement.messages, case=case)
    return case


def execute(run: Run, opts: dict[str, Any], prefix: str = "") -> None:
    total = len(opts["topos"]) * len(opts["collectives"]) * len(opts["sizes"])
    with progress(total, f"{prefix}collective") as advance:
        for spec in opts["topos"]:
            with Fabric(build_topo(spec), Scale(opts["scale"]), marking="auto") as fab:
                run.fabric(spec, fab)
                for name in opts["collectives"]:
                    for size in opts["sizes"]:
                        r = run_collective(fab, name, size, opts["cc"])
                        case = record(run, prefix + spec, name, size, r, fab, opts["cc"])
                        advance(case)


def run(out_dir: str, quick: bool = False, **overrides: Any) -> RunResult:
    """Run the collective sweep into ``out_dir``; ``overrides`` are OPTIONS values."""
    return run_experiment(NAME, OPTIONS, execute, out_dir, quick, overrides)

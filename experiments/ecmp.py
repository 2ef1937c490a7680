"""ECMP: permutation traffic, per-flow throughput vs the model's expectation for hash
collisions.

Every host sends one message to a random other host (a derangement); each message
is one QP with its own UDP source port, so the switches' L4 hash picks its path.
The kernel's hash is not reproducible from outside, so the model draws it: over
``samples`` independent uniform draws of every flow's path among its equal-cost
paths, the fluid max-min model (`model.fluid.flow_completion_times`) gives
every flow's bandwidth time; the real fabric adds the NIC's per-message overhead
before the first byte and the chosen path's latency (switch latency, propagation,
store and forward) after the last (`model.alphabeta`), hence the completion
time and throughput = size / time. FCT slowdown by size bucket (each flow's FCT over
that size alone on an idle fabric) is compared the same way. The measured
distribution of per-flow throughput is compared with that pooled distribution
(mean, p10, fraction of flows near line rate) and with its makespan.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from core.frame import WIRE_FRAME_BYTES
from core.scaling import Scale
from emu.fabric import Fabric
from experiments.measure import (
    engine_config,
    measure,
    model_graph,
    record_case,
)
from experiments.option_parsers import (
    CC_HELP,
    parse_cc,
    parse_int,
    parse_list,
    parse_size,
    parse_topo,
)
from experiments.options import CommonOptions, Option, check_topology, with_common
from experiments.progress import progress
from experiments.rundir import Run
from experiments.slowdown import fct_slowdown, ideal_fct_s, record_slowdown
from model.alphabeta import DEFAULT_OVERHEAD_S, path_latency_s, roce_wire_factor
from model.claims import ECMP_DRAW, ECMP_RATE, ECMP_SLOWDOWN
from model.fluid import flow_completion_times
from model.maxmin import make_flow
from topologies.spec import build_topo
from traffic import collectives

NAME = "ecmp"

#: A flow "at line rate" reaches this fraction of its NIC rate.
NEAR_LINE_RATE = 0.9
#: Each hash draw is one max-min solve over every flow: 10000 take minutes already.
MAX_SAMPLES = 10000

OPTIONS: dict[str, Option] = with_common({
    # Uniform 400G tiers: a fat-tree with full bisection, where only hash collisions
    # (two flows on one 400G fabric link) keep a flow below line rate.
    "topo": Option("fattree,4,fabric_rate=400G,core_rate=400G", "topology",
                   quick="leafspine,2,2,2", parse=parse_topo),
    "size": Option(2 << 20, "bytes per flow", quick=512 << 10, parse=parse_size),
    "seeds": Option([1, 2], "permutation seeds (';'-separated)", quick=[1],
                    parse=parse_list(parse_int(0, 2**32 - 1))),
    "samples": Option(300, "random hash draws of the model", parse=parse_int(1, MAX_SAMPLES)),
    "cc": Option("off", CC_HELP, parse=parse_cc),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    """The options of the ECMP experiment (OPTIONS), typed."""

    topo: str
    size: int
    seeds: list[int]
    samples: int
    cc: str


def check(opts: Options) -> None:
    """A permutation needs two hosts; every link shaped accurately at S."""
    check_topology(opts.topo, opts.scale)


def model_throughputs(fab: Fabric, workload: Any, samples: int, seed: int) -> pd.DataFrame:
    """Per-flow completion time (real s) and throughput (payload bit/s) over random
    hash draws, on the real fabric."""

    rng = random.Random(seed)
    graph = model_graph(fab)
    wire = roce_wire_factor()
    msgs = workload.messages
    sizes = {m.msg_id: m.size_bytes * wire for m in msgs}
    paths = {m.msg_id: fab.routes.paths(m.src, m.dst) for m in msgs}
    rows = []
    for sample in range(samples):
        flows = [make_flow(m.msg_id, paths[m.msg_id], mode="hashed",
                           choice=lambda _fid, ps: rng.randrange(len(ps))) for m in msgs]
        fct = flow_completion_times(graph, flows, sizes)
        for m, flow in zip(msgs, flows, strict=True):
            last_bytes = min(WIRE_FRAME_BYTES, sizes[m.msg_id])
            fct_s = DEFAULT_OVERHEAD_S + fct[m.msg_id] + path_latency_s(graph, flow.paths[0],
                                                                        last_bytes)
            rows.append({"sample": sample, "msg_id": m.msg_id, "fct_s": fct_s,
                         "throughput_bps": 8.0 * m.size_bytes / fct_s})
    return pd.DataFrame(rows)


def _measure(run: Run, fab: Fabric, case: str, seed: int, nic_bps: float,
             opts: Options) -> None:
    """One permutation drawn with ``seed``: flow throughputs against the model's."""
    workload = collectives.build("permutation", list(fab.hosts), opts.size, seed=seed)
    model = model_throughputs(fab, workload, opts.samples, seed)
    m = measure(fab, workload, engine_config(opts.cc, opts.workers, transport=opts.transport),
                capture=opts.capture)
    measured = 8.0 * m.messages.size_bytes / m.messages.fct_s
    predicted = model.throughput_bps
    makespan = model.groupby("sample").throughput_bps.min()
    run.metric(case, "mean flow throughput", "Gb/s", measured.mean() * 1e-9,
               predicted.mean() * 1e-9, ECMP_RATE)
    run.metric(case, "p10 flow throughput", "Gb/s", measured.quantile(0.1) * 1e-9,
               predicted.quantile(0.1) * 1e-9, ECMP_RATE)
    run.metric(case, "flows near line rate", "fraction",
               float((measured >= NEAR_LINE_RATE * nic_bps).mean()),
               float((predicted >= NEAR_LINE_RATE * nic_bps).mean()), ECMP_DRAW)
    run.metric(case, "slowest flow throughput", "Gb/s", measured.min() * 1e-9,
               float(np.mean(makespan)) * 1e-9, ECMP_DRAW)
    run.frame("flows", pd.DataFrame({"msg_id": m.messages.msg_id,
                                     "throughput_bps": measured}),
              case=case, source="measured")
    run.frame("flows", model[["msg_id", "throughput_bps"]], case=case, source="model")
    record_case(run, fab, case, m, workload, cc=opts.cc,
                effect=f"mean flow throughput: model {predicted.mean() * 1e-9:.1f} Gb/s, "
                f"measured {measured.mean() * 1e-9:.1f} Gb/s", labels={"case": case},
                frames={"messages": m.messages, "ports": m.ports.reset_index()})
    graph = model_graph(fab)
    ideal = {msg.msg_id: ideal_fct_s(graph, fab.routes.paths, msg.src, msg.dst,
                                     msg.size_bytes) for msg in workload.messages}
    record_slowdown(run, case, fct_slowdown(
        m.messages, ideal, model.groupby("msg_id").fct_s.apply(list).to_dict()), ECMP_SLOWDOWN)


def execute(run: Run, opts: Options, prefix: str = "") -> None:
    cases = {seed: f"{prefix}permutation seed={seed}" for seed in opts.seeds}
    with progress(len(cases), f"{prefix}ecmp") as advance:
        for case in cases.values():
            if run.finished(case):
                advance(case)
        if all(run.finished(case) for case in cases.values()):
            return
        with Fabric(build_topo(opts.topo), Scale(opts.scale), marking="auto",
                    **opts.fabric_options()) as fab:
            run.fabric(opts.topo, fab)
            nic_bps = min(p.rate_bps for p in fab.ports() if not p.is_switch)
            for seed, case in cases.items():
                if run.finished(case):
                    continue
                advance.start(case)
                run.attempt(partial(_measure, run, fab, case, seed, nic_bps, opts),
                            opts.attempts)
                run.commit(case)
                advance(case)

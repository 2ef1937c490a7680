"""A message DAG from a file (docs/workloads.md) run on a fabric, beside its model.

``emu run workload --file F [--set topo=SPEC]``: the DAG's ranks go on the fabric's
hosts (named ranks on those hosts, a rank count on the first hosts in host order);
the engine sends every message as one RDMA WRITE, each posted its compute gap after
its last dependency completed. Reported beside the model of the same DAG:

* completion (the last rank's end: its last message or compute, `model.dag`);
* per tag (dimension) and per collective kind of the file's ops: their total time
  and busbw (NCCL-tests' factors, `model.dag.op_stats`);
* per rank: end, compute, and time spent waiting, by the tag of what it waited for;
  the slowest rank.

The model is `model.alphabeta.predict_workload` over the same DAG (fluid max-min on
the routed paths, the real fabric's fixed delays, the gaps), averaged over
``hash_draws`` random ECMP hash outcomes as the engine hashes each message onto one
path; the critical path with no link shared (`model.dag.critical_path`) is its lower
bound. `experiments.training` runs its generated iterations through ``run_dag``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core.errors import ParameterError
from core.messages import Workload
from core.scaling import Scale, scale_keeping_frame_time
from emu.fabric import Fabric
from experiments.measure import engine_config, measure, model_graph, record_case
from experiments.option_parsers import CC_HELP, parse_cc, parse_topo_at, split_topo_at
from experiments.options import (
    CommonOptions,
    Option,
    check_topology,
    hash_draws_option,
    with_common,
)
from experiments.progress import progress
from experiments.rundir import Run
from model.alphabeta import predict_workload_hashed
from model.claims import DAG_EXPOSED, DAG_LOWER_BOUND, DAG_TIME
from model.dag import RankTimeline, busbw_by, critical_path, op_stats, rank_timelines
from topologies.base import NVLINK_RATE_BPS
from topologies.spec import build_topo
from traffic.dagfile import DagFile, read_dag

NAME = "workload"
#: A rail-optimised fabric's NVLink at a 400G NIC's frame time (experiments.collective).
NVLINK_SCALE = scale_keeping_frame_time(NVLINK_RATE_BPS)
MAX_HASH_DRAWS = 64
TOPO_HELP = ("the fabric, NAME,ARG,KEY=VALUE, optionally @S: its own S instead of the run's "
             f"(S = {NVLINK_SCALE:g} keeps NVLink's frame time a 400G NIC's at S = 10000)")
DEFAULT_TOPO = f"railopt,2,gpus=4@{NVLINK_SCALE:g}"
#: The example of docs/workloads.md, the default ``file``.
EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "workloads" / "pipeline.json")


def parse_file(value: Any) -> str:
    """A path, or '' (none given: ``check`` asks for one)."""
    if not isinstance(value, str):
        raise ParameterError("file", value, "expected a path")
    return value.strip()


def load_dag(path: str) -> DagFile:
    """The DAG file at ``path``, read and checked (one-line ParameterError)."""
    if not path:
        raise ParameterError("file", path, "give the workload file: --file F")
    try:
        text = Path(path).read_bytes()
    except OSError as e:
        raise ParameterError("file", path, e.strerror or str(e)) from None
    return read_dag(text)


OPTIONS: dict[str, Option] = with_common({
    "file": Option(EXAMPLE, "the message DAG (JSON, docs/workloads.md); also --file F",
                   parse=parse_file),
    "topo": Option(DEFAULT_TOPO, TOPO_HELP, parse=parse_topo_at),
    "cc": Option("off", CC_HELP, parse=parse_cc),
    "hash_draws": hash_draws_option(8, MAX_HASH_DRAWS),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    file: str
    topo: str
    cc: str
    hash_draws: int


def check(opts: Options) -> None:
    hosts = check_topology(*split_topo_at(opts.topo, opts.scale), option="topo")
    dag = load_dag(opts.file)
    if dag.n_ranks > hosts:
        raise ParameterError("file", opts.file, f"{dag.n_ranks} ranks; {opts.topo} has "
                                                f"{hosts} hosts")


@dataclass
class Analysis:
    """A DAG's times analysed (`model.dag`): what one measurement or model gives."""

    completion_s: float
    ranks: list[RankTimeline]
    by_kind: dict[str, tuple[float, float, int]]
    by_tag: dict[str, tuple[float, float, int]]

    @property
    def slowest(self) -> RankTimeline:
        return max(self.ranks, key=lambda r: r.end_s)

    def exposed_mean_s(self, tag: str) -> float:
        return float(np.mean([r.exposed_s.get(tag, 0.0) for r in self.ranks]))


def analyse(workload: Workload, ready_s: Mapping[Hashable, float],
            finish_s: Mapping[Hashable, float]) -> Analysis:
    ranks = rank_timelines(workload, ready_s, finish_s)
    ops = op_stats(workload, ready_s, finish_s)
    return Analysis(max(r.end_s for r in ranks), ranks, busbw_by(ops, "collective"),
                    busbw_by(ops, "tag"))


@dataclass
class DagRun:
    """One DAG measured, with its model (one analysis per hash draw) and lower bound."""

    measured: Analysis
    model: list[Analysis]
    lower: Analysis
    valid: bool

    def model_mean(self, value: Any) -> float:
        return float(np.mean([value(a) for a in self.model]))


def run_dag(run: Run, fab: Fabric, case: str, workload: Workload, cc: str, hash_draws: int,
            workers: int | str, capture: Sequence[str] = (),
            headline: str = "completion") -> DagRun:
    """Measure ``workload`` on ``fab``, price it, record the case (module doc) with its
    completion named ``headline``."""
    graph = model_graph(fab)
    draws = predict_workload_hashed(workload, graph, fab.routes.paths, samples=hash_draws,
                                    seed=0)
    model = [analyse(workload, p.ready_s, p.finish_s) for p in draws]
    cp = critical_path(workload, graph, fab.routes.paths)
    lower = analyse(workload, cp.ready_s, cp.finish_s)
    m = measure(fab, workload, engine_config(cc, workers=workers), capture=capture)
    msgs = m.messages.set_index("msg_id")
    measured = analyse(workload, msgs.start_s.to_dict(), msgs.end_s.to_dict())
    r = DagRun(measured, model, lower, False)
    report = record_case(run, fab, case, m, workload, cc=cc, effect=(
        f"completion: model {r.model_mean(lambda a: a.completion_s) * 1e6:.1f} us, "
        f"measured {measured.completion_s * 1e6:.1f} us"),
        frames={"messages": m.messages}, labels={"case": case})
    r.valid = report.valid
    record(run, case, workload, r, headline)
    return r


def record(run: Run, case: str, workload: Workload, r: DagRun, headline: str) -> None:
    """Summary metrics and the ranks, ops and timeline frames of one DAG case."""
    meas, mean = r.measured, r.model_mean
    run.metric(case, headline, "us", meas.completion_s * 1e6,
               mean(lambda a: a.completion_s) * 1e6, DAG_TIME)
    run.metric(case, f"{headline}, no link shared", "us", meas.completion_s * 1e6,
               r.lower.completion_s * 1e6, DAG_LOWER_BOUND)
    run.metric(case, "slowest rank's end", "us", meas.slowest.end_s * 1e6,
               mean(lambda a: a.slowest.end_s) * 1e6, DAG_TIME)
    tags = sorted({m.tag or "untagged" for m in workload.messages})
    for tag in tags:
        run.metric(case, f"exposed {tag} (mean over ranks)", "us",
                   meas.exposed_mean_s(tag) * 1e6,
                   mean(lambda a, t=tag: a.exposed_mean_s(t)) * 1e6, DAG_EXPOSED)
    rows = []
    for group, table in (("collective", "by_kind"), ("tag", "by_tag")):
        for key, (busbw, time_s, n) in getattr(meas, table).items():
            model_busbw = mean(lambda a, k=key, t=table: getattr(a, t)[k][0])
            model_time = mean(lambda a, k=key, t=table: getattr(a, t)[k][1])
            run.metric(case, f"busbw {group} {key}", "GB/s", busbw / 8e9, model_busbw / 8e9,
                       DAG_TIME)
            rows.append({"group": group, "key": key, "ops": n, "time_s": time_s,
                         "time_model_s": model_time, "busbw_bps": busbw,
                         "busbw_model_bps": model_busbw})
    if rows:
        run.frame("ops", pd.DataFrame(rows), case=case)
    model0 = r.model[0]
    ranks = []
    for rm, rp in zip(meas.ranks, model0.ranks, strict=True):
        row: dict[str, Any] = {"rank": rm.rank, "end_s": rm.end_s, "compute_s": rm.compute_s,
                               "end_model_s": mean(lambda a, h=rm.rank: next(
                                   x.end_s for x in a.ranks if x.rank == h))}
        for tag in tags:
            row[f"exposed_{tag}_s"] = rm.exposed_s.get(tag, 0.0)
            row[f"exposed_{tag}_model_s"] = rp.exposed_s.get(tag, 0.0)
        ranks.append(row)
    run.frame("ranks", pd.DataFrame(ranks), case=case, slowest=meas.slowest.rank,
              slowest_model=model0.slowest.rank)
    segments = [{"source": source, "rank": line.rank, "start_s": a, "end_s": b, "what": what}
                for source, analysis in (("measured", meas), ("model", model0))
                for line in analysis.ranks for a, b, what in line.segments]
    if segments:
        run.frame("timeline", pd.DataFrame(segments), case=case)
    run.note(f"{case}: slowest rank {meas.slowest.rank} (model: {model0.slowest.rank})")


def execute(run: Run, opts: Options) -> None:
    dag = load_dag(opts.file)
    spec, scale = split_topo_at(opts.topo, opts.scale)
    case = f"{spec} {dag.name}"
    with progress(1, NAME) as advance:
        if run.finished(case):
            advance(case)
            return
        with Fabric(build_topo(spec), Scale(scale), marking="auto",
                    **opts.fabric_options()) as fab:
            run.fabric(opts.topo, fab)
            workload = dag.bind(list(fab.topo.host_nodes()))
            advance.start(case)
            run.attempt(partial(run_dag, run, fab, case, workload, opts.cc, opts.hash_draws,
                                opts.workers, opts.capture), opts.attempts)
            run.commit(case)
            advance(case)

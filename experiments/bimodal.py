"""Bimodal traffic: bulk collectives and small latency-sensitive messages on one fabric,
each class's tail.

``emu run bimodal``: `traffic.bulk_small`'s two classes on every host of the fabric, as two
cases: the small messages alone, then the same small messages (same pairs, same post
times) beside ``rounds`` back-to-back runs of a bulk collective. The small messages are
spread over the bulk's no-sharing time (`model.dag.critical_path`), so they all meet
it. Reported per case: FCT slowdown (FCT over that message alone on the idle fabric,
`experiments.slowdown.fct_slowdown`) p50/p95/p99 per size bucket, measured beside the
fluid model's (`model.alphabeta.predict_workload_hashed`, hash draws pooled), and the
bulk's completion beside the model. The classes' sizes fall in different buckets
(checked), so the buckets are the classes' tails.

A separate experiment, not an option of ``ecmp`` or ``incast``: those measure one class
(a permutation's throughput, an incast's senders); this one needs an open-loop small
class laid over a closed-loop bulk DAG and a baseline of the small class alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from core.errors import ParameterError
from core.scaling import Scale
from emu.fabric import Fabric
from experiments.inference import DEFAULT_TOPO
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
    parse_text,
    parse_topo,
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
from experiments.slowdown import fct_slowdown, ideal_fct_s, record_slowdown, size_bucket
from experiments.workload import MAX_HASH_DRAWS
from model.alphabeta import predict_workload_hashed
from model.claims import BIMODAL_SLOWDOWN, DAG_TIME
from model.dag import critical_path
from topologies.spec import build_topo
from traffic import collectives
from traffic.bulk_small import MAX_ROUNDS, MAX_SMALL, bimodal

NAME = "bimodal"


def parse_collective(value: Any) -> str:
    text = parse_text(value)
    if text not in collectives.NAMES:
        raise ParameterError("collective", text, f"expected one of {', '.join(collectives.NAMES)}")
    return text


OPTIONS: dict[str, Option] = with_common({
    "topo": Option(DEFAULT_TOPO, "the fabric, NAME,ARG,KEY=VALUE", parse=parse_topo),
    "collective": Option("allreduce-ring", "the bulk class's collective, over every host",
                         parse=parse_collective),
    "bulk_size": Option(16 << 20, "the collective's size S (NCCL-tests' size)",
                        quick=4 << 20, parse=parse_size),
    "rounds": Option(2, "back-to-back runs of the collective", quick=1,
                     parse=parse_int(1, MAX_ROUNDS)),
    "small_sizes": Option([1 << 10, 16 << 10], "the small class's sizes, cycled (';'-separated)",
                          parse=parse_list(parse_size)),
    "small_count": Option(256, "small messages, spread over the bulk's no-sharing time",
                          quick=64, parse=parse_int(1, MAX_SMALL)),
    "seed": Option(0, "draws the small messages' host pairs", parse=parse_int(0)),
    "cc": Option("off", CC_HELP, parse=parse_cc),
    "hash_draws": hash_draws_option(4, MAX_HASH_DRAWS, use="pools"),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    topo: str
    collective: str
    bulk_size: int
    rounds: int
    small_sizes: list[int]
    small_count: int
    seed: int
    cc: str
    hash_draws: int


def check(opts: Options) -> None:
    check_topology(opts.topo, opts.scale, option="topo")
    hosts = list(build_topo(opts.topo).host_nodes())
    heavy = {size_bucket(m.size_bytes) for m in bimodal(
        opts.collective, hosts, opts.bulk_size, 1, opts.small_sizes, 1, 0.0).messages
        if m.tag == "bulk"}
    shared = sorted(heavy & {size_bucket(s) for s in opts.small_sizes})
    if shared:
        raise ParameterError("small_sizes", opts.small_sizes, f"in the bulk's size bucket "
                             f"{', '.join(shared)}: a bucket must be one class's tail")


def execute(run: Run, opts: Options) -> None:
    cases = {False: "small alone", True: f"small beside {opts.collective} x{opts.rounds}"}
    with progress(len(cases), NAME) as advance, \
            Fabric(build_topo(opts.topo), Scale(opts.scale), marking="auto",
                   **opts.fabric_options()) as fab:
        run.fabric(opts.topo, fab)
        hosts = list(fab.topo.host_nodes())
        alone = bimodal(opts.collective, hosts, opts.bulk_size, opts.rounds, [1], 1, 0.0)
        window_s = critical_path(alone, model_graph(fab), fab.routes.paths).completion_s
        for with_bulk, case in cases.items():
            if run.finished(case):
                advance(case)
                continue
            workload = bimodal(opts.collective, hosts, opts.bulk_size, opts.rounds,
                               opts.small_sizes, opts.small_count, window_s, seed=opts.seed,
                               with_bulk=with_bulk)
            advance.start(case)
            run.attempt(partial(_case, run, fab, case, workload, opts), opts.attempts)
            run.commit(case)
            advance(case)


def _case(run: Run, fab: Fabric, case: str, workload: Any, opts: Options) -> None:
    """One case measured: FCT slowdown per bucket and the bulk's completion (module doc)."""
    graph = model_graph(fab)
    draws = predict_workload_hashed(workload, graph, fab.routes.paths,
                                    samples=opts.hash_draws, seed=0)
    m = measure(fab, workload, engine_config(opts.cc, workers=opts.workers),
                capture=opts.capture)
    ideal = {x.msg_id: ideal_fct_s(graph, fab.routes.paths, x.src, x.dst, x.size_bytes)
             for x in workload.messages}
    predicted = {x.msg_id: [p.finish_s[x.msg_id] - p.ready_s[x.msg_id] for p in draws]
                 for x in workload.messages}
    table = fct_slowdown(m.messages, ideal, predicted)
    p99 = {row.bucket: (row.p99, row.model_p99) for row in table.itertuples()}
    record_case(run, fab, case, m, workload, cc=opts.cc, effect="; ".join(
        f"{b} p99 slowdown: model {mod:.2f}, measured {got:.2f}" for b, (got, mod) in p99.items()),
        frames={"messages": m.messages}, labels={"case": case})
    record_slowdown(run, case, table, BIMODAL_SLOWDOWN)
    heavy = m.messages[m.messages.tag == "bulk"] if "tag" in m.messages else m.messages[:0]
    if not heavy.empty:
        ids = set(heavy.msg_id)
        model_s = sum(max(p.finish_s[i] for i in ids) for p in draws) / len(draws)
        run.metric(case, "bulk completion", "us", float(heavy.end_s.max()) * 1e6,
                   model_s * 1e6, DAG_TIME)

"""Disaggregated inference on a fabric: the network's share of time to first token and of
time per output token, alone and beside a background training job, beside the model.

``emu run inference``: the serving DAG of `traffic.serving` (KV-cache transfers from
a prefill instance to a decode instance, the decode steps' MoE all-to-alls) on the
fabric's first hosts, prefill ranks first. With ``background`` (a training layout,
`experiments.training.layout_of`), a second case adds that job's iterations
(`traffic.iteration`, a 2-layer GPT per pipeline stage) on the next hosts, run back to
back for as long as the inference lasts (``traffic.serving.beside``), sharing the
fabric's links.

Per case, measured and modelled (`model.alphabeta.predict_workload_hashed` over the
same DAG, every draw's samples pooled): p50 and p99 of TTFT over requests and of the
time per output token over decode steps, and of the network's share of each
(`traffic.serving.decode_timeline`: a request's KV transfer plus its first step's
network time, over its TTFT; a step's time beyond its compute, over the step). The
fluid model's percentiles are estimates; the no-sharing critical path
(`model.dag.critical_path`) gives lower bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import pandas as pd

from core.errors import ParameterError
from core.scaling import Scale
from emu.fabric import Fabric
from experiments.measure import engine_config, measure, model_graph, record_case
from experiments.option_parsers import (
    CC_HELP,
    parse_cc,
    parse_float,
    parse_int,
    parse_text,
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
from experiments.training import layout_of
from experiments.workload import MAX_HASH_DRAWS
from model.alphabeta import predict_workload_hashed
from model.claims import DAG_LOWER_BOUND, INFER_LATENCY, INFER_SHARE
from model.dag import critical_path
from topologies.spec import build_topo
from traffic.iteration import Gpu, Transformer, iteration
from traffic.serving import (
    MAX_STEPS,
    Latencies,
    ServedModel,
    Serving,
    beside,
    decode_timeline,
    inference,
    quantile,
)

NAME = "inference"
#: Hosts share leaves, and a leaf's uplinks are 2:1 oversubscribed: on a rail-optimised
#: fabric two jobs on disjoint servers share no link, so a background job changes nothing.
DEFAULT_TOPO = "leafspine,4,hosts_per_leaf=4,oversub=2"
#: Most back-to-back background iterations one case runs.
MAX_REPEATS = 200
#: The largest model dimension, rank count or batch an option takes.
MAX_DIM = 1 << 20
_MODEL = {"layers": (4, 2), "hidden": (2048, 1024), "kv_heads": (8, 8), "head_dim": (128, 128),
          "prompt": (512, 256), "vocab": (32000, 32000), "precision_bytes": (2, 2),
          "experts": (8, 8), "top_k": (2, 2)}
_SERVING = {"prefill": (2, 2, "prefill instance's ranks (TP: each sends 1/P of the KV)"),
            "decode": (4, 4, "decode instance's ranks (EP: the experts spread over them)"),
            "requests": (8, 4, "requests, arriving evenly"),
            "batch": (8, 4, "running tokens per decode rank and step")}


def parse_background(value: Any) -> str:
    """'off' or a training layout (``tp=,pp=,dp=,...``)."""
    text = parse_text(value)
    if text != "off":
        layout_of(text)
    return text


OPTIONS: dict[str, Option] = with_common({
    "topo": Option(DEFAULT_TOPO, "the fabric, NAME,ARG,KEY=VALUE, optionally @S (its own S)",
                   parse=parse_topo_at),
    **{k: Option(v, f"model: {k.replace('_', ' ')}", quick=q, parse=parse_int(1, MAX_DIM))
       for k, (v, q) in _MODEL.items()},
    **{k: Option(v, text, quick=q, parse=parse_int(1, MAX_DIM))
       for k, (v, q, text) in _SERVING.items()},
    "load": Option(0.8, "prefill utilisation: a request every prefill time / load",
                   parse=parse_float(0.0, 1.0, open_low=True)),
    "steps": Option(0, "decode steps (0: enough to serve every request)",
                    parse=parse_int(0, MAX_STEPS)),
    "peak_tflops": Option(989.0, "GPU peak (TFLOP/s, dense, at the precision)",
                          parse=parse_float(1e-3, 1e6)),
    "mfu": Option(0.4, "model FLOPs utilisation: compute = FLOPs / (peak x MFU)",
                  parse=parse_float(0.0, 1.0, open_low=True)),
    "hbm_tbps": Option(3.35, "GPU memory bandwidth (TB/s): decode's roofline",
                       parse=parse_float(1e-3, 1e3)),
    "size_scale": Option(1.0, "every message's bytes times this (the model prices the same)",
                         parse=parse_float(0.0, 1.0, open_low=True)),
    "background": Option("tp=4,dp=2,placement=tp-across",
                         "a training job on the next hosts ('off', or a layout: tp=,pp=,dp=,"
                         "...; experiments.training); the default's TP rings cross leaves",
                         quick="tp=4", parse=parse_background),
    "cc": Option("off", CC_HELP, parse=parse_cc),
    "hash_draws": hash_draws_option(4, MAX_HASH_DRAWS),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    topo: str
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    prompt: int
    vocab: int
    precision_bytes: int
    experts: int
    top_k: int
    prefill: int
    decode: int
    requests: int
    batch: int
    load: float
    steps: int
    peak_tflops: float
    mfu: float
    hbm_tbps: float
    size_scale: float
    background: str
    cc: str
    hash_draws: int

    @property
    def model(self) -> ServedModel:
        return ServedModel(**{k: getattr(self, k) for k in _MODEL})

    @property
    def serving(self) -> Serving:
        return Serving(self.prefill, self.decode, self.requests, self.load, self.batch,
                       self.steps, self.hbm_tbps * 8e12)

    @property
    def gpu(self) -> Gpu:
        return Gpu(self.peak_tflops * 1e12, self.mfu)


def workloads(opts: Options, hosts: list[str]) -> dict[str, Any]:
    """{case label: (the serving DAG, the background's one iteration or None)}."""
    served = inference(opts.model, opts.serving, hosts, gpu=opts.gpu,
                       size_scale=opts.size_scale)
    out: dict[str, Any] = {"alone": (served, None)}
    if opts.background != "off":
        layout = layout_of(opts.background)
        rest = hosts[len(served.ranks):]
        if layout.ranks > len(rest):
            raise ParameterError("background", opts.background,
                                 f"{layout.ranks} ranks; {len(rest)} hosts are left after "
                                 f"the inference's {len(served.ranks)}")
        job = iteration(Transformer(layers=2 * layout.pp, seq=512, micro_batches=2,
                                    experts=layout.ep if layout.ep > 1 else 0),
                        layout, rest, gpu=opts.gpu, size_scale=opts.size_scale)
        out[f"beside {opts.background}"] = (served, job)
    return out


def check(opts: Options) -> None:
    spec, scale = split_topo_at(opts.topo, opts.scale)
    check_topology(spec, scale, option="topo")
    workloads(opts, list(build_topo(spec).host_nodes()))


def execute(run: Run, opts: Options) -> None:
    spec, scale = split_topo_at(opts.topo, opts.scale)
    dags = workloads(opts, list(build_topo(spec).host_nodes()))
    served = dags["alone"][0]
    run.note(f"KV cache {opts.model.kv_bytes:,} B per request ({opts.prefill} shares); "
             f"prefill {served.meta['prefill_s'] * 1e6:.1f} us, decode step's compute "
             f"{served.meta['compute'].step_s * 1e6:.1f} us, {len(served.meta['steps'])} "
             f"steps; message-size scale {opts.size_scale:g}")
    cases = {label: f"{spec} {label}" for label in dags}
    with progress(len(cases), NAME) as advance, \
            Fabric(build_topo(spec), Scale(scale), marking="auto",
                   **opts.fabric_options()) as fab:
        run.fabric(opts.topo, fab)
        for label, case in cases.items():
            if run.finished(case):
                advance(case)
                continue
            advance.start(case)
            run.attempt(partial(_case, run, fab, case, *dags[label], opts), opts.attempts)
            run.commit(case)
            advance(case)


def _repeats(fab: Fabric, served: Any, job: Any) -> int:
    """Background iterations that cover the inference: its compute-only span over the
    job's no-sharing iteration time (a lower bound: the job runs at least that long)."""
    span = len(served.meta["steps"]) * served.meta["compute"].step_s
    one = critical_path(job, model_graph(fab), fab.routes.paths).completion_s
    return max(1, min(MAX_REPEATS, math.ceil(span / one)))


def _case(run: Run, fab: Fabric, case: str, served: Any, job: Any, opts: Options) -> None:
    """One case: the DAG measured and priced, its latencies recorded (module doc)."""
    workload = served if job is None else beside(served, job, _repeats(fab, served, job))
    graph = model_graph(fab)
    draws = predict_workload_hashed(workload, graph, fab.routes.paths,
                                    samples=opts.hash_draws, seed=0)
    lower = decode_timeline(workload, critical_path(workload, graph,
                                                    fab.routes.paths).finish_s)
    model = _pooled([decode_timeline(workload, p.finish_s) for p in draws])
    m = measure(fab, workload, engine_config(opts.cc, workers=opts.workers),
                capture=opts.capture)
    measured = decode_timeline(workload, m.messages.set_index("msg_id").end_s.to_dict())
    record_case(run, fab, case, m, workload, cc=opts.cc, effect=(
        f"TTFT p50: model {quantile(model.ttft_s, 0.5) * 1e6:.1f} us, measured "
        f"{quantile(measured.ttft_s, 0.5) * 1e6:.1f} us"),
        frames={"messages": m.messages}, labels={"case": case})
    record(run, case, measured, model, lower)
    if job is not None:
        run.note(f"{case}: {workload.meta['background_messages']:,} background messages "
                 f"({workload.name})")


def _pooled(draws: list[Latencies]) -> Latencies:
    return Latencies(*(sum((getattr(d, f) for d in draws), []) for f in (
        "ttft_s", "ttft_network_s", "tpot_s", "tpot_network_s")),
        unserved=max(d.unserved for d in draws))


def _shares(total: list[float], network: list[float]) -> list[float]:
    return [n / t for t, n in zip(total, network, strict=True) if t > 0]


def record(run: Run, case: str, measured: Latencies, model: Latencies,
           lower: Latencies) -> None:
    """The summary's p50/p99 rows and tokens.csv (one row per request and per step)."""
    for what, total, net in (("TTFT", "ttft_s", "ttft_network_s"),
                             ("time per output token", "tpot_s", "tpot_network_s")):
        for q, p in (("p50", 0.5), ("p99", 0.99)):
            run.metric(case, f"{what} {q}", "us", quantile(getattr(measured, total), p) * 1e6,
                       quantile(getattr(model, total), p) * 1e6, INFER_LATENCY)
            run.metric(case, f"{what} {q}, no link shared", "us",
                       quantile(getattr(measured, total), p) * 1e6,
                       quantile(getattr(lower, total), p) * 1e6, DAG_LOWER_BOUND)
            run.metric(case, f"{what} {q} network share", "%",
                       quantile(_shares(getattr(measured, total), getattr(measured, net)),
                                p) * 100,
                       quantile(_shares(getattr(model, total), getattr(model, net)), p) * 100,
                       INFER_SHARE)
    if measured.unserved or model.unserved:
        run.note(f"{case}: {measured.unserved} request(s) measured and {model.unserved} "
                 "modelled got their KV cache after the last decode step began: no first "
                 "token (more --set steps=)")
    rows = [{"source": source, "kind": kind, "index": i, "time_s": t, "network_s": n}
            for source, lat in (("measured", measured), ("model", model))
            for kind, total, net in (("ttft", lat.ttft_s, lat.ttft_network_s),
                                     ("tpot", lat.tpot_s, lat.tpot_network_s))
            for i, (t, n) in enumerate(zip(total, net, strict=True))]
    run.frame("tokens", pd.DataFrame(rows), case=case)

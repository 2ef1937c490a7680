"""One training iteration of a transformer per layout, measured beside its model.

``emu run training --set layouts='tp=4,pp=2,dp=2;tp=4,pp=2,dp=2,placement=tp-across'``:
each layout's iteration (`traffic.iteration`: TP, PP 1F1B, DP buckets overlapped with
the backward, EP all-to-all, ZeRO) is generated for the model and GPU options, run on
the fabric and priced (`experiments.workload.run_dag`): iteration time, exposed
(waiting) time per dimension, busbw per collective kind, the slowest rank, each beside
the model of the same DAG. ``size_scale`` multiplies every message's bytes (a full
model's messages would take hours at S); compute is not scaled; the model prices the
same scaled DAG, and the run records the scale. ``--emit F`` writes the first layout's
DAG as a workload file (docs/workloads.md) for ``emu run workload --file F``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import pandas as pd

from core.errors import ParameterError
from core.safefile import write_json
from core.scaling import Scale
from emu.fabric import Fabric
from experiments.option_parsers import (
    CC_HELP,
    parse_cc,
    parse_float,
    parse_int,
    parse_list,
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
from experiments.workload import MAX_HASH_DRAWS, NVLINK_SCALE, TOPO_HELP, parse_file, run_dag
from topologies.spec import build_topo
from traffic.dagfile import dump_dag
from traffic.iteration import DIMENSIONS, Gpu, Layout, Transformer, iteration

NAME = "training"
_LAYOUT_KEYS = {f.name for f in fields(Layout)}


def parse_layout(value: Any) -> str:
    """``tp=4,pp=2,dp=2[,ep=E,zero=0|1|3,placement=tp-inside|tp-across,tp_comm=...]``."""
    text = parse_text(value)
    layout_of(text)
    return text


def layout_of(text: str) -> Layout:
    kw: dict[str, Any] = {}
    for item in text.split(","):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or key not in _LAYOUT_KEYS or key in kw:
            raise ParameterError("layout", item, f"expected KEY=VALUE, once each, KEY one of "
                                                 f"{', '.join(sorted(_LAYOUT_KEYS))}")
        raw = raw.strip()
        if key in ("placement", "tp_comm"):
            kw[key] = raw
        else:
            try:
                kw[key] = int(raw)
            except ValueError:
                raise ParameterError(key, raw, "expected an integer") from None
    layout = Layout(**kw)
    layout.check(Transformer(layers=max(1, layout.pp), experts=layout.ep if layout.ep > 1
                             else 0))
    return layout


_MODEL = {"layers": 4, "hidden": 1024, "heads": 16, "seq": 512, "vocab": 32000,
          "micro_batch": 1, "micro_batches": 4, "precision_bytes": 2, "experts": 0,
          "top_k": 1}

OPTIONS: dict[str, Option] = with_common({
    "topo": Option(f"railopt,4,gpus=4@{NVLINK_SCALE:g}", TOPO_HELP,
                   quick=f"railopt,2,gpus=4@{NVLINK_SCALE:g}", parse=parse_topo_at),
    "layouts": Option(["tp=4,pp=2,dp=2", "tp=4,pp=2,dp=2,placement=tp-across"],
                      "parallel layouts, ';'-separated: tp=,pp=,dp=,ep=,zero=0|1|3,"
                      "placement=tp-inside|tp-across,tp_comm=allreduce|rs-ag,bucket_bytes=",
                      quick=["tp=4,pp=2,dp=1"], parse=parse_list(parse_layout)),
    **{k: Option(v, f"model: {k.replace('_', ' ')}", parse=parse_int(0 if k == "experts"
                                                                     else 1))
       for k, v in _MODEL.items()},
    "peak_tflops": Option(989.0, "GPU peak (TFLOP/s, dense, at the precision)",
                          parse=parse_float(1e-3, 1e6)),
    "mfu": Option(0.4, "model FLOPs utilisation: compute = FLOPs / (peak x MFU)",
                  parse=parse_float(0.0, 1.0, open_low=True)),
    "size_scale": Option(1.0, "every message's bytes times this (reported; the model "
                         "prices the same DAG)", parse=parse_float(0.0, 1.0, open_low=True)),
    "emit": Option("", "write the first layout's DAG here (docs/workloads.md); also "
                   "--emit F", parse=parse_file),
    "cc": Option("off", CC_HELP, parse=parse_cc),
    "hash_draws": hash_draws_option(8, MAX_HASH_DRAWS),
})


@dataclass(frozen=True)
class Options(CommonOptions):
    topo: str
    layouts: list[str]
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    micro_batch: int
    micro_batches: int
    precision_bytes: int
    experts: int
    top_k: int
    peak_tflops: float
    mfu: float
    size_scale: float
    emit: str
    cc: str
    hash_draws: int

    @property
    def model(self) -> Transformer:
        return Transformer(**{k: getattr(self, k) for k in _MODEL})

    @property
    def gpu(self) -> Gpu:
        return Gpu(self.peak_tflops * 1e12, self.mfu)


def workloads(opts: Options, hosts: list[str]) -> dict[str, Any]:
    """{layout text: its iteration's DAG on ``hosts``}."""
    return {text: iteration(opts.model, layout_of(text), hosts, gpu=opts.gpu,
                            size_scale=opts.size_scale) for text in opts.layouts}


def check(opts: Options) -> None:
    spec, scale = split_topo_at(opts.topo, opts.scale)
    check_topology(spec, scale, option="topo")
    hosts = list(build_topo(spec).host_nodes())
    workloads(opts, hosts)   # every layout fits the model and the fabric


def emit(path: str, workload: Any) -> None:
    try:
        write_json(path, dump_dag(workload))
    except OSError as e:
        raise ParameterError("emit", path, e.strerror or str(e)) from None


def execute(run: Run, opts: Options) -> None:
    spec, scale = split_topo_at(opts.topo, opts.scale)
    hosts = list(build_topo(spec).host_nodes())
    dags = workloads(opts, hosts)
    if opts.emit:  # here, not in check(): checking options never writes a file
        emit(opts.emit, dags[opts.layouts[0]])
    run.note(f"message-size scale {opts.size_scale:g}: every message's bytes times it, in "
             "the measurement and in the model; compute gaps unscaled")
    cases = {text: f"{spec} {text}" for text in opts.layouts}
    with progress(len(cases), NAME) as advance, \
            Fabric(build_topo(spec), Scale(scale), marking="auto",
                   **opts.fabric_options()) as fab:
        run.fabric(opts.topo, fab)
        for text, case in cases.items():
            if run.finished(case):
                advance(case)
                continue
            advance.start(case)
            run.attempt(partial(_case, run, fab, case, text, dags[text], opts), opts.attempts)
            run.commit(case)
            advance(case)


def _case(run: Run, fab: Fabric, case: str, text: str, workload: Any, opts: Options) -> None:
    """One layout: its DAG run and recorded, and its row of layouts.csv."""
    r = run_dag(run, fab, case, workload, opts.cc, opts.hash_draws, opts.workers,
                opts.capture, headline="iteration")
    meta = workload.meta
    row = {"layout": text, "iteration_s": r.measured.completion_s,
           "iteration_model_s": r.model_mean(lambda a: a.completion_s),
           "iteration_lower_s": r.lower.completion_s, "compute_s": meta["compute_s"],
           "size_scale": opts.size_scale, "messages": len(workload.messages),
           "inexact_waits": meta["inexact_waits"],
           **{f"exposed_{d}_s": r.measured.exposed_mean_s(d) for d in DIMENSIONS},
           **{f"exposed_{d}_model_s": r.model_mean(lambda a, d=d: a.exposed_mean_s(d))
              for d in DIMENSIONS},
           "layout_json": json.dumps(meta["layout"])}
    run.frame("layouts", pd.DataFrame([row]), case=case)

"""Routing modes side by side (`emu run routing`): ECMP, spraying, flowlets, adaptive
routing (and Valiant and UGAL on a dragonfly) on the workloads where they differ.

For every mode one fabric is built with that mode in its switches
(`topologies.loadbalance`, emu/bpf/router.c), and each workload runs on it: a random
permutation, an all-to-all and a ring all-reduce on each of ``topos`` (fattree,4 with
400G everywhere: full bisection, so only routing keeps a flow below line rate; the
issue's fattree,8 on request, at its own S: ``--set "topos=FATTREE8@500000" --set
"workloads=permutation;alltoall"`` with FATTREE8 spelled out; the all-to-all's 16,256
messages need that S on a 2-core machine), then the
adversarial dragonfly pattern on ``dragonfly`` (every group sends to the next group:
`experiments.routing_model.group_shift`) under ``dragonfly_modes``. Every QP runs
over ``transport``: ``auto`` (the default) is selective repeat, whose reorder
tolerance is derived from the fabric (`traffic.reorder_bound`), as soon as one of the
run's modes reorders a flow by design (every mode but ECMP), so that every mode runs
on it; go-back-N (``--set transport=gbn``) answers spraying's reordering with
retransmissions. ``window`` bounds each QP's unacknowledged frames (`traffic.window`):
``auto`` (the default) is IRN's BDP window on the dragonfly, whose adversarial
pattern sends a*p hosts' line rate into one global link (without a window or a
congestion control its buffer overflows and every retransmission meets the same full
queue: minimal routing measured 24 Gb/s against its 97 Gb/s share on
dragonfly,2,2,2), and no window on the Clos workloads, whose fabrics have full
bisection (a flow that queues behind a window runs below line rate, which routing's
comparison there must not hide).

Per case: busbw and completion time beside the ideal balanced bound and ECMP's
expected collision loss (`experiments.routing_model`, a priori from the topology),
Valiant's and UGAL's bounds, and for the per-frame modes (spray, spray-rr, adaptive,
Valiant, UGAL) the frame model's estimate of the switches' rule (`model.adaptive`),
p99 one-way latency beside the unloaded path's, the max/mean load of the
switch-to-switch links beside the ideal's and ECMP's, out-of-sequence frames and
retransmissions, and the engine's CPU per data frame against ECMP's on the same
workload, and the switches' eBPF programs' kernel-timed cost per frame (router, ECN
marker). routing.csv holds one row per case (busbw per mode, routing_busbw.png),
link_load.csv every fabric link's bytes (the heat map, link_load.png).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from core.errors import ParameterError
from core.scaling import Scale
from emu.bpfload import RunTime, programs_run_time, run_time_stats
from emu.fabric import Fabric
from experiments.measure import Measurement, engine_config, measure, record_case
from experiments.option_parsers import (
    CC_HELP,
    parse_cc,
    parse_choice,
    parse_int,
    parse_list,
    parse_size,
    parse_topo,
    parse_topo_at,
    split_topo_at,
)
from experiments.options import TRANSPORT, CommonOptions, Option, check_topology, with_common
from experiments.progress import progress
from experiments.routing_model import (
    CPU_PARITY,
    ECMP_EXPECTED,
    FRAME_ESTIMATE,
    FRAME_MODES,
    IDEAL_LOAD,
    IDEAL_RATE,
    IDEAL_TIME,
    NO_RETRANSMISSION,
    SINGLE_PATH_ORDER,
    UGAL_BOUND,
    UNLOADED_LATENCY,
    VALIANT_BOUND,
    Expectation,
    collective_of,
    dragonfly_bound,
    expect,
    fabric_links,
    frame_estimate,
    group_shift,
)
from experiments.rundir import Run
from model.adaptive import FrameRun
from model.alphabeta import roce_wire_factor
from model.busbw import busbw_bps
from topologies.loadbalance import GROUP_MODES, ROUTING_MODES
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from topologies.valiant import group_routes
from traffic import collectives
from traffic.reorder_bound import reorders_by_design
from traffic.selective_repeat import WINDOW_PACKETS
from traffic.transport import TRANSPORTS
from traffic.window import bdp_window_packets, check_window

NAME = "routing"

#: The modes of the Clos workloads: every mode but those routing through dragonfly groups.
CLOS_MODES = tuple(m for m in ROUTING_MODES if m not in GROUP_MODES)
WORKLOADS = ("permutation", "alltoall", "allreduce-ring")
#: The default Clos: full bisection, so only routing keeps a flow below line rate.
FATTREE4 = "fattree,4,fabric_rate=400G,core_rate=400G"
#: The issue's larger one (128 hosts), and an S its 128 flows can run at on a few cores.
FATTREE8 = "fattree,8,fabric_rate=400G,core_rate=400G"
FATTREE8_SCALE = 100000.0
_MODE = parse_choice(*ROUTING_MODES)


def _parse_dragonfly(value: Any) -> str:
    """A dragonfly spec, or 'none' to leave the dragonfly case out."""
    if isinstance(value, str) and value.strip().lower() == "none":
        return "none"
    spec = parse_topo(value)
    if not spec.startswith("dragonfly"):
        raise ParameterError("dragonfly", value, "expected a dragonfly spec or 'none'")
    return spec


def _parse_window(value: Any) -> int | str | None:
    """'auto', or a window ``traffic.window.check_window`` takes ('none', 'bdp', frames)."""
    word = value.strip().lower() if isinstance(value, str) else value
    if word == "auto":
        return "auto"
    if isinstance(word, str) and word.isdigit():
        word = parse_int(1, WINDOW_PACKETS)(word)
    return check_window(word)


def case_window(opts: Options, family: str) -> int | str | None:
    """The window a case on a fabric of ``family`` runs with (``window``, auto resolved)."""
    if opts.window != "auto":
        return opts.window
    return "bdp" if family == "dragonfly" else None


OPTIONS: dict[str, Option] = with_common({
    "topos": Option([FATTREE4], "the Clos fabrics of the workloads (';'-separated, each "
                    f"SPEC or SPEC@S); e.g. add {FATTREE8}@{FATTREE8_SCALE:g} with "
                    "workloads=permutation;alltoall", quick=["leafspine,2,2,1"],
                    parse=parse_list(parse_topo_at)),
    "modes": Option(list(CLOS_MODES), "routing modes on topo (';'-separated)",
                    quick=["ecmp", "spray"], parse=parse_list(_MODE)),
    "workloads": Option(list(WORKLOADS), "workloads on topo (';'-separated)",
                        quick=["permutation"], parse=parse_list(parse_choice(*WORKLOADS))),
    "size": Option(4 << 20, "bytes per flow (all-reduce: the buffer)", quick=256 << 10,
                   parse=parse_size),
    "seed": Option(1, "the permutation's seed", parse=parse_int(0, 2**32 - 1)),
    "samples": Option(100, "ECMP hash draws of the model", quick=10, parse=parse_int(1, 10000)),
    "dragonfly": Option("dragonfly,1,2,2,global_rate=400G",
                        "dragonfly of the adversarial case (one 400G global link per pair of "
                        "groups: minimal routing halves the rate), or none",
                        quick="none", parse=_parse_dragonfly),
    "dragonfly_modes": Option(["ecmp", *GROUP_MODES], "routing modes on the dragonfly",
                              parse=parse_list(_MODE)),
    "cc": Option("off", CC_HELP, parse=parse_cc),
    "window": Option("auto", "each QP's most unacknowledged frames: none, bdp (IRN's BDP-FC: "
                     "the longest unloaded round trip at line rate plus the ACK coalescing), "
                     "a frame count, or auto: bdp on the dragonfly, none on the Clos fabrics",
                     parse=_parse_window),
}, transport=Option("auto", f"{TRANSPORT.help}; auto: sr if one of the run's modes reorders "
                            "a flow by design (every mode but ecmp), else gbn",
                    parse=parse_choice("auto", *TRANSPORTS)))


@dataclass(frozen=True)
class Options(CommonOptions):
    """The options of the routing experiment (OPTIONS), typed."""

    topos: list[str]
    modes: list[str]
    workloads: list[str]
    size: int
    seed: int
    samples: int
    dragonfly: str
    dragonfly_modes: list[str]
    cc: str
    window: int | str | None


def check(opts: Options) -> None:
    """Both fabrics shaped accurately at S; the modes come from ``modes``, not ``routing``."""
    for entry in opts.topos:
        spec, scale = split_topo_at(entry, opts.scale)
        check_topology(spec, scale, option="topos")
    if opts.dragonfly != "none":
        check_topology(opts.dragonfly, opts.scale, option="dragonfly")
    if opts.routing != "ecmp":
        raise ParameterError("routing", opts.routing,
                             "emu run routing builds one fabric per mode: use --set modes=...")
    grouped = [m for m in opts.modes if m in GROUP_MODES]
    flat = [e for e in opts.topos if build_topo(split_topo_at(e, opts.scale)[0]).family
            != "dragonfly"]
    if grouped and flat:
        raise ParameterError("modes", ";".join(opts.modes),
                             f"{', '.join(grouped)} route through dragonfly groups and "
                             f"{flat[0]} is not a dragonfly: give them in dragonfly_modes")


def run_modes(opts: Options) -> list[str]:
    """The routing modes the run builds fabrics for."""
    return [*opts.modes, *(opts.dragonfly_modes if opts.dragonfly != "none" else [])]


def resolved_transport(opts: Options) -> str:
    """The transport every case runs over: ``transport``, with ``auto`` resolved."""
    if opts.transport != "auto":
        return opts.transport
    return "sr" if any(reorders_by_design(m) for m in run_modes(opts)) else "gbn"


def _workload(name: str, hosts: list[str], opts: Options) -> Any:
    return collectives.build(name, hosts, opts.size, seed=opts.seed)


def execute(run: Run, opts: Options, prefix: str = "") -> None:
    plan: list[tuple[str, str, str]] = [(entry, mode, w) for entry in opts.topos
                                        for mode in opts.modes for w in opts.workloads]
    if opts.dragonfly != "none":
        plan += [(opts.dragonfly, mode, "group-shift") for mode in opts.dragonfly_modes]
    cases = {p: f"{prefix}{_label(p[0], p[2], opts)} {p[1]}" for p in plan}
    if opts.transport == "auto":
        run.note(f"transport=auto: {resolved_transport(opts)} for every mode "
                 f"({'; '.join(run_modes(opts))})")
    # label -> ECMP's engine CPU per data frame and per link crossing (s)
    ecmp_cpu: dict[str, tuple[float, float]] = {}
    # (fabric, workload) -> its model, priced once for every mode (fattree,8's
    # all-to-all: 100 busiest-link draws of 16,256 messages, about 40 s)
    models: dict[tuple[str, str], Expectation] = {}
    with progress(len(cases), f"{prefix}routing") as advance:
        for case in cases.values():
            if run.finished(case):
                advance(case)
        fabrics = list(dict.fromkeys((spec, mode) for spec, mode, _ in plan))
        for spec, mode in fabrics:
            todo = [(w, cases[s, m, w]) for s, m, w in plan
                    if (s, m) == (spec, mode) and not run.finished(cases[s, m, w])]
            if todo:
                _on_fabric(run, opts, spec, mode, todo, advance, (ecmp_cpu, models))


def _label(entry: str, workload: str, opts: Options) -> str:
    """A workload's name in cases and routing.csv; with several Clos fabrics, its
    fabric's too."""
    return f"{entry} {workload}" if len(opts.topos) > 1 and entry in opts.topos else workload


def _on_fabric(run: Run, opts: Options, entry: str, mode: str, todo: list[tuple[str, str]],
               advance: Any, shared: tuple[dict[str, tuple[float, float]], dict[tuple[str, str], Expectation]]
               ) -> None:
    ecmp_cpu, models = shared
    spec, scale = split_topo_at(entry, opts.scale)
    topo = build_topo(spec)
    graph, routes = topo_graph(topo), compute_routes(topo)
    with Fabric(topo, Scale(scale), marking="auto",
                **{**opts.fabric_options(), "routing": mode}) as fab:
        run.fabric(f"{entry} routing={mode} transport={resolved_transport(opts)}", fab)
        nic_bps = min(p.rate_bps for p in fab.ports() if not p.is_switch)
        for name, case in todo:
            advance.start(case)
            workload = (group_shift(topo, opts.size) if name == "group-shift"
                        else _workload(name, list(fab.hosts), opts))
            if (entry, name) not in models:
                models[entry, name] = expect(workload, graph, routes, nic_bps, opts.samples,
                                             opts.seed)
                if models[entry, name].ecmp_claim is not ECMP_EXPECTED:
                    run.note(f"{_label(entry, name, opts)}: {len(workload.messages)} messages, "
                             "too many for the fluid model: the ideal and ECMP are priced by "
                             "their busiest link (a lower bound of the completion)")
            model = models[entry, name]
            # A priori, so priced once per case, not per attempt.
            frames = (frame_estimate(workload, graph, routes, mode,
                                     groups=group_routes(topo, routes)
                                     if mode in GROUP_MODES else None,
                                     window=_window_frames(opts, topo.family, (graph, routes),
                                                           workload, mode))
                      if mode in FRAME_MODES else None)
            run.attempt(partial(_measure, run, fab, case, mode,
                                (_label(entry, name, opts), workload), (model, frames), opts,
                                ecmp_cpu),
                        opts.attempts)
            run.commit(case)
            advance(case)


def _window_frames(opts: Options, family: str, routed: tuple[Any, Any], workload: Any,
                   mode: str) -> int | None:
    """The window (frames) the engine gives the case's QPs, as `engine.run` resolves it,
    on the fabric's already routed ``(graph, routes)``."""
    window = case_window(opts, family)
    if window != "bdp":
        return window
    graph, routes = routed
    return bdp_window_packets(graph, routes, {(m.src, m.dst) for m in workload.messages},
                              mode, engine_config(opts.cc).acks_every)


def _timed_measure(fab: Fabric, workload: Any, config: Any, opts: Options
                   ) -> tuple[Measurement, dict[str, RunTime]]:
    """`measure`, with the kernel timing the switches' eBPF programs meanwhile (two
    clock reads per program run, in every mode alike): what each job (router, ECN
    marker) used, in runs and ns, zero where the kernel keeps no statistics."""
    ids = fab.bpf_program_ids()
    if not any(ids.values()):  # e.g. RED marking and ECMP: no program, maybe no libbpf
        return measure(fab, workload, config, capture=opts.capture), {j: RunTime() for j in ids}
    with run_time_stats() as timed:
        before = {job: programs_run_time(p) for job, p in ids.items()}
        m = measure(fab, workload, config, capture=opts.capture)
        used = {job: programs_run_time(p) - before[job] if timed else RunTime()
                for job, p in ids.items()}
    return m, used


def _cost_metrics(run: Run, case: str, named: tuple[str, str], m: Measurement,
                  bpf_time: dict[str, RunTime], ecmp_cpu: dict[str, tuple[float, float]]
                  ) -> tuple[float, float]:
    """The engine's CPU per data frame and per link crossing (each port's transmitted
    packets: the unit of the kernel's forwarding work, which grows with a mode's path
    length), beside ECMP's on the same workload, and the switches' eBPF time per frame;
    returns the first two (s)."""
    label, mode = named
    frames = max(1, m.stats.data_packets_sent)
    cpu_per_frame_s = m.stats.cpu_s_total / frames
    cpu_per_crossing_s = m.stats.cpu_s_total / max(1, int(m.ports.tx_packets.sum()))
    run.metric(case, "engine CPU per frame", "µs", cpu_per_frame_s * 1e6, None)
    for job, used in bpf_time.items():
        if used.runs:
            run.metric(case, f"switches' eBPF {job} time per frame", "ns",
                       used.run_ns / frames, None)
    run.metric(case, "engine CPU per link crossing", "µs", cpu_per_crossing_s * 1e6, None)
    if mode == "ecmp":
        ecmp_cpu[label] = (cpu_per_frame_s, cpu_per_crossing_s)
    elif label in ecmp_cpu:
        run.metric(case, "engine CPU per frame / ECMP's", "ratio",
                   cpu_per_frame_s / ecmp_cpu[label][0], 1.2, CPU_PARITY)
        run.metric(case, "engine CPU per link crossing / ECMP's", "ratio",
                   cpu_per_crossing_s / ecmp_cpu[label][1], 1.2, CPU_PARITY)
    return cpu_per_frame_s, cpu_per_crossing_s


def _measure(run: Run, fab: Fabric, case: str, mode: str, named: tuple[str, Any],
             models: tuple[Expectation, list[FrameRun] | str | None], opts: Options,
             ecmp_cpu: dict[str, tuple[float, float]]) -> None:
    label, workload = named
    model, frames = models
    transport = resolved_transport(opts)
    config = engine_config(opts.cc, opts.workers, transport=transport,
                           window=case_window(opts, fab.topo.family))
    m, bpf_time = _timed_measure(fab, workload, config, opts)
    done_s = m.completion_s
    busbw = busbw_bps(collective_of(workload), len(workload.ranks), workload.size_bytes, done_s)
    links = fabric_links(topo_graph(fab.topo))
    load = _link_loads(m, links)
    measured_load = float(load.tx_bytes.max() / load.tx_bytes.mean()) \
        if load.tx_bytes.mean() > 0 else float("nan")
    msgs = m.messages
    retx, ooo = int(msgs.retransmitted.sum()), int(msgs.out_of_sequence.sum())
    crossings = int(m.ports.tx_packets.sum())  # packets (data, ACK, CNP) x links crossed
    _note_loss(run, case, m, retx)
    minimal = mode not in GROUP_MODES
    # Minimal paths' ideal is no model of a mode that leaves them: those get their own
    # bound (`_dragonfly_metric`) and no value here.
    run.metric(case, "completion time", "µs", done_s * 1e6,
               model.ideal.completion_s * 1e6 if minimal else None, IDEAL_TIME if minimal else None)
    run.metric(case, "busbw", "Gb/s", busbw * 1e-9,
               (model.ideal.busbw_bps or 0) * 1e-9 if minimal else None,
               IDEAL_RATE if minimal else None)
    run.metric(case, "max/mean link load", "ratio", measured_load,
               model.ideal_load if minimal else None, IDEAL_LOAD if minimal else None)
    if mode == "ecmp":
        run.metric(case, "busbw (ECMP collision model)", "Gb/s", busbw * 1e-9,
                   float(np.mean(model.ecmp_busbw_bps)) * 1e-9, model.ecmp_claim)
        run.metric(case, "completion time (ECMP collision model)", "µs", done_s * 1e6,
                   float(np.mean(model.ecmp_s)) * 1e6, model.ecmp_claim)
        loads = [x for x in model.ecmp_load if not np.isnan(x)]
        run.metric(case, "max/mean link load (ECMP collision model)", "ratio", measured_load,
                   float(np.mean(loads)) if loads else None, model.ecmp_claim)
        run.spread(case, "busbw (ECMP collision model)",
                   _band(model.ecmp_busbw_bps), _range(model.ecmp_busbw_bps))
        run.metric(case, "out-of-sequence frames", "frames", ooo, 0, SINGLE_PATH_ORDER)
    else:
        run.metric(case, "out-of-sequence frames", "frames", ooo, None)
    if not minimal:
        _dragonfly_metric(run, case, mode, fab, workload, busbw)
    if frames is not None:
        _frame_metric(run, case, mode, frames, busbw, _estimate_rate(mode, workload, model))
    run.metric(case, "p99 one-way latency", "µs", _p99_us(m), model.latency_p99_s * 1e6,
               UNLOADED_LATENCY)
    run.metric(case, "retransmissions", "frames", retx, 0, NO_RETRANSMISSION)
    cpu_per_frame_s, cpu_per_crossing_s = _cost_metrics(run, case, (label, mode), m,
                                                        bpf_time, ecmp_cpu)
    row = pd.DataFrame([{"workload": label, "mode": mode, "transport": transport,
                         "busbw_bps": busbw, "ideal_busbw_bps": model.ideal.busbw_bps,
                         "ecmp_busbw_bps": float(np.mean(model.ecmp_busbw_bps)),
                         "completion_s": done_s, "max_mean_load": measured_load,
                         "out_of_sequence": ooo, "retransmitted": retx,
                         "reorder_packets": m.stats.reorder_packets,
                         "window": m.stats.window,
                         "data_frames": m.stats.data_packets_sent,
                         "frames_sent": m.stats.packets_sent, "link_crossings": crossings,
                         "cpu_per_frame_s": cpu_per_frame_s,
                         "cpu_per_crossing_s": cpu_per_crossing_s,
                         "router_runs": bpf_time["router"].runs,
                         "router_ns": bpf_time["router"].run_ns,
                         "marker_runs": bpf_time["ECN marker"].runs,
                         "marker_ns": bpf_time["ECN marker"].run_ns}])
    record_case(run, fab, case, m, workload, cc=opts.cc,
                effect=f"busbw {busbw * 1e-9:.1f} Gb/s" + (
                    f", ideal bound {(model.ideal.busbw_bps or 0) * 1e-9:.1f} Gb/s"
                    if minimal else ""), labels={"case": case},
                frames={"routing": row, "link_load": load.reset_index(drop=True),
                        "messages": m.messages})


def _dragonfly_metric(run: Run, case: str, mode: str, fab: Fabric, workload: Any,
                      busbw: float) -> None:
    """Valiant's or UGAL's bound from ``model.ugal`` (absent: a note, no model value)."""
    bound = dragonfly_bound(mode)
    claim = VALIANT_BOUND if mode == "valiant" else UGAL_BOUND
    if bound is None:
        run.metric(case, f"busbw ({mode} model)", "Gb/s", busbw * 1e-9, None)
        run.note(f"{case}: model.ugal.{mode}_bound is not in this build; no model value")
        return
    # The slowest flow's link rate (wire bit/s) as payload: a permutation's busbw
    # (latency and the NIC's overhead left out, so a bound).
    pairs = [(m.src, m.dst) for m in workload.messages]
    rate_bps = bound(fab.topo, pairs).slowest_flow_bps / roce_wire_factor()
    run.metric(case, f"busbw ({mode} model)", "Gb/s", busbw * 1e-9, rate_bps * 1e-9, claim)


def _link_loads(m: Measurement, links: list[tuple[str, str]]) -> pd.DataFrame:
    """Bytes each switch-to-switch link sent during the run (the heat map's cells)."""
    ports = m.ports
    sent = {(str(r.node), str(r.peer)): int(r.tx_bytes) for r in ports.itertuples()}
    return pd.DataFrame([{"src": u, "dst": v, "tx_bytes": sent.get((u, v), 0)}
                         for u, v in links])


def _p99_us(m: Measurement) -> float:
    lat = m.latency.one_way_s if "one_way_s" in m.latency else pd.Series(dtype=float)
    return float(lat.quantile(0.99)) * 1e6 if len(lat) else float("nan")


def _note_loss(run: Run, case: str, m: Measurement, retransmitted: int) -> None:
    """A note where full port buffers dropped frames of QPs without a window."""
    drops = int(m.ports.drops.sum())
    if drops and m.stats.window is None:
        run.note(f"{case}: {drops} frames dropped by full port buffers and {retransmitted} "
                 "retransmitted: the models assume no loss, which a window or a congestion "
                 "control keeps (--set window=bdp, --set cc=dcqcn); without them every "
                 "retransmission meets the same full queue")


def _estimate_rate(mode: str, workload: Any, model: Expectation
                   ) -> Callable[[FrameRun], float]:
    """A frame-model run's busbw: the Clos modes' ideal is the frame model's own (every
    flow at NIC rate), times its ratio; a dragonfly's ideal is minimal routing's, so
    there the run's own completion time counts."""
    if mode in GROUP_MODES:
        return lambda r: busbw_bps(collective_of(workload), len(workload.ranks),
                                   workload.size_bytes, r.completion_s)
    ideal_bps = model.ideal.busbw_bps or 0.0
    return lambda r: ideal_bps * r.ratio


def _frame_metric(run: Run, case: str, mode: str, runs: list[FrameRun] | str, busbw: float,
                  rate_of: Callable[[FrameRun], float]) -> None:
    """busbw beside `frame_estimate`'s ``runs``, each run's busbw by ``rate_of`` (a note
    if there are none)."""
    if isinstance(runs, str):
        run.note(f"{case}: {runs}")
        return
    rates = [rate_of(r) for r in runs]
    name = f"busbw ({mode} estimate)"
    run.metric(case, name, "Gb/s", busbw * 1e-9, float(np.mean(rates)) * 1e-9, FRAME_ESTIMATE)
    run.spread(case, name, _band(rates), _range(rates))


def _band(values: list[float]) -> tuple[float, float]:
    lo, hi = np.quantile(np.asarray(values) * 1e-9, [0.05, 0.95])
    return float(lo), float(hi)


def _range(values: list[float]) -> tuple[float, float]:
    arr = np.asarray(values) * 1e-9
    return float(arr.min()), float(arr.max())

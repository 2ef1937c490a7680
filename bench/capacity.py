"""Benchmark: what the kernel fabric carries vs what the engine drives, per topology.

    python -m bench.capacity [--topo fattree,4 --topo fattree,8@30000,15000]
                             [--scales 20000,10000,5000,4000]
                             [--cc off,dcqcn,dctcp,timely,swift,hpcc]
                             [--workers auto,2]

Printed side by side:

* **kernel capacity**: the same topology built at S = ``--blast-scale`` (shapers far
  above what the CPU can fill), every host blasting prebuilt RoCEv2 frames with the
  compiled ``sendmmsg`` burst path, one blasting process per core, to a host half
  the fabric away; delivered frames/s = frames the switch ports towards hosts sent
  (their counters), over the blast time;
* **engine**: the ring all-reduce of 4 MiB over every host (16 ranks on fattree,4,
  128 on fattree,8) at each S of the topology (``SPEC@S,...`` or ``--scales``),
  largest first: gate verdict, completion time against the model of
  what the fabric emulates (``time_model_emulable_s``: the real-fabric model without
  the fixed delays the emulator does not add), data frames/s, engine CPU per
  delivered frame (workers' CPU, user and kernel: a send's kernel time carries the
  frame through every shaper and switch on its path), the same per frame the engine
  sent, ACKs, NAKs and CNPs included (HPCC ACKs every frame), the machine's busy
  share, and the p99 send lag beside the p99 of how far behind its post time a
  message started (a send lag with starts as late is per-message work: a worker
  busy with other messages' completions and starts);
* the smallest S at which the run is VALID and within 5 % of that model, and the
  engine's frames/s there divided by the kernel capacity;
* **whole process**: what ``emu run collective`` spends on each ring case, from
  building its fabric to its teardown, and its parts: the fabric build, the wait
  for the model's curve after it (``model_curve``: 16 draws at each power of two from
  a quarter to four times the size, priced beside the build as the CLI does), the
  model pricing the case (``experiments.collective.run_collective``: 16 hashed-ECMP
  draws on the real and the emulable fabric), the engine's start (its plans), the
  workers' set-up (their QPs' frame templates, built while the engine opens the
  sockets it hands them, then their compiled views), the run itself (the longest
  worker's loop) and the rest (reading counters, the gate, the teardown), beside the
  CPU and wake-ups per frame and the share of the kernel's capacity. The CLI also
  writes the run directory and its plots (2-3 s on fattree,8: docs/validation.md).
  The model's draws are kept across runs (``experiments.modelcache``): the first S of
  a topology prices them, the others read them (set FABRICEMU_MODEL_CACHE=off to
  price every time);
* with ``--cc``, the ring once per congestion-control setting at each S: the CPU a
  frame costs with each algorithm (its per-ACK and per-CNP Python work, and HPCC's
  ACK per frame and in-band telemetry);
* with ``--workers auto,2``, the ring once with the engine's own choice of workers
  (``engine.run.auto_workers``) and once on two: what fewer wake-ups save;
* with ``--receive-steering both``, everything once with each node's links pinned to
  one CPU (``emu.rxorder``) and once without (the default): what in-order delivery
  costs;
* first, the machine's price of one wake-up: the CPU of arming the engine's timer
  (``engine.rawsock.TimerFd``) a frame time ahead, sleeping in epoll and waking, per
  cycle. The table's wake-up share of a frame is the wake-ups per frame times it. On
  a VM whose timer programming traps to the hypervisor this is tens of µs, the
  largest part of the engine's own CPU per frame.

Run it alone on the machine (under the heavy-work lock): the gate counts every
process's CPU.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from functools import partial
from typing import Any

from rich.console import Console
from rich.table import Table

from core.frame import MTU_PAYLOAD_BYTES
from core.scaling import Scale
from emu.fabric import Fabric
from emu.netns import in_netns
from engine.burst import MAX_BURST, Burst
from engine.rawsock import WAKE_SLEEP_S, open_tx_socket, wakeup_cpu_us
from experiments.collective import model_curve, run_collective
from experiments.measure import fidelity_of
from experiments.modelcache import PricedAhead
from experiments.option_parsers import (
    arg_type,
    clear_errors,
    parse_cc,
    parse_duration_s,
    parse_scale,
    parse_scales,
    parse_topo,
)
from experiments.options import parse_workers
from topologies.spec import build_topo
from traffic.roce import Flow, QpTemplate

WITHIN = 0.05
RING_BYTES = 4 << 20


def _blaster(socks: list[Any], shapes: list[Any], stop_at: float, counts: Any, w: int) -> None:
    burst = Burst("compiled")
    sent = 0
    psn = 0
    while time.monotonic() < stop_at:
        for sock, shape in zip(socks, shapes, strict=True):
            sent += burst.send(sock, shape, psn, MAX_BURST, 0)
        psn = (psn + MAX_BURST) & 0xFFFFFF
    counts[w] = sent


def kernel_capacity(spec: str, scale: float, seconds: float, in_order: bool = False
                    ) -> dict[str, float]:
    """Delivered frames/s with every host blasting prebuilt frames (see the module doc)."""

    with Fabric(build_topo(spec), Scale(scale), marking="auto", in_order=in_order) as fab:
        hosts = list(fab.hosts)
        pairs = [(h, hosts[(i + len(hosts) // 2) % len(hosts)]) for i, h in enumerate(hosts)]
        socks, shapes = [], []
        for i, (src, dst) in enumerate(pairs):
            eg = fab.egress(src, dst)
            flow = Flow(eg.src_mac, eg.dst_mac, eg.src_ip, eg.dst_ip, 0xC000 | i, i + 1)
            tmpl = QpTemplate(flow, MTU_PAYLOAD_BYTES * 3)
            shapes.append(tmpl.shapes[tmpl.opcode(1)])
            with in_netns(fab.endpoint(src).netns_path):
                socks.append(open_tx_socket(eg.ifname))
        cpus = sorted(os.sched_getaffinity(0))
        ctx = multiprocessing.get_context("fork")
        counts = ctx.RawArray("q", len(cpus))
        to_hosts = [p.name for p in fab.ports() if p.is_switch and p.peer_node in fab.hosts]
        before = fab.port_stats().set_index("port").loc[to_hosts, "tx_packets"].astype(int)
        stop_at = time.monotonic() + seconds
        procs = [ctx.Process(target=_blaster, args=(socks[w::len(cpus)], shapes[w::len(cpus)],
                                                    stop_at, counts, w), daemon=True)
                 for w in range(len(cpus))]
        t0 = time.monotonic()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        wall_s = time.monotonic() - t0
        time.sleep(0.5)  # frames still in the shapers' queues count as delivered
        after = fab.port_stats().set_index("port").loc[to_hosts, "tx_packets"].astype(int)
        for s in socks:
            s.close()
    delivered = int((after - before).sum())
    return {"delivered_fps": delivered / wall_s, "offered_fps": sum(counts) / wall_s,
            "seconds": wall_s}


def engine_ring(spec: str, scale: float, cc: str = "off", in_order: bool = False,
                workers: int | None = None) -> dict[str, Any]:
    """The ring all-reduce of 4 MiB over every host at ``scale`` under congestion
    control ``cc`` on ``workers`` workers (None: the engine's choice), gated and priced."""

    began = time.perf_counter()
    curve = partial(model_curve, spec, "allreduce-ring", [RING_BYTES], 16)
    # The model's curve priced beside the build, as `emu run collective` does
    # (`experiments.collective.execute`): the case waits only for what is left of it.
    with (PricedAhead(curve) as ahead,
          Fabric(build_topo(spec), Scale(scale), marking="auto", in_order=in_order) as fab):
        built_s = time.perf_counter() - began
        ahead.wait()
        if ahead.result is None:  # not priced ahead (the model's cache off): priced here
            curve()
        curve_s = time.perf_counter() - began - built_s
        r = run_collective(fab, "allreduce-ring", RING_BYTES, cc, 16, workers=workers)
        report = fidelity_of(fab, r.measurement, r.workload, cc=cc != "off")
    whole_s = time.perf_counter() - began
    st = r.measurement.stats
    frames = st.data_packets_sent
    cpu_s = st.cpu_s_total
    sys_s = sum(w.sys_s for w in st.workers)
    return {
        "scale": scale, "cc": cc, "in_order": in_order, "asked_workers": workers,
        "workers": st.n_workers,
        "valid": report.valid,
        "reasons": [x for x in report.reasons if not x.startswith("suggested")],
        "time_s": r.time_s, "error": r.time_s / r.time_model_emulable_s - 1,
        "fps": frames / st.run_wall_s if st.run_wall_s else 0.0,
        "cpu_per_frame_us": cpu_s / frames * 1e6 if frames else float("nan"),
        # Every frame the engine put on the fabric: HPCC's ACK per data frame is a
        # frame's work too.
        "cpu_per_sent_frame_us": cpu_s / st.packets_sent * 1e6 if st.packets_sent
        else float("nan"),
        "sys_per_frame_us": sys_s / frames * 1e6 if frames else float("nan"),
        "wakeups_per_frame": sum(w.wakeups for w in st.workers) / frames
        if frames else float("nan"),
        "machine_busy": st.machine_busy, "wall_s": st.run_wall_s,
        # A send lag with the messages' starts as late is per-message work, not pacing.
        "send_lag_p99_ms": st.pacing_lag_p99_emu_s * 1e3,
        "start_lag_p99_ms": None if st.start_lag_p99_emu_s is None
        else st.start_lag_p99_emu_s * 1e3,
        # Where the case's wall time went (module doc, "whole case").
        "whole_s": whole_s, "build_s": built_s, "model_s": r.model_wall_s,
        "start_s": st.start_wall_s - st.setup_wall_s, "setup_s": st.setup_wall_s,
        "curve_s": curve_s,
    }


def parse_topo_scales(text: str, default_scales: str) -> tuple[str, list[float]]:
    """``SPEC[@S1,S2,...]`` -> (topology spec, S values largest first); ParameterError
    for a bad spec or S."""
    spec, _, scales = text.partition("@")
    return parse_topo(spec), sorted(parse_scales(scales or default_scales), reverse=True)


def bench_topology(console: Console, spec: str, scales: list[float], ccs: list[str],
                   steering: list[bool], blast_scale: float, blast_seconds: float,
                   workers: list[int | None] | None = None) -> None:
    """The kernel's capacity and the engine's ring on ``spec``, printed side by side
    (``workers``: each worker count to run the ring with, None the engine's choice)."""
    cap = {}
    for in_order in steering:
        cap[in_order] = kernel_capacity(spec, blast_scale, blast_seconds, in_order)
        console.print(f"kernel capacity ({spec}, S = {blast_scale:g}, every host "
                      f"blasting, receive steering {'on' if in_order else 'off'}): "
                      f"{cap[in_order]['delivered_fps']:,.0f} delivered frames/s "
                      f"({cap[in_order]['offered_fps']:,.0f} handed to the kernel)")
    rows = [engine_ring(spec, s, cc, in_order, w) for in_order in steering for cc in ccs
            for w in workers or [None] for s in scales]
    wake_us = wakeup_cpu_us()
    console.print(f"one wake-up of the engine's timer ({WAKE_SLEEP_S * 1e6:.0f} µs sleep) "
                  f"costs {wake_us:.1f} µs of CPU on this machine")
    table = Table(title=f"ring all-reduce 4 MiB, one rank per host, {spec}")
    for col in ("steering", "cc", "workers", "S", "gate", "time vs model", "frames/s", "÷ kernel",
                "CPU/frame", "of which kernel", "CPU/frame, ACKs counted", "wake-ups/frame",
                "≈ wake-up CPU/frame",
                "machine busy", "wall", "p99 lag: send / start", "why invalid"):
        table.add_column(col)
    for r in rows:
        kernel_fps = cap[r["in_order"]]["delivered_fps"]
        table.add_row("on" if r["in_order"] else "off", r["cc"], str(r["workers"]),
                      f"{r['scale']:g}",
                      "VALID" if r["valid"] else "INVALID",
                      f"{r['error']:+.1%}", f"{r['fps']:,.0f}",
                      f"{r['fps'] / kernel_fps:.3f}",
                      f"{r['cpu_per_frame_us']:.1f} µs", f"{r['sys_per_frame_us']:.1f} µs",
                      f"{r['cpu_per_sent_frame_us']:.1f} µs", f"{r['wakeups_per_frame']:.2f}",
                      f"{r['wakeups_per_frame'] * wake_us:.1f} µs",
                      f"{r['machine_busy']:.0%}" if r["machine_busy"] is not None else "-",
                      f"{r['wall_s']:.1f} s", _lags(r),
                      "; ".join(x.split(":")[0] for x in r["reasons"]))
    console.print(table)
    console.print(_time_parts(rows, spec, cap))
    for in_order in steering:
        for cc in ccs:
            for w in workers or [None]:
                _smallest_valid(console, rows, spec, cc, in_order, w,
                                cap[in_order]["delivered_fps"])


def _lags(r: dict[str, Any]) -> str:
    """The p99 send lag and the p99 message start behind its post time (emulated)."""
    start = "-" if r["start_lag_p99_ms"] is None else f"{r['start_lag_p99_ms']:.2f}"
    return f"{r['send_lag_p99_ms']:.2f} / {start} ms"


def _time_parts(rows: list[dict[str, Any]], spec: str, cap: dict[bool, dict[str, float]]
                ) -> Table:
    """Each ring case's wall time, fabric build to teardown, and its parts, beside what
    a frame costs."""
    table = Table(title=f"where a ring case's time goes, {spec} (wall s; module doc, "
                        "'whole process')")
    for col in ("steering", "cc", "workers", "S", "whole", "fabric build", "model",
                "engine start", "workers' set-up (templates)", "run", "rest", "model curve (wait)",
                "run ÷ whole", "CPU/frame", "wake-ups/frame", "÷ kernel"):
        table.add_column(col)
    for r in rows:
        parts = (r["build_s"] + r["model_s"] + r["start_s"] + r["setup_s"] + r["wall_s"]
                 + r["curve_s"])
        table.add_row("on" if r["in_order"] else "off", r["cc"], str(r["workers"]),
                      f"{r['scale']:g}", f"{r['whole_s']:.1f}", f"{r['build_s']:.1f}",
                      f"{r['model_s']:.1f}", f"{r['start_s']:.1f}", f"{r['setup_s']:.1f}",
                      f"{r['wall_s']:.1f}", f"{r['whole_s'] - parts:.1f}",
                      f"{r['curve_s']:.1f}", f"{r['wall_s'] / r['whole_s']:.0%}",
                      f"{r['cpu_per_frame_us']:.1f} µs", f"{r['wakeups_per_frame']:.2f}",
                      f"{r['fps'] / cap[r['in_order']]['delivered_fps']:.3f}")
    return table


def _smallest_valid(console: Console, rows: list[dict[str, Any]], spec: str, cc: str,
                    in_order: bool, workers: int | None, kernel_fps: float) -> None:
    what = (f"{spec}, cc={cc}, receive steering {'on' if in_order else 'off'}, "
            f"{workers or 'auto'} workers")
    good = [r for r in rows if r["valid"] and abs(r["error"]) <= WITHIN and r["cc"] == cc
            and r["in_order"] == in_order and r["asked_workers"] == workers]
    if good:
        best = min(good, key=lambda r: r["scale"])
        console.print(f"{what}: smallest valid S within {WITHIN:.0%} of the model: "
                      f"{best['scale']:g} ({best['fps']:,.0f} frames/s = "
                      f"{best['fps'] / kernel_fps:.3f} of the kernel's capacity, "
                      f"{best['cpu_per_frame_us']:.1f} µs of engine CPU per frame)")
    else:
        console.print(f"{what}: no S tried was valid and within {WITHIN:.0%} of the model")


def _parse_workers(text: str) -> list[int | None]:
    """'auto,2' -> [None, 2]; ParameterError for anything else."""
    return [None if w == "auto" else int(w) for w in map(parse_workers, text.split(","))]


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topo", action="append", default=None, metavar="SPEC[@S,...]",
                    help="a topology and, after '@', its S values (default: --scales); "
                         "repeat for several (default: fattree,4 and fattree,8@30000,15000)")
    ap.add_argument("--scales", default="20000,10000,5000,4000",
                    help="S values for the ring, tried largest first")
    ap.add_argument("--cc", default="off",
                    type=arg_type(lambda v: [parse_cc(x) for x in v.split(",")]),
                    help="congestion-control settings, ','-separated (default: off)")
    ap.add_argument("--blast-scale", type=arg_type(parse_scale), default=800.0)
    ap.add_argument("--blast-seconds", type=arg_type(parse_duration_s), default=5.0)
    ap.add_argument("--workers", default="auto", type=arg_type(_parse_workers),
                    help="worker counts to run the ring with, ','-separated: 'auto' (the "
                         "engine's choice, default) or a number, e.g. auto,2")
    ap.add_argument("--receive-steering", choices=("on", "off", "both"), default="off",
                    help="links pinned to one CPU per node (emu.rxorder): off (default), on, both")
    args = ap.parse_args()
    console = Console(width=200)
    steering = {"on": [True], "off": [False], "both": [True, False]}[args.receive_steering]
    plan = [parse_topo_scales(text, args.scales)
            for text in args.topo or ["fattree,4", "fattree,8@30000,15000"]]
    for spec, scales in plan:
        bench_topology(console, spec, scales, args.cc, steering, args.blast_scale,
                       args.blast_seconds, args.workers)


if __name__ == "__main__":
    main()

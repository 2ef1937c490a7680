"""Benchmark: the engine's fixed delays held at the sender against per-link delays, where
flows of different path lengths meet at a queue.

    python -m bench.pathdelay [--size 256KiB] [--runs 3] [--scale 20000]

The engine adds each QP's whole fixed path delay D (serialization at every hop,
switch latency, propagation) before its frames enter the fabric; a real fabric spends
it hop by hop. A flow's frames therefore reach a queue W later than in the real
fabric, W being the part of D *after* that queue. Flows that meet at a queue and share
everything after it (same W) are shifted together: the queue is the real one, W
later, and every frame's latency is exact. Flows with different W meet with their
offsets changed by the difference. Two CC-off scenarios, each flow at line rate:

* **incast** (fattree,4): h15, h13, h1 -> h16, 2, 4 and 6 hops, meeting at the last
  hop (e8 -> h16): W is the same for all: equivalent;
* **mid-path** (torus,4,2 with 400G links, dimension-order): h1 -> h5 (t0 t1 t2) and
  h3 -> h7 (t1 t2 t3) share t1 -> t2; h3's flow has one switch and link more after it
  (W differs by 600 + 83.4 + 150 = 833.4 ns): in the real fabric it reaches the queue
  833 ns *before* the other, with the delay at the sender both arrive together.

For each flow: completion time (post to last byte received), the first frame's
one-way latency and the median one, and the peak backlog of the meeting port, from

* ``per-link``: a frame-level FIFO reference of the real fabric (`frame_fifo`: every
  port serves in arrival order at its rate, store and forward; each hop adds its
  serialization, propagation and the next switch's latency);
* ``at-sender``: the same reference with the engine's placement (D at the sender,
  ports that release a frame as soon as their token bucket holds it, as HTB does);
* ``emulated``: the engine on the live fabric, with its fixed delays and without;
* ``alphabeta``: the model's per-message fluid prediction (completion only).
"""

from __future__ import annotations

import argparse
import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table

from core.frame import FRAME_BYTES, HEADER_BYTES, MTU_PAYLOAD_BYTES, RETH_BYTES, WIRE_OVERHEAD_BYTES
from core.messages import Message, Workload
from core.scaling import DEFAULT_SCALE, Scale
from core.units import format_size
from emu.fabric import Fabric
from engine.run import DEFAULT_NIC_OVERHEAD_S, EngineConfig
from experiments.measure import measure
from experiments.option_parsers import arg_type, clear_errors, parse_int, parse_scale, parse_size
from model.alphabeta import predict_workload
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo
from traffic.fixeddelay import hops, path_delay

#: (name, topology, flows (src, dst), the port where they meet (node, peer)).
SCENARIOS = (
    ("incast", "fattree,4", (("h15", "h16"), ("h13", "h16"), ("h1", "h16")), ("e8", "h16")),
    ("mid-path", "torus,4,2,link_rate=400G", (("h1", "h5"), ("h3", "h7")), ("t1_0", "t2_0")),
)


@dataclass
class FlowTimes:
    """One flow's frames (real s): NIC start, arrival of the tail at the receiver."""

    start_s: list[float]
    arrival_s: list[float]

    @property
    def latency_s(self) -> np.ndarray:
        return np.array(self.arrival_s) - np.array(self.start_s)


def frame_sizes(size_bytes: int) -> list[int]:
    """A message's frames on the wire: the first with the RETH, the last one short."""
    n = -(-size_bytes // MTU_PAYLOAD_BYTES)
    sizes = [FRAME_BYTES] * n
    sizes[-1] = size_bytes - (n - 1) * MTU_PAYLOAD_BYTES + HEADER_BYTES
    sizes[0] += RETH_BYTES
    return sizes


def frame_fifo(graph, paths: Sequence[Sequence[str]], size_bytes: int, *, at_sender: bool,
               overhead_s: float = DEFAULT_NIC_OVERHEAD_S,
               watch: tuple[str, str] | None = None) -> tuple[list[FlowTimes], float]:
    """Line-rate flows of ``size_bytes`` along ``paths``, all posted at 0, through FIFO
    ports; returns each flow's frame times and the peak backlog (bytes waiting, the one
    in service excluded) of port ``watch``. ``at_sender``: the engine's placement
    (module docstring) instead of per-link delays."""
    sizes = frame_sizes(size_bytes)
    # The engine's constant per flow: the path delay of its first frame.
    delay_s = [path_delay(graph, p, sizes[0]).total_s for p in paths]
    free: dict[tuple[str, str], float] = {}
    waits: list[tuple[float, float, int]] = []  # (arrival, service start, bytes) at watch
    times = [FlowTimes([0.0] * len(sizes), [0.0] * len(sizes)) for _ in paths]
    # Events (time, seq, flow, frame, hop): the frame reaches the egress port of hop.
    events = [(overhead_s, k * len(paths) + f, f, k, 0)
              for f in range(len(paths)) for k in range(len(sizes))]
    heapq.heapify(events)
    seq = len(events)
    while events:
        t, _, f, k, h = heapq.heappop(events)
        links = hops(paths[f])
        u, v = links[h]
        edge = graph.edges[u, v]
        ser_s = 8.0 * (sizes[k] + WIRE_OVERHEAD_BYTES) / float(edge["rate_bps"])  # wire time
        start = max(t, free.get((u, v), 0.0))
        free[(u, v)] = start + ser_s
        if (u, v) == watch:
            waits.append((t, start, sizes[k]))
        if h == 0:
            times[f].start_s[k] = start
        if at_sender:
            # The whole path delay once, from the NIC slot to the fabric; a port then
            # releases a frame as soon as its bucket allows.
            out = start + delay_s[f] if h == 0 else start
        else:
            out = start + ser_s + float(edge.get("delay_s", 0.0)) \
                + float(graph.nodes[v].get("switch_latency_s", 0.0))
        if h + 1 == len(links):
            times[f].arrival_s[k] = out
        else:
            seq += 1
            heapq.heappush(events, (out, seq, f, k, h + 1))
    return times, _peak_backlog(waits)


def _peak_backlog(waits: list[tuple[float, float, int]]) -> float:
    """The most bytes waiting at once, from each frame's (arrival, service start)."""
    steps = sorted([(a, b) for a, _, b in waits] + [(s, -b) for _, s, b in waits],
                   key=lambda x: (x[0], x[1]))  # a start before an arrival at one instant
    level = peak = 0
    for _, delta in steps:
        level += delta
        peak = max(peak, level)
    return float(peak)


def run_emulated(spec: str, flows: Sequence[tuple[str, str]], meet: tuple[str, str],
                 size_bytes: int, scale: float, fixed: bool) -> tuple[list[dict], float]:
    """Per flow (completion, first and median one-way latency, real s) and the peak
    sampled backlog of the meeting port."""
    with Fabric(build_topo(spec), Scale(scale), marking="off") as fab:
        msgs = [Message(i, s, d, size_bytes) for i, (s, d) in enumerate(flows)]
        wl = Workload("pathdelay", msgs, sorted({h for f in flows for h in f}), size_bytes)
        m = measure(fab, wl, EngineConfig(cc=None, fixed_delays=fixed, timeout_s=120),
                    watch=[fab.port(*meet)])
    if not m.stats.completed:
        raise RuntimeError(f"{spec}: the run did not complete: {m.stats.error}")
    rows = []
    for i in range(len(flows)):
        lat = m.latency[m.latency.msg_id == i].sort_values("t_s").one_way_s
        row = m.messages[m.messages.msg_id == i].iloc[0]
        rows.append({"fct_s": float(row.end_s - row.start_s), "first_s": float(lat.iloc[0]),
                     "median_s": float(lat.median())})
    return rows, float(m.queue.backlog_bytes.max()) if not m.queue.empty else float("nan")


@clear_errors
def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=arg_type(parse_size), default=256 << 10, help="bytes per flow")
    ap.add_argument("--runs", type=arg_type(parse_int(1)), default=3,
                    help="emulated runs per configuration")
    ap.add_argument("--scale", type=arg_type(parse_scale), default=DEFAULT_SCALE, help="S")
    args = ap.parse_args(argv)
    console = Console(width=max(Console().width, 150))  # nine columns of numbers
    for name, spec, flows, meet in SCENARIOS:
        topo = build_topo(spec)
        graph = topo_graph(topo)
        routes = compute_routes(topo)
        paths = [routes.paths(s, d)[0] for s, d in flows]
        ref = {mode: frame_fifo(graph, paths, args.size, at_sender=mode == "at-sender",
                                watch=meet) for mode in ("per-link", "at-sender")}
        plain = Workload("pathdelay", [Message(i, s, d, args.size) for i, (s, d) in enumerate(flows)],
                         sorted({h for f in flows for h in f}), args.size)
        alphabeta = predict_workload(plain, graph, routes.paths)
        emu = {}
        for fixed in (True, False):
            runs = [run_emulated(spec, flows, meet, args.size, args.scale, fixed)
                    for _ in range(args.runs)]
            emu[fixed] = ([{k: float(np.median([r[0][i][k] for r in runs]))
                            for k in ("fct_s", "first_s", "median_s")} for i in range(len(flows))],
                          float(np.median([r[1] for r in runs])))
        table = Table(title=f"{name}: {spec}, {format_size(args.size)} per flow, CC off, "
                            f"S = {args.scale:g}, median of {args.runs} runs (times in ns)")
        for col in ("flow", "hops", "measure", "per-link", "at-sender", "emulated",
                    "emu - per-link", "emulated w/o delays", "alphabeta"):
            table.add_column(col, justify="left" if col in ("flow", "measure") else "right")
        for i, (s, d) in enumerate(flows):
            link_t, send_t = ref["per-link"][0][i], ref["at-sender"][0][i]
            values = {
                "completion": (max(link_t.arrival_s), max(send_t.arrival_s),
                               emu[True][0][i]["fct_s"], emu[False][0][i]["fct_s"],
                               alphabeta.finish_s[i]),
                "first frame": (link_t.latency_s[0], send_t.latency_s[0],
                                emu[True][0][i]["first_s"], emu[False][0][i]["first_s"], None),
                "median latency": (float(np.median(link_t.latency_s)),
                                   float(np.median(send_t.latency_s)),
                                   emu[True][0][i]["median_s"], emu[False][0][i]["median_s"],
                                   None)}
            for what, (lk, sd, on, off, ab) in values.items():
                table.add_row(f"{s}->{d}", str(len(paths[i]) - 1), what, f"{lk * 1e9:.1f}",
                              f"{sd * 1e9:.1f}", f"{on * 1e9:.1f}", f"{(on - lk) * 1e9:+.1f}",
                              f"{off * 1e9:.1f}", "" if ab is None else f"{ab * 1e9:.1f}")
        table.add_row(f"{meet[0]}->{meet[1]}", "", "peak backlog (KB)",
                      f"{ref['per-link'][1] / 1e3:.1f}", f"{ref['at-sender'][1] / 1e3:.1f}",
                      f"{emu[True][1] / 1e3:.1f}",
                      f"{(emu[True][1] - ref['per-link'][1]) / 1e3:+.1f}",
                      f"{emu[False][1] / 1e3:.1f}", "")
        console.print(table)


if __name__ == "__main__":
    main()

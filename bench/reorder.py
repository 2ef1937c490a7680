"""Benchmark: does the fabric deliver each flow in order? Receive steering off and on.

    python -m bench.reorder [--topo fattree,4] [--load-scale 1000] [--duration 5]
                            [--flows 4] [--runs 2]

Every host sends ``--flows`` UDP flows (distinct source ports, so distinct ECMP paths)
of sequence-numbered 4 KB datagrams to the host half the fabric away, as fast as one
process per host can; every receiver counts the datagrams that arrive after a later
one of the same flow (``bench.udpflows``). The same load runs on a fabric built with ``in_order=False``
(veth receive work on whichever CPU sent the frame) and with ``in_order=True``
(``emu.rxorder``: each veth's receive work on one CPU), side by side, with the
machine's CPU use. A real switch never reorders a flow; RoCE's go-back-N answers every
reordering with a NAK and a retransmission.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from rich.console import Console
from rich.table import Table

from core.machinecpu import cpu_ticks, machine_busy
from core.scaling import Scale
from emu.fabric import Fabric
from experiments.option_parsers import (
    arg_type,
    clear_errors,
    parse_duration_s,
    parse_int,
    parse_scale,
    parse_topo,
)
from topologies.spec import build_topo


def measure(topo: str, scale: float, in_order: bool, flows: int, duration_s: float) -> dict:
    """One run of the load on a fresh fabric; counts and the machine's busy fraction."""
    with Fabric(build_topo(topo), Scale(scale), marking="off", in_order=in_order) as fab:
        hosts = fab.hosts
        half = len(hosts) // 2
        pairs = [(h, hosts[(i + half) % len(hosts)]) for i, h in enumerate(hosts)]
        flows_py = [sys.executable, "-m", "bench.udpflows"]
        rx = [fab.exec(d, [*flows_py, "receive", "2"], stdout=subprocess.PIPE, text=True)
              for _, d in pairs]
        for p in rx:  # every receiver bound before the first datagram
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a receiver did not start")
        cpu0 = cpu_ticks()
        tx = [fab.exec(s, [*flows_py, "send", fab.plan.host_ip[d], str(flows), str(duration_s)],
                       stdout=subprocess.PIPE, text=True) for s, d in pairs]
        sent = sum(json.loads(p.communicate()[0])["sent"] for p in tx)
        cpu1 = cpu_ticks()
        counts = [json.loads(p.communicate()[0]) for p in rx]
        return {"in_order": in_order, "steering": fab.receive_steering, "sent": sent,
                "received": sum(c["received"] for c in counts),
                "out_of_order": sum(c["out_of_order"] for c in counts), "machine_busy": machine_busy(cpu0, cpu1)}


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topo", default="fattree,4", type=arg_type(parse_topo))
    ap.add_argument("--load-scale", type=arg_type(parse_scale), default=1000.0,
                    help="small: the links must outrun the senders, to load the kernel")
    ap.add_argument("--duration", type=arg_type(parse_duration_s), default=5.0)
    ap.add_argument("--flows", type=arg_type(parse_int(1, 64)), default=4)
    ap.add_argument("--runs", type=arg_type(parse_int(1)), default=2)
    args = ap.parse_args()
    table = Table(title=f"{args.topo}, S = {args.load_scale:g}, {args.flows} flows per host, "
                        f"{args.duration:g} s per run")
    for col in ("receive steering", "run", "sent", "received", "out of order",
                "per 100k", "machine busy"):
        table.add_column(col, justify="right")
    for run in range(args.runs):
        for in_order in (False, True):
            m = measure(args.topo, args.load_scale, in_order, args.flows, args.duration)
            table.add_row("one CPU per node" if in_order else "off", str(run + 1),
                          f"{m['sent']:,}", f"{m['received']:,}", str(m["out_of_order"]),
                          f"{1e5 * m['out_of_order'] / max(m['received'], 1):.2f}",
                          f"{m['machine_busy']:.0%}")
    Console().print(table)


if __name__ == "__main__":
    main()

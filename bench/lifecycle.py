"""Benchmark: fabric life cycle (build + start + stop) against stock Mininet.

Both build the same fat-tree in the same run on the same machine: fabricemu with
its fork-free namespaces, shaped ports and ECN markers; stock Mininet with
``TCLink`` (HTB at the same emulated rates) and Linux bridges (STP on, since a
fat-tree has loops). Prints both times and the ratio.

    python -m bench.lifecycle [--k 4,8] [--scale 4000] [--skip-mininet]
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from core.scaling import DEFAULT_SCALE, Scale
from emu.ecn.backend import CHOICES as MARKING_CHOICES
from emu.fabric import Fabric
from experiments.options import arg_type, clear_errors, parse_csv, parse_int, parse_scale
from topologies.fattree import FatTree


def time_fabricemu(k: int, scale: Scale, marking: str) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    fab = Fabric(FatTree(k), scale, marking=marking)
    fab.start()
    t1 = time.perf_counter()
    ports = len(fab.ports())
    fab.stop()
    return t1 - t0, time.perf_counter() - t1, ports


def time_mininet(k: int, scale: Scale) -> tuple[float, float]:
    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.nodelib import LinuxBridge

    setLogLevel("warning")

    def shaped_link(node1, node2, rate_bps: float, **opts):
        # Same emulated rate as fabricemu; TCLink takes Mbit/s and refuses > 1000.
        opts = {k: v for k, v in opts.items() if k not in ("delay_s", "tier", "buffer_bytes")}
        return TCLink(node1, node2, bw=scale.rate_emu_bps(rate_bps) / 1e6, **opts)

    t0 = time.perf_counter()
    net = Mininet(topo=FatTree(k), switch=LinuxBridge, link=shaped_link, controller=None)
    net.start()
    t1 = time.perf_counter()
    net.stop()
    return t1 - t0, time.perf_counter() - t1


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", default="4,8", type=arg_type(parse_csv(parse_int(2, 16))),
                    help="fat-tree sizes, comma separated")
    ap.add_argument("--scale", type=arg_type(parse_scale), default=DEFAULT_SCALE)
    ap.add_argument("--marking", default="auto", choices=MARKING_CHOICES)
    ap.add_argument("--skip-mininet", action="store_true")
    args = ap.parse_args()
    scale = Scale(args.scale)
    console = Console()
    table = Table(title=f"fat-tree life cycle, S = {args.scale:g} (seconds)")
    for col in ("k", "hosts", "switches", "links", "fabricemu build", "fabricemu stop",
                "fabricemu total", "Mininet build+start", "Mininet stop", "Mininet total",
                "speed-up"):
        table.add_column(col, justify="right")
    for k in args.k:
        topo = FatTree(k)
        console.print(f"k={k}: fabricemu ...")
        fb, fs, _ = time_fabricemu(k, scale, args.marking)
        row = [str(k), str(len(topo.host_nodes())), str(len(topo.switch_nodes())),
               str(len(list(topo.links()))), f"{fb:.2f}", f"{fs:.2f}", f"{fb + fs:.2f}"]
        if args.skip_mininet:
            row += ["-", "-", "-", "-"]
        else:
            console.print(f"k={k}: stock Mininet (TCLink + LinuxBridge) ...")
            mb, ms = time_mininet(k, scale)
            row += [f"{mb:.1f}", f"{ms:.1f}", f"{mb + ms:.1f}", f"{(mb + ms) / (fb + fs):.1f}x"]
        table.add_row(*row)
    console.print(table)


if __name__ == "__main__":
    main()

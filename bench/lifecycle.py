"""Benchmark: fabric life cycle (build, pingall, stop) and its memory, beside stock Mininet.

For each fat-tree size (and any ``--topo``): fabricemu's build time (namespaces,
shaped ports, ECN markers), its all-pairs pingall, its stop, how long the kernel
then takes to free the namespaces, the peak RSS of this process over the cycle
(VmHWM, reset first), the kernel memory the fabric holds (Slab + Percpu of
/proc/meminfo, after the build less before it: the whole machine's, so quiet it)
and what is left behind (namespaces of the fabric, veths in the root namespace:
must be 0). Stock Mininet builds the same fat-tree up to ``--mininet-up-to`` with
``TCLink`` (HTB at the same emulated rates) and Linux bridges (STP on, since a
fat-tree has loops); beyond it, it takes minutes. Prints a table.

    python -m bench.lifecycle [--k 4,8,12] [--topo leafspine,32,32,64] [--scale 10000]
                              [--skip-mininet] [--no-pingall]
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from core.scaling import DEFAULT_SCALE, Scale
from emu.ecn.backend import CHOICES as MARKING_CHOICES
from emu.fabric import Fabric
from emu.netns import wait_for_quiet_kernel
from emu.reachability import ping_all
from experiments.option_parsers import arg_type, clear_errors, parse_csv, parse_int, parse_scale
from topologies.base import FabricTopo
from topologies.fattree import FatTree
from topologies.spec import build_topo, parse_spec

_KERNEL_MEMINFO = ("Slab", "Percpu")


@dataclass(frozen=True)
class Cycle:
    """One fabricemu life cycle of one topology."""

    build_s: float
    pingall_s: float | None      # None: not run
    unreachable_pairs: int
    pairs: int
    stop_s: float
    kernel_free_s: float         # after stop(), until the kernel stops tearing down
    peak_rss_bytes: int          # this process, over the cycle
    kernel_bytes: int            # Slab + Percpu held by the built fabric
    ports: int
    left_behind: int             # namespaces of the fabric + root veths added


def _meminfo_bytes(keys: tuple[str, ...]) -> int:
    total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            if name in keys:
                total += int(value.split()[0]) * 1024
    return total


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # safefile: ok - procfs control file
        f.write("5")  # resets VmHWM to the current RSS


def _root_veths() -> int:
    """veths in this (the machine's) namespace."""
    count = 0
    for ifname in os.listdir("/sys/class/net"):
        try:
            with open(f"/sys/class/net/{ifname}/uevent") as f:
                count += "DEVTYPE=veth" in f.read()
        except OSError:  # gone meanwhile
            continue
    return count


def cycle_fabricemu(topo: FabricTopo, scale: Scale, marking: str, pingall: bool) -> Cycle:
    wait_for_quiet_kernel()  # an earlier fabric's teardown is not this one's
    veths_before = _root_veths()
    kernel_before = _meminfo_bytes(_KERNEL_MEMINFO)
    _reset_peak_rss()
    t0 = time.perf_counter()
    fab = Fabric(topo, scale, marking=marking)
    fab.start()
    try:
        build_s = time.perf_counter() - t0
        kernel_bytes = _meminfo_bytes(_KERNEL_MEMINFO) - kernel_before
        ports = len(fab.ports())
        pingall_s, unreachable, pairs = None, 0, 0
        if pingall:
            t1 = time.perf_counter()
            result = ping_all([(h, fab.netns_path(h), fab.plan.host_ip[h]) for h in fab.hosts])
            pingall_s = time.perf_counter() - t1
            unreachable, pairs = sum(not ok for ok in result.values()), len(result)
    finally:
        t2 = time.perf_counter()
        fab.stop()
        stop_s = time.perf_counter() - t2
    kernel_free_s = wait_for_quiet_kernel(timeout_s=300.0)
    left = sum(os.path.exists(fab.netns_path(n)) for n in topo.nodes()) + (
        _root_veths() - veths_before)
    return Cycle(build_s, pingall_s, unreachable, pairs, stop_s, kernel_free_s,
                 _peak_rss_bytes(), kernel_bytes, ports, max(0, left))


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


def _parse_topos(text: str) -> list[str]:
    specs = [s.strip() for s in text.split(";") if s.strip()]
    for spec in specs:
        parse_spec(spec)  # ParameterError on a bad one, before anything is built
    return specs


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.0f}"


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", default="4,8,12", type=arg_type(parse_csv(parse_int(2, 16))),
                    help="fat-tree sizes, comma separated")
    ap.add_argument("--topo", default=[], type=arg_type(_parse_topos),
                    help="more topologies, ';' separated (e.g. leafspine,32,32,64)")
    ap.add_argument("--scale", type=arg_type(parse_scale), default=DEFAULT_SCALE)
    ap.add_argument("--marking", default="auto", choices=MARKING_CHOICES)
    ap.add_argument("--skip-mininet", action="store_true")
    ap.add_argument("--mininet-up-to", type=arg_type(parse_int(2, 16)), default=8,
                    help="largest k that stock Mininet builds too")
    ap.add_argument("--no-pingall", action="store_true")
    args = ap.parse_args()
    scale = Scale(args.scale)
    console = Console()
    table = Table(title=f"fabric life cycle, S = {args.scale:g} (seconds; MiB)")
    for col in ("topology", "hosts", "switches", "links", "build", "pingall (pairs)", "stop",
                "kernel frees", "peak RSS", "kernel mem", "left", "Mininet build+start",
                "Mininet stop", "speed-up"):
        table.add_column(col, justify="right")
    sizes: list[tuple[str, int | None]] = [(f"fattree,{k}", k) for k in args.k]
    for spec, k in sizes + [(spec, None) for spec in args.topo]:
        topo = build_topo(spec)
        console.print(f"{spec}: fabricemu ...")
        c = cycle_fabricemu(topo, scale, args.marking, not args.no_pingall)
        pingall = "-" if c.pingall_s is None else (
            f"{c.pingall_s:.1f} ({c.pairs:,}"
            + (f", [red]{c.unreachable_pairs:,} unreachable[/])" if c.unreachable_pairs else ")"))
        row = [spec, str(len(topo.host_nodes())), str(len(topo.switch_nodes())),
               str(len(list(topo.links()))), f"{c.build_s:.1f}", pingall, f"{c.stop_s:.1f}",
               f"{c.kernel_free_s:.1f}", _mib(c.peak_rss_bytes), _mib(c.kernel_bytes),
               str(c.left_behind)]
        if args.skip_mininet or k is None or k > args.mininet_up_to:
            row += ["-", "-", "-"]
        else:
            console.print(f"{spec}: stock Mininet (TCLink + LinuxBridge) ...")
            mb, ms = time_mininet(k, scale)
            row += [f"{mb:.1f}", f"{ms:.1f}", f"{(mb + ms) / (c.build_s + c.stop_s):.1f}x"]
        table.add_row(*row)
    console.print(table)


if __name__ == "__main__":
    main()

"""Benchmark: shaping accuracy per tier (achieved vs configured R/S) and tier ratios.

    python -m bench.shaping_accuracy [--topo fattree,4] [--scale 4000] [--duration 3]

One bulk raw-frame flow per tier, measured at the far end of the port (see
emu/linktest.py); prints achieved and configured rates, the error against the frame
bytes a shaper charging Ethernet's per-frame overhead passes, and the ratios.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from core.scaling import DEFAULT_SCALE, Scale
from core.units import format_rate
from emu.fabric import Fabric
from emu.linktest import expected_rate_bps, measure_port_rate
from experiments.option_parsers import (
    arg_type,
    clear_errors,
    parse_duration_s,
    parse_scale,
    parse_topo,
)
from topologies.spec import build_topo


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topo", default="fattree,4", type=arg_type(parse_topo))
    ap.add_argument("--scale", type=arg_type(parse_scale), default=DEFAULT_SCALE)
    ap.add_argument("--duration", type=arg_type(parse_duration_s), default=3.0)
    args = ap.parse_args()
    table = Table(title=f"{args.topo}, S = {args.scale:g}")
    for col in ("tier", "port", "real rate", "configured (emu)", "achieved (emu)", "error",
                "ratio to slowest tier"):
        table.add_column(col, justify="right")
    with Fabric(build_topo(args.topo), Scale(args.scale), marking="off") as fab:
        first_port_of_tier = {}
        for port in sorted(fab.ports(), key=lambda p: p.rate_bps):
            first_port_of_tier.setdefault(port.tier, port)
        achieved = {tier: measure_port_rate(fab, p.node, p.peer_node, args.duration)
                    for tier, p in first_port_of_tier.items()}
    slowest = next(iter(first_port_of_tier))
    for tier, port in first_port_of_tier.items():
        table.add_row(tier, port.name, format_rate(port.rate_bps) + "b/s",
                      format_rate(port.rate_emu_bps) + "b/s", format_rate(achieved[tier]) + "b/s",
                      f"{100 * (achieved[tier] / expected_rate_bps(port.rate_emu_bps) - 1):+.2f}%",
                      f"{achieved[tier] / achieved[slowest]:.3f} "
                      f"(ideal {port.rate_bps / first_port_of_tier[slowest].rate_bps:g})")
    Console().print(table)


if __name__ == "__main__":
    main()

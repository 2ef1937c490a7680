"""Benchmark: minimal (ECMP), Valiant and UGAL routing on a dragonfly, beside their model.

    python -m bench.dragonfly_routing [--topo dragonfly,p=1,a=4,h=1] [--modes ecmp,valiant,ugal]
                                      [--pattern adversarial|permutation] [--size 4MiB]
                                      [--seed 1] [--scale 10000] [--transport sr] [--cc off]
                                      [--json FILE]

Every host sends one message of ``--size``: to the host at its position in the next
group (``adversarial``: a group's hosts share its global links to the next group
under minimal routing), or to a random other host (``permutation``, ``--seed``). Per
mode, one fresh fabric routed that way runs the messages with the engine; the
aggregate throughput is the payload over the completion time (first start to last
end), and the model's (``model.ugal``, its slowest flow's max-min rate times
the flows, in payload bit/s) sits beside it, with the engine's fidelity gate, the
retransmissions and the out-of-sequence frames. ``ecmp`` is minimal routing on a
dragonfly (its routes are the minimal paths).
"""

from __future__ import annotations

import argparse
import random

from rich.console import Console
from rich.table import Table

from core.messages import Message, Workload
from core.safefile import write_json
from core.scaling import DEFAULT_SCALE, Scale
from emu.fabric import Fabric
from experiments.measure import engine_config, gate, measure
from experiments.option_parsers import (
    arg_type,
    clear_errors,
    parse_cc,
    parse_int,
    parse_scale,
    parse_size,
    parse_topo,
)
from model.alphabeta import roce_wire_factor
from model.ugal import adversarial_pairs, minimal_bound, ugal_bound, valiant_bound
from topologies.base import FabricTopo
from topologies.spec import build_topo
from traffic.transport import TRANSPORTS

MODELS = {"ecmp": minimal_bound, "valiant": valiant_bound, "ugal": ugal_bound}


def pairs_of(topo: FabricTopo, pattern: str, seed: int) -> list[tuple[str, str]]:
    """The flows of ``pattern``: adversarial, or a random derangement of the hosts."""
    if pattern == "adversarial":
        return adversarial_pairs(topo)
    hosts = topo.host_nodes()
    rng = random.Random(seed)
    while True:
        dsts = rng.sample(hosts, len(hosts))
        if all(s != d for s, d in zip(hosts, dsts, strict=True)):
            return list(zip(hosts, dsts, strict=True))


def run_mode(spec: str, mode: str, pairs: list[tuple[str, str]], size: int, scale: float,
             transport: str, cc: str) -> dict:
    """One fabric routed by ``mode``, the messages run once: measured and modelled."""
    topo = build_topo(spec)
    bound = MODELS[mode](topo, pairs)
    workload = Workload("pairs", [Message(i, s, d, size) for i, (s, d) in enumerate(pairs)],
                        sorted({h for p in pairs for h in p}), size)
    marking = "bpf" if mode == "ugal" else "auto"
    with Fabric(topo, Scale(scale), marking=marking, routing=mode) as fab:
        m = measure(fab, workload, engine_config(cc, transport=transport))
        report = gate(fab, m, workload, cc=cc != "off")
        routers = {s: r.counters() for s, r in fab.routers.items()}
    msgs = m.messages
    wire = roce_wire_factor()
    return {
        "mode": mode, "flows": len(pairs), "size_bytes": size,
        "completion_s": m.completion_s,
        "aggregate_gbps": 8e-9 * size * len(pairs) / m.completion_s,
        "slowest_flow_gbps": float((8e-9 * size / msgs.fct_s).min()),
        "model_aggregate_gbps": 1e-9 * bound.slowest_flow_bps * len(pairs) / wire,
        "model_bottleneck": bound.bottleneck,
        "model_minimal_fraction": bound.minimal_fraction,
        "valiant_frames": sum(c.valiant for c in routers.values()),
        "minimal_decisions": sum(c.minimal for c in routers.values()),
        "retransmitted": int(msgs.retransmitted.sum()),
        "out_of_sequence": int(msgs.out_of_sequence.sum()),
        "gate": "VALID" if report.valid else "refused",
        "gate_reasons": [r.split(":")[0] for r in report.reasons],
    }


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topo", default="dragonfly,p=1,a=4,h=1", type=arg_type(parse_topo))
    ap.add_argument("--modes", default="ecmp,valiant,ugal")
    ap.add_argument("--pattern", choices=("adversarial", "permutation"), default="adversarial")
    ap.add_argument("--size", default=4 << 20, type=arg_type(parse_size))
    ap.add_argument("--seed", default=1, type=arg_type(parse_int(0, 2**32 - 1)))
    ap.add_argument("--scale", default=DEFAULT_SCALE, type=arg_type(parse_scale))
    ap.add_argument("--transport", choices=TRANSPORTS, default="sr")
    ap.add_argument("--cc", default="off", type=arg_type(parse_cc))
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",")]
    bad = [m for m in modes if m not in MODELS]
    if bad:
        ap.error(f"--modes: {bad[0]!r} is not one of {', '.join(MODELS)}")
    pairs = pairs_of(build_topo(args.topo), args.pattern, args.seed)
    rows = [run_mode(args.topo, mode, pairs, args.size, args.scale, args.transport, args.cc)
            for mode in modes]
    table = Table(title=f"{args.topo}, {args.pattern}, {len(pairs)} x {args.size} B, "
                        f"S = {args.scale:g}, transport {args.transport}, cc {args.cc}")
    for col in ("mode", "aggregate Gb/s", "model Gb/s", "ratio", "slowest flow Gb/s",
                "valiant frames", "retransmitted", "out of seq", "gate"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["mode"], f"{r['aggregate_gbps']:.0f}", f"{r['model_aggregate_gbps']:.0f}",
                      f"{r['aggregate_gbps'] / r['model_aggregate_gbps']:.2f}",
                      f"{r['slowest_flow_gbps']:.0f}", f"{r['valiant_frames']:,}",
                      f"{r['retransmitted']:,}", f"{r['out_of_sequence']:,}", r["gate"])
    console = Console()
    console.print(table)
    for r in rows:
        if r["gate_reasons"]:
            console.print(f"{r['mode']}: refused by {', '.join(r['gate_reasons'])}")
    if args.json:
        write_json(args.json, rows)


if __name__ == "__main__":
    main()

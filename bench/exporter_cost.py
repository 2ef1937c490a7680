"""Benchmark: what the live Prometheus exporter costs the engine, with it beside without.

    python -m bench.exporter_cost [--topo leafspine,3,1,3,host_rate=100G] [--scale 10000]
                             [--rounds 5] [--interval 0.2]

One fabric; the ring all-reduce of 4 MiB over every host, ``--rounds`` times each way,
alternating (off, on, on, off, ...: neither way always runs first). "On": the
exporter serves (``experiments.exporter``) and a thread here scrapes it every
``--interval`` wall seconds (Prometheus' scrape, 0.2 s: five times as often as the
integration test's 1 s would be; 15 s is Prometheus' default). Printed per way, the
median over rounds:

* engine CPU per data frame: the workers' CPU (user and kernel) / data frames sent;
* this process's CPU per data frame: the engine's parent (it waits for the workers)
  and, when on, the exporter answering scrapes (port counters read over netlink,
  marker maps, PFC ledger, the engine's shared arrays);
* both together, and the scrapes answered.

Run it alone on the machine (under the heavy-work lock): the runs share its CPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import threading
import urllib.request
from typing import Any

from rich.console import Console
from rich.table import Table

from core.scaling import DEFAULT_SCALE, Scale
from emu.fabric import Fabric
from experiments.collective import run_collective
from experiments.exporter import free_port, serving
from experiments.option_parsers import (
    arg_type,
    clear_errors,
    parse_float,
    parse_int,
    parse_scale,
    parse_topo,
)
from topologies.spec import build_topo

RING_BYTES = 4 << 20


def _own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Scraper:
    """GET /metrics every ``interval_s`` until stopped; counts the answers."""

    def __init__(self, port: int, interval_s: float) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.interval_s = interval_s
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with urllib.request.urlopen(self.url, timeout=5) as r:
                r.read()
            self.scrapes += 1

    def __enter__(self) -> _Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_run(fab: Fabric, on: bool, interval_s: float) -> dict[str, Any]:
    """The ring once, with the exporter served and scraped if ``on``."""
    port = free_port()
    with contextlib.ExitStack() as stack:
        if on:
            stack.enter_context(serving(port, "bench", fab.scale))
            scraper = stack.enter_context(_Scraper(port, interval_s))
        cpu0 = _own_cpu_s()
        r = run_collective(fab, "allreduce-ring", RING_BYTES, "off", 1)
        own_s = _own_cpu_s() - cpu0
    st = r.measurement.stats
    frames = st.data_packets_sent
    return {"engine_us": st.cpu_s_total / frames * 1e6, "own_us": own_s / frames * 1e6,
            "frames": frames, "scrapes": scraper.scrapes if on else 0,
            "wall_s": st.run_wall_s}


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topo", type=arg_type(parse_topo), default="leafspine,3,1,3,host_rate=100G")
    ap.add_argument("--scale", type=arg_type(parse_scale), default=DEFAULT_SCALE)
    ap.add_argument("--rounds", type=arg_type(parse_int(1, 50)), default=5)
    ap.add_argument("--interval", type=arg_type(parse_float(0.05, 60.0)), default=0.2,
                    help="wall seconds between scrapes (default 0.2)")
    args = ap.parse_args()
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    with Fabric(build_topo(args.topo), Scale(args.scale), marking="auto") as fab:
        for k in range(args.rounds):
            for on in ((False, True) if k % 2 == 0 else (True, False)):
                runs[on].append(one_run(fab, on, args.interval))
    table = Table(title=f"exporter cost: ring all-reduce of {RING_BYTES >> 20} MiB on "
                        f"{args.topo}, S = {args.scale:g}, scrape every {args.interval:g} s, "
                        f"median of {args.rounds} rounds each")
    for col in ("exporter", "engine CPU/frame", "this process CPU/frame", "total CPU/frame",
                "frames", "scrapes", "wall s"):
        table.add_column(col, justify="right")
    medians = {}
    for on, rows in runs.items():
        m = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        m["total_us"] = statistics.median(r["engine_us"] + r["own_us"] for r in rows)
        medians[on] = m
        table.add_row("on" if on else "off", f"{m['engine_us']:.2f} µs", f"{m['own_us']:.2f} µs",
                      f"{m['total_us']:.2f} µs", f"{m['frames']:.0f}", f"{m['scrapes']:.0f}",
                      f"{m['wall_s']:.2f}")
    console = Console(width=160)
    console.print(table)
    for key, what in (("engine_us", "engine CPU per frame"), ("total_us", "total CPU per frame")):
        console.print(f"{what}: {medians[True][key] / medians[False][key] - 1:+.1%} with the "
                      "exporter")


if __name__ == "__main__":
    main()

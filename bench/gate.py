"""Benchmark: does the fidelity gate ever pass a wrong run? The demo beside CPU hogs.

    python -m bench.gate [--scales 10000,5000] [--hogs 0,1,2] [--runs 2]
                         [--stalls 0,5/100]

Runs the default demo (``emu run demo``, each in its own process) at each S, with 0, 1
or more CPU hogs (processes spinning on a core, at normal priority) started beside
it, and optionally with stalls like a busy hypervisor's (on every CPU a real-time
process above the engine's workers spins BURST ms at random about every PERIOD ms),
and puts every run's verdict beside its errors against the model of the real
fabric. A run is **wrong** when a prediction misses its tolerance (the summary row's
``tolerance_rel``, from `model.claims`: the project's accuracy targets; estimates,
bounds and ideals claim none) and, where the model is a mean over randomised realisations (the
DCQCN incast: switches mark at random), also lies outside all of them by more than
`SPREAD_MARGIN`; a wrong run must be INVALID. The last line counts VALID runs that
were wrong: anything but 0 is a gate bug. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from core.scaling import DEFAULT_SCALE
from experiments.option_parsers import arg_type, clear_errors, parse_csv, parse_int, parse_scales

#: A metric of a randomised model (switches mark at random) is wrong outside every one
#: of the model's realisations by more than this: the tolerance of a deterministic one.
SPREAD_MARGIN = 0.05


def is_wrong(m: dict, spread: dict | None) -> bool:
    """Whether prediction row ``m`` misses its tolerance. Where the model is a mean over
    randomised realisations (``spread``, summary.json ``model_spreads``), a single
    faithful run may fall anywhere among them: it is wrong only beyond their range
    widened by `SPREAD_MARGIN`."""
    if abs(m["error_rel"]) <= m["tolerance_rel"]:
        return False
    if spread is None:
        return True
    lo, hi = spread["range"]
    return not lo * (1 - SPREAD_MARGIN) <= m["measured"] <= hi * (1 + SPREAD_MARGIN)


def _spin() -> None:
    while True:
        pass


#: Real-time priority of a stall process: above the engine's workers (SCHED_FIFO 1).
STALL_PRIORITY = 50


def _stall(cpu: int, burst_s: float, period_s: float) -> None:
    """Take CPU ``cpu`` from everything for ``burst_s`` at random, every 0.5-1.5
    ``period_s``: the pattern of a hypervisor running another guest on it."""
    os.sched_setaffinity(0, {cpu})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(STALL_PRIORITY))
    rng = random.Random(cpu)
    while True:
        time.sleep(rng.uniform(0.5, 1.5) * period_s)
        end = time.monotonic() + burst_s
        while time.monotonic() < end:
            pass


def parse_stall(text: str) -> tuple[float, float] | None:
    """``BURST/PERIOD`` in ms -> seconds; ``0`` -> no stalls."""
    if text.strip() == "0":
        return None
    try:
        burst_ms, period_ms = (float(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"stall {text!r}: give BURST/PERIOD in ms, "
                                         "e.g. 5/100, or 0") from None
    if not 0 < burst_ms < period_ms:
        raise argparse.ArgumentTypeError(f"stall {text!r}: need 0 < BURST < PERIOD")
    return burst_ms * 1e-3, period_ms * 1e-3


def run_demo(scale: float, hogs: int, out: Path,
             stall: tuple[float, float] | None = None) -> dict:
    """One demo run at ``scale`` beside ``hogs`` spinning processes and, with
    ``stall`` (burst, period in s), a stall process on every CPU; its verdict and the
    metric farthest outside (or nearest to) its tolerance."""
    ctx = multiprocessing.get_context("fork")
    spinners = [ctx.Process(target=_spin, daemon=True) for _ in range(hogs)]
    if stall is not None:
        spinners += [ctx.Process(target=_stall, args=(cpu, *stall), daemon=True)
                     for cpu in sorted(os.sched_getaffinity(0))]
    for p in spinners:
        p.start()
    try:
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "cli.app", "run", "demo", "--scale", f"{scale:g}",
                               "--out", str(out)], capture_output=True, text=True, check=False)
        wall_s = time.monotonic() - t0
    finally:
        for p in spinners:
            p.kill()
            p.join()
    summary_path = out / "summary.json"
    if not summary_path.exists():
        raise RuntimeError(f"the demo wrote no summary (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-300:]}")
    summary = json.loads(summary_path.read_text())
    metrics = [m for m in summary["metrics"]
               if m.get("error_rel") is not None and m.get("tolerance_rel")]
    worst = max(metrics, key=lambda m: abs(m["error_rel"]) / m["tolerance_rel"])
    spreads = summary.get("model_spreads") or {}
    wrong = [m for m in metrics if is_wrong(m, spreads.get(m["case"], {}).get(m["metric"]))]
    return {"valid": bool(summary["valid"]), "wall_s": wall_s, "worst": worst, "wrong": wrong,
            "reasons": summary.get("reasons", [])}


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default=f"{DEFAULT_SCALE:g},{DEFAULT_SCALE / 2:g}",
                    type=arg_type(parse_scales),
                    help="S values, ','-separated (default: the default S and half of it)")
    ap.add_argument("--hogs", default="0,1,2", type=arg_type(parse_csv(parse_int(0, 64))),
                    help="numbers of CPU hogs, ','-separated")
    ap.add_argument("--stalls", default="0",
                    help="stall patterns BURST/PERIOD in ms (e.g. 5/100), or 0 for none, "
                         "','-separated (default: 0)")
    ap.add_argument("--runs", type=arg_type(parse_int(1)), default=2,
                    help="runs per (S, hogs, stalls)")
    ap.add_argument("--keep", metavar="DIR", default=None,
                    help="keep every run's directory under DIR (default: removed)")
    args = ap.parse_args()
    scales, hog_counts = args.scales, args.hogs
    try:
        stalls = {x: parse_stall(x) for x in args.stalls.split(",")}
    except argparse.ArgumentTypeError as e:
        ap.error(str(e))
    table = Table(title="the demo beside CPU hogs: verdict against errors")
    for col in ("S", "hogs", "stalls (ms)", "run", "gate", "worst metric (error / tolerance)",
                "outside tolerance", "wall", "why invalid"):
        table.add_column(col)
    valid = valid_wrong = invalid = 0
    with (contextlib.nullcontext(args.keep) if args.keep
          else tempfile.TemporaryDirectory(prefix="fabricemu-bench-gate-")) as tmp:
        for scale in scales:
            for hogs, (stall_text, stall) in itertools.product(hog_counts, stalls.items()):
                for i in range(args.runs):
                    r = run_demo(scale, hogs, Path(tmp) / f"S{scale:g}-h{hogs}-"
                                 f"s{stall_text.replace('/', 'in')}-{i}", stall)
                    w = r["worst"]
                    valid += r["valid"]
                    invalid += not r["valid"]
                    valid_wrong += r["valid"] and bool(r["wrong"])
                    table.add_row(
                        f"{scale:g}", str(hogs), stall_text, str(i + 1),
                        "VALID" if r["valid"] else "INVALID",
                        f"{w['case']} {w['metric']} {w['error_rel']:+.1%} / "
                        f"{w['tolerance_rel']:.0%}", str(len(r["wrong"])), f"{r['wall_s']:.0f} s",
                        "; ".join(x.split(":")[0] for x in r["reasons"]
                                  if not x.startswith("suggested")))
    console = Console(width=220)
    console.print(table)
    console.print(f"{valid} VALID, {invalid} INVALID; VALID runs with a metric outside its "
                  f"tolerance: {valid_wrong}")


if __name__ == "__main__":
    main()

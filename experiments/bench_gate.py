"""Benchmark: does the fidelity gate ever pass a wrong run? The demo beside CPU hogs.

    python -m experiments.bench_gate [--scales 10000,5000] [--hogs 0,1,2] [--runs 2]

Runs the default demo (``emu run demo``, each in its own process) at each S, with 0, 1
or more CPU hogs (processes spinning on a core, at normal priority) started beside
it, and puts every run's verdict beside its errors against the model of the real
fabric. A run is **wrong** when a metric misses its bound (`BOUNDS`: the project's
accuracy targets) and, where the model is a mean over randomised realisations (the
DCQCN incast: switches mark at random), also lies outside all of them by more than
`SPREAD_MARGIN`; a wrong run must be INVALID. The last line counts VALID runs that
were wrong: anything but 0 is a gate bug. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from core.scaling import DEFAULT_SCALE

#: Relative error a metric of a case may show against the real-fabric model (the
#: targets of docs/design.md "Measurement and fidelity"); the first matching prefix wins.
BOUNDS = (("incast cc=dcqcn", 0.10), ("incast cc=off", 0.05), ("", 0.05))


def bound_of(case: str) -> float:
    return next(b for prefix, b in BOUNDS if case.startswith(prefix))


#: A metric of a randomised model (switches mark at random) is wrong outside every one
#: of the model's realisations by more than this: the tolerance of a deterministic one.
SPREAD_MARGIN = 0.05


def is_wrong(m: dict, spread: dict | None) -> bool:
    """Whether metric row ``m`` misses its bound. Where the model is a mean over
    randomised realisations (``spread``, summary.json ``model_spreads``), a single
    faithful run may fall anywhere among them: it is wrong only beyond their range
    widened by `SPREAD_MARGIN`."""
    if abs(m["error_rel"]) <= bound_of(m["case"]):
        return False
    if spread is None:
        return True
    lo, hi = spread["range"]
    return not lo * (1 - SPREAD_MARGIN) <= m["measured"] <= hi * (1 + SPREAD_MARGIN)


def _spin() -> None:
    while True:
        pass


def run_demo(scale: float, hogs: int, out: Path) -> dict:
    """One demo run at ``scale`` beside ``hogs`` spinning processes; its verdict and
    the metric farthest outside (or nearest to) its bound."""
    ctx = multiprocessing.get_context("fork")
    spinners = [ctx.Process(target=_spin, daemon=True) for _ in range(hogs)]
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
    metrics = [m for m in summary["metrics"] if m.get("error_rel") is not None]
    worst = max(metrics, key=lambda m: abs(m["error_rel"]) / bound_of(m["case"]))
    spreads = summary.get("model_spreads") or {}
    wrong = [m for m in metrics if is_wrong(m, spreads.get(m["case"], {}).get(m["metric"]))]
    return {"valid": bool(summary["valid"]), "wall_s": wall_s, "worst": worst, "wrong": wrong,
            "reasons": summary.get("reasons", [])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default=f"{DEFAULT_SCALE:g},{DEFAULT_SCALE / 2:g}",
                    help="S values, ','-separated (default: the default S and half of it)")
    ap.add_argument("--hogs", default="0,1,2", help="numbers of CPU hogs, ','-separated")
    ap.add_argument("--runs", type=int, default=2, help="runs per (S, hogs)")
    ap.add_argument("--keep", metavar="DIR", default=None,
                    help="keep every run's directory under DIR (default: removed)")
    args = ap.parse_args()
    scales = [float(x) for x in args.scales.split(",")]
    hog_counts = [int(x) for x in args.hogs.split(",")]
    table = Table(title="the demo beside CPU hogs: verdict against errors")
    for col in ("S", "hogs", "run", "gate", "worst metric (error / bound)", "outside bound",
                "wall", "why invalid"):
        table.add_column(col)
    valid = valid_wrong = invalid = 0
    with (contextlib.nullcontext(args.keep) if args.keep
          else tempfile.TemporaryDirectory(prefix="fabricemu-bench-gate-")) as tmp:
        for scale in scales:
            for hogs in hog_counts:
                for i in range(args.runs):
                    r = run_demo(scale, hogs, Path(tmp) / f"S{scale:g}-h{hogs}-{i}")
                    w = r["worst"]
                    valid += r["valid"]
                    invalid += not r["valid"]
                    valid_wrong += r["valid"] and bool(r["wrong"])
                    table.add_row(
                        f"{scale:g}", str(hogs), str(i + 1), "VALID" if r["valid"] else "INVALID",
                        f"{w['case']} {w['metric']} {w['error_rel']:+.1%} / "
                        f"{bound_of(w['case']):.0%}", str(len(r["wrong"])), f"{r['wall_s']:.0f} s",
                        "; ".join(x.split(":")[0] for x in r["reasons"]
                                  if not x.startswith("suggested")))
    console = Console(width=220)
    console.print(table)
    console.print(f"{valid} VALID, {invalid} INVALID; VALID runs with a metric outside its "
                  f"bound: {valid_wrong}")


if __name__ == "__main__":
    main()

"""Benchmark: what recording a run and reporting it cost as the cases pile up.

    python -m bench.recording [--cases 200,1000] [--limit-s 600] [--out DIR] [--keep]

For each N, N synthetic cases go through the real recorder (``runner.run_experiment``:
each case's metrics, fidelity verdict and frames, then ``Run.commit``), each case as
large as one case of ``emu run incast --quick`` (its rows per CSV, ``CASE_ROWS``);
then ``emu report DIR`` runs on the directory as a user runs it (a child process,
plots included, its output thrown away). Printed per N: the seconds to commit every
case, the first and the last tenth of them per case (equal when a commit's cost does
not grow with the cases before it), the finish (the run's files written whole and the
plots) and ``emu report``. A recording still going at ``--limit-s`` stops there (the
finished cases kept, as a stopped run keeps them) and says how far it got.

Needs no root and builds nothing; the directories go under ``--out`` (default a new
temporary directory, removed at the end unless ``--keep``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from core.errors import FabricEmuError
from experiments.fidelity import FidelityReport
from experiments.option_parsers import arg_type, clear_errors, parse_csv, parse_float, parse_int
from experiments.options import ExperimentOptions, Option
from experiments.rundir import Run
from experiments.runner import run_experiment
from model.claims import ALPHABETA

#: Rows per CSV of one case of ``emu run incast --quick`` (cc=off, 8 senders).
CASE_ROWS = {"latency": 770, "queue": 1280, "ports": 96, "rates": 57, "messages": 3,
             "queue_model": 3, "fct_slowdown": 1}
METRICS_PER_CASE = 12
SCALE = 10_000.0


class _TooLong(FabricEmuError):
    """The recording passed ``--limit-s``."""


@dataclass(frozen=True)
class _Options(ExperimentOptions):
    cases: int
    scale: float


def _spec() -> dict[str, Option]:
    return {"cases": Option(1, "synthetic cases", parse=parse_int(1, 100_000)),
            "scale": Option(SCALE, "S", parse=parse_float(1.0, 1e9))}


def _frames(rng: np.random.Generator) -> dict[str, pd.DataFrame]:
    """One case's frames, shaped as an incast case's (the columns its plots read)."""
    def t(n: int) -> np.ndarray:
        return np.sort(rng.uniform(0, 1e-4, n))

    n = CASE_ROWS
    ports = [f"s{i % 8}:s{i % 8}-eth{i % 4}" for i in range(n["ports"])]
    return {
        "latency": pd.DataFrame({"msg_id": rng.integers(0, 8, n["latency"]),
                                 "t_s": t(n["latency"]),
                                 "one_way_s": rng.uniform(5e-7, 5e-5, n["latency"]),
                                 "ce": rng.random(n["latency"]) < 0.3}),
        "queue": pd.DataFrame({"t_s": t(n["queue"]), "port": "e1:e1-eth1",
                               "backlog_bytes": rng.integers(0, 2_000_000, n["queue"]),
                               "vq_bytes": rng.uniform(0, 2e6, n["queue"])}),
        "ports": pd.DataFrame({"port": ports, "node": [p.split(":")[0] for p in ports],
                               "peer": "h1", "tier": "edge-agg", "rate_bps": 8e11,
                               "buffer_bytes": 16 << 20, "backend": "bpf",
                               "tx_bytes": rng.integers(0, 1 << 30, n["ports"]),
                               "tx_packets": rng.integers(0, 1 << 20, n["ports"]), "drops": 0,
                               "ecn_marked": 0, "max_queue_hi_bytes": 524288.0,
                               "kmin_bytes": 1e5, "kmax_bytes": 4e5}),
        "rates": pd.DataFrame({"t_s": t(n["rates"]), "msg_id": rng.integers(0, 8, n["rates"]),
                               "rate_bps": 4e11, "target_rate_bps": 4e11, "alpha": 0.0,
                               "event": "send", "window_bytes": np.nan}),
        "messages": pd.DataFrame({"msg_id": range(n["messages"]), "src": "h2", "dst": "h1",
                                  "size_bytes": 1 << 20, "start_s": 0.0,
                                  "end_s": rng.uniform(6e-5, 7e-5, n["messages"]),
                                  "fct_s": rng.uniform(6e-5, 7e-5, n["messages"]),
                                  "completed": True}),
        "queue_model": pd.DataFrame({"port": "e1:e1-eth1", "t_s": t(n["queue_model"]),
                                     "queue_bytes": rng.uniform(0, 2e6, n["queue_model"])}),
        "fct_slowdown": pd.DataFrame({"bucket": ["64KiB-1MiB"], "size_bytes": [1048576.0],
                                      "messages": [3], "p50": [2.66], "p95": [2.70],
                                      "p99": [2.71], "model_p50": [2.73], "model_p95": [2.84],
                                      "model_p99": [2.85]}),
    }


@dataclass
class Timing:
    cases: int            # committed
    commit_s: float       # every commit (the cases' recording)
    first_tenth_s: float  # per case, over the first tenth of the commits
    last_tenth_s: float   # per case, over the last tenth
    finish_s: float       # the run's files written whole, plots
    report_s: float       # `emu report DIR`, a child process
    stopped: bool


def record(n_cases: int, out: Path, limit_s: float) -> Timing:
    """N synthetic cases through the real recorder into ``out``, then ``emu report``."""
    frames = _frames(np.random.default_rng(1))
    commits: list[float] = []
    t0 = time.perf_counter()

    def execute(run: Run, opts: _Options) -> None:
        for i in range(opts.cases):
            case = f"case {i:05d}"
            for m in range(METRICS_PER_CASE):
                run.metric(case, f"metric {m}", "us", 1.0 + m, 1.0 + m, ALPHABETA)
            for name, df in frames.items():
                run.frame(name, df, case=case, cc="off")
            run.fidelity(case, FidelityReport(True, [], opts.scale))
            t = time.perf_counter()
            run.commit(case)
            commits.append(time.perf_counter() - t)
            if time.perf_counter() - t0 > limit_s and i + 1 < opts.cases:
                raise _TooLong(f"stopped after {i + 1} of {opts.cases} cases at {limit_s:g} s")

    stopped = False
    try:
        run_experiment("recording", _spec(), _Options, execute, out, False,
                       {"cases": str(n_cases)}, show=False)
    except _TooLong:
        stopped = True
    total_s = time.perf_counter() - t0
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "cli.app", "report", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    report_s = time.perf_counter() - t
    if res.returncode != 0:
        raise FabricEmuError(f"emu report {out} failed: {res.stderr.strip()[-300:]}")
    tenth = max(1, len(commits) // 10)
    return Timing(len(commits), sum(commits), sum(commits[:tenth]) / tenth,
                  sum(commits[-tenth:]) / tenth, total_s - sum(commits), report_s, stopped)


def main() -> None:
    clear_errors(_bench)(arg_type(parse_csv(parse_int(1, 100_000))),
                         arg_type(parse_float(1.0, 86_400.0)))


def _bench(counts, seconds) -> None:  # noqa: ANN001 - experiments.option_parsers.arg_type's converters
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=counts, default=[200, 1000],
                    help="case counts, comma-separated (default 200,1000)")
    ap.add_argument("--limit-s", type=seconds, default=600.0,
                    help="stop a recording after this many seconds (default 600)")
    ap.add_argument("--out", type=Path, default=None, help="where the run directories go")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="fabricemu-recording-"))
    print(f"{'cases':>6} {'commits (s)':>12} {'first 10% (ms/case)':>20} "
          f"{'last 10% (ms/case)':>19} {'finish (s)':>11} {'emu report (s)':>15}")
    try:
        for n in args.cases:
            run_dir = out / f"cases-{n}"
            shutil.rmtree(run_dir, ignore_errors=True)
            r = record(n, run_dir, args.limit_s)
            print(f"{r.cases:>6} {r.commit_s:>12.1f} {r.first_tenth_s * 1e3:>20.1f} "
                  f"{r.last_tenth_s * 1e3:>19.1f} {r.finish_s:>11.1f} {r.report_s:>15.1f}"
                  + (f"  stopped at --limit-s {args.limit_s:g} of {n} cases" if r.stopped
                     else ""), flush=True)
    finally:
        if not args.keep and args.out is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()

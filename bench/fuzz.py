"""Benchmark: coverage-guided fuzzing (atheris, libFuzzer) of the two readers of files a
user hands over: the pcap reader (``emu replay``) and the run-directory reader
(``emu report``), each for a bounded time. Not part of CI; the property tests
(tests/unit/test_fuzz_inputs.py) run there.

    python -m bench.fuzz [--target pcap|rundir|all] [--duration 60] [--out DIR]

Each target runs in a child process (libFuzzer ends its process when time is up),
seeded with a valid file, and fails on any exception but a FabricEmuError (the
one-line errors). Prints executions, executions/s, coverage edges reached and the
inputs that crashed it (saved under ``--out``, default a new temporary directory):
each such input belongs in a unit test.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from core import safefile
from core.errors import FabricEmuError

TARGETS = ("pcap", "rundir")
#: What the run-directory target's input is cut into, in this order.
RUN_FILES = ("summary.json", "config.json", "metrics.csv", "latency.csv", "queue.csv")


def _seed_pcap(corpus: Path) -> None:
    from traffic.pcap import collective_pcap

    collective_pcap("alltoall", 3, 8192, corpus / "alltoall.pcap")


def _seed_rundir(corpus: Path) -> None:
    """A valid run directory's files, joined as the target splits them."""
    import json

    summary = {"experiment": "s", "valid": False, "status": "finished", "suggested_scale": 1e5,
               "reasons": ["x"], "metrics": [{"case": "a", "metric": "latency p99", "unit": "s",
                                              "measured": 1.0, "predicted": 1.1,
                                              "error_rel": 0.1, "valid": True}],
               "cases": {"a": {"valid": True, "reasons": [], "suggested_scale": 1e5,
                               "checks": []}},
               "deviations": [{"case": "a", "name": "d", "real_s": 1e-6}],
               "refused_attempts": {"a": [["pacing lag"]]}}
    parts = [json.dumps(summary), json.dumps({"experiment": "s", "scale": 1e5}),
             "case,metric,unit,measured,predicted,error_rel,valid\na,latency p99,s,1,1.1,0.1,True\n",
             "case,msg_id,t_s,one_way_s,ce\na,0,0,1e-6,False\na,0,1e-6,2e-6,False\n",
             "case,port,t_s,backlog_bytes\na,p,0,0\na,p,1e-6,100\n"]
    safefile.write_text(corpus / "run", "\0".join(parts))


def _child(target: str, scratch: Path, libfuzzer_args: list[str]) -> None:
    """The fuzzing process: instrument the project's modules as they are imported (this
    module imports none of them at the top), then hand control to libFuzzer."""
    import atheris

    with atheris.instrument_imports(include=["core", "topologies", "traffic", "experiments"]):
        from experiments import plots
        from experiments.report import render_report
        from traffic.pcap import read_roce_pcap
    # Drawing is not reading: skip writing the figures (most of the time per input).
    plots.save_figure = lambda fig, path, **kw: None

    def pcap(data: bytes) -> None:
        path = scratch / "in.pcap"
        safefile.write_bytes(path, data)
        with contextlib.suppress(FabricEmuError):
            read_roce_pcap(path)

    def rundir(data: bytes) -> None:
        parts = data.split(b"\0")
        for name, part in zip(RUN_FILES, parts, strict=False):
            safefile.write_bytes(scratch / name, part)
        for name in RUN_FILES[len(parts):]:
            (scratch / name).unlink(missing_ok=True)
        with contextlib.suppress(FabricEmuError), contextlib.redirect_stdout(io.StringIO()):
            render_report(scratch, show=True)
        plots.plt.close("all")

    atheris.Setup([sys.argv[0], *libfuzzer_args], pcap if target == "pcap" else rundir)
    atheris.Fuzz()


def fuzz(target: str, duration_s: float, out: Path) -> dict[str, object]:
    """Run one target for ``duration_s`` in a child; what libFuzzer reported."""
    corpus = safefile.make_dir(out / f"{target}-corpus")
    crashes = safefile.make_dir(out / f"{target}-crashes")
    (_seed_pcap if target == "pcap" else _seed_rundir)(corpus)
    argv = [f"-max_total_time={max(1, round(duration_s))}", f"-artifact_prefix={crashes}/",
            "-rss_limit_mb=2048", "-print_final_stats=1", str(corpus)]
    # Each input is written (and fsync-ed) to a file first: in memory where /dev/shm is.
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(prefix="fabricemu-fuzz-", dir=shm if shm.is_dir()
                                     and os.access(shm, os.W_OK) else None) as scratch:
        proc = subprocess.run([sys.executable, "-m", "bench.fuzz", "--child", target,
                               "--scratch", scratch, "--", *argv],
                              capture_output=True, text=True, timeout=duration_s + 300)
    log = proc.stdout + proc.stderr
    runs = re.findall(r"stat::number_of_executed_units: (\d+)", log)
    cov = re.findall(r"cov: (\d+)", log)
    return {"target": target, "executions": int(runs[-1]) if runs else 0,
            "per_s": int(runs[-1]) / duration_s if runs else 0.0,
            "edges": int(cov[-1]) if cov else 0,
            "crashes": sorted(p.name for p in crashes.iterdir()),
            "crashes_dir": crashes, "tail": "" if proc.returncode == 0 else log[-2000:]}


def main() -> None:
    if "--child" in sys.argv:  # before the project's imports, which it instruments
        ap = argparse.ArgumentParser()
        ap.add_argument("--child", choices=TARGETS)
        ap.add_argument("--scratch", type=Path)
        args, rest = ap.parse_known_args()
        _child(args.child, args.scratch, [a for a in rest if a != "--"])
        return
    _main()


def _main() -> None:
    from experiments.option_parsers import arg_type, clear_errors, parse_duration_s

    clear_errors(_bench)(arg_type(parse_duration_s))


def _bench(duration) -> None:  # noqa: ANN001 - experiments.option_parsers.arg_type's converter
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    ap.add_argument("--duration", type=duration, default=60.0,
                    help="seconds per target (default 60)")
    ap.add_argument("--out", type=Path, default=None, help="where corpora and crashes go")
    args = ap.parse_args()
    try:
        import atheris  # noqa: F401
    except ImportError:
        raise FabricEmuError("bench.fuzz needs atheris (pip install atheris; it builds "
                             "against clang's libFuzzer)") from None
    out = safefile.make_dir(args.out) if args.out else Path(tempfile.mkdtemp(
        prefix="fabricemu-fuzz-out-"))
    for target in TARGETS if args.target == "all" else (args.target,):
        res = fuzz(target, args.duration, out)
        print(f"{target:7s} {res['executions']:>9,} inputs in {args.duration:g} s "
              f"({res['per_s']:,.0f}/s), {res['edges']:,} coverage edges, "
              f"{len(res['crashes'])} crash(es)"
              + (f" in {res['crashes_dir']}: {', '.join(res['crashes'])}" if res["crashes"]
                 else ""))
        if res["tail"] and not res["crashes"]:
            print(res["tail"], file=sys.stderr)
    print(f"corpora and crashes: {out}")


if __name__ == "__main__":
    main()

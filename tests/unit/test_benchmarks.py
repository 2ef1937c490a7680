"""The benchmarks' pure parts: bench.gate's wrong run and stall patterns, bench.capacity's
arguments."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gate import is_wrong, parse_stall
from core.errors import ParameterError
from model.claims import ALPHABETA, DCQCN_QUEUE, INCAST_LOSSLESS

REPO = Path(__file__).resolve().parents[2]


def _row(case: str, measured: float, predicted: float) -> dict:
    """A prediction's summary row with the tolerance model.claims gives its model."""
    claim = DCQCN_QUEUE if "cc=dcqcn" in case else \
        INCAST_LOSSLESS if "cc=off" in case else ALPHABETA
    return {"case": case, "metric": "latency p99", "measured": measured,
            "error_rel": measured / predicted - 1, "tolerance_rel": claim.tolerance_rel}


def test_a_deterministic_metric_is_wrong_beyond_its_bound():
    assert not is_wrong(_row("fattree,4 allreduce-ring 1MiB", 104.9, 100.0), None)
    assert is_wrong(_row("fattree,4 allreduce-ring 1MiB", 105.1, 100.0), None)
    assert is_wrong(_row("incast cc=off K=1/2", 94.0, 100.0), None)


def test_a_randomised_model_metric_is_wrong_only_beyond_all_its_realisations():
    spread = {"band": [44.1, 51.7], "range": [42.0, 53.0]}
    case = "incast cc=dcqcn K=100KB/400KB"
    assert not is_wrong(_row(case, 42.4, 48.0), spread)      # -11.7 %, among the fluid runs
    assert not is_wrong(_row(case, 55.0, 48.0), spread)      # within 5 % of the greatest
    assert is_wrong(_row(case, 56.0, 48.0), spread)          # beyond it
    assert is_wrong(_row(case, 39.0, 48.0), spread)
    assert is_wrong(_row(case, 42.4, 48.0), None)            # no spread recorded: the bound


def test_bench_capacity_reads_a_topology_with_its_own_scales():
    from bench.capacity import parse_topo_scales

    assert parse_topo_scales("fattree,8@15000,30000", "1,2") == ("fattree,8", [30000.0, 15000.0])
    assert parse_topo_scales("leafspine,2,2,4,host_rate=100G", "4000,10000") == (
        "leafspine,2,2,4,host_rate=100G", [10000.0, 4000.0])
    for bad in ("foo@10000", "fattree,4@abc", "fattree,4@0.5", "fattree,4@10000,", "fattree,3"):
        with pytest.raises(ParameterError):
            parse_topo_scales(bad, "10000")


def test_benchmark_arguments_are_usage_errors_that_say_why():
    from experiments.option_parsers import arg_type, parse_scales

    assert arg_type(parse_scales)("10000, 4000") == [10000.0, 4000.0]
    with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number"):
        arg_type(parse_scales)("10000,0")


def test_a_stall_pattern_is_burst_over_period_in_ms_or_0():
    assert parse_stall("5/100") == (0.005, 0.1) and parse_stall("0") is None
    for bad in ("5", "100/5", "0/10", "a/b", "5/100/2"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_stall(bad)


def test_bench_capacity_reads_worker_counts():
    from bench.capacity import _parse_workers
    assert _parse_workers("auto") == [None]
    assert _parse_workers("auto,2,1") == [None, 2, 1]
    for bad in ("0", "two", "auto,-1", ""):
        with pytest.raises(ValueError):
            _parse_workers(bad)


def test_bench_capacity_splits_a_case_into_its_parts():
    from rich.console import Console

    from bench.capacity import _time_parts
    row = {"in_order": False, "cc": "off", "workers": 2, "scale": 15000.0, "whole_s": 40.0,
           "build_s": 6.0, "model_s": 12.0, "start_s": 0.5, "setup_s": 1.5, "wall_s": 10.0,
           "curve_s": 3.0, "cpu_per_frame_us": 41.5, "wakeups_per_frame": 0.5, "fps": 30_000.0}
    console = Console(record=True, width=250)
    console.print(_time_parts([row], "fattree,8", {False: {"delivered_fps": 100_000.0}}))
    line = console.export_text().splitlines()[-2]
    cells = [c.strip() for c in line.split("│") if c.strip()]
    assert cells == ["off", "off", "2", "15000", "40.0", "6.0", "12.0", "0.5", "1.5", "10.0",
                     "7.0", "3.0", "25%", "41.5 µs", "0.50", "0.300"]


def test_bench_capacity_puts_the_starts_lag_beside_the_send_lag():
    from bench.capacity import _lags
    assert _lags({"send_lag_p99_ms": 1.405, "start_lag_p99_ms": 1.367}) == "1.41 / 1.37 ms"
    assert _lags({"send_lag_p99_ms": 0.2, "start_lag_p99_ms": None}) == "0.20 / - ms"


@pytest.mark.parametrize("argv", [
    ["capacity", "--topo", "fattree,4@abc"], ["capacity", "--workers", "0"],
    ["rxring", "--frames", "0"], ["rxring", "--scales", "1e8"],
    ["gate", "--hogs", "x"], ["engine_send", "--payload", "-5"],
    ["marker", "--seconds", "-1"], ["reorder", "--topo", "foo"],
    ["shaping_accuracy", "--scale", "0"], ["lifecycle", "--k", "4,x"],
    ["pathdelay", "--runs", "0"]])
def test_a_benchmark_refuses_bad_arguments_in_one_line(argv):
    p = subprocess.run([sys.executable, "-m", f"bench.{argv[0]}", *argv[1:]],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "error:" in p.stderr.splitlines()[-1], p.stderr


def test_clear_errors_turns_a_fabricemu_error_into_exit_status_2(capsys):
    from core.errors import CapabilityError
    from experiments.option_parsers import clear_errors, parse_csv, parse_int

    @clear_errors
    def main() -> None:
        raise CapabilityError("the kernel has no sch_htb")

    with pytest.raises(SystemExit) as e:
        main()
    assert e.value.code == 2 and "error: the kernel has no sch_htb" in capsys.readouterr().err
    assert parse_csv(parse_int(0))("0, 1,2") == [0, 1, 2]
    with pytest.raises(ParameterError):
        parse_csv(parse_int(0))("1,,2")


def test_bench_module_names_repeat_no_other_module_or_package():
    """``bench.engine_send``, not ``bench.engine``: a benchmark's name says what it is
    wherever it appears (tracebacks, ``emu bench``, grep)."""
    packages = [d for d in REPO.iterdir() if (d / "__init__.py").is_file() and d.name != "bench"]
    others = {d.name for d in packages} | {p.stem for d in packages for p in d.rglob("*.py")}
    ours = {p.stem for p in (REPO / "bench").glob("*.py")} - {"__init__"}
    assert not ours & others, sorted(ours & others)

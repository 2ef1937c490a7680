"""Every experiment's --quick configuration on real fabrics, checked for physically
meaningful outcomes (not for the model's accuracy, which the summary reports).

Runs as root (namespaces, tc, BPF); about two minutes on two cores in all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from experiments import registry

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc, BPF)")]


@pytest.fixture
def netns_guard():
    """Every fabric this test process built was removed (other processes on the
    machine may build fabrics meanwhile, so only our own runs are checked)."""
    yield
    from emu.runs import list_runs

    ours = [r for r in list_runs() if r.pid == os.getpid()]
    assert not ours, f"fabrics left behind: {[r.run_id for r in ours]}"


def _check_summary(run_dir) -> dict:
    """Every summary metric has a measurement, a prediction and (if defined) an error;
    every case has a fidelity verdict with reasons when invalid."""
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]
    for row in summary["metrics"]:
        assert row["measured"] is not None, row
        assert row["predicted"] is not None, row
        assert row["error_rel"] is not None or (row["predicted"] == 0 and row["measured"] != 0), row
        assert isinstance(row["valid"], bool)
    for case, rep in summary["cases"].items():
        assert rep["valid"] or rep["reasons"], case
        assert rep["suggested_scale"] >= 1
    config = json.loads((run_dir / "config.json").read_text())
    assert config["scale"] and config["versions"]["kernel"] and config["fabrics"]
    return summary


def _rows(result, metric: str) -> dict[str, dict]:
    df = result.metrics[result.metrics.metric == metric]
    return {r.case: r._asdict() for r in df.itertuples()}


def test_incast_quick(tmp_path, netns_guard):
    result = registry.cli_run("incast", tmp_path, quick=True)
    _check_summary(tmp_path)
    off = {k: v for k, v in _rows(result, "latency p99").items() if "cc=off" in k}
    on = {k: v for k, v in _rows(result, "latency p99").items() if "cc=dcqcn" in k}
    assert off and on
    (off_p99,), (on_p99,) = off.values(), on.values()
    peak = _rows(result, "peak queue")
    off_q = next(v for k, v in peak.items() if "cc=off" in k)
    on_q = next(v for k, v in peak.items() if "cc=dcqcn" in k)
    # DCQCN cuts the senders' rates once marks arrive: a lower queue and lower tail latency.
    assert on_q["measured"] < off_q["measured"]
    assert on_p99["measured"] < off_p99["measured"]
    # Lossless incast keeps the receiver port busy: completion ~ N S / C either way.
    for row in _rows(result, "completion time").values():
        assert abs(row["error_rel"]) < 0.10, row
    # The bottleneck queue never exceeds the port buffer and marks only happen with a queue.
    ports = pd.read_csv(tmp_path / "ports.csv")
    assert (ports.drops == 0).all()
    queue = pd.read_csv(tmp_path / "queue.csv")
    assert queue.backlog_bytes.max() <= ports.buffer_bytes.max()
    msgs = pd.read_csv(tmp_path / "messages.csv")
    assert (msgs.cnps_received <= msgs.cnps_sent).all()
    assert (msgs.cnps_sent <= msgs.ce_marked).all()
    assert (tmp_path / "queue_over_time.png").exists() and (tmp_path / "latency_cdf.png").exists()


def test_collective_quick(tmp_path, netns_guard):
    registry.cli_run("collective", tmp_path, quick=True)
    _check_summary(tmp_path)
    table = pd.read_csv(tmp_path / "collective.csv")
    assert set(table.collective) == {"allreduce-ring", "alltoall"}
    # Payload busbw cannot exceed the bottleneck rate, but for the one frame each shaper's
    # initially full token bucket lets through at once (< 1% at these sizes).
    assert (table.busbw_bps <= table.bottleneck_bps * 1.01).all(), table
    assert (table.time_s > 0).all() and (table.time_model_s > 0).all()
    # Bandwidth-bound ring all-reduce gets close to the bottleneck.
    big = table[(table.collective == "allreduce-ring")
                & (table.size_bytes == table.size_bytes.max())]
    assert (big.busbw_bps >= 0.8 * big.bottleneck_bps).all(), big
    assert (tmp_path / "busbw_vs_size.png").exists()


def test_ratios_quick(tmp_path, netns_guard):
    registry.cli_run("ratios", tmp_path, quick=True)
    _check_summary(tmp_path)
    tiers = pd.read_csv(tmp_path / "tiers.csv")
    tiered, uniform = (tiers[tiers.fabric.str.contains(r)] for r in ("800G", "=400G"))
    # 800G uplinks: the NICs are the bottleneck; 400G uplinks: the bottleneck moves up.
    assert tiered[tiered.bottleneck_measured].tier.iloc[0] == "host-leaf"
    assert uniform[uniform.bottleneck_measured].tier.iloc[0] == "leaf-spine"
    table = pd.read_csv(tmp_path / "collective.csv")
    busbw = dict(zip(table.fabric, table.busbw_bps, strict=True))
    assert busbw["leafspine,2,1,2,fabric_rate=800G"] > busbw["leafspine,2,1,2,fabric_rate=400G"]


def test_ecmp_quick(tmp_path, netns_guard):
    registry.cli_run("ecmp", tmp_path, quick=True)
    _check_summary(tmp_path)
    flows = pd.read_csv(tmp_path / "flows.csv")
    # No flow beats its 400G NIC (payload goodput), measured or modelled.
    assert (flows.throughput_bps <= 400e9 * 1.005).all()
    assert set(flows.source) == {"measured", "model"}


def test_fairness_quick(tmp_path, netns_guard):
    result = registry.cli_run("fairness", tmp_path, quick=True)
    _check_summary(tmp_path)
    jain = _rows(result, "Jain index")
    n_flows = pd.read_csv(tmp_path / "intervals.csv").groupby("interval").active.first()
    assert n_flows.max() >= 2            # flows did overlap (joined and left)
    for row in jain.values():
        assert 0 < row["measured"] <= 1.0 + 1e-9
    # The bottleneck is shared, never exceeded.
    for row in _rows(result, "aggregate throughput").values():
        assert row["measured"] <= 400 * 1.02
    assert (tmp_path / "rate_over_time.png").exists()


def test_demo_quick_and_report(tmp_path, netns_guard):
    result = registry.demo(tmp_path, quick=True)
    summary = _check_summary(tmp_path)
    assert any("allreduce-ring" in r["case"] for r in summary["metrics"])
    assert any("incast" in r["case"] for r in summary["metrics"])
    if not result.valid:  # an invalid run must say why and ask for a larger S
        assert result.fidelity.reasons
    (tmp_path / "busbw_vs_size.png").unlink()
    registry.report(tmp_path)
    assert (tmp_path / "busbw_vs_size.png").exists()


def _cases_on_disk(out) -> list:
    cases = out / "cases"
    return sorted(p.name for p in cases.iterdir() if p.name.isdigit()) if cases.is_dir() else []


def _first_case_written(out) -> bool:
    """Case 000 committed and summary.json rewritten after it (each file atomic)."""
    try:
        return bool(_cases_on_disk(out)) and bool(
            json.loads((out / "summary.json").read_text())["metrics"])
    except (OSError, ValueError, KeyError):
        return False


def test_sigkilled_run_keeps_its_finished_cases_and_resumes(tmp_path):
    """A real quick incast (two cases on one fabric) is SIGKILLed once its first case
    is on disk: the case survives, `emu report` reads the directory, and --resume
    runs only the second case."""
    from emu.netns import delete_netns
    from emu.runs import list_runs, unregister_run

    out = tmp_path / "run"
    emu = [sys.executable, "-c", "from emu.cli import main; main()"]
    # What is checked here is the run directory, not the measurement: a run other
    # tests start meanwhile must not refuse this one.
    env = {**os.environ, "PYTHONPATH": str(REPO), "FABRICEMU_ALLOW_CONCURRENT": "1"}
    opts = ["--quick", "--set", "topo=leafspine,2,2,2", "--set", "senders=2",
            "--set", "size=256KiB", "--out", str(out)]
    proc = subprocess.Popen([*emu, "run", "incast", *opts], cwd=tmp_path, env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not _first_case_written(out) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _cases_on_disk(out) == ["000"], proc.stderr.read() if proc.poll() else "timeout"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for run in list_runs():  # only what the killed process left behind
            if run.pid == proc.pid:
                for ns in run.namespaces:
                    delete_netns(ns)
                unregister_run(run.run_id)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "running" and not summary["valid"]
    first = {m["case"] for m in summary["metrics"]}
    assert len(first) == 1 and "cc=off" in next(iter(first))
    record = (out / "cases" / "000" / "unit.json").read_text()
    report = subprocess.run([*emu, "report", str(out)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    again = subprocess.run([*emu, "run", "incast", *opts], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "--resume" in again.stderr  # a non-empty --out
    resumed = subprocess.run([*emu, "run", "incast", "--resume", "--out", str(out)],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode in (0, 3), resumed.stderr
    assert _cases_on_disk(out) == ["000", "001"]
    assert (out / "cases" / "000" / "unit.json").read_text() == record  # not rerun
    final = json.loads((out / "summary.json").read_text())
    assert final["status"] == "finished"
    cases = {m["case"] for m in final["metrics"]}
    assert first < cases and any("cc=dcqcn" in c for c in cases)

"""Run directory, summary rows, options and report rendering on synthetic data (no kernel).

The frames here are made up to exercise the writers and plots; no measurement is
claimed from them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from core.errors import ParameterError
from core.units import format_size
from experiments.fidelity import FidelityReport
from experiments.option_parsers import parse_scale, parse_sizes, parse_specs
from experiments.options import ExperimentOptions, Option, resolve_options
from experiments.registry import EXPERIMENTS, parse_sets
from experiments.report import render_report
from experiments.rundir import Run, error_rel, jain_index
from experiments.runfiles import METRIC_COLUMNS
from experiments.runner import run_experiment
from model.claims import ALPHABETA


@dataclass(frozen=True)
class ScaleOptions(ExperimentOptions):
    scale: float


def test_error_rel():
    assert error_rel(105.0, 100.0) == pytest.approx(0.05)
    assert error_rel(95.0, -100.0) == pytest.approx(1.95)
    assert error_rel(0.0, 0.0) == 0.0
    assert error_rel(3.0, 0.0) is None
    assert error_rel(None, 1.0) is None
    assert error_rel(float("nan"), 1.0) is None


def test_jain_index():
    assert jain_index([5, 5, 5]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert np.isnan(jain_index([]))


def test_options_quick_and_overrides():
    spec = {"n": Option(8, "n", quick=2, parse=int),
            "topos": Option(["fattree,4"], "t", parse=parse_specs),
            "sizes": Option([1 << 20], "s", parse=parse_sizes)}
    assert resolve_options(spec, True, {}) == {"n": 2, "topos": ["fattree,4"], "sizes": [1 << 20]}
    got = resolve_options(spec, False, {"n": "5", "topos": "fattree,4;leafspine,2,2,2",
                                        "sizes": "64KiB;1MiB"})
    assert got == {"n": 5, "topos": ["fattree,4", "leafspine,2,2,2"], "sizes": [65536, 1 << 20]}
    with pytest.raises(ParameterError):
        resolve_options(spec, False, {"bogus": "1"})


def test_every_experiment_declares_what_the_registry_runs():
    for name, mod in EXPERIMENTS.items():
        assert name == mod.NAME and "scale" in mod.OPTIONS, name
        assert callable(mod.check) and callable(mod.execute), name
        mod.check(mod.Options.of(resolve_options(mod.OPTIONS, True, {})))


def test_parse_sets():
    assert parse_sets(["a=1", "topo=fattree,4,k=v"]) == {"a": "1", "topo": "fattree,4,k=v"}
    with pytest.raises(ParameterError):
        parse_sets(["novalue"])


def test_size_label():
    assert [format_size(x) for x in (1 << 20, 256 << 10, 100_000, 4154)] == \
        ["1MiB", "256KiB", "100KB", "4154B"]


def _synthetic_run(tmp_path) -> Run:
    run = Run("synthetic", tmp_path, {"scale": 50000.0, "sizes": [1, 2]}, quick=True)
    t = np.linspace(0, 50e-6, 40)
    for case, peak in (("cc=off", 4e6), ("cc=dcqcn", 1e6)):
        run.metric(case, "latency p99", "us", peak / 5e4, peak / 4.8e4, ALPHABETA)
        run.metric(case, "drops", "packets", 0.0, 0.0, ALPHABETA)
        run.frame("queue", pd.DataFrame({"t_s": t, "port": "e1:e1-eth1",
                                         "backlog_bytes": peak * np.sin(t / t[-1] * np.pi)}),
                  case=case)
        run.frame("latency", pd.DataFrame({"msg_id": 0, "t_s": t,
                                           "one_way_s": 1e-6 + t / 10, "ce": False}), case=case)
        run.frame("rates", pd.DataFrame({"t_s": t, "msg_id": 0, "rate_bps": 400e9,
                                         "target_rate_bps": 400e9, "alpha": 1.0}), case=case)
        run.fidelity(case, FidelityReport(case == "cc=off", [] if case == "cc=off" else
                                          ["pacing lag p99: too late"], 50000.0))
    run.frame("collective", pd.DataFrame({
        "fabric": "fattree,4", "collective": "allreduce-ring", "size_bytes": [1 << 20, 4 << 20],
        "busbw_bps": [300e9, 380e9], "busbw_model_bps": [310e9, 389e9],
        "bottleneck_bps": 400e9}))
    run.frame("flows", pd.DataFrame({"throughput_bps": [200e9, 400e9]}), case="p", source="measured")
    run.frame("flows", pd.DataFrame({"throughput_bps": [250e9, 400e9]}), case="p", source="model")
    run.frame("tiers", pd.DataFrame({"fabric": "x", "tier": ["host-leaf", "leaf-spine"],
                                     "utilisation_measured": [0.9, 0.5],
                                     "utilisation_model": [1.0, 0.5]}))
    return run


def test_run_directory_and_report(tmp_path):
    result = _synthetic_run(tmp_path).finish(show=False)
    assert not result.valid                       # one case failed the gate
    summary = json.loads((tmp_path / "summary.json").read_text())
    config = json.loads((tmp_path / "config.json").read_text())
    for key in ("options", "scale", "seed", "versions", "capabilities", "git_commit", "rerun"):
        assert key in config
    assert config["versions"]["python"]
    assert summary["valid"] is False
    rows = {(r["case"], r["metric"]): r for r in summary["metrics"]}
    assert set(rows[("cc=off", "latency p99")]) == set(METRIC_COLUMNS)
    assert rows[("cc=off", "latency p99")]["kind"] == "prediction"
    assert rows[("cc=off", "latency p99")]["valid"] is True
    assert rows[("cc=dcqcn", "latency p99")]["valid"] is False
    assert rows[("cc=off", "drops")]["error_rel"] == 0.0
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert len(metrics) == 4
    assert set(pd.read_csv(tmp_path / "queue.csv").case) == {"cc=off", "cc=dcqcn"}
    for png in ("queue_over_time", "latency_ccdf", "rate_over_time", "busbw_vs_size",
                "flow_throughput_cdf", "tier_utilisation"):
        assert (tmp_path / f"{png}.png").stat().st_size > 1000, png
    # `emu report DIR` re-renders the same plots from the CSVs
    (tmp_path / "latency_ccdf.png").unlink()
    made = render_report(tmp_path, show=True)
    assert (tmp_path / "latency_ccdf.png").exists() and len(made) == 6


def test_report_refuses_unfinished_dir(tmp_path):
    with pytest.raises(ParameterError):
        render_report(tmp_path)


def test_a_failing_case_keeps_the_finished_ones(tmp_path):
    def execute(run: Run, opts: dict) -> None:
        run.metric("first", "busbw", "Gb/s", 390.0, 394.0, ALPHABETA)
        run.fidelity("first", FidelityReport(True, [], 1.0))
        run.commit("first")
        run.metric("second", "busbw", "Gb/s", 1.0, 394.0, ALPHABETA)  # the running case: dropped
        raise RuntimeError("second case broke")

    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="second case broke"):
        run_experiment("synthetic", {"scale": Option(1e5, "S", parse=parse_scale)}, ScaleOptions,
                       execute,
                       str(out), False, {})
    summary = json.loads((out / "summary.json").read_text())
    assert summary["valid"] is False
    assert summary["status"] == "stopped"
    assert summary["reasons"] == ["incomplete: stopped by RuntimeError: second case broke"]
    assert [m["case"] for m in summary["metrics"]] == ["first"]
    assert (out / "metrics.csv").exists()


def test_a_run_that_fails_before_any_case_leaves_nothing(tmp_path):
    def execute(run: Run, opts: dict) -> None:
        raise RuntimeError("fabric build failed")

    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        run_experiment("synthetic", {"scale": Option(1e5, "S", parse=parse_scale)}, ScaleOptions,
                       execute,
                       str(out), False, {})
    assert not out.exists()


def test_the_queue_plot_draws_each_ports_thresholds_and_the_rate_plot_its_events(
        tmp_path, monkeypatch):
    from experiments import plotkit, plots

    figs = []
    def keep(fig, path, ctx, title):  # noqa: ANN001, ANN202
        figs.append(fig)
        return path

    monkeypatch.setattr(plots, "save_plot", keep)
    monkeypatch.setattr(plotkit, "save_plot", keep)  # the grids save through finish_grid
    ctx = plots.PlotContext(tmp_path, pd.DataFrame(columns=["case", "metric", "predicted"]),
                            (1e4,))
    nan = float("nan")
    pd.DataFrame({"case": ["marks", "marks", "pauses"],
                  "port": ["s1:s1-eth1", "h1:h1-eth0", "s1:s1-eth1"],
                  "kmin_bytes": [40e3, nan, 80e3], "kmax_bytes": [160e3, nan, 80e3],
                  "xoff_bytes": [nan, nan, 170e3], "xon_bytes": [nan, nan, 150e3]}
                 ).to_csv(tmp_path / "ports.csv", index=False)
    t = np.linspace(0, 1e-5, 5)
    queue = pd.concat([pd.DataFrame({"case": c, "port": "s1:s1-eth1", "t_s": t,
                                     "backlog_bytes": 1e5}) for c in ("marks", "pauses")])
    plots.plot_queue(ctx, queue)
    labels = [[line.get_label() for line in ax.get_lines()] for ax in figs[0].axes]
    assert labels == [["queue", "Kmin 40 KB", "Kmax 160 KB"],
                      ["queue", "K 80 KB", "Xoff 170 KB", "Xon 150 KB"]]
    rates = pd.DataFrame({"case": ["marks"] * 4 + ["window"] * 2,
                          "msg_id": [1, 1, 1, 2, 1, 1], "t_s": [0, 1e-6, 2e-6, 0, 0, 1e-6],
                          "rate_bps": [1e11, 5e10, 4e10, 1e11, 1e11, 1e11],
                          "event": ["send", "cnp", "echo", "send", "send", "echo"],
                          "window_bytes": [nan] * 4 + [8e4, 4e4]})
    plots.plot_rates(ctx, rates)
    marks, window, window_axis = figs[1].axes
    assert window_axis.get_ylabel() == "window (KB)"   # only the windowed case has one
    assert [line.get_ydata()[-1] for line in window_axis.get_lines()] == [40.0]
    assert "window (right axis)" in [line.get_label() for line in window.get_lines()]
    assert [line.get_label() for line in marks.get_lines()] == \
        ["flow 1", "CNP", "ECN-echo ACK", "flow 2"]

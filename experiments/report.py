"""Render a finished run directory: PNG plots from its tidy CSVs and the rich summary
table from ``summary.json``. ``emu report DIR`` calls :func:`render_report`; every
experiment calls it at the end of its run, so a re-render gives the same output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on a test runner or in a VM

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from rich.table import Table  # noqa: E402

from emu.errors import ParameterError  # noqa: E402
from experiments.common import console  # noqa: E402

_US = 1e6
_GBPS = 1e-9


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _cdf(ax: Any, values: np.ndarray, **kw: Any) -> None:
    xs = np.sort(values)
    ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), **kw)


def plot_queue(run_dir: Path, metrics: pd.DataFrame) -> Path | None:
    """Queue depth over time at the busiest port of every case."""
    df = pd.read_csv(run_dir / "queue.csv")
    model_csv = run_dir / "queue_model.csv"
    model = pd.read_csv(model_csv) if model_csv.exists() else None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for case, g in df.groupby("case", sort=False):
        port = g.groupby("port")["backlog_bytes"].max().idxmax()
        s = g[g.port == port]
        line, = ax.plot(s.t_s * _US, s.backlog_bytes / 1e3, label=f"{case} ({port})", lw=1)
        if model is not None:
            mq = model[model.case == case]
            ax.plot(mq.t_s * _US, mq.queue_bytes / 1e3, ls="--", lw=1, color=line.get_color(),
                    label="model" if case == df.case.iloc[0] else None)
    ax.set_xlabel("time (µs, real; 0 = engine start, model: first bits at the port)")
    ax.set_ylabel("queue (KB)")
    ax.set_title("bottleneck queue over time")
    ax.legend(fontsize=7)
    return _save(fig, run_dir / "queue_over_time.png")


def plot_latency(run_dir: Path, metrics: pd.DataFrame) -> Path | None:
    """One-way latency CDF per case; the model's p50/p99/p99.9 as markers."""
    df = pd.read_csv(run_dir / "latency.csv")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (case, g) in enumerate(df.groupby("case", sort=False)):
        color = f"C{i % 10}"
        _cdf(ax, g.one_way_s.to_numpy() * _US, label=case, color=color, lw=1.2)
        for q in ("p50", "p99", "p99.9"):
            row = metrics[(metrics.case == case) & (metrics.metric == f"latency {q}")]
            if not row.empty and pd.notna(row.predicted.iloc[0]):
                ax.plot(row.predicted.iloc[0], float(q[1:]) / 100, "x", color=color, ms=8)
    ax.set_xscale("log")
    ax.set_xlabel("one-way latency (µs, real)")
    ax.set_ylabel("CDF")
    ax.set_title("latency CDF (x = model p50/p99/p99.9)")
    ax.legend(fontsize=7)
    return _save(fig, run_dir / "latency_cdf.png")


def plot_rates(run_dir: Path, metrics: pd.DataFrame) -> Path | None:
    """DCQCN current rate of every flow over time, one panel per case."""
    df = pd.read_csv(run_dir / "rates.csv")
    cases = list(dict.fromkeys(df.case))
    fig, axes = plt.subplots(len(cases), 1, figsize=(8, 2.6 * len(cases)), squeeze=False)
    for ax, case in zip(axes[:, 0], cases, strict=True):
        g = df[df.case == case]
        for msg_id, s in g.groupby("msg_id"):
            ax.step(s.t_s * _US, s.rate_bps * _GBPS, where="post", lw=1, label=f"flow {msg_id}")
        ax.set_title(case, fontsize=9)
        ax.set_ylabel("rate (Gb/s)")
        if g.msg_id.nunique() <= 8:
            ax.legend(fontsize=6, loc="upper right")
    axes[-1, 0].set_xlabel("time (µs, real)")
    return _save(fig, run_dir / "rate_over_time.png")


def plot_busbw(run_dir: Path, metrics: pd.DataFrame) -> Path | None:
    """busbw vs size per fabric: measured points, model lines, bottleneck rate."""
    df = pd.read_csv(run_dir / "collective.csv")
    fabrics = list(dict.fromkeys(df.fabric))
    fig, axes = plt.subplots(1, len(fabrics), figsize=(5.5 * len(fabrics), 4.2), squeeze=False)
    for ax, fabric in zip(axes[0], fabrics, strict=True):
        g = df[df.fabric == fabric]
        for i, (coll, s) in enumerate(g.groupby("collective", sort=False)):
            s = s.sort_values("size_bytes")
            ax.plot(s.size_bytes, s.busbw_bps * _GBPS, "o", color=f"C{i}", label=f"{coll}")
            ax.plot(s.size_bytes, s.busbw_model_bps * _GBPS, "--", color=f"C{i}", lw=1)
        ax.axhline(g.bottleneck_bps.min() * _GBPS, color="grey", lw=0.8, ls=":",
                   label="bottleneck rate")
        ax.set_xscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (Gb/s)")
        ax.set_title(fabric, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("busbw vs size (points: measured, dashed: model)", fontsize=10)
    return _save(fig, run_dir / "busbw_vs_size.png")


def plot_flows(run_dir: Path, metrics: pd.DataFrame) -> Path | None:
    """Per-flow throughput CDF: measured vs the model's hash-collision expectation."""
    df = pd.read_csv(run_dir / "flows.csv")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, ((case, source), g) in enumerate(df.groupby(["case", "source"], sort=False)):
        _cdf(ax, g.throughput_bps.to_numpy() * _GBPS, label=f"{case} {source}",
             color=f"C{i // 2 % 10}", ls="-" if source == "measured" else "--", lw=1.2)
    ax.set_xlabel("per-flow throughput (Gb/s, real)")
    ax.set_ylabel("CDF")
    ax.set_title("per-flow throughput (solid: measured, dashed: model over random hashes)")
    ax.legend(fontsize=7)
    return _save(fig, run_dir / "flow_throughput_cdf.png")


def plot_tiers(run_dir: Path, metrics: pd.DataFrame) -> Path | None:
    """Utilisation of the busiest link of every tier, measured vs model, per fabric."""
    df = pd.read_csv(run_dir / "tiers.csv")
    fabrics = list(dict.fromkeys(df.fabric))
    fig, axes = plt.subplots(1, len(fabrics), figsize=(5.5 * len(fabrics), 4), squeeze=False)
    for ax, fabric in zip(axes[0], fabrics, strict=True):
        g = df[df.fabric == fabric]
        x = np.arange(len(g))
        ax.bar(x - 0.2, g.utilisation_measured, 0.4, label="measured")
        ax.bar(x + 0.2, g.utilisation_model, 0.4, label="model")
        ax.set_xticks(x, g.tier, rotation=20, fontsize=8)
        ax.set_ylim(0, 1.15)
        ax.set_ylabel("busiest link utilisation")
        ax.set_title(fabric, fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, run_dir / "tier_utilisation.png")


PLOTS: dict[str, Callable[[Path, pd.DataFrame], Path | None]] = {
    "queue.csv": plot_queue, "latency.csv": plot_latency, "rates.csv": plot_rates,
    "collective.csv": plot_busbw, "flows.csv": plot_flows, "tiers.csv": plot_tiers,
}


def render_plots(run_dir: Path) -> list[Path]:
    metrics = pd.read_csv(run_dir / "metrics.csv")
    made = []
    for csv, plot in PLOTS.items():
        if (run_dir / csv).exists() and (run_dir / csv).stat().st_size > 0:
            path = plot(run_dir, metrics)
            if path is not None:
                made.append(path)
    return made


def _fmt(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, float):
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-2):
            return f"{x:.3g}"
        return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}"
    return str(x)


def _err(err: float | None) -> str:
    if err is None:
        return "n/a"
    color = "green" if abs(err) <= 0.05 else "yellow" if abs(err) <= 0.15 else "red"
    return f"[{color}]{err:+.1%}[/]"


def summary_table(summary: Mapping[str, Any], title: str) -> Table:
    table = Table(title=title)
    for col, just in (("case", "left"), ("metric", "left"), ("unit", "left"),
                      ("measured", "right"), ("model", "right"), ("error", "right"),
                      ("valid", "center")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in summary["metrics"]:
        table.add_row(r["case"], r["metric"], r["unit"], _fmt(r["measured"]),
                      _fmt(r["predicted"]), _err(r.get("error_rel")),
                      "[green]yes[/]" if r.get("valid") else "[red]no[/]")
    return table


def render_report(run_dir: str | Path, show: bool = True) -> list[Path]:
    """Re-render a finished run: plots from its CSVs and the summary table."""
    run_dir = Path(run_dir)
    if not (run_dir / "summary.json").exists():
        raise ParameterError("run_dir", str(run_dir), "no summary.json: not a finished run")
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    made = render_plots(run_dir)
    if not show:
        return made
    console.print(summary_table(summary, f"{summary['experiment']}: measured vs model "
                                         f"(real-fabric units, S = {config.get('scale')})"))
    for case, rep in summary["cases"].items():
        if rep["valid"]:
            console.print(f"[green]fidelity ok[/]  {case}")
        else:
            console.print(f"[red]fidelity FAILED[/]  {case}: " + "; ".join(rep["reasons"]))
    verdict = "[green]VALID[/]" if summary["valid"] else \
        f"[red]INVALID[/] (suggested S = {summary['suggested_scale']:g})"
    console.print(f"run {verdict}; results in {run_dir}/ (summary.json, config.json, "
                  f"{len(list(run_dir.glob('*.csv')))} CSVs)")
    for p in made:
        console.print(f"  plot: {p}")
    return made

"""The plots of a finished run directory: PNGs from its tidy CSVs (``render_plots``;
the collective sweeps' are `experiments.plots_collective`'s),
each CSV read and checked for the columns its plot needs (``read_csv``, ``CSV_COLUMNS``,
from `experiments.plotkit`). `experiments.report` renders them with the summary tables.

Every figure states S and that its axes are real-fabric units; a case the fidelity
gate refused is drawn hollow and grey and says so in its legend; sizes read in B, KiB
and MiB (``bytes_formatter``); cases are panels of a grid with shared axes, scenario by
algorithm where the run has a cc.csv (``case_grid``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on a test runner or in a VM

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from core import safefile  # noqa: E402
from core.forkmap import forked_map  # noqa: E402
from experiments.plotkit import (  # noqa: E402
    CSV_COLUMNS,
    GBPS,
    INVALID_LABEL,
    INVALID_SERIES,
    MAX_FIG_IN,
    US,
    PlotContext,
    bad_run,
    case_grid,
    ccdf,
    finish_grid,
    invalid_handle,
    panel_title,
    read_csv,
    save_plot,
    scenario_rank,
    size_axis,
)
from experiments.plots_collective import plot_busbw, plot_nccl  # noqa: E402
from experiments.plots_failure import plot_flow_rates  # noqa: E402
from experiments.plots_routing import plot_link_load, plot_routing  # noqa: E402
from experiments.plots_workload import plot_layouts, plot_timeline, plot_tokens  # noqa: E402
from experiments.storage import MAX_RUN_JSON_BYTES  # noqa: E402

#: Threshold lines of the queue plot: ports.csv column, label, line style.
_LEVELS = (("kmin_bytes", "Kmin", (0, (4, 2))), ("kmax_bytes", "Kmax", (0, (1, 1))),
           ("xoff_bytes", "Xoff", (0, (6, 2, 1, 2))), ("xon_bytes", "Xon", (0, (2, 3))))


def _port_levels(run_dir: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(case, port) -> the marking and PFC thresholds in force there, from ports.csv
    (a run without them, or an older run, has none)."""
    path = run_dir / "ports.csv"
    if not path.exists():
        return {}
    ports = read_csv(path, (), ())
    if not {"case", "port"} <= set(ports.columns):
        return {}
    cols = [c for c, _, _ in _LEVELS if c in ports.columns]
    out = {}
    for row in ports[["case", "port", *cols]].itertuples(index=False):
        levels = {c: float(v) for c, v in zip(cols, row[2:], strict=True)
                  if pd.notna(pd.to_numeric(v, errors="coerce"))}
        if levels:
            out[(str(row[0]), str(row[1]))] = levels
    return out


def plot_queue(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """Queue depth over time at the busiest port of every case, a panel each, with the
    port's Kmin/Kmax and Xoff/Xon where it marks or pauses, and the model's queue."""
    model_csv = ctx.run_dir / "queue_model.csv"
    model = read_csv(model_csv, *CSV_COLUMNS["queue_model.csv"]) if model_csv.exists() else None
    levels = _port_levels(ctx.run_dir)
    cases = [str(c) for c in dict.fromkeys(df.case)]
    fig, panels = case_grid(ctx, cases)
    df = df.assign(case=df.case.astype(str))
    for case, ax in panels.items():
        g = df[df.case == case]
        port = g.groupby("port")["backlog_bytes"].max().idxmax()
        s = g[g.port == port]
        ax.plot(s.t_s * US, s.backlog_bytes / 1e3, lw=1, color="C0", label="queue",
                **({} if ctx.valid(case) else INVALID_SERIES))
        if model is not None:
            mq = model[model.case.astype(str) == case]
            if not mq.empty:
                ax.plot(mq.t_s * US, mq.queue_bytes / 1e3, ls="--", lw=1, color="C1",
                        label="model")
        at = levels.get((case, str(port)), {})
        for (col, name, style_), color in zip(_LEVELS, ("C2", "C3", "C4", "C5"), strict=True):
            if col in at and not (name == "Kmax" and at.get("kmin_bytes") == at[col]):
                label = "K" if name == "Kmin" and at.get("kmax_bytes") == at[col] else name
                ax.axhline(at[col] / 1e3, ls=style_, lw=0.9, color=color,
                           label=f"{label} {at[col] / 1e3:.0f} KB")
        panel_title(ax, ctx, case, f" ({port})")
        ax.legend(fontsize=5, loc="upper right")
        ax.tick_params(labelsize=7)
    return finish_grid(fig, ctx, panels, "queue (KB)", "queue_over_time.png",
                       "bottleneck queue over time (0 = engine start; model: first bits at "
                       "the port)")


#: The tail markers of the latency plot: (metric suffix, its CCDF level).
_TAIL = (("p50", 0.5), ("p99", 1e-2), ("p99.9", 1e-3))


def plot_latency(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """One-way latency CCDF per case on a log axis, with the p99 and p99.9 levels and
    the model's p50/p99/p99.9 (x) where it has them; a cc run gets a panel per
    scenario (shared axes) with a colour per algorithm, the same in every panel."""
    df = df.assign(case=df.case.astype(str))
    cases = list(dict.fromkeys(df.case))
    laid = bool(ctx.layout) and all(c in ctx.layout for c in cases)
    groups = (sorted(dict.fromkeys(ctx.layout[c][0] for c in cases), key=scenario_rank)
              if laid else [""])
    algorithms = list(dict.fromkeys(ctx.layout[c][1] for c in cases)) if laid else cases
    ncols = min(3, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True,
                             figsize=(min(MAX_FIG_IN[0], max(8.0, 5.2 * ncols)),
                                      min(MAX_FIG_IN[1], 1.2 + 3.8 * nrows)))
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    metrics = ctx.metrics.assign(case=ctx.metrics.case.astype(str))
    for ax, group in zip(axes.flat, groups, strict=False):
        refused = False
        for case in (c for c in cases if not laid or ctx.layout[c][0] == group):
            ok = ctx.valid(case)
            refused |= not ok
            color = f"C{algorithms.index(ctx.layout[case][1] if laid else case) % 10}"
            xs, ys = ccdf(df[df.case == case].one_way_s.to_numpy() * US)
            label = ctx.layout[case][1] if laid else case
            ax.step(xs, ys, where="post", color=color, lw=1.2,
                    label=label + ("" if ok else " (refused)"),
                    **({} if ok else INVALID_SERIES))
            for q, level in _TAIL:
                row = metrics[(metrics.case == case) & (metrics.metric == f"latency {q}")]
                if not row.empty and pd.notna(row.predicted.iloc[0]):
                    ax.plot(row.predicted.iloc[0], level, "x", color=color, ms=8, mew=1.5)
        for q, level in _TAIL[1:]:
            ax.axhline(level, color="0.5", lw=0.7, ls=":")
            ax.annotate(q, (1.0, level), xycoords=("axes fraction", "data"), fontsize=7,
                        ha="right", va="bottom", color="0.35")
        ax.plot([], [], "x", color="0.3", label="model p50 / p99 / p99.9")
        if refused:
            invalid_handle(ax, series=True)
        ax.set_yscale("log")
        ax.set_ylim(bottom=min(1e-4, 0.5 / max(len(df), 1)), top=1.05)
        if group:
            ax.set_title(group, fontsize=9)
        ax.legend(fontsize=6)
        ax.xaxis.set_tick_params(labelbottom=True)
        ax.set_xlabel("one-way latency (µs)")
    for ax in axes[:, 0]:
        ax.set_ylabel("P(latency ≥ x)")
    return save_plot(fig, ctx.run_dir / "latency_ccdf.png", ctx, "one-way latency CCDF")


#: Markers of the rate plot: trace event (rates.csv ``event``), label, marker.
_EVENTS = (("cnp", "CNP", "v"), ("echo", "ECN-echo ACK", "."), ("timer", "timer", "+"))


def plot_rates(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """The congestion control's sending rate of every flow over time, a panel per case,
    marked where a CNP, an ECN-echo ACK or the algorithm's timer changed it, and the
    window (dashed, right axis) of a window-based algorithm."""
    cases = [str(c) for c in dict.fromkeys(df.case)]
    fig, panels = case_grid(ctx, cases)
    df = df.assign(case=df.case.astype(str))
    events = df.event if "event" in df.columns else pd.Series("send", index=df.index)
    windows = df.window_bytes if "window_bytes" in df.columns else pd.Series(np.nan, df.index)
    twins = []
    for case, ax in panels.items():
        g = df[df.case == case]
        few = g.msg_id.nunique() <= 8
        shown: set[str] = set()
        has_window = windows[g.index].notna().any()
        wax = ax.twinx() if has_window else None
        for i, (msg_id, f) in enumerate(g.groupby("msg_id")):
            color = f"C{i % 10}"
            ax.step(f.t_s * US, f.rate_bps * GBPS, where="post", lw=1, color=color,
                    label=f"flow {msg_id}" if few else None,
                    **({} if ctx.valid(case) else INVALID_SERIES))
            for event, name, marker in _EVENTS:
                at = f[events[f.index] == event]
                if not at.empty:
                    ax.plot(at.t_s * US, at.rate_bps * GBPS, marker, ms=4, color=color,
                            label=None if name in shown else name)
                    shown.add(name)
            if wax is not None:
                wax.step(f.t_s * US, windows[f.index] / 1e3, where="post", lw=0.8, ls="--",
                         color=color, alpha=0.8)
        if wax is not None:
            ax.plot([], [], ls="--", lw=0.8, color="0.3", label="window (right axis)")
            wax.set_ylabel("window (KB)", fontsize=7)
            wax.tick_params(labelsize=6)
            wax.set_ylim(bottom=0)
            twins.append(wax)
        panel_title(ax, ctx, case)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=5, loc="lower right")
        ax.tick_params(labelsize=7)
    return finish_grid(fig, ctx, panels, "rate (Gb/s)", "rate_over_time.png",
                       "congestion control: rate per flow (window dashed where the algorithm "
                       "has one)")


def plot_flows(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """Per-flow throughput CDF: measured vs the model's hash-collision expectation."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    refused = False
    for i, ((case, source), g) in enumerate(df.groupby(["case", "source"], sort=False)):
        ok = ctx.valid(case) or source != "measured"
        refused |= not ok
        xs = np.sort(g.throughput_bps.to_numpy() * GBPS)
        ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post",
                label=f"{case} {source}" + ("" if ok else " (refused)"), lw=1.2,
                color=f"C{i // 2 % 10}", ls="-" if source == "measured" else "--",
                **({} if ok else INVALID_SERIES))
    if refused:
        invalid_handle(ax, series=True)
    ax.set_xlabel("per-flow throughput (Gb/s)")
    ax.set_ylabel("CDF")
    ax.legend(fontsize=7)
    return save_plot(fig, ctx.run_dir / "flow_throughput_cdf.png", ctx,
                 "per-flow throughput (solid: measured, dashed: model over random hashes)")


def plot_tiers(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """Utilisation of the busiest link of every tier, measured vs model, per fabric."""
    fabrics = list(dict.fromkeys(df.fabric))
    fig, axes = plt.subplots(1, len(fabrics), figsize=(min(MAX_FIG_IN[0], 5.5 * len(fabrics)),
                                                       4.2), squeeze=False, sharey=True)
    for ax, fabric in zip(axes[0], fabrics, strict=True):
        g = df[df.fabric == fabric]
        ok = bool((g.valid.astype(str) == "True").all()) if "valid" in g.columns else True
        x = np.arange(len(g))
        ax.bar(x - 0.2, g.utilisation_measured, 0.4,
               **({"label": "measured"} if ok else {"label": f"measured ({INVALID_LABEL})",
                                                    "color": "none", "edgecolor": "0.5"}))
        ax.bar(x + 0.2, g.utilisation_model, 0.4, label="model")
        ax.set_xticks(x, g.tier, rotation=20, fontsize=8)
        ax.set_ylim(0, 1.15)
        ax.set_title(fabric, fontsize=9)
        ax.legend(fontsize=7)
    axes[0, 0].set_ylabel("busiest link utilisation")
    return save_plot(fig, ctx.run_dir / "tier_utilisation.png", ctx,
                 "busiest link of every tier")


def plot_slowdown(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """FCT slowdown against message size: measured p50/p95/p99 per size bucket (solid)
    and the model's (dashed), per case."""
    if "size_bytes" not in df.columns:  # a run recorded before the buckets' sizes were
        return None
    df = df.assign(size_bytes=pd.to_numeric(df.size_bytes, errors="coerce"))
    fig, ax = plt.subplots(figsize=(8, 4.6))
    refused = False
    for i, (case, g) in enumerate(df.groupby("case", sort=False)):
        g = g.sort_values("size_bytes")
        ok = ctx.valid(case)
        refused |= not ok
        color = f"C{i % 10}"
        for q, marker in (("p50", "o"), ("p95", "s"), ("p99", "^")):
            if q not in g.columns:
                continue
            ax.plot(g.size_bytes, g[q], marker + "-", color=color, lw=1, ms=5,
                    mfc=color if ok else "none", label=f"{case} {q}" + ("" if ok else " (refused)"),
                    **({} if ok else INVALID_SERIES))
            if f"model_{q}" in g.columns and g[f"model_{q}"].notna().any():
                ax.plot(g.size_bytes, g[f"model_{q}"], marker + "--", color=color, lw=0.8,
                        ms=3, mfc="none", alpha=0.7)
    ax.plot([], [], "--", color="0.3", label="model (same marker)")
    if refused:
        invalid_handle(ax)
    ax.axhline(1.0, color="0.5", lw=0.7, ls=":")
    size_axis(ax, label="message size (bucket mean)")
    ax.set_ylabel("FCT slowdown (FCT / FCT alone)")
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.legend(fontsize=6, ncol=2)
    return save_plot(fig, ctx.run_dir / "fct_slowdown_vs_size.png", ctx,
                 "FCT slowdown vs message size (p50 o, p95 s, p99 ^)")


PLOTS: dict[str, Callable[[PlotContext, pd.DataFrame], Path | None]] = {
    "queue.csv": plot_queue, "latency.csv": plot_latency, "rates.csv": plot_rates,
    "collective.csv": plot_busbw, "flows.csv": plot_flows, "tiers.csv": plot_tiers,
    "nccl.csv": plot_nccl, "fct_slowdown.csv": plot_slowdown,
    "timeline.csv": plot_timeline, "layouts.csv": plot_layouts,
    "flow_rates.csv": plot_flow_rates, "routing.csv": plot_routing,
    "link_load.csv": plot_link_load,
    "tokens.csv": plot_tokens,
}

def _scales(config: Mapping[str, Any]) -> tuple[float, ...]:
    """Every S of the run: its own and each fabric's (a fabric may run at its own)."""
    fabrics = config.get("fabrics")
    found = [config.get("scale")] + [f.get("scale") for f in (
        fabrics.values() if isinstance(fabrics, dict) else ()) if isinstance(f, dict)]
    return tuple(sorted({float(s) for s in found if isinstance(s, (int, float))
                         and not isinstance(s, bool)}))


def _layout(run_dir: Path) -> dict[str, tuple[str, str]]:
    """case -> (scenario row, algorithm column) from cc.csv (PFC splits the incast row)."""
    path = run_dir / "cc.csv"
    if not path.exists():
        return {}
    cc = read_csv(path, ("case", "scenario", "cc"), ())
    out = {}
    for r in cc.to_dict("records"):
        scenario = str(r["scenario"])
        if scenario == "incast":
            scenario += ", PFC " + ("on" if str(r.get("pfc")) == "True" else "off")
        out[str(r["case"])] = (scenario, str(r["cc"]))
    return out


def plot_context(run_dir: Path, summary: Mapping[str, Any] | None = None,
                 config: Mapping[str, Any] | None = None) -> PlotContext:
    """The context of a run directory's plots (summary and config read if not given)."""
    def load(name: str) -> Mapping[str, Any]:
        try:
            data = json.loads(safefile.read_regular(run_dir / name, MAX_RUN_JSON_BYTES))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    summary = load("summary.json") if summary is None else summary
    config = load("config.json") if config is None else config
    cases = summary.get("cases")
    cases = cases if isinstance(cases, dict) else {}
    invalid = frozenset(str(c) for c, rep in cases.items()
                        if isinstance(rep, dict) and not rep.get("valid"))
    return PlotContext(run_dir, read_csv(run_dir / "metrics.csv", *CSV_COLUMNS["metrics.csv"]),
                       _scales(config), invalid, _layout(run_dir))


#: The most cases (or fabrics) one plot draws, as panels or lines: beyond, a plot is
#: unreadable and slow to draw (1,500 panels took minutes); the CSVs keep them all.
MAX_DRAWN = 12


def _limit(ctx: PlotContext, df: pd.DataFrame) -> tuple[PlotContext, pd.DataFrame]:
    """``df`` cut to its first MAX_DRAWN cases (or fabrics), and ``ctx`` saying so."""
    col = next((c for c in ("case", "fabric") if c in df.columns), None)
    keys = list(dict.fromkeys(df[col])) if col else []
    if len(keys) <= MAX_DRAWN:
        return ctx, df
    note = f"first {MAX_DRAWN} of {len(keys)} {col}s drawn, all are in the CSV"
    return replace(ctx, limit_note=note), df[df[col].isin(keys[:MAX_DRAWN])]


def _with_csv_verdicts(ctx: PlotContext, df: pd.DataFrame) -> PlotContext:
    """``ctx`` with the cases whose rows of ``df`` its ``valid`` column marks invalid
    as refused too (a measurement whose verdict is given to other cases, such as the
    fairness intervals, has no verdict of its own in summary.json)."""
    if not {"case", "valid"} <= set(df.columns):
        return ctx
    bad = df.loc[df.valid.astype(str) != "True", "case"].astype(str)
    return replace(ctx, invalid=ctx.invalid | frozenset(bad)) if len(bad) else ctx


def _draw(ctx: PlotContext, csv: str) -> Path | None:
    """The plot of the run's ``csv`` (`PLOTS`; the file exists), None where there is
    nothing to draw; ParameterError (one line) for a CSV it cannot draw."""
    run_dir = ctx.run_dir
    df = read_csv(run_dir / csv, *CSV_COLUMNS[csv])
    if df.empty:
        return None
    try:
        drawn_ctx, drawn = _limit(_with_csv_verdicts(ctx, df), df)
        return PLOTS[csv](drawn_ctx, drawn)
    except (TypeError, ValueError, KeyError, IndexError) as e:
        plt.close("all")
        raise bad_run(run_dir, f"cannot plot {csv}: {type(e).__name__}: "
                               f"{' '.join(str(e).split())}") from None


def render_plots(run_dir: Path, summary: Mapping[str, Any] | None = None,
                 config: Mapping[str, Any] | None = None) -> list[Path]:
    """Every plot the run's CSVs make, in `PLOTS`' order, drawn in forked processes
    (`core.forkmap`; a demo's six took 2.2 s in turn): a run ends with the machine to
    itself."""
    ctx = plot_context(run_dir, summary, config)
    todo = [csv for csv in PLOTS if (run_dir / csv).exists()]
    return [path for path in forked_map(partial(_draw, ctx), todo) if path is not None]

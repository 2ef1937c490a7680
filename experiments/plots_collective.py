"""The plots of a collective sweep's run directory: busbw against size per fabric
(``plot_busbw``, collective.csv) and time against size with the model's alpha/beta
crossover (``plot_nccl``, nccl.csv). `experiments.plots` draws them with the others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from experiments.plotkit import (
    CSV_COLUMNS,
    GBYTES,
    INVALID_STYLE,
    MAX_FIG_IN,
    US,
    PlotContext,
    format_bytes,
    invalid_handle,
    plain_log_axis,
    plt,
    read_csv,
    save_plot,
    size_axis,
)


def _model_curve(ctx: PlotContext) -> pd.DataFrame | None:
    """busbw_model.csv, the model's own curve on a dense size grid; None without one."""
    path = ctx.run_dir / "busbw_model.csv"
    return read_csv(path, *CSV_COLUMNS["busbw_model.csv"]) if path.exists() else None


def _valid_rows(df: pd.DataFrame) -> pd.Series:
    """Each row's gate verdict (all valid in a run recorded before CSVs had one)."""
    return (df.valid.astype(str) == "True" if "valid" in df.columns
            else pd.Series(True, index=df.index))


def _measured_and_model(ax: Any, g: pd.DataFrame, ok: pd.Series, measured: pd.Series,
                        curve: pd.DataFrame | None, model: pd.Series | None, at_measured: pd.Series,
                        color: str, label: str) -> None:
    """Measured points of one collective (hollow where the gate refused them) and the
    model: ``model`` along ``curve``'s sizes, or ``at_measured`` joining the measured
    sizes where the run has no curve."""
    ax.plot(g.size_bytes[ok], measured[ok], "o", color=color, label=f"{label} measured")
    if (~ok).any():
        ax.plot(g.size_bytes[~ok], measured[~ok], "o", ms=7, **{**INVALID_STYLE, "color": color})
    if curve is not None and not curve.empty:
        ax.plot(curve.size_bytes, model, "-", color=color, lw=1, label=f"{label} model")
    else:
        ax.plot(g.size_bytes, at_measured, "x--", color=color, lw=1,
                label=f"{label} model (at the measured sizes)")


def _curve_of(curve: pd.DataFrame | None, fabric: str, coll: str) -> pd.DataFrame | None:
    if curve is None:
        return None
    return curve[(curve.fabric == fabric) & (curve.collective == coll)].sort_values("size_bytes")


def plot_busbw(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """busbw (GB/s) vs size per fabric: measured points (hollow where the gate
    refused the case), the model's own curve evaluated on a dense size grid
    (busbw_model.csv; at the measured sizes only where a run has none), and the
    bottleneck rate."""
    curve = _model_curve(ctx)
    fabrics = list(dict.fromkeys(df.fabric))
    fig, axes = plt.subplots(1, len(fabrics), squeeze=False,
                             figsize=(min(MAX_FIG_IN[0], max(8.0, 5.6 * len(fabrics))), 4.4))
    valid = _valid_rows(df)
    for ax, fabric in zip(axes[0], fabrics, strict=True):
        g = df[df.fabric == fabric]
        for i, (coll, s) in enumerate(g.groupby("collective", sort=False)):
            s = s.sort_values("size_bytes")
            c = _curve_of(curve, fabric, coll)
            _measured_and_model(ax, s, valid[s.index], s.busbw_bps * GBYTES, c,
                                None if c is None else c.busbw_model_bps * GBYTES,
                                s.busbw_model_bps * GBYTES, f"C{i % 10}", coll)
        ax.axhline(g.bottleneck_bps.min() * GBYTES, color="grey", lw=0.8, ls=":",
                   label="bottleneck rate")
        if (~valid[g.index]).any():
            invalid_handle(ax)
        size_axis(ax)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(fabric, fontsize=9)
        ax.legend(fontsize=7)
    return save_plot(fig, ctx.run_dir / "busbw_vs_size.png", ctx,
                 "busbw vs size (points: measured; line: the model)")


def crossover_bytes(g: pd.DataFrame) -> float | None:
    """Size where the model's latency term alpha equals its bandwidth term, from the
    line T = alpha + beta S through its smallest and largest size."""
    if g.size_bytes.nunique() < 2:
        return None
    g = g.sort_values("size_bytes")
    s0, s1 = float(g.size_bytes.iloc[0]), float(g.size_bytes.iloc[-1])
    t0, t1 = float(g.model_time_us.iloc[0]), float(g.model_time_us.iloc[-1])
    beta_us_per_byte = (t1 - t0) / (s1 - s0)
    alpha_us = t0 - beta_us_per_byte * s0
    return alpha_us / beta_us_per_byte if beta_us_per_byte > 0 and alpha_us > 0 else None


def plot_nccl(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """Time against size (log-log): measured points (hollow where refused), the model's
    curve (busbw_model.csv's dense grid), and the crossover size alpha/beta of each
    collective (latency regime left of it). busbw is busbw_vs_size.png's."""
    curve = _model_curve(ctx)
    fig, ax = plt.subplots(figsize=(8, 4.8))
    valid = _valid_rows(df)
    for i, ((fabric, coll), g) in enumerate(df.groupby(["fabric", "collective"], sort=False)):
        g = g.sort_values("size_bytes")
        color = f"C{i % 10}"
        label = f"{coll} ({fabric})" if df.fabric.nunique() > 1 else coll
        c = _curve_of(curve, fabric, coll)
        _measured_and_model(ax, g, valid[g.index], g.time_us, c,
                            None if c is None else c.time_model_s * US, g.model_time_us,
                            color, label)
        cross = crossover_bytes(g)
        if cross is not None:
            ax.axvline(cross, color=color, ls=":", lw=0.9)
            ax.annotate(f"α/β ≈ {format_bytes(cross)}", (cross, 0.02), color=color,
                        xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        ha="right", va="bottom")
    if (~valid).any():
        invalid_handle(ax)
    size_axis(ax)
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis, *ax.get_ylim())
    ax.set_ylabel("time (µs)")
    ax.legend(fontsize=6)
    return save_plot(fig, ctx.run_dir / "nccl_sweep.png", ctx,
                 "time vs size: α (latency) regime left of the dotted line, β (bandwidth) right")

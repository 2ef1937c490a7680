"""The plots of a collective sweep's run directory: busbw against size per fabric
(``plot_busbw``, collective.csv) and time against size with the model's alpha/beta
crossover (``plot_nccl``, nccl.csv). `experiments.plots` draws them with the others."""

from __future__ import annotations

from pathlib import Path

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


def plot_busbw(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """busbw (GB/s) vs size per fabric: measured points (hollow where the gate
    refused the case), the model's own curve evaluated on a dense size grid
    (busbw_model.csv; at the measured sizes only where a run has none), and the
    bottleneck rate."""
    curve_csv = ctx.run_dir / "busbw_model.csv"
    curve = read_csv(curve_csv, *CSV_COLUMNS["busbw_model.csv"]) if curve_csv.exists() \
        else None
    fabrics = list(dict.fromkeys(df.fabric))
    fig, axes = plt.subplots(1, len(fabrics), squeeze=False,
                             figsize=(min(MAX_FIG_IN[0], max(8.0, 5.6 * len(fabrics))), 4.4))
    valid = df.valid.astype(str) == "True" if "valid" in df.columns \
        else pd.Series(True, index=df.index)
    for ax, fabric in zip(axes[0], fabrics, strict=True):
        g = df[df.fabric == fabric]
        for i, (coll, s) in enumerate(g.groupby("collective", sort=False)):
            s = s.sort_values("size_bytes")
            color = f"C{i % 10}"
            ok = valid[s.index]
            ax.plot(s.size_bytes[ok], s.busbw_bps[ok] * GBYTES, "o", color=color,
                    label=f"{coll} measured")
            if (~ok).any():
                ax.plot(s.size_bytes[~ok], s.busbw_bps[~ok] * GBYTES, "o", ms=7,
                        **{**INVALID_STYLE, "color": color})
            c = None if curve is None else curve[(curve.fabric == fabric)
                                                 & (curve.collective == coll)]
            if c is not None and not c.empty:
                c = c.sort_values("size_bytes")
                ax.plot(c.size_bytes, c.busbw_model_bps * GBYTES, "-", color=color, lw=1,
                        label=f"{coll} model")
            else:
                ax.plot(s.size_bytes, s.busbw_model_bps * GBYTES, "x--", color=color, lw=1,
                        label=f"{coll} model (at the measured sizes)")
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
    curve_csv = ctx.run_dir / "busbw_model.csv"
    curve = read_csv(curve_csv, *CSV_COLUMNS["busbw_model.csv"]) if curve_csv.exists() \
        else None
    fig, ax = plt.subplots(figsize=(8, 4.8))
    valid = df.valid.astype(str) == "True" if "valid" in df.columns \
        else pd.Series(True, index=df.index)
    for i, ((fabric, coll), g) in enumerate(df.groupby(["fabric", "collective"], sort=False)):
        g = g.sort_values("size_bytes")
        color = f"C{i % 10}"
        label = f"{coll} ({fabric})" if df.fabric.nunique() > 1 else coll
        ok = valid[g.index]
        ax.plot(g.size_bytes[ok], g.time_us[ok], "o", color=color, label=f"{label} measured")
        if (~ok).any():
            ax.plot(g.size_bytes[~ok], g.time_us[~ok], "o", ms=7,
                    **{**INVALID_STYLE, "color": color})
        c = None if curve is None else curve[(curve.fabric == fabric)
                                             & (curve.collective == coll)]
        if c is not None and not c.empty:
            c = c.sort_values("size_bytes")
            ax.plot(c.size_bytes, c.time_model_s * US, "-", color=color, lw=1,
                    label=f"{label} model")
        else:
            ax.plot(g.size_bytes, g.model_time_us, "x--", color=color, lw=1,
                    label=f"{label} model (at the measured sizes)")
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

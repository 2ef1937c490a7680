"""The plots of a workload, training or inference run: every rank's timeline (compute
and each dimension's waits, measured beside the model; ``plot_timeline``, timeline.csv),
the iteration time of every layout, measured beside the model and its no-sharing lower
bound (``plot_layouts``, layouts.csv), and inference's TTFT and time per output token
(``plot_tokens``, tokens.csv). `experiments.plots` draws them with the others."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from experiments.plotkit import MAX_FIG_IN, US, PlotContext, plt, save_plot

#: Colours of a timeline's segments: compute, then the dimensions of traffic.iteration.
_COLOURS = {"compute": "0.75", "tp": "C0", "pp": "C1", "dp": "C2", "ep": "C3"}


def plot_timeline(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """Per case, one row per rank and source (measured, model): compute in grey, each
    wait coloured by the dimension it waited for."""
    cases = list(dict.fromkeys(df.case.astype(str)))
    df = df.assign(case=df.case.astype(str))
    n_rows = max(len(set(zip(g["rank"], g.source, strict=True)))
                 for _, g in df.groupby("case"))
    fig, axes = plt.subplots(len(cases), 1, squeeze=False, figsize=(
        MAX_FIG_IN[0] * 0.6, min(MAX_FIG_IN[1], 1.0 + 0.22 * n_rows * len(cases))))
    for ax, case in zip(axes[:, 0], cases, strict=True):
        g = df[df.case == case]
        rows = list(dict.fromkeys(zip(g["rank"].astype(str), g.source.astype(str),
                                      strict=True)))
        y = {row: i for i, row in enumerate(rows)}
        seen: set[str] = set()
        for seg in g.itertuples():
            what = str(seg.what)
            colour = _COLOURS.get(what, "C4")
            label = what if what not in seen else None
            seen.add(what)
            ax.barh(y[(str(seg.rank), str(seg.source))], (seg.end_s - seg.start_s) * US,
                    left=seg.start_s * US, height=0.8, color=colour, label=label, lw=0)
        ax.set_yticks(range(len(rows)), [f"{r} {s}" for r, s in rows], fontsize=6)
        ax.invert_yaxis()
        ax.set_xlabel("time (us)")
        ax.set_title(case, fontsize=9)
        ax.legend(fontsize=7, ncol=len(seen), loc="lower right")
    return save_plot(fig, ctx.run_dir / "timeline.png", ctx,
                     "rank timelines: compute and waits by dimension, measured and model")


def plot_layouts(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """Iteration time per layout: measured bars beside the model and the lower bound."""
    fig, ax = plt.subplots(figsize=(min(MAX_FIG_IN[0], 2.0 + 1.6 * len(df)), 4.2))
    x = np.arange(len(df))
    valid = df.valid.astype(str) == "True" if "valid" in df.columns else [True] * len(df)
    ax.bar(x - 0.27, df.iteration_s * US, 0.27, label="measured",
           color=["C0" if ok else "none" for ok in valid], edgecolor="C0")
    ax.bar(x, df.iteration_model_s * US, 0.27, label="model (fluid DAG)", color="C1")
    ax.bar(x + 0.27, df.iteration_lower_s * US, 0.27, label="no link shared (lower bound)",
           color="C2")
    ax.set_xticks(x, df.layout.astype(str), rotation=15, fontsize=7)
    ax.set_ylabel("iteration time (us)")
    top = max(df.iteration_s.max(), df.iteration_model_s.max()) * US
    ax.set_ylim(0, 1.35 * top)   # room for the legend above the bars
    ax.legend(fontsize=7, loc="upper left")
    return save_plot(fig, ctx.run_dir / "layouts.png", ctx, "iteration time per layout")


def plot_tokens(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    """Inference: the distribution (CDF) of TTFT over requests and of the time per output
    token over decode steps, per case, measured (solid) beside the model (dashed), and
    the network's share of each at its p50 in the legend."""
    fig, axes = plt.subplots(1, 2, figsize=(min(MAX_FIG_IN[0], 11.0), 4.2))
    for ax, (kind, title) in zip(axes, (("ttft", "time to first token"),
                                        ("tpot", "time per output token")), strict=True):
        for i, (case, g) in enumerate(df[df.kind == kind].groupby("case", sort=False)):
            for source, style in (("measured", "-"), ("model", "--")):
                x = g[g.source == source]
                if x.empty:
                    continue
                times = np.sort(x.time_s.to_numpy(dtype=float)) * US
                share = float(np.median(x.network_s / x.time_s)) * 100
                ax.step(times, np.arange(1, len(times) + 1) / len(times), style,
                        where="post", color=f"C{i % 10}", lw=1.2 if source == "measured" else 0.9,
                        label=f"{case}, {source} (network p50 {share:.0f} %)"
                        + ("" if source == "model" or ctx.valid(case) else " (refused)"))
        ax.set_xlabel(f"{title} (us)")
        ax.set_ylabel("fraction")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=6, loc="lower right")
    return save_plot(fig, ctx.run_dir / "tokens.png", ctx,
                     "TTFT and time per output token, measured (solid) and model (dashed)")

"""The failure experiment's timeline plot: each flow's delivery rate over time, one
panel per case, with the moments of failure and of the fabric's reroute marked."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.plotkit import GBPS, US, PlotContext, panel_title, plt, save_plot

#: Points of each panel's time grid: enough for a flow's steps to show.
GRID_POINTS = 400


def flow_rates(df: pd.DataFrame, grid_s: np.ndarray) -> dict[str, np.ndarray]:
    """Each flow's rate on ``grid_s``: the sum of the mean rates of its messages alive
    (first frame to delivery) at each instant."""
    out = {}
    for flow, msgs in df.groupby("flow"):
        alive = ((grid_s[:, None] >= msgs.start_s.to_numpy()[None, :])
                 & (grid_s[:, None] < msgs.end_s.to_numpy()[None, :]))
        out[str(flow)] = alive @ msgs.rate_bps.to_numpy()
    return out


def plot_flow_rates(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    cases = list(dict.fromkeys(df.case))
    ncols = min(3, len(cases))
    nrows = math.ceil(len(cases) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(min(17.5, 5.0 * ncols), 2.6 * nrows + 0.8),
                             squeeze=False)
    for ax in axes.flat[len(cases):]:
        ax.set_visible(False)
    for ax, case in zip(axes.flat, cases, strict=False):
        rows = df[df.case == case]
        grid = np.linspace(0.0, float(rows.end_s.max()), GRID_POINTS)
        faded = {} if ctx.valid(case) else {"alpha": 0.4}
        for rate in flow_rates(rows, grid).values():
            ax.plot(grid * US, rate * GBPS, lw=0.6, **faded)
        fail_at, detect = float(rows.fail_at_s.iloc[0]), float(rows.detect_s.iloc[0])
        if "no failure" not in case:
            ax.axvline(fail_at * US, color="red", lw=0.9, ls="--", label="failure")
            if detect > 0 and fail_at + detect <= grid[-1]:
                ax.axvline((fail_at + detect) * US, color="darkorange", lw=0.9, ls=":",
                           label="detection: reroute")
            ax.legend(fontsize=6, loc="upper right")
        panel_title(ax, ctx, case)
        ax.set_xlabel("time (µs)", fontsize=7)
        ax.set_ylabel("flow rate (Gb/s)", fontsize=7)
        ax.tick_params(labelsize=6)
    return save_plot(fig, ctx.run_dir / "failure_timeline.png", ctx,
                     "delivery rate of each flow (its messages' mean rates), failure and reroute")

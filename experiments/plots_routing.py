"""The routing comparison's figures (`emu run routing`): busbw per mode beside the ideal
balanced bound and ECMP's expected collision loss (routing.csv), and a heat map of
every switch-to-switch link's load per case (link_load.csv). `experiments.plots`
draws them with the others.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on a test runner or in a VM

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.plotkit import (  # noqa: E402
    GBPS,
    INVALID_LABEL,
    MAX_FIG_IN,
    PlotContext,
    save_plot,
)


def plot_routing(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    workloads = list(dict.fromkeys(df.workload))
    fig, axes = plt.subplots(1, len(workloads), squeeze=False,
                             figsize=(min(MAX_FIG_IN[0], 3.6 * len(workloads) + 0.6), 3.4))
    for ax, name in zip(axes.flat, workloads, strict=True):
        rows = df[df.workload == name]
        x = np.arange(len(rows))
        valid = [ctx.valid(c) for c in rows.case]
        ax.bar(x, rows.busbw_bps * GBPS, color=["C0" if v else "none" for v in valid],
               edgecolor=["C0" if v else "0.45" for v in valid], label="measured")
        ax.axhline(float(rows.ideal_busbw_bps.iloc[0]) * GBPS, color="green", ls="--", lw=1,
                   label="ideal balanced, routed paths (bound for minimal routing)")
        ax.axhline(float(rows.ecmp_busbw_bps.iloc[0]) * GBPS, color="red", ls=":", lw=1,
                   label="ECMP expected (hash draws)")
        if not all(valid):
            ax.bar([], [], color="none", edgecolor="0.45", label=INVALID_LABEL)
        ax.set_xticks(x, [str(m) for m in rows["mode"]], rotation=30, ha="right", fontsize=7)
        ax.set_title(name, fontsize=8)
        ax.set_ylabel("busbw (Gb/s)", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=6, loc="lower right")
    return save_plot(fig, ctx.run_dir / "routing_busbw.png", ctx, "busbw per routing mode")


def plot_link_load(ctx: PlotContext, df: pd.DataFrame) -> Path | None:
    cases = list(dict.fromkeys(df.case))
    links = list(dict.fromkeys(zip(df.src, df.dst, strict=True)))
    grid = np.full((len(cases), len(links)), math.nan)
    col = {link: j for j, link in enumerate(links)}
    for i, case in enumerate(cases):
        rows = df[df.case == case]
        mean = float(rows.tx_bytes.mean())
        for r in rows.itertuples():
            grid[i, col[(r.src, r.dst)]] = r.tx_bytes / mean if mean > 0 else 0.0
    fig, ax = plt.subplots(figsize=(min(MAX_FIG_IN[0], 2.5 + 0.12 * len(links)),
                                    min(MAX_FIG_IN[1], 1.5 + 0.3 * len(cases))))
    image = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_yticks(range(len(cases)),
                  [c + ("" if ctx.valid(c) else " (refused)") for c in cases], fontsize=6)
    ax.set_xticks(range(len(links)), [f"{u}>{v}" for u, v in links], rotation=90, fontsize=4)
    ax.set_xlabel("switch-to-switch link (egress > next switch)", fontsize=7)
    fig.colorbar(image, ax=ax, label="bytes sent / the case's mean link")
    return save_plot(fig, ctx.run_dir / "link_load.png", ctx,
                     "per-link load of the fabric (1 = perfectly balanced)")

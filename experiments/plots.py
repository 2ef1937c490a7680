"""The plots of a finished run directory: PNGs from its tidy CSVs (``render_plots``),
each CSV read and checked for the columns its plot needs (``read_csv``, ``CSV_COLUMNS``).
`experiments.report` renders them with the summary tables.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on a test runner or in a VM

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from core.errors import ParameterError  # noqa: E402
from core.safefile import save_figure  # noqa: E402

_US = 1e6
_GBPS = 1e-9


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


#: The most cases (or fabrics) one plot draws, as panels or lines: beyond, a plot is
#: unreadable and slow to draw (1,500 panels took minutes); the CSVs keep them all.
MAX_DRAWN = 12


def _limit(df: pd.DataFrame, col: str) -> tuple[pd.DataFrame, str]:
    """``df`` cut to its first MAX_DRAWN values of ``col``, and a note saying so."""
    keys = list(dict.fromkeys(df[col]))
    if len(keys) <= MAX_DRAWN:
        return df, ""
    return (df[df[col].isin(keys[:MAX_DRAWN])],
            f"first {MAX_DRAWN} of {len(keys)} {col}s (all are in the CSV)")


def _cdf(ax: Any, values: np.ndarray, **kw: Any) -> None:
    xs = np.sort(values)
    ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), **kw)


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


def plot_queue(run_dir: Path, df: pd.DataFrame, metrics: pd.DataFrame) -> Path | None:
    """Queue depth over time at the busiest port of every case, a panel each, with the
    port's Kmin/Kmax and Xoff/Xon where it marks or pauses, and the model's queue."""
    model_csv = run_dir / "queue_model.csv"
    model = read_csv(model_csv, *CSV_COLUMNS["queue_model.csv"]) if model_csv.exists() else None
    levels = _port_levels(run_dir)
    df, note = _limit(df, "case")
    cases = list(dict.fromkeys(df.case))
    fig, axes = plt.subplots(len(cases), 1, figsize=(8, 2.4 * len(cases) + 0.6), squeeze=False)
    if note:
        fig.suptitle(note, fontsize=9)
    for ax, case in zip(axes[:, 0], cases, strict=True):
        g = df[df.case == case]
        port = g.groupby("port")["backlog_bytes"].max().idxmax()
        s = g[g.port == port]
        ax.plot(s.t_s * _US, s.backlog_bytes / 1e3, lw=1, color="C0", label="queue")
        if model is not None:
            mq = model[model.case == case]
            if not mq.empty:
                ax.plot(mq.t_s * _US, mq.queue_bytes / 1e3, ls="--", lw=1, color="C1",
                        label="model")
        at = levels.get((str(case), str(port)), {})
        for (col, name, style), color in zip(_LEVELS, ("C2", "C3", "C4", "C5"), strict=True):
            if col in at and not (name == "Kmax" and at.get("kmin_bytes") == at[col]):
                label = "K" if name == "Kmin" and at.get("kmax_bytes") == at[col] else name
                ax.axhline(at[col] / 1e3, ls=style, lw=0.9, color=color,
                           label=f"{label} {at[col] / 1e3:.0f} KB")
        ax.set_title(f"bottleneck queue: {case} ({port})", fontsize=9)
        ax.set_ylabel("queue (KB)")
        ax.legend(fontsize=6, loc="upper right")
    axes[-1, 0].set_xlabel("time (µs, real; 0 = engine start, model: first bits at the port)")
    return _save(fig, run_dir / "queue_over_time.png")


def plot_latency(run_dir: Path, df: pd.DataFrame, metrics: pd.DataFrame) -> Path | None:
    """One-way latency CDF per case; the model's p50/p99/p99.9 as markers."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    df, note = _limit(df, "case")
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
    ax.set_title("latency CDF (x = model p50/p99/p99.9)" + (f"; {note}" if note else ""))
    ax.legend(fontsize=7)
    return _save(fig, run_dir / "latency_cdf.png")


#: Markers of the rate plot: trace event (rates.csv ``event``), label, marker.
_EVENTS = (("cnp", "CNP", "v"), ("echo", "ECN-echo ACK", "."), ("timer", "timer", "+"))


def plot_rates(run_dir: Path, df: pd.DataFrame, metrics: pd.DataFrame) -> Path | None:
    """The congestion control's sending rate of every flow over time, a panel per case,
    marked where a CNP, an ECN-echo ACK or the algorithm's timer changed it."""
    df, note = _limit(df, "case")
    cases = list(dict.fromkeys(df.case))
    fig, axes = plt.subplots(len(cases), 1, figsize=(8, 2.6 * len(cases)), squeeze=False)
    if note:
        fig.suptitle(note, fontsize=9)
    events = df.event if "event" in df.columns else pd.Series("send", index=df.index)
    for ax, case in zip(axes[:, 0], cases, strict=True):
        g = df[df.case == case]
        few = g.msg_id.nunique() <= 8
        shown: set[str] = set()
        for i, (msg_id, f) in enumerate(g.groupby("msg_id")):
            color = f"C{i % 10}"
            ax.step(f.t_s * _US, f.rate_bps * _GBPS, where="post", lw=1, color=color,
                    label=f"flow {msg_id}" if few else None)
            for event, name, marker in _EVENTS:
                at = f[events[f.index] == event]
                if not at.empty:
                    ax.plot(at.t_s * _US, at.rate_bps * _GBPS, marker, ms=4, color=color,
                            label=None if name in shown else name)
                    shown.add(name)
        ax.set_title(case, fontsize=9)
        ax.set_ylabel("rate (Gb/s)")
        ax.legend(fontsize=6, loc="upper right")
    axes[-1, 0].set_xlabel("time (µs, real)")
    return _save(fig, run_dir / "rate_over_time.png")


def plot_busbw(run_dir: Path, df: pd.DataFrame, metrics: pd.DataFrame) -> Path | None:
    """busbw vs size per fabric: measured points, model lines, bottleneck rate."""
    df, note = _limit(df, "fabric")
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
    fig.suptitle("busbw vs size (points: measured, dashed: model)"
                 + (f"; {note}" if note else ""), fontsize=10)
    return _save(fig, run_dir / "busbw_vs_size.png")


def plot_flows(run_dir: Path, df: pd.DataFrame, metrics: pd.DataFrame) -> Path | None:
    """Per-flow throughput CDF: measured vs the model's hash-collision expectation."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    df, note = _limit(df, "case")
    for i, ((case, source), g) in enumerate(df.groupby(["case", "source"], sort=False)):
        _cdf(ax, g.throughput_bps.to_numpy() * _GBPS, label=f"{case} {source}",
             color=f"C{i // 2 % 10}", ls="-" if source == "measured" else "--", lw=1.2)
    ax.set_xlabel("per-flow throughput (Gb/s, real)")
    ax.set_ylabel("CDF")
    ax.set_title("per-flow throughput (solid: measured, dashed: model over random hashes)"
                 + (f"; {note}" if note else ""), fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, run_dir / "flow_throughput_cdf.png")


def plot_tiers(run_dir: Path, df: pd.DataFrame, metrics: pd.DataFrame) -> Path | None:
    """Utilisation of the busiest link of every tier, measured vs model, per fabric."""
    df, note = _limit(df, "fabric")
    fabrics = list(dict.fromkeys(df.fabric))
    fig, axes = plt.subplots(1, len(fabrics), figsize=(5.5 * len(fabrics), 4), squeeze=False)
    if note:
        fig.suptitle(note, fontsize=9)
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


def plot_nccl(run_dir: Path, df: pd.DataFrame, metrics: pd.DataFrame) -> Path | None:
    """Time and busbw against size (log-log): measured points, model lines, and the
    crossover size alpha/beta of each collective (latency regime left of it)."""
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(12, 4.6))
    for i, ((fabric, coll), g) in enumerate(df.groupby(["fabric", "collective"], sort=False)):
        g = g.sort_values("size_bytes")
        color = f"C{i % 10}"
        label = f"{coll} ({fabric})" if df.fabric.nunique() > 1 else coll
        ax_t.plot(g.size_bytes, g.time_us, "o", color=color, label=f"{label} measured")
        ax_t.plot(g.size_bytes, g.model_time_us, "--", color=color, lw=1, label=f"{label} model")
        ax_b.plot(g.size_bytes, g.busbw_GBps, "o", color=color, label=f"{label} measured")
        ax_b.plot(g.size_bytes, g.model_busbw_GBps, "--", color=color, lw=1,
                  label=f"{label} model")
        cross = crossover_bytes(g)
        if cross is not None:
            for ax in (ax_t, ax_b):
                ax.axvline(cross, color=color, ls=":", lw=0.9)
            ax_b.annotate(f"α/β ≈ {cross / 1024:.0f} KiB", (cross, 0.02), color=color,
                          xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                          ha="right", va="bottom")
    for ax, what in ((ax_t, "time (µs, real)"), (ax_b, "busbw (GB/s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(what)
        ax.legend(fontsize=6)
    ax_t.set_title("time: α (latency) regime left of the dotted line, β (bandwidth) right",
                   fontsize=9)
    ax_b.set_title("busbw (points: measured, dashed: real-fabric model)", fontsize=9)
    return _save(fig, run_dir / "nccl_sweep.png")


PLOTS: dict[str, Callable[[Path, pd.DataFrame, pd.DataFrame], Path | None]] = {
    "queue.csv": plot_queue, "latency.csv": plot_latency, "rates.csv": plot_rates,
    "collective.csv": plot_busbw, "flows.csv": plot_flows, "tiers.csv": plot_tiers,
    "nccl.csv": plot_nccl,
}

#: Columns each CSV must have to be plotted: (all, of which numeric).
CSV_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "metrics.csv": (("case", "metric", "predicted"), ("predicted",)),
    "queue.csv": (("case", "port", "t_s", "backlog_bytes"), ("t_s", "backlog_bytes")),
    "queue_model.csv": (("case", "t_s", "queue_bytes"), ("t_s", "queue_bytes")),
    "latency.csv": (("case", "one_way_s"), ("one_way_s",)),
    "rates.csv": (("case", "msg_id", "t_s", "rate_bps"), ("t_s", "rate_bps")),
    "collective.csv": (("fabric", "collective", "size_bytes", "busbw_bps", "busbw_model_bps",
                        "bottleneck_bps"),
                       ("size_bytes", "busbw_bps", "busbw_model_bps", "bottleneck_bps")),
    "flows.csv": (("case", "source", "throughput_bps"), ("throughput_bps",)),
    "tiers.csv": (("fabric", "tier", "utilisation_measured", "utilisation_model"),
                  ("utilisation_measured", "utilisation_model")),
    "nccl.csv": (("fabric", "collective", "size_bytes", "count", "type", "redop", "time_us",
                  "algbw_GBps", "busbw_GBps", "model_time_us", "model_busbw_GBps", "error"),
                 ("size_bytes", "time_us", "busbw_GBps", "model_time_us", "model_busbw_GBps")),
}


def bad_run(run_dir: Path, why: str) -> ParameterError:
    return ParameterError("run_dir", str(run_dir), why)


def read_csv(path: Path, columns: tuple[str, ...], numeric: tuple[str, ...]) -> pd.DataFrame:
    """A CSV of a run directory with the columns a plot needs (numeric where it must);
    ParameterError naming the file otherwise."""
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=list(columns))
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError) as e:
        raise bad_run(path.parent, f"{path.name} is not a readable CSV "
                                    f"({' '.join(str(e).split())})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise bad_run(path.parent, f"{path.name} lacks the column(s) {', '.join(missing)}")
    for col in numeric:
        try:
            df[col] = pd.to_numeric(df[col])
        except (TypeError, ValueError):
            raise bad_run(path.parent, f"{path.name} has non-numeric {col} values") from None
    return df


def render_plots(run_dir: Path) -> list[Path]:
    metrics = read_csv(run_dir / "metrics.csv", *CSV_COLUMNS["metrics.csv"])
    made = []
    for csv, plot in PLOTS.items():
        if not (run_dir / csv).exists():
            continue
        df = read_csv(run_dir / csv, *CSV_COLUMNS[csv])
        if df.empty:
            continue
        try:
            path = plot(run_dir, df, metrics)
        except (TypeError, ValueError, KeyError, IndexError) as e:
            plt.close("all")
            raise bad_run(run_dir, f"cannot plot {csv}: {type(e).__name__}: "
                                    f"{' '.join(str(e).split())}") from None
        if path is not None:
            made.append(path)
    return made

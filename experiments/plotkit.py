"""The kit every plot of a run directory draws with: the run's context (``PlotContext``:
S, the refused cases, the cc layout), axes in real-fabric units (``format_bytes``,
``size_axis``, ``plain_log_axis``), the grid of a panel per case (``case_grid``) and
its labels, the figure's title and file (``save_plot``), and each CSV read and checked
for the columns its plot needs (``read_csv``, ``CSV_COLUMNS``). `experiments.plots`
draws the figures with it.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on a test runner or in a VM

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from core.errors import ParameterError  # noqa: E402
from core.safefile import ReadError, regular, save_figure  # noqa: E402

US = 1e6
GBPS = 1e-9
GBYTES = 1e-9 / 8
#: How a case the fidelity gate refused is drawn: hollow markers (in the series'
#: colour; grey in the legend); its curves keep their colours (cases and flows stay
#: apart), faded, and its title or label says so.
INVALID_STYLE = {"color": "0.45", "markerfacecolor": "none"}
INVALID_SERIES = {"alpha": 0.4}
INVALID_LABEL = "refused by the fidelity gate"
#: Largest figure (inches) a grid of panels grows to; dpi 110 makes it ~1.9k x 1.4k px.
MAX_FIG_IN = (17.5, 13.0)


@dataclass(frozen=True)
class PlotContext:
    """What every plot of a run needs besides its CSV: the run directory, the summary
    metrics, S, which cases the gate refused, and the cc layout (case -> scenario and
    algorithm, from cc.csv)."""

    run_dir: Path
    metrics: pd.DataFrame
    scales: tuple[float, ...] = ()
    invalid: frozenset[str] = frozenset()
    layout: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    limit_note: str = ""  # says when a plot draws fewer cases than its CSV holds

    def valid(self, case: Any) -> bool:
        return str(case) not in self.invalid

    @property
    def scale_text(self) -> str:
        if not self.scales:
            return "S unknown"
        return ("S = " + " and ".join(f"{s:g}" for s in self.scales)
                + (" (per fabric)" if len(self.scales) > 1 else ""))


def format_bytes(x: float, _pos: Any = None) -> str:
    """A byte count in binary units for an axis: 8 B, 64 KiB, 1.5 MiB, 2 GiB."""
    if not math.isfinite(x) or x <= 0:
        return "0" if x == 0 else ""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= div:
            return f"{x / div:.3g} {unit}"
    return f"{x:.3g} B"


bytes_formatter = FuncFormatter(format_bytes)


def size_axis(ax: Any, axis: str = "x", label: str = "size") -> None:
    """A log2 byte axis with binary-unit ticks (B, KiB, MiB) instead of 10^6."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    target.set_major_locator(LogLocator(base=2, numticks=8))  # at most ~8 labels
    target.set_major_formatter(bytes_formatter)
    target.set_minor_formatter(NullFormatter())
    (ax.set_xlabel if axis == "x" else ax.set_ylabel)(label)


def plain_log_axis(axis: Any, lo: float, hi: float) -> None:
    """A log axis that reads plain numbers (100, 200, 500) instead of 10^2, with the
    2 and 5 of each decade labelled where the axis spans less than two decades."""
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    axis.set_major_formatter(plain)
    axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    axis.set_minor_formatter(plain if hi < 100 * lo else NullFormatter())


def save_plot(fig: Any, path: Path, ctx: PlotContext, title: str) -> Path:
    chars = int(fig.get_size_inches()[0] * 11)
    note = f"; {ctx.limit_note}" if ctx.limit_note else ""
    fig.suptitle(textwrap.fill(f"{title}  [{ctx.scale_text}; real-fabric units{note}]", chars),
                 fontsize=10)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


def invalid_handle(ax: Any, series: bool = False) -> None:
    """The legend entry of the refused cases' style: hollow grey markers, or for
    curves a faded line."""
    if series:
        ax.plot([], [], "-", lw=1.2, color="C0", label=INVALID_LABEL + " (faded)",
                **INVALID_SERIES)
    else:
        ax.plot([], [], "o", ms=5, label=INVALID_LABEL, **INVALID_STYLE)


#: The cc grid's rows, top down (other scenarios follow in the order they ran).
SCENARIO_ORDER = ("incast, PFC off", "incast, PFC on", "fairness", "oscillation", "steady")


def scenario_rank(scenario: str) -> int:
    return SCENARIO_ORDER.index(scenario) if scenario in SCENARIO_ORDER else len(SCENARIO_ORDER)


def case_grid(ctx: PlotContext, cases: list[str], panel_in: tuple[float, float] = (3.0, 2.2)
              ) -> tuple[Any, dict[str, Any]]:
    """A figure with a panel per case: rows = scenarios and columns = algorithms where
    the run's cc.csv lays the cases out (axes shared along a scenario's row), else a
    grid of at most four columns with shared axes. Unused panels are hidden."""
    laid = [c for c in cases if c in ctx.layout]
    if laid and len(laid) == len(cases):
        rows = sorted(dict.fromkeys(ctx.layout[c][0] for c in cases), key=scenario_rank)
        cols = list(dict.fromkeys(ctx.layout[c][1] for c in cases))
        where = {c: (rows.index(ctx.layout[c][0]), cols.index(ctx.layout[c][1])) for c in cases}
        share = "row"
    else:
        ncols = min(4, len(cases))
        rows = list(range(math.ceil(len(cases) / ncols)))
        cols = list(range(ncols))
        where = {c: divmod(i, ncols) for i, c in enumerate(cases)}
        share = "all"
    # A panel or two get room to be read; many stay within MAX_FIG_IN.
    width = min(MAX_FIG_IN[0], max(7.0, panel_in[0] * len(cols) + 0.8))
    height = min(MAX_FIG_IN[1], max(3.6, panel_in[1] * len(rows) + 0.9))
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(width, height), squeeze=False,
                             sharex=share, sharey=share)
    used = set(where.values())
    for (i, j), ax in np.ndenumerate(axes):
        if (i, j) not in used:
            ax.set_visible(False)
    return fig, {c: axes[i, j] for c, (i, j) in where.items()}


def note_refused(fig: Any, ctx: PlotContext, cases: list[str]) -> None:
    """The grid's legend for refused cases (faded curves, grey titles)."""
    if any(not ctx.valid(c) for c in cases):
        fig.text(0.005, 0.005, f"faded, grey title: {INVALID_LABEL}", fontsize=7, color="0.4")


def panel_title(ax: Any, ctx: PlotContext, case: str, extra: str = "") -> None:
    refused = not ctx.valid(case)
    ax.set_title(f"{case}{extra}" + (" (refused)" if refused else ""), fontsize=7,
                 color="0.45" if refused else "black")


def first_column(panels: Mapping[str, Any]) -> list[Any]:
    """The leftmost panel of every row, its y tick labels shown (a shared axis hides
    them beside an unused panel)."""
    leftmost: dict[int, Any] = {}
    for ax in panels.values():
        spec = ax.get_subplotspec()
        row, col = spec.rowspan.start, spec.colspan.start
        if row not in leftmost or col < leftmost[row].get_subplotspec().colspan.start:
            leftmost[row] = ax
    for ax in leftmost.values():
        ax.yaxis.set_tick_params(labelleft=True)
    return list(leftmost.values())


def bottom_row(panels: Mapping[str, Any]) -> list[Any]:
    """The lowest visible panel of every column."""
    lowest: dict[int, Any] = {}
    for ax in panels.values():
        spec = ax.get_subplotspec()
        col, row = spec.colspan.start, spec.rowspan.start
        if col not in lowest or row > lowest[col].get_subplotspec().rowspan.start:
            lowest[col] = ax
    return list(lowest.values())


def finish_grid(fig: Any, ctx: PlotContext, panels: Mapping[str, Any], ylabel: str,
                name: str, title: str) -> Path:
    """Label a `case_grid`'s outer axes (time in µs below, ``ylabel`` on the left), note
    its refused cases and save it as ``name`` in the run directory."""
    for ax in first_column(panels):
        ax.set_ylabel(ylabel, fontsize=8)
    for ax in bottom_row(panels):
        ax.set_xlabel("time (µs)", fontsize=8)
        ax.xaxis.set_tick_params(labelbottom=True)
    note_refused(fig, ctx, list(panels))
    return save_plot(fig, ctx.run_dir / name, ctx, title)


def ccdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CCDF P(X >= x) at the sorted values (1 at the smallest, 1/n at the
    largest), for a log y axis on which the tail percentiles stand apart."""
    xs = np.sort(np.asarray(values, dtype=float))
    return xs, 1.0 - np.arange(len(xs)) / len(xs)


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
    "busbw_model.csv": (("fabric", "collective", "size_bytes", "time_model_s",
                         "busbw_model_bps"), ("size_bytes", "time_model_s", "busbw_model_bps")),
    "flows.csv": (("case", "source", "throughput_bps"), ("throughput_bps",)),
    "tiers.csv": (("fabric", "tier", "utilisation_measured", "utilisation_model"),
                  ("utilisation_measured", "utilisation_model")),
    "nccl.csv": (("fabric", "collective", "size_bytes", "count", "type", "redop", "time_us",
                  "algbw_GBps", "busbw_GBps", "model_time_us", "model_busbw_GBps", "error"),
                 ("size_bytes", "time_us", "busbw_GBps", "model_time_us", "model_busbw_GBps")),
    "fct_slowdown.csv": (("case", "p50"), ("p50",)),
    "timeline.csv": (("case", "source", "rank", "start_s", "end_s", "what"),
                     ("start_s", "end_s")),
    "layouts.csv": (("layout", "iteration_s", "iteration_model_s", "iteration_lower_s"),
                    ("iteration_s", "iteration_model_s", "iteration_lower_s")),
    "tokens.csv": (("case", "source", "kind", "time_s", "network_s"), ("time_s", "network_s")),
    "flow_rates.csv": (("case", "flow", "start_s", "end_s", "rate_bps", "fail_at_s", "detect_s"),
                       ("start_s", "end_s", "rate_bps", "fail_at_s", "detect_s")),
    "routing.csv": (("case", "workload", "mode", "busbw_bps", "ideal_busbw_bps",
                     "ecmp_busbw_bps"), ("busbw_bps", "ideal_busbw_bps", "ecmp_busbw_bps")),
    "link_load.csv": (("case", "src", "dst", "tx_bytes"), ("tx_bytes",)),
}


#: The largest CSV of a run directory a plot reads.
MAX_CSV_BYTES = 1 << 34


def bad_run(run_dir: Path, why: str) -> ParameterError:
    return ParameterError("run_dir", str(run_dir), why)


def read_csv(path: Path, columns: tuple[str, ...], numeric: tuple[str, ...]) -> pd.DataFrame:
    """A CSV of a run directory with the columns a plot needs (numeric where it must);
    ParameterError naming the file otherwise."""
    try:
        df = pd.read_csv(regular(path, MAX_CSV_BYTES))
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=list(columns))
    except ReadError as e:
        raise bad_run(path.parent, f"{path.name} is {e.strerror}") from None
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

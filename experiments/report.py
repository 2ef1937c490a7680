"""Render a finished run directory: PNG plots from its tidy CSVs (`experiments.plots`)
and the rich summary table from ``summary.json``. ``emu report DIR`` calls :func:`render_report`; every
experiment calls it at the end of its run, so a re-render gives the same output.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from core import safefile
from experiments import predictions as user_predictions
from experiments.plots import CSV_COLUMNS, bad_run, read_csv, render_plots
from experiments.runfiles import catch_up
from experiments.storage import MAX_RUN_JSON_BYTES
from model.claims import DCTCP_AMPLITUDE, DCTCP_MEAN, DCTCP_TIMING, Kind

# Off a terminal (CI logs, pipes) rich would wrap the summary table at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)


def _fmt(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, float):
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-2):
            return f"{x:.3g}"
        return f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}"
    return str(x)


def _err_text(row: Mapping[str, Any]) -> str:
    """A prediction's error as text; blank for an estimate, a bound or an ideal (they
    claim no accuracy), 'n/a' for a prediction without a finite error."""
    err = row.get("error_rel")
    if row.get("kind") not in (None, Kind.PREDICTION.value):
        return ""
    if not isinstance(err, (int, float)) or isinstance(err, bool) or not math.isfinite(err):
        return "n/a" if row.get("predicted") is not None else ""
    return f"{err:+.1%}"


def _err(row: Mapping[str, Any]) -> str:
    """:func:`_err_text`, green within the tolerance and red beyond it (yellow for a
    run recorded before models said what they claim)."""
    text = _err_text(row)
    if text in ("", "n/a"):
        return text
    color = "red" if row.get("model_disagrees") else "green" if "kind" in row else "yellow"
    return f"[{color}]{text}[/]"


#: Above this many rows the measured-vs-model table and the fidelity lines are printed
#: as plain lines: rich's table took most of a minute over a 1,500-case sweep.
MAX_TABLE_ROWS = 200


def summary_lines(summary: Mapping[str, Any], title: str) -> str:
    """The rows of :func:`summary_table` as plain fixed-width lines (many cases)."""
    rows = [("case", "metric", "unit", "measured", "model", "model is", "error", "valid")]
    for r in summary["metrics"]:
        rows.append((str(r["case"]), str(r["metric"]), str(r["unit"]), _fmt(r["measured"]),
                     _fmt(r["predicted"]), model_label(r), _err_text(r),
                     "yes" if r.get("valid") else "no"))
    widths = [min(40, max(len(row[i]) for row in rows)) for i in range(len(rows[0]))]
    return "\n".join([title, *("  ".join(cell[:w].ljust(w) if i < 3 else cell.rjust(w)
                                           for i, (cell, w) in enumerate(zip(row, widths,
                                                                             strict=True)))
                                 for row in rows)])


def model_label(row: Mapping[str, Any]) -> str:
    """What the row's model value is: 'prediction ±5%', 'estimate', ...; '' without one,
    'unlabelled' in a run recorded before models said what they claim."""
    if row.get("predicted") is None:
        return ""
    kind, tol = row.get("kind"), row.get("tolerance_rel")
    if kind is None:
        return "unlabelled"
    return f"{kind} ±{tol * 100:g}%" if isinstance(tol, (int, float)) else str(kind)


def summary_table(summary: Mapping[str, Any], title: str) -> Table:
    """Every summary row under its case (a line of its own with the gate's verdict,
    which keeps the table within 80 columns): measured, the model's value, what that
    value is, and for a prediction its error and whether the model disagrees."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for col, just in (("metric (unit)", "left"), ("measured", "right"), ("model", "right"),
                      ("model is", "left"), ("error", "right"), ("verdict", "left")):
        table.add_column(col, justify=just, overflow="fold",  # type: ignore[arg-type]
                         min_width=22 if col == "metric (unit)" else None)
    case = None
    for r in summary["metrics"]:
        if r["case"] != case:
            case = r["case"]
            table.add_row(f"[bold]{escape(str(case))}[/]  " + (
                "[green]valid[/]" if r.get("valid") else "[red]refused by the gate[/]"))
        verdict = "[red]disagrees[/]" if r.get("model_disagrees") else ""
        unit = f" ({r['unit']})" if r.get("unit") else ""
        table.add_row(escape(f"  {r['metric']}{unit}"),
                      _fmt(r["measured"]), "" if r["predicted"] is None else _fmt(r["predicted"]),
                      escape(model_label(r)), _err(r), verdict)
    return table


#: The NCCL-tests-style table's columns: (header, unit, width, format of a value).
NCCL_COLUMNS = (("size", "(B)", 11, "{:d}"), ("count", "(elements)", 11, "{:d}"),
                ("time", "(us)", 9, "{:.2f}"), ("algbw", "(GB/s)", 8, "{:.2f}"),
                ("busbw", "(GB/s)", 8, "{:.2f}"), ("model", "(us)", 10, "{:.2f}"),
                ("model", "(GB/s)", 8, "{:.2f}"), ("error", "(time)", 8, "{}"),
                ("valid", "", 6, "{}"))


def nccl_lines(df: pd.DataFrame) -> list[str]:
    """NCCL-tests' plain-text table: '#' header lines, one line per size, fixed columns
    within 80 characters (easy to grep and awk, readable in a `vagrant ssh`); a block
    per fabric and collective, whose header names the element type and reduction.
    The model's time and busbw are the real fabric's, a priori."""
    lines = []
    for (fabric, collective), rows in df.groupby(["fabric", "collective"], sort=False):
        first = rows.iloc[0]
        lines.append(f"# {fabric}  {collective}  ({first.type}, {first.redop}; real-fabric "
                     "units, model = real-fabric model)")
        lines.append("#" + "".join(h.rjust(w) for h, _, w, _ in NCCL_COLUMNS)[1:])
        lines.append("#" + "".join(u.rjust(w) for _, u, w, _ in NCCL_COLUMNS)[1:])
        for r in rows.itertuples():
            valid = getattr(r, "valid", None)
            values = (int(r.size_bytes), int(r.count), r.time_us, r.algbw_GBps, r.busbw_GBps,
                      r.model_time_us, r.model_busbw_GBps,
                      "n/a" if pd.isna(r.error) else f"{r.error * 100:+.1f}%",
                      "n/a" if valid is None or pd.isna(valid) else ("yes" if valid else "NO"))
            lines.append("".join(f.format(v).rjust(w)
                                 for (_, _, w, f), v in zip(NCCL_COLUMNS, values, strict=True)))
    return lines


#: cc.csv columns of each scenario's comparison table: (column, header).
CC_TABLE_COLUMNS = {
    "incast": (("cc", "cc"), ("pfc", "PFC"), ("completion_us", "incast completion (us)"),
               ("incast_gbps", "incast (Gb/s)"), ("bottleneck_share", "of bottleneck"),
               ("drops", "drops"), ("pauses", "PAUSEs"), ("latency_p99_us", "p99 latency (us)"),
               ("peak_queue_KB", "peak queue (KB)"), ("peak_vs_dcqcn", "peak ÷ DCQCN's"),
               ("mean_queue_KB", "mean queue (KB)"), ("retransmitted", "retransmitted"),
               ("ecn_echoes", "ECN echoes"), ("victim_fct_us", "victim FCT (us)"),
               ("victim_gbps", "victim (Gb/s)"), ("valid", "valid")),
    "fairness": (("cc", "cc"), ("jain", "Jain index"), ("aggregate_gbps", "aggregate (Gb/s)"),
                 ("smallest_gbps", "smallest share (Gb/s)"),
                 ("convergence_us", "convergence (us)"), ("retransmitted", "retransmitted"),
                 ("ecn_echoes", "ECN echoes"), ("valid", "valid")),
    # The model's columns say what each value is (model.claims, as in the summary).
    "oscillation": (("cc", "cc"), ("flows", "flows"), ("k_KB", "K (KB)"),
                    ("amplitude_KB", "amplitude (KB)"),
                    ("model_amplitude_KB", f"model: {DCTCP_AMPLITUDE.label} (KB)"),
                    ("mean_queue_KB", "mean queue (KB)"),
                    ("model_mean_queue_KB", f"model: {DCTCP_MEAN.label} (KB)"),
                    ("period_us", "period (us)"),
                    ("model_period_us", f"model: {DCTCP_TIMING.label} (us)"),
                    ("alpha", "alpha"), ("model_alpha", f"model: {DCTCP_TIMING.label}"),
                    ("drops", "drops"), ("valid", "valid")),
    "steady": (("cc", "cc"), ("flows", "flows"), ("mean_queue_KB", "mean queue (KB)"),
               ("aggregate_gbps", "aggregate (Gb/s)"), ("retransmitted", "retransmitted"),
               ("drops", "drops"), ("valid", "valid")),
}


CC_COUNTS = ("flows", "drops", "pauses", "retransmitted", "ecn_echoes")


def peak_vs_dcqcn(incast: pd.DataFrame) -> pd.Series:
    """Each incast case's peak queue over DCQCN's (the case ``cc == 'dcqcn'``) with the
    same PFC setting; NaN where the run has no such case."""
    dcqcn = incast[incast.cc == "dcqcn"].set_index("pfc")["peak_queue_KB"]
    return incast.peak_queue_KB / incast.pfc.map(dcqcn)


def column_groups(title: str, columns: list[tuple[str, str]], rows: list[list[str]],
                  width: int, keys: int = 2) -> list[Table]:
    """``rows`` under ``columns`` (header, justify) as tables that each fit ``width``
    characters: the columns split into groups, each repeating the first ``keys``
    columns (what a row is) and the last (the gate's verdict), numbered in the title
    when there are several."""
    def need(i: int) -> int:  # a header wraps at its spaces; a value does not
        words = max(len(w) for w in columns[i][0].split())
        return max([words, *(len(Text.from_markup(r[i]).plain) for r in rows)]) + 4

    last = len(columns) - 1
    groups: list[list[int]] = []
    base = sum(need(i) for i in (*range(keys), last)) + 2
    for i in range(keys, last):
        if groups and base + sum(need(j) for j in groups[-1]) + need(i) <= width:
            groups[-1].append(i)
        else:
            groups.append([i])
    tables = []
    for k, group in enumerate(groups or [[]], start=1):
        part = f" ({k}/{len(groups)})" if len(groups) > 1 else ""
        table = Table(title=title + part, box=box.SIMPLE_HEAD)
        picked = [*range(keys), *group, last]
        for i in picked:
            table.add_column(columns[i][0], justify=columns[i][1],  # type: ignore[arg-type]
                             overflow="fold")
        for r in rows:
            table.add_row(*(r[i] for i in picked))
        tables.append(table)
    return tables


def cc_tables(df: pd.DataFrame, cases: Mapping[str, Any], width: int = 80) -> list[Table]:
    """The congestion-control comparison (cc.csv): one table per scenario, one row per
    case, with the case's fidelity verdict; split into column groups that fit ``width``."""
    tables = []
    for scenario, columns in CC_TABLE_COLUMNS.items():
        rows = df[df.scenario == scenario]
        if rows.empty:
            continue
        if scenario == "incast" and "peak_queue_KB" in rows:
            rows = rows.assign(peak_vs_dcqcn=peak_vs_dcqcn(rows))
        cells = []
        for r in rows.to_dict("records"):
            rep = cases.get(r["case"])
            r["valid"] = "[green]yes[/]" if isinstance(rep, dict) and rep.get("valid") \
                else "[red]no[/]"
            r["pfc"] = "on" if str(r.get("pfc")) == "True" else "off"
            for col in CC_COUNTS:  # counts read back as floats where a scenario has none
                if isinstance(r.get(col), float) and math.isfinite(r[col]):
                    r[col] = int(r[col])
            cells.append([r[col] if col in ("valid", "pfc") else escape(_fmt(r.get(col)))
                          for col, _ in columns])
        # What a row is: the algorithm, and PFC where the scenario has it.
        keys = 2 if columns[1][0] == "pfc" else 1
        tables += column_groups(
            f"congestion control, {scenario} (real-fabric units, measured)",
            [(header, "left" if col == "cc" else "right") for col, header in columns], cells,
            width, keys)
    return tables


def deviations_table(deviations: list) -> Table:
    """Named emulation deviations: what the emulator lacks and its measured size."""
    table = Table(title="emulation deviations (what the emulator did not reproduce, measured)")
    for col in ("case", "deviation", "real fabric", "measured", "missing", "effect"):
        table.add_column(col, justify="right" if col in ("real fabric", "measured", "missing")
                         else "left")
    shown: set[tuple[str, str]] = set()
    for d in deviations:
        case, effect = str(d.get("case")), str(d.get("effect") or d.get("what"))
        table.add_row(escape(case), escape(str(d.get("name"))), _fmt_s(d.get("real_s")),
                      _fmt_s(d.get("measured_s")), _fmt_s(d.get("missing_s")),
                      "" if (case, effect) in shown else escape(effect))
        shown.add((case, effect))
    return table


def _fmt_s(x: Any) -> str:
    return f"{x * 1e9:,.0f} ns" if isinstance(x, (int, float)) and math.isfinite(x) else "n/a"


def load_json(run_dir: Path, name: str, required: Mapping[str, type]) -> dict:
    """``run_dir/name`` as a dict with ``required`` keys of the given types."""
    path = run_dir / name
    try:
        data = json.loads(safefile.read_regular(path, MAX_RUN_JSON_BYTES))
    except FileNotFoundError:
        raise bad_run(run_dir, f"no {name}: not a finished run") from None
    except safefile.ReadError as e:
        raise bad_run(run_dir, f"{name} is {e.strerror}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise bad_run(run_dir, f"{name} is unreadable or truncated "
                                f"({' '.join(str(e).split())})") from None
    if not isinstance(data, dict):
        raise bad_run(run_dir, f"{name} does not hold a JSON object")
    for key, kind in required.items():
        if not isinstance(data.get(key), kind):
            raise bad_run(run_dir, f"{name} lacks {key!r} (or it has the wrong type)")
    return data


def _number_or_none(x: Any) -> bool:
    return x is None or isinstance(x, (int, float))


def _check_summary(run_dir: Path, summary: dict, config: dict) -> None:
    for row in summary["metrics"]:
        if not (isinstance(row, dict) and all(k in row for k in
                                              ("case", "metric", "unit", "measured",
                                               "predicted"))
                and isinstance(row["case"], str) and isinstance(row["metric"], str)
                and isinstance(row["unit"], (str, type(None)))):
            raise bad_run(run_dir, "summary.json has a malformed metric row")
        if not (_number_or_none(row["measured"]) and _number_or_none(row["predicted"])):
            raise bad_run(run_dir, f"summary.json's {row['case']!r} {row['metric']!r} has a "
                                   "measured or model value that is not a number")
    for key, ok in (("suggested_scale", _number_or_none(summary.get("suggested_scale"))),
                    ("suggested_rerun", isinstance(summary.get("suggested_rerun"),
                                                   (str, type(None)))),
                    ("cases_recorded", isinstance(summary.get("cases_recorded"),
                                                  (int, type(None))))):
        if not ok:
            raise bad_run(run_dir, f"summary.json's {key} has the wrong type")
    if not _number_or_none(config.get("scale")):
        raise bad_run(run_dir, "config.json's scale is not a number")
    for rep in summary["cases"].values():
        if not (isinstance(rep, dict) and isinstance(rep.get("reasons"), list)):
            raise bad_run(run_dir, "summary.json has a malformed case verdict")
    deviations = summary.get("deviations")
    if deviations is not None and not (isinstance(deviations, list)
                                       and all(isinstance(d, dict) for d in deviations)):
        raise bad_run(run_dir, "summary.json has malformed deviations (a list of objects)")
    refused = summary.get("refused_attempts")
    if refused is not None and not (
            isinstance(refused, dict)
            and all(isinstance(attempts, list) and all(isinstance(r, list) for r in attempts)
                    for attempts in refused.values())):
        raise bad_run(run_dir, "summary.json has malformed refused_attempts (case -> a list "
                               "of lists of reasons)")


def predictions_table(rows: list[Mapping[str, Any]]) -> Table:
    """A user's predictions (`experiments.predictions`) beside the measurement and the
    project's model, each with its error against the measurement."""
    table = Table(title="your predictions beside the measurement and the model",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for col in ("case: metric (unit)", "measured", "yours", "error", "model", "error"):
        table.add_column(col, justify="left" if col.startswith("case") else "right",
                         overflow="fold")
    for r in rows:
        errors = [f"{e:+.1%}" if isinstance(e, (int, float)) and math.isfinite(e) else "n/a"
                  for e in (r.get("user_error_rel"), r.get("model_error_rel"))]
        table.add_row(escape(f"{r.get('case')}: {r.get('metric')} ({r.get('unit')})"),
                      _fmt(r.get("measured")), _fmt(r.get("user")), errors[0],
                      _fmt(r.get("model")), errors[1])
    return table


def add_predictions(run_dir: str | Path, predictions: list[dict[str, Any]]) -> None:
    """``emu run --predictions``: join checked predictions to the finished run in
    ``run_dir`` (`experiments.predictions.attach`) and print them."""
    run_dir = Path(run_dir)
    summary = load_json(run_dir, "summary.json", {"metrics": list})
    _check_summary(run_dir, summary, load_json(run_dir, "config.json", {}))
    console.print(predictions_table(user_predictions.attach(run_dir, summary, predictions)))


def _print_case_verdicts(summary: Mapping[str, Any]) -> None:
    """Each case's gate verdict, and the attempts it refused and measured again."""
    refused = summary.get("refused_attempts") or {}
    lines = []
    for case, rep in summary["cases"].items():
        if rep.get("valid"):
            lines.append(f"[green]fidelity ok[/]  {escape(str(case))}")
        else:
            lines.append(f"[red]fidelity FAILED[/]  {escape(str(case))}: "
                         + escape("; ".join(map(str, rep["reasons"]))))
        lines += [f"  [yellow]attempt {k} refused[/] (measured again): "
                  + escape("; ".join(map(str, reasons)))
                  for k, reasons in enumerate(refused.get(case, ()), start=1)]
    if lines:  # one print: a line each costs rich seconds over thousands of cases
        console.print("\n".join(lines), soft_wrap=len(lines) > MAX_TABLE_ROWS)


def title_scales(config: Mapping[str, Any]) -> str:
    """The S the run's fabrics ran at ('10000', '10000, 90000'): a fabric given as
    ``SPEC@S`` runs at its own S, not the run's; the run's without a fabric recorded."""
    fabrics = config.get("fabrics")
    found = {f.get("scale") for f in (fabrics.values() if isinstance(fabrics, dict) else ())
             if isinstance(f, dict)}
    scales = sorted(float(s) for s in found if isinstance(s, (int, float))
                    and not isinstance(s, bool))
    if not scales:
        return str(config.get("scale"))
    return ", ".join(f"{s:g}" for s in scales)


def render_report(run_dir: str | Path, show: bool = True,
                  predictions: str | Path | None = None) -> list[Path]:
    """Re-render a finished run: plots from its CSVs and the summary table, and with
    ``predictions`` (a CSV file, `experiments.predictions`) the user's predictions
    joined to it first (a run killed before its end is caught up from its case records
    first, `experiments.runfiles.catch_up`). ParameterError (one line) for anything that
    is not a readable run directory or predictions file."""
    run_dir = Path(run_dir)
    user = user_predictions.read_predictions(predictions) if predictions is not None else None
    if not run_dir.is_dir():
        raise bad_run(run_dir, "does not exist" if not run_dir.exists()
                       else "is not a directory")
    catch_up(run_dir)
    summary = load_json(run_dir, "summary.json",
                        {"experiment": str, "valid": bool, "cases": dict, "metrics": list})
    config = load_json(run_dir, "config.json", {})
    _check_summary(run_dir, summary, config)
    if user is not None:
        user_predictions.attach(run_dir, summary, user)
    made = render_plots(run_dir, summary, config)
    if not show:
        return made
    title = (f"{summary['experiment']}: measured vs model (real-fabric units, "
             f"S = {title_scales(config)})")
    if len(summary["metrics"]) > MAX_TABLE_ROWS:
        console.print(summary_lines(summary, title), markup=False, highlight=False,
                      soft_wrap=True)
    else:
        console.print(summary_table(summary, escape(title)))
    nccl_csv = run_dir / "nccl.csv"
    if nccl_csv.exists():
        nccl = read_csv(nccl_csv, *CSV_COLUMNS["nccl.csv"])
        if not nccl.empty:
            for line in nccl_lines(nccl):
                console.print(line, markup=False, highlight=False, soft_wrap=True)
    cc_csv = run_dir / "cc.csv"
    if cc_csv.exists():
        for table in cc_tables(read_csv(cc_csv, ("case", "scenario", "cc"), ()),
                               summary["cases"], console.width):
            console.print(table)
    deviations = summary.get("deviations")
    if isinstance(deviations, list) and deviations:
        console.print(deviations_table(deviations))
    predicted = summary.get("predictions")
    if isinstance(predicted, list) and predicted and all(isinstance(r, dict)
                                                         for r in predicted):
        console.print(predictions_table(predicted))
    notes = config.get("notes")
    for note in notes if isinstance(notes, list) else []:
        if isinstance(note, str):  # what the run says of its own cases (Run.note)
            console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    _print_case_verdicts(summary)
    disagree = [f"{r['case']}: {r['metric']}" for r in summary["metrics"]
                if r.get("model_disagrees")]
    if disagree:
        console.print(f"[red]model disagrees[/] beyond its stated tolerance in {len(disagree)} "
                      "row(s) (model.claims; apart from the gate's VALID): "
                      + escape("; ".join(disagree)))
    rerun = summary.get("suggested_rerun")
    suggested = summary.get("suggested_scale")
    # A run recorded before summaries held the rerun: its suggestion where it is larger.
    larger = isinstance(rerun, str) or ("suggested_rerun" not in summary and isinstance(
        suggested, (int, float)) and isinstance(config.get("scale"), (int, float))
        and suggested > config["scale"])
    verdict = "[green]VALID[/]" if summary["valid"] else "[red]INVALID[/]" + (
        f" (suggested S = {suggested:g})" if larger else "")
    console.print(f"run {verdict}; results in {escape(str(run_dir))}/ (summary.json, config.json, "
                  f"{len(list(run_dir.glob('*.csv')))} CSVs)")
    if isinstance(rerun, str):
        console.print(f"rerun at the suggested S:  {rerun}", markup=False, highlight=False,
                      soft_wrap=True)
    for p in made:
        console.print(f"  plot: {escape(str(p))}")
    return made

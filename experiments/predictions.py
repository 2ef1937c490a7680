"""A user's own predictions (ASTRA-sim, SimAI, a spreadsheet) beside the measurement
and the project's model: ``--predictions FILE.csv`` of ``emu run`` and ``emu report``.

The file is CSV with the header ``case,metric,value,unit`` (in any order; nothing
else): one row per metric of the run (``metrics.csv``'s case and metric, the same
unit). ``read_predictions`` checks the file alone (before a run starts);
``attach`` joins it to a finished run: predictions.csv and summary.json's
``predictions`` get, per row, the measurement, the user's value and its error
(measured - value) / value, and the project's model value and error beside them.
A row naming no metric of the run, or another unit, is refused in one line.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import pandas as pd

from core import safefile
from core.errors import ParameterError
from model.claims import error_rel

COLUMNS = ("case", "metric", "value", "unit")
MAX_ROWS = 100_000
MAX_FILE_BYTES = 16 << 20


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a predictions file, checked (module doc)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ParameterError("predictions", str(path), e.strerror or str(e)) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ParameterError("predictions", str(path), f"larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8-sig")
        rows = list(csv.reader(io.StringIO(text)))
    except (UnicodeDecodeError, csv.Error) as e:
        raise ParameterError("predictions", str(path), f"not a CSV file ({e})") from None
    if not rows:
        raise ParameterError("predictions", str(path), "empty: expected a header "
                                                       f"{','.join(COLUMNS)}")
    header = [h.strip() for h in rows[0]]
    if sorted(header) != sorted(COLUMNS):
        raise ParameterError("predictions header", ",".join(header)[:80],
                             f"expected the columns {','.join(COLUMNS)}")
    body = [r for r in rows[1:] if any(c.strip() for c in r)]
    if len(body) > MAX_ROWS:
        raise ParameterError("predictions", str(path), f"more than {MAX_ROWS} rows")
    out = []
    seen: set[tuple[str, str]] = set()
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise ParameterError(f"predictions line {line}", ",".join(row)[:80],
                                 f"expected {len(header)} fields")
        rec = {h: c.strip() for h, c in zip(header, row, strict=True)}
        try:
            value = float(rec["value"])
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ParameterError(f"predictions line {line}", rec["value"],
                                 "value must be a finite number")
        key = (rec["case"], rec["metric"])
        if key in seen:
            raise ParameterError(f"predictions line {line}", f"{key[0]}: {key[1]}",
                                 "this case and metric are predicted twice")
        seen.add(key)
        out.append({"case": rec["case"], "metric": rec["metric"], "value": value,
                    "unit": rec["unit"]})
    return out


def join(metrics: list[dict[str, Any]], predictions: list[dict[str, Any]]
         ) -> list[dict[str, Any]]:
    """Each prediction beside its metric row (summary.json's): measured, the user's
    value and error, the model's value and error."""
    index = {(str(m["case"]), str(m["metric"])): m for m in metrics}
    out = []
    for p in predictions:
        m = index.get((p["case"], p["metric"]))
        if m is None:
            raise ParameterError("predictions", f"{p['case']}: {p['metric']}",
                                 "no such case and metric in the run (metrics.csv)")
        if str(m.get("unit")) != p["unit"]:
            raise ParameterError("predictions unit", p["unit"],
                                 f"{p['case']}: {p['metric']} is in {m.get('unit')}")
        measured, model = m.get("measured"), m.get("predicted")
        out.append({"case": p["case"], "metric": p["metric"], "unit": p["unit"],
                    "measured": measured, "user": p["value"],
                    "user_error_rel": error_rel(measured, p["value"]),
                    "model": model, "model_kind": m.get("kind"),
                    "model_error_rel": error_rel(measured, model),
                    "valid": m.get("valid")})
    return out


def attach(run_dir: Path, summary: dict[str, Any], predictions: list[dict[str, Any]]
           ) -> list[dict[str, Any]]:
    """Join ``predictions`` to the run in ``run_dir`` (its loaded ``summary``):
    predictions.csv and summary.json's ``predictions``, replacing earlier ones."""
    rows = join(summary["metrics"], predictions)
    summary["predictions"] = rows
    safefile.write_json(run_dir / "summary.json", summary, indent=2)
    safefile.write_csv(run_dir / "predictions.csv", pd.DataFrame(rows))
    return rows

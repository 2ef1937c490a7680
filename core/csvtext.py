"""`csv_text`: a DataFrame's CSV, the text ``frame.to_csv(index=False)`` writes, built
a column at a time.

pandas formats a frame cell by cell (about 25 µs a row of a run's messages.csv: 9.5 s
for fattree,12's 372,384 messages, written once per case record and once per run).
Its cells are Python's own texts, so here each column becomes its strings in one pass
(``repr`` of a float64, ``str`` of an integer, True/False, a string quoted where it
holds a comma, a quote or a line break) and the rows are joined. A column of another
kind (nullable integers, dates, float32, objects that are not strings) gets None:
pandas writes that frame. `tests/unit/test_csvtext.py` checks the text against
pandas' own, byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

#: What makes the csv module (pandas' writer, QUOTE_MINIMAL) quote a field.
_NEEDS_QUOTES = (",", '"', "\n")


def _quoted(text: str) -> str:
    if any(c in text for c in _NEEDS_QUOTES):
        return '"' + text.replace('"', '""') + '"'
    return text


def _strings(values: Iterable[Any]) -> list[str] | None:
    """A column of strings and missing values; None if it holds anything else (or a
    carriage return, whose quoting pandas' writer decides by platform rules). Each
    distinct string is looked at once (a run's hosts and cases repeat)."""
    seen: dict[str, str] = {}
    out = []
    for v in values:
        if isinstance(v, str):
            text = seen.get(v)
            if text is None:
                if "\r" in v:
                    return None
                text = seen[v] = _quoted(v)
            out.append(text)
        elif v is None or (isinstance(v, float) and math.isnan(v)) or _is_na(v):
            out.append("")
        else:
            return None
    return out


def _by_value(values: np.ndarray, texts_of: Any) -> list[str]:
    """Each value's text, made once per distinct value (a run's counters are mostly 0)."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return list(map(texts_of(distinct).__getitem__, inverse.ravel().tolist()))


def _float_texts(bits: np.ndarray) -> list[str]:
    """``repr`` of each float64 given by its bits (so -0.0 is not 0.0); NaN empty."""
    return [repr(v) if v == v else "" for v in bits.view(np.float64).tolist()]


def _is_na(value: Any) -> bool:
    return type(value).__name__ == "NAType"  # pandas.NA, without importing pandas here


def _cells(column: Any) -> list[str] | None:
    """One column's cell texts, or None for a kind left to pandas."""
    dtype = column.dtype
    kind = getattr(dtype, "kind", "")
    numpy_dtype = type(dtype).__module__.startswith("numpy")
    if numpy_dtype and kind in "iu":
        return _by_value(column.to_numpy(), lambda d: list(map(str, d.tolist())))
    if numpy_dtype and kind == "f" and dtype.itemsize == 8:
        return _by_value(column.to_numpy().view(np.int64), _float_texts)
    if numpy_dtype and kind == "b":
        return ["True" if v else "False" for v in column.tolist()]
    if kind == "O" or str(dtype) in ("str", "string"):
        return _strings(column.tolist())
    return None


def csv_text(frame: Any) -> str | None:
    """``frame.to_csv(index=False)``'s text, or None where a column is of a kind this
    does not format."""
    names = [_strings([str(name)]) for name in frame.columns]
    if any(n is None for n in names) or frame.columns.has_duplicates:
        return None
    columns = []
    for i in range(frame.shape[1]):
        cells = _cells(frame.iloc[:, i])
        if cells is None:
            return None
        columns.append(cells)
    if not columns:
        return None
    header = [n[0] for n in names if n is not None]
    if len(columns) == 1:  # a lone empty field is written quoted, as the csv module does
        lines = ['""' if c == "" else c for c in (*header, *columns[0])]
    else:
        lines = [",".join(header), *map(",".join, zip(*columns, strict=True))]
    return "\n".join(lines) + "\n"

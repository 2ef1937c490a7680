"""core.csvtext: the CSV text of a frame is pandas' own, byte for byte, for the kinds
of column it formats (random frames), and None (pandas writes it) for the others."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.csvtext import csv_text


def _pandas(frame: pd.DataFrame) -> str:
    out = io.StringIO()
    frame.to_csv(out, index=False)
    return out.getvalue()


texts = st.text(alphabet=st.sampled_from(list('ab ,"\n\t;é')), max_size=6)
floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
column = st.one_of(
    st.lists(st.integers(-2**63, 2**63 - 1), min_size=3, max_size=3).map(
        lambda v: np.array(v, dtype=np.int64)),
    st.lists(st.integers(0, 2**16 - 1), min_size=3, max_size=3).map(
        lambda v: np.array(v, dtype=np.uint16)),
    st.lists(floats, min_size=3, max_size=3).map(lambda v: np.array(v, dtype=np.float64)),
    st.lists(st.booleans(), min_size=3, max_size=3).map(np.array),
    st.lists(st.one_of(texts, st.none()), min_size=3, max_size=3).map(
        lambda v: pd.array(v, dtype=object)),
    st.lists(st.one_of(texts, st.none()), min_size=3, max_size=3).map(
        lambda v: pd.array(v, dtype="str")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(texts, column), min_size=1, max_size=5, unique_by=lambda c: c[0]))
def test_the_text_is_pandas_own(columns):
    frame = pd.DataFrame(dict(columns))
    assert csv_text(frame) == _pandas(frame)


def test_a_runs_frames_are_written_as_pandas_writes_them():
    frame = pd.DataFrame({
        "case": ["fattree,8 allreduce-ring 4MiB", 'say "hi"', "plain"],
        "msg_id": np.arange(3), "end_s": [2.38521775e-06, math.nan, 1e16],
        "fct_s": [0.1, -0.0, 5e-324], "completed": [True, False, True],
        "tag": pd.array(["rs", None, "ag"], dtype="str")})
    assert csv_text(frame) == _pandas(frame)
    assert csv_text(frame.iloc[:0]) == _pandas(frame.iloc[:0])


@pytest.mark.parametrize("column", [
    pd.array([1, None, 3], dtype="Int64"),                 # nullable integers
    np.array([0.1, 0.2, 0.3], dtype=np.float32),           # float32's own shortest texts
    pd.to_datetime(["2026-01-01", "2026-01-02", "2026-01-03"]),
    pd.array([1, "a", 2.5], dtype=object),                 # objects that are not strings
    pd.array(["a\rb", "c", "d"], dtype=object),            # a carriage return
])
def test_other_kinds_are_left_to_pandas(column):
    assert csv_text(pd.DataFrame({"x": column, "y": [1, 2, 3]})) is None

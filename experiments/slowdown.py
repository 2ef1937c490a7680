"""FCT slowdown by message size: each message's FCT over the model's FCT of that size
alone on an idle fabric, in size buckets, measured beside the model's, and its rows in
fct_slowdown.csv and the summary (incast, ecmp and bimodal report it)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from core.messages import Message, Workload
from experiments.rundir import Run
from model.alphabeta import predict_workload
from model.claims import Claim

#: Message size buckets of the FCT slowdown table: (label, largest size in the bucket).
SIZE_BUCKETS = (("<=4KiB", 4 << 10), ("4KiB-64KiB", 64 << 10), ("64KiB-1MiB", 1 << 20),
                ("1MiB-16MiB", 16 << 20), (">16MiB", math.inf))


def size_bucket(size_bytes: float) -> str:
    return next(label for label, top in SIZE_BUCKETS if size_bytes <= top)


def ideal_fct_s(graph: Any, paths: Callable[[str, str], Sequence[Sequence[str]]], src: str,
                dst: str, size_bytes: float) -> float:
    """The real-fabric model's FCT of one message of ``size_bytes`` alone on an idle
    fabric (NIC overhead, line rate, store-and-forward path latency)."""

    alone = Workload("alone", [Message(0, src, dst, int(size_bytes))], [src, dst], int(size_bytes))
    return predict_workload(alone, graph, paths).completion_s


#: The FCT slowdown percentiles of the table and the summary: (column, quantile).
SLOWDOWN_QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def fct_slowdown(messages: pd.DataFrame, ideal_s: Mapping[Any, float],
                 predicted_s: Mapping[Any, Sequence[float]]) -> pd.DataFrame:
    """FCT slowdown (FCT / ideal FCT of that size alone) by size bucket: p50, p95 and
    p99 measured (messages.fct_s) and predicted (the model's FCTs of the same messages
    under the workload's load; several per message when the model draws hashes), and
    the bucket's mean message size (the slowdown-vs-size plot's x)."""
    rows = []
    done = messages[messages.fct_s.notna()]
    measured = pd.DataFrame({"bucket": [size_bucket(s) for s in done.size_bytes],
                             "size_bytes": done.size_bytes.to_numpy(dtype=float),
                             "slowdown": [f / ideal_s[i] for i, f in zip(done.msg_id, done.fct_s,
                                                                         strict=True)]})
    model = pd.DataFrame([{"bucket": size_bucket(s), "slowdown": f / ideal_s[i]}
                          for i, s in zip(messages.msg_id, messages.size_bytes, strict=True)
                          for f in predicted_s.get(i, ())], columns=["bucket", "slowdown"])
    sizes = messages.groupby(messages.size_bytes.map(size_bucket)).size_bytes.mean()
    for label, _ in SIZE_BUCKETS:
        got = measured[measured.bucket == label].slowdown
        want = model[model.bucket == label].slowdown
        if got.empty and want.empty:
            continue
        row: dict[str, Any] = {"bucket": label, "size_bytes": float(sizes.get(label, math.nan)),
                               "messages": len(got)}
        for col, q in SLOWDOWN_QUANTILES.items():
            row[col] = got.quantile(q) if len(got) else math.nan
        for col, q in SLOWDOWN_QUANTILES.items():
            row[f"model_{col}"] = want.quantile(q) if len(want) else math.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=["bucket", "size_bytes", "messages",
                                       *SLOWDOWN_QUANTILES,
                                       *(f"model_{c}" for c in SLOWDOWN_QUANTILES)])


def record_slowdown(run: Run, case: str, table: pd.DataFrame, claim: Claim) -> None:
    """fct_slowdown.csv rows and one summary metric per bucket and percentile, the
    model's labelled with ``claim`` (what its FCTs are: a prediction, an ideal)."""
    for row in table.itertuples():
        for q in SLOWDOWN_QUANTILES:
            run.metric(case, f"FCT slowdown {q} {row.bucket}", "x", getattr(row, q),
                       getattr(row, f"model_{q}"), claim)
    run.frame("fct_slowdown", table, case=case)

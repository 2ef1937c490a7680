"""What a report's model columns claim (model.claims: kind, tolerance, the "model
disagrees" flag), the rerun a refused run prints, the valid column of every CSV, and
the plotting helpers (byte axes, CCDF, case grid, topology layouts). Fast: no fabric."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from experiments import plotkit, plots
from experiments.collective import build_workload, model_curve
from experiments.fidelity import FidelityReport
from experiments.option_parsers import parse_int, parse_scale
from experiments.options import Option
from experiments.report import column_groups, summary_table
from experiments.rundir import metric_row, suggested_rerun
from experiments.runfiles import METRIC_COLUMNS, with_valid
from model.alphabeta import predict_workload_hashed
from model.claims import (
    ALPHABETA,
    DCQCN_COUNT,
    FAIR_SHARE,
    INCAST_GBN,
    INCAST_LOSSLESS,
    Claim,
    Kind,
    incast_claims,
)
from topologies.info import topology_layout
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo


def test_only_a_prediction_has_a_tolerance():
    with pytest.raises(ValueError):
        Claim(Kind.PREDICTION, None, "x")
    with pytest.raises(ValueError):
        Claim(Kind.ESTIMATE, 0.1, "x")
    with pytest.raises(ValueError):
        Claim(Kind.PREDICTION, 1.5, "x")
    assert ALPHABETA.label == "prediction ±5%" and INCAST_GBN.label == "estimate"


def test_a_prediction_disagrees_only_beyond_its_tolerance():
    assert ALPHABETA.disagrees(104.9, 100.0) is False
    assert ALPHABETA.disagrees(95.1, 100.0) is False
    assert ALPHABETA.disagrees(105.1, 100.0) is True
    assert ALPHABETA.disagrees(-94.0, -100.0) is True      # relative to |prediction|
    assert ALPHABETA.disagrees(0.0, 0.0) is False           # no drop predicted, none seen
    assert ALPHABETA.disagrees(1.0, 0.0) is True            # any drop against none
    assert ALPHABETA.disagrees(math.nan, 1.0) is None
    assert ALPHABETA.disagrees(None, 1.0) is None
    assert INCAST_GBN.disagrees(189.1, 3193.3) is None      # an estimate claims no accuracy


def test_a_summary_row_carries_the_claim_and_only_a_prediction_an_error():
    row = metric_row("c", "completion time", "us", 189.1, 3193.3, INCAST_GBN)
    assert set(row) == set(METRIC_COLUMNS) - {"valid"}
    assert row["kind"] == "estimate" and row["error_rel"] is None
    assert row["tolerance_rel"] is None and row["model_disagrees"] is None
    row = metric_row("c", "time", "us", 110.0, 100.0, ALPHABETA)
    assert row["kind"] == "prediction" and row["tolerance_rel"] == 0.05
    assert row["error_rel"] == pytest.approx(0.10) and row["model_disagrees"] is True
    measured_only = metric_row("c", "PAUSEs", "count", 3.0, None, None)
    assert measured_only["kind"] is None and measured_only["error_rel"] is None
    with pytest.raises(TypeError):
        metric_row("c", "time", "us", 1.0, 1.0, None)


def test_the_incast_claims_follow_the_models_regime():
    lossless = incast_claims("off", dropped=False)
    assert set(lossless.values()) == {INCAST_LOSSLESS}
    dropped = incast_claims("off", dropped=True)
    assert dropped["completion_s"].kind is Kind.ESTIMATE       # go-back-N estimate
    assert dropped["max_queue_bytes"].is_prediction             # the buffer is full
    dcqcn = incast_claims("dcqcn", dropped=False)
    assert dcqcn["marks"] is DCQCN_COUNT and dcqcn["latency_p99_s"].tolerance_rel == 0.10
    lossy = incast_claims("dcqcn", dropped=True)    # the fluid never resends what it drops
    assert lossy["completion_s"].kind is Kind.LOWER_BOUND
    assert lossy["goodput_bps"].kind is Kind.UPPER_BOUND


def _table_text(rows: list[dict]) -> str:
    console = Console(width=200, record=True)
    console.print(summary_table({"metrics": rows}, "t"))
    return console.export_text()


def test_the_table_flags_a_disagreeing_prediction_and_shows_no_error_for_an_estimate():
    rows = [dict(metric_row("a", "time", "us", 130.0, 100.0, ALPHABETA), valid=True),
            dict(metric_row("b", "completion", "us", 189.1, 3193.3, INCAST_GBN), valid=True),
            dict(metric_row("c", "victim FCT", "us", 65.0, 25.0, FAIR_SHARE), valid=False)]
    lines = _table_text(rows).splitlines()
    a, b, c = (lines[lines.index(next(x for x in lines if x.split()[:1] == [case])) + 1]
               for case in "abc")
    assert "prediction ±5%" in a and "+30.0%" in a and "disagrees" in a
    assert "estimate" in b and "%" not in b and "disagrees" not in b
    assert "ideal" in c and "%" not in c


def test_the_summary_table_reads_whole_at_80_columns():
    rows = [dict(metric_row("incast cc=off pfc=off", "incast throughput", "Gb/s", 44.4,
                            2.627, ALPHABETA), valid=False),
            dict(metric_row("incast cc=off pfc=off", "FCT slowdown p50 64KiB-1MiB", "x",
                            2.662, 2.733, FAIR_SHARE), valid=False)]
    console = Console(width=80, record=True)
    console.print(summary_table({"metrics": rows}, "t"))
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80
    assert "+1590.1%" in text and "disagrees" in text and "refused by the gate" in text


def test_a_wide_table_splits_into_column_groups_that_fit_and_repeat_the_keys():
    columns = [("cc", "left"), ("PFC", "left")] + [(f"metric {i} (us)", "right")
                                                   for i in range(12)] + [("valid", "right")]
    rows = [["dcqcn", "off", *(f"{1000.5 * i:,.1f}" for i in range(12)), "yes"]] * 3
    tables = column_groups("t", columns, rows, 80)
    assert len(tables) > 1 and tables[0].title == f"t (1/{len(tables)})"
    console = Console(width=80, record=True)
    for table in tables:
        headers = [c.header for c in table.columns]
        assert headers[:2] == ["cc", "PFC"] and headers[-1] == "valid"
        console.print(table)
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    shown = {c.header for t in tables for c in t.columns}
    assert shown == {h for h, _ in columns}


def test_a_row_of_an_older_run_is_shown_as_unlabelled():
    old = {"case": "a", "metric": "time", "unit": "us", "measured": 1.0, "predicted": 2.0,
           "error_rel": -0.5, "valid": True}
    text = _table_text([old])
    assert "unlabelled" in text and "-50.0%" in text


def test_the_suggested_rerun_is_a_command_with_the_options_that_differ():
    spec = {"scale": Option(10000.0, "S", parse=parse_scale),
            "senders": Option(3, "n", quick=2, parse=parse_int(1)),
            "attempts": Option(2, "n", parse=parse_int(1))}
    cmd = suggested_rerun("sweep", {"scale": 10000.0, "senders": 2, "attempts": 5}, 20000.0,
                          spec, quick=True)
    assert cmd == "emu run sweep --quick --scale 20000 --set attempts=5"


def test_every_csv_row_gets_the_verdict_of_its_case_or_unit():
    ok, refused = FidelityReport(True, [], 1e4), FidelityReport(False, ["x"], 2e4)
    cases = {"a": ok, "b": refused}
    df = pd.DataFrame({"case": ["a", "b", "other"], "x": [1, 2, 3]})
    assert list(with_valid(df, {"a": ok}, cases, True).valid) == [True, False, True]
    assert list(with_valid(df, {"b": refused}, cases, True).valid) == [True, False, False]
    no_case = pd.DataFrame({"x": [1, 2]})
    assert list(with_valid(no_case, {}, cases, False).valid) == [False, False]
    kept = pd.DataFrame({"valid": [True]})
    assert with_valid(kept, {"b": refused}, cases, False) is kept


def test_byte_axes_read_in_binary_units():
    assert [plotkit.format_bytes(x) for x in (8, 1024, 65536, 1.5 * 2 ** 20, 2 ** 31)] == \
        ["8 B", "1 KiB", "64 KiB", "1.5 MiB", "2 GiB"]
    assert plotkit.format_bytes(0) == "0" and plotkit.format_bytes(-1) == ""


def test_the_ccdf_keeps_the_tail_apart_on_a_log_axis():
    xs, ys = plots.ccdf(np.arange(1000.0)[::-1])
    assert xs[0] == 0 and ys[0] == 1.0 and ys[-1] == pytest.approx(1e-3)
    assert xs[990] == 990 and ys[990] == pytest.approx(1e-2)        # p99 at 1e-2


def test_cc_cases_are_a_scenario_by_algorithm_grid_of_sane_size(tmp_path):
    layout = {f"{s} cc={a}": (s, a) for s in ("incast, PFC off", "incast, PFC on", "fairness")
              for a in ("off", "dcqcn", "dctcp", "timely", "swift", "hpcc")}
    layout |= {"oscillation cc=dctcp": ("oscillation", "dctcp"),
               "steady cc=hpcc": ("steady", "hpcc")}
    ctx = plots.PlotContext(tmp_path, pd.DataFrame(), (1e4,), frozenset(), layout)
    fig, panels = plots.case_grid(ctx, list(layout))
    width, height = fig.get_size_inches() * 110
    assert width <= 2000 and height <= 1450                # not 5,346 px tall
    spec = panels["steady cc=hpcc"].get_subplotspec()
    assert (spec.rowspan.start, spec.colspan.start) == (4, 5)
    assert sum(ax.get_visible() for ax in fig.axes) == len(layout)
    plots.plt.close(fig)


def test_a_torus_is_drawn_on_its_grid_and_rails_under_their_leaf():
    _, pos = topology_layout(build_topo("torus,4,4"))
    switch_rows = {round(y, 6) for n, (x, y) in pos.items() if n.startswith("t")}
    assert len(switch_rows) == 4
    _, pos = topology_layout(build_topo("railopt,2,gpus=4"))
    for rail in range(4):
        leaf_x = pos[f"r{rail}"][0]
        gpus_x = [pos[f"h{s}g{rail}"][0] for s in (1, 2)]
        assert min(gpus_x) <= leaf_x <= max(gpus_x)      # the rail's GPUs under its leaf
    _, pos = topology_layout(build_topo("dragonfly,p=1,a=2,h=1"))
    radius = {n: math.hypot(*xy) for n, xy in pos.items()}
    assert all(radius[n] > radius["g0r0"] for n in pos if n.startswith("h"))


def test_the_busbw_curve_is_the_model_priced_like_the_measured_cases():
    sizes = [64 << 10, 1 << 20]
    curve = model_curve("leafspine,2,1,2", "allreduce-ring", sizes, hash_draws=2)
    assert set(sizes) <= set(curve.size_bytes) and curve.size_bytes.is_monotonic_increasing
    assert curve.size_bytes.min() == 16 << 10 and curve.size_bytes.max() == 4 << 20
    topo = build_topo("leafspine,2,1,2")
    routes = compute_routes(topo)
    workload = build_workload(topo, routes, "allreduce-ring", 1 << 20)
    draws = predict_workload_hashed(workload, topo_graph(topo), routes.paths, samples=2,
                                    seed=1 << 20)
    at = curve.set_index("size_bytes").time_model_s[1 << 20]
    assert at == pytest.approx(np.mean([p.completion_s for p in draws]))

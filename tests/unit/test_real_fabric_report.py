"""The real-fabric side of the experiments, on hand-made data (no kernel): fixed delays in
the topologies, named emulation deviations, the real-queue gate, FCT slowdown and the
NCCL-tests table and plot. Expected values are computed by hand in the comments."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from core.scaling import Scale
from engine.stats import EngineStats
from experiments.fidelity import FidelityReport, queue_divergence_checks
from experiments.measure import (
    Measurement,
    emulated_fixed_delays,
    measure_deviations,
    model_graph,
)
from experiments.plots_collective import crossover_bytes
from experiments.registry import EXPERIMENTS
from experiments.report import render_report
from experiments.rundir import Run
from experiments.slowdown import fct_slowdown, ideal_fct_s, size_bucket
from model.claims import ALPHABETA
from topologies.routing import compute_routes
from topologies.spec import build_topo

NS = 1e-9
SER_400G_NS = 8 * 4178 / 400e9 / NS  # 83.56 ns: one full RoCEv2 frame's wire time at 400G
FIRST_400G_NS = 8 * 4194 / 400e9 / NS  # 83.88 ns: a message's first frame (RETH), on the wire


class _Fabric:
    """What the experiments' helpers read from a fabric."""

    def __init__(self, spec: str, summary: dict | None = None) -> None:
        self.topo = build_topo(spec)
        self.routes = compute_routes(self.topo)
        self._summary = summary or {"delay_emulated": False, "delay_detail": "not emulated: x"}

    def summary(self) -> dict:
        return self._summary


def _measurement(messages: list[dict], latency: list[dict],
                 engine: dict[str, str] | None = None) -> Measurement:
    """``engine``: the fixed delays the run's engine declared it emulates."""
    empty = pd.DataFrame()
    return Measurement(pd.DataFrame(messages), pd.DataFrame(latency), empty,
                       pd.DataFrame(columns=["t_s", "port", "backlog_bytes", "vq_bytes"]),
                       empty, EngineStats(True, None, Scale(), 0.0, 0.0, [], 0,
                                          emulated_fixed_delays=engine or {}), 0.0)


def test_topologies_carry_switch_latency_and_pure_propagation():
    topo = build_topo("fattree,4")
    for switch in topo.switch_nodes():
        assert topo.nodeInfo(switch)["switch_latency_s"] == pytest.approx(600 * NS)
    delays = {info["tier"]: info["delay_s"] for _, _, info in topo.fabric_links()}
    # 3 m, 30 m and 100 m of fibre at 5 ns/m
    assert delays == pytest.approx({"host-edge": 15 * NS, "edge-agg": 150 * NS,
                                    "agg-core": 500 * NS})
    rail = build_topo("railopt,2,gpus=2")
    assert rail.nodeInfo("nv1")["switch_latency_s"] == pytest.approx(300 * NS)


def test_fixed_delays_recorded_as_emulated_or_not():
    plain, netem_fab = _Fabric("leafspine,2,1,1"), _Fabric("leafspine,2,1,1",
                                                             {"delay_emulated": True})
    # The fabric alone: nothing; with netem: propagation.
    assert not any(v["emulated"] for v in emulated_fixed_delays(plain, {}).values())
    netem = emulated_fixed_delays(netem_fab, {})
    assert netem["link propagation"]["emulated"] and not netem["switch latency"]["emulated"]
    # The experiments' engine adds all four; propagation only where netem does not.
    engine = emulated_fixed_delays(plain)
    assert all(v["emulated"] and v["how"].startswith("engine") for v in engine.values())
    both = emulated_fixed_delays(netem_fab)
    assert both["link propagation"]["how"].startswith("netem")
    assert both["per-hop serialization"]["how"].startswith("engine, store-and-forward")
    held = emulated_fixed_delays(plain, {"switch latency": "held at rx"})
    assert held["switch latency"] == {"emulated": True, "how": "held at rx"}
    assert not held["NIC overhead"]["emulated"]


def test_missing_fixed_delays_are_named_deviations_with_their_measured_size():
    fab = _Fabric("leafspine,2,1,1")
    m = _measurement(
        [{"msg_id": 7, "src": "h1", "dst": "h2", "size_bytes": 1 << 20, "start_s": 0.0,
          "first_tx_s": 2 * NS, "end_s": 30e-6}],
        [{"msg_id": 7, "t_s": 1e-6, "one_way_s": 10 * NS},
         {"msg_id": 7, "t_s": 2e-6, "one_way_s": 50 * NS}])
    rows = {r["name"]: r for r in measure_deviations(fab, m, "c")}
    path = rows["per-hop serialization + switch latency + link propagation"]
    # 4 hops at 400G, 3 switches of 600 ns, 15 + 150 + 150 + 15 ns of cable
    real_ns = 4 * FIRST_400G_NS + 1800 + 330  # 2465.52 ns
    assert not path["emulated"]
    assert path["real_s"] == pytest.approx(real_ns * NS)
    assert path["measured_s"] == pytest.approx(10 * NS)   # the unloaded (lowest) frame
    assert path["missing_s"] == pytest.approx((real_ns - 10) * NS)
    overhead = rows["NIC overhead"]
    assert overhead["real_s"] == pytest.approx(1e-6) and overhead["measured_s"] == pytest.approx(2 * NS)
    # Delays the fabric reproduces within 5 % are no deviation.
    m.latency["one_way_s"] = real_ns * NS * 0.97
    m.messages["first_tx_s"] = 0.99e-6
    assert measure_deviations(fab, m, "c") == []


def test_emulated_fixed_delays_are_judged_by_their_residual():
    fab = _Fabric("leafspine,2,1,1")
    real_ns = 4 * FIRST_400G_NS + 1800 + 330  # 2465.52 ns, as above
    engine = {k: "engine" for k in ("per-hop serialization", "switch latency",
                                    "link propagation", "NIC overhead")}
    m = _measurement(
        [{"msg_id": 7, "src": "h1", "dst": "h2", "size_bytes": 1 << 20, "start_s": 0.0,
          "first_tx_s": 1.03e-6, "end_s": 30e-6}],
        [{"msg_id": 7, "t_s": 1e-6, "one_way_s": 1.04 * real_ns * NS}], engine)
    assert measure_deviations(fab, m, "c") == []   # within 5 %, either way
    m.latency["one_way_s"] = 1.10 * real_ns * NS
    m.messages["first_tx_s"] = 0.5e-6
    rows = {r["name"]: r for r in measure_deviations(fab, m, "c")}
    over = rows["per-hop serialization + switch latency + link propagation (emulated: residual)"]
    assert over["emulated"] and over["missing_s"] == pytest.approx(-0.10 * real_ns * NS)
    short = rows["NIC overhead (emulated: residual)"]
    assert short["missing_s"] == pytest.approx(0.5e-6)


def test_real_queue_against_the_virtual_queue():
    frame = 4154
    close = [(10 * frame, 10.5 * frame), (0, 0), (5 * frame, 4 * frame), (math.nan, 3.0)]
    far = [(20 * frame, 10 * frame), (12 * frame, 9 * frame), (8 * frame, 8 * frame)]
    checks = {c.name: c for c in queue_divergence_checks(
        {"p1": close, "p2": far, "p3": [(1.0, math.nan)]}, frame)}
    assert "real vs virtual queue p3" not in checks   # nothing read together: not judged
    ok, bad = checks["real vs virtual queue p1"], checks["real vs virtual queue p2"]
    assert ok.ok and ok.measured == pytest.approx(0.5)   # median of 0.5, 0, 1 frames
    assert not bad.ok and bad.measured == pytest.approx(3.0)  # median of 10, 3, 0 frames
    assert "3.00 frames" in bad.detail


def test_ideal_fct_is_the_real_fabric_alone():
    fab = _Fabric("leafspine,2,1,1")
    got = ideal_fct_s(model_graph(fab), fab.routes.paths, "h1", "h2", 1 << 20)
    # 1 us NIC + 1 MiB x 4178/4096 at 400G (21.391 us) + 3 of 4 frames stored and
    # forwarded (250.7 ns) + 1.8 us switches + 330 ns cable
    assert got == pytest.approx(1e-6 + 21.39136e-6 + 3 * SER_400G_NS * NS + 1.8e-6 + 330 * NS)


def test_fct_slowdown_by_bucket():
    messages = pd.DataFrame({"msg_id": [1, 2, 3, 4], "size_bytes": [1000, 2000, 1 << 20, 1 << 20],
                             "fct_s": [2.0, 4.0, 30.0, math.nan]})
    ideal = {1: 1.0, 2: 1.0, 3: 10.0, 4: 10.0}
    table = fct_slowdown(messages, ideal, {3: [20.0, 40.0], 4: [10.0]}).set_index("bucket")
    assert list(table.index) == ["<=4KiB", "64KiB-1MiB"]
    assert table.at["<=4KiB", "p50"] == pytest.approx(3.0) and table.at["<=4KiB", "messages"] == 2
    assert table.at["<=4KiB", "p99"] == pytest.approx(2 + 0.99 * 2)
    assert math.isnan(table.at["<=4KiB", "model_p50"])
    assert table.at["64KiB-1MiB", "p50"] == pytest.approx(3.0)  # the unfinished one left out
    assert table.at["64KiB-1MiB", "model_p50"] == pytest.approx(2.0)  # of 2, 4, 1
    assert size_bucket(4096) == "<=4KiB" and size_bucket(64 << 20) == ">16MiB"


def test_crossover_of_alpha_and_beta():
    g = pd.DataFrame({"size_bytes": [1024, 4096, 5120], "model_time_us": [10.0, 11.0, 14.0]})
    # T = alpha + beta S through (1 KiB, 10 us) and (5 KiB, 14 us): beta = 1 us/KiB,
    # alpha = 9 us, equal at 9 KiB
    assert crossover_bytes(g) == pytest.approx(9 * 1024)
    assert crossover_bytes(g.iloc[:1]) is None


def test_report_prints_nccl_table_deviations_and_plots_the_sweep(tmp_path, capsys):
    run = Run("sweep", tmp_path, {"scale": 1e5}, quick=True)
    run.metric("a", "time", "us", 1.0, 2.0, ALPHABETA)
    run.fidelity("a", FidelityReport(True, [], 1e5))
    run.frame("nccl", pd.DataFrame({
        "fabric": "fattree,4", "collective": "allreduce-ring", "size_bytes": [8, 1 << 20],
        "count": [2, 1 << 18], "type": "float", "redop": "sum", "time_us": [0.5, 40.0],
        "algbw_GBps": [0.02, 26.3], "busbw_GBps": [0.03, 49.3], "model_time_us": [89.0, 133.0],
        "model_busbw_GBps": [0.0002, 14.8], "error": [-0.99, -0.7], "valid": [True, False]}))
    run.deviations([{"case": "a", "name": "NIC overhead", "real_s": 1e-6, "measured_s": 1e-9,
                     "missing_s": 0.999e-6, "effect": "time: model 2 us"}])
    run.finish(show=True)
    out = capsys.readouterr().out
    assert "NIC overhead" in out and "999 ns" in out
    # NCCL-tests' plain text: '#' headers, one line per size within 80 columns.
    rows = [line for line in out.splitlines() if line.strip().startswith("1048576")]
    assert len(rows) == 1 and len(rows[0]) <= 80
    assert rows[0].split() == ["1048576", "262144", "40.00", "26.30", "49.30", "133.00",
                               "14.80", "-70.0%", "NO"]
    assert "#  fattree,4" not in out and "# fattree,4  allreduce-ring  (float, sum;" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["deviations"][0]["name"] == "NIC overhead"
    assert pd.read_csv(tmp_path / "deviations.csv").missing_s.iloc[0] == pytest.approx(0.999e-6)
    assert (tmp_path / "nccl_sweep.png").stat().st_size > 1000
    (tmp_path / "nccl_sweep.png").unlink()
    render_report(tmp_path, show=False)
    assert (tmp_path / "nccl_sweep.png").exists()


def test_sweep_is_registered_from_8_bytes_to_64_mib():
    opts = EXPERIMENTS["sweep"].OPTIONS
    sizes = opts["sizes"].default
    assert sizes[0] == 8 and sizes[-1] == 64 << 20 and sizes == sorted(sizes)
    assert set(opts["collectives"].default) == {"allreduce-ring", "allreduce-hd", "alltoall"}
    assert opts["topo"].default == "fattree,4" and len(opts["sizes"].quick) <= 3

"""The Prometheus exporter without a fabric: the option, what one scrape exposes from
port and message tables shaped as measure() gives them, and the server's life cycle
(tests/integration/test_prometheus.py scrapes a live run with a real Prometheus)."""

from __future__ import annotations

import socket
import urllib.request
from dataclasses import dataclass

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.errors import ParameterError
from core.scaling import Scale
from experiments import exporter as ex
from experiments.fidelity import Check, FidelityReport
from experiments.options import COMMON_OPTIONS, parse_metrics_port


def _ports() -> pd.DataFrame:
    """Two link ends of one link, s1 -> h1 and h1 -> s1, with PFC on: h1's NIC was
    paused twice (so s1's port sent two PAUSEs)."""
    common = {"rate_bps": 100e9, "qdisc": "bfifo", "qdisc_drops": 3, "backlog_bytes": 4154,
              "pfc_priority": 3, "paused_s_real": 2e-6}
    return pd.DataFrame([
        {**common, "node": "s1", "ifname": "s1-eth1", "peer": "h1", "tx_bytes": 1000,
         "tx_packets": 10, "drops": 5, "ecn_marked": 7, "vq_bytes": 100.0,
         "pause_events": 0, "paused_s_real": 0.0, "hist": [5, 3, 2],
         "hist_bucket_bytes": 1000},
        {**common, "node": "h1", "ifname": "h1-eth0", "peer": "s1", "tx_bytes": 2000,
         "tx_packets": 20, "drops": 0, "ecn_marked": 0, "vq_bytes": float("nan"),
         "pause_events": 2, "hist": None, "hist_bucket_bytes": float("nan")},
    ])


def _messages() -> pd.DataFrame:
    row = {"cnps_sent": 4, "ce_marked": 9, "cnps_received": 4, "out_of_sequence": 1, "naks": 1,
           "timeouts": 0, "retransmitted": 6, "ecn_echoes": 0}
    return pd.DataFrame([{"src": "h1", "dst": "h2", **row}, {"src": "h1", "dst": "h2", **row}])


def _scrape(port: int) -> dict[str, dict[tuple, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_the_option_is_common_and_parsed():
    assert COMMON_OPTIONS["metrics_port"].parse("none") is None
    assert parse_metrics_port("9464") == 9464
    for bad in ("0", "65536", "http", "1.5"):
        with pytest.raises(ParameterError):
            parse_metrics_port(bad)


def test_a_scrape_exposes_ports_pfc_nics_and_the_run():
    port = ex.free_port()
    with ex.serving(port, "cc", Scale(5000)) as exp:
        assert exp is not None and ex.current() is exp
        with ex.serving(port, "cc", Scale(5000)) as inner:  # a run inside keeps it
            assert inner is exp
        exp.plan(3)
        exp.traffic_ended(_ports(), _messages(),
                          {("h1", "h2"): "h1-eth0", ("h2", "h1"): "h2-eth0"})
        exp.case_done("incast")
        exp.gated("incast", FidelityReport(False, ["x"], 1e4,
                                           [Check("pacing lag p99", False, 2.0, 1.0, "")]))
        m = _scrape(port)
    assert ex.current() is None
    s1 = (("device", "s1-eth1"), ("node", "s1"), ("peer", "h1"), ("port", ""))
    h1 = (("device", "h1-eth0"), ("node", "h1"), ("peer", "s1"), ("port", ""))
    assert m["fabricemu_time_dilation"][()] == 5000
    assert m["fabricemu_port_tx_bytes_total"] == {s1: 1000, h1: 2000}
    assert m["fabricemu_port_drops_total"][s1] == 5
    assert m["fabricemu_port_ecn_marked_frames_total"][s1] == 7
    assert m["fabricemu_port_speed_bytes"][s1] == 100e9 / 8
    assert m["node_qdisc_backlog"][(("device", "s1-eth1"), ("kind", "bfifo"))] == 4154
    assert m["node_qdisc_drops_total"][(("device", "h1-eth0"), ("kind", "bfifo"))] == 3
    assert m["fabricemu_port_virtual_queue_bytes"] == {s1: 100.0}
    # The marker's queue-depth histogram, cumulative; its last bucket holds the rest.
    assert {dict(k)["le"]: v for k, v in m["fabricemu_port_queue_depth_bytes_bucket"].items()
            if dict(k)["device"] == "s1-eth1"} == {"1000.0": 5, "2000.0": 8, "+Inf": 10}
    assert {dict(k)["device"] for k in m["fabricemu_port_queue_depth_bytes_bucket"]} == {"s1-eth1"}
    # h1's NIC received the PAUSEs; s1's port toward it sent them.
    prio = (("priority", "3"),)
    assert m["fabricemu_port_pfc_rx_pause_total"] == {(*h1[:3], ("port", ""), *prio): 2,
                                                      (*s1[:3], ("port", ""), *prio): 0}
    assert m["fabricemu_port_pfc_tx_pause_total"][(*s1, *prio)] == 2
    assert m["fabricemu_port_pfc_rx_pause_duration_seconds_total"][(*h1, *prio)] == 2e-6
    # NIC counters: the responder's (h2) and the requester's (h1), summed over messages.
    assert m["fabricemu_rdma_np_cnp_sent_total"] == {(("device", "h2-eth0"),): 8}
    assert m["fabricemu_rdma_rp_cnp_handled_total"] == {(("device", "h1-eth0"),): 8}
    assert m["fabricemu_rdma_np_ecn_marked_roce_packets_total"] == {(("device", "h2-eth0"),): 18}
    assert m["fabricemu_rdma_out_of_sequence_total"] == {(("device", "h2-eth0"),): 2}
    assert m["fabricemu_run_cases"][()] == 3 and m["fabricemu_run_cases_done"][()] == 1
    assert m["fabricemu_run_info"] == {(("case", "incast"), ("experiment", "cc")): 1}
    check = (("case", "incast"), ("check", "pacing lag p99"))
    assert m["fabricemu_gate_check_ok"][check] == 0
    assert m["fabricemu_gate_check_measured"][check] == 2.0
    assert m["fabricemu_gate_check_limit"][check] == 1.0
    assert "fabricemu_qp_rate_bits_per_second" not in m  # no traffic run in progress


def test_a_port_in_use_is_a_one_line_error():
    with socket.socket() as busy:
        busy.bind((ex.DEFAULT_ADDRESS, 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ParameterError, match="metrics_port"), \
                ex.serving(port, "cc", Scale()):
            pass
    assert ex.current() is None


def test_a_resumed_run_is_watched_as_its_command_line_says(tmp_path, monkeypatch):
    """metrics_port says how a run is watched: a resumed run serves on the port given
    now (or on none), whatever the run it resumes had."""
    from experiments import rundir
    from experiments.option_parsers import parse_list, parse_text
    from experiments.options import METRICS_PORT, ExperimentOptions, Option
    from experiments.runner import run_experiment
    from model.claims import ALPHABETA

    @dataclass(frozen=True)
    class WatchedOptions(ExperimentOptions):
        cases: list[str]
        metrics_port: int | None

    monkeypatch.setattr(rundir, "capabilities", lambda: {})
    spec = {"cases": Option(["a", "b"], "cases", parse=parse_list(parse_text)),
            "metrics_port": METRICS_PORT}
    served: list[int | None] = []

    def execute(run, opts):
        exp = ex.current()
        served.append(None if exp is None else exp.port)
        for case in opts.cases:
            if not run.finished(case):
                run.metric(case, "m", "x", 1.0, 1.0, ALPHABETA)
                run.commit(case)

    out = tmp_path / "run"
    first, second = ex.free_port(), ex.free_port()
    run_experiment("s", spec, WatchedOptions, execute, out, False, {"metrics_port": first}, show=False)
    run_experiment("s", spec, WatchedOptions, execute, out, False, {"metrics_port": second}, resume=True,
                   show=False)
    run_experiment("s", spec, WatchedOptions, execute, out, False, {}, resume=True, show=False)
    assert served == [first, second, None]

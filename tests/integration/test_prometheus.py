"""A real Prometheus (Debian's ``prometheus``) scrapes the exporter of a short run
(``emu run cc --quick``: DCQCN's incast without and with PFC) every 200 ms; its HTTP
API must give the counters the run's CSVs hold, and every query of the Grafana
dashboard (docs/grafana/fabricemu.json) must return data.

Counters are compared at their final values, scraped after both cases ended and
before the exporter stops (the test keeps it serving), never as rates or queues
sampled at wall-clock moments (a 200 ms scrape may miss a whole traffic run). Each case is measured once (``attempts=1``): a refused attempt's
frames count on the ports but not in the CSVs. The gate's verdict is not judged here
(the exporter reports what happened, valid or not).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from core.scaling import Scale
from experiments import registry
from experiments.exporter import free_port, serving

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc, BPF)")]

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "fabricemu.json"
SCRAPE_INTERVAL = "200ms"
#: Counters agree within this fraction (the interfaces also carry the kernel's own few
#: frames, e.g. IPv6 neighbour discovery, that no CSV counts).
COUNTER_TOLERANCE = 0.02


class Prometheus:
    """A Prometheus process scraping one exporter; ``query`` and ``query_range`` its API."""

    def __init__(self, url: str, target_port: int) -> None:
        self.url = url
        self.target_port = target_port

    def _get(self, path: str, **params: Any) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}?{urllib.parse.urlencode(params)}",
                                    timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def series(self, expr: str) -> list[tuple[dict[str, str], float]]:
        """Instant query: (labels, value) of every series."""
        return [(s["metric"], float(s["value"][1])) for s in self._get("/api/v1/query", query=expr)]

    def query(self, expr: str) -> dict[str, float]:
        """Instant query: {device label (or ''): value}."""
        return {labels.get("device", ""): value for labels, value in self.series(expr)}

    def query_range(self, expr: str, start: float, end: float) -> list[dict]:
        """Evaluated every scrape interval from ``start`` to ``end`` (as Grafana does)."""
        return self._get("/api/v1/query_range", query=expr, start=start, end=end,
                         step=SCRAPE_INTERVAL)


@pytest.fixture
def prometheus() -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is missing (Debian's prometheus package; "
                    "scripts/setup.sh installs it)")
    target, web = free_port(), free_port()
    workdir = tempfile.mkdtemp(prefix="fabricemu-prometheus-")
    config = Path(workdir) / "prometheus.yml"
    config.write_text(f"global:\n  scrape_interval: {SCRAPE_INTERVAL}\n"
                      f"  scrape_timeout: {SCRAPE_INTERVAL}\nscrape_configs:\n"
                      f"  - job_name: fabricemu\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{target}']\n")
    proc = subprocess.Popen([binary, f"--config.file={config}",
                             f"--storage.tsdb.path={Path(workdir) / 'data'}",
                             f"--web.listen-address=127.0.0.1:{web}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{web}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "prometheus did not become ready in 30 s"
            time.sleep(0.1)
        yield Prometheus(url, target)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_for(prom: Prometheus, expr: str, want: float, timeout_s: float = 10.0) -> None:
    """Until a scrape shows ``expr`` >= ``want`` (the exporter is serving meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while prom.query(expr).get("", -1.0) < want:
        assert time.monotonic() < deadline, f"no scrape showed {expr} = {want}"
        time.sleep(0.1)


def _agree(scraped: float, csv: float, what: str) -> None:
    """Within COUNTER_TOLERANCE; a count of 0 exactly (a duration's 0 to a ns)."""
    assert scraped == pytest.approx(csv, rel=COUNTER_TOLERANCE, abs=1e-9), (what, scraped, csv)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of the dashboard, Grafana's
    ``$__rate_interval`` made a window Prometheus reads itself."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"].replace("$__rate_interval", "1m"))
            for p in panels for t in p["targets"]]


def test_prometheus_scrapes_a_run_and_agrees_with_its_csvs(prometheus, tmp_path):
    out = tmp_path / "run"
    start = time.time()
    overrides = {"algorithms": "dcqcn", "scenarios": "incast;incast-pfc", "attempts": 1,
                 "metrics_port": prometheus.target_port}
    with serving(prometheus.target_port, "cc", Scale()):
        registry.cli_run("cc", out, quick=True, overrides=overrides, show=False)
        # Both cases ended and a scrape since shows it: the values below are final.
        # One scrape more, so that a rate() over the final values has two samples even
        # if a loaded machine timed out every scrape during the run.
        _wait_for(prometheus, "fabricemu_run_cases_done", 2.0)
        scrapes = "count_over_time(fabricemu_time_dilation[5m])"
        _wait_for(prometheus, scrapes, prometheus.query(scrapes)[""] + 1)
        ports = pd.read_csv(out / "ports.csv")
        messages = pd.read_csv(out / "messages.csv")
        device = ports.port.str.split(":").str[1]
        per_port = ports.assign(device=device).groupby("device")[
            ["tx_bytes", "tx_packets", "drops", "ecn_marked", "pause_events",
             "paused_s_real"]].sum()
        bottleneck = per_port.tx_bytes.idxmax()
        for metric, column in (("fabricemu_port_tx_bytes_total", "tx_bytes"),
                               ("fabricemu_port_tx_frames_total", "tx_packets"),
                               ("fabricemu_port_drops_total", "drops"),
                               ("fabricemu_port_ecn_marked_frames_total", "ecn_marked"),
                               ("fabricemu_port_pfc_rx_pause_total", "pause_events"),
                               ("fabricemu_port_pfc_rx_pause_duration_seconds_total",
                                "paused_s_real")):
            scraped = prometheus.query(metric)
            assert set(scraped) == set(per_port.index), metric
            for dev, value in scraped.items():
                _agree(value, float(per_port.at[dev, column]), f"{metric} {dev}")
        # The run did what the comparison needs: traffic, marks, drops (PFC off), pauses.
        assert per_port.ecn_marked.sum() > 0 and per_port.drops.sum() > 0
        assert per_port.pause_events.sum() > 0
        # The queue: the highest queue a frame found at the bottleneck (the marker's
        # histogram: the first bucket that holds every frame) is ports.csv's; the backlog
        # sampled at scrapes never passed the buffer.
        buckets = sorted((float(labels["le"]), count) for labels, count in prometheus.series(
            f'fabricemu_port_queue_depth_bytes_bucket{{device="{bottleneck}"}}'))
        top = next(le for le, count in buckets if count == buckets[-1][1])
        mine = ports[device == bottleneck]
        assert 0 < top == pytest.approx(mine.max_queue_hi_bytes.max())
        peak = prometheus.query(f'max_over_time(node_qdisc_backlog{{device="{bottleneck}"}}[5m])')
        assert peak[bottleneck] <= float(mine.buffer_bytes.iloc[0])
        # The NICs' counters: sums over the run's messages.
        for metric, column in (("fabricemu_rdma_np_cnp_sent_total", "cnps_sent"),
                               ("fabricemu_rdma_rp_cnp_handled_total", "cnps_received"),
                               ("fabricemu_rdma_np_ecn_marked_roce_packets_total", "ce_marked"),
                               ("fabricemu_rdma_retransmitted_frames_total", "retransmitted")):
            _agree(sum(prometheus.query(metric).values()), float(messages[column].sum()), metric)
        assert messages.cnps_sent.sum() > 0
        assert prometheus.query("fabricemu_time_dilation")[""] == Scale().factor
        # Every dashboard query returns data over the run. Its last evaluation falls
        # after the scrape _wait_for saw (a loaded machine may have timed out the
        # scrapes before it: the final values must still show).
        end = time.time() + 1.0
        empty = [(title, expr) for title, expr in dashboard_queries()
                 if not prometheus.query_range(expr, start, end)]
        assert not empty, f"dashboard queries without data: {empty}"

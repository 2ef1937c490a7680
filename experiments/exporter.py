"""A live Prometheus exporter of a running experiment (``--set metrics_port=N``,
``emu run --metrics-port N``; docs/monitoring.md lists every metric).

One HTTP endpoint (``prometheus_client``, 127.0.0.1 by default) and one custom
collector that reads the counters when Prometheus scrapes, so the packet path pays
nothing per frame:

* switch ports and host NICs (``emu.telemetry.port_stats``, ``emu.pfc``): live while
  the engine runs (raw netlink dumps and marker map reads at each scrape), and between
  traffic runs the values ``experiments.measure`` read at the end of the last one;
* the engine's QPs (``engine.plan.Shared.pace``, written at each rate trace) and the
  messages acknowledged so far (``Shared.acked``): live while the engine runs;
* the NICs' RoCE counters (mlx5's names) from the engine's per-message records: per
  case, summed over the run, updated when a traffic run ends (workers report them then);
* the run: experiment, case, cases done and planned, the gate's checks of the last
  gated case, and S.

Units are the real fabric's: bytes and frames are the same on both sides; times are
real (emulated / S); a rate Prometheus computes from a counter is per *wall* second,
so it is the emulated rate: multiply by ``fabricemu_time_dilation`` for the real one.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from prometheus_client import start_http_server
from prometheus_client.core import (
    CollectorRegistry,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.metrics_core import CounterMetricFamily
from prometheus_client.registry import Collector

from core.ecn import ThresholdPolicy
from core.errors import ParameterError
from core.scaling import Scale

#: Where the exporter listens unless told otherwise: nothing leaves the machine.
DEFAULT_ADDRESS = "127.0.0.1"

#: (metric, ports.csv/port_stats column, help) of the per-port counters.
PORT_COUNTERS = (
    ("fabricemu_port_tx_bytes", "tx_bytes", "Bytes sent by the port (the interface's tx)"),
    ("fabricemu_port_tx_frames", "tx_packets", "Frames sent by the port"),
    ("fabricemu_port_drops", "drops", "Frames the port dropped: its queue's and the ECN "
                                      "marker's (ports.csv drops)"),
    ("fabricemu_port_ecn_marked_frames", "ecn_marked", "Frames the port marked CE"),
)

#: (metric, messages.csv column, side, help): the NICs' RoCE counters, mlx5's names.
#: side: the NIC of the message's sender ('src': requester, reaction point) or of its
#: receiver ('dst': responder, notification point).
NIC_COUNTERS = (
    ("fabricemu_rdma_np_cnp_sent", "cnps_sent", "dst",
     "CNPs the NIC sent as notification point (mlx5 np_cnp_sent)"),
    ("fabricemu_rdma_np_ecn_marked_roce_packets", "ce_marked", "dst",
     "CE-marked RoCE frames the NIC received (mlx5 np_ecn_marked_roce_packets)"),
    ("fabricemu_rdma_rp_cnp_handled", "cnps_received", "src",
     "CNPs the NIC handled as reaction point (mlx5 rp_cnp_handled)"),
    ("fabricemu_rdma_out_of_sequence", "out_of_sequence", "dst",
     "Data frames received out of sequence (mlx5 out_of_sequence)"),
    ("fabricemu_rdma_packet_seq_err", "naks", "src",
     "Sequence-error NAKs the NIC received (mlx5 packet_seq_err)"),
    ("fabricemu_rdma_local_ack_timeout_err", "timeouts", "src",
     "Retransmission timeouts (mlx5 local_ack_timeout_err)"),
    ("fabricemu_rdma_retransmitted_frames", "retransmitted", "src",
     "Data frames sent again by go-back-N"),
    ("fabricemu_rdma_ecn_echo_acks", "ecn_echoes", "src",
     "ACKs echoing a CE mark (DCTCP-style algorithms)"),
)


@dataclass
class _Traffic:
    """The last engine run: each QP's pace (rate, window) and messages acknowledged per
    worker, the arrays its workers write while it goes (engine.plan.Shared), copies
    once it ended."""

    qps: list[tuple[str, str]]       # per message index: (sender NIC, msg_id)
    pace: Any
    acked: Any
    live: bool


@dataclass
class _State:
    """What the collector reports; every field is replaced under the exporter's lock."""

    experiment: str
    scale: Scale
    case: str = ""
    cases_planned: int = 0
    cases_done: int = 0
    fabric: Any = None               # emu.fabric.Fabric, live while ``traffic`` is set
    ports: pd.DataFrame | None = None  # the last port_stats read at the end of a traffic run
    thresholds: dict[str, tuple[float, float]] = field(default_factory=dict)
    port_numbers: dict[str, int] = field(default_factory=dict)
    traffic: _Traffic | None = None
    messages: int = 0
    nic: dict[tuple[str, str], float] = field(default_factory=dict)  # (metric, device)
    gate_case: str = ""
    gate: list[tuple[str, bool, float | None, float | None]] = field(default_factory=list)
    gate_valid: bool | None = None


class Exporter:
    """The exporter of one run: ``start()`` serves, the hooks below update what it
    reports, ``stop()`` ends the server. At most one is current (``current()``)."""

    def __init__(self, experiment: str, scale: Scale, port: int,
                 address: str = DEFAULT_ADDRESS) -> None:
        self.port = port
        self.address = address
        self._lock = threading.Lock()
        self._state = _State(experiment, scale)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # -- serving ---------------------------------------------------------------------
    def start(self) -> Exporter:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        try:
            self._server, self._thread = start_http_server(self.port, self.address, registry)
        except OSError as e:
            raise ParameterError("metrics_port", self.port,
                                 f"cannot listen on {self.address}: {e.strerror}") from None
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # -- hooks (experiments.measure, experiments.progress, experiments.rundir) -------
    def plan(self, cases: int) -> None:
        """A progress bar over ``cases`` cases began (a sweep may run several)."""
        with self._lock:
            self._state.cases_planned += cases

    def case_done(self, case: str) -> None:
        with self._lock:
            self._state.cases_done += 1
            self._state.case = case

    def traffic_started(self, fab: Any, workload: Any) -> None:
        """A traffic run on ``fab`` begins: its ports are read live from now on."""
        ports = fab.ports()
        policy = ThresholdPolicy.of(fab.thresholds)
        thresholds = {}
        for p in ports:
            if p.is_switch and p.marker is not None:
                t = policy.for_port(p)
                thresholds[p.ifname] = (float(t.kmin_bytes), float(t.kmax_bytes))
        numbers = {p.ifname: fab.plan.iface(p.node, p.peer_node).port for p in ports}
        with self._lock:
            st = self._state
            st.fabric, st.scale = fab, fab.scale
            st.thresholds, st.port_numbers = thresholds, numbers
            st.messages = len(workload.messages)

    def engine(self, shared: Any, qps: list[tuple[str, str]]) -> None:
        """The engine's cross-process state while its workers run; None: they ended,
        their last values are kept until the next run."""
        with self._lock:
            last = self._state.traffic
            if shared is not None:
                self._state.traffic = _Traffic(qps, shared.pace, shared.acked, live=True)
            elif last is not None and last.live:
                self._state.traffic = _Traffic(qps, list(last.pace), list(last.acked),
                                               live=False)

    def traffic_ended(self, ports: pd.DataFrame, messages: pd.DataFrame,
                      egress: dict[tuple[str, str], str]) -> None:
        """A traffic run ended: ``ports`` (port_stats at its end) is served until the
        next one; its ``messages``' RoCE counters are added to the NICs' (``egress``:
        (host, peer host) -> the host's NIC toward it)."""
        add: dict[tuple[str, str], float] = {}
        for row in messages.itertuples(index=False):
            devices = {"src": egress[(row.src, row.dst)], "dst": egress[(row.dst, row.src)]}
            for metric, column, side, _ in NIC_COUNTERS:
                key = (metric, devices[side])
                add[key] = add.get(key, 0.0) + float(getattr(row, column))
        with self._lock:
            st = self._state
            st.fabric, st.ports = None, ports
            for key, value in add.items():
                st.nic[key] = st.nic.get(key, 0.0) + value

    def gated(self, case: str, report: Any) -> None:
        """The gate judged ``case`` (experiments.fidelity.FidelityReport)."""
        with self._lock:
            st = self._state
            st.gate_case, st.gate_valid = case, bool(report.valid)
            st.gate = [(c.name, bool(c.ok), c.measured, c.limit) for c in report.checks]

    def snapshot(self) -> tuple[_State, pd.DataFrame | None, list[float], list[int]]:
        """The state, the port table (read now while traffic runs, else the last one)
        and the live engine arrays (pace, acked), for one scrape."""
        with self._lock:
            st = _State(**vars(self._state))
            st.nic = dict(st.nic)  # traffic_ended adds to it
            traffic = st.traffic
        ports = st.ports
        if st.fabric is not None and getattr(st.fabric, "started", True):
            with contextlib.suppress(OSError):  # the fabric went away mid-read
                ports = st.fabric.port_stats()
        pace = list(traffic.pace) if traffic is not None else []
        acked = list(traffic.acked) if traffic is not None else []
        return st, ports, pace, acked


class _Collector(Collector):
    """Reads the exporter's state at each scrape (prometheus_client calls ``collect``)."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterable[Metric]:
        st, ports, pace, acked = self.exporter.snapshot()
        yield from _run_metrics(st, acked)
        if ports is not None and not ports.empty:
            yield from _port_metrics(st, ports)
        yield from _nic_metrics(st)
        if st.traffic is not None:
            yield from _qp_metrics(st.traffic, pace)


def _gauge(name: str, doc: str, labels: Iterable[str] = (), unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels), unit=unit)


def _run_metrics(st: _State, acked: list[int]) -> Iterator[Metric]:
    s = _gauge("fabricemu_time_dilation", "S: emulated time / real time; a rate per wall "
               "second times S is the real fabric's")
    s.add_metric([], st.scale.factor)
    info = _gauge("fabricemu_run_info", "The experiment and the case ended last",
                  ["experiment", "case"])
    info.add_metric([st.experiment, st.case], 1)
    planned = _gauge("fabricemu_run_cases", "Cases the run plans")
    planned.add_metric([], st.cases_planned)
    done = _gauge("fabricemu_run_cases_done", "Cases the run finished")
    done.add_metric([], st.cases_done)
    msgs = _gauge("fabricemu_run_messages", "Messages of the traffic run in progress (the last one's between runs)")
    msgs.add_metric([], st.messages)
    yield from (s, info, planned, done, msgs)
    if st.traffic is not None:
        ack = _gauge("fabricemu_run_messages_acked", "Messages of the traffic run in progress "
                     "acknowledged so far (live; the last run's when it ended)")
        ack.add_metric([], sum(acked))
        yield ack
    if st.gate_valid is not None:
        valid = _gauge("fabricemu_gate_valid", "The fidelity gate's verdict of the last gated "
                       "case (1 valid)", ["case"])
        valid.add_metric([st.gate_case], float(st.gate_valid))
        ok = _gauge("fabricemu_gate_check_ok", "Each gate check of the last gated case (1 passed)",
                    ["case", "check"])
        measured = _gauge("fabricemu_gate_check_measured", "What each gate check measured "
                          "(its own unit; docs/fidelity)", ["case", "check"])
        limit = _gauge("fabricemu_gate_check_limit", "Each gate check's limit", ["case", "check"])
        for name, passed, value, bound in st.gate:
            ok.add_metric([st.gate_case, name], float(passed))
            if value is not None:
                measured.add_metric([st.gate_case, name], float(value))
            if bound is not None:
                limit.add_metric([st.gate_case, name], float(bound))
        yield from (valid, ok, measured, limit)


def _port_metrics(st: _State, ports: pd.DataFrame) -> Iterator[Metric]:
    labels = ["device", "node", "port", "peer"]
    rows = list(ports.itertuples(index=False))

    def key(r: Any) -> list[str]:
        return [r.ifname, r.node, str(st.port_numbers.get(r.ifname, "")), r.peer]

    for name, column, doc in PORT_COUNTERS:
        c = CounterMetricFamily(name, doc, labels=labels)
        for r in rows:
            c.add_metric(key(r), float(getattr(r, column)))
        yield c
    speed = _gauge("fabricemu_port_speed_bytes", "The real fabric's link rate (bytes/s)", labels)
    qdrops = CounterMetricFamily("node_qdisc_drops", "Frames the port's queue (leaf qdisc) "
                                 "dropped", labels=["device", "kind"])
    backlog = _gauge("node_qdisc_backlog", "Bytes in the port's queue (leaf qdisc)",
                     ["device", "kind"])
    vq = _gauge("fabricemu_port_virtual_queue_bytes", "The ECN marker's virtual queue (what "
                "it marks by)", labels)
    for r in rows:
        speed.add_metric(key(r), float(r.rate_bps) / 8)
        kind = str(r.qdisc)
        qdrops.add_metric([r.ifname, kind], float(r.qdisc_drops))
        backlog.add_metric([r.ifname, kind], float(r.backlog_bytes))
        if not pd.isna(r.vq_bytes):
            vq.add_metric(key(r), float(r.vq_bytes))
    yield from (speed, qdrops, backlog, vq, _queue_depth(rows, key, labels))
    kmin = _gauge("fabricemu_port_ecn_kmin_bytes", "ECN marking threshold Kmin", labels)
    kmax = _gauge("fabricemu_port_ecn_kmax_bytes", "ECN marking threshold Kmax", labels)
    for r in rows:
        if r.ifname in st.thresholds:
            lo, hi = st.thresholds[r.ifname]
            kmin.add_metric(key(r), lo)
            kmax.add_metric(key(r), hi)
    yield from (kmin, kmax)
    if "pause_events" in ports:
        yield from _pfc_metrics(rows, key, labels)


def _queue_depth(rows: list[Any], key: Any, labels: list[str]) -> Metric:
    """The ECN marker's histogram of the queue each frame found (bpf marking only; its
    last bucket holds everything beyond): ports.csv's max_queue_lo/hi_bytes come from it."""
    h = HistogramMetricFamily("fabricemu_port_queue_depth_bytes", "Queue depth each frame "
                              "found at the port (the ECN marker's virtual queue, per frame)",
                              labels=labels)
    for r in rows:
        if not isinstance(r.hist, list):
            continue
        bucket = float(r.hist_bucket_bytes)
        counts = list(itertools.accumulate(r.hist))
        bounds = [str(float((i + 1) * bucket)) for i in range(len(counts) - 1)] + ["+Inf"]
        h.add_metric(key(r), list(zip(bounds, map(float, counts), strict=True)), None)
    return h


def _pfc_metrics(rows: list[Any], key: Any, labels: list[str]) -> Iterator[Metric]:
    """A paused port received PAUSE frames; the port that sent them is its peer's port
    back toward it (the ingress of the congested switch, as on a real switch)."""
    labels = [*labels, "priority"]
    by_end = {(r.node, r.peer): r for r in rows}
    rx = CounterMetricFamily("fabricemu_port_pfc_rx_pause", "PAUSE frames the port received "
                             "(times it was paused; SONiC PFC_RX)", labels=labels)
    tx = CounterMetricFamily("fabricemu_port_pfc_tx_pause", "PAUSE frames the port sent "
                             "(its peer's pauses; SONiC PFC_TX)", labels=labels)
    dur = CounterMetricFamily("fabricemu_port_pfc_rx_pause_duration_seconds", "Real time "
                              "the port was paused (SONiC PFC_RX_PAUSE_DURATION)", labels=labels)
    for r in rows:
        if pd.isna(r.pfc_priority):
            continue
        prio = str(int(r.pfc_priority))
        back = by_end.get((r.peer, r.node))
        rx.add_metric([*key(r), prio], float(r.pause_events))
        dur.add_metric([*key(r), prio], float(r.paused_s_real))
        tx.add_metric([*key(r), prio], float(back.pause_events) if back is not None else 0.0)
    yield from (rx, tx, dur)


def _nic_metrics(st: _State) -> Iterator[Metric]:
    for metric, _, _, doc in NIC_COUNTERS:
        c = CounterMetricFamily(metric, doc + " (per case)", labels=["device"])
        for (name, device), value in sorted(st.nic.items()):
            if name == metric:
                c.add_metric([device], value)
        yield c


def _qp_metrics(traffic: _Traffic, pace: list[float]) -> Iterator[Metric]:
    rate = _gauge("fabricemu_qp_rate_bits_per_second", "Each QP's sending rate at its last "
                  "rate trace (real bit/s; live, the last run's when it ended)", ["device", "qp"])
    window = _gauge("fabricemu_qp_window_bytes", "Each QP's window at its last rate trace "
                    "(payload bytes; window-based algorithms only; live, the last run's when "
                    "it ended)", ["device", "qp"])
    for i, (device, msg) in enumerate(traffic.qps):
        r, w = pace[2 * i], pace[2 * i + 1]
        if r > 0:  # traced at least once
            rate.add_metric([device, msg], r)
            if w >= 0:
                window.add_metric([device, msg], w)
    yield from (rate, window)


# ----------------------------------------------------------------------------- current

_current: Exporter | None = None


def current() -> Exporter | None:
    """The exporter of the run in progress, if it has one."""
    return _current


@contextlib.contextmanager
def serving(port: int | None, experiment: str, scale: Scale,
            address: str = DEFAULT_ADDRESS) -> Iterator[Exporter | None]:
    """Serve the run's metrics on ``port`` (None: no exporter) while the body runs. An
    exporter already serving ``port`` (a caller watching several runs, or wanting the
    last values scraped before it stops) is used as it is, and left running."""
    global _current
    if port is None:
        yield None
        return
    if _current is not None and _current.port == port:
        yield _current
        return
    exporter = Exporter(experiment, scale, port, address).start()
    _current = exporter
    try:
        yield exporter
    finally:
        _current = None
        exporter.stop()


def free_port(address: str = DEFAULT_ADDRESS) -> int:
    """A TCP port nothing listens on now (for tests and benchmarks)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])

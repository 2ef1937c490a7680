"""What every experiment shares: options, the run directory, measurement, the model
side by side, the fidelity gate, tidy CSVs, plots, the summary table and reports.

A run directory holds

* ``config.json``  everything needed to rerun (experiment, options, S, marking back
  end, capabilities, versions, seed, git commit, the command line);
* tidy CSVs, one row per measurement, in real-fabric units with S in config.json:
  ``metrics.csv`` (= summary rows), and per experiment some of ``messages.csv``,
  ``latency.csv``, ``queue.csv``, ``queue_model.csv`` (the model's queue
  trajectory), ``rates.csv``, ``ports.csv``, ``collective.csv``, ``flows.csv``,
  ``intervals.csv``; times on the engine's clock (0 = the engine starts sending);
* ``summary.json``: every headline metric as ``{case, metric, unit, measured,
  predicted, error_rel, valid}`` and the fidelity verdict of every case;
* PNG plots re-rendered from the CSVs by :func:`render_report` (``emu report DIR``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from emu.errors import ParameterError
from emu.fidelity import FidelityReport, combine
from emu.units import parse_rate_bps, parse_size_bytes

REPO_ROOT = Path(__file__).resolve().parent.parent
# Off a terminal (CI logs, pipes) rich would wrap the summary table at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)

#: Full-size RoCEv2 frame on the wire (4096 payload + Eth/IP/UDP/BTH/ICRC), as the model.
PACKET_BYTES = 4154
PAYLOAD_BYTES = 4096

# What the emulator's data path costs a message beyond its bandwidth term, as the
# model must price it (emu.model.alphabeta). Measured on a k=4 fat-tree ring
# all-reduce at S = 1e5 (messages.csv: first_tx_s, last_tx_s, end_s):
#
# * forwarding: a hop is a veth (the frame crosses at once) into an HTB port whose
#   bucket releases a frame as soon as it holds its tokens, so an uncongested hop
#   adds no serialization; a frame's time on the wire is only the spacing the
#   engine's pacing and the shapers keep. The last frame of a message reaches its
#   receiver 1.2-2.1 ns (real) after it was sent over 2 to 6 hops, where storing and
#   forwarding would add 83-208 ns: the fabric cuts through, with no switch latency.
# * overhead: a message starts within a few ns (real; the workers' dependency
#   polling) of its dependencies' last frames being received; a real RDMA NIC adds
#   ~1 us (alphabeta.DEFAULT_OVERHEAD_S), which the engine does not emulate.
EMULATED_FORWARDING = "cut-through"
EMULATED_OVERHEAD_S = 0.0


# ----------------------------------------------------------------------------- options

@dataclass(frozen=True)
class Option:
    """One experiment option: default, ``--quick`` value and the parser of ``--set``."""

    default: Any
    help: str
    quick: Any = None            # None: same as default
    parse: Callable[[str], Any] = str

    def value(self, quick: bool) -> Any:
        return self.quick if quick and self.quick is not None else self.default


def parse_list(item: Callable[[str], Any]) -> Callable[[str], list]:
    """``a;b;c`` -> [item(a), ...] (';' because topology specs contain commas)."""
    return lambda text: [item(x.strip()) for x in text.split(";") if x.strip()]


def parse_bool(text: str) -> bool:
    words = {"1": True, "true": True, "yes": True, "on": True,
             "0": False, "false": False, "no": False, "off": False}
    if text.strip().lower() not in words:
        raise ParameterError("flag", text, "must be true or false")
    return words[text.strip().lower()]


parse_sizes = parse_list(lambda s: parse_size_bytes(s, "size"))
parse_specs = parse_list(str)


def resolve_options(spec: Mapping[str, Option], quick: bool,
                    overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults (or quick values), then overrides; strings are parsed by the option."""
    unknown = set(overrides) - set(spec)
    if unknown:
        raise ParameterError("option", ", ".join(sorted(unknown)),
                             f"known options: {', '.join(sorted(spec))}")
    opts = {name: o.value(quick) for name, o in spec.items()}
    for name, value in overrides.items():
        opts[name] = spec[name].parse(value) if isinstance(value, str) else value
    return opts


SCALE_HELP = "time-dilation factor S (emulated rate = real rate / S)"

# S = 100000: a 400G NIC runs at 4 Mb/s emulated, one 4 KB frame every 8.3 ms. On this
# shared 2-core machine the engine's p99 pacing lag measured 4-13 ms with 16 hosts on
# two workers, so at S = 50000 (a frame every 4.2 ms) the gate's two-packet-time lag
# limit is marginal and at 100000 it holds with margin. 1.6T core links then run at
# 16 Mb/s and NVLink (3.6T) at 36 Mb/s, far inside what a shaped veth holds, and 400G
# stays far above the shaper's floor (emu/scaling.py). A 4 MiB ring all-reduce over
# 16 ranks takes ~8 s emulated, a 3 x 2 MiB incast ~13 s.
DEFAULT_SCALE = 100000.0


# ----------------------------------------------------------------------------- versions

def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "kernel": platform.release()}
    for dist in ("fabricemu", "pyroute2", "scapy", "pandas", "numpy", "networkx", "matplotlib"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "absent"
    return out


def git_commit() -> str | None:
    """HEAD of the checkout (+ '-dirty'), None outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("-dirty" if dirty else "")


def capabilities() -> dict:
    """The capability probe (about a second); its failure is recorded, not fatal."""
    try:
        from emu.capabilities import probe

        return probe().as_dict()
    except Exception as e:  # a probe bug must not lose a finished measurement
        return {"error": f"{type(e).__name__}: {e}"}


# ----------------------------------------------------------------------------- metrics

def error_rel(measured: float | None, predicted: float | None) -> float | None:
    """(measured - predicted) / predicted; 0 when both are 0; None when undefined."""
    if measured is None or predicted is None or not math.isfinite(measured) \
            or not math.isfinite(predicted):
        return None
    if predicted == 0:
        return 0.0 if measured == 0 else None
    return (measured - predicted) / abs(predicted)


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal shares, 1/n = one takes all."""
    xs = [float(v) for v in values]
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if xs and sq > 0 else float("nan")


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):  # numpy scalars
        return _json_safe(x.item())
    return x


# ----------------------------------------------------------------------------- run dir

@dataclass
class RunResult:
    """What ``run()`` returns: where the results are and the headline verdict."""

    run_dir: Path
    metrics: pd.DataFrame
    fidelity: FidelityReport
    cases: dict[str, FidelityReport] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.fidelity.valid

    def metric(self, metric: str, case: str | None = None) -> dict:
        """The summary row of ``metric`` (in ``case``); KeyError if absent."""
        rows = self.metrics[(self.metrics.metric == metric)
                            & ((self.metrics.case == case) if case is not None else True)]
        if rows.empty:
            raise KeyError(f"no metric {metric!r} in case {case!r}")
        return rows.iloc[0].to_dict()


class Run:
    """Collects one experiment's measurements and writes its run directory."""

    def __init__(self, experiment: str, out_dir: str | Path, options: Mapping[str, Any], *,
                 quick: bool, seed: int = 0) -> None:
        self.experiment = experiment
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.options = dict(options)
        self.quick = quick
        self.seed = seed
        self.started = time.time()
        self.rows: list[dict] = []
        self.frames: dict[str, list[pd.DataFrame]] = {}
        self.cases: dict[str, FidelityReport] = {}
        self.fabrics: dict[str, dict] = {}
        self.notes: list[str] = []

    # -- collecting ------------------------------------------------------------------
    def metric(self, case: str, metric: str, unit: str, measured: float | None,
               predicted: float | None) -> None:
        """One headline metric beside its prediction (validity is the case's verdict)."""
        self.rows.append({"case": case, "metric": metric, "unit": unit,
                          "measured": _json_safe(measured), "predicted": _json_safe(predicted),
                          "error_rel": error_rel(measured, predicted)})

    def frame(self, name: str, df: pd.DataFrame, **labels: Any) -> None:
        """Append rows to ``name.csv`` with constant label columns in front."""
        if df is None or df.empty:
            return
        df = df.copy()
        for i, (k, v) in enumerate(labels.items()):
            df.insert(i, k, v)
        self.frames.setdefault(name, []).append(df)

    def fidelity(self, case: str, report: FidelityReport) -> None:
        self.cases[case] = report

    def fabric(self, name: str, fab: Any) -> None:
        """Record a fabric's summary (topology, S, marking back end, build time)."""
        self.fabrics[name] = {**fab.summary(), "capabilities": fab.capabilities or None}

    # -- writing ---------------------------------------------------------------------
    def finish(self, show: bool = True) -> RunResult:
        verdict = combine(list(self.cases.values()))
        valid_of = {c: r.valid for c, r in self.cases.items()}
        for row in self.rows:
            row["valid"] = valid_of.get(row["case"], verdict.valid)
        metrics = pd.DataFrame(self.rows, columns=["case", "metric", "unit", "measured",
                                                   "predicted", "error_rel", "valid"])
        metrics.to_csv(self.dir / "metrics.csv", index=False)
        for name, parts in self.frames.items():
            pd.concat(parts, ignore_index=True).to_csv(self.dir / f"{name}.csv", index=False)
        config = {
            "experiment": self.experiment, "quick": self.quick, "options": self.options,
            "scale": self.options.get("scale"), "seed": self.seed,
            "fabrics": self.fabrics, "capabilities": capabilities(), "versions": versions(),
            "git_commit": git_commit(), "started": time.strftime(
                "%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "duration_s": time.time() - self.started, "notes": self.notes,
            "rerun": rerun_command(self.experiment, self.options, self.dir),
            "invocation": {"executable": sys.executable, "argv": " ".join(sys.argv),
                           "cwd": os.getcwd()},
        }
        (self.dir / "config.json").write_text(json.dumps(config, indent=2, default=str))
        summary = {
            "experiment": self.experiment, "valid": verdict.valid,
            "suggested_scale": verdict.suggested_scale, "reasons": verdict.reasons,
            "cases": {c: r.as_dict() for c, r in self.cases.items()},
            "metrics": [{k: _json_safe(v) for k, v in r.items()} for r in self.rows],
        }
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        from experiments.report import render_report

        render_report(self.dir, show=show)
        return RunResult(self.dir, metrics, verdict, dict(self.cases))


def rerun_command(experiment: str, options: Mapping[str, Any], out: Path) -> str:
    """`emu run` line that reproduces the options (lists joined by ';')."""
    def fmt(v: Any) -> str:
        return ";".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)

    sets = " ".join(f"--set '{k}={fmt(v)}'" for k, v in options.items() if k != "scale")
    return f"emu run {experiment} --scale {options.get('scale')} {sets} --out {out}"


@contextlib.contextmanager
def progress(total: int, description: str) -> Iterator[Callable[[str], None]]:
    """A rich progress bar over ``total`` cases; yields ``advance(label)``."""
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total} {task.fields[label]}"),
                   TimeElapsedColumn(), console=console, transient=False,
                   disable=not console.is_terminal)
    with bar:
        task = bar.add_task(description, total=total, label="")

        def advance(label: str) -> None:
            bar.update(task, advance=1, label=label)

        yield advance


# ----------------------------------------------------------------------------- fabric

def delay_emulated(fab: Any) -> bool:
    return bool(fab.summary().get("delay_emulated", False))


def model_graph(fab: Any) -> Any:
    """The routed graph the model prices, with the link delays the fabric really has:
    where netem is absent (or delay is off) no delay is emulated, so the model adds none
    either; where it is, each link's delay as emulated (rounded to netem's resolution)."""
    from emu.routing import topo_graph

    graph = topo_graph(fab.topo)
    emulated = delay_emulated(fab)
    for a, b, data in graph.edges(data=True):
        data["delay_s"] = fab.link_delay_s(a, b) if emulated else 0.0
    return graph


def packet_time_s(rate_bps: float) -> float:
    """Real serialization time of one full RoCEv2 frame at ``rate_bps``."""
    return 8.0 * PACKET_BYTES / rate_bps


def max_scale(fab: Any) -> float:
    """Largest S at which the slowest link of the fabric is still shaped accurately."""
    slowest = min(p.rate_bps for p in fab.ports())
    return slowest / fab.scale.min_emulated_rate_bps


def parse_rate(text: str) -> float:
    return parse_rate_bps(text, "rate")


def size_label(size_bytes: int) -> str:
    """Short exact label: 1MiB, 256KiB, 100KB, 4154B."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("MB", 10**6),
                      ("KB", 10**3)):
        if size_bytes >= div and size_bytes % div == 0:
            return f"{size_bytes // div}{unit}"
    return f"{size_bytes}B"


# ----------------------------------------------------------------------------- measuring

#: Per-port counters that are differenced over a traffic run.
PORT_COUNTERS = ("tx_bytes", "tx_packets", "drops", "ecn_marked", "ect_packets", "marker_packets")


@dataclass
class Measurement:
    """Everything measured in one traffic run, real-fabric units (times in real s)."""

    messages: pd.DataFrame
    latency: pd.DataFrame
    rates: pd.DataFrame
    queue: pd.DataFrame          # t_s, port, backlog_bytes, vq_bytes
    ports: pd.DataFrame          # one row per port: counter deltas, max queue bounds
    stats: dict
    wall_s: float

    @property
    def completion_s(self) -> float:
        """First start to last completion of the run's messages (real s)."""
        return float(self.messages.end_s.max() - self.messages.start_s.min())

    def port(self, name: str) -> pd.Series:
        return self.ports.loc[name]


def port_deltas(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Counter deltas per port, and bounds of the highest queue a packet found there
    from the marker's per-packet histogram (NaN without a BPF marker)."""
    b = before.set_index("port")
    a = after.set_index("port")
    out = a[["node", "peer", "tier", "rate_bps", "buffer_bytes", "backend"]].copy()
    for col in PORT_COUNTERS:
        out[col] = (pd.to_numeric(a[col], errors="coerce").fillna(0)
                    - pd.to_numeric(b[col], errors="coerce").fillna(0)).astype("int64")
    lo, hi = [], []
    for port in out.index:
        h_after, h_before = a.at[port, "hist"], b.at[port, "hist"]
        if h_after is None or not isinstance(h_after, list):
            lo.append(math.nan)
            hi.append(math.nan)
            continue
        bucket = float(a.at[port, "hist_bucket_bytes"])
        delta = [x - y for x, y in zip(h_after, h_before or [0] * len(h_after), strict=True)]
        seen = [i for i, d in enumerate(delta) if d > 0]
        top = max(seen, default=None)
        lo.append(0.0 if top is None else top * bucket)
        # The last bucket also holds everything beyond it.
        hi.append(0.0 if top is None else math.inf if top == len(delta) - 1 else (top + 1) * bucket)
    out["max_queue_lo_bytes"] = lo
    out["max_queue_hi_bytes"] = hi
    return out


def measure(fab: Any, workload: Any, engine_config: Any, *, watch: Sequence[Any] = (),
            sample_interval_s: float | None = None) -> Measurement:
    """Run ``workload`` on ``fab`` with the engine, sampling the queues of ``watch``
    ports every ``sample_interval_s`` (real s; default: one packet time of the
    slowest watched port), and difference the port counters around the run."""
    from emu.telemetry import QueueSampler
    from traffic.engine import run_workload

    scale = fab.scale.factor
    if sample_interval_s is None and watch:
        sample_interval_s = packet_time_s(min(p.rate_bps for p in watch))
    before = fab.port_stats()
    sampler = QueueSampler(list(watch), fab.iprs_by_path(),
                           interval_s=(sample_interval_s or 1.0) * scale) if watch else None
    t0 = time.monotonic()
    if sampler is not None:
        sampler.start()
    try:
        result = run_workload(fab, workload, engine_config)
    finally:
        if sampler is not None:
            sampler.stop()
    wall_s = time.monotonic() - t0
    after = fab.port_stats()
    queue = sampler.frame() if sampler is not None else pd.DataFrame(
        columns=["t_s", "port", "backlog_bytes", "vq_bytes"])
    if sampler is not None and result.stats.get("t0_monotonic_ns"):
        # On the engine's time base (t = 0 when it starts sending), like messages.csv.
        queue["t_s"] += (sampler.start_ns - result.stats["t0_monotonic_ns"]) / 1e9
    queue["t_s"] = queue["t_s"] / scale
    return Measurement(result.messages, result.latency, result.rates, queue,
                       port_deltas(before, after), dict(result.stats), wall_s)


def engine_config(cc: str, **kw: Any) -> Any:
    """The engine's configuration for a CC mode ('off' or a DCQCN PARAMS name)."""
    from traffic.engine import EngineConfig

    return EngineConfig(cc=cc, **kw)


def _thresholds_of(fab: Any, port: Any) -> Any:
    from emu.ecn.curve import ThresholdPolicy

    policy = fab.thresholds if isinstance(fab.thresholds, ThresholdPolicy) else \
        ThresholdPolicy(default=fab.thresholds)
    return policy.for_port(port)


def fidelity_of(fab: Any, m: Measurement, workload: Any, *, cc: bool,
                saturated: Mapping[str, float] | None = None) -> FidelityReport:
    """The gate over one measured traffic run. ``saturated`` maps port names to the
    real window (s) over which the model says the port sends at its full rate;
    every host NIC is also checked not to exceed its rate over the whole run."""
    from emu.fidelity import MarkingCounts, PortQueue, PortRate, RunMeasures, evaluate

    ports = {p.name: p for p in fab.ports()}
    windows = {p.name: (m.completion_s, False) for p in fab.ports()
               if not p.is_switch and m.ports.at[p.name, "tx_bytes"] > 0}
    windows.update({name: (w, True) for name, w in (saturated or {}).items()})
    rates = []
    for name, (window_s, busy) in windows.items():
        achieved = 8.0 * float(m.ports.at[name, "tx_bytes"]) / window_s if window_s > 0 else 0.0
        rates.append(PortRate(name, ports[name].rate_bps, achieved, expect_saturated=busy))
    marked = [p for p in fab.ports() if p.marker is not None]
    queues = []
    for p in marked:
        row = m.ports.loc[p.name]
        if row.tx_packets > 0:
            t = _thresholds_of(fab, p)
            queues.append(PortQueue(p.name, t.kmin_bytes, t.kmax_bytes,
                                    float(row.max_queue_lo_bytes), float(row.max_queue_hi_bytes),
                                    int(row.ecn_marked)))
    host_rate = max(p.rate_bps for p in fab.ports() if not p.is_switch)
    switch_ports = m.ports[[ports[n].is_switch for n in m.ports.index]]
    msgs = m.messages
    marking = MarkingCounts(
        marking=fab.marking != "off", cc=cc, marks=int(switch_ports.ecn_marked.sum()),
        ce_received=int(msgs.ce_marked.sum()), cnps_sent=int(msgs.cnps_sent.sum()),
        cnps_received=int(msgs.cnps_received.sum()),
        rate_reductions=int((m.rates.groupby("msg_id").rate_bps.diff() < 0).sum()),
        ports=queues)
    st = m.stats
    measures = RunMeasures(
        scale=fab.scale.factor, wall_s=float(st["run_wall_s"]), cpu_s=float(sum(st["cpu_s"])),
        workers=int(st["n_workers"]), pacing_lag_p99_s=float(st["pacing_lag_p99_emu_s"]),
        packet_time_s=packet_time_s(host_rate), messages_expected=len(workload.messages),
        messages_completed=int(msgs.completed.sum()), error=st.get("error"),
        port_rates=rates, marking=marking)
    return evaluate(measures, max_scale=max_scale(fab))


def run_experiment(name: str, options: Mapping[str, Option],
                   execute: Callable[[Run, dict[str, Any]], None], out_dir: str, quick: bool,
                   overrides: Mapping[str, Any]) -> RunResult:
    """What every experiment's ``run()`` does: resolve options, execute, finish the run dir."""
    opts = resolve_options(options, quick, overrides)
    rec = Run(name, out_dir, opts, quick=quick)
    try:
        execute(rec, opts)
    except BaseException as e:
        # A long sweep keeps what its finished cases measured: the run directory is
        # written, marked invalid with the reason, and the error still propagates.
        if rec.rows or rec.frames:
            reason = f"incomplete: stopped by {type(e).__name__}: {e}".rstrip(": ")
            rec.fidelity("(run)", FidelityReport(False, [reason], float(opts.get("scale", 1.0))))
            with contextlib.suppress(Exception):
                rec.finish(show=False)
        raise
    return rec.finish()

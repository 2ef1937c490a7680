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
* PNG plots re-rendered from the CSVs by :func:`render_report` (``emu report DIR``);
* ``cases/NNN/``: one record per finished case, written as the case ends (what
  ``--resume`` reloads). summary.json and config.json say ``status`` running,
  stopped or finished; every file is replaced atomically (temporary file, rename).

Options are parsed and checked (:func:`resolve_options`) before any fabric is built
or any directory created; a refused option leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from core.errors import FabricEmuError, ParameterError
from core.frame import FRAME_BYTES, HEADER_BYTES, MTU_PAYLOAD_BYTES
from core.units import parse_rate_bps, parse_size_bytes
from experiments.fidelity import FidelityReport, combine

REPO_ROOT = Path(__file__).resolve().parent.parent
# Off a terminal (CI logs, pipes) rich would wrap the summary table at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)


#: The fixed delays of a real fabric that the model prices (model.alphabeta,
#: topologies.base): per-hop serialization (a store-and-forward switch holds a frame
#: until it has all of it), switch pipeline latency (node ``switch_latency_s``), link
#: propagation (link ``delay_s``) and the NIC's per-message overhead. The model always
#: prices all four; what the emulator lacks is reported as a deviation, measured.
FIXED_DELAYS = ("per-hop serialization", "switch latency", "link propagation",
                "NIC overhead")


# ----------------------------------------------------------------------------- options

#: Largest message an experiment sends: at S = 1e5 a 400G NIC sends 64 MiB in over two
#: minutes of wall time, so a sweep of larger messages would run for hours.
MAX_MESSAGE_BYTES = 64 << 20

#: An option's parser: reads a ``--set`` string or an already typed value (defaults,
#: the Python API, a resumed run's config.json) and returns the canonical value, or
#: raises ParameterError. Parsers are idempotent on their own output.
Parser = Callable[[Any], Any]


def parse_text(value: Any) -> str:
    """A non-empty string, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise ParameterError("value", value, "must not be empty")
    return value.strip()


def parse_int(minimum: int = 1, maximum: int | None = None) -> Parser:
    """Integer in [minimum, maximum]; '1.5', 'abc' and flags are refused."""
    def parse(value: Any) -> int:
        if isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", value):
            number = int(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            raise ParameterError("value", value, "must be an integer")
        if number < minimum or (maximum is not None and number > maximum):
            bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
            raise ParameterError("value", value, f"must be {bound}")
        return number
    return parse


def parse_float(minimum: float, maximum: float, *, open_low: bool = False,
                open_high: bool = False) -> Parser:
    """Finite real number in the interval (closed unless an end is marked open)."""
    def parse(value: Any) -> float:
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError):
            raise ParameterError("value", value, "must be a number") from None
        low_ok = number > minimum if open_low else number >= minimum
        high_ok = number < maximum if open_high else number <= maximum
        if not (math.isfinite(number) and low_ok and high_ok):
            interval = (f"{'(' if open_low else '['}{minimum:g}, "
                        f"{maximum:g}{')' if open_high else ']'}")
            raise ParameterError("value", value, f"must be a finite number in {interval}")
        return number
    return parse


def parse_choice(*choices: str) -> Parser:
    """One of ``choices``, case-insensitive, returned in lower case."""
    def parse(value: Any) -> str:
        word = value.strip().lower() if isinstance(value, str) else None
        if word not in choices:
            raise ParameterError("value", value, f"choose one of {' | '.join(choices)}")
        return word
    return parse


def parse_list(item: Parser) -> Parser:
    """``a;b;c`` (or a list) -> [item(a), ...], non-empty and without repeats (';'
    because topology specs contain commas). An empty sweep would measure nothing."""
    def parse(value: Any) -> list:
        if isinstance(value, str):
            parts: list = [x.strip() for x in value.split(";")]
            if any(not x for x in parts) and value.strip():
                raise ParameterError("value", value, "an empty item between ';'")
            parts = [x for x in parts if x]
        elif isinstance(value, (list, tuple)):
            parts = list(value)
        else:
            raise ParameterError("value", value, "expected a ';'-separated list")
        if not parts:
            raise ParameterError("value", value, "an empty list: give at least one item")
        items = [item(x) for x in parts]
        repeated = sorted({str(x) for x in items if items.count(x) > 1})
        if repeated:
            raise ParameterError("value", value, f"listed twice: {', '.join(repeated)}")
        return items
    return parse


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    words = {"1": True, "true": True, "yes": True, "on": True,
             "0": False, "false": False, "no": False, "off": False}
    if not isinstance(value, str) or value.strip().lower() not in words:
        raise ParameterError("flag", value, "must be true or false")
    return words[value.strip().lower()]


def parse_size(value: Any) -> int:
    """A message size: 1 byte to MAX_MESSAGE_BYTES."""
    size = parse_size_bytes(value, "size")
    if not 1 <= size <= MAX_MESSAGE_BYTES:
        raise ParameterError("size", value, f"must be 1 B to {MAX_MESSAGE_BYTES >> 20} MiB")
    return size


def parse_topo(value: Any) -> str:
    """A topology spec, checked (name, arguments, size caps) without building it."""
    from topologies.spec import topo_size

    spec = parse_text(value)
    topo_size(spec)
    return spec


def parse_thresholds(value: Any) -> str:
    """``KMIN/KMAX`` in bytes, e.g. ``100K/400K``; kept as text (Pmax is its own option)."""
    from core.ecn import Thresholds

    text = parse_text(value)
    Thresholds.from_text(text)
    return text


def parse_scale(value: Any) -> float:
    """The time-dilation factor S, as core.scaling.Scale accepts it."""
    from core.scaling import Scale

    return Scale(parse_float(1.0, 1e9, open_high=True)(value)).factor


def parse_collective(value: Any) -> str:
    from traffic.collectives import NAMES

    return parse_choice(*NAMES)(value)


#: Congestion control of collective, ECMP and fairness runs: a traffic.dcqcn.PARAMS name.
parse_cc = parse_choice("off", "nic", "paper")
#: DCQCN parameter set of the runs with DCQCN on.
parse_dcqcn = parse_choice("paper", "nic")
parse_sizes = parse_list(parse_size)
parse_specs = parse_list(parse_topo)


def _format(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ";".join(_format(v) for v in value)
    if isinstance(value, float):
        return repr(value)  # round-trips exactly
    return str(value)


@dataclass(frozen=True)
class Option:
    """One experiment option: default, ``--quick`` value and the parser of ``--set``
    (which also validates defaults and typed values)."""

    default: Any
    help: str
    quick: Any = None            # None: same as default
    parse: Parser = parse_text

    def value(self, quick: bool) -> Any:
        return self.quick if quick and self.quick is not None else self.default

    def format(self, value: Any) -> str:
        """``--set`` text that parse() reads back to ``value``."""
        return _format(value)


def resolve_options(spec: Mapping[str, Option], quick: bool, overrides: Mapping[str, Any],
                    check: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Defaults (or quick values), then overrides, every value through its option's
    parser, then ``check`` across options: all before anything is built."""
    unknown = set(overrides) - set(spec)
    if unknown:
        raise ParameterError("option", ", ".join(sorted(unknown)),
                             f"known options: {', '.join(sorted(spec))}")
    opts = {}
    for name, option in spec.items():
        raw = overrides[name] if name in overrides else option.value(quick)
        try:
            opts[name] = option.parse(raw)
        except ParameterError as e:
            if e.value is raw or e.value == raw:
                why = e.why
            else:  # about a list item, or a quantity derived from the value
                why = f"{'' if e.name == 'value' else e.name + '='}{e.value!r}: {e.why}"
            raise ParameterError(name, raw, why) from None
        except (TypeError, ValueError) as e:
            raise ParameterError(name, raw, str(e)) from None
    if check is not None:
        check(opts)
    return opts


def check_topology(spec: str, scale: float, min_hosts: int = 2, option: str = "topo") -> int:
    """The hosts of ``spec`` (its graph is built: pure data, within the size caps), at
    least ``min_hosts``, and every link rate shaped accurately at ``scale``."""
    from core.scaling import Scale
    from topologies.spec import build_topo

    topo = build_topo(spec)
    hosts = len(topo.host_nodes())
    if hosts < min_hosts:
        raise ParameterError(option, spec, f"has {hosts} host(s); this experiment needs "
                                           f"at least {min_hosts}")
    topo.fabric_links()  # parallel links are refused here, not by the builder
    rates = {info["rate_bps"] for _, _, info in topo.links(withInfo=True)}
    for rate_bps in sorted(rates):
        Scale(scale).rate_emu_bps(rate_bps)
    return hosts


def check_senders(spec: str, scale: float, senders: int, option: str) -> None:
    """``senders`` hosts besides the receiver exist on ``spec``."""
    hosts = check_topology(spec, scale)
    if senders > hosts - 1:
        raise ParameterError(option, senders, f"{spec} has {hosts} hosts, so at most "
                                              f"{hosts - 1} besides the receiver")


def check_thresholds(texts: Sequence[str], pmax: float) -> None:
    """Every Kmin/Kmax with the run's Pmax makes a valid marking curve."""
    from core.ecn import Thresholds

    for text in texts:
        Thresholds.from_text(text, pmax)


SCALE_HELP = "time-dilation factor S (emulated rate = real rate / S)"



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
    """Collects one experiment's measurements and writes its run directory.

    Every finished case is committed (:meth:`commit`) to ``cases/NNN/`` at once and
    the run's CSVs, summary.json (marked incomplete) and config.json are rewritten,
    each atomically: a SIGKILL or an OOM loses only the case then running, and
    ``--resume`` reloads the committed cases and runs the rest.
    """

    def __init__(self, experiment: str, out_dir: str | Path, options: Mapping[str, Any], *,
                 quick: bool, seed: int = 0, spec: Mapping[str, Option] | None = None) -> None:
        self.experiment = experiment
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.options = dict(options)
        self.spec = spec
        self.quick = quick
        self.seed = seed
        self.started = time.time()
        self.units: list[_Unit] = []
        self.pending = _Unit("")
        self._environment: dict[str, Any] | None = None

    # -- collecting ------------------------------------------------------------------
    def metric(self, case: str, metric: str, unit: str, measured: float | None,
               predicted: float | None) -> None:
        """One headline metric beside its prediction (validity is the case's verdict)."""
        self.pending.rows.append({"case": case, "metric": metric, "unit": unit,
                                  "measured": _json_safe(measured),
                                  "predicted": _json_safe(predicted),
                                  "error_rel": error_rel(measured, predicted)})

    def frame(self, name: str, df: pd.DataFrame, **labels: Any) -> None:
        """Append rows to ``name.csv`` with constant label columns in front."""
        if df is None or df.empty:
            return
        df = df.copy()
        for i, (k, v) in enumerate(labels.items()):
            df.insert(i, k, v)
        self.pending.frames.setdefault(name, []).append(df)

    def fidelity(self, case: str, report: FidelityReport) -> None:
        self.pending.cases[case] = report

    def deviations(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Named emulation deviations (`measure_deviations`): listed in summary.json,
        deviations.csv and the printed report, never folded into the model."""
        self.pending.deviations.extend(dict(r) for r in rows)

    def fabric(self, name: str, fab: Any) -> None:
        """Record a fabric's summary (topology, S, marking back end, build time)."""
        self.pending.fabrics[name] = {**fab.summary(), "capabilities": fab.capabilities or None,
                                      "fixed_delays": emulated_fixed_delays(fab)}

    def note(self, text: str) -> None:
        self.pending.notes.append(text)

    @property
    def rows(self) -> list[dict]:
        return [r for u in (*self.units, self.pending) for r in u.rows]

    @property
    def cases(self) -> dict[str, FidelityReport]:
        return {c: r for u in (*self.units, self.pending) for c, r in u.cases.items()}

    # -- committing ------------------------------------------------------------------
    def finished(self, key: str) -> bool:
        """Whether case ``key`` is already committed (a resumed run skips it)."""
        return any(u.key == key for u in self.units)

    def commit(self, key: str) -> None:
        """Case ``key`` ended: write what it recorded now (see the class docstring)."""
        unit, self.pending = self.pending, _Unit("")
        unit.key = key
        with deferred_interrupts():
            unit.save(self.dir / CASES_DIR, len(self.units))
            self.units.append(unit)
            self._write(status="running")

    def resume(self) -> int:
        """Load the cases a previous run into this directory committed; their count."""
        self.units = _Unit.load_all(self.dir / CASES_DIR)
        return len(self.units)

    # -- writing ---------------------------------------------------------------------
    def environment(self) -> dict[str, Any]:
        """Capabilities, versions and commit: probed once per run."""
        if self._environment is None:
            self._environment = {"capabilities": capabilities(), "versions": versions(),
                                 "git_commit": git_commit()}
        return self._environment

    def _write(self, status: str, stopped: str | None = None) -> RunResult:
        """metrics.csv, the frame CSVs, config.json and summary.json, each atomically."""
        units = self.units
        cases = {c: r for u in units for c, r in u.cases.items()}
        reports = list(cases.values())
        if status != "finished":
            reason = stopped or (f"incomplete: {len(units)} case(s) finished so far; the run "
                                 "is still going or was killed")
            reports.append(FidelityReport(False, [reason], float(self.options.get("scale", 1.0))))
        verdict = combine(reports)
        rows = [dict(r) for u in units for r in u.rows]
        for row in rows:
            row["valid"] = cases[row["case"]].valid if row["case"] in cases else verdict.valid
        metrics = pd.DataFrame(rows, columns=["case", "metric", "unit", "measured",
                                              "predicted", "error_rel", "valid"])
        write_csv_atomic(self.dir / "metrics.csv", metrics)
        names = dict.fromkeys(name for u in units for name in u.frames)
        for name in names:
            parts = [df for u in units for df in u.frames.get(name, [])]
            write_csv_atomic(self.dir / f"{name}.csv", pd.concat(parts, ignore_index=True))
        fabrics = {k: v for u in units for k, v in u.fabrics.items()}
        deviations = [{k: _json_safe(v) for k, v in d.items()} for u in units
                      for d in u.deviations]
        if deviations:
            write_csv_atomic(self.dir / "deviations.csv", pd.DataFrame(deviations))
        config = {
            "experiment": self.experiment, "quick": self.quick, "status": status,
            "options": self.options, "scale": self.options.get("scale"), "seed": self.seed,
            "fabrics": fabrics,
            # Which real-fabric fixed delays each fabric emulated (the model prices all).
            "fixed_delays": {k: v.get("fixed_delays") for k, v in fabrics.items()},
            **self.environment(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "duration_s": time.time() - self.started,
            "notes": [n for u in units for n in u.notes],
            "rerun": rerun_command(self.experiment, self.options, self.dir, self.spec,
                                   self.quick),
            "invocation": {"executable": sys.executable, "argv": " ".join(sys.argv),
                           "cwd": os.getcwd()},
        }
        write_text_atomic(self.dir / "config.json", json.dumps(config, indent=2, default=str))
        summary = {
            "experiment": self.experiment, "valid": verdict.valid, "status": status,
            "suggested_scale": verdict.suggested_scale, "reasons": verdict.reasons,
            "cases": {c: r.as_dict() for c, r in cases.items()},
            "metrics": [{k: _json_safe(v) for k, v in r.items()} for r in rows],
            "deviations": deviations,
        }
        write_text_atomic(self.dir / "summary.json",
                          json.dumps(summary, indent=2, default=str))
        return RunResult(self.dir, metrics, verdict, cases)

    def start(self) -> None:
        """config.json before the first case: what is running and how to rerun it."""
        with deferred_interrupts():
            self._write(status="running")

    def finish(self, show: bool = True, stopped: str | None = None) -> RunResult:
        """Write the run directory and render it. ``stopped`` (the reason) marks a run
        that did not finish: the case then running is dropped, the run is invalid."""
        with deferred_interrupts():
            if stopped is None and not self.pending.empty():
                unit, self.pending = self.pending, _Unit("(rest)")
                unit.save(self.dir / CASES_DIR, len(self.units))
                self.units.append(unit)
            result = self._write("stopped" if stopped else "finished", stopped)
        from experiments.report import render_report

        render_report(self.dir, show=show)
        return result

    def discard(self, created: bool) -> None:
        """Remove what this run wrote when it finished no case (and the directory
        itself if the run created it): a failed start leaves nothing behind."""
        for name in ("config.json", "summary.json", "metrics.csv"):
            (self.dir / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            (self.dir / CASES_DIR).rmdir()
        if created:
            with contextlib.suppress(OSError):
                self.dir.rmdir()


#: Subdirectory of a run directory with one record per committed case.
CASES_DIR = "cases"


@dataclass
class _Unit:
    """What one finished case (or cases measured together) recorded."""

    key: str
    rows: list[dict] = field(default_factory=list)
    frames: dict[str, list[pd.DataFrame]] = field(default_factory=dict)
    cases: dict[str, FidelityReport] = field(default_factory=dict)
    fabrics: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    deviations: list[dict] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.rows or self.frames or self.cases or self.notes or self.deviations)

    def save(self, root: Path, index: int) -> None:
        """``root/NNN/`` (unit.json and one CSV per frame), renamed into place whole."""
        root.mkdir(exist_ok=True)
        final = root / f"{index:03d}"
        tmp = root / f".{index:03d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name, parts in self.frames.items():
            pd.concat(parts, ignore_index=True).to_csv(tmp / f"{name}.csv", index=False)
        record = {"key": self.key, "rows": self.rows, "frames": list(self.frames),
                  "cases": {c: r.as_dict() for c, r in self.cases.items()},
                  "fabrics": self.fabrics, "notes": self.notes, "deviations": self.deviations}
        (tmp / "unit.json").write_text(json.dumps(record, indent=1, default=str))
        os.replace(tmp, final)

    @classmethod
    def load_all(cls, root: Path) -> list[_Unit]:
        units = []
        if not root.is_dir():
            return units
        for path in sorted(p for p in root.iterdir() if re.fullmatch(r"[0-9]{3}", p.name)):
            try:
                record = json.loads((path / "unit.json").read_text())
                frames = {name: [pd.read_csv(path / f"{name}.csv")]
                          for name in record["frames"]}
                units.append(cls(record["key"], list(record["rows"]), frames,
                                 {c: FidelityReport.from_dict(r)
                                  for c, r in record["cases"].items()},
                                 dict(record["fabrics"]), list(record["notes"]),
                                 list(record.get("deviations", []))))
            except (OSError, ValueError, KeyError, TypeError, pd.errors.ParserError) as e:
                raise FabricEmuError(f"cannot resume: {path} is damaged ({e}); use --force "
                                     "to start over") from None
            if len(units) != int(path.name) + 1:
                raise FabricEmuError(f"cannot resume: {root} misses case records before "
                                     f"{path.name}; use --force to start over")
        return units


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and a rename: readers see the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_csv_atomic(path: Path, df: pd.DataFrame) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP until the block ends, then deliver them: a
    second Ctrl-C while results are written cannot leave them half written."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, lambda signum, _frame: caught.append(signum))
                for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if caught:
            os.kill(os.getpid(), caught[0])


def rerun_command(experiment: str, options: Mapping[str, Any], out: Path,
                  spec: Mapping[str, Option] | None = None, quick: bool = False) -> str:
    """The `emu run` line that reproduces the run: every option, as its parser reads it."""
    def fmt(name: str, value: Any) -> str:
        return spec[name].format(value) if spec and name in spec else _format(value)

    words = ["emu", "run", experiment] + (["--quick"] if quick else [])
    if "scale" in options:
        words += ["--scale", fmt("scale", options["scale"])]
    for name, value in options.items():
        if name != "scale":
            words += ["--set", f"{name}={fmt(name, value)}"]
    return shlex.join([*words, "--out", str(out)])


def _is_run_dir(path: Path) -> bool:
    return (path / "config.json").is_file() or (path / CASES_DIR).is_dir()


#: What a run writes into its directory; --force removes these and nothing else.
_RUN_OUTPUTS = ("*.csv", "*.png", "config.json", "summary.json", ".*.tmp")


def prepare_out_dir(name: str, out: str | Path | None, *, force: bool,
                    resume: bool) -> tuple[Path, bool]:
    """The run directory and whether this run created it.

    No ``out``: ``runs/NAME-YYYYmmdd-HHMMSS`` made with an exclusive mkdir, with
    ``-2``, ``-3``, ... if another run took the name. A given ``out`` that exists
    and is not empty is refused unless ``force`` (its run outputs are removed first)
    or ``resume`` (kept: the caller reloads the finished cases)."""
    if force and resume:
        raise ParameterError("--force/--resume", "both", "give one of them")
    if out is None:
        base = Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
        for n in itertools.count(1):
            path = base if n == 1 else base.with_name(f"{base.name}-{n}")
            try:
                path.mkdir(parents=True)
            except FileExistsError:
                continue
            except OSError as e:
                raise FabricEmuError(f"cannot create the run directory {path}: "
                                     f"{e.strerror}") from None
            return path, True
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ParameterError("--out", str(path), "exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not (force or resume):
            raise ParameterError("--out", str(path), "is not empty; add --force to start "
                                 "over or --resume to keep its finished cases")
        if not _is_run_dir(path):
            raise ParameterError("--out", str(path), "is not empty and is not a run "
                                 "directory (no config.json); refusing to write into it")
        if force:
            for pattern in _RUN_OUTPUTS:
                for old in path.glob(pattern):
                    old.unlink()
            shutil.rmtree(path / CASES_DIR, ignore_errors=True)
        return path, False
    created = not path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FabricEmuError(f"cannot create the run directory {path}: {e.strerror}") from None
    return path, created


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
    """The routed graph the model prices: the real fabric's link rates, propagation
    (link ``delay_s``) and switch latency (node ``switch_latency_s``) as the topology
    gives them, whatever the emulator reproduces (`emulated_fixed_delays`)."""
    from topologies.routing import topo_graph

    return topo_graph(fab.topo)


def emulated_fixed_delays(fab: Any) -> dict[str, dict[str, Any]]:
    """Which of FIXED_DELAYS this fabric emulates, and how (recorded in config.json).

    A fabric (or the engine driving it) that emulates more declares it in its summary
    under ``emulated_fixed_delays`` ({name: how}); otherwise propagation is emulated
    where netem delays the links and the other three are not. The hops are veths into
    HTB ports whose bucket releases a frame as soon as it holds its tokens: a frame is
    serialized once, at the bottleneck, and no switch adds pipeline latency."""
    summary = fab.summary()
    declared = dict(summary.get("emulated_fixed_delays") or {})
    out = {name: {"emulated": False, "how": "not emulated"} for name in FIXED_DELAYS}
    if summary.get("delay_emulated"):
        out["link propagation"] = {"emulated": True, "how": "netem delay lines, dilated by S"}
    else:
        out["link propagation"]["how"] = str(summary.get("delay_detail") or "not emulated")
    out["per-hop serialization"]["how"] = ("not emulated: frames cut through every hop "
                                           "(serialized once, at the bottleneck shaper)")
    for name, how in declared.items():
        if name in out and how:
            out[name] = {"emulated": True, "how": str(how)}
    return out


def packet_time_s(rate_bps: float) -> float:
    """Real serialization time of one full RoCEv2 frame at ``rate_bps``."""
    return 8.0 * FRAME_BYTES / rate_bps


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
    from engine.run import run_workload

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
    from engine.run import EngineConfig

    return EngineConfig(cc=cc, **kw)


def _thresholds_of(fab: Any, port: Any) -> Any:
    from core.ecn import ThresholdPolicy

    policy = fab.thresholds if isinstance(fab.thresholds, ThresholdPolicy) else \
        ThresholdPolicy(default=fab.thresholds)
    return policy.for_port(port)


def fidelity_of(fab: Any, m: Measurement, workload: Any, *, cc: bool,
                saturated: Mapping[str, float] | None = None) -> FidelityReport:
    """The gate over one measured traffic run. ``saturated`` maps port names to the
    real window (s) over which the model says the port sends at its full rate;
    every host NIC is also checked not to exceed its rate over the whole run."""
    from experiments.fidelity import (
        MarkingCounts,
        NicBusy,
        PortQueue,
        PortRate,
        RunMeasures,
        evaluate,
    )

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
        port_rates=rates, marking=marking, machine_busy=st.get("machine_busy"),
        data_frames=int(st.get("data_packets_sent", 0)),
        pacing_lag_total_s=float(st.get("pacing_lag_total_emu_s", 0.0)),
        pacing_resets=int(st.get("pacing_resets", 0)),
        pacing_dropped_s=float(st.get("pacing_dropped_emu_s", 0.0)),
        nic_busy=[NicBusy(f"{n['host']}:{n['ifname']}", n["busy_emu_s"], n["scheduled_emu_s"])
                  for n in st.get("nics", ())],
        ring_drops=int(st.get("ring_drops", 0)), retransmitted=int(msgs.retransmitted.sum()),
        fabric_drops=int(m.ports.drops.sum()))
    return evaluate(measures, max_scale=max_scale(fab))


def gate(fab: Any, m: Measurement, workload: Any, *, cc: bool,
         saturated: Mapping[str, float] | None = None) -> FidelityReport:
    """`fidelity_of` plus the real-queue check of every sampled port: the qdisc backlog
    against the marker's virtual queue (`experiments.fidelity.queue_divergence_checks`),
    both read by the QueueSampler in one pass."""
    from experiments.fidelity import queue_divergence_checks

    report = fidelity_of(fab, m, workload, cc=cc, saturated=saturated)
    queue = m.queue
    samples = {str(port): list(zip(g.backlog_bytes.astype(float), g.vq_bytes.astype(float),
                                   strict=True))
               for port, g in queue.groupby("port")} if not queue.empty else {}
    checks = queue_divergence_checks(samples, FRAME_BYTES)
    failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
    return FidelityReport(report.valid and not failed, [*report.reasons, *failed],
                          report.suggested_scale, [*report.checks, *checks])


# ----------------------------------------------------------------------------- deviations

#: A fixed delay counts as reproduced when the emulator's measured value reaches this
#: fraction of the real fabric's (the issue's 5 % on unloaded one-way latency).
DEVIATION_TOLERANCE = 0.05


def hop_sum_s(graph: Any, path: Sequence[str], frame_bytes: float) -> dict[str, float]:
    """One frame of ``frame_bytes`` crossing ``path`` on an idle real fabric, by part:
    serialization at every hop (store and forward), switch latency, propagation."""
    hops = list(zip(path[:-1], path[1:], strict=True))
    return {"per-hop serialization": sum(8.0 * frame_bytes / float(graph.edges[u, v]["rate_bps"])
                                         for u, v in hops),
            "switch latency": sum(float(graph.nodes[n].get("switch_latency_s", 0.0))
                                  for n in path[1:-1]),
            "link propagation": sum(float(graph.edges[u, v].get("delay_s", 0.0))
                                    for u, v in hops)}


def measure_deviations(fab: Any, m: Measurement, case: str, graph: Any | None = None
                       ) -> list[dict[str, Any]]:
    """The fixed delays the emulator did not reproduce in one run, measured.

    * path: a message's first frames see empty queues, so the lowest one-way latency
      of its frames is the unloaded path delay; the real fabric's is the hop sum of
      `hop_sum_s` for that frame size on the message's shortest route.
    * NIC overhead: a message's first frame leaves first_tx_s - start_s after the
      engine posts it; the real NIC needs alphabeta.DEFAULT_OVERHEAD_S.

    A deviation (one row per measured shortfall beyond DEVIATION_TOLERANCE) names the
    parts not emulated (`emulated_fixed_delays`) and gives the real and the measured
    medians over the run's messages."""
    from model.alphabeta import DEFAULT_OVERHEAD_S

    graph = model_graph(fab) if graph is None else graph
    emulated = emulated_fixed_delays(fab)
    msgs = m.messages[m.messages.end_s.notna() & (m.messages.src != m.messages.dst)]
    lowest = m.latency.groupby("msg_id").one_way_s.min() if not m.latency.empty else pd.Series()
    parts: list[dict[str, float]] = []
    measured: list[float] = []
    for msg in msgs.itertuples():
        if msg.msg_id not in lowest.index:
            continue
        frame = min(MTU_PAYLOAD_BYTES, int(msg.size_bytes)) + HEADER_BYTES
        sums = [hop_sum_s(graph, p, frame) for p in fab.routes.paths(msg.src, msg.dst)]
        parts.append(min(sums, key=lambda d: sum(d.values())))
        measured.append(float(lowest[msg.msg_id]))
    rows = []
    if parts:
        real = {k: float(pd.Series([d[k] for d in parts]).median()) for k in parts[0]}
        rows.append(_deviation_row(
            case, [k for k in real if not emulated[k]["emulated"]] or ["fixed path delay"],
            "unloaded one-way latency of a message's first frames (median over messages)",
            sum(real.values()), float(pd.Series(measured).median()),
            "; ".join(f"{k} {v * 1e9:.0f} ns ({emulated[k]['how']})" for k, v in real.items())))
    started = msgs[(msgs.first_tx_s >= 0) & (msgs.start_s >= 0)]
    if not started.empty:
        rows.append(_deviation_row(
            case, ["NIC overhead"], "per-message NIC overhead: first frame on the wire after "
            "the message is posted (median over messages)", DEFAULT_OVERHEAD_S,
            float((started.first_tx_s - started.start_s).median()),
            f"a real RDMA NIC needs ~{DEFAULT_OVERHEAD_S * 1e6:g} us per message "
            f"({emulated['NIC overhead']['how']})"))
    return [r for r in rows if r is not None]


def _deviation_row(case: str, names: list[str], what: str, real_s: float, measured_s: float,
                   detail: str) -> dict[str, Any] | None:
    if measured_s >= (1 - DEVIATION_TOLERANCE) * real_s:
        return None
    return {"case": case, "name": " + ".join(names), "what": what, "real_s": real_s,
            "measured_s": measured_s, "missing_s": real_s - measured_s,
            "missing_rel": (real_s - measured_s) / real_s, "detail": detail}


# ----------------------------------------------------------------------------- FCT slowdown

#: Message size buckets of the FCT slowdown table: (label, largest size in the bucket).
SIZE_BUCKETS = (("<=4KiB", 4 << 10), ("4KiB-64KiB", 64 << 10), ("64KiB-1MiB", 1 << 20),
                ("1MiB-16MiB", 16 << 20), (">16MiB", math.inf))


def size_bucket(size_bytes: float) -> str:
    return next(label for label, top in SIZE_BUCKETS if size_bytes <= top)


def ideal_fct_s(graph: Any, paths: Callable[[str, str], Sequence[Sequence[str]]], src: str,
                dst: str, size_bytes: float) -> float:
    """The real-fabric model's FCT of one message of ``size_bytes`` alone on an idle
    fabric (NIC overhead, line rate, store-and-forward path latency)."""
    from model.alphabeta import PlainMessage, PlainWorkload, predict_workload

    alone = PlainWorkload("alone", (PlainMessage(0, src, dst, size_bytes),))
    return predict_workload(alone, graph, paths).completion_s


def fct_slowdown(messages: pd.DataFrame, ideal_s: Mapping[Any, float],
                 predicted_s: Mapping[Any, Sequence[float]]) -> pd.DataFrame:
    """FCT slowdown (FCT / ideal FCT of that size alone) by size bucket: p50 and p99
    measured (messages.fct_s) and predicted (the model's FCTs of the same messages
    under the workload's load; several per message when the model draws hashes)."""
    rows = []
    done = messages[messages.fct_s.notna()]
    measured = pd.DataFrame({"bucket": [size_bucket(s) for s in done.size_bytes],
                             "slowdown": [f / ideal_s[i] for i, f in zip(done.msg_id, done.fct_s,
                                                                         strict=True)]})
    model = pd.DataFrame([{"bucket": size_bucket(s), "slowdown": f / ideal_s[i]}
                          for i, s in zip(messages.msg_id, messages.size_bytes, strict=True)
                          for f in predicted_s.get(i, ())], columns=["bucket", "slowdown"])
    for label, _ in SIZE_BUCKETS:
        got = measured[measured.bucket == label].slowdown
        want = model[model.bucket == label].slowdown
        if got.empty and want.empty:
            continue
        rows.append({"bucket": label, "messages": len(got),
                     "p50": got.quantile(0.5) if len(got) else math.nan,
                     "p99": got.quantile(0.99) if len(got) else math.nan,
                     "model_p50": want.quantile(0.5) if len(want) else math.nan,
                     "model_p99": want.quantile(0.99) if len(want) else math.nan})
    return pd.DataFrame(rows, columns=["bucket", "messages", "p50", "p99", "model_p50",
                                       "model_p99"])


def record_slowdown(run: Run, case: str, table: pd.DataFrame) -> None:
    """fct_slowdown.csv rows and one summary metric per bucket and percentile."""
    for row in table.itertuples():
        for q in ("p50", "p99"):
            run.metric(case, f"FCT slowdown {q} {row.bucket}", "x", getattr(row, q),
                       getattr(row, f"model_{q}"))
    run.frame("fct_slowdown", table, case=case)


def run_experiment(name: str, options: Mapping[str, Option],
                   execute: Callable[[Run, dict[str, Any]], None], out_dir: str | Path | None,
                   quick: bool, overrides: Mapping[str, Any], *,
                   check: Callable[[dict[str, Any]], None] | None = None,
                   force: bool = False, resume: bool = False) -> RunResult:
    """What every experiment's ``run()`` does: parse and check every option, prepare
    the run directory (nothing is created if an option is refused), execute, finish."""
    opts = resolve_options(options, quick, overrides, check)
    if resume and out_dir is not None and (Path(out_dir) / "config.json").is_file():
        opts, quick = _resumed_options(name, options, Path(out_dir), opts, overrides, check)
    path, created = prepare_out_dir(name, out_dir, force=force, resume=resume)
    rec = Run(name, path, opts, quick=quick, spec=options)
    try:
        if resume:
            rec.resume()
        rec.start()
        execute(rec, opts)
    except BaseException as e:
        # A long sweep keeps what its finished cases measured: the run directory is
        # written, marked invalid with the reason, and the error still propagates.
        if rec.units:  # already on disk: said first, a second Ctrl-C may cut what follows
            console.print(f"{len(rec.units)} finished case(s) kept in {path}; add --resume "
                          f"--out {path} to run the rest", style="yellow", markup=False)
            reason = f"incomplete: stopped by {type(e).__name__}: {e}".rstrip(": ")
            with contextlib.suppress(Exception):
                rec.finish(show=False, stopped=reason)
        else:
            rec.discard(created)
        raise
    return rec.finish()


def _resumed_options(name: str, options: Mapping[str, Option], out: Path,
                     opts: dict[str, Any], overrides: Mapping[str, Any],
                     check: Callable[[dict[str, Any]], None] | None
                     ) -> tuple[dict[str, Any], bool]:
    """The options of the run being resumed; options given now must agree with them."""
    try:
        config = json.loads((out / "config.json").read_text())
        experiment, stored, quick = config["experiment"], config["options"], config["quick"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FabricEmuError(f"cannot resume {out}: unreadable config.json ({e}); use "
                             "--force to start over") from None
    if experiment != name:
        raise ParameterError("--resume", str(out), f"holds a {experiment!r} run, not {name!r}")
    try:
        resumed = resolve_options(options, bool(quick), stored, check)
    except ParameterError as e:
        raise FabricEmuError(f"cannot resume {out}: its options no longer parse ({e})") from None
    for key in overrides:
        if opts[key] != resumed[key]:
            raise ParameterError(key, overrides[key], f"the run being resumed has {key}="
                                 f"{options[key].format(resumed[key])}; drop the option or "
                                 "use --force to start over")
    return resumed, bool(quick)

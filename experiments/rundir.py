"""The run directory: what a run records and how it is written (``Run``).

A run directory holds

* ``config.json``  everything needed to rerun (experiment, options, S, marking back
  end, capabilities, versions, seed, git commit, the command line);
* tidy CSVs, one row per measurement, in real-fabric units with S in config.json:
  ``metrics.csv`` (= summary rows), and per experiment some of ``messages.csv``,
  ``latency.csv``, ``queue.csv``, ``queue_model.csv`` (the model's queue
  trajectory), ``rates.csv`` (rate and window per QP), ``ports.csv``,
  ``collective.csv``, ``busbw_model.csv`` (the model's busbw curve), ``flows.csv``,
  ``intervals.csv``, ``fct_slowdown.csv``; times on the engine's clock (0 = the
  engine starts sending); every CSV has a ``valid`` column (`with_valid`);
* ``summary.json``: every headline metric as ``{case, metric, unit, measured,
  predicted, kind, tolerance_rel, error_rel, model_disagrees, valid}`` (what the
  model value claims to be, `model.claims`: only a prediction has a tolerance, an
  error and a verdict), the predictions beyond their tolerance (``model_disagrees``),
  the fidelity verdict of every case, and for a refused run a larger S fixes the
  command to rerun it (``suggested_rerun``);
* PNG plots re-rendered from the CSVs by :func:`render_report` (``emu report DIR``);
* ``cases/NNN/``: one record per finished case, written as the case ends (what
  ``--resume`` reloads). The files above are made from them when the run starts and
  when it ends (`experiments.runfiles`; ``emu report`` makes them for a run killed
  before its end). summary.json and config.json say ``status`` running, stopped or
  finished; every file is replaced atomically (temporary file, rename).

``experiments.runner`` starts and ends runs, ``experiments.storage`` writes the case
records, ``experiments.runfiles`` the files above, ``experiments.environment`` probes
the machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

from core import safefile
from core.errors import FabricEmuError, ParameterError
from core.forkmap import Background
from core.scaling import Scale
from emu.fabric import Fabric
from engine.capture import Captured
from engine.run import EngineConfig
from experiments.environment import capabilities, git_commit, versions
from experiments.exporter import current
from experiments.fidelity import MACHINE_CHECKS, FidelityReport
from experiments.option_parsers import format_value
from experiments.options import Option
from experiments.report import render_report
from experiments.runfiles import json_safe, owner, write_run_files
from experiments.storage import (
    CASES_DIR,
    CaseRecord,
    deferred_interrupts,
)
from model.claims import Claim, error_rel
from traffic.fixeddelay import FIXED_DELAYS, PROPAGATION, SERIALIZATION

#: Subdirectory of a run directory with each captured case's pcaps (the ``capture`` option).
PCAP_DIR = "pcap"


# ----------------------------------------------------------------------------- metrics



def metric_row(case: str, metric: str, unit: str, measured: float | None,
               predicted: float | None, claim: Claim | None) -> dict[str, Any]:
    """A summary row: the model's value labelled with its claim (none without a value)."""
    measured, predicted = json_safe(measured), json_safe(predicted)
    if predicted is not None and claim is None:
        raise TypeError(f"{case}: {metric}: a model value needs its claim (model.claims)")
    pred = claim is not None and predicted is not None and claim.is_prediction
    return {"case": case, "metric": metric, "unit": unit, "measured": measured,
            "predicted": predicted,
            "kind": claim.kind.value if claim is not None and predicted is not None else None,
            "tolerance_rel": claim.tolerance_rel if pred and claim is not None else None,
            "error_rel": error_rel(measured, predicted) if pred else None,
            "model_disagrees": (claim.disagrees(measured, predicted)
                                if pred and claim is not None else None)}


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 = equal shares, 1/n = one takes all."""
    xs = [float(v) for v in values]
    sq = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * sq) if xs and sq > 0 else float("nan")


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

    Every finished case is committed (:meth:`commit`) to ``cases/NNN/`` at once, by a
    forked writer while the run goes on (``core.forkmap.Background``; the next commit
    and the end wait for it, and raise what it could not write), and nothing else is
    written then: a SIGKILL or an OOM loses only the case then running,
    ``--resume`` reloads the committed cases and runs the rest, and ``emu report``
    writes the run's CSVs and summary from them (`experiments.runfiles`). The run's
    own files are written when it starts and when it ends or stops.
    """

    def __init__(self, experiment: str, out_dir: str | Path, options: Mapping[str, Any], *,
                 quick: bool, seed: int = 0, spec: Mapping[str, Option] | None = None) -> None:
        self.experiment = experiment
        self.dir = safefile.make_dir(out_dir)
        self.options = dict(options)
        self.spec = spec
        self.quick = quick
        self.seed = seed
        self.started = time.time()
        self.units: list[CaseRecord] = []
        self.pending = CaseRecord("")
        self._environment: dict[str, Any] | None = None
        self._pcaps: set[Path] = set()
        self._saving: Background | None = None

    @property
    def scale(self) -> Scale:
        """The run's S: its ``scale`` option, else the default every experiment runs at
        when not told otherwise (``core.scaling.DEFAULT_SCALE``, their options' default)."""
        return Scale(float(self.options["scale"])) if "scale" in self.options else Scale()

    # -- collecting ------------------------------------------------------------------
    def metric(self, case: str, metric: str, unit: str, measured: float | None,
               predicted: float | None, claim: Claim | None = None) -> None:
        """One headline metric beside the model's value and what that value claims to be
        (`model.claims`; required with a model value). A prediction gets its error and
        whether the model disagrees beyond its tolerance; an estimate, a bound or an
        ideal gets neither. (Validity is the case's verdict.)"""
        self.pending.rows.append(metric_row(case, metric, unit, measured, predicted, claim))

    def spread(self, case: str, metric: str, band: tuple[float, float],
               full_range: tuple[float, float]) -> None:
        """Where the realisations of a randomised model put ``metric`` (its unit): the
        5-95 % band and the full range. One measured run is compared with them."""
        self.pending.spreads.setdefault(case, {})[metric] = {
            "band": [float(x) for x in band], "range": [float(x) for x in full_range]}

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
        exporter = current()
        if exporter is not None:
            exporter.gated(case, report)

    def deviations(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Named emulation deviations (`measure_deviations`): listed in summary.json,
        deviations.csv and the printed report, never folded into the model."""
        self.pending.deviations.extend(dict(r) for r in rows)

    def fabric(self, name: str, fab: Fabric) -> None:
        """Record a fabric's summary (topology, S, marking back end, build time)."""
        self.pending.fabrics[name] = {**fab.summary(), "capabilities": fab.capabilities or None,
                                      "fixed_delays": emulated_fixed_delays(fab)}

    def note(self, text: str) -> None:
        self.pending.notes.append(text)

    def pcaps(self, case: str, captures: Mapping[str, Captured]) -> None:
        """Write each host's capture of case ``case`` to pcap/<case>/<host>.pcap (a
        retried case's overwrite a refused attempt's) and note where."""
        for host, cap in captures.items():
            path = pcap_path(self.dir, case, host)
            safefile.make_dir(path.parent.parent, parents=False)
            safefile.make_dir(path.parent, parents=False)
            n = cap.write(path)
            self._pcaps.add(path)
            self.note(f"{path.relative_to(self.dir)}: {n:,} frames at {host}'s NICs"
                      + (f", {cap.ring_drops:,} more the capture ring could not keep"
                         if cap.ring_drops else ""))

    @property
    def rows(self) -> list[dict]:
        return [r for u in (*self.units, self.pending) for r in u.rows]

    @property
    def cases(self) -> dict[str, FidelityReport]:
        return {c: r for u in (*self.units, self.pending) for c, r in u.cases.items()}

    def attempt(self, body: Callable[[], None], attempts: int) -> None:
        """Run ``body``, which measures and gates one or more cases, up to ``attempts``
        times while the gate refuses what it measured for interference only
        (`interference_only`: a worker fell behind its deadlines, the machine was busy).
        A refused attempt's records are discarded and its reasons kept (summary.json
        ``refused_attempts``, the printed report); cases refused for anything else, or on
        the last attempt, stay as measured."""
        unit = self.pending
        for k in range(1, attempts + 1):
            mark = unit.mark()
            body()
            gated = {c: r for c, r in unit.cases.items() if c not in mark.cases}
            failed = [{c.name for c in r.checks if not c.ok} for r in gated.values()]
            if (k == attempts or not any(failed)
                    or not all(interference_only(f) for f in failed if f)):
                return
            unit.rollback(mark)
            for case, report in gated.items():
                if not report.valid:
                    unit.refused.setdefault(case, []).append(list(report.reasons))

    # -- committing ------------------------------------------------------------------
    def finished(self, key: str) -> bool:
        """Whether case ``key`` is already committed (a resumed run skips it)."""
        return any(u.key == key for u in self.units)

    def commit(self, key: str) -> None:
        """Case ``key`` ended: write what it recorded now (see the class docstring)."""
        unit, self.pending = self.pending, CaseRecord("")
        unit.key = key
        if not self.dir.is_dir():  # never made again: whoever removed it meant it
            raise FabricEmuError(f"the run directory {self.dir} was removed while the run "
                                 f"was going; case {key!r} and those before it are lost")
        with deferred_interrupts():
            self.saved()  # the records stay in order
            root = self.dir / CASES_DIR
            safefile.make_dir(root, parents=False)  # a planted link is refused here
            self._saving = Background(partial(unit.save, root, len(self.units)))
            self.units.append(unit)

    def saved(self) -> None:
        """Wait until every committed case's record is written; raise what failed."""
        saving, self._saving = self._saving, None
        if saving is not None:
            saving.wait()

    def resume(self) -> int:
        """Load the cases a previous run into this directory committed; their count."""
        try:
            self.units = CaseRecord.load_all(self.dir / CASES_DIR)
        except FabricEmuError as e:
            raise FabricEmuError(f"cannot resume: {e}; use --force to start over") from None
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
        config = {
            "experiment": self.experiment, "quick": self.quick, "options": self.options,
            "scale": self.options.get("scale"), "seed": self.seed, **self.environment(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "duration_s": time.time() - self.started,
            "rerun": rerun_command(self.experiment, self.options, self.dir, self.spec,
                                   self.quick),
            "invocation": {"executable": sys.executable, "argv": " ".join(sys.argv),
                           "cwd": os.getcwd()},
        }
        written = write_run_files(
            self.dir, self.units, config, status=status, stopped=stopped,
            scale=self.scale.factor,
            rerun_at=lambda s: suggested_rerun(self.experiment, self.options, s, self.spec,
                                               self.quick), owner=owner())
        return RunResult(self.dir, written.metrics, written.verdict, written.cases)

    def start(self) -> None:
        """config.json before the first case: what is running and how to rerun it."""
        with deferred_interrupts():
            self._write(status="running")

    def finish(self, show: bool = True, stopped: str | None = None) -> RunResult:
        """Write the run directory and render it. ``stopped`` (the reason) marks a run
        that did not finish: the case then running is dropped, the run is invalid. A
        case record the writer could not write stops it too (and is raised, once the
        run's files say so)."""
        unsaved = None
        with deferred_interrupts():
            try:
                self.saved()
            except FabricEmuError as e:
                unsaved = e
                stopped = stopped or f"a case's record could not be written: {e}"
            if stopped is None and not self.pending.empty():
                unit, self.pending = self.pending, CaseRecord("(rest)")
                unit.save(self.dir / CASES_DIR, len(self.units))
                self.units.append(unit)
            result = self._write("stopped" if stopped else "finished", stopped)
        if unsaved is not None:
            raise unsaved
        render_report(self.dir, show=show)
        return result

    def discard(self, created: bool) -> None:
        """Remove what this run wrote when it finished no case (and the directory
        itself if the run created it): a failed start leaves nothing behind."""
        for name in ("config.json", "summary.json", "metrics.csv"):
            (self.dir / name).unlink(missing_ok=True)
        for path in self._pcaps:
            path.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                path.parent.rmdir()
        with contextlib.suppress(OSError):
            (self.dir / PCAP_DIR).rmdir()
        with contextlib.suppress(OSError):
            (self.dir / CASES_DIR).rmdir()
        if created:
            with contextlib.suppress(OSError):
                self.dir.rmdir()


def pcap_path(run_dir: Path, case: str, host: str) -> Path:
    """Where a run writes the capture of case ``case`` at ``host``."""
    return run_dir / PCAP_DIR / re.sub(r"[^\w=.,+-]+", "_", case) / f"{host}.pcap"


#: Checks (name prefixes) that a busy or paused machine fails and a correct emulator
#: passes on a quiet one: ``Run.attempt`` may measure such a case again.
INTERFERENCE_CHECKS = ("pacing lag p99", "pacing lag mean", "pacing debt kept", "machine CPU",
                       *MACHINE_CHECKS, "receive lag p99", "receive rings kept up", "NIC rate ")
#: Checks a stall also fails, but not only a stall: a port's shaper never makes up the
#: service a stall of its CPU took, while the marker's virtual queue drains through it,
#: so the real queue stays above the virtual one until it empties. Measured again only
#: beside a failed interference check of the same case.
STALL_CONSEQUENCES = ("real vs virtual queue",)


def interference_only(failed: Collection[str]) -> bool:
    """Whether a case whose failed checks are ``failed`` (names) was refused for
    interference alone (``INTERFERENCE_CHECKS``, with their ``STALL_CONSEQUENCES``)."""
    stalled = any(n.startswith(INTERFERENCE_CHECKS) for n in failed)
    return stalled and all(n.startswith(INTERFERENCE_CHECKS)
                           or n.startswith(STALL_CONSEQUENCES) for n in failed)


def rerun_command(experiment: str, options: Mapping[str, Any], out: Path,
                  spec: Mapping[str, Option] | None = None, quick: bool = False) -> str:
    """The `emu run` line that reproduces the run: every option, as its parser reads it."""
    def fmt(name: str, value: Any) -> str:
        return spec[name].format(value) if spec and name in spec else format_value(value)

    words = ["emu", "run", experiment] + (["--quick"] if quick else [])
    if "scale" in options:
        words += ["--scale", fmt("scale", options["scale"])]
    for name, value in options.items():
        if name != "scale":
            words += ["--set", f"{name}={fmt(name, value)}"]
    return shlex.join([*words, "--out", str(out)])


def suggested_rerun(experiment: str, options: Mapping[str, Any], scale: float,
                    spec: Mapping[str, Option] | None = None, quick: bool = False) -> str:
    """The `emu run` line that repeats a run at S = ``scale`` into a new directory:
    the options that differ from their defaults (all of them without ``spec``)."""
    def default(name: str) -> Any:
        try:
            return spec[name].parse(spec[name].value(quick)) if spec and name in spec \
                else _NO_DEFAULT
        except (ParameterError, TypeError, ValueError):
            return _NO_DEFAULT

    words = ["emu", "run", experiment] + (["--quick"] if quick else [])
    words += ["--scale", f"{scale:g}"]
    for name, value in options.items():
        if name != "scale" and value != default(name):
            text = spec[name].format(value) if spec and name in spec else format_value(value)
            words += ["--set", f"{name}={text}"]
    return shlex.join(words)


_NO_DEFAULT = object()


def emulated_fixed_delays(fab: Fabric, engine: Mapping[str, str] | None = None
                          ) -> dict[str, dict[str, Any]]:
    """Which of the real fabric's fixed delays (``traffic.fixeddelay.FIXED_DELAYS``, all
    priced by the model) a run emulates, and how (recorded in config.json).

    The fabric alone emulates propagation where netem delays the links, and nothing
    else: its hops are veths into HTB ports whose bucket releases a frame as soon as it
    holds its tokens, so a frame is serialized once, at the bottleneck, and no switch
    adds pipeline latency. ``engine`` is what the engine driving it adds ({name: how}:
    ``EngineResult.stats.emulated_fixed_delays``); None: what the experiments'
    engine (the default ``EngineConfig``) adds on this fabric."""
    summary = fab.summary()
    netem = bool(summary.get("delay_emulated"))
    declared = EngineConfig().emulated_fixed_delays(netem) if engine is None else engine
    out = {name: {"emulated": False, "how": "not emulated"} for name in FIXED_DELAYS}
    if netem:
        out[PROPAGATION] = {"emulated": True, "how": "netem delay lines, dilated by S"}
    else:
        out[PROPAGATION]["how"] = str(summary.get("delay_detail") or "not emulated")
    out[SERIALIZATION]["how"] = ("not emulated: frames cut through every hop "
                                 "(serialized once, at the bottleneck shaper)")
    for name, how in declared.items():
        if name in out and how:
            out[name] = {"emulated": True, "how": str(how)}
    return out


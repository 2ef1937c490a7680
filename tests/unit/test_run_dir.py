"""Run directories: unique names, --out reuse refused without --force/--resume, each
case written as it ends (a SIGKILL keeps the finished ones), atomic files, and
interrupts held while results are written. Synthetic cases, no kernel."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from core.errors import FabricEmuError, ParameterError
from experiments import rundir, runner
from experiments.fidelity import Check, FidelityReport
from experiments.option_parsers import parse_list, parse_scale, parse_text
from experiments.options import ExperimentOptions, Option
from experiments.report import render_report
from experiments.rundir import Run
from experiments.runner import prepare_out_dir, run_experiment
from experiments.storage import CaseRecord, deferred_interrupts
from model.claims import ALPHABETA

REPO = Path(__file__).resolve().parents[2]
SPEC = {"cases": Option(["a", "b", "c"], "case names", parse=parse_list(parse_text)),
        "scale": Option(1e5, "S", parse=parse_scale)}


@dataclass(frozen=True)
class SpecOptions(ExperimentOptions):
    cases: list[str]
    scale: float


@pytest.fixture(autouse=True)
def no_probe(monkeypatch):
    monkeypatch.setattr(rundir, "capabilities", lambda: {})


def sweep(executed: list[str], fail_at: str | None = None):
    """An execute() that measures one trivial case per name, committing each."""
    def execute(run: Run, opts: SpecOptions) -> None:
        for case in opts.cases:
            if run.finished(case):
                continue
            if case == fail_at:
                run.metric(case, "m", "u", 1.0, 1.0, ALPHABETA)  # the running case: dropped
                raise KeyboardInterrupt
            executed.append(case)
            run.metric(case, "m", "u", float(len(executed)), 1.0, ALPHABETA)
            run.fidelity(case, FidelityReport(True, [], opts.scale))
            run.commit(case)
    return execute


def summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def measured(out: Path) -> dict[str, float]:
    return {m["case"]: m["measured"] for m in summary(out)["metrics"]}


def test_default_names_are_unique_within_a_second(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runner.time, "strftime", lambda fmt, *a: "20260101-000000")
    paths = [prepare_out_dir("incast", None, force=False, resume=False)[0] for _ in range(3)]
    assert len(set(paths)) == 3 and all(p.is_dir() for p in paths)
    assert [p.name for p in paths] == ["incast-20260101-000000", "incast-20260101-000000-2",
                                       "incast-20260101-000000-3"]


def test_a_second_run_into_the_same_out_is_refused_and_keeps_the_first(tmp_path):
    out = tmp_path / "run"
    executed: list[str] = []
    assert run_experiment("s", SPEC, SpecOptions, sweep(executed), out, False, {}).valid
    before = (out / "summary.json").read_text()
    with pytest.raises(ParameterError) as err:
        run_experiment("s", SPEC, SpecOptions, sweep(executed), out, False, {"cases": "x"})
    assert err.value.name == "--out"
    assert (out / "summary.json").read_text() == before and executed == ["a", "b", "c"]


def test_force_starts_over(tmp_path):
    out = tmp_path / "run"
    run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {})
    (out / "stale.csv").write_text("x\n1\n")
    (out / "mine.txt").write_text("not a run output")
    run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {"cases": "x"}, force=True)
    assert set(measured(out)) == {"x"}
    assert not (out / "stale.csv").exists()          # a stale CSV would be plotted
    assert (out / "mine.txt").exists()               # only run outputs are removed


def test_force_refuses_a_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(ParameterError):
        run_experiment("s", SPEC, SpecOptions, sweep([]), tmp_path, False, {}, force=True)
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_out_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ParameterError):
        run_experiment("s", SPEC, SpecOptions, sweep([]), tmp_path / "f", False, {})


def test_force_and_resume_together_are_refused(tmp_path):
    with pytest.raises(ParameterError):
        run_experiment("s", SPEC, SpecOptions, sweep([]), tmp_path / "r", False, {}, force=True, resume=True)
    assert not (tmp_path / "r").exists()


def test_interrupted_run_keeps_finished_cases_and_resume_runs_the_rest(tmp_path):
    out = tmp_path / "run"
    executed: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_experiment("s", SPEC, SpecOptions, sweep(executed, fail_at="b"), out, False, {})
    first = summary(out)
    assert first["status"] == "stopped" and not first["valid"]
    assert measured(out) == {"a": 1.0}
    render_report(out, show=False)                    # a stopped run is reportable
    result = run_experiment("s", SPEC, SpecOptions, sweep(executed), out, False, {}, resume=True)
    assert executed == ["a", "b", "c"]                # 'a' was not run again
    assert measured(out) == {"a": 1.0, "b": 2.0, "c": 3.0}
    assert result.valid and summary(out)["status"] == "finished"


def test_resume_refuses_other_options_and_other_experiments(tmp_path):
    out = tmp_path / "run"
    run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {"cases": "a;b"})
    with pytest.raises(ParameterError):
        run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {"cases": "a;c"}, resume=True)
    with pytest.raises(ParameterError):
        run_experiment("other", SPEC, SpecOptions, sweep([]), out, False, {}, resume=True)
    # Options left out are taken from the run being resumed.
    run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {}, resume=True)
    assert set(measured(out)) == {"a", "b"}


def test_resume_refuses_a_damaged_case_record(tmp_path):
    out = tmp_path / "run"
    run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {})
    (out / "cases" / "001" / "unit.json").write_text('{"key": ')
    with pytest.raises(FabricEmuError):
        run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {}, resume=True)


def test_a_failed_start_leaves_no_directory(tmp_path):
    def execute(run: Run, opts: dict) -> None:
        raise FabricEmuError("no marking back end")

    with pytest.raises(FabricEmuError):
        run_experiment("s", SPEC, SpecOptions, execute, tmp_path / "run", False, {})
    assert not (tmp_path / "run").exists()
    empty = tmp_path / "given"
    empty.mkdir()
    with pytest.raises(FabricEmuError):
        run_experiment("s", SPEC, SpecOptions, execute, empty, False, {})
    assert empty.is_dir() and list(empty.iterdir()) == []   # it was the user's


def test_no_temporary_files_are_left(tmp_path):
    out = tmp_path / "run"
    run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {})
    leftovers = [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_sigkill_keeps_the_finished_cases(tmp_path):
    """A real process killed with SIGKILL after its second case: the two are on disk."""
    out = tmp_path / "run"
    script = textwrap.dedent(f"""
        import os, signal
        from experiments.fidelity import Check, FidelityReport
        from experiments import rundir
        from dataclasses import dataclass
        from experiments.options import ExperimentOptions, Option, parse_scale
        from experiments.runner import run_experiment
        from model.claims import ALPHABETA

        @dataclass(frozen=True)
        class ScaleOptions(ExperimentOptions):
            scale: float

        rundir.capabilities = lambda: {{}}

        def execute(run, opts):
            for case in ("a", "b", "c"):
                run.metric(case, "m", "u", 1.0, 1.0, ALPHABETA)
                run.fidelity(case, FidelityReport(True, [], 1e5))
                if case == "c":
                    os.kill(os.getpid(), signal.SIGKILL)
                run.commit(case)

        run_experiment("s", {{"scale": Option(1e5, "S", parse=parse_scale)}}, ScaleOptions, execute,
                       {str(out)!r}, False, {{}})
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert sorted(p.name for p in (out / "cases").iterdir()) == ["000", "001"]
    # The run's files are written at its start and end only: the report makes them
    # from the case records.
    assert summary(out)["status"] == "running" and summary(out)["cases_recorded"] == 0
    render_report(out, show=False)
    assert summary(out)["status"] == "running" and not summary(out)["valid"]
    assert summary(out)["cases_recorded"] == 2 and set(measured(out)) == {"a", "b"}
    config = json.loads((out / "config.json").read_text())
    assert config["rerun"].startswith("emu run s ") and config["status"] == "running"
    assert set(pd.read_csv(out / "metrics.csv").case) == {"a", "b"}


def test_interrupts_are_held_while_writing():
    # From Python's own Ctrl-C handler, whatever an earlier test left installed.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    steps = []
    try:
        with pytest.raises(KeyboardInterrupt), deferred_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("the block ran to its end")
        assert steps == ["the block ran to its end"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_second_ctrl_c_while_finishing_keeps_what_was_measured(tmp_path, monkeypatch):
    """Ctrl-C stops the run; a second one lands while the plots are drawn: the
    finished case is already on disk."""
    import experiments.report as report

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "render_report", interrupted)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_experiment("s", SPEC, SpecOptions, sweep([], fail_at="b"), out, False, {})
    assert measured(out) == {"a": 1.0} and summary(out)["status"] == "stopped"


def _gated(run: Run, case: str, failing: list[str], value: float) -> None:
    """Record ``case`` with one metric and a report failing the checks ``failing``."""
    checks = [Check(name, False, 1.0, 0.5, f"{name} failed") for name in failing]
    checks.append(Check("traffic completed", True, 1, 1, "1/1 messages"))
    run.metric(case, "time", "us", value, 1.0, ALPHABETA)
    run.note(f"{case} measured {value}")
    run.fidelity(case, FidelityReport(not failing, [f"{c.name}: {c.detail}" for c in checks
                                                    if not c.ok], 1.0, checks))


def test_a_case_refused_for_interference_is_measured_again_and_the_refusal_kept(tmp_path):
    run = Run("t", tmp_path / "r", {"scale": 1.0}, quick=True)
    outcomes = iter([["pacing lag p99", "machine CPU"], []])
    values = iter([9.0, 1.01])
    run.attempt(lambda: _gated(run, "a", next(outcomes), next(values)), attempts=3)
    run.commit("a")
    result = run.finish(show=False)
    assert result.valid
    assert result.metrics.measured.tolist() == [1.01]  # the refused attempt's rows are gone
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["refused_attempts"] == {"a": [["pacing lag p99: pacing lag p99 failed",
                                                  "machine CPU: machine CPU failed"]]}
    notes = json.loads((tmp_path / "r" / "config.json").read_text())["notes"]
    assert notes == ["a measured 1.01"]


def test_a_case_refused_for_a_wrong_result_or_on_its_last_attempt_stays(tmp_path):
    run = Run("t", tmp_path / "r", {"scale": 1.0}, quick=True)
    calls = []
    run.attempt(lambda: calls.append(_gated(run, "a", ["no unexpected retransmissions"], 2.0)),
                attempts=3)
    assert len(calls) == 1                            # not interference: measured once
    run.commit("a")
    run.attempt(lambda: calls.append(_gated(run, "b", ["pacing lag p99"], 3.0)), attempts=2)
    assert len(calls) == 3                            # refused twice: the last one stays
    run.commit("b")
    result = run.finish(show=False)
    assert not result.valid and sorted(result.metrics.measured) == [2.0, 3.0]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert list(summary["refused_attempts"]) == ["b"] and len(summary["refused_attempts"]["b"]) == 1


def test_an_attempt_that_gated_several_cases_is_judged_and_rolled_back_whole(tmp_path):
    """One measurement gating several cases (fairness' intervals): refused together when
    one of them is refused for interference, and nothing of it is kept, frames included."""
    run = Run("t", tmp_path / "r", {"scale": 1.0}, quick=True)
    run.frame("ports", pd.DataFrame({"x": [0]}))           # before the attempt: kept
    outcomes = iter([(["pacing lag p99"], []), ([], [])])

    def body():
        first, second = next(outcomes)
        run.frame("ports", pd.DataFrame({"x": [len(first) + 1]}))
        run.spread("i1", "share", (0.0, 1.0), (0.0, 1.0))
        _gated(run, "i0", first, 1.0)
        _gated(run, "i1", second, 1.0)

    run.attempt(body, attempts=2)
    run.commit("fairness")
    result = run.finish(show=False)
    assert result.valid and sorted(result.metrics.case) == ["i0", "i1"]
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert list(summary["refused_attempts"]) == ["i0"]
    assert pd.read_csv(tmp_path / "r" / "ports.csv").x.tolist() == [0, 1]


def test_a_randomised_models_spread_reaches_the_summary(tmp_path):
    run = Run("t", tmp_path / "r", {"scale": 1.0}, quick=True)
    _gated(run, "a", [], 1.0)
    run.spread("a", "latency p99", (44.1, 51.7), (42.0, 53.0))
    run.commit("a")
    run.finish(show=False)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["model_spreads"] == {
        "a": {"latency p99": {"band": [44.1, 51.7], "range": [42.0, 53.0]}}}


def test_a_queue_drift_is_measured_again_only_beside_a_stall(tmp_path):
    """A shaper never makes up the service a stall took: the real queue then drifts from
    the marker's (rundir.STALL_CONSEQUENCES). Alone, the drift is the emulator's."""
    run = Run("t", tmp_path / "r", {"scale": 1.0}, quick=True)
    drift = "real vs virtual queue l3:l3-eth3"
    outcomes = iter([["pacing debt kept", drift], []])
    run.attempt(lambda: _gated(run, "a", next(outcomes), 1.0), attempts=2)
    run.commit("a")
    calls = []
    run.attempt(lambda: calls.append(_gated(run, "b", [drift], 2.0)), attempts=3)
    run.commit("b")
    assert len(calls) == 1
    run.finish(show=False)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert list(summary["refused_attempts"]) == ["a"]
    assert summary["cases"]["a"]["valid"] and not summary["cases"]["b"]["valid"]


def test_a_commit_writes_its_case_record_only(tmp_path):
    """Recording costs time in proportion to the cases, not their square: committing a
    case writes its own record (by a forked writer, `Run.saved` waits for it), never
    the run's files that grow with every case."""
    run = Run("t", tmp_path / "r", {"scale": 1.0}, quick=True)
    run.start()
    out = tmp_path / "r"

    def files() -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(out)): (p.stat().st_ino, p.stat().st_mtime_ns)
                for p in out.rglob("*") if p.is_file()}

    for case in ("a", "b", "c"):
        before = files()
        run.metric(case, "m", "u", 1.0, 1.0, ALPHABETA)
        run.frame("samples", pd.DataFrame({"t_s": [0.0, 1.0]}), case=case)
        run.fidelity(case, FidelityReport(True, [], 1.0))
        run.commit(case)
        run.saved()
        after = files()
        index = f"{len(run.units) - 1:03d}"
        assert {k: v for k, v in after.items() if before.get(k) != v} == {
            k: after[k] for k in (f"cases/{index}/samples.csv", f"cases/{index}/unit.json")}
    run.finish(show=False)
    assert list(pd.read_csv(out / "samples.csv").case) == ["a", "a", "b", "b", "c", "c"]


def test_a_case_record_that_cannot_be_written_stops_the_run_and_says_why(tmp_path,
                                                                         monkeypatch):
    """The forked writer's failure (here: a frame that cannot be written) is raised at
    the end, after the run's files say it stopped for it."""
    run = Run("t", tmp_path / "r", {"scale": 1.0}, quick=True)
    run.start()
    run.metric("a", "m", "u", 1.0, 1.0, ALPHABETA)
    run.fidelity("a", FidelityReport(True, [], 1.0))
    monkeypatch.setattr(CaseRecord, "save", lambda *_a: (_ for _ in ()).throw(
        OSError(28, "No space left on device")))
    run.commit("a")
    with pytest.raises(FabricEmuError, match="No space left on device"):
        run.finish(show=False)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "stopped" and not summary["valid"]
    assert any("could not be written" in r for r in summary["reasons"])


def test_case_records_past_999_are_found_in_order(tmp_path):
    from experiments.storage import _records, record_count

    for name in ("1000", "999", "998", "notes", ".1001.tmp"):
        (tmp_path / name).mkdir()
    assert [p.name for p in _records(tmp_path)] == ["998", "999", "1000"]
    assert record_count(tmp_path) == 3 and record_count(tmp_path / "none") == 0


def test_the_report_of_a_run_still_going_leaves_its_files_to_it(tmp_path):
    """A run that did not end is reported from its records, unless its process is
    still recording: it writes them at its end, and a report racing it would put an
    older version over them."""
    from emu.runs import start_ticks

    out = tmp_path / "run"
    run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {}, show=False)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        data = summary(out)
        data.update(status="running", cases_recorded=1,
                    owner={"pid": sleeper.pid, "start_ticks": start_ticks(sleeper.pid)})
        (out / "summary.json").write_text(json.dumps(data))  # safefile: ok - test input
        with pytest.raises(FabricEmuError, match=rf"still going \(pid {sleeper.pid}\)"):
            render_report(out, show=False)
        assert summary(out)["cases_recorded"] == 1
    finally:
        sleeper.kill()
        sleeper.wait()
    render_report(out, show=False)  # its owner gone: made from the records
    assert summary(out)["cases_recorded"] == 3 and summary(out)["owner"] is None

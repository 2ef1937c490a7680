"""Issue 29's inputs re-checked as an adversarial user (a set not in the earlier tests):
each one that ended badly, one test each. Every one now ends in a clear one-line error,
never a hang, an internal error or a wrong type accepted. No fabric is built."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from core import safefile
from core.errors import FabricEmuError, ParameterError
from experiments import rundir
from experiments.option_parsers import parse_int
from experiments.registry import load_config, rerun_of
from experiments.report import render_report
from experiments.runner import run_experiment
from experiments.storage import CaseRecord
from tests.unit.test_run_dir import SPEC, SpecOptions, sweep


@pytest.fixture(autouse=True)
def no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rundir, "capabilities", lambda: {})


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A finished run of three synthetic cases."""
    out = tmp_path / "run"
    run_experiment("s", SPEC, SpecOptions, sweep([]), out, False, {}, show=False)
    return out


def _one_line(e: pytest.ExceptionInfo) -> str:
    message = str(e.value)
    assert "\n" not in message and len(message) < 400, message
    return message


# --------------------------------------------------------------------- --config

def test_a_config_that_is_not_utf8_text(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_bytes(bytes(range(256)))
    with pytest.raises(ParameterError, match="not UTF-8 text") as e:
        load_config(tmp_path / "c.toml", "incast")
    _one_line(e)


@pytest.mark.parametrize("make", [os.mkfifo, lambda p: os.symlink("/dev/zero", p)],
                         ids=["fifo", "/dev/zero"])
def test_a_config_that_is_a_fifo_or_a_device_is_not_read(tmp_path: Path,
                                                          make: Callable[[Path], None]) -> None:
    make(tmp_path / "c.toml")
    with pytest.raises(ParameterError, match=r"not a regular file \(a (FIFO|device)\)"):
        load_config(tmp_path / "c.toml", "incast")


def test_an_integer_of_300000_digits_says_its_bound() -> None:
    with pytest.raises(ParameterError, match=r"must be in 1\.\.15") as e:
        parse_int(1, 15)("9" * 300_000)
    assert "set_int_max_str_digits" not in _one_line(e)
    with pytest.raises(ParameterError, match=r"too large \(over 30 digits\)"):
        parse_int(1)("9" * 300_000)
    with pytest.raises(ParameterError, match=r"must be >= 1"):
        parse_int(1)("-" + "9" * 300_000)


# --------------------------------------------------------------------- report

@pytest.mark.parametrize("name", ["summary.json", "config.json", "metrics.csv", "latency.csv"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_run_file_that_is_a_fifo_or_a_device_is_refused_not_read(run_dir: Path, name: str,
                                                                   kind: str) -> None:
    (run_dir / name).unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(run_dir / name)
    else:
        (run_dir / name).symlink_to("/dev/zero")
    with pytest.raises(ParameterError, match=rf"{name} is not a regular file") as e, \
            contextlib.redirect_stdout(io.StringIO()):
        render_report(run_dir)
    _one_line(e)


def _edit(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))  # safefile: ok - test input


@pytest.mark.parametrize(("name", "change", "says"), [
    ("summary.json", lambda s: s["metrics"][0].update(measured="abc"), "not a number"),
    ("summary.json", lambda s: s["metrics"][0].update(case=[1, 2]), "malformed metric row"),
    ("summary.json", lambda s: s.update(suggested_scale="x"), "suggested_scale"),
    ("summary.json", lambda s: s.update(suggested_rerun=5), "suggested_rerun"),
    ("summary.json", lambda s: s.update(cases_recorded="1"), "cases_recorded"),
    ("config.json", lambda c: c.update(scale="fast"), "scale is not a number"),
], ids=["measured", "case", "suggested_scale", "suggested_rerun", "cases_recorded", "scale"])
def test_wrong_types_in_a_run_directory_are_refused(run_dir: Path, name: str,
                                                    change: Callable[[dict], None],
                                                    says: str) -> None:
    _edit(run_dir / name, change)
    with pytest.raises(ParameterError, match=says) as e, \
            contextlib.redirect_stdout(io.StringIO()):
        render_report(run_dir)
    _one_line(e)


# --------------------------------------------------------------------- --resume, --rerun

@pytest.mark.parametrize(("change", "says"), [
    (lambda u: u.update(rows={"a": 1}), "'rows'"),
    (lambda u: u.update(rows=["a"]), "malformed metric row"),
    (lambda u: u.update(frames=["../../outside"]), "not a plain name"),
    (lambda u: u.update(cases={"a": "valid"}), "malformed case verdict"),
    (lambda u: u.update(notes="x"), "'notes'"),
], ids=["rows-object", "rows-strings", "frame-path", "verdict-string", "notes-string"])
def test_a_case_record_of_the_wrong_shape_is_named(run_dir: Path, change: Callable[[dict], None],
                                                   says: str) -> None:
    _edit(run_dir / "cases" / "001" / "unit.json", change)
    with pytest.raises(FabricEmuError, match=f"cases/001 is damaged .*{says}") as e:
        CaseRecord.load_all(run_dir / "cases")
    _one_line(e)
    with pytest.raises(FabricEmuError, match="cannot resume: .*use --force"):
        run_experiment("s", SPEC, SpecOptions, sweep([]), run_dir, False, {}, resume=True,
                       show=False)


def test_a_killed_runs_report_writes_nothing_outside_from_a_planted_record(
        run_dir: Path, tmp_path: Path) -> None:
    """A run killed before its end is reported from its case records: a record naming
    a frame by a path cannot make the report write outside the run directory."""
    _edit(run_dir / "summary.json", lambda s: s.update(status="running", cases_recorded=0))
    (run_dir / "cases" / "000" / "x.csv").write_text("a\n1\n")  # safefile: ok - test input
    _edit(run_dir / "cases" / "000" / "unit.json", lambda u: u.update(frames=["../../../x"]))
    with pytest.raises(FabricEmuError, match="a run that did not end: .*not a plain name"), \
            contextlib.redirect_stdout(io.StringIO()):
        render_report(run_dir)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_resuming_a_run_whose_options_are_not_a_table(run_dir: Path) -> None:
    _edit(run_dir / "config.json", lambda c: c.update(options=[1, 2]))
    with pytest.raises(FabricEmuError, match="cannot resume .*options are not a table") as e:
        run_experiment("s", SPEC, SpecOptions, sweep([]), run_dir, False, {}, resume=True,
                       show=False)
    _one_line(e)


def test_rerun_of_a_config_that_is_a_fifo(run_dir: Path) -> None:
    (run_dir / "config.json").unlink()
    os.mkfifo(run_dir / "config.json")
    with pytest.raises(FabricEmuError, match="not a regular file"):
        rerun_of(run_dir)


def test_read_regular_refuses_what_is_too_large(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert safefile.read_regular(tmp_path / "f", 100) == b"x" * 100
    with pytest.raises(safefile.ReadError, match="100 bytes, above the 99"):
        safefile.read_regular(tmp_path / "f", 99)
    shutil.rmtree(tmp_path)
    with pytest.raises(FileNotFoundError):
        safefile.regular(tmp_path / "f", 100)


@pytest.mark.parametrize(("command", "option"), [("replay", "--max-frames"),
                                                 ("pcap", "--max-messages")])
def test_a_count_limit_below_one_is_refused(tmp_path: Path, command: str, option: str) -> None:
    from typer.testing import CliRunner

    from cli import app as cli
    from traffic.workload_pcap import collective_pcap

    collective_pcap("alltoall", 3, 8192, tmp_path / "a.pcap")
    args = ([command, str(tmp_path / "a.pcap")] if command == "replay"
            else [command, "alltoall", "-o", str(tmp_path / "b.pcap")])
    result = CliRunner().invoke(cli.app, [*args, option, "-1"])
    assert isinstance(result.exception, ParameterError), result.output
    assert f"invalid {option}=-1: must be >= 1" in str(result.exception)
    assert not (tmp_path / "b.pcap").exists()


def test_a_railopt_of_a_400_digit_server_count() -> None:
    """Found by the property tests: the integer times the rate ratio overflowed."""
    from topologies.spec import topo_size

    with pytest.raises(ParameterError, match="at most 2,048 hosts") as e:
        topo_size("railopt," + "4" * 400)
    _one_line(e)

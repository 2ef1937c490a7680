"""Hostile input through the real `emu` command: exit 2, one line on stderr, no
traceback, nothing built or created, and no hang (20 s is a generous bound on a
shared machine; the errors come in about a second)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli import app as cli

REPO = Path(__file__).resolve().parents[2]
EMU = [sys.executable, "-c", "from cli.app import main; main()"]


def emu(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "60"}
    env.pop("FABRICEMU_DEBUG", None)
    t0 = time.monotonic()
    proc = subprocess.run([*EMU, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=60)
    assert time.monotonic() - t0 < 20, args
    return proc


def assert_refused(proc: subprocess.CompletedProcess, one_line: bool = True) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    if one_line:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith("error: ")


BAD_COMMANDS = [
    ["topo", "show", "fattree,64"], ["topo", "show", "fattree,10000"],
    ["topo", "show", "torus,1000,1000"], ["topo", "show", "dragonfly,a=1000,h=1000"],
    ["topo", "show", "fattree,1e400"], ["topo", "show", ""], ["topo", "show", "nosuch"],
    ["topo", "show", "fattree,4", "--png", "/proc/x.png"],
    ["topo", "show", "fattree,4", "--png", "/nonexistent/x.png"],
    ["topo", "show", "fattree,4", "--scale", "nan"],
    ["run", "incast", "--set", "topo=fattree,10000"],
    ["run", "incast", "--set", "thresholds=100KB"], ["run", "incast", "--set", "thresholds=1/2/3"],
    ["run", "incast", "--set", "senders=abc"], ["run", "incast", "--set", "senders=1.5"],
    ["run", "incast", "--set", "senders=-1"], ["run", "incast", "--set", "senders=99"],
    ["run", "incast", "--set", "cc=bogus"], ["run", "incast", "--set", "dcqcn=bogus"],
    ["run", "incast", "--set", "cc="], ["run", "collective", "--set", "sizes="],
    ["run", "collective", "--set", "topos="], ["run", "ecmp", "--set", "seeds="],
    ["run", "incast", "--scale", "nan"], ["run", "incast", "--scale", "inf"],
    ["run", "incast", "--scale", "0"], ["run", "incast", "--scale", "-1"],
    ["run", "incast", "--set", "novalue"], ["run", "nosuch"],
    ["run", "demo", "--scale", "abc"], ["run", "demo", "--set", "bogus=1"],
    ["demo", "--set", "senders=abc"], ["demo", "--scale", "0"], ["demo", "--set", "sizes="],
    ["report", "/nonexistent"], ["report", "/etc/hostname"], ["bench", "nosuch"],
    ["run", "incast", "--config", "/nonexistent.toml"], ["run", "incast", "--config", "/etc"],
    ["run", "incast", "--config", "/etc/hostname"], ["run", "--rerun", "/nonexistent"],
    ["run", "--rerun", "/etc"],
]


@pytest.mark.parametrize("args", BAD_COMMANDS, ids=" ".join)
def test_bad_input_is_one_line_exit_2_and_creates_nothing(args, tmp_path):
    assert_refused(emu(*args, cwd=tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["demo", "--bogus"], ["run", "incast", "--nope"],
                                  ["topo", "show"], ["bench", "--nope"],
                                  ["bench", "pathdelay", "--runs", "0"]])
def test_usage_errors_exit_2(args, tmp_path):
    assert_refused(emu(*args, cwd=tmp_path), one_line=False)
    assert list(tmp_path.iterdir()) == []


def test_non_empty_out_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.csv").write_text("case\nold\n")
    assert_refused(emu("run", "incast", "--quick", "--out", str(out), cwd=tmp_path))
    assert (out / "metrics.csv").read_text() == "case\nold\n"


def _damaged_run(tmp_path: Path, damage: str) -> Path:
    run = tmp_path / damage.replace(" ", "_")
    run.mkdir()
    (run / "summary.json").write_text(json.dumps(
        {"experiment": "x", "valid": True, "cases": {}, "metrics": []}))
    (run / "config.json").write_text("{}")
    (run / "metrics.csv").write_text("case,metric,predicted\n")
    if damage == "truncated summary":
        (run / "summary.json").write_text('{"experiment": "x", "val')
    elif damage == "missing config":
        (run / "config.json").unlink()
    elif damage == "garbage csv":
        (run / "queue.csv").write_bytes(bytes(range(256)) * 4)
    return run


@pytest.mark.parametrize("damage", ["truncated summary", "missing config", "garbage csv"])
def test_report_on_damaged_runs(damage, tmp_path):
    assert_refused(emu("report", str(_damaged_run(tmp_path, damage)), cwd=tmp_path))


def test_internal_errors_are_one_line_unless_debugging(monkeypatch, capsys):
    def broken(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "app", broken)
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)  # keep pytest's handlers
    monkeypatch.delenv("FABRICEMU_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err.count("\n") == 1 and "a bug" in err
    monkeypatch.setenv("FABRICEMU_DEBUG", "1")
    with pytest.raises(SystemExit):
        cli.main()
    assert "Traceback" in capsys.readouterr().err


def test_path_errors_exit_2(monkeypatch, capsys):
    def unreadable(**kwargs):
        raise PermissionError(13, "Permission denied", "/root/x")

    monkeypatch.setattr(cli, "app", unreadable)
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: /root/x: Permission denied\n"


def test_emu_run_help_names_every_experiment():
    from cli.app import EXPERIMENT_NAMES
    from experiments.registry import EXPERIMENTS

    assert sorted(EXPERIMENT_NAMES) == sorted(EXPERIMENTS)


def test_emu_bench_lists_every_benchmark_with_a_line_each(tmp_path):
    from bench import BENCHMARKS

    modules = {p.stem for p in (REPO / "bench").glob("*.py")} - {"__init__", "udpflows"}
    assert set(BENCHMARKS) == modules  # udpflows: the flows bench.reorder runs, no benchmark
    for args in (["bench", "--list"], ["bench"]):
        proc = emu(*args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        rows = [line.split(None, 1) for line in proc.stdout.splitlines() if line.startswith("  ")]
        assert [name for name, _ in rows] == list(BENCHMARKS)
        assert all(what.strip() == BENCHMARKS[name] for name, what in rows)
    assert list(tmp_path.iterdir()) == []


def test_run_list_prints_set_text_and_help_per_option():
    from typer.testing import CliRunner

    result = CliRunner().invoke(cli.app, ["run", "cc", "--list"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "\ncc:\n" in out and "\nincast:\n" not in out      # only the experiment named
    assert "algorithms=off;dcqcn;dctcp;timely;swift;hpcc" in out   # what --set takes
    assert "['off'" not in out                                 # no Python reprs
    assert "ECN Kmin/Kmax of every switch port" in out          # each option's help

"""`emu run`'s help, TOML configs (--config) and reruns (--rerun), without a fabric:
cli_run is replaced by a recorder of what the command would run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli import app as cli
from core.errors import FabricEmuError, ParameterError
from experiments import registry
from experiments.options import resolve_options


def _commands(command, path=()):
    """Every command of the app, as the words that reach it."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_no_help_shows_a_type_after_a_flag():
    # Typer 0.29's rich help panel prints every option's type, <bool> for flags too; the
    # plain layout (rich_markup_mode=None) names a type only where a value follows.
    runner = CliRunner()
    seen = 0
    for words in _commands(typer.main.get_command(cli.app)):
        result = runner.invoke(cli.app, [*words, "--help"])
        assert result.exit_code == 0, (words, result.output)
        assert "<bool>" not in result.output and "╭" not in result.output, words
        seen += 1
    assert seen > 10
    out = runner.invoke(cli.app, ["run", "--help"]).output
    assert "  --quick  " in out and "--set KEY=VALUE" in out and "--config FILE" in out


def test_run_name_help_lists_that_experiments_options_with_defaults_in_80_columns():
    out = CliRunner().invoke(cli.app, ["run", "incast", "--help"]).output
    assert "run [OPTIONS] [NAME]" in out and "\nincast:\n" in out and "\ncc:\n" not in out
    assert "  size=2MiB (--quick: 1MiB)\n      bytes per sender" in out   # sizes as KiB/MiB
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.fixture
def ran(monkeypatch):
    """What `emu run` would run: cli_run's arguments."""
    calls: list[tuple] = []

    def fake(name, out, quick, scale, overrides, **kwargs):
        calls.append((name, quick, scale, overrides))
        raise typer.Exit(0)

    monkeypatch.setattr(registry, "cli_run", fake)
    return calls


def test_config_file_gives_set_keys_and_set_wins(tmp_path, ran):
    conf = tmp_path / "incast.toml"
    conf.write_text('senders = 2\nsize = "256KiB"\ncc = ["off", "dcqcn"]\npmax = 0.5\n')
    result = CliRunner().invoke(cli.app, ["run", "incast", "--config", str(conf),
                                          "--set", "pmax=0.3"])
    assert result.exit_code == 0, result.output
    assert ran == [("incast", False, None, {"senders": 2, "size": "256KiB",
                                            "cc": ["off", "dcqcn"], "pmax": "0.3"})]
    opts = resolve_options(registry.EXPERIMENTS["incast"].OPTIONS, False, ran[0][3])
    assert (opts["senders"], opts["size"], opts["cc"]) == (2, 256 << 10, ["off", "dcqcn"])


@pytest.mark.parametrize("text, why", [
    ("senders = 2\nbogus = 1\n", "bogus: not an option of incast"),
    ("senders = \n", "not TOML"),
    ("[senders]\nx = 1\n", "senders: a table, not a value"),
])
def test_a_bad_config_file_is_one_line_naming_the_problem(tmp_path, text, why):
    conf = tmp_path / "bad.toml"
    conf.write_text(text)
    with pytest.raises(ParameterError) as e:
        registry.load_config(conf, "incast")
    assert why in str(e.value) and "\n" not in str(e.value)


def _run_dir(tmp_path: Path, options: dict, experiment: str = "incast") -> Path:
    d = tmp_path / "runs" / "incast-1"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(
        {"experiment": experiment, "quick": True, "options": options, "rerun": "..."}))
    return d


def test_rerun_runs_the_same_experiment_options_and_quick_with_changes(tmp_path, ran):
    opts = resolve_options(registry.EXPERIMENTS["incast"].OPTIONS, True, {"senders": "2"})
    d = _run_dir(tmp_path, json.loads(json.dumps(opts)))
    result = CliRunner().invoke(cli.app, ["run", "--rerun", str(d), "--scale", "20000",
                                          "--set", "senders=3"])
    assert result.exit_code == 0, result.output
    [(name, quick, scale, overrides)] = ran
    assert (name, quick, scale) == ("incast", True, "20000")
    assert "scale" not in overrides and overrides["senders"] == "3"
    again = resolve_options(registry.EXPERIMENTS["incast"].OPTIONS, True, overrides)
    assert {k: v for k, v in again.items() if k not in ("senders", "scale")} == \
        {k: v for k, v in opts.items() if k not in ("senders", "scale")}


def test_rerun_refuses_another_experiment_name_and_a_damaged_run(tmp_path):
    d = _run_dir(tmp_path, {"senders": 2})
    result = CliRunner().invoke(cli.app, ["run", "cc", "--rerun", str(d)])
    assert isinstance(result.exception, FabricEmuError)
    assert "the run there is incast, not cc" in str(result.exception)
    (d / "config.json").write_text("{")
    with pytest.raises(FabricEmuError, match="unreadable config.json"):
        registry.rerun_of(d)

"""Experiment options: every value parsed and checked up front (before any fabric or
run directory exists), empty sweeps refused, and the rerun line of config.json
reproducing the run's options exactly."""

from __future__ import annotations

import json
import shlex

import pytest
from typer.testing import CliRunner

from core.errors import ParameterError
from experiments import demo as demo_module
from experiments import rundir
from experiments.environment import REPO_ROOT as REPO
from experiments.fidelity import FidelityReport, combine
from experiments.option_parsers import parse_int, parse_list
from experiments.options import resolve_options, resolve_typed
from experiments.registry import EXPERIMENTS, cli_run, parse_sets
from experiments.rundir import Run
from model.claims import ALPHABETA


@pytest.fixture
def nothing_runs(monkeypatch, tmp_path):
    """Every experiment's execute() fails the test if reached; the cwd is empty."""
    def execute(run, opts, prefix=""):
        raise AssertionError("execute() reached: an invalid option got through")

    for module in EXPERIMENTS.values():
        monkeypatch.setattr(module, "execute", execute)
    monkeypatch.chdir(tmp_path)
    return tmp_path


BAD = [
    ("incast", {"thresholds": "100KB"}, "thresholds"),
    ("incast", {"thresholds": "1/2/3"}, "thresholds"),
    ("incast", {"thresholds": "400K/100K"}, "thresholds"),
    ("incast", {"thresholds": "100K/400K;"}, "thresholds"),
    ("incast", {"senders": "abc"}, "senders"),
    ("demo", {"workers": "0"}, "workers"),
    ("collective", {"workers": "many"}, "workers"),
    ("incast", {"senders": "1.5"}, "senders"),
    ("incast", {"senders": "-1"}, "senders"),
    ("incast", {"senders": "0"}, "senders"),
    ("incast", {"senders": "16"}, "senders"),        # fattree,4: 15 besides the receiver
    ("incast", {"senders": "4", "topo": "leafspine,2,2,2"}, "senders"),
    ("incast", {"senders": True}, "senders"),
    ("incast", {"cc": "bogus"}, "cc"),
    ("incast", {"cc": "off;off"}, "cc"),
    ("incast", {"dcqcn": "bogus"}, "dcqcn"),
    ("incast", {"pmax": "0"}, "pmax"),
    ("incast", {"pmax": "nan"}, "pmax"),
    ("incast", {"size": "0"}, "size"),
    ("incast", {"size": "1e400"}, "size"),
    ("incast", {"topo": "fattree,10000"}, "topo"),
    ("incast", {"topo": "torus,1000,1000"}, "topo"),
    ("incast", {"topo": "nosuch,4"}, "topo"),
    ("incast", {"topo": "leafspine,1,1,1"}, "topo"),  # one host: no sender
    ("incast", {"scale": "0"}, "scale"),
    ("incast", {"scale": "-3"}, "scale"),
    ("incast", {"scale": "nan"}, "scale"),
    ("incast", {"scale": "inf"}, "scale"),
    ("incast", {"scale": "10"}, "scale"),            # 400G would exceed what a veth holds
    ("incast", {"bogus": "1"}, "option"),
    ("collective", {"cc": "bogus"}, "cc"),
    ("collective", {"collectives": "bogus"}, "collectives"),
    ("collective", {"sizes": "1GiB"}, "sizes"),
    ("collective", {"sizes": "1MiB;abc"}, "sizes"),
    ("collective", {"topos": "fattree,4;fattree,64"}, "topos"),
    ("collective", {"hash_draws": "0"}, "hash_draws"),
    ("ratios", {"collective": "bogus"}, "collective"),
    ("ecmp", {"samples": "1e9"}, "samples"),
    ("ecmp", {"seeds": "x"}, "seeds"),
    ("fairness", {"flows": "16"}, "flows"),
    ("fairness", {"gap": "1s"}, "gap"),
    ("fairness", {"settle": "1"}, "settle"),
    ("fairness", {"cc": "hpcc:Nope"}, "cc"),
    ("fairness", {"cc": "nosuch.py:Cc"}, "cc"),
    ("ecmp", {"cc": "dcqcn;off"}, "cc"),             # one setting, not a list
    ("cc", {"algorithms": "off;hpc"}, "algorithms"),
    ("cc", {"algorithms": "dctcp;DCTCP"}, "algorithms"),
    ("cc", {"senders": "1"}, "senders"),
    ("cc", {"senders": "9"}, "senders"),             # leafspine,3,1,3: 6 off the receiver's leaf
    ("cc", {"topo": "leafspine,2,1,2"}, "topo"),      # no room for the victim flow
    ("demo", {"senders": "abc"}, "senders"),
    ("demo", {"dcqcn": "bogus"}, "dcqcn"),
    ("demo", {"incast_size": "-1"}, "incast_size"),
    ("sweep", {"sizes": "8;128MiB"}, "sizes"),       # beyond the 64 MiB cap
    ("sweep", {"sizes": "0"}, "sizes"),
    ("sweep", {"collectives": "allreduce-ring;bogus"}, "collectives"),
    ("sweep", {"topo": "leafspine,1,1,1"}, "topo"),   # one host: no collective
    ("sweep", {"hash_draws": "0"}, "hash_draws"),
    ("cc", {"capture": "h99"}, "capture"),           # leafspine,3,1,3 has h1..h9
    ("incast", {"capture": "h1;;h2"}, "capture"),
    ("ecmp", {"capture": "h1;h1"}, "capture"),
    ("demo", {"capture": "-i eth0"}, "capture"),
    ("collective", {"topos": "fattree,4;leafspine,2,1,2", "capture": "h16"}, "capture"),
]

EMPTY = [("incast", "cc"), ("incast", "thresholds"), ("collective", "sizes"),
         ("collective", "topos"), ("collective", "collectives"), ("ratios", "topos"),
         ("ecmp", "seeds"), ("demo", "sizes"), ("demo", "topo"), ("incast", "topo"),
         ("fairness", "thresholds"), ("sweep", "sizes"), ("sweep", "collectives")]


@pytest.mark.parametrize("name, overrides, option", BAD)
def test_bad_options_are_refused_before_anything_is_created(name, overrides, option,
                                                            nothing_runs):
    with pytest.raises(ParameterError) as err:
        cli_run(name, None, quick=True, overrides=overrides)
    assert err.value.name == option
    assert "\n" not in str(err.value)
    assert list(nothing_runs.iterdir()) == []        # not even runs/


@pytest.mark.parametrize("name, option", EMPTY)
@pytest.mark.parametrize("value", ["", " ", ";"])
def test_empty_sweeps_are_refused(name, option, value, nothing_runs):
    with pytest.raises(ParameterError) as err:
        cli_run(name, None, overrides={option: value})
    assert err.value.name == option


@pytest.mark.parametrize("value, expected", [("OFF", ["off"]), ("Off;DCQCN", ["off", "dcqcn"]),
                                             (" dcqcn ", ["dcqcn"]), ("DCTCP;nic", ["dctcp", "nic"])])
def test_cc_is_case_insensitive(value, expected):
    from experiments import incast

    assert resolve_options(incast.OPTIONS, True, {"cc": value})["cc"] == expected


def test_one_cc_parser_for_every_experiment(tmp_path, monkeypatch):
    """Every experiment's cc option is traffic.ccload's: the same names, and a user's
    file made absolute so that a rerun from elsewhere loads the same class."""
    from experiments import cc_compare, incast
    from experiments.option_parsers import parse_cc

    example = REPO / "examples" / "cc" / "my_aimd.py"
    (tmp_path / "my_aimd.py").write_text(example.read_text())
    monkeypatch.chdir(tmp_path)
    assert parse_cc("my_aimd.py:MyAimd") == f"{tmp_path / 'my_aimd.py'}:MyAimd"
    assert parse_cc(parse_cc("Swift")) == "swift"
    for name, module in EXPERIMENTS.items():
        option = module.OPTIONS.get("cc")
        if option is not None:  # one setting, or a list of them (incast)
            assert option.parse("DCTCP") in ("dctcp", ["dctcp"]), name
    assert resolve_options(cc_compare.OPTIONS, True, {"algorithms": "dctcp;my_aimd.py:MyAimd"})[
        "algorithms"] == ["dctcp", f"{tmp_path / 'my_aimd.py'}:MyAimd"]
    assert resolve_options(incast.OPTIONS, True, {"cc": "timely"})["cc"] == ["timely"]


def test_every_default_and_quick_configuration_parses_and_checks():
    for name, module in EXPERIMENTS.items():
        for quick in (False, True):
            _, opts = resolve_typed(module.Options, module.OPTIONS, quick, {}, module.check)
            assert opts.scale >= 1, name


def test_scale_given_twice_is_refused(nothing_runs):
    with pytest.raises(ParameterError):
        cli_run("incast", None, scale="1e5", overrides={"scale": "2e5"})


def test_resume_needs_a_directory(nothing_runs):
    with pytest.raises(ParameterError):
        cli_run("incast", None, resume=True)
    assert list(nothing_runs.iterdir()) == []


def test_parse_sets():
    assert parse_sets(["a=1", "topo=fattree,4,k=v"]) == {"a": "1", "topo": "fattree,4,k=v"}
    for bad in (["novalue"], ["=1"], ["a=1", "a=2"]):
        with pytest.raises(ParameterError):
            parse_sets(bad)


def test_int_and_list_parsers():
    assert parse_int(1, 5)(" 3 ") == 3
    for bad in ("1.5", "abc", "", "0", "6", True, 2.0, None):
        with pytest.raises(ParameterError):
            parse_int(1, 5)(bad)
    assert parse_list(parse_int(0))("1;2") == [1, 2]
    assert parse_list(parse_int(0))([1, 2]) == [1, 2]    # typed values pass through
    for bad in ("", ";", "1;;2", "1;1", [], 5):
        with pytest.raises(ParameterError):
            parse_list(parse_int(0))(bad)


def test_a_run_that_measured_nothing_is_not_valid():
    assert not combine([]).valid
    assert combine([]).reasons
    assert combine([FidelityReport(True, [], 1.0)]).valid


# -- the rerun line -----------------------------------------------------------------

def _record_options(monkeypatch) -> list[demo_module.Options]:
    """demo.execute replaced by one that records its options and one trivial case."""
    seen: list[demo_module.Options] = []

    def execute(run: Run, opts: demo_module.Options) -> None:
        seen.append(opts)
        run.metric("case", "m", "u", 1.0, 1.0, ALPHABETA)
        run.fidelity("case", FidelityReport(True, [], opts.scale))
        run.commit("case")

    monkeypatch.setattr(demo_module, "execute", execute)
    monkeypatch.setattr(rundir, "capabilities", lambda: {})
    return seen


@pytest.mark.parametrize("command", [
    ["demo", "--scale", "200000", "--set", "senders=2", "--set", "sizes=1MiB;256KiB"],
    ["run", "demo", "--quick", "-S", "150000", "--set", "thresholds=50K/200K",
     "--set", "topo=leafspine,2,2,4", "--set", "dcqcn=NIC"],
    ["demo", "--quick"],
])
def test_rerun_line_reproduces_the_options(command, tmp_path, monkeypatch):
    from cli.app import app

    seen = _record_options(monkeypatch)
    runner = CliRunner()
    first = runner.invoke(app, [*command, "--out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    argv = shlex.split(config["rerun"])
    assert argv[:3] == ["emu", "run", "demo"]
    assert argv[-2:] == ["--out", str(tmp_path / "a")]
    again = runner.invoke(app, [*argv[1:-2], "--out", str(tmp_path / "b")])
    assert again.exit_code == 0, again.output
    assert len(seen) == 2 and seen[0] == seen[1]
    rerun = json.loads((tmp_path / "b" / "config.json").read_text())
    assert rerun["options"] == config["options"] and rerun["quick"] == config["quick"]
    if "--scale" in command or "-S" in command:
        given = command[command.index("--scale" if "--scale" in command else "-S") + 1]
        assert seen[0].scale == float(given)
    if "senders=2" in command:
        assert seen[0].senders == 2 and seen[0].sizes == [1 << 20, 256 << 10]


def test_demo_refuses_unknown_options(tmp_path, monkeypatch):
    from cli.app import app

    _record_options(monkeypatch)
    result = CliRunner().invoke(app, ["demo", "--bogus", "--out", str(tmp_path / "a")])
    assert result.exit_code == 2
    result = CliRunner().invoke(app, ["demo", "--set", "bogus=1", "--out", str(tmp_path / "a")])
    assert isinstance(result.exception, ParameterError)
    assert not (tmp_path / "a").exists()


def test_every_experiment_takes_a_worker_count_the_engine_gets():
    from experiments.measure import engine_config
    from experiments.options import WORKERS

    for name, module in EXPERIMENTS.items():
        assert module.OPTIONS.get("workers") is WORKERS, name
    assert WORKERS.parse("AUTO") == "auto" and WORKERS.parse("2") == 2 and WORKERS.parse(3) == 3
    assert engine_config("off", "auto").workers is None
    assert engine_config("off", 2).workers == 2


def test_every_experiment_takes_hosts_to_capture():
    from experiments.options import CAPTURE

    for name, module in EXPERIMENTS.items():
        assert module.OPTIONS.get("capture") is CAPTURE, name
    assert CAPTURE.parse(CAPTURE.default) == [] and CAPTURE.parse("None") == []
    assert CAPTURE.parse([]) == []  # as a resumed run's config.json holds it
    assert CAPTURE.parse("h1; h16") == ["h1", "h16"] and CAPTURE.parse(["h2"]) == ["h2"]
    assert CAPTURE.parse(CAPTURE.format(["h1", "h9"])) == ["h1", "h9"]


def test_a_run_writes_each_cases_captures_and_a_discarded_run_removes_them(tmp_path):
    from engine.capture import Captured

    run = Run("cc", tmp_path / "run", {}, quick=True)
    frame = bytes(range(64))
    run.pcaps("incast cc=hpcc pfc=off", {"h9": Captured("h9", [(1e-6, frame, 4170)]),
                                         "h1": Captured("h1", [], ring_drops=3)})
    path = rundir.pcap_path(run.dir, "incast cc=hpcc pfc=off", "h9")
    assert path == run.dir / "pcap" / "incast_cc=hpcc_pfc=off" / "h9.pcap" and path.is_file()
    assert rundir.pcap_path(run.dir, "a/b: c", "h1").parent.name == "a_b_c"
    notes = run.pending.notes
    assert notes[0].startswith("pcap/incast_cc=hpcc_pfc=off/h9.pcap: 1 frames")
    assert "3 more the capture ring could not keep" in notes[1]
    (run.dir / "keep.txt").write_text("a user's file")
    run.discard(created=True)
    assert sorted(p.name for p in run.dir.iterdir()) == ["keep.txt"]


def test_a_fabric_may_carry_its_own_scale():
    from experiments.option_parsers import parse_topo_at, split_topo_at

    assert parse_topo_at(" railopt,2,gpus=4@1e5 ") == "railopt,2,gpus=4@100000"
    assert split_topo_at("railopt,2,gpus=4@100000", 10000.0) == ("railopt,2,gpus=4", 1e5)
    assert split_topo_at("fattree,4", 10000.0) == ("fattree,4", 10000.0)
    for bad in ("foo@10000", "fattree,4@", "fattree,4@abc", "fattree,4@0.5"):
        with pytest.raises(ParameterError):
            parse_topo_at(bad)


def test_the_common_options_are_declared_once_and_added_to_every_experiment():
    from experiments.options import COMMON_OPTIONS, Option, with_common
    for name, module in EXPERIMENTS.items():
        assert list(module.OPTIONS)[-len(COMMON_OPTIONS):] == list(COMMON_OPTIONS), name
        # emu run failure measures its own faults, one case per detection delay;
        # emu run routing picks selective repeat for the modes that reorder.
        redefined = {"failure": {"faults", "detect_delay"},
                     "routing": {"transport"}}.get(name, set())
        assert all(module.OPTIONS[k] is o for k, o in COMMON_OPTIONS.items()
                   if k not in redefined), name
    own = Option(1e5, "S")
    assert with_common({}, scale=own)["scale"] is own
    with pytest.raises(ValueError, match="scale"):
        with_common({"scale": own})
    with pytest.raises(ValueError, match="topo"):
        with_common({}, topo=own)


def test_demo_and_sweep_hand_their_options_on_typed(monkeypatch):
    """The demo runs incast and collective cases, the sweep collective ones: each with
    the other experiment's Options, carrying the run's S and measurement settings."""
    from experiments import collective, incast, sweep
    from experiments.options import resolve_typed

    seen: dict[str, list] = {"incast": [], "collective": []}
    monkeypatch.setattr(incast, "execute", lambda run, opts, prefix="": seen["incast"].append(opts))
    monkeypatch.setattr(collective, "execute",
                        lambda run, opts, prefix="", label="": seen["collective"].append(opts))
    _, opts = resolve_typed(demo_module.Options, demo_module.OPTIONS, True,
                            {"scale": "150000", "senders": "2", "workers": "1", "capture": "h1"},
                            demo_module.check)
    demo_module.execute(None, opts)
    common = {"scale": 150000.0, "attempts": 2, "workers": 1, "capture": ["h1"], "metrics_port": None,
              "routing": "ecmp", "flowlet_gap": 10e-6, "receive_steering": "off", "transport": "gbn",
              "faults": "none", "detect_delay": 50e-6, "holddown": 1e-3}
    assert seen["incast"] == [incast.Options(
        topo="fattree,4", senders=2, size=1 << 20, cc=["off", "dcqcn"], dcqcn="paper",
        thresholds=["100K/400K"], pmax=0.2, **common)]
    assert seen["collective"] == [collective.Options(
        topos=["fattree,4"], collectives=["allreduce-ring"], sizes=[1 << 20], cc="off",
        hash_draws=16, **common)]
    _, opts = resolve_typed(sweep.Options, sweep.OPTIONS, True, {"scale": "150000"}, sweep.check)
    sweep.execute(None, opts)
    assert seen["collective"][1] == collective.Options(
        topos=["fattree,4"], collectives=opts.collectives, sizes=opts.sizes, cc="off",
        hash_draws=16, scale=150000.0, attempts=2, workers="auto", capture=[], metrics_port=None,
        routing="ecmp", flowlet_gap=10e-6, receive_steering="off", transport="gbn", faults="none",
        detect_delay=50e-6, holddown=1e-3)


def test_every_experiment_builds_its_fabrics_with_the_common_fabric_options():
    """routing, flowlet_gap and receive_steering are every experiment's options: a
    Fabric built without them would run ECMP unordered while config.json says
    otherwise."""
    import ast
    from pathlib import Path

    calls = []
    for path in sorted(Path("experiments").glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Fabric":
                calls.append((path.name, ast.get_source_segment(source, node) or ""))
    assert len(calls) >= 10
    assert [name for name, call in calls if "fabric_options()" not in call] == []

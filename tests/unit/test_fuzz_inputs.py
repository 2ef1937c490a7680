"""Property tests of every parser a user reaches (issue 29): topology specs, ``--set``
values of every experiment option (thresholds, cc settings, workloads, captures ...),
units, pcaps and run directories for ``emu report``. Whatever the input, each ends in
a value or a one-line FabricEmuError (ParameterError for a parameter), never another
exception. Profiles (modest example counts, derandomized in CI) are in tests/conftest.py."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from core.errors import FabricEmuError, ParameterError  # noqa: E402
from core.units import parse_rate_bps, parse_size_bytes, parse_time_s  # noqa: E402
from experiments import plotkit, rundir  # noqa: E402
from experiments.fidelity import FidelityReport  # noqa: E402
from experiments.option_parsers import parse_scale  # noqa: E402
from experiments.options import ExperimentOptions, Option, resolve_options, typed_check  # noqa: E402
from experiments.registry import EXPERIMENTS, parse_sets  # noqa: E402
from experiments.report import render_report  # noqa: E402
from experiments.runner import run_experiment  # noqa: E402
from model.claims import ALPHABETA  # noqa: E402
from topologies.spec import registry, topo_size  # noqa: E402
from traffic.pcap import read_roce_pcap  # noqa: E402
from traffic.workload_pcap import collective_pcap  # noqa: E402

#: One message line: an error never echoes a whole hostile input.
MAX_MESSAGE_CHARS = 500

_NUMBERS = st.one_of(
    st.integers(-10, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1e308", "1e-300", "-0", "nan", "inf", "4" * 400, "0x10", "1_000",
                     "400G", "1.6T", "64KiB", "50us", "", " ", "None", "True"]))
_WORDS = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)),
                 max_size=30)
_VALUE = st.one_of(_NUMBERS, _WORDS)


def one_line(e: BaseException) -> None:
    text = str(e)
    assert "\n" not in text.strip() and len(text) <= MAX_MESSAGE_CHARS, text[:1000]


def ends_well(call, *args) -> None:  # noqa: ANN001
    try:
        call(*args)
    except FabricEmuError as e:
        one_line(e)


@given(st.sampled_from(sorted(registry())),
       st.lists(st.one_of(_NUMBERS, st.tuples(
           st.sampled_from(["k", "leaves", "spines", "hosts_per_leaf", "oversub", "host_rate",
                            "fabric_rate", "core_rate", "servers", "rails", "p", "a", "h",
                            "dims", "x"]), _VALUE).map("=".join)), max_size=5))
def test_topology_specs(name: str, args: list[str]) -> None:
    ends_well(topo_size, ",".join([name, *args]))


@given(_VALUE, st.sampled_from([parse_rate_bps, parse_size_bytes, parse_time_s]))
def test_units(text: str, parse) -> None:  # noqa: ANN001
    try:
        value = parse(text)
    except ParameterError as e:
        one_line(e)
        return
    assert value == value and value not in (float("inf"), float("-inf"))


_OPTIONS = sorted((name, key) for name, mod in EXPERIMENTS.items() for key in mod.OPTIONS)


@given(st.sampled_from(_OPTIONS), st.one_of(_VALUE, st.lists(_VALUE, max_size=4).map(";".join),
                                            st.lists(_VALUE, max_size=4).map(",".join)))
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_every_experiment_option(option: tuple[str, str], text: str) -> None:
    """``emu run NAME --set KEY=TEXT``: thresholds, cc settings, workloads, captures ..."""
    name, key = option
    mod = EXPERIMENTS[name]
    ends_well(lambda: resolve_options(mod.OPTIONS, True, parse_sets([f"{key}={text}"]),
                                      typed_check(mod.Options, mod.check)))


@pytest.fixture(scope="module")
def pcap_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("fuzz") / "a.pcap"
    collective_pcap("alltoall", 3, 8192, path)
    return path.read_bytes()


@given(st.data())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_pcaps(pcap_bytes: bytes, tmp_path: Path, data: st.DataObject) -> None:
    """A real pcap with bytes flipped, cut, or spliced, and pure noise."""
    blob = bytearray(pcap_bytes)
    kind = data.draw(st.sampled_from(["flip", "cut", "noise", "splice"]))
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    elif kind == "cut":
        blob = blob[:data.draw(st.integers(0, len(blob)))]
    elif kind == "noise":
        blob = bytearray(data.draw(st.binary(max_size=300)))
    else:  # a record header claiming any length
        at = 24
        blob[at + 8:at + 12] = struct.pack("<I", data.draw(st.integers(0, 2**32 - 1)))
    path = tmp_path / "f.pcap"
    path.write_bytes(bytes(blob))  # safefile: ok - the test's input
    ends_well(read_roce_pcap, path)


@dataclass(frozen=True)
class ScaleOptions(ExperimentOptions):
    scale: float


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small finished run with a plot of each common kind."""
    out = tmp_path_factory.mktemp("fuzz") / "run"
    saved = rundir.capabilities
    rundir.capabilities = lambda: {}

    def execute(run: rundir.Run, opts: ScaleOptions) -> None:
        for case in ("a", "b"):
            run.frame("latency", pd.DataFrame({"msg_id": 0, "t_s": [0.0, 1e-6],
                                               "one_way_s": [1e-6, 2e-6], "ce": False}), case=case)
            run.frame("queue", pd.DataFrame({"t_s": [0.0, 1e-6], "port": "p",
                                             "backlog_bytes": [0, 100]}), case=case)
            run.metric(case, "latency p99", "s", 1.0, 1.1, ALPHABETA)
            run.fidelity(case, FidelityReport(case == "a", [] if case == "a" else ["x"], 1e5))
            run.commit(case)
    try:
        run_experiment("s", {"scale": Option(1e5, "S", parse=parse_scale)}, ScaleOptions, execute, out,
                       False, {}, show=False)
    finally:
        rundir.capabilities = saved
    return out


_JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(),
                               st.text(max_size=5)),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


def _paths(doc: object, at: tuple = ()) -> list[tuple]:
    found = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found += _paths(v, (*at, i))
    return found


@given(st.data())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=15)
def test_run_directories(run_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                         monkeypatch: pytest.MonkeyPatch, data: st.DataObject) -> None:
    """``emu report`` on a run directory whose JSON holds any value at any place (right
    keys, wrong types) or whose CSVs lose columns or hold anything."""
    monkeypatch.setattr(plotkit, "save_figure", lambda fig, path, **kw: None,  # drawing: slow
                        raising=False)
    d = tmp_path_factory.mktemp("r") / "run"
    shutil.copytree(run_dir, d)
    target = data.draw(st.sampled_from(["summary.json", "config.json", "metrics.csv",
                                        "latency.csv", "queue.csv"]))
    if target.endswith(".json"):
        doc = json.loads((d / target).read_text())
        at = data.draw(st.sampled_from(_paths(doc)))
        value = data.draw(_JSON)
        if at:
            node = doc
            for k in at[:-1]:
                node = node[k]
            node[at[-1]] = value
        else:
            doc = value
        (d / target).write_text(json.dumps(doc))  # safefile: ok - the test's input
    else:
        df = pd.read_csv(d / target)
        col = data.draw(st.sampled_from(list(df.columns)))
        if data.draw(st.booleans()):
            df = df.drop(columns=[col])
        else:
            df[col] = data.draw(st.one_of(_VALUE, st.none()))
        df.to_csv(d / target, index=False)  # safefile: ok - the test's input
    with contextlib.redirect_stdout(io.StringIO()):
        ends_well(render_report, d)

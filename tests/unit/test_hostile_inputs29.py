"""The shortfalls of issue 29's hostile-input set, one test each: every one ends in a
clear one-line error (or, for the report of many cases, in time), never an internal
error. No fabric is built."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from cli import app as cli
from core import safefile
from core.errors import FabricEmuError, NotRootError, ParameterError
from core.scaling import Scale
from core.units import parse_rate_bps, parse_size_bytes, parse_time_s
from emu.fabric import Fabric
from engine.replay import plan_replay
from experiments import plots
from experiments.options import resolve_options
from experiments.registry import EXPERIMENTS
from experiments.report import render_report
from topologies.spec import build_topo, topo_size
from traffic.pcap import PcapError, read_roce_pcap, write_pcap
from traffic.workload_pcap import collective_pcap

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("spec", [
    "fattree,1e308", "fattree,1e-300", "fattree,4,host_rate=1e308", "fattree,4,host_rate=1e-300",
    "leafspine,2,2,2,oversub=1e308", "leafspine,2,2,2,oversub=1e-300", "railopt,1e308",
    "torus,4,1e308", "dragonfly,2,1e308", "fattree,4,fabric_rate=1e-300"])
def test_extreme_numbers_in_a_topology(spec: str) -> None:
    with pytest.raises(ParameterError) as e:
        topo_size(spec)  # what `emu topo show` does: the sizes, then the graph
        build_topo(spec)
    assert len(str(e.value)) < 300 and "inf" not in str(e.value).split(":")[-1]


@pytest.mark.parametrize("parse, text", [(parse_rate_bps, "1e308"), (parse_rate_bps, "1e-300"),
                                         (parse_size_bytes, "1e300"), (parse_time_s, "1e300"),
                                         (parse_time_s, "1e-300")])
def test_extreme_numbers_in_a_unit(parse, text: str) -> None:  # noqa: ANN001
    with pytest.raises(ParameterError, match="must be"):
        parse(text)


def test_a_key_given_twice_in_a_topology() -> None:
    with pytest.raises(ParameterError, match="k given twice"):
        topo_size("fattree,k=4,k=8")
    with pytest.raises(ParameterError, match="host_rate given twice"):
        topo_size("leafspine,2,2,2,host_rate=100G,host_rate=400G")


def test_a_100kb_input_is_not_echoed_back(tmp_path: Path) -> None:
    huge = "fattree," + "4" * 100_000
    with pytest.raises(ParameterError) as e:
        topo_size(huge)
    assert len(str(e.value)) < 400
    with pytest.raises(ParameterError) as e:
        resolve_options(EXPERIMENTS["incast"].OPTIONS, True, {"senders": "9" * 100_000})
    assert len(str(e.value)) < 400
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "cli.app", "topo", "show", "x" * 100_000],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr) < 600, proc.stderr[:300]
    assert len(proc.stderr.strip().splitlines()) == 1


def test_no_impossible_scale_factor_is_suggested() -> None:
    with pytest.raises(ParameterError) as e:
        Scale(10_000).rate_emu_bps(2.0)
    assert "at most 0" not in str(e.value) and "use faster links" in str(e.value)
    with pytest.raises(ParameterError) as e:
        Scale(1).rate_emu_bps(9e14)
    assert "at least" in str(e.value)


def _frames(tmp_path: Path) -> list[tuple[float, bytes]]:
    path = tmp_path / "a2a.pcap"
    collective_pcap("alltoall", 4, 16384, path)
    return read_roce_pcap(path)


def test_a_malformed_rocev2_frame_is_named_as_such(tmp_path: Path) -> None:
    _, frame = _frames(tmp_path)[0]
    bad = bytearray(frame)
    bad[16:18] = (len(frame) * 2).to_bytes(2, "big")  # IP length beyond the frame
    write_pcap(tmp_path / "bad.pcap", [(0.0, bytes(bad))])
    with pytest.raises(PcapError, match=r"no valid RoCEv2.*its 1 frame: 1 malformed RoCEv2"):
        read_roce_pcap(tmp_path / "bad.pcap")


def _fabric() -> Fabric:
    return Fabric(build_topo("fattree,4"), Scale(4000))  # planned, never started


def test_replay_of_a_frame_larger_than_the_mtu(tmp_path: Path) -> None:
    frames = _frames(tmp_path)
    t, frame = frames[0]
    write_pcap(tmp_path / "jumbo.pcap", [(t, frame + bytes(9100)), *frames[1:]])
    assert len(read_roce_pcap(tmp_path / "jumbo.pcap")[0][1]) > 9014  # still RoCEv2
    with pytest.raises(PcapError, match=r"frame 1 .* above the 9,014-byte frames"):
        plan_replay(tmp_path / "jumbo.pcap", _fabric())


def test_replay_of_timestamps_that_go_back(tmp_path: Path) -> None:
    frames = _frames(tmp_path)
    back = [(t + 100.0, f) for t, f in frames[:3]] + [(t + 50.0, f) for t, f in frames[3:]]
    write_pcap(tmp_path / "back.pcap", back)
    with pytest.raises(PcapError, match=r"frame 4 .* 50 ?s before .*reordercap"):
        plan_replay(tmp_path / "back.pcap", _fabric())


def test_emu_clean_as_a_normal_user_says_it_needs_root(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NotRootError, match="needs root|as root"):
        cli.clean(force=False)
    lock = tmp_path / "locked"
    lock.mkdir()
    lock.chmod(0o500)
    if os.access(lock, os.W_OK) and os.getuid() != 0:
        pytest.skip("cannot make an unwritable directory here")
    if os.getuid() == 0:  # root writes anyway: check the message path with a refusal
        monkeypatch.setattr(os, "open", _deny)
    with pytest.raises(FabricEmuError, match="needs root"):
        safefile.open_lock(lock / ".lock")


def _deny(*args, **kwargs):  # noqa: ANN002, ANN003
    raise PermissionError(13, "Permission denied")


def _many_cases(out: Path, n: int) -> None:
    out.mkdir()
    cases = [f"case{i}" for i in range(n)]
    rows = [{"case": c, "metric": m, "unit": "s", "measured": 1.0, "predicted": 1.1,
             "error_rel": 0.1, "valid": True} for c in cases for m in ("latency p99", "drops")]
    pd.DataFrame(rows).to_csv(out / "metrics.csv", index=False)  # safefile: ok - test input
    pd.DataFrame({"case": [c for c in cases for _ in range(4)], "msg_id": 0,  # safefile: ok
                  "t_s": [j * 1e-6 for _ in cases for j in range(4)], "one_way_s": 1e-6,
                  "ce": False}).to_csv(out / "latency.csv", index=False)
    pd.DataFrame({"case": [c for c in cases for _ in range(2)], "port": "p",  # safefile: ok
                  "t_s": [0.0, 1e-6] * n, "backlog_bytes": [0, 100] * n}
                 ).to_csv(out / "queue.csv", index=False)
    summary = {"experiment": "s", "valid": True, "status": "finished", "suggested_scale": 1e5,
               "reasons": [], "metrics": rows, "deviations": [],
               "cases": {c: {"valid": i % 3 > 0, "reasons": [] if i % 3 else ["pacing lag"],
                             "suggested_scale": 1e5, "checks": []} for i, c in enumerate(cases)}}
    (out / "summary.json").write_text(json.dumps(summary))  # safefile: ok - test input
    (out / "config.json").write_text(json.dumps({"experiment": "s", "scale": 1e5}))  # noqa


def test_a_report_over_1500_cases_finishes_in_time(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured: 167 s for 200 cases before (a panel per case); about 4-7 s now."""
    _many_cases(tmp_path / "run", 1500)
    panels = []
    subplots = plots.plt.subplots
    monkeypatch.setattr(plots.plt, "subplots",
                        lambda *a, **kw: panels.append(a[:2]) or subplots(*a, **kw))
    t0 = time.monotonic()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        made = render_report(tmp_path / "run", show=True)
    assert time.monotonic() - t0 < 60
    assert {p.name for p in made} == {"queue_over_time.png", "latency_ccdf.png"}
    assert all(not a or a[0] <= plots.MAX_DRAWN for a in panels), panels
    assert "case1499" in out.getvalue()  # every case is still in the table


def test_report_on_a_summary_with_right_keys_and_wrong_types(tmp_path: Path) -> None:
    _many_cases(tmp_path / "run", 2)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for field, value in (("deviations", [1]), ("refused_attempts", 1),
                         ("refused_attempts", {"case0": 1})):
        (tmp_path / "run" / "summary.json").write_text(  # safefile: ok - test input
            json.dumps({**summary, field: value}))
        with pytest.raises(ParameterError, match=f"malformed {field}"), \
                contextlib.redirect_stdout(io.StringIO()):
            render_report(tmp_path / "run", show=True)

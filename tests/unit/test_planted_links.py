"""Links planted wherever the project writes (a run directory's files, temporary names
and subdirectories, a --png target, pcap outputs, the run registry, a lab's results):
each is replaced or refused, and nothing outside is touched. As root this is the
attack of issue 29 (fs.protected_symlinks is 0 in many containers)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from core.errors import FabricEmuError
from emu import runs
from experiments import rundir
from experiments.fidelity import FidelityReport
from experiments.option_parsers import parse_scale
from experiments.options import ExperimentOptions, Option
from experiments.report import render_report
from experiments.rundir import Run
from experiments.runner import run_experiment
from labs.workspace import write_new_or_replace
from model.claims import ALPHABETA
from topologies.info import draw_topology
from topologies.spec import build_topo
from traffic.pcap import write_pcap

SPEC = {"scale": Option(1e5, "S", parse=parse_scale)}


@dataclass(frozen=True)
class ScaleOptions(ExperimentOptions):
    scale: float


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """What a planted link points to: a file and a directory that must stay as they are."""
    victims = tmp_path / "outside"
    victims.mkdir()
    (victims / "secret").write_text("root-only")  # safefile: ok - the test's victim
    (victims / "dir").mkdir()
    return victims


def snapshot(victims: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(victims)): (p.read_bytes() if p.is_file() else b"",
                                          p.stat().st_mtime_ns)
            for p in sorted(victims.rglob("*"))}


def plant(path: Path, victims: Path, *, to_dir: bool = False) -> None:
    path.symlink_to(victims / ("dir" if to_dir else "secret"))


@pytest.fixture(autouse=True)
def no_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rundir, "capabilities", lambda: {})


def _collective(run: Run, opts: ScaleOptions) -> None:
    run.frame("collective", pd.DataFrame({
        "fabric": "fattree,4", "collective": "allreduce-ring", "size_bytes": [1 << 20, 4 << 20],
        "busbw_bps": [300e9, 380e9], "busbw_model_bps": [310e9, 389e9],
        "bottleneck_bps": 400e9}), case="a")
    run.metric("a", "m", "u", 1.0, 1.0, ALPHABETA)
    run.fidelity("a", FidelityReport(True, [], opts.scale))
    run.commit("a")


def test_a_resumed_run_and_its_report(tmp_path: Path, outside: Path) -> None:
    out = tmp_path / "run"
    run_experiment("s", SPEC, ScaleOptions, _collective, out, False, {})
    made = render_report(out, show=False)
    assert made, "the synthetic run draws a plot"
    before = snapshot(outside)
    for name in ("summary.json", "metrics.csv", "collective.csv", *(p.name for p in made)):
        (out / name).unlink()
        plant(out / name, outside)
    for name in (".config.json.tmp", f".config.json.{os.getpid()}.tmp", ".summary.json.tmp",
                 ".metrics.csv.tmp", "cases/.001.tmp", "cases/.000.tmp"):
        plant(out / name, outside, to_dir=name.startswith("cases"))
    run_experiment("s", SPEC, ScaleOptions, _collective, out, False, {}, resume=True)
    render_report(out, show=False)
    assert snapshot(outside) == before
    for name in ("summary.json", "metrics.csv", *(p.name for p in made)):
        assert not (out / name).is_symlink() and (out / name).is_file(), name


@pytest.mark.parametrize("subdir", ["cases", "pcap"])
def test_a_run_subdirectory_that_is_a_link_is_refused(tmp_path: Path, outside: Path,
                                                      subdir: str) -> None:
    from engine.capture import Captured

    run = Run("t", tmp_path / "r", {"scale": 1.0}, quick=True)
    plant(run.dir / subdir, outside, to_dir=True)
    before = snapshot(outside)
    with pytest.raises(FabricEmuError, match="symbolic link"):
        if subdir == "pcap":
            run.pcaps("a", {"h0": Captured("h0", [(0.0, b"\0" * 60, 60)])})
        else:
            run.metric("a", "m", "u", 1.0, 1.0, ALPHABETA)
            run.commit("a")
    assert snapshot(outside) == before


def test_png_and_pcap_targets(tmp_path: Path, outside: Path) -> None:
    before = snapshot(outside)
    png, pcap = tmp_path / "x.png", tmp_path / "x.pcap"
    for target in (png, pcap, tmp_path / f".x.pcap.{os.getpid()}.tmp"):
        plant(target, outside)
    draw_topology(build_topo("leafspine,2,2,2"), png)
    assert write_pcap(pcap, [(0.0, b"\0" * 60)]) == 1
    assert snapshot(outside) == before
    assert png.read_bytes().startswith(b"\x89PNG") and pcap.stat().st_size > 60


def test_run_registry_and_lab_results(tmp_path: Path, outside: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "RUNS_DIR", str(tmp_path / "registry"))
    (tmp_path / "registry").mkdir()
    run_id = "deadbeef"
    record = Path(runs._record_path(run_id))
    plant(record, outside)
    plant(record.with_name(f"{record.name}.{os.getpid()}.tmp"), outside)
    plant(tmp_path / "results.json", outside)
    before = snapshot(outside)
    runs._write_record(run_id, "test", "run")
    write_new_or_replace(tmp_path / "results.json", "{}")
    assert snapshot(outside) == before
    assert not record.is_symlink() and (tmp_path / "results.json").read_text() == "{}"
    plant(tmp_path / "registry" / runs._LOCK_NAME, outside)
    with pytest.raises(FabricEmuError, match="symbolic link"), runs.registry_lock():
        pass
    assert snapshot(outside) == before

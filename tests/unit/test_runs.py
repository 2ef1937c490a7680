"""Run registry: clean never takes a registering run for dead; one session at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from emu import runs

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """A private registry and a fake namespace table: nothing on the machine is touched."""
    namespaces: list[str] = []
    deleted: list[str] = []

    def delete(name: str) -> bool:
        deleted.append(name)
        namespaces.remove(name)
        return True

    monkeypatch.setattr(runs, "RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setattr(runs, "list_netns", lambda prefix="": sorted(namespaces))
    monkeypatch.setattr(runs, "delete_netns", delete)
    monkeypatch.setattr(runs, "_session", runs._Session())
    monkeypatch.delenv(runs.ALLOW_CONCURRENT_ENV, raising=False)
    return namespaces, deleted


@pytest.fixture
def other_process():
    """A live process that is not us, to own records."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def _record(run_id: str, pid: int, kind: str, description: str = "x") -> None:
    os.makedirs(runs.RUNS_DIR, exist_ok=True)
    with open(os.path.join(runs.RUNS_DIR, f"{run_id}.json"), "w") as f:
        json.dump({"run_id": run_id, "pid": pid, "start_ticks": runs.start_ticks(pid),
                   "started": 0.0, "description": description, "kind": kind}, f)


def test_clean_does_not_remove_a_run_that_registers_while_it_runs(registry):
    """The race: clean reads the records, a run registers and creates its namespace,
    clean lists the namespaces. The registration must wait for clean to finish."""
    namespaces, deleted = registry
    newcomer = runs.new_run_id()
    registered = threading.Event()

    def start_run() -> None:
        runs.register_run(newcomer, "newcomer")
        registered.set()
        namespaces.append(runs.netns_name(newcomer, "h1"))  # created after its record

    real_list_netns = runs.list_netns
    thread = threading.Thread(target=start_run)

    def list_netns_during_clean(prefix: str = "") -> list[str]:
        # Clean has read the records; let the run try to register now.
        thread.start()
        thread.join(timeout=1.0)
        return real_list_netns(prefix)

    runs.list_netns = list_netns_during_clean
    try:
        cleaned = runs.clean_runs()
    finally:
        runs.list_netns = real_list_netns
    thread.join(timeout=30)
    assert registered.is_set()
    assert cleaned == []
    assert deleted == []
    assert namespaces == [runs.netns_name(newcomer, "h1")]
    alive = {r.run_id: r.alive for r in runs.list_runs()}
    assert alive == {newcomer: True}


def test_clean_removes_dead_runs_and_keeps_live_ones(registry, other_process):
    namespaces, deleted = registry
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    _record("deadbeef", int(dead.stdout), "fabric")
    _record("a1a1a1a1", other_process.pid, "fabric")
    namespaces += [runs.netns_name("deadbeef", "s1"), runs.netns_name("a1a1a1a1", "s1"),
                   runs.netns_name("0badc0de", "h1")]  # no record at all: dead
    assert {r.run_id for r in runs.list_runs() if not r.alive} == {"deadbeef", "0badc0de"}
    cleaned = runs.clean_runs()
    assert {r.run_id for r in cleaned} == {"deadbeef", "0badc0de"}
    assert namespaces == [runs.netns_name("a1a1a1a1", "s1")]
    assert [r.run_id for r in runs.list_runs()] == ["a1a1a1a1"]


def test_records_are_written_whole(registry):
    runs.register_run("12345678", "fattree,4")
    files = os.listdir(runs.RUNS_DIR)
    assert sorted(files) == [".lock", "12345678.json"]  # no temporary left over
    (info,) = runs.list_runs()
    assert (info.kind, info.pid, info.alive) == ("fabric", os.getpid(), True)


def test_a_second_session_is_refused_while_one_is_live(registry, other_process):
    _record("5e551011", other_process.pid, "session", "emu run incast")
    runs.declare_session("emu run collective")
    with pytest.raises(runs.ConcurrentRunError,
                       match=rf"pid {other_process.pid}: emu run incast.*FABRICEMU_ALLOW_CONCURRENT=1"):
        runs.register_run("12345678", "fattree,4")
    assert [r.run_id for r in runs.list_runs()] == ["5e551011"]  # nothing registered


@pytest.mark.skipif(os.geteuid() != 0, reason="a session is only claimed by root")
def test_a_fabric_of_a_session_is_refused_before_it_probes_or_builds(registry, other_process,
                                                                     monkeypatch):
    from core.scaling import Scale
    from emu import fabric
    from topologies.spec import build_topo

    _record("5e551011", other_process.pid, "session", "emu net --cli")
    fab = fabric.Fabric(build_topo("leafspine,2,2,1"), Scale(100000))  # unstarted: allowed
    runs.declare_session("emu run incast")
    monkeypatch.setattr(fabric.Fabric, "_choose_marking",
                        lambda self: pytest.fail("probed although refused"))
    with pytest.raises(runs.ConcurrentRunError, match="emu net --cli"):
        fab.start()
    assert [r.run_id for r in runs.list_runs()] == ["5e551011"]


def test_concurrency_can_be_allowed_with_a_warning(registry, other_process, monkeypatch, caplog):
    _record("5e551011", other_process.pid, "session", "emu net")
    monkeypatch.setenv(runs.ALLOW_CONCURRENT_ENV, "1")
    runs.declare_session("emu run incast")
    runs.register_run("12345678", "fattree,4")
    assert "another fabricemu run is live" in caplog.text
    kinds = sorted((r.kind, r.pid == os.getpid()) for r in runs.list_runs())
    assert kinds == [("fabric", True), ("session", False), ("session", True)]
    runs._end_session()
    runs.unregister_run("12345678")


def test_rigs_and_dead_sessions_do_not_count(registry, other_process):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    _record("deadbeef", int(dead.stdout), "session", "emu run incast (killed)")
    _record("a1a1a1a1", other_process.pid, "fabric", "marker rig")  # a test rig, live
    runs.declare_session("emu run incast")
    runs.register_run("12345678", "fattree,4")
    runs.register_run("87654321", "fattree,4")  # a second fabric of the same run: no re-check
    sessions = [r for r in runs.list_runs() if r.kind == "session" and r.alive]
    assert [r.pid for r in sessions] == [os.getpid()]
    runs._end_session()
    assert all(r.kind != "session" or not r.alive for r in runs.list_runs())


def test_processes_that_are_not_sessions_are_never_refused(registry, other_process):
    _record("5e551011", other_process.pid, "session", "emu run incast")
    runs.register_run("12345678", "marker rig")  # no declare_session: a test or a probe
    assert {r.run_id for r in runs.list_runs()} == {"5e551011", "12345678"}


def test_the_session_record_goes_away_when_the_process_exits(tmp_path):
    code = ("import emu.runs as r\n"
            f"r.RUNS_DIR = {str(tmp_path)!r}\n"
            "r.list_netns = lambda prefix='': []\n"
            "r.declare_session('emu net'); r.register_run('12345678', 'leafspine')\n"
            "import os; print(sorted(os.listdir(r.RUNS_DIR)))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert res.stdout.count(".json") == 2  # its session and its fabric while it ran
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".lock", "12345678.json"]  # a fabric's record is removed by its stop()


def test_a_session_lasts_only_as_long_as_its_command(registry):
    """In-process callers (tests with CliRunner) go on after the command: a declared
    session must not make their later rigs count or be refused."""
    from typer.testing import CliRunner

    from cli.app import app

    result = CliRunner().invoke(app, ["run", "--list"])
    assert result.exit_code == 0, result.output
    assert runs._session.description is None and runs._session.run_id is None

"""Faults during a live run (issue 29): `emu clean` keeps a live run; `emu clean --force`
removes it, and the run then stops with one line saying its fabric was removed, leaving
nothing behind; an engine worker SIGKILLed mid-run stops the run with one line naming the
worker and the signal, the finished case kept, nothing left behind. Builds small fabrics
(run under flock /tmp/fabricemu-emu.lock)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench.stress import census
from tests.conftest import our_namespaces, root_links

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]

LIVE_RUN = textwrap.dedent("""
    import time
    from cli import app as cli

    def body(prog_name):
        from core.scaling import Scale
        from emu.fabric import Fabric
        from topologies.spec import build_topo

        with Fabric(build_topo("leafspine,1,1,2"), Scale(4000), marking="off") as fab:
            print(fab.run_id, flush=True)
            time.sleep(120)

    cli.app = body
    cli.main()
""")


def emu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.app", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_clean_keeps_a_live_run_and_force_stops_it_with_a_clear_error() -> None:
    before_ns, before_links = our_namespaces(), root_links()
    proc = subprocess.Popen([sys.executable, "-c", LIVE_RUN], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        run_id = proc.stdout.readline().strip()
        assert run_id, proc.stderr.read() if proc.stderr else ""
        mine = {n for n in our_namespaces() if n.startswith(f"fabemu-{run_id}-")}
        assert mine
        kept = emu("clean")
        assert kept.returncode == 0 and f"kept live run {run_id}" in kept.stdout, kept
        assert mine <= our_namespaces() and proc.poll() is None
        forced = emu("clean", "--force")
        assert forced.returncode == 0 and f"removed run {run_id}" in forced.stdout, forced
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 2, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert f"fabric (run {run_id}) was removed while it ran" in err, err
        assert our_namespaces() == before_ns - {n for n in before_ns if run_id in n}
        assert root_links() == before_links
        assert not os.path.exists(f"/run/fabricemu/{run_id}.json")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            emu("clean")


def _ignores_sigint(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            ignored = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    except (OSError, StopIteration):
        return False
    return bool(ignored & (1 << (signal.SIGINT - 1)))


def _workers(pid: int) -> list[int]:
    """``pid``'s engine workers: its children that ignore SIGINT (engine/worker.py sets it;
    the ip, tc and clang children, forked by subprocess, do not, even before their exec)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return []
    return [c for c in children if _ignores_sigint(c)]


def test_a_worker_killed_mid_run_stops_it_with_one_line_and_keeps_the_finished_case(
        tmp_path: Path) -> None:
    before = census()
    out = tmp_path / "run"
    # Two cases; the first is committed (cases/000) before the second's workers fork.
    proc = subprocess.Popen([sys.executable, "-m", "cli.app", "run", "incast", "--quick",
                             "--out", str(out), "--set", "cc=off;dcqcn"], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        victim = None
        deadline = time.monotonic() + 120
        while victim is None and proc.poll() is None and time.monotonic() < deadline:
            if (out / "cases" / "000").is_dir():
                victim = next(iter(_workers(proc.pid)), None)
            time.sleep(0.005)
        assert victim is not None, f"no worker of the second case seen: {proc.poll()}"
        os.kill(victim, signal.SIGKILL)
        stdout, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 2, (stdout, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"engine worker 0 (pid {victim}) was killed by SIGKILL" in err, err
    assert f"1 finished case(s) kept in {out}" in " ".join(stdout.split()), stdout
    assert sorted(p.name for p in (out / "cases").iterdir()) == ["000"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "stopped" and not summary["valid"]
    assert {m["case"] for m in summary["metrics"]} == set(summary["cases"]) \
        == {"cc=off K=100KB/400KB"}
    assert census() == before

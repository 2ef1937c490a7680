"""Faults during a live run (issue 29): `emu clean` keeps a live run; `emu clean --force`
removes it, and the run then stops with one line saying its fabric was removed, leaving
nothing behind. Builds one small fabric (run under flock /tmp/fabricemu-emu.lock)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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

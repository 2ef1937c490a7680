"""Shared test helpers: root detection and residue accounting."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

IS_ROOT = os.geteuid() == 0


# Timing-sensitive marker tests sample qdiscs every few ms; the kernel's background
# tear-down of the hundreds of namespaces that fabric tests delete holds the rtnl lock
# and stalls those samples, so these files run first, on a quiet kernel.
_RUN_FIRST = ("test_marking.py", "test_telemetry.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in _RUN_FIRST)  # stable: order kept otherwise
    # Root-level integration tests must run in CI (root); elsewhere they skip with the reason.
    if IS_ROOT:
        return
    skip = pytest.mark.skip(reason="needs root: builds network namespaces, qdiscs and BPF programs")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


#: The experiment tests run at this S, twice the default (core.scaling.DEFAULT_SCALE,
#: 10000). Late in a full suite the kernel's teardown of earlier tests' namespaces
#: stalls the workers for ms at a time: in a fresh-clone CI run (12cb712) the ECMP
#: permutation's p99 pacing lag was 2.0 ms, 0.08 ms when run alone at the default S,
#: and the gate rightly refused it. These tests judge behaviour and accuracy; the
#: default S is judged by the demo from a fresh clone and experiments.bench_capacity.
SUITE_SCALE = 20_000


def netns_teardown_running() -> bool:
    """A kernel worker is tearing down network namespaces now (its name shows the
    workqueue it runs, with '+' while it works: kworker/u4:1+netns)."""
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if "+netns" in comm.read_text():
                return True
        except OSError:  # the process ended meanwhile
            continue
    return False


def wait_for_quiet_kernel(timeout_s: float = 60.0) -> None:
    """Wait (at most ``timeout_s``) until the kernel has finished tearing down the
    namespaces of earlier tests: three samples 50 ms apart without it at work. The
    teardown holds the rtnl lock and CPU for ms at a time, which a timing-judged run
    started meanwhile would measure as its own stalls."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while quiet < 3 and time.monotonic() < deadline:
        quiet = 0 if netns_teardown_running() else quiet + 1
        time.sleep(0.05)


def our_namespaces() -> set[str]:
    from emu.netns import list_netns
    from emu.runs import NETNS_PREFIX

    return set(list_netns(NETNS_PREFIX))


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    return {line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()}

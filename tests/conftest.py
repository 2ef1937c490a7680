"""Shared test helpers: root detection and residue accounting."""

from __future__ import annotations

import os
import subprocess

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


def our_namespaces() -> set[str]:
    from emu.netns import list_netns
    from emu.runs import NETNS_PREFIX

    return set(list_netns(NETNS_PREFIX))


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    return {line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()}

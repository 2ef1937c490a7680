"""Compute gaps on a live fabric: the engine posts a message its gap after its last
dependency was received (and a root message its gap after t0), exactly."""

from __future__ import annotations

import os

import pytest

from core.messages import Message, Workload
from core.scaling import Scale
from emu.fabric import Fabric
from engine.run import EngineConfig, run_workload
from topologies.fattree import LeafSpine

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: builds network namespaces"),
]


def test_messages_are_posted_their_gap_after_their_last_dependency():
    topo = LeafSpine(leaves=2, spines=1, hosts_per_leaf=1, host_rate="100G")
    size = 64 << 10
    wl = Workload("gaps", [Message(0, "h1", "h2", size, gap_s=10e-6),
                           Message(1, "h2", "h1", size, deps=(0,), gap_s=25e-6),
                           Message(2, "h1", "h2", size, deps=(1,), gap_s=1e-6, start_s=200e-6)],
                  ["h1", "h2"], size)
    with Fabric(topo, Scale(5000), marking="off") as fab:
        result = run_workload(fab, wl, EngineConfig(timeout_s=60))
    assert result.completed, result.stats.error
    m = result.messages.set_index("msg_id")
    assert m.loc[0, "start_s"] == pytest.approx(10e-6, abs=1e-12)
    assert m.loc[1, "start_s"] == pytest.approx(m.loc[0, "end_s"] + 25e-6, abs=1e-12)
    # Its start is later than its dependency's end plus its gap.
    assert m.loc[1, "end_s"] + 1e-6 < 200e-6
    assert m.loc[2, "start_s"] == pytest.approx(200e-6, abs=1e-12)

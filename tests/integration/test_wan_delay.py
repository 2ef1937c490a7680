"""A frame crosses two data centres' long link with the right dilated delay, on every
kernel (netem's delay line on the long link where sch_netem exists, the engine's
per-path delay where not).

Expected by hand, two copies of leafspine,1,1,1 (every link 400G) joined by 10 km of
fibre: ah1 - al1 - as1 - gwa - gwb - bs1 - bl1 - bh1, 7 hops, 6 switches. The 4170-byte
frame of a 4 KiB RDMA WRITE plus 24 bytes of Ethernet overhead is 83.88 ns at 400G,
stored and forwarded at every hop:

    7 x 83.88 + 6 x 600 + (2 x 15 + 2 x 150 + 2 x 500 + 10 km x 5 ns/m = 51,330)
    = 587.16 + 3,600 + 51,330 = 55,517.16 ns,

at S = 2000 111 ms of emulated time, of which the long link is 100 ms: a long link
left out, or not dilated, would be 92 % short.
"""

from __future__ import annotations

import os

import pytest

from core.messages import Message, Workload
from core.scaling import Scale
from emu.fabric import Fabric
from engine.run import EngineConfig, run_workload
from topologies.twodc import WanLink, two_dcs

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: builds network namespaces"),
]

S = 2000.0
HOP_SUM_S = 55_517.16e-9
TOLERANCE = 0.05


def test_a_frame_crosses_the_long_link_in_its_dilated_propagation():
    topo = two_dcs("leafspine,1,1,1", WanLink(10e3))
    # Each message sent once the previous one is received: the fabric is idle for each.
    msgs = [Message(k, "ah1", "bh1", 4096, deps=(k - 1,) if k else ()) for k in range(3)]
    with Fabric(topo, Scale(S), marking="off") as fab:
        result = run_workload(fab, Workload("wan", msgs, ["ah1", "bh1"], 4096),
                              EngineConfig(cc=None, timeout_s=30))
    assert result.completed, result.stats.error
    one_way_s = float(result.latency.one_way_s.min())
    # Never below (a frame is stamped its hand-over time less the path delay), above
    # only by the kernel's transit through the veths.
    assert 0.999 * HOP_SUM_S <= one_way_s <= (1 + TOLERANCE) * HOP_SUM_S, one_way_s

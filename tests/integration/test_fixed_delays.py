"""The engine's fixed delays on a live fat-tree: an unloaded frame's one-way latency is
the real fabric's hop sum, a single-frame message's completion time that plus the NIC
overhead, on every kernel (netem or not), within 5 %.

Expected values by hand, fattree,4 (hosts 400G / 3 m, edge-agg 800G / 30 m, agg-core
1.6T / 100 m, 600 ns switches, 5 ns/m), for the 4170-byte frame of a 4 KiB RDMA WRITE
(58 bytes of headers + 16 of RETH) and its 24 bytes of Ethernet overhead on the wire
(4194 B = 33552 bits: 83.88 ns at 400G, 41.94 at 800G, 20.97 at 1.6T), stored and
forwarded at every hop:

* h1 -> h16, cross-pod, 6 hops: 2 x (83.88 + 41.94 + 20.97) + 5 x 600 + 2 x (15 + 150 +
  500) = 293.58 + 3000 + 1330 = 4623.58 ns;
* h9 -> h11, same pod, 4 hops: 2 x (83.88 + 41.94) + 3 x 600 + 2 x (15 + 150) = 2381.64 ns;
* h5 -> h6, same edge, 2 hops: 2 x 83.88 + 600 + 2 x 15 = 797.76 ns.

h1 also sends to h3 (4 hops) and h2 (2 hops): its NIC's clock is its shortest path's,
so its frames to h3 and h16 wait in delay lines (in C with the compiled loop).

Robust against the emulator's own jitter: S = 200000, so 5 % of the shortest sum
(40 ns real) is 8 ms of emulated time, and each pair sends a chain of single-frame
messages whose minimum is judged (the wake-up jitter of a loaded machine only adds).
"""

from __future__ import annotations

import os

import pytest

from core.frame import WIRE_FRAME_BYTES
from core.messages import Message, Workload
from core.scaling import Scale
from emu.fabric import Fabric
from engine.run import EngineConfig, run_workload
from topologies.fattree import FatTree

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: builds network namespaces"),
]

NS = 1e-9
S = 200_000.0
SIZE = 4096
NIC_OVERHEAD_S = 1e-6
#: (src, dst) -> the hop sum worked out in the module docstring.
HOP_SUM_S = {("h1", "h16"): 4623.58 * NS, ("h9", "h11"): 2381.64 * NS,
             ("h5", "h6"): 797.76 * NS, ("h1", "h3"): 2381.64 * NS, ("h1", "h2"): 797.76 * NS}
#: Their propagation terms: on a kernel with sch_netem the links' delay lines carry
#: these, and the engine adds the rest.
PROPAGATION_S = {("h1", "h16"): 1330 * NS, ("h9", "h11"): 330 * NS, ("h5", "h6"): 30 * NS,
                 ("h1", "h3"): 330 * NS, ("h1", "h2"): 30 * NS}
TOLERANCE = 0.05
TURN_S = 0.25 * 8 * WIRE_FRAME_BYTES / 400e9   # engine/books.py TURN_FRAMES


def _chains(per_pair: int) -> Workload:
    """Per pair, ``per_pair`` single-frame messages, each sent once the previous one is
    received: the fabric is idle for every frame."""
    msgs = []
    for p, (src, dst) in enumerate(HOP_SUM_S):
        for k in range(per_pair):
            mid = 100 * p + k
            msgs.append(Message(mid, src, dst, SIZE, deps=(mid - 1,) if k else ()))
    hosts = sorted({h for pair in HOP_SUM_S for h in pair})
    return Workload("unloaded", msgs, hosts, SIZE)


def _by_pair(result) -> dict[tuple[str, str], tuple[float, float]]:
    """(lowest one-way latency of a frame, lowest message completion time) per pair."""
    m = result.messages
    lat = result.latency.merge(m[["msg_id", "src", "dst"]], on="msg_id")
    return {(src, dst): (float(lat[(lat.src == src) & (lat.dst == dst)].one_way_s.min()),
                         float(m[(m.src == src) & (m.dst == dst)].fct_s.min()))
            for src, dst in HOP_SUM_S}


def test_unloaded_latency_is_the_hop_sum_on_2_4_and_6_hops():
    with Fabric(FatTree(4), Scale(S), marking="off") as fab:
        netem = fab.summary()["delay_emulated"]
        result = run_workload(fab, _chains(5), EngineConfig(cc=None, timeout_s=120))
        bare = run_workload(fab, _chains(2), EngineConfig(cc=None, timeout_s=60,
                                                          fixed_delays=False))
    assert result.completed, result.stats.error
    assert bare.completed, bare.stats.error
    assert set(result.stats.emulated_fixed_delays) >= {
        "per-hop serialization", "switch latency", "NIC overhead"}
    got = _by_pair(result)
    for pair, hop_s in HOP_SUM_S.items():
        one_way_s, fct_s = got[pair]
        # Never below (a frame is stamped its hand-over time less the path delay),
        # above only by the kernel's transit through the veths.
        assert 0.999 * hop_s <= one_way_s <= (1 + TOLERANCE) * hop_s, (pair, one_way_s)
        # The message: the NIC overhead, then its only frame, which the engine may hand
        # over up to a turn (a quarter frame time at 400G, 21 ns) before its slot.
        want_s = NIC_OVERHEAD_S + hop_s
        assert 0.999 * want_s - TURN_S <= fct_s <= (1 + TOLERANCE) * want_s, (pair, fct_s)
        m = result.messages
        row = m[(m.src == pair[0]) & (m.dst == pair[1])].iloc[0]
        engine_s = hop_s - PROPAGATION_S[pair] if netem else hop_s
        assert row.path_delay_s == pytest.approx(engine_s, rel=1e-4)
    # Without them the emulated fabric adds next to nothing of its own (the idle HTB
    # buckets release a frame at once) beyond netem's propagation, where it exists.
    for pair, (one_way_s, _) in _by_pair(bare).items():
        netem_s = PROPAGATION_S[pair] if netem else 0.0
        assert 0.999 * netem_s <= one_way_s < netem_s + TOLERANCE * HOP_SUM_S[pair], \
            (pair, one_way_s)

"""The routing modes beyond ECMP on a live leaf-spine: where one flow's frames go.

One UDP socket is one flow (one 5-tuple); frames to UDP 4791 are RoCEv2 to the
switches' router (emu/bpf/router.c), so the kernel's ECMP would send them all up
one uplink of the first leaf. Receive steering is on (``in_order``): it keeps each
link in order and must not undo spraying.
"""

from __future__ import annotations

import socket
import time

import pytest

pytestmark = pytest.mark.root
UPLINKS = ("l1-eth3", "l1-eth4")  # leafspine,2,2,2: l1's ports to s1 and s2


def _flow(fab, src: str, sport: int) -> socket.socket:
    from emu.netns import in_netns

    with in_netns(fab.netns_path(src)):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((fab.plan.host_ip[src], sport))
    return sock


def _routed(fab, switch: str = "l1") -> dict[str, int]:
    """Frames ``switch``'s router has sent to each of l1's uplinks."""
    return {p: fab.routers[switch].counters().per_port[p] for p in UPLINKS}


def _send(fab, sock: socket.socket, dst: str, frames: int, *, dport: int = 4791,
          size: int = 200) -> dict[str, int]:
    """``frames`` frames of one flow; what l1's router sent to each uplink meanwhile."""
    before = _routed(fab)
    total = sum(before.values())
    for _ in range(frames):
        sock.sendto(b"x" * size, (fab.plan.host_ip[dst], dport))
    if dport == 4791:  # until the router has seen them all (no fixed sleep)
        deadline = time.monotonic() + 10
        while sum(_routed(fab).values()) < total + frames and time.monotonic() < deadline:
            time.sleep(0.005)
    after = _routed(fab)
    return {p: after[p] - before[p] for p in UPLINKS}


def _fabric(routing: str, spec: str = "leafspine,2,2,2", scale: float = 4000, **kw):
    from core.scaling import Scale
    from emu.fabric import Fabric
    from topologies.spec import build_topo

    return Fabric(build_topo(spec), Scale(scale), marking="auto", in_order=True,
                  routing=routing, **kw)


def test_spray_sends_one_flow_over_both_uplinks():
    with _fabric("spray") as fab, _flow(fab, "h1", 30000) as sock:
        assert fab.summary()["routing"] == "spray"
        before = fab.port_stats().set_index("port").tx_packets
        sent = _send(fab, sock, "h3", 200)
        # Each of 200 frames picks an uplink at random: both carry some (P(not) = 2^-199),
        # and what the router chose is what left the ports.
        assert sum(sent.values()) == 200 and min(sent.values()) > 0, sent
        delta = fab.port_stats().set_index("port").tx_packets - before
        for ifname, frames in sent.items():
            assert delta[f"l1:{ifname}"] >= frames
        assert fab.routers["l2"].counters().per_port["l2-eth1"] == 200  # all reached h3's port
        fab.set_link_up("l1", "s1", False)  # the routers' tables follow the routes
        assert _send(fab, sock, "h3", 50) == {"l1-eth3": 0, "l1-eth4": 50}
        fab.set_link_up("l1", "s1", True)
        assert min(_send(fab, sock, "h3", 100).values()) > 0


def test_a_lossy_link_drops_before_the_router_and_the_rest_is_still_routed():
    """A link's loss filter shares the switch's ingress hook with its router: it runs
    first, and what it keeps goes on to the router (the two once clashed: EEXIST)."""
    from emu.linkloss import LinkLoss

    if not LinkLoss.available():
        pytest.skip("loss faults need clang for their BPF filter")
    with _fabric("spray-rr") as fab, _flow(fab, "h1", 30002) as sock:
        loss = LinkLoss(fab)
        try:
            loss.set("l1", "s1", 0.5)
            delivered = fab.routers["l2"].counters().per_port["l2-eth1"]
            assert _send(fab, sock, "h3", 200) == {"l1-eth3": 100, "l1-eth4": 100}
            deadline = time.monotonic() + 10
            while (fab.routers["l2"].counters().per_port["l2-eth1"] - delivered
                   + loss.drops() < 200 and time.monotonic() < deadline):
                time.sleep(0.005)
            dropped = loss.drops()
            # Half of the 100 frames through s1, binomially: 0 or 100 has odds 2^-99.
            assert 0 < dropped < 100
            assert fab.routers["l2"].counters().per_port["l2-eth1"] - delivered == 200 - dropped
        finally:
            loss.clear()


def test_round_robin_spray_alternates_exactly():
    with _fabric("spray-rr") as fab, _flow(fab, "h1", 30001) as sock:
        assert _send(fab, sock, "h3", 100) == {"l1-eth3": 50, "l1-eth4": 50}


def test_flowlet_keeps_one_path_between_gaps():
    # S = 20000 and the default 10 us gap: 200 ms of emulated idle start a new flowlet;
    # a burst's 20 frames leave within a few ms, bursts 0.35 s apart.
    with _fabric("flowlet", scale=20000) as fab, _flow(fab, "h1", 30002) as sock:
        assert fab.summary()["flowlet_gap_s"] == pytest.approx(10e-6)
        used = []
        for _ in range(16):
            sent = _send(fab, sock, "h3", 20)
            paths = [p for p, n in sent.items() if n]
            assert len(paths) == 1 and sent[paths[0]] == 20, sent  # one path per flowlet
            used.append(paths[0])
            time.sleep(0.35)
        assert fab.routers["l1"].counters().flowlets == 16
        # Each flowlet drew its path at random: both seen (P(not) = 2^-15).
        assert set(used) == set(UPLINKS), used


def test_adaptive_takes_the_uplink_with_the_shorter_queue():
    # Uplinks at a quarter of the host rate: a bulk non-RoCE flow (the kernel's ECMP
    # puts it on one uplink) queues there for over a second at S = 20000.
    spec = "leafspine,2,2,2,fabric_rate=100G"
    with _fabric("adaptive", spec, scale=20000) as fab, _flow(fab, "h2", 30003) as bulk, \
            _flow(fab, "h1", 30004) as probe:
        for _ in range(400):
            bulk.sendto(b"x" * 4000, (fab.plan.host_ip["h4"], 5000))
        time.sleep(0.3)
        stats = fab.port_stats().set_index("port")
        queues = {p: stats.vq_bytes[f"l1:{p}"] for p in UPLINKS}
        loaded = max(queues, key=queues.get)
        assert queues[loaded] > 100_000 and min(queues.values()) == 0, queues
        sent = _send(fab, probe, "h3", 50)
        assert sent[loaded] == 0 and sum(sent.values()) == 50, (sent, queues)
        assert fab.port_stats().set_index("port").vq_bytes[f"l1:{loaded}"] > 0  # still queued


def test_non_roce_traffic_still_follows_the_kernel():
    from rich.console import Console

    from emu.netcheck import pingall_check

    with _fabric("flowlet") as fab:
        assert pingall_check(fab, Console(quiet=True))
        assert all(r.counters().routed == 0 for r in fab.routers.values())

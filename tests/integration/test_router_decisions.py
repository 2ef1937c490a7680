"""emu/bpf/router.c decides as topologies.loadbalance says: the kernel runs the program on
crafted frames (BPF_PROG_TEST_RUN, no fabric) and each output is checked against the
Python decision and a correctly forwarded frame (MACs of the chosen port, TTL - 1,
a valid IP checksum)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from dataclasses import replace

import pytest

pytestmark = pytest.mark.root
TC_ACT_OK, TC_ACT_REDIRECT = 0, 7
SWITCH = "l1"  # leafspine,2,2,2: h3 is behind its uplinks (slots 2 and 3)
RATE_EMU_BPS = 40e6


class _TestRun(ctypes.Structure):  # struct bpf_test_run_opts (libbpf 1.x)
    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p),
                ("data_out", ctypes.c_void_p), ("data_size_in", ctypes.c_uint32),
                ("data_size_out", ctypes.c_uint32), ("ctx_in", ctypes.c_void_p),
                ("ctx_out", ctypes.c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


def _frame(plan, dst: str = "h3", *, sport: int = 5000, dport: int = 4791, ttl: int = 64) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    iface = plan.iface("h1", SWITCH)
    return bytes(Ether(src=iface.mac, dst=iface.peer_mac)
                 / IP(src=plan.host_ip["h1"], dst=plan.host_ip[dst], ttl=ttl)
                 / UDP(sport=sport, dport=dport) / (b"\0" * 64))


def _run(prog_fd: int, frame: bytes) -> tuple[int, bytes]:
    from emu.bpfload import libbpf

    lib = libbpf().lib
    lib.bpf_prog_test_run_opts.restype = ctypes.c_int
    lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.POINTER(_TestRun)]
    data_in = ctypes.create_string_buffer(frame, len(frame))
    data_out = ctypes.create_string_buffer(len(frame) + 256)
    opts = _TestRun(sz=ctypes.sizeof(_TestRun), data_in=ctypes.cast(data_in, ctypes.c_void_p),
                    data_out=ctypes.cast(data_out, ctypes.c_void_p), data_size_in=len(frame),
                    data_size_out=len(data_out), repeat=1)
    if lib.bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts)) != 0:
        raise OSError(ctypes.get_errno(), "bpf_prog_test_run_opts")
    return opts.retval, data_out.raw[:opts.data_size_out]


@contextlib.contextmanager
def _router(mode: str, gap_emu_ns: int = 10**9, vq_fds: dict[str, int] | None = None):
    from emu.lbrouter import load_router
    from topologies.addressing import plan_addresses
    from topologies.loadbalance import switch_tables
    from topologies.routing import compute_routes
    from topologies.spec import build_topo

    topo = build_topo("leafspine,2,2,2")
    plan = plan_addresses(topo)
    tables = switch_tables(plan, compute_routes(topo), SWITCH)
    ifindex = {p.ifname: 100 + slot for slot, p in enumerate(tables.ports)}
    router, prog_fd = load_router(SWITCH, tables, mode, gap_emu_ns, ifindex,
                                  dict.fromkeys(ifindex, RATE_EMU_BPS), vq_fds or {})
    try:
        yield router, prog_fd, plan, tables
    finally:
        router.close()
        os.close(prog_fd)


@contextlib.contextmanager
def _markers():
    """The ``vq`` maps of four ECN markers, one per port of l1 (ifname -> fd)."""
    from emu.bpfload import load_object
    from emu.ecn.bpf import PROGRAM_NAME, compile_marker

    loaded = [load_object(compile_marker(), PROGRAM_NAME, ("vq",), what="marker",
                          small_maps=("trace",)) for _ in range(4)]
    try:
        yield {f"{SWITCH}-eth{i + 1}": fds[1] for i, fds in enumerate(loaded)}
    finally:
        for fds in loaded:
            for fd in fds:
                os.close(fd)


def _set_queues(vq: dict[str, int], tables, queued_bytes: dict[int, int], now_ns: int) -> None:
    """Each slot's marker queue as if its last frame left ``queued_bytes`` at ``now_ns``."""
    from emu.bpfload import libbpf
    from emu.ecn.bpf import SCALE, _VqState

    for slot, queued in queued_bytes.items():
        st = _VqState(vq_scaled=queued * SCALE, t_last_ns=now_ns)
        key = ctypes.c_uint32(0)
        assert libbpf().lib.bpf_map_update_elem(
            vq[tables.ports[slot].ifname], ctypes.byref(key), ctypes.byref(st), 0) == 0


def _slot_of(out: bytes, frame: bytes, tables) -> int:
    """The port slot a forwarded frame leaves by, checking it was forwarded correctly."""
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether

    eth = Ether(out)
    slot = next(s for s, p in enumerate(tables.ports) if p.peer_mac == eth.dst)
    assert eth.src == tables.ports[slot].mac
    ip, before = eth[IP], Ether(frame)[IP]
    assert ip.ttl == before.ttl - 1 and bytes(ip.payload) == bytes(before.payload)
    check = ip.chksum
    del ip.chksum
    assert IP(bytes(ip)).chksum == check  # the kernel's incremental update is right
    return slot


def _slots(prog_fd: int, frame: bytes, tables, n: int) -> list[int]:
    out = []
    for _ in range(n):
        ret, data = _run(prog_fd, frame)
        assert ret == TC_ACT_REDIRECT
        out.append(_slot_of(data, frame, tables))
    return out


def test_round_robin_spray_takes_the_members_in_turn():
    from topologies.loadbalance import round_robin_choice

    with _router("spray-rr") as (_, prog_fd, plan, tables):
        members = tables.dests[plan.host_ip["h3"]]
        assert _slots(prog_fd, _frame(plan), tables, 8) == [
            members[round_robin_choice(turn, len(members))] for turn in range(8)]


def test_spray_forwards_every_frame_over_every_member():
    with _router("spray") as (router, prog_fd, plan, tables):
        slots = _slots(prog_fd, _frame(plan), tables, 200)
        assert set(slots) == set(tables.dests[plan.host_ip["h3"]])  # P(not) = 2^-199
        assert router.counters().routed == 200


def test_flowlet_keeps_a_member_within_the_gap_and_redraws_after():
    with _router("flowlet", gap_emu_ns=10**12) as (router, prog_fd, plan, tables):
        assert len(set(_slots(prog_fd, _frame(plan), tables, 50))) == 1
        assert router.counters().flowlets == 1
        other = _slots(prog_fd, _frame(plan, sport=5001), tables, 1)  # another flow
        assert router.counters().flowlets == 2 and len(other) == 1
    with _router("flowlet", gap_emu_ns=1) as (router, prog_fd, plan, tables):
        slots = _slots(prog_fd, _frame(plan), tables, 50)  # every frame a gap apart
        assert router.counters().flowlets == 50 and len(set(slots)) == 2  # P(not) = 2^-49


def test_adaptive_takes_the_shortest_queue_as_the_python_decision_does():
    from emu.ecn.bpf import SCALE
    from topologies.loadbalance import least_queue_choice, queue_now_scaled

    with _markers() as vq, _router("adaptive", vq_fds=vq) as (_, prog_fd, plan, tables):
        members = tables.dests[plan.host_ip["h3"]]
        for loaded in members:
            now = time.monotonic_ns()
            queued = {s: 10_000_000 if s == loaded else 4154 for s in members}
            _set_queues(vq, tables, queued, now)
            expected = {members[least_queue_choice(
                [queue_now_scaled(queued[s] * SCALE, 0, now, now + d, RATE_EMU_BPS)
                 for s in members], start)] for start in range(len(members)) for d in (0, 10**6)}
            assert expected == {m for m in members if m != loaded}
            assert set(_slots(prog_fd, _frame(plan), tables, 30)) == expected


def test_adaptive_flowlet_takes_the_shortest_queue_once_per_flowlet():
    with _markers() as vq, _router("adaptive-flowlet", gap_emu_ns=10**12, vq_fds=vq) as (
            router, prog_fd, plan, tables):
        first, second = tables.dests[plan.host_ip["h3"]]
        _set_queues(vq, tables, {first: 10_000_000, second: 0}, time.monotonic_ns())
        assert _slots(prog_fd, _frame(plan, sport=6000), tables, 5) == [second] * 5
        # The queues swap: the flowlet stays where it started, a new flow does not.
        _set_queues(vq, tables, {first: 0, second: 10_000_000}, time.monotonic_ns())
        assert _slots(prog_fd, _frame(plan, sport=6000), tables, 5) == [second] * 5
        assert _slots(prog_fd, _frame(plan, sport=6001), tables, 5) == [first] * 5
        assert router.counters().flowlets == 2


def test_what_the_router_leaves_to_the_kernel():
    with _router("spray") as (router, prog_fd, plan, tables):
        for frame in (_frame(plan, dport=5000), _frame(plan, ttl=1)):
            assert _run(prog_fd, frame) == (TC_ACT_OK, frame)
        assert router.counters().routed == 0
        tables_ip = plan.host_ip["h3"]
        router.set_tables(replace(tables, dests={ip: s for ip, s in tables.dests.items()
                                                 if ip != tables_ip}))
        assert _run(prog_fd, _frame(plan))[0] == TC_ACT_OK
        assert router.counters().passed == 1

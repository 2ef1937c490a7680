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
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from emu.ecn.bpf import VqRef

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


#: struct __sk_buff up to cb[], and where its ingress_ifindex sits
SKB_CTX_BYTES, INGRESS_IFINDEX_OFFSET = 48, 36


def _run(prog_fd: int, frame: bytes, ingress_ifindex: int = 0) -> tuple[int, bytes]:
    from emu.bpfload import libbpf

    lib = libbpf().lib
    lib.bpf_prog_test_run_opts.restype = ctypes.c_int
    lib.bpf_prog_test_run_opts.argtypes = [ctypes.c_int, ctypes.POINTER(_TestRun)]
    data_in = ctypes.create_string_buffer(frame, len(frame))
    data_out = ctypes.create_string_buffer(len(frame) + 256)
    opts = _TestRun(sz=ctypes.sizeof(_TestRun), data_in=ctypes.cast(data_in, ctypes.c_void_p),
                    data_out=ctypes.cast(data_out, ctypes.c_void_p), data_size_in=len(frame),
                    data_size_out=len(data_out), repeat=1)
    ctx = ctypes.create_string_buffer(SKB_CTX_BYTES)
    if ingress_ifindex:  # the port the frame came in by (the kernel allows setting it)
        ctypes.c_uint32.from_buffer(ctx, INGRESS_IFINDEX_OFFSET).value = ingress_ifindex
        opts.ctx_in, opts.ctx_size_in = ctypes.cast(ctx, ctypes.c_void_p), SKB_CTX_BYTES
    if lib.bpf_prog_test_run_opts(prog_fd, ctypes.byref(opts)) != 0:
        raise OSError(ctypes.get_errno(), "bpf_prog_test_run_opts")
    return opts.retval, data_out.raw[:opts.data_size_out]


@contextlib.contextmanager
def _router(mode: str, gap_emu_ns: int = 10**9, vq: dict[str, VqRef] | None = None,
            spec: str = "leafspine,2,2,2", switch: str = SWITCH):
    """``switch``'s router in ``mode``; its port in slot i has ifindex 100 + i."""
    from emu.lbrouter import load_router
    from topologies.addressing import plan_addresses
    from topologies.loadbalance import fabric_tables
    from topologies.routing import compute_routes
    from topologies.spec import build_topo

    topo = build_topo(spec)
    plan = plan_addresses(topo)
    tables = fabric_tables(topo, plan, compute_routes(topo), mode)[switch]
    ifindex = {p.ifname: 100 + slot for slot, p in enumerate(tables.ports)}
    router, prog_fd = load_router(switch, tables, mode, gap_emu_ns, ifindex,
                                  dict.fromkeys(ifindex, RATE_EMU_BPS), vq or {},
                                  dict.fromkeys(vq or {}, 0))
    try:
        yield router, prog_fd, plan, tables
    finally:
        router.close()
        os.close(prog_fd)


@contextlib.contextmanager
def _markers(switch: str = SWITCH, ports: int = 4):
    """The queues of ``switch``'s ECN marker object, as a fabric loads it: one ``vq``
    map, each port at its slot (ifname -> VqRef). The slots run backwards against the
    router's own port order, so a router reading the wrong entry is seen."""
    from emu.ecn.bpf import VqRef, close_loaded, compile_marker, load_markers

    loaded = load_markers(compile_marker(), ports)
    try:
        yield {f"{switch}-eth{i + 1}": VqRef(loaded[ports - 1 - i].vq_fd, ports - 1 - i)
               for i in range(ports)}
    finally:
        for one in loaded:
            close_loaded(one)


def _set_queues(vq: dict[str, VqRef], tables, queued_bytes: dict[int, int], now_ns: int) -> None:
    """Each slot's marker queue as if its last frame left ``queued_bytes`` at ``now_ns``."""
    from emu.bpfload import libbpf
    from emu.ecn.bpf import SCALE, _VqState

    for slot, queued in queued_bytes.items():
        st = _VqState(vq_scaled=queued * SCALE, t_last_ns=now_ns)
        ref = vq[tables.ports[slot].ifname]
        key = ctypes.c_uint32(ref.slot)
        assert libbpf().lib.bpf_map_update_elem(ref.fd, ctypes.byref(key), ctypes.byref(st), 0) == 0


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
    from emu.lbrouter import QUEUE_QUANTUM_BYTES
    from topologies.loadbalance import least_queue_choice, queue_now_scaled

    with _markers() as vq, _router("adaptive", vq=vq) as (_, prog_fd, plan, tables):
        members = tables.dests[plan.host_ip["h3"]]
        for loaded in members:
            now = time.monotonic_ns()
            queued = {s: 10_000_000 if s == loaded else 4154 for s in members}
            _set_queues(vq, tables, queued, now)
            expected = {members[least_queue_choice(
                [queue_now_scaled(queued[s] * SCALE, 0, now, now + d, RATE_EMU_BPS, 0)
                 for s in members], start, QUEUE_QUANTUM_BYTES * SCALE)]
                for start in range(len(members)) for d in (0, 10**6)}
            assert expected == {m for m in members if m != loaded}
            assert set(_slots(prog_fd, _frame(plan), tables, 30)) == expected


def test_adaptive_alternates_a_destination_over_equal_queues():
    with _markers() as vq, _router("adaptive", vq=vq) as (_, prog_fd, plan, tables):
        members = tables.dests[plan.host_ip["h3"]]
        _set_queues(vq, tables, dict.fromkeys(members, 0), time.monotonic_ns())
        slots = _slots(prog_fd, _frame(plan), tables, 8)
        assert set(slots) == set(members) and all(a != b for a, b in zip(slots, slots[1:], strict=False))
        # a loaded member is avoided; the next tie goes to the member after the last
        _set_queues(vq, tables, {members[0]: 10_000_000, members[1]: 0}, time.monotonic_ns())
        assert _slots(prog_fd, _frame(plan), tables, 3) == [members[1]] * 3
        _set_queues(vq, tables, dict.fromkeys(members, 0), time.monotonic_ns())
        assert _slots(prog_fd, _frame(plan), tables, 2) == [members[0], members[1]]


def test_a_router_refuses_ports_of_several_marker_objects():
    """The router reads one map of queues, its switch's marker object's: ports whose
    markers are separate objects would have it read the wrong port's queue."""
    with _markers() as first, _markers() as second:
        mixed = {**dict(list(first.items())[:2]), **dict(list(second.items())[2:])}
        with pytest.raises(ValueError, match="are 2 objects"), _router("adaptive", vq=mixed):
            pass


def test_adaptive_flowlet_takes_the_shortest_queue_once_per_flowlet():
    with _markers() as vq, _router("adaptive-flowlet", gap_emu_ns=10**12, vq=vq) as (
            router, prog_fd, plan, tables):
        first, second = tables.dests[plan.host_ip["h3"]]
        _set_queues(vq, tables, {first: 10_000_000, second: 0}, time.monotonic_ns())
        assert _slots(prog_fd, _frame(plan, sport=6000), tables, 5) == [second] * 5
        # The queues swap: the flowlet stays where it started, a new flow does not.
        _set_queues(vq, tables, {first: 0, second: 10_000_000}, time.monotonic_ns())
        assert _slots(prog_fd, _frame(plan, sport=6000), tables, 5) == [second] * 5
        assert _slots(prog_fd, _frame(plan, sport=6001), tables, 5) == [first] * 5
        assert router.counters().flowlets == 2


def _with_ip_id(frame: bytes, ident: int) -> bytes:
    """``frame`` with IP id ``ident`` and its IP checksum recomputed."""
    from core.checksum import internet_checksum

    ip = bytearray(frame[14:34])
    ip[4:6], ip[10:12] = ident.to_bytes(2, "big"), b"\0\0"
    ip[10:12] = internet_checksum(bytes(ip)).to_bytes(2, "big")
    return frame[:14] + bytes(ip) + frame[34:]


def test_the_in_place_ttl_and_checksum_update_holds_at_the_checksum_edges():
    """The router decrements the TTL and patches the IP checksum itself (RFC 1624): frames
    whose checksum is 0x0000 before the update, or would be after it, and a sweep of the
    rest, all leave with a valid checksum (`_slot_of` recomputes it)."""
    with _router("spray") as (_, prog_fd, plan, tables):
        for ttl in (2, 64, 255):
            base = _frame(plan, ttl=ttl)
            after = base[:22] + bytes([ttl - 1]) + base[23:]
            zero_before = next(i for i in range(65536) if _with_ip_id(base, i)[24:26] == b"\0\0")
            zero_after = next(i for i in range(65536) if _with_ip_id(after, i)[24:26] == b"\0\0")
            for ident in (zero_before, zero_after, *range(0, 65536, 4099)):
                frame = _with_ip_id(base, ident)
                ret, out = _run(prog_fd, frame)
                assert ret == TC_ACT_REDIRECT
                _slot_of(out, frame, tables)


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


DFLY = "dragonfly,p=1,a=2,h=1"  # three groups; h1 on g0r0 sends to h3 on g1r0


def _dfly_frame(plan, byte4: int = 0, udp_check: int = 0) -> bytes:
    """h1 -> h3, UDP checksum ``udp_check`` (RoCEv2 NICs send 0), BTH byte 4 ``byte4``."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    bth = bytes([0, 0, 0, 0, byte4]) + bytes(7)
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                 / IP(src=plan.host_ip["h1"], dst=plan.host_ip["h3"], ttl=64)
                 / UDP(sport=5000, dport=4791, chksum=udp_check) / (bth + bytes(64)))


def _forwarded(prog_fd: int, frame: bytes, tables, ingress_slot: int) -> tuple[int, int]:
    """The slot a frame coming in by ``ingress_slot`` leaves by, and its BTH byte 4."""
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether

    from topologies.valiant import TAG_OFFSET

    ret, out = _run(prog_fd, frame, 100 + ingress_slot)
    assert ret == TC_ACT_REDIRECT
    eth = Ether(out)
    slot = next(s for s, p in enumerate(tables.ports) if p.peer_mac == eth.dst)
    assert eth.src == tables.ports[slot].mac and eth[IP].ttl == 63
    assert out[:TAG_OFFSET][34:] == frame[:TAG_OFFSET][34:]  # UDP header, BTH bytes 0-3
    assert out[TAG_OFFSET + 1:] == frame[TAG_OFFSET + 1:]
    return slot, out[TAG_OFFSET]


def test_valiant_tags_at_the_source_and_follows_the_tag():
    from topologies.valiant import TAG_MINIMAL, tag_of

    with _router("valiant", spec=DFLY, switch="g0r0") as (router, fd, plan, tables):
        h3 = plan.host_ip["h3"]
        minimal, (toward2,) = tables.dests[h3][0], tables.groups.to_group[2]
        assert tables.groups.host_slots == (0,) and toward2 != minimal
        # from the host port: through group 2, the only other one
        assert {_forwarded(fd, _dfly_frame(plan), tables, 0) for _ in range(20)} == {
            (toward2, tag_of(2))}
        assert router.counters().valiant == 20
        # FECN and BECN stay; a tag a host set is replaced
        assert _forwarded(fd, _dfly_frame(plan, 0xC0 | 7), tables, 0) == (toward2, 0xC0 | tag_of(2))
        # from a fabric port: a tagged frame goes on toward its group, an untagged one minimal
        assert _forwarded(fd, _dfly_frame(plan, tag_of(2)), tables, 2) == (toward2, tag_of(2))
        assert _forwarded(fd, _dfly_frame(plan), tables, 1) == (minimal, TAG_MINIMAL)
        # a UDP checksum covers the byte: left alone, minimal
        assert _forwarded(fd, _dfly_frame(plan, udp_check=0x1234), tables, 0) == (minimal, 0)
    with _router("valiant", spec=DFLY, switch="g2r0") as (_, fd, plan, tables):
        # in the intermediate group: minimal from here on
        assert _forwarded(fd, _dfly_frame(plan, tag_of(2)), tables, 2) == (
            tables.dests[plan.host_ip["h3"]][0], TAG_MINIMAL)
    with _router("valiant", spec=DFLY, switch="g1r0") as (_, fd, plan, tables):
        # delivered: the host sees no tag
        assert _forwarded(fd, _dfly_frame(plan, 0x40 | TAG_MINIMAL), tables, 2) == (0, 0x40)


@pytest.mark.parametrize("switch,ingress_slot", [("g0r0", 0), ("g0r1", 1)])
def test_ugal_compares_queue_times_hops_from_the_switch_own_queues(switch, ingress_slot):
    """At the source switch (h1's port) and at the next one in the source group (a
    frame it left undecided): Valiant exactly when the Python decision says so."""
    from emu.lbrouter import QUEUE_QUANTUM_BYTES
    from topologies.valiant import TAG_MINIMAL, TAG_UNDECIDED, tag_of, ugal_prefers_valiant

    with _markers(switch, 3) as vq, _router("ugal", vq=vq, spec=DFLY, switch=switch) as (
            _, fd, plan, tables):
        h3 = plan.host_ip["h3"]
        hops = tables.groups.dests[h3]
        minimal, (toward2,) = tables.dests[h3][0], tables.groups.to_group[2]
        stays = TAG_UNDECIDED if ingress_slot == 0 else TAG_MINIMAL
        decided = []
        for q_min, q_val in ((0, 0), (200_000, 0), (200_000, 150_000), (200_000, 100_000),
                             (0, 100_000)):
            _set_queues(vq, tables, {minimal: q_min, toward2: q_val}, time.monotonic_ns())
            valiant = ugal_prefers_valiant(q_min, hops.hops, q_val, hops.via_hops[2],
                                           QUEUE_QUANTUM_BYTES)  # queues in bytes here
            assert _forwarded(fd, _dfly_frame(plan), tables, ingress_slot) == (
                (toward2, tag_of(2)) if valiant else (minimal, stays)), (q_min, q_val)
            decided.append(valiant)
        assert True in decided and False in decided

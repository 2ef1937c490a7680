"""Replay a RoCEv2 pcap into a fabric, open loop, with its original timing dilated by S.

Addresses in the pcap must be host addresses of the fabric (pcaps written by
`emu pcap` use the same plan: host i = 10.0.0.0 + i + 1). Only the Ethernet
addresses are rewritten to each first hop's; the ICRC does not cover them, so
every frame stays valid RoCEv2.

A replay of a real span T takes S*T of wall time with the fabric up, so a capture
with an idle hour would keep it up for months at S = 4000.  ``plan_replay`` reads
the pcap once (streaming, before any fabric is built) and refuses a replay longer
than ``max_wall_s`` (default ``DEFAULT_MAX_WALL_S``, 10 minutes); ``max_gap_s``
shortens every idle gap between consecutive frames to at most that much real time,
keeping the frames' order and the timing within each burst.  At most
``DEFAULT_MAX_FRAMES`` (2,000,000) RoCEv2 frames are replayed, as all are held in
memory for the send loop.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from scapy.utils import mac2str

from core.errors import ParameterError
from core.units import format_time
from emu.fabric import Fabric
from emu.netns import in_netns
from emu.shaping import MTU_BYTES
from traffic.pcap import DEFAULT_MAX_PCAP_BYTES, PcapError, iter_roce_pcap

_IP_SRC, _IP_DST = 26, 30  # offsets in an Ethernet + IPv4 frame
#: The largest frame a fabric link carries: the veths' MTU plus the Ethernet header.
MAX_FRAME_BYTES = MTU_BYTES + 14
DEFAULT_MAX_WALL_S = 600.0
# The send schedule holds every frame (rewritten) plus ~200 bytes of bookkeeping,
# so a 1 GiB file of 62-byte ACKs alone would need ~3 GB: frames are capped too.
DEFAULT_MAX_FRAMES = 2_000_000


@dataclass(frozen=True)
class ReplayPlan:
    """What replaying a pcap asks of a fabric, found without building one."""

    frames: int
    span_s: float            # real seconds from the first frame to the last, as replayed
    captured_span_s: float   # the same as captured (before gap compression)
    longest_gap_s: float     # longest captured gap between consecutive frames
    longest_gap_frame: int   # the 1-based RoCEv2 frame that ends that gap
    compressed_gaps: int     # gaps shortened to max_gap_s
    wall_s: float            # span_s dilated by S: how long the replay takes here


@dataclass(frozen=True)
class ReplayResult:
    frames: int
    duration_s: float        # real seconds spanned by the replay (after gap compression)
    wall_emu_s: float        # how long the replay took here
    late_p99_s: float        # real-unit lateness of sends against the dilated schedule
    per_host_frames: dict[str, int]
    compressed_gaps: int


def _human_s(t_s: float) -> str:
    for unit, factor in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if t_s >= 2 * factor:
            return f"{t_s / factor:.3g} {unit}"
    return format_time(t_s)


def _relative_times(frames: Iterable[tuple[float, bytes]], max_gap_s: float | None
                    ) -> Iterator[tuple[float, float, bytes]]:
    """``(t_rel_s, captured_gap_s, frame)``: times from the first frame, gaps capped."""
    t_rel_s = 0.0
    prev_s: float | None = None
    for t_s, frame in frames:
        gap_s = 0.0 if prev_s is None else t_s - prev_s
        prev_s = t_s
        t_rel_s += gap_s if max_gap_s is None else min(gap_s, max_gap_s)
        yield t_rel_s, gap_s, frame


def _host(fab: Fabric, frame: bytes, offset: int, n: int) -> str:
    ip = socket.inet_ntoa(frame[offset:offset + 4])
    try:
        return fab.plan.host_by_ip[ip]
    except KeyError:
        ips = list(fab.plan.host_by_ip)
        raise PcapError(f"frame {n} of the pcap: address {ip} is not a host of this fabric "
                        f"({len(ips)} hosts, {ips[0]} .. {ips[-1]}); use a topology with "
                        "enough hosts") from None


def _check_route(fab: Fabric, src: str, dst: str, n: int) -> None:
    if src == dst:
        raise PcapError(f"frame {n} of the pcap goes from {src} to itself; only traffic "
                        "between hosts crosses the fabric")
    try:
        fab.egress(src, dst)
    except (KeyError, IndexError):
        raise PcapError(f"frame {n} of the pcap: {fab.topo.describe()} has no route from "
                        f"{src} to {dst}") from None


def plan_replay(path: str | Path, fab: Fabric, *,
                max_gap_s: float | None = None, max_wall_s: float = DEFAULT_MAX_WALL_S,
                max_bytes: int = DEFAULT_MAX_PCAP_BYTES,
                max_frames: int = DEFAULT_MAX_FRAMES) -> ReplayPlan:
    """Read the pcap once and check that it can be replayed into ``fab``: PcapError if not.

    ``fab`` need not be started (its address plan and routes exist from the start).
    Checks the file (see ``traffic.pcap.iter_pcap``), that it holds at most
    ``max_frames`` RoCEv2 frames, that every one's addresses are hosts of the
    fabric with a route between them, and that the replay takes at most ``max_wall_s`` of wall time at this S.
    """
    if max_gap_s is not None and not max_gap_s >= 0:
        raise ParameterError("max_gap_s", max_gap_s, "must be >= 0 (or None to keep gaps)")
    if not max_wall_s > 0:
        raise ParameterError("max_wall_s", max_wall_s, "must be positive")
    n = longest_at = compressed = 0
    span_s = captured_s = captured_rel_s = longest_s = 0.0
    pairs: set[tuple[str, str]] = set()
    frames = iter_roce_pcap(path, max_bytes=max_bytes)
    for n, (t_rel_s, gap_s, frame) in enumerate(_relative_times(frames, max_gap_s), start=1):
        if n > max_frames:
            raise PcapError(f"{path} holds more than {max_frames:,} RoCEv2 frames, the most a "
                            "replay holds in memory (--max-frames)")
        if len(frame) > MAX_FRAME_BYTES:
            raise PcapError(f"RoCEv2 frame {n} of {path} is {len(frame):,} bytes, above the "
                            f"{MAX_FRAME_BYTES:,}-byte frames the fabric's links carry "
                            f"(MTU {MTU_BYTES:,})")
        if gap_s < 0:
            raise PcapError(f"RoCEv2 frame {n} of {path} is stamped {_human_s(-gap_s)} before "
                            f"the frame ahead of it; a replay needs the frames in time order "
                            f"(sort them with 'reordercap {path} sorted.pcap')")
        pair = _host(fab, frame, _IP_SRC, n), _host(fab, frame, _IP_DST, n)
        if pair not in pairs:
            _check_route(fab, *pair, n)
            pairs.add(pair)
        if gap_s > longest_s:
            longest_s, longest_at = gap_s, n
        compressed += max_gap_s is not None and gap_s > max_gap_s
        span_s = max(span_s, t_rel_s)
        captured_rel_s += gap_s
        captured_s = max(captured_s, captured_rel_s)
    scale = fab.scale
    plan = ReplayPlan(n, span_s, captured_s, longest_s, longest_at, compressed,
                      scale.time_emu_s(span_s))
    if plan.wall_s > max_wall_s:
        raise PcapError(
            f"replaying {path} at S = {scale.factor:g} would take {_human_s(plan.wall_s)} "
            f"(it spans {_human_s(span_s)} real; longest gap {_human_s(longest_s)} before "
            f"frame {longest_at}), above the {_human_s(max_wall_s)} limit (--max-wall): "
            "shorten idle gaps with --max-gap (e.g. --max-gap 100us), use a smaller S, or "
            "raise --max-wall")
    return plan


def replay_pcap(fab: Fabric, path: str | Path, *, max_gap_s: float | None = None,
                max_wall_s: float = DEFAULT_MAX_WALL_S, max_bytes: int = DEFAULT_MAX_PCAP_BYTES,
                max_frames: int = DEFAULT_MAX_FRAMES) -> ReplayResult:
    """Send every RoCEv2 frame of ``path`` from its source host at its dilated time.

    The pcap is checked first (``plan_replay``), then read again to build the send
    schedule, so only the rewritten frames are held in memory.
    """
    plan = plan_replay(path, fab, max_gap_s=max_gap_s, max_wall_s=max_wall_s, max_bytes=max_bytes,
                       max_frames=max_frames)
    schedule: list[tuple[float, socket.socket, bytes]] = []
    socks: dict[tuple[str, str], socket.socket] = {}
    sent: dict[str, int] = {}
    try:
        frames = iter_roce_pcap(path, max_bytes=max_bytes)
        for n, (t_rel_s, _, frame) in enumerate(_relative_times(frames, max_gap_s), start=1):
            if n > plan.frames:  # the file grew since it was checked
                raise PcapError(f"{path} changed while being replayed")
            src, dst = _host(fab, frame, _IP_SRC, n), _host(fab, frame, _IP_DST, n)
            eg = fab.egress(src, dst)
            if (src, eg.ifname) not in socks:
                with in_netns(fab.netns_path(src)):
                    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                sock.bind((eg.ifname, 0))
                socks[(src, eg.ifname)] = sock
            rewritten = mac2str(eg.dst_mac) + mac2str(eg.src_mac) + frame[12:]
            schedule.append((fab.scale.time_emu_s(t_rel_s), socks[(src, eg.ifname)], rewritten))
            sent[src] = sent.get(src, 0) + 1
        lateness = []
        start = time.monotonic()
        for due_s, sock, frame in schedule:
            now = time.monotonic() - start
            if due_s > now:
                time.sleep(due_s - now)
            lateness.append(max(0.0, time.monotonic() - start - due_s))
            sock.send(frame)  # blocks while the NIC queue is full, as a NIC would
        wall = time.monotonic() - start
    finally:
        for sock in socks.values():
            sock.close()
    lateness.sort()
    return ReplayResult(len(schedule), plan.span_s, wall,
                        fab.scale.to_real_time_s(lateness[int(0.99 * (len(lateness) - 1))]),
                        sent, plan.compressed_gaps)

"""Benchmark: the engine's TPACKET_V2 receive ring against a TPACKET_V3 block ring.

    python -m bench.rxring [--scales 10000,4000] [--frames 2000] [--tov-ms 1]

One host of a two-host fabric sends RoCEv2 data frames to the other, one every
dilated packet time of a 4 KB frame at 400G (83 ns x S), each stamped with its send
time. The receiver reads them from a ring with the engine's filter and header-only
capture, sleeping in epoll between reads, first a TPACKET_V2 ring (the engine's:
the kernel wakes the reader for every frame), then a TPACKET_V3 ring (the kernel
wakes it when a block is full or its retire timeout, ``--tov-ms`` milliseconds,
expires). Printed per ring and S: the receive lag (send to the reader's wake-up;
the engine's gate allows two dilated packet times at the p99), wake-ups per frame and
the reader's CPU per frame.
"""

from __future__ import annotations

import argparse
import mmap
import select
import socket
import struct
import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from core.frame import MTU_PAYLOAD_BYTES, OFF_TS_RETH, WIRE_FRAME_BYTES
from core.scaling import MAX_EMULATED_RATE_BPS, Scale
from emu.fabric import Fabric
from emu.netns import in_netns
from engine.rawsock import (
    ETH_P_ALL,
    PACKET_RX_RING,
    PACKET_VERSION,
    SOL_PACKET,
    TP_STATUS_USER,
    RingSpec,
    attach_roce_filter,
    open_rx_ring,
    open_tx_socket,
    slot_offsets,
)
from experiments.option_parsers import arg_type, clear_errors, parse_int, parse_scales
from topologies.spec import build_topo
from traffic.roce import Flow, QpTemplate

TPACKET_V3 = 2
_V3_BLOCK_BYTES = 1 << 16
_V3_BLOCKS = 64
_NIC_RATE_BPS = 400e9
_LONGEST_RUN_S = 600.0
_TS = struct.Struct(">q")   # the send stamp, as traffic.roce writes it
_U32 = struct.Struct("I")
_U16 = struct.Struct("H")


def _open_v3_ring(tov_ms: int) -> tuple[socket.socket, mmap.mmap]:
    """A TPACKET_V3 ring with the engine's filter and snap length."""
    spec = RingSpec.for_headers()
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        attach_roce_filter(sock, spec.snap_bytes)
        sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V3)
        # struct tpacket_req3: block size and count, frame size and count, retire
        # timeout (ms), private bytes per block, feature word.
        sock.setsockopt(SOL_PACKET, PACKET_RX_RING, struct.pack(
            "IIIIIII", _V3_BLOCK_BYTES, _V3_BLOCKS, spec.frame_size,
            _V3_BLOCK_BYTES // spec.frame_size * _V3_BLOCKS, tov_ms, 0, 0))
        sock.setblocking(False)
        return sock, mmap.mmap(sock.fileno(), _V3_BLOCK_BYTES * _V3_BLOCKS)
    except BaseException:
        sock.close()
        raise


def _v2_reader(mm: mmap.mmap) -> Callable[[list[int]], None]:
    """Appends the send stamps of the frames the kernel handed over (tpacket2_hdr:
    tp_status at 0, tp_mac at 12), in fill order."""
    offsets = slot_offsets(RingSpec.for_headers())
    cursor = [0]

    def read(stamps: list[int]) -> None:
        k = cursor[0]
        while _U32.unpack_from(mm, offsets[k])[0] & TP_STATUS_USER:
            off = offsets[k]
            stamps.append(_TS.unpack_from(mm, off + _U16.unpack_from(mm, off + 12)[0]
                                          + OFF_TS_RETH)[0])
            _U32.pack_into(mm, off, 0)
            k = (k + 1) % len(offsets)
        cursor[0] = k
    return read


def _v3_reader(mm: mmap.mmap) -> Callable[[list[int]], None]:
    """The same for retired blocks (tpacket_block_desc: block_status, num_pkts,
    offset_to_first_pkt at 8; tpacket3_hdr: tp_next_offset at 0, tp_mac at 24)."""
    cursor = [0]

    def read(stamps: list[int]) -> None:
        b = cursor[0]
        while True:
            block = b * _V3_BLOCK_BYTES
            status, n, first = struct.unpack_from("III", mm, block + 8)
            if not status & TP_STATUS_USER:
                break
            p = block + first
            for _ in range(n):
                stamps.append(_TS.unpack_from(mm, p + _U16.unpack_from(mm, p + 24)[0]
                                              + OFF_TS_RETH)[0])
                p += _U32.unpack_from(mm, p)[0]
            _U32.pack_into(mm, block + 8, 0)
            b = (b + 1) % _V3_BLOCKS
        cursor[0] = b
    return read


def _send(sock: socket.socket, qp: QpTemplate, n: int, interval_ns: int, t0: int) -> None:
    """``n`` frames, one per ``interval_ns`` from ``t0``, each stamped as it leaves."""
    due = t0
    for psn in range(n):
        ahead = due - time.monotonic_ns()
        if ahead > 100_000:  # sleep most of the way, spin the rest: the stamps are exact
            time.sleep((ahead - 50_000) / 1e9)
        while time.monotonic_ns() < due:
            pass
        sock.send(qp.write(0, psn, time.monotonic_ns()))
        due += interval_ns


def packet_time_ns(scale: float) -> int:
    """A full frame's time at 400G, dilated by ``scale`` (wall ns)."""
    return round(8 * WIRE_FRAME_BYTES / _NIC_RATE_BPS * scale * 1e9)


def two_hosts() -> Fabric:
    """A two-host fabric whose links run as fast as the shaper holds, far faster than
    the frames: the ring alone is measured."""
    topo = build_topo("leafspine,1,1,2")
    fastest_bps = max(topo.linkInfo(a, b)["rate_bps"] for a, b in topo.links())
    return Fabric(topo, Scale(fastest_bps / MAX_EMULATED_RATE_BPS), marking="off")


def measure(fab: Fabric, ring: str, scale: float, frames: int, tov_ms: int) -> dict:
    """One ring's receive lag, wake-ups and CPU per frame at ``scale``."""
    src, dst = fab.hosts[:2]
    eg = fab.egress(src, dst)
    qp = QpTemplate(Flow(eg.src_mac, eg.dst_mac, eg.src_ip, eg.dst_ip, 0xC000, 1, ecn="ect0"),
                    MTU_PAYLOAD_BYTES)
    with in_netns(fab.netns_path(dst)):
        if ring == "v2":
            rx = open_rx_ring(RingSpec.for_headers())
            mm = mmap.mmap(rx.fileno(), RingSpec.for_headers().size_bytes)
            read = _v2_reader(mm)
        else:
            rx, mm = _open_v3_ring(tov_ms)
            read = _v3_reader(mm)
    with in_netns(fab.netns_path(src)):
        tx = open_tx_socket(eg.ifname)
    interval_ns = packet_time_ns(scale)
    ep = select.epoll()
    try:
        ep.register(rx.fileno(), select.EPOLLIN)
        t0 = time.monotonic_ns() + 20_000_000
        sender = threading.Thread(target=_send, args=(tx, qp, frames, interval_ns, t0))
        sender.start()
        lags: list[int] = []
        stamps: list[int] = []
        wakeups = 0
        cpu0 = time.thread_time()
        give_up = time.monotonic() + 5 + 2 * frames * interval_ns / 1e9
        while len(lags) < frames and time.monotonic() < give_up:
            ep.poll(0.1)
            wakeups += 1
            now = time.monotonic_ns()
            stamps.clear()
            read(stamps)
            lags.extend(now - s for s in stamps)
        cpu_s = time.thread_time() - cpu0
        sender.join()
    finally:
        ep.close()
        mm.close()
        rx.close()
        tx.close()
    lags.sort()
    got = max(len(lags), 1)
    return {"ring": ring, "scale": scale, "frames": len(lags), "bound_us": 2 * interval_ns / 1e3,
            "p50_us": lags[len(lags) // 2] / 1e3 if lags else float("nan"),
            "p99_us": lags[min(len(lags) - 1, int(0.99 * len(lags)))] / 1e3 if lags
            else float("nan"),
            "wakeups_per_frame": wakeups / got, "cpu_per_frame_us": cpu_s / got * 1e6}


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default="10000,4000", type=arg_type(parse_scales),
                    help="S values, ','-separated")
    ap.add_argument("--frames", type=arg_type(parse_int(1)), default=2000)
    ap.add_argument("--tov-ms", type=arg_type(parse_int(1)), default=1,
                    help="TPACKET_V3 block retire timeout (ms; the kernel's unit, 1 at least)")
    args = ap.parse_args()
    scales = args.scales
    run_s = 2 * args.frames * sum(packet_time_ns(x) for x in scales) / 1e9
    if run_s > _LONGEST_RUN_S:
        ap.error(f"{args.frames} frames at S = {','.join(f'{x:g}' for x in scales)} take {run_s:.0f} s of sending; "
                 f"at most {_LONGEST_RUN_S:.0f}: fewer --frames or a smaller S")
    table = Table(title="receive ring: TPACKET_V2 (the engine's) vs TPACKET_V3 blocks")
    for col in ("S", "ring", "frames", "p50 lag us", "p99 lag us", "p99 allowed us",
                "wakes/frame", "CPU/frame us"):
        table.add_column(col, justify="right")
    with two_hosts() as fab:
        for scale in scales:
            for ring in ("v2", "v3"):
                r = measure(fab, ring, scale, args.frames, args.tov_ms)
                table.add_row(f"{scale:g}", ring if ring == "v2" else f"v3 {args.tov_ms}ms",
                              str(r["frames"]), f"{r['p50_us']:.0f}", f"{r['p99_us']:.0f}",
                              f"{r['bound_us']:.0f}", f"{r['wakeups_per_frame']:.2f}",
                              f"{r['cpu_per_frame_us']:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()

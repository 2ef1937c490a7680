"""What a shaped port really carries, measured tightly (no emulator code in the path).

    python -m emu.wirerate [--rate 100M] [--duration 20] [--frame 4154] [--overhead 24]

One veth pair in scratch namespaces, the sender's egress shaped by ``emu.shaping``
exactly as a fabric port. A thread keeps the port backlogged with raw frames of
``frame_bytes`` (blocking sends: the socket's send buffer, not the queue, limits it, so
nothing is dropped). The receiving interface's own byte counter is read at the start
and end of a long interval, each read bracketed by two CLOCK_MONOTONIC reads (the clock
the shaper's timers run on). Bytes are exact; the interval lies between the inner and
outer bracket; the counter sits within one frame of the fluid byte count at any
instant. So the steady rate is known within

    [(dB - f) / dt_outer, (dB + f) / dt_inner]

``measure_burst_credit`` measures what a token bucket gives for free: starting from an
idle port, the bytes delivered after t seconds exceed R t by the bucket's initial
content, which a real link never sends faster than line rate.
"""

from __future__ import annotations

import argparse
import errno
import math
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from core.frame import FRAME_BYTES
from core.machinecpu import cpu_ticks, machine_busy, steal_s
from core.scaling import Scale
from core.units import parse_rate_bps
from emu.netns import in_netns
from emu.runs import NamespaceSet
from emu.shaping import MTU_BYTES, htb_burst_bytes, port_qdisc_stats, shape_port

ETHERTYPE = 0x88B5  # local experimental: the peer's stack ignores it
_SRC_MAC = bytes.fromhex("020000000001")
_DST_MAC = bytes.fromhex("020000000002")
#: A refused frame means a full queue: wait a little before the next.
_FULL_QUEUE_BACKOFF_S = 1e-4
_SO_SNDBUFFORCE = 32  # asm-generic/socket.h; Python does not export it (root may exceed wmem_max)


@dataclass(frozen=True)
class RateMeasurement:
    """Steady rate of a backlogged shaped port, counted in frame bytes (no FCS)."""

    configured_bps: float
    frame_bytes: int
    overhead_bytes: int
    measured_bps: float
    low_bps: float
    high_bps: float
    interval_s: float
    frames: int
    always_backlogged: bool
    drops: int
    machine_busy: float = 0.0  # fraction of all the machine's CPU time busy over the interval
    steal_s: float = 0.0       # CPU time the hypervisor took over the interval

    @property
    def expected_bps(self) -> float:
        """Frame-byte rate a shaper charging frame + overhead bytes at the configured rate gives."""
        return self.configured_bps * self.frame_bytes / (self.frame_bytes + self.overhead_bytes)

    @property
    def relative_error(self) -> float:
        return self.measured_bps / self.expected_bps - 1

    @property
    def relative_uncertainty(self) -> float:
        return max(self.high_bps - self.measured_bps, self.measured_bps - self.low_bps) / self.measured_bps


@dataclass(frozen=True)
class BurstCredit:
    """Bytes an idle shaped port delivered beyond R x elapsed, bracketed."""

    low_bytes: float
    high_bytes: float
    configured_burst_bytes: int
    machine_busy: float = 0.0  # fraction of all the machine's CPU time busy meanwhile
    steal_s: float = 0.0       # CPU time the hypervisor took meanwhile


def read_rx_bytes(ipr: Any, ifindex: int) -> tuple[int, int, int]:
    """(ns before, the interface's received frame bytes, ns after): one counter read,
    bracketed by CLOCK_MONOTONIC reads."""
    t0 = time.monotonic_ns()
    (link,) = ipr.get_links(ifindex)
    t1 = time.monotonic_ns()
    return t0, int(link.get_attr("IFLA_STATS64")["rx_bytes"]), t1


def start_sender(netns_path: str, ifname: str, frame: bytes, stop: threading.Event,
                 count: int | None = None, sndbuf_bytes: int | None = None,
                 started: list[int] | None = None) -> threading.Thread:
    """A thread sending raw ``frame`` out of ``ifname`` (``count`` times, or until
    ``stop``); it appends the monotonic time just before its first send to ``started``.

    Sends block while the socket's send buffer is full, so a buffer smaller than the
    port's queue keeps the port backlogged without drops, and a sender that stalls for
    less than the buffer's drain time leaves the link busy. A frame the full queue
    refuses (ENOBUFS) is not counted as sent."""
    with in_netns(netns_path):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((ifname, 0))
    if sndbuf_bytes:
        sock.setsockopt(socket.SOL_SOCKET, _SO_SNDBUFFORCE, sndbuf_bytes)

    def run() -> None:
        sent = 0
        if started is not None:
            started.append(time.monotonic_ns())
        try:
            while not stop.is_set() and (count is None or sent < count):
                try:
                    sock.send(frame)
                except OSError as e:  # the queue was full and dropped it: the port is busy
                    if e.errno != errno.ENOBUFS:
                        raise
                    time.sleep(_FULL_QUEUE_BACKOFF_S)
                    continue
                sent += 1
        finally:
            sock.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


class _Pair:
    """veth a0 (namespace a, shaped) -> b0 (namespace b), torn down on exit."""

    def __init__(self, rate_emu_bps: float, buffer_bytes: int, overhead_bytes: int) -> None:
        self.ns = NamespaceSet("wire-rate measurement")
        try:
            self.ipr_a = self.ns.create("a")
            self.ipr_b = self.ns.create("b")
            self.a0, self.b0 = self.ns.veth("a", "a0", "b", "b0", mtu=MTU_BYTES,
                                            mac_a=_SRC_MAC.hex(":"), mac_b=_DST_MAC.hex(":"))
            shape_port(self.ipr_a, self.a0, rate_emu_bps, buffer_bytes, overhead_bytes=overhead_bytes)
        except BaseException:
            self.ns.close()
            raise

    def rx_bytes(self) -> tuple[int, int, int]:
        """(ns before, received frame bytes, ns after): the counter read, bracketed."""
        return read_rx_bytes(self.ipr_b, self.b0)

    def sender(self, frame: bytes, stop: threading.Event, count: int | None = None,
               sndbuf_bytes: int | None = None, started: list[int] | None = None
               ) -> threading.Thread:
        return start_sender(self.ns.path("a"), "a0", frame, stop, count, sndbuf_bytes, started)

    def close(self) -> None:
        self.ns.close()


def _frame(frame_bytes: int) -> bytes:
    if frame_bytes < 60 or frame_bytes > MTU_BYTES + 14:
        raise ValueError(f"frame_bytes must be 60..{MTU_BYTES + 14}")
    return _DST_MAC + _SRC_MAC + ETHERTYPE.to_bytes(2, "big") + bytes(frame_bytes - 14)


def measure_shaped_rate(rate_emu_bps: float, frame_bytes: int = FRAME_BYTES, duration_s: float = 20.0,
                        warmup_s: float = 1.0, overhead_bytes: int = 0,
                        reads: int = 10) -> RateMeasurement:
    """Steady frame-byte rate of a backlogged port shaped to ``rate_emu_bps``."""
    pair = _Pair(rate_emu_bps, buffer_bytes=1 << 22, overhead_bytes=overhead_bytes)
    stop = threading.Event()
    try:
        thread = pair.sender(_frame(frame_bytes), stop)
        time.sleep(warmup_s)  # past the initial burst, the queue is full
        samples, backlogged, cpu0 = [], True, cpu_ticks()
        for i in range(reads + 1):
            samples.append(pair.rx_bytes())
            backlogged &= port_qdisc_stats(pair.ipr_a, pair.a0)["backlog_packets"] > 0
            if i < reads:
                time.sleep(duration_s / reads)
        drops = port_qdisc_stats(pair.ipr_a, pair.a0)["drops"]
        cpu1 = cpu_ticks()
        stop.set()
        thread.join(timeout=5)
    finally:
        stop.set()
        pair.close()
    (s0, b0, e0), (s1, b1, e1) = samples[0], samples[-1]
    d_bytes = b1 - b0
    inner_s, outer_s, mid_s = (s1 - e0) * 1e-9, (e1 - s0) * 1e-9, ((s1 + e1) - (s0 + e0)) / 2e9
    return RateMeasurement(
        rate_emu_bps, frame_bytes, overhead_bytes, 8 * d_bytes / mid_s,
        8 * (d_bytes - frame_bytes) / outer_s, 8 * (d_bytes + frame_bytes) / inner_s,
        mid_s, d_bytes // frame_bytes, backlogged, drops, machine_busy(cpu0, cpu1),
        steal_s(cpu0, cpu1))


def measure_burst_credit(rate_emu_bps: float, frame_bytes: int = FRAME_BYTES, frames: int = 200,
                         overhead_bytes: int = 0) -> BurstCredit:
    """Bytes delivered beyond R x elapsed by an idle port given ``frames`` at once,
    read half-way through the transfer (the bucket's initial content shows up then)."""
    pair = _Pair(rate_emu_bps, buffer_bytes=1 << 24, overhead_bytes=overhead_bytes)
    stop = threading.Event()
    wire = frame_bytes + overhead_bytes
    started: list[int] = []
    try:
        cpu0 = cpu_ticks()
        thread = pair.sender(_frame(frame_bytes), stop, count=frames,
                             sndbuf_bytes=frames * (frame_bytes + 1024), started=started)
        time.sleep(frames * wire * 8 / rate_emu_bps / 2)
        s, rx, e = pair.rx_bytes()
        cpu1 = cpu_ticks()
        start = started[0]  # before the first send: elapsed over-, credit underestimated
        thread.join(timeout=frames * wire * 8 / rate_emu_bps + 5)
    finally:
        stop.set()
        pair.close()
    frame_rate = rate_emu_bps / 8 * frame_bytes / wire  # frame bytes per second
    # rx lies within one frame of the fluid count; elapsed between (s - start) and (e - start).
    low = rx - frame_bytes - frame_rate * (e - start) * 1e-9
    high = rx + frame_bytes - frame_rate * (s - start) * 1e-9
    return BurstCredit(low, high, htb_burst_bytes(rate_emu_bps), machine_busy(cpu0, cpu1),
                       steal_s(cpu0, cpu1))


def capacity_bound_bps(rate_bps: float, wire_bytes: float, scale: Scale,
                       frame_bytes: int = MTU_BYTES + 14, busy_periods: int = 1) -> float:
    """The highest rate (bit/s, real) a shaped port can show for ``wire_bytes`` carried
    in ``busy_periods`` busy periods: R x X / (X - k (bucket + frame)).

    The shaper holds R exactly while backlogged (`measure_shaped_rate`; docs/validation.md); what it
    adds is an idle port's bucket plus one frame at the start of each busy period
    (`measure_burst_credit`). A measured rate above this bound is not the shaper's
    doing: the measurement is wrong, and the gate should mark the run invalid. ``rate_bps``
    is the real link rate, ``scale`` the dilation (bytes are not dilated).
    """
    if not rate_bps > 0 or busy_periods < 1:
        raise ValueError("rate_bps must be positive, busy_periods >= 1")
    free = busy_periods * (htb_burst_bytes(scale.rate_emu_bps(rate_bps)) + frame_bytes)
    if wire_bytes <= free:
        return math.inf
    return rate_bps * wire_bytes / (wire_bytes - free)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="100M", help="emulated rate, e.g. 4M, 100M (bit/s)")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--frame", type=int, default=FRAME_BYTES, help="frame bytes without FCS")
    ap.add_argument("--overhead", type=int, default=0, help="bytes the shaper adds per frame")
    args = ap.parse_args()
    rate = parse_rate_bps(args.rate)
    m = measure_shaped_rate(rate, args.frame, args.duration, overhead_bytes=args.overhead)
    print(f"steady: configured {rate:.6g} b/s, overhead {m.overhead_bytes} B/frame, expected "
          f"{m.expected_bps:.7g} frame-b/s; measured {m.measured_bps:.7g} "
          f"[{m.low_bps:.7g}, {m.high_bps:.7g}] over {m.interval_s:.2f} s ({m.frames} frames): "
          f"error {m.relative_error:+.4%} +/- {m.relative_uncertainty:.4%}; "
          f"backlogged {m.always_backlogged}, drops {m.drops}; machine "
          f"{m.machine_busy:.0%} busy, hypervisor steal {m.steal_s * 1e3:.0f} ms")
    b = measure_burst_credit(rate, args.frame, overhead_bytes=args.overhead)
    print(f"burst: idle port delivered {b.low_bytes:.0f}..{b.high_bytes:.0f} B beyond R x t "
          f"(HTB burst configured {b.configured_burst_bytes} B)")


if __name__ == "__main__":
    main()

"""Frames to a NIC's socket: data bursts, ACKs, NAKs and CNPs, and the backlog of what
the kernel pushed back.

ENOBUFS means the qdisc refused a frame, EAGAIN that the socket's share of the
queue is full: the frame is kept in the NIC's backlog, sent before anything else,
retried about a 1500-byte frame time later (the NIC's pacing slot fires for it).
While a NIC holds a backlog the compiled receive loop's replies on it wait too
(``blocked``, ``engine.rx.RxState.blocked``).
"""

from __future__ import annotations

import errno
import time
from typing import Any

from engine.books import Books
from engine.burst import Burst
from engine.sources import Nic
from traffic.int_telemetry import ack_with_int


class Handover:
    def __init__(self, books: Books, burst: Burst, blocked: Any = None):
        self.books = books
        self.burst = burst
        self.blocked = blocked

    def retry_at(self, nic: Nic, now: int) -> None:
        """Serve ``nic`` again about a 1500-byte frame after wall time ``now``."""
        retry = now + int(nic.ns_per_bit * 8 * 1500)
        armed = self.books.nic_armed(nic)
        if armed is None or armed > retry:
            self.books.arm_nic(nic, retry)

    def hand_over(self, nic: Nic, shape: Any, psn: int, n: int, now: int, ts_ns: int,
                  solicit: bool = False) -> int:
        """Give a burst stamped ``ts_ns`` to the NIC's socket at wall time ``now``, behind
        the frames the qdisc pushed back; what it refuses joins them, retried shortly.
        Returns frames taken. ``solicit`` sets AckReq on the burst's last frame."""
        burst = self.burst
        blocked = bool(nic.backlog) and not self.flush_backlog(nic)
        sent = 0 if blocked else burst.send(nic.sock, shape, psn, n, ts_ns, solicit)
        if blocked:  # built only: it waits behind the backlog
            burst.send(None, shape, psn, n, ts_ns, solicit)
        self.books.packets_sent += sent
        if sent < n:
            self.push_back(nic, [burst.frame(i) for i in range(sent, n)], counted=blocked)
            self.retry_at(nic, now)
        return sent

    def send_ctrl(self, nic: Nic, frame: bytes | bytearray, int_block: bytes = b"") -> None:
        """Send an ACK, NAK or CNP (an ACK echoing ``int_block``, if any); one the qdisc
        pushes back is kept and sent first."""
        if int_block:
            frame = ack_with_int(frame, int_block)
        if nic.backlog:
            self.push_back(nic, [bytes(frame)], counted=True)
            return
        try:
            nic.sock.send(frame)
        except OSError as e:
            if not (isinstance(e, BlockingIOError) or e.errno == errno.ENOBUFS):
                raise
            self.push_back(nic, [bytes(frame)], counted=False)
            self.books.arm_nic(nic, time.monotonic_ns() + int(nic.ns_per_bit * 8 * 1500))
            return
        self.books.packets_sent += 1
        self.books.ctrl_sent += 1

    def push_back(self, nic: Nic, frames: list[bytes], counted: bool) -> None:
        """Queue ``frames`` behind the NIC's backlog; ``counted``: the push-back was already."""
        if not counted:
            self.books.push_backs += 1
        nic.backlog.extend(frames)
        if self.blocked is not None:  # the C loop's replies wait too
            self.blocked[nic.slot] = 1

    def flush_backlog(self, nic: Nic) -> bool:
        """Send ``nic``'s backlog; False if the kernel still refuses some of it."""
        backlog = nic.backlog
        while backlog:
            try:
                nic.sock.send(backlog[0])
            except BlockingIOError:
                return False
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                return False
            backlog.pop(0)
            self.books.packets_sent += 1
        if self.blocked is not None:
            self.blocked[nic.slot] = 0
        return True

"""Batched receive in C: engine/csrc/roce_rx.c through ctypes.

``RxLib`` loads the compiled receive loop; ``RxState`` holds, per worker, the
responder state of every QP it receives (the C mirror of ``gbn.GbnReceiver``, or
of ``selective_repeat.SrReceiver`` for a QP registered with ``reorder_packets``; one
slot per QPN from ``core.frame.FIRST_QPN`` up) and the buffers one call fills.
``RxState.read`` reads up to a budget of frames from one host's ring and returns
how many; the events it
leaves in ``events[:n_events]`` are what Python must act on (ACKs, NAKs and CNPs
the C loop could not send, completed messages, the senders' ACK frames with their
echo and CNP frames), ``latency[:n_latency]`` the latency samples, 4 int64
each, and ``oldest_ns`` the arrival of the batch's first frame. The C loop writes
and sends each QP's ACKs, NAKs and CNPs on its reply socket (``add_qps``;
``ctrl_sent`` counts them) and decides the CNPs as ``dcqcn.NotificationPoint``
does; they come back as events only when the reply NIC is ``blocked`` or its
socket refuses them. Without clang the worker keeps its pure-Python receive path
(same counters, same frames).
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from core.errors import CapabilityError
from core.frame import (
    ACK_FRAME_BYTES,
    CNP_FRAME_BYTES,
    FIRST_QPN,
    INT_BLOCK_BYTES,
    INT_HEADER_BYTES,
    INT_RECORD_BYTES,
)
from emu.cbuild import compile_c
from traffic.selective_repeat import WINDOW_PACKETS

EV_ACK, EV_NAK, EV_CNP, EV_DONE, EV_ACK_IN, EV_CNP_IN, EV_UNKNOWN, EV_PENDING, EV_SR = \
    range(1, 10)
#: An EV_DONE the compiled loop acted on (roce_loop.c: it posted the local dependants)
#: that another worker waits for: Python announces it.
EV_ANNOUNCE = 0x101
#: Bits of an event's ``arg``: EV_ACK/EV_NAK complete and ECN echo; EV_ACK_IN the
#: AETH syndrome (low byte) and the ACK's BECN (ECN echo); EV_SR (a selective-repeat
#: ACK or NAK) the ECN echo, complete, and the AETH syndrome shifted by 8. An event's
#: ``msn`` is the AETH MSN of EV_SR and EV_ACK_IN.
ARG_COMPLETE, ARG_ECHO, ARG_BECN = 1, 2, 0x100
_EVENTS_PER_FRAME = 4       # an ACK flushed on a CE change, a CNP, a reply or pending, done
_PSN_MASK = 0xFFFFFF
_LATENCY_PER_FRAME = 4


class _RxQp(ctypes.Structure):
    _fields_ = [("host", ctypes.c_uint32), ("total", ctypes.c_uint32),
                ("coalesce", ctypes.c_uint32), ("expected", ctypes.c_uint32),
                ("since_ack", ctypes.c_uint32), ("nak_out", ctypes.c_uint32),
                ("ce_ack", ctypes.c_uint32), ("unreported", ctypes.c_uint32),
                ("echo", ctypes.c_uint32), ("ack_timer", ctypes.c_uint32),
                ("delivered", ctypes.c_uint64), ("duplicates", ctypes.c_uint64),
                ("out_of_order", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("ce", ctypes.c_uint64), ("seen", ctypes.c_uint64),
                ("first_rx_ns", ctypes.c_int64), ("done_ns", ctypes.c_int64),
                ("ack_fd", ctypes.c_int32), ("nic", ctypes.c_uint32),
                ("has_cnp", ctypes.c_uint32), ("cnps", ctypes.c_uint32),
                ("last_cnp_s", ctypes.c_double),
                ("selective", ctypes.c_uint32), ("reorder", ctypes.c_uint32),
                ("high", ctypes.c_uint32), ("nak_scan", ctypes.c_uint32),
                ("acked", ctypes.c_uint32),
                ("beyond", ctypes.c_uint64), ("got", ctypes.c_uint64 * (WINDOW_PACKETS // 64))]


class _RxEvent(ctypes.Structure):
    _fields_ = [("rx_ns", ctypes.c_int64), ("kind", ctypes.c_uint32), ("qpn", ctypes.c_uint32),
                ("psn", ctypes.c_uint32), ("arg", ctypes.c_uint32), ("msn", ctypes.c_uint32)]


class _RxCall(ctypes.Structure):
    _fields_ = [("ring", ctypes.c_void_p), ("offsets", ctypes.c_void_p),
                ("n_slots", ctypes.c_uint32), ("budget", ctypes.c_uint32),
                ("host", ctypes.c_uint32), ("sample_every", ctypes.c_uint32),
                ("idx", ctypes.c_void_p), ("rt_offset_ns", ctypes.c_int64),
                ("t0_ns", ctypes.c_int64), ("rx_count", ctypes.c_void_p),
                ("qps", ctypes.c_void_p), ("n_qps", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("ev", ctypes.c_void_p), ("n_ev", ctypes.c_void_p), ("lat", ctypes.c_void_p),
                ("n_lat", ctypes.c_void_p), ("intbuf", ctypes.c_void_p),
                ("blocked", ctypes.c_void_p), ("ack_tmpl", ctypes.c_void_p),
                ("cnp_tmpl", ctypes.c_void_p), ("ctrl_sent", ctypes.c_void_p),
                ("scale_ns", ctypes.c_double), ("cnp_interval_s", ctypes.c_double),
                ("oldest_ns", ctypes.c_void_p)]


def source() -> Path:
    return Path(__file__).resolve().parent / "csrc" / "roce_rx.c"


class RxQpSpec(NamedTuple):
    """A QP a host receives, and how its control frames go back."""

    qpn: int
    total_packets: int
    ack_coalesce: int
    fd: int             # the reply NIC's socket
    nic: int            # the reply NIC's index in RxState.blocked
    ack: bytes          # ACK prototype (ResponderTemplate.ack)
    cnp: bytes          # the CNP (ResponderTemplate.cnp)


class RxLib:
    """The compiled receive loop, or None-like (``available`` False) on 'python'/no clang."""

    def __init__(self, path: str = "auto"):
        self.lib: ctypes.CDLL | None = None
        self.detail = "python"
        if path == "python":
            return
        try:
            lib = ctypes.CDLL(str(compile_c(source(), "shared", what="the engine's receive loop")))
        except (CapabilityError, OSError) as e:
            if path == "compiled":
                raise CapabilityError(f"compiled receive loop unavailable: {e}") from e
            self.detail = f"python ({str(e).splitlines()[0]})"
            return
        lib.roce_rx_call.restype = ctypes.c_int
        lib.roce_rx_call.argtypes = [ctypes.c_void_p]
        lib.roce_ack_write.restype = ctypes.c_size_t
        lib.roce_ack_write.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32,
                                       ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int,
                                       ctypes.c_char_p]
        self.lib = lib
        self.detail = "batched ring reads, ACKs, NAKs and CNPs written and sent (compiled)"

    @property
    def available(self) -> bool:
        return self.lib is not None

    def ack_frame(self, ack: bytes, psn: int, syndrome: int, msn: int, echo: bool,
                  block: bytes = b"") -> bytes:
        """The reply the C loop sends: prototype ``ack`` (an ACK frame) with these fields
        and INT ``block`` (for tests against ``ResponderTemplate.write_ack``)."""
        assert self.lib is not None and len(ack) == ACK_FRAME_BYTES
        out = ctypes.create_string_buffer(ACK_FRAME_BYTES + INT_BLOCK_BYTES)
        n = self.lib.roce_ack_write(out, ack, psn, syndrome, msn, int(echo), block or None)
        return out.raw[:n]


@lru_cache(maxsize=8)
def _offsets_array(offsets: tuple[int, ...]) -> ctypes.Array:
    """The slot offsets as C reads them, one array per ring geometry."""
    return (ctypes.c_uint32 * len(offsets))(*offsets)


class RxRing:
    """One host's ring as the C loop sees it: base address, slot offsets, next slot."""

    def __init__(self, mm: mmap.mmap | bytearray, offsets: Sequence[int], host_id: int):
        self._keep = mm
        self.base = ctypes.addressof((ctypes.c_char * len(mm)).from_buffer(mm))
        self.offsets = _offsets_array(tuple(offsets))  # C only reads it: shared
        self.n_slots = len(offsets)
        self.idx = ctypes.c_uint32(0)
        self.host_id = host_id
        self.rx_count = ctypes.c_uint64(0)
        # RxState.read's argument block: (its key, the block, its address, the state).
        self.call: tuple[tuple[int, int, int], _RxCall, int, RxState] | None = None


class RxState:
    """Responder state of a worker's receive QPs and the buffers of one call."""

    def __init__(self, lib: RxLib, n_qpns: int, budget: int, n_nics: int, scale_ns: float,
                 cnp_interval_s: float):
        assert lib.lib is not None
        self._fn = lib.lib.roce_rx_call
        self.fn_address = ctypes.cast(self._fn, ctypes.c_void_p).value
        self.qps = (_RxQp * n_qpns)()
        self.n_qpns = n_qpns
        self.budget = budget
        self.events = (_RxEvent * (budget * _EVENTS_PER_FRAME))()
        self.latency = (ctypes.c_int64 * (budget * _LATENCY_PER_FRAME))()
        self.n_events = ctypes.c_uint32(0)
        self.n_latency = ctypes.c_uint32(0)
        # One INT block per event (roce_rx.c): what a reply echoes, what an ACK carried.
        self.int_blocks = ctypes.create_string_buffer(budget * _EVENTS_PER_FRAME * INT_BLOCK_BYTES)
        # The control frames C sends: each QPN's ACK and CNP prototypes, and per reply
        # NIC a flag the engine sets while that NIC holds frames pushed back (sent
        # before anything else). CNPs are decided in real seconds, as Python does.
        self.ack_tmpl = ctypes.create_string_buffer(n_qpns * ACK_FRAME_BYTES)
        self.cnp_tmpl = ctypes.create_string_buffer(n_qpns * CNP_FRAME_BYTES)
        self.scale_ns = scale_ns
        self.cnp_interval_s = cnp_interval_s
        self.blocked = (ctypes.c_uint8 * n_nics)()
        self.ctrl_sent = ctypes.c_uint64(0)
        # Arrival (monotonic ns) of the first frame of the last read: the oldest waiting.
        self.oldest_ns = ctypes.c_int64(0)

    def add_qps(self, host_id: int, qps: Iterable[RxQpSpec], ce_ack: bool = False,
                ack_timer: bool = False, reorder_packets: int | None = None) -> None:
        """Register the QPs host ``host_id`` receives; ``ce_ack``: ACK at once when the
        CE state changes (``gbn.GbnReceiver``); ``ack_timer``: report the first frame
        left waiting for its ACK (EV_PENDING); ``reorder_packets``: selective repeat
        (``selective_repeat.SrReceiver`` with that tolerance) instead of go-back-N."""
        for spec in qps:
            assert len(spec.ack) == ACK_FRAME_BYTES and len(spec.cnp) == CNP_FRAME_BYTES
            assert 0 <= spec.nic < len(self.blocked)
            q = self.qp(spec.qpn)
            at = spec.qpn - FIRST_QPN
            q.host, q.total, q.coalesce = host_id + 1, spec.total_packets, spec.ack_coalesce
            q.ce_ack, q.ack_timer = int(ce_ack), int(ack_timer)
            if reorder_packets is not None:
                q.selective, q.reorder = 1, reorder_packets
            q.first_rx_ns = q.done_ns = -1
            q.ack_fd, q.nic = spec.fd, spec.nic
            self.ack_tmpl[at * ACK_FRAME_BYTES:(at + 1) * ACK_FRAME_BYTES] = spec.ack
            self.cnp_tmpl[at * CNP_FRAME_BYTES:(at + 1) * CNP_FRAME_BYTES] = spec.cnp

    def qp(self, qpn: int) -> _RxQp:
        """The responder state of QPN ``qpn`` (slot ``qpn - FIRST_QPN``)."""
        if not 0 <= qpn - FIRST_QPN < self.n_qpns:
            raise IndexError(f"QPN {qpn:#x} has no slot")
        return self.qps[qpn - FIRST_QPN]

    def ack_pending(self, qpn: int) -> tuple[int, bool, int] | None:
        """The delayed ACK of ``qpn`` (``ack_pending`` of ``gbn.GbnReceiver`` or
        ``selective_repeat.SrReceiver`` on the C state): (PSN, ECN echo, MSN) of an ACK
        of everything delivered, or None if nothing waits."""
        q = self.qp(qpn)
        if not q.unreported:
            return None
        echo = bool(q.echo)
        q.since_ack = q.unreported = q.echo = 0
        q.acked = q.expected
        return (q.expected - 1) & _PSN_MASK, echo, (q.high - 1) & _PSN_MASK if q.selective else 0

    def int_block(self, k: int) -> bytes:
        """The INT block of event ``k`` of the last read (b'' if it had none)."""
        at = k * INT_BLOCK_BYTES
        hops = self.int_blocks[at][0]
        if not hops:
            return b""
        return self.int_blocks[at:at + INT_HEADER_BYTES + hops * INT_RECORD_BYTES]

    def read(self, ring: RxRing, rt_offset_ns: int, t0_ns: int, sample_every: int) -> int:
        """Read a batch from ``ring``: frames read (events and samples as above)."""
        return self._fn(self.call_address(ring, rt_offset_ns, t0_ns, sample_every))

    def call_address(self, ring: RxRing, rt_offset_ns: int, t0_ns: int,
                     sample_every: int) -> int:
        """The address of ``ring``'s argument block for roce_rx_call (built once)."""
        key = (rt_offset_ns, t0_ns, sample_every)
        call = ring.call
        if call is None or call[0] != key or call[3] is not self:
            def at(obj: object) -> int:
                return ctypes.addressof(obj)  # type: ignore[arg-type]

            c = _RxCall(ring.base, at(ring.offsets), ring.n_slots, self.budget, ring.host_id,
                        sample_every, at(ring.idx), rt_offset_ns, t0_ns, at(ring.rx_count),
                        at(self.qps), self.n_qpns, 0, at(self.events), at(self.n_events),
                        at(self.latency), at(self.n_latency), at(self.int_blocks),
                        at(self.blocked), at(self.ack_tmpl), at(self.cnp_tmpl),
                        at(self.ctrl_sent), self.scale_ns, self.cnp_interval_s,
                        at(self.oldest_ns))
            call = ring.call = (key, c, at(c), self)
        return call[2]

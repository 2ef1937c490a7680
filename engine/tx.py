"""The compiled sender's state, through ctypes: engine/csrc/roce_tx.c.

``TxGbn`` and ``TxSched`` hold the fields of ``gbn.GbnSender`` and
``pacing.Schedule`` in C memory, so that compiled code can take packets and book
schedules per burst while Python acts on the rarer events (ACKs, NAKs, timers) with
the pure classes' own methods, lent to these structs: one implementation of each
rule in Python, and in C only what runs per burst (``TxLib``). ``TxSr`` does the
same for ``selective_repeat.SrSender``; ``attach`` puts either transport's sender
into a compiled QP. Without clang the engine keeps the pure-Python sender.
"""

from __future__ import annotations

import ctypes
import math
from array import array
from pathlib import Path
from typing import Any

from core.errors import CapabilityError
from core.frame import WIRE_OVERHEAD_BYTES
from emu.cbuild import compile_c
from traffic import gbn
from traffic.gbn import RequesterCounters
from traffic.pacing import Schedule
from traffic.selective_repeat import WINDOW_PACKETS
from traffic.sr_sender import SrSender


def _nan_for_none(value: float | None) -> float:
    """C's "not armed" for a time: NaN."""
    return math.nan if value is None else value


def optional_time(raw: str) -> property:
    """A time that may be unset (None), kept in the C field ``raw`` as NaN."""

    def get(self: Any) -> float | None:
        t = getattr(self, raw)
        return None if t != t else t

    def set_(self: Any, value: float | None) -> None:
        setattr(self, raw, _nan_for_none(value))

    return property(get, set_)


class TxGbn(RequesterCounters, ctypes.Structure):
    """A ``gbn.GbnSender`` in C memory (its methods, these fields)."""

    _fields_ = [("total_packets", ctypes.c_int64), ("window", ctypes.c_int64),
                ("timeout_s", ctypes.c_double), ("start_psn", ctypes.c_int64),
                ("_una", ctypes.c_int64), ("_nxt", ctypes.c_int64),
                ("_max_sent", ctypes.c_int64), ("_timer_start_raw", ctypes.c_double),
                ("packets_sent", ctypes.c_int64), ("retransmitted", ctypes.c_int64),
                ("naks", ctypes.c_int64), ("timeouts", ctypes.c_int64),
                ("acks", ctypes.c_int64), ("stale_acks", ctypes.c_int64)]
    # Go-back-N has no time-based loss detector and no tail-loss probe (GbnSender's zeros).
    rack_losses = 0
    probes = 0

    @classmethod
    def new(cls, total_packets: int, window: int | None = None, timeout_s: float = 1e-3,
            start_psn: int = 0) -> TxGbn:
        """Checked as ``GbnSender`` checks its arguments."""
        return cls.of(gbn.GbnSender(total_packets, window, timeout_s, start_psn))

    @classmethod
    def of(cls, g: gbn.GbnSender) -> TxGbn:
        """A copy of ``g``'s whole state."""
        start = g._timer_start_s
        return cls(g.total_packets, g.window, g.timeout_s, g.start_psn, g._una, g._nxt,
                   g._max_sent, math.nan if start is None else start, g.packets_sent,
                   g.retransmitted, g.naks, g.timeouts, g.acks, g.stale_acks)

    _timer_start_s = optional_time("_timer_start_raw")


class TxSr(RequesterCounters, ctypes.Structure):
    """A ``selective_repeat.SrSender`` in C memory (its methods, these fields)."""

    _fields_ = [("total_packets", ctypes.c_int64), ("window", ctypes.c_int64),
                ("timeout_s", ctypes.c_double), ("start_psn", ctypes.c_int64),
                ("_una", ctypes.c_int64), ("_nxt", ctypes.c_int64),
                ("_lost_count", ctypes.c_int64), ("_rtx", ctypes.c_int64),
                ("_heard", ctypes.c_int64), ("_timer_nxt", ctypes.c_int64),
                ("_timer_start_raw", ctypes.c_double),
                ("packets_sent", ctypes.c_int64), ("retransmitted", ctypes.c_int64),
                ("naks", ctypes.c_int64), ("timeouts", ctypes.c_int64),
                ("acks", ctypes.c_int64), ("stale_acks", ctypes.c_int64),
                ("_lost", ctypes.c_uint64 * (WINDOW_PACKETS // 64)),
                ("reorder_s", ctypes.c_double), ("_rack_s", ctypes.c_double),
                ("_rack_due_raw", ctypes.c_double), ("rack_losses", ctypes.c_int64),
                ("_sent_s", ctypes.c_double * WINDOW_PACKETS),
                ("_resent", ctypes.c_uint64 * (WINDOW_PACKETS // 64)),
                ("srtt_s", ctypes.c_double), ("_probe_due_raw", ctypes.c_double),
                ("probes", ctypes.c_int64)]

    @classmethod
    def new(cls, total_packets: int, window: int | None = None, timeout_s: float = 1e-3,
            start_psn: int = 0, reorder_s: float | None = None) -> TxSr:
        """Checked as ``SrSender`` checks its arguments."""
        return cls.of(SrSender(total_packets, window, timeout_s, start_psn, reorder_s))

    #: The ring and bitmaps, copied only when not all zero (as a fresh sender's are):
    #: building a 1,024-double ctypes array from a list costs about 60 us, and every
    #: message of an all-to-all starts one (8,000 per worker on fattree,8).
    _ARRAYS = (("_lost", "Q"), ("_sent_s", "d"), ("_resent", "Q"))

    @classmethod
    def of(cls, s: SrSender) -> TxSr:
        """A copy of ``s``'s whole state."""
        view = cls(total_packets=s.total_packets, window=s.window, timeout_s=s.timeout_s,
                   start_psn=s.start_psn, _una=s._una, _nxt=s._nxt, _lost_count=s._lost_count,
                   _rtx=s._rtx, _heard=s._heard, _timer_nxt=s._timer_nxt,
                   _timer_start_raw=_nan_for_none(s._timer_start_s),
                   packets_sent=s.packets_sent, retransmitted=s.retransmitted, naks=s.naks,
                   timeouts=s.timeouts, acks=s.acks, stale_acks=s.stale_acks,
                   reorder_s=s.reorder_s, _rack_s=s._rack_s,
                   _rack_due_raw=_nan_for_none(s._rack_due_s), rack_losses=s.rack_losses,
                   srtt_s=s.srtt_s, _probe_due_raw=_nan_for_none(s._probe_due_s),
                   probes=s.probes)
        for name, code in cls._ARRAYS:
            values = getattr(s, name)
            if any(values):  # ctypes zero-fills the rest
                data = array(code, values)
                ctypes.memmove(ctypes.addressof(view) + getattr(cls, name).offset,
                               data.buffer_info()[0], len(data) * data.itemsize)
        return view

    _timer_start_s = optional_time("_timer_start_raw")
    _rack_due_s = optional_time("_rack_due_raw")
    _probe_due_s = optional_time("_probe_due_raw")


class TxSched(ctypes.Structure):
    """A ``pacing.Schedule`` in C memory (its methods, these fields)."""

    _fields_ = [("next_ns", ctypes.c_int64), ("max_catchup_ns", ctypes.c_int64),
                ("resets", ctypes.c_int64), ("dropped_ns", ctypes.c_int64)]


def _lend(cls: type, to: type, names: tuple[str, ...]) -> None:
    for name in names:
        setattr(to, name, cls.__dict__[name])


_lend(gbn.GbnSender, TxGbn, ("done", "acked_packets", "in_flight", "deadline_s", "psn_of",
                             "next_to_send", "next_index", "take", "on_ack", "on_nak",
                             "advance", "on_timeout", "_progress", "_go_back_on_timeout"))
_lend(gbn.GbnSender, TxGbn, ("on_reply", "resending"))
_lend(SrSender, TxSr, ("done", "acked_packets", "in_flight", "deadline_s", "psn_of",
                       "next_index", "next_to_send", "take", "on_reply", "on_ack", "on_nak",
                       "resending",
                       "advance", "on_timeout", "_arm", "_hear", "_mark", "_progress", "_rack",
                       "_rack_lost", "_arm_probe", "_probe"))
_lend(Schedule, TxSched, ("restart", "sent"))


def attach(c: TxQp, sender: gbn.GbnSender | SrSender) -> TxGbn | TxSr:
    """Move ``sender``'s state into the compiled sender's QP ``c``: the struct to use as
    the QP's sender from now on (``c.sr`` set for selective repeat)."""
    if isinstance(sender, SrSender):
        view = TxSr.of(sender)
        c.sr = ctypes.pointer(view)
        return view
    c.gbn = TxGbn.of(sender)
    return c.gbn


def source() -> Path:
    return Path(__file__).resolve().parent / "csrc" / "roce_tx.c"


class TxLib:
    """roce_tx.c's per-burst functions."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(str(compile_c(source(), "shared", what="the engine's compiled sender")))
        lib.tx_gbn_take.restype = ctypes.c_int64
        lib.tx_gbn_take.argtypes = [ctypes.POINTER(TxGbn), ctypes.c_double, ctypes.c_int64,
                                    ctypes.POINTER(ctypes.c_uint32)]
        lib.tx_gbn_ack.restype = ctypes.c_int64
        lib.tx_gbn_ack.argtypes = [ctypes.POINTER(TxGbn), ctypes.c_uint32, ctypes.c_double]
        lib.tx_sr_take.restype = ctypes.c_int64
        lib.tx_sr_take.argtypes = [ctypes.POINTER(TxSr), ctypes.c_double, ctypes.c_int64,
                                   ctypes.POINTER(ctypes.c_uint32)]
        lib.tx_sr_next_index.restype = ctypes.c_int64
        lib.tx_sr_next_index.argtypes = [ctypes.POINTER(TxSr)]
        lib.tx_rp_on_bytes_sent.restype = None
        lib.tx_rp_on_bytes_sent.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_double]
        lib.tx_dctcp_on_ack.restype = None
        lib.tx_dctcp_on_ack.argtypes = [ctypes.c_void_p, ctypes.c_double, ctypes.c_double,
                                        ctypes.c_double]
        lib.tx_timely_on_ack.restype = None
        lib.tx_timely_on_ack.argtypes = [ctypes.c_void_p, ctypes.c_double]
        lib.tx_cc_start.restype = None
        lib.tx_cc_start.argtypes = [ctypes.c_void_p, ctypes.c_double,
                                    ctypes.POINTER(ctypes.c_double)]
        lib.tx_sched_restart.restype = None
        lib.tx_sched_restart.argtypes = [ctypes.POINTER(TxSched), ctypes.c_int64]
        lib.tx_sched_sent.restype = None
        lib.tx_sched_sent.argtypes = [ctypes.POINTER(TxSched), ctypes.c_int64, ctypes.c_int64,
                                      ctypes.c_int64]
        lib.tx_service.restype = ctypes.c_int
        lib.tx_service.argtypes = [ctypes.c_void_p]
        lib.tx_close_period.restype = None
        lib.tx_close_period.argtypes = [ctypes.c_void_p]
        self.close_period = lib.tx_close_period
        lib.tx_wire_overhead.restype = ctypes.c_int64
        if lib.tx_wire_overhead() != WIRE_OVERHEAD_BYTES:
            raise CapabilityError("roce_tx.c's Ethernet overhead differs from core.frame's")
        self.lib = lib
        lib.tx_release.restype = ctypes.c_int
        lib.tx_release.argtypes = [ctypes.c_void_p]
        self.service = lib.tx_service
        self.service_address = ctypes.cast(lib.tx_service, ctypes.c_void_p).value
        self.release = lib.tx_release
        self.release_address = ctypes.cast(lib.tx_release, ctypes.c_void_p).value

    def take(self, g: TxGbn | TxSr, now_s: float, max_count: int) -> tuple[int, int] | None:
        psn = ctypes.c_uint32()
        fn = self.lib.tx_sr_take if isinstance(g, TxSr) else self.lib.tx_gbn_take
        n = fn(ctypes.byref(g), now_s, max_count, ctypes.byref(psn))
        return (psn.value, n) if n else None

    def ack(self, g: TxGbn, psn: int, now_s: float) -> bool:
        """roce_tx.h's gbn_on_ack, which the compiled loop acts with."""
        return bool(self.lib.tx_gbn_ack(ctypes.byref(g), psn, now_s))

    def next_index(self, s: TxSr) -> int:
        return self.lib.tx_sr_next_index(ctypes.byref(s))

    def rp_on_bytes_sent(self, rp: ctypes.Structure, n_bytes: int, now_s: float) -> None:
        """dcqcn_rp.h's rp_on_bytes_sent (``rp``: an engine.ccview.TxRp), which
        tx_service calls after each burst."""
        self.lib.tx_rp_on_bytes_sent(ctypes.byref(rp), n_bytes, now_s)

    def dctcp_on_ack(self, d: ctypes.Structure, bytes_acked: int, rtt_s: float,
                     now_s: float) -> None:
        """dctcp_cc.h's dctcp_on_ack (``d``: an engine.ccview.TxDctcp), with which the
        compiled loop acts on an ACK without an ECN echo."""
        self.lib.tx_dctcp_on_ack(ctypes.byref(d), bytes_acked, rtt_s, now_s)

    def timely_on_ack(self, t: ctypes.Structure, rtt_s: float) -> None:
        """timely_cc.h's timely_on_ack (``t``: an engine.ccview.TxTimely), with which the
        compiled loop acts on an ACK without an ECN echo."""
        self.lib.tx_timely_on_ack(ctypes.byref(t), rtt_s)

    def cc_start(self, qp: TxQp, start_s: float) -> tuple[float, float, float]:
        """roce_tx.h's cc_start: ``qp``'s twin started at ``start_s``; its trace()."""
        out = (ctypes.c_double * 3)()
        self.lib.tx_cc_start(ctypes.byref(qp), start_s, out)
        return out[0], out[1], out[2]

    def restart(self, s: TxSched, now_ns: int) -> None:
        self.lib.tx_sched_restart(ctypes.byref(s), now_ns)

    def sent(self, s: TxSched, now_ns: int, n: int, step_ns: int) -> None:
        self.lib.tx_sched_sent(ctypes.byref(s), now_ns, n, step_ns)


class TxHeld(ctypes.Structure):
    """A decided burst in a compiled delay line (roce_tx.h: struct tx_held)."""

    _fields_ = [("release_ns", ctypes.c_int64), ("lag", ctypes.c_int64), ("step", ctypes.c_int64),
                ("qp", ctypes.c_int32), ("psn", ctypes.c_uint32), ("count", ctypes.c_int32),
                ("which", ctypes.c_int16), ("solicit", ctypes.c_int16)]


class TxLine(ctypes.Structure):
    """A NIC's delay line for its QPs of one path delay (roce_tx.h: struct tx_line):
    a ring of ``TxHeld`` in release order, grown by Python when full (TX_GROW)."""

    _fields_ = [("delay_ns", ctypes.c_int64), ("cap", ctypes.c_int64), ("head", ctypes.c_int64),
                ("n", ctypes.c_int64), ("ring", ctypes.POINTER(TxHeld))]


def line_ring(line: TxLine, bursts: int, old: ctypes.Array | None = None) -> ctypes.Array:
    """Give ``line`` a ring of ``bursts`` bursts, the ones in its ring ``old`` (if any)
    moved to the start in release order; returns the ring, for the caller to keep."""
    ring = (TxHeld * bursts)()
    if old is not None:
        size = ctypes.sizeof(TxHeld)
        head, n = line.head, line.n
        if n > bursts:
            raise ValueError(f"a ring of {bursts} bursts cannot hold the line's {n}")
        first = min(n, line.cap - head)
        ctypes.memmove(ring, ctypes.addressof(old) + head * size, first * size)
        ctypes.memmove(ctypes.addressof(ring) + first * size, old, (n - first) * size)
    line.ring = ctypes.cast(ring, ctypes.POINTER(TxHeld))
    line.cap = bursts
    line.head = 0
    return ring


class TxQp(ctypes.Structure):
    """One sending QP as tx_service sees it."""

    _fields_ = [("gbn", TxGbn), ("sched", TxSched),
                ("rate_bps", ctypes.c_double), ("window_bytes", ctypes.c_double),
                # Each its _CShape's address (Burst.shape_address), kept alive by the Burst.
                ("shape", ctypes.c_void_p * 3), ("bits", ctypes.c_int64 * 3),
                ("tx_ns", ctypes.POINTER(ctypes.c_int64)),
                ("bytes_sent", ctypes.c_int64), ("first_tx_ns", ctypes.c_int64),
                ("last_tx_ns", ctypes.c_int64), ("next_trace_ns", ctypes.c_int64),
                ("calls_on_send", ctypes.c_int64), ("line_ns", ctypes.c_int64),
                ("sr", ctypes.POINTER(TxSr)), ("line", ctypes.POINTER(TxLine)),
                ("idle", ctypes.c_int64),
                # Its algorithm's C twin (engine.ccview: a TxRp, TxDctcp or TxTimely,
                # which its algorithm object keeps alive), or None.
                ("rp", ctypes.c_void_p), ("dctcp", ctypes.c_void_p),
                ("timely", ctypes.c_void_p),
                ("size_bytes", ctypes.c_int64)]


class TxNic(ctypes.Structure):
    """One NIC as tx_service sees it: its schedule, busy-period books, busy QPs."""

    _fields_ = [("sched", TxSched), ("fd", ctypes.c_int64), ("fwd_ns", ctypes.c_int64),
                ("ns_per_bit", ctypes.c_double),
                ("period_start", ctypes.c_int64), ("period_first_out", ctypes.c_int64),
                ("period_dropped", ctypes.c_int64), ("ideal_end", ctypes.c_int64),
                ("actual_end", ctypes.c_int64), ("bits_sent", ctypes.c_int64),
                ("n_active", ctypes.c_int64), ("active", ctypes.POINTER(ctypes.c_int32)),
                ("n_lines", ctypes.c_int64), ("lines", ctypes.POINTER(TxLine)),
                ("line_due", ctypes.c_int64), ("rate_period_ns", ctypes.c_double),
                ("busy_ns", ctypes.c_int64), ("ideal_ns", ctypes.c_int64),
                ("dropped_ns", ctypes.c_int64)]


class TxCall(ctypes.Structure):
    """tx_service's argument block: inputs, the worker's counters, and its answer."""

    _fields_ = [("nic", ctypes.c_void_p), ("qps", ctypes.POINTER(TxQp)),
                ("buf", ctypes.c_void_p), ("lags", ctypes.POINTER(ctypes.c_int64)),
                ("lags_cap", ctypes.c_int64), ("n_lags", ctypes.c_int64),
                ("lag_total_ns", ctypes.c_int64),
                ("now", ctypes.c_int64), ("horizon", ctypes.c_int64), ("t0", ctypes.c_int64),
                ("scale_ns", ctypes.c_double),
                ("payload_bytes", ctypes.c_int64), ("max_catchup_ns", ctypes.c_int64),
                ("data_sent", ctypes.c_int64), ("packets_sent", ctypes.c_int64),
                ("qp", ctypes.c_int64), ("arm_ns", ctypes.c_int64), ("count", ctypes.c_int64),
                ("sent", ctypes.c_int64), ("sent_bytes", ctypes.c_int64),
                ("frame_len", ctypes.c_int64), ("err", ctypes.c_int64),
                ("t_real", ctypes.c_double),
                ("hold", ctypes.c_int64), ("which", ctypes.c_int64), ("psn", ctypes.c_int64),
                ("lag", ctypes.c_int64), ("step", ctypes.c_int64), ("solicit", ctypes.c_int64),
                ("build_only", ctypes.c_int64)]


#: tx_service's answers (roce_tx.c).
TX_EMPTY, TX_ARM, TX_IDLE, TX_AFTER, TX_LAGS, TX_ERROR, TX_GROW = range(7)

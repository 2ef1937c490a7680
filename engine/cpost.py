"""Posting messages in the compiled loop: csrc/roce_loop.c's ``struct posts``.

``CompiledPosting`` is ``engine.requester.Posting`` with its counters in C: the
dependency counters of a worker's senders, by sender slot, counted down by the
completions its rings read (in C) and by those other workers announce (``completed``,
here); a message whose last dependency completed waits in the loop's control line
until its post time. C then starts it itself when its congestion control is off
(``CcFactory.is_off``: nothing for an algorithm to act on) or has a C twin
(DCQCN, DCTCP: ``engine.ccview``; its timers and windows start with the QP) and
its transport is go-back-N, whose state is made at set-up, and it acts on the QP's
cumulative ACKs (with the twin) and retransmission timer too (roce_loop.c's docs):
no return to Python per message.
Python starts the others (``start``, on the loop's LOOP_START), and keeps the books
of the starts C made in batches (``drain``: each start's lag behind its post time,
the rate trace's first row, with the algorithm's state C saw at the start). The
count of wholly acknowledged messages is C's (``acked_here``); Python adds those it
saw (``acked``).
"""

from __future__ import annotations

import ctypes
from typing import Any

from engine.books import NEVER_NS, Books
from engine.ccview import has_c_twin
from engine.csend import CompiledSendPath
from engine.plan import starts_at_t0
from engine.requester import Requester, publish_acked
from engine.sources import SendQp

_I64 = ctypes.c_int64
#: Starts C makes before Python keeps their books; the loop also hands them over when
#: it would sleep, in time it would sleep away. A start's books took 17 us of Python
#: under cProfile (fattree,8 ring), so a full buffer holds the loop up a few hundred
#: us at most, under fattree,8's lag limit at S = 8000 (1.34 ms); drained only at
#: housekeeping (every 50 ms), a worker's starts meanwhile held it up for milliseconds.
_STARTS_KEPT = 32


class _PostQp(ctypes.Structure):
    """roce_loop.c's struct post_qp."""

    _fields_ = [(name, _I64) for name in ("post_ns", "earliest_ns", "gap_ns", "deps", "msg",
                                          "nic", "fwd_ns", "by_c", "started", "acked_ns",
                                          "rto_ns")]


class _Posts(ctypes.Structure):
    """roce_loop.c's struct posts."""

    _fields_ = [("qp", ctypes.POINTER(_PostQp)), ("sender", ctypes.POINTER(ctypes.c_int32)),
                ("kids_at", ctypes.POINTER(_I64)), ("kids", ctypes.POINTER(ctypes.c_int32)),
                ("remote", ctypes.POINTER(ctypes.c_uint8)), ("received", ctypes.c_void_p),
                ("done", ctypes.POINTER(ctypes.c_uint8)),
                ("overhead_ns", _I64), ("trace_ns", _I64),
                ("started", ctypes.POINTER(_I64)), ("started_cap", _I64), ("n_started", _I64),
                ("scale_ns", ctypes.c_double), ("acked", ctypes.POINTER(_I64)),
                ("worker", _I64), ("acked_here", _I64), ("n_senders", _I64),
                ("wake_fds", ctypes.POINTER(ctypes.c_int32)), ("n_workers", _I64),
                ("started_trace", ctypes.POINTER(ctypes.c_double))]


def _c_acts(books: Books) -> bool:
    """The worker's congestion control leaves C nothing to call Python for: off, or
    with a C twin (the same for every QP of the run: asked once, not per QP)."""
    cc = books.plan.cc
    return cc.is_off or has_c_twin(cc)


def _c_starts(qp: SendQp) -> bool:
    """C may start ``qp`` (its algorithm allowing): go-back-N's state made at set-up."""
    return qp.c is not None and bool(qp.c.tx_ns)


class CompiledPosting:
    """The posting of ``requester``'s senders in the compiled loop ``loop`` (module doc)."""

    def __init__(self, lib: Any, loop: Any, requester: Requester, path: CompiledSendPath):
        self.lib = lib
        self.loop = loop
        self.requester = requester
        self.books = books = requester.books
        plan = books.plan
        senders = self.senders = requester.senders
        n_msgs = max(1, plan.n_messages)
        self.qps = (_PostQp * max(1, len(senders)))()
        self.sender = (ctypes.c_int32 * n_msgs)(*([-1] * n_msgs))
        kids: list[list[int]] = [[] for _ in range(n_msgs)]
        c_acts = _c_acts(books)
        for qp in senders:
            deps = set(qp.plan.deps)  # a dependency listed twice counts once (DepCounter)
            for d in deps:
                kids[d].append(qp.slot)
            self.sender[qp.plan.index] = qp.slot
            by_c = c_acts and _c_starts(qp)
            self.qps[qp.slot] = _PostQp(
                post_ns=-1, earliest_ns=qp.plan.start_emu_ns,  # t0 added at ``ready``
                gap_ns=qp.plan.gap_emu_ns, deps=len(deps), msg=qp.plan.index,
                nic=qp.nic.slot, fwd_ns=qp.nic.fwd_ns, by_c=by_c, acked_ns=-1,
                rto_ns=NEVER_NS)
            if by_c:  # its algorithm and transport now: C starts it without Python
                qp.cc = plan.cc(qp.nic.rate_bps, 0.0, qp.plan.base_rtt_s, qp.plan.hops)
                path.begin(qp, 0)
        self.kids_at = (_I64 * (n_msgs + 1))()
        for m, ks in enumerate(kids):
            self.kids_at[m + 1] = self.kids_at[m] + len(ks)
        self.kids = (ctypes.c_int32 * max(1, self.kids_at[n_msgs]))(*(k for ks in kids for k in ks))
        self.remote = (ctypes.c_uint8 * n_msgs)(*(1 if plan.notify.get(m) else 0
                                                  for m in range(n_msgs)))
        self.done = (ctypes.c_uint8 * n_msgs)()
        self.started = (_I64 * (2 * _STARTS_KEPT))()
        self.started_trace = (ctypes.c_double * (3 * _STARTS_KEPT))()
        shared = books.shared
        self.wake_fds = (ctypes.c_int32 * len(shared.wake_fds))(*shared.wake_fds)
        self.c = _Posts(qp=self.qps, sender=self.sender, kids_at=self.kids_at, kids=self.kids,
                        remote=self.remote, received=ctypes.addressof(shared.received),
                        done=self.done, overhead_ns=requester.overhead_ns,
                        trace_ns=books.trace_ns, started=self.started,
                        started_cap=len(self.started), scale_ns=books.scale_ns,
                        acked=ctypes.cast(shared.acked, ctypes.POINTER(_I64)),
                        worker=plan.worker, n_senders=len(senders), wake_fds=self.wake_fds,
                        n_workers=len(self.wake_fds),
                        started_trace=self.started_trace)
        self.addr = ctypes.addressof(self.c)

    def ready(self) -> None:
        """``Posting.ready``: before ``t0``, those posted at ``t0`` itself started now by
        Python, the others into the loop's control line until their start time."""
        books = self.books
        for qp in self.senders:
            if qp.plan.deps:
                continue
            post = books.t0_ns + qp.plan.start_emu_ns
            if starts_at_t0(qp.plan):
                qp.post_ns = post
                self.qps[qp.slot].post_ns = post
                self.qps[qp.slot].started = True
                self.requester.start(qp, post)
            else:
                self._check(self.lib.post_at(self.loop, qp.slot, post))
        for p in self.qps:  # the start times count from the clock's start
            p.earliest_ns += books.t0_ns

    def completed(self, index: int, done_ns: int, now: int) -> None:
        """``Posting.completed``, for a completion another worker announced."""
        self._check(self.lib.post_done(self.loop, index, done_ns))

    def start(self, index: int, now: int) -> None:
        """Message ``index`` is due to start and is Python's to start (LOOP_START, at
        wall time ``now``)."""
        qp = self.requester.by_index[index]
        qp.post_ns = self.qps[qp.slot].post_ns
        self.requester.start(qp, now - qp.nic.fwd_ns)

    def drain(self) -> None:
        """The books of the starts C made: ``Requester.start``'s, at their times."""
        n = self.c.n_started
        if not n:
            return
        books = self.books
        senders = self.senders
        started = self.started
        trace = self.started_trace
        lags = books.start_lags
        for k in range(0, n, 2):
            qp = senders[started[k]]
            now = started[k + 1]
            qp.post_ns = qp.start_ns = post = self.qps[qp.slot].post_ns
            lags.append(now - post)
            rate, target, alpha = trace[3 * k // 2:3 * k // 2 + 3]
            # NaN: no twin, the algorithm's state is as it started (off: constant)
            books.trace_row(qp, now, values=None if rate != rate else (rate, target, alpha))
        self.c.n_started = 0

    def acked(self) -> None:
        """``Posting.acked``: one more message wholly acknowledged, counted with those C
        saw (``acked_here``)."""
        self.c.acked_here += 1
        publish_acked(self.books, self.c.acked_here, len(self.senders))

    def finish(self) -> None:
        """The run is over: when the messages C saw acknowledged were."""
        for qp in self.senders:
            acked_ns = self.qps[qp.slot].acked_ns
            if acked_ns >= 0 and qp.acked_ns < 0:
                qp.acked_ns = acked_ns

    @staticmethod
    def _check(answer: int) -> None:
        if answer:
            raise MemoryError("the compiled loop's control line cannot grow")

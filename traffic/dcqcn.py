"""DCQCN as pure state machines: the reaction point (sender) and notification point.

Reference: Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
SIGCOMM 2015 (the "paper"), plus the ConnectX firmware knobs of the same algorithm
(``rpg_*``, ``dce_tcp_*``, ``clamp_tgt_rate*``, ``min_time_between_cnps``).

Everything here is in **real-fabric** units (seconds, bit/s, bytes) and takes the
current time as an argument; nothing reads a clock. The engine feeds real time
(emulated time / S, see ``core/scaling.py``), so the parameters are never dilated
here and the same object works at any scale factor.

Reaction point (RP), per the paper::

    on CNP:    R_T <- R_C            (see clamp_target_rate for the NIC variant)
               R_C <- R_C (1 - alpha/2)
               alpha <- (1 - g) alpha + g
               restart alpha timer, rate timer and byte counter; T = BC = 0
    alpha timer (period K, restarted by each CNP):   alpha <- (1 - g) alpha
    rate-increase event (timer period T_inc expires: T += 1;
                         B bytes sent:               BC += 1):
        the phase is chosen from (T, BC) *before* the expiring counter is
        incremented, so the first F events after a CNP are fast recovery:
        max(T, BC) <  F             fast recovery:  R_C <- (R_T + R_C) / 2
        max(T, BC) >= F > min       additive:       R_T += R_AI;  R_C <- (R_T + R_C) / 2
        min(T, BC) >= F             hyper:          R_T += i R_HAI; R_C <- (R_T + R_C) / 2
                                                    with i = min(T, BC) - F + 1
    R_C and R_T are clamped to [min_rate, line_rate].

Notification point (NP): a CE-marked packet of a QP triggers a CNP unless one
was sent for that QP less than ``cnp_interval_s`` ago.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.dcqcn_params import PARAMETER_SETS, DcqcnParams
from core.errors import ParameterError

__all__ = [
    "PARAMS",
    "DcqcnParams",
    "NotificationPoint",
    "ReactionPoint",
    "get_params",
]

_INF = float("inf")


#: Named parameter sets; ``'off'`` (None) means no congestion control: line rate.
PARAMS: dict[str, DcqcnParams | None] = {**PARAMETER_SETS, "off": None}


def get_params(name: str) -> DcqcnParams | None:
    """The named parameter set (None for ``'off'``); ParameterError if unknown."""
    try:
        return PARAMS[name]
    except KeyError:
        raise ParameterError("cc", name, f"must be one of {sorted(PARAMS)}") from None


class ReactionPoint:
    """DCQCN sender state of one QP (see the module docstring for the equations).

    Call ``on_bytes_sent`` after each transmitted batch and ``on_cnp`` for each
    CNP received; both first fire the timers that fell due before ``now_s``.
    ``advance(now_s)`` fires due timers alone (call it before reading
    ``rate_bps`` when nothing was sent for a while). Times must not go backwards.

    Timers start at ``start_s``. While R_C and R_T are both at line rate, rate
    increases are no-ops, so advancing over a long idle period is O(1).
    """

    __slots__ = (
        "params", "line_rate_bps", "rate_ai_bps", "rate_hai_bps", "min_rate_bps",
        "_rc", "_rt", "_alpha", "_t_stage", "_bc_stage", "_bytes",
        "_alpha_due_s", "_rate_due_s", "_next_due_s", "_decay",
        "_reduce_pending", "_reduce_due_s", "_last_reduce_s", "_reduced_once",
        "cnps_received", "rate_reductions", "rate_increases",
    )

    def __init__(self, params: DcqcnParams, line_rate_bps: float | None = None,
                 start_s: float = 0.0):
        line = params.line_rate_bps if line_rate_bps is None else float(line_rate_bps)
        if not 0.0 < line < _INF:
            raise ParameterError("line_rate_bps", line_rate_bps, "must be a positive finite number")
        self.params = params
        self.line_rate_bps = line
        factor = line / params.line_rate_bps if params.scale_increase_with_line_rate else 1.0
        self.rate_ai_bps = params.rate_ai_bps * factor
        self.rate_hai_bps = params.rate_hai_bps * factor
        self.min_rate_bps = min(params.min_rate_bps, line)
        self._rc = line
        self._rt = line
        self._alpha = params.alpha_initial
        self._decay = 1.0 - params.g
        self._t_stage = 0
        self._bc_stage = 0
        self._bytes = 0
        self._alpha_due_s = start_s + params.alpha_timer_s
        self._rate_due_s = start_s + params.rate_increase_timer_s
        self._reduce_pending = False
        self._reduce_due_s = _INF
        self._last_reduce_s = -_INF
        self._reduced_once = False
        self._next_due_s = min(self._alpha_due_s, self._rate_due_s)
        self.cnps_received = 0
        self.rate_reductions = 0
        self.rate_increases = 0

    # -- read-only state -------------------------------------------------------
    @property
    def rate_bps(self) -> float:
        """Current rate R_C (bit/s, real)."""
        return self._rc

    @property
    def target_rate_bps(self) -> float:
        """Target rate R_T (bit/s, real)."""
        return self._rt

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def timer_stage(self) -> int:
        """T: rate-timer expiries since the last reduction."""
        return self._t_stage

    @property
    def byte_stage(self) -> int:
        """BC: byte-counter expiries since the last reduction."""
        return self._bc_stage

    @property
    def next_event_s(self) -> float:
        """Earliest time at which a timer (or a deferred reduction) is due."""
        return self._next_due_s

    # -- events ------------------------------------------------------------------
    def on_cnp(self, now_s: float) -> None:
        """A CNP for this QP arrived at ``now_s``."""
        if now_s >= self._next_due_s:
            self.advance(now_s)
        self.cnps_received += 1
        period = self.params.rate_reduce_monitor_period_s
        if period > 0.0 and now_s < self._last_reduce_s + period:
            # Inside the monitor period: merge into one reduction at its end.
            if not self._reduce_pending:
                self._reduce_pending = True
                self._reduce_due_s = self._last_reduce_s + period
                if self._reduce_due_s < self._next_due_s:
                    self._next_due_s = self._reduce_due_s
            return
        self._reduce(now_s)

    def on_bytes_sent(self, n_bytes: int, now_s: float) -> None:
        """``n_bytes`` were transmitted at ``now_s``; may trigger byte-counter increases."""
        if now_s >= self._next_due_s:
            self.advance(now_s)
        b = self._bytes + n_bytes
        limit = self.params.byte_counter_bytes
        while b >= limit:
            b -= limit
            self._increase(False)
        self._bytes = b

    def advance(self, now_s: float) -> None:
        """Fire every alpha-decay and rate-increase timer due at or before ``now_s``."""
        if self._reduce_pending and self._reduce_due_s <= now_s:
            due = self._reduce_due_s
            self._fire_timers(due)
            self._reduce_pending = False
            self._reduce_due_s = _INF
            self._reduce(due)
        self._fire_timers(now_s)

    def drive(self, events: Iterable[tuple[float, str, int]]) -> list[tuple[float, float, float, float]]:
        """Replay a scripted event list and return a trace (for tests and notebooks).

        ``events`` are ``(t_s, kind, n)`` in time order, ``kind`` one of
        ``'cnp'`` (n ignored), ``'bytes'`` (n bytes sent) or ``'advance'``
        (n ignored). After each event one row ``(t_s, rate_bps, target_rate_bps,
        alpha)`` is appended.
        """
        trace: list[tuple[float, float, float, float]] = []
        for t_s, kind, n in events:
            if kind == "cnp":
                self.on_cnp(t_s)
            elif kind == "bytes":
                self.on_bytes_sent(n, t_s)
            elif kind == "advance":
                self.advance(t_s)
            else:
                raise ParameterError("event kind", kind, "must be 'cnp', 'bytes' or 'advance'")
            trace.append((t_s, self._rc, self._rt, self._alpha))
        return trace

    # -- internals ---------------------------------------------------------------
    def _fire_timers(self, now_s: float) -> None:
        p = self.params
        if self._alpha_due_s <= now_s:
            # Alpha decay does not interact with rate events, so do it in closed form.
            k = p.alpha_timer_s
            n = int((now_s - self._alpha_due_s) / k) + 1
            due = self._alpha_due_s + n * k
            while due <= now_s:  # float rounding of the division
                n += 1
                due += k
            self._alpha *= self._decay ** n
            self._alpha_due_s = due
        if self._rate_due_s <= now_s:
            period = p.rate_increase_timer_s
            while self._rate_due_s <= now_s:
                if self._rc >= self.line_rate_bps and self._rt >= self.line_rate_bps:
                    # Saturated: further increases change nothing but the stage count.
                    n = int((now_s - self._rate_due_s) / period) + 1
                    self._t_stage += n
                    self._rate_due_s += n * period
                    continue
                self._rate_due_s += period
                self._increase(True)
        due = self._alpha_due_s if self._alpha_due_s < self._rate_due_s else self._rate_due_s
        if self._reduce_pending and self._reduce_due_s < due:
            due = self._reduce_due_s
        self._next_due_s = due

    def _increase(self, by_timer: bool) -> None:
        f = self.params.fast_recovery_steps
        t, bc = self._t_stage, self._bc_stage
        lo, hi = (t, bc) if t < bc else (bc, t)
        rt = self._rt
        if hi >= f:
            rt += self.rate_ai_bps if lo < f else (lo - f + 1) * self.rate_hai_bps
            if rt > self.line_rate_bps:
                rt = self.line_rate_bps
            self._rt = rt
        rc = (rt + self._rc) * 0.5
        self._rc = rc if rc < self.line_rate_bps else self.line_rate_bps
        if by_timer:
            self._t_stage = t + 1
        else:
            self._bc_stage = bc + 1
        self.rate_increases += 1

    def _reduce(self, now_s: float) -> None:
        p = self.params
        if (p.clamp_target_rate or not self._reduced_once or self._bc_stage > 0
                or (p.clamp_target_rate_after_time_inc and self._t_stage > 0)):
            self._rt = self._rc
        if not self._reduced_once and p.rate_on_first_cnp_bps > 0.0:
            rc = min(p.rate_on_first_cnp_bps, self._rc)
        else:
            rc = self._rc * (1.0 - self._alpha * 0.5)
        self._rc = rc if rc > self.min_rate_bps else self.min_rate_bps
        self._alpha = self._decay * self._alpha + p.g
        self._reduced_once = True
        self._last_reduce_s = now_s
        self.rate_reductions += 1
        self._t_stage = 0
        self._bc_stage = 0
        self._bytes = 0
        self._alpha_due_s = now_s + p.alpha_timer_s
        self._rate_due_s = now_s + p.rate_increase_timer_s
        due = self._alpha_due_s if self._alpha_due_s < self._rate_due_s else self._rate_due_s
        if self._reduce_pending and self._reduce_due_s < due:
            due = self._reduce_due_s
        self._next_due_s = due


class NotificationPoint:
    """Receiver side: at most one CNP per QP per ``cnp_interval_s``.

    The first CE-marked packet of a QP always triggers a CNP; later ones do if
    at least ``cnp_interval_s`` passed since that QP's previous CNP. QPs are any
    hashable key (QPN, or (peer, QPN)).
    """

    __slots__ = ("cnp_interval_s", "_last_cnp_s", "ce_packets", "cnps_sent")

    def __init__(self, cnp_interval_s: float):
        if not 0.0 <= cnp_interval_s < _INF:
            raise ParameterError("cnp_interval_s", cnp_interval_s, "must be a finite number >= 0")
        self.cnp_interval_s = float(cnp_interval_s)
        self._last_cnp_s: dict[object, float] = {}
        self.ce_packets = 0
        self.cnps_sent = 0

    def on_packet(self, qp: object, ce: bool, now_s: float) -> bool:
        """A data packet of ``qp`` arrived; True if a CNP must be sent now."""
        if not ce:
            return False
        self.ce_packets += 1
        last = self._last_cnp_s.get(qp)
        if last is not None and now_s - last < self.cnp_interval_s:
            return False
        self._last_cnp_s[qp] = now_s
        self.cnps_sent += 1
        return True

    def forget(self, qp: object) -> None:
        """Drop the state of a finished QP."""
        self._last_cnp_s.pop(qp, None)

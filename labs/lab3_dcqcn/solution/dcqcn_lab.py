"""Lab 3: DCQCN's reaction point, the reference solution.

Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015:

    on a CNP:            R_T <- R_C;  R_C <- R_C (1 - alpha / 2);  alpha <- (1 - g) alpha + g
                         then the alpha timer, the rate timer and the byte counter restart
                         and the stage counts T and BC return to 0
    alpha timer (K):     no CNP for K:  alpha <- (1 - g) alpha
    increase event:      the rate timer expires (T counts it) or B bytes were sent (BC),
                         with T and BC counted *before* this event:
        max(T, BC) <  F  fast recovery:  R_C <- (R_T + R_C) / 2
        min(T, BC) <  F  additive:       R_T <- R_T + R_AI;           R_C <- (R_T + R_C) / 2
        otherwise        hyper:          R_T <- R_T + i R_HAI;        R_C <- (R_T + R_C) / 2
                                         i = min(T, BC) - F + 1
    R_C stays within [min_rate_bps, line rate], R_T at most the line rate.

Times are real-fabric seconds, rates bit/s, sizes bytes (docs/congestion-control.md).
"""

from __future__ import annotations

from traffic.cc import CongestionControl


class LabDcqcn(CongestionControl):
    window_bytes = None                    # DCQCN paces a rate; no window

    def __init__(self, line_rate_bps: float, start_s: float = 0.0, *, g: float = 1 / 256,
                 alpha_timer_s: float = 55e-6, rate_timer_s: float = 55e-6,
                 byte_counter_bytes: int = 10 * 1024 * 1024, fast_recovery_stages: int = 5,
                 rate_ai_bps: float | None = None, rate_hai_bps: float | None = None,
                 min_rate_bps: float = 1e6):
        self.line_rate_bps = line_rate_bps
        self.rate_bps = line_rate_bps          # R_C: a QP starts at line rate
        self.target_rate_bps = line_rate_bps   # R_T
        self.alpha = 1.0                       # the first CNP halves the rate
        self.g = g
        self.alpha_timer_s = alpha_timer_s     # K
        self.rate_timer_s = rate_timer_s       # the rate-increase timer's period
        self.byte_counter_bytes = byte_counter_bytes    # B
        self.fast_recovery_stages = fast_recovery_stages  # F
        # The paper's steps are for 40G (R_AI 40 Mb/s, R_HAI 200 Mb/s): scaled to this NIC.
        self.rate_ai_bps = line_rate_bps / 1000 if rate_ai_bps is None else rate_ai_bps
        self.rate_hai_bps = line_rate_bps / 200 if rate_hai_bps is None else rate_hai_bps
        self.min_rate_bps = min_rate_bps
        self.cnps_received = 0
        # Timers and counters, restarted by every CNP.
        self.alpha_due_s = start_s + alpha_timer_s
        self.rate_due_s = start_s + rate_timer_s
        self.timer_stage = 0                   # T: rate-timer expiries since the last cut
        self.byte_stage = 0                    # BC: byte-counter expiries since the last cut
        self.bytes_counted = 0                 # bytes sent towards the next BC expiry

    @property
    def next_timer_s(self) -> float:
        return min(self.alpha_due_s, self.rate_due_s)

    # ------------------------------------------------------------------ events
    def on_cnp(self, now_s: float) -> None:
        self.cnps_received += 1
        # The cut (TODO 1), with the alpha of before this CNP, then alpha's update (TODO 2).
        self.target_rate_bps = self.rate_bps
        self.rate_bps = max(self.min_rate_bps, self.rate_bps * (1 - self.alpha / 2))
        self.alpha = (1 - self.g) * self.alpha + self.g
        self._restart(now_s)

    def on_timer(self, now_s: float) -> None:
        if now_s >= self.alpha_due_s:
            self.alpha_due_s += self.alpha_timer_s
            # A whole alpha period without a CNP: alpha decays (TODO 2).
            self.alpha *= 1 - self.g
        if now_s >= self.rate_due_s:
            self.rate_due_s += self.rate_timer_s
            self._increase()
            self.timer_stage += 1

    def on_send(self, n_bytes: int, now_s: float) -> None:
        self.bytes_counted += n_bytes
        while self.bytes_counted >= self.byte_counter_bytes:
            self.bytes_counted -= self.byte_counter_bytes
            self._increase()
            self.byte_stage += 1

    def trace(self) -> tuple[float, float, float]:
        """(R_C, R_T, alpha): the grader reads the target rate and alpha here."""
        return self.rate_bps, self.target_rate_bps, self.alpha

    # ------------------------------------------------------------------ helpers
    def _restart(self, now_s: float) -> None:
        """A cut restarts both timers and the byte counter, and the stages."""
        self.alpha_due_s = now_s + self.alpha_timer_s
        self.rate_due_s = now_s + self.rate_timer_s
        self.timer_stage = self.byte_stage = 0
        self.bytes_counted = 0

    def _increase(self) -> None:
        """One rate-increase event; the caller counts it in T or BC afterwards."""
        f = self.fast_recovery_stages
        t, bc = self.timer_stage, self.byte_stage
        if max(t, bc) < f:                     # fast recovery (TODO 3)
            self.rate_bps = (self.target_rate_bps + self.rate_bps) / 2
        elif min(t, bc) < f:                   # additive increase (TODO 4)
            self.target_rate_bps = min(self.line_rate_bps, self.target_rate_bps + self.rate_ai_bps)
            self.rate_bps = (self.target_rate_bps + self.rate_bps) / 2
        else:                                  # hyper increase (TODO 4)
            i = min(t, bc) - f + 1
            self.target_rate_bps = min(self.line_rate_bps,
                                       self.target_rate_bps + i * self.rate_hai_bps)
            self.rate_bps = (self.target_rate_bps + self.rate_bps) / 2

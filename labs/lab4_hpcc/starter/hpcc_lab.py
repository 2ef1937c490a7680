"""Lab 4: HPCC from in-band telemetry. Fill in TODO 1 to TODO 4 (see HANDOUT.md).

Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019, Algorithm 1.
For each ACK with INT records L (one per switch egress port, oldest hop first) and
the records L' of the previous ACK, with base RTT T:

    per hop j:   tau_j  = L[j].ts - L'[j].ts
                 txRate = (L[j].tx_bytes - L'[j].tx_bytes) / tau_j
                 u_j    = qlen_j / (B_j T) + txRate / B_j           (TODO 1)
    u, tau = the largest u_j and its tau_j; tau = min(tau, T)
    U <- (1 - tau/T) U + (tau/T) u                                  (TODO 2)
    if U >= eta or incStage >= maxStage:  W = W_c / (U / eta) + W_AI
    else:                                 W = W_c + W_AI              (TODO 3)
    once per RTT: W_c <- W (and incStage: 0 after a multiplicative step, + 1 after
    an additive one); W stays within [min_window_bytes, B_nic T]
    rate R = W / T                                                  (TODO 4)

Times are real-fabric seconds, sizes bytes, rates bit/s (docs/congestion-control.md).
Check your work with `emu lab check 4 .` (add --no-emulation for the fast part only).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from traffic.cc import CongestionControl
from traffic.ccalgos import IntRecord


class LabHpcc(CongestionControl):
    #: The emulated switches write one IntRecord per hop into the data frames, and the
    #: receiver echoes them in its ACKs (every frame is ACKed).
    needs_int_records = True
    next_timer_s = math.inf

    def __init__(self, line_rate_bps: float, start_s: float = 0.0, *,
                 base_rtt_s: float = 10e-6, eta: float = 0.95, max_stage: int = 5,
                 w_ai_bytes: float | None = None, expected_flows: int = 100,
                 mtu_bytes: int = 4096, min_window_bytes: float | None = None):
        self.line_rate_bps = line_rate_bps
        self.base_rtt_s = base_rtt_s                       # T
        self.eta = eta                                     # target utilisation
        self.max_stage = max_stage
        # B_nic T: the bytes the NIC sends in one base RTT; the window never exceeds it.
        self.max_window_bytes = line_rate_bps * base_rtt_s / 8
        self.min_window_bytes = min(self.max_window_bytes,
                                    mtu_bytes if min_window_bytes is None else min_window_bytes)
        # The paper's W_AI: N flows' increases together fit in the (1 - eta) headroom.
        self.w_ai_bytes = (self.max_window_bytes * (1 - eta) / expected_flows
                           if w_ai_bytes is None else w_ai_bytes)
        self.window = self.max_window_bytes                # W: line-rate start
        self.reference_window = self.window                # W_c
        self.inc_stage = 0
        self.utilisation = 1.0                             # U, before the first sample
        self.last_update_s = start_s                       # the last update of W_c
        self.last_records: tuple[IntRecord, ...] = ()      # L', the previous ACK's records
        self.cnps_received = 0

    @property
    def window_bytes(self) -> float:
        return self.window

    @property
    def rate_bps(self) -> float:
        # TODO 4: the pacing rate R = W / T, in bit/s (W is in bytes, T in seconds).
        return self.line_rate_bps

    # ------------------------------------------------------------------ the algorithm
    def hop_utilisation(self, old: IntRecord, new: IntRecord) -> tuple[float, float] | None:
        """(u_j, tau_j) of one hop from two records of its port, or None if they share
        a timestamp (no rate to measure)."""
        # TODO 1: tau_j = new.ts_s - old.ts_s (None if it is not positive); the port's
        # transmit rate from the tx_bytes counter over tau_j; then
        # u_j = qlen / (B_j T) + txRate / B_j, with B_j = new.rate_bps (bit/s) and
        # T = self.base_rtt_s. Mind the units: bytes against bits, seconds.
        return None

    def measure(self, records: Sequence[IntRecord]) -> bool:
        """Fold this ACK's records into U; False if no hop gave a sample."""
        # TODO 2: hop_utilisation of every hop (self.last_records[j] against
        # records[j]); U follows the most loaded hop: u = the largest u_j, tau its
        # tau_j, capped at T. Then U <- (1 - tau/T) U + (tau/T) u in self.utilisation.
        # Return False if no hop gave a sample.
        return False

    def compute_window(self, update_reference: bool) -> None:
        """W from U and W_c; W_c (and the stage) move only on a reference update."""
        # TODO 3: if U >= eta or inc_stage >= max_stage: W = W_c / (U / eta) + W_AI
        # (multiplicative; U can be 0 on an idle path: then W is the largest window),
        # else W = W_c + W_AI (additive). Keep W within [min_window_bytes,
        # max_window_bytes] in self.window. Only when update_reference is True:
        # W_c <- W, and inc_stage <- 0 after a multiplicative step, + 1 after an
        # additive one.

    # ------------------------------------------------------------------ events
    def on_ack(self, bytes_acked: int, rtt_s: float, ecn_echo: bool,
               int_records: Sequence[object], now_s: float) -> None:
        records: tuple[IntRecord, ...] = tuple(int_records)  # type: ignore[arg-type]
        if not records:
            return
        if len(records) != len(self.last_records):        # the first ACK, or a new path
            self.last_records = records
            return
        sampled = self.measure(records)
        self.last_records = records
        if not sampled:
            return
        # Once per RTT: the first ACK for a frame sent after the last update of W_c.
        update = now_s - rtt_s >= self.last_update_s
        self.compute_window(update)
        if update:
            self.last_update_s = now_s

    def trace(self) -> tuple[float, float, float]:
        """(W / T, W_c / T, U): the grader reads U here."""
        t = self.base_rtt_s
        return self.window * 8 / t, self.reference_window * 8 / t, self.utilisation

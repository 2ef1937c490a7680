"""HPCC: window control from per-hop in-band telemetry.

Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019, Algorithm 1.
For each ACK carrying INT records L (one ``IntRecord`` per hop) and the records
L' of the previous ACK, with base RTT T::

    for each hop j:  tau_j   = L[j].ts - L'[j].ts
                     txRate  = (L[j].tx_bytes - L'[j].tx_bytes) / tau_j
                     u_j     = min(L[j].qlen, L'[j].qlen) / (B_j T) + txRate / B_j
    u, tau = the largest u_j and its tau_j;  tau = min(tau, T)
    U = (1 - tau/T) U + (tau/T) u                                   (EWMA per ACK)
    if U >= eta or incStage >= maxStage:  W = W_c / (U / eta) + W_AI
                                          on a reference update: W_c = W, incStage = 0
    else:                                 W = W_c + W_AI
                                          on a reference update: W_c = W, incStage += 1
    rate R = W / T

The reference window W_c is updated once per RTT: by the first ACK whose newest
frame was sent after the previous update (the paper's ``ack.seq >
lastUpdateSeq``; see ``common.sent_after``); other ACKs compute W from the same
W_c. The first ACK (or one whose hop count differs, a new path) only stores its
records. Hops whose two records share a timestamp give no rate and are skipped.

W is clamped to [min_window_bytes, B_nic T]: the rate W/T never exceeds the
NIC's line rate. ``window_bytes`` is W (payload bytes in flight) and ``rate_bps``
is W/T. ECN echoes and CNPs are ignored (CNPs are counted). No timers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.frame import MTU_PAYLOAD_BYTES
from traffic.cc import CongestionControl
from traffic.ccalgos.common import IntRecord, fraction, integer, positive, sent_after

__all__ = ["Hpcc", "IntRecord"]


class Hpcc(CongestionControl):
    """One QP's HPCC sender state (see the module doc).

    Defaults, real units:

    * ``eta = 0.95``, ``max_stage = 5``: the paper's settings (section 5);
    * ``base_rtt_s = 10 us``: T, the round trip of this project's 3-tier fat tree
      (the engine should pass the topology's value);
    * ``initial_window_bytes``: W_init = B_nic T (line-rate start), as in the paper;
    * ``w_ai_bytes``: W_init (1 - eta) / ``expected_flows`` with 100 flows, the
      paper's rule that N flows' additive increases together stay within the
      (1 - eta) headroom (about 250 bytes at 400G and 10 us);
    * ``initial_utilisation = 1``: U before the first sample (chosen here: the
      line-rate start is assumed to fill the path);
    * ``min_window_bytes = mtu_bytes = 4096``: at least one frame in flight.
    """

    next_timer_s = math.inf
    #: HPCC without per-hop records has no signal: ``traffic.ccload`` refuses it until
    #: the fabric writes INT.
    needs_int_records = True
    #: HPCC's equilibrium (U = eta): no standing queue, eta of the bottleneck busy.
    steady_model = "equilibrium U = eta"

    def __init__(self, line_rate_bps: float, start_s: float = 0.0, *,
                 base_rtt_s: float = 10e-6, eta: float = 0.95, max_stage: int = 5,
                 w_ai_bytes: float | None = None, expected_flows: int = 100,
                 initial_window_bytes: float | None = None, initial_utilisation: float = 1.0,
                 mtu_bytes: int = MTU_PAYLOAD_BYTES, min_window_bytes: float | None = None):
        self.line_rate_bps = positive("line_rate_bps", line_rate_bps)
        self.base_rtt_s = positive("base_rtt_s", base_rtt_s)
        self.eta = fraction("eta", eta)
        self.max_stage = integer("max_stage", max_stage, 0)
        self.mtu_bytes = positive("mtu_bytes", mtu_bytes)
        self.max_window_bytes = self.line_rate_bps * self.base_rtt_s / 8
        self.min_window_bytes = min(self.max_window_bytes, positive(
            "min_window_bytes", self.mtu_bytes if min_window_bytes is None else min_window_bytes))
        w_init = positive("initial_window_bytes", self.max_window_bytes
                          if initial_window_bytes is None else initial_window_bytes)
        flows = integer("expected_flows", expected_flows, 1)
        self.w_ai_bytes = positive(
            "w_ai_bytes", w_init * (1 - self.eta) / flows if w_ai_bytes is None else w_ai_bytes)
        self.window = self._clamp(w_init)
        self.reference_window = self.window
        self.utilisation = positive("initial_utilisation", initial_utilisation)
        self.inc_stage = 0
        self.last_update_s = float(start_s)
        self.last_records: tuple[IntRecord, ...] = ()
        self.cnps_received = 0

    def _clamp(self, w: float) -> float:
        return min(self.max_window_bytes, max(self.min_window_bytes, w))

    @property
    def target_utilisation(self) -> float:
        """The share of a bottleneck HPCC keeps busy at equilibrium: eta, with no queue
        (an a priori expectation for experiments; ``experiments.cc_compare`` reads it)."""
        return self.eta

    @property
    def window_bytes(self) -> float:
        return self.window

    @property
    def rate_bps(self) -> float:
        return self.window * 8 / self.base_rtt_s

    def measure(self, records: Sequence[IntRecord]) -> bool:
        """Fold the utilisation of ``records`` into U; False if no hop gave a sample."""
        prev = self.last_records
        t = self.base_rtt_s
        u = -1.0
        tau = t
        for old, new in zip(prev, records, strict=True):
            dt = new.ts_s - old.ts_s
            if dt <= 0:
                continue
            tx_rate_bps = (new.tx_bytes - old.tx_bytes) * 8 / dt
            u_j = (min(new.qlen_bytes, old.qlen_bytes) * 8 / (new.rate_bps * t)
                   + tx_rate_bps / new.rate_bps)
            if u_j > u:
                u, tau = u_j, dt
        if u < 0:
            return False
        w = min(tau, t) / t
        self.utilisation = (1 - w) * self.utilisation + w * u
        return True

    def compute_window(self, update_reference: bool) -> None:
        """ComputeWind of Algorithm 1 from the current U and W_c."""
        u = self.utilisation
        if u >= self.eta or self.inc_stage >= self.max_stage:
            w = (self.reference_window * self.eta / u if u > 0 else self.max_window_bytes) \
                + self.w_ai_bytes
            stage = 0
        else:
            w = self.reference_window + self.w_ai_bytes
            stage = self.inc_stage + 1
        self.window = self._clamp(w)
        if update_reference:
            self.reference_window = self.window
            self.inc_stage = stage

    def on_ack(self, bytes_acked: int, rtt_s: float, ecn_echo: bool,
               int_records: Sequence[object], now_s: float) -> None:
        if not int_records:
            return
        records = tuple(int_records)  # type: ignore[arg-type]
        if len(records) != len(self.last_records):
            self.last_records = records
            return
        sampled = self.measure(records)  # type: ignore[arg-type]
        self.last_records = records
        if not sampled:
            return
        update = sent_after(self.last_update_s, rtt_s, now_s)
        self.compute_window(update)
        if update:
            self.last_update_s = now_s

    def on_cnp(self, now_s: float) -> None:
        self.cnps_received += 1

    def trace(self) -> tuple[float, float, float]:
        """(W / T, W_c / T, U)."""
        t = self.base_rtt_s
        return self.window * 8 / t, self.reference_window * 8 / t, self.utilisation

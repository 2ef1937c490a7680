"""The congestion-control interface of the engine: one pure object per sending QP.

The engine owns the packets; the algorithm owns the rate and the window. Every
call carries the current time in **real-fabric** seconds (emulated time / S), and
every quantity is in real units (bit/s, bytes, seconds), so an algorithm never
sees the dilation and its parameters are the real fabric's.

``CongestionControl`` is the base class: every hook below is a documented no-op
there, so an algorithm overrides only the events it acts on. Events the engine
delivers:

* ``on_send(n_bytes, now_s)``: ``n_bytes`` of data frames (whole frames, headers
  included) left the NIC. Byte counters (DCQCN's B) live here.
* ``on_ack(bytes_acked, rtt_s, ecn_echo, int_records, now_s)``: a cumulative ACK
  acknowledged ``bytes_acked`` new payload bytes. ``rtt_s`` is the real round trip
  of the newest acknowledged frame (send stamp to ACK arrival); ``ecn_echo`` is
  the ACK's ECN echo (BTH BECN, ``traffic.roce``): a frame it newly acknowledges
  arrived CE-marked; ``int_records`` are per-hop telemetry records, oldest hop
  first, empty unless the algorithm declares ``needs_int_records`` (then every
  switch port writes its record, ``traffic.int_telemetry``).
* ``on_cnp(now_s)``: a congestion notification packet for this QP arrived.
* ``on_timer(now_s)``: called at (or soon after) ``next_timer_s`` when that is
  finite (the engine reads it after the QP starts and after every ACK, CNP and
  timer event). Algorithms whose timers only matter when the rate is next used (DCQCN
  fires its due timers inside every event) keep ``next_timer_s`` infinite.

What the engine reads back after each event:

* ``rate_bps``: the pacing rate of the QP (capped by the NIC's line rate);
* ``window_bytes``: bytes allowed in flight (unacknowledged), or None for no window.

``trace()`` returns ``(rate_bps, target_rate_bps, alpha)`` for the rate trace (an
algorithm without a target or alpha returns its rate and 0.0).

Built in: ``Dcqcn`` (``traffic.dcqcn.ReactionPoint`` behind this interface, same
behaviour) and ``LineRate`` (CC off). ``make_cc`` builds one from the engine's
``cc`` setting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from core.errors import ParameterError
from traffic.dcqcn import DcqcnParams, ReactionPoint, get_params

__all__ = ["CongestionControl", "Dcqcn", "LineRate", "calls_on_send", "make_cc"]

_INF = math.inf


class CongestionControl:
    """Base class of every algorithm: each hook is a documented no-op (as ns-3's
    ``TcpCongestionOps``), so a subclass writes only the events it acts on.

    A subclass sets ``rate_bps`` (bit/s, positive and finite) in its constructor
    ``(line_rate_bps, start_s=0.0, **params)``, and ``window_bytes`` if it limits
    the bytes in flight. Classes that do not derive from it work too, as long as
    they have every attribute and method below (``traffic.ccload.validate_cc``).
    """

    rate_bps: float
    #: Payload bytes allowed in flight; None: no window (rate only).
    window_bytes: float | None = None
    #: When ``on_timer`` is next due (real seconds); ``math.inf``: never.
    next_timer_s: float = _INF
    #: CNPs seen, for the statistics (the default ``on_cnp`` counts them).
    cnps_received: int = 0
    #: True: the switches write per-hop INT records for the ACKs to echo (HPCC).
    needs_int_records: bool = False
    #: The project's model of the algorithm's steady state under long flows, where it
    #: has one (a name, e.g. HPCC's equilibrium); the ``cc`` experiment measures it.
    #: Read from the class itself (``CcFactory.steady_model``): a subclass changes the
    #: algorithm, so it declares its own.
    steady_model: str | None = None
    #: Likewise the model of its queue's steady oscillation (DCTCP's sawtooth).
    oscillation_model: str | None = None

    def on_send(self, n_bytes: int, now_s: float) -> None:
        """``n_bytes`` of data frames (whole frames) left the NIC. Default: nothing.
        An algorithm that leaves it alone spares the engine a call per burst."""

    def on_ack(self, bytes_acked: int, rtt_s: float, ecn_echo: bool,
               int_records: Sequence[object], now_s: float) -> None:
        """A cumulative ACK acknowledged ``bytes_acked`` new payload bytes. Default: nothing."""

    def on_cnp(self, now_s: float) -> None:
        """A CNP for this QP arrived. Default: count it, nothing else."""
        self.cnps_received += 1

    def on_timer(self, now_s: float) -> None:
        """``next_timer_s`` has come. Default: nothing."""

    def trace(self) -> tuple[float, float, float]:
        """``(rate_bps, target_rate_bps, alpha)`` for the rate trace. Default: the rate
        twice and 0.0."""
        return self.rate_bps, self.rate_bps, 0.0


def calls_on_send(cc: object) -> bool:
    """Whether ``cc``'s ``on_send`` may do something: the engine calls it after each
    burst only then. A class that does not override the base's no-op does not."""
    return getattr(type(cc), "on_send", None) is not CongestionControl.on_send


class Dcqcn(CongestionControl):
    """DCQCN's reaction point behind the interface: rate only, no window.

    CNPs cut the rate, sent bytes drive the byte counter, and the alpha and rate
    timers fire inside each event (``ReactionPoint`` keeps them exact in closed
    form), so no engine timer is needed and ACKs are ignored, as in the paper.
    """

    __slots__ = ("rp",)
    window_bytes = None
    next_timer_s = _INF

    def __init__(self, params: DcqcnParams, line_rate_bps: float, start_s: float = 0.0):
        self.rp = ReactionPoint(params, line_rate_bps, start_s)

    @property
    def rate_bps(self) -> float:
        return self.rp.rate_bps

    @property
    def cnps_received(self) -> int:
        return self.rp.cnps_received

    def on_send(self, n_bytes: int, now_s: float) -> None:
        self.rp.on_bytes_sent(n_bytes, now_s)

    def on_cnp(self, now_s: float) -> None:
        self.rp.on_cnp(now_s)

    def on_timer(self, now_s: float) -> None:
        self.rp.advance(now_s)

    def trace(self) -> tuple[float, float, float]:
        rp = self.rp
        return rp.rate_bps, rp.target_rate_bps, rp.alpha


class LineRate(CongestionControl):
    """Congestion control off: line rate, CNPs counted (the base's ``on_cnp``) and ignored."""

    __slots__ = ("rate_bps", "cnps_received")
    window_bytes = None
    next_timer_s = _INF

    def __init__(self, line_rate_bps: float):
        if not 0.0 < line_rate_bps < _INF:
            raise ParameterError("line_rate_bps", line_rate_bps, "must be a positive finite number")
        self.rate_bps = float(line_rate_bps)
        self.cnps_received = 0


def make_cc(cc: str | DcqcnParams | None, line_rate_bps: float,
            start_s: float = 0.0) -> Dcqcn | LineRate:
    """The algorithm for the engine's ``cc`` setting: a PARAMS name, DcqcnParams or None."""
    params = get_params(cc) if isinstance(cc, str) else cc
    if params is None:
        return LineRate(line_rate_bps)
    return Dcqcn(params, line_rate_bps, start_s)

"""Shared pieces of the built-in algorithms: the INT record and parameter checks.

Every quantity is in real-fabric units (the engine divides emulated time by S
before an algorithm sees it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import ParameterError

__all__ = ["IntRecord", "fraction", "integer", "nonnegative", "positive", "sent_after"]


@dataclass(frozen=True, slots=True)
class IntRecord:
    """One switch egress port's in-band telemetry, as HPCC (Li et al., 2019) defines it.

    The switch writes one record per hop into a data frame as it leaves the port;
    the receiver echoes the list in its ACK, oldest hop first.

    * ``qlen_bytes``: bytes queued at the egress port when the frame left;
    * ``tx_bytes``: the port's cumulative transmitted bytes (a counter, so the
      sender derives the port's rate from two records of the same port);
    * ``ts_s``: when the frame left the port, real-fabric seconds;
    * ``rate_bps``: the port's line rate B, real bit/s.

    The emulated switches write the queue and time when the frame joins the port's
    queue instead (docs/congestion-control.md, "INT records").
    """

    qlen_bytes: float
    tx_bytes: int
    ts_s: float
    rate_bps: float


def positive(name: str, value: float) -> float:
    """``value`` as a float if it is a positive finite number, else ParameterError."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0.0 < value < math.inf:
        raise ParameterError(name, value, "must be a positive finite number")
    return float(value)


def nonnegative(name: str, value: float) -> float:
    """``value`` as a float if it is a finite number >= 0, else ParameterError."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0.0 <= value < math.inf:
        raise ParameterError(name, value, "must be a finite number >= 0")
    return float(value)


def integer(name: str, value: int, minimum: int) -> int:
    """``value`` if it is an integer >= ``minimum``, else ParameterError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ParameterError(name, value, f"must be an integer >= {minimum}")
    return value


def fraction(name: str, value: float, *, closed_low: bool = False) -> float:
    """``value`` in (0, 1] (or [0, 1] with ``closed_low``), else ParameterError."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and (
        0.0 <= value <= 1.0 if closed_low else 0.0 < value <= 1.0)
    if not ok:
        raise ParameterError(name, value, "must be in [0, 1]" if closed_low else "must be in (0, 1]")
    return float(value)


def sent_after(mark_s: float, rtt_s: float, now_s: float) -> bool:
    """Whether the newest frame an ACK covers left at or after ``mark_s``.

    ``rtt_s`` is that frame's round trip, so it was sent at ``now_s - rtt_s``.
    This replaces TCP's "snd_una passed the snd_nxt recorded at mark_s" test:
    one such ACK per round trip ends an observation window.
    """
    return now_s - rtt_s >= mark_s

"""Lab 2: PFC thresholds for a lossless RoCE fabric, the reference solution.

IEEE 802.1Qbb priority flow control, per egress queue of a switch:

    headroom = sum over the ports feeding it of  rate x (reaction + 2 x link delay) / 8
               + one frame per feeding port
    Xoff     = buffer - headroom          (a buffer that cannot hold it: ValueError)
    Xon      = Xoff - gap                 (never below 0; the gap must be > 0)

Rates are bits per second, times real-fabric seconds, sizes bytes.
"""

from __future__ import annotations

import math

#: The largest frame a port sends (9000 B MTU + 14 B Ethernet header): what a port
#: still finishes after its PAUSE arrived.
FRAME_BYTES = 9014
#: Xon this far below Xoff: two frames of hysteresis, so that a queue hovering at
#: Xoff does not pause and resume its feeders on every frame.
XON_GAP_BYTES = 2 * FRAME_BYTES


def headroom_bytes(feeders: list[tuple[float, float]], reaction_s: float,
                   frame_bytes: int = FRAME_BYTES) -> float:
    """Bytes that may still arrive at an egress queue after it crossed Xoff.

    ``feeders``: (rate_bps, link_delay_s) of every port feeding the queue. Each keeps
    sending at its line rate while the switch reacts and while the PAUSE travels up
    its link and the data already on the wire comes down (a round trip), then
    finishes the frame it had started.
    """
    total = 0.0
    for rate_bps, link_delay_s in feeders:
        total += rate_bps / 8 * (reaction_s + 2 * link_delay_s) + frame_bytes
    return total


def xoff_bytes(buffer_bytes: int, headroom: float) -> int:
    """The queue depth that sends PAUSE: what the buffer holds beyond the headroom,
    rounded down (rounding up could drop a byte)."""
    xoff = math.floor(buffer_bytes - headroom)
    if xoff <= 0:
        raise ValueError(f"a buffer of {buffer_bytes} B cannot hold a headroom of "
                         f"{headroom:.0f} B")
    return xoff


def xon_bytes(xoff: int, gap_bytes: int = XON_GAP_BYTES) -> int:
    """The queue depth that sends RESUME: ``gap_bytes`` below Xoff, at least 0."""
    if gap_bytes <= 0:
        raise ValueError(f"the Xon gap must be > 0 (got {gap_bytes} B), or Xon = Xoff")
    return max(0, xoff - gap_bytes)


def pfc_settings(egress_feeders: dict[str, list[tuple[float, float]]], buffer_bytes: int,
                 scale: float, budget_wall_s: float) -> dict[str, str]:
    """The ``emu run cc`` settings (xoff, xon, pfc_budget) for one fabric.

    ``egress_feeders``: every switch egress port ("s1->l3") and the (rate_bps,
    link_delay_s) of the ports feeding it. The emulated controller reacts within
    ``budget_wall_s`` of wall time, which is budget / S of real time. The experiment
    sets one Xoff for every port, so it must be safe at the tightest port.
    """
    reaction_s = budget_wall_s / scale
    xoff = min(xoff_bytes(buffer_bytes, headroom_bytes(feed, reaction_s))
               for feed in egress_feeders.values())
    return {"xoff": str(xoff), "xon": str(xon_bytes(xoff)), "pfc_budget": repr(budget_wall_s)}

"""Lab 2: PFC thresholds for a lossless RoCE fabric. Fill in TODO 1 to TODO 4 (see HANDOUT.md).

IEEE 802.1Qbb priority flow control, per egress queue of a switch:

    headroom = sum over the ports feeding it of  rate x (reaction + 2 x link delay) / 8
               + one frame per feeding port
    Xoff     = buffer - headroom          (a buffer that cannot hold it: ValueError)
    Xon      = Xoff - gap                 (never below 0; the gap must be > 0)

Rates are bits per second, times real-fabric seconds, sizes bytes. Check your work
with `emu lab check 2 .` (add --no-emulation for the fast part only).
"""

from __future__ import annotations

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
    # TODO 1: for every feeding port (rate_bps, link_delay_s) in feeders, add what it
    # still sends after the queue crossed Xoff: its line rate (bits/s: bytes are /8)
    # for the reaction time and a round trip over its link, plus the frame it had
    # started.
    return total


def xoff_bytes(buffer_bytes: int, headroom: float) -> int:
    """The queue depth that sends PAUSE: what the buffer holds beyond the headroom,
    rounded down (rounding up could drop a byte)."""
    # TODO 2: Xoff = buffer - headroom in whole bytes, rounded down. A buffer that
    # cannot hold the headroom (Xoff <= 0) has no safe Xoff: raise ValueError.
    return buffer_bytes


def xon_bytes(xoff: int, gap_bytes: int = XON_GAP_BYTES) -> int:
    """The queue depth that sends RESUME: ``gap_bytes`` below Xoff, at least 0."""
    # TODO 3: Xon = Xoff - gap, never below 0; a gap <= 0 (Xon = Xoff) is a ValueError.
    return xoff


def pfc_settings(egress_feeders: dict[str, list[tuple[float, float]]], buffer_bytes: int,
                 scale: float, budget_wall_s: float) -> dict[str, str]:
    """The ``emu run cc`` settings (xoff, xon, pfc_budget) for one fabric.

    ``egress_feeders``: every switch egress port ("s1->l3") and the (rate_bps,
    link_delay_s) of the ports feeding it. The emulated controller reacts within
    ``budget_wall_s`` of wall time, which is budget / S of real time. The experiment
    sets one Xoff for every port, so it must be safe at the tightest port.
    """
    # TODO 4: the real reaction time from the wall-clock budget and S; every port's
    # Xoff from its headroom (your functions above); the one Xoff safe for all of
    # them; Xon below it. Return the settings as text, e.g. {"xoff": "123456", ...}.
    return {"xoff": str(buffer_bytes), "xon": str(buffer_bytes - XON_GAP_BYTES),
            "pfc_budget": repr(budget_wall_s)}

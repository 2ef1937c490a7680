"""Which reliable transport a run's queue pairs use: go-back-N or selective repeat.

``TRANSPORTS`` names them (the engine's ``transport`` setting, recorded in
config.json): 'gbn' is RoCE's go-back-N (``traffic.gbn``), what ConnectX NICs run
by default; 'sr' is selective repeat (``traffic.selective_repeat``), the transport
that packet spraying and adaptive routing need. ``new_sender`` and
``new_receiver`` build one message's state machines; both transports answer the
same calls (``take``, ``on_reply``, ``advance``; ``on_packet``, ``ack_pending``) and
keep the same counters, so the engine only chooses here. Pure.
"""

from __future__ import annotations

from core.errors import ParameterError
from traffic.gbn import GbnReceiver, GbnSender
from traffic.selective_repeat import REORDER_PACKETS, SrReceiver
from traffic.sr_sender import SrSender

__all__ = ["TRANSPORTS", "check_transport", "new_receiver", "new_sender"]

#: The transports, the default first.
TRANSPORTS = ("gbn", "sr")


def check_transport(value: object) -> str:
    """``value`` if it names a transport; else a ParameterError."""
    if value not in TRANSPORTS:
        raise ParameterError("transport", value, f"expected one of {', '.join(TRANSPORTS)}")
    return str(value)


def new_sender(transport: str, total_packets: int, timeout_s: float,
               reorder_s: float | None = None, window: int | None = None
               ) -> GbnSender | SrSender:
    """A message's requester: go-back-N or selective repeat (``reorder_s``: its
    reordering window in time; ``window``: the most frames unacknowledged, None for
    the transport's largest)."""
    if check_transport(transport) == "sr":
        return SrSender(total_packets, window, timeout_s=timeout_s, reorder_s=reorder_s)
    return GbnSender(total_packets, window, timeout_s=timeout_s)


def new_receiver(transport: str, total_packets: int, ack_coalesce: int, ce_ack: bool,
                 reorder_packets: int = REORDER_PACKETS) -> GbnReceiver | SrReceiver:
    """A message's responder; ``reorder_packets``: selective repeat's tolerance."""
    if check_transport(transport) == "sr":
        return SrReceiver(total_packets, ack_coalesce, ce_ack=ce_ack,
                          reorder_packets=reorder_packets)
    return GbnReceiver(total_packets, ack_coalesce, ce_ack=ce_ack)

"""What the fabric tells the rest of the emulator about one shaped egress port."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Port:
    """The egress direction of one link end: ``node``'s interface ``ifname``.

    Rates: ``rate_bps`` real, ``rate_emu_bps`` = rate_bps / S as shaped.
    ``marker`` is the ECN marker handle (None on host NICs and with marking off).
    ``delay_s`` is the real one-way delay its netem delay line emulates (0: none).
    """

    node: str
    ifname: str
    ifindex: int
    netns_path: str
    peer_node: str
    rate_bps: float
    rate_emu_bps: float
    buffer_bytes: int
    tier: str
    is_switch: bool
    marker: Any = None
    delay_s: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.node}:{self.ifname}"

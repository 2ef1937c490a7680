"""Time dilation: the one place where real-fabric quantities become emulated ones.

The emulated fabric runs S times slower than the real one (docs/design.md):

    rate_emu = rate_real / S,   time_emu = time_real * S,   bytes unchanged.

Because rate x time is invariant, queues, BDPs and ECN thresholds in bytes are the
real ones. Results are converted back with `to_real_*` and always reported in real
units with S beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from core.errors import ParameterError
from core.units import format_rate

#: Highest emulated rate one shaped veth port holds accurately on a small machine.
#: Above it the per-packet CPU cost of veth + HTB dominates and achieved < configured.
MAX_EMULATED_RATE_BPS = 2.0e9
#: Lowest emulated rate that still keeps HTB and timer granularity negligible.
MIN_EMULATED_RATE_BPS = 100e3
# S = 10000: a 400G NIC runs at 40 Mb/s emulated, one 4 KB frame every 0.84 ms, tens
# of times the engine's CPU per frame (about half of it the kernel carrying the frame
# through shapers and switches). The default keeps a ~3x margin over the smallest S
# at which a 4 MiB ring all-reduce over 16 ranks on fattree,4 (`emu bench capacity`)
# stays VALID on a 2-core machine, so the demo's cases pass the gate without tuning.
# Bursts of tiny frames need more (an 8-byte all-to-all's 240 single-frame QPs at
# once): the gate says so and names the S to use. Figures: docs/validation.md.
DEFAULT_SCALE = 10000.0
#: The NIC rate DEFAULT_SCALE was measured with.
DEFAULT_SCALE_NIC_RATE_BPS = 400e9


def scale_keeping_frame_time(nic_rate_bps: float, scale: float = DEFAULT_SCALE) -> float:
    """The S at which a ``nic_rate_bps`` NIC's dilated frame time is a 400G NIC's at
    ``scale``: the engine paces, and its gate judges lags, in frame times, so a NIC N
    times faster needs N times the S (NVLink's 3.6 Tb/s: 9 x)."""
    return scale * max(1.0, nic_rate_bps / DEFAULT_SCALE_NIC_RATE_BPS)


#: S is below this: a second of real time would otherwise take over 30 years.
MAX_SCALE = 1e9


@dataclass(frozen=True)
class Scale:
    """Scale factor S (> 1 slows the fabric down)."""

    factor: float = DEFAULT_SCALE
    max_emulated_rate_bps: float = MAX_EMULATED_RATE_BPS
    min_emulated_rate_bps: float = MIN_EMULATED_RATE_BPS

    def __post_init__(self) -> None:
        if not (isinstance(self.factor, (int, float)) and 1 <= self.factor < MAX_SCALE):
            raise ParameterError("scale", self.factor,
                                 f"the scale factor S must be >= 1 and < {MAX_SCALE:.0e}")

    # real -> emulated
    def rate_emu_bps(self, rate_real_bps: float) -> float:
        """Emulated rate of a real link rate; refuses rates the shaper cannot hold."""
        if not rate_real_bps > 0:
            raise ParameterError("rate_bps", rate_real_bps, "a link rate must be positive")
        emu = rate_real_bps / self.factor
        # Only an S the Scale itself accepts (1 <= S < 1e9) is suggested.
        if emu > self.max_emulated_rate_bps:
            need = math.ceil(rate_real_bps / self.max_emulated_rate_bps)
            raise ParameterError(
                "scale", self.factor,
                f"a {format_rate(rate_real_bps)}b/s link would run at {format_rate(emu)}b/s "
                f"emulated, above the {format_rate(self.max_emulated_rate_bps)}b/s a shaped "
                "veth port holds accurately; " + (
                    f"use a scale factor of at least {math.ceil(need)}" if need < MAX_SCALE
                    else f"no scale factor below {MAX_SCALE:.0e} slows it enough: use slower "
                    "links"),
            )
        if emu < self.min_emulated_rate_bps:
            most = math.floor(rate_real_bps / self.min_emulated_rate_bps)
            raise ParameterError(
                "scale", self.factor,
                f"a {format_rate(rate_real_bps)}b/s link would run at only {format_rate(emu)}b/s "
                "emulated, too slow for accurate shaping; " + (
                    f"use a scale factor of at most {math.floor(most)}" if most >= 1
                    else f"it is below the {format_rate(self.min_emulated_rate_bps)}b/s "
                    "that can be shaped even at S = 1: use faster links"),
            )
        return emu

    def time_emu_s(self, time_real_s: float) -> float:
        """Emulated duration of a real duration (timers, latencies, intervals)."""
        return time_real_s * self.factor

    def emu_ns(self, time_real_s: float) -> int:
        """A real time as whole nanoseconds of the engine's (emulated) clock."""
        return round(time_real_s * self.factor * 1e9)

    def per_emu_s(self, per_real_s: float) -> float:
        """A count per real second (frames, bits, events) as the count per emulated
        second the dilated fabric carries: S times fewer."""
        return per_real_s / self.factor

    @property
    def emu_ns_per_real_s(self) -> float:
        """Emulated ns per real second: the one factor hot loops hold as a local."""
        return self.factor * 1e9

    # emulated -> real
    def to_real_time_s(self, time_emu_s: Any) -> Any:
        """Real duration of an emulated one (a number or an array)."""
        return time_emu_s / self.factor

    def real_s_of_emu_ns(self, ns: Any) -> Any:
        """Real seconds of emulated nanoseconds (a number or an array)."""
        return ns / (self.factor * 1e9)

    def to_real_rate_bps(self, rate_emu_bps: float) -> float:
        return rate_emu_bps * self.factor

    def check_rates(self, rates_real_bps: list[float] | set[float]) -> None:
        """Raise the clear error if any rate cannot be emulated at this S; the fastest
        and slowest links bound S, so the suggestion covers every link."""
        self.rate_emu_bps(max(rates_real_bps))
        self.rate_emu_bps(min(rates_real_bps))

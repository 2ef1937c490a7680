"""The ECN marking curve (DCQCN / WRED style) and how thresholds are chosen per port. Pure.

On the instantaneous egress queue q (bytes in front of the arriving packet):

    q <= Kmin          -> never mark
    Kmin < q <= Kmax   -> mark ECT packets with probability Pmax * (q - Kmin) / (Kmax - Kmin)
    q >  Kmax          -> always mark

Kmin = Kmax is DCTCP step marking (mark iff q > K). Thresholds are real bytes,
which time dilation leaves unchanged (docs/design.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.errors import ParameterError
from core.units import parse_size_bytes

#: Reference point for default thresholds: Kmin 100 KB / Kmax 400 KB / Pmax 0.2 at
#: 25 Gb/s, scaled linearly with the real link rate (common DCQCN/HPCC practice).
REF_RATE_BPS = 25e9
REF_KMIN_BYTES = 100_000
REF_KMAX_BYTES = 400_000
REF_PMAX = 0.2
#: The BPF marker does 64-bit products of thresholds; 2 GB is far above any buffer.
MAX_THRESHOLD_BYTES = 2**31 - 1


@dataclass(frozen=True)
class Thresholds:
    """Kmin, Kmax (real bytes) and Pmax of the marking curve, validated."""

    kmin_bytes: int
    kmax_bytes: int
    pmax: float

    def __post_init__(self) -> None:
        for name in ("kmin_bytes", "kmax_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ParameterError(name, v, "a threshold must be a number of bytes")
            if v < 0:
                raise ParameterError(name, v, "a threshold cannot be negative")
            if v > MAX_THRESHOLD_BYTES:
                raise ParameterError(name, v, f"a threshold must be at most {MAX_THRESHOLD_BYTES} bytes")
            object.__setattr__(self, name, int(round(v)))
        if self.kmin_bytes > self.kmax_bytes:
            raise ParameterError(
                "kmin_bytes", self.kmin_bytes,
                f"Kmin must not exceed Kmax ({self.kmax_bytes}); use Kmin = Kmax for step marking")
        p = self.pmax
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0 < p <= 1):
            raise ParameterError("pmax", p, "Pmax must be a probability in (0, 1]")
        object.__setattr__(self, "pmax", float(p))

    @classmethod
    def for_rate(cls, rate_bps: float) -> Thresholds:
        """Default thresholds for a REAL link rate: 100/400 KB and Pmax 0.2 per 25 Gb/s."""
        if not (isinstance(rate_bps, (int, float)) and rate_bps > 0):
            raise ParameterError("rate_bps", rate_bps, "a link rate must be positive")
        k = rate_bps / REF_RATE_BPS
        return cls(round(REF_KMIN_BYTES * k), round(REF_KMAX_BYTES * k), REF_PMAX)

    @classmethod
    def step(cls, k_bytes: int) -> Thresholds:
        """DCTCP step marking: mark every ECT packet that finds more than K bytes queued."""
        return cls(k_bytes, k_bytes, 1.0)

    @classmethod
    def parse(cls, value: Thresholds | Mapping[str, Any] | tuple | list) -> Thresholds:
        """From a Thresholds, a dict (kmin_bytes/kmax_bytes/pmax, or kmin/kmax) or a 3-tuple."""
        if isinstance(value, Thresholds):
            return value
        if isinstance(value, Mapping):
            try:
                kmin = value.get("kmin_bytes", value.get("kmin"))
                kmax = value.get("kmax_bytes", value.get("kmax"))
                return cls(kmin, kmax, value.get("pmax", REF_PMAX))
            except TypeError as e:
                raise ParameterError("thresholds", value, str(e)) from e
        if isinstance(value, (tuple, list)) and len(value) == 3:
            return cls(*value)
        raise ParameterError("thresholds", value, "expected (kmin_bytes, kmax_bytes, pmax)")

    @classmethod
    def from_text(cls, text: str, pmax: float = REF_PMAX, name: str = "thresholds") -> Thresholds:
        """``"100K/400K"`` (Kmin/Kmax, sizes as core.units reads them) -> Thresholds."""

        parts = text.split("/") if isinstance(text, str) else []
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise ParameterError(name, text, "expected KMIN/KMAX in bytes, e.g. 100K/400K")
        kmin, kmax = (parse_size_bytes(p, name) for p in parts)
        try:
            return cls(kmin, kmax, pmax)
        except ParameterError as e:
            raise ParameterError(name, text, e.why) from None

    def as_dict(self) -> dict[str, float]:
        return {"kmin_bytes": self.kmin_bytes, "kmax_bytes": self.kmax_bytes, "pmax": self.pmax}


def marking_curve(queue_bytes: float, kmin_bytes: float, kmax_bytes: float, pmax: float
                  ) -> float:
    """The curve (module doc) on plain numbers: what the model uses, and the marker's."""
    if queue_bytes <= kmin_bytes:
        return 0.0
    if queue_bytes > kmax_bytes:
        return 1.0
    return pmax * (queue_bytes - kmin_bytes) / (kmax_bytes - kmin_bytes)


def marking_curve_queue(p: float, kmin_bytes: float, kmax_bytes: float, pmax: float) -> float:
    """The curve's inverse on [Kmin, Kmax]: the queue that is marked with probability p
    (p above Pmax pins the queue at Kmax)."""
    if p <= 0:
        return float(kmin_bytes)
    if p >= pmax or kmax_bytes == kmin_bytes:
        return float(kmax_bytes)
    return kmin_bytes + (p / pmax) * (kmax_bytes - kmin_bytes)


def mark_probability(queue_bytes: float, t: Thresholds) -> float:
    """Probability that an ECT packet finding ``queue_bytes`` queued is marked CE."""
    return marking_curve(queue_bytes, t.kmin_bytes, t.kmax_bytes, t.pmax)


@dataclass(frozen=True)
class ThresholdPolicy:
    """Thresholds per port: per-port override, else per-tier, else default, else by rate.

    ``per_port`` keys are ``"node:ifname"`` (Port.name) or ``"node"``; values are
    Thresholds or anything :meth:`Thresholds.parse` accepts. ``default=None``
    means :meth:`Thresholds.for_rate` of the port's real rate.
    """

    default: Thresholds | None = None
    per_tier: Mapping[str, Thresholds] = field(default_factory=dict)
    per_port: Mapping[str, Thresholds] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default is not None:
            object.__setattr__(self, "default", Thresholds.parse(self.default))
        object.__setattr__(self, "per_tier", {k: Thresholds.parse(v) for k, v in self.per_tier.items()})
        object.__setattr__(self, "per_port", {k: Thresholds.parse(v) for k, v in self.per_port.items()})

    @classmethod
    def of(cls, value: ThresholdPolicy | Thresholds | Mapping[str, Any] | tuple | None
           ) -> ThresholdPolicy:
        """The policy a fabric's ``thresholds`` setting means: a policy as it is, None
        (thresholds by rate) or one Thresholds for every port."""
        if isinstance(value, ThresholdPolicy):
            return value
        return cls(default=None if value is None else Thresholds.parse(value))

    def for_port(self, port: Any) -> Thresholds:
        """Thresholds of a Port (anything with node, ifname, tier, rate_bps)."""
        name = f"{port.node}:{port.ifname}"
        if name in self.per_port:
            return self.per_port[name]
        if port.node in self.per_port:
            return self.per_port[port.node]
        if port.tier in self.per_tier:
            return self.per_tier[port.tier]
        if self.default is not None:
            return self.default
        return Thresholds.for_rate(port.rate_bps)

    def as_dict(self) -> dict[str, Any]:
        """For the run's config.json."""
        return {
            "default": self.default.as_dict() if self.default else "for_rate(25G: 100KB/400KB/0.2, linear)",
            "per_tier": {k: v.as_dict() for k, v in self.per_tier.items()},
            "per_port": {k: v.as_dict() for k, v in self.per_port.items()},
        }

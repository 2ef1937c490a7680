"""Two data centres over a long link: two copies of a fabric joined by gateway switches.

``two_dcs("leafspine,2,2,2", WanLink(100e3))`` builds DC ``a`` and DC ``b``, each a
copy of the fabric with its node names prefixed (``ah1``, ``bs2``), every node's info
carrying ``dc`` (0 or 1). Each DC gets a gateway switch (``gwa``, ``gwb``) linked to
every switch of the fabric's top tier (its spines or cores: a border leaf's place) at
that tier's fastest link rate (at least the long link's), so that where traffic between
the DCs queues is the gateway's long-link port, and the two gateways share the long link:

* propagation ``distance_m`` x 5 ns/m (5 µs/km, light in fibre), a fixed link delay
  like every other (`emu.delay` puts it in netem where the kernel has it, the engine
  adds it per path where not), dilated by S like them;
* ``rate_bps`` per direction (default 400G), ``buffer_bytes`` at each gateway's WAN
  port (default: the usual buffer for the rate; a WAN router's deep buffer is an
  explicit choice, since what the long round trip asks of it is the point).

Hosts sort DC a before DC b (natural order), so a ring over all hosts in host order
crosses the long link twice, once each way. Routing stays least-cost ECMP: the
gateway links cost more than any path inside a DC, so only traffic between the DCs
uses them. The topology is pure data and registers no name: the inner fabric's spec
has commas of its own, so ``emu run collective --set wan=100km`` wraps each fabric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.errors import ParameterError
from core.units import format_rate, format_size, parse_rate_bps, parse_size_bytes
from topologies.base import (
    CORE_LINK_DELAY_S,
    NIC_RATE_BPS,
    PROPAGATION_S_PER_M,
    FabricTopo,
    TopoSize,
    default_buffer_bytes,
)
from topologies.spec import build_topo, topo_size

#: The two data centres: node-name prefix, in host order.
DCS = ("a", "b")
#: The long link's and the gateway uplinks' link tiers.
WAN_TIER = "wan"
GATEWAY_TIER = "dc-gateway"
#: Routing cost of a gateway uplink: above any path inside one DC (a dragonfly's global
#: links cost 1000 each), so that traffic inside a DC never detours through its gateway.
GATEWAY_COST = 1_000_000
#: Longest link accepted: a third of the way round the Earth, more than any terrestrial
#: fibre route between two sites.
MAX_DISTANCE_M = 20_000e3
#: Meters per unit a distance may be given in.
DISTANCE_UNITS = {"km": 1e3, "m": 1.0}


@dataclass(frozen=True)
class WanLink:
    """The long link between the two gateways (real units)."""

    distance_m: float
    rate_bps: float = NIC_RATE_BPS
    buffer_bytes: int | None = None

    @property
    def delay_s(self) -> float:
        """One-way propagation: 5 ns/m (5 µs/km)."""
        return self.distance_m * PROPAGATION_S_PER_M

    @property
    def gateway_buffer_bytes(self) -> int:
        return (self.buffer_bytes if self.buffer_bytes is not None
                else default_buffer_bytes(self.rate_bps))

    def describe(self) -> str:
        return (f"{self.distance_m / 1e3:g} km at {format_rate(self.rate_bps)}, "
                f"{self.delay_s * 1e6:g} us one way, gateway buffer "
                f"{format_size(self.gateway_buffer_bytes)}")


def parse_distance_m(text: str) -> float:
    """'100km' or '2500m' -> meters; ParameterError otherwise."""
    word = str(text).strip().lower()
    unit = next((u for u in sorted(DISTANCE_UNITS, key=len, reverse=True) if word.endswith(u)),
                None)
    if unit is None:
        raise ParameterError("wan", text, "the distance needs a unit: e.g. 100km or 2500m")
    try:
        meters = float(word[:-len(unit)].strip()) * DISTANCE_UNITS[unit]
    except ValueError:
        raise ParameterError("wan", text, "expected a distance such as 100km") from None
    if not 0 < meters <= MAX_DISTANCE_M or not math.isfinite(meters):
        raise ParameterError("wan", text, f"the distance must be above 0 and at most "
                                          f"{MAX_DISTANCE_M / 1e3:g} km")
    return meters


def parse_wan(text: str) -> WanLink | None:
    """``"100km"``, ``"100km,rate=400G"``, ``"100km,rate=100G,buffer=64MB"`` -> WanLink;
    ``"off"`` or ``"none"`` -> None."""
    parts = [p.strip() for p in str(text).split(",")]
    if parts[0].lower() in ("off", "none", "") and len(parts) == 1:
        return None
    rate_bps, buffer_bytes = NIC_RATE_BPS, None
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep:
            raise ParameterError("wan", text, f"{part!r}: expected rate=R or buffer=B")
        if key == "rate":
            rate_bps = parse_rate_bps(value, "wan rate")
        elif key == "buffer":
            buffer_bytes = parse_size_bytes(value, "wan buffer")
        else:
            raise ParameterError("wan", text, f"unknown key {key!r}; expected rate or buffer")
    return WanLink(parse_distance_m(parts[0]), rate_bps, buffer_bytes)


class TwoDcs(FabricTopo):
    """Two copies of ``fabric`` (a topology spec) joined by gateways and a long link."""

    family = "wan"

    @classmethod
    def size(cls, fabric: str = "leafspine,2,2,2", wan: WanLink | None = None) -> TopoSize:
        inner = topo_size(fabric)
        top = _top_tier_switches(build_topo(fabric))
        return TopoSize(hosts=2 * inner.hosts, switches=2 * inner.switches + 2,
                        links=2 * inner.links + 2 * len(top) + 1)

    def build(self, fabric: str = "leafspine,2,2,2", wan: WanLink | None = None) -> None:
        wan = wan if wan is not None else WanLink(100e3)
        inner = build_topo(fabric)
        if inner.routing != "ecmp":
            raise ParameterError("fabric", fabric, f"a {inner.family} routes by "
                                 f"{inner.routing}; two DCs need least-cost (ECMP) routing")
        self._params = {"fabric": fabric, "distance_km": wan.distance_m / 1e3,
                        "wan_rate": wan.rate_bps}
        self.wan = wan
        self.link_costs = {**inner.link_costs, GATEWAY_TIER: GATEWAY_COST}
        top = _top_tier_switches(inner)
        gateway_tier = 1 + max(inner.nodeInfo(s)["tier"] for s in top)
        uplink_bps = max(wan.rate_bps, *(info["rate_bps"] for a, b, info in inner.fabric_links()
                                         if a in top or b in top))
        gateways = []
        for dc, prefix in enumerate(DCS):
            self._copy(inner, prefix, dc)
            gateway = self.add_switch(f"gw{prefix}", "gateway", gateway_tier, dc=dc)
            gateways.append(gateway)
            for switch in top:
                self.add_link(prefix + switch, gateway, rate_bps=uplink_bps,
                              delay_s=CORE_LINK_DELAY_S, tier=GATEWAY_TIER)
        self.add_link(*gateways, rate_bps=wan.rate_bps, delay_s=wan.delay_s, tier=WAN_TIER,
                      buffer_bytes=wan.gateway_buffer_bytes)

    def _copy(self, inner: FabricTopo, prefix: str, dc: int) -> None:
        """Every node and link of ``inner``, names prefixed, ports kept (a topology may
        give ports a meaning: railopt's GPU NIC is eth0)."""
        for node in inner.nodes():
            info = {k: v for k, v in inner.nodeInfo(node).items()
                    if k not in ("role", "tier", "dpid", "isSwitch")}
            if inner.role(node) == "host":
                self.add_host(prefix + node, dc=dc, **info)
            else:
                self.add_switch(prefix + node, inner.role(node), inner.nodeInfo(node)["tier"],
                                dc=dc, **info)
        for a, b, info in inner.fabric_links():
            self.addLink(prefix + a, prefix + b, port1=info["port1"], port2=info["port2"],
                         **{k: info[k] for k in ("rate_bps", "delay_s", "tier", "buffer_bytes")})


def _top_tier_switches(topo: FabricTopo) -> list[str]:
    """The switches of the highest tier (where a DC's border attaches)."""
    switches = [s for s in topo.switch_nodes() if topo.role(s) != "nvswitch"]
    if not switches:
        raise ParameterError("fabric", topo.describe(), "has no switch to attach a gateway to")
    tier = max(topo.nodeInfo(s)["tier"] for s in switches)
    return [s for s in switches if topo.nodeInfo(s)["tier"] == tier]


def two_dcs(fabric: str, wan: WanLink) -> TwoDcs:
    """Two copies of the fabric ``fabric`` joined by ``wan`` (ParameterError on a bad
    spec, a fabric not routed least-cost, or a size above the caps: `TwoDcs.size`)."""
    return TwoDcs(fabric=fabric, wan=wan)

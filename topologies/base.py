"""Common base of every fabric topology: a Mininet ``Topo`` that is pure data.

Node options (``topo.nodeInfo(name)``):
    role   -- 'host' | 'nvswitch' | 'leaf' | 'spine' | 'core' | 'edge' | 'agg' |
              'router' (dragonfly) | 'torus' (torus switch)
    tier   -- 0 for hosts, 1 for the first switch layer, 2, 3 upwards
    plus topology-specific coordinates: pod, server, gpu/rail, group, coord (tuple)
    and, for switches, a unique ``dpid`` so stock Mininet accepts any name and
    ``switch_latency_s``, the real port-to-port pipeline latency (no queueing, no
    serialization) from SWITCH_LATENCY_S by tier (nvswitch: NVSWITCH_LATENCY_S).

Link options (``topo.linkInfo(a, b)``) carry *real* values:
    rate_bps     -- real line rate in bit/s, per direction (e.g. 400e9)
    delay_s      -- real one-way propagation in seconds (cable length x 5 ns/m); a
                    switch's pipeline latency is its node's ``switch_latency_s``
    tier         -- link class, e.g. 'host-leaf', 'leaf-spine', 'spine-core', 'nvlink',
                    'local', 'global', 'torus-x'
    buffer_bytes -- real per-port egress buffer (bytes are not dilated)

Stock Mininet ignores these keys with its default ``Link`` class, so
``mn --custom topologies/mn.py --topo fattree,4`` works unchanged (``topologies.mn``
is the entry point). ``mn`` runs /usr/bin/python3 without the venv, so this module,
the topology files and what they import (``core.errors``, ``core.units``) use only
the standard library and Mininet. mn also copies every global name of a custom file
into its own globals, so topology files must not define names that mn uses
(``info``, ``error``, ``Host``, ``version``, ...).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from mininet.topo import Topo

from core.errors import ParameterError
from core.units import format_rate, parse_rate_bps, parse_time_s

# Defaults of a modern AI fabric (real units).
NIC_RATE_BPS = 400e9          # host NIC
LEAF_SPINE_RATE_BPS = 800e9   # first fabric tier
SPINE_CORE_RATE_BPS = 1.6e12  # second fabric tier
NVLINK_RATE_BPS = 3.6e12      # NVLink 4: 900 GB/s bidirectional = 450 GB/s = 3.6 Tb/s each way
#: Signal propagation in fibre (and about the same in twinax copper): ~2/3 c, 5 ns/m.
PROPAGATION_S_PER_M = 5e-9
# Cable length per link class (m): a NIC to its rack's switch (DAC/AOC, in the rack);
# leaf/edge to spine/agg across a row; spine/agg to core and dragonfly global links
# between rows or halls; NVLink on the board or tray.
HOST_CABLE_M = 3.0
FABRIC_CABLE_M = 30.0
CORE_CABLE_M = 100.0
NVLINK_CABLE_M = 1.0
HOST_LINK_DELAY_S = HOST_CABLE_M * PROPAGATION_S_PER_M      # 15 ns
FABRIC_LINK_DELAY_S = FABRIC_CABLE_M * PROPAGATION_S_PER_M  # 150 ns
CORE_LINK_DELAY_S = CORE_CABLE_M * PROPAGATION_S_PER_M      # 500 ns
NVLINK_DELAY_S = NVLINK_CABLE_M * PROPAGATION_S_PER_M       # 5 ns
#: Switch pipeline latency by switch tier (port to port, empty queue, beyond
#: serialization): a single-chip 25.6-51.2T Ethernet switch forwards in about
#: 600 ns-1 us; 600 ns at every tier unless changed here.
SWITCH_LATENCY_S: dict[int, float] = {1: 600e-9, 2: 600e-9, 3: 600e-9}
#: An NVSwitch forwards faster than an Ethernet switch (a few hundred ns).
NVSWITCH_LATENCY_S = 300e-9
#: A rate parameter as users give it: bit/s, or a string such as '400G' or '1.6T'.
Rate = str | float | int
#: Per-port buffer per 400G of port rate; a shallow-buffer ASIC gives a port a few MB.
BUFFER_BYTES_PER_400G = 8 * 1024 * 1024


#: Largest topology accepted, checked from the parameters before any graph is built.
#: `emu topo show` routes the graph (bisection, diameter): a torus of 1024 switches
#: takes about 7 s on one core, and a fabric is one network namespace per node.
MAX_HOSTS = 2048
MAX_SWITCHES = 1024
MAX_LINKS = 8192


@dataclass(frozen=True)
class TopoSize:
    """Node and link counts of a topology, as its parameters determine them."""

    hosts: int
    switches: int
    links: int


def check_size(family: str, size: TopoSize) -> TopoSize:
    """ParameterError naming the first count above its cap (MAX_HOSTS, ...)."""
    for what, count, cap in (("hosts", size.hosts, MAX_HOSTS),
                             ("switches", size.switches, MAX_SWITCHES),
                             ("links", size.links, MAX_LINKS)):
        if count > cap:
            raise ParameterError(what, count, f"a {family} of that size is too large; at most "
                                              f"{cap} {what} are supported")
    return size


def default_buffer_bytes(rate_bps: float) -> int:
    """Real per-port egress buffer, scaled linearly with the port rate."""
    return int(BUFFER_BYTES_PER_400G * rate_bps / 400e9)


def require_int(name: str, value: object, minimum: int = 1) -> int:
    """Validate an integer topology parameter; the error names the parameter."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ParameterError(name, value, "must be an integer")
    if value < minimum:
        raise ParameterError(name, value, f"must be >= {minimum}")
    return value


def require_positive(name: str, value: object) -> float:
    """Validate a positive real number (also given as a numeric string)."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParameterError(name, value, "must be a number") from None
    if not number > 0 or number == float("inf"):
        raise ParameterError(name, value, "must be a positive finite number")
    return number


def require_rate(name: str, value: object) -> float:
    """Validate a real link rate (bit/s, > 0); accepts '400G'-style strings."""

    return parse_rate_bps(value, name)  # type: ignore[arg-type]


def require_delay(name: str, value: object) -> float:
    """Validate a real delay (seconds, >= 0); accepts '1us'-style strings."""

    return parse_time_s(value, name)  # type: ignore[arg-type]


class FabricTopo(Topo):
    """Base class: adds role-tagged nodes and real-rate links, and a routing kind.

    ``routing`` tells the fabric builder how to route: 'ecmp' (all shortest paths,
    multipath with L4 hash: Clos and dragonfly minimal) or 'dor' (dimension-order,
    torus); ``link_costs`` weights link tiers for 'ecmp'. ``family`` is the name
    in the ``topos`` dicts.
    """

    routing: str = "ecmp"
    family: str = "fabric"
    #: Routing cost of a link by tier (default 1: 'ecmp' takes all shortest paths).
    link_costs: dict[str, int] = {}

    def __init__(self, *args, **params):
        self._dpid = 0
        # Counted from the parameters first: a huge graph is refused before it is built.
        own = {k: v for k, v in params.items() if k not in ("hopts", "sopts", "lopts")}
        known = type(self).checked_size(*args, **own)
        super().__init__(*args, **params)
        if known is None:  # a class without size(): checked once built
            check_size(self.family, TopoSize(len(self.host_nodes()), len(self.switch_nodes()),
                                             len(self.links())))

    @classmethod
    def checked_size(cls, *args, **params) -> TopoSize | None:
        """:meth:`size` of build()'s arguments (given as build() takes them),
        checked against the caps; builds nothing. None if the class has no size()."""
        signature = inspect.signature(cls.build)
        bound = signature.bind(None, *args, **params)  # TypeError as build() would raise
        positional: list = []
        named: dict = {}
        for name, value in list(bound.arguments.items())[1:]:  # drop self
            kind = signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                positional.extend(value)
            elif kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        size = cls.size(*positional, **named)
        return None if size is None else check_size(cls.family, size)

    @classmethod
    def size(cls, *args, **params) -> TopoSize | None:
        """Hosts, switches and links that build() would create, computed in constant
        time from build()'s parameters (all passed by name but build()'s ``*args``);
        raises build()'s ParameterErrors for the parameters that set the counts.
        Every registered topology defines it; None (here) defers the check until
        the graph is built."""
        return None

    def add_host(self, name: str, **info) -> str:
        return self.addHost(name, role="host", tier=0, **info)

    def add_switch(self, name: str, role: str, tier: int, **info) -> str:
        self._dpid += 1
        info.setdefault("switch_latency_s", NVSWITCH_LATENCY_S if role == "nvswitch"
                        else SWITCH_LATENCY_S.get(tier, SWITCH_LATENCY_S[1]))
        return self.addSwitch(name, role=role, tier=tier, dpid=f"{self._dpid:016x}", **info)

    def add_link(self, a: str, b: str, *, rate_bps: float, delay_s: float, tier: str,
                 buffer_bytes: int | None = None) -> None:
        self.addLink(a, b, rate_bps=rate_bps, delay_s=delay_s, tier=tier,
                     buffer_bytes=buffer_bytes if buffer_bytes is not None
                     else default_buffer_bytes(rate_bps))

    # Small read helpers used by the builder, the model and `emu topo show`.
    def role(self, node: str) -> str:
        return self.nodeInfo(node)["role"]

    def host_nodes(self) -> list[str]:
        return [n for n in self.nodes() if self.role(n) == "host"]

    def switch_nodes(self) -> list[str]:
        return [n for n in self.nodes() if self.role(n) != "host"]

    def fabric_links(self) -> list[tuple[str, str, dict]]:
        """Links as (node1, node2, info), sorted. Parallel links are rejected:
        routes and addresses name a link by its two end nodes."""
        links = self.links(sort=True, withInfo=True)
        if len({frozenset(link[:2]) for link in links}) != len(links):
            raise ParameterError("links", self.describe(), "parallel links between two "
                                                           "nodes are not supported")
        return links

    def describe(self) -> str:
        """One-line description with the parameters, for summaries."""

        def show(key: str, value: object) -> str:
            # Rates are stored in bit/s so that params() round-trips; print them as '400G'.
            return format_rate(value) if key.endswith("_rate") else str(value)  # type: ignore[arg-type]

        return f"{self.family}({', '.join(f'{k}={show(k, v)}' for k, v in self.params().items())})"

    def params(self) -> dict:
        """The parameters this instance was built with (set by subclasses)."""
        return dict(getattr(self, "_params", {}))

"""Routing modes beyond ECMP: the tables a switch decides from and each mode's decision (pure).

A fabric's ``routing`` is one of `ROUTING_MODES`. ``ecmp`` is the kernel's multipath
hash (``emu.ecmp_hashing``); the others run in each switch as an eBPF program
(emu/bpf/router.c, loaded by ``emu.lbrouter``) that makes, per RoCEv2 frame, the
decision written here in Python, from the same tables:

* `switch_tables`: a switch's ports (slots in port order, their MACs and the next
  hop's) and, per destination host, the slots of its equal-cost next hops, from
  ``topologies.routing`` and ``topologies.addressing``.
* ``spray``: `spray_choice`, a uniformly random member per frame (oblivious);
  ``spray-rr``: `round_robin_choice`, the members in turn per destination.
* ``flowlet``: `FlowletTable`, a flow (5-tuple) keeps its member while its frames
  are at most the gap apart, and draws a random member after a longer gap
  (LetFlow's rule; the gap must exceed the paths' delay difference, or a new
  flowlet overtakes the end of the last one).
* ``adaptive``: `least_queue_choice` over each member's egress queue now
  (`queue_now_scaled`: the backlog of a port draining at its emulated rate, from the
  ECN marker's state), per frame, read in whole frames, ties from the member after
  the one the destination took last, so that at equal queues its frames alternate;
  ``adaptive-flowlet``: the same choice per flowlet (`FlowletTable`).
* ``valiant`` and ``ugal`` (dragonfly only): through a random intermediate group,
  always or when UGAL-L's queue-times-hops comparison says so (``topologies.valiant``;
  `switch_tables` adds each switch's `GroupSlots`).

`DEFAULT_FLOWLET_GAP_S`: 10 µs of real time (dilated by S in the switch). A flowlet
may take a new path only when the previous one has drained from the old path, so
the gap must exceed the largest delay difference between the equal-cost paths
(Kandula et al., FLARE, CCR 2007; Vanini et al., LetFlow, NSDI 2017, which finds
gaps of the order of a path's RTT work). On these fabrics the paths have equal
propagation delay, so the difference is queueing: under DCQCN a port's queue
stays near Kmax, 400 KB at 400 Gb/s = 8 µs (``core.ecn``: the reference
thresholds), so 10 µs covers one such queue. CONGA's 500 µs (10 Gb/s TCP) would
make every RDMA flow one flowlet.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from core.errors import ParameterError
from core.units import parse_time_s
from topologies.addressing import AddressPlan
from topologies.base import FabricTopo
from topologies.routing import DownLinks, Routes
from topologies.valiant import MAX_HOPS, GroupRoutes, group_routes

ROUTING_MODES = ("ecmp", "spray", "spray-rr", "flowlet", "adaptive", "adaptive-flowlet",
                 "valiant", "ugal")
#: The modes that route through intermediate groups (``topologies.valiant``).
GROUP_MODES = ("valiant", "ugal")
DEFAULT_FLOWLET_GAP_S = 10e-6
#: The switch program's table sizes (emu/bpf/router.c: MAX_PORTS, MAX_NH).
MAX_PORTS = 64
MAX_NEXT_HOPS = 16
#: The virtual queue's scaled bytes per byte (emu/bpf/marker.c: SCALE).
VQ_SCALE = 8_000_000_000
_U64_MAX = 2**64 - 1


def parse_routing(value: object) -> str:
    """One of `ROUTING_MODES`, case-insensitive, returned in lower case."""
    word = value.strip().lower() if isinstance(value, str) else None
    if word not in ROUTING_MODES:
        raise ParameterError("routing", value, f"choose one of {' | '.join(ROUTING_MODES)}")
    return word


def parse_flowlet_gap_s(value: object) -> float:
    """The flowlet gap in real seconds: a time (``10us``) or a number of seconds, in
    (0, 1 s)."""
    if not isinstance(value, (str, int, float)) or not 0 < parse_time_s(value, "flowlet_gap") < 1:
        raise ParameterError("flowlet_gap", value, "must be a time in (0, 1 s), e.g. 10us")
    return parse_time_s(value, "flowlet_gap")


@dataclass(frozen=True)
class PortSlot:
    """One port of a switch as its routing program sees it."""

    ifname: str
    peer_node: str
    mac: str
    peer_mac: str


@dataclass(frozen=True)
class DestHops:
    """valiant / ugal: a destination host's group, the links to it on the fabric's
    routes, and through each group (`GroupRoutes.via_hops`, 0 for none)."""

    group: int
    hops: int
    via_hops: tuple[int, ...]


@dataclass(frozen=True)
class GroupSlots:
    """valiant / ugal: a switch's group, the fabric's number of groups, the slots of
    its host ports (a frame from one is at its source switch), the slots of its next
    hops toward each other group, and per destination host IP its `DestHops`."""

    group: int
    groups: int
    host_slots: tuple[int, ...]
    to_group: dict[int, tuple[int, ...]]
    dests: dict[str, DestHops]


@dataclass(frozen=True)
class SwitchTables:
    """A switch's ports in port order (their index is the slot) and, per destination
    host IP, the slots of its equal-cost next hops in the routes' (sorted) order;
    under valiant and ugal also its `GroupSlots`."""

    ports: tuple[PortSlot, ...]
    dests: dict[str, tuple[int, ...]] = field(default_factory=dict)
    groups: GroupSlots | None = None


def fabric_tables(topo: FabricTopo, plan: AddressPlan, routes: Routes, mode: str,
                  down: DownLinks = frozenset()) -> dict[str, SwitchTables]:
    """Every switch's tables under routing ``mode`` (`switch_tables`), around the
    ``down`` links that ``routes`` avoid."""
    gr = group_routes(topo, routes, down) if mode in GROUP_MODES else None
    return {s: switch_tables(plan, routes, s, gr) for s in topo.switch_nodes()}


def switch_tables(plan: AddressPlan, routes: Routes, switch: str,
                  groups: GroupRoutes | None = None) -> SwitchTables:
    """``switch``'s tables from the address plan and the routes, and its `GroupSlots`
    from ``groups`` when given (ParameterError when it has more ports or next hops
    than the switch program holds)."""
    ifaces = plan.interfaces[switch]
    if len(ifaces) > MAX_PORTS:
        raise ParameterError("routing", switch, f"has {len(ifaces)} ports; the switch "
                                                f"program holds {MAX_PORTS}")
    slot_of = {i.peer_node: n for n, i in enumerate(ifaces)}
    dests = {}
    for dst, hops in routes.next_hops[switch].items():
        if not hops:
            continue
        if len(hops) > MAX_NEXT_HOPS:
            raise ParameterError("routing", switch, f"has {len(hops)} next hops toward {dst}; "
                                                    f"the switch program holds {MAX_NEXT_HOPS}")
        dests[plan.host_ip[dst]] = tuple(slot_of[h] for h in hops)
    return SwitchTables(tuple(PortSlot(i.ifname, i.peer_node, i.mac, i.peer_mac)
                              for i in ifaces), dests,
                        None if groups is None else _group_slots(plan, routes, switch, groups, slot_of))


def _group_slots(plan: AddressPlan, routes: Routes, switch: str, gr: GroupRoutes,
                 slot_of: dict[str, int]) -> GroupSlots:
    to_group = {grp: tuple(slot_of[h] for h in hops[:MAX_NEXT_HOPS])
                for grp, hops in gr.to_group[switch].items() if hops}
    dests = {plan.host_ip[dst]: DestHops(
        gr.group_of[dst], min(MAX_HOPS, gr.hops_to_host[dst][switch]),
        tuple(gr.via_hops(switch, grp, dst) if grp in to_group else 0
              for grp in range(gr.groups)))
        for dst in routes.hosts if routes.next_hops[switch].get(dst)}
    hosts = set(routes.hosts)
    return GroupSlots(gr.group_of[switch], gr.groups,
                      tuple(n for peer, n in slot_of.items() if peer in hosts), to_group, dests)


# ----------------------------------------------------------------------------- decisions

def spray_choice(members: int, rnd: int) -> int:
    """Oblivious spraying: the member a random 32-bit draw ``rnd`` picks."""
    return rnd % members


def round_robin_choice(turn: int, members: int) -> int:
    """Round-robin spraying: the member whose turn it is (the destination's counter)."""
    return turn % members


@dataclass
class FlowletTable:
    """Flowlet switching: each flow's member and the time of its last frame."""

    gap_ns: int
    entries: dict[Hashable, tuple[int, int]] = field(default_factory=dict)
    flowlets: int = 0

    def choose(self, flow: Hashable, now_ns: int, members: int, fresh: int) -> int:
        """The member of ``flow``'s frame at ``now_ns``: its flowlet's while the gap
        since its last frame is at most ``gap_ns``, else ``fresh``, a new flowlet's
        (`spray_choice` under ``flowlet``, `least_queue_choice` under ``adaptive-flowlet``)."""
        if members == 1:  # no choice to keep: the switch keeps no flowlet either
            return 0
        last = self.entries.get(flow)
        if last is not None and now_ns - last[0] <= self.gap_ns and last[1] < members:
            member = last[1]
        else:
            member = fresh
            self.flowlets += 1
        self.entries[flow] = (now_ns, member)
        return member


def max_idle_ns(rate_emu_bps: float) -> int:
    """Idle time beyond which a port's queue is surely empty (as marker.c guards the
    refill ``tokens + delta * rate`` against overflow)."""
    return (_U64_MAX // 2) // max(1, round(rate_emu_bps))


def queue_now_scaled(vq_scaled: int, tokens_scaled: int, t_last_ns: int, now_ns: int,
                     rate_emu_bps: float, burst_scaled: int) -> int:
    """A port's backlog at ``now_ns`` (scaled bytes) as a port sending at its emulated
    rate holds it: the marker's queue after its last frame at ``t_last_ns`` plus what
    the HTB bucket (``burst_scaled`` deep) has sent ahead of that rate, drained since.
    The virtual queue alone reads 0 both on an idle port and on one whose bucket has
    just sent a burst."""
    delta = max(0, now_ns - t_last_ns)
    if delta > max_idle_ns(rate_emu_bps):
        return 0
    backlog = vq_scaled + max(0, burst_scaled - tokens_scaled)
    return max(0, backlog - delta * max(1, round(rate_emu_bps)))


def least_queue_choice(queues: Sequence[int], start: int, quantum: int = 1) -> int:
    """Adaptive routing: the member with the shortest queue in units of ``quantum``;
    among equal ones the first from ``start`` on (under ``adaptive`` the member after
    the destination's last choice, under ``adaptive-flowlet`` and ``ugal`` a random one)."""
    n = len(queues)
    order = [(start + i) % n for i in range(n)]
    return min(order, key=lambda m: queues[m] // max(1, quantum))


"""Failures scheduled during a run: their syntax, their typed form, and their check
against a topology (pure: nothing here touches a kernel).

``faults=a1-c2:down@50us;e3:down@80us;a2-c3:rate=25%@0;a3-c1:flap=20us/10us@0;
e1-a1:up@120us;a1-c1:loss=1e-3@0`` is a ';'-separated list of ``TARGET:ACTION@TIME``:

* TARGET is a link ``A-B`` or a switch ``A``, by node name (``a1``) or by role and
  rank among the switches of that role (``agg1``: the first 'agg' switch);
* ACTION is ``down`` or ``up`` (a link, or every link of a switch), ``rate=F`` (the
  link runs at the fraction F of its rate, ``25%`` or ``0.25``; ``100%`` restores it),
  ``flap=UP/DOWN`` (from TIME on, the link stays up for UP, then down for DOWN, over
  and over, until an ``up`` or ``down`` of the link), ``loss=P`` (each frame crossing
  the link, either way, is lost with probability P; ``0`` ends it);
* TIME is real-fabric time after the run's start (``50us``, ``1.5ms``, ``0``); the
  fabric applies it dilated by S.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from core.errors import ParameterError
from core.units import parse_time_s
from topologies.base import FabricTopo
from topologies.routing import compute_routes

Kind = Literal["down", "up", "rate", "flap", "loss"]
KINDS: tuple[Kind, ...] = ("down", "up", "rate", "flap", "loss")
#: Loss is drawn per frame by the kernel as one in N (``tc`` gact's netrand): P is
#: rounded to 1/N, so it is at most 1 and at least this.
MIN_LOSS = 1e-6
#: A flap shorter than this (real) would put more link changes per second of wall time
#: at the default S than the machine can apply on time.
MIN_FLAP_PHASE_S = 1e-6
_ITEM = re.compile(r"\s*([A-Za-z0-9_.]+)(?:-([A-Za-z0-9_.]+))?\s*:\s*([a-z]+)\s*(?:=\s*([^@]*?))?"
                   r"\s*@\s*(\S+)\s*")


@dataclass(frozen=True)
class Fault:
    """One failure event: ``nodes`` is a link's two ends or a switch alone; ``at_s`` is
    real time after the run's start. ``value``: the rate fraction (rate) or the frame
    loss probability (loss); ``up_s``/``down_s``: a flap's phases."""

    kind: Kind
    nodes: tuple[str, ...]
    at_s: float
    value: float | None = None
    up_s: float | None = None
    down_s: float | None = None

    @property
    def is_link(self) -> bool:
        return len(self.nodes) == 2

    @property
    def target(self) -> str:
        return "-".join(self.nodes)

    def text(self) -> str:
        """The fault as ``parse_faults`` reads it back."""
        action: str = self.kind
        if self.kind in ("rate", "loss"):
            action = f"{self.kind}={self.value:.15g}"
        elif self.kind == "flap":
            action = f"flap={_us(self.up_s or 0.0)}/{_us(self.down_s or 0.0)}"
        return f"{self.target}:{action}@{_us(self.at_s)}"


def _us(time_s: float) -> str:
    return f"{time_s * 1e6:.15g}us"


def _fraction(text: str, item: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ParameterError("faults", item, "rate= takes a fraction such as 25% or 0.25") from None
    if not (math.isfinite(value) and 0 < value <= 1):
        raise ParameterError("faults", item, "rate= must be above 0 and at most 100%")
    return value


def _loss(text: str, item: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ParameterError("faults", item, "loss= takes a probability such as 1e-3") from None
    if not (math.isfinite(value) and (value == 0 or MIN_LOSS <= value <= 1)):
        raise ParameterError("faults", item, f"loss= must be 0 or in [{MIN_LOSS:g}, 1]")
    return value


def _flap(text: str, item: str) -> tuple[float, float]:
    up, slash, down = text.partition("/")
    if not slash:
        raise ParameterError("faults", item, "flap= takes UP/DOWN durations, e.g. 20us/10us")
    phases = (parse_time_s(up.strip(), "flap up"), parse_time_s(down.strip(), "flap down"))
    if min(phases) < MIN_FLAP_PHASE_S:
        raise ParameterError("faults", item, f"a flap's phases must be at least "
                                             f"{MIN_FLAP_PHASE_S * 1e6:g}us")
    return phases


def parse_fault(item: str) -> Fault:
    """One ``TARGET:ACTION@TIME`` (module docstring); ParameterError if malformed."""
    m = _ITEM.fullmatch(item)
    if not m:
        raise ParameterError("faults", item, "expected TARGET:ACTION@TIME, e.g. a1-c2:down@50us")
    a, b, kind, arg, at = m.groups()
    nodes = (a,) if b is None else (a, b)
    if kind not in KINDS:
        raise ParameterError("faults", item, f"unknown action {kind!r}: {' | '.join(KINDS)}")
    if a == b:
        raise ParameterError("faults", item, "a link joins two different nodes")
    if (arg is None) != (kind in ("down", "up")):
        raise ParameterError("faults", item, f"{kind} takes " +
                             ("no value" if kind in ("down", "up") else "a value: " + kind + "=..."))
    if b is None and kind not in ("down", "up"):
        raise ParameterError("faults", item, f"{kind} applies to a link (A-B), not a switch")
    at_s = parse_time_s(at, "fault time")
    if kind == "rate":
        return Fault(kind, nodes, at_s, value=_fraction(arg.strip(), item))
    if kind == "loss":
        return Fault(kind, nodes, at_s, value=_loss(arg.strip(), item))
    if kind == "flap":
        up_s, down_s = _flap(arg, item)
        return Fault(kind, nodes, at_s, up_s=up_s, down_s=down_s)
    return Fault(kind, nodes, at_s)


def parse_faults(value: object) -> list[Fault]:
    """``'none'``/empty -> []; a ';'-separated list or a list of items (text or Fault)
    -> the Faults in time order (stable for equal times)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return []
    if isinstance(value, str):
        items: Iterable[object] = [x for x in value.split(";") if x.strip()]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise ParameterError("faults", value, "expected TARGET:ACTION@TIME;...")
    faults = [x if isinstance(x, Fault) else parse_fault(x) if isinstance(x, str)
              else _refuse(x) for x in items]
    return sorted(faults, key=lambda f: f.at_s)


def _refuse(item: object) -> Fault:
    raise ParameterError("faults", item, "expected TARGET:ACTION@TIME")


def format_faults(faults: Sequence[Fault]) -> str:
    return ";".join(f.text() for f in faults) or "none"


# ----------------------------------------------------------------------------- topology

def aliases(topo: FabricTopo) -> dict[str, str]:
    """``role`` + rank (1-based, in the topology's switch order) -> switch name."""
    seen: dict[str, int] = {}
    out = {}
    for node in topo.switch_nodes():
        role = topo.role(node)
        seen[role] = seen.get(role, 0) + 1
        out[f"{role}{seen[role]}"] = node
    return out


def resolve(faults: Sequence[Fault], topo: FabricTopo, spec: str = "the topology") -> list[Fault]:
    """``faults`` with their nodes named as ``topo`` names them; ParameterError for a
    node or link it lacks, a host taken down, or a switch left isolated at the end
    with hosts behind it (their traffic could never arrive)."""
    names = set(topo.nodes())
    alias = aliases(topo)
    links = {frozenset(link) for link in topo.links()}
    out = []
    for f in faults:
        nodes = []
        for node in f.nodes:
            name = node if node in names else alias.get(node)
            if name is None:
                known = ", ".join([*topo.switch_nodes()[:4], *list(alias)[:2]])
                raise ParameterError("faults", f.text(), f"no node {node!r} on {spec} "
                                     f"(switches e.g. {known}, ...)")
            nodes.append(name)
        if f.is_link and frozenset(nodes) not in links:
            raise ParameterError("faults", f.text(), f"no link {nodes[0]}-{nodes[1]} on {spec}")
        if not f.is_link and topo.role(nodes[0]) == "host":
            raise ParameterError("faults", f.text(), "a host is not a switch; take its link "
                                 "down instead (HOST-SWITCH:down)")
        out.append(Fault(f.kind, tuple(nodes), f.at_s, f.value, f.up_s, f.down_s))
    _check_reachable_at_end(out, topo, spec)
    return out


def links_of(topo: FabricTopo, switch: str) -> list[frozenset[str]]:
    return [frozenset(link) for link in topo.links() if switch in link]


def links_going_down(faults: Sequence[Fault], topo: FabricTopo) -> frozenset[frozenset[str]]:
    """Every link ``faults`` (resolved) may take physically down: a link's own down or
    flap, every link of a switch that goes down."""
    links: set[frozenset[str]] = set()
    for f in faults:
        if f.is_link and f.kind in ("down", "flap"):
            links.add(frozenset(f.nodes))
        elif not f.is_link and f.kind == "down":
            links.update(links_of(topo, f.nodes[0]))
    return frozenset(links)


def down_at_end(faults: Sequence[Fault], topo: FabricTopo) -> frozenset[frozenset[str]]:
    """The links still down after the last fault (a flap ends up, so it is not)."""
    link_down: dict[frozenset[str], bool] = {}
    switch_down: set[str] = set()
    for f in faults:
        if f.is_link and f.kind in ("down", "up", "flap"):
            link_down[frozenset(f.nodes)] = f.kind == "down"
        elif not f.is_link:
            (switch_down.add if f.kind == "down" else switch_down.discard)(f.nodes[0])
    down = {link for link, is_down in link_down.items() if is_down}
    for switch in switch_down:
        down.update(links_of(topo, switch))
    return frozenset(down)


def _check_reachable_at_end(faults: Sequence[Fault], topo: FabricTopo, spec: str) -> None:
    down = down_at_end(faults, topo)
    if not down:
        return
    routes = compute_routes(topo, down)
    hosts = topo.host_nodes()
    for src in hosts:
        lost = [dst for dst in hosts if dst != src and dst not in routes.next_hops[src]]
        if lost:
            raise ParameterError("faults", format_faults(faults),
                                 f"leaves {src} without a path to {lost[0]} on {spec} for "
                                 "good: its traffic could never arrive (bring a link back "
                                 "up later, e.g. A-B:up@T)")


def check_times(faults: Sequence[Fault], run_s: float, what: str) -> None:
    """Every fault starts before ``run_s`` (real s), the run's known or modelled length."""
    late = [f for f in faults if f.at_s >= run_s]
    if late:
        raise ParameterError("faults", late[0].text(), f"starts at {late[0].at_s * 1e6:g}us, "
                             f"after {what} ends ({run_s * 1e6:.4g}us)")


# ----------------------------------------------------------------------------- timeline

Link = frozenset[str]
Op = Literal["link", "learn", "rate", "loss"]


@dataclass(frozen=True)
class Action:
    """What happens to the fabric at ``at_s`` (real s after the start): ``link``, the
    state its two ends give a link changes (down: at once; up: once the link has stayed
    up for the hold-down, `timeline`); ``learn``, the rest of the fabric learns that
    state and reroutes; ``rate``/``loss``: the link's rate fraction or loss probability
    (``value``) from then on. ``fault``: the event's own text, for the record."""

    at_s: float
    op: Op
    link: Link
    up: bool = True
    value: float = 0.0
    fault: str = ""


# Ranks of the timeline's events at equal times: faults and flap toggles, then
# detections, then hold-down expiries (a link down at the very instant its hold-down
# ends is not re-admitted).
_CHANGE, _DETECT, _HOLD = 0, 1, 2


def timeline(faults: Sequence[Fault], topo: FabricTopo, detect_delay_s: float,
             holddown_s: float = 0.0) -> Iterator[Action]:
    """The actions ``faults`` (resolved: `resolve`) cause, in time order, without end
    while a link flaps. A link is physically down while it is down itself (down, a
    flap's down phase) or a switch at either end is. Its ends take it out of their
    multipath sets at once when it goes down, and back only once it has stayed up for
    ``holddown_s`` (an interface's up hold-time: Junos ``hold-time up``, IOS
    ``carrier-delay up``: a transition to up is not advertised until the interface has
    remained up that long; 0: at once); the rest of the fabric learns the state the
    ends give it ``detect_delay_s`` after it, if it still holds then (as BFD misses a
    flap shorter than its detection time). So a link flapping with up phases no longer
    than the hold-down is down from its first down phase until the hold-down after
    the flap ends (`held_down_from`)."""
    return _Timeline(topo, detect_delay_s, holddown_s).run(faults)


def held_down_from(flap: Fault, holddown_s: float) -> float | None:
    """When a flap takes its link down for as long as it flaps (real s), or None: a
    flap whose up phases are no longer than the hold-down never brings the link back
    (`timeline`), so from its first down phase it is a link down."""
    if flap.kind != "flap" or not 0 < float(flap.up_s or 0.0) <= holddown_s:
        return None
    return flap.at_s + float(flap.up_s or 0.0)


class _Timeline:
    """`timeline`'s state: the faults in force and each link's physical state, the
    state its ends give it and the state the rest of the fabric has learned."""

    def __init__(self, topo: FabricTopo, detect_delay_s: float, holddown_s: float) -> None:
        self.topo = topo
        self.detect_delay_s = detect_delay_s
        self.holddown_s = holddown_s
        self.heap: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.own_down: set[Link] = set()       # a link down by its own faults
        self.switches_down: set[str] = set()
        self.flapping: dict[Link, Fault] = {}  # the flap in force on a link
        # Flaps whose toggles wait while a switch at an end is down: they change nothing
        # then, and toggling on would spin the timeline without yielding.
        self.suspended: set[Link] = set()
        self.physical_down: set[Link] = set()
        self.physical_at: dict[Link, float] = {}  # its last physical change
        self.ends_down: set[Link] = set()         # down as its ends give it
        self.ends_at: dict[Link, float] = {}
        self.learned_down: set[Link] = set()
        self.cause: dict[Link, str] = {}

    def push(self, at_s: float, rank: int, item: object) -> None:
        heapq.heappush(self.heap, (at_s, rank, self.seq, item))
        self.seq += 1

    def run(self, faults: Sequence[Fault]) -> Iterator[Action]:
        for f in faults:
            self.push(f.at_s, _CHANGE, f)
        while self.heap:
            at_s, rank, _, item = heapq.heappop(self.heap)
            if rank == _DETECT:  # (link, state its ends gave it, since when)
                link, down, since = item  # type: ignore[misc]
                if self.ends_at.get(link) == since and (link in self.learned_down) != down:
                    (self.learned_down.add if down else self.learned_down.discard)(link)
                    yield Action(at_s, "learn", link, up=not down, fault=self.cause[link])
            elif rank == _HOLD:  # (link, when it came up)
                link, since = item  # type: ignore[misc]
                if self.physical_at.get(link) == since and link not in self.physical_down:
                    yield from self.report(at_s, link, down=False)
            elif isinstance(item, Fault) and item.kind in ("rate", "loss"):
                yield Action(at_s, item.kind, frozenset(item.nodes), value=float(item.value or 0.0),
                             fault=item.text())
            else:
                text, touched = self.change(at_s, item)
                for link in touched:
                    yield from self.physical(at_s, link, text)

    def change(self, at_s: float, item: object) -> tuple[str, list[Link]]:
        """Apply a link or switch fault, or a flap's toggle: its text and the links whose
        physical state it may change."""
        if isinstance(item, tuple):  # a flap's toggle: (its fault, the phase that starts)
            f, down = item
            link = frozenset(f.nodes)
            if self.flapping.get(link) is not f:
                return f.text(), []
            (self.own_down.add if down else self.own_down.discard)(link)
            if link & self.switches_down:
                self.suspended.add(link)
                return f.text(), []
            # No up phase of this flap outlasts the hold-down: its ends give the link
            # down until the flap ends whatever it does, so it stays down (and the
            # timeline does not spin through toggles that change nothing).
            if not (down and held_down_from(f, self.holddown_s) is not None):
                self.push(at_s + (f.down_s if down else f.up_s), _CHANGE, (f, not down))
            return f.text(), [link]
        f = item
        assert isinstance(f, Fault)
        link = frozenset(f.nodes)
        if not f.is_link:
            (self.switches_down.add if f.kind == "down" else self.switches_down.discard)(f.nodes[0])
            links = links_of(self.topo, f.nodes[0])
            for link in [x for x in links if x in self.suspended and not x & self.switches_down]:
                self.resume(at_s, link)
            return f.text(), links
        self.flapping.pop(link, None)
        self.suspended.discard(link)
        if f.kind == "flap":
            self.flapping[link] = f
            self.push(at_s + float(f.up_s or 0.0), _CHANGE, (f, True))
            return f.text(), []
        (self.own_down.add if f.kind == "down" else self.own_down.discard)(link)
        return f.text(), [link]

    def resume(self, at_s: float, link: Link) -> None:
        """A suspended flap picks up its phase at ``at_s``, as if it had toggled all along
        (a flap is the link's own state, which the switch being down only hid)."""
        self.suspended.discard(link)
        f = self.flapping[link]
        up_s, down_s = float(f.up_s or 0.0), float(f.down_s or 0.0)
        into_s = (at_s - f.at_s) % (up_s + down_s)
        down = into_s >= up_s
        (self.own_down.add if down else self.own_down.discard)(link)
        left_s = (up_s + down_s - into_s) if down else (up_s - into_s)
        self.push(at_s + left_s, _CHANGE, (f, not down))

    def physical(self, at_s: float, link: Link, cause: str) -> Iterator[Action]:
        """The link's physical state after a change (``cause``): a down reaches its ends
        at once, an up once the hold-down has passed without another down."""
        down = link in self.own_down or bool(link & self.switches_down)
        if down == (link in self.physical_down):
            return
        (self.physical_down.add if down else self.physical_down.discard)(link)
        self.physical_at[link] = at_s
        self.cause[link] = cause
        if not down and self.holddown_s > 0:
            self.push(at_s + self.holddown_s, _HOLD, (link, at_s))
        elif not (down and link in self.ends_down):  # down while held: its ends knew
            yield from self.report(at_s, link, down=down)

    def report(self, at_s: float, link: Link, down: bool) -> Iterator[Action]:
        """The link's ends give it a new state; the rest of the fabric checks it after
        the detection delay."""
        (self.ends_down.add if down else self.ends_down.discard)(link)
        self.ends_at[link] = at_s
        yield Action(at_s, "link", link, up=not down, fault=self.cause[link])
        self.push(at_s + self.detect_delay_s, _DETECT, (link, down, at_s))

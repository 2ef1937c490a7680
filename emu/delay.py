"""Link propagation delay: a netem delay line in front of each port's shaper (docs/design.md).

With delay on, a port's egress is

    root netem 2: delay=d·S limit=N -> htb 1: (default 1:10) -> class 1:10 rate=ceil=R/S
        -> leaf 10: bfifo limit=buffer  (or RED, the ``red`` ECN back end)

Why netem at the root and not as the HTB class's leaf:

* netem delays at *enqueue*: a packet waits in netem's time-ordered fifo until its
  time_to_send (arrival + d); on the next dequeue every due packet is handed to the
  child qdisc, and the parent dequeues from the child. So on one egress Linux can only
  give "propagation, then queue", whatever the tree. For a constant per-port delay this
  is the real "queue at the port, then propagation": a FIFO drained at a fixed rate is
  shift-invariant, so each packet leaves at the same time in either order and the
  buffer holds the same bytes (d later), hence drops the same packets.
* With netem at the root the port's queue is exactly the one without delay: HTB at R/S
  over the byte-limited real buffer (or RED, which then averages the port's queue and
  not the bytes in flight), still at handle 10: where telemetry reads it. This is the
  netem documentation's recipe for delay with rate control (netem root, shaper child).
* The other order (HTB class -> netem -> bfifo) makes HTB see the port's backlog
  through netem's qlen, which before Linux 6.13 (commit f8d4bc455047, "netem: account
  for backlog updates from child qdisc") counted only the packets in netem's own fifo:
  once that is empty HTB deactivates the class though the child still holds a queue,
  which then waits for the next arrival (read from the kernel source; such kernels
  are still in the field).

Placement: netem orphans a packet from its socket at enqueue, so a host's own sender
would no longer be pushed back by its NIC queue (send-buffer EAGAIN, ENOBUFS from a
full bfifo): the NIC model's lossless transmit queue would turn into drops. Host
egress ports therefore get no delay line; a host link's delay for *both* directions
sits on the switch's port toward the host (2d). Every round-trip time is exact, and
so is every host-to-host one-way delay when the two hosts' links have equal delays
(they do in every topology here: the first and last links of a path are the same tier).

The planning here is pure (no netlink, unit-tested without root); ``emu.shaping``
applies it, and ``probe_netem`` tries the real chain once in a scratch namespace.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import CapabilityError, ParameterError
from core.scaling import Scale
from core.units import parse_bool
from emu.runs import NamespaceSet
from emu.shaping import NETEM_RESOLUTION_S, NetemOptions, shape_port

if TYPE_CHECKING:
    from topologies.addressing import AddressPlan
    from topologies.base import FabricTopo

#: The kernel's psched tick (64 ns since Linux 2.6.31); netem's legacy delay field is
#: a u32 count of ticks, so the longest delay pyroute2 can express is 2^32-1 ticks.
PSCHED_TICK_NS = 64
NETEM_MAX_DELAY_US = (2**32 - 1) * PSCHED_TICK_NS // 1000
#: The smallest Ethernet frame: the most packets a byte count can be made of.
MIN_FRAME_BYTES = 64
#: netem's own default limit; never go below it.
NETEM_LIMIT_FLOOR = 1000
NETEM_LIMIT_MAX = 2**32 - 1
DELAY_CHOICES = ("auto", "on", "off")


def port_delay_s(link_delay_s: float, node_is_host: bool, peer_is_host: bool) -> float:
    """Real delay to put on the egress ``node -> peer`` of a link with one-way delay d.

    A host's uplink carries none and the switch's downlink both directions (2d): netem
    would orphan the host sender's frames and defeat its NIC queue's push-back (module
    docstring). Host-host and switch-switch links keep d on each side.
    """
    if link_delay_s < 0 or not math.isfinite(link_delay_s):
        raise ParameterError("delay_s", link_delay_s, "a link delay must be finite and >= 0")
    if node_is_host and not peer_is_host:
        return 0.0
    if peer_is_host and not node_is_host:
        return 2.0 * link_delay_s
    return link_delay_s


def netem_delay_us(delay_real_s: float, scale: Scale) -> int:
    """Dilated delay (real x S) in netem's whole microseconds; 0 if it rounds to nothing.

    Raises ParameterError, suggesting a smaller S, when the dilated delay exceeds what
    netem can express (2^32-1 psched ticks, about 275 s).
    """
    if delay_real_s < 0 or not math.isfinite(delay_real_s):
        raise ParameterError("delay_s", delay_real_s, "a link delay must be finite and >= 0")
    delay_us = round(scale.time_emu_s(delay_real_s) / NETEM_RESOLUTION_S)
    if delay_us > NETEM_MAX_DELAY_US:
        most = NETEM_MAX_DELAY_US * NETEM_RESOLUTION_S / delay_real_s
        raise ParameterError(
            "scale", scale.factor,
            f"a {delay_real_s * 1e6:g} µs link delay dilates to "
            f"{scale.time_emu_s(delay_real_s):.0f} s emulated, beyond the "
            f"{NETEM_MAX_DELAY_US * NETEM_RESOLUTION_S:.0f} s netem can delay; use a scale "
            f"factor of at most {math.floor(most)} (or run with link delay off)")
    return int(delay_us)


def netem_limit_packets(arrival_rate_emu_bps: float, delay_emu_s: float,
                        buffer_bytes: int) -> int:
    """netem's limit (packets) so that it never drops on its own.

    Depending on the kernel the limit counts the packets in netem's own fifo only, or
    those plus its child's (since commit 4185701fcce6, 2026): at most what can
    arrive during one delay (the node's total ingress rate x d, bytes) plus the port's
    byte buffer, all in minimum-size 64 B frames. Rate x delay is invariant under
    dilation, so this is the real bandwidth-delay product. The limit only caps a count:
    netem allocates nothing for it, memory follows the packets actually held.
    """
    in_flight_bytes = max(0.0, arrival_rate_emu_bps) / 8 * max(0.0, delay_emu_s)
    packets = math.ceil((in_flight_bytes + max(0, buffer_bytes)) / MIN_FRAME_BYTES)
    return int(min(NETEM_LIMIT_MAX, max(NETEM_LIMIT_FLOOR, packets)))


def netem_options(delay_real_s: float, scale: Scale, *, arrival_rate_emu_bps: float,
                  buffer_bytes: int) -> NetemOptions | None:
    """The netem options of one port, or None when there is no delay to emulate
    (zero, or below netem's 1 µs resolution once dilated: the caller notes it)."""
    delay_us = netem_delay_us(delay_real_s, scale)
    if delay_us == 0:
        return None
    limit = netem_limit_packets(arrival_rate_emu_bps, delay_us * NETEM_RESOLUTION_S, buffer_bytes)
    return NetemOptions(delay_us, limit)


@dataclass
class DelayPlan:
    """Every egress port's delay line, keyed (node, peer): netem options, the real delay
    each emulates after rounding (ports without a delay line are absent), and notes."""

    netem: dict[tuple[str, str], NetemOptions] = field(default_factory=dict)
    delay_s: dict[tuple[str, str], float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def plan_delays(topo: FabricTopo, plan: AddressPlan, scale: Scale) -> DelayPlan:
    """Plan the delay line of every port of ``topo`` (ParameterError if one cannot be
    expressed). A port's possible arrivals: all its node's links at line rate."""
    out = DelayPlan()
    is_host = {n: topo.role(n) == "host" for n in topo.nodes()}
    ingress_emu = {n: sum(scale.rate_emu_bps(i.rate_bps) for i in plan.interfaces[n])
                   for n in topo.nodes()}
    too_fine, worst_rel = 0, 0.0
    for node in topo.nodes():
        for iface in plan.interfaces[node]:
            want = port_delay_s(iface.delay_s, is_host[node], is_host[iface.peer_node])
            opts = netem_options(want, scale, arrival_rate_emu_bps=ingress_emu[node],
                                 buffer_bytes=iface.buffer_bytes)
            if opts is None:
                too_fine += want > 0
                continue
            got = opts.real_delay_s(scale)
            worst_rel = max(worst_rel, abs(got - want) / want)
            out.netem[(node, iface.peer_node)] = opts
            out.delay_s[(node, iface.peer_node)] = got
    if too_fine:
        out.notes.append(f"{too_fine} port(s) have a delay below netem's 1 µs resolution once "
                         f"dilated (S = {scale.factor:g}): not emulated there")
    if worst_rel > 0.01:
        out.notes.append(f"dilated delays rounded to whole µs: off by up to {worst_rel:.1%}")
    return out


# ----------------------------------------------------------------------------- choice

def parse_delay_request(value: bool | str) -> str:
    """'auto' | 'on' | 'off' from True/False or a word (CLI and topology-style flags)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return "on" if parse_bool(value, "delay") else "off"
    except ParameterError:
        raise ParameterError("delay", value, "expected auto, on (True) or off (False)") from None


def choose_delay(requested: bool | str = "auto", probe: dict[str, Any] | None = None
                 ) -> tuple[bool, str]:
    """(emulate delay?, one-line reason). 'auto' -> on where netem works; 'on' forced
    raises CapabilityError where it does not; 'off' never probes."""
    choice = parse_delay_request(requested)
    if choice == "off":
        return False, "off (requested)"
    probe = probe if probe is not None else probe_netem()
    if probe.get("ok"):
        return True, "netem, dilated by S"
    why = probe.get("why", "unknown")
    if choice == "on":
        raise CapabilityError(
            f"link delay was requested (delay=on) but cannot be emulated: {why}; use a kernel "
            "with sch_netem (stock Ubuntu has it) or run with delay auto/off")
    return False, f"not emulated: {why}"


def _probe_in_scratch_ns() -> dict[str, Any]:
    from pyroute2.netlink.exceptions import NetlinkError

    with NamespaceSet("netem probe") as scratch:
        ipr = scratch.create("probe")
        idx, _ = scratch.veth("probe", "p0", "probe", "p1", up=False)
        try:
            shape_port(ipr, idx, 10e6, 100_000, delay=NetemOptions(1000, NETEM_LIMIT_FLOOR))
        except NetlinkError as e:
            if e.code == 2:  # ENOENT: no such qdisc kind
                return {"ok": False, "why": "the kernel has no sch_netem (netem qdisc)"}
            return {"ok": False, "why": f"netem under HTB refused: {e}"}
    return {"ok": True}


@functools.lru_cache(maxsize=1)
def probe_netem() -> dict[str, Any]:
    """{'ok': bool, 'why': str}: does the real delay chain (netem root over HTB over
    bfifo) install here? Tried once per process in a scratch namespace."""
    if os.geteuid() != 0:
        return {"ok": False, "why": "needs root to probe (namespaces, tc)"}
    try:
        return _probe_in_scratch_ns()
    except Exception as e:  # noqa: BLE001 - a failed probe means "not available", with why
        return {"ok": False, "why": f"probe failed: {e}"}

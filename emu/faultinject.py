"""Failures applied to a live fabric during a run, in real-fabric time dilated by S.

`FaultInjector` follows `topologies.faultspec.timeline` from the engine's clock zero
(``run_workload``'s ``live`` hook hands it the shared clock): a link's physical change
is applied to both ends at once (`Fabric.set_link_state`: each end's kernel drops its
next hops over the link, as a switch's local fast reroute does; it takes them back
once the link has stayed up for the hold-down, when the timeline says so), and what
the rest of the fabric learns a detection delay later is a `Fabric.reroute` around
the links then known down (only changed routes are replaced). A rate fault changes
the link's HTB classes in both directions (`emu.shaping.rate_change`), and its ECN
markers' drain rate with them; a loss fault is `emu.linkloss`'s filter on both ends'
ingress. Every applied action is recorded with its planned and applied times (real
s after the start) and the emulated time it was applied at; `lost_frames` counts
every frame the faults cost outside the ports' queues (`emu.lossledger`, the loss
filters). `restore` puts the fabric back as it was built, for the next run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from core.errors import CapabilityError, ParameterError
from core.frame import WIRE_OVERHEAD_BYTES
from emu.ipbatch import run_ip_batches
from emu.linkloss import LinkLoss
from emu.lossledger import LossLedger, Lost
from emu.shaping import rate_change
from topologies.faultspec import Action, Fault, Link, links_going_down, resolve, timeline

#: How long the injector waits for the engine to start its clock before it gives up
#: (the engine's own start timeout is shorter).
_CLOCK_WAIT_S = 120.0


@dataclass
class Applied:
    """One action as applied: planned and applied real times after t0 (s), what."""

    planned_s: float
    applied_s: float
    applied_emu_s: float
    op: str
    link: str
    up: bool
    value: float
    fault: str


class FaultInjector:
    """Applies ``faults`` to ``fab`` during one run (``detect_delay_s``: real s for
    the fabric beyond a link's ends to learn of a change; ``holddown_s``: real s a link
    back up must stay up before its ends take it back, `faultspec.timeline`). Use
    ``watch`` as the run's ``live`` hook, then read ``events()``; ``restore()`` after
    the run."""

    def __init__(self, fab: Any, faults: Sequence[Fault], detect_delay_s: float,
                 holddown_s: float = 0.0) -> None:
        if not detect_delay_s >= 0:
            raise ParameterError("detect_delay", detect_delay_s, "must be >= 0")
        if not holddown_s >= 0:
            raise ParameterError("holddown", holddown_s, "must be >= 0")
        self.fab = fab
        self.faults = resolve(faults, fab.topo, fab.topo.describe())
        for f in self.faults:
            if f.kind == "loss" and any(fab.topo.role(n) == "host" for n in f.nodes):
                raise ParameterError("faults", f.text(), "loss applies to switch-to-switch "
                                     "links (a host's NIC reads frames before any filter)")
        self.detect_delay_s = detect_delay_s
        self.holddown_s = holddown_s
        self.applied: list[Applied] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rates: dict[Link, float] = {}
        self._taken_down: set[Link] = set()
        self.loss = LinkLoss(fab)
        for f in self.faults:  # attached now, in this thread: the run only sets them
            if f.kind == "loss":
                self.loss.set(*f.nodes, 0.0)
        try:
            self.ledger = LossLedger(fab, [fab.port(a, b) for link in
                                           links_going_down(self.faults, fab.topo)
                                           for a, b in (sorted(link), sorted(link, reverse=True))])
        except BaseException:
            self.loss.clear()
            raise

    # ------------------------------------------------------------------ the run
    def watch(self, shared: Any) -> None:
        """``run_workload``'s ``live`` hook: start following the clock, stop at None."""
        if shared is None:
            self.stop()
            return
        if not self.faults or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(shared,),
                                        name="fabricemu-faults", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self, shared: Any) -> None:
        deadline = time.monotonic() + _CLOCK_WAIT_S
        while not shared.t0_ns.value:
            if self._stop.wait(0.001) or time.monotonic() > deadline:
                return
        t0_ns = int(shared.t0_ns.value)
        scale = self.fab.scale
        try:
            for batch in _batches(timeline(self.faults, self.fab.topo, self.detect_delay_s,
                                               self.holddown_s)):
                wait_s = (t0_ns + scale.emu_ns(batch[0].at_s) - time.monotonic_ns()) / 1e9
                if wait_s > 0 and self._stop.wait(wait_s):
                    return
                if self._stop.is_set():
                    return
                self._apply(batch)
                now_ns = time.monotonic_ns() - t0_ns
                self.applied += [Applied(a.at_s, scale.real_s_of_emu_ns(now_ns), now_ns / 1e9,
                                         a.op, "-".join(sorted(a.link)), a.up, a.value, a.fault)
                                 for a in batch]
        except Exception as e:  # the run goes on; its record says the faults stopped
            self.error = f"{type(e).__name__}: {e}"

    def _apply(self, batch: list[Action]) -> None:
        """Actions due at one time: physical changes first, one reroute for all that is
        learned."""
        fab = self.fab
        learned: set[str] = set()  # the ends of the links learned: their routes made anew
        for a in batch:
            x, y = sorted(a.link)
            if a.op == "link":
                fab.set_link_state(x, y, a.up)
                if not a.up:
                    self._taken_down.add(a.link)
            elif a.op == "learn":
                (fab.down_links.discard if a.up else fab.down_links.add)(a.link)
                learned |= a.link
            elif a.op == "rate":
                self._set_rate(a.link, a.value)
            else:
                self.loss.set(x, y, a.value)
        if learned:
            fab.reroute(touched=learned)

    def _set_rate(self, link: Link, fraction: float) -> None:
        a, b = sorted(link)
        for node, peer in ((a, b), (b, a)):
            port = self.fab.port(node, peer)
            rate_emu_bps = port.rate_emu_bps * fraction
            run_ip_batches({self.fab.namespaces.name(node): [
                rate_change(port.ifname, rate_emu_bps, WIRE_OVERHEAD_BYTES)]}, tool="tc")
            if port.marker is not None:
                port.marker.set_rate(rate_emu_bps)
        self._rates[link] = fraction

    # ------------------------------------------------------------------ after
    def lost_frames(self) -> Lost:
        """Frames the fabric lost to the faults so far outside its ports' queues: no
        route, vanished at a dead link's ports, taken by a loss filter (read it when
        the traffic has ended)."""
        return replace(self.ledger.lost(), filtered=self.loss.drops())

    def links_taken_down(self) -> frozenset[Link]:
        """The links this run took down at some moment (physically, as their ends saw it)."""
        return frozenset(self._taken_down)

    def events(self) -> pd.DataFrame:
        """Every applied action (real s after the run's t0; ``applied_emu_s`` emulated)."""
        return pd.DataFrame([vars(a) for a in self.applied],
                            columns=list(Applied.__dataclass_fields__))

    def restore(self) -> None:
        """The fabric as built: every link up, full rate, no loss, every route back."""
        self.stop()
        fab = self.fab
        for link in list(fab.dead_links):
            fab.set_link_state(*sorted(link), True)
        fab.down_links.clear()
        fab.reroute(touched=set(fab.topo.nodes()))
        for link in list(self._rates):
            self._set_rate(link, 1.0)
        self._rates.clear()
        self.loss.clear()
        self.ledger.clear()


def _batches(actions: Iterator[Action]) -> Iterator[list[Action]]:
    """Consecutive actions due at the same time, together."""
    batch: list[Action] = []
    for a in actions:
        if batch and a.at_s != batch[0].at_s:
            yield batch
            batch = []
        batch.append(a)
    if batch:
        yield batch


def require_faults_supported(faults: Sequence[Fault]) -> None:
    """CapabilityError when a loss fault needs the BPF filter the machine lacks."""
    if any(f.kind == "loss" for f in faults) and not LinkLoss.available():
        raise CapabilityError("loss faults need clang and BPF (tc clsact) on this machine")

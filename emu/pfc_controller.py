"""PFC lossless mode: a controller that pauses upstream ports, hop by hop, before a queue overflows.

```python
with Fabric(topo, Scale(5000), marking="off") as fab:
    pfc = fab.enable_pfc(PfcConfig())      # after the build; stopped with the fabric
    result = run_workload(fab, workload, EngineConfig(cc=None))
    pfc.port_stats()   # node, ifname, pause_events, paused_s_real, paused_s_emu, ...
    pfc.summary()      # reaction time (wall and real), polls, CPU, thresholds
```

How (docs/pfc.md): every gate port (a port that sends into a switch) gets a TBF leaf
that can stop dequeueing without dropping (``emu.pfcgate``). A thread reads every
switch port's queue (leaf backlog, raw netlink dump, tens of µs per namespace) every
``poll_interval_s`` of wall time; an egress whose queue reaches Xoff pauses every port
feeding it (``traffic.pfc.feeders``), and resumes them at Xon. A paused switch port
keeps its queue, which reaches its own Xoff and pauses its own feeders: the pause
propagates hop by hop to the hosts' NICs, whose queue then pushes back into the
engine's send socket (EAGAIN: the frame is kept, never dropped). With link delay
emulated, each action takes effect 2 x link delay (dilated) after the decision: the
PAUSE frame's trip out and the data on the wire coming back.

Thresholds are per egress port for the one lossless priority (3, ``PRIORITY``):
Xoff = buffer - headroom, headroom = sum over feeders of rate x (reaction + 2 x link
delay) + one frame, the reaction being ``reaction_budget_wall_s`` / S; Xon = Xoff -
``xon_gap_bytes``. Measured reaction times beyond the budget are counted (``late``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from core.errors import CapabilityError, FabricEmuError, ParameterError
from core.scaling import Scale
from emu.pfcgate import FRAME_MAX_BYTES, PAUSED_BURST_BYTES, NetlinkTc, TbfGate
from emu.ports import Port
from emu.telemetry import QdiscReader
from topologies.base import FabricTopo
from topologies.routing import Routes
from traffic.pfc import (
    PRIORITY,
    ActionQueue,
    Hysteresis,
    PauseLedger,
    PfcThresholds,
    feeders,
    headroom_bytes,
    plan_thresholds,
)

log = logging.getLogger(__name__)

#: A host NIC's queue in lossless mode: larger than what the engine's send socket may
#: hold (SO_SNDBUFFORCE 4 MiB, doubled by the kernel), so a paused NIC pushes back
#: with EAGAIN before its qdisc would refuse (and count a drop).
HOST_QUEUE_BYTES = 16 << 20
_RESTORE_DRAIN_S = 5.0


@dataclass(frozen=True)
class PfcConfig:
    """PFC settings. Bytes are real (not dilated); ``*_wall_s`` are wall-clock seconds.

    ``xoff_bytes``/``xon_bytes``: the same thresholds for every switch port (None:
    Xoff = buffer - headroom, Xon = Xoff - ``xon_gap_bytes``); a port whose headroom
    does not fit is a ParameterError. ``reaction_budget_wall_s``: the controller's
    reaction time the headroom is sized for (a few poll intervals plus scheduling).
    """

    priority: int = PRIORITY
    xoff_bytes: int | None = None
    xon_bytes: int | None = None
    xon_gap_bytes: int = 2 * FRAME_MAX_BYTES
    reaction_budget_wall_s: float = 10e-3
    poll_interval_s: float = 250e-6
    host_queue_bytes: int = HOST_QUEUE_BYTES

    def __post_init__(self) -> None:
        if self.priority != PRIORITY:
            raise ParameterError("priority", self.priority,
                                 f"the fabric has one lossless class: priority {PRIORITY}")
        for name in ("xoff_bytes", "xon_bytes"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise ParameterError(name, v, "expected a byte count >= 0 (or None)")
        if not isinstance(self.xon_gap_bytes, int) or self.xon_gap_bytes < 0:
            raise ParameterError("xon_gap_bytes", self.xon_gap_bytes, "expected a byte count >= 0")
        if not 20e-6 <= self.poll_interval_s <= 0.1:
            raise ParameterError("poll_interval_s", self.poll_interval_s, "expected 20 µs .. 100 ms")
        if not self.poll_interval_s <= self.reaction_budget_wall_s <= 10.0:
            raise ParameterError("reaction_budget_wall_s", self.reaction_budget_wall_s,
                                 "expected poll_interval_s .. 10 s")
        if not isinstance(self.host_queue_bytes, int) or self.host_queue_bytes < FRAME_MAX_BYTES:
            raise ParameterError("host_queue_bytes", self.host_queue_bytes,
                                 f"expected at least one frame ({FRAME_MAX_BYTES} B)")


Key = tuple[str, str]  # (node, peer): the port of node toward peer


class PfcFabric(Protocol):
    """What the controller reads from the fabric that builds it (`emu.fabric.Fabric`)."""

    scale: Scale
    switches: list[str]
    routes: Routes
    topo: FabricTopo
    delay_emulated: bool

    def ports(self) -> list[Port]: ...


class PfcController:
    """PFC on one running fabric. ``start()`` installs the gates and the polling thread;
    ``stop()`` resumes every port and (``restore=True``) puts the bfifo leaves back."""

    def __init__(self, fab: PfcFabric, config: PfcConfig | None = None) -> None:
        if config is not None and not isinstance(config, PfcConfig):
            raise ParameterError("pfc", config, "expected a PfcConfig (or None)")
        self.fab = fab
        self.config = config or PfcConfig()
        self.scale = fab.scale
        self.ports: dict[Key, Port] = {}
        self.thresholds: dict[Key, PfcThresholds] = {}
        self.egress_feeders: dict[Key, frozenset[Key]] = {}
        self.delay_ns: dict[Key, int] = {}
        self.gates: dict[Key, TbfGate] = {}
        self.hyst: Hysteresis | None = None
        self.ledger: PauseLedger | None = None
        self.applied: dict[Key, bool] = {}
        self.kicks: dict[Key, int] = defaultdict(int)
        self.error: str | None = None
        self._tcs: dict[str, NetlinkTc] = {}
        self._readers: dict[str, QdiscReader] = {}
        self._egress_by_ns: dict[str, list[tuple[Key, int]]] = {}
        self._actions = ActionQueue()
        self._backlog: dict[Key, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reaction_ns: list[int] = []
        self._change_ns: list[int] = []
        self._read_ns: list[int] = []
        self.polls = 0
        self.poll_gap_max_ns = 0  # longest time between two polls: a stalled controller
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self._t_start_ns = 0
        self._t_end_ns = 0

    # ------------------------------------------------------------------ planning
    def plan(self) -> None:
        """Feeders, thresholds and propagation delays from the built fabric (no I/O)."""
        fab = self.fab
        switches = set(fab.switches)
        self.ports = {(p.node, p.peer_node): p for p in fab.ports()}
        next_hops = fab.routes.next_hops
        reaction_real_s = self.scale.to_real_time_s(self.config.reaction_budget_wall_s)
        neighbours: dict[str, list[str]] = defaultdict(list)
        for node, peer in self.ports:
            neighbours[node].append(peer)
        for (node, peer), port in self.ports.items():
            if node not in switches:
                continue
            feed = frozenset((n, node) for n in feeders(next_hops, node, peer, neighbours[node])
                             if (n, node) in self.ports)
            self.egress_feeders[(node, peer)] = feed
            head = headroom_bytes(((self.ports[g].rate_bps, self._link_delay_s(*g)) for g in feed),
                                  reaction_real_s, PAUSED_BURST_BYTES)
            self.thresholds[(node, peer)] = plan_thresholds(
                port.name, port.buffer_bytes, head, self.config.xoff_bytes,
                self.config.xon_bytes, self.config.xon_gap_bytes)
        gate_keys = sorted({g for feed in self.egress_feeders.values() for g in feed})
        for g in gate_keys:
            self.delay_ns[g] = self.scale.emu_ns(2 * self._link_delay_s(*g)) \
                if fab.delay_emulated else 0
        self.hyst = Hysteresis(self.egress_feeders, self.thresholds)
        self.ledger = PauseLedger(gate_keys)
        self.applied = {g: False for g in gate_keys}

    def _link_delay_s(self, a: str, b: str) -> float:
        return float(self.fab.topo.linkInfo(a, b).get("delay_s", 0.0) or 0.0)

    # ------------------------------------------------------------------ life cycle
    def start(self) -> PfcController:
        if self._thread is not None:
            raise FabricEmuError("this PFC controller was already started")
        if not getattr(self.fab, "started", False):
            raise FabricEmuError("PFC needs a running fabric: enable it after the build")
        self.plan()
        try:
            self._check_leaves()
            self._install()
        except BaseException:
            self._teardown(restore=True)
            raise
        self._t_start_ns = time.monotonic_ns()
        self._thread = threading.Thread(target=self._run, name="fabricemu-pfc", daemon=True)
        self._thread.start()
        return self

    def _check_leaves(self) -> None:
        for ns in {p.netns_path for p in self.ports.values()}:
            self._readers[ns] = QdiscReader(ns)
        leaves = {ns: r.leaf_stats() for ns, r in self._readers.items()}
        for key, p in self.ports.items():
            if key not in self.applied and key not in self.egress_feeders:
                continue
            kind = leaves[p.netns_path].get(p.ifindex, {}).get("kind")
            if kind != "bfifo":
                raise CapabilityError(f"PFC needs the byte FIFO leaf on every port; {p.name} has "
                                      f"{kind!r} (the red ECN back end): use marking bpf or off")
        for key, p in self.ports.items():
            if key in self.egress_feeders:
                self._egress_by_ns.setdefault(p.netns_path, []).append((key, p.ifindex))
        for ns in list(self._readers):
            if ns not in self._egress_by_ns:
                self._readers.pop(ns).close()

    def _install(self) -> None:
        for g in self.applied:
            p = self.ports[g]
            if p.netns_path not in self._tcs:
                self._tcs[p.netns_path] = NetlinkTc(p.netns_path)
            limit = p.buffer_bytes if p.is_switch else max(p.buffer_bytes, self.config.host_queue_bytes)
            gate = TbfGate(self._tcs[p.netns_path], p.netns_path, p.ifname, p.ifindex, limit,
                           p.buffer_bytes)
            self.gates[g] = gate
            try:
                gate.install()
            except OSError as e:
                raise CapabilityError(f"PFC could not install its gate (tbf) on {p.name}: {e}") from None

    def stop(self, restore: bool = True) -> PfcController:
        """Stop polling, resume every paused port; ``restore``: bfifo leaves back once drained."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._teardown(restore)
        return self

    def _teardown(self, restore: bool) -> None:
        now = time.monotonic_ns()
        for g, paused in self.applied.items():
            if paused and g in self.gates:
                with contextlib.suppress(OSError):
                    self.gates[g].resume(1)
                self.applied[g] = False
                if self.ledger is not None:
                    self.ledger.resumed(g, now)
        if self.ledger is not None:
            self.ledger.close(now)
        self._t_end_ns = self._t_end_ns or now
        if restore:
            self._restore_leaves()
        for gate in self.gates.values():
            gate.close_kick()
        for r in self._readers.values():
            r.close()
        for tc in self._tcs.values():
            tc.close()
        self._readers, self._tcs = {}, {}

    def _restore_leaves(self) -> None:
        installed = {g: gate for g, gate in self.gates.items() if gate.installed}
        if not installed:
            return
        readers = {ns: QdiscReader(ns) for ns in {self.ports[g].netns_path for g in installed}}
        try:
            deadline = time.monotonic() + _RESTORE_DRAIN_S
            while True:
                leaves = {ns: r.leaf_stats() for ns, r in readers.items()}
                busy = [g for g in installed if leaves[self.ports[g].netns_path]
                        .get(self.ports[g].ifindex, {}).get("backlog_bytes", 0) > 0]
                if not busy or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            for g, gate in installed.items():
                if g in busy:  # an open TBF of the same limit is a byte FIFO: keep it, drop nothing
                    log.warning("PFC: %s still holds a queue, its open gate stays", self.ports[g].name)
                    continue
                with contextlib.suppress(OSError):
                    gate.restore()
        finally:
            for r in readers.values():
                r.close()

    def __enter__(self) -> PfcController:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        cpu0, wall0 = time.thread_time(), time.monotonic()
        interval_ns = round(self.config.poll_interval_s * 1e9)
        prev_poll_ns = time.monotonic_ns()
        try:
            while not self._stop.is_set():
                t0 = time.monotonic_ns()
                self._poll(t0, prev_poll_ns)
                self._apply_due()
                prev_poll_ns = t0
                wake = t0 + interval_ns
                due = self._actions.next_due_ns()
                if due is not None:
                    wake = min(wake, due)
                delay_s = (wake - time.monotonic_ns()) / 1e9
                if delay_s > 0 and self._stop.wait(delay_s):
                    break
        except Exception as e:  # a vanished namespace, a refused change: stop, keep the fabric usable
            self.error = f"{type(e).__name__}: {e}"
            log.error("PFC controller stopped: %s", self.error)
        finally:
            self.cpu_s = time.thread_time() - cpu0
            self.wall_s = time.monotonic() - wall0
            self._t_end_ns = time.monotonic_ns()

    def _poll(self, t0: int, prev_poll_ns: int) -> None:
        assert self.hyst is not None
        backlogs: dict[Hashable, int] = {}
        for ns, reader in self._readers.items():
            leaves = reader.leaf_stats()
            for key, ifindex in self._egress_by_ns[ns]:
                backlogs[key] = leaves.get(ifindex, {}).get("backlog_bytes", 0)
        t1 = time.monotonic_ns()
        self._read_ns.append(t1 - t0)
        self.poll_gap_max_ns = max(self.poll_gap_max_ns, t0 - prev_poll_ns)
        self.polls += 1
        self._backlog = backlogs  # type: ignore[assignment]
        # The crossing happened after the previous poll read the queue: that bounds the reaction.
        for g, pause in self.hyst.update(backlogs):
            self._actions.push(t1 + self.delay_ns[g], g, pause, prev_poll_ns)

    def _apply_due(self) -> None:
        assert self.ledger is not None
        for g, pause, _due_ns, decided_ns in self._actions.pop_due(time.monotonic_ns()):
            if self.applied[g] == pause:
                continue
            gate = self.gates[g]
            ta = time.monotonic_ns()
            if pause:
                gate.pause()
            elif gate.resume(self._backlog.get(g, 1)):  # host NIC queues are not read: kick
                self.kicks[g] += 1
            tb = time.monotonic_ns()
            self.applied[g] = pause
            self._change_ns.append(tb - ta)
            if pause:
                self.ledger.paused(g, tb)
                # The controller's own lag: the emulated propagation is not part of it.
                self._reaction_ns.append(tb - decided_ns - self.delay_ns[g])
            else:
                self.ledger.resumed(g, tb)

    # ------------------------------------------------------------------ results
    def port_stats(self) -> pd.DataFrame:
        """One row per port: node, ifname, port, priority, gate (can be paused), pause_events,
        paused_s_emu (wall), paused_s_real (/ S), kicks; for switch ports also xoff_events
        (times its queue paused its feeders), xoff_bytes, xon_bytes, headroom_bytes."""
        assert self.ledger is not None and self.hyst is not None, "start() first"
        now = None if self._thread is None or not self._thread.is_alive() else time.monotonic_ns()
        rows = []
        for key, p in self.ports.items():
            gate = key in self.ledger.events
            paused_ns = self.ledger.total_ns(key, now) if gate else 0
            th = self.thresholds.get(key)
            rows.append({
                "node": p.node, "ifname": p.ifname, "port": p.name, "pfc_priority": self.config.priority,
                "pfc_gate": gate, "pause_events": self.ledger.events.get(key, 0),
                "paused_s_emu": paused_ns / 1e9, "paused_s_real": self.scale.real_s_of_emu_ns(paused_ns),
                "pfc_kicks": self.kicks.get(key, 0),
                "xoff_events": self.hyst.xoff_events.get(key, 0),
                "xoff_bytes": th.xoff_bytes if th else pd.NA,
                "xon_bytes": th.xon_bytes if th else pd.NA,
                "headroom_bytes": th.headroom_bytes if th else pd.NA,
            })
        return pd.DataFrame(rows)

    def merge(self, stats: pd.DataFrame) -> pd.DataFrame:
        """``stats`` (emu.telemetry.port_stats) with the PFC columns joined on node, ifname."""
        pfc = self.port_stats().drop(columns=["port"])
        return stats.merge(pfc, on=["node", "ifname"], how="left")

    def summary(self) -> dict[str, Any]:
        """Reaction and actuation times (wall and real = wall / S), polling, CPU, totals."""

        def pct(ns: list[int], q: float) -> float:
            return float(np.percentile(ns, q)) / 1e9 if ns else float("nan")

        budget_ns = self.config.reaction_budget_wall_s * 1e9
        cpu_s, wall_s = self.cpu_s, self.wall_s
        if self._thread is not None and self._thread.is_alive() and self._thread.ident:
            cpu_s = time.clock_gettime(time.pthread_getcpuclockid(self._thread.ident))
            wall_s = (time.monotonic_ns() - self._t_start_ns) / 1e9
        react, change, read = self._reaction_ns, self._change_ns, self._read_ns
        span_s = max(0, (self._t_end_ns or time.monotonic_ns()) - self._t_start_ns) / 1e9
        out: dict[str, Any] = {
            "priority": self.config.priority, "scale": self.scale.factor,
            "gates": len(self.gates), "egresses": len(self.egress_feeders),
            "propagation_emulated": bool(self.fab.delay_emulated),
            "polls": self.polls, "poll_period_mean_s": span_s / self.polls if self.polls else float("nan"),
            "poll_read_p50_s": pct(read, 50), "poll_read_max_s": pct(read, 100),
            "poll_gap_max_s": self.poll_gap_max_ns / 1e9,
            "pause_events": sum(self.ledger.events.values()) if self.ledger else 0,
            "xoff_events": sum(self.hyst.xoff_events.values()) if self.hyst else 0,
            "kicks": sum(self.kicks.values()),
            "late_reactions": sum(1 for r in react if r > budget_ns),
            "reaction_budget_wall_s": self.config.reaction_budget_wall_s,
            "reaction_budget_real_s": self.scale.to_real_time_s(self.config.reaction_budget_wall_s),
            "cpu_fraction": cpu_s / wall_s if wall_s else float("nan"),
            "error": self.error,
        }
        for name, ns in (("reaction", react), ("change", change)):
            for label, q in (("p50", 50), ("p99", 99), ("max", 100)):
                wall = pct(ns, q)
                out[f"{name}_wall_{label}_s"] = wall
                out[f"{name}_real_{label}_s"] = self.scale.to_real_time_s(wall)
        return out

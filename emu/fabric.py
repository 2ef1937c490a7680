"""Realize a topology graph as a live fabric of network namespaces.

Every node (host or switch) is a named namespace; every link a veth pair created
directly between the two namespaces (nothing in the machine's own namespace);
switches are L3 routers with one /31 per link and static (multipath) routes to
every host's /32; every egress direction is shaped to R/S with a byte FIFO of
the real buffer, behind a netem delay line of the dilated link delay where the
kernel has sch_netem (``emu.delay``); switch ports mark ECN (bpf or red back end).
Routing: the kernel's ECMP, or (spray, flowlet, adaptive) an eBPF router at every
switch port's ingress that forwards RoCEv2 frames itself (``emu.lbrouter``).
Links, addresses and routes go in as one ``ip -batch`` per namespace (``emu.ipbatch``:
one process per node, not per command); qdiscs, BPF filters and the reads of the
telemetry go through one netlink socket per namespace (pyroute2).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from core.ecn import ThresholdPolicy, Thresholds
from core.errors import CapabilityError, FabricEmuError, NotRootError, ParameterError
from core.frame import WIRE_OVERHEAD_BYTES
from core.gcpause import collector_paused
from core.scaling import Scale
from emu.delay import DelayPlan, choose_delay, parse_delay_request, plan_delays
from emu.ecmp_hashing import CHOICES as ECMP_HASH_CHOICES
from emu.ecmp_hashing import HashPlan, choose_mechanism, plan_hashing
from emu.ecn.backend import choose_backend
from emu.ecn.preload import MarkerPreload
from emu.ecn.red import red_qdisc_options
from emu.fdbudget import FdNeed, ensure_fd_limit
from emu.ipbatch import run_ip_batches
from emu.iproute_plan import node_config
from emu.lbrouter import SwitchRouter, install_routers
from emu.linkstate import LinkState
from emu.pfc_controller import PfcController
from emu.ports import Port
from emu.rocesink import HostPorts, RoceSinks, install_roce_sinks
from emu.rtnl import Rtnl
from emu.runs import NamespaceSet, claim_session
from emu.rxorder import cpu_masks, node_cpus, pin_receive_cpus
from emu.shaping import MTU_BYTES, port_lines, shape_port
from emu.telemetry import port_stats
from topologies import loadbalance
from topologies.addressing import AddressPlan, plan_addresses
from topologies.base import FabricTopo
from topologies.routing import Routes, compute_routes, topo_graph

log = logging.getLogger(__name__)

_COMMON_SYSCTLS = {
    # IPv6 would put router solicitations and MLD reports on every link.
    "net.ipv6.conf.all.disable_ipv6": 1,
    "net.ipv6.conf.default.disable_ipv6": 1,
    # ECMP paths are asymmetric: reverse-path filtering would drop them.
    "net.ipv4.conf.all.rp_filter": 0,
    "net.ipv4.conf.default.rp_filter": 0,
}
_SWITCH_SYSCTLS = {
    **_COMMON_SYSCTLS,
    "net.ipv4.ip_forward": 1,
    # The ECMP hash (policy, seed or fields: every switch its own) comes from emu.ecmp_hashing.
    "net.ipv4.conf.all.send_redirects": 0,
    "net.ipv4.conf.default.send_redirects": 0,
}
_HOST_SYSCTLS = {**_COMMON_SYSCTLS, "net.ipv4.ip_forward": 0}


@dataclass(frozen=True)
class HostEndpoint:
    name: str
    netns_path: str
    ip: str


@dataclass(frozen=True)
class Egress:
    """How a host's NIC model addresses a frame to ``dst_ip`` (first hop only)."""

    ifname: str
    src_mac: str
    dst_mac: str
    src_ip: str
    dst_ip: str


def require_root() -> None:
    if os.geteuid() != 0:
        raise NotRootError("building a fabric creates network namespaces: run as root (sudo)")


class Fabric(LinkState):
    """A running emulated fabric; use as a context manager (built on enter).

    ``delay``: link propagation delay, dilated by S, with netem: 'auto' (default: where
    the kernel has sch_netem), True/'on' (CapabilityError where it has not) or
    False/'off'. ``summary()['delay_emulated']`` says what was built.

    ``in_order``: pin every node's receive work to one CPU (``emu.rxorder``), so no
    link reorders a flow; off by default, because on two cores it lengthens the
    pacing-lag tail more often than reordering costs a run (docs/design.md, "Links
    and order"). ``summary()['receive_steering']`` says what was built.

    ``routing``: 'ecmp' (the kernel's hash) or a mode of ``topologies.loadbalance``
    (eBPF in each switch; ``flowlet_gap_s`` real, dilated by S); CapabilityError
    where the kernel cannot run it, never a silent ECMP.
    """

    def __init__(self, topo: FabricTopo, scale: Scale | None = None, *,
                 marking: str = "auto", thresholds: Any = None,
                 capabilities: dict | None = None, delay: bool | str = "auto",
                 ecmp_hash: str = "auto", in_order: bool = False, routing: str = "ecmp",
                 flowlet_gap_s: float = loadbalance.DEFAULT_FLOWLET_GAP_S) -> None:
        self.topo = topo
        self.scale = scale or Scale()
        self.marking_requested = marking
        self.marking = "off"
        self.delay_requested = parse_delay_request(delay)  # a bad value fails before building
        self.delay_emulated = False
        self.delay_detail = "not built yet"
        self.delays = DelayPlan()
        self.thresholds = thresholds
        self.capabilities = capabilities or {}
        self.namespaces = NamespaceSet(topo.describe())
        self.run_id = self.namespaces.run_id
        self.plan: AddressPlan = plan_addresses(topo)
        self.routes: Routes = compute_routes(topo)
        rates = {topo.linkInfo(a, b)["rate_bps"] for a, b in topo.links()}
        self.scale.check_rates(rates)  # clear error (suggesting S) before building anything
        self.hosts: list[str] = topo.host_nodes()
        self.switches: list[str] = topo.switch_nodes()
        self.roce_sinks = RoceSinks()
        self._ports: list[Port] = []
        self._procs: list[subprocess.Popen] = []
        self._ifindex: dict[tuple[str, str], int] = {}
        self.down_links: set[frozenset[str]] = set()  # what routing knows: see set_link_up()
        self.dead_links: set[frozenset[str]] = set()  # physically down: set_link_state()
        self.build_s = 0.0
        if ecmp_hash not in ECMP_HASH_CHOICES:  # fails before building
            raise ParameterError("ecmp_hash", ecmp_hash,
                                 f"expected one of {', '.join(ECMP_HASH_CHOICES)}")
        self.ecmp_hash_requested = ecmp_hash
        self.ecmp_hash: HashPlan | None = None  # chosen at start(), see emu.ecmp_hashing
        self._markers: MarkerPreload | None = None   # while the build loads them ahead
        self.pfc: Any = None  # emu.pfc_controller.PfcController once enable_pfc() ran
        self.routing = loadbalance.parse_routing(routing)  # fails before building
        if self.routing in loadbalance.GROUP_MODES and topo.family != "dragonfly":
            raise ParameterError("routing", self.routing, "routes through dragonfly groups: "
                                                          "use a dragonfly topology")
        self.flowlet_gap_s = loadbalance.parse_flowlet_gap_s(flowlet_gap_s)
        self.routers: dict[str, SwitchRouter] = {}  # per switch, beyond ECMP: its counters
        self.in_order = in_order
        self.receive_steering = "not built yet"
        #: node -> the CPU its receive work runs on (empty without receive steering)
        self.receive_cpu: dict[str, int] = {}
        self.started = False

    # ------------------------------------------------------------------ life cycle
    def __enter__(self) -> Fabric:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @collector_paused()
    def start(self) -> None:
        require_root()
        # Refused before any probe: counted as if every switch port gets an eBPF marker.
        ensure_fd_limit(FdNeed.of(self.topo, bpf_marking=self.marking_requested != "off",
                                  bpf_routing=self.routing != "ecmp"))
        claim_session()  # one experiment run / emu net at a time, refused before any probe
        t0 = time.perf_counter()
        try:
            self._choose_marking()
            self._choose_delay()
            self._preload_markers()
            self._create_namespaces()
            self._create_links()
            self._steer_receive()
            self._shape_and_mark()
            self._end_preload()
            self._install_routers()
            self._install_roce_sinks()
        except BaseException:  # also Ctrl-C mid-build: leave nothing behind
            self._end_preload()
            self.stop()
            raise
        self.started = True
        self.build_s = time.perf_counter() - t0

    def stop(self) -> None:
        """Remove everything this fabric created; safe to call twice."""
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                proc.wait(timeout=2)
        self._procs.clear()
        if self.pfc is not None:  # its sockets live in the namespaces about to go
            with contextlib.suppress(Exception):
                self.pfc.stop(restore=False)
            self.pfc = None
        for router in self.routers.values():
            router.close()
        self.routers.clear()
        for port in self._ports:
            if port.marker is not None:
                with contextlib.suppress(Exception):
                    port.marker.close()
        self.roce_sinks.close()
        self.namespaces.close()
        self.started = False

    # ------------------------------------------------------------------ queries
    def netns_path(self, node: str) -> str:
        return self.namespaces.path(node)

    def ipr(self, node: str) -> Any:
        """The netlink socket bound to ``node``'s namespace."""
        return self.namespaces.iprs[node]

    def rtnl(self, node: str) -> Rtnl:
        """The raw rtnetlink socket bound to ``node``'s namespace (`emu.rtnl`)."""
        return self.namespaces.rtnls[node]

    def iprs_by_path(self) -> dict[str, Any]:
        return {self.netns_path(n): ipr for n, ipr in self.namespaces.iprs.items()}

    def endpoint(self, host: str) -> HostEndpoint:
        return HostEndpoint(host, self.netns_path(host), self.plan.host_ip[host])

    def egress(self, src_host: str, dst_host: str) -> Egress:
        """First hop of ``src_host`` toward ``dst_host`` (multi-homed hosts pick the
        NIC their routing table uses; with several equal NICs, the first)."""
        first_hop = self.routes.next_hops[src_host][dst_host][0]
        iface = self.plan.iface(src_host, first_hop)
        return Egress(iface.ifname, iface.mac, iface.peer_mac,
                      self.plan.host_ip[src_host], self.plan.host_ip[dst_host])

    def ports(self) -> list[Port]:
        return list(self._ports)

    def bpf_program_ids(self) -> dict[str, list[int]]:
        """The kernel ids of the switches' eBPF programs by job: 'router' (the routing
        modes beyond ECMP) and 'ECN marker', each program once (both one per switch)."""
        return {"router": [r.prog_id for r in self.routers.values() if r.prog_id],
                "ECN marker": list(dict.fromkeys(p.marker.prog_id for p in self._ports
                                                 if p.marker is not None))}

    def port(self, node: str, peer: str) -> Port:
        for p in self._ports:
            if p.node == node and p.peer_node == peer:
                return p
        raise KeyError(f"no port {node} -> {peer}")

    def _in_node(self, node: str, argv: list[str]) -> list[str]:
        return ["nsenter", f"--net={self.netns_path(node)}", *argv]

    def exec(self, node: str, argv: list[str], **popen_kw: Any) -> subprocess.Popen:
        """Start ``argv`` inside ``node``'s namespace; killed at stop()."""
        proc = subprocess.Popen(self._in_node(node, argv), **popen_kw)
        self._procs.append(proc)
        return proc

    def run(self, node: str, argv: list[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess:
        return subprocess.run(self._in_node(node, argv), capture_output=True, text=True,
                              timeout=timeout_s, check=False)

    def port_stats(self):  # -> pandas.DataFrame

        stats = port_stats(self._ports)
        return self.pfc.merge(stats) if self.pfc is not None else stats

    def enable_pfc(self, config: Any = None) -> Any:
        """PFC lossless mode on this running fabric (``emu.pfc_controller``); stopped with the fabric."""

        if self.pfc is not None:
            raise FabricEmuError("PFC is already enabled on this fabric")
        self.pfc = PfcController(self, config).start()
        return self.pfc

    def _bpf_switch_ports(self, what: str) -> list[Port]:
        """Every switch port, all with an eBPF marker (CapabilityError naming ``what``
        otherwise)."""
        bare = [p.name for p in self._ports if p.is_switch and p.marker is None]
        if bare:
            raise CapabilityError(
                f"{what} needs the eBPF marker on every switch port; {len(bare)} have "
                f"none (e.g. {bare[0]}): build the fabric with marking='bpf'")
        return [p for p in self._ports if p.is_switch]

    def enable_int(self) -> int:
        """In-band telemetry (HPCC): every switch port's eBPF marker writes its record
        into the RoCEv2 data frames it forwards (emu/bpf/marker.c). Returns how many
        ports write; CapabilityError where a switch port has no eBPF marker."""

        writers = self._bpf_switch_ports("in-band telemetry")
        for p in writers:
            p.marker.enable_int(p.rate_bps, self.scale.factor)
        return len(writers)

    def disable_int(self) -> None:
        """Stop the records ``enable_int`` started: later runs' frames stay as their
        senders wrote them."""

        for p in self._bpf_switch_ports("in-band telemetry"):
            p.marker.disable_int()

    def set_thresholds(self, thresholds: Thresholds) -> None:
        """Mark every switch port with ``thresholds`` from the next packet on (for
        example DCTCP's step at K); the gate judges marks by them from then on."""

        for p in self._bpf_switch_ports("changing the marking thresholds"):
            p.marker.set_thresholds(thresholds)
        self.thresholds = thresholds

    def link_delay_s(self, a: str, b: str) -> float:
        """Real one-way delay of link a-b as emulated: the mean of its two directions
        (a host link's delay sits on the switch side, see ``emu.delay``); 0 without."""
        return (self.delays.delay_s.get((a, b), 0.0) + self.delays.delay_s.get((b, a), 0.0)) / 2

    def summary(self) -> dict:
        return {
            "run_id": self.run_id, "topology": self.topo.describe(),
            "hosts": len(self.hosts), "switches": len(self.switches),
            "links": len(list(self.topo.links())), "ports": len(self._ports),
            "scale": self.scale.factor, "marking": self.marking,
            "delay_emulated": self.delay_emulated, "delay_detail": self.delay_detail,
            "delay_notes": list(self.delays.notes), "build_s": self.build_s,
            "roce_sink": self.roce_sinks.kind,
            "ethernet_overhead_bytes": WIRE_OVERHEAD_BYTES,   # charged by every shaper
            "receive_steering": self.receive_steering,
            "routing": self.routing,
            **({"flowlet_gap_s": self.flowlet_gap_s} if "flowlet" in self.routing else {}),
            **(self.ecmp_hash.summary() if self.ecmp_hash else {}),
        }

    # ------------------------------------------------------------------ build steps
    def _choose_marking(self) -> None:
        if self.marking_requested == "off":
            self.marking = "off"
            return

        self.marking = choose_backend(self.marking_requested)

    def _preload_markers(self) -> None:
        """Every switch's eBPF marker loaded in a thread while the rest is built, in
        the order `_shape_and_mark` takes them."""
        if self.marking == "bpf":
            self._markers = MarkerPreload([len(self.plan.interfaces[n])
                                           for n in self.topo.nodes()
                                           if self.topo.role(n) != "host"])

    def _end_preload(self) -> None:
        if self._markers is not None:
            self._markers.close()
            self._markers = None

    def _choose_delay(self) -> None:
        """Decide delay emulation once per build, then plan every port's delay line
        (before anything exists: an inexpressible delay fails cleanly)."""
        self.delay_emulated, self.delay_detail = choose_delay(self.delay_requested)
        self.delays = DelayPlan()
        if not self.delay_emulated:
            return
        self.delays = plan_delays(self.topo, self.plan, self.scale)
        self.delay_detail += "; a host link's delay sits on its switch-side port"
        for note in self.delays.notes:
            log.warning("link delay: %s", note)

    def _create_namespaces(self) -> None:
        self.ecmp_hash = plan_hashing(choose_mechanism(self.ecmp_hash_requested),
                                      self.routes, self.switches)
        if self.ecmp_hash.correlated_pairs:
            log.warning("ECMP: %d pair(s) of switches on a common path hash flows alike (%s): "
                        "their choices are correlated, unlike the model's",
                        self.ecmp_hash.correlated_pairs, self.ecmp_hash.mechanism)
        for node in self.topo.nodes():
            if self.topo.role(node) == "host":
                sysctls = _HOST_SYSCTLS
            else:
                sysctls = {**_SWITCH_SYSCTLS, **self.ecmp_hash.sysctls[node]}
            self.namespaces.create(node, sysctls)

    def _create_links(self) -> None:
        """Phase 1 creates the veths (each from its first node's namespace, the peer
        straight into the other's); phase 2 addresses them, adds the permanent
        neighbours (no ARP on the links) and the routes."""
        create: dict[str, list[str]] = {self.namespaces.name(n): [] for n in self.topo.nodes()}
        for a, b in self.topo.links():
            ia, ib = self.plan.iface(a, b), self.plan.iface(b, a)
            create[self.namespaces.name(a)].append(
                f"link add {ia.ifname} address {ia.mac} mtu {MTU_BYTES} type veth "
                f"peer name {ib.ifname} address {ib.mac} mtu {MTU_BYTES} "
                f"netns {self.namespaces.name(b)}")
        run_ip_batches(create)
        configure = {self.namespaces.name(n): node_config(self.topo, self.plan, self.routes, n)
                     for n in self.topo.nodes()}
        run_ip_batches(configure)
        for node in self.topo.nodes():
            for ifname, index in self.namespaces.rtnls[node].links().items():
                self._ifindex[(node, ifname)] = index

    def _steer_receive(self) -> None:
        if not self.in_order:
            self.receive_steering = "off: a veth link may reorder a flow"
            return
        cpus = sorted(os.sched_getaffinity(0))
        ifaces = {node: [(self.netns_path(node), i.ifname) for i in self.plan.interfaces[node]]
                  for node in self.topo.nodes()}
        cpu_of = node_cpus(topo_graph(self.topo), cpus)
        try:
            pin_receive_cpus(cpu_masks(cpu_of, ifaces))
        except CapabilityError as e:
            log.warning("%s", e)
            self.receive_steering = f"unavailable: {e}"
            return
        self.receive_cpu = cpu_of
        self.receive_steering = f"rps: each node's receive work on one of CPUs {cpus}"

    def _shape_and_mark(self) -> None:
        """Shape every port (``emu.shaping``: the plain ones in one tc batch per
        namespace, RED leaves and netem delay lines through pyroute2), then put the
        bpf marker on each switch port that marks."""
        policy = self._threshold_policy()
        batches: dict[str, list[str]] = {}
        ports: list[Port] = []
        for node in self.topo.nodes():
            is_switch = self.topo.role(node) != "host"
            for iface in self.plan.interfaces[node]:
                idx = self._ifindex[(node, iface.ifname)]
                rate_emu = self.scale.rate_emu_bps(iface.rate_bps)
                port = Port(node, iface.ifname, idx, self.netns_path(node), iface.peer_node,
                            iface.rate_bps, rate_emu, iface.buffer_bytes, iface.tier, is_switch,
                            delay_s=self.delays.delay_s.get((node, iface.peer_node), 0.0))
                delay = self.delays.netem.get((node, iface.peer_node))
                if is_switch and self.marking == "red":
                    # RED stays the leaf under HTB, below the delay line: it averages the
                    # port's queue, not the bytes in flight.
                    shape_port(self.namespaces.iprs[node], idx, rate_emu, iface.buffer_bytes, leaf="red",
                               leaf_options=red_qdisc_options(policy.for_port(port), rate_emu,
                                                              iface.buffer_bytes), delay=delay,
                               overhead_bytes=WIRE_OVERHEAD_BYTES)
                elif delay is not None:
                    shape_port(self.namespaces.iprs[node], idx, rate_emu, iface.buffer_bytes,
                               delay=delay, overhead_bytes=WIRE_OVERHEAD_BYTES)
                else:
                    batches.setdefault(self.namespaces.name(node), []).extend(port_lines(
                        iface.ifname, rate_emu, iface.buffer_bytes, WIRE_OVERHEAD_BYTES))
                ports.append(port)
        run_ip_batches(batches, tool="tc")
        self._ports.extend(ports)  # before marking: stop() closes what was attached
        if self.marking == "bpf":
            self._mark(ports, policy)

    def _mark(self, ports: list[Port], policy: Any) -> None:
        """Each switch's marker on its ports' clsact egress, i.e. before the delay line:
        the marker's virtual queue is the real queue at leaf 10: shifted by the port's
        constant delay, so it marks as the port's queue does."""
        assert self._markers is not None  # _preload_markers made it for bpf marking
        by_switch: dict[str, list[Port]] = {}
        for port in ports:
            if port.is_switch:
                by_switch.setdefault(port.node, []).append(port)
        for node in self.topo.nodes():
            if node in by_switch:
                self._markers.attach(by_switch[node], policy.for_port, self.namespaces.rtnls[node],
                                     WIRE_OVERHEAD_BYTES)

    def _threshold_policy(self) -> Any:
        if self.marking == "off":
            return None
        return ThresholdPolicy.of(self.thresholds)

    def _install_routers(self) -> None:
        if self.routing != "ecmp":
            self.routers = install_routers(
                self.routing, round(self.scale.time_emu_s(self.flowlet_gap_s) * 1e9),
                loadbalance.fabric_tables(self.topo, self.plan, self.routes, self.routing),
                self._ports, self.namespaces.rtnls, self.marking)

    def _install_roce_sinks(self) -> None:
        self.roce_sinks = install_roce_sinks(
            HostPorts(self.netns_path(h), self.namespaces.rtnls[h],
                      [self._ifindex[(h, i.ifname)] for i in self.plan.interfaces[h]])
            for h in self.hosts)

"""Benchmark: ns-3 running the emulator's ring all-reduce on the same fabric, for the
emulator's speed beside a packet simulator's.

    python -m bench.ns3ring [--topo fattree,4 --topo fattree,8] [--size 4MiB]
                            [--transport udp,tcp] [--engine-scale 3000]

ns-3 is not a dependency of the emulator: install its Python wheel into the venv
first (``.venv/bin/pip install ns3``; it builds cppyy, about 3 minutes, and its
first import takes about 15 s). Without it the benchmark says so in one line. The
wheel's import prints two "Failed to materialize symbols" lines from cppyy's JIT
(ns-3's static time-resolution helper); ns-3 keeps its default nanosecond resolution,
which is what the ring needs.

What ns-3 runs, per topology (``topologies.spec.build_topo``, the emulator's own
``Topo``):

* every host and switch a node, every link a point-to-point link at the link's
  **real** rate and delay, with a drop-tail queue of its buffer; each switch's
  pipeline latency rides on its links' delays (``ns3_links``); IPv4 with global
  routing (one shortest path per destination: ns-3 has per-packet random ECMP but
  no per-flow hashing, and a ring's neighbours share few links). ns-3 forwards store
  and forward, a packet's serialization once per hop;
* the ring all-reduce of ``--size`` over every host, in host order as
  ``traffic.collectives`` lays it out: 2(n-1) steps of size/n per rank to its
  successor, each step sent once the chunk it depends on has arrived, plus the
  model's NIC overhead per message (the C++ in ``ns3ring_driver.cc``, compiled by
  cppyy, does the per-packet work);
* ``udp``: a rank paces its packets (the emulator's 4096-byte payload, padded to a
  RoCEv2 frame's wire bytes) at its NIC's line rate, one event per packet; ``tcp``: ns-3's TCP (NewReno, 4096-byte segments,
  buffers of twice the bytes a rank sends, 1 ms minimum RTO) carries each rank's
  steps on one connection.

Printed, beside the project's model of the same collective (``model_ring_s``): ns-3's
simulated completion time, the wall time of ``Simulator::Run``
alone, their ratio (**slowdown**: how much slower than real time ns-3 runs this
collective), the set-up time apart, and the CPU time the hypervisor took from the
machine meanwhile (``stolen``: a noisy host slows ns-3 too). The emulator runs the same collective S
times slower than real time, so at its smallest VALID S (``emu bench capacity``
finds it) ``ns-3 slowdown / S`` is how many times faster the emulator is. With
``--engine-scale S`` each topology's ring also runs on the emulator at S (as root),
alternating with ns-3 in the same window, and both rows are printed. Each ns-3 case
runs in a forked process of its own (ns-3's nodes and routes are global), after a
small ring that lets cppyy compile ns-3's code paths first (``WARM_UP``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from core.errors import CapabilityError, ParameterError
from core.frame import HEADER_BYTES, MTU_PAYLOAD_BYTES, ROCE_UDP_PORT, WIRE_OVERHEAD_BYTES
from core.machinecpu import cpu_ticks, steal_s
from core.units import format_size
from experiments.option_parsers import (
    arg_type,
    clear_errors,
    parse_scale,
    parse_size,
    parse_topo,
)
from model.alphabeta import DEFAULT_OVERHEAD_S
from topologies.base import FabricTopo
from topologies.spec import build_topo

TRANSPORTS = ("udp", "tcp")
#: Bytes ns-3 puts on a point-to-point link around a UDP payload: PPP 2, IPv4 20, UDP 8.
NS3_UDP_FRAMING_BYTES = 30
#: A RoCEv2 frame's bytes on the wire besides its payload (headers, ICRC, preamble and
#: gap): a UDP packet is padded by the difference.
ROCE_WIRE_EXTRA_BYTES = HEADER_BYTES + WIRE_OVERHEAD_BYTES
PORT = ROCE_UDP_PORT  # for the look of a capture
TCP_MIN_RTO_S = 1e-3
DRIVER = Path(__file__).with_name("ns3ring_driver.cc")


@dataclass(frozen=True)
class RingPlan:
    """What each rank of the ring sends: ``steps`` chunks of ``chunk_bytes``."""

    ranks: int
    steps: int
    chunk_bytes: int

    @classmethod
    def of(cls, ranks: int, size_bytes: int) -> RingPlan:
        if ranks < 2:
            raise ParameterError("topology", ranks, "a ring needs at least 2 hosts")
        if size_bytes < ranks:
            raise ParameterError("size", size_bytes, f"must be at least one byte per rank ({ranks})")
        return cls(ranks, 2 * (ranks - 1), -(-size_bytes // ranks))

    @property
    def rank_bytes(self) -> int:
        return self.steps * self.chunk_bytes


@dataclass(frozen=True)
class Ns3Link:
    """One point-to-point link as ns-3 builds it (real units)."""

    a: str
    b: str
    rate_bps: float
    delay_s: float        # propagation plus half of each end switch's pipeline latency
    buffer_bytes: int


def ns3_links(topo: FabricTopo) -> list[Ns3Link]:
    """The topology's links, as ns-3 builds them. A channel's delay is the same both
    ways, so each switch's pipeline latency (``switch_latency_s``) is split over the
    two links a path crosses it by: half on each of its links, which adds up to the
    whole latency of every switch a path goes through, as the model counts it."""
    def half_latency(node: str) -> float:
        return float(topo.nodeInfo(node).get("switch_latency_s", 0.0)) / 2
    return [Ns3Link(a, b, float(info["rate_bps"]),
                    float(info["delay_s"]) + half_latency(a) + half_latency(b),
                    int(info["buffer_bytes"]))
            for a, b, info in topo.fabric_links()]


@dataclass(frozen=True)
class Ns3Result:
    spec: str
    transport: str
    ranks: int
    sim_s: float          # simulated time at which the last rank had everything
    run_wall_s: float     # wall time of Simulator::Run alone
    setup_wall_s: float   # nodes, links, addresses, routes, sockets
    ranks_done: int
    delivered_bytes: int
    expected_bytes: int
    packets: int          # UDP: packets the ranks sent (TCP: 0, its segments are ns-3's)

    @property
    def slowdown(self) -> float:
        """Wall time per simulated time: the S at which ns-3 runs this collective."""
        return self.run_wall_s / self.sim_s if self.sim_s > 0 else float("nan")

    @property
    def complete(self) -> bool:
        return self.ranks_done == self.ranks


def load_ns3() -> Any:
    """The ``ns`` bindings with the ring driver compiled in, or a one-line error."""
    try:
        from ns import ns  # type: ignore[import-not-found]
    except ImportError as e:
        raise CapabilityError(f"ns-3's Python bindings are not installed ({e}): "
                              ".venv/bin/pip install ns3 (about 3 minutes)") from None
    import cppyy  # type: ignore[import-not-found]  # comes with the ns3 wheel
    if not hasattr(cppyy.gbl, "fabricemu_ns3"):
        cppyy.cppdef(DRIVER.read_text())
    return ns


def run_ns3_ring(spec: str, size_bytes: int, transport: str) -> Ns3Result:
    """The ring all-reduce of ``size_bytes`` on ``spec`` in ns-3 (this process's ns-3
    holds it until it exits: run it in a process of its own)."""
    if transport not in TRANSPORTS:
        raise ParameterError("transport", transport, f"choose one of {', '.join(TRANSPORTS)}")
    ns = load_ns3()
    import cppyy  # type: ignore[import-not-found]
    topo = build_topo(spec)
    hosts = topo.host_nodes()
    plan = RingPlan.of(len(hosts), size_bytes)
    began = time.perf_counter()
    tcp = transport == "tcp"
    if tcp:
        ns.Config.SetDefault("ns3::TcpSocket::SegmentSize", ns.UintegerValue(MTU_PAYLOAD_BYTES))
        buf = ns.UintegerValue(2 * plan.rank_bytes)
        ns.Config.SetDefault("ns3::TcpSocket::SndBufSize", buf)
        ns.Config.SetDefault("ns3::TcpSocket::RcvBufSize", buf)
        ns.Config.SetDefault("ns3::TcpSocketBase::MinRto", ns.TimeValue(ns.Seconds(TCP_MIN_RTO_S)))
    names = topo.nodes()
    nodes = ns.NodeContainer()
    nodes.Create(len(names))
    node_of = {name: nodes.Get(i) for i, name in enumerate(names)}
    ns.InternetStackHelper().Install(nodes)
    addresses = ns.Ipv4AddressHelper()
    addresses.SetBase(ns.Ipv4Address("10.0.0.0"), ns.Ipv4Mask("255.255.255.252"))
    first_address: dict[str, Any] = {}
    nic_bps: dict[str, float] = {}
    for link in ns3_links(topo):
        p2p = ns.PointToPointHelper()
        p2p.SetDeviceAttribute("DataRate", ns.DataRateValue(ns.DataRate(int(link.rate_bps))))
        p2p.SetDeviceAttribute("Mtu", ns.UintegerValue(MTU_PAYLOAD_BYTES + 100))
        p2p.SetChannelAttribute("Delay", ns.TimeValue(ns.Seconds(link.delay_s)))
        p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                     ns.QueueSizeValue(ns.QueueSize(f"{link.buffer_bytes}B")))
        devices = p2p.Install(node_of[link.a], node_of[link.b])
        interfaces = addresses.Assign(devices)
        addresses.NewNetwork()
        for k, end in enumerate((link.a, link.b)):
            if end in hosts and end not in first_address:
                first_address[end] = interfaces.GetAddress(k)
                nic_bps[end] = link.rate_bps
    ns.Ipv4GlobalRoutingHelper.PopulateRoutingTables()
    ring = cppyy.gbl.fabricemu_ns3.Ring(plan.steps, plan.chunk_bytes, MTU_PAYLOAD_BYTES,
                                        ROCE_WIRE_EXTRA_BYTES - NS3_UDP_FRAMING_BYTES,
                                        ROCE_WIRE_EXTRA_BYTES, DEFAULT_OVERHEAD_S, tcp)
    for h in hosts:
        ring.AddRank(node_of[h], first_address[h], nic_bps[h])
    ring.Start(PORT)
    setup_s = time.perf_counter() - began
    began = time.perf_counter()
    ns.Simulator.Run()
    run_s = time.perf_counter() - began
    result = Ns3Result(spec, transport, plan.ranks, ring.LastDoneS(), run_s, setup_s,
                       ring.RanksDone(), ring.DeliveredBytes(), plan.ranks * plan.rank_bytes,
                       0 if tcp else ring.PacketsSent())
    ns.Simulator.Destroy()
    return result


#: A small ring run first in the same process: cppyy compiles ns-3's code paths on
#: their first call, which cost the first run a quarter of its wall time.
WARM_UP = ("leafspine,2,2,2", 64 << 10)


def model_ring_s(spec: str, size_bytes: int) -> float:
    """The project's model of the ring all-reduce on ``spec`` (the real fabric: the
    mean over 16 hashed-ECMP draws, as ``emu run collective`` prices it)."""
    from experiments.collective import model_curve
    curve = model_curve(spec, "allreduce-ring", [size_bytes], 16, margin=1)
    return float(curve.set_index("size_bytes").loc[size_bytes, "time_model_s"])


def _case(conn: Any, spec: str, size_bytes: int, transport: str) -> None:
    try:
        run_ns3_ring(*WARM_UP, transport)
        conn.send(asdict(run_ns3_ring(spec, size_bytes, transport)))
    except (CapabilityError, ParameterError) as e:
        conn.send(str(e))
    finally:
        conn.close()


def run_in_own_process(spec: str, size_bytes: int, transport: str) -> Ns3Result:
    """``run_ns3_ring`` in a forked process (ns-3's state is global); a one-line error
    if it failed."""
    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_case, args=(there, spec, size_bytes, transport))
    proc.start()
    there.close()
    try:
        answer = here.recv()
    except EOFError:
        answer = f"ns-3 stopped without an answer (exit code {proc.exitcode})"
    proc.join()
    if isinstance(answer, str):
        raise CapabilityError(answer)
    return Ns3Result(**answer)


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description="Benchmark: ns-3 running the ring all-reduce "
                                             "on the emulator's fabric, beside the emulator.")
    ap.add_argument("--topo", action="append", type=arg_type(parse_topo),
                    help="a topology (repeat for several; default fattree,4 and fattree,8)")
    ap.add_argument("--size", default="4MiB", type=arg_type(parse_size),
                    help="the all-reduce's buffer (default 4MiB)")
    ap.add_argument("--transport", default="udp,tcp",
                    help="ns-3's transport: udp, tcp or both (',')")
    ap.add_argument("--engine-scale", type=arg_type(parse_scale),
                    help="also run the ring on the emulator at this S (root), alternating")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds over every case (default 1; fattree,8 takes about a "
                         "minute per ns-3 case)")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat: {args.repeat}: must be at least 1")
    transports = [t.strip() for t in args.transport.split(",") if t.strip()]
    for t in transports:
        if t not in TRANSPORTS:
            ap.error(f"--transport: {t!r}: choose from {', '.join(TRANSPORTS)}")
    load_ns3()  # one line if it is missing, before anything runs
    specs = args.topo or ["fattree,4", "fattree,8"]
    model_s = {spec: model_ring_s(spec, args.size) for spec in specs}
    table = Table(title=f"ring all-reduce of {format_size(args.size)}: ns-3 beside the "
                        "emulator (times on the real fabric's clock)")
    for col in ("topology", "runner", "completion", "vs model", "run wall", "slowdown",
                "set-up", "stolen", "note"):
        table.add_column(col)
    for spec in specs:
        table.add_row(spec, "model", f"{model_s[spec] * 1e6:.1f} µs", "", "", "", "", "",
                      "a-priori prediction: mean of 16 hashed-ECMP draws")
    for _ in range(args.repeat):
        for spec in specs:
            for transport in transports:
                before = cpu_ticks()
                r = run_in_own_process(spec, args.size, transport)
                note = "" if r.complete else (f"only {r.ranks_done} of {r.ranks} ranks "
                                              f"finished ({r.delivered_bytes} of "
                                              f"{r.expected_bytes} B)")
                table.add_row(spec, f"ns-3 {transport}", f"{r.sim_s * 1e6:.1f} µs",
                              f"{r.sim_s / model_s[spec] - 1:+.1%}", f"{r.run_wall_s:.2f} s",
                              f"{r.slowdown:,.0f}×", f"{r.setup_wall_s:.2f} s",
                              f"{steal_s(before, cpu_ticks()):.2f} s", note)
            if args.engine_scale:
                from bench.capacity import engine_ring  # builds namespaces: only when asked
                before = cpu_ticks()
                e = engine_ring(spec, args.engine_scale)
                verdict = "VALID" if e["valid"] else "INVALID: " + "; ".join(e["reasons"])[:80]
                table.add_row(spec, f"emulator, S = {args.engine_scale:,.0f}",
                              f"{e['time_s'] * 1e6:.1f} µs", f"{e['time_s'] / model_s[spec] - 1:+.1%}",
                              f"{e['wall_s']:.2f} s", f"{e['wall_s'] / e['time_s']:,.0f}×",
                              f"{e['whole_s'] - e['wall_s']:.2f} s",
                              f"{steal_s(before, cpu_ticks()):.2f} s",
                              f"{verdict}; {e['error']:+.1%} from the emulable model")
    Console(width=max(Console().width, 150)).print(table)


if __name__ == "__main__":
    main()

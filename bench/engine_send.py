"""Benchmark: engine send rate (RoCEv2 packets/s per core) against Scapy's sendp,
and pacing accuracy (achieved vs configured rate per QP), in the same run.

Rig: two namespaces joined by an unshaped veth pair (MTU 9000), presented to the
engine with the few Fabric methods it uses (hosts, endpoint, egress, ports,
scale), so the engine's send path is limited by its own CPU, not by a shaper. It
has no topology: the engine runs without the real fabric's fixed delays.

* pps: one message, CC off, line rate far above what a core can send; the figure
  is data packets sent by the sending worker per CPU-second of that worker (its
  process time, including the kernel's work in its send calls: on a veth that
  is also the receiving host's ring copy), and per wall second. Both engine
  send paths run: compiled sendmmsg bursts and the pure-Python fallback. Scapy
  ``sendp`` sends the same frames (decoded as Scapy packets) from the same
  namespace, as one list and as one call per packet.
* pacing: one QP per run at a configured line rate (emulated), CC off; achieved
  = (packets - 1) frame bits / (last send - first send).

    python -m bench.engine_send [--payload 1024] [--packets 200000]
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from core.frame import HEADER_BYTES
from core.messages import Message, Workload
from core.scaling import Scale
from emu.fabric import Egress, HostEndpoint
from emu.netns import in_netns
from emu.ports import Port
from emu.rocesink import HostPorts, RoceSinks, install_roce_sinks
from emu.runs import NamespaceSet
from emu.shaping import MTU_BYTES
from engine.run import EngineConfig, run_workload
from experiments.option_parsers import arg_type, clear_errors, parse_csv, parse_float, parse_int
from traffic.roce import Flow, QpTemplate

IFNAME = {"a": "fetest-va", "b": "fetest-vb"}
MAC = {"a": "02:00:00:00:e0:01", "b": "02:00:00:00:e0:02"}
IP = {"a": "10.254.0.1", "b": "10.254.0.2"}
S = 1000.0


class VethRig:
    """Two hosts on an unshaped veth pair, with the Fabric API the engine uses."""

    hosts = ["a", "b"]
    delay_emulated = False  # no topology behind it: runs without the fixed delays

    def __init__(self) -> None:
        self.scale = Scale(S, max_emulated_rate_bps=1e15)
        self.rate_emu_bps = 1e12
        self.roce_sinks = RoceSinks()
        self.namespaces = NamespaceSet("engine benchmark")

    def __enter__(self) -> VethRig:
        try:
            iprs = {h: self.namespaces.create(h) for h in self.hosts}
            ifindex: dict[str, int] = {}
            self.namespaces.veth("a", IFNAME["a"], "b", IFNAME["b"], mtu=MTU_BYTES,
                                 mac_a=MAC["a"], mac_b=MAC["b"], up=False)
            for h, ipr in iprs.items():
                idx = ipr.link_lookup(ifname=IFNAME[h])[0]
                ipr.addr("add", index=idx, address=IP[h], prefixlen=24)
                ipr.link("set", index=idx, state="up")
                ifindex[h] = idx
            self.roce_sinks = install_roce_sinks(
                HostPorts(self.namespaces.path(h), self.namespaces.rtnls[h], [ifindex[h]]) for h in self.hosts)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.roce_sinks.close()
        self.namespaces.close()

    def endpoint(self, host: str) -> HostEndpoint:
        return HostEndpoint(host, self.namespaces.path(host), IP[host])

    def egress(self, src: str, dst: str) -> Egress:
        return Egress(IFNAME[src], MAC[src], MAC[dst], IP[src], IP[dst])

    def ports(self) -> list[Port]:
        return [Port(h, IFNAME[h], 0, self.namespaces.path(h), "b" if h == "a" else "a",
                     self.scale.to_real_rate_bps(self.rate_emu_bps), self.rate_emu_bps, 1 << 20,
                     "veth", False)
                for h in self.hosts]


def engine_pps(rig: VethRig, payload: int, packets: int, send_path: str) -> dict:
    rig.rate_emu_bps = 1e12
    wl = Workload("bench", [Message(1, "a", "b", payload * packets)], ["a", "b"], 1)
    r = run_workload(rig, wl, EngineConfig(cc=None, payload_bytes=payload, rto_s=1e-3,
                                           fixed_delays=False, timeout_s=120,
                                           latency_sample_every=64,
                                           send_path=send_path))
    if r.stats.error:
        raise RuntimeError(f"engine run failed: {r.stats.error}")
    sender = next(w for w in r.stats.workers if "a" in w.hosts)
    row = r.messages.iloc[0]
    busy_s = rig.scale.time_emu_s(row["last_tx_s"] - row["first_tx_s"])
    return {"completed": r.completed, "sent": sender.data_packets_sent,
            "path": r.stats.send_path,
            "pps_cpu": sender.data_packets_sent / sender.cpu_s,
            "pps_wall": sender.data_packets_sent / busy_s,
            "retransmitted": int(row["retransmitted"]), "ring_drops":
            sum(w.ring_drops for w in r.stats.workers)}


def scapy_pps(rig: VethRig, payload: int, packets: int, per_call: bool) -> dict:
    """Scapy's sendp on the same frames: one call with the whole list, or one call
    per packet (how scripts usually send, opening a socket each time)."""
    from scapy.layers.l2 import Ether
    from scapy.sendrecv import sendp

    flow = Flow(MAC["a"], MAC["b"], IP["a"], IP["b"], 0xC001, 1)
    tmpl = QpTemplate(flow, payload * (packets + 2), mtu_payload_bytes=payload)
    pkts = [Ether(bytes(tmpl.write(i + 1, i + 1, time.monotonic_ns()))) for i in range(packets)]
    with in_netns(rig.namespaces.path("a")):
        c0, t0 = time.process_time(), time.perf_counter()
        if per_call:
            for p in pkts:
                sendp(p, iface=IFNAME["a"], verbose=False)
        else:
            sendp(pkts, iface=IFNAME["a"], verbose=False)
        c1, t1 = time.process_time(), time.perf_counter()
    return {"pps_cpu": packets / (c1 - c0), "pps_wall": packets / (t1 - t0)}


def pacing(rig: VethRig, rate_emu_bps: float, payload: int, packets: int) -> dict:
    rig.rate_emu_bps = rate_emu_bps
    wl = Workload("pace", [Message(1, "a", "b", payload * packets)], ["a", "b"], 1)
    r = run_workload(rig, wl, EngineConfig(cc=None, payload_bytes=payload, timeout_s=120,
                                           fixed_delays=False))
    row = r.messages.iloc[0]
    frame_bits = (payload + HEADER_BYTES) * 8  # MIDDLE frames; the FIRST (+16 B RETH) is not timed
    span_emu_s = rig.scale.time_emu_s(row["last_tx_s"] - row["first_tx_s"])
    achieved = (row["packets_sent"] - 1) * frame_bits / span_emu_s
    return {"configured": rate_emu_bps, "achieved": achieved,
            "error": achieved / rate_emu_bps - 1, "completed": r.completed,
            "lag_p50": r.stats.pacing_lag_p50_emu_s, "lag_p99": r.stats.pacing_lag_p99_emu_s}


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--payload", type=arg_type(parse_int(8, 8192)), default=1024)
    ap.add_argument("--packets", type=arg_type(parse_int(1)), default=50_000)
    ap.add_argument("--scapy-packets", type=arg_type(parse_int(1)), default=3000)
    ap.add_argument("--rates", default="10e6,100e6,400e6,1e9,2e9",
                    type=arg_type(parse_csv(parse_float(1e3, 1e11))),
                    help="emulated bit/s, comma-separated (2e9: the fastest a port is shaped)")
    ap.add_argument("--pace-packets", type=arg_type(parse_int(1)), default=2000)
    args = ap.parse_args()
    console = Console()
    with VethRig() as rig:
        engs = [engine_pps(rig, args.payload, args.packets, path) for path in ("auto", "python")]
        scs = {"sendp(list)": scapy_pps(rig, args.payload, args.scapy_packets, False),
               "sendp per packet": scapy_pps(rig, args.payload, args.scapy_packets, True)}
        paces = [pacing(rig, r, args.payload, args.pace_packets) for r in args.rates]
    t = Table(title=f"RoCEv2 send rate, {args.payload}-byte payload, unshaped veth")
    for col in ("sender", "packets", "pkt/s per CPU-s", "pkt/s wall",
                "per CPU-s vs sendp(list) / per packet"):
        t.add_column(col, justify="right")
    for eng in engs:
        t.add_row(f"engine, {eng['path']}", f"{eng['sent']:,}", f"{eng['pps_cpu']:,.0f}",
                  f"{eng['pps_wall']:,.0f}", " / ".join(
                      f"{eng['pps_cpu'] / sc['pps_cpu']:,.0f}x" for sc in scs.values()))
    for name, sc in scs.items():
        t.add_row(f"scapy {name}", f"{args.scapy_packets:,}", f"{sc['pps_cpu']:,.0f}",
                  f"{sc['pps_wall']:,.0f}", "")
    console.print(t)
    for eng in engs:
        console.print(f"engine ({eng['path']}) completed={eng['completed']}, "
                      f"retransmitted={eng['retransmitted']}, "
                      f"receive-ring drops={eng['ring_drops']}")
    p = Table(title="Pacing accuracy per QP (emulated rates)")
    for col in ("configured", "achieved", "error", "lag p50", "lag p99", "completed"):
        p.add_column(col, justify="right")
    for x in paces:
        p.add_row(f"{x['configured'] / 1e6:,.1f} Mb/s", f"{x['achieved'] / 1e6:,.2f} Mb/s",
                  f"{x['error']:+.2%}", f"{x['lag_p50'] * 1e6:,.0f} us",
                  f"{x['lag_p99'] * 1e6:,.0f} us", str(x["completed"]))
    console.print(p)


if __name__ == "__main__":
    main()

"""Benchmark of the ECN marker and the queue sampler (root).

    python -m bench.marker [--seconds 2]

1. Marker cost per packet: the kernel's own BPF run-time statistics (BPF_ENABLE_STATS,
   held only while this script runs) give ns per invocation of the program.
2. Forwarding throughput of a switch port with and without the marker, same run:
   frames pushed back to back through sender -> switch -> receiver for a fixed time,
   port shaped far above what the path can carry, counted on the port's tx counter.
3. Attach time per port (64 ports in one namespace).
4. Sampler CPU cost (thread CPU time / wall time) for 1 and 32 ports at 10 ms and 1 ms.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from core.ecn import Thresholds  # noqa: E402
from core.errors import NotRootError  # noqa: E402
from emu.ecn.bpf import attach_bpf_marker, libbpf  # noqa: E402
from emu.ecn.rig import MarkerRig  # noqa: E402
from emu.runs import NamespaceSet  # noqa: E402
from emu.shaping import port_qdisc_stats, shape_port  # noqa: E402
from emu.telemetry import QueueSampler, port_stats  # noqa: E402
from experiments.option_parsers import arg_type, clear_errors, parse_duration_s

FAST_RATE_EMU_BPS = 20e9  # far above what a Python sender and veth forwarding can carry


def _prog_stats(prog_id: int) -> tuple[int, int]:
    out = json.loads(subprocess.check_output(["bpftool", "prog", "show", "id", str(prog_id), "-j"]))
    return int(out.get("run_time_ns", 0)), int(out.get("run_cnt", 0))


def forwarding(rig: MarkerRig, seconds: float) -> float:
    """Frames/s leaving the switch port while the sender pushes frames back to back."""
    frames = [rig.frame(i & 0xFFFF, 2, 1000) for i in range(1024)]
    before = port_stats([rig.port()]).iloc[0].tx_packets
    t0 = time.perf_counter()
    n = 0
    send = rig.tx_sock.send
    while time.perf_counter() - t0 < seconds:
        for f in frames:
            send(f)
        n += len(frames)
    elapsed = time.perf_counter() - t0
    time.sleep(0.2)
    after = port_stats([rig.port()]).iloc[0].tx_packets
    return (after - before) / elapsed


def attach_time(n_ports: int = 64) -> float:
    with NamespaceSet("marker attach benchmark") as scratch:
        ipr = scratch.create("bench")
        idx = []
        for i in range(n_ports):
            ipr.link("add", ifname=f"p{i}", kind="veth", peer=f"q{i}")
            j = ipr.link_lookup(ifname=f"p{i}")[0]
            ipr.link("set", index=j, state="up")
            shape_port(ipr, j, 10e6, 100_000)
            idx.append(j)
        attach_bpf_marker(scratch.path("bench"), "p0", 10e6, 100_000, Thresholds(1, 2, 1.0),
                          rtnl=scratch.rtnls["bench"], ifindex=idx[0]).close()  # compile/cache warm-up
        t0 = time.perf_counter()
        markers = [attach_bpf_marker(scratch.path("bench"), f"p{i}", 10e6, 100_000,
                                     Thresholds(10_000, 40_000, 0.2), rtnl=scratch.rtnls["bench"],
                                     ifindex=j)
                   for i, j in enumerate(idx[1:], start=1)]
        per_port_ms = (time.perf_counter() - t0) / len(markers) * 1e3
        for m in markers:
            m.close()
        return per_port_ms


def sampler_cost(rig: MarkerRig, n_ports: int, interval_s: float,
                 seconds: float) -> tuple[float, float, float]:
    """(CPU fraction, CPU us per sweep of all ports, sweeps achieved per second)."""
    ports = [rig.port()] * n_ports
    frames = [rig.frame(i, 2) for i in range(int(seconds * rig.rate_emu_bps / 8000 * 1.2))]
    with QueueSampler(ports, interval_s=interval_s) as s:
        rig.send(frames, rate_pps=rig.rate_emu_bps / 8000 * 1.2)
    sweeps = max(1, len(s.frame()) // n_ports)
    return s.cpu_fraction(), s.cpu_s / sweeps * 1e6, sweeps / s.wall_s


@clear_errors
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=arg_type(parse_duration_s), default=2.0)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise NotRootError("the marker benchmark builds namespaces and attaches BPF programs: run it as root")
    rows: list[tuple[str, str]] = []

    stats_fd = libbpf().lib.bpf_enable_stats(0) if hasattr(libbpf().lib, "bpf_enable_stats") else -1
    with MarkerRig("bm", FAST_RATE_EMU_BPS, 10_000_000, Thresholds(10**8, 2 * 10**8, 0.1)) as marked, \
            MarkerRig("bn", FAST_RATE_EMU_BPS, 10_000_000, None) as plain:
        # Alternate to share any drift of the machine's load between the two.
        with_pps, without_pps = [], []
        for _ in range(2):
            without_pps.append(forwarding(plain, args.seconds / 2))
            with_pps.append(forwarding(marked, args.seconds / 2))
        run_ns, run_cnt = _prog_stats(marked.marker.prog_id) \
            if stats_fd >= 0 and shutil.which("bpftool") else (0, 0)
        assert port_qdisc_stats(marked.ipr_switch, marked.w1_index)["drops"] == 0
    if stats_fd >= 0:
        os.close(stats_fd)
    w, wo = sum(with_pps) / 2, sum(without_pps) / 2
    rows.append(("marker run time per packet (BPF stats)",
                 f"{run_ns / run_cnt:.0f} ns over {run_cnt} packets" if run_cnt
                 else "n/a (needs bpftool and BPF run-time statistics)"))
    rows.append(("forwarding without marker", f"{wo / 1e3:.1f} kpps"))
    rows.append(("forwarding with marker", f"{w / 1e3:.1f} kpps ({100 * (w / wo - 1):+.1f}%)"))
    rows.append(("marker cost from throughput", f"{(1 / w - 1 / wo) * 1e9:.0f} ns/packet (noisy)"))
    rows.append(("attach time per port (63 ports)", f"{attach_time():.2f} ms"))

    with MarkerRig("bs", 16e6, 400_000, Thresholds(20_000, 100_000, 0.2)) as r:
        for n, iv in ((1, 0.01), (32, 0.01), (1, 0.001), (32, 0.001)):
            frac, per_sweep_us, sweeps_per_s = sampler_cost(r, n, iv, args.seconds / 2)
            rows.append((f"sampler CPU, {n} port(s) every {iv * 1e3:g} ms",
                         f"{100 * frac:.2f}% of a core ({per_sweep_us:.0f} us CPU per sweep, "
                         f"{sweeps_per_s:.0f} sweeps/s achieved)"))
            r.wait_idle()

    width = max(len(k) for k, _ in rows)
    print(f"{'measure'.ljust(width)}  value")
    for k, v in rows:
        print(f"{k.ljust(width)}  {v}")


if __name__ == "__main__":
    lib = libbpf().lib
    if hasattr(lib, "bpf_enable_stats"):
        lib.bpf_enable_stats.restype, lib.bpf_enable_stats.argtypes = ctypes.c_int, [ctypes.c_int]
    main()

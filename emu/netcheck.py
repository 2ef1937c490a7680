"""The `emu net --test` checks: all-pairs reachability and an iperf3 bulk flow."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass

from rich.console import Console

from core.errors import FabricEmuError
from core.units import format_rate
from emu.fabric import Fabric
from emu.reachability import ping_all

IPERF3_PORT = 5201
#: How long the iperf3 server may take to listen, and the client to connect.
IPERF3_START_TIMEOUT_S = 5.0
_TCP_LISTEN = "0A"  # socket state in /proc/net/tcp


@dataclass(frozen=True)
class IperfResult:
    """Emulated rates (what iperf3 sees inside the fabric) of one flow."""

    sent_bps: float
    received_bps: float
    lost_percent: float | None = None  # UDP only


def pingall_check(fab: Fabric, console: Console) -> bool:
    t0 = time.perf_counter()
    result = ping_all([(h, fab.netns_path(h), fab.plan.host_ip[h]) for h in fab.hosts])
    failed = sorted(pair for pair, ok in result.items() if not ok)
    n = len(result)
    console.print(f"pingall: {n - len(failed)}/{n} host pairs reachable "
                  f"({100.0 * len(failed) / max(n, 1):.0f}% dropped) "
                  f"in {time.perf_counter() - t0:.2f} s")
    for a, b in failed[:10]:
        console.print(f"  [red]unreachable[/] {a} -> {b}")
    return not failed


def _listening(pid: int, port: int) -> bool:
    """Whether a TCP socket listens on ``port`` in the network namespace of ``pid``."""
    try:
        with open(f"/proc/{pid}/net/tcp") as f:
            rows = f.readlines()[1:]
    except FileNotFoundError:  # the server has exited
        return False
    return any(r.split()[1].endswith(f":{port:04X}") and r.split()[3] == _TCP_LISTEN for r in rows)


def run_iperf3(fab: Fabric, src: str, dst: str, duration_s: float = 4.0, *,
               udp_rate: str | None = None, port: int = IPERF3_PORT) -> IperfResult:
    """One iperf3 flow ``src`` -> ``dst`` (TCP, or UDP at ``udp_rate`` such as '10M').

    Bounded in time: the server must listen and the client connect within
    IPERF3_START_TIMEOUT_S, the whole flow end within its duration plus that;
    FabricEmuError otherwise (e.g. no path left between the two hosts).
    """
    server = fab.exec(dst, ["iperf3", "-s", "-1", "-B", fab.plan.host_ip[dst], "-p", str(port)],
                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + IPERF3_START_TIMEOUT_S
        while not _listening(server.pid, port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise FabricEmuError(f"iperf3 server on {dst} did not start: "
                                     f"{(server.stderr.read() if server.stderr else '').strip()}")
            time.sleep(0.02)
        argv = ["iperf3", "-c", fab.plan.host_ip[dst], "-p", str(port), "-t", f"{duration_s:g}",
                "-J", "--connect-timeout", str(int(IPERF3_START_TIMEOUT_S * 1000))]
        if udp_rate is not None:
            argv += ["-u", "-b", udp_rate]
        else:
            argv += ["-O", "1"]  # omit slow start from the average
        try:
            res = fab.run(src, argv, timeout_s=duration_s + 1 + 2 * IPERF3_START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise FabricEmuError(f"iperf3 {src} -> {dst} did not finish in time") from None
    finally:
        server.kill()
        server.wait()
        if server.stderr:
            server.stderr.close()
    try:
        report = json.loads(res.stdout)
    except json.JSONDecodeError:
        report = {"error": (res.stdout + res.stderr).strip()[-300:] or "no output"}
    if "error" in report or res.returncode != 0:
        raise FabricEmuError(f"iperf3 {src} -> {dst} failed: {report.get('error', res.stderr)}")
    end = report["end"]
    return IperfResult(end["sum_sent"]["bits_per_second"], end["sum_received"]["bits_per_second"],
                       end["sum_received"]["lost_percent"] if udp_rate is not None else None)


def iperf_check(fab: Fabric, console: Console, duration_s: float = 4.0) -> bool:
    """TCP bulk flow between the first and last host; compares with the NIC rate."""
    src, dst = fab.hosts[0], fab.hosts[-1]
    try:
        achieved_emu_bps = run_iperf3(fab, src, dst, duration_s).received_bps
    except FabricEmuError as e:
        console.print(f"[red]{e}[/]")
        return False
    nic = fab.port(src, fab.routes.next_hops[src][dst][0])
    ratio = achieved_emu_bps / nic.rate_emu_bps
    console.print(f"iperf {src} -> {dst}: {format_rate(achieved_emu_bps)}b/s emulated = "
                  f"{format_rate(fab.scale.to_real_rate_bps(achieved_emu_bps))}b/s real, "
                  f"{100 * ratio:.1f}% of the {format_rate(nic.rate_bps)}b/s NIC "
                  f"(TCP/IP headers cost ~0.6% at MTU 9000)")
    return ratio > 0.9

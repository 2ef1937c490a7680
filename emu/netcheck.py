"""The `emu net --test` checks: all-pairs reachability and an iperf3 bulk flow."""

from __future__ import annotations

import json
import subprocess
import time

from rich.console import Console

from emu.fabric import Fabric
from emu.reachability import ping_all
from emu.units import format_rate


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


def iperf_check(fab: Fabric, console: Console, duration_s: float = 4.0) -> bool:
    """TCP bulk flow between the first and last host; compares with the NIC rate."""
    src, dst = fab.hosts[0], fab.hosts[-1]
    server = fab.exec(dst, ["iperf3", "-s", "-1", "-B", fab.plan.host_ip[dst]],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        res = fab.run(src, ["iperf3", "-c", fab.plan.host_ip[dst], "-t", str(duration_s),
                            "-O", "1", "-J"], timeout_s=duration_s + 20)
    finally:
        server.kill()
    if res.returncode != 0:
        console.print(f"[red]iperf3 failed:[/] {res.stdout[-300:]} {res.stderr[-300:]}")
        return False
    achieved_emu_bps = json.loads(res.stdout)["end"]["sum_received"]["bits_per_second"]
    nic = fab.port(src, fab.routes.next_hops[src][dst][0])
    ratio = achieved_emu_bps / nic.rate_emu_bps
    console.print(f"iperf {src} -> {dst}: {format_rate(achieved_emu_bps)}b/s emulated = "
                  f"{format_rate(fab.scale.to_real_rate_bps(achieved_emu_bps))}b/s real, "
                  f"{100 * ratio:.1f}% of the {format_rate(nic.rate_bps)}b/s NIC "
                  f"(TCP/IP headers cost ~0.6% at MTU 9000)")
    return ratio > 0.9

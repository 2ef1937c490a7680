"""`emu doctor`: what this kernel and machine offer, and what a run will cost here.

The capability probe (emu.capabilities) decides; this module only prints its
findings beside the engine's measured costs, the default S and the run registry.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table

from core.scaling import DEFAULT_SCALE
from core.units import format_rate


def _cc_note(compiled: bool) -> str:
    """Which built-in congestion controls run per burst in C (a C twin) and which in
    Python, as this machine's engine will run them."""
    from engine.ccview import has_c_twin
    from traffic.ccload import REGISTRY, resolve_cc

    twins = [n for n in REGISTRY if n != "off" and has_c_twin(resolve_cc(n))]
    python = [n for n in REGISTRY if n != "off" and n not in twins]
    if not compiled:
        return "Congestion control: every algorithm in Python (no compiled sender here)"
    return (f"Congestion control: {', '.join(twins)} in C (a twin of the Python class: "
            f"bursts, starts and ACKs without a call into Python; ECN echoes and CNPs "
            f"in Python); "
            f"{', '.join(python)} and your own classes in Python (a call per ACK, CNP or "
            "timer: more CPU per frame, which emu bench capacity --cc shows)")


def report_capabilities(console: Console, marking: str) -> bool:
    """Print the probe's table and notes; True when every essential is present."""
    from emu.capabilities import probe

    caps = probe(marking)
    table = Table(title="fabricemu capabilities")
    for col in ("check", "status", "detail"):
        table.add_column(col)
    for c in caps.checks:
        status = "[green]ok[/]" if c.ok else ("[red]MISSING[/]" if c.essential else "[yellow]absent[/]")
        table.add_row(c.name + (" *" if c.essential else ""), status, c.detail)
    console.print(table)
    console.print("* essential.  Switch ports: HTB at R/S with a byte FIFO of the real buffer.")
    console.print(f"ECN marking: {caps.marking_detail or 'not probed'}")
    netem = next((c for c in caps.checks if c.name == "qdisc netem"), None)
    console.print("Link delay: " + ("netem, dilated by S" if caps.has("qdisc netem") else
                                    f"not emulated ({netem.detail if netem else 'not probed'})"))
    from engine.burst import Burst
    from engine.rx import RxLib

    burst = Burst()
    console.print(f"Engine send path: {burst.detail}")
    console.print(f"Engine receive path: {RxLib().detail}")
    console.print(_cc_note(burst.compiled))
    from core.machinecpu import cpu_ticks

    before = cpu_ticks()
    console.print(_wakeup_note())
    console.print(_steal_note(before, cpu_ticks()))
    console.print(_throttling_note())
    console.print(_default_scale_note())
    console.print(_workers_note(len(os.sched_getaffinity(0))))
    _print_registry(console)
    return caps.essentials_ok and caps.marking_backend is not None




def _wakeup_note() -> str:
    """What one engine wake-up costs here, measured now."""
    from engine.rawsock import WAKE_SLEEP_S, wakeup_cpu_us

    return (f"Engine wake-up: {wakeup_cpu_us():.1f} µs of CPU per timer sleep of "
            f"{WAKE_SLEEP_S * 1e6:.0f} µs (the engine wakes 0.25-0.8 times per frame it sends; "
            "a VM that traps timer programming pays tens of µs, bare metal a few: "
            "emu bench capacity prints each run's share)")


def _steal_note(before: tuple[int, int, int], after: tuple[int, int, int]) -> str:
    """The CPU time the hypervisor took (``core.machinecpu.cpu_ticks`` readings): since boot,
    and between the two readings."""
    since_boot = after[2] / after[0] if after[0] else 0.0
    total = after[0] - before[0]
    during = (after[2] - before[2]) / total if total > 0 else 0.0
    return (f"Hypervisor steal: {since_boot:.1%} of this machine's CPU time since boot, "
            f"{during:.1%} during the wake-up probe (a host running other guests stalls "
            "the workers for ms at a time; the gate refuses a run with over 1 %: "
            "'hypervisor steal')")


def _throttling_note(probe_s: float = 2.0) -> str:
    """How much of ``probe_s`` on the idle machine the hypervisor slowed every CPU
    without counting steal (engine.speedprobe), measured now."""
    import time

    from engine.speedprobe import SLOW_FACTOR, SpeedProbe

    probe = SpeedProbe()
    if not probe.start():
        return "Hidden throttling: not measured (the speed probe needs clang and SCHED_FIFO)"
    time.sleep(probe_s)
    result = probe.stop()
    if result is None:
        return "Hidden throttling: not measured (the speed probe could not run)"
    return (f"Hidden throttling: every CPU ran at under 1/{SLOW_FACTOR} of its speed for "
            f"{result.throttled_share:.1%} of {probe_s:g} s idle, uncounted as steal (a "
            "host's CPU quota does it in spells of 20-50 ms; the gate refuses a run that "
            "lagged with over 1 %: 'hypervisor throttling')")


def _default_scale_note() -> str:
    """The experiments' default S, where it is defined, and what it buys."""
    from experiments.measure import packet_time_s
    from topologies.base import NIC_RATE_BPS

    frame_emu_ms = packet_time_s(NIC_RATE_BPS) * DEFAULT_SCALE * 1e3
    return (f"Default S (experiments, demo): {DEFAULT_SCALE:g}, so a "
            f"{format_rate(NIC_RATE_BPS)}b/s NIC runs at "
            f"{format_rate(NIC_RATE_BPS / DEFAULT_SCALE)}b/s and sends a full frame every "
            f"{frame_emu_ms:.1f} ms: per-frame host overhead (scheduling, pacing lag) stays "
            "small beside it. The fidelity gate marks a run invalid and suggests a larger S "
            "where this machine is too slow for it.")


def _workers_note(n_cpus: int) -> str:
    """How many engine workers a run gets here."""
    from engine.run import WORKER_MEAN_LINK_FRAMES_PER_S, WORKER_PEAK_FRAMES_PER_S

    return (f"Engine workers: as few as a run's frame rates need (dilated by S), one per "
            f"{WORKER_PEAK_FRAMES_PER_S:,} frames/s of its sending NICs all at line rate and "
            f"one per {WORKER_MEAN_LINK_FRAMES_PER_S:,} frames/s on average, each counted "
            "once per link it crosses (ACKs beyond one per 16 frames, HPCC's, count as "
            "frames), "
            f"at most {n_cpus} here (one per usable CPU); fewer workers wake up less often "
            "per frame. --set workers=N (experiments) or EngineConfig(workers=N) sets the "
            "number.")


def _print_registry(console: Console) -> None:
    """Live runs, and stale ones left by a killed process, from the run registry."""
    from emu.runs import list_runs

    runs = list_runs()
    for r in (r for r in runs if r.alive):
        console.print(f"Live run {r.run_id}: pid {r.pid}, {r.description}")
    stale = [r for r in runs if not r.alive]
    if not stale:
        console.print("Stale runs: none")
        return
    console.print(f"[yellow]Stale runs (their process is gone): {len(stale)}[/]")
    for r in stale:
        console.print(f"  {r.run_id}: {r.description}, {len(r.namespaces)} namespaces"
                      + (f", was pid {r.pid}" if r.pid else ""))
    console.print("  remove them (and nothing else) with: emu clean")

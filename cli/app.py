"""`emu`: the command-line entry point (doctor, topo, net, clean, ...).

The top floor. Each command imports the floors it uses inside its function, on
purpose: `emu --help`, `emu clean` and a refused option must answer in ~0.15 s,
and importing the experiments, the engine and the fabric (pandas, scapy, pyroute2,
matplotlib) costs ~1.5 s on a 2-core VM.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.lab import lab_app
from core.errors import FabricEmuError, ParameterError
from core.scaling import DEFAULT_SCALE
from core.units import format_rate

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="fabricemu: time-dilated packet-level emulator of AI-cluster networks.")
topo_app = typer.Typer(no_args_is_help=True, help="Inspect topologies without building them.")
app.add_typer(topo_app, name="topo")
app.add_typer(lab_app, name="lab")
console = Console()

ScaleOpt = Annotated[float, typer.Option("--scale", "-S", help="time-dilation factor S "
                                         "(emulated rate = real rate / S)")]
TopoOpt = Annotated[str, typer.Option("--topo", help="topology as NAME,ARG,KEY=VALUE "
                                      "(e.g. fattree,4  dragonfly,p=2,a=4,h=2  torus,4,4)")]
MarkingOpt = Annotated[str, typer.Option("--marking", help="ECN marking back end: "
                                         "auto | bpf | red | off")]
DelayOpt = Annotated[str, typer.Option("--delay", help="link propagation delay (netem, "
                                       "dilated by S): auto | on | off")]


#: Commands that build fabrics to measure or use them: one at a time per machine.
_SESSION_COMMANDS = ("run", "demo", "net", "replay")


@app.callback()
def _declare_session(ctx: typer.Context) -> None:
    # No docstring: the app's help stays the one given to typer.Typer above.
    if ctx.invoked_subcommand in _SESSION_COMMANDS:
        from emu.runs import declare_session, end_session

        declare_session(" ".join(["emu", *sys.argv[1:]])[:120])
        ctx.call_on_close(end_session)  # in-process callers (tests) outlive the command


@app.command()
def doctor(marking: MarkingOpt = "auto") -> None:
    """Probe this kernel and machine; exit non-zero if an essential is missing."""
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

    console.print(f"Engine send path: {Burst().detail}")
    console.print(f"Engine receive path: {RxLib().detail}")
    from engine.run import cpu_ticks

    before = cpu_ticks()
    console.print(_wakeup_note())
    console.print(_steal_note(before, cpu_ticks()))
    console.print(_default_scale_note())
    console.print(_workers_note(len(os.sched_getaffinity(0))))
    _print_registry()
    if not caps.essentials_ok or caps.marking_backend is None:
        raise typer.Exit(1)


def _wakeup_note() -> str:
    """What one engine wake-up costs here, measured now."""
    from engine.rawsock import WAKE_SLEEP_S, wakeup_cpu_us

    return (f"Engine wake-up: {wakeup_cpu_us():.1f} µs of CPU per timer sleep of "
            f"{WAKE_SLEEP_S * 1e6:.0f} µs (the engine wakes 0.25-0.8 times per frame it sends; "
            "a VM that traps timer programming pays tens of µs, bare metal a few: "
            "emu bench capacity prints each run's share)")


def _steal_note(before: tuple[int, int, int], after: tuple[int, int, int]) -> str:
    """The CPU time the hypervisor took (``engine.run.cpu_ticks`` readings): since boot,
    and between the two readings."""
    since_boot = after[2] / after[0] if after[0] else 0.0
    total = after[0] - before[0]
    during = (after[2] - before[2]) / total if total > 0 else 0.0
    return (f"Hypervisor steal: {since_boot:.1%} of this machine's CPU time since boot, "
            f"{during:.1%} during the wake-up probe (a host running other guests stalls "
            "the workers for ms at a time; the gate refuses such runs for pacing or "
            "receive lag and suggests a larger S)")


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


def _print_registry() -> None:
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


@topo_app.command("show")
def topo_show(spec: Annotated[str, typer.Argument(help="NAME,ARG,KEY=VALUE")],
              scale: ScaleOpt = DEFAULT_SCALE,
              as_json: Annotated[bool, typer.Option("--json", help="machine-readable")] = False,
              png: Annotated[Path | None, typer.Option("--png", help="draw to this PNG")] = None
              ) -> None:
    """Sizes, per-tier rates (real and emulated), bisection bandwidth, diameter."""
    from core.scaling import Scale
    from topologies.info import check_drawing, describe_topology, draw_topology
    from topologies.spec import build_topo, topo_size

    size = topo_size(spec)  # the caps, from the parameters alone
    if png is not None:
        check_drawing(size, png)
    topo = build_topo(spec)
    info = describe_topology(topo, Scale(scale))
    if png is not None:
        draw_topology(topo, png)
        info["png"] = str(png)
    if as_json:
        print(json.dumps(info, indent=2))
        return
    console.print(f"[bold]{escape(info['topology'])}[/]  hosts={info['hosts']} "
                  f"switches={info['switches']} links={info['links']} "
                  f"diameter={info['diameter_hops']} hops  "
                  f"bisection={format_rate(info['bisection_bps'])}b/s")
    table = Table(title=f"links per tier (S = {scale:g})")
    for col in ("tier", "links", "real rate", "emulated rate", "buffer"):
        table.add_column(col, justify="right")
    for tier in info["tiers"]:
        table.add_row(tier["tier"], str(tier["links"]), format_rate(tier["rate_bps"]) + "b/s",
                      format_rate(tier["rate_emu_bps"]) + "b/s", f"{tier['buffer_bytes']:,} B")
    console.print(table)
    if png is not None:
        console.print(f"drawing: {escape(str(png))}")


@app.command()
def net(topo: TopoOpt = "fattree,4", scale: ScaleOpt = DEFAULT_SCALE,
        test: Annotated[str, typer.Option("--test", help="pingall | iperf | none")] = "pingall",
        cli: Annotated[bool, typer.Option("--cli", help="drop into Mininet's CLI")] = False,
        marking: MarkingOpt = "auto", delay: DelayOpt = "auto") -> None:
    """Build a fabric, run a test, tear it down; the exit code says pass/fail."""
    from core.scaling import Scale
    from emu.fabric import Fabric
    from emu.netcheck import iperf_check, pingall_check
    from topologies.spec import build_topo

    if test not in ("pingall", "iperf", "none"):
        raise FabricEmuError(f"invalid --test {test!r}: choose pingall, iperf or none")
    fab = Fabric(build_topo(topo), Scale(scale), marking=marking, delay=delay)
    ok = True
    with console.status(f"building {fab.topo.describe()} ..."):
        fab.start()
    try:
        s = fab.summary()
        console.print(f"built {s['topology']}: {s['hosts']} hosts, {s['switches']} switches, "
                      f"{s['links']} links, {s['ports']} shaped ports in {s['build_s']:.2f} s "
                      f"(S = {scale:g}, marking = {s['marking']}, link delay: {s['delay_detail']})")
        for note in s["delay_notes"]:
            console.print(f"[yellow]link delay: {note}[/]")
        if test == "pingall":
            ok = pingall_check(fab, console)
        elif test == "iperf":
            ok = iperf_check(fab, console)
        if cli:
            from cli.mncli import run_mininet_cli

            run_mininet_cli(fab)
    finally:
        with console.status("tearing down ..."):
            fab.stop()
    if not ok:
        raise typer.Exit(1)


@app.command()
def pcap(collective: Annotated[str, typer.Argument(help="e.g. allreduce-ring, alltoall, incast")],
         ranks: Annotated[int, typer.Option("--ranks", help="number of ranks (hosts)")] = 4,
         size: Annotated[str, typer.Option("--size", help="collective size, e.g. 1MiB")] = "1MiB",
         out: Annotated[Path, typer.Option("-o", "--out", help="pcap file to write")] = Path("collective.pcap"),
         rate: Annotated[str, typer.Option("--rate", help="real NIC rate")] = "400G",
         max_size: Annotated[str, typer.Option("--max-size", help="refuse to write a pcap "
                                               "larger than this")] = "1GiB",
         max_messages: Annotated[int, typer.Option("--max-messages", help="refuse a collective "
                                                   "of more messages (QPs) than this")] = 20_000
         ) -> None:
    """Write a collective's RoCEv2 traffic to a pcap, without a fabric.

    The file's exact size and the collective's message count are computed from the
    schedule before anything is built; over --max-size (default 1 GiB) or
    --max-messages (default 20,000, each takes ~2.5 ms to build) the command stops
    with an error.  Frames stream to disk as they are generated.
    """
    from core.units import parse_rate_bps, parse_size_bytes
    from traffic.pcap import collective_pcap

    summary = collective_pcap(collective, ranks, parse_size_bytes(size, "size"), out,
                              rate_bps=parse_rate_bps(rate, "rate"),
                              max_bytes=parse_size_bytes(max_size, "max-size"),
                              max_messages=max_messages)
    console.print(f"wrote {summary.path}: {summary.n_frames} frames, {summary.n_messages} "
                  f"messages, {summary.duration_s * 1e6:.1f} µs of real time "
                  "(open with: tshark -r FILE -Y infiniband)")


@app.command()
def replay(pcap_file: Annotated[Path, typer.Argument(help="RoCEv2 pcap (e.g. from emu pcap)")],
           topo: TopoOpt = "fattree,4", scale: ScaleOpt = DEFAULT_SCALE,
           marking: MarkingOpt = "auto",
           max_gap: Annotated[str | None, typer.Option(
               "--max-gap", help="shorten every idle gap between consecutive frames to at most "
               "this much real time (e.g. 100us); default: keep the captured gaps")] = None,
           max_wall: Annotated[str, typer.Option(
               "--max-wall", help="refuse a replay that would take longer than this wall time "
               "(the pcap's span, after --max-gap, times S)")] = "600s",
           max_size: Annotated[str, typer.Option("--max-size", help="refuse a pcap file larger "
                                                 "than this")] = "1GiB",
           max_frames: Annotated[int, typer.Option("--max-frames", help="refuse a pcap of more "
                                                   "RoCEv2 frames (all are held in memory)")
                                 ] = 2_000_000) -> None:
    """Inject a pcap into a fabric open-loop with its original timing (dilated by S).

    The pcap (a regular file of at most --max-size, default 1 GiB) is read and checked
    before any fabric is built: its RoCEv2 frames' addresses must be hosts of the
    topology, and the replay must fit in --max-wall (default 600 s; a capture with an
    idle hour would otherwise keep the fabric up for over a year at the default S): pass
    --max-gap to shorten idle gaps.
    """
    from core.scaling import Scale
    from core.units import parse_size_bytes, parse_time_s
    from emu.fabric import Fabric
    from engine.replay import plan_replay, replay_pcap
    from topologies.spec import build_topo

    limits = {"max_gap_s": None if max_gap is None else parse_time_s(max_gap, "max-gap"),
              "max_wall_s": parse_time_s(max_wall, "max-wall"),
              "max_bytes": parse_size_bytes(max_size, "max-size"), "max_frames": max_frames}
    fab = Fabric(build_topo(topo), Scale(scale), marking=marking)  # a plan: nothing built yet
    plan = plan_replay(pcap_file, fab, **limits)
    console.print(f"{pcap_file}: {plan.frames} RoCEv2 frames spanning {plan.span_s * 1e6:.1f} µs "
                  f"real ({plan.compressed_gaps} gaps shortened), about {plan.wall_s:.1f} s "
                  f"at S = {scale:g}")
    with fab:
        with console.status(f"replaying {pcap_file} into {fab.topo.describe()} ..."):
            res = replay_pcap(fab, pcap_file, **limits)
        stats = fab.port_stats()
    console.print(f"replayed {res.frames} frames spanning {res.duration_s * 1e6:.1f} µs real "
                  f"in {res.wall_emu_s:.2f} s emulated (S = {scale:g}); send lateness p99 "
                  f"{res.late_p99_s * 1e6:.2f} µs real")
    console.print(f"fabric ports carried {int(stats['tx_packets'].sum())} packets, "
                  f"{int(stats['drops'].sum())} drops, {int(stats['ecn_marked'].sum())} ECN marks")


def _experiment_help(only: str = "") -> str:
    """Each experiment's options (``only``'s, if known) as ``--set`` text (what you would
    type), with --quick's value where it differs, and the option's help."""
    from experiments.registry import EXPERIMENTS

    lines = ["Experiments and their options (--set KEY=VALUE; lists use ';'):"]
    for name, module in EXPERIMENTS.items():
        if only in EXPERIMENTS and name != only:
            continue
        lines.append(f"{name}:")
        for key, option in module.OPTIONS.items():
            value = option.format(option.default)
            quick = "" if option.quick is None else f" (--quick: {option.format(option.quick)})"
            lines.append(f"  {key}={value}{quick}")
            lines.append(f"      {option.help}")
    return "\n".join(lines)


def _finish(result) -> None:  # noqa: ANN001 - experiments.rundir.RunResult
    console.print(f"results: {escape(str(result.run_dir))}")
    if not result.valid:
        console.print("[yellow]the fidelity gate marked this run INVALID (see summary); "
                      "its measurements do not represent the real fabric[/]")
        raise typer.Exit(3)


OutOpt = Annotated[Path | None, typer.Option("--out", help="run directory (default: a new "
                                             "runs/NAME-<time>)")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="small, fast configuration")]
RunScaleOpt = Annotated[str | None, typer.Option("--scale", "-S", help="override S")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="KEY=VALUE option "
                                                  "(see emu run --list)")]
ForceOpt = Annotated[bool, typer.Option("--force", help="start over in a non-empty --out "
                                        "(removes the run files there)")]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="keep the finished cases of the "
                                         "run in --out and run the rest")]


#: What ``emu run`` runs: experiments.registry.EXPERIMENTS's names (a unit test keeps
#: them equal; the registry is imported only when a command needs it).
EXPERIMENT_NAMES = ("incast", "collective", "ratios", "ecmp", "fairness", "sweep", "cc", "demo")


@app.command()
def run(name: Annotated[str, typer.Argument(help=" | ".join(EXPERIMENT_NAMES))] = "",
        out: OutOpt = None, quick: QuickOpt = False, scale: RunScaleOpt = None,
        sets: SetOpt = None, force: ForceOpt = False, resume: ResumeOpt = False,
        metrics_port: Annotated[int | None, typer.Option(
            "--metrics-port", help="serve live Prometheus metrics on this port of 127.0.0.1 "
            "(= --set metrics_port=N; docs/monitoring.md)")] = None,
        list_options: Annotated[bool, typer.Option("--list", help="list experiments and "
                                                   "options")] = False) -> None:
    """Run an experiment; writes config.json, CSVs, summary.json and plots to --out."""
    from experiments.registry import cli_run, parse_sets

    if list_options or not name:
        console.print(_experiment_help(name))
        if not name and not list_options:
            raise typer.Exit(2)
        return
    overrides = parse_sets(sets)
    if metrics_port is not None:
        if "metrics_port" in overrides:
            raise ParameterError("--metrics-port", metrics_port,
                                 "also given as --set metrics_port=; give it once")
        overrides["metrics_port"] = str(metrics_port)
    _finish(cli_run(name, out, quick, scale, overrides, force=force, resume=resume))


@app.command()
def demo(out: OutOpt = None, quick: QuickOpt = False, scale: RunScaleOpt = None,
         sets: SetOpt = None, force: ForceOpt = False, resume: ResumeOpt = False) -> None:
    """The default experiment: incast with and without DCQCN plus a ring all-reduce on a
    k=4 fat-tree, measured beside the model (about a minute). Same as `emu run demo`."""
    from experiments.registry import demo as run_demo
    from experiments.registry import parse_sets

    _finish(run_demo(out, quick, scale, parse_sets(sets), force=force, resume=resume))


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="a finished run directory")]) -> None:
    """Re-render the tables and plots of a finished run."""
    from experiments.registry import report as render

    for path in render(run_dir):
        console.print(f"plot: {escape(str(path))}")


@app.command(context_settings={"allow_extra_args": True, "allow_interspersed_args": False})
def bench(ctx: typer.Context,
          name: Annotated[str, typer.Argument(help="a benchmark (see --list); what follows "
                                              "it is its own arguments (NAME --help)")] = "",
          list_benchmarks: Annotated[bool, typer.Option("--list", help="list the "
                                                        "benchmarks")] = False) -> None:
    """Run a benchmark (figures side by side in one run; most need root)."""
    from bench import BENCHMARKS
    from bench import run as run_bench

    if list_benchmarks or not name:
        width = max(map(len, BENCHMARKS))
        for benchmark, what in BENCHMARKS.items():
            typer.echo(f"  {benchmark:<{width}}  {what}")
        typer.echo("emu bench NAME [ARGS...] runs one (python -m bench.NAME too); "
                   "emu bench NAME --help: its options")
        return
    run_bench(name, ctx.args, prog=f"emu bench {name}")


@app.command()
def clean(force: Annotated[bool, typer.Option("--force", help="also remove runs whose "
                                              "owner process is still alive")] = False) -> None:
    """Remove residues of crashed runs (only fabricemu's own namespaces)."""
    from emu.runs import clean_runs, list_runs

    live = [r for r in list_runs() if r.alive and not force]
    cleaned = clean_runs(include_alive=force)
    for run in cleaned:
        console.print(f"removed run {run.run_id} ({run.description}): "
                      f"{len(run.namespaces)} namespaces")
    for run in live:
        console.print(f"kept live run {run.run_id} (pid {run.pid}); use --force to remove")
    if not cleaned:
        console.print("nothing to clean")


def _terminate(signum: int, _frame: object) -> None:
    # SIGTERM/SIGHUP unwind like Ctrl-C so every fabric's stop() runs.
    raise KeyboardInterrupt(f"signal {signum}")


#: Set (to anything but 0) to see the traceback behind an error message.
DEBUG_ENV = "FABRICEMU_DEBUG"


def _fail(message: str, code: int) -> NoReturn:
    """One line on stderr (whitespace folded, no markup, no wrapping), then exit."""
    if os.environ.get(DEBUG_ENV, "0") not in ("", "0"):
        traceback.print_exc()
    sys.stderr.write(" ".join(message.split()) + "\n")
    sys.stderr.flush()
    sys.exit(code)


def main() -> None:
    """Exit codes: 0 ok, 1 a test failed (or an internal error), 2 bad input or a
    missing feature, 3 the fidelity gate marked the run invalid, 130 interrupted."""
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    try:
        app(prog_name="emu")  # usage errors and Ctrl-C (130) are handled by typer itself
    except FabricEmuError as e:
        _fail(f"error: {e}", 2)
    except KeyboardInterrupt:
        _fail("interrupted; everything created was removed", 130)
    except OSError as e:
        if e.filename is None:  # not about a path: an internal error
            _fail(f"internal error: {type(e).__name__}: {e} (set {DEBUG_ENV}=1 for the "
                  "traceback)", 1)
        _fail(f"error: {e.filename}: {e.strerror or e}", 2)
    except Exception as e:
        _fail(f"internal error: {type(e).__name__}: {e} (a bug; set {DEBUG_ENV}=1 for the "
              "traceback)", 1)


if __name__ == "__main__":
    main()

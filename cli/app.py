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
import textwrap
import traceback
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cli.convert import convert_app
from cli.lab import lab_app
from core.errors import FabricEmuError, ParameterError, shorten
from core.scaling import DEFAULT_SCALE
from core.units import format_rate

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="fabricemu: time-dilated packet-level emulator of AI-cluster networks.")
topo_app = typer.Typer(no_args_is_help=True, help="Inspect topologies without building them.")
app.add_typer(topo_app, name="topo")
app.add_typer(lab_app, name="lab")
app.add_typer(convert_app, name="convert")
console = Console()

ScaleOpt = Annotated[float, typer.Option("--scale", "-S", help="time-dilation factor S "
                                         "(emulated rate = real rate / S)")]
TopoOpt = Annotated[str, typer.Option("--topo", help="topology as NAME,ARG,KEY=VALUE "
                                      "(e.g. fattree,4  dragonfly,p=2,a=4,h=2  torus,4,4)")]
MarkingOpt = Annotated[str, typer.Option("--marking", help="ECN marking back end: "
                                         "auto | bpf | red | off")]
DelayOpt = Annotated[str, typer.Option("--delay", help="link propagation delay (netem, "
                                       "dilated by S): auto | on | off")]
RoutingOpt = Annotated[str, typer.Option("--routing", help="how switches spread RoCEv2 frames: "
                                         "ecmp | spray | spray-rr | flowlet | adaptive | adaptive-flowlet | "
                                         "valiant | ugal (dragonfly)")]
FlowletGapOpt = Annotated[str | None, typer.Option(
    "--flowlet-gap", help="routing=flowlet: idle gap (real time, dilated by S) before a new "
    "path, e.g. 10us (default: topologies/loadbalance.py's, and why)")]


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
    from cli.doctor import report_capabilities

    if not report_capabilities(console, marking):
        raise typer.Exit(1)


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
        marking: MarkingOpt = "auto", delay: DelayOpt = "auto", routing: RoutingOpt = "ecmp",
        flowlet_gap: FlowletGapOpt = None) -> None:
    """Build a fabric, run a test, tear it down; the exit code says pass/fail."""
    from core.scaling import Scale
    from emu.fabric import Fabric
    from emu.netcheck import iperf_check, pingall_check
    from topologies.loadbalance import DEFAULT_FLOWLET_GAP_S, parse_flowlet_gap_s
    from topologies.spec import build_topo

    if test not in ("pingall", "iperf", "none"):
        raise FabricEmuError(f"invalid --test {test!r}: choose pingall, iperf or none")
    fab = Fabric(build_topo(topo), Scale(scale), marking=marking, delay=delay, routing=routing,
                 flowlet_gap_s=parse_flowlet_gap_s(flowlet_gap or DEFAULT_FLOWLET_GAP_S))
    ok = True
    with console.status(f"building {fab.topo.describe()} ..."):
        fab.start()
    try:
        s = fab.summary()
        console.print(f"built {s['topology']}: {s['hosts']} hosts, {s['switches']} switches, "
                      f"{s['links']} links, {s['ports']} shaped ports in {s['build_s']:.2f} s "
                      f"(S = {scale:g}, marking = {s['marking']}, routing = {s['routing']}, "
                      f"link delay: {s['delay_detail']})")
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
    from traffic.workload_pcap import collective_pcap

    summary = collective_pcap(collective, ranks, parse_size_bytes(size, "size"), out,
                              rate_bps=parse_rate_bps(rate, "rate"),
                              max_bytes=parse_size_bytes(max_size, "max-size"),
                              max_messages=_at_least_one("--max-messages", max_messages))
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
              "max_bytes": parse_size_bytes(max_size, "max-size"),
              "max_frames": _at_least_one("--max-frames", max_frames)}
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
    type), with --quick's value where it differs, and the option's help, in 80 columns."""
    from experiments.registry import EXPERIMENTS

    lines = ["Experiment options, with their defaults: --set KEY=VALUE, or KEY = VALUE in a",
             "--config TOML file (lists: 'a;b' or a TOML array)."]
    for name, module in EXPERIMENTS.items():
        if only in EXPERIMENTS and name != only:
            continue
        lines.append(f"{name}:")
        for key, option in module.OPTIONS.items():
            value = option.format(option.default)
            quick = "" if option.quick is None else f" (--quick: {option.format(option.quick)})"
            lines += textwrap.wrap(f"{key}={value}{quick}", 80, initial_indent="  ",
                                   subsequent_indent="    ", break_on_hyphens=False)
            lines += textwrap.wrap(option.help, 80, initial_indent="      ",
                                   subsequent_indent="      ")
    return "\n".join(lines)


def _finish(result) -> None:  # noqa: ANN001 - experiments.rundir.RunResult
    console.print(f"results: {escape(str(result.run_dir))}")
    if not result.valid:
        console.print("[yellow]the fidelity gate marked this run INVALID (see summary); "
                      "its measurements do not represent the real fabric[/]")
        raise typer.Exit(3)


OutOpt = Annotated[Path | None, typer.Option("--out", metavar="DIR", help="run directory "
                                             "(default: a new runs/NAME-<time>)")]
QuickOpt = Annotated[bool, typer.Option("--quick", help="small, fast configuration")]
RunScaleOpt = Annotated[str | None, typer.Option("--scale", "-S", metavar="S",
                                                 help="override S, the time-dilation factor")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", metavar="KEY=VALUE", help="an "
                                                  "option of the experiment (emu run NAME "
                                                  "--help lists them); repeat for more")]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", metavar="FILE", help="options from a TOML file, one KEY = VALUE per line with "
    "the keys of --set (a --set given too wins)")]
RerunOpt = Annotated[Path | None, typer.Option(
    "--rerun", metavar="DIR", help="run again what the run in DIR ran (experiment, --quick, "
    "options: its config.json) into a new --out; --set, --scale and --config change it")]
ForceOpt = Annotated[bool, typer.Option("--force", help="start over in a non-empty --out "
                                        "(removes the run files there)")]
PredictionsOpt = Annotated[Path | None, typer.Option(
    "--predictions", metavar="FILE.csv", help="your own predictions (columns case, metric, "
    "value, unit) beside the measurement and the project's model, with both errors")]


ResumeOpt = Annotated[bool, typer.Option("--resume", help="keep the finished cases of the "
                                         "run in --out and run the rest")]


#: What ``emu run`` runs: experiments.registry.EXPERIMENTS's names (a unit test keeps
#: them equal; the registry is imported only when a command needs it).
EXPERIMENT_NAMES = ("incast", "collective", "ratios", "ecmp", "fairness", "sweep", "cc", "demo",
                    "workload", "training", "failure", "routing", "inference", "bimodal")


# Its own --help: with NAME it also lists that experiment's options.
@app.command(add_help_option=False)
def run(ctx: typer.Context,
        name: Annotated[str, typer.Argument(metavar="NAME",
                                            help=" | ".join(EXPERIMENT_NAMES))] = "",
        out: OutOpt = None, quick: QuickOpt = False, scale: RunScaleOpt = None,
        sets: SetOpt = None, config: ConfigOpt = None, rerun: RerunOpt = None,
        force: ForceOpt = False, resume: ResumeOpt = False,
        metrics_port: Annotated[int | None, typer.Option(
            "--metrics-port", help="serve live Prometheus metrics on this port of 127.0.0.1 "
            "(= --set metrics_port=N; docs/monitoring.md)")] = None,
        file: Annotated[str | None, typer.Option(
            "--file", metavar="F", help="workload: the message DAG file (= --set file=F; "
            "docs/workloads.md)")] = None,
        emit: Annotated[str | None, typer.Option(
            "--emit", metavar="F", help="training: write the first layout's DAG to F "
            "(= --set emit=F)")] = None,
        predictions: PredictionsOpt = None,
        list_options: Annotated[bool, typer.Option("--list", help="list the experiments' "
                                                   "options (NAME's only, with NAME)")] = False,
        show_help: Annotated[bool, typer.Option("--help", help="show this message (with NAME, "
                                                "its options too) and exit")] = False) -> None:
    """Run an experiment; writes config.json, CSVs, summary.json and plots to --out."""
    if show_help:
        typer.echo(ctx.get_help())
        if name:
            typer.echo("\n" + _experiment_help(name))
        return
    from experiments.registry import cli_run, load_config, parse_sets, rerun_of

    if list_options or not (name or rerun):
        typer.echo(_experiment_help(name))
        if not name and not list_options:
            raise typer.Exit(2)
        return
    base: dict[str, object] = {}
    if rerun is not None:
        ran, ran_quick, base = rerun_of(rerun)
        if name and name != ran:
            raise FabricEmuError(f"--rerun {rerun}: the run there is {ran}, not {name}")
        name, quick = ran, quick or ran_quick
    if config is not None:
        base.update(load_config(config, name))
    if scale is not None:
        base.pop("scale", None)  # --scale wins over the files' S
    overrides = {**base, **parse_sets(sets)}
    if metrics_port is not None:
        if "metrics_port" in overrides:
            raise ParameterError("--metrics-port", metrics_port,
                                 "also given as --set metrics_port=; give it once")
        overrides["metrics_port"] = str(metrics_port)
    for key, value in (("file", file), ("emit", emit)):
        if value is not None:
            if key in overrides:
                raise ParameterError(f"--{key}", value, f"also given as --set {key}=; give it "
                                     "once")
            overrides[key] = value
    user = None
    if predictions is not None:
        from experiments.predictions import read_predictions
        user = read_predictions(predictions)   # checked before anything runs
    result = cli_run(name, out, quick, scale, overrides, force=force, resume=resume)
    if user is not None:
        from experiments.report import add_predictions
        add_predictions(result.run_dir, user)
    _finish(result)


@app.command()
def demo(out: OutOpt = None, quick: QuickOpt = False, scale: RunScaleOpt = None,
         sets: SetOpt = None, force: ForceOpt = False, resume: ResumeOpt = False) -> None:
    """The default experiment: incast with and without DCQCN plus a ring all-reduce on a
    k=4 fat-tree, measured beside the model (about a minute). Same as `emu run demo`."""
    from experiments.registry import demo as run_demo
    from experiments.registry import parse_sets

    _finish(run_demo(out, quick, scale, parse_sets(sets), force=force, resume=resume))


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="a finished run directory")],
           predictions: PredictionsOpt = None) -> None:
    """Re-render the tables and plots of a finished run."""
    from experiments.registry import report as render

    for path in render(run_dir, predictions):
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
    from core.errors import NotRootError
    from emu.runs import clean_runs, list_runs

    if os.geteuid() != 0:
        raise NotRootError("emu clean removes network namespaces and reads root's run "
                           "records: run it as root (sudo emu clean)")

    live = [r for r in list_runs() if r.alive and not force]
    cleaned = clean_runs(include_alive=force)
    for run in cleaned:
        console.print(f"removed run {run.run_id} ({run.description}): "
                      f"{len(run.namespaces)} namespaces")
    for run in live:
        console.print(f"kept live run {run.run_id} (pid {run.pid}); use --force to remove")
    if not cleaned:
        console.print("nothing to clean")


def _at_least_one(option: str, limit: int) -> int:
    """A count limit from the command line: below 1 it would refuse everything."""
    if limit < 1:
        raise ParameterError(option, limit, "must be >= 1")
    return limit


def _terminate(signum: int, _frame: object) -> None:
    # SIGTERM/SIGHUP unwind like Ctrl-C so every fabric's stop() runs.
    raise KeyboardInterrupt(f"signal {signum}")


#: Set (to anything but 0) to see the traceback behind an error message.
DEBUG_ENV = "FABRICEMU_DEBUG"
#: A message never fills a screen (ParameterError quotes a long input by its head and tail).
MAX_MESSAGE_CHARS = 500


def _fail(message: str, code: int) -> NoReturn:
    """One line on stderr (whitespace folded, no markup, no wrapping), then exit."""
    if os.environ.get(DEBUG_ENV, "0") not in ("", "0"):
        traceback.print_exc()
    sys.stderr.write(shorten(message, MAX_MESSAGE_CHARS) + "\n")
    sys.stderr.flush()
    sys.exit(code)


def _fabric_removed() -> str:
    """Why the run failed if its fabric was removed under it (`emu clean --force`)."""
    runs = sys.modules.get("emu.runs")  # not imported: no fabric was built
    ids = runs.removed_underneath() if runs is not None else []
    return (f"this run's fabric (run {', '.join(ids)}) was removed while it ran, by 'emu clean "
            "--force' from elsewhere; the cases finished before are kept" if ids else "")


def main() -> None:
    """Exit codes: 0 ok, 1 a test failed (or an internal error), 2 bad input or a
    missing feature, 3 the fidelity gate marked the run invalid, 130 interrupted."""
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    try:
        app(prog_name="emu")  # usage errors and Ctrl-C (130) are handled by typer itself
    except KeyboardInterrupt:
        if removed := _fabric_removed():  # `emu clean --force` stopped this run
            _fail(f"error: {removed}", 2)
        _fail("interrupted; everything created was removed", 130)
    except Exception as e:
        _fail(*_message(e))


def _message(e: Exception) -> tuple[str, int]:
    """The one line and the exit code that an exception ends ``emu`` with."""
    if removed := _fabric_removed():
        return f"error: {removed} (then: {type(e).__name__}: {e})", 2
    if isinstance(e, FabricEmuError):
        return f"error: {e}", 2
    if isinstance(e, OSError) and e.filename is not None:
        return f"error: {e.filename}: {e.strerror or e}", 2
    if isinstance(e, OSError):  # not about a path: an internal error
        return f"internal error: {type(e).__name__}: {e} (set {DEBUG_ENV}=1 for the traceback)", 1
    return (f"internal error: {type(e).__name__}: {e} (a bug; set {DEBUG_ENV}=1 for the "
            "traceback)", 1)


if __name__ == "__main__":
    main()

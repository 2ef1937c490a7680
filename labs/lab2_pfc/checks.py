"""Lab 2's checks: PFC's headroom, Xoff and Xon as plain function calls, the settings
the student chooses for the scenario's fabric, then an incast without and with PFC on
the emulated fabric, at the student's thresholds.

Expected values come from the definition (IEEE 802.1Qbb-style headroom: every port
feeding a queue sends for the reaction time plus a round trip over its link, then
finishes its frame) as the project's model computes it (``traffic.pfc.headroom_bytes``
and ``plan_thresholds``, what the emulator enforces), never from the reference
solution. The fabric a setting is checked on is described to the student's
``pfc_settings`` as its switch egress ports and the (rate_bps, link_delay_s) of the
ports feeding each (``traffic.pfc.feeders`` under the fabric's routes). Those
reference values are computed in `pfc_reference`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from core.safefile import save_figure
from labs.emulation import ScenarioRuns
from labs.grader import CheckContext
from labs.lab2_pfc.pfc_reference import (
    FRAME_BYTES,
    Feeders,
    ceilings,
    egress_feeders,
    exact_headroom,
    scenario_fabric,
)
from labs.student import StudentCode, StudentError
from labs.verdict import Outcome, fail, ok

#: The emulation cases of the scenario (experiments/cc_compare.py names them so).
CASE_OFF, CASE_ON = "incast cc=off pfc=off", "incast cc=off pfc=on"


# ----------------------------------------------------------------------------- helpers

def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StudentError(f"{what} returned {value!r}; expected a finite number of bytes")
    return float(value)


def _fmt(feeders: Feeders) -> str:
    if not feeders:
        return "no feeding port"
    return " + ".join(f"{r / 1e9:g}G over {d * 1e9:g} ns" for r, d in feeders)


def _headroom_hint(got: float, feeders: Feeders, reaction_s: float, frame: int) -> str:
    """Name the typical mistake whose arithmetic gives ``got``, if one does."""
    mistakes: dict[str, Callable[[float, float], float]] = {
        "the link delay counted once: the PAUSE travels up and the data on the wire "
        "comes down, 2 x link delay": lambda r, d: r / 8 * (reaction_s + d) + frame,
        "bits, not bytes: divide the rate in b/s by 8": lambda r, d: r * (reaction_s + 2 * d) + frame,
        "one frame per feeding port is missing (the frame in flight)":
            lambda r, d: r / 8 * (reaction_s + 2 * d),
        "times in microseconds? every time here is in seconds":
            lambda r, d: r / 8 * (reaction_s + 2 * d) * 1e6 + frame,
        "times scaled by 1e-6? they are already in seconds":
            lambda r, d: r / 8 * (reaction_s + 2 * d) * 1e-6 + frame,
        "the reaction time doubled too: only the link delay is a round trip":
            lambda r, d: r / 8 * 2 * (reaction_s + d) + frame,
    }
    for hint, per_port in mistakes.items():
        value = sum(per_port(r, d) for r, d in feeders)
        if abs(got - value) <= max(2.0, 1e-6 * abs(value)):
            return f" ({hint})"
    once = exact_headroom(feeders, reaction_s, 0) + frame
    if len(feeders) > 1 and abs(got - once) <= 2.0:
        return " (one frame per feeding port, not one in all)"
    want = exact_headroom(feeders, reaction_s, frame)
    if got > 0 and want > 0 and not 1e-3 < got / want < 1e3:
        return (f" (about 10^{math.log10(got / want):.0f} times too "
                f"{'large' if got > want else 'small'}: a time in us or ns where seconds "
                "are due?)")
    return ""


def _raised_value_error(ctx: CheckContext, name: str, *args: Any) -> tuple[bool, Any]:
    """(True, message) if the student's ``name(*args)`` raised ValueError, else
    (False, its value); any other exception is a StudentError naming their line."""
    fn = ctx.code.attr(name)

    def attempt() -> tuple[bool, Any]:
        try:
            return False, fn(*args)
        except ValueError as e:
            return True, str(e)

    return ctx.code.call(f"{name}()", attempt)


# ----------------------------------------------------------------------------- algorithm

#: (what, feeders, reaction_s, frame_bytes): ports of the scenario's fabric and others.
HEADROOM_CASES: list[tuple[str, Feeders, float, int]] = [
    ("a port fed by one host", [(100e9, 15e-9)], 5e-6, FRAME_BYTES),
    ("a leaf's port toward a host",
     [(300e9, 150e-9), (100e9, 15e-9), (100e9, 15e-9)], 5e-6, FRAME_BYTES),
    ("the spine's port toward a leaf", [(300e9, 150e-9), (300e9, 150e-9)], 5e-6, FRAME_BYTES),
    ("a port fed over 1 us of fibre", [(400e9, 1e-6)], 0.0, 4110),
    ("a port nothing feeds", [], 5e-6, FRAME_BYTES),
]


def headroom(ctx: CheckContext) -> Outcome:
    fn = ctx.function("headroom_bytes")
    lines = []
    for what, feeders, reaction_s, frame in HEADROOM_CASES:
        got = _number(fn([tuple(f) for f in feeders], reaction_s, frame), "headroom_bytes()")
        want = exact_headroom(feeders, reaction_s, frame)
        if not abs(got - want) <= 1.0:
            return fail(f"{what} ({_fmt(feeders)}; reaction {reaction_s * 1e6:g} us, frames "
                        f"of {frame} B): your headroom is {got:,.1f} B; rate x (reaction + "
                        f"2 x link delay) / 8 + one frame per feeding port = {want:,.1f} B"
                        + _headroom_hint(got, feeders, reaction_s, frame))
        lines.append(f"{want:,.0f} B")
    return ok("headroom " + ", ".join(lines))


#: (buffer_bytes, headroom): Xoff must be the buffer beyond the headroom, rounded down.
XOFF_CASES = [(524288, 351542.0), (524288, 415527.5), (2 << 20, 0.0), (1 << 20, 417792.25)]
#: Buffers that cannot hold their headroom (or leave an Xoff of 0): ValueError.
XOFF_REFUSED = [(100_000, 415528.0), (415528, 415528.0)]


def xoff(ctx: CheckContext) -> Outcome:
    lines = []
    for buffer, head in XOFF_CASES:
        refused, got = _raised_value_error(ctx, "xoff_bytes", buffer, head)
        if refused:
            return fail(f"xoff_bytes({buffer}, {head:.10g}) raised ValueError ({got}); that "
                        f"buffer holds the headroom, with {buffer - head:,.1f} B to spare")
        got = _number(got, "xoff_bytes()")
        want = math.floor(buffer - head)
        if got != want:
            hint = ""
            if got == buffer:
                hint = " (the whole buffer: the headroom must stay free above Xoff)"
            elif buffer - head < got <= buffer - head + 1:
                hint = " (round down: a byte above buffer - headroom may be dropped)"
            elif abs(got - head) < 1.5:
                hint = " (Xoff is what the buffer holds beyond the headroom, not the headroom)"
            return fail(f"xoff_bytes({buffer}, {head:.10g}) = {got:,.1f} B; buffer - headroom "
                        f"= {buffer - head:,.1f} B, so Xoff = {want:,} B (whole bytes, rounded "
                        f"down){hint}")
        lines.append(f"{want:,}")
    for buffer, head in XOFF_REFUSED:
        refused, got = _raised_value_error(ctx, "xoff_bytes", buffer, head)
        if not refused:
            return fail(f"xoff_bytes({buffer}, {head:.10g}) returned {got!r}: a {buffer} B buffer "
                        f"cannot hold a {head:.10g} B headroom (Xoff would be "
                        f"{buffer - head:,.0f} B), so no Xoff is safe: raise ValueError as the "
                        "handout says")
    return ok(f"Xoff {', '.join(lines)} B; buffers too small for their headroom refused")


#: (xoff, gap): Xon = Xoff - gap, never below 0.
XON_CASES = [(172746, 18028), (108760, 18028), (10_000, 18028), (1, 1), (5_000, 1)]


def xon(ctx: CheckContext) -> Outcome:
    lines = []
    for xoff_b, gap in XON_CASES:
        refused, got = _raised_value_error(ctx, "xon_bytes", xoff_b, gap)
        if refused:
            return fail(f"xon_bytes({xoff_b}, {gap}) raised ValueError ({got}); a gap > 0 "
                        "always has an Xon")
        got = _number(got, "xon_bytes()")
        want = max(0, xoff_b - gap)
        if got != want:
            hint = ""
            if got < 0:
                hint = " (a queue never falls below 0 B: clamp Xon at 0)"
            elif got >= xoff_b:
                hint = " (Xon must lie below Xoff, or the port pauses and resumes at once)"
            return fail(f"xon_bytes({xoff_b}, {gap}) = {got:g} B; Xon = Xoff - gap = "
                        f"{xoff_b - gap} B, at least 0: {want} B (0 <= Xon < Xoff){hint}")
        lines.append(str(want))
    refused, got = _raised_value_error(ctx, "xon_bytes", 172746, 0)
    if not refused:
        return fail(f"xon_bytes(172746, 0) returned {got!r}: with no gap Xon = Xoff, which "
                    "breaks Xon < Xoff; raise ValueError as the handout says")
    return ok(f"Xon {', '.join(lines)} B; a gap of 0 refused")


def _settings_of(ctx: CheckContext, fabric: dict[str, Any],
                 ports: dict[str, Feeders]) -> dict[str, str]:
    got = ctx.function("pfc_settings")(ports, fabric["buffer_bytes"], fabric["scale"],
                                       fabric["budget_wall_s"])
    if not isinstance(got, dict):
        raise StudentError(f"pfc_settings() returned {type(got).__name__}; expected a dict of "
                           "emu run cc settings (xoff, xon, pfc_budget)")
    return {str(k): str(v).strip() for k, v in got.items()}


def _judge_settings(settings: dict[str, str], fabric: dict[str, Any],
                    ports: dict[str, Feeders]) -> str | None:
    """What is wrong with ``settings`` for ``fabric`` (None: nothing)."""
    from core.errors import ParameterError
    from core.units import parse_size_bytes

    missing = [k for k in ("xoff", "xon", "pfc_budget") if k not in settings]
    if missing:
        return f"pfc_settings() returned {sorted(settings)}; it needs xoff, xon and pfc_budget"
    extra = sorted(set(settings) - {"xoff", "xon", "pfc_budget"})
    if extra:
        return f"pfc_settings() returned {extra} too: only xoff, xon and pfc_budget"
    try:
        x_off = parse_size_bytes(settings["xoff"], "xoff")
        x_on = parse_size_bytes(settings["xon"], "xon")
        budget = float(settings["pfc_budget"])
    except (ParameterError, ValueError) as e:
        return f"pfc_settings() returned {settings}, which emu run cc cannot read ({e})"
    if not math.isclose(budget, fabric["budget_wall_s"], rel_tol=1e-9):
        return (f"pfc_budget = {settings['pfc_budget']}: return the budget your headroom was "
                f"sized for, {fabric['budget_wall_s']:g} s (the emulator checks your Xoff "
                "against the headroom of that budget)")
    reaction_s = fabric["budget_wall_s"] / fabric["scale"]
    room = ceilings(ports, fabric["buffer_bytes"], reaction_s)
    tight = min(room, key=lambda p: room[p])
    loose = max(room, key=lambda p: room[p])
    where = (f"{fabric['buffer_bytes']:,} B buffers, S = {fabric['scale']:g}, reaction "
             f"{fabric['budget_wall_s']:g} s / S = {reaction_s * 1e6:g} us")
    if x_off > room[tight]:
        hint = ""
        if abs(x_off - room[loose]) <= FRAME_BYTES:
            hint = (" (that is the loosest port's: the experiment sets one Xoff for every "
                    "port, so the tightest decides)")
        return (f"xoff = {x_off:,} B is above buffer - headroom = {room[tight]:,} B at port "
                f"{tight} ({_fmt(ports[tight])}; {where}): the emulator refuses it, because "
                f"that port could drop{hint}")
    if x_off < room[tight] - FRAME_BYTES:
        return (f"xoff = {x_off:,} B wastes buffer: the tightest port, {tight}, may go up to "
                f"buffer - headroom = {room[tight]:,} B ({where}); a lower Xoff pauses more "
                "often and spreads more head-of-line blocking")
    if not 0 <= x_on < x_off:
        return f"xon = {x_on:,} B with xoff = {x_off:,} B: PFC needs 0 <= Xon < Xoff"
    return None


def settings(ctx: CheckContext) -> Outcome:
    """pfc_settings() on the scenario's own fabric."""
    fabric = scenario_fabric(str(ctx.params.get("scenario", "incast")))
    ports = egress_feeders(fabric["topo"])
    try:
        got = _settings_of(ctx, fabric, ports)
    except StudentError as e:
        hint = (" (is the reaction time budget / S, in real seconds? This fabric's buffers "
                "hold the headroom)") if "ValueError" in str(e) else ""
        return fail(f"{e}{hint}")
    wrong = _judge_settings(got, fabric, ports)
    if wrong:
        return fail(wrong)
    return ok(f"on {fabric['topo']}: " + ", ".join(f"{k}={v}" for k, v in got.items()))


def settings_elsewhere(ctx: CheckContext) -> Outcome:
    """pfc_settings() on fabrics the handout does not work out: another tightest port,
    and a reaction budget no buffer of the fabric can hold."""
    for fabric in ctx.params.get("fabrics", []):
        fabric = {**fabric, "buffer_bytes": int(fabric["buffer_bytes"])}
        ports = egress_feeders(fabric["topo"])
        got = _settings_of(ctx, fabric, ports)
        wrong = _judge_settings(got, fabric, ports)
        if wrong:
            return fail(f"on {fabric['topo']}: {wrong}")
    for fabric in ctx.params.get("too_small", []):
        fabric = {**fabric, "buffer_bytes": int(fabric["buffer_bytes"])}
        ports = egress_feeders(fabric["topo"])
        fn = ctx.code.attr("pfc_settings")

        def attempt(fabric: dict[str, Any] = fabric, ports: dict[str, Feeders] = ports,
                    fn: Callable[..., Any] = fn) -> Any:
            try:
                return fn(ports, fabric["buffer_bytes"], fabric["scale"], fabric["budget_wall_s"])
            except ValueError:
                return None

        got = ctx.code.call("pfc_settings()", attempt)
        if got is not None:
            return fail(f"on {fabric['topo']} with {fabric['buffer_bytes']:,} B buffers and a "
                        f"reaction budget of {fabric['budget_wall_s']:g} s at S = "
                        f"{fabric['scale']:g}, some port cannot hold its headroom, yet "
                        f"pfc_settings() returned {got!r}: raise ValueError (no Xoff is safe)")
    return ok("other fabrics: the tightest port decides; a buffer too small is refused")


# ----------------------------------------------------------------------------- emulation

def scenario_settings(code: StudentCode, scenario_name: str, point: str | None) -> dict[str, str]:
    """The student's PFC thresholds for the scenario's fabric, checked against what the
    emulator enforces first: thresholds it would refuse are the student's error, in
    one line, before a fabric is built."""
    fabric = scenario_fabric(scenario_name)
    ports = egress_feeders(fabric["topo"])
    fn = code.attr("pfc_settings")
    got = code.call("pfc_settings()", fn, ports, fabric["buffer_bytes"], fabric["scale"],
                    fabric["budget_wall_s"])
    if not isinstance(got, dict):
        raise StudentError(f"pfc_settings() returned {type(got).__name__}; expected a dict")
    out = {str(k): str(v).strip() for k, v in got.items()}
    wrong = _judge_settings(out, fabric, ports)
    if wrong and "wastes buffer" not in wrong:
        raise StudentError(f"your thresholds: {wrong}")
    return out


def _per_run(sr: ScenarioRuns, metric: str, case: str) -> list[float]:
    """``metric`` of ``case`` in every valid run (NaN where a run did not measure it)."""
    values = []
    for r in sr.valid_runs():
        assert r.metrics is not None
        rows = r.metrics[(r.metrics.metric == metric) & (r.metrics.case == case)]
        values.append(float(rows.iloc[0].measured) if not rows.empty else math.nan)
    return values


def _fmt_runs(values: list[float], fmt: str = "{:g}") -> str:
    return "/".join(fmt.format(v) for v in values)


def lossy_without_pfc(ctx: CheckContext) -> Outcome:
    """Without PFC the incast overflows the bottleneck: drops, go-back-N resends, and a
    completion tail far beyond the lossless completion the model gives."""
    sr = ctx.runs
    assert sr is not None
    drops = _per_run(sr, "drops", CASE_OFF)
    resent = _per_run(sr, "retransmissions", CASE_OFF)
    done = sr.metric("incast completion", CASE_OFF)
    lossless = sr.metric("incast completion", CASE_ON, column="predicted")
    tail = float(ctx.params.get("tail_factor", 1.3))
    text = (f"without PFC: drops {_fmt_runs(drops)}, retransmitted frames {_fmt_runs(resent)} "
            f"(per run); incast completion {done:.1f} us against {lossless:.1f} us lossless "
            f"(model)")
    if not (all(d > 0 for d in drops) and all(r > 0 for r in resent)):
        return fail(f"{text}: 4 x 256 KiB into one 100G port with 512 KiB of buffer should "
                    "overflow it in every run")
    if not done >= tail * lossless:
        return fail(f"{text}: the resends after drops should stretch the completion to at "
                    f"least {tail:g} x the lossless one")
    return ok(text)


def _ports(sr: ScenarioRuns, case: str) -> list[pd.DataFrame]:
    return [t[t.case == case] for t in sr.table("ports.csv")]


def _overshoot(sr: ScenarioRuns) -> str:
    """The bottleneck's peak queue with PFC against its Xoff and headroom."""
    queues, ports = sr.table("queue.csv"), _ports(sr, CASE_ON)
    if not queues or not ports:
        return "bottleneck queue not recorded"
    port = str(queues[0].port.iloc[0])
    row = ports[0][ports[0].port == port]
    peak = sr.metric("peak queue", CASE_ON)
    if row.empty:
        return f"bottleneck peak queue {peak:.1f} KB"
    x_off, head = float(row.xoff_bytes.iloc[0]) / 1e3, float(row.headroom_bytes.iloc[0]) / 1e3
    return (f"bottleneck {port} peaked at {peak:.1f} KB: Xoff {x_off:.1f} KB + "
            f"{peak - x_off:.1f} KB of its {head:.1f} KB headroom")


def lossless_with_pfc(ctx: CheckContext) -> Outcome:
    """With the student's thresholds in force: nothing dropped or resent, PAUSE sent, the
    incast as fast as the lossless model says."""
    sr = ctx.runs
    assert sr is not None
    drops = _per_run(sr, "drops", CASE_ON)
    resent = _per_run(sr, "retransmissions", CASE_ON)
    pauses = _per_run(sr, "PAUSE events", CASE_ON)
    done = sr.metric("incast completion", CASE_ON)
    model = sr.metric("incast completion", CASE_ON, column="predicted")
    band = float(ctx.params.get("completion_band", 0.2))
    xoffs = sorted({int(v) for t in _ports(sr, CASE_ON) for v in t.xoff_bytes.dropna()})
    text = (f"with PFC (Xoff {'/'.join(f'{x:,}' for x in xoffs)} B): drops {_fmt_runs(drops)}, "
            f"retransmitted {_fmt_runs(resent)}, PAUSE events {_fmt_runs(pauses)} (per run); "
            f"incast completion {done:.1f} us (lossless model {model:.1f} us); "
            f"{_overshoot(sr)}")
    if any(d != 0 for d in drops) or any(r != 0 for r in resent):
        return fail(f"{text}: PFC with a headroom that holds what arrives after Xoff drops "
                    "nothing (is the headroom large enough at every port?)")
    if not all(p > 0 for p in pauses):
        return fail(f"{text}: the incast overflows the bottleneck without PFC, so its queue "
                    "must reach Xoff and send PAUSE")
    if not abs(done - model) <= band * model:
        return fail(f"{text}: lossless, the bottleneck stays busy and the incast completes "
                    f"within {band:.0%} of the model")
    return ok(text)


def _victim_pauses(sr: ScenarioRuns) -> str:
    """How long each port on the victim's path was paused, in the first valid run."""
    from topologies.routing import compute_routes
    from topologies.spec import build_topo

    msgs = [t[(t.case == CASE_ON) & (t.tag == "victim")] for t in sr.table("messages.csv")]
    ports = _ports(sr, CASE_ON)
    if not msgs or msgs[0].empty or not ports:
        return "not recorded"
    src, dst = str(msgs[0].src.iloc[0]), str(msgs[0].dst.iloc[0])
    topo = str(scenario_fabric(sr.scenario.name)["topo"])
    path = compute_routes(build_topo(topo)).paths(src, dst)[0]
    parts = []
    for a, b in zip(path[:-2], path[1:-1], strict=True):   # the ports sending into a switch
        row = ports[0][(ports[0].node == a) & (ports[0].peer == b)]
        if not row.empty and pd.notna(row.pause_events.iloc[0]):
            parts.append(f"{a}->{b} paused {int(row.pause_events.iloc[0])} times, "
                         f"{float(row.paused_s_real.iloc[0]) * 1e6:.0f} us")
    return f"{src} to {dst}: " + ("; ".join(parts) or "no port paused")


def hol_blocking(ctx: CheckContext) -> Outcome:
    """The victim flow never crosses the bottleneck, yet PFC pauses the uplink it shares
    with incast senders: its FCT grows by at least ``min_ratio``."""
    sr = ctx.runs
    assert sr is not None
    off = sr.metric("victim FCT", CASE_OFF)
    on = sr.metric("victim FCT", CASE_ON)
    fair = sr.metric("victim FCT", CASE_OFF, column="predicted")
    need = float(ctx.params.get("min_ratio", 1.5))
    band = float(ctx.params.get("fair_band", 0.2))
    text = (f"victim FCT {off:.1f} us without PFC (max-min fair share: {fair:.1f} us), "
            f"{on:.1f} us with PFC ({on / off:.2f} x); on its path (first run): "
            f"{_victim_pauses(sr)}")
    if not abs(off - fair) <= band * fair:
        return fail(f"{text}: without PFC the victim shares no congested port and should "
                    f"finish near its fair share (within {band:.0%})")
    if not on >= need * off:
        return fail(f"{text}: the pauses that spread up from the bottleneck stop the uplink "
                    f"the victim shares with incast senders; expected at least {need:g} x "
                    "(a higher Xoff than is safe pauses less)")
    return ok(text)


# ----------------------------------------------------------------------------- plots

def plots(runs: dict[str, ScenarioRuns], out: Path, code: StudentCode) -> list[Path]:
    """The bottleneck's queue without and with PFC beside Xoff and Xon, and the victim's
    FCT against its fair share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sr = runs.get("incast")
    if sr is None or not sr.valid_runs():
        return []
    queue = sr.table("queue.csv")[0]
    ports = _ports(sr, CASE_ON)[0]
    bottleneck = str(queue.port.iloc[0])
    row = ports[ports.port == bottleneck]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [2, 1]})
    for case, style in ((CASE_OFF, "-"), (CASE_ON, "-")):
        q = queue[queue.case == case]
        ax1.plot(q.t_s * 1e6, q.backlog_bytes / 1e3, style, lw=1,
                 label=case.replace("incast cc=off ", ""))
    if not row.empty:
        for col, colour in (("xoff_bytes", "red"), ("xon_bytes", "orange")):
            ax1.axhline(float(row[col].iloc[0]) / 1e3, color=colour, ls="--", lw=0.8,
                        label=f"{col.split('_')[0].capitalize()} {float(row[col].iloc[0]) / 1e3:.1f} KB")
        ax1.axhline(float(row.buffer_bytes.iloc[0]) / 1e3, color="grey", ls=":", lw=0.8,
                    label="buffer")
    ax1.set(xlabel="time (us, real)", ylabel="queue (KB)", title=f"bottleneck {bottleneck}")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    names = ["fair share\n(model)", "PFC off", "PFC on"]
    values = [sr.metric("victim FCT", CASE_OFF, column="predicted"),
              sr.metric("victim FCT", CASE_OFF), sr.metric("victim FCT", CASE_ON)]
    ax2.bar(names, values, color=["grey", "tab:blue", "tab:orange"])
    ax2.set(ylabel="victim FCT (us)", title="head-of-line blocking")
    ax2.grid(alpha=0.3, axis="y")
    fig.suptitle("Lab 2: incast without and with PFC (real-fabric units)")
    fig.tight_layout()
    path = out / "lab2_pfc.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return [path]

"""Lab 0's checks: the student's hand predictions (dilation, a path's latency and BDP,
a CC-off incast, a ring all-reduce) against closed forms and the project's a-priori
model, then against an incast and a ring all-reduce measured on the fabric.

Expected values come from the definitions (8 bits a byte, rates / S, times x S) and
from the project's model of the scenario's fabric (`traffic.fixeddelay`,
`model.incast_predict`, `model.alphabeta`), never from the reference solution. Where the
definitions allow two bookkeepings the checks accept both: an incast's last hop may
or may not serialize its last frame twice (once in the drain, once in the path), and a
ring step's path latency may include the bottleneck's serialization or leave it to the
bandwidth term. The reference values themselves are computed in `dilation_reference`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from core.frame import ACK_FRAME_BYTES, FRAME_BYTES, MTU_PAYLOAD_BYTES, WIRE_FRAME_BYTES
from core.safefile import save_figure
from labs.emulation import ScenarioRuns
from labs.grader import CheckContext
from labs.lab0_dilation.dilation_reference import (
    FRAME_EXTRA_BYTES,
    NIC_OVERHEAD_S,
    PathDict,
    closed_incast_s,
    closed_latency_s,
    closed_wire_bytes,
    incast_path,
    model_incast_s,
    model_ring_s,
    path_dict,
    ring_paths,
    routed_fabric,
)
from labs.student import StudentCode
from labs.verdict import Outcome, fail, ok, ungraded


def _rel(value: float, want: float) -> float:
    return abs(value - want) / abs(want) if want else abs(value)


def _num(value: object, what: str) -> float:
    """The student's return value as a finite float, or a StudentError-like failure."""
    from labs.student import StudentError

    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise StudentError(f"{what} returned {value!r}, not a number") from None
    if not math.isfinite(out):
        raise StudentError(f"{what} returned {out}, not a finite number")
    return out


def _within(value: float, lo: float, hi: float, tol: float) -> bool:
    """``value`` in [lo, hi] widened by ``tol`` (relative)."""
    return lo * (1 - tol) <= value <= hi * (1 + tol)


def _unit_hint(value: float, want: float, scale: float | None = None) -> str:
    """What a wrong number most likely is: bits for bytes, or a dilated quantity."""
    if want == 0 or value == 0:
        return ""
    ratio = value / want
    for factor, text in ((8.0, "bits where bytes were asked (x 8)?"),
                         (1 / 8.0, "bytes where bits were needed (/ 8)? a rate is in bit/s"),
                         (1e6, "microseconds where seconds were asked?"),
                         (1e9, "nanoseconds where seconds were asked?")):
        if _rel(ratio, factor) < 0.02:
            return f" ({text})"
    if scale and (_rel(ratio, scale) < 0.02 or _rel(ratio, 1 / scale) < 0.02):
        return f" (off by S = {scale:g}: an emulated quantity where the real one was asked?)"
    return ""


def _setting(ctx: CheckContext, scenario: str, key: str, default: str) -> str:
    return ctx.lab.scenario(scenario).settings.get(key, default)


def _size(text: str) -> int:
    from core.units import parse_size_bytes

    return parse_size_bytes(text, "size")


# ------------------------------------------------------------------ TODO 1: dilation

def dilation(ctx: CheckContext) -> Outcome:
    """Rates / S, times x S, bytes unchanged; a frame's time on a link."""
    rate = ctx.function("emulated_rate_bps")
    time_ = ctx.function("emulated_time_s")
    ser = ctx.function("serialization_s")
    tol = float(ctx.params.get("tolerance", 1e-3))
    frame = WIRE_FRAME_BYTES
    cases: list[tuple[str, Callable[[], object], float, float | None]] = [
        ("emulated_rate_bps(400e9, S=10000)", lambda: rate(400e9, 1e4), 40e6, 1e4),
        ("emulated_rate_bps(1.6e12, S=20000)", lambda: rate(1.6e12, 2e4), 80e6, 2e4),
        ("emulated_time_s(130e-6, S=10000)", lambda: time_(130e-6, 1e4), 1.3, 1e4),
        (f"serialization_s({frame}, 400e9)", lambda: ser(frame, 400e9), 8.0 * frame / 400e9, None),
        (f"serialization_s({frame}, 40e6)", lambda: ser(frame, 40e6), 8.0 * frame / 40e6, None),
    ]
    for what, call, want, scale in cases:
        got = _num(call(), what)
        if _rel(got, want) > tol:
            return fail(f"{what} = {got:.6g}; expected {want:.6g}{_unit_hint(got, want, scale)}")
    real = 8.0 * frame / 400e9
    emulated = _num(ser(frame, _num(rate(400e9, 1e4), "emulated_rate_bps")), "serialization_s")
    dilated = _num(time_(real, 1e4), "emulated_time_s")
    if _rel(emulated, dilated) > tol:
        return fail(f"a {frame} B frame takes {emulated * 1e3:.4g} ms at the emulated rate but "
                    f"its real time x S is {dilated * 1e3:.4g} ms: the two must agree")
    return ok(f"a 400G NIC at S = 10000 is shaped to 40 Mb/s; a full {frame} B frame takes "
              f"{real * 1e9:.2f} ns on the real link and {emulated * 1e3:.4f} ms on the "
              "emulated one; bytes are unchanged")


# ----------------------------------------------------------- TODO 2: latency and BDP

def _teaching_paths() -> dict[str, PathDict]:
    """Paths that isolate one fixed delay each, then a mix."""
    return {
        "4 hops at 100G, nothing else": {"rates_bps": [100e9] * 4, "propagation_s": [0.0] * 4,
                                         "switch_latency_s": [0.0] * 3},
        "2 hops at 400G, 1 us of cable each, a 600 ns switch": {
            "rates_bps": [400e9, 400e9], "propagation_s": [1e-6, 1e-6],
            "switch_latency_s": [600e-9]},
        "400G-100G-400G, 50 ns of cable each, two 300 ns switches": {
            "rates_bps": [400e9, 100e9, 400e9], "propagation_s": [50e-9] * 3,
            "switch_latency_s": [300e-9, 300e-9]},
    }


def _latency_hint(path: PathDict, frame: float, got: float) -> str:
    ser = [8.0 * frame / r for r in path["rates_bps"]]
    fixed = sum(path["propagation_s"]) + sum(path["switch_latency_s"])
    if _rel(got, max(ser) + fixed) < 1e-3 and len(ser) > 1:
        return (" (the frame serialized once: a store-and-forward switch receives all of it "
                "before it sends it on, so every hop serializes it)")
    if _rel(got, sum(ser)) < 1e-3 and fixed:
        return " (propagation and switch latency missing?)"
    if _rel(got, sum(ser) + sum(path["propagation_s"])) < 1e-3 and fixed:
        return " (the switches' latency missing?)"
    return _unit_hint(got, sum(ser) + fixed)


def path_latency(ctx: CheckContext) -> Outcome:
    """One frame's latency across an idle path, on teaching paths and the fabric's."""
    fn = ctx.function("one_way_latency_s")
    tol = float(ctx.params.get("tolerance", 1e-3))
    spec = _setting(ctx, "incast", "topo", "fattree,4")
    graph, routes, hosts = routed_fabric(spec)
    far = routes.paths(hosts[-1], hosts[0])[0]
    paths = {**_teaching_paths(), f"{spec} {far[0]} -> {far[-1]}": path_dict(graph, far)}
    shown = []
    for name, path in paths.items():
        for frame in (WIRE_FRAME_BYTES, 86.0):
            got = _num(fn(path, frame), "one_way_latency_s")
            want = closed_latency_s(path, frame)
            if _rel(got, want) > tol:
                return fail(f"one {frame:g} B frame across '{name}' ({path}): {got * 1e9:.2f} ns; "
                            f"expected {want * 1e9:.2f} ns{_latency_hint(path, frame, got)}")
        shown.append(f"{name}: {closed_latency_s(path, WIRE_FRAME_BYTES) * 1e9:.1f} ns")
    from traffic.fixeddelay import path_delay

    project = path_delay(graph, far, FRAME_BYTES).total_s
    return ok("one full frame: " + "; ".join(shown) + f" (the project's traffic.fixeddelay: "
              f"{project * 1e9:.1f} ns across the fabric)")


def bdp(ctx: CheckContext) -> Outcome:
    """The path's BDP (bottleneck rate x round trip), and its invariance under dilation."""
    from traffic.fixeddelay import round_trip_s

    fn = ctx.function("path_bdp_bytes")
    tol = float(ctx.params.get("tolerance", 0.02))
    scale = float(ctx.params.get("scale", 1e4))
    spec = _setting(ctx, "incast", "topo", "fattree,4")
    graph, routes, hosts = routed_fabric(spec)
    shown = []
    # The receiver's nearest, a same-pod and a farthest sender: three path lengths.
    dist = routes.distances_to(hosts[0])
    picks = sorted({dist[h]: h for h in reversed(hosts[1:])}.items())
    for _, src in picks:
        nodes = routes.paths(src, hosts[0])[0]
        path = path_dict(graph, nodes)
        rtt = round_trip_s(graph, routes.paths, src, hosts[0])
        want = min(path["rates_bps"]) * rtt / 8.0
        got = _num(fn(path), "path_bdp_bytes")
        if _rel(got, want) > tol:
            one_way = min(path["rates_bps"]) * closed_latency_s(path, WIRE_FRAME_BYTES) / 8.0
            hint = (" (one way only: the sender needs the ACK back before the bytes leave "
                    "flight)" if _rel(got, one_way) < 0.05 else _unit_hint(got, want, scale))
            return fail(f"{src} -> {hosts[0]} on {spec}: BDP {got:.0f} B; the bottleneck "
                        f"{min(path['rates_bps']) / 1e9:g} Gb/s x the round trip "
                        f"{rtt * 1e6:.3f} us = {want:.0f} B{hint}")
        shown.append(f"{src} -> {hosts[0]} ({len(nodes) - 1} hops): RTT {rtt * 1e6:.2f} us, "
                     f"BDP {want / 1e3:.1f} KB")
    middle = _teaching_paths()["400G-100G-400G, 50 ns of cable each, two 300 ns switches"]
    want = 100e9 * (closed_latency_s(middle, WIRE_FRAME_BYTES)
                    + closed_latency_s(middle, ACK_FRAME_BYTES + 24)) / 8.0
    got = _num(fn(middle), "path_bdp_bytes")
    if _rel(got, want) > tol:
        return fail(f"on the path {middle}: BDP {got:.0f} B; expected {want:.0f} B (the "
                    "bottleneck is the slowest link, wherever it is on the path)")
    dilated = {"rates_bps": [r / scale for r in middle["rates_bps"]],
               "propagation_s": [t * scale for t in middle["propagation_s"]],
               "switch_latency_s": [t * scale for t in middle["switch_latency_s"]]}
    got_emu = _num(fn(dilated), "path_bdp_bytes")
    if _rel(got_emu, got) > tol:
        return fail(f"the same path dilated by S = {scale:g} (rates / S, delays x S) has a BDP "
                    f"of {got_emu:.0f} B against {got:.0f} B real: bytes must not change")
    return ok("; ".join(shown) + f"; dilated by S = {scale:g} the BDP stays {got_emu:.0f} B")


# ------------------------------------------------------------------ TODO 3: incast

def wire_bytes(ctx: CheckContext) -> Outcome:
    fn = ctx.function("wire_bytes")
    for payload in (4096, 64 << 10, 1 << 20):
        got = _num(fn(payload), "wire_bytes")
        want = closed_wire_bytes(payload)
        if _rel(got, want) > 1e-4:
            frames = payload // MTU_PAYLOAD_BYTES
            hint = ""
            if _rel(got, payload) < 1e-6:
                hint = " (no header at all: every frame carries 58 B of RoCEv2 headers)"
            elif _rel(got, payload + frames * 58) < 1e-6:
                hint = " (Ethernet's 24 B per frame of preamble, FCS and gap also take wire time)"
            elif _rel(got, payload + 82) < 1e-6 and frames > 1:
                hint = " (headers once per message: they are per frame)"
            return fail(f"wire_bytes({payload}) = {got:.0f}; {frames} frame(s) of "
                        f"{MTU_PAYLOAD_BYTES} B + {FRAME_EXTRA_BYTES} B each = {want:.0f}{hint}")
    return ok(f"1 MiB of payload is {closed_wire_bytes(1 << 20):.0f} B on the wire "
              f"(+{FRAME_EXTRA_BYTES / MTU_PAYLOAD_BYTES:.2%})")


def incast(ctx: CheckContext) -> Outcome:
    """The CC-off incast's completion: closed form on teaching paths, and the project's
    model on the scenario's fabric."""
    fn = ctx.function("incast_completion_s")
    tol = float(ctx.params.get("tolerance", 0.01))
    model_tol = float(ctx.params.get("model_tolerance", 0.02))
    teach = _teaching_paths()
    cases = [(1, 4096, teach["4 hops at 100G, nothing else"], 0.0, "4 hops at 100G"),
             (4, 64 * 4096, teach["2 hops at 400G, 1 us of cable each, a 600 ns switch"],
              NIC_OVERHEAD_S, "2 hops at 400G, 1 us of cable each, a 600 ns switch")]
    spec = _setting(ctx, "incast", "topo", "fattree,4")
    n = int(_setting(ctx, "incast", "senders", "3"))
    size = _size(_setting(ctx, "incast", "size", "1MiB"))
    fab_path = incast_path(spec, n)
    cases += [(n, size, fab_path, NIC_OVERHEAD_S, f"{spec}, the scenario"),
              (n, 4096, fab_path, NIC_OVERHEAD_S, f"{spec}, one frame each")]
    for senders, nbytes, path, overhead, name in cases:
        got = _num(fn(senders, nbytes, path, overhead), "incast_completion_s")
        lo, hi = closed_incast_s(senders, nbytes, path, overhead)
        if not _within(got, lo, hi, tol):
            return fail(f"{senders} x {nbytes} B on '{name}' (NIC overhead {overhead * 1e6:g} us): "
                        f"{got * 1e6:.3f} us; expected {hi * 1e6:.3f} us (or {lo * 1e6:.3f} us "
                        "counting the last frame once)"
                        + _incast_hint(senders, nbytes, path, overhead, got, hi))
    got = _num(fn(n, size, fab_path, NIC_OVERHEAD_S), "incast_completion_s")
    model = model_incast_s(spec, n, size)
    if _rel(got, model) > model_tol:
        return fail(f"{n} x {size} B on {spec}: you predict {got * 1e6:.2f} us, the project's "
                    f"model {model * 1e6:.2f} us (more than {model_tol:.0%} apart)")
    return ok(f"{n} x {size >> 10} KiB on {spec}: you predict {got * 1e6:.2f} us; the project's "
              f"model (model.incast_predict) {model * 1e6:.2f} us")


def _incast_hint(n: int, size: float, path: PathDict, overhead: float, got: float,
                 want: float) -> str:
    last = path["rates_bps"][-1]
    drain = 8.0 * n * closed_wire_bytes(size) / last
    fixed = want - drain
    ser = [8.0 * WIRE_FRAME_BYTES / r for r in path["rates_bps"]]
    if _within(got, drain + fixed - sum(ser) + max(ser) - ser[-1],
               drain + fixed - sum(ser) + max(ser), 1e-3):
        return " (the frame serialized once: every store-and-forward hop serializes it)"
    if _within(got, 8.0 * n * size / last, 8.0 * n * size / last + fixed, 1e-3):
        return " (headers missing: every 4096 B frame takes 4178 B of wire time)"
    if overhead and _rel(got, want - overhead) < 2e-3:
        return " (the NIC's per-message overhead missing?)"
    if _rel(got, 8.0 * size / last + fixed) < 2e-3 and n > 1:
        return " (one sender's bytes: all N go through the receiver's last hop)"
    hint = _unit_hint(got, want, 1e4)
    if not hint and not 1e-2 < got / want < 1e2:
        hint = (" (orders of magnitude off: an emulated rate or time, S times the real one, "
                "where the real one was asked? or a unit?)")
    return hint


# --------------------------------------------------------------- TODO 4: ring all-reduce

def ring(ctx: CheckContext) -> Outcome:
    """The ring's closed form, its step latency, and the project's model on the fabric."""
    from model.alphabeta import ring_allreduce_time_s, roce_wire_factor

    step_fn = ctx.function("ring_step_latency_s")
    ring_fn = ctx.function("ring_allreduce_s")
    tol = float(ctx.params.get("tolerance", 0.01))
    model_tol = float(ctx.params.get("model_tolerance", 0.10))
    for n, size, rate, alpha in ((8, 8 << 20, 400e9, 2e-6), (4, 64 << 10, 100e9, 5e-6)):
        got = _num(ring_fn(n, size, rate, alpha), "ring_allreduce_s")
        want = ring_allreduce_time_s(n, size * roce_wire_factor(), rate, alpha)
        if _rel(got, want) > tol:
            steps = 2 * (n - 1)
            chunk = 8.0 * closed_wire_bytes(size / n) / rate
            hint = ""
            if _rel(got, (n - 1) * (alpha + chunk)) < 2e-3:
                hint = " (n - 1 steps: that is a reduce-scatter; the all-gather follows)"
            elif _rel(got, steps * (alpha + 8.0 * size / n / rate)) < 2e-3:
                hint = " (headers missing from the S/n bytes)"
            elif _rel(got, steps * (alpha + 8.0 * closed_wire_bytes(size) / rate)) < 2e-3:
                hint = " (each step sends S/n, not S)"
            return fail(f"ring_allreduce_s({n}, {size}, {rate:g}, {alpha:g}) = {got * 1e6:.3f} us; "
                        f"2(n-1)(alpha + (S/n on the wire)/B) = {want * 1e6:.3f} us"
                        + (hint or _unit_hint(got, want)))
    # The step latency: overhead + the neighbours' mean latency (either bookkeeping).
    teach = list(_teaching_paths().values())
    got = _num(step_fn(teach, NIC_OVERHEAD_S), "ring_step_latency_s")
    full = [closed_latency_s(p, WIRE_FRAME_BYTES) for p in teach]
    part = [closed_latency_s(p, WIRE_FRAME_BYTES, last_at_bottleneck=True) for p in teach]
    lo, hi = NIC_OVERHEAD_S + sum(part) / len(part), NIC_OVERHEAD_S + sum(full) / len(full)
    if not _within(got, lo, hi, tol):
        hint = ""
        if _within(got, NIC_OVERHEAD_S + max(part), NIC_OVERHEAD_S + max(full), tol):
            hint = (" (the slowest neighbour's: a ring's steps are not barriers; each rank "
                    "waits for its own predecessor only, so the critical path crosses every "
                    "ring link in turn)")
        elif _within(got, lo - NIC_OVERHEAD_S, hi - NIC_OVERHEAD_S, tol):
            hint = " (the NIC's per-message overhead is paid at every step)"
        return fail(f"ring_step_latency_s over three neighbour paths (latencies "
                    f"{', '.join(f'{x * 1e9:.0f}' for x in full)} ns) with a 1 us NIC overhead: "
                    f"{got * 1e6:.3f} us; expected {hi * 1e6:.3f} us{hint}")
    spec = _setting(ctx, "ring", "topos", "fattree,4")
    paths = ring_paths(spec)
    n = len(paths)
    step = _num(step_fn(paths, NIC_OVERHEAD_S), "ring_step_latency_s")
    rate = min(p["rates_bps"][0] for p in paths)
    shown = []
    for size in (64 << 10, _size(_setting(ctx, "ring", "sizes", "1MiB")), 4 << 20):
        got = _num(ring_fn(n, size, rate, step), "ring_allreduce_s")
        model = model_ring_s(spec, size)
        if _rel(got, model) > model_tol:
            return fail(f"a {n}-rank ring all-reduce of {size >> 10} KiB on {spec}: you predict "
                        f"{got * 1e6:.1f} us (step latency {step * 1e6:.3f} us), the project's "
                        f"model {model * 1e6:.1f} us: more than {model_tol:.0%} apart")
        shown.append(f"{size >> 10} KiB: {got * 1e6:.1f} us (model {model * 1e6:.1f})")
    return ok(f"{n}-rank ring on {spec}, step latency {step * 1e6:.3f} us: " + "; ".join(shown))


# -------------------------------------------------------------------------- emulation

def _student_incast_s(ctx: CheckContext, settings: dict[str, str]) -> float:
    spec = settings.get("topo", "fattree,4")
    n = int(settings.get("senders", "3"))
    size = _size(settings.get("size", "1MiB"))
    fn = ctx.function("incast_completion_s")
    return _num(fn(n, size, incast_path(spec, n), NIC_OVERHEAD_S), "incast_completion_s")


def _student_ring_s(ctx: CheckContext, settings: dict[str, str]) -> float:
    spec = settings.get("topos", "fattree,4")
    paths = ring_paths(spec)
    step = _num(ctx.function("ring_step_latency_s")(paths, NIC_OVERHEAD_S), "ring_step_latency_s")
    size = _size(settings.get("sizes", "1MiB"))
    return _num(ctx.function("ring_allreduce_s")(len(paths), size, paths[0]["rates_bps"][0], step),
                "ring_allreduce_s")


def _measured_vs(what: str, measured_us: float, model_us: float, student_us: float,
                 band: float, model_band: float) -> Outcome:
    """Pass when the measurement lies within ``band`` of the student's prediction and
    within ``model_band`` of the model. A measurement far from the model is the
    emulation's fault, not the student's: ungraded, with the numbers."""
    text = (f"{what}: measured {measured_us:.2f} us, you predicted {student_us:.2f} us "
            f"({(student_us - measured_us) / measured_us:+.1%}), the project's model "
            f"{model_us:.2f} us ({(model_us - measured_us) / measured_us:+.1%})")
    if not (math.isfinite(measured_us) and math.isfinite(model_us)):
        return ungraded(f"{what}: the run measured no completion time")
    if _rel(measured_us, model_us) > model_band:
        return ungraded(f"{text}: the measurement is more than {model_band:.0%} from the model, "
                        "so the emulation, not your prediction, is off; run the check again")
    if _rel(measured_us, student_us) > band:
        return fail(f"{text}: your prediction must be within {band:.0%} of the measurement "
                    "(look at which term is missing or extra: the hints of the checks above)")
    return ok(text)


def incast_measured(ctx: CheckContext) -> Outcome:
    runs = ctx.runs
    assert runs is not None
    measured = runs.metric("completion time", "cc=off")
    model = runs.metric("completion time", "cc=off", column="predicted")
    student = _student_incast_s(ctx, runs.scenario.settings) * 1e6
    return _measured_vs("CC-off incast completion", measured, model, student,
                        float(ctx.params.get("band", 0.10)),
                        float(ctx.params.get("model_band", 0.10)))


def ring_measured(ctx: CheckContext) -> Outcome:
    runs = ctx.runs
    assert runs is not None
    measured = runs.metric("time", "allreduce-ring")
    model = runs.metric("time", "allreduce-ring", column="predicted")
    student = _student_ring_s(ctx, runs.scenario.settings) * 1e6
    return _measured_vs("ring all-reduce time", measured, model, student,
                        float(ctx.params.get("band", 0.10)),
                        float(ctx.params.get("model_band", 0.10)))


def plots(runs: dict[str, ScenarioRuns], out: Path, code: StudentCode) -> list[Path]:
    """The student's prediction, the project's model and the measurement, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from labs.catalog import find_lab
    from labs.grader import CheckContext as Ctx
    from labs.student import StudentError

    lab = find_lab(0)
    groups = []
    for name, metric, case, predict in (("incast", "completion time", "cc=off", _student_incast_s),
                                        ("ring", "time", "allreduce-ring", _student_ring_s)):
        sr = runs.get(name)
        if sr is None or not any(r.valid for r in sr.runs):
            continue
        try:
            ctx = Ctx(lab, lab.checks[0], code)
            student = predict(ctx, sr.scenario.settings) * 1e6
        except StudentError:
            student = math.nan
        groups.append((name, student, sr.metric(metric, case, column="predicted"),
                       sr.metric(metric, case)))
    if not groups:
        return []
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.27
    for i, (label, color) in enumerate((("your prediction", "tab:blue"),
                                        ("project's model", "tab:orange"),
                                        ("measured", "tab:green"))):
        xs = [g + (i - 1) * width for g in range(len(groups))]
        ys = [grp[1 + i] for grp in groups]
        bars = ax.bar(xs, ys, width, label=label, color=color)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(range(len(groups)),
                  [{"incast": "CC-off incast", "ring": "ring all-reduce"}[g[0]] for g in groups])
    ax.set(ylabel="completion time (us, real fabric)",
           title="Lab 0: your prediction, the model and the measurement")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "lab0_prediction_vs_measurement.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return [path]

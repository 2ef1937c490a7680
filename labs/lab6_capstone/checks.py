"""Lab 6's checks: the student's alpha-beta model of ring and halving-doubling
all-reduce, judged for sanity, for its bandwidth and latency terms, against the
project's a-priori model over a grid of sizes on two fabrics, then against the
measurement of `emu run collective` on the fat-tree.

Expected values come from the definitions (a ring all-reduce moves 2(n-1)/n S per
rank, as does halving-doubling) and from the project's model
(`model.alphabeta.predict_workload`, the message DAG priced on the routed fabric),
never from the reference solution. The student's model may differ from the project's
in any way the bands allow: they are stated in lab.toml and in the feedback.
"""

from __future__ import annotations

import copy
import math
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd

from core.frame import MTU_PAYLOAD_BYTES, WIRE_FRAME_BYTES
from core.safefile import save_figure, write_csv
from labs.emulation import ScenarioRuns
from labs.grader import CheckContext
from labs.student import StudentCode, StudentError
from labs.verdict import Outcome, fail, ok, ungraded

ALGORITHMS = {"ring": "allreduce-ring", "hd": "allreduce-hd"}
NIC_OVERHEAD_S = 1e-6
KIB = 1 << 10
MIB = 1 << 20


def _rel(value: float, want: float) -> float:
    return abs(value - want) / abs(want) if want else abs(value)


def _fmt_size(size_bytes: float) -> str:
    return f"{size_bytes / MIB:g} MiB" if size_bytes >= MIB else f"{size_bytes / KIB:g} KiB"


# ------------------------------------------------------------------------- the fabric

@lru_cache(maxsize=4)
def _topology(spec: str) -> tuple[Any, Any, tuple[str, ...]]:
    """The routed graph the project's model prices, and the hosts in rank order."""
    from topologies.routing import compute_routes, topo_graph
    from topologies.spec import build_topo

    topo = build_topo(spec)
    return topo_graph(topo), compute_routes(topo), tuple(topo.host_nodes())


def _path(graph: Any, nodes: tuple[str, ...]) -> dict[str, list[float]]:
    links = list(zip(nodes[:-1], nodes[1:], strict=True))
    return {"rates_bps": [float(graph.edges[u, v]["rate_bps"]) for u, v in links],
            "propagation_s": [float(graph.edges[u, v].get("delay_s", 0.0)) for u, v in links],
            "switch_latency_s": [float(graph.nodes[n].get("switch_latency_s", 0.0))
                                 for n in nodes[1:-1]]}


@lru_cache(maxsize=4)
def _fabric(spec: str) -> dict[str, Any]:
    graph, routes, hosts = _topology(spec)
    n = len(hosts)
    return {"name": spec, "ranks": list(hosts),
            "nic_rate_bps": min(float(graph.edges[h, next(iter(graph[h]))]["rate_bps"])
                                for h in hosts),
            "nic_overhead_s": NIC_OVERHEAD_S, "mtu_payload_bytes": MTU_PAYLOAD_BYTES,
            "frame_overhead_bytes": WIRE_FRAME_BYTES - MTU_PAYLOAD_BYTES,
            "paths": {(i, j): _path(graph, routes.paths(hosts[i], hosts[j])[0])
                      for i in range(n) for j in range(n) if i != j}}


def fabric_params(spec: str) -> dict[str, Any]:
    """What the student's model gets: a fresh copy (their code may change it)."""
    return copy.deepcopy(_fabric(spec))


@lru_cache(maxsize=128)
def model_s(spec: str, algorithm: str, size_bytes: int, mode: str = "spread") -> float:
    """The project's model of the all-reduce (real s): ``mode`` 'spread' is ECMP
    spread evenly, 'hashed' the mean over 16 hash draws, as `emu run collective`."""
    import numpy as np

    from model.alphabeta import predict_workload, predict_workload_hashed
    from traffic import collectives

    graph, routes, hosts = _topology(spec)
    workload = collectives.build(ALGORITHMS[algorithm], list(hosts), size_bytes)
    if mode == "spread":
        return float(predict_workload(workload, graph, routes.paths, mode="spread").completion_s)
    draws = predict_workload_hashed(workload, graph, routes.paths, samples=16, seed=size_bytes)
    return float(np.mean([p.completion_s for p in draws]))


def _predict(ctx: CheckContext, algorithm: str, n: int, size_bytes: float, spec: str) -> float:
    value = ctx.function("predict_allreduce_s")(algorithm, n, size_bytes, fabric_params(spec))
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise StudentError(f"predict_allreduce_s({algorithm!r}, {n}, {size_bytes:g}) returned "
                           f"{value!r}, not a number") from None
    if not (math.isfinite(out) and out > 0):
        raise StudentError(f"predict_allreduce_s({algorithm!r}, {n}, {size_bytes:g}) returned "
                           f"{out}: a time must be positive and finite")
    return out


def _spec(ctx: CheckContext) -> str:
    return ctx.lab.scenario("sweep").settings.get("topos", "fattree,4").split("@")[0]


def _wire_factor() -> float:
    return WIRE_FRAME_BYTES / MTU_PAYLOAD_BYTES


# ----------------------------------------------------------------- algorithm checks

def sanity(ctx: CheckContext) -> Outcome:
    """Positive, finite, and never faster for more bytes."""
    spec = _spec(ctx)
    n = len(_fabric(spec)["ranks"])
    sizes = [n * 256 * 4**k for k in range(10)]
    shown = []
    for algorithm in ALGORITHMS:
        times = [_predict(ctx, algorithm, n, s, spec) for s in sizes]
        for (s0, t0), (s1, t1) in pairwise(zip(sizes, times, strict=True)):
            if t1 < t0:
                return fail(f"{algorithm}: {_fmt_size(s1)} takes {t1 * 1e6:.2f} us, less than "
                            f"{_fmt_size(s0)}'s {t0 * 1e6:.2f} us: more bytes never take less time")
        if not times[-1] > times[0]:
            return fail(f"{algorithm}: {_fmt_size(sizes[0])} and {_fmt_size(sizes[-1])} take the "
                        f"same {times[0] * 1e6:.2f} us: the bytes cost nothing?")
        shown.append(f"{algorithm} {times[0] * 1e6:.1f} us at {_fmt_size(sizes[0])} to "
                     f"{times[-1] * 1e3:.2f} ms at {_fmt_size(sizes[-1])}")
    return ok(f"{n} ranks on {spec}: " + "; ".join(shown))


def bandwidth_term(ctx: CheckContext) -> Outcome:
    """At large sizes the time grows by 2(n-1)/n x (bytes on the wire) / B per byte."""
    spec = _spec(ctx)
    fab = _fabric(spec)
    n, rate = len(fab["ranks"]), fab["nic_rate_bps"]
    tol = float(ctx.params.get("tolerance", 0.05))
    big = int(ctx.params.get("size_bytes", 256 * MIB))
    want = 2 * (n - 1) / n * 8.0 * _wire_factor() / rate
    shown = []
    for algorithm in ALGORITHMS:
        slope = (_predict(ctx, algorithm, n, 2 * big, spec)
                 - _predict(ctx, algorithm, n, big, spec)) / big
        if _rel(slope, want) > tol:
            ratio = slope / want
            hints = ((8.0, "bits and bytes: 8 bits a byte, rates in bit/s"),
                     (1 / 8.0, "bits and bytes: 8 bits a byte, rates in bit/s"),
                     (n / (n - 1), "2 S / B: each rank sends and receives 2(n-1)/n S, not 2 S"),
                     (n, "every step sends S/n (ring) or a halved share (hd), not S"),
                     (0.5, "half the traffic: the all-gather (or the doubling) is missing"),
                     (1 / _wire_factor(), "headers: 4096 B of payload take 4178 B of wire"))
            hint = next((f" ({text})" for r, text in hints if _rel(ratio, r) < 0.02), "")
            return fail(f"{algorithm}: from {_fmt_size(big)} to {_fmt_size(2 * big)} your time "
                        f"grows by {slope * 1e12:.3f} ps per byte; 2(n-1)/n x 8 x "
                        f"{_wire_factor():.4f} / {rate / 1e9:g} Gb/s = {want * 1e12:.3f} ps per "
                        f"byte (within {tol:.0%}){hint}")
        shown.append(f"{algorithm} {slope * 1e12:.3f}")
    return ok(f"ps per byte at large sizes: {', '.join(shown)}; 2(n-1)/n x wire / B = "
              f"{want * 1e12:.3f}: the busbw tends to {rate / _wire_factor() / 8e9:.1f} GB/s")


def latency_term(ctx: CheckContext) -> Outcome:
    """At a tiny size the time is the steps' latencies: within a band of the model."""
    spec = _spec(ctx)
    fab = _fabric(spec)
    n = len(fab["ranks"])
    band = float(ctx.params.get("band", 0.25))
    size = n * int(ctx.params.get("chunk_bytes", 256))
    shown = []
    for algorithm in ALGORITHMS:
        got = _predict(ctx, algorithm, n, size, spec)
        want = model_s(spec, algorithm, size)
        if _rel(got, want) > band:
            return fail(f"{algorithm} of {size} B ({size // n} B per rank), all latency: you "
                        f"predict {got * 1e6:.2f} us, the project's model {want * 1e6:.2f} us "
                        f"(more than {band:.0%} apart){_latency_hint(algorithm, fab, got)}")
        shown.append(f"{algorithm} {got * 1e6:.1f} us (model {want * 1e6:.1f})")
    return ok(f"{size} B on {spec}: " + "; ".join(shown))


def _alpha_s(fab: dict[str, Any], i: int, j: int) -> float:
    p = fab["paths"][(i, j)]
    ser = sum(8.0 * WIRE_FRAME_BYTES / r for r in p["rates_bps"])
    return ser + sum(p["propagation_s"]) + sum(p["switch_latency_s"])


def _latency_hint(algorithm: str, fab: dict[str, Any], got: float) -> str:
    n = len(fab["ranks"])
    if algorithm == "ring":
        alphas = [_alpha_s(fab, i, (i + 1) % n) for i in range(n)]
        barrier = 2 * (n - 1) * (NIC_OVERHEAD_S + max(alphas))
        mean = 2 * (n - 1) * (sum(alphas) / n)
        if _rel(got, barrier) < 0.1:
            return (" (every step at the slowest neighbour's latency: a ring step is no "
                    "barrier; rank i waits for rank i-1 only)")
        if _rel(got, mean) < 0.1:
            return " (the NIC overhead, 1 us per message, missing?)"
    return " (count the steps; per step: the NIC overhead and the path's fixed latency)"


def model_grid(ctx: CheckContext) -> Outcome:
    """Both algorithms over a grid of sizes on two fabrics, within ``band`` of the
    project's model with ECMP spread evenly (partial credit per point)."""
    band = float(ctx.params.get("band", 0.25))
    sizes = [int(s) for s in ctx.params.get("sizes", [64 * KIB, MIB, 16 * MIB, 64 * MIB])]
    specs = [_spec(ctx), *ctx.params.get("other_fabrics", ["leafspine,4,2,2"])]
    inside, bad, worst = 0, [], 0.0
    total = 0
    for spec in specs:
        n = len(_fabric(spec)["ranks"])
        for algorithm in ALGORITHMS:
            for size in sizes:
                got = _predict(ctx, algorithm, n, size, spec)
                want = model_s(spec, algorithm, size)
                err = (got - want) / want
                worst = max(worst, abs(err))
                total += 1
                if abs(err) <= band:
                    inside += 1
                else:
                    bad.append(f"{spec} {algorithm} {_fmt_size(size)}: yours {got * 1e6:.1f} us, "
                               f"model {want * 1e6:.1f} us ({err:+.0%})")
    if bad:
        return fail(f"{inside} of {total} points within {band:.0%} of the project's model; "
                    + "; ".join(bad[:6]) + ("; ..." if len(bad) > 6 else ""),
                    fraction=inside / total)
    other = specs[-1]
    n_other = len(_fabric(other)["ranks"])
    hashed = model_s(other, "hd", sizes[-1], "hashed")
    spread = model_s(other, "hd", sizes[-1])
    return ok(f"all {total} points within {band:.0%} of the project's model (worst "
              f"{worst:.1%}). Food for question 4: on {other} ({n_other} ranks) the model's hd "
              f"of {_fmt_size(sizes[-1])} takes {spread * 1e6:.0f} us with ECMP spread evenly "
              f"but {hashed * 1e6:.0f} us averaged over hash draws")


# ------------------------------------------------------------------------ emulation

def comparison(ctx: CheckContext | None, runs: ScenarioRuns,
               predict: Any = None) -> pd.DataFrame:
    """One row per measured case: algorithm, size, measured, model and the student's
    time (us), and both errors against the measurement."""
    rows = []
    for table in runs.table("nccl.csv"):
        for _, r in table.iterrows():
            algorithm = next((a for a, name in ALGORITHMS.items() if name == r.collective), None)
            if algorithm is None:
                continue
            spec = str(r.fabric).split("@")[0]
            n = len(_fabric(spec)["ranks"])
            student = math.nan
            if predict is not None:
                student = predict(algorithm, n, int(r.size_bytes), spec) * 1e6
            rows.append({"algorithm": algorithm, "size_bytes": int(r.size_bytes),
                         "measured_us": float(r.time_us), "model_us": float(r.model_time_us),
                         "yours_us": student})
    df = pd.DataFrame(rows)
    if not df.empty:
        df = df.groupby(["algorithm", "size_bytes"], as_index=False).median()
        df = df.sort_values(["algorithm", "size_bytes"], key=lambda col: col.map(
            {"ring": 0, "hd": 1}) if col.name == "algorithm" else col, ignore_index=True)
        df["model_error"] = (df.model_us - df.measured_us) / df.measured_us
        df["your_error"] = (df.yours_us - df.measured_us) / df.measured_us
    return df


def measured(ctx: CheckContext) -> Outcome:
    """The student's error against the measurement within ``band`` at every measured
    size; a measurement beyond ``model_band`` of the model is the emulation's fault
    (ungraded)."""
    runs = ctx.runs
    assert runs is not None
    band = float(ctx.params.get("band", 0.30))
    model_band = float(ctx.params.get("model_band", 0.10))
    df = comparison(ctx, runs, lambda a, n, s, spec: _predict(ctx, a, n, s, spec))
    if df.empty:
        return ungraded("the runs measured no all-reduce (no nccl.csv)")
    lines = [f"{r.algorithm} {_fmt_size(r.size_bytes)}: measured {r.measured_us:.1f} us, "
             f"model {r.model_us:.1f} ({r.model_error:+.1%}), yours {r.yours_us:.1f} "
             f"({r.your_error:+.1%})" for r in df.itertuples()]
    table = "; ".join(lines)
    off = df[df.model_error.abs() > model_band]
    if not off.empty:
        return ungraded(f"{table}: the measurement is more than {model_band:.0%} from the "
                        "project's model, so the emulation, not your model, is off; check again")
    inside = int((df.your_error.abs() <= band).sum())
    if inside < len(df):
        return fail(f"{inside} of {len(df)} sizes within {band:.0%} of the measurement: {table}",
                    fraction=inside / len(df))
    return ok(f"every size within {band:.0%}: {table}")


def plots(runs: dict[str, ScenarioRuns], out: Path, code: StudentCode) -> list[Path]:
    """Time against size: the student's model, the project's and the measurement."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from labs.catalog import find_lab
    from labs.grader import CheckContext as Ctx

    sr = runs.get("sweep")
    if sr is None or not any(r.valid for r in sr.runs):
        return []
    lab = find_lab(6)
    ctx = Ctx(lab, lab.checks[0], code)

    def predict(a: str, n: int, s: int, spec: str) -> float:
        try:
            return _predict(ctx, a, n, s, spec)
        except StudentError:
            return math.nan

    df = comparison(ctx, sr, predict)
    if df.empty:
        return []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for algorithm, color in (("ring", "tab:blue"), ("hd", "tab:red")):
        d = df[df.algorithm == algorithm].sort_values("size_bytes")
        if d.empty:
            continue
        kib = d.size_bytes / KIB
        ax.plot(kib, d.measured_us, "o", color=color, ms=8, label=f"{algorithm}: measured")
        ax.plot(kib, d.model_us, ":", color=color, label=f"{algorithm}: project's model")
        ax.plot(kib, d.yours_us, "--", color=color, marker="x", label=f"{algorithm}: your model")
    ax.set(xscale="log", yscale="log", xlabel="all-reduce size (KiB)",
           ylabel="time (us, real fabric)",
           title="Lab 6: your model, the project's and the measurement")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    path = out / "lab6_model_vs_measurement.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    write_csv(out / "lab6_comparison.csv", df)
    return [path]

"""Lab 5's checks: the student's alpha-beta costs, crossover and ECMP collision
expectations against their closed forms, then the fabric: ring and halving-doubling
all-reduce on 8 ranks at 4 KiB and 4 MiB, and hashed permutations.

Expected values come from the published forms (Thakur, Rabenseifner and Gropp 2005
for the costs; balls into bins for the hashing) through the project's model
(``model.alphabeta``) or written out here, never from the reference solution. A
failing point names the numbers and, when the answer matches a typical mistake
(bytes for bits, a missing factor 2 or (n-1)/n, microseconds for seconds), says which.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.safefile import save_figure
from labs.emulation import ScenarioRuns
from labs.grader import CheckContext
from labs.lab5_collectives.ecmp_reference import leaf_pairs, model_means, permutation_bounds
from labs.student import StudentCode, StudentError
from labs.verdict import Outcome, fail, ok
from model.alphabeta import halving_doubling_allreduce_time_s, ring_allreduce_time_s

REL_TOL = 1e-6
#: Collision expectations may come from a closed form or a Monte Carlo of >= 1e5 draws.
PROB_TOL = 0.005
GBIT = 1e9

#: (n ranks, size bytes, alpha s, link bit/s): the latency regime (8 B, 4 KiB), the
#: bandwidth regime (64 MiB, 1 GiB) and between, on 2 to 64 ranks.
COST_POINTS = ((8, 8, 2e-6, 400e9), (16, 4096, 1.5e-6, 400e9), (4, 1 << 20, 3e-6, 400e9),
               (2, 4096, 1e-6, 100e9), (16, 64 << 20, 2e-6, 400e9), (64, 1 << 30, 5e-6, 800e9))


def _close(value: Any, want: float, rel: float = REL_TOL) -> bool:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(v) and abs(v - want) <= rel * abs(want) + 1e-15


def _number(value: Any) -> float:
    """The student's answer as a float (NaN when it is not a number)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _us(t_s: float) -> str:
    return f"{t_s * 1e6:.4g} us"


def _diagnose(value: Any, mistakes: dict[str, float]) -> str:
    """The first typical mistake whose value the student's answer equals, as a hint."""
    for hint, wrong in mistakes.items():
        if _close(value, wrong, 1e-6):
            return f" ({hint})"
    return ""


def _cost_check(ctx: CheckContext, name: str, want: Callable[[int, float, float, float], float],
                mistakes: Callable[[int, float, float, float], dict[str, float]]) -> Outcome:
    fn = ctx.function(name)
    lines = []
    for n, size, alpha, bw in COST_POINTS:
        got = fn(n, size, alpha, bw)
        expected = want(n, size, alpha, bw)
        if not _close(got, expected):
            shown = f"{float(got) * 1e6:.6g} us" if isinstance(got, int | float) else repr(got)
            return fail(f"{name}(n_ranks={n}, size_bytes={size}, alpha_s={alpha:g}, "
                        f"link_bps={bw:g}) returned {shown}; expected {_us(expected)}"
                        + _diagnose(got, mistakes(n, size, alpha, bw)))
        lines.append(f"n={n} {size} B: {_us(expected)}")
    return ok("; ".join(lines))


def _ring(n: int, size: float, alpha: float, bw: float) -> float:
    return ring_allreduce_time_s(n, size, bw, alpha)


def _hd(n: int, size: float, alpha: float, bw: float) -> float:
    return halving_doubling_allreduce_time_s(n, size, bw, alpha)


def _ring_mistakes(n: int, size: float, alpha: float, bw: float) -> dict[str, float]:
    beta = 8.0 * size / n / bw
    return {
        "bytes divided by bit/s: a byte is 8 bits": 2 * (n - 1) * (alpha + beta / 8),
        "alpha_s is in seconds already: no conversion (x 1e-6)": 2 * (n - 1) * (alpha * 1e-6 + beta),
        "alpha_s is in seconds already: no conversion (x 1e6)": 2 * (n - 1) * (alpha * 1e6 + beta),
        "n - 1 steps is only the reduce-scatter: the all-gather adds as many": (n - 1) * (alpha + beta),
        "each step sends S / n, not S": 2 * (n - 1) * (alpha + beta * n),
        "2 (n - 1) steps, not 2 n": 2 * n * (alpha + beta),
    }


def _hd_mistakes(n: int, size: float, alpha: float, bw: float) -> dict[str, float]:
    levels = math.log2(n)
    full = 8.0 * size / bw
    return {
        "bytes divided by bit/s: a byte is 8 bits": _hd(n, size, alpha, bw * 8),
        "alpha_s is in seconds already: no conversion (x 1e-6)": _hd(n, size, alpha * 1e-6, bw),
        "alpha_s is in seconds already: no conversion (x 1e6)": _hd(n, size, alpha * 1e6, bw),
        "log2(n) steps is only the reduce-scatter: the all-gather mirrors it": _hd(n, size, alpha, bw) / 2,
        "the messages halve: S/2, S/4, ..., S/n, not S every step": 2 * levels * (alpha + full),
        "the first step already sends S/2, not S": 2 * levels * alpha + 4 * (n - 1) / n * full,
        "the bandwidth term is 2 (n - 1)/n S / B (n - 1 of the n pieces, twice)": 2 * levels * alpha + 2 * full,
    }


def ring_cost(ctx: CheckContext) -> Outcome:
    return _cost_check(ctx, "ring_allreduce_time_s", _ring, _ring_mistakes)


def hd_cost(ctx: CheckContext) -> Outcome:
    return _cost_check(ctx, "hd_allreduce_time_s", _hd, _hd_mistakes)


def regimes(ctx: CheckContext) -> Outcome:
    """8 B: the ring / HD ratio is (n-1)/log2 n (alpha only); 1 GiB: within 1 % of 1
    (the same bytes per rank)."""
    ring, hd = ctx.function("ring_allreduce_time_s"), ctx.function("hd_allreduce_time_s")

    def ratio(n: int, size: int) -> float:
        den = _number(hd(n, size, 2e-6, 400e9))
        return _number(ring(n, size, 2e-6, 400e9)) / den if den > 0 else math.nan

    lines = []
    for n in (4, 16, 64):
        small, large = ratio(n, 8), ratio(n, 1 << 30)
        want = (n - 1) / math.log2(n)
        if not abs(small - want) <= 0.01 * want:
            return fail(f"at 8 B on {n} ranks ring / HD = {small:.3g}; alpha dominates, so the "
                        f"ratio is the step counts' 2 (n-1) / (2 log2 n) = {want:.3g}")
        if not abs(large - 1) <= 0.01:
            return fail(f"at 1 GiB on {n} ranks ring / HD = {large:.3g}; both move 2 (n-1)/n S "
                        "per rank, so with the same B their costs meet (ratio near 1)")
        lines.append(f"n={n}: {small:.2f} at 8 B, {large:.4f} at 1 GiB")
    return ok("ring / HD: " + "; ".join(lines))


def _crossover_want(n: int, alpha: float, ring_bps: float, hd_bps: float) -> float:
    """Where 2(n-1)(alpha + S/(n B_r)) = 2 log2(n) alpha + 2 (n-1)/n S / B_h."""
    return ((n - 1 - math.log2(n)) * alpha * n
            / ((n - 1) * 8.0 * (1 / hd_bps - 1 / ring_bps)))


CROSSOVER_POINTS = ((8, 2.1e-6, 400e9, 200e9), (16, 2e-6, 400e9, 300e9),
                    (64, 5e-6, 800e9, 400e9), (4, 3e-6, 400e9, 100e9))


def crossover(ctx: CheckContext) -> Outcome:
    fn = ctx.function("crossover_bytes")
    lines = []
    for n, alpha, ring_bps, hd_bps in CROSSOVER_POINTS:
        got = fn(n, alpha, ring_bps, hd_bps)
        want = _crossover_want(n, alpha, ring_bps, hd_bps)
        if not _close(got, want):
            t_ring = _ring(n, want, alpha, ring_bps)
            hint = _diagnose(got, {
                "a byte is 8 bits: bytes divided by bit/s need a factor 8 (x 8)": want * 8,
                "a byte is 8 bits: bytes divided by bit/s need a factor 8 (/ 8)": want / 8,
                "the bandwidth terms carry 2 (n - 1) / n S, not S": want * 2 * (n - 1) / n,
                "the ring pays 2 (n - 1) alphas, HD 2 log2 n": want / 2,
            })
            return fail(f"crossover_bytes(n_ranks={n}, alpha_s={alpha:g}, ring_bps={ring_bps:g}, "
                        f"hd_bps={hd_bps:g}) returned {got!r}; both cost {_us(t_ring)} at "
                        f"{want:.6g} B (ring at ring_bps, HD at hd_bps){hint}")
        lines.append(f"n={n}: {want / 1024:.4g} KiB")
    for hd_bps in (400e9, 800e9):
        got = fn(8, 2e-6, 400e9, hd_bps)
        if _number(got) != math.inf:
            return fail(f"crossover_bytes(8, 2e-6, 400e9, {hd_bps:g}) returned {got!r}: with HD's "
                        "bandwidth at least the ring's HD is never slower; return math.inf")
    return ok("; ".join(lines) + "; math.inf when HD is as fast")


def _balls_monte_carlo(m: int, k: int, draws: int, seed: int) -> tuple[float, float]:
    """Hash m flows onto k paths ``draws`` times: the fraction of flows that share a
    path, and the mean per-flow throughput (1/j on a path of j flows)."""
    rng = random.Random(seed)
    shared = thr = 0.0
    for _ in range(draws):
        load = [0] * k
        paths = [rng.randrange(k) for _ in range(m)]
        for p in paths:
            load[p] += 1
        shared += sum(load[p] > 1 for p in paths) / m
        thr += sum(1 / load[p] for p in paths) / m
    return shared / draws, thr / draws


#: (m flows, k paths): the lab fabric's (2 or 3 flows over 4 spines) and larger ones.
BALLS_POINTS = ((2, 2), (2, 4), (3, 4), (4, 4), (8, 4), (16, 8), (64, 64), (1, 4), (5, 1))


def collisions(ctx: CheckContext) -> Outcome:
    fn = ctx.function("collision_fraction")
    for m, k in BALLS_POINTS:
        got = fn(m, k)
        want = 1 - (1 - 1 / k) ** (m - 1)
        if not abs(_number(got) - want) <= PROB_TOL:
            hint = _diagnose(got, {
                "the flow itself does not collide with itself: m - 1 others": 1 - (1 - 1 / k) ** m,
                "(m - 1) / k adds the chances as if they never overlapped": (m - 1) / k,
                "that is the chance of being alone, not of colliding": (1 - 1 / k) ** (m - 1),
            })
            return fail(f"collision_fraction(n_flows={m}, n_paths={k}) returned {got!r}; "
                        f"expected {want:.4f}{hint}")
    mc, _ = _balls_monte_carlo(4, 4, 20000, seed=5)
    return ok(f"4 flows on 4 paths: {fn(4, 4):.4f} collide (a Monte Carlo of 20000 hashings, "
              f"seed 5: {mc:.4f}); 2 flows on 4 paths: {fn(2, 4):.4f}")


def permutation_throughput(ctx: CheckContext) -> Outcome:
    fn = ctx.function("permutation_throughput_fraction")
    for m, k in BALLS_POINTS:
        got = fn(m, k)
        want = k * (1 - (1 - 1 / k) ** m) / m
        if not abs(_number(got) - want) <= PROB_TOL:
            hint = _diagnose(got, {
                "a flow that collides still gets its share of the path, not nothing":
                    (1 - 1 / k) ** (m - 1),
                "min(1, k / m) is perfect spreading; hashing leaves some paths idle":
                    min(1.0, k / m),
            })
            return fail(f"permutation_throughput_fraction(n_flows={m}, n_paths={k}) returned "
                        f"{got!r}; expected {want:.4f}{hint}")
    _, mc = _balls_monte_carlo(4, 4, 20000, seed=5)
    return ok(f"4 flows on 4 paths: {fn(4, 4):.4f} of line rate (Monte Carlo, seed 5: "
              f"{mc:.4f}); many flows on as many paths: {fn(64, 64):.4f} (1 - 1/e = 0.632)")


# ----------------------------------------------------------------------------- emulation

def _size_bytes(text: str) -> int:
    from core.units import parse_size_bytes

    return parse_size_bytes(text, "size")


def _case(algorithm: str, size: str) -> str:
    return f" allreduce-{algorithm} {size}"


def latency_regime(ctx: CheckContext) -> Outcome:
    """At a small size HD is faster, by the ratio of the step counts your costs give."""
    runs = ctx.runs
    assert runs is not None
    p = ctx.params
    size, n = str(p.get("size", "4KiB")), int(p.get("ranks", 8))
    alpha, bw, band = float(p["alpha_s"]), float(p["link_bps"]), float(p.get("band", 0.15))
    t_ring = runs.metric("time", _case("ring", size)) * 1e-6
    t_hd = runs.metric("time", _case("hd", size)) * 1e-6
    mine_ring = _number(ctx.function("ring_allreduce_time_s")(n, _size_bytes(size), alpha, bw))
    mine_hd = _number(ctx.function("hd_allreduce_time_s")(n, _size_bytes(size), alpha, bw))
    measured = t_ring / t_hd
    mine = mine_ring / mine_hd if mine_hd > 0 else math.nan
    text = (f"at {size} on {n} ranks the ring took {_us(t_ring)}, HD {_us(t_hd)} (ratio "
            f"{measured:.2f}); your costs with alpha = {alpha * 1e6:g} us give {_us(mine_ring)} "
            f"and {_us(mine_hd)} (ratio {mine:.2f})")
    if not t_hd < t_ring:
        return fail(f"{text}: HD's {2 * math.log2(n):.0f} steps should beat the ring's "
                    f"{2 * (n - 1)} where alpha dominates")
    if not abs(measured - mine) <= band * mine:
        return fail(f"{text}: the ratios should agree within {band:.0%} (at this size only "
                    "the number of steps matters)")
    return ok(text)


def _hd_band(ctx: CheckContext, size: int, draws: int) -> tuple[float, float, float, float]:
    """HD's busbw (bit/s) in the project's model of the real fabric (as `emu run
    collective` prices it): every crossing flow on one spine (the worst hash outcome),
    the fastest and slowest of ``draws`` random outcomes, and ECMP spread evenly (the
    best). One run is one hash outcome; any of them is a correct measurement."""
    from model.alphabeta import predict_workload, predict_workload_hashed
    from topologies.routing import compute_routes, topo_graph
    from topologies.spec import build_topo
    from traffic import collectives

    runs = ctx.runs
    assert runs is not None
    topo = build_topo(runs.scenario.settings["topos"].split(";")[0])
    routes, graph = compute_routes(topo), topo_graph(topo)
    work = collectives.build("allreduce-hd", list(routes.hosts), size)
    factor = work.meta["busbw_factor"]

    def busbw(completion_s: float) -> float:
        return 8.0 * size / completion_s * factor

    drawn = [busbw(q.completion_s) for q in predict_workload_hashed(
        work, graph, routes.paths, samples=draws, seed=size)]
    worst = predict_workload(work, graph, routes.paths, mode="hashed",
                             choice=lambda _flow, paths: 0)
    best = predict_workload(work, graph, routes.paths, mode="spread")
    return busbw(worst.completion_s), min(drawn), max(drawn), busbw(best.completion_s)


def bandwidth_regime(ctx: CheckContext) -> Outcome:
    """At a large size the ring's busbw beats HD's (HD's cross-leaf steps collide under
    ECMP: on this fabric HD loses on all but about 1 in 3000 hash outcomes, those in
    which no two of its crossing flows collide, and then the order is not graded); the ring's
    busbw within ``band`` of your cost; HD's between the model's worst and best hash
    outcomes (a run is one outcome, drawn by the kernel's hash)."""
    runs = ctx.runs
    assert runs is not None
    p = ctx.params
    size, n = str(p.get("size", "4MiB")), int(p.get("ranks", 8))
    alpha, bw, band = float(p["alpha_s"]), float(p["link_bps"]), float(p.get("band", 0.1))
    margin = float(p.get("margin", 0.05))
    s = _size_bytes(size)
    factor = 2 * (n - 1) / n
    b_ring = runs.metric("busbw", _case("ring", size)) * 8 * GBIT
    b_hd = runs.metric("busbw", _case("hd", size)) * 8 * GBIT
    t_mine = _number(ctx.function("ring_allreduce_time_s")(n, s, alpha, bw))
    mine = 8.0 * s / t_mine * factor if t_mine > 0 else math.nan
    worst, lo, hi, best = _hd_band(ctx, s, int(p.get("hash_draws", 100)))
    text = (f"at {size}: busbw ring {b_ring / 8e9:.1f} GB/s (your cost: {mine / 8e9:.1f} GB/s), "
            f"HD {b_hd / 8e9:.1f} GB/s (the collision model: {lo / 8e9:.1f} to {hi / 8e9:.1f} "
            f"GB/s over {int(p.get('hash_draws', 100))} hash outcomes, {worst / 8e9:.1f} with "
            f"every crossing flow on one spine, {best / 8e9:.1f} with none colliding)")
    if not worst * (1 - margin) <= b_hd <= best * (1 + margin):
        return fail(f"{text}: HD measured outside what any hash outcome allows")
    lucky = b_hd >= best * (1 - margin)
    if not b_ring > b_hd and not lucky:
        return fail(f"{text}: the ring should win here, where HD's far partners share spines")
    if lucky:   # about 1 hash outcome in 3000: no two of HD's crossing flows collide
        text += ("; this run's hashing put no two of HD's flows on one spine, so HD's "
                 "fewer alphas win and the order is not graded")
    if not abs(b_ring - mine) <= band * mine:
        return fail(f"{text}: your ring cost should be within {band:.0%} of the measured "
                    "busbw (the ring's flows never share a path here)")
    hd_eff = _hd_effective_bps(n, s, alpha, b_hd, factor)
    return ok(text + f"; HD behaves as if its links ran at {hd_eff / 1e9:.0f} Gb/s"
              + _student_crossover(ctx, n, alpha, bw, hd_eff))


def _hd_effective_bps(n: int, size: int, alpha: float, busbw_bps: float,
                      factor: float) -> float:
    """The uniform B that makes HD's alpha-beta cost the measured time."""
    t = 8.0 * size * factor / busbw_bps
    beta_s = t - 2 * math.log2(n) * alpha
    return 8.0 * size * factor / beta_s if beta_s > 0 else math.nan


def _student_crossover(ctx: CheckContext, n: int, alpha: float, ring_bps: float,
                       hd_bps: float) -> str:
    try:
        x = _number(ctx.function("crossover_bytes")(n, alpha, ring_bps, hd_bps))
    except StudentError:   # informative only: TODO 3 has its own check
        return ""
    return f"; your crossover at that rate: {x / 1024:.0f} KiB" if math.isfinite(x) else ""


def ecmp_band(ctx: CheckContext) -> Outcome:
    """Each permutation's measured mean flow throughput within the collision model's
    range (its worst and best hash outcomes: a run is one outcome), and your
    balls-into-bins estimate near the model's mean over ``samples`` random draws."""
    runs = ctx.runs
    assert runs is not None
    p = ctx.params
    margin, student_band = float(p.get("margin", 0.03)), float(p.get("student_band", 0.04))
    spec = runs.scenario.settings["topo"]
    fraction = ctx.function("permutation_throughput_fraction")
    seeds = [s for s in runs.scenario.settings["seeds"].split(";") if s]
    flows_tables, msg_tables = runs.table("flows.csv"), runs.table("messages.csv")
    if not flows_tables or not msg_tables:
        return fail("the permutation runs wrote no flows.csv (did the run fail?)")
    flows, msgs = flows_tables[0], msg_tables[0]
    lines, bad = [], []
    for seed in seeds:
        case = f"permutation seed={seed}"
        measured = runs.metric("mean flow throughput", case) * GBIT
        f = flows[flows.case == case]
        m = msgs[msgs.case == case]
        means, alone = model_means(f, len(m))
        ref = float(alone.mean())
        local, cross, k = leaf_pairs(spec, list(zip(m.src, m.dst, strict=True)))
        mine = (local + sum(c * _number(fraction(c, k)) for c in cross.values())) / len(m)
        model_frac = float(sum(means) / len(means)) / ref
        lo, hi = min(means), max(means)
        worst, best = permutation_bounds(spec, m)
        lines.append(f"seed {seed}: {measured / GBIT:.0f} Gb/s measured, the model's hash draws "
                     f"{lo / GBIT:.0f} to {hi / GBIT:.0f} (any outcome: {worst / GBIT:.0f} to "
                     f"{best / GBIT:.0f}; mean {model_frac:.3f} of a lone "
                     f"flow's {ref / GBIT:.0f} Gb/s); your estimate {mine:.3f} "
                     f"({local} flows within a leaf, "
                     f"{' and '.join(str(c) for c in cross.values())} across, on {k} paths)")
        if not worst * (1 - margin) <= measured <= best * (1 + margin):
            bad.append(f"seed {seed}: measured outside what any hash outcome allows")
        elif not abs(mine - model_frac) <= student_band:
            bad.append(f"seed {seed}: your balls-into-bins estimate {mine:.3f} is more than "
                       f"{student_band:g} from the model's {model_frac:.3f} (each leaf pair is "
                       "its own set of bins)")
    if bad:
        return fail("; ".join(bad) + ". " + "; ".join(lines))
    return ok("; ".join(lines))


# ----------------------------------------------------------------------------- plots

#: The fabric's alpha (the 8 B all-reduce's time over its steps, ring and HD alike,
#: from the project's model) and link rate, for the plot's alpha-beta lines.
ALPHA_S, LINK_BPS = 2.1e-6, 400e9


def _alpha_beta_lines(code: StudentCode, n: int, sizes: list[float]
                      ) -> tuple[list[list[float]], str]:
    """The ring's and HD's alpha-beta times at ``sizes``: the student's functions when
    they answer, else the closed forms."""
    try:
        lines = [[float(code.call(name, code.attr(name), n, s, ALPHA_S, LINK_BPS))
                  for s in sizes] for name in ("ring_allreduce_time_s", "hd_allreduce_time_s")]
        if all(t > 0 for line in lines for t in line):
            return lines, "yours"
    except (StudentError, TypeError, ValueError):
        pass
    return [[closed(n, s, ALPHA_S, LINK_BPS) for s in sizes] for closed in (_ring, _hd)], "closed form"


def plots(runs: dict[str, ScenarioRuns], out: Path, code: StudentCode) -> list[Path]:
    """busbw and time against size for both algorithms, measured and the project's
    model, beside the alpha-beta lines of the student's costs at the fabric's alpha."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sr = runs.get("allreduce")
    if sr is None or not any(r.valid for r in sr.runs):
        return []
    tables = sr.table("collective.csv")
    if not tables:
        return []
    table = tables[0]
    n = int(table.ranks.iloc[0])
    grid = np.logspace(np.log10(table.size_bytes.min() / 2), np.log10(table.size_bytes.max() * 4))
    lines, whose = _alpha_beta_lines(code, n, [float(x) for x in grid])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, label, line, colour in (("allreduce-ring", "ring", lines[0], "C0"),
                                      ("allreduce-hd", "halving-doubling", lines[1], "C1")):
        rows = table[table.collective == name].sort_values("size_bytes")
        factor = 2 * (n - 1) / n
        ab_t = np.array(line)
        ax1.plot(rows.size_bytes, rows.busbw_bps / 8e9, "o-", color=colour, label=f"{label} measured")
        ax1.plot(rows.size_bytes, rows.busbw_model_bps / 8e9, "s", mfc="none", color=colour,
                 label=f"{label} model (hashed ECMP)")
        ax1.plot(grid, 8 * grid / ab_t * factor / 8e9, "--", color=colour, lw=0.8,
                 label=f"{label} alpha-beta ({whose})")
        ax2.plot(rows.size_bytes, rows.time_s * 1e6, "o-", color=colour, label=f"{label} measured")
        ax2.plot(grid, ab_t * 1e6, "--", color=colour, lw=0.8, label=f"{label} alpha-beta ({whose})")
    ax1.set(xscale="log", xlabel="size (B)", ylabel="busbw (GB/s)", title="busbw against size")
    ax2.set(xscale="log", yscale="log", xlabel="size (B)", ylabel="time (us)",
            title="time against size")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"Lab 5: all-reduce on {n} ranks, alpha = {ALPHA_S * 1e6:g} us, "
                 f"B = {LINK_BPS / 1e9:.0f} Gb/s (real-fabric units)")
    fig.tight_layout()
    path = out / "lab5_busbw_vs_size.png"
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return [path]

"""Lab 5 (collectives and load balance): the reference solution passes every algorithm
check, the starter fails them naming its TODOs, typical mistakes fail with a hint, a
correct solution written differently passes; the emulation checks judge measured
numbers (the reference solution's, from a run on the 2-core VM) as intended."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from labs.catalog import find_lab
from labs.emulation import RunRecord, ScenarioRuns
from labs.grader import CheckContext, grade
from labs.student import StudentCode

LAB = find_lab(5)
FILE = LAB.student_file


def _results(workdir: Path) -> dict:
    g = grade(LAB, workdir, emulation=False)
    return {r.id: r for r in g.results if r.kind == "algorithm"}


def _mutant(tmp_path: Path, old: str, new: str) -> dict:
    text = (LAB.solution / FILE).read_text()
    assert text.count(old) == 1, old
    (tmp_path / FILE).write_text(text.replace(old, new))
    return _results(tmp_path)


def test_solution_passes_every_algorithm_check():
    results = _results(LAB.solution)
    assert results and all(r.outcome.status == "passed" for r in results.values()), \
        {k: r.outcome for k, r in results.items()}


def test_starter_fails_naming_the_todos():
    results = _results(LAB.starter)
    assert all(r.outcome.status == "failed" for r in results.values())
    for check, todo in (("ring-cost", "TODO 1"), ("hd-cost", "TODO 2"), ("crossover", "TODO 3"),
                        ("collisions", "TODO 4a"), ("permutation-throughput", "TODO 4b")):
        assert results[check].feedback().startswith(todo), results[check].feedback()


@pytest.mark.parametrize("check,old,new,hint", [
    # bytes over bit/s: the bandwidth term 8 times too small
    ("ring-cost", "8.0 * size_bytes / n_ranks / link_bps", "size_bytes / n_ranks / link_bps",
     "a byte is 8 bits"),
    # only the reduce-scatter's n - 1 steps
    ("ring-cost", "steps = 2 * (n_ranks - 1)", "steps = n_ranks - 1", "all-gather"),
    # alpha taken for microseconds
    ("ring-cost", "return steps * (alpha_s +", "return steps * (alpha_s * 1e-6 +", "seconds"),
    # S sent at every step of halving-doubling
    ("hd-cost", "8.0 * size_bytes / 2 ** k / link_bps", "8.0 * size_bytes / link_bps", "halve"),
    # the all-gather forgotten
    ("hd-cost", "return 2 * reduce_scatter_s", "return reduce_scatter_s", "mirrors"),
    # the flow counted as colliding with itself
    ("collisions", "** (n_flows - 1)", "** n_flows", "itself"),
    # a colliding flow counted as getting nothing
    ("permutation-throughput", "return busy / n_flows",
     "return (1.0 - 1.0 / n_paths) ** (n_flows - 1)", "share"),
    # the crossover in bits
    ("crossover", "extra_s_per_byte = 2 * (n_ranks - 1) / n_ranks * 8.0 *",
     "extra_s_per_byte = 2 * (n_ranks - 1) / n_ranks *", "8 bits"),
])
def test_typical_mistakes_fail_with_a_hint(tmp_path, check, old, new, hint):
    results = _mutant(tmp_path, old, new)
    r = results[check]
    assert r.outcome.status == "failed", r.outcome
    assert hint in r.outcome.feedback, r.outcome.feedback


VARIANT = '''
import math
from math import comb, log2


def ring_allreduce_time_s(n_ranks, size_bytes, alpha_s, link_bps):
    per_step_bits = size_bytes * 8 / n_ranks
    t = 0.0
    for _ in range(n_ranks - 1):            # reduce-scatter
        t += alpha_s + per_step_bits / link_bps
    return 2 * t                             # the all-gather costs as much


def hd_allreduce_time_s(n_ranks, size_bytes, alpha_s, link_bps):
    return 2 * log2(n_ranks) * alpha_s + 2 * (n_ranks - 1) / n_ranks * size_bytes * 8 / link_bps


def crossover_bytes(n_ranks, alpha_s, ring_bps, hd_bps):
    if not hd_bps < ring_bps:
        return float("inf")
    gap = lambda s: (ring_allreduce_time_s(n_ranks, s, alpha_s, ring_bps)
                     - hd_allreduce_time_s(n_ranks, s, alpha_s, hd_bps))
    lo, hi = 0.0, 1.0
    while gap(hi) > 0:
        hi *= 2
    for _ in range(200):                     # bisection: HD is slower above the root
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


def collision_fraction(n_flows, n_paths):
    p_alone = ((n_paths - 1) / n_paths) ** (n_flows - 1)
    return 1 - p_alone


def permutation_throughput_fraction(n_flows, n_paths):
    # a flow whose path carries i others gets 1 / (i + 1) of it
    q = 1 / n_paths
    return sum(comb(n_flows - 1, i) * q ** i * (1 - q) ** (n_flows - 1 - i) / (i + 1)
               for i in range(n_flows))
'''


def test_a_correct_solution_written_differently_passes(tmp_path):
    (tmp_path / FILE).write_text(VARIANT)
    results = _results(tmp_path)
    assert all(r.outcome.status == "passed" for r in results.values()), \
        {k: r.outcome.feedback for k, r in results.items() if r.outcome.status != "passed"}


def test_the_closed_forms_agree_with_a_monte_carlo():
    checks = LAB.checks_module()
    for m, k in ((2, 4), (3, 4), (8, 8)):
        shared, thr = checks._balls_monte_carlo(m, k, 40000, seed=1)
        assert shared == pytest.approx(1 - (1 - 1 / k) ** (m - 1), abs=0.01)
        assert thr == pytest.approx(k * (1 - (1 - 1 / k) ** m) / m, abs=0.01)


# ----------------------------------------------------------------------------- emulation

TOPO = "leafspine,2,4,4,fabric_rate=400G"
#: One run of `emu run collective` with the lab's settings (VALID), as metrics.csv has it.
MEASURED = {("ring", "4KiB"): (29.57, 0.2424), ("hd", "4KiB"): (13.46, 0.5327),
            ("ring", "4MiB"): (180.5, 40.66), ("hd", "4MiB"): (259.3, 28.31)}


def _collective_runs(measured: dict) -> ScenarioRuns:
    rows = []
    for (alg, size), (time_us, busbw) in measured.items():
        case = f"{TOPO} allreduce-{alg} {size}"
        rows += [{"case": case, "metric": "time", "measured": time_us, "predicted": math.nan},
                 {"case": case, "metric": "busbw", "measured": busbw, "predicted": math.nan}]
    sr = ScenarioRuns(LAB.scenario("allreduce"))
    sr.runs.append(RunRecord(None, 0, valid=True, metrics=pd.DataFrame(rows)))
    return sr


def _emu(check_id: str, runs: ScenarioRuns, workdir: Path = LAB.solution):
    spec = next(c for c in LAB.checks if c.id == check_id)
    ctx = CheckContext(LAB, spec, StudentCode(workdir / FILE), runs)
    return getattr(LAB.checks_module(), spec.function)(ctx)


def test_emulation_checks_pass_the_measured_run():
    runs = _collective_runs(MEASURED)
    for check in ("latency-regime", "bandwidth-regime"):
        outcome = _emu(check, runs)
        assert outcome.status == "passed", outcome.feedback


def test_emulation_checks_fail_a_wrong_ordering_or_a_wrong_model(tmp_path):
    swapped = dict(MEASURED)
    swapped["ring", "4KiB"], swapped["hd", "4KiB"] = MEASURED["hd", "4KiB"], MEASURED["ring", "4KiB"]
    assert _emu("latency-regime", _collective_runs(swapped)).status == "failed"
    hd_wins = dict(MEASURED)
    hd_wins["hd", "4MiB"] = (150.0, 48.9)
    assert _emu("bandwidth-regime", _collective_runs(hd_wins)).status == "failed"
    # the ring's bandwidth term in bytes: its busbw far from the measured one
    text = (LAB.solution / FILE).read_text().replace(
        "8.0 * size_bytes / n_ranks / link_bps", "size_bytes / n_ranks / link_bps")
    (tmp_path / FILE).write_text(text)
    outcome = _emu("bandwidth-regime", _collective_runs(MEASURED), tmp_path)
    assert outcome.status == "failed" and "your ring cost" in outcome.feedback


def test_a_lucky_hash_outcome_is_not_held_against_the_student():
    """One hash outcome in about 3000 puts no two of HD's crossing flows on one spine:
    HD then beats the ring at 4 MiB by its fewer alphas, and the order is not graded."""
    lucky = dict(MEASURED)
    lucky["hd", "4MiB"] = (163.0, 45.0)
    outcome = _emu("bandwidth-regime", _collective_runs(lucky))
    assert outcome.status == "passed" and "not graded" in outcome.feedback, outcome.feedback

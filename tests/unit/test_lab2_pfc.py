"""Lab 2's algorithm checks against typical mistakes and a correct answer written
differently from the reference, and the thresholds the emulation runs would get
(no root, no fabric)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.catalog import find_lab
from labs.grader import grade
from labs.student import StudentCode, StudentError

LAB = find_lab(2)
SOLUTION = (LAB.solution / LAB.student_file).read_text()
ALGORITHM = [c.id for c in LAB.checks if c.kind == "algorithm"]


def _graded(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / LAB.student_file).write_text(text)
    g = grade(LAB, tmp_path, emulation=False)
    return {r.id: r.outcome.status for r in g.results if r.kind == "algorithm"}


def _mistake(old: str, new: str) -> str:
    assert old in SOLUTION, old
    return SOLUTION.replace(old, new)


def test_the_solution_passes_every_algorithm_check():
    g = grade(LAB, LAB.solution, emulation=False)
    algo = {r.id: (r.outcome.status, r.outcome.feedback) for r in g.results
            if r.kind == "algorithm"}
    assert set(algo) == set(ALGORITHM)
    assert all(status == "passed" for status, _ in algo.values()), algo
    assert all(r.outcome.status == "ungraded" for r in g.results if r.kind == "emulation")


def test_the_untouched_starter_fails_naming_its_todos():
    g = grade(LAB, LAB.starter, emulation=False)
    failed = {r.id: r.feedback() for r in g.results if r.outcome.status == "failed"}
    assert set(ALGORITHM) <= set(failed)
    assert all("TODO" in text for text in failed.values()), failed
    assert failed["headroom"].startswith("TODO 1") and "= 71,889.0 B" in failed["headroom"]
    assert failed["xoff"].startswith("TODO 2") and failed["xon"].startswith("TODO 3")
    assert failed["settings"].startswith("TODO 4") and "108,760 B" in failed["settings"]


MISTAKES = {
    # the PAUSE's round trip counted one way
    "one-way delay": (_mistake("(reaction_s + 2 * link_delay_s)", "(reaction_s + link_delay_s)"),
                      "headroom", "2 x link delay"),
    # bits per second used as bytes per second
    "bits for bytes": (_mistake("rate_bps / 8 *", "rate_bps *"), "headroom", "divide"),
    # the reaction time taken as microseconds
    "us for s": (_mistake("(reaction_s + 2 * link_delay_s)",
                          "(reaction_s * 1e6 + 2 * link_delay_s)"), "headroom", "seconds"),
    # the frame in flight forgotten
    "no frame": (_mistake(" + frame_bytes\n", "\n"), "headroom", "frame"),
    # Xoff rounded up: a byte above what is safe
    "round up": (_mistake("math.floor(buffer_bytes - headroom)", "math.ceil(buffer_bytes - headroom)"),
                 "xoff", "round down"),
    # a buffer too small for its headroom gives a negative Xoff instead of an error
    "no refusal": (_mistake("    if xoff <= 0:\n", "    if False:\n"), "xoff", "ValueError"),
    # Xon not clamped at 0
    "no clamp": (_mistake("max(0, xoff - gap_bytes)", "xoff - gap_bytes"), "xon", "clamp"),
    # the wall-clock budget used as the real reaction time (time dilation forgotten)
    "no dilation": (_mistake("reaction_s = budget_wall_s / scale", "reaction_s = budget_wall_s"),
                    "settings", "budget / S"),
    # the loosest port's Xoff for every port
    "loosest port": (_mistake("xoff = min(", "xoff = max("), "settings", "tightest"),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_typical_mistakes_fail(name, tmp_path):
    text, check, words = MISTAKES[name]
    (tmp_path / LAB.student_file).write_text(text)
    g = grade(LAB, tmp_path, emulation=False)
    result = next(r for r in g.results if r.id == check)
    assert result.outcome.status == "failed", result.outcome.feedback
    assert words in result.outcome.feedback, result.outcome.feedback


def test_a_hardcoded_xoff_fails_the_hidden_check(tmp_path):
    text = _mistake('return {"xoff": str(xoff)', 'return {"xoff": "108760"')
    statuses = _graded(tmp_path, text)
    assert statuses["settings"] == "passed" and statuses["settings-elsewhere"] == "failed"


DIFFERENT = '''
"""PFC thresholds, written another way: bytes per second first, per-port dicts, ints."""

BYTES_PER_BIT = 0.125
MAX_FRAME = 9014


def _port_headroom(rate_bps, delay_s, reaction_s, frame):
    bytes_per_s = rate_bps * BYTES_PER_BIT
    return bytes_per_s * reaction_s + bytes_per_s * delay_s * 2 + frame


def headroom_bytes(feeders, reaction_s, frame_bytes=MAX_FRAME):
    return sum(_port_headroom(r, d, reaction_s, frame_bytes) for r, d in feeders)


def xoff_bytes(buffer_bytes, headroom):
    spare = buffer_bytes - headroom
    if not spare >= 1:
        raise ValueError("no room for Xoff")
    return int(spare)


def xon_bytes(xoff, gap_bytes=2 * MAX_FRAME):
    if not gap_bytes > 0:
        raise ValueError("gap")
    return xoff - gap_bytes if xoff > gap_bytes else 0


def pfc_settings(egress_feeders, buffer_bytes, scale, budget_wall_s):
    reaction_real_s = budget_wall_s * (1.0 / scale)
    per_port = {name: xoff_bytes(buffer_bytes, headroom_bytes(feed, reaction_real_s))
                for name, feed in egress_feeders.items()}
    tightest = sorted(per_port.values())[0]
    return {"pfc_budget": str(budget_wall_s), "xoff": tightest,
            "xon": xon_bytes(tightest, 3 * MAX_FRAME)}
'''


def test_a_correct_solution_written_differently_passes(tmp_path):
    statuses = _graded(tmp_path, DIFFERENT)
    assert all(s == "passed" for s in statuses.values()), statuses


def test_the_scenario_runs_with_the_students_thresholds(tmp_path):
    """What the emulation gets: the solution's settings; refused thresholds are the
    student's error, in one line, before a fabric is built."""
    checks = LAB.checks_module()
    got = checks.scenario_settings(StudentCode(LAB.solution / LAB.student_file), "incast", None)
    assert got == {"xoff": "108760", "xon": "90732", "pfc_budget": "0.05"}
    (tmp_path / LAB.student_file).write_text(MISTAKES["one-way delay"][0])
    with pytest.raises(StudentError, match=r"above buffer - headroom = 108,760 B at port s1->"):
        checks.scenario_settings(StudentCode(tmp_path / LAB.student_file), "incast", None)


def test_the_headroom_the_checks_expect_is_the_emulators():
    """docs/pfc.md's figures for the scenario's fabric (S = 10000, 50 ms budget)."""
    from labs.lab2_pfc import pfc_reference as ref

    fabric = ref.scenario_fabric("incast")
    ports = ref.egress_feeders(fabric["topo"])
    room = ref.ceilings(ports, fabric["buffer_bytes"], fabric["budget_wall_s"] / fabric["scale"])
    assert room["l3->h9"] == 172_746 and room["s1->l3"] == 108_760 and room["l1->s1"] == 308_621

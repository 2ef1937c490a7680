"""Lab 6's algorithm checks against typical mistakes and a correct model written
differently from the reference (no root, no fabric)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.catalog import find_lab
from labs.grader import grade

LAB = find_lab(6)
SOLUTION = (LAB.solution / LAB.student_file).read_text()


def _graded(tmp_path: Path, text: str) -> dict[str, tuple[str, str]]:
    (tmp_path / LAB.student_file).write_text(text)
    g = grade(LAB, tmp_path, emulation=False)
    return {r.id: (r.outcome.status, r.feedback()) for r in g.results if r.kind == "algorithm"}


def _mistake(old: str, new: str) -> str:
    assert old in SOLUTION, old
    return SOLUTION.replace(old, new)


def test_solution_passes_every_algorithm_check(tmp_path):
    statuses = _graded(tmp_path, SOLUTION)
    assert {s for s, _ in statuses.values()} == {"passed"}, statuses


def test_starter_fails_naming_the_todos(tmp_path):
    results = _graded(tmp_path, (LAB.starter / LAB.student_file).read_text())
    for check, (status, feedback) in results.items():
        assert status == "failed", (check, feedback)
        assert "TODO" in feedback, (check, feedback)


MISTAKES = {
    # every ring step priced at the slowest neighbour, as if steps were barriers
    "ring barrier": (_mistake("sum(alphas) / n", "max(alphas)"), "latency-term", "barrier"),
    # the NIC's per-message overhead forgotten
    "no overhead": (_mistake('return fabric["nic_overhead_s"] + path_latency_s(',
                             "return 0.0 + path_latency_s("), "latency-term", "overhead"),
    # bytes never become bits
    "bytes as bits": (_mistake('return 8.0 * wire_bytes(payload_bytes, fabric) / fabric',
                               'return wire_bytes(payload_bytes, fabric) / fabric'),
                      "bandwidth-term", "8 bits"),
    # the whole buffer at every ring step
    "S per step": (_mistake("    chunk = size_bytes / n\n", "    chunk = size_bytes\n"),
                   "bandwidth-term", "S/n"),
    # halving-doubling without its doubling half
    "no doubling": (_mistake("    return 2 * total", "    return total"), "bandwidth-term",
                    "half the traffic"),
    # the answer in microseconds
    "microseconds": (_mistake("return ring_allreduce_s(n_ranks, size_bytes, fabric)",
                              "return ring_allreduce_s(n_ranks, size_bytes, fabric) * 1e6"),
                     "model-grid", "yours"),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_typical_mistakes_fail(name, tmp_path):
    text, check, hint = MISTAKES[name]
    results = _graded(tmp_path, text)
    status, feedback = results[check]
    assert status == "failed", results
    assert hint in feedback, feedback


DIFFERENT = '''
"""A correct model written another way: a wire factor, the ring's critical path
walked exactly (the slowest run of 2(n-1) consecutive links), the bottleneck's
serialization left to the bandwidth term, halving-doubling as a list of levels."""

import math


def _latency(path, nbytes):
    hops = [8 * nbytes / r for r in path["rates_bps"]]
    return sum(hops) - max(hops) + sum(path["propagation_s"]) + sum(path["switch_latency_s"])


def predict_allreduce_s(algorithm, n_ranks, size_bytes, fabric):
    frame = fabric["mtu_payload_bytes"] + fabric["frame_overhead_bytes"]
    factor = frame / fabric["mtu_payload_bytes"]
    rate = fabric["nic_rate_bps"]
    alpha = lambda i, j: fabric["nic_overhead_s"] + _latency(fabric["paths"][(i, j)], frame)
    if algorithm == "ring":
        steps = 2 * (n_ranks - 1)
        links = [alpha(i, (i + 1) % n_ranks) for i in range(n_ranks)]
        walk = max(sum(links[(start - k) % n_ranks] for k in range(steps))
                   for start in range(n_ranks))
        return walk + steps * 8 * factor * size_bytes / n_ranks / rate
    levels = int(math.log2(n_ranks))
    t = 0.0
    for k in range(levels):
        d = n_ranks >> (k + 1)
        share = size_bytes / 2 ** (k + 1)
        t += max(alpha(i, i ^ d) for i in range(n_ranks)) + 8 * factor * share / rate
    return t * 2
'''


def test_a_correct_model_written_differently_passes(tmp_path):
    statuses = _graded(tmp_path, DIFFERENT)
    assert {s for s, _ in statuses.values()} == {"passed"}, statuses

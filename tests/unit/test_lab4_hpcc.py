"""Lab 4 (HPCC): the algorithm checks pass the reference solution and a correct solution
written differently, and fail the starter and typical mistakes (no fabric, no root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.catalog import find_lab
from labs.grader import grade
from labs.verdict import FAILED, PASSED

LAB = find_lab(4)
SOLUTION = (LAB.solution / LAB.student_file).read_text()


def _algorithm_results(workdir: Path) -> dict[str, tuple[str, str]]:
    g = grade(LAB, workdir, emulation=False)
    return {r.id: (r.outcome.status, r.feedback()) for r in g.results if r.kind == "algorithm"}


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / LAB.student_file).write_text(text)
    return tmp_path


def test_solution_passes_every_algorithm_check():
    results = _algorithm_results(LAB.solution)
    assert results and all(status == PASSED for status, _ in results.values()), results


def test_starter_fails_and_names_the_todos():
    results = _algorithm_results(LAB.starter)
    assert all(status == FAILED for status, _ in results.values()), results
    for check, todo in [("utilisation", "TODO 1"), ("ewma", "TODO 2"), ("decrease", "TODO 3"),
                        ("once-per-rtt", "TODO 3"), ("clamp", "TODO 3"), ("rate", "TODO 4")]:
        assert results[check][1].startswith(todo), results[check]


# (what the mistake is, the text replaced in the solution, its replacement, the check that
# must fail, a word of the hint it must give)
MISTAKES = [
    ("txRate in bytes/s", "(new.tx_bytes - old.tx_bytes) * 8 / tau_s",
     "(new.tx_bytes - old.tx_bytes) / tau_s", "utilisation", "times 8"),
    ("queue in bytes against B T in bits", "new.qlen_bytes * 8 / (new.rate_bps",
     "new.qlen_bytes / (new.rate_bps", "utilisation", "qlen * 8"),
    ("ts converted to microseconds", "tau_s = new.ts_s - old.ts_s",
     "tau_s = (new.ts_s - old.ts_s) * 1e6", "utilisation", "microseconds"),
    ("sum over the hops", "u, tau_s = max(samples)",
     "u, tau_s = sum(s[0] for s in samples), samples[0][1]", "largest-hop", "sum"),
    ("the NIC's rate for every hop",
     "(new.rate_bps * self.base_rtt_s)\n        return queue_term + tx_rate_bps / new.rate_bps",
     "(self.line_rate_bps * self.base_rtt_s)\n        return queue_term + tx_rate_bps / "
     "self.line_rate_bps", "largest-hop", "own port rate"),
    ("tau not capped at T", "min(tau_s, self.base_rtt_s) / self.base_rtt_s",
     "tau_s / self.base_rtt_s", "ewma", "capped"),
    ("no EWMA", "(1 - weight) * self.utilisation + weight * u", "u", "ewma", "whole"),
    ("U / eta inverted", "self.reference_window * self.eta / u",
     "self.reference_window * u / self.eta", "decrease", "must shrink"),
    ("W_c updated on every ACK", "        if update_reference:\n",
     "        if True:\n", "once-per-rtt", "not on every ACK"),
    ("forgotten clamp", "self.window = min(self.max_window_bytes, max(self.min_window_bytes, w))",
     "self.window = w", "clamp", "min_window_bytes"),
    ("no multiplicative increase", "if u >= self.eta or self.inc_stage >= self.max_stage:",
     "if u >= self.eta:", "increase", "maxStage"),
    ("rate in bytes/s", "return self.window * 8 / self.base_rtt_s ",
     "return self.window / self.base_rtt_s ", "rate", "times 8"),
]


@pytest.mark.parametrize("what, old, new, check, hint", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_typical_mistake_fails(tmp_path, what, old, new, check, hint):
    assert SOLUTION.count(old) == 1, f"the solution no longer has {old!r}"
    results = _algorithm_results(_write(tmp_path, SOLUTION.replace(old, new)))
    status, feedback = results[check]
    assert status == FAILED, (what, results[check])
    assert hint in feedback, feedback
    # The mistake is reported where it is, not everywhere.
    assert sum(s == FAILED for s, _ in results.values()) < len(results), results


#: Correct, written differently: no helper methods, the smaller of the two queues (the
#: paper's Algorithm 1), a reference update on a strict "sent after", the stage counted
#: down, the rate an attribute set on each ACK.
VARIANT = '''
import math
from traffic.cc import CongestionControl


class LabHpcc(CongestionControl):
    needs_int_records = True
    next_timer_s = math.inf

    def __init__(self, line_rate_bps, start_s=0.0, *, base_rtt_s=10e-6, eta=0.95, max_stage=5,
                 w_ai_bytes=None, expected_flows=100, mtu_bytes=4096, min_window_bytes=None):
        self.T = base_rtt_s
        self.eta = eta
        self.bdp = line_rate_bps * base_rtt_s / 8
        self.floor = min(self.bdp, min_window_bytes or mtu_bytes)
        self.wai = w_ai_bytes if w_ai_bytes is not None else self.bdp * (1 - eta) / expected_flows
        self.max_stage = max_stage
        self.stages_left = max_stage
        self.window_bytes = self.wc = self.bdp
        self.rate_bps = line_rate_bps
        self.U = 1.0
        self.mark = start_s
        self.prev = None

    def on_ack(self, bytes_acked, rtt_s, ecn_echo, int_records, now_s):
        recs = list(int_records)
        prev, self.prev = self.prev, recs
        if not recs or prev is None or len(prev) != len(recs):
            return
        best = None
        for a, b in zip(prev, recs):
            dt = b.ts_s - a.ts_s
            if dt > 0:
                bits_per_s = 8.0 * (b.tx_bytes - a.tx_bytes) / dt
                uj = (8.0 * min(a.qlen_bytes, b.qlen_bytes) / self.T + bits_per_s) / b.rate_bps
                if best is None or uj > best[0]:
                    best = (uj, dt)
        if best is None:
            return
        frac = min(1.0, best[1] / self.T)
        self.U += frac * (best[0] - self.U)
        new_round = now_s - rtt_s > self.mark
        if self.U >= self.eta or self.stages_left <= 0:
            w = (self.wc / (self.U / self.eta) if self.U > 0 else self.bdp) + self.wai
            left = self.max_stage
        else:
            w = self.wc + self.wai
            left = self.stages_left - 1
        w = max(self.floor, min(self.bdp, w))
        if new_round:
            self.wc, self.stages_left, self.mark = w, left, now_s
        self.window_bytes = w
        self.rate_bps = 8.0 * w / self.T

    def trace(self):
        return self.rate_bps, 8.0 * self.wc / self.T, self.U
'''


def test_a_correct_solution_written_differently_passes(tmp_path):
    results = _algorithm_results(_write(tmp_path, VARIANT))
    assert all(status == PASSED for status, _ in results.values()), results


#: Readings the paper allows, as small edits of the solution: they must pass too.
EQUIVALENT = [
    ("the smaller queue of the two records (Algorithm 1)", "new.qlen_bytes * 8",
     "min(new.qlen_bytes, old.qlen_bytes) * 8"),
    ("a round trip timed on the base RTT", "update = now_s - rtt_s >= self.last_update_s",
     "update = now_s - self.last_update_s >= self.base_rtt_s"),
    ("U above eta strictly", "if u >= self.eta or", "if u > self.eta or"),
]


@pytest.mark.parametrize("what, old, new", EQUIVALENT, ids=[e[0] for e in EQUIVALENT])
def test_an_allowed_reading_passes(tmp_path, what, old, new):
    assert SOLUTION.count(old) == 1, f"the solution no longer has {old!r}"
    results = _algorithm_results(_write(tmp_path, SOLUTION.replace(old, new)))
    assert all(status == PASSED for status, _ in results.values()), (what, results)

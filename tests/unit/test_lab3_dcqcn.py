"""Lab 3 (DCQCN): the reference solution passes every algorithm check, the starter and
typical mistakes fail them with feedback naming the TODO, and a correct solution
written differently (other names, free-running timers, alpha updated before the cut,
a constant hyper step) passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.catalog import Lab, find_lab
from labs.grader import grade
from labs.verdict import FAILED, PASSED

STUDENT_FILE = "dcqcn_lab.py"


@pytest.fixture(scope="module")
def lab() -> Lab:
    # The lab's own folder: the other labs' folders play no part here.
    return find_lab(3)


def _algorithm_results(lab: Lab, workdir: Path) -> dict[str, tuple[str, str]]:
    g = grade(lab, workdir, emulation=False)
    return {r.id: (r.outcome.status, r.feedback(show_hidden=True))
            for r in g.results if r.kind == "algorithm"}


def _mutant(lab: Lab, tmp_path: Path, old: str, new: str) -> Path:
    """The solution with one small text replacement, in its own folder."""
    text = (lab.solution / STUDENT_FILE).read_text()
    assert text.count(old) == 1, f"{old!r} must occur once in the solution"
    (tmp_path / STUDENT_FILE).write_text(text.replace(old, new))
    return tmp_path


def test_solution_passes_every_algorithm_check(lab: Lab) -> None:
    results = _algorithm_results(lab, lab.solution)
    assert results, "the lab declares algorithm checks"
    assert all(status == PASSED for status, _ in results.values()), results


def test_starter_fails_and_names_the_todos(lab: Lab) -> None:
    results = _algorithm_results(lab, lab.starter)
    failed = {cid: text for cid, (status, text) in results.items() if status == FAILED}
    assert {"cut", "alpha", "fast-recovery", "additive", "hyper", "line-rate"} <= set(failed)
    assert failed["cut"].startswith("TODO 1") and "no cut" in failed["cut"]
    assert failed["alpha"].startswith("TODO 2")
    assert failed["fast-recovery"].startswith("TODO 3")
    assert failed["additive"].startswith("TODO 4") and failed["hyper"].startswith("TODO 4")


@pytest.mark.parametrize(("old", "new", "check", "words"), [
    # A sign error in the cut.
    ("self.rate_bps * (1 - self.alpha / 2)", "self.rate_bps * (1 + self.alpha / 2)",
     "cut", "R_C (1 - alpha / 2)"),
    # The forgotten floor: the rate falls below 1 Mb/s under a stream of CNPs.
    ("max(self.min_rate_bps, self.rate_bps * (1 - self.alpha / 2))",
     "self.rate_bps * (1 - self.alpha / 2)", "min-rate", "never go below"),
    # The forgotten clamp at the line rate in additive increase.
    ("min(self.line_rate_bps, self.target_rate_bps + self.rate_ai_bps)",
     "self.target_rate_bps + self.rate_ai_bps", "line-rate", "above the line rate"),
    # The alpha timer in microseconds instead of seconds: alpha never decays.
    ("alpha_timer_s: float = 55e-6", "alpha_timer_s: float = 55", "alpha", "in seconds"),
    # The rate timer in microseconds: no increase event within the check.
    ("rate_timer_s: float = 55e-6", "rate_timer_s: float = 55", "fast-recovery", "seconds"),
    # The target forgotten in the cut: R_T stays at its old value.
    ("self.target_rate_bps = self.rate_bps\n", "\n", "cut", "R_T <- R_C"),
    # alpha on a CNP without the (1 - g) weight.
    ("self.alpha = (1 - self.g) * self.alpha + self.g", "self.alpha = min(1.0, self.alpha + self.g)",
     "alpha", "weighted by 1 - g"),
    # R_C averaged with the old target in additive increase.
    ("self.target_rate_bps = min(self.line_rate_bps, self.target_rate_bps + self.rate_ai_bps)\n"
     "            self.rate_bps = (self.target_rate_bps + self.rate_bps) / 2",
     "self.rate_bps = (self.target_rate_bps + self.rate_bps) / 2\n"
     "            self.target_rate_bps = min(self.line_rate_bps, self.target_rate_bps + self.rate_ai_bps)",
     "additive", "add R_AI to R_T first"),
    # Hyper increase already when one of T and BC reached F.
    ("elif min(t, bc) < f:", "elif False:", "additive", "hyper"),
    # Fast recovery jumping to the target.
    ("if max(t, bc) < f:                     # fast recovery (TODO 3)\n"
     "            self.rate_bps = (self.target_rate_bps + self.rate_bps) / 2",
     "if max(t, bc) < f:\n            self.rate_bps = self.target_rate_bps",
     "fast-recovery", "jumped to R_T"),
])
def test_typical_mistakes_fail(lab: Lab, tmp_path: Path, old: str, new: str, check: str,
                               words: str) -> None:
    results = _algorithm_results(lab, _mutant(lab, tmp_path, old, new))
    status, text = results[check]
    assert status == FAILED, (check, text)
    assert words in text, text
    assert text.startswith(lab.checks[[c.id for c in lab.checks].index(check)].todo)


def test_cut_on_marked_acks_fails(lab: Lab, tmp_path: Path) -> None:
    """DCTCP's signal is not DCQCN's: cutting on ECN-echo ACKs fails the reactions check."""
    workdir = _mutant(lab, tmp_path, "    def on_timer(self, now_s: float) -> None:\n",
                      "    def on_ack(self, bytes_acked, rtt_s, ecn_echo, int_records, now_s):\n"
                      "        if ecn_echo:\n"
                      "            self.on_cnp(now_s)\n\n"
                      "    def on_timer(self, now_s: float) -> None:\n")
    status, text = _algorithm_results(lab, workdir)["reactions"]
    assert status == FAILED and "CNPs only" in text, text


VARIANT = '''
"""DCQCN written another way: free-running timers kept in a dict, alpha updated before
the cut (the cut then uses the new alpha), a constant R_HAI hyper step (the NIC's),
the byte counter with divmod."""
import math

from traffic.cc import CongestionControl


class LabDcqcn(CongestionControl):
    window_bytes = None

    def __init__(self, line_rate_bps, start_s=0.0, *, g=1 / 256, alpha_timer_s=55e-6,
                 rate_timer_s=55e-6, byte_counter_bytes=10 * 1024 * 1024,
                 fast_recovery_stages=5, rate_ai_bps=None, rate_hai_bps=None,
                 min_rate_bps=1e6):
        self.cap = float(line_rate_bps)
        self.rc = self.rt = self.cap
        self.a = 1.0
        self.gain = g
        self.period = {"alpha": alpha_timer_s, "rate": rate_timer_s}
        self.due = {name: start_s + p for name, p in self.period.items()}
        self.chunk = byte_counter_bytes
        self.f = fast_recovery_stages
        self.ai = rate_ai_bps if rate_ai_bps is not None else self.cap * 1e-3
        self.hai = rate_hai_bps if rate_hai_bps is not None else self.cap * 5e-3
        self.floor = min_rate_bps
        self.count = {"timer": 0, "bytes": 0}
        self.pending = 0
        self.cnps_received = 0

    @property
    def rate_bps(self):
        return self.rc

    @property
    def next_timer_s(self):
        return min(self.due.values())

    def on_cnp(self, now_s):
        self.cnps_received += 1
        self.a = self.a * (1 - self.gain) + self.gain
        self.rt, self.rc = self.rc, max(self.floor, self.rc - self.rc * self.a * 0.5)
        self.count = {"timer": 0, "bytes": 0}
        self.pending = 0

    def on_timer(self, now_s):
        while self.due["alpha"] <= now_s:
            self.due["alpha"] += self.period["alpha"]
            self.a -= self.gain * self.a
        while self.due["rate"] <= now_s:
            self.due["rate"] += self.period["rate"]
            self._bump("timer")

    def on_send(self, n_bytes, now_s):
        events, self.pending = divmod(self.pending + n_bytes, self.chunk)
        for _ in range(events):
            self._bump("bytes")

    def _bump(self, which):
        low, high = sorted(self.count.values())    # the counts before this event
        self.count[which] += 1
        if low >= self.f:
            self.rt = min(self.cap, self.rt + self.hai)
        elif high >= self.f:
            self.rt = min(self.cap, self.rt + self.ai)
        self.rc = 0.5 * (self.rc + self.rt)

    def trace(self):
        return self.rc, self.rt, self.a
'''


def test_a_correct_variant_passes(lab: Lab, tmp_path: Path) -> None:
    (tmp_path / STUDENT_FILE).write_text(VARIANT)
    results = _algorithm_results(lab, tmp_path)
    assert all(status == PASSED for status, _ in results.values()), results

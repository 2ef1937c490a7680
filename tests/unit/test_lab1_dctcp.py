"""Lab 1's algorithm checks against typical mistakes and a correct answer written
differently from the reference (no root, no fabric)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.catalog import find_lab
from labs.grader import grade

LAB = find_lab(1)
SOLUTION = (LAB.solution / LAB.student_file).read_text()


def _graded(tmp_path: Path, text: str) -> dict[str, str]:
    (tmp_path / LAB.student_file).write_text(text)
    g = grade(LAB, tmp_path, emulation=False)
    return {r.id: r.outcome.status for r in g.results if r.kind == "algorithm"}


def _mistake(old: str, new: str) -> str:
    assert old in SOLUTION, old
    return SOLUTION.replace(old, new)


MISTAKES = {
    # alpha updated on every ACK instead of once per window of data
    "alpha per ACK": (_mistake("        if sent_s >= self.window_start_s:",
                               "        if True:"), "alpha"),
    # F added without its gain g: alpha leaves [0, 1]
    "F without g": (_mistake("self.g * min(1.0, fraction)", "min(1.0, fraction)"), "alpha"),
    # the RTT taken as microseconds: windows never end
    "us for s": (_mistake("sent_s = now_s - rtt_s", "sent_s = now_s - rtt_s * 1e6"), "alpha"),
    # a sign error in the cut
    "cut sign": (_mistake("(1 - self.alpha / 2)", "(1 + self.alpha / 2)"), "cut"),
    # the TCP halving instead of DCTCP's proportional cut
    "halving": (_mistake("self.window_bytes * (1 - self.alpha / 2)",
                         "self.window_bytes / 2"), "cut"),
    # a cut on every marked ACK instead of once per round trip
    "cut every ACK": (_mistake("            if self.cut_at_s is None:\n                "
                               "self.window_bytes = max(",
                               "            if True:\n                self.window_bytes = max("),
                      "once-per-rtt"),
    # the floor forgotten
    "no clamp": (_mistake("max(self.min_window_bytes,\n"
                          "                                        self.window_bytes * (1 - self.alpha / 2))",
                          "self.window_bytes * (1 - self.alpha / 2)"), "min-window"),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_typical_mistakes_fail(name, tmp_path):
    text, check = MISTAKES[name]
    statuses = _graded(tmp_path, text)
    assert statuses[check] == "failed", statuses


DIFFERENT = '''
import math
from traffic.cc import CongestionControl

G_DEFAULT = 0.0625


class LabDctcp(CongestionControl):
    """A correct DCTCP written another way: byte counters in a dict, a time-based
    once-per-RTT rule, alpha kept under another name."""

    def __init__(self, line_rate_bps, start_s=0.0, *, g=G_DEFAULT, mtu_bytes=4096,
                 base_rtt_s=10e-6):
        self.rate_bps = line_rate_bps
        self.gain = g
        self.mss = mtu_bytes
        self.est = 1.0
        self.window_bytes = max(mtu_bytes, line_rate_bps * base_rtt_s / 8)
        self.rtt = base_rtt_s
        self.counts = {"acked": 0, "marked": 0}
        self.boundary = start_s
        self.last_cut = -math.inf

    def on_ack(self, bytes_acked, rtt_s, ecn_echo, int_records, now_s):
        self.rtt = rtt_s
        self.counts["acked"] += bytes_acked
        if ecn_echo:
            self.counts["marked"] += bytes_acked
            if now_s - self.last_cut >= rtt_s:          # once per round trip, by time
                self.window_bytes = max(self.mss, self.window_bytes - self.window_bytes * self.est / 2)
                self.last_cut = now_s
        elif now_s - self.last_cut >= rtt_s:
            self.window_bytes += self.mss * bytes_acked / self.window_bytes
        if now_s - rtt_s >= self.boundary:
            frac = self.counts["marked"] / max(1, self.counts["acked"])
            self.est += self.gain * (frac - self.est)
            self.boundary = now_s
            self.counts = {"acked": 0, "marked": 0}

    def trace(self):
        return self.rate_bps, self.window_bytes * 8 / self.rtt, self.est
'''


def test_a_correct_answer_written_differently_passes(tmp_path):
    statuses = _graded(tmp_path, DIFFERENT)
    assert set(statuses.values()) == {"passed"}, statuses

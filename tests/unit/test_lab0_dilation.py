"""Lab 0's algorithm checks against typical mistakes and a correct answer written
differently from the reference (no root, no fabric)."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.catalog import find_lab
from labs.grader import grade

LAB = find_lab(0)
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
    # bytes never become bits
    "bytes as bits": (_mistake("return 8.0 * frame_bytes / rate_bps",
                               "return frame_bytes / rate_bps"), "dilation", "bits"),
    # the dilation backwards: rates multiplied by S
    "rate x S": (_mistake("return real_rate_bps / scale", "return real_rate_bps * scale"),
                 "dilation", "expected"),
    # cut-through thinking: the frame serialized once, not at every store-and-forward hop
    "no store-and-forward": (_mistake(
        'serialization = sum(serialization_s(frame_bytes, r) for r in path["rates_bps"])',
        'serialization = max(serialization_s(frame_bytes, r) for r in path["rates_bps"])'),
        "path-latency", "store-and-forward"),
    # a one-way delay taken as the round trip
    "one-way BDP": (_mistake("one_way_latency_s(reverse(path), ACK_WIRE_BYTES)", "0.0"),
                    "bdp", "one way"),
    # the BDP in bits
    "BDP in bits": (_mistake('return min(path["rates_bps"]) * rtt_s / 8.0',
                             'return min(path["rates_bps"]) * rtt_s'), "bdp", "bits"),
    # Ethernet's preamble, FCS and gap forgotten
    "no Ethernet overhead": (_mistake("frames * (HEADER_BYTES + WIRE_OVERHEAD_BYTES)",
                                      "frames * HEADER_BYTES"), "wire-bytes", "24 B"),
    # the incast priced at the emulated rate: an emulated time, S times the real one
    "emulated time": (_mistake('/ path["rates_bps"][-1]',
                               '/ emulated_rate_bps(path["rates_bps"][-1], 10000)'),
                      "incast", "emulated"),
    # the NIC overhead forgotten
    "no NIC overhead": (_mistake("return drain_s + nic_overhead_s + ", "return drain_s + "),
                        "incast", "overhead"),
    # the ring's step latency taken as its slowest neighbour's
    "ring barrier": (_mistake("sum(latencies) / len(latencies)", "max(latencies)"),
                     "ring", "not barriers"),
    # a reduce-scatter's n - 1 steps for the whole all-reduce
    "n-1 steps": (_mistake("steps = 2 * (n_ranks - 1)", "steps = n_ranks - 1"), "ring",
                  "reduce-scatter"),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_typical_mistakes_fail(name, tmp_path):
    text, check, hint = MISTAKES[name]
    results = _graded(tmp_path, text)
    status, feedback = results[check]
    assert status == "failed", results
    assert hint in feedback, feedback


DIFFERENT = '''
"""Lab 0 written another way: a wire factor instead of whole frames, the last frame
counted once in the incast, the bottleneck's serialization left out of a ring step."""

KB_PER_FRAME = 4096
EXTRA = 58 + 24


def emulated_rate_bps(real_rate_bps, scale):
    return real_rate_bps * (1.0 / scale)


def emulated_time_s(real_time_s, scale):
    return scale * real_time_s


def serialization_s(frame_bytes, rate_bps):
    return frame_bytes * 8 / rate_bps


def _hop_times(path, nbytes):
    return [nbytes * 8 / r for r in path["rates_bps"]]


def one_way_latency_s(path, frame_bytes):
    t = 0.0
    for i, r in enumerate(path["rates_bps"]):
        t += frame_bytes * 8 / r + path["propagation_s"][i]
    for s in path["switch_latency_s"]:
        t += s
    return t


def path_bdp_bytes(path):
    back = {"rates_bps": path["rates_bps"][::-1], "propagation_s": path["propagation_s"][::-1],
            "switch_latency_s": path["switch_latency_s"][::-1]}
    rtt = one_way_latency_s(path, KB_PER_FRAME + EXTRA) + one_way_latency_s(back, 62 + 24)
    return rtt * min(path["rates_bps"]) / 8


def wire_bytes(payload_bytes):
    return payload_bytes * (KB_PER_FRAME + EXTRA) / KB_PER_FRAME


def incast_completion_s(n_senders, size_bytes, path, nic_overhead_s):
    c = path["rates_bps"][-1]
    frame = KB_PER_FRAME + EXTRA
    # the last frame leaves the last hop as the drain ends: count its serialization once
    fixed = one_way_latency_s(path, frame) - frame * 8 / c
    return nic_overhead_s + fixed + n_senders * wire_bytes(size_bytes) * 8 / c


def ring_step_latency_s(neighbour_paths, nic_overhead_s):
    total = 0.0
    for p in neighbour_paths:
        hops = _hop_times(p, KB_PER_FRAME + EXTRA)
        total += one_way_latency_s(p, KB_PER_FRAME + EXTRA) - max(hops)
    return nic_overhead_s + total / len(neighbour_paths)


def ring_allreduce_s(n_ranks, size_bytes, rate_bps, step_latency_s):
    chunk_s = wire_bytes(size_bytes / n_ranks) * 8 / rate_bps
    return (n_ranks - 1) * (step_latency_s + chunk_s) * 2
'''


def test_a_correct_solution_written_differently_passes(tmp_path):
    statuses = _graded(tmp_path, DIFFERENT)
    assert {s for s, _ in statuses.values()} == {"passed"}, statuses

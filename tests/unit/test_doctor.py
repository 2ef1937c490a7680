"""`emu doctor`'s notes: ECMP hashing per switch, the default S with its reason, stale runs."""

from __future__ import annotations

import io
import os

import pytest
from rich.console import Console

from cli import doctor as cli
from emu import capabilities
from emu.runs import RunInfo


@pytest.fixture
def out() -> io.StringIO:
    return io.StringIO()


def _console(buf: io.StringIO) -> Console:
    return Console(file=buf, width=300, color_system=None)


def test_ecmp_hash_seed_check_says_what_is_lost_without_it(monkeypatch):
    real_exists = capabilities.os.path.exists

    def kernel_without(*names):
        monkeypatch.setattr(capabilities.os.path, "exists",
                            lambda p: False if any(n in p for n in names) else real_exists(p))

    kernel_without("fib_multipath_hash_seed", "fib_multipath_hash_fields")  # Linux < 5.12
    check = capabilities._ecmp_hash_seed()
    assert not check.ok and not check.essential
    assert "6.11" in check.detail and "polarization" in check.detail
    assert "ecmp_hash_independent=false" in check.detail
    kernel_without("fib_multipath_hash_seed")  # 5.12 .. 6.10
    check = capabilities._ecmp_hash_seed()
    assert check.ok and "ecmp_hash=fields" in check.detail
    monkeypatch.setattr(capabilities.os.path, "exists", lambda p: True)
    assert capabilities._ecmp_hash_seed().ok


def test_steal_is_told_since_boot_and_during_the_probe():
    note = cli._steal_note((1000, 500, 10), (1400, 600, 30))
    assert "2.1% of this machine's CPU time since boot" in note     # 30 of 1400
    assert "5.0% during the wake-up probe" in note                   # 20 of 400
    assert "0.0% during" in cli._steal_note((5, 1, 0), (5, 1, 0))    # no time passed


def test_default_scale_is_read_from_the_experiments():
    from core.scaling import DEFAULT_SCALE

    note = cli._default_scale_note()
    assert f"Default S (experiments, demo): {DEFAULT_SCALE:g}," in note
    assert "larger S" in note


def test_stale_runs_are_listed_with_the_command_to_clean_them(monkeypatch, out):
    runs = [RunInfo("deadbeef", 4242, False, "fattree,4", ["fabemu-deadbeef-h1"] * 3),
            RunInfo("5e551011", 4243, False, "emu run incast", [], kind="session"),
            RunInfo("a1a1a1a1", 77, True, "emu net --topo torus,4,4", [], kind="session")]
    monkeypatch.setattr("emu.runs.list_runs", lambda: runs)
    cli._print_registry(_console(out))
    text = out.getvalue()
    assert "Live run a1a1a1a1: pid 77" in text
    assert "Stale runs (their process is gone): 2" in text
    assert "deadbeef: fattree,4, 3 namespaces, was pid 4242" in text
    assert "5e551011: emu run incast, 0 namespaces" in text
    assert "emu clean" in text


def test_no_stale_runs_is_said_too(monkeypatch, out):
    monkeypatch.setattr("emu.runs.list_runs", lambda: [])
    cli._print_registry(_console(out))
    assert "Stale runs: none" in out.getvalue()


def test_the_worker_rule_and_this_machines_cpus_are_told():
    from engine.run import WORKER_MEAN_LINK_FRAMES_PER_S, WORKER_PEAK_FRAMES_PER_S

    note = cli._workers_note(6)
    assert f"one per {WORKER_PEAK_FRAMES_PER_S:,} frames/s of its sending NICs" in note
    assert f"one per {WORKER_MEAN_LINK_FRAMES_PER_S:,} frames/s on average" in note
    assert "at most 6 here" in note


def test_hidden_throttling_is_measured_on_the_idle_machine_or_said_not_to_be():
    note = cli._throttling_note(probe_s=0.2)
    if os.geteuid() != 0:
        assert note.startswith("Hidden throttling: not measured")
    else:
        assert note.startswith("Hidden throttling: every CPU ran at under 1/4 of its speed for ")
        assert "% of 0.2 s idle" in note


def test_the_algorithms_with_a_c_twin_are_named_as_the_engine_runs_them():
    """DCQCN (under each of its names), DCTCP and TIMELY run in C where the sender is
    compiled;
    the others, and users' classes, are told to cost a Python call per event."""
    note = cli._cc_note(True)
    in_c, in_python = note.split(";", 1)[0], note.split("in Python);", 1)[1]
    assert all(name in in_c for name in ("dcqcn", "paper", "nic", "dctcp", "timely"))
    assert all(name in in_python for name in ("swift", "hpcc"))
    assert not any(name in in_python for name in ("dcqcn", "dctcp", "timely"))
    assert "your own classes" in in_python
    assert "every algorithm in Python" in cli._cc_note(False)

"""Shared test helpers: root detection and residue accounting."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

IS_ROOT = os.geteuid() == 0


# Timing-sensitive marker tests sample qdiscs every few ms; the kernel's background
# tear-down of the hundreds of namespaces that fabric tests delete holds the rtnl lock
# and stalls those samples, so these files run first, on a quiet kernel.
_RUN_FIRST = ("test_marking.py", "test_telemetry.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in _RUN_FIRST)  # stable: order kept otherwise
    # CI grades labs 1, 2 and 4 on the fabric; the other labs' emulation grading (about 3
    # minutes more) runs on request, to keep the suite within its time.
    if os.environ.get("FABRICEMU_ALL_LABS", "0") in ("", "0"):
        later = pytest.mark.skip(reason="grading labs 0, 3, 5 and 6 on the fabric takes about "
                                 "3 minutes: set FABRICEMU_ALL_LABS=1 to run it")
        for item in items:
            if "all_labs" in item.keywords:
                item.add_marker(later)
    # Root-level integration tests must run in CI (root); elsewhere they skip with the reason.
    if IS_ROOT:
        return
    skip = pytest.mark.skip(reason="needs root: builds network namespaces, qdiscs and BPF programs")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


#: The experiment tests run at this S, twice the default (core.scaling.DEFAULT_SCALE,
#: 10000). Late in a full suite the workers stall for ms at a time (the kernel tearing
#: down earlier tests' namespaces, among others), and the gate rightly refuses a run
#: whose p99 pacing lag passes two frame times: in fresh-clone CI runs the ECMP
#: permutation lagged 2.0 ms at S = 10000 (12cb712; 0.08 ms alone) and an all-to-all
#: 4.0 ms at S = 20000 (4cc67eb; 0.13-0.22 ms in 8 runs alone). These tests judge
#: behaviour and accuracy; the default S is judged by the demo and bench.capacity.
SUITE_SCALE = 20_000

#: Measurements of a case the gate refuses for the machine's timing alone (the
#: experiments' ``attempts`` option) in the experiment tests.
SUITE_ATTEMPTS = 2

#: What the gate says when the machine, not the emulation, failed a run: a worker that
#: stalled (pacing lag, dropped schedule debt, a NIC under its rate) or a busy CPU.
MACHINE_REASONS = ("pacing lag", "receive lag", "pacing debt kept", "NIC rate", "machine CPU",
                   "hypervisor steal", "hypervisor throttling")
#: A saturated port below its rate: the kernel's shaper stalled too (its HTB watchdog
#: is a timer of the same CPU), and beyond its bucket's catch-up the service is lost
#: (docs/validation.md, "HTB's bucket depth"). A CI run: 86 % of the rate while the
#: hypervisor took 0.73 s of the case's 1.5 s. Above its rate is never the machine's.
SHAPER_STALLED = ("saturated port reached only",)


def machine_only(reasons: list[str], stolen: float = 0.0) -> bool:
    """The gate's reasons name the machine's timing and nothing else: at least one of
    MACHINE_REASONS, and besides them only the suggested S and what a stall also fails
    (experiments.rundir.STALL_CONSEQUENCES, `SHAPER_STALLED`); or, while the hypervisor took more than
    `STEAL_SPELL` of the CPU (``stolen``, a share of the wall clock), what a stall also
    fails alone. A stolen CPU stalls a port's shaper as well as a worker: the real
    queue then stays above the marker's virtual one (a CI run: 2.4-7.8 frames against
    a limit of 2, with the workers on time), and the gate cannot tell that stall from
    a wrong marker, so it refuses the run without naming the machine."""
    from experiments.rundir import STALL_CONSEQUENCES

    stalls = (*STALL_CONSEQUENCES, *SHAPER_STALLED)
    allowed = (*MACHINE_REASONS, *stalls, "suggested scale factor")
    named = MACHINE_REASONS + (stalls if stolen_spell(reasons, stolen) else ())
    return (any(any(m in r for m in named) for r in reasons)
            and all(any(m in r for m in allowed) for r in reasons))

#: The share of the wall-clock CPU the hypervisor takes (steal) above which a run the
#: gate refused for the machine's timing alone, at S and again at a larger S, is the
#: machine's and not the test's failure: the test skips with the reason (the rate
#: tests use the same bound). A quiet spell on this project's VM steals 0.2-1.1 % (10 s
#: windows); in the CI run that failed the quick demo three times in a row, the gate
#: saw 12-15 ms of send lag at S = 20000 while the hypervisor took 30 and 360 ms.
STEAL_SPELL = 0.01

Overrides = Mapping[str, Any] | Callable[[float], Mapping[str, Any]]


def run_judged(run: Callable[..., Any], *args: Any, scale: float,
               overrides: Overrides | None = None, **kwargs: Any) -> Any:
    """``run(*args, scale=scale, overrides=..., **kwargs)`` (an experiment:
    ``registry.cli_run`` or ``registry.demo``), each case measured up to
    `SUITE_ATTEMPTS` times, judged as `judged` does."""
    def attempt(s: float, force: bool) -> Any:
        extra = overrides(s) if callable(overrides) else (overrides or {})
        return run(*args, scale=s, overrides={"attempts": SUITE_ATTEMPTS, **extra},
                   force=force, **kwargs)
    return judged(attempt, scale)


def stolen_spell(reasons: list[str], stolen: float) -> bool:
    """The hypervisor took more than `STEAL_SPELL` of the CPU: ``stolen`` (a share of the
    wall clock) over the test, or the gate's own count (steal, or its speed probe's
    throttling) over a run it refused for it."""
    from experiments.fidelity import MACHINE_CHECKS

    return stolen > STEAL_SPELL or any(m in r for r in reasons for m in MACHINE_CHECKS)


def stolen_since(ticks: Any, began: float) -> float:
    """CPU seconds the hypervisor took per wall second since ``cpu_ticks()`` read
    ``ticks`` at ``time.monotonic()`` ``began`` (the unit of `STEAL_SPELL`)."""
    from core.machinecpu import cpu_ticks, steal_s

    return steal_s(ticks, cpu_ticks()) / (time.monotonic() - began)


def judged(attempt: Callable[[float, bool], Any], scale: float) -> Any:
    """``attempt(S, force)``: a run at S, from scratch, with its gate's verdict (an
    object with ``valid`` and ``fidelity``, an `experiments.fidelity.FidelityReport`).
    A run the gate refused for the machine's timing alone runs once more at the S the
    gate suggests, at least twice and at most four times the S (``force``: even where
    the experiment's own pre-flight would refuse that S).

    On a shared VM a stall of a few ms (the hypervisor taking the CPU: 160-310 ms of
    it in one CI run) fails a frame time of 0.8 ms at S = 20000, and the gate is right
    to refuse the run; stalls come in bad spells, and a larger S lessens their weight.
    Refused for the machine alone while the hypervisor stole more than `STEAL_SPELL` of
    the CPU (`stolen_spell`: a share no S changes), the test skips with the gate's
    reasons at once, or after the run at the larger S; any other reason is returned as
    it is and fails the test."""
    from core.machinecpu import cpu_ticks

    before, began = cpu_ticks(), time.monotonic()
    result = attempt(scale, False)
    reasons = list(result.fidelity.reasons)
    stolen = stolen_since(before, began)
    if not result.valid and machine_only(reasons, stolen):
        if stolen_spell(reasons, stolen):
            pytest.skip(f"the gate refused the run for the machine's timing (steal over "
                        f"the test: {stolen:.1%} of the CPU): {reasons}")
        again = min(max(2 * scale, result.fidelity.suggested_scale), 4 * scale)
        print(f"run again at S = {again:g}: the gate refused the run for the machine's "
              f"timing: {reasons}")
        result = attempt(again, True)
        stolen = stolen_since(before, began)
        reasons = list(result.fidelity.reasons)
        if not result.valid and stolen_spell(reasons, stolen) and machine_only(reasons, stolen):
            pytest.skip(f"the gate refused every run for the machine's timing (steal over "
                        f"the test: {stolen:.1%} of the CPU): {result.fidelity.reasons}")
    return result


def our_namespaces() -> set[str]:
    from emu.netns import list_netns
    from emu.runs import NETNS_PREFIX

    return set(list_netns(NETNS_PREFIX))


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True)
    return {line.split(":")[1].strip().split("@")[0] for line in out.stdout.splitlines()}


ETH_P_ALL = 3


def tap(fab: Any, host: str) -> socket.socket:
    """A packet socket on ``host``'s NIC (``host``-eth0) that keeps copies of what
    passes, in both directions; read it with ``roce_frames``."""
    from emu.netns import in_netns

    with in_netns(fab.netns_path(host)):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    s.bind((f"{host}-eth0", 0))
    s.setblocking(False)
    return s


def roce_frames(sock: socket.socket) -> list[bytes]:
    """The RoCEv2 frames (UDP port 4791) a ``tap`` holds, in the order they passed."""
    out = []
    while True:
        try:
            frame = sock.recv(16384)
        except BlockingIOError:
            return out
        if len(frame) > 60 and frame[23] == socket.IPPROTO_UDP and frame[36:38] == b"\x12\xb7":
            out.append(frame)


# ----------------------------------------------------------------------------- labs

def grade_on_fabric(lab: Any, source: Path, tmp_path: Path) -> Any:
    """A copy of ``source`` (a lab's solution or starter) graded with its emulation
    checks, run directories under ``tmp_path/runs``."""
    from labs.grader import grade

    work = tmp_path / "work"
    shutil.copytree(source, work, ignore=shutil.ignore_patterns("runs", "*.json"))
    return grade(lab, work, out=tmp_path / "runs")


def skip_if_ungraded(g: Any) -> None:
    """A check the machine could not measure skips the test with the gate's reasons:
    never a silent pass."""
    if g.ungraded:
        pytest.skip("ungraded: " + "; ".join(f"{r.id}: {r.outcome.feedback}"
                                              for r in g.ungraded))


def assert_solution_passes_on_fabric(lab: Any, tmp_path: Path, plot: str | None) -> None:
    """The lab's reference solution fails no check, earns every point where the machine
    measured every check, and draws the lab's ``plot``."""
    g = grade_on_fabric(lab, lab.solution, tmp_path)
    failed = [(r.id, r.outcome.feedback) for r in g.results if r.outcome.status == "failed"]
    assert not failed, failed
    assert any(r.kind == "emulation" for r in g.results), "the lab declares emulation checks"
    skip_if_ungraded(g)
    assert g.score == g.max_score
    if plot is not None:
        assert (tmp_path / "runs" / plot).is_file()


# Property tests (hypothesis): a modest number of examples each, and in CI the same
# examples every run (derandomized), so a red CI is reproducible and never luck.
try:
    from hypothesis import HealthCheck, settings

    settings.register_profile("dev", max_examples=60, deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("ci", parent=settings.get_profile("dev"), derandomize=True,
                              print_blob=True)
    settings.load_profile("ci" if os.environ.get("CI", "").lower() in ("1", "true") else "dev")
except ImportError:  # the property tests skip themselves (pytest.importorskip)
    pass

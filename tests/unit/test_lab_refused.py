"""Why a lab's configuration is ungraded when no attempt was valid: "machine too busy"
only where the gate's own rule blames the machine's timing (experiments.rundir
.interference_only), else the gate's refusal as it stands. And a check that fails on
valid runs during which the hypervisor took the CPU is ungraded, not failed."""

from __future__ import annotations

from core.machinecpu import steal_share
from labs.catalog import Scenario
from labs.emulation import STEAL_LIMIT, RunRecord, ScenarioRuns, _refused
from labs.grader import not_for_the_machine
from labs.verdict import FAILED, PASSED, UNGRADED, fail, ok


def _record(failed: list[str]) -> RunRecord:
    return RunRecord(point="12K", repeat=0, attempts=3, failed_checks=failed,
                     reasons=[f"{name}: ..." for name in failed] + ["suggested scale factor"],
                     stolen_shares=[0.004, 0.12, 0.031])


def test_a_worker_behind_its_deadlines_is_the_machine():
    why = _refused(_record(["pacing lag p99", "real vs virtual queue l3:l3-eth3"]), "ksweep")
    assert why.startswith("machine too busy: 3 run(s) of ksweep refused by the fidelity gate (")
    assert "real vs virtual queue" in why
    assert why.endswith("; the hypervisor took 0.4%-12.0% of the CPU in those runs")


def test_a_drifting_queue_alone_is_not_called_the_machine():
    why = _refused(_record(["real vs virtual queue l3:l3-eth3"]), "ksweep")
    assert why.startswith("the fidelity gate refused 3 run(s) of ksweep, not for the "
                          "machine's timing alone (real vs virtual queue")
    assert "busy" not in why
    assert why.endswith("; the hypervisor took 0.4%-12.0% of the CPU in those runs")


def test_steal_shares_of_the_machine():
    assert steal_share((0, 0, 0), (200, 50, 10)) == 0.05
    assert steal_share((5, 5, 1), (5, 5, 1)) == 0.0


def _runs(*shares: list[float], valid: bool = True) -> ScenarioRuns:
    sr = ScenarioRuns(Scenario(name="ksweep", experiment="cc_compare", quick=True,
                               seconds=10.0, settings={}))
    sr.runs = [RunRecord(point=f"{k}K", repeat=0, valid=valid, attempts=len(s),
                         stolen_shares=list(s)) for k, s in enumerate(shares)]
    return sr


def test_a_check_failed_on_runs_the_hypervisor_took_is_ungraded_with_what_it_measured():
    # The valid run is each configuration's last attempt: 12 % stolen there.
    sr = _runs([0.002], [0.3, 0.12])
    assert sr.stolen_share() == 0.12
    out = not_for_the_machine(fail("mean queue 53.7 KB (model 38.0)"), sr)
    assert out.status == UNGRADED
    assert out.feedback.startswith("mean queue 53.7 KB (model 38.0) -- not counted: the "
                                   "hypervisor took 12.0% of the CPU")


def test_a_check_failed_on_quiet_runs_stands_and_a_pass_stands_either_way():
    quiet = _runs([0.3, STEAL_LIMIT], [0.002])   # a stolen attempt the gate refused
    assert not_for_the_machine(fail("too big"), quiet).status == FAILED
    assert not_for_the_machine(ok("fine"), _runs([0.2])).status == PASSED
    # Only valid runs count: none here, nothing to blame on the machine.
    assert _runs([0.4], valid=False).stolen_share() == 0.0

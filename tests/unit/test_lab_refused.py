"""Why a lab's configuration is ungraded when no attempt was valid: "machine too busy"
only where the gate's own rule blames the machine's timing (experiments.rundir
.interference_only), else the gate's refusal as it stands."""

from __future__ import annotations

from core.machinecpu import steal_share
from labs.emulation import RunRecord, _refused


def _record(failed: list[str]) -> RunRecord:
    return RunRecord(point="12K", repeat=0, attempts=3, failed_checks=failed,
                     reasons=[f"{name}: ..." for name in failed] + ["suggested scale factor"],
                     stolen_shares=[0.004, 0.12, 0.031])


def test_a_worker_behind_its_deadlines_is_the_machine():
    why = _refused(_record(["pacing lag p99", "real vs virtual queue l3:l3-eth3"]), "ksweep")
    assert why.startswith("machine too busy: 3 run(s) of ksweep refused by the fidelity gate (")
    assert "real vs virtual queue" in why
    assert why.endswith("; the hypervisor took 0.4%-12.0% of the CPU in those runs")


def test_the_hypervisor_taking_the_cpu_is_the_machine():
    why = _refused(_record(["hypervisor steal", "real vs virtual queue l3:l3-eth3"]), "ksweep")
    assert why.startswith("machine too busy: 3 run(s) of ksweep refused by the fidelity gate (")


def test_a_drifting_queue_alone_is_not_called_the_machine():
    why = _refused(_record(["real vs virtual queue l3:l3-eth3"]), "ksweep")
    assert why.startswith("the fidelity gate refused 3 run(s) of ksweep, not for the "
                          "machine's timing alone (real vs virtual queue")
    assert "busy" not in why
    assert why.endswith("; the hypervisor took 0.4%-12.0% of the CPU in those runs")


def test_steal_shares_of_the_machine():
    assert steal_share((0, 0, 0), (200, 50, 10)) == 0.05
    assert steal_share((5, 5, 1), (5, 5, 1)) == 0.0

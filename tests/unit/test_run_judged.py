"""The experiment tests' retries (tests/conftest.py run_judged): only for the machine's timing."""

from types import SimpleNamespace

import pytest

from tests import conftest
from tests.conftest import SUITE_ATTEMPTS, run_judged


@pytest.fixture(autouse=True)
def _machine_steal_not_counted(monkeypatch):
    """The machine's own steal over these microseconds would be a share of anything."""
    monkeypatch.setattr(conftest, "stolen_since", lambda ticks, began: 0.0)


def _runner(*verdicts):
    calls = []

    def run(name, out, *, scale, overrides, force=False):
        calls.append((scale, dict(overrides), force))
        valid, reasons, *suggested = verdicts[len(calls) - 1]
        return SimpleNamespace(valid=valid, fidelity=SimpleNamespace(
            reasons=reasons, suggested_scale=suggested[0] if suggested else scale))
    return run, calls


def test_a_timing_refusal_runs_again_from_scratch_at_a_larger_s_and_the_second_verdict_stands():
    lag = ["pacing lag p99: p99 send lag 4.0 ms", "suggested scale factor S = 50000"]
    run, calls = _runner((False, lag, 50000), (True, []))
    assert run_judged(run, "collective", "/tmp/x", scale=20000).valid
    assert calls == [(20000, {"attempts": SUITE_ATTEMPTS}, False),
                     (50000, {"attempts": SUITE_ATTEMPTS}, True)]   # the gate's S
    run, calls = _runner((False, lag, 200000), (False, lag))
    assert not run_judged(run, "collective", "/tmp/x", scale=20000).valid
    assert [c[0] for c in calls] == [20000, 80000]                  # at most 4 x S
    run, calls = _runner((False, lag, 25000), (True, []))
    run_judged(run, "collective", "/tmp/x", scale=20000)
    assert [c[0] for c in calls] == [20000, 40000]                  # at least 2 x S


def test_overrides_may_follow_s():
    lag = ["pacing lag p99: p99 send lag 4.0 ms"]
    run, calls = _runner((False, lag), (True, []))
    run_judged(run, "cc", "/tmp/x", scale=1000, overrides=lambda s: {"pfc_budget": 5e-6 * s})
    assert [c[1]["pfc_budget"] for c in calls] == [5e-3, 1e-2]


def test_any_other_reason_is_returned_as_it_is():
    retx = ["no unexpected retransmissions: 30 frames retransmitted, 0 dropped by ports"]
    for reasons in (retx, [*retx, "pacing lag p99: 4.0 ms"]):
        run, calls = _runner((False, reasons), (True, []))
        assert not run_judged(run, "demo", "/tmp/x", scale=1.0).valid and len(calls) == 1
    run, calls = _runner((True, []))
    assert run_judged(run, "demo", "/tmp/x", scale=1.0, overrides={"sizes": "1M"}).valid
    assert calls == [(1.0, {"attempts": SUITE_ATTEMPTS, "sizes": "1M"}, False)]


def test_a_queue_drift_beside_a_stall_is_the_machines_alone_it_is_not():
    drift = "real vs virtual queue l3:l3-eth3: median |qdisc backlog - marker's virtual queue|"
    stall = "pacing debt kept: 2 stalls dropped 74.579 ms of emulated schedule debt"
    run, calls = _runner((False, [stall, "suggested scale factor S = 50000", drift], 50000),
                         (True, []))
    assert run_judged(run, "cc", "/tmp/x", scale=20000).valid and len(calls) == 2
    run, calls = _runner((False, [drift, "suggested scale factor S = 40000"]), (True, []))
    assert not run_judged(run, "cc", "/tmp/x", scale=20000).valid and len(calls) == 1


def test_a_saturated_port_short_of_its_rate_beside_a_stall_is_the_machines():
    """The kernel's shaper stalls with the CPU too; a port *above* its rate never does."""
    under = "rate e1:e1-eth1: saturated port reached only 86.1% of its rate"
    over = ("rate e1:e1-eth1: sent 112.0% of its configured rate, above the 101.0% a "
            "shaped port can carry: the shaper or the measurement is wrong")
    stall = "pacing lag p99: p99 send lag 3.936 ms emulated vs 2 x packet time 1.671 ms"
    run, calls = _runner((False, [under, stall], 50000), (True, []))
    assert run_judged(run, "incast", "/tmp/x", scale=20000).valid and len(calls) == 2
    run, calls = _runner((False, [over, stall], 50000), (True, []))
    assert not run_judged(run, "incast", "/tmp/x", scale=20000).valid and len(calls) == 1


def test_a_refusal_for_the_hypervisor_skips_at_once():
    """No S changes the share of the CPU the hypervisor takes or throttles."""
    for machine in ("hypervisor throttling: every CPU ran at under 1/4 of its speed for 3.1%",
                    "hypervisor steal: the hypervisor took 2.2% of all CPU time"):
        run, calls = _runner((False, ["pacing lag p99: 4.0 ms", machine]), (True, []))
        with pytest.raises(pytest.skip.Exception, match="refused the run for the machine"):
            run_judged(run, "cc", "/tmp/x", scale=20000)
        assert len(calls) == 1

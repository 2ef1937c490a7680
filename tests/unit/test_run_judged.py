"""The experiment tests' retries (tests/conftest.py run_judged): only for the machine's timing."""

from types import SimpleNamespace

from tests.conftest import SUITE_ATTEMPTS, run_judged


def _runner(*verdicts):
    calls = []

    def run(name, out, *, scale, overrides, force=False):
        calls.append((scale, dict(overrides), force))
        valid, reasons = verdicts[len(calls) - 1]
        return SimpleNamespace(valid=valid, fidelity=SimpleNamespace(reasons=reasons))
    return run, calls


def test_a_timing_refusal_runs_again_from_scratch_at_twice_s_and_the_second_verdict_stands():
    lag = ["pacing lag p99: p99 send lag 4.0 ms", "suggested scale factor S = 50000"]
    run, calls = _runner((False, lag), (True, []))
    assert run_judged(run, "collective", "/tmp/x", scale=20000).valid
    assert calls == [(20000, {"attempts": SUITE_ATTEMPTS}, False),
                     (40000, {"attempts": SUITE_ATTEMPTS}, True)]
    run, calls = _runner((False, lag), (False, lag))
    assert not run_judged(run, "collective", "/tmp/x", scale=20000).valid and len(calls) == 2


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

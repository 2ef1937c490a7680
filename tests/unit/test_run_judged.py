"""The experiment tests' one retry (tests/conftest.py run_judged): only for the machine's timing."""

from types import SimpleNamespace

from tests.conftest import run_judged


def _runner(*verdicts):
    calls = []

    def run(name, out, force=False):
        calls.append(force)
        valid, reasons = verdicts[len(calls) - 1]
        return SimpleNamespace(valid=valid, fidelity=SimpleNamespace(reasons=reasons))
    return run, calls


def test_a_timing_refusal_runs_again_from_scratch_and_the_second_verdict_stands():
    lag = ["pacing lag p99: p99 send lag 4.0 ms", "suggested scale factor S = 50000"]
    run, calls = _runner((False, lag), (True, []))
    assert run_judged(run, "collective", "/tmp/x").valid and calls == [False, True]
    run, calls = _runner((False, lag), (False, lag))
    assert not run_judged(run, "collective", "/tmp/x").valid and calls == [False, True]


def test_any_other_reason_is_returned_as_it_is():
    retx = ["no unexpected retransmissions: 30 frames retransmitted, 0 dropped by ports"]
    for reasons in (retx, [*retx, "pacing lag p99: 4.0 ms"]):
        run, calls = _runner((False, reasons), (True, []))
        assert not run_judged(run, "demo", "/tmp/x").valid and calls == [False]
    run, calls = _runner((True, []))
    assert run_judged(run, "demo", "/tmp/x").valid and calls == [False]

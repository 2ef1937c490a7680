"""bench_gate's definition of a wrong run (pure)."""

from __future__ import annotations

from experiments.bench_gate import is_wrong


def _row(case: str, measured: float, predicted: float) -> dict:
    return {"case": case, "metric": "latency p99", "measured": measured,
            "error_rel": measured / predicted - 1}


def test_a_deterministic_metric_is_wrong_beyond_its_bound():
    assert not is_wrong(_row("fattree,4 allreduce-ring 1MiB", 104.9, 100.0), None)
    assert is_wrong(_row("fattree,4 allreduce-ring 1MiB", 105.1, 100.0), None)
    assert is_wrong(_row("incast cc=off K=1/2", 94.0, 100.0), None)


def test_a_randomised_model_metric_is_wrong_only_beyond_all_its_realisations():
    spread = {"band": [44.1, 51.7], "range": [42.0, 53.0]}
    case = "incast cc=dcqcn K=100KB/400KB"
    assert not is_wrong(_row(case, 42.4, 48.0), spread)      # -11.7 %, among the fluid runs
    assert not is_wrong(_row(case, 55.0, 48.0), spread)      # within 5 % of the greatest
    assert is_wrong(_row(case, 56.0, 48.0), spread)          # beyond it
    assert is_wrong(_row(case, 39.0, 48.0), spread)
    assert is_wrong(_row(case, 42.4, 48.0), None)            # no spread recorded: the bound

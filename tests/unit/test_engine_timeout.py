"""The engine's derived wall-clock limit (pure: a stand-in fabric)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.errors import ParameterError
from core.messages import Message, Workload
from core.scaling import Scale
from engine.run import TIMEOUT_BUSIEST_HOST_FACTOR, TIMEOUT_FLOOR_S, EngineConfig, auto_timeout_s


def _fabric(scale: float) -> SimpleNamespace:
    ports = [SimpleNamespace(node="h1", rate_bps=400e9), SimpleNamespace(node="h2", rate_bps=100e9),
             SimpleNamespace(node="s1", rate_bps=10e9)]  # a switch port: not a NIC
    return SimpleNamespace(hosts=["h1", "h2", "h3"], ports=lambda: ports, scale=Scale(scale))


def _incast(size_bytes: int, **kw: float) -> Workload:
    msgs = [Message(i, src, "h3", size_bytes, **kw) for i, src in enumerate(("h1", "h2"))]
    return Workload("incast", msgs, ["h1", "h2", "h3"], size_bytes)


def test_limit_grows_with_S_from_the_busiest_host_at_the_slowest_nic():
    wl = _incast(1 << 30)
    # h3 receives both messages: 2 GiB at 100 Gb/s (the slowest NIC; the switch's 10G port
    # is not a NIC)
    busiest_s = 2 * (1 << 30) * 8 / 100e9
    assert auto_timeout_s(_fabric(1000), wl) == pytest.approx(
        TIMEOUT_BUSIEST_HOST_FACTOR * busiest_s * 1000)
    assert auto_timeout_s(_fabric(4000), wl) == pytest.approx(
        4 * auto_timeout_s(_fabric(1000), wl))


def test_compute_gaps_and_starts_count_and_a_short_run_gets_the_floor():
    assert auto_timeout_s(_fabric(10), _incast(4096)) == TIMEOUT_FLOOR_S
    gapped = _incast(4096, gap_s=1e-3, start_s=2e-3)
    busiest_s = 2 * 4096 * 8 / 100e9
    assert auto_timeout_s(_fabric(100_000), gapped) == pytest.approx(
        TIMEOUT_BUSIEST_HOST_FACTOR * (busiest_s + 2e-3 + 2 * 1e-3) * 100_000)


def test_an_explicit_limit_is_checked():
    assert EngineConfig(timeout_s=None).timeout_s is None
    with pytest.raises(ParameterError, match="timeout_s"):
        EngineConfig(timeout_s=0)

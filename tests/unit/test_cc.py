"""The congestion-control interface: DCQCN behind it behaves exactly as its reaction point."""

from __future__ import annotations

import math

import pytest

from core.errors import ParameterError
from traffic.cc import Dcqcn, LineRate, make_cc
from traffic.dcqcn import PARAMS, ReactionPoint


def test_dcqcn_behind_the_interface_matches_the_reaction_point_event_for_event():
    params = PARAMS["paper"]
    rp = ReactionPoint(params, 400e9)
    cc = make_cc("paper", 400e9)
    assert isinstance(cc, Dcqcn) and cc.window_bytes is None and math.isinf(cc.next_timer_s)
    t = 0.0
    for step in range(200):
        t += 7e-6
        if step % 17 == 3:
            rp.on_cnp(t)
            cc.on_cnp(t)
        else:
            rp.on_bytes_sent(4154 * 8, t)
            cc.on_send(4154 * 8, t)
            cc.on_ack(4096, 5e-6, False, (), t)   # DCQCN ignores ACKs
        assert cc.trace() == (rp.rate_bps, rp.target_rate_bps, rp.alpha)
    cc.on_timer(t + 1e-3)
    rp.advance(t + 1e-3)
    assert cc.rate_bps == rp.rate_bps
    assert cc.cnps_received == rp.cnps_received > 0


def test_cc_off_is_line_rate_and_counts_cnps():
    cc = make_cc(None, 100e9)
    assert isinstance(cc, LineRate)
    cc.on_cnp(1e-6)
    cc.on_send(10_000, 2e-6)
    cc.on_timer(3e-6)
    assert cc.rate_bps == 100e9 and cc.cnps_received == 1
    assert cc.trace() == (100e9, 100e9, 0.0)
    assert isinstance(make_cc("off", 1e9), LineRate)
    for bad_bps in (0.0, -1.0, math.inf):
        with pytest.raises(ParameterError, match="line_rate_bps"):
            LineRate(bad_bps)

"""The capacity bound the gate applies to measured rates (pure)."""

from __future__ import annotations

import math

import pytest

from core.scaling import Scale
from emu.shaping import htb_burst_bytes
from emu.wirerate import capacity_bound_bps


def test_bound_is_the_bucket_and_one_frame_over_the_transfer():
    # 400G at S = 1e5: 4 Mb/s emulated, a 2000 B bucket; 1 MiB of 4154 B frames.
    wire = 256 * 4154
    assert htb_burst_bytes(400e9 / 1e5) == 2000
    bound = capacity_bound_bps(400e9, wire, Scale(1e5), frame_bytes=4154)
    assert bound == pytest.approx(400e9 * wire / (wire - 2000 - 4154))
    assert 1.005 < bound / 400e9 < 1.006
    # longer transfers leave less room; more busy periods more
    assert capacity_bound_bps(400e9, 100 * wire, Scale(1e5), 4154) < bound
    assert capacity_bound_bps(400e9, wire, Scale(1e5), 4154, busy_periods=2) > bound


def test_nothing_is_bounded_below_the_free_bytes():
    assert capacity_bound_bps(400e9, 1000, Scale(1e5)) == math.inf
    with pytest.raises(ValueError):
        capacity_bound_bps(0, 1e6, Scale(1e5))

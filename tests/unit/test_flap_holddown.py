"""A flap held down (topologies.faultspec.held_down_from) is priced by the failure
experiment as the link down it is; a flap re-admitted between its down phases is not."""

from __future__ import annotations

import pytest

from experiments import failure
from experiments.options import resolve_typed


def flap_case(**sets):
    opts = resolve_typed(failure.Options, failure.OPTIONS, True, sets, failure.check)[1]
    case = next(c for c in failure.cases(opts) if c.kind == "flap")
    return case, opts


def test_the_default_flap_is_a_link_down_at_its_first_down_phase():
    case, opts = flap_case(flap_link="a1-c1", flap="20us/10us", detect_delay="50us")
    assert opts.holddown == pytest.approx(1e-3)
    down = failure.as_link_down(case, opts.holddown)
    assert down.kind == "down" and down.detect_s == pytest.approx(50e-6)
    (fault,) = down.faults
    assert (fault.kind, fault.nodes) == ("down", ("a1", "c1"))
    assert fault.at_s == pytest.approx(20e-6)


@pytest.mark.parametrize("holddown", ["0", "19us"])
def test_a_flap_whose_up_phases_outlast_the_holddown_stays_a_flap(holddown):
    case, opts = flap_case(flap="20us/10us", holddown=holddown)
    assert failure.as_link_down(case, opts.holddown) is case

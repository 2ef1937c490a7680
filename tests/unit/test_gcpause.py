"""core.gcpause: the collector paused for a phase, and its state restored after."""

import gc

import pytest

from core.gcpause import collector_paused


def test_the_collector_is_paused_inside_and_restored_after_even_on_error():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: still paused when the inner phase ends
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("a failed build")
    assert gc.isenabled()


def test_a_collector_off_before_stays_off():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_as_a_decorator():
    @collector_paused()
    def build() -> bool:
        return gc.isenabled()

    assert build() is False and gc.isenabled()

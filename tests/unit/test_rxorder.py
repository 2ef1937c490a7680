"""Receive steering's CPU assignment (emu.rxorder.cpu_masks): pure."""

import pytest

from emu.rxorder import cpu_masks


def test_a_nodes_interfaces_alternate_over_the_cpus():
    ifaces = [("ns/s1", f"s1-eth{i}") for i in range(1, 5)] + [("ns/h1", "h1-eth0")]
    masks = cpu_masks(ifaces, [0, 1])
    assert [masks[k] for k in ifaces] == [0b01, 0b10, 0b01, 0b10, 0b01]


def test_each_mask_names_exactly_one_allowed_cpu():
    ifaces = [("ns", f"if{i}") for i in range(7)]
    masks = cpu_masks(ifaces, [2, 5, 7])
    assert {m.bit_count() for m in masks.values()} == {1}
    assert {m.bit_length() - 1 for m in masks.values()} == {2, 5, 7}


def test_no_cpu_is_an_error():
    with pytest.raises(ValueError):
        cpu_masks([("ns", "if0")], [])

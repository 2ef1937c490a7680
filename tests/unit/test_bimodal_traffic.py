"""traffic.bulk_small's two classes, and the report title's S, by hand."""

from __future__ import annotations

import pytest

from core.errors import ParameterError
from experiments.report import title_scales
from traffic.bulk_small import bimodal, bulk, small

HOSTS = ["a", "b", "c", "d"]


def test_bulk_rounds_chain_by_hand() -> None:
    one = bulk("allreduce-ring", HOSTS, 4096, 1)
    # ring all-reduce over 4: 2 (n - 1) steps of n messages of S / n
    assert len(one) == 2 * 3 * 4 and {m.size_bytes for m in one} == {1024}
    two = bulk("allreduce-ring", HOSTS, 4096, 2)
    assert len(two) == 48 and {m.tag for m in two} == {"bulk"}
    sinks = {m.msg_id for m in one} - {d for m in one for d in m.deps}
    for m in two[24:]:
        if m.msg_id - 24 in {x.msg_id for x in one if not x.deps}:
            assert set(m.deps) == sinks     # round 2 starts once round 1 ended
        else:
            assert min(m.deps) >= 24


def test_small_class_by_hand() -> None:
    msgs = small(HOSTS, [1024, 16384], 6, 60e-6, seed=3, first_id=10)
    assert [m.msg_id for m in msgs] == list(range(10, 16))
    assert [m.size_bytes for m in msgs] == [1024, 16384] * 3
    assert [m.start_s for m in msgs] == pytest.approx([0, 10e-6, 20e-6, 30e-6, 40e-6, 50e-6])
    assert all(m.src != m.dst and not m.deps and m.tag == "small" for m in msgs)
    assert msgs == small(HOSTS, [1024, 16384], 6, 60e-6, seed=3, first_id=10)


def test_with_and_without_bulk_share_the_small_messages() -> None:
    both = bimodal("allreduce-ring", HOSTS, 4096, 1, [512], 5, 1e-5, seed=1)
    alone = bimodal("allreduce-ring", HOSTS, 4096, 1, [512], 5, 1e-5, seed=1, with_bulk=False)
    light = [m for m in both.messages if m.tag == "small"]
    assert [(m.src, m.dst, m.start_s) for m in light] == [
        (m.src, m.dst, m.start_s) for m in alone.messages]
    assert len(both.messages) == 24 + 5 and len(alone.messages) == 5


@pytest.mark.parametrize(("call", "what"), [
    (lambda: small(["a"], [1], 1, 0.0, 0), "hosts"),
    (lambda: small(HOSTS, [], 1, 0.0, 0), "small_sizes"),
    (lambda: small(HOSTS, [1], 0, 0.0, 0), "small_count"),
    (lambda: small(HOSTS, [1], 1, float("nan"), 0), "window_s"),
    (lambda: bulk("allreduce-ring", HOSTS, 4096, 0), "rounds"),
])
def test_bad_input_is_one_line(call, what: str) -> None:
    with pytest.raises(ParameterError, match=what):
        call()


def test_title_shows_the_fabrics_own_s() -> None:
    assert title_scales({"scale": 10000, "fabrics": {"railopt@90000": {"scale": 90000.0}}}) \
        == "90000"
    assert title_scales({"scale": 10000, "fabrics": {"x": {"scale": 10000}, "y": {"scale": 5e4}}}) \
        == "10000, 50000"
    assert title_scales({"scale": 10000}) == "10000"

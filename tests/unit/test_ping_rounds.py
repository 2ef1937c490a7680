"""pingall's rounds: every ordered pair once, and per round each host sends one echo
and is sent one, so no socket has more than a round's replies waiting."""

from __future__ import annotations

from collections import Counter

import pytest

from emu.reachability import ping_rounds


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_rounds_cover_every_pair_once_and_spread_the_load(n):
    rounds = list(ping_rounds(n))
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == sorted((a, b) for a in range(n) for b in range(n) if a != b)
    for r in rounds:
        assert Counter(a for a, _ in r) == Counter(b for _, b in r) == Counter(range(n))

"""pingall's rounds: every ordered pair once, and per round each host sends one echo
and is sent one, so no socket has more than a round's replies waiting; its echoes'
checksums (summed incrementally) verify."""

from __future__ import annotations

import struct
from collections import Counter

import pytest

from emu.reachability import echo_request, ping_rounds


@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_rounds_cover_every_pair_once_and_spread_the_load(n):
    rounds = list(ping_rounds(n))
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == sorted((a, b) for a in range(n) for b in range(n) if a != b)
    for r in rounds:
        assert Counter(a for a, _ in r) == Counter(b for _, b in r) == Counter(range(n))


@pytest.mark.parametrize("ident,seq", [(1, 0), (1, 1), (2048, 2047), (0xFFFF, 0xFFFF), (0x1234, 0xFEDC)])
def test_echo_request_checksum_verifies(ident, seq):
    pkt = echo_request(ident, seq)
    words = struct.unpack(f"!{len(pkt) // 2}H", pkt)
    total = sum(words)
    while total >> 16:
        total = (total >> 16) + (total & 0xFFFF)
    assert total == 0xFFFF  # RFC 1071: the sum over a packet with its checksum is all ones
    assert struct.unpack_from("!BBxxHH", pkt) == (8, 0, ident, seq)

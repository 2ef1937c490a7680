"""The engine's burst hot path: compiled and Python paths give Shape.write's bytes."""

from __future__ import annotations

import random

import pytest

from core.errors import CapabilityError
from engine.burst import MAX_BURST, Burst
from traffic.icrc import icrc_ok
from traffic.roce import Flow, QpTemplate, parse_frame

FLOW = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 0xC001, 77)


def _paths() -> list[Burst]:
    paths = [Burst("python")]
    try:
        paths.append(Burst("compiled"))
    except CapabilityError as e:  # no clang: the Python path is all there is
        pytest.skip(f"compiled burst path unavailable: {e}")
    return paths


@pytest.mark.parametrize("payload", [8, 1000, 1024, 4096, 8192])
def test_every_shape_matches_shape_write_byte_for_byte(payload):
    rng = random.Random(payload)
    tmpl = QpTemplate(FLOW, payload * 5 + 3, mtu_payload_bytes=payload)
    for burst in _paths():
        for shape in tmpl.shapes.values():
            for _ in range(20):
                psn = rng.randrange(1 << 24)
                ts = rng.randrange(1 << 64)
                count = rng.randint(1, MAX_BURST)
                solicit = rng.random() < 0.5
                assert burst.send(None, shape, psn, count, ts, ackreq_last=solicit) == count
                for i in range(count):
                    ackreq = 1 if solicit and i == count - 1 else None
                    want = bytes(shape.write((psn + i) & 0xFFFFFF, ts, ackreq))
                    assert burst.frame(i) == want, (burst.detail, shape.opcode, i)


def test_psns_wrap_at_24_bits_and_frames_decode_as_roce():
    tmpl = QpTemplate(FLOW, 4096 * 10, mtu_payload_bytes=4096)
    middle = tmpl.shapes[tmpl.opcode(1)]
    for burst in _paths():
        burst.send(None, middle, 0xFFFFFE, 4, 123456789)
        frames = [parse_frame(burst.frame(i)) for i in range(4)]
        assert [f.psn for f in frames] == [0xFFFFFE, 0xFFFFFF, 0, 1]
        assert all(f.ts_ns == 123456789 and f.dqpn == 77 for f in frames)
        assert all(icrc_ok(burst.frame(i)) for i in range(4))
        # A solicited ACK: AckReq on the last frame of the burst only (MIDDLE has none).
        assert [f.ackreq for f in frames] == [0, 0, 0, 0]
        burst.send(None, middle, 5, 3, 0, ackreq_last=True)
        assert [parse_frame(burst.frame(i)).ackreq for i in range(3)] == [0, 0, 1]
        assert icrc_ok(burst.frame(2))


def test_bad_burst_sizes_and_indexes_are_refused():
    shape = QpTemplate(FLOW, 4096, mtu_payload_bytes=4096).shapes[0x0A]
    burst = Burst("python")
    with pytest.raises(ValueError, match="expected 1"):
        burst.send(None, shape, 0, MAX_BURST + 1, 0)
    with pytest.raises(ValueError, match="expected 1"):
        burst.send(None, shape, 0, 0, 0)
    burst.send(None, shape, 0, 2, 0)
    with pytest.raises(IndexError):
        burst.frame(2)

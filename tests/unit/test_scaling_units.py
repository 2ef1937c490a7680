import pytest

from core.errors import ParameterError
from core.scaling import Scale
from core.units import format_rate, parse_rate_bps, parse_size_bytes, parse_time_s


def test_dilation_keeps_rate_times_time_invariant():
    s = Scale(4000)
    rate_emu = s.rate_emu_bps(400e9)
    assert rate_emu == pytest.approx(100e6)
    # A 1 MiB transfer takes the same *real* time whether computed real or emulated.
    t_real = 8 * 2**20 / 400e9
    t_emu = 8 * 2**20 / rate_emu
    assert s.to_real_time_s(t_emu) == pytest.approx(t_real)
    assert s.time_emu_s(50e-6) == pytest.approx(0.2)
    assert s.to_real_rate_bps(rate_emu) == pytest.approx(400e9)


def test_a_count_per_real_second_is_s_times_fewer_per_emulated_second():
    s = Scale(10000)
    # 400G of full frames: 12 M frames per real second, 1204 per emulated second.
    frames_per_s = 400e9 / (8 * 4154)
    assert s.per_emu_s(frames_per_s) == pytest.approx(frames_per_s / 10000)
    # The same as the emulated rate of the bits, with no shaper limits applied.
    assert s.per_emu_s(400e9) == pytest.approx(s.rate_emu_bps(400e9))
    assert s.per_emu_s(1e15) == pytest.approx(1e11)       # rate_emu_bps would refuse it
    assert Scale(1).per_emu_s(7.0) == 7.0


def test_rate_too_fast_for_the_shaper_suggests_larger_scale():
    with pytest.raises(ParameterError, match=r"scale factor of at least 1800"):
        Scale(100).rate_emu_bps(3.6e12)


def test_rate_too_slow_suggests_smaller_scale():
    with pytest.raises(ParameterError, match="at most"):
        Scale(1e8).rate_emu_bps(400e9)


def test_a_rate_no_scale_can_shape_suggests_no_impossible_scale():
    with pytest.raises(ParameterError) as err:      # below the shaper's floor even at S = 1
        Scale(10).rate_emu_bps(50e3)
    assert "at most 0" not in str(err.value) and "even at S = 1" in str(err.value)


@pytest.mark.parametrize("bad", [0, 0.5, -3, float("nan"), "x"])
def test_invalid_scale_factor(bad):
    with pytest.raises(ParameterError, match="scale"):
        Scale(bad)


def test_check_rates_reports_the_first_bad_rate():
    with pytest.raises(ParameterError, match="1.6T"):
        Scale(400).check_rates({400e9, 1.6e12})


@pytest.mark.parametrize("text,bps", [("400G", 400e9), ("1.6T", 1.6e12), ("100Mbit", 1e8),
                                      ("25e9", 25e9), (800e9, 800e9), ("10kbps", 1e4)])
def test_parse_rate(text, bps):
    assert parse_rate_bps(text) == pytest.approx(bps)


@pytest.mark.parametrize("bad", ["fast", "-1G", "0", 0, "1Q"])
def test_parse_rate_rejects(bad):
    with pytest.raises(ParameterError):
        parse_rate_bps(bad)


def test_parse_size_and_time():
    assert parse_size_bytes("1MiB") == 2**20
    assert parse_size_bytes("64KB") == 64000
    assert parse_size_bytes(4096) == 4096
    assert parse_time_s("50us") == pytest.approx(50e-6)
    assert parse_time_s("1.5ms") == pytest.approx(1.5e-3)
    with pytest.raises(ParameterError):
        parse_size_bytes("-4")
    with pytest.raises(ParameterError):
        parse_time_s("soon")


def test_format_rate():
    assert format_rate(400e9) == "400G"
    assert format_rate(1.6e12) == "1.6T"


def test_a_faster_nic_keeps_a_400g_nics_frame_time_at_a_proportionally_larger_s():
    from core.scaling import DEFAULT_SCALE, scale_keeping_frame_time

    assert scale_keeping_frame_time(3.6e12) == pytest.approx(9 * DEFAULT_SCALE)   # NVLink
    assert scale_keeping_frame_time(400e9, 2000.0) == 2000.0
    assert scale_keeping_frame_time(100e9) == DEFAULT_SCALE    # slower NICs keep S


@pytest.mark.parametrize("parse", [parse_rate_bps, parse_size_bytes, parse_time_s])
def test_an_int_beyond_float_range_is_refused_in_one_line(parse) -> None:  # noqa: ANN001
    """A topology spec's '999...9' arrives as a Python int, which float() cannot hold."""
    with pytest.raises(ParameterError, match="too large a number"):
        parse(10 ** 400)

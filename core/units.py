"""Parsing and formatting of rates, sizes and durations given by users.

Rates are bits per second, sizes bytes, durations seconds, everywhere inside
the code; these helpers only translate human strings ("400G", "1MiB", "50us").
"""

from __future__ import annotations

import math
import re

from core.errors import ParameterError

_RATE_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3,
}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

#: The ranges a user may give: wide beyond any network, narrow enough that no derived
#: quantity (bits, a serialisation time, a reciprocal) overflows or underflows a float.
MIN_RATE_BPS, MAX_RATE_BPS = 1.0, 1e15
MAX_SIZE_BYTES = 1 << 53          # 8 PiB: every size below is an exact float
MIN_TIME_S, MAX_TIME_S = 1e-15, 1e9


def _refuse_bool(value: object, name: str) -> None:
    # bool is an int subclass: True would silently read as 1 bit/s, 1 byte or 1 s.
    if isinstance(value, bool):
        raise ParameterError(name, value, "expected a number, not a flag")


def _number(value: float | int, name: str) -> float:
    """A number given as such, as a float (an int beyond float's range is refused)."""
    try:
        return float(value)
    except OverflowError:
        raise ParameterError(name, value, "too large a number") from None


def parse_rate_bps(text: str | float | int, name: str = "rate") -> float:
    """'400G', '1.6T', '100Mbit', '25e9' -> bits per second (> 0)."""
    _refuse_bool(text, name)
    if isinstance(text, (int, float)):
        value = _number(text, name)
    else:
        m = re.fullmatch(_NUM + r"\s*([kKmMgGtT]?)(?:bit|bps|b)?(?:/s)?", text.strip())
        if not m:
            raise ParameterError(name, text, "expected a rate such as 400G, 1.6T or 100Mbit")
        value = float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]
    if not (value > 0 and math.isfinite(value)):
        raise ParameterError(name, text, "a rate must be positive and finite")
    if not MIN_RATE_BPS <= value <= MAX_RATE_BPS:
        raise ParameterError(name, text, f"a rate must be between {MIN_RATE_BPS:g} bit/s "
                             f"and {format_rate(MAX_RATE_BPS)}bit/s")
    return value


def parse_size_bytes(text: str | float | int, name: str = "size") -> int:
    """'1MiB', '64KB', '4096' -> bytes (>= 0, integer)."""
    _refuse_bool(text, name)
    if isinstance(text, (int, float)):
        value = _number(text, name)
    else:
        m = re.fullmatch(_NUM + r"\s*([a-zA-Z]*)", text.strip())
        if not m or m.group(2).lower() not in _SIZE_UNITS:
            raise ParameterError(name, text, "expected a size such as 4096, 64KB or 1MiB")
        value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if not (value >= 0 and math.isfinite(value)):
        raise ParameterError(name, text, "a size must be non-negative and finite")
    if value > MAX_SIZE_BYTES:
        raise ParameterError(name, text, f"a size must be at most {MAX_SIZE_BYTES:,} bytes (8 PiB)")
    return int(round(value))


def parse_time_s(text: str | float | int, name: str = "time") -> float:
    """'50us', '1.5ms', '2s', 0.001 -> seconds (>= 0)."""
    _refuse_bool(text, name)
    if isinstance(text, (int, float)):
        value = _number(text, name)
    else:
        m = re.fullmatch(_NUM + r"\s*(s|ms|us|µs|ns)?", text.strip())
        if not m:
            raise ParameterError(name, text, "expected a duration such as 50us, 1.5ms or 2s")
        value = float(m.group(1)) * _TIME_UNITS[m.group(2) or "s"]
    if not (value >= 0 and math.isfinite(value)):
        raise ParameterError(name, text, "a duration must be non-negative and finite")
    if value > MAX_TIME_S or 0 < value < MIN_TIME_S:
        raise ParameterError(name, text, f"a duration must be 0 or between {MIN_TIME_S:g} s "
                             f"and {MAX_TIME_S:g} s")
    return value


def format_rate(rate_bps: float) -> str:
    """400e9 -> '400G', 1.6e12 -> '1.6T', 1e8 -> '100M'."""
    for unit, factor in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if rate_bps >= factor:
            return f"{rate_bps / factor:.4g}{unit}"
    return f"{rate_bps:.4g}"


_BOOL_WORDS = {"1": True, "true": True, "yes": True, "on": True,
               "0": False, "false": False, "no": False, "off": False}


def parse_bool(value: object, name: str = "flag") -> bool:
    """True/False, 1/0, or a word (true/yes/on, false/no/off): ``mn --topo x,flag=False``
    and ``--set flag=off`` both pass strings."""
    if isinstance(value, bool):
        return value
    key = str(value).strip().lower() if isinstance(value, (int, str)) else None
    if key not in _BOOL_WORDS:
        raise ParameterError(name, value, "must be true or false")
    return _BOOL_WORDS[key]


#: Below this a size that no unit divides is written in bytes (4154B), above it rounded.
_EXACT_BYTES_BELOW = 100_000


def format_size(size_bytes: float) -> str:
    """Exact where a unit divides the size (1MiB, 256KiB, 100KB), in bytes below 100 KB
    (4154B), else to 4 significant digits (1.118GiB): labels and messages alike."""
    if float(size_bytes).is_integer():
        n = int(size_bytes)
        for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("MB", 10**6),
                          ("KB", 10**3)):
            if n >= div and n % div == 0:
                return f"{n // div}{unit}"
        if n < _EXACT_BYTES_BELOW:
            return f"{n}B"
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size_bytes >= factor:
            return f"{size_bytes / factor:.4g}{unit}"
    return f"{size_bytes:.0f}B"


def format_time(t_s: float) -> str:
    """Seconds -> the most readable of s / ms / µs / ns."""
    for unit, factor in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(t_s) >= factor:
            return f"{t_s / factor:.4g}{unit}"
    return f"{t_s / 1e-9:.4g}ns"

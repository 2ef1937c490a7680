"""Parsers of experiment option values, and the benchmarks' command-line glue.

Each parser reads a ``--set`` string or an already typed value (defaults, the Python
API, a resumed run's config.json) and returns the canonical value, or raises a
one-line ParameterError; `experiments.options` declares the options with them.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from core.ecn import Thresholds
from core.errors import FabricEmuError, ParameterError
from core.scaling import Scale
from core.units import parse_size_bytes
from topologies.spec import topo_size
from traffic.ccload import validate_cc
from traffic.collectives import NAMES

#: Largest message an experiment sends: at S = 1e5 a 400G NIC sends 64 MiB in over two
#: minutes of wall time, so a sweep of larger messages would run for hours.
MAX_MESSAGE_BYTES = 64 << 20

#: An option's parser: reads a ``--set`` string or an already typed value (defaults,
#: the Python API, a resumed run's config.json) and returns the canonical value, or
#: raises ParameterError. Parsers are idempotent on their own output.
Parser = Callable[[Any], Any]


def clear_errors(main: Callable[..., None]) -> Callable[..., None]:
    """A benchmark's ``main``: a refused value or a missing feature (FabricEmuError)
    ends it with a one-line error and exit status 2, not a traceback."""
    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> None:
        try:
            main(*args, **kwargs)
        except FabricEmuError as e:
            print(f"{os.path.basename(sys.argv[0])}: error: {e}", file=sys.stderr)
            sys.exit(2)
    return run


def arg_type(parse: Parser) -> Callable[[str], Any]:
    """``parse`` as an argparse ``type=`` (the benchmarks' command lines): a refused
    value is a usage error that says why."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ParameterError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return convert


def parse_text(value: Any) -> str:
    """A non-empty string, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise ParameterError("value", value, "must not be empty")
    return value.strip()


def parse_int(minimum: int = 1, maximum: int | None = None) -> Parser:
    """Integer in [minimum, maximum]; '1.5', 'abc' and flags are refused."""
    bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"

    def parse(value: Any) -> int:
        if isinstance(value, str) and (digits := re.fullmatch(r"\s*([-+]?)([0-9]+)\s*", value)):
            if len(digits[2].lstrip("0")) > 30:  # no option's bound is that far
                raise ParameterError("value", value, f"must be {bound}" if digits[1] == "-"
                                     or maximum is not None else "too large (over 30 digits)")
            number = int(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            raise ParameterError("value", value, "must be an integer")
        if number < minimum or (maximum is not None and number > maximum):
            raise ParameterError("value", value, f"must be {bound}")
        return number
    return parse


def parse_float(minimum: float, maximum: float, *, open_low: bool = False,
                open_high: bool = False) -> Parser:
    """Finite real number in the interval (closed unless an end is marked open)."""
    def parse(value: Any) -> float:
        try:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
        except (TypeError, ValueError):
            raise ParameterError("value", value, "must be a number") from None
        low_ok = number > minimum if open_low else number >= minimum
        high_ok = number < maximum if open_high else number <= maximum
        if not (math.isfinite(number) and low_ok and high_ok):
            interval = (f"{'(' if open_low else '['}{minimum:g}, "
                        f"{maximum:g}{')' if open_high else ']'}")
            raise ParameterError("value", value, f"must be a finite number in {interval}")
        return number
    return parse


def parse_choice(*choices: str) -> Parser:
    """One of ``choices``, case-insensitive, returned in lower case."""
    def parse(value: Any) -> str:
        word = value.strip().lower() if isinstance(value, str) else None
        if word not in choices:
            raise ParameterError("value", value, f"choose one of {' | '.join(choices)}")
        return word
    return parse


def parse_list(item: Parser) -> Parser:
    """``a;b;c`` (or a list) -> [item(a), ...], non-empty and without repeats (';'
    because topology specs contain commas). An empty sweep would measure nothing."""
    def parse(value: Any) -> list:
        if isinstance(value, str):
            parts: list = [x.strip() for x in value.split(";")]
            if any(not x for x in parts) and value.strip():
                raise ParameterError("value", value, "an empty item between ';'")
            parts = [x for x in parts if x]
        elif isinstance(value, (list, tuple)):
            parts = list(value)
        else:
            raise ParameterError("value", value, "expected a ';'-separated list")
        if not parts:
            raise ParameterError("value", value, "an empty list: give at least one item")
        items = [item(x) for x in parts]
        repeated = sorted({str(x) for x in items if items.count(x) > 1})
        if repeated:
            raise ParameterError("value", value, f"listed twice: {', '.join(repeated)}")
        return items
    parse.item = item  # type: ignore[attr-defined]  # Option.format formats items as it reads them
    return parse


def parse_size(value: Any) -> int:
    """A message size: 1 byte to MAX_MESSAGE_BYTES."""
    size = parse_size_bytes(value, "size")
    if not 1 <= size <= MAX_MESSAGE_BYTES:
        raise ParameterError("size", value, f"must be 1 B to {MAX_MESSAGE_BYTES >> 20} MiB")
    return size


def parse_topo(value: Any) -> str:
    """A topology spec, checked (name, arguments, size caps) without building it."""

    spec = parse_text(value)
    topo_size(spec)
    return spec


def parse_thresholds(value: Any) -> str:
    """``KMIN/KMAX`` in bytes, e.g. ``100K/400K``; kept as text (Pmax is its own option)."""

    text = parse_text(value)
    Thresholds.from_text(text)
    return text


def parse_scale(value: Any) -> float:
    """The time-dilation factor S, as core.scaling.Scale accepts it."""

    return Scale(parse_float(1.0, 1e9, open_high=True)(value)).factor


def parse_csv(item: Parser) -> Parser:
    """``a,b,c`` (the benchmarks' lists) -> [item(a), item(b), item(c)]."""
    def parse(value: Any) -> list:
        if not isinstance(value, str) or not value.strip():
            raise ParameterError("value", value, "expected a ','-separated list")
        return [item(x.strip()) for x in value.split(",")]
    return parse


#: A benchmark's measuring time (s): long enough to mean something, short enough to end.
parse_duration_s = parse_float(0.1, 600.0)


def parse_scales(value: Any) -> list[float]:
    """``S1,S2,...`` -> each S as ``parse_scale`` accepts it."""
    return parse_csv(parse_scale)(value)


def parse_collective(value: Any) -> str:
    return parse_choice(*NAMES)(value)


def parse_cc(value: Any) -> str:
    """A congestion-control setting, checked by ``traffic.ccload.validate_cc`` (the
    engine's own check): a built-in name, returned in lower case, or
    ``path/to/file.py:Class``, returned with the path made absolute (a rerun from
    elsewhere loads the same file)."""
    if not isinstance(value, str):
        raise ParameterError("value", value, f"expected {CC_CHOICES}")
    return str(validate_cc(value).spec)


#: What ``parse_cc`` accepts, for option help texts.
CC_CHOICES = ("off | dcqcn (= paper) | nic | dctcp | timely | swift | hpcc | "
              "path/to/file.py:Class, each optionally with constructor parameters: "
              "hpcc,base_rtt_s=5us,eta=0.9")
CC_HELP = f"congestion control: {CC_CHOICES}"
#: DCQCN parameter set of the runs with DCQCN on.
parse_dcqcn = parse_choice("paper", "nic")
parse_sizes = parse_list(parse_size)
parse_specs = parse_list(parse_topo)


def parse_topo_at(value: Any) -> str:
    """``SPEC`` or ``SPEC@S``: a fabric, and the S it runs at instead of the run's."""
    spec, at, scale = parse_text(value).partition("@")
    spec = parse_topo(spec)
    return f"{spec}@{parse_scale(scale):g}" if at else spec


def split_topo_at(entry: str, scale: float) -> tuple[str, float]:
    """``parse_topo_at``'s text -> (spec, its S, else ``scale``)."""
    spec, at, own = entry.partition("@")
    return spec, float(own) if at else scale


def format_value(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ";".join(format_value(v) for v in value)
    if isinstance(value, float):
        return repr(value)  # round-trips exactly
    return str(value)

"""Experiment options: parsed and bounded before any fabric is built or any directory made.

Every experiment declares its options as `Option`s (their names, defaults, help and
parsers: what ``--set`` accepts and config.json records) and their typed form, a
frozen dataclass deriving from `CommonOptions` (an `ExperimentOptions`) with one field
per option.
`resolve_typed` parses the defaults and the user's ``--set`` overrides, types them
and runs the cross-checks, so that a refused option leaves nothing behind; the
experiment's functions take the dataclass.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Self, TypeVar

from core.ecn import Thresholds
from core.errors import FabricEmuError, ParameterError
from core.scaling import DEFAULT_SCALE, Scale
from core.units import format_size, parse_size_bytes
from topologies import loadbalance
from topologies.spec import build_topo, topo_size
from traffic.ccload import validate_cc
from traffic.collectives import NAMES
from traffic.transport import TRANSPORTS

# ----------------------------------------------------------------------------- options

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


@dataclass(frozen=True)
class Option:
    """One experiment option: default, ``--quick`` value and the parser of ``--set``
    (which also validates defaults and typed values)."""

    default: Any
    help: str
    quick: Any = None            # None: same as default
    parse: Parser = parse_text

    def value(self, quick: bool) -> Any:
        return self.quick if quick and self.quick is not None else self.default

    def format(self, value: Any) -> str:
        """``--set`` text that parse() reads back to ``value``: message sizes in KiB or
        MiB where that is exact."""
        if getattr(self.parse, "item", self.parse) is parse_size:
            sizes = value if isinstance(value, (list, tuple)) else [value]
            return ";".join(_exact_size(v) for v in sizes)
        return format_value(value)


def _exact_size(size_bytes: Any) -> str:
    text = format_size(size_bytes) if isinstance(size_bytes, int) else ""
    if text and parse_size_bytes(text, "size") == size_bytes:
        return text
    return format_value(size_bytes)


def resolve_options(spec: Mapping[str, Option], quick: bool, overrides: Mapping[str, Any],
                    check: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Defaults (or quick values), then overrides, every value through its option's
    parser, then ``check`` across options: all before anything is built."""
    unknown = set(overrides) - set(spec)
    if unknown:
        raise ParameterError("option", ", ".join(sorted(unknown)),
                             f"known options: {', '.join(sorted(spec))}")
    opts = {}
    for name, option in spec.items():
        raw = overrides[name] if name in overrides else option.value(quick)
        try:
            opts[name] = option.parse(raw)
        except ParameterError as e:
            if e.value is raw or e.value == raw:
                why = e.why
            else:  # about a list item, or a quantity derived from the value
                why = f"{'' if e.name == 'value' else e.name + '='}{e.value!r}: {e.why}"
            raise ParameterError(name, raw, why) from None
        except (TypeError, ValueError) as e:
            raise ParameterError(name, raw, str(e)) from None
    if check is not None:
        check(opts)
    check_capture(opts)
    return opts


def check_topology(spec: str, scale: float, min_hosts: int = 2, option: str = "topo") -> int:
    """The hosts of ``spec`` (its graph is built: pure data, within the size caps), at
    least ``min_hosts``, and every link rate shaped accurately at ``scale``."""

    topo = build_topo(spec)
    hosts = len(topo.host_nodes())
    if hosts < min_hosts:
        raise ParameterError(option, spec, f"has {hosts} host(s); this experiment needs "
                                           f"at least {min_hosts}")
    topo.fabric_links()  # parallel links are refused here, not by the builder
    rates = {info["rate_bps"] for _, _, info in topo.links(withInfo=True)}
    for rate_bps in sorted(rates):
        Scale(scale).rate_emu_bps(rate_bps)
    return hosts


def check_senders(spec: str, scale: float, senders: int, option: str) -> None:
    """``senders`` hosts besides the receiver exist on ``spec``."""
    hosts = check_topology(spec, scale)
    if senders > hosts - 1:
        raise ParameterError(option, senders, f"{spec} has {hosts} hosts, so at most "
                                              f"{hosts - 1} besides the receiver")


def check_thresholds(texts: Sequence[str], pmax: float) -> None:
    """Every Kmin/Kmax with the run's Pmax makes a valid marking curve."""

    for text in texts:
        Thresholds.from_text(text, pmax)


SCALE_HELP = "time-dilation factor S (emulated rate = real rate / S)"

#: Every experiment's ``attempts`` option (`experiments.rundir.Run.attempt`).
ATTEMPTS = Option(2, "measurements of a case the gate refuses for interference only (a "
                     "worker fell behind, the machine was busy); refused ones are reported; "
                     "1 measures each case once", parse=parse_int(1))


def parse_workers(value: Any) -> int | str:
    """'auto' or a worker count >= 1."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return parse_int(1)(value)
    except ParameterError:
        raise ParameterError("value", value, "expected 'auto' or a worker count >= 1") from None


#: Every experiment's ``workers`` option (``engine.run.EngineConfig.workers``).
WORKERS = Option("auto", "engine worker processes: auto (as few as a case's frame rates "
                         "need, at most one per CPU) or a number (at most one per CPU is "
                         "used)", parse=parse_workers)


def parse_capture(value: Any) -> list[str]:
    """'none' (or nothing) -> []; else a ';'-separated list of host names (a resumed
    run's config.json holds the list)."""
    if value is None or value == [] or (isinstance(value, str)
                                        and value.strip().lower() in ("", "none")):
        return []
    hosts = parse_list(parse_text)(value)
    bad = [h for h in hosts if not re.fullmatch(r"[A-Za-z][\w.-]*", h)]
    if bad:
        raise ParameterError("value", value, f"not a host name: {bad[0]!r}")
    return hosts


def check_capture(opts: Mapping[str, Any]) -> None:
    """Every host of the ``capture`` option is on every fabric of the run (``topo``,
    ``topos``)."""
    hosts = opts.get("capture") or []
    specs = ([split_topo_at(opts["topo"], 1.0)[0]] if "topo" in opts else []) + [
        split_topo_at(entry, 1.0)[0] for entry in opts.get("topos", [])]
    for spec in specs:
        known = build_topo(spec).host_nodes()
        unknown = [h for h in hosts if h not in set(known)]
        if unknown:
            raise ParameterError("capture", ";".join(unknown),
                                 f"no such host on {spec} ({', '.join(known[:6])}"
                                 f"{', ...' if len(known) > 6 else ''})")


#: Every experiment's ``capture`` option (``engine.capture``): each case's pcaps.
CAPTURE = Option("none", "hosts whose NICs' RoCEv2 frames (both ways, whole, real-fabric "
                         "times) each case writes to the run directory's "
                         "pcap/<case>/<host>.pcap, e.g. 'h1;h9' (none: no capture)",
                 parse=parse_capture)


def parse_metrics_port(value: Any) -> int | None:
    """'none' (or nothing) -> None; else a TCP port 1..65535."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    return parse_int(1, 65535)(value)


#: Every experiment's ``metrics_port`` option (``experiments.exporter``).
METRICS_PORT = Option("none", "serve live Prometheus metrics on this TCP port of 127.0.0.1 "
                              "while the run goes (docs/monitoring.md); none: no exporter",
                      parse=parse_metrics_port)


#: Every experiment's ``routing`` and ``flowlet_gap`` (``topologies.loadbalance``).
ROUTING = Option("ecmp", f"routing mode of every fabric: {' | '.join(loadbalance.ROUTING_MODES)} "
                         "(ecmp: the kernel's per-flow hash; spray: a random path per frame, "
                         "spray-rr: in turn; flowlet: a new random path after an idle "
                         "flowlet_gap; adaptive: the shortest egress queue per frame, adaptive-flowlet: "
                         "per flowlet)",
                 parse=loadbalance.parse_routing)
FLOWLET_GAP = Option(loadbalance.DEFAULT_FLOWLET_GAP_S, "routing=flowlet: the idle gap (real "
                     "time) after which a flow may take a new path; above the paths' delay "
                     "difference (topologies/loadbalance.py)", parse=loadbalance.parse_flowlet_gap_s)

#: Every experiment's ``transport`` option (``engine.run.EngineConfig.transport``).
TRANSPORT = Option(TRANSPORTS[0], "the QPs' reliable transport: gbn (RoCE's go-back-N) or sr "
                                  "(selective repeat, which tolerates the reordering of "
                                  "packet spraying and adaptive routing)",
                   parse=parse_choice(*TRANSPORTS))


#: Options that say how a run is watched, not what it measures: a resumed run takes
#: them from its command line, not from the run it resumes.
WATCH_OPTIONS = ("metrics_port",)


#: The options every experiment takes, declared once (`with_common` adds them): S,
#: how each case is measured (attempts, workers, capture, transport) and watched
#: (metrics_port), and how its fabrics route (routing, flowlet_gap).
COMMON_OPTIONS: dict[str, Option] = {
    "scale": Option(DEFAULT_SCALE, SCALE_HELP, parse=parse_scale),
    "attempts": ATTEMPTS,
    "workers": WORKERS,
    "capture": CAPTURE,
    "metrics_port": METRICS_PORT,
    "routing": ROUTING,
    "flowlet_gap": FLOWLET_GAP,
    "transport": TRANSPORT,
}


def with_common(options: Mapping[str, Option], **overrides: Option) -> dict[str, Option]:
    """An experiment's OPTIONS: its own ``options``, then COMMON_OPTIONS, each of them
    replaced by ``overrides`` where the experiment declares it differently (e.g. its
    own default S: ``scale=Option(...)``)."""
    clash = sorted(set(options) & set(COMMON_OPTIONS))
    if clash:
        raise ValueError(f"{', '.join(clash)}: common options; override them by keyword")
    unknown = sorted(set(overrides) - set(COMMON_OPTIONS))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not common options")
    return {**options, **COMMON_OPTIONS, **overrides}


@dataclass(frozen=True)
class ExperimentOptions:
    """An experiment's options, typed: a frozen dataclass with one field per option."""

    @classmethod
    def of(cls, opts: Mapping[str, Any]) -> Self:
        """The parsed options (`resolve_options`' dict), one field each."""
        names = {f.name for f in fields(cls)}
        if set(opts) != names:
            raise ValueError(f"{cls.__name__} has no field for {sorted(set(opts) - names)} "
                             f"and no option for {sorted(names - set(opts))}")
        return cls(**opts)


@dataclass(frozen=True)
class CommonOptions(ExperimentOptions):
    """The options every experiment takes (COMMON_OPTIONS), typed. Each experiment's
    ``Options`` derives from it and adds one field per option of its own."""

    scale: float
    attempts: int
    workers: int | str
    capture: list[str]
    metrics_port: int | None
    routing: str
    flowlet_gap: float
    transport: str

    def fabric_routing(self) -> dict[str, Any]:
        """The routing options as ``emu.fabric.Fabric``'s keyword arguments."""
        return {"routing": self.routing, "flowlet_gap_s": self.flowlet_gap}

    def common(self) -> dict[str, Any]:
        """The common options as keyword arguments: for an experiment that runs another
        experiment's cases with its own S and measurement settings."""
        return {f.name: getattr(self, f.name) for f in fields(CommonOptions)}


TypedOptions = TypeVar("TypedOptions", bound=ExperimentOptions)


def typed_check(options_type: type[TypedOptions],
                check: Callable[[TypedOptions], None] | None
                ) -> Callable[[dict[str, Any]], None] | None:
    """An experiment's ``check`` of its typed options, as `resolve_options` calls it."""
    if check is None:
        return None
    return lambda opts: check(options_type.of(opts))


def resolve_typed(options_type: type[TypedOptions], spec: Mapping[str, Option], quick: bool,
                  overrides: Mapping[str, Any],
                  check: Callable[[TypedOptions], None] | None = None
                  ) -> tuple[dict[str, Any], TypedOptions]:
    """`resolve_options` with the experiment's typed ``check``: the parsed options as
    config.json records them, and typed."""
    opts = resolve_options(spec, quick, overrides, typed_check(options_type, check))
    return opts, options_type.of(opts)

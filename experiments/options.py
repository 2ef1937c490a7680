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

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Self, TypeVar

from core.ecn import Thresholds
from core.errors import ParameterError
from core.scaling import DEFAULT_SCALE, Scale
from core.units import format_size, parse_size_bytes, parse_time_s
from experiments.option_parsers import (
    Parser,
    format_value,
    parse_choice,
    parse_int,
    parse_list,
    parse_scale,
    parse_size,
    parse_text,
    split_topo_at,
)
from topologies import loadbalance
from topologies.faultspec import format_faults, parse_faults, resolve
from topologies.spec import build_topo
from traffic.transport import TRANSPORTS

# ----------------------------------------------------------------------------- options



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
    check_faults(opts)
    return opts


def hash_draws_option(default: int, maximum: int, use: str = "averages") -> Option:
    """The ``hash_draws`` option of an experiment whose model prices ECMP hash draws
    (``use``: what the model does with them)."""
    return Option(default, f"random ECMP hash outcomes the model {use}",
                  parse=parse_int(1, maximum))


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


def _fabric_specs(opts: Mapping[str, Any]) -> list[str]:
    """The topology of every fabric of the run (``topo``, ``topos``)."""
    return ([split_topo_at(opts["topo"], 1.0)[0]] if "topo" in opts else []) + [
        split_topo_at(entry, 1.0)[0] for entry in opts.get("topos", [])]


def check_capture(opts: Mapping[str, Any]) -> None:
    """Every host of the ``capture`` option is on every fabric of the run (``topo``,
    ``topos``)."""
    hosts = opts.get("capture") or []
    for spec in _fabric_specs(opts):
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


def parse_faults_option(value: Any) -> str:
    """``faults``' text, parsed and written back in its normal form ('none': no fault)."""
    return format_faults(parse_faults(value))


def check_faults(opts: Mapping[str, Any]) -> None:
    """Every node and link the ``faults`` option names is on every fabric of the run
    (its times are checked against each case's modelled length when it is measured)."""
    faults = parse_faults(opts.get("faults"))
    for spec in _fabric_specs(opts) if faults else []:
        resolve(faults, build_topo(spec), spec)


#: Every experiment's ``faults``, ``detect_delay`` and ``holddown`` (``emu.faultinject``).
FAULTS = Option("none", "failures during every measured case, in real time after its start: "
                        "TARGET:ACTION@TIME;... e.g. 'agg1-core2:down@50us;edge3:down@80us;"
                        "agg2-core1:rate=25%@0;agg3-core3:flap=20us/10us@0' "
                        "(topologies/faultspec.py); none: no failure",
                parse=parse_faults_option)
DETECT_DELAY = Option(50e-6, "faults: real time until the fabric beyond a link's ends learns "
                             "that it went down or up and reroutes (BFD-like; the ends "
                             "drop or take back their next hop at once)",
                      parse=lambda v: parse_time_s(v, "detect_delay"))
#: 1 ms outlasts the up phase of any flap this emulator applies on time within a run of
#: a few ms, so a flapping link is held down rather than re-admitted each time.
HOLDDOWN = Option(1e-3, "faults: real time a link back up must stay up before its ends, and "
                        "then the rest of the fabric, route over it again (an interface's "
                        "up hold-time: Junos hold-time up, IOS carrier-delay up); 0: at once",
                  parse=lambda v: parse_time_s(v, "holddown"))


#: Every experiment's ``metrics_port`` option (``experiments.exporter``).
METRICS_PORT = Option("none", "serve live Prometheus metrics on this TCP port of 127.0.0.1 "
                              "while the run goes (docs/monitoring.md); none: no exporter",
                      parse=parse_metrics_port)


#: Every experiment's ``routing`` and ``flowlet_gap`` (``topologies.loadbalance``).
ROUTING = Option("ecmp", f"routing mode of every fabric: {' | '.join(loadbalance.ROUTING_MODES)} "
                         "(ecmp: the kernel's per-flow hash; spray: a random path per frame, "
                         "spray-rr: in turn; flowlet: a new random path after an idle "
                         "flowlet_gap; adaptive: the shortest egress queue per frame, adaptive-flowlet: "
                         "per flowlet; dragonfly only: valiant, through a random intermediate group, "
                         "ugal, minimal or valiant from the source switch's queues)",
                 parse=loadbalance.parse_routing)
FLOWLET_GAP = Option(loadbalance.DEFAULT_FLOWLET_GAP_S, "routing=flowlet: the idle gap (real "
                     "time) after which a flow may take a new path; above the paths' delay "
                     "difference (topologies/loadbalance.py)", parse=loadbalance.parse_flowlet_gap_s)

RECEIVE_STEERING = Option("off", "on: pin every node's receive work to one CPU, so no veth "
                          "reorders a flow (emu.fabric.Fabric's in_order; a few us more CPU "
                          "per frame); turn it on where reordering dominates, as on fattree,8",
                          parse=parse_choice("off", "on"))

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
#: (metrics_port), how its fabrics route (routing, flowlet_gap, receive_steering) and what fails during
#: each case (faults, detect_delay, holddown).
COMMON_OPTIONS: dict[str, Option] = {
    "scale": Option(DEFAULT_SCALE, SCALE_HELP, parse=parse_scale),
    "attempts": ATTEMPTS,
    "workers": WORKERS,
    "capture": CAPTURE,
    "metrics_port": METRICS_PORT,
    "routing": ROUTING,
    "flowlet_gap": FLOWLET_GAP,
    "receive_steering": RECEIVE_STEERING,
    "transport": TRANSPORT,
    "faults": FAULTS,
    "detect_delay": DETECT_DELAY,
    "holddown": HOLDDOWN,
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
    receive_steering: str
    transport: str
    faults: str
    detect_delay: float
    holddown: float

    def fabric_options(self) -> dict[str, Any]:
        """How the fabrics route and order frames, as ``emu.fabric.Fabric``'s keyword
        arguments (every experiment builds its fabrics with them)."""
        return {"routing": self.routing, "flowlet_gap_s": self.flowlet_gap,
                "in_order": self.receive_steering == "on"}

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

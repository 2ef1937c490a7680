"""Resolve the ``cc`` setting to a congestion-control factory, checked before any fabric exists.

A ``cc`` setting is one of

* a built-in name, case-insensitive: ``off``; ``dcqcn`` (the paper's DCQCN
  parameters), or the DCQCN parameter-set names ``paper`` and ``nic`` that
  ``traffic.cc.make_cc`` has always taken; ``dctcp``, ``timely``, ``swift``, ``hpcc``;
* ``path/to/file.py:ClassName``: a user's class, loaded from that file;
* either, followed by constructor parameters as in Mininet's ``--topo`` syntax:
  ``hpcc,base_rtt_s=5us,eta=0.9`` (a name ending in ``_s`` takes a time, ``_bps`` a
  rate, ``_bytes`` a size, with units; others a number or true/false);
* a ``DcqcnParams`` or None (off), as ``EngineConfig.cc`` accepts.

``validate_cc`` resolves it and builds one throwaway instance at a dummy line
rate, feeds it one event of each kind and checks what the engine reads back, so a
typo, an import error, a missing method or property, a failing constructor or a
non-positive rate is a one-line ``ParameterError`` before anything is built.
The factory it returns builds one algorithm per QP: ``factory(line_rate_bps, start_s)``.
What a class does later, in the run, is judged by ``run_fault``: the engine checks
the rate and window it paces with, and a worker that stops on an exception asks
whether the algorithm caused it (a read-back value out of range, or an exception
raised in a user's file), so that the run ends with that one line too.

An algorithm that declares ``needs_int_records = True`` (HPCC) gets in-band
telemetry: ``CcFactory.needs_int`` tells the engine to have every switch port write
its per-hop record into data frames (``traffic.int_telemetry``), which the ACKs echo.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import numbers
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from core.errors import FabricEmuError, ParameterError
from core.frame import FRAME_BYTES, MTU_PAYLOAD_BYTES
from core.units import parse_bool, parse_rate_bps, parse_size_bytes, parse_time_s
from traffic.cc import CongestionControl, make_cc
from traffic.ccalgos import Dctcp, Hpcc, Swift, Timely
from traffic.dcqcn import DcqcnParams, get_params

__all__ = ["REGISTRY", "CcFactory", "check_read_back", "resolve_cc", "run_fault", "validate_cc"]

#: The dummy line rate ``validate_cc`` builds its throwaway instance with (bit/s).
CHECK_LINE_RATE_BPS = 400e9


class _Dcqcn:
    """Constructor of DCQCN with a named or given parameter set; keyword params override fields."""

    __slots__ = ("base",)

    def __init__(self, base: str | DcqcnParams):
        self.base = base

    def params(self, **changes: Any) -> DcqcnParams:
        params = get_params(self.base) if isinstance(self.base, str) else self.base
        assert params is not None
        try:
            return params.with_(**changes) if changes else params
        except TypeError:  # a name that is no DcqcnParams field
            raise ParameterError("DCQCN parameters", sorted(changes),
                                 "expected fields of traffic.dcqcn.DcqcnParams") from None

    def __call__(self, line_rate_bps: float, start_s: float = 0.0,
                 **changes: Any) -> CongestionControl:
        return make_cc(self.params(**changes), line_rate_bps, start_s)


def _line_rate(line_rate_bps: float, start_s: float = 0.0) -> CongestionControl:
    """Congestion control off: every QP at line rate."""
    return make_cc(None, line_rate_bps, start_s)


#: Built-in names (lower case) -> constructors ``(line_rate_bps, start_s=0.0, **params)``.
REGISTRY: dict[str, Callable[..., CongestionControl]] = {
    "off": _line_rate,
    "dcqcn": _Dcqcn("paper"),
    "paper": _Dcqcn("paper"),
    "nic": _Dcqcn("nic"),
    "dctcp": Dctcp,
    "timely": Timely,
    "swift": Swift,
    "hpcc": Hpcc,
}

#: Event methods -> (dummy arguments, in the order they are sent; the parameters they take).
_EVENTS: dict[str, tuple[tuple[object, ...], str]] = {
    "on_send": ((FRAME_BYTES, 1e-6), "(n_bytes, now_s)"),
    "on_ack": ((MTU_PAYLOAD_BYTES, 10e-6, False, (), 11e-6),
               "(bytes_acked, rtt_s, ecn_echo, int_records, now_s)"),
    "on_cnp": ((12e-6,), "(now_s)"),
    "on_timer": ((13e-6,), "(now_s)"),
}
_READ_BACK = ("rate_bps", "window_bytes", "next_timer_s", "cnps_received")
#: Modules of users' classes are named this plus a hash of the file's path.
_USER_MODULE_PREFIX = "fabricemu_usercc_"


class CcFactory:
    """Builds the algorithm of one QP: ``factory(line_rate_bps, start_s)``.

    ``name`` is what reports print (``hpcc``, ``dcqcn(nic)``, ``mycc.py:MyCC``).
    A factory pickles as its ``cc`` setting and is resolved again when loaded.
    """

    __slots__ = ("spec", "name", "constructor", "params", "takes_base_rtt", "takes_hops")

    def __init__(self, spec: object, name: str, constructor: Callable[..., Any],
                 params: Mapping[str, object]):
        self.spec = spec
        self.name = name
        self.constructor = constructor
        self.params = dict(params)
        #: The constructor has a ``base_rtt_s`` (``hops``) keyword parameter.
        self.takes_base_rtt = _has_parameter(constructor, "base_rtt_s")
        self.takes_hops = _has_parameter(constructor, "hops")

    def __call__(self, line_rate_bps: float, start_s: float = 0.0,
                 base_rtt_s: float | None = None, hops: int | None = None
                 ) -> CongestionControl:
        """One QP's algorithm. ``base_rtt_s``: the QP's path round trip in the real
        fabric, ``hops`` the switches on its path, each given to an algorithm that takes
        it and whose setting left it open (HPCC's T, DCTCP's and Swift's initial window,
        Swift's topology scaling), as a deployment configures it."""
        path = {name: value for name, value, takes in (
            ("base_rtt_s", base_rtt_s, self.takes_base_rtt), ("hops", hops, self.takes_hops))
            if value is not None and takes and name not in self.params}
        return self.constructor(line_rate_bps, start_s, **self.params, **path)

    @property
    def dcqcn_params(self) -> DcqcnParams | None:
        """The DCQCN parameter set this factory builds with (None: not DCQCN)."""
        if not isinstance(self.constructor, _Dcqcn):
            return None
        return self.constructor.params(**self.params)

    @property
    def needs_int(self) -> bool:
        """The algorithm reads per-hop INT records (``needs_int_records``, e.g. HPCC)."""
        return bool(getattr(self.constructor, "needs_int_records", False))

    @property
    def is_off(self) -> bool:
        """Congestion control off: every QP at line rate."""
        return self.constructor is _line_rate

    @property
    def steady_model(self) -> str | None:
        """The project's model of the algorithm's steady state under long flows, as its
        class declares it (``CongestionControl.steady_model``: HPCC's equilibrium), else None."""
        return _declared(self.constructor, "steady_model")

    @property
    def oscillation_model(self) -> str | None:
        """The project's model of the algorithm's queue oscillation, as its class
        declares it (``CongestionControl.oscillation_model``: DCTCP's), else None."""
        return _declared(self.constructor, "oscillation_model")

    @property
    def target_utilisation(self) -> float:
        """The share of a bottleneck the algorithm aims to keep busy where it declares
        one (an instance's ``target_utilisation``; HPCC: eta, by design below 1), else 1."""
        return float(getattr(self(CHECK_LINE_RATE_BPS), "target_utilisation", 1.0))

    @property
    def user_file(self) -> str | None:
        """The file a user's class was loaded from (None: a built-in algorithm)."""
        module = sys.modules.get(getattr(self.constructor, "__module__", ""))
        if module is None or not module.__name__.startswith(_USER_MODULE_PREFIX):
            return None
        return getattr(module, "__file__", None)

    @property
    def cnp_driven(self) -> bool:
        """DCQCN or off: the settings that react to CNPs only (or to nothing), whose
        receivers ACK as before ECN echo existed."""
        return isinstance(self.constructor, _Dcqcn) or self.constructor is _line_rate

    def __reduce__(self) -> tuple[Any, ...]:
        return resolve_cc, (self.spec, self.params)

    def __repr__(self) -> str:
        return f"CcFactory({self.name!r}, params={self.params!r})"


def _declared(constructor: Callable[..., Any], name: str) -> Any:
    """Class attribute ``name`` as ``constructor``'s own class declares it (a subclass
    changes the algorithm and declares its own), else None."""
    return vars(constructor).get(name) if isinstance(constructor, type) else None


def _has_parameter(constructor: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(constructor).parameters
    except (TypeError, ValueError):
        return False


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    if not isinstance(e, FabricEmuError):  # ours already read as a sentence
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _choices() -> str:
    return ", ".join(sorted(REGISTRY)) + ", or path/to/file.py:ClassName"


def _load_class(spec: str) -> type:
    """The class ``ClassName`` of ``path/to/file.py:ClassName``; ParameterError if impossible."""
    path_text, _, class_name = spec.rpartition(":")
    if not path_text or not class_name.isidentifier():
        raise ParameterError("cc", spec, f"expected one of {_choices()}")
    path = Path(path_text).expanduser()
    if path.suffix != ".py":
        raise ParameterError("cc", spec, f"{path_text} is not a .py file (expected {_choices()})")
    if not path.is_file():
        raise ParameterError("cc", spec, f"{path_text}: no such file")
    module_name = _USER_MODULE_PREFIX + hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ParameterError("cc", spec, f"{path_text} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        del sys.modules[module_name]
        raise ParameterError("cc", spec, f"loading {path_text} failed: {_one_line(e)}") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ParameterError("cc", spec, f"{path_text} defines no {class_name}")
    if not isinstance(cls, type):
        raise ParameterError("cc", spec, f"{class_name} in {path_text} is not a class")
    return cls


def resolve_cc(spec: object, params: Mapping[str, object] | None = None) -> CcFactory:
    """The factory for a ``cc`` setting (see the module doc), without building anything.

    ``params`` are keyword arguments for the constructor (for example the
    topology's ``base_rtt_s``); unknown names fail when the factory is used.
    """
    params = dict(params or {})
    if isinstance(spec, CcFactory):
        return spec
    if isinstance(spec, str) and "," in spec:
        spec, inline = _split_params(spec)
        factory = resolve_cc(spec, {**inline, **params})
        # The setting a rerun parses back, and the name reports print.
        shown = [f"{k}={v:g}" if _real(v) else f"{k}={v}" for k, v in factory.params.items()]
        factory.spec = ",".join([str(factory.spec), *shown])
        factory.name = f"{factory.name}({', '.join(shown)})"
        return factory
    if spec is None:
        return CcFactory(None, "off", _line_rate, params)
    if isinstance(spec, DcqcnParams):
        return CcFactory(spec, "dcqcn(custom)", _Dcqcn(spec), params)
    if not isinstance(spec, str):
        raise ParameterError("cc", spec, f"expected one of {_choices()}")
    key = spec.strip().lower()
    if key in REGISTRY:
        name = f"dcqcn({key})" if key in ("paper", "nic") else key
        return CcFactory(key, name, REGISTRY[key], params)
    if ":" not in spec:
        raise ParameterError("cc", spec, f"expected one of {_choices()}")
    spec = spec.strip()
    cls = _load_class(spec)
    path_text, _, class_name = spec.rpartition(":")
    path = Path(path_text).expanduser().resolve()
    return CcFactory(f"{path}:{class_name}", f"{path.name}:{class_name}", cls, params)


def _param_value(name: str, text: str) -> object:
    """One ``key=value`` of a cc setting, parsed by the unit its name carries."""
    if name.endswith("_s"):
        return parse_time_s(text, name)
    if name.endswith("_bps"):
        return parse_rate_bps(text, name)
    if name.endswith("_bytes"):
        return parse_size_bytes(text, name)
    if text.strip().lower() in ("true", "false", "yes", "no", "on", "off"):
        return parse_bool(text, name)
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ParameterError(name, text, "expected a number, or true/false") from None


def _split_params(spec: str) -> tuple[str, dict[str, object]]:
    """``name,k=v,...`` -> (name, {k: value}); ParameterError for a malformed part."""
    head, *parts = (p.strip() for p in spec.split(","))
    params: dict[str, object] = {}
    for part in parts:
        key, eq, text = part.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier() or not text.strip():
            raise ParameterError("cc", spec, f"'{part}' is not key=value")
        if key in params:
            raise ParameterError("cc", spec, f"{key} given twice")
        params[key] = _param_value(key, text.strip())
    return head, params


def _real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_read_back(spec: object, cc: object, when: str) -> None:
    """What the engine reads after an event must make sense; ParameterError naming it."""
    values = {}
    for attr in _READ_BACK:
        try:
            values[attr] = getattr(cc, attr)
        except AttributeError:
            raise ParameterError("cc", spec, f"{type(cc).__name__} has no {attr} "
                                 f"(the interface needs {', '.join(_READ_BACK)})") from None
        except Exception as e:
            raise ParameterError("cc", spec, f"reading {attr} {when} raised {_one_line(e)}") \
                from None
    rate = values["rate_bps"]
    if not _real(rate) or not 0.0 < rate < math.inf:
        raise ParameterError("cc", spec, f"rate_bps {when} is {rate!r}: must be a positive "
                             "finite number of bit/s")
    window = values["window_bytes"]
    if window is not None and (not _real(window) or not 0.0 < window < math.inf):
        raise ParameterError("cc", spec, f"window_bytes {when} is {window!r}: must be None "
                             "or a positive finite number of bytes")
    timer = values["next_timer_s"]
    if not _real(timer) or math.isnan(timer):
        raise ParameterError("cc", spec, f"next_timer_s {when} is {timer!r}: must be a time "
                             "in seconds (math.inf for none)")
    cnps = values["cnps_received"]
    if not isinstance(cnps, numbers.Integral) or isinstance(cnps, bool) or cnps < 0:
        raise ParameterError("cc", spec, f"cnps_received {when} is {cnps!r}: must be an "
                             "integer >= 0")
    try:
        traced = cc.trace()  # type: ignore[attr-defined]
    except Exception as e:
        raise ParameterError("cc", spec, f"trace() {when} raised {_one_line(e)}") from None
    if not (isinstance(traced, tuple) and len(traced) == 3 and all(map(_real, traced))):
        raise ParameterError("cc", spec, f"trace() {when} returned {traced!r}: must be a tuple "
                             "(rate_bps, target_rate_bps, alpha) of numbers")


def validate_cc(spec: object, params: Mapping[str, object] | None = None,
                line_rate_bps: float = CHECK_LINE_RATE_BPS) -> CcFactory:
    """``resolve_cc``, then build one instance and drive it once through every event.

    Raises ParameterError (one line, naming what is wrong) for an unknown name, a
    file that does not load, a constructor that fails, an algorithm that needs INT
    records, a missing or uncallable event method or one with the wrong arguments,
    a missing read-back property, an event that raises, or a rate that is not
    positive and finite.
    """
    factory = resolve_cc(spec, params)
    label = factory.name
    try:
        cc = factory(line_rate_bps, 0.0)
    except Exception as e:
        raise ParameterError("cc", spec, f"{label}(line_rate_bps={line_rate_bps:g}, start_s=0.0)"
                             f" failed: {_one_line(e)}") from None
    missing = [m for m in (*_EVENTS, "trace") if not callable(getattr(cc, m, None))]
    if missing:
        raise ParameterError("cc", spec, f"{type(cc).__name__} lacks method(s) "
                             f"{', '.join(missing)} of the interface")
    for method, (args, wanted) in _EVENTS.items():
        try:
            inspect.signature(getattr(cc, method)).bind(*args)
        except TypeError:
            raise ParameterError("cc", spec, f"{type(cc).__name__}.{method} must take "
                                 f"{wanted}") from None
        except ValueError:  # no signature to inspect (a builtin): calling it will tell
            pass
    check_read_back(spec, cc, "after construction")
    for method, (args, _) in _EVENTS.items():
        try:
            getattr(cc, method)(*args)
        except Exception as e:
            raise ParameterError("cc", spec, f"{type(cc).__name__}.{method} raised "
                                 f"{_one_line(e)}") from None
        check_read_back(spec, cc, f"after {method}")
    return factory


def run_fault(factory: CcFactory, ccs: Iterable[object], exc: BaseException,
              stuck_s: float | None = None) -> str | None:
    """Why a run stopped on ``exc``, if the congestion control caused it; None if not.

    The algorithm caused it if ``exc`` is ``check_read_back``'s, if one of ``ccs`` (the
    run's instances) now reads back a value out of range (the engine failed on it),
    or if ``exc`` was raised in the file of a user's class: then the message names the
    method the engine called and the line that raised. ``stuck_s``: the worker was
    stopped (``exc``) after that long without progress; if it was in a user's class,
    that method did not return. A built-in algorithm's own exception is the project's
    bug and keeps its traceback.
    """
    if stuck_s is None:
        if isinstance(exc, ParameterError) and exc.name == "cc":
            return exc.why
        for cc in ccs:
            try:
                check_read_back(factory.spec, cc, "during the run")
            except ParameterError as e:
                return e.why
    path = factory.user_file
    if path is None:
        return None
    mine = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    if not mine:
        return None
    name = getattr(factory.constructor, "__name__", factory.name)
    where = f"{Path(path).name}, line {mine[-1].lineno}"
    if stuck_s is not None:
        return f"{name}.{mine[0].name} did not return within {stuck_s:g} s ({where})"
    return f"{name}.{mine[0].name} raised {_one_line(exc)} during the run ({where})"

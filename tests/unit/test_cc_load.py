"""Resolving the cc setting: built-in names, DCQCN sets, user classes from files, clear errors."""

from __future__ import annotations

import math
import pickle
import textwrap
from pathlib import Path

import pytest

from core.errors import ParameterError
from traffic.cc import Dcqcn, LineRate, make_cc
from traffic.ccalgos import Dctcp, Hpcc, Swift, Timely
from traffic.ccload import REGISTRY, CcFactory, check_read_back, resolve_cc, run_fault, validate_cc
from traffic.dcqcn import PARAMS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cc" / "my_aimd.py"

# A complete, valid class; the broken variants below change one thing each.
GOOD = """
import math

class Cc:
    window_bytes = None
    next_timer_s = math.inf

    def __init__(self, line_rate_bps, start_s=0.0):
        self.rate_bps = line_rate_bps
        self.cnps_received = 0

    def on_send(self, n_bytes, now_s): pass
    def on_ack(self, bytes_acked, rtt_s, ecn_echo, int_records, now_s): pass
    def on_cnp(self, now_s): self.cnps_received += 1
    def on_timer(self, now_s): pass
    def trace(self): return self.rate_bps, self.rate_bps, 0.0
"""


def write(tmp_path: Path, text: str, name: str = "mycc.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return f"{path}:Cc"


def test_registry_names():
    assert set(REGISTRY) == {"off", "dcqcn", "paper", "nic", "dctcp", "timely", "swift", "hpcc"}
    assert REGISTRY["hpcc"] is Hpcc and REGISTRY["swift"] is Swift


@pytest.mark.parametrize(("spec", "cls"), [("DCTCP", Dctcp), (" timely ", Timely),
                                           ("Swift", Swift), ("HPCC", Hpcc), ("OFF", LineRate),
                                           (None, LineRate), ("dcqcn", Dcqcn)])
def test_builtin_names_are_case_insensitive(spec: str | None, cls: type):
    factory = resolve_cc(spec)
    cc = factory(100e9, 0.0)
    assert isinstance(cc, cls) and cc.rate_bps == 100e9
    if cls is not Hpcc:
        assert validate_cc(spec).name == factory.name


def test_hpcc_asks_for_in_band_telemetry_and_its_parameters_are_checked():
    assert validate_cc("hpcc").needs_int
    assert not any(validate_cc(n).needs_int for n in ("off", "dcqcn", "dctcp", "timely", "swift"))
    with pytest.raises(ParameterError, match="eta"):
        validate_cc("hpcc", {"eta": 2.0})


def test_dcqcn_params_and_cnp_driven_settings():
    assert validate_cc("nic").dcqcn_params == PARAMS["nic"]
    assert validate_cc("dcqcn", {"g": 0.5}).dcqcn_params == PARAMS["paper"].with_(g=0.5)
    assert validate_cc("dctcp").dcqcn_params is None
    assert [validate_cc(s).cnp_driven for s in ("off", None, "paper", "nic", "dcqcn")] == [True] * 5
    assert not any(validate_cc(s).cnp_driven for s in ("dctcp", "timely", "swift",
                                                       f"{EXAMPLE}:MyAimd"))


@pytest.mark.parametrize(("spec", "params"), [("dcqcn", PARAMS["paper"]), ("Paper", PARAMS["paper"]),
                                              ("NIC", PARAMS["nic"]),
                                              (PARAMS["nic"], PARAMS["nic"])])
def test_dcqcn_sets_behave_exactly_as_make_cc(spec: object, params: object):
    factory = validate_cc(spec)
    ours, theirs = factory(400e9, 1e-6), make_cc(params, 400e9, 1e-6)  # type: ignore[arg-type]
    assert isinstance(ours, Dcqcn) and ours.rp.params == params
    for k in range(1, 50):
        t = k * 7e-6
        for cc in (ours, theirs):
            if k % 9 == 0:
                cc.on_cnp(t)
            else:
                cc.on_send(4154, t)
        assert ours.trace() == theirs.trace()


def test_params_reach_the_constructor():
    assert resolve_cc("hpcc", {"base_rtt_s": 5e-6})(100e9).base_rtt_s == 5e-6
    assert validate_cc("swift", {"base_rtt_s": 5e-6})(100e9).base_rtt_s == 5e-6
    assert validate_cc("dcqcn", {"g": 1 / 16})(100e9).rp.params.g == 1 / 16
    with pytest.raises(ParameterError, match="eta"):
        resolve_cc("hpcc", {"eta": 2.0})(100e9)
    with pytest.raises(ParameterError, match="no_such"):
        validate_cc("timely", {"no_such": 1})
    with pytest.raises(ParameterError, match="DcqcnParams"):
        validate_cc("nic", {"no_such": 1})
    custom = validate_cc(PARAMS["nic"], {"g": 0.5})
    assert custom(100e9).rp.params == PARAMS["nic"].with_(g=0.5)
    assert pickle.loads(pickle.dumps(custom))(100e9).rp.params.g == 0.5


def test_the_documented_example_loads_and_behaves_as_written():
    factory = validate_cc(f"{EXAMPLE}:MyAimd")
    assert isinstance(factory, CcFactory) and factory.name == "my_aimd.py:MyAimd"
    cc = factory(100e9, 0.0)
    cc.on_cnp(1e-6)                          # halve: 50 Gb/s
    assert cc.rate_bps == 50e9
    cc.on_ack(4096, 5e-6, False, (), 25e-6)  # floor(24 us / 10 us) = 2 steps of 1 Gb/s
    assert cc.rate_bps == 52e9
    cc.on_cnp(30e-6)                         # 29 us after the cut < 50 us: counted only
    assert cc.rate_bps == 52e9 and cc.cnps_received == 2
    cc.on_ack(4096, 5e-6, True, (), 60e-6)   # ECN echo 59 us after the cut: halve
    assert cc.rate_bps == 26e9 and cc.window_bytes is None and math.isinf(cc.next_timer_s)


def test_relative_paths_and_pickling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    write(tmp_path, GOOD)
    monkeypatch.chdir(tmp_path)
    factory = validate_cc("mycc.py:Cc")
    assert factory.spec == f"{tmp_path / 'mycc.py'}:Cc"
    monkeypatch.chdir("/")
    again = pickle.loads(pickle.dumps(factory))   # resolved again from the absolute path
    assert again(1e9).rate_bps == 1e9
    assert pickle.loads(pickle.dumps(validate_cc("swift")))(1e9).rate_bps == pytest.approx(1e9)


BROKEN = {
    "syntax": ("class Cc(:\n", "loading .* failed: SyntaxError"),
    "import": ("import no_such_module_xyz\n" + GOOD, "ModuleNotFoundError"),
    "raises at import": ("raise RuntimeError('boom')\n", "RuntimeError: boom"),
    "exits at import": ("import sys\nsys.exit(3)\n", "SystemExit"),
    "no class": ("x = 1\n", "defines no Cc"),
    "not a class": ("def Cc(a, b): return 1\n", "Cc in .* is not a class"),
    "constructor fails": (GOOD.replace("self.rate_bps = line_rate_bps",
                                       "raise ValueError('bad knob')"),
                          r"Cc\(line_rate_bps=4e\+11, start_s=0.0\) failed: ValueError: bad knob"),
    "constructor arity": (GOOD.replace("line_rate_bps, start_s=0.0", "line_rate_bps, start_s, x"),
                          "failed: TypeError"),
    "missing method": (GOOD.replace("def on_cnp", "def on_cnpx"), "lacks method.*on_cnp"),
    "wrong on_ack": (GOOD.replace("ecn_echo, int_records, now_s", "ecn_echo, now_s"),
                     r"on_ack must take \(bytes_acked, rtt_s, ecn_echo, int_records, now_s\)"),
    "missing rate": (GOOD.replace("self.rate_bps = line_rate_bps", "self.r = line_rate_bps")
                     .replace("return self.rate_bps, self.rate_bps", "return 1.0, 1.0"),
                     "has no rate_bps"),
    "zero rate": (GOOD.replace("self.rate_bps = line_rate_bps", "self.rate_bps = 0"),
                  "rate_bps after construction is 0: must be a positive"),
    "nan rate": (GOOD.replace("self.rate_bps = line_rate_bps", "self.rate_bps = float('nan')"),
                 "rate_bps after construction is nan"),
    "rate dies on cnp": (GOOD.replace("self.cnps_received += 1", "self.rate_bps = -1.0"),
                         "rate_bps after on_cnp is -1.0"),
    "event raises": (GOOD.replace("def on_timer(self, now_s): pass",
                                  "def on_timer(self, now_s): return 1 / 0"),
                     "on_timer raised ZeroDivisionError"),
    "bad window": (GOOD.replace("window_bytes = None", "window_bytes = -4096"),
                   "window_bytes after construction is -4096"),
    "bad timer": (GOOD.replace("next_timer_s = math.inf", "next_timer_s = None"),
                  "next_timer_s after construction is None"),
    "bad cnp count": (GOOD.replace("self.cnps_received = 0", "self.cnps_received = 'no'"),
                      "cnps_received after construction is 'no'"),
    "bad trace": (GOOD.replace("return self.rate_bps, self.rate_bps, 0.0", "return 1.0"),
                  r"trace\(\) after construction returned 1.0"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_classes_are_one_line_parameter_errors(tmp_path: Path, case: str):
    text, why = BROKEN[case]
    spec = write(tmp_path, text, name=f"cc_{case.replace(' ', '_')}.py")
    with pytest.raises(ParameterError, match=why) as err:
        validate_cc(spec)
    message = str(err.value)
    assert message.startswith("invalid cc=") and "\n" not in message


@pytest.mark.parametrize(("spec", "why"), [
    ("dcqnc", "expected one of dcqcn, dctcp, hpcc, nic, off, paper, swift, timely, or path"),
    ("", "expected one of"),
    (42, "expected one of"),
    ("/no/such/file.py:Cc", "no such file"),
    ("examples/cc/my_aimd.txt:MyAimd", "is not a .py file"),
    (f"{EXAMPLE}:", "expected one of"),
    (f"{EXAMPLE}:My Aimd", "expected one of"),
])
def test_unknown_names_and_bad_paths(spec: object, why: str):
    with pytest.raises(ParameterError, match=why):
        resolve_cc(spec)


def test_good_class_passes_and_is_named_after_its_file(tmp_path: Path):
    factory = validate_cc(write(tmp_path, GOOD))
    assert factory.name == "mycc.py:Cc"
    cc = factory(25e9, 0.0)
    cc.on_cnp(1e-6)
    assert cc.rate_bps == 25e9 and cc.cnps_received == 1


def test_constructor_parameters_ride_in_the_setting_with_units():
    f = validate_cc("hpcc,base_rtt_s=5us,eta=0.9")
    cc = f(100e9)
    assert cc.base_rtt_s == pytest.approx(5e-6) and cc.eta == 0.9
    assert f.name == "hpcc(base_rtt_s=5e-06, eta=0.9)"
    again = validate_cc(f.spec)                    # the setting a rerun parses back
    assert again.params == pytest.approx(f.params) and again.spec == f.spec
    assert pickle.loads(pickle.dumps(f)).params == f.params
    timely = validate_cc("timely,t_low_s=10us,t_high_s=0.1ms,min_rate_bps=1G")(100e9)
    assert (timely.t_low_s, timely.t_high_s) == pytest.approx((10e-6, 100e-6))
    assert validate_cc(f"{EXAMPLE}:MyAimd,step=0.05")(100e9).step_bps == 0.05 * 100e9


@pytest.mark.parametrize(("spec", "why"), [
    ("hpcc,eta", "is not key=value"), ("hpcc,=1", "is not key=value"),
    ("hpcc,eta=0.9,eta=0.8", "given twice"), ("hpcc,nope=1", "unexpected keyword"),
    ("hpcc,eta=2", "eta"), ("timely,t_low_s=abc", "duration"), ("swift,ai_packets=x", "number"),
    ("dcqcn,foo=1", "DcqcnParams")])
def test_bad_constructor_parameters_are_one_line_errors(spec, why):
    with pytest.raises(ParameterError, match=why) as err:
        validate_cc(spec)
    assert "\n" not in str(err.value)


def _raised_by(call) -> Exception:
    """The exception ``call()`` raises (with its traceback), as a worker catches it."""
    try:
        call()
    except Exception as e:
        return e
    raise AssertionError("it did not raise")


def test_run_fault_names_a_users_exception_by_method_and_line(tmp_path: Path):
    factory = resolve_cc(write(tmp_path, GOOD.replace(  # validate_cc would refuse it
        "def on_cnp(self, now_s): self.cnps_received += 1",
        "def on_cnp(self, now_s): self.count(now_s)\n"
        "    def count(self, now_s): raise KeyError(now_s)")))
    cc = factory(25e9, 0.0)
    exc = _raised_by(lambda: cc.on_cnp(3e-6))
    assert run_fault(factory, [cc], exc) == \
        "Cc.on_cnp raised KeyError: 3e-06 during the run (mycc.py, line 15)"
    elsewhere = _raised_by(lambda: {}["qp"])  # the engine's own bug, the class fine
    assert run_fault(factory, [cc], elsewhere) is None
    # Stopped while in the user's code (the watchdog's SIGTERM): it did not return.
    assert run_fault(factory, [cc], exc, stuck_s=10.0) == \
        "Cc.on_cnp did not return within 10 s (mycc.py, line 15)"
    assert run_fault(factory, [cc], elsewhere, stuck_s=10.0) is None


def test_run_fault_reads_back_what_the_engine_paces_with(tmp_path: Path):
    factory = validate_cc(write(tmp_path, GOOD))
    good, bad = factory(25e9, 0.0), factory(25e9, 0.0)
    bad.rate_bps = float("nan")
    engine_bug = ZeroDivisionError("float division by zero")
    assert run_fault(factory, [good], engine_bug) is None      # not the algorithm's doing
    assert run_fault(factory, [good, bad], engine_bug) == \
        "rate_bps during the run is nan: must be a positive finite number of bit/s"
    bad.rate_bps, bad.window_bytes = 1e9, 0
    assert "window_bytes during the run is 0" in run_fault(factory, [bad], engine_bug)
    checked = _raised_by(lambda: check_read_back(factory.spec, bad, "during the run"))
    assert run_fault(factory, [], checked) == checked.why


def test_a_built_in_algorithms_exception_keeps_its_traceback():
    factory = resolve_cc("hpcc")
    cc = factory(100e9, 0.0)
    exc = _raised_by(lambda: [cc.on_ack(4096, 1e-6, False, (object(),), 1e-6) for _ in "12"])
    assert factory.user_file is None and run_fault(factory, [cc], exc) is None

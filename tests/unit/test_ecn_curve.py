"""The marking curve, threshold policy, RED parameters, back-end choice, marker.c compiles."""

from __future__ import annotations

import math
import shutil
from types import SimpleNamespace

import pytest

from core.ecn import ThresholdPolicy, Thresholds, mark_probability
from core.errors import CapabilityError, ParameterError
from emu.ecn.backend import choose_backend

# --- Thresholds ----------------------------------------------------------------------

@pytest.mark.parametrize("kmin,kmax,pmax,bad", [
    (400, 100, 0.2, "kmin_bytes"),        # Kmin > Kmax
    (100, 400, 0.0, "pmax"),              # Pmax outside (0, 1]
    (100, 400, 1.5, "pmax"),
    (100, 400, -0.1, "pmax"),
    (-1, 400, 0.2, "kmin_bytes"),         # negative
    (0, -5, 0.2, "kmax_bytes"),
    (math.nan, 400, 0.2, "kmin_bytes"),
    (100, 400, True, "pmax"),
    (100, 2**40, 0.2, "kmax_bytes"),
])
def test_invalid_thresholds_name_the_parameter(kmin, kmax, pmax, bad):
    with pytest.raises(ParameterError) as e:
        Thresholds(kmin, kmax, pmax)
    assert e.value.name == bad
    assert bad in str(e.value)


def test_valid_thresholds_edge_cases():
    assert Thresholds(0, 0, 1.0).kmax_bytes == 0
    assert Thresholds(5, 5, 1.0) == Thresholds.step(5)
    assert Thresholds(100.0, 200.0, 1).kmin_bytes == 100


def test_for_rate_scales_linearly_from_25g():
    assert Thresholds.for_rate(25e9) == Thresholds(100_000, 400_000, 0.2)
    assert Thresholds.for_rate(100e9) == Thresholds(400_000, 1_600_000, 0.2)
    assert Thresholds.for_rate(400e9) == Thresholds(1_600_000, 6_400_000, 0.2)
    with pytest.raises(ParameterError):
        Thresholds.for_rate(0)


def test_parse_accepts_dict_tuple_and_rejects_junk():
    t = Thresholds(1, 2, 0.5)
    assert Thresholds.parse({"kmin_bytes": 1, "kmax_bytes": 2, "pmax": 0.5}) == t
    assert Thresholds.parse({"kmin": 1, "kmax": 2, "pmax": 0.5}) == t
    assert Thresholds.parse((1, 2, 0.5)) == t
    with pytest.raises(ParameterError):
        Thresholds.parse("1,2")
    with pytest.raises(ParameterError):
        Thresholds.parse({"kmax": 2})


# --- the curve --------------------------------------------------------------------------

def test_curve_at_and_between_thresholds():
    t = Thresholds(100_000, 400_000, 0.2)
    assert mark_probability(0, t) == 0
    assert mark_probability(99_999, t) == 0
    assert mark_probability(100_000, t) == 0            # at Kmin: not yet
    assert mark_probability(175_000, t) == pytest.approx(0.05)
    assert mark_probability(250_000, t) == pytest.approx(0.1)
    assert mark_probability(400_000, t) == pytest.approx(0.2)   # at Kmax: Pmax
    assert mark_probability(400_001, t) == 1.0          # above Kmax: always
    assert mark_probability(10**9, t) == 1.0


def test_curve_is_monotone_between_thresholds():
    t = Thresholds(1000, 5000, 0.7)
    ps = [mark_probability(q, t) for q in range(0, 6000, 37)]
    assert all(a <= b for a, b in zip(ps, ps[1:], strict=False))
    assert max(p for p in ps if p < 1) <= 0.7


def test_step_marking_when_kmin_equals_kmax():
    t = Thresholds.step(30_000)
    assert mark_probability(30_000, t) == 0
    assert mark_probability(30_001, t) == 1.0
    assert mark_probability(0, t) == 0


# --- per tier / per port ----------------------------------------------------------------

def _port(node, ifname, tier, rate_bps=25e9):
    return SimpleNamespace(node=node, ifname=ifname, tier=tier, rate_bps=rate_bps)


def test_policy_precedence_port_then_node_then_tier_then_default_then_rate():
    a, b, c, d = (Thresholds(i, 2 * i, 0.1) for i in (1, 2, 3, 4))
    pol = ThresholdPolicy(default=d, per_tier={"leaf": c}, per_port={"s1:eth0": a, "s2": b})
    assert pol.for_port(_port("s1", "eth0", "leaf")) is a
    assert pol.for_port(_port("s2", "eth7", "leaf")) is b
    assert pol.for_port(_port("s3", "eth0", "leaf")) is c
    assert pol.for_port(_port("s3", "eth0", "spine")) is d
    by_rate = ThresholdPolicy(per_tier={"leaf": (10, 20, 0.5)})
    assert by_rate.for_port(_port("s3", "eth0", "spine", 100e9)) == Thresholds.for_rate(100e9)
    assert by_rate.for_port(_port("s3", "eth0", "leaf")) == Thresholds(10, 20, 0.5)
    assert "per_tier" in by_rate.as_dict()


def test_policy_validates_its_entries():
    with pytest.raises(ParameterError):
        ThresholdPolicy(per_port={"s1": (500, 100, 0.2)})


# --- RED parameters ---------------------------------------------------------------------

def test_red_options_follow_thresholds_with_smallest_burst():
    from emu.ecn.red import red_ewma_log, red_qdisc_options, smallest_burst_pkts
    t = Thresholds(30_000, 90_000, 0.2)
    o = red_qdisc_options(t, rate_emu_bps=10e6, buffer_bytes=200_000, avpkt_bytes=1000)
    assert (o["limit"], o["qth_min"], o["qth_max"]) == (200_000, 30_000, 90_000)
    assert o["max_P"] == round(0.2 * 2**32)
    assert o["burst_pkts"] == smallest_burst_pkts(30_000, 1000) == 30
    # One packet less and the kernel's (and tc's) EWMA condition cannot be met.
    with pytest.raises(ParameterError):
        red_ewma_log(30_000, 29, 1000)
    assert o["Wlog"] == 2  # the largest weight RED allows: closest to the instantaneous queue
    assert len(o["idle_table"]) == 256 and max(o["idle_table"]) <= 31
    assert o["nodrop"] is True


def test_red_cuts_kmax_at_the_buffer_keeping_the_slope():
    from emu.ecn.red import red_qdisc_options
    t = Thresholds(100_000, 400_000, 0.3)
    o = red_qdisc_options(t, rate_emu_bps=10e6, buffer_bytes=250_001)
    assert o["qth_max"] == 250_000
    assert o["max_P"] / 2**32 == pytest.approx(0.15, rel=1e-6)
    with pytest.raises(ParameterError):
        red_qdisc_options(Thresholds(300_000, 400_000, 0.3), 10e6, 250_000)


def test_red_netlink_message_round_trips():
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    from emu.ecn.red import (
        RED_PLUGIN,
        TC_RED_ECN,
        TC_RED_NODROP,
        TC_RED_SUPPORTED_FLAGS,
        red_qdisc_options,
    )
    o = red_qdisc_options(Thresholds(20_000, 60_000, 0.5), 8e6, 100_000)
    msg = tcmsg()
    msg["attrs"] = [["TCA_KIND", "red"], ["TCA_OPTIONS", RED_PLUGIN.get_parameters(o)]]
    msg.encode()
    back = tcmsg(msg.data)
    back.decode()
    opts = back.get_attr("TCA_OPTIONS")
    parms = opts.get_attr("TCA_RED_PARMS")
    assert (parms["limit"], parms["qth_min"], parms["qth_max"]) == (100_000, 20_000, 60_000)
    # nodrop: every flag in TCA_RED_FLAGS, none in the legacy byte (both -> EINVAL)
    assert parms["flags"] == 0 and parms["Wlog"] == o["Wlog"]
    assert opts.get_attr("TCA_RED_MAX_P") == o["max_P"]
    assert len(opts.get_attr("TCA_RED_STAB")) == 256
    flags = opts.get_attr("TCA_RED_FLAGS")
    assert (flags["bits"], flags["selector"]) == (TC_RED_ECN | TC_RED_NODROP, TC_RED_SUPPORTED_FLAGS)


# --- back-end selection -----------------------------------------------------------------

BOTH = {"bpf": {"ok": True}, "red": {"ok": True}}
RED_ONLY = {"bpf": {"ok": False, "why": "no clang"}, "red": {"ok": True}}
NONE = {"bpf": {"ok": False, "why": "no clang"}, "red": {"ok": False, "why": "no sch_red"}}


def test_choose_backend():
    assert choose_backend("auto", BOTH) == "bpf"
    assert choose_backend("auto", RED_ONLY) == "red"
    assert choose_backend("red", BOTH) == "red"
    assert choose_backend("off", NONE) == "off"
    with pytest.raises(CapabilityError, match="no clang.*no sch_red"):
        choose_backend("auto", NONE)
    with pytest.raises(CapabilityError, match="'bpf' is not available: no clang"):
        choose_backend("bpf", RED_ONLY)
    with pytest.raises(ParameterError):
        choose_backend("ecn", BOTH)


# --- the C program ----------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("clang") is None, reason="clang is not installed")
def test_marker_c_compiles_to_a_bpf_object(tmp_path):
    from emu.ecn.bpf import compile_marker
    obj = compile_marker(out_dir=tmp_path)
    data = obj.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert int.from_bytes(data[18:20], "little") == 247  # e_machine = EM_BPF
    for name in (b"fabricemu_mark", b"cfg", b"vq", b"stats", b"trace"):
        assert name in data
    assert compile_marker(out_dir=tmp_path) == obj  # cached by source hash


def test_map_layouts_match_the_c_structs():
    """The ctypes mirrors must have the sizes of the C structs (checked via BTF when clang exists)."""
    import ctypes

    from emu.ecn.bpf import HIST_BUCKETS, _Cfg, _Stats, _VqState
    assert ctypes.sizeof(_Cfg) == 14 * 8
    assert ctypes.sizeof(_VqState) == 8 + 4 * 8
    assert ctypes.sizeof(_Stats) == (6 + HIST_BUCKETS) * 8
    if shutil.which("bpftool") and shutil.which("clang"):
        import subprocess

        from emu.ecn.bpf import compile_marker
        out = subprocess.run(["bpftool", "btf", "dump", "file", str(compile_marker())],
                             capture_output=True, text=True).stdout
        for name, struct_ in (("cfg", _Cfg), ("vq_state", _VqState), ("stats", _Stats)):
            assert f"STRUCT '{name}' size={ctypes.sizeof(struct_)}" in out

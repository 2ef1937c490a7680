"""The engine's congestion-control wiring without a fabric: every setting traffic.ccload
resolves is accepted (and checked) by EngineConfig before anything is built, the worker
plans carry the factory and the responder's ACK policy, and a QP's algorithm is built at
the NIC's real line rate."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from core.errors import ParameterError
from core.messages import Message, Workload
from core.scaling import Scale
from emu.fabric import Egress, HostEndpoint
from emu.ports import Port
from engine.run import DEFAULT_ACK_DELAY_S, EngineConfig, FixedDelays, _plans
from topologies.routing import compute_routes
from topologies.spec import build_topo
from traffic.cc import Dcqcn, LineRate
from traffic.ccalgos import Dctcp, Swift, Timely
from traffic.ccload import CcFactory, resolve_cc
from traffic.dcqcn import PARAMS

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "cc" / "my_aimd.py")


class _Fabric:
    """Two hosts at 100G (real), S = 1000: what the planner reads of a live fabric
    (the topology and routes give the paths' base round trip)."""

    hosts = ["h1", "h2"]
    scale = Scale(1000)
    topo = build_topo("leafspine,1,1,2")
    routes = compute_routes(topo)
    receive_cpu: dict[str, int] = {}
    pfc = None

    def ports(self) -> list[Port]:
        return [Port(h, "eth0", 2, f"/run/netns/{h}", "l1", 100e9, 100e6, 1 << 21, "host-leaf",
                     False) for h in self.hosts]

    def egress(self, src_host: str, dst_host: str) -> Egress:
        return Egress("eth0", "02:00:00:00:00:01", "02:00:00:00:00:02", f"10.0.0.{src_host[1]}",
                      f"10.0.0.{dst_host[1]}")

    def endpoint(self, host: str) -> HostEndpoint:
        return HostEndpoint(host, f"/run/netns/{host}", f"10.0.0.{host[1]}")


def test_algorithms_that_take_a_base_rtt_get_the_paths():
    # h1 -> l1 -> h2 and back (400G hosts): a full frame and an ACK, store and forward.
    want_s = FixedDelays(_Fabric(), "store-and-forward").base_rtt_s("h1", "h2")
    assert 0 < want_s < 5e-6
    for cc in ("hpcc", "dctcp", "swift"):
        p = _plan(EngineConfig(cc=cc))
        assert p.sends[0].base_rtt_s == want_s
        assert p.cc(100e9, 0.0, p.sends[0].base_rtt_s).base_rtt_s == want_s
    assert _plan(EngineConfig(cc="paper")).sends[0].base_rtt_s is None
    # A setting that names its own T keeps it.
    p = _plan(EngineConfig(cc="hpcc,base_rtt_s=7us"))
    assert p.cc(100e9, 0.0, p.sends[0].base_rtt_s).base_rtt_s == pytest.approx(7e-6)


def test_swift_gets_the_switches_on_its_path_unless_the_setting_names_them():
    # leafspine,1,1,2: h1 -> l1 -> h2 crosses one switch (Swift's default assumes 5).
    assert FixedDelays(_Fabric(), "store-and-forward").switches("h1", "h2") == 1
    p = _plan(EngineConfig(cc="swift"))
    assert p.sends[0].hops == 1
    swift = p.cc(100e9, 0.0, p.sends[0].base_rtt_s, p.sends[0].hops)
    assert swift.hops == 1
    assert swift.target_for(1.0, swift.hops) < swift.target_for(1.0, 5)
    p = _plan(EngineConfig(cc="swift,hops=3"))
    assert p.cc(100e9, 0.0, p.sends[0].base_rtt_s, p.sends[0].hops).hops == 3
    # Algorithms without a hop count are not given one.
    assert _plan(EngineConfig(cc="hpcc")).sends[0].hops is None


def _plan(config: EngineConfig):
    # The fixed delays read the topology and routes, which this stand-in has none of;
    # they are tested on their own (test_fixeddelay).
    config = replace(config, fixed_delays=False)
    wl = Workload("w", [Message(1, "h1", "h2", 1 << 20)], ["h1", "h2"], 1 << 20)
    plans = _plans(_Fabric(), wl, config, {1: 0}, 0)
    return next(p for p in plans if p.sends)


@pytest.mark.parametrize(("spec", "cls"), [("dctcp", Dctcp), ("TIMELY", Timely), ("swift", Swift),
                                           ("off", LineRate), (None, LineRate), ("dcqcn", Dcqcn),
                                           ("paper", Dcqcn), ("nic", Dcqcn),
                                           (PARAMS["nic"], Dcqcn)])
def test_every_setting_reaches_the_plan_and_builds_at_the_real_line_rate(spec, cls):
    plan = _plan(EngineConfig(cc=spec))
    assert isinstance(plan.cc, CcFactory)
    nic = plan.nics[0]
    cc = plan.cc(nic.rate_bps, 0.0)                 # what the worker does per QP
    assert isinstance(cc, cls)
    assert nic.rate_bps == 100e9 and cc.rate_bps <= 100e9   # real, never the shaped 100 Mb/s
    assert cc.rate_bps > 1e9


def test_a_users_class_and_a_factory_with_parameters():
    plan = _plan(EngineConfig(cc=f"{EXAMPLE}:MyAimd"))
    assert plan.cc.name == "my_aimd.py:MyAimd" and plan.cc(100e9).rate_bps == 100e9
    factory = resolve_cc("swift", {"base_rtt_s": 4e-6})
    assert _plan(EngineConfig(cc=factory)).cc(100e9).base_rtt_s == 4e-6


@pytest.mark.parametrize(("spec", "why"), [
    ("bogus", "expected one of"),
    ("nosuch.py:Cc", "no such file"), (3, "expected one of")])
def test_bad_settings_fail_in_the_config_before_anything_is_built(spec, why):
    with pytest.raises(ParameterError, match=why) as err:
        EngineConfig(cc=spec)
    assert err.value.name == "cc" and "\n" not in str(err.value)


def test_cnp_interval_follows_dcqcn_and_the_paper_otherwise():
    assert _plan(EngineConfig(cc="nic")).cnp_interval_s == PARAMS["nic"].cnp_interval_s
    assert _plan(EngineConfig(cc="dctcp")).cnp_interval_s == PARAMS["paper"].cnp_interval_s


def test_ack_policy_by_algorithm_and_by_setting():
    # DCQCN and off keep the ACKs they had: coalesced only, no CE flush, no timer.
    for cc in ("paper", "nic", "off", None):
        plan = _plan(EngineConfig(cc=cc))
        assert (plan.ack_coalesce, plan.ce_ack, plan.ack_delay_s) == (16, False, None)
    # ACK-clocked algorithms get exact echoes and the delayed ACK.
    for cc in ("dctcp", "timely", "swift", f"{EXAMPLE}:MyAimd"):
        plan = _plan(EngineConfig(cc=cc))
        assert (plan.ce_ack, plan.ack_delay_s) == (True, DEFAULT_ACK_DELAY_S)
    plan = _plan(EngineConfig(cc="dctcp", ack_coalesce="message", ack_on_ce_change=False,
                              ack_delay_s=math.inf))
    assert (plan.ack_coalesce, plan.ce_ack, plan.ack_delay_s) == (0, False, None)
    assert _plan(EngineConfig(cc="paper", ack_coalesce=4, ack_delay_s=2e-6)).ack_delay_s == 2e-6
    # HPCC reads the INT of every frame: one ACK per frame unless told otherwise.
    assert _plan(EngineConfig(cc="hpcc")).ack_coalesce == 1
    assert _plan(EngineConfig(cc="hpcc", ack_coalesce=4)).ack_coalesce == 4


@pytest.mark.parametrize(("kw", "name"), [
    ({"ack_coalesce": 0}, "ack_coalesce"), ({"ack_coalesce": "msg"}, "ack_coalesce"),
    ({"ack_coalesce": True}, "ack_coalesce"), ({"ack_delay_s": 0.0}, "ack_delay_s"),
    ({"ack_on_ce_change": "yes"}, "ack_on_ce_change")])
def test_bad_ack_settings_are_refused(kw, name):
    with pytest.raises(ParameterError) as err:
        EngineConfig(**kw)
    assert err.value.name == name

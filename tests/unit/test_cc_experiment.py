"""`emu run cc` without a fabric: who sends what to whom, the settling time from
delivered frames, option checks and the comparison tables the report prints."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from core.errors import ParameterError
from core.scaling import Scale
from engine.stats import EngineStats
from experiments import cc_compare, longflows
from experiments.measure import Measurement
from experiments.options import resolve_typed
from experiments.report import cc_tables, peak_vs_dcqcn
from topologies.routing import topo_graph
from topologies.spec import build_topo
from traffic.ccload import resolve_cc


def _roles(spec: str, senders: int) -> cc_compare.Roles:
    topo = build_topo(spec)
    return cc_compare.roles(topo_graph(topo), list(topo.host_nodes()), senders)


def test_roles_put_the_victim_behind_the_senders_uplink_and_off_the_bottleneck():
    r = _roles("leafspine,3,1,3,host_rate=100G", 4)
    # Receiver h9 on l3; senders: l1's hosts but the victim, then h9's leaf-mates.
    assert r.receiver == "h9" and r.senders == ("h1", "h2", "h7", "h8")
    assert r.victim == ("h3", "h4")               # l1 -> l2: shares l1's uplink, not l3 -> h9
    assert _roles("leafspine,3,1,3,host_rate=100G", 2).senders == ("h1", "h2")
    assert _roles("leafspine,4,1,4", 6).senders == ("h1", "h2", "h3", "h13", "h14", "h15")


@pytest.mark.parametrize(("spec", "senders", "option"), [
    ("leafspine,3,1,3,host_rate=100G", 5, "senders"),   # only 4 fit
    ("leafspine,2,1,4", 2, "topo"),                      # no third leaf for the victim
    ("leafspine,3,1,1", 1, "topo"),                      # the victim's leaf has one host
])
def test_topologies_without_room_for_the_scenario_are_refused(spec, senders, option):
    with pytest.raises(ParameterError) as err:
        _roles(spec, senders)
    assert err.value.name == option


def test_options_check_flows_against_senders():
    with pytest.raises(ParameterError) as err:
        resolve_typed(cc_compare.Options, cc_compare.OPTIONS, True,
                      {"senders": "2", "flows": "3"}, cc_compare.check)
    assert err.value.name == "flows"
    _, opts = resolve_typed(cc_compare.Options, cc_compare.OPTIONS, True, {}, cc_compare.check)
    assert opts.algorithms == ["off", "dcqcn", "dctcp", "timely", "swift", "hpcc"]
    assert opts.size == 256 << 10


def _measurement(arrivals: dict[int, list[float]], end_s: float) -> Measurement:
    lat = pd.DataFrame([{"msg_id": f, "t_s": t, "one_way_s": 0.0, "ce": False}
                        for f, ts in arrivals.items() for t in ts])
    msgs = pd.DataFrame({"msg_id": list(arrivals), "end_s": [end_s] * len(arrivals)})
    return Measurement(msgs, lat, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                       EngineStats(True, None, Scale(), 0.0, 0.0, [], 0), 0.0)


def test_settling_time_is_the_end_of_the_last_unfair_bin():
    us = 1e-6
    even = {f: list(np.arange(0, 100, 1.0) * us + f * 0.1 * us) for f in range(3)}
    assert cc_compare.convergence_s(_measurement(even, 100 * us), [0, 1, 2], 10 * us) == 0.0
    # Flow 2 joins at 0 but gets nothing more until 25 us, then its share: bins 0-2
    # (the third: 5 frames against 10, Jain 0.93) are unfair.
    late = {**even, 2: [0.0] + [t for t in even[2] if t >= 25 * us]}
    assert cc_compare.convergence_s(_measurement(late, 100 * us), [0, 1, 2], 10 * us) == \
        pytest.approx(30 * us)
    # Never settled: the last bin before the first completion is unfair.
    starved = {**even, 2: [t for t in even[2] if t < 50 * us]}
    starved[2].append(0.0)
    assert math.isnan(cc_compare.convergence_s(_measurement(starved, 100 * us), [0, 1, 2], 10 * us))


def test_comparison_tables_per_scenario_with_the_verdicts():
    df = pd.DataFrame([
        {"case": "incast cc=off pfc=on", "scenario": "incast", "cc": "off", "pfc": True,
         "completion_us": 84.6, "drops": 0.0, "pauses": 74.0, "victim_fct_us": 59.6,
         "incast_gbps": 49.6, "bottleneck_share": 0.506},
        {"case": "fairness cc=dctcp", "scenario": "fairness", "cc": "dctcp", "pfc": False,
         "jain": 0.98, "convergence_us": float("nan")},
        {"case": "steady cc=hpcc", "scenario": "steady", "cc": "hpcc", "pfc": False,
         "flows": 2.0, "mean_queue_KB": 0.03, "aggregate_gbps": 91.0, "drops": 0.0}])
    tables = cc_tables(df, {"incast cc=off pfc=on": {"valid": True},
                            "fairness cc=dctcp": {"valid": False},
                            "steady cc=hpcc": {"valid": True}}, width=1000)
    assert [t.title.split(", ")[1].split(" ")[0] for t in tables] == ["incast", "fairness",
                                                                     "steady"]
    incast_cells = {c.header: c._cells[0] for c in tables[0].columns}
    assert incast_cells["PFC"] == "on" and incast_cells["PAUSEs"] == "74"
    assert incast_cells["drops"] == "0" and "yes" in incast_cells["valid"]
    assert incast_cells["incast (Gb/s)"] == "49.6"
    steady_cells = {c.header: c._cells[0] for c in tables[2].columns}
    assert steady_cells["flows"] == "2" and steady_cells["aggregate (Gb/s)"] == "91.0"
    fair_cells = {c.header: c._cells[0] for c in tables[1].columns}
    assert fair_cells["convergence (us)"] == "n/a" and "no" in fair_cells["valid"]


def test_the_incast_table_sets_each_peak_queue_beside_dcqcns_with_the_same_pfc():
    df = pd.DataFrame([
        {"case": f"incast cc={cc} pfc={pfc}", "scenario": "incast", "cc": cc, "pfc": pfc,
         "peak_queue_KB": peak}
        for cc, pfc, peak in (("dcqcn", False, 1000.0), ("hpcc", False, 85.0),
                              ("dcqcn", True, 500.0), ("hpcc", True, 100.0))])
    incast = df[df.scenario == "incast"]
    assert list(peak_vs_dcqcn(incast)) == pytest.approx([1.0, 0.085, 1.0, 0.2])
    cells = {c.header: c._cells for c in cc_tables(df, {}, width=1000)[0].columns}
    assert cells["peak ÷ DCQCN's"] == ["1.000", "0.085", "1.000", "0.200"]
    # Without DCQCN in the run there is nothing to compare with.
    assert peak_vs_dcqcn(incast[incast.cc == "hpcc"]).isna().all()


def test_oscillation_senders_are_the_largest_group_at_one_round_trip():
    hops = {"h1": 4, "h2": 4, "h3": 4, "h4": 4, "h7": 2, "h8": 2, "h9": 0}
    group = longflows.same_rtt_senders(list(hops), "h9", lambda h: hops[h] * 1e-6)
    assert group == ["h1", "h2", "h3", "h4"]
    # on a tie, the longer round trip
    assert longflows.same_rtt_senders(["a", "b", "c", "d", "r"], "r",
                               {"a": 1e-6, "b": 1e-6, "c": 2e-6, "d": 2e-6}.get) == ["c", "d"]


def test_sawtooth_of_a_synthetic_queue():
    # 5 cycles of 10 us: a linear climb from 20 KB to 50 KB, then an instant fall,
    # sampled at uneven instants and in whole 4154 B frames
    rng = np.random.default_rng(1)
    t = np.sort(rng.uniform(0, 50e-6, 600))
    q = 20e3 + 30e3 * ((t % 10e-6) / 10e-6)
    saw = longflows.sawtooth(t, q)
    assert saw.amplitude_bytes == pytest.approx(30e3, rel=0.03)
    assert saw.mean_bytes == pytest.approx(35e3, rel=0.02)
    assert saw.p5_bytes == pytest.approx(21.5e3, rel=0.05)
    assert saw.p95_bytes == pytest.approx(48.5e3, rel=0.02)
    assert saw.period_s == pytest.approx(10e-6, rel=0.05)
    framed = longflows.sawtooth(t, np.round(q / 4154) * 4154)
    assert framed.amplitude_bytes == pytest.approx(30e3, rel=0.05)
    assert framed.period_s == pytest.approx(10e-6, rel=0.05)
    # two cycles do not make a period; a flat queue has none and no amplitude
    assert math.isnan(longflows.sawtooth(t[t < 20e-6], q[t < 20e-6]).period_s)
    flat = longflows.sawtooth(t, np.full_like(t, 5e3))
    assert flat.amplitude_bytes == 0 and math.isnan(flat.period_s)
    assert math.isnan(longflows.sawtooth([0.0], [1.0]).mean_bytes)


def test_the_oscillation_case_runs_for_dctcp_only_and_its_k_is_checked():
    def kinds(setting: str) -> tuple[str, ...]:
        return cc_compare.scenarios_of("auto", resolve_cc(setting), False)

    assert kinds("dctcp") == ("incast", "fairness", "oscillation")
    assert "oscillation" not in kinds("dcqcn") + kinds("hpcc")
    assert resolve_cc("dctcp").oscillation_model == "model.dctcp_oscillation.dctcp_oscillation"
    with pytest.raises(ParameterError, match="osc_k"):
        resolve_typed(cc_compare.Options, cc_compare.OPTIONS, False,
                      {"algorithms": "dctcp", "osc_k": "1M", "buffer": "512K"}, cc_compare.check)


def test_the_steady_case_runs_for_hpcc_only():
    assert resolve_cc("hpcc").steady_model and resolve_cc("hpcc,eta=0.9").steady_model
    assert not any(resolve_cc(x).steady_model for x in ("off", "dcqcn", "paper", "dctcp", "swift"))
    assert "steady" in cc_compare.scenarios_of("auto", resolve_cc("hpcc"), False)
    assert cc_compare.scenarios_of("auto", resolve_cc("hpcc"), True) == ("incast",)


def test_an_ideal_control_is_scaled_by_the_share_an_algorithm_aims_at():
    assert resolve_cc("hpcc").target_utilisation == pytest.approx(0.95)
    assert resolve_cc("hpcc,eta=0.9").target_utilisation == pytest.approx(0.9)
    assert all(resolve_cc(x).target_utilisation == 1.0 for x in ("off", "dcqcn", "dctcp", "swift"))


def test_capabilities_are_the_class_s_own_and_off_is_a_property(tmp_path):
    """A subclass changes the algorithm: it does not inherit its parent's model."""
    (tmp_path / "sub.py").write_text("from traffic.ccalgos import Hpcc\n"
                                     "class MyHpcc(Hpcc):\n    pass\n")
    assert resolve_cc(f"{tmp_path / 'sub.py'}:MyHpcc").steady_model is None
    assert resolve_cc("off").is_off and resolve_cc(None).is_off
    assert not any(resolve_cc(x).is_off for x in ("dcqcn", "nic", "dctcp", "hpcc"))

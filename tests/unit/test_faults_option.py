"""The common ``faults`` option (experiments.options, experiments.faultrun): every
experiment takes it, records it normalised, refuses unknown nodes and links of its
fabrics before anything is built, and each case refuses a fault that starts after
its modelled end. No kernel: the time check comes before any injector."""

from __future__ import annotations

import pytest

from core.errors import ParameterError
from core.messages import Message, Workload
from experiments.faultrun import injected, planned
from experiments.options import resolve_typed
from experiments.registry import EXPERIMENTS
from topologies.routing import compute_routes, topo_graph
from topologies.spec import build_topo


def resolve(name: str, **overrides: str):
    module = EXPERIMENTS[name]
    return resolve_typed(module.Options, module.OPTIONS, True, overrides, module.check)


@pytest.mark.parametrize("name", ["incast", "fairness", "sweep", "demo"])
def test_every_experiment_takes_faults_and_records_them_normalised(name):
    raw, opts = resolve(name, faults=" agg1-core2 : down@50us ; edge3-agg3:rate=25%@0",
                        detect_delay="1ms", holddown="250us")
    assert raw["faults"] == "edge3-agg3:rate=0.25@0us;agg1-core2:down@50us" == opts.faults
    assert opts.detect_delay == pytest.approx(1e-3)
    assert raw["holddown"] == opts.holddown == pytest.approx(250e-6)
    assert resolve(name)[1].faults == "none"
    assert resolve(name)[1].holddown == pytest.approx(1e-3)


@pytest.mark.parametrize(("name", "faults", "why"), [
    ("incast", "a1-z9:down@10us", "no node 'z9'"),
    ("incast", "agg2-core1:down@10us", "no link a2-c1"),
    ("fairness", "h1:down@1us", "a host is not a switch"),
    ("collective", "a1-c1:down@10us", "no node"),  # its dragonfly has no a1
    ("ecmp", "a1-c1:explode@1us", "faults"),
])
def test_unknown_nodes_and_links_are_one_line_errors(name, faults, why):
    with pytest.raises(ParameterError, match=why) as e:
        resolve(name, faults=faults)
    assert "\n" not in str(e.value) and "faults" in str(e.value)


def test_a_bad_detection_delay_or_holddown_is_refused():
    with pytest.raises(ParameterError, match="detect_delay"):
        resolve("incast", detect_delay="-3us")
    with pytest.raises(ParameterError, match="holddown"):
        resolve("incast", holddown="-3us")


class FakeFabric:
    """What `injected` reads of a fabric before it touches one: topology and routes."""

    def __init__(self, spec: str) -> None:
        self.topo = build_topo(spec)
        self.routes = compute_routes(self.topo)


def test_a_fault_after_the_cases_modelled_end_is_refused_before_any_injector():
    fab = FakeFabric("leafspine,2,2,2")
    one = Workload("one", [Message(0, "h1", "h4", 1 << 20)], ["h1", "h4"], 1 << 20)
    with planned("l1-s1:down@1ms", 0.0), pytest.raises(ParameterError, match="after one"), \
            injected(fab, one, topo_graph(fab.topo)):
        pytest.fail("the case must not run")
    with planned("none", 0.0), injected(fab, one, topo_graph(fab.topo)) as injector:
        assert injector is None
    with injected(fab, one, topo_graph(fab.topo)) as injector:  # no plan at all
        assert injector is None


def test_a_switch_the_case_fabric_lacks_is_refused_when_measured():
    fab = FakeFabric("leafspine,2,2,2")
    one = Workload("one", [Message(0, "h1", "h4", 1 << 20)], ["h1", "h4"], 1 << 20)
    with planned("a1:down@1us", 0.0), pytest.raises(ParameterError, match="no node 'a1'"), \
            injected(fab, one, topo_graph(fab.topo)):
        pytest.fail("the case must not run")


def test_measure_without_faults_or_hook_runs_the_case_once_as_it_is(monkeypatch):
    from experiments import measure as measure_module

    calls = []

    def run_once(fab, workload, config, watch, interval, capture, during):
        calls.append(during)
        return measure_module.Measurement(*([None] * 7))

    monkeypatch.setattr(measure_module, "_measure", run_once)
    fab = FakeFabric("leafspine,2,2,2")
    one = Workload("one", [Message(0, "h1", "h4", 1 << 20)], ["h1", "h4"], 1 << 20)
    m = measure_module.measure(fab, one, None)
    assert calls == [None] and m.fault_events is None
    hook = calls.append
    measure_module.measure(fab, one, None, during=hook)
    assert calls == [None, hook]


def test_the_frames_the_faults_cost_reach_the_gate_as_drops(monkeypatch):
    """with_faults hands the injector's count of lost frames to the measurement, whose
    gate counts them as drops; without them, retransmissions stay unexplained."""
    from emu.lossledger import Lost
    from experiments import faultrun
    from experiments.fidelity import evaluate
    from experiments.measure import Measurement

    class Injector:
        error = None

        def __init__(self, fab, faults, detect_delay_s, holddown_s):
            assert (detect_delay_s, holddown_s) == (0.0, 2e-3)  # as planned
            self.restored = False

        def watch(self, shared):
            pass

        def lost_frames(self):
            assert not self.restored  # read before the fabric is put back
            return Lost(no_route=3, at_ports=2, filtered=1)

        def links_taken_down(self):
            return frozenset({frozenset(("l1", "s1"))})

        def events(self):
            return "events"

        def restore(self):
            self.restored = True

    monkeypatch.setattr(faultrun, "FaultInjector", Injector)
    fab = FakeFabric("leafspine,2,2,2")
    one = Workload("one", [Message(0, "h1", "h4", 1 << 20)], ["h1", "h4"], 1 << 20)
    with planned("l1-s1:down@1us", 0.0, 2e-3):
        m = faultrun.with_faults(fab, one, topo_graph(fab.topo),
                                 lambda hook: Measurement(*([None] * 7)))
    assert m.failure_drops == 6 and m.fault_events == "events"
    assert m.links_down == {frozenset(("l1", "s1"))}  # the gate's ECMP check spares them
    assert Measurement(*([None] * 7)).failure_drops == 0  # no faults: nothing to explain

    from tests.unit.test_fidelity import measures
    assert evaluate(measures(retransmitted=40, fabric_drops=m.failure_drops)).valid
    assert not evaluate(measures(retransmitted=40, fabric_drops=0)).valid

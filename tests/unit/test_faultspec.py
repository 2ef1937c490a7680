"""Fault specs (topologies.faultspec): the parser ends in Faults or a ParameterError, the
topology check names what is unknown, and the timeline's physical changes and
detections come in order, at the right times, without loops or lasting black holes."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ParameterError
from topologies.fattree import FatTree
from topologies.faultspec import (
    Fault,
    check_times,
    format_faults,
    held_down_from,
    links_going_down,
    parse_faults,
    resolve,
    timeline,
)
from topologies.routing import compute_routes

TOPO = FatTree(4)


def test_every_kind_parses():
    faults = parse_faults("a1-c2:down@50us;e3:down@80us;a2-c3:rate=25%@0;"
                          "a3-c1:flap=20us/10us@0;e1-a1:up@120us;a1-c1:loss=1e-3@0")
    assert [f.kind for f in faults] == ["rate", "flap", "loss", "down", "down", "up"]
    rate, flap, loss = faults[:3]
    assert rate.value == 0.25 and rate.nodes == ("a2", "c3") and rate.at_s == 0
    assert (flap.up_s, flap.down_s) == pytest.approx((20e-6, 10e-6))
    assert loss.value == 1e-3
    assert faults[3].at_s == pytest.approx(50e-6) and faults[4].nodes == ("e3",)
    assert format_faults(parse_faults(format_faults(faults))) == format_faults(faults)
    assert parse_faults("none") == [] and parse_faults("") == []


@pytest.mark.parametrize("text, why", [
    ("a1-c2:down", "TARGET:ACTION@TIME"),
    ("a1-c2:explode@1us", "unknown action"),
    ("a1-c2:rate=0@1us", "above 0"),
    ("a1-c2:rate=150%@1us", "at most 100%"),
    ("a1-c2:loss=2@1us", "loss="),
    ("a1-c2:flap=20us@0", "UP/DOWN"),
    ("a1:rate=50%@0", "applies to a link"),
    ("a1-a1:down@0", "two different"),
    ("a1-c2:down=3@0", "no value"),
    ("a1-c2:down@-1us", "duration"),
])
def test_malformed_items_are_one_line_errors(text, why):
    with pytest.raises(ParameterError, match=why) as e:
        parse_faults(text)
    assert "\n" not in str(e.value)


def test_resolve_takes_names_and_role_aliases_and_refuses_the_unknown():
    (f,) = resolve(parse_faults("agg1-core2:down@50us"), TOPO)
    assert f.nodes == ("a1", "c2")
    with pytest.raises(ParameterError, match="no link a2-c1"):
        resolve(parse_faults("agg2-core1:down@0"), TOPO)
    with pytest.raises(ParameterError, match="no node 'x9'"):
        resolve(parse_faults("x9-c1:down@0"), TOPO)
    with pytest.raises(ParameterError, match="not a switch"):
        resolve(parse_faults("h1:down@0"), TOPO)
    # An edge switch down for good cuts its hosts off; brought back, it does not.
    with pytest.raises(ParameterError, match="without a path"):
        resolve(parse_faults("e3:down@80us"), TOPO)
    resolve(parse_faults("e3:down@80us;e3:up@200us"), TOPO)
    with pytest.raises(ParameterError, match="after the run ends"):
        check_times(parse_faults("a1-c2:down@5ms"), 1e-3, "the run")


ITEM = st.text(alphabet="ace hx0123456789-:@=/%.;unpdowratelsfn", max_size=40)


@settings(max_examples=400, deadline=None)
@given(st.one_of(ITEM, st.lists(ITEM, max_size=4).map(";".join)))
def test_the_parser_ends_in_faults_or_a_parameter_error(text):
    try:
        faults = parse_faults(text)
    except ParameterError as e:
        assert "\n" not in str(e)
        return
    assert all(isinstance(f, Fault) for f in faults)
    again = parse_faults(format_faults(faults))
    assert [(f.kind, f.nodes) for f in again] == [(f.kind, f.nodes) for f in faults]
    assert [f.at_s for f in again] == pytest.approx([f.at_s for f in faults])
    try:
        resolve(faults, TOPO)
    except ParameterError as e:
        assert "\n" not in str(e)


def actions(text, delay_s, until_s=1.0, holddown_s=0.0):
    faults = resolve(parse_faults(text), TOPO)
    return list(itertools.takewhile(lambda a: a.at_s <= until_s,
                                    timeline(faults, TOPO, delay_s, holddown_s)))


def at_us(got):
    return [(round(a.at_s * 1e6, 3), a.op, a.up) for a in got]


def test_a_link_back_up_is_readmitted_after_the_holddown_by_its_ends_then_the_fabric():
    got = at_us(actions("a1-c2:down@50us;a1-c2:up@1ms", 100e-6, holddown_s=300e-6))
    assert got == [(50, "link", False), (150, "learn", False), (1300, "link", True),
                   (1400, "learn", True)]


def test_a_flap_is_held_down_from_its_first_down_until_the_holddown_after_it_ends():
    text = "a3-c1:flap=20us/10us@0;a3-c1:up@500us"
    got = at_us(actions(text, 50e-6, holddown_s=100e-6))
    assert got == [(20, "link", False), (70, "learn", False), (600, "link", True),
                   (650, "learn", True)]
    (flap, _) = resolve(parse_faults(text), TOPO)
    assert held_down_from(flap, 100e-6) == pytest.approx(20e-6)
    # an up phase as long as the hold-down: the down at its end comes first
    assert at_us(actions("a3-c1:flap=100us/10us@0", 50e-6, until_s=1e-3, holddown_s=100e-6)) \
        == [(100, "link", False), (150, "learn", False)]
    assert held_down_from(flap, 20e-6) == pytest.approx(20e-6)


def test_an_up_phase_longer_than_the_holddown_readmits_the_link():
    got = at_us(actions("a3-c1:flap=100us/10us@0", 5e-6, until_s=260e-6, holddown_s=40e-6))
    assert got == [(100, "link", False), (105, "learn", False), (150, "link", True),
                   (155, "learn", True), (210, "link", False), (215, "learn", False),
                   (260, "link", True)]
    (flap,) = resolve(parse_faults("a3-c1:flap=100us/10us@0"), TOPO)
    assert held_down_from(flap, 40e-6) is None
    assert held_down_from(flap, 0.0) is None
    assert held_down_from(resolve(parse_faults("a3-c1:down@0"), TOPO)[0], 1.0) is None


def test_a_switch_back_up_holds_each_of_its_links_down():
    got = actions("c1:down@10us;c1:up@500us", 0.0, holddown_s=200e-6)
    ups = {round(a.at_s * 1e6, 3) for a in got if a.up}
    assert ups == {700.0} and sum(a.up for a in got) == 8


def test_a_link_up_again_before_detection_is_never_learned():
    got = [(a.op, a.up) for a in actions("a1-c2:down@50us;a1-c2:up@1ms", 3e-3)]
    assert got == [("link", False), ("link", True)]


def test_learned_down_then_up():
    got = [(round(a.at_s * 1e6, 3), a.op, a.up) for a in
           actions("a1-c2:down@50us;a1-c2:up@1ms", 100e-6)]
    assert got == [(50, "link", False), (150, "learn", False), (1000, "link", True),
                   (1100, "learn", True)]


def test_a_flap_shorter_than_detection_is_never_learned():
    got = actions("a3-c1:flap=20us/10us@0", 50e-6, until_s=200e-6)
    assert {a.op for a in got} == {"link"}
    downs = [a.at_s for a in got if not a.up]
    assert downs[:3] == pytest.approx([20e-6, 50e-6, 80e-6])
    learned = actions("a3-c1:flap=20us/10us@0", 5e-6, until_s=200e-6)
    assert [a.up for a in learned if a.op == "learn"][:4] == [False, True, False, True]


def test_a_switch_down_takes_each_of_its_links():
    got = actions("c1:down@10us;c1:up@500us", 0.0)
    downs = {a.link for a in got if a.op == "link" and not a.up}
    assert downs == {frozenset(("c1", a)) for a in ("a1", "a3", "a5", "a7")}
    assert sum(a.op == "learn" for a in got) == 8


def test_the_links_that_may_go_down_are_those_the_timeline_takes_down():
    text = ("c1:down@10us;c1:up@500us;e3-a4:flap=20us/10us@0;a1-c2:down@5us;"
            "a2-c3:rate=25%@0;a3-c1:loss=1e-3@0;e1-a1:up@1us")
    faults = resolve(parse_faults(text), TOPO)
    expected = {frozenset(("c1", a)) for a in ("a1", "a3", "a5", "a7")}
    expected |= {frozenset(("e3", "a4")), frozenset(("a1", "c2"))}
    assert links_going_down(faults, TOPO) == expected
    downs = {a.link for a in itertools.islice(timeline(faults, TOPO, 0.0), 200)
             if a.op == "link" and not a.up}
    assert downs == expected
    assert links_going_down(resolve(parse_faults("a2-c3:rate=25%@0"), TOPO), TOPO) == set()


@pytest.mark.parametrize("link", [("a1", "c2"), ("e3", "a4"), ("e1", "a1")])
@pytest.mark.parametrize("delay_s", [0.0, 50e-6])
def test_no_phase_loops_and_no_black_hole_outlives_detection(link, delay_s):
    """Before detection the ends drop the dead hop (a subset of the old next hops:
    still loop-free); after it every host that has a path is reachable again."""
    a, b = link
    full = compute_routes(TOPO)
    local = {n: {d: tuple(h for h in hops if {n, h} != {a, b}) for d, hops in t.items()}
             for n, t in full.next_hops.items()}
    after = compute_routes(TOPO, frozenset({frozenset(link)})).next_hops
    for table in (local, after):
        for dst in TOPO.hosts():
            for start in table:
                path, node = [start], start
                for _ in range(len(table)):
                    hops = table[node].get(dst)
                    if node == dst or not hops:
                        break
                    node = hops[0]
                    assert node not in path, f"loop toward {dst}: {path + [node]}"
                    path.append(node)
    routes = compute_routes(TOPO, frozenset({frozenset(link)}))
    for src, dst in itertools.permutations(TOPO.hosts(), 2):
        assert routes.paths(src, dst)
    got = actions(f"{a}-{b}:down@10us", delay_s)
    assert [(a_.op, a_.up) for a_ in got] == [("link", False), ("learn", False)]


LINKS = [f"{a}-{b}" for a, b in TOPO.links()]
ACTIONS = st.one_of(st.sampled_from(["down", "up"]),
                    st.integers(1, 100).map(lambda p: f"rate={p}%"),
                    st.sampled_from(["1e-3", "0.5", "0", "1"]).map(lambda p: f"loss={p}"),
                    st.tuples(st.integers(1, 99), st.integers(1, 99)).map(
                        lambda t: f"flap={t[0]}us/{t[1]}us"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(LINKS), ACTIONS, st.integers(0, 10_000)),
                min_size=1, max_size=5))
def test_well_formed_link_faults_parse_to_their_values(items):
    text = ";".join(f"{link}:{action}@{t}ns" for link, action, t in items)
    try:
        faults = resolve(parse_faults(text), TOPO)
    except ParameterError as e:  # only a host cut off for good is refused
        assert "without a path" in str(e)
        return
    assert sorted(f.at_s for f in faults) == pytest.approx(sorted(t * 1e-9 for *_, t in items))
    got = list(itertools.takewhile(lambda a: a.at_s < 1e-3, timeline(faults, TOPO, 1e-5)))
    assert [a.at_s for a in got] == sorted(a.at_s for a in got)


def test_a_node_never_gets_a_next_hop_over_a_dead_link():
    from emu.iproute_plan import route_specs
    from topologies.addressing import plan_addresses

    plan = plan_addresses(TOPO)
    routes = compute_routes(TOPO)
    full = route_specs(TOPO, plan, routes, "a1")
    local = route_specs(TOPO, plan, routes, "a1", dead_peers={"c1"})
    dev = plan.iface("a1", "c1").ifname
    assert any(dev in how for how in full.values())
    assert not any(dev in how for how in local.values())
    assert set(local) == set(full)  # c2 is left for every destination
    only = route_specs(TOPO, plan, routes, "c1", dead_peers={"a1"})
    assert plan.host_ip["h1"] + "/32" not in only  # its one next hop gone: no route


def test_rate_changes_and_loss_thresholds():
    from emu.linkloss import threshold_of
    from emu.shaping import rate_change

    line = rate_change("a1-eth3", 40e6, 24)
    assert line.startswith("class change dev a1-eth3 parent 1: classid 1:10 htb rate 40000000bit")
    assert "ceil 40000000bit" in line and "overhead 24" in line
    assert threshold_of(1.0) == 2**32 and threshold_of(0.0) == 0
    assert threshold_of(1e-3) == round(2**32 / 1000)


def test_a_flap_behind_a_switch_down_for_good_ends_the_timeline_instead_of_spinning():
    faults = resolve(parse_faults("a1-c1:flap=20us/10us@0;c1:down@5us"), TOPO)
    got = list(timeline(faults, TOPO, 0.0))  # finite: nothing changes after c1 is down
    assert {a.link for a in got} == {frozenset(("c1", a)) for a in ("a1", "a3", "a5", "a7")}
    assert all(not a.up for a in got)


def test_a_flap_resumes_its_phase_when_the_switch_at_its_end_comes_back():
    # period 30 us from 0: up [0,20), down [20,30), ...; c1 back at 95 us is 5 us into
    # an up phase, so the link is up at once and goes down at 110 us, back at 120 us.
    got = actions("a1-c1:flap=20us/10us@0;c1:down@5us;c1:up@95us", 0.0, until_s=125e-6)
    flap = [(round(a.at_s * 1e6, 3), a.up) for a in got
            if a.op == "link" and a.link == frozenset(("a1", "c1"))]
    assert flap == [(5, False), (95, True), (110, False), (120, True)]

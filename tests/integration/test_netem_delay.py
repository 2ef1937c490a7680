"""Link propagation delay on a real fabric: netem delay lines where the kernel has
sch_netem (ping RTT, the qdisc chain), and the truthful fallback where it has not."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from itertools import pairwise

import networkx as nx
import pytest

from tests.conftest import our_namespaces

pytestmark = pytest.mark.root
SPEC = "leafspine,2,1,1"  # h1 - l1 - s1 - l2 - h2: one path, 15 + 150 + 150 + 15 ns
SCALE = 4000.0
NO_NETEM = {"ok": False, "why": "simulated: no sch_netem"}
SLACK_PER_LINE_S = 0.5e-3


def _fabric(delay, marking: str = "off", spec: str = SPEC):
    from core.scaling import Scale
    from emu.fabric import Fabric
    from topologies.spec import build_topo

    return Fabric(build_topo(spec), Scale(SCALE), marking=marking, delay=delay)


def _netem_or_skip() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, tc)")
    from emu.delay import probe_netem

    probe = probe_netem()
    if not probe["ok"]:
        pytest.skip(f"link delay needs sch_netem, absent here: {probe['why']}")


def _min_rtt_s(fab, src: str, dst: str, count: int = 10) -> float:
    res = fab.run(src, ["ping", "-n", "-q", "-c", str(count), "-i", "0.05", "-W", "2",
                        fab.plan.host_ip[dst]], timeout_s=60)
    assert res.returncode == 0, res.stdout + res.stderr
    match = re.search(r"= ([\d.]+)/[\d.]+/[\d.]+/[\d.]+ ms", res.stdout)  # rtt min/avg/max/mdev
    assert match, res.stdout
    return float(match.group(1)) * 1e-3


def _qdiscs(fab, node: str, peer: str) -> dict[int, tuple[str, int, dict]]:
    """{handle: (kind, parent, options)} of the port node -> peer."""
    port = fab.port(node, peer)
    out = {}
    for msg in fab.ipr(node).get_qdiscs(index=port.ifindex):
        opts = msg.get_attr("TCA_OPTIONS")
        out[msg["handle"]] = (msg.get_attr("TCA_KIND"), msg["parent"],
                              dict(opts) if opts is not None and msg.get_attr("TCA_KIND") == "netem"
                              else {})
    return out


def test_ping_rtt_grows_by_twice_the_dilated_path_delay():
    _netem_or_skip()
    from topologies.routing import topo_graph

    with _fabric(delay=False) as fab:
        assert fab.summary()["delay_emulated"] is False
        base = _min_rtt_s(fab, "h1", "h2")
    with _fabric(delay=True) as fab:
        s = fab.summary()
        assert s["delay_emulated"] is True and not s["delay_notes"]
        delayed = _min_rtt_s(fab, "h1", "h2")
        graph = topo_graph(fab.topo)
    path = nx.shortest_path(graph, "h1", "h2")
    one_way_real = sum(graph.edges[a, b]["delay_s"] for a, b in pairwise(path))
    expected = 2 * one_way_real * SCALE  # 3 µs real each way -> 24 ms emulated RTT
    lines = 6  # l1->s1, s1->l2, l2->h2 and back; hosts' own egress has none
    # netem never releases early; each delay line's timer fires a little late: 0.34 ms
    # per line measured under software emulation (the stock-kernel lane), far less on
    # hardware. The bound stays well below one line's 4 ms, so a line missing or extra fails.
    assert expected - 0.5e-3 <= delayed - base <= expected + lines * SLACK_PER_LINE_S, (
        base, delayed, expected)


@pytest.mark.parametrize("marking,leaf", [("off", "bfifo"), ("red", "red")])
def test_delay_line_is_the_root_over_the_unchanged_port_queue(marking, leaf):
    _netem_or_skip()
    if marking == "red":
        from emu.ecn.backend import probe_backends

        if not probe_backends()["red"]["ok"]:
            pytest.skip(f"RED back end unavailable: {probe_backends()['red'].get('why')}")
    from pyroute2.netlink.rtnl import TC_H_ROOT

    from emu.delay import PSCHED_TICK_NS
    from emu.shaping import CLASS_HANDLE, DELAY_HANDLE, HTB_HANDLE, LEAF_HANDLE

    with _fabric(delay="auto", marking=marking) as fab:
        plan = fab.delays.netem[("l1", "s1")]
        q = _qdiscs(fab, "l1", "s1")
        assert q[DELAY_HANDLE][:2] == ("netem", TC_H_ROOT)
        assert q[HTB_HANDLE][0] == "htb" and q[HTB_HANDLE][1] >> 16 == DELAY_HANDLE >> 16
        assert q[LEAF_HANDLE][:2] == (leaf, CLASS_HANDLE)
        netem = q[DELAY_HANDLE][2]
        assert netem["limit"] == plan.limit
        assert netem["delay"] * PSCHED_TICK_NS / 1000 == pytest.approx(plan.delay_us, abs=0.07)
        assert plan.delay_us == 600  # 150 ns (30 m of fibre) x 4000
        assert fab.port("l1", "s1").delay_s == pytest.approx(150e-9)
        # the host's NIC keeps a plain HTB root (its sender's push-back); the switch's
        # downlink carries the host link's delay both ways
        host_q = _qdiscs(fab, "h1", "l1")
        assert DELAY_HANDLE not in host_q and host_q[HTB_HANDLE][1] == TC_H_ROOT
        assert fab.delays.netem[("l1", "h1")].delay_us == 120  # 2 x 15 ns x 4000
        assert fab.link_delay_s("h1", "l1") == pytest.approx(15e-9)


def test_without_netem_auto_builds_undelayed_and_forcing_delay_is_a_clear_error(monkeypatch):
    """Runs on every kernel: the real absence where sch_netem is missing, a simulated one
    where it is present."""
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, tc)")
    from core.errors import CapabilityError
    from emu import delay
    from emu.shaping import DELAY_HANDLE

    if delay.probe_netem()["ok"]:
        monkeypatch.setattr(delay, "probe_netem", lambda: dict(NO_NETEM))
    why = delay.probe_netem()["why"]
    with _fabric(delay="auto") as fab:
        s = fab.summary()
        assert s["delay_emulated"] is False
        assert s["delay_detail"] == f"not emulated: {why}"
        assert all(p.delay_s == 0.0 for p in fab.ports())
        assert all(DELAY_HANDLE not in _qdiscs(fab, p.node, p.peer_node) for p in fab.ports())
        assert fab.link_delay_s("l1", "s1") == 0.0
        assert _min_rtt_s(fab, "h1", "h2", count=3) < 0.1
    forced = _fabric(delay=True)
    before = our_namespaces()
    with pytest.raises(CapabilityError, match=r"delay=on.*sch_netem"):
        forced.start()
    assert our_namespaces() == before, "a refused build must create nothing"
    assert not forced.started


def test_cli_net_reports_link_delay_truthfully():
    if os.geteuid() != 0:
        pytest.skip("needs root (namespaces, tc)")
    from emu.delay import probe_netem

    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    run = [sys.executable, "-m", "cli.app", "net", "--topo", SPEC, "--test", "none",
           "--marking", "off"]
    res = subprocess.run([*run, "--delay", "on"], capture_output=True, text=True, timeout=120,
                         cwd=root)
    out = " ".join((res.stdout + res.stderr).split())  # rich wraps long lines
    assert "Traceback" not in out
    if probe_netem()["ok"]:
        assert res.returncode == 0, out
        assert "link delay: netem, dilated by S" in out
    else:
        assert res.returncode == 2, out
        assert "delay=on" in out and "sch_netem" in out
    res = subprocess.run([*run, "--delay", "off"], capture_output=True, text=True, timeout=120,
                         cwd=root)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "link delay: off (requested)" in " ".join(res.stdout.split())

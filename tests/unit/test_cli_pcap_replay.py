"""`emu pcap` and `emu replay` on hostile input: exit 2 with an error, no traceback, no hang.

Every replay case here fails before a fabric is built, so none needs root.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from traffic.pcap import read_roce_pcap, write_pcap

TIMEOUT_S = 20  # generous: the machine is shared; a hang or a MemoryError would blow it


def emu(*args: str, cwd) -> tuple[int, str]:
    """Exit code and output; an error must be one line on stderr."""
    res = subprocess.run([sys.executable, "-m", "cli.app", *args], cwd=cwd, capture_output=True,
                         text=True, timeout=TIMEOUT_S)
    if res.returncode == 2:
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    return res.returncode, " ".join((res.stdout + res.stderr).split())


@pytest.mark.parametrize("args, message", [
    (["allreduce-ring", "--ranks", "100000"], "messages, above the limit of 20,000"),
    (["alltoall", "--size", "1GiB"], "above the 1GiB limit (--max-size)"),
    (["allreduce-ring", "--ranks", "64", "--size", "64MiB"], "above the 1GiB limit"),
    (["alltoall", "--ranks", "64", "--size", "64MiB"], "above the 1GiB limit"),
    (["allreduce-hd", "--ranks", "100000", "--size", "1KiB"], "messages, above the limit"),
    (["incast", "--ranks", "2", "--size", "1e15"], "an RDMA WRITE can carry"),
    (["incast", "--ranks", "2", "--size", "1e30"], "a size must be at most"),
    (["alltoall", "--max-messages", "5"], "above the limit of 5"),
    (["alltoall", "--max-size", "10KiB"], "above the 10KiB limit"),
    (["alltoall", "-o", "/dev/null"], "/dev/null: it exists and is not a regular file"),
    (["alltoall", "-o", "."], "it exists and is not a regular file"),
    (["alltoall", "--ranks", "1"], "at least 2 ranks"),
    (["alltoall", "--rate", "1e308"], "a rate must be between"),     # issue 29: absurd rates
    (["alltoall", "--rate", "1e-300"], "a rate must be between"),
])
def test_pcap_refuses_with_exit_2(tmp_path, args, message):
    code, out = emu("pcap", *args, cwd=tmp_path)
    assert (code, "Traceback" in out) == (2, False), out
    assert out.startswith("error:") and message in out
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a partial file


def test_pcap_writes_within_the_caps(tmp_path):
    code, out = emu("pcap", "alltoall", "--ranks", "3", "--size", "30000", "-o", "a.pcap",
                    cwd=tmp_path)
    assert code == 0, out
    assert len(read_roce_pcap(tmp_path / "a.pcap")) == 6 * (3 + 1)  # 6 messages: 3 packets + ACK


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """One file per class of bad input, named by what it is."""
    d = tmp_path_factory.mktemp("hostile")
    code, out = emu("pcap", "alltoall", "--ranks", "4", "--size", "64KiB", "-o", "ok.pcap", cwd=d)
    assert code == 0, out
    good = (d / "ok.pcap").read_bytes()
    frames = read_roce_pcap(d / "ok.pcap")
    os.mkfifo(d / "fifo")
    (d / "dir").mkdir()
    (d / "text").write_text("hello, not a pcap\n")
    (d / "truncated").write_bytes(good[:5000])
    (d / "header-only-half").write_bytes(good[:30])
    (d / "empty").write_bytes(b"")
    with open(d / "sparse-2GiB", "wb") as f:
        f.truncate(2 << 30)
    (d / "zero-link").symlink_to("/dev/zero")
    udp = bytes(12) + b"\x08\x00" + bytes([0x45]) + bytes(8) + b"\x11" + bytes(30)
    write_pcap(d / "not-roce", [(0.0, udp)] * 3)
    half = len(frames) // 2
    write_pcap(d / "hour-gap", frames[:half] + [(t + 3600, f) for t, f in frames[half:]])
    far = bytearray(frames[0][1])
    far[30:34] = bytes([10, 0, 0, 99])
    write_pcap(d / "far-host", [(0.0, bytes(far))])
    loop = bytearray(frames[0][1])
    loop[30:34] = loop[26:30]
    write_pcap(d / "to-itself", [(0.0, bytes(loop))])
    return d


@pytest.mark.parametrize("name, message", [
    ("/dev/zero", "is a character device; a pcap must be a regular file"),
    ("zero-link", "is a character device"),
    ("fifo", "is a FIFO"),
    ("dir", "is a directory"),
    ("text", "is not a pcap file"),
    ("truncated", "is truncated: record 2"),
    ("header-only-half", "is truncated: record 1 header"),
    ("empty", "shorter than a pcap header"),
    ("sparse-2GiB", "is 2GiB, above the 1GiB limit"),
    ("not-roce", "holds no valid RoCEv2 (UDP port 4791) frames; its 3 frames"),
    ("hour-gap", "would take 417 days"),  # 3600 s x DEFAULT_SCALE
    ("far-host", "address 10.0.0.99 is not a host of this fabric"),
    ("to-itself", "goes from h1 to itself"),
    ("missing", "does not exist"),
])
def test_replay_refuses_before_building(inputs, name, message):
    code, out = emu("replay", name, "--topo", "fattree,4", cwd=inputs)
    assert (code, "Traceback" in out) == (2, False), out
    assert out.startswith("error:") and message in out


def test_replay_limits_are_flags(inputs):
    code, out = emu("replay", "ok.pcap", "--max-size", "1KiB", cwd=inputs)
    assert code == 2 and "above the 1KiB limit" in out
    code, out = emu("replay", "ok.pcap", "--max-wall", "1us", cwd=inputs)
    assert code == 2 and "above the 1µs limit (--max-wall)" in out
    code, out = emu("replay", "ok.pcap", "--max-frames", "5", cwd=inputs)
    assert code == 2 and "holds more than 5 RoCEv2 frames" in out
    code, out = emu("replay", "ok.pcap", "--max-gap", "-3us", cwd=inputs)
    assert code == 2 and "invalid max-gap" in out
    code, out = emu("replay", "--help", cwd=inputs)
    assert code == 0 and "--max-gap" in out and "--max-wall" in out and "over a year" in out
    assert "--max-frames" in out

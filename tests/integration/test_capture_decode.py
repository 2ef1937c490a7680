"""A run's captures decode in Wireshark: tshark dissects every captured frame (data,
ACKs, CNPs) as RoCEv2, with no malformed frame nor expert warning, and the detail view
of every data frame and ACK has no "Unknown" or "Malformed" in it.

QPNs below core.frame.FIRST_QPN are InfiniBand's management QPs: data frames to them
decode as MADs of an unknown attribute. The CNP's opcode (0x81, RoCEv2 Annex A17) is
one Wireshark 4.0 (Debian 12) does not name: it shows "Opcode: Unknown (129)" and the
16 reserved bytes as vendor data whatever the QPN, so CNPs are checked by their
fields. Runs as root (a fabric) with Debian's tshark; about 15 s.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from core.frame import FIRST_QPN
from experiments import registry

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc, BPF)"),
              pytest.mark.skipif(shutil.which("tshark") is None,
                                 reason="tshark is not installed (Debian package tshark)")]

#: RoCE BTH opcodes: RDMA WRITE First, Middle, Last, Only; Acknowledge; CNP.
DATA_OPCODES, ACK_OPCODE, CNP_OPCODE = {6, 7, 8, 10}, 17, 0x81


def _tshark(*args: str) -> str:
    return subprocess.run(["tshark", "-n", *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout


def test_tshark_decodes_every_frame_of_a_run_capture(tmp_path):
    # Three senders of 1 MiB into one receiver with DCQCN: data, ACKs, ECN marks, CNPs.
    # Whether the gate judged the run valid does not matter here, only the frames.
    registry.cli_run("incast", tmp_path / "run", quick=True,
                     overrides={"cc": "dcqcn", "capture": "h1;h2", "attempts": 1}, show=False)
    pcaps = sorted((tmp_path / "run" / "pcap").rglob("*.pcap"))
    assert {p.name for p in pcaps} == {"h1.pcap", "h2.pcap"}
    opcodes: set[int] = set()
    for pcap in pcaps:
        fields = _tshark("-r", str(pcap), "-T", "fields", "-e", "frame.number",
                         "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp")
        rows = [line.split("\t") for line in fields.splitlines()]
        assert rows, f"{pcap}: no frames"
        undecoded = [r[0] for r in rows if not r[1]]
        assert not undecoded, f"{pcap}: frames {undecoded[:5]} not decoded as RoCE"
        assert all(int(r[2], 16) >= FIRST_QPN for r in rows)
        opcodes |= {int(r[1]) for r in rows}
        flagged = _tshark("-r", str(pcap), "-Y", "_ws.malformed || _ws.expert")
        assert not flagged, f"{pcap}: {flagged.splitlines()[:3]}"
        detail = _tshark("-r", str(pcap), "-V", "-Y", f"infiniband.bth.opcode != {CNP_OPCODE}")
        bad = [line.strip() for line in detail.splitlines()
               if "unknown" in line.lower() or "malformed" in line.lower()]
        assert not bad, f"{pcap}: {bad[:3]}"
    assert DATA_OPCODES & opcodes and {ACK_OPCODE, CNP_OPCODE} <= opcodes, sorted(opcodes)

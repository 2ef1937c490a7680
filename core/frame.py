"""The RoCEv2 frame geometry: header sizes, offsets and the full-size frame. Pure.

One declared layout (IPv4 without options, UDP checksum 0, as RoCEv2 NICs send)::

    off  len  field
      0   14  Ethernet
     14   20  IPv4
     34    8  UDP (dport 4791)
     42   12  BTH
     54   16  RETH (RDMA WRITE FIRST/ONLY), AETH (4, ACK) or CNP padding (16)
     ...      payload, starting with an 8-byte send timestamp
    -4     4  ICRC

`traffic.roce` builds frames with Scapy on this layout (a unit test checks that
Scapy's frames have these lengths); the engine, the model and the experiments
derive every size from here.
"""

from __future__ import annotations

#: IANA's UDP destination port of RoCEv2.
ROCE_UDP_PORT = 4791
#: The first QP number given to a QP. InfiniBand reserves QP0 (SMI) and QP1 (GSI) for
#: management, and Wireshark decodes frames to them as MADs; NICs hand out QPNs well
#: above, so QP ``i`` of a run is ``FIRST_QPN + i``.
FIRST_QPN = 0x100
#: QPNs are 24 bits: how many QPs fit from FIRST_QPN up.
MAX_QPS = (1 << 24) - FIRST_QPN

ETH_BYTES, IP_BYTES, UDP_BYTES, BTH_BYTES = 14, 20, 8, 12
RETH_BYTES, AETH_BYTES, CNP_PAD_BYTES, ICRC_BYTES = 16, 4, 16, 4
#: The send timestamp the engine writes at the start of every data payload.
TS_BYTES = 8

OFF_IP = ETH_BYTES
OFF_UDP = OFF_IP + IP_BYTES
OFF_BTH = OFF_UDP + UDP_BYTES
OFF_PSN_WORD = OFF_BTH + 8  # AckReq<<31 | PSN, big-endian
OFF_AFTER_BTH = OFF_BTH + BTH_BYTES  # RETH, AETH, CNP pad or payload
#: Where the timestamp sits: right after the BTH (MIDDLE/LAST), after the RETH (FIRST/ONLY).
OFF_TS = OFF_AFTER_BTH
OFF_TS_RETH = OFF_AFTER_BTH + RETH_BYTES
MIN_FRAME_BYTES = OFF_AFTER_BTH + ICRC_BYTES

#: Payload of a full frame: the 4096-byte RoCE path MTU.
MTU_PAYLOAD_BYTES = 4096
#: Headers of a data frame without RETH, on the wire (Ethernet to ICRC, no FCS): 58.
HEADER_BYTES = OFF_AFTER_BTH + ICRC_BYTES
#: A full-size data frame (MIDDLE/LAST): 4154 bytes.
FRAME_BYTES = HEADER_BYTES + MTU_PAYLOAD_BYTES
#: A CNP: BTH + 16 bytes of padding + ICRC, 74 bytes.
CNP_FRAME_BYTES = OFF_AFTER_BTH + CNP_PAD_BYTES + ICRC_BYTES
#: What an Ethernet wire spends per frame beyond the frame's bytes: preamble and SFD 8,
#: FCS 4, inter-frame gap 12. A link of rate R carries R x L / (L + 24) of frame bytes.
WIRE_OVERHEAD_BYTES = 24
#: A full-size data frame's time on the wire, in bytes: 4178.
WIRE_FRAME_BYTES = FRAME_BYTES + WIRE_OVERHEAD_BYTES
#: An ACK or NAK: BTH + AETH + ICRC, 62 bytes.
ACK_FRAME_BYTES = OFF_AFTER_BTH + AETH_BYTES + ICRC_BYTES

# In-band network telemetry for HPCC (docs/congestion-control.md, "In-band telemetry").
# A data frame's payload holds, after its send timestamp, an INT block: a header
# (byte 0: the hop count; 7 reserved bytes) and one record per switch egress port it
# crossed, oldest first. A record is, big-endian: queue bytes in front of the frame
# (u32), the port's line rate in real Mb/s (u32), the port's transmitted bytes (u64)
# and the time in real picoseconds (u64). An ACK echoes the block after its AETH.
INT_HEADER_BYTES = 8
INT_RECORD_BYTES = 24
#: More hops than any topology here routes over (torus paths are the longest).
INT_MAX_HOPS = 8
#: The largest INT block: 200 bytes.
INT_BLOCK_BYTES = INT_HEADER_BYTES + INT_MAX_HOPS * INT_RECORD_BYTES
OFF_INT = OFF_TS + TS_BYTES
OFF_INT_RETH = OFF_TS_RETH + TS_BYTES
#: Where an ACK carries the echoed block.
OFF_ACK_INT = OFF_AFTER_BTH + AETH_BYTES

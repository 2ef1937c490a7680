"""Sequence-numbered UDP flows for the reorder benchmark, run inside a host's namespace.

    python -m bench.udpflows send DST_IP FLOWS SECONDS
    python -m bench.udpflows receive IDLE_S

Standard library only: sixteen of these start at once on two cores. ``send`` keeps
``FLOWS`` flows (source ports 20000.., so distinct ECMP paths) of 4 KB datagrams going
as fast as it can and prints the count; ``receive`` prints ``ready`` once bound, then,
after ``IDLE_S`` without a datagram, how many arrived and how many came after a later
datagram of their flow. Both print one JSON line.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import time

PORT = 9000
_HEADER = struct.Struct("!II")  # flow, sequence number
_PAYLOAD_BYTES = 4000
_SO_RCVBUFFORCE = 33  # asm-generic/socket.h: root may exceed rmem_max; no loss at the receiver


def send(dst_ip: str, flows: int, duration_s: float) -> dict[str, int]:
    socks = []
    for i in range(flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("", 20000 + i))
        socks.append(s)
    pad, seq = bytes(_PAYLOAD_BYTES), [0] * flows
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        for i, s in enumerate(socks):
            try:
                s.sendto(_HEADER.pack(i, seq[i]) + pad, (dst_ip, PORT))
                seq[i] += 1
            except OSError:  # the host's queue is full
                time.sleep(1e-4)
    return {"sent": sum(seq)}


def receive(idle_s: float) -> dict[str, int]:
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, 1 << 25)
    r.bind(("", PORT))
    r.settimeout(idle_s)
    print("ready", flush=True)
    highest: dict[tuple[str, int], int] = {}
    got = late = 0
    try:
        while True:
            data, (src, _) = r.recvfrom(9000)
            flow, seq = _HEADER.unpack_from(data)
            got += 1
            key = (src, flow)
            if seq < highest.get(key, -1):
                late += 1
            else:
                highest[key] = seq
    except TimeoutError:
        pass
    return {"received": got, "out_of_order": late}


if __name__ == "__main__":
    if sys.argv[1:2] == ["send"]:
        print(json.dumps(send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))))
    elif sys.argv[1:2] == ["receive"]:
        print(json.dumps(receive(float(sys.argv[2]))))
    else:
        sys.exit(__doc__)

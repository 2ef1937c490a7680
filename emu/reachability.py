"""All-pairs reachability with real ICMP echoes, sent from every host at once.

One raw ICMP socket per host namespace, no process per ping: a k=4 fat-tree's
240 pairs are checked in well under a second (Mininet's pingall forks a ping per
pair). Replies are matched by (identifier = source index, sequence = destination).

The echoes go out in rounds: in round d every host i pings host (i + d) mod n, and
the sockets are drained after each round. So a socket never holds more than a few
replies, however many hosts there are: sending every pair first and reading after
overflows the receive buffers of a fabric of a few hundred hosts (a k=12 fat-tree
has 186,192 pairs, some seconds of sending). Each socket filters in the kernel to
echo replies only; the echo requests it would also see need no reading.
"""

from __future__ import annotations

import errno
import selectors
import socket
import struct
import time
from collections.abc import Iterable

from emu.netns import in_netns

_ECHO_REQUEST, _ECHO_REPLY = 8, 0
_SOL_RAW = 255
_ICMP_FILTER = 1  # setsockopt: a bit mask of ICMP types the socket does NOT receive


_BODY = b"fabricemu-reachability"
_BODY_SUM = sum(struct.unpack(f"!{len(_BODY) // 2}H", _BODY))  # the body is of even length


def echo_request(ident: int, seq: int) -> bytes:
    # The one's-complement sum of the constant words once, not per echo: pingall of a
    # 2,048-host fabric builds 4 million of them.
    total = (_ECHO_REQUEST << 8) + ident + seq + _BODY_SUM
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return struct.pack("!BBHHH", _ECHO_REQUEST, 0, ~total & 0xFFFF, ident, seq) + _BODY


def ping_rounds(n: int) -> Iterable[list[tuple[int, int]]]:
    """The (src, dst) index pairs of ``n`` hosts in rounds: round d pairs every i
    with (i + d) mod n, so each host sends one echo and gets one reply per round."""
    for d in range(1, n):
        yield [(i, (i + d) % n) for i in range(n)]


def _open_socket(path: str) -> socket.socket:
    with in_netns(path):
        sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.setblocking(False)
    sock.setsockopt(_SOL_RAW, _ICMP_FILTER, struct.pack("I", 0xFFFFFFFF & ~(1 << _ECHO_REPLY)))
    return sock


def ping_all(endpoints: list[tuple[str, str, str]], timeout_s: float = 3.0,
             tries: int = 3) -> dict[tuple[str, str], bool]:
    """``endpoints`` = [(host, netns_path, ip)]; returns {(src, dst): reached}.

    ``timeout_s`` bounds the waiting for late replies (split over ``tries``), not the
    sending, which grows with the square of the number of hosts."""
    n = len(endpoints)
    reached = [[False] * n for _ in range(n)]
    socks: list[socket.socket] = []
    sel = selectors.DefaultSelector()  # epoll: a big fabric has > 1024 fds open
    try:
        for i, (_, path, _) in enumerate(endpoints):
            socks.append(_open_socket(path))
            sel.register(socks[i], selectors.EVENT_READ, i)

        def drain(wait_s: float) -> None:
            for key, _ in sel.select(wait_s):
                sock, me = key.fileobj, key.data
                while True:
                    try:
                        pkt = sock.recv(2048)
                    except BlockingIOError:
                        break
                    ihl = (pkt[0] & 0x0F) * 4
                    typ, _, _, ident, seq = struct.unpack_from("!BBHHH", pkt, ihl)
                    if typ == _ECHO_REPLY and ident == me + 1 and seq < n:
                        reached[me][seq] = True

        def missing() -> int:
            return sum(row.count(False) for row in reached) - n  # the diagonal stays False

        for _ in range(tries):
            if not missing():
                break
            for pairs in ping_rounds(n):
                for a, b in pairs:
                    if reached[a][b]:
                        continue
                    try:
                        socks[a].sendto(echo_request(a + 1, b), (endpoints[b][2], 0))
                    except OSError as e:  # no route (a link is down): that pair is unreachable
                        if e.errno not in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                            raise
                drain(0)
            deadline = time.monotonic() + timeout_s / tries
            while time.monotonic() < deadline and missing():
                drain(0.05)
    finally:
        sel.close()
        for s in socks:
            s.close()
    return {(endpoints[a][0], endpoints[b][0]): reached[a][b]
            for a in range(n) for b in range(n) if a != b}

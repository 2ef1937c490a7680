"""`Rtnl`: a raw rtnetlink socket in one namespace, for the requests a fabric build makes
by the hundred: the links' names and indexes, clsact and cls_bpf filters.

A fattree,8 puts an eBPF marker on each of its 640 switch ports and learns the
ifindexes of 208 namespaces' links. Through pyroute2 each request costs about 1 ms of
Python (2.4 ms a link dump); these hand-built messages cost one send and one receive.
Everything else (qdiscs with tables, routes, link state) stays on pyroute2 or
``ip -batch`` (`emu.ipbatch`).

The messages are those of ``tc filter add dev X ingress|egress prio P handle 1 bpf da
fd N name NAME`` (``include/uapi/linux/pkt_cls.h``); `tests/unit/test_rtnl.py` decodes
them with pyroute2's parser, and the integration tests attach through them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
from collections.abc import Iterator

from emu.netns import in_netns

NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
NETLINK_EXT_ACK = 11

NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE, NLM_F_DUMP = 0x1, 0x4, 0x200, 0x400, 0x300
NLMSGERR_ATTR_MSG = 1
RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWQDISC, RTM_NEWTFILTER, RTM_DELTFILTER = 36, 44, 45
IFLA_IFNAME = 3
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_BPF_CLASSID, TCA_BPF_FD, TCA_BPF_NAME, TCA_BPF_FLAGS = 3, 6, 7, 8
TCA_BPF_FLAG_ACT_DIRECT = 1
TC_H_CLSACT = 0xFFFFFFF1
CLSACT_HANDLE = 0xFFFF0000
CLSACT_INGRESS, CLSACT_EGRESS = 0xFFFFFFF2, 0xFFFFFFF3
ETH_P_ALL = 0x0003

_HEADER = struct.Struct("=IHHII")    # nlmsghdr: length, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")   # ifinfomsg: family, type, index, flags, change
_TCMSG = struct.Struct("=BxxxiIII")  # tcmsg: family, ifindex, handle, parent, info
_ATTR = struct.Struct("=HH")         # rtattr: length, type
_ERRNO = struct.Struct("=i")
_U32 = struct.Struct("=I")
#: What one receive may return: a dump's part fits in a page or two.
_RECV_BYTES = 1 << 16


def _align(n: int) -> int:
    return (n + 3) & ~3


def attr(kind: int, payload: bytes) -> bytes:
    """One rtattr, padded to 4 bytes."""
    raw = _ATTR.pack(_ATTR.size + len(payload), kind) + payload
    return raw + bytes(_align(len(raw)) - len(raw))


def attrs(payload: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, value) of each rtattr in ``payload``."""
    at = 0
    while at + _ATTR.size <= len(payload):
        length, kind = _ATTR.unpack_from(payload, at)
        if length < _ATTR.size:
            return
        yield kind & 0x3FFF, payload[at + _ATTR.size:at + length]  # without NLA_F_* bits
        at += _align(length)


def _cstr(text: str) -> bytes:
    return text.encode() + b"\0"


def filter_parent(ingress: bool) -> int:
    return CLSACT_INGRESS if ingress else CLSACT_EGRESS


def clsact_body(ifindex: int) -> bytes:
    """RTM_NEWQDISC's body: a clsact qdisc on ``ifindex``."""
    return _TCMSG.pack(socket.AF_UNSPEC, ifindex, CLSACT_HANDLE, TC_H_CLSACT, 0) + attr(
        TCA_KIND, _cstr("clsact"))


def bpf_filter_body(ifindex: int, prio: int, *, ingress: bool, prog_fd: int | None = None,
                    name: str = "", classid: int = 1) -> bytes:
    """RTM_NEWTFILTER's (with ``prog_fd``) or RTM_DELTFILTER's body: the direct-action
    cls_bpf filter of priority ``prio``, handle 1, every protocol, on ``ifindex``'s clsact
    hook."""
    head = _TCMSG.pack(socket.AF_UNSPEC, ifindex, 1, filter_parent(ingress),
                       prio << 16 | socket.htons(ETH_P_ALL))
    kind = attr(TCA_KIND, _cstr("bpf"))
    if prog_fd is None:
        return head + kind
    options = (attr(TCA_BPF_CLASSID, _U32.pack(classid)) + attr(TCA_BPF_FD, _U32.pack(prog_fd))
               + attr(TCA_BPF_NAME, _cstr(name))
               + attr(TCA_BPF_FLAGS, _U32.pack(TCA_BPF_FLAG_ACT_DIRECT)))
    return head + kind + attr(TCA_OPTIONS, options)


class Rtnl:
    """A NETLINK_ROUTE socket bound to the namespace it was opened in. One request at a
    time; a refused one raises OSError with the kernel's errno and its message."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._seq = 0

    @classmethod
    def open(cls, netns_path: str | None = None) -> Rtnl:
        """A socket in the namespace at ``netns_path`` (None: the calling thread's)."""
        if netns_path is None:
            return cls(cls._socket())
        with in_netns(netns_path):
            return cls(cls._socket())

    @staticmethod
    def _socket() -> socket.socket:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                             NETLINK_ROUTE)
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)  # acks without the request
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)  # and with the kernel's reason
        sock.bind((0, 0))
        return sock

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Rtnl:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ------------------------------------------------------------------
    def _send(self, kind: int, flags: int, body: bytes) -> int:
        self._seq += 1
        self.sock.sendto(_HEADER.pack(_HEADER.size + len(body), kind, flags, self._seq, 0)
                         + body, (0, 0))
        return self._seq

    def _replies(self, seq: int) -> Iterator[tuple[int, bytes]]:
        """(type, payload) of each reply to request ``seq``, up to its ack or DONE;
        OSError for an error."""
        while True:
            data = self.sock.recv(_RECV_BYTES)
            at = 0
            while at + _HEADER.size <= len(data):
                length, kind, _flags, got, _pid = _HEADER.unpack_from(data, at)
                if length < _HEADER.size:
                    raise OSError(errno.EPROTO, "rtnetlink: a malformed reply")
                payload = data[at + _HEADER.size:at + length]
                at += _align(length)
                if got != seq:  # an answer to an earlier request given up on
                    continue
                if kind == NLMSG_DONE:
                    return
                if kind == NLMSG_ERROR:
                    (code,) = _ERRNO.unpack_from(payload)
                    if code:
                        raise OSError(-code, _error_text(-code, payload))
                    return
                yield kind, payload

    def request(self, kind: int, body: bytes, flags: int = 0) -> None:
        """Send one request and wait for its ack."""
        seq = self._send(kind, NLM_F_REQUEST | NLM_F_ACK | flags, body)
        for _ in self._replies(seq):
            pass

    def links(self) -> dict[str, int]:
        """Every link of the namespace: name -> ifindex."""
        seq = self._send(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP,
                         _IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0))
        out: dict[str, int] = {}
        for kind, payload in self._replies(seq):
            if kind != RTM_NEWLINK:
                continue
            index = _IFINFO.unpack_from(payload)[2]
            for a, value in attrs(payload[_IFINFO.size:]):
                if a == IFLA_IFNAME:
                    out[value.rstrip(b"\0").decode()] = index
                    break
        return out

    def add_clsact(self, ifindex: int) -> None:
        """A clsact qdisc on ``ifindex``; one there already is kept."""
        with contextlib.suppress(FileExistsError):
            self.request(RTM_NEWQDISC, clsact_body(ifindex), NLM_F_CREATE | NLM_F_EXCL)

    def add_bpf_filter(self, ifindex: int, prog_fd: int, name: str, *, ingress: bool,
                       prio: int) -> None:
        """`bpf_filter_body`'s filter, holding the program ``prog_fd``."""
        self.request(RTM_NEWTFILTER, bpf_filter_body(ifindex, prio, ingress=ingress,
                                                     prog_fd=prog_fd, name=name),
                     NLM_F_CREATE | NLM_F_EXCL)

    def del_bpf_filter(self, ifindex: int, *, ingress: bool, prio: int) -> None:
        """Delete the filter `add_bpf_filter` added."""
        self.request(RTM_DELTFILTER, bpf_filter_body(ifindex, prio, ingress=ingress))


def _error_text(code: int, payload: bytes) -> str:
    """The kernel's extended-ack message after the error (the request is capped off)."""
    for kind, value in attrs(payload[_ERRNO.size + _HEADER.size:]):
        if kind == NLMSGERR_ATTR_MSG:
            reason = value.rstrip(b"\0").decode(errors="replace")
            return f"{os.strerror(code)}: {reason}"
    return os.strerror(code)

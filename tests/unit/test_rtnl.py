"""emu.rtnl: the hand-built rtnetlink messages decode, with pyroute2's own parser, to
the requests ``tc`` makes; the reply reader finds a request's ack, its dump and the
kernel's error with its reason. The kernel's side: tests/integration/test_rtnl_kernel.py."""

from __future__ import annotations

import errno
import struct

import pytest
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from emu import rtnl

HEADER = struct.Struct("=IHHII")


def _message(kind: int, body: bytes, seq: int = 1, flags: int = 0) -> bytes:
    raw = HEADER.pack(HEADER.size + len(body), kind, flags, seq, 0) + body
    return raw + bytes(-len(raw) % 4)


def _decoded(kind: int, body: bytes) -> tcmsg:
    msg = tcmsg(_message(kind, body))
    msg.decode()
    return msg


@pytest.mark.parametrize("ingress", [True, False])
def test_a_bpf_filter_is_tcs_direct_action_filter(ingress):
    msg = _decoded(rtnl.RTM_NEWTFILTER, rtnl.bpf_filter_body(
        7, 2, ingress=ingress, prog_fd=42, name="fabricemu_marker"))
    assert (msg["index"], msg["handle"]) == (7, 1)
    assert msg["parent"] == (0xFFFFFFF2 if ingress else 0xFFFFFFF3)
    assert msg["info"] >> 16 == 2                      # prio
    assert msg["info"] & 0xFFFF == 0x0300              # protocol all, network order
    assert msg.get_attr("TCA_KIND") == "bpf"
    options = msg.get_attr("TCA_OPTIONS")
    assert options.get_attr("TCA_BPF_FD") == 42
    assert options.get_attr("TCA_BPF_NAME") == "fabricemu_marker"
    assert options.get_attr("TCA_BPF_FLAGS") == rtnl.TCA_BPF_FLAG_ACT_DIRECT
    assert options.get_attr("TCA_BPF_CLASSID") == 1


def test_a_filter_deletion_names_the_filter_and_nothing_more():
    msg = _decoded(rtnl.RTM_DELTFILTER, rtnl.bpf_filter_body(3, 1, ingress=True))
    assert (msg["index"], msg["handle"], msg["parent"], msg["info"] >> 16) == (
        3, 1, 0xFFFFFFF2, 1)
    assert [name for name, _ in msg["attrs"]] == ["TCA_KIND"]


def test_clsact_is_the_clsact_qdisc():
    msg = _decoded(rtnl.RTM_NEWQDISC, rtnl.clsact_body(9))
    assert (msg["index"], msg["handle"], msg["parent"]) == (9, 0xFFFF0000, 0xFFFFFFF1)
    assert msg.get_attr("TCA_KIND") == "clsact"


def test_attributes_round_trip_with_padding():
    raw = rtnl.attr(3, b"ab\0") + rtnl.attr(8, struct.pack("=I", 5)) + rtnl.attr(1, b"")
    assert len(raw) % 4 == 0
    assert list(rtnl.attrs(raw)) == [(3, b"ab\0"), (8, struct.pack("=I", 5)), (1, b"")]
    assert list(rtnl.attrs(b"\x02\x00\x01\x00")) == []  # a length below the header: stop


class _Kernel:
    """A socket whose receives return the given datagrams in turn."""

    def __init__(self, *datagrams: bytes) -> None:
        self.datagrams = list(datagrams)
        self.sent: list[bytes] = []

    def sendto(self, data: bytes, address: object) -> None:
        self.sent.append(data)

    def recv(self, size: int) -> bytes:
        return self.datagrams.pop(0)


def _ack(seq: int, code: int = 0, reason: str | None = None) -> bytes:
    body = struct.pack("=i", -code) + HEADER.pack(16, 0, 0, seq, 0)
    if reason is not None:
        body += rtnl.attr(rtnl.NLMSGERR_ATTR_MSG, reason.encode() + b"\0")
    return _message(rtnl.NLMSG_ERROR, body, seq)


def _link(index: int, name: str, seq: int) -> bytes:
    body = struct.pack("=BxHiII", 0, 1, index, 0, 0) + rtnl.attr(4, struct.pack("=I", 1500)) \
        + rtnl.attr(rtnl.IFLA_IFNAME, name.encode() + b"\0")
    return _message(rtnl.RTM_NEWLINK, body, seq)


def test_a_link_dump_reads_every_part_up_to_done():
    kernel = _Kernel(_link(1, "lo", 1) + _link(5, "p0", 1),
                     _link(6, "p1", 1) + _message(rtnl.NLMSG_DONE, struct.pack("=i", 0), 1))
    assert rtnl.Rtnl(kernel).links() == {"lo": 1, "p0": 5, "p1": 6}  # type: ignore[arg-type]
    request = ifinfmsg(kernel.sent[0])
    request.decode()
    assert request["header"]["type"] == rtnl.RTM_GETLINK
    assert request["header"]["flags"] & rtnl.NLM_F_DUMP == rtnl.NLM_F_DUMP


def test_a_request_waits_for_its_own_ack():
    sock = rtnl.Rtnl(_Kernel(_ack(0, errno.EINVAL), _ack(1)))  # type: ignore[arg-type]
    sock.request(rtnl.RTM_NEWQDISC, rtnl.clsact_body(2))  # the stale error is not its own


def test_a_refusal_is_an_oserror_with_the_kernels_reason():
    sock = rtnl.Rtnl(_Kernel(_ack(1, errno.ENODEV, "Cannot find device")))  # type: ignore[arg-type]
    with pytest.raises(OSError, match="Cannot find device") as e:
        sock.add_bpf_filter(99, 3, "x", ingress=True, prio=2)
    assert e.value.errno == errno.ENODEV


def test_an_existing_clsact_is_kept_and_an_existing_filter_refused():
    sock = rtnl.Rtnl(_Kernel(_ack(1, errno.EEXIST), _ack(2, errno.EEXIST)))  # type: ignore[arg-type]
    sock.add_clsact(4)
    with pytest.raises(FileExistsError):
        sock.add_bpf_filter(4, 3, "x", ingress=False, prio=2)


def test_a_malformed_reply_is_an_error_not_a_hang():
    with pytest.raises(OSError, match="malformed"):
        rtnl.Rtnl(_Kernel(HEADER.pack(4, 2, 0, 1, 0))).request(  # type: ignore[arg-type]
            rtnl.RTM_NEWQDISC, rtnl.clsact_body(1))

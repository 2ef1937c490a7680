"""The RED back end's netlink message against what iproute2 sends.

The reference bytes are TCA_OPTIONS of ``tc qdisc add dev p0 parent 1:10 handle 10: red
limit 100000 min 10000 max 40000 avpkt 1500 burst 7 probability 0.2 bandwidth 10mbit ecn
[nodrop]`` (iproute2 6.1), captured with ``strace -e sendmsg -xx`` on Debian's 6.1 kernel,
which accepts both. Our message once set ECN in the legacy qopt byte *and* sent
TCA_RED_FLAGS, which that kernel refuses with EINVAL.
"""

from __future__ import annotations

import struct

import pytest
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from emu.ecn.red import RED_PLUGIN, red_flag_encoding

# iproute2's idle-decay table (TCA_RED_STAB) for that command, as captured.
_STAB = bytes.fromhex(
    "0000000000000000000000000000010101010101010101010101010202020202020202020202020203030303"
    "0303030303030303030404040404040404040404040404050505050505050505050505050606060606060606"
    "0606060606070707070707070707070707070808080808080808080808080809090909090909090909090909"
    "090a0a0a0a0a0a0a0a0a0a0a0a0a0b0b0b0b0b0b0b0b0b0b0b0b0b0c0c0c0c0c0c0c0c0c0c0c0c0c0d0d0d0d"
    "0d0d0d0d0d0d0d0d0d0e0e0e0e0e0e0e0e0e0e0e0e0e0e0f0f0f0f0f0f0f0f0f0f0f0f0f1010101010101010"
    "10101010101111111111111111111111111112121212121212121212121212131313131f"
)


def _iproute2_options(nodrop: bool) -> bytes:
    parms = struct.pack("=IIIBBBB", 100_000, 10_000, 40_000, 1, 18, 11, 0)
    flags = struct.pack("=II", 9 if nodrop else 1, 0x0F)
    return (struct.pack("=HH", 20, 1) + parms + struct.pack("=HH", 260, 2) + _STAB
            + struct.pack("=HH", 8, 3) + struct.pack("=I", 0x33333333)
            + struct.pack("=HH", 12, 4) + flags)


def _our_options(nodrop: bool) -> bytes:
    kw = {"limit": 100_000, "qth_min": 10_000, "qth_max": 40_000, "Wlog": 1, "Plog": 18,
          "Scell_log": 11, "idle_table": list(_STAB), "max_P": 0x33333333,
          "nodrop": nodrop}
    msg = tcmsg()
    msg["attrs"] = [["TCA_KIND", "red"], ["TCA_OPTIONS", RED_PLUGIN.get_parameters(kw)]]
    msg.encode()
    start = 16 + 20 + 8  # nlmsghdr, struct tcmsg, TCA_KIND "red\0"
    nla_len, nla_type = struct.unpack_from("=HH", msg.data, start)
    assert nla_type == 2  # TCA_OPTIONS
    return bytes(msg.data[start + 4:start + nla_len])


def test_nodrop_message_is_byte_for_byte_iproute2s():
    assert _our_options(nodrop=True) == _iproute2_options(nodrop=True)


def test_plain_ecn_uses_only_the_legacy_flag_byte():
    # Accepted by every kernel: ECN in qopt.flags, no TCA_RED_FLAGS at all.
    assert red_flag_encoding(False) == (1, None)
    ours = _our_options(nodrop=False)
    assert ours[4 + 15] == 1  # the last byte of tc_red_qopt
    assert len(ours) == 20 + 260 + 8


@pytest.mark.parametrize("nodrop", [False, True])
def test_flags_never_in_both_places(nodrop):
    qopt_flags, attr = red_flag_encoding(nodrop)
    assert not (qopt_flags and attr)

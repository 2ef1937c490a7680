"""The PFC gate of one port: a TBF leaf that stops dequeue without dropping (raw netlink).

PFC mode swaps a port's leaf ``10: bfifo limit=buffer`` for

    10: tbf rate=OPEN burst=256 KiB limit=buffer  ->  (its own) bfifo limit=buffer

A TBF with a byte limit is a byte FIFO (its child is a bfifo of that limit, and TBF
accounts its backlog and drops at 10:, where telemetry reads them) with a gate:

* open: rate 2^32-1 B/s (34 Gb/s, above any emulated port), so only HTB shapes;
* paused: rate 1 B/s. ``tbf_change`` resets the bucket to ``burst`` and TBF never
  sends on credit, so a paused port sends at most ``PAUSED_BURST_BYTES`` (one MTU
  frame at most, the frame a real port finishes) and then nothing: its queue stays,
  nothing is dropped (the limit is unchanged).

Why not the HTB class: HTB charges a frame after dequeueing it, so a class paused by
a tiny rate still sends one frame and owes its cost at the tiny rate (seconds), and
the debt survives the restore. The kernel's sch_plug would do but is often not built.

A resumed port whose queue gets no new arrival would wait for TBF's watchdog (armed
for the paused rate) or HTB's (up to 1 s): the controller then sends one minimal
MAC-control frame (EtherType 0x8808, which no host or switch stack here handles) on
the port to run its qdisc. ``resume`` reports whether it had to.

Each change is one RTM_NEWQDISC over a NETLINK_ROUTE socket opened in the port's
namespace, acknowledged: tens of µs of wall time (measured, reported by the controller).
"""

from __future__ import annotations

import contextlib
import socket
import struct

from emu.netns import in_netns
from emu.shaping import CLASS_HANDLE, LEAF_HANDLE, MTU_BYTES

_RTM_NEWQDISC, _RTM_DELQDISC = 36, 37
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_EXCL, _NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
_NLMSG_ERROR = 2
_TCA_KIND, _TCA_OPTIONS = 1, 2
_TCA_TBF_PARMS, _TCA_TBF_BURST = 1, 6
_TCA_FIFO_LIMIT_KIND = b"bfifo\0"
_TC_LINKLAYER_ETHERNET = 1  # set: the kernel then needs no rate table
_NLMSG_HDR = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=BBHiIII")
_RATESPEC = struct.Struct("=BBHhHI")
_ETH_P_MAC_CONTROL = 0x8808
#: Largest frame a port sends (psched_mtu: MTU + Ethernet header): TBF's burst must
#: hold it, or TBF drops it at enqueue.
FRAME_MAX_BYTES = MTU_BYTES + 14
#: What a port may still send after its pause took effect (TBF's refilled bucket).
PAUSED_BURST_BYTES = FRAME_MAX_BYTES
PAUSED_RATE_BYTES_PS = 1
OPEN_RATE_BYTES_PS = 2**32 - 1
OPEN_BURST_BYTES = 256 * 1024
#: The frame that runs a resumed port's qdisc: to the 802.1Qbb MAC-control address.
KICK_FRAME = (bytes.fromhex("0180c2000001") + bytes(6) + struct.pack("!H", _ETH_P_MAC_CONTROL)
              + bytes(46))


def _attr(typ: int, payload: bytes) -> bytes:
    ln = 4 + len(payload)
    return struct.pack("=HH", ln, typ) + payload + bytes((4 - ln % 4) % 4)


def tbf_options(rate_bytes_ps: int, burst_bytes: int, limit_bytes: int) -> bytes:
    """TCA_OPTIONS of a TBF with a byte ``limit`` (its bfifo child), no peak rate."""
    rate = _RATESPEC.pack(0, _TC_LINKLAYER_ETHERNET, 0, 0, 0, rate_bytes_ps)
    peak = _RATESPEC.pack(0, 0, 0, 0, 0, 0)
    parms = rate + peak + struct.pack("=III", limit_bytes, 0, 0)
    return _attr(_TCA_OPTIONS, _attr(_TCA_TBF_PARMS, parms)
                 + _attr(_TCA_TBF_BURST, struct.pack("=I", burst_bytes)))


def qdisc_message(msg_type: int, flags: int, seq: int, ifindex: int, body: bytes) -> bytes:
    """One rtnetlink qdisc request on the port's leaf (handle 10:, parent 1:10)."""
    tcm = _TCMSG.pack(0, 0, 0, ifindex, LEAF_HANDLE, CLASS_HANDLE, 0)
    return _NLMSG_HDR.pack(_NLMSG_HDR.size + len(tcm) + len(body), msg_type,
                           _NLM_F_REQUEST | _NLM_F_ACK | flags, seq, 0) + tcm + body


class NetlinkTc:
    """An acknowledged rtnetlink socket in one namespace (one per namespace, shared by its gates)."""

    def __init__(self, netns_path: str) -> None:
        with in_netns(netns_path):
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        self.sock.bind((0, 0))
        self.seq = 0

    def request(self, msg_type: int, flags: int, ifindex: int, body: bytes) -> None:
        """Send one request and wait for its acknowledgement; OSError on a kernel error."""
        self.seq += 1
        self.sock.send(qdisc_message(msg_type, flags, self.seq, ifindex, body))
        while True:
            buf = self.sock.recv(65536)
            off = 0
            while off + _NLMSG_HDR.size <= len(buf):
                ln, typ, _flags, seq, _pid = _NLMSG_HDR.unpack_from(buf, off)
                if typ == _NLMSG_ERROR and seq == self.seq:
                    (err,) = struct.unpack_from("=i", buf, off + _NLMSG_HDR.size)
                    if err:
                        raise OSError(-err, f"tc request on ifindex {ifindex}")
                    return
                off += max((ln + 3) & ~3, _NLMSG_HDR.size)

    def close(self) -> None:
        self.sock.close()


class TbfGate:
    """The gate of one port (``ifindex`` in the namespace of ``tc``); starts open once installed."""

    def __init__(self, tc: NetlinkTc, netns_path: str, ifname: str, ifindex: int,
                 limit_bytes: int, restore_limit_bytes: int) -> None:
        self.tc = tc
        self.netns_path = netns_path
        self.ifname = ifname
        self.ifindex = ifindex
        self.limit_bytes = int(limit_bytes)
        self.restore_limit_bytes = int(restore_limit_bytes)
        self._open = _TCA_KIND_TBF + tbf_options(OPEN_RATE_BYTES_PS, OPEN_BURST_BYTES, self.limit_bytes)
        self._paused = _TCA_KIND_TBF + tbf_options(PAUSED_RATE_BYTES_PS, PAUSED_BURST_BYTES,
                                                   self.limit_bytes)
        self._kick: socket.socket | None = None
        self.installed = False

    def install(self) -> None:
        """Replace the (empty) bfifo leaf by an open TBF of the same handle."""
        self.tc.request(_RTM_DELQDISC, 0, self.ifindex, b"")
        self.tc.request(_RTM_NEWQDISC, _NLM_F_CREATE | _NLM_F_EXCL, self.ifindex, self._open)
        self.installed = True
        with in_netns(self.netns_path):
            self._kick = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        self._kick.bind((self.ifname, 0))
        self._kick.setblocking(False)

    def pause(self) -> None:
        self.tc.request(_RTM_NEWQDISC, 0, self.ifindex, self._paused)

    def resume(self, backlog_bytes: int) -> bool:
        """Open the gate; with a queue left, run the qdisc (True: a kick frame was sent)."""
        self.tc.request(_RTM_NEWQDISC, 0, self.ifindex, self._open)
        if backlog_bytes <= 0 or self._kick is None:
            return False
        with contextlib.suppress(BlockingIOError, OSError):
            self._kick.send(KICK_FRAME)
            return True
        return False

    def restore(self) -> None:
        """Put the fabric's bfifo leaf back (drops whatever the TBF still holds)."""
        self.close_kick()
        if not self.installed:
            return
        self.tc.request(_RTM_DELQDISC, 0, self.ifindex, b"")
        self.tc.request(_RTM_NEWQDISC, _NLM_F_CREATE | _NLM_F_EXCL, self.ifindex,
                        _attr(_TCA_KIND, _TCA_FIFO_LIMIT_KIND)
                        + _attr(_TCA_OPTIONS, struct.pack("=I", self.restore_limit_bytes)))
        self.installed = False

    def close_kick(self) -> None:
        if self._kick is not None:
            self._kick.close()
            self._kick = None


_TCA_KIND_TBF = _attr(_TCA_KIND, b"tbf\0")

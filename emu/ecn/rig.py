"""A three-namespace rig to exercise one marked switch port (tests and benchmarks).

    sender ns  s0 ──veth── w0  switch ns (IPv4 forwarding)  w1 ──veth── r0  receiver ns
                                                           ^ HTB at rate_emu_bps over
                                                             bfifo(buffer) + ECN marker

The sender writes raw Ethernet frames (AF_PACKET) with the switch's MAC, so no
ARP is needed; the switch has a permanent neighbour entry for the receiver. r0
has no IP address, so the receiver's kernel drops every frame silently, while an
AF_PACKET socket captures it: the receiver parses the IP header itself (ECN
bits, header checksum), independently of the marker's own counters.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from scapy.utils import mac2str

from core.checksum import internet_checksum
from core.ecn import Thresholds
from core.frame import ROCE_UDP_PORT
from emu.ecn.bpf import attach_bpf_marker
from emu.netns import in_netns
from emu.ports import Port
from emu.runs import NamespaceSet
from emu.shaping import MTU_BYTES, port_qdisc_stats, shape_port

_ETH_P_IP = 0x0800
_SYSCTLS = {
    "net.ipv6.conf.all.disable_ipv6": 1, "net.ipv6.conf.default.disable_ipv6": 1,
    "net.ipv4.conf.all.rp_filter": 0, "net.ipv4.conf.default.rp_filter": 0,
}
SRC_IP, SW_IN_IP, SW_OUT_IP, DST_IP = "10.77.1.1", "10.77.1.2", "10.77.2.1", "10.77.2.2"


def _mac(ipr, ifname: str) -> bytes:
    link = ipr.get_links(ifname=ifname)[0]
    return mac2str(link.get_attr("IFLA_ADDRESS"))


@dataclass
class Received:
    """What the receiver saw, parsed from the wire."""

    ip_id: list[int] = field(default_factory=list)
    ecn: list[int] = field(default_factory=list)
    csum_ok: list[bool] = field(default_factory=list)
    length: list[int] = field(default_factory=list)


class MarkerRig:
    """Build with ``MarkerRig(tag, ...)`` (root), use, then ``close()``."""

    def __init__(self, tag: str, rate_emu_bps: float, buffer_bytes: int,
                 thresholds: Thresholds | None, trace: bool = False) -> None:
        # Registered and named like a fabric's, so `emu clean` reclaims a crashed rig.
        self.namespaces = NamespaceSet(f"marker rig {tag}")
        self.rate_emu_bps = rate_emu_bps
        self.buffer_bytes = buffer_bytes
        self.marker = None
        self._rx_thread: threading.Thread | None = None
        self._rx_stop = threading.Event()
        self.rx = Received()
        try:
            self._build(thresholds, trace)
        except BaseException:
            self.close()
            raise

    def _build(self, thresholds: Thresholds | None, trace: bool) -> None:
        ipr_s = self.namespaces.create("snd", _SYSCTLS)
        ipr_w = self.namespaces.create("sw", {**_SYSCTLS, "net.ipv4.ip_forward": 1})
        ipr_r = self.namespaces.create("rcv", _SYSCTLS)
        self.namespaces.veth("snd", "s0", "sw", "w0", mtu=MTU_BYTES)
        self.namespaces.veth("sw", "w1", "rcv", "r0", mtu=MTU_BYTES)
        self.w1_index = ipr_w.link_lookup(ifname="w1")[0]
        ipr_s.addr("add", index=ipr_s.link_lookup(ifname="s0")[0], address=SRC_IP, prefixlen=24)
        ipr_w.addr("add", index=ipr_w.link_lookup(ifname="w0")[0], address=SW_IN_IP, prefixlen=24)
        ipr_w.addr("add", index=self.w1_index, address=SW_OUT_IP, prefixlen=24)
        ipr_w.neigh("add", dst=DST_IP, lladdr=":".join(f"{b:02x}" for b in _mac(ipr_r, "r0")),
                    ifindex=self.w1_index, state=0x80)  # NUD_PERMANENT
        self.src_mac, self.sw_mac = _mac(ipr_s, "s0"), _mac(ipr_w, "w0")
        shape_port(ipr_w, self.w1_index, self.rate_emu_bps, self.buffer_bytes)
        if thresholds is not None:
            self.marker = attach_bpf_marker(self.namespaces.path("sw"), "w1", self.rate_emu_bps,
                                            self.buffer_bytes, thresholds,
                                            rtnl=self.namespaces.rtnls["sw"],
                                            ifindex=self.w1_index, trace=trace)
        with in_netns(self.namespaces.path("snd")):
            self.tx_sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.tx_sock.bind(("s0", 0))
        with in_netns(self.namespaces.path("rcv")):
            self.rx_sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_IP))
        self.rx_sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        self.rx_sock.bind(("r0", _ETH_P_IP))
        self.rx_sock.settimeout(0.05)

    @property
    def switch_ns(self) -> str:
        return self.namespaces.path("sw")

    @property
    def ipr_switch(self):
        return self.namespaces.iprs["sw"]

    def port(self) -> Port:
        """The marked port as the fabric would describe it (real rate = emulated here)."""
        return Port(node="sw", ifname="w1", ifindex=self.w1_index, netns_path=self.switch_ns,
                    peer_node="rcv", rate_bps=self.rate_emu_bps, rate_emu_bps=self.rate_emu_bps,
                    buffer_bytes=self.buffer_bytes, tier="test", is_switch=True, marker=self.marker)

    # --- traffic ---------------------------------------------------------------------

    def frame(self, ip_id: int, ecn: int, frame_bytes: int = 1000) -> bytes:
        """Ethernet + IPv4 (valid checksum, TTL 64) + UDP to port 4791 + zero payload."""
        ip_len = frame_bytes - 14
        hdr = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, ecn & 3, ip_len, ip_id & 0xFFFF, 0x4000,
                                    64, 17, 0, socket.inet_aton(SRC_IP), socket.inet_aton(DST_IP)))
        struct.pack_into("!H", hdr, 10, internet_checksum(bytes(hdr)))
        udp = struct.pack("!HHHH", 49152 + (ip_id & 0x3FFF), ROCE_UDP_PORT, ip_len - 20, 0)
        return self.sw_mac + self.src_mac + b"\x08\x00" + bytes(hdr) + udp + bytes(ip_len - 28)

    def send(self, frames: list[bytes], rate_pps: float | None = None) -> float:
        """Send frames, paced at ``rate_pps`` (None: as fast as possible); returns seconds."""
        t0 = time.perf_counter()
        for i, f in enumerate(frames):
            if rate_pps:
                due = t0 + i / rate_pps
                while (d := due - time.perf_counter()) > 0:
                    if d > 0.002:
                        time.sleep(d - 0.001)
            self.tx_sock.send(f)
        return time.perf_counter() - t0

    def send_sawtooth(self, frames: list[bytes], lower_bytes: float, upper_bytes: float) -> float:
        """Keep the marker's queue cycling between ``lower_bytes`` and ``upper_bytes``:
        send back to back until the queue exceeds ``upper_bytes``, then wait until it
        drains below ``lower_bytes``. Packets see queue depths spread over the band."""
        if self.marker is None:
            raise RuntimeError("send_sawtooth reads the marker's virtual queue")
        t0, i, filling = time.perf_counter(), 0, True
        while i < len(frames):
            q = self.marker.vq_bytes()
            if filling and q > upper_bytes:
                filling = False
            elif not filling and q < lower_bytes:
                filling = True
            if filling:
                self.tx_sock.send(frames[i])
                i += 1
            else:
                time.sleep(0.0005)
        return time.perf_counter() - t0

    def start_receiver(self) -> None:
        self.rx = Received()
        self._rx_stop.clear()
        self._rx_thread = threading.Thread(target=self._receive, daemon=True)
        self._rx_thread.start()

    def _receive(self) -> None:
        rx, sock = self.rx, self.rx_sock
        while not self._rx_stop.is_set():
            try:
                buf = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if len(buf) < 42 or buf[12:14] != b"\x08\x00" or buf[23] != 17:
                continue
            if struct.unpack_from("!H", buf, 36)[0] != ROCE_UDP_PORT:
                continue
            ip = buf[14:34]
            rx.ip_id.append(struct.unpack_from("!H", ip, 4)[0])
            rx.ecn.append(ip[1] & 3)
            rx.csum_ok.append(internet_checksum(ip) == 0)
            rx.length.append(len(buf))

    def stop_receiver(self, settle_s: float = 0.2) -> Received:
        """Wait for the port to drain (backlog 0) and stop capturing."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if port_qdisc_stats(self.ipr_switch, self.w1_index)["backlog_bytes"] == 0:
                break
            time.sleep(0.02)
        time.sleep(settle_s)
        self._rx_stop.set()
        if self._rx_thread is not None:
            self._rx_thread.join()
        return self.rx

    def wait_idle(self, timeout_s: float = 30) -> None:
        """Until the real queue and the virtual queue are both empty."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            busy = port_qdisc_stats(self.ipr_switch, self.w1_index)["backlog_bytes"] > 0
            if self.marker is not None:
                busy = busy or self.marker.vq_bytes() > 0
            if not busy:
                return
            time.sleep(0.02)
        raise TimeoutError("the port did not drain")

    def close(self) -> None:
        self._rx_stop.set()
        if self._rx_thread is not None:
            self._rx_thread.join(timeout=2)
        for s in ("tx_sock", "rx_sock"):
            with contextlib.suppress(AttributeError, OSError):
                getattr(self, s).close()
        if self.marker is not None:
            self.marker.close()
        self.namespaces.close()

    def __enter__(self) -> MarkerRig:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

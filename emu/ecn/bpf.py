"""The `bpf` ECN back end: compile, load and attach emu/bpf/marker.c; read and write its maps.

* Compile: ``clang -O2 -g -target bpf`` on first use into a cache keyed by the hash
  of the source and the compiler (never a committed binary); the object is checked
  (owner, mode, recorded sha256) before it is loaded, see :mod:`emu.cbuild`.
* Load: :func:`emu.bpfload.load_object`, one bpf_object per switch (`load_markers`:
  the verifier runs once per switch, 2 ms each), its maps sized to the switch's
  ports; each port has its own slot of them, found by its ifindex (isolated between
  ports by slot, between switches and fabrics by object).
* Attach: :func:`emu.bpfload.attach_clsact` on clsact egress, through an
  `emu.rtnl.Rtnl` bound to the port's namespace.
* Clean-up: nothing is pinned. After attaching we keep only the map fds we read
  (3 per port, each port its own duplicates) and close the object; the tc filter holds the program, the program
  holds its maps. Deleting the namespace (the veth) drops the filter, and closing
  our fds (or the process dying, also by SIGKILL) frees everything, so ``emu clean``
  only has to delete namespaces.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from core.ecn import Thresholds
from core.errors import ParameterError
from core.frame import FRAME_BYTES
from emu.bpfload import (
    BPF_F_LOCK,
    attach_clsact,
    detach_clsact,
    libbpf,
    load_object,
    program_id,
    update_elem,
)
from emu.cbuild import compile_c
from emu.rtnl import Rtnl
from emu.shaping import htb_burst_bytes

PROGRAM_NAME = "fabricemu_mark"
FILTER_NAME = "fabricemu_marker"
HIST_BUCKETS = 32
SCALE = 8_000_000_000  # scaled bytes per byte in the virtual queue (see marker.c)
FLAG_TRACE = 1
TRACE_ENTRIES = 65536
_U64_MAX = 2**64 - 1
#: The maps whose fds a port keeps open while it runs (the program's is closed once
#: attached); the trace map's too only with trace=True (tests).
MARKER_MAPS = ("cfg", "vq", "stats")


# --- map layouts (mirror marker.c) -------------------------------------------------

class _Cfg(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "rate_emu_bps", "max_delta_ns", "buffer_scaled", "burst_scaled", "kmin_scaled", "kmax_scaled",
        "kmin_bytes", "kmax_bytes", "pmax_q32", "hist_bucket_bytes", "flags",
        "int_rate_mbps", "int_scale", "overhead_bytes")]


class _VqState(ctypes.Structure):
    _fields_ = [("lock", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("vq_scaled", ctypes.c_uint64), ("t_last_ns", ctypes.c_uint64),
                ("tokens_scaled", ctypes.c_uint64), ("accepted_bytes", ctypes.c_uint64)]


class _Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "packets", "bytes", "ect_packets", "ce_marked", "ce_in", "drops")] + [
        ("hist", ctypes.c_uint64 * HIST_BUCKETS)]


# --- compilation --------------------------------------------------------------------

def marker_source() -> Path:
    return Path(__file__).resolve().parent.parent / "bpf" / "marker.c"


def compile_marker(out_dir: Path | None = None) -> Path:
    """Compile marker.c to an object file (cached, see :mod:`emu.cbuild`)."""
    return compile_c(marker_source(), "bpf", what="the bpf ECN marker", out_dir=out_dir)


# --- loading ------------------------------------------------------------------------

class VqRef(NamedTuple):
    """A port's virtual queue: its switch's marker ``vq`` map and the port's slot."""

    fd: int
    slot: int


@dataclass
class _Loaded:
    """One port's share of a switch's marker object: its own duplicates of the fds
    and its slot in the maps. ``prog_fd`` and ``slot_fd`` are closed once attached."""

    prog_fd: int
    prog_id: int
    cfg_fd: int
    vq_fd: int
    stats_fd: int
    slot_fd: int
    trace_fd: int = -1  # none without trace
    slot: int = 0


def load_markers(obj_path: Path, ports: int, trace: bool = False) -> list[_Loaded]:
    """Load one marker object for ``ports`` ports (a switch's); each its `_Loaded`."""
    if ports < 1:
        raise ParameterError("ports", ports, "a marker object serves at least one port")
    sizes = {name: ports for name in (*MARKER_MAPS, "slot_of")}
    fds = load_object(obj_path, PROGRAM_NAME, (*MARKER_MAPS, "slot_of", "trace"),
                      what="the ECN marker",
                      max_entries=sizes if trace else {**sizes, "trace": 1})
    prog, cfg, vq, stats, slot_of, trace_map = fds
    out: list[_Loaded] = []
    try:
        prog_id = program_id(prog)
        for slot in range(ports):
            out.append(_Loaded(os.dup(prog), prog_id, os.dup(cfg), os.dup(vq), os.dup(stats),
                               os.dup(slot_of), os.dup(trace_map) if trace else -1, slot))
    except BaseException:
        for loaded in out:
            close_loaded(loaded)
        raise
    finally:
        for fd in fds:
            os.close(fd)
    return out


def close_loaded(loaded: _Loaded) -> None:
    """Close a port's fds (the program's and its maps')."""
    for fd in (loaded.prog_fd, loaded.cfg_fd, loaded.vq_fd, loaded.stats_fd, loaded.slot_fd,
               loaded.trace_fd):
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


# --- the per-port handle ---------------------------------------------------------------

@dataclass(frozen=True)
class MarkerCounters:
    packets: int
    bytes: int
    ect_packets: int
    ce_marked: int
    ce_in: int
    drops: int
    hist: tuple[int, ...]
    hist_bucket_bytes: int


class PortMarker:
    """The marker of one port: its maps, thresholds, counters and detach.

    Use :func:`attach_bpf_marker` to make one.
    """

    def __init__(self, netns_path: str, ifname: str, ifindex: int, rate_emu_bps: float,
                 buffer_bytes: int, burst_bytes: int, thresholds: Thresholds,
                 hist_bucket_bytes: int, loaded: _Loaded, trace: bool,
                 overhead_bytes: int = 0) -> None:
        self.netns_path = netns_path
        self.ifname = ifname
        self.ifindex = ifindex
        self.rate_emu_bps = float(rate_emu_bps)
        self.buffer_bytes = int(buffer_bytes)
        self.burst_bytes = int(burst_bytes)
        self.thresholds = thresholds
        self.hist_bucket_bytes = int(hist_bucket_bytes)
        self.trace_enabled = trace
        self.overhead_bytes = int(overhead_bytes)
        # The program counts wire bytes (frame + overhead, as the shaper charges);
        # thresholds, buffer, histogram and readings are frame bytes, as a switch
        # counts its queue: converted at full frames, exact for the queues of data.
        self.wire_per_byte = (FRAME_BYTES + self.overhead_bytes) / FRAME_BYTES
        self.int_rate_mbps = 0          # INT off
        self.int_scale = 0
        self._fds: _Loaded | None = loaded
        self.prog_id = loaded.prog_id
        #: This port's entry in its switch's maps (the router reads ``vq`` at it).
        self.slot = loaded.slot

    # configuration
    def _write_cfg(self) -> None:
        t = self.thresholds
        rate = max(1, round(self.rate_emu_bps))

        def wire(n_bytes: int) -> int:
            return round(n_bytes * self.wire_per_byte)

        c = _Cfg(
            rate_emu_bps=rate,
            max_delta_ns=(_U64_MAX // 2) // rate,  # tokens + delta * rate must not overflow
            buffer_scaled=wire(self.buffer_bytes) * SCALE,
            burst_scaled=self.burst_bytes * SCALE,  # HTB's bucket: wire bytes already
            kmin_scaled=wire(t.kmin_bytes) * SCALE,
            kmax_scaled=wire(t.kmax_bytes) * SCALE,
            kmin_bytes=wire(t.kmin_bytes),
            kmax_bytes=wire(t.kmax_bytes),
            pmax_q32=round(t.pmax * 2**32),
            hist_bucket_bytes=wire(self.hist_bucket_bytes),
            flags=FLAG_TRACE if self.trace_enabled else 0,
            int_rate_mbps=self.int_rate_mbps,
            int_scale=self.int_scale,
            overhead_bytes=self.overhead_bytes,
        )
        self._update(self._fd("cfg_fd"), c)

    def set_rate(self, rate_emu_bps: float) -> None:
        """The port's shaper now drains at ``rate_emu_bps`` (a degraded link): the
        virtual queue drains at it too, with the HTB bucket of that rate."""
        self.rate_emu_bps = float(rate_emu_bps)
        self.burst_bytes = htb_burst_bytes(rate_emu_bps)
        self._write_cfg()

    def set_thresholds(self, thresholds: Thresholds) -> None:
        """Change Kmin/Kmax/Pmax at run time (takes effect with the next packet)."""
        if not isinstance(thresholds, Thresholds):
            raise ParameterError("thresholds", thresholds, "expected a Thresholds")
        self.thresholds = thresholds
        self._write_cfg()

    def enable_int(self, rate_bps: float, scale: float) -> None:
        """Write an INT record into every RoCEv2 data frame with room for it (HPCC,
        marker.c): this port's real line rate ``rate_bps``; times divided by ``scale``
        (S, which must be a whole number: the program divides integers)."""
        if not 1e6 <= rate_bps < 2**32 * 1e6:
            raise ParameterError("rate_bps", rate_bps, "INT records rates of 1 Mb/s .. 4 Pb/s")
        if not (scale >= 1 and float(scale).is_integer()):
            raise ParameterError("scale", scale, "in-band telemetry needs a whole-number S")
        self.int_rate_mbps = round(rate_bps / 1e6)
        self.int_scale = int(scale)
        self._write_cfg()

    def disable_int(self) -> None:
        """Stop writing INT records (from the next packet on)."""
        self.int_rate_mbps = 0
        self.int_scale = 0
        self._write_cfg()

    # reading
    def _fd(self, name: str) -> int:
        if self._fds is None:
            raise RuntimeError(f"marker of {self.ifname} is closed")
        return getattr(self._fds, name)

    def _update(self, fd: int, value: ctypes.Structure) -> None:
        update_elem(fd, ctypes.c_uint32(self.slot), value, "marker")

    def _vq_state(self) -> _VqState:
        st = _VqState()
        key = ctypes.c_uint32(self.slot)
        if libbpf().lib.bpf_map_lookup_elem_flags(
                self._fd("vq_fd"), ctypes.byref(key), ctypes.byref(st), BPF_F_LOCK) != 0:
            raise OSError(ctypes.get_errno(), "bpf_map_lookup_elem(vq)")
        return st

    def vq_ref(self) -> VqRef:
        """The port's virtual queue as adaptive routing reads it in the switch
        (emu/bpf/router.c); the fd is valid while the marker is open."""
        return VqRef(self._fd("vq_fd"), self.slot)

    def vq(self) -> tuple[int, int]:
        """Raw virtual queue: (bytes after the last packet, its CLOCK_MONOTONIC ns)."""
        st = self._vq_state()
        return round(st.vq_scaled / SCALE / self.wire_per_byte), st.t_last_ns

    def vq_bytes(self, now_ns: int | None = None) -> float:
        """Virtual queue now: the last state, drained by the bucket since the last packet."""
        st = self._vq_state()
        now_ns = time.monotonic_ns() if now_ns is None else now_ns  # bpf_ktime_get_ns clock
        avail = st.tokens_scaled + max(0, now_ns - st.t_last_ns) * self.rate_emu_bps
        return max(0.0, (st.vq_scaled - avail) / SCALE / self.wire_per_byte)

    def read_counters(self) -> MarkerCounters:
        """Counters summed over CPUs (the stats map is per-CPU: no atomics on the path)."""
        lb = libbpf()
        vals = (_Stats * lb.ncpus)()
        key = ctypes.c_uint32(self.slot)
        if lb.lib.bpf_map_lookup_elem(self._fd("stats_fd"), ctypes.byref(key), vals) != 0:
            raise OSError(ctypes.get_errno(), "bpf_map_lookup_elem(stats)")
        tot = {n: sum(getattr(v, n) for v in vals) for n, _ in _Stats._fields_ if n != "hist"}
        hist = tuple(sum(v.hist[i] for v in vals) for i in range(HIST_BUCKETS))
        return MarkerCounters(hist=hist, hist_bucket_bytes=self.hist_bucket_bytes, **tot)

    def counters(self) -> dict:
        """Counters as a dict (packets, bytes, ect_packets, ce_marked, ce_in, drops, hist)."""
        c = self.read_counters()
        return {"packets": c.packets, "bytes": c.bytes, "ect_packets": c.ect_packets,
                "ce_marked": c.ce_marked, "ce_in": c.ce_in, "drops": c.drops,
                "hist": list(c.hist), "hist_bucket_bytes": c.hist_bucket_bytes}

    def trace(self) -> dict[int, int]:
        """Debug (attach with trace=True): IPv4 id -> queue bytes the packet saw."""
        if not self.trace_enabled:
            raise RuntimeError("attach the marker with trace=True to record per-packet queues")
        lb = libbpf()
        out: dict[int, int] = {}
        key, val = ctypes.c_uint32(0), ctypes.c_uint32(0)
        fd = self._fd("trace_fd")
        for i in range(TRACE_ENTRIES):
            key.value = i
            if lb.lib.bpf_map_lookup_elem(fd, ctypes.byref(key), ctypes.byref(val)) == 0 and val.value:
                out[i] = val.value - 1
        return out

    # detach
    def detach(self, rtnl: Rtnl | None = None) -> None:
        """Remove the tc filter (if the port still exists) and release the maps."""
        if self._fds is None:
            return
        with contextlib.suppress(OSError), _rtnl_for(self.netns_path, rtnl) as r:
            detach_clsact(r, self.ifindex, ingress=False)
        self.close()

    def close(self) -> None:
        """Release our fds; an attached filter keeps marking until its veth goes away."""
        if self._fds is None:
            return
        close_loaded(self._fds)
        self._fds = None

    @property
    def closed(self) -> bool:
        return self._fds is None

    def __repr__(self) -> str:
        return (f"PortMarker({self.netns_path}:{self.ifname}, rate_emu_bps={self.rate_emu_bps:.0f}, "
                f"{self.thresholds})")


@contextlib.contextmanager
def _rtnl_for(netns_path: str, rtnl: Rtnl | None) -> Iterator[Rtnl]:
    if rtnl is not None:
        yield rtnl
        return
    with Rtnl.open(netns_path) as own:
        yield own


def default_hist_bucket_bytes(buffer_bytes: int) -> int:
    """Histogram of 32 equal buckets over the buffer (the last one open-ended)."""
    return max(1, -(-int(buffer_bytes) // HIST_BUCKETS))


def attach_bpf_marker(netns_path: str, ifname: str, rate_emu_bps: float, buffer_bytes: int,
                      thresholds: Thresholds, *, rtnl: Rtnl | None = None,
                      ifindex: int | None = None, burst_bytes: int | None = None,
                      hist_bucket_bytes: int | None = None, overhead_bytes: int = 0,
                      trace: bool = False, obj_path: Path | None = None,
                      loaded: _Loaded | None = None) -> PortMarker:
    """Load a marker for one port and attach it to the port's clsact egress hook.

    ``rate_emu_bps`` is the EMULATED rate the port is shaped to (R/S) and the
    virtual queue drains at; ``buffer_bytes`` and the thresholds are real bytes.
    Pass ``rtnl`` (an `emu.rtnl.Rtnl` bound to the namespace) and ``ifindex`` to
    avoid opening a netlink socket per port. ``burst_bytes`` is the port's HTB burst
    (default: what :func:`emu.shaping.shape_port` configures). ``overhead_bytes`` is
    what the shaper charges each packet beyond its length (Ethernet's preamble, FCS
    and gap); the virtual queue, its thresholds and INT's transmitted bytes count
    them too. ``trace`` records the queue each IPv4 packet saw by IP id (tests only:
    256 KiB per port). ``loaded``: the port's share of its switch's marker object
    (`load_markers`, loaded ahead by `emu.ecn.preload`); without it the port gets an
    object of its own.
    """
    try:
        if not 0 <= int(overhead_bytes) <= 64:
            raise ParameterError("overhead_bytes", overhead_bytes, "expected 0..64")
        if not rate_emu_bps > 0:
            raise ParameterError("rate_emu_bps", rate_emu_bps, "must be positive")
        if not int(buffer_bytes) > 0:
            raise ParameterError("buffer_bytes", buffer_bytes, "must be positive")
    except ParameterError:
        if loaded is not None:   # the port's from the call on
            close_loaded(loaded)
        raise
    if loaded is None:
        (loaded,) = load_markers(obj_path or compile_marker(), 1, trace)
    burst = htb_burst_bytes(rate_emu_bps) if burst_bytes is None else int(burst_bytes)
    marker = PortMarker(netns_path, ifname, ifindex or 0, rate_emu_bps, buffer_bytes, burst,
                        thresholds, hist_bucket_bytes or default_hist_bucket_bytes(buffer_bytes),
                        loaded, trace, overhead_bytes)
    try:
        marker._write_cfg()
        with _rtnl_for(netns_path, rtnl) as r:
            if not ifindex:
                found = r.links().get(ifname)
                if found is None:
                    raise ParameterError("ifname", ifname, f"no such interface in {netns_path}")
                marker.ifindex = found
            update_elem(loaded.slot_fd, ctypes.c_uint32(marker.ifindex),
                        ctypes.c_uint32(loaded.slot), "slot_of")
            attach_clsact(r, marker.ifindex, loaded.prog_fd, FILTER_NAME, ingress=False)
    except BaseException:
        marker.close()
        raise
    # The filter now holds the program, the program its maps: the fds only the
    # attach needed go.
    for name in ("prog_fd", "slot_fd"):
        with contextlib.suppress(OSError):
            os.close(getattr(loaded, name))
        setattr(loaded, name, -1)
    return marker



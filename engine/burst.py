"""Bursts of data frames: engine/csrc/roce_burst.c through ctypes, or plain Python.

The engine asks for ``count`` frames of one QP shape with consecutive PSNs and
one send timestamp; the compiled path patches them (the same bytes as
``roce.Shape.write``) and hands them to the kernel with one ``sendmmsg``, so a
frame costs the kernel's work plus a few ns instead of a Python call and a
syscall each. Without clang the pure-Python path does the same, slower.
"""

from __future__ import annotations

import ctypes
import errno
import socket
from pathlib import Path

from core.errors import CapabilityError
from emu.cbuild import compile_c
from traffic.roce import Shape

#: Frames beyond this wait for the next call (bounds the loop's latency to other work).
MAX_BURST = 64
_MAX_FRAME_BYTES = 9216
_NO_SOCKET = -1


class _CShape(ctypes.Structure):
    _fields_ = [("frame", ctypes.c_void_p), ("len", ctypes.c_uint32),
                ("ts_off", ctypes.c_uint32), ("window_end", ctypes.c_uint32),
                ("icrc_off", ctypes.c_uint32), ("prefix_crc", ctypes.c_uint32),
                ("rest_crc", ctypes.c_uint32), ("ackreq", ctypes.c_uint32),
                ("advance", ctypes.POINTER(ctypes.c_uint32))]


def source() -> Path:
    return Path(__file__).resolve().parent / "csrc" / "roce_burst.c"


class Burst:
    """Patch and send bursts; ``detail`` says which path is in use.

    ``send(sock, shape, psn, count, ts_ns)`` returns how many frames the kernel
    took; frames it refused are available from ``frame(i)`` until the next call.
    """

    def __init__(self, send_path: str = "auto"):
        """``send_path``: 'compiled' (required), 'python' (forced) or 'auto' (C if possible)."""
        self._lib = None
        self.detail = "python"
        if send_path != "python":
            try:
                self._lib = ctypes.CDLL(str(compile_c(source(), "shared",
                                                      what="the engine's burst sender")))
                if self._lib.roce_burst_max() < MAX_BURST:
                    raise CapabilityError("roce_burst.c was built with a smaller MAX_BURST")
                self._lib.roce_burst.restype = ctypes.c_int
                self._lib.roce_burst.argtypes = [
                    ctypes.c_int, ctypes.POINTER(_CShape), ctypes.c_void_p, ctypes.c_uint32,
                    ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32]
                self.detail = "sendmmsg (compiled)"
            except (CapabilityError, OSError) as e:
                if send_path == "compiled":
                    raise CapabilityError(f"compiled burst sender unavailable: {e}") from e
                self.detail = f"python ({str(e).splitlines()[0]})"
        self._buf = ctypes.create_string_buffer(MAX_BURST * _MAX_FRAME_BYTES)
        self._cshapes: dict[int, tuple[_CShape, object, Shape]] = {}
        self._tables: dict[int, tuple[ctypes.Array, object]] = {}
        self._last: tuple[int, int] | None = None  # (count, frame length)

    def prepare(self, shape: Shape) -> None:
        """Build ``shape``'s compiled view now (a worker does it for every QP before the
        run starts), so that a QP's first burst costs no more than any other."""
        if self._lib is not None:
            self._cshape(shape)

    def _cshape(self, shape: Shape) -> _CShape:
        entry = self._cshapes.get(id(shape))
        if entry is None or entry[2] is not shape:
            lay = shape.layout()
            # The CRC advance tables depend on the frame length only: one C copy per
            # table set (roce caches the sets), not per shape.
            key = id(lay.advance_tables[0])
            tables = self._tables.get(key)
            if tables is None or tables[1] is not lay.advance_tables[0]:
                tables = ((ctypes.c_uint32 * 1024)(*[v for t in lay.advance_tables for v in t]),
                          lay.advance_tables[0])
                self._tables[key] = tables
            # The prototype is the shape's own buffer (no copy per QP): C copies it
            # into each frame and patches every byte that Shape.write would.
            frame = (ctypes.c_char * len(shape.buf)).from_buffer(shape.buf)
            cs = _CShape(ctypes.addressof(frame), lay.frame_bytes, lay.ts_off,
                         lay.window_end, lay.icrc_off, lay.prefix_crc, lay.rest_crc, lay.ackreq,
                         tables[0])
            entry = (cs, frame, shape)  # keep the buffer view alive
            self._cshapes[id(shape)] = entry
        return entry[0]

    @property
    def compiled(self) -> bool:
        return self._lib is not None

    def shape_address(self, shape: Shape) -> int:
        """The address of ``shape``'s compiled view (kept alive here), for roce_tx.c."""
        return ctypes.addressof(self._cshape(shape))

    @property
    def buffer_address(self) -> int:
        return ctypes.addressof(self._buf)

    def wrote(self, count: int, frame_len: int) -> None:
        """Compiled code wrote ``count`` frames of ``frame_len`` bytes into the buffer
        (``frame(i)`` reads them back)."""
        self._last = (count, frame_len)

    def send(self, sock: socket.socket | None, shape: Shape, psn: int, count: int,
             ts_ns: int, ackreq_last: bool = False) -> int:
        """Send frames for PSNs ``psn .. psn+count-1``; 0 if the NIC queue refused the first.
        ``ackreq_last`` sets AckReq on the last one (the sender solicits an ACK)."""
        if not 0 < count <= MAX_BURST:
            raise ValueError(f"burst of {count} frames: expected 1..{MAX_BURST}")
        if len(shape.buf) > _MAX_FRAME_BYTES:
            raise ValueError(f"frame of {len(shape.buf)} bytes exceeds {_MAX_FRAME_BYTES}")
        self._last = (count, len(shape.buf))
        if self._lib is None:
            return self._send_python(sock, shape, psn, count, ts_ns, ackreq_last)
        n = self._lib.roce_burst(sock.fileno() if sock is not None else _NO_SOCKET,
                                 ctypes.byref(self._cshape(shape)), self._buf, psn, count, ts_ns,
                                 int(ackreq_last))
        if n < 0:
            if -n in (errno.EAGAIN, errno.ENOBUFS):
                return 0
            raise OSError(-n, errno.errorcode.get(-n, "send failed"))
        return n

    def _send_python(self, sock: socket.socket | None, shape: Shape, psn: int, count: int,
                     ts_ns: int, ackreq_last: bool) -> int:
        length = len(shape.buf)
        view = memoryview(self._buf).cast("B")
        for i in range(count):  # all frames first, as the compiled path does
            ackreq = 1 if ackreq_last and i == count - 1 else None  # None: the shape's
            view[i * length:(i + 1) * length] = shape.write((psn + i) & 0xFFFFFF, ts_ns, ackreq)
        if sock is None:
            return count
        for i in range(count):
            try:
                sock.send(view[i * length:(i + 1) * length])
            except (BlockingIOError, InterruptedError):
                return i
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                return i
        return count

    def frame(self, i: int) -> bytes:
        """Frame ``i`` of the last burst (for frames the kernel did not take, and tests)."""
        if self._last is None or not 0 <= i < self._last[0]:
            raise IndexError(f"no frame {i} in the last burst")
        length = self._last[1]
        return ctypes.string_at(ctypes.addressof(self._buf) + i * length, length)

"""Random frame loss on a link of a live fabric: emu/bpf/link_loss.c on the clsact
ingress of each end, for the frames the other end sends (the kernel here has no
netem). Each direction's filter keeps its own probability and drop count."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
from pathlib import Path
from typing import Any

from emu.bpfload import LINK_FILTER_PRIO, attach_clsact, detach_clsact, libbpf, load_object
from emu.cbuild import compile_c

FILTER_NAME = "fabricemu_loss"
_THRESHOLD_KEY, _DROPS_KEY = 0, 1


def loss_source() -> Path:
    return Path(__file__).resolve().parent / "bpf" / "link_loss.c"


def threshold_of(probability: float) -> int:
    """The filter drops a frame when a uniform 32-bit draw is below this."""
    return round(probability * 2**32)


class LinkLoss:
    """Loss filters on ``fab``'s links, by (receiving node, sending peer)."""

    def __init__(self, fab: Any) -> None:
        self.fab = fab
        self._maps: dict[tuple[str, str], int] = {}

    @staticmethod
    def available() -> bool:
        return shutil.which("clang") is not None

    def set(self, a: str, b: str, probability: float) -> None:
        """Frames crossing link a-b either way are lost with ``probability`` from now on."""
        for node, peer in ((a, b), (b, a)):
            fd = self._maps.get((node, peer))
            if fd is None:
                fd = self._attach(node, peer)
            self._write(fd, _THRESHOLD_KEY, threshold_of(probability))

    def _attach(self, node: str, peer: str) -> int:
        obj = compile_c(loss_source(), "bpf", what="link loss")
        prog_fd, map_fd = load_object(obj, "link_loss", ("loss_cfg",), what="link loss")
        try:
            ifindex = self.fab.port(node, peer).ifindex
            attach_clsact(self.fab.ipr(node), ifindex, prog_fd, FILTER_NAME, ingress=True,
                          prio=LINK_FILTER_PRIO)
        except BaseException:
            os.close(map_fd)
            raise
        finally:
            os.close(prog_fd)
        self._maps[(node, peer)] = map_fd
        return map_fd

    @staticmethod
    def _write(fd: int, key: int, value: int) -> None:
        k, v = ctypes.c_uint32(key), ctypes.c_uint64(value)
        if libbpf().lib.bpf_map_update_elem(fd, ctypes.byref(k), ctypes.byref(v), 0) != 0:
            raise OSError(ctypes.get_errno(), "bpf_map_update_elem(loss_cfg)")

    def drops(self) -> int:
        """Frames the filters dropped so far, all links together."""
        total = 0
        for fd in self._maps.values():
            k, v = ctypes.c_uint32(_DROPS_KEY), ctypes.c_uint64(0)
            if libbpf().lib.bpf_map_lookup_elem(fd, ctypes.byref(k), ctypes.byref(v)) == 0:
                total += v.value
        return total

    def clear(self) -> None:
        """Remove every filter this object attached."""
        for (node, peer), fd in self._maps.items():
            with contextlib.suppress(Exception):
                detach_clsact(self.fab.ipr(node), self.fab.port(node, peer).ifindex, ingress=True,
                              prio=LINK_FILTER_PRIO)
            os.close(fd)
        self._maps.clear()

"""Random frame loss on a link of a live fabric: emu/bpf/link_loss.c on the clsact
ingress of each end, for the frames the other end sends (the kernel here has no
netem). Each direction's filter keeps its own probability and drop count."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from emu.bpfload import LINK_FILTER_PRIO, attach_counted, detach_clsact, read_u64, write_u64

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
            write_u64(fd, _THRESHOLD_KEY, threshold_of(probability), "loss_cfg")

    def _attach(self, node: str, peer: str) -> int:
        fd = attach_counted(self.fab.rtnl(node), self.fab.port(node, peer).ifindex, loss_source(),
                            "link_loss", "loss_cfg", FILTER_NAME, ingress=True,
                            what="link loss", prio=LINK_FILTER_PRIO)
        self._maps[(node, peer)] = fd
        return fd

    def drops(self) -> int:
        """Frames the filters dropped so far, all links together."""
        return sum(read_u64(fd, _DROPS_KEY, "loss_cfg") for fd in self._maps.values())

    def clear(self) -> None:
        """Remove every filter this object attached."""
        for (node, peer), fd in self._maps.items():
            with contextlib.suppress(Exception):
                detach_clsact(self.fab.rtnl(node), self.fab.port(node, peer).ifindex, ingress=True,
                              prio=LINK_FILTER_PRIO)
            os.close(fd)
        self._maps.clear()

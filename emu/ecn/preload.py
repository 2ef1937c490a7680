"""The switches' eBPF markers loaded ahead, in a thread, while the fabric is built.

Loading a marker (`emu.ecn.bpf.load_markers`: one object per switch, each port a slot
of its maps) runs the kernel's verifier, about 2 ms per switch: 0.2 s for fattree,8's
80 switches, in the build's critical path. libbpf's calls release the GIL, so a thread
loads them while the builder creates the namespaces, links and shapers, on the other
CPU. It loads them all as fast as it can (their fds are counted in the build's fd
budget, `emu.fdbudget`): a loader held back until the builder reaches the shapers
would load them in the critical path again. The builder takes them in turn, one
switch at a time, in the order of ``ports``.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
from collections.abc import Callable, Sequence

from core.ecn import Thresholds
from emu.ecn.bpf import _Loaded, attach_bpf_marker, close_loaded, compile_marker, load_markers
from emu.ports import Port
from emu.rtnl import Rtnl


class MarkerPreload:
    """One marker object per entry of ``ports`` (a switch's marked ports) loaded in a
    thread; `take` the next switch's, `close` the rest."""

    def __init__(self, ports: Sequence[int]) -> None:
        self.obj_path = compile_marker()   # here: a compiler's error is the builder's
        self._ports = list(ports)
        self._taken = 0
        self._ready: queue.Queue[list[_Loaded] | BaseException] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._load, daemon=True,
                                        name="fabricemu-marker-preload")
        self._thread.start()

    def _load(self) -> None:
        # The verifier gives up (EAGAIN) when its task has a signal pending, and the
        # kernel may hand a process's signal (a lab's SIGALRM time limit) to any thread
        # that does not block it: this one blocks them all, the main thread handles them.
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        for count in self._ports:
            if self._stop.is_set():
                return
            try:
                self._ready.put(load_markers(self.obj_path, count))
            except BaseException as e:  # noqa: BLE001 - handed to the builder by `take`
                self._ready.put(e)
                return

    def take(self, ports: int) -> list[_Loaded]:
        """The next switch's markers, one per port (what failed to load raises here);
        loaded here once those loaded ahead are taken. ``ports`` must be the count the
        preload was given for this switch: a port given another switch's slot would
        share its state."""
        if self._taken == len(self._ports):
            return load_markers(self.obj_path, ports)
        if ports != self._ports[self._taken]:
            raise ValueError(f"switch {self._taken} of the preload has "
                             f"{self._ports[self._taken]} ports, not {ports}")
        self._taken += 1
        item = self._ready.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def attach(self, ports: Sequence[Port], thresholds_of: Callable[[Port], Thresholds],
               rtnl: Rtnl, overhead_bytes: int) -> None:
        """The next switch's markers (`take`) on its ``ports``, each port's
        ``port.marker``: a slot each, in order, with its thresholds."""
        loaded = self.take(len(ports))
        for i, port in enumerate(ports):
            try:
                port.marker = attach_bpf_marker(
                    port.netns_path, port.ifname, port.rate_emu_bps, port.buffer_bytes,
                    thresholds_of(port), rtnl=rtnl, ifindex=port.ifindex,
                    overhead_bytes=overhead_bytes, loaded=loaded[i])
            except BaseException:  # this port's own closed itself; the rest are closed
                for rest in loaded[i + 1:]:
                    close_loaded(rest)
                raise

    def close(self) -> None:
        """Stop loading and release whatever was loaded and not taken."""
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._ready.get_nowait()
                if isinstance(item, list):
                    for loaded in item:
                        close_loaded(loaded)

    def __enter__(self) -> MarkerPreload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
